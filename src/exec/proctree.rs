//! Finding and killing the processes of one trial, wherever they went.
//!
//! Open MPI puts every rank in a process group of its own, so a process-group
//! kill misses them. A trial's processes are found in `/proc` by **session**
//! (its supervisor starts a new one) and by the marker variable
//! `CCL_COV_TRIAL_TOKEN`, which every process of the trial inherits (this
//! catches a process that calls `setsid` itself).
//!
//! A process can leave both: double-fork, `setsid`, and drop its environment.
//! The supervisor is a child subreaper, so such an orphan is re-parented to
//! it: the supervisor's tree also holds every process that descends from it.
//!
//! Where the machine allows, each trial also has a cgroup of its own
//! (`cgroup.rs`): its members are the trial's too, and `cgroup.kill` ends them
//! all at once.
//!
//! The marker's value names the run that owns the trial by an id whose
//! liveness is a lock (`owner.rs`), so a later run can tell the leftovers of
//! a dead run from the trials of a live one, in any PID namespace: see
//! [`sweep_orphans`].

use crate::env_names::TRIAL_TOKEN;
use crate::exec::cgroup::Cgroup;
use crate::exec::owner::{self, Liveness};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(20);

/// The processes of one trial.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    session: libc::pid_t,
    /// `CCL_COV_TRIAL_TOKEN=<token>`, as it appears in `/proc/<pid>/environ`.
    marker: Vec<u8>,
    /// A process whose descendants all belong to the trial: its subreaper
    /// supervisor, to which escaped orphans are re-parented.
    root: Option<libc::pid_t>,
    /// The trial's cgroup, when it has one.
    cgroup: Option<Cgroup>,
}

impl Tree {
    /// The processes in session `session` (none if negative) or carrying `token`.
    pub fn new(session: libc::pid_t, token: &str) -> Tree {
        Tree { session, marker: format!("{TRIAL_TOKEN}={token}").into_bytes(), root: None, cgroup: None }
    }

    /// Also every descendant of `root`, wherever its session and whatever
    /// its environment.
    pub(crate) fn with_descendants_of(self, root: libc::pid_t) -> Tree {
        Tree { root: Some(root), ..self }
    }

    /// Also every process in `cgroup`, which `SIGKILL` then reaches through
    /// `cgroup.kill`.
    pub(crate) fn with_cgroup(self, cgroup: Option<Cgroup>) -> Tree {
        Tree { cgroup, ..self }
    }

    pub(crate) fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    /// Live (non-zombie) processes in the trial's session or carrying its marker.
    pub(crate) fn members(&self) -> Vec<libc::pid_t> {
        let me = std::process::id() as libc::pid_t;
        let stats: BTreeMap<libc::pid_t, Stat> =
            all_pids().into_iter().filter_map(|p| Some((p, stat_of(p)?))).collect();
        let descends = |mut pid: libc::pid_t| {
            let Some(root) = self.root else { return false };
            // A parent chain ends at pid 1 (or 0); a bounded walk, as /proc changes under us.
            for _ in 0..stats.len() {
                match stats.get(&pid) {
                    Some(stat) if stat.ppid == root => return true,
                    Some(stat) if stat.ppid > 1 => pid = stat.ppid,
                    _ => return false,
                }
            }
            false
        };
        let in_cgroup: BTreeSet<libc::pid_t> = self.cgroup.iter().flat_map(Cgroup::members).collect();
        let mut found = Vec::new();
        for (&pid, stat) in &stats {
            if pid == me || stat.state == 'Z' {
                continue;
            }
            let member = (self.session > 0 && stat.session == self.session)
                || in_cgroup.contains(&pid)
                || descends(pid)
                || self.marked(pid);
            if member {
                found.push(pid);
            }
        }
        found
    }

    fn marked(&self, pid: libc::pid_t) -> bool {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == self.marker.as_slice()))
    }

    /// Sends `sig` to every member (SIGKILL also through `cgroup.kill`);
    /// returns how many there were.
    pub(crate) fn signal(&self, sig: libc::c_int) -> usize {
        let members = self.members();
        if sig == libc::SIGKILL
            && let Some(cgroup) = &self.cgroup
        {
            cgroup.kill();
        }
        for &pid in &members {
            kill(pid, sig);
        }
        members.len()
    }

    /// SIGKILLs members until none is left; returns how many still are at
    /// `limit`. `between` runs on every round (a subreaper reaps there).
    pub(crate) fn wait_gone(&self, limit: Duration, between: &mut dyn FnMut()) -> usize {
        let end = Instant::now() + limit;
        loop {
            between();
            let members = self.members();
            if members.is_empty() || Instant::now() >= end {
                return members.len();
            }
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
            for &pid in &members {
                kill(pid, libc::SIGKILL);
            }
            std::thread::sleep(POLL);
        }
    }
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) state: char,
    pub(crate) ppid: libc::pid_t,
    pub(crate) session: libc::pid_t,
    /// Clock ticks after boot: with the pid, names one process for good.
    pub(crate) start_time: u64,
}

