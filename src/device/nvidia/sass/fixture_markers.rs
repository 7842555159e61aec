//! The CUDA fixture's `// cov:` and `// cov-branch:` markers
//! (tests/fixtures/ccl-cuda/README.md) against kernel records captured on an
//! H200 (tests/fixtures/cuda-capture): every marked device line is covered,
//! and every marked line's branches take each outcome, in exactly the trials
//! its marker names.
//! On the GPU host the same test reads the run's fresh capture
//! (`CCL_COV_CUDA_CAPTURE`), so the assertion runs where the kernels ran.

use super::{DeviceCoverage, line_coverage, read_branch_listings, read_cubin_dir};
use crate::coverage::lcov::{self, Covered, parse_lcov};
use crate::device::lines::{DeviceLines, to_lcov};
use crate::device::nvidia::record::{Record, record_files};
use crate::report::attribution::{Attribution, TrialCoverage};
use crate::report::elements::{Bits, Universe, held_once};
use crate::report::minimal_suite::{Invocation, minimal_suite};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What a trial of `configs/h200_cuda.json` is, as the markers speak of it.
struct Trial {
    collective: String,
    small: bool,
    variant: String,
    types: BTreeSet<&'static str>,
}

impl Trial {
    /// From its slug, `AllReduce.1K.ring`.
    fn from_slug(slug: &str) -> Trial {
        let mut parts = slug.split('.');
        let collective = parts.next().unwrap_or_default().to_string();
        let size = parts.next().unwrap_or_default();
        let variant = parts.next().unwrap_or_default().to_string();
        let bytes: u64 = match size.strip_suffix('K') {
            Some(k) => k.parse::<u64>().unwrap() << 10,
            None => size.strip_suffix('M').unwrap().parse::<u64>().unwrap() << 20,
        };
        // `-d all` runs both; the int32 variant adds `-d int32`, which wins.
        let types = if variant == "int32" { BTreeSet::from(["int32"]) } else { BTreeSet::from(["float", "int32"]) };
        Trial { collective, small: bytes < 65536, variant, types }
    }

    fn holds(&self, marker: &str) -> bool {
        match marker.trim() {
            "always" => true,
            "never" => false,
            expr => expr.split(" | ").any(|alt| {
                let words: Vec<&str> = alt.split_whitespace().collect();
                words.chunks(2).all(|clause| match clause {
                    ["only", list] => list.split(',').any(|c| c == self.collective),
                    ["variant", list] => list.split(',').any(|v| v == self.variant),
                    ["size", "small"] => self.small,
                    ["size", "large"] => !self.small,
                    ["type", list] => list.split(',').any(|t| self.types.contains(t)),
                    other => panic!("not a marker clause: {other:?} in {marker:?}"),
                })
            }),
        }
    }
}

/// `(file name, line, marker)` of every marked line of the fixture's device code.
fn markers() -> Vec<(String, u32, String)> {
    marked("// cov:")
}

/// `(file name, line, marker)` of every line of the fixture's device code marked with `tag`.
fn marked(tag: &str) -> Vec<(String, u32, String)> {
    let dir = Path::new(ROOT).join("tests/fixtures/ccl-cuda/src/device");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for (i, line) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            // A marker ends a line of code; comment lines that mention them are prose.
            if let Some((code, marker)) = line.split_once(tag)
                && !code.trim().is_empty()
                && !code.trim_start().starts_with("//")
            {
                found.push((name.clone(), i as u32 + 1, marker.to_string()));
            }
        }
    }
    found.sort();
    found
}

/// The count of `file:line` (by file name under the fixture's device folder).
fn count(coverage: &DeviceCoverage, file: &str, line: u32) -> Option<u64> {
    let suffix = format!("ccl-cuda/src/device/{file}");
    coverage.files.iter().find(|(f, _)| f.ends_with(&suffix)).and_then(|(_, c)| c.lines.get(&line).copied())
}

/// The capture (`CCL_COV_CUDA_CAPTURE`, or the committed one) and each of
/// its 24 trials' slug and records, in slug order.
fn captured_trials() -> (std::path::PathBuf, Vec<(String, Vec<Record>)>) {
    let capture = std::env::var_os("CCL_COV_CUDA_CAPTURE")
        .map_or_else(|| Path::new(ROOT).join("tests/fixtures/cuda-capture"), std::path::PathBuf::from);
    let mut trials: Vec<_> = std::fs::read_dir(capture.join("trials")).unwrap().map(|e| e.unwrap().path()).collect();
    trials.sort();
    assert_eq!(trials.len(), 24, "configs/h200_cuda.json has 24 trials");
    let trials = trials
        .iter()
        .map(|dir| {
            let slug = dir.file_name().unwrap().to_string_lossy().into_owned();
            let records: Vec<Record> = record_files(dir).unwrap().iter().map(|f| Record::read(f).unwrap()).collect();
            (slug, records)
        })
        .collect();
    (capture, trials)
}

