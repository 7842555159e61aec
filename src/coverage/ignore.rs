//! `report.ignore_filename_regex`, owned in one place: compiled and checked
//! once, it gives llvm-cov its `-ignore-filename-regex` (every llvm-cov
//! call of a report goes through [`crate::report::llvm_cov::ReportInputs`], which
//! holds one rule) and decides which files of NVIDIA's kernel lines count.
//! The formats then read one model, so none can apply another rule.

use super::mapping::ObjectMap;
use crate::build::cache::BuildManifest;
use crate::config::Config;
use crate::error::{Context, Error, Result};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The source files a report leaves out.
#[derive(Debug, Clone, Default)]
pub struct IgnoreRule {
    /// As llvm-cov takes them: joined with `|`.
    joined: Option<String>,
    regex: Option<regex::Regex>,
}

impl IgnoreRule {
    /// The rule of `patterns` (a config's `report.ignore_filename_regex`);
    /// none leaves nothing out. A pattern that is not a regular expression
    /// is an error naming the setting.
    pub fn new(patterns: &[String]) -> Result<IgnoreRule> {
        if patterns.is_empty() {
            return Ok(IgnoreRule::default());
        }
        let grouped = patterns.iter().map(|p| format!("(?:{p})")).collect::<Vec<_>>().join("|");
        let regex = regex::Regex::new(&grouped)
            .with_context(|| format!("report.ignore_filename_regex {patterns:?} is not a regular expression"))?;
        Ok(IgnoreRule { joined: Some(patterns.join("|")), regex: Some(regex) })
    }

    /// llvm-cov's argument for the rule, if it leaves anything out.
    pub(crate) fn llvm_cov_arg(&self) -> Option<String> {
        self.joined.as_ref().map(|j| format!("-ignore-filename-regex={j}"))
    }

    /// Whether `file` counts.
    pub(crate) fn keeps(&self, file: &str) -> bool {
        !self.regex.as_ref().is_some_and(|r| r.is_match(file))
    }

    /// Checks that llvm-cov, which reads the patterns as POSIX regular
    /// expressions, kept no file the rule leaves out (`\d` is a digit to
    /// the rule, a `d` to llvm-cov): otherwise the report would count files
    /// the rule says it does not. `files` are those llvm-cov reported on.
    pub(crate) fn check_kept<'a>(&self, files: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let wrong: Vec<&str> = files.into_iter().filter(|f| !self.keeps(f)).collect();
        if wrong.is_empty() {
            return Ok(());
        }
        Err(Error::new(format!(
            "llvm-cov -ignore-filename-regex kept {} files that report.ignore_filename_regex {:?} leaves out \
             (llvm-cov reads the patterns as POSIX regular expressions: write them in the syntax both read): {}",
            wrong.len(),
            self.joined.as_deref().unwrap_or_default(),
            wrong.join(", ")
        )))
    }
}

/// `text` with every character that POSIX and Rust regular expressions
/// both read as an operator escaped, and nothing else (POSIX leaves `\-`
/// undefined).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if ".[]()*+?{}|^$\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `report.test_code`'s pattern `glob` (relative to `root`) as a regular
/// expression of absolute paths: `**/` any folders, `*` and `?` within a
/// name, a trailing `/` everything under that folder.
fn test_code_regex(root: &Path, glob: &str) -> String {
    let mut out = format!("^{}/", escape(&root.display().to_string()));
    let folder = glob.ends_with('/');
    let mut rest = glob.trim_start_matches("./").trim_end_matches('/');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("**/") {
            out.push_str("(.*/)?");
            rest = after;
        } else if let Some(after) = rest.strip_prefix("**") {
            out.push_str(".*");
            rest = after;
        } else {
            let c = rest.chars().next().expect("not empty");
            match c {
                '*' => out.push_str("[^/]*"),
                '?' => out.push_str("[^/]"),
                c => out.push_str(&escape(&c.to_string())),
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    out.push_str(if folder { "/" } else { "$" });
    out
}

/// Why the report leaves a file of a measured object out, beside `report.ignore_filename_regex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeftOut {
    /// Under `tests.source_dir` (apart from the library's) or `report.test_code`.
    TestCode,
    /// Compiled only into programs the build made beside `library.objects`,
    /// and not a library source (a test framework's headers, the system's).
    NotTheLibrarys,
}

/// The one rule of a report over a build: `report.ignore_filename_regex`,
/// the library's test code, and the files that only the build's other
/// programs compile that are not the library's sources. Made from the
/// config and the build alone, so the trials' stored lines and the report
/// apply the same rule.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub(crate) rule: IgnoreRule,
    /// `report.ignore_filename_regex` alone.
    user: IgnoreRule,
    /// The test-code rule alone.
    test_code: IgnoreRule,
}

