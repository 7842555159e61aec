//! The NVIDIA backend: CUDA kernel line coverage from CUPTI's SASS metrics.
//!
//! The collector (`nvidia/collector.cpp`, a CUDA injection library loaded
//! through `CUDA_INJECTION64_PATH`) counts every executed SASS instruction
//! of every launched kernel and writes one record per process (`record.rs`)
//! and each cubin once; `device::nvidia::sass` maps the counts to source lines
//! through the cubins' `.debug_line` (`nvcc -lineinfo`).
//!
//! The gate is a capability, not a version: CUPTI 13.0 (CUDA 13.0's
//! `libcupti.so.2025.3.1`) patches only the first kernel a context launches,
//! CUPTI 13.4 patches every one. So at fixture time the collector is built
//! against the CUPTI found, a probe that launches three kernels runs under
//! it, and the CUPTI is accepted only if every probe kernel was recorded.

pub(crate) mod branches;
pub(crate) mod record;
pub(crate) mod sass;

use super::backend::{self, Available, Backend, DeviceBackend, Found, LineSource, join};
use super::lines::DeviceLines;
use crate::bail;
use crate::config::{DeviceConfig, KernelSelection};
use crate::env_names::{Known, Lookup, ValueKind, known};
use crate::error::{Context, Error, Result};
use crate::exec::process::Cmd;
use crate::toolchain::Tool;
use crate::workspace::files;
use record::Record;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The NVIDIA backend, in the registry.
pub(crate) struct Nvidia;

/// What NVIDIA kernel coverage needs, found by [`check`]: in `build.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needs {
    /// The CUPTI library the collector is linked against.
    pub cupti: PathBuf,
    /// Its version, as its file or its wheel names it.
    pub cupti_version: String,
    /// The injection library (`CUDA_INJECTION64_PATH`) built against it.
    pub collector: PathBuf,
    /// Whether this CUPTI counts only the kernels it is told to (the probe
    /// switched counting off for one kernel and on again for the next).
    #[serde(default)]
    pub selective: bool,
    /// NVIDIA's disassembler, which lists each cubin's branches once (`branches.rs`): the
    /// toolkit's, else one on `PATH`; none in builds recorded before device branches.
    #[serde(default)]
    pub nvdisasm: Option<PathBuf>,
}

impl DeviceBackend for Nvidia {
    fn name(&self) -> &'static str {
        "nvidia"
    }

    fn fields_are_mine(&self, found: &Found) -> std::result::Result<(), String> {
        found.get::<Needs>().map(|_| ())
    }

    fn takes_target(&self, target: &str) -> bool {
        target.starts_with("sm_") || target.starts_with("compute_")
    }

    fn target_forms(&self) -> &'static str {
        "sm_*/compute_* (NVIDIA)"
    }

    /// OFF never probes: the probe builds and runs on the GPU.
    fn checks_when_off(&self) -> bool {
        false
    }

    fn check(
        &self,
        target: &str,
        _config: &DeviceConfig,
        cxx: &Tool,
        tools: Option<&Path>,
        env: Lookup,
    ) -> Result<std::result::Result<Available, backend::Blocker>> {
        Ok(check(target, cxx, tools, env)?
            .map_err(|b| backend::Blocker { message: b.message(), fix: b.fix().to_string() }))
    }

    fn line_source(&self) -> LineSource {
        LineSource::KernelRecords
    }

    /// The line tables that map SASS offsets to source lines (`-lineinfo`).
    fn build_env(&self, _found: &Found, inherited: Lookup) -> Vec<(String, String)> {
        vec![append_lineinfo(inherited("NVCC_APPEND_FLAGS").as_deref())]
    }

    /// The collector, counting the kernels and launches `config` selects
    /// where this CUPTI can count some and not others.
    fn trial_env(
        &self,
        found: &Found,
        config: &DeviceConfig,
        profile_dir: &Path,
        cache_dir: &Path,
    ) -> Vec<(String, String)> {
        let Ok(needs) = found.get::<Needs>() else { return Vec::new() };
        let list = library_kernels_file(cache_dir);
        let library = config.kernels == KernelSelection::Library;
        let kernels = (needs.selective && library && list.is_file()).then_some(list);
        trial_env(
            &needs.collector,
            profile_dir,
            &cubins_dir(cache_dir),
            kernels.as_deref(),
            config.max_launches.filter(|_| needs.selective),
        )
    }

    /// The list of the library's kernels, the only ones its trials count.
    fn after_build(&self, found: &Found, objects: &[PathBuf], cache_dir: &Path, env: Lookup) -> Option<String> {
        if !found.get::<Needs>().is_ok_and(|needs| needs.selective) {
            return None;
        }
        Some(match write_library_kernels(objects, cache_dir, env) {
            Ok(n) => format!(
                "{n} kernels in the library's objects ({}): trials count only these unless coverage.device.kernels is \"all\"",
                library_kernels_file(cache_dir).display()
            ),
            Err(why) => format!(
                "warning: the library's kernels could not be listed ({why}): trials count every kernel, the test programs' own too"
            ),
        })
    }

    fn coverage_lost(&self, dir: &Path, expected: usize) -> Option<String> {
        records_lost(dir, expected)
    }

    fn collector_records(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        record::record_files(dir)
    }

    fn counted_kernels_file(&self, cache_dir: &Path) -> Option<PathBuf> {
        Some(library_kernels_file(cache_dir))
    }

    fn device_lines(
        &self,
        found: &Found,
        cache_dir: &Path,
        records: &BTreeMap<String, Vec<PathBuf>>,
    ) -> Result<Option<DeviceLines>> {
        let nvdisasm = found.get::<Needs>().ok().and_then(|needs| needs.nvdisasm);
        sass::device_lines(&cubins_dir(cache_dir), records, nvdisasm.as_deref()).map(Some)
    }

    fn gpus(&self) -> Vec<String> {
        Cmd::new("nvidia-smi")
            .args(["--query-gpu=index,name,driver_version,pci.bus_id", "--format=csv,noheader"])
            .read()
            .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
            .unwrap_or_default()
    }

    fn env_names(&self) -> &'static [Known] {
        ENV_NAMES
    }
}

