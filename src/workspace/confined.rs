//! Every create, write, read, rename and delete under the workspace goes
//! through a handle on the workspace folder ([`Beneath`]): a path is resolved
//! from that handle with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so
//! no component of it may be a symlink (planted before the run or swapped in
//! during it) and nothing resolves outside the folder; the last step (create,
//! unlink, rename) is made relative to the handle of the folder that holds
//! it. A link is refused and named, never followed. Kernels without
//! `openat2` (before 5.6, or a seccomp filter that answers `ENOSYS` or
//! `EPERM`) get the same walk, one component at a time with `O_NOFOLLOW`.
//!
//! A file the harness reads is opened `O_NONBLOCK` (a FIFO planted in place
//! of a record must not hang the open) and must then be a regular file.

use crate::error::{Context, Error, Result};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// What an entry is, read without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Dir,
    Link,
    /// A FIFO, socket or device: never a file of the harness's.
    Other(&'static str),
}

impl EntryKind {
    fn of(t: FileType) -> EntryKind {
        match t {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Link,
            FileType::Fifo => EntryKind::Other("a FIFO"),
            FileType::Socket => EntryKind::Other("a socket"),
            FileType::CharacterDevice => EntryKind::Other("a character device"),
            FileType::BlockDevice => EntryKind::Other("a block device"),
            FileType::Unknown => EntryKind::Other("of an unknown kind"),
        }
    }

    /// `a folder`, `a symlink`, `a FIFO`: what a refusal says it found.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            EntryKind::File => "a regular file",
            EntryKind::Dir => "a folder",
            EntryKind::Link => "a symlink",
            EntryKind::Other(what) => what,
        }
    }
}

/// What an operation does, for its messages.
#[derive(Debug, Clone, Copy)]
enum Op {
    Read,
    Write,
    Create,
    Delete,
    Move,
}

impl Op {
    fn verb(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Create => "create",
            Op::Delete => "delete",
            Op::Move => "move",
        }
    }
}

/// No link, no `..`, no absolute link, no `/proc` magic link, at any step.
fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Set once `openat2` answered `ENOSYS`: the walk is used from then on.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The bits taken away from the modes of everything the harness and its
/// trials create: the user's umask, always with group and world write.
static UMASK: AtomicU32 = AtomicU32::new(0o022);

/// The bits taken away from every mode the harness creates.
pub(crate) fn umask_bits() -> u32 {
    UMASK.load(Ordering::SeqCst)
}

/// Adds group and world write to the process umask (keeping whatever else it
/// takes away), so that no file or folder of the workspace, the build or a
/// trial is world-writable whatever the umask the harness started with.
pub(crate) fn restrict_umask() {
    use rustix::fs::Mode;
    let old = rustix::process::umask(Mode::from_raw_mode(0o022));
    let mask = old.bits() | 0o022;
    rustix::process::umask(Mode::from_raw_mode(mask));
    UMASK.store(mask, Ordering::SeqCst);
}

/// The mode bits the harness takes away ([`restrict_umask`]).
fn umask() -> u32 {
    umask_bits()
}

fn dir_mode() -> Mode {
    Mode::from_raw_mode(0o777 & !umask())
}

fn file_mode() -> Mode {
    Mode::from_raw_mode(0o666 & !umask())
}

/// The workspace folder, opened without following a link, and its path for
/// messages. Every path given to it must lie under it.
pub(crate) struct Beneath {
    fd: OwnedFd,
    root: PathBuf,
}

