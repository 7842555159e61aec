//! `report/minimal-suite.json`: a subset of the trials whose union covers
//! exactly the lines, functions and branches the whole suite covers, with as
//! few trials as the greedy set cover finds (then trials made redundant by
//! later choices are dropped), with how far from optimal that can be and the
//! command lines (cargo test, nextest) that run just those trials. Regions
//! are not kept: llvm-cov's lcov has no regions per trial, and exporting
//! them per trial would double the report's time.
//!
//! The choice is made from coverage alone, ties going to the trial first by
//! name: the same results give the same set. Durations are measured, not
//! given, so a choice by duration changed between runs of the same suite
//! (22, 24 and 22 trials); they are reported, rounded, not weighed.

use crate::exec::process::Cmd;
use crate::exec::redact;
use crate::report::attribution::TrialCoverage;
use crate::report::elements::{Bits, Universe};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::PathBuf;

/// A cover: the chosen candidates and what can be said about its cost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cover {
    /// Indices into the candidates, in the order chosen.
    pub(crate) chosen: Vec<usize>,
    pub(crate) cost: f64,
    /// The greedy cover's cost before redundant sets were dropped.
    pub(crate) greedy_cost: f64,
    /// No cover costs less than this (see [`greedy_cover`]).
    pub(crate) lower_bound: f64,
    /// The most elements one candidate has (`d`).
    pub(crate) largest_set: usize,
    /// `H(d) = 1 + 1/2 + … + 1/d`: the greedy cost is at most `H(d)` times the optimum.
    pub(crate) harmonic: f64,
}

/// Ratio of new elements to cost, ordered for a max-heap (ties: lower index first).
#[derive(Debug, PartialEq)]
struct Gain {
    ratio: f64,
    index: usize,
}

impl Eq for Gain {}

impl Ord for Gain {
    fn cmp(&self, other: &Self) -> Ordering {
        self.ratio.total_cmp(&other.ratio).then_with(|| other.index.cmp(&self.index))
    }
}

impl PartialOrd for Gain {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Costs below this count as this, so a zero-duration trial still has a ratio.
const MIN_COST: f64 = 1e-9;

/// Greedy weighted set cover of every element any candidate has
/// (`candidates[i] = (cost, elements)`, elements below `universe`): take the
/// candidate with the most new elements per unit of cost until all are
/// covered (lazily: a candidate's gain only falls, so a popped candidate whose
/// recomputed gain still leads is taken), then drop chosen candidates whose
/// elements the others cover, most expensive first.
///
/// Bounds: the greedy cost is at most `H(d) ≤ ln(d) + 1` times the optimum
/// (Chvátal 1979), so `greedy cost / H(d)` is a lower bound on it; so is the
/// cost of the candidates that alone have some element (every cover holds
/// them). `lower_bound` is the larger.
pub(crate) fn greedy_cover(universe: usize, candidates: &[(f64, &Bits)]) -> Cover {
    let cost = |i: usize| candidates[i].0.max(MIN_COST);
    let mut holders = vec![0u32; universe];
    let mut sizes = Vec::with_capacity(candidates.len());
    for (_, elements) in candidates {
        let mut size = 0;
        for e in elements.ones(0..universe) {
            holders[e] = holders[e].saturating_add(1);
            size += 1;
        }
        sizes.push(size);
    }
    let mut covered = Bits::with_len(universe);
    let gain = |i: usize, covered: &Bits| candidates[i].1.count_not_in(covered, universe);
    let mut heap: BinaryHeap<Gain> =
        (0..candidates.len()).map(|i| Gain { ratio: gain(i, &covered) as f64 / cost(i), index: i }).collect();
    let mut chosen = Vec::new();
    while let Some(top) = heap.pop() {
        let new = gain(top.index, &covered);
        if new == 0 {
            continue;
        }
        let now = Gain { ratio: new as f64 / cost(top.index), index: top.index };
        // A stale gain only falls: one that still leads (ties: by index) wins.
        if heap.peek().is_some_and(|next| *next > now) {
            heap.push(now);
            continue;
        }
        covered.union_with(candidates[top.index].1);
        chosen.push(top.index);
    }
    let greedy_cost: f64 = chosen.iter().map(|&i| candidates[i].0).sum();
    // Drop what the others cover, the most expensive first.
    let mut times = vec![0u32; universe];
    for &i in &chosen {
        for e in candidates[i].1.ones(0..universe) {
            times[e] += 1;
        }
    }
    // Ties: the smaller set first, then the later candidate (by name).
    let mut by_cost = chosen.clone();
    by_cost
        .sort_by(|&a, &b| (candidates[b].0.total_cmp(&candidates[a].0)).then(sizes[a].cmp(&sizes[b])).then(b.cmp(&a)));
    for i in by_cost {
        let elements = candidates[i].1;
        if elements.ones(0..universe).all(|e| times[e] > 1) {
            for e in elements.ones(0..universe) {
                times[e] -= 1;
            }
            chosen.retain(|&c| c != i);
        }
    }
    let largest_set = sizes.iter().copied().max().unwrap_or(0);
    let harmonic: f64 = (1..=largest_set).map(|k| 1.0 / k as f64).sum();
    let essential: f64 = candidates
        .iter()
        .filter(|(_, elements)| elements.ones(0..universe).any(|e| holders[e] == 1))
        .map(|(c, _)| *c)
        .sum();
    let lower_bound = if harmonic > 0.0 { essential.max(greedy_cost / harmonic) } else { essential };
    Cover {
        cost: chosen.iter().map(|&i| candidates[i].0).sum(),
        chosen,
        greedy_cost,
        lower_bound,
        largest_set,
        harmonic,
    }
}

/// How many of each kind of element some trial covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) lines: usize,
    pub(crate) functions: usize,
    pub(crate) branches: usize,
}

