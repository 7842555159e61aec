//! What one trial's profile covers, per source file: computed from the
//! coverage mapping (read once per build) as soon as the trial's profile is
//! merged, while the next trial runs, and stored beside the profile,
//! checksummed in the trial's record. The report then unions what is stored
//! instead of computing every trial after the last one (issue #35); a stored
//! file it cannot trust is recomputed there and named.

use super::ignore::IgnoreRule;
use super::lcov::{Covered, Lcov, Tallies};
use super::mapping::{CountedMapping, Mapping, ProfileCounts};
use super::profiles::{self, StoredLines, TrialMerge};
use crate::build::cache::BuildManifest;
use crate::error::{Error, Result};
use crate::workspace::confined::EntryKind;
use crate::workspace::{Area, Workspace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Sorted, deduplicated numbers as inclusive ranges: `1 2 3 7` → `[1,3] [7,7]`.
pub(crate) fn compact(numbers: impl IntoIterator<Item = u32>) -> Vec<(u32, u32)> {
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for n in numbers {
        match ranges.last_mut() {
            Some((_, end)) if n <= *end => {}
            Some((_, end)) if n == *end + 1 => *end = n,
            _ => ranges.push((n, n)),
        }
    }
    ranges
}

/// The numbers of inclusive ranges, in order.
pub(crate) fn expand(ranges: &[(u32, u32)]) -> impl Iterator<Item = u32> + '_ {
    ranges.iter().flat_map(|&(a, b)| a..=b)
}

/// What one trial's profile covers, and its totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TrialLines {
    /// Per source file, what it covered.
    pub(crate) covered: BTreeMap<String, Covered>,
    /// `(covered, count)` of lines and functions (the model's, as the
    /// merged report counts them) and regions (llvm-cov's summary's).
    pub(crate) lines: (u64, u64),
    pub(crate) functions: (u64, u64),
    pub(crate) regions: (u64, u64),
}

impl TrialLines {
    /// `lcov` (only what ran) with the totals of the whole of it.
    pub(crate) fn of(lcov: &Lcov, totals: &Tallies, regions: (u64, u64)) -> Result<TrialLines> {
        Ok(TrialLines {
            covered: Covered::of(lcov)?,
            lines: (totals.lines.covered, totals.lines.count),
            functions: (totals.functions.covered, totals.functions.count),
            regions,
        })
    }

    /// The same lines with each file named `name(file)` (the report's name,
    /// `coverage/source_names.rs`). Where two files get one name their lines
    /// are the copies' together, but the totals would count each copy's: those
    /// lines are computed from the renamed text instead (`SourceNames::merged_any`).
    pub(crate) fn renamed(self, name: &dyn Fn(&str) -> String) -> TrialLines {
        let mut covered: BTreeMap<String, Covered> = BTreeMap::new();
        for (file, lines) in self.covered {
            let mine = covered.entry(name(&file)).or_default();
            mine.lines.extend(lines.lines);
            mine.functions.extend(lines.functions);
            mine.branches.extend(lines.branches);
            for list in [&mut mine.lines, &mut mine.functions] {
                list.sort_unstable();
                list.dedup();
            }
            mine.branches.sort_unstable();
            mine.branches.dedup();
        }
        TrialLines { covered, ..self }
    }

    /// The files `loaded` covers that `keep` keeps.
    pub(crate) fn of_loaded(loaded: &CountedMapping<'_>, keep: &dyn Fn(&str) -> bool) -> TrialLines {
        let (covered, lines, functions) = loaded.taken(keep);
        TrialLines {
            covered,
            lines: (lines.covered, lines.count),
            functions: (functions.covered, functions.count),
            regions: loaded.regions(keep),
        }
    }
}

/// What the stored lines were computed against: a stored file of another
/// build, llvm-cov release (whose lcov differs) or ignore rule is not used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Basis {
    pub(crate) build_id: String,
    pub(crate) llvm_cov_major: u32,
    /// The report's rule (`coverage::ignore::Scope`), as llvm-cov takes it.
    pub(crate) ignore: Option<String>,
    /// Whether the build's other programs were measured beside
    /// `library.objects` (`report.measure_programs`): lines of their files
    /// are no lines of a report that reads the library's objects alone.
    pub(crate) programs: bool,
}

