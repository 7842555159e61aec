//! The fault matrix's processes, neighbours and stopping (issue #31): runs
//! side by side in and out of PID namespaces, owners that cannot be decided,
//! a build in use, the report stopped by a signal, supervisors stopped or
//! killed by their trials, daemons that fork on or start just before their
//! supervisor dies, and a flood of short lines. Every test runs the real
//! harness binary on the real instrumented fixture, checks the verdict and
//! the message, and looks in `/proc` itself for what was left; every wait has
//! a hard limit. The cases whose mechanism differs run twice: with a cgroup
//! per trial (where the machine has one) and with `CCL_COV_CGROUP=off`.
//! docs/faults.md lists them ("Processes, neighbours and stopping").
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

mod support;

use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{Running, Setup, command, harness, is_root, only, processes_mentioning, result, root, setup, spawn};

/// Tests that leave processes behind on purpose for the next run to sweep
/// run alone: another test's run would sweep them first.
static SWEEPS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    SWEEPS.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    SWEEPS.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// No harness in these tests may run longer than this (a first run builds).
const LIMIT: Duration = Duration::from_secs(300);

/// How a test runs its harnesses: with a cgroup per trial where the machine
/// has one (the default), or held by the process tree alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mechanism {
    Default,
    ProcessTree,
}

impl Mechanism {
    fn apply(self, s: &mut Setup) {
        if self == Mechanism::ProcessTree {
            s.env.push(("CCL_COV_CGROUP".into(), "off".into()));
        }
    }
}

/// Waits until `cond` holds, failing the test past `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Live (non-zombie) processes whose command line contains `mark`.
fn marked(mark: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = String::from_utf8_lossy(&fs::read(entry.path().join("cmdline")).unwrap_or_default()).into_owned();
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'));
        if !zombie && cmdline.replace('\0', " ").contains(mark) {
            found.push(pid);
        }
    }
    found
}

/// SIGKILLs what `marked(mark)` finds (a test's own leftovers, when the
/// mechanism under test is allowed to miss them).
fn kill_marked(mark: &str) {
    for pid in marked(mark) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A mark unique to this test process and call, for command lines.
fn mark(base: u32) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{base}.{}{:02}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A setup whose `AllReduce::1K` variants (`name`, launcher, ranks, shell
/// lines run before the real perf binary) each run a wrapper script.
fn wrapped(variants: &[(&str, &str, u32, &str)]) -> Setup {
    let s = setup(|v| {
        let list: Vec<Value> = variants
            .iter()
            .map(|(name, launcher, ranks, _)| {
                json!({"name": name, "launcher": launcher, "ranks": ranks,
                       "env": {"REAL_BINARY": "{bin_dir}/all_reduce_perf", "CCL_WRAPPED": name}})
            })
            .collect();
        only(v, "AllReduce", &["1K"], Value::Array(list));
        v["timeouts"] = json!({"default": 240, "grace": 2});
    });
    let wrapper = s.dir.path().join("wrapper.sh");
    let mut body = String::from("case \"$CCL_WRAPPED\" in\n");
    for (name, _, _, before) in variants {
        body += &format!("{name}) {before}\n;;\n");
    }
    body += "esac\nexec \"$REAL_BINARY\" \"$@\"";
    script(&wrapper, &body);
    let mut v: Value = serde_json::from_str(&fs::read_to_string(&s.config).unwrap()).unwrap();
    v["collectives"][0]["binary"] = json!(wrapper.display().to_string());
    fs::write(&s.config, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    s
}

/// Shell lines that wait until `file` exists (at most 200 s).
fn wait_for_file(file: &Path) -> String {
    format!("i=0; while [ ! -e '{}' ] && [ $i -lt 2000 ]; do sleep 0.1; i=$((i+1)); done", file.display())
}

/// `cmd` run as PID 1 of a new PID namespace with its own `/proc`, as
/// `tests/twonode.rs` runs its nodes and as containers sharing a host do;
/// `--kill-child` takes the whole namespace down if the test kills `unshare`.
fn in_pid_namespace(cmd: &Command) -> Command {
    let mut outer = Command::new("unshare");
    outer.args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"]).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => outer.env(k, v),
            None => outer.env_remove(k),
        };
    }
    outer.current_dir(root());
    outer
}

/// The trial token of the first process mentioning `ws` whose command line
/// contains `what`.
fn token_of(ws: &Path, what: &str) -> Option<String> {
    let line = processes_mentioning(&ws.display().to_string()).into_iter().find(|l| l.contains(what))?;
    let pid = line.split(':').next()?;
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"CCL_COV_TRIAL_TOKEN="))
        .map(|t| String::from_utf8_lossy(t).into_owned())
}

