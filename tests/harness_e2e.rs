//! End-to-end tests of the harness's own guarantees, through the real
//! `ccl-coverage` binary, the real instrumented fixture build and real
//! processes (threads and `mpirun` ranks). Each test works in a temporary
//! workspace with a config derived from `configs/local.json`; the build is
//! shared with the main suite through the on-disk cache.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

mod support;

use support::{Setup, only, processes_mentioning, root, setup};

/// No harness run of these tests may take longer (a first run builds the fixture).
const LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

fn harness(s: &Setup, subcommand: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    // Hermetic: no switch of the caller's environment leaks in.
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") || key == "GITHUB_STEP_SUMMARY" {
            cmd.env_remove(key);
        }
    }
    cmd.arg(subcommand)
        .args(args)
        .env("CCL_COV_CONFIG", &s.config)
        .env("CCL_COV_WORKSPACE", &s.ws)
        .env("CARGO_MANIFEST_DIR", root())
        .current_dir(root());
    for (k, v) in &s.env {
        cmd.env(k, v);
    }
    // Generous: on a fresh checkout the first call builds the fixture.
    support::output_within(cmd, LIMIT)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn result(s: &Setup, slug: &str) -> Value {
    let path = s.ws.join("results").join(format!("{slug}.json"));
    serde_json::from_str(&fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

#[test]
fn hung_ranks_are_killed_within_timeout_and_grace() {
    let (timeout, grace) = (4.0, 2.0);
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                {"name": "threads", "env": {"CCL_FAULT": "hang-ignore-term", "CCL_FAULT_RANK": "2"}},
                {"name": "mpi", "launcher": "mpi", "ranks": 3, "env": {"CCL_FAULT": "hang-ignore-term", "CCL_FAULT_RANK": "1"}}
            ]),
        );
        v["timeouts"] = json!({"default": timeout as u64, "grace": grace as u64});
    });
    let out = harness(&s, "collectives", &["--test-threads", "2"]);
    let log = text(&out);
    assert!(!out.status.success(), "hung trials must fail:\n{log}");
    for slug in ["AllReduce.1K.threads", "AllReduce.1K.mpi"] {
        let r = result(&s, slug);
        assert_eq!(r["status"], "TIMEOUT", "{slug}: {r}");
        let took = r["duration_s"].as_f64().unwrap();
        // Kill and reap take a moment beyond timeout + grace, never seconds.
        assert!(took < timeout + grace + 1.5, "{slug} took {took}s for timeout {timeout}s + grace {grace}s");
    }
    // A process that ignores SIGTERM needs the SIGKILL after the grace period.
    assert!(result(&s, "AllReduce.1K.threads")["reason"].as_str().unwrap().contains("stopped with SIGKILL"));
    assert!(log.contains("TIMEOUT: TIMEOUT after 4s"), "{log}");
    // The message names the key that sets the limit, and where.
    assert!(log.contains(&format!("; the limit is timeouts.default in {}", s.config.display())), "{log}");
    let survivors = processes_mentioning(&s.ws.display().to_string());
    assert!(survivors.is_empty(), "processes of the hung trials survive: {survivors:?}");
}

#[test]
fn wrong_results_and_crashes_fail_with_the_evidence() {
    let s = setup(|v| {
        only(
            v,
            "AllGather",
            &["1K"],
            json!([
                {"name": "wrong", "env": {"CCL_FAULT": "wrong", "CCL_FAULT_RANK": "1"}},
                {"name": "mpiwrong", "launcher": "mpi", "ranks": 3, "env": {"CCL_FAULT": "wrong", "CCL_FAULT_RANK": "2"}},
                {"name": "crash", "env": {"CCL_FAULT": "crash", "CCL_FAULT_RANK": "0"}}
            ]),
        );
    });
    let out = harness(&s, "collectives", &[]);
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    for slug in ["AllGather.1K.wrong", "AllGather.1K.mpiwrong"] {
        let r = result(&s, slug);
        assert_eq!(r["status"], "FAILED", "{r}");
        assert!(r["reason"].as_str().unwrap().contains("Out of bounds values"), "{r}");
        assert!(r["perf"]["out_of_bounds"]["count"].as_u64().unwrap() > 0, "{r}");
    }
    let crash = result(&s, "AllGather.1K.crash");
    assert_eq!(crash["status"], "FAILED");
    assert_eq!(crash["reason"], "killed by signal 11 (SIGSEGV)");
    // The failure message carries the command, the log path and the log tail.
    assert!(log.contains("FAILED: exit status 1: # Out of bounds values"), "{log}");
    assert!(log.contains("command: cd "), "{log}");
    assert!(log.contains(&format!("log: {}", s.ws.join("logs/AllGather.1K.wrong.log").display())), "{log}");
    assert!(log.contains("# Collective test concluded: all_gather_perf"), "log tail is shown:\n{log}");
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("tests=\"3\"") && junit.contains("failures=\"3\""), "{junit}");
}

