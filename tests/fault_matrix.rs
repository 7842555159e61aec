//! The fault matrix: what happens when a run is interrupted, killed, shares
//! its workspace, loses coverage, or meets a workspace it must not touch.
//! Every test runs the real harness binary on the real instrumented fixture
//! with real `mpirun` ranks, and checks the verdict, the message, that no
//! process survived (an independent `/proc` scan) and that nothing was lost
//! or deleted. Every wait has a hard limit. The "What happens when…"
//! table of docs/faults.md lists these cases (and those of `harness_e2e.rs`,
//! `fixture_faults.rs`, `broken_configs.rs`, `redaction.rs`).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{Running, Setup, command, harness, only, processes_mentioning, result, root, setup, spawn};

/// Every harness run kills the leftovers of dead runs, including those that
/// one test here leaves on purpose: that test runs alone.
static SWEEPS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    SWEEPS.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// No harness in these tests may run longer than this.
const LIMIT: Duration = Duration::from_secs(300);
/// The trials' grace period (SIGTERM → SIGKILL).
const GRACE_S: u64 = 2;

/// A fast trial that passes, and a 3-rank `mpirun` trial whose rank 1 hangs
/// ignoring SIGTERM (only SIGKILL ends it).
fn interruptible() -> Setup {
    setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                {"name": "done", "ranks": 1},
                {"name": "mpihang", "launcher": "mpi", "ranks": 3,
                 "env": {"CCL_FAULT": "hang-ignore-term", "CCL_FAULT_RANK": "1"}}
            ]),
        );
        v["timeouts"] = json!({"default": 240, "grace": GRACE_S});
    })
}

/// Waits until `cond` holds, failing the test past `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the interruptible suite and returns once the hung MPI trial's
/// mpirun and its 3 ranks are running.
fn start_hung_mpi(s: &Setup, extra: &[(&str, &str)]) -> Running {
    let mut cmd = command(s, "collectives", &["--test-threads", "1"]);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let running = spawn(s, cmd);
    wait_for_hung_ranks(s);
    running
}

/// Time until no process mentions the workspace any more.
fn time_until_gone(s: &Setup, limit: Duration) -> Duration {
    let started = Instant::now();
    let ws = s.ws.display().to_string();
    wait_until("the trial processes to go", limit, || processes_mentioning(&ws).is_empty());
    started.elapsed()
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

fn run_json(s: &Setup) -> Value {
    serde_json::from_str(&fs::read_to_string(s.ws.join("results/run.json")).unwrap()).unwrap()
}

/// SIGINT or SIGTERM to the harness: the running MPI trial is stopped within
/// the grace period, recorded as INTERRUPTED, the finished trial's result
/// stays, and the harness exits 128 + signal.
fn interrupted_by(sig: i32, name: &str) {
    let s = interruptible();
    let running = start_hung_mpi(&s, &[]);
    signal(running.pid(), sig);
    let gone = time_until_gone(&s, Duration::from_secs(GRACE_S + 10));
    eprintln!("{name}: last trial process gone {:.2}s after the signal", gone.as_secs_f64());
    assert!(gone < Duration::from_secs(GRACE_S + 3), "took {gone:?} for a grace period of {GRACE_S}s");
    let ran = running.wait(Duration::from_secs(30));
    assert_eq!(ran.code, Some(128 + sig), "{}", ran.text());
    assert!(ran.text().contains(&format!("ccl-coverage: {name}: stopping the running trials")), "{}", ran.text());
    assert_eq!(result(&s, "AllReduce.1K.done")["status"], "PASSED");
    let hung = result(&s, "AllReduce.1K.mpihang");
    assert_eq!(hung["status"], "INTERRUPTED", "{hung}");
    let reason = hung["reason"].as_str().unwrap();
    // mpirun answers SIGTERM by killing its ranks itself, so SIGTERM may suffice.
    assert!(
        reason.starts_with(&format!("INTERRUPTED by {name} after")) && reason.contains("(stopped with SIG"),
        "{reason}"
    );
    let run = run_json(&s);
    assert_eq!(
        (run["summary"]["passed"].as_u64(), run["summary"]["interrupted"].as_u64()),
        (Some(1), Some(1)),
        "{run}"
    );
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("tests=\"2\"") && junit.contains("type=\"INTERRUPTED\""), "{junit}");
}