fn state_dir() -> PathBuf {
    root().join("target/ccl-coverage")
}

fn run_json(s: &Setup) -> Value {
    serde_json::from_str(&fs::read_to_string(s.ws.join("results/run.json")).unwrap()).unwrap()
}

/// A run in a PID namespace of its own and a run outside it, at the same
/// time, on two workspaces: the one outside starts (and sweeps) while the
/// inner one's `mpirun` and ranks run, and a second inner run starts (and
/// sweeps) while both run. Nobody kills or unrecords anybody's processes:
/// a token's owner is alive while its lock is held, whatever pid it has
/// where.
fn neighbours_in_and_out_of_a_pid_namespace(mechanism: Mechanism) {
    if !is_root() {
        eprintln!("skipped: PID namespaces need root");
        return;
    }
    let _shared = shared();
    let gates = tempfile::tempdir().unwrap();
    let (release_in, release_out) = (gates.path().join("in"), gates.path().join("out"));
    let mut inner = wrapped(&[("inner", "mpi", 2, &wait_for_file(&release_in))]);
    let mut outer = wrapped(&[("outer", "threads", 1, &wait_for_file(&release_out))]);
    let mut second = wrapped(&[("second", "threads", 1, "")]);
    for s in [&mut inner, &mut outer, &mut second] {
        mechanism.apply(s);
    }
    let waiting_ranks = |s: &Setup| {
        processes_mentioning(&s.ws.display().to_string()).iter().filter(|p| p.contains("wrapper.sh")).count()
    };
    let inner_run = spawn(&inner, in_pid_namespace(&command(&inner, "collectives", &[])));
    wait_until("the inner run's two ranks", Duration::from_secs(120), || waiting_ranks(&inner) >= 2);
    let mpirun = processes_mentioning(&inner.ws.display().to_string()).iter().filter(|p| p.contains("mpirun")).count();
    assert!(mpirun >= 1, "the inner trial runs under mpirun");
    let outer_run = spawn(&outer, command(&outer, "collectives", &[]));
    wait_until("the outer run's trial", Duration::from_secs(120), || waiting_ranks(&outer) >= 1);
    assert!(waiting_ranks(&inner) >= 2, "the outer run's start killed the inner run's ranks");
    let outer_token = token_of(&outer.ws, "wrapper.sh").expect("the outer trial carries its token");
    let second_run = spawn(&second, in_pid_namespace(&command(&second, "collectives", &[]))).wait(LIMIT);
    assert!(second_run.success, "{}", second_run.text());
    assert!(!second_run.text().contains("killed pid"), "{}", second_run.text());
    assert!(waiting_ranks(&inner) >= 2 && waiting_ranks(&outer) >= 1, "the second run killed a neighbour's trial");
    let record = state_dir().join("children").join(format!("{outer_token}.json"));
    assert!(record.is_file(), "the second run removed the outer trial's record {}", record.display());
    fs::write(&release_in, "").unwrap();
    fs::write(&release_out, "").unwrap();
    let (inner_ran, outer_ran) = (inner_run.wait(LIMIT), outer_run.wait(LIMIT));
    for (s, ran, slug) in [(&inner, &inner_ran, "AllReduce.1K.inner"), (&outer, &outer_ran, "AllReduce.1K.outer")] {
        assert!(ran.success, "{}", ran.text());
        assert!(!ran.text().contains("killed pid"), "{}", ran.text());
        assert_eq!(result(s, slug)["status"], "PASSED", "{}", ran.text());
        assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
    }
}

