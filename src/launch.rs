//! From a planned trial to the exact command: launcher argv (direct,
//! `mpirun`, `srun`), the test binary's arguments, the environment the trial
//! adds (config, collective and variant env, then `LLVM_PROFILE_FILE`), the
//! working directory and the timeout.

use crate::bail;
use crate::config::{Config, LauncherConfig, LauncherKind, MpiFlavor};
use crate::context::Context;
use crate::env_names::{PROFILE_FILE, PROFILE_INIT_ONCE, TRIAL_TOKEN};
use crate::error::Result;
use crate::fixture::BuildManifest;
use crate::plan::TrialSpec;
use crate::process::Cmd;
use crate::template::Vars;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TrialLaunch {
    pub cmd: Cmd,
    /// What the trial adds to the inherited environment, in order.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub grace: Duration,
    pub token: String,
}

/// The command of `spec`. `slots` are the rank slots the trial holds (for
/// `{slots}`, e.g. `CUDA_VISIBLE_DEVICES`); `None` in a dry run.
pub fn prepare(
    ctx: &Context,
    manifest: &BuildManifest,
    spec: &TrialSpec,
    profile_dir: &Path,
    slots: Option<&[usize]>,
) -> Result<TrialLaunch> {
    let config = ctx.config();
    let vars = trial_vars(ctx, manifest, spec, slots);
    let collective = spec.collective(config);
    let variant = spec.variant(config);
    let launcher = &*crate::mpi::resolve(spec.launcher(config))?;

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

    let token = crate::proctree::new_token();
    let mut env = Vec::new();
    let maps = std::iter::once(&config.env).chain(std::iter::once(&collective.env)).chain(variant.map(|v| &v.env));
    for map in maps {
        for (k, v) in map {
            env.retain(|(key, _): &(String, String)| key != k.as_str());
            env.push((k.to_string(), vars.render(v)?));
        }
    }
    env.retain(|(key, _)| key != PROFILE_FILE && key != TRIAL_TOKEN);
    // Without coverage nothing is instrumented, and upstream does not set it
    // either: an instrumented process would pay for writing a profile.
    if manifest.coverage {
        let profile_file = profile_dir.join(&config.coverage.profile_pattern);
        env.push((PROFILE_FILE.into(), profile_file.display().to_string()));
    }
    env.push((TRIAL_TOKEN.into(), token.clone()));

    let launcher_args = vars.render_all(&launcher.args)?;
    let argv = command_line(
        launcher,
        &launcher_args,
        spec.ranks,
        &env,
        &binary.display().to_string(),
        &program_args,
        is_root(),
    );
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

/// The argv of one trial: the test binary itself, or a launcher that starts
/// `ranks` copies of it and forwards the trial's environment to them (Open
/// MPI `-x NAME` takes the value from mpirun's own environment; MPICH/Hydra
/// needs `-genv NAME VALUE`; srun forwards everything with `--export=ALL`).
/// An `auto` flavour is resolved before this ([`crate::mpi::resolve`]).
pub fn command_line(
    launcher: &LauncherConfig,
    launcher_args: &[String],
    ranks: usize,
    env: &[(String, String)],
    binary: &str,
    program_args: &[String],
    root: bool,
) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    match launcher.kind {
        LauncherKind::Direct => {}
        LauncherKind::Mpirun => {
            argv.push(crate::mpi::program(launcher).to_string());
            if launcher.flavor == MpiFlavor::Openmpi && root {
                argv.push("--allow-run-as-root".into());
            }
            argv.extend(["-np".into(), ranks.to_string()]);
            argv.extend(launcher_args.iter().cloned());
            for (k, v) in env {
                match launcher.flavor {
                    MpiFlavor::Openmpi | MpiFlavor::Auto => argv.extend(["-x".into(), k.clone()]),
                    MpiFlavor::Mpich => argv.extend(["-genv".into(), k.clone(), v.clone()]),
                }
            }
        }
        LauncherKind::Srun => {
            argv.push(crate::mpi::program(launcher).to_string());
            argv.extend(["--ntasks".into(), ranks.to_string(), "--nodes".into(), launcher.nodes.to_string()]);
            if launcher.gpus_per_task > 0 {
                argv.push(format!("--gpus-per-task={}", launcher.gpus_per_task));
            }
            argv.extend(crate::mpi::srun_plugin(launcher.flavor).map(|p| format!("--mpi={p}")));
            // --immediate: a request the cluster cannot meet fails at once
            // instead of queueing forever.
            argv.extend(["--immediate".into(), "--export=ALL".into()]);
            argv.extend(launcher_args.iter().cloned());
        }
    }
    argv.push(binary.to_string());
    argv.extend(program_args.iter().cloned());
    argv
}

