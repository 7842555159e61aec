//! From a planned trial to the exact command: launcher argv (direct,
//! `mpirun`, `srun`), the test binary's arguments, the environment the trial
//! adds (config, collective and variant env, then `LLVM_PROFILE_FILE`), the
//! working directory and the timeout. An upstream test is launched as
//! upstream's `run_test` launches it, without its shell: `mpirun` only for
//! more than one rank, its `mpi_args`, `LD_LIBRARY_PATH` in its order, gtest's
//! filter and JSON report, pytest in its `test_dir` with a JUnit report.
//!
//! The nodes a trial was placed on (`slots.rs`) reach the launcher unless
//! its args already name hosts: Open MPI `--host a:2,b:2`, Hydra `-hosts
//! a:2,b:2`, srun `--nodelist=a,b`.

pub mod allocation;
pub(crate) mod mpi;
pub(crate) mod placement;
pub mod slots;

use crate::bail;
use crate::build::cache::BuildManifest;
use crate::config::template::Vars;
use crate::config::{Config, LauncherConfig, LauncherKind, MpiFlavor, ProgramKind, Size};
use crate::context::Context;
use crate::env_names::{PROFILE_FILE, PROFILE_INIT_ONCE, TRIAL_TOKEN};
use crate::error::Result;
use crate::exec::process::Cmd;
use crate::plan::{Source, TrialSpec, UpstreamTrial};
use crate::upstream::{TrialKind, UpstreamEnv};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TrialLaunch {
    pub cmd: Cmd,
    /// What the trial adds to the inherited environment, in order.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub grace: Duration,
    /// Most bytes of output its log keeps (`logs.max_mib`).
    pub log_cap: u64,
    /// Where its supervisor keeps the record of its processes, for a later
    /// run to find them should the supervisor die.
    pub records: Option<PathBuf>,
    pub token: String,
    /// The mark every profile name of this attempt carries
    /// ([`marked_pattern`]); `None` without coverage.
    pub mark: Option<String>,
    pub kind: TrialKind,
    /// Where the test writes its own report (gtest's JSON files, pytest's
    /// JUnit XML): a folder of the trial's, emptied before it runs.
    pub cases_dir: Option<PathBuf>,
    /// The test program it starts, absolute (what a gtest listing runs).
    pub binary: PathBuf,
}

/// The command of `spec`. `slots` are the rank slots the trial holds (for
/// `{slots}`, e.g. `CUDA_VISIBLE_DEVICES`); `None` in a dry run. `hosts`
/// are the nodes it was placed on, with its ranks on each (empty: this
/// machine, or no allocation).
pub(crate) fn prepare(
    ctx: &Context,
    manifest: &BuildManifest,
    spec: &TrialSpec,
    profile_dir: &Path,
    slots: Option<&[usize]>,
    hosts: &[(String, usize)],
) -> Result<TrialLaunch> {
    match &spec.source {
        Source::Matrix { .. } | Source::Program { .. } => prepare_own(ctx, manifest, spec, profile_dir, slots, hosts),
        Source::Upstream(u) => prepare_upstream(ctx, manifest, spec, u, profile_dir, &UpstreamEnv::new()),
    }
}

/// The command of a failed upstream trial's diagnostic rerun: the same,
/// with its `rerun_env_variables` added (upstream's `--rerun-failed`).
pub(crate) fn prepare_rerun(
    ctx: &Context,
    manifest: &BuildManifest,
    spec: &TrialSpec,
    profile_dir: &Path,
) -> Result<Option<TrialLaunch>> {
    match &spec.source {
        Source::Matrix { .. } | Source::Program { .. } => Ok(None),
        Source::Upstream(u) => prepare_upstream(ctx, manifest, spec, u, profile_dir, &u.test.rerun_env).map(Some),
    }
}