pub(crate) fn stat_of(pid: libc::pid_t) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The pids of `pid` in each PID namespace from this one down to its own
/// (`NSpid` of `/proc/<pid>/status`): the last is what `getpid()` returns to
/// it, and so what its profile's `%p` says.
pub(crate) fn ns_pids(pid: libc::pid_t) -> Vec<libc::pid_t> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| rest.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

fn parse_stat(stat: &str) -> Option<Stat> {
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 of proc(5) is index 0 here: state ppid pgrp session … starttime (field 22).
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

fn all_pids() -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect()
}

/// A supervisor's record of its trial's processes, rewritten while they
/// change (`<state>/children/<token>.json`): a supervisor killed with
/// SIGKILL leaves its trial's processes to pid 1, and one that dropped the
/// marker and left the session is then known only by this record. The
/// supervisor holds the lock `<token>.lock` beside it for as long as it
/// runs: while it does, it is in charge, in whatever PID namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChildrenRecord {
    /// The supervisor's pid as it saw itself, for messages.
    pub(crate) supervisor: libc::pid_t,
    /// The supervisor's PID namespace: the pids below mean something only there.
    pub(crate) pid_ns: u64,
    /// The trial's cgroup, when it has one (named before the trial starts).
    pub(crate) cgroup: Option<PathBuf>,
    /// Pid, start time and session of each process of the trial it last saw.
    pub(crate) processes: Vec<(libc::pid_t, u64, libc::pid_t)>,
}

impl ChildrenRecord {
    /// The record of `members`, by the calling supervisor.
    pub(crate) fn of(members: &[libc::pid_t], cgroup: Option<&Cgroup>) -> ChildrenRecord {
        ChildrenRecord {
            supervisor: std::process::id() as libc::pid_t,
            pid_ns: owner::pid_namespace(),
            cgroup: cgroup.map(|c| c.path().to_path_buf()),
            processes: members.iter().filter_map(|&pid| stat_of(pid).map(|s| (pid, s.start_time, s.session))).collect(),
        }
    }

    /// The record at `path`, if there is a readable one.
    pub(crate) fn read(path: &Path) -> Option<ChildrenRecord> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }

    /// The lock its supervisor holds, beside the record at `record`.
    pub(crate) fn lock_path(record: &Path) -> PathBuf {
        record.with_extension("lock")
    }
}

/// Kills what the records in `dir` name, where the record's supervisor is
/// provably gone (its lock is free); removes those records. Returns what it
/// killed.
pub(crate) fn sweep_records(dir: &Path) -> Vec<Orphan> {
    let mut killed = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => killed.extend(sweep_record(&path)),
            // A supervisor that died before it wrote its record left nothing to sweep.
            Some("lock") if !path.with_extension("json").exists() => {
                if let Liveness::Gone(gone) = owner::liveness(&path) {
                    gone.remove();
                }
            }
            _ => {}
        }
    }
    killed
}

/// [`sweep_records`] for one record. With a cgroup, `cgroup.kill` ends
/// everything in it. Without one, and only in the supervisor's own PID
/// namespace: every recorded process that still runs (same pid, same start
/// time), its descendants, and every process of its session (a session's id
/// cannot be reused while a process is in it, and a process joins a session
/// only by being born in it: a daemon that forks a new process every moment
/// stays in the session of the recorded one).
pub(crate) fn sweep_record(path: &Path) -> Vec<Orphan> {
    let Some(record) = ChildrenRecord::read(path) else { return Vec::new() };
    let Liveness::Gone(gone) = owner::liveness(&ChildrenRecord::lock_path(path)) else { return Vec::new() };
    let mut killed = Vec::new();
    let mut left = false;
    if let Some(cgroup) = record.cgroup.as_deref().and_then(|c| Cgroup::existing(c, &stem_of(path))) {
        let members = cgroup.members();
        cgroup.kill();
        killed.extend(members.into_iter().map(|pid| Orphan {
            pid,
            owner: record.supervisor,
            command: command_of(pid),
        }));
        let end = Instant::now() + Duration::from_secs(10);
        while cgroup.populated() && Instant::now() < end {
            std::thread::sleep(POLL);
            cgroup.kill();
        }
        left |= !cgroup.remove();
    }
    if record.pid_ns == owner::pid_namespace() {
        let (found, survivors) = kill_recorded(&record);
        for o in found {
            if !killed.iter().any(|k| k.pid == o.pid) {
                killed.push(o);
            }
        }
        left |= survivors;
    } else if record.cgroup.is_none() {
        // Its pids are another namespace's: nothing here can be proven its.
        left = true;
    }
    // What outlived SIGKILL stays on the record for the next run.
    if !left {
        let _ = std::fs::remove_file(path);
        gone.remove();
    }
    killed
}

