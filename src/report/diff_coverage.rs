//! Coverage of what changed, and coverage that was lost.
//!
//! **Changed lines** (`CCL_COV_DIFF_BASE=<revision>`): `git diff -M
//! --unified=0 <revision>` in the library's source repository (the working
//! tree against the revision, renames followed) plus its untracked files give
//! the changed lines of each file; those llvm-cov instruments (lcov `DA`
//! records of the merged report, so comments and blank lines never count) are
//! the changed lines with code, and the report says which of them ran.
//!
//! **Lost coverage** (`CCL_COV_BASELINE=<workspace or coverage.lcov>`): the
//! lines of this run compared with a baseline's, in lcov 2.x's differential
//! categories (LBC "lost baseline coverage", UNC "uncovered new code", …),
//! lines matched by file (the longest common path suffix) and line number.

use crate::coverage::lcov::{FileCoverage, Lcov};
use crate::error::{Error, Result};
use crate::exec::process::Cmd;
use crate::report::attribution::{compact, ranges_text};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The changed lines of one file, on its new side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileDiff {
    /// Relative to the repository's top level.
    pub(crate) path: String,
    /// Set when git found the file renamed (or copied) from this path.
    pub(crate) renamed_from: Option<String>,
    pub(crate) lines: BTreeSet<u32>,
}

/// Strips git's quoting of an unusual path (`"a/tab\there"`) and the prefix.
fn diff_path(text: &str, prefix: &str) -> Option<String> {
    let text = text.trim_end();
    let unquoted = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) => inner.replace("\\\"", "\"").replace("\\t", "\t").replace("\\n", "\n").replace("\\\\", "\\"),
        None => text.to_string(),
    };
    unquoted.strip_prefix(prefix).map(str::to_string)
}

/// Parses `git diff --unified=0 --src-prefix=a/ --dst-prefix=b/` output into
/// the new-side changed lines of each file still there (deleted files and
/// pure deletions change no line of the new version).
pub(crate) fn parse_diff(text: &str) -> Result<Vec<FileDiff>> {
    let mut files: Vec<FileDiff> = Vec::new();
    let mut current: Option<FileDiff> = None;
    let mut renamed_from: Option<String> = None;
    // Lines of the current hunk's body still to come: they are content,
    // whatever they look like (an added line `++ x` reads `+++ x`).
    let mut body: u64 = 0;
    // After `+++ /dev/null`: the file's hunks delete it and change no line.
    let mut deleted = false;
    for (n, line) in text.lines().enumerate() {
        let bad = |what: &str| Error::new(format!("git diff output line {}: {what}: {line:?}", n + 1));
        if body > 0 && (line.starts_with(['+', '-', ' '])) {
            body -= 1;
            continue;
        }
        if line.starts_with("diff --git ") {
            files.extend(current.take());
            renamed_from = None;
            deleted = false;
        } else if let Some(from) = line.strip_prefix("rename from ").or_else(|| line.strip_prefix("copy from ")) {
            renamed_from = Some(diff_path(from, "").unwrap_or_default());
        } else if let Some(to) = line.strip_prefix("+++ ") {
            files.extend(current.take());
            deleted = to.trim_end() == "/dev/null";
            if !deleted {
                let path = diff_path(to, "b/").ok_or_else(|| bad("a new-side path without the b/ prefix"))?;
                current = Some(FileDiff { path, renamed_from: renamed_from.take(), lines: BTreeSet::new() });
            }
        } else if let Some(hunk) = line.strip_prefix("@@ ") {
            let range = |sign: char| {
                let text = hunk.split(' ').find_map(|w| w.strip_prefix(sign))?;
                match text.split_once(',') {
                    Some((s, c)) => Some((s.parse::<u32>().ok()?, c.parse::<u32>().ok()?)),
                    None => Some((text.parse::<u32>().ok()?, 1)),
                }
            };
            let (Some((_, old_count)), Some((start, count))) = (range('-'), range('+')) else {
                return Err(bad("a hunk header without its - and + ranges"));
            };
            body = u64::from(old_count) + u64::from(count);
            if deleted {
                continue;
            }
            let file = current.as_mut().ok_or_else(|| bad("a hunk outside a file"))?;
            file.lines.extend((0..count).filter_map(|i| start.checked_add(i)));
        }
    }
    files.extend(current);
    // A file renamed without a content change has no +++ line: nothing changed in it.
    Ok(files)
}

