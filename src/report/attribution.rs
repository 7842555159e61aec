//! Which trial covered which line: lcov tracefiles parsed, one per trial
//! (`llvm-cov export -format=lcov` over the trial's own `.profdata`), folded
//! into `report/attribution.json` (per source file, line ranges that share one
//! set of trials; each distinct set stored once, as ranges of trial indices),
//! `report/trials.json` (what each trial covers, alone and only it) and the
//! HTML pages under `report/attribution/`. `ccl-coverage who-covers` answers
//! from `attribution.json` without running llvm-cov.
//!
//! Only lines llvm-cov instruments (lcov `DA` records) appear: comments and
//! blank lines are never attributed.

#[cfg(test)]
use crate::coverage::lcov::parse_lcov;
pub(crate) use crate::coverage::trial_lines::{compact, expand};
use crate::device::lines::{DeviceLines, Outcomes};
use crate::error::{Error, Result};
use crate::report::elements::{Bits, Universe, held_once, holders};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Inclusive ranges as text: `3-5, 9`.
pub(crate) fn ranges_text(ranges: &[(u32, u32)]) -> String {
    ranges.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect::<Vec<_>>().join(", ")
}

/// What one trial's profile covers.
#[derive(Debug, Clone)]
pub(crate) struct TrialCoverage {
    pub(crate) name: String,
    pub(crate) slug: String,
    pub(crate) duration_s: f64,
    /// The lines, functions and branches it covered, numbered by the
    /// report's [`Universe`]: its figures are counted over the merged
    /// report's lines, functions and branches, never its own.
    pub(crate) covered: Bits,
    /// `(covered, count)` of regions, llvm-cov's summary's of its profile
    /// alone: regions are not in the merged report's lcov.
    pub(crate) regions: (u64, u64),
}

/// `report/attribution.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Attribution {
    pub(crate) about: String,
    /// Trial names; a trial is referred to by its index here.
    pub(crate) trials: Vec<String>,
    /// Distinct sets of trials, as inclusive ranges of trial indices; set 0
    /// is empty (instrumented, covered by no trial).
    pub(crate) trial_sets: Vec<Vec<(u32, u32)>>,
    /// Source file → `[first line, last line, trial set]`, sorted, for every
    /// instrumented line.
    pub(crate) files: BTreeMap<String, Vec<(u32, u32, u32)>>,
    /// Source file → `[line, branch, trial set that took it, trial set that did not]` for every
    /// device branch (NVIDIA's, from each trial's own kernel records), `branch` numbering the
    /// line's device branches as `device.lcov` does. A trial in neither set never executed it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) device_branches: BTreeMap<String, Vec<(u32, u32, u32, u32)>>,
}

/// Which trials took and which skipped one device branch of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceBranchTrials<'a> {
    pub(crate) branch: u32,
    pub(crate) taken: Vec<&'a str>,
    pub(crate) not_taken: Vec<&'a str>,
}

/// The answer to "who covers `file:line`".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CoveredBy<'a> {
    /// No code on that line (llvm-cov instruments nothing there).
    NotInstrumented,
    /// The trials that executed it (empty: instrumented, never executed).
    Trials(Vec<&'a str>),
}

impl Attribution {
    /// Builds the attribution of every instrumented line of the merged
    /// report (`universe`, which numbers them) to the trials that cover it.
    pub fn new(universe: &Universe, trials: &[TrialCoverage]) -> Attribution {
        let (words, rows) = holders(trials.iter().map(|t| &t.covered), universe.line_range());
        let mut sets: HashMap<Vec<u64>, u32> = HashMap::new();
        let mut trial_sets = vec![Vec::new()];
        sets.insert(vec![0; words], 0);
        let mut files = BTreeMap::new();
        for (name, lines) in universe.files() {
            let mut ranges: Vec<(u32, u32, u32)> = Vec::new();
            for (line, e) in lines {
                let bits = &rows[e * words..(e + 1) * words];
                let set = if let Some(set) = sets.get(bits) {
                    *set
                } else {
                    let next = trial_sets.len() as u32;
                    trial_sets.push(compact(members(bits)));
                    sets.insert(bits.to_vec(), next);
                    next
                };
                match ranges.last_mut() {
                    Some((_, end, s)) if *s == set && *end + 1 == line => *end = line,
                    _ => ranges.push((line, line, set)),
                }
            }
            files.insert(name.to_string(), ranges);
        }
        Attribution {
            about: "files: source file -> [first line, last line, index into trial_sets] for every line llvm-cov \
                    instruments; trial_sets: inclusive ranges of indices into trials; set 0 is empty (not covered)"
                .into(),
            trials: trials.iter().map(|t| t.name.clone()).collect(),
            trial_sets,
            files,
            device_branches: BTreeMap::new(),
        }
    }

