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
    assert!(text.contains("ccl-coverage: 1 of 2 trials ran: 1 passed, 0 failed, 0 timed out"), "{text}");
    assert!(!text.contains("--skip AllReduce"), "the minimal suite's command belongs in its file: {text}");
    assert!(std::fs::read_to_string(&lcov).unwrap().contains("SF:"), "the lcov was not handed over");
    // A bar as an option reaches the thresholds step, and is named as typed.
    let gated = harness(&s, "report", &["--fail-under-lines", "99.9"], LIMIT);
    assert!(!gated.success && gated.text().contains("report::thresholds"), "{}", gated.text());
    assert!(gated.text().contains("is under --fail-under-lines 99.9"), "{}", gated.text());
    let wrong = harness(&s, "report", &["--fail-under-lines", "150"], LIMIT);
    assert_eq!(wrong.code, Some(2), "{}", wrong.text());
    assert!(wrong.text().contains("--fail-under-lines \"150\" is not a percentage"), "{}", wrong.text());
    // Set as a variable, the variable is named.
    let mut by_var = command(&s, "report", &[]);
    by_var.env("CCL_COV_FAIL_UNDER_LINES", "99.9");
    let gated = support::spawn(&s, by_var).wait(LIMIT);
    assert!(gated.text().contains("is under CCL_COV_FAIL_UNDER_LINES=99.9"), "{}", gated.text());
}

/// A report handed to stdout is all that stdout holds: libtest's lines and
/// the harness's go to stderr, and `--open` without a browser warns.
#[test]
fn a_report_on_stdout_is_clean_and_open_without_a_browser_only_warns() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    let ran = harness(&s, "run", &["--lcov"], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let lcov_line = |l: &str| {
        l == "end_of_record" || l.split_once(':').is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_uppercase()))
    };
    assert!(
        ran.stdout.starts_with("SF:") && ran.stdout.lines().all(lcov_line),
        "stdout is not lcov alone:\n{}",
        ran.stdout
    );
    assert!(
        ran.stderr.lines().any(|l| l.starts_with("test report::merge ") && l.ends_with("... ok")),
        "{}",
        ran.stderr
    );
    let report = harness(&s, "report", &["--lcov"], LIMIT);
    assert!(
        report.success && report.stdout.starts_with("SF:") && report.stdout.lines().all(lcov_line),
        "{}",
        report.stdout
    );
    assert_eq!(report.stdout, std::fs::read_to_string(s.ws.join("report/coverage.lcov")).unwrap());
    // An xdg-open that fails, as on a machine without a browser.
    let bin = s.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opener = bin.join("xdg-open");
    std::fs::write(&opener, "#!/bin/sh\necho no method available for opening \"$1\" >&2\nexit 3\n").unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut open = command(&s, "report", &["--open"]);
    open.env("PATH", format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()));
    let opened = support::spawn(&s, open).wait(LIMIT);
    assert!(opened.success, "the report was written: {}", opened.text());
    assert!(opened.stderr.contains("ccl-coverage: warning: cannot open"), "{}", opened.stderr);
}

