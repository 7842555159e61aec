//! From a planned trial to the exact command: launcher argv (direct,
//! `mpirun`, `srun`), the test binary's arguments, the environment the trial
//! adds (config, collective and variant env, then `LLVM_PROFILE_FILE`), the
//! working directory and the timeout.

use crate::bail;
use crate::config::{Config, LauncherKind, MpiFlavor};
use crate::context::Context;
use crate::error::Result;
use crate::fixture::BuildManifest;
use crate::plan::TrialSpec;
use crate::process::Cmd;
use crate::template::Vars;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Inherited from an instrumented parent, it makes the profile runtime skip
/// creating the profile directory (design.md §6): never pass it on.
pub const PROFILE_INIT_ONCE: &str = "__LLVM_PROFILE_RT_INIT_ONCE";
/// Marks every process of one trial, so none escapes the kill on timeout.
pub const TRIAL_TOKEN_VAR: &str = "CCL_COV_TRIAL_TOKEN";

#[derive(Debug, Clone)]
pub struct TrialLaunch {
    pub cmd: Cmd,
    /// What the trial adds to the inherited environment, in order.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub grace: Duration,
    pub token: String,
}

pub fn prepare(ctx: &Context, manifest: &BuildManifest, spec: &TrialSpec, profile_dir: &Path) -> Result<TrialLaunch> {
    let config = ctx.config();
    let vars = trial_vars(ctx, manifest, spec);
    let collective = spec.collective(config);
    let variant = spec.variant(config);
    let launcher = spec.launcher(config);

    let binary = {
        let b = Path::new(&collective.binary);
        if b.is_absolute() { b.to_path_buf() } else { manifest.bin_dir.join(b) }
    };
    let mut program_args = vars.render_all(&config.args)?;
    program_args.extend(iteration_args(config, manifest.coverage && ctx.trim_iterations));
    program_args.extend(["-b".into(), spec.size.clone(), "-e".into(), spec.size.clone()]);
    program_args.extend(vars.render_all(&collective.args)?);
    if let Some(v) = variant {
        program_args.extend(vars.render_all(&v.args)?);
    }
    program_args.extend(vars.render_all(&launcher.program_args)?);

    let token = new_token();
    let mut env = Vec::new();
    let maps = std::iter::once(&config.env).chain(std::iter::once(&collective.env)).chain(variant.map(|v| &v.env));
    for map in maps {
        for (k, v) in map {
            env.retain(|(key, _): &(String, String)| key != k);
            env.push((k.clone(), vars.render(v)?));
        }
    }
    env.retain(|(key, _)| key != "LLVM_PROFILE_FILE" && key != TRIAL_TOKEN_VAR);
    // Without coverage nothing is instrumented, and upstream does not set it
    // either: an instrumented process would pay for writing a profile.
    if manifest.coverage {
        let profile_file = profile_dir.join(&config.coverage.profile_pattern);
        env.push(("LLVM_PROFILE_FILE".into(), profile_file.display().to_string()));
    }
    env.push((TRIAL_TOKEN_VAR.into(), token.clone()));

    let binary = binary.display().to_string();
    let mut argv: Vec<String> = Vec::new();
    match launcher.kind {
        LauncherKind::Direct => argv.push(binary),
        LauncherKind::Mpirun => {
            argv.push(launcher.program.clone().unwrap_or_else(|| "mpirun".into()));
            if launcher.flavor == MpiFlavor::Openmpi && is_root() {
                argv.push("--allow-run-as-root".into());
            }
            argv.extend(["-np".into(), spec.ranks.to_string()]);
            argv.extend(vars.render_all(&launcher.args)?);
            for (k, v) in &env {
                match launcher.flavor {
                    MpiFlavor::Openmpi => argv.extend(["-x".into(), k.clone()]),
                    MpiFlavor::Mpich => argv.extend(["-genv".into(), k.clone(), v.clone()]),
                }
            }
            argv.push(binary);
        }
        LauncherKind::Srun => {
            argv.push(launcher.program.clone().unwrap_or_else(|| "srun".into()));
            argv.extend(["--ntasks".into(), spec.ranks.to_string()]);
            argv.extend(vars.render_all(&launcher.args)?);
            argv.push(binary);
        }
    }
    argv.extend(program_args);
    let Some(cmd) = Cmd::from_argv(&argv) else { bail!("empty command line") };
    let cmd = cmd.envs(env.clone()).env_remove(PROFILE_INIT_ONCE).cwd(&manifest.bin_dir);
    Ok(TrialLaunch {
        cmd,
        env,
        timeout: spec.timeout(config, manifest.device.enabled),
        grace: Duration::from_secs(config.timeouts.grace),
        token,
    })
}

/// `-n N -w W`; one pass without warm-up when `trim` (coverage needs one
/// pass through the code, not stable timings).
fn iteration_args(config: &Config, trim: bool) -> Vec<String> {
    let (iters, warmup) = if trim { (1, 0) } else { (config.iterations.iters, config.iterations.warmup) };
    vec!["-n".into(), iters.to_string(), "-w".into(), warmup.to_string()]
}

fn trial_vars(ctx: &Context, manifest: &BuildManifest, spec: &TrialSpec) -> Vars {
    let mut vars = Vars::default();
    let path = |p: &PathBuf| p.display().to_string();
    vars.set("build_dir", path(&manifest.build_dir))
        .set("bin_dir", path(&manifest.bin_dir))
        .set("cc", path(&manifest.toolchain.cc.path))
        .set("cxx", path(&manifest.toolchain.cxx.path))
        .set("llvm_bin", path(&manifest.toolchain.llvm_bin))
        .set("config_dir", path(&ctx.loaded.dir))
        .set("library_src", path(&manifest.library_src))
        .set("tests_src", path(&manifest.tests_src))
        .set("workspace", path(&ctx.workspace.root().to_path_buf()))
        .set("ranks", spec.ranks.to_string());
    vars
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn new_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}
