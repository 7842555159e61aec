//! Running one trial: under its supervisor (`supervisor.rs`), output to its
//! log, a timeout, and a stop that reaches the whole process tree.
//!
//! The harness keeps the clock and the interruption flag; the supervisor does
//! the killing (SIGTERM to every process of the trial, a grace period, then
//! SIGKILL, see `proctree.rs`), so the same code stops a trial on timeout, on
//! Ctrl-C, and when the harness itself is killed.

use crate::error::{Error, Result};
use crate::interrupt;
use crate::launch::TrialLaunch;
use crate::proctree::Tree;
use crate::supervisor::{self, Report, SUPERVISE_VAR, Spec, StopCause};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(20);
/// How long past the grace period a stopping supervisor may take.
const STOP_SLACK: Duration = Duration::from_secs(15);

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
    let spec = Spec {
        argv: cmd.argv(),
        cwd: cmd.get_cwd().map(Path::to_path_buf),
        log: log.to_path_buf(),
        grace_ms: u64::try_from(launch.grace.as_millis()).unwrap_or(u64::MAX),
    };
    let err = File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::new(format!("cannot open {}: {e}", log.display())))?;
    let mut command = Command::new(supervisor_exe);
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(err);
    for (k, v) in cmd.get_env() {
        command.env(k, v);
    }
    for k in cmd.get_env_remove() {
        command.env_remove(k);
    }
    command.env(SUPERVISE_VAR, serde_json::to_string(&spec).expect("spec serializes"));
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
    let mut child = command.spawn().map_err(|e| {
        Error::new(format!(
            "cannot start the trial supervisor {}: {e} (for {})",
            supervisor_exe.display(),
            cmd.display()
        ))
    })?;
    // A deadline past what `Instant` can hold is no deadline.
    let deadline = started.checked_add(launch.timeout);
    let mut next_beat = started.checked_add(heartbeat_every);
    let mut stop: Option<Stopping> = None;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::new(format!("waiting for {}: {e}", cmd.program())))? {
            break status;
        }
        let now = Instant::now();
        match &stop {
            None => {
                let why = match interrupt::requested() {
                    Some(signal) => Some(Stopping::Interrupted(signal, now)),
                    None if deadline.is_some_and(|d| now >= d) => Some(Stopping::TimedOut(now)),
                    None => None,
                };
                if let Some(why) = why {
                    ask_to_stop(&mut child);
                    stop = Some(why);
                } else if next_beat.is_some_and(|b| now >= b) {
                    heartbeat(now - started);
                    next_beat = next_beat.and_then(|b| b.checked_add(heartbeat_every));
                }
            }
            // A supervisor that does not finish in time is killed; the
            // backstop below then stops the trial.
            Some(s) if now.saturating_duration_since(s.since()) > launch.grace.saturating_add(STOP_SLACK) => {
                let _ = child.kill();
                break child.wait().map_err(|e| Error::new(format!("waiting for {}: {e}", cmd.program())))?;
            }
            Some(_) => {}
        }
        std::thread::sleep(POLL);
    };
    let report = read_report(&mut child);
    let backstop = Tree::new(child.id() as libc::pid_t, &launch.token).wait_gone(supervisor::REAP_LIMIT, &mut || {});
    let Some(report) = report else {
        return Err(Error::new(format!(
            "the trial supervisor ended ({}) without saying how {} ended; see {}",
            crate::process::describe_status(status),
            cmd.display(),
            log.display()
        )));
    };
    if let Some(why) = &report.spawn_error {
        return Err(Error::new(format!("cannot run {}: {why}", cmd.display())));
    }
    let killed = report.killed_with.clone().unwrap_or_else(|| "SIGKILL".into());
    let ending = match (stop, report.stopped, report.wait_status) {
        (Some(Stopping::Interrupted(signal, _)), Some(StopCause::Requested), _) => {
            Ending::Interrupted { signal, killed }
        }
        (Some(Stopping::TimedOut(_)), Some(StopCause::Requested), _) => Ending::TimedOut { killed },
        (_, _, Some(raw)) => Ending::Exited(ExitStatus::from_raw(raw)),
        (_, _, None) => return Err(Error::new(format!("the trial supervisor lost track of {}", cmd.display()))),
    };
    Ok(Finished {
        ending,
        duration: started.elapsed(),
        leftovers: report.leftovers,
        survivors: report.survivors + backstop,
    })
}

/// Why the harness asked the supervisor to stop the trial, and when.
enum Stopping {
    TimedOut(Instant),
    Interrupted(i32, Instant),
}

impl Stopping {
    fn since(&self) -> Instant {
        match self {
            Stopping::TimedOut(at) | Stopping::Interrupted(_, at) => *at,
        }
    }
}

fn ask_to_stop(child: &mut Child) {
    if let Some(lifeline) = child.stdin.as_mut() {
        // A supervisor that already ended has nothing left to stop.
        let _ = lifeline.write_all(&[supervisor::STOP]).and_then(|()| lifeline.flush());
    }
}

fn read_report(child: &mut Child) -> Option<Report> {
    let mut text = String::new();
    child.stdout.take()?.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.lines().last()?).ok()
}