#[test]
fn every_marked_device_line_is_covered_in_exactly_its_trials() {
    let (capture, trials) = captured_trials();
    let cubins = read_cubin_dir(&capture.join("cubins")).unwrap();
    let markers = markers();
    assert!(markers.len() >= 15, "the fixture's markers were not found: {markers:?}");
    let mut wrong = Vec::new();
    for (slug, records) in &trials {
        assert_eq!(records.len(), 1, "{slug}: one process, one record");
        assert!(records[0].is_complete() && records[0].dropped == 0, "{slug}: the record is whole");
        let coverage = line_coverage(&cubins, &BTreeMap::new(), records).unwrap();
        let trial = Trial::from_slug(slug);
        for (file, line, marker) in &markers {
            let Some(n) = count(&coverage, file, *line) else {
                wrong.push(format!("{file}:{line} ({marker}) has no instruction in the cubins"));
                continue;
            };
            let expected = trial.holds(marker);
            if (n > 0) != expected {
                wrong.push(format!(
                    "{slug}: {file}:{line} ran {n} times, expected {}: {marker}",
                    if expected { "some" } else { "none" }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{} mismatches:\n{}", wrong.len(), wrong.join("\n"));
}

/// `taken <expr>; not-taken <expr>`.
fn branch_marker(marker: &str) -> (&str, &str) {
    let (taken, not_taken) = marker.split_once(';').expect("taken ...; not-taken ...");
    (
        taken.trim().strip_prefix("taken ").expect("taken"),
        not_taken.trim().strip_prefix("not-taken ").expect("not-taken"),
    )
}

#[test]
fn every_marked_branch_takes_each_outcome_in_exactly_its_trials() {
    let (capture, trials) = captured_trials();
    let cubins = read_cubin_dir(&capture.join("cubins")).unwrap();
    let listings = read_branch_listings(&capture.join("cubins"), None).unwrap().unwrap();
    let markers = marked("// cov-branch:");
    assert_eq!(markers.len(), 6, "the fixture's branch markers: {markers:?}");
    let mut wrong = Vec::new();
    for (slug, records) in &trials {
        let coverage = line_coverage(&cubins, &listings, records).unwrap();
        let placed = coverage.branch_lines();
        let trial = Trial::from_slug(slug);
        for (file, line, marker) in &markers {
            let suffix = format!("ccl-cuda/src/device/{file}");
            let branches = placed.iter().find(|(f, _)| f.ends_with(&suffix)).and_then(|(_, lines)| lines.get(line));
            let Some(branches) = branches.filter(|b| !b.is_empty()) else {
                wrong.push(format!("{file}:{line} ({marker}) has no device branch"));
                continue;
            };
            let (taken, not_taken) = branch_marker(marker);
            let seen_taken = branches.iter().flatten().any(|o| o.taken > 0);
            let seen_not_taken = branches.iter().flatten().any(|o| o.not_taken > 0);
            for (outcome, seen, expr) in [("taken", seen_taken, taken), ("not taken", seen_not_taken, not_taken)] {
                if seen != trial.holds(expr) {
                    wrong.push(format!("{slug}: {file}:{line} {outcome} {seen}, expected {expr}: {branches:?}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} mismatches:\n{}", wrong.len(), wrong.join("\n"));
}

#[test]
fn the_markers_read_as_the_readme_says() {
    let t = Trial::from_slug("AllReduce.1M.direct");
    assert!(t.holds("only AllReduce,ReduceScatter size large variant direct"));
    assert!(!t.holds("only AllReduce size small"));
    assert!(t.holds("only AllGather | only AllReduce type float"));
    assert!(!Trial::from_slug("AllReduce.1K.int32").holds("only AllReduce type float"));
    assert!(!t.holds("never") && t.holds("always"));
}

/// The capture's device coverage as the report takes it (`device_lines`: every trial's from
/// its own records, and all of them), with CUDA's headers left out as the report's rules
/// leave them; and each trial as the report's attribution holds it, named by its slug.
fn attributed_capture() -> (DeviceLines, Universe, Vec<TrialCoverage>) {
    let (capture, trials) = captured_trials();
    let records: BTreeMap<String, Vec<std::path::PathBuf>> = trials
        .iter()
        .map(|(slug, _)| (slug.clone(), record_files(&capture.join("trials").join(slug)).unwrap()))
        .collect();
    let mut lines = super::device_lines(&capture.join("cubins"), &records, None).unwrap();
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
                lines: (0, 0),
                functions: (0, 0),
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
        let four = |_: &str| Some(1000);
        let (text, _) = crate::harness::who_covers::answer(&attribution, path, *line, &four).unwrap();
        for b in &branches {
            let said = format!("device branch {} taken in {} of 24 trials", b.branch, b.taken.len());
            if !text.contains(&said) {
                wrong.push(format!("{file}:{line}: the answer does not say {said:?}:\n{text}"));
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
    crate::coverage::exports::apply(&mut export, &model, "test").unwrap();
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
    crate::report::device_pages::write(&ws, &pages, "capture", &lines).unwrap();
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
