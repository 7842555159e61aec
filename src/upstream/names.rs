//! Trial names and file slugs. Upstream allows the same test name twice in a
//! suite and any characters in names; libtest needs unique names and the
//! workspace needs unique, safe file names (compared ignoring case, as on a
//! case-insensitive file system).

use std::collections::HashSet;

/// A file-name component longer than this is cut, so that a trial's files
/// (`<slug>.profdata`) stay under the 255-byte limit with a `#N` suffix.
const PART_BYTES: usize = 110;

/// Upstream's own safe-name rule (`_emit_log_path`): every run of characters
/// outside `[A-Za-z0-9_.-]` becomes one `_`; a leading `.` gets a `_` before
/// it so the name is never hidden or `..`.
fn file_part(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out.truncate(PART_BYTES);
    out
}

/// Hands out unique trial names and slugs.
#[derive(Default)]
pub(super) struct Names {
    trials: HashSet<String>,
    slugs: HashSet<String>,
}

/// A name handed out, and what had to change to make it unique.
pub(super) struct Named {
    pub(crate) trial: String,
    pub(crate) slug: String,
    /// Set when the name or slug needed a suffix: the warning to give.
    pub(crate) renamed: Option<String>,
}

impl Names {
    pub(super) fn name(&mut self, suite: &str, test: &str) -> Named {
        let base = format!("{suite}::{test}");
        let base_slug = format!("{}.{}", file_part(suite), file_part(test));
        let mut n = 1;
        loop {
            let (trial, slug) = match n {
                1 => (base.clone(), base_slug.clone()),
                n => (format!("{base}#{n}"), format!("{base_slug}#{n}")),
            };
            if !self.trials.contains(&trial) && !self.slugs.contains(&slug.to_lowercase()) {
                let renamed = (n > 1).then(|| {
                    if self.trials.contains(&base) {
                        format!("`{base}` repeats an earlier test of the suite; this one is named `{trial}`")
                    } else {
                        format!(
                            "the file name `{base_slug}` of `{base}` is taken (ignoring case); this one uses `{slug}`"
                        )
                    }
                });
                self.trials.insert(trial.clone());
                self.slugs.insert(slug.to_lowercase());
                return Named { trial, slug, renamed };
            }
            n += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_pairs_get_a_suffix_and_a_reason() {
        let mut names = Names::default();
        let a = names.name("All Collectives", "AllReduce");
        assert_eq!(
            (a.trial.as_str(), a.slug.as_str(), a.renamed),
            ("All Collectives::AllReduce", "All_Collectives.AllReduce", None)
        );
        let b = names.name("All Collectives", "AllReduce");
        assert_eq!(
            (b.trial.as_str(), b.slug.as_str()),
            ("All Collectives::AllReduce#2", "All_Collectives.AllReduce#2")
        );
        assert!(b.renamed.unwrap().contains("repeats an earlier test"));
        let c = names.name("all collectives", "allreduce");
        assert_eq!(c.slug, "all_collectives.allreduce#3", "file names are compared ignoring case");
        assert!(c.renamed.unwrap().contains("is taken"));
    }

    #[test]
    fn slugs_are_safe_file_names() {
        for name in ["", ".", "..", "a/b", "x\u{0}y", "é", &"n".repeat(400)] {
            let slug = Names::default().name(name, name).slug;
            assert!(crate::workspace::check_slug(&slug).is_ok(), "{slug:?}");
        }
    }
}
