//! The config's types: every section as a strict struct (unknown keys
//! rejected) whose numbers and lists check themselves while they are
//! deserialized, so an error names the JSON path and the accepted range.

use super::*;
use crate::error::Result;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Deserializes any JSON number and checks it against `bound`, so that a
/// negative, fractional or huge value gets the accepted range in its error
/// rather than serde's bare "expected u64".
pub(super) fn bounded<'de, D: Deserializer<'de>>(d: D, bound: Bound) -> Result<u64, D::Error> {
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
/// Each with the schema of its bound, for `#[schemars(schema_with)]`.
macro_rules! bounded_fields {
    ($($name:ident, $schema:ident: $ty:ty = $bound:expr;)*) => {$(
        pub(super) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            bounded(d, $bound).and_then(|n| <$ty>::try_from(n).map_err(de::Error::custom))
        }
        pub(super) fn $schema(_: &mut SchemaGenerator) -> Schema {
            bound_schema($bound)
        }
    )*};
}

/// An integer within `bound`, in JSON Schema's words.
fn bound_schema(bound: Bound) -> Schema {
    schemars::json_schema!({ "type": "integer", "minimum": bound.min, "maximum": bound.max })
}

bounded_fields! {
    capacity, capacity_schema: usize = limits::CAPACITY;
    ranks, ranks_schema: usize = limits::RANKS;
    timeout_seconds, timeout_schema: u64 = limits::TIMEOUT_SECONDS;
    grace_seconds, grace_schema: u64 = limits::GRACE_SECONDS;
    iters, iters_schema: u32 = limits::ITERS;
    warmup, warmup_schema: u32 = limits::WARMUP;
    nodes, nodes_schema: usize = limits::NODES;
    gpus_per_task, gpus_per_task_schema: usize = limits::GPUS_PER_TASK;
    host_slots, host_slots_schema: usize = limits::HOST_SLOTS;
    host_gpus, host_gpus_schema: usize = limits::HOST_GPUS;
    log_mib, log_mib_schema: u64 = limits::LOG_MIB;
}

pub(super) fn optional_host_gpus<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    host_gpus(d).map(Some)
}

pub(super) fn optional_timeout_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    timeout_seconds(d).map(Some)
}

pub(super) fn optional_ranks<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    ranks(d).map(Some)
}

/// Field deserializers for `#[serde(deserialize_with)]` of lists that must
/// not be empty, each saying what it expected.
macro_rules! non_empty_fields {
    ($($name:ident: $ty:ty = $expected:literal;)*) => {$(
        pub(super) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<$ty>, D::Error> {
            let items = Vec::<$ty>::deserialize(d)?;
            if items.is_empty() { Err(de::Error::custom(concat!("expected ", $expected))) } else { Ok(items) }
        }
    )*};
}

non_empty_fields! {
    steps: BuildStep = "at least one build step";
    argv: BuildTemplate = "a non-empty argv (program first), or rccl_install";
    objects: BuildTemplate = "at least one instrumented object";
    collectives: Collective = "at least one collective";
    sizes: Size = "at least one size such as \"1K\"";
}

/// A test binary, relative to `tests.bin_dir` unless absolute.
pub(super) fn binary<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let binary = String::deserialize(d)?;
    if binary.is_empty() { Err(de::Error::custom("expected the test binary's name")) } else { Ok(binary) }
}

