//! The fixture's fault kinds for a rank that dies or goes silent, each run
//! through the threads launcher and through `mpirun` (3 ranks): every trial
//! fails with a verdict that names the cause, in bounded time, and leaves no
//! process behind.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

mod support;

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::{harness, only, processes_mentioning, result, setup};

/// The harness is killed past this; the trials' own timeout is much smaller.
const LIMIT: Duration = Duration::from_secs(480);
const TIMEOUT_S: u64 = 20;

/// (fault, faulty rank, what the threads trial's reason says, what the MPI one's says).
const FAULTS: &[(&str, u32, &str, &str)] = &[
    (
        "abort",
        1,
        "killed by signal 6 (SIGABRT)",
        "exit status 134 (128 + 6, as launchers report a process killed by SIGABRT)",
    ),
    ("exit-nonzero", 1, "exit status 3", "exit status 3"),
    (
        "no-output",
        0,
        "exit status 0, but the output has no perf table",
        "exit status 0, but the output has no perf table",
    ),
    ("init-death", 1, "exit status 1", "exit status 1"),
];

fn variants() -> Value {
    let mut out = Vec::new();
    for (fault, rank, _, _) in FAULTS {
        let env = json!({"CCL_FAULT": fault, "CCL_FAULT_RANK": rank.to_string(), "CCL_INIT_TIMEOUT_S": "4"});
        out.push(json!({"name": fault, "ranks": 3, "env": env}));
        out.push(json!({"name": format!("{fault}-mpi"), "launcher": "mpi", "ranks": 3, "env": env}));
    }
    // Open MPI tears the job down when a rank exits nonzero; told not to, the
    // surviving ranks are left waiting in init and must give up by themselves.
    out.push(json!({
        "name": "init-death-mpi-noabort", "launcher": "mpi-noabort", "ranks": 3,
        "env": {"CCL_FAULT": "init-death", "CCL_FAULT_RANK": "1", "CCL_INIT_TIMEOUT_S": "4"}
    }));
    // Rank 0 dies before creating the segment: the others wait for it to appear.
    out.push(json!({
        "name": "init-death-rank0-mpi-noabort", "launcher": "mpi-noabort", "ranks": 3,
        "env": {"CCL_FAULT": "init-death", "CCL_FAULT_RANK": "0", "CCL_INIT_TIMEOUT_S": "4"}
    }));
    // Stopped by the trial's timeout while rank 0 waits in init.
    out.push(json!({
        "name": "init-stopped-mpi-noabort", "launcher": "mpi-noabort", "ranks": 3,
        "env": {"CCL_FAULT": "init-death", "CCL_FAULT_RANK": "1", "CCL_INIT_TIMEOUT_S": "600"}
    }));
    Value::Array(out)
}

