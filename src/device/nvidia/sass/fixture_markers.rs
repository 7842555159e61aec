//! The CUDA fixture's `// cov:` and `// cov-branch:` markers
//! (tests/fixtures/ccl-cuda/README.md) against kernel records captured on an
//! H200 (tests/fixtures/cuda-capture): every marked device line is covered,
//! and every marked line's branches take each outcome, in exactly the trials
//! its marker names.
//! On the GPU host the same test reads the run's fresh capture
//! (`CCL_COV_CUDA_CAPTURE`), so the assertion runs where the kernels ran.

use super::{DeviceCoverage, line_coverage, read_branch_listings, read_cubin_dir};
use crate::device::nvidia::record::{Record, record_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What a trial of `configs/h200_cuda.json` is, as the markers speak of it.
pub(crate) struct Trial {
    collective: String,
    small: bool,
    variant: String,
    types: BTreeSet<&'static str>,
}

impl Trial {
    /// From its slug, `AllReduce.1K.ring`.
    pub(crate) fn from_slug(slug: &str) -> Trial {
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

    pub(crate) fn holds(&self, marker: &str) -> bool {
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
pub(crate) fn marked(tag: &str) -> Vec<(String, u32, String)> {
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
pub(crate) fn captured_trials() -> (std::path::PathBuf, Vec<(String, Vec<Record>)>) {
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
pub(crate) fn branch_marker(marker: &str) -> (&str, &str) {
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