impl Basis {
    /// What differs between a trial's stored lines' basis (`self`) and the
    /// report's, in words, without the trial's path: the trials that share
    /// it are named once under it (14 trials used to repeat it, with
    /// `Some("…")` in Rust's own notation).
    pub(crate) fn differences(&self, report: &Basis) -> String {
        let rule = |r: &Option<String>| r.as_ref().map_or_else(|| "none".to_string(), |r| format!("`{r}`"));
        let mut said = Vec::new();
        if self.build_id != report.build_id {
            said.push(format!("build {} (the report's is {})", self.build_id, report.build_id));
        }
        if self.llvm_cov_major != report.llvm_cov_major {
            said.push(format!("llvm-cov {} (the report's is {})", self.llvm_cov_major, report.llvm_cov_major));
        }
        if self.ignore != report.ignore {
            said.push(format!("ignore rule {} (the report's is {})", rule(&self.ignore), rule(&report.ignore)));
        }
        let measured = |programs: bool| {
            if programs { "library.objects and the programs that wrote profiles" } else { "library.objects alone" }
        };
        if self.programs != report.programs {
            said.push(format!(
                "measurement: {} (the report's is {})",
                measured(self.programs),
                measured(report.programs)
            ));
        }
        format!("its lines were computed for another {}", said.join(", "))
    }

    pub(crate) fn new(manifest: &BuildManifest, ignore: &IgnoreRule, programs: bool) -> Basis {
        Basis {
            build_id: manifest.build_id.clone(),
            llvm_cov_major: manifest.toolchain.llvm_cov.major,
            ignore: ignore.llvm_cov_arg(),
            programs,
        }
    }
}

/// More covered lines than this in one file is a damaged or forged record:
/// expanding it would take gigabytes.
const MAX_LINES: usize = 1 << 24;

/// Bumped when the stored form changes: an older file is recomputed.
const FORMAT: u32 = 2;

/// `profiles/<trial>.lines`, as written: postcard, numbers as deltas.
#[derive(Serialize, Deserialize)]
struct Stored {
    format: u32,
    basis: Basis,
    /// The merged profile the lines are of.
    profdata_sha256: String,
    lines: (u64, u64),
    functions: (u64, u64),
    regions: (u64, u64),
    files: Vec<(String, StoredFile)>,
}

/// One file's covered lines, as `(gap from the last range's end, length)`;
/// functions and branch lines as gaps from the one before.
#[derive(Serialize, Deserialize)]
struct StoredFile {
    lines: Vec<(u32, u32)>,
    functions: Vec<u32>,
    branches: Vec<(u32, u32, u32)>,
}

impl StoredFile {
    fn of(covered: &Covered) -> StoredFile {
        let mut last = 0;
        let lines = compact(covered.lines.iter().copied())
            .into_iter()
            .map(|(a, b)| {
                let gap = (a - last, b - a);
                last = b;
                gap
            })
            .collect();
        StoredFile { lines, functions: gaps(&covered.functions, |&f| f), branches: branch_gaps(&covered.branches) }
    }

    /// The file's lines back; `None` if a number overflows or is out of order.
    fn covered(&self) -> Option<Covered> {
        let (mut lines, mut last) = (Vec::new(), 0u32);
        for (i, &(gap, len)) in self.lines.iter().enumerate() {
            let start = last.checked_add(gap)?;
            let end = start.checked_add(len)?;
            // A record that names more lines than any source file has is not one.
            if (i > 0 && gap < 2) || lines.len() + len as usize >= MAX_LINES {
                return None;
            }
            lines.extend(start..=end);
            last = end;
        }
        let mut functions = Vec::with_capacity(self.functions.len());
        let mut at = 0u32;
        for (i, &gap) in self.functions.iter().enumerate() {
            at = at.checked_add(gap)?;
            if i > 0 && gap == 0 {
                return None;
            }
            functions.push(at);
        }
        let mut branches = Vec::with_capacity(self.branches.len());
        let mut at = 0u32;
        for &(gap, block, branch) in &self.branches {
            at = at.checked_add(gap)?;
            let b = (at, block, branch);
            if branches.last().is_some_and(|last| *last >= b) {
                return None;
            }
            branches.push(b);
        }
        Some(Covered { lines, functions, branches })
    }
}

