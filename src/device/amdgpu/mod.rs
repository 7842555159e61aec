//! The AMDGPU (HIP) backend: LLVM instruments device code, the device
//! profile runtime writes its counters, and the host collector
//! `clang_rt.profile_rocm` drains them at exit into device profiles that
//! llvm-cov reads with the device code objects.
//!
//! The requirements are checked in order and the first that fails is the
//! blocker: a device linker (RCCL's `ENABLE_DEVICE_LINKER`); the gate, which
//! is ROCm 7.15 or newer (ROCm 10.x in practice: there is no ROCm 7.15
//! release), or instead an upstream clang 23.1 or newer, the first upstream
//! release that ships HIP device coverage, whatever the ROCm version of the
//! HIP runtime; a compiler that really instruments device code; the AMDGPU
//! device profile runtime; the host collector. Whether the compiler
//! instruments device code is read from what it does, not from whether it
//! accepts the flags: clang 19 accepts them and silently leaves device code
//! alone (docs/architecture.md, "Toolchain and profile runtime").

use super::backend::{self, Available, Backend, DeviceBackend, Found, LineSource, join};
use crate::config::DeviceConfig;
use crate::env_names::Lookup;
use crate::error::{Context, Result};
use crate::exec::process::Cmd;
use crate::toolchain::Tool;
use crate::toolchain::objects;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The AMDGPU backend, in the registry.
pub(crate) struct Amdgpu;

/// What AMDGPU device coverage needs, found by [`check`]: in `build.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needs {
    /// The device profile runtime.
    pub runtime: PathBuf,
    /// The host collector linked into the library.
    pub collector: PathBuf,
}

impl DeviceBackend for Amdgpu {
    fn name(&self) -> &'static str {
        "amdgpu"
    }

    fn fields_are_mine(&self, found: &Found) -> std::result::Result<(), String> {
        found.get::<Needs>().map(|_| ())
    }

    fn takes_target(&self, target: &str) -> bool {
        target.starts_with("gfx")
    }

    fn target_forms(&self) -> &'static str {
        "gfx* (AMDGPU)"
    }

    fn check(
        &self,
        target: &str,
        config: &DeviceConfig,
        cxx: &Tool,
        _tools: Option<&Path>,
        _env: Lookup,
    ) -> Result<std::result::Result<Available, backend::Blocker>> {
        Ok(check(target, config, cxx)?.map_err(|b| backend::Blocker { message: b.message(), fix: b.fix().to_string() }))
    }

    fn line_source(&self) -> LineSource {
        LineSource::LlvmObjects
    }

    /// Each flag in its `-Xarch_host` form, so a compiler that would
    /// instrument device code by default (clang 22) instruments only the host.
    fn host_only_flags(&self, host_flags: &[String]) -> Vec<String> {
        host_flags.iter().flat_map(|f| ["-Xarch_host".to_string(), f.clone()]).collect()
    }

    /// The host collector and what it needs (`dlopen` of the HIP runtime, a
    /// mutex). The whole archive, because nothing in the library refers to
    /// the collector: it hooks in through a constructor and the exit-time write.
    fn link_flags(&self, found: &Found) -> Vec<String> {
        match found.get::<Needs>().ok() {
            Some(needs) => vec![
                format!("-Wl,--whole-archive,{},--no-whole-archive", needs.collector.display()),
                "-ldl".into(),
                "-lpthread".into(),
            ],
            None => Vec::new(),
        }
    }

    fn is_device_profile(&self, file_name: &str) -> bool {
        is_device_profile(file_name)
    }

    fn profile_pattern_problem(&self, pattern: &str) -> Option<String> {
        profile_pattern_problem(pattern)
    }

    fn gpus(&self) -> Vec<String> {
        Cmd::new("rocm-smi")
            .arg("--showproductname")
            .read()
            .map(|text| text.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
            .unwrap_or_default()
    }
}

/// Why AMDGPU device coverage is unavailable, each in its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AmdgpuBlocker {
    LinkerDisabled,
    RocmUnknown { looked: Vec<PathBuf> },
    RocmTooOld { rocm: PathBuf, version: String },
    NotInstrumenting { detail: String },
    NoRuntime { searched: Vec<PathBuf> },
    NoCollector { searched: Vec<PathBuf> },
}