/// A GPU architecture's name; which backend takes it is the device stage's
/// to say (`device::check_target`), so a new backend needs no edit here.
pub(super) fn gpu_target<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let target = Option::<String>::deserialize(d)?;
    match target {
        Some(t) if t.is_empty() || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => Err(de::Error::custom(
            format!("{t:?} is not a GPU architecture: expected an architecture name: letters, digits and `_`"),
        )),
        _ => Ok(target),
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Names the workspace (`target/ccl-coverage/<name>`) and the report.
    pub(crate) name: Name,
    /// One line for people: shown with the run and in the report.
    #[serde(default)]
    pub(crate) description: String,
    /// The compilers and LLVM tools.
    pub(crate) toolchain: ToolchainConfig,
    #[serde(default)]
    pub(crate) coverage: CoverageConfig,
    /// The library under test: built instrumented.
    pub(crate) library: LibraryBuild,
    /// The test binaries: built without instrumentation, linked to the
    /// library. Leave it out when the library's steps build them too: they
    /// are then looked for in `{build_dir}`.
    #[serde(default)]
    pub(crate) tests: TestsBuild,
    /// How trials start, by name: the test binary itself, `mpirun` or `srun`.
    pub(crate) launchers: BTreeMap<Name, LauncherConfig>,
    /// Most ranks that may run at once on this machine (GPUs, or cores).
    #[serde(deserialize_with = "capacity")]
    #[schemars(schema_with = "capacity_schema")]
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
    /// Arguments every collective's perf binary gets (before size,
    /// collective and variant args); `programs` take only their own.
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    /// Perf binaries' `-n` and `-w`.
    #[serde(default)]
    pub(crate) iterations: Iterations,
    /// Perf binaries (nccl-tests style): one trial per collective × size ×
    /// variant. At least one of `collectives` and `programs`.
    #[serde(default, deserialize_with = "collectives")]
    #[schemars(length(min = 1))]
    pub(crate) collectives: Vec<Collective>,
    /// The sizes of every collective's trials; needed with `collectives`.
    #[serde(default, deserialize_with = "sizes")]
    #[schemars(length(min = 1))]
    pub(crate) sizes: Vec<Size>,
    /// Plain test programs: one trial each, named as the program, judged by
    /// its exit status alone, run with exactly its own `args`.
    #[serde(default)]
    pub(crate) programs: Vec<Program>,
    /// Each collective × size runs once per variant (its own launcher,
    /// ranks, env, args); once without a variant when there are none.
    #[serde(default)]
    pub(crate) variants: Vec<Variant>,
    /// How long trials may run.
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub(crate) report: ReportConfig,
    #[serde(default)]
    pub(crate) logs: Logs,
    /// The JSON Schema the file is written against (`ccl-coverage
    /// config-schema`), for editors; the harness reads nothing from it.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    pub(crate) schema: Option<String>,
    /// Set when the config file is an upstream RCCL `test_runner` config: the
    /// rest of the config then comes from the overlay (`config/overlay.rs`)
    /// and the plan is the resolved tests.
    #[serde(skip)]
    pub(crate) upstream: Option<Box<UpstreamRun>>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolchainConfig {
    /// C compiler; `CC` overrides it.
    pub(crate) cc: String,
    /// C++ compiler; `CXX` overrides it.
    pub(crate) cxx: String,
    /// Tried in order when `cc` / `cxx` do not exist (e.g. `amdclang++`, `hipcc`).
    #[serde(default)]
    pub(crate) cc_fallbacks: Vec<String>,
    /// As `cc_fallbacks`, for `cxx`.
    #[serde(default)]
    pub(crate) cxx_fallbacks: Vec<String>,
    /// Explicit tools; `LLVM_PROFDATA` / `LLVM_COV` override them. When unset the
    /// tools next to the compiler are used.
    #[serde(default)]
    pub(crate) llvm_profdata: Option<String>,
    /// As `llvm_profdata`, for `llvm-cov`.
    #[serde(default)]
    pub(crate) llvm_cov: Option<String>,
    /// Folders searched for llvm-profdata / llvm-cov after the compiler's own
    /// and before PATH (a ROCm tree: `lib/llvm/bin`, `llvm/bin`, `bin`).
    #[serde(default)]
    pub(crate) tool_dirs: Vec<String>,
}

/// How the build is instrumented and profiles are named. Every field may be
/// left out: its value is then [`Default`]'s.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct CoverageConfig {
    /// Host instrumentation flags, handed to the build as `{coverage_flags}`.
    pub(crate) host_flags: Vec<String>,
    /// `LLVM_PROFILE_FILE` name inside each trial's profile directory; the harness puts each attempt's random mark before its extension (`%h-%p-%m.<mark>.profraw`), and a profile in the folder without it is another process's: quarantined, not merged.
    pub(crate) profile_pattern: String,
    pub(crate) device: DeviceConfig,
}

