//! The report's totals, typed until a writer shows them (`Totals`): the
//! text summary laid out as `llvm-cov report`, the normalised summary that is
//! snapshot-checked, and the `CCL_COV_FAIL_UNDER_*` bars. Every total is the
//! lcov model's (`coverage::model_totals`): llvm-cov's own summaries count the lines
//! of macro expansions in no file, its lcov export does.

use crate::coverage::llvm_export::{Counts, FileSummary, Metric, SummaryExport};
use crate::error::Result;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// `report/summary.txt`: per file and in total, the columns of `llvm-cov
/// report -show-region-summary -show-branch-summary`, with the model's
/// numbers; file names relative to `roots`.
pub(crate) fn summary_text(summary: &SummaryExport, roots: &[&Path]) -> String {
    let cover =
        |m: &Metric| if m.count == 0 { "-".to_string() } else { format!("{:.2}%", percent(m.covered, m.count)) };
    let cells = |c: &Counts| {
        let branches = c.branches.unwrap_or(Metric { count: 0, covered: 0 });
        let mut row = Vec::new();
        for m in [&c.regions, &c.functions, &c.lines, &branches] {
            row.extend([m.count.to_string(), (m.count - m.covered).to_string(), cover(m)]);
        }
        row
    };
    let mut rows: Vec<(String, Vec<String>)> =
        summary.files().iter().map(|f| (relative(&f.filename, roots), cells(&f.summary))).collect();
    rows.sort();
    rows.push(("TOTAL".to_string(), cells(summary.totals())));
    let header = [
        "Regions",
        "Missed Regions",
        "Cover",
        "Functions",
        "Missed Functions",
        "Executed",
        "Lines",
        "Missed Lines",
        "Cover",
        "Branches",
        "Missed Branches",
        "Cover",
    ];
    let name_width = rows.iter().map(|(n, _)| n.len()).chain(["Filename".len()]).max().unwrap_or(0) + 3;
    let widths: Vec<usize> = header.iter().map(|h| h.len().max(8) + 3).collect();
    let line = |name: &str, cells: &[String]| {
        let mut out = format!("{name:<name_width$}");
        for (cell, width) in cells.iter().zip(&widths) {
            out.push_str(&format!("{cell:>width$}"));
        }
        out.push('\n');
        out
    };
    let rule = "-".repeat(name_width + widths.iter().sum::<usize>()) + "\n";
    let header: Vec<String> = header.iter().map(|h| (*h).to_string()).collect();
    let mut out = line("Filename", &header);
    out.push_str(&rule);
    let (total, files) = rows.split_last().expect("the TOTAL row is there");
    for (name, cells) in files {
        out.push_str(&line(name, cells));
    }
    out.push_str(&rule);
    out.push_str(&line(&total.0, &total.1));
    out
}

/// A report's totals, typed until a writer shows them: covered and total of
/// each metric; regions and branches only where they are counted (NVIDIA
/// kernel lines have neither, older llvm-cov exports no branches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) lines: Metric,
    pub(crate) functions: Metric,
    pub(crate) regions: Option<Metric>,
    pub(crate) branches: Option<Metric>,
}

impl Totals {
    /// The totals of a summary export.
    pub(crate) fn of(summary: &SummaryExport) -> Totals {
        Totals::from(summary.totals())
    }

    /// `covered/count` strings of each metric (null where not counted), as
    /// `summary-device.json` and the snapshot show them.
    pub(crate) fn json(&self) -> Value {
        let m = |m: Option<Metric>| m.map_or(Value::Null, |m| Value::String(m.to_string()));
        json!({
            "lines": m(Some(self.lines)),
            "functions": m(Some(self.functions)),
            "regions": m(self.regions),
            "branches": m(self.branches),
        })
    }
}

impl From<&Counts> for Totals {
    fn from(c: &Counts) -> Totals {
        Totals { lines: c.lines, functions: c.functions, regions: Some(c.regions), branches: c.branches }
    }
}

pub(crate) fn percent(covered: u64, count: u64) -> f64 {
    if count == 0 { 100.0 } else { covered as f64 * 100.0 / count as f64 }
}

/// Whether any `CCL_COV_FAIL_UNDER_<METRIC>` bar is set (`bars`: the
/// variables as set, by name): known before the report is merged, so that a
/// run without one lists the check as ignored.
pub(crate) fn any_bar(bars: &BTreeMap<String, String>) -> bool {
    bars.values().any(|v| !v.is_empty())
}

/// Checks `CCL_COV_FAIL_UNDER_<METRIC>` bars against the totals; the
/// shortfalls, or `None` when no bar is set.
pub(crate) fn check_bars(summary: &SummaryExport, bars: &BTreeMap<String, String>) -> Result<Option<Vec<String>>> {
    let mut any = false;
    let mut short = Vec::new();
    for (metric, covered, count) in summary.totals().rows() {
        let Some((_, var)) = crate::env_names::FAIL_UNDER.iter().find(|(m, _)| *m == metric) else { continue };
        let value = bars.get(*var).map_or("", String::as_str);
        let Some(bar) = crate::env_names::percent(var, value)? else { continue };
        any = true;
        let got = percent(covered, count);
        if got < bar {
            short.push(format!(
                "{metric} {got:.2}% ({covered}/{count}) is under {}",
                crate::env_names::setting(var, value)
            ));
        }
    }
    Ok(any.then_some(short))
}