/// The `CCL_COV_*` names only this backend reads or sets.
const ENV_NAMES: &[Known] = &[
    known("CCL_COV_CUPTI", ValueKind::Text, "the libcupti (or its folder) the device collector is built against"),
    known("CCL_COV_SASS_DIR", ValueKind::Text, "set for trials with kernel records: where the collector writes them"),
    known(
        "CCL_COV_SASS_CUBINS",
        ValueKind::Text,
        "set for trials with kernel records: where the collector saves the code objects",
    ),
    known(
        "CCL_COV_SASS_KERNELS",
        ValueKind::Text,
        "set for trials with kernel records: the kernels the collector counts",
    ),
    known(
        "CCL_COV_SASS_MAX_LAUNCHES",
        ValueKind::Text,
        "set for trials with kernel records: the launches of each kernel it counts",
    ),
    known("CCL_COV_CUDA_CAPTURE", ValueKind::Text, "a fresh H200 capture for the fixture-marker unit test"),
    known(
        "CCL_COV_NCU_CAPTURE",
        ValueKind::Text,
        "a library's capture with Nsight Compute's branches for the comparison unit test (NCCL's)",
    ),
    known(
        "CCL_COV_CUDA_CUBINS",
        ValueKind::Text,
        "another folder of code objects for the inline-chain unit test (NCCL's, on a GPU host)",
    ),
];

const COLLECTOR_SOURCE: &str = include_str!("collector.cpp");
const PROBE_SOURCE: &str = include_str!("probe.cu");
/// The probe's kernels (`extern "C"`-free names, so their mangled names
/// start `_Z2k1` and so on).
const PROBE_KERNELS: [&str; 3] = ["_Z2k1", "_Z2k2", "_Z2k3"];
/// The file name the collector is built as.
const COLLECTOR_FILE: &str = "libccl_cov_cupti.so";
/// How long the probe may take, its CUDA start-up included.
const PROBE_LIMIT: Duration = Duration::from_secs(120);

/// Why NVIDIA kernel coverage is unavailable, each in its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NvidiaBlocker {
    /// No libcupti where NVIDIA device coverage looks for one.
    NoCupti { looked: Vec<PathBuf> },
    /// The CUDA toolkit (nvcc, headers) the collector and probe need.
    NoCudaToolkit { looked: Vec<PathBuf> },
    /// The collector or the probe did not build, or the probe did not run.
    ProbeFailed { detail: String },
    /// A dry run builds and runs nothing, so the probe did not run.
    NotProbed { detail: String },
    /// The CUPTI patched only some of the probe's kernels (CUPTI 13.0 patches
    /// only the first kernel a context launches).
    Unpatched { detail: String },
}

impl NvidiaBlocker {
    pub(crate) fn message(&self) -> String {
        match self {
            NvidiaBlocker::NoCupti { looked } => {
                format!("NVIDIA kernel coverage needs CUPTI 13.4 or newer (libcupti.so.13): looked in {}", join(looked))
            }
            NvidiaBlocker::NoCudaToolkit { looked } => format!(
                "NVIDIA kernel coverage needs the CUDA toolkit (nvcc, cuda.h, CUPTI's headers): looked for {}",
                join(looked)
            ),
            NvidiaBlocker::ProbeFailed { detail }
            | NvidiaBlocker::Unpatched { detail }
            | NvidiaBlocker::NotProbed { detail } => detail.clone(),
        }
    }

    /// What to change so that ON works.
    pub(crate) fn fix(&self) -> &'static str {
        match self {
            NvidiaBlocker::NoCupti { .. } | NvidiaBlocker::Unpatched { .. } => {
                "pip install 'nvidia-cuda-cupti>=13.4' into a Python environment on PATH, or set CCL_COV_CUPTI to its libcupti.so.13"
            }
            NvidiaBlocker::NoCudaToolkit { .. } => "set CUDA_HOME to the CUDA toolkit (the default is /usr/local/cuda)",
            NvidiaBlocker::NotProbed { .. } => "run the suite itself (not a dry run), where the probe runs",
            NvidiaBlocker::ProbeFailed { .. } => {
                "run on a machine with an NVIDIA GPU and driver, and see the probe's output above"
            }
        }
    }
}