impl Default for CoverageConfig {
    fn default() -> Self {
        CoverageConfig {
            // Atomic counter updates: with plain increments, threads racing
            // through the same code lose updates, and because llvm-cov derives
            // some region counts by subtracting counters, a lost update can
            // mark never-run code as covered.
            host_flags: ["-fprofile-instr-generate", "-fcoverage-mapping", "-fprofile-update=atomic"]
                .map(String::from)
                .to_vec(),
            profile_pattern: "%h-%p-%m.profraw".into(),
            device: DeviceConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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

/// Device coverage. Every field may be left out: its value is then
/// [`Default`]'s.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceConfig {
    /// `CCL_COV_DEVICE_COVERAGE` overrides it.
    pub mode: DeviceMode,
    /// The GPU architecture device code is built for: `gfx942` (HIP) or
    /// `sm_90` (CUDA); none means there is no device code to instrument.
    #[serde(deserialize_with = "gpu_target")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9_]+$"))]
    pub target: Option<String>,
    /// The ROCm installation whose version gates AMDGPU device coverage.
    pub rocm_path: Option<String>,
    /// Whether the build links device code into separate code objects
    /// (RCCL's `ENABLE_DEVICE_LINKER`); device coverage needs it.
    pub linker: bool,
    /// Device code objects for llvm-cov (`*` allowed in the file name), used
    /// only while device coverage is on and only if they carry coverage mapping.
    pub objects: Vec<BuildTemplate>,
    /// NVIDIA: which kernels CUPTI counts. Counting costs every executed
    /// instruction, and a test program's own kernels (nccl-tests' data fill
    /// and check) execute the most, for lines the report leaves out anyway.
    pub kernels: KernelSelection,
    /// NVIDIA: count only each kernel's first this many launches in a
    /// process; every launch when unset (the safe default: a later launch
    /// can take paths the first ones did not).
    #[serde(deserialize_with = "max_launches")]
    #[schemars(range(min = 1))]
    pub max_launches: Option<u32>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            mode: DeviceMode::Auto,
            target: None,
            rocm_path: None,
            linker: true,
            objects: Vec::new(),
            kernels: KernelSelection::Library,
            max_launches: None,
        }
    }
}

/// Which NVIDIA kernels device coverage counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KernelSelection {
    /// The kernels in the library's objects' cubins (`library.objects`).
    #[default]
    Library,
    /// Every kernel a trial launches, the test programs' own too.
    All,
}

fn max_launches<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<u32>::deserialize(d)? {
        Some(0) => Err(de::Error::custom(
            "0 launches would count nothing: expected a number of launches from 1, or leave max_launches out to count every launch",
        )),
        n => Ok(n),
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(try_from = "StepFields")]
pub(crate) struct BuildStep {
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

/// A [`BuildStep`] before its command is checked: the fields check themselves,
/// but only the whole step knows whether it has exactly one command.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct StepFields {
    /// Names the step in its log (`NN-<name>.log` in the build's `logs/`) and in errors.
    name: String,
    /// The command, program first; exactly one of `argv` and `rccl_install`.
    #[serde(default, deserialize_with = "argv")]
    #[schemars(length(min = 1))]
    argv: Vec<BuildTemplate>,
    /// RCCL's install.sh, with the coverage flags and CMake options the
    /// harness resolves.
    #[serde(default)]
    rccl_install: Option<RcclInstall>,
    /// Added to the step's environment.
    #[serde(default)]
    env: Env<BuildTemplate>,
    /// Working directory; the build directory when unset.
    #[serde(default)]
    cwd: Option<BuildTemplate>,
}

impl TryFrom<StepFields> for BuildStep {
    type Error = &'static str;

