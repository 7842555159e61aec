//! What a report cannot vouch for (`Health`): quarantined, missing or
//! unmerged profiles, and stale sources.

use crate::coverage::profiles::Quarantined;
use crate::results::TrialResult;
use crate::verdict::Status;

/// What a report cannot vouch for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Health {
    /// Unreadable, altered or unrecorded profiles, moved to quarantine.
    pub(crate) quarantined: Vec<Quarantined>,
    pub(crate) merge_errors: Vec<String>,
    /// Profiles a trial recorded that are gone.
    pub(crate) missing: Vec<String>,
    /// Trials that exited 0 but left no profile.
    pub(crate) no_profile: Vec<String>,
    /// Timed out, interrupted or killed by a signal: their processes wrote no profile.
    pub(crate) no_coverage: Vec<String>,
    /// Killed under device coverage: `trial (why)`; see `TrialResult::device_counters_lost`.
    pub(crate) device_counters_lost: Vec<String>,
    /// Trial records that could not be read, moved to quarantine: `file (why)`.
    pub(crate) damaged_results: Vec<String>,
    /// Why the sources are no longer those the build was made from
    /// (`cache::manifest::sources_changed`): every format says so.
    pub(crate) sources_changed: Option<String>,
    /// What llvm-cov warned about on the merged profile (and so left out of
    /// every total), explained.
    pub(crate) llvm_cov_warnings: Vec<crate::report::llvm_cov::LlvmCovWarning>,
    /// What the report measured and left out (`meta.json`'s `measured`).
    pub(crate) measurement: Option<crate::report::measured::Measurement>,
}

impl Health {
    /// From the trials' records, plus what the report itself found
    /// (`quarantined`, `missing`) while checking and merging profiles.
    pub fn new(results: &[TrialResult], quarantined: Vec<Quarantined>, missing: Vec<String>) -> Health {
        let mut health = Health { quarantined, missing, ..Health::default() };
        for r in results {
            if let Some(m) = &r.merge {
                health.quarantined.extend(m.quarantined.iter().cloned());
            }
            health.quarantined.extend(r.foreign.iter().chain(&r.rejected).cloned());
            if let Some(e) = &r.merge_error {
                health.merge_errors.push(format!("{}: {e}", r.trial));
            }
            if r.no_profile {
                health.no_profile.push(r.trial.clone());
            }
            if matches!(r.status, Status::Timeout | Status::Interrupted) || r.signal.is_some() {
                health.no_coverage.push(format!("{} ({})", r.trial, r.reason));
            }
            if let Some(why) = &r.device_counters_lost {
                health.device_counters_lost.push(format!("{} ({why})", r.trial));
            }
        }
        health
    }

    /// Why the report's profiles cannot be trusted, or `None` if they can.
    /// Trials without coverage because they timed out are said, not failed.
    pub(crate) fn problems(&self) -> Option<String> {
        let mut problems = Vec::new();
        if !self.quarantined.is_empty() {
            let files: Vec<String> =
                self.quarantined.iter().map(|q| format!("    {}: {}", q.file.display(), q.reason)).collect();
            problems.push(format!(
                "{} profiles were unreadable or altered and moved to quarantine (reports use the rest):\n{}",
                self.quarantined.len(),
                files.join("\n")
            ));
        }
        if !self.damaged_results.is_empty() {
            problems.push(format!(
                "{} trial results were unreadable and moved to quarantine (their trials are not in the report):\n    {}",
                self.damaged_results.len(),
                self.damaged_results.join("\n    ")
            ));
        }
        if !self.merge_errors.is_empty() {
            problems.push(format!("merging failed for: {}", self.merge_errors.join("; ")));
        }
        if !self.missing.is_empty() {
            problems.push(format!("profiles vanished after their trials wrote them: {}", self.missing.join("; ")));
        }
        if !self.no_profile.is_empty() {
            problems.push(format!(
                "these trials exited 0 but left no profile (is the instrumented library the one loaded? check LD_LIBRARY_PATH): {}",
                self.no_profile.join(", ")
            ));
        }
        if problems.is_empty() {
            return None;
        }
        if !self.no_coverage.is_empty() {
            problems
                .push(format!("no coverage from these trials (timed out or killed): {}", self.no_coverage.join("; ")));
        }
        Some(problems.join("\n"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A trial's record with this name, status and reason.
    pub(crate) fn trial(name: &str, status: &str, reason: &str) -> TrialResult {
        serde_json::from_value(json!({
            "trial": name, "slug": name.replace("::", "."), "collective": "AllReduce", "size": "1K",
            "variant": null, "build_id": "b", "run_id": "r1", "status": status, "reason": reason,
            "exit_code": 0, "signal": null, "started_at": "", "started_unix_ms": 0, "duration_s": 1.0,
            "timeout_s": 60, "launcher": "threads", "ranks": 1, "command": "", "argv": [], "env": [],
            "cwd": "/", "log": "/l", "profile_dir": "/p", "profiles": 1, "no_profile": false,
            "merge": null, "merge_error": null, "leftovers": 0, "perf": {"rows": [], "out_of_bounds": null}
        }))
        .unwrap()
    }

    #[test]
    fn health_fails_only_on_untrusted_or_missing_profiles() {
        let timed_out = trial("A::1K::t", "TIMEOUT", "TIMEOUT after 3s");
        let health = Health::new(std::slice::from_ref(&timed_out), Vec::new(), Vec::new());
        assert_eq!(health.no_coverage, ["A::1K::t (TIMEOUT after 3s)"]);
        assert_eq!(health.problems(), None, "a timeout alone is said, not failed");
        let bad = Quarantined { file: "/ws/quarantine/A.1K/x.profraw".into(), reason: "truncated".into() };
        let health = Health::new(&[timed_out], vec![bad], vec!["A::1K::b: gone".into()]);
        let problems = health.problems().unwrap();
        assert!(problems.starts_with("1 profiles were unreadable or altered"), "{problems}");
        assert!(problems.contains("    /ws/quarantine/A.1K/x.profraw: truncated"), "{problems}");
        assert!(problems.contains("profiles vanished after their trials wrote them: A::1K::b: gone"), "{problems}");
        assert!(problems.ends_with("no coverage from these trials (timed out or killed): A::1K::t (TIMEOUT after 3s)"));
        let mut no_profile = trial("A::1K::n", "FAILED", "coverage lost");
        no_profile.no_profile = true;
        assert!(Health::new(&[no_profile], Vec::new(), Vec::new()).problems().unwrap().contains("left no profile"));
    }
}
