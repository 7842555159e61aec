//! Whether the run that owns a trial's processes is alive, decided by a
//! lock, never by a pid.
//!
//! A pid means nothing outside its PID namespace: a harness under `unshare
//! --pid` (or in a container sharing the host) is pid 43 to itself and
//! another process, or none, to a run beside it. So each process that starts
//! trials holds an exclusive `flock` on `<state>/owners/<id>.lock` for its
//! whole life, `<id>` being random; the kernel drops the lock when the
//! process dies, in whatever namespace it lived. A trial's token names the
//! id ([`Owner::token`]), and a later run treats the token's processes as
//! left behind only when it can take that lock itself ([`liveness`]). A lock
//! file that is missing, not a regular file or unreadable decides nothing:
//! such processes are never swept.
//!
//! The same holds for a trial's supervisor: it locks the `.lock` beside its
//! record of the trial's processes ([`create_locked`]).

use crate::error::{Context, Error, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What the owner's lock file says of it, for messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OwnerInfo {
    /// Its pid, as it saw itself (in its own PID namespace).
    pub(crate) pid: u32,
    /// Its PID namespace (the inode of `/proc/self/ns/pid`).
    pub(crate) pid_ns: u64,
    pub(crate) command: String,
    pub(crate) started_at: String,
}

impl OwnerInfo {
    pub(crate) fn me() -> OwnerInfo {
        OwnerInfo {
            pid: std::process::id(),
            pid_ns: pid_namespace(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started_at: crate::exec::host::now(),
        }
    }
}

/// This process as the owner of the trials it starts.
#[derive(Debug)]
pub(crate) struct Owner {
    id: String,
    path: PathBuf,
    /// Held (locked) for the life of the process.
    _lock: File,
}

static OWNER: OnceLock<Owner> = OnceLock::new();

impl Owner {
    /// Registers this process as an owner in `state_dir` (once; a second
    /// call returns the first registration).
    pub(crate) fn register(state_dir: &Path) -> Result<&'static Owner> {
        if let Some(owner) = OWNER.get() {
            return Ok(owner);
        }
        let dir = state_dir.join("owners");
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let id = random_id()?;
        let path = dir.join(format!("{id}.lock"));
        let lock = create_locked(&path, &OwnerInfo::me())?;
        let _ = OWNER.set(Owner { id, path, _lock: lock });
        Ok(OWNER.get().expect("just set"))
    }

    /// The registered owner, if this process registered.
    pub(crate) fn get() -> Option<&'static Owner> {
        OWNER.get()
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// A new trial token: `<owner id>-<n>`.
    pub(crate) fn token(&self) -> String {
        token_of(&self.id)
    }

