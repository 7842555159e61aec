//! One report, without libtest: merge what the collectives run left in the
//! workspace, then each step ([`Step`]) writes or checks a part of the
//! report in a staging folder, and [`Session::install`] makes it `report/`
//! once it is whole. The harness (`harness/coverage_report.rs`) runs each
//! step as a libtest trial, as `harness/collectives.rs` does for the suite's
//! trials; a step's error is the crate's [`Error`], which it shows as the
//! trial's failure.
//!
//! The work is shared: the merge, the model, its summary and the per-trial
//! attribution are each made once, by the first step that needs them
//! (`merge.rs`, `model.rs`, `attributed.rs`); `steps.rs` writes the files and
//! `checks.rs` holds the steps that check the report rather than write it.

mod attributed;
mod checks;
mod merge;
mod model;
mod steps;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::exec::interrupt;
use crate::workspace::Area;
use attributed::Attributed;
use merge::{Merge, Merged};
use model::{ModelSummary, ModelText};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// A step of the report, in the order they are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Merge,
    Profiles,
    SummaryJson,
    Json,
    Lcov,
    Cobertura,
    Html,
    Text,
    Markdown,
    Thresholds,
    DeviceCoverage,
    Snapshot,
    Attribution,
    MinimalSuite,
    Diff,
    Baseline,
}

impl Step {
    pub(crate) const ALL: [Step; 16] = [
        Step::Merge,
        Step::Profiles,
        Step::SummaryJson,
        Step::Json,
        Step::Lcov,
        Step::Cobertura,
        Step::Html,
        Step::Text,
        Step::Markdown,
        Step::Thresholds,
        Step::DeviceCoverage,
        Step::Snapshot,
        Step::Attribution,
        Step::MinimalSuite,
        Step::Diff,
        Step::Baseline,
    ];

    /// Where the step is handed to libtest's threads when the report runs
    /// (listed, the steps keep [`Step::ALL`]'s order): attribution, the
    /// longest, right after the merge, so that the other thread writes the
    /// other formats meanwhile instead of both waiting on it at the end.
    pub(crate) fn run_rank(self) -> u8 {
        match self {
            Step::Merge => 0,
            Step::Attribution => 1,
            _ => 2,
        }
    }

    /// The step's name, as the harness lists it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Merge => "report::merge",
            Step::Profiles => "report::profiles",
            Step::SummaryJson => "report::summary_json",
            Step::Json => "report::json",
            Step::Lcov => "report::lcov",
            Step::Cobertura => "report::cobertura",
            Step::Html => "report::html",
            Step::Text => "report::text",
            Step::Markdown => "report::markdown",
            Step::Thresholds => "report::thresholds",
            Step::DeviceCoverage => "report::device_coverage",
            Step::Snapshot => "report::snapshot",
            Step::Attribution => "report::attribution",
            Step::MinimalSuite => "report::minimal_suite",
            Step::Diff => "report::diff",
            Step::Baseline => "report::baseline",
        }
    }

    /// Whether the step checks the report rather than writes it: when one
    /// fails, the report is still whole and replaces the last one.
    fn checks(self) -> bool {
        matches!(
            self,
            Step::Profiles | Step::Thresholds | Step::DeviceCoverage | Step::Snapshot | Step::Diff | Step::Baseline
        )
    }

    /// Why the step has nothing to check, when the settings, the config and
    /// what the workspace holds already say so: it is then ignored when
    /// listed, not only when it runs, because nextest runs each step alone and
    /// shows one ignored at run time as PASS. Forced to run
    /// (`--include-ignored`), it still says so, ignored.
    pub(crate) fn nothing_to_check(self, ctx: &Context, inputs: &Inputs) -> Option<String> {
        if let Some(nothing) = &inputs.nothing {
            return Some(nothing.clone());
        }
        match self {
            Step::Thresholds if !super::any_bar(&ctx.report.bars) => Some(checks::NO_BAR.to_string()),
            Step::Diff if ctx.report.diff_base.is_none() => Some(checks::NO_DIFF_BASE.to_string()),
            Step::Baseline if ctx.report.baseline.is_none() => Some(checks::NO_BASELINE.to_string()),
            Step::Snapshot if !ctx.config().report.snapshot => {
                Some(format!("snapshots are off for config {}", ctx.config().name))
            }
            Step::Snapshot => inputs.no_snapshot.clone(),
            Step::DeviceCoverage => inputs.host_only.clone(),
            _ => None,
        }
    }
}

