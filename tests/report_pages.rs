//! The report's pages as a browser shows them, at 1000 and 1400 px wide:
//! headless Chromium (installed by `scripts/install-deps`) loads each page
//! in a frame of a page of the test's own, whose script measures what is
//! on screen and writes it into the DOM that `--dump-dom` prints. Each
//! page's screenshot at each width is kept under the test's folder,
//! `target/tmp/report-pages/`, and named in its output. Without Chromium
//! the test says so and is skipped, except in CI (`CI` set), where
//! `scripts/install-deps` installs it and its absence fails the test.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

mod support;

use regex::Regex;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{harness, only, setup};

const WIDTHS: [u32; 2] = [1000, 1400];

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(c).is_file())))
}

/// Every browser run ends within this, or is killed: a page that never
/// settles must fail the test, not hang it.
const BROWSER_LIMIT: Duration = Duration::from_secs(120);

fn browser(home: &Path, width: u32, args: &[String]) -> String {
    let mut cmd = Command::new(chromium().expect("checked at the start of the test"));
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--allow-file-access-from-files"])
        .arg(format!("--window-size={width},900"))
        .arg("--virtual-time-budget=5000")
        .args(args)
        .env("HOME", home);
    let out = support::output_within(cmd, BROWSER_LIMIT);
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the page at `url` shows at `width`: its viewport width, the title's
/// text and the "next uncovered" controls as boxes, the links of the
/// navigation bar, each table row's cells (class, text, box, the links in
/// it), and whether the page named by `url`'s fragment holds its target.
fn measure(home: &Path, width: u32, url: &str) -> Value {
    let script = r#"
const f = document.getElementById('f');
function box(r, w) { return r ? {x: r.left, y: r.top, right: r.right, bottom: r.bottom, w: r.width, h: r.height,
  visible: r.width > 0 && r.height > 0 && r.left < w.innerWidth && r.right > 0 && r.top < w.innerHeight} : null; }
function run() {
  const d = f.contentDocument, w = f.contentWindow;
  const h1 = d.querySelector('h1');
  let title = null;
  if (h1) { const r = d.createRange(); r.selectNodeContents(h1); title = box(r.getBoundingClientRect(), w); }
  const control = d.querySelector('.control');
  // A link's text as the lines it is laid out on, character by character.
  const lines = el => { const out = []; let top = null; const t = d.createTreeWalker(el, 4);
    for (let n = t.nextNode(); n; n = t.nextNode()) for (let i = 0; i < n.data.length; i++) {
      const r = d.createRange(); r.setStart(n, i); r.setEnd(n, i + 1); const y = r.getBoundingClientRect().top;
      if (top === null || Math.abs(y - top) > 2) { out.push(''); top = y; } out[out.length - 1] += n.data[i]; }
    return out; };
  const links = a => ({href: a.getAttribute('href'), url: a.href, text: a.textContent, box: box(a.getBoundingClientRect(), w), lines: lines(a)});
  const content = td => { const r = d.createRange(); r.selectNodeContents(td); return box(r.getBoundingClientRect(), w); };
  const rows = [...d.querySelectorAll('tr')].slice(0, 400).map(tr => [...tr.children].map(td => ({
    class: td.className, text: td.textContent, box: box(td.getBoundingClientRect(), w), content: content(td),
    bg: w.getComputedStyle(td).backgroundColor, color: w.getComputedStyle(td).color,
    links: [...td.querySelectorAll('a')].map(links)})));
  document.getElementById('out').textContent = JSON.stringify({
    width: w.innerWidth, scroll_width: d.documentElement.scrollWidth,
    title, control: control ? box(control.getBoundingClientRect(), w) : null,
    nav: [...d.querySelectorAll('.ccl-nav a')].map(links), rows,
    body: d.body.innerText.slice(0, 2000)});
}
if (f.contentDocument && f.contentDocument.readyState === 'complete' && f.contentDocument.URL !== 'about:blank') run();
else f.addEventListener('load', run);
"#;
    let page = home.join(format!("measure-{width}.html"));
    fs::write(
        &page,
        format!(
            "<!doctype html><html style='overflow:hidden'><body style='margin:0'>\
             <iframe id='f' src='{url}' style='border:0;width:100vw;height:100vh;display:block'></iframe>\
             <pre id='out' style='display:none'></pre><script>{script}</script></body></html>"
        ),
    )
    .unwrap();
    let dom = browser(home, width, &["--dump-dom".into(), format!("file://{}", page.display())]);
    let re = Regex::new(r#"(?s)<pre id="out" style="display:none">(.*?)</pre>"#).unwrap();
    let json = re.captures(&dom).unwrap_or_else(|| panic!("no measurement of {url}:\n{dom}"))[1]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{url}: {e}: {json}"))
}

/// Keeps a screenshot of `page` at `width` as `name-<width>.png`.
fn screenshot(home: &Path, width: u32, page: &Path, name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-pages");
    fs::create_dir_all(&dir).unwrap();
    let shot = dir.join(format!("{name}-{width}.png"));
    let _ = fs::remove_file(&shot);
    browser(home, width, &[format!("--screenshot={}", shot.display()), format!("file://{}", page.display())]);
    let png = fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 5_000, "{} is {} bytes", shot.display(), png.len());
    eprintln!("screenshot: {}", shot.display());
    shot
}

/// llvm-cov's colour rule, which both indexes follow: green at 100 %, red
/// under 80 %, yellow between, grey when nothing counts.
fn expected_class(text: &str) -> &'static str {
    let re = Regex::new(r"\((\d+)/(\d+)\)").unwrap();
    let c = re.captures(text).unwrap_or_else(|| panic!("no (covered/count) in {text:?}"));
    let (covered, count): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
    match count {
        0.0 => "column-entry-gray",
        _ if covered >= count => "column-entry-green",
        _ if covered * 100.0 / count < 80.0 => "column-entry-red",
        _ => "column-entry-yellow",
    }
}

