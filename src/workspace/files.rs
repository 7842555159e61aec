//! The workspace's file helpers, which every stage that writes uses: atomic
//! writes, folders, lock files that are never truncated, SHA-256 digests, and
//! the modes everything the harness creates gets.

use super::confined::{open_regular, umask_bits};
use crate::error::{Context, Error, Result};
use std::fs;
use std::path::Path;

pub(crate) fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// The SHA-256 of a file, in hex: recorded when a profile is written and
/// checked before a report uses it. Only a regular file is read
/// ([`open_regular`]); files of the workspace are read
/// through it instead ([`super::Workspace::sha256`]).
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    sha256_of(open_regular(path)?, path)
}

/// The SHA-256 of what `file` (opened from `path`) holds, in hex.
pub(crate) fn sha256_of(mut file: fs::File, path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    // On the stack: a report hashes thousands of profiles, and a buffer of
    // 1 MiB from the heap was mapped, zeroed and unmapped for each.
    let mut buffer = [0u8; 64 << 10];
    loop {
        let n =
            std::io::Read::read(&mut file, &mut buffer).with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// What a file was when it was recorded, to tell later whether it still is:
/// size, modification and change times first (cheap), the hash only when a
/// time differs (a copy or a `touch` changes one without changing the
/// bytes). The change time cannot be set back the way the modification time
/// can (`touch -d`), so a file overwritten in place with its modification
/// time put back is hashed, and found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileSum {
    pub(crate) bytes: u64,
    pub(crate) mtime_ns: u64,
    /// 0 in records of older versions: such a file is always hashed.
    #[serde(default)]
    pub(crate) ctime_ns: u64,
    pub(crate) sha256: String,
}

impl FileSum {
    pub(crate) fn of(path: &Path) -> Result<FileSum> {
        let (bytes, mtime_ns, ctime_ns) = size_and_times(path)?;
        Ok(FileSum { bytes, mtime_ns, ctime_ns, sha256: sha256_file(path)? })
    }

    /// Why `path` is not the file recorded; `None` when it is.
    pub(crate) fn differs(&self, path: &Path) -> Option<String> {
        let (bytes, mtime_ns, ctime_ns) = match size_and_times(path) {
            Ok(found) => found,
            Err(e) => return Some(e.to_string()),
        };
        if bytes != self.bytes {
            return Some(format!("{} has {bytes} bytes, not the {} it was built with", path.display(), self.bytes));
        }
        if mtime_ns == self.mtime_ns && ctime_ns == self.ctime_ns && ctime_ns != 0 {
            return None;
        }
        match sha256_file(path) {
            Ok(sum) if sum == self.sha256 => None,
            Ok(sum) => {
                Some(format!("{} changed after it was built (SHA-256 {sum}, built as {})", path.display(), self.sha256))
            }
            Err(e) => Some(e.to_string()),
        }
    }
}

/// Size, modification time and change time (nanoseconds) of the file at `path`.
fn size_and_times(path: &Path) -> Result<(u64, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let ns = |s: i64, n: i64| u64::try_from(s).unwrap_or(0).saturating_mul(1_000_000_000).saturating_add(n as u64);
    Ok((meta.len(), ns(meta.mtime(), meta.mtime_nsec()), ns(meta.ctime(), meta.ctime_nsec())))
}

/// A log's text, with bytes that are not UTF-8 replaced: a program may print
/// anything, and one stray byte must not hide the rest of its output.
/// Empty when the file cannot be read.
pub(crate) fn read_lossy(path: &Path) -> String {
    fs::read(path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default()
}

/// Bytes as lowercase hex: digests in records and cache keys, random markers.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Opens (creating it if needed, never truncating) a file that is only ever
/// `flock`ed: the workspace lock, the build cache's lock and the GPU slots.
pub(crate) fn open_lock_file(path: &Path) -> Result<fs::File> {
    fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

/// Writes `contents` to `path` atomically (temporary file, then rename), so a
/// reader never sees half a file even if the run is interrupted.
pub(crate) fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| Error::new(format!("{} has no parent folder", path.display())))?;
    create_dir(dir)?;
    let mut tmp =
        tempfile::NamedTempFile::new_in(dir).with_context(|| format!("cannot create a file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, contents).with_context(|| format!("cannot write {}", path.display()))?;
    // A temporary file is created 0600; give it the mode any other file gets.
    let mode = 0o666 & !umask_bits();
    tmp.as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    tmp.persist(path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
