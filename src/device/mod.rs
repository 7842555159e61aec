//! Device coverage: AUTO, ON or OFF, resolved once per build into a decision
//! that names its backend, and the reason for it.
//!
//! The target picks the backend: `gfx*` is AMDGPU (`amdgpu.rs`: LLVM
//! instruments HIP device code), `sm_*`/`compute_*` is NVIDIA (`nvidia.rs`:
//! CUPTI's SASS metrics count every executed instruction, and the cubins'
//! line tables make that line coverage). Each backend checks its own
//! requirements; the first that fails is the blocker. AUTO falls back to
//! host-only and says why; ON turns a blocker into an error that says what
//! to change; OFF never instruments device code.

pub mod amdgpu;
mod decision;
pub(crate) mod nvidia;

pub(crate) use decision::LineSource;
pub use decision::{Backend, DeviceDecision, Found};

use crate::bail;
use crate::config::{DeviceConfig, DeviceMode};
use crate::env_names::Lookup;
use crate::error::Result;
use crate::toolchain::Tool;
use std::path::{Path, PathBuf};

/// Why device coverage is unavailable: no target, or a backend's own blocker,
/// which words its message and its fix itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blocker {
    NoTarget,
    Amdgpu(amdgpu::Blocker),
    Nvidia(nvidia::Blocker),
}

impl Blocker {
    pub(crate) fn message(&self) -> String {
        match self {
            Blocker::NoTarget => "the config has no device target (coverage.device.target)".into(),
            Blocker::Amdgpu(blocker) => blocker.message(),
            Blocker::Nvidia(blocker) => blocker.message(),
        }
    }

    /// What to change so that ON works.
    fn fix(&self) -> &'static str {
        match self {
            Blocker::NoTarget => "set coverage.device.target to the GPU architecture (e.g. gfx942 or sm_90)",
            Blocker::Amdgpu(blocker) => blocker.fix(),
            Blocker::Nvidia(blocker) => blocker.fix(),
        }
    }
}

/// The mode in force: `CCL_COV_DEVICE_COVERAGE` if set, else the config's.
pub(crate) fn requested_mode(config: &DeviceConfig, env: Lookup<'_>) -> Result<DeviceMode> {
    match env("CCL_COV_DEVICE_COVERAGE").filter(|v| !v.is_empty()) {
        None => Ok(config.mode),
        Some(v) => match DeviceMode::parse(&v) {
            Some(mode) => Ok(mode),
            None => bail!("CCL_COV_DEVICE_COVERAGE={v:?} is not a mode: expected auto, on or off"),
        },
    }
}

/// Resolves `requested` against what the config, the compiler `cxx` and the
/// machine allow. `tools` is where a backend builds what it needs at fixture
/// time (NVIDIA's collector and probe), `None` in a dry run, which builds and
/// runs nothing; `env` is the environment to read.
pub fn decide(
    requested: DeviceMode,
    config: &DeviceConfig,
    cxx: &Tool,
    tools: Option<&Path>,
    env: Lookup,
) -> Result<DeviceDecision> {
    let target = config.target.clone();
    let backend = match target.as_deref() {
        Some(target) => match Backend::of_target(target) {
            Some(backend) => Some(backend),
            None => bail!(
                "coverage.device.target {target:?} names no backend: expected gfx* (AMDGPU) or sm_*/compute_* (NVIDIA)"
            ),
        },
        None => None,
    };
    let decision = |enabled, reason: String, found: Option<Found>| DeviceDecision {
        requested,
        enabled,
        reason,
        target: target.clone(),
        backend,
        found,
    };
    // OFF never probes: NVIDIA's probe builds and runs on the GPU.
    if requested == DeviceMode::Off && backend == Some(Backend::Nvidia) {
        return Ok(decision(false, "off as requested".into(), None));
    }
    let availability = match (target.as_deref(), backend) {
        (Some(target), Some(Backend::Amdgpu)) => amdgpu::check(target, config, cxx)?.map_err(Blocker::Amdgpu),
        (Some(target), Some(Backend::Nvidia)) => nvidia::check(target, cxx, tools, env)?.map_err(Blocker::Nvidia),
        _ => Err(Blocker::NoTarget),
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
        (_, Ok(available)) => decision(true, available.detail, Some(available.found)),
    })
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