/// What the workspace already says about the report's inputs, read (never
/// written, no lock) when the steps are listed: under nextest, which lists
/// the steps before it runs each alone, a step ignored only at run time
/// would show as PASS.
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    /// Why there is nothing to report at all: no trial ran, or their build failed.
    pub(crate) nothing: Option<String>,
    /// Why the build has no device coverage to check.
    host_only: Option<String>,
    /// Why the snapshot does not describe these results.
    no_snapshot: Option<String>,
}

impl Inputs {
    pub(crate) fn read(ctx: &Context) -> Inputs {
        let ws = &ctx.workspace;
        if let Some(nothing) = nothing_to_report(ctx) {
            return Inputs { nothing: Some(nothing), ..Inputs::default() };
        }
        let Ok(manifest) = crate::build::cache::BuildManifest::read_in(ws) else { return Inputs::default() };
        let host_only = (!manifest.device.enabled)
            .then(|| format!("does not apply: this build has host-only coverage ({})", manifest.device.reason));
        let planned = crate::plan::names(ctx.config());
        let no_snapshot = crate::results::load_checked(ws, &manifest.build_id, &planned)
            .ok()
            .and_then(|checked| checks::snapshot_skip(ctx.config(), &checked.results));
        Inputs { nothing: None, host_only, no_snapshot }
    }
}

/// Why the report has nothing to report because the trials did not run: none
/// ran in the workspace yet, or the last run's build failed (its trials then
/// failed with the build's error, said there once; a build recorded before
/// it has no results left to report). A workspace whose trials ran but whose
/// build record is missing has no reason here: its report fails, saying so.
pub(super) fn nothing_to_report(ctx: &Context) -> Option<String> {
    let ws = &ctx.workspace;
    let run_json = ws.results_dir().join("run.json");
    let run = ws.read_opt(&run_json).ok().flatten();
    match run.map(|bytes| serde_json::from_slice::<crate::results::RunJson>(&bytes)) {
        None if !ws.build_manifest().exists() => Some(format!(
            "no trial has run in {} yet: run `{}` first, with the same config and workspace",
            ws.root().display(),
            ctx.entry.trials()
        )),
        Some(Ok(run)) if run.build_error.is_some() => Some(format!(
            "the last run's build failed, so none of its trials ran ({} says why, in build_error)",
            run_json.display()
        )),
        _ => None,
    }
}

/// How a step ended, when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Done {
    Completed,
    /// Nothing to do, and why.
    Ignored(String),
}

/// What is made from the merge, once each, whichever step needs it first:
/// steps run as libtest's threads in any order, and nextest runs each alone.
#[derive(Default)]
struct Made {
    /// The merged lcov, absolute paths: the model every total comes from.
    model: OnceLock<Result<ModelText>>,
    summary: OnceLock<Result<ModelSummary>>,
    attributed: OnceLock<Result<Attributed>>,
}

/// One report of one workspace, shared by its steps (threads of one
/// process; nextest runs each step in a process of its own).
pub(crate) struct Session {
    pub(crate) ctx: Context,
    /// Each step that ran and whether it passed, for [`Session::install`].
    outcomes: Mutex<Vec<(Step, bool)>>,
    merged: OnceLock<Result<Merge>>,
    /// What the steps make from the merge and hand each other ([`Self::step`]).
    made: Made,
    /// Set once a step said why the merge failed: the others refer to it,
    /// so one cause is named once, not by every step.
    merge_failure_said: AtomicBool,
    /// `ccl-coverage run`'s report: its last line says which results the
    /// report covers, so the report does not say it too.
    pub(crate) after_run: bool,
}

impl Session {
    pub(crate) fn new(ctx: Context) -> Session {
        Session {
            ctx,
            outcomes: Mutex::new(Vec::new()),
            merged: OnceLock::new(),
            made: Made::default(),
            merge_failure_said: AtomicBool::new(false),
            after_run: false,
        }
    }