fn prepare_own(
    ctx: &Context,
    manifest: &BuildManifest,
    spec: &TrialSpec,
    profile_dir: &Path,
    slots: Option<&[usize]>,
    hosts: &[(String, usize)],
) -> Result<TrialLaunch> {
    let config = ctx.config();
    let vars = trial_vars(ctx, manifest, spec, slots);
    let launcher = launcher_of(ctx, spec)?;
    let in_bin_dir = |binary: &str| {
        let b = Path::new(binary);
        if b.is_absolute() { b.to_path_buf() } else { manifest.bin_dir.join(b) }
    };
    let cases_dir = ctx.workspace.trial_cases(&spec.slug);
    let (binary, program_args, maps) = match (spec.collective(config), spec.program(config)) {
        (Some(collective), _) => {
            let variant = spec.variant(config);
            let mut args = vars.render_all(&config.args)?;
            args.extend(iteration_args(config, manifest.coverage && ctx.trim_iterations));
            args.extend(["-b".into(), spec.size().into(), "-e".into(), spec.size().into()]);
            args.extend(vars.render_all(&collective.args)?);
            if let Some(v) = variant {
                args.extend(vars.render_all(&v.args)?);
            }
            args.extend(vars.render_all(&launcher.program_args)?);
            let maps: Vec<_> = [&config.env, &collective.env].into_iter().chain(variant.map(|v| &v.env)).collect();
            (in_bin_dir(&collective.binary), args, maps)
        }
        // A program gets exactly its own arguments, with its kind's filter
        // before them and its report option after.
        (None, Some(program)) => {
            let own = vars.render_all(&program.args)?;
            let maps = vec![&config.env, &program.env];
            let binary = program.binary.as_deref();
            match program.kind {
                ProgramKind::Plain | ProgramKind::Gtest => {
                    let Some(binary) = binary else { bail!("trial {}: the program has no binary", spec.name) };
                    if program.kind == ProgramKind::Plain {
                        (in_bin_dir(binary), own, maps)
                    } else {
                        let mut args: Vec<String> =
                            program.filter.iter().map(|f| format!("--gtest_filter={f}")).collect();
                        args.extend(own);
                        // A folder: gtest names the file after the binary, and
                        // a rank that finds it taken picks another name.
                        args.push(format!("--gtest_output=xml:{}/", cases_dir.display()));
                        (in_bin_dir(binary), args, maps)
                    }
                }
                ProgramKind::Ctest => {
                    // CTest starts from the trial's own folder, whose CTestTestfile.cmake
                    // names the build's tests (`ctest_file`): its Testing/ lands there.
                    let work = ctx.workspace.trial_work(&spec.slug);
                    let mut args: Vec<String> = vec!["--test-dir".into(), work.display().to_string()];
                    if let Some(f) = &program.filter {
                        args.extend(["-R".into(), f.clone()]);
                    }
                    args.extend(own);
                    args.extend([
                        "--output-junit".into(),
                        cases_dir.join(CTEST_JUNIT).display().to_string(),
                        // Without it ctest exits 0 when the filter matches nothing.
                        "--no-tests=error".into(),
                    ]);
                    (PathBuf::from(binary.unwrap_or("ctest")), args, maps)
                }
            }
        }
        (None, None) => bail!("trial {} has no collective or program", spec.name),
    };

    let mut env = Vec::new();
    for map in maps {
        for (k, v) in map {
            env.retain(|(key, _): &(String, String)| key != k.as_str());
            env.push((k.to_string(), vars.render(v)?));
        }
    }
    let (env, token, mark) = harness_env(env, config, manifest, profile_dir);

    let rendered = vars.render_all(&launcher.args)?;
    let mut launcher_args = host_args(&launcher, &rendered, hosts);
    launcher_args.extend(rendered);
    let argv = command_line(
        &launcher,
        &launcher_args,
        spec.ranks,
        &env,
        &binary.display().to_string(),
        &program_args,
        is_root(),
    );
    let Some(cmd) = Cmd::from_argv(&argv) else { bail!("empty command line") };
    // A folder of the trial's own, never the shared build cache: what a
    // trial writes in its current directory stays in its workspace. Binaries
    // are named by absolute paths; `{bin_dir}` names their folder.
    let cwd = ctx.workspace.trial_work(&spec.slug);
    let cmd = cmd.envs(env.clone()).env_remove(PROFILE_INIT_ONCE).cwd(cwd);
    Ok(TrialLaunch {
        cmd,
        env,
        timeout: spec.timeout(config, manifest.device.enabled),
        grace: Duration::from_secs(config.timeouts.grace),
        log_cap: config.logs.max_bytes(),
        records: Some(ctx.children_dir()),
        token,
        mark,
        kind: spec.kind(),
        cases_dir: matches!(spec.kind(), TrialKind::Gtest | TrialKind::Ctest).then_some(cases_dir),
        binary,
    })
}