/// The changes of the working tree of the repository holding `source_dir`
/// against `base`: its top level, the base's commit, and each changed file.
pub(crate) struct Changes {
    pub(crate) toplevel: PathBuf,
    pub(crate) base_commit: String,
    pub(crate) files: Vec<FileDiff>,
}

pub(crate) fn git_changes(source_dir: &Path, base: &str) -> Result<Changes> {
    let git = |args: &[&str]| Cmd::new("git").arg("-C").arg(source_dir).args(args).read();
    let toplevel = git(&["rev-parse", "--show-toplevel"]).map_err(|e| {
        e.context(format!("{} is not in a git repository, so CCL_COV_DIFF_BASE cannot apply", source_dir.display()))
    })?;
    let base_commit =
        git(&["rev-parse", "--verify", "--end-of-options", &format!("{base}^{{commit}}")]).map_err(|e| {
            e.context(format!("CCL_COV_DIFF_BASE={base:?} is not a commit of the repository at {}", toplevel.trim()))
        })?;
    let toplevel = PathBuf::from(toplevel.trim());
    let run = |args: &[&str]| Cmd::new("git").arg("-C").arg(&toplevel).args(args).read();
    let diff = run(&[
        "-c",
        "core.quotePath=false",
        "diff",
        "-M",
        "--unified=0",
        "--no-color",
        "--no-ext-diff",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        base_commit.trim(),
        "--",
    ])?;
    let mut files = parse_diff(&diff)?;
    let untracked = run(&["ls-files", "--others", "--exclude-standard", "-z"])?;
    for path in untracked.split('\0').filter(|p| !p.is_empty()) {
        let lines = std::fs::read(toplevel.join(path)).map(|b| b.split(|&c| c == b'\n').count()).unwrap_or(0);
        files.push(FileDiff { path: path.to_string(), renamed_from: None, lines: (1..=lines as u32).collect() });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Changes { toplevel, base_commit: base_commit.trim().to_string(), files })
}

/// One file of `report/diff.json`; line lists are inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DiffFile {
    pub(crate) path: String,
    pub(crate) renamed_from: Option<String>,
    pub(crate) changed: Vec<(u32, u32)>,
    /// Changed lines that hold code (llvm-cov instruments them).
    pub(crate) instrumented: Vec<(u32, u32)>,
    pub(crate) covered: Vec<(u32, u32)>,
    pub(crate) uncovered: Vec<(u32, u32)>,
}

/// `report/diff.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct DiffReport {
    pub(crate) base: String,
    pub(crate) base_commit: String,
    pub(crate) repository: PathBuf,
    /// Changed lines that hold code, and how many of them ran.
    pub(crate) instrumented: usize,
    pub(crate) covered: usize,
    pub(crate) percent: f64,
    /// Files with changed lines that hold code.
    pub(crate) files: Vec<DiffFile>,
    /// Changed files with no instrumented changed line (build files, headers
    /// without code, comment-only changes, files outside the build).
    pub(crate) without_code_changes: Vec<String>,
}

/// The lcov record of `path`, trying it as written and canonicalised.
fn lookup<'a>(lcov: &'a Lcov, path: &Path) -> Option<&'a FileCoverage> {
    let as_text = |p: &Path| lcov.files.get(&p.to_string_lossy().into_owned());
    as_text(path)
        .or_else(|| std::fs::canonicalize(path).ok().and_then(|c| as_text(&c)))
        .or_else(|| lcov.files.iter().find(|(f, _)| std::fs::canonicalize(f).is_ok_and(|c| c == path)).map(|(_, v)| v))
}