impl AmdgpuBlocker {
    pub(crate) fn message(&self) -> String {
        match self {
            AmdgpuBlocker::LinkerDisabled => {
                "the device linker is disabled (coverage.device.linker is false, RCCL's ENABLE_DEVICE_LINKER=OFF)"
                    .into()
            }
            AmdgpuBlocker::RocmUnknown { looked } => format!(
                "the ROCm version is unknown: {}",
                if looked.is_empty() {
                    "coverage.device.rocm_path is not set".to_string()
                } else {
                    format!("none of {} gives one", join(looked))
                }
            ),
            AmdgpuBlocker::RocmTooOld { rocm, version } => format!(
                "device coverage needs {MIN_ROCM_TEXT} or an upstream clang {}.{} or newer, and {} is ROCm {version}",
                MIN_UPSTREAM_CLANG.0,
                MIN_UPSTREAM_CLANG.1,
                rocm.display()
            ),
            AmdgpuBlocker::NotInstrumenting { detail } => {
                format!("the compiler does not instrument device code: {detail}")
            }
            AmdgpuBlocker::NoRuntime { searched } => {
                format!("the device profile runtime is missing: searched {}", join(searched))
            }
            AmdgpuBlocker::NoCollector { searched } => format!(
                "the host collector that drains device counters (clang_rt.profile_rocm) is missing: searched {}",
                join(searched)
            ),
        }
    }

    /// What to change so that ON works.
    pub(crate) fn fix(&self) -> &'static str {
        match self {
            AmdgpuBlocker::LinkerDisabled => "build with the device linker (coverage.device.linker: true)",
            AmdgpuBlocker::RocmUnknown { .. } | AmdgpuBlocker::RocmTooOld { .. } => {
                "point coverage.device.rocm_path (ROCM_PATH) at ROCm 7.15 or newer (ROCm 10.x), or use an upstream clang 23.1 or newer as toolchain.cxx / CXX"
            }
            AmdgpuBlocker::NotInstrumenting { .. } => {
                "use the clang of ROCm 7.15 or newer (ROCm 10.x) (<rocm>/lib/llvm/bin/clang++) or an upstream clang 23.1 or newer as toolchain.cxx / CXX"
            }
            AmdgpuBlocker::NoRuntime { .. } => {
                "use a compiler whose resource directory ships the AMDGPU profile runtime (ROCm 7.15 or newer (ROCm 10.x), or upstream LLVM 23.1 or newer)"
            }
            AmdgpuBlocker::NoCollector { .. } => {
                "use a compiler whose resource directory ships clang_rt.profile_rocm (ROCm 7.15 or newer (ROCm 10.x), or upstream LLVM 23.1 or newer)"
            }
        }
    }
}

/// How the host collector names the device profiles it writes: the target
/// in front of the expanded `coverage.profile_pattern`.
const DEVICE_PROFILE_PREFIX: &str = "amdgcn-amd-amdhsa.";

/// Whether a raw profile is one the host collector wrote for the device.
fn is_device_profile(file_name: &str) -> bool {
    file_name.starts_with(DEVICE_PROFILE_PREFIX)
}

/// Upstream's gate: AMDGPU device coverage needs ROCm 7.15 or newer.
const MIN_ROCM: (u32, u32, u32) = (7, 15, 0);

/// How messages name [`MIN_ROCM`]: no 7.15 was released, TheRock went from
/// 7.14 to 10.0.
const MIN_ROCM_TEXT: &str = "ROCm 7.15 or newer (ROCm 10.x)";

/// The first upstream LLVM release with HIP device coverage (device runtime,
/// host collector, `-fcoverage-mapping` forwarded to the device).
const MIN_UPSTREAM_CLANG: (u32, u32) = (23, 1);

