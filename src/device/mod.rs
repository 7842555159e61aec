//! Device coverage: AUTO, ON or OFF, resolved once per build into a decision
//! and the reason for it.
//!
//! The requirements are checked in order and the first that fails is the
//! blocker: a device target; a device linker (RCCL's `ENABLE_DEVICE_LINKER`);
//! the gate, which is ROCm 7.15 or newer (ROCm 10.x in practice: there is no
//! ROCm 7.15 release), or instead an upstream clang 23.1 or newer, the first
//! upstream release that ships HIP device coverage, whatever the ROCm version
//! of the HIP runtime; a compiler that really instruments device code; the
//! AMDGPU device profile runtime; the host collector that drains the device
//! counters at exit. CUDA/NVPTX device code is instrumented by no compiler
//! today. Whether the compiler instruments device code is read from what it
//! does, not from whether it accepts the flags: clang 19 accepts them and
//! silently leaves device code alone (docs/architecture.md, "Toolchain and
//! profile runtime").
//!
//! AUTO falls back to host-only and says why; ON turns a blocker into an
//! error that says what to change; OFF never instruments device code.

use crate::bail;
use crate::config::{DeviceConfig, DeviceMode};
use crate::error::{Error, Result};
use crate::exec::process::Cmd;
use crate::toolchain::Tool;
use crate::toolchain::objects;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Upstream's gate: AMDGPU device coverage needs ROCm 7.15 or newer.
pub(crate) const MIN_ROCM: (u32, u32, u32) = (7, 15, 0);

/// How messages name [`MIN_ROCM`]: no 7.15 was released, TheRock went from
/// 7.14 to 10.0.
const MIN_ROCM_TEXT: &str = "ROCm 7.15 or newer (ROCm 10.x)";

/// The first upstream LLVM release with HIP device coverage (device runtime,
/// host collector, `-fcoverage-mapping` forwarded to the device).
pub(crate) const MIN_UPSTREAM_CLANG: (u32, u32) = (23, 1);

/// Where compiler-rt keeps the AMDGPU profile runtime, in the order tried.
pub(crate) const DEVICE_RUNTIME_RELPATHS: [&str; 2] =
    ["lib/amdgcn-amd-amdhsa/libclang_rt.profile.a", "lib/linux/libclang_rt.profile-amdgcn.a"];

