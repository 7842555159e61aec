//! What a gtest filter that matched nothing should have been: the binary's
//! own test names (`--gtest_list_tests`), and those nearest the filter.
//! Parameterised tests are named `Prefix/Suite.Test/N`, so the filter a
//! person writes first (`Suite*`) matches none of them.

use crate::config::Program;
use crate::env_names::{PROFILE_FILE, PROFILE_INIT_ONCE, TRIAL_TOKEN};
use crate::error::{Error, Result};
use crate::exec::process::{Cmd, describe_status};
use crate::launch::TrialLaunch;
use crate::trial::{Ending, Execution};
use crate::workspace::Workspace;
use std::path::Path;
use std::time::Duration;

/// How long listing a binary's tests may take, whatever its processes do
/// with their output (a grandchild that keeps it open held a listing 6½ min).
const LIST_LIMIT: Duration = Duration::from_secs(60);
/// Most bytes of a listing kept (head and tail, as a trial's log): a
/// binary's names fit many times over; a 3 GB listing was read into memory whole.
const LIST_CAP: u64 = 4 << 20;
/// Most names a hint shows.
const SHOWN: usize = 5;

/// The hint appended to "the filter matched no test": the names that
/// `*<pattern>*` would match, else the nearest by edit distance; a note
/// when the binary could not list its tests.
pub(crate) fn hint(
    ws: &Workspace,
    supervisor: &Path,
    execution: &Execution,
    program: &Program,
    filter: &str,
) -> String {
    let launch = &execution.launch;
    let Some(binary) = program.binary.as_deref() else { return String::new() };
    let Some(cases) = launch.cases_dir.as_deref() else { return String::new() };
    match list(ws, supervisor, launch, cases) {
        Ok((names, cut)) => suggest(filter, &names, binary) + cut,
        Err(e) => format!("; its tests could not be listed: {e}"),
    }
}

/// The test names of the trial's binary, from its `--gtest_list_tests` run
/// as a trial is: under a supervisor (its cgroup, its stop of every process),
/// within [`LIST_LIMIT`], its output in a log capped at [`LIST_CAP`]
/// (`cases/<trial>/gtest-list.log`), its profile beside it, never among the
/// trial's. Also a note when the cap cut the listing.
fn list(ws: &Workspace, supervisor: &Path, launch: &TrialLaunch, cases: &Path) -> Result<(Vec<String>, &'static str)> {
    let cwd = launch.cmd.get_cwd().map(Path::to_path_buf).unwrap_or_default();
    let token = crate::exec::owner::new_token();
    let mut cmd = Cmd::new(&launch.binary).arg("--gtest_list_tests").cwd(&cwd);
    let mut env = Vec::with_capacity(launch.env.len());
    for (k, v) in &launch.env {
        let v = match k.as_str() {
            PROFILE_FILE => cases.join("gtest-list-%p.profraw").display().to_string(),
            TRIAL_TOKEN => token.clone(),
            _ => v.clone(),
        };
        cmd = cmd.env(k, &v);
        env.push((k.clone(), v));
    }
    let cmd = cmd.env_remove(PROFILE_INIT_ONCE);
    let log = cases.join("gtest-list.log");
    ws.write_new(&log, format!("$ {}\n", cmd.display()).as_bytes())?;
    let listing = TrialLaunch {
        cmd,
        env,
        timeout: LIST_LIMIT,
        log_cap: LIST_CAP,
        token,
        mark: None,
        cases_dir: None,
        ..launch.clone()
    };
    let finished = crate::trial::run(&listing, &log, supervisor, LIST_LIMIT, &|_| {})?;
    let failed = |why: String| Err(Error::new(format!("{why} (log: {})", log.display())));
    match &finished.ending {
        Ending::Exited(status) if status.success() => {}
        Ending::Exited(status) => return failed(describe_status(*status)),
        Ending::TimedOut { killed } => {
            return failed(format!("it ran past its {}s and was stopped ({killed})", LIST_LIMIT.as_secs()));
        }
        Ending::Interrupted { .. } => return failed("the run was interrupted".into()),
        Ending::SupervisorLost { why } => return failed(why.clone()),
    }
    let text = ws.read_lossy(&log);
    let listed = text.split_once('\n').map_or("", |(_, rest)| rest);
    let cut = if finished.output_cut > 0 { " (its listing was cut to its first and last 2 MiB)" } else { "" };
    Ok((parse_list(listed), cut))
}

