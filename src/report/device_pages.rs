//! Device coverage pages (NVIDIA's kernel lines): `report/html/device/`, one page per source
//! file with each line's count, and an index with the totals, beside
//! llvm-cov's host pages (llvm-cov cannot show coverage it did not compute).

use crate::coverage::source_names::SourceNames;
use crate::device::lines::{DeviceCoverage, DeviceLines, LineBranches, Outcomes};
use crate::error::Result;
use crate::report::escape_html as escape;
use std::collections::BTreeMap;
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
        let page = file_page(i);
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
                "<tr class=\"{class}\" id=\"L{n}\"><td class=\"num\">{n}</td><td class=\"num\">{count}</td><td class=\"num\">{branch_text}</td><td><pre>{}</pre></td></tr>",
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

/// The page of the `i`th file of the coverage, in the device folder.
fn file_page(i: usize) -> String {
    format!("file{i}.html")
}

/// The device branches of one source file, for llvm-cov's page of it: each line's, and where
/// the device pages show the file (`device/file<i>.html`, from the HTML folder).
#[derive(Debug)]
pub(crate) struct BranchMarks {
    page: String,
    lines: BTreeMap<u32, LineBranches>,
}

/// Each file's device branches by the name llvm-cov gave it (its page is
/// `coverage/<name>.html`): every name llvm-cov reported that the report names as the file,
/// so a copy of a header under the build shows its source file's branches too.
pub(crate) fn host_page_marks(coverage: &DeviceCoverage, names: &SourceNames) -> BTreeMap<String, BranchMarks> {
    let mut marks = BTreeMap::new();
    for (file, lines) in coverage.branch_lines() {
        let Some(i) = coverage.files.keys().position(|f| f == file) else { continue };
        for reported in names.reported_as(file) {
            let page = format!("device/{}", file_page(i));
            marks.insert(reported, BranchMarks { page, lines: lines.clone() });
        }
    }
    marks
}

/// llvm-cov's source `page` with each line's device branches shown under it as llvm-cov shows
/// a host line's branches (`Branch (l:c): [True: n, False: m]`, an outcome that never happened
/// in red), each linking to the line on the device page; `to_html`: the way from the page to the
/// HTML folder. A line the page does not have is left out.
pub(crate) fn mark_host_page(page: &str, marks: &BranchMarks, to_html: &str) -> String {
    let mut out = String::with_capacity(page.len() + 200 * marks.lines.len());
    let mut from = 0;
    for (line, branches) in &marks.lines {
        let Some(row) = page[from..].find(&row_start(*line)).map(|at| from + at) else { continue };
        let end = page[row + 1..]
            .find(&row_start(line.saturating_add(1)))
            .or_else(|| page[row + 1..].find("</table>"))
            .map_or(page.len(), |at| row + 1 + at);
        let Some(at) = page[row..end].rfind("</td></tr>").map(|at| row + at) else { continue };
        out.push_str(&page[from..at]);
        out.push_str("<div class='expansion-view'><pre>");
        let href = format!("{to_html}{}#L{line}", marks.page);
        for (k, outcomes) in branches.iter().enumerate() {
            let (taken, not_taken) = match outcomes {
                Some(o) => (Some(o.taken), Some(o.not_taken)),
                None => (None, None),
            };
            let _ = writeln!(
                out,
                "  <a href='{href}' title='threads, summed over launches; - never executed'>Device branch {k}</a>: [{}, {}]",
                outcome("Taken", taken),
                outcome("Not taken", not_taken)
            );
        }
        out.push_str("</pre></div>");
        from = at;
    }
    out.push_str(&page[from..]);
    out
}

/// Where llvm-cov's row of source line `line` starts.
fn row_start(line: u32) -> String {
    format!("<tr><td class='line-number'><a name='L{line}' href='#L{line}'><pre>{line}</pre></a></td>")
}

