//! An upstream RCCL test_runner config (`CCL_COV_CONFIG`) with ccl-coverage's
//! own settings laid over it from an overlay file (`CCL_COV_OVERLAY`,
//! default `configs/rccl-overlay.json`): the toolchain, coverage flags and
//! device mode, the build (or the existing build), the machine's nodes and
//! GPUs, timeouts and the report. The upstream file stays as it is; the two
//! together become a [`Config`] whose plan is the resolved tests.

use super::{
    Config, CoverageConfig, Invalid, LaunchDefaults, LauncherConfig, LauncherKind, LibraryBuild, LoadedConfig,
    MpiFlavor, Name, ReportConfig, TestsBuild, Timeouts, ToolchainConfig, error_at, expand_strings, invalid, limits,
};
use crate::error::{Error, Result};
use crate::upstream::{self, Machine, Options, Resolved};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The overlay file: strict like a config, every unknown key an error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overlay {
    /// Names the workspace and the report; the upstream file's stem when unset.
    #[serde(default)]
    pub name: Option<Name>,
    #[serde(default)]
    pub description: String,
    pub toolchain: ToolchainConfig,
    #[serde(default)]
    pub coverage: CoverageConfig,
    pub library: LibraryBuild,
    pub tests: TestsBuild,
    /// Most ranks that may run at once; a test needing more is ignored.
    #[serde(deserialize_with = "super::capacity")]
    pub capacity: usize,
    #[serde(default)]
    pub machine: MachineConfig,
    #[serde(default)]
    pub upstream: UpstreamChoices,
    #[serde(default)]
    pub timeouts: OverlayTimeouts,
    #[serde(default)]
    pub report: ReportConfig,
}

/// What upstream detects on the machine, for its skip rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineConfig {
    /// Hosts available to multi-node tests.
    #[serde(default = "one")]
    pub nodes: u64,
    /// GPUs per node; unset means unknown, and upstream then never skips a
    /// test for lack of GPUs (and sizes `"auto"` as 8).
    #[serde(default)]
    pub gpus_per_node: Option<u64>,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig { nodes: 1, gpus_per_node: None }
    }
}

/// Upstream's command-line choices.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamChoices {
    /// `--system NAME`.
    #[serde(default)]
    pub system: Option<String>,
    /// The RCCL checkout upstream's runner would live in (relative to the
    /// overlay); it decides `${WORKDIR:-...}` defaults.
    #[serde(default)]
    pub rccl_root: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayTimeouts {
    /// Seconds a test with `timeout: 0` (no limit upstream) may run.
    #[serde(default = "default_uncapped", deserialize_with = "super::timeout_seconds")]
    pub uncapped_cap: u64,
    /// Seconds between SIGTERM and SIGKILL.
    #[serde(default = "default_grace", deserialize_with = "super::grace_seconds")]
    pub grace: u64,
    /// Every timeout is multiplied by this while device coverage is on
    /// (instrumented kernels run slower); the result is capped at 7 days.
    #[serde(default = "one", deserialize_with = "factor")]
    pub device_coverage_factor: u64,
}

impl Default for OverlayTimeouts {
    fn default() -> Self {
        OverlayTimeouts { uncapped_cap: default_uncapped(), grace: default_grace(), device_coverage_factor: 1 }
    }
}

fn one() -> u64 {
    1
}

fn default_uncapped() -> u64 {
    3600
}

fn default_grace() -> u64 {
    10
}

fn factor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    super::bounded(d, super::Bound { min: 1, max: 100, unit: "times the timeout" })
}

/// The resolved upstream config and what the overlay says about running it.
#[derive(Debug, Clone)]
pub struct UpstreamRun {
    pub path: PathBuf,
    pub overlay: PathBuf,
    pub resolved: Resolved,
    pub machine: Machine,
    pub uncapped_cap: u64,
    pub device_coverage_factor: u64,
}

