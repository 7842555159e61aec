//! `report/attribution/`: which trial covered which line, as pages that
//! look like llvm-cov's (they use its `style.css`) and link to them: an
//! index of the source files, a page per file (one row per line, the count
//! of trials that ran it linking to the list of those trials), and a page
//! per trial (the lines no other trial covers, by file). File names are
//! relative to the source roots.

use crate::coverage::llvm_export::Metric;
use crate::error::{Error, Result};
use crate::report::attribution::{Attribution, expand, ranges_text};
use crate::report::device_pages::{BranchMarks, mark_host_page};
use crate::report::escape_html as escape;
use crate::report::html_index;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// What the pages need besides the attribution.
pub(crate) struct Sources<'a> {
    /// A source file's text (`None`: the page shows line numbers only).
    pub(crate) text: &'a dyn Fn(&str) -> Option<String>,
    /// The relative link to llvm-cov's page of a file.
    pub(crate) llvm_cov_page: &'a dyn Fn(&str) -> String,
    /// A file's name as the report shows it (relative to the source roots).
    pub(crate) shown: &'a dyn Fn(&str) -> String,
}

/// llvm-cov's stylesheet (`../html/style.css`), and what its pages lack: a
/// highlighted target line, the trial columns and `style`, the page's own.
fn head(title: &str, style: &str) -> String {
    format!(
        "<!doctype html><html><head><meta name='viewport' content='width=device-width,initial-scale=1'>\
         <meta charset='UTF-8'><title>{}</title><link rel='stylesheet' type='text/css' href='../html/style.css'>\
         <style>tr:target td{{background-color:#ff06}} td.trials{{text-align:right;padding:0 1em}} \
         td.trials a{{text-decoration:none}} .light-row td{{padding:0 .6em}}{style}</style></head><body>",
        escape(title)
    )
}

/// A file name safe in a URL and on any filesystem.
fn page_name(prefix: &str, name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    format!("{prefix}{safe}.html")
}

/// The page of source file `file` (its path as the model has it): from the
/// path alone, so that llvm-cov's page of the file, written by another
/// step, links to it: the file's name and a hash of its path, which keeps
/// two files of one name apart.
pub(crate) fn file_page_name(file: &str) -> String {
    use sha2::Digest;
    let base = Path::new(file).file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let hash = sha2::Sha256::digest(file.as_bytes());
    let short: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    page_name("", &format!("{base}-{short}"))
}

/// `report/attribution/` as (file name, page) pairs.
#[cfg(test)]
pub(crate) fn pages(attribution: &Attribution, sources: &Sources) -> Vec<(String, String)> {
    let mut out = Vec::new();
    each_page(attribution, sources, &mut |name, page| {
        out.push((name, page));
        Ok(())
    })
    .map(|()| out)
    .expect("collecting pages does not fail")
}

/// Where [`each_page`] gives each page, as (file name, page).
pub(crate) type PageSink<'a> = dyn FnMut(String, String) -> Result<()> + 'a;

/// Runs `make`, which gives each page to its callback as it is made, while
/// two threads write them with `write`, one of them running `first` before
/// it takes pages: at 4,000 trials the writing is seconds, and the other
/// core would be idle. The first error is returned; after one, the pages
/// left are taken and dropped, so that `make` never waits on a writer that
/// stopped.
pub(crate) fn write_while_made(
    make: &mut dyn FnMut(&mut PageSink) -> Result<()>,
    first: &(dyn Fn() -> Result<()> + Sync),
    write: &(dyn Fn(&str, &[u8]) -> Result<()> + Sync),
) -> Result<()> {
    let (send, pages) = std::sync::mpsc::sync_channel::<(String, String)>(16);
    let pages = std::sync::Mutex::new(pages);
    let take_pages = || {
        let mut result = Ok(());
        while let Ok((name, page)) = pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner).recv() {
            if result.is_ok() {
                result = write(&name, page.as_bytes());
            }
        }
        result
    };
    std::thread::scope(|scope| {
        let writers = [
            scope.spawn(|| {
                let first = first();
                first.and(take_pages())
            }),
            scope.spawn(take_pages),
        ];
        let made = make(&mut |name, page| {
            send.send((name, page)).map_err(|_| Error::new("the attribution pages' writers stopped"))
        });
        drop(send);
        let mut written = Ok(());
        for w in writers {
            let w = w.join().unwrap_or_else(|_| Err(Error::new("writing the attribution files panicked")));
            written = written.and(w);
        }
        written.and(made)
    })
}

