//! The H200 capture's kernel lines against Nsight Compute's source view of the same trials
//! (`tests/fixtures/cuda-capture/ncu-lines.tsv`: `scripts/ncu-source-lines.py` on the GPU
//! host, every trial run again under `ncu --section SourceCounters`, its source page's
//! "Instructions Executed" per CUDA line, summed over the trial's kernel launches).
//!
//! ccl-coverage credits an instruction to every frame of its inline chain, a call site inside
//! the same file too, as host coverage does. Nsight Compute credits the innermost frame of each
//! file, and some same-file call sites but not others (on this capture: `reduceElem`'s call of
//! `applyOp` at `common.cuh:79` and `copyElems`' call of `aligned16` at `:95`, but not `applyOp`'s
//! calls of `maxOf` and `minOf` at `:65` and `:67` in the small kernels and `reduceDirectKernel`, 8 trials). So per trial its
//! lines lie between the two: every innermost-of-its-file frame ccl-coverage saw run, and
//! nothing ccl-coverage does not have. Over the suite they are the same lines.
//!
//! Device branches against Nsight Compute's SASS page of the same trials
//! (`tests/fixtures/cuda-capture/ncu-branches.tsv`: `ncu-source-lines.py branches`, each guarded
//! instruction's "Thread Instructions Executed" and "Predicated-On Thread Instructions Executed",
//! summed over the trial's launches): the same instructions with the same guards, and the same
//! two outcomes, thread for thread, since both ran the same launches of the same cubins.

