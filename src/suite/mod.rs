//! One run of the suite, without libtest: the shared build (the first
//! trial that needs it builds or reuses it, every other waits for it, and a
//! failed build fails every trial with the build's own error), the nodes and
//! the shared-filesystem check once per launcher, and each trial's
//! lifecycle: place it, run it, judge it, record it. `harness/collectives.rs`
//! maps its outcomes to libtest's.

use crate::bail;
use crate::build::cache::{self, BuildManifest, BuildPlan};
use crate::config::LauncherKind;
use crate::context::Context;
use crate::coverage::ignore::Scope;
use crate::coverage::profiles;
use crate::coverage::trial_lines::{self, LineStore};
use crate::error::{Context as _, Error, Result};
use crate::exec::host;
use crate::exec::interrupt;
use crate::launch;
use crate::launch::allocation::{Allocation, Want};
use crate::launch::slots::Slots;
use crate::plan::{self, TrialSpec};
use crate::results::{
    Attempt, Ignored, RecordedBuild, Rerun, RunHeader, RunJsonWriter, RunPlan, TrialIdentity, TrialResult,
};
use crate::trial;
use crate::upstream::TrialKind;
use crate::verdict::output::TrialOutput;
use crate::verdict::perf::PerfReport;
use crate::verdict::{self, Case, Status, Verdict};
use crate::workspace::{Area, Workspace};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};

/// How a trial ended, for the harness to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Passed; `tests`: how many test cases ran (gtest, ctest, pytest), so
    /// that a filter that ran 2 of 1,000 tests shows on the PASS line.
    Passed { tests: Option<usize> },
    /// Passed after `attempts` attempts that did not (`--retries`).
    Flaky { attempts: usize, tests: Option<usize> },
    /// Not run, and why (it does not fit the nodes).
    Ignored(String),
    /// Failed, timed out or interrupted: the verdict and the whole message.
    Failed(Status, String),
    /// Not run: the run's shared build failed or could not be recorded in
    /// the workspace (the error is said once, when the build ends), the
    /// trial's own folders could not be prepared, or the run was interrupted
    /// before it started. `cause` is what the run's last line says of it.
    NotRun { cause: String, message: String },
}

/// The state one run shares between its trials.
pub(crate) struct Suite {
    pub(crate) ctx: Context,
    run_id: String,
    /// The build, held (`BuildInUse`) until the run ends, so that no
    /// `clean --builds` deletes it under the trials.
    build: OnceLock<Result<(BuildManifest, cache::BuildInUse)>>,
    /// When the build was ready: the time left is the trials', not the build's.
    ready: OnceLock<std::time::Instant>,
    /// The manifest the build was planned to have, once it had a plan: a
    /// failed build's trials are recorded against its key.
    planned: OnceLock<BuildManifest>,
    info: OnceLock<RunPlan>,
    /// The hostfile's, Slurm allocation's or config's nodes, read once.
    allocation: OnceLock<Result<Option<Allocation>>>,
    /// The shared-filesystem check's verdict per launcher, once per run;
    /// held while a check runs, so each launcher is checked once.
    shared_fs: Mutex<HashMap<String, Result<()>>>,
    results: RunJsonWriter,
    /// The trials the name filter selected, and whether each runs (else its
    /// flag ignores it): what JUnit lists.
    selected: OnceLock<Vec<(TrialSpec, bool)>>,
    /// The build's coverage mapping, read once the first trial's profile is
    /// merged, for each trial's stored lines; or why it cannot be read.
    line_store: OnceLock<std::result::Result<Arc<LineStore>, String>>,
    lines: LineWorker,
}

/// Stores each trial's lines off the trial's thread, once its record is
/// written, and records the trial again with them: the trial's thread goes
/// on to the next trial meanwhile (issue #35). A run killed before a trial's
/// lines are stored leaves its record without them; the report then computes
/// them, saying so.
#[derive(Default)]
struct LineWorker {
    queue: Mutex<Option<(mpsc::Sender<TrialResult>, std::thread::JoinHandle<()>)>>,
}