/// Profile files under `profiles/` with their sizes and modification times.
fn profile_listing(ws: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![ws.join("profiles")];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.insert(entry.path(), (meta.len(), meta.modified().unwrap()));
            }
        }
    }
    out
}

#[test]
fn reruns_drop_stale_profiles_and_report_only_keeps_every_profile() {
    let mut s = setup(|v| {
        only(
            v,
            "Broadcast",
            &["1K"],
            json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}, {"name": "direct", "env": {"CCL_ALGO": "direct"}}]),
        );
        v["report"]["snapshot"] = json!(true);
    });
    // Raw profiles stay where the trial wrote them, as the report will merge them.
    s.env.push(("CCL_COV_INCREMENTAL_MERGE".into(), "off".into()));
    let trial = ["--exact", "Broadcast::1K::ring"];
    let first = harness(&s, "collectives", &trial);
    assert!(first.status.success(), "{}", text(&first));
    let dir = s.ws.join("profiles/Broadcast.1K.ring");
    let real = fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let stale = dir.join("vm-1-stale.profraw");
    fs::copy(&real, &stale).unwrap();

    let again = harness(&s, "collectives", &trial);
    assert!(again.status.success(), "{}", text(&again));
    assert!(!stale.exists(), "a stale profile of the same trial survived the re-run");
    let fresh = result(&s, "Broadcast.1K.ring")["profiles"].as_u64().unwrap();
    assert_eq!(fs::read_dir(&dir).unwrap().count() as u64, fresh);

    let before = profile_listing(&s.ws);
    assert!(!before.is_empty());
    for _ in 0..2 {
        let report = harness(&s, "report", &[]);
        let log = text(&report);
        assert!(report.status.success(), "{log}");
        // Only one of two trials ran: the snapshot is skipped, not failed.
        assert!(log.contains("report::snapshot is ignored: partial suite: 1 of 2 trials"), "{log}");
    }
    assert_eq!(profile_listing(&s.ws), before, "report-only changed or deleted a profile");
    let merged_list = fs::read_to_string(s.ws.join("report/profiles.list")).unwrap();
    assert!(!merged_list.contains("stale"), "{merged_list}");
    assert_eq!(merged_list.lines().count() as u64, fresh);
    for file in [
        "report/html/index.html",
        "report/summary.json",
        "report/coverage.lcov",
        "report/summary.txt",
        "results/run.json",
        "results/junit.xml",
    ] {
        assert!(s.ws.join(file).is_file(), "{file} missing");
    }
}

/// Nothing to report is said once, and is no failure of every step.
#[test]
fn report_without_a_run_says_what_to_run_first() {
    let s = setup(|_| {});
    let out = harness(&s, "report", &["--exact", "report::merge"]);
    let log = text(&out);
    assert!(out.status.success() && log.contains("0 passed; 0 failed; 1 ignored"), "{log}");
    assert!(
        log.contains(&format!(
            "nothing to report: no trial has run in {} yet: run `ccl-coverage run` first",
            s.ws.display()
        )),
        "{log}"
    );
    // The hint names the command this person used, not the cargo one.
    assert!(!log.contains("cargo test"), "{log}");
    assert!(!s.ws.exists(), "the report created the workspace");
}

#[test]
fn unset_config_variable_is_an_error_not_literal_text() {
    let s = setup(|v| v["env"]["CCL_E2E"] = json!("${CCL_COV_E2E_SURELY_UNSET}/x"));
    let out = harness(&s, "collectives", &["--list"]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains(&format!(
            "{}: env.CCL_E2E: environment variable CCL_COV_E2E_SURELY_UNSET is not set",
            s.config.display()
        )),
        "{log}"
    );
}