fn gaps<T>(items: &[T], line: impl Fn(&T) -> u32) -> Vec<u32> {
    let mut last = 0;
    items
        .iter()
        .map(|item| {
            let gap = line(item) - last;
            last = line(item);
            gap
        })
        .collect()
}

fn branch_gaps(branches: &[(u32, u32, u32)]) -> Vec<(u32, u32, u32)> {
    gaps(branches, |b| b.0).into_iter().zip(branches).map(|(gap, &(_, block, branch))| (gap, block, branch)).collect()
}

/// `profiles/<trial>.lines`.
pub(crate) fn stored_path(ws: &Workspace, slug: &str) -> PathBuf {
    ws.area(Area::Profiles).join(format!("{slug}.lines"))
}

/// Computes each trial's lines as its profile is merged: the build's
/// coverage mapping, read once, and the report's ignore rule.
pub(crate) struct LineStore {
    mapping: Mapping,
    ignore: IgnoreRule,
    basis: Basis,
}

impl LineStore {
    /// The mapping of every object the build's trials may run
    /// ([`BuildManifest::every_object`]), as the report reads them.
    pub(crate) fn new(manifest: &BuildManifest, programs: bool, ignore: IgnoreRule) -> Result<LineStore> {
        let mapping = Mapping::read(&manifest.every_object(programs), manifest.toolchain.llvm_cov.major)?;
        let basis = Basis::new(manifest, &ignore, programs);
        Ok(LineStore { mapping, ignore, basis })
    }

