//! The report says what it checked and what it covers: a step with nothing
//! to check is ignored when listed (nextest shows a step ignored only at run
//! time as PASS), and a trial filter passed on by `cargo coverage` does not
//! remove the report's steps.

mod support;

use serde_json::json;
use std::time::Duration;
use support::{harness, only, setup};

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