#[test]
fn dying_and_silent_ranks_fail_with_the_cause_in_bounded_time() {
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], variants());
        let mut noabort = v["launchers"]["mpi"].clone();
        noabort["args"].as_array_mut().unwrap().extend([
            json!("--mca"),
            json!("orte_abort_on_non_zero_status"),
            json!("0"),
        ]);
        v["launchers"]["mpi-noabort"] = noabort;
        v["timeouts"] = json!({
            "default": TIMEOUT_S, "grace": 2,
            "overrides": [{"variant": "init-stopped-mpi-noabort", "seconds": 4}]
        });
    });
    let ran = harness(&s, "collectives", &["--test-threads", "2"], LIMIT);
    let out = ran.text();
    assert!(!ran.success, "every trial fails: {out}");
    let mut wrong = Vec::new();
    for (fault, _, threads_reason, mpi_reason) in FAULTS {
        for (slug, expected) in
            [(format!("AllReduce.1K.{fault}"), threads_reason), (format!("AllReduce.1K.{fault}-mpi"), mpi_reason)]
        {
            let r = result(&s, &slug);
            let reason = r["reason"].as_str().unwrap_or_default();
            eprintln!("{slug}: {} {reason}", r["status"]);
            if r["status"] != "FAILED" || !reason.starts_with(expected) {
                wrong.push(format!("{slug}: {} {reason:?}, expected FAILED {expected:?}", r["status"]));
            }
            let took = r["duration_s"].as_f64().unwrap();
            assert!(took < TIMEOUT_S as f64, "{slug} took {took}s");
        }
    }
    assert!(wrong.is_empty(), "wrong verdicts:\n{}\n{out}", wrong.join("\n"));

    // The silent trial's log has the command and the perf binary's header (printed
    // before init), but no result row and no summary.
    let silent = std::fs::read_to_string(s.ws.join("logs/AllReduce.1K.no-output.log")).unwrap();
    assert!(!silent.contains("Out of bounds") && !silent.contains("float"), "{silent}");

    // Left waiting by a rank that died in init, the others give up on their
    // own, say why, and remove the shared segment.
    let r = result(&s, "AllReduce.1K.init-death-mpi-noabort");
    assert_eq!(r["status"], "FAILED", "{r}");
    let log = std::fs::read_to_string(s.ws.join("logs/AllReduce.1K.init-death-mpi-noabort.log")).unwrap();
    assert!(log.contains("rank 1: CCL_FAULT=init-death: leaving during communicator init"), "{log}");
    let gave_up = log.lines().find(|l| l.contains("of 3 ranks joined") && l.contains("did a rank die during init?"));
    let gave_up = gave_up.unwrap_or_else(|| panic!("no rank gave up on init: {log}"));
    let segment = gave_up.split_whitespace().find(|w| w.starts_with("/ccl-")).expect("the segment is named");
    assert!(!Path::new("/dev/shm").join(&segment[1..]).exists(), "{segment} is left in /dev/shm");

    let r = result(&s, "AllReduce.1K.init-death-rank0-mpi-noabort");
    assert_eq!(r["status"], "FAILED", "{r}");
    let log = std::fs::read_to_string(s.ws.join("logs/AllReduce.1K.init-death-rank0-mpi-noabort.log")).unwrap();
    assert!(log.contains("did not appear") && log.contains("did rank 0 die during init?"), "{log}");

    // The perf binary removes rank 0's segment when SIGTERM ends it in init.
    let r = result(&s, "AllReduce.1K.init-stopped-mpi-noabort");
    assert_eq!(r["status"], "TIMEOUT", "{r}");
    let log = std::fs::read_to_string(s.ws.join("logs/AllReduce.1K.init-stopped-mpi-noabort.log")).unwrap();
    let rank0 = log.lines().find(|l| l.starts_with("#  Rank  0 Group")).unwrap_or_else(|| panic!("no rank 0: {log}"));
    let pid = rank0.split_whitespace().nth(6).expect("rank 0's pid");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&format!("ccl-{pid}-")))
        .collect();
    assert!(left.is_empty(), "rank 0 (pid {pid}) left {left:?} in /dev/shm");

    let survivors = processes_mentioning(&s.ws.display().to_string());
    assert!(survivors.is_empty(), "processes of the trials survive: {survivors:?}");
}

/// A trial whose output holds bytes that are not UTF-8 is judged on what it
/// printed: read lossily, never as no output at all.
#[test]
fn output_that_is_not_utf8_is_still_read() {
    let s = wrapped("bytes", "printf '\\377\\376 not UTF-8\\n'", |_| {});
    let ran = harness(&s, "collectives", &[], LIMIT);
    let r = result(&s, "AllReduce.1K.bytes");
    assert_eq!(r["status"], "PASSED", "{r}\n{}", ran.text());
    assert!(ran.success, "{}", ran.text());
    let log = std::fs::read(s.ws.join("logs/AllReduce.1K.bytes.log")).unwrap();
    assert!(log.windows(2).any(|w| w == [0xff, 0xfe]), "the log keeps the bytes as they were");
}

/// A trial that floods its output and then passes: its log keeps the cap's
/// head and tail (the result table is in the tail), says what was cut, and
/// the trial is judged on it and passes.
#[test]
fn a_flood_of_output_is_capped_and_the_trial_still_judged() {
    let s = wrapped("flood", "head -c 100000000 /dev/zero | tr '\\0' x\necho", |v| v["logs"] = json!({"max_mib": 1}));
    let ran = harness(&s, "collectives", &[], LIMIT);
    let r = result(&s, "AllReduce.1K.flood");
    assert_eq!(r["status"], "PASSED", "{r}\n{}", ran.text());
    assert!(ran.success, "{}", ran.text());
    let cut = r["output_cut_bytes"].as_u64().unwrap_or_default();
    assert!(cut > 100_000_000 - (1 << 20), "{r}");
    let log = std::fs::metadata(s.ws.join("logs/AllReduce.1K.flood.log")).unwrap().len();
    assert!(log < (1 << 20) + 4096, "the log has {log} bytes");
    assert!(ran.text().contains("its output was cut"), "{}", ran.text());
}

