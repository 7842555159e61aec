//! The trial supervisor: a small process between the harness and each trial
//! that outlives the harness, so that a harness killed with SIGKILL (which it
//! cannot catch) still leaves no trial process behind.
//!
//! The harness starts its own executable again with `CCL_COV_SUPERVISE` set
//! (every entry point checks it first, see [`run_if_requested`]). The
//! supervisor
//! - is a child subreaper, so orphaned descendants of the trial come to it;
//! - leads the trial's session (it calls `setsid` before anything else);
//! - reads a lifeline pipe on its stdin: a `T` asks it to stop the trial
//!   (timeout, interruption), end of file means the harness died;
//! - puts the trial in a cgroup of its own where the machine allows
//!   ([`crate::exec::cgroup`]), and says in its report whether it did;
//! - holds a lock beside its record of the trial's processes, so that a
//!   later run knows, in any PID namespace, whether it still runs;
//! - stops a trial with SIGTERM to every process of it, the grace period,
//!   then SIGKILL ([`crate::exec::proctree`]);
//! - once the trial's main process has exited, kills what it left behind and
//!   reports, as one JSON line on its stdout, how the trial ended.
//!
//! [`Supervised`] is the harness's side: trials (`trial/mod.rs`) and build steps
//! (`build/cache/steps.rs`) both run through it.

use crate::bail;
use crate::env_names::{SUPERVISE, TRIAL_TOKEN};
use crate::error::{Context, Error, Result};
use crate::exec::capped_log::{self, CappedLog};
use crate::exec::cgroup::{self, Cgroup};
use crate::exec::owner;
use crate::exec::process::Cmd;
use crate::exec::proctree::{self, ChildrenRecord, Tree};
use rustix::process::{self, WaitOptions};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The byte the harness writes on the lifeline to stop the trial.
pub(crate) const STOP: u8 = b'T';
/// How long SIGKILLed processes may take to disappear.
pub const REAP_LIMIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
/// How long a trial's other processes may take to end after its main
/// process exits before they count as left behind.
const LEFTOVER_SETTLE: Duration = Duration::from_secs(2);
/// How long past the grace period a stopping supervisor may take before the
/// harness kills it and stops the processes itself.
/// It covers the supervisor's own worst case after the grace period: two
/// waits of [`REAP_LIMIT`] and the output's drain.
const STOP_SLACK: Duration = Duration::from_secs(30);
/// How long the supervisor may stay stopped (SIGSTOP, a tracer) before the
/// harness takes it for lost: stopped, it enforces no timeout and reports
/// nothing, while its trial runs on.
const STOPPED_LIMIT: Duration = Duration::from_secs(2);
/// How often the harness looks at its supervisor's state.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Why the harness asked the supervisor to stop its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopping {
    TimedOut,
    /// The run was interrupted by this signal.
    Interrupted(i32),
}

/// A command running under its supervisor: the harness's end of the lifeline.
pub(crate) struct Supervised {
    child: Child,
    /// The supervisor's record of the trial's processes.
    children: Option<PathBuf>,
    display: String,
    log: PathBuf,
    token: String,
    grace: Duration,
    stop_asked: Option<Instant>,
    /// Since when the supervisor has been seen stopped, and when to look again.
    stopped_since: Option<Instant>,
    next_look: Instant,
    /// Why the harness killed the supervisor itself, when it did.
    lost: Option<String>,
}

