//! Device lines whatever their vendor: per source file, each instrumented line's
//! count and each kernel's; the device branches with their two outcomes, each
//! placed at a line of its inline chain; over every trial and each trial's own;
//! the launches the collector did not count. A backend whose lines have a source
//! of their own (NVIDIA's kernel records: `sass/`) makes them, and the report
//! writes them (lcov, `summary-device.json`, the device pages) without knowing
//! whose they are.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Whose lines they are, in the report's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LinesOrigin {
    /// `summary-device.json`'s `source`.
    pub(crate) id: &'static str,
    /// The Markdown summary's and the device pages' heading.
    pub(crate) name: &'static str,
    /// For the screen and for errors: "NVIDIA kernel lines".
    pub(crate) short: &'static str,
}

/// Device coverage by source file path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DeviceCoverage {
    pub(crate) files: BTreeMap<String, DeviceFile>,
    /// Every device branch of the code, executed or not, in one order for every trial; empty
    /// when the backend measured none ([`DeviceLines::branches_unavailable`] says why).
    pub(crate) branches: Vec<DeviceBranch>,
}

/// One device branch: where it is, innermost frame first (the frames of its inline chain, as a
/// line's), and what it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceBranch {
    pub(crate) frames: std::sync::Arc<[(String, u32)]>,
    /// `None`: never executed.
    pub(crate) outcomes: Option<Outcomes>,
}

/// A branch's two outcomes, each a count (NVIDIA's: threads, summed over launches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Outcomes {
    pub(crate) taken: u64,
    pub(crate) not_taken: u64,
}

/// The branches of one line, in [`DeviceCoverage::branches`]' order.
pub(crate) type LineBranches = Vec<Option<Outcomes>>;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DeviceFile {
    /// Line → execution count; instrumented lines never executed are 0.
    pub(crate) lines: BTreeMap<u32, u64>,
    /// Kernels whose entry is in this file, by mangled name.
    pub(crate) functions: BTreeMap<String, DeviceFunction>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceFunction {
    /// The kernel's line (its entry's).
    pub(crate) first_line: u32,
    /// Times its entry ran (per warp, for NVIDIA's); 0 if never launched.
    pub(crate) hits: u64,
}

impl DeviceLines {
    /// The kernels of files `keep` counts (the library's) that a trial launched and the
    /// collector did not count: the build's kernel list does not name them as CUPTI does.
    pub(crate) fn uncounted_library_kernels(&self, keep: &dyn Fn(&str) -> bool) -> Vec<&str> {
        self.not_counted
            .keys()
            .filter(|kernel| self.kernel_files.get(*kernel).is_some_and(|file| keep(file)))
            .map(String::as_str)
            .collect()
    }
}

impl DeviceLines {
    /// Every file named `name(file)`: over all trials, each trial's and each kernel's.
    pub(crate) fn rename(&mut self, name: &dyn Fn(&str) -> String) {
        self.all.rename(name);
        for trial in self.trials.values_mut() {
            trial.rename(name);
        }
        for file in self.kernel_files.values_mut() {
            *file = name(file);
        }
    }
}

impl DeviceCoverage {
    /// Keeps the files `keep` accepts: the report's ignore rules apply to
    /// device lines as to host lines.
    pub(crate) fn retain_files(&mut self, keep: &dyn Fn(&str) -> bool) {
        self.files.retain(|file, _| keep(file));
        let files = &self.files;
        self.branches.retain(|branch| branch.frames.iter().any(|(file, _)| files.contains_key(file)));
    }

    /// Each branch at the line of the innermost frame of its chain whose file the coverage
    /// keeps (the ignore rule, frame by frame: a branch in a header left out goes to the first
    /// kept frame outward), by file and line.
    pub(crate) fn branch_lines(&self) -> BTreeMap<&str, BTreeMap<u32, LineBranches>> {
        let mut placed: BTreeMap<&str, BTreeMap<u32, LineBranches>> = BTreeMap::new();
        for branch in &self.branches {
            let Some((file, line)) = branch.frames.iter().find(|(file, _)| self.files.contains_key(file)) else {
                continue;
            };
            let (file, _) = self.files.get_key_value(file).expect("kept above");
            placed.entry(file.as_str()).or_default().entry(*line).or_default().push(branch.outcomes);
        }
        placed
    }

    /// The coverage with each file named `name(file)` (the report's one name of a source file):
    /// files given one name become one. A line counts as its hottest copy, as a line counts its
    /// hottest instruction; a kernel in both adds up its launches, as one in several cubins
    /// does; every branch stays, each its own instruction, its frames renamed.
    pub(crate) fn rename(&mut self, name: &dyn Fn(&str) -> String) {
        let mut files: BTreeMap<String, DeviceFile> = BTreeMap::new();
        for (file, coverage) in std::mem::take(&mut self.files) {
            let merged = files.entry(name(&file)).or_default();
            for (line, count) in coverage.lines {
                let mine = merged.lines.entry(line).or_default();
                *mine = (*mine).max(count);
            }
            for (kernel, function) in coverage.functions {
                if let Some(mine) = merged.functions.get_mut(&kernel) {
                    mine.hits = mine.hits.saturating_add(function.hits);
                } else {
                    merged.functions.insert(kernel, function);
                }
            }
        }
        self.files = files;
        for branch in &mut self.branches {
            branch.frames = branch.frames.iter().map(|(file, line)| (name(file), *line)).collect();
        }
    }

    /// `(covered, count)` of branch outcomes, as lcov's `BRH`/`BRF` count them: two per branch,
    /// covered when its count is above 0.
    pub(crate) fn branch_totals(&self) -> (u64, u64) {
        let mut totals = (0, 0);
        for line in self.branch_lines().values().flat_map(BTreeMap::values) {
            totals.1 += 2 * line.len() as u64;
            totals.0 += line.iter().flatten().map(|o| u64::from(o.taken > 0) + u64::from(o.not_taken > 0)).sum::<u64>();
        }
        totals
    }

    /// `(covered, count)` of lines and of kernels.
    pub(crate) fn totals(&self) -> ((u64, u64), (u64, u64)) {
        let mut lines = (0, 0);
        let mut functions = (0, 0);
        for file in self.files.values() {
            lines.0 += file.lines.values().filter(|c| **c > 0).count() as u64;
            lines.1 += file.lines.len() as u64;
            functions.0 += file.functions.values().filter(|f| f.hits > 0).count() as u64;
            functions.1 += file.functions.len() as u64;
        }
        (lines, functions)
    }
}

/// A build's device coverage: over every trial, and each trial's own.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeviceLines {
    /// Whose lines these are, for the report's words.
    pub(crate) origin: LinesOrigin,
    pub(crate) all: DeviceCoverage,
    /// By trial slug.
    pub(crate) trials: BTreeMap<String, DeviceCoverage>,
    /// Launches the collector did not count, by kernel, over every trial:
    /// of kernels outside the library's list.
    pub(crate) not_counted: BTreeMap<String, u64>,
    /// Launches past `coverage.device.max_launches`, by kernel, over every trial.
    pub(crate) beyond_max_launches: BTreeMap<String, u64>,
    /// The file of each kernel of the cubins (the outermost frame of its entry).
    pub(crate) kernel_files: BTreeMap<String, String>,
    /// Kernels of the library's own files that were launched and not counted
    /// ([`DeviceLines::uncounted_library_kernels`], set by the report's rule).
    pub(crate) uncounted_library: Vec<String>,
    /// Why some or all branch outcomes are missing (records of an older collector, no branch
    /// listing), each naming what it is about; empty when every trial measured its branches.
    pub(crate) branches_unavailable: Vec<String>,
}

