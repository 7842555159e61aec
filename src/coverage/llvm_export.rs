//! `llvm-cov export -summary-only`, typed: parsed once where llvm-cov's text
//! comes in, and every total, bar and normalised summary is computed from
//! these types, not from the JSON text again.

use crate::error::{Context, Error, Result};
use serde::Deserialize;

/// One summary export: the files llvm-cov reported on and their totals.
#[derive(Debug, Clone, Deserialize)]
pub struct SummaryExport {
    data: Vec<ExportData>,
}

#[derive(Debug, Clone, Deserialize)]
struct ExportData {
    files: Vec<FileSummary>,
    totals: Counts,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct FileSummary {
    pub(crate) filename: String,
    pub(crate) summary: Counts,
}

/// Covered and total counts of each metric. Branches are absent from the
/// exports of older LLVM releases.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Counts {
    pub(crate) lines: Metric,
    pub(crate) functions: Metric,
    pub(crate) regions: Metric,
    #[serde(default)]
    pub(crate) branches: Option<Metric>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) struct Metric {
    pub(crate) count: u64,
    pub(crate) covered: u64,
}

/// `covered/count`, as every report shows a metric.
impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.covered, self.count)
    }
}

impl SummaryExport {
    /// Parses llvm-cov's output; an export without data is an error.
    pub(crate) fn parse(text: &str) -> Result<SummaryExport> {
        let export: SummaryExport = serde_json::from_str(text).context("unexpected llvm-cov export")?;
        if export.data.is_empty() {
            return Err(Error::new("llvm-cov export has no data"));
        }
        Ok(export)
    }

    pub(crate) fn totals(&self) -> &Counts {
        &self.data[0].totals
    }

    pub(crate) fn files(&self) -> &[FileSummary] {
        &self.data[0].files
    }

    /// The source files the export covers.
    pub fn file_names(&self) -> Vec<&str> {
        self.files().iter().map(|f| f.filename.as_str()).collect()
    }
}

impl Counts {
    /// `(metric, covered, count)` for each metric the export has.
    pub(crate) fn rows(&self) -> Vec<(&'static str, u64, u64)> {
        let mut rows = vec![
            ("lines", self.lines.covered, self.lines.count),
            ("functions", self.functions.covered, self.functions.count),
            ("regions", self.regions.covered, self.regions.count),
        ];
        if let Some(b) = &self.branches {
            rows.push(("branches", b.covered, b.count));
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_export_without_data_or_of_another_shape_is_an_error() {
        assert!(SummaryExport::parse(r#"{"data":[]}"#).unwrap_err().to_string().contains("no data"));
        assert!(SummaryExport::parse("[]").unwrap_err().to_string().contains("unexpected llvm-cov export"));
        let one = r#"{"data":[{"files":[],"totals":{"lines":{"count":2,"covered":1},"functions":{"count":1,"covered":1},"regions":{"count":3,"covered":0}}}]}"#;
        let export = SummaryExport::parse(one).unwrap();
        assert_eq!(export.totals().rows(), [("lines", 1, 2), ("functions", 1, 1), ("regions", 0, 3)]);
    }
}
