//! Device coverage: AUTO, ON or OFF, resolved once per build into a decision
//! that names its backend, and the reason for it.
//!
//! The target picks the backend: `gfx*` is AMDGPU (`amdgpu/`: LLVM
//! instruments HIP device code), `sm_*`/`compute_*` is NVIDIA (`nvidia/`:
//! CUPTI's SASS metrics count every executed instruction, and the cubins'
//! line tables make that line coverage). Each backend checks its own
//! requirements; the first that fails is the blocker. AUTO falls back to
//! host-only and says why; ON turns a blocker into an error that says what
//! to change; OFF never instruments device code.

pub mod amdgpu;
mod backend;
pub(crate) mod lines;
pub mod nvidia;
mod registry;
#[cfg(test)]
mod test_backend;

pub(crate) use backend::LineSource;
pub use backend::{Backend, DeviceDecision, Found};

use crate::bail;
use crate::config::{DeviceConfig, DeviceMode};
use crate::env_names::{Known, Lookup};
use crate::error::Result;
use crate::toolchain::Tool;
use backend::Blocker;
use lines::DeviceLines;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The blocker when the config names no target at all.
fn no_target() -> Blocker {
    let forms: Vec<_> = registry::backends().iter().map(|b| b.target_forms()).collect();
    Blocker {
        message: "the config has no device target (coverage.device.target)".into(),
        fix: format!(
            "set coverage.device.target to the GPU architecture the library is built for: {}",
            forms.join(" or ")
        ),
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

/// Every backend's own `CCL_COV_*` names.
pub(crate) fn env_names() -> impl Iterator<Item = &'static Known> {
    registry::backends().iter().flat_map(|b| b.env_names())
}

/// The backend `coverage.device.target` names, if any; a name no backend
/// takes is an error that lists what each takes, never a guess.
pub(crate) fn check_target(config: &DeviceConfig) -> Result<Option<Backend>> {
    let Some(target) = config.target.as_deref() else { return Ok(None) };
    if let Some(backend) = Backend::of_target(target) {
        return Ok(Some(backend));
    }
    let forms: Vec<_> = registry::backends().iter().map(|b| b.target_forms()).collect();
    bail!(
        "coverage.device.target: {target:?} is not a GPU architecture any backend takes: expected {}",
        forms.join(" or ")
    )
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
    let backend = check_target(config)?;
    let decision = |enabled, reason: String, found: Option<Found>| DeviceDecision {
        requested,
        enabled,
        reason,
        target: target.clone(),
        backend,
        found,
    };
    if requested == DeviceMode::Off && backend.is_some_and(|b| !b.0.checks_when_off()) {
        return Ok(decision(false, "off as requested".into(), None));
    }
    let availability = match (target.as_deref(), backend) {
        (Some(target), Some(backend)) => backend.0.check(target, config, cxx, tools, env)?,
        _ => Err(no_target()),
    };
    Ok(match (requested, availability) {
        (DeviceMode::Off, Err(blocker)) => {
            decision(false, format!("off as requested (it would be unavailable anyway: {})", blocker.message), None)
        }
        (DeviceMode::Off, Ok(found)) => {
            decision(false, format!("off as requested (device coverage is available: {})", found.detail), None)
        }
        (DeviceMode::On, Err(blocker)) => bail!(
            "device coverage is ON (CCL_COV_DEVICE_COVERAGE or coverage.device.mode) but unavailable because {}. To fix: {}; or set CCL_COV_DEVICE_COVERAGE=auto to fall back to host-only coverage",
            blocker.message,
            blocker.fix
        ),
        (DeviceMode::Auto, Err(blocker)) => decision(false, blocker.message, None),
        (_, Ok(available)) => decision(true, available.detail, Some(available.found)),
    })
}

/// The instrumentation flags for the build: as configured when device code
/// is instrumented (or there is none); on host-only, as the backend keeps
/// its device code uninstrumented (AMDGPU: each flag in its `-Xarch_host`
/// form, since clang 22 would instrument HIP device code by default).
pub fn coverage_flags(host_flags: &[String], decision: &DeviceDecision) -> Vec<String> {
    match decision.backend {
        Some(backend) if !decision.enabled => backend.0.host_only_flags(host_flags),
        _ => host_flags.to_vec(),
    }
}

/// `{coverage_link_flags}`: what the library's link needs for device
/// coverage (AMDGPU's host collector).
pub fn link_flags(decision: &DeviceDecision) -> Vec<String> {
    decision.on().map(|(backend, found)| backend.0.link_flags(found)).unwrap_or_default()
}

/// What a build step's environment gains from device coverage (NVIDIA's
/// line tables); `inherited` reads the step's own environment, then the
/// harness's.
pub(crate) fn build_env(decision: &DeviceDecision, inherited: Lookup) -> Vec<(String, String)> {
    decision.on().map(|(backend, found)| backend.0.build_env(found, inherited)).unwrap_or_default()
}

/// What a trial's environment gains from device coverage: the backend's
/// collector, writing its records into the trial's `profile_dir` and once
/// per build under the build's `cache_dir`.
pub(crate) fn trial_env(
    decision: &DeviceDecision,
    config: &DeviceConfig,
    profile_dir: &Path,
    cache_dir: &Path,
) -> Vec<(String, String)> {
    decision.on().map(|(backend, found)| backend.0.trial_env(found, config, profile_dir, cache_dir)).unwrap_or_default()
}

/// Why a passed trial's device coverage is lost, judged like its host
/// profiles: a backend whose collector writes records of its own checks that
/// each of the `expected` processes left a complete one in `dir`.
pub(crate) fn coverage_lost(decision: &DeviceDecision, dir: &Path, expected: usize) -> Option<String> {
    decision.on().and_then(|(backend, _)| backend.0.coverage_lost(dir, expected))
}

/// Whether a raw profile in a trial's folder is some backend's device
/// profile, not a host process's.
pub(crate) fn is_device_profile(file_name: &str) -> bool {
    registry::backends().iter().any(|b| b.is_device_profile(file_name))
}

/// The records the backends' own collectors left in a trial's profile
/// folder, sorted; none when the folder does not exist.
pub(crate) fn collector_records(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    for backend in registry::backends() {
        all.extend(backend.collector_records(dir)?);
    }
    all.sort();
    Ok(all)
}

/// What a backend does once the library is built, for its trials (NVIDIA:
/// the list of the library's kernels, the only ones they count). Returns
/// what to say; a failure is said, not raised, since it costs time, never
/// coverage.
pub(crate) fn after_build(
    decision: &DeviceDecision,
    objects: &[PathBuf],
    cache_dir: &Path,
    env: Lookup,
) -> Option<String> {
    decision.on().and_then(|(backend, found)| backend.0.after_build(found, objects, cache_dir, env))
}

/// The folder the harness keeps beside the cached build `cache_dir` for what
/// a backend saves as trials run and reports read (NVIDIA: the cubins the
/// collector saves, and the report's listings of them): the build's own
/// folder holds only what its build made, and `clean --builds` deletes this
/// one with it.
pub(crate) fn files_beside(cache_dir: &Path) -> PathBuf {
    cache_dir.with_extension("device")
}

/// The file of what a build's trials count ([`after_build`]), where the
/// backend keeps one.
pub(crate) fn counted_kernels_file(decision: &DeviceDecision, cache_dir: &Path) -> Option<PathBuf> {
    decision.on().and_then(|(backend, _)| backend.0.counted_kernels_file(cache_dir))
}

/// The device lines of each trial's checked `records` (by slug) and of all
/// of them, where the backend's lines come from its own records; `None`
/// otherwise.
pub(crate) fn device_lines(
    decision: &DeviceDecision,
    cache_dir: &Path,
    records: &BTreeMap<String, Vec<PathBuf>>,
) -> Result<Option<DeviceLines>> {
    match decision.on() {
        Some((backend, found)) => backend.0.device_lines(found, cache_dir, records),
        None => Ok(None),
    }
}

/// Why the profile file pattern cannot work with this backend's device
/// coverage on; `None` when it can.
pub(crate) fn profile_pattern_problem(decision: &DeviceDecision, pattern: &str) -> Option<String> {
    decision.on().and_then(|(backend, _)| backend.0.profile_pattern_problem(pattern))
}

/// The machine's GPUs as the first backend whose tools list any lists them;
/// empty without GPU tools.
pub(crate) fn gpus() -> Vec<String> {
    registry::backends().iter().map(|b| b.gpus()).find(|gpus| !gpus.is_empty()).unwrap_or_default()
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
        let summary = auto.summary();
        assert_eq!(summary, "host-only (auto): the config has no device target (coverage.device.target)");
        let err = decide(DeviceMode::On, &cfg, &tool()).unwrap_err().to_string();
        assert!(err.contains("unavailable because the config has no device target"), "{err}");
        assert!(err.contains("set coverage.device.target to the GPU architecture the library is built for: gfx* (AMDGPU) or sm_*/compute_* (NVIDIA)"), "{err}");
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
            backend: Backend::named("amdgpu"),
            found: None,
        };
        assert_eq!(
            coverage_flags(&flags, &hip_off),
            ["-Xarch_host", "-fprofile-instr-generate", "-Xarch_host", "-fcoverage-mapping"]
        );
        let hip_on = DeviceDecision { enabled: true, ..hip_off.clone() };
        assert_eq!(coverage_flags(&flags, &hip_on), flags);
        let cuda = DeviceDecision { target: Some("sm_90".into()), backend: Backend::named("nvidia"), ..hip_off };
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
            backend: Backend::named("nvidia"),
            found: Some(nvidia::tests::found(selective)),
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
        let list = cache.path().join("library-kernels.txt");
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