/// Build A, then build B, then A again (its key returns): the records of
/// the first A were of another build when B came and are gone, so the report
/// counts only what ran since, and every profile it counts is there.
#[test]
fn returning_to_an_earlier_build_does_not_bring_back_its_results() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}, {"name": "two", "ranks": 2}])));
    let first = harness(&s, "collectives", &[], LIMIT);
    assert!(first.success, "{}", first.text());
    let config_a = std::fs::read_to_string(&s.config).unwrap();
    let mut v: Value = serde_json::from_str(&config_a).unwrap();
    // Another build key: one more variable in a build step's environment.
    v["library"]["steps"][1]["env"] = json!({"CCL_BUILD_NOTE": "b"});
    std::fs::write(&s.config, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let one = ["--exact", "AllReduce::1K::one"];
    let b = harness(&s, "collectives", &one, LIMIT);
    assert!(b.success && b.text().contains("build changed"), "{}", b.text());
    assert!(!s.ws.join("results/AllReduce.1K.two.json").exists(), "build A's record is kept under build B");
    std::fs::write(&s.config, &config_a).unwrap();
    let back = harness(&s, "collectives", &one, LIMIT);
    assert!(back.success && back.text().contains("build changed"), "{}", back.text());
    let report = harness(&s, "report", &[], LIMIT);
    let out = report.text();
    assert!(report.success, "{out}");
    assert!(!out.contains("vanished"), "{out}");
    let trials: Value = serde_json::from_str(&std::fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap();
    let names: Vec<&str> = trials["trials"].as_array().unwrap().iter().filter_map(|t| t["trial"].as_str()).collect();
    assert_eq!(names, ["AllReduce::1K::one"], "{trials}");
}

/// A cached build whose object was damaged after it was built is not
/// reused: a truncated library (trials would die of SIGBUS) and one with
/// bytes overwritten in place (the report would read malformed coverage
/// data) are each named and built again; a `touch` alone is not damage.
#[test]
fn a_damaged_build_cache_is_named_and_rebuilt() {
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    // A cache of its own: the other tests share the default one.
    s.env.push(("CARGO_TARGET_DIR".into(), s.dir.path().join("target").display().to_string()));
    let first = harness(&s, "collectives", &[], LIMIT);
    assert!(first.success, "{}", first.text());
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(s.ws.join("build.json")).unwrap()).unwrap();
    let library = std::path::PathBuf::from(manifest["objects"][0]["path"].as_str().unwrap());
    assert!(library.starts_with(s.dir.path()), "{}", library.display());
    let built = std::fs::read(&library).unwrap();
    let name = library.display().to_string();

    std::fs::write(&library, &built[..built.len() / 2]).unwrap();
    let truncated = harness(&s, "collectives", &[], LIMIT);
    let out = truncated.text();
    assert!(truncated.success, "{out}");
    assert!(
        out.contains("cannot be reused") && out.contains(&format!("{name} has {} bytes", built.len() / 2)),
        "{out}"
    );
    assert_eq!(std::fs::metadata(&library).unwrap().len(), built.len() as u64, "the library is built again");

    let mut bytes = std::fs::read(&library).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 64].fill(0xa5);
    std::fs::write(&library, &bytes).unwrap();
    let overwritten = harness(&s, "collectives", &[], LIMIT);
    let out = overwritten.text();
    assert!(overwritten.success, "{out}");
    assert!(out.contains("cannot be reused") && out.contains(&format!("{name} changed after it was built")), "{out}");
    assert!(std::fs::read(&library).unwrap()[middle..middle + 64] != [0xa5; 64], "the library is built again");

    let file = std::fs::File::options().append(true).open(&library).unwrap();
    file.set_modified(std::time::SystemTime::now()).unwrap();
    let touched = harness(&s, "collectives", &[], LIMIT);
    assert!(touched.success && touched.text().contains("reusing build"), "{}", touched.text());
    let report = harness(&s, "report", &[], LIMIT);
    assert!(report.success, "{}", report.text());
}

