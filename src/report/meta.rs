//! `report/meta.json`: which build, trials and runs a report came from, and
//! what it could not vouch for.

use super::Health;
use crate::build::cache::BuildManifest;
use crate::coverage::profiles::Quarantined;
use crate::results::{EarlierRun, RecordsByRun, TrialResult};
use crate::verdict::Status;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `report/meta.json`: which build, trials and runs a report came from, and
/// what it could not vouch for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReportMeta {
    pub(crate) build_id: String,
    pub(crate) generated_at: String,
    pub(crate) device_coverage: String,
    pub(crate) profiles_merged: usize,
    /// The run of the trial that started last, and earlier runs of this
    /// build whose trials were not run again: the report counts them all.
    pub(crate) latest_run: Option<EarlierRun>,
    pub(crate) earlier_runs: Vec<EarlierRun>,
    pub(crate) trials: Vec<MetaTrial>,
    pub(crate) quarantined: Vec<Quarantined>,
    pub(crate) missing: Vec<String>,
    pub(crate) no_coverage_from: Vec<String>,
    #[serde(default)]
    pub(crate) device_counters_lost: Vec<String>,
    pub(crate) exited_0_without_profile: Vec<String>,
    /// Set when the sources changed after the build: the report's lines are
    /// of the sources as they were built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sources_changed: Option<String>,
    /// Every warning llvm-cov wrote on the merged profile, explained: it
    /// leaves what it warns about out of every total.
    #[serde(default)]
    pub(crate) llvm_cov_warnings: Vec<crate::report::llvm_cov::LlvmCovWarning>,
    /// The objects the report measured, the files of theirs it left out, the
    /// binaries that wrote profiles but are no file of the build, and the
    /// functions that ran but that no measured object maps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) measured: Option<crate::report::measured::Measurement>,
    /// The report's own pages and files beside llvm-cov's, by what they hold.
    #[serde(default)]
    pub(crate) pages: BTreeMap<String, String>,
}

/// What `meta.json` lists under `pages`: written by the attribution,
/// minimal-suite, diff and baseline steps (the last two only when asked for).
const PAGES: [(&str, &str); 6] = [
    ("attribution_html", "attribution/index.html"),
    ("attribution", "attribution.json"),
    ("trials", "trials.json"),
    ("minimal_suite", "minimal-suite.json"),
    ("diff (CCL_COV_DIFF_BASE)", "diff.md"),
    ("baseline (CCL_COV_BASELINE)", "baseline.md"),
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MetaTrial {
    pub(crate) trial: String,
    pub(crate) run_id: String,
    pub(crate) status: Status,
}

impl ReportMeta {
    pub fn new(
        manifest: &BuildManifest,
        results: &[TrialResult],
        profiles_merged: usize,
        health: &Health,
    ) -> ReportMeta {
        let runs = RecordsByRun::of(results);
        ReportMeta {
            build_id: manifest.build_id.clone(),
            generated_at: crate::exec::host::now(),
            device_coverage: manifest.device.summary(),
            profiles_merged,
            latest_run: runs.latest,
            earlier_runs: runs.earlier,
            trials: results
                .iter()
                .map(|r| MetaTrial { trial: r.trial.clone(), run_id: r.run_id.clone(), status: r.status })
                .collect(),
            quarantined: health.quarantined.clone(),
            missing: health.missing.clone(),
            no_coverage_from: health.no_coverage.clone(),
            device_counters_lost: health.device_counters_lost.clone(),
            exited_0_without_profile: health.no_profile.clone(),
            sources_changed: health.sources_changed.clone(),
            llvm_cov_warnings: health.llvm_cov_warnings.clone(),
            measured: health.measurement.clone(),
            pages: PAGES.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::health::tests::trial;
    use serde_json::json;

    #[test]
    fn meta_names_the_build_trials_and_doubts() {
        let results = [trial("A::1K::a", "PASSED", "")];
        let health = Health { missing: vec!["x".into()], ..Health::default() };
        let meta = ReportMeta::new(&crate::build::cache::test_manifest("b1"), &results, 7, &health);
        let v = serde_json::to_value(&meta).unwrap();
        assert_eq!(v["build_id"], "b1");
        assert_eq!(v["profiles_merged"], 7);
        assert_eq!(v["trials"], json!([{"trial": "A::1K::a", "run_id": "r1", "status": "PASSED"}]));
        assert_eq!(v["latest_run"], json!({"run_id": "r1", "started_at": "", "trials": ["A::1K::a"]}));
        assert_eq!(v["earlier_runs"], json!([]));
        assert_eq!(v["missing"], json!(["x"]));
        assert_eq!(v["device_counters_lost"], json!([]));
        assert_eq!(v["pages"]["attribution_html"], "attribution/index.html");
        let health = Health { device_counters_lost: vec!["A::1G (killed)".into()], ..Health::default() };
        let v = serde_json::to_value(ReportMeta::new(&crate::build::cache::test_manifest("b1"), &results, 7, &health))
            .unwrap();
        assert_eq!(v["device_counters_lost"], json!(["A::1G (killed)"]));
    }
}
