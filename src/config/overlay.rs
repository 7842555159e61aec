//! An upstream RCCL `test_runner` config (`CCL_COV_CONFIG`) with ccl-coverage's
//! own settings laid over it from an overlay file (`CCL_COV_OVERLAY`,
//! default `configs/rccl-overlay.json`): the toolchain, coverage flags and
//! device mode, the build (or the existing build), the machine's nodes and
//! GPUs, timeouts and the report. The upstream file stays as it is; the two
//! together become a [`Config`] whose plan is the resolved tests.
//!
//! Upstream's `build_configuration` feeds the overlay's `rccl_install` steps
//! ([`feed_build`]); `rccl.rs` then applies the coverage rules to the result.
//! `rccl_tests_build_configuration` is not fed: the overlay's tests build is
//! plain `argv` steps with no install.sh spec to merge into.

use super::{
    BuildTemplate, Config, CoverageConfig, EnvName, Invalid, LaunchDefaults, LauncherConfig, LauncherKind,
    LibraryBuild, LoadedConfig, Logs, MpiFlavor, Name, ReportConfig, TestsBuild, Timeouts, ToolchainConfig, error_at,
    expand_strings, invalid, limits,
};
use crate::env_names::Lookup;
use crate::error::{Context, Error, Result};
use crate::upstream::{self, Machine, Options, Resolved};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The overlay file: strict like a config, every unknown key an error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Overlay {
    /// Names the workspace and the report; the upstream file's stem when unset.
    #[serde(default)]
    pub(crate) name: Option<Name>,
    #[serde(default)]
    pub(crate) description: String,
    pub(crate) toolchain: ToolchainConfig,
    #[serde(default)]
    pub(crate) coverage: CoverageConfig,
    pub(crate) library: LibraryBuild,
    pub(crate) tests: TestsBuild,
    /// Most ranks that may run at once; a test needing more is ignored.
    #[serde(deserialize_with = "super::capacity")]
    pub(crate) capacity: usize,
    #[serde(default)]
    pub(crate) machine: MachineConfig,
    #[serde(default)]
    pub(crate) upstream: UpstreamChoices,
    #[serde(default)]
    pub(crate) timeouts: OverlayTimeouts,
    #[serde(default)]
    pub(crate) report: ReportConfig,
    #[serde(default)]
    pub(crate) logs: Logs,
}

/// What upstream detects on the machine, for its skip rules. Every field
/// may be left out: its value is then [`Default`]'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct MachineConfig {
    /// Hosts available to multi-node tests.
    pub(crate) nodes: u64,
    /// GPUs per node; unset means unknown, and upstream then never skips a
    /// test for lack of GPUs (and sizes `"auto"` as 8).
    pub(crate) gpus_per_node: Option<u64>,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig { nodes: 1, gpus_per_node: None }
    }
}

/// Upstream's command-line choices.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamChoices {
    /// `--system NAME`.
    #[serde(default)]
    pub(crate) system: Option<String>,
    /// The RCCL checkout upstream's runner would live in (relative to the
    /// overlay); it decides `${WORKDIR:-...}` defaults.
    #[serde(default)]
    pub(crate) rccl_root: Option<String>,
}

/// The overlay's timeouts. Every field may be left out: its value is then
/// [`Default`]'s.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OverlayTimeouts {
    /// Seconds a test with `timeout: 0` (no limit upstream) may run.
    #[serde(deserialize_with = "super::timeout_seconds")]
    pub(crate) uncapped_cap: u64,
    /// Seconds between SIGTERM and SIGKILL.
    #[serde(deserialize_with = "super::grace_seconds")]
    pub(crate) grace: u64,
    /// Every timeout is multiplied by this while device coverage is on
    /// (instrumented kernels run slower); the result is capped at 7 days.
    #[serde(deserialize_with = "factor")]
    pub(crate) device_coverage_factor: u64,
}

impl Default for OverlayTimeouts {
    fn default() -> Self {
        OverlayTimeouts { uncapped_cap: 3600, grace: 10, device_coverage_factor: 1 }
    }
}