    /// Adds each device branch of `device` (the merged report's) with the trials whose own
    /// records took it and those that did not: `trials` are [`Attribution::trials`]' slugs, in
    /// order, and `device.trials` each one's device coverage. A trial's branches are the
    /// merged report's, in the same order, since both come from the same cubins and listings.
    pub(crate) fn add_device_branches(&mut self, slugs: &[&str], device: &DeviceLines) {
        let mut sets: HashMap<Vec<(u32, u32)>, u32> =
            self.trial_sets.iter().enumerate().map(|(i, set)| (set.clone(), i as u32)).collect();
        let per_trial: Vec<_> = slugs.iter().map(|slug| device.trials.get(*slug).map(|c| c.branch_lines())).collect();
        for (file, lines) in device.all.branch_lines() {
            let mut rows = Vec::new();
            for (line, branches) in lines {
                for branch in 0..branches.len() {
                    let outcome = |i: usize| {
                        per_trial[i]
                            .as_ref()
                            .and_then(|placed| placed.get(file)?.get(&line)?.get(branch).copied().flatten())
                    };
                    let mut set_of = |pick: &dyn Fn(Outcomes) -> u64| {
                        let members = (0..slugs.len()).filter(|&i| outcome(i).is_some_and(|o| pick(o) > 0));
                        let set = compact(members.map(|i| i as u32));
                        let next = self.trial_sets.len() as u32;
                        *sets.entry(set.clone()).or_insert_with(|| {
                            self.trial_sets.push(set);
                            next
                        })
                    };
                    let taken = set_of(&|o| o.taken);
                    let not_taken = set_of(&|o| o.not_taken);
                    rows.push((line, branch as u32, taken, not_taken));
                }
            }
            self.device_branches.insert(file.to_string(), rows);
        }
    }

    /// The device branches of `line` of `path` (a file as [`Attribution::who_covers`] found it).
    pub(crate) fn device_branches_at(&self, path: &str, line: u32) -> Result<Vec<DeviceBranchTrials<'_>>> {
        let rows = self.device_branches.get(path).map(Vec::as_slice).unwrap_or_default();
        rows.iter()
            .filter(|row| row.0 == line)
            .map(|&(_, branch, taken, not_taken)| {
                Ok(DeviceBranchTrials { branch, taken: self.names(taken)?, not_taken: self.names(not_taken)? })
            })
            .collect()
    }

    /// The trials of trial set `set`.
    fn names(&self, set: u32) -> Result<Vec<&str>> {
        let ranges = self.trial_sets.get(set as usize).ok_or_else(|| {
            Error::new(format!("attribution.json is inconsistent: trial set {set} is not there; rerun the report"))
        })?;
        expand(ranges)
            .map(|i| {
                self.trials.get(i as usize).map(String::as_str).ok_or_else(|| {
                    Error::new(format!("attribution.json is inconsistent: trial {i} is not listed; rerun the report"))
                })
            })
            .collect()
    }

    /// The files whose path is `query` or ends with it (component by
    /// component: `src/init.cc` matches `/a/ccl/src/init.cc`, not `/a/xinit.cc`).
    pub(crate) fn find_files(&self, query: &str) -> Vec<&str> {
        if let Some((exact, _)) = self.files.get_key_value(query) {
            return vec![exact.as_str()];
        }
        let q = Path::new(query);
        self.files.keys().filter(|f| Path::new(f).ends_with(q)).map(String::as_str).collect()
    }

    /// The report's files (at most 5) whose name holds the query's, ignoring
    /// case (`ring.h` → `allreduce_ring.h`), else its stem (`ring`): a
    /// query that matched no file's path ending is offered these.
    fn files_named_like(&self, query: &str) -> Vec<&str> {
        let name_of = |path: &str| Path::new(path).file_name().map(|n| n.to_string_lossy().to_lowercase());
        let Some(wanted) = name_of(query) else { return Vec::new() };
        let stem = wanted.split('.').next().unwrap_or_default().to_string();
        for word in [wanted, stem] {
            let found: Vec<&str> = self
                .files
                .keys()
                .filter(|f| !word.is_empty() && name_of(f).is_some_and(|n| n.contains(&word)))
                .map(String::as_str)
                .take(5)
                .collect();
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// Who covers `line` of `file` (a path as [`Attribution::find_files`] takes it).
    pub(crate) fn who_covers(&self, file: &str, line: u32) -> Result<(&str, CoveredBy<'_>)> {
        let found = self.find_files(file);
        let path = match found.as_slice() {
            [one] => *one,
            [] => {
                let near = self.files_named_like(file);
                let near = if near.is_empty() { String::new() } else { format!("; did you mean {}?", near.join(", ")) };
                return Err(Error::new(format!(
                    "no instrumented source file matches {file:?}{near}; the report knows {} files (see report/attribution/index.html)",
                    self.files.len()
                )));
            }
            many => {
                return Err(Error::new(format!(
                    "{file:?} matches {} files; give more of the path: {}",
                    many.len(),
                    many.join(", ")
                )));
            }
        };
        let ranges = &self.files[path];
        let i = ranges.partition_point(|&(_, end, _)| end < line);
        let Some(&(_, _, set)) = ranges.get(i).filter(|&&(start, _, _)| start <= line) else {
            return Ok((path, CoveredBy::NotInstrumented));
        };
        let names = self.names(set).map_err(|e| e.context(format_args!("{path}:{line}")))?;
        Ok((path, CoveredBy::Trials(names)))
    }
}

/// The trial indices of a bit set.
fn members(bits: &[u64]) -> impl Iterator<Item = u32> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        let mut word = word;
        std::iter::from_fn(move || {
            (word != 0).then(|| {
                let bit = word.trailing_zeros();
                word &= word - 1;
                w as u32 * 64 + bit
            })
        })
    })
}

