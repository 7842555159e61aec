//! What both harness binaries read from their environment: the project root,
//! the config, the workspace and the switches. Paths are resolved at run time,
//! not compiled in, so the binaries also run from a checkout on another
//! machine (the GPU host has no cargo).

use crate::config::{self, DeviceMode, LoadedConfig};
use crate::device;
use crate::env_names::{self, Known, Lookup, ValueKind};
use crate::error::{Context as _, Error, Result};
use crate::exec::redact;
use crate::reporter::Entry;
use crate::reporter::Terminal;
use crate::workspace::Workspace;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The overlay laid over an upstream `test_runner` config, relative to the
/// project root, unless `CCL_COV_OVERLAY` names another or the config has
/// one beside it (`x.json` → `x.overlay.json`).
pub(crate) const DEFAULT_OVERLAY_PATH: &str = "configs/rccl-overlay.json";

#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The ccl-coverage checkout (`CARGO_MANIFEST_DIR` under cargo, else the
    /// current directory).
    pub(crate) root: PathBuf,
    pub(crate) loaded: LoadedConfig,
    pub(crate) workspace: Workspace,
    /// `target/ccl-coverage`: build cache, rank slots, default workspaces.
    pub(crate) state_dir: PathBuf,
    pub(crate) device_mode: DeviceMode,
    /// `CCL_COV_COVERAGE=off` builds and runs without instrumentation (to
    /// measure what coverage costs); on by default.
    pub(crate) coverage: bool,
    pub(crate) dry_run: bool,
    /// `CCL_COV_DRY_RUN=json`: the dry run as one JSON document.
    pub(crate) dry_run_json: bool,
    /// `CCL_COV_RERUN_FAILED=1` (upstream's `--rerun-failed`): a failed
    /// upstream trial runs once more with its `rerun_env_variables`.
    pub(crate) rerun_failed: bool,
    /// `CCL_COV_BUILD_DIR`: an existing instrumented library build.
    pub(crate) existing_build: Option<PathBuf>,
    /// `CCL_COV_TESTS_DIR`: existing test binaries.
    pub(crate) existing_tests: Option<PathBuf>,
    /// `CCL_COV_JOBS`: build parallelism (`{jobs}`); all cores by default.
    pub(crate) jobs: usize,
    /// Whether trials run `-n 1 -w 0` under coverage (config
    /// `iterations.trim_under_coverage`, `CCL_COV_TRIM_ITERATIONS` on|off).
    pub(crate) trim_iterations: bool,
    /// `CCL_COV_INCREMENTAL_MERGE` (on by default): merge each trial's raw
    /// profiles when it ends; off leaves them all for the report.
    pub(crate) incremental_merge: bool,
    /// `CCL_COV_KEEP_RAW=1`: keep raw profiles after merging them.
    pub(crate) keep_raw: bool,
    /// `CCL_COV_MERGE_OVERLAP` (on by default): a trial's merge runs while the
    /// next trial runs. Off merges before the trial gives its rank slots back,
    /// so at most one trial's raw profiles are ever on disk.
    pub(crate) merge_overlap: bool,
    /// `CCL_COV_PARTITION`: the shard of the trials this run runs.
    pub(crate) partition: Option<crate::plan::Partition>,
    /// `CCL_COV_HEARTBEAT_S`: how often a long trial reports that it still runs.
    pub(crate) heartbeat: std::time::Duration,
    /// `CCL_COV_RETRIES` (`--retries`): how many times a failed trial runs
    /// again; one that passes on a later attempt is flaky (nextest's rule).
    pub(crate) retries: u32,
    /// The executable that supervises each trial: this one (every entry
    /// point can act as the supervisor, `supervisor.rs`). `/proc/self/exe`
    /// still works when cargo rebuilds the binary during a run.
    pub(crate) supervisor: PathBuf,
    pub(crate) report: ReportSettings,
    /// The command the person ran, which hints name.
    pub(crate) entry: Entry,
}