impl Beneath {
    /// Opens the folder `root` itself (which must not be a symlink).
    pub(crate) fn open(root: &Path) -> Result<Beneath> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::open(root, flags, Mode::empty()) {
            Ok(fd) => Ok(Beneath { fd, root: root.to_path_buf() }),
            // O_DIRECTORY is checked first: a link to a folder answers ENOTDIR.
            Err(Errno::LOOP | Errno::NOTDIR) if std::fs::symlink_metadata(root).is_ok_and(|m| m.is_symlink()) => {
                Err(Error::new(format!(
                    "refusing to use {}: it is a symlink (the harness follows no link in its workspace)",
                    root.display()
                )))
            }
            Err(e) => Err(Error::from(e).context(format_args!("cannot open the workspace {}", root.display()))),
        }
    }

    /// `path` relative to the root: it must be the root or lie under it
    /// (after `.` and `..` are taken out lexically).
    fn relative(&self, op: Op, path: &Path) -> Result<PathBuf> {
        let path = super::normalize(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.components().all(|c| matches!(c, Component::Normal(_))) => Ok(rel.to_path_buf()),
            _ => Err(Error::new(format!(
                "refusing to {} {}: it is not inside the workspace {}",
                op.verb(),
                path.display(),
                self.root.display()
            ))),
        }
    }

    fn shown(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() { self.root.clone() } else { self.root.join(rel) }
    }

    /// Opens `rel` (relative to the root) with `flags`, no link followed.
    fn resolve(&self, rel: &Path, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
        let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
        let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            match rfs::openat2(&self.fd, rel, flags, mode, resolve_flags()) {
                Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // EAGAIN: a rename elsewhere raced the lookup. EPERM: an older container
                // seccomp profile that denies calls it does not know; the walk then decides.
                Err(Errno::AGAIN | Errno::PERM) => return self.walk(rel, flags, mode),
                other => return other,
            }
        }
        self.walk(rel, flags, mode)
    }

    /// [`Self::resolve`] without `openat2`: one component at a time, each
    /// opened with `O_NOFOLLOW` and checked to be a folder.
    fn walk(&self, rel: &Path, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
        let parts: Vec<&std::ffi::OsStr> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(p) => Some(Ok(p)),
                Component::CurDir => None,
                _ => Some(Err(Errno::XDEV)),
            })
            .collect::<rustix::io::Result<_>>()?;
        let path_only = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = rfs::openat(&self.fd, ".", path_only, Mode::empty())?;
        let Some((last, dirs)) = parts.split_last() else {
            return rfs::openat(&self.fd, ".", flags & !OFlags::NOFOLLOW, mode);
        };
        for part in dirs {
            dir = match rfs::openat(&dir, *part, path_only, Mode::empty()) {
                Ok(next) if rfs::fstat(&next).map(|s| FileType::from_raw_mode(s.st_mode))? == FileType::Symlink => {
                    return Err(Errno::LOOP);
                }
                Ok(next) => next,
                Err(Errno::NOTDIR) if is_link_at(&dir, part) => return Err(Errno::LOOP),
                Err(e) => return Err(e),
            };
        }
        let fd = rfs::openat(&dir, *last, flags, mode)?;
        if flags.contains(OFlags::PATH) && FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode) == FileType::Symlink {
            return Err(Errno::LOOP);
        }
        Ok(fd)
    }

    /// The error for `op` on `rel` that failed with `e`: a link on the way is
    /// named (and its target), as is a component that is not a folder.
    /// A walk of the tree at `rel` that stopped: at its top, as any other
    /// error; below, naming the tree and where the walk stopped.
    fn stuck(&self, op: Op, rel: &Path, stuck: &Stuck) -> Error {
        if stuck.depth == 0 && !stuck.moved {
            return self.error(op, rel, stuck.errno);
        }
        Error::new(format!("cannot {} the folder tree {}: {}", op.verb(), self.shown(rel).display(), stuck.describe()))
    }

    fn error(&self, op: Op, rel: &Path, e: Errno) -> Error {
        let path = self.shown(rel);
        if matches!(e, Errno::LOOP | Errno::XDEV | Errno::NOTDIR)
            && let Some((at, kind)) = self.first_odd_component(rel)
        {
            let shown = self.shown(&at);
            let target = match kind {
                EntryKind::Link => rfs::readlinkat(&self.fd, &at, Vec::new())
                    .map(|t| format!(" (to {})", t.to_string_lossy()))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            return Error::new(format!(
                "refusing to {} {}: {} is {}{target}; the harness follows no link in its workspace and writes only in folders of its own (remove it)",
                op.verb(),
                path.display(),
                shown.display(),
                kind.describe()
            ));
        }
        Error::new(format!("cannot {} {}: {}", op.verb(), path.display(), std::io::Error::from(e)))
    }

    /// The first component of `rel` that is a link, or (before the last) not
    /// a folder.
    fn first_odd_component(&self, rel: &Path) -> Option<(PathBuf, EntryKind)> {
        let parts: Vec<_> = rel.components().collect();
        let mut at = PathBuf::new();
        for (i, part) in parts.iter().enumerate() {
            at.push(part);
            let kind = match rfs::statat(&self.fd, &at, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => EntryKind::of(FileType::from_raw_mode(stat.st_mode)),
                Err(_) => return None,
            };
            if kind == EntryKind::Link || (i + 1 < parts.len() && kind != EntryKind::Dir) {
                return Some((at, kind));
            }
        }
        None
    }

    /// The folder `rel`, opened for `*at` calls.
    fn dir(&self, op: Op, rel: &Path) -> Result<OwnedFd> {
        self.resolve(rel, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).map_err(|e| self.error(op, rel, e))
    }

    /// `rel` split into its folder and its name; the root has no name.
    fn split<'p>(&self, op: Op, rel: &'p Path) -> Result<(&'p Path, &'p std::ffi::OsStr)> {
        match (rel.parent(), rel.file_name()) {
            (Some(parent), Some(name)) => Ok((parent, name)),
            _ => Err(Error::new(format!(
                "refusing to {} the workspace folder {} itself",
                op.verb(),
                self.root.display()
            ))),
        }
    }

    /// What `path` is, without following it; `None` when nothing is there.
    pub(crate) fn kind(&self, path: &Path) -> Result<Option<EntryKind>> {
        let rel = self.relative(Op::Read, path)?;
        let Ok((parent, name)) = self.split(Op::Read, &rel) else { return Ok(Some(EntryKind::Dir)) };
        let dir = match self.resolve(parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
            Ok(dir) => dir,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.error(Op::Read, &rel, e)),
        };
        kind_at(&dir, name).map_err(|e| self.error(Op::Read, &rel, e))
    }

    /// Creates the folder `path` and every folder above it up to the root,
    /// each a real folder (an existing link is refused).
    pub(crate) fn create_dir_all(&self, path: &Path) -> Result<()> {
        let rel = self.relative(Op::Create, path)?;
        self.make_dirs(&rel).map(drop)
    }

    /// [`Self::create_dir_all`], returning the folder's handle.
    fn make_dirs(&self, rel: &Path) -> Result<OwnedFd> {
        match self.dir(Op::Create, rel) {
            Ok(fd) => return Ok(fd),
            Err(e) if !matches!(self.resolve(rel, OFlags::PATH, Mode::empty()), Err(Errno::NOENT)) => return Err(e),
            Err(_) => {}
        }
        let mut at = PathBuf::new();
        let mut dir = self.dir(Op::Create, &at)?;
        for part in rel.components() {
            at.push(part);
            match rfs::mkdirat(&dir, part.as_os_str(), dir_mode()) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(self.error(Op::Create, &at, e)),
            }
            dir = rfs::openat(
                &dir,
                part.as_os_str(),
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .and_then(|fd| match rfs::fstat(&fd).map(|s| FileType::from_raw_mode(s.st_mode))? {
                FileType::Directory => Ok(fd),
                FileType::Symlink => Err(Errno::LOOP),
                _ => Err(Errno::NOTDIR),
            })
            .map_err(|e| self.error(Op::Create, &at, e))?;
        }
        Ok(dir)
    }

    /// Writes `contents` to `path` atomically: a new file beside it, then a
    /// rename over it. The folders are created as needed; the file itself
    /// must not be a link or a folder.
    pub(crate) fn write_atomic(&self, path: &Path, contents: &[u8]) -> Result<()> {
        use std::io::Write;
        let rel = self.relative(Op::Write, path)?;
        let (parent, name) = self.split(Op::Write, &rel)?;
        let dir = self.make_dirs(parent)?;
        match kind_at(&dir, name).map_err(|e| self.error(Op::Write, &rel, e))? {
            None | Some(EntryKind::File) => {}
            Some(kind) => return Err(self.refused(Op::Write, &rel, kind)),
        }
        let (tmp, file) = temp_file(&dir, name).map_err(|e| self.error(Op::Write, &rel, e))?;
        let mut file = File::from(file);
        let written = file
            .write_all(contents)
            .and_then(|()| {
                file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(file_mode().as_raw_mode()))
            })
            .with_context(|| format!("cannot write {}", path.display()))
            .and_then(|()| rfs::renameat(&dir, &tmp, &dir, name).map_err(|e| self.error(Op::Write, &rel, e)));
        if written.is_err() {
            let _ = rfs::unlinkat(&dir, &tmp, AtFlags::empty());
        }
        written
    }

    fn refused(&self, op: Op, rel: &Path, kind: EntryKind) -> Error {
        let target = match kind {
            EntryKind::Link => rfs::readlinkat(&self.fd, rel, Vec::new())
                .map(|t| format!(" (to {})", t.to_string_lossy()))
                .unwrap_or_default(),
            _ => String::new(),
        };
        Error::new(format!(
            "refusing to {} {}: it is {}{target}, not a file the harness wrote; the harness follows no link in its workspace (remove it)",
            op.verb(),
            self.shown(rel).display(),
            kind.describe()
        ))
    }

    /// Creates the regular file `path` anew and writes `contents`: a log's
    /// head, to which its trial then appends. A new file renamed over the
    /// old one, never the old one truncated: a hard link planted there to a
    /// file outside the workspace would be written through.
    pub(crate) fn write_new(&self, path: &Path, contents: &[u8]) -> Result<()> {
        self.write_atomic(path, contents)
    }

    /// Opens the regular file `path` for reading. Opened `O_NONBLOCK`, so a
    /// FIFO cannot hang it, and refused unless it is a regular file.
    pub(crate) fn open_read(&self, path: &Path) -> Result<File> {
        let rel = self.relative(Op::Read, path)?;
        self.open_read_opt(path)?.ok_or_else(|| self.error(Op::Read, &rel, Errno::NOENT))
    }

    /// [`Self::open_read`], `None` when nothing is there.
    pub(crate) fn open_read_opt(&self, path: &Path) -> Result<Option<File>> {
        let rel = self.relative(Op::Read, path)?;
        let fd = match self.resolve(&rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.error(Op::Read, &rel, e)),
        };
        match fd_kind(&fd).map_err(|e| self.error(Op::Read, &rel, e))? {
            EntryKind::File => {
                rfs::fcntl_setfl(&fd, OFlags::empty()).map_err(|e| self.error(Op::Read, &rel, e))?;
                Ok(Some(File::from(fd)))
            }
            kind => Err(self.refused(Op::Read, &rel, kind)),
        }
    }

    /// Opens (creating it if needed, never truncating) a regular file that is
    /// only `flock`ed.
    pub(crate) fn open_lock(&self, path: &Path) -> Result<File> {
        let rel = self.relative(Op::Write, path)?;
        let (parent, _) = self.split(Op::Write, &rel)?;
        self.make_dirs(parent)?;
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NONBLOCK;
        let fd = self.resolve(&rel, flags, file_mode()).map_err(|e| self.error(Op::Write, &rel, e))?;
        match fd_kind(&fd).map_err(|e| self.error(Op::Write, &rel, e))? {
            EntryKind::File => Ok(File::from(fd)),
            kind => Err(self.refused(Op::Write, &rel, kind)),
        }
    }

    /// The entries of the folder `path` and what each is (not followed);
    /// `None` when it does not exist.
    pub(crate) fn list(&self, path: &Path) -> Result<Option<Vec<(OsString, EntryKind)>>> {
        let rel = self.relative(Op::Read, path)?;
        let fd = match self.resolve(&rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(self.error(Op::Read, &rel, e)),
        };
        let entries = entries(&fd).map_err(|e| self.error(Op::Read, &rel, e))?;
        let mut out = Vec::with_capacity(entries.len());
        for name in entries {
            if let Some(kind) = kind_at(&fd, &name).map_err(|e| self.error(Op::Read, &rel.join(&name), e))? {
                out.push((name, kind));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(out))
    }

    /// Removes what is inside the folder `path` (which stays): files and
    /// links are unlinked (a link's target is never touched), folders
    /// emptied the same way and removed.
    pub(crate) fn empty(&self, path: &Path) -> Result<()> {
        let rel = self.relative(Op::Delete, path)?;
        let fd = self
            .resolve(&rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| self.error(Op::Delete, &rel, e))?;
        empty_dir(&fd).map_err(|stuck| self.stuck(Op::Delete, &rel, &stuck))
    }

    /// Removes the entry `path`: a file, a link (not its target) or a folder
    /// tree. A missing one is fine.
    pub(crate) fn remove(&self, path: &Path) -> Result<()> {
        let rel = self.relative(Op::Delete, path)?;
        let (parent, name) = self.split(Op::Delete, &rel)?;
        let dir = match self.resolve(parent, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()) {
            Ok(dir) => dir,
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(self.error(Op::Delete, &rel, e)),
        };
        match remove_at(&dir, name) {
            Ok(()) => Ok(()),
            Err(Stuck { errno: Errno::NOENT, depth: 0, .. }) => Ok(()),
            Err(stuck) => Err(self.stuck(Op::Delete, &rel, &stuck)),
        }
    }

    /// Moves `from` to `to`, both under the root (the folders of `to` are
    /// created). Neither may be a link: the move would carry a planted link
    /// into a folder the harness trusts.
    pub(crate) fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.move_entry(from, to, false)
    }

    /// [`Self::rename`] of whatever lies at `from`, a link or a FIFO too
    /// (moved as it is, never opened nor followed): into quarantine.
    pub(crate) fn rename_any(&self, from: &Path, to: &Path) -> Result<()> {
        self.move_entry(from, to, true)
    }

    fn move_entry(&self, from: &Path, to: &Path, any: bool) -> Result<()> {
        let (from_dir, from_name, from_rel) = self.entry_dir(Op::Move, from)?;
        match kind_at(&from_dir, &from_name).map_err(|e| self.error(Op::Move, &from_rel, e))? {
            None => return Err(self.error(Op::Move, &from_rel, Errno::NOENT)),
            Some(EntryKind::Link) if !any => return Err(self.refused(Op::Move, &from_rel, EntryKind::Link)),
            Some(_) => {}
        }
        let to_rel = self.relative(Op::Move, to)?;
        let (to_parent, to_name) = self.split(Op::Move, &to_rel)?;
        let to_dir = self.make_dirs(to_parent)?;
        if kind_at(&to_dir, to_name).map_err(|e| self.error(Op::Move, &to_rel, e))? == Some(EntryKind::Link) {
            return Err(self.refused(Op::Move, &to_rel, EntryKind::Link));
        }
        rfs::renameat(&from_dir, &from_name, &to_dir, to_name)
            .with_context(|| format!("cannot move {} to {}", from.display(), to.display()))
    }

    /// The folder holding `path`, its name there, and `path` relative to the root.
    fn entry_dir(&self, op: Op, path: &Path) -> Result<(OwnedFd, OsString, PathBuf)> {
        let rel = self.relative(op, path)?;
        let (parent, name) = self.split(op, &rel)?;
        let dir = self.dir(op, parent)?;
        Ok((dir, name.to_os_string(), rel))
    }

    /// Exchanges `a` and `b` in one step (`renameat2(RENAME_EXCHANGE)`);
    /// `Ok(false)` where the filesystem cannot.
    pub(crate) fn exchange(&self, a: &Path, b: &Path) -> Result<bool> {
        let (a_dir, a_name, a_rel) = self.entry_dir(Op::Move, a)?;
        let (b_dir, b_name, b_rel) = self.entry_dir(Op::Move, b)?;
        for (dir, name, rel) in [(&a_dir, &a_name, &a_rel), (&b_dir, &b_name, &b_rel)] {
            match kind_at(dir, name).map_err(|e| self.error(Op::Move, rel, e))? {
                Some(EntryKind::Dir) => {}
                Some(kind) => return Err(self.refused(Op::Move, rel, kind)),
                None => return Err(self.error(Op::Move, rel, Errno::NOENT)),
            }
        }
        match rfs::renameat_with(&a_dir, &a_name, &b_dir, &b_name, rfs::RenameFlags::EXCHANGE) {
            Ok(()) => Ok(true),
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => Ok(false),
            Err(e) => Err(Error::new(format!(
                "cannot exchange {} with {}: {}",
                a.display(),
                b.display(),
                std::io::Error::from(e)
            ))),
        }
    }

    /// Gives the folder `path` and everything under it `dir_mode` and
    /// `file_mode` (links are left alone): tools such as llvm-cov create
    /// theirs with modes of their own.
    pub(crate) fn set_modes(&self, path: &Path) -> Result<()> {
        let rel = self.relative(Op::Write, path)?;
        let fd = self
            .resolve(&rel, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| self.error(Op::Write, &rel, e))?;
        set_modes_under(&fd).map_err(|stuck| self.stuck(Op::Write, &rel, &stuck))
    }
}

