//! The records' schema: a trial's (`results/<slug>.json`), made from every
//! stage's output as the trial ends, and the run's (`run.json`).

use crate::build::cache::BuildManifest;
use crate::config::Config;
use crate::coverage::profiles::MergeOutcome;
use crate::error::Result;
use crate::exec::redact;
use crate::exec::supervisor::Containment;
use crate::plan::TrialSpec;
use crate::trial::{Ending, Execution};
use crate::upstream::TrialKind;
use crate::verdict::perf::PerfReport;
use crate::verdict::{Case, Status, Verdict};
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TrialResult {
    pub(crate) trial: String,
    pub(crate) slug: String,
    /// The collective; an upstream test's suite.
    pub(crate) collective: String,
    /// Empty for an upstream test.
    pub(crate) size: String,
    /// The variant; an upstream test's name.
    pub(crate) variant: Option<String>,
    /// `perf`, `gtest` or `pytest`: which verdict judged it.
    #[serde(default = "perf_kind")]
    pub(crate) kind: TrialKind,
    pub(crate) build_id: String,
    pub(crate) run_id: String,
    pub(crate) status: Status,
    pub(crate) reason: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) started_at: String,
    /// Start in milliseconds since the Unix epoch, for ordering trials precisely.
    pub(crate) started_unix_ms: u64,
    /// Its own run, from start to exit: the wait for rank slots is not in it.
    pub(crate) duration_s: f64,
    /// Seconds it waited for rank slots before it started (every attempt's
    /// together), recorded apart so that a queue is not taken for a slow trial.
    #[serde(default)]
    pub(crate) slot_wait_s: f64,
    pub(crate) timeout_s: u64,
    pub(crate) launcher: String,
    pub(crate) ranks: usize,
    /// The command as a shell line, and exactly as it was run.
    pub(crate) command: String,
    pub(crate) argv: Vec<String>,
    /// What the trial added to the inherited environment.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) profile_dir: PathBuf,
    /// Raw profiles the trial left.
    pub(crate) profiles: usize,
    /// Exited 0 but left no profile: is the instrumented library really the
    /// one loaded (`LD_LIBRARY_PATH`)?
    pub(crate) no_profile: bool,
    /// The trial's incremental merge, when it ran.
    pub(crate) merge: Option<crate::coverage::profiles::TrialMerge>,
    pub(crate) merge_error: Option<String>,
    /// Profiles found in its folder that were not its own (another
    /// process's), moved to quarantine and never merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) foreign: Vec<crate::coverage::profiles::Quarantined>,
    /// Its own profiles that no merge could use (empty, truncated, of
    /// another LLVM, too large), moved to quarantine before the merge.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) rejected: Vec<crate::coverage::profiles::Quarantined>,
    /// Why the trial's device counters are lost, when it ran under device
    /// coverage and was killed: the host collector drains them only at exit
    /// and at module unload, never on a signal.
    #[serde(default)]
    pub(crate) device_counters_lost: Option<String>,
    /// SHA-256 of the raw profiles left unmerged, by file name.
    #[serde(default)]
    pub(crate) raw_sha256: std::collections::BTreeMap<String, String>,
    /// Checksums of the NVIDIA collector's kernel records it left, by file name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub(crate) device_sha256: std::collections::BTreeMap<String, String>,
    /// Processes still alive after the trial's main process exited.
    pub(crate) leftovers: usize,
    /// Bytes of output the log's cap (`logs.max_mib`) cut out of its middle.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) output_cut_bytes: u64,
    /// What held the trial's processes: `cgroup` or `process_tree`.
    #[serde(default)]
    pub(crate) containment: Containment,
    /// Why it had no cgroup (`CCL_COV_CGROUP=off`, none to be had here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) no_cgroup: Option<String>,
    pub(crate) perf: PerfReport,
    /// The test cases the trial ran (gtest tests, pytest items).
    #[serde(default)]
    pub(crate) cases: Vec<Case>,
    /// The diagnostic rerun of a failed trial (`CCL_COV_RERUN_FAILED=1`); it
    /// never changes the verdict.
    #[serde(default)]
    pub(crate) rerun: Option<Box<Rerun>>,
    /// The attempts before this one that did not pass (`--retries`): with a
    /// pass, the trial is flaky.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) attempts: Vec<Attempt>,
    /// Passed after failing (`attempts` is not empty): said in every
    /// format, as nextest does, so that a retry does not hide a flaky trial.
    #[serde(default)]
    pub(crate) flaky: bool,
}