#[test]
fn sigint_stops_mpi_ranks_within_the_grace_period_and_keeps_results() {
    let _shared = shared();
    interrupted_by(libc::SIGINT, "SIGINT");
}

#[test]
fn sigterm_stops_mpi_ranks_within_the_grace_period_and_keeps_results() {
    let _shared = shared();
    interrupted_by(libc::SIGTERM, "SIGTERM");
}

#[test]
fn sighup_stops_mpi_ranks_within_the_grace_period_and_keeps_results() {
    let _shared = shared();
    interrupted_by(libc::SIGHUP, "SIGHUP");
}

/// Ctrl-C in a terminal signals the whole foreground process group: cargo
/// and the test binary together (cargo dies of it).
#[test]
fn ctrl_c_to_the_cargo_process_group_stops_the_trials() {
    let _shared = shared();
    let s = interruptible();
    let running = spawn(&s, fake_cargo(&s, true));
    wait_for_hung_ranks(&s);
    signal(-running.pid(), libc::SIGINT);
    let gone = time_until_gone(&s, Duration::from_secs(GRACE_S + 10));
    eprintln!("Ctrl-C to cargo's group: last trial process gone {:.2}s after the signal", gone.as_secs_f64());
    assert!(gone < Duration::from_secs(GRACE_S + 3), "took {gone:?}");
    running.wait(Duration::from_secs(30));
    assert_eq!(result(&s, "AllReduce.1K.mpihang")["status"], "INTERRUPTED");
    assert_eq!(result(&s, "AllReduce.1K.done")["status"], "PASSED");
}

/// A shell named `cargo` that runs the harness as its child, as cargo runs a
/// test binary; in a process group of its own when `own_group`.
fn fake_cargo(s: &Setup, own_group: bool) -> Command {
    let fake = s.dir.path().join("cargo");
    if !fake.exists() {
        std::os::unix::fs::symlink("/bin/sh", &fake).unwrap();
    }
    // The harness's own command, run by the fake cargo: same program, arguments and environment.
    let inner = command(s, "collectives", &["--test-threads", "1"]);
    let mut outer = Command::new(&fake);
    outer.args(["-c", "\"$@\" & wait", "cargo"]).arg(inner.get_program()).args(inner.get_args()).current_dir(root());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => outer.env(k, v),
            None => outer.env_remove(k),
        };
    }
    if own_group {
        std::os::unix::process::CommandExt::process_group(&mut outer, 0);
    }
    outer
}

fn wait_for_hung_ranks(s: &Setup) {
    let needle = s.ws.join("profiles/AllReduce.1K.mpihang").display().to_string();
    wait_until("the mpi trial's ranks", Duration::from_secs(120), || {
        processes_mentioning(&needle).iter().filter(|p| p.contains("all_reduce_perf")).count() >= 3
    });
}

/// cargo dies of SIGTERM without passing it on; the test binary notices its
/// parent is gone. A shell named `cargo` stands in for cargo here.
#[test]
fn cargo_killed_with_sigterm_stops_the_trials_too() {
    let _shared = shared();
    let s = interruptible();
    let running = spawn(&s, fake_cargo(&s, false));
    wait_for_hung_ranks(&s);
    signal(running.pid(), libc::SIGTERM);
    let gone = time_until_gone(&s, Duration::from_secs(GRACE_S + 10));
    eprintln!("cargo SIGTERM: last trial process gone {:.2}s after the signal", gone.as_secs_f64());
    let ran = running.wait(Duration::from_secs(30));
    assert!(ran.text().contains("cargo (our parent) is gone: stopping the running trials"), "{}", ran.text());
    assert_eq!(result(&s, "AllReduce.1K.mpihang")["status"], "INTERRUPTED");
}

