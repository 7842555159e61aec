//! RCCL's own test-runner configs (`tools/scripts/test_runner/configs/*.json`
//! in ROCm/rocm-systems), read exactly as upstream resolves them, into a flat
//! list of resolved tests.
//!
//! This is the first part of issue 11 (`CCL_COV_CONFIG=<a test_runner
//! config>` works unchanged): a pure module — text, path and an environment
//! lookup in, a [`Resolved`] model and its warnings out; nothing is read from
//! the file system or the process. `config/overlay.rs` combines it with
//! ccl-coverage's overlay; the plan makes one trial per [`Test`] (ignored by
//! [`Test::ignore_reason`]) and the launcher its argv, env, `mpi_args` and
//! cwd. The overlay's `library`/`tests` steps (or its existing builds) say
//! how the library and the tests are built; `build` feeds the overlay's
//! `rccl_install` steps (install flags, CMake options, jobs, env: see
//! `config/overlay.rs`), and `rccl_tests_build` is resolved but not used.
//!
//! The rules follow upstream's code (`lib/test_config.py`,
//! `lib/test_executor.py`, `lib/schema.json`, `test_runner.py`); each
//! function says which. Where upstream silently accepts something
//! questionable (a repeated JSON key, a key its schema rejects, a setting it
//! never applies, a variable left unexpanded) this module does the same and
//! adds a [`Warning`] naming the file and the JSON path. Wrong types, missing
//! required fields, unknown `extends` targets and cycles are errors naming
//! the file, the JSON path and what was expected: upstream's schema check
//! rejects the first two, and upstream itself fails on the others.

mod json;
mod names;
mod resolve;
mod schema;
mod text;

use crate::env_names::Lookup;
use crate::error::{Context, Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// An upstream config's variables, name to value, as upstream passes them
/// on: names are not checked as [`EnvName`](crate::config::EnvName)s are.
pub(crate) type UpstreamEnv = BTreeMap<String, String>;

/// Whether a parsed config is in upstream's format: upstream requires
/// `test_configurations` and `test_suites`, and ccl-coverage's own format
/// rejects both as unknown keys, so either one decides.
pub fn is_upstream(value: &serde_json::Value) -> bool {
    value.get("test_configurations").is_some() || value.get("test_suites").is_some()
}

/// Choices upstream takes from its command line or its install location.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// `--system NAME`: picks `mpi_args[NAME]` and `system_env_variables[NAME]`.
    pub system: Option<&'a str>,
    /// The RCCL checkout upstream's runner lives in. At import, upstream sets
    /// `WORKDIR` to it and `RCCL_TESTS_DIR` to its sibling `rccl-tests` when
    /// they are unset, which decides `${WORKDIR:-...}` defaults. `None`: the
    /// checkout holding the config when it sits in
    /// `tools/scripts/test_runner/configs/`, else nothing is set.
    pub rccl_root: Option<&'a Path>,
}

/// Something upstream accepts without a word that deserves one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    pub(crate) file: PathBuf,
    /// Where in the file (`test_suites[3].env_variables`); `$` for the root.
    pub json_path: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file.display(), self.json_path, self.message)
    }
}

/// The whole config, resolved.
#[derive(Debug, Clone, Serialize)]
pub struct Resolved {
    /// `system_configurations.name` / `.description`: metadata only.
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) system: Option<String>,
    pub(crate) paths: Paths,
    /// Where upstream builds (or finds) `librccl.so`: `RCCL_LIB_PATH` or
    /// `RCCL_BUILD_DIR`, else `<workdir>/build/<build_type>`.
    pub(crate) build_dir: PathBuf,
    pub(crate) build_type: BuildType,
    /// Global `env_variables` with the `--system` overlay.
    pub(crate) env: UpstreamEnv,
    /// The mpirun arguments every MPI test starts with (top-level `mpi_args`,
    /// else upstream's Open MPI default).
    pub(crate) mpi_base: Vec<String>,
    pub(crate) auto_detect_hosts: bool,
    pub(crate) build: BuildConfiguration,
    /// `None` when the section is absent or empty (upstream skips the step).
    pub(crate) rccl_tests_build: Option<RcclTestsBuild>,
    pub tests: Vec<Test>,
    pub warnings: Vec<Warning>,
}