/// Where compiler-rt keeps the host collector `clang_rt.profile_rocm` for
/// this machine, in the order tried: the per-target layout (upstream's
/// default, under both spellings of the host triple), then the old one.
pub fn host_collector_relpaths() -> [String; 3] {
    let arch = std::env::consts::ARCH;
    [
        format!("lib/{arch}-unknown-linux-gnu/libclang_rt.profile_rocm.a"),
        format!("lib/{arch}-pc-linux-gnu/libclang_rt.profile_rocm.a"),
        format!("lib/linux/libclang_rt.profile_rocm-{arch}.a"),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceDecision {
    pub requested: DeviceMode,
    pub enabled: bool,
    pub reason: String,
    /// The GPU architecture, when the config names one.
    pub target: Option<String>,
    /// The device profile runtime, when device coverage is on.
    pub runtime: Option<PathBuf>,
    /// The host collector linked into the library, when device coverage is on.
    #[serde(default)]
    pub collector: Option<PathBuf>,
}

impl DeviceDecision {
    /// One line for logs and reports: `host-only (auto): the config has no device target`.
    pub(crate) fn summary(&self) -> String {
        let state = if self.enabled { "host+device" } else { "host-only" };
        format!("{state} ({}): {}", self.requested.as_str(), self.reason)
    }

    /// Whether the target is AMDGPU (HIP), where host-only needs the
    /// `-Xarch_host` flag forms.
    pub(crate) fn is_hip(&self) -> bool {
        self.target.as_deref().is_some_and(is_amdgpu)
    }
}

/// Why device coverage is unavailable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blocker {
    NoTarget,
    Nvptx { detail: String },
    LinkerDisabled,
    RocmUnknown { looked: Vec<PathBuf> },
    RocmTooOld { rocm: PathBuf, version: String },
    NotInstrumenting { detail: String },
    NoRuntime { searched: Vec<PathBuf> },
    NoCollector { searched: Vec<PathBuf> },
}

impl Blocker {
    pub(crate) fn message(&self) -> String {
        match self {
            Blocker::NoTarget => "the config has no device target (coverage.device.target)".into(),
            Blocker::Nvptx { detail } => format!(
                "CUDA/NVPTX device code cannot be instrumented: {detail}; nvcc has no source-based coverage and CUPTI's SASS metrics patch only the first kernel a context launches (docs/gpu-validation.md), so NVIDIA backends are host-only today"
            ),
            Blocker::LinkerDisabled => {
                "the device linker is disabled (coverage.device.linker is false, RCCL's ENABLE_DEVICE_LINKER=OFF)"
                    .into()
            }
            Blocker::RocmUnknown { looked } => format!(
                "the ROCm version is unknown: {}",
                if looked.is_empty() {
                    "coverage.device.rocm_path is not set".to_string()
                } else {
                    format!("none of {} gives one", join(looked))
                }
            ),
            Blocker::RocmTooOld { rocm, version } => format!(
                "device coverage needs {MIN_ROCM_TEXT} or an upstream clang {}.{} or newer, and {} is ROCm {version}",
                MIN_UPSTREAM_CLANG.0,
                MIN_UPSTREAM_CLANG.1,
                rocm.display()
            ),
            Blocker::NotInstrumenting { detail } => format!("the compiler does not instrument device code: {detail}"),
            Blocker::NoRuntime { searched } => {
                format!("the device profile runtime is missing: searched {}", join(searched))
            }
            Blocker::NoCollector { searched } => format!(
                "the host collector that drains device counters (clang_rt.profile_rocm) is missing: searched {}",
                join(searched)
            ),
        }
    }

    /// What to change so that ON works.
    fn fix(&self) -> &'static str {
        match self {
            Blocker::NoTarget => "set coverage.device.target to the GPU architecture (e.g. gfx942)",
            Blocker::Nvptx { .. } => "there is no fix today; use auto or off for NVIDIA backends",
            Blocker::LinkerDisabled => "build with the device linker (coverage.device.linker: true)",
            Blocker::RocmUnknown { .. } | Blocker::RocmTooOld { .. } => {
                "point coverage.device.rocm_path (ROCM_PATH) at ROCm 7.15 or newer (ROCm 10.x), or use an upstream clang 23.1 or newer as toolchain.cxx / CXX"
            }
            Blocker::NotInstrumenting { .. } => {
                "use the clang of ROCm 7.15 or newer (ROCm 10.x) (<rocm>/lib/llvm/bin/clang++) or an upstream clang 23.1 or newer as toolchain.cxx / CXX"
            }
            Blocker::NoRuntime { .. } => {
                "use a compiler whose resource directory ships the AMDGPU profile runtime (ROCm 7.15 or newer (ROCm 10.x), or upstream LLVM 23.1 or newer)"
            }
            Blocker::NoCollector { .. } => {
                "use a compiler whose resource directory ships clang_rt.profile_rocm (ROCm 7.15 or newer (ROCm 10.x), or upstream LLVM 23.1 or newer)"
            }
        }
    }
}

