//! `cargo test --test coverage_report`: merge what the collectives run left in
//! the workspace and write the reports, one trial per step so that a failure
//! names its step. It never runs a trial and never deletes a profile
//! (report-only); it replaces `report/` as a whole, so no stale report
//! survives next to a new one, and every report says which build and runs it
//! came from.

use crate::build::fixture::BuildManifest;
use crate::config::process_env;
use crate::context::Context;
use crate::coverage::device_lines::{self, DeviceLines};
use crate::coverage::ignore::IgnoreRule;
use crate::coverage::lcov::{self, Lcov};
use crate::coverage::llvm_export::SummaryExport;
use crate::coverage::mapping::{self, CounterReader, Mapping};
use crate::coverage::profiles;
use crate::error::Error;
use crate::exec::interrupt;
use crate::plan;
use crate::report::attribution::{self, Attribution, Covered, TrialCoverage, TrialSummary};
use crate::report::attribution_pages;
use crate::report::diff_coverage;
use crate::report::minimal_suite;
use crate::report::{self, Health, ReportInputs, ReportMeta};
use crate::results::{self, TrialResult};
use crate::workspace::{self, Area};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

struct Shared {
    ctx: Context,
    /// Each step that ran and whether it passed, for [`Shared::install`].
    outcomes: Mutex<Vec<(&'static str, bool)>>,
    /// The steps that write the report (not [`CHECKS`]).
    writers: Vec<&'static str>,
    merged: OnceLock<Result<Merge, Error>>,
    summary: OnceLock<Result<Summary, Error>>,
    /// The merged lcov, absolute paths: the model every later step reads.
    lcov: OnceLock<Result<ModelText, Error>>,
    attributed: OnceLock<Result<Attributed, Error>>,
    /// Set once a step said why the merge failed: the others refer to it,
    /// so one cause is named once, not by every step.
    merge_failure_said: std::sync::atomic::AtomicBool,
}

/// The merged report's lcov and each trial's coverage on its own.
struct Attributed {
    all: Lcov,
    trials: Vec<TrialCoverage>,
    summaries: Vec<TrialSummary>,
}

/// The model: the merged lcov as text (host records with NVIDIA's kernel
/// lines folded in, one record per file) and parsed.
struct ModelText {
    text: String,
    /// The host records alone, when kernel lines were folded into `text`.
    host: Option<String>,
    model: Lcov,
}

enum Merge {
    /// The build was not instrumented: every step is ignored with this reason.
    Off(String),
    Done(Box<Merged>),
}

/// The merged profile and what it was made from.
struct Merged {
    manifest: BuildManifest,
    results: Vec<TrialResult>,
    inputs: ReportInputs,
    health: Health,
    /// Device lines from a source of their own (NVIDIA's kernel records).
    device_lines: Option<DeviceLines>,
}

/// The model's summary over all objects (`summary.json`), and the host and
/// device totals when there is device code.
struct Summary {
    all: SummaryExport,
    host: Value,
    device: Option<Value>,
}

type Step = fn(&Shared, &Merged) -> Result<Completion, Failed>;

pub fn main() -> ExitCode {
    if let Some(code) = crate::exec::supervisor::run_if_requested() {
        return code;
    }
    main_with(Arguments::from_args())
}

pub fn main_with(mut args: Arguments) -> ExitCode {
    let ctx = match super::load_context() {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    let steps: [(&str, Step); 16] = [
        ("report::merge", |_, _| Ok(Completion::Completed)),
        ("report::profiles", Shared::health),
        ("report::summary_json", |s, _| s.summary().map(|_| Completion::Completed)),
        ("report::json", |s, m| done(s.json(m))),
        ("report::lcov", |s, m| s.lcov(m).map(|_| Completion::Completed)),
        ("report::cobertura", |s, m| done(s.cobertura(m))),
        ("report::html", |s, m| done(s.html(m))),
        ("report::text", |s, m| done(s.text(m))),
        ("report::markdown", |s, m| done(s.markdown(m))),
        ("report::thresholds", Shared::thresholds),
        ("report::device_coverage", Shared::device_check),
        ("report::snapshot", Shared::snapshot),
        ("report::attribution", |s, m| done(s.attribution_files(m))),
        ("report::minimal_suite", |s, m| done(s.minimal_suite(m))),
        ("report::diff", Shared::diff),
        ("report::baseline", Shared::baseline),
    ];
    drop_trial_filter(&mut args, &steps.map(|(name, _)| name));
    interrupt::stop_commands_too();
    // Listing reads nothing and writes nothing: no lock, no workspace.
    let _lock = if args.list {
        None
    } else {
        match super::take_workspace(&ctx, super::Access::Report) {
            Ok(lock) => Some(lock),
            Err(code) => return code,
        }
    };
    let shared = Arc::new(Shared {
        ctx,
        outcomes: Mutex::new(Vec::new()),
        writers: steps.iter().map(|(name, _)| *name).filter(|n| !CHECKS.contains(n)).collect(),
        merged: OnceLock::new(),
        summary: OnceLock::new(),
        lcov: OnceLock::new(),
        attributed: OnceLock::new(),
        merge_failure_said: std::sync::atomic::AtomicBool::new(false),
    });
    let trials = steps
        .into_iter()
        .map(|(name, step)| {
            let nothing = nothing_to_check(name, &shared.ctx);
            let shared = shared.clone();
            let trial = Trial::ignorable_test(name, move || {
                // Stopped: no step starts, and the report is not installed.
                if let Some(signal) = interrupt::requested() {
                    shared.outcomes.lock().unwrap_or_else(PoisonError::into_inner).push((name, false));
                    return Err(Failed::from(format!(
                        "not run: the report was interrupted by {}",
                        crate::exec::process::signal_name(signal)
                    )));
                }
                // A step that panics (libtest-mimic catches it) has failed too.
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.with_merged(|m| step(&shared, m))));
                let ok = outcome.as_ref().is_ok_and(Result::is_ok);
                shared.outcomes.lock().unwrap_or_else(PoisonError::into_inner).push((name, ok));
                outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .with_ignored_flag(nothing.is_some());
            let skipped = !args.list && !args.is_filtered_out(&trial) && args.is_ignored(&trial);
            if let Some(why) = nothing.filter(|_| skipped) {
                eprintln!("ccl-coverage: {name} is ignored: {why}");
            }
            trial
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    match shared.install() {
        Err(e) => {
            eprintln!("ccl-coverage: {e}");
            ExitCode::FAILURE
        }
        Ok(()) => interrupt::exit_code().map_or_else(|| conclusion.exit_code(), ExitCode::from),
    }
}

/// `cargo coverage -- AllReduce::1K` passes its trial filter to this binary
/// too: a filter that names no step is dropped, so that every step runs on
/// whatever trials ran; one that names steps (`report::html`) selects them.
fn drop_trial_filter(args: &mut Arguments, steps: &[&str]) {
    let Some(filter) = args.filter.as_deref() else { return };
    let named = |step: &&str| if args.exact { *step == filter } else { step.contains(filter) };
    if !steps.iter().any(named) {
        eprintln!("ccl-coverage: the filter {filter:?} names no report step (a trial filter?): every report step runs");
        args.filter = None;
    }
}

const NO_BAR: &str = "no CCL_COV_FAIL_UNDER_* bar is set";
const NO_DIFF_BASE: &str = "CCL_COV_DIFF_BASE is not set (give a git revision of the library's sources)";
const NO_BASELINE: &str = "CCL_COV_BASELINE is not set (give an earlier workspace or its report/coverage.lcov)";

/// Why `step` has nothing to check, when the environment and the config
/// already say so: it is then ignored when listed, not only when it runs,
/// because nextest runs each step alone and shows one ignored at run time
/// as PASS. Forced to run (`--include-ignored`), it still says so, ignored.
fn nothing_to_check(step: &str, ctx: &Context) -> Option<String> {
    match step {
        "report::thresholds" if !report::any_bar(&process_env) => Some(NO_BAR.to_string()),
        "report::diff" if set("CCL_COV_DIFF_BASE").is_none() => Some(NO_DIFF_BASE.to_string()),
        "report::baseline" if set("CCL_COV_BASELINE").is_none() => Some(NO_BASELINE.to_string()),
        "report::snapshot" if !ctx.config().report.snapshot => {
            Some(format!("snapshots are off for config {}", ctx.config().name))
        }
        _ => None,
    }
}

/// A variable's value, unless it is unset or empty.
fn set(name: &str) -> Option<String> {
    process_env(name).filter(|v| !v.is_empty())
}

/// Steps that check the report rather than write it: when one fails, the
/// report is still whole and replaces the last one.
const CHECKS: [&str; 6] = [
    "report::profiles",
    "report::thresholds",
    "report::device_coverage",
    "report::snapshot",
    "report::diff",
    "report::baseline",
];

fn done(step: Result<(), Failed>) -> Result<Completion, Failed> {
    step.map(|()| Completion::Completed)
}

fn failed(step: &str, e: &Error) -> Failed {
    Failed::from(format!("{step} failed: {e}"))
}

impl Shared {
    /// Runs `step` on the merged profile, merging first if no step has yet.
    fn with_merged(&self, step: impl FnOnce(&Merged) -> Result<Completion, Failed>) -> Result<Completion, Failed> {
        match self.merged.get_or_init(|| self.merge()) {
            Ok(Merge::Off(reason)) => Ok(Completion::ignored_with(reason)),
            Ok(Merge::Done(merged)) => step(merged),
            Err(e) if !self.merge_failure_said.swap(true, std::sync::atomic::Ordering::SeqCst) => {
                Err(failed("merging profiles", e))
            }
            Err(_) => Err(Failed::from(
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

    /// The totals, the least-covered files and the installed report's pages,
    /// on the terminal (stderr: stdout is libtest's, `--format json` too).
    fn print_result(&self) {
        let (Some(Ok(Merge::Done(merged))), Some(Ok(summary))) = (self.merged.get(), self.summary.get()) else {
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
        ]
        .iter()
        .map(|p| report.join(p))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        eprint!("{}", report::screen::table(&summary.all, &summary.host, device, &roots, &pages));
        if let Some(changed) = &merged.health.sources_changed {
            eprintln!("ccl-coverage: warning: this report is not of the sources as they are now: {changed}");
        }
    }

    /// `path` inside the staged report, as it will be named once installed.
    fn shown(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(self.report_dir()) {
            Ok(rest) => self.ctx.workspace.report_dir().join(rest),
            Err(_) => path.to_path_buf(),
        }
    }

    /// Makes the staged report the report, unless a step that writes it
    /// failed: then the last good report stays whole (a full disk must not
    /// cost it), and the incomplete one is deleted. With no report before
    /// it, the incomplete one is installed, said to be incomplete. When only
    /// some steps ran (a step filter, or nextest's one process per step),
    /// only what they wrote replaces its old version; the rest stays.
    fn install(&self) -> Result<(), Error> {
        let ws = &self.ctx.workspace;
        let staged = self.report_dir();
        let report = ws.report_dir();
        let discard = || -> Result<(), Error> {
            ws.remove(Area::ReportStaging, &staged)?;
            Ok(())
        };
        match self.merged.get() {
            None | Some(Ok(Merge::Off(_))) => return Ok(()),
            Some(Ok(Merge::Done(_))) => {}
            Some(Err(_)) => {
                // Nothing of this attempt can be trusted, nor installed.
                discard()?;
                if report.is_dir() {
                    eprintln!(
                        "ccl-coverage: merging the profiles failed: the last good report, {}, is kept whole",
                        report.display()
                    );
                }
                return Ok(());
            }
        }
        if interrupt::requested().is_some() {
            discard()?;
            let kept = if report.is_dir() {
                format!("the last good report, {}, is kept whole", report.display())
            } else {
                "there is no report yet".to_string()
            };
            eprintln!(
                "ccl-coverage: interrupted by {}: the new report was not installed; {kept}",
                interrupt::describe()
            );
            return Ok(());
        }
        let outcomes = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        let failed: Vec<&str> =
            outcomes.iter().filter(|(name, ok)| !ok && !CHECKS.contains(name)).map(|(name, _)| *name).collect();
        let every_writer_ran = self.writers.iter().all(|w| outcomes.iter().any(|(n, _)| n == w));
        if failed.is_empty() {
            if every_writer_ran {
                ws.install_report(&staged)?;
            } else {
                ws.install_report_entries(&staged)?;
                discard()?;
            }
            self.print_result();
            return Ok(());
        }
        let what = failed.join(", ");
        if report.is_dir() {
            discard()?;
            eprintln!(
                "ccl-coverage: the new report is incomplete ({what} failed), so it was not installed: the last good report, {}, is kept whole",
                report.display()
            );
        } else {
            ws.install_report(&staged)?;
            eprintln!("ccl-coverage: the report in {} is incomplete: {what} failed", report.display());
        }
        Ok(())
    }

    fn merge(&self) -> Result<Merge, Error> {
        let ws = &self.ctx.workspace;
        let manifest = BuildManifest::read_in(ws).map_err(|e| {
            Error::new(format!(
                "no build recorded in {} ({e}); run `cargo test --test collectives` first, with the same CCL_COV_CONFIG and CCL_COV_WORKSPACE",
                ws.root().display()
            ))
        })?;
        if !manifest.coverage {
            return Ok(Merge::Off(format!(
                "build {} was made without coverage (CCL_COV_COVERAGE=off): there is nothing to report",
                manifest.build_id
            )));
        }
        // llvm-cov would read a damaged object as `malformed coverage data`, in every step.
        let damaged = manifest.damaged_objects();
        if !damaged.is_empty() {
            return Err(Error::new(format!(
                "build {}'s objects are damaged, so no report is made from them: {}; run `cargo test --test collectives` again (it rebuilds a damaged cached build), then the report",
                manifest.build_id,
                damaged.join("; ")
            )));
        }
        let sources_changed = crate::build::fixture::sources_changed(&manifest, self.ctx.config());
        if let Some(changed) = &sources_changed {
            eprintln!("ccl-coverage: warning: {changed}");
        }
        let loaded = results::load_checked(ws, &manifest.build_id, &plan::names(self.ctx.config()))?;
        let (results, damaged) = (loaded.results, loaded.damaged);
        if !loaded.other_builds.is_empty() {
            let named: Vec<String> =
                loaded.other_builds.iter().map(|(file, id)| format!("{} (build {id})", file.display())).collect();
            eprintln!(
                "ccl-coverage: {} records in {} are of another build than {}, and are not counted: {}",
                named.len(),
                ws.results_dir().display(),
                manifest.build_id,
                named.join(", ")
            );
        }
        // A damaged record goes to quarantine, named; its trial is left out.
        let mut damaged_results = Vec::new();
        for (file, why) in damaged {
            let slug = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let to = ws.quarantine_result(&slug, &file)?;
            eprintln!("ccl-coverage: {} is not a trial result ({why}); moved to {}", file.display(), to.display());
            damaged_results.push(format!("{} ({why}), now {}", file.display(), to.display()));
        }
        let recorded: Vec<_> = results.iter().map(TrialResult::recorded_profiles).collect();
        let verified = profiles::verified_inputs(ws, &recorded)?;
        let inputs = verified.inputs;
        if inputs.is_empty() && (!verified.quarantined.is_empty() || !verified.missing.is_empty()) {
            let mut named: Vec<String> =
                verified.quarantined.iter().map(|q| format!("{}: {}", q.file.display(), q.reason)).collect();
            named.extend(verified.missing.iter().cloned());
            return Err(Error::new(format!(
                "no usable profile for build {}: all {} of its trials' profiles are damaged or gone (the damaged ones were moved to quarantine):\n    {}",
                manifest.build_id,
                named.len(),
                named.join("\n    ")
            )));
        }
        if inputs.is_empty() {
            return Err(Error::new(format!(
                "no profiles for build {} under {}; run `cargo test --test collectives` first",
                manifest.build_id,
                ws.area(Area::Profiles).display()
            )));
        }
        // Checked before anything is written: the report is installed there.
        ws.check_area(Area::Report)?;
        // What a killed report process left staged is of no use.
        for (name, _) in ws.list(&ws.area(Area::ReportStaging))? {
            let pid = name.to_str().and_then(|n| n.parse::<u32>().ok());
            if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                ws.remove(Area::ReportStaging, &ws.area(Area::ReportStaging).join(name))?;
            }
        }
        let report_dir = self.report_dir();
        ws.clear(Area::ReportStaging, &report_dir)?;
        let profdata = report_dir.join("coverage.profdata");
        let quarantine_for = |input: &Path| {
            let slug =
                input.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            ws.trial_quarantine(&slug)
        };
        let (merged_inputs, quarantined_now) = profiles::merge_checked(
            ws,
            &manifest.toolchain,
            &inputs,
            &report_dir.join("profiles.list"),
            &profdata,
            &quarantine_for,
        )?;
        if merged_inputs == 0 {
            return Err(Error::new(format!(
                "none of the {} profiles could be read; they are in {}",
                inputs.len(),
                ws.area(Area::Quarantine).display()
            )));
        }
        let mut quarantined = quarantined_now;
        quarantined.extend(verified.quarantined);
        let mut missing = verified.missing;
        let recorded: Vec<_> = results.iter().map(|r| (r.trial.as_str(), r.slug.as_str(), &r.device_sha256)).collect();
        // The host report's rule, and no test program's own kernels.
        let ignore = IgnoreRule::new(&self.ctx.config().report.ignore_filename_regex)?;
        let tests = manifest.tests_src.display().to_string();
        let keep = |file: &str| ignore.keeps(file) && !file.starts_with(&tests);
        let device_lines = match crate::coverage::device_lines(ws, &manifest, &recorded, &keep)? {
            Some((lines, checked)) => {
                quarantined.extend(checked.quarantined);
                missing.extend(checked.missing);
                Some(lines)
            }
            None => None,
        };
        if let Some(mixed) = results::Runs::of(&results).mixed() {
            eprintln!(
                "ccl-coverage: not one run: {mixed}. Their coverage is counted (it is this build's); run every trial for a report of one run"
            );
        }
        let mut health = Health::new(&results, quarantined, missing);
        health.damaged_results = damaged_results;
        health.sources_changed = sources_changed;
        let meta = ReportMeta::new(&manifest, &results, merged_inputs, &health);
        self.ctx.workspace.write(
            &report_dir.join("meta.json"),
            serde_json::to_string_pretty(&meta).expect("meta serializes").as_bytes(),
        )?;
        let config = self.ctx.config();
        let title = format!("ccl-coverage: {} (build {})", config.name, manifest.build_id);
        let inputs = ReportInputs::new(&manifest, profdata, ignore, title)?;
        Ok(Merge::Done(Box::new(Merged { manifest, results, inputs, health, device_lines })))
    }

    /// Fails when profiles had to be quarantined or a trial that passed left
    /// none; the reports above are written from the good data either way.
    fn health(&self, merged: &Merged) -> Result<Completion, Failed> {
        for line in &merged.health.no_coverage {
            eprintln!("ccl-coverage: no coverage from this trial: {line}");
        }
        match merged.health.problems() {
            None => Ok(Completion::Completed),
            Some(problems) => Err(Failed::from(problems)),
        }
    }

    fn summary(&self) -> Result<&Summary, Failed> {
        let Some(Ok(Merge::Done(merged))) = self.merged.get() else {
            return Err(Failed::from("the summary needs a merged profile"));
        };
        let model = self.model(merged)?;
        self.summary
            .get_or_init(|| {
                let dir = self.report_dir();
                let (text, all) = merged.inputs.model_summary(&model.model)?;
                self.ctx.workspace.write(&dir.join("summary.json"), text.as_bytes())?;
                let m = &merged.manifest;
                if let Some(lines) = &merged.device_lines {
                    let device = device_totals(&lines.all);
                    let summary = json!({
                        "source": lines.origin.id,
                        "totals": device,
                        "not_counted": lines.not_counted,
                        "beyond_max_launches": lines.beyond_max_launches,
                    });
                    self.ctx.workspace.write(
                        &dir.join("summary-device.json"),
                        serde_json::to_string_pretty(&summary).expect("totals serialize").as_bytes(),
                    )?;
                    let host = lcov::parse_lcov(model.host.as_deref().unwrap_or(&model.text), "the host lcov")?;
                    let host = merged.inputs.model_summary(&host)?.1;
                    return Ok(Summary { host: report::totals(&host), all, device: Some(device) });
                }
                if m.device_objects.is_empty() {
                    return Ok(Summary { host: report::totals(&all), all, device: None });
                }
                let host = merged
                    .inputs
                    .with_objects(m.instrumented_objects())
                    .summary_json(&self.ctx.workspace, &dir.join("summary-host.json"))?;
                let device = merged
                    .inputs
                    .with_objects(m.llvm_device_objects())
                    .summary_json(&self.ctx.workspace, &dir.join("summary-device.json"))?;
                Ok(Summary { host: report::totals(&host), device: Some(report::totals(&device)), all })
            })
            .as_ref()
            .map_err(|e| failed("the model's summary (llvm-cov export -summary-only)", e))
    }

    /// `coverage.json`: llvm-cov's full export with the model's summaries.
    fn json(&self, merged: &Merged) -> Result<(), Failed> {
        let model = self.model(merged)?;
        let text = merged.inputs.json(&model.model).map_err(|e| failed("llvm-cov export -format=text", &e))?;
        let text = report::relative_json(&text, &self.path_prefix(merged));
        self.ctx
            .workspace
            .write(&self.report_dir().join("coverage.json"), text.as_bytes())
            .map_err(|e| failed("writing coverage.json", &e))
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

    /// The merged lcov's text (absolute paths).
    fn lcov(&self, merged: &Merged) -> Result<&str, Failed> {
        self.model(merged).map(|m| m.text.as_str())
    }

    /// The model: llvm-cov's lcov export, its per-record totals recounted
    /// from its records, and NVIDIA's kernel lines; `coverage.lcov` gets it
    /// with the path prefix taken off.
    fn model(&self, merged: &Merged) -> Result<&ModelText, Failed> {
        let out = self.report_dir().join("coverage.lcov");
        self.lcov
            .get_or_init(|| {
                let host = lcov::recount(&merged.inputs.lcov_text()?, "llvm-cov export -format=lcov")?;
                // Device lines of a host file join its record: one record per file.
                let (text, host) = match &merged.device_lines {
                    Some(lines) => {
                        let folded = lcov::fold_in(&host, &device_lines::to_lcov(&lines.all), lines.origin.short)?;
                        (lcov::recount(&folded, "the merged lcov")?, Some(host))
                    }
                    None => (host, None),
                };
                let model = lcov::parse_lcov(&text, "the merged lcov")?;
                merged.inputs.ignore.check_kept(model.files.keys().map(String::as_str))?;
                let prefix = self.path_prefix(merged);
                self.ctx.workspace.write(&out, report::relative_lcov(&text, &prefix).as_bytes())?;
                // The kernel lines alone, for checking them against NVIDIA's own tools.
                if let Some(lines) = &merged.device_lines {
                    let device = report::relative_lcov(&device_lines::to_lcov(&lines.all), &prefix);
                    self.ctx.workspace.write(&self.report_dir().join("device.lcov"), device.as_bytes())?;
                }
                Ok(ModelText { text, host, model })
            })
            .as_ref()
            .map_err(|e| failed("the model (llvm-cov export -format=lcov)", e))
    }

    fn cobertura(&self, merged: &Merged) -> Result<(), Failed> {
        let lcov = self.lcov(merged)?;
        report::cobertura(
            &self.ctx.workspace,
            lcov,
            &merged.manifest.library_src,
            &self.report_dir().join("cobertura.xml"),
        )
        .map_err(|e| failed("Cobertura conversion", &e))
    }

    fn html(&self, merged: &Merged) -> Result<(), Failed> {
        let dir = self.report_dir().join("html");
        self.ctx.workspace.clear_for_tool(&dir).map_err(|e| failed("preparing html/", &e))?;
        let shown = merged.inputs.html(&dir).map_err(|e| failed("llvm-cov show -format=html", &e));
        let device = match (&shown, &merged.device_lines) {
            (Ok(_), Some(lines)) => {
                let title = format!("ccl-coverage: {} (build {})", self.ctx.config().name, merged.manifest.build_id);
                Some(report::device_pages::write(&self.ctx.workspace, &dir.join("device"), &title, lines))
            }
            _ => None,
        };
        // llvm-cov makes its folders with modes of its own, also when it fails.
        if dir.exists() {
            (self.ctx.workspace.beneath().and_then(|b| b.set_modes(&dir)))
                .map_err(|e| failed("setting the report's modes", &e))?;
        }
        let index = shown?;
        // llvm-cov's index gives its own totals: the model's replaces it.
        let summary = self.summary()?;
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        let title = &merged.inputs.title;
        let created = crate::exec::host::now();
        let page = |file: &str| {
            let href = format!("coverage{file}.html");
            dir.join(&href).is_file().then_some(href)
        };
        let html = report::html_index::index(
            &summary.all,
            &report::html_index::Index {
                title,
                created: &created,
                shown: &|f| report::relative(f, &roots),
                page: &page,
            },
        );
        let html = match &merged.health.sources_changed {
            Some(changed) => with_warning(&html, &format!("Sources changed after the build: {changed}.")),
            None => html,
        };
        self.ctx.workspace.write(&index, html.as_bytes()).map_err(|e| failed("writing the index", &e))?;
        attribution_pages::link_from_llvm_cov_index(&self.ctx.workspace, &index)
            .map_err(|e| failed("linking the attribution pages", &e))?;
        if let Some(device) = device {
            let device = device.map_err(|e| failed("writing the device pages", &e))?;
            eprintln!("ccl-coverage: device HTML report: {}", self.shown(&device).display());
        }
        eprintln!("ccl-coverage: HTML report: {}", self.shown(&index).display());
        Ok(())
    }

    /// `summary.txt`: the model's totals per file, as `llvm-cov report` lays them out.
    fn text(&self, merged: &Merged) -> Result<(), Failed> {
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        let mut text = report::summary_text(&self.summary()?.all, &roots);
        if let Some(changed) = &merged.health.sources_changed {
            text = format!("warning: {changed}\n\n{text}");
        }
        self.ctx
            .workspace
            .write(&self.report_dir().join("summary.txt"), text.as_bytes())
            .map_err(|e| failed("writing summary.txt", &e))
    }

    /// `report/summary.md`, also appended to `$GITHUB_STEP_SUMMARY` when set.
    fn markdown(&self, merged: &Merged) -> Result<(), Failed> {
        let summary = self.summary()?;
        let mut md =
            report::markdown(&self.ctx.config().name, &merged.manifest, &summary.all, &merged.results, &merged.health);
        if let Some(lines) = &merged.device_lines {
            let ((lh, lf), (fh, ff)) = lines.all.totals();
            md.push_str(&format!(
                "\n{}: lines {lh}/{lf} ({:.2}%), kernels {fh}/{ff} ({:.2}%)\n",
                lines.origin.name,
                report::percent(lh, lf),
                report::percent(fh, ff)
            ));
            if !lines.not_counted.is_empty() {
                let launches: u64 = lines.not_counted.values().sum();
                md.push_str(&format!(
                    "\nNot counted (not the library's kernels, or launches past `coverage.device.max_launches`): {} kernels, {launches} launches; `summary-device.json` names them.\n",
                    lines.not_counted.len()
                ));
            }
        }
        match self.attributed(merged) {
            Ok(a) => md.push_str(&attribution::markdown(&a.summaries)),
            Err(e) => md.push_str(&format!(
                "\nPer-trial attribution is not available: {}\n",
                e.message().unwrap_or("see report::attribution")
            )),
        }
        let out = self.report_dir().join("summary.md");
        self.ctx.workspace.write(&out, md.as_bytes()).map_err(|e| failed("writing summary.md", &e))?;
        if let Some(step_summary) = process_env("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
            use std::io::Write;
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&step_summary)
                .and_then(|mut f| f.write_all(md.as_bytes()))
                .map_err(|e| Failed::from(format!("cannot append to GITHUB_STEP_SUMMARY={step_summary}: {e}")))?;
        }
        Ok(())
    }

    /// `CCL_COV_FAIL_UNDER_LINES|FUNCTIONS|REGIONS|BRANCHES`, in percent.
    fn thresholds(&self, _merged: &Merged) -> Result<Completion, Failed> {
        let summary = self.summary()?;
        match report::check_bars(&summary.all, &process_env).map_err(|e| failed("reading the bars", &e))? {
            None => Ok(Completion::ignored_with(NO_BAR)),
            Some(short) if short.is_empty() => Ok(Completion::Completed),
            Some(short) => Err(Failed::from(format!("coverage is under the bar: {}", short.join("; ")))),
        }
    }

    /// With device coverage on, some device function must have run;
    /// otherwise the check does not apply and says why.
    fn device_check(&self, merged: &Merged) -> Result<Completion, Failed> {
        let device = &merged.manifest.device;
        if !device.enabled {
            return Ok(Completion::ignored_with(format!(
                "does not apply: this build has host-only coverage ({})",
                device.reason
            )));
        }
        let summary = self.summary()?;
        let totals = summary
            .device
            .as_ref()
            .ok_or_else(|| Failed::from("device coverage is on but the build recorded no device code object"))?;
        let functions = totals["functions"].as_str().unwrap_or("0/0");
        if let Some(lines) = &merged.device_lines
            && !lines.uncounted_library.is_empty()
        {
            return Err(Failed::from(format!(
                "kernels of the library were launched and not counted: {}. The build's kernel list ({}) does not name them as CUPTI does; set coverage.device.kernels to \"all\" and report the names",
                lines.uncounted_library.join(", "),
                crate::device::counted_kernels_file(&merged.manifest.cache_dir).display()
            )));
        }
        if let Some(lines) = &merged.device_lines
            && lines.all.totals().0.0 == 0
        {
            return Err(Failed::from(format!(
                "device coverage is on ({}) but no kernel line was covered ({} kernels): no trial left a kernel record with executed instructions; check the trials' logs",
                device.reason, functions
            )));
        }
        if functions.starts_with("0/") {
            return Err(Failed::from(format!(
                "device coverage is on ({}) but no device function was covered ({functions}): device counters are written only when a process exits normally; check the trials' logs",
                device.reason
            )));
        }
        Ok(Completion::Completed)
    }

    /// Compares the normalised summary with `snapshots/`. Ignored (not
    /// failed) when the results are not of one run, or of a partial suite.
    fn snapshot(&self, merged: &Merged) -> Result<Completion, Failed> {
        let config = self.ctx.config();
        if let Some(why) = nothing_to_check("report::snapshot", &self.ctx) {
            return Ok(Completion::ignored_with(why));
        }
        if let Some(mixed) = results::Runs::of(&merged.results).mixed() {
            return Ok(Completion::ignored_with(format!("{mixed}; the snapshot describes one run")));
        }
        let summary = self.summary()?;
        let planned: BTreeSet<String> = plan::plan(config).into_iter().filter(|t| !t.ignored).map(|t| t.name).collect();
        let ran: BTreeSet<String> = merged.results.iter().map(|r| r.trial.clone()).collect();
        let present = planned.intersection(&ran).count();
        if present < planned.len() {
            return Ok(Completion::ignored_with(format!("partial suite: {present} of {} trials", planned.len())));
        }
        let extra: Vec<&String> = ran.difference(&planned).collect();
        if !extra.is_empty() {
            return Ok(Completion::ignored_with(format!(
                "the workspace also holds {} trials outside the default set (e.g. {}); the snapshot describes the default set",
                extra.len(),
                extra[0]
            )));
        }
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path(), self.ctx.root.as_path()];
        let mut value = report::normalize(&summary.all, &roots);
        value["config"] = json!(config.name);
        value["build_id"] = json!(m.build_id);
        value["device_coverage"] = json!(m.device.summary());
        value["host_totals"] = summary.host.clone();
        value["device_totals"] =
            summary.device.clone().unwrap_or_else(|| json!(format!("not applicable: {}", m.device.reason)));
        value["trials"] = json!(planned.len());
        value["build_id"] = json!("[build id]");
        let name = format!("coverage_summary-{}", config.name);
        let snapshots = self.ctx.loaded.snapshots_dir();
        let adopted = snapshots.join(format!("{name}.snap"));
        // insta writes into the config's project only when asked to.
        let asked = process_env("INSTA_UPDATE").is_some_and(|u| matches!(u.as_str(), "always" | "1" | "force"));
        if !adopted.is_file() && !asked {
            return self.first_snapshot(&name, &value, &adopted);
        }
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(snapshots);
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_json_snapshot!(name, value));
        Ok(Completion::Completed)
    }

    /// A config's first report has no snapshot to compare with: its own is
    /// written into the report (`snapshot/`), never into the config's
    /// project unasked, and the step says where and how to adopt it.
    fn first_snapshot(&self, name: &str, value: &Value, adopted: &Path) -> Result<Completion, Failed> {
        let dir = self.report_dir().join("snapshot");
        let file = dir.join(format!("{name}.snap"));
        self.ctx
            .workspace
            .create_dir(&dir)
            .and_then(|()| self.ctx.workspace.write(&file, report::snapshot_text(value).as_bytes()))
            .map_err(|e| failed("writing the new snapshot", &e))?;
        let shown = self.shown(&file);
        eprintln!(
            "ccl-coverage: config {} has no snapshot yet ({} does not exist): this report's is {}; to adopt it, \
             copy it there (cp {} {}), or run the report again with INSTA_UPDATE=always",
            self.ctx.config().name,
            adopted.display(),
            shown.display(),
            shown.display(),
            adopted.display()
        );
        Ok(Completion::ignored_with(format!(
            "no snapshot to compare with yet: this report's is {}, to adopt as {}",
            shown.display(),
            adopted.display()
        )))
    }
}

/// At most this many llvm-cov exports run at once (one per core).
fn parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

impl Shared {
    /// Each trial's coverage, from its own profile (trials whose raw
    /// profiles were never merged get theirs merged under
    /// `report/trials/`), computed on every core; checked against the
    /// merged report: the trials' lines together must be exactly the lines
    /// the report covers. See [`PerTrial`] for how.
    fn attributed(&self, merged: &Merged) -> Result<&Attributed, Failed> {
        self.attributed
            .get_or_init(|| {
                let text = self.lcov(merged).map_err(|f| {
                    Error::new(f.message().unwrap_or("llvm-cov export -format=lcov failed").to_string())
                })?;
                let all = lcov::parse_lcov(text, "the merged lcov")?;
                let ws = &self.ctx.workspace;
                let mut jobs = Vec::new();
                for r in &merged.results {
                    let profdata = profiles::trial_profdata(ws, &r.slug);
                    if ws.kind(&profdata)? == Some(workspace::confined::Kind::File) {
                        jobs.push((r, profdata));
                        continue;
                    }
                    let raw = profiles::raw_files(ws, &ws.trial_profiles(&r.slug))?;
                    if raw.is_empty() {
                        continue;
                    }
                    let dir = self.report_dir().join("trials");
                    self.ctx.workspace.create_dir(&dir)?;
                    let out = dir.join(format!("{}.profdata", r.slug));
                    profiles::merge(ws, &merged.manifest.toolchain, &raw, &dir.join(format!("{}.list", r.slug)), &out)?;
                    jobs.push((r, out));
                }
                let regions = self
                    .summary()
                    .map_err(|f| Error::new(f.message().unwrap_or("llvm-cov export -summary-only failed").to_string()))?
                    .all
                    .totals()
                    .regions;
                let per_trial = PerTrial::choose(ws, merged, text, (regions.covered, regions.count))?;
                let next = std::sync::atomic::AtomicUsize::new(0);
                let outputs: Vec<Result<TrialCoverage, Error>> = std::thread::scope(|scope| {
                    let workers: Vec<_> = (0..parallelism().min(jobs.len()).max(1))
                        .map(|_| {
                            scope.spawn(|| {
                                let mut done = Vec::new();
                                loop {
                                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    let Some((r, profdata)) = jobs.get(i) else { break };
                                    done.push((i, per_trial.coverage(ws, merged, r, profdata)));
                                }
                                done
                            })
                        })
                        .collect();
                    let mut all: Vec<(usize, Result<TrialCoverage, Error>)> =
                        workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect();
                    all.sort_by_key(|(i, _)| *i);
                    all.into_iter().map(|(_, r)| r).collect()
                });
                if outputs.len() != jobs.len() {
                    return Err(Error::new("a thread computing per-trial coverage panicked"));
                }
                let trials = outputs.into_iter().collect::<Result<Vec<_>, Error>>()?;
                check_union(&all, &trials)?;
                let summaries = attribution::trial_summaries(&trials);
                Ok(Attributed { all, trials, summaries })
            })
            .as_ref()
            .map_err(|e| failed("per-trial attribution", e))
    }

    /// `attribution.json`, `trials.json` and the pages under `attribution/`.
    fn attribution_files(&self, merged: &Merged) -> Result<(), Failed> {
        let a = self.attributed(merged)?;
        let dir = self.report_dir();
        let attribution = Attribution::new(&a.all, &a.trials);
        let write = |name: &str, json: String| {
            self.ctx
                .workspace
                .write(&dir.join(name), json.as_bytes())
                .map_err(|e| failed(&format!("writing {name}"), &e))
        };
        // One line: at ~800 trials the ranges would be mostly indentation.
        write("attribution.json", serde_json::to_string(&attribution).expect("attribution serializes"))?;
        write("trials.json", serde_json::to_string_pretty(&a.summaries).expect("trials serialize"))?;
        let pages_dir = dir.join("attribution");
        self.ctx.workspace.create_dir(&pages_dir).map_err(|e| failed("creating report/attribution", &e))?;
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path()];
        let sources = attribution_pages::Sources {
            text: &|f| std::fs::read_to_string(f).ok(),
            llvm_cov_page: &|f| format!("../html/coverage{f}.html"),
            shown: &|f| report::relative(f, &roots),
        };
        let pages = attribution_pages::pages(&attribution, &sources);
        for (name, html) in pages {
            self.ctx
                .workspace
                .write(&pages_dir.join(&name), html.as_bytes())
                .map_err(|e| failed(&format!("writing attribution/{name}"), &e))?;
        }
        eprintln!(
            "ccl-coverage: which trial covered which line: {}",
            self.shown(&pages_dir.join("index.html")).display()
        );
        Ok(())
    }

    fn minimal_suite(&self, merged: &Merged) -> Result<(), Failed> {
        let a = self.attributed(merged)?;
        let plan = plan::plan(self.ctx.config());
        let planned: Vec<minimal_suite::Planned> =
            plan.iter().map(|t| minimal_suite::Planned { name: &t.name, ignored: t.ignored }).collect();
        let full_s: f64 = merged.results.iter().map(|r| r.duration_s.max(0.0)).sum();
        let suite = minimal_suite::minimal_suite(&a.trials, &planned, merged.results.len(), full_s);
        self.ctx
            .workspace
            .write(
                &self.report_dir().join("minimal-suite.json"),
                serde_json::to_string_pretty(&suite).expect("minimal suite serializes").as_bytes(),
            )
            .map_err(|e| failed("writing minimal-suite.json", &e))?;
        // The command (one `--skip` per trial left out) is in the file.
        eprintln!(
            "ccl-coverage: minimal equivalent suite (the same lines, functions and branches): {} of {} trials, {:.2} of {:.2} trial-seconds (its cargo test and nextest commands are in {})",
            suite.trial_count,
            suite.full_suite_trials,
            suite.duration_s,
            suite.full_suite_duration_s,
            self.shown(&self.report_dir().join("minimal-suite.json")).display()
        );
        Ok(())
    }

    /// `CCL_COV_DIFF_BASE`: changed-line coverage, failed below `CCL_COV_FAIL_UNDER_DIFF`.
    fn diff(&self, merged: &Merged) -> Result<Completion, Failed> {
        let Some(base) = set("CCL_COV_DIFF_BASE") else { return Ok(Completion::ignored_with(NO_DIFF_BASE)) };
        // The diff's line numbers are of the sources now, the coverage's of the sources built.
        if let Some(changed) = &merged.health.sources_changed {
            return Err(Failed::from(format!("changed-line coverage refused: {changed}")));
        }
        let a = self.attributed(merged)?;
        let changes =
            diff_coverage::git_changes(&merged.manifest.library_src, &base).map_err(|e| failed("git diff", &e))?;
        let report = diff_coverage::diff_report(&base, &changes, &a.all);
        let dir = self.report_dir();
        let md = report.markdown();
        self.ctx
            .workspace
            .write(
                &dir.join("diff.json"),
                serde_json::to_string_pretty(&report).expect("diff report serializes").as_bytes(),
            )
            .and_then(|()| self.ctx.workspace.write(&dir.join("diff.md"), md.as_bytes()))
            .map_err(|e| failed("writing diff.json and diff.md", &e))?;
        eprintln!("ccl-coverage: {}", md.lines().next().unwrap_or_default().trim_start_matches("### "));
        let bar = process_env("CCL_COV_FAIL_UNDER_DIFF");
        match diff_coverage::check_diff_bar(&report, bar.as_deref()).map_err(|e| failed("reading the bar", &e))? {
            Some(short) => Err(Failed::from(format!(
                "{short}; uncovered changed lines: {}",
                self.shown(&dir.join("diff.md")).display()
            ))),
            None => Ok(Completion::Completed),
        }
    }

    /// `CCL_COV_BASELINE`: what an earlier run covered that this one does
    /// not; failed with `CCL_COV_FAIL_ON_LOST=1` if any line was lost.
    fn baseline(&self, merged: &Merged) -> Result<Completion, Failed> {
        let Some(baseline) = set("CCL_COV_BASELINE") else { return Ok(Completion::ignored_with(NO_BASELINE)) };
        let a = self.attributed(merged)?;
        let path = diff_coverage::baseline_lcov(Path::new(&baseline)).map_err(|e| failed("the baseline", &e))?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failed::from(format!("cannot read the baseline {}: {e}", path.display())))?;
        // A baseline's relative file names are under this report's prefix.
        let text = report::absolute_lcov(&text, &self.path_prefix(merged));
        let before = lcov::parse_lcov(&text, &path.display().to_string()).map_err(|e| failed("the baseline", &e))?;
        let report = diff_coverage::baseline_report(&path, &before, &a.all);
        let dir = self.report_dir();
        let md = report.markdown();
        self.ctx
            .workspace
            .write(
                &dir.join("baseline.json"),
                serde_json::to_string_pretty(&report).expect("baseline report serializes").as_bytes(),
            )
            .and_then(|()| self.ctx.workspace.write(&dir.join("baseline.md"), md.as_bytes()))
            .map_err(|e| failed("writing baseline.json and baseline.md", &e))?;
        eprintln!("ccl-coverage: {} lines lost baseline coverage (LBC) against {}", report.lost_lines, path.display());
        let fail_on_lost =
            crate::env_names::switch("CCL_COV_FAIL_ON_LOST", &process_env("CCL_COV_FAIL_ON_LOST").unwrap_or_default())
                .map_err(|e| failed("reading the switch", &e))?
                .unwrap_or(false);
        if fail_on_lost && report.lost_lines > 0 {
            let files: Vec<String> = report
                .lost_baseline_coverage
                .iter()
                .map(|(f, r)| format!("{f}: {}", attribution::ranges_text(r)))
                .collect();
            return Err(Failed::from(format!(
                "lost baseline coverage: {} lines the baseline {} covered are not covered now (CCL_COV_FAIL_ON_LOST=1):\n    {}\n(see {})",
                report.lost_lines,
                path.display(),
                files.join("\n    "),
                self.shown(&dir.join("baseline.md")).display()
            )));
        }
        Ok(Completion::Completed)
    }
}

/// `html` with a warning at the top of its body.
fn with_warning(html: &str, warning: &str) -> String {
    let escaped = warning.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    let banner = format!("<p class='warning' style='color:#a00;font-weight:bold'>{escaped}</p>");
    match html.find("<body>").map(|at| at + "<body>".len()) {
        Some(at) => format!("{}{banner}{}", &html[..at], &html[at..]),
        None => format!("{banner}{html}"),
    }
}

/// Device totals as the summary shows them: `covered/count`.
fn device_totals(lines: &device_lines::DeviceCoverage) -> Value {
    let ((lh, lf), (fh, ff)) = lines.totals();
    json!({ "lines": format!("{lh}/{lf}"), "functions": format!("{fh}/{ff}"), "regions": Value::Null, "branches": Value::Null })
}

/// How each trial's coverage is computed.
enum PerTrial {
    /// From the coverage mapping read once and the trial's counters (read
    /// in process, or with `llvm-profdata merge -text` where that reader
    /// failed its check): no pass over the library's mapping per trial
    /// (issue #24), no process per trial (issue #35).
    Mapping(Mapping, CounterReader),
    /// `llvm-cov export -format=lcov` and `-summary-only` per trial: asked
    /// for (`CCL_COV_ATTRIBUTION_EXPORTS=on`), or because the mapping could
    /// not be read or did not reproduce llvm-cov on the merged profile.
    Exports,
}

impl PerTrial {
    /// The in-process reader, once it has given llvm-cov's own lcov for the
    /// merged profile (`merged_lcov`, with device lines after the host's);
    /// otherwise, said on screen, llvm-cov per trial.
    fn choose(
        ws: &workspace::Workspace,
        merged: &Merged,
        merged_lcov: &str,
        merged_regions: (u64, u64),
    ) -> Result<PerTrial, Error> {
        let asked = process_env("CCL_COV_ATTRIBUTION_EXPORTS").unwrap_or_default();
        if crate::env_names::switch("CCL_COV_ATTRIBUTION_EXPORTS", &asked)?.unwrap_or(false) {
            eprintln!(
                "ccl-coverage: per-trial attribution runs llvm-cov once per trial, as CCL_COV_ATTRIBUTION_EXPORTS=on asks"
            );
            return Ok(PerTrial::Exports);
        }
        let checked = || -> Result<(Mapping, CounterReader), String> {
            let mapping = Mapping::read(&merged.inputs.objects, merged.manifest.toolchain.llvm_cov.major)
                .map_err(|e| e.to_string())?;
            let (counters, counts) =
                CounterReader::checked(ws, &merged.manifest.toolchain.llvm_profdata.path, &merged.inputs.profdata)
                    .map_err(|e| e.to_string())?;
            let loaded = mapping.load(&counts);
            let keep = |f: &str| merged.inputs.ignore.keeps(f);
            let mut ours = loaded.lcov(&keep);
            if let Some(lines) = &merged.device_lines {
                ours = lcov::fold_in(&ours, &device_lines::to_lcov(&lines.all), lines.origin.short)
                    .map_err(|e| e.to_string())?;
            }
            if let Some((n, theirs, mine)) =
                first_difference(&mapping::without_summaries(merged_lcov), &mapping::without_summaries(&ours))
            {
                return Err(format!(
                    "on the merged profile it differs from llvm-cov at line {n} of the lcov: llvm-cov {theirs:?}, in-process {mine:?}"
                ));
            }
            let regions = loaded.regions(&keep);
            if regions != merged_regions {
                return Err(format!(
                    "on the merged profile it counts regions {}/{}, llvm-cov's summary {}/{}",
                    regions.0, regions.1, merged_regions.0, merged_regions.1
                ));
            }
            // What each trial is computed with, without text, must be the text's.
            if merged.device_lines.is_none() {
                let parsed = lcov::parse_lcov(&ours, "the in-process lcov").map_err(|e| e.to_string())?;
                if loaded.covered(&keep) != covered_and_totals(parsed) {
                    return Err("its lcov, read without the text, differs from the text's on the merged profile".into());
                }
            }
            Ok((mapping, counters))
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(checked)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(ToString::to_string));
            Err(format!("it panicked: {}", what.unwrap_or_default()))
        });
        match outcome {
            Ok((mapping, counters)) => {
                if let Some(why) = counters.fallback() {
                    eprintln!(
                        "ccl-coverage: per-trial attribution reads each trial's counters with llvm-profdata (slower): the in-process reader of indexed profiles cannot be used: {why}"
                    );
                }
                Ok(PerTrial::Mapping(mapping, counters))
            }
            Err(why) => {
                eprintln!(
                    "ccl-coverage: per-trial attribution runs llvm-cov once per trial (slower): the in-process coverage-mapping reader cannot be used: {why}"
                );
                Ok(PerTrial::Exports)
            }
        }
    }

    /// One trial's lcov (with its own device lines) and totals.
    fn coverage(
        &self,
        ws: &workspace::Workspace,
        merged: &Merged,
        r: &TrialResult,
        profdata: &Path,
    ) -> Result<TrialCoverage, Error> {
        let device = merged.device_lines.as_ref().and_then(|d| d.trials.get(&r.slug)).map(device_lines::to_lcov);
        let origin = || format!("the lcov of {}", profdata.display());
        let ((lcov, totals), regions) = match self {
            PerTrial::Mapping(mapping, counters) => {
                let counts = counters.read(ws, profdata)?;
                let loaded = mapping.load(&counts);
                let keep = |f: &str| merged.inputs.ignore.keeps(f);
                // Device records add to the host's as lcov text does: only then is the text needed.
                let lcov = match &device {
                    None => loaded.covered(&keep),
                    Some(device) => covered_and_totals(lcov::parse_lcov(&(loaded.lcov(&keep) + device), &origin())?),
                };
                (lcov, loaded.regions(&keep))
            }
            PerTrial::Exports => {
                let inputs = merged.inputs.with_profdata(profdata.to_path_buf());
                let text = inputs.lcov_text()? + device.as_deref().unwrap_or_default();
                let regions = inputs.summary()?.totals().regions;
                (covered_and_totals(lcov::parse_lcov(&text, &origin())?), (regions.covered, regions.count))
            }
        };
        Ok(TrialCoverage {
            name: r.trial.clone(),
            slug: r.slug.clone(),
            duration_s: r.duration_s,
            covered: Covered::of(&lcov)?,
            lines: (totals.lines.covered, totals.lines.count),
            functions: (totals.functions.covered, totals.functions.count),
            regions,
        })
    }
}

/// `lcov`'s totals as the model counts them (the merged report's way), and
/// only what ran: attribution reads nothing else, and at 800 trials the rest
/// would be most of the report's memory ([`Loaded::covered`] gives the same
/// without the text).
///
/// [`Loaded::covered`]: crate::coverage::mapping::Loaded::covered
fn covered_and_totals(mut lcov: Lcov) -> (Lcov, lcov::Tallies) {
    let mut totals = lcov::Tallies::default();
    for file in lcov.files.values() {
        totals += file.tallies();
    }
    lcov.retain_covered();
    (lcov, totals)
}

/// The first line where two texts differ: its number and both versions.
fn first_difference(a: &str, b: &str) -> Option<(usize, String, String)> {
    let (mut x, mut y) = (a.lines(), b.lines());
    for n in 1.. {
        match (x.next(), y.next()) {
            (None, None) => return None,
            (l, r) if l == r => {}
            (l, r) => return Some((n, l.unwrap_or("(end)").to_string(), r.unwrap_or("(end)").to_string())),
        }
    }
    None
}

/// The trials' covered lines together must be the merged report's.
fn check_union(all: &Lcov, trials: &[TrialCoverage]) -> Result<(), Error> {
    let mut union: BTreeSet<(&str, u32)> = BTreeSet::new();
    for t in trials {
        for (file, cov) in &t.covered {
            union.extend(cov.lines.iter().map(|l| (file.as_str(), *l)));
        }
    }
    let merged: BTreeSet<(&str, u32)> =
        all.files.iter().flat_map(|(f, cov)| cov.covered_lines().map(move |l| (f.as_str(), l))).collect();
    let only_trials: Vec<String> = union.difference(&merged).take(5).map(|(f, l)| format!("{f}:{l}")).collect();
    let only_merged: Vec<String> = merged.difference(&union).take(5).map(|(f, l)| format!("{f}:{l}")).collect();
    if only_trials.is_empty() && only_merged.is_empty() {
        return Ok(());
    }
    Err(Error::new(format!(
        "the trials' own profiles cover {} lines, the merged profile {}; they differ (covered by a trial only: {}; by the merged profile only: {}): was a profile changed during the report?",
        union.len(),
        merged.len(),
        only_trials.join(", "),
        only_merged.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(args: &[&str]) -> Option<String> {
        let mut args = Arguments::from_iter(std::iter::once("report").chain(args.iter().copied()));
        drop_trial_filter(&mut args, &["report::merge", "report::html", "report::diff"]);
        args.filter
    }

    #[test]
    fn a_trial_filter_is_dropped_and_a_step_filter_kept() {
        assert_eq!(filtered(&["AllReduce::1K"]), None);
        assert_eq!(filtered(&["--exact", "AllReduce::1K::mpi"]), None);
        assert_eq!(filtered(&["--exact", "report::htm"]), None, "--exact names no step");
        assert_eq!(filtered(&["report::html"]).as_deref(), Some("report::html"));
        assert_eq!(filtered(&["--exact", "report::diff"]).as_deref(), Some("report::diff"));
        assert_eq!(filtered(&["report::"]).as_deref(), Some("report::"));
        assert_eq!(filtered(&["--skip", "AllReduce"]), None);
    }
}