impl Supervised {
    /// Starts `exe` as the supervisor of `cmd` (which carries the marker
    /// `token`), in a session of its own, with all output appended to `log`,
    /// at most `log_cap` bytes of it (see [`crate::exec::capped_log`]).
    /// With `records`, the supervisor keeps the record of the trial's
    /// processes there ([`ChildrenRecord`]).
    pub(crate) fn spawn(
        exe: &Path,
        cmd: &Cmd,
        token: &str,
        log: &Path,
        grace: Duration,
        log_cap: u64,
        records: Option<&Path>,
    ) -> Result<Supervised> {
        let children = match records {
            Some(dir) => {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
                Some(dir.join(format!("{}.json", file_name(token))))
            }
            None => None,
        };
        let spec = Spec {
            cwd: cmd.get_cwd().map(Path::to_path_buf),
            log: log.to_path_buf(),
            grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            log_cap,
            children: children.clone(),
        };
        // The harness wrote the log's head through the workspace's handle; a
        // link put in its place since is not followed (`O_NOFOLLOW`).
        let err = open_log(log)?;
        let mut command = Command::new(exe);
        command.arg(cmd.program()).args(cmd.get_args()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(err);
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => command.env(k, v),
                None => command.env_remove(k),
            };
        }
        command.env(SUPERVISE, serde_json::to_string(&spec).expect("spec serializes"));
        // No `pre_exec` (the supervisor makes its session itself, first), so
        // the standard library starts it with `posix_spawn`, which shares the
        // harness's memory until the exec. A `fork` copies the page tables and
        // makes every page of the harness copy-on-write: with the records of
        // 4,000 trials in memory that was about 10 ms of every trial, the
        // trial's process, its merge and its stored lines (issue #35).
        let child = command.spawn().map_err(|e| {
            Error::new(format!("cannot start the supervisor {}: {e} (for {})", exe.display(), cmd.display()))
        })?;
        Ok(Supervised {
            child,
            children,
            display: cmd.display(),
            log: log.to_path_buf(),
            token: token.to_string(),
            grace,
            stop_asked: None,
            stopped_since: None,
            next_look: Instant::now(),
            lost: None,
        })
    }

    /// The supervisor's exit status once it is done. One that does not
    /// finish stopping in time is killed (the backstop in [`Self::finish`]
    /// then stops the processes).
    pub(crate) fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let waited = self.child.try_wait().with_context(|| format!("waiting for {}", self.display))?;
        if waited.is_some() {
            return Ok(waited);
        }
        if self.stop_asked.is_some_and(|at| at.elapsed() > self.grace.saturating_add(STOP_SLACK)) {
            let _ = self.child.kill();
            return self.child.wait().map(Some).with_context(|| format!("waiting for {}", self.display));
        }
        if Instant::now() >= self.next_look {
            self.next_look = Instant::now() + LOOK_EVERY;
            let pid = self.child.id() as libc::pid_t;
            let stopped = proctree::stat_of(pid).is_some_and(|s| matches!(s.state, 'T' | 't'));
            match (stopped, self.stopped_since) {
                (false, _) => self.stopped_since = None,
                (true, None) => self.stopped_since = Some(Instant::now()),
                (true, Some(since)) if since.elapsed() >= STOPPED_LIMIT => {
                    self.lost = Some(format!(
                        "its supervisor (pid {pid}) was stopped (SIGSTOP or a tracer) for {}s, so the harness killed it",
                        STOPPED_LIMIT.as_secs()
                    ));
                    let _ = self.child.kill();
                    return self.child.wait().map(Some).with_context(|| format!("waiting for {}", self.display));
                }
                (true, Some(_)) => {}
            }
        }
        Ok(None)
    }

    /// Asks the supervisor to stop the command (SIGTERM, grace, SIGKILL).
    pub(crate) fn stop(&mut self) {
        if self.stop_asked.is_some() {
            return;
        }
        self.stop_asked = Some(Instant::now());
        if let Some(lifeline) = self.child.stdin.as_mut() {
            // A supervisor that already ended has nothing left to stop.
            let _ = lifeline.write_all(&[STOP]).and_then(|()| lifeline.flush());
        }
    }

    /// Waits for the supervised command, the one wait loop of every trial and
    /// build step: asks the supervisor to stop it on the first interruption or
    /// once `deadline` passes, and calls `heartbeat` about once per `every`
    /// while it runs. Says why it asked for a stop, if it did.
    pub(crate) fn wait(
        &mut self,
        deadline: Option<Instant>,
        heartbeat: Option<(Duration, &dyn Fn(Duration))>,
    ) -> Result<(ExitStatus, Option<Stopping>)> {
        let started = Instant::now();
        let mut next_beat = heartbeat.and_then(|(every, _)| started.checked_add(every));
        let mut stop: Option<Stopping> = None;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok((status, stop));
            }
            let now = Instant::now();
            if stop.is_none() {
                stop = match crate::exec::interrupt::requested() {
                    Some(signal) => Some(Stopping::Interrupted(signal)),
                    None if deadline.is_some_and(|d| now >= d) => Some(Stopping::TimedOut),
                    None => None,
                };
                if stop.is_some() {
                    self.stop();
                } else if let (Some(beat), Some((every, call))) = (next_beat, heartbeat)
                    && now >= beat
                {
                    call(now - started);
                    next_beat = beat.checked_add(every);
                }
            }
            std::thread::sleep(POLL);
        }
    }

    /// The supervisor's report, and how many processes the harness still had
    /// to kill itself (0 unless the supervisor failed). A supervisor that died
    /// or was killed without a report gives one that says so
    /// ([`SupervisorReport::lost`]): its trial is then recorded as failed, never
    /// dropped.
    pub(crate) fn finish(mut self, status: ExitStatus) -> Result<(SupervisorReport, usize)> {
        let mut text = String::new();
        let report = match self.child.stdout.take() {
            Some(mut out) => {
                out.read_to_string(&mut text).ok().and_then(|_| serde_json::from_str(text.lines().last()?).ok())
            }
            None => None,
        };
        let mut backstop = Tree::new(self.child.id() as libc::pid_t, &self.token).wait_gone(REAP_LIMIT, &mut || {});
        // A supervisor that died leaves its record: what dropped the marker
        // and left the session (or is in the trial's cgroup) is known only there.
        let mut had_cgroup = false;
        if let (None, Some(record)) = (&report, &self.children) {
            had_cgroup = ChildrenRecord::read(record).is_some_and(|r| r.cgroup.is_some());
            let killed = proctree::sweep_record(record);
            for o in &killed {
                let by = format!("the supervisor of {}, which died", self.display);
                crate::reporter::emit(crate::reporter::Event::LeftBehindKilled {
                    pid: o.pid,
                    command: &o.command,
                    by: &by,
                });
            }
            backstop += killed.len();
        }
        let report: SupervisorReport = match (report, self.lost.take()) {
            (Some(report), None) => report,
            (_, lost) => {
                let why = lost.unwrap_or_else(|| {
                    format!(
                        "its supervisor ended ({}) without saying how the trial ended",
                        crate::exec::process::describe_status(status)
                    )
                });
                crate::reporter::emit(crate::reporter::Event::SupervisorLost {
                    trial: &self.display,
                    why: &why,
                    log: &self.log,
                });
                let containment = if had_cgroup { Containment::Cgroup } else { Containment::ProcessTree };
                SupervisorReport { lost: Some(why), containment, ..SupervisorReport::default() }
            }
        };
        if let Some(why) = &report.spawn_error {
            bail!("cannot run {}: {why}", self.display);
        }
        Ok((report, backstop))
    }
}