#[test]
fn runs_in_and_out_of_a_pid_namespace_leave_each_other_alone() {
    neighbours_in_and_out_of_a_pid_namespace(Mechanism::Default);
}

#[test]
fn runs_in_and_out_of_a_pid_namespace_leave_each_other_alone_by_process_tree() {
    neighbours_in_and_out_of_a_pid_namespace(Mechanism::ProcessTree);
}

/// Processes whose owner no lock can prove gone are never swept: a marker
/// of an owner with no lock file here (another state folder), a marker in
/// the older `<pid>-<start time>-<n>` form naming a pid that is not running,
/// a supervisor's record without its lock, and a record whose lock is free
/// but that comes from another PID namespace (its pids are not this one's).
#[test]
fn processes_whose_owner_cannot_be_decided_are_left_alone() {
    let _shared = shared();
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 1}])));
    let children = state_dir().join("children");
    fs::create_dir_all(&children).unwrap();
    let sleeper = |mark: &str, token: Option<&str>| {
        let mut cmd = Command::new("sleep");
        cmd.arg(mark).env_remove("CCL_COV_TRIAL_TOKEN");
        if let Some(token) = token {
            cmd.env("CCL_COV_TRIAL_TOKEN", token);
        }
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::setsid();
                Ok(())
            });
        }
        cmd.spawn().unwrap()
    };
    let stat = |pid: u32| -> (u64, i32) {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = text.rsplit(')').next().unwrap().split_whitespace().collect();
        (fields[19].parse().unwrap(), fields[3].parse().unwrap())
    };
    let marks = [mark(611), mark(612), mark(613), mark(614)];
    let no_lock_owner = format!("{}-0", "5e".repeat(16));
    let mut children_started = vec![
        sleeper(&marks[0], Some(&no_lock_owner)),
        // pid 4194304 is past every pid_max: that owner is not running.
        sleeper(&marks[1], Some("4194304-1-0")),
        sleeper(&marks[2], None),
        sleeper(&marks[3], None),
    ];
    let record = |name: &str, pid_ns: u64, child: &std::process::Child| {
        let (start, session) = stat(child.id());
        let text = json!({"supervisor": 4_194_304, "pid_ns": pid_ns, "cgroup": null,
                          "processes": [[child.id(), start, session]]});
        let path = children.join(format!("{name}.json"));
        fs::write(&path, text.to_string()).unwrap();
        path
    };
    let own_ns = fs::metadata("/proc/self/ns/pid").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let unlocked = record(&format!("planted-{}-nolock", std::process::id()), own_ns, &children_started[2]);
    let elsewhere = record(&format!("planted-{}-otherns", std::process::id()), own_ns + 1, &children_started[3]);
    // Its lock exists and is free: only the namespace keeps it.
    fs::write(elsewhere.with_extension("lock"), "{}").unwrap();
    let ran = harness(&s, "collectives", &[], LIMIT);
    let out = ran.text();
    let alive: Vec<bool> = marks.iter().map(|m| !marked(m).is_empty()).collect();
    for child in &mut children_started {
        let _ = child.kill();
        let _ = child.wait();
    }
    for path in [&unlocked, &elsewhere, &elsewhere.with_extension("lock")] {
        let _ = fs::remove_file(path);
    }
    assert!(ran.success, "{out}");
    assert_eq!(alive, [true; 4], "an undecidable owner's process was killed:\n{out}");
    assert!(!out.contains("killed pid"), "{out}");
}