/// SIGKILL cannot be caught: each trial's supervisor sees its harness go and
/// stops the trial. The next run finds the workspace lock stale and says so.
#[test]
fn sigkill_of_the_harness_leaves_no_trial_process() {
    let _shared = shared();
    let s = interruptible();
    let running = start_hung_mpi(&s, &[]);
    let harness_pid = running.pid();
    signal(harness_pid, libc::SIGKILL);
    let gone = time_until_gone(&s, Duration::from_secs(GRACE_S + 10));
    eprintln!("SIGKILL: last trial process gone {:.2}s after the signal", gone.as_secs_f64());
    assert!(gone < Duration::from_secs(GRACE_S + 3), "took {gone:?}");
    let ran = running.wait(Duration::from_secs(10));
    assert_eq!(ran.code, None, "killed by a signal");
    // What was written stays readable.
    assert_eq!(result(&s, "AllReduce.1K.done")["status"], "PASSED");
    run_json(&s);
    let next = harness(&s, "collectives", &["--exact", "AllReduce::1K::done"], LIMIT);
    assert!(next.success, "{}", next.text());
    assert!(
        next.text()
            .contains(&format!("taking over the workspace {}: its last holder, pid {harness_pid}", s.ws.display())),
        "{}",
        next.text()
    );
}

/// When the supervisors die with the harness (a `kill -9` of everything),
/// the ranks are orphans: the next run finds them by their marker, kills
/// them and says so.
#[test]
fn a_new_run_kills_what_a_dead_run_left_and_says_so() {
    let _alone = SWEEPS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let s = interruptible();
    let running = start_hung_mpi(&s, &[]);
    let supervisors: Vec<i32> = processes_mentioning(&s.ws.display().to_string())
        .iter()
        .filter(|p| {
            let pid = p.split(':').next().unwrap();
            fs::read(format!("/proc/{pid}/environ")).unwrap_or_default().windows(18).any(|w| w == b"CCL_COV_SUPERVISE=")
        })
        .map(|p| p.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert!(!supervisors.is_empty(), "the trial runs under a supervisor");
    for pid in supervisors.iter().copied().chain([running.pid()]) {
        signal(pid, libc::SIGKILL);
    }
    running.wait(Duration::from_secs(10));
    let orphans = processes_mentioning(&s.ws.display().to_string());
    assert!(orphans.iter().any(|p| p.contains("all_reduce_perf")), "ranks are orphaned now: {orphans:?}");
    let next = harness(&s, "collectives", &["--exact", "AllReduce::1K::done"], LIMIT);
    assert!(next.success, "{}", next.text());
    assert!(next.text().contains("left behind by a run that died"), "{}", next.text());
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

/// An interrupted build step is stopped (it is supervised like a trial), and
/// the build is not cached: it has no manifest.
#[test]
fn an_interrupted_build_is_stopped_and_not_cached() {
    let _shared = shared();
    let marker = format!("{}.25", 600 + std::process::id() % 100);
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([]));
        let steps = v["library"]["steps"].as_array_mut().unwrap();
        steps.insert(0, json!({"name": "slow step", "argv": ["sleep", marker]}));
    });
    let running = spawn(&s, command(&s, "collectives", &[]));
    let is_step = |pid: &str| {
        fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == format!("sleep\0{marker}\0").as_bytes())
    };
    let step_alive = || fs::read_dir("/proc").unwrap().flatten().any(|e| is_step(&e.file_name().to_string_lossy()));
    wait_until("the slow build step", Duration::from_secs(60), step_alive);
    signal(running.pid(), libc::SIGINT);
    let ran = running.wait(Duration::from_secs(30));
    assert_eq!(ran.code, Some(130), "{}", ran.text());
    assert!(!step_alive(), "the build step was stopped");
    assert!(ran.text().contains("interrupted by SIGINT"), "{}", ran.text());
    let builds = root().join("target/ccl-coverage/builds");
    let this_build: Vec<PathBuf> = fs::read_dir(&builds)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| fs::read_to_string(p.join("logs/01-slow-step.log")).is_ok_and(|l| l.contains(&marker)))
        .collect();
    assert_eq!(this_build.len(), 1, "{this_build:?}");
    assert!(!this_build[0].join("build.json").exists(), "an interrupted build has no manifest");
    fs::remove_dir_all(&this_build[0]).unwrap();
}