impl LineWorker {
    /// Queues `result`, whose profile is merged, starting the worker once.
    fn submit(&self, store: &Arc<LineStore>, ws: &Workspace, writer: &RunJsonWriter, result: TrialResult) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.is_none() {
            let (send, receive) = mpsc::channel::<TrialResult>();
            let (store, ws, writer) = (store.clone(), ws.clone(), writer.clone());
            let run = writer.run_facts();
            let worker = std::thread::Builder::new().name("ccl-cov-lines".into()).spawn(move || {
                for mut result in receive {
                    let Some(merge) = result.merge.as_mut() else { continue };
                    match store.store(&ws, &result.slug, merge) {
                        Ok(stored) => merge.lines = Some(stored),
                        Err(why) => merge.lines_error = Some(why.to_string()),
                    }
                    let Some((build, info)) = &run else { continue };
                    if let Err(e) = writer.record(&result, build.clone(), info) {
                        crate::say!("{}: its stored lines could not be recorded: {e}", result.trial);
                    }
                }
            });
            match worker {
                Ok(worker) => *queue = Some((send, worker)),
                Err(e) => {
                    crate::say!("each trial's lines are left to the report: no thread to store them: {e}");
                    return;
                }
            }
        }
        if let Some((send, _)) = queue.as_ref() {
            let _ = send.send(result);
        }
    }

    /// Waits for the lines queued so far to be stored and recorded.
    fn drain(&self) {
        let taken = self.queue.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((send, worker)) = taken {
            drop(send);
            let _ = worker.join();
        }
    }
}

impl Suite {
    pub(crate) fn new(ctx: Context) -> Suite {
        Suite {
            run_id: crate::results::run_id(),
            results: RunJsonWriter::new(ctx.workspace.clone()),
            ctx,
            build: OnceLock::new(),
            ready: OnceLock::new(),
            planned: OnceLock::new(),
            info: OnceLock::new(),
            allocation: OnceLock::new(),
            shared_fs: Mutex::new(HashMap::new()),
            selected: OnceLock::new(),
            line_store: OnceLock::new(),
            lines: LineWorker::default(),
        }
    }

    /// The trials the harness's filter selected, and whether each runs.
    pub(crate) fn select(&self, selected: Vec<(TrialSpec, bool)>) {
        let _ = self.selected.set(selected);
    }

    /// The selected trials this run does not run because they are ignored:
    /// by their flag, or (as [`Suite::run`] decides when one would start)
    /// because they do not fit the run's nodes, which every process of the
    /// run reads alike.
    fn ignored(&self) -> Vec<Ignored> {
        let config = self.ctx.config();
        let allocation = self.allocation().ok().flatten();
        let selected = self.selected.get().map_or(&[][..], Vec::as_slice);
        let why = |spec: &TrialSpec, runs: bool| {
            if runs { launch::placement::misfit(&self.ctx, allocation, spec) } else { spec.why_ignored(config) }
        };
        selected
            .iter()
            .filter_map(|(spec, runs)| Some(Ignored { trial: spec.name.clone(), reason: why(spec, *runs)? }))
            .collect()
    }

    /// Runs `spec` from placement to its record; also how long it waited
    /// for rank slots, which is not its own time.
    pub(crate) fn run(&self, spec: &TrialSpec) -> (Outcome, std::time::Duration) {
        let waited = Mutex::new(std::time::Duration::ZERO);
        let outcome = self.run_trial(spec, &waited);
        (outcome, waited.into_inner().unwrap_or_else(PoisonError::into_inner))
    }

    /// When the shared build was ready (or failed), once a trial asked for it.
    pub(crate) fn ready_at(&self) -> Option<std::time::Instant> {
        self.ready.get().copied()
    }

    /// Writes `run.json` and JUnit from every record, once the trials ended
    /// and their lines are stored.
    /// This run's id ([`crate::results::runs::run_id`]).
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    pub(crate) fn finish(&self) -> Result<()> {
        self.lines.drain();
        self.results.finish()
    }
}