    /// Removes the lock file; the lock itself goes with the process.
    pub(crate) fn unregister(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A new trial token for this process. Every run registers first
/// (`harness::prepare_workspace`); a process that did not (a unit test) gets
/// an id with no lock file, whose processes no later run would ever sweep:
/// the safe side.
pub(crate) fn new_token() -> String {
    static UNREGISTERED: OnceLock<String> = OnceLock::new();
    match Owner::get() {
        Some(owner) => owner.token(),
        None => token_of(UNREGISTERED.get_or_init(|| random_id().unwrap_or_else(|_| "0".repeat(ID_BYTES * 2)))),
    }
}

/// `<id>-<n>`, `n` counting the tokens of this process.
fn token_of(id: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!("{id}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The owner id a token names, if it has the shape [`Owner::token`] gives.
pub(crate) fn token_owner(token: &str) -> Option<&str> {
    let (id, n) = token.rsplit_once('-')?;
    let hex = id.len() == ID_BYTES * 2 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && n.parse::<u64>().is_ok()).then_some(id)
}

/// Where the lock of owner `id` is, under `state_dir`.
pub(crate) fn owner_lock(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("owners").join(format!("{id}.lock"))
}

/// What a lock file says of its holder.
#[derive(Debug)]
pub(crate) enum Liveness {
    /// Its holder runs (the lock is held).
    Alive,
    /// Its holder is gone: the lock was free and is now held by the caller
    /// until the [`Gone`] is dropped.
    Gone(Gone),
    /// Nothing can be decided (no such file, not a regular file, unreadable).
    Unknown,
}

/// The lock of an owner that is gone, held by the caller.
#[derive(Debug)]
pub(crate) struct Gone {
    pub(crate) info: OwnerInfo,
    path: PathBuf,
    _lock: File,
}

impl Gone {
    /// Removes the lock file: nothing of its owner is left to sweep.
    pub(crate) fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the holder of the lock at `path` is alive.
pub(crate) fn liveness(path: &Path) -> Liveness {
    use std::os::unix::fs::OpenOptionsExt;
    let file = File::options().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY).open(path);
    let Ok(file) = file else { return Liveness::Unknown };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Liveness::Unknown;
    }
    match file.try_lock() {
        Err(TryLockError::WouldBlock) => Liveness::Alive,
        Err(TryLockError::Error(_)) => Liveness::Unknown,
        Ok(()) => {
            let info = std::io::read_to_string(&file)
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default();
            Liveness::Gone(Gone { info, path: path.to_path_buf(), _lock: file })
        }
    }
}

/// Creates `path` holding `info` and already locked (exclusively) by the
/// returned file: it is written and locked under a temporary name, then
/// renamed, so nobody ever opens it unlocked and takes its holder for dead.
pub(crate) fn create_locked(path: &Path, info: &impl Serialize) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let cannot = |e: std::io::Error| Error::from(e).context(format_args!("cannot create {}", path.display()));
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = File::options()
        .write(true)
        .read(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(cannot)?;
    let locked = file
        .try_lock()
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|()| file.write_all(&serde_json::to_vec(info).expect("serializes")))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = locked {
        let _ = std::fs::remove_file(&tmp);
        return Err(cannot(e));
    }
    Ok(file)
}

/// This process's PID namespace, as the inode of `/proc/self/ns/pid` (0 if
/// unknown): pids are compared only between processes of one namespace.
pub(crate) fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

const ID_BYTES: usize = 16;

fn random_id() -> Result<String> {
    let mut bytes = [0u8; ID_BYTES];
    rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty())
        .context("cannot draw a random owner id")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_alive_a_free_one_gone_and_a_missing_one_decides_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = create_locked(&path, &OwnerInfo::me()).unwrap();
        assert!(matches!(liveness(&path), Liveness::Alive));
        drop(held);
        // A child another test thread forks holds a copy of the descriptor
        // (and so the lock) until it execs: wait that out, boundedly.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = liveness(&path);
        while matches!(seen, Liveness::Alive) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            seen = liveness(&path);
        }
        match seen {
            Liveness::Gone(gone) => {
                assert_eq!(gone.info.pid, std::process::id());
                assert!(matches!(liveness(&path), Liveness::Alive), "the sweeper holds it now");
                gone.remove();
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(liveness(&path), Liveness::Unknown));
        std::fs::create_dir(&path).unwrap();
        assert!(matches!(liveness(&path), Liveness::Unknown), "a folder decides nothing");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("l.lock")).unwrap();
        assert!(matches!(liveness(&dir.path().join("l.lock")), Liveness::Unknown), "nor a link");
    }

    #[test]
    fn tokens_name_their_owner_and_nothing_else_parses_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Owner::register(dir.path()).unwrap();
        let token = owner.token();
        assert_eq!(token_owner(&token), Some(owner.id.as_str()));
        assert_ne!(owner.token(), token, "every trial gets its own token");
        for odd in ["", "1234-5678-0", "run-supervised-1-2", &format!("{}-x", owner.id), &owner.id] {
            assert_eq!(token_owner(odd), None, "{odd}");
        }
    }
}
