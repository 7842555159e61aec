//! The fixture's upstream-format config (`configs/local_test_runner.json`,
//! RCCL `test_runner`'s format) through the real harness binary: gtest, perf
//! and pytest trials with their verdicts and cases, tests ignored with the
//! reason, a filter matching nothing, a crash naming its test, pytest
//! collecting nothing, the diagnostic rerun, and a coverage report. The
//! config is copied with a suite of expected failures added and the perf
//! suites trimmed; the overlay is copied with absolute sources (so the build
//! is the one the main suite makes) and snapshots off.

mod support;

use serde_json::{Value, json};
use std::fs;
use std::time::Duration;
use support::{Setup, harness, result, root};

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let read = |p: &str| -> Value { serde_json::from_str(&fs::read_to_string(root().join(p)).unwrap()).unwrap() };
    let mut config = read("configs/local_test_runner.json");
    let perf_tests = config["test_configurations"]["perf"]["tests"].as_array().unwrap()[..1].to_vec();
    config["test_configurations"]["perf"]["tests"] = Value::Array(perf_tests);
    config["test_configurations"]["failures"] = json!({
        "extends": "base", "num_ranks": 1, "binary": "ccl-UnitTests",
        "tests": [
            {"name": "NoMatch", "test_filter": "Nothing.*"},
            {"name": "Crash", "binary": "ccl-UnitTestsMPI", "test_filter": "MPI.CrashesOnRequest",
             "env_variables": {"CCL_TEST_CRASH": "1"}},
            {"name": "NothingCollected", "is_pytest": true, "test_dir": "ccl-pytest",
             "python_bin": "/usr/bin/python3", "test_filter": "no_such_test"}
        ]
    });
    let suites = config["test_suites"].as_array_mut().unwrap();
    suites.retain(|s| s["name"] != "Perf direct" && s["name"] != "Perf MPI");
    suites.push(json!({"name": "Failures", "config": "failures"}));
    let mut overlay = read("configs/local_test_runner.overlay.json");
    overlay["library"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    overlay["tests"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    overlay["report"]["snapshot"] = json!(false);
    let config_path = dir.path().join("runner.json");
    let overlay_path = dir.path().join("ours.json");
    fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    fs::write(&overlay_path, serde_json::to_string_pretty(&overlay).unwrap()).unwrap();
    let ws = dir.path().join("ws");
    let env = vec![
        ("CCL_COV_OVERLAY".to_string(), overlay_path.display().to_string()),
        ("CCL_COV_RERUN_FAILED".to_string(), "1".to_string()),
    ];
    Setup { dir, config: config_path, ws, env }
}

fn cases(r: &Value) -> Vec<(String, String)> {
    r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn upstream_config_runs_gtest_perf_and_pytest_trials_with_coverage() {
    let s = setup();
    let ran = harness(&s, "collectives", &[], Duration::from_secs(900));
    let log = ran.text();
    assert!(!ran.success, "the Failures suite fails:\n{log}");
    for line in [
        "test Unit Tests::ArgCheck ... ok",
        "test MPI Unit Tests::TwoRanks ... ok",
        "test MPI Unit Tests::OneRank ... ok",
        "test Perf ring::AllReduce ... ok",
        "test Python::ctypes ... ok",
        "test MPI Unit Tests::EightRanks ... ignored",
        "test Failures::NoMatch ... FAILED",
    ] {
        let squeezed: String = log.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(squeezed.contains(line), "no `{line}` in:\n{log}");
    }
    // Ignored with the reason.
    assert!(log.contains("MPI Unit Tests::EightRanks is ignored: needs 8 GPUs per node, the machine has 4"), "{log}");
    assert!(log.contains("MPI Unit Tests::TwoNodes is ignored: needs 2 nodes, 1 available"), "{log}");
    assert!(log.contains("is ignored: suite `Perf (disabled)` is disabled"), "{log}");

    // gtest: every case in the result, the cases in JUnit under the trial.
    let unit = result(&s, "Unit_Tests.ArgCheck");
    assert_eq!((unit["status"].as_str(), unit["kind"].as_str()), (Some("PASSED"), Some("gtest")), "{unit}");
    let unit_cases = cases(&unit);
    assert!(unit_cases.contains(&("ArgCheck.VersionNeedsAPointer".into(), "PASSED".into())), "{unit_cases:?}");
    assert_eq!(unit_cases.len(), 6, "{unit_cases:?}");
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("name=\"Unit Tests::ArgCheck::ArgCheck.ErrorStrings\""), "{junit}");
    assert!(junit.contains("classname=\"Unit Tests::ArgCheck\""), "{junit}");

    // MPI gtest under mpirun with the config's top-level mpi_args (upstream's
    // default replaced); one rank runs without mpirun.
    let mpi = result(&s, "MPI_Unit_Tests.TwoRanks");
    let argv: Vec<&str> = mpi["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(argv[0].ends_with("mpirun") && argv.windows(2).any(|w| w == ["-np", "2"]), "{argv:?}");
    assert!(argv.contains(&"--oversubscribe") && !argv.contains(&"^vader,openib"), "{argv:?}");
    assert!(cases(&mpi).contains(&("MPI.GroupedSendRecvWithPeers".into(), "PASSED".into())), "{mpi}");
    let one = result(&s, "MPI_Unit_Tests.OneRank");
    assert!(one["argv"][0].as_str().unwrap().ends_with("/test/ccl-UnitTestsMPI"), "{one}");
    let ld = one["env"].as_array().unwrap().iter().find(|kv| kv[0] == "LD_LIBRARY_PATH").unwrap()[1].clone();
    assert!(ld.as_str().unwrap().contains("/builds/"), "the build comes first: {ld}");

    // perf: the nccl-tests verdict; pytest: its JUnit cases.
    let perf = result(&s, "Perf_ring.AllReduce");
    assert_eq!((perf["status"].as_str(), perf["kind"].as_str()), (Some("PASSED"), Some("perf")), "{perf}");
    assert!(!perf["perf"]["rows"].as_array().unwrap().is_empty(), "{perf}");
    let py = result(&s, "Python.ctypes");
    assert_eq!(py["kind"], "pytest");
    assert!(cases(&py).contains(&("test_ccl::test_version".into(), "PASSED".into())), "{py}");

    // Failures, each with its reason; the rerun is recorded and changes nothing.
    let no_match = result(&s, "Failures.NoMatch");
    assert!(no_match["reason"].as_str().unwrap().contains("the filter `Nothing.*` matched no test"), "{no_match}");
    let crash = result(&s, "Failures.Crash");
    assert_eq!(crash["status"], "FAILED");
    assert!(crash["reason"].as_str().unwrap().contains("crashed while running MPI.CrashesOnRequest"), "{crash}");
    let rerun = &crash["rerun"];
    assert_eq!(rerun["status"], "FAILED", "{crash}");
    assert!(rerun["env"].as_array().unwrap().iter().any(|kv| kv == &json!(["CCL_DEBUG", "INFO"])), "{rerun}");
    assert!(s.ws.join("logs/Failures.Crash.rerun.log").is_file());
    let nothing = result(&s, "Failures.NothingCollected");
    assert!(nothing["reason"].as_str().unwrap().contains("pytest collected no tests"), "{nothing}");

    // Coverage from every kind of trial is reported.
    let report = harness(&s, "report", &[], Duration::from_secs(600));
    let text = report.text();
    assert!(s.ws.join("report/summary.json").is_file(), "{text}");
    let summary: Value = serde_json::from_str(&fs::read_to_string(s.ws.join("report/summary.json")).unwrap()).unwrap();
    let files = summary.to_string();
    assert!(files.contains("ccl/src/init.cc") && files.contains("ccl-tuner/tuner.cc"), "{text}");
}

/// The shipped upstream-format fixture config, unchanged, end to end: every
/// trial, then the report, whose snapshot step compares the coverage with
/// `snapshots/coverage_summary-local_test_runner.snap` (the gain over the
/// perf-only default suite).
#[test]
fn the_shipped_upstream_format_config_matches_its_coverage_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let s = Setup {
        config: root().join("configs/local_test_runner.json"),
        ws: dir.path().join("ws"),
        dir,
        env: Vec::new(),
    };
    let limit = Duration::from_secs(900);
    let run = harness(&s, "collectives", &[], limit);
    assert!(run.success, "{}", run.text());
    let report = harness(&s, "report", &[], limit);
    let log = report.text();
    assert!(report.success, "{log}");
    assert!(log.lines().any(|l| l.starts_with("test report::snapshot") && l.ends_with("ok")), "{log}");
}
