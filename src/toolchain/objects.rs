//! Whether an object file is instrumented, read from its ELF sections rather
//! than guessed from a file name or a CMake cache: coverage mapping lives in
//! `__llvm_covmap`/`__llvm_covfun`, counters in `__llvm_prf_cnts`. This works
//! for host objects and for AMDGPU device code objects alike.

use crate::error::{Context, Result};
use object::{Object, ObjectSection};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Instrumentation {
    pub(crate) coverage_mapping: bool,
    pub(crate) counters: bool,
}

impl Instrumentation {
    /// Both mapping and counters: llvm-cov can report on it.
    pub(crate) fn is_instrumented(self) -> bool {
        self.coverage_mapping && self.counters
    }
}

/// Reads the section table of the ELF file at `path`.
pub(crate) fn inspect(path: &Path) -> Result<Instrumentation> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not an object file llvm-cov can read", path.display()))?;
    let mut found = Instrumentation::default();
    for section in file.sections() {
        match section.name().unwrap_or_default() {
            "__llvm_covmap" | "__llvm_covfun" => found.coverage_mapping = true,
            "__llvm_prf_cnts" => found.counters = true,
            _ => {}
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_binary_is_not_instrumented() {
        let found = inspect(Path::new("/bin/sh")).unwrap();
        assert!(!found.is_instrumented());
    }

    /// Committed test data, built from `instrumented.c` beside it (the command is in that file).
    #[test]
    fn an_instrumented_object_is_recognised() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/objects/instrumented.o");
        let found = inspect(&path).unwrap();
        assert_eq!(found, Instrumentation { coverage_mapping: true, counters: true });
        assert!(found.is_instrumented());
    }

    #[test]
    fn non_elf_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("device-gfx942.elf");
        std::fs::write(&path, "not an elf").unwrap();
        let err = inspect(&path).unwrap_err().to_string();
        assert!(err.contains("device-gfx942.elf is not an object file"), "{err}");
    }
}