/// Checks `CCL_COV_FAIL_UNDER_DEVICE_BRANCHES` against the device's own branch totals
/// (`device`: `None` without device coverage, its `branches` `None` where they were not
/// measured, and `unavailable` says why): the shortfall, or `None` when the bar is not set. A bar
/// on branches nobody measured is a shortfall, never a pass.
pub(crate) fn check_device_bar(
    device: Option<&Totals>,
    unavailable: &[String],
    bars: &BTreeMap<String, String>,
) -> Result<Option<Vec<String>>> {
    let var = crate::env_names::FAIL_UNDER_DEVICE_BRANCHES;
    let value = bars.get(var).map_or("", String::as_str);
    let Some(bar) = crate::env_names::percent(var, value)? else { return Ok(None) };
    let setting = crate::env_names::setting(var, value);
    let short = match device.map(|d| d.branches) {
        None => Some(format!("device branches: this report has no device coverage, under {setting}")),
        Some(None) => Some(format!(
            "device branches were not measured ({}), under {setting}",
            if unavailable.is_empty() { "the device backend has none".to_owned() } else { unavailable.join("; ") }
        )),
        Some(Some(Metric { covered, count })) => (percent(covered, count) < bar)
            .then(|| format!("device branches {:.2}% ({covered}/{count}) is under {setting}", percent(covered, count))),
    };
    Ok(Some(short.into_iter().collect()))
}

/// A summary export's totals as `covered/count` strings, as
/// `summary-device.json` shows them (`tests/device_coverage.rs` reads them so).
pub fn totals(summary: &SummaryExport) -> Value {
    Totals::of(summary).json()
}

/// The summary made comparable between machines and runs: paths relative to
/// the source roots, `covered/count` per file and in total.
pub(crate) fn normalize(summary: &SummaryExport, roots: &[&Path]) -> Value {
    let mut files = serde_json::Map::new();
    let mut sorted: Vec<&FileSummary> = summary.files().iter().collect();
    sorted.sort_by(|a, b| a.filename.cmp(&b.filename));
    for file in sorted {
        files.insert(relative(&file.filename, roots), Totals::from(&file.summary).json());
    }
    json!({ "totals": Totals::of(summary).json(), "files": files })
}

/// A summary snapshot as insta writes it (`source:` header, pretty JSON),
/// for a config that has none yet: copied into `snapshots/`, insta reads it.
pub(crate) fn snapshot_text(value: &Value) -> String {
    let json = serde_json::to_string_pretty(value).expect("a JSON value serializes");
    format!("---\nsource: {}\n---\n{json}\n", file!())
}