/// Everything under `dir` with sizes, for "nothing changed" checks.
fn listing(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let meta = fs::symlink_metadata(e.path()).unwrap();
        out.insert(e.path(), meta.len());
        if meta.is_dir() && !meta.file_type().is_symlink() {
            out.extend(listing(&e.path()));
        }
    }
    out
}

/// Runs both harness binaries on `ws` and expects a refusal naming `expected`,
/// with `watched` unchanged.
fn refused(s: &Setup, ws: &Path, env: &[(&str, &str)], expected: &str, watched: &Path) {
    let before = listing(watched);
    for (sub, args) in [("collectives", &["--exact", "NoSuch::trial"][..]), ("report", &[][..])] {
        let mut cmd = command(s, sub, args);
        cmd.env("CCL_COV_WORKSPACE", ws);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let ran = spawn(s, cmd).wait(Duration::from_secs(60));
        assert_eq!(ran.code, Some(2), "{sub} on {}: {}", ws.display(), ran.text());
        // The report never claims a folder: an unmarked one is simply not a workspace.
        let text = ran.text();
        let said = text.contains(expected) || (sub == "report" && text.contains("is not a ccl-coverage workspace"));
        assert!(said, "{sub} on {}: expected {expected:?} in:\n{text}", ws.display());
        assert!(!ran.text().contains("panicked"), "{}", ran.text());
    }
    assert_eq!(before, listing(watched), "nothing created or deleted under {}", watched.display());
}

#[test]
fn slash_is_refused_as_a_workspace() {
    let _shared = shared();
    let s = setup(|_| {});
    let top: Vec<_> = fs::read_dir("/").unwrap().flatten().map(|e| e.file_name()).collect();
    refused(&s, Path::new("/"), &[], "refusing to use / as the workspace", s.dir.path());
    let after: Vec<_> = fs::read_dir("/").unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(top, after);
}

#[test]
fn home_the_project_and_its_sources_are_refused() {
    let _shared = shared();
    let s = setup(|_| {});
    let home = s.dir.path().join("home");
    fs::create_dir_all(home.join("work")).unwrap();
    fs::write(home.join("notes.txt"), "mine").unwrap();
    refused(&s, &home, &[("HOME", home.to_str().unwrap())], "it holds your home folder", &home);
    refused(&s, &root(), &[], "it holds the ccl-coverage project", &root().join("src"));
    refused(&s, &root().join("src"), &[], "did not create it", &root().join("src"));
    refused(&s, s.dir.path(), &[], "it holds the config", &s.dir.path().join("home"));
    let inside = root().join("tests/fixtures/ccl/ws-should-not-exist");
    refused(&s, &inside, &[], "it lies inside the library sources", &root().join("tests/fixtures/ccl"));
    assert!(!inside.exists());
}

#[test]
fn a_folder_the_harness_did_not_create_is_never_emptied() {
    let _shared = shared();
    let s = setup(|_| {});
    let user = s.dir.path().join("user-folder");
    fs::create_dir_all(user.join("report")).unwrap();
    fs::write(user.join("report/thesis.tex"), "precious").unwrap();
    fs::write(user.join("profiles"), "a file, not ours").unwrap();
    refused(&s, &user, &[], "ccl-coverage did not create it", &user);
    // A symlink to a workspace is refused too: deletion never follows one.
    let link = s.dir.path().join("link");
    std::os::unix::fs::symlink(&user, &link).unwrap();
    refused(&s, &link, &[], "it is a symlink", &user);
}