/// `{coverage_link_flags}`: with AMDGPU device coverage on, the host
/// collector and what it needs (`dlopen` of the HIP runtime, a mutex), for
/// the library's link. The whole archive, because nothing in the library
/// refers to the collector: it hooks in through a constructor and the
/// exit-time write.
pub fn link_flags(decision: &DeviceDecision) -> Vec<String> {
    match (&decision.found, decision.enabled) {
        (Some(Found::Amdgpu { collector, .. }), true) => vec![
            format!("-Wl,--whole-archive,{},--no-whole-archive", collector.display()),
            "-ldl".into(),
            "-lpthread".into(),
        ],
        _ => Vec::new(),
    }
}

/// What a build step's environment gains from device coverage: NVIDIA's
/// line tables (`-lineinfo`, through nvcc's `NVCC_APPEND_FLAGS`, added to
/// any value `inherited` holds).
pub(crate) fn build_env(decision: &DeviceDecision, inherited: Option<&str>) -> Vec<(String, String)> {
    match decision.nvidia() {
        Some(_) => vec![nvidia::append_lineinfo(inherited)],
        None => Vec::new(),
    }
}

/// What a trial's environment gains from device coverage: NVIDIA's
/// collector, writing its records into the trial's `profile_dir` and the
/// cubins once per build under the build's `cache_dir`, counting the kernels
/// and launches `config` selects.
pub(crate) fn trial_env(
    decision: &DeviceDecision,
    config: &DeviceConfig,
    profile_dir: &Path,
    cache_dir: &Path,
) -> Vec<(String, String)> {
    match decision.nvidia() {
        Some((collector, _)) => {
            let selective = decision.nvidia_selective();
            let list = nvidia::library_kernels_file(cache_dir);
            let library = config.kernels == crate::config::KernelSelection::Library;
            let kernels = (selective && library && list.is_file()).then_some(list);
            nvidia::trial_env(
                collector,
                profile_dir,
                &nvidia::cubins_dir(cache_dir),
                kernels.as_deref(),
                config.max_launches.filter(|_| selective),
            )
        }
        None => Vec::new(),
    }
}

/// Why a passed trial's device coverage is lost, judged like its host
/// profiles: a backend whose collector writes records of its own (NVIDIA)
/// checks that each of the `expected` processes left a complete one in `dir`.
/// AMDGPU's device profiles are llvm's, checked with the host's.
pub(crate) fn coverage_lost(decision: &DeviceDecision, dir: &Path, expected: usize) -> Option<String> {
    decision.nvidia().and_then(|_| nvidia::records_lost(dir, expected))
}

/// Whether a raw profile in a trial's folder is a backend's device profile
/// (AMDGPU's host collector writes `<target>.<pattern>`), not a host process's.
pub(crate) fn is_device_profile(file_name: &str) -> bool {
    amdgpu::is_device_profile(file_name)
}

/// The records a backend's own collector left in a trial's profile folder
/// (NVIDIA's kernel records), sorted; none when the folder does not exist.
pub(crate) fn collector_records(dir: &Path) -> Result<Vec<PathBuf>> {
    nvidia::record::record_files(dir)
}

/// What a backend does once the library is built, for its trials: NVIDIA's
/// list of the library's kernels, the only ones they count. Returns what to
/// say; a failure is said, not raised, since it costs time, never coverage.
pub(crate) fn after_build(
    decision: &DeviceDecision,
    objects: &[PathBuf],
    cache_dir: &Path,
    env: Lookup,
) -> Option<String> {
    if !decision.nvidia_selective() {
        return None;
    }
    Some(match nvidia::write_library_kernels(objects, cache_dir, env) {
        Ok(n) => format!(
            "{n} kernels in the library's objects ({}): trials count only these unless coverage.device.kernels is \"all\"",
            nvidia::library_kernels_file(cache_dir).display()
        ),
        Err(why) => format!(
            "warning: the library's kernels could not be listed ({why}): trials count every kernel, the test programs' own too"
        ),
    })
}

/// The file of the kernels a build's trials count ([`after_build`]).
pub(crate) fn counted_kernels_file(cache_dir: &Path) -> PathBuf {
    nvidia::library_kernels_file(cache_dir)
}

/// Where a build with kernel records keeps the code objects they are mapped
/// through (NVIDIA's cubins, saved once per build by its trials).
pub(crate) fn kernel_objects_dir(cache_dir: &Path) -> PathBuf {
    nvidia::cubins_dir(cache_dir)
}