/// What the report's steps are asked to do, read from the environment once,
/// with the rest of the context (whose check has refused a wrong value of
/// any of them already), not by each step when it runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReportSettings {
    /// `CCL_COV_FAIL_UNDER_<METRIC>` as set, by variable name; the checker reads the percentage.
    pub(crate) bars: BTreeMap<String, String>,
    /// `CCL_COV_DIFF_BASE`: the git revision changed lines are counted against.
    pub(crate) diff_base: Option<String>,
    /// `CCL_COV_FAIL_UNDER_DIFF`, as set.
    pub(crate) fail_under_diff: Option<String>,
    /// `CCL_COV_BASELINE`: an earlier workspace or its `report/coverage.lcov`.
    pub(crate) baseline: Option<PathBuf>,
    /// `CCL_COV_FAIL_ON_LOST`: the baseline step fails if any line lost its coverage.
    pub(crate) fail_on_lost: bool,
    /// `CCL_COV_ATTRIBUTION_EXPORTS`: llvm-cov per trial, not the mapping read once.
    pub(crate) attribution_exports: bool,
    /// `GITHUB_STEP_SUMMARY`: a file the Markdown summary is appended to.
    pub(crate) step_summary: Option<PathBuf>,
    /// The GitHub Actions run's page (`GITHUB_SERVER_URL`, `GITHUB_REPOSITORY`,
    /// `GITHUB_RUN_ID`), which lists its artifacts: where summary.md sends
    /// the reader for the HTML.
    pub(crate) ci_run_url: Option<String>,
    /// `INSTA_UPDATE` asks insta to write a config's snapshot into its project.
    pub(crate) insta_update: bool,
}

impl ReportSettings {
    fn from_env(env: Lookup<'_>) -> Result<ReportSettings> {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        let bars = env_names::FAIL_UNDER
            .iter()
            .map(|(_, name)| *name)
            .chain([env_names::FAIL_UNDER_DEVICE_BRANCHES])
            .filter_map(|name| env(name).map(|value| (name.to_string(), value)))
            .collect();
        Ok(ReportSettings {
            bars,
            diff_base: set("CCL_COV_DIFF_BASE"),
            fail_under_diff: env("CCL_COV_FAIL_UNDER_DIFF"),
            baseline: set("CCL_COV_BASELINE").map(PathBuf::from),
            fail_on_lost: switch("CCL_COV_FAIL_ON_LOST", false)?,
            attribution_exports: switch("CCL_COV_ATTRIBUTION_EXPORTS", false)?,
            step_summary: set("GITHUB_STEP_SUMMARY").map(PathBuf::from),
            ci_run_url: match (set("GITHUB_SERVER_URL"), set("GITHUB_REPOSITORY"), set("GITHUB_RUN_ID")) {
                (Some(server), Some(repo), Some(run)) => Some(format!("{server}/{repo}/actions/runs/{run}")),
                _ => None,
            },
            insta_update: env("INSTA_UPDATE").is_some_and(|u| matches!(u.as_str(), "always" | "1" | "force")),
        })
    }
}

impl Context {
    /// Where trial supervisors keep the records of their trials' processes
    /// (`proctree::ChildrenRecord`); swept at the start of every run.
    pub(crate) fn children_dir(&self) -> PathBuf {
        self.state_dir.join("children")
    }