impl Suite {
    fn build(&self) -> Result<&BuildManifest> {
        let built = self.build.get_or_init(|| {
            // A panic must not leave the other trials without an answer.
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.prepare_build()))
                .unwrap_or_else(|p| Err(Error::new(format!("the build panicked: {}", panic_text(&*p)))));
            let _ = self.ready.set(std::time::Instant::now());
            // Said here, once: each trial then says only that it did not run.
            if let Err(e) = &built {
                crate::say!("{e}");
            }
            built
        });
        built.as_ref().map(|(manifest, _)| manifest).map_err(Clone::clone)
    }

    fn prepare_build(&self) -> Result<(BuildManifest, cache::BuildInUse)> {
        let ctx = &self.ctx;
        crate::reporter::emit(crate::reporter::Event::RunUses {
            config: &ctx.config().name,
            config_path: &ctx.loaded.path,
            workspace: ctx.workspace.root(),
        });
        let build_failed = |e: Error| Error::new(format!("the shared build failed, so no trial runs:\n{e}"));
        let plan = BuildPlan::new(ctx).map_err(build_failed)?;
        if let Ok(planned) = plan.planned_manifest(ctx) {
            let _ = self.planned.set(planned);
        }
        crate::reporter::emit(crate::reporter::Event::DeviceDecided { summary: &plan.device.summary() });
        let (manifest, in_use) = plan.build(ctx).map_err(build_failed)?;
        // The build is fine; what fails here is the workspace (full, read-only).
        cache::adopt(&ctx.workspace, &manifest).map_err(|e| {
            Error::new(format!(
                "cannot record build {} in the workspace {}, so no trial runs:\n{e}",
                manifest.build_id,
                ctx.workspace.root().display()
            ))
        })?;
        cache::register_workspace(&ctx.state_dir, &ctx.workspace, &ctx.config().name, &manifest.build_id);
        Ok((manifest, in_use))
    }

    fn run_info(&self) -> &RunPlan {
        self.info.get_or_init(|| RunPlan {
            header: RunHeader {
                config: self.ctx.config().name.to_string(),
                config_path: self.ctx.loaded.path.clone(),
                description: self.ctx.config().description.clone(),
                host: host::hostname(),
                gpus: crate::device::gpus(),
                library_git_sha: git_sha(&self.ctx.loaded.library_src()),
                run_id: self.run_id.clone(),
            },
            planned: plan::names(self.ctx.config()),
            ignored: self.ignored(),
        })
    }

    fn allocation(&self) -> Result<Option<&Allocation>> {
        match self.allocation.get_or_init(|| launch::placement::detect_allocation(&self.ctx)) {
            Ok(allocation) => Ok(allocation.as_ref()),
            Err(e) => Err(e.clone()),
        }
    }

    /// Before the first trial of a launcher that spans more than one node:
    /// whether every node of the allocation sees the workspace
    /// (`shared_fs.rs`). A failed check fails every such trial of that
    /// launcher with its message, unrun: ignoring them would let the run
    /// pass without their coverage, and running them would lose a node's
    /// profiles.
    fn shared_filesystem(&self, spec: &TrialSpec, manifest: &BuildManifest) -> Result<()> {
        let config = self.ctx.config();
        let Some(launcher) = spec.launcher(config) else { return Ok(()) };
        let Some(allocation) = self.allocation()? else { return Ok(()) };
        if launcher.kind == LauncherKind::Direct || launcher.nodes < 2 || spec.upstream().is_some() {
            return Ok(());
        }
        let mut verdicts = self.shared_fs.lock().unwrap_or_else(PoisonError::into_inner);
        let verdict = verdicts.entry(spec.launcher.clone()).or_insert_with(|| {
            let check = || -> Result<()> {
                let resolved = launch::mpi::resolve(launcher)?;
                let vars = launch::trial_vars(&self.ctx, manifest, spec, None);
                let args = vars.render_all(&resolved.args)?;
                let grace = std::time::Duration::from_secs(config.timeouts.grace);
                trial::shared_fs::check(
                    &self.ctx.workspace,
                    &resolved,
                    &args,
                    &allocation.nodes,
                    &self.ctx.supervisor,
                    grace,
                )
            };
            let nodes: Vec<&str> = allocation.nodes.iter().map(|n| n.name.as_str()).collect();
            match check() {
                Ok(()) => {
                    crate::say!(
                        "shared filesystem: every node of {} ({}) sees the workspace through launcher {}",
                        allocation.source,
                        nodes.join(", "),
                        spec.launcher
                    );
                    Ok(())
                }
                Err(e) => {
                    crate::say!("{e}");
                    crate::say!("trials of launcher {} (more than one node) fail unrun", spec.launcher);
                    Err(e)
                }
            }
        });
        verdict.clone().context("not run")
    }

    /// Every trial that gets this far has a verdict in memory, whatever
    /// fails: one that could not be placed, prepared or started is recorded
    /// as failed with the cause (an earlier run's record of it would
    /// otherwise be shown as this run's), unless the run was interrupted
    /// before it started.
    fn run_trial(&self, spec: &TrialSpec, waited: &Mutex<std::time::Duration>) -> Outcome {
        if let Some(outcome) = interrupted_before_start() {
            return outcome;
        }
        let allocation = match self.allocation() {
            Ok(allocation) => allocation,
            Err(e) => return self.not_started(spec, None, &e),
        };
        if let Some(reason) = launch::placement::misfit(&self.ctx, allocation, spec) {
            crate::reporter::emit(crate::reporter::Event::TrialIgnored { trial: &spec.name, why: &reason });
            return Outcome::Ignored(reason);
        }
        let manifest = match self.build() {
            Ok(manifest) => manifest,
            Err(e) => {
                let message = e.to_string();
                self.record_unbuilt(spec, &message);
                let cause = message.lines().next().unwrap_or_default().trim_end_matches(':');
                return Outcome::NotRun {
                    cause: "the shared build failed or could not be recorded".into(),
                    message: format!(
                        "not run: {cause} (the error is shown once, above, and in results/run.json's build_error)"
                    ),
                };
            }
        };
        self.run_built(spec, manifest, waited).unwrap_or_else(|e| self.not_started(spec, Some(manifest), &e))
    }

    /// The outcome of a trial that did not start because of `error`: not
    /// run when the run was interrupted meanwhile, else recorded as failed,
    /// the cause in its record, on screen and in the run's last line.
    fn not_started(&self, spec: &TrialSpec, manifest: Option<&BuildManifest>, error: &Error) -> Outcome {
        if let Some(outcome) = interrupted_before_start() {
            return outcome;
        }
        // A cause that already says the trial did not run is not said twice.
        let cause = error.to_string();
        let cause = cause.strip_prefix("not run: ").map_or(cause.clone(), str::to_string);
        let message = format!("not run: {cause}");
        let build_id = manifest.map_or("", |m| m.build_id.as_str());
        let result = TrialResult::unrun(spec, self.ctx.config(), build_id, &self.run_id, &message);
        let build = match manifest {
            Some(manifest) => RecordedBuild::Built(manifest.clone()),
            None => RecordedBuild::Failed { planned: self.planned.get().cloned(), error: cause.clone() },
        };
        if let Err(e) = self.results.record(&result, build, self.run_info()) {
            crate::say!("{}: cannot record that it did not run: {e}", spec.name);
        }
        let first = cause.lines().next().unwrap_or_default().trim_end_matches(':');
        Outcome::NotRun { cause: format!("{}: {first}", spec.name), message }
    }

    fn run_built(
        &self,
        spec: &TrialSpec,
        manifest: &BuildManifest,
        waited: &Mutex<std::time::Duration>,
    ) -> Result<Outcome> {
        let ctx = &self.ctx;
        let allocation = self.allocation()?;
        self.shared_filesystem(spec, manifest)?;
        let (slots, want) = launch::placement::pool(ctx, allocation, spec);
        // `--retries`: a trial that did not pass runs again, up to N times;
        // each attempt starts from nothing (its profiles cleared), so the
        // coverage is the last attempt's. One that passes then is flaky.
        let mut earlier: Vec<Attempt> = Vec::new();
        let (mut result, tail) = loop {
            let (result, tail) = self.attempt(spec, manifest, &slots, want, waited)?;
            let retry = !matches!(result.status, Status::Passed | Status::Interrupted)
                && earlier.len() < ctx.retries as usize
                && interrupt::requested().is_none();
            if !retry {
                break (result, tail);
            }
            crate::say!(
                "{} {} on attempt {} of {}: {}; running it again",
                spec.name,
                result.status.as_str(),
                earlier.len() + 1,
                ctx.retries + 1,
                result.reason
            );
            earlier.push(Attempt::of(&result, &tail));
        };
        result.flaky = result.status == Status::Passed && !earlier.is_empty();
        result.slot_wait_s = waited.lock().unwrap_or_else(PoisonError::into_inner).as_secs_f64();
        result.attempts = earlier;
        if result.status == Status::Failed && ctx.rerun_failed {
            result.rerun = self.rerun(spec, manifest, &slots, want).map(Box::new);
        }
        let store = result.merge.as_ref().is_some_and(|m| m.profdata.is_some()).then(|| self.line_store(manifest));
        if let (Some(Err(why)), Some(merge)) = (&store, result.merge.as_mut()) {
            merge.lines_error = Some(why.clone());
        }
        // A record that cannot be written fails the run at its end, naming
        // it; the trial's verdict stays what the run saw.
        match self.results.record(&result, RecordedBuild::Built(manifest.clone()), self.run_info()) {
            Ok(()) => {
                if let Some(Ok(store)) = store {
                    self.lines.submit(&store, &self.ctx.workspace, &self.results, result.clone());
                }
            }
            Err(e) => crate::say!("{}: its record could not be written: {e}", spec.name),
        }
        // The cases that ran, for a runner that reports them (none for a plain program).
        let tests = (!result.cases.is_empty())
            .then(|| result.cases.iter().filter(|c| c.status != verdict::CaseStatus::Skipped).count());
        match result.failure_message(&tail) {
            None if result.flaky => Ok(Outcome::Flaky { attempts: result.attempts.len(), tests }),
            None => Ok(Outcome::Passed { tests }),
            Some(message) => Ok(Outcome::Failed(result.status, message)),
        }
    }

    /// One attempt at `spec`: placed, run, judged; its record (not yet
    /// written) and the last lines of its log.
    fn attempt(
        &self,
        spec: &TrialSpec,
        manifest: &BuildManifest,
        slots: &Slots,
        want: Want,
        waited: &Mutex<std::time::Duration>,
    ) -> Result<(TrialResult, String)> {
        let ctx = &self.ctx;
        let ws = &ctx.workspace;
        let log = ws.trial_log(&spec.slug);
        let known = manifest.known_ids();
        let finish = |execution: &trial::Execution| {
            let incremental = manifest.coverage && ctx.incremental_merge;
            let pattern = &ctx.config().coverage.profile_pattern;
            let origin = profiles::Origin::of(&execution.launch, &execution.finished);
            profiles::finish_trial(
                ws,
                &manifest.toolchain,
                &spec.slug,
                pattern,
                &origin,
                profiles::Merging { incremental, keep_raw: ctx.keep_raw, known: Some(&known) },
            )
        };
        let (execution, merged) = {
            let asked = std::time::Instant::now();
            let held = slots.acquire(want);
            *waited.lock().unwrap_or_else(PoisonError::into_inner) += asked.elapsed();
            let held = held?;
            not_interrupted()?;
            clear_trial_folders(ws, &spec.slug)?;
            let profile_dir = ws.trial_profiles(&spec.slug);
            let launch = launch::prepare(ctx, manifest, spec, &profile_dir, Some(held.indices()), held.hosts())?;
            if launch.kind == TrialKind::Ctest {
                let work = ws.trial_work(&spec.slug);
                ws.create_dir(&work)?;
                ws.write(&work.join(launch::CTEST_FILE), launch::ctest_file(&manifest.bin_dir)?.as_bytes())?;
            }
            let timeout = launch.timeout.as_secs();
            let line = crate::exec::redact::shell_line(&launch.cmd.display());
            crate::detail!("{} starts: {line}", spec.name);
            let execution = trial::execute(ws, launch, &log, &ctx.supervisor, ctx.heartbeat, &|elapsed| {
                crate::note!("{} still running after {}s (timeout {timeout}s)", spec.name, elapsed.as_secs());
            })?;
            let merged = (!ctx.merge_overlap).then(|| finish(&execution));
            (execution, merged)
        };
        // With overlap the slots are free now: the next trial runs while this
        // one's profiles merge.
        let merged = merged.unwrap_or_else(|| finish(&execution));
        if !merged.foreign.is_empty() {
            let named: Vec<String> =
                merged.foreign.iter().map(|q| format!("{} ({})", q.file.display(), q.reason)).collect();
            crate::reporter::emit(crate::reporter::Event::Quarantined { trial: &spec.name, files: &named });
        }
        let output = TrialOutput::read(&log);
        let (verdict, cases, perf) = judge(ctx, spec, &execution, &output);
        let mut verdict = self.judged_run(spec, manifest, &execution, &output, verdict);
        if manifest.coverage {
            verdict = self.judged_coverage(spec, manifest, &execution, &merged, &output, verdict);
        }
        // A passed trial's working folder goes; a failed one's stays for
        // whoever looks into the failure, until the trial runs again.
        let work = ws.trial_work(&spec.slug);
        if verdict.status == Status::Passed
            && execution.launch.cmd.get_cwd() == Some(work.as_path())
            && let Err(e) = ws.remove(Area::Work, &work)
        {
            crate::say!("{}: its working folder could not be deleted: {e}", spec.name);
        }
        let id = TrialIdentity { spec, config: ctx.config(), manifest, run_id: &self.run_id };
        let mut result = TrialResult::new(id, &execution, &verdict, merged, perf);
        result.cases = cases;
        Ok((result, output.tail()))
    }

    /// The output's verdict, amended by how the run went: processes left
    /// behind, a log the trial replaced, the limit that timed it out, a
    /// missing cgroup, output cut by the log's cap.
    fn judged_run(
        &self,
        spec: &TrialSpec,
        manifest: &BuildManifest,
        execution: &trial::Execution,
        output: &TrialOutput,
        verdict: Verdict,
    ) -> Verdict {
        let ctx = &self.ctx;
        let mut verdict = verdict::judge_leftovers(verdict, execution.finished.leftovers);
        // A log the trial deleted or replaced holds what the trial chose, or
        // nothing: its output cannot be judged.
        match &execution.log_tampered {
            Some(how) if verdict.status == Status::Passed => {
                verdict = Verdict { status: Status::Failed, reason: format!("{how}, so its output cannot be judged") };
            }
            Some(how) if verdict.status == Status::Failed => {
                let judged =
                    format!("{how}, so its output cannot be judged (judged on what is there: {})", verdict.reason);
                verdict.reason = judged;
            }
            // A timeout or an interruption is the harness's own finding.
            Some(how) => verdict.reason.push_str(&format!("; {how}")),
            None => {}
        }
        if verdict.status == Status::Timeout {
            let (_, key) = spec.timeout_set_by(ctx.config(), manifest.device.enabled);
            verdict.reason.push_str(&format!("; the limit is {key} in {}", ctx.loaded.path.display()));
        }
        if let Some(why) = &execution.finished.no_cgroup
            && crate::exec::cgroup::Mode::from_env() != crate::exec::cgroup::Mode::Off
            && crate::exec::cgroup::available().is_ok()
        {
            crate::warning!("{}: ran without a cgroup of its own: {why}", spec.name);
        }
        if let Some(cut) = output.cut.as_ref().filter(|_| execution.finished.output_cut > 0) {
            crate::warning!("{}: its output was cut: {}", spec.name, cut.trim_start_matches('['));
            if verdict.status != Status::Passed {
                verdict.reason.push_str(" (the log's cap cut part of the output: see logs.max_mib)");
            }
        }
        verdict
    }

    /// The verdict once the trial's coverage is judged: every process's
    /// profile, whole, of this build, and the backend's device records.
    fn judged_coverage(
        &self,
        spec: &TrialSpec,
        manifest: &BuildManifest,
        execution: &trial::Execution,
        merged: &profiles::MergeOutcome,
        output: &TrialOutput,
        verdict: Verdict,
    ) -> Verdict {
        let ctx = &self.ctx;
        let mut verdict = verdict;
        let expected = match spec.launcher(ctx.config()).map(|l| l.kind) {
            Some(LauncherKind::Mpirun | LauncherKind::Srun) => spec.ranks,
            Some(LauncherKind::Direct) | None => 1,
        };
        let quarantined = merged.quarantined();
        let pattern = &ctx.config().coverage.profile_pattern;
        let named_as =
            execution.launch.mark.as_ref().map_or_else(|| pattern.clone(), |m| launch::marked_pattern(pattern, m));
        let foreign: Vec<String> = merged
            .foreign
            .iter()
            .map(|q| q.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            .collect();
        let evidence = verdict::ProfileEvidence {
            writers: merged.writers.complete,
            partial: &merged.writers.partial,
            unmatched: &merged.writers.unmatched,
            foreign: &foreign,
            pattern: &named_as,
            expected,
            dir: &merged.dir,
            merge_error: merged.error.as_deref(),
            quarantined: &quarantined,
            runtime_errors: &output.runtime_errors,
            free_bytes: host::free_bytes(&merged.dir),
        };
        verdict = verdict::judge_coverage(verdict, &evidence);
        // A backend's own device records are judged like host profiles:
        // a process that left none, or an incomplete one, lost its coverage.
        if verdict.status == Status::Passed
            && let Some(lost) = crate::device::coverage_lost(&manifest.device, &merged.dir, expected)
        {
            verdict = Verdict { status: Status::Failed, reason: lost };
        }
        verdict
    }
}