/// A trial whose binary leaves a daemon behind (double fork, `setsid`, every
/// variable dropped) does not pass: the daemon is killed and counted, and
/// nothing of it is left.
#[test]
fn a_daemon_that_escapes_its_trial_is_killed_and_fails_it() {
    let mark = format!("700.{}", std::process::id());
    let s = wrapped("daemon", &format!("(setsid env -i sleep {mark} &)"), |_| {});
    let ran = harness(&s, "collectives", &[], LIMIT);
    let r = result(&s, "AllReduce.1K.daemon");
    assert!(!ran.success, "{}", ran.text());
    assert_eq!(r["status"], "FAILED", "{r}");
    assert_eq!(r["leftovers"], 1, "{r}");
    assert!(r["reason"].as_str().unwrap_or_default().contains("1 of its processes were still running"), "{r}");
    // Its environment is empty: look for it by its command line.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.starts_with("sleep ") && c.contains(&mark))
        .collect();
    assert!(left.is_empty(), "the daemon outlived its trial: {left:?}");
}

/// A daemon that escaped its trial (double fork, `setsid`, every variable
/// dropped) while the trial's supervisor and the harness were both killed
/// with SIGKILL is found by the next run, through the record the supervisor
/// kept of its trial's processes, and killed.
#[test]
fn a_later_run_kills_what_a_killed_supervisor_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("800.{}", std::process::id());
    let wrapper = dir.path().join("daemon.sh");
    std::fs::write(&wrapper, format!("#!/bin/sh\n(setsid env -i sleep {mark} &)\nexec sleep 600\n")).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "daemon", "ranks": 1}]));
        v["collectives"][0]["binary"] = json!(wrapper.display().to_string());
    });
    let daemon = || -> Option<(i32, i32)> {
        std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let cmd = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).ok()?).replace('\0', " ");
            if !(cmd.starts_with("sleep ") && cmd.contains(&mark)) {
                return None;
            }
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid = stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()?;
            Some((e.file_name().to_str()?.parse().ok()?, ppid))
        })
    };
    let running = support::spawn(&s, support::command(&s, "collectives", &[]));
    let started = std::time::Instant::now();
    // Orphaned, the daemon is re-parented to its supervisor, the subreaper.
    let (pid, supervisor) = loop {
        match daemon() {
            Some((pid, ppid)) if ppid > 1 && ppid != running.pid() => break (pid, ppid),
            _ if started.elapsed() > Duration::from_secs(120) => panic!("no daemon: {}", running.text_so_far()),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    // Let the supervisor record it, then kill it and the harness, as the OOM killer might.
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(supervisor, libc::SIGKILL);
        libc::kill(running.pid(), libc::SIGKILL);
    }
    drop(running);
    std::thread::sleep(Duration::from_millis(500));
    assert!(daemon().is_some_and(|(p, _)| p == pid), "the daemon should still run before the next run");
    let next = harness(&s, "collectives", &["--list"], LIMIT);
    assert!(next.success, "{}", next.text());
    let next = harness(&s, "collectives", &["--exact", "NoSuch::trial"], LIMIT);
    let out = next.text();
    assert!(out.contains(&format!("killed pid {pid} left behind by a trial whose supervisor died")), "{out}");
    assert!(daemon().is_none(), "the daemon outlived the next run");
}

/// When `llvm-cov show` fails after making `report/html` with modes of its
/// own, the folder still gets the harness's modes (never group- or
/// world-unreadable under umask 022), and the step fails naming the command.
#[test]
fn a_failed_html_step_leaves_the_report_with_the_harness_modes() {
    use std::os::unix::fs::PermissionsExt;
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    support::tool_wrapper(&mut s, "llvm_cov");
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    // An llvm-cov that makes its output folder 0750 and fails for `show`.
    failing_llvm_cov_show(
        &s,
        "for a; do case $a in -output-dir=*) mkdir -p -m 0750 \"${a#-output-dir=}\";; esac; done; echo 'show failed' >&2",
    );
    let report = harness(&s, "report", &["--exact", "report::html"], LIMIT);
    assert!(!report.success && report.text().contains("show failed"), "{}", report.text());
    let mode = std::fs::metadata(s.ws.join("report/html")).unwrap().permissions().mode() & 0o777;
    // What any folder the harness makes gets: 0777 less this umask, and never group or world write.
    let probe = s.dir.path().join("umask-probe");
    std::fs::create_dir(&probe).unwrap();
    let expected = std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777 & !0o022;
    assert_eq!(mode, expected, "report/html is {mode:o}, other folders {expected:o}");
}

