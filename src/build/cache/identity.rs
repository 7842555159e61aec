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

/// The listing of what a build left in its cache folder `root`
/// (`contents.txt`): every entry below it by its path, sorted, a folder's
/// ending in `/` and a link's in `@` (links are not followed). The manifest,
/// the listing itself and their temporary files (`.tmp…`), written after
/// it, are left out.
pub(super) fn contents(root: &Path) -> Result<Vec<String>> {
    let mut listed = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
            let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if dir == root && (name == "build.json" || name == CONTENTS || name.starts_with(".tmp")) {
                continue;
            }
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let kind = entry.file_type().with_context(|| format!("cannot inspect {}", path.display()))?;
            if kind.is_dir() {
                listed.push(format!("{rel}/"));
                stack.push(path);
            } else if kind.is_symlink() {
                listed.push(format!("{rel}@"));
            } else {
                listed.push(rel);
            }
        }
    }
    listed.sort();
    Ok(listed)
}

/// The file in a build's cache folder that lists what its build made.
pub(super) const CONTENTS: &str = "contents.txt";

/// What lies in the cache folder `root` that its build did not make, and
/// what it made that is gone, against the listing whose SHA-256 its
/// manifest records (`recorded`); `None` when it holds just what it did.
/// A trial's processes can still write there (an upstream test runs in the
/// build's `test/` folder, as upstream runs it; a trial may write anywhere
/// its user may), so the next run names what they left.
pub(super) fn left_in_cache(root: &Path, recorded: &str) -> Result<Option<String>> {
    let now = contents(root)?;
    let text = now.join("\n");
    if files::hex(&Sha256::digest(text.as_bytes())) == recorded {
        return Ok(None);
    }
    let listing = root.join(CONTENTS);
    let then = std::fs::read_to_string(&listing).unwrap_or_default();
    if files::hex(&Sha256::digest(then.as_bytes())) != recorded {
        return Ok(Some(format!(
            "holds other entries than its build made, and its listing {} is not the one build.json records, so they cannot be named",
            listing.display()
        )));
    }
    let made: std::collections::BTreeSet<&str> = then.lines().collect();
    let there: std::collections::BTreeSet<&str> = now.iter().map(String::as_str).collect();
    let preview = |names: Vec<&&str>| {
        let shown: Vec<&str> = names.iter().take(5).map(|n| **n).collect();
        match names.len().saturating_sub(5) {
            0 => shown.join(", "),
            more => format!("{}, and {more} more", shown.join(", ")),
        }
    };
    let left: Vec<&&str> = there.difference(&made).collect();
    let gone: Vec<&&str> = made.difference(&there).collect();
    let mut said = Vec::new();
    if !left.is_empty() {
        said.push(format!(
            "holds {} entries its build did not make (a trial, whose working folder it once was, or another program left them): {}",
            left.len(),
            preview(left)
        ));
    }
    if !gone.is_empty() {
        said.push(format!("lacks {} entries its build made: {}", gone.len(), preview(gone)));
    }
    Ok(Some(said.join("; ")))
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
