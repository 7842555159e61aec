//! The report's outputs over the H200 capture's device branches (tests/fixtures/cuda-capture,
//! which CI has without a GPU): `who-covers`, the minimal suite, Cobertura, the JSON export and
//! the device pages, each against the fixture's `// cov-branch:` markers: which trials take
//! each way of a marked line's branches, read from the fixture's source, not from the model.
//! Cobertura, the JSON summaries and the partial mark count outcomes without their direction,
//! so there the markers bound the counts (a line whose marker says `never` for one way has at
//! most half its outcomes covered); the device pages' cells and llvm-cov's pages show each way,
//! and there the markers decide each way's zero or not.

use crate::coverage::lcov::{self, Covered, parse_lcov};
use crate::device::lines::{DeviceLines, to_lcov};
use crate::device::nvidia::record::record_files;
use crate::device::nvidia::sass::fixture_markers::{Trial, branch_marker, captured_trials, marked};
use crate::report::attribution::{Attribution, TrialCoverage};
use crate::report::elements::{Bits, Universe, held_once};
use crate::report::minimal_suite::{Invocation, minimal_suite};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The capture's device coverage as the report takes it (`device_lines`: every trial's from
/// its own records, and all of them), with CUDA's headers left out as the report's rules
/// leave them; and each trial as the report's attribution holds it, named by its slug.
pub(crate) fn attributed_capture() -> (DeviceLines, Universe, Vec<TrialCoverage>) {
    let (capture, trials) = captured_trials();
    let records: BTreeMap<String, Vec<std::path::PathBuf>> = trials
        .iter()
        .map(|(slug, _)| (slug.clone(), record_files(&capture.join("trials").join(slug)).unwrap()))
        .collect();
    let mut lines = crate::device::nvidia::sass::device_lines(&capture.join("cubins"), &records, None).unwrap();
    let keep = |file: &str| !file.starts_with("/usr/");
    lines.all.retain_files(&keep);
    lines.trials.values_mut().for_each(|c| c.retain_files(&keep));
    let universe = Universe::of(&parse_lcov(&to_lcov(&lines.all), "all").unwrap()).unwrap();
    let coverage = trials
        .iter()
        .map(|(slug, _)| {
            let lcov = parse_lcov(&to_lcov(&lines.trials[slug]), slug).unwrap();
            TrialCoverage {
                name: slug.clone(),
                slug: slug.clone(),
                duration_s: 1.0,
                covered: universe.bits(&Covered::of(&lcov).unwrap()).unwrap(),
                regions: (0, 0),
            }
        })
        .collect();
    (lines, universe, coverage)
}

/// Whether some trial of the capture takes each way of a marked line, by its marker: the
/// independent side of every check below.
fn suite_ways(marker: &str) -> (bool, bool) {
    let (_, trials) = captured_trials();
    let (taken, not_taken) = branch_marker(marker);
    let some = |expr: &str| trials.iter().any(|(slug, _)| Trial::from_slug(slug).holds(expr));
    (some(taken), some(not_taken))
}

/// What a line's covered outcomes `hit` of `all` must be, given its marker's two ways.
fn bounded_by_marker(hit: u64, all: u64, ways: (bool, bool)) -> Result<(), String> {
    let ok = match ways {
        (false, false) => hit == 0,
        // Every branch of the line went one way at most.
        (true, false) | (false, true) => hit >= 1 && hit <= all / 2,
        (true, true) => hit >= 2,
    };
    if all == 0 || !all.is_multiple_of(2) {
        return Err(format!("{all} outcomes: not two per branch"));
    }
    if ok {
        Ok(())
    } else {
        Err(format!("{hit}/{all} outcomes covered, the marker's ways (taken, not taken) are {ways:?}"))
    }
}

