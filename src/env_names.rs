//! Environment variables that several stages name: set by one, read or
//! removed by another. Kept here so that no stage spells one out again;
//! and the one list of every `CCL_COV_*` name ([`KNOWN`]), against which the
//! context checks the environment.

use crate::bail;
use crate::error::Result;

/// How a stage reads the environment: `std::env::var` in the binaries, a
/// map in tests, so that nothing below the context reads the process's own.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Marks every process of one trial (and of one build step), so none escapes
/// the kill; its value names the harness that owns it (`proctree.rs`).
pub const TRIAL_TOKEN: &str = "CCL_COV_TRIAL_TOKEN";

/// Inherited from an instrumented parent, it makes the profile runtime skip
/// creating the profile directory (compiler-rt's `InstrProfilingFile.c`
/// initialises once per process tree): never pass it on.
pub(crate) const PROFILE_INIT_ONCE: &str = "__LLVM_PROFILE_RT_INIT_ONCE";

/// Where the profile runtime writes a process's raw profile.
pub(crate) const PROFILE_FILE: &str = "LLVM_PROFILE_FILE";

/// Set (to a JSON spec) in the environment of a trial supervisor process
/// (`supervisor.rs`).
pub const SUPERVISE: &str = "CCL_COV_SUPERVISE";

/// `auto`, `on` or `off`: whether each trial runs in a cgroup v2 of its own
/// (`exec/cgroup.rs`).
pub(crate) const CGROUP: &str = "CCL_COV_CGROUP";

/// Set by nextest for every test process of one run: they share a workspace
/// (`workspace/lock.rs`).
pub(crate) const NEXTEST_RUN_ID: &str = "NEXTEST_RUN_ID";

/// Extra glob patterns of secret variable names, comma-separated; read by
/// `redact.rs`, checked at load by the context.
pub(crate) const REDACT: &str = "CCL_COV_REDACT";

/// The metrics a coverage bar can be set for, and the variable of each
/// (`report::thresholds` fails below it).
pub(crate) const FAIL_UNDER: [(&str, &str); 4] = [
    ("lines", "CCL_COV_FAIL_UNDER_LINES"),
    ("functions", "CCL_COV_FAIL_UNDER_FUNCTIONS"),
    ("regions", "CCL_COV_FAIL_UNDER_REGIONS"),
    ("branches", "CCL_COV_FAIL_UNDER_BRANCHES"),
];

/// The device metric a bar of its own can be set for: the bars above are of the merged report
/// (host and device together, as `summary.json`); this one of the device's alone.
pub(crate) const FAIL_UNDER_DEVICE_BRANCHES: &str = "CCL_COV_FAIL_UNDER_DEVICE_BRANCHES";

/// The harness's state folder (the build cache, `builds/`, and the owners'
/// locks), apart from `CARGO_TARGET_DIR`: to cargo that variable also says
/// where to compile the harness, so a command that carried it recompiled the
/// crate (issue #49).
pub(crate) const CACHE_DIR: &str = "CCL_COV_CACHE_DIR";

/// Set to `1` by `cargo coverage` (`.cargo/config.toml`) and by
/// `ccl-coverage run` and `list`: the test filters were given to select
/// trials, on purpose. The trials then refuse a filter that matches none,
/// and the report runs every step whatever the filter; a plain `cargo test
/// FILTER` (unset) behaves as libtest does.
pub const TRIAL_FILTER: &str = "CCL_COV_TRIAL_FILTER";

/// The variables the command line set from its options, and each option's
/// name: a message about a setting names what the user typed
/// (`--fail-under-lines 80`), not the variable it reached the harness by.
static FROM_OPTIONS: std::sync::Mutex<Vec<(&'static str, &'static str)>> = std::sync::Mutex::new(Vec::new());

/// Records that the command line's `option` set `var`.
pub fn set_by_option(var: &'static str, option: &'static str) {
    FROM_OPTIONS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((var, option));
}

/// The option that set `var`, if the command line did.
pub(crate) fn option_of(var: &str) -> Option<&'static str> {
    let set = FROM_OPTIONS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    set.iter().rev().find(|(v, _)| *v == var).map(|(_, o)| *o)
}

/// A setting as the user gave it: `--fail-under-lines 80` when the command
/// line's option set it, else `CCL_COV_FAIL_UNDER_LINES=80`.
pub(crate) fn setting(var: &str, value: &str) -> String {
    match option_of(var) {
        Some(option) => format!("{option} {value}"),
        None => format!("{var}={value}"),
    }
}