/// Loads the upstream config `path` (its `text` already read) with the
/// overlay at `overlay`.
pub fn load_upstream(
    path: &Path,
    text: &str,
    overlay: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig> {
    let o = load_overlay(overlay, env)?;
    let overlay_dir = overlay.parent().map(Path::to_path_buf).unwrap_or_default();
    let rccl_root = o.upstream.rccl_root.as_deref().map(|r| crate::workspace::normalize(&overlay_dir.join(r)));
    let options = Options { system: o.upstream.system.as_deref(), rccl_root: rccl_root.as_deref() };
    let resolved = upstream::resolve_with(path, text, env, &options)?;
    let name = if let Some(name) = o.name.clone() {
        name
    } else {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Name::try_from(stem).map_err(|e| {
            error_at(overlay, "name", &format!("the config's file name cannot name the workspace ({e}): set `name`"))
        })?
    };
    let description = if o.description.is_empty() {
        resolved.description.clone().or_else(|| resolved.name.clone()).unwrap_or_default()
    } else {
        o.description.clone()
    };
    let key = |s: &str| Name::try_from(s.to_string()).map_err(Error::new);
    let mut launchers = BTreeMap::new();
    let plain = LauncherConfig {
        kind: LauncherKind::Direct,
        program: None,
        flavor: MpiFlavor::Openmpi,
        args: Vec::new(),
        program_args: Vec::new(),
        nodes: 1,
        gpus_per_task: 0,
    };
    let mpirun = upstream_mpirun(&resolved);
    launchers.insert(key("direct")?, plain.clone());
    launchers.insert(key("mpirun")?, LauncherConfig { kind: LauncherKind::Mpirun, program: Some(mpirun), ..plain });
    let run = UpstreamRun {
        path: path.to_path_buf(),
        overlay: overlay.to_path_buf(),
        machine: Machine { nodes: o.machine.nodes, gpus_per_node: o.machine.gpus_per_node },
        uncapped_cap: o.timeouts.uncapped_cap,
        device_coverage_factor: o.timeouts.device_coverage_factor,
        resolved,
    };
    let config = Config {
        name,
        description,
        toolchain: o.toolchain,
        coverage: o.coverage,
        library: o.library,
        tests: o.tests,
        launchers,
        capacity: o.capacity,
        launch: LaunchDefaults { launcher: "direct".into(), ranks: 1 },
        env: BTreeMap::new(),
        args: Vec::new(),
        iterations: super::Iterations::default(),
        collectives: Vec::new(),
        sizes: Vec::new(),
        variants: Vec::new(),
        timeouts: Timeouts { default: o.timeouts.uncapped_cap, grace: o.timeouts.grace, ..Timeouts::default() },
        report: o.report,
        upstream: Some(Box::new(run)),
    };
    // Relative paths of the overlay (sources, builds) are relative to it.
    Ok(LoadedConfig { path: path.to_path_buf(), dir: overlay_dir, config })
}

/// `<mpi_path>/bin/mpirun`, else `mpirun` (`run_test`).
fn upstream_mpirun(resolved: &Resolved) -> String {
    match resolved.paths.mpi_path.as_deref().filter(|p| !p.is_empty()) {
        Some(dir) => format!("{dir}/bin/mpirun"),
        None => "mpirun".into(),
    }
}

/// Reads, expands and checks the overlay at `path`.
pub fn load_overlay(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Overlay> {
    let at = |json_path: &str, msg: &dyn std::fmt::Display| error_at(path, json_path, msg);
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::new(format!(
            "cannot read the overlay {}: {e} (set CCL_COV_OVERLAY to ccl-coverage's settings for an upstream config, \
             e.g. configs/rccl-overlay.json)",
            path.display()
        ))
    })?;
    let mut value: Value =
        serde_json::from_str(&text).map_err(|e| Error::new(format!("{}: not valid JSON: {e}", path.display())))?;
    if !value.is_object() {
        return Err(at("", &"expected a JSON object (the overlay)"));
    }
    expand_strings(&mut value, &mut String::new(), env).map_err(|(p, e)| at(&p, &e))?;
    let overlay: Overlay = serde_path_to_error::deserialize(value).map_err(|e| {
        let json_path = e.path().to_string();
        at(if json_path == "." { "" } else { &json_path }, e.inner())
    })?;
    check(&overlay).map_err(|(p, e)| at(&p, &e))?;
    Ok(overlay)
}

