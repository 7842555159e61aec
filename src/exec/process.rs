//! Every external command goes through [`Cmd`]: an argv vector (never a shell
//! string), an environment delta and a working directory. A failure always
//! reports the full command line and what the command printed.
//!
//! Every command has a time limit and an output cap ([`Limits`]), and runs
//! in a process group of its own: a stop (the limit, an interruption, the
//! cap) kills the group, so its own children too. Its output is read until
//! it exits and then for at most 2 s (`capped_log::copy`): a grandchild that escaped the
//! group and holds the pipe open never holds the harness (it waited for end
//! of file, 6½ minutes for a gtest listing). What it left running in its
//! group when it exits is killed too, unless it is [`Cmd::detached`].

pub(crate) use super::interrupt::signal_name;
use crate::error::{Error, Result};
use crate::exec::capped_log::{self, CappedLog};
use crate::exec::redact;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    /// What the command changes in the inherited environment, in the order
    /// first named: `Some` sets a variable, `None` removes it.
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    /// How long it may run, and how much of its output is kept.
    limits: Limits,
    /// What it leaves running in its group when it exits is left alone.
    detached: bool,
}

/// How long a command may run and how much it may print. Past the time
/// limit its process group is killed and it fails. Its stdout (the data a
/// caller reads) past `stdout` bytes: it is killed and fails naming the cap
/// ([`Overflow::Fail`]), or the first and last halves are kept with a line
/// saying what was cut ([`Overflow::KeepEnds`], for a build's log). Its
/// stderr (what a failure shows) keeps its first and last halves of
/// [`STDERR_CAP`] always. The values are in `docs/faults.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) time: Duration,
    pub(crate) stdout: u64,
    pub(crate) overflow: Overflow,
}

/// What becomes of a command's stdout past its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overflow {
    Fail,
    KeepEnds,
}

impl Limits {
    /// A probe, a listing, git: anything not named below.
    pub(crate) const DEFAULT: Limits =
        Limits { time: Duration::from_secs(600), stdout: 64 << 20, overflow: Overflow::Fail };
    /// llvm-cov and llvm-profdata: on NCCL or RCCL an export or a merge
    /// takes minutes and its JSON hundreds of MiB.
    pub(crate) const LLVM_TOOL: Limits =
        Limits { time: Duration::from_secs(2 * 3600), stdout: 4 << 30, overflow: Overflow::Fail };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// The most of a command's stderr kept: its first and last halves.
pub(crate) const STDERR_CAP: u64 = 4 << 20;

/// How many trailing lines of output a failure message shows.
pub(crate) const TAIL_LINES: usize = 30;

/// How often a running command looks whether the run was interrupted.
const INTERRUPT_POLL: Duration = Duration::from_millis(50);

impl Cmd {
    pub fn new(program: impl Into<OsString>) -> Self {
        Cmd { program: program.into(), ..Default::default() }
    }

    /// A command from an argv vector; `None` if it is empty.
    pub(crate) fn from_argv(argv: &[String]) -> Option<Self> {
        let (program, args) = argv.split_first()?;
        Some(Cmd::new(program).args(args))
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets `key`; a later setting (or removal) of the same key replaces it.
    pub fn env(self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env_entry(key.into(), Some(value.into()))
    }

    pub(crate) fn envs(self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        vars.into_iter().fold(self, |cmd, (k, v)| cmd.env(k, v))
    }

    /// Removes `key` from what the command inherits.
    pub(crate) fn env_remove(self, key: impl Into<OsString>) -> Self {
        self.env_entry(key.into(), None)
    }

    fn env_entry(mut self, key: OsString, value: Option<OsString>) -> Self {
        match self.env.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.env.push((key, value)),
        }
        self
    }

    /// Kills the command, and fails, when it runs longer than `limit`: for a
    /// probe that may hang on a broken GPU or driver.
    pub(crate) fn time_limit(mut self, limit: Duration) -> Self {
        self.limits.time = limit;
        self
    }

    /// Leaves what the command starts running after it exits: for a
    /// launcher (`xdg-open` starts the browser).
    pub fn detached(mut self) -> Self {
        self.detached = true;
        self
    }

    /// Sets how long it may run and how much it may print at once.
    pub(crate) fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub(crate) fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    pub(crate) fn program(&self) -> &OsStr {
        &self.program
    }

    pub(crate) fn get_args(&self) -> &[OsString] {
        &self.args
    }