/// One trial in `report/trials.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrialSummary {
    pub(crate) index: usize,
    pub(crate) trial: String,
    pub(crate) slug: String,
    pub(crate) duration_s: f64,
    /// `covered/count` of the merged report's lines, functions and branches
    /// (its totals' denominators): what llvm-cov counts over one trial's
    /// profile alone differs with the trial (a function whose profile data
    /// does not match is left out, see docs/reports.md).
    pub(crate) lines: String,
    pub(crate) functions: String,
    #[serde(default)]
    pub(crate) branches: String,
    /// `covered/count` of regions, as llvm-cov counts them over this
    /// trial's profile alone (regions are not in the merged lcov).
    pub(crate) regions: String,
    /// Lines no other trial covers.
    pub(crate) unique_lines: usize,
    /// Functions no other trial covers.
    pub(crate) unique_functions: usize,
}

/// What each trial covers, and how many lines and functions only it covers.
pub(crate) fn trial_summaries(universe: &Universe, trials: &[TrialCoverage]) -> Vec<TrialSummary> {
    // Functions as the model counts them: by first line.
    let once = held_once(trials.iter().map(|t| &t.covered), universe.len());
    let only = |range: std::ops::Range<usize>| -> Vec<usize> {
        trials.iter().map(|t| t.covered.count_in(&once, range.clone())).collect()
    };
    let unique_lines = only(universe.line_range());
    let unique_functions = only(universe.function_range());
    let ratio = |(c, n): (u64, u64)| format!("{c}/{n}");
    let of_merged = |t: &TrialCoverage, range: std::ops::Range<usize>| {
        format!("{}/{}", t.covered.ones(range.clone()).count(), range.len())
    };
    trials
        .iter()
        .enumerate()
        .map(|(i, t)| TrialSummary {
            index: i,
            trial: t.name.clone(),
            slug: t.slug.clone(),
            duration_s: t.duration_s,
            lines: of_merged(t, universe.line_range()),
            functions: of_merged(t, universe.function_range()),
            branches: of_merged(t, universe.branch_range()),
            regions: ratio(t.regions),
            unique_lines: unique_lines[i],
            unique_functions: unique_functions[i],
        })
        .collect()
}

/// The `n` trials that add the most unique lines (ties by name), leaving
/// out those that add none.
pub(crate) fn top_unique(summaries: &[TrialSummary], n: usize) -> Vec<&TrialSummary> {
    let mut top: Vec<&TrialSummary> = summaries.iter().filter(|s| s.unique_lines > 0).collect();
    top.sort_by(|a, b| b.unique_lines.cmp(&a.unique_lines).then_with(|| a.trial.cmp(&b.trial)));
    top.truncate(n);
    top
}