/// `clean --builds` while a run on another workspace uses the build: the
/// build is kept, the run named, and `clean` fails; the run's trial passes.
/// Once the run ended, its workspace still reports on the build, which is
/// kept (issue #48, item 6) until that workspace is deleted too.
#[test]
fn clean_keeps_a_build_a_run_uses_and_names_the_run() {
    let _shared = shared();
    let gates = tempfile::tempdir().unwrap();
    let release = gates.path().join("go");
    let mut s = wrapped(&[("held", "threads", 1, &wait_for_file(&release))]);
    // A build cache of its own: `clean --builds` must not delete the suite's.
    let target = s.dir.path().join("target");
    s.env.push(("CARGO_TARGET_DIR".into(), target.display().to_string()));
    let mut cleaner = setup(|v| only(v, "AllReduce", &["1K"], json!([])));
    cleaner.env.push(("CARGO_TARGET_DIR".into(), target.display().to_string()));
    let running = spawn(&s, command(&s, "collectives", &[]));
    wait_until("the trial", LIMIT, || {
        processes_mentioning(&s.ws.display().to_string()).iter().any(|p| p.contains("wrapper.sh"))
    });
    let builds = target.join("ccl-coverage/builds");
    let built = || -> Vec<PathBuf> {
        fs::read_dir(&builds).unwrap().flatten().map(|e| e.path()).filter(|p| p.join("build.json").is_file()).collect()
    };
    assert_eq!(built().len(), 1);
    let refused = harness(&cleaner, "clean", &["--builds"], Duration::from_secs(60));
    let out = refused.text();
    assert_eq!(refused.code, Some(2), "{out}");
    let named = format!("it is in use by the run on workspace {} (pid {}", s.ws.display(), running.pid());
    assert!(out.contains("kept the cached build") && out.contains(&named), "{out}");
    assert_eq!(built().len(), 1, "the build in use was deleted");
    fs::write(&release, "").unwrap();
    let ran = running.wait(LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert_eq!(result(&s, "AllReduce.1K.held")["status"], "PASSED");
    let kept = harness(&cleaner, "clean", &["--builds"], Duration::from_secs(60));
    let text = kept.text();
    assert!(kept.success && text.contains(&format!("the workspace {} still uses it", s.ws.display())), "{text}");
    assert_eq!(built().len(), 1, "the build a workspace reports on was deleted");
    let cleaned = harness(&s, "clean", &["--builds"], Duration::from_secs(60));
    assert!(cleaned.success && cleaned.text().contains("deleted the cached build"), "{}", cleaned.text());
    assert!(built().is_empty());
}

/// SIGTERM while the report runs a tool (here an `llvm-cov show` that
/// hangs): the tool is stopped, no step starts after it, the new report is
/// not installed, and the report exits 143. With no report before, none is
/// left; with one, it is kept byte for byte.
#[test]
fn sigterm_stops_the_report_and_keeps_the_last_good_one() {
    let _shared = shared();
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 1}])));
    support::tool_wrapper(&mut s, "llvm_cov");
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let hang = mark(621);
    let report = s.ws.join("report");
    let stopped = |expect: &str| {
        support::tool_behaviour(&s, "llvm_cov", |_| format!("if [ \"$1\" = show ]; then exec sleep {hang}; fi"));
        // One thread: with two, the other may finish every other step
        // while `llvm-cov show` hangs, and no step would be left to refuse.
        let running = spawn(&s, command(&s, "report", &["--test-threads", "1"]));
        wait_until("llvm-cov show", Duration::from_secs(120), || !marked(&hang).is_empty());
        signal(running.pid(), libc::SIGTERM);
        let ran = running.wait(Duration::from_secs(30));
        let out = ran.text();
        assert_eq!(ran.code, Some(143), "{out}");
        assert!(out.contains("SIGTERM: stopping") && out.contains(expect), "{out}");
        assert!(out.contains("not run: the report was interrupted by SIGTERM"), "later steps ran: {out}");
        assert!(marked(&hang).is_empty(), "llvm-cov show was left running");
        support::tool_as_is(&s, "llvm_cov");
    };
    stopped("the new report was not installed; there is no report yet");
    assert!(!report.exists(), "an interrupted first report was installed");
    let good = harness(&s, "report", &[], LIMIT);
    assert!(good.success, "{}", good.text());
    let before = support::files_under(&report);
    let lcov = fs::read(report.join("coverage.lcov")).unwrap();
    let meta = fs::read(report.join("meta.json")).unwrap();
    stopped(&format!("the new report was not installed; the last good report, {}, is kept whole", report.display()));
    assert_eq!(support::files_under(&report), before);
    assert_eq!(fs::read(report.join("coverage.lcov")).unwrap(), lcov);
    assert_eq!(fs::read(report.join("meta.json")).unwrap(), meta);
}