/// An attempt at a trial that did not pass and was run again (`--retries`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Attempt {
    pub(crate) status: Status,
    pub(crate) reason: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) duration_s: f64,
    /// The last lines of its log (the log itself is the last attempt's).
    pub(crate) log_tail: String,
}

impl Attempt {
    pub(crate) fn of(result: &TrialResult, log_tail: &str) -> Attempt {
        Attempt {
            status: result.status,
            reason: result.reason.clone(),
            exit_code: result.exit_code,
            signal: result.signal,
            duration_s: result.duration_s,
            log_tail: log_tail.to_string(),
        }
    }
}

fn perf_kind() -> TrialKind {
    TrialKind::Perf
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A failed trial's second attempt, with its `rerun_env_variables`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Rerun {
    pub(crate) status: Status,
    pub(crate) reason: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) duration_s: f64,
    pub(crate) command: String,
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) log: PathBuf,
    #[serde(default)]
    pub(crate) cases: Vec<Case>,
}

impl Rerun {
    pub fn new(execution: &Execution, verdict: &Verdict, cases: Vec<Case>) -> Rerun {
        let (exit_code, signal) = execution.exit();
        let cmd = &execution.launch.cmd;
        Rerun {
            status: verdict.status,
            reason: verdict.reason.clone(),
            exit_code,
            signal,
            duration_s: execution.finished.duration.as_secs_f64(),
            command: cmd.display(),
            argv: cmd.argv(),
            env: execution.launch.env.clone(),
            log: execution.log.clone(),
            cases,
        }
    }
}

/// Which trial a record is of: the plan's entry, the build and the run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrialIdentity<'a> {
    pub(crate) spec: &'a TrialSpec,
    pub(crate) config: &'a Config,
    pub(crate) manifest: &'a BuildManifest,
    pub(crate) run_id: &'a str,
}

/// Under device coverage, why a killed trial's device counters are gone.
fn device_counters_lost(manifest: &BuildManifest, execution: &Execution, verdict: &Verdict) -> Option<String> {
    let killed = match &execution.finished.ending {
        Ending::TimedOut { .. } | Ending::Interrupted { .. } | Ending::SupervisorLost { .. } => true,
        Ending::Exited(status) => status.signal().is_some(),
    };
    (manifest.device.enabled && killed).then(|| {
        format!("{}: device counters are drained only when a process exits or unloads a module", verdict.reason)
    })
}

