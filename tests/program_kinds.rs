//! A config's gtest and ctest programs and sized programs, end to end with
//! the real googletest, `ctest` and `CMake` on tests/fixtures/cmake-ring: one
//! CMake run builds the library and its tests (no `tests` section). Each
//! trial is judged by the runner's own report, a filter that runs nothing
//! fails and says which names exist, and every case the runner reports is
//! in the trial's record and in `junit.xml`.

mod support;

use serde_json::{Value, json};
use std::time::Duration;
use support::{Setup, harness, result, root};

const LIMIT: Duration = Duration::from_secs(480);

fn setup(programs: Value) -> Setup {
    support::setup(|v| {
        let fixture = root().join("tests/fixtures/cmake-ring").display().to_string();
        v["library"] = json!({
            "source_dir": fixture,
            "steps": [
                {"name": "configure", "argv": ["cmake", "-S", "{library_src}", "-B", "{build_dir}",
                    "-DCMAKE_C_COMPILER={cc}", "-DCMAKE_CXX_COMPILER={cxx}", "-DRING_COVERAGE_FLAGS={coverage_flags}"]},
                {"name": "build", "argv": ["cmake", "--build", "{build_dir}", "-j", "{jobs}"]}
            ],
            "objects": ["{build_dir}/libring.so"]
        });
        v.as_object_mut().unwrap().remove("tests");
        for key in ["collectives", "sizes", "variants", "args"] {
            v.as_object_mut().unwrap().remove(key);
        }
        v["launch"] = json!({"launcher": "threads", "ranks": 1});
        v["programs"] = programs;
    })
}

fn cases(record: &Value) -> Vec<(String, String)> {
    record["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("no cases: {record}"))
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn gtest_ctest_and_sized_programs_are_judged_by_their_runners() {
    let s = setup(json!([
        {"name": "push", "kind": "gtest", "binary": "ring_test", "filter": "RingTest.*"},
        {"name": "fill", "kind": "gtest", "binary": "ring_test", "filter": "RingFill*"},
        {"name": "suite", "kind": "ctest", "filter": "^ring_"},
        {"name": "none", "kind": "ctest", "filter": "^nope"},
        {"name": "bench", "binary": "ring_bench", "args": ["{bytes}"], "sizes": ["1K", "64K"]}
    ]));
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "two trials must fail:\n{text}");
    assert!(text.contains("6 trials ran: 4 passed, 2 failed"), "{text}");

    let push = result(&s, "push");
    assert_eq!(push["status"], "PASSED", "{push}");
    assert_eq!(push["kind"], "gtest");
    assert_eq!(
        cases(&push),
        [
            ("RingTest.PushThenPop".into(), "PASSED".into()),
            ("RingTest.PopEmpty".into(), "PASSED".into()),
            ("RingTest.Sum".into(), "PASSED".into())
        ]
    );

    // The PASS line counts the tests the runner ran, as the binary's own
    // listing and CTest's own JSON count them (issue #49, item 3).
    let binary = push["argv"][0].as_str().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let listing = std::process::Command::new(binary)
        .args(["--gtest_list_tests", "--gtest_filter=RingTest.*"])
        .env("LLVM_PROFILE_FILE", scratch.path().join("list.profraw"))
        .current_dir(scratch.path())
        .output()
        .unwrap();
    let listed = String::from_utf8(listing.stdout).unwrap().lines().filter(|l| l.starts_with("  ")).count();
    let shown = |trial: &str| {
        let line = text.lines().find(|l| l.contains(&format!("PASS    {trial} ("))).unwrap_or_else(|| panic!("{text}"));
        line.split(", ").nth(1).map(str::to_string).unwrap_or_default()
    };
    assert!(listed > 1 && shown("push").starts_with(&format!("{listed} tests")), "{listed}: {text}");
    let ctest = std::process::Command::new("ctest")
        .args(["--show-only=json-v1", "-R", "^ring_"])
        .current_dir(std::path::Path::new(binary).parent().unwrap())
        .output()
        .unwrap();
    let ctest: Value = serde_json::from_slice(&ctest.stdout).unwrap();
    let registered = ctest["tests"].as_array().unwrap().len();
    assert!(shown("suite").starts_with(&format!("{registered} tests")), "{text}");
    assert!(
        !text.lines().any(|l| l.contains("PASS    bench::1K (") && l.contains(" tests")),
        "a plain program has no count: {text}"
    );

    // The filter a person writes first matches none of the parameterised names.
    let fill = result(&s, "fill");
    assert_eq!(fill["status"], "FAILED", "{fill}");
    let reason = fill["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the filter `RingFill*` matched no test (gtest ran nothing); `*RingFill*` matches 2 of ring_test's tests (Capacities/RingFill.Wraps/0, Capacities/RingFill.Wraps/1)"),
        "{reason}"
    );

    let suite = result(&s, "suite");
    assert_eq!(suite["status"], "PASSED", "{suite}");
    assert_eq!(suite["kind"], "ctest");
    assert_eq!(cases(&suite), [("ring_push".into(), "PASSED".into()), ("ring_fill".into(), "PASSED".into())]);
    let none = result(&s, "none");
    assert_eq!(none["status"], "FAILED");
    assert!(none["reason"].as_str().unwrap().starts_with("the filter `^nope` (ctest -R) matched no test"), "{none}");

    // One trial per size, named as a collective's, each with its own bytes.
    for (slug, ints) in [("bench.1K", "256 ints"), ("bench.64K", "16384 ints")] {
        let r = result(&s, slug);
        assert_eq!(r["status"], "PASSED", "{r}");
        assert_eq!(r["trial"], slug.replace('.', "::"));
        let log = std::fs::read_to_string(s.ws.join("logs").join(format!("{slug}.log"))).unwrap();
        assert!(log.contains(ints), "{slug}: {log}");
    }

    // Every case is in junit.xml, under its trial.
    let junit = std::fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    for case in ["push::RingTest.PushThenPop", "push::RingTest.PopEmpty", "suite::ring_push", "suite::ring_fill"] {
        assert!(junit.contains(&format!("name=\"{case}\"")), "{case} not in junit.xml:\n{junit}");
    }
    // The listing's profile stayed in the trial's own folder.
    assert!(!root().join("tests/fixtures/cmake-ring/default.profraw").exists());
}