#[test]
fn a_workspace_of_another_config_is_refused_not_mixed() {
    let _shared = shared();
    let s = interruptible();
    let first = harness(&s, "collectives", &["--exact", "AllReduce::1K::done"], LIMIT);
    assert!(first.success, "{}", first.text());
    let other = setup(|v| {
        v["name"] = json!("other");
        only(v, "AllReduce", &["1K"], json!([]));
    });
    refused(&other, &s.ws, &[], "holds the results of config \"local\"", &s.ws);
}

#[test]
fn a_symlinked_report_folder_is_refused_and_its_target_kept() {
    let _shared = shared();
    let s = interruptible();
    let first = harness(&s, "collectives", &["--exact", "AllReduce::1K::done"], LIMIT);
    assert!(first.success, "{}", first.text());
    let elsewhere = s.dir.path().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::write(elsewhere.join("keep.txt"), "mine").unwrap();
    let _ = fs::remove_dir_all(s.ws.join("report"));
    std::os::unix::fs::symlink(&elsewhere, s.ws.join("report")).unwrap();
    let ran = harness(&s, "report", &[], LIMIT);
    assert!(!ran.success);
    assert!(ran.text().contains("is a symlink"), "{}", ran.text());
    assert_eq!(fs::read_to_string(elsewhere.join("keep.txt")).unwrap(), "mine");
}

