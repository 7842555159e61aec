//! `ccl-coverage who-covers FILE:LINE`: the trials that executed a line,
//! read from the workspace's `report/attribution.json` (no llvm-cov run).
//! `FILE` is the source path as the report has it, or its end (`src/init.cc`).
//! On a line with device branches (NVIDIA's), each branch follows: the trials
//! whose own kernel records took it, and those whose records did not.
//! Exit status: 0 when some trial covers the line, 1 when none does (or no
//! code is there), 2 on an error.

use crate::error::{Error, Result};
use crate::report::attribution::{Attribution, CoveredBy};
use std::process::ExitCode;

pub fn main(args: &[String]) -> ExitCode {
    match run(args) {
        Ok((text, covered)) => {
            crate::show!("{text}");
            if covered { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            crate::say!("who-covers: {e}");
            ExitCode::from(2)
        }
    }
}

/// `FILE:LINE` split at its last colon.
fn parse_query(query: &str) -> Result<(&str, u32)> {
    query
        .rsplit_once(':')
        .and_then(|(file, line)| Some((file, line.parse::<u32>().ok().filter(|l| *l > 0)?)))
        .filter(|(file, _)| !file.is_empty())
        .ok_or_else(|| Error::new(format!("{query:?} is not FILE:LINE (e.g. ccl/src/init.cc:42)")))
}

fn run(args: &[String]) -> Result<(String, bool)> {
    let [query] = args else {
        return Err(Error::new(
            "usage: ccl-coverage who-covers FILE:LINE (reads CCL_COV_CONFIG and CCL_COV_WORKSPACE)",
        ));
    };
    let (file, line) = parse_query(query)?;
    let ctx = crate::context::Context::from_env(crate::reporter::Entry::Cli)?;
    // A line number is of the sources now; the attribution, of the sources built.
    let manifest = crate::build::cache::BuildManifest::read_in(&ctx.workspace).ok();
    if let Some(changed) =
        manifest.as_ref().and_then(|m| crate::build::cache::sources_changed(m, ctx.config(), ctx.entry))
    {
        return Err(Error::new(format!("refused: {changed}")));
    }
    // A `<build>/…` file of the report is read from the build.
    let names = manifest.as_ref().map(crate::coverage::source_names::SourceNames::of).unwrap_or_default();
    let path = ctx.workspace.report_dir().join("attribution.json");
    let text = ctx.workspace.read_to_string(&path).map_err(|e| {
        Error::new(format!("{e}; run `{}` (its report::attribution step) on this workspace first", ctx.entry.report()))
    })?;
    let attribution: Attribution = serde_json::from_str(&text)
        .map_err(|e| Error::new(format!("{} is not an attribution file ({e}); rerun the report", path.display())))?;
    let lines_in = |path: &str| std::fs::read(names.path_of(path)).ok().map(|text| line_count(&text));
    answer(&attribution, file, line, &lines_in)
}

/// How many lines `text` has (a last line without its newline counts).
fn line_count(text: &[u8]) -> usize {
    let newlines = memchr::memchr_iter(b'\n', text).count();
    if text.last().is_some_and(|&b| b != b'\n') { newlines + 1 } else { newlines }
}

/// `lines_in`: how many lines the source file has, when it can be read.
fn answer(
    attribution: &Attribution,
    file: &str,
    line: u32,
    lines_in: &dyn Fn(&str) -> Option<usize>,
) -> Result<(String, bool)> {
    let total = attribution.trials.len();
    let (path, covered_by) = attribution.who_covers(file, line)?;
    let (mut text, covered) = lines_answer(path, line, covered_by, total, lines_in);
    for b in attribution.device_branches_at(path, line)? {
        for (outcome, names) in [("taken", &b.taken), ("not taken", &b.not_taken)] {
            text.push_str(&format!("device branch {} {outcome} in {} of {total} trials", b.branch, names.len()));
            text.push_str(if names.is_empty() { "\n" } else { ":\n" });
            for name in names {
                text.push_str(&format!("{name}\n"));
            }
        }
    }
    Ok((text, covered))
}

/// The answer for the line itself.
fn lines_answer(
    path: &str,
    line: u32,
    covered_by: CoveredBy,
    total: usize,
    lines_in: &dyn Fn(&str) -> Option<usize>,
) -> (String, bool) {
    match (path, covered_by) {
        (path, CoveredBy::NotInstrumented) => match lines_in(path) {
            Some(n) if line as usize > n => (format!("{path}:{line}: past the end of the file ({n} lines)\n"), false),
            _ => (format!("{path}:{line}: no code here (llvm-cov instruments nothing on this line)\n"), false),
        },
        (path, CoveredBy::Trials(names)) if names.is_empty() => {
            (format!("{path}:{line}: covered by none of the {total} trials\n"), false)
        }
        (path, CoveredBy::Trials(names)) => {
            let mut text = format!("{path}:{line}: covered by {} of {total} trials:\n", names.len());
            for name in names {
                text.push_str(&format!("{name}\n"));
            }
            (text, true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov::parse_lcov;
    use crate::report::attribution::TrialCoverage;
    use crate::report::elements::Universe;

    #[test]
    fn queries_are_file_colon_line_and_answers_say_how_many() {
        assert_eq!(parse_query("a/b.cc:12").unwrap(), ("a/b.cc", 12));
        assert_eq!(parse_query("c:/x.cc:3").unwrap(), ("c:/x.cc", 3));
        for bad in ["a.cc", "a.cc:", ":3", "a.cc:0", "a.cc:-1", "a.cc:x"] {
            assert!(parse_query(bad).is_err(), "{bad}");
        }
        let lcov = parse_lcov("SF:/s/a.cc\nDA:1,1\nDA:2,0\nend_of_record\n", "t").unwrap();
        let universe = Universe::of(&lcov).unwrap();
        let t = TrialCoverage {
            name: "A::1K::mpi".into(),
            slug: "A.1K.mpi".into(),
            duration_s: 1.0,
            covered: universe.bits(&crate::coverage::lcov::Covered::of(&lcov).unwrap()).unwrap(),
            regions: (0, 0),
        };
        let att = Attribution::new(&universe, &[t]);
        let four = |_: &str| Some(4);
        assert_eq!(
            answer(&att, "a.cc", 1, &four).unwrap(),
            ("/s/a.cc:1: covered by 1 of 1 trials:\nA::1K::mpi\n".into(), true)
        );
        assert_eq!(answer(&att, "a.cc", 2, &four).unwrap().0, "/s/a.cc:2: covered by none of the 1 trials\n");
        assert!(answer(&att, "a.cc", 3, &four).unwrap().0.contains("no code here"));
        assert_eq!(
            answer(&att, "a.cc", 99999, &four).unwrap().0,
            "/s/a.cc:99999: past the end of the file (4 lines)\n"
        );
        assert!(answer(&att, "a.cc", 99999, &|_| None).unwrap().0.contains("no code here"), "unreadable: no claim");
        assert!(answer(&att, "b.cc", 1, &four).is_err());
        assert_eq!((line_count(b"a\nb\n"), line_count(b"a\nb"), line_count(b"")), (2, 2, 0));
    }

    /// The printed answer on each marked branch line of the H200 capture (the attribution read
    /// back from its JSON, as `run` reads it): the line's own answer, then for each device
    /// branch `device branch <k> taken|not taken in <n> of <total> trials`, followed by exactly
    /// those n trials; over the line's branches, each outcome's trials are the marker's.
    #[test]
    fn the_printed_answer_names_the_trials_of_each_device_branch_outcome() {
        use crate::device::nvidia::sass::fixture_markers::{Trial, branch_marker, marked};
        use std::collections::BTreeSet;
        let (lines, universe, trials) = crate::report::capture_branch_tests::attributed_capture();
        let slugs: Vec<&str> = trials.iter().map(|t| t.slug.as_str()).collect();
        let mut attribution = Attribution::new(&universe, &trials);
        attribution.add_device_branches(&slugs, &lines);
        let attribution: Attribution = serde_json::from_str(&serde_json::to_string(&attribution).unwrap()).unwrap();
        let total = trials.len();
        let heading = regex::Regex::new(r"^device branch (\d+) (taken|not taken) in (\d+) of (\d+) trials:?$").unwrap();
        let mut wrong = Vec::new();
        for (file, line, marker) in marked("// cov-branch:") {
            let (text, _) = answer(&attribution, &format!("ccl-cuda/src/device/{file}"), line, &|_| None).unwrap();
            let mut printed = text.lines().peekable();
            let head = printed.next().unwrap_or_default();
            if !head.contains(&format!("ccl-cuda/src/device/{file}:{line}: covered by ")) {
                wrong.push(format!("{file}:{line}: the line's own answer comes first: {text}"));
            }
            // The trials that ran the line.
            while printed.next_if(|l| !heading.is_match(l)).is_some() {}
            let mut seen: [BTreeSet<String>; 2] = Default::default();
            let mut branches = Vec::new();
            while let Some(block) = printed.next() {
                let Some(c) = heading.captures(block) else {
                    wrong.push(format!("{file}:{line}: {block:?} is no branch heading: {text}"));
                    break;
                };
                let names: Vec<&str> = std::iter::from_fn(|| printed.next_if(|l| !heading.is_match(l))).collect();
                let outcome = usize::from(&c[2] == "not taken");
                if c[3].parse::<usize>() != Ok(names.len()) || c[4].parse::<usize>() != Ok(total) {
                    wrong.push(format!("{file}:{line}: {block:?} heads {names:?}"));
                }
                if block.ends_with(':') == names.is_empty() {
                    wrong.push(format!("{file}:{line}: {block:?}: a colon only before names"));
                }
                seen[outcome].extend(names.iter().map(ToString::to_string));
                branches.push((c[1].to_string(), outcome));
            }
            let expected_order: Vec<(String, usize)> =
                (0..branches.len() / 2).flat_map(|k| [(k.to_string(), 0), (k.to_string(), 1)]).collect();
            if branches.is_empty() || branches != expected_order {
                wrong.push(format!("{file}:{line}: branches printed as {branches:?}"));
            }
            let (taken, not_taken) = branch_marker(&marker);
            for (outcome, expr) in [(0, taken), (1, not_taken)] {
                let expected: BTreeSet<String> =
                    slugs.iter().filter(|slug| Trial::from_slug(slug).holds(expr)).map(ToString::to_string).collect();
                if seen[outcome] != expected {
                    wrong.push(format!(
                        "{file}:{line} outcome {outcome}: printed {:?}, the marker ({expr}) {expected:?}",
                        seen[outcome]
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