fn check(o: &Overlay) -> Result<(), Invalid> {
    if o.machine.nodes == 0 {
        return Err(invalid("machine.nodes", "expected at least 1 node"));
    }
    if o.machine.gpus_per_node == Some(0) {
        return Err(invalid("machine.gpus_per_node", "expected at least 1 GPU, or leave it unset"));
    }
    if o.timeouts.uncapped_cap.saturating_mul(o.timeouts.device_coverage_factor) > limits::TIMEOUT_SECONDS.max {
        return Err(invalid(
            "timeouts.device_coverage_factor",
            format!("uncapped_cap × device_coverage_factor must stay within {}", limits::TIMEOUT_SECONDS),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const OVERLAY: &str = r#"{
      "toolchain": {"cc": "clang", "cxx": "clang++"},
      "library": {"source_dir": ".", "steps": [{"name": "b", "argv": ["true"]}], "objects": ["{build_dir}/lib.so"]},
      "tests": {"source_dir": ".", "steps": [{"name": "t", "argv": ["true"]}], "bin_dir": "{build_dir}/test"},
      "capacity": 4,
      "machine": {"gpus_per_node": 4}
    }"#;

    #[test]
    fn upstream_config_with_overlay_becomes_a_config_named_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let overlay = write(dir.path(), "o.json", OVERLAY);
        let up = r#"{"test_configurations": {"u": {"binary": "x", "tests": [{"name": "A"}]}},
                     "test_suites": [{"name": "S", "config": "u"}]}"#;
        let path = dir.path().join("my_runner.json");
        let loaded = load_upstream(&path, up, &overlay, &|_| None).unwrap();
        assert_eq!(loaded.config.name.as_str(), "my_runner");
        let run = loaded.config.upstream.as_ref().unwrap();
        assert_eq!(run.resolved.tests.len(), 1);
        assert_eq!(run.machine.gpus_per_node, Some(4));
        assert_eq!(run.uncapped_cap, 3600);
        assert_eq!(loaded.dir, dir.path());
    }

    #[test]
    fn overlay_errors_name_the_file_and_json_path() {
        let dir = tempfile::tempdir().unwrap();
        let mut v: Value = serde_json::from_str(OVERLAY).unwrap();
        v["timeouts"] = serde_json::json!({"uncapped_cap": 0});
        let p = write(dir.path(), "o.json", &v.to_string());
        let err = load_overlay(&p, &|_| None).unwrap_err().to_string();
        assert!(err.contains("o.json: timeouts.uncapped_cap: expected an integer in 1..="), "{err}");
        v["timeouts"] = serde_json::json!({});
        v["colectives"] = serde_json::json!([]);
        let p = write(dir.path(), "o.json", &v.to_string());
        let err = load_overlay(&p, &|_| None).unwrap_err().to_string();
        assert!(err.contains("o.json: colectives: unknown field `colectives`"), "{err}");
        v.as_object_mut().unwrap().remove("colectives");
        v["machine"]["gpus_per_node"] = serde_json::json!(0);
        let p = write(dir.path(), "o.json", &v.to_string());
        let err = load_overlay(&p, &|_| None).unwrap_err().to_string();
        assert!(err.contains("o.json: machine.gpus_per_node: expected at least 1 GPU"), "{err}");
        let err = load_overlay(&dir.path().join("missing.json"), &|_| None).unwrap_err().to_string();
        assert!(err.contains("cannot read the overlay") && err.contains("CCL_COV_OVERLAY"), "{err}");
    }
}