/// What `name` in `dir` is, not followed; `None` when nothing is there.
fn kind_at(dir: &impl AsFd, name: &std::ffi::OsStr) -> rustix::io::Result<Option<EntryKind>> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => Ok(Some(EntryKind::of(FileType::from_raw_mode(stat.st_mode)))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_link_at(dir: &impl AsFd, name: &std::ffi::OsStr) -> bool {
    matches!(kind_at(dir, name), Ok(Some(EntryKind::Link)))
}

fn fd_kind(fd: &impl AsFd) -> rustix::io::Result<EntryKind> {
    Ok(EntryKind::of(FileType::from_raw_mode(rfs::fstat(fd)?.st_mode)))
}

/// A new file beside `name` in `dir`, created `O_EXCL` under a name no one
/// else uses.
fn temp_file(dir: &impl AsFd, name: &std::ffi::OsStr) -> rustix::io::Result<(OsString, OwnedFd)> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut last = Errno::EXIST;
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".{}-{n}-{nanos:x}.tmp", std::process::id()));
        match rfs::openat(dir, &tmp, flags, file_mode()) {
            Ok(fd) => return Ok((tmp, fd)),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// The names in the folder `fd` (opened for reading), `.` and `..` left out.
fn entries(fd: &OwnedFd) -> rustix::io::Result<Vec<OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let dup = rfs::openat(fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut dir = rfs::Dir::new(dup)?;
    let mut names = Vec::new();
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(names)
}

/// Unlinks everything in the folder `fd`, folders emptied first; a folder
/// is opened `O_NOFOLLOW`, so one swapped for a link is refused, not followed.
fn empty_dir(fd: &OwnedFd) -> std::result::Result<(), Stuck> {
    walk_tree(
        fd,
        |dir, name, kind| match kind {
            EntryKind::Dir => Ok(true),
            _ => unlink_missing_ok(dir, name, AtFlags::empty()).map(|()| false),
        },
        |_| Ok(()),
        |dir, name| unlink_missing_ok(dir, name, AtFlags::REMOVEDIR),
    )
}

fn unlink_missing_ok(dir: &OwnedFd, name: &std::ffi::OsStr, flags: AtFlags) -> rustix::io::Result<()> {
    match rfs::unlinkat(dir, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes `name` in `dir`: a folder with everything in it, anything else unlinked.
fn remove_at(dir: &impl AsFd, name: &std::ffi::OsStr) -> std::result::Result<(), Stuck> {
    let at_top = |errno| Stuck { errno, depth: 0, name: name.to_os_string(), moved: false };
    match kind_at(dir, name).map_err(at_top)? {
        None => Ok(()),
        Some(EntryKind::Dir) => {
            let sub = rfs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(at_top)?;
            empty_dir(&sub)?;
            rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).map_err(at_top)
        }
        Some(_) => rfs::unlinkat(dir, name, AtFlags::empty()).map_err(at_top),
    }
}

/// Why a walk of a folder tree stopped, and where: how deep below the folder
/// it started from, and the entry's name there. What is not yet done stays.
#[derive(Debug)]
struct Stuck {
    errno: Errno,
    depth: usize,
    name: OsString,
    /// A folder on the way back up is no longer the one the walk went down
    /// through: the tree was moved while it was walked.
    moved: bool,
}

impl Stuck {
    /// The sentence a message ends with: what went wrong, and where.
    fn describe(&self) -> String {
        let at = format!("{} at depth {}", self.name.to_string_lossy(), self.depth);
        if self.moved {
            format!("the folder tree was moved while it was walked (at {at}), so the rest is left where it is")
        } else {
            format!("{} (at {at}); the rest is left where it is", std::io::Error::from(self.errno))
        }
    }
}

/// Folders of a walk kept open at once, the deepest ones: any deeper tree is
/// walked back up through `..`, each step checked against the folder the walk
/// went down through, so no limit on open files is reached however deep.
const OPEN_LEVELS: usize = 64;

/// One folder of a walk: its handle (closed when it is far from the
/// deepest), its identity (device, inode), its name in its parent, and the
/// names in it still to visit.
struct Level {
    fd: Option<OwnedFd>,
    id: (u64, u64),
    name: OsString,
    pending: Vec<OsString>,
}

impl Level {
    fn of(fd: OwnedFd, name: OsString) -> rustix::io::Result<Level> {
        let stat = rfs::fstat(&fd)?;
        let pending = entries(&fd)?;
        Ok(Level { id: (stat.st_dev, stat.st_ino), fd: Some(fd), name, pending })
    }
}

/// Walks the tree under the folder `top` depth first, in a loop with its own
/// stack, never recursing on the call stack: a tree 100,000 folders deep,
/// which a trial can leave, is walked in bounded stack and open files.
/// `entry(dir, name, kind)` is called for each entry, and says whether to go
/// into it (a folder, opened `O_NOFOLLOW`: one swapped for a link is refused);
/// `enter(folder)` once a folder is opened; `leave(dir, name)` once
/// everything under the folder `name` of `dir` was visited.
fn walk_tree(
    top: &OwnedFd,
    mut entry: impl FnMut(&OwnedFd, &std::ffi::OsStr, EntryKind) -> rustix::io::Result<bool>,
    mut enter: impl FnMut(&OwnedFd) -> rustix::io::Result<()>,
    mut leave: impl FnMut(&OwnedFd, &std::ffi::OsStr) -> rustix::io::Result<()>,
) -> std::result::Result<(), Stuck> {
    let stuck = |errno, depth, name: &std::ffi::OsStr| Stuck { errno, depth, name: name.to_os_string(), moved: false };
    let own = rfs::openat(top, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .and_then(|fd| Level::of(fd, OsString::from(".")))
        .map_err(|e| stuck(e, 0, std::ffi::OsStr::new(".")))?;
    let mut levels = vec![own];
    loop {
        let depth = levels.len();
        let Some(level) = levels.last_mut() else { break };
        if let Some(name) = level.pending.pop() {
            // The deepest level is always open: pushed open, or reopened below.
            let Some(fd) = level.fd.as_ref() else { return Err(stuck(Errno::BADF, depth, &level.name)) };
            let into = (|| {
                let Some(kind) = kind_at(fd, &name)? else { return Ok(None) };
                if !entry(fd, &name, kind)? {
                    return Ok(None);
                }
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                let sub = rfs::openat(fd, &name, flags, Mode::empty())?;
                enter(&sub)?;
                Level::of(sub, name.clone()).map(Some)
            })()
            .map_err(|e| stuck(e, depth, &name))?;
            if let Some(sub) = into {
                levels.push(sub);
                let far = levels.len().saturating_sub(OPEN_LEVELS + 1);
                if far > 0 {
                    levels[far].fd = None;
                }
            }
            continue;
        }
        let Some(done) = levels.pop() else { break };
        let Some(parent) = levels.last_mut() else { break };
        let fail = |e| stuck(e, depth - 1, &done.name);
        if parent.fd.is_none() {
            let Some(below) = done.fd.as_ref() else { return Err(fail(Errno::BADF)) };
            let up = rfs::openat(below, "..", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(fail)?;
            let stat = rfs::fstat(&up).map_err(fail)?;
            if (stat.st_dev, stat.st_ino) != parent.id {
                return Err(Stuck { moved: true, ..fail(Errno::STALE) });
            }
            parent.fd = Some(up);
        }
        if let Some(dir) = parent.fd.as_ref() {
            leave(dir, &done.name).map_err(fail)?;
        }
    }
    Ok(())
}

/// Gives the folder `fd` and everything under it `dir_mode` and `file_mode`
/// (links and other entries left alone).
fn set_modes_under(fd: &OwnedFd) -> std::result::Result<(), Stuck> {
    rfs::fchmod(fd, dir_mode()).map_err(|errno| Stuck { errno, depth: 0, name: ".".into(), moved: false })?;
    walk_tree(
        fd,
        |dir, name, kind| match kind {
            EntryKind::Dir => Ok(true),
            EntryKind::File => {
                let file = rfs::openat(
                    dir,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                if fd_kind(&file)? == EntryKind::File {
                    rfs::fchmod(&file, file_mode())?;
                }
                Ok(false)
            }
            _ => Ok(false),
        },
        |dir| rfs::fchmod(dir, dir_mode()),
        |_, _| Ok(()),
    )
}

/// Deletes the file, link (not its target) or folder tree at `path`, which
/// lies outside any workspace (a cached build): walked in a loop as
/// [`Beneath::remove`] does, so no depth overflows the stack; a missing one
/// is fine. What cannot be deleted is named, with where the walk stopped.
pub(crate) fn remove_tree(path: &Path) -> Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::new(format!("refusing to delete {}: it names no entry of a folder", path.display())));
    };
    let parent = match rfs::open(parent, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(Error::new(format!("cannot delete {}: {}", path.display(), std::io::Error::from(e)))),
    };
    match remove_at(&parent, name) {
        Ok(()) | Err(Stuck { errno: Errno::NOENT, depth: 0, .. }) => Ok(()),
        Err(stuck) if stuck.depth == 0 && !stuck.moved => {
            Err(Error::new(format!("cannot delete {}: {}", path.display(), std::io::Error::from(stuck.errno))))
        }
        Err(stuck) => {
            Err(Error::new(format!("cannot delete the folder tree {}: {}", path.display(), stuck.describe())))
        }
    }
}

/// Opens `path` for reading only if it is a regular file, without following
/// a link at its end and without blocking on a FIFO: for files outside the
/// workspace (the build cache, a config).
pub(crate) fn open_regular(path: &Path) -> Result<File> {
    let fd = rfs::open(path, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .with_context(|| format!("cannot read {}", path.display()))?;
    match fd_kind(&fd) {
        Ok(EntryKind::File) => {
            rfs::fcntl_setfl(&fd, OFlags::empty()).with_context(|| format!("cannot read {}", path.display()))?;
            Ok(File::from(fd))
        }
        Ok(kind) => Err(Error::new(format!(
            "refusing to read {}: it is {}, not a regular file",
            path.display(),
            kind.describe()
        ))),
        Err(e) => Err(Error::new(format!("cannot read {}: {}", path.display(), std::io::Error::from(e)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Beneath, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "mine").unwrap();
        (dir, Beneath::open(&root).unwrap(), outside)
    }

    /// One way of reaching a path, and its verb in the refusal.
    type Reach<'a> = (&'a str, &'a dyn Fn(&Path) -> Result<()>);

    /// Both ways of resolving: `openat2` and the walk.
    fn both(test: impl Fn()) {
        test();
        NO_OPENAT2.store(true, Ordering::SeqCst);
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&test));
        NO_OPENAT2.store(false, Ordering::SeqCst);
        walked.unwrap();
    }

    /// `depth` folders one inside the other under `top`, a file at the
    /// bottom; made one level at a time, as a trial's loop would.
    fn deep_tree(top: &Path, depth: usize) {
        std::fs::create_dir_all(top).unwrap();
        let mut fd = rfs::open(top, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..depth {
            rfs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            fd = rfs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        rfs::openat(&fd, "bottom", OFlags::WRONLY | OFlags::CREATE, Mode::from_raw_mode(0o777)).unwrap();
    }

    /// Issue #48, item 2: a tree 100,000 folders deep (which overflowed the
    /// stack of the recursive delete, and every later run's and `clean`'s)
    /// is emptied, and one 5,000 deep deleted, with 256 KiB of stack.
    #[test]
    fn a_tree_100_000_deep_is_deleted_without_recursing() {
        let (_d, b, _) = setup();
        for (depth, how) in [(5_000, "remove"), (100_000, "empty")] {
            let top = b.root.join("work/t");
            deep_tree(&top, depth);
            let started = std::time::Instant::now();
            let done = std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn_scoped(scope, || match how {
                        "remove" => b.remove(&top),
                        _ => b.empty(&top),
                    })
                    .unwrap()
                    .join()
            });
            done.expect("the walk overflowed its stack").unwrap();
            assert!(started.elapsed() < std::time::Duration::from_secs(30), "{depth} {how}: {:?}", started.elapsed());
            if how == "remove" {
                assert!(!top.exists(), "{depth}");
            } else {
                assert_eq!(std::fs::read_dir(&top).unwrap().count(), 0);
                std::fs::remove_dir(&top).unwrap();
            }
        }
    }

    /// A deep tree's modes are set in a loop too, down to its last file.
    #[test]
    fn modes_are_set_down_a_deep_tree_without_recursing() {
        let (_d, b, _) = setup();
        let top = b.root.join("report");
        deep_tree(&top, 5_000);
        let set = std::thread::scope(|scope| {
            std::thread::Builder::new().stack_size(256 * 1024).spawn_scoped(scope, || b.set_modes(&top)).unwrap().join()
        });
        set.expect("the walk overflowed its stack").unwrap();
        let mut bottom = top.clone();
        for _ in 0..50 {
            bottom.push("d");
        }
        let fd = rfs::open(&bottom, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let mut fd = fd;
        for _ in 50..5_000 {
            fd = rfs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        let mode = rfs::statat(&fd, "bottom", AtFlags::empty()).unwrap().st_mode & 0o777;
        assert_eq!(mode, 0o666 & !umask(), "the last file's mode");
        b.remove(&top).unwrap();
    }

    #[test]
    fn writes_reads_and_deletes_beneath_the_root() {
        both(|| {
            let (_d, b, _) = setup();
            let file = b.root.join("a/b/c.json");
            b.write_atomic(&file, b"one").unwrap();
            b.write_atomic(&file, b"two").unwrap();
            assert_eq!(std::fs::read(&file).unwrap(), b"two");
            let mut text = String::new();
            std::io::Read::read_to_string(&mut b.open_read(&file).unwrap(), &mut text).unwrap();
            assert_eq!(text, "two");
            assert_eq!(b.list(&b.root.join("a/b")).unwrap().unwrap(), [("c.json".into(), EntryKind::File)]);
            b.rename(&file, &b.root.join("q/c.json")).unwrap();
            assert_eq!(b.kind(&file).unwrap(), None);
            b.empty(&b.root.join("q")).unwrap();
            assert!(b.root.join("q").is_dir() && std::fs::read_dir(b.root.join("q")).unwrap().count() == 0);
            b.remove(&b.root.join("a")).unwrap();
            assert!(!b.root.join("a").exists());
            let err = b.write_atomic(&b.root.join("../x"), b"").unwrap_err().to_string();
            assert!(err.contains("is not inside the workspace"), "{err}");
        });
    }

    #[test]
    fn a_link_at_any_step_is_refused_named_and_never_followed() {
        both(|| {
            let (_d, b, outside) = setup();
            std::fs::create_dir_all(b.root.join("results")).unwrap();
            symlink(&outside, b.root.join("profiles")).unwrap();
            symlink(&outside, b.root.join("results/T")).unwrap();
            symlink(outside.join("keep"), b.root.join("results/run.json")).unwrap();
            let cases: [Reach; 6] = [
                ("write", &|p| b.write_atomic(p, b"x")),
                ("write", &|p| b.write_new(p, b"x")),
                ("create", &|p| b.create_dir_all(p)),
                ("read", &|p| b.open_read(p).map(drop)),
                ("delete", &|p| b.empty(p)),
                ("write", &|p| b.open_lock(p).map(drop)),
            ];
            for (verb, op) in cases {
                for path in ["profiles", "profiles/x/y", "results/T", "results/T/z", "results/run.json"] {
                    let err = match op(&b.root.join(path)) {
                        Ok(()) => panic!("{verb} {path} succeeded"),
                        Err(e) => e.to_string(),
                    };
                    assert!(err.contains("is a symlink") && err.contains("refusing to"), "{verb} {path}: {err}");
                }
            }
            let err = b.rename(&b.root.join("results/run.json"), &b.root.join("q/r")).unwrap_err().to_string();
            assert!(err.contains("is a symlink"), "{err}");
            let err = b.remove(&b.root.join("profiles/keep")).unwrap_err().to_string();
            assert!(err.contains("is a symlink"), "{err}");
            // A link itself may be removed; its target stays.
            b.remove(&b.root.join("results/T")).unwrap();
            assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "mine");
            assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
        });
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (_d, b, _) = setup();
        let fifo = b.root.join("run.json");
        rfs::mkfifoat(rfs::CWD, &fifo, Mode::from_raw_mode(0o600)).unwrap();
        let err = b.open_read(&fifo).unwrap_err().to_string();
        assert!(err.contains("it is a FIFO"), "{err}");
        let err = open_regular(&fifo).unwrap_err().to_string();
        assert!(err.contains("it is a FIFO"), "{err}");
        let err = b.write_atomic(&fifo, b"x").unwrap_err().to_string();
        assert!(err.contains("it is a FIFO"), "{err}");
    }

    #[test]
    fn emptying_unlinks_links_inside_and_keeps_their_targets() {
        let (_d, b, outside) = setup();
        let trial = b.root.join("profiles/T");
        std::fs::create_dir_all(trial.join("sub")).unwrap();
        symlink(&outside, trial.join("sub/link")).unwrap();
        symlink(outside.join("keep"), trial.join("file-link")).unwrap();
        std::fs::write(trial.join("a.profraw"), "x").unwrap();
        b.empty(&trial).unwrap();
        assert_eq!(std::fs::read_dir(&trial).unwrap().count(), 0);
        assert_eq!(std::fs::read_to_string(outside.join("keep")).unwrap(), "mine");
    }

    #[test]
    fn a_symlinked_root_is_refused() {
        let (d, _b, outside) = setup();
        let link = d.path().join("link");
        symlink(&outside, &link).unwrap();
        let err = Beneath::open(&link).err().unwrap().to_string();
        assert!(err.contains("is a symlink"), "{err}");
    }
}