    /// Reads `CCL_COV_CONFIG` (and `CCL_COV_OVERLAY` for an upstream config),
    /// `CCL_COV_WORKSPACE`, `CCL_COV_DEVICE_COVERAGE` and `CCL_COV_DRY_RUN`
    /// from the process environment.
    pub(crate) fn from_env(entry: Entry) -> Result<Context> {
        let env = config::process_env;
        let root = match env("CARGO_MANIFEST_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => project_root(),
        };
        let config_path = locate_config(&root)?;
        let loaded = load_checked(&root, &config_path)?;
        let target = env("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |t| absolute(&root, Path::new(&t)));
        let state_dir = env(env_names::CACHE_DIR)
            .filter(|v| !v.is_empty())
            .map_or_else(|| target.join("ccl-coverage"), |d| absolute(&root, Path::new(&d)));
        let workspace = match env("CCL_COV_WORKSPACE").filter(|v| !v.is_empty()) {
            Some(ws) => Workspace::new(&absolute(&root, Path::new(&ws)))?,
            None => Workspace::new(&default_workspace(&loaded, &root, &state_dir))?,
        };
        device::check_target(&loaded.config.coverage.device).with_context(|| config_path.display().to_string())?;
        let device_mode = device::requested_mode(&loaded.config.coverage.device, &env)?;
        // Read by each trial's supervisor; a wrong value is refused here, before anything runs.
        crate::exec::cgroup::Mode::parse(env(env_names::CGROUP).as_deref())?;
        let dry_run = env("CCL_COV_DRY_RUN").is_some_and(|v| !v.is_empty() && v != "0");
        let dry_run_json = env("CCL_COV_DRY_RUN").is_some_and(|v| v.eq_ignore_ascii_case("json"));
        let rerun_failed = switch("CCL_COV_RERUN_FAILED", false)?;
        let coverage = switch("CCL_COV_COVERAGE", true)?;
        let dir_env = |var: &str, field: &Option<String>| {
            env(var)
                .filter(|v| !v.is_empty())
                .map(|d| absolute(&root, Path::new(&d)))
                .or_else(|| field.as_deref().map(|d| loaded.resolve(d)))
        };
        let existing_build = dir_env("CCL_COV_BUILD_DIR", &loaded.config.library.existing_build);
        let existing_tests = dir_env("CCL_COV_TESTS_DIR", &loaded.config.tests.existing_bin_dir);
        let number = |name: &str| env_names::positive(name, &env(name).unwrap_or_default());
        let jobs = match number("CCL_COV_JOBS")? {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        };
        let trim_iterations = switch("CCL_COV_TRIM_ITERATIONS", loaded.config.iterations.trim_under_coverage)?;
        let incremental_merge = switch("CCL_COV_INCREMENTAL_MERGE", true)?;
        let keep_raw = switch("CCL_COV_KEEP_RAW", false)?;
        let merge_overlap = switch("CCL_COV_MERGE_OVERLAP", true)?;
        let heartbeat = std::time::Duration::from_secs(number("CCL_COV_HEARTBEAT_S")?.unwrap_or(60));
        let retries = env_names::count("CCL_COV_RETRIES", &env("CCL_COV_RETRIES").unwrap_or_default())?.unwrap_or(0);
        let retries = u32::try_from(retries)
            .map_err(|_| Error::new(format!("CCL_COV_RETRIES={retries} is more retries than make sense")))?;
        let partition = match env("CCL_COV_PARTITION").filter(|v| !v.is_empty()) {
            Some(text) => {
                Some(crate::plan::Partition::parse(&text).map_err(|e| Error::new(format!("CCL_COV_PARTITION: {e}")))?)
            }
            None => None,
        };
        // What the terminal is told (`CCL_COV_COLOR`, `CCL_COV_VERBOSITY`): the reporter's, from here on.
        crate::reporter::configure({
            use std::io::IsTerminal;
            Terminal::from_env(&env, std::io::stderr().is_terminal()).map_err(Error::new)?
        });
        Ok(Context {
            root,
            loaded,
            workspace,
            state_dir,
            device_mode,
            coverage,
            dry_run,
            dry_run_json,
            rerun_failed,
            existing_build,
            existing_tests,
            jobs,
            trim_iterations,
            incremental_merge,
            keep_raw,
            merge_overlap,
            partition,
            heartbeat,
            retries,
            supervisor: PathBuf::from("/proc/self/exe"),
            entry,
            report: ReportSettings::from_env(&env)?,
        })
    }

    pub(crate) fn config(&self) -> &config::Config {
        &self.loaded.config
    }
}

/// The config `CCL_COV_CONFIG` names, relative to the current folder, or
/// the default; a config named but not there is an error, never the default.
fn locate_config(root: &Path) -> Result<PathBuf> {
    let env = config::process_env;
    let given = env("CCL_COV_CONFIG").filter(|v| !v.is_empty());
    let config_path = match &given {
        Some(p) => absolute(root, Path::new(p)),
        None => root.join(config::DEFAULT_CONFIG_PATH),
    };
    // A config named but not there is an error, never the embedded default.
    if let Some(given) = &given
        && !config_path.exists()
    {
        let tried = if Path::new(given).is_absolute() {
            String::new()
        } else {
            let cwd = std::env::current_dir().unwrap_or_else(|_| root.to_path_buf());
            format!(", relative to the current folder {}", cwd.display())
        };
        return Err(Error::new(format!(
            "{}: no such config: looked for {}{tried}",
            env_names::setting("CCL_COV_CONFIG", given),
            config_path.display()
        )));
    }
    Ok(config_path)
}

/// The config with its overlay, checked: its plan, the environment against
/// every known name (and those the config looks up), and the command line's
/// `--ignore-filename-regex` added to the config's.
fn load_checked(root: &Path, config_path: &Path) -> Result<LoadedConfig> {
    let env = config::process_env;
    let overlay = match env("CCL_COV_OVERLAY").filter(|v| !v.is_empty()) {
        Some(p) => absolute(root, Path::new(&p)),
        None => Some(config_path.with_extension("overlay.json"))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| root.join(DEFAULT_OVERLAY_PATH)),
    };
    // The names the config looks up are the user's own: allowed.
    let referenced = RefCell::new(BTreeSet::new());
    let mut loaded = {
        let config_env = config::config_env(root);
        let lookup = |name: &str| {
            referenced.borrow_mut().insert(name.to_string());
            config_env(name)
        };
        config::load_any(config_path, &overlay, &lookup)?
    };
    crate::plan::check(&loaded)?;
    check_env(std::env::vars_os(), &referenced.into_inner())?;
    // The command line's `--ignore-filename-regex`, added to the config's.
    if let Some(re) = env("CCL_COV_IGNORE_FILENAME_REGEX").filter(|v| !v.is_empty()) {
        regex::Regex::new(&re)
            .with_context(|| format!("CCL_COV_IGNORE_FILENAME_REGEX={re:?} is not a regular expression"))?;
        loaded.config.report.ignore_filename_regex.push(re);
    }
    Ok(loaded)
}