/// A report that fails while it is written (a full disk, a failing
/// llvm-cov) does not cost the last good one: the new report is written
/// beside it and swapped in only when whole.
#[test]
fn a_failed_report_leaves_the_last_good_one_whole() {
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    support::tool_wrapper(&mut s, "llvm_cov");
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let good = harness(&s, "report", &[], LIMIT);
    assert!(good.success, "{}", good.text());
    let report = s.ws.join("report");
    let before = support::files_under(&report);
    let lcov = std::fs::read(report.join("coverage.lcov")).unwrap();
    let meta = std::fs::read(report.join("meta.json")).unwrap();
    // An llvm-cov whose `show` fails, as on a full disk.
    failing_llvm_cov_show(&s, "echo 'No space left on device' >&2");
    let failed = harness(&s, "report", &[], LIMIT);
    let out = failed.text();
    assert!(!failed.success, "{out}");
    assert!(out.contains("the new report is incomplete (report::html failed)"), "{out}");
    assert!(out.contains("the last good report") && out.contains("is kept whole"), "{out}");
    assert_eq!(support::files_under(&report), before, "the last good report lost or gained files");
    assert_eq!(std::fs::read(report.join("coverage.lcov")).unwrap(), lcov);
    assert_eq!(std::fs::read(report.join("meta.json")).unwrap(), meta, "the last good report was rewritten");
    let staged = std::fs::read_dir(s.ws.join("report.new")).map(Iterator::count).unwrap_or(0);
    assert_eq!(staged, 0, "the incomplete report is left behind");
}

/// A damaged `results/<trial>.json` is not skipped in silence: the report
/// names it, moves it to quarantine and fails, and the other trials are still
/// reported.
#[test]
fn a_damaged_result_is_quarantined_named_and_fails_the_report() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}, {"name": "two", "ranks": 2}])));
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let record = s.ws.join("results/AllReduce.1K.two.json");
    let text = std::fs::read_to_string(&record).unwrap();
    std::fs::write(&record, &text[..text.len() / 2]).unwrap();
    let report = harness(&s, "report", &[], LIMIT);
    let out = report.text();
    assert!(!report.success, "{out}");
    assert!(out.contains("1 trial results were unreadable and moved to quarantine"), "{out}");
    assert!(out.contains("AllReduce.1K.two.json"), "{out}");
    assert!(!record.exists(), "the damaged record stays in results/");
    let kept = std::fs::read_to_string(s.ws.join("quarantine/AllReduce.1K.two/result.json")).unwrap();
    assert_eq!(kept, text[..text.len() / 2], "the damaged record is kept as it was");
    assert!(s.ws.join("report/coverage.lcov").is_file(), "the other trial is still reported");
}

/// Makes the workspace's build use an llvm-cov that runs `on_show` and
/// fails for `show`, and is the real one for everything else.
fn failing_llvm_cov_show(s: &support::Setup, on_show: &str) {
    llvm_cov_script(s, |real| format!("if [ \"$1\" = show ]; then {on_show}; exit 1; fi\nexec {real} \"$@\""));
}

/// The setup's llvm-cov runs shell lines that `script` writes around the real one's path.
fn llvm_cov_script(s: &support::Setup, script: impl FnOnce(&str) -> String) {
    support::tool_behaviour(s, "llvm_cov", script);
}

