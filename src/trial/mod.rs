//! Running one trial: under its supervisor (`supervisor.rs`), output to its
//! log, a timeout, and a stop that reaches the whole process tree.
//!
//! The harness keeps the clock and the interruption flag; the supervisor does
//! the killing (SIGTERM to every process of the trial, a grace period, then
//! SIGKILL, see `proctree.rs`), so the same code stops a trial on timeout, on
//! Ctrl-C, and when the harness itself is killed.

pub(crate) mod shared_fs;

use crate::error::{Error, Result};
use crate::exec::supervisor::{Containment, StopCause, Stopping, Supervised};
use crate::launch::TrialLaunch;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Exited(ExitStatus),
    /// Ran past its timeout; `killed` says which signal finally ended it.
    TimedOut {
        killed: String,
    },
    /// The run was interrupted by `signal` while the trial ran.
    Interrupted {
        signal: i32,
        killed: String,
    },
    /// Its supervisor died or was stopped before it said how the trial
    /// ended: why. Its processes were killed by the harness.
    SupervisorLost {
        why: String,
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
    /// Bytes of output the log's cap cut out (0: the log is whole).
    pub output_cut: u64,
    /// What held the trial's processes, and why not a cgroup when not.
    pub containment: Containment,
    pub no_cgroup: Option<String>,
    /// Pids of the trial's processes its supervisor saw
    /// ([`crate::exec::supervisor::SupervisorReport::seen`]), and when the
    /// supervisor started (clock ticks after boot).
    pub(crate) seen: Vec<libc::pid_t>,
    pub(crate) since: Option<u64>,
}

/// What happened while a trial held its rank slots: the command that ran,
/// when, and how it ended.
#[derive(Debug, Clone)]
pub(crate) struct Execution {
    pub(crate) launch: TrialLaunch,
    pub(crate) finished: Finished,
    pub(crate) log: PathBuf,
    /// RFC 3339 start time, and the same in milliseconds since the epoch.
    pub(crate) started_at: String,
    pub(crate) started_unix_ms: u64,
    /// How the log the harness made was deleted or replaced while the trial
    /// ran, if it was: then its output is no one's to judge.
    pub(crate) log_tampered: Option<String>,
}

impl Execution {
    /// The exit code and the signal of a trial that ended on its own.
    pub(crate) fn exit(&self) -> (Option<i32>, Option<i32>) {
        match &self.finished.ending {
            Ending::Exited(s) => (s.code(), s.signal()),
            Ending::TimedOut { .. } | Ending::Interrupted { .. } | Ending::SupervisorLost { .. } => (None, None),
        }
    }
}

/// Writes the command line at the head of `log` (a file of the workspace
/// `ws`, written through its handle: a planted link is refused), runs the
/// trial (see [`run`]), and records when it started.
pub(crate) fn execute(
    ws: &crate::workspace::Workspace,
    launch: TrialLaunch,
    log: &Path,
    supervisor_exe: &Path,
    heartbeat_every: Duration,
    heartbeat: &dyn Fn(Duration),
) -> Result<Execution> {
    ws.write_new(log, format!("$ {}\n", launch.cmd.display()).as_bytes())?;
    let made = file_identity(log);
    let started_at = crate::exec::host::now();
    let started_unix_ms = crate::exec::host::unix_ms();
    let finished = run(&launch, log, supervisor_exe, heartbeat_every, heartbeat)?;
    let log_tampered = match (made, file_identity(log)) {
        (Some(made), Some(now)) if made == now => None,
        (Some(_), None) => Some(format!("its log {} was deleted while it ran", log.display())),
        (Some(_), Some(_)) => Some(format!(
            "its log {} was replaced by another file while it ran (the trial's output went to the one the harness made)",
            log.display()
        )),
        (None, _) => Some(format!("its log {} was gone as soon as the harness wrote it", log.display())),
    };
    Ok(Execution { launch, finished, log: log.to_path_buf(), started_at, started_unix_ms, log_tampered })
}

/// The device and inode of the file at `path` itself (a link is not followed).
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().filter(std::fs::Metadata::is_file).map(|m| (m.dev(), m.ino()))
}

/// Runs `launch` under a supervisor started from `supervisor_exe`, appending
/// all output to `log`. `heartbeat` is called about once per
/// `heartbeat_every` while the trial runs.
pub fn run(
    launch: &TrialLaunch,
    log: &Path,
    supervisor_exe: &Path,
    heartbeat_every: Duration,
    heartbeat: &dyn Fn(Duration),
) -> Result<Finished> {
    let cmd = &launch.cmd;
    let started = Instant::now();
    let mut child = Supervised::spawn(
        supervisor_exe,
        cmd,
        &launch.token,
        log,
        launch.grace,
        launch.log_cap,
        launch.records.as_deref(),
    )?;
    // A deadline past what `Instant` can hold is no deadline.
    let (status, stop) = child.wait(started.checked_add(launch.timeout), Some((heartbeat_every, heartbeat)))?;
    let (report, backstop) = child.finish(status)?;
    let killed = report.killed_with.clone().unwrap_or_else(|| "SIGKILL".into());
    let ending = match (stop, report.stopped, report.wait_status) {
        _ if report.lost.is_some() => Ending::SupervisorLost { why: report.lost.clone().unwrap_or_default() },
        (Some(Stopping::Interrupted(signal)), Some(StopCause::Requested), _) => Ending::Interrupted { signal, killed },
        (Some(Stopping::TimedOut), Some(StopCause::Requested), _) => Ending::TimedOut { killed },
        (_, _, Some(raw)) => Ending::Exited(ExitStatus::from_raw(raw)),
        (_, _, None) => return Err(Error::new(format!("the trial supervisor lost track of {}", cmd.display()))),
    };
    Ok(Finished {
        ending,
        duration: started.elapsed(),
        leftovers: report.leftovers,
        survivors: report.survivors + backstop,
        output_cut: report.output_cut,
        containment: report.containment,
        no_cgroup: report.no_cgroup.clone(),
        seen: report.seen.clone(),
        since: report.started,
    })
}