/// Rounded to hundredths, as the file shows seconds and percentages:
/// `58.74999999999999` is noise of the sum, not information.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// What selects this suite besides the trials' names: the package to test
/// (so that the command runs from any folder) and the variables that name
/// the config, the workspace and the build. Without them `cargo test` would
/// run the default config's trials of the same names.
#[derive(Debug, Clone, Default)]
pub(crate) struct Invocation {
    /// The harness's `Cargo.toml`.
    pub(crate) manifest: PathBuf,
    pub(crate) env: Vec<(String, String)>,
    /// The variables of the `ccl-coverage run` form: never
    /// `CARGO_TARGET_DIR`, which to cargo also says where to compile.
    pub(crate) run_env: Vec<(String, String)>,
}

impl Invocation {
    /// `K=V … cargo SUBCOMMAND --manifest-path M ARGS`.
    fn cmd(&self, subcommand: &[&str], args: impl IntoIterator<Item = String>) -> Cmd {
        Cmd::new("cargo").args(subcommand).arg("--manifest-path").arg(&self.manifest).args(args).envs(self.env.clone())
    }
}

/// `cargo nextest run --manifest-path M --test collectives -E 'test(=A) | test(=B)'`:
/// the same trials as a nextest filterset, with the invocation's variables.
pub(crate) fn nextest_command(selected: &[&str], how: &Invocation) -> String {
    let set: Vec<String> = selected.iter().map(|n| format!("test(={n})")).collect();
    let args = ["--test", "collectives", "--run-ignored", "all", "-E"].map(String::from);
    how.cmd(&["nextest", "run"], args.into_iter().chain([set.join(" | ")])).display()
}

/// `K=V … ccl-coverage run --exact [--include-ignored] A B …`: the same
/// trials for a user of the installed binary, which compiles nothing.
pub(crate) fn run_command(selected: &[&str], planned: &[PlannedTrial], how: &Invocation) -> Cmd {
    let mut cmd = Cmd::new("ccl-coverage").args(["run", "--exact"]);
    if planned.iter().any(|p| p.ignored && selected.contains(&p.name)) {
        cmd = cmd.arg("--include-ignored");
    }
    cmd.args(selected.iter().copied()).envs(how.run_env.clone())
}

