//! A cgroup v2 per trial, where the machine lets the harness make one.
//!
//! A process cannot leave its cgroup by forking, `setsid`, a double fork or
//! dropping its environment, and `cgroup.kill` (Linux 5.14) kills everything
//! in it at once, new forks included: the one container a trial cannot
//! escape. The session, the marker variable and the subreaper's descendants
//! (`proctree.rs`) miss a daemon that forks faster than a sweep looks, or one
//! started between two looks of a supervisor that is then SIGKILLed; they
//! remain, beside the cgroup, and alone where there is none.
//!
//! Each trial's cgroup is made by its supervisor as a child of the cgroup the
//! supervisor runs in (`ccl-coverage-<token>`), named in its record before
//! the trial starts, and the trial's first process moves itself into it
//! before it runs anything. That needs cgroup v2 mounted and the right to
//! create a cgroup where the harness runs (root, or a delegated subtree such
//! as systemd's `Delegate=yes`). `CCL_COV_CGROUP` chooses: `auto` (the
//! default) uses one where it can, `on` fails a trial that cannot have one,
//! `off` never uses one.

use crate::bail;
use crate::error::{Context, Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What every trial cgroup's name starts with (then the trial's token).
const PREFIX: &str = "ccl-coverage-";

/// How long [`Cgroup::remove`] waits for its last processes to finish exiting.
const REMOVE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The magic number of a cgroup v2 filesystem (`statfs`).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// `CCL_COV_CGROUP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Auto,
    On,
    Off,
}

impl Mode {
    /// The mode a value of `CCL_COV_CGROUP` names (unset or empty: auto).
    pub(crate) fn parse(value: Option<&str>) -> Result<Mode> {
        match value.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
            None | Some("" | "auto") => Ok(Mode::Auto),
            Some("on" | "1") => Ok(Mode::On),
            Some("off" | "0") => Ok(Mode::Off),
            Some(other) => {
                bail!("{}={other:?} is not a cgroup mode: expected auto, on or off", crate::env_names::CGROUP)
            }
        }
    }

    /// This process's mode, from its environment (checked when the context loaded).
    pub(crate) fn from_env() -> Mode {
        Mode::parse(std::env::var(crate::env_names::CGROUP).ok().as_deref()).unwrap_or(Mode::Auto)
    }
}

/// One trial's cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// Makes `<the cgroup this process is in>/ccl-coverage-<name>`.
    pub(crate) fn create(name: &str) -> Result<Cgroup> {
        let base = here()?;
        let path = base.join(format!("{PREFIX}{name}"));
        std::fs::create_dir(&path).with_context(|| format!("cannot create the cgroup {}", path.display()))?;
        let cgroup = Cgroup { path };
        if !cgroup.path.join("cgroup.kill").is_file() {
            cgroup.remove();
            bail!("{} has no cgroup.kill (Linux 5.14 or newer is needed)", cgroup.path.display());
        }
        Ok(cgroup)
    }

    /// The cgroup at `path`, if it is the one [`Cgroup::create`] made for
    /// `name` (a trial's token, as its record is named): a folder on a cgroup
    /// v2 mount called `ccl-coverage-<name>`. A record cannot send a sweep
    /// to any other cgroup.
    pub(crate) fn existing(path: &Path, name: &str) -> Option<Cgroup> {
        let named = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == format!("{PREFIX}{name}"));
        let meta = std::fs::symlink_metadata(path).ok()?;
        let on_cgroup2 = rustix::fs::statfs(path).is_ok_and(|s| s.f_type as u64 == CGROUP2_SUPER_MAGIC);
        (named && meta.is_dir() && on_cgroup2).then(|| Cgroup { path: path.to_path_buf() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// `cgroup.procs`, opened for writing: a process that writes `0` to it
    /// moves itself in (the trial's first process does, before it execs).
    pub(crate) fn procs_for_writing(&self) -> Result<File> {
        let path = self.path.join("cgroup.procs");
        File::options().write(true).open(&path).with_context(|| format!("cannot open {}", path.display()))
    }

    /// The processes in the cgroup and below it, as this PID namespace numbers them.
    pub(crate) fn members(&self) -> Vec<libc::pid_t> {
        let mut found = Vec::new();
        let mut dirs = vec![self.path.clone()];
        while let Some(dir) = dirs.pop() {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            found.extend(procs.lines().filter_map(|l| l.trim().parse::<libc::pid_t>().ok()));
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                }
            }
        }
        found
    }

    /// Whether any process is left in it (`cgroup.events`).
    pub(crate) fn populated(&self) -> bool {
        std::fs::read_to_string(self.path.join("cgroup.events"))
            .is_ok_and(|events| events.lines().any(|l| l.trim() == "populated 1"))
    }

    /// SIGKILLs every process in it and below, forks racing it included.
    pub(crate) fn kill(&self) -> bool {
        std::fs::write(self.path.join("cgroup.kill"), "1").is_ok()
    }

    /// Removes it, and any cgroup a trial made below it, deepest first;
    /// false while a process is left after [`REMOVE_LIMIT`]. A killed
    /// process leaves `cgroup.procs` before it has finished exiting, and
    /// the cgroup stays busy until it has (a CUDA process's teardown of its
    /// GPU context takes a while): one `rmdir` at once failed every NCCL
    /// trial on the H200. What is still there is killed again between tries.
    pub(crate) fn remove(&self) -> bool {
        let end = std::time::Instant::now() + REMOVE_LIMIT;
        loop {
            if self.remove_once() {
                return true;
            }
            if std::time::Instant::now() >= end {
                return false;
            }
            self.kill();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    fn remove_once(&self) -> bool {
        let mut dirs = vec![self.path.clone()];
        let mut i = 0;
        while i < dirs.len() {
            let below: Vec<PathBuf> = std::fs::read_dir(&dirs[i])
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            dirs.extend(below);
            i += 1;
        }
        dirs.iter().rev().all(|d| std::fs::remove_dir(d).is_ok())
    }
}

/// Whether trials here get a cgroup: the folder their cgroups go in, or
/// why not. Probed once per process, by making and removing one.
pub(crate) fn available() -> &'static Result<PathBuf> {
    static PROBED: OnceLock<Result<PathBuf>> = OnceLock::new();
    PROBED.get_or_init(|| {
        let probe = Cgroup::create(&format!("probe-{}", std::process::id()))?;
        let writable = probe.procs_for_writing().map(drop);
        probe.remove();
        writable?;
        Ok(probe.path.parent().map(Path::to_path_buf).unwrap_or_default())
    })
}