fn overlap(a: &Value, b: &Value) -> bool {
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap();
    f(a, "x") < f(b, "right") && f(b, "x") < f(a, "right") && f(a, "y") < f(b, "bottom") && f(b, "y") < f(a, "bottom")
}

/// Rows of a measured table whose first cell's text is a file name, by name.
fn rows_by_file(m: &Value) -> std::collections::BTreeMap<String, Vec<Value>> {
    m["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let cells = r.as_array()?.clone();
            let name = cells.first()?["text"].as_str()?.trim().to_string();
            Path::new(&name).extension().is_some_and(|e| e == "cc").then_some((name, cells))
        })
        .collect()
}

/// `rgb(r, g, b)` or `rgba(r, g, b, a)` as numbers.
fn rgba(css: &Value) -> [f64; 4] {
    let text = css.as_str().unwrap();
    let inner = text.split_once('(').and_then(|(_, r)| r.strip_suffix(')')).unwrap_or_else(|| panic!("{text}"));
    let mut v: Vec<f64> = inner.split(',').map(|p| p.trim().parse().unwrap()).collect();
    v.resize(4, 1.0);
    [v[0], v[1], v[2], v[3]]
}

/// An attribution page of a file at `width`: in one view (nothing to scroll
/// sideways for), every source line whole within it, and its lines coloured
/// as llvm-cov's pages colour them: a covered line's count blue, code no
/// trial ran a red count and a red background, a line with no code neither.
/// How many lines it saw of each: uncovered, covered, no code.
fn check_attribution_page(m: &Value, width: u32, page: &Path) -> [usize; 3] {
    let w = f64::from(width);
    assert!(
        m["scroll_width"].as_f64().unwrap() <= w,
        "{width}px: {} scrolls sideways: {}",
        page.display(),
        m["scroll_width"]
    );
    let rows: Vec<&Vec<Value>> =
        m["rows"].as_array().unwrap().iter().filter_map(|r| r.as_array().filter(|r| r.len() == 4)).skip(1).collect();
    assert!(rows.len() > 20, "{}: {m}", page.display());
    let mut seen = [0; 3];
    for row in rows {
        let (count, code) = (&row[1], &row[3]);
        let right = code["content"]["right"].as_f64().unwrap();
        assert!(
            right <= w && right <= code["box"]["right"].as_f64().unwrap() + 1.0,
            "{width}px: source cut off: {code}"
        );
        let (bg, colour) = (rgba(&code["bg"]), rgba(&count["color"]));
        let class = count["class"].as_str().unwrap();
        if class.contains("uncovered-line") {
            seen[0] += 1;
            assert!(bg[0] > 200.0 && bg[1] < 50.0 && bg[3] > 0.1, "{width}px: uncovered code not red: {code}");
            assert!(colour[0] > 150.0 && colour[2] < 80.0, "{width}px: the 0 of uncovered code not red: {count}");
        } else if class.contains("covered-line") {
            seen[1] += 1;
            assert!(bg[3] == 0.0, "{width}px: covered code coloured: {code}");
            assert!(colour[2] > 150.0 && colour[0] < 80.0, "{width}px: a covered line's count not blue: {count}");
        } else {
            seen[2] += 1;
            assert!(bg[3] == 0.0 && count["text"] == "", "{width}px: a line with no code coloured or counted: {row:?}");
        }
    }
    seen
}