/// `paths`, after upstream's `${VAR}` expansion at load time.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Paths {
    /// `paths.workdir`, else the current directory (`PWD`).
    pub(crate) workdir: String,
    /// `None`: upstream searches `$ROCM_PATH`, the compilers on `PATH` and
    /// `/opt/rocm` when it needs the root.
    pub(crate) rocm_path: Option<String>,
    pub(crate) mpi_path: Option<String>,
    pub(crate) test_binary_dir: Option<String>,
    /// Tool overrides the executor honours although the schema rejects them.
    pub(crate) llvm_profdata: Option<String>,
    pub(crate) llvm_cov: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BuildType {
    Debug,
    Release,
}

/// `build_configuration`: what upstream passes to RCCL's `install.sh`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BuildConfiguration {
    /// `false`: no build and no `librccl.so` check (CPU-only suites).
    pub(crate) requires_build: bool,
    pub(crate) install_flags: Vec<String>,
    /// One string for `--cmake-options`; an object becomes `-DKEY=VALUE ...`.
    pub(crate) cmake_options: String,
    /// `-j N`.
    pub(crate) parallel_jobs: Option<u64>,
    pub(crate) env: UpstreamEnv,
}

/// `rccl_tests_build_configuration`: how the perf binaries are built.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RcclTestsBuild {
    pub(crate) enabled: bool,
    pub(crate) source_dir: String,
    pub(crate) install_script: String,
    /// Replaces `install_script` + `install_flags` when set.
    pub(crate) build_command: Option<BuildCommand>,
    pub(crate) install_flags: Vec<String>,
    /// The RCCL to link against; the RCCL build dir unless given.
    pub(crate) rccl_home: String,
    pub(crate) env: UpstreamEnv,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BuildCommand {
    /// Run through the shell upstream (`shell=True`).
    Shell(String),
    Argv(Vec<String>),
}

/// What kind of test a trial runs, which decides how it is launched and
/// judged. For an upstream test it is decided as upstream does: `is_pytest`
/// first, then `is_gtest` (default true), else a plain (perf) binary; a
/// matrix trial is always a perf binary, a config's program always plain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialKind {
    /// A googletest binary: exit status and its JSON report.
    Gtest,
    /// An nccl-tests style perf binary: exit status and its result table.
    Perf,
    /// A pytest suite: exit status and its JUnit XML.
    Pytest,
    /// Any test program: its exit status alone.
    Plain,
    /// A `ctest -R` run: exit status and its JUnit XML.
    Ctest,
}

impl TrialKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TrialKind::Perf => "perf",
            TrialKind::Gtest => "gtest",
            TrialKind::Pytest => "pytest",
            TrialKind::Plain => "plain",
            TrialKind::Ctest => "ctest",
        }
    }
}

/// `num_ranks` / `num_gpus`: a number, or `"auto"` (decided on the machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Count {
    Auto,
    #[serde(untagged)]
    Fixed(u64),
}

/// A test's ranks, nodes and GPUs per node on a given machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    pub(crate) ranks: u64,
    pub(crate) nodes: u64,
    pub(crate) gpus_per_node: u64,
}

/// What the machine offers, for [`Test::ignore_reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    pub nodes: u64,
    /// `None` when the count could not be detected: upstream then sizes
    /// `"auto"` as 8 and never skips for lack of GPUs.
    pub gpus_per_node: Option<u64>,
}

/// pytest-only settings (`_run_pytest_test`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Pytest {
    pub(crate) python_bin: Option<String>,
    pub(crate) setup_venv: bool,
    pub(crate) venv_dir: Option<String>,
    pub(crate) requirements: Option<String>,
    /// What `test_filter` becomes: the words of a filter starting with `-`,
    /// else `-k <filter>`.
    pub(crate) select_args: Vec<String>,
}

