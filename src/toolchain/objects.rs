//! Whether an object file is instrumented, read from its ELF sections rather
//! than guessed from a file name or a CMake cache: coverage mapping lives in
//! `__llvm_covmap`/`__llvm_covfun`, counters in `__llvm_prf_cnts`. This works
//! for host objects and for AMDGPU device code objects alike.

use crate::error::{Context, Result};
use object::{Object, ObjectSection};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    inspect_with_id(path).map(|(found, _)| found)
}

/// The instrumentation of the ELF file at `path`, and its build ID
/// (`NT_GNU_BUILD_ID`, lower-case hex): the ID the profile runtime writes
/// into every raw profile of that binary, which `llvm-profdata show
/// --binary-ids` prints and an indexed profile keeps.
pub(crate) fn inspect_with_id(path: &Path) -> Result<(Instrumentation, Option<String>)> {
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
    let id = file.build_id().ok().flatten().filter(|id| !id.is_empty()).map(crate::workspace::files::hex);
    Ok((found, id))
}

/// An instrumented program or shared library a build made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) path: PathBuf,
    pub(crate) instrumentation: Instrumentation,
    pub(crate) build_id: Option<String>,
}

/// Files larger than this are not read while looking for instrumented
/// binaries: no program a test suite runs is that large, and reading a
/// build folder's every archive would cost more than the build.
const DISCOVERY_MAX_BYTES: u64 = 4 << 30;

/// Every instrumented ELF executable or shared library under `roots`
/// (linked files only: an object file or archive writes no profile), found
/// by its sections, with its build ID; sorted by path, each once. Links are
/// never followed (a library's `libx.so -> libx.so.1` chain is found once,
/// as its file), and the walk keeps its own stack, so a deep tree cannot
/// overflow the harness's. A folder that cannot be read is skipped, and so
/// is CMake's `CMakeFiles/` (compiler checks, not the project's programs).
pub(crate) fn discover(roots: &[&Path]) -> Vec<Found> {
    let mut found: BTreeMap<PathBuf, Found> = BTreeMap::new();
    let mut pending: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if kind.is_dir() {
                // CMake's own scratch: its compiler checks are linked with the
                // project's flags, and are rewritten at every configure.
                if entry.file_name() != "CMakeFiles" {
                    pending.push(path);
                }
            } else if kind.is_file()
                && !found.contains_key(&path)
                && is_linked_elf(&path)
                && let Ok((instrumentation, build_id)) = inspect_with_id(&path)
                && instrumentation.is_instrumented()
            {
                found.insert(path.clone(), Found { path, instrumentation, build_id });
            }
        }
    }
    found.into_values().collect()
}

/// Whether `path` starts as a 64- or 32-bit ELF executable or shared object
/// (`e_type` 2 or 3), read from its first 18 bytes.
fn is_linked_elf(path: &Path) -> bool {
    use std::io::Read;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return false };
    if meta.len() > DISCOVERY_MAX_BYTES || meta.len() < 64 {
        return false;
    }
    let mut head = [0u8; 18];
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    if file.read_exact(&mut head).is_err() || &head[..4] != b"\x7fELF" {
        return false;
    }
    let e_type = match head[5] {
        1 => u16::from_le_bytes([head[16], head[17]]),
        2 => u16::from_be_bytes([head[16], head[17]]),
        _ => return false,
    };
    matches!(e_type, 2 | 3)
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

    /// Independent oracle: `llvm-readelf -n` prints the build ID, and
    /// discovery finds the linked, instrumented files only (not the object
    /// file, the plain program or a link to the library).
    #[test]
    fn discovery_finds_linked_instrumented_binaries_with_the_build_id_readelf_prints() {
        let bin = Path::new("/usr/lib/llvm-22/bin");
        if !bin.join("clang").is_file() {
            assert!(std::env::var_os("CI").is_none(), "clang 22 is missing under CI");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(d.join("CMakeFiles/3.25.1")).unwrap();
        std::fs::write(d.join("lib.c"), "int lib_f(int x) { return x > 1 ? 2 * x : x; }\n").unwrap();
        std::fs::write(
            d.join("main.c"),
            "int lib_f(int);\nint main(int c, char **v) { (void)v; return lib_f(c) - 2; }\n",
        )
        .unwrap();
        let cc = |args: &[&str]| {
            let status = std::process::Command::new(bin.join("clang")).current_dir(d).args(args).status().unwrap();
            assert!(status.success(), "{args:?}");
        };
        let cov = ["-fprofile-instr-generate", "-fcoverage-mapping"];
        cc(&[&cov[..], &["-shared", "-fPIC", "lib.c", "-o", "sub/libl.so.1"]].concat());
        cc(&[&cov[..], &["-c", "main.c", "-o", "sub/main.o"]].concat());
        cc(&[&cov[..], &["main.c", "sub/libl.so.1", "-o", "sub/deeper/prog"]].concat());
        cc(&["main.c", "sub/libl.so.1", "-o", "plain"]);
        cc(&[&cov[..], &["main.c", "sub/libl.so.1", "-o", "CMakeFiles/3.25.1/CMakeDetermineCompilerABI_C.bin"]]
            .concat());
        std::os::unix::fs::symlink("libl.so.1", d.join("sub/libl.so")).unwrap();
        let found = discover(&[d]);
        let paths: Vec<&Path> = found.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, [d.join("sub/deeper/prog"), d.join("sub/libl.so.1")]);
        for f in &found {
            let out = std::process::Command::new(bin.join("llvm-readelf")).arg("-n").arg(&f.path).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let id = text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("readelf prints a build ID");
            assert_eq!(f.build_id.as_deref(), Some(id.trim()), "{}", f.path.display());
        }
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
