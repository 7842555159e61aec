//! The result on screen once a report is installed, as cargo-llvm-cov
//! prints its table: the totals (host and device apart), the least-covered
//! files, and where the reports are. The files hold everything else.

use super::Totals;
use crate::coverage::llvm_export::{Metric, SummaryExport};
use std::fmt::Write;
use std::path::Path;

/// How many of the least-covered files are named.
const LEAST_COVERED: usize = 5;
const METRICS: [&str; 4] = ["lines", "functions", "regions", "branches"];

/// A metric's `covered/count` with its percentage; `-` where it is not counted.
fn cell(metric: Option<Metric>) -> String {
    match metric {
        None => "-".into(),
        Some(m) if m.count > 0 => format!("{m} {:.1}%", 100.0 * m.covered as f64 / m.count as f64),
        Some(m) => m.to_string(),
    }
}

/// The table: `host` and `device` are the report's totals (the device row
/// only with device coverage, with what its lines are); `roots` shorten file
/// names; `pages` are the report's files, as paths to show.
pub(crate) fn table(
    all: &SummaryExport,
    host: &Totals,
    device: Option<(&str, &Totals)>,
    roots: &[&Path],
    pages: &[String],
) -> String {
    let mut out = String::new();
    let header: String = METRICS.iter().map(|m| format!("{m:<22}")).collect();
    let _ = writeln!(out, "{:<10}{}", "coverage", header.trim_end());
    let row = |out: &mut String, name: &str, t: &Totals| {
        let cells: String =
            [Some(t.lines), Some(t.functions), t.regions, t.branches].map(|m| format!("{:<22}", cell(m))).concat();
        let _ = writeln!(out, "{name:<10}{}", cells.trim_end());
    };
    row(&mut out, "host", host);
    if let Some((what, totals)) = device {
        row(&mut out, "device", totals);
        let _ = writeln!(out, "          (device: {what})");
    }
    let mut files: Vec<(f64, String, u64, u64)> = all
        .files()
        .iter()
        .filter(|f| f.summary.lines.count > 0)
        .map(|f| {
            let (c, n) = (f.summary.lines.covered, f.summary.lines.count);
            (c as f64 / n as f64, super::relative(&f.filename, roots), c, n)
        })
        .collect();
    files.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    if !files.is_empty() {
        let _ = writeln!(out, "least covered files (lines):");
        for (share, name, c, n) in files.iter().take(LEAST_COVERED) {
            let _ = writeln!(out, "  {:>5.1}%  {c}/{n}  {name}", 100.0 * share);
        }
    }
    let _ = writeln!(out, "reports:");
    for page in pages {
        let _ = writeln!(out, "  {page}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_least_covered_files_and_pages() {
        let export = SummaryExport::parse(
            r#"{"data":[{"files":[
                {"filename":"/src/a.cc","summary":{"lines":{"count":10,"covered":9},"functions":{"count":1,"covered":1},"regions":{"count":1,"covered":1}}},
                {"filename":"/src/b.cc","summary":{"lines":{"count":4,"covered":1},"functions":{"count":1,"covered":0},"regions":{"count":1,"covered":0}}},
                {"filename":"/src/empty.h","summary":{"lines":{"count":0,"covered":0},"functions":{"count":0,"covered":0},"regions":{"count":0,"covered":0}}}],
              "totals":{"lines":{"count":14,"covered":10},"functions":{"count":2,"covered":1},"regions":{"count":2,"covered":1}}}]}"#,
        )
        .unwrap();
        let m = |covered, count| Metric { covered, count };
        let host = Totals { lines: m(10, 14), functions: m(1, 2), regions: Some(m(1, 2)), branches: None };
        let device = Totals { lines: m(3, 4), functions: m(1, 1), regions: None, branches: None };
        let text =
            table(&export, &host, Some(("CUPTI SASS", &device)), &[Path::new("/src")], &["r/html/index.html".into()]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("host      10/14 71.4%"), "{text}");
        assert!(lines[1].contains("1/2 50.0%") && lines[1].ends_with('-'), "{text}");
        assert!(lines[2].starts_with("device    3/4 75.0%"), "{text}");
        // Least covered first; a file without lines is not ranked.
        assert_eq!(lines[5], "   25.0%  1/4  b.cc", "{text}");
        assert_eq!(lines[6], "   90.0%  9/10  a.cc", "{text}");
        assert!(!text.contains("empty.h"));
        assert!(text.ends_with("reports:\n  r/html/index.html\n"), "{text}");
    }
}