/// When the in-process coverage-mapping reader does not give llvm-cov's own
/// lcov for the merged profile (here an llvm-cov that adds a covered line to
/// the first file of every lcov export: a file added would be refused, as
/// lcov names its JSON summary lacks), attribution says so and runs llvm-cov per trial instead:
/// its trials then agree with the merged report, and the report passes.
#[test]
fn attribution_falls_back_to_llvm_cov_when_the_reader_disagrees() {
    let mut s =
        setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}, {"name": "two", "ranks": 2}])));
    support::tool_wrapper(&mut s, "llvm_cov");
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    llvm_cov_script(&s, |real| {
        format!(
            "case \"$*\" in *-format=lcov*) out=$({real} \"$@\") || exit 1; printf '%s\\n' \"$out\" | sed '0,/^end_of_record$/s//DA:99999,1\\nend_of_record/'; exit 0;; *) exec {real} \"$@\";; esac"
        )
    });
    let report = harness(&s, "report", &[], LIMIT);
    let out = report.text();
    assert!(report.success, "{out}");
    assert!(
        out.contains("per-trial attribution runs llvm-cov once per trial (slower): the in-process coverage-mapping reader cannot be used: on the merged profile it differs from llvm-cov at line"),
        "{out}"
    );
    assert!(out.contains("llvm-cov \"DA:99999,1\", in-process \"end_of_record\""), "{out}");
    let attribution = std::fs::read_to_string(s.ws.join("report/attribution.json")).unwrap();
    assert!(attribution.contains("[99999,99999,"), "the trials' lcov is llvm-cov's: {attribution}");
}

/// Attribution reads each trial's counters in process once the merged
/// profile's, read so, are llvm-profdata's (one `merge -text` per report, for
/// that check). When they differ (here an llvm-profdata whose text has a
/// function more), the report says so, reads every trial's counters with
/// llvm-profdata, and passes.
#[test]
fn attribution_reads_counters_with_llvm_profdata_when_the_in_process_reader_disagrees() {
    let mut s =
        setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}, {"name": "two", "ranks": 2}])));
    support::tool_wrapper(&mut s, "llvm_profdata");
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let log = s.dir.path().join("llvm-profdata.log");
    let text_reads = || {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let n = log.lines().filter(|l| l.contains("-text")).count();
        std::fs::remove_file(s.dir.path().join("llvm-profdata.log")).ok();
        n
    };
    support::tool_behaviour(&s, "llvm_profdata", |real| {
        format!("echo \"$*\" >> '{}'\nexec {real} \"$@\"", log.display())
    });
    let report = harness(&s, "report", &[], LIMIT);
    let out = report.text();
    assert!(report.success, "{out}");
    assert!(!out.contains("reads each trial's counters with llvm-profdata"), "{out}");
    assert_eq!(text_reads(), 1, "only the merged profile is read with llvm-profdata: {out}");
    let in_process = std::fs::read_to_string(s.ws.join("report/attribution.json")).unwrap();

    support::tool_behaviour(&s, "llvm_profdata", |real| {
        format!(
            "echo \"$*\" >> '{}'\ncase \"$*\" in *-text*) {real} \"$@\" || exit 1; printf '_Z9nowherev\\n# Func Hash:\\n1\\n# Num Counters:\\n1\\n# Counter Values:\\n1\\n\\n'; exit 0;; *) exec {real} \"$@\";; esac",
            log.display()
        )
    });
    let report = harness(&s, "report", &[], LIMIT);
    let out = report.text();
    assert!(report.success, "{out}");
    assert!(
        out.contains("per-trial attribution reads each trial's counters with llvm-profdata (slower): the in-process reader of indexed profiles cannot be used: on the merged profile"),
        "{out}"
    );
    assert!(out.contains("_Z9nowherev: llvm-profdata hash 1 with 1 counters [1], in process no record"), "{out}");
    assert_eq!(text_reads(), 3, "the merged profile and each of the 2 trials: {out}");
    let text = std::fs::read_to_string(s.ws.join("report/attribution.json")).unwrap();
    assert_eq!(text, in_process, "a function the mapping does not have changes no line");
}

/// A setup of one trial, `AllReduce::1K::<name>` on 2 ranks, whose binary is
/// a script that runs `before` and then the real perf binary.
fn wrapped(name: &str, before: &str, edit: impl FnOnce(&mut Value)) -> support::Setup {
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([{"name": name, "ranks": 2, "env": {"REAL_BINARY": "{bin_dir}/all_reduce_perf"}}]),
        );
        edit(v);
    });
    let wrapper = s.dir.path().join(format!("{name}.sh"));
    std::fs::write(&wrapper, format!("#!/bin/sh\n{before}\nexec \"$REAL_BINARY\" \"$@\"\n")).unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&s.config).unwrap()).unwrap();
    v["collectives"][0]["binary"] = json!(wrapper.display().to_string());
    std::fs::write(&s.config, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    s
}