impl Suite {
    /// What stores each trial's lines as its profile is merged; why not, said
    /// once on screen (the report then computes every trial's).
    fn line_store(&self, manifest: &BuildManifest) -> std::result::Result<Arc<LineStore>, String> {
        self.line_store
            .get_or_init(|| {
                let config = self.ctx.config();
                let store = Scope::of_build(config, manifest)
                    .and_then(|scope| LineStore::new(manifest, config.report.measure_programs, scope.rule))
                    .map(Arc::new)
                    .map_err(|e| format!("the build's coverage mapping cannot be read in process: {e}"));
                if let Err(why) = &store {
                    crate::say!("each trial's lines are left to the report: {why}");
                }
                store
            })
            .clone()
    }

    /// Records `spec` as failed, not run, because this run's shared build
    /// failed (or could not be recorded in the workspace) with `message`: the
    /// run's failure must be in `run.json` and JUnit, not only on the screen
    /// (they would keep an earlier run's tally).
    fn record_unbuilt(&self, spec: &TrialSpec, message: &str) {
        let planned = self.planned.get();
        let build_id = planned.map_or("", |m| m.build_id.as_str());
        let result = TrialResult::unrun(spec, self.ctx.config(), build_id, &self.run_id, message);
        let build = RecordedBuild::Failed { planned: planned.cloned(), error: message.to_string() };
        if let Err(e) = self.results.record(&result, build, self.run_info()) {
            crate::say!("{}: cannot record that it did not run: {e}", spec.name);
        }
    }

