//! The verdict of a trial, from its exit **and** its output. Upstream trusts
//! the exit code alone; a perf binary that reports wrong data but exits 0
//! (older nccl-tests did) must still fail, and a run that stops before its
//! summary line did not test what it was asked to.

pub(crate) mod gtest_list;
pub(crate) mod output;
pub(crate) mod perf;

use crate::exec::process::{describe_status, signal_name};
use crate::trial::{Ending, Finished};
use crate::verdict::output::GtestLines;
use crate::verdict::perf::PerfReport;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum Status {
    Passed,
    Failed,
    Timeout,
    /// Stopped because the run was interrupted (Ctrl-C, SIGTERM).
    Interrupted,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "PASSED",
            Status::Failed => "FAILED",
            Status::Timeout => "TIMEOUT",
            Status::Interrupted => "INTERRUPTED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) status: Status,
    /// Why it did not pass; empty when it passed.
    pub(crate) reason: String,
}

pub(crate) fn judge(finished: &Finished, perf: &PerfReport, timeout: Duration) -> Verdict {
    let fail = |reason: String| Verdict { status: Status::Failed, reason };
    let wrong_data = || match &perf.out_of_bounds {
        Some(oob) if !oob.ok || oob.count > 0 => Some(format!("# Out of bounds values : {} FAILED", oob.count)),
        _ if perf.wrong_rows() > 0 => Some(format!("{} result rows have a nonzero #wrong column", perf.wrong_rows())),
        _ => None,
    };
    if let Some(v) = stopped(finished, timeout) {
        return v;
    }
    let Ending::Exited(status) = finished.ending else { return fail("no exit status".into()) };
    if !status.success() {
        let detail = wrong_data().map(|w| format!(": {w}")).unwrap_or_default();
        return fail(format!("{}{}{detail}", describe_status(status), signal_hint(status.code())));
    }
    if let Some(wrong) = wrong_data() {
        return fail(format!("exit status 0, but the output reports wrong results: {wrong}"));
    }
    if perf.out_of_bounds.is_none() && perf.rows.is_empty() {
        // A silent run (output lost, or a rank that never got to print) must
        // not read like a table cut short.
        return fail("exit status 0, but the output has no perf table (no result rows, no `# Out of bounds values` line): the test reported nothing".into());
    }
    if perf.out_of_bounds.is_none() {
        return fail("exit status 0, but the output has no `# Out of bounds values` line: the test did not finish its result table".into());
    }
    if finished.survivors > 0 {
        return fail(format!("{} processes of the trial could not be killed", finished.survivors));
    }
    Verdict { status: Status::Passed, reason: String::new() }
}

/// A plain program's verdict: its exit status alone (and every process of
/// it gone), whatever it printed.
pub(crate) fn judge_plain(finished: &Finished, timeout: Duration) -> Verdict {
    let fail = |reason: String| Verdict { status: Status::Failed, reason };
    if let Some(v) = stopped(finished, timeout) {
        return v;
    }
    let Ending::Exited(status) = finished.ending else { return fail("no exit status".into()) };
    if !status.success() {
        return fail(format!("{}{}", describe_status(status), signal_hint(status.code())));
    }
    if finished.survivors > 0 {
        return fail(format!("{} processes of the trial could not be killed", finished.survivors));
    }
    Verdict { status: Status::Passed, reason: String::new() }
}

/// A timed-out or interrupted trial's verdict, whatever kind it is.
fn stopped(finished: &Finished, timeout: Duration) -> Option<Verdict> {
    match &finished.ending {
        Ending::TimedOut { killed } => Some(Verdict {
            status: Status::Timeout,
            reason: format!("TIMEOUT after {}s (stopped with {killed})", timeout.as_secs()),
        }),
        Ending::Interrupted { signal, killed } => Some(Verdict {
            status: Status::Interrupted,
            reason: format!(
                "INTERRUPTED by {} after {:.1}s (stopped with {killed})",
                signal_name(*signal),
                finished.duration.as_secs_f64()
            ),
        }),
        Ending::SupervisorLost { why } => Some(Verdict {
            status: Status::Failed,
            reason: format!(
                "the trial's end is unknown: {why}; its processes were killed by the harness after {:.1}s",
                finished.duration.as_secs_f64()
            ),
        }),
        Ending::Exited(_) => None,
    }
}

/// One test case a trial ran (a gtest test, a pytest item).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Case {
    /// `Suite.Test` (gtest), `module.Class::test` (pytest).
    pub(crate) name: String,
    pub(crate) status: CaseStatus,
    pub(crate) time_s: f64,
    /// The failure's text; empty when it passed.
    #[serde(default)]
    pub(crate) message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum CaseStatus {
    Passed,
    Failed,
    Skipped,
}