fn join(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn is_amdgpu(target: &str) -> bool {
    target.starts_with("gfx")
}

fn is_nvptx(target: &str) -> bool {
    target.starts_with("sm_") || target.starts_with("compute_")
}

/// The mode in force: `CCL_COV_DEVICE_COVERAGE` if set, else the config's.
pub(crate) fn requested_mode(config: &DeviceConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<DeviceMode> {
    match env("CCL_COV_DEVICE_COVERAGE").filter(|v| !v.is_empty()) {
        None => Ok(config.mode),
        Some(v) => match DeviceMode::parse(&v) {
            Some(mode) => Ok(mode),
            None => bail!("CCL_COV_DEVICE_COVERAGE={v:?} is not a mode: expected auto, on or off"),
        },
    }
}

/// Resolves `requested` against what the config and the compiler `cxx` allow.
pub fn decide(requested: DeviceMode, config: &DeviceConfig, cxx: &Tool) -> Result<DeviceDecision> {
    let availability = check(config, cxx)?;
    let target = config.target.clone();
    let decision = |enabled, reason: String, found: Option<Available>| DeviceDecision {
        requested,
        enabled,
        reason,
        target: target.clone(),
        runtime: found.as_ref().map(|f| f.runtime.clone()),
        collector: found.map(|f| f.collector),
    };
    Ok(match (requested, availability) {
        (DeviceMode::Off, Err(blocker)) => {
            decision(false, format!("off as requested (it would be unavailable anyway: {})", blocker.message()), None)
        }
        (DeviceMode::Off, Ok(found)) => {
            decision(false, format!("off as requested (device coverage is available: {})", found.detail), None)
        }
        (DeviceMode::On, Err(blocker)) => bail!(
            "device coverage is ON (CCL_COV_DEVICE_COVERAGE or coverage.device.mode) but unavailable because {}. To fix: {}; or set CCL_COV_DEVICE_COVERAGE=auto to fall back to host-only coverage",
            blocker.message(),
            blocker.fix()
        ),
        (DeviceMode::Auto, Err(blocker)) => decision(false, blocker.message(), None),
        (_, Ok(found)) => decision(true, found.detail.clone(), Some(found)),
    })
}

struct Available {
    runtime: PathBuf,
    collector: PathBuf,
    detail: String,
}

/// Which way the compiler passed the gate, said in the decision.
enum Gate {
    Rocm { rocm: PathBuf, version: (u32, u32, u32) },
    Upstream { version: (u32, u32) },
}

impl Gate {
    fn describe(&self) -> String {
        match self {
            Gate::Rocm { rocm, version: (a, b, c) } => {
                format!("gate passed by ROCm version: {} is ROCm {a}.{b}.{c}, {MIN_ROCM_TEXT}", rocm.display())
            }
            Gate::Upstream { version: (a, b) } => format!(
                "gate passed by capability: upstream clang {a}.{b} (23.1 or newer) instruments device code and ships both runtimes, whatever the ROCm version of the HIP runtime"
            ),
        }
    }
}

/// `(major, minor)` of an upstream (llvm.org or distribution) clang; `None`
/// for AMD's clang, whose version numbers follow LLVM's main branch and do
/// not say which device-coverage pieces it has.
pub(crate) fn upstream_release(version_line: &str) -> Option<(u32, u32)> {
    let lower = version_line.to_ascii_lowercase();
    if lower.contains("amd") || lower.contains("rocm") {
        return None;
    }
    let start = lower.find("clang version ")? + "clang version ".len();
    let (major, minor, _) = parse_dotted(&lower[start..])?;
    Some((major, minor))
}

/// The gate, or its blocker: an upstream clang 23.1 or newer passes on its
/// own, any other compiler needs the ROCm version.
fn gate(config: &DeviceConfig, cxx: &Tool) -> std::result::Result<Gate, Blocker> {
    if let Some(version) = upstream_release(&cxx.version).filter(|v| *v >= MIN_UPSTREAM_CLANG) {
        return Ok(Gate::Upstream { version });
    }
    let Some(rocm) = config.rocm_path.as_deref().map(PathBuf::from) else {
        return Err(Blocker::RocmUnknown { looked: Vec::new() });
    };
    match rocm_version(&rocm) {
        Err(looked) => Err(Blocker::RocmUnknown { looked }),
        Ok(version) if version < MIN_ROCM => {
            Err(Blocker::RocmTooOld { rocm, version: format!("{}.{}.{}", version.0, version.1, version.2) })
        }
        Ok(version) => Ok(Gate::Rocm { rocm, version }),
    }
}

/// The first blocker, or what makes device coverage available. `Err` of the
/// outer result is a failure to run the probes at all.
fn check(config: &DeviceConfig, cxx: &Tool) -> Result<std::result::Result<Available, Blocker>> {
    let Some(target) = config.target.as_deref() else { return Ok(Err(Blocker::NoTarget)) };
    let scratch = tempfile::tempdir().map_err(|e| Error::new(format!("cannot create a probe folder: {e}")))?;
    if is_nvptx(target) {
        let detail = match device_instrumented_in_plan(cxx, "cuda", target, scratch.path()) {
            Ok(true) => format!(
                "{} instruments {target} device code, but no NVPTX device profile runtime exists",
                cxx.path.display()
            ),
            Ok(false) => {
                format!("the nvptx64-nvidia-cuda -cc1 job of {} gets no -fprofile-instrument", cxx.path.display())
            }
            Err(e) => format!("{} cannot plan a CUDA compile ({e})", cxx.path.display()),
        };
        return Ok(Err(Blocker::Nvptx { detail }));
    }
    if !config.linker {
        return Ok(Err(Blocker::LinkerDisabled));
    }
    let gate = match gate(config, cxx) {
        Ok(gate) => gate,
        Err(blocker) => return Ok(Err(blocker)),
    };
    match device_instrumented_in_plan(cxx, "hip", target, scratch.path()) {
        Err(e) => {
            return Ok(Err(Blocker::NotInstrumenting {
                detail: format!("{} rejected the device coverage flags: {e}", cxx.path.display()),
            }));
        }
        Ok(false) => {
            return Ok(Err(Blocker::NotInstrumenting {
                detail: format!(
                    "the {target} -cc1 job of {} (clang {}) gets no -fprofile-instrument, so the flags would be accepted and silently ignored",
                    cxx.path.display(),
                    cxx.major
                ),
            }));
        }
        Ok(true) => {}
    }
    if let Some(detail) = device_object_not_instrumented(cxx, target, scratch.path())? {
        return Ok(Err(Blocker::NotInstrumenting { detail }));
    }
    let resource_dir =
        Cmd::new(cxx.path.display().to_string()).args(["--target=amdgcn-amd-amdhsa", "-print-resource-dir"]).read()?;
    let resource_dir = PathBuf::from(resource_dir.trim());
    let searched: Vec<PathBuf> = DEVICE_RUNTIME_RELPATHS.iter().map(|rel| resource_dir.join(rel)).collect();
    let Some(runtime) = searched.iter().find(|p| p.is_file()).cloned() else {
        return Ok(Err(Blocker::NoRuntime { searched }));
    };
    let searched: Vec<PathBuf> = host_collector_relpaths().iter().map(|rel| resource_dir.join(rel)).collect();
    let Some(collector) = searched.iter().find(|p| p.is_file()).cloned() else {
        return Ok(Err(Blocker::NoCollector { searched }));
    };
    let detail = format!(
        "{target} device code is instrumented by {} (clang {}), device profile runtime {}, host collector {}; {}",
        cxx.path.display(),
        cxx.major,
        runtime.display(),
        collector.display(),
        gate.describe()
    );
    Ok(Ok(Available { runtime, collector, detail }))
}

/// The ROCm version from `.info/version`, `core/.info/version` or rocm-core's
/// header; on failure, the files looked at.
pub(crate) fn rocm_version(rocm: &Path) -> std::result::Result<(u32, u32, u32), Vec<PathBuf>> {
    let files =
        [rocm.join(".info/version"), rocm.join("core/.info/version"), rocm.join("include/rocm-core/rocm_version.h")];
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let parsed =
            if file.extension().is_some_and(|e| e == "h") { parse_version_header(&text) } else { parse_dotted(&text) };
        if let Some(v) = parsed {
            return Ok(v);
        }
    }
    Err(files.to_vec())
}

/// `6.2.0-66` → (6, 2, 0).
fn parse_dotted(text: &str) -> Option<(u32, u32, u32)> {
    let core: String = text.trim().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let mut parts = core.split('.').map(str::parse::<u32>);
    Some((parts.next()?.ok()?, parts.next()?.ok()?, parts.next().unwrap_or(Ok(0)).ok()?))
}

/// `#define ROCM_VERSION_MAJOR 6` and its MINOR/PATCH siblings.
fn parse_version_header(text: &str) -> Option<(u32, u32, u32)> {
    let get = |name: &str| {
        text.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("#define") && words.next() == Some(name))
                .then(|| words.next()?.parse().ok())
                .flatten()
        })
    };
    Some((get("ROCM_VERSION_MAJOR")?, get("ROCM_VERSION_MINOR")?, get("ROCM_VERSION_PATCH").unwrap_or(0)))
}