/// One outcome as llvm-cov writes a host branch's: its name red when it never happened.
fn outcome(name: &str, count: Option<u64>) -> String {
    let (name_class, count_class) =
        if count.is_some_and(|c| c > 0) { ("None", "covered-line") } else { ("red branch", "uncovered-line") };
    let count = count.map_or("-".to_string(), |c| c.to_string());
    format!("<span class='{name_class}'>{name}</span>: <span class='{count_class}'>{count}</span>")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llvm-cov 22's own page of a file whose line 2 has a host branch: the device branches of
    /// lines 2 and 4 go under their lines (line 2's after llvm-cov's own branch), an outcome
    /// that never happened in red as llvm-cov has it, each linking to its line on the device
    /// page; a line the page does not have is left out, and nothing else changes.
    #[test]
    fn llvm_cov_s_page_shows_device_branches_under_their_lines() {
        use crate::exec::process::Cmd;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let llvm = "/usr/lib/llvm-22/bin";
        let src = d.join("a.c");
        std::fs::write(&src, "int f(int x) {\n  if (x > 3)\n    return 1;\n  return 0;\n}\nint main(int argc, char **argv) { return f(argc); }\n").unwrap();
        let (exe, raw, profdata, out) = (d.join("a"), d.join("a.profraw"), d.join("a.profdata"), d.join("html"));
        let run = |cmd: Cmd| cmd.read().unwrap();
        run(Cmd::new(format!("{llvm}/clang"))
            .args(["-fprofile-instr-generate", "-fcoverage-mapping", "-o"])
            .arg(&exe)
            .arg(&src));
        run(Cmd::new(&exe).env("LLVM_PROFILE_FILE", &raw));
        run(Cmd::new(format!("{llvm}/llvm-profdata")).args(["merge", "-o"]).arg(&profdata).arg(&raw));
        run(Cmd::new(format!("{llvm}/llvm-cov"))
            .args(["show", "-format=html", "-show-line-counts-or-regions", "-show-branches=count"])
            .arg(&exe)
            .arg("-instr-profile")
            .arg(&profdata)
            .arg("-output-dir")
            .arg(&out));
        let page = std::fs::read_to_string(out.join(format!("coverage{}.html", src.display()))).unwrap();
        let taken_only = Some(Outcomes { taken: 64, not_taken: 0 });
        let marks = BranchMarks {
            page: "device/file3.html".into(),
            lines: BTreeMap::from([
                (2, vec![taken_only, None]),
                (4, vec![Some(Outcomes { taken: 5, not_taken: 7 })]),
                (99, vec![None]),
            ]),
        };
        let marked = mark_host_page(&page, &marks, "../../");
        let row = |n: u32| {
            let at = marked.find(&row_start(n)).unwrap();
            let end = marked[at + 1..].find("<tr><td class='line-number'>").map_or(marked.len(), |e| at + 1 + e);
            marked[at..end].to_string()
        };
        let two = row(2);
        let host = two.find("Branch (").expect("llvm-cov's own branch view of line 2");
        let device = two.find("Device branch 0").expect("line 2's device branches");
        assert!(host < device, "{two}");
        let link = "<a href='../../device/file3.html#L2' title='threads, summed over launches; - never executed'>";
        assert!(
            two.contains(&format!("{link}Device branch 0</a>: [<span class='None'>Taken</span>: <span class='covered-line'>64</span>, <span class='red branch'>Not taken</span>: <span class='uncovered-line'>0</span>]")),
            "{two}"
        );
        assert!(
            two.contains(&format!("{link}Device branch 1</a>: [<span class='red branch'>Taken</span>: <span class='uncovered-line'>-</span>, <span class='red branch'>Not taken</span>: <span class='uncovered-line'>-</span>]")),
            "{two}"
        );
        assert!(two.ends_with("</pre></div></td></tr>"), "the view sits in the line's code cell: {two}");
        let four = row(4);
        assert!(four.contains("Device branch 0</a>: [<span class='None'>Taken</span>: <span class='covered-line'>5</span>, <span class='None'>Not taken</span>: <span class='covered-line'>7</span>]"), "{four}");
        assert!(!row(3).contains("Device branch"), "{}", row(3));
        assert_eq!(marked.matches("Device branch").count(), 3, "line 99 is not on the page");
        let views = regex::Regex::new(r"<div class='expansion-view'><pre>(  <a href='[^']*' title='[^']*'>Device branch \d+</a>: [^\n]*\n)+</pre></div>").unwrap();
        assert_eq!(views.replace_all(&marked, ""), page, "nothing else changes");
    }

    #[test]
    fn a_line_whose_branches_did_not_go_both_ways_is_marked_partial() {
        let both = Some(Outcomes { taken: 32, not_taken: 32 });
        assert_eq!(branch_cell(&[both]), (None, "[32, 32]".to_string()));
        assert_eq!(branch_cell(&[both, Some(Outcomes { taken: 0, not_taken: 64 })]).0, Some("part"));
        assert_eq!(branch_cell(&[both, None]), (Some("part"), "[32, 32] [-, -]".to_string()));
    }
}