/// Trials that stop (SIGSTOP) or kill (SIGKILL) their own supervisor: each
/// gets a record that says so, the harness kills what they left, and
/// `junit.xml` and `run.json` count every trial.
#[test]
fn a_trial_that_stops_or_kills_its_supervisor_is_recorded_as_failed() {
    let _shared = shared();
    let s = wrapped(&[
        ("fine", "threads", 1, ""),
        ("stops", "threads", 1, "kill -STOP $PPID"),
        ("stopsagain", "threads", 1, "kill -STOP $PPID"),
        ("kills", "threads", 1, "kill -KILL $PPID; exec sleep 600"),
    ]);
    let ran = harness(&s, "collectives", &["--test-threads", "1"], LIMIT);
    let out = ran.text();
    assert!(!ran.success, "{out}");
    assert_eq!(result(&s, "AllReduce.1K.fine")["status"], "PASSED", "{out}");
    for slug in ["stops", "stopsagain"] {
        let r = result(&s, &format!("AllReduce.1K.{slug}"));
        assert_eq!(r["status"], "FAILED", "{r}");
        let reason = r["reason"].as_str().unwrap();
        assert!(reason.contains("was stopped (SIGSTOP or a tracer) for 2s, so the harness killed it"), "{reason}");
    }
    let r = result(&s, "AllReduce.1K.kills");
    let reason = r["reason"].as_str().unwrap();
    assert_eq!(r["status"], "FAILED", "{r}");
    assert!(
        reason.contains("its supervisor ended (killed by signal 9 (SIGKILL)) without saying how the trial ended"),
        "{reason}"
    );
    let run = run_json(&s);
    assert_eq!((run["summary"]["total"].as_u64(), run["summary"]["failed"].as_u64()), (Some(4), Some(3)), "{run}");
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("tests=\"4\"") && junit.contains("failures=\"3\""), "{junit}");
    assert!(processes_mentioning(&s.ws.display().to_string()).is_empty());
}