/// Why the profile file pattern cannot work with this backend's device
/// coverage on; `None` when it can.
pub(crate) fn profile_pattern_problem(decision: &DeviceDecision, pattern: &str) -> Option<String> {
    match decision.backend {
        Some(Backend::Amdgpu) if decision.enabled => amdgpu::profile_pattern_problem(pattern),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// No device target, mode AUTO.
    pub(crate) fn no_device() -> DeviceConfig {
        DeviceConfig { mode: DeviceMode::Auto, linker: true, ..DeviceConfig::default() }
    }

    /// A clang 22 that is not there.
    pub(crate) fn tool() -> Tool {
        Tool { path: "/nonexistent/clang++".into(), version: "clang version 22.1.8".into(), major: 22, sha256: None }
    }

    /// `decide` with no tools folder and an empty environment.
    pub(crate) fn decide(mode: DeviceMode, cfg: &DeviceConfig, cxx: &Tool) -> Result<DeviceDecision> {
        super::decide(mode, cfg, cxx, Some(Path::new("/nonexistent/tools")), &|_| None)
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
    fn host_only_uses_xarch_host_forms_for_hip_only() {
        let flags = vec!["-fprofile-instr-generate".to_string(), "-fcoverage-mapping".to_string()];
        let hip_off = DeviceDecision {
            requested: DeviceMode::Auto,
            enabled: false,
            reason: String::new(),
            target: Some("gfx942".into()),
            backend: Some(Backend::Amdgpu),
            found: None,
        };
        assert_eq!(
            coverage_flags(&flags, &hip_off),
            ["-Xarch_host", "-fprofile-instr-generate", "-Xarch_host", "-fcoverage-mapping"]
        );
        let hip_on = DeviceDecision { enabled: true, ..hip_off.clone() };
        assert_eq!(coverage_flags(&flags, &hip_on), flags);
        let cuda = DeviceDecision { target: Some("sm_90".into()), backend: Some(Backend::Nvidia), ..hip_off };
        assert_eq!(coverage_flags(&flags, &cuda), flags);
    }

    #[test]
    fn trials_count_the_library_s_kernels_only_where_cupti_can_and_the_config_asks() {
        let cache = tempfile::tempdir().unwrap();
        let decision = |selective| DeviceDecision {
            requested: DeviceMode::Auto,
            enabled: true,
            reason: String::new(),
            target: Some("sm_90".into()),
            backend: Some(Backend::Nvidia),
            found: Some(Found::Nvidia {
                cupti: "/c/libcupti.so.13".into(),
                cupti_version: "13.4.92".into(),
                collector: "/t/libccl_cov_cupti.so".into(),
                selective,
            }),
        };
        let env = |decision: &DeviceDecision, config: &DeviceConfig| -> Vec<(String, String)> {
            trial_env(decision, config, Path::new("/ws/p"), cache.path())
                .into_iter()
                .filter(|(k, _)| k == "CCL_COV_SASS_KERNELS" || k == "CCL_COV_SASS_MAX_LAUNCHES")
                .collect()
        };
        let library = DeviceConfig::default();
        let first_two = DeviceConfig { max_launches: Some(2), ..DeviceConfig::default() };
        let all = DeviceConfig { kernels: crate::config::KernelSelection::All, ..DeviceConfig::default() };
        // No list yet (cuobjdump failed, an older build): every kernel.
        assert!(env(&decision(true), &library).is_empty());
        let list = nvidia::library_kernels_file(cache.path());
        std::fs::write(&list, "k\n").unwrap();
        let listed = ("CCL_COV_SASS_KERNELS".to_string(), list.display().to_string());
        assert_eq!(env(&decision(true), &library), std::slice::from_ref(&listed));
        assert_eq!(env(&decision(true), &first_two), [listed, ("CCL_COV_SASS_MAX_LAUNCHES".into(), "2".into())]);
        assert!(env(&decision(true), &all).is_empty());
        // A CUPTI whose counting cannot be switched per kernel: every kernel, every launch.
        assert!(env(&decision(false), &first_two).is_empty());
        assert!(
            trial_env(&DeviceDecision { enabled: false, ..decision(true) }, &library, Path::new("/p"), cache.path())
                .is_empty()
        );
    }
}