/// Which changed lines hold code and which of them the merged report covers.
pub(crate) fn diff_report(base: &str, changes: &Changes, all: &Lcov) -> DiffReport {
    let mut files = Vec::new();
    let mut without_code_changes = Vec::new();
    let (mut instrumented, mut covered) = (0, 0);
    for f in &changes.files {
        let record = lookup(all, &changes.toplevel.join(&f.path));
        let code: Vec<u32> =
            f.lines.iter().copied().filter(|l| record.is_some_and(|r| r.lines.contains_key(l))).collect();
        if code.is_empty() {
            without_code_changes.push(f.path.clone());
            continue;
        }
        let hit: Vec<u32> =
            code.iter().copied().filter(|l| record.is_some_and(|r| r.lines.get(l) > Some(&0))).collect();
        instrumented += code.len();
        covered += hit.len();
        files.push(DiffFile {
            path: f.path.clone(),
            renamed_from: f.renamed_from.clone(),
            changed: compact(f.lines.iter().copied()),
            instrumented: compact(code.iter().copied()),
            covered: compact(hit.iter().copied()),
            uncovered: compact(code.iter().copied().filter(|l| !hit.contains(l))),
        });
    }
    DiffReport {
        base: base.to_string(),
        base_commit: changes.base_commit.clone(),
        repository: changes.toplevel.clone(),
        instrumented,
        covered,
        percent: crate::report::percent(covered as u64, instrumented as u64),
        files,
        without_code_changes,
    }
}