#[test]
fn list_is_instant_and_builds_nothing() {
    let mut s = setup(|_| {});
    let target = s.dir.path().join("target");
    s.env.push(("CARGO_TARGET_DIR".into(), target.display().to_string()));
    let out = harness(&s, "collectives", &["--list"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 56, "{stdout}");
    assert!(lines.iter().all(|l| l.ends_with(": test") && l.matches("::").count() == 2), "{stdout}");
    assert!(!target.exists(), "--list created {}", target.display());
    assert!(!s.ws.exists(), "--list created the workspace");
    let ignored = harness(&s, "collectives", &["--list", "--ignored"]);
    assert_eq!(String::from_utf8(ignored.stdout).unwrap().lines().count(), 14);
    assert!(!target.exists());
}

/// A failed build is said once, its log's error lines first (the cause is
/// far above the tail), and its trials are not run, which the run's last
/// line says as the report does (issue #41, item 5).
#[test]
fn a_failed_build_is_said_once_with_its_error_lines_first() {
    // The error's text is not in the command line, which the log starts with.
    let script = "echo 'ld: init.o: undefined refer''ence to `ccl_setup'\"'\"''; \
                  for i in $(seq 1 80); do echo \"[$i/80] Building object x$i.o\"; done; exit 9";
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]));
        v["library"]["steps"][0]["argv"] = json!(["sh", "-c", script]);
    });
    let out = harness(&s, "run", &["--test-threads", "3"]);
    let log = text(&out);
    assert!(!out.status.success());
    assert_eq!(log.matches("build step \"configure ccl\" failed: command failed (exit status 9)").count(), 1, "{log}");
    assert_eq!(log.matches("undefined reference to `ccl_setup'").count(), 1, "{log}");
    let cause = log.find("undefined reference to `ccl_setup'").unwrap();
    let tail = log.find("last lines of").unwrap();
    assert!(log[..cause].contains("error lines of") && cause < tail, "the error line comes first: {log}");
    assert!(log.contains("[80/80] Building object x80.o"), "then the tail: {log}");
    assert_eq!(log.matches("NOT RUN AllReduce::1K::").count(), 3, "{log}");
    assert_eq!(
        log.matches("not run: the shared build failed, so no trial runs (the error is shown once, above").count(),
        3,
        "{log}"
    );
    assert!(log.contains("nothing to report: the last run's build failed"), "{log}");
    assert!(
        log.contains(
            "ccl-coverage: 0 of 3 trials ran: 0 passed, 0 failed, 0 timed out; 3 not run: the shared build failed or could not be recorded"
        ),
        "{log}"
    );
    assert!(!log.contains("poison"), "{log}");
}

/// A real CMake build whose link fails under 30 deprecation warnings: the
/// excerpt starts with the linker's lines, the one that names the fix
/// (`DSO missing from command line`) among them (issue #49, item 4).
#[test]
fn a_failed_link_s_excerpt_starts_with_the_linker_s_errors() {
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "a"}]));
        v["library"]["steps"] = json!([
            {"name": "configure link-errors", "argv": ["cmake", "-S", "{library_src}/link-errors", "-B", "{build_dir}/link-errors", "-DCMAKE_C_COMPILER={cc}"]},
            {"name": "build link-errors", "argv": ["cmake", "--build", "{build_dir}/link-errors"]}
        ]);
    });
    let out = harness(&s, "run", &[]);
    let log = text(&out);
    assert!(!out.status.success());
    assert!(log.contains("build step \"build link-errors\" failed"), "{log}");
    let excerpt = &log[log.find("error lines of").expect(&log)..log.find("last lines of").expect(&log)];
    let lines: Vec<&str> = excerpt.lines().skip(1).collect();
    assert!(lines[0].contains("undefined reference to symbol 'base_value'"), "{excerpt}");
    assert!(lines[1].contains("libbase.so: error adding symbols: DSO missing from command line"), "{excerpt}");
    assert!(lines[2].contains("error: linker command failed"), "{excerpt}");
    assert!(!excerpt.contains("deprecated"), "{excerpt}");
}