/// One resolved test: a future trial.
#[derive(Debug, Clone, Serialize)]
pub struct Test {
    pub suite: String,
    pub(crate) name: String,
    /// `<suite>::<test>`, with `#N` added to a repeated pair.
    pub(crate) trial: String,
    /// A file name for the trial's logs and profiles, unique ignoring case.
    pub slug: String,
    /// Where the test's own entry is (`test_configurations.x.tests[2]`).
    pub(crate) json_path: String,
    pub(crate) description: Option<String>,
    pub(crate) kind: TrialKind,
    /// The program upstream runs (gtest and perf); `None` for pytest.
    pub(crate) binary: Option<String>,
    /// Configuration `command_args`, then the test's, as shell words.
    pub(crate) args: Vec<String>,
    /// `None` for `*`, `ALL` or no filter.
    pub(crate) test_filter: Option<String>,
    pub(crate) num_ranks: Count,
    pub(crate) num_nodes: u64,
    pub(crate) num_gpus: Count,
    /// Seconds; `None` where upstream waits forever (0): the caller caps it.
    pub(crate) timeout: Option<u64>,
    /// `false` when the suite entry says `enabled: false`.
    pub(crate) enabled: bool,
    /// Global < configuration < test, as upstream merges them.
    pub(crate) env: UpstreamEnv,
    /// Added to `env` when a failed test is rerun (configuration < test).
    pub(crate) rerun_env: UpstreamEnv,
    /// Base, configuration (with `extends` and the suite entry), test, then
    /// `RCCL_TEST_MPI_ARGS`: upstream's order. Used only when ranks > 1.
    pub(crate) mpi_args: Vec<String>,
    /// `<build_dir>/test` (upstream falls back to the build dir, then the
    /// binary's dir, when it does not exist); the `test_dir` for pytest.
    pub(crate) cwd: Option<String>,
    pub(crate) pytest: Option<Pytest>,
    /// Why upstream fails this test without running it, if it does.
    pub(crate) problem: Option<String>,
}

impl Test {
    /// `"auto"` GPUs are the detected count (8 when unknown); `"auto"` ranks
    /// are GPUs × nodes (`_resolve_gpu_count`, `run_test`).
    pub(crate) fn placement(&self, gpus_per_node: Option<u64>) -> Placement {
        let gpus = match self.num_gpus {
            Count::Auto => gpus_per_node.filter(|&n| n > 0).unwrap_or(8),
            Count::Fixed(n) => n,
        };
        let ranks = match self.num_ranks {
            Count::Auto => gpus.saturating_mul(self.num_nodes),
            Count::Fixed(n) => n,
        };
        Placement { ranks, nodes: self.num_nodes, gpus_per_node: gpus }
    }

    /// Why the test cannot run here, with upstream's skip rules: a disabled
    /// suite; more GPUs per node than detected (ranks on one node, `num_gpus`
    /// on several); more nodes than available for an MPI test. pytest tests
    /// are never skipped for GPUs upstream.
    pub fn ignore_reason(&self, machine: &Machine) -> Option<String> {
        if !self.enabled {
            return Some(format!("suite `{}` is disabled (enabled: false)", self.suite));
        }
        if self.kind == TrialKind::Pytest {
            return None;
        }
        let p = self.placement(machine.gpus_per_node);
        if let Some(detected) = machine.gpus_per_node.filter(|&n| n > 0) {
            let needed = if p.nodes <= 1 { p.ranks } else { p.gpus_per_node };
            if needed > detected {
                return Some(format!("needs {needed} GPUs per node, the machine has {detected}"));
            }
        }
        if p.ranks > 1 && p.nodes > 1 && machine.nodes < p.nodes {
            return Some(format!("needs {} nodes, {} available", p.nodes, machine.nodes));
        }
        None
    }
}

/// Resolves upstream config `text` read from `path`, with `env` standing for
/// upstream's process environment (`PWD` for its working directory).
pub fn resolve(path: &Path, text: &str, env: Lookup<'_>) -> Result<Resolved> {
    resolve_with(path, text, env, &Options::default())
}

/// [`resolve()`] with upstream's command-line choices.
pub fn resolve_with(path: &Path, text: &str, env: Lookup<'_>, options: &Options<'_>) -> Result<Resolved> {
    let mut ctx = Ctx { file: path, warnings: Vec::new() };
    let (root, duplicates) = json::parse(text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    for dup in duplicates {
        ctx.warn(&dup, "this key appears more than once; upstream (Python's json) keeps the last value");
    }
    let json::J::Obj(root) = root else {
        return Err(ctx.error("", format!("expected a JSON object (the config), got {}", root.kind())));
    };
    resolve::resolve(&mut ctx, &root, env, options)
}

/// The file being resolved and the warnings so far.
struct Ctx<'a> {
    file: &'a Path,
    warnings: Vec<Warning>,
}

impl Ctx<'_> {
    fn error(&self, json_path: &str, message: impl fmt::Display) -> Error {
        let at = if json_path.is_empty() { "$" } else { json_path };
        Error::new(format!("{}: {at}: {message}", self.file.display()))
    }

    /// Adds a warning once: a configuration shared by several suites is
    /// resolved for each, but its warnings are said once.
    fn warn(&mut self, json_path: &str, message: impl Into<String>) {
        let w = Warning {
            file: self.file.to_path_buf(),
            json_path: if json_path.is_empty() { "$".into() } else { json_path.into() },
            message: message.into(),
        };
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }
}

#[cfg(test)]
mod tests;
