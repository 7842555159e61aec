//! The steps that check the report rather than write it (when one fails, the
//! report is still whole): the profiles' health, the coverage bars, device
//! coverage, the snapshot, changed-line coverage and the baseline.

use super::Step;
use super::attributed::Attributed;
use super::merge::Merged;
use super::model::ModelSummary;
use super::{Done, Session};
use crate::error::{Context, Error, Result};
use crate::plan;
use crate::report::{self, attribution, diff_coverage};
use crate::results;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;

/// Why the snapshot, which describes one run of the default set of trials,
/// does not describe `results`: they mix runs, miss trials or hold others.
pub(super) fn snapshot_skip(config: &crate::config::Config, results: &[results::TrialResult]) -> Option<String> {
    if let Some(mixed) = results::RecordsByRun::of(results).mixed_short() {
        return Some(format!("{mixed}; the snapshot describes one run"));
    }
    let planned: BTreeSet<String> = plan::plan(config).into_iter().filter(|t| !t.ignored).map(|t| t.name).collect();
    let ran: BTreeSet<String> = results.iter().map(|r| r.trial.clone()).collect();
    let present = planned.intersection(&ran).count();
    if present < planned.len() {
        return Some(format!("partial suite: {present} of {} trials", planned.len()));
    }
    let extra: Vec<&String> = ran.difference(&planned).collect();
    (!extra.is_empty()).then(|| {
        format!(
            "the workspace also holds {} trials outside the default set (e.g. {}); the snapshot describes the default set",
            extra.len(),
            extra[0]
        )
    })
}

pub(super) const NO_BAR: &str = "no CCL_COV_FAIL_UNDER_* bar is set";
pub(super) const NO_DIFF_BASE: &str = "CCL_COV_DIFF_BASE is not set (give a git revision of the library's sources)";
pub(super) const NO_BASELINE: &str =
    "CCL_COV_BASELINE is not set (give an earlier workspace or its report/coverage.lcov)";

impl Session {
    /// Fails when profiles had to be quarantined or a trial that passed left
    /// none; the reports above are written from the good data either way.
    pub(super) fn health(&self, merged: &Merged) -> Result<Done> {
        for line in &merged.health.no_coverage {
            crate::say!("no coverage from this trial: {line}");
        }
        match merged.health.problems() {
            None => Ok(Done::Completed),
            Some(problems) => Err(Error::new(problems)),
        }
    }

    /// `CCL_COV_FAIL_UNDER_LINES|FUNCTIONS|REGIONS|BRANCHES`, in percent.
    pub(super) fn thresholds(&self, merged: &Merged, summary: &ModelSummary) -> Result<Done> {
        let bars = &self.ctx.report.bars;
        let all = report::check_bars(&summary.all, bars).context("reading the bars failed")?;
        let unavailable = merged.device_lines.as_ref().map(|l| l.branches_unavailable.clone()).unwrap_or_default();
        let device = report::check_device_bar(summary.device.as_ref(), &unavailable, bars)
            .context("reading the device branch bar failed")?;
        match (all, device) {
            (None, None) => Ok(Done::Ignored(NO_BAR.to_string())),
            (all, device) => {
                let short: Vec<String> = all.into_iter().chain(device).flatten().collect();
                if short.is_empty() {
                    Ok(Done::Completed)
                } else {
                    Err(Error::new(format!("coverage is under the bar: {}", short.join("; "))))
                }
            }
        }
    }

