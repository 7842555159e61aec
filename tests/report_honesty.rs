//! The report says what it checked and what it covers: a step with nothing
//! to check is ignored when listed (nextest shows a step ignored only at run
//! time as PASS), nothing to report is no failure, a trial filter passed on
//! by `cargo coverage` does not remove the report's steps while a plain
//! filter is libtest's, results of earlier runs are counted and said, and a
//! new config's first report writes its snapshot into the workspace, not into
//! the tool's checkout.

mod support;

use serde_json::{Value, json};
use std::fs;
use std::time::Duration;
use support::{files_under, harness, only, result, root, setup};

const LIMIT: Duration = Duration::from_secs(480);

/// The steps that can have nothing to check, as a nextest-style listing
/// of ignored tests shows them.
fn listed_as_ignored(s: &support::Setup) -> Vec<String> {
    let out = harness(s, "report", &["--list", "--format", "terse", "--ignored"], Duration::from_secs(60));
    assert!(out.success, "{}", out.text());
    out.stdout.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect()
}

#[test]
fn steps_with_nothing_to_check_are_listed_as_ignored() {
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    // No trial has run yet: every step is ignored, with that reason, not failed.
    let all = harness(&s, "report", &["--list", "--format", "terse"], Duration::from_secs(60));
    for step in ["report::thresholds", "report::diff", "report::baseline", "report::html"] {
        assert!(all.stdout.contains(&format!("{step}: test\n")), "{}", all.text());
    }
    assert_eq!(listed_as_ignored(&s).len(), 16);
    let report = harness(&s, "report", &[], LIMIT);
    let text = report.text();
    assert!(report.success && !text.contains("FAILED"), "{text}");
    assert_eq!(text.matches("nothing to report: no trial has run in").count(), 1, "said once: {text}");
    assert!(text.contains("0 passed; 0 failed; 16 ignored"), "{text}");

    let run = harness(&s, "collectives", &[], LIMIT);
    assert!(run.success, "{}", run.text());
    // `setup` turns snapshots off; the fixture's build has host-only coverage.
    let ignored =
        ["report::thresholds", "report::device_coverage", "report::snapshot", "report::diff", "report::baseline"];
    assert_eq!(listed_as_ignored(&s), ignored);

    s.env = vec![
        ("CCL_COV_FAIL_UNDER_LINES".into(), "10".into()),
        ("CCL_COV_DIFF_BASE".into(), "HEAD".into()),
        ("CCL_COV_BASELINE".into(), s.dir.path().join("earlier").display().to_string()),
    ];
    assert_eq!(listed_as_ignored(&s), ["report::device_coverage", "report::snapshot"]);
}

/// A run whose build failed leaves nothing to report: its one real message
/// is not buried under a failure of every report step.
#[test]
fn a_failed_build_is_not_buried_under_report_failures() {
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}]));
        v["library"]["steps"][0]["argv"] = json!(["sh", "-c", "echo the compiler exploded >&2; exit 9"]);
    });
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(text.contains("the compiler exploded"), "{text}");
    assert!(text.contains("nothing to report: the last run's build failed, so none of its trials ran"), "{text}");
    assert!(!text.contains("report::merge ... FAILED") && text.contains("0 passed; 0 failed; 16 ignored"), "{text}");
    // Not "1 of 1 trials ran" after "none of its trials ran" (issue #41, item 5).
    assert!(text.contains("ccl-coverage: 0 of 1 trials ran: 0 passed, 0 failed, 0 timed out; 1 not run"), "{text}");
}

