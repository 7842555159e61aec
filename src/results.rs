//! Run results: one JSON record per trial, plus `run.json` and `junit.xml`
//! regenerated after every trial, so they exist even if the run is
//! interrupted or the coverage report later fails (upstream exits before
//! writing its results when coverage fails).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::fixture::BuildManifest;
use crate::outcome::{Status, Verdict};
use crate::perf::PerfReport;
use crate::plan::TrialSpec;
use crate::profiles::MergeOutcome;
use crate::redact;
use crate::run::{Ending, Execution};
use crate::workspace::{self, Workspace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialResult {
    pub trial: String,
    pub slug: String,
    pub collective: String,
    pub size: String,
    pub variant: Option<String>,
    pub build_id: String,
    pub run_id: String,
    pub status: Status,
    pub reason: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at: String,
    /// Start in milliseconds since the Unix epoch, for ordering trials precisely.
    pub started_unix_ms: u64,
    pub duration_s: f64,
    pub timeout_s: u64,
    pub launcher: String,
    pub ranks: usize,
    /// The command as a shell line, and exactly as it was run.
    pub command: String,
    pub argv: Vec<String>,
    /// What the trial added to the inherited environment.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub log: PathBuf,
    pub profile_dir: PathBuf,
    /// Raw profiles the trial left.
    pub profiles: usize,
    /// Exited 0 but left no profile: is the instrumented library really the
    /// one loaded (`LD_LIBRARY_PATH`)?
    pub no_profile: bool,
    /// The trial's incremental merge, when it ran.
    pub merge: Option<crate::profiles::TrialMerge>,
    pub merge_error: Option<String>,
    /// Why the trial's device counters are lost, when it ran under device
    /// coverage and was killed: the host collector drains them only at exit
    /// and at module unload, never on a signal.
    #[serde(default)]
    pub device_counters_lost: Option<String>,
    /// SHA-256 of the raw profiles left unmerged, by file name.
    #[serde(default)]
    pub raw_sha256: std::collections::BTreeMap<String, String>,
    /// Processes still alive after the trial's main process exited.
    pub leftovers: usize,
    pub perf: PerfReport,
}

/// Which trial a record is of: the plan's entry, the build and the run.
#[derive(Debug, Clone, Copy)]
pub struct TrialIdentity<'a> {
    pub spec: &'a TrialSpec,
    pub config: &'a Config,
    pub manifest: &'a BuildManifest,
    pub run_id: &'a str,
}

/// Under device coverage, why a killed trial's device counters are gone.
fn device_counters_lost(manifest: &BuildManifest, execution: &Execution, verdict: &Verdict) -> Option<String> {
    let killed = match &execution.finished.ending {
        Ending::TimedOut { .. } | Ending::Interrupted { .. } => true,
        Ending::Exited(status) => status.signal().is_some(),
    };
    (manifest.device.enabled && killed).then(|| {
        format!("{}: device counters are drained only when a process exits or unloads a module", verdict.reason)
    })
}

impl TrialResult {
    /// The record of a finished trial, from every stage's output.
    pub fn new(
        id: TrialIdentity,
        execution: &Execution,
        verdict: &Verdict,
        profiles: MergeOutcome,
        perf: PerfReport,
    ) -> TrialResult {
        let TrialIdentity { spec, config, manifest, run_id } = id;
        let (exit_code, signal) = execution.exit();
        let cmd = &execution.launch.cmd;
        TrialResult {
            trial: spec.name.clone(),
            slug: spec.slug.clone(),
            collective: spec.collective(config).name.clone(),
            size: spec.size.clone(),
            variant: spec.variant(config).map(|v| v.name.clone()),
            build_id: manifest.build_id.clone(),
            run_id: run_id.to_string(),
            status: verdict.status,
            reason: verdict.reason.clone(),
            exit_code,
            signal,
            started_at: execution.started_at.clone(),
            started_unix_ms: execution.started_unix_ms,
            duration_s: execution.finished.duration.as_secs_f64(),
            timeout_s: execution.launch.timeout.as_secs(),
            launcher: spec.launcher.clone(),
            ranks: spec.ranks,
            command: cmd.display(),
            argv: cmd.argv(),
            env: execution.launch.env.clone(),
            cwd: cmd.get_cwd().map(std::path::Path::to_path_buf).unwrap_or_default(),
            log: execution.log.clone(),
            profile_dir: profiles.dir.clone(),
            profiles: profiles.raw,
            no_profile: manifest.coverage && exit_code == Some(0) && profiles.raw == 0,
            merge: profiles.merge,
            merge_error: profiles.error,
            device_counters_lost: device_counters_lost(manifest, execution, verdict),
            raw_sha256: profiles.raw_sha256,
            leftovers: execution.finished.leftovers,
            perf,
        }
    }

    /// What libtest shows for a trial that did not pass: the verdict, the
    /// command (redacted), the log and its last lines; `None` if it passed.
    pub fn failure_message(&self, output: &str) -> Option<String> {
        if self.status == Status::Passed {
            return None;
        }
        Some(format!(
            "{}: {}\ncommand: {}\nlog: {}\nlast lines of the log:\n{}",
            self.status.as_str(),
            self.reason,
            redact::shell_line(&self.command),
            self.log.display(),
            crate::process::indent_tail(output, crate::process::TAIL_LINES)
        ))
    }