    /// Computes the lines of the trial's merged profile (`merge`), read in
    /// process, and writes `profiles/<slug>.lines`.
    pub(crate) fn store(&self, ws: &Workspace, slug: &str, merge: &TrialMerge) -> Result<StoredLines> {
        let started = Instant::now();
        let (Some(profdata), Some(sha)) = (&merge.profdata, &merge.sha256) else {
            return Err(Error::new("the trial has no merged profile"));
        };
        let counts = super::mapping::read_in_process(ws, profdata)?;
        let lines = self.lines(&counts)?;
        let bytes = encode(&self.basis, sha, &lines);
        let path = stored_path(ws, slug);
        ws.write(&path, &bytes)?;
        Ok(StoredLines {
            sha256: crate::workspace::files::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    fn lines(&self, counts: &ProfileCounts) -> Result<TrialLines> {
        let loaded = self.mapping.load(counts);
        Ok(TrialLines::of_loaded(&loaded, &|f| self.ignore.keeps(f)))
    }
}

fn encode(basis: &Basis, profdata_sha256: &str, lines: &TrialLines) -> Vec<u8> {
    let stored = Stored {
        format: FORMAT,
        basis: basis.clone(),
        profdata_sha256: profdata_sha256.to_string(),
        lines: lines.lines,
        functions: lines.functions,
        regions: lines.regions,
        files: lines.covered.iter().map(|(f, c)| (f.clone(), StoredFile::of(c))).collect(),
    };
    postcard::to_allocvec(&stored).expect("stored lines serialize")
}

/// The trial's stored lines, if they can be trusted: the file its record
/// names by checksum, of `basis`, of the merged profile `profdata_sha256`.
/// Otherwise why not; an altered or unreadable file moves to the trial's
/// quarantine folder first.
pub(crate) fn load(
    ws: &Workspace,
    slug: &str,
    recorded: Option<&StoredLines>,
    basis: &Basis,
    profdata_sha256: Option<&str>,
) -> std::result::Result<TrialLines, String> {
    let path = stored_path(ws, slug);
    let Some(recorded) = recorded else { return Err("its record names no stored lines".into()) };
    let quarantine = |why: String| -> String {
        let to = profiles::quarantine_path(&ws.trial_quarantine(slug), &path);
        match ws.beneath().and_then(|b| b.rename_any(&path, &to)) {
            Ok(()) => format!("{} {why}; moved to {}", path.display(), to.display()),
            Err(e) => format!("{} {why}; it could not be moved to quarantine: {e}", path.display()),
        }
    };
    match ws.kind(&path) {
        Ok(Some(EntryKind::File)) => {}
        Ok(Some(kind)) => return Err(quarantine(format!("is {}, not a file", kind.describe()))),
        Ok(None) => return Err(format!("{} is gone", path.display())),
        Err(e) => return Err(e.to_string()),
    }
    let bytes = match ws.read_opt(&path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(format!("{} is gone", path.display())),
        Err(e) => return Err(e.to_string()),
    };
    let actual = crate::workspace::files::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    if actual != recorded.sha256 {
        return Err(quarantine(format!(
            "was altered after its trial wrote it (sha256 recorded {}, now {actual})",
            recorded.sha256
        )));
    }
    let stored: Stored = match postcard::from_bytes(&bytes) {
        Ok(stored) => stored,
        Err(e) => return Err(quarantine(format!("cannot be read ({e})"))),
    };
    if stored.format != FORMAT {
        return Err(format!("{} is of format {}, this harness writes {FORMAT}", path.display(), stored.format));
    }
    if stored.basis != *basis {
        return Err(stored.basis.differences(basis));
    }
    if Some(stored.profdata_sha256.as_str()) != profdata_sha256 {
        return Err(format!("{} is of another profile than the trial's", path.display()));
    }
    let mut covered = BTreeMap::new();
    for (file, lines) in stored.files {
        let Some(c) = lines.covered() else {
            return Err(quarantine(format!("has numbers out of order or range for {file}")));
        };
        covered.insert(file, c);
    }
    Ok(TrialLines { covered, lines: stored.lines, functions: stored.functions, regions: stored.regions })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_basis_is_said_in_words_naming_only_what_changed() {
        let stored = Basis {
            build_id: "b1".into(),
            llvm_cov_major: 22,
            ignore: Some("-ignore-filename-regex=old".into()),
            programs: true,
        };
        let report = Basis { ignore: Some("-ignore-filename-regex=new".into()), ..stored.clone() };
        assert_eq!(
            stored.differences(&report),
            "its lines were computed for another ignore rule `-ignore-filename-regex=old` (the report's is `-ignore-filename-regex=new`)"
        );
        let report = Basis { build_id: "b2".into(), ignore: None, ..stored.clone() };
        let said = stored.differences(&report);
        assert_eq!(
            said,
            "its lines were computed for another build b1 (the report's is b2), ignore rule `-ignore-filename-regex=old` (the report's is none)"
        );
    }

    #[test]
    fn renamed_lines_keep_their_totals_and_join_under_one_name() {
        let covered = |lines: &[u32]| Covered { lines: lines.to_vec(), functions: vec![lines[0]], branches: vec![] };
        let lines = TrialLines {
            covered: BTreeMap::from([("/b/gen.cc".into(), covered(&[1, 2])), ("/s/a.h".into(), covered(&[3]))]),
            lines: (3, 9),
            functions: (2, 4),
            regions: (5, 7),
        };
        let renamed = lines.clone().renamed(&|f| f.replace("/b/", "<build>/"));
        assert_eq!(renamed.covered.keys().collect::<Vec<_>>(), ["/s/a.h", "<build>/gen.cc"]);
        assert_eq!((renamed.lines, renamed.functions, renamed.regions), (lines.lines, lines.functions, lines.regions));
        assert_eq!(renamed.covered["<build>/gen.cc"], lines.covered["/b/gen.cc"]);
        let one = lines.renamed(&|_| "/s/a.h".to_string());
        assert_eq!(one.covered["/s/a.h"].lines, [1, 2, 3]);
        assert_eq!(one.covered["/s/a.h"].functions, [1, 3]);
    }

    fn sample() -> TrialLines {
        let mut covered = BTreeMap::new();
        covered.insert(
            "/src/a.cc".to_string(),
            Covered {
                lines: vec![1, 2, 3, 7, 9, 10, u32::MAX - 1, u32::MAX],
                functions: vec![1, 7, 4000],
                branches: vec![(2, 0, 0), (2, 0, 1), (2, 1, 0), (9, 0, 1), (u32::MAX, 3, 2)],
            },
        );
        covered.insert("/src/b.h".to_string(), Covered::default());
        TrialLines { covered, lines: (8, 20), functions: (3, 4), regions: (5, 9) }
    }

    fn basis() -> Basis {
        Basis { build_id: "b1".into(), llvm_cov_major: 22, ignore: None, programs: true }
    }

    fn decode(bytes: &[u8]) -> TrialLines {
        let stored: Stored = postcard::from_bytes(bytes).unwrap();
        let covered = stored.files.into_iter().map(|(f, c)| (f, c.covered().unwrap())).collect();
        TrialLines { covered, lines: stored.lines, functions: stored.functions, regions: stored.regions }
    }

    #[test]
    fn stored_lines_read_back_as_written() {
        let lines = sample();
        assert_eq!(decode(&encode(&basis(), "sha", &lines)), lines);
    }

    #[test]
    fn ranges_compact_and_expand() {
        assert_eq!(compact([1, 2, 3, 7, 9, 10]), [(1, 3), (7, 7), (9, 10)]);
        assert_eq!(compact([4, 4, 5]), [(4, 5)]);
        assert_eq!(compact([]), []);
        assert_eq!(expand(&[(1, 3), (7, 7)]).collect::<Vec<_>>(), [1, 2, 3, 7]);
        assert_eq!(compact([u32::MAX - 1, u32::MAX]), [(u32::MAX - 1, u32::MAX)]);
    }

    #[test]
    fn numbers_out_of_order_or_range_are_refused() {
        let overflow = StoredFile { lines: vec![(u32::MAX, 1)], functions: vec![], branches: vec![] };
        assert_eq!(overflow.covered(), None);
        let touching = StoredFile { lines: vec![(1, 1), (1, 0)], functions: vec![], branches: vec![] };
        assert_eq!(touching.covered(), None);
        let huge = StoredFile { lines: vec![(1, u32::MAX - 1)], functions: vec![], branches: vec![] };
        assert_eq!(huge.covered(), None, "four billion lines are not expanded");
        let repeated = StoredFile { lines: vec![], functions: vec![3, 0], branches: vec![] };
        assert_eq!(repeated.covered(), None);
        let backwards = StoredFile { lines: vec![], functions: vec![], branches: vec![(5, 1, 0), (0, 0, 0)] };
        assert_eq!(backwards.covered(), None);
    }

    #[test]
    fn a_file_that_is_not_its_record_is_quarantined_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        let path = stored_path(&ws, "t");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::create_dir_all(ws.trial_quarantine("t")).unwrap();
        let bytes = encode(&basis(), "sha", &sample());
        std::fs::write(&path, &bytes).unwrap();
        let sha256 = crate::workspace::files::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let recorded = StoredLines { sha256, seconds: 0.0 };
        assert_eq!(load(&ws, "t", Some(&recorded), &basis(), Some("sha")).unwrap(), sample());
        let other = Basis { build_id: "b2".into(), ..basis() };
        assert!(load(&ws, "t", Some(&recorded), &other, Some("sha")).unwrap_err().contains("build b1"));
        let library_alone = Basis { programs: false, ..basis() };
        assert!(load(&ws, "t", Some(&recorded), &library_alone, Some("sha")).unwrap_err().contains(
            "measurement: library.objects and the programs that wrote profiles (the report's is library.objects alone)"
        ));
        assert!(load(&ws, "t", Some(&recorded), &basis(), Some("x")).unwrap_err().contains("another profile"));
        assert!(load(&ws, "t", None, &basis(), Some("sha")).unwrap_err().contains("names no stored lines"));
        // One byte changed: altered, moved to quarantine, named.
        let mut altered = bytes.clone();
        *altered.last_mut().unwrap() ^= 1;
        std::fs::write(&path, &altered).unwrap();
        let why = load(&ws, "t", Some(&recorded), &basis(), Some("sha")).unwrap_err();
        assert!(why.contains("was altered after its trial wrote it") && why.contains("moved to"), "{why}");
        assert!(!path.exists());
        assert!(ws.trial_quarantine("t").join("t.lines").is_file());
        assert!(load(&ws, "t", Some(&recorded), &basis(), Some("sha")).unwrap_err().contains("is gone"));
    }
}
