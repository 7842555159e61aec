//! `ccl-coverage init` on a copy of tests/fixtures/cmake-ring, through the
//! real binary, CMake, `CTest` and googletest: the config it writes has one
//! trial per test that `CTest` itself lists (`ctest --show-only=json-v1`, run
//! here as the oracle), every key in `config-schema`, `list` shows its
//! trials, and `run` then reports (issue #49, item 1: two commands).

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{copy_tree, output_within, root};

const LIMIT: Duration = Duration::from_secs(480);

fn ccl(dir: &Path, args: &[&str]) -> (bool, String) {
    ccl_with(dir, args, &[])
}

fn ccl_with(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") {
            cmd.env_remove(key);
        }
    }
    cmd.args(args).current_dir(dir).env_remove("CARGO_MANIFEST_DIR").env_remove("CARGO_TARGET_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = output_within(cmd, LIMIT);
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn ring(tmp: &Path) -> std::path::PathBuf {
    let project = tmp.join("ring");
    copy_tree(&root().join("tests/fixtures/cmake-ring"), &project);
    project
}

/// The names `CTest` lists for the scratch build, as `CTest` says them.
fn ctest_names(build: &Path) -> Vec<String> {
    let out = Command::new("ctest").arg("--show-only=json-v1").current_dir(build).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["tests"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// Keys of `value` that `schema` does not know, as `config-schema` prints it.
fn unknown_keys(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let pattern = schema.get("patternProperties").and_then(Value::as_object).and_then(|m| m.values().next());
            for (key, item) in map {
                match props.and_then(|p| p.get(key)).or(pattern) {
                    Some(sub) => unknown_keys(item, sub, &format!("{path}.{key}"), out),
                    None => out.push(format!("{path}.{key}")),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                unknown_keys(item, schema.get("items").unwrap_or(&Value::Null), &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn init_writes_a_trial_per_ctest_test_and_run_reports_it() {
    let tmp = tempfile::tempdir().unwrap();
    let project = ring(tmp.path());
    let (ok, text) = ccl(tmp.path(), &["init", "--source", "ring"]);
    assert!(ok, "{text}");
    let config_path = project.join("ccl-coverage.json");
    let written = std::fs::read_to_string(&config_path).unwrap();
    let config: Value = serde_json::from_str(&written).unwrap();
    let names = ctest_names(&project.join("target/ccl-coverage-init"));
    assert!(names.len() >= 2, "{names:?}");
    // One exact ctest trial per CTest test, and nothing else.
    let programs = config["programs"].as_array().unwrap();
    let planned: Vec<(String, String, String)> = programs
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["kind"].as_str().unwrap().into(),
                p["filter"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected: Vec<(String, String, String)> =
        names.iter().map(|n| (n.clone(), "ctest".into(), format!("^{n}$$"))).collect();
    assert_eq!(planned, expected);
    assert!(
        text.contains(&format!(
            "wrote {}: {} trials from {} CTest tests",
            config_path.display(),
            names.len(),
            names.len()
        )),
        "{text}"
    );
    assert!(text.contains(&format!("next: ccl-coverage run --config {}", config_path.display())), "{text}");
    // Every target instrumented, the library found by its sections.
    assert_eq!(config["library"]["objects"], serde_json::json!(["{build_dir}/libring.so"]));
    assert_eq!(config["library"]["hash_exclude"], serde_json::json!(["target", "ccl-coverage.json"]));
    // Every key is one `config-schema` knows.
    let (ok, schema) = ccl(tmp.path(), &["config-schema"]);
    assert!(ok);
    let mut unknown = Vec::new();
    unknown_keys(&config, &serde_json::from_str(&schema).unwrap(), "", &mut unknown);
    assert!(unknown.is_empty(), "{unknown:?}");
    // `list` shows the trials, `run` builds, runs and reports them.
    let config_arg = config_path.display().to_string();
    let (ok, listed) = ccl(&project, &["list", "--config", &config_arg, "--format", "terse"]);
    assert!(ok, "{listed}");
    let trials: Vec<&str> = listed.lines().filter_map(|l| l.strip_suffix(": test")).collect();
    assert_eq!(trials, names.iter().map(String::as_str).collect::<Vec<_>>(), "{listed}");
    // The build cache where CCL_COV_CACHE_DIR says, not under CARGO_TARGET_DIR
    // (issue #49, item 2).
    let (cache, target) = (tmp.path().join("cache"), tmp.path().join("cargo-target"));
    let env = [("CCL_COV_CACHE_DIR", cache.as_path()), ("CARGO_TARGET_DIR", target.as_path())];
    let (ok, ran) = ccl_with(&project, &["run", "--config", &config_arg], &env);
    assert!(ok, "{ran}");
    assert!(ran.contains(&format!("{n} of {n} trials ran: {n} passed", n = names.len())), "{ran}");
    assert!(ran.contains("src/ring.c"), "the report names the library's source: {ran}");
    assert!(std::fs::read_dir(cache.join("builds")).unwrap().count() > 0);
    assert!(!target.exists(), "nothing under CARGO_TARGET_DIR");
    // The minimal suite's installed-binary form names the cache, never CARGO_TARGET_DIR.
    let suite: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join("target/ccl-coverage/ring/report/minimal-suite.json")).unwrap(),
    )
    .unwrap();
    let run = suite["run"].as_str().unwrap();
    assert!(run.contains(&format!("CCL_COV_CACHE_DIR={}", cache.display())), "{run}");
    assert!(run.contains(" ccl-coverage run --exact ") && !run.contains("CARGO_TARGET_DIR"), "{run}");
    assert!(!suite["command"].as_str().unwrap().contains("CARGO_TARGET_DIR"), "{suite}");

    // Never overwritten without --force.
    let (ok, text) = ccl(&project, &["init"]);
    assert!(!ok && text.contains(&format!("{} exists; pass --force to overwrite it", config_path.display())), "{text}");
    assert_eq!(std::fs::read_to_string(&config_path).unwrap(), written);

    // --split-gtest: a trial per top-level suite, as the binary lists its
    // tests under the CTest test's own filter; -D passed through.
    let (ok, text) = ccl(&project, &["init", "--force", "--split-gtest", "-DCMAKE_BUILD_TYPE=Debug"]);
    assert!(ok, "{text}");
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let configure = config["library"]["steps"][0]["argv"].as_array().unwrap();
    assert_eq!(configure.last().unwrap(), "-DCMAKE_BUILD_TYPE=Debug");
    let binary = project.join("target/ccl-coverage-init/ring_test");
    let listing = Command::new(&binary)
        .args(["--gtest_filter=RingTest.*", "--gtest_list_tests"])
        .env("LLVM_PROFILE_FILE", tmp.path().join("l.profraw"))
        .output()
        .unwrap();
    let listed: Vec<String> = String::from_utf8(listing.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| format!("RingTest.{}", l.trim()))
        .collect();
    let push = config["programs"].as_array().unwrap().iter().find(|p| p["name"] == "ring_push.RingTest").unwrap();
    assert_eq!(push["kind"], "gtest");
    assert_eq!(push["binary"], "ring_test");
    assert_eq!(push["filter"].as_str().unwrap(), listed.join(":"));
    let (ok, listed) = ccl(&project, &["list", "--config", &config_arg, "--format", "terse"]);
    assert!(
        ok && listed.contains("ring_push.RingTest") && listed.contains("ring_fill.Capacities_RingFill"),
        "{listed}"
    );
}

#[test]
fn init_explains_a_project_it_cannot_read() {
    let tmp = tempfile::tempdir().unwrap();
    // No CMake.
    let (ok, text) = ccl(tmp.path(), &["init"]);
    assert!(!ok);
    assert!(
        text.contains("has no CMakeLists.txt: init reads a CMake project (give its folder with --source DIR)"),
        "{text}"
    );
    assert!(!tmp.path().join("ccl-coverage.json").exists());
    // No CTest tests.
    let project = ring(tmp.path());
    let lists = project.join("CMakeLists.txt");
    let cmake = std::fs::read_to_string(&lists).unwrap();
    let cut = cmake.find("enable_testing()").unwrap();
    std::fs::write(&lists, &cmake[..cut]).unwrap();
    let (ok, text) = ccl(&project, &["init"]);
    assert!(!ok);
    assert!(text.contains("CTest lists no test in"), "{text}");
    assert!(text.contains("add enable_testing() and add_test()"), "{text}");
    assert!(!project.join("ccl-coverage.json").exists());
    // A configure that fails: its error line first.
    std::fs::write(&lists, format!("{cmake}\nmessage(FATAL_ERROR \"ring needs libfoo\")\n")).unwrap();
    let (ok, text) = ccl(&project, &["init"]);
    assert!(!ok);
    assert!(text.contains("the configure step failed (exit status 1)"), "{text}");
    let errors = &text[text.find("error lines").expect(&text)..];
    assert!(errors.lines().nth(1).unwrap().contains("CMake Error at CMakeLists.txt"), "{text}");
    // A -D that is not NAME=VALUE.
    let (ok, text) = ccl(&project, &["init", "-DNOVALUE"]);
    assert!(!ok && text.contains("-DNOVALUE: expected -DNAME=VALUE"), "{text}");
    // A scratch folder init did not make is not built in.
    let other = tmp.path().join("other");
    copy_tree(&root().join("tests/fixtures/cmake-ring"), &other);
    std::fs::create_dir_all(other.join("target/ccl-coverage-init")).unwrap();
    let (ok, text) = ccl(&other, &["init"]);
    assert!(!ok && text.contains("is not init's scratch build"), "{text}");
}