fn factor<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    super::bounded(d, super::Bound { min: 1, max: 100, unit: "times the timeout" })
}

/// The resolved upstream config and what the overlay says about running it.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamRun {
    pub(crate) path: PathBuf,
    pub(crate) overlay: PathBuf,
    pub(crate) resolved: Resolved,
    pub(crate) machine: Machine,
    pub(crate) uncapped_cap: u64,
    pub(crate) device_coverage_factor: u64,
}

/// Loads the upstream config `path` (its `text` already read) with the
/// overlay at `overlay`.
pub(crate) fn load_upstream(path: &Path, text: &str, overlay: &Path, env: Lookup<'_>) -> Result<LoadedConfig> {
    let o = load_overlay(overlay, env)?;
    let overlay_dir = overlay.parent().map(Path::to_path_buf).unwrap_or_default();
    let rccl_root = o.upstream.rccl_root.as_deref().map(|r| crate::workspace::normalize(&overlay_dir.join(r)));
    let options = Options { system: o.upstream.system.as_deref(), rccl_root: rccl_root.as_deref() };
    let mut resolved = upstream::resolve_with(path, text, env, &options)?;
    let mut library = o.library.clone();
    feed_build(path, &mut resolved, &mut library.steps)?;
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
        schema: None,
        name,
        description,
        toolchain: o.toolchain,
        coverage: o.coverage,
        library,
        tests: o.tests,
        launchers,
        capacity: o.capacity,
        hosts: Vec::new(),
        launch: LaunchDefaults { launcher: "direct".into(), ranks: 1 },
        env: BTreeMap::new(),
        args: Vec::new(),
        iterations: super::Iterations::default(),
        collectives: Vec::new(),
        sizes: Vec::new(),
        programs: Vec::new(),
        variants: Vec::new(),
        timeouts: Timeouts { default: o.timeouts.uncapped_cap, grace: o.timeouts.grace, ..Timeouts::default() },
        report: o.report,
        logs: o.logs,
        upstream: Some(Box::new(run)),
    };
    // Relative paths of the overlay (sources, builds) are relative to it.
    Ok(LoadedConfig { path: path.to_path_buf(), dir: overlay_dir, config })
}

/// Feeds upstream's `build_configuration` into every `rccl_install` step of
/// the overlay's library (issue 11): `flags` become upstream's
/// `install_flags` then the overlay's, `cmake_options` upstream's string then
/// the overlay's, `jobs` upstream's `parallel_jobs` unless the overlay sets
/// it, and upstream's build `env` joins the step's (the overlay wins a
/// clash). Upstream's values are literal text: their braces are escaped so no
/// placeholder is read into them. `rccl.rs` later removes or forces the
/// coverage flags and options, upstream's included.
///
/// `requires_build: false` (upstream neither builds nor checks `librccl.so`)
/// feeds nothing and leaves the overlay's steps or `existing_build` to decide,
/// with a warning: the harness needs an instrumented library either way.
fn feed_build(path: &Path, resolved: &mut Resolved, steps: &mut [super::BuildStep]) -> Result<()> {
    let mut installs = steps.iter_mut().filter_map(|s| s.rccl_install.as_mut().map(|i| (i, &mut s.env))).peekable();
    if installs.peek().is_none() {
        return Ok(());
    }
    let build = &resolved.build;
    if !build.requires_build {
        resolved.warnings.push(upstream::Warning {
            file: path.to_path_buf(),
            json_path: "build_configuration.requires_build".into(),
            message: "false: upstream would not build RCCL; the overlay's library steps (or its existing_build) \
                      still decide the build, without build_configuration's flags, options, jobs or env"
                .into(),
        });
        return Ok(());
    }
    let literal = |text: &str| BuildTemplate::try_from(text.replace('{', "{{").replace('}', "}}")).map_err(Error::new);
    for (install, step_env) in installs {
        let mut flags = build.install_flags.iter().map(|f| literal(f)).collect::<Result<Vec<_>>>()?;
        flags.append(&mut install.flags);
        install.flags = flags;
        if !build.cmake_options.trim().is_empty() {
            install.cmake_options.insert(0, literal(&build.cmake_options)?);
        }
        if install.jobs.is_none()
            && let Some(jobs) = build.parallel_jobs
        {
            install.jobs = Some(literal(&jobs.to_string())?);
        }
        for (key, value) in &build.env {
            let name = EnvName::try_from(key.clone())
                .map_err(|e| error_at(path, &format!("build_configuration.env_variables.{key}"), &e))?;
            if let std::collections::btree_map::Entry::Vacant(slot) = step_env.entry(name) {
                slot.insert(literal(value)?);
            }
        }
    }
    Ok(())
}