/// Where compiler-rt keeps the AMDGPU profile runtime, in the order tried.
const DEVICE_RUNTIME_RELPATHS: [&str; 2] =
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
fn gate(config: &DeviceConfig, cxx: &Tool) -> std::result::Result<Gate, AmdgpuBlocker> {
    if let Some(version) = upstream_release(&cxx.version).filter(|v| *v >= MIN_UPSTREAM_CLANG) {
        return Ok(Gate::Upstream { version });
    }
    let Some(rocm) = config.rocm_path.as_deref().map(PathBuf::from) else {
        return Err(AmdgpuBlocker::RocmUnknown { looked: Vec::new() });
    };
    match rocm_version(&rocm) {
        Err(looked) => Err(AmdgpuBlocker::RocmUnknown { looked }),
        Ok(version) if version < MIN_ROCM => {
            Err(AmdgpuBlocker::RocmTooOld { rocm, version: format!("{}.{}.{}", version.0, version.1, version.2) })
        }
        Ok(version) => Ok(Gate::Rocm { rocm, version }),
    }
}

/// The first blocker, or what makes device coverage available. `Err` of the
/// outer result is a failure to run the probes at all.
/// The first blocker of HIP device coverage for `target`, or what makes it
/// available. `Err` of the outer result is a failure to run the probes at all.
fn check(target: &str, config: &DeviceConfig, cxx: &Tool) -> Result<std::result::Result<Available, AmdgpuBlocker>> {
    let scratch = tempfile::tempdir().context("cannot create a probe folder")?;
    if !config.linker {
        return Ok(Err(AmdgpuBlocker::LinkerDisabled));
    }
    let gate = match gate(config, cxx) {
        Ok(gate) => gate,
        Err(blocker) => return Ok(Err(blocker)),
    };
    match device_instrumented_in_plan(cxx, "hip", target, scratch.path()) {
        Err(e) => {
            return Ok(Err(AmdgpuBlocker::NotInstrumenting {
                detail: format!("{} rejected the device coverage flags: {e}", cxx.path.display()),
            }));
        }
        Ok(false) => {
            return Ok(Err(AmdgpuBlocker::NotInstrumenting {
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
        return Ok(Err(AmdgpuBlocker::NotInstrumenting { detail }));
    }
    let resource_dir =
        Cmd::new(cxx.path.display().to_string()).args(["--target=amdgcn-amd-amdhsa", "-print-resource-dir"]).read()?;
    let resource_dir = PathBuf::from(resource_dir.trim());
    let searched: Vec<PathBuf> = DEVICE_RUNTIME_RELPATHS.iter().map(|rel| resource_dir.join(rel)).collect();
    let Some(runtime) = searched.iter().find(|p| p.is_file()).cloned() else {
        return Ok(Err(AmdgpuBlocker::NoRuntime { searched }));
    };
    let searched: Vec<PathBuf> = host_collector_relpaths().iter().map(|rel| resource_dir.join(rel)).collect();
    let Some(collector) = searched.iter().find(|p| p.is_file()).cloned() else {
        return Ok(Err(AmdgpuBlocker::NoCollector { searched }));
    };
    let detail = format!(
        "{target} device code is instrumented by {} (clang {}), device profile runtime {}, host collector {}; {}",
        cxx.path.display(),
        cxx.major,
        runtime.display(),
        collector.display(),
        gate.describe()
    );
    Ok(Ok(Available { found: Found::new(Backend(&Amdgpu), &Needs { runtime, collector }), detail }))
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
    let (source, arch_flag, triple, extra): (&str, String, &str, &[&str]) =
        ("probe.hip", format!("--offload-arch={target}"), "amdgcn-amd-amdhsa", &["-nogpulib", "-nogpuinc"]);
    let src = scratch.join(source);
    std::fs::write(&src, PROBE_KERNEL).with_context(|| format!("cannot write {}", src.display()))?;
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

/// Why `pattern` (`coverage.profile_pattern`) would let one device profile
/// overwrite another, or `None`. The device write puts its target name in
/// front of the expanded pattern and truncates, so only `%p` keeps two
/// processes apart; `%m` merges host counters but never device ones.
fn profile_pattern_problem(pattern: &str) -> Option<String> {
    (!pattern.contains("%p")).then(|| {
        format!(
            "coverage.profile_pattern {pattern:?} has no %p: with device coverage on, every process writes its device profiles under the same names and the last one wins (%m merges host counters only). To fix: put %p in it, e.g. \"%h-%p-%m.profraw\""
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceMode;
    use crate::device::tests::{decide, no_device, tool};

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