use super::cubin::FileLine;
use super::{DeviceCoverage, line_coverage, normalized, outcomes, read_branch_listings, read_cubin_dir};
use crate::device::lines::Outcomes;
use crate::device::nvidia::record::{InstructionKey, Record, record_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const CAPTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-capture");

type Lines = BTreeSet<(String, u32)>;

/// The trials Nsight Compute ran again for this capture.
const TRIALS: usize = 24;

/// Nsight Compute's executed lines by trial slug, CUDA's own headers left out as the report
/// leaves them out.
fn ncu_lines() -> BTreeMap<String, Lines> {
    let mut trials: BTreeMap<String, Lines> = BTreeMap::new();
    for row in std::fs::read_to_string(format!("{CAPTURE}/ncu-lines.tsv")).unwrap().lines() {
        let [slug, file, line, executed] = row.split('\t').collect::<Vec<_>>()[..] else { panic!("{row:?}") };
        let lines = trials.entry(slug.to_owned()).or_default();
        if executed != "0" && !file.starts_with("/usr/") {
            lines.insert((file.to_owned(), line.parse().unwrap()));
        }
    }
    trials
}

fn records(slug: &str) -> Vec<Record> {
    let dir = Path::new(CAPTURE).join("trials").join(slug);
    record_files(&dir).unwrap().iter().map(|f| Record::read(f).unwrap()).collect()
}

fn covered(coverage: &DeviceCoverage) -> Lines {
    coverage
        .files
        .iter()
        .filter(|(file, _)| !file.starts_with("/usr/"))
        .flat_map(|(file, c)| c.lines.iter().filter(|(_, n)| **n > 0).map(move |(line, _)| (file.clone(), *line)))
        .collect()
}

/// The lines Nsight Compute's rule gives: of each executed instruction's chain, the innermost
/// frame of each file.
fn innermost_per_file(cubins: &BTreeMap<u32, super::cubin::CubinLines>, records: &[Record]) -> Lines {
    let mut lines = Lines::new();
    for (&crc, cubin) in cubins {
        for (function, function_lines) in &cubin.functions {
            for (offset, frames) in function_lines.instructions() {
                let key = InstructionKey { crc, function: function.clone(), offset };
                if !records.iter().any(|r| r.executions.get(&key).is_some_and(|n| *n > 0)) {
                    continue;
                }
                let mut files = BTreeSet::new();
                for FileLine { file, line } in frames {
                    if files.insert(file.as_str()) && !file.starts_with("/usr/") {
                        lines.insert((normalized(file), *line));
                    }
                }
            }
        }
    }
    lines
}

#[test]
fn every_trial_s_nsight_compute_lines_lie_between_the_innermost_frames_of_each_file_and_every_frame() {
    let cubins = read_cubin_dir(&Path::new(CAPTURE).join("cubins")).unwrap();
    let ncu = ncu_lines();
    assert_eq!(ncu.len(), TRIALS, "configs/h200_cuda.json has 24 trials");
    let mut call_sites = 0;
    for (slug, theirs) in &ncu {
        let records = records(slug);
        let ours = covered(&line_coverage(&cubins, &BTreeMap::new(), &records).unwrap());
        let innermost = innermost_per_file(&cubins, &records);
        let missing: Vec<_> = innermost.difference(theirs).collect();
        assert!(missing.is_empty(), "{slug}: innermost frames Nsight Compute does not show run: {missing:?}");
        let extra: Vec<_> = theirs.difference(&ours).collect();
        assert!(extra.is_empty(), "{slug}: lines Nsight Compute saw run that ccl-coverage does not have: {extra:?}");
        call_sites += ours.len() - theirs.len();
    }
    // Where the two part: same-file call sites (`return maxOf(a, b);`) in some trials.
    assert!(call_sites > 0, "no trial has a call site inside the same file that Nsight Compute leaves out");
}

#[test]
fn over_the_suite_the_lines_are_nsight_compute_s() {
    let cubins = read_cubin_dir(&Path::new(CAPTURE).join("cubins")).unwrap();
    let ncu = ncu_lines();
    assert_eq!(ncu.len(), TRIALS, "configs/h200_cuda.json has 24 trials");
    let all: Vec<Record> = ncu.keys().flat_map(|slug| records(slug)).collect();
    let ours = covered(&line_coverage(&cubins, &BTreeMap::new(), &all).unwrap());
    let theirs: Lines = ncu.values().flatten().cloned().collect();
    // Per file, as the issue compares them.
    let by_file = |lines: &Lines| -> BTreeMap<String, BTreeSet<u32>> {
        let mut files: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for (file, line) in lines {
            files.entry(file.clone()).or_default().insert(*line);
        }
        files
    };
    assert_eq!(by_file(&ours), by_file(&theirs));
    assert_eq!(ours.len(), 99, "the capture's covered device lines");
}

/// One trial's guarded instructions on Nsight Compute's page: (kernel, offset) → (its SASS
/// text, threads that executed it, threads predicated on).
type Guarded = BTreeMap<(String, u64), (String, u64, u64)>;

/// Nsight Compute's guarded instructions by trial slug, from a `ncu-branches.tsv`.
fn ncu_branches(tsv: &Path) -> BTreeMap<String, Guarded> {
    let mut trials: BTreeMap<String, Guarded> = BTreeMap::new();
    for row in std::fs::read_to_string(tsv).unwrap().lines() {
        let [slug, kernel, offset, text, threads, pred_on] = row.split('\t').collect::<Vec<_>>()[..] else {
            panic!("{row:?}")
        };
        let key = (kernel.to_owned(), u64::from_str_radix(offset, 16).unwrap());
        let value = (text.to_owned(), threads.parse().unwrap(), pred_on.parse().unwrap());
        trials.entry(slug.to_owned()).or_default().insert(key, value);
    }
    trials
}

/// What one file's device branches (placed at their innermost frame outside CUDA's headers)
/// showed in the comparison, over the trials.
#[derive(Default, Debug)]
struct FileTally {
    /// (trial, branch) pairs of the kernels the trial launched.
    compared: usize,
    /// Of those, executed by some thread, by Nsight Compute's count.
    executed: usize,
    /// Of those, both ways.
    both_ways: usize,
    /// Outcomes with threads over all trials, (kernel, offset, taken?): Nsight Compute's and ours.
    theirs: BTreeSet<(String, u64, bool)>,
    ours: BTreeSet<(String, u64, bool)>,
}

/// Every device branch of a capture's kernels that Nsight Compute's trials launched, against
/// Nsight Compute's guarded instruction at the same offset: the same guard (negation included)
/// and opcode, and the same two outcomes, thread for thread. The capture is `cubins/` (with the
/// branch listings) and `trials/<slug>/` (the records). Returns the mismatches and, per file,
/// what was compared.
fn compare_branches(capture: &Path, ncu: &BTreeMap<String, Guarded>) -> (Vec<String>, BTreeMap<String, FileTally>) {
    let cubins = read_cubin_dir(&capture.join("cubins")).unwrap();
    let listings = read_branch_listings(&capture.join("cubins"), None).unwrap().unwrap();
    let (mut wrong, mut files) = (Vec::new(), BTreeMap::<String, FileTally>::new());
    for (slug, theirs) in ncu {
        let dir = capture.join("trials").join(slug);
        let records: Vec<Record> = record_files(&dir).unwrap().iter().map(|f| Record::read(f).unwrap()).collect();
        let launched: BTreeSet<&str> = theirs.keys().map(|(kernel, _)| kernel.as_str()).collect();
        for (crc, listing) in &listings {
            for (kernel, branches) in listing.iter().filter(|(kernel, _)| launched.contains(kernel.as_str())) {
                for branch in branches {
                    let Some((text, threads, pred_on)) = theirs.get(&(kernel.clone(), branch.offset)) else {
                        wrong.push(format!(
                            "{slug}: {kernel}+{:#x} ({}) is not on Nsight Compute's page",
                            branch.offset, branch.guard
                        ));
                        continue;
                    };
                    // The same instruction with the same guard, negation included.
                    let words: Vec<&str> = text.split_whitespace().collect();
                    if words[..2] != [branch.guard.to_string().as_str(), branch.opcode.as_str()] {
                        wrong.push(format!(
                            "{slug}: {kernel}+{:#x}: ours {} {}, Nsight Compute's {text}",
                            branch.offset, branch.guard, branch.opcode
                        ));
                    }
                    let key = InstructionKey { crc: *crc, function: kernel.clone(), offset: branch.offset };
                    let ours = outcomes(records.iter().find_map(|r| r.threads.get(&key)));
                    let expected = (*threads > 0).then_some(Outcomes { taken: *pred_on, not_taken: threads - pred_on });
                    if ours != expected {
                        wrong.push(format!(
                            "{slug}: {kernel}+{:#x} {text}: ours {ours:?}, Nsight Compute's {expected:?}",
                            branch.offset
                        ));
                    }
                    let frames =
                        cubins.get(crc).and_then(|c| c.functions.get(kernel)).map(|f| f.frames_at(branch.offset));
                    let file = frames
                        .into_iter()
                        .flatten()
                        .find(|frame| !frame.file.starts_with("/usr/"))
                        .map_or_else(|| "(no line)".to_owned(), |frame| normalized(&frame.file));
                    let tally = files.entry(file).or_default();
                    tally.compared += 1;
                    tally.executed += usize::from(expected.is_some());
                    tally.both_ways += usize::from(expected.is_some_and(|o| o.taken > 0 && o.not_taken > 0));
                    for (set, seen) in [(&mut tally.theirs, expected), (&mut tally.ours, ours)] {
                        for (taken, threads) in
                            seen.map(|o| [(true, o.taken), (false, o.not_taken)]).into_iter().flatten()
                        {
                            if threads > 0 {
                                set.insert((kernel.clone(), branch.offset, taken));
                            }
                        }
                    }
                }
            }
        }
        // Nothing Nsight Compute shows as a guarded control transfer is missing from the listings.
        for ((kernel, offset), (text, _, _)) in theirs {
            let opcode = text.split_whitespace().nth(1).unwrap_or_default();
            let transfer =
                ["BRA", "BRX", "JMP", "CALL", "RET", "EXIT"].contains(&opcode.split('.').next().unwrap_or_default());
            let listed = listings.values().filter_map(|l| l.get(kernel)).flatten().any(|b| b.offset == *offset);
            if transfer
                && !listed
                && !text.contains("PT ")
                && !text.split_whitespace().nth(2).is_some_and(|w| w.trim_start_matches('!').starts_with('P'))
            {
                wrong.push(format!("{slug}: {kernel}+{offset:#x} {text} is not listed"));
            }
        }
    }
    (wrong, files)
}

#[test]
fn every_device_branch_s_outcomes_are_nsight_compute_s() {
    let ncu = ncu_branches(&Path::new(CAPTURE).join("ncu-branches.tsv"));
    assert_eq!(ncu.len(), TRIALS, "configs/h200_cuda.json has 24 trials");
    let (wrong, files) = compare_branches(Path::new(CAPTURE), &ncu);
    assert!(wrong.is_empty(), "{} mismatches:\n{}", wrong.len(), wrong.join("\n"));
    let compared: usize = files.values().map(|t| t.compared).sum();
    let both_ways: usize = files.values().map(|t| t.both_ways).sum();
    assert!(compared > 1000 && both_ways > 200, "{compared} branches compared, {both_ways} both ways");
}

/// The same comparison on a capture that cannot be committed (NCCL's, `CCL_COV_NCU_CAPTURE`:
/// `cubins/` with listings, `trials/<slug>/` records and `ncu-branches.tsv` of the same trials),
/// printing the per-file table docs/gpu-validation.md records.
#[test]
#[ignore = "needs CCL_COV_NCU_CAPTURE: a capture of a library's trials with Nsight Compute's branches"]
fn a_library_capture_s_device_branches_are_nsight_compute_s() {
    let capture = std::path::PathBuf::from(std::env::var_os("CCL_COV_NCU_CAPTURE").expect("CCL_COV_NCU_CAPTURE"));
    let ncu = ncu_branches(&capture.join("ncu-branches.tsv"));
    assert!(!ncu.is_empty(), "{}: no trial in ncu-branches.tsv", capture.display());
    let (wrong, files) = compare_branches(&capture, &ncu);
    let mut table = String::from(
        "| file | (trial, branch) compared | executed | both ways | outcomes covered: Nsight Compute | ccl-coverage |\n",
    );
    for (file, t) in &files {
        table.push_str(&format!(
            "| `{file}` | {} | {} | {} | {} | {} |\n",
            t.compared,
            t.executed,
            t.both_ways,
            t.theirs.len(),
            t.ours.len()
        ));
    }
    crate::show!("{table}");
    assert!(wrong.is_empty(), "{} mismatches:\n{}", wrong.len(), wrong.join("\n"));
    assert!(files.values().all(|t| t.theirs == t.ours));
}
