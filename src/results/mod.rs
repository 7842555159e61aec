//! Run results: one JSON record per trial, written atomically as the trial
//! ends (`record.rs`), plus `run.json` and `junit.xml`, views of those records
//! kept current during the run (`run_json.rs`, `junit.rs`), so they exist
//! even if the run is interrupted or the coverage report later fails
//! (upstream exits before writing its results when coverage fails); the
//! records read back, checked (`load.rs`), and grouped by run (`runs.rs`).

mod junit;
mod load;
mod record;
mod run_json;
mod runs;

#[cfg(test)]
pub(crate) use junit::assert_xml_1_0;
pub(crate) use junit::xml_text;
pub(crate) use load::load_checked;
pub(crate) use record::{Attempt, EarlierRun, Ignored, Rerun, RunHeader, RunJson, TrialIdentity, TrialResult};
pub(crate) use run_json::{RecordedBuild, RunJsonWriter, RunPlan};
pub(crate) use runs::{RecordsByRun, also_uses, run_id};