/// A trial's wait for rank slots is not its time: `[n/M]`, `run.json` and
/// `junit.xml` (`time` is the trial's own; the wait a property) keep them
/// apart (issue #41, item 7).
#[test]
fn the_wait_for_rank_slots_is_recorded_apart_from_the_trial_s_time() {
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                {"name": "a", "ranks": 4, "env": {"CCL_FAULT": "hang", "CCL_FAULT_RANK": "0"}},
                {"name": "b", "ranks": 4, "env": {"CCL_FAULT": "hang", "CCL_FAULT_RANK": "0"}}
            ]),
        );
        v["capacity"] = json!(4);
        v["timeouts"] = json!({"default": 3, "grace": 1});
    });
    let out = harness(&s, "collectives", &["--test-threads", "2"]);
    let log = text(&out);
    let run: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("results/run.json")).unwrap()).unwrap();
    let trials = run["trials"].as_array().unwrap();
    let waits: Vec<f64> = trials.iter().map(|t| t["slot_wait_s"].as_f64().unwrap()).collect();
    let (late, first) = if waits[0] > waits[1] { (&trials[0], &trials[1]) } else { (&trials[1], &trials[0]) };
    let (wait, own) = (late["slot_wait_s"].as_f64().unwrap(), late["duration_s"].as_f64().unwrap());
    assert!(wait >= 2.5, "the second trial waited for the first's 3 s: {run}");
    assert!((2.5..5.5).contains(&own), "its own time is its timeout, not the wait too: {run}");
    assert!(first["slot_wait_s"].as_f64().unwrap() < 1.0, "{run}");
    assert!(
        log.lines().any(|l| l.contains(late["trial"].as_str().unwrap())
            && l.contains("waited")
            && l.contains("for rank slots")),
        "{log}"
    );
    let line = log.lines().find(|l| l.contains("[2/2]")).unwrap();
    let shown: f64 = line.split('(').nth(1).unwrap().split('s').next().unwrap().parse().unwrap();
    assert!(shown < 5.5, "[n/M] shows the trial's own time: {line}");
    // JUnit: each case's time is its own, its wait a property; it parses as XML.
    let xml = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let (mut case, mut times, mut props) = (String::new(), BTreeMap::new(), BTreeMap::new());
    loop {
        match reader.read_event().unwrap() {
            quick_xml::events::Event::Start(e) | quick_xml::events::Event::Empty(e) => {
                let attr = |key: &str| {
                    e.attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == key)
                        .map(|a| a.normalized_value(quick_xml::XmlVersion::Implicit1_0).unwrap().into_owned())
                };
                match e.name().as_ref() {
                    "testcase" => {
                        case = attr("name").unwrap();
                        times.insert(case.clone(), attr("time").unwrap().parse::<f64>().unwrap());
                    }
                    "property" if attr("name").as_deref() == Some("slot_wait_s") => {
                        props.insert(case.clone(), attr("value").unwrap().parse::<f64>().unwrap());
                    }
                    _ => {}
                }
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    let name = late["trial"].as_str().unwrap();
    assert!((times[name] - own).abs() < 0.01, "time= is the trial's own {own}: {xml}");
    assert!((props[name] - wait).abs() < 0.01, "the wait is a property: {xml}");
}

#[test]
fn trials_never_exceed_the_rank_capacity() {
    let s = setup(|v| {
        only(
            v,
            "SendRecv",
            &["1K", "256K"],
            json!([
                {"name": "four", "ranks": 4}, {"name": "three", "ranks": 3}, {"name": "two", "ranks": 2}, {"name": "mpi", "launcher": "mpi", "ranks": 2}
            ]),
        );
    });
    let out = harness(&s, "collectives", &["--test-threads", "8"]);
    assert!(out.status.success(), "{}", text(&out));
    let run: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("results/run.json")).unwrap()).unwrap();
    let trials = run["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 8);
    let span = |t: &Value| {
        let start = t["started_unix_ms"].as_u64().unwrap();
        (start, start + (t["duration_s"].as_f64().unwrap() * 1000.0) as u64, t["ranks"].as_u64().unwrap())
    };
    for t in trials {
        let (start, _, _) = span(t);
        let busy: u64 =
            trials.iter().map(span).filter(|&(s0, e0, _)| s0 <= start && start < e0).map(|(_, _, r)| r).sum();
        assert!(busy <= 4, "{busy} ranks running at {start} ms: {run}");
    }
}

