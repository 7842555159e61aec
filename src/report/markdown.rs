//! `report/summary.md`, for people and for `GITHUB_STEP_SUMMARY`.

use super::{Health, percent};
use crate::build::cache::BuildManifest;
use crate::coverage::llvm_export::SummaryExport;
use crate::results::{RecordsByRun, TrialResult};
use crate::verdict::Status;
use std::collections::BTreeSet;

/// `report/summary.md`: totals, the device-coverage decision, the trials'
/// outcomes and runs, and what the report could not vouch for.
pub(crate) fn markdown(
    config: &str,
    manifest: &BuildManifest,
    summary: &SummaryExport,
    results: &[TrialResult],
    health: &Health,
) -> String {
    let mut md = format!("## Coverage: {config} (build {})\n\n", manifest.build_id);
    if let Some(changed) = &health.sources_changed {
        md.push_str(&format!("**Sources changed after the build:** {changed}.\n\n"));
    }
    if !health.llvm_cov_warnings.is_empty() {
        md.push_str(&format!(
            "**llvm-cov warned {} times** (what it warns about is left out of every total; see `docs/reports.md`, \"llvm-cov warnings\"):\n\n",
            health.llvm_cov_warnings.len()
        ));
        for w in &health.llvm_cov_warnings {
            md.push_str(&format!("- `{}`: {}\n", w.warning, w.explanation));
        }
        md.push('\n');
    }
    // What the totals are of, and what ran that they leave out.
    for line in health.measurement.iter().flat_map(crate::report::measured::Measurement::lines) {
        md.push_str(&format!("- {}\n", crate::report::escape_html(&line)));
    }
    if health.measurement.as_ref().is_some_and(|m| !m.lines().is_empty()) {
        md.push('\n');
    }
    md.push_str("| | covered | total | % |\n|---|---:|---:|---:|\n");
    for (metric, covered, count) in summary.totals().rows() {
        md.push_str(&format!("| {metric} | {covered} | {count} | {:.2} |\n", percent(covered, count)));
    }
    md.push_str(&format!("\nDevice coverage: {}\n\n", manifest.device.summary()));
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    let runs: BTreeSet<&str> = results.iter().map(|r| r.run_id.as_str()).collect();
    md.push_str(&format!(
        "Trials: {} passed, {} failed, {} timed out, {} interrupted (runs {}).\n",
        count(Status::Passed),
        count(Status::Failed),
        count(Status::Timeout),
        count(Status::Interrupted),
        runs.into_iter().collect::<Vec<_>>().join(", ")
    ));
    let flaky: Vec<String> = results.iter().filter(|r| r.flaky).map(|r| format!("`{}`", r.trial)).collect();
    if !flaky.is_empty() {
        md.push_str(&format!("\n**Flaky:** {} passed only on a retry: {}.\n", flaky.len(), flaky.join(", ")));
    }
    if let Some(mixed) = RecordsByRun::of(results).mixed() {
        md.push_str(&format!("\n**Not one run:** {mixed}. Their coverage is counted.\n"));
    }
    if !health.quarantined.is_empty() {
        md.push_str(&format!("\nQuarantined profiles: {}\n", health.quarantined.len()));
    }
    if !health.missing.is_empty() {
        md.push_str(&format!("\nVanished profiles: {}\n", health.missing.join("; ")));
    }
    if !health.no_coverage.is_empty() {
        md.push_str(&format!("\nNo coverage from: {}\n", health.no_coverage.join("; ")));
    }
    if !health.device_counters_lost.is_empty() {
        md.push_str(&format!("\nDevice counters lost: {}\n", health.device_counters_lost.join("; ")));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::health::tests::trial;
    use serde_json::json;

    #[test]
    fn markdown_gives_totals_outcomes_and_doubts() {
        let summary = json!({"data": [{"files": [], "totals": {
            "lines": {"covered": 3, "count": 4}, "functions": {"covered": 1, "count": 2},
            "regions": {"covered": 0, "count": 0}, "branches": {"covered": 1, "count": 4}
        }}]})
        .to_string();
        let summary = SummaryExport::parse(&summary).unwrap();
        let results = [trial("A::1K::a", "PASSED", ""), trial("A::1K::i", "INTERRUPTED", "INTERRUPTED by SIGINT")];
        let health = Health::new(&results, Vec::new(), Vec::new());
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &results, &health);
        assert!(md.starts_with("## Coverage: local (build b1)\n"), "{md}");
        assert!(md.contains("| lines | 3 | 4 | 75.00 |"), "{md}");
        assert!(md.contains("Trials: 1 passed, 0 failed, 0 timed out, 1 interrupted (runs r1)."), "{md}");
        assert!(md.contains("No coverage from: A::1K::i (INTERRUPTED by SIGINT)"), "{md}");
        assert!(!md.contains("Not one run") && !md.contains("Flaky"), "{md}");
        let flaky = TrialResult { flaky: true, ..trial("A::1K::f", "PASSED", "") };
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &[flaky], &health);
        assert!(md.contains("\n**Flaky:** 1 passed only on a retry: `A::1K::f`.\n"), "{md}");
        let later = TrialResult { run_id: "r2".into(), started_unix_ms: 1, ..trial("A::1K::l", "PASSED", "") };
        let mixed = [results[0].clone(), later];
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &mixed, &health);
        assert!(md.contains("\n**Not one run:** 1 of 2 trial results come from earlier runs of this build"), "{md}");
        assert!(md.contains(": A::1K::a (run r1, started ). Their coverage is counted.\n"), "{md}");
        assert!(!md.contains("Device counters lost"), "{md}");
        let mut lost = trial("A::1G::t", "TIMEOUT", "TIMEOUT after 1800s");
        lost.device_counters_lost = Some("TIMEOUT after 1800s: drained only at exit".into());
        let health = Health::new(std::slice::from_ref(&lost), Vec::new(), Vec::new());
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &[lost], &health);
        assert!(md.contains("\nDevice counters lost: A::1G::t (TIMEOUT after 1800s: drained only at exit)\n"), "{md}");
    }
}