    /// With device coverage on, some device function must have run;
    /// otherwise the check does not apply and says why.
    pub(super) fn device_check(&self, merged: &Merged, summary: &ModelSummary) -> Result<Done> {
        let device = &merged.manifest.device;
        let totals = summary
            .device
            .as_ref()
            .ok_or_else(|| Error::new("device coverage is on but the build recorded no device code object"))?;
        let functions = totals.functions;
        if let Some(lines) = &merged.device_lines
            && !lines.uncounted_library.is_empty()
        {
            return Err(Error::new(format!(
                "kernels of the library were launched and not counted: {}. The build's kernel list ({}) does not name them as the collector does; set coverage.device.kernels to \"all\" and report the names",
                lines.uncounted_library.join(", "),
                crate::device::counted_kernels_file(device, &merged.manifest.cache_dir)
                    .map_or_else(|| "none".to_string(), |file| file.display().to_string())
            )));
        }
        if let Some(lines) = &merged.device_lines
            && lines.all.totals().0.0 == 0
        {
            return Err(Error::new(format!(
                "device coverage is on ({}) but no kernel line was covered ({} kernels): no trial left a kernel record with executed instructions; check the trials' logs",
                device.reason, functions
            )));
        }
        if functions.covered == 0 {
            return Err(Error::new(format!(
                "device coverage is on ({}) but no device function was covered ({functions}): device counters are written only when a process exits normally; check the trials' logs",
                device.reason
            )));
        }
        Ok(Done::Completed)
    }

    /// Why a check does not apply to this report, known before its inputs
    /// are made: no bar, host-only coverage, snapshots off or results not of
    /// one whole run, no diff base, no baseline.
    pub(super) fn does_not_apply(&self, step: Step, merged: &Merged) -> Option<String> {
        let config = self.ctx.config();
        let device = &merged.manifest.device;
        match step {
            Step::Thresholds if !report::any_bar(&self.ctx.report.bars) => Some(NO_BAR.to_string()),
            Step::DeviceCoverage if !device.enabled => {
                Some(format!("does not apply: this build has host-only coverage ({})", device.reason))
            }
            Step::Snapshot if !config.report.snapshot => Some(format!("snapshots are off for config {}", config.name)),
            Step::Snapshot => snapshot_skip(config, &merged.results),
            Step::Diff if self.ctx.report.diff_base.is_none() => Some(NO_DIFF_BASE.to_string()),
            Step::Baseline if self.ctx.report.baseline.is_none() => Some(NO_BASELINE.to_string()),
            _ => None,
        }
    }