/// The trial's launcher, its MPI flavour resolved.
fn launcher_of(ctx: &Context, spec: &TrialSpec) -> Result<LauncherConfig> {
    let Some(launcher) = spec.launcher(ctx.config()) else {
        bail!("trial {}: unknown launcher {}", spec.name, spec.launcher)
    };
    Ok(mpi::resolve(launcher)?.into_owned())
}

/// An upstream test's command. Paths under upstream's build directory are
/// taken from the build the harness made (or adopted) instead.
fn prepare_upstream(
    ctx: &Context,
    manifest: &BuildManifest,
    spec: &TrialSpec,
    u: &UpstreamTrial,
    profile_dir: &Path,
    extra_env: &UpstreamEnv,
) -> Result<TrialLaunch> {
    let config = ctx.config();
    let Some(run) = &config.upstream else { bail!("trial {} is upstream's, but the config is not", spec.name) };
    let test = &u.test;
    let resolved = &run.resolved;
    let rebase = |p: &str| match Path::new(p).strip_prefix(&resolved.build_dir) {
        Ok(rest) => manifest.build_dir.join(rest),
        Err(_) => PathBuf::from(p),
    };
    let cases_dir = ctx.workspace.trial_cases(&spec.slug);
    let (kind, program, mut program_args, cwd) = match test.kind {
        TrialKind::Pytest => {
            let Some(dir) = &test.cwd else { bail!("trial {}: pytest test without test_dir", spec.name) };
            let python = test.pytest.as_ref().and_then(|p| p.python_bin.clone()).unwrap_or_else(|| "python3".into());
            let mut args: Vec<String> = vec!["-m".into(), "pytest".into(), "-p".into(), "no:cacheprovider".into()];
            args.extend(test.pytest.iter().flat_map(|p| p.select_args.iter().cloned()));
            args.extend(test.args.iter().cloned());
            args.push(format!("--junitxml={}", cases_dir.join("junit.xml").display()));
            (TrialKind::Pytest, python, args, rebase(dir))
        }
        TrialKind::Gtest | TrialKind::Perf | TrialKind::Plain | TrialKind::Ctest => {
            let Some(binary) = &test.binary else { bail!("trial {}: no binary", spec.name) };
            let binary = rebase(binary);
            let mut args = Vec::new();
            if let Some(filter) = test.test_filter.as_ref().filter(|_| test.kind == TrialKind::Gtest) {
                args.push(format!("--gtest_filter={filter}"));
            }
            args.extend(test.args.iter().cloned());
            if test.kind == TrialKind::Gtest {
                // A folder: gtest names the file after the binary. MPI ranks
                // race for that name and may tear the report; the verdict
                // then reads gtest's result lines from the output instead.
                args.push(format!("--gtest_output=json:{}/", cases_dir.display()));
            }
            // `<build_dir>/test`, else the build dir, else the binary's own (`run_test`).
            let cwd = [test.cwd.as_deref().map(rebase), Some(manifest.build_dir.clone())]
                .into_iter()
                .flatten()
                .find(|d| d.is_dir())
                .or_else(|| binary.parent().map(Path::to_path_buf))
                .unwrap_or_else(|| manifest.build_dir.clone());
            let kind = if test.kind == TrialKind::Gtest { TrialKind::Gtest } else { TrialKind::Perf };
            (kind, binary.display().to_string(), args, cwd)
        }
    };

    let mut merged = test.env.clone();
    merged.extend(extra_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut env: Vec<(String, String)> = Vec::new();
    env.push(("LD_LIBRARY_PATH".into(), ld_library_path(run, manifest, merged.get("LD_LIBRARY_PATH"))));
    env.extend(merged.into_iter().filter(|(k, _)| k != "LD_LIBRARY_PATH"));
    let (env, token, mark) = harness_env(env, config, manifest, profile_dir);

    let mut argv = Vec::new();
    if spec.ranks > 1 {
        // The overlay's `mpirun` launcher, with its program and flavour.
        let Some(launcher) = spec.launcher(config) else {
            bail!("trial {}: unknown launcher {}", spec.name, spec.launcher)
        };
        let launcher = mpi::resolve(launcher)?;
        let mut forwarded = env.clone();
        if let Some(preload) = std::env::var("LD_PRELOAD").ok().filter(|v| !v.is_empty()) {
            forwarded.push(("LD_PRELOAD".into(), preload));
        }
        let shape = Shape { ranks: spec.ranks, nodes: launcher.nodes, per_rank: true };
        argv = launcher_prefix(&launcher, shape, &test.mpi_args, &forwarded, is_root());
    }
    argv.push(program.clone());
    argv.append(&mut program_args);
    let Some(cmd) = Cmd::from_argv(&argv) else { bail!("empty command line") };
    let cmd = cmd.envs(env.clone()).env_remove(PROFILE_INIT_ONCE).cwd(cwd);
    Ok(TrialLaunch {
        cmd,
        env,
        timeout: spec.timeout(config, manifest.device.enabled),
        grace: Duration::from_secs(config.timeouts.grace),
        log_cap: config.logs.max_bytes(),
        records: Some(ctx.children_dir()),
        token,
        mark,
        kind,
        cases_dir: (kind != TrialKind::Perf).then_some(cases_dir),
        binary: PathBuf::from(&program),
    })
}

/// A trial's environment, `env`, with what the harness itself sets in place
/// of any value of the same name: `LLVM_PROFILE_FILE` (into the trial's
/// profile folder, its names marked) and the trial's token; returns the
/// token and the mark too.
fn harness_env(
    mut env: Vec<(String, String)>,
    config: &Config,
    manifest: &BuildManifest,
    profile_dir: &Path,
) -> (Vec<(String, String)>, String, Option<String>) {
    let token = crate::exec::owner::new_token();
    env.retain(|(key, _)| key != PROFILE_FILE && key != TRIAL_TOKEN);
    // Without coverage nothing is instrumented, and upstream does not set it
    // either: an instrumented process would pay for writing a profile.
    let mark = manifest.coverage.then(|| profile_mark(&token));
    if let Some(mark) = &mark {
        let profile_file = profile_dir.join(marked_pattern(&config.coverage.profile_pattern, mark));
        env.push((PROFILE_FILE.into(), profile_file.display().to_string()));
    }
    // The device collector's variables are the harness's too.
    let device = crate::device::trial_env(&manifest.device, &config.coverage.device, profile_dir, &manifest.cache_dir);
    env.retain(|(key, _)| !device.iter().any(|(k, _)| k == key));
    env.extend(device);
    env.push((TRIAL_TOKEN.into(), token.clone()));
    (env, token, mark)
}

/// A new random mark for one attempt's profile names: every process of the
/// attempt inherits it in `LLVM_PROFILE_FILE`, wherever it runs, while a
/// process of another trial inherits that trial's, so a profile put in this
/// trial's folder by another trial's process does not carry it
/// (`coverage::profiles`). 12 hex digits; from the token and the clock if
/// the system has no randomness to give.
fn profile_mark(token: &str) -> String {
    let mut bytes = [0u8; 6];
    if rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty()).is_err() {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("{token} {:?}", std::time::SystemTime::now()));
        bytes.copy_from_slice(&digest[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `pattern` (`coverage.profile_pattern`) with `.<mark>` before its last
/// extension (`%h-%p-%m.profraw` becomes `%h-%p-%m.<mark>.profraw`), or at
/// its end when it has none: the names keep their extension and begin with
/// what they began with (the device collector's `<target>.` prefix, `%h`).
pub(crate) fn marked_pattern(pattern: &str, mark: &str) -> String {
    let (folders, name) = pattern.rsplit_once('/').map_or(("", pattern), |(f, n)| (f, n));
    let marked = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => format!("{stem}.{mark}.{ext}"),
        _ => format!("{name}.{mark}"),
    };
    if folders.is_empty() { marked } else { format!("{folders}/{marked}") }
}

/// Upstream's order: the RCCL build, the test's own `LD_LIBRARY_PATH`, the
/// caller's, `<rocm>/lib`, `<mpi_path>/lib`.
fn ld_library_path(run: &crate::config::UpstreamRun, manifest: &BuildManifest, test: Option<&String>) -> String {
    let paths = &run.resolved.paths;
    let rocm = paths
        .rocm_path
        .clone()
        .filter(|p| !p.is_empty())
        .or_else(|| std::env::var("ROCM_PATH").ok().filter(|p| !p.is_empty()))
        .unwrap_or_else(|| "/opt/rocm".into());
    let mut parts = vec![manifest.build_dir.display().to_string()];
    parts.extend(test.filter(|t| !t.is_empty()).cloned());
    parts.extend(std::env::var("LD_LIBRARY_PATH").ok().filter(|p| !p.is_empty()));
    parts.push(format!("{}/lib", rocm.trim_end_matches('/')));
    if let Some(mpi) = paths.mpi_path.as_deref().filter(|p| !p.is_empty()) {
        parts.push(format!("{}/lib", mpi.trim_end_matches('/')));
    }
    parts.join(":")
}

/// The argv of one trial: the test binary itself, or a launcher that starts
/// `ranks` copies of it (see [`launcher_prefix`]).
pub(crate) fn command_line(
    launcher: &LauncherConfig,
    launcher_args: &[String],
    ranks: usize,
    env: &[(String, String)],
    binary: &str,
    program_args: &[String],
    root: bool,
) -> Vec<String> {
    let shape = Shape { ranks, nodes: launcher.nodes, per_rank: true };
    let mut argv = launcher_prefix(launcher, shape, launcher_args, env, root);
    argv.push(binary.to_string());
    argv.extend(program_args.iter().cloned());
    argv
}

/// How many processes a launcher starts, on how many nodes, and whether they
/// are a trial's ranks (which get srun's `--gpus-per-task` and `--mpi=`).
#[derive(Debug, Clone, Copy)]
struct Shape {
    ranks: usize,
    nodes: usize,
    per_rank: bool,
}

/// The one place a launcher's words are written, for trials, upstream tests
/// and the one-process checks on a node: nothing for a direct launch, else
/// the launcher and its options, with the trial's environment forwarded to
/// the ranks (Open MPI `-x NAME` takes the value from mpirun's own
/// environment; MPICH/Hydra needs `-genv NAME VALUE`; srun forwards
/// everything with `--export=ALL`). An `auto` flavour is resolved before
/// this ([`mpi::resolve`]).
fn launcher_prefix(
    launcher: &LauncherConfig,
    shape: Shape,
    launcher_args: &[String],
    env: &[(String, String)],
    root: bool,
) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    match launcher.kind {
        LauncherKind::Direct => {}
        LauncherKind::Mpirun => {
            argv.push(mpi::program(launcher).to_string());
            if launcher.flavor == MpiFlavor::Openmpi && root {
                argv.push("--allow-run-as-root".into());
            }
            argv.extend(["-np".into(), shape.ranks.to_string()]);
            argv.extend(launcher_args.iter().cloned());
            for (k, v) in env {
                match launcher.flavor {
                    MpiFlavor::Openmpi | MpiFlavor::Auto => argv.extend(["-x".into(), k.clone()]),
                    MpiFlavor::Mpich => argv.extend(["-genv".into(), k.clone(), v.clone()]),
                }
            }
        }
        LauncherKind::Srun => {
            argv.push(mpi::program(launcher).to_string());
            argv.extend(["--ntasks".into(), shape.ranks.to_string(), "--nodes".into(), shape.nodes.to_string()]);
            if shape.per_rank {
                if launcher.gpus_per_task > 0 {
                    argv.push(format!("--gpus-per-task={}", launcher.gpus_per_task));
                }
                argv.extend(mpi::srun_plugin(launcher.flavor).map(|p| format!("--mpi={p}")));
            }
            // --immediate: a request the cluster cannot meet fails at once
            // instead of queueing forever.
            argv.extend(["--immediate".into(), "--export=ALL".into()]);
            argv.extend(launcher_args.iter().cloned());
        }
    }
    argv
}

/// Launcher options that name the hosts: the user chose them, so the
/// harness adds none.
const MPIRUN_HOST_OPTIONS: &[&str] = &[
    "--host",
    "-host",
    "-H",
    "--hostfile",
    "-hostfile",
    "--default-hostfile",
    "--machinefile",
    "-machinefile",
    "-machine",
    "-f",
    "-hosts",
];
const SRUN_HOST_OPTIONS: &[&str] = &["-w", "--nodelist", "-F", "--nodefile"];

/// How `arg` names hosts: `Some(true)` when the next word is the value
/// (`--host a`), `Some(false)` when it carries it (`--host=a`, srun's `-wa`),
/// `None` when it does not name hosts.
fn host_option(launcher: &LauncherConfig, arg: &str) -> Option<bool> {
    let options = match launcher.kind {
        LauncherKind::Direct => return None,
        LauncherKind::Mpirun => MPIRUN_HOST_OPTIONS,
        LauncherKind::Srun => SRUN_HOST_OPTIONS,
    };
    options.iter().find_map(|o| {
        let rest = arg.strip_prefix(o)?;
        let attached = launcher.kind == LauncherKind::Srun && o.len() == 2 && !rest.is_empty();
        match rest {
            "" => Some(true),
            _ if rest.starts_with('=') || attached => Some(false),
            _ => None,
        }
    })
}

/// Whether `args` name hosts themselves.
fn names_hosts(launcher: &LauncherConfig, args: &[String]) -> bool {
    args.iter().any(|arg| host_option(launcher, arg).is_some())
}

/// The options that hand `hosts` (node, ranks there) to the launcher, unless
/// `args` (the launcher's rendered args) name hosts already.
pub(crate) fn host_args(launcher: &LauncherConfig, args: &[String], hosts: &[(String, usize)]) -> Vec<String> {
    if hosts.is_empty() || names_hosts(launcher, args) {
        return Vec::new();
    }
    let with_slots = || hosts.iter().map(|(h, n)| format!("{h}:{n}")).collect::<Vec<_>>().join(",");
    match (launcher.kind, launcher.flavor) {
        (LauncherKind::Direct, _) => Vec::new(),
        (LauncherKind::Mpirun, MpiFlavor::Mpich) => vec!["-hosts".into(), with_slots()],
        (LauncherKind::Mpirun, MpiFlavor::Openmpi | MpiFlavor::Auto) => vec!["--host".into(), with_slots()],
        (LauncherKind::Srun, _) => {
            vec![format!("--nodelist={}", hosts.iter().map(|(h, _)| h.as_str()).collect::<Vec<_>>().join(","))]
        }
    }
}

/// `args` without the options (and their values) that name hosts, for a
/// command aimed at one node of the harness's choosing.
fn without_hosts(launcher: &LauncherConfig, args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = args.iter();
    while let Some(arg) = words.next() {
        match host_option(launcher, arg) {
            Some(true) => {
                words.next();
            }
            Some(false) => {}
            None => out.push(arg.clone()),
        }
    }
    out
}

/// `argv` run once on `node` through `launcher` (a resolved flavour) with
/// its rendered `args`: what the launcher itself can see there.
pub(crate) fn on_node(
    launcher: &LauncherConfig,
    args: &[String],
    node: &str,
    argv: &[String],
    root: bool,
) -> Vec<String> {
    if launcher.kind == LauncherKind::Direct {
        return argv.to_vec();
    }
    let mut args_there = host_args(launcher, &[], &[(node.to_string(), 1)]);
    args_there.extend(without_hosts(launcher, args));
    let shape = Shape { ranks: 1, nodes: 1, per_rank: false };
    let mut out = launcher_prefix(launcher, shape, &args_there, &[], root);
    out.extend(argv.iter().cloned());
    out
}

/// `-n N -w W`; one pass without warm-up when `trim` (coverage needs one
/// pass through the code, not stable timings).
fn iteration_args(config: &Config, trim: bool) -> Vec<String> {
    let (iters, warmup) = if trim { (1, 0) } else { (config.iterations.iters, config.iterations.warmup) };
    vec!["-n".into(), iters.to_string(), "-w".into(), warmup.to_string()]
}

/// The `{placeholders}` of a trial's args and environment.
pub(crate) fn trial_vars(ctx: &Context, manifest: &BuildManifest, spec: &TrialSpec, slots: Option<&[usize]>) -> Vars {
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
    // A size of the plan was checked when the config loaded.
    if let Ok(size) = Size::try_from(spec.size().to_string()) {
        vars.set("bytes", size.bytes().to_string()).set("size", size.as_str().to_string());
    }
    vars
}

/// The file a ctest trial's working folder holds when it starts: CTest
/// writes its `Testing/` folder (`LastTest.log`, `CTestCostData.txt`) beside
/// the `CTestTestfile.cmake` it starts from, which would otherwise be in the
/// cached build, shared by every workspace.
pub(crate) const CTEST_FILE: &str = "CTestTestfile.cmake";

/// [`CTEST_FILE`]'s text: the build's tests folder `bin_dir` as CTest's one
/// subfolder, so its tests run there as before (each in its own folder).
pub(crate) fn ctest_file(bin_dir: &Path) -> Result<String> {
    // CMake reads a backslash in a path as a folder separator.
    let Some(dir) = bin_dir.to_str().filter(|d| !d.contains(['\n', '\r', '\\'])) else {
        bail!(
            "the tests folder {} cannot be named to CTest: it is not one line of UTF-8 without a backslash",
            bin_dir.display()
        );
    };
    // A quoted argument of CMake's language: `"` and `$` escaped.
    let quoted = dir.replace('"', "\\\"").replace('$', "\\$");
    Ok(format!("# Written by ccl-coverage: the build's tests, run from this folder.\nsubdirs(\"{quoted}\")\n"))
}

/// The file a ctest trial's JUnit report is written to, in its cases folder.
pub(crate) const CTEST_JUNIT: &str = "ctest-junit.xml";

pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
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
    fn placed_hosts_reach_the_launcher_unless_its_args_name_hosts() {
        let hosts = [("a".to_string(), 2), ("b".to_string(), 2)];
        let ompi = launcher(LauncherKind::Mpirun, MpiFlavor::Openmpi);
        let mpich = launcher(LauncherKind::Mpirun, MpiFlavor::Mpich);
        let srun = launcher(LauncherKind::Srun, MpiFlavor::Openmpi);
        let direct = launcher(LauncherKind::Direct, MpiFlavor::Openmpi);
        let none: [String; 0] = [];
        assert_eq!(host_args(&ompi, &none, &hosts), ["--host", "a:2,b:2"]);
        assert_eq!(host_args(&mpich, &none, &hosts), ["-hosts", "a:2,b:2"]);
        assert_eq!(host_args(&srun, &none, &hosts), ["--nodelist=a,b"]);
        assert!(host_args(&direct, &none, &hosts).is_empty());
        assert!(host_args(&ompi, &none, &[]).is_empty(), "this machine: nothing to name");
        for user in [&["--hostfile", "/h"][..], &["--host=x"], &["-H", "x"], &["--machinefile", "/m"]] {
            let user: Vec<String> = user.iter().map(ToString::to_string).collect();
            assert!(host_args(&ompi, &user, &hosts).is_empty(), "{user:?}");
        }
        let user = vec!["-f".to_string(), "/h".to_string()];
        assert!(host_args(&mpich, &user, &hosts).is_empty());
        assert!(host_args(&srun, &["-wn1".to_string()], &hosts).is_empty());
        assert_eq!(host_args(&ompi, &["--mca".into(), "x".into(), "--hostnames-x".into()], &hosts).len(), 2);
    }

    #[test]
    fn a_command_on_one_node_replaces_the_users_hosts() {
        let args: Vec<String> =
            ["--hostfile", "/h", "--mca", "plm_rsh_agent", "/a"].iter().map(ToString::to_string).collect();
        let cat = ["cat".to_string(), "/ws/m".to_string()];
        let ompi = launcher(LauncherKind::Mpirun, MpiFlavor::Openmpi);
        assert_eq!(
            on_node(&ompi, &args, "b", &cat, true).join(" "),
            "mpirun --allow-run-as-root -np 1 --host b:1 --mca plm_rsh_agent /a cat /ws/m"
        );
        let mpich = launcher(LauncherKind::Mpirun, MpiFlavor::Mpich);
        assert_eq!(on_node(&mpich, &[], "b", &cat, true).join(" "), "mpirun -np 1 -hosts b:1 cat /ws/m");
        let srun = launcher(LauncherKind::Srun, MpiFlavor::Openmpi);
        let args: Vec<String> = ["-w", "x", "-p", "gpu"].iter().map(ToString::to_string).collect();
        assert_eq!(
            on_node(&srun, &args, "b", &cat, true).join(" "),
            // The harness's host option comes where a trial's does: after srun's own.
            "srun --ntasks 1 --nodes 1 --immediate --export=ALL --nodelist=b -p gpu cat /ws/m"
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

    /// With NVIDIA device coverage on, the collector's variables are in the
    /// trial's environment, so every launcher forwards them to every rank.
    #[test]
    fn nvidia_device_coverage_reaches_every_rank() {
        use crate::device::{Backend, DeviceDecision};
        let config = crate::config::load_str(crate::config::DEFAULT_CONFIG_TEXT, Path::new("local.json"), &|_| None)
            .unwrap()
            .config;
        let mut manifest = crate::build::cache::test_manifest("b1");
        manifest.coverage = true;
        manifest.device = DeviceDecision {
            requested: crate::config::DeviceMode::Auto,
            enabled: true,
            reason: "r".into(),
            target: Some("sm_90".into()),
            backend: Backend::named("nvidia"),
            found: Some(crate::device::nvidia::tests::found(true)),
        };
        let user = vec![("CUDA_MODULE_LOADING".to_string(), "LAZY".to_string())];
        let (env, _, _) = harness_env(user, &config, &manifest, Path::new("/ws/profiles/A.1K"));
        let get = |k: &str| env.iter().filter(|(n, _)| n == k).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
        assert_eq!(get("CUDA_INJECTION64_PATH"), ["/t/libccl_cov_cupti.so"]);
        assert_eq!(get("CUDA_MODULE_LOADING"), ["EAGER"], "the harness's value replaces the user's");
        assert_eq!(get("CCL_COV_SASS_DIR"), ["/ws/profiles/A.1K"]);
        // Beside the cached build /b, never in it: the build folder holds what its build made.
        assert_eq!(get("CCL_COV_SASS_CUBINS"), ["/b.device/cubins"]);
        let ompi = command_line(&launcher(LauncherKind::Mpirun, MpiFlavor::Openmpi), &[], 2, &env, "/b/x", &[], false);
        assert!(ompi.windows(2).any(|w| w == ["-x", "CUDA_INJECTION64_PATH"]), "{ompi:?}");
        let mpich = command_line(&launcher(LauncherKind::Mpirun, MpiFlavor::Mpich), &[], 2, &env, "/b/x", &[], false);
        assert!(mpich.windows(3).any(|w| w == ["-genv", "CCL_COV_SASS_DIR", "/ws/profiles/A.1K"]), "{mpich:?}");
        let srun = command_line(&launcher(LauncherKind::Srun, MpiFlavor::Openmpi), &[], 2, &env, "/b/x", &[], false);
        assert!(srun.contains(&"--export=ALL".to_string()), "{srun:?}");
        // Host-only: none of them.
        manifest.device.enabled = false;
        let (env, _, _) = harness_env(Vec::new(), &config, &manifest, Path::new("/ws/profiles/A.1K"));
        assert!(!env.iter().any(|(k, _)| k.starts_with("CUDA_") || k.starts_with("CCL_COV_SASS")), "{env:?}");
    }

    /// The tests folder reaches CTest as one quoted argument, whatever it holds.
    #[test]
    fn the_ctest_file_names_the_tests_folder_as_data() {
        let text = ctest_file(Path::new(r#"/b/a "q" $ENV{HOME};y"#)).unwrap();
        assert!(text.ends_with("subdirs(\"/b/a \\\"q\\\" \\$ENV{HOME};y\")\n"), "{text}");
        for bad in ["/b/two\nlines", "/b/back\\slash"] {
            let err = ctest_file(Path::new(bad)).unwrap_err().to_string();
            assert!(err.contains("is not one line of UTF-8 without a backslash"), "{err}");
        }
    }

    #[test]
    fn profile_names_carry_the_attempt_s_mark_before_their_extension() {
        assert_eq!(marked_pattern("%h-%p-%m.profraw", "0a1b2c"), "%h-%p-%m.0a1b2c.profraw");
        assert_eq!(marked_pattern("sub/%p.x.profraw", "m"), "sub/%p.x.m.profraw");
        assert_eq!(marked_pattern("%p", "m"), "%p.m");
        assert_eq!(marked_pattern(".profraw", "m"), ".profraw.m");
        let (a, b) = (profile_mark("t-1"), profile_mark("t-1"));
        assert!(a.len() == 12 && a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b, "each attempt draws its own");
    }
}