/// What a known variable's value must be. The context checks every set
/// variable against its kind when it loads, so a value read only late (a
/// report step's bar) is refused before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// A path, revision, mode or marker: its reader checks it.
    Text,
    /// `on`/`1` or `off`/`0`.
    Switch,
    /// A number from 0 to 100.
    Percent,
    /// A whole number above 0.
    Positive,
    /// A whole number, 0 or more.
    Count,
    /// Comma-separated glob patterns.
    Globs,
}

/// What every name of ccl-coverage's own variables starts with.
pub(crate) const PREFIX: &str = "CCL_COV_";

/// A `CCL_COV_*` variable the crate reads or sets.
#[derive(Debug)]
pub(crate) struct Known {
    pub(crate) name: &'static str,
    pub(crate) kind: ValueKind,
    pub(crate) meaning: &'static str,
}

pub(crate) const fn known(name: &'static str, kind: ValueKind, meaning: &'static str) -> Known {
    Known { name, kind, meaning }
}

/// Every `CCL_COV_*` name but a device backend's own (`DeviceBackend::env_names`,
/// which the context adds): any other in the environment is refused (a
/// misspelt bar must not switch its check off), unless the loaded config
/// looks it up (`${CCL_COV_…}`). The table of docs/environment.md says the same.
pub(crate) const KNOWN: &[Known] = &[
    known("CCL_COV_CONFIG", ValueKind::Text, "the config file (default configs/local.json)"),
    known("CCL_COV_OVERLAY", ValueKind::Text, "ccl-coverage's settings laid over an upstream test_runner config"),
    known(
        "CCL_COV_WORKSPACE",
        ValueKind::Text,
        "the workspace folder (default target/ccl-coverage/<config> of the config's project)",
    ),
    known(
        "CCL_COV_CACHE_DIR",
        ValueKind::Text,
        "the harness's state folder: the build cache (builds/) and owner locks (default <target>/ccl-coverage)",
    ),
    known("CCL_COV_HOSTFILE", ValueKind::Text, "the nodes and slots launched trials may use"),
    known("CCL_COV_DEVICE_COVERAGE", ValueKind::Text, "auto, on or off: overrides coverage.device.mode"),
    known("CCL_COV_DRY_RUN", ValueKind::Text, "1 or json: print what would run, run nothing"),
    known(
        TRIAL_FILTER,
        ValueKind::Switch,
        "set by cargo coverage: the test filter selects trials; the report runs every step",
    ),
    known("CCL_COV_RERUN_FAILED", ValueKind::Switch, "rerun a failed upstream trial with its rerun_env_variables"),
    known("CCL_COV_BUILD_DIR", ValueKind::Text, "an existing instrumented library build"),
    known("CCL_COV_TESTS_DIR", ValueKind::Text, "existing test binaries"),
    known("CCL_COV_COVERAGE", ValueKind::Switch, "off builds and runs without instrumentation"),
    known("CCL_COV_TRIM_ITERATIONS", ValueKind::Switch, "-n 1 -w 0 under coverage (default: the config's)"),
    known("CCL_COV_INCREMENTAL_MERGE", ValueKind::Switch, "merge each trial's raw profiles as it ends (default on)"),
    known("CCL_COV_MERGE_OVERLAP", ValueKind::Switch, "a trial's merge runs while the next trial runs (default on)"),
    known("CCL_COV_KEEP_RAW", ValueKind::Switch, "keep raw profiles after merging them"),
    known("CCL_COV_FAIL_UNDER_LINES", ValueKind::Percent, "report::thresholds fails below this line coverage"),
    known("CCL_COV_FAIL_UNDER_FUNCTIONS", ValueKind::Percent, "report::thresholds fails below this function coverage"),
    known("CCL_COV_FAIL_UNDER_REGIONS", ValueKind::Percent, "report::thresholds fails below this region coverage"),
    known("CCL_COV_FAIL_UNDER_BRANCHES", ValueKind::Percent, "report::thresholds fails below this branch coverage"),
    known(
        "CCL_COV_FAIL_UNDER_DEVICE_BRANCHES",
        ValueKind::Percent,
        "report::thresholds fails below this device branch coverage",
    ),
    known("CCL_COV_DIFF_BASE", ValueKind::Text, "a git revision: changed-line coverage (report::diff)"),
    known("CCL_COV_FAIL_UNDER_DIFF", ValueKind::Percent, "report::diff fails below this changed-line coverage"),
    known("CCL_COV_BASELINE", ValueKind::Text, "an earlier workspace or its coverage.lcov (report::baseline)"),
    known("CCL_COV_IGNORE_FILENAME_REGEX", ValueKind::Text, "one more report.ignore_filename_regex: files left out"),
    known(
        "CCL_COV_ATTRIBUTION_EXPORTS",
        ValueKind::Switch,
        "attribution runs llvm-cov per trial, not the mapping read once",
    ),
    known("CCL_COV_FAIL_ON_LOST", ValueKind::Switch, "report::baseline fails if any line lost its coverage"),
    known(
        CGROUP,
        ValueKind::Text,
        "auto, on or off: each trial in a cgroup v2 of its own (default auto: where allowed)",
    ),
    known("CCL_COV_HEARTBEAT_S", ValueKind::Positive, "seconds between a long trial's still-running messages"),
    known("CCL_COV_JOBS", ValueKind::Positive, "build parallelism, {jobs} (default: all cores)"),
    known("CCL_COV_RETRIES", ValueKind::Count, "runs a failed trial again up to N times; a later pass is flaky"),
    known("CCL_COV_COLOR", ValueKind::Text, "auto, always or never: colour on the terminal (default auto)"),
    known("CCL_COV_VERBOSITY", ValueKind::Text, "quiet, normal or verbose: how much is said while trials run"),
    known(
        "CCL_COV_PARTITION",
        ValueKind::Text,
        "count:K/N or hash:K/N: run only this shard's trials (nextest's --partition)",
    ),
    known(REDACT, ValueKind::Globs, "more names whose values are secrets, as glob patterns"),
    known("CCL_COV_LLVM_BIN", ValueKind::Text, "the LLVM bin folder the shipped configs take their clang from"),
    known("CCL_COV_ROOT", ValueKind::Text, "${CCL_COV_ROOT} in a config: set by the harness to its checkout, not read"),
    known(SUPERVISE, ValueKind::Text, "internal: makes the process a trial's supervisor"),
    known(TRIAL_TOKEN, ValueKind::Text, "internal: marks the processes of one trial"),
];