/// The dry run shows each trial's kind, filter and size, in text and JSON.
#[test]
fn the_dry_run_shows_kinds_filters_and_sizes() {
    let mut s = setup(json!([
        {"name": "push", "kind": "gtest", "binary": "ring_test", "filter": "RingTest.*"},
        {"name": "suite", "kind": "ctest", "filter": "^ring_"},
        {"name": "bench", "binary": "ring_bench", "args": ["{size}", "{bytes}"], "sizes": ["1K"]}
    ]));
    s.env.push(("CCL_COV_DRY_RUN".into(), "json".into()));
    let ran = harness(&s, "run", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let doc: Value = serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{e}: {}", ran.stdout));
    let trials = doc["trials"].as_array().unwrap();
    let push = &trials[0];
    assert_eq!((push["kind"].as_str(), push["filter"].as_str()), (Some("gtest"), Some("RingTest.*")));
    let argv: Vec<&str> = push["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(argv[1], "--gtest_filter=RingTest.*");
    assert!(argv[2].starts_with("--gtest_output=xml:") && argv[2].ends_with("/cases/push/"), "{argv:?}");
    let suite: Vec<&str> = trials[1]["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!((suite[0], suite[1]), ("ctest", "--test-dir"), "{suite:?}");
    assert!(suite[2].starts_with('/'), "the tests' folder, absolute: {suite:?}");
    assert_eq!(&suite[3..5], ["-R", "^ring_"]);
    assert!(suite.contains(&"--no-tests=error"), "{suite:?}");
    let bench = &trials[2];
    assert_eq!((bench["name"].as_str(), bench["size"].as_str()), (Some("bench::1K"), Some("1K")));
    let argv: Vec<&str> = bench["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(&argv[1..], ["1K", "1024"]);

    s.env.pop();
    s.env.push(("CCL_COV_DRY_RUN".into(), "1".into()));
    let text = harness(&s, "run", &[], LIMIT).text();
    assert!(text.contains("trial push (gtest, 1 ranks"), "{text}");
    assert!(text.contains("trial suite (ctest, 1 ranks"), "{text}");
    assert!(text.contains("trial bench::1K (1 ranks"), "{text}");
}

/// A gtest binary whose `--gtest_list_tests` prints its names and leaves a
/// grandchild holding its output open (issue #48, item 3): the listing runs
/// under a supervisor, which kills what its main process left, so the hint
/// comes in seconds (the listing waited for end of file, 6½ min) and the
/// grandchild is gone.
#[test]
fn a_gtest_listing_held_open_by_a_grandchild_ends_in_seconds() {
    let s = setup(json!([{"name": "fill", "kind": "gtest", "binary": "ring_test", "filter": "RingFil",
                          "env": {"REAL_RING_TEST": "{bin_dir}/ring_test"}}]));
    let wrapper = s.dir.path().join("ring_wrapped");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\nif [ \"$1\" = --gtest_list_tests ]; then\n  printf 'Capacities/RingFill.\\n  Wraps/0\\n'\n  sleep 613 &\n  exit 0\nfi\nexec \"$REAL_RING_TEST\" \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&s.config).unwrap()).unwrap();
    config["programs"][0]["binary"] = json!(wrapper.display().to_string());
    std::fs::write(&s.config, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    let fill = result(&s, "fill");
    let reason = fill["reason"].as_str().unwrap();
    assert!(
        reason.contains("`*RingFil*` matches 1 of ") && reason.contains("(Capacities/RingFill.Wraps/0)"),
        "{reason}"
    );
    assert!(ran.took < Duration::from_secs(45), "{:?}: {text}", ran.took);
    assert!(support::processes_mentioning("sleep 613").is_empty(), "the grandchild is left");
}
