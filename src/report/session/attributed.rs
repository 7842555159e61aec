//! Which trials covered each line: each trial's coverage from its own
//! profile, computed on every core and checked against the merged report
//! (the trials' lines together must be exactly the report's).

use super::Session;
use super::merge::Merged;
use super::model::{ModelSummary, ModelText};
use crate::bail;
use crate::coverage::lcov::{self, Lcov};
use crate::coverage::mapping::{self, CounterReader, Mapping};
use crate::coverage::profiles;
use crate::coverage::trial_lines::{self, Basis, TrialLines};
use crate::device::lines as device_lines;
use crate::error::{Error, Result};
use crate::report::attribution::{self, TrialCoverage, TrialSummary};
use crate::report::elements::{Bits, Universe};
use crate::results::TrialResult;
use crate::workspace;
use std::path::Path;

/// The merged report's lcov and each trial's coverage on its own.
pub(super) struct Attributed {
    pub(super) all: Lcov,
    /// The merged report's lines, functions and branches, numbered.
    pub(super) universe: Universe,
    pub(super) trials: Vec<TrialCoverage>,
    pub(super) summaries: Vec<TrialSummary>,
}

/// One trial's coverage, and why it was computed in the report, when it was
/// not read from what the trial stored.
type OneTrial = (TrialCoverage, Option<String>);

/// At most this many llvm-cov exports run at once (one per core).
fn parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

impl Session {
    /// Each trial's coverage, from its own profile (trials whose raw
    /// profiles were never merged get theirs merged under
    /// `report/trials/`), computed on every core; checked against the
    /// merged report: the trials' lines together must be exactly the lines
    /// the report covers. See [`PerTrial`] for how.
    pub(super) fn attributed(&self, merged: &Merged, model: &ModelText, summary: &ModelSummary) -> Result<&Attributed> {
        self.made
            .attributed
            .get_or_init(|| {
                let text = model.text.as_str();
                let all = lcov::parse_lcov(text, "the merged lcov")?;
                let universe = Universe::of(&all)?;
                let ws = &self.ctx.workspace;
                let mut jobs = Vec::new();
                for r in &merged.results {
                    let profdata = profiles::trial_profdata(ws, &r.slug);
                    if ws.kind(&profdata)? == Some(workspace::confined::EntryKind::File) {
                        jobs.push((r, profdata));
                        continue;
                    }
                    let raw = profiles::raw_files(ws, &ws.trial_profiles(&r.slug))?;
                    if raw.is_empty() {
                        continue;
                    }
                    let dir = self.report_dir().join("trials");
                    self.ctx.workspace.create_dir(&dir)?;
                    let out = dir.join(format!("{}.profdata", r.slug));
                    profiles::merge(ws, &merged.manifest.toolchain, &raw, &dir.join(format!("{}.list", r.slug)), &out)?;
                    jobs.push((r, out));
                }
                let regions = summary.all.totals().regions;
                let per_trial = PerTrial::choose(
                    ws,
                    self.ctx.report.attribution_exports,
                    merged,
                    text,
                    (regions.covered, regions.count),
                )?;
                let basis =
                    Basis::new(&merged.manifest, &merged.inputs.ignore, self.ctx.config().report.measure_programs);
                let next = std::sync::atomic::AtomicUsize::new(0);
                let outputs: Vec<Result<OneTrial, Error>> = std::thread::scope(|scope| {
                    let workers: Vec<_> = (0..parallelism().min(jobs.len()).max(1))
                        .map(|_| {
                            scope.spawn(|| {
                                let mut done = Vec::new();
                                loop {
                                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                    let Some((r, profdata)) = jobs.get(i) else { break };
                                    done.push((i, per_trial.coverage(ws, merged, &basis, &universe, r, profdata)));
                                }
                                done
                            })
                        })
                        .collect();
                    let mut all: Vec<(usize, Result<OneTrial, Error>)> =
                        workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect();
                    all.sort_by_key(|(i, _)| *i);
                    all.into_iter().map(|(_, r)| r).collect()
                });
                if outputs.len() != jobs.len() {
                    return Err(Error::new("a thread computing per-trial coverage panicked"));
                }
                let (trials, computed): (Vec<TrialCoverage>, Vec<Option<String>>) =
                    outputs.into_iter().collect::<Result<Vec<_>, Error>>()?.into_iter().unzip();
                say_computed(&trials, &computed, &per_trial);
                check_union(&all, &universe, &trials)?;
                let summaries = attribution::trial_summaries(&universe, &trials);
                Ok(Attributed { all, universe, trials, summaries })
            })
            .as_ref()
            .map_err(|e| e.clone().context("per-trial attribution failed"))
    }
}