/// The candidate `name` was most likely meant to be: the closest by edit
/// distance (ignoring case), if it is close enough to be a slip.
pub(crate) fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    nearest(name, name.len().saturating_sub(PREFIX.len()), candidates)
}

/// The candidate closest to `word` by edit distance (ignoring case), if it
/// is within a third of `significant` characters (at least 2) of it.
pub(crate) fn nearest<'a>(
    word: &str,
    significant: usize,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let upper = word.to_ascii_uppercase();
    let slack = (significant / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (strsim::levenshtein(&upper, &c.to_ascii_uppercase()), c))
        .filter(|&(d, _)| d <= slack)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// An on/off switch's value: `None` when empty (the default applies).
pub(crate) fn switch(name: &str, value: &str) -> Result<Option<bool>> {
    match value.to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "on" | "1" => Ok(Some(true)),
        "off" | "0" => Ok(Some(false)),
        _ => bail!("{} is not a switch: expected on or off (or 1 or 0)", setting(name, &format!("{value:?}"))),
    }
}

/// A percentage's value: `None` when empty (no bar).
pub(crate) fn percent(name: &str, value: &str) -> Result<Option<f64>> {
    if value.is_empty() {
        return Ok(None);
    }
    match value.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(Some(p)),
        _ => bail!("{} is not a percentage: expected a number from 0 to 100", setting(name, &format!("{value:?}"))),
    }
}

/// A positive whole number: `None` when empty (the default applies).
pub(crate) fn positive(name: &str, value: &str) -> Result<Option<u64>> {
    if value.is_empty() {
        return Ok(None);
    }
    match value.parse::<u64>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => bail!("{} is not a number: expected a whole number above 0", setting(name, &format!("{value:?}"))),
    }
}