/// `report/minimal-suite.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MinimalSuite {
    pub(crate) about: String,
    pub(crate) trials: Vec<String>,
    pub(crate) trial_count: usize,
    pub(crate) full_suite_trials: usize,
    pub(crate) duration_s: f64,
    pub(crate) full_suite_duration_s: f64,
    pub(crate) percent_of_full_duration: f64,
    /// Covered by the subset, and so by the full suite.
    pub(crate) lines: usize,
    pub(crate) functions: usize,
    pub(crate) branches: usize,
    pub(crate) optimality: Optimality,
    /// Runs just these trials, by their exact names, from any folder: `env`
    /// then `argv`, as one shell line (secrets masked, as in every record).
    pub(crate) command: String,
    pub(crate) argv: Vec<String>,
    /// What the command sets: the config, the workspace, and the variables
    /// that chose the build (secrets masked).
    pub(crate) env: BTreeMap<String, String>,
    /// The same trials under nextest, as a filterset.
    pub(crate) nextest: String,
    /// The same trials with the installed `ccl-coverage` (secrets masked).
    #[serde(default)]
    pub(crate) run: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Optimality {
    pub(crate) method: String,
    pub(crate) guarantee: String,
    /// The optimal subset has at least this many trials.
    pub(crate) lower_bound_trials: usize,
    /// How many more trials than the lower bound the subset may have, in percent.
    pub(crate) gap_percent: f64,
}

/// One planned trial: its name and whether it is ignored by default.
pub(crate) struct PlannedTrial<'a> {
    pub(crate) name: &'a str,
    pub(crate) ignored: bool,
}

/// `K=V … cargo test --manifest-path M --test collectives -- --exact
/// [--include-ignored] A B …`: the selected trials by their exact names
/// (the harness takes several filters, as libtest does).
pub(crate) fn command(selected: &[&str], planned: &[PlannedTrial], how: &Invocation) -> Cmd {
    let mut args: Vec<String> = ["--test", "collectives", "--", "--exact"].map(String::from).to_vec();
    if planned.iter().any(|p| p.ignored && selected.contains(&p.name)) {
        args.push("--include-ignored".into());
    }
    args.extend(selected.iter().map(|n| (*n).to_string()));
    how.cmd(&["test"], args)
}