#[test]
fn the_report_pages_read_well_at_1000_and_1400_px() {
    if chromium().is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "headless Chromium is not on PATH, and CI must have it: scripts/install-deps installs it"
        );
        eprintln!(
            "SKIPPED: the_report_pages_read_well_at_1000_and_1400_px needs headless Chromium (chromium on PATH; scripts/install-deps installs it)"
        );
        return;
    }
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K", "256K"],
            json!([{"name": "ring", "ranks": 2, "env": {"CCL_ALGO": "ring"}},
                   {"name": "direct", "ranks": 2, "env": {"CCL_ALGO": "direct"}},
                   {"name": "mpi", "launcher": "mpi", "ranks": 2}]),
        );
    });
    let limit = Duration::from_secs(480);
    let run = harness(&s, "run", &[], limit);
    assert!(run.success, "{}", run.text());
    let home = s.dir.path();
    let report = s.ws.join("report");
    let url = |p: &Path| format!("file://{}", p.display());
    let source = support::files_under(&report.join("html/coverage"))
        .into_iter()
        .find(|p| p.ends_with("ccl/src/all_reduce.cc.html"))
        .expect("llvm-cov's page of all_reduce.cc");
    let attribution_page = fs::read_dir(report.join("attribution"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("all_reduce.cc-")))
        .expect("the attribution page of all_reduce.cc");
    let trials: Value = serde_json::from_str(&fs::read_to_string(report.join("trials.json")).unwrap()).unwrap();
    assert_eq!(trials.as_array().map(Vec::len), Some(6));

    for width in WIDTHS {
        // llvm-cov's source page: the controls clear of the title, a way back
        // to the index, and from a covered line to the trials that ran it.
        let m = measure(home, width, &url(&source));
        assert_eq!(m["width"], width, "{m}");
        let (title, control) = (&m["title"], &m["control"]);
        assert!(title["visible"] == true && control["visible"] == true, "{width}px: {title} {control}");
        assert!(!overlap(title, control), "{width}px: the next-uncovered links cover the title: {title} {control}");
        let nav = m["nav"].as_array().unwrap();
        let index = nav.iter().find(|a| a["text"].as_str().unwrap().contains("index")).expect("a link to the index");
        assert!(index["url"].as_str().unwrap().ends_with("/report/html/index.html"), "{index}");
        assert!(index["box"]["visible"] == true && index["box"]["y"].as_f64().unwrap() < 200.0, "{width}px: {index}");
        let to_file = nav.iter().find(|a| a["text"].as_str().unwrap().contains("which trials")).unwrap();
        let to_file = to_file["url"].as_str().unwrap().trim_start_matches("file://");
        assert_eq!(Path::new(to_file), attribution_page, "the source page links another file's attribution");
        let count = m["rows"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r.as_array().unwrap())
            .find(|c| c["class"] == "covered-line" && !c["links"].as_array().unwrap().is_empty())
            .expect("a covered line's count links to its trials");
        let line_link = count["links"][0]["url"].as_str().unwrap().trim_start_matches("file://");
        let (page, line) = line_link.split_once("#L").unwrap();
        assert_eq!(Path::new(page), attribution_page);
        let target = fs::read_to_string(page).unwrap();
        assert!(target.contains(&format!("<tr id='L{line}'>")), "{page} has no row for line {line}");
        screenshot(home, width, &source, "source-all_reduce.cc");

        // The attribution page of the file: up to three trials by name per
        // line, the rest a link, the source still in view.
        let m = measure(home, width, &url(&attribution_page));
        let cells: Vec<&Value> = m["rows"].as_array().unwrap().iter().filter_map(|r| r.as_array()?.get(2)).collect();
        let trials_cells: Vec<&&Value> = cells.iter().filter(|c| c["class"] == "who").collect();
        let named = |c: &Value| {
            c["links"].as_array().unwrap().iter().filter(|a| a["href"].as_str().unwrap().starts_with("trial-")).count()
        };
        assert!(trials_cells.iter().any(|c| named(c) == 3), "no line names three trials");
        assert!(trials_cells.iter().all(|c| named(c) <= 3), "a line names more than three trials");
        // A trial's name breaks after a `::` only, never inside a word (`allreduc`/`e`, issue #49).
        for c in &trials_cells {
            for a in c["links"].as_array().unwrap().iter().filter(|a| a["href"].as_str().unwrap().starts_with("trial-"))
            {
                let lines = a["lines"].as_array().unwrap();
                let cut = lines[..lines.len().saturating_sub(1)].iter().find(|l| !l.as_str().unwrap().ends_with("::"));
                assert!(cut.is_none(), "{width}px: a name cut inside a word: {a}");
            }
        }
        let busy =
            trials_cells.iter().find(|c| c["text"].as_str().unwrap().contains("+3 more")).expect("6 trials: +3 more");
        // Below the fold, but within the page's width: nothing to scroll sideways for.
        let (left, right) = (busy["box"]["x"].as_f64().unwrap(), busy["box"]["right"].as_f64().unwrap());
        assert!(left >= 0.0 && right <= f64::from(width), "{width}px: {busy}");
        assert!(
            busy["box"]["h"].as_f64().unwrap() <= 3.0 * 16.0,
            "{width}px: three names take more than two lines: {busy}"
        );
        let code = m["rows"].as_array().unwrap().iter().filter_map(|r| r.as_array()?.get(3)).nth(20).unwrap();
        assert!(
            code["box"]["x"].as_f64().unwrap() < f64::from(width) / 2.0,
            "{width}px: the source is pushed off: {code}"
        );
        let seen = check_attribution_page(&m, width, &attribution_page);
        assert!(seen.iter().all(|&n| n > 0), "uncovered, covered and no-code lines: {seen:?}");
        screenshot(home, width, &attribution_page, "attribution-all_reduce.cc");

        // Both indexes: the same cells, colours and totals.
        let html = measure(home, width, &url(&report.join("html/index.html")));
        let att = measure(home, width, &url(&report.join("attribution/index.html")));
        let (html_files, att_files) = (rows_by_file(&html), rows_by_file(&att));
        assert!(!att_files.is_empty());
        // A file no trial ran: its page names no trial, and the names' column
        // takes no more than its heading (it took 26em, empty).
        let (unrun, _) = att_files
            .iter()
            .find(|(_, cells)| cells[1]["text"].as_str().unwrap().contains("(0/"))
            .expect("a file no trial of this config runs");
        let unrun_page = report.join("attribution").join(
            att["rows"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap())
                .flat_map(|c| c["links"].as_array().unwrap())
                .find(|a| a["text"].as_str().unwrap().trim() == unrun.as_str())
                .unwrap()["href"]
                .as_str()
                .unwrap(),
        );
        let m = measure(home, width, &url(&unrun_page));
        let seen = check_attribution_page(&m, width, &unrun_page);
        assert!(seen[0] > 0 && seen[1] == 0, "{}: {seen:?}", unrun_page.display());
        let heading = &m["rows"][0][2];
        assert!(
            heading["text"] == "Which (up to three)" && heading["box"]["w"].as_f64().unwrap() <= 120.0,
            "{width}px: {heading}"
        );
        screenshot(home, width, &unrun_page, "attribution-unrun");
        for (file, cells) in &att_files {
            let cell = &cells[1];
            let text = cell["text"].as_str().unwrap();
            assert_eq!(cell["class"], expected_class(text), "{file}: {cell}");
            let llvm = &html_files.get(file).unwrap_or_else(|| panic!("{file} is not in the HTML index"))[2];
            assert_eq!(
                (&cell["class"], cell["text"].as_str().unwrap().trim()),
                (&llvm["class"], llvm["text"].as_str().unwrap().trim()),
                "{file}"
            );
        }
        let totals = |m: &Value, column: usize| {
            m["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r[0]["text"].as_str().is_some_and(|t| t.trim() == "Totals"))
                .map(|r| r[column].clone())
        };
        let (att_total, html_total) = (totals(&att, 1).expect("a totals row"), totals(&html, 2).unwrap());
        assert!(att_total["box"]["visible"] == true, "{att_total}");
        assert_eq!(att_total["text"], html_total["text"], "the two indexes' line totals differ");
        assert_eq!(att_total["class"], html_total["class"]);
        screenshot(home, width, &report.join("attribution/index.html"), "attribution-index");
    }

    // A trial page says "no other trial covers" only above a column that has them.
    for t in trials.as_array().unwrap() {
        let name = t["trial"].as_str().unwrap();
        let page = report.join("attribution").join(format!("trial-{}.html", name.replace("::", "__")));
        let m = measure(home, WIDTHS[0], &url(&page));
        let body = m["body"].as_str().unwrap();
        let header: Vec<&str> = m["rows"][0].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap()).collect();
        let unique = t["unique_lines"].as_u64().unwrap();
        if unique == 0 {
            assert!(!body.contains("no other trial covers"), "{name}: {body}");
            assert_eq!(header, ["File", "Lines covered"], "{name}: an empty column");
            assert!(body.contains("every line it covers, another trial covers too"), "{name}: {body}");
        } else {
            assert!(body.contains(&format!("{unique} of them no other trial covers")), "{name}: {body}");
            let links: usize =
                m["rows"].as_array().unwrap().iter().skip(1).map(|r| r[2]["links"].as_array().unwrap().len()).sum();
            assert!(links > 0, "{name}: the column of its own lines is empty");
        }
    }
}