/// A whole number, 0 or more: `None` when empty (the default applies).
pub(crate) fn count(name: &str, value: &str) -> Result<Option<u64>> {
    if value.is_empty() {
        return Ok(None);
    }
    match value.parse::<u64>() {
        Ok(n) => Ok(Some(n)),
        _ => bail!("{name}={value:?} is not a number: expected a whole number, 0 or more"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> impl Iterator<Item = &'static str> {
        KNOWN.iter().map(|k| k.name)
    }

    /// The crate's names and every device backend's.
    fn every_name() -> impl Iterator<Item = &'static str> {
        names().chain(crate::device::env_names().map(|k| k.name))
    }

    #[test]
    fn a_slip_is_told_the_name_it_missed() {
        assert_eq!(did_you_mean("CCL_COV_FAIL_UNDER_LINE", names()), Some("CCL_COV_FAIL_UNDER_LINES"));
        assert_eq!(did_you_mean("CCL_COV_JOB", names()), Some("CCL_COV_JOBS"));
        assert_eq!(did_you_mean("CCL_COV_WORKSPCAE", names()), Some("CCL_COV_WORKSPACE"));
        assert_eq!(did_you_mean("ccl_cov_dry_run", names()), Some("CCL_COV_DRY_RUN"), "case is a slip too");
        assert_eq!(did_you_mean("CCL_COV_FAIL_UNDER_FUNCTION", names()), Some("CCL_COV_FAIL_UNDER_FUNCTIONS"));
        assert_eq!(did_you_mean("CCL_COV_SOMETHING_ELSE", names()), None, "nothing close: no guess");
        assert_eq!(did_you_mean("CCL_COV_MY_BIN", ["CCL_COV_MY_BINS"]), Some("CCL_COV_MY_BINS"));
    }

    /// A message names the option the user typed, not the variable it set.
    #[test]
    fn a_setting_is_named_as_the_user_gave_it() {
        let var = "CCL_COV_FAIL_UNDER_TEST_ONLY";
        assert_eq!(setting(var, "80"), "CCL_COV_FAIL_UNDER_TEST_ONLY=80");
        set_by_option(var, "--fail-under-test-only");
        assert_eq!(setting(var, "80"), "--fail-under-test-only 80");
        let err = percent(var, "150").unwrap_err().to_string();
        assert_eq!(err, "--fail-under-test-only \"150\" is not a percentage: expected a number from 0 to 100");
    }

    #[test]
    fn values_are_checked_against_what_their_kind_expects() {
        assert_eq!(percent("P", "99.5"), Ok(Some(99.5)));
        assert_eq!(percent("P", "0"), Ok(Some(0.0)));
        assert_eq!(percent("P", "100"), Ok(Some(100.0)));
        assert_eq!(percent("P", ""), Ok(None));
        for bad in ["150", "-1", "abc", "NaN", "inf", "50%"] {
            let err = percent("P", bad).unwrap_err().to_string();
            assert_eq!(err, format!("P={bad:?} is not a percentage: expected a number from 0 to 100"));
        }
        assert_eq!(positive("N", "4"), Ok(Some(4)));
        assert!(positive("N", "0").unwrap_err().to_string().contains("expected a whole number above 0"));
        assert!(positive("N", "two").is_err() && positive("N", "-3").is_err());
        assert_eq!((count("R", "0"), count("R", "3"), count("R", "")), (Ok(Some(0)), Ok(Some(3)), Ok(None)));
        assert!(count("R", "-1").unwrap_err().to_string().contains("expected a whole number, 0 or more"));
        assert_eq!(switch("S", "ON"), Ok(Some(true)));
        assert_eq!(switch("S", "0"), Ok(Some(false)));
        assert!(switch("S", "yes").unwrap_err().to_string().contains("expected on or off"));
    }

    /// The one list is complete: every `"CCL_COV_…"` literal of `src/`,
    /// unit-test modules left out, is known.
    #[test]
    fn every_name_the_crate_spells_is_known() {
        let literal = regex::Regex::new(r#""(CCL_COV_[A-Z0-9_]*[A-Z0-9])""#).unwrap();
        let mut stack = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut unknown = Vec::new();
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs" || e == "cpp") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
                    for name in literal.captures_iter(code).map(|c| c[1].to_string()) {
                        if !every_name().any(|n| n == name) {
                            unknown.push(format!("{}: {name}", path.display()));
                        }
                    }
                }
            }
        }
        assert!(unknown.is_empty(), "add these to KNOWN: {unknown:?}");
    }

    #[test]
    fn the_environment_table_lists_every_name() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/environment.md")).unwrap();
        // The table, up to the first section after it.
        let table = &doc[..doc.find("\n## ").unwrap_or(doc.len())];
        let missing: Vec<_> = every_name().filter(|n| !table.contains(&format!("`{n}"))).collect();
        assert!(missing.is_empty(), "the table of docs/environment.md lacks {missing:?}");
    }
}