/// The folder of the cgroup this process is in, under the cgroup v2 mount.
fn here() -> Result<PathBuf> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").context("/proc/self/cgroup")?;
    let Some(own) = cgroups.lines().find_map(|l| l.strip_prefix("0::")) else {
        bail!("this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)");
    };
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").context("/proc/self/mountinfo")?;
    let (root, point) = cgroup2_mount(&mounts).ok_or_else(|| Error::new("no cgroup v2 filesystem is mounted"))?;
    let Some(rest) = own.strip_prefix(root.as_str()) else {
        bail!("this process's cgroup {own} lies outside the cgroup v2 mount of {root} at {point}");
    };
    let rest = rest.trim_start_matches('/');
    Ok(if rest.is_empty() { PathBuf::from(point) } else { Path::new(&point).join(rest) })
}

/// The root and mount point of the first cgroup v2 mount in `mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        Some((unescape(fields.get(3)?), unescape(fields.get(4)?)))
    })
}

/// A mountinfo field, whose blanks and backslashes are written in octal (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_in_a_hybrid_or_unified_layout() {
        let hybrid = "25 30 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid shared:5 - cgroup2 cgroup2 rw\n\
                      27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert_eq!(cgroup2_mount(hybrid), Some(("/".into(), "/sys/fs/cgroup/unified".into())));
        let odd = "30 1 0:26 /user.slice /mnt/cg\\040v2 rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_mount(odd), Some(("/user.slice".into(), "/mnt/cg v2".into())));
        assert_eq!(cgroup2_mount("27 25 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw\n"), None);
    }

    #[test]
    fn modes_parse_and_a_wrong_one_is_named() {
        assert_eq!(Mode::parse(None).unwrap(), Mode::Auto);
        assert_eq!(Mode::parse(Some("")).unwrap(), Mode::Auto);
        assert_eq!(Mode::parse(Some("OFF")).unwrap(), Mode::Off);
        assert_eq!(Mode::parse(Some("on")).unwrap(), Mode::On);
        let err = Mode::parse(Some("yes")).unwrap_err().to_string();
        assert!(err.contains("CCL_COV_CGROUP=\"yes\"") && err.contains("auto, on or off"), "{err}");
    }

    /// Only a folder named as the harness names its cgroups, on a cgroup v2
    /// filesystem, is taken for one: never a planted path.
    #[test]
    fn only_a_trial_cgroup_is_taken_for_one() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join(format!("{PREFIX}x"));
        std::fs::create_dir(&fake).unwrap();
        assert_eq!(Cgroup::existing(&fake, "x"), None, "not on cgroup2");
        assert_eq!(Cgroup::existing(Path::new("/sys/fs/cgroup"), "x"), None);
        if let Ok(base) = available() {
            assert_eq!(Cgroup::existing(base, ""), None, "the harness's own cgroup is not a trial's");
            let name = format!("unit-{}", std::process::id());
            let made = Cgroup::create(&name).unwrap();
            assert_eq!(Cgroup::existing(made.path(), &name).as_ref(), Some(&made));
            assert_eq!(Cgroup::existing(made.path(), "another-trial"), None, "only the record's own trial's");
            assert!(!made.populated());
            assert!(made.remove());
        }
    }

    /// A cgroup whose processes were just killed is removed once they have
    /// finished exiting, not refused while they still are.
    #[test]
    fn a_cgroup_is_removed_right_after_its_processes_are_killed() {
        let Ok(_) = available() else {
            crate::say!("no cgroup can be made here: skipping");
            return;
        };
        for round in 0..20 {
            let made = Cgroup::create(&format!("unit-kill-{}-{round}", std::process::id())).unwrap();
            let mut children: Vec<std::process::Child> =
                (0..4).map(|_| std::process::Command::new("sleep").arg("100").spawn().unwrap()).collect();
            for child in &children {
                std::fs::write(made.path.join("cgroup.procs"), child.id().to_string()).unwrap();
            }
            assert!(made.kill());
            // Reaped as a parent would: the cgroup is empty only when they are gone.
            let reaper = std::thread::spawn(move || {
                for child in &mut children {
                    child.wait().unwrap();
                }
            });
            assert!(made.remove(), "round {round}: {} still there", made.path.display());
            reaper.join().unwrap();
        }
    }
}