/// A daemon (its own session, every variable dropped) that starts a new
/// process every 0.3 s, each orphaned at once (so no process's descendant),
/// left when its supervisor and the harness are both SIGKILLed: the next run
/// kills all of it, the processes started after the supervisor's last look
/// included (by the trial's cgroup; without one, by the session of the
/// recorded daemon).
fn a_forking_daemon_is_swept_whole(mechanism: Mechanism) {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let chain = mark(631);
    let binary = dir.path().join("forker.sh");
    script(
        &binary,
        &format!("(setsid env -i sh -c 'while :; do (sleep {chain} &); sleep 0.3; done' &)\nexec sleep 600"),
    );
    let mut s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "forker", "ranks": 1}]));
        v["collectives"][0]["binary"] = json!(binary.display().to_string());
    });
    mechanism.apply(&mut s);
    let running = spawn(&s, command(&s, "collectives", &[]));
    let loop_shell = |pid: &i32| fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with("sh"));
    wait_until("the daemon", Duration::from_secs(120), || marked(&chain).iter().any(loop_shell));
    let daemon = *marked(&chain).iter().find(|p| loop_shell(p)).unwrap();
    let stat = fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
    let supervisor: i32 = stat.rsplit(')').next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(supervisor > 1 && supervisor != running.pid(), "the daemon is re-parented to its supervisor");
    // Let the supervisor record it, then kill both, as the OOM killer might.
    std::thread::sleep(Duration::from_secs(1));
    signal(supervisor, libc::SIGKILL);
    signal(running.pid(), libc::SIGKILL);
    drop(running);
    std::thread::sleep(Duration::from_secs(1));
    let before = marked(&chain).len();
    assert!(before >= 3, "the daemon forks on: {before} processes");
    let next = harness(&s, "collectives", &["--exact", "NoSuch::trial"], LIMIT);
    let out = next.text();
    std::thread::sleep(Duration::from_secs(1));
    let left = marked(&chain);
    kill_marked(&chain);
    assert!(next.success, "{out}");
    assert!(out.contains("left behind by a trial whose supervisor died"), "{out}");
    assert!(left.is_empty(), "{} of the daemon's processes outlived the next run:\n{out}", left.len());
}

#[test]
fn a_daemon_that_forks_every_moment_is_swept_whole() {
    a_forking_daemon_is_swept_whole(Mechanism::Default);
}

#[test]
fn a_daemon_that_forks_every_moment_is_swept_whole_by_its_session() {
    a_forking_daemon_is_swept_whole(Mechanism::ProcessTree);
}

/// A daemon started a moment before its supervisor is SIGKILLed (the trial
/// kills it), before the supervisor could look: the trial's cgroup, named in
/// the record before the trial started, still holds it, and the harness
/// kills it. Without a cgroup nothing names it (docs/faults.md).
#[test]
fn a_daemon_started_just_before_its_supervisor_dies_is_killed_with_its_cgroup() {
    let _shared = shared();
    let daemon = mark(641);
    let s = wrapped(&[("late", "threads", 1, &format!("(setsid env -i sleep {daemon} &); kill -KILL $PPID"))]);
    let ran = harness(&s, "collectives", &[], LIMIT);
    let out = ran.text();
    let cgroup = out.contains("each trial runs in a cgroup v2 of its own");
    std::thread::sleep(Duration::from_millis(500));
    let left = marked(&daemon);
    kill_marked(&daemon);
    assert!(!ran.success, "{out}");
    assert!(result(&s, "AllReduce.1K.late")["reason"].as_str().unwrap().contains("its supervisor ended"), "{out}");
    if !cgroup {
        eprintln!("skipped the check: no cgroup v2 here, and the process tree cannot name this daemon:\n{out}");
        return;
    }
    assert_eq!(result(&s, "AllReduce.1K.late")["containment"], "cgroup");
    assert!(left.is_empty(), "the daemon outlived its trial:\n{out}");
}