/// The minimal suite of `trials`, chosen from their coverage alone (see the
/// module), and its command line. `full_trials` and `full_duration_s` are
/// the whole suite's, trials without a profile included.
pub(crate) fn minimal_suite(
    universe: &Universe,
    trials: &[TrialCoverage],
    planned: &[PlannedTrial],
    full_trials: usize,
    full_duration_s: f64,
    how: &Invocation,
) -> MinimalSuite {
    let mut by_name: Vec<&TrialCoverage> = trials.iter().collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    let candidates: Vec<(f64, &Bits)> = by_name.iter().map(|t| (1.0, &t.covered)).collect();
    let cover = greedy_cover(universe.len(), &candidates);
    let mut any = Bits::with_len(universe.len());
    for t in trials {
        any.union_with(&t.covered);
    }
    let kept = Kept {
        lines: any.ones(universe.line_range()).count(),
        functions: any.ones(universe.function_range()).count(),
        branches: any.ones(universe.branch_range()).count(),
    };
    // The elements to cover: those some trial covers.
    let elements = kept.lines + kept.functions + kept.branches;
    let mut chosen = cover.chosen.clone();
    chosen.sort_unstable();
    let names: Vec<&str> = chosen.iter().map(|&i| by_name[i].name.as_str()).collect();
    let full = full_duration_s;
    let duration: f64 = chosen.iter().map(|&i| by_name[i].duration_s.max(0.0)).sum();
    let cmd = command(&names, planned, how);
    // Each trial costs 1: the bound is a count of trials.
    let lower_bound = cover.lower_bound.ceil() as usize;
    let gap = if lower_bound > 0 { (chosen.len() as f64 / lower_bound as f64 - 1.0) * 100.0 } else { 0.0 };
    MinimalSuite {
        about: "trials whose union covers exactly the lines, functions and branches the full suite covers (not \
                regions), as few as the greedy set cover finds, chosen from coverage alone (ties: the trial first by \
                name), so the same results give the same set; durations are those recorded in \
                results/<trial>.json, reported, not weighed"
            .into(),
        trials: names.iter().map(|n| (*n).to_string()).collect(),
        trial_count: chosen.len(),
        full_suite_trials: full_trials,
        duration_s: round2(duration),
        full_suite_duration_s: round2(full),
        percent_of_full_duration: round2(if full > 0.0 { duration * 100.0 / full } else { 100.0 }),
        lines: kept.lines,
        functions: kept.functions,
        branches: kept.branches,
        nextest: nextest_command(&names, how),
        run: run_command(&names, planned, how).display(),
        optimality: Optimality {
            method: "greedy set cover (each trial counts 1; ties: the first by name), then trials whose lines, \
                     functions and branches the other chosen trials cover are dropped, the smallest first"
                .into(),
            guarantee: format!(
                "the greedy cover ({} trials) has at most H(d) = {:.2} times the fewest trials possible (d = {} \
                 elements in the largest trial; H(d) <= ln(d)+1 <= ln(n)+1 = {:.2}, n = {elements} elements); so \
                 the fewest is at least {lower_bound}, the larger of that bound and the trials that alone cover some \
                 line, function or branch",
                cover.greedy_cost,
                cover.harmonic,
                cover.largest_set,
                (elements.max(1) as f64).ln() + 1.0,
            ),
            lower_bound_trials: lower_bound,
            gap_percent: round2(gap),
        },
        command: cmd.display(),
        argv: cmd.argv_redacted(),
        env: how.env.iter().map(|(k, v)| (k.clone(), redact::value(k, v))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov::parse_lcov;

    fn sets(len: usize, sets: &[(f64, &[u32])]) -> Vec<(f64, Bits)> {
        sets.iter().map(|(cost, elements)| (*cost, Bits::of(len, elements.iter().copied()))).collect()
    }

    fn refs(sets: &[(f64, Bits)]) -> Vec<(f64, &Bits)> {
        sets.iter().map(|(cost, bits)| (*cost, bits)).collect()
    }

    #[test]
    fn greedy_prefers_cheap_coverage_and_drops_what_became_redundant() {
        // Elements 0..6. The big set is expensive; two cheap sets cover it.
        let candidates = sets(6, &[(10.0, &[0, 1, 2, 3, 4, 5]), (1.0, &[0, 1, 2]), (1.0, &[3, 4, 5]), (0.5, &[2])]);
        let cover = greedy_cover(6, &refs(&candidates));
        let mut chosen = cover.chosen.clone();
        chosen.sort_unstable();
        assert_eq!(chosen, [1, 2]);
        assert_eq!(cover.cost, 2.0);
        assert_eq!(cover.largest_set, 6);
        assert!((cover.harmonic - 2.45).abs() < 0.01, "{}", cover.harmonic);
        assert!(cover.lower_bound <= 2.0 && cover.lower_bound > 0.0);
        // The whole set gains 2 per second, each singleton 1: it is taken first.
        let cover = greedy_cover(3, &refs(&sets(3, &[(1.0, &[0]), (1.0, &[1]), (1.5, &[0, 1, 2])])));
        assert_eq!(cover.chosen, [2], "the singletons are never needed");
    }

    #[test]
    fn essential_sets_bound_the_optimum_from_below() {
        let cover = greedy_cover(3, &refs(&sets(3, &[(4.0, &[0]), (1.0, &[1, 2]), (3.0, &[2])])));
        assert_eq!(cover.chosen.len(), 2);
        assert_eq!(cover.cost, 5.0);
        assert_eq!(cover.lower_bound, 5.0, "sets 0 and 1 alone hold elements 0 and 1");
    }

    #[test]
    fn zero_costs_empty_sets_and_out_of_range_elements_do_not_panic() {
        let cover = greedy_cover(2, &refs(&sets(64, &[(0.0, &[0]), (0.0, &[]), (1.0, &[1, 7])])));
        let mut chosen = cover.chosen.clone();
        chosen.sort_unstable();
        assert_eq!(chosen, [0, 2]);
        assert_eq!(greedy_cover(0, &[]).chosen, Vec::<usize>::new());
    }

    fn trial(universe: &Universe, name: &str, duration_s: f64, lcov: &str) -> TrialCoverage {
        let covered = crate::coverage::lcov::Covered::of(&parse_lcov(lcov, name).unwrap()).unwrap();
        TrialCoverage {
            name: name.into(),
            slug: name.into(),
            duration_s,
            covered: universe.bits(&covered).unwrap(),
            regions: (0, 0),
        }
    }

    /// A branch only one trial takes keeps that trial, although its lines and
    /// functions are all covered by another.
    #[test]
    fn branches_are_kept() {
        let planned = [PlannedTrial { name: "a", ignored: false }, PlannedTrial { name: "b", ignored: false }];
        let a = "SF:/f.cc\nDA:1,1\nBRDA:1,0,0,1\nBRDA:1,0,1,0\nend_of_record\n";
        let b = "SF:/f.cc\nDA:1,1\nBRDA:1,0,0,0\nBRDA:1,0,1,4\nend_of_record\n";
        let all =
            Universe::of(&parse_lcov("SF:/f.cc\nDA:1,1\nBRDA:1,0,0,1\nBRDA:1,0,1,4\nend_of_record\n", "all").unwrap())
                .unwrap();
        let suite = minimal_suite(
            &all,
            &[trial(&all, "a", 1.0, a), trial(&all, "b", 2.0, b)],
            &planned,
            2,
            3.0,
            &Invocation::default(),
        );
        assert_eq!(suite.trials, ["a", "b"]);
        assert_eq!((suite.lines, suite.functions, suite.branches), (1, 0, 2));
        assert_eq!(
            suite.nextest,
            "cargo nextest run --manifest-path '' --test collectives --run-ignored all -E 'test(=a) | test(=b)'"
        );
    }

    /// The same coverage gives the same set whatever the durations and the
    /// order the trials come in: ties go to the first by name, and timing
    /// (noise between runs of one suite) does not decide. What is printed is
    /// rounded.
    #[test]
    fn the_same_results_give_the_same_set_whatever_the_timing() {
        let names = ["b", "a", "d", "c"];
        let planned: Vec<PlannedTrial> = names.iter().map(|n| PlannedTrial { name: n, ignored: false }).collect();
        // a and b cover lines 1-2, c and d lines 2-3; each pair ties.
        let lcov = |n: &str| match n {
            "a" | "b" => "SF:/f.cc\nDA:1,1\nDA:2,1\nend_of_record\n",
            _ => "SF:/f.cc\nDA:2,1\nDA:3,1\nend_of_record\n",
        };
        let timings = [[1.0, 1.04, 0.5, 3.0], [1.06, 0.94, 9.0, 0.1], [0.05, 0.05, 0.05, 0.05]];
        let all =
            Universe::of(&parse_lcov("SF:/f.cc\nDA:1,1\nDA:2,1\nDA:3,1\nDA:4,0\nend_of_record\n", "all").unwrap())
                .unwrap();
        for durations in timings {
            let mut trials: Vec<TrialCoverage> =
                names.iter().zip(durations).map(|(n, d)| trial(&all, n, d, lcov(n))).collect();
            for _ in 0..2 {
                let suite = minimal_suite(&all, &trials, &planned, 4, 4.0, &Invocation::default());
                assert_eq!(suite.trials, ["a", "c"], "durations {durations:?}");
                trials.reverse();
            }
        }
        let trials: Vec<TrialCoverage> = names.iter().map(|n| trial(&all, n, 0.1 + 0.2, lcov(n))).collect();
        let suite = minimal_suite(&all, &trials, &planned, 4, 0.7 + 0.1 + 0.3 + 0.1 + 0.1, &Invocation::default());
        let json = serde_json::to_string(&suite).unwrap();
        assert!(json.contains("\"duration_s\":0.6,") && json.contains("\"full_suite_duration_s\":1.3,"), "{json}");
        assert!(!json.contains("999") && !json.contains("0000"), "unrounded values: {json}");
    }

    #[test]
    fn the_command_names_the_chosen_trials_exactly() {
        let planned = [
            PlannedTrial { name: "A::1K::ring", ignored: false },
            PlannedTrial { name: "A::1K::mpi", ignored: false },
            PlannedTrial { name: "A::1K::slow", ignored: true },
        ];
        let how = Invocation { manifest: "/h/Cargo.toml".into(), ..Invocation::default() };
        assert_eq!(
            command(&["A::1K::mpi"], &planned, &how).display(),
            "cargo test --manifest-path /h/Cargo.toml --test collectives -- --exact A::1K::mpi"
        );
        assert_eq!(
            command(&["A::1K::ring", "A::1K::slow"], &planned, &how).display(),
            "cargo test --manifest-path /h/Cargo.toml --test collectives -- --exact --include-ignored A::1K::ring \
             A::1K::slow"
        );
    }

    /// The config, the workspace and the build's variables come with the
    /// command, in the file's `env`, `argv` and `command` alike; a secret
    /// (a password in a URL) is masked in all three, as in every record.
    #[test]
    fn the_command_carries_what_selects_the_suite_with_secrets_masked() {
        let planned = [PlannedTrial { name: "a", ignored: false }];
        let all = Universe::of(&parse_lcov("SF:/f.cc\nDA:1,1\nend_of_record\n", "all").unwrap()).unwrap();
        let how = Invocation {
            manifest: "/h/Cargo.toml".into(),
            env: vec![
                ("CCL_COV_CONFIG".into(), "/my lib/ccl.json".into()),
                ("CCL_COV_WORKSPACE".into(), "/ws".into()),
                ("CCL_COV_BUILD_DIR".into(), "https://u:hunter2@example.com/b".into()),
            ],
            run_env: vec![("CCL_COV_BUILD_DIR".into(), "https://u:hunter2@example.com/b".into())],
        };
        let suite =
            minimal_suite(&all, &[trial(&all, "a", 1.0, "SF:/f.cc\nDA:1,1\nend_of_record\n")], &planned, 1, 1.0, &how);
        let json = serde_json::to_string(&suite).unwrap();
        assert!(!json.contains("hunter2"), "{json}");
        assert!(suite.run.ends_with(" ccl-coverage run --exact a"), "{}", suite.run);
        assert_eq!(suite.env["CCL_COV_CONFIG"], "/my lib/ccl.json");
        assert_eq!(suite.env["CCL_COV_WORKSPACE"], "/ws");
        assert_eq!(
            suite.argv,
            ["cargo", "test", "--manifest-path", "/h/Cargo.toml", "--test", "collectives", "--", "--exact", "a"]
        );
        assert!(
            suite.command.starts_with("CCL_COV_CONFIG='/my lib/ccl.json' CCL_COV_WORKSPACE=/ws CCL_COV_BUILD_DIR=")
                && suite.command.ends_with(" cargo test --manifest-path /h/Cargo.toml --test collectives -- --exact a"),
            "{}",
            suite.command
        );
        assert!(
            suite.nextest.starts_with("CCL_COV_CONFIG='/my lib/ccl.json' CCL_COV_WORKSPACE=/ws ")
                && suite.nextest.ends_with(
                    "cargo nextest run --manifest-path /h/Cargo.toml --test collectives --run-ignored all -E 'test(=a)'"
                ),
            "{}",
            suite.nextest
        );
    }
}
