//! Which trials (or report steps) a harness binary selects: libtest's
//! arguments, with as many filters as libtest takes (libtest-mimic 0.8 takes
//! one), and who gave them ([`Intent`]), which decides what a filter that
//! matches nothing means.
//!
//! Several filters are handed to libtest-mimic as `--exact` and one `--skip`
//! per name they leave out, so that its listing and its counts (`N filtered
//! out`) stay its own.

use crate::env_names;
use libtest_mimic::Arguments;

/// Who gave the filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// A plain `cargo test FILTER`: as libtest does; the filter may be meant
    /// for another test binary of the same `cargo test`.
    Libtest,
    /// `ccl-coverage run` or `list`, or `cargo coverage`
    /// ([`env_names::TRIAL_FILTER`]): the filters select trials. One that
    /// matches no trial is refused, and the report runs every step.
    Trials,
    /// `ccl-coverage report FILTER`: the filters select report steps; one
    /// that matches no step is refused.
    Steps,
}

impl Intent {
    /// A test binary's: [`Intent::Trials`] under `cargo coverage`, else libtest's.
    pub fn from_env() -> Intent {
        let set = std::env::var(env_names::TRIAL_FILTER).ok();
        if env_names::switch(env_names::TRIAL_FILTER, set.as_deref().unwrap_or("")).ok().flatten() == Some(true) {
            Intent::Trials
        } else {
            Intent::Libtest
        }
    }
}

/// libtest's arguments with every positional filter.
#[derive(Debug, Clone)]
pub struct Selection {
    pub filters: Vec<String>,
    /// The other arguments, as libtest-mimic parsed them (no filter).
    pub args: Arguments,
}

/// libtest's options that take the next argument as their value.
const TAKES_VALUE: [&str; 6] = ["--test-threads", "--logfile", "--skip", "--color", "--format", "-Z"];

impl Selection {
    /// Parses `argv` (the program's name first) as libtest does: every
    /// argument that is not an option or an option's value is a filter.
    pub fn parse(argv: impl IntoIterator<Item = String>) -> Selection {
        let mut argv = argv.into_iter();
        let mut rest: Vec<String> = argv.next().into_iter().collect();
        let mut filters = Vec::new();
        let mut positional_only = false;
        while let Some(arg) = argv.next() {
            if positional_only || !arg.starts_with('-') || arg == "-" {
                filters.push(arg);
            } else if arg == "--" {
                positional_only = true;
            } else if TAKES_VALUE.contains(&arg.as_str()) {
                rest.push(arg);
                rest.extend(argv.next());
            } else {
                rest.push(arg);
            }
        }
        Selection { filters, args: Arguments::from_iter(rest) }
    }

    /// The test binary's own arguments.
    pub(crate) fn from_args() -> Selection {
        Selection::parse(std::env::args())
    }

    /// Whether the filters and `--skip` patterns keep `name` (ignored or not).
    pub(crate) fn keeps(&self, name: &str) -> bool {
        let hit = |pattern: &String| if self.args.exact { name == pattern } else { name.contains(pattern.as_str()) };
        (self.filters.is_empty() || self.filters.iter().any(hit)) && !self.args.skip.iter().any(hit)
    }

    /// The same selection among `names` as libtest-mimic's arguments.
    pub(crate) fn libtest<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Arguments {
        let mut args = self.args.clone();
        if let [one] = self.filters.as_slice() {
            args.filter = Some(one.clone());
        } else if !self.filters.is_empty() {
            args.filter = None;
            args.exact = true;
            args.skip = names.into_iter().filter(|n| !self.keeps(n)).map(str::to_string).collect();
        }
        args
    }

    /// Without filters, `--exact`, `--skip`, `--ignored` and
    /// `--include-ignored`: what the report keeps of `cargo coverage`'s
    /// arguments, whose selection is the trials'.
    pub(crate) fn without_selection(&self) -> Selection {
        let args = Arguments {
            filter: None,
            exact: false,
            skip: Vec::new(),
            ignored: false,
            include_ignored: false,
            ..self.args.clone()
        };
        Selection { filters: Vec::new(), args }
    }

