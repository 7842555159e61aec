//! `junit.xml`: a run's record as JUnit, nextest's way (retries as
//! `<flakyFailure>`/`<rerunFailure>`, a trial's own cases under it).

use super::record::RunRecord;
use crate::error::{Context, Result};
use crate::verdict::{CaseStatus, Status};
use std::time::Duration;

pub(super) fn junit(record: &RunRecord) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestRerun, TestSuite};
    let mut suite = TestSuite::new(format!("collectives ({})", record.header.config));
    let classname = format!("ccl-coverage.{}", record.header.config);
    for t in &record.trials {
        let status = match t.status {
            Status::Passed => TestCaseStatus::success(),
            Status::Failed | Status::Timeout | Status::Interrupted => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_type(t.status.as_str()).set_message(t.reason.clone());
                s.set_description(format!("{}\nlog: {}", t.command, t.log.display()));
                s
            }
        };
        let mut status = status;
        // Earlier attempts: `<flakyFailure>` under a pass, `<rerunFailure>` under a failure (nextest's JUnit).
        status.add_reruns(t.attempts.iter().map(|a| {
            let mut rerun = TestRerun::new(NonSuccessKind::Failure);
            rerun.set_type(a.status.as_str()).set_message(a.reason.clone());
            rerun.set_time(Duration::try_from_secs_f64(a.duration_s).unwrap_or_default());
            rerun.system_err = Some(a.log_tail.clone().into());
            rerun
        }));
        let mut case = TestCase::new(t.trial.clone(), status);
        case.set_classname(classname.clone());
        // A record read back from the workspace may hold anything; this must not panic.
        case.set_time(Duration::try_from_secs_f64(t.duration_s).unwrap_or_default());
        suite.add_test_case(case);
        // The trial's own test cases, under it.
        for c in &t.cases {
            let status = match c.status {
                CaseStatus::Passed => TestCaseStatus::success(),
                CaseStatus::Skipped => TestCaseStatus::skipped(),
                CaseStatus::Failed => {
                    let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    s.set_message(c.message.clone());
                    s
                }
            };
            let mut case = TestCase::new(format!("{}::{}", t.trial, c.name), status);
            case.set_classname(t.trial.clone());
            case.set_time(Duration::try_from_secs_f64(c.time_s).unwrap_or_default());
            suite.add_test_case(case);
        }
    }
    for i in &record.ignored {
        let mut status = TestCaseStatus::skipped();
        status.set_message(i.reason.clone());
        let mut case = TestCase::new(i.trial.clone(), status);
        case.set_classname(classname.clone());
        suite.add_test_case(case);
    }
    let mut report = Report::new("ccl-coverage");
    report.add_test_suite(suite);
    report.to_string().context("cannot write JUnit XML")
}