const PROBE_KERNEL: &str = "__attribute__((global)) void ccl_cov_probe(int* p) { if (p) *p = 1; }\n";

/// Asks the compiler for its job plan (`-###`) of an instrumented offload
/// compile and reports whether the device `-cc1` job gets `-fprofile-instrument`.
fn device_instrumented_in_plan(cxx: &Tool, language: &str, target: &str, scratch: &Path) -> Result<bool> {
    let (source, arch_flag, triple, extra): (&str, String, &str, &[&str]) = match language {
        "cuda" => {
            ("probe.cu", format!("--cuda-gpu-arch={target}"), "nvptx64-nvidia-cuda", &["-nocudainc", "-nocudalib"])
        }
        _ => ("probe.hip", format!("--offload-arch={target}"), "amdgcn-amd-amdhsa", &["-nogpulib", "-nogpuinc"]),
    };
    let src = scratch.join(source);
    std::fs::write(&src, PROBE_KERNEL).map_err(|e| Error::new(format!("cannot write {}: {e}", src.display())))?;
    let plan = Cmd::new(cxx.path.display().to_string())
        .args(["-x", language, &arch_flag])
        .args(extra.iter().copied())
        .args(["-fprofile-instr-generate", "-fcoverage-mapping", "-c", &src.display().to_string(), "-o"])
        .arg(scratch.join("probe.o").display().to_string())
        .arg("-###")
        .read_all()?;
    Ok(device_job_instrumented(&plan, triple))
}