/// How to supervise; the command itself is the supervisor's argv after
/// its own name, so that no argument needs to be text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub cwd: Option<PathBuf>,
    /// The trial's output goes here (appended).
    pub log: PathBuf,
    pub grace_ms: u64,
    /// Most bytes of output the log keeps (head and tail).
    pub log_cap: u64,
    /// Where to keep the record of the trial's processes.
    #[serde(default)]
    pub children: Option<PathBuf>,
}

/// Why the supervisor stopped the trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// The harness asked (timeout or interruption).
    Requested,
    /// The harness is gone: its end of the lifeline closed.
    HarnessGone,
}

/// What held a trial's processes together, so that all of them could be
/// found and killed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Containment {
    /// The session, the marker variable and the supervisor's descendants.
    #[default]
    ProcessTree,
    /// A cgroup v2 of its own (and the above).
    Cgroup,
}

/// How the trial ended, as the supervisor saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorReport {
    /// The main process's raw wait status.
    pub(crate) wait_status: Option<i32>,
    pub stopped: Option<StopCause>,
    /// Which signal finally ended a stopped trial: "SIGTERM" or "SIGKILL".
    pub killed_with: Option<String>,
    /// Processes still alive after the main process exited (then killed).
    pub(crate) leftovers: usize,
    /// Processes still alive after everything (the kernel refused to kill them).
    pub(crate) survivors: usize,
    /// Set when the trial's program could not be started.
    pub(crate) spawn_error: Option<String>,
    /// Bytes the trial wrote, and how many of them the log's cap cut out.
    #[serde(default)]
    pub(crate) output_bytes: u64,
    #[serde(default)]
    pub(crate) output_cut: u64,
    #[serde(default)]
    pub containment: Containment,
    /// Why the trial had no cgroup, when it could have had one.
    #[serde(default)]
    pub no_cgroup: Option<String>,
    /// Each process of the trial the supervisor saw, by its pid in every PID
    /// namespace from the supervisor's down to its own: the main process, and
    /// the members found each time the record was written. Sampled, so a
    /// process that lived less than a sampling period may be missing.
    #[serde(default)]
    pub(crate) seen: Vec<libc::pid_t>,
    /// When the supervisor started, in clock ticks after boot: a process
    /// that started before it is no process of the trial.
    #[serde(default)]
    pub(crate) started: Option<u64>,
    /// Set by the harness (never by the supervisor) when the supervisor died
    /// or was killed without a report: why.
    #[serde(skip)]
    pub lost: Option<String>,
}