/// `-n N -w W`; one pass without warm-up when `trim` (coverage needs one
/// pass through the code, not stable timings).
fn iteration_args(config: &Config, trim: bool) -> Vec<String> {
    let (iters, warmup) = if trim { (1, 0) } else { (config.iterations.iters, config.iterations.warmup) };
    vec!["-n".into(), iters.to_string(), "-w".into(), warmup.to_string()]
}

fn trial_vars(ctx: &Context, manifest: &BuildManifest, spec: &TrialSpec, slots: Option<&[usize]>) -> Vars {
    let mut vars = Vars::default();
    let path = |p: &PathBuf| p.display().to_string();
    let slots = match slots {
        Some(held) => held.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        None => format!("<{} slots, assigned at run time>", spec.ranks),
    };
    vars.set("build_dir", path(&manifest.build_dir))
        .set("bin_dir", path(&manifest.bin_dir))
        .set("cc", path(&manifest.toolchain.cc.path))
        .set("cxx", path(&manifest.toolchain.cxx.path))
        .set("llvm_bin", path(&manifest.toolchain.llvm_bin))
        .set("config_dir", path(&ctx.loaded.dir))
        .set("library_src", path(&manifest.library_src))
        .set("tests_src", path(&manifest.tests_src))
        .set("workspace", path(&ctx.workspace.root().to_path_buf()))
        .set("ranks", spec.ranks.to_string())
        .set("slots", slots);
    vars
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher(kind: LauncherKind, flavor: MpiFlavor) -> LauncherConfig {
        LauncherConfig {
            kind,
            program: None,
            flavor,
            args: Vec::new(),
            program_args: Vec::new(),
            nodes: 1,
            gpus_per_task: 0,
        }
    }

    fn env() -> Vec<(String, String)> {
        vec![("LLVM_PROFILE_FILE".into(), "/ws/p/%h-%p-%m.profraw".into()), ("A".into(), "it's".into())]
    }

    fn argv(l: &LauncherConfig, root: bool) -> Vec<String> {
        command_line(
            l,
            &["--bind-to".into(), "none".into()],
            8,
            &env(),
            "/b/all_reduce_perf",
            &["-g".into(), "1".into()],
            root,
        )
    }

    #[test]
    fn open_mpi_forwards_names_and_needs_allow_run_as_root_only_as_root() {
        let l = launcher(LauncherKind::Mpirun, MpiFlavor::Openmpi);
        assert_eq!(
            argv(&l, true),
            [
                "mpirun",
                "--allow-run-as-root",
                "-np",
                "8",
                "--bind-to",
                "none",
                "-x",
                "LLVM_PROFILE_FILE",
                "-x",
                "A",
                "/b/all_reduce_perf",
                "-g",
                "1"
            ]
        );
        assert!(!argv(&l, false).contains(&"--allow-run-as-root".to_string()));
    }

    #[test]
    fn mpich_forwards_values_and_never_gets_open_mpi_flags() {
        let l = launcher(LauncherKind::Mpirun, MpiFlavor::Mpich);
        assert_eq!(
            argv(&l, true),
            [
                "mpirun",
                "-np",
                "8",
                "--bind-to",
                "none",
                "-genv",
                "LLVM_PROFILE_FILE",
                "/ws/p/%h-%p-%m.profraw",
                "-genv",
                "A",
                "it's",
                "/b/all_reduce_perf",
                "-g",
                "1"
            ]
        );
    }

    #[test]
    fn srun_and_direct() {
        let srun =
            LauncherConfig { program: Some("/slurm/srun".into()), ..launcher(LauncherKind::Srun, MpiFlavor::Openmpi) };
        let srun_argv = |s: &LauncherConfig| argv(s, true).join(" ");
        assert_eq!(
            srun_argv(&srun),
            "/slurm/srun --ntasks 8 --nodes 1 --mpi=pmix --immediate --export=ALL --bind-to none /b/all_reduce_perf -g 1"
        );
        let mpich = LauncherConfig { nodes: 2, gpus_per_task: 1, flavor: MpiFlavor::Mpich, ..srun.clone() };
        assert!(srun_argv(&mpich).starts_with("/slurm/srun --ntasks 8 --nodes 2 --gpus-per-task=1 --mpi=pmi2 "));
        let auto = LauncherConfig { flavor: MpiFlavor::Auto, ..srun };
        assert!(!srun_argv(&auto).contains("--mpi"), "{}", srun_argv(&auto));
        let direct = launcher(LauncherKind::Direct, MpiFlavor::Openmpi);
        assert_eq!(
            command_line(&direct, &[], 4, &env(), "/b/x", &["-t".into(), "4".into()], true),
            ["/b/x", "-t", "4"]
        );
    }
}