/// A partial run says what it ran, then what else the report uses (the
/// names of those trials are in `meta.json`, not on the terminal), once.
#[test]
fn a_partial_run_says_what_it_ran_and_what_the_report_also_uses() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}, {"name": "two", "ranks": 2}])));
    assert!(harness(&s, "run", &[], LIMIT).success);
    let ran = harness(&s, "run", &["AllReduce::1K::one"], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    let last = text.lines().rfind(|l| l.starts_with("ccl-coverage: ")).unwrap_or_default();
    assert!(
        last.starts_with(
            "ccl-coverage: 1 of 2 trials ran: 1 passed, 0 failed, 0 timed out; the report also uses 1 result of earlier runs of this build (oldest: run "
        ),
        "{text}"
    );
    assert_eq!(text.matches("earlier runs").count(), 1, "said once, by the last line: {text}");
    assert!(!text.contains("AllReduce::1K::two"), "the other trials' names belong in meta.json: {text}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap();
    assert_eq!(meta["earlier_runs"][0]["trials"], json!(["AllReduce::1K::two"]), "{meta}");
}

/// A filter given to `run` or `list` that matches no trial is refused with
/// the name it most likely meant; nothing is built and no report step runs.
/// A wrong `--config` is named as typed, resolved against the current
/// folder, and a setting's error is said once.
#[test]
fn a_filter_that_matches_no_trial_is_refused_and_errors_name_what_was_typed() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    for sub in ["run", "list"] {
        let ran = harness(&s, sub, &["NoSuchCollective"], LIMIT);
        let text = ran.text();
        assert_eq!(ran.code, Some(2), "{text}");
        assert!(text.contains("ccl-coverage: no trial matches `NoSuchCollective`"), "{text}");
        assert!(!text.contains("report::") && !text.contains("running"), "{text}");
    }
    let ran = harness(&s, "run", &["AllReduse"], LIMIT);
    assert!(ran.text().contains("no trial matches `AllReduse` (did you mean `AllReduce`?)"), "{}", ran.text());
    assert!(!s.ws.exists(), "a refused run touched the workspace");

    let mut cmd = command(&s, "run", &["--config", "configs/local.json"]);
    cmd.current_dir(support::root().join("tests")).env_remove("CCL_COV_CONFIG");
    let wrong = support::spawn(&s, cmd).wait(LIMIT);
    let tests = support::root().join("tests");
    assert_eq!(wrong.code, Some(2), "{}", wrong.text());
    assert!(
        wrong.stderr.contains(&format!(
            "--config configs/local.json: no such config: looked for {}, relative to the current folder {}",
            tests.join("configs/local.json").display(),
            tests.display()
        )),
        "{}",
        wrong.text()
    );
    let mut typo = command(&s, "run", &[]);
    typo.env("CCL_COV_FAIL_UNDER_LINE", "80");
    let typo = support::spawn(&s, typo).wait(LIMIT);
    assert_eq!(typo.code, Some(2), "{}", typo.text());
    assert_eq!(typo.text().matches("did you mean CCL_COV_FAIL_UNDER_LINES?").count(), 1, "{}", typo.text());
}

/// `list` marks ignored trials, prints JSON when asked, and takes no
/// `--test-threads` (it runs nothing).
#[test]
fn list_marks_ignored_trials_and_speaks_json() {
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([{"name": "one", "ranks": 2}, {"name": "slow", "ranks": 2, "ignore": true}]),
        );
    });
    let listed = harness(&s, "list", &[], LIMIT);
    assert!(listed.success, "{}", listed.text());
    assert_eq!(listed.stdout.lines().next(), Some("AllReduce::1K::one"), "{}", listed.stdout);
    assert!(listed.stdout.lines().any(|l| l.starts_with("AllReduce::1K::slow  (ignored: ")), "{}", listed.stdout);
    let json = harness(&s, "list", &["--format", "json"], LIMIT);
    let trials: serde_json::Value =
        serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stdout));
    assert_eq!(trials[0], json!({"name": "AllReduce::1K::one", "ignored": false, "ignore_reason": null}));
    assert_eq!(trials[1]["ignored"], true);
    let terse = harness(&s, "list", &["--format", "terse", "--ignored"], LIMIT);
    assert_eq!(terse.stdout, "AllReduce::1K::slow: test\n");
    assert_eq!(harness(&s, "list", &["--test-threads", "2"], LIMIT).code, Some(2));
}

#[test]
fn list_show_env_and_clean() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    let listed = harness(&s, "list", &[], LIMIT);
    assert!(listed.success && listed.stdout == "AllReduce::1K::one\n", "{}", listed.text());
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

