//! Every external command goes through [`Cmd`]: an argv vector (never a shell
//! string), an environment delta and a working directory. A failure always
//! reports the full command line and what the command printed.

pub(crate) use super::interrupt::signal_name;
use crate::error::{Error, Result};
use crate::exec::redact;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    /// What the command changes in the inherited environment, in the order
    /// first named: `Some` sets a variable, `None` removes it.
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    /// The longest the command may run; past it, it is killed and fails.
    limit: Option<std::time::Duration>,
}

/// How many trailing lines of output a failure message shows.
pub(crate) const TAIL_LINES: usize = 30;

/// How often a running command looks whether the run was interrupted.
const INTERRUPT_POLL: std::time::Duration = std::time::Duration::from_millis(50);

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
    pub(crate) fn time_limit(mut self, limit: std::time::Duration) -> Self {
        self.limit = Some(limit);
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

    fn expression(&self) -> duct::Expression {
        let mut expr = duct::cmd(&self.program, &self.args);
        for (k, v) in &self.env {
            expr = match v {
                Some(v) => expr.env(k, v),
                None => expr.env_remove(k),
            };
        }
        if let Some(dir) = &self.cwd {
            expr = expr.dir(dir);
        }
        expr.stdin_null()
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
        let handle = self
            .expression()
            .stdout_capture()
            .stderr_capture()
            .unchecked()
            .start()
            .map_err(|e| self.cannot_start(e))?;
        let started = std::time::Instant::now();
        let output = loop {
            if let Some(output) = handle.wait_timeout(INTERRUPT_POLL).map_err(|e| self.cannot_start(e))? {
                break output;
            }
            if let Some(limit) = self.limit.filter(|limit| started.elapsed() > *limit) {
                let _ = handle.kill();
                let _ = handle.wait();
                return Err(Error::new(format!(
                    "{} ran past its {} and was killed",
                    self.display(),
                    humantime::format_duration(limit)
                )));
            }
            if crate::exec::interrupt::stops_commands() {
                let _ = handle.kill();
                let _ = handle.wait();
                return Err(Error::new(format!(
                    "interrupted by {}: stopped {}",
                    crate::exec::interrupt::describe(),
                    self.display()
                )));
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        Ok((output.status, stdout, stderr))
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

    #[test]
    fn a_command_past_its_time_limit_is_killed_and_fails() {
        let started = std::time::Instant::now();
        let error = Cmd::new("sleep").arg("30").time_limit(std::time::Duration::from_millis(300)).read().unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "not killed: {:?}", started.elapsed());
        assert_eq!(error.to_string(), "sleep 30 ran past its 300ms and was killed");
        assert_eq!(Cmd::new("true").time_limit(std::time::Duration::from_secs(30)).read().unwrap(), "");
    }
}
