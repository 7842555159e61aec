//! The model every total comes from: the merged lcov (llvm-cov's export,
//! recounted, with NVIDIA's kernel lines folded in) and its summary, each
//! made once and written as `coverage.lcov` and `summary.json`.

use super::Session;
use super::merge::Merged;
use crate::coverage::lcov::{self, Lcov};
use crate::coverage::llvm_export::{Metric, SummaryExport};
use crate::device::lines as device_lines;
use crate::error::{Context, Result};
use crate::report::{self, Totals};
use serde_json::json;

/// The model: the merged lcov as text (host records with NVIDIA's kernel
/// lines folded in, one record per file) and parsed.
pub(super) struct ModelText {
    pub(super) text: String,
    /// The host records alone, when kernel lines were folded into `text`.
    host: Option<String>,
    model: Lcov,
}

/// The model's summary over all objects (`summary.json`), and the host and
/// device totals when there is device code.
pub(super) struct ModelSummary {
    pub(super) all: SummaryExport,
    pub(super) host: Totals,
    pub(super) device: Option<Totals>,
}

impl Session {
    /// The model's summary, made from the `model` the merge gave (once,
    /// by the first step that needs it).
    pub(super) fn summary(&self, merged: &Merged, model: &ModelText) -> Result<&ModelSummary> {
        self.made
            .summary
            .get_or_init(|| {
                let dir = self.report_dir();
                let (text, all) = merged.inputs.model_summary(&model.model)?;
                self.ctx.workspace.write(&dir.join("summary.json"), text.as_bytes())?;
                let m = &merged.manifest;
                if let Some(lines) = &merged.device_lines {
                    let device = device_totals(&lines.all);
                    let summary = json!({
                        "source": lines.origin.id,
                        "totals": device.json(),
                        "not_counted": lines.not_counted,
                        "beyond_max_launches": lines.beyond_max_launches,
                        "branches_unavailable": lines.branches_unavailable,
                    });
                    self.ctx.workspace.write(
                        &dir.join("summary-device.json"),
                        serde_json::to_string_pretty(&summary).expect("totals serialize").as_bytes(),
                    )?;
                    let host = lcov::parse_lcov(model.host.as_deref().unwrap_or(&model.text), "the host lcov")?;
                    let host = merged.inputs.model_summary(&host)?.1;
                    return Ok(ModelSummary { host: Totals::of(&host), all, device: Some(device) });
                }
                if m.device_objects.is_empty() {
                    return Ok(ModelSummary { host: Totals::of(&all), all, device: None });
                }
                let host = merged
                    .inputs
                    .with_objects(m.instrumented_objects())
                    .summary_json(&self.ctx.workspace, &dir.join("summary-host.json"))?;
                let device = merged
                    .inputs
                    .with_objects(m.llvm_device_objects())
                    .summary_json(&self.ctx.workspace, &dir.join("summary-device.json"))?;
                Ok(ModelSummary { host: Totals::of(&host), device: Some(Totals::of(&device)), all })
            })
            .as_ref()
            .map_err(|e| e.clone().context("the model's summary (llvm-cov export -summary-only) failed"))
    }

    /// The model: llvm-cov's lcov export, its per-record totals recounted
    /// from its records, and NVIDIA's kernel lines; `coverage.lcov` gets it
    /// with the path prefix taken off.
    pub(super) fn model(&self, merged: &Merged) -> Result<&ModelText> {
        let out = self.report_dir().join("coverage.lcov");
        self.made
            .model
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
                let prefix = self.path_prefix(merged);
                self.ctx.workspace.write(&out, report::relative_lcov(&text, &prefix).as_bytes())?;
                let codecov = report::codecov_json(&model, &prefix);
                self.ctx.workspace.write(&self.report_dir().join("codecov.json"), codecov.as_bytes())?;
                // The kernel lines alone, for checking them against NVIDIA's own tools.
                if let Some(lines) = &merged.device_lines {
                    let device = report::relative_lcov(&device_lines::to_lcov(&lines.all), &prefix);
                    self.ctx.workspace.write(&self.report_dir().join("device.lcov"), device.as_bytes())?;
                }
                Ok(ModelText { text, host, model })
            })
            .as_ref()
            .map_err(|e| e.clone().context("the model (llvm-cov export -format=lcov) failed"))
    }

    /// `coverage.json`: llvm-cov's full export with the model's summaries.
    pub(super) fn json(&self, merged: &Merged, model: &ModelText) -> Result<()> {
        let text = merged.inputs.json(&model.model).context("llvm-cov export -format=text failed")?;
        let text = report::relative_json(&text, &self.path_prefix(merged));
        self.ctx
            .workspace
            .write(&self.report_dir().join("coverage.json"), text.as_bytes())
            .context("writing coverage.json failed")
    }
}

/// Device totals: lines, kernels and, where the backend measured them, branch outcomes; no
/// regions.
fn device_totals(lines: &device_lines::DeviceCoverage) -> Totals {
    let ((lh, lf), (fh, ff)) = lines.totals();
    let (bh, bf) = lines.branch_totals();
    Totals {
        lines: Metric { covered: lh, count: lf },
        functions: Metric { covered: fh, count: ff },
        regions: None,
        branches: (!lines.branches.is_empty()).then_some(Metric { covered: bh, count: bf }),
    }
}
