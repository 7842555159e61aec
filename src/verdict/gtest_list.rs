//! What a gtest filter that matched nothing should have been: the binary's
//! own test names (`--gtest_list_tests`), and those nearest the filter.
//! Parameterised tests are named `Prefix/Suite.Test/N`, so the filter a
//! person writes first (`Suite*`) matches none of them.

use crate::config::Program;
use crate::env_names::{PROFILE_FILE, PROFILE_INIT_ONCE};
use crate::exec::process::Cmd;
use crate::trial::Execution;
use std::path::Path;
use std::time::Duration;

/// How long listing a binary's tests may take.
const LIST_LIMIT: Duration = Duration::from_secs(60);
/// Most names a hint shows.
const SHOWN: usize = 5;

/// The hint appended to "the filter matched no test": the names that
/// `*<pattern>*` would match, else those it matches in another case, else
/// the nearest ([`suggest`]); a note
/// when the binary could not list its tests.
pub(crate) fn hint(execution: &Execution, program: &Program, filter: &str) -> String {
    let launch = &execution.launch;
    let Some(binary) = program.binary.as_deref() else { return String::new() };
    let cwd = launch.cmd.get_cwd().map(Path::to_path_buf).unwrap_or_default();
    let mut cmd = Cmd::new(&launch.binary).arg("--gtest_list_tests").cwd(&cwd).time_limit(LIST_LIMIT);
    for (k, v) in &launch.env {
        // Its profile goes beside the trial's report, never into the trial's
        // merged profiles, and never the working directory.
        let v = match (k.as_str(), &launch.cases_dir) {
            (PROFILE_FILE, Some(dir)) => dir.join("gtest-list-%p.profraw").display().to_string(),
            _ => v.clone(),
        };
        cmd = cmd.env(k, v);
    }
    let cmd = cmd.env_remove(PROFILE_INIT_ONCE);
    match cmd.read() {
        Ok(listing) => suggest(filter, &parse_list(&listing), binary),
        Err(e) => format!("; its tests could not be listed: {e}"),
    }
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
/// match, with the names it would run; else the same filter in the names'
/// own case (gtest's filter is case-sensitive); else the nearest names.
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
    if let Some(recased) = recased(&widened, names) {
        let hits: Vec<&String> = names.iter().filter(|n| matches_filter(&recased, n)).collect();
        return format!(
            "; gtest filters are case-sensitive: `{recased}` matches {} of {binary}'s tests ({})",
            hits.len(),
            shown(hits.iter().map(|s| s.as_str()))
        );
    }
    let key = positive.replace(['*', '?'], "");
    let mut ranked: Vec<((u8, usize), &String)> = names.iter().map(|n| (nearness(&key, n), n)).collect();
    ranked.sort();
    format!("; the nearest of {binary}'s {} tests: {}", names.len(), shown(ranked.iter().map(|(_, n)| n.as_str())))
}

/// The widened patterns spelt as the names spell them (`*AllReduce*` as
/// `*Allreduce*`), when one differs only in case from text a name holds;
/// `None` when none does, or one has a wildcard inside.
fn recased(widened: &[String], names: &[String]) -> Option<String> {
    let mut changed = false;
    let mut out = Vec::new();
    for pattern in widened {
        let word = pattern.trim_matches('*');
        if word.contains(['*', '?']) {
            return None;
        }
        let spelt = names.iter().find_map(|n| find_ignoring_case(n, word)).unwrap_or(word);
        changed |= spelt != word;
        out.push(format!("*{spelt}*"));
    }
    changed.then(|| out.join(":"))
}

/// The part of `name` that is `word` but for ASCII case.
fn find_ignoring_case<'a>(name: &'a str, word: &str) -> Option<&'a str> {
    if word.is_empty() {
        return None;
    }
    let at = name.to_ascii_lowercase().find(&word.to_ascii_lowercase())?;
    name.get(at..at + word.len())
}