/// A gtest report as it was written: JSON (`--gtest_output=json`, upstream
/// RCCL tests) or XML (`--gtest_output=xml`, a config's gtest programs).
pub(crate) enum GtestReport<'a> {
    Json(&'a str),
    Xml(&'a str),
}

/// A googletest trial: its exit status and its reports (one per process:
/// MPI ranks each write one). A filter that matches no test fails; a crash
/// names the test that was running.
pub(crate) fn judge_gtest(
    finished: &Finished,
    reports: &[GtestReport<'_>],
    output: &GtestLines,
    filter: Option<&str>,
    timeout: Duration,
) -> (Verdict, Vec<Case>) {
    let mut cases: Vec<Case> = Vec::new();
    // MPI ranks write their reports into one folder at the same moment, and
    // gtest's choice of a free file name races: one rank's report may be
    // clobbered, or both torn into one unreadable file. The readable ones
    // decide; with none, gtest's own result lines in the output do.
    let mut readable = 0;
    let parsed: Vec<Vec<Case>> = reports
        .iter()
        .filter_map(|report| match report {
            GtestReport::Json(text) => gtest_cases(text),
            GtestReport::Xml(text) => gtest_xml_cases(text),
        })
        .collect();
    let from_output = if parsed.is_empty() { output.cases.clone() } else { Vec::new() };
    for found in parsed.into_iter().chain((!from_output.is_empty()).then_some(from_output)) {
        readable += 1;
        for case in found {
            match cases.iter_mut().find(|c| c.name == case.name) {
                // A case fails when it fails on any rank.
                Some(seen) if case.status == CaseStatus::Failed => *seen = case,
                Some(_) => {}
                None => cases.push(case),
            }
        }
    }
    let fail = |reason: String| Verdict { status: Status::Failed, reason };
    let running = output.running();
    if let Some(mut v) = stopped(finished, timeout) {
        if let Some(test) = &running {
            v.reason.push_str(&format!(" while running {test}"));
        }
        return (v, cases);
    }
    let Ending::Exited(status) = &finished.ending else { return (fail("no exit status".into()), cases) };
    let failed: Vec<&str> = cases.iter().filter(|c| c.status == CaseStatus::Failed).map(|c| c.name.as_str()).collect();
    if !status.success() {
        let what = format!("{}{}", describe_status(*status), signal_hint(status.code()));
        let reason = if !failed.is_empty() {
            format!("{what}: {} failed: {}", plural(failed.len(), "test"), failed.join(", "))
        } else if let Some(test) = running {
            format!("{what}: crashed while running {test}")
        } else if reports.is_empty() {
            format!("{what}, and it wrote no gtest report (it stopped before or without running a test)")
        } else {
            what
        };
        return (fail(reason), cases);
    }
    if !failed.is_empty() {
        return (
            fail(format!("exit status 0, but {} failed: {}", plural(failed.len(), "test"), failed.join(", "))),
            cases,
        );
    }
    if readable == 0 {
        return (fail("exit status 0, but no readable gtest report was written".into()), cases);
    }
    if cases.is_empty() {
        let reason = match filter {
            Some(f) => format!("the filter `{f}` matched no test (gtest ran nothing)"),
            None => "the binary has no tests (gtest ran nothing)".into(),
        };
        return (fail(reason), cases);
    }
    // A trial whose every case was skipped tested nothing: it passed only
    // because gtest exits 0 for a skip.
    if cases.iter().all(|c| c.status == CaseStatus::Skipped) {
        let skipped: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        return (
            fail(format!(
                "no test ran: the {} it started {} skipped ({})",
                plural(skipped.len(), "test"),
                if skipped.len() == 1 { "was" } else { "were" },
                skipped.join(", ")
            )),
            cases,
        );
    }
    if finished.survivors > 0 {
        return (fail(format!("{} processes of the trial could not be killed", finished.survivors)), cases);
    }
    (Verdict { status: Status::Passed, reason: String::new() }, cases)
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

/// The cases of a gtest JSON report (`--gtest_output=json`); `None` if it is
/// not one. Tests that did not run (disabled, filtered) are left out.
fn gtest_cases(text: &str) -> Option<Vec<Case>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut out = Vec::new();
    for suite in v.get("testsuites")?.as_array()? {
        let suite_name = suite.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        for t in suite.get("testsuite").and_then(|t| t.as_array()).into_iter().flatten() {
            if t.get("status").and_then(|s| s.as_str()) == Some("NOTRUN") {
                continue;
            }
            let name = t.get("name").and_then(|n| n.as_str()).unwrap_or_default();
            let failures: Vec<&str> = t
                .get("failures")
                .and_then(|f| f.as_array())
                .into_iter()
                .flatten()
                .filter_map(|f| f.get("failure").and_then(|m| m.as_str()))
                .collect();
            let status = if !failures.is_empty() {
                CaseStatus::Failed
            } else if t.get("result").and_then(|r| r.as_str()) == Some("SKIPPED") {
                CaseStatus::Skipped
            } else {
                CaseStatus::Passed
            };
            let time_s = t
                .get("time")
                .and_then(|s| s.as_str())
                .and_then(|s| s.trim_end_matches('s').parse::<f64>().ok())
                .unwrap_or_default();
            out.push(Case { name: format!("{suite_name}.{name}"), status, time_s, message: failures.join("\n") });
        }
    }
    Some(out)
}

/// The cases of a gtest XML report (`--gtest_output=xml`): `Suite.Test` as
/// gtest names them (`Ring/RingTest.Fill/0`); `None` if it is not one (a
/// torn or clobbered file). Tests that did not run are left out.
fn gtest_xml_cases(text: &str) -> Option<Vec<Case>> {
    let trimmed = text.trim_end();
    // gtest writes the file whole at its end; one cut short was torn.
    if !trimmed.ends_with("</testsuites>") {
        return None;
    }
    Some(xml_cases(trimmed, CaseNames::Gtest))
}

/// A `ctest` trial: its exit status and its JUnit XML (`--output-junit`). A
/// filter that matches no test fails (`--no-tests=error`, and no case).
pub(crate) fn judge_ctest(
    finished: &Finished,
    junit: Option<&str>,
    filter: Option<&str>,
    timeout: Duration,
) -> (Verdict, Vec<Case>) {
    let cases = junit.map(|x| xml_cases(x, CaseNames::Ctest)).unwrap_or_default();
    if let Some(v) = stopped(finished, timeout) {
        return (v, cases);
    }
    let fail = |reason: String| Verdict { status: Status::Failed, reason };
    let Ending::Exited(status) = &finished.ending else { return (fail("no exit status".into()), cases) };
    let failed: Vec<&str> = cases.iter().filter(|c| c.status == CaseStatus::Failed).map(|c| c.name.as_str()).collect();
    if !failed.is_empty() {
        let what = describe_status(*status);
        return (fail(format!("{what}: {} failed: {}", plural(failed.len(), "test"), failed.join(", "))), cases);
    }
    if cases.is_empty() {
        let what = match filter {
            Some(f) => format!("the filter `{f}` (ctest -R) matched no test (ctest ran nothing)"),
            None => "ctest found no test (is tests.bin_dir the build folder that holds CTestTestfile.cmake?)".into(),
        };
        let status = if status.success() { String::new() } else { format!(" ({})", describe_status(*status)) };
        return (fail(format!("{what}{status}")), cases);
    }
    if !status.success() {
        return (fail(format!("{} (ctest: an error outside the tests)", describe_status(*status))), cases);
    }
    if junit.is_none() {
        return (fail("exit status 0, but ctest wrote no JUnit report".into()), cases);
    }
    if finished.survivors > 0 {
        return (fail(format!("{} processes of the trial could not be killed", finished.survivors)), cases);
    }
    (Verdict { status: Status::Passed, reason: String::new() }, cases)
}

/// A pytest trial: its exit status and its JUnit XML. Exit 5 (nothing
/// collected) fails.
pub(crate) fn judge_pytest(finished: &Finished, junit: Option<&str>, timeout: Duration) -> (Verdict, Vec<Case>) {
    let cases = junit.map(|x| xml_cases(x, CaseNames::Pytest)).unwrap_or_default();
    if let Some(v) = stopped(finished, timeout) {
        return (v, cases);
    }
    let fail = |reason: String| Verdict { status: Status::Failed, reason };
    let Ending::Exited(status) = &finished.ending else { return (fail("no exit status".into()), cases) };
    let failed: Vec<&str> = cases.iter().filter(|c| c.status == CaseStatus::Failed).map(|c| c.name.as_str()).collect();
    if status.code() == Some(5) {
        return (fail("exit status 5: pytest collected no tests".into()), cases);
    }
    if !failed.is_empty() {
        return (
            fail(format!(
                "{}: {} failed: {}",
                describe_status(*status),
                plural(failed.len(), "test"),
                failed.join(", ")
            )),
            cases,
        );
    }
    if !status.success() {
        return (fail(format!("{} (pytest: an internal, usage or collection error)", describe_status(*status))), cases);
    }
    if junit.is_none() {
        return (fail("exit status 0, but pytest wrote no JUnit XML report".into()), cases);
    }
    if finished.survivors > 0 {
        return (fail(format!("{} processes of the trial could not be killed", finished.survivors)), cases);
    }
    (Verdict { status: Status::Passed, reason: String::new() }, cases)
}

/// How a runner's JUnit-style XML names a case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CaseNames {
    /// `classname::name` (`t::test_a`).
    Pytest,
    /// `classname.name`, as gtest prints it; `status="notrun"` (disabled)
    /// and `result="skipped"` read.
    Gtest,
    /// `name`, as `ctest -R` matches it; `status="notrun"` is skipped.
    Ctest,
}

/// The `<testcase>` elements of a JUnit-style XML file: the case's name as
/// its runner gives it, time, and whether a `<failure>`, `<error>` or
/// `<skipped>` child is there (with the failure's message). Read up to the
/// first malformed element: pytest writes the file at its end, and a torn
/// file still names the cases before the tear.
fn xml_cases(xml: &str, names: CaseNames) -> Vec<Case> {
    use quick_xml::events::{BytesStart, Event};
    let attr = |e: &BytesStart<'_>, key: &str| -> String {
        e.attributes()
            .flatten()
            .find(|a| a.key.as_ref() == key)
            .and_then(|a| a.normalized_value(quick_xml::XmlVersion::Implicit1_0).ok().map(std::borrow::Cow::into_owned))
            .unwrap_or_default()
    };
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut open: Option<Case> = None;
    loop {
        let (event, empty) = match reader.read_event() {
            Ok(Event::Start(e)) => (e, false),
            Ok(Event::Empty(e)) => (e, true),
            Ok(Event::End(e)) if e.name().as_ref() == "testcase" => {
                out.extend(open.take());
                continue;
            }
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => continue,
        };
        match event.name().as_ref() {
            "testcase" => {
                out.extend(open.take());
                let (classname, name) = (attr(&event, "classname"), attr(&event, "name"));
                let notrun = attr(&event, "status") == "notrun";
                if names == CaseNames::Gtest && notrun {
                    // Disabled: gtest lists it, it did not run.
                    if !empty {
                        reader.read_to_end(event.name()).ok();
                    }
                    continue;
                }
                let status = match attr(&event, "result").as_str() {
                    "skipped" => CaseStatus::Skipped,
                    _ if notrun => CaseStatus::Skipped,
                    _ => CaseStatus::Passed,
                };
                let name = match names {
                    _ if classname.is_empty() => name,
                    CaseNames::Pytest => format!("{classname}::{name}"),
                    CaseNames::Gtest => format!("{classname}.{name}"),
                    CaseNames::Ctest => name,
                };
                let case = Case {
                    name,
                    status,
                    time_s: attr(&event, "time").parse().unwrap_or_default(),
                    message: String::new(),
                };
                if empty { out.push(case) } else { open = Some(case) }
            }
            "failure" | "error" => {
                if let Some(case) = open.as_mut().filter(|c| c.status != CaseStatus::Failed) {
                    case.status = CaseStatus::Failed;
                    case.message = attr(&event, "message");
                }
            }
            "skipped" => {
                if let Some(case) = open.as_mut().filter(|c| c.status == CaseStatus::Passed) {
                    case.status = CaseStatus::Skipped;
                }
            }
            _ => {}
        }
    }
    out.extend(open);
    out
}