/// `clean --builds` keeps a build another config's workspace still uses,
/// deletes the others with their lock files, and the hint for a build in use
/// names the `--config` given. Its own build cache (`CARGO_TARGET_DIR`), so
/// that the suite's shared one stays whole.
#[test]
fn clean_builds_keeps_what_another_workspace_uses_and_leaves_no_lock_files() {
    let target = tempfile::tempdir().unwrap();
    let state = target.path().join("ccl-coverage");
    let config = |name: &str| {
        let mut s = setup(|v| {
            only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}]));
            v["name"] = json!(name);
        });
        s.ws = state.join(name);
        s.env.push(("CARGO_TARGET_DIR".into(), target.path().display().to_string()));
        s
    };
    let (a, b) = (config("a"), config("b"));
    for s in [&a, &b] {
        let ran = harness(s, "collectives", &[], LIMIT);
        assert!(ran.success, "{}", ran.text());
    }
    let builds = state.join("builds");
    let listed = || {
        let mut names: Vec<String> = std::fs::read_dir(&builds)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let key = listed().into_iter().find(|n| !n.contains('.')).expect("a build");
    assert_eq!(listed().iter().filter(|n| !n.contains('.')).count(), 1, "a and b share one build: {:?}", listed());

    let a_config = a.config.display().to_string();
    let cleaned = harness(&a, "clean", &["--builds", "--config", &a_config], LIMIT);
    assert!(cleaned.success && !a.ws.exists(), "{}", cleaned.text());
    assert!(cleaned.text().contains(&format!("the workspace {} still uses it", b.ws.display())), "{}", cleaned.text());
    assert!(builds.join(&key).join("build.json").is_file(), "the build b uses was deleted");

    // In use by a run (its shared lock): kept, and the hint names the config given.
    let held = std::fs::File::open(builds.join(format!("{key}.lock"))).unwrap();
    held.lock_shared().unwrap();
    let b_config = b.config.display().to_string();
    let kept = harness(&b, "clean", &["--builds", "--config", &b_config], LIMIT);
    assert_eq!(kept.code, Some(2), "{}", kept.text());
    // The workspace came as a variable, the config as an option: each as given.
    let again =
        format!("run `CCL_COV_WORKSPACE={} ccl-coverage clean --builds --config {b_config}` again", b.ws.display());
    assert!(kept.text().contains(&again), "{}", kept.text());
    drop(held);
    let cleaned = harness(&b, "clean", &["--builds"], LIMIT);
    assert!(cleaned.success, "{}", cleaned.text());
    assert_eq!(listed(), Vec::<String>::new(), "left in {}", builds.display());
}

