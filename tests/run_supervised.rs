//! `run::run` and the trial supervisor with real processes: exit statuses,
//! timeouts, leftovers, and a harness that goes away. Which processes are
//! alive is checked by an independent `/proc` scan for the trial's marker,
//! not by the code under test, and every test has a hard time limit.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

use ccl_coverage::env_names::{SUPERVISE, TRIAL_TOKEN};
use ccl_coverage::exec::process::Cmd;
use ccl_coverage::exec::supervisor::{self, Spec, StopCause, SupervisorReport};
use ccl_coverage::launch::TrialLaunch;
use ccl_coverage::trial::{self as run, Ending, Finished};
use ccl_coverage::upstream::TrialKind;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn supervisor_exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ccl-coverage"))
}

/// Runs `f` on a thread and fails the test if it takes longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

fn unique_token() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("run-supervised-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

fn launch(script: &str, timeout_ms: u64, grace_ms: u64) -> TrialLaunch {
    let token = unique_token();
    TrialLaunch {
        cmd: Cmd::new("sh").args(["-c", script]).env(TRIAL_TOKEN, token.clone()),
        env: Vec::new(),
        timeout: Duration::from_millis(timeout_ms),
        grace: Duration::from_millis(grace_ms),
        log_cap: 64 << 20,
        records: None,
        token,
        mark: None,
        kind: TrialKind::Perf,
        cases_dir: None,
        binary: "sh".into(),
    }
}

/// Live processes whose environment holds `CCL_COV_TRIAL_TOKEN=<token>`,
/// found without the crate's own process-tree code.
fn alive_with_token(token: &str) -> Vec<String> {
    let needle = format!("{TRIAL_TOKEN}={token}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|v| v == needle.as_bytes()) {
            found.push(format!(
                "{name}: {}",
                std::fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default().replace('\0', " ")
            ));
        }
    }
    found
}

fn run_it(l: TrialLaunch, limit: Duration) -> (Finished, String) {
    within(limit, move || {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("t.log");
        let f = run::run(&l, &log, supervisor_exe(), Duration::from_secs(3600), &|_| {}).unwrap();
        (f, std::fs::read_to_string(&log).unwrap())
    })
}

#[test]
fn exit_status_and_output_are_kept() {
    let (f, log) = run_it(launch("echo hello; echo err >&2; exit 7", 5000, 100), Duration::from_secs(20));
    assert_eq!(f.ending, Ending::Exited(ExitStatusExt::from_raw(7 << 8)));
    assert_eq!(log, "hello\nerr\n");
}

/// The trial runs in a session of its own, led by its supervisor (its
/// parent): never in the harness's, whose terminal signals and sweeps it
/// must not share. The fields are the shell's `/proc/PID/stat`: 4 is the parent, 6
/// the session.
#[test]
fn the_trial_s_session_is_led_by_its_supervisor_not_the_harness_s() {
    let (f, log) =
        run_it(launch("set -- $(sed 's/.*) //' /proc/$$/stat); echo \"$2 $4\"", 5000, 100), Duration::from_secs(20));
    assert_eq!(f.ending, Ending::Exited(ExitStatusExt::from_raw(0)), "{log}");
    let fields: Vec<i32> = log.split_whitespace().map(|n| n.parse().unwrap()).collect();
    let [parent, session] = fields[..] else { panic!("{log}") };
    // SAFETY: getsid(0) reads this process's session and touches no memory.
    let ours = unsafe { libc::getsid(0) };
    assert_ne!(session, ours, "the trial is in the harness's session");
    assert_eq!(session, parent, "the trial's session is not its supervisor's");
}

/// Upstream runs every test after `ulimit -l unlimited`; the supervisor
/// raises the trial's locked-memory limit without a shell, as far as allowed.
#[test]
fn the_trial_gets_the_highest_memlock_limit_allowed() {
    let mut hard = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the struct passed in.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut hard) }, 0);
    // Unlimited where the process may raise the hard limit, else the hard
    // limit: never the (possibly lower) soft limit it started with.
    let hard_kib =
        if hard.rlim_max == libc::RLIM_INFINITY { "unlimited".into() } else { (hard.rlim_max / 1024).to_string() };
    let (f, log) = run_it(launch("ulimit -l", 5000, 100), Duration::from_secs(20));
    assert_eq!(f.ending, Ending::Exited(ExitStatusExt::from_raw(0)));
    assert!(["unlimited", hard_kib.as_str()].contains(&log.trim()), "{log} (hard limit {hard_kib})");
}

#[test]
fn a_signal_death_is_reported_as_such() {
    let (f, _) = run_it(launch("kill -SEGV $$", 5000, 100), Duration::from_secs(20));
    assert_eq!(f.ending, Ending::Exited(ExitStatusExt::from_raw(libc::SIGSEGV)));
}

#[test]
fn timeout_kills_processes_that_ignore_sigterm_and_their_children() {
    // A child in its own session that ignores SIGTERM, like an MPI rank.
    let l = launch("trap '' TERM; (trap '' TERM; exec setsid sleep 600) & sleep 600", 300, 300);
    let token = l.token.clone();
    let started = Instant::now();
    let (f, _) = run_it(l, Duration::from_secs(20));
    assert_eq!(f.ending, Ending::TimedOut { killed: "SIGKILL".into() });
    assert_eq!(f.survivors, 0);
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    let alive = alive_with_token(&token);
    assert!(alive.is_empty(), "escaped processes survive: {alive:?}");
}

#[test]
fn sigterm_suffices_for_well_behaved_trials() {
    let (f, _) = run_it(launch("sleep 600", 200, 5000), Duration::from_secs(20));
    assert_eq!(f.ending, Ending::TimedOut { killed: "SIGTERM".into() });
    assert!(f.duration < Duration::from_secs(3));
}