/// The recorded processes that still run, their descendants and their
/// sessions' processes, SIGKILLed until none is left (or 10 s); whether
/// some survived.
fn kill_recorded(record: &ChildrenRecord) -> (Vec<Orphan>, bool) {
    let me = std::process::id() as libc::pid_t;
    let my_session = stat_of(me).map_or(0, |s| s.session);
    let mut killed: Vec<Orphan> = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    let mut sessions: BTreeSet<libc::pid_t> = BTreeSet::new();
    loop {
        let stats: BTreeMap<libc::pid_t, Stat> =
            all_pids().into_iter().filter_map(|p| Some((p, stat_of(p)?))).filter(|(_, s)| s.state != 'Z').collect();
        let mut proven: BTreeSet<libc::pid_t> = record
            .processes
            .iter()
            .filter(|(pid, start, _)| stats.get(pid).is_some_and(|s| s.start_time == *start))
            .map(|(pid, _, _)| *pid)
            .collect();
        sessions.extend(proven.iter().filter_map(|p| stats.get(p)).map(|s| s.session));
        sessions.retain(|&s| s > 1 && s != my_session);
        proven.extend(stats.iter().filter(|(_, s)| sessions.contains(&s.session)).map(|(&p, _)| p));
        // Descendants, found by walking up each process's parents.
        for &pid in stats.keys() {
            let mut at = pid;
            for _ in 0..stats.len() {
                match stats.get(&at) {
                    Some(s) if proven.contains(&s.ppid) => {
                        proven.insert(pid);
                        break;
                    }
                    Some(s) if s.ppid > 1 => at = s.ppid,
                    _ => break,
                }
            }
        }
        proven.remove(&me);
        if proven.is_empty() {
            return (killed, false);
        }
        if Instant::now() >= end {
            return (killed, true);
        }
        for &pid in &proven {
            if !killed.iter().any(|k| k.pid == pid) {
                killed.push(Orphan { pid, owner: record.supervisor, command: command_of(pid) });
            }
            // Each pid was just proven to be the trial's (start time, session or parent).
            kill(pid, libc::SIGKILL);
        }
        std::thread::sleep(POLL);
    }
}

/// A record's file name without `.json`: its trial's token, as a file name.
fn stem_of(record: &Path) -> String {
    record.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The live process `pid` when it carries a trial token: the token, its
/// start (clock ticks after boot) and its command line.
pub(crate) fn trial_process(pid: libc::pid_t) -> Option<(String, u64, String)> {
    let stat = stat_of(pid).filter(|s| s.state != 'Z')?;
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{TRIAL_TOKEN}=");
    let token = env.split(|&b| b == 0).find_map(|var| var.strip_prefix(prefix.as_bytes()))?;
    Some((String::from_utf8_lossy(token).into_owned(), stat.start_time, command_of(pid)))
}

fn command_of(pid: libc::pid_t) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim().to_string())
        .unwrap_or_default()
}

/// A process left behind by a dead run.
#[derive(Debug, Clone)]
pub(crate) struct Orphan {
    pub(crate) pid: libc::pid_t,
    /// The pid of the run (or supervisor) it was left by, as that one saw itself.
    pub(crate) owner: libc::pid_t,
    pub(crate) command: String,
}