/// How each trial's coverage is computed.
enum PerTrial {
    /// From the coverage mapping read once and the trial's counters (read
    /// in process, or with `llvm-profdata merge -text` where that reader
    /// failed its check): no pass over the library's mapping per trial
    /// (issue #24), no process per trial (issue #35).
    Mapping(Mapping, CounterReader),
    /// `llvm-cov export -format=lcov` and `-summary-only` per trial: asked
    /// for (`CCL_COV_ATTRIBUTION_EXPORTS=on`), or because the mapping could
    /// not be read or did not reproduce llvm-cov on the merged profile.
    Exports,
}

impl PerTrial {
    /// The in-process reader, once it has given llvm-cov's own lcov for the
    /// merged profile (`merged_lcov`, with device lines after the host's);
    /// otherwise, said on screen, llvm-cov per trial.
    fn choose(
        ws: &workspace::Workspace,
        exports_asked: bool,
        merged: &Merged,
        merged_lcov: &str,
        merged_regions: (u64, u64),
    ) -> Result<PerTrial> {
        if exports_asked {
            crate::note!("per-trial attribution runs llvm-cov once per trial, as CCL_COV_ATTRIBUTION_EXPORTS=on asks");
            return Ok(PerTrial::Exports);
        }
        let checked = || -> Result<(Mapping, CounterReader)> {
            let mapping = Mapping::read(&merged.inputs.objects, merged.manifest.toolchain.llvm_cov.major)?;
            let (counters, counts) =
                CounterReader::checked(ws, &merged.manifest.toolchain.llvm_profdata.path, &merged.inputs.profdata)?;
            let loaded = mapping.load(&counts);
            let keep = |f: &str| merged.inputs.ignore.keeps(f);
            let mut ours = merged.inputs.names.lcov(&loaded.lcov(&keep), "the in-process lcov")?;
            if let Some(lines) = &merged.device_lines {
                ours = lcov::fold_in(&ours, &device_lines::to_lcov(&lines.all), lines.origin.short)?;
            }
            if let Some((n, theirs, mine)) =
                first_difference(&mapping::without_summaries(merged_lcov), &mapping::without_summaries(&ours))
            {
                bail!(
                    "on the merged profile it differs from llvm-cov at line {n} of the lcov: llvm-cov {theirs:?}, in-process {mine:?}"
                );
            }
            let regions = loaded.regions(&keep);
            if regions != merged_regions {
                bail!(
                    "on the merged profile it counts regions {}/{}, llvm-cov's summary {}/{}",
                    regions.0,
                    regions.1,
                    merged_regions.0,
                    merged_regions.1
                );
            }
            // What each trial is computed with, without text, must be the text's.
            let names = &merged.inputs.names;
            if merged.device_lines.is_none() && !names.merged_any() {
                let (lcov, totals) = covered_and_totals(lcov::parse_lcov(&ours, "the in-process lcov")?);
                let regions = loaded.regions(&keep);
                let without_text = TrialLines::of_loaded(&loaded, &keep).renamed(&|f| names.name(f));
                if without_text != TrialLines::of(&lcov, &totals, regions)? {
                    bail!("its lines, computed without the text, differ from the text's on the merged profile");
                }
            }
            Ok((mapping, counters))
        };
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(checked)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(ToString::to_string));
            Err(Error::new(format!("it panicked: {}", what.unwrap_or_default())))
        });
        match outcome {
            Ok((mapping, counters)) => {
                if let Some(why) = counters.fallback() {
                    crate::say!(
                        "per-trial attribution reads each trial's counters with llvm-profdata (slower): the in-process reader of indexed profiles cannot be used: {why}"
                    );
                }
                Ok(PerTrial::Mapping(mapping, counters))
            }
            Err(why) => {
                crate::say!(
                    "per-trial attribution runs llvm-cov once per trial (slower): the in-process coverage-mapping reader cannot be used: {why}"
                );
                Ok(PerTrial::Exports)
            }
        }
    }

    /// One trial's coverage (with its own device lines): the lines its
    /// trial stored where they can be trusted (computed by the reader just
    /// checked, of this build and profile, host lines only), else computed
    /// here, with why they were not stored or not used.
    fn coverage(
        &self,
        ws: &workspace::Workspace,
        merged: &Merged,
        basis: &Basis,
        universe: &Universe,
        r: &TrialResult,
        profdata: &Path,
    ) -> Result<(TrialCoverage, Option<String>)> {
        let device = merged.device_lines.as_ref().and_then(|d| d.trials.get(&r.slug)).map(device_lines::to_lcov);
        // The lines a trial stored, and those computed without text, have llvm-cov's names,
        // and count each copy of a file on its own: renamed, they do only while no copies merged.
        let names = &merged.inputs.names;
        let copies_merged = names.merged_any();
        let origin = || format!("the lcov of {}", profdata.display());
        let short = merged.device_lines.as_ref().map_or("", |d| d.origin.short);
        let of = |lines: TrialLines| -> Result<TrialCoverage> {
            let lines = lines.renamed(&|f| names.name(f));
            let covered = universe
                .bits(&lines.covered)
                .map_err(|e| e.context(format_args!("trial {}: was a profile changed during the report?", r.trial)))?;
            Ok(TrialCoverage {
                name: r.trial.clone(),
                slug: r.slug.clone(),
                duration_s: r.duration_s,
                covered,
                regions: lines.regions,
            })
        };
        let merge = r.merge.as_ref().filter(|_| profdata == profiles::trial_profdata(ws, &r.slug));
        let not_stored = match (self, &device, merge) {
            (PerTrial::Exports, _, _) => None,
            (PerTrial::Mapping(..), Some(_), _) => Some("its kernel lines are folded in here".to_string()),
            (PerTrial::Mapping(..), None, _) if copies_merged => {
                Some("copies of its files under the build are merged here".to_string())
            }
            (PerTrial::Mapping(_, counters), None, _) if counters.fallback().is_some() => {
                Some("the in-process reader of counters, which stored them, failed its check".to_string())
            }
            (PerTrial::Mapping(..), None, None) => Some("its profile was merged by the report".to_string()),
            (PerTrial::Mapping(..), None, Some(m)) => match (&m.lines, &m.lines_error) {
                (None, Some(why)) => Some(format!("its trial stored none: {why}")),
                (stored, _) => match trial_lines::load(ws, &r.slug, stored.as_ref(), basis, m.sha256.as_deref()) {
                    Ok(lines) => return Ok((of(lines)?, None)),
                    Err(why) => Some(why),
                },
            },
        };
        let lines = match self {
            PerTrial::Mapping(mapping, counters) => {
                let counts = counters.read(ws, profdata)?;
                let loaded = mapping.load(&counts);
                let keep = |f: &str| merged.inputs.ignore.keeps(f);
                // Device records add to the host's as lcov text does: only then is the text needed.
                match &device {
                    None if !copies_merged => TrialLines::of_loaded(&loaded, &keep),
                    device => {
                        let host = names.lcov(&loaded.lcov(&keep), &origin())?;
                        let text = with_device(host, device.as_deref(), short)?;
                        let (lcov, totals) = covered_and_totals(lcov::parse_lcov(&text, &origin())?);
                        TrialLines::of(&lcov, &totals, loaded.regions(&keep))?
                    }
                }
            }
            PerTrial::Exports => {
                let inputs = merged.inputs.with_profdata(profdata.to_path_buf());
                let text = with_device(inputs.lcov_text()?, device.as_deref(), short)?;
                let regions = inputs.summary()?.totals().regions;
                let (lcov, totals) = covered_and_totals(lcov::parse_lcov(&text, &origin())?);
                TrialLines::of(&lcov, &totals, (regions.covered, regions.count))?
            }
        };
        Ok((of(lines)?, not_stored))
    }
}

