//! Broken configs, end to end: every `tests/fixtures/broken-configs/NAME.json`
//! is run through the real `ccl-coverage` binary (`collectives --list`,
//! `collectives`, `collectives` with `CCL_COV_DRY_RUN=1`, `report`), and each run must be a config error (exit 2)
//! whose message is the file name followed by the text kept next to it in
//! `NAME.expected` (the JSON path and what was expected), without a panic,
//! and without touching the workspace: a wrong config must fail before
//! anything is written or deleted, also on an overnight GPU host.
//!
//! Each fixture is `tests/fixtures/minimal-config.json` (which must load) with
//! one thing broken.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/broken-configs")
}

fn harness(config: &Path, ws: &Path, args: &[&str]) -> Output {
    harness_with(config, ws, args, &[])
}

fn harness_with(config: &Path, ws: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    // Hermetic: no switch of the caller's environment leaks in (and the
    // fixtures' `${CCL_COV_...}` references stay unset).
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") || key == "GITHUB_STEP_SUMMARY" {
            cmd.env_remove(key);
        }
    }
    cmd.args(args)
        .env("CCL_COV_CONFIG", config)
        .env("CCL_COV_WORKSPACE", ws)
        .env("CARGO_MANIFEST_DIR", root())
        .current_dir(root())
        .envs(env.iter().copied());
    support::output_within(cmd, std::time::Duration::from_secs(120))
}

/// Every file and folder under `dir`, with file contents.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            if entry.file_type().unwrap().is_dir() {
                found.insert(rel, None);
                stack.push(path);
            } else {
                found.insert(rel, Some(fs::read(&path).unwrap()));
            }
        }
    }
    found
}

/// A workspace that already holds a run's files: none may change.
fn populated_workspace(dir: &Path) -> PathBuf {
    let ws = dir.join("ws");
    for (file, text) in [
        ("sentinel.txt", "keep me"),
        ("report/sentinel.txt", "keep me too"),
        ("results/run.json", "{}"),
        ("profiles/AllReduce.1K.ring.profdata", "profile"),
    ] {
        fs::create_dir_all(ws.join(file).parent().unwrap()).unwrap();
        fs::write(ws.join(file), text).unwrap();
    }
    ws
}

/// `(name, config file, expected text)` for every fixture; a `.json` without
/// its `.expected` (or the reverse) is a mistake in the fixtures.
fn cases() -> Vec<(String, PathBuf, String)> {
    let mut cases = Vec::new();
    let mut expected_files = 0;
    for entry in fs::read_dir(fixtures()).unwrap().flatten() {
        let path = entry.path();
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => {
                let expected = path.with_extension("expected");
                let text = fs::read_to_string(&expected)
                    .unwrap_or_else(|e| panic!("{}: {e} (each fixture needs its .expected)", expected.display()));
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                cases.push((name, path, text.trim_end_matches('\n').to_string()));
            }
            Some("expected") => expected_files += 1,
            _ => panic!("{}: not a fixture (NAME.json + NAME.expected)", path.display()),
        }
    }
    assert_eq!(expected_files, cases.len(), "every .expected has its .json");
    cases.sort();
    cases
}

/// A harness invocation: arguments and extra environment.
type Run = (&'static [&'static str], &'static [(&'static str, &'static str)]);

/// Every way a broken config is run; all must fail alike.
const RUNS: &[Run] = &[
    (&["collectives", "--list"], &[]),
    (&["collectives"], &[]),
    (&["collectives"], &[("CCL_COV_DRY_RUN", "1")]),
    (&["report"], &[]),
];

#[test]
fn minimal_config_loads() {
    let dir = tempfile::tempdir().unwrap();
    let ws = populated_workspace(dir.path());
    let before = tree(&ws);
    let out = harness(&root().join("tests/fixtures/minimal-config.json"), &ws, &["collectives", "--list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("AllReduce::1K::ring: test"), "{text}");
    assert_eq!(tree(&ws), before, "--list writes nothing");
}

#[test]
fn broken_configs_fail_with_their_message_and_touch_nothing() {
    let cases = cases();
    assert!(cases.len() >= 30, "only {} broken configs", cases.len());
    let mut failures = Vec::new();
    for (name, config, expected) in &cases {
        let dir = tempfile::tempdir().unwrap();
        let ws = populated_workspace(dir.path());
        let before = tree(&ws);
        for &(args, env) in RUNS {
            let out = harness_with(config, &ws, args, env);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let prefix = format!("ccl-coverage: {}: ", config.display());
            let mut problems = Vec::new();
            if out.status.code() != Some(2) {
                problems.push(format!("exit {:?}, expected 2", out.status.code()));
            }
            if stderr.contains("panicked at") || stdout.contains("panicked at") {
                problems.push("panicked".into());
            }
            // The file, then the expected text: JSON path first, then what was expected.
            if !stderr.starts_with(&format!("{prefix}{expected}")) {
                problems.push(format!("message does not start with {prefix:?} then {expected:?}"));
            }
            if tree(&ws) != before {
                problems.push("the workspace changed".into());
            }
            if !problems.is_empty() {
                let how =
                    format!("{}{}", env.iter().map(|(k, v)| format!("{k}={v} ")).collect::<String>(), args.join(" "));
                failures.push(format!("{name} ({how}): {}\n  stderr: {stderr}", problems.join("; ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs wrong:\n{}",
        failures.len(),
        cases.len() * RUNS.len(),
        failures.join("\n")
    );
}