    /// The environment changes: `Some` sets, `None` removes.
    pub(crate) fn get_envs(&self) -> &[(OsString, Option<OsString>)] {
        &self.env
    }

    pub(crate) fn get_cwd(&self) -> Option<&Path> {
        self.cwd.as_deref()
    }

    /// The argv as text, for records (a non-UTF-8 argument is shown lossily).
    pub(crate) fn argv(&self) -> Vec<String> {
        std::iter::once(&self.program).chain(&self.args).map(|a| a.to_string_lossy().into_owned()).collect()
    }

    /// The argv as it may be recorded: secrets masked (see [`crate::exec::redact`]).
    /// `argv()` is what runs; this is what logs, results and messages show.
    pub(crate) fn argv_redacted(&self) -> Vec<String> {
        redact::argv(&self.argv())
    }

    /// The command as a shell line a person can paste: `cd DIR && K=V prog args`,
    /// with secrets masked, since every log, record and error message that
    /// shows a command shows this line.
    pub(crate) fn display(&self) -> String {
        let mut parts = Vec::new();
        if let Some(dir) = &self.cwd {
            parts.push(format!("cd {} &&", shell_quote(&dir.display().to_string())));
        }
        let removed: Vec<String> = self
            .env
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| format!("-u {}", shell_quote(&k.to_string_lossy())))
            .collect();
        if !removed.is_empty() {
            parts.push("env".into());
            parts.extend(removed);
        }
        for (k, v) in &self.env {
            if let Some(v) = v {
                let (k, v) = (k.to_string_lossy(), v.to_string_lossy());
                parts.push(format!("{k}={}", shell_quote(&redact::value(&k, &v))));
            }
        }
        parts.extend(self.argv_redacted().iter().map(|a| shell_quote(a)));
        parts.join(" ")
    }

    /// Runs to completion and returns stdout; stderr goes into the error.
    pub fn read(&self) -> Result<String> {
        self.capture().map(|(stdout, _)| stdout)
    }

    /// Runs to completion and returns stdout and, apart, stderr (for tools
    /// that warn there while they succeed, such as llvm-cov).
    pub(crate) fn read_both(&self) -> Result<(String, String)> {
        self.capture()
    }

    /// Runs to completion and returns stdout followed by stderr (for tools
    /// that answer on stderr, such as `clang -###`).
    pub fn read_all(&self) -> Result<String> {
        self.capture().map(|(stdout, stderr)| stdout + &stderr)
    }

    /// Runs to completion, unless the run is interrupted and commands are to
    /// stop (`interrupt.rs`, in the report): then the command is killed and
    /// this fails, so a report step stops instead of running its tools on.
    fn capture(&self) -> Result<(String, String)> {
        let (status, stdout, stderr) = self.outcome()?;
        if status.success() {
            return Ok((stdout, stderr));
        }
        Err(Error::new(format!(
            "command failed ({}): {}\n{}",
            describe_status(status),
            self.display(),
            indent_tail(if stderr.trim().is_empty() { &stdout } else { &stderr }, TAIL_LINES)
        )))
    }