/// Lines `first..=last` of a file and the set of trials that ran them.
type Range = (u32, u32, u32);

/// What the pages look up many times, worked out once: at 4,000 trials a
/// set has hundreds of members and is named on thousands of rows.
struct PageIndex<'a> {
    attribution: &'a Attribution,
    /// Each trial's page.
    trial_pages: Vec<String>,
    /// Each set's member count.
    set_sizes: Vec<u32>,
}

impl PageIndex<'_> {
    fn members(&self, set: u32) -> impl Iterator<Item = u32> + '_ {
        expand(self.attribution.trial_sets.get(set as usize).map_or(&[][..], Vec::as_slice))
    }
    fn trial_name(&self, i: u32) -> &str {
        self.attribution.trials.get(i as usize).map_or("?", String::as_str)
    }
    fn trial_link(&self, i: u32) -> String {
        let page = self.trial_pages.get(i as usize).map_or("trial-unknown.html", String::as_str);
        format!("<a href='{page}'>{}</a>", escape(self.trial_name(i)))
    }

    /// [`PageIndex::trial_link`] for the narrow names' column: a name may
    /// break after each `::` (`<wbr>`) and nowhere else, so `AllReduce` is
    /// never cut into `AllReduc`/`e` (issue #49).
    fn who_link(&self, i: u32) -> String {
        self.trial_link(i).replace("::", "::<wbr>")
    }
}

/// Per trial, in file order: (file, lines it covers there), and (file, first,
/// last) of the ranges only it covers.
type PerTrial = (Vec<Vec<(usize, u32)>>, Vec<Vec<(usize, u32, u32)>>);

/// Each page of `report/attribution/`, given to `out` (file name, page) as
/// it is made: at 4,000 trials they would not fit in memory together.
pub(crate) fn each_page(attribution: &Attribution, sources: &Sources, out: &mut PageSink) -> Result<()> {
    let lookup = PageIndex {
        attribution,
        trial_pages: attribution.trials.iter().map(|t| page_name("trial-", t)).collect(),
        set_sizes: attribution.trial_sets.iter().map(|s| s.iter().map(|&(a, b)| b - a + 1).sum()).collect(),
    };
    let files: Vec<(&str, &[Range])> = attribution.files.iter().map(|(f, r)| (f.as_str(), r.as_slice())).collect();
    let file_pages: Vec<String> = files.iter().map(|(f, _)| file_page_name(f)).collect();
    let (covered, unique) = per_trial(&lookup, &files);
    let only_count = |i: usize| -> u32 { unique[i].iter().map(|&(_, a, b)| b - a + 1).sum() };
    out("index.html".to_string(), index_page(&lookup, &files, &file_pages, &covered, &only_count, sources))?;
    for (fi, (file, ranges)) in files.iter().enumerate() {
        out(file_pages[fi].clone(), file_page(&lookup, file, ranges, sources))?;
    }
    let shown: Vec<String> = files.iter().map(|(f, _)| escape(&(sources.shown)(f))).collect();
    for (i, trial) in attribution.trials.iter().enumerate() {
        let html = trial_page(trial, &covered[i], &unique[i], only_count(i), &file_pages, &shown);
        out(lookup.trial_pages[i].clone(), html)?;
    }
    Ok(())
}

/// What each trial covers, file by file, and what only it covers; each set
/// of trials is expanded once per file.
fn per_trial(lookup: &PageIndex, files: &[(&str, &[Range])]) -> PerTrial {
    let trials = lookup.attribution.trials.len();
    let mut covered: Vec<Vec<(usize, u32)>> = vec![Vec::new(); trials];
    let mut unique: Vec<Vec<(usize, u32, u32)>> = vec![Vec::new(); trials];
    let mut lines_of_set: BTreeMap<u32, u32> = BTreeMap::new();
    for (fi, (_, ranges)) in files.iter().enumerate() {
        lines_of_set.clear();
        for &(a, b, set) in ranges.iter().filter(|r| r.2 != 0) {
            *lines_of_set.entry(set).or_default() += b - a + 1;
            if lookup.set_sizes.get(set as usize) == Some(&1)
                && let Some(only) = lookup.members(set).next()
                && let Some(u) = unique.get_mut(only as usize)
            {
                u.push((fi, a, b));
            }
        }
        for (&set, &n) in &lines_of_set {
            for m in lookup.members(set) {
                if let Some(c) = covered.get_mut(m as usize) {
                    match c.last_mut() {
                        Some((f, total)) if *f == fi => *total += n,
                        _ => c.push((fi, n)),
                    }
                }
            }
        }
    }
    (covered, unique)
}