    /// A failed upstream trial once more, with its `rerun_env_variables`, for
    /// diagnostics (upstream's `--rerun-failed`). Its profiles go to a folder
    /// of their own and are not merged: the verdict is the first attempt's.
    fn rerun(&self, spec: &TrialSpec, manifest: &BuildManifest, slots: &Slots, want: Want) -> Option<Rerun> {
        let ctx = &self.ctx;
        let ws = &ctx.workspace;
        let say = |e: Error| crate::say!("{}: the rerun did not run: {e}", spec.name);
        let run = || -> Result<Option<Rerun>> {
            let _held = slots.acquire(want)?;
            let profile_dir = ws.trial_quarantine(&spec.slug).join("rerun");
            ws.clear(Area::Quarantine, &profile_dir)?;
            ws.clear(Area::Cases, &ws.trial_cases(&spec.slug))?;
            let Some(launch) = launch::prepare_rerun(ctx, manifest, spec, &profile_dir)? else { return Ok(None) };
            crate::say!("{} failed: running it once more with its rerun_env_variables", spec.name);
            let log = ws.trial_rerun_log(&spec.slug);
            let execution = trial::execute(ws, launch, &log, &ctx.supervisor, ctx.heartbeat, &|_| {})?;
            let output = TrialOutput::read(&log);
            let (verdict, cases, _) = judge(ctx, spec, &execution, &output);
            Ok(Some(Rerun::new(&execution, &verdict, cases)))
        };
        run().unwrap_or_else(|e| {
            say(e);
            None
        })
    }
}

