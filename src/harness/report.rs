//! `cargo test --test coverage_report`: merge what the collectives run left in
//! the workspace and write the reports, one trial per step so that a failure
//! names its step. It never runs a trial and never deletes a profile
//! (report-only); it replaces `report/` as a whole, so no stale report
//! survives next to a new one, and every report says which build and runs it
//! came from.

use crate::config::process_env;
use crate::context::Context;
use crate::error::Error;
use crate::fixture::BuildManifest;
use crate::plan;
use crate::profiles;
use crate::report::{self, Health, ReportInputs, ReportMeta};
use crate::results::{self, TrialResult};
use crate::workspace::{self, Area};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

struct Shared {
    ctx: Context,
    merged: OnceLock<Result<Merge, Error>>,
    summary: OnceLock<Result<Summary, Error>>,
    lcov: OnceLock<Result<PathBuf, Error>>,
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
}

/// `llvm-cov export -summary-only` over all objects, and the host and device
/// totals when there are device objects.
struct Summary {
    all: String,
    host: Value,
    device: Option<Value>,
}

type Step = fn(&Shared, &Merged) -> Result<Completion, Failed>;

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
    // Listing reads nothing and writes nothing: no lock, no workspace.
    let _lock = if args.list {
        None
    } else {
        match super::take_workspace(&ctx, super::Access::Report) {
            Ok(lock) => Some(lock),
            Err(code) => return code,
        }
    };
    let shared = Arc::new(Shared { ctx, merged: OnceLock::new(), summary: OnceLock::new(), lcov: OnceLock::new() });
    let steps: [(&str, Step); 12] = [
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
    ];
    let trials = steps
        .into_iter()
        .map(|(name, step)| {
            let shared = shared.clone();
            Trial::ignorable_test(name, move || shared.with_merged(|m| step(&shared, m)))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

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
            Err(e) => Err(failed("merging profiles", e)),
        }
    }

    fn report_dir(&self) -> PathBuf {
        self.ctx.workspace.report_dir()
    }

    fn merge(&self) -> Result<Merge, Error> {
        let ws = &self.ctx.workspace;
        let manifest = BuildManifest::read(&ws.build_manifest()).map_err(|e| {
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
        let results = results::load_all(ws, &manifest.build_id, &plan::names(self.ctx.config()))?;
        let recorded: Vec<_> = results.iter().map(TrialResult::recorded_profiles).collect();
        let verified = profiles::verified_inputs(ws, &recorded)?;
        let inputs = verified.inputs;
        if inputs.is_empty() {
            return Err(Error::new(format!(
                "no profiles for build {} under {}; run `cargo test --test collectives` first",
                manifest.build_id,
                ws.area(Area::Profiles).display()
            )));
        }
        let report_dir = self.report_dir();
        ws.clear(Area::Report, &report_dir)?;
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
        let health = Health::new(&results, quarantined, verified.missing);
        let meta = ReportMeta::new(&manifest, &results, merged_inputs, &health);
        workspace::write_atomic(
            &report_dir.join("meta.json"),
            serde_json::to_string_pretty(&meta).expect("meta serializes").as_bytes(),
        )?;
        let config = self.ctx.config();
        let title = format!("ccl-coverage: {} (build {})", config.name, manifest.build_id);
        let inputs = ReportInputs::new(&manifest, profdata, config.report.ignore_filename_regex.clone(), title)?;
        Ok(Merge::Done(Box::new(Merged { manifest, results, inputs, health })))
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
        self.summary
            .get_or_init(|| {
                let dir = self.report_dir();
                let all = merged.inputs.summary_json(&dir.join("summary.json"))?;
                let m = &merged.manifest;
                if m.device_objects.is_empty() {
                    return Ok(Summary { host: report::totals(&all)?, all, device: None });
                }
                let host = merged
                    .inputs
                    .with_objects(m.instrumented_objects())
                    .summary_json(&dir.join("summary-host.json"))?;
                let device = merged
                    .inputs
                    .with_objects(m.device_objects.iter().map(|o| o.path.clone()).collect())
                    .summary_json(&dir.join("summary-device.json"))?;
                Ok(Summary { host: report::totals(&host)?, device: Some(report::totals(&device)?), all })
            })
            .as_ref()
            .map_err(|e| failed("llvm-cov export -summary-only", e))
    }

    fn json(&self, merged: &Merged) -> Result<(), Failed> {
        merged
            .inputs
            .json(&self.report_dir().join("coverage.json"))
            .map_err(|e| failed("llvm-cov export -format=text", &e))
    }

    fn lcov(&self, merged: &Merged) -> Result<&PathBuf, Failed> {
        let out = self.report_dir().join("coverage.lcov");
        self.lcov
            .get_or_init(|| merged.inputs.lcov(&out).map(|()| out.clone()))
            .as_ref()
            .map_err(|e| failed("llvm-cov export -format=lcov", e))
    }

    fn cobertura(&self, merged: &Merged) -> Result<(), Failed> {
        let lcov = self.lcov(merged)?;
        report::cobertura(lcov, &merged.manifest.library_src, &self.report_dir().join("cobertura.xml"))
            .map_err(|e| failed("Cobertura conversion", &e))
    }

    fn html(&self, merged: &Merged) -> Result<(), Failed> {
        let dir = self.report_dir().join("html");
        let index = merged.inputs.html(&dir).map_err(|e| failed("llvm-cov show -format=html", &e))?;
        workspace::normalize_modes(&dir).map_err(|e| failed("setting the report's modes", &e))?;
        eprintln!("ccl-coverage: HTML report: {}", index.display());
        Ok(())
    }

    fn text(&self, merged: &Merged) -> Result<(), Failed> {
        merged.inputs.text(&self.report_dir().join("summary.txt")).map_err(|e| failed("llvm-cov report", &e))
    }

    /// `report/summary.md`, also appended to `$GITHUB_STEP_SUMMARY` when set.
    fn markdown(&self, merged: &Merged) -> Result<(), Failed> {
        let summary = self.summary()?;
        let md =
            report::markdown(&self.ctx.config().name, &merged.manifest, &summary.all, &merged.results, &merged.health)
                .map_err(|e| failed("reading the summary", &e))?;
        let out = self.report_dir().join("summary.md");
        workspace::write_atomic(&out, md.as_bytes()).map_err(|e| failed("writing summary.md", &e))?;
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
            None => Ok(Completion::ignored_with("no CCL_COV_FAIL_UNDER_* bar is set")),
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
        if functions.starts_with("0/") {
            return Err(Failed::from(format!(
                "device coverage is on ({}) but no device function was covered ({functions}): device counters are written only when a process exits normally; check the trials' logs",
                device.reason
            )));
        }
        Ok(Completion::Completed)
    }

    /// Compares the normalised summary with `snapshots/`. Ignored (not
    /// failed) when the workspace holds a partial suite.
    fn snapshot(&self, merged: &Merged) -> Result<Completion, Failed> {
        let config = self.ctx.config();
        if !config.report.snapshot {
            return Ok(Completion::ignored_with(format!("snapshots are off for config {}", config.name)));
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
        let mut value = report::normalize(&summary.all, &roots).map_err(|e| failed("normalising the summary", &e))?;
        value["config"] = json!(config.name);
        value["build_id"] = json!(m.build_id);
        value["device_coverage"] = json!(m.device.summary());
        value["host_totals"] = summary.host.clone();
        value["device_totals"] =
            summary.device.clone().unwrap_or_else(|| json!(format!("not applicable: {}", m.device.reason)));
        value["trials"] = json!(planned.len());
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(self.ctx.root.join("snapshots"));
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.add_redaction(".build_id", "[build id]");
        let name = format!("coverage_summary-{}", config.name);
        settings.bind(|| insta::assert_json_snapshot!(name, value));
        Ok(Completion::Completed)
    }
}