/// Runs the supervisor if this process was started as one; every entry point
/// of the crate calls this first.
pub fn run_if_requested() -> Option<ExitCode> {
    let spec = std::env::var_os(SUPERVISE)?;
    let report = match serde_json::from_str::<Spec>(&spec.to_string_lossy()) {
        Ok(spec) => supervise(&spec, std::env::args_os().skip(1).collect()),
        Err(e) => {
            SupervisorReport { spawn_error: Some(format!("bad {SUPERVISE}: {e}")), ..SupervisorReport::default() }
        }
    };
    let mut line = serde_json::to_string(&report).unwrap_or_default();
    line.push('\n');
    // The harness may be gone (that is one reason to be here): nobody to tell.
    let _ = std::io::stdout().write_all(line.as_bytes());
    Some(ExitCode::SUCCESS)
}

fn supervise(spec: &Spec, argv: Vec<std::ffi::OsString>) -> SupervisorReport {
    if let Err(why) = lead_session() {
        return spawn_failed(why);
    }
    let token = std::env::var(TRIAL_TOKEN).unwrap_or_default();
    let me = process::getpid().as_raw_nonzero().get();
    let log = match open_log(&spec.log) {
        Ok(log) => log,
        Err(e) => return spawn_failed(e.to_string()),
    };
    let Some((program, args)) = argv.split_first() else { return spawn_failed("empty command line".into()) };
    // Held until this process ends: while it is, no other run sweeps the record.
    let _alive = match spec.children.as_deref() {
        Some(record) => match owner::create_locked(&ChildrenRecord::lock_path(record), &owner::OwnerInfo::me()) {
            Ok(lock) => Some(lock),
            Err(e) => return spawn_failed(e.to_string()),
        },
        None => None,
    };
    let mut contained = match Contained::make(&token) {
        Ok(contained) => contained,
        Err(why) => return spawn_failed(why),
    };
    let mut record = Recorder {
        path: spec.children.as_deref(),
        last: None,
        next: Instant::now(),
        seen: std::collections::BTreeSet::new(),
    };
    raise_memlock();
    // Output goes through a pipe to the copier, which caps the log; writing
    // to the log file directly would let a trial fill the disk.
    let (pipe, writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(e) => return spawn_failed(format!("cannot make a pipe for the output: {e}")),
    };
    // Named in the record before anything runs in it.
    let mut name_in_record =
        |cgroup: &Option<Cgroup>| record.update(&Tree::new(me, &token).with_cgroup(cgroup.clone()), true);
    let spawned = spawn_trial(spec, program, args, &writer, &mut contained, &mut name_in_record);
    // The copier sees end of file only once no writer is left here.
    drop(writer);
    let child = match spawned {
        Ok(child) => child,
        Err(why) => {
            record.remove();
            return spawn_failed(why);
        }
    };
    let tree = Tree::new(me, &token).with_descendants_of(me).with_cgroup(contained.cgroup.clone());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let copier = {
        let (done, log) = (done.clone(), CappedLog::new(log, spec.log_cap, "logs.max_mib"));
        std::thread::spawn(move || capped_log::copy(pipe, log, &done, &std::sync::atomic::AtomicU64::new(0)).0)
    };
    let main = child.id() as libc::pid_t;
    record.saw(main);
    // The child is reaped with waitpid below, together with adopted orphans.
    std::mem::forget(child);
    let mut report = SupervisorReport {
        containment: if contained.cgroup.is_some() { Containment::Cgroup } else { Containment::ProcessTree },
        no_cgroup: contained.no_cgroup.take(),
        ..SupervisorReport::default()
    };
    let mut main_status = watch(main, &tree, Duration::from_millis(spec.grace_ms), &mut record, &mut report);
    report.wait_status = main_status;
    report.seen = record.seen.iter().copied().collect();
    report.started = proctree::stat_of(me).map(|s| s.start_time);
    reap(main, &mut main_status);
    if let Some(made) = &contained.cgroup
        && !made.remove()
    {
        report.survivors = report.survivors.max(made.members().len()).max(1);
    }
    if report.survivors == 0 {
        record.remove();
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let copied = copier.join().unwrap_or_default();
    report.output_bytes = copied.total;
    report.output_cut = copied.cut;
    report
}

/// The trial's session, led by this process (unless whoever started it made
/// it a session leader already), which also reaps what its children orphan.
fn lead_session() -> std::result::Result<(), String> {
    // SAFETY: getsid and getpid read this process's ids and touch no memory.
    let leads = unsafe { libc::getsid(0) == libc::getpid() };
    if !leads && let Err(e) = process::setsid() {
        return Err(format!("the supervisor cannot lead a session of its own (setsid: {e})"));
    }
    // PR_SET_CHILD_SUBREAPER takes a flag; rustix passes this pid, which is not 0.
    let _ = process::set_child_subreaper(Some(process::getpid()));
    Ok(())
}

/// The trial's cgroup, or why it runs without one.
struct Contained {
    mode: cgroup::Mode,
    cgroup: Option<Cgroup>,
    no_cgroup: Option<String>,
}

impl Contained {
    /// `Err` only where `on` asks for a cgroup that cannot be made.
    fn make(token: &str) -> std::result::Result<Contained, String> {
        let mode = cgroup::Mode::from_env();
        let (cgroup, no_cgroup) = match mode {
            cgroup::Mode::Off => (None, Some(format!("{}=off", crate::env_names::CGROUP))),
            _ => match Cgroup::create(&file_name(token)) {
                Ok(made) => (Some(made), None),
                Err(e) if mode == cgroup::Mode::On => return Err(format!("{}=on, but {e}", crate::env_names::CGROUP)),
                Err(e) => (None, Some(e.to_string())),
            },
        };
        Ok(Contained { mode, cgroup, no_cgroup })
    }
}

/// Starts the trial, its output into `writer`, moved into its cgroup before
/// it runs; in `auto`, once more without the cgroup if that start fails.
fn spawn_trial(
    spec: &Spec,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
    writer: &std::io::PipeWriter,
    contained: &mut Contained,
    name_in_record: &mut dyn FnMut(&Option<Cgroup>),
) -> std::result::Result<Child, String> {
    for attempt in 0..2 {
        name_in_record(&contained.cgroup);
        let mut command = Command::new(program);
        command.args(args).env_remove(SUPERVISE).stdin(Stdio::null());
        match (writer.try_clone(), writer.try_clone()) {
            (Ok(out), Ok(err)) => command.stdout(out).stderr(err),
            (Err(e), _) | (_, Err(e)) => return Err(format!("cannot make a pipe for the output: {e}")),
        };
        if let Some(dir) = &spec.cwd {
            command.current_dir(dir);
        }
        let procs = contained.cgroup.as_ref().map(Cgroup::procs_for_writing).transpose().map_err(|e| e.to_string())?;
        if let Some(procs) = &procs {
            let fd = std::os::fd::AsRawFd::as_raw_fd(procs);
            // SAFETY: a write(2) to an open descriptor is async-signal-safe
            // and touches no memory of the parent.
            unsafe {
                command.pre_exec(move || {
                    let procs = std::os::fd::BorrowedFd::borrow_raw(fd);
                    rustix::io::write(procs, b"0").map(drop).map_err(std::io::Error::from)
                });
            }
        }
        match command.spawn() {
            Ok(child) => return Ok(child),
            Err(e) if attempt == 0 && contained.cgroup.is_some() && contained.mode == cgroup::Mode::Auto => {
                // Perhaps the move into the cgroup failed: once more without.
                if let Some(made) = contained.cgroup.take() {
                    made.remove();
                }
                contained.no_cgroup = Some(format!("the trial could not be started in its cgroup: {e}"));
            }
            Err(e) => {
                let hint =
                    if e.kind() == std::io::ErrorKind::NotFound { " (not installed or not on PATH?)" } else { "" };
                if let Some(made) = &contained.cgroup {
                    made.remove();
                }
                return Err(format!("cannot start {}: {e}{hint}", program.to_string_lossy()));
            }
        }
    }
    Err(format!("cannot start {}", program.to_string_lossy()))
}

/// Waits for the trial's main process, keeping the record of its tree: on
/// the lifeline's cause, SIGTERM to the tree, then SIGKILL after the grace;
/// after a normal end, what is still running once settled is killed as
/// left behind. Returns the main process's wait status.
fn watch(
    main: libc::pid_t,
    tree: &Tree,
    grace: Duration,
    record: &mut Recorder<'_>,
    report: &mut SupervisorReport,
) -> Option<i32> {
    let mut main_status = None;
    let mut stop_at: Option<Instant> = None;
    loop {
        reap(main, &mut main_status);
        record.update(tree, false);
        match stop_at {
            None => {
                if main_status.is_some() {
                    break;
                }
                if let Some(cause) = lifeline() {
                    report.stopped = Some(cause);
                    report.killed_with = Some("SIGTERM".into());
                    tree.signal(libc::SIGTERM);
                    stop_at = Some(Instant::now().checked_add(grace).unwrap_or_else(Instant::now));
                }
            }
            Some(deadline) => {
                if main_status.is_some() && tree.members().is_empty() {
                    break;
                }
                if Instant::now() >= deadline {
                    report.killed_with = Some("SIGKILL".into());
                    tree.signal(libc::SIGKILL);
                    let survivors = tree.wait_gone(REAP_LIMIT, &mut || reap(main, &mut main_status));
                    report.survivors = survivors;
                    if main_status.is_none() {
                        wait_for(main, &mut main_status);
                    }
                    break;
                }
            }
        }
        std::thread::sleep(POLL);
    }
    if stop_at.is_none() {
        // A launcher's helpers (remote daemons, their ssh) may take a moment
        // to end after it returns; what is still running then was left behind.
        let settle = Instant::now() + LEFTOVER_SETTLE;
        while !tree.members().is_empty() && Instant::now() < settle {
            reap(main, &mut main_status);
            std::thread::sleep(POLL);
        }
        report.leftovers = tree.signal(libc::SIGKILL);
    }
    report.survivors = tree.wait_gone(REAP_LIMIT, &mut || reap(main, &mut main_status));
    main_status
}

/// A token as part of a file or cgroup name.
pub(crate) fn file_name(token: &str) -> String {
    token.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// How often the supervisor looks at its trial's processes for the record.
const RECORD_EVERY: Duration = Duration::from_millis(250);

/// Keeps the record of the trial's processes current: rewritten (atomically)
/// when the set changes. Remembers every process it saw, for the profiles'
/// names (`coverage::profiles`).
struct Recorder<'a> {
    path: Option<&'a Path>,
    last: Option<ChildrenRecord>,
    next: Instant,
    seen: std::collections::BTreeSet<libc::pid_t>,
}

impl Recorder<'_> {
    /// Writes the record if the set changed and it is time to look (or `now`).
    fn update(&mut self, tree: &Tree, now: bool) {
        let Some(path) = self.path else { return };
        if !now && Instant::now() < self.next {
            return;
        }
        self.next = Instant::now() + RECORD_EVERY;
        let mut members = tree.members();
        members.sort_unstable();
        for &pid in &members {
            self.saw(pid);
        }
        let record = ChildrenRecord::of(&members, tree.cgroup());
        if self.last.as_ref() != Some(&record) {
            let text = serde_json::to_string(&record).expect("record serializes");
            // Whole or not at all (a rename); a record that cannot be
            // written only weakens a later sweep.
            let tmp = path.with_extension("json.tmp");
            let _ = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
            self.last = Some(record);
        }
    }

    /// Notes `pid`, a process of the trial, by its pid in each namespace.
    fn saw(&mut self, pid: libc::pid_t) {
        self.seen.insert(pid);
        self.seen.extend(proctree::ns_pids(pid));
    }

    /// Removes the record and then its lock: the trial's processes are gone.
    fn remove(&self) {
        if let Some(path) = self.path {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_file(ChildrenRecord::lock_path(path));
        }
    }
}

