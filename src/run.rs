//! Running one trial: its own session, output to its log, a timeout, and a
//! kill that reaches the whole process tree.
//!
//! Open MPI puts every rank in a process group of its own, so a process-group
//! kill misses them. The trial's processes are found by **session** (the
//! command starts a new one) and by a marker variable every process of the
//! trial inherits (catches anything that calls `setsid` itself). On timeout:
//! SIGTERM to all of them, a grace period, then SIGKILL; then the harness waits
//! until none is left.

use crate::error::{Error, Result};
use crate::launch::TrialLaunch;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(20);
/// How long to wait for SIGKILLed processes to disappear.
const REAP_LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(ExitStatus),
    /// Ran past its timeout; `killed` says which signal finally ended it.
    TimedOut {
        killed: &'static str,
    },
}

#[derive(Debug, Clone)]
pub struct Finished {
    pub ending: Ending,
    pub duration: Duration,
    /// Processes of the trial still alive after its main process exited (and
    /// then killed).
    pub leftovers: usize,
    /// Processes that were still alive after everything; always 0 unless the
    /// kernel refused to kill them.
    pub survivors: usize,
}

/// Runs `launch`, appending all output to `log`. `heartbeat` is called about
/// once per `heartbeat_every` while the trial runs.
pub fn run(
    launch: &TrialLaunch,
    log: &Path,
    heartbeat_every: Duration,
    heartbeat: &dyn Fn(Duration),
) -> Result<Finished> {
    let cmd = &launch.cmd;
    let out = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::new(format!("cannot open {}: {e}", log.display())))?;
    let err = out.try_clone().map_err(|e| Error::new(e.to_string()))?;
    let mut command = Command::new(cmd.program());
    command.args(cmd.get_args()).stdin(Stdio::null()).stdout(out).stderr(err);
    for (k, v) in cmd.get_env() {
        command.env(k, v);
    }
    for k in cmd.get_env_remove() {
        command.env_remove(k);
    }
    if let Some(dir) = cmd.get_cwd() {
        command.current_dir(dir);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = command.spawn().map_err(|e| Error::new(format!("cannot start {}: {e}", cmd.display())))?;
    let tree = Tree {
        session: child.id() as libc::pid_t,
        token: format!("{}={}", crate::launch::TRIAL_TOKEN_VAR, launch.token),
    };
    let deadline = later(started, launch.timeout);
    let mut next_beat = later(started, heartbeat_every);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::new(format!("waiting for {}: {e}", cmd.program())))? {
            let leftovers = tree.signal(libc::SIGKILL);
            let survivors = tree.wait_gone(REAP_LIMIT);
            return Ok(Finished { ending: Ending::Exited(status), duration: started.elapsed(), leftovers, survivors });
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if next_beat.is_some_and(|b| now >= b) {
            heartbeat(now - started);
            next_beat = next_beat.and_then(|b| later(b, heartbeat_every));
        }
        std::thread::sleep(POLL);
    }
    tree.signal(libc::SIGTERM);
    // A grace period past what an `Instant` holds ends at once: after a
    // timeout the harness must not wait forever.
    let grace_end = later(Instant::now(), launch.grace);
    let mut killed = "SIGTERM";
    loop {
        let leader_done = child.try_wait().ok().flatten().is_some();
        if leader_done && tree.members().is_empty() {
            break;
        }
        if grace_end.is_none_or(|end| Instant::now() >= end) {
            killed = "SIGKILL";
            tree.signal(libc::SIGKILL);
            break;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.wait();
    let survivors = tree.wait_gone(REAP_LIMIT);
    Ok(Finished { ending: Ending::TimedOut { killed }, duration: started.elapsed(), leftovers: 0, survivors })
}

/// `start + wait`, or `None` (never) where that is past what an `Instant`
/// holds: `Instant + Duration` panics on overflow, and the durations come
/// from the config and the environment.
fn later(start: Instant, wait: Duration) -> Option<Instant> {
    start.checked_add(wait)
}

/// The processes of one trial.
struct Tree {
    session: libc::pid_t,
    token: String,
}

impl Tree {
    /// Live (non-zombie) processes in the trial's session or carrying its marker.
    fn members(&self) -> Vec<libc::pid_t> {
        let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
        let me = std::process::id() as libc::pid_t;
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else { continue };
            if pid == me {
                continue;
            }
            let Some((state, session)) = stat_of(pid) else { continue };
            if state == 'Z' {
                continue;
            }
            if session == self.session || self.marked(pid) {
                found.push(pid);
            }
        }
        found
    }

    fn marked(&self, pid: libc::pid_t) -> bool {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == self.token.as_bytes()))
    }

    /// Sends `sig` to every member; returns how many there were.
    fn signal(&self, sig: libc::c_int) -> usize {
        let members = self.members();
        for &pid in &members {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, sig) };
        }
        members.len()
    }

    /// Waits until no member is left; returns how many still are at `limit`.
    fn wait_gone(&self, limit: Duration) -> usize {
        let end = Instant::now() + limit;
        loop {
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

/// State letter and session id from `/proc/<pid>/stat`.
fn stat_of(pid: libc::pid_t) -> Option<(char, libc::pid_t)> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(stat: &str) -> Option<(char, libc::pid_t)> {
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // state ppid pgrp session
    Some((fields.first()?.chars().next()?, fields.get(3)?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Cmd;

    fn launch(script: &str, timeout_ms: u64, grace_ms: u64) -> TrialLaunch {
        let token = format!("test-{}-{}", std::process::id(), script.len());
        TrialLaunch {
            cmd: Cmd::new("sh").args(["-c", script]).env(crate::launch::TRIAL_TOKEN_VAR, token.clone()),
            env: Vec::new(),
            timeout: Duration::from_millis(timeout_ms),
            grace: Duration::from_millis(grace_ms),
            token,
        }
    }

    fn run_it(l: &TrialLaunch) -> (Finished, String) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("t.log");
        let f = run(l, &log, Duration::from_secs(3600), &|_| {}).unwrap();
        (f, std::fs::read_to_string(&log).unwrap())
    }

    #[test]
    fn exit_status_and_output_are_kept() {
        let (f, log) = run_it(&launch("echo hello; echo err >&2; exit 7", 5000, 100));
        assert_eq!(f.ending, Ending::Exited(std::os::unix::process::ExitStatusExt::from_raw(7 << 8)));
        assert_eq!(log, "hello\nerr\n");
    }

    #[test]
    fn timeout_kills_processes_that_ignore_sigterm_and_their_children() {
        // A child in its own process group that ignores SIGTERM, like an MPI rank.
        let script = "trap '' TERM; (trap '' TERM; exec setsid sleep 600) & sleep 600";
        let l = launch(script, 300, 300);
        let started = Instant::now();
        let (f, _) = run_it(&l);
        assert_eq!(f.ending, Ending::TimedOut { killed: "SIGKILL" });
        assert_eq!(f.survivors, 0);
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        let tree = Tree { session: -1, token: format!("{}={}", crate::launch::TRIAL_TOKEN_VAR, l.token) };
        assert!(tree.members().is_empty(), "escaped processes survive: {:?}", tree.members());
    }

    #[test]
    fn sigterm_suffices_for_well_behaved_trials() {
        let (f, _) = run_it(&launch("sleep 600", 200, 5000));
        assert_eq!(f.ending, Ending::TimedOut { killed: "SIGTERM" });
        assert!(f.duration < Duration::from_secs(3));
    }

    #[test]
    fn leftovers_after_exit_are_killed_and_counted() {
        let (f, _) = run_it(&launch("sleep 600 & exit 0", 5000, 100));
        assert!(matches!(f.ending, Ending::Exited(s) if s.success()));
        assert_eq!(f.leftovers, 1);
        assert_eq!(f.survivors, 0);
    }

    #[test]
    fn stat_parsing_handles_odd_names() {
        let odd = "4242 (a) b (c) d) S 1 4242 4100 0 -1 4194560 0 0";
        assert_eq!(parse_stat(odd), Some(('S', 4100)));
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("4242 (x)"), None);
    }

    #[test]
    fn stat_of_a_live_process_matches_getsid() {
        // The session may be 0 when the test runs under a container's init; compare, don't assume.
        let pid = std::process::id() as libc::pid_t;
        let (state, session) = stat_of(pid).unwrap();
        assert!(state == 'R' || state == 'S');
        // SAFETY: getsid has no memory-safety preconditions.
        assert_eq!(session, unsafe { libc::getsid(pid) });
    }
}