/// A trial's host lcov with its own device records folded in as the merged report folds them
/// (`lcov::fold_in`), not appended: a device branch on a line with host branches (a `__host__
/// __device__` header's, NCCL's `bitops.h`) then has the block the merged report numbers it
/// with, after the host's, and never adds its threads to a host branch.
fn with_device(host: String, device: Option<&str>, origin: &str) -> Result<String> {
    match device {
        Some(device) => lcov::fold_in(&host, device, origin),
        None => Ok(host),
    }
}

/// Names, on screen, the trials whose lines were computed here rather than
/// read from what their trial stored, and why: none is silently dropped.
fn say_computed(trials: &[TrialCoverage], computed: &[Option<String>], per_trial: &PerTrial) {
    if matches!(per_trial, PerTrial::Exports) {
        return;
    }
    let names: Vec<&str> = trials.iter().map(|t| t.name.as_str()).collect();
    if let Some(line) = computed_line(&names, computed) {
        crate::say!("{line}");
    }
}

/// The line [`say_computed`] says: each reason once, with the trials it
/// holds for (at most [`SHOWN_TRIALS`] named; one trial as `name (reason)`),
/// in the order first met;
/// `None` when every trial's stored lines were read.
fn computed_line(trials: &[&str], computed: &[Option<String>]) -> Option<String> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, why) in trials.iter().zip(computed) {
        let Some(why) = why.as_deref() else { continue };
        match groups.iter_mut().find(|(reason, _)| *reason == why) {
            Some((_, names)) => names.push(name),
            None => groups.push((why, vec![name])),
        }
    }
    let count: usize = groups.iter().map(|(_, names)| names.len()).sum();
    if count == 0 {
        return None;
    }
    let said: Vec<String> = groups
        .iter()
        .map(|(why, names)| {
            if let [one] = names.as_slice() {
                return format!("{one} ({why})");
            }
            let more = names.len().saturating_sub(SHOWN_TRIALS);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            format!("{why}: {}{more}", names[..names.len().min(SHOWN_TRIALS)].join(", "))
        })
        .collect();
    Some(format!(
        "per-trial attribution computed {count} of {} trials' lines in the report, not from what the trial stored: {}",
        trials.len(),
        said.join("; ")
    ))
}

