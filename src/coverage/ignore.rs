//! `report.ignore_filename_regex`, owned in one place: compiled and checked
//! once, it gives llvm-cov its `-ignore-filename-regex` (every llvm-cov
//! call of a report goes through [`crate::report::llvm_cov::ReportInputs`], which
//! holds one rule) and decides which files of NVIDIA's kernel lines count.
//! The formats then read one model, so none can apply another rule.

use crate::error::{Context, Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;

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