/// The libcupti to use: `CCL_COV_CUPTI` (the library or its folder), then
/// `nvidia/cu13/lib` of the Python environments on `PATH` (where
/// `pip install nvidia-cuda-cupti` puts it), then the toolkit's:
/// `$CUDA_HOME/extras/CUPTI/lib64`, or `$CUDA_HOME/lib64` where CUDA 13
/// installs it.
/// On failure, every path looked at.
pub(crate) fn find_cupti(env: Lookup) -> std::result::Result<PathBuf, Vec<PathBuf>> {
    let mut looked = Vec::new();
    // `/usr/bin` and `/usr/sbin` share a prefix, and `/lib` is often `/usr/lib`:
    // each folder is looked in (and named) once.
    let mut seen = std::collections::HashSet::new();
    let mut in_dir = |dir: &Path, looked: &mut Vec<PathBuf>| {
        if !seen.insert(dir.to_path_buf()) {
            return None;
        }
        ["libcupti.so.13", "libcupti.so"].iter().map(|name| dir.join(name)).find(|p| {
            looked.push(p.clone());
            p.is_file()
        })
    };
    if let Some(given) = env("CCL_COV_CUPTI").filter(|v| !v.is_empty()).map(PathBuf::from) {
        // Named explicitly: that one or none, never a fallback the user did not ask for.
        if given.is_file() {
            return Ok(given);
        }
        return in_dir(&given, &mut looked).ok_or(looked);
    }
    for bin in env("PATH").unwrap_or_default().split(':').filter(|d| !d.is_empty()) {
        let Some(prefix) = Path::new(bin).parent() else { continue };
        for lib in ["lib", "lib64"] {
            let Ok(lib) = std::fs::canonicalize(prefix.join(lib)) else { continue };
            let Ok(entries) = std::fs::read_dir(&lib) else { continue };
            let mut pythons: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| lib.join(e.file_name()).join("site-packages/nvidia/cu13/lib"))
                .collect();
            pythons.sort();
            for dir in pythons {
                if let Some(found) = in_dir(&dir, &mut looked) {
                    return Ok(found);
                }
            }
        }
    }
    let cuda = cuda_home(env);
    for toolkit in [cuda.join("extras/CUPTI/lib64"), cuda.join("lib64")] {
        if let Some(found) = in_dir(&toolkit, &mut looked) {
            return Ok(found);
        }
    }
    Err(looked)
}

/// `$CUDA_HOME`, else `/usr/local/cuda`.
fn cuda_home(env: Lookup) -> PathBuf {
    env("CUDA_HOME").filter(|v| !v.is_empty()).map_or_else(|| PathBuf::from("/usr/local/cuda"), PathBuf::from)
}

/// The version of a libcupti: the suffix of the file it resolves to
/// (`libcupti.so.2025.3.1`), else the version of the wheel that installed
/// it (`nvidia_cuda_cupti-13.4.92.dist-info`), else its soname's.
pub(crate) fn cupti_version(lib: &Path) -> String {
    let real = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.to_path_buf());
    let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(suffix) = name.strip_prefix("libcupti.so.").filter(|s| s.contains('.')) {
        return suffix.to_string();
    }
    // <site-packages>/nvidia/cu13/lib/libcupti.so.13
    let site = real.ancestors().nth(4);
    if let Some(Ok(entries)) = site.map(std::fs::read_dir) {
        for entry in entries.flatten() {
            let dir = entry.file_name().to_string_lossy().into_owned();
            if let Some(version) = dir.strip_prefix("nvidia_cuda_cupti-").and_then(|v| v.strip_suffix(".dist-info")) {
                return version.to_string();
            }
        }
    }
    name.strip_prefix("libcupti.so.").map_or_else(|| "of unknown version".into(), |v| format!("{v} (soname)"))
}

/// The CUPTI header folder: the toolkit's (`extras/CUPTI/include`, or
/// `include` where CUDA 13 installs them), else the one beside the library
/// (a wheel's `nvidia/cu13/include`).
fn cupti_include(cuda: &Path, cupti: &Path, looked: &mut Vec<PathBuf>) -> Option<PathBuf> {
    let beside = cupti.parent().and_then(Path::parent).map(|p| p.join("include"));
    [Some(cuda.join("extras/CUPTI/include")), Some(cuda.join("include")), beside].into_iter().flatten().find(|dir| {
        let header = dir.join("cupti_sass_metrics.h");
        looked.push(header.clone());
        header.is_file()
    })
}

