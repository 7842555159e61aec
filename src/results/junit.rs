//! `junit.xml`: a run's record as JUnit, nextest's way (retries as
//! `<flakyFailure>`/`<rerunFailure>`, a trial's own cases under it).

use super::record::RunJson;
use crate::error::{Context, Result};
use crate::verdict::{CaseStatus, Status};
use std::borrow::Cow;
use std::time::Duration;

/// `text` with every character XML 1.0 does not allow (control characters
/// but tab, newline and carriage return; U+FFFE, U+FFFF) written as `\xNN`
/// or `\u{NNNN}`: escaped or not, one such character makes the whole file
/// invalid, and every consumer rejects it. Every XML writer passes the
/// names and text it did not make through it.
pub(crate) fn xml_text(text: &str) -> Cow<'_, str> {
    let allowed = |c: char| matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && !matches!(c, '\u{FFFE}' | '\u{FFFF}'));
    if text.chars().all(allowed) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if allowed(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02X}", c as u32)),
            c => out.push_str(&format!("\\u{{{:04X}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

pub(super) fn junit(record: &RunJson) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestRerun, TestSuite};
    let mut suite = TestSuite::new(xml_text(&format!("collectives ({})", record.header.config)).into_owned());
    let classname = xml_text(&format!("ccl-coverage.{}", record.header.config)).into_owned();
    for t in &record.trials {
        let status = match t.status {
            Status::Passed => TestCaseStatus::success(),
            Status::Failed | Status::Timeout | Status::Interrupted => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_type(t.status.as_str()).set_message(xml_text(&t.reason).into_owned());
                s.set_description(xml_text(&format!("{}\nlog: {}", t.command, t.log.display())).into_owned());
                s
            }
        };
        let mut status = status;
        // Earlier attempts: `<flakyFailure>` under a pass, `<rerunFailure>` under a failure (nextest's JUnit).
        status.add_reruns(t.attempts.iter().map(|a| {
            let mut rerun = TestRerun::new(NonSuccessKind::Failure);
            rerun.set_type(a.status.as_str()).set_message(xml_text(&a.reason).into_owned());
            rerun.set_time(Duration::try_from_secs_f64(a.duration_s).unwrap_or_default());
            rerun.system_err = Some(xml_text(&a.log_tail).into_owned().into());
            rerun
        }));
        let mut case = TestCase::new(xml_text(&t.trial).into_owned(), status);
        case.set_classname(classname.clone());
        // A record read back from the workspace may hold anything; this must not panic.
        // `time` is the trial's own; its wait for rank slots is a property
        // (as pytest writes them), which consumers that do not know it skip.
        case.set_time(Duration::try_from_secs_f64(t.duration_s).unwrap_or_default());
        case.add_property(quick_junit::Property::new("slot_wait_s", format!("{:.3}", t.slot_wait_s)));
        suite.add_test_case(case);
        // The trial's own test cases, under it.
        for c in &t.cases {
            let status = match c.status {
                CaseStatus::Passed => TestCaseStatus::success(),
                CaseStatus::Skipped => TestCaseStatus::skipped(),
                CaseStatus::Failed => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(xml_text(&c.message).into_owned());
                    s
                }
            };
            let mut case = TestCase::new(xml_text(&format!("{}::{}", t.trial, c.name)).into_owned(), status);
            case.set_classname(xml_text(&t.trial).into_owned());
            case.set_time(Duration::try_from_secs_f64(c.time_s).unwrap_or_default());
            suite.add_test_case(case);
        }
    }
    for i in &record.ignored {
        let mut status = TestCaseStatus::skipped();
        status.set_message(xml_text(&i.reason).into_owned());
        let mut case = TestCase::new(xml_text(&i.trial).into_owned(), status);
        case.set_classname(classname.clone());
        suite.add_test_case(case);
    }
    let mut report = Report::new("ccl-coverage");
    report.add_test_suite(suite);
    report.to_string().context("cannot write JUnit XML")
}

/// Parses `xml` to its end and fails on anything XML 1.0 does not allow:
/// malformed markup, and a character outside XML's `Char`, raw or as a
/// character reference, in text or an attribute. quick-xml alone does not
/// check characters, and `&#27;` is as invalid as a raw ESC.
#[cfg(test)]
pub(crate) fn assert_xml_1_0(xml: &str) {
    use quick_xml::events::Event;
    let allowed = |c: char| matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && !matches!(c, '\u{FFFE}' | '\u{FFFF}'));
    let check = |what: &str, text: &str| {
        if let Some(bad) = text.chars().find(|c| !allowed(*c)) {
            panic!("{what} holds {bad:?}, which XML 1.0 does not allow:\n{xml}");
        }
    };
    check("the document", xml);
    let mut reader = quick_xml::Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(Event::Start(e) | Event::Empty(e)) => {
                for a in e.attributes() {
                    let a = a.unwrap_or_else(|err| panic!("malformed attribute: {err}\n{xml}"));
                    let value = a.normalized_value(quick_xml::XmlVersion::Implicit1_0).expect("an attribute unescapes");
                    check("an attribute", &value);
                }
            }
            Ok(Event::Text(t)) => {
                let raw = t.xml10_content();
                check("text", &quick_xml::escape::unescape(&raw).expect("text unescapes"));
            }
            Ok(_) => {}
            Err(e) => panic!("not well-formed XML at {}: {e}\n{xml}", reader.error_position()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::Ignored;
    use super::super::record::samples::trial;
    use super::*;

    /// Control characters (ESC, BEL) in a trial's name, reason and log
    /// tail, and in an ignored trial's reason: the JUnit file still parses
    /// as XML 1.0, each one written as `\xNN`.
    #[test]
    fn junit_is_valid_xml_whatever_the_names_hold() {
        let hostile = "a\u{1b}[31mred\u{7}\u{0}\u{fffe}";
        let mut t = trial(0);
        t.trial = format!("T::{hostile}");
        t.status = Status::Failed;
        t.reason = hostile.into();
        t.attempts = vec![super::super::record::Attempt::of(&t, hostile)];
        let run = serde_json::json!({
            "schema_version": 2, "config": format!("c{hostile}"), "config_path": "/c", "description": "",
            "host": "h", "gpus": [], "library_git_sha": null, "run_id": "r", "build": null,
            "started_at": null, "finished_at": "", "ran": [], "earlier_runs": [],
            "summary": {"total": 1, "passed": 0, "failed": 1, "timeout": 0, "duration_s": 0.0},
            "trials": [t], "ignored": [Ignored { trial: "I".into(), reason: hostile.into() }],
        });
        let record: RunJson = serde_json::from_value(run).unwrap();
        let xml = junit(&record).unwrap();
        assert_xml_1_0(&xml);
        assert!(xml.contains("a\\x1B[31mred\\x07\\x00\\u{FFFE}"), "{xml}");
    }
}