/// How near `name` is to `key` (the filter without wildcards), lower
/// first, ignoring case: names that hold the key, then names whose suite
/// holds the key's suite (`Allreduce.Sum` → `AllreduceTest.Sum`), ranked by
/// their test's distance, then the rest by the edit distance of suite to
/// suite and test to test. A whole-name edit distance alone put
/// `LinuxTest.PCIDistance` before `AllreduceTest.*` for `AllReduce`.
fn nearness(key: &str, name: &str) -> (u8, usize) {
    let (key, lower) = (key.to_ascii_lowercase(), name.to_ascii_lowercase());
    if !key.is_empty() && lower.contains(&key) {
        return (0, lower.len() - key.len());
    }
    let (name_suite, name_test) = parts(&lower);
    let (key_suite, key_test) = match key.rsplit_once('.') {
        Some((suite, test)) => (suite, test),
        None => (key.as_str(), ""),
    };
    if !key_suite.is_empty() && name_suite.contains(key_suite) {
        return (1, distance(key_test, name_test));
    }
    if key_test.is_empty() {
        return (2, distance(key_suite, name_suite).min(distance(key_suite, name_test)));
    }
    (2, distance(key_suite, name_suite) + distance(key_test, name_test))
}

/// A full name's suite and test, without a parameterised name's prefix and
/// index: `Ring/RingParam.Fill/0` → (`RingParam`, `Fill`).
fn parts(name: &str) -> (&str, &str) {
    let (suite, test) = name.split_once('.').unwrap_or((name, ""));
    let suite = suite.rsplit('/').next().unwrap_or(suite);
    let test = test.split('/').next().unwrap_or(test);
    (suite, test)
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

    /// Names as RCCL's unit tests spell them (issue #49: the case typo
    /// `*AllReduce*` was told `LinuxTest.PCIDistance` first).
    const RCCL: &[&str] = &[
        "LinuxTest.PCIDistance",
        "LinuxTest.Cpuset",
        "ArgCheck.Root",
        "AllreduceTest.SinglePointer",
        "AllreduceTest.InPlace",
        "AllreduceRing/AllreduceTest.Sum/0",
        "AllreduceRing/AllreduceTest.Sum/1",
        "BroadcastTest.Sum",
    ];

    #[test]
    fn a_filter_in_the_wrong_case_is_told_the_names_own_case() {
        let names: Vec<String> = RCCL.iter().map(ToString::to_string).collect();
        let hint = suggest("*AllReduce*", &names, "rccl-UnitTests");
        assert_eq!(
            hint,
            "; gtest filters are case-sensitive: `*Allreduce*` matches 4 of rccl-UnitTests's tests \
             (AllreduceTest.SinglePointer, AllreduceTest.InPlace, AllreduceRing/AllreduceTest.Sum/0, AllreduceRing/AllreduceTest.Sum/1)"
        );
        let hint = suggest("allreducetest.*-*Sum*", &names, "t");
        assert!(hint.starts_with("; gtest filters are case-sensitive: `*AllreduceTest.*` matches 4 "), "{hint}");
    }

    #[test]
    fn nearest_names_share_the_suite_or_hold_the_words_before_edit_distance() {
        let names: Vec<String> = RCCL.iter().map(ToString::to_string).collect();
        // The suite misspelt: its tests, not short names, come first.
        let hint = suggest("AllRedcue*", &names, "t");
        let shown: Vec<&str> = hint.split(": ").nth(1).unwrap().split(", ").collect();
        assert!(shown[..4].iter().all(|n| n.contains("AllreduceTest.")), "{hint}");
        // A suite the name holds, and the test's own name.
        let hint = suggest("Allreduce.Sum", &names, "t");
        assert!(
            hint.starts_with(
                "; the nearest of t's 8 tests: AllreduceRing/AllreduceTest.Sum/0, AllreduceRing/AllreduceTest.Sum/1, "
            ),
            "{hint}"
        );
        assert_eq!(nearness("allreduce", "AllreduceTest.InPlace").0, 0);
        assert!(nearness("pcidist", "LinuxTest.PCIDistance") < nearness("pcidist", "ArgCheck.Root"));
        assert!(
            nearness("Linux.PCIDistanse", "LinuxTest.PCIDistance") < nearness("Linux.PCIDistanse", "LinuxTest.Cpuset")
        );
    }
}
