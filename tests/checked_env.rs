//! The checked environment, end to end: a misspelt `CCL_COV_*` name or a
//! value of the wrong kind fails both harness binaries (`collectives`, with
//! and without `--list` and the dry run, and `report`) with exit 2 and a
//! message naming the variable and what was expected, before the workspace
//! is created; a name the config reads itself is the user's and allowed.

mod support;

use std::time::Duration;
use support::{Setup, harness, setup};

const LIMIT: Duration = Duration::from_secs(60);

/// A harness invocation: subcommand, arguments and extra environment.
type Run = (&'static str, &'static [&'static str], &'static [(&'static str, &'static str)]);

const RUNS: &[Run] = &[
    ("collectives", &["--list"], &[]),
    ("collectives", &[], &[]),
    ("collectives", &[], &[("CCL_COV_DRY_RUN", "1")]),
    ("report", &[], &[]),
];

/// Runs every entry point with `env` and checks each fails with `expected`.
fn refused(env: &[(&str, &str)], expected: &str) {
    for &(sub, args, extra) in RUNS {
        let mut s: Setup = setup(|_| {});
        s.env.extend(env.iter().chain(extra).map(|(k, v)| ((*k).to_string(), (*v).to_string())));
        let ran = harness(&s, sub, args, LIMIT);
        let text = ran.text();
        assert_eq!(ran.code, Some(2), "{sub} {args:?} with {env:?}: {text}");
        assert!(text.contains(&format!("ccl-coverage: {expected}")), "{sub} {args:?} with {env:?}: {text}");
        assert!(!text.contains("panicked"), "{text}");
        assert!(!s.ws.exists(), "{sub} {args:?} with {env:?} created the workspace");
    }
}

#[test]
fn a_misspelt_name_is_refused_with_the_name_it_missed() {
    refused(
        &[("CCL_COV_FAIL_UNDER_LINE", "99")],
        "unknown environment variable CCL_COV_FAIL_UNDER_LINE: did you mean CCL_COV_FAIL_UNDER_LINES? (report::thresholds",
    );
    refused(&[("CCL_COV_WHATEVER", "1")], "unknown environment variable CCL_COV_WHATEVER: no ccl-coverage variable");
}

#[test]
fn a_percentage_out_of_range_or_not_a_number_is_refused() {
    for bad in ["150", "-1", "abc"] {
        refused(
            &[("CCL_COV_FAIL_UNDER_LINES", bad)],
            &format!("CCL_COV_FAIL_UNDER_LINES=\"{bad}\" is not a percentage: expected a number from 0 to 100"),
        );
    }
    refused(&[("CCL_COV_FAIL_UNDER_DIFF", "101")], "CCL_COV_FAIL_UNDER_DIFF=\"101\" is not a percentage");
}

#[test]
fn numbers_and_switches_that_do_not_parse_are_refused() {
    refused(&[("CCL_COV_JOBS", "many")], "CCL_COV_JOBS=\"many\" is not a number: expected a whole number above 0");
    refused(&[("CCL_COV_HEARTBEAT_S", "0")], "CCL_COV_HEARTBEAT_S=\"0\" is not a number");
    refused(&[("CCL_COV_FAIL_ON_LOST", "yes")], "CCL_COV_FAIL_ON_LOST=\"yes\" is not a switch: expected on or off");
}

#[test]
fn known_names_and_the_config_s_own_are_allowed() {
    let mut s = setup(|v| v["env"]["CCL_E2E_TOOLS"] = serde_json::json!("${CCL_COV_E2E_TOOLS:-none}"));
    for (k, v) in [("CCL_COV_E2E_TOOLS", "/opt/tools"), ("CCL_COV_FAIL_UNDER_LINES", "99.5"), ("CCL_COV_JOBS", "2")] {
        s.env.push((k.into(), v.into()));
    }
    let ran = harness(&s, "collectives", &["--list"], LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert!(ran.stdout.contains("AllReduce::1K"), "{}", ran.stdout);
}
