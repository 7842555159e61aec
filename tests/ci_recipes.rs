//! The CI recipes (`docs/ci/github-actions.yml`, `docs/ci/gitlab-ci.yml`):
//! docs/ci/README.md shows them as they are, they parse, they keep reporting when
//! coverage drops, and their harness steps run here as written, on the
//! default config, with the bar raised past what it covers. GitHub and
//! GitLab themselves are not reachable from here (nor is actionlint): the
//! `uses:` actions are checked by what they are given, not run.

mod support;

use regex::Regex;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::root;
use yaml_rust2::{Yaml, YamlLoader};

const RECIPES: [&str; 2] = ["docs/ci/github-actions.yml", "docs/ci/gitlab-ci.yml"];

fn load(path: &str) -> Yaml {
    let text = fs::read_to_string(root().join(path)).unwrap();
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"));
    assert_eq!(docs.len(), 1, "{path}: one document");
    docs.remove(0)
}

fn text(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

/// `if:` of a step, `""` when it has none.
fn condition(step: &Yaml) -> &str {
    step["if"].as_str().unwrap_or("")
}

#[test]
fn the_readme_shows_each_recipe_as_it_is() {
    let readme = fs::read_to_string(root().join("docs/ci/README.md")).unwrap();
    for recipe in RECIPES {
        let marker = format!("<!-- ci: {recipe} -->\n```yaml\n");
        let at =
            readme.find(&marker).unwrap_or_else(|| panic!("docs/ci/README.md does not show {recipe} ({marker:?})"));
        let block = &readme[at + marker.len()..];
        let block = &block[..block.find("```\n").expect("the block ends")];
        assert_eq!(
            block,
            fs::read_to_string(root().join(recipe)).unwrap(),
            "docs/ci/README.md's copy of {recipe} differs"
        );
    }
}

/// What holds a recipe to its purpose: every step that reports runs when an
/// earlier one failed, the job still fails at the end, the HTML is kept as
/// an artifact, cargo is cached.
#[test]
fn the_recipes_report_when_coverage_drops_and_fail_at_the_end() {
    let gh = load(RECIPES[0]);
    let job = &gh["jobs"]["coverage"];
    let steps = job["steps"].as_vec().expect("steps");
    let coverage = steps.iter().position(|s| s["id"].as_str() == Some("coverage")).expect("a step with id coverage");
    assert_eq!(steps[coverage]["continue-on-error"].as_bool(), Some(true), "the reports must run after a drop");
    assert!(text(&steps[coverage]["run"]).contains("ccl-coverage run"));
    let uses = |s: &Yaml| s["uses"].as_str().unwrap_or("").to_string();
    for step in &steps[coverage + 1..] {
        assert!(condition(step).contains("!cancelled()"), "a step after Coverage runs only on success: {step:?}");
    }
    let after: Vec<String> = steps[coverage + 1..].iter().map(uses).collect();
    assert!(after.iter().any(|u| u.starts_with("actions/upload-artifact@")), "no report artifact");
    assert!(after.iter().any(|u| u.starts_with("codecov/codecov-action@")), "no Codecov upload");
    assert!(steps[..coverage].iter().any(|s| uses(s).starts_with("Swatinem/rust-cache@")), "cargo is not cached");
    let last = steps.last().unwrap();
    assert!(condition(last).contains("steps.coverage.outcome == 'failure'"), "the job does not fail at the end");
    assert!(text(&last["run"]).contains("exit 1"));
    let artifact = steps.iter().find(|s| uses(s).starts_with("actions/upload-artifact@")).unwrap();
    assert!(text(&artifact["with"]["path"]).lines().any(|l| l.trim() == "target/coverage/report/"));
    assert_eq!(job["env"]["CCL_COV_WORKSPACE"].as_str(), Some("target/coverage"));

    let gl = load(RECIPES[1]);
    let job = &gl["coverage"];
    assert_eq!(job["artifacts"]["when"].as_str(), Some("always"), "GitLab drops the artifacts of a failed job");
    let report = &job["artifacts"]["reports"]["coverage_report"];
    assert_eq!(report["coverage_format"].as_str(), Some("cobertura"));
    assert_eq!(report["path"].as_str(), Some("target/coverage/report/cobertura.xml"));
    assert!(job["cache"]["paths"].as_vec().unwrap().iter().any(|p| p.as_str() == Some(".cargo/")));
}

/// The values of the workflow's `${{ }}` expressions on a push event, given
/// whether the Coverage step failed. An expression not listed fails the
/// test: a new one must be thought through here.
fn expression(expr: &str, coverage_failed: bool) -> String {
    match expr {
        "github.base_ref && format('--diff-base origin/{0}', github.base_ref) || ''" => String::new(),
        "!cancelled()" => "true".into(),
        "!cancelled() && github.event_name == 'pull_request'" => "false".into(),
        "!cancelled() && steps.coverage.outcome == 'failure'" => coverage_failed.to_string(),
        "secrets.CODECOV_TOKEN" => String::new(),
        other => panic!("the test does not know the expression ${{{{ {other} }}}}"),
    }
}

fn substitute(text: &str, coverage_failed: bool) -> String {
    let re = Regex::new(r"\$\{\{\s*(.*?)\s*\}\}").unwrap();
    re.replace_all(text, |c: &regex::Captures| expression(&c[1], coverage_failed)).into_owned()
}

/// Commands the recipes run that set the machine up, not the harness:
/// `.ci/run` has done them here (and the test's own binary is the one
/// `cargo install --path .` would put on PATH).
const SETUP: [&str; 6] = [
    "apt-get ",
    "git config --global",
    "scripts/install-deps",
    "cargo install --path .",
    "curl -sSf https://sh.rustup.rs",
    "export PATH=\"$CARGO_HOME/bin:$PATH\"",
];

fn is_setup(command: &str) -> bool {
    SETUP.iter().any(|s| command.trim_start().starts_with(s))
}

/// Runs `script` with `bash -e` (what a runner does with a `run:` block) in
/// `cwd`, with `env`, the test's binary first on PATH; (success, output).
fn shell(script: &str, cwd: &Path, env: &BTreeMap<String, String>) -> (bool, String) {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ccl-coverage"));
    let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("bash");
    cmd.args(["-e", "-c", script]).current_dir(cwd).env("PATH", path).env("CARGO_MANIFEST_DIR", root());
    for (key, _) in std::env::vars() {
        if key.starts_with("CCL_COV_") && key != "CCL_COV_CGROUP" || key.starts_with("GITHUB_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env);
    let out = support::output_within(cmd, Duration::from_secs(900));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Both recipes' harness steps, as written, on the default config, in a
/// fresh folder standing for the checkout (the config and build cache stay
/// the checkout's), with the bar at 100 %: the report is still written and
/// handed over, the summary reaches the job's page and names where the
/// pages are, what the artifacts and Codecov are given exists, and the job
/// fails at its end, as GitLab's does.
#[test]
fn the_recipes_harness_steps_run_here_and_hold_when_coverage_drops() {
    let checkout = tempfile::tempdir().unwrap();
    let cwd = checkout.path();
    let gh = load(RECIPES[0]);
    let job = &gh["jobs"]["coverage"];
    let mut env: BTreeMap<String, String> = job["env"]
        .as_hash()
        .unwrap()
        .iter()
        .map(|(k, v)| (text(k).to_string(), v.as_str().map_or_else(|| v.as_i64().unwrap().to_string(), str::to_string)))
        .collect();
    assert_eq!(env.insert("CCL_COV_FAIL_UNDER_LINES".into(), "100".into()).as_deref(), Some("70"));
    let summary = cwd.join("step-summary.md");
    env.insert("GITHUB_STEP_SUMMARY".into(), summary.display().to_string());
    env.insert("GITHUB_SERVER_URL".into(), "https://github.com".into());
    env.insert("GITHUB_REPOSITORY".into(), "o/r".into());
    env.insert("GITHUB_RUN_ID".into(), "7".into());
    let mut coverage_failed = false;
    let mut ran = Vec::new();
    for step in job["steps"].as_vec().unwrap() {
        if !substitute(condition(step), coverage_failed).split("&&").all(|c| c.trim() != "false") {
            continue;
        }
        if let Some(with) = step["with"].as_hash() {
            // An action's inputs that name the report: they must be there.
            for key in ["path", "files"] {
                let Some(value) = with.get(&Yaml::String(key.into())) else { continue };
                for p in text(value).lines().map(str::trim).filter(|p| !p.is_empty()) {
                    assert!(cwd.join(p).exists(), "{} is given {p}, which the run did not write", uses(step));
                }
            }
        }
        let Some(script) = step["run"].as_str() else { continue };
        if is_setup(script) {
            continue;
        }
        let (ok, out) = shell(&substitute(script, coverage_failed), cwd, &env);
        let name = step["name"].as_str().unwrap_or(script).to_string();
        if step["id"].as_str() == Some("coverage") {
            assert!(!ok, "the run passed a 100% bar:\n{out}");
            assert!(out.contains("lines") && out.contains("is under CCL_COV_FAIL_UNDER_LINES=100"), "{out}");
            coverage_failed = true;
        } else if name == "Coverage gate" {
            assert!(!ok && out.contains("the Coverage step failed"), "the job did not fail at its end:\n{out}");
        } else {
            assert!(ok, "step {name} failed:\n{out}");
        }
        ran.push(name);
    }
    assert_eq!(ran, ["Coverage", "Coverage gate"], "the harness steps that ran");
    let lcov = fs::read_to_string(cwd.join("lcov.info")).expect("the lcov of a drop is handed over");
    assert!(lcov.contains("SF:ccl/src/init.cc"), "SF: paths relative to tests/fixtures (codecov.yml's fix)");
    let md = fs::read_to_string(&summary).unwrap();
    assert!(md.contains("## Coverage: local"), "{md}");
    assert!(md.contains("in the report artifact of [this run](https://github.com/o/r/actions/runs/7)"), "{md}");
    let report = cwd.join("target/coverage/report");
    for page in ["html/index.html", "attribution/index.html", "cobertura.xml", "codecov.json"] {
        assert!(report.join(page).is_file(), "the artifact lacks report/{page}");
    }

    // GitLab: its script, as written, in the same folder (the trials run again).
    let gl = load(RECIPES[1]);
    let job = &gl["coverage"];
    let mut env: BTreeMap<String, String> = job["variables"]
        .as_hash()
        .unwrap()
        .iter()
        .map(|(k, v)| (text(k).to_string(), text(v).replace("$CI_PROJECT_DIR", &cwd.display().to_string())))
        .collect();
    env.insert("CCL_COV_FAIL_UNDER_LINES".into(), "100".into());
    let mut log = String::new();
    let mut failed = false;
    for script in job["script"].as_vec().unwrap().iter().map(text).filter(|s| !is_setup(s)) {
        let (ok, out) = shell(script, cwd, &env);
        failed |= !ok;
        log.push_str(&out);
    }
    assert!(failed, "the job passed a 100% bar:\n{log}");
    let pattern = text(&job["coverage"]);
    let re = Regex::new(&format!("(?m){}", pattern.trim_matches('/'))).unwrap();
    let figure = re.captures(&log).unwrap_or_else(|| panic!("coverage: {pattern} finds no figure in:\n{log}"));
    assert!(figure[1].parse::<f64>().is_ok_and(|p| p > 0.0 && p < 100.0), "{}", &figure[0]);
    for path in job["artifacts"]["paths"].as_vec().unwrap().iter().map(text).chain([
        text(&job["artifacts"]["reports"]["coverage_report"]["path"]),
        text(&job["artifacts"]["reports"]["junit"]),
    ]) {
        assert!(cwd.join(path).exists(), "GitLab's artifacts name {path}, which the run did not write");
    }
    let cobertura = fs::read_to_string(cwd.join("target/coverage/report/cobertura.xml")).unwrap();
    assert!(cobertura.contains("<coverage ") && cobertura.contains("filename=\"ccl/src/init.cc\""), "not Cobertura");
}

fn uses(step: &Yaml) -> &str {
    step["uses"].as_str().unwrap_or("")
}