/// The first blocker of NVIDIA kernel coverage for `target`, or the CUPTI
/// and collector that give it. `Err` of the outer result is a failure of the
/// harness itself (it cannot write its tools folder).
fn check(
    target: &str,
    cxx: &Tool,
    tools: Option<&Path>,
    env: Lookup,
) -> Result<std::result::Result<Available, NvidiaBlocker>> {
    let cupti = match find_cupti(env) {
        Ok(found) => found,
        Err(looked) => return Ok(Err(NvidiaBlocker::NoCupti { looked })),
    };
    let cuda = cuda_home(env);
    let mut looked = Vec::new();
    let nvcc = cuda.join("bin/nvcc");
    looked.push(nvcc.clone());
    let cuda_h = cuda.join("include/cuda.h");
    looked.push(cuda_h.clone());
    let include = cupti_include(&cuda, &cupti, &mut looked);
    let (true, true, Some(include)) = (nvcc.is_file(), cuda_h.is_file(), include) else {
        // Name what is missing, not what was found.
        looked.retain(|p| !p.is_file());
        return Ok(Err(NvidiaBlocker::NoCudaToolkit { looked }));
    };
    let version = cupti_version(&cupti);
    let Some(tools) = tools else {
        return Ok(Err(NvidiaBlocker::NotProbed {
            detail: format!(
                "not probed in a dry run: libcupti {version} ({}) is probed (it must patch all {} probe kernels) when the suite runs",
                cupti.display(),
                PROBE_KERNELS.len()
            ),
        }));
    };
    // One folder per collector source, CUPTI, compiler and target: built once.
    let mut key =
        format!("{COLLECTOR_SOURCE}\0{PROBE_SOURCE}\0{}\0{}\0{target}\0", cupti.display(), cxx.path.display());
    if let Ok(meta) = std::fs::metadata(&cupti) {
        key.push_str(&format!("{}\0{:?}", meta.len(), meta.modified().ok()));
    }
    let dir =
        tools.join(format!("cupti-{}", &files::hex(&<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes()))[..16]));
    files::create_dir(&dir)?;
    let collector = dir.join(COLLECTOR_FILE);
    let probe = dir.join("probe");
    if let Err(e) = build(&dir, cxx, &nvcc, &cuda, &include, &cupti, target) {
        return Ok(Err(NvidiaBlocker::ProbeFailed { detail: e.to_string() }));
    }
    let run = dir.join("probe-run");
    let (recorded, api) = match run_probe(&probe, &collector, &run, None) {
        Ok(found) => (found.recorded, found.api),
        Err(e) => return Ok(Err(NvidiaBlocker::ProbeFailed { detail: e.to_string() })),
    };
    // A lone libcupti.so.13 names no release; CUPTI's own API version does.
    let version = match api.filter(|_| version.ends_with("(soname)")) {
        Some(api) => format!("with CUPTI API version {api}"),
        None => version,
    };
    if recorded.len() < PROBE_KERNELS.len() {
        return Ok(Err(NvidiaBlocker::Unpatched {
            detail: format!(
                "libcupti {version} ({}) patched {} of {} probe kernels (CUPTI before 13.4 patches only the first kernel a context launches); `pip install 'nvidia-cuda-cupti>=13.4'` or set CCL_COV_CUPTI",
                cupti.display(),
                recorded.len(),
                PROBE_KERNELS.len()
            ),
        }));
    }
    let selection = probe_selection(&dir, &probe, &collector);
    let counts = match &selection {
        Ok(()) => "only the library's kernels are counted when asked (coverage.device.kernels)".to_string(),
        Err(why) => format!("every kernel is counted: switching counting per kernel does not work with it ({why})"),
    };
    let detail = format!(
        "{target} kernels are counted by CUPTI's SASS metrics: libcupti {version} ({}) patched {n} of {n} probe kernels; {counts}; collector {}",
        cupti.display(),
        collector.display(),
        n = PROBE_KERNELS.len()
    );
    let selective = selection.is_ok();
    let nvdisasm = branches::find_nvdisasm(&cuda, env("PATH").as_deref());
    Ok(Ok(Available {
        found: Found::new(Backend(&Nvidia), &Needs { cupti, cupti_version: version, collector, selective, nvdisasm }),
        detail,
    }))
}

/// Builds the collector (with the host compiler, against CUPTI's C API) and
/// the probe (with nvcc) into `dir`, unless a finished build is there.
fn build(dir: &Path, cxx: &Tool, nvcc: &Path, cuda: &Path, include: &Path, cupti: &Path, target: &str) -> Result<()> {
    let done = dir.join("built");
    if done.is_file() {
        return Ok(());
    }
    let write = |name: &str, text: &str| files::write_atomic(&dir.join(name), text.as_bytes()).map(|()| dir.join(name));
    let source = write("collector.cpp", COLLECTOR_SOURCE)?;
    let probe_source = write("probe.cu", PROBE_SOURCE)?;
    let lib_dir = cupti.parent().unwrap_or(Path::new("/"));
    let lib_name = cupti.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let collector = Cmd::new(cxx.path.display().to_string())
        .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden"])
        .arg(source.display().to_string())
        .arg(format!("-I{}", cuda.join("include").display()))
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", lib_dir.display()))
        .arg(format!("-l:{lib_name}"))
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-ldl", "-o"])
        .arg(dir.join(COLLECTOR_FILE).display().to_string());
    collector.read().context("the NVIDIA collector did not build")?;
    let probe = Cmd::new(nvcc.display().to_string())
        .arg(format!("-arch={target}"))
        .args(["-lineinfo", "-o"])
        .arg(dir.join("probe").display().to_string())
        .arg(probe_source.display().to_string());
    probe.read().context("the NVIDIA probe did not build")?;
    files::write_atomic(&done, b"")
}