    /// Compares the normalised summary with `snapshots/`. Ignored (not
    /// failed) when the results are not of one run, or of a partial suite
    /// ([`Self::does_not_apply`]).
    pub(super) fn snapshot(&self, merged: &Merged, summary: &ModelSummary) -> Result<Done> {
        let config = self.ctx.config();
        let planned = plan::plan(config).into_iter().filter(|t| !t.ignored).count();
        let m = &merged.manifest;
        let roots = [m.library_src.as_path(), m.tests_src.as_path(), self.ctx.root.as_path()];
        let mut value = report::normalize(&summary.all, &roots);
        value["config"] = json!(config.name);
        value["build_id"] = json!(m.build_id);
        value["device_coverage"] = json!(m.device.summary());
        value["host_totals"] = summary.host.json();
        value["device_totals"] = summary
            .device
            .as_ref()
            .map_or_else(|| json!(format!("not applicable: {}", m.device.reason)), report::Totals::json);
        value["trials"] = json!(planned);
        value["build_id"] = json!("[build id]");
        let name = format!("coverage_summary-{}", config.name);
        let snapshots = self.ctx.loaded.snapshots_dir();
        let adopted = snapshots.join(format!("{name}.snap"));
        // insta writes into the config's project only when asked to.
        if !adopted.is_file() && !self.ctx.report.insta_update {
            return self.first_snapshot(&name, &value, &adopted);
        }
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(snapshots);
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_json_snapshot!(name, value));
        Ok(Done::Completed)
    }

    /// A config's first report has no snapshot to compare with: its own is
    /// written into the report (`snapshot/`), never into the config's
    /// project unasked, and the step says where and how to adopt it.
    fn first_snapshot(&self, name: &str, value: &Value, adopted: &Path) -> Result<Done> {
        let dir = self.report_dir().join("snapshot");
        let file = dir.join(format!("{name}.snap"));
        self.ctx
            .workspace
            .create_dir(&dir)
            .and_then(|()| self.ctx.workspace.write(&file, report::snapshot_text(value).as_bytes()))
            .context("writing the new snapshot failed")?;
        let shown = self.shown(&file);
        crate::note!(
            "config {} has no snapshot yet ({} does not exist): this report's is {}; to adopt it, \
             copy it there (cp {} {}), or run the report again with INSTA_UPDATE=always",
            self.ctx.config().name,
            adopted.display(),
            shown.display(),
            shown.display(),
            adopted.display()
        );
        Ok(Done::Ignored(format!(
            "no snapshot to compare with yet: this report's is {}, to adopt as {}",
            shown.display(),
            adopted.display()
        )))
    }

    /// `CCL_COV_DIFF_BASE`: changed-line coverage, failed below `CCL_COV_FAIL_UNDER_DIFF`.
    pub(super) fn diff(&self, merged: &Merged, a: &Attributed) -> Result<Done> {
        let Some(base) = &self.ctx.report.diff_base else { return Ok(Done::Ignored(NO_DIFF_BASE.to_string())) };
        // The diff's line numbers are of the sources now, the coverage's of the sources built.
        if let Some(changed) = &merged.health.sources_changed {
            return Err(Error::new(format!("changed-line coverage refused: {changed}")));
        }
        let changes = diff_coverage::git_changes(&merged.manifest.library_src, base).context("git diff failed")?;
        let report = diff_coverage::diff_report(base, &changes, &a.all);
        let dir = self.report_dir();
        let md = report.markdown();
        self.ctx
            .workspace
            .write(
                &dir.join("diff.json"),
                serde_json::to_string_pretty(&report).expect("diff report serializes").as_bytes(),
            )
            .and_then(|()| self.ctx.workspace.write(&dir.join("diff.md"), md.as_bytes()))
            .context("writing diff.json and diff.md failed")?;
        crate::say!("{}", md.lines().next().unwrap_or_default().trim_start_matches("### "));
        let bar = self.ctx.report.fail_under_diff.as_deref();
        match diff_coverage::check_diff_bar(&report, bar).context("reading the bar failed")? {
            Some(short) => Err(Error::new(format!(
                "{short}; uncovered changed lines: {}",
                self.shown(&dir.join("diff.md")).display()
            ))),
            None => Ok(Done::Completed),
        }
    }

    /// `CCL_COV_BASELINE`: what an earlier run covered that this one does
    /// not; failed with `CCL_COV_FAIL_ON_LOST=1` if any line was lost.
    pub(super) fn baseline(&self, merged: &Merged, a: &Attributed) -> Result<Done> {
        let Some(baseline) = &self.ctx.report.baseline else { return Ok(Done::Ignored(NO_BASELINE.to_string())) };
        let path = diff_coverage::baseline_lcov(baseline).context("the baseline failed")?;
        let text =
            std::fs::read_to_string(&path).with_context(|| format!("cannot read the baseline {}", path.display()))?;
        // A baseline's relative file names are under this report's prefix.
        let text = report::absolute_lcov(&text, &self.path_prefix(merged));
        let before =
            crate::coverage::lcov::parse_lcov(&text, &path.display().to_string()).context("the baseline failed")?;
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
            .context("writing baseline.json and baseline.md failed")?;
        crate::say!("{} lines lost baseline coverage (LBC) against {}", report.lost_lines, path.display());
        if self.ctx.report.fail_on_lost && report.lost_lines > 0 {
            let files: Vec<String> = report
                .lost_baseline_coverage
                .iter()
                .map(|(f, r)| format!("{f}: {}", attribution::ranges_text(r)))
                .collect();
            return Err(Error::new(format!(
                "lost baseline coverage: {} lines the baseline {} covered are not covered now (CCL_COV_FAIL_ON_LOST=1):\n    {}\n(see {})",
                report.lost_lines,
                path.display(),
                files.join("\n    "),
                self.shown(&dir.join("baseline.md")).display()
            )));
        }
        Ok(Done::Completed)
    }
}