pub(crate) fn relative(path: &str, roots: &[&Path]) -> String {
    let p = Path::new(path);
    roots
        .iter()
        .filter_map(|root| p.strip_prefix(root).ok())
        .min_by_key(|rel| rel.components().count())
        .map_or_else(|| path.to_string(), |rel| rel.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPORT: &str = r#"{"data":[{"files":[
        {"filename":"/src/fixtures/ccl/src/init.cc","summary":{"lines":{"count":10,"covered":7,"percent":70},"functions":{"count":2,"covered":2,"percent":100},"instantiations":{"count":2,"covered":2,"percent":100},"regions":{"count":5,"covered":4,"percent":80},"branches":{"count":4,"covered":1,"percent":25}}},
        {"filename":"/elsewhere/gen.cc","summary":{"lines":{"count":1,"covered":0,"percent":0},"functions":{"count":1,"covered":0,"percent":0},"instantiations":{"count":1,"covered":0,"percent":0},"regions":{"count":1,"covered":0,"percent":0},"branches":{"count":0,"covered":0,"percent":0}}}],
        "totals":{"lines":{"count":11,"covered":7,"percent":63},"functions":{"count":3,"covered":2,"percent":66},"instantiations":{"count":3,"covered":2,"percent":66},"regions":{"count":6,"covered":4,"percent":66},"branches":{"count":4,"covered":1,"percent":25}}}],
        "type":"llvm.coverage.json.export","version":"3.0.1"}"#;
    #[test]
    fn normalize_makes_paths_relative_and_counts_compact() {
        let export = SummaryExport::parse(EXPORT).unwrap();
        let v = normalize(&export, &[Path::new("/src/fixtures"), Path::new("/src")]);
        assert_eq!(v["totals"]["lines"], "7/11");
        assert_eq!(v["files"]["ccl/src/init.cc"]["branches"], "1/4");
        assert_eq!(v["files"]["/elsewhere/gen.cc"]["functions"], "0/1");
        assert_eq!(
            export.totals().rows(),
            [("lines", 7, 11), ("functions", 2, 3), ("regions", 4, 6), ("branches", 1, 4)]
        );
        let bars = |lines: &str| BTreeMap::from([("CCL_COV_FAIL_UNDER_LINES".to_string(), lines.to_string())]);
        assert_eq!(check_bars(&export, &BTreeMap::new()).unwrap(), None);
        assert!(!any_bar(&BTreeMap::new()) && !any_bar(&bars("")));
        assert!(any_bar(&bars("60")));
        assert_eq!(check_bars(&export, &bars("60")).unwrap(), Some(vec![]));
        let short = check_bars(&export, &bars("70")).unwrap().unwrap();
        assert_eq!(short, ["lines 63.64% (7/11) is under CCL_COV_FAIL_UNDER_LINES=70"]);
        assert!(check_bars(&export, &bars("lots")).is_err());
        assert!(check_bars(&export, &bars("150")).is_err(), "a bar no coverage can reach");
        let metrics: Vec<&str> = crate::env_names::FAIL_UNDER.iter().map(|(m, _)| *m).collect();
        assert_eq!(export.totals().rows().iter().map(|r| r.0).collect::<Vec<_>>(), metrics, "every metric has a bar");
        for (_, var) in crate::env_names::FAIL_UNDER {
            let known = crate::context::known_env().find(|k| k.name == var).map(|k| k.kind);
            assert_eq!(known, Some(crate::env_names::ValueKind::Percent), "{var} is a known percentage");
        }
    }

    #[test]
    fn the_text_summary_lays_out_the_totals_as_llvm_cov_report() {
        let export = SummaryExport::parse(EXPORT).unwrap();
        let text = summary_text(&export, &[Path::new("/src/fixtures")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[0].starts_with("Filename ") && lines[0].ends_with("Missed Branches      Cover"), "{text}");
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        // Sorted by the name shown: the absolute path first.
        assert_eq!(cells(lines[2])[0], "/elsewhere/gen.cc");
        assert_eq!(
            cells(lines[3]),
            ["ccl/src/init.cc", "5", "1", "80.00%", "2", "0", "100.00%", "10", "3", "70.00%", "4", "3", "25.00%"]
        );
        assert_eq!(cells(lines[2])[10..], ["0", "0", "-"], "no branches: no percentage");
        assert!(lines[1].chars().all(|c| c == '-') && lines[4] == lines[1], "{text}");
        assert_eq!(cells(lines[5])[..4], ["TOTAL", "6", "2", "66.67%"]);
        assert_eq!(cells(lines[5])[7..10], ["11", "4", "63.64%"]);
    }

    #[test]
    fn a_written_snapshot_is_one_insta_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let value = json!({"config": "mine", "files": {"a.cc": {"lines": "1/2"}}, "empty": [], "trials": 3});
        std::fs::write(dir.path().join("coverage_summary-mine.snap"), snapshot_text(&value)).unwrap();
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(dir.path());
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_json_snapshot!("coverage_summary-mine", value));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["coverage_summary-mine.snap"], "insta wrote nothing of its own");
    }

    #[test]
    fn the_device_branch_bar_reads_the_device_s_own_branches() {
        let bar = |value: &str| {
            BTreeMap::from([(crate::env_names::FAIL_UNDER_DEVICE_BRANCHES.to_string(), value.to_string())])
        };
        let device = |branches| Totals {
            lines: Metric { covered: 9, count: 10 },
            functions: Metric { covered: 1, count: 1 },
            regions: None,
            branches,
        };
        let measured = device(Some(Metric { covered: 30, count: 40 }));
        assert_eq!(check_device_bar(Some(&measured), &[], &BTreeMap::new()).unwrap(), None);
        assert_eq!(check_device_bar(Some(&measured), &[], &bar("75")).unwrap(), Some(vec![]));
        assert_eq!(
            check_device_bar(Some(&measured), &[], &bar("80")).unwrap().unwrap(),
            ["device branches 75.00% (30/40) is under CCL_COV_FAIL_UNDER_DEVICE_BRANCHES=80"]
        );
        // A bar on branches nobody measured fails and says why.
        let why = ["r.tsv: a version 3 record counts executed instructions only".to_string()];
        assert_eq!(
            check_device_bar(Some(&device(None)), &why, &bar("1")).unwrap().unwrap(),
            [
                "device branches were not measured (r.tsv: a version 3 record counts executed instructions only), under CCL_COV_FAIL_UNDER_DEVICE_BRANCHES=1"
            ]
        );
        assert_eq!(
            check_device_bar(None, &[], &bar("1")).unwrap().unwrap(),
            ["device branches: this report has no device coverage, under CCL_COV_FAIL_UNDER_DEVICE_BRANCHES=1"]
        );
        assert!(check_device_bar(Some(&measured), &[], &bar("lots")).is_err());
    }
}