#[test]
fn an_existing_instrumented_build_is_used_and_identified_by_its_objects() {
    // A build made by the harness stands in for one the user made.
    let first = setup(|v| only(v, "Reduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    assert!(harness(&first, "collectives", &[]).status.success());
    let manifest: Value = serde_json::from_str(&fs::read_to_string(first.ws.join("build.json")).unwrap()).unwrap();
    let build_dir = PathBuf::from(manifest["build_dir"].as_str().unwrap());

    let copy = tempfile::tempdir().unwrap();
    for rel in ["ccl/libccl.so", "ccl-tuner/libccl-tuner.so"] {
        fs::create_dir_all(copy.path().join(rel).parent().unwrap()).unwrap();
        fs::copy(build_dir.join(rel), copy.path().join(rel)).unwrap();
    }
    let mut s = setup(|v| only(v, "Reduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    s.env.push(("CCL_COV_BUILD_DIR".into(), copy.path().display().to_string()));
    s.env.push(("CCL_COV_TESTS_DIR".into(), manifest["bin_dir"].as_str().unwrap().into()));
    let out = harness(&s, "collectives", &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(&format!("using the existing build {}", copy.path().display())), "{}", text(&out));
    let used: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("build.json")).unwrap()).unwrap();
    assert_eq!(used["existing_build"], true);
    assert_ne!(used["build_id"], manifest["build_id"]);
    assert!(s.ws.join("profiles/Reduce.1K.ring.profdata").is_file());

    // Rebuilt in place: a new identity, so the old profiles are retired.
    let mut lib = fs::OpenOptions::new().append(true).open(copy.path().join("ccl/libccl.so")).unwrap();
    std::io::Write::write_all(&mut lib, b"rebuilt").unwrap();
    let mut dry_setup =
        Setup { dir: tempfile::tempdir().unwrap(), config: s.config.clone(), ws: s.ws.clone(), env: s.env.clone() };
    dry_setup.env.push(("CCL_COV_DRY_RUN".into(), "1".into()));
    let dry = String::from_utf8(harness(&dry_setup, "collectives", &[]).stdout).unwrap();
    assert!(!dry.contains(used["build_id"].as_str().unwrap()), "same id after the library changed:\n{dry}");
    assert!(dry.contains("the existing build"), "{dry}");

    // An uninstrumented build is refused with a way out.
    fs::copy("/bin/true", copy.path().join("ccl/libccl.so")).unwrap();
    let out = harness(&s, "collectives", &["--exact", "Reduce::1K::ring"]);
    let log = text(&out);
    assert!(!out.status.success());
    assert!(log.contains("carries no coverage mapping: it was built without coverage instrumentation"), "{log}");
    assert!(log.contains("unset CCL_COV_BUILD_DIR"), "{log}");
}

/// The fixture's `CMakeLists` add -Wall -Wextra (as warnings, not errors); its
/// build logs, which hold the compiler's output, must show none.
#[test]
fn the_fixture_builds_without_a_compiler_warning() {
    let s = setup(|v| only(v, "Reduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    let out = harness(&s, "collectives", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let manifest: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("build.json")).unwrap()).unwrap();
    let logs = PathBuf::from(manifest["cache_dir"].as_str().unwrap()).join("logs");
    let mut steps = 0;
    let mut warnings = Vec::new();
    for entry in fs::read_dir(&logs).unwrap().flatten() {
        steps += 1;
        let log = fs::read_to_string(entry.path()).unwrap();
        warnings.extend(log.lines().filter(|l| l.contains("warning:")).map(String::from));
    }
    assert_eq!(steps, 6, "one log per build step in {}", logs.display());
    assert!(warnings.is_empty(), "{} warnings:\n{}", warnings.len(), warnings.join("\n"));
}

fn report_files_exist(ws: &Path) {
    for file in [
        "report/html/index.html",
        "report/summary.json",
        "report/summary.txt",
        "report/coverage.lcov",
        "report/coverage.json",
        "report/cobertura.xml",
        "report/summary.md",
        "report/meta.json",
    ] {
        assert!(ws.join(file).is_file(), "{file} missing");
    }
}

#[test]
fn bad_profiles_are_quarantined_and_the_rest_is_still_reported() {
    // A rank that dies while writing its profile, merged as the trial ends.
    let mut s = setup(|v| {
        only(
            v,
            "Broadcast",
            &["1K"],
            json!([
                {"name": "good", "env": {"CCL_ALGO": "ring"}},
                {"name": "truncated", "env": {"CCL_FAULT": "truncate-profile", "CCL_FAULT_RANK": "0"}}
            ]),
        );
    });
    let out = harness(&s, "collectives", &[]);
    assert!(!out.status.success(), "a trial that lost a profile fails: {}", text(&out));
    assert_eq!(result(&s, "Broadcast.1K.good")["status"], "PASSED");
    let truncated = result(&s, "Broadcast.1K.truncated");
    assert_eq!(truncated["status"], "FAILED", "{truncated}");
    let reason = truncated["reason"].as_str().unwrap();
    assert!(reason.starts_with("coverage lost: 1 of its raw profiles were unreadable"), "{reason}");
    let quarantined = truncated["merge"]["quarantined"].as_array().unwrap();
    assert_eq!(quarantined.len(), 1, "{truncated}");
    let moved = PathBuf::from(quarantined[0]["file"].as_str().unwrap());
    assert!(moved.starts_with(s.ws.join("quarantine/Broadcast.1K.truncated")) && moved.is_file(), "{moved:?}");
    // Merged trials keep no raw profiles; their indexed profile remains.
    assert!(s.ws.join("profiles/Broadcast.1K.good.profdata").is_file());
    assert_eq!(fs::read_dir(s.ws.join("profiles/Broadcast.1K.good")).unwrap().count(), 0);

    // And a garbled raw profile found only at report time (no incremental merge).
    s.env.push(("CCL_COV_INCREMENTAL_MERGE".into(), "off".into()));
    let rerun = harness(&s, "collectives", &["--exact", "Broadcast::1K::good"]);
    assert!(rerun.status.success(), "{}", text(&rerun));
    fs::write(s.ws.join("profiles/Broadcast.1K.good/vm-999-garbage.profraw"), b"\x81rforpl\xffnot a profile").unwrap();
    let report = harness(&s, "report", &[]);
    let log = text(&report);
    assert!(!report.status.success(), "{log}");
    assert!(
        log.contains("report::profiles") && log.contains("profiles were unreadable or altered and moved to quarantine"),
        "{log}"
    );
    assert!(log.contains("vm-999-garbage.profraw"), "the garbled file is named: {log}");
    assert!(log.contains(moved.file_name().unwrap().to_str().unwrap()), "the truncated file is named: {log}");
    assert!(s.ws.join("quarantine/Broadcast.1K.good/vm-999-garbage.profraw").is_file());
    report_files_exist(&s.ws);
    for step in ["report::merge", "report::html", "report::lcov", "report::summary_json"] {
        assert!(
            log.lines().any(|l| l.starts_with(&format!("test {step} ")) && l.ends_with("ok")),
            "{step} still passes: {log}"
        );
    }
}

#[test]
fn a_trial_without_a_profile_fails_and_timeouts_give_no_coverage() {
    let mut s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                {"name": "good"},
                {"name": "noflush", "env": {"CCL_FAULT": "exit-without-flush", "CCL_FAULT_RANK": "0", "CCL_TUNER_PLUGIN": "none"}},
                {"name": "hang", "env": {"CCL_FAULT": "hang", "CCL_FAULT_RANK": "1"}}
            ]),
        );
        v["timeouts"] = json!({"default": 3, "grace": 1});
    });
    s.env.push(("CCL_COV_HEARTBEAT_S".into(), "1".into()));
    let out = harness(&s, "collectives", &["--test-threads", "1"]);
    let log = text(&out);
    assert!(log.contains("AllReduce::1K::hang still running after 1s (timeout 3s)"), "heartbeat: {log}");
    let noflush = result(&s, "AllReduce.1K.noflush");
    assert_eq!(noflush["status"], "FAILED", "coverage loss is a failure: {noflush}");
    assert!(
        noflush["reason"]
            .as_str()
            .unwrap()
            .starts_with("coverage lost: the trial passed but wrote no coverage profile")
    );
    assert_eq!(noflush["no_profile"], true, "{noflush}");
    assert!(log.contains("AllReduce::1K::noflush ... FAILED"), "{log}");
    let report = harness(&s, "report", &[]);
    let log = text(&report);
    assert!(!report.status.success());
    assert!(log.contains("exited 0 but left no profile") && log.contains("AllReduce::1K::noflush"), "{log}");
    assert!(log.contains("no coverage from this trial: AllReduce::1K::hang (TIMEOUT after 3s"), "{log}");
    let meta: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["exited_0_without_profile"], json!(["AllReduce::1K::noflush"]));
    report_files_exist(&s.ws);
}