/// The verdict of a trial's run by its kind, the test cases it ran, and its
/// perf table (empty unless it is a perf binary). Its own reports are read
/// from `cases/<trial>/` through the workspace's handle: regular files only.
/// Empties what an earlier run of the trial left: its old profiles would be
/// merged with the new ones, an old report read as this run's.
fn clear_trial_folders(ws: &Workspace, slug: &str) -> Result<()> {
    ws.clear(Area::Profiles, &ws.trial_profiles(slug))?;
    ws.remove(Area::Profiles, &profiles::trial_profdata(ws, slug))?;
    ws.remove(Area::Profiles, &trial_lines::stored_path(ws, slug))?;
    ws.clear(Area::Quarantine, &ws.trial_quarantine(slug))?;
    ws.clear(Area::Cases, &ws.trial_cases(slug))?;
    ws.clear(Area::Work, &ws.trial_work(slug))
}

fn judge(
    ctx: &Context,
    spec: &TrialSpec,
    execution: &trial::Execution,
    output: &TrialOutput,
) -> (Verdict, Vec<Case>, PerfReport) {
    let ws = &ctx.workspace;
    let launch = &execution.launch;
    let filter = spec
        .upstream()
        .and_then(|u| u.test.test_filter.as_deref())
        .or_else(|| spec.program(ctx.config()).and_then(|p| p.filter.as_deref()));
    let reports = |ext: &str| -> Vec<String> {
        let Some(dir) = &launch.cases_dir else { return Vec::new() };
        ws.list(dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, kind)| {
                *kind == crate::workspace::confined::EntryKind::File
                    && Path::new(name).extension().is_some_and(|e| e == ext)
            })
            .filter_map(|(name, _)| ws.read_to_string(&dir.join(name)).ok())
            .collect()
    };
    match launch.kind {
        TrialKind::Perf => {
            let perf = output.perf.clone();
            (verdict::judge(&execution.finished, &perf, launch.timeout), Vec::new(), perf)
        }
        TrialKind::Gtest => {
            // Upstream's tests write JSON, a config's gtest programs XML.
            let (json, xml) = (reports("json"), reports("xml"));
            let parsed: Vec<verdict::GtestReport<'_>> = json
                .iter()
                .map(|t| verdict::GtestReport::Json(t))
                .chain(xml.iter().map(|t| verdict::GtestReport::Xml(t)))
                .collect();
            let (mut v, cases) =
                verdict::judge_gtest(&execution.finished, &parsed, &output.gtest, filter, launch.timeout);
            if cases.is_empty()
                && v.status == Status::Failed
                && let (Some(f), Some(program)) = (filter, spec.program(ctx.config()))
            {
                v.reason.push_str(&verdict::gtest_list::hint(ws, &ctx.supervisor, execution, program, f));
            }
            (v, cases, PerfReport::default())
        }
        TrialKind::Ctest => {
            let junit = reports("xml");
            let (v, cases) =
                verdict::judge_ctest(&execution.finished, junit.first().map(String::as_str), filter, launch.timeout);
            (v, cases, PerfReport::default())
        }
        TrialKind::Plain => {
            (verdict::judge_plain(&execution.finished, launch.timeout), Vec::new(), PerfReport::default())
        }
        TrialKind::Pytest => {
            let junit = reports("xml");
            let (v, cases) =
                verdict::judge_pytest(&execution.finished, junit.first().map(String::as_str), launch.timeout);
            (v, cases, PerfReport::default())
        }
    }
}

/// A trial that has not started when the run is interrupted does not start.
fn not_interrupted() -> Result<()> {
    match interrupt::requested() {
        Some(_) => bail!("not run: the run was interrupted by {}", interrupt::describe()),
        None => Ok(()),
    }
}

/// A trial that the run's interruption kept from starting: not run, not a
/// failure, not counted among the trials that ran.
fn interrupted_before_start() -> Option<Outcome> {
    interrupt::requested().map(|_| {
        let cause = format!("the run was interrupted by {}", interrupt::describe());
        Outcome::NotRun { message: format!("not run: {cause}"), cause }
    })
}

fn git_sha(dir: &Path) -> Option<String> {
    crate::exec::process::Cmd::new("git")
        .args(["-C", &dir.display().to_string(), "rev-parse", "HEAD"])
        .read()
        .ok()
        .map(|s| s.trim().to_string())
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(ToString::to_string))
        .unwrap_or_else(|| "(no message)".into())
}
