//! `cargo test --test coverage_report`: merge what the collectives run left in
//! the workspace and write the reports, one trial per step so that a failure
//! names its step. It never runs a trial and never deletes a profile
//! (report-only); it replaces `report/` as a whole, so no stale report
//! survives next to a new one.

use crate::context::Context;
use crate::error::Error;
use crate::fixture::BuildManifest;
use crate::plan;
use crate::profiles;
use crate::report::{self, ReportInputs};
use crate::results::{self, TrialResult};
use crate::workspace::{self, Area};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

struct Shared {
    ctx: Context,
    merged: OnceLock<Result<Merge, Error>>,
    summary: OnceLock<Result<Summary, Error>>,
}

enum Merge {
    /// The build was not instrumented: every step is ignored with this reason.
    Off(String),
    Done(Merged),
}

/// The merged profile and what it was made from.
struct Merged {
    manifest: BuildManifest,
    results: Vec<TrialResult>,
    inputs: ReportInputs,
}

/// `llvm-cov export -summary-only` over all objects, and the host and device
/// totals when there are device objects.
struct Summary {
    all: String,
    host: Value,
    device: Option<Value>,
}

type Step = fn(&Shared, &Merged) -> Result<(), Failed>;

pub fn main() -> ExitCode {
    main_with(Arguments::from_args())
}

pub fn main_with(args: Arguments) -> ExitCode {
    let ctx = match Context::from_env() {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("ccl-coverage: {e}");
            return ExitCode::from(2);
        }
    };
    let shared = Arc::new(Shared { ctx, merged: OnceLock::new(), summary: OnceLock::new() });
    let steps: [(&str, Step); 5] = [
        ("report::merge", |_, _| Ok(())),
        ("report::summary_json", |s, _| s.summary().map(drop)),
        ("report::lcov", Shared::lcov),
        ("report::html", Shared::html),
        ("report::text", Shared::text),
    ];
    let mut trials: Vec<Trial> = steps
        .into_iter()
        .map(|(name, step)| {
            let shared = shared.clone();
            Trial::ignorable_test(name, move || shared.with_merged(|m| step(&shared, m).map(|()| Completion::Completed)))
        })
        .collect();
    let device = shared.clone();
    trials.push(Trial::ignorable_test("report::device_coverage", move || device.with_merged(|m| device.device_check(m))));
    let snapshot = shared.clone();
    trials.push(Trial::ignorable_test("report::snapshot", move || snapshot.with_merged(|m| snapshot.snapshot(m))));
    libtest_mimic::run(&args, trials).exit_code()
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

    fn merge(&self) -> Result<Merge, Error> {
        let ws = &self.ctx.workspace;
        let manifest = BuildManifest::read(&ws.build_manifest()).map_err(|e| {
            Error::new(format!(
                "no build recorded in {} ({e}); run `cargo test --test collectives` first, with the same CCL_COV_CONFIG and CCL_COV_WORKSPACE",
                ws.root().display()
            ))
        })?;
        if !manifest.coverage {
            return Ok(Merge::Off(format!("build {} was made without coverage (CCL_COV_COVERAGE=off): there is nothing to report", manifest.build_id)));
        }
        let results = results::load_all(ws, &manifest.build_id, &plan::names(self.ctx.config()))?;
        let trials = profiles::collect(ws, &results)?;
        let files: Vec<PathBuf> = trials.iter().flat_map(|t| t.files.iter().cloned()).collect();
        if files.is_empty() {
            return Err(Error::new(format!(
                "no raw profiles (*.profraw) for build {} under {}; run `cargo test --test collectives` first",
                manifest.build_id,
                ws.area(Area::Profiles).display()
            )));
        }
        let report_dir = ws.report_dir();
        ws.clear(Area::Report, &report_dir)?;
        let profdata = report_dir.join("coverage.profdata");
        profiles::merge(&manifest.toolchain, &files, &report_dir.join("profiles.list"), &profdata)?;
        let meta = json!({
            "build_id": manifest.build_id,
            "generated_at": results::now(),
            "device_coverage": manifest.device.summary(),
            "raw_profiles": files.len(),
            "trials": results.iter().map(|r| json!({"trial": r.trial, "run_id": r.run_id, "status": r.status})).collect::<Vec<_>>(),
        });
        workspace::write_atomic(&report_dir.join("meta.json"), serde_json::to_string_pretty(&meta).expect("json").as_bytes())?;
        let config = self.ctx.config();
        let inputs = ReportInputs::new(&manifest, profdata, config.report.ignore_filename_regex.clone(), format!("ccl-coverage: {}", config.name))?;
        Ok(Merge::Done(Merged { manifest, results, inputs }))
    }

    fn summary(&self) -> Result<&Summary, Failed> {
        let Some(Ok(Merge::Done(merged))) = self.merged.get() else {
            return Err(Failed::from("the summary needs a merged profile"));
        };
        self.summary
            .get_or_init(|| {
                let dir = self.ctx.workspace.report_dir();
                let all = merged.inputs.summary_json(&dir.join("summary.json"))?;
                let m = &merged.manifest;
                if m.device_objects.is_empty() {
                    return Ok(Summary { host: report::totals(&all)?, all, device: None });
                }
                let host = merged.inputs.with_objects(m.instrumented_objects()).summary_json(&dir.join("summary-host.json"))?;
                let device = merged
                    .inputs
                    .with_objects(m.device_objects.iter().map(|o| o.path.clone()).collect())
                    .summary_json(&dir.join("summary-device.json"))?;
                Ok(Summary { host: report::totals(&host)?, device: Some(report::totals(&device)?), all })
            })
            .as_ref()
            .map_err(|e| failed("llvm-cov export -summary-only", e))
    }

    fn lcov(&self, merged: &Merged) -> Result<(), Failed> {
        let out = self.ctx.workspace.report_dir().join("coverage.lcov");
        merged.inputs.lcov(&out).map_err(|e| failed("llvm-cov export -format=lcov", &e))
    }

    fn html(&self, merged: &Merged) -> Result<(), Failed> {
        let dir = self.ctx.workspace.report_dir().join("html");
        let index = merged.inputs.html(&dir).map_err(|e| failed("llvm-cov show -format=html", &e))?;
        eprintln!("ccl-coverage: HTML report: {}", index.display());
        Ok(())
    }

    fn text(&self, merged: &Merged) -> Result<(), Failed> {
        let out = self.ctx.workspace.report_dir().join("summary.txt");
        merged.inputs.text(&out).map_err(|e| failed("llvm-cov report", &e))
    }

    /// With device coverage on, some device function must have run;
    /// otherwise the check does not apply and says why.
    fn device_check(&self, merged: &Merged) -> Result<Completion, Failed> {
        let device = &merged.manifest.device;
        if !device.enabled {
            return Ok(Completion::ignored_with(format!("does not apply: this build has host-only coverage ({})", device.reason)));
        }
        let summary = self.summary()?;
        let totals = summary.device.as_ref().ok_or_else(|| Failed::from("device coverage is on but the build recorded no device code object"))?;
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
        value["device_totals"] = summary.device.clone().unwrap_or_else(|| json!(format!("not applicable: {}", m.device.reason)));
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