/// The workspace without `CCL_COV_WORKSPACE`: `target/ccl-coverage/<name>`
/// of the config's project ([`LoadedConfig::project_dir`]), beside the
/// user's sources; for a config of the harness's own checkout, its state
/// folder's (which `CARGO_TARGET_DIR` moves).
fn default_workspace(loaded: &LoadedConfig, root: &Path, state_dir: &Path) -> PathBuf {
    let project = loaded.project_dir();
    let base = if crate::workspace::normalize(&project) == crate::workspace::normalize(root) {
        state_dir.to_path_buf()
    } else {
        project.join("target").join("ccl-coverage")
    };
    base.join(loaded.config.name.as_str())
}

/// An on/off switch from the environment: `on`/`1`, `off`/`0`, or unset/empty for `default`.
fn switch(name: &str, default: bool) -> Result<bool> {
    Ok(env_names::switch(name, &config::process_env(name).unwrap_or_default())?.unwrap_or(default))
}

/// Every `CCL_COV_*` name: the crate's, then each device backend's own.
pub(crate) fn known_env() -> impl Iterator<Item = &'static Known> {
    env_names::KNOWN.iter().chain(device::env_names())
}

fn lookup_known(name: &str) -> Option<&'static Known> {
    known_env().find(|k| k.name == name)
}

/// Refuses every `CCL_COV_*` variable of `vars` (the name's case aside) that
/// is neither known ([`known_env`]) nor looked up by the config
/// (`referenced`), and every known one whose value is not of its kind: a
/// misspelt or out-of-range bar would otherwise switch its check off.
fn check_env(vars: impl IntoIterator<Item = (OsString, OsString)>, referenced: &BTreeSet<String>) -> Result<()> {
    let mut problems = Vec::new();
    for (name, value) in vars {
        let name = name.to_string_lossy();
        let ours = name.get(..env_names::PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(env_names::PREFIX));
        if !ours || referenced.contains(&*name) {
            continue;
        }
        let Some(known) = lookup_known(&name) else {
            let candidates = known_env().map(|k| k.name).chain(referenced.iter().map(String::as_str));
            let guess = match env_names::did_you_mean(&name, candidates) {
                Some(g) => match lookup_known(g) {
                    Some(k) => format!("did you mean {g}? ({})", k.meaning),
                    None => format!("did you mean {g}? (the config reads it)"),
                },
                None => "no ccl-coverage variable is called so.".to_string(),
            };
            problems.push(format!(
                "unknown environment variable {name}: {guess} Unknown CCL_COV_* names are refused, so that a \
                 misspelt one cannot switch a check off; docs/environment.md lists the known ones"
            ));
            continue;
        };
        let Some(value) = value.to_str() else {
            problems.push(format!("{name} is not UTF-8 text"));
            continue;
        };
        let checked = match known.kind {
            ValueKind::Text => Ok(()),
            ValueKind::Switch => env_names::switch(&name, value).map(drop),
            // Empty is what an unset CI secret or variable gives: the bar would vanish silently.
            ValueKind::Percent if value.is_empty() => Err(Error::new(format!(
                "{name} is set but empty (as an unset CI secret or variable gives it): its check would be skipped silently; set a percentage from 0 to 100, or unset {name}"
            ))),
            ValueKind::Percent => env_names::percent(&name, value).map(drop),
            ValueKind::Positive => env_names::positive(&name, value).map(drop),
            ValueKind::Count => env_names::count(&name, value).map(drop),
            ValueKind::Globs => redact::Rules::with(value).map(drop),
        };
        problems.extend(checked.err().map(|e| e.to_string()));
    }
    if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("\nccl-coverage: "))) }
}