/// What one probe run recorded.
struct ProbeRun {
    /// The probe kernels with executed instructions.
    recorded: BTreeSet<&'static str>,
    /// The CUPTI API version the collector read (`cuptiGetVersion`).
    api: Option<String>,
    record: Record,
}

/// The probe again, told to count k2 only (`CCL_COV_SASS_KERNELS`): it
/// launches k1, k2, k3, k1, so counting goes on before k2 and off again
/// before k3, and the process ends with it off, as a suite whose last kernel
/// is the test program's does. Works when only k2 ran, k1 and k3 were named
/// as not counted, nothing was dropped, and the probe exited cleanly.
fn probe_selection(dir: &Path, probe: &Path, collector: &Path) -> Result<()> {
    let list = dir.join("probe-kernels.txt");
    files::write_atomic(&list, b"_Z2k2Piii\n")?;
    let run = run_probe(probe, collector, &dir.join("probe-run-selective"), Some(&list))?;
    let skipped = |k: &str| run.record.skipped.keys().any(|name| name.starts_with(k));
    let others = skipped(PROBE_KERNELS[0]) && skipped(PROBE_KERNELS[2]);
    if run.recorded != BTreeSet::from([PROBE_KERNELS[1]]) || !others || run.record.dropped > 0 {
        bail!(
            "told to count k2 only, it recorded {:?}, k1 and k3 {}, {} records dropped (record {})",
            run.recorded,
            if others { "not counted" } else { "not named as uncounted" },
            run.record.dropped,
            run.record.origin
        );
    }
    Ok(())
}

/// Runs the probe under the collector (counting the kernels `kernels` lists,
/// when given), with a time limit.
fn run_probe(probe: &Path, collector: &Path, run: &Path, kernels: Option<&Path>) -> Result<ProbeRun> {
    if run.exists() {
        std::fs::remove_dir_all(run).with_context(|| format!("cannot empty {}", run.display()))?;
    }
    files::create_dir(run)?;
    let log = run.join("probe.log");
    let probe = Cmd::new(probe.display().to_string())
        .envs(trial_env(collector, run, run, kernels, None))
        .time_limit(PROBE_LIMIT);
    // The one process builder: a failure names the whole command, the collector's variables included.
    let said = probe
        .read_all()
        .map_err(|e| Error::new(format!("the NVIDIA probe failed; is there a GPU and a driver? {e}")))?;
    files::write_atomic(&log, said.as_bytes())?;
    let shown = format!("{} (under CUDA_INJECTION64_PATH={})", probe.program().to_string_lossy(), collector.display());
    let records: Vec<PathBuf> = std::fs::read_dir(run)
        .with_context(|| format!("cannot list {}", run.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tsv"))
        .collect();
    let [record] = records.as_slice() else {
        bail!(
            "the NVIDIA probe {shown} left {} record files in {}, not one; the collector said:\n{}",
            records.len(),
            run.display(),
            crate::exec::process::indent_tail(&said, crate::exec::process::TAIL_LINES)
        );
    };
    let record = Record::read(record)?;
    if !record.is_complete() {
        bail!("the NVIDIA probe's record {} has no end line", record.origin);
    }
    let recorded = PROBE_KERNELS
        .iter()
        .copied()
        .filter(|k| record.executions.keys().any(|key| key.function.starts_with(k)))
        .collect();
    Ok(ProbeRun { recorded, api: record.cupti.clone().map(|(api, _)| api), record })
}

/// `NVCC_APPEND_FLAGS` with `-lineinfo`: the line tables that map SASS
/// offsets to source lines, in every nvcc a build step runs.
fn append_lineinfo(inherited: Option<&str>) -> (String, String) {
    let value = match inherited.map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) if v.split_whitespace().any(|f| f == "-lineinfo") => v.to_string(),
        Some(v) => format!("{v} -lineinfo"),
        None => "-lineinfo".into(),
    };
    ("NVCC_APPEND_FLAGS".into(), value)
}

/// The collector's environment: loaded by the CUDA driver in every process
/// (and so in every rank: launchers forward the trial's environment),
/// modules loaded eagerly (lazy loading hides kernels from CUPTI until they
/// run), records into `records`, cubins into `cubins`; only the kernels
/// `kernels` lists are counted when it names a list, and each kernel's first
/// `max_launches` launches when it is set.
fn trial_env(
    collector: &Path,
    records: &Path,
    cubins: &Path,
    kernels: Option<&Path>,
    max_launches: Option<u32>,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("CUDA_INJECTION64_PATH".into(), collector.display().to_string()),
        ("CUDA_MODULE_LOADING".into(), "EAGER".into()),
        ("CCL_COV_SASS_DIR".into(), records.display().to_string()),
        ("CCL_COV_SASS_CUBINS".into(), cubins.display().to_string()),
    ];
    if let Some(list) = kernels {
        env.push(("CCL_COV_SASS_KERNELS".into(), list.display().to_string()));
    }
    if let Some(n) = max_launches {
        env.push(("CCL_COV_SASS_MAX_LAUNCHES".into(), n.to_string()));
    }
    env
}