#[test]
fn leftovers_after_exit_are_killed_and_counted() {
    let l = launch("sleep 600 & exit 0", 5000, 100);
    let token = l.token.clone();
    let (f, _) = run_it(l, Duration::from_secs(20));
    assert!(matches!(f.ending, Ending::Exited(s) if s.success()));
    assert_eq!(f.leftovers, 1);
    assert_eq!(f.survivors, 0);
    assert!(alive_with_token(&token).is_empty());
}

/// A daemon that double-forks, leaves the trial's session with `setsid` and
/// drops every variable (the trial's token with them) is still the trial's:
/// orphaned, it is re-parented to the supervisor, the subreaper.
#[test]
fn an_escaping_daemon_is_found_killed_and_counted() {
    // A number no other process has in its command line.
    let mark = format!("600.{}", std::process::id());
    let l = launch(&format!("(setsid env -i sleep {mark} &) ; sleep 0.3; exit 0"), 5000, 100);
    let (f, _) = run_it(l, Duration::from_secs(20));
    let running = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.starts_with("sleep ") && c.contains(&mark))
            .collect()
    };
    let left = running();
    for cmd in &left {
        eprintln!("left running: {cmd}");
    }
    assert!(matches!(f.ending, Ending::Exited(s) if s.success()));
    assert!(left.is_empty(), "the daemon outlived its trial: {left:?}");
    assert_eq!(f.leftovers, 1, "the daemon is counted as a leftover");
}

/// A flood of output leaves a log of at most the cap, with its start and its
/// end (where the result table is) and a line saying what was cut.
#[test]
fn a_flood_of_output_is_capped_keeping_head_and_tail() {
    let mut l = launch(
        "echo first; head -c 50000000 /dev/zero | tr '\\0' x; echo; echo '# Out of bounds values : 0 OK'",
        60_000,
        100,
    );
    l.log_cap = 1 << 20;
    let (f, log) = run_it(l, Duration::from_secs(60));
    assert!(matches!(f.ending, Ending::Exited(s) if s.success()), "{:?}", f.ending);
    assert!(log.len() <= (1 << 20) + 300, "the log has {} bytes", log.len());
    assert!(log.starts_with("first\nxxx"), "{}", &log[..20]);
    assert!(log.ends_with("\n# Out of bounds values : 0 OK\n"));
    let mark = log.lines().find(|l| l.starts_with("[ccl-coverage: output cut here:")).expect("a cut mark");
    assert!(mark.contains(&format!("{} of 50000037 bytes", f.output_cut)), "{mark}");
    assert!(f.output_cut >= 50_000_000 - (1 << 20), "{}", f.output_cut);
    // The tail is the flood's end, kept although it is one long line.
    assert!(log.len() > (1 << 20) - 100, "the log has {} bytes", log.len());
}

/// A trial that never stops writing still ends at its timeout.
#[test]
fn the_timeout_holds_whatever_the_output_does() {
    let mut l = launch("yes flood", 500, 100);
    l.log_cap = 1 << 20;
    let started = Instant::now();
    let (f, log) = run_it(l, Duration::from_secs(30));
    assert_eq!(f.ending, Ending::TimedOut { killed: "SIGTERM".into() });
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(log.len() <= (1 << 20) + 300, "the log has {} bytes", log.len());
}

#[test]
fn a_program_that_cannot_start_is_an_error_naming_it() {
    let mut l = launch("", 5000, 100);
    l.cmd = Cmd::new("/nonexistent/ccl-perf").env(TRIAL_TOKEN, l.token.clone());
    let err = within(Duration::from_secs(20), move || {
        let dir = tempfile::tempdir().unwrap();
        run::run(&l, &dir.path().join("t.log"), supervisor_exe(), Duration::from_secs(3600), &|_| {})
            .unwrap_err()
            .to_string()
    });
    assert!(err.contains("/nonexistent/ccl-perf") && err.contains("cannot start"), "{err}");
}

/// The harness's death is the end of the lifeline: the supervisor stops the
/// whole tree (here one that ignores SIGTERM) within the grace period.
#[test]
fn the_supervisor_stops_the_trial_when_the_harness_goes_away() {
    let token = unique_token();
    let dir = tempfile::tempdir().unwrap();
    let spec = Spec { cwd: None, log: dir.path().join("t.log"), grace_ms: 500, log_cap: 1 << 20, children: None };
    let mut child = Command::new(supervisor_exe());
    child
        .args(["sh", "-c", "trap '' TERM; (trap '' TERM; exec setsid sleep 600) & sleep 600"])
        .env(SUPERVISE, serde_json::to_string(&spec).unwrap())
        .env(TRIAL_TOKEN, &token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        child.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = child.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive_with_token(&token).len() < 3 {
        assert!(Instant::now() < deadline, "the trial did not start: {:?}", alive_with_token(&token));
        std::thread::sleep(Duration::from_millis(20));
    }
    let cut = Instant::now();
    drop(child.stdin.take());
    let report = within(Duration::from_secs(20), move || {
        let mut text = String::new();
        child.stdout.take().unwrap().read_to_string(&mut text).unwrap();
        child.wait().unwrap();
        text
    });
    let gone_after = cut.elapsed();
    let report: SupervisorReport = serde_json::from_str(report.trim()).unwrap();
    assert_eq!(report.stopped, Some(StopCause::HarnessGone));
    assert_eq!(report.killed_with.as_deref(), Some("SIGKILL"));
    let alive = alive_with_token(&token);
    assert!(alive.is_empty(), "processes outlived their harness: {alive:?}");
    assert!(gone_after < Duration::from_millis(500) + supervisor::REAP_LIMIT, "took {gone_after:?}");
}