/// Issue #48, item 6: `clean --builds --config a` keeps the build that
/// config b's workspace (beside b's config, outside the state folder, where
/// no listing of it finds it) reports on, says why, and deletes config c's
/// failed build, as the tutorial says; b's report still runs. Once b's
/// workspace is gone, its registration is stale and keeps nothing.
#[test]
fn clean_builds_keeps_a_build_a_workspace_anywhere_uses_and_deletes_failed_builds() {
    let target = tempfile::tempdir().unwrap();
    let state = target.path().join("ccl-coverage");
    let config = |name: &str, fail: bool| {
        let mut s = setup(|v| {
            only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}]));
            v["name"] = json!(name);
            if fail {
                v["library"]["steps"].as_array_mut().unwrap().push(json!({"name": "fails", "argv": ["false"]}));
            }
        });
        s.env.push(("CARGO_TARGET_DIR".into(), target.path().display().to_string()));
        s
    };
    let (a, b, c) = (config("a", false), config("b", false), config("c", true));
    assert!(!b.ws.starts_with(&state));
    for s in [&a, &b] {
        let ran = harness(s, "collectives", &[], LIMIT);
        assert!(ran.success, "{}", ran.text());
    }
    let failed = harness(&c, "collectives", &[], LIMIT);
    assert!(!failed.success, "{}", failed.text());
    let builds = state.join("builds");
    let folders = || {
        let mut names: Vec<String> = std::fs::read_dir(&builds)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.contains('.'))
            .collect();
        names.sort();
        names
    };
    let key = std::fs::read_to_string(b.ws.join("build.json")).unwrap();
    let key = serde_json::from_str::<serde_json::Value>(&key).unwrap()["build_id"].as_str().unwrap().to_string();
    let failed_key = folders().into_iter().find(|k| *k != key).expect("c's failed build");
    assert!(!builds.join(&failed_key).join("build.json").exists());

    let a_config = a.config.display().to_string();
    let cleaned = harness(&a, "clean", &["--builds", "--config", &a_config], LIMIT);
    let text = cleaned.text();
    assert!(cleaned.success && !a.ws.exists(), "{text}");
    assert!(
        text.contains(&format!(
            "kept the cached build {}: the workspace {} still uses it (its build.json names this build",
            builds.join(&key).display(),
            b.ws.display()
        )),
        "{text}"
    );
    assert!(text.contains(&format!("deleted the failed build {}", builds.join(&failed_key).display())), "{text}");
    assert_eq!(folders(), std::slice::from_ref(&key), "{text}");
    assert!(!builds.join(format!("{failed_key}.lock")).exists(), "{text}");
    let reported = harness(&b, "report", &[], LIMIT);
    assert!(reported.success, "b's build was deleted from under it: {}", reported.text());

    // b's workspace is gone: its registration keeps nothing.
    std::fs::remove_dir_all(&b.ws).unwrap();
    let cleaned = harness(&b, "clean", &["--builds"], LIMIT);
    let text = cleaned.text();
    assert!(cleaned.success, "{text}");
    assert!(text.contains(&format!("a stale registration does not keep the cached build {key}")), "{text}");
    assert!(std::fs::read_dir(&builds).unwrap().next().is_none(), "left in {}: {text}", builds.display());
}

/// A config whose one trial, `AllReduce::1K::flaky`, fails its first
/// attempt (`tests/fixtures/fail-once.sh`) and passes after.
fn flaky_setup(once: &std::path::Path) -> support::Setup {
    setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "flaky", "ranks": 2}]));
        v["collectives"][0]["binary"] =
            json!(support::root().join("tests/fixtures/fail-once.sh").display().to_string());
        v["collectives"][0]["env"] =
            json!({"CCL_E2E_PERF": "{bin_dir}/all_reduce_perf", "CCL_E2E_ONCE": once.display().to_string()});
    })
}

