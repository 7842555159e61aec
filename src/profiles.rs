//! Raw profiles and merging them. `llvm-profdata merge -sparse` reads its
//! inputs from a list file, never from argv (thousands of profiles overflow a
//! command line).

use crate::error::{Error, Result};
use crate::process::Cmd;
use crate::results::TrialResult;
use crate::toolchain::Toolchain;
use crate::workspace::{self, Workspace};
use std::path::{Path, PathBuf};

/// The raw profiles of one trial.
#[derive(Debug, Clone)]
pub struct TrialProfiles {
    pub trial: String,
    pub slug: String,
    pub files: Vec<PathBuf>,
}

/// Raw profiles of the trials in `results`, sorted for reproducible merges.
pub fn collect(ws: &Workspace, results: &[TrialResult]) -> Result<Vec<TrialProfiles>> {
    let mut all = Vec::new();
    for result in results {
        let dir = ws.trial_profiles(&result.slug);
        let mut files = Vec::new();
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.extension().is_some_and(|e| e == "profraw") && path.is_file() {
                        files.push(path);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::new(format!("cannot list {}: {e}", dir.display()))),
        }
        files.sort();
        all.push(TrialProfiles { trial: result.trial.clone(), slug: result.slug.clone(), files });
    }
    Ok(all)
}

/// Merges `inputs` into the indexed profile `output`.
pub fn merge(toolchain: &Toolchain, inputs: &[PathBuf], list_file: &Path, output: &Path) -> Result<()> {
    let list: String = inputs.iter().map(|p| format!("{}\n", p.display())).collect();
    workspace::write_atomic(list_file, list.as_bytes())?;
    Cmd::new(toolchain.llvm_profdata.path.display().to_string())
        .args(["merge", "-sparse"])
        .arg(format!("--input-files={}", list_file.display()))
        .arg("-o")
        .arg(output.display().to_string())
        .env_remove(crate::launch::PROFILE_INIT_ONCE)
        .read()
        .map(drop)
}