impl DiffReport {
    /// `report/diff.md`, to paste as a pull-request comment.
    pub(crate) fn markdown(&self) -> String {
        let short = self.base_commit.get(..12).unwrap_or(&self.base_commit);
        let mut md = format!(
            "### Changed-line coverage: {} of {} changed lines with code covered ({:.2}%)\n\nAgainst `{}` ({short}), working tree of `{}`; comments, blank lines and other lines without code are not counted.\n\n",
            self.covered,
            self.instrumented,
            self.percent,
            self.base,
            self.repository.display()
        );
        if self.files.is_empty() {
            md.push_str("No changed line holds instrumented code.\n");
        } else {
            md.push_str(
                "| file | changed lines with code | covered | uncovered changed lines |\n|---|---:|---:|---|\n",
            );
            for f in &self.files {
                let count = |r: &[(u32, u32)]| r.iter().map(|&(a, b)| (b - a + 1) as usize).sum::<usize>();
                let name = match &f.renamed_from {
                    Some(from) => format!("`{}` (was `{from}`)", f.path),
                    None => format!("`{}`", f.path),
                };
                let uncovered = if f.uncovered.is_empty() { "none".to_string() } else { ranges_text(&f.uncovered) };
                md.push_str(&format!(
                    "| {name} | {} | {} | {uncovered} |\n",
                    count(&f.instrumented),
                    count(&f.covered)
                ));
            }
        }
        if !self.without_code_changes.is_empty() {
            md.push_str(&format!(
                "\nChanged files without a changed line of instrumented code: {}\n",
                self.without_code_changes.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        md
    }
}

/// `CCL_COV_FAIL_UNDER_DIFF`: why the changed lines fall short, if they do.
pub(crate) fn check_diff_bar(report: &DiffReport, bar: Option<&str>) -> Result<Option<String>> {
    let Some(bar) = bar else { return Ok(None) };
    let Some(value) = crate::env_names::percent("CCL_COV_FAIL_UNDER_DIFF", bar)? else { return Ok(None) };
    Ok((report.percent < value).then(|| {
        format!(
            "changed-line coverage {:.2}% ({}/{}) is under {}",
            report.percent,
            report.covered,
            report.instrumented,
            crate::env_names::setting("CCL_COV_FAIL_UNDER_DIFF", bar)
        )
    }))
}

/// lcov 2.x's differential categories, for lines matched by number.
pub(crate) const CATEGORIES: [(&str, &str); 8] = [
    ("LBC", "lost baseline coverage: covered in the baseline, not now"),
    ("UNC", "uncovered new code: not instrumented in the baseline, not covered now"),
    ("GNC", "gained coverage of new code: not instrumented in the baseline, covered now"),
    ("GBC", "gained baseline coverage: not covered in the baseline, covered now"),
    ("CBC", "covered baseline code: covered in both"),
    ("UBC", "uncovered baseline code: covered in neither"),
    (
        "ECB",
        "excluded covered baseline code: covered in the baseline, no longer instrumented (deleted, moved or excluded)",
    ),
    ("EUB", "excluded uncovered baseline code: not covered in the baseline, no longer instrumented"),
];

/// Which baseline file each current file is: the same path, else the one
/// with the longest common path suffix (at least the file name), if only
/// one has it.
pub(crate) fn match_files<'a>(current: &[&'a str], baseline: &[&'a str]) -> BTreeMap<&'a str, &'a str> {
    let suffix = |a: &str, b: &str| {
        Path::new(a).components().rev().zip(Path::new(b).components().rev()).take_while(|(x, y)| x == y).count()
    };
    let mut out = BTreeMap::new();
    for &c in current {
        if baseline.contains(&c) {
            out.insert(c, c);
            continue;
        }
        let scored: Vec<(usize, &str)> = baseline.iter().map(|&b| (suffix(c, b), b)).filter(|(s, _)| *s > 0).collect();
        let best = scored.iter().map(|(s, _)| *s).max().unwrap_or(0);
        let winners: Vec<&str> = scored.iter().filter(|(s, _)| *s == best).map(|(_, b)| *b).collect();
        if let [one] = winners.as_slice() {
            out.insert(c, *one);
        }
    }
    out
}

/// `report/baseline.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct BaselineReport {
    pub(crate) baseline: PathBuf,
    /// Lines per category (see `categories`).
    pub(crate) counts: BTreeMap<String, usize>,
    pub(crate) categories: BTreeMap<String, String>,
    /// Per file, the lines in categories LBC (lost) and UNC (uncovered new code).
    pub(crate) lost_baseline_coverage: BTreeMap<String, Vec<(u32, u32)>>,
    pub(crate) uncovered_new_code: BTreeMap<String, Vec<(u32, u32)>>,
    pub(crate) lost_lines: usize,
}

/// Compares this run's lines with the baseline's.
pub(crate) fn baseline_report(baseline_path: &Path, baseline: &Lcov, current: &Lcov) -> BaselineReport {
    let cur_names: Vec<&str> = current.files.keys().map(String::as_str).collect();
    let base_names: Vec<&str> = baseline.files.keys().map(String::as_str).collect();
    let matched = match_files(&cur_names, &base_names);
    let mut counts: BTreeMap<String, usize> = CATEGORIES.iter().map(|(c, _)| ((*c).to_string(), 0)).collect();
    let mut lost = BTreeMap::new();
    let mut unc = BTreeMap::new();
    let empty = FileCoverage::default();
    let mut bump = |c: &str| *counts.entry(c.to_string()).or_default() += 1;
    for (name, now) in &current.files {
        let before = matched.get(name.as_str()).and_then(|b| baseline.files.get(*b)).unwrap_or(&empty);
        let (mut lost_here, mut unc_here) = (Vec::new(), Vec::new());
        for (&line, &hits) in &now.lines {
            let category = match (before.lines.get(&line), hits > 0) {
                (Some(&b), true) => {
                    if b > 0 {
                        "CBC"
                    } else {
                        "GBC"
                    }
                }
                (Some(&b), false) => {
                    if b > 0 {
                        "LBC"
                    } else {
                        "UBC"
                    }
                }
                (None, true) => "GNC",
                (None, false) => "UNC",
            };
            match category {
                "LBC" => lost_here.push(line),
                "UNC" => unc_here.push(line),
                _ => {}
            }
            bump(category);
        }
        for (&line, &hits) in &before.lines {
            if !now.lines.contains_key(&line) {
                bump(if hits > 0 { "ECB" } else { "EUB" });
            }
        }
        if !lost_here.is_empty() {
            lost.insert(name.clone(), compact(lost_here));
        }
        if !unc_here.is_empty() {
            unc.insert(name.clone(), compact(unc_here));
        }
    }
    let matched_baseline: BTreeSet<&str> = matched.values().copied().collect();
    for (name, before) in &baseline.files {
        if !matched_baseline.contains(name.as_str()) {
            for &hits in before.lines.values() {
                bump(if hits > 0 { "ECB" } else { "EUB" });
            }
        }
    }
    let lost_lines = counts.get("LBC").copied().unwrap_or(0);
    BaselineReport {
        baseline: baseline_path.to_path_buf(),
        counts,
        categories: CATEGORIES.iter().map(|(c, d)| ((*c).to_string(), (*d).to_string())).collect(),
        lost_baseline_coverage: lost,
        uncovered_new_code: unc,
        lost_lines,
    }
}

impl BaselineReport {
    pub(crate) fn markdown(&self) -> String {
        let mut md = format!(
            "### Coverage against the baseline `{}`\n\n| category | lines |\n|---|---:|\n",
            self.baseline.display()
        );
        for (c, description) in CATEGORIES {
            md.push_str(&format!("| {c}: {description} | {} |\n", self.counts.get(c).copied().unwrap_or(0)));
        }
        for (title, files) in
            [("Lost baseline coverage", &self.lost_baseline_coverage), ("Uncovered new code", &self.uncovered_new_code)]
        {
            if !files.is_empty() {
                md.push_str(&format!("\n{title}:\n\n"));
                for (file, ranges) in files {
                    md.push_str(&format!("- `{file}`: {}\n", ranges_text(ranges)));
                }
            }
        }
        md
    }
}

/// The baseline's lcov: `path` itself, or a workspace's `report/coverage.lcov`
/// (or a report folder's `coverage.lcov`).
pub(crate) fn baseline_lcov(path: &Path) -> Result<PathBuf> {
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    for candidate in [path.join("report/coverage.lcov"), path.join("coverage.lcov")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(Error::new(format!(
        "CCL_COV_BASELINE={}: neither an lcov file nor a workspace with report/coverage.lcov; give an earlier workspace (after its coverage_report) or its coverage.lcov",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov::parse_lcov;

    const DIFF: &str = "diff --git a/ccl/src/a.cc b/ccl/src/a.cc\nindex 1..2 100644\n--- a/ccl/src/a.cc\n+++ b/ccl/src/a.cc\n\
@@ -10 +10,4 @@ size_t f()\n-x\n+a\n+b\n+c\n+d\n@@ -30,2 +33,0 @@\n-y\n-z\n@@ -40,0 +41 @@\n+++ w\n\
diff --git a/old.cc b/new.cc\nsimilarity index 90%\nrename from old.cc\nrename to new.cc\nindex 3..4 100644\n--- a/old.cc\n+++ b/new.cc\n@@ -2 +2 @@\n-p\n+q\n\
diff --git a/gone.cc b/gone.cc\ndeleted file mode 100644\n--- a/gone.cc\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-1\n-2\n-3\n\
diff --git a/moved.cc b/moved2.cc\nsimilarity index 100%\nrename from moved.cc\nrename to moved2.cc\n\
diff --git \"a/sp ace\\tx.cc\" \"b/sp ace\\tx.cc\"\n--- \"a/sp ace\\tx.cc\"\n+++ \"b/sp ace\\tx.cc\"\n@@ -0,0 +1,2 @@\n+1\n+2\n";

    #[test]
    fn hunks_give_the_new_sides_changed_lines_and_renames_are_followed() {
        let files = parse_diff(DIFF).unwrap();
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(files[0].path, "ccl/src/a.cc");
        assert_eq!(files[0].lines.iter().copied().collect::<Vec<_>>(), [10, 11, 12, 13, 41]);
        assert_eq!(
            files[1],
            FileDiff { path: "new.cc".into(), renamed_from: Some("old.cc".into()), lines: [2].into() }
        );
        assert_eq!(files[2].path, "sp ace\tx.cc");
        assert_eq!(files[2].lines.len(), 2);
        for bad in ["@@ -1 +1 @@\n", "+++ b/x\n@@ -1 +x @@\n", "+++ b/x\n@@ -1 @@\n", "+++ c/x\n"] {
            assert!(parse_diff(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_diff("").unwrap(), []);
    }

    fn changes(files: Vec<FileDiff>) -> Changes {
        Changes { toplevel: "/repo".into(), base_commit: "0123456789abcdef0123".into(), files }
    }

    #[test]
    fn only_instrumented_changed_lines_count() {
        let all =
            parse_lcov("SF:/repo/ccl/src/a.cc\nDA:10,1\nDA:11,0\nDA:12,0\nDA:13,4\nend_of_record\n", "t").unwrap();
        let files = parse_diff(DIFF).unwrap();
        let report = diff_report("main", &changes(files), &all);
        assert_eq!((report.instrumented, report.covered), (4, 2));
        assert_eq!(report.percent, 50.0);
        assert_eq!(report.files[0].changed, [(10, 13), (41, 41)]);
        assert_eq!(report.files[0].covered, [(10, 10), (13, 13)]);
        assert_eq!(report.files[0].uncovered, [(11, 12)]);
        assert_eq!(report.without_code_changes, ["new.cc", "sp ace\tx.cc"]);
        let md = report.markdown();
        assert!(md.starts_with("### Changed-line coverage: 2 of 4 changed lines with code covered (50.00%)"), "{md}");
        assert!(md.contains("| `ccl/src/a.cc` | 4 | 2 | 11-12 |"), "{md}");
        assert!(md.contains("(0123456789ab)"), "{md}");
        assert_eq!(check_diff_bar(&report, None).unwrap(), None);
        assert_eq!(check_diff_bar(&report, Some("50")).unwrap(), None);
        assert!(check_diff_bar(&report, Some("80")).unwrap().unwrap().contains("50.00% (2/4) is under"));
        assert!(check_diff_bar(&report, Some("most")).is_err());
        assert!(check_diff_bar(&report, Some("120")).is_err());
        let none = diff_report("main", &changes(Vec::new()), &all);
        assert_eq!(none.percent, 100.0, "nothing to cover is not a shortfall");
    }

    #[test]
    fn baseline_lines_fall_into_lcovs_categories() {
        let base = parse_lcov(
            "SF:/old/ccl/src/a.cc\nDA:1,1\nDA:2,1\nDA:3,0\nDA:4,0\nDA:9,5\nend_of_record\nSF:/old/ccl/src/gone.cc\nDA:1,1\nend_of_record\n",
            "b",
        )
        .unwrap();
        let now =
            parse_lcov("SF:/new/ccl/src/a.cc\nDA:1,1\nDA:2,0\nDA:3,2\nDA:4,0\nDA:5,0\nDA:6,1\nend_of_record\n", "n")
                .unwrap();
        let report = baseline_report(Path::new("/old/ws"), &base, &now);
        let count = |c: &str| report.counts[c];
        assert_eq!(
            [
                count("CBC"),
                count("LBC"),
                count("GBC"),
                count("UBC"),
                count("UNC"),
                count("GNC"),
                count("ECB"),
                count("EUB")
            ],
            [1, 1, 1, 1, 1, 1, 2, 0]
        );
        assert_eq!(report.lost_lines, 1);
        assert_eq!(report.lost_baseline_coverage["/new/ccl/src/a.cc"], [(2, 2)]);
        assert_eq!(report.uncovered_new_code["/new/ccl/src/a.cc"], [(5, 5)]);
        assert!(report.markdown().contains("- `/new/ccl/src/a.cc`: 2"));
    }

    #[test]
    fn files_match_by_the_longest_unique_path_suffix() {
        let m = match_files(
            &["/b/x/src/a.cc", "/b/y/src/a.cc", "/b/z/c.cc", "/b/q.cc"],
            &["/a/x/src/a.cc", "/a/y/src/a.cc", "/a/c.cc", "/a/1/q.cc", "/a/2/q.cc"],
        );
        assert_eq!(m.get("/b/x/src/a.cc"), Some(&"/a/x/src/a.cc"));
        assert_eq!(m.get("/b/y/src/a.cc"), Some(&"/a/y/src/a.cc"));
        assert_eq!(m.get("/b/z/c.cc"), Some(&"/a/c.cc"));
        assert_eq!(m.get("/b/q.cc"), None, "two equally good matches: none");
    }
}