/// `--retries N`: a trial that fails once then passes is flaky, and every
/// format says so: its result, run.json, JUnit, the progress line, the run
/// line and summary.md. Without `--retries` it fails. `--color always`
/// colours the verdicts, `--color never` (and a pipe, by default) does not.
#[test]
fn retries_name_a_flaky_pass_in_every_format_and_color_is_asked_for() {
    let once = tempfile::tempdir().unwrap();
    let flag = once.path().join("failed-once");
    let s = flaky_setup(&flag);
    let failed = harness(&s, "run", &["--no-report"], LIMIT);
    assert!(!failed.success && failed.text().contains("FAIL    AllReduce::1K::flaky"), "{}", failed.text());
    assert!(!failed.text().contains('\x1b'), "colour on a pipe: {}", failed.text());
    assert!(!s.ws.join("report").exists(), "--no-report wrote a report");
    std::fs::remove_dir(&flag).unwrap();

    let ran = harness(&s, "run", &["--retries", "2", "--color", "always"], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert!(text.contains("AllReduce::1K::flaky FAILED on attempt 1 of 3: exit status 1"), "{text}");
    assert!(text.contains("\x1b[33mFLAKY  \x1b[0m AllReduce::1K::flaky ("), "{text}");
    assert!(text.contains(", passed on attempt 2"), "{text}");
    assert!(text.contains("1 passed (1 flaky: passed on a retry)"), "{text}");
    let result = support::result(&s, "AllReduce.1K.flaky");
    assert_eq!((&result["status"], &result["flaky"]), (&json!("PASSED"), &json!(true)), "{result:#}");
    assert_eq!(result["attempts"][0]["status"], "FAILED", "{result:#}");
    assert!(result["attempts"][0]["log_tail"].as_str().unwrap().contains("fail-once: failing"), "{result:#}");
    let read = |p: &str| std::fs::read_to_string(s.ws.join(p)).unwrap();
    let run: serde_json::Value = serde_json::from_str(&read("results/run.json")).unwrap();
    assert_eq!((&run["summary"]["passed"], &run["summary"]["flaky"]), (&json!(1), &json!(1)), "{:#}", run["summary"]);
    let junit = read("results/junit.xml");
    assert!(junit.contains("<flakyFailure ") && junit.contains("message=\"exit status 1\" type=\"FAILED\""), "{junit}");
    let md = read("report/summary.md");
    assert!(md.contains("**Flaky:** 1 passed only on a retry: `AllReduce::1K::flaky`."), "{md}");

    // No colour when asked for none, whatever libtest would do.
    std::fs::remove_dir(&flag).unwrap();
    let plain = harness(&s, "run", &["--retries", "1", "--color", "never"], LIMIT);
    assert!(plain.success && plain.text().contains("FLAKY   AllReduce::1K::flaky"), "{}", plain.text());
    assert!(!plain.text().contains('\x1b'), "{}", plain.text());
}

/// One `--output-path` per format, each after its flag; `--summary-only`
/// with `--json`; `--text` printed with `--show-missing-lines`; Codecov's
/// JSON; and what cannot be handed over refused before anything runs.
#[test]
fn each_format_goes_to_its_own_output_path() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    let ran = harness(&s, "run", &["-q"], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert!(!text.contains("PASS    AllReduce::1K::one"), "-q shows passing trials: {text}");
    assert!(!text.contains("least covered files"), "-q shows the totals table: {text}");
    assert!(text.contains("1 of 1 trials ran: 1 passed"), "-q drops the tallies: {text}");
    // docs/running.md: "-q: failures, warnings and the tallies only" — no build line, note or page.
    for line in text.lines().filter(|l| l.starts_with("ccl-coverage: ")) {
        assert!(line.contains(" trials ran: ") || line.contains("warning: "), "-q shows {line:?}:\n{text}");
    }
    let out = s.dir.path().join("out");
    let p = |name: &str| out.join(name).display().to_string();
    let (lcov, cob, codecov, summary) = (p("a.lcov"), p("c.xml"), p("codecov.json"), p("summary.json"));
    let args = [
        "--lcov",
        "--output-path",
        &lcov,
        "--cobertura",
        "--output-path",
        &cob,
        "--codecov",
        "--output-path",
        &codecov,
        "--json",
        "--summary-only",
        "--output-path",
        &summary,
        "--text",
        "--show-missing-lines",
        "-v",
    ];
    let report = harness(&s, "report", &args, LIMIT);
    assert!(report.success, "{}", report.text());
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"));
    assert!(read(&lcov).starts_with("SF:") || read(&lcov).contains("\nSF:"), "not an lcov");
    assert!(read(&cob).contains("<coverage "), "not Cobertura");
    let summary: serde_json::Value = serde_json::from_str(&read(&summary)).unwrap();
    assert!(summary["data"][0]["files"][0].get("segments").is_none(), "--summary-only gave the full export");
    let lines = &summary["data"][0]["totals"]["lines"];
    // Codecov's format: per file, per line, hits or "covered/total".
    let codecov: serde_json::Value = serde_json::from_str(&read(&codecov)).unwrap();
    let file = &codecov["coverage"]["ccl/src/all_reduce.cc"];
    assert!(file.as_object().is_some_and(|f| !f.is_empty()), "{codecov:#}");
    let (mut count, mut covered) = (0, 0);
    for (_, lines) in codecov["coverage"].as_object().unwrap() {
        for (_, hits) in lines.as_object().unwrap() {
            count += 1;
            covered += u64::from(hits.as_u64().is_none_or(|h| h > 0));
        }
    }
    assert_eq!((json!(covered), json!(count)), (lines["covered"].clone(), lines["count"].clone()), "{lines}");
    // The text summary on stdout, then the lines no trial ran; also after the totals.
    // The report is all that stdout holds: libtest's own lines went to stderr.
    assert!(report.stdout.starts_with("Filename ") && report.stdout.contains("\nTOTAL "), "{}", report.stdout);
    assert!(
        report.stdout.contains("\nUncovered lines:\nccl") && report.stdout.contains("\nccl/src/all_gather.cc: "),
        "{}",
        report.stdout
    );
    assert!(report.stderr.contains("Uncovered lines:\n"), "{}", report.stderr);
    // Under its bar the report fails, and is still handed over: CI uploads the drop.
    let gated_lcov = p("gated.lcov");
    let gated = harness(&s, "report", &["--fail-under-lines", "99.9", "--lcov", "--output-path", &gated_lcov], LIMIT);
    assert!(!gated.success && gated.text().contains("report::thresholds"), "{}", gated.text());
    assert!(read(&gated_lcov).contains("SF:ccl/src/"), "the report under its bar was not handed over");
    // Two formats with nowhere to go but stdout, or a path for no format.
    for bad in [&["--lcov", "--cobertura"][..], &["--output-path", "x", "--lcov", "--json"]] {
        let refused = harness(&s, "report", bad, LIMIT);
        assert_eq!(refused.code, Some(2), "{bad:?}: {}", refused.text());
        assert!(!refused.text().contains("report::merge"), "{bad:?} ran the report: {}", refused.text());
    }
}

/// `-v` names each trial's command as it starts; `--jobs` reaches the
/// build's `{jobs}` (shown by the dry run); every new option is in `--help`.
#[test]
fn verbose_jobs_and_help_of_the_new_options() {
    let s = setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "one", "ranks": 2}])));
    let ran = harness(&s, "run", &["-v", "--no-report"], LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert!(ran.text().contains("ccl-coverage: AllReduce::1K::one starts: "), "{}", ran.text());
    assert!(ran.text().contains("all_reduce_perf -c 1 -d all"), "{}", ran.text());
    // The default: what a user follows (the config, the build reused, each trial's line), no command lines.
    let plain = harness(&s, "run", &["--no-report"], LIMIT);
    let text = plain.text();
    assert!(plain.success, "{text}");
    for line in [
        "ccl-coverage: config ",
        "ccl-coverage: device coverage: ",
        "ccl-coverage: reusing build ",
        "PASS    AllReduce::1K::one",
    ] {
        assert!(text.contains(line), "the default leaves out {line:?}:\n{text}");
    }
    assert!(!text.contains(" starts: "), "the default shows -v's command lines:\n{text}");
    let dry = harness(&s, "run", &["--jobs", "3", "--dry-run"], LIMIT);
    assert!(dry.success && dry.stdout.contains("--parallel 3"), "{}", dry.text());
    let bad = harness(&s, "run", &["--retries=many", "--dry-run"], LIMIT);
    assert_eq!(bad.code, Some(2), "{}", bad.text());
    let help = |sub: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
        cmd.args([sub, "--help"]);
        String::from_utf8_lossy(&output_within(cmd, LIMIT).stdout).into_owned()
    };
    let run = help("run");
    for flag in [
        "--no-report",
        "--retries <N>",
        "--jobs <N>",
        "--color <WHEN>",
        "--quiet",
        "--verbose",
        "--text",
        "--summary-only",
        "--show-missing-lines",
        "--codecov",
        "--output-path <PATH>",
    ] {
        assert!(run.contains(flag), "run --help lacks {flag}:\n{run}");
    }
    let report = help("report");
    for flag in ["--codecov", "--text", "--show-missing-lines", "--color <WHEN>", "--quiet"] {
        assert!(report.contains(flag), "report --help lacks {flag}:\n{report}");
    }
}
