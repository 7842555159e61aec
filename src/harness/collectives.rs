//! `cargo test --test collectives`: one libtest-mimic trial per planned trial.
//! The build is a shared fixture: the first trial that needs it builds (or
//! reuses) it, every other trial waits for it, and a failed build fails every
//! trial with the build's own error.

use crate::allocation::Allocation;
use crate::config::LauncherKind;
use crate::context::Context;
use crate::error::Error;
use crate::fixture::{self, BuildManifest, BuildPlan};
use crate::host;
use crate::interrupt;
use crate::launch;
use crate::outcome;
use crate::perf;
use crate::plan::{self, TrialSpec};
use crate::profiles;
use crate::results::{RunInfo, RunWriter, TrialIdentity, TrialResult};
use crate::run;
use crate::slots::Slots;
use crate::workspace::Area;
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

struct Shared {
    ctx: Context,
    run_id: String,
    fixture: OnceLock<Result<BuildManifest, Error>>,
    info: OnceLock<RunInfo>,
    /// The hostfile's or Slurm allocation's nodes, read once.
    allocation: OnceLock<Result<Option<Allocation>, Error>>,
    results: RunWriter,
}

pub fn main() -> ExitCode {
    if let Some(code) = crate::supervisor::run_if_requested() {
        return code;
    }
    main_with(Arguments::from_args())
}