#[test]
fn a_second_run_or_a_report_on_a_busy_workspace_fails_fast_naming_the_holder() {
    let _shared = shared();
    let s = interruptible();
    let running = start_hung_mpi(&s, &[]);
    for sub in ["collectives", "report"] {
        let ran = harness(&s, sub, &[], Duration::from_secs(30));
        assert_eq!(ran.code, Some(2), "{}", ran.text());
        let expected = format!("the workspace {} is in use by pid {} (`", s.ws.display(), running.pid());
        assert!(ran.text().contains(&expected), "{sub}: {}", ran.text());
        assert!(ran.took < Duration::from_secs(10), "fails fast, took {:?}", ran.took);
    }
    signal(running.pid(), libc::SIGINT);
    running.wait(Duration::from_secs(30));
    // The first run's results are its own.
    assert_eq!(result(&s, "AllReduce.1K.mpihang")["status"], "INTERRUPTED");
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

#[test]
fn the_processes_of_one_nextest_run_share_a_workspace_and_another_run_does_not() {
    let _shared = shared();
    let s = interruptible();
    let running = start_hung_mpi(&s, &[("NEXTEST_RUN_ID", "run-a")]);
    let mut same = command(&s, "collectives", &["--exact", "AllReduce::1K::done"]);
    same.env("NEXTEST_RUN_ID", "run-a");
    let same = spawn(&s, same).wait(LIMIT);
    assert!(same.success, "same nextest run shares: {}", same.text());
    let mut other = command(&s, "collectives", &["--exact", "AllReduce::1K::done"]);
    other.env("NEXTEST_RUN_ID", "run-b");
    let other = spawn(&s, other).wait(LIMIT);
    assert_eq!(other.code, Some(2), "{}", other.text());
    assert!(other.text().contains("nextest run run-a"), "{}", other.text());
    signal(running.pid(), libc::SIGINT);
    running.wait(Duration::from_secs(30));
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

/// With the tuner plugin loaded (`tuned`) each rank writes two profiles, one
/// per instrumented module, and the faulty rank still writes the plugin's
/// (unloaded before its `_exit`): five files from three processes for three
/// ranks, yet one rank's library profile is lost. So a rank counts only with
/// a profile for every module.
#[test]
fn a_rank_that_exits_without_writing_its_profile_fails_the_trial() {
    let _shared = shared();
    let s = setup(|v| {
        let fault = |tuner: Option<&str>| {
            let mut env = json!({"CCL_FAULT": "exit-without-flush", "CCL_FAULT_RANK": "2"});
            if let Some(tuner) = tuner {
                env["CCL_TUNER_PLUGIN"] = json!(tuner);
            }
            env
        };
        only(
            v,
            "AllGather",
            &["1K"],
            json!([{"name": "mpi", "launcher": "mpi", "ranks": 3, "env": fault(Some("none"))},
                   {"name": "tuned", "launcher": "mpi", "ranks": 3, "env": fault(None)}]),
        );
    });
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(!ran.success, "{}", ran.text());
    for (slug, files) in [("AllGather.1K.mpi", 2), ("AllGather.1K.tuned", 5)] {
        let r = result(&s, slug);
        assert_eq!(r["status"], "FAILED", "{r}");
        assert!(
            r["reason"].as_str().unwrap().starts_with("coverage lost: only 2 of 3 ranks wrote a coverage profile"),
            "{r}"
        );
        assert_eq!(r["profiles"], files, "{r}");
        if slug.ends_with("tuned") {
            assert!(r["reason"].as_str().unwrap().contains("(1 of 2 modules)"), "{r}");
        }
        // The profiles that were written are kept and merged.
        assert!(s.ws.join(format!("profiles/{slug}.profdata")).is_file());
    }
    assert!(ran.text().contains("FAILED: coverage lost: only 2 of 3 ranks"), "{}", ran.text());
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

#[test]
fn profiles_altered_or_removed_after_their_trial_are_named_and_kept_out_of_the_report() {
    let _shared = shared();
    let mut s = setup(|v| {
        only(v, "Broadcast", &["1K"], json!([{"name": "a"}, {"name": "b"}, {"name": "raw"}]));
    });
    let ran = harness(&s, "collectives", &["--skip", "raw"], LIMIT);
    assert!(ran.success, "{}", ran.text());
    s.env.push(("CCL_COV_INCREMENTAL_MERGE".into(), "off".into()));
    let ran = harness(&s, "collectives", &["--exact", "Broadcast::1K::raw"], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let altered = s.ws.join("profiles/Broadcast.1K.a.profdata");
    let mut bytes = fs::read(&altered).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    fs::write(&altered, bytes).unwrap();
    fs::remove_file(s.ws.join("profiles/Broadcast.1K.b.profdata")).unwrap();
    let raw = support::files_under(&s.ws.join("profiles/Broadcast.1K.raw"));
    assert!(!raw.is_empty(), "one raw profile per instrumented module");
    fs::OpenOptions::new()
        .append(true)
        .open(&raw[0])
        .unwrap()
        .set_len(fs::metadata(&raw[0]).unwrap().len() + 8)
        .unwrap();
    let report = harness(&s, "report", &[], LIMIT);
    let log = report.text();
    assert!(!report.success, "{log}");
    assert!(log.contains("Broadcast.1K.a.profdata: altered after its trial wrote it (sha256 recorded"), "{log}");
    assert!(
        log.contains(&format!("{}: altered after its trial wrote it", raw[0].file_name().unwrap().to_str().unwrap())),
        "{log}"
    );
    assert!(log.contains("profiles vanished after their trials wrote them: Broadcast::1K::b"), "{log}");
    assert!(s.ws.join("quarantine/Broadcast.1K.a/Broadcast.1K.a.profdata").is_file(), "moved, not deleted");
    let meta: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap();
    // Of the two trials left, only the raw profiles nobody touched are merged.
    assert_eq!(meta["profiles_merged"], raw.len() - 1, "nothing untrusted was merged: {meta}");
}

/// mpirun killed from outside: the trial fails with that reason, and the
/// ranks mpirun can no longer tear down are killed by the supervisor.
#[test]
fn mpirun_killed_from_outside_fails_the_trial_and_leaves_no_rank() {
    let _shared = shared();
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([{"name": "mpihang", "launcher": "mpi", "ranks": 3,
                    "env": {"CCL_FAULT": "hang-ignore-term", "CCL_FAULT_RANK": "1"}}]),
        );
        v["timeouts"] = json!({"default": 240, "grace": GRACE_S});
    });
    let running = start_hung_mpi(&s, &[]);
    let mpirun: i32 = processes_mentioning(&s.ws.display().to_string())
        .iter()
        .find(|p| p.split_once(": ").is_some_and(|(_, cmd)| cmd.starts_with("mpirun ")))
        .and_then(|p| p.split(':').next()?.parse().ok())
        .expect("mpirun runs");
    signal(mpirun, libc::SIGKILL);
    let ran = running.wait(Duration::from_secs(60));
    assert!(!ran.success);
    let r = result(&s, "AllReduce.1K.mpihang");
    assert_eq!(r["status"], "FAILED", "{r}");
    assert_eq!(r["reason"], "killed by signal 9 (SIGKILL)", "{r}");
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

fn mount_tmpfs(at: &Path, options: &str) {
    fs::create_dir_all(at).unwrap();
    let status = Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(at).status().unwrap();
    assert!(status.success(), "mount needs root (CI runs as root)");
}

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_is_named_as_the_cause() {
    let _shared = shared();
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([])));
    // A mount point itself is refused as a workspace: the workspace is a folder on the small disk.
    let disk = s.dir.path().join("disk");
    mount_tmpfs(&disk, "size=256k");
    let _unmount = Unmount(disk.clone());
    s.ws = disk.join("ws");
    let claim = harness(&s, "collectives", &["--exact", "NoSuch::trial"], LIMIT);
    assert!(claim.success, "{}", claim.text());
    // Fill what is left (the write stops at ENOSPC).
    let _ = fs::write(s.ws.join("filler"), vec![0u8; 512 * 1024]);
    let ran = harness(&s, "collectives", &[], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(text.contains("No space left on device"), "{text}");
    assert!(!text.contains("the shared build failed"), "the build is fine: {text}");
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

#[test]
fn a_read_only_workspace_is_named_as_the_cause() {
    let _shared = shared();
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([])));
    let disk = s.dir.path().join("disk");
    mount_tmpfs(&disk, "size=1m,ro");
    let _unmount = Unmount(disk.clone());
    s.ws = disk.join("ws");
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert_eq!(ran.code, Some(2), "{}", ran.text());
    assert!(ran.text().contains(&format!("the workspace {} is not writable", s.ws.display())), "{}", ran.text());
    assert!(ran.text().contains("Read-only file system"), "{}", ran.text());
    // A marked workspace that became read-only says so too.
    let marked_disk = s.dir.path().join("marked");
    mount_tmpfs(&marked_disk, "size=8m");
    let _unmount_marked = Unmount(marked_disk.clone());
    let marked = marked_disk.join("ws");
    let mut cmd = command(&s, "collectives", &["--exact", "NoSuch::trial"]);
    cmd.env("CCL_COV_WORKSPACE", &marked);
    assert!(spawn(&s, cmd).wait(LIMIT).success);
    let status = Command::new("mount").args(["-o", "remount,ro"]).arg(&marked_disk).status().unwrap();
    assert!(status.success());
    let mut cmd = command(&s, "collectives", &[]);
    cmd.env("CCL_COV_WORKSPACE", &marked);
    let ran = spawn(&s, cmd).wait(LIMIT);
    assert_eq!(ran.code, Some(2), "{}", ran.text());
    assert!(ran.text().contains(&format!("the workspace {} is not writable", marked.display())), "{}", ran.text());
    assert!(ran.text().contains("Read-only file system"), "{}", ran.text());
}

#[test]
fn nothing_the_harness_creates_is_world_writable_whatever_the_umask() {
    let _shared = shared();
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "threads"}, {"name": "mpi", "launcher": "mpi", "ranks": 2}]));
    });
    for sub in ["collectives", "report"] {
        let mut cmd = command(&s, sub, &[]);
        // SAFETY: umask is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::umask(0);
                Ok(())
            });
        }
        let ran = spawn(&s, cmd).wait(LIMIT);
        assert!(ran.success, "{}", ran.text());
    }
    let mut modes = BTreeMap::new();
    for (path, _) in listing(&s.ws) {
        let meta = fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        assert_eq!(mode & 0o002, 0, "{} is world-writable ({mode:o})", path.display());
        modes.entry((meta.is_dir(), mode)).or_insert(path);
    }
    let kinds: Vec<_> = modes.keys().collect();
    assert_eq!(kinds, [&(false, 0o644), &(true, 0o755)], "one mode for files, one for folders: {modes:?}");
}