/// The coverage as an lcov tracefile (`SF`, `FN`, `FNDA`, `BRDA`, `DA` records), files and
/// functions sorted so that the same coverage always gives the same text. A line's branches are
/// its blocks, numbered from 0 in the coverage's order, each with branch 0 taken and branch 1 not
/// taken (`-` when the branch never executed); a file without branches has no `BRF`/`BRH`.
pub(crate) fn to_lcov(coverage: &DeviceCoverage) -> String {
    let mut lcov = String::new();
    let branches = coverage.branch_lines();
    for (file, file_coverage) in &coverage.files {
        let DeviceFile { lines, functions } = file_coverage;
        // Writing to a String cannot fail.
        let _ = writeln!(lcov, "TN:\nSF:{file}");
        for (name, function) in functions {
            let _ = writeln!(lcov, "FN:{},{name}", function.first_line);
        }
        for (name, function) in functions {
            let _ = writeln!(lcov, "FNDA:{},{name}", function.hits);
        }
        let functions_hit = functions.values().filter(|function| function.hits > 0).count();
        let _ = writeln!(lcov, "FNF:{}\nFNH:{functions_hit}", functions.len());
        if let Some(file_branches) = branches.get(file.as_str()) {
            let (mut found, mut hit) = (0, 0);
            for (line, line_branches) in file_branches {
                for (block, outcomes) in line_branches.iter().enumerate() {
                    let counts = outcomes.map(|o| [o.taken, o.not_taken]);
                    for (branch, count) in counts.map_or([None, None], |c| c.map(Some)).into_iter().enumerate() {
                        found += 1;
                        hit += usize::from(count.is_some_and(|n| n > 0));
                        let count = count.map_or_else(|| "-".to_owned(), |n| n.to_string());
                        let _ = writeln!(lcov, "BRDA:{line},{block},{branch},{count}");
                    }
                }
            }
            let _ = writeln!(lcov, "BRF:{found}\nBRH:{hit}");
        }
        for (line, count) in lines {
            let _ = writeln!(lcov, "DA:{line},{count}");
        }
        let lines_hit = lines.values().filter(|count| **count > 0).count();
        let _ = writeln!(lcov, "LF:{}\nLH:{lines_hit}\nend_of_record", lines.len());
    }
    lcov
}

#[cfg(test)]
mod tests {
    use super::*;

    fn branch(frames: &[(&str, u32)], outcomes: Option<(u64, u64)>) -> DeviceBranch {
        DeviceBranch {
            frames: frames.iter().map(|(file, line)| ((*file).to_owned(), *line)).collect(),
            outcomes: outcomes.map(|(taken, not_taken)| Outcomes { taken, not_taken }),
        }
    }