/// Whether the `-cc1` job for `triple` in a `-###` plan gets `-fprofile-instrument`.
pub fn device_job_instrumented(plan: &str, triple: &str) -> bool {
    plan.lines()
        .filter(|line| line.contains("\"-cc1\""))
        .filter(|line| line.contains(&format!("\"-triple\" \"{triple}\"")))
        .any(|line| line.contains("\"-fprofile-instrument="))
}

/// Compiles the probe kernel for the device only and checks the object's
/// sections; `Some(why)` when it carries no coverage.
fn device_object_not_instrumented(cxx: &Tool, target: &str, scratch: &Path) -> Result<Option<String>> {
    let src = scratch.join("probe.hip");
    let out = scratch.join(format!("device-{target}.o"));
    let compiled = Cmd::new(cxx.path.display().to_string())
        .args(["-x", "hip", &format!("--offload-arch={target}"), "--offload-device-only", "--no-gpu-bundle-output"])
        .args(["-nogpulib", "-nogpuinc", "-fprofile-instr-generate", "-fcoverage-mapping", "-c"])
        .arg(src.display().to_string())
        .arg("-o")
        .arg(out.display().to_string())
        .read();
    if let Err(e) = compiled {
        return Ok(Some(format!("a device-only compile of a probe kernel failed: {e}")));
    }
    let found = objects::inspect(&out)?;
    Ok((!found.is_instrumented()).then(|| {
        format!(
            "a device-only compile of a probe kernel by {} gave an object without __llvm_covfun/__llvm_prf_cnts",
            cxx.path.display()
        )
    }))
}

/// The instrumentation flags for the build: as configured when device code
/// is instrumented (or there is none); for a HIP target on host-only, each
/// flag in its `-Xarch_host` form so a compiler that would instrument device
/// code by default (clang 22) really instruments only the host.
pub fn coverage_flags(host_flags: &[String], decision: &DeviceDecision) -> Vec<String> {
    if decision.enabled || !decision.is_hip() {
        return host_flags.to_vec();
    }
    host_flags.iter().flat_map(|f| ["-Xarch_host".to_string(), f.clone()]).collect()
}