    /// Runs `step` on the merged profile, merging first if no step has yet,
    /// and records how it ended. Once the report is stopped, no step starts.
    /// A step that panics (insta's snapshot check does, on a difference) is
    /// recorded as failed, and the panic goes on to the caller.
    pub(crate) fn run(&self, step: Step) -> Result<Done> {
        if let Some(signal) = interrupt::requested() {
            self.record(step, false);
            return Err(Error::new(format!(
                "not run: the report was interrupted by {}",
                crate::exec::process::signal_name(signal)
            )));
        }
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.with_merged(|m| self.step(step, m))));
        self.record(step, outcome.as_ref().is_ok_and(Result::is_ok));
        outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    fn record(&self, step: Step, ok: bool) {
        self.outcomes.lock().unwrap_or_else(PoisonError::into_inner).push((step, ok));
    }

    /// Runs `step`, handing it what it needs: the merge, the model made from
    /// it, the summary made from the model, each trial's coverage made from
    /// both. Each is made once, by the first step that needs it, and passed on.
    fn step(&self, step: Step, merged: &Merged) -> Result<Done> {
        if let Some(why) = self.does_not_apply(step, merged) {
            return Ok(Done::Ignored(why));
        }
        let completed = |r: Result<()>| r.map(|()| Done::Completed);
        let model = || self.model(merged);
        let summary = || self.summary(merged, model()?);
        let attributed = || self.attributed(merged, model()?, summary()?);
        match step {
            Step::Merge => Ok(Done::Completed),
            Step::Profiles => self.health(merged),
            Step::SummaryJson => summary().map(|_| Done::Completed),
            Step::Json => completed(self.json(merged, model()?)),
            Step::Lcov => model().map(|_| Done::Completed),
            Step::Cobertura => completed(self.cobertura(merged, model()?)),
            Step::Html => completed(self.html(merged, summary()?)),
            Step::Text => completed(self.text(merged, summary()?)),
            Step::Markdown => completed(self.markdown(merged, summary()?, attributed())),
            Step::Thresholds => self.thresholds(merged, summary()?),
            Step::DeviceCoverage => self.device_check(merged, summary()?),
            Step::Snapshot => self.snapshot(merged, summary()?),
            Step::Attribution => completed(self.attribution_files(merged, attributed()?)),
            Step::MinimalSuite => completed(self.minimal_suite(merged, attributed()?)),
            Step::Diff => self.diff(merged, attributed()?),
            Step::Baseline => self.baseline(merged, attributed()?),
        }
    }

    fn with_merged(&self, step: impl FnOnce(&Merged) -> Result<Done>) -> Result<Done> {
        match self.merged.get_or_init(|| self.merge()) {
            Ok(Merge::Off(reason)) => Ok(Done::Ignored(reason.clone())),
            Ok(Merge::Done(merged)) => step(merged),
            Err(e) if !self.merge_failure_said.swap(true, Ordering::SeqCst) => {
                Err(e.clone().context("merging profiles failed"))
            }
            Err(_) => Err(Error::new(
                "not run: merging the profiles failed (the cause is named once, by the first step that failed)",
            )),
        }
    }

    /// Where the steps write: the staging folder, which becomes `report/`
    /// once the report is whole ([`Self::install`]).
    fn report_dir(&self) -> PathBuf {
        // One folder per process: nextest runs each step as a process of its own.
        self.ctx.workspace.area(Area::ReportStaging).join(std::process::id().to_string())
    }

    /// `path` inside the staged report, as it will be named once installed.
    fn shown(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(self.report_dir()) {
            Ok(rest) => self.ctx.workspace.report_dir().join(rest),
            Err(_) => path.to_path_buf(),
        }
    }

    /// The totals, the least-covered files and the installed report's pages,
    /// on the terminal (stderr: stdout is libtest's, `--format json` too).
    fn print_result(&self) {
        if crate::reporter::terminal().verbosity == crate::reporter::Verbosity::Quiet {
            return;
        }
        let (Some(Ok(Merge::Done(merged))), Some(Ok(summary))) = (self.merged.get(), self.made.summary.get()) else {
            return;
        };
        let m = &merged.manifest;
        let device = summary.device.as_ref().map(|totals| {
            let what = match &merged.device_lines {
                Some(lines) => lines.origin.short,
                None => "the device code objects",
            };
            (what, totals)
        });
        let report = self.ctx.workspace.report_dir();
        let pages: Vec<String> = [
            "html/index.html",
            "attribution/index.html",
            "coverage.lcov",
            "cobertura.xml",
            "summary.md",
            "minimal-suite.json",
            "diff.md",
            "baseline.md",
        ]
        .iter()
        .map(|p| report.join(p))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        crate::reporter::emit(crate::reporter::Event::Block(&super::screen::table(
            &summary.all,
            &summary.host,
            device,
            &roots,
            &pages,
        )));
        if let Some(changed) = &merged.health.sources_changed {
            crate::warning!("this report is not of the sources as they are now: {changed}");
        }
    }

    /// Makes the staged report the report, unless a step that writes it
    /// failed: then the last good report stays whole (a full disk must not
    /// cost it), and the incomplete one is deleted. With no report before
    /// it, the incomplete one is installed, said to be incomplete. When only
    /// some steps ran (a step filter, or nextest's one process per step),
    /// only what they wrote replaces its old version; the rest stays.
    /// Whether this report was installed with every writing step passed
    /// (a failed check still installs it): what may be handed over.
    pub(crate) fn install(&self) -> Result<bool> {
        let ws = &self.ctx.workspace;
        let staged = self.report_dir();
        let report = ws.report_dir();
        let discard = || ws.remove(Area::ReportStaging, &staged).map(drop);
        match self.merged.get() {
            None | Some(Ok(Merge::Off(_))) => return Ok(false),
            Some(Ok(Merge::Done(_))) => {}
            Some(Err(_)) => {
                // Nothing of this attempt can be trusted, nor installed.
                discard()?;
                if report.is_dir() {
                    crate::say!(
                        "merging the profiles failed: the last good report, {}, is kept whole",
                        report.display()
                    );
                }
                return Ok(false);
            }
        }
        if interrupt::requested().is_some() {
            discard()?;
            let kept = if report.is_dir() {
                format!("the last good report, {}, is kept whole", report.display())
            } else {
                "there is no report yet".to_string()
            };
            crate::say!("interrupted by {}: the new report was not installed; {kept}", interrupt::describe());
            return Ok(false);
        }
        let outcomes = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        let failed: Vec<&str> =
            outcomes.iter().filter(|(step, ok)| !ok && !step.checks()).map(|(step, _)| step.name()).collect();
        let writers = Step::ALL.into_iter().filter(|s| !s.checks());
        let every_writer_ran = writers.clone().all(|w| outcomes.iter().any(|(s, _)| *s == w));
        if failed.is_empty() {
            if every_writer_ran {
                ws.install_report(&staged)?;
            } else {
                ws.install_report_entries(&staged)?;
                discard()?;
            }
            // nextest runs each step in a process of its own: the one that
            // made the totals prints them, once.
            let nextest = std::env::var_os(crate::env_names::NEXTEST_RUN_ID).is_some_and(|v| !v.is_empty());
            if !nextest || outcomes.iter().any(|(step, _)| *step == Step::SummaryJson) {
                self.print_result();
            }
            return Ok(true);
        }
        let what = failed.join(", ");
        if report.is_dir() {
            discard()?;
            crate::say!(
                "the new report is incomplete ({what} failed), so it was not installed: the last good report, {}, is kept whole",
                report.display()
            );
        } else {
            ws.install_report(&staged)?;
            crate::say!("the report in {} is incomplete: {what} failed", report.display());
        }
        Ok(false)
    }

    /// What `report.path_prefix` takes off the file names of the lcov and
    /// JSON reports: by default the library's sources.
    fn path_prefix(&self, merged: &Merged) -> String {
        match &self.ctx.config().report.path_prefix {
            Some(p) if p.is_empty() => String::new(),
            Some(p) => self.ctx.loaded.resolve(p).display().to_string(),
            None => merged.manifest.library_src.display().to_string(),
        }
    }
}
