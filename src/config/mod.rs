//! Configs (`configs/*.json`): typed, strict, and explained when wrong.
//!
//! Loading is three steps, each with errors that name the file and the JSON
//! path: parse JSON; expand `${VAR}` in every string value (`expand.rs`);
//! deserialize into these structs (unknown keys rejected), whose values check
//! themselves (`config/values.rs`, the bounded numbers and lists below); then check
//! what no single value can: references between sections and trial names.

pub mod expand;
pub(crate) mod template;

use crate::bail;
use crate::error::{Error, Result};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

mod overlay;
mod values;
pub(crate) use overlay::UpstreamRun;
pub use values::{Build, BuildTemplate, EnvName, HostName, Name, Placeholders, Size, Template, Trial, TrialTemplate};

/// The embedded default: the CPU fixture, runnable on any Linux machine.
pub const DEFAULT_CONFIG_TEXT: &str = include_str!("../../configs/local.json");
/// Where the default config lives, relative to the project root.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "configs/local.json";

/// The environment a build step (`Env<BuildTemplate>`) or a trial
/// (`Env<TrialTemplate>`) adds.
pub(crate) type Env<T> = BTreeMap<EnvName, T>;

/// The accepted range of a number in a config, checked while deserializing so
/// that the error names the JSON path, and so that nothing downstream (a
/// deadline `Instant + timeout + grace`, a slot per rank, a `-n` argument) can
/// overflow or ask for something absurd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub(crate) min: u64,
    pub max: u64,
    /// What the number counts, for the error message.
    pub(crate) unit: &'static str,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an integer in {}..={} ({})", self.min, self.max, self.unit)
    }
}

pub mod limits;

/// Deserializes any JSON number and checks it against `bound`, so that a
/// negative, fractional or huge value gets the accepted range in its error
/// rather than serde's bare "expected u64".
fn bounded<'de, D: Deserializer<'de>>(d: D, bound: Bound) -> Result<u64, D::Error> {
    struct V(Bound);
    impl V {
        fn out_of_range<E: de::Error>(&self, got: impl std::fmt::Display) -> E {
            E::custom(format!("expected {}, got {got}", self.0))
        }
    }
    impl<'de> Visitor<'de> for V {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}", self.0)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            if (self.0.min..=self.0.max).contains(&v) { Ok(v) } else { Err(self.out_of_range(v)) }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(self.out_of_range(v)),
            }
        }
        fn visit_u128<E: de::Error>(self, v: u128) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(self.out_of_range(v)),
            }
        }
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(self.out_of_range(v)),
            }
        }
        /// JSON integers beyond u64 arrive here too (`serde_json` reads them as
        /// floats), as do `2.5` and `1e30`: none is an integer in range.
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            Err(self.out_of_range(format_args!("{v:?}")))
        }
    }
    d.deserialize_any(V(bound))
}

/// Field deserializers for `#[serde(deserialize_with)]`, one per bound.
macro_rules! bounded_fields {
    ($($name:ident: $ty:ty = $bound:expr;)*) => {$(
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            bounded(d, $bound).and_then(|n| <$ty>::try_from(n).map_err(de::Error::custom))
        }
    )*};
}

bounded_fields! {
    capacity: usize = limits::CAPACITY;
    ranks: usize = limits::RANKS;
    timeout_seconds: u64 = limits::TIMEOUT_SECONDS;
    grace_seconds: u64 = limits::GRACE_SECONDS;
    iters: u32 = limits::ITERS;
    warmup: u32 = limits::WARMUP;
    nodes: usize = limits::NODES;
    gpus_per_task: usize = limits::GPUS_PER_TASK;
    host_slots: usize = limits::HOST_SLOTS;
    host_gpus: usize = limits::HOST_GPUS;
    log_mib: u64 = limits::LOG_MIB;
}

fn optional_host_gpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    host_gpus(d).map(Some)
}

fn optional_ranks<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    ranks(d).map(Some)
}

/// Field deserializers for `#[serde(deserialize_with)]` of lists that must
/// not be empty, each saying what it expected.
macro_rules! non_empty_fields {
    ($($name:ident: $ty:ty = $expected:literal;)*) => {$(
        fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<$ty>, D::Error> {
            let items = Vec::<$ty>::deserialize(d)?;
            if items.is_empty() { Err(de::Error::custom(concat!("expected ", $expected))) } else { Ok(items) }
        }
    )*};
}

non_empty_fields! {
    steps: Step = "at least one build step";
    argv: BuildTemplate = "a non-empty argv (program first), or rccl_install";
    objects: BuildTemplate = "at least one instrumented object";
    collectives: Collective = "at least one collective";
    sizes: Size = "at least one size such as \"1K\"";
}

/// A test binary, relative to `tests.bin_dir` unless absolute.
fn binary<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let binary = String::deserialize(d)?;
    if binary.is_empty() { Err(de::Error::custom("expected the test binary's name")) } else { Ok(binary) }
}

