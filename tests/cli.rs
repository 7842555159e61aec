//! The command line (`ccl-coverage run | report | list | who-covers | clean |
//! show-env`) on the CPU fixture: help on each, the options reaching the
//! harness, the result and progress on screen, reports handed over.

mod support;

use serde_json::json;
use std::time::Duration;
use support::{command, harness, only, output_within, setup};

const LIMIT: Duration = Duration::from_secs(480);

#[test]
fn every_subcommand_has_help_and_who_covers_help_is_not_a_query() {
    let bin = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
        cmd.args(args);
        cmd
    };
    let out = output_within(bin(&["--help"]), LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for sub in ["run", "report", "list", "who-covers", "clean", "show-env", "config-schema"] {
        assert!(text.contains(sub), "{sub} is not in --help:\n{text}");
        let out = output_within(bin(&[sub, "--help"]), LIMIT);
        assert!(out.status.success(), "{sub} --help: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage: ccl-coverage"), "{sub} --help");
    }
    let out = output_within(bin(&["who-covers", "--help"]), LIMIT);
    assert!(String::from_utf8_lossy(&out.stdout).contains("<FILE:LINE>"));
    let out = output_within(bin(&["nonsense"]), LIMIT);
    assert_eq!(out.status.code(), Some(2));
}

/// `config-schema` prints the JSON Schema a config may name in `"$schema"`.
#[test]
fn config_schema_is_a_json_schema_of_strict_configs() {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    cmd.arg("config-schema");
    let out = output_within(cmd, LIMIT);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(schema["properties"]["capacity"]["maximum"], 4096);
    assert!(schema["properties"]["programs"]["items"]["properties"]["binary"].is_object(), "{schema}");
}

/// `run` with a filter: progress per trial, the report (the filter does not
/// remove it), the totals and least-covered files on screen, the run in one
/// line, a bar given as an option, and the lcov handed over.
#[test]
fn run_shows_progress_totals_and_hands_over_the_lcov() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}, {"name": "two", "ranks": 2}])));
    let lcov = s.dir.path().join("out/coverage.lcov");
    let out = lcov.display().to_string();
    let ran = harness(&s, "run", &["AllReduce::1K::one", "--lcov", "--output-path", &out], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert!(text.contains("[1/1] PASS    AllReduce::1K::one ("), "{text}");
    assert!(text.lines().any(|l| l.starts_with("host      ") && l.contains('%')), "no totals: {text}");
    assert!(text.contains("least covered files (lines):"), "{text}");
    assert!(text.contains("2 trials: 1 passed, 0 failed, 0 timed out, 1 not run"), "{text}");
    assert!(!text.contains("--skip AllReduce"), "the minimal suite's command belongs in its file: {text}");
    assert!(std::fs::read_to_string(&lcov).unwrap().contains("SF:"), "the lcov was not handed over");
    // A bar as an option reaches the thresholds step.
    let gated = harness(&s, "report", &["--fail-under-lines", "99.9"], LIMIT);
    assert!(!gated.success && gated.text().contains("report::thresholds"), "{}", gated.text());
    let wrong = harness(&s, "report", &["--fail-under-lines", "150"], LIMIT);
    assert_eq!(wrong.code, Some(2), "{}", wrong.text());
}

#[test]
fn list_show_env_and_clean() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    let listed = harness(&s, "list", &[], LIMIT);
    assert!(listed.success && listed.stdout.contains("AllReduce::1K::one: test"), "{}", listed.text());
    let env = harness(&s, "show-env", &[], LIMIT);
    assert!(env.success, "{}", env.text());
    assert!(env.stdout.contains(&format!("workspace:   {}", s.ws.display())), "{}", env.stdout);
    assert!(env.stdout.lines().any(|l| l.starts_with("CCL_COV_FAIL_UNDER_LINES")), "{}", env.stdout);
    // Nothing to clean yet; then a run's workspace is deleted whole.
    assert!(harness(&s, "clean", &[], LIMIT).success);
    assert!(harness(&s, "collectives", &[], LIMIT).success);
    assert!(s.ws.join("results").is_dir());
    let cleaned = harness(&s, "clean", &[], LIMIT);
    assert!(cleaned.success && !s.ws.exists(), "{}", cleaned.text());
    // A folder the harness did not make is not deleted.
    std::fs::create_dir_all(s.ws.join("mine")).unwrap();
    let refused = harness(&s, "clean", &[], LIMIT);
    assert!(!refused.success && s.ws.join("mine").is_dir(), "{}", refused.text());
    let mut cmd = command(&s, "clean", &[]);
    cmd.env("CCL_COV_WORKSPACE", s.dir.path().join("none"));
    assert!(support::spawn(&s, cmd).wait(LIMIT).success);
}
