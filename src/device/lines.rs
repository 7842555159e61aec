//! Device lines whatever their vendor: per source file, each instrumented line's
//! count and each kernel's; over every trial and each trial's own; the
//! launches the collector did not count. A backend whose lines have a source
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
}

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

impl DeviceCoverage {
    /// Keeps the files `keep` accepts: the report's ignore rules apply to
    /// device lines as to host lines.
    pub(crate) fn retain_files(&mut self, keep: &dyn Fn(&str) -> bool) {
        self.files.retain(|file, _| keep(file));
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
}

/// The coverage as an lcov tracefile (`SF`, `FN`, `FNDA`, `DA` records), files and functions
/// sorted so that the same coverage always gives the same text.
pub(crate) fn to_lcov(coverage: &DeviceCoverage) -> String {
    let mut lcov = String::new();
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
        for (line, count) in lines {
            let _ = writeln!(lcov, "DA:{line},{count}");
        }
        let lines_hit = lines.values().filter(|count| **count > 0).count();
        let _ = writeln!(lcov, "LF:{}\nLH:{lines_hit}\nend_of_record", lines.len());
    }
    lcov
}