/// `gfx*` (AMD) or `sm_*`/`compute_*` (NVIDIA): what device coverage can
/// instrument.
fn gpu_target<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let target = Option::<String>::deserialize(d)?;
    match target {
        Some(t) if !["gfx", "sm_", "compute_"].iter().any(|p| t.starts_with(p)) => Err(de::Error::custom(format!(
            "{t:?} is not a GPU architecture: expected gfx* (AMD) or sm_*/compute_* (NVIDIA)"
        ))),
        _ => Ok(target),
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Names the workspace (`target/ccl-coverage/<name>`) and the report.
    pub(crate) name: Name,
    #[serde(default)]
    pub(crate) description: String,
    pub(crate) toolchain: ToolchainConfig,
    #[serde(default)]
    pub(crate) coverage: CoverageConfig,
    /// The library under test: built instrumented.
    pub(crate) library: LibraryBuild,
    /// The test binaries: built without instrumentation, linked to the library.
    pub(crate) tests: TestsBuild,
    pub(crate) launchers: BTreeMap<Name, LauncherConfig>,
    /// Most ranks that may run at once on this machine (GPUs, or cores).
    #[serde(deserialize_with = "capacity")]
    pub capacity: usize,
    /// The nodes launched trials may use when neither `CCL_COV_HOSTFILE` nor
    /// a Slurm allocation names them (`allocation.rs`); also where the GPU
    /// count of a hostfile's or allocation's node of the same name comes from.
    #[serde(default)]
    pub(crate) hosts: Vec<HostConfig>,
    /// What a trial runs with unless its variant says otherwise.
    pub(crate) launch: LaunchDefaults,
    /// Environment of every trial.
    #[serde(default)]
    pub(crate) env: Env<TrialTemplate>,
    /// Arguments every test binary gets (before size, collective and variant args).
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    #[serde(default)]
    pub(crate) iterations: Iterations,
    #[serde(deserialize_with = "collectives")]
    pub(crate) collectives: Vec<Collective>,
    #[serde(deserialize_with = "sizes")]
    pub(crate) sizes: Vec<Size>,
    #[serde(default)]
    pub(crate) variants: Vec<Variant>,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub(crate) report: ReportConfig,
    #[serde(default)]
    pub(crate) logs: Logs,
    /// Set when the config file is an upstream RCCL `test_runner` config: the
    /// rest of the config then comes from the overlay (`config/overlay.rs`)
    /// and the plan is the resolved tests.
    #[serde(skip)]
    pub(crate) upstream: Option<Box<UpstreamRun>>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolchainConfig {
    /// C compiler; `CC` overrides it.
    pub(crate) cc: String,
    /// C++ compiler; `CXX` overrides it.
    pub(crate) cxx: String,
    /// Tried in order when `cc` / `cxx` do not exist (e.g. `amdclang++`, `hipcc`).
    #[serde(default)]
    pub(crate) cc_fallbacks: Vec<String>,
    #[serde(default)]
    pub(crate) cxx_fallbacks: Vec<String>,
    /// Explicit tools; `LLVM_PROFDATA` / `LLVM_COV` override them. When unset the
    /// tools next to the compiler are used.
    #[serde(default)]
    pub(crate) llvm_profdata: Option<String>,
    #[serde(default)]
    pub(crate) llvm_cov: Option<String>,
    /// Folders searched for llvm-profdata / llvm-cov after the compiler's own
    /// and before PATH (a ROCm tree: `lib/llvm/bin`, `llvm/bin`, `bin`).
    #[serde(default)]
    pub(crate) tool_dirs: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CoverageConfig {
    /// Host instrumentation flags, handed to the build as `{coverage_flags}`.
    #[serde(default = "default_host_flags")]
    pub(crate) host_flags: Vec<String>,
    /// `LLVM_PROFILE_FILE` name inside each trial's profile directory.
    #[serde(default = "default_profile_pattern")]
    pub(crate) profile_pattern: String,
    #[serde(default)]
    pub(crate) device: DeviceConfig,
}

impl Default for CoverageConfig {
    fn default() -> Self {
        CoverageConfig {
            host_flags: default_host_flags(),
            profile_pattern: default_profile_pattern(),
            device: DeviceConfig::default(),
        }
    }
}

/// Atomic counter updates: with plain increments, threads racing through the
/// same code lose updates, and because llvm-cov derives some region counts by
/// subtracting counters, a lost update can mark never-run code as covered.
fn default_host_flags() -> Vec<String> {
    vec!["-fprofile-instr-generate".into(), "-fcoverage-mapping".into(), "-fprofile-update=atomic".into()]
}

fn default_profile_pattern() -> String {
    "%h-%p-%m.profraw".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceMode {
    #[default]
    Auto,
    On,
    Off,
}

impl DeviceMode {
    pub(crate) fn parse(text: &str) -> Option<DeviceMode> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Some(DeviceMode::Auto),
            "on" => Some(DeviceMode::On),
            "off" => Some(DeviceMode::Off),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DeviceMode::Auto => "auto",
            DeviceMode::On => "on",
            DeviceMode::Off => "off",
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// `CCL_COV_DEVICE_COVERAGE` overrides it.
    #[serde(default)]
    pub mode: DeviceMode,
    /// The GPU architecture device code is built for: `gfx942` (HIP) or
    /// `sm_90` (CUDA); none means there is no device code to instrument.
    #[serde(default, deserialize_with = "gpu_target")]
    pub target: Option<String>,
    /// The ROCm installation whose version gates AMDGPU device coverage.
    #[serde(default)]
    pub rocm_path: Option<String>,
    /// Whether the build links device code into separate code objects
    /// (RCCL's `ENABLE_DEVICE_LINKER`); device coverage needs it.
    #[serde(default = "yes")]
    pub linker: bool,
    /// Device code objects for llvm-cov (`*` allowed in the file name), used
    /// only while device coverage is on and only if they carry coverage mapping.
    #[serde(default)]
    pub objects: Vec<BuildTemplate>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig { mode: DeviceMode::Auto, target: None, rocm_path: None, linker: true, objects: Vec::new() }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "StepFields")]
pub(crate) struct Step {
    pub(crate) name: String,
    /// The command; exactly one of `argv` and `rccl_install`.
    pub(crate) argv: Vec<BuildTemplate>,
    /// RCCL's install.sh, with the coverage flags and CMake options the
    /// harness resolves (see `rccl.rs`).
    pub(crate) rccl_install: Option<RcclInstall>,
    pub(crate) env: Env<BuildTemplate>,
    /// Working directory; the build directory when unset.
    pub(crate) cwd: Option<BuildTemplate>,
}

/// A [`Step`] before its command is checked: the fields check themselves,
/// but only the whole step knows whether it has exactly one command.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFields {
    name: String,
    #[serde(default, deserialize_with = "argv")]
    argv: Vec<BuildTemplate>,
    #[serde(default)]
    rccl_install: Option<RcclInstall>,
    #[serde(default)]
    env: Env<BuildTemplate>,
    #[serde(default)]
    cwd: Option<BuildTemplate>,
}

impl TryFrom<StepFields> for Step {
    type Error = &'static str;

    fn try_from(f: StepFields) -> Result<Step, Self::Error> {
        let StepFields { name, argv, rccl_install, env, cwd } = f;
        match (argv.is_empty(), &rccl_install) {
            (true, None) => Err("expected argv (program first) or rccl_install"),
            (false, Some(_)) => Err("expected either argv or rccl_install, not both"),
            _ => Ok(Step { name, argv, rccl_install, env, cwd }),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RcclInstall {
    pub(crate) script: BuildTemplate,
    #[serde(default)]
    pub(crate) flags: Vec<BuildTemplate>,
    /// CMake options for `--cmake-options`; one string may hold several,
    /// quoted as install.sh will see them.
    #[serde(default)]
    pub(crate) cmake_options: Vec<BuildTemplate>,
    #[serde(default)]
    pub(crate) jobs: Option<BuildTemplate>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LibraryBuild {
    /// Source tree, relative to the config file; hashed into the build key.
    pub(crate) source_dir: String,
    /// Top-level entries of `source_dir` left out of the build key (in-tree
    /// build folders, for example). Hidden entries are always left out.
    #[serde(default)]
    pub(crate) hash_exclude: Vec<String>,
    #[serde(deserialize_with = "steps")]
    pub(crate) steps: Vec<Step>,
    /// Objects the report covers. Each must carry coverage mapping.
    #[serde(deserialize_with = "objects")]
    pub(crate) objects: Vec<BuildTemplate>,
    /// An instrumented build to use instead of building (`{build_dir}`);
    /// `CCL_COV_BUILD_DIR` overrides it.
    #[serde(default)]
    pub(crate) existing_build: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TestsBuild {
    pub(crate) source_dir: String,
    #[serde(default)]
    pub(crate) hash_exclude: Vec<String>,
    #[serde(deserialize_with = "steps")]
    pub(crate) steps: Vec<Step>,
    /// Where the test binaries land.
    pub(crate) bin_dir: BuildTemplate,
    /// Already-built test binaries to use instead of running `steps`;
    /// `CCL_COV_TESTS_DIR` overrides it.
    #[serde(default)]
    pub(crate) existing_bin_dir: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LauncherKind {
    /// The test binary itself (ranks as threads of one process).
    Direct,
    Mpirun,
    Srun,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum MpiFlavor {
    /// Open MPI: `-x NAME` forwards a variable; root needs `--allow-run-as-root`;
    /// under srun `--mpi=pmix`.
    #[default]
    Openmpi,
    /// MPICH/Hydra: `-genv NAME VALUE`; under srun `--mpi=pmi2`.
    Mpich,
    /// `mpirun`: read from the launcher program's `--version` when a trial
    /// starts (`mpi.rs`); `srun`: no `--mpi=`, the cluster's `MpiDefault`.
    Auto,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "LauncherFields")]
pub(crate) struct LauncherConfig {
    pub(crate) kind: LauncherKind,
    /// Launcher program; `mpirun` / `srun` by default.
    pub(crate) program: Option<String>,
    pub(crate) flavor: MpiFlavor,
    /// Launcher arguments, before the test binary.
    pub(crate) args: Vec<TrialTemplate>,
    /// Appended to the test binary's arguments (`-t {ranks}`, `-g 1`).
    pub(crate) program_args: Vec<TrialTemplate>,
    /// Nodes a trial of this launcher spans (srun `--nodes`); 1 by default.
    pub(crate) nodes: usize,
    /// GPUs each rank needs (srun `--gpus-per-task`); 0 (none) by default.
    pub(crate) gpus_per_task: usize,
}

/// A [`LauncherConfig`] before its kind and its fields are checked together.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LauncherFields {
    kind: LauncherKind,
    #[serde(default)]
    program: Option<String>,
    #[serde(default)]
    flavor: MpiFlavor,
    #[serde(default)]
    args: Vec<TrialTemplate>,
    #[serde(default)]
    program_args: Vec<TrialTemplate>,
    #[serde(default = "one_node", deserialize_with = "nodes")]
    nodes: usize,
    #[serde(default, deserialize_with = "gpus_per_task")]
    gpus_per_task: usize,
}

fn one_node() -> usize {
    1
}

impl TryFrom<LauncherFields> for LauncherConfig {
    type Error = &'static str;

    fn try_from(f: LauncherFields) -> Result<LauncherConfig, Self::Error> {
        if f.kind == LauncherKind::Direct && (!f.args.is_empty() || f.program.is_some()) {
            return Err(
                "a direct launcher runs the test binary itself: it takes no program or args (use program_args)",
            );
        }
        if f.kind == LauncherKind::Direct && (f.nodes != 1 || f.gpus_per_task != 0) {
            return Err("a direct launcher runs on this node only: it takes no nodes or gpus_per_task");
        }
        let LauncherFields { kind, program, flavor, args, program_args, nodes, gpus_per_task } = f;
        Ok(LauncherConfig { kind, program, flavor, args, program_args, nodes, gpus_per_task })
    }
}

/// One node of `hosts`: `{"name": "node1", "slots": 8, "gpus": 8}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostConfig {
    /// The name the launcher reaches it by (`mpirun --host`).
    pub(crate) name: HostName,
    /// Ranks it may run.
    #[serde(deserialize_with = "host_slots")]
    pub(crate) slots: usize,
    /// Its GPUs; without it, one GPU slot per rank slot.
    #[serde(default, deserialize_with = "optional_host_gpus", skip_serializing_if = "Option::is_none")]
    pub(crate) gpus: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaunchDefaults {
    /// A key of `launchers` (checked by `validate`, which lists them).
    pub(crate) launcher: String,
    #[serde(deserialize_with = "ranks")]
    pub(crate) ranks: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Iterations {
    #[serde(deserialize_with = "iters")]
    pub(crate) iters: u32,
    #[serde(deserialize_with = "warmup")]
    pub(crate) warmup: u32,
    /// Under coverage, run `-n 1 -w 0` instead: coverage needs one pass
    /// through the code, not stable timings. `CCL_COV_TRIM_ITERATIONS`
    /// overrides it.
    #[serde(default = "yes")]
    pub(crate) trim_under_coverage: bool,
}

impl Default for Iterations {
    fn default() -> Self {
        Iterations { iters: 5, warmup: 2, trim_under_coverage: true }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Collective {
    pub(crate) name: Name,
    /// Test binary, relative to `tests.bin_dir` unless absolute.
    #[serde(deserialize_with = "binary")]
    pub(crate) binary: String,
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    #[serde(default)]
    pub(crate) env: Env<TrialTemplate>,
    /// Marks its trials ignored (run with `--ignored` / `--include-ignored`).
    #[serde(default)]
    pub(crate) ignore: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Variant {
    pub(crate) name: Name,
    #[serde(default)]
    pub(crate) launcher: Option<String>,
    #[serde(default, deserialize_with = "optional_ranks")]
    pub(crate) ranks: Option<usize>,
    #[serde(default)]
    pub(crate) env: Env<TrialTemplate>,
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    #[serde(default)]
    pub(crate) ignore: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// Seconds a trial may run.
    #[serde(deserialize_with = "timeout_seconds")]
    pub(crate) default: u64,
    /// Seconds between SIGTERM and SIGKILL.
    #[serde(deserialize_with = "grace_seconds")]
    pub grace: u64,
    /// Later rules win over earlier ones.
    #[serde(default)]
    pub(crate) overrides: Vec<TimeoutRule>,
    /// Applied after `overrides`, only while device coverage is on.
    #[serde(default)]
    pub(crate) device_coverage: Vec<TimeoutRule>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { default: 300, grace: 10, overrides: Vec::new(), device_coverage: Vec::new() }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeoutRule {
    #[serde(default)]
    pub(crate) collective: Option<String>,
    #[serde(default)]
    pub(crate) size: Option<String>,
    #[serde(default)]
    pub(crate) variant: Option<String>,
    #[serde(deserialize_with = "timeout_seconds")]
    pub(crate) seconds: u64,
}

impl TimeoutRule {
    pub(crate) fn matches(&self, collective: &str, size: &str, variant: Option<&str>) -> bool {
        self.collective.as_deref().is_none_or(|c| c == collective)
            && self.size.as_deref().is_none_or(|s| s == size)
            && self.variant.as_deref().is_none_or(|v| Some(v) == variant)
    }
}

/// The logs of trials and build steps.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Logs {
    /// Most MiB of output one log keeps: the first half and the last half,
    /// with a line saying how much was cut between them.
    #[serde(deserialize_with = "log_mib")]
    pub(crate) max_mib: u64,
}

impl Logs {
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_mib << 20
    }
}

impl Default for Logs {
    fn default() -> Self {
        Logs { max_mib: 64 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportConfig {
    /// Files left out of every report (llvm-cov `-ignore-filename-regex`,
    /// joined with `|`). Anchor them: upstream's `ext.*` also dropped `context.cc`.
    #[serde(default = "default_ignore")]
    pub(crate) ignore_filename_regex: Vec<String>,
    /// Whether `coverage_report` snapshot-checks the summary.
    #[serde(default = "yes")]
    pub(crate) snapshot: bool,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig { ignore_filename_regex: default_ignore(), snapshot: true }
    }
}

/// System, CUDA and ROCm headers, and nvcc's temporary host files.
fn default_ignore() -> Vec<String> {
    ["^/usr/", "^/opt/rocm", "(^|/)tmpxft_[^/]*$", "cudafe1"].iter().map(ToString::to_string).collect()
}

fn yes() -> bool {
    true
}

/// A config together with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub(crate) path: PathBuf,
    /// Relative paths in the config are relative to this directory.
    pub(crate) dir: PathBuf,
    pub config: Config,
}

impl LoadedConfig {
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        crate::workspace::normalize(&if p.is_absolute() { p.to_path_buf() } else { self.dir.join(p) })
    }

    pub(crate) fn library_src(&self) -> PathBuf {
        self.resolve(&self.config.library.source_dir)
    }

    pub(crate) fn tests_src(&self) -> PathBuf {
        self.resolve(&self.config.tests.source_dir)
    }

    /// The config's project's `snapshots/`: beside the folder that holds the
    /// config (its overlay, for an upstream config), as `snapshots/` sits
    /// beside `configs/` here; never found from the current directory.
    pub(crate) fn snapshots_dir(&self) -> PathBuf {
        self.resolve("../snapshots")
    }
}

/// Loads the config at `path`, or the embedded default's text if `path` is
/// the default location and does not exist there.
pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<LoadedConfig> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && path.ends_with(DEFAULT_CONFIG_PATH) => {
            DEFAULT_CONFIG_TEXT.to_string()
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            bail!("{}: not valid JSON: the file is not UTF-8 text ({e})", path.display())
        }
        Err(e) => {
            bail!("cannot read config {}: {e} (set CCL_COV_CONFIG to an existing configs/*.json)", path.display())
        }
    };
    load_str(&text, path, env)
}

/// Loads the config at `path` in either format: an upstream RCCL
/// `test_runner` config (told by its top-level keys) is combined with the
/// overlay at `overlay`; anything else is ccl-coverage's own format.
pub(crate) fn load_any(path: &Path, overlay: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<LoadedConfig> {
    // `load` says why an unreadable file cannot be read.
    let Ok(text) = std::fs::read_to_string(path) else { return load(path, env) };
    match serde_json::from_str::<Value>(&text) {
        Ok(value) if crate::upstream::is_upstream(&value) => overlay::load_upstream(path, &text, overlay, env),
        _ => load_str(&text, path, env),
    }
}

/// An error in the config at `path`, at `json_path` (`$` for the whole).
pub(crate) fn error_at(path: &Path, json_path: &str, msg: &dyn std::fmt::Display) -> Error {
    Error::new(format!("{}: {}: {msg}", path.display(), if json_path.is_empty() { "$" } else { json_path }))
}

/// Parses, expands and checks config text said to come from `path`.
pub fn load_str(text: &str, path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<LoadedConfig> {
    let at = |json_path: &str, msg: &dyn std::fmt::Display| error_at(path, json_path, msg);
    let mut value: Value =
        serde_json::from_str(text).map_err(|e| Error::new(format!("{}: not valid JSON: {e}", path.display())))?;
    if !value.is_object() {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        return Err(at("", &format!("expected a JSON object (the config), got {kind}")));
    }
    expand_strings(&mut value, &mut String::new(), env).map_err(|(p, e)| at(&p, &e))?;
    let config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let json_path = e.path().to_string();
        at(if json_path == "." { "" } else { &json_path }, e.inner())
    })?;
    validate(&config).map_err(|(p, e)| at(&p, &e))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(LoadedConfig { path: path.to_path_buf(), dir, config })
}

/// Expands `${VAR}` in every string value, and rejects NUL characters in
/// values and keys: they cannot reach an argv, an environment or a path.
fn expand_strings(
    value: &mut Value,
    json_path: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), Invalid> {
    const NUL: &str = "contains a NUL character, which no argument, environment variable or path can hold";
    match value {
        Value::String(s) => {
            *s = expand::expand(s, env).map_err(|e| invalid(json_path.clone(), e.to_string()))?;
            if s.contains('\0') {
                return Err(invalid(json_path.clone(), format!("the value {NUL}")));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = json_path.len();
                json_path.push_str(&format!("[{i}]"));
                expand_strings(item, json_path, env)?;
                json_path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = json_path.len();
                if !json_path.is_empty() {
                    json_path.push('.');
                }
                json_path.push_str(key);
                if key.contains('\0') {
                    return Err(invalid(json_path.clone(), format!("the key {NUL}")));
                }
                expand_strings(item, json_path, env)?;
                json_path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

type Invalid = (String, String);

fn invalid(path: impl Into<String>, msg: impl Into<String>) -> Invalid {
    (path.into(), msg.into())
}

/// What no single value can check: names that must be defined or unique,
/// ranks within the capacity, and trials whose files must not collide.
fn validate(c: &Config) -> Result<(), Invalid> {
    check_launch(c)?;
    check_hosts(&c.hosts)?;
    let collectives = unique_names("collectives", c.collectives.iter().map(|x| &x.name))?;
    let sizes = unique_sizes(&c.sizes)?;
    let variants = check_variants(c)?;
    check_timeouts(&c.timeouts, &collectives, &sizes, &variants)?;
    check_trial_count(c)
}

/// Listing the defined launchers says how to fix a typo.
fn launcher_known(c: &Config, path: String, name: &str) -> Result<(), Invalid> {
    if c.launchers.contains_key(name) {
        return Ok(());
    }
    let known: Vec<&str> = c.launchers.keys().map(Name::as_str).collect();
    Err(invalid(path, format!("unknown launcher {name:?}; defined in `launchers`: {known:?}")))
}

/// A trial holds a slot per rank, and only `capacity` slots exist.
fn ranks_fit(c: &Config, path: String, ranks: usize) -> Result<(), Invalid> {
    if ranks <= c.capacity {
        return Ok(());
    }
    Err(invalid(path, format!("expected 1..={} ranks (the config's capacity), got {ranks}", c.capacity)))
}

/// `launch`: the default launcher exists and its ranks fit.
fn check_launch(c: &Config) -> Result<(), Invalid> {
    launcher_known(c, "launch.launcher".into(), &c.launch.launcher)?;
    ranks_fit(c, "launch.ranks".into(), c.launch.ranks)
}

/// `hosts`: each node once (a node named twice would be counted twice), and
/// a bounded list.
fn check_hosts(hosts: &[HostConfig]) -> Result<(), Invalid> {
    if hosts.len() > limits::HOSTS {
        return Err(invalid("hosts", format!("{} hosts: expected at most {}", hosts.len(), limits::HOSTS)));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, host) in hosts.iter().enumerate() {
        if let Some(first) = seen.insert(host.name.as_str(), i) {
            return Err(invalid(
                format!("hosts[{i}].name"),
                format!("duplicate host {:?} (also hosts[{first}]): expected each node once", host.name),
            ));
        }
    }
    Ok(())
}

/// `collectives` and `variants`: a name names one entry.
fn unique_names<'a>(path: &str, names: impl Iterator<Item = &'a Name>) -> Result<BTreeSet<&'a str>, Invalid> {
    let mut seen = BTreeSet::new();
    for (i, name) in names.enumerate() {
        if !seen.insert(name.as_str()) {
            return Err(invalid(format!("{path}[{i}].name"), format!("duplicate name {name:?}")));
        }
    }
    Ok(seen)
}

/// `sizes`: each once, by bytes too (`1K` and `1024` would be one trial twice).
fn unique_sizes(sizes: &[Size]) -> Result<BTreeSet<&str>, Invalid> {
    let mut by_bytes: HashMap<u64, usize> = HashMap::new();
    for (i, size) in sizes.iter().enumerate() {
        let Some(first) = by_bytes.insert(size.bytes(), i) else { continue };
        let msg = if sizes[first] == *size {
            format!("duplicate size {size:?}")
        } else {
            format!(
                "{size:?} is the same size as sizes[{first}] {:?} ({} bytes): a duplicate trial",
                sizes[first],
                size.bytes()
            )
        };
        return Err(invalid(format!("sizes[{i}]"), msg));
    }
    Ok(sizes.iter().map(Size::as_str).collect())
}

/// `variants`: unique names, launchers that exist, ranks that fit.
fn check_variants(c: &Config) -> Result<BTreeSet<&str>, Invalid> {
    let names = unique_names("variants", c.variants.iter().map(|v| &v.name))?;
    for (i, v) in c.variants.iter().enumerate() {
        if let Some(l) = &v.launcher {
            launcher_known(c, format!("variants[{i}].launcher"), l)?;
        }
        if let Some(r) = v.ranks {
            ranks_fit(c, format!("variants[{i}].ranks"), r)?;
        }
    }
    Ok(names)
}

/// `timeouts`: a rule names only collectives, sizes and variants that exist,
/// else it silently never applies.
fn check_timeouts(
    t: &Timeouts,
    collectives: &BTreeSet<&str>,
    sizes: &BTreeSet<&str>,
    variants: &BTreeSet<&str>,
) -> Result<(), Invalid> {
    for (table, rules) in [("overrides", &t.overrides), ("device_coverage", &t.device_coverage)] {
        for (i, rule) in rules.iter().enumerate() {
            for (field, value, known) in [
                ("collective", &rule.collective, collectives),
                ("size", &rule.size, sizes),
                ("variant", &rule.variant, variants),
            ] {
                if let Some(v) = value
                    && !known.contains(v.as_str())
                {
                    return Err(invalid(
                        format!("timeouts.{table}[{i}].{field}"),
                        format!("{v:?} names no {field} of this config; known: {known:?}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// At most `limits::TRIALS` trials: the plan is built in memory at every
/// start. (Whether the trials' files stay apart is the plan's check,
/// `plan::check`.)
fn check_trial_count(c: &Config) -> Result<(), Invalid> {
    let variants = c.variants.len().max(1);
    let count = c.collectives.len().checked_mul(c.sizes.len()).and_then(|n| n.checked_mul(variants));
    if count.is_none_or(|n| n > limits::TRIALS) {
        return Err(invalid(
            "collectives",
            format!(
                "{} collectives × {} sizes × {} variants is more than {} trials",
                c.collectives.len(),
                c.sizes.len(),
                variants,
                limits::TRIALS
            ),
        ));
    }
    Ok(())
}

/// Reads the environment the way the whole crate does, so tests can swap it.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The `${VAR}` lookup for a config: the process environment, plus the
/// variables the harness defines itself.
pub(crate) fn config_env(root: &Path) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| match name {
        "CCL_COV_ROOT" => Some(root.display().to_string()),
        _ => process_env(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn default_value() -> Value {
        serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap()
    }

    fn load_value(value: &Value) -> Result<LoadedConfig> {
        load_str(&value.to_string(), Path::new("/cfg/test.json"), &|n| (n == "HOME").then(|| "/home/x".to_string()))
    }

    #[test]
    fn embedded_default_loads() {
        let loaded = load_str(DEFAULT_CONFIG_TEXT, Path::new("/p/configs/local.json"), &no_env).unwrap();
        assert_eq!(loaded.config.name.as_str(), "local");
        assert_eq!(loaded.dir, Path::new("/p/configs"));
        assert_eq!(loaded.library_src(), Path::new("/p/tests/fixtures"), "relative to the config, normalised");
    }

    #[test]
    fn unknown_key_names_file_path_and_expected_keys() {
        let mut v = default_value();
        v["library"]["stepz"] = Value::Array(vec![]);
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: library"), "{err}");
        assert!(err.contains("unknown field `stepz`"), "{err}");
        assert!(err.contains("`steps`"), "lists what was expected: {err}");
    }

    #[test]
    fn wrong_type_names_the_json_path() {
        let mut v = default_value();
        v["launchers"]["threads"]["program_args"] = Value::String("-t".into());
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains("launchers.threads.program_args"), "{err}");
        assert!(err.contains("expected a sequence"), "{err}");
    }

    #[test]
    fn unset_variable_names_variable_and_path() {
        let mut v = default_value();
        v["collectives"][0]["args"] = serde_json::json!(["-x", "${CCL_COV_SURELY_UNSET}"]);
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains("collectives[0].args[1]"), "{err}");
        assert!(err.contains("CCL_COV_SURELY_UNSET is not set"), "{err}");
    }

    #[test]
    fn variables_expand_once_with_defaults() {
        let mut v = default_value();
        v["env"]["PLACE"] = Value::String("${HOME}/${NOPE:-d}".into());
        let loaded = load_value(&v).unwrap();
        assert_eq!(loaded.config.env["PLACE"].as_str(), "/home/x/d");
    }

    #[test]
    fn bad_json_says_where() {
        let err = load_str("{\"name\": ", Path::new("/x.json"), &no_env).unwrap_err().to_string();
        assert!(err.starts_with("/x.json: not valid JSON"), "{err}");
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn semantic_errors_name_their_path() {
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Edit, &str)> = vec![
            ("variants[0].launcher", Box::new(|v| v["variants"][0]["launcher"] = "nope".into()), "unknown launcher"),
            ("variants[0].ranks", Box::new(|v| v["variants"][0]["ranks"] = 999.into()), "capacity"),
            ("sizes[0]", Box::new(|v| v["sizes"][0] = "1KB".into()), "not a size"),
            (
                "collectives[1].name",
                Box::new(|v| v["collectives"][1]["name"] = v["collectives"][0]["name"].clone()),
                "duplicate",
            ),
            (
                "collectives[0].name",
                Box::new(|v| v["collectives"][0]["name"] = "All::Reduce".into()),
                "not a usable name",
            ),
            (
                "library.steps[0].argv[0]",
                Box::new(|v| v["library"]["steps"][0]["argv"][0] = "{ranks}".into()),
                "unknown placeholder",
            ),
            (
                "timeouts.overrides[0].size",
                Box::new(|v| v["timeouts"]["overrides"] = serde_json::json!([{"size": "7T", "seconds": 1}])),
                "names no size",
            ),
            (
                "launchers.threads",
                Box::new(|v| v["launchers"]["threads"]["args"] = serde_json::json!(["x"])),
                "direct launcher",
            ),
        ];
        for (path, edit, needle) in cases {
            let mut v = default_value();
            edit(&mut v);
            let err = load_value(&v).unwrap_err().to_string();
            assert!(err.contains(&format!(": {path}: ")), "expected path {path} in: {err}");
            assert!(err.contains(needle), "expected {needle:?} in: {err}");
        }
    }

    #[test]
    fn missing_field_is_reported_at_its_parent() {
        let mut v = default_value();
        v.as_object_mut().unwrap().remove("capacity");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: $: missing field `capacity`"), "at the root: {err}");

        let mut v = default_value();
        v["launch"].as_object_mut().unwrap().remove("ranks");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: launch: missing field `ranks`"), "at `launch`: {err}");

        let mut v = default_value();
        v["variants"][2]["env"] = serde_json::json!({});
        v["library"]["steps"][1].as_object_mut().unwrap().remove("name");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: library.steps[1]: missing field `name`"), "{err}");
    }

    #[test]
    fn numbers_out_of_range_name_path_and_range() {
        use serde_json::json;
        let cases: Vec<(&str, Value, &str)> = vec![
            ("capacity", json!(0), "expected an integer in 1..=4096 (ranks), got 0"),
            ("capacity", json!(4097), "1..=4096"),
            ("capacity", json!(-1), "got -1"),
            ("capacity", json!(2.5), "got 2.5"),
            ("capacity", json!(1e30), "got 1e30"),
            ("capacity", json!("4"), "invalid type: string \"4\", expected an integer in 1..=4096"),
            ("timeouts.default", json!(604_801), "1..=604800 (seconds, at most 7 days), got 604801"),
            ("timeouts.grace", json!(3601), "0..=3600"),
            ("iterations.iters", json!(0), "1..=1000000"),
            ("iterations.warmup", json!(1_000_001), "0..=1000000"),
            ("launch.ranks", json!(u64::MAX), "got 18446744073709551615"),
        ];
        for (path, value, needle) in cases {
            let mut v = default_value();
            let (parent, field) = path.rsplit_once('.').map_or(("", path), |(p, f)| (p, f));
            let target = if parent.is_empty() { &mut v } else { &mut v[parent] };
            target[field] = value;
            let err = load_value(&v).unwrap_err().to_string();
            assert!(err.starts_with(&format!("/cfg/test.json: {path}: ")), "expected path {path} in: {err}");
            assert!(err.contains(needle), "expected {needle:?} in: {err}");
        }
        // Beyond u64: serde_json reads it as a float; still an error with the range.
        let text = DEFAULT_CONFIG_TEXT.replace("\"capacity\": 4", "\"capacity\": 18446744073709551616");
        let err = load_str(&text, Path::new("/c.json"), &no_env).unwrap_err().to_string();
        assert!(err.starts_with("/c.json: capacity: expected an integer in 1..=4096"), "{err}");
    }

    #[test]
    fn sizes_are_bounded_and_compared_by_bytes() {
        let cases = [
            (serde_json::json!(["1K", "1024"]), "sizes[1]", "same size as sizes[0]"),
            (serde_json::json!(["1025G"]), "sizes[0]", "expected an integer in 0..=1099511627776"),
            (serde_json::json!(["99999999999999999999K"]), "sizes[0]", "too large"),
        ];
        for (sizes, path, needle) in cases {
            let mut v = default_value();
            v["sizes"] = sizes;
            let err = load_value(&v).unwrap_err().to_string();
            assert!(err.contains(&format!(": {path}: ")) && err.contains(needle), "{path} {needle:?}: {err}");
        }
    }

    #[test]
    fn long_names_and_too_many_trials_are_errors() {
        let mut v = default_value();
        v["variants"][0]["name"] = "v".repeat(101).into();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": variants[0].name: a name of 101 bytes is too long: expected at most 100"), "{err}");

        let mut v = default_value();
        v["sizes"] = (0..3000).map(|i| Value::from(i.to_string())).collect();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(
            err.contains(": collectives: 7 collectives × 3000 sizes × 4 variants is more than 10000 trials"),
            "{err}"
        );
    }

    #[test]
    fn nul_characters_and_bad_env_names_are_errors() {
        let mut v = default_value();
        v["args"][0] = "a\u{0}b".into();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": args[0]: the value contains a NUL character"), "{err}");

        let mut v = default_value();
        v["env"]["A=B"] = "x".into();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": env.A=B: \"A=B\" is not an environment variable name"), "{err}");
    }

    #[test]
    fn a_step_has_exactly_one_command() {
        let mut v = default_value();
        v["library"]["steps"][0]["rccl_install"] = serde_json::json!({"script": "{library_src}/install.sh"});
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": library.steps[0]: expected either argv or rccl_install, not both"), "{err}");

        v["library"]["steps"][0].as_object_mut().unwrap().remove("argv");
        assert!(load_value(&v).is_ok(), "rccl_install alone is a command");

        v["library"]["steps"][0].as_object_mut().unwrap().remove("rccl_install");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": library.steps[0]: expected argv (program first) or rccl_install"), "{err}");
    }

    #[test]
    fn timeout_rules_match_by_each_given_field() {
        let rule =
            TimeoutRule { collective: Some("AllReduce".into()), size: None, variant: Some("mpi".into()), seconds: 9 };
        assert!(rule.matches("AllReduce", "1K", Some("mpi")));
        assert!(!rule.matches("AllReduce", "1K", Some("ring")));
        assert!(!rule.matches("Reduce", "1K", Some("mpi")));
    }
}