/// `{coverage_link_flags}`: with device coverage on, the host collector and
/// what it needs (`dlopen` of the HIP runtime, a mutex), for the library's
/// link. The whole archive, because nothing in the library refers to the
/// collector: it hooks in through a constructor and the exit-time write.
pub fn link_flags(decision: &DeviceDecision) -> Vec<String> {
    match (&decision.collector, decision.enabled) {
        (Some(collector), true) => vec![
            format!("-Wl,--whole-archive,{},--no-whole-archive", collector.display()),
            "-ldl".into(),
            "-lpthread".into(),
        ],
        _ => Vec::new(),
    }
}

/// Why `pattern` (`coverage.profile_pattern`) would let one device profile
/// overwrite another, or `None`. The device write puts its target name in
/// front of the expanded pattern and truncates, so only `%p` keeps two
/// processes apart; `%m` merges host counters but never device ones.
pub(crate) fn profile_pattern_problem(pattern: &str) -> Option<String> {
    (!pattern.contains("%p")).then(|| {
        format!(
            "coverage.profile_pattern {pattern:?} has no %p: with device coverage on, every process writes its device profiles under the same names and the last one wins (%m merges host counters only). To fix: put %p in it, e.g. \"%h-%p-%m.profraw\""
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_device() -> DeviceConfig {
        DeviceConfig { mode: DeviceMode::Auto, target: None, rocm_path: None, linker: true, objects: Vec::new() }
    }

    fn tool() -> Tool {
        Tool { path: "/nonexistent/clang++".into(), version: "clang version 22.1.8".into(), major: 22 }
    }

    #[test]
    fn env_overrides_config_and_bad_values_are_errors() {
        let cfg = no_device();
        assert_eq!(requested_mode(&cfg, &|_| Some("OFF".into())).unwrap(), DeviceMode::Off);
        assert_eq!(requested_mode(&cfg, &|_| None).unwrap(), DeviceMode::Auto);
        let err = requested_mode(&cfg, &|_| Some("maybe".into())).unwrap_err().to_string();
        assert!(err.contains("expected auto, on or off"), "{err}");
    }

    #[test]
    fn no_device_target_blocks_every_mode_its_own_way() {
        let cfg = no_device();
        let auto = decide(DeviceMode::Auto, &cfg, &tool()).unwrap();
        assert!(!auto.enabled);
        assert_eq!(auto.summary(), "host-only (auto): the config has no device target (coverage.device.target)");
        let err = decide(DeviceMode::On, &cfg, &tool()).unwrap_err().to_string();
        assert!(err.contains("unavailable because the config has no device target"), "{err}");
        assert!(err.contains("set coverage.device.target"), "{err}");
        let off = decide(DeviceMode::Off, &cfg, &tool()).unwrap();
        assert!(!off.enabled && off.reason.starts_with("off as requested"), "{off:?}");
    }

    #[test]
    fn linker_and_rocm_gates_come_before_any_compiler_probe() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = DeviceConfig { target: Some("gfx942".into()), linker: false, ..no_device() };
        let d = decide(DeviceMode::Auto, &cfg, &tool()).unwrap();
        assert!(d.reason.contains("device linker is disabled"), "{d:?}");
        cfg.linker = true;
        let d = decide(DeviceMode::Auto, &cfg, &tool()).unwrap();
        assert_eq!(d.reason, "the ROCm version is unknown: coverage.device.rocm_path is not set");
        cfg.rocm_path = Some(dir.path().display().to_string());
        let d = decide(DeviceMode::Auto, &cfg, &tool()).unwrap();
        assert!(d.reason.contains("none of") && d.reason.contains(".info/version"), "{d:?}");
        std::fs::create_dir_all(dir.path().join(".info")).unwrap();
        std::fs::write(dir.path().join(".info/version"), "7.1.0-42\n").unwrap();
        let d = decide(DeviceMode::Auto, &cfg, &tool()).unwrap();
        assert!(d.reason.contains("needs ROCm 7.15 or newer") && d.reason.ends_with("is ROCm 7.1.0"), "{d:?}");
        let err = decide(DeviceMode::On, &cfg, &tool()).unwrap_err().to_string();
        assert!(err.contains("point coverage.device.rocm_path"), "{err}");
    }

    #[test]
    fn rocm_version_sources_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let rocm = dir.path();
        std::fs::create_dir_all(rocm.join("include/rocm-core")).unwrap();
        std::fs::write(
            rocm.join("include/rocm-core/rocm_version.h"),
            "#define ROCM_VERSION_MAJOR 5\n#define ROCM_VERSION_MINOR 2\n#define ROCM_VERSION_PATCH 3\n",
        )
        .unwrap();
        assert_eq!(rocm_version(rocm), Ok((5, 2, 3)));
        std::fs::create_dir_all(rocm.join("core/.info")).unwrap();
        std::fs::write(rocm.join("core/.info/version"), "7.15.1").unwrap();
        assert_eq!(rocm_version(rocm), Ok((7, 15, 1)));
        std::fs::create_dir_all(rocm.join(".info")).unwrap();
        std::fs::write(rocm.join(".info/version"), "10.1.0-rc2").unwrap();
        assert_eq!(rocm_version(rocm), Ok((10, 1, 0)));
        assert_eq!(parse_dotted("garbage"), None);
    }

    #[test]
    fn plan_parsing_looks_only_at_the_device_job() {
        let plan = concat!(
            " \"/llvm/bin/clang-22\" \"-cc1\" \"-triple\" \"amdgcn-amd-amdhsa\" \"-emit-obj\" \"-fcuda-is-device\"\n",
            " \"/llvm/bin/clang-22\" \"-cc1\" \"-triple\" \"x86_64-pc-linux-gnu\" \"-fprofile-instrument=clang\"\n",
        );
        assert!(!device_job_instrumented(plan, "amdgcn-amd-amdhsa"));
        assert!(device_job_instrumented(plan, "x86_64-pc-linux-gnu"));
    }

    #[test]
    fn host_only_uses_xarch_host_forms_for_hip_only() {
        let flags = vec!["-fprofile-instr-generate".to_string(), "-fcoverage-mapping".to_string()];
        let hip_off = DeviceDecision {
            requested: DeviceMode::Auto,
            enabled: false,
            reason: String::new(),
            target: Some("gfx942".into()),
            runtime: None,
            collector: None,
        };
        assert_eq!(
            coverage_flags(&flags, &hip_off),
            ["-Xarch_host", "-fprofile-instr-generate", "-Xarch_host", "-fcoverage-mapping"]
        );
        let hip_on = DeviceDecision { enabled: true, ..hip_off.clone() };
        assert_eq!(coverage_flags(&flags, &hip_on), flags);
        let cuda = DeviceDecision { target: Some("sm_90".into()), ..hip_off };
        assert_eq!(coverage_flags(&flags, &cuda), flags);
    }

    #[test]
    fn only_upstream_clang_versions_count_for_the_capability_gate() {
        assert_eq!(upstream_release("clang version 23.1.0 (https://github.com/llvm/llvm-project abc)"), Some((23, 1)));
        assert_eq!(upstream_release("Debian clang version 23.1.2 (1~deb13u1)"), Some((23, 1)));
        assert_eq!(upstream_release("clang version 23.0.0git"), Some((23, 0)));
        assert_eq!(upstream_release("AMD clang version 23.1.0 (rocm-10.1.0)"), None, "AMD's numbers follow main");
        assert_eq!(upstream_release("clang version 23.1.0 (ROCm 10)"), None);
        assert_eq!(upstream_release("g++ (Debian 12.2.0-14) 12.2.0"), None);
    }

    #[test]
    fn the_profile_pattern_must_keep_processes_apart() {
        assert_eq!(profile_pattern_problem("%h-%p-%m.profraw"), None);
        let problem = profile_pattern_problem("%m.profraw").unwrap();
        assert!(problem.starts_with("coverage.profile_pattern \"%m.profraw\" has no %p"), "{problem}");
        assert!(problem.contains("To fix: put %p in it"), "{problem}");
    }
}