/// `mpirun`, `srun` and shells report a rank killed by signal N as exit
/// status 128 + N: name the signal, or an MPI abort reads like any exit code.
fn signal_hint(code: Option<i32>) -> String {
    match code {
        Some(code) if code > 128 && signal_name(code - 128) != "signal" => {
            format!(" (128 + {}, as launchers report a process killed by {})", code - 128, signal_name(code - 128))
        }
        _ => String::new(),
    }
}

/// A trial whose processes outlived its main process does not pass: they
/// were killed, and its result names how many (`leftovers`). A failed
/// verdict keeps its own reason.
pub(crate) fn judge_leftovers(verdict: Verdict, leftovers: usize) -> Verdict {
    if verdict.status != Status::Passed || leftovers == 0 {
        return verdict;
    }
    Verdict {
        status: Status::Failed,
        reason: format!(
            "the trial's main process exited 0, but {leftovers} of its processes were still running and were killed (a daemon or a process left behind)"
        ),
    }
}

/// What a trial left for coverage: enough to tell whether coverage was lost.
#[derive(Debug, Clone)]
pub(crate) struct ProfileEvidence<'a> {
    /// Processes that wrote their raw profiles into the trial's profile
    /// folder, one for each module (`profiles::writers`).
    pub(crate) writers: usize,
    /// Processes that wrote profiles for only some modules.
    pub(crate) partial: &'a [String],
    /// Profiles in the folder not named as the harness's `LLVM_PROFILE_FILE`
    /// says (`profiles::Writers::unmatched`).
    pub(crate) unmatched: &'a [String],
    /// Profiles in the folder that were not the trial's own, moved to
    /// quarantine (`profiles::Origin`).
    pub(crate) foreign: &'a [String],
    /// The name the harness gave the profiles (`coverage.profile_pattern`,
    /// with the attempt's mark).
    pub(crate) pattern: &'a str,
    /// Processes of the instrumented program that should each have written one.
    pub(crate) expected: usize,
    pub(crate) dir: &'a std::path::Path,
    pub(crate) merge_error: Option<&'a str>,
    /// Raw profiles set aside as unreadable.
    pub(crate) quarantined: &'a [String],
    /// What the profile runtime printed when it failed to write (`LLVM Profile Error: …`).
    pub(crate) runtime_errors: &'a [String],
    /// Bytes free on the profile folder's filesystem, when known.
    pub(crate) free_bytes: Option<u64>,
}