/// `cargo coverage` (which sets `CCL_COV_TRIAL_FILTER=1`) passes its trial
/// filter to `coverage_report` too: the report still runs every step. A
/// plain `cargo test FILTER` selects steps as libtest does, several filters
/// too, and touches no workspace when it selects none; `ccl-coverage report
/// FILTER` refuses a filter that names no step.
#[test]
fn only_a_trial_filter_given_on_purpose_leaves_the_report_whole() {
    let alias = fs::read_to_string(root().join(".cargo/config.toml")).unwrap();
    assert!(alias.contains(r#""--config", "env.CCL_COV_TRIAL_FILTER='1'""#), "{alias}");
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    let run = harness(&s, "collectives", &["AllReduce::1K"], LIMIT);
    assert!(run.success, "{}", run.text());

    // `cargo test --lib --tests -- sass`: no step is called so.
    let plain = harness(&s, "coverage-report", &["sass"], LIMIT);
    assert!(
        plain.success && plain.text().contains("0 passed; 0 failed; 0 ignored; 0 measured; 16 filtered out"),
        "{}",
        plain.text()
    );
    assert!(!s.ws.join("report").exists(), "a plain filter made a report:\n{}", plain.text());
    let several = harness(&s, "coverage-report", &["--exact", "report::merge", "report::html"], LIMIT);
    assert!(
        several.text().contains("2 passed; 0 failed; 0 ignored; 0 measured; 14 filtered out"),
        "{}",
        several.text()
    );
    let refused = harness(&s, "report", &["AllReduce::1K"], LIMIT);
    assert_eq!(refused.code, Some(2), "{}", refused.text());
    assert!(refused.text().contains("no report step matches `AllReduce::1K`"), "{}", refused.text());

    s.env.push(("CCL_COV_TRIAL_FILTER".into(), "1".into()));
    let report = harness(&s, "coverage-report", &["AllReduce::1K", "--skip", "report"], LIMIT);
    let text = report.text();
    assert!(report.success, "{text}");
    assert!(text.contains("the test filter selects trials (cargo coverage): every report step runs"), "{text}");
    assert!(text.contains("0 filtered out"), "{text}");
    assert!(s.ws.join("report/coverage.lcov").is_file(), "{text}");
    // And the trials refuse a filter that matches none.
    let none = harness(&s, "collectives", &["NoSuch"], LIMIT);
    assert_eq!(none.code, Some(2), "{}", none.text());
    s.env.pop();
    let none = harness(&s, "collectives", &["NoSuch"], LIMIT);
    assert!(none.success && none.text().contains("0 passed"), "plain libtest: {}", none.text());
}

/// nextest lists the steps, then runs each in a process of its own: a step
/// ignored at run time says `SKIP:` (nextest would show PASS), and the
/// totals are printed once, by the step that made them.
#[test]
fn under_nextest_a_step_ignored_at_run_time_says_so_and_the_totals_print_once() {
    let mut s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    s.env.push(("NEXTEST_RUN_ID".into(), "5e1f-report".into()));
    assert!(harness(&s, "collectives", &["--exact", "AllReduce::1K::ring"], LIMIT).success);
    let totals = |out: &support::Ran| out.stderr.lines().filter(|l| l.starts_with("host      ")).count();
    let summary = harness(&s, "coverage-report", &["--exact", "report::summary_json"], LIMIT);
    assert!(summary.success && totals(&summary) == 1, "{}", summary.text());
    for step in ["report::merge", "report::html", "report::lcov"] {
        let out = harness(&s, "coverage-report", &["--exact", step], LIMIT);
        assert!(out.success && totals(&out) == 0, "{step} printed the totals: {}", out.text());
    }
    let forced = harness(&s, "coverage-report", &["--exact", "report::device_coverage", "--include-ignored"], LIMIT);
    assert!(
        forced.stdout.contains("SKIP: report::device_coverage: does not apply: this build has host-only coverage"),
        "{}",
        forced.text()
    );
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Two trials, then one of them again: the report counts both, names the
/// one from the earlier run and keeps the snapshot out of it. The processes
/// of one nextest run are one run.
#[test]
fn results_of_earlier_runs_are_named_and_keep_the_snapshot_out() {
    let mut s = setup(|v| {
        let variants = json!([
            {"name": "ring", "env": {"CCL_ALGO": "ring"}},
            {"name": "direct", "env": {"CCL_ALGO": "direct"}}
        ]);
        only(v, "AllReduce", &["1K"], variants);
        v["name"] = json!("partial");
        v["report"]["snapshot"] = json!(true);
    });
    let both = harness(&s, "collectives", &[], LIMIT);
    assert!(both.success, "{}", both.text());
    let one = harness(&s, "collectives", &["--exact", "AllReduce::1K::ring"], LIMIT);
    assert!(one.success, "{}", one.text());
    let run = read_json(&s.ws.join("results/run.json"));
    assert_eq!(run["ran"], json!(["AllReduce::1K::ring"]));
    let direct = result(&s, "AllReduce.1K.direct");
    assert_eq!(
        run["earlier_runs"],
        json!([{"run_id": direct["run_id"], "started_at": direct["started_at"], "trials": ["AllReduce::1K::direct"]}])
    );
    assert_eq!(run["summary"]["total"], 2);

    let report = harness(&s, "report", &[], LIMIT);
    let text = report.text();
    assert!(report.success, "{text}");
    let named = format!(
        "1 of 2 trial results come from earlier runs of this build, not from the latest run ({}, started {}): \
         AllReduce::1K::direct (run {}, started {})",
        run["run_id"].as_str().unwrap(),
        run["started_at"].as_str().unwrap(),
        direct["run_id"].as_str().unwrap(),
        direct["started_at"].as_str().unwrap()
    );
    // On the terminal, how many and the oldest run; the names are in meta.json.
    let also = format!(
        "ccl-coverage: the report also uses 1 result of earlier runs of this build (oldest: run {}, started {}); {} names them (earlier_runs)",
        direct["run_id"].as_str().unwrap(),
        direct["started_at"].as_str().unwrap(),
        s.ws.join("report/meta.json").display()
    );
    assert!(text.contains(&also), "{text}");
    assert!(!text.contains("AllReduce::1K::direct"), "{text}");
    assert!(
        text.contains(
            "ccl-coverage: report::snapshot is ignored: 1 of 2 trial results come from earlier runs of this build; the snapshot describes one run"
        ),
        "{text}"
    );
    let md = fs::read_to_string(s.ws.join("report/summary.md")).unwrap();
    assert!(md.contains(&format!("**Not one run:** {named}.")), "{md}");
    let meta = read_json(&s.ws.join("report/meta.json"));
    assert_eq!(meta["earlier_runs"], run["earlier_runs"], "{meta}");
    assert_eq!(meta["latest_run"]["trials"], json!(["AllReduce::1K::ring"]), "{meta}");

    // Under nextest each trial is a process of its own, all of one run.
    s.env.push(("NEXTEST_RUN_ID".into(), "0a1b2c3d-run".into()));
    for trial in ["AllReduce::1K::ring", "AllReduce::1K::direct"] {
        let ran = harness(&s, "collectives", &["--exact", trial], LIMIT);
        assert!(ran.success, "{}", ran.text());
    }
    let run = read_json(&s.ws.join("results/run.json"));
    assert_eq!(run["run_id"], "nextest-0a1b2c3d-run");
    assert_eq!(run["ran"], json!(["AllReduce::1K::direct", "AllReduce::1K::ring"]));
    assert_eq!(run["earlier_runs"], json!([]));
    s.env.pop();
    let report = harness(&s, "report", &["--skip", "report::snapshot"], LIMIT);
    assert!(report.success && !report.text().contains("earlier runs"), "{}", report.text());
}

/// A copied config under another name has no snapshot: its first report is
/// green, writes the snapshot into the workspace and says how to adopt it;
/// nothing is written into the checkout's `snapshots/`. Adopted into its
/// own project's `snapshots/` (beside its `configs/`), it is compared.
#[test]
fn a_new_config_s_first_report_writes_its_snapshot_into_the_workspace() {
    let mut s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}]));
        v["name"] = json!("mine");
        v["report"]["snapshot"] = json!(true);
    });
    let project = s.dir.path().join("project");
    fs::create_dir_all(project.join("configs")).unwrap();
    let config = project.join("configs/mine.json");
    fs::rename(&s.config, &config).unwrap();
    s.config = config;
    let checkout = files_under(&root().join("snapshots"));

    let run = harness(&s, "collectives", &[], LIMIT);
    assert!(run.success, "{}", run.text());
    let report = harness(&s, "report", &[], LIMIT);
    let text = report.text();
    assert!(report.success, "{text}");
    assert_eq!(files_under(&root().join("snapshots")), checkout, "the checkout's snapshots/ changed:\n{text}");
    assert!(!project.join("snapshots").exists(), "written into the config's project unasked:\n{text}");
    let written = s.ws.join("report/snapshot/coverage_summary-mine.snap");
    let adopted = project.join("snapshots/coverage_summary-mine.snap");
    assert!(written.is_file(), "{text}");
    assert!(
        text.contains(&format!(
            "config mine has no snapshot yet ({} does not exist): this report's is {}; to adopt it, copy it there",
            adopted.display(),
            written.display()
        )),
        "{text}"
    );
    let step = text.lines().find(|l| l.starts_with("test report::snapshot")).unwrap_or_else(|| panic!("{text}"));
    assert!(step.contains("ignored (no snapshot to compare with yet: this report's is"), "{step}");

    fs::create_dir_all(adopted.parent().unwrap()).unwrap();
    fs::copy(&written, &adopted).unwrap();
    let again = harness(&s, "report", &[], LIMIT);
    let text = again.text();
    assert!(again.success, "{text}");
    let step = text.lines().find(|l| l.starts_with("test report::snapshot")).unwrap_or_else(|| panic!("{text}"));
    assert!(step.ends_with("... ok"), "the adopted snapshot is compared: {step}");
    assert_eq!(files_under(&project.join("snapshots")), [adopted], "insta wrote nothing beside it");
}