/// `path` made absolute against the current directory, falling back to `root`.
fn absolute(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir().map_or_else(|_| root.join(path), |cwd| cwd.join(path))
}

/// The project without cargo's `CARGO_MANIFEST_DIR` (a binary run
/// directly): the current folder or the nearest one above it that holds the
/// default config (so `src/` finds the checkout, and a tree carried to a
/// machine without cargo is its own root); else the checkout this binary was
/// built from, while it exists; else the current folder.
fn project_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    if let Some(dir) = cwd.ancestors().find(|d| d.join(config::DEFAULT_CONFIG_PATH).is_file()) {
        return dir.to_path_buf();
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("Cargo.toml").is_file() { built } else { cwd }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_workspace_and_snapshots_sit_beside_the_user_s_project() {
        let load = |path: &str| config::load_str(config::DEFAULT_CONFIG_TEXT, Path::new(path), &|_| None).unwrap();
        let (root, state) = (Path::new("/tool"), Path::new("/tool/target/ccl-coverage"));
        let own = load("/home/u/vec/ccl-coverage.json");
        assert_eq!(default_workspace(&own, root, state), Path::new("/home/u/vec/target/ccl-coverage/local"));
        assert_eq!(own.snapshots_dir(), Path::new("/home/u/vec/snapshots"));
        let in_configs = load("/home/u/vec/configs/cov.json");
        assert_eq!(default_workspace(&in_configs, root, state), Path::new("/home/u/vec/target/ccl-coverage/local"));
        assert_eq!(in_configs.snapshots_dir(), Path::new("/home/u/vec/snapshots"));
        // The harness's own configs keep its state folder (CARGO_TARGET_DIR).
        let shipped = load("/tool/configs/local.json");
        assert_eq!(default_workspace(&shipped, root, Path::new("/t/ccl-coverage")), Path::new("/t/ccl-coverage/local"));
        assert_eq!(shipped.snapshots_dir(), Path::new("/tool/snapshots"));
    }

    fn check(vars: &[(&str, &str)], referenced: &[&str]) -> Result<()> {
        let vars = vars.iter().map(|(k, v)| (OsString::from(k), OsString::from(v)));
        check_env(vars, &referenced.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn unknown_names_and_wrong_values_are_refused_and_the_config_s_names_allowed() {
        let err = check(&[("CCL_COV_FAIL_UNDER_LINE", "99")], &[]).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "unknown environment variable CCL_COV_FAIL_UNDER_LINE: did you mean CCL_COV_FAIL_UNDER_LINES? ("
            ),
            "{err}"
        );
        assert!(
            check(&[("CCL_COV_MY_TOOLS", "/t"), ("PATH", "/bin"), ("CCL_COV_JOBS", "2")], &["CCL_COV_MY_TOOLS"])
                .is_ok()
        );
        let err = check(&[("CCL_COV_MY_TOOL", "/t")], &["CCL_COV_MY_TOOLS"]).unwrap_err().to_string();
        assert!(err.contains("did you mean CCL_COV_MY_TOOLS? (the config reads it)"), "{err}");
        let err = check(&[("CCL_COV_FAIL_UNDER_LINES", "150"), ("CCL_COV_JOBS", "x")], &[]).unwrap_err().to_string();
        assert_eq!(
            err,
            "CCL_COV_FAIL_UNDER_LINES=\"150\" is not a percentage: expected a number from 0 to 100\n\
             ccl-coverage: CCL_COV_JOBS=\"x\" is not a number: expected a whole number above 0",
            "every problem, one a line"
        );
        assert!(check(&[("CCL_COV_FAIL_ON_LOST", "yes")], &[]).unwrap_err().to_string().contains("not a switch"));
        assert!(check(&[("CCL_COV_REDACT", "[x")], &[]).unwrap_err().to_string().contains("not a glob pattern"));
        assert!(check(&[("CCL_COV_DIFF_BASE", ""), ("CCL_COV_TRIAL_TOKEN", "1-2-3")], &[]).is_ok());
        let err = check(&[("CCL_COV_FAIL_UNDER_LINES", "")], &[]).unwrap_err().to_string();
        assert!(err.starts_with("CCL_COV_FAIL_UNDER_LINES is set but empty"), "an empty bar is refused: {err}");
    }
}