    fn try_from(f: StepFields) -> Result<BuildStep, Self::Error> {
        let StepFields { name, argv, rccl_install, env, cwd } = f;
        match (argv.is_empty(), &rccl_install) {
            (true, None) => Err("expected argv (program first) or rccl_install"),
            (false, Some(_)) => Err("expected either argv or rccl_install, not both"),
            _ => Ok(BuildStep { name, argv, rccl_install, env, cwd }),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RcclInstall {
    /// The path of `install.sh`.
    pub(crate) script: BuildTemplate,
    /// Its flags; the coverage flags are added or removed as `rccl.rs` says.
    #[serde(default)]
    pub(crate) flags: Vec<BuildTemplate>,
    /// CMake options for `--cmake-options`; one string may hold several,
    /// quoted as install.sh will see them.
    #[serde(default)]
    pub(crate) cmake_options: Vec<BuildTemplate>,
    /// `--jobs`; `{jobs}` (`CCL_COV_JOBS`, else every core) when unset.
    #[serde(default)]
    pub(crate) jobs: Option<BuildTemplate>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LibraryBuild {
    /// Source tree, relative to the config file; hashed into the build key.
    pub(crate) source_dir: String,
    /// Top-level entries of `source_dir` left out of the build key (in-tree
    /// build folders, for example). Hidden entries are always left out.
    #[serde(default)]
    pub(crate) hash_exclude: Vec<String>,
    /// The commands that build it, in order, each supervised and logged.
    #[serde(deserialize_with = "steps")]
    #[schemars(length(min = 1))]
    pub(crate) steps: Vec<BuildStep>,
    /// Objects the report covers. Each must carry coverage mapping.
    #[serde(deserialize_with = "objects")]
    #[schemars(length(min = 1))]
    pub(crate) objects: Vec<BuildTemplate>,
    /// An instrumented build to use instead of building (`{build_dir}`);
    /// `CCL_COV_BUILD_DIR` overrides it.
    #[serde(default)]
    pub(crate) existing_build: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TestsBuild {
    /// Source tree of the test programs, relative to the config file;
    /// hashed into the build key. The library's `source_dir` when unset.
    #[serde(default)]
    pub(crate) source_dir: Option<String>,
    /// As `library.hash_exclude`.
    #[serde(default)]
    pub(crate) hash_exclude: Vec<String>,
    /// The commands that build the test programs, after the library's; none
    /// when the library's steps build them too.
    #[serde(default)]
    pub(crate) steps: Vec<BuildStep>,
    /// Where the test binaries land.
    #[serde(default = "TestsBuild::build_dir")]
    pub(crate) bin_dir: BuildTemplate,
    /// Already-built test binaries to use instead of running `steps`;
    /// `CCL_COV_TESTS_DIR` overrides it.
    #[serde(default)]
    pub(crate) existing_bin_dir: Option<String>,
}

impl Config {
    /// What the tests' source hash leaves out: with the library's sources,
    /// the library's `hash_exclude` too (its in-tree build folders).
    pub(crate) fn tests_hash_exclude(&self) -> Vec<String> {
        let tests = &self.tests;
        let mut exclude = tests.hash_exclude.clone();
        if tests.source_dir.is_none() {
            exclude.extend(self.library.hash_exclude.iter().filter(|e| !tests.hash_exclude.contains(e)).cloned());
        }
        exclude
    }
}

impl TestsBuild {
    fn build_dir() -> BuildTemplate {
        BuildTemplate::try_from("{build_dir}".to_string()).expect("{build_dir} is a build placeholder")
    }
}

/// Without a `tests` section: the library's steps build the test binaries
/// into the build folder.
impl Default for TestsBuild {
    fn default() -> Self {
        TestsBuild {
            source_dir: None,
            hash_exclude: Vec::new(),
            steps: Vec::new(),
            bin_dir: TestsBuild::build_dir(),
            existing_bin_dir: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LauncherKind {
    /// The test binary itself (ranks as threads of one process).
    Direct,
    Mpirun,
    Srun,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
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

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
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
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LauncherFields {
    /// `direct` runs the test binary itself; `mpirun` and `srun` start its ranks.
    kind: LauncherKind,
    /// Launcher program; `mpirun` / `srun` by default.
    #[serde(default)]
    program: Option<String>,
    /// The MPI whose options `mpirun` and `srun --mpi=` take.
    #[serde(default)]
    flavor: MpiFlavor,
    /// Launcher arguments, before the test binary.
    #[serde(default)]
    args: Vec<TrialTemplate>,
    /// Appended to a collective's perf binary's arguments (`-t {ranks}`,
    /// `-g 1`); not to a program's.
    #[serde(default)]
    program_args: Vec<TrialTemplate>,
    /// Nodes a trial of this launcher spans (srun `--nodes`).
    #[serde(default = "one_node", deserialize_with = "nodes")]
    #[schemars(schema_with = "nodes_schema")]
    nodes: usize,
    /// GPUs each rank needs (srun `--gpus-per-task`); 0 is none.
    #[serde(default, deserialize_with = "gpus_per_task")]
    #[schemars(schema_with = "gpus_per_task_schema")]
    gpus_per_task: usize,
}

pub(super) fn one_node() -> usize {
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostConfig {
    /// The name the launcher reaches it by (`mpirun --host`).
    pub(crate) name: HostName,
    /// Ranks it may run.
    #[serde(deserialize_with = "host_slots")]
    #[schemars(schema_with = "host_slots_schema")]
    pub(crate) slots: usize,
    /// Its GPUs; without it, one GPU slot per rank slot.
    #[serde(default, deserialize_with = "optional_host_gpus", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "host_gpus_schema")]
    pub(crate) gpus: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaunchDefaults {
    /// A key of `launchers`.
    pub(crate) launcher: String,
    /// Ranks a trial's launcher starts, at most `capacity`.
    #[serde(deserialize_with = "ranks")]
    #[schemars(schema_with = "ranks_schema")]
    pub(crate) ranks: usize,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Iterations {
    /// `-n`: timed iterations.
    #[serde(deserialize_with = "iters")]
    #[schemars(schema_with = "iters_schema")]
    pub(crate) iters: u32,
    /// `-w`: warm-up iterations.
    #[serde(deserialize_with = "warmup")]
    #[schemars(schema_with = "warmup_schema")]
    pub(crate) warmup: u32,
    /// Under coverage, run `-n 1 -w 0` instead: coverage needs one pass
    /// through the code, not stable timings. `CCL_COV_TRIM_ITERATIONS`
    /// overrides it.
    #[serde(default = "Iterations::trim_by_default")]
    pub(crate) trim_under_coverage: bool,
}

/// Without an `iterations` section; in one, `iters` and `warmup` must be given.
impl Default for Iterations {
    fn default() -> Self {
        Iterations { iters: 5, warmup: 2, trim_under_coverage: true }
    }
}

impl Iterations {
    fn trim_by_default() -> bool {
        Iterations::default().trim_under_coverage
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Collective {
    /// The first part of its trials' names (`AllReduce::1K::ring`).
    pub(crate) name: Name,
    /// Test binary, relative to `tests.bin_dir` unless absolute.
    #[serde(deserialize_with = "binary")]
    #[schemars(length(min = 1))]
    pub(crate) binary: String,
    /// After the config's `args`, `-n`/`-w` and `-b SIZE -e SIZE`.
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    /// Added to the config's `env`.
    #[serde(default)]
    pub(crate) env: Env<TrialTemplate>,
    /// Marks its trials ignored (run with `--ignored` / `--include-ignored`).
    #[serde(default)]
    pub(crate) ignore: bool,
}

/// A test program of the config: a plain executable judged by its exit
/// status, a googletest binary or a `ctest` run, each judged by the runner's
/// own report. Nothing is appended to its arguments but its kind's filter
/// and report options.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Program {
    /// The trial's name, as libtest and the reports show it; with `sizes`,
    /// the first part of its trials' names (`bench::1K`).
    pub(crate) name: Name,
    /// How it runs and what decides whether it passed (docs/config.md, "How
    /// each kind of trial passes").
    #[serde(default)]
    pub(crate) kind: ProgramKind,
    /// The program, relative to `tests.bin_dir` unless absolute; needed by
    /// `plain` and `gtest`. For `ctest`: the ctest program, absolute or
    /// looked up on `PATH`, `ctest` when unset.
    #[serde(default, deserialize_with = "optional_binary")]
    #[schemars(length(min = 1))]
    pub(crate) binary: Option<String>,
    /// `gtest`: `--gtest_filter` (`*AllreduceTest*:-*Slow*`); `ctest`: `-R`,
    /// a regular expression; every test when unset. Not for `plain`.
    #[serde(default, deserialize_with = "optional_filter")]
    #[schemars(length(min = 1))]
    pub(crate) filter: Option<String>,
    /// One trial per size, named `<name>::<size>`, each with its size in
    /// `{size}` (as written) and `{bytes}`; one trial, without them, when unset.
    #[serde(default, deserialize_with = "sizes")]
    #[schemars(length(min = 1))]
    pub(crate) sizes: Vec<Size>,
    /// Its arguments, exactly (after the filter, before the report option);
    /// the launcher's `program_args` are not added.
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    /// Added to the config's `env`.
    #[serde(default)]
    pub(crate) env: Env<TrialTemplate>,
    /// A key of `launchers`; `launch.launcher` when unset. A `ctest` program
    /// needs a `direct` one: `ctest` starts its tests itself.
    #[serde(default)]
    pub(crate) launcher: Option<String>,
    /// Ranks its launcher starts; `launch.ranks` when unset.
    #[serde(default, deserialize_with = "optional_ranks")]
    #[schemars(schema_with = "ranks_schema")]
    pub(crate) ranks: Option<usize>,
    /// Seconds it may run; `timeouts.default` when unset.
    #[serde(default, deserialize_with = "optional_timeout_seconds")]
    #[schemars(schema_with = "timeout_schema")]
    pub(crate) timeout: Option<u64>,
    /// Marks its trial ignored (run with `--ignored` / `--include-ignored`).
    #[serde(default)]
    pub(crate) ignore: bool,
}

/// What runs a program's trial and what decides whether it passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProgramKind {
    /// Any executable: its exit status alone.
    #[default]
    Plain,
    /// A googletest binary: `--gtest_filter`, and its XML report.
    Gtest,
    /// `ctest -R`, in `tests.bin_dir`, and its JUnit report.
    Ctest,
}

impl ProgramKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProgramKind::Plain => "plain",
            ProgramKind::Gtest => "gtest",
            ProgramKind::Ctest => "ctest",
        }
    }
}

pub(super) fn optional_binary<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    binary(d).map(Some)
}

/// A test filter; an empty one would select every test by accident.
pub(super) fn optional_filter<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let filter = String::deserialize(d)?;
    if filter.is_empty() {
        Err(de::Error::custom("expected a filter (leave `filter` out to run every test)"))
    } else {
        Ok(Some(filter))
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Variant {
    /// The last part of its trials' names (`AllReduce::1K::ring`).
    pub(crate) name: Name,
    /// A key of `launchers`; `launch.launcher` when unset.
    #[serde(default)]
    pub(crate) launcher: Option<String>,
    /// Ranks its launcher starts; `launch.ranks` when unset.
    #[serde(default, deserialize_with = "optional_ranks")]
    #[schemars(schema_with = "ranks_schema")]
    pub(crate) ranks: Option<usize>,
    /// Added to the config's and the collective's `env`.
    #[serde(default)]
    pub(crate) env: Env<TrialTemplate>,
    /// After the collective's `args`.
    #[serde(default)]
    pub(crate) args: Vec<TrialTemplate>,
    /// Marks its trials ignored (run with `--ignored` / `--include-ignored`).
    #[serde(default)]
    pub(crate) ignore: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// Seconds a trial may run.
    #[serde(deserialize_with = "timeout_seconds")]
    #[schemars(schema_with = "timeout_schema")]
    pub(crate) default: u64,
    /// Seconds between SIGTERM and SIGKILL.
    #[serde(deserialize_with = "grace_seconds")]
    #[schemars(schema_with = "grace_schema")]
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

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeoutRule {
    /// The collective it applies to; every one when unset.
    #[serde(default)]
    pub(crate) collective: Option<String>,
    /// The size it applies to; every one when unset.
    #[serde(default)]
    pub(crate) size: Option<String>,
    /// The variant it applies to; every one when unset.
    #[serde(default)]
    pub(crate) variant: Option<String>,
    /// The timeout of the trials it matches.
    #[serde(deserialize_with = "timeout_seconds")]
    #[schemars(schema_with = "timeout_schema")]
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
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Logs {
    /// Most MiB of output one log keeps: the first half and the last half,
    /// with a line saying how much was cut between them.
    #[serde(deserialize_with = "log_mib")]
    #[schemars(schema_with = "log_mib_schema")]
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

/// What the report leaves out and how it names files. Every field may be
/// left out: its value is then [`Default`]'s.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct ReportConfig {
    /// Files left out of every report (llvm-cov `-ignore-filename-regex`,
    /// joined with `|`). Anchor them: upstream's `ext.*` also dropped `context.cc`.
    pub(crate) ignore_filename_regex: Vec<String>,
    /// The library's test code, left out of every object the report
    /// measures: paths relative to `library.source_dir`, a folder ending in
    /// `/`, `*` any part of a name, `**/` any folders. Files under
    /// `tests.source_dir` are test code too, unless that folder holds the library's.
    pub(crate) test_code: Vec<String>,
    /// Whether the report measures, beside `library.objects`, every other
    /// instrumented program or library of the build that wrote profiles (a
    /// test program with the library's header code or `.c` file compiled
    /// in); `false` measures `library.objects` alone.
    pub(crate) measure_programs: bool,
    /// Whether `coverage_report` snapshot-checks the summary.
    pub(crate) snapshot: bool,
    /// The prefix taken off the file names of `coverage.lcov` and
    /// `coverage.json`, so that Codecov and Coveralls match them to the
    /// repository; relative to the config's folder. Default: the library's
    /// `source_dir`; `""` keeps absolute paths.
    pub(crate) path_prefix: Option<String>,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            // System, CUDA and ROCm headers, and nvcc's temporary host files.
            ignore_filename_regex: ["^/usr/", "^/opt/rocm", "(^|/)tmpxft_[^/]*$", "cudafe1"].map(String::from).to_vec(),
            test_code: ["**/test/", "**/tests/"].map(String::from).to_vec(),
            measure_programs: true,
            snapshot: true,
            path_prefix: None,
        }
    }
}