/// The first few of `names`, and how many more.
fn preview(names: &[String]) -> String {
    let shown = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(3) {
        0 => shown,
        more => format!("{shown}, and {more} more"),
    }
}

/// Under coverage, a trial that lost coverage does not pass: its profiles
/// were not written, some rank's is missing, they could not be merged, or
/// the profile runtime said a write failed.
/// A failed verdict keeps its own reason.
pub(crate) fn judge_coverage(verdict: Verdict, evidence: &ProfileEvidence) -> Verdict {
    if verdict.status != Status::Passed {
        return verdict;
    }
    let dir = evidence.dir.display();
    let reason = if let (0, Some(error)) = (evidence.writers, evidence.merge_error) {
        // Nothing could be counted: why is the whole story.
        format!("coverage lost: {error}")
    } else if evidence.writers == 0 && !evidence.unmatched.is_empty() {
        format!(
            "coverage lost: the trial passed and wrote {} coverage profile(s) in {dir} ({}), but not under the name the harness gave them (LLVM_PROFILE_FILE={dir}/{}): something in the trial set LLVM_PROFILE_FILE itself, so its processes cannot be counted",
            evidence.unmatched.len(),
            preview(evidence.unmatched),
            evidence.pattern
        )
    } else if evidence.writers == 0 && !evidence.foreign.is_empty() {
        format!(
            "coverage lost: the trial passed but wrote no coverage profile under the name the harness gave it (LLVM_PROFILE_FILE={dir}/{}); the {} profile(s) in {dir} ({}) do not carry that name, so they were moved to quarantine as not its own, not merged: something in the trial set LLVM_PROFILE_FILE itself, or another process put them there",
            evidence.pattern,
            evidence.foreign.len(),
            preview(evidence.foreign)
        )
    } else if evidence.writers == 0 && !evidence.quarantined.is_empty() {
        // Its only profiles were unusable: that, not a missing write, is the cause.
        format!(
            "coverage lost: none of its {} raw profile(s) in {dir} could be merged; each was moved to quarantine: {}",
            evidence.quarantined.len(),
            evidence.quarantined.join(", ")
        )
    } else if evidence.writers == 0 {
        format!(
            "coverage lost: the trial passed but wrote no coverage profile in {dir} (a process that ends through _exit writes none; is the instrumented library the one loaded? check LD_LIBRARY_PATH)"
        )
    } else if evidence.writers < evidence.expected {
        let mut reason = format!(
            "coverage lost: only {} of {} ranks wrote a coverage profile in {dir} (a rank that ends through _exit or is killed writes none)",
            evidence.writers, evidence.expected
        );
        if !evidence.partial.is_empty() {
            reason.push_str(&format!(
                "; written for only some of the instrumented modules (a plugin unloaded early still writes its own): {}",
                evidence.partial.join(", ")
            ));
        }
        reason
    } else if let Some(error) = evidence.merge_error {
        format!("coverage lost: its profiles could not be merged: {error}")
    } else if !evidence.quarantined.is_empty() {
        format!(
            "coverage lost: {} of its raw profiles were unreadable and moved to quarantine: {}",
            evidence.quarantined.len(),
            evidence.quarantined.join(", ")
        )
    } else if !evidence.runtime_errors.is_empty() {
        // Every process left a file, but one of them is not what it claims:
        // with `%m` in the pattern, compiler-rt's device write
        // (`__llvm_write_custom_profile`) can take the host's name, and the
        // host's own write then fails (docs/device-coverage.md).
        format!(
            "coverage lost: a profile write failed although every rank left a profile in {dir}, so some of them may hold other data than their names say"
        )
    } else {
        return verdict;
    };
    let mut reason = reason;
    if evidence.free_bytes == Some(0) {
        reason.push_str(&format!("; the filesystem of {dir} is full (no space left on device)"));
    }
    if !evidence.runtime_errors.is_empty() {
        reason.push_str(&format!("; the profile runtime said: {}", evidence.runtime_errors.join(" | ")));
    }
    Verdict { status: Status::Failed, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::perf::tests::parse;
    use std::os::unix::process::ExitStatusExt;

    fn gtest(output: &str) -> GtestLines {
        output::TrialOutput::scan(output.as_bytes()).gtest
    }

    fn exited(code: i32) -> Finished {
        Finished {
            ending: Ending::Exited(ExitStatusExt::from_raw(code << 8)),
            duration: Duration::ZERO,
            leftovers: 0,
            survivors: 0,
            output_cut: 0,
            containment: crate::exec::supervisor::Containment::ProcessTree,
            no_cgroup: None,
            seen: Vec::new(),
            since: None,
        }
    }

    const ROW_OK: &str = "  1024  256  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0\n";
    const ROW_WRONG: &str = "  1024  256  float  sum  -1  1.0  1.0  1.0  3  1.0  1.0  1.0  0\n";

    const GTEST_JSON: &str = r#"{"tests": 3, "testsuites": [{"name": "A", "testsuite": [
        {"name": "ok", "status": "RUN", "result": "COMPLETED", "time": "0.5s"},
        {"name": "skip", "status": "RUN", "result": "SKIPPED", "time": "0s"},
        {"name": "DISABLED_x", "status": "NOTRUN", "result": "SUPPRESSED", "time": "0s"},
        {"name": "bad", "status": "RUN", "result": "COMPLETED", "time": "0s", "failures": [{"failure": "x != y"}]}
    ]}]}"#;

    #[test]
    fn gtest_cases_failures_and_filters() {
        let t = Duration::from_secs(1);
        let (v, cases) = judge_gtest(&exited(1), &[GtestReport::Json(GTEST_JSON)], &gtest(""), None, t);
        assert_eq!(v.reason, "exit status 1: 1 test failed: A.bad");
        assert_eq!(cases.len(), 3, "{cases:?}");
        assert_eq!((cases[1].name.as_str(), cases[1].status), ("A.skip", CaseStatus::Skipped));
        assert_eq!(cases[2].message, "x != y");
        let empty = r#"{"tests": 0, "testsuites": []}"#;
        let (v, _) = judge_gtest(&exited(0), &[GtestReport::Json(empty)], &gtest(""), Some("Nothing.*"), t);
        assert_eq!(v.reason, "the filter `Nothing.*` matched no test (gtest ran nothing)");
        let (v, _) = judge_gtest(&exited(0), &[], &gtest(""), None, t);
        assert_eq!(v.reason, "exit status 0, but no readable gtest report was written");
        // Issue #48: its only case skipped, exit 0: no test ran, so it fails.
        let skipped = r#"{"tests": 1, "testsuites": [{"name": "A", "testsuite": [
            {"name": "skip", "status": "RUN", "result": "SKIPPED", "time": "0s"}]}]}"#;
        let (v, _) = judge_gtest(&exited(0), &[GtestReport::Json(skipped)], &gtest(""), None, t);
        assert_eq!(
            (v.status, v.reason.as_str()),
            (Status::Failed, "no test ran: the 1 test it started was skipped (A.skip)")
        );
        // Reports torn by two ranks: gtest's result lines in the output decide.
        let output = "[ RUN      ] A.b\n[       OK ] A.b (0 ms)\n[ RUN      ] A.b\n[       OK ] A.b (1 ms)\n\
                      [ RUN      ] A.c\n[  SKIPPED ] A.c (0 ms)\n";
        let (v, cases) = judge_gtest(&exited(0), &[GtestReport::Json("{\"tes{\"tests")], &gtest(output), None, t);
        assert_eq!(v.status, Status::Passed, "{}", v.reason);
        assert_eq!(
            cases.iter().map(|c| (c.name.as_str(), c.status)).collect::<Vec<_>>(),
            [("A.b", CaseStatus::Passed), ("A.c", CaseStatus::Skipped)]
        );
        let failed = format!(
            "{output}[ RUN      ] A.d\n[  FAILED  ] A.d (0 ms)\n[  FAILED  ] 1 test, listed below:\n[  FAILED  ] A.d\n"
        );
        let (v, _) = judge_gtest(&exited(1), &[], &gtest(&failed), None, t);
        assert_eq!(v.reason, "exit status 1: 1 test failed: A.d");
        // One rank's clobbered report does not hide the other's.
        let ok = GTEST_JSON.replace(r#", "failures": [{"failure": "x != y"}]"#, "");
        let (v, _) =
            judge_gtest(&exited(0), &[GtestReport::Json("{\"tes"), GtestReport::Json(&ok)], &gtest(""), None, t);
        assert_eq!(v.status, Status::Passed, "{}", v.reason);
    }

    /// gtest 1.12's XML, as `--gtest_output=xml:` writes it.
    const GTEST_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1" disabled="1" errors="0" time="0.001" name="AllTests">
  <testsuite name="Ring/RingTest" tests="3" failures="1" disabled="1" skipped="0" errors="0" time="0.001">
    <testcase name="Fill/0" value_param="1" file="t.cc" line="9" status="run" result="completed" time="0.25" classname="Ring/RingTest" />
    <testcase name="Fill/1" value_param="8" file="t.cc" line="9" status="run" result="completed" time="0." classname="Ring/RingTest">
      <failure message="t.cc:10&#x0A;Expected equality" type=""><![CDATA[t.cc:10
Expected equality]]></failure>
    </testcase>
    <testcase name="DISABLED_Slow" file="t.cc" line="12" status="notrun" result="suppressed" time="0" classname="Ring/RingTest" />
    <testcase name="Later" file="t.cc" line="14" status="run" result="skipped" time="0" classname="Ring/RingTest">
      <skipped message="t.cc:15&#x0A;"><![CDATA[t.cc:15]]></skipped>
    </testcase>
  </testsuite>