/// The index: every file with its line coverage, then every trial with the
/// lines it covers and those only it covers.
fn index_page(
    lookup: &PageIndex,
    files: &[(&str, &[Range])],
    file_pages: &[String],
    covered: &[Vec<(usize, u32)>],
    only_count: &dyn Fn(usize) -> u32,
    sources: &Sources,
) -> String {
    let mut index = head("Which trial covered which line", "");
    let _ = write!(
        index,
        "<h1>Which trial covered which line</h1><p>{} trials. A file's page shows, for each line, how many trials \
         executed it and which; a trial's page, the lines no other trial covers. \
         <a href='../html/index.html'>llvm-cov's report</a></p>\
         <h2>Files</h2><div class='centered'><table><tr><td class='column-entry-bold'>File</td>\
         <td class='column-entry-bold'>Line Coverage</td></tr>",
        lookup.attribution.trials.len()
    );
    let (mut all_hit, mut all_instrumented) = (0u64, 0u64);
    for (fi, (file, ranges)) in files.iter().enumerate() {
        let instrumented: u64 = ranges.iter().map(|&(a, b, _)| u64::from(b - a + 1)).sum();
        let hit: u64 = ranges.iter().filter(|r| r.2 != 0).map(|&(a, b, _)| u64::from(b - a + 1)).sum();
        (all_hit, all_instrumented) = (all_hit + hit, all_instrumented + instrumented);
        let _ = write!(
            index,
            "<tr class='light-row'><td><pre><a href='{}'>{}</a></pre></td>{}</tr>",
            file_pages[fi],
            escape(&(sources.shown)(file)),
            html_index::cell(&Metric { count: instrumented, covered: hit })
        );
    }
    let _ = write!(
        index,
        "<tr class='light-row-bold'><td><pre>Totals</pre></td>{}</tr>",
        html_index::cell(&Metric { count: all_instrumented, covered: all_hit })
    );
    index.push_str(
        "</table></div><h2>Trials</h2><div class='centered'><table><tr><td class='column-entry-bold'>Trial</td>\
         <td class='column-entry-bold'>Lines covered</td><td class='column-entry-bold'>Lines only it covers</td></tr>",
    );
    for (i, files) in covered.iter().enumerate() {
        let lines: u32 = files.iter().map(|&(_, n)| n).sum();
        let _ = write!(
            index,
            "<tr class='light-row'><td><pre>{}</pre></td><td class='column-entry'><pre>{lines}</pre></td>\
             <td class='column-entry'><pre>{}</pre></td></tr>",
            lookup.trial_link(i as u32),
            only_count(i)
        );
    }
    index.push_str("</table></div></body></html>\n");
    index
}

/// A trial's page: the files it covers, and the ranges only it covers.
fn trial_page(
    trial: &str,
    covered: &[(usize, u32)],
    unique: &[(usize, u32, u32)],
    only: u32,
    file_pages: &[String],
    shown: &[String],
) -> String {
    let mut html = head(trial, "");
    let lines: u32 = covered.iter().map(|&(_, n)| n).sum();
    // The third column only when it has something in it.
    let (said, column) = if only == 0 {
        ("every line it covers, another trial covers too.".to_string(), "")
    } else {
        (
            format!("{only} of them no other trial covers (the last column)."),
            "<td class='column-entry-bold'>Lines only this trial covers</td>",
        )
    };
    let _ = write!(
        html,
        "<h1>{}</h1><p><a href='index.html'>all files and trials</a></p><p>{lines} lines covered in {} files; \
         {said}</p><div class='centered'><table>\
         <tr><td class='column-entry-bold'>File</td><td class='column-entry-bold'>Lines covered</td>{column}</tr>",
        escape(trial),
        covered.len()
    );
    for &(fi, n) in covered {
        let only_cell = if only == 0 {
            String::new()
        } else {
            let links: Vec<String> = unique
                .iter()
                .filter(|u| u.0 == fi)
                .map(|&(_, a, b)| format!("<a href='{}#L{a}'>{}</a>", file_pages[fi], ranges_text(&[(a, b)])))
                .collect();
            let links = if links.is_empty() { "none".to_string() } else { links.join(", ") };
            format!("<td class='column-entry'>{links}</td>")
        };
        let _ = write!(
            html,
            "<tr class='light-row'><td><pre><a href='{}'>{}</a></pre></td><td class='column-entry'><pre>{n}</pre></td>\
             {only_cell}</tr>",
            file_pages[fi], shown[fi]
        );
    }
    html.push_str("</table></div></body></html>\n");
    html
}