pub fn main_with(args: Arguments) -> ExitCode {
    let ctx = match super::load_context() {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    let specs = plan::plan(ctx.config());
    if ctx.dry_run && !args.list {
        return super::dry_run::print(&ctx, &specs, &args);
    }
    // Listing reads nothing and writes nothing: no lock, no workspace.
    let _lock = if args.list {
        None
    } else {
        match super::take_workspace(&ctx, super::Access::Write) {
            Ok(lock) => Some(lock),
            Err(code) => return code,
        }
    };
    let shared = Arc::new(Shared {
        run_id: format!("{}-{}", host::now(), std::process::id()),
        results: RunWriter::new(ctx.workspace.clone()),
        ctx,
        fixture: OnceLock::new(),
        info: OnceLock::new(),
        allocation: OnceLock::new(),
    });
    let trials = specs
        .into_iter()
        .map(|spec| {
            let shared = shared.clone();
            let ignored = spec.ignored;
            Trial::ignorable_test(spec.name.clone(), move || shared.run_trial(&spec)).with_ignored_flag(ignored)
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let written = shared.results.finish().inspect_err(|e| eprintln!("ccl-coverage: {e}"));
    if let Some(code) = interrupt::exit_code() {
        eprintln!(
            "ccl-coverage: interrupted by {}: results of the trials that ended are in {}",
            interrupt::describe(),
            shared.ctx.workspace.results_dir().display()
        );
        return ExitCode::from(code);
    }
    if written.is_err() {
        return ExitCode::FAILURE;
    }
    conclusion.exit_code()
}

impl Shared {
    fn fixture(&self) -> Result<&BuildManifest, Failed> {
        let built = self.fixture.get_or_init(|| {
            // A panic must not leave the other trials without an answer.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.prepare_fixture()))
                .unwrap_or_else(|p| Err(Error::new(format!("the build panicked: {}", panic_text(&*p)))))
        });
        built.as_ref().map_err(|e| Failed::from(e.to_string()))
    }

    fn prepare_fixture(&self) -> Result<BuildManifest, Error> {
        let ctx = &self.ctx;
        eprintln!(
            "ccl-coverage: config {} ({}), workspace {}",
            ctx.config().name,
            ctx.loaded.path.display(),
            ctx.workspace.root().display()
        );
        let build_failed = |e: Error| Error::new(format!("the shared build failed, so this trial did not run:\n{e}"));
        let plan = BuildPlan::new(ctx).map_err(build_failed)?;
        eprintln!("ccl-coverage: device coverage: {}", plan.device.summary());
        let manifest = plan.build(ctx).map_err(build_failed)?;
        // The build is fine; what fails here is the workspace (full, read-only).
        fixture::adopt(&ctx.workspace, &manifest).map_err(|e| {
            Error::new(format!(
                "cannot record build {} in the workspace {}, so this trial did not run:\n{e}",
                manifest.build_id,
                ctx.workspace.root().display()
            ))
        })?;
        Ok(manifest)
    }

    fn run_info(&self) -> &RunInfo {
        self.info.get_or_init(|| RunInfo {
            config_path: self.ctx.loaded.path.clone(),
            description: self.ctx.config().description.clone(),
            host: host::hostname(),
            gpus: host::gpus(),
            library_git_sha: git_sha(&self.ctx.loaded.library_src()),
            planned: plan::names(self.ctx.config()),
        })
    }

    /// Why a launched trial cannot run in the allocation (hostfile, Slurm),
    /// or `None`: it fits, there is none, or it runs as one process here.
    fn misfit(&self, spec: &TrialSpec) -> Result<Option<String>, Failed> {
        let launcher = spec.launcher(self.ctx.config());
        if launcher.kind == LauncherKind::Direct {
            return Ok(None);
        }
        let allocation = self.allocation.get_or_init(|| Allocation::detect(&crate::config::process_env));
        match allocation {
            Ok(allocation) => Ok(allocation.as_ref().and_then(|a| a.misfit(launcher.nodes, spec.ranks))),
            Err(e) => Err(Failed::from(e.to_string())),
        }
    }

    fn run_trial(&self, spec: &TrialSpec) -> Result<Completion, Failed> {
        not_interrupted()?;
        if let Some(reason) = self.misfit(spec)? {
            eprintln!("ccl-coverage: {} ignored: {reason}", spec.name);
            return Ok(Completion::ignored_with(reason));
        }
        let manifest = self.fixture()?;
        let ctx = &self.ctx;
        let ws = &ctx.workspace;
        let fail = |e: Error| Failed::from(e.to_string());
        let slots = Slots::new(ctx.state_dir.join("slots"), ctx.config().capacity);
        let log = ws.trial_log(&spec.slug);
        let finish = || {
            let incremental = manifest.coverage && ctx.incremental_merge;
            profiles::finish_trial(ws, &manifest.toolchain, &spec.slug, incremental, ctx.keep_raw)
        };
        let (execution, merged) = {
            let held = slots.acquire(spec.ranks).map_err(fail)?;
            not_interrupted()?;
            let profile_dir = ws.trial_profiles(&spec.slug);
            // Old profiles of this trial would be merged with the new ones.
            ws.clear(Area::Profiles, &profile_dir).map_err(fail)?;
            ws.remove(Area::Profiles, &profiles::trial_profdata(ws, &spec.slug)).map_err(fail)?;
            ws.clear(Area::Quarantine, &ws.trial_quarantine(&spec.slug)).map_err(fail)?;
            let launch = launch::prepare(ctx, manifest, spec, &profile_dir, Some(held.indices())).map_err(fail)?;
            let timeout = launch.timeout.as_secs();
            let execution = run::execute(launch, &log, &ctx.supervisor, ctx.heartbeat, &|elapsed| {
                eprintln!(
                    "ccl-coverage: {} still running after {}s (timeout {timeout}s)",
                    spec.name,
                    elapsed.as_secs()
                );
            })
            .map_err(fail)?;
            (execution, (!ctx.merge_overlap).then(finish))
        };
        // With overlap the slots are free now: the next trial runs while this
        // one's profiles merge.
        let merged = merged.unwrap_or_else(finish);
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        let perf = perf::parse(&output);
        let mut verdict = outcome::judge(&execution.finished, &perf, execution.launch.timeout);
        if manifest.coverage {
            let expected = match spec.launcher(ctx.config()).kind {
                LauncherKind::Direct => 1,
                LauncherKind::Mpirun | LauncherKind::Srun => spec.ranks,
            };
            let quarantined = merged.quarantined();
            let runtime_errors: Vec<String> =
                output.lines().filter(|l| l.contains("LLVM Profile Error")).take(3).map(String::from).collect();
            let evidence = outcome::ProfileEvidence {
                raw: merged.raw,
                expected,
                dir: &merged.dir,
                merge_error: merged.error.as_deref(),
                quarantined: &quarantined,
                runtime_errors: &runtime_errors,
                free_bytes: host::free_bytes(&merged.dir),
            };
            verdict = outcome::judge_coverage(verdict, &evidence);
        }
        let id = TrialIdentity { spec, config: ctx.config(), manifest, run_id: &self.run_id };
        let result = TrialResult::new(id, &execution, &verdict, merged, perf);
        self.results.record(&result, manifest, self.run_info()).map_err(fail)?;
        match result.failure_message(&output) {
            None => Ok(Completion::Completed),
            Some(message) => Err(Failed::from(message)),
        }
    }
}

/// A trial that has not started when the run is interrupted does not start.
fn not_interrupted() -> Result<(), Failed> {
    match interrupt::requested() {
        Some(_) => Err(Failed::from(format!("not run: the run was interrupted by {}", interrupt::describe()))),
        None => Ok(()),
    }
}

fn git_sha(dir: &std::path::Path) -> Option<String> {
    crate::process::Cmd::new("git")
        .args(["-C", &dir.display().to_string(), "rev-parse", "HEAD"])
        .read()
        .ok()
        .map(|s| s.trim().to_string())
}

pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(ToString::to_string))
        .unwrap_or_else(|| "(no message)".into())
}