/// Most trials named under one reason.
const SHOWN_TRIALS: usize = 20;

/// `lcov`'s totals as the model counts them (the merged report's way), and
/// only what ran: attribution reads nothing else, and at 800 trials the rest
/// would be most of the report's memory ([`TrialLines::of_loaded`] gives the
/// same without the text).
fn covered_and_totals(mut lcov: Lcov) -> (Lcov, lcov::Tallies) {
    let mut totals = lcov::Tallies::default();
    for file in lcov.files.values() {
        totals += file.tallies();
    }
    lcov.retain_covered();
    (lcov, totals)
}

/// The first line where two texts differ: its number and both versions.
fn first_difference(a: &str, b: &str) -> Option<(usize, String, String)> {
    let (mut x, mut y) = (a.lines(), b.lines());
    for n in 1.. {
        match (x.next(), y.next()) {
            (None, None) => return None,
            (l, r) if l == r => {}
            (l, r) => return Some((n, l.unwrap_or("(end)").to_string(), r.unwrap_or("(end)").to_string())),
        }
    }
    None
}

/// The trials' covered lines together must be the merged report's.
fn check_union(all: &Lcov, universe: &Universe, trials: &[TrialCoverage]) -> Result<()> {
    let mut union = Bits::with_len(universe.len());
    for t in trials {
        union.union_with(&t.covered);
    }
    let mut merged = Bits::with_len(universe.len());
    for (file, lines) in universe.files() {
        let hits = &all.files[file].lines;
        for (line, e) in lines {
            if hits.get(&line).is_some_and(|n| *n > 0) {
                merged.insert(e);
            }
        }
    }
    let name = |e: usize| universe.line(e).map_or_else(|| format!("line #{e}"), |(f, l)| format!("{f}:{l}"));
    let lines = universe.line_range();
    let only_trials: Vec<String> =
        union.ones(lines.clone()).filter(|&e| !merged.ones(e..e + 1).any(|_| true)).take(5).map(name).collect();
    let only_merged: Vec<String> =
        merged.ones(lines.clone()).filter(|&e| !union.ones(e..e + 1).any(|_| true)).take(5).map(name).collect();
    if only_trials.is_empty() && only_merged.is_empty() {
        return Ok(());
    }
    Err(Error::new(format!(
        "the trials' own profiles cover {} lines, the merged profile {}; they differ (covered by a trial only: {}; by the merged profile only: {}): was a profile changed during the report?",
        union.ones(lines.clone()).count(),
        merged.ones(lines).count(),
        only_trials.join(", "),
        only_merged.join(", ")
    )))
}