/// How many covering trials a file page names on each line; the rest are a
/// link to the line's full list.
const NAMED: usize = 3;
/// Trials listed under one set of trials on a file's page: at 4,000 trials a
/// line's set has hundreds, and the file's page would be 24 MB.
const LISTED: usize = 50;

fn file_page(lookup: &PageIndex, file: &str, ranges: &[Range], sources: &Sources) -> String {
    let text = (sources.text)(file).unwrap_or_default();
    let mut source: Vec<&str> = text.lines().collect();
    let last = ranges.iter().map(|r| r.1).max().unwrap_or(0) as usize;
    if source.len() < last {
        source.resize(last, "");
    }
    // The set of each line, from the sorted ranges, and each set's count and
    // names, made once.
    let mut set_of: BTreeMap<u32, u32> = BTreeMap::new();
    let mut who_of_set: BTreeMap<u32, (String, String)> = BTreeMap::new();
    let (mut widest, mut longest_part) = (0, 0);
    for &(a, b, set) in ranges {
        for line in a..=b {
            set_of.insert(line, set);
        }
        if set == 0 || who_of_set.contains_key(&set) {
            continue;
        }
        let size = lookup.set_sizes.get(set as usize).copied().unwrap_or(0) as usize;
        let named: Vec<u32> = lookup.members(set).take(NAMED).collect();
        let mut shown: Vec<String> = named.iter().map(|&m| lookup.who_link(m)).collect();
        let mut chars: usize = named.iter().map(|&m| lookup.trial_name(m).chars().count() + 2).sum();
        let parts = named.iter().flat_map(|&m| lookup.trial_name(m).split("::").map(|p| p.chars().count() + 2));
        longest_part = parts.fold(longest_part, usize::max);
        if size > NAMED {
            let more = format!("+{} more", size - NAMED);
            chars += more.len();
            shown.push(format!("<a href='#S{set}'>{more}</a>"));
        }
        widest = widest.max(chars);
        who_of_set.insert(set, (format!("<a href='#S{set}'>{size}</a>"), shown.join(", ")));
    }
    // The names' column is as wide as two lines of the longest names take,
    // and no wider (it was 26em even where no line named a trial); the
    // source takes the rest of the width, its long lines wrapped, never cut;
    // and never narrower than a name's longest part between `::`s, where
    // alone it may break (`AllreduceTest.SinglePointer` stays whole).
    let who_width = match widest {
        0 => String::new(),
        n => format!(" td.who{{min-width:{}ch}}", (n / 2 + 2).min(36).max(longest_part.min(60))),
    };
    let style = format!(
        " .centered.lines{{display:block}} table.lines{{width:100%}} table.lines td.code{{width:100%}} \
         td.code pre{{white-space:pre-wrap;overflow-wrap:anywhere}} td.who{{font-size:85%;color:#06d}} \
         td.who a{{text-decoration:none;overflow-wrap:break-word}}{who_width}"
    );
    let shown = (sources.shown)(file);
    let mut html = head(&shown, &style);
    let _ = write!(
        html,
        "<h1>{0}</h1><p><a href='index.html'>all files and trials</a> · <a href='{1}'>llvm-cov's view of this file</a></p>\
         <p>As on llvm-cov's pages: a line some trial ran has its count of trials in \
         <span class='covered-line'>blue</span>; code no trial ran, a <span class='uncovered-line'>0</span> and \
         <span class='red'>red</span>; a line with no code, no count.</p>\
         <div class='centered lines'><div class='source-name-title'><pre>{0}</pre></div><table class='lines'>\
         <tr><td class='column-entry-bold'>Line</td><td class='column-entry-bold'>Trials</td>\
         <td class='column-entry-bold'>Which (up to three)</td>\
         <td class='column-entry-bold'>Source</td></tr>",
        escape(&shown),
        escape(&(sources.llvm_cov_page)(file))
    );
    let mut used_sets = std::collections::BTreeSet::new();
    for (i, code) in source.iter().enumerate() {
        let n = i as u32 + 1;
        let (count, who, count_class, code_class) = match set_of.get(&n) {
            None => ("", "", "", ""),
            Some(0) => ("0", "", " uncovered-line", " red"),
            Some(&set) => {
                used_sets.insert(set);
                let (count, who) = &who_of_set[&set];
                (count.as_str(), who.as_str(), " covered-line", "")
            }
        };
        let _ = write!(
            html,
            "<tr id='L{n}'><td class='line-number'><a href='#L{n}'><pre>{n}</pre></a></td>\
             <td class='trials{count_class}'><pre>{count}</pre></td><td class='who'>{who}</td>\
             <td class='code{code_class}'><pre>{}</pre></td></tr>",
            escape(code)
        );
    }
    html.push_str("</table></div><h2>The trials of each line</h2>");
    for set in used_sets {
        let size = lookup.set_sizes.get(set as usize).copied().unwrap_or(0) as usize;
        let first = lookup.members(set).next().and_then(|m| lookup.attribution.trials.get(m as usize));
        let title = match (first, size) {
            (_, 0) => String::new(),
            (first, 1) => first.cloned().unwrap_or_default(),
            (first, _) => format!("{} and {} more", first.map_or("", String::as_str), size - 1),
        };
        let _ = write!(html, "<h3 id='S{set}'>{}</h3><ul>", escape(&title));
        for m in lookup.members(set).take(LISTED) {
            let _ = write!(html, "<li>{}</li>", lookup.trial_link(m));
        }
        if size > LISTED {
            let _ = write!(
                html,
                "<li>and {} more: <code>ccl-coverage who-covers {}:LINE</code> names every trial of a line, \
                 and <code>report/attribution.json</code> has them all</li>",
                size - LISTED,
                escape(&shown)
            );
        }
        html.push_str("</ul>");
    }
    html.push_str("</body></html>\n");
    html
}