/// Upstream starts every test through `bash -c 'ulimit -l unlimited; ...'`
/// (RDMA registers pinned memory). Without a shell: the supervisor raises its
/// own locked-memory limit, which the trial inherits, as far as the system
/// allows: unlimited when privileged, else the soft limit up to the hard one.
fn raise_memlock() {
    use process::{Resource, Rlimit};
    // `None` is RLIM_INFINITY.
    if process::setrlimit(Resource::Memlock, Rlimit { current: None, maximum: None }).is_ok() {
        return;
    }
    let hard = process::getrlimit(Resource::Memlock).maximum;
    let _ = process::setrlimit(Resource::Memlock, Rlimit { current: hard, maximum: hard });
}

fn spawn_failed(why: String) -> SupervisorReport {
    SupervisorReport { spawn_error: Some(why), ..SupervisorReport::default() }
}

/// Reaps every finished child (adopted orphans too); records `main`'s status.
fn reap(main: libc::pid_t, main_status: &mut Option<i32>) {
    // Ok(None): no child has changed state; an error: no child is left.
    while let Ok(Some((pid, status))) = process::waitpid(None, WaitOptions::NOHANG) {
        if pid.as_raw_nonzero().get() == main {
            *main_status = Some(status.as_raw());
        }
    }
}