/// The Markdown section of `summary.md` for attribution. It names the
/// pages rather than linking them: the summary is also shown on the CI
/// job's page (`$GITHUB_STEP_SUMMARY`), where a relative link is dead; in
/// CI the pages are in the job's report artifact, on the run's page
/// (`run_url`).
pub(crate) fn markdown(summaries: &[TrialSummary], run_url: Option<&str>) -> String {
    let mut md = String::from("\n### Trials that add the most unique lines\n\n");
    let top = top_unique(summaries, 5);
    if top.is_empty() {
        md.push_str("No trial covers a line that no other trial covers.\n");
    } else {
        md.push_str("| trial | unique lines | unique functions | lines | seconds |\n|---|---:|---:|---:|---:|\n");
        for s in top {
            md.push_str(&format!(
                "| `{}` | {} | {} | {} | {:.2} |\n",
                s.trial, s.unique_lines, s.unique_functions, s.lines, s.duration_s
            ));
        }
    }
    let artifact = match run_url {
        Some(url) => format!("in CI, in the report artifact of [this run]({url})"),
        None => "in CI, in the job's report artifact".to_string(),
    };
    md.push_str(&format!(
        "\nWhich trial covered which line: `report/attribution/index.html` in the workspace ({artifact}), \
         or `ccl-coverage who-covers FILE:LINE`; a smaller suite with the same coverage: `report/minimal-suite.json`.\n"
    ));
    md
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const LCOV: &str = "SF:/src/a.cc\nFN:3,f\nFN:9,g\nFNDA:2,f\nFNDA:0,g\nFNF:2\nFNH:1\nDA:3,2\nDA:4,2\nDA:5,0\nDA:9,0\n\
        BRDA:4,0,0,-\nLF:4\nLH:2\nend_of_record\nSF:/src/b.cc\nDA:1,1\nend_of_record\n";

    /// A trial that ran 1 s and covered what `text` (lcov) says, of `universe`.
    pub(crate) fn trial(universe: &Universe, name: &str, text: &str) -> TrialCoverage {
        let covered = crate::coverage::lcov::Covered::of(&parse_lcov(text, name).unwrap()).unwrap();
        TrialCoverage {
            name: name.into(),
            slug: name.replace("::", "."),
            duration_s: 1.0,
            covered: universe.bits(&covered).unwrap(),
            regions: (0, 0),
        }
    }

    #[test]
    fn lcov_is_parsed_and_bad_records_are_named() {
        let lcov = parse_lcov(LCOV, "t.lcov").unwrap();
        let a = &lcov.files["/src/a.cc"];
        assert_eq!(a.covered_lines().collect::<Vec<_>>(), [3, 4]);
        assert_eq!(a.lines.len(), 4);
        assert_eq!(a.functions["f"], (3, 2));
        assert_eq!(a.covered_functions().collect::<Vec<_>>(), ["f"]);
        assert_eq!(lcov.files.values().map(|f| f.covered_lines().count()).sum::<usize>(), 3);
        // lcov 2.x's FN with an end line; records of one file add up.
        let two =
            parse_lcov("SF:x\nFN:1,4,main\nFNDA:1,main\nDA:1,1\nend_of_record\nSF:x\nDA:1,2\nend_of_record\n", "t")
                .unwrap();
        assert_eq!(two.files["x"].functions["main"], (1, 1));
        assert_eq!(two.files["x"].lines[&1], 3);
        for (text, why) in [
            ("DA:1,1\n", "t:1: DA outside a file record (no SF)"),
            ("SF:x\nDA:one,1\n", "t:2: bad line number"),
            ("SF:x\nDA:1,-4\n", "t:2: bad execution count"),
            ("SF:x\nFNDA:3\n", "t:2: no function name"),
            ("garbage\n", "t:1: not an lcov record"),
        ] {
            let e = parse_lcov(text, "t").unwrap_err().to_string();
            assert!(e.starts_with(why), "{text:?}: {e}");
        }
    }

    /// Issue #49: `who-covers ring.h` did not offer `allreduce_ring.h`.
    #[test]
    fn a_file_that_matches_nothing_is_offered_files_named_like_it() {
        let lcov = "SF:/src/ring/allreduce_ring.h\nDA:1,1\nend_of_record\nSF:/src/Ring.cc\nDA:1,1\nend_of_record\nSF:/src/tree.cc\nDA:1,1\nend_of_record\n";
        let all = Universe::of(&parse_lcov(lcov, "all").unwrap()).unwrap();
        let att = Attribution::new(&all, &[trial(&all, "A::1K", lcov)]);
        let e = att.who_covers("ring.h", 1).unwrap_err().to_string();
        assert!(e.contains("\"ring.h\"; did you mean /src/ring/allreduce_ring.h?"), "{e}");
        let e = att.who_covers("include/ring.hpp", 1).unwrap_err().to_string();
        assert!(e.contains("did you mean /src/Ring.cc, /src/ring/allreduce_ring.h?"), "by stem, ignoring case: {e}");
        let e = att.who_covers("graph.cc", 1).unwrap_err().to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn ranges_as_text() {
        assert_eq!(ranges_text(&[(1, 3), (7, 7)]), "1-3, 7");
    }

    #[test]
    fn lines_are_attributed_to_the_trials_that_ran_them() {
        let all = Universe::of(&parse_lcov(LCOV, "all").unwrap()).unwrap();
        let t0 = trial(&all, "A::1K", "SF:/src/a.cc\nDA:3,1\nDA:4,1\nDA:5,0\nDA:9,0\nend_of_record\n");
        let t1 = trial(
            &all,
            "A::1K::mpi",
            "SF:/src/a.cc\nDA:3,1\nDA:4,1\nDA:5,0\nDA:9,0\nend_of_record\nSF:/src/b.cc\nDA:1,1\n",
        );
        let att = Attribution::new(&all, &[t0.clone(), t1.clone()]);
        assert_eq!(att.trial_sets, [vec![], vec![(0, 1)], vec![(1, 1)]]);
        assert_eq!(att.files["/src/a.cc"], [(3, 4, 1), (5, 5, 0), (9, 9, 0)]);
        assert_eq!(att.who_covers("a.cc", 4).unwrap(), ("/src/a.cc", CoveredBy::Trials(vec!["A::1K", "A::1K::mpi"])));
        assert_eq!(att.who_covers("src/b.cc", 1).unwrap().1, CoveredBy::Trials(vec!["A::1K::mpi"]));
        assert_eq!(att.who_covers("/src/a.cc", 5).unwrap().1, CoveredBy::Trials(vec![]));
        assert_eq!(att.who_covers("a.cc", 6).unwrap().1, CoveredBy::NotInstrumented);
        assert_eq!(att.who_covers("a.cc", 100).unwrap().1, CoveredBy::NotInstrumented);
        assert!(att.who_covers("c.cc", 1).unwrap_err().to_string().contains("no instrumented source file matches"));
        assert!(att.who_covers("cc", 1).is_err(), "a partial file name is not a match");
        let back: Attribution = serde_json::from_str(&serde_json::to_string(&att).unwrap()).unwrap();
        assert_eq!(back, att);
        let summaries = trial_summaries(&all, &[t0, t1]);
        assert_eq!((summaries[0].unique_lines, summaries[1].unique_lines), (0, 1));
        assert_eq!(top_unique(&summaries, 5).iter().map(|s| s.trial.as_str()).collect::<Vec<_>>(), ["A::1K::mpi"]);
        assert!(markdown(&summaries, None).contains("| `A::1K::mpi` | 1 | 0 |"));
        let md = markdown(&summaries, Some("https://github.com/o/r/actions/runs/7"));
        assert!(md.contains("in the report artifact of [this run](https://github.com/o/r/actions/runs/7)"), "{md}");
        assert!(!md.contains("](attribution/"), "a relative link is dead on the job's page: {md}");
    }

    #[test]
    fn a_broken_attribution_file_is_an_error_not_a_panic() {
        let all = Universe::of(&parse_lcov(LCOV, "all").unwrap()).unwrap();
        let mut att = Attribution::new(&all, &[trial(&all, "T", LCOV)]);
        att.trial_sets.truncate(1);
        assert!(att.who_covers("a.cc", 3).unwrap_err().to_string().contains("inconsistent"));
        att.trial_sets = vec![vec![], vec![(5, 5)]];
        assert!(att.who_covers("a.cc", 3).unwrap_err().to_string().contains("trial 5 is not listed"));
    }
}
