//! NVIDIA kernel line coverage from CUPTI SASS metrics: the collector's per-instruction counts
//! (its records, read by `device::nvidia::record`), mapped through each cubin's line table
//! (`cubin`), give per-source-line counts.
//!
//! Use: `read_cubin_dir` on the collector's cubin folder, `Record::read` on each record file,
//! then `line_coverage`: the lines are the vendor-neutral `device::lines` types. A record that `!is_complete()` or has `dropped > 0` lost
//! counts: the caller reports it as lost device coverage.

pub(crate) mod cubin;
#[cfg(test)]
pub(crate) mod fixture_markers;
#[cfg(test)]
mod nsight;

use std::collections::BTreeMap;
use std::path::Path;

use crate::bail;
use crate::device::lines::{DeviceBranch, DeviceCoverage, DeviceFunction, DeviceLines, LinesOrigin, Outcomes};
use crate::device::nvidia::branches::{Branches, branches_of};
use crate::device::nvidia::record::{InstructionKey, Record, ThreadCounts};
use crate::error::{Context, Result};
use cubin::{CubinLines, INSTRUCTION_BYTES};

/// What the report calls these lines.
const CUPTI_SASS: LinesOrigin =
    LinesOrigin { id: "cupti-sass", name: "NVIDIA kernel coverage (CUPTI SASS metrics)", short: "NVIDIA kernel lines" };

/// The coverage of each trial's records (`records`, by slug) over the
/// build's saved cubins in `cubins_dir`, and of all of them together. The cubins' branch
/// listings are read from beside them, or made with `nvdisasm` and kept there.
pub(crate) fn device_lines(
    cubins_dir: &Path,
    records: &BTreeMap<String, Vec<std::path::PathBuf>>,
    nvdisasm: Option<&Path>,
) -> Result<DeviceLines> {
    let cubins = if cubins_dir.is_dir() { read_cubin_dir(cubins_dir)? } else { BTreeMap::new() };
    let mut lines = DeviceLines { origin: CUPTI_SASS, ..DeviceLines::default() };
    let listings = if cubins_dir.is_dir() {
        match read_branch_listings(cubins_dir, nvdisasm)? {
            Ok(listings) => Some(listings),
            Err(why) => {
                lines.branches_unavailable.push(why);
                None
            }
        }
    } else {
        None
    };
    let listings = listings.unwrap_or_default();
    let mut every = Vec::new();
    for (slug, files) in records {
        let read = files.iter().map(|f| Record::read(f)).collect::<Result<Vec<_>>>()?;
        lines.branches_unavailable.extend(read.iter().filter_map(Record::branches_unavailable));
        lines.trials.insert(slug.clone(), line_coverage(&cubins, &listings, &read)?);
        for record in &read {
            for (map, counts) in
                [(&mut lines.not_counted, &record.skipped), (&mut lines.beyond_max_launches, &record.capped)]
            {
                for (kernel, launches) in counts {
                    let total = map.entry(kernel.clone()).or_default();
                    *total = total.saturating_add(*launches);
                }
            }
        }
        every.extend(read);
    }
    lines.all = line_coverage(&cubins, &listings, &every)?;
    for (function, function_lines) in cubins.values().flat_map(|cubin| &cubin.functions) {
        if let Some(entry) = function_lines.frames_at(0).last() {
            lines.kernel_files.insert(function.clone(), normalized(&entry.file));
        }
    }
    Ok(lines)
}

/// Reads the collector's cubin folder: every `<crc-hex>.cubin` in it, by CRC.
pub(crate) fn read_cubin_dir(dir: &Path) -> Result<BTreeMap<u32, CubinLines>> {
    let entries = std::fs::read_dir(dir).with_context(|| dir.display())?;
    let mut cubins = BTreeMap::new();
    for entry in entries {
        let path = entry.with_context(|| dir.display())?.path();
        if path.extension().is_none_or(|extension| extension != "cubin") {
            continue;
        }
        let origin = path.display().to_string();
        let crc = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .filter(|stem| !stem.is_empty() && stem.chars().all(|digit| digit.is_ascii_hexdigit()))
            .and_then(|stem| u32::from_str_radix(stem, 16).ok());
        let Some(crc) = crc else {
            bail!("{origin}: a cubin's name must be <crc-hex>.cubin");
        };
        let data = std::fs::read(&path).context(&origin)?;
        let cubin = CubinLines::parse(&data, &origin)?;
        if let Some(why) = &cubin.unmapped {
            crate::reporter::emit(crate::reporter::Event::DeviceCodeUnmapped { what: &format!("cubin {origin}"), why });
        }
        cubins.insert(crc, cubin);
    }
    Ok(cubins)
}

