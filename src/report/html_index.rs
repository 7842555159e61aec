//! `report/html/index.html` from the model: llvm-cov's index counts lines
//! per function in its main file only, so its totals leave out the lines of
//! macro expansions that lcov, Cobertura and every other format count. The
//! page is written as llvm-cov writes its own (its `style.css` and
//! `control.js`, the same columns, colours and row classes), and links to
//! llvm-cov's page of each file.

use crate::coverage::llvm_export::{Counts, Metric, SummaryExport};
use crate::report::escape_html as escape;
use std::fmt::Write;

/// What the index shows besides the summary.
pub(crate) struct Index<'a> {
    pub(crate) title: &'a str,
    pub(crate) created: &'a str,
    /// A file's name as the report shows it (relative to the source roots).
    pub(crate) shown: &'a dyn Fn(&str) -> String,
    /// The link to llvm-cov's page of a file, when it wrote one.
    pub(crate) page: &'a dyn Fn(&str) -> Option<String>,
}

/// One cell as llvm-cov writes it: `  76.68% (720/939)`, green at 100 %,
/// red under 80 % (its default watermarks), grey when nothing counts; the
/// attribution pages use it too, so that both indexes colour alike.
pub(crate) fn cell(m: &Metric) -> String {
    let (text, class) = if m.count == 0 {
        (format!("- ({}/{})", m.covered, m.count), "column-entry-gray")
    } else {
        let pct = super::percent(m.covered, m.count);
        let class = if pct >= 100.0 {
            "column-entry-green"
        } else if pct < 80.0 {
            "column-entry-red"
        } else {
            "column-entry-yellow"
        };
        (format!("{pct:>7.2}% ({}/{})", m.covered, m.count), class)
    };
    format!("<td class='{class}'><pre>{text}</pre></td>")
}

fn cells(c: &Counts) -> String {
    let branches = c.branches.unwrap_or(Metric { count: 0, covered: 0 });
    [&c.functions, &c.lines, &c.regions, &branches].into_iter().map(cell).collect()
}

/// The page's HTML.
pub(crate) fn index(summary: &SummaryExport, index: &Index) -> String {
    let mut files: Vec<(String, &str, &Counts)> =
        summary.files().iter().map(|f| ((index.shown)(&f.filename), f.filename.as_str(), &f.summary)).collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = format!(
        "<!doctype html><html><head><meta name='viewport' content='width=device-width,initial-scale=1'>\
         <meta charset='UTF-8'><link rel='stylesheet' type='text/css' href='style.css'><script src='control.js'></script>\
         </head><body><h1>{}</h1><h2>Coverage Report</h2><h4>Created: {}</h4>\
         <p>Totals from ccl-coverage's coverage model, the same in every format of this report: lines, functions \
         and branches as <code>coverage.lcov</code> counts them (lines of macro expansions included), regions as \
         llvm-cov counts them; the file pages are llvm-cov's. Click \
         <a href='http://clang.llvm.org/docs/SourceBasedCodeCoverage.html#interpreting-reports'>here</a> for \
         information about interpreting this report.</p><div class='centered'><table><tr>",
        escape(index.title),
        escape(index.created)
    );
    for column in ["Filename", "Function Coverage", "Line Coverage", "Region Coverage", "Branch Coverage"] {
        let _ = write!(out, "<td class='column-entry-bold'>{column}</td>");
    }
    out.push_str("</tr>");
    for (shown, file, counts) in files {
        let name = match (index.page)(file) {
            Some(href) => format!("<a href='{}'>{}</a>", escape(&href), escape(&shown)),
            None => escape(&shown),
        };
        let _ = write!(out, "<tr class='light-row'><td><pre>{name}</pre></td>{}</tr>", cells(counts));
    }
    let _ = write!(out, "<tr class='light-row-bold'><td><pre>Totals</pre></td>{}</tr>", cells(summary.totals()));
    out.push_str("</table></div></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_shows_the_models_totals_in_llvm_covs_style() {
        let summary = SummaryExport::parse(
            r#"{"data":[{"files":[
                {"filename":"/src/b.cc","summary":{"lines":{"count":4,"covered":4},"functions":{"count":1,"covered":1},"regions":{"count":5,"covered":3},"branches":{"count":0,"covered":0}}},
                {"filename":"/src/<a>.h","summary":{"lines":{"count":2,"covered":1},"functions":{"count":0,"covered":0},"regions":{"count":0,"covered":0},"branches":{"count":2,"covered":2}}}],
              "totals":{"lines":{"count":6,"covered":5},"functions":{"count":1,"covered":1},"regions":{"count":5,"covered":3},"branches":{"count":2,"covered":2}}}]}"#,
        )
        .unwrap();
        let html = index(
            &summary,
            &Index {
                title: "ccl-coverage: local (build b1)",
                created: "2026-12-01 12:00",
                shown: &|f| f.trim_start_matches("/src/").to_string(),
                page: &|f| (f == "/src/b.cc").then(|| format!("coverage{f}.html")),
            },
        );
        assert!(html.contains("href='style.css'") && html.contains("<h2>Coverage Report</h2>"), "{html}");
        let b = html.find("<a href='coverage/src/b.cc.html'>b.cc</a>").unwrap();
        let a = html.find("<pre>&lt;a&gt;.h</pre>").expect("a file without a page is named, not linked");
        assert!(a < b, "sorted by name: {html}");
        assert!(html.contains("<td class='column-entry-green'><pre> 100.00% (4/4)</pre></td><td class='column-entry-red'><pre>  60.00% (3/5)</pre></td><td class='column-entry-gray'><pre>- (0/0)</pre></td>"), "{html}");
        assert!(html.contains("<tr class='light-row-bold'><td><pre>Totals</pre></td><td class='column-entry-green'><pre> 100.00% (1/1)</pre></td><td class='column-entry-yellow'><pre>  83.33% (5/6)</pre></td>"), "{html}");
    }
}
