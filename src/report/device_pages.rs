//! Device coverage pages (NVIDIA's kernel lines): `report/html/device/`, one page per source
//! file with each line's count, and an index with the totals, beside
//! llvm-cov's host pages (llvm-cov cannot show coverage it did not compute).

use crate::device::lines::{DeviceLines, Outcomes};
use crate::error::Result;
use crate::report::escape_html as escape;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn percent(covered: u64, count: u64) -> f64 {
    if count == 0 { 100.0 } else { covered as f64 * 100.0 / count as f64 }
}

const STYLE: &str = "body{font-family:sans-serif}table{border-collapse:collapse}td,th{padding:2px 8px;border:1px solid #ddd}\
pre{margin:0}.hit{background:#dfd}.miss{background:#fdd}.part{background:#ffd}.num{text-align:right;color:#666}";

/// A line's device branches as the page shows them, `[taken, not taken]` each (`-`: never
/// executed), and the line's class when some outcome of them never happened (`part`), as
/// llvm-cov marks a host line whose branches were not all taken both ways.
fn branch_cell(branches: &[Option<Outcomes>]) -> (Option<&'static str>, String) {
    let text = branches
        .iter()
        .map(|outcomes| match outcomes {
            Some(Outcomes { taken, not_taken }) => format!("[{taken}, {not_taken}]"),
            None => "[-, -]".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    let partial = branches.iter().any(|o| o.is_none_or(|o| o.taken == 0 || o.not_taken == 0));
    (partial.then_some("part"), text)
}

/// Writes the pages into `dir` and returns the index's path; `source` reads a file's text by
/// its name in the report.
pub(crate) fn write(
    ws: &crate::workspace::Workspace,
    dir: &Path,
    title: &str,
    lines: &DeviceLines,
    source: &dyn Fn(&str) -> Option<String>,
) -> Result<PathBuf> {
    let coverage = &lines.all;
    let ((lh, lf), (fh, ff)) = coverage.totals();
    let (bh, bf) = coverage.branch_totals();
    let placed = coverage.branch_lines();
    let branches = if coverage.branches.is_empty() {
        String::new()
    } else {
        format!(", branches {bh}/{bf} ({:.2}%, each [taken, not taken] in threads)", percent(bh, bf))
    };
    let mut index = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}: device</title><style>{STYLE}</style></head><body>\
<h1>{t}: {name}</h1><p>Lines {lh}/{lf} ({:.2}%), kernels {fh}/{ff} ({:.2}%){branches}. Host coverage: <a href=\"../index.html\">llvm-cov's report</a>.</p>\
<table><tr><th>file</th><th>lines</th><th>%</th><th>kernels</th></tr>",
        percent(lh, lf),
        percent(fh, ff),
        t = escape(title),
        name = escape(lines.origin.name)
    );
    for (i, (file, cov)) in coverage.files.iter().enumerate() {
        let hit = cov.lines.values().filter(|c| **c > 0).count() as u64;
        let total = cov.lines.len() as u64;
        let kernels = cov.functions.values().filter(|f| f.hits > 0).count();
        let page = format!("file{i}.html");
        let _ = write!(
            index,
            "<tr><td><a href=\"{page}\">{}</a></td><td>{hit}/{total}</td><td>{:.2}</td><td>{kernels}/{}</td></tr>",
            escape(file),
            percent(hit, total),
            cov.functions.len()
        );
        let source = source(file);
        let mut body = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{f}</title><style>{STYLE}</style></head><body>\
<p><a href=\"index.html\">device coverage</a></p><h2>{f}</h2><table><tr><th>line</th><th>count</th><th>branches</th><th>source</th></tr>",
            f = escape(file)
        );
        let lines: Vec<(u32, String)> = match &source {
            Some(text) => text.lines().enumerate().map(|(n, l)| (n as u32 + 1, l.to_string())).collect(),
            None => cov.lines.keys().map(|n| (*n, String::from("(source not found)"))).collect(),
        };
        let file_branches = placed.get(file.as_str());
        for (n, text) in lines {
            let (class, count) = match cov.lines.get(&n) {
                Some(0) => ("miss", "0".to_string()),
                Some(c) => ("hit", c.to_string()),
                None => ("", String::new()),
            };
            let (partial, branch_text) =
                file_branches.and_then(|b| b.get(&n)).map_or((None, String::new()), |b| branch_cell(b));
            let class = if class == "hit" { partial.unwrap_or(class) } else { class };
            let _ = write!(
                body,
                "<tr class=\"{class}\"><td class=\"num\">{n}</td><td class=\"num\">{count}</td><td class=\"num\">{branch_text}</td><td><pre>{}</pre></td></tr>",
                escape(&text)
            );
        }
        body.push_str("</table></body></html>\n");
        ws.write(&dir.join(&page), body.as_bytes())?;
    }
    index.push_str("</table></body></html>\n");
    let path = dir.join("index.html");
    ws.write(&path, index.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_whose_branches_did_not_go_both_ways_is_marked_partial() {
        let both = Some(Outcomes { taken: 32, not_taken: 32 });
        assert_eq!(branch_cell(&[both]), (None, "[32, 32]".to_string()));
        assert_eq!(branch_cell(&[both, Some(Outcomes { taken: 0, not_taken: 64 })]).0, Some("part"));
        assert_eq!(branch_cell(&[both, None]), (Some("part"), "[32, 32] [-, -]".to_string()));
    }
}