/// The link from llvm-cov's `html/index.html` to these pages, after its
/// heading (or at the top of the body), once.
pub(crate) fn link_from_llvm_cov_index(ws: &crate::workspace::Workspace, index: &Path) -> Result<()> {
    let text = ws.read_to_string(index)?;
    let link = "<p><a href='../attribution/index.html'>Which trial covered which line</a> (per-trial attribution, \
                and the lines only one trial covers)</p>";
    if text.contains(link) {
        return Ok(());
    }
    let linked = match ["</h2>", "<body>"].iter().find_map(|m| text.find(m).map(|at| at + m.len())) {
        Some(at) => format!("{}{link}{}", &text[..at], &text[at..]),
        None => format!("{link}{text}"),
    };
    ws.write(index, linked.as_bytes())
}

/// llvm-cov's page of each source file (`html/coverage/<path>.html`), made
/// to link back to the index and to the attribution page of its file
/// ([`source_page`]); how many pages it changed.
pub(crate) fn link_source_pages(
    ws: &crate::workspace::Workspace,
    html_dir: &Path,
    device_branches: &BTreeMap<String, BranchMarks>,
) -> Result<usize> {
    use crate::workspace::confined::EntryKind;
    let root = html_dir.join("coverage");
    if ws.kind(&root)?.is_none() {
        return Ok(0);
    }
    let mut stack = vec![root.clone()];
    let mut changed = 0;
    while let Some(dir) = stack.pop() {
        for (name, kind) in ws.list(&dir)? {
            let path = dir.join(&name);
            let Some(page) = name.to_str() else { continue };
            match kind {
                EntryKind::Dir => stack.push(path),
                EntryKind::File if Path::new(page).extension().is_some_and(|e| e == "html") => {
                    // llvm-cov names the page of `/a/b.cc` `coverage/a/b.cc.html`.
                    let Ok(rel) = path.strip_prefix(&root) else { continue };
                    let source = format!("/{}", rel.display());
                    let source = source.strip_suffix(".html").unwrap_or(&source);
                    let text = ws.read_to_string(&path)?;
                    let page = source_page(&text, &file_page_name(source), device_branches.get(source));
                    ws.write(&path, page.as_bytes())?;
                    changed += 1;
                }
                _ => {}
            }
        }
    }
    Ok(changed)
}

