//! The build's steps: rendered from the config with the toolchain's
//! variables (and what device coverage adds), each run under a supervisor.

use super::BuildSetup;
use crate::bail;
use crate::build::rccl;
use crate::config::template::Vars;
use crate::config::{BuildStep, LoadedConfig};
use crate::context::Context;
use crate::device::{self, DeviceDecision};
use crate::error::Result;
use crate::exec::interrupt;
use crate::exec::process::Cmd;
use crate::exec::supervisor::Supervised;
use crate::workspace::files;
use std::path::{Path, PathBuf};

/// The build steps to run, library first (none for a part that an existing
/// build replaces), and the test binaries' folder.
pub(super) fn render_steps(ctx: &Context, vars: &Vars, rccl: rccl::Coverage) -> Result<(Vec<(String, Cmd)>, PathBuf)> {
    let config = &ctx.loaded.config;
    let mut steps = Vec::new();
    if ctx.existing_build.is_none() {
        for step in &config.library.steps {
            steps.push((step.name.clone(), step_cmd(step, vars, rccl)?));
        }
    }
    let bin_dir = if let Some(dir) = &ctx.existing_tests {
        dir.clone()
    } else {
        for step in &config.tests.steps {
            steps.push((step.name.clone(), step_cmd(step, vars, rccl)?));
        }
        PathBuf::from(vars.render(&config.tests.bin_dir)?)
    };
    Ok((steps, bin_dir))
}

/// Each step's environment with what device coverage adds to it (NVIDIA's
/// `-lineinfo`), on top of the step's own value or the harness's.
pub(super) fn with_device_env(steps: Vec<(String, Cmd)>, device: &DeviceDecision) -> Vec<(String, Cmd)> {
    steps
        .into_iter()
        .map(|(name, cmd)| {
            let own = |key: &str| {
                cmd.get_envs()
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| v.as_ref().map(|v| v.to_string_lossy().into_owned()))
                    .or_else(|| std::env::var(key).ok())
            };
            let extra = device::build_env(device, &own);
            (name, cmd.envs(extra))
        })
        .collect()
}

/// Runs one build step under a supervisor, like a trial: an interrupted or
/// killed harness stops it (and everything it started) instead of leaving a
/// compiler running, and the cache, which has no manifest yet, is never used
/// half-built.
pub(super) fn run_step(ctx: &Context, cmd: &Cmd, log: &Path) -> Result<()> {
    let token = crate::exec::owner::new_token();
    let cmd = cmd.clone().env(crate::env_names::TRIAL_TOKEN, token.clone());
    let grace = std::time::Duration::from_secs(ctx.config().timeouts.grace);
    let children = ctx.children_dir();
    let mut step =
        Supervised::spawn(&ctx.supervisor, &cmd, &token, log, grace, ctx.config().logs.max_bytes(), Some(&children))?;
    let (status, _) = step.wait(None, None)?;
    let (report, _) = step.finish(status)?;
    if let Some(why) = &report.lost {
        bail!("{} ended unknown: {why}; the build is not cached", cmd.display());
    }
    if report.stopped.is_some() {
        bail!(
            "interrupted by {}: {} was stopped; the build is not cached and resumes on the next run",
            interrupt::describe(),
            cmd.display()
        );
    }
    match report.wait_status.map(<std::process::ExitStatus as std::os::unix::process::ExitStatusExt>::from_raw) {
        Some(status) if status.success() => Ok(()),
        status => {
            use crate::exec::process::{ERROR_LINES, TAIL_LINES, error_lines, indent_tail};
            let text = files::read_lossy(log);
            let errors = error_lines(&text, ERROR_LINES)
                .map(|lines| format!("\nerror lines of {} (line: text):\n{lines}", log.display()))
                .unwrap_or_default();
            bail!(
                "command failed ({}): {}{errors}\nlast lines of {}:\n{}",
                status.map_or_else(|| "no exit status".into(), crate::exec::process::describe_status),
                cmd.display(),
                log.display(),
                indent_tail(&text, TAIL_LINES)
            )
        }
    }
}

pub(crate) fn build_vars(loaded: &LoadedConfig, setup: &BuildSetup, jobs: usize) -> Vars {
    let toolchain = &setup.toolchain;
    let mut vars = Vars::default();
    vars.set("cc", toolchain.cc.path.display().to_string())
        .set("cxx", toolchain.cxx.path.display().to_string())
        .set("llvm_bin", toolchain.llvm_bin.display().to_string())
        .set("coverage_flags", setup.coverage_flags.join(" "))
        .set("coverage_link_flags", setup.coverage_link_flags.join(" "))
        .set("jobs", jobs.to_string())
        .set("config_dir", loaded.dir.display().to_string())
        .set("library_src", loaded.library_src().display().to_string())
        .set("tests_src", loaded.tests_src().display().to_string());
    vars
}

pub(crate) fn step_cmd(step: &BuildStep, vars: &Vars, rccl: rccl::Coverage) -> Result<Cmd> {
    let argv = match &step.rccl_install {
        Some(spec) => rccl::install_argv(spec, vars, rccl)?,
        None => vars.render_all(&step.argv)?,
    };
    let mut cmd = Cmd::from_argv(&argv).expect("config validation requires a command");
    for (k, v) in &step.env {
        cmd = cmd.env(k.as_str(), vars.render(v)?);
    }
    let cwd = match &step.cwd {
        Some(dir) => vars.render(dir)?,
        None => vars.get("build_dir").unwrap_or_default().to_string(),
    };
    Ok(cmd.cwd(cwd).env_remove(crate::env_names::PROFILE_INIT_ONCE))
}

pub(super) fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}