    /// Runs to completion (as [`Cmd::read`] does: killed past its time
    /// limit or when interrupted) and returns how it ended, stdout and
    /// stderr, whatever the exit status: for a caller that excerpts a
    /// failed build's whole output.
    pub(crate) fn outcome(&self) -> Result<(std::process::ExitStatus, String, String)> {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new(&self.program);
        command.args(&self.args).stdin(std::process::Stdio::null());
        command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        for (k, v) in &self.env {
            match v {
                Some(v) => command.env(k, v),
                None => command.env_remove(k),
            };
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        // A group of its own: a stop reaches what it started (posix_spawn's
        // POSIX_SPAWN_SETPGROUP, no fork of the harness).
        let mut child = command.process_group(0).spawn().map_err(|e| self.cannot_start(e))?;
        let group = child.id() as libc::pid_t;
        let done = Arc::new(AtomicBool::new(false));
        let stdout_seen = Arc::new(AtomicU64::new(0));
        let limits = self.limits;
        let stdout_setting = "the command's stdout cap";
        let reader = |pipe: Option<_>, cap: u64, setting: &'static str, seen: Arc<AtomicU64>| {
            let done = done.clone();
            std::thread::spawn(move || match pipe {
                Some(pipe) => capped_log::copy(pipe, CappedLog::new(Vec::new(), cap, setting), &done, &seen),
                None => (capped_log::Copied::default(), Vec::new()),
            })
        };
        let stdout = reader(child.stdout.take().map(as_file), limits.stdout, stdout_setting, stdout_seen.clone());
        let stderr = reader(
            child.stderr.take().map(as_file),
            STDERR_CAP,
            "the command's stderr cap",
            Arc::new(AtomicU64::new(0)),
        );
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(1);
        let stopped = loop {
            if exited(group) {
                // What it left in its group is its leftovers, killed while
                // its zombie still holds the group's number.
                if !self.detached {
                    kill_group(group);
                }
                break child.wait().map_err(|e| self.cannot_start(e));
            }
            let why = if started.elapsed() > limits.time {
                Some(format!(
                    "{} ran past its {} and was killed",
                    self.display(),
                    humantime::format_duration(limits.time)
                ))
            } else if limits.overflow == Overflow::Fail && stdout_seen.load(Ordering::Relaxed) > limits.stdout {
                Some(format!(
                    "{} printed more than {} MiB on stdout, its cap, and was killed",
                    self.display(),
                    limits.stdout >> 20
                ))
            } else if crate::exec::interrupt::stops_commands() {
                Some(format!("interrupted by {}: stopped {}", crate::exec::interrupt::describe(), self.display()))
            } else {
                None
            };
            if let Some(why) = why {
                kill_group(group);
                let _ = child.wait();
                break Err(Error::new(why));
            }
            // Soon for a quick probe, every INTERRUPT_POLL for a long tool.
            std::thread::sleep(pause);
            pause = (pause * 2).min(INTERRUPT_POLL);
        };
        done.store(true, Ordering::Release);
        let (out, err) = (stdout.join(), stderr.join());
        let status = stopped?;
        let ((out_copied, out), (_, err)) = (out.unwrap_or_default(), err.unwrap_or_default());
        if out_copied.cut > 0 && limits.overflow == Overflow::Fail {
            return Err(Error::new(format!(
                "{} printed {} bytes on stdout, more than its cap of {} MiB",
                self.display(),
                out_copied.total,
                limits.stdout >> 20
            )));
        }
        Ok((status, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned()))
    }

    fn cannot_start(&self, e: std::io::Error) -> Error {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            format!(" ({} is not installed or not on PATH)", self.program.to_string_lossy())
        } else {
            String::new()
        };
        Error::new(format!("cannot run {}: {e}{hint}", self.display()))
    }
}

/// A child's pipe as a file, so that both of its pipes are read by one reader.
fn as_file(pipe: impl Into<std::os::fd::OwnedFd>) -> std::fs::File {
    std::fs::File::from(pipe.into())
}

/// Whether the child `pid` has exited, without reaping it.
fn exited(pid: libc::pid_t) -> bool {
    use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
    let Some(pid) = Pid::from_raw(pid) else { return true };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    // An error (no such child) is an end too: the wait that follows says which.
    waitid(WaitId::Pid(pid), options).map_or(true, |status| status.is_some())
}

/// Kills the process group `group` (a command and what it started in it).
fn kill_group(group: libc::pid_t) {
    // SAFETY: kill has no memory-safety preconditions; a negative pid names the group.
    unsafe { libc::kill(-group, libc::SIGKILL) };
}

/// `exit status 3`, `killed by signal 9 (SIGKILL)`.
pub(crate) fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
        _ => "unknown status".into(),
    }
}

/// The last `n` lines of `text`, indented so they read as quoted output.
pub(crate) fn indent_tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    let mut out: Vec<String> = Vec::new();
    if start > 0 {
        out.push(format!("    ... ({start} earlier lines)"));
    }
    out.extend(lines[start..].iter().map(|l| format!("    {l}")));
    if out.is_empty() {
        out.push("    (no output)".into());
    }
    out.join("\n")
}

/// What a compiler, linker or CMake writes on the line that says what
/// failed, lower-cased: these lines come first in an excerpt, because one of
/// them usually names the fix (`DSO missing from command line`).
const FAILURE_MARKS: &[&str] = &[
    "error:",
    "fatal error",
    "cmake error",
    "undefined reference",
    "undefined symbol",
    "error adding symbols",
    "dso missing",
    "ld returned",
    "collect2",
    "linker command failed",
    "multiple definition",
    "cannot find -l",
];

/// What make, ninja or the system write on a line about a failure that
/// usually follows from an earlier one, lower-cased: these come after the
/// [`FAILURE_MARKS`] lines.
const FOLLOW_MARKS: &[&str] =
    &["*** ", "failed: ", "no such file", "fatal", "cannot find", "not found", "permission denied"];