#[test]
fn results_exist_after_every_trial_and_reports_say_where_they_came_from() {
    let mut s = setup(|v| {
        only(v, "SendRecv", &["1K"], json!([{"name": "a"}, {"name": "b", "env": {"CCL_FAULT": "hang"}}]));
        v["timeouts"] = json!({"default": 4, "grace": 1});
    });
    let step_summary = s.dir.path().join("step-summary.md");
    fs::write(&step_summary, "earlier step\n").unwrap();
    s.env.push(("GITHUB_STEP_SUMMARY".into(), step_summary.display().to_string()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    child
        .args(["collectives", "--test-threads", "1"])
        .env("CCL_COV_CONFIG", &s.config)
        .env("CCL_COV_WORKSPACE", &s.ws)
        .env("CARGO_MANIFEST_DIR", root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = child.spawn().unwrap();
    // While the hung trial runs, run.json already holds the finished one.
    let run_json = s.ws.join("results/run.json");
    let mut seen = None;
    // Generous: on a fresh checkout the fixture is built first.
    for _ in 0..12_000 {
        if let Ok(text) = fs::read_to_string(&run_json) {
            seen = Some(text);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let running = child.try_wait().unwrap().is_none();
    let seen: Value = serde_json::from_str(&seen.expect("run.json written during the run")).unwrap();
    assert!(running, "the harness was still running when run.json appeared");
    assert_eq!(seen["trials"][0]["trial"], "SendRecv::1K::a");
    let ended = support::wait_within(&mut child, LIMIT);
    assert!(ended.code() != Some(0));
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("TIMEOUT"), "{junit}");

    let report = harness(&s, "report", &[]);
    assert!(report.status.success(), "{}", text(&report));
    let build: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("build.json")).unwrap()).unwrap();
    let meta: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["build_id"], build["build_id"]);
    let run_id = result(&s, "SendRecv.1K.a")["run_id"].clone();
    assert!(meta["trials"].as_array().unwrap().iter().any(|t| t["run_id"] == run_id), "{meta}");
    let md = fs::read_to_string(&step_summary).unwrap();
    assert!(md.starts_with("earlier step\n## Coverage: "), "appended, not replaced: {md}");
    assert!(md.contains(build["build_id"].as_str().unwrap()) && md.contains(run_id.as_str().unwrap()), "{md}");
    let html = fs::read_to_string(s.ws.join("report/html/index.html")).unwrap();
    assert!(html.contains(&format!("(build {})", build["build_id"].as_str().unwrap())), "HTML title names the build");
}

#[test]
fn fail_under_bars_fail_the_report_and_keep_raw_keeps_raw_profiles() {
    let mut s = setup(|v| only(v, "AllToAll", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    s.env.push(("CCL_COV_KEEP_RAW".into(), "1".into()));
    assert!(harness(&s, "collectives", &[]).status.success());
    let raw = fs::read_dir(s.ws.join("profiles/AllToAll.1K.ring")).unwrap().count();
    assert!(raw > 0, "CCL_COV_KEEP_RAW keeps the raw profiles");
    assert!(s.ws.join("profiles/AllToAll.1K.ring.profdata").is_file());
    s.env.push(("CCL_COV_FAIL_UNDER_LINES".into(), "99.5".into()));
    s.env.push(("CCL_COV_FAIL_UNDER_FUNCTIONS".into(), "1".into()));
    let out = harness(&s, "report", &[]);
    let log = text(&out);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("coverage is under the bar: lines ") && log.contains("is under CCL_COV_FAIL_UNDER_LINES=99.5"),
        "{log}"
    );
    assert!(!log.contains("is under CCL_COV_FAIL_UNDER_FUNCTIONS"), "{log}");
    let list = fs::read_to_string(s.ws.join("report/profiles.list")).unwrap();
    assert_eq!(
        list.trim(),
        s.ws.join("profiles/AllToAll.1K.ring.profdata").display().to_string(),
        "the report merges the trial's indexed profile only"
    );
}

/// On a machine without cargo (the GPU host) the binaries find the project
/// from the current directory, not from paths compiled in here.
#[test]
fn without_cargo_the_project_root_is_the_current_directory() {
    let elsewhere = tempfile::tempdir().unwrap();
    let s = setup(|v| v["name"] = json!("elsewhere"));
    fs::create_dir_all(elsewhere.path().join("configs")).unwrap();
    fs::copy(&s.config, elsewhere.path().join("configs/local.json")).unwrap();
    let mut out = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    out.args(["collectives", "--exact", "AllReduce::1K::ring"])
        .env_remove("CARGO_MANIFEST_DIR")
        .env_remove("CCL_COV_CONFIG")
        .env_remove("CCL_COV_WORKSPACE")
        .env_remove("CARGO_TARGET_DIR")
        .env("CCL_COV_DRY_RUN", "1")
        .current_dir(elsewhere.path());
    let out = support::output_within(out, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    let here = elsewhere.path().canonicalize().unwrap();
    let shown = |p: &str| {
        stdout.contains(p)
            || stdout.contains(&p.replace(&here.display().to_string(), &elsewhere.path().display().to_string()))
    };
    assert!(shown(&format!("config: elsewhere ({}/configs/local.json)", here.display())), "{stdout}");
    assert!(shown(&format!("workspace: {}/target/ccl-coverage/elsewhere", here.display())), "{stdout}");
}

#[test]
fn coverage_off_builds_and_runs_without_instrumentation() {
    let mut s = setup(|v| only(v, "Broadcast", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    s.env.push(("CCL_COV_COVERAGE".into(), "off".into()));
    let out = harness(&s, "collectives", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let build: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("build.json")).unwrap()).unwrap();
    assert_eq!(build["coverage"], false);
    assert!(build["coverage_flags"].as_array().unwrap().is_empty());
    assert!(build["objects"].as_array().unwrap().iter().all(|o| o["instrumentation"]["counters"] == false), "{build}");
    let r = result(&s, "Broadcast.1K.ring");
    assert!(r["env"].as_array().unwrap().iter().all(|kv| kv[0] != "LLVM_PROFILE_FILE"), "{r}");
    assert_eq!((r["profiles"].as_u64(), r["no_profile"].as_bool()), (Some(0), Some(false)));
    let report = harness(&s, "report", &[]);
    let log = text(&report);
    assert!(report.status.success(), "{log}");
    assert!(log.contains("was made without coverage (CCL_COV_COVERAGE=off): there is nothing to report"), "{log}");
}

/// Inline code of one name compiled otherwise into two more instrumented
/// objects (as a header's inline code in a library and in instrumented test
/// programs): one is loaded by one trial only, the other by none. llvm-cov
/// warns on the merged profile that it left a function out: the warning is
/// said, counted and explained on screen, in `meta.json` and `summary.md`;
/// and each trial's figures are counted over the merged report's lines,
/// functions and branches, whatever its own profile holds (issue #41, item 3).
#[test]
fn llvm_cov_warnings_are_said_and_each_trial_is_counted_over_the_merged_report() {
    let dir = tempfile::tempdir().unwrap();
    let source = |name: &str, body: &str| {
        let path = dir.path().join(name);
        fs::write(
            &path,
            format!(
                "#include <cstdint>\n// The fixture's cclBf16 (ccl_bfloat16.h), its conversion compiled otherwise.\n\
                 struct cclBf16 {{\n  uint16_t bits;\n  operator float() const {{ {body} }}\n}};\n\
                 extern \"C\" float ccl_cov_{0}(uint16_t b) {{ return cclBf16{{b}}; }}\n\
                 // Run as it is loaded: the trial that loads it covers lines no other trial does.\n\
                 __attribute__((constructor)) static void at_load() {{ ccl_cov_{0}(3); }}\n",
                name.trim_end_matches(".cc")
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let (loaded, never) = (
        source("loaded.cc", "return bits > 1 ? 2.0f : 1.0f;"),
        source("never.cc", "if (bits == 7) return 7.0f;\n    return bits > 3 ? 4.0f : 0.5f;"),
    );
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([{"name": "plain"}, {"name": "preload", "env": {"LD_PRELOAD": "{build_dir}/mismatch/libloaded.so"}}]),
        );
        let compile = |out: &str, src: &str| {
            // Hidden: the library's own conversion must not be interposed by this one.
            format!(
                "{{cxx}} {{coverage_flags}} {{coverage_link_flags}} -fvisibility=hidden -shared -fPIC -o {{build_dir}}/mismatch/{out} {src}"
            )
        };
        let script = format!(
            "mkdir -p {{build_dir}}/mismatch && {} && {}",
            compile("libloaded.so", &loaded),
            compile("libnever.so", &never)
        );
        v["library"]["steps"].as_array_mut().unwrap().push(json!({"name": "mismatch", "argv": ["sh", "-c", script]}));
        let objects = v["library"]["objects"].as_array_mut().unwrap();
        objects.push(json!("{build_dir}/mismatch/libloaded.so"));
        objects.push(json!("{build_dir}/mismatch/libnever.so"));
    });
    let out = harness(&s, "run", &[]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    // Each trial over the merged report's lines, functions and branches.
    let summary: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/summary.json")).unwrap()).unwrap();
    let totals = &summary["data"][0]["totals"];
    let trials: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/trials.json")).unwrap()).unwrap();
    assert_eq!(trials.as_array().unwrap().len(), 2, "{trials}");
    for t in trials.as_array().unwrap() {
        for metric in ["lines", "functions", "branches"] {
            let of = t[metric].as_str().unwrap().split_once('/').unwrap().1;
            assert_eq!(of, totals[metric]["count"].to_string(), "{metric} of {t}: {totals}");
        }
    }
    let said = "llvm-cov warns: 1 functions have mismatched data: 1 functions of the instrumented objects have no matching profile data";
    assert_eq!(log.matches(said).count(), 1, "{log}");
    let meta: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap();
    let warnings = meta["llvm_cov_warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{meta}");
    assert_eq!(warnings[0]["warning"], "1 functions have mismatched data", "{meta}");
    assert_eq!(warnings[0]["functions"], 1, "{meta}");
    assert!(warnings[0]["explanation"].as_str().unwrap().contains("inline code of a header"), "{meta}");
    let md = fs::read_to_string(s.ws.join("report/summary.md")).unwrap();
    assert!(
        md.contains("**llvm-cov warned 1 times**") && md.contains("- `1 functions have mismatched data`: 1 functions"),
        "{md}"
    );
    let count = totals["lines"]["count"].to_string();
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| `AllReduce::1K::")).collect();
    assert!(!rows.is_empty() && rows.iter().all(|r| r.contains(&format!("/{count} |"))), "{md}");
}