/// One of llvm-cov's source pages with what it lacks: its floating "next
/// uncovered" links kept in the page's flow (fixed at the top right, they
/// covered the title on a narrow window), a link back to the index and to
/// the file's attribution page, and each covered line's count linking to
/// that line's covering trials, and the file's device branches under their
/// lines. `attribution_page`: the file's page under `attribution/`.
pub(crate) fn source_page(page: &str, attribution_page: &str, device_branches: Option<&BranchMarks>) -> String {
    static STYLE_HREF: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"href='((?:\.\./)*)style\.css'").expect("a valid regex"));
    static COUNT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(<a name='L(\d+)' href='#L\d+'><pre>\d+</pre></a></td><td class='covered-line'>)<pre>([^<]*)</pre>",
        )
        .expect("a valid regex")
    });
    let to_html = STYLE_HREF.captures(page).map_or("", |c| c.get(1).map_or("", |m| m.as_str()));
    let attribution = format!("{to_html}../attribution/{}", escape(attribution_page));
    let style = "<style>.control{position:sticky;top:0;display:block;text-align:right;z-index:1} \
                 td.covered-line a{text-decoration:none} .ccl-nav{margin:.3em 0}</style>";
    let nav = format!(
        "<p class='ccl-nav'><a href='{to_html}index.html'>&larr; index</a> \u{b7} \
         <a href='{attribution}'>which trials ran each line of this file</a></p>"
    );
    let marked = device_branches.map(|marks| mark_host_page(page, marks, to_html));
    let page = marked.as_deref().unwrap_or(page);
    let linked = COUNT.replace_all(page, |c: &regex::Captures| {
        format!(
            "{}<a href='{attribution}#L{line}' title='the trials that ran line {line}'><pre>{}</pre></a>",
            &c[1],
            &c[3],
            line = &c[2]
        )
    });
    let styled = match linked.find("</head>") {
        Some(at) => format!("{}{style}{}", &linked[..at], &linked[at..]),
        None => format!("{style}{linked}"),
    };
    match styled.find("<body>").map(|at| at + "<body>".len()) {
        Some(at) => format!("{}{nav}{}", &styled[..at], &styled[at..]),
        None => format!("{nav}{styled}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov::parse_lcov;
    use crate::report::attribution::tests::trial;
    use crate::report::elements::Universe;

    #[test]
    fn pages_are_all_written_beside_the_first_job_and_a_failed_write_stops_nothing_but_is_said() {
        use std::sync::Mutex;
        let make = |n: usize| {
            move |out: &mut PageSink<'_>| -> Result<()> { (0..n).try_for_each(|i| out(format!("p{i}"), i.to_string())) }
        };
        let written = Mutex::new(Vec::new());
        let first_ran = Mutex::new(false);
        let first = || {
            *first_ran.lock().unwrap() = true;
            Ok(())
        };
        let write = |name: &str, page: &[u8]| {
            written.lock().unwrap().push((name.to_string(), String::from_utf8(page.to_vec()).unwrap()));
            Ok(())
        };
        write_while_made(&mut make(100), &first, &write).unwrap();
        let mut all = written.lock().unwrap().clone();
        all.sort_by_key(|(n, _)| n[1..].parse::<usize>().unwrap());
        assert_eq!(all, (0..100).map(|i| (format!("p{i}"), i.to_string())).collect::<Vec<_>>());
        assert!(*first_ran.lock().unwrap());
        // Far more pages than the channel holds, every write failing: all
        // are made, none waits (a maker left waiting fails here within 20 s
        // instead of hanging), and the error is the write's.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let failing = |name: &str, _: &[u8]| -> Result<()> { Err(Error::new(format!("cannot write {name}"))) };
            let _ = done.send(write_while_made(&mut make(1000), &|| Ok(()), &failing));
        });
        let e = finished.recv_timeout(std::time::Duration::from_secs(20)).expect("the maker waited").unwrap_err();
        assert!(e.to_string().starts_with("cannot write p"), "{e}");
        let e = write_while_made(&mut make(10), &|| Err(Error::new("no json")), &write).unwrap_err();
        assert_eq!(e.to_string(), "no json");
    }

    #[test]
    fn a_set_of_many_trials_lists_the_first_fifty_and_says_where_the_rest_are() {
        let lcov = "SF:/src/a.cc\nDA:1,1\nend_of_record\n";
        let all = Universe::of(&parse_lcov(lcov, "all").unwrap()).unwrap();
        let trials: Vec<_> = (0..55).map(|i| trial(&all, &format!("T::{i:02}"), lcov)).collect();
        let att = Attribution::new(&all, &trials);
        let sources = Sources {
            text: &|_| Some("int x;\n".into()),
            llvm_cov_page: &|f| format!("../html/coverage{f}.html"),
            shown: &|f| f.trim_start_matches("/src/").to_string(),
        };
        let all_pages = pages(&att, &sources);
        let page = &all_pages.iter().find(|(n, _)| *n == file_page_name("/src/a.cc")).unwrap().1;
        let section = &page[page.find("<h3 id='S1'>").unwrap()..];
        assert_eq!(section.matches("<li><a href='trial-").count(), 50, "{section}");
        assert!(section.contains("<li>and 5 more: <code>ccl-coverage who-covers a.cc:LINE</code>"), "{section}");
        assert!(page.contains("<a href='#S1'>+52 more</a>"), "each line still counts them all");
    }

    /// Issue #49: a long trial name was cut inside a word (`allreduc`/`e`)
    /// at 1000 px; it may break after a `::` only, and the column is as wide
    /// as its longest part.
    #[test]
    fn the_names_column_holds_a_name_s_longest_part_whole() {
        let lcov = "SF:/src/a.cc\nDA:1,1\nend_of_record\n";
        let all = Universe::of(&parse_lcov(lcov, "all").unwrap()).unwrap();
        let name = "rccl-UnitTests::AllreduceRing_AllreduceTest.SinglePointer_0::mpi";
        let att = Attribution::new(&all, &[trial(&all, name, lcov)]);
        let sources = Sources {
            text: &|_| Some("int x;\n".into()),
            llvm_cov_page: &|f| format!("../html/coverage{f}.html"),
            shown: &|f| f.trim_start_matches("/src/").to_string(),
        };
        let all_pages = pages(&att, &sources);
        let page = &all_pages.iter().find(|(n, _)| *n == file_page_name("/src/a.cc")).unwrap().1;
        let longest = "AllreduceRing_AllreduceTest.SinglePointer_0".len() + 2;
        assert!(page.contains(&format!("td.who{{min-width:{longest}ch}}")), "{page}");
        assert!(
            page.contains(">rccl-UnitTests::<wbr>AllreduceRing_AllreduceTest.SinglePointer_0::<wbr>mpi</a>"),
            "{page}"
        );
    }

    #[test]
    fn pages_link_files_lines_trial_sets_and_trials() {
        let all = parse_lcov(
            "SF:/src/a.cc\nDA:3,2\nDA:4,2\nDA:5,0\nend_of_record\nSF:/src/b.cc\nDA:1,1\nend_of_record\n",
            "all",
        )
        .unwrap();
        let all = Universe::of(&all).unwrap();
        let t0 = trial(&all, "A::1K", "SF:/src/a.cc\nDA:3,1\nDA:4,1\nend_of_record\n");
        let t1 =
            trial(&all, "A::1K::mpi", "SF:/src/a.cc\nDA:3,1\nend_of_record\nSF:/src/b.cc\nDA:1,1\nend_of_record\n");
        let att = Attribution::new(&all, &[t0, t1]);
        let sources = Sources {
            text: &|_| Some("a\nb\nint f() {\n  return <1>;\n}\n".into()),
            llvm_cov_page: &|f| format!("../html/coverage{f}.html"),
            shown: &|f| f.trim_start_matches("/src/").to_string(),
        };
        let all_pages = pages(&att, &sources);
        let page = |name: &str| &all_pages.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}")).1;
        let index = page("index.html");
        let (a_page, b_page) = (file_page_name("/src/a.cc"), file_page_name("/src/b.cc"));
        assert!(
            a_page.starts_with("a.cc-")
                && Path::new(&a_page).extension().is_some_and(|e| e == "html")
                && a_page != file_page_name("/other/a.cc")
        );
        assert!(index.contains("href='../html/style.css'") && index.contains("href='../html/index.html'"));
        assert!(index.contains(&format!("<a href='{a_page}'>a.cc</a>")) && !index.contains("/src/"), "{index}");
        assert!(index.contains("<a href='trial-A__1K__mpi.html'>A::1K::mpi</a>"), "{index}");
        // The HTML index's cells and colours (under 80 % red), and the totals.
        assert!(index.contains("<td class='column-entry-red'><pre>  66.67% (2/3)</pre></td>"), "{index}");
        assert!(index.contains("<tr class='light-row-bold'><td><pre>Totals</pre></td><td class='column-entry-red'><pre>  75.00% (3/4)</pre>"), "{index}");
        let a = page(&a_page);
        // One row per line: the count of trials links to who they are, and names them.
        assert!(a.contains("<tr id='L3'>") && a.contains("<a href='#S1'>2</a>"), "{a}");
        assert!(
            a.contains("<td class='who'><a href='trial-A__1K.html'>A::<wbr>1K</a>, <a href='trial-A__1K__mpi.html'>A::<wbr>1K::<wbr>mpi</a></td>"),
            "{a}"
        );
        // A name breaks at its `::` only, never inside a word.
        assert!(
            a.contains("td.who a{text-decoration:none;overflow-wrap:break-word}") && !a.contains("anywhere}td.who"),
            "{a}"
        );
        assert!(a.contains("<pre>  return &lt;1&gt;;</pre>"), "{a}");
        // Coloured as llvm-cov's pages: a count in blue, code no trial ran red, no code plain.
        assert!(a.contains("<td class='trials covered-line'><pre><a href='#S1'>2</a></pre></td>"), "{a}");
        assert!(a.contains("<td class='trials uncovered-line'><pre>0</pre></td><td class='who'></td><td class='code red'><pre>}</pre>"), "{a}");
        assert!(a.contains("<tr id='L1'><td class='line-number'><a href='#L1'><pre>1</pre></a></td><td class='trials'><pre></pre></td><td class='who'></td><td class='code'><pre>a</pre>"), "{a}");
        // The names' column is sized to two lines of its longest names.
        assert!(a.contains("td.who{min-width:11ch}"), "{a}");
        assert!(a.contains("<h3 id='S1'>A::1K and 1 more</h3>"), "{a}");
        assert!(a.contains("<li><a href='trial-A__1K.html'>A::1K</a></li>"), "{a}");
        let mpi = page("trial-A__1K__mpi.html");
        assert!(mpi.contains("2 lines covered in 2 files; 1 of them no other trial covers"), "{mpi}");
        assert!(mpi.contains(&format!("<a href='{b_page}#L1'>1</a>")), "its unique line links to it: {mpi}");
        assert!(mpi.contains("<td class='column-entry'>none</td>"), "a file with no unique line says so: {mpi}");
        let one = page("trial-A__1K.html");
        assert!(one.contains(&format!("<a href='{a_page}#L4'>4</a>")), "{one}");
        // A trial with no line of its own has no column for them.
        let t2 = trial(&all, "A::1K::again", "SF:/src/a.cc\nDA:3,1\nend_of_record\n");
        let att = Attribution::new(&all, &[trial(&all, "A::1K", "SF:/src/a.cc\nDA:3,1\nDA:4,1\nend_of_record\n"), t2]);
        let later = pages(&att, &sources);
        let again = &later.iter().find(|(n, _)| n == "trial-A__1K__again.html").unwrap().1;
        assert!(again.contains("every line it covers, another trial covers too"), "{again}");
        assert!(!again.contains("no other trial covers") && !again.contains("Lines only this trial covers"), "{again}");
    }

    #[test]
    fn source_pages_link_back_and_keep_their_controls_off_the_title() {
        let page = "<!doctype html><html><head><link rel='stylesheet' type='text/css' href='../../../style.css'></head>\
                    <body><h1>t</h1><span class='control'>x</span><table>\
                    <tr><td class='line-number'><a name='L7' href='#L7'><pre>7</pre></a></td><td class='covered-line'><pre>1.2k</pre></td></tr>\
                    <tr><td class='line-number'><a name='L8' href='#L8'><pre>8</pre></a></td><td class='uncovered-line'><pre>0</pre></td></tr>\
                    </table></body></html>";
        let out = source_page(page, "x.cc-0011.html", None);
        assert!(out.contains(".control{position:sticky;"), "{out}");
        assert!(out.contains("<body><p class='ccl-nav'><a href='../../../index.html'>&larr; index</a>"), "{out}");
        assert!(out.contains("<a href='../../../../attribution/x.cc-0011.html'>which trials ran"), "{out}");
        assert!(
            out.contains("<td class='covered-line'><a href='../../../../attribution/x.cc-0011.html#L7' title='the trials that ran line 7'><pre>1.2k</pre></a></td>"),
            "{out}"
        );
        assert!(out.contains("<td class='uncovered-line'><pre>0</pre></td>"), "an uncovered line has no trials: {out}");
    }

    #[test]
    fn llvm_cov_s_index_links_to_the_pages_once() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::new(dir.path()).unwrap();
        let index = dir.path().join("index.html");
        std::fs::write(&index, "<html><body><h1>t</h1><h2>Coverage Report</h2><table></table></body></html>").unwrap();
        link_from_llvm_cov_index(&ws, &index).unwrap();
        link_from_llvm_cov_index(&ws, &index).unwrap();
        let text = std::fs::read_to_string(&index).unwrap();
        assert_eq!(text.matches("../attribution/index.html").count(), 1, "{text}");
        assert!(text.contains("</h2><p><a href='../attribution/index.html'>"), "{text}");
    }
}