impl TrialResult {
    /// The record of a trial that did not run because its run's shared
    /// build failed: `FAILED` with the build's error, counted in `run.json`
    /// and JUnit like any failure. `build_id` is the key of the build that
    /// failed (empty when not even its plan could be made).
    pub(crate) fn unrun(spec: &TrialSpec, config: &Config, build_id: &str, run_id: &str, reason: &str) -> TrialResult {
        TrialResult {
            trial: spec.name.clone(),
            slug: spec.slug.clone(),
            collective: spec.group(config),
            size: spec.size().to_string(),
            variant: match spec.upstream() {
                Some(u) => Some(u.test.name.clone()),
                None => spec.variant(config).map(|v| v.name.to_string()),
            },
            kind: spec.kind(),
            build_id: build_id.to_string(),
            run_id: run_id.to_string(),
            status: Status::Failed,
            reason: reason.to_string(),
            exit_code: None,
            signal: None,
            started_at: crate::exec::host::now(),
            started_unix_ms: crate::exec::host::unix_ms(),
            duration_s: 0.0,
            slot_wait_s: 0.0,
            timeout_s: 0,
            launcher: spec.launcher.clone(),
            ranks: spec.ranks,
            command: String::new(),
            argv: Vec::new(),
            env: Vec::new(),
            cwd: PathBuf::new(),
            log: PathBuf::new(),
            profile_dir: PathBuf::new(),
            profiles: 0,
            no_profile: false,
            merge: None,
            merge_error: None,
            foreign: Vec::new(),
            rejected: Vec::new(),
            device_counters_lost: None,
            raw_sha256: std::collections::BTreeMap::new(),
            device_sha256: std::collections::BTreeMap::new(),
            leftovers: 0,
            output_cut_bytes: 0,
            perf: PerfReport::default(),
            cases: Vec::new(),
            rerun: None,
            containment: Containment::default(),
            no_cgroup: Some("the trial did not run".into()),
            attempts: Vec::new(),
            flaky: false,
        }
    }

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
            collective: spec.group(config),
            size: spec.size().to_string(),
            variant: match spec.upstream() {
                Some(u) => Some(u.test.name.clone()),
                None => spec.variant(config).map(|v| v.name.to_string()),
            },
            kind: execution.launch.kind,
            build_id: manifest.build_id.clone(),
            run_id: run_id.to_string(),
            status: verdict.status,
            reason: verdict.reason.clone(),
            exit_code,
            signal,
            started_at: execution.started_at.clone(),
            started_unix_ms: execution.started_unix_ms,
            duration_s: execution.finished.duration.as_secs_f64(),
            slot_wait_s: 0.0,
            timeout_s: execution.launch.timeout.as_secs(),
            launcher: spec.launcher.clone(),
            ranks: spec.ranks,
            command: cmd.display(),
            argv: cmd.argv(),
            env: execution.launch.env.clone(),
            cwd: cmd.get_cwd().map(Path::to_path_buf).unwrap_or_default(),
            log: execution.log.clone(),
            profile_dir: profiles.dir.clone(),
            profiles: profiles.raw,
            no_profile: manifest.coverage && exit_code == Some(0) && profiles.raw == 0 && profiles.rejected.is_empty(),
            merge: profiles.merge,
            merge_error: profiles.error,
            foreign: profiles.foreign,
            rejected: profiles.rejected,
            device_counters_lost: device_counters_lost(manifest, execution, verdict),
            raw_sha256: profiles.raw_sha256,
            device_sha256: profiles.device_sha256,
            leftovers: execution.finished.leftovers,
            output_cut_bytes: execution.finished.output_cut,
            containment: execution.finished.containment,
            no_cgroup: execution.finished.no_cgroup.clone(),
            perf,
            cases: Vec::new(),
            rerun: None,
            attempts: Vec::new(),
            flaky: false,
        }
    }

    /// What libtest shows for a trial that did not pass: the verdict, the
    /// command (redacted), the log and its last lines; `None` if it passed.
    /// `tail`: the log's last lines, as [`crate::verdict::output::TrialOutput::tail`] gives them.
    pub(crate) fn failure_message(&self, tail: &str) -> Option<String> {
        if self.status == Status::Passed {
            return None;
        }
        Some(format!(
            "{}: {}\ncommand: {}\nlog: {}\nlast lines of the log:\n{}",
            self.status.as_str(),
            self.reason,
            redact::shell_line(&self.command),
            self.log.display(),
            tail
        ))
    }

    /// The record with secrets masked in its command, argv and environment
    /// (see [`crate::exec::redact`]); `run.json` and JUnit are built from the
    /// written records, so they never see the real values either.
    pub(crate) fn redacted(&self) -> TrialResult {
        TrialResult {
            command: redact::shell_line(&self.command),
            argv: redact::argv(&self.argv),
            env: redact::env(&self.env),
            rerun: self.rerun.as_ref().map(|r| {
                Box::new(Rerun {
                    command: redact::shell_line(&r.command),
                    argv: redact::argv(&r.argv),
                    env: redact::env(&r.env),
                    ..(**r).clone()
                })
            }),
            ..self.clone()
        }
    }

    /// What the trial recorded about its stored profiles, for the report's checks.
    pub(crate) fn recorded_profiles(&self) -> crate::coverage::profiles::Recorded<'_> {
        crate::coverage::profiles::Recorded {
            trial: &self.trial,
            slug: &self.slug,
            merge: self.merge.as_ref(),
            raw_sha256: &self.raw_sha256,
            merge_error: self.merge_error.as_deref(),
        }
    }

    /// Writes `results/<slug>.json`, redacted whatever the caller filled in.
    pub(crate) fn write(&self, ws: &Workspace) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.redacted()).expect("result serializes");
        ws.write(&ws.trial_result(&self.slug), text.as_bytes())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) total: usize,
    pub(crate) passed: usize,
    pub(crate) failed: usize,
    pub(crate) timeout: usize,
    #[serde(default)]
    pub(crate) interrupted: usize,
    /// Passed on a retry (counted in `passed` too).
    #[serde(default)]
    pub(crate) flaky: usize,
    pub(crate) duration_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunJson {
    pub(crate) schema_version: u32,
    /// Which run, of what, where.
    #[serde(flatten)]
    pub(crate) header: RunHeader,
    /// The build the records are of; `null` only when a failed build had
    /// not even a plan (then `build_error` says why).
    pub(crate) build: Option<BuildManifest>,
    /// Why this run's shared build failed, when it did: its trials are
    /// recorded as failed, not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) build_error: Option<String>,
    /// When this run's first trial started.
    pub(crate) started_at: Option<String>,
    pub(crate) finished_at: String,
    /// The trials this run ran.
    pub(crate) ran: Vec<String>,
    /// Earlier runs of the same build whose records `trials` also holds:
    /// trials this run did not run again.
    pub(crate) earlier_runs: Vec<EarlierRun>,
    /// Over `trials`, this run's and earlier runs'.
    pub(crate) summary: Summary,
    /// How many of `trials` ran in a cgroup of their own, and how many were
    /// held by their process tree alone.
    #[serde(default)]
    pub(crate) containment: std::collections::BTreeMap<Containment, usize>,
    pub(crate) trials: Vec<TrialResult>,
    /// Trials this run selected but did not run because they are ignored,
    /// and have no record: JUnit lists them as skipped.
    #[serde(default)]
    pub(crate) ignored: Vec<Ignored>,
}