    /// The record with secrets masked in its command, argv and environment
    /// (see [`crate::redact`]); `run.json` and JUnit are built from the
    /// written records, so they never see the real values either.
    pub fn redacted(&self) -> TrialResult {
        TrialResult {
            command: redact::shell_line(&self.command),
            argv: redact::argv(&self.argv),
            env: redact::env(&self.env),
            ..self.clone()
        }
    }

    /// What the trial recorded about its stored profiles, for the report's checks.
    pub fn recorded_profiles(&self) -> crate::profiles::Recorded<'_> {
        crate::profiles::Recorded {
            trial: &self.trial,
            slug: &self.slug,
            merge: self.merge.as_ref(),
            raw_sha256: &self.raw_sha256,
        }
    }

    /// Writes `results/<slug>.json`, redacted whatever the caller filled in.
    pub fn write(&self, ws: &Workspace) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.redacted()).expect("result serializes");
        workspace::write_atomic(&ws.trial_result(&self.slug), text.as_bytes())
    }
}

/// The trial results in the workspace recorded for build `build_id`, of the
/// trials named in `planned` (results of trials the config no longer has are
/// left out).
pub fn load_all(ws: &Workspace, build_id: &str, planned: &BTreeSet<String>) -> Result<Vec<TrialResult>> {
    let dir = ws.results_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::new(format!("cannot list {}: {e}", dir.display()))),
    };
    let mut results = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !name.ends_with(".json") || name == "run.json" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        if let Ok(result) = serde_json::from_str::<TrialResult>(&text)
            && result.build_id == build_id
            && planned.contains(&result.trial)
        {
            results.push(result);
        }
    }
    results.sort_by(|a, b| a.trial.cmp(&b.trial));
    Ok(results)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub timeout: usize,
    #[serde(default)]
    pub interrupted: usize,
    pub duration_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema_version: u32,
    pub config: String,
    pub config_path: PathBuf,
    pub description: String,
    pub host: String,
    /// One line per GPU (`nvidia-smi -L` or `rocm-smi --showproductname`), if any.
    pub gpus: Vec<String>,
    pub library_git_sha: Option<String>,
    pub build: BuildManifest,
    pub started_at: Option<String>,
    pub finished_at: String,
    pub summary: Summary,
    pub trials: Vec<TrialResult>,
}

/// Static facts of a run that every rewrite of `run.json` repeats.
pub struct RunInfo {
    pub config_path: PathBuf,
    pub description: String,
    pub host: String,
    pub gpus: Vec<String>,
    pub library_git_sha: Option<String>,
    /// Every trial of the config's plan, ignored ones included.
    pub planned: BTreeSet<String>,
}

/// Rewrites `results/run.json` and `results/junit.xml` from the trial records
/// of the current build, under the workspace lock.
pub fn write_run(ws: &Workspace, manifest: &BuildManifest, info: &RunInfo) -> Result<()> {
    let lock = File::create(ws.lock_file())
        .map_err(|e| Error::new(format!("cannot create {}: {e}", ws.lock_file().display())))?;
    lock.lock().map_err(|e| Error::new(format!("cannot lock {}: {e}", ws.lock_file().display())))?;
    // Records written by an older harness may predate redaction.
    let trials: Vec<TrialResult> =
        load_all(ws, &manifest.build_id, &info.planned)?.iter().map(TrialResult::redacted).collect();
    let mut build = manifest.clone();
    for step in &mut build.steps {
        step.command = redact::shell_line(&step.command);
    }
    let count = |s: Status| trials.iter().filter(|t| t.status == s).count();
    let record = RunRecord {
        schema_version: 1,
        config: manifest.config.clone(),
        config_path: info.config_path.clone(),
        description: info.description.clone(),
        host: info.host.clone(),
        gpus: info.gpus.clone(),
        library_git_sha: info.library_git_sha.clone(),
        build,
        started_at: trials.iter().map(|t| t.started_at.clone()).min(),
        finished_at: crate::host::now(),
        summary: Summary {
            total: trials.len(),
            passed: count(Status::Passed),
            failed: count(Status::Failed),
            timeout: count(Status::Timeout),
            interrupted: count(Status::Interrupted),
            duration_s: trials.iter().map(|t| t.duration_s).sum(),
        },
        trials,
    };
    let json = serde_json::to_string_pretty(&record).expect("run record serializes");
    workspace::write_atomic(&ws.results_dir().join("run.json"), json.as_bytes())?;
    workspace::write_atomic(&ws.results_dir().join("junit.xml"), junit(&record)?.as_bytes())
}

fn junit(record: &RunRecord) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new(format!("collectives ({})", record.config));
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
        let mut case = TestCase::new(t.trial.clone(), status);
        case.set_classname(format!("ccl-coverage.{}", record.config));
        // A record read back from the workspace may hold anything; this must not panic.
        case.set_time(Duration::try_from_secs_f64(t.duration_s).unwrap_or_default());
        suite.add_test_case(case);
    }
    let mut report = Report::new("ccl-coverage");
    report.add_test_suite(suite);
    report.to_string().map_err(|e| Error::new(format!("cannot write JUnit XML: {e}")))
}