/// The branch listing of every `<crc>.cubin` of `dir` (`branches::branches_of`), by CRC; why
/// there are none when one cubin has no listing and no nvdisasm can make it.
pub(crate) fn read_branch_listings(
    dir: &Path,
    nvdisasm: Option<&Path>,
) -> Result<std::result::Result<BTreeMap<u32, Branches>, String>> {
    let mut listings = BTreeMap::new();
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .with_context(|| dir.display())?
        .map(|entry| entry.map(|e| e.path()).with_context(|| dir.display()))
        .collect::<Result<_>>()?;
    paths.sort();
    for path in paths.iter().filter(|p| p.extension().is_some_and(|x| x == "cubin")) {
        let crc = path.file_stem().and_then(|stem| stem.to_str()).and_then(|stem| u32::from_str_radix(stem, 16).ok());
        let Some(crc) = crc else { continue };
        let data = std::fs::read(path).with_context(|| path.display())?;
        match branches_of(path, &data, nvdisasm)? {
            Ok(branches) => listings.insert(crc, branches),
            Err(why) => return Ok(Err(why)),
        };
    }
    Ok(Ok(listings))
}

/// Line, function and branch coverage of every kernel of `cubins` over all `records`.
///
/// Every frame of an instruction's inline chain is a line of it: the inlined code's own line,
/// and each call site out to the kernel's, as LLVM and gcov count the call site of an inlined
/// function on the host. A file that appears twice in one chain (a helper inlined into another
/// helper of the same header) has both lines. A line's count is the most any one of its
/// instructions ran, summed over records: the count of its hottest instruction, so that a line
/// is covered when any of its code ran.
///
/// Every branch of `listings` with a line is a device branch, executed or not: its outcomes
/// are the thread counts of the records that have them (version 4), taken = threads whose
/// guard was true, not taken = the other threads that executed it. Without such a record, or
/// without listings, the coverage has no branches.
pub(crate) fn line_coverage(
    cubins: &BTreeMap<u32, CubinLines>,
    listings: &BTreeMap<u32, Branches>,
    records: &[Record],
) -> Result<DeviceCoverage> {
    let mut counts: BTreeMap<&InstructionKey, u64> = BTreeMap::new();
    let mut threads: BTreeMap<&InstructionKey, ThreadCounts> = BTreeMap::new();
    for record in records {
        for (key, count) in &record.executions {
            check_instruction(cubins, key).map_err(|error| error.context(&record.origin))?;
            let total = counts.entry(key).or_default();
            *total = total.saturating_add(*count);
        }
        for (key, count) in &record.threads {
            let total = threads.entry(key).or_default();
            total.executed = total.executed.saturating_add(count.executed);
            total.pred_on = total.pred_on.saturating_add(count.pred_on);
        }
    }
    let measured = records.iter().any(|record| record.branches_unavailable().is_none());
    let mut coverage = DeviceCoverage::default();
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    for (&crc, cubin) in cubins {
        for (function, lines) in &cubin.functions {
            let count_at = |offset| {
                let key = InstructionKey { crc, function: function.clone(), offset };
                counts.get(&key).copied().unwrap_or(0)
            };
            for (offset, frames) in lines.instructions() {
                if frames.is_empty() {
                    continue;
                }
                let count = count_at(offset);
                for frame in frames {
                    let line = coverage
                        .files
                        .entry(file_of(&mut names, &frame.file))
                        .or_default()
                        .lines
                        .entry(frame.line)
                        .or_default();
                    *line = (*line).max(count);
                }
            }
            let listed = listings.get(&crc).and_then(|listing| listing.get(function)).filter(|_| measured);
            for branch in listed.into_iter().flatten() {
                let frames = lines.frames_at(branch.offset);
                if frames.is_empty() {
                    continue;
                }
                let key = InstructionKey { crc, function: function.clone(), offset: branch.offset };
                let outcomes = outcomes(threads.get(&key));
                let frames = frames.iter().map(|frame| (file_of(&mut names, &frame.file), frame.line)).collect();
                coverage.branches.push(DeviceBranch { frames, outcomes });
            }
            // The kernel's own line is the outermost frame of its entry instruction.
            let Some(entry) = lines.frames_at(0).last() else { continue };
            let functions = &mut coverage.files.entry(file_of(&mut names, &entry.file)).or_default().functions;
            // A kernel in several cubins (one per architecture, say) adds up its launches.
            let function_coverage =
                functions.entry(function.clone()).or_insert(DeviceFunction { first_line: entry.line, hits: 0 });
            function_coverage.hits = function_coverage.hits.saturating_add(count_at(0));
        }
    }
    Ok(coverage)
}