impl Scope {
    /// `program_files`: every source file the build's other instrumented
    /// programs map; `library_files`: those `library.objects` map.
    pub(crate) fn new(
        config: &Config,
        manifest: &BuildManifest,
        library_files: &BTreeSet<String>,
        program_files: &BTreeSet<String>,
    ) -> Result<Scope> {
        let user = IgnoreRule::new(&config.report.ignore_filename_regex)?;
        let mut tests = Vec::new();
        // The tests' sources are test code unless they hold the library's (one tree).
        if !manifest.library_src.starts_with(&manifest.tests_src) {
            tests.push(format!("^{}/", escape(&manifest.tests_src.display().to_string())));
        }
        for (i, glob) in config.report.test_code.iter().enumerate() {
            if glob.is_empty() || glob.starts_with('/') || glob.contains('\n') {
                return Err(Error::new(format!(
                    "report.test_code[{i}] {glob:?} is not a path relative to library.source_dir"
                )));
            }
            tests.push(test_code_regex(&manifest.library_src, glob));
        }
        let test_code = IgnoreRule::new(&tests).context("report.test_code")?;
        let library_src = &manifest.library_src;
        let build = [&manifest.build_dir, &manifest.cache_dir];
        let foreign: Vec<&String> = program_files
            .iter()
            .filter(|f| !library_files.contains(*f))
            .filter(|f| {
                let p = Path::new(f.as_str());
                !p.starts_with(library_src) || build.iter().any(|b| p.starts_with(b))
            })
            .filter(|f| user.keeps(f) && test_code.keeps(f))
            .collect();
        let mut patterns = config.report.ignore_filename_regex.clone();
        patterns.extend(tests);
        patterns.extend(collapse(&foreign, program_files.iter().chain(library_files)));
        let rule = IgnoreRule::new(&patterns)?;
        Ok(Scope { rule, user, test_code })
    }

    /// The scope of a report over `manifest`, read from the build's objects,
    /// so that a trial's stored lines and the report leave out the same files.
    pub(crate) fn of_build(config: &Config, manifest: &BuildManifest) -> Result<Scope> {
        let (library, programs) = build_maps(manifest)?;
        Scope::new(config, manifest, &files(&library), &program_files(config, &programs))
    }

    /// Why `file` is left out beside the user's rule, if it is.
    pub(crate) fn left_out(&self, file: &str) -> Option<LeftOut> {
        if !self.user.keeps(file) || self.rule.keeps(file) {
            return None;
        }
        Some(if self.test_code.keeps(file) { LeftOut::NotTheLibrarys } else { LeftOut::TestCode })
    }
}

/// Objects and what each maps.
pub(crate) type Maps = Vec<(PathBuf, ObjectMap)>;

/// The maps of the library's instrumented objects, and of the build's other
/// instrumented binaries.
pub(crate) fn build_maps(manifest: &BuildManifest) -> Result<(Maps, Maps)> {
    let read = |paths: Vec<PathBuf>| -> Result<Maps> {
        paths.into_iter().map(|p| ObjectMap::read(&p).map(|m| (p, m))).collect()
    };
    let library = read(manifest.instrumented_objects())?;
    let programs = read(manifest.discovered.iter().flatten().map(|o| o.path.clone()).collect())?;
    Ok((library, programs))
}

/// The files of the programs the report may measure: none without `report.measure_programs`.
pub(crate) fn program_files(config: &Config, programs: &Maps) -> BTreeSet<String> {
    if config.report.measure_programs { files(programs) } else { BTreeSet::new() }
}

/// Every source file `maps` name.
pub(crate) fn files(maps: &Maps) -> BTreeSet<String> {
    maps.iter().flat_map(|(_, m)| m.files.iter().cloned()).collect()
}

