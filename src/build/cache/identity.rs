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
/// (`contents.txt`): [`LISTING`], then every entry below it by its path,
/// sorted, a folder's ending in `/`, a link's in `@` (links are not
/// followed), a file's followed by a tab, its size, a tab and its
/// modification time in nanoseconds: a file edited in place is told apart.
/// The manifest, the listing itself and their temporary files (`.tmp…`),
/// written after it, are left out.
pub(super) fn listing(root: &Path) -> Result<String> {
    Ok(format!("{LISTING}\n{}", contents(root)?.join("\n")))
}

/// The first line of a listing that records files' sizes and times; an
/// older ccl-coverage's listing, names alone, lacks it.
const LISTING: &str = "# ccl-coverage build contents: path, then a file's size and modification time (ns)";

fn contents(root: &Path) -> Result<Vec<String>> {
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
                let meta = entry.metadata().with_context(|| format!("cannot inspect {}", path.display()))?;
                let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                listed.push(format!("{rel}\t{}\t{}", meta.len(), mtime.map_or(0, |t| t.as_nanos())));
            }
        }
    }
    listed.sort();
    Ok(listed)
}

/// The file in a build's cache folder that lists what its build made.
pub(super) const CONTENTS: &str = "contents.txt";

/// What lies in the cache folder `root` that its build did not make, what
/// it made that is gone, and which of its files changed size or time,
/// against the listing whose SHA-256 its manifest records (`recorded`);
/// `None` when it holds just what it did. An older listing, names alone,
/// is compared by name.
/// A trial's processes can still write there (an upstream test runs in the
/// build's `test/` folder, as upstream runs it; a trial may write anywhere
/// its user may), so the next run names what they left.
pub(super) fn left_in_cache(root: &Path, recorded: &str) -> Result<Option<String>> {
    let text = listing(root)?;
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
    let sized = then.starts_with(LISTING);
    // Each entry's name, and its line (the name alone in an older listing).
    let entries = |lines: std::str::Lines<'_>, sized: bool| -> std::collections::BTreeMap<String, String> {
        lines
            .skip(usize::from(sized))
            .map(|line| {
                let name = match line.rsplitn(3, '\t').collect::<Vec<_>>()[..] {
                    [time, size, name] if time.parse::<u128>().is_ok() && size.parse::<u64>().is_ok() => name,
                    _ => line,
                };
                (name.to_string(), if sized { line.to_string() } else { name.to_string() })
            })
            .collect()
    };
    let made = entries(then.lines(), sized);
    let there = entries(text.lines(), true);
    let there = if sized { there } else { there.into_keys().map(|name| (name.clone(), name)).collect() };
    let preview = |names: Vec<&String>| {
        let shown: Vec<&str> = names.iter().take(5).map(|n| n.as_str()).collect();
        match names.len().saturating_sub(5) {
            0 => shown.join(", "),
            more => format!("{}, and {more} more", shown.join(", ")),
        }
    };
    let left: Vec<&String> = there.keys().filter(|name| !made.contains_key(*name)).collect();
    let gone: Vec<&String> = made.keys().filter(|name| !there.contains_key(*name)).collect();
    let changed: Vec<&String> = made
        .iter()
        .filter(|(name, line)| there.get(*name).is_some_and(|now| now != *line))
        .map(|(name, _)| name)
        .collect();
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
    if !changed.is_empty() {
        said.push(format!(
            "holds {} files its build made whose size or modification time changed since: {}",
            changed.len(),
            preview(changed)
        ));
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
