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
//! The marker's value names the harness process that owns the trial (its pid
//! and start time), so a later run can tell the leftovers of a dead run from
//! the trials of a live one: see [`sweep_orphans`].

use crate::env_names::TRIAL_TOKEN;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
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
}

impl Tree {
    /// The processes in session `session` (none if negative) or carrying `token`.
    pub fn new(session: libc::pid_t, token: &str) -> Tree {
        Tree { session, marker: format!("{TRIAL_TOKEN}={token}").into_bytes(), root: None }
    }

    /// Also every descendant of `root`, wherever its session and whatever
    /// its environment.
    pub(crate) fn with_descendants_of(self, root: libc::pid_t) -> Tree {
        Tree { root: Some(root), ..self }
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
        let mut found = Vec::new();
        for (&pid, stat) in &stats {
            if pid == me || stat.state == 'Z' {
                continue;
            }
            if (self.session > 0 && stat.session == self.session) || descends(pid) || self.marked(pid) {
                found.push(pid);
            }
        }
        found
    }

    fn marked(&self, pid: libc::pid_t) -> bool {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == self.marker.as_slice()))
    }

    /// Sends `sig` to every member; returns how many there were.
    pub(crate) fn signal(&self, sig: libc::c_int) -> usize {
        let members = self.members();
        for &pid in &members {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, sig) };
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
            for &pid in &members {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
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

/// A new trial token: `<harness pid>-<harness start time>-<n>`, so that
/// [`sweep_orphans`] can tell whether the harness that owns it still lives.
pub(crate) fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id() as libc::pid_t;
    let start = stat_of(pid).map_or(0, |s| s.start_time);
    format!("{pid}-{start}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The owner (pid, start time) a token names.
fn token_owner(token: &str) -> Option<(libc::pid_t, u64)> {
    let mut parts = token.split('-');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A supervisor's record of its trial's processes, rewritten while they
/// change (`<state>/children/<token>.json`): a supervisor killed with
/// SIGKILL leaves its trial's processes to pid 1, and one that dropped the
/// marker and left the session is then known only by this record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChildrenRecord {
    /// The supervisor's pid and start time: while it lives, it is in charge.
    pub(crate) supervisor: (libc::pid_t, u64),
    /// Pid and start time of each process of the trial it last saw.
    pub(crate) processes: Vec<(libc::pid_t, u64)>,
}

impl ChildrenRecord {
    /// The record of `members`, by the calling supervisor.
    pub(crate) fn of(members: &[libc::pid_t]) -> ChildrenRecord {
        let me = std::process::id() as libc::pid_t;
        let start = |pid| stat_of(pid).map(|s| s.start_time);
        ChildrenRecord {
            supervisor: (me, start(me).unwrap_or(0)),
            processes: members.iter().filter_map(|&pid| Some((pid, start(pid)?))).collect(),
        }
    }
}

/// Kills the processes that the records in `dir` name, where the record's
/// supervisor is gone and the process (same pid, same start time) still
/// runs; removes those records. Returns what it killed.
pub(crate) fn sweep_records(dir: &Path) -> Vec<Orphan> {
    let mut killed = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        killed.extend(sweep_record(&path));
    }
    killed
}

/// [`sweep_records`] for one record.
pub(crate) fn sweep_record(path: &Path) -> Vec<Orphan> {
    let Some(record) = std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str::<ChildrenRecord>(&t).ok())
    else {
        return Vec::new();
    };
    let (sup, sup_start) = record.supervisor;
    if stat_of(sup).is_some_and(|s| s.start_time == sup_start && s.state != 'Z') {
        return Vec::new();
    }
    let alive =
        |&(pid, start): &(libc::pid_t, u64)| stat_of(pid).is_some_and(|s| s.start_time == start && s.state != 'Z');
    let mut killed = Vec::new();
    for &(pid, _) in record.processes.iter().filter(|p| alive(p)) {
        let command = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim().to_string())
            .unwrap_or_default();
        // SAFETY: kill has no memory-safety preconditions; the start time
        // was checked, so the pid is still the recorded process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        killed.push(Orphan { pid, owner: sup, command });
    }
    let end = Instant::now() + Duration::from_secs(10);
    while record.processes.iter().any(alive) && Instant::now() < end {
        std::thread::sleep(POLL);
    }
    // A process that outlived SIGKILL stays on the record for the next run.
    if !record.processes.iter().any(alive) {
        let _ = std::fs::remove_file(path);
    }
    killed
}

/// A process left behind by a dead run.
#[derive(Debug, Clone)]
pub(crate) struct Orphan {
    pub(crate) pid: libc::pid_t,
    pub(crate) owner: libc::pid_t,
    pub(crate) command: String,
}

/// Finds every process carrying a trial marker whose owning harness is no
/// longer running (killed with SIGKILL, say, before its supervisors could
/// act), and kills them: SIGTERM, `grace`, then SIGKILL. Returns what it found.
pub(crate) fn sweep_orphans(grace: Duration) -> Vec<Orphan> {
    let prefix = format!("{TRIAL_TOKEN}=");
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
        let Some((owner, owner_start)) = token_owner(&token) else { continue };
        let owner_alive = stat_of(owner).is_some_and(|s| s.start_time == owner_start && s.state != 'Z');
        if owner_alive || stat_of(pid).is_none_or(|s| s.state == 'Z') {
            continue;
        }
        let command = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim().to_string())
            .unwrap_or_default();
        by_token.entry(token).or_default().push(Orphan { pid, owner, command });
    }
    let trees: Vec<Tree> = by_token.keys().map(|token| Tree::new(-1, token)).collect();
    for tree in &trees {
        tree.signal(libc::SIGTERM);
    }
    let end = Instant::now() + grace;
    while Instant::now() < end && trees.iter().any(|t| !t.members().is_empty()) {
        std::thread::sleep(POLL);
    }
    for tree in &trees {
        tree.wait_gone(Duration::from_secs(10), &mut || {});
    }
    by_token.into_values().flatten().collect()
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
        // SAFETY: getsid has no memory-safety preconditions.
        assert_eq!(stat.session, unsafe { libc::getsid(pid) });
        assert!(stat.start_time > 0);
    }

    #[test]
    fn tokens_name_their_live_owner() {
        let token = new_token();
        let (pid, start) = token_owner(&token).unwrap();
        assert_eq!(pid, std::process::id() as libc::pid_t);
        assert_eq!(stat_of(pid).unwrap().start_time, start);
        assert_ne!(new_token(), token, "every trial gets its own token");
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
                libc::setsid();
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