#[cfg(test)]
mod tests {

    /// A reason that holds for many trials is said once (issue #49: a
    /// changed ignore rule was said 14 times, 5 KB).
    #[test]
    fn each_reason_for_computing_is_said_once_with_its_trials() {
        let trials: Vec<String> = (0..25).map(|i| format!("t{i}")).collect();
        let names: Vec<&str> = trials.iter().map(String::as_str).collect();
        let mut why: Vec<Option<String>> =
            vec![Some("its lines were computed for another ignore rule none (the report's is `x`)".into()); 24];
        why[3] = Some("its profile was merged by the report".into());
        why.push(None);
        let line = computed_line(&names, &why).unwrap();
        assert_eq!(line.matches("another ignore rule").count(), 1, "{line}");
        assert!(line.contains("24 of 25 trials' lines"), "{line}");
        assert!(line.ends_with("t19, t20 and 3 more; t3 (its profile was merged by the report)"), "{line}");
        assert_eq!(computed_line(&names[..1], &[None]), None);
    }
    use super::*;
    use crate::coverage::lcov::Covered;
    use crate::device::nvidia::record::record_files;
    use std::collections::BTreeMap;

    /// The CUDA capture's `common.cuh:35` (`if (small)`, taken in the large trials) with a host
    /// branch on the same line, as a `__host__ __device__` header has: the trial's device outcome
    /// is the merged report's device branch, and the host branch the trial never took stays
    /// untaken.
    #[test]
    fn a_trial_s_device_branch_on_a_line_with_host_branches_is_the_merged_report_s_device_branch() {
        let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cuda-capture");
        let slug = "AllReduce.1M.direct";
        let records = BTreeMap::from([(slug.to_string(), record_files(&capture.join("trials").join(slug)).unwrap())]);
        let lines = crate::device::nvidia::sass::device_lines(&capture.join("cubins"), &records, None).unwrap();
        let file = lines.all.files.keys().find(|f| f.ends_with("ccl-cuda/src/device/common.cuh")).unwrap().clone();
        let device_here = lines.all.branch_lines()[file.as_str()][&35].len() as u32;
        assert!(device_here > 0, "common.cuh:35 has device branches");
        // The host took only its branch's second outcome.
        let host = format!("SF:{file}\nDA:35,7\nBRDA:35,0,0,0\nBRDA:35,0,1,7\nend_of_record\n");
        let all = lcov::fold_in(&host, &device_lines::to_lcov(&lines.all), "k").unwrap();
        let universe = Universe::of(&lcov::parse_lcov(&all, "all").unwrap()).unwrap();
        let text = with_device(host, Some(&device_lines::to_lcov(&lines.trials[slug])), "k").unwrap();
        let covered = Covered::of(&lcov::parse_lcov(&text, "trial").unwrap()).unwrap();
        universe.bits(&covered).unwrap();
        let on_35: Vec<(u32, u32)> =
            covered[&file].branches.iter().filter(|b| b.0 == 35).map(|&(_, block, branch)| (block, branch)).collect();
        assert!(!on_35.contains(&(0, 0)), "the host branch's untaken outcome counted as taken: {on_35:?}");
        assert!(on_35.contains(&(0, 1)), "{on_35:?}");
        // `if (small)` is taken in a large trial: a device block after the host's.
        assert!(on_35.iter().any(|&(block, branch)| (1..=device_here).contains(&block) && branch == 0), "{on_35:?}");
    }
}