    /// Why nothing was selected among `names` when the filters were given on
    /// purpose: each filter that matches none of them (with the name it was
    /// most likely meant to be), or that `--skip` left out every name.
    pub(crate) fn refusal(&self, what: &str, names: &[&str]) -> Option<String> {
        let missing: Vec<String> = self
            .filters
            .iter()
            .filter(|f| !names.iter().any(|n| if self.args.exact { n == f } else { n.contains(f.as_str()) }))
            .map(|f| {
                // `--exact` takes whole names only; else any part of one.
                let candidates =
                    if self.args.exact { names.iter().map(|n| (*n).to_string()).collect() } else { parts(names) };
                let how = if self.args.exact { "is called" } else { "matches" };
                match env_names::nearest(f, f.len(), candidates.iter().map(String::as_str)) {
                    Some(guess) => format!("no {what} {how} `{f}` (did you mean `{guess}`?)"),
                    None => format!("no {what} {how} `{f}`"),
                }
            })
            .collect();
        if !missing.is_empty() {
            return Some(missing.join("; "));
        }
        (!names.iter().any(|n| self.keeps(n))).then(|| {
            let skips: Vec<String> = self.args.skip.iter().map(|s| format!("--skip {s}")).collect();
            format!("{} leaves out every {what} the filters select", skips.join(" "))
        })
    }
}

/// Every name, and each of its `::`-separated prefixes and parts: what a
/// filter can be a slip of (`AllReduse` for `AllReduce`).
fn parts(names: &[&str]) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    for name in names {
        let pieces: Vec<&str> = name.split("::").collect();
        for i in 0..pieces.len() {
            out.insert(pieces[i].to_string());
            out.insert(pieces[..=i].join("::"));
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Selection {
        Selection::parse(std::iter::once("t").chain(args.iter().copied()).map(str::to_string))
    }

    const NAMES: [&str; 4] = ["AllReduce::1K::ring", "AllReduce::1K::mpi", "Reduce::1K::ring", "report::html"];

    fn kept(args: &[&str]) -> Vec<&'static str> {
        let s = parse(args);
        let libtest = s.libtest(NAMES);
        let trials: Vec<_> = NAMES.iter().map(|n| libtest_mimic::Trial::test(*n, || Ok(()))).collect();
        NAMES.iter().zip(&trials).filter(|(_, t)| !libtest.is_filtered_out(t)).map(|(n, _)| *n).collect()
    }

    #[test]
    fn several_filters_select_as_libtest_does() {
        assert_eq!(kept(&[]), NAMES);
        assert_eq!(kept(&["ring"]), ["AllReduce::1K::ring", "Reduce::1K::ring"]);
        assert_eq!(kept(&["mpi", "html"]), ["AllReduce::1K::mpi", "report::html"]);
        assert_eq!(kept(&["--exact", "Reduce::1K::ring", "report::html"]), ["Reduce::1K::ring", "report::html"]);
        assert_eq!(kept(&["AllReduce", "html", "--skip", "mpi"]), ["AllReduce::1K::ring", "report::html"]);
        assert_eq!(kept(&["--test-threads", "2", "mpi", "--", "--odd"]), ["AllReduce::1K::mpi"]);
        let s = parse(&["a", "--format", "json", "b", "--skip=x", "--nocapture"]);
        assert_eq!(s.filters, ["a", "b"]);
        assert_eq!(s.args.skip, ["x"]);
        assert!(s.args.nocapture && s.args.format.is_some());
    }

    #[test]
    fn a_filter_given_on_purpose_that_matches_nothing_is_named_with_a_guess() {
        let refusal = |args: &[&str]| parse(args).refusal("trial", &NAMES);
        assert_eq!(refusal(&["AllReduce"]), None);
        assert_eq!(refusal(&["NoSuchCollective"]).as_deref(), Some("no trial matches `NoSuchCollective`"));
        assert_eq!(
            refusal(&["ring", "AllReduse::1K"]).as_deref(),
            Some("no trial matches `AllReduse::1K` (did you mean `AllReduce::1K`?)")
        );
        assert_eq!(
            refusal(&["--exact", "AllReduce::1K"]).as_deref(),
            Some("no trial is called `AllReduce::1K`"),
            "exact: a prefix is not a name"
        );
        assert_eq!(
            refusal(&["--exact", "Reduce::1K::rign"]).as_deref(),
            Some("no trial is called `Reduce::1K::rign` (did you mean `Reduce::1K::ring`?)")
        );
        assert_eq!(
            refusal(&["Reduce", "--skip", "1K"]).as_deref(),
            Some("--skip 1K leaves out every trial the filters select")
        );
        let s = parse(&["x", "--exact", "--skip", "y", "--ignored", "--test-threads", "3"]).without_selection();
        assert!(s.filters.is_empty() && s.args.skip.is_empty() && !s.args.exact && !s.args.ignored);
        assert_eq!(s.args.test_threads, Some(3));
    }
}