/// Blocks until `main` is reaped (it was sent SIGKILL).
fn wait_for(main: libc::pid_t, main_status: &mut Option<i32>) {
    if let Ok(Some((_, status))) = process::waitpid(process::Pid::from_raw(main), WaitOptions::empty()) {
        *main_status = Some(status.as_raw());
    }
}

/// Whether the harness asked to stop, or is gone; `None` while it waits.
fn lifeline() -> Option<StopCause> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    let ready = poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap_or(0);
    if ready == 0 || fds[0].revents().is_empty() {
        return None;
    }
    let mut byte = [0u8; 1];
    // fd 0 itself, not std's buffer: one byte, the harness's word.
    match rustix::io::read(&stdin, &mut byte) {
        Ok(1) if byte[0] == STOP => Some(StopCause::Requested),
        Ok(1) => None,
        _ => Some(StopCause::HarnessGone),
    }
}

/// The trial's log, opened to append to what the harness wrote there. A
/// link put in its place since is not followed (`O_NOFOLLOW`), and a file
/// with another name (a hard link to a file outside the workspace) is
/// refused: the harness writes only into files it made.
fn open_log(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::options()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let links = file.metadata().with_context(|| format!("cannot stat {}", path.display()))?.nlink();
    if links > 1 {
        bail!(
            "refusing to write {}: it has {links} names (a hard link), so it is not a file the harness made; remove it",
            path.display()
        );
    }
    Ok(file)
}