/// Patterns that leave out exactly `files` among `all`: a folder's prefix
/// where every file under it is left out, the file's name otherwise, so the
/// rule stays short (llvm-cov takes it as one argument).
fn collapse<'a>(files: &[&String], all: impl Iterator<Item = &'a String>) -> Vec<String> {
    let left: BTreeSet<&str> = files.iter().map(|f| f.as_str()).collect();
    let kept: Vec<&str> = all.map(String::as_str).filter(|f| !left.contains(f)).collect();
    let mut folders: BTreeSet<String> = BTreeSet::new();
    let mut patterns = Vec::new();
    for file in &left {
        // The highest folder under which no kept file lies.
        let mut best: Option<&Path> = None;
        let mut dir = Path::new(file).parent();
        while let Some(d) = dir.filter(|d| d.parent().is_some()) {
            if kept.iter().any(|k| Path::new(k).starts_with(d)) {
                break;
            }
            best = Some(d);
            dir = d.parent();
        }
        match best {
            Some(d) => {
                folders.insert(format!("^{}/", escape(&d.display().to_string())));
            }
            None => patterns.push(format!("^{}$", escape(file))),
        }
    }
    folders.into_iter().chain(patterns).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_code_globs_are_anchored_at_the_library_s_folder() {
        let root = Path::new("/src/lib+1");
        let rule = |g: &str| regex::Regex::new(&test_code_regex(root, g)).unwrap();
        let tests = rule("**/tests/");
        assert!(tests.is_match("/src/lib+1/tests/a.c") && tests.is_match("/src/lib+1/x/tests/b/c.h"));
        assert!(!tests.is_match("/src/lib+1/src/tests.c") && !tests.is_match("/other/tests/a.c"));
        assert!(!tests.is_match("/src/lib11/tests/a.c"), "the + of the folder is literal");
        let files = rule("src/*_test.cc");
        assert!(files.is_match("/src/lib+1/src/ring_test.cc"));
        assert!(!files.is_match("/src/lib+1/src/sub/ring_test.cc") && !files.is_match("/src/lib+1/src/ring_test.cc.o"));
    }

    #[test]
    fn collapse_names_a_folder_only_when_nothing_kept_lies_under_it() {
        let all: Vec<String> =
            ["/usr/include/gtest/a.h", "/usr/include/gtest/b.h", "/usr/include/stdio.h", "/p/src/ring.c"]
                .map(String::from)
                .to_vec();
        let left: Vec<&String> = vec![&all[0], &all[1]];
        assert_eq!(collapse(&left, all.iter()), ["^/usr/include/gtest/"]);
        let left: Vec<&String> = vec![&all[0], &all[2]];
        let patterns = collapse(&left, all.iter());
        assert_eq!(patterns, ["^/usr/include/gtest/a\\.h$", "^/usr/include/stdio\\.h$"]);
    }

    #[test]
    fn one_rule_for_llvm_cov_and_for_the_models_files() {
        let rule = IgnoreRule::new(&["^/usr/".into(), "(^|/)tmpxft_[^/]*$".into()]).unwrap();
        assert_eq!(rule.llvm_cov_arg().as_deref(), Some("-ignore-filename-regex=^/usr/|(^|/)tmpxft_[^/]*$"));
        assert!(!rule.keeps("/usr/include/c++/12/vector") && !rule.keeps("/tmp/x/tmpxft_0001.cudafe1.cpp"));
        assert!(rule.keeps("/src/ccl/src/init.cc"));
        let none = IgnoreRule::new(&[]).unwrap();
        assert!(none.llvm_cov_arg().is_none() && none.keeps("/usr/include/x.h"));
        assert!(rule.check_kept(["/src/a.cc", "/src/b.cc"]).is_ok());
        let err = rule.check_kept(["/src/a.cc", "/usr/include/x.h"]).unwrap_err().to_string();
        assert!(err.starts_with("llvm-cov -ignore-filename-regex kept 1 files that"), "{err}");
        assert!(err.ends_with(": /usr/include/x.h"), "{err}");
        let err = IgnoreRule::new(&["(".into()]).unwrap_err().to_string();
        assert!(err.starts_with("report.ignore_filename_regex [\"(\"] is not a regular expression"), "{err}");
    }
}
