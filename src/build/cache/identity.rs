//! What makes a build's inputs the same build: the content hash of a file,
//! the listing of a folder, and the hash of a source tree. The build key and
//! the manifest's check that the sources are unchanged both use them.

use crate::bail;
use crate::error::{Context as _, Result};
use crate::workspace::files;
use sha2::{Digest, Sha256};
use std::path::Path;

/// A file's identity for the build key: its content hash, so a rebuild in
/// place gives a new build id and retires the old profiles.
pub(super) fn file_identity(path: &Path) -> Result<String> {
    Ok(format!("{} {}", path.display(), files::sha256_file(path)?))
}

/// A folder's identity: its files' names, sizes and modification times.
pub(super) fn dir_identity(dir: &Path) -> Result<String> {
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {} (CCL_COV_TESTS_DIR or tests.existing_bin_dir)", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let mtime = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
            Some(format!("{} {} {mtime}", e.file_name().to_string_lossy(), meta.len()))
        })
        .collect();
    entries.sort();
    Ok(format!("{} {}", dir.display(), entries.join(";")))
}

/// A hash of every file under `root` (paths and contents), leaving out hidden
/// entries and the top-level names in `exclude`.
pub(crate) fn hash_tree(root: &Path, exclude: &[String]) -> Result<String> {
    if !root.is_dir() {
        bail!("source folder {} does not exist", root.display());
    }
    let mut hasher = Sha256::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(std::result::Result::ok)
            .collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries.into_iter().rev() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') || (dir == root && exclude.contains(&name)) {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let meta =
                std::fs::symlink_metadata(&path).with_context(|| format!("cannot inspect {}", path.display()))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                hasher.update(format!("L {rel} {}\0", target.display()).as_bytes());
            } else {
                let data = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
                hasher.update(format!("F {rel} {}\0", data.len()).as_bytes());
                hasher.update(&data);
            }
        }
    }
    Ok(files::hex(&hasher.finalize()))
}