#[test]
fn who_covers_a_marked_branch_line_names_exactly_the_trials_of_each_outcome() {
    let (lines, universe, trials) = attributed_capture();
    let slugs: Vec<&str> = trials.iter().map(|t| t.slug.as_str()).collect();
    let mut attribution = Attribution::new(&universe, &trials);
    attribution.add_device_branches(&slugs, &lines);
    // As `who-covers` reads it back.
    let attribution: Attribution = serde_json::from_str(&serde_json::to_string(&attribution).unwrap()).unwrap();
    let markers = marked("// cov-branch:");
    assert_eq!(markers.len(), 6, "the fixture's branch markers: {markers:?}");
    let mut wrong = Vec::new();
    for (file, line, marker) in &markers {
        let (path, _) = attribution.who_covers(&format!("ccl-cuda/src/device/{file}"), *line).unwrap();
        let branches = attribution.device_branches_at(path, *line).unwrap();
        if branches.is_empty() {
            wrong.push(format!("{file}:{line}: who-covers shows no device branch"));
        }
        let (taken, not_taken) = branch_marker(marker);
        for (outcome, expr, of) in [
            ("taken", taken, branches.iter().flat_map(|b| b.taken.clone()).collect::<BTreeSet<_>>()),
            ("not taken", not_taken, branches.iter().flat_map(|b| b.not_taken.clone()).collect()),
        ] {
            let expected: BTreeSet<&str> =
                slugs.iter().copied().filter(|slug| Trial::from_slug(slug).holds(expr)).collect();
            if of != expected {
                wrong.push(format!("{file}:{line} {outcome}: who-covers {of:?}, the marker ({expr}) {expected:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{} mismatches:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_minimal_suite_keeps_every_device_branch_outcome_and_each_trial_alone_in_one() {
    let (_, universe, trials) = attributed_capture();
    let suite = minimal_suite(&universe, &trials, &[], trials.len(), trials.len() as f64, &Invocation::default());
    let mut any = Bits::with_len(universe.len());
    let mut kept = Bits::with_len(universe.len());
    for t in &trials {
        any.union_with(&t.covered);
        if suite.trials.contains(&t.name) {
            kept.union_with(&t.covered);
        }
    }
    let branches = universe.branch_range();
    let lost: Vec<usize> = any.ones(branches.clone()).filter(|e| !kept.ones(*e..*e + 1).any(|_| true)).collect();
    assert!(lost.is_empty(), "device branch outcomes the minimal suite {:?} loses: {lost:?}", suite.trials);
    assert_eq!(suite.branches, any.ones(branches.clone()).count());
    // A trial that alone takes some outcome of a device branch stays, whatever its lines.
    let once = held_once(trials.iter().map(|t| &t.covered), universe.len());
    let alone: Vec<&str> =
        trials.iter().filter(|t| t.covered.count_in(&once, branches.clone()) > 0).map(|t| t.name.as_str()).collect();
    assert!(!alone.is_empty(), "no trial alone takes a device branch outcome: the test could not fail");
    for name in &alone {
        assert!(suite.trials.iter().any(|t| t == name), "{name} alone takes a device branch outcome and was dropped");
    }
    // By the markers: each way some trial takes, some trial of the suite takes.
    for (file, line, marker) in marked("// cov-branch:") {
        let (taken, not_taken) = branch_marker(&marker);
        for expr in [taken, not_taken] {
            let holds = |slug: &String| Trial::from_slug(slug).holds(expr);
            if trials.iter().any(|t| holds(&t.slug)) {
                let kept: Vec<String> =
                    trials.iter().filter(|t| suite.trials.contains(&t.name)).map(|t| t.slug.clone()).collect();
                assert!(kept.iter().any(holds), "{file}:{line}: no trial of the suite {kept:?} holds {expr}");
            }
        }
    }
}

/// Each marked branch line: its path, file name, line and the marker's two ways over the suite.
type MarkedWays = Vec<(String, String, u32, (bool, bool))>;

/// The capture's merged model as the report makes it (no host records: the device's folded in
/// and recounted), each marked branch line with its marker's ways, and the model's totals.
fn capture_model() -> (String, MarkedWays, (u64, u64)) {
    let (lines, _, _) = attributed_capture();
    let text = lcov::recount(&lcov::fold_in("", &to_lcov(&lines.all), "k").unwrap(), "model").unwrap();
    let files: Vec<&String> = lines.all.files.keys().collect();
    let marked = marked("// cov-branch:")
        .into_iter()
        .map(|(file, line, marker)| {
            let path = files.iter().find(|f| f.ends_with(&format!("ccl-cuda/src/device/{file}"))).unwrap();
            ((*path).clone(), file, line, suite_ways(&marker))
        })
        .collect();
    (text, marked, lines.all.branch_totals())
}

#[test]
fn cobertura_s_branch_rate_and_condition_coverage_count_device_branches() {
    let (text, marked, (covered, count)) = capture_model();
    let dir = tempfile::tempdir().unwrap();
    let ws = crate::workspace::Workspace::new(&dir.path().join("ws")).unwrap();
    ws.create().unwrap();
    let out = ws.report_dir().join("cobertura.xml");
    crate::report::cobertura(&ws, &text, Path::new("/"), &out).unwrap();
    let xml = std::fs::read_to_string(&out).unwrap();
    let root = xml.lines().find(|l| l.contains("<coverage ")).unwrap();
    let rate = format!("branches-covered=\"{covered}\" branches-valid=\"{count}\"");
    assert!(root.contains(&rate) && !root.contains("branch-rate=\"0\""), "{root} (expected {rate})");
    let condition = regex::Regex::new(r#"condition-coverage="(\d+)% \((\d+)/(\d+)\)""#).unwrap();
    for (path, file, line, ways) in marked {
        let class = xml.split("<class ").find(|c| c.contains(&format!("filename=\"{}\"", &path[1..]))).unwrap();
        let row = class.lines().find(|l| l.contains(&format!("number=\"{line}\""))).unwrap();
        let Some(c) = condition.captures(row).filter(|_| row.contains("branch=\"true\"")) else {
            panic!("{file}:{line}: no branch condition in {row}")
        };
        let [percent, hit, all] = [1, 2, 3].map(|i| c[i].parse::<u64>().unwrap());
        bounded_by_marker(hit, all, ways).unwrap_or_else(|e| panic!("{file}:{line}: {e}: {row}"));
        assert_eq!(percent, hit * 100 / all, "{file}:{line}: {row}");
    }
}

#[test]
fn the_json_export_s_summaries_count_device_branches() {
    let (text, marked, (covered, count)) = capture_model();
    let model = parse_lcov(&text, "model").unwrap();
    let mut export = serde_json::json!({"data": [{"files": [], "totals": {}}]});
    crate::coverage::model_totals::apply(&mut export, &model, &Default::default(), "test").unwrap();
    let data = &export["data"][0];
    assert_eq!(
        (data["totals"]["branches"]["covered"].as_u64(), data["totals"]["branches"]["count"].as_u64()),
        (Some(covered), Some(count))
    );
    // Per file, the markers bound the summary: at least the ways they say some trial takes,
    // two outcomes per marked line at least, and short of all where a marker says `never`.
    let mut by_file: BTreeMap<String, Vec<(bool, bool)>> = BTreeMap::new();
    for (path, _, _, ways) in marked {
        by_file.entry(path).or_default().push(ways);
    }
    for (path, ways) in by_file {
        let entry = data["files"].as_array().unwrap().iter().find(|f| f["filename"] == path.as_str()).unwrap();
        let branches = &entry["summary"]["branches"];
        let (hit, all) = (branches["covered"].as_u64().unwrap(), branches["count"].as_u64().unwrap());
        let said: u64 = ways.iter().map(|(t, n)| u64::from(*t) + u64::from(*n)).sum();
        assert!(hit >= said && all >= 2 * ways.len() as u64, "{path}: {hit}/{all}, the markers say {ways:?}");
        if ways.iter().any(|(t, n)| !(t & n)) {
            assert!(hit < all, "{path}: {hit}/{all} although a marker says one way is never taken");
        }
        let expected = model.files[&path].tallies().branches;
        assert_eq!((hit, all), (expected.covered, expected.count), "{path}: the export and the model");
    }
}

#[test]
fn the_device_source_pages_mark_a_line_whose_device_branches_did_not_go_both_ways() {
    let (lines, _, _) = attributed_capture();
    let dir = tempfile::tempdir().unwrap();
    let ws = crate::workspace::Workspace::new(&dir.path().join("ws")).unwrap();
    ws.create().unwrap();
    let pages = ws.report_dir().join("html/device");
    ws.create_dir(&pages).unwrap();
    crate::report::device_pages::write(&ws, &pages, "capture", &lines, &|f: &str| std::fs::read_to_string(f).ok())
        .unwrap();
    let cell = regex::Regex::new(r"\[([0-9-]+), ([0-9-]+)\]").unwrap();
    for (file, line, marker) in marked("// cov-branch:") {
        let (taken, not_taken) = suite_ways(&marker);
        let i = lines.all.files.keys().position(|f| f.ends_with(&format!("ccl-cuda/src/device/{file}"))).unwrap();
        let page = std::fs::read_to_string(pages.join(format!("file{i}.html"))).unwrap();
        let row = page.split("<tr").find(|r| r.contains(&format!("<td class=\"num\">{line}</td>"))).unwrap();
        // The branch cell, `[taken, not taken]` per branch, each way as the marker says.
        let branches: Vec<(u64, u64)> = cell
            .captures_iter(row)
            .map(|c| [1, 2].map(|i| c[i].parse::<u64>().unwrap_or(0)))
            .map(|[t, n]| (t, n))
            .collect();
        assert!(!branches.is_empty(), "{file}:{line}: no branch cell: {row}");
        assert_eq!(branches.iter().any(|b| b.0 > 0), taken, "{file}:{line} taken, marker {marker}: {row}");
        assert_eq!(branches.iter().any(|b| b.1 > 0), not_taken, "{file}:{line} not taken, marker {marker}: {row}");
        // A line one of whose ways no trial took did not go both ways.
        if !(taken && not_taken) {
            assert!(row.starts_with(" class=\"part\""), "{file}:{line} ({marker}) is not marked partial: {row}");
        }
    }
}

/// llvm-cov's page of each marked file (its rows as llvm-cov 22 writes them, with the fixture's
/// text; `device_pages`' own test checks them against llvm-cov's) shows the capture's device
/// branches under the marked line, found by its page's path as the report finds it, each
/// outcome red exactly when no trial of the capture had it.
#[test]
fn llvm_cov_s_source_pages_show_the_device_branches_of_a_marked_line() {
    let (lines, _, _) = attributed_capture();
    let names = crate::coverage::source_names::SourceNames::new(Path::new("/nowhere/src"), Path::new("/nowhere/b"));
    let marks = crate::report::device_pages::host_page_marks(&lines.all, &names);
    let placed = lines.all.branch_lines();
    let dir = tempfile::tempdir().unwrap();
    let ws = crate::workspace::Workspace::new(&dir.path().join("ws")).unwrap();
    ws.create().unwrap();
    let html = ws.report_dir().join("html");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ccl-cuda/src/device");
    let markers = marked("// cov-branch:");
    let mut pages = BTreeMap::new();
    for (file, _, _) in &markers {
        let path = *placed.keys().find(|f| f.ends_with(&format!("ccl-cuda/src/device/{file}"))).unwrap();
        assert!(path.starts_with('/'), "llvm-cov names files by their absolute paths: {path}");
        let text = std::fs::read_to_string(fixture.join(file)).unwrap();
        let mut page = String::from("<html><head></head><body><table>");
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            page.push_str(&format!(
                "<tr><td class='line-number'><a name='L{n}' href='#L{n}'><pre>{n}</pre></a></td><td class='covered-line'><pre>1</pre></td><td class='code'><pre>{}</pre></td></tr>",
                crate::report::escape_html(line)
            ));
        }
        page.push_str("</table></body></html>");
        let at = html.join(format!("coverage{path}.html"));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, page).unwrap();
        pages.insert(file.clone(), (path, at));
    }
    crate::report::attribution_pages::link_source_pages(&ws, &html, &marks).unwrap();
    // Each branch as llvm-cov prints one: each way red exactly when its printed count is 0.
    let shown = regex::Regex::new(
        r"Device branch (\d+)</a>: \[<span class='([a-zA-Z ]+)'>Taken</span>: <span class='[a-z-]+'>([0-9-]+)</span>, <span class='([a-zA-Z ]+)'>Not taken</span>: <span class='[a-z-]+'>([0-9-]+)</span>\]",
    )
    .unwrap();
    let mut wrong = Vec::new();
    for (file, line, marker) in &markers {
        let (_, at) = &pages[file];
        let page = std::fs::read_to_string(at).unwrap();
        let start = page.find(&format!("<a name='L{line}' href='#L{line}'>")).unwrap();
        let row = &page[start..page[start..].find("</td></tr>").map_or(page.len(), |e| start + e)];
        let branches: Vec<_> = shown.captures_iter(row).collect();
        if branches.is_empty() || branches.len() != row.matches("Device branch ").count() {
            wrong.push(format!("{file}:{line}: device branches not as llvm-cov shows branches: {row}"));
            continue;
        }
        let (taken, not_taken) = suite_ways(marker);
        for (way, said, class, count) in [("taken", taken, 2, 3), ("not taken", not_taken, 4, 5)] {
            let counts: Vec<u64> = branches.iter().map(|b| b[count].parse().unwrap_or(0)).collect();
            if counts.iter().any(|c| *c > 0) != said {
                wrong.push(format!("{file}:{line} {way}: printed {counts:?}, the marker ({marker}) says {said}"));
            }
            for (b, c) in branches.iter().zip(&counts) {
                if (&b[class] == "red branch") != (*c == 0) {
                    wrong.push(format!("{file}:{line} {way}: class {:?} with count {c}", &b[class]));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