/// Full test names from `--gtest_list_tests`: a suite line (`Ring/RingTest.`)
/// then its tests, indented (`  Fill/0  # GetParam() = 1`).
pub(crate) fn parse_list(listing: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut suite = "";
    for line in listing.lines() {
        let word = line.split('#').next().unwrap_or_default().trim();
        if word.is_empty() {
            continue;
        }
        if line.starts_with(' ') {
            names.push(format!("{suite}{word}"));
        } else {
            suite = word;
        }
    }
    names
}

/// What to tell the user: a filter with `*` around each pattern that would
/// match, with the names it would run; else the nearest names.
pub(crate) fn suggest(filter: &str, names: &[String], binary: &str) -> String {
    if names.is_empty() {
        return format!("; {binary} --gtest_list_tests lists no test");
    }
    let positive = filter.split('-').next().unwrap_or_default();
    let widened: Vec<String> =
        positive.split(':').filter(|p| !p.is_empty()).map(|p| format!("*{}*", p.trim_matches('*'))).collect();
    let wide = widened.join(":");
    let hits: Vec<&String> = names.iter().filter(|n| matches_filter(&wide, n)).collect();
    if !hits.is_empty() && wide != positive {
        return format!(
            "; `{wide}` matches {} of {binary}'s tests ({}): parameterised tests are named Prefix/Suite.Test/N",
            hits.len(),
            shown(hits.iter().map(|s| s.as_str()))
        );
    }
    let key = positive.replace(['*', '?'], "");
    let mut by_distance: Vec<(usize, &String)> = names.iter().map(|n| (distance(&key, n), n)).collect();
    by_distance.sort();
    format!("; the nearest of {binary}'s {} tests: {}", names.len(), shown(by_distance.iter().map(|(_, n)| n.as_str())))
}

fn shown<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = names.collect();
    let mut text = all.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if all.len() > SHOWN {
        text.push_str(&format!(", and {} more", all.len() - SHOWN));
    }
    text
}

/// gtest's filter: `:`-separated patterns, then `-` and the ones to leave
/// out; `*` any text, `?` one character.
pub(crate) fn matches_filter(filter: &str, name: &str) -> bool {
    let (positive, negative) = filter.split_once('-').unwrap_or((filter, ""));
    let any =
        |patterns: &str| patterns.split(':').filter(|p| !p.is_empty()).any(|p| glob(p.as_bytes(), name.as_bytes()));
    (positive.is_empty() || any(positive)) && !any(negative)
}

fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&pattern[1..], text) || (!text.is_empty() && glob(pattern, &text[1..])),
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p == t => glob(&pattern[1..], &text[1..]),
        _ => false,
    }
}

/// Levenshtein distance over bytes, ignoring case: how far a name is from
/// the filter's words.
fn distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.to_ascii_lowercase().into_bytes(), b.to_ascii_lowercase().into_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "Running main() from gmock_main.cc\nRingTest.\n  Push\n  PopEmpty\nRingSizes/RingParam.\n  Fill/0  # GetParam() = 1\n  Fill/1  # GetParam() = 8\n";

    #[test]
    fn lists_parameterised_names_whole() {
        let names = parse_list(LISTING.trim_start_matches("Running main() from gmock_main.cc\n"));
        assert_eq!(
            names,
            ["RingTest.Push", "RingTest.PopEmpty", "RingSizes/RingParam.Fill/0", "RingSizes/RingParam.Fill/1"]
        );
    }

    #[test]
    fn filters_match_as_gtest_matches() {
        assert!(matches_filter("RingTest.*", "RingTest.Push"));
        assert!(!matches_filter("RingParam*", "RingSizes/RingParam.Fill/0"));
        assert!(matches_filter("*RingParam*", "RingSizes/RingParam.Fill/0"));
        assert!(!matches_filter("*-RingTest.Push", "RingTest.Push"));
        assert!(matches_filter("A.?:RingTest.P*", "RingTest.PopEmpty"));
    }

    #[test]
    fn a_prefix_filter_is_pointed_at_the_parameterised_names() {
        let names = parse_list("RingTest.\n  Push\nRingSizes/RingParam.\n  Fill/0  # GetParam() = 1\n  Fill/1\n");
        let hint = suggest("RingParam*", &names, "ring_test");
        assert_eq!(
            hint,
            "; `*RingParam*` matches 2 of ring_test's tests (RingSizes/RingParam.Fill/0, RingSizes/RingParam.Fill/1): \
             parameterised tests are named Prefix/Suite.Test/N"
        );
        let hint = suggest("RingTset.Psh", &names, "ring_test");
        assert!(hint.starts_with("; the nearest of ring_test's 3 tests: RingTest.Push, "), "{hint}");
    }
}
