//! The report says what it checked and what it covers: a step with nothing
//! to check is ignored when listed (nextest shows a step ignored only at run
//! time as PASS), a trial filter passed on by `cargo coverage` does not
//! remove the report's steps, results of earlier runs are named, and a new
//! config's first report writes its snapshot into the workspace, not into
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
    let mut s = setup(|_| {});
    let all = harness(&s, "report", &["--list", "--format", "terse"], Duration::from_secs(60));
    for step in ["report::thresholds", "report::diff", "report::baseline", "report::html"] {
        assert!(all.stdout.contains(&format!("{step}: test\n")), "{}", all.text());
    }
    // `setup` turns snapshots off.
    let ignored = ["report::thresholds", "report::snapshot", "report::diff", "report::baseline"];
    assert_eq!(listed_as_ignored(&s), ignored);

    s.env = vec![
        ("CCL_COV_FAIL_UNDER_LINES".into(), "10".into()),
        ("CCL_COV_DIFF_BASE".into(), "HEAD".into()),
        ("CCL_COV_BASELINE".into(), s.dir.path().join("earlier").display().to_string()),
    ];
    assert_eq!(listed_as_ignored(&s), ["report::snapshot"]);
}

/// `cargo coverage -- AllReduce::1K` passes the filter to `coverage_report`
/// too: the report still runs every step and writes the report.
#[test]
fn a_trial_filter_does_not_remove_the_report_steps() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}])));
    let run = harness(&s, "collectives", &["AllReduce::1K"], LIMIT);
    assert!(run.success, "{}", run.text());
    let report = harness(&s, "report", &["AllReduce::1K"], LIMIT);
    let text = report.text();
    assert!(report.success, "{text}");
    assert!(text.contains("the filter \"AllReduce::1K\" names no report step"), "{text}");
    assert!(text.contains("0 filtered out"), "{text}");
    assert!(text.contains("ccl-coverage: report::thresholds is ignored: no CCL_COV_FAIL_UNDER_* bar is set"), "{text}");
    assert!(s.ws.join("report/coverage.lcov").is_file(), "{text}");

    // A filter that names steps still selects them.
    let html = harness(&s, "report", &["--exact", "report::html"], LIMIT);
    assert!(
        html.success && html.text().contains("1 passed; 0 failed; 0 ignored; 0 measured; 15 filtered out"),
        "{}",
        html.text()
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
    assert!(text.contains(&format!("ccl-coverage: not one run: {named}. Their coverage is counted")), "{text}");
    let snapshot = text.lines().find(|l| l.starts_with("test report::snapshot")).unwrap_or_else(|| panic!("{text}"));
    assert!(snapshot.ends_with(&format!("ignored ({named}; the snapshot describes one run)")), "{snapshot}");
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
    assert!(report.success && !report.text().contains("not one run"), "{}", report.text());
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