/// `<mpi_path>/bin/mpirun`, else `mpirun` (`run_test`).
fn upstream_mpirun(resolved: &Resolved) -> String {
    match resolved.paths.mpi_path.as_deref().filter(|p| !p.is_empty()) {
        Some(dir) => format!("{dir}/bin/mpirun"),
        None => "mpirun".into(),
    }
}

/// Reads, expands and checks the overlay at `path`.
pub(crate) fn load_overlay(path: &Path, env: Lookup<'_>) -> Result<Overlay> {
    let at = |json_path: &str, msg: &dyn std::fmt::Display| error_at(path, json_path, msg);
    let text = super::load::read_text(path, "the overlay").map_err(|e| {
        Error::new(format!(
            "cannot read the overlay {}: {e} (set CCL_COV_OVERLAY to ccl-coverage's settings for an upstream config, \
             e.g. configs/rccl-overlay.json)",
            path.display()
        ))
    })?;
    let mut value: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not valid JSON", path.display()))?;
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

    /// An overlay whose library builds with RCCL's install.sh.
    fn install_overlay(jobs: Option<&str>) -> String {
        let mut v: Value = serde_json::from_str(OVERLAY).unwrap();
        let mut install = serde_json::json!({
            "script": "{library_src}/install.sh",
            "flags": ["-l", "--no_clean"],
            "cmake_options": ["'-DCMAKE_SHARED_LINKER_FLAGS={coverage_link_flags}'"]
        });
        if let Some(jobs) = jobs {
            install["jobs"] = jobs.into();
        }
        v["library"]["steps"] = serde_json::json!([
            {"name": "plain", "argv": ["true"]},
            {"name": "install.sh", "rccl_install": install, "env": {"ROCM_PATH": "/overlay/rocm"}}
        ]);
        v.to_string()
    }

    const UPSTREAM_BUILD: &str = r#"{
      "build_configuration": {
        "install_flags": ["--enable-full-coverage", "-t", "--x={literal}"],
        "cmake_options": "-DENABLE_CODE_COVERAGE=OFF -DGPU_TARGETS=gfx942 '-DJSON={\"a\": 1}'",
        "parallel_jobs": 32,
        "env_variables": {"ROCM_PATH": "/upstream/rocm", "HIPCC_VERBOSE": "{1}"}
      },
      "test_configurations": {"u": {"binary": "x", "tests": [{"name": "A"}]}},
      "test_suites": [{"name": "S", "config": "u"}]
    }"#;

    fn loaded_steps(up: &str, overlay: &str) -> (Vec<crate::config::BuildStep>, Vec<upstream::Warning>) {
        let dir = tempfile::tempdir().unwrap();
        let overlay = write(dir.path(), "o.json", overlay);
        let loaded = load_upstream(&dir.path().join("up.json"), up, &overlay, &|_| None).unwrap();
        let warnings = loaded.config.upstream.as_ref().unwrap().resolved.warnings.clone();
        (loaded.config.library.steps, warnings)
    }

    fn texts(items: &[BuildTemplate]) -> Vec<&str> {
        items.iter().map(BuildTemplate::as_str).collect()
    }

    #[test]
    fn upstream_build_configuration_feeds_the_rccl_install_step() {
        let (steps, warnings) = loaded_steps(UPSTREAM_BUILD, &install_overlay(None));
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(texts(&steps[0].argv), ["true"], "argv steps are left alone");
        assert!(steps[0].env.is_empty());
        let install = steps[1].rccl_install.as_ref().unwrap();
        // Upstream's braces are escaped: literal text, not placeholders.
        assert_eq!(texts(&install.flags), ["--enable-full-coverage", "-t", "--x={{literal}}", "-l", "--no_clean"]);
        assert_eq!(
            texts(&install.cmake_options),
            [
                r#"-DENABLE_CODE_COVERAGE=OFF -DGPU_TARGETS=gfx942 '-DJSON={{"a": 1}}'"#,
                "'-DCMAKE_SHARED_LINKER_FLAGS={coverage_link_flags}'"
            ]
        );
        assert_eq!(install.jobs.as_deref(), Some("32"), "upstream's parallel_jobs when the overlay sets none");
        let env: Vec<(&str, &str)> = steps[1].env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(env, [("HIPCC_VERBOSE", "{{1}}"), ("ROCM_PATH", "/overlay/rocm")], "the overlay wins a clash");

        // What rccl.rs makes of it: the strict flag replaced, upstream's
        // coverage option removed and ours appended, upstream's text literal.
        let mut vars = crate::config::template::Vars::default();
        vars.set("library_src", "/src").set("coverage_link_flags", "-lx");
        let argv =
            crate::build::rccl::install_argv(install, &vars, crate::build::rccl::Coverage::On { full: true }).unwrap();
        assert_eq!(
            argv,
            [
                "/src/install.sh",
                "-t",
                "--x={literal}",
                "-l",
                "--no_clean",
                "--debug",
                "--enable-code-coverage",
                "-j",
                "32",
                "--cmake-options",
                r#"-DGPU_TARGETS=gfx942 '-DJSON={"a": 1}' '-DCMAKE_SHARED_LINKER_FLAGS=-lx' -DENABLE_CODE_COVERAGE=ON -DENABLE_FULL_COVERAGE=ON"#
            ]
        );
        let off = crate::build::rccl::install_argv(install, &vars, crate::build::rccl::Coverage::Off).unwrap();
        assert!(!off.iter().any(|a| a.contains("--enable-") && a.contains("coverage")), "{off:?}");
        assert!(off.last().unwrap().ends_with("-DENABLE_CODE_COVERAGE=OFF -DENABLE_FULL_COVERAGE=OFF"), "{off:?}");
    }

    #[test]
    fn overlay_jobs_win_and_an_empty_build_configuration_changes_nothing() {
        let (steps, _) = loaded_steps(UPSTREAM_BUILD, &install_overlay(Some("{jobs}")));
        assert_eq!(steps[1].rccl_install.as_ref().unwrap().jobs.as_deref(), Some("{jobs}"));
        let bare = r#"{"test_configurations": {"u": {"binary": "x", "tests": [{"name": "A"}]}},
                       "test_suites": [{"name": "S", "config": "u"}]}"#;
        let (steps, _) = loaded_steps(bare, &install_overlay(None));
        let install = steps[1].rccl_install.as_ref().unwrap();
        assert_eq!(texts(&install.flags), ["-l", "--no_clean"]);
        assert_eq!(texts(&install.cmake_options), ["'-DCMAKE_SHARED_LINKER_FLAGS={coverage_link_flags}'"]);
        assert!(install.jobs.is_none());
        assert_eq!(steps[1].env.len(), 1);
    }

    #[test]
    fn requires_build_false_feeds_nothing_and_says_so() {
        let mut up: Value = serde_json::from_str(UPSTREAM_BUILD).unwrap();
        up["build_configuration"]["requires_build"] = false.into();
        let (steps, warnings) = loaded_steps(&up.to_string(), &install_overlay(None));
        let install = steps[1].rccl_install.as_ref().unwrap();
        assert_eq!(texts(&install.flags), ["-l", "--no_clean"]);
        assert!(install.jobs.is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(warnings[0].json_path, "build_configuration.requires_build");
        // Without an rccl_install step there is nothing to feed, and no warning.
        let (steps, warnings) = loaded_steps(&up.to_string(), OVERLAY);
        assert!(warnings.is_empty() && steps[0].rccl_install.is_none(), "{warnings:?}");
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