    fn coverage() -> DeviceCoverage {
        let file =
            |lines: &[(u32, u64)]| DeviceFile { lines: lines.iter().copied().collect(), ..DeviceFile::default() };
        DeviceCoverage {
            files: BTreeMap::from([
                ("/cuda/atomic.hpp".to_owned(), file(&[(226, 4)])),
                ("/lib/k.cu".to_owned(), file(&[(17, 4), (29, 4)])),
                ("/lib/h.cuh".to_owned(), file(&[(35, 4)])),
            ]),
            branches: vec![
                branch(&[("/lib/k.cu", 17)], Some((32, 32))),
                // A header's branch inlined into a kernel, and one inside CUDA's header.
                branch(&[("/lib/h.cuh", 35), ("/lib/k.cu", 29)], Some((64, 0))),
                branch(&[("/cuda/atomic.hpp", 226), ("/lib/h.cuh", 35), ("/lib/k.cu", 29)], None),
                branch(&[("/lib/k.cu", 17)], Some((0, 0))),
            ],
        }
    }

    #[test]
    fn a_branch_goes_to_the_innermost_kept_frame_of_its_chain() {
        let mut kept = coverage();
        assert_eq!(kept.branch_lines()["/cuda/atomic.hpp"][&226], [None]);
        kept.retain_files(&|file| file.starts_with("/lib/"));
        let placed = kept.branch_lines();
        let some = |taken, not_taken| Some(Outcomes { taken, not_taken });
        assert_eq!(placed["/lib/h.cuh"][&35], [some(64, 0), None], "the header's own line, not its call site");
        assert_eq!(placed["/lib/k.cu"][&17], [some(32, 32), some(0, 0)]);
        assert!(!placed["/lib/k.cu"].contains_key(&29));
        assert_eq!(kept.branch_totals(), (3, 8));
        // Without the header, its branches go out to the kernel's line.
        kept.retain_files(&|file| file == "/lib/k.cu");
        assert_eq!(kept.branch_lines()["/lib/k.cu"][&29], [some(64, 0), None]);
        kept.retain_files(&|_| false);
        assert!(kept.branches.is_empty());
    }

    #[test]
    fn copies_of_one_file_become_one_with_their_hottest_lines_and_every_branch() {
        let mut copies = coverage();
        let kernel = |first_line, hits| DeviceFunction { first_line, hits };
        copies.files.get_mut("/lib/h.cuh").unwrap().functions.insert("k".to_owned(), kernel(30, 2));
        let copy = DeviceFile {
            lines: BTreeMap::from([(35, 9), (36, 0)]),
            functions: BTreeMap::from([("k".to_owned(), kernel(30, 3)), ("j".to_owned(), kernel(40, 0))]),
        };
        copies.files.insert("/build/include/h.cuh".to_owned(), copy);
        copies.branches.push(branch(&[("/build/include/h.cuh", 35), ("/lib/k.cu", 29)], Some((1, 2))));
        copies.rename(&|file| file.replace("/build/include/", "/lib/"));
        let header = &copies.files["/lib/h.cuh"];
        assert_eq!(copies.files.len(), 3);
        assert_eq!(header.lines, BTreeMap::from([(35, 9), (36, 0)]), "the hottest copy of each line");
        assert_eq!((header.functions["k"].hits, header.functions["j"].hits), (5, 0));
        let placed = copies.branch_lines();
        let some = |taken, not_taken| Some(Outcomes { taken, not_taken });
        assert_eq!(placed["/lib/h.cuh"][&35], [some(64, 0), some(1, 2)]);
        assert_eq!(to_lcov(&copies).matches("SF:/lib/h.cuh\n").count(), 1);
    }

    #[test]
    fn branches_are_brda_records_taken_then_not_taken() {
        let mut kept = coverage();
        kept.retain_files(&|file| file.starts_with("/lib/"));
        let lcov = to_lcov(&kept);
        assert!(
            lcov.contains("SF:/lib/h.cuh\nFNF:0\nFNH:0\nBRDA:35,0,0,64\nBRDA:35,0,1,0\nBRDA:35,1,0,-\nBRDA:35,1,1,-\nBRF:4\nBRH:1\nDA:35,4\n"),
            "{lcov}"
        );
        assert!(
            lcov.contains("BRDA:17,0,0,32\nBRDA:17,0,1,32\nBRDA:17,1,0,0\nBRDA:17,1,1,0\nBRF:4\nBRH:2\n"),
            "{lcov}"
        );
        let model = crate::coverage::lcov::parse_lcov(&lcov, "device").unwrap();
        let mut tallies = crate::coverage::lcov::Tallies::default();
        for file in model.files.values() {
            tallies += file.tallies();
        }
        assert_eq!((tallies.branches.covered, tallies.branches.count), (3, 8));
        // No branches measured: the lines' lcov as before, without BRF.
        kept.branches.clear();
        assert!(!to_lcov(&kept).contains("BR"));
    }
}