/// The list of the library's kernels a build writes beside its cubins, one
/// mangled name a line: what `coverage.device.kernels: "library"` counts.
pub(crate) fn library_kernels_file(cache_dir: &Path) -> PathBuf {
    cache_dir.join("library-kernels.txt")
}

/// Writes [`library_kernels_file`]: the kernels of every cubin in the
/// library's `objects`, as the toolkit's `cuobjdump -res-usage` names them
/// (`-xelf` would write each cubin under a name built from all its sources,
/// longer than a file name may be for NCCL). An object without device code
/// adds none. On failure, why, and the file is not written: trials then
/// count every kernel, which costs time, never coverage.
pub(crate) fn write_library_kernels(objects: &[PathBuf], cache_dir: &Path, env: Lookup) -> Result<usize> {
    let cuobjdump = cuda_home(env).join("bin/cuobjdump");
    if !cuobjdump.is_file() {
        bail!("{} does not exist", cuobjdump.display());
    }
    let mut kernels = BTreeSet::new();
    for object in objects {
        let listing = Cmd::new(cuobjdump.display().to_string()).arg("-res-usage").arg(object.display().to_string());
        match listing.read() {
            Ok(text) => kernels.extend(resource_usage_functions(&text)),
            // cuobjdump fails on an object that holds no device code: nothing to count there.
            Err(e) if e.to_string().contains("does not contain device code") => {}
            Err(e) => return Err(e.context(format_args!("cannot list the kernels of {}", object.display()))),
        }
    }
    let text: String = kernels.iter().map(|k| format!("{k}\n")).collect();
    files::write_atomic(&library_kernels_file(cache_dir), text.as_bytes())?;
    Ok(kernels.len())
}

/// The functions `cuobjdump -res-usage` lists, one ` Function <name>:` line
/// each, for every cubin of the object.
fn resource_usage_functions(listing: &str) -> impl Iterator<Item = String> + '_ {
    listing
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("Function ")?.strip_suffix(':'))
        .filter(|name| !name.is_empty() && !name.contains(char::is_whitespace))
        .map(str::to_owned)
}

/// What a trial's record files say about device-coverage loss: `None` when
/// `expected` processes each left a complete record with nothing dropped.
pub(crate) fn records_lost(dir: &Path, expected: usize) -> Option<String> {
    let records = match record::record_files(dir) {
        Ok(records) => records,
        Err(e) => return Some(format!("device coverage lost: {e}")),
    };
    let mut complete = 0;
    let mut problems = Vec::new();
    for path in &records {
        match Record::read(path) {
            Ok(r) if !r.is_complete() => {
                problems.push(format!("{} has no end line (the process did not exit cleanly)", path.display()));
            }
            Ok(r) if r.dropped > 0 => {
                problems.push(format!("CUPTI dropped {} records of {}", r.dropped, path.display()));
            }
            Ok(_) => complete += 1,
            Err(e) => problems.push(e.to_string()),
        }
    }
    if complete < expected {
        problems.insert(
            0,
            format!(
                "only {complete} of {expected} processes left a complete kernel record in {} (a process killed or ended through _exit writes none)",
                dir.display()
            ),
        );
    }
    (!problems.is_empty()).then(|| format!("device coverage lost: {}", problems.join("; ")))
}