/// Finds every process carrying a trial marker whose owning run is provably
/// gone (its lock in `state_dir` is free: killed with SIGKILL, say, before
/// its supervisors could act), and kills them: SIGTERM, `grace`, then
/// SIGKILL. A marker whose owner cannot be decided (no lock file here: a run
/// of another state folder, or of an older ccl-coverage) is left alone. The
/// locks of owners that are gone and left nothing are removed, by a run of
/// their PID namespace only (it sees every process they could have started).
/// Returns what it found.
pub(crate) fn sweep_orphans(state_dir: &Path, grace: Duration) -> Vec<Orphan> {
    let prefix = format!("{TRIAL_TOKEN}=");
    let mut owners: BTreeMap<String, Liveness> = BTreeMap::new();
    let mut by_token: BTreeMap<String, Vec<Orphan>> = BTreeMap::new();
    for pid in all_pids() {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let Some(token) = environ
            .split(|&b| b == 0)
            .find_map(|var| var.strip_prefix(prefix.as_bytes()))
            .map(|t| String::from_utf8_lossy(t).into_owned())
        else {
            continue;
        };
        let Some(id) = owner::token_owner(&token) else { continue };
        let liveness =
            owners.entry(id.to_string()).or_insert_with(|| owner::liveness(&owner::owner_lock(state_dir, id)));
        let Liveness::Gone(gone) = liveness else { continue };
        if stat_of(pid).is_none_or(|s| s.state == 'Z') {
            continue;
        }
        by_token.entry(token).or_default().push(Orphan {
            pid,
            owner: gone.info.pid as libc::pid_t,
            command: command_of(pid),
        });
    }
    let trees: Vec<Tree> = by_token.keys().map(|token| Tree::new(-1, token)).collect();
    for tree in &trees {
        tree.signal(libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end && trees.iter().any(|t| !t.members().is_empty()) {
        std::thread::sleep(POLL);
    }
    let survivors: usize = trees.iter().map(|tree| tree.wait_gone(Duration::from_secs(10), &mut || {})).sum();
    if survivors == 0 {
        remove_gone_owners(state_dir, owners);
    }
    by_token.into_values().flatten().collect()
}

/// Removes the lock files of owners that are gone, of this PID namespace.
fn remove_gone_owners(state_dir: &Path, mut seen: BTreeMap<String, Liveness>) {
    let dir = state_dir.join("owners");
    let mine = owner::pid_namespace();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".lock") else { continue };
        let liveness = seen.remove(id).unwrap_or_else(|| owner::liveness(&entry.path()));
        if let Liveness::Gone(gone) = liveness
            && gone.info.pid_ns == mine
        {
            gone.remove();
        }
    }
}

/// Sends `sig` to `pid`; a process already gone (or a pid or signal that
/// is not one) is nothing to do.
fn kill(pid: libc::pid_t, sig: libc::c_int) {
    if let (Some(pid), Some(sig)) =
        (rustix::process::Pid::from_raw(pid.max(0)), rustix::process::Signal::from_named_raw(sig))
    {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_handles_odd_names() {
        let odd = "4242 (a) b (c) d) S 1 4242 4100 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 987654 0";
        assert_eq!(parse_stat(odd), Some(Stat { state: 'S', ppid: 1, session: 4100, start_time: 987654 }));
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("4242 (x)"), None);
    }

    #[test]
    fn stat_of_a_live_process_matches_getsid() {
        // The session may be 0 when the test runs under a container's init; compare, don't assume.
        let pid = std::process::id() as libc::pid_t;
        let stat = stat_of(pid).unwrap();
        assert!(stat.state == 'R' || stat.state == 'S');
        // libc's, not rustix's: rustix's `getsid` panics on a session of 0.
        let session = unsafe { libc::getsid(pid) };
        assert!(session >= 0, "getsid failed: {}", std::io::Error::last_os_error());
        assert_eq!(stat.session, session);
        assert!(stat.start_time > 0);
    }

    /// A child that is killed and reaped when the test ends, pass or fail.
    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn wait_for(what: &str, mut found: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !found() {
            assert!(Instant::now() < end, "{what} was not found within 10s");
            std::thread::sleep(POLL);
        }
    }

    /// The session alone finds a process that carries no marker.
    #[test]
    fn the_session_alone_finds_a_process() {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30").env_remove(TRIAL_TOKEN);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                Ok(())
            });
        }
        let child = Child(cmd.spawn().unwrap());
        let pid = child.0.id() as libc::pid_t;
        let tree = Tree::new(pid, "no-process-has-this-token");
        wait_for("the session's process", || tree.members() == [pid]);
    }

    /// The marker alone finds a process outside the session (one that ran
    /// `setsid` itself, as MPI launchers' daemons may).
    #[test]
    fn the_marker_alone_finds_a_process() {
        let token = format!("marker-test-{}", std::process::id());
        let child = Child(std::process::Command::new("sleep").arg("30").env(TRIAL_TOKEN, &token).spawn().unwrap());
        let pid = child.0.id() as libc::pid_t;
        let tree = Tree::new(-1, &token);
        wait_for("the marked process", || tree.members() == [pid]);
        assert!(!Tree::new(-1, &format!("{token}-other")).members().contains(&pid), "the whole marker must match");
    }
}