</testsuites>
"#;

    #[test]
    fn gtest_xml_reports_name_cases_as_gtest_does() {
        let t = Duration::from_secs(1);
        let (v, cases) = judge_gtest(&exited(1), &[GtestReport::Xml(GTEST_XML)], &gtest(""), None, t);
        assert_eq!(v.reason, "exit status 1: 1 test failed: Ring/RingTest.Fill/1");
        let got: Vec<(&str, CaseStatus)> = cases.iter().map(|c| (c.name.as_str(), c.status)).collect();
        assert_eq!(
            got,
            [
                ("Ring/RingTest.Fill/0", CaseStatus::Passed),
                ("Ring/RingTest.Fill/1", CaseStatus::Failed),
                ("Ring/RingTest.Later", CaseStatus::Skipped)
            ],
            "the disabled test did not run"
        );
        assert_eq!(cases[0].time_s, 0.25);
        assert_eq!(cases[1].message, "t.cc:10\nExpected equality");
        // A torn report is no report: the output's result lines decide.
        let torn = &GTEST_XML[..GTEST_XML.len() / 2];
        let (v, _) = judge_gtest(&exited(0), &[GtestReport::Xml(torn)], &gtest(""), None, t);
        assert_eq!(v.reason, "exit status 0, but no readable gtest report was written");
        let none = r#"<testsuites tests="0" name="AllTests"></testsuites>"#;
        let (v, _) = judge_gtest(&exited(0), &[GtestReport::Xml(none)], &gtest(""), Some("RingTest*"), t);
        assert_eq!(v.reason, "the filter `RingTest*` matched no test (gtest ran nothing)");
    }

    /// CMake 3.25's `ctest --output-junit`.
    const CTEST_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux-c++" tests="3" failures="1" disabled="1" skipped="0" hostname="" time="0" timestamp="2026-12-04T10:00:00">
	<testcase name="ring_push" classname="ring_push" time="0.0123" status="run">
		<system-out>ok</system-out>
	</testcase>
	<testcase name="ring_pop" classname="ring_pop" time="0.01" status="fail">
		<failure message="Failed"/>
		<system-out>boom</system-out>
	</testcase>
	<testcase name="ring_off" classname="ring_off" time="0" status="disabled">
		<skipped message="Disabled"/>
	</testcase>