/// A branch's outcomes from its instruction's thread counts: taken by the threads whose guard
/// was true (the metric counts the guard as written, `!` included), not taken by the others that
/// executed it; `None` when it never executed.
pub(crate) fn outcomes(threads: Option<&ThreadCounts>) -> Option<Outcomes> {
    threads
        .filter(|t| t.executed > 0)
        .map(|t| Outcomes { taken: t.pred_on, not_taken: t.executed.saturating_sub(t.pred_on) })
}

/// `file` normalized, once per spelling: nvcc spells one header many ways.
fn file_of<'cubin>(names: &mut BTreeMap<&'cubin str, String>, file: &'cubin str) -> String {
    names.entry(file).or_insert_with(|| normalized(file)).clone()
}

/// `dir/./a/../b.h` as `dir/b.h`: nvcc writes include paths as they were
/// spelled, llvm-cov writes them resolved, and one file must be one record.
fn normalized(file: &str) -> String {
    crate::workspace::normalize(Path::new(file)).to_string_lossy().into_owned()
}

/// A count for an instruction that no cubin has means the record and cubins do not belong
/// together: better an error than silently wrong lines.
fn check_instruction(cubins: &BTreeMap<u32, CubinLines>, key: &InstructionKey) -> Result<()> {
    let InstructionKey { crc, function, offset } = key;
    let Some(cubin) = cubins.get(crc) else {
        bail!("counts for cubin {crc:08x}, which is not among the cubins");
    };
    let Some(lines) = cubin.functions.get(function) else {
        bail!("counts for {function}, which cubin {crc:08x} does not have");
    };
    if *offset >= lines.size || offset % INSTRUCTION_BYTES != 0 {
        bail!("{function} in cubin {crc:08x}: offset {offset:#x} is not an instruction of its {:#x} bytes", lines.size);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::lines::to_lcov;
    use cubin::tests::{FIXTURES, fixture_cubin};

    const CRC: u32 = 0xc0de;
    const SOURCE: &str = "/tmp/ccl-cuda-sass/k.cu";
    const HEADER: &str = "/tmp/ccl-cuda-sass/kmath.cuh";

    fn fixture_records() -> Vec<Record> {
        ["k.sm_90.record.tsv", "k.sm_90.record-incomplete.tsv"]
            .map(|name| Record::read(Path::new(&format!("{FIXTURES}/{name}"))).unwrap())
            .to_vec()
    }

    fn fixture_coverage() -> DeviceCoverage {
        line_coverage(&BTreeMap::from([(CRC, fixture_cubin("sm_90"))]), &BTreeMap::new(), &fixture_records()).unwrap()
    }

    #[test]
    fn counts_lines_and_kernels_over_records() {
        let coverage = fixture_coverage();
        assert_eq!(coverage.files.keys().collect::<Vec<_>>(), [SOURCE, HEADER]);
        let source = &coverage.files[SOURCE];
        let function = |name: &str| source.functions[name].clone();
        // The entry instruction ran 4 times in one process and once in the other.
        assert_eq!(function("_Z12scale_floatsPKfPfif"), DeviceFunction { first_line: 12, hits: 5 });
        assert_eq!(function("_Z10scale_intsPKiPii"), DeviceFunction { first_line: 19, hits: 2 });
        assert_eq!(function("_Z14never_launchedPi"), DeviceFunction { first_line: 28, hits: 0 });
        assert!(coverage.files[HEADER].functions.is_empty());
        // Line 13 is 0x10..0x40 of scale_floats: 4 + 1 at most.
        assert_eq!(source.lines[&13], 5);
        // clamp_index, inlined into scale_ints, keeps its own line.
        assert_eq!((source.lines[&6], source.lines[&7]), (2, 2));
        for line in 28..=30 {
            assert_eq!(source.lines[&line], 0, "never_launched line {line}");
        }
        // collatz_steps ran once through scale_ints' copy and never through never_launched's.
        let header = &coverage.files[HEADER].lines;
        assert_eq!(header.get(&13), Some(&1));
        assert_eq!((header.get(&6), header.get(&7)), (Some(&2), Some(&3)));
    }

    #[test]
    fn lines_match_the_cubins_instrumented_lines() {
        let cubin = fixture_cubin("sm_90");
        let coverage = fixture_coverage();
        let covered: Vec<_> = coverage
            .files
            .iter()
            .flat_map(|(file, lines)| lines.lines.keys().map(move |line| (file.as_str(), *line)))
            .collect();
        let instrumented: Vec<_> =
            cubin.instrumented_lines().into_iter().map(|line| (line.file.as_str(), line.line)).collect();
        assert_eq!(covered, instrumented);
    }

    #[test]
    fn a_library_kernel_launched_and_not_counted_is_found() {
        let lines = DeviceLines {
            not_counted: BTreeMap::from([("libk".into(), 2), ("testk".into(), 3), ("unknown".into(), 1)]),
            kernel_files: BTreeMap::from([("libk".into(), "/lib/a.cu".into()), ("testk".into(), "/tests/t.cu".into())]),
            ..DeviceLines::default()
        };
        assert_eq!(lines.uncounted_library_kernels(&|f| f.starts_with("/lib/")), ["libk"]);
        assert!(lines.uncounted_library_kernels(&|f| f.starts_with("/other/")).is_empty());
    }

    #[test]
    fn writes_lcov() {
        let lcov = to_lcov(&fixture_coverage());
        let expected_start = "TN:\nSF:/tmp/ccl-cuda-sass/k.cu\nFN:19,_Z10scale_intsPKiPii\nFN:12,_Z12scale_floatsPKfPfif\n\
            FN:28,_Z14never_launchedPi\nFNDA:2,_Z10scale_intsPKiPii\nFNDA:5,_Z12scale_floatsPKfPfif\n\
            FNDA:0,_Z14never_launchedPi\nFNF:3\nFNH:2\nDA:6,2\n";
        assert!(lcov.starts_with(expected_start), "{lcov}");
        assert!(
            lcov.contains("\nend_of_record\nTN:\nSF:/tmp/ccl-cuda-sass/kmath.cuh\nFNF:0\nFNH:0\nDA:6,2\n"),
            "{lcov}"
        );
        assert!(lcov.ends_with("end_of_record\n"));
        assert_eq!(lcov, to_lcov(&fixture_coverage()));
    }

    #[test]
    fn counts_that_fit_no_cubin_are_errors_naming_the_record() {
        let cubins = BTreeMap::from([(CRC, fixture_cubin("sm_90"))]);
        let good = std::fs::read_to_string(format!("{FIXTURES}/k.sm_90.record.tsv")).unwrap();
        let cases = [
            ("\t0000c0de\t", "\t0000beef\t", "counts for cubin 0000beef, which is not among the cubins"),
            ("_Z10scale_intsPKiPii", "_Z3fooi", "counts for _Z3fooi, which cubin 0000c0de does not have"),
            (
                "\t2b0\t1\t",
                "\t380\t1\t",
                "_Z10scale_intsPKiPii in cubin 0000c0de: offset 0x380 is not an instruction of its 0x380 bytes",
            ),
            (
                "\t2b0\t1\t",
                "\t2b8\t1\t",
                "_Z10scale_intsPKiPii in cubin 0000c0de: offset 0x2b8 is not an instruction of its 0x380 bytes",
            ),
        ];
        for (from, to, expected) in cases {
            let record = Record::parse(&good.replace(from, to), "bad.tsv").unwrap();
            let error = line_coverage(&cubins, &BTreeMap::new(), &[record]).unwrap_err().to_string();
            assert_eq!(error, format!("bad.tsv: {expected}"));
        }
    }

    #[test]
    fn reads_a_cubin_folder_by_crc_names() {
        let dir = std::env::temp_dir().join(format!("ccl-sass-cubins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(format!("{FIXTURES}/k.sm_90.cubin"), dir.join("c0de.cubin")).unwrap();
        std::fs::write(dir.join("notes.txt"), "not a cubin").unwrap();
        let cubins = read_cubin_dir(&dir).unwrap();
        assert_eq!(cubins.keys().collect::<Vec<_>>(), [&CRC]);
        std::fs::write(dir.join("kernel.cubin"), "").unwrap();
        let error = read_cubin_dir(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(error.ends_with("kernel.cubin: a cubin's name must be <crc-hex>.cubin"), "{error}");
    }

    /// `device.lcov` beside the H200 capture is what the harness's report wrote for that run:
    /// recomputed from the captured cubins and records, with the config's ignore rule, the test
    /// programs' kernels left out and the paths made relative to the library's sources (as
    /// `device::lines` and the report do), it must be the same text.
    #[test]
    fn the_captured_device_lcov_is_recomputed_from_its_cubins_and_records() {
        let capture = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-capture"));
        let manifest = crate::build::cache::BuildManifest::read(&capture.join("build.json")).unwrap();
        let config = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/h200_cuda.json"));
        let loaded = crate::config::load(config, &|name| match name {
            "CCL_COV_LLVM_BIN" => Some("/usr/bin".into()),
            _ => None,
        })
        .unwrap();
        let ignore = crate::coverage::ignore::IgnoreRule::new(&loaded.config.report.ignore_filename_regex).unwrap();
        let tests = manifest.tests_src.display().to_string();
        let keep = |file: &str| ignore.keeps(file) && !file.starts_with(&tests);
        let mut records = BTreeMap::new();
        for entry in std::fs::read_dir(capture.join("trials")).unwrap() {
            let dir = entry.unwrap().path();
            let slug = dir.file_name().unwrap().to_string_lossy().into_owned();
            records.insert(slug, crate::device::nvidia::record::record_files(&dir).unwrap());
        }
        let mut lines = device_lines(&capture.join("cubins"), &records, None).unwrap();
        lines.all.retain_files(&keep);
        let ours = crate::report::relative_lcov(&to_lcov(&lines.all), &manifest.library_src.display().to_string());
        let written = std::fs::read_to_string(capture.join("device.lcov")).unwrap();
        assert_eq!(ours, written);
        assert!(written.contains("SF:src/device/common.cuh\n") && !written.contains("/usr/"), "{written}");
    }

    /// The H200 capture through the report's path: each trial's lines and
    /// the union agree, lcov parses as the report's model reads it, and the
    /// ignore rule removes what it names.
    #[test]
    fn captured_trials_add_up_to_the_whole_and_read_back_as_lcov() {
        let capture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-capture");
        let mut records = BTreeMap::new();
        for entry in std::fs::read_dir(format!("{capture}/trials")).unwrap() {
            let dir = entry.unwrap().path();
            let slug = dir.file_name().unwrap().to_string_lossy().into_owned();
            records.insert(slug, crate::device::nvidia::record::record_files(&dir).unwrap());
        }
        let mut lines = device_lines(Path::new(&format!("{capture}/cubins")), &records, None).unwrap();
        let covered = |c: &DeviceCoverage| -> std::collections::BTreeSet<(String, u32)> {
            c.files
                .iter()
                .flat_map(|(f, fc)| fc.lines.iter().filter(|(_, n)| **n > 0).map(move |(l, _)| (f.clone(), *l)))
                .collect()
        };
        let union: std::collections::BTreeSet<_> = lines.trials.values().flat_map(covered).collect();
        assert_eq!(union, covered(&lines.all));
        let ((lh, lf), (kh, kf)) = lines.all.totals();
        assert!(lh > 0 && lh < lf && kh > 0 && kh < kf, "{lh}/{lf} lines, {kh}/{kf} kernels");
        let lcov = crate::coverage::lcov::parse_lcov(&to_lcov(&lines.all), "device").unwrap();
        let from_lcov: usize = lcov.files.values().map(|f| f.covered_lines().count()).sum();
        assert_eq!(from_lcov as u64, lh);
        assert!(lcov.files.keys().all(|f| !f.contains("/./") && !f.contains("/../")), "paths are normalized");
        lines.all.retain_files(&|f| !f.ends_with("debug.cu"));
        assert!(lines.all.files.keys().all(|f| !f.ends_with("debug.cu")) && lines.all.totals().0.1 < lf);
    }
}