/// The cubins a build's trials saved, named by CRC, and their branch
/// listings: the one folder per build, beside it, not in it (the collector
/// creates it, one level only: the harness makes its parent as it hands the
/// build over).
pub(crate) fn cubins_dir(cache_dir: &Path) -> PathBuf {
    super::files_beside(cache_dir).join("cubins")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What a probe on an H200 with CUPTI 13.4 finds, `selective` or not.
    pub(crate) fn found(selective: bool) -> Found {
        let needs = Needs {
            cupti: "/c/libcupti.so.13".into(),
            cupti_version: "13.4.92".into(),
            collector: "/t/libccl_cov_cupti.so".into(),
            selective,
            nvdisasm: None,
        };
        Found::new(Backend(&Nvidia), &needs)
    }

    fn lookup(vars: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
        move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn cupti_is_looked_for_in_order_and_every_path_is_named() {
        let root = tempfile::tempdir().unwrap();
        let venv = root.path().join("venv");
        let wheel = venv.join("lib/python3.12/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&wheel).unwrap();
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        let cuda = root.path().join("cuda");
        let toolkit = cuda.join("extras/CUPTI/lib64");
        std::fs::create_dir_all(&toolkit).unwrap();
        // `sbin` beside `bin`, and a `lib` that is a link to another: one folder, looked in once.
        std::fs::create_dir_all(venv.join("sbin")).unwrap();
        std::fs::create_dir_all(root.path().join("merged/bin")).unwrap();
        std::os::unix::fs::symlink(venv.join("lib"), root.path().join("merged/lib")).unwrap();
        let path = format!(
            "/nonexistent/bin:{}:{}:{}",
            venv.join("bin").display(),
            venv.join("sbin").display(),
            root.path().join("merged/bin").display()
        );
        // Nothing anywhere: every place is named, once.
        let env = lookup(vec![("PATH", path.clone()), ("CUDA_HOME", cuda.display().to_string())]);
        let looked = find_cupti(&env).unwrap_err();
        let once: BTreeSet<_> = looked.iter().collect();
        assert_eq!(once.len(), looked.len(), "a path named twice: {looked:?}");
        assert!(looked.contains(&wheel.join("libcupti.so.13")), "{looked:?}");
        assert!(looked.contains(&toolkit.join("libcupti.so.13")), "{looked:?}");
        assert!(looked.contains(&cuda.join("lib64/libcupti.so.13")), "{looked:?}");
        // The toolkit's, then the wheel's before it.
        std::fs::write(toolkit.join("libcupti.so.13"), "").unwrap();
        assert_eq!(find_cupti(&env).unwrap(), toolkit.join("libcupti.so.13"));
        std::fs::write(wheel.join("libcupti.so.13"), "").unwrap();
        assert_eq!(find_cupti(&env).unwrap(), wheel.join("libcupti.so.13"));
        // CCL_COV_CUPTI wins, as a file or a folder, and a wrong one is not passed over.
        let own = root.path().join("own");
        std::fs::create_dir_all(&own).unwrap();
        let explicit = lookup(vec![("PATH", path.clone()), ("CCL_COV_CUPTI", own.display().to_string())]);
        assert_eq!(find_cupti(&explicit).unwrap_err(), [own.join("libcupti.so.13"), own.join("libcupti.so")]);
        std::fs::write(own.join("libcupti.so"), "").unwrap();
        assert_eq!(find_cupti(&explicit).unwrap(), own.join("libcupti.so"));
    }

    #[test]
    fn the_version_comes_from_the_file_or_the_wheel() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().join("libcupti.so.2025.3.1");
        std::fs::write(&real, "").unwrap();
        let link = root.path().join("libcupti.so.13");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(cupti_version(&link), "2025.3.1");
        let site = root.path().join("site-packages");
        let lib = site.join("nvidia/cu13/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(site.join("nvidia_cuda_cupti-13.4.92.dist-info")).unwrap();
        std::fs::write(lib.join("libcupti.so.13"), "").unwrap();
        assert_eq!(cupti_version(&lib.join("libcupti.so.13")), "13.4.92");
        let bare = root.path().join("bare");
        std::fs::create_dir_all(&bare).unwrap();
        std::fs::write(bare.join("libcupti.so.13"), "").unwrap();
        assert_eq!(cupti_version(&bare.join("libcupti.so.13")), "13 (soname)");
    }

    /// A probe that is not one (no GPU here): it runs through `Cmd`, its failure names the
    /// command and what it printed, and a clean exit without a record is named too.
    #[test]
    fn a_probe_that_fails_or_records_nothing_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("probe");
        let script = |body: &str| {
            std::fs::write(&fake, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        let collector = dir.path().join("libccl_cov_cupti.so");
        script("echo 'no CUDA-capable device is detected' >&2; exit 2");
        let error = run_probe(&fake, &collector, &dir.path().join("run"), None).err().unwrap().to_string();
        assert!(
            error.starts_with("the NVIDIA probe failed; is there a GPU and a driver? command failed (exit status 2): "),
            "{error}"
        );
        assert!(error.contains("CUDA_INJECTION64_PATH=") && error.contains("no CUDA-capable device"), "{error}");
        script("echo ran");
        let error = run_probe(&fake, &collector, &dir.path().join("run"), None).err().unwrap().to_string();
        assert!(error.contains("left 0 record files") && error.contains("ran"), "{error}");
        assert_eq!(std::fs::read_to_string(dir.path().join("run/probe.log")).unwrap(), "ran\n");
    }

    #[test]
    fn lineinfo_is_appended_once() {
        assert_eq!(append_lineinfo(None).1, "-lineinfo");
        assert_eq!(append_lineinfo(Some("-O3")).1, "-O3 -lineinfo");
        assert_eq!(append_lineinfo(Some("-lineinfo -O3")).1, "-lineinfo -O3");
    }

    /// What `cuobjdump -res-usage` printed for an object nvcc 13.5 built from the sass
    /// fixture (`-Xfatbin -compress-all`), one cubin.
    const RESOURCE_USAGE: &str = "\nFatbin elf code:\n================\narch = sm_90\ncode version = [1,8]\n\
        host = linux\ncompile_size = 64bit\ncompressed\nidentifier = k.cu\n\nResource usage:\n Common:\n  GLOBAL:0\n\
        \x20Function _Z14never_launchedPi:\n  REG:10 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0\n\
        \x20Function _Z10scale_intsPKiPii:\n  REG:9 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0\n\
        \x20Function _Z12scale_floatsPKfPfif:\n  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:552 TEXTURE:0 SURFACE:0 SAMPLER:0\n";

    #[test]
    fn kernel_names_are_read_from_cuobjdump_s_resource_usage() {
        assert_eq!(
            resource_usage_functions(RESOURCE_USAGE).collect::<Vec<_>>(),
            ["_Z14never_launchedPi", "_Z10scale_intsPKiPii", "_Z12scale_floatsPKfPfif"]
        );
        assert_eq!(resource_usage_functions("Function :\n Function a b:\n").count(), 0);
    }

    /// A fake `cuobjdump` that prints the listing above, then one that fails: the list is
    /// written from the listing, and a failure writes none and says why.
    #[test]
    fn the_library_s_kernels_are_listed_from_its_cubins() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("cuda/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let listing = root.path().join("listing.txt");
        std::fs::write(&listing, RESOURCE_USAGE).unwrap();
        let fake = bin.join("cuobjdump");
        let script = |body: &str| {
            std::fs::write(&fake, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        script(&format!(
            "case \"$2\" in *nodevice*) echo 'cuobjdump info    : File does not contain device code' >&2; exit 255;; esac; cat {}",
            listing.display()
        ));
        let env = lookup(vec![("CUDA_HOME", root.path().join("cuda").display().to_string())]);
        let cache = root.path().join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        let objects = [PathBuf::from("/x/libk.so"), PathBuf::from("/x/libnodevice.so")];
        assert_eq!(write_library_kernels(&objects, &cache, &env).unwrap(), 3);
        let listed = std::fs::read_to_string(library_kernels_file(&cache)).unwrap();
        assert_eq!(listed, "_Z10scale_intsPKiPii\n_Z12scale_floatsPKfPfif\n_Z14never_launchedPi\n");
        std::fs::remove_file(library_kernels_file(&cache)).unwrap();
        script("echo 'cuobjdump fatal   : Could not open input file' >&2; exit 1");
        let error = write_library_kernels(&objects, &cache, &env).unwrap_err().to_string();
        assert!(
            error.starts_with("cannot list the kernels of /x/libk.so: ") && error.contains("Could not open"),
            "{error}"
        );
        assert!(!library_kernels_file(&cache).exists());
        let none = lookup(vec![("CUDA_HOME", "/nonexistent/cuda".into())]);
        assert_eq!(
            write_library_kernels(&objects, &cache, &none).unwrap_err().to_string(),
            "/nonexistent/cuda/bin/cuobjdump does not exist"
        );
    }

    #[test]
    fn a_missing_incomplete_or_dropping_record_is_device_coverage_loss() {
        let dir = tempfile::tempdir().unwrap();
        let good = std::fs::read_to_string(record::tests::PROBE).unwrap();
        std::fs::write(dir.path().join("sass-vm-1.tsv"), &good).unwrap();
        assert_eq!(records_lost(dir.path(), 1), None);
        let lost = records_lost(dir.path(), 2).unwrap();
        assert!(lost.starts_with("device coverage lost: only 1 of 2 processes"), "{lost}");
        let cut = good.lines().filter(|l| !l.starts_with("end")).collect::<Vec<_>>().join("\n");
        std::fs::write(dir.path().join("sass-vm-2.tsv"), cut).unwrap();
        let lost = records_lost(dir.path(), 2).unwrap();
        assert!(lost.contains("sass-vm-2.tsv has no end line"), "{lost}");
        let dropped = good.replace("dropped\t0", "dropped\t7");
        std::fs::write(dir.path().join("sass-vm-2.tsv"), dropped).unwrap();
        let lost = records_lost(dir.path(), 2).unwrap();
        assert!(lost.contains("CUPTI dropped 7 records"), "{lost}");
    }

    #[test]
    fn no_cupti_and_no_toolkit_block_with_the_paths() {
        let tool =
            Tool { path: "/nonexistent/clang++".into(), version: "clang version 19".into(), major: 19, sha256: None };
        let tools = tempfile::tempdir().unwrap();
        let none = lookup(vec![("PATH", String::new()), ("CUDA_HOME", "/nonexistent/cuda".into())]);
        let Err(NvidiaBlocker::NoCupti { looked }) = check("sm_90", &tool, Some(tools.path()), &none).unwrap() else {
            panic!()
        };
        let want: Vec<PathBuf> = [
            "extras/CUPTI/lib64/libcupti.so.13",
            "extras/CUPTI/lib64/libcupti.so",
            "lib64/libcupti.so.13",
            "lib64/libcupti.so",
        ]
        .iter()
        .map(|rel| Path::new("/nonexistent/cuda").join(rel))
        .collect();
        assert_eq!(looked, want);
        let lib = tools.path().join("libcupti.so.13");
        std::fs::write(&lib, "").unwrap();
        let some =
            lookup(vec![("CCL_COV_CUPTI", lib.display().to_string()), ("CUDA_HOME", "/nonexistent/cuda".into())]);
        let Err(blocker) = check("sm_90", &tool, Some(tools.path()), &some).unwrap() else { panic!() };
        let message = blocker.message();
        assert!(message.contains("/nonexistent/cuda/bin/nvcc") && message.contains("cuda.h"), "{message}");
    }
}