/// Which mechanism held a run's trials is said when it starts, and recorded
/// in each trial's result and in `run.json`; `CCL_COV_CGROUP=off` forces the
/// process tree and says so; a value that is none of auto, on or off is
/// refused before anything runs.
#[test]
fn the_run_says_which_mechanism_held_its_trials() {
    let _shared = shared();
    let mut off = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 1}])));
    Mechanism::ProcessTree.apply(&mut off);
    let ran = harness(&off, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert!(
        ran.text().contains(
            "each trial's processes are held by its session, marker and supervisor (CCL_COV_CGROUP=off: no cgroup)"
        ),
        "{}",
        ran.text()
    );
    let r = result(&off, "AllReduce.1K.one");
    assert_eq!(
        (r["containment"].as_str(), r["no_cgroup"].as_str()),
        (Some("process_tree"), Some("CCL_COV_CGROUP=off"))
    );
    assert_eq!(run_json(&off)["containment"], json!({"process_tree": 1}));

    let mut default = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 1}])));
    default.env.push(("CCL_COV_CGROUP".into(), "auto".into()));
    let ran = harness(&default, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let r = result(&default, "AllReduce.1K.one");
    if ran.text().contains("each trial runs in a cgroup v2 of its own, under ") {
        assert_eq!(r["containment"], "cgroup", "{r}");
        assert_eq!(run_json(&default)["containment"], json!({"cgroup": 1}));
    } else {
        assert!(ran.text().contains("no cgroup v2 here ("), "{}", ran.text());
        assert_eq!(r["containment"], "process_tree", "{r}");
    }

    let mut wrong = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 1}])));
    wrong.env.push(("CCL_COV_CGROUP".into(), "maybe".into()));
    let ran = harness(&wrong, "collectives", &[], LIMIT);
    assert_eq!(ran.code, Some(2), "{}", ran.text());
    assert!(
        ran.text().contains("CCL_COV_CGROUP=\"maybe\" is not a cgroup mode: expected auto, on or off"),
        "{}",
        ran.text()
    );
    assert!(!wrong.ws.exists(), "nothing is created");
}

/// A trial that writes 300 MB of two-byte lines (as `yes` does): the log is
/// capped, the scan reads only the lines that can matter (the unit test
/// `verdict::output::tests::a_flood_of_short_lines_makes_no_text_of_them`),
/// and the trial is judged on its real result table.
#[test]
fn a_flood_of_short_lines_is_capped_and_judged() {
    let _shared = shared();
    let mut s = wrapped(&[("yes", "threads", 1, "yes | head -c 300000000")]);
    let mut v: Value = serde_json::from_str(&fs::read_to_string(&s.config).unwrap()).unwrap();
    v["logs"] = json!({"max_mib": 8});
    fs::write(&s.config, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    s.env.push(("CCL_COV_HEARTBEAT_S".into(), "600".into()));
    let ran = harness(&s, "collectives", &[], LIMIT);
    let r = result(&s, "AllReduce.1K.yes");
    assert!(ran.success, "{}", ran.text());
    assert_eq!(r["status"], "PASSED", "{r}");
    assert!(r["output_cut_bytes"].as_u64().unwrap_or_default() > 300_000_000 - (8 << 20), "{r}");
    assert!(fs::metadata(s.ws.join("logs/AllReduce.1K.yes.log")).unwrap().len() < (8 << 20) + 4096);
}

/// `ccl-coverage run` refused because another run holds the workspace: it
/// says so and stops there; it neither reports nor prints the other run's
/// half-done tally as its own.
#[test]
fn a_refused_run_prints_no_tally_of_another_run() {
    let _shared = shared();
    let gates = tempfile::tempdir().unwrap();
    let release = gates.path().join("go");
    let s = wrapped(&[("adone", "threads", 1, ""), ("held", "threads", 1, &wait_for_file(&release))]);
    let running: Running = spawn(&s, command(&s, "collectives", &["--test-threads", "1"]));
    wait_until("the first trial's record", LIMIT, || s.ws.join("results/run.json").is_file());
    wait_until("the second trial", LIMIT, || {
        processes_mentioning(&s.ws.display().to_string()).iter().any(|p| p.contains("wrapper.sh"))
    });
    let holder = running.pid();
    let refused = harness(&s, "run", &[], Duration::from_secs(60));
    let out = refused.text();
    fs::write(&release, "").unwrap();
    let first = running.wait(LIMIT);
    assert!(first.success, "{}", first.text());
    assert_eq!(refused.code, Some(2), "{out}");
    assert!(out.contains(&format!("is in use by pid {holder}")), "{out}");
    assert!(!out.contains(" trials: ") && !out.contains("passed,"), "the refused run tallied: {out}");
    assert!(!out.contains("report::"), "the refused run reported: {out}");
}
