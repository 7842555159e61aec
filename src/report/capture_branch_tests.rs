//! The report's outputs over the H200 capture's device branches (tests/fixtures/cuda-capture,
//! which CI has without a GPU): `who-covers`, the minimal suite, Cobertura, the JSON export and
//! the device pages, each against the fixture's `// cov-branch:` markers.

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
}

/// Each marked branch line: its path, file name, line and `(covered, count)` outcomes.
type MarkedOutcomes = Vec<(String, String, u32, (u64, u64))>;

/// The capture's merged model as the report makes it (no host records: the device's folded in
/// and recounted), each marked branch line's device outcomes over the suite, and the totals.
fn capture_model() -> (String, MarkedOutcomes, (u64, u64)) {
    let (lines, _, _) = attributed_capture();
    let text = lcov::recount(&lcov::fold_in("", &to_lcov(&lines.all), "k").unwrap(), "model").unwrap();
    let placed = lines.all.branch_lines();
    let marked = marked("// cov-branch:")
        .into_iter()
        .map(|(file, line, _)| {
            let (path, lines) =
                placed.iter().find(|(f, _)| f.ends_with(&format!("ccl-cuda/src/device/{file}"))).unwrap();
            let outcomes = &lines[&line];
            let covered = outcomes.iter().flatten().map(|o| u64::from(o.taken > 0) + u64::from(o.not_taken > 0)).sum();
            (path.to_string(), file, line, (covered, 2 * outcomes.len() as u64))
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
    for (path, file, line, (hit, all)) in marked {
        let class = xml.split("<class ").find(|c| c.contains(&format!("filename=\"{}\"", &path[1..]))).unwrap();
        let row = class.lines().find(|l| l.contains(&format!("number=\"{line}\""))).unwrap();
        let expected = format!("condition-coverage=\"{}% ({hit}/{all})\"", hit * 100 / all);
        assert!(
            row.contains("branch=\"true\"") && row.contains(&expected),
            "{file}:{line}: {row} (expected {expected})"
        );
    }
}

#[test]
fn the_json_export_s_summaries_count_device_branches() {
    let (text, marked, (covered, count)) = capture_model();
    let model = parse_lcov(&text, "model").unwrap();
    let mut export = serde_json::json!({"data": [{"files": [], "totals": {}}]});
    crate::coverage::exports::apply(&mut export, &model, &Default::default(), "test").unwrap();
    let data = &export["data"][0];
    assert_eq!(
        (data["totals"]["branches"]["covered"].as_u64(), data["totals"]["branches"]["count"].as_u64()),
        (Some(covered), Some(count))
    );
    for (path, file, _, _) in marked {
        let entry = data["files"].as_array().unwrap().iter().find(|f| f["filename"] == path.as_str()).unwrap();
        let branches = &entry["summary"]["branches"];
        let expected = model.files[&path].tallies().branches;
        assert!(expected.count > 0, "{file}: device branches in the model");
        assert_eq!(
            (branches["covered"].as_u64(), branches["count"].as_u64()),
            (Some(expected.covered), Some(expected.count)),
            "{file}"
        );
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
    let placed = lines.all.branch_lines();
    for (file, line, _) in marked("// cov-branch:") {
        let i = lines.all.files.keys().position(|f| f.ends_with(&format!("ccl-cuda/src/device/{file}"))).unwrap();
        let page = std::fs::read_to_string(pages.join(format!("file{i}.html"))).unwrap();
        let row = page.split("<tr").find(|r| r.contains(&format!("<td class=\"num\">{line}</td>"))).unwrap();
        let path = lines.all.files.keys().nth(i).unwrap();
        let both = placed[path.as_str()][&line].iter().all(|o| o.is_some_and(|o| o.taken > 0 && o.not_taken > 0));
        let class = if both { "class=\"hit\"" } else { "class=\"part\"" };
        assert!(row.starts_with(&format!(" {class}")), "{file}:{line}: {row}");
        assert!(row.contains('['), "{file}:{line}: no branch cell: {row}");
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
    let mut wrong = Vec::new();
    for (file, line, _) in &markers {
        let (path, at) = &pages[file];
        let page = std::fs::read_to_string(at).unwrap();
        let start = page.find(&format!("<a name='L{line}' href='#L{line}'>")).unwrap();
        let row = &page[start..page[start..].find("</td></tr>").map_or(page.len(), |e| start + e)];
        let outcomes = &placed[path][line];
        for (k, o) in outcomes.iter().enumerate() {
            let class = |count: Option<u64>| if count.is_some_and(|c| c > 0) { "None" } else { "red branch" };
            let expected = format!(
                "Device branch {k}</a>: [<span class='{}'>Taken</span>: <span class='{}'>",
                class(o.map(|o| o.taken)),
                if o.is_some_and(|o| o.taken > 0) { "covered-line" } else { "uncovered-line" }
            );
            let not_taken = format!("<span class='{}'>Not taken</span>", class(o.map(|o| o.not_taken)));
            let Some(view) = row.find(&expected).map(|i| &row[i..]) else {
                wrong.push(format!("{file}:{line}: no {expected:?} in {row}"));
                continue;
            };
            if !view.lines().next().is_some_and(|l| l.contains(&not_taken)) {
                wrong.push(format!("{file}:{line}: branch {k} without {not_taken:?}: {view}"));
            }
        }
        if row.matches("Device branch ").count() != outcomes.len() {
            wrong.push(format!("{file}:{line}: {} branches, the row shows otherwise: {row}", outcomes.len()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