/// A trial the run ignored, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Ignored {
    pub(crate) trial: String,
    pub(crate) reason: String,
}

/// What a run says of itself, set when it starts: the head of `run.json`,
/// repeated by every rewrite of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunHeader {
    /// This run's config (a cached build may have been made by another one).
    pub(crate) config: String,
    pub(crate) config_path: PathBuf,
    pub(crate) description: String,
    pub(crate) host: String,
    /// One line per GPU (`nvidia-smi -L` or `rocm-smi --showproductname`), if any.
    pub(crate) gpus: Vec<String>,
    pub(crate) library_git_sha: Option<String>,
    /// This run's id ([`super::run_id`]), also in each of its trials' records.
    pub(crate) run_id: String,
}

/// Records to test with: trial `T::<i>`, slug `T.<i>`, of build `b1`, run `r`, passed.
/// A run whose records are still in `results/`: each trial's record is
/// replaced only when the trial runs again, so after a partial run the
/// records of the other trials are those of earlier runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EarlierRun {
    pub(crate) run_id: String,
    /// When its first trial still recorded started.
    pub(crate) started_at: String,
    pub(crate) trials: Vec<String>,
}

impl EarlierRun {
    pub(super) fn describe(&self) -> String {
        format!("{} (run {}, started {})", self.trials.join(", "), self.run_id, self.started_at)
    }
}

#[cfg(test)]
pub(super) mod samples {
    use super::*;

    pub(crate) fn trial_name(i: usize) -> String {
        format!("T::{i}")
    }

    pub(crate) fn trial(i: usize) -> TrialResult {
        TrialResult {
            trial: trial_name(i),
            slug: format!("T.{i}"),
            collective: "T".into(),
            size: i.to_string(),
            variant: None,
            kind: TrialKind::Perf,
            build_id: "b1".into(),
            run_id: "r".into(),
            status: Status::Passed,
            reason: String::new(),
            exit_code: Some(0),
            signal: None,
            started_at: String::new(),
            started_unix_ms: 0,
            duration_s: 0.1,
            slot_wait_s: 0.0,
            timeout_s: 10,
            launcher: "l".into(),
            ranks: 1,
            command: "t".into(),
            argv: vec!["t".into()],
            env: Vec::new(),
            cwd: "/".into(),
            log: "/l".into(),
            profile_dir: "/p".into(),
            profiles: 1,
            no_profile: false,
            merge: None,
            merge_error: None,
            foreign: Vec::new(),
            rejected: Vec::new(),
            raw_sha256: Default::default(),
            device_sha256: Default::default(),
            device_counters_lost: None,
            leftovers: 0,
            output_cut_bytes: 0,
            containment: Containment::ProcessTree,
            no_cgroup: None,
            perf: PerfReport::default(),
            cases: Vec::new(),
            rerun: None,
            attempts: Vec::new(),
            flaky: false,
        }
    }
}