/// At most this many of a log's error lines are shown.
pub(crate) const ERROR_LINES: usize = 20;

/// How telling a log line is about why a build failed, lower first; `None`
/// for a line that is not about a failure. A warning that happens to
/// mention one (`ld: warning: libb.so, needed by liba.so, not found`) comes
/// last: a build with hundreds of warnings must not hide its one error.
fn failure_rank(line: &str) -> Option<u8> {
    let lower = line.to_lowercase();
    let warning = lower.contains("warning");
    if !warning && FAILURE_MARKS.iter().any(|m| lower.contains(m)) {
        Some(0)
    } else if !warning && FOLLOW_MARKS.iter().any(|m| lower.contains(m)) {
        Some(1)
    } else if warning && FAILURE_MARKS.iter().chain(FOLLOW_MARKS).any(|m| lower.contains(m)) {
        Some(2)
    } else {
        None
    }
}

/// The lines of `text` that say why a build failed, numbered and indented,
/// at most `n`; `None` if there is none. They are ranked: compiler, linker
/// and CMake errors ([`FAILURE_MARKS`]) first, then make's and ninja's
/// ([`FOLLOW_MARKS`]), then warnings that mention a failure, each rank in
/// the log's order (the first error is the cause, the rest often follow
/// from it). The real `ld` error can be hundreds of lines above a log's
/// tail, below hundreds of warnings. The command line a supervised log
/// starts with (`$ …`) is not one of them.
pub(crate) fn error_lines(text: &str, n: usize) -> Option<String> {
    let mut found: Vec<(u8, usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with("$ "))
        .filter_map(|(i, l)| failure_rank(l).map(|rank| (rank, i, l)))
        .collect();
    if found.is_empty() {
        return None;
    }
    found.sort_by_key(|&(rank, i, _)| (rank, i));
    let mut out: Vec<String> = found.iter().take(n).map(|(_, i, l)| format!("    {:>5}: {l}", i + 1)).collect();
    if found.len() > n {
        out.push(format!("    ... ({} more)", found.len() - n));
    }
    Some(out.join("\n"))
}