</testsuite>
"#;

    #[test]
    fn ctest_junit_cases_and_a_filter_that_matches_nothing() {
        let t = Duration::from_secs(1);
        let (v, cases) = judge_ctest(&exited(8), Some(CTEST_XML), Some("^ring_"), t);
        assert_eq!(v.reason, "exit status 8: 1 test failed: ring_pop");
        let got: Vec<(&str, CaseStatus)> = cases.iter().map(|c| (c.name.as_str(), c.status)).collect();
        assert_eq!(
            got,
            [("ring_push", CaseStatus::Passed), ("ring_pop", CaseStatus::Failed), ("ring_off", CaseStatus::Skipped)]
        );
        let passing = CTEST_XML.replace("<failure message=\"Failed\"/>", "");
        assert_eq!(judge_ctest(&exited(0), Some(&passing), None, t).0.status, Status::Passed);
        let empty = r#"<testsuite name="x" tests="0"></testsuite>"#;
        let (v, _) = judge_ctest(&exited(8), Some(empty), Some("^nope$"), t);
        assert_eq!(v.reason, "the filter `^nope$` (ctest -R) matched no test (ctest ran nothing) (exit status 8)");
        let (v, _) = judge_ctest(&exited(0), Some(empty), Some("^nope$"), t);
        assert_eq!(v.status, Status::Failed, "nothing run is no pass, whatever the exit status");
        let (v, _) = judge_ctest(&exited(0), None, None, t);
        assert_eq!(v.status, Status::Failed);
    }

    #[test]
    fn a_gtest_crash_names_the_running_test() {
        let out = "[ RUN      ] A.one\n[       OK ] A.one (0 ms)\n[ RUN      ] A.two\n";
        let crash = Finished { ending: Ending::Exited(ExitStatusExt::from_raw(libc::SIGSEGV)), ..exited(0) };
        let (v, _) = judge_gtest(&crash, &[], &gtest(out), None, Duration::ZERO);
        assert_eq!(v.reason, "killed by signal 11 (SIGSEGV): crashed while running A.two");
    }

    #[test]
    fn pytest_junit_cases_and_nothing_collected() {
        let xml = r#"<testsuites><testsuite><testcase classname="t" name="a" time="0.1"/>
            <testcase classname="t" name="b" time="0"><failure message="assert 1 &amp;&amp; 2">x</failure></testcase>
            <testcase classname="t" name="c"><skipped/></testcase></testsuite></testsuites>"#;
        let (v, cases) = judge_pytest(&exited(1), Some(xml), Duration::ZERO);
        assert_eq!(v.reason, "exit status 1: 1 test failed: t::b");
        assert_eq!(cases[1].message, "assert 1 && 2");
        assert_eq!(cases[2].status, CaseStatus::Skipped);
        let (v, _) = judge_pytest(&exited(5), None, Duration::ZERO);
        assert_eq!(v.reason, "exit status 5: pytest collected no tests");
        let (v, _) = judge_pytest(&exited(0), Some(xml.replace("<failure", "<x").as_str()), Duration::ZERO);
        assert_eq!(v.status, Status::Passed);
    }

    #[test]
    fn a_plain_program_is_judged_by_its_exit_status_alone() {
        assert_eq!(judge_plain(&exited(0), Duration::from_secs(1)).status, Status::Passed, "no perf table needed");
        let v = judge_plain(&exited(3), Duration::from_secs(1));
        assert_eq!((v.status, v.reason.as_str()), (Status::Failed, "exit status 3"));
        let crash = Finished { ending: Ending::Exited(ExitStatusExt::from_raw(libc::SIGSEGV)), ..exited(0) };
        assert_eq!(judge_plain(&crash, Duration::ZERO).reason, "killed by signal 11 (SIGSEGV)");
        let stuck = Finished { survivors: 2, ..exited(0) };
        assert_eq!(judge_plain(&stuck, Duration::ZERO).status, Status::Failed);
    }

    #[test]
    fn clean_run_passes() {
        let perf = parse(&format!("{ROW_OK}# Out of bounds values : 0 OK\n"));
        assert_eq!(judge(&exited(0), &perf, Duration::from_secs(1)).status, Status::Passed);
    }

    #[test]
    fn wrong_results_fail_even_with_exit_zero() {
        let perf = parse(&format!("{ROW_WRONG}# Out of bounds values : 3 FAILED\n"));
        let v = judge(&exited(0), &perf, Duration::from_secs(1));
        assert_eq!(v.status, Status::Failed);
        assert!(v.reason.contains("Out of bounds values : 3 FAILED"), "{}", v.reason);
        // A #wrong column alone is enough.
        let perf = parse(&format!("{ROW_WRONG}# Out of bounds values : 0 OK\n"));
        assert!(judge(&exited(0), &perf, Duration::from_secs(1)).reason.contains("#wrong"));
    }

    #[test]
    fn nonzero_exit_fails_and_explains() {
        let perf = parse(&format!("{ROW_WRONG}# Out of bounds values : 3 FAILED\n"));
        let v = judge(&exited(1), &perf, Duration::from_secs(1));
        assert_eq!(v.reason, "exit status 1: # Out of bounds values : 3 FAILED");
        let crash = Finished { ending: Ending::Exited(ExitStatusExt::from_raw(libc::SIGSEGV)), ..exited(0) };
        assert_eq!(judge(&crash, &PerfReport::default(), Duration::ZERO).reason, "killed by signal 11 (SIGSEGV)");
    }

    #[test]
    fn launcher_exit_codes_name_the_signal() {
        let v = judge(&exited(134), &PerfReport::default(), Duration::ZERO);
        assert_eq!(v.reason, "exit status 134 (128 + 6, as launchers report a process killed by SIGABRT)");
        assert_eq!(judge(&exited(3), &PerfReport::default(), Duration::ZERO).reason, "exit status 3");
        assert_eq!(judge(&exited(200), &PerfReport::default(), Duration::ZERO).reason, "exit status 200");
    }

    #[test]
    fn missing_summary_fails() {
        let v = judge(&exited(0), &parse(ROW_OK), Duration::from_secs(1));
        assert_eq!(v.status, Status::Failed);
        assert!(v.reason.contains("no `# Out of bounds values` line"), "{}", v.reason);
    }

    #[test]
    fn silent_exit_zero_fails_as_a_missing_table() {
        // CCL_FAULT=no-output: the header got out, then nothing.
        let v = judge(&exited(0), &parse("# ccl-tests version 1.0\n#  size count\n"), Duration::from_secs(1));
        assert_eq!(v.status, Status::Failed);
        assert!(v.reason.contains("no perf table (no result rows"), "{}", v.reason);
        assert_eq!(judge(&exited(0), &PerfReport::default(), Duration::ZERO).status, Status::Failed);
    }

    #[test]
    fn timeout_is_distinct_from_failure() {
        let f = Finished { ending: Ending::TimedOut { killed: "SIGKILL".into() }, ..exited(0) };
        let v = judge(&f, &PerfReport::default(), Duration::from_secs(30));
        assert_eq!(v.status, Status::Timeout);
        assert_eq!(v.reason, "TIMEOUT after 30s (stopped with SIGKILL)");
    }

    #[test]
    fn interruption_is_neither_failure_nor_timeout() {
        let f = Finished {
            ending: Ending::Interrupted { signal: libc::SIGINT, killed: "SIGTERM".into() },
            duration: Duration::from_millis(2500),
            ..exited(0)
        };
        let v = judge(&f, &PerfReport::default(), Duration::from_secs(30));
        assert_eq!(v.status, Status::Interrupted);
        assert_eq!(v.reason, "INTERRUPTED by SIGINT after 2.5s (stopped with SIGTERM)");
    }

    fn evidence(writers: usize, expected: usize) -> ProfileEvidence<'static> {
        ProfileEvidence {
            writers,
            partial: &[],
            unmatched: &[],
            foreign: &[],
            pattern: "%h-%p-%m.profraw",
            expected,
            dir: std::path::Path::new("/ws/profiles/T"),
            merge_error: None,
            quarantined: &[],
            runtime_errors: &[],
            free_bytes: None,
        }
    }

    #[test]
    fn lost_coverage_fails_a_passing_trial_and_says_why() {
        let passed = || Verdict { status: Status::Passed, reason: String::new() };
        assert_eq!(judge_coverage(passed(), &evidence(3, 3)).status, Status::Passed);
        let none = judge_coverage(passed(), &evidence(0, 1));
        assert_eq!(none.status, Status::Failed);
        assert!(none.reason.contains("wrote no coverage profile in /ws/profiles/T"), "{}", none.reason);
        let other = ["mine.profraw".to_string()];
        let renamed = judge_coverage(passed(), &ProfileEvidence { unmatched: &other, ..evidence(0, 1) });
        assert!(
            renamed.reason.starts_with(
                "coverage lost: the trial passed and wrote 1 coverage profile(s) in /ws/profiles/T (mine.profraw), but not under the name"
            ),
            "{}",
            renamed.reason
        );
        let set_aside = judge_coverage(passed(), &ProfileEvidence { foreign: &other, ..evidence(0, 1) });
        assert!(
            set_aside.reason.starts_with("coverage lost: the trial passed but wrote no coverage profile under the name the harness gave it (LLVM_PROFILE_FILE=/ws/profiles/T/%h-%p-%m.profraw); the 1 profile(s) in /ws/profiles/T (mine.profraw) do not carry that name, so they were moved to quarantine"),
            "{}",
            set_aside.reason
        );
        // Foreign profiles beside the trial's own: it keeps its verdict.
        let beside = ProfileEvidence { foreign: &other, ..evidence(1, 1) };
        assert_eq!(judge_coverage(passed(), &beside).status, Status::Passed);
        let some = judge_coverage(passed(), &evidence(2, 3));
        assert!(some.reason.contains("only 2 of 3 ranks"), "{}", some.reason);
        let merge = ProfileEvidence { merge_error: Some("llvm-profdata: boom"), ..evidence(3, 3) };
        assert!(judge_coverage(passed(), &merge).reason.contains("could not be merged: llvm-profdata: boom"));
        let bad = ["/ws/quarantine/T/a.profraw".to_string()];
        let quarantined = ProfileEvidence { quarantined: &bad, ..evidence(3, 3) };
        assert!(judge_coverage(passed(), &quarantined).reason.contains("1 of its raw profiles were unreadable"));
        let only_bad = ProfileEvidence { quarantined: &bad, ..evidence(0, 1) };
        let reason = judge_coverage(passed(), &only_bad).reason;
        assert!(reason.contains("none of its 1 raw profile(s) in /ws/profiles/T could be merged"), "{reason}");
        let said = ["LLVM Profile Error: Failed to write file \"x\": No space left on device".to_string()];
        let full = ProfileEvidence { runtime_errors: &said, free_bytes: Some(0), ..evidence(0, 1) };
        let reason = judge_coverage(passed(), &full).reason;
        assert!(reason.contains("is full (no space left on device)"), "{reason}");
        assert!(
            reason.ends_with(
                "the profile runtime said: LLVM Profile Error: Failed to write file \"x\": No space left on device"
            ),
            "{reason}"
        );
        let host_write =
            ["LLVM Profile Error: Failed to write file \"/ws/p/T/h-1-2_0.profraw\": File exists".to_string()];
        let written = ProfileEvidence { runtime_errors: &host_write, ..evidence(3, 3) };
        let lost = judge_coverage(passed(), &written);
        assert_eq!(lost.status, Status::Failed, "a write the runtime says failed is coverage lost, files or not");
        assert!(lost.reason.ends_with(&format!("the profile runtime said: {}", host_write[0])), "{}", lost.reason);
        let failed = Verdict { status: Status::Failed, reason: "exit status 1".into() };
        assert_eq!(judge_coverage(failed.clone(), &evidence(0, 3)), failed, "a failure keeps its own reason");
    }

    #[test]
    fn leftovers_fail_a_passing_trial_only() {
        let passed = Verdict { status: Status::Passed, reason: String::new() };
        assert_eq!(judge_leftovers(passed.clone(), 0), passed);
        let failed = judge_leftovers(passed, 2);
        assert_eq!(failed.status, Status::Failed);
        assert!(failed.reason.contains("2 of its processes were still running"), "{}", failed.reason);
        let timed_out = Verdict { status: Status::Timeout, reason: "TIMEOUT".into() };
        assert_eq!(judge_leftovers(timed_out.clone(), 3), timed_out);
    }
}