/// Quotes one argument for a POSIX shell, only when it needs it. Written
/// here rather than with `shlex`, whose `"it's"` form would change every
/// recorded command line; this is the one POSIX form, `'…'` with `'\''`.
pub(crate) fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%^".contains(&b));
    if plain { arg.to_string() } else { format!("'{}'", arg.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_log_s_error_lines_are_found_wherever_they_are() {
        let mut log: Vec<String> = (0..300).map(|i| format!("[{i}/300] Building CXX object x{i}.o")).collect();
        log[41] = "/usr/bin/ld: init.cc.o: undefined reference to `ccl::setup()'".into();
        log[42] = "clang++: error: linker command failed with exit code 1 (use -v to see invocation)".into();
        log[290] = "make[2]: *** [CMakeFiles/ccl.dir/build.make:97: libccl.so] Error 1".into();
        let text = log.join("\n");
        let found = error_lines(&text, 20).unwrap();
        assert_eq!(
            found,
            "       42: /usr/bin/ld: init.cc.o: undefined reference to `ccl::setup()'\n       43: clang++: error: linker command failed with exit code 1 (use -v to see invocation)\n      291: make[2]: *** [CMakeFiles/ccl.dir/build.make:97: libccl.so] Error 1"
        );
        assert!(!indent_tail(&text, TAIL_LINES).contains("undefined reference"), "the tail alone misses it");
        assert_eq!(error_lines(&text, 1).unwrap().lines().last(), Some("    ... (2 more)"));
        assert_eq!(error_lines("$ sh -c 'echo error: x'\n[1/2] Building\n-Werror -o x.o", 20), None);
    }

    /// Lines as clang 22, GNU ld 2.44, CMake 3.31 and GNU make write them.
    #[test]
    fn errors_rank_before_what_follows_from_them_and_before_warnings() {
        let mut log: Vec<String> = Vec::new();
        for i in 0..25 {
            log.push(format!(
                "/usr/bin/ld: warning: libdep{i}.so.1, needed by libmid.so, not found (try using -rpath or -rpath-link)"
            ));
        }
        log.push(
            "CMake Warning at CMakeLists.txt:4 (find_package): Could not find a package configuration file".into(),
        );
        log.push("/usr/bin/ld: CMakeFiles/app.dir/app.c.o: undefined reference to symbol 'base_value'".into());
        log.push("/usr/bin/ld: /tmp/le/libbase.so: error adding symbols: DSO missing from command line".into());
        log.push("clang-22: error: linker command failed with exit code 1 (use -v to see invocation)".into());
        log.push("gmake[2]: *** [CMakeFiles/app.dir/build.make:98: app] Error 1".into());
        log.push("FAILED: app".into());
        log.push("collect2: error: ld returned 1 exit status".into());
        log.push("CMake Error at CMakeLists.txt:9 (add_executable): Cannot find source file: app2.c".into());
        let found = error_lines(&log.join("\n"), 7).unwrap();
        let lines: Vec<&str> = found.lines().collect();
        assert_eq!(
            lines[0],
            "       27: /usr/bin/ld: CMakeFiles/app.dir/app.c.o: undefined reference to symbol 'base_value'"
        );
        assert!(lines[1].ends_with("error adding symbols: DSO missing from command line"), "{found}");
        assert!(lines[2].contains("linker command failed"), "{found}");
        assert!(lines[3].contains("collect2: error: ld returned 1"), "{found}");
        assert!(lines[4].starts_with("       33: CMake Error"), "{found}");
        assert_eq!(lines[5], "       30: gmake[2]: *** [CMakeFiles/app.dir/build.make:98: app] Error 1");
        assert_eq!(lines[6], "       31: FAILED: app");
        assert_eq!(lines[7], "    ... (25 more)", "the warnings come last, and only when there is room");
        let warnings_only = error_lines(&log[..26].join("\n"), 3).unwrap();
        assert!(warnings_only.starts_with("        1: /usr/bin/ld: warning: libdep0.so.1"), "{warnings_only}");
    }

    #[test]
    fn display_quotes_only_what_needs_it() {
        let cmd = Cmd::new("mpirun")
            .args(["-np", "4", "it's here", "a b"])
            .env("A", "x y")
            .env_remove("__LLVM_PROFILE_RT_INIT_ONCE")
            .cwd("/w d");
        assert_eq!(
            cmd.display(),
            "cd '/w d' && env -u __LLVM_PROFILE_RT_INIT_ONCE A='x y' mpirun -np 4 'it'\\''s here' 'a b'"
        );
    }

    #[test]
    fn display_masks_secrets_but_the_command_keeps_them() {
        let cmd = Cmd::new("mpirun")
            .args(["-genv", "MY_TOKEN", "t0k", "--db=postgres://u:pw@h/db"])
            .env("API_KEY", "k3y")
            .env(crate::env_names::TRIAL_TOKEN, "1-2-3");
        assert_eq!(
            cmd.display(),
            "API_KEY='***' CCL_COV_TRIAL_TOKEN=1-2-3 mpirun -genv MY_TOKEN '***' '--db=postgres://u:***@h/db'"
        );
        assert_eq!(cmd.argv_redacted(), ["mpirun", "-genv", "MY_TOKEN", "***", "--db=postgres://u:***@h/db"]);
        assert_eq!(cmd.argv()[3], "t0k", "what runs is unchanged");
        assert_eq!(cmd.get_envs()[0].1.as_deref(), Some(OsStr::new("k3y")));
    }

    #[test]
    fn failure_reports_command_status_and_stderr() {
        let err = Cmd::new("sh").args(["-c", "echo out; echo boom >&2; exit 3"]).read().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("exit status 3"), "{msg}");
        assert!(msg.contains("sh -c 'echo out; echo boom >&2; exit 3'"), "{msg}");
        assert!(msg.contains("boom"), "{msg}");
    }

    #[test]
    fn missing_program_says_so() {
        let msg = Cmd::new("ccl-coverage-no-such-tool").read().unwrap_err().to_string();
        assert!(msg.contains("not installed or not on PATH"), "{msg}");
    }

    #[test]
    fn env_and_cwd_reach_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let out = Cmd::new("sh").args(["-c", "echo $CCL_X; pwd"]).env("CCL_X", "v a l").cwd(dir.path()).read().unwrap();
        let canon = dir.path().canonicalize().unwrap();
        assert_eq!(out, format!("v a l\n{}\n", canon.display()));
    }

    #[test]
    fn the_environment_is_a_map_of_set_and_removed_names() {
        let cmd = Cmd::new("prog").env("A", "1").env_remove("B").env("A", "2").env("B", "3").env_remove("A");
        let envs: Vec<(String, Option<String>)> = cmd
            .get_envs()
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.as_ref().map(|v| v.to_string_lossy().into_owned())))
            .collect();
        assert_eq!(envs, [("A".to_string(), None), ("B".to_string(), Some("3".to_string()))]);
        assert_eq!(cmd.display(), "env -u A B=3 prog");
    }

    #[test]
    fn arguments_need_not_be_text() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let name = OsStr::from_bytes(b"caf\xe9");
        std::fs::write(dir.path().join(name), "x").unwrap();
        // `ls` fails on a name that does not exist, such as a lossy copy of this one.
        let out = Cmd::new("ls").arg(dir.path().join(name)).read().unwrap();
        assert!(out.ends_with("caf\u{fffd}\n"), "{out}");
        assert!(Cmd::new("ls").arg(dir.path().join("caf\u{fffd}")).read().is_err());
    }

    /// Whether `pid` is a live process (a zombie counts as gone).
    fn alive(pid: i32) -> bool {
        crate::exec::proctree::stat_of(pid).is_some_and(|s| s.state != 'Z')
    }

    /// The pid a command wrote into `file`.
    fn pid_in(file: &Path) -> i32 {
        std::fs::read_to_string(file).unwrap().trim().parse().unwrap()
    }

    /// A grandchild that keeps the command's stdout and stderr open (it used
    /// to hold `read` until it ended: end of file never came) neither holds
    /// the harness nor outlives the command.
    #[test]
    fn a_grandchild_holding_the_output_neither_holds_the_caller_nor_outlives_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let started = std::time::Instant::now();
        let script = format!("sleep 60 & echo $! > '{}'; echo listed", pid.display());
        let out = Cmd::new("sh").args(["-c", &script]).read().unwrap();
        assert_eq!(out, "listed\n");
        assert!(started.elapsed() < Duration::from_secs(10), "held: {:?}", started.elapsed());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid_in(&pid)) {
            assert!(std::time::Instant::now() < deadline, "the grandchild outlived the command");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A stop past the time limit kills the command's group, its children too.
    #[test]
    fn a_stop_reaches_the_command_s_children() {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let script = format!("sleep 60 & echo $! > '{}'; wait", pid.display());
        let error = Cmd::new("sh").args(["-c", &script]).time_limit(Duration::from_millis(500)).read().unwrap_err();
        assert!(error.to_string().contains("ran past its 500ms and was killed"), "{error}");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid_in(&pid)) {
            assert!(std::time::Instant::now() < deadline, "the child outlived the stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stdout past its cap: the command is killed at once and fails naming
    /// the cap (`yes` never ends); or its ends are kept, with the cut named.
    /// Stderr keeps its ends, whatever the stdout policy.
    #[test]
    fn output_past_its_cap_fails_or_keeps_its_ends() {
        let flood = Limits { stdout: 1 << 20, ..Limits::DEFAULT };
        let started = std::time::Instant::now();
        let error = Cmd::new("yes").limits(flood).read().unwrap_err().to_string();
        assert!(error.contains("yes printed more than 1 MiB on stdout, its cap"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        let ends = Limits { stdout: 64 << 10, overflow: Overflow::KeepEnds, ..Limits::DEFAULT };
        let out = Cmd::new("seq").args(["1", "200000"]).limits(ends).read().unwrap();
        assert!(out.starts_with("1\n2\n3\n") && out.ends_with("199999\n200000\n"), "{}", out.len());
        assert!(out.contains(capped_log::CUT_MARK) && out.len() < 70 << 10, "{}", out.len());
        let noisy = Cmd::new("sh").args(["-c", "seq 1 2000000 >&2; exit 3"]).read().unwrap_err().to_string();
        assert!(noisy.contains("command failed (exit status 3)") && noisy.ends_with("    2000000"), "{noisy}");
        let (_, _, stderr) = Cmd::new("sh").args(["-c", "seq 1 2000000 >&2"]).outcome().unwrap();
        assert!(stderr.starts_with("1\n2\n") && stderr.len() <= STDERR_CAP as usize + 200, "{}", stderr.len());
    }

    #[test]
    fn a_command_past_its_time_limit_is_killed_and_fails() {
        let started = std::time::Instant::now();
        let error = Cmd::new("sleep").arg("30").time_limit(Duration::from_millis(300)).read().unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "not killed: {:?}", started.elapsed());
        assert_eq!(error.to_string(), "sleep 30 ran past its 300ms and was killed");
        assert_eq!(Cmd::new("true").time_limit(Duration::from_secs(30)).read().unwrap(), "");
    }
}
