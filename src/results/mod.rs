//! Run results: one JSON record per trial, written atomically as the trial
//! ends, plus `run.json` and `junit.xml`, views of those records kept current
//! during the run ([`RunWriter`]), so they exist even if the run is
//! interrupted or the coverage report later fails (upstream exits before
//! writing its results when coverage fails).

use crate::bail;
use crate::build::cache::BuildManifest;
use crate::config::Config;
use crate::coverage::profiles::MergeOutcome;
use crate::error::{Context, Error, Result};
use crate::exec::redact;
use crate::exec::supervisor::Containment;
use crate::plan::TrialSpec;
use crate::trial::{Ending, Execution};
use crate::upstream::TrialKind;
use crate::verdict::perf::PerfReport;
use crate::verdict::{Case, CaseStatus, Status, Verdict};
use crate::workspace::{self, Workspace};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
    pub(crate) duration_s: f64,
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
            no_profile: manifest.coverage && exit_code == Some(0) && profiles.raw == 0,
            merge: profiles.merge,
            merge_error: profiles.error,
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

/// The trials of the config's plan, by name, with their file names.
pub(crate) type Planned = std::collections::BTreeMap<String, String>;

/// Records parsed by an earlier rebuild of `run.json`, by file name, with
/// what the file was then: a rebuild while the trials run parses only the
/// records written since, so its cost does not grow with every record
/// parsed again (issue #35). The last rebuild of a run reads everything.
#[derive(Default)]
struct ParsedRecords(HashMap<String, (Stamp, TrialResult)>);

/// A file's identity and last change, as `fstat` gives them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The record in `path` (a regular file of the workspace), parsed, or from
/// `cache` when the file is what it was when it was parsed there.
fn read_record(ws: &Workspace, path: &Path, name: &str, cache: Option<&mut ParsedRecords>) -> Result<TrialResult> {
    let Some(cache) = cache else {
        let bytes = ws.read_opt(path)?.ok_or_else(|| Error::new("it vanished while it was read"))?;
        return Ok(serde_json::from_slice::<TrialResult>(&bytes)?);
    };
    let mut file = ws.open_read(path)?;
    let stamp = Stamp::of(&file.metadata().with_context(|| format!("cannot stat {}", path.display()))?);
    if let Some((seen, result)) = cache.0.get(name)
        && *seen == stamp
    {
        return Ok(result.clone());
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    let result = serde_json::from_slice::<TrialResult>(&bytes)?;
    cache.0.insert(name.to_string(), (stamp, result.clone()));
    Ok(result)
}

/// What `results/` holds for one build.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The records of this build's planned trials, by trial name.
    pub(crate) results: Vec<TrialResult>,
    /// Records that cannot be read as a trial's result, or are not the
    /// record their file name says, and why: a damaged record must be
    /// named, not skipped.
    pub(crate) damaged: Vec<(PathBuf, String)>,
    /// Records of another build, with its id: never counted. A build change
    /// deletes them (`cache::adopt`); one found anyway is named.
    pub(crate) other_builds: Vec<(PathBuf, String)>,
}

/// The trial results in the workspace recorded for build `build_id`, of the
/// trials named in `planned` (results of trials the config no longer has are
/// left out), with the records it leaves out and why. Each entry is
/// read only if it is a regular file (through the workspace's handle, so a
/// FIFO cannot hang the read nor a link lead elsewhere), and trusted only as
/// the record of the trial its file name says: a copy of `one.json` saved as
/// `two.json` would count `one` twice.
pub(crate) fn load_checked(ws: &Workspace, build_id: &str, planned: &Planned) -> Result<Loaded> {
    load_checked_with(ws, build_id, planned, None)
}

fn load_checked_with(
    ws: &Workspace,
    build_id: &str,
    planned: &Planned,
    mut cache: Option<&mut ParsedRecords>,
) -> Result<Loaded> {
    let dir = ws.results_dir();
    let mut results = Vec::new();
    let mut damaged = Vec::new();
    let mut other_builds = Vec::new();
    for (name, kind) in ws.list(&dir)? {
        let name = name.to_string_lossy().into_owned();
        let path = dir.join(&name);
        let json = Path::new(&name).extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        // A name with a leading dot is no trial's (`check_slug`): a write in progress.
        if !json || name == "run.json" || name.starts_with('.') {
            continue;
        }
        let stem = &name[..name.len() - ".json".len()];
        let parsed = match kind {
            workspace::confined::EntryKind::File => read_record(ws, &path, &name, cache.as_deref_mut()),
            other => Err(Error::new(format!("it is {}, not a regular file", other.describe()))),
        };
        match parsed.and_then(|result| trusted_as(result, stem, planned)) {
            Ok(result) if result.build_id != build_id => other_builds.push((path, result.build_id)),
            Ok(result) if planned.contains_key(&result.trial) => results.push(result),
            Ok(_) => {}
            Err(why) => damaged.push((path, why.to_string())),
        }
    }
    results.sort_by(|a, b| a.trial.cmp(&b.trial));
    damaged.sort();
    other_builds.sort();
    Ok(Loaded { results, damaged, other_builds })
}

/// `result`, read from `<stem>.json`, if it is that file's record: its slug
/// is the file's name and, for a trial of the plan, the plan's slug for it.
fn trusted_as(result: TrialResult, stem: &str, planned: &Planned) -> Result<TrialResult> {
    if result.slug != stem {
        bail!(
            "it is the record of trial {} (results/{}.json), not of {stem}: a copied or moved record is not trusted",
            result.trial,
            result.slug
        );
    }
    match planned.get(&result.trial) {
        Some(slug) if *slug != result.slug => Err(Error::new(format!(
            "it names trial {}, whose record is results/{slug}.json, not {stem}.json: not trusted",
            result.trial
        ))),
        _ => Ok(result),
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

/// This run's id: nextest's, when nextest runs the trials (one process
/// each, one run), else this process's start time and pid.
pub(crate) fn run_id() -> String {
    match std::env::var(crate::env_names::NEXTEST_RUN_ID).ok().filter(|id| !id.is_empty()) {
        Some(id) => format!("nextest-{id}"),
        None => format!("{}-{}", crate::exec::host::now(), std::process::id()),
    }
}

/// A run whose records are still in `results/`: each trial's record is
/// replaced only when the trial runs again, so after a partial run the
/// records of the other trials are those of earlier runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunOf {
    pub(crate) run_id: String,
    /// When its first trial still recorded started.
    pub(crate) started_at: String,
    pub(crate) trials: Vec<String>,
}

impl RunOf {
    fn describe(&self) -> String {
        format!("{} (run {}, started {})", self.trials.join(", "), self.run_id, self.started_at)
    }
}

/// The runs that `results` (sorted by trial) come from, by when they started.
pub(crate) fn runs(results: &[TrialResult]) -> Vec<RunOf> {
    let mut runs: Vec<RunOf> = Vec::new();
    for r in results {
        match runs.iter_mut().find(|run| run.run_id == r.run_id) {
            Some(run) => {
                run.trials.push(r.trial.clone());
                if r.started_at < run.started_at {
                    run.started_at.clone_from(&r.started_at);
                }
            }
            None => runs.push(RunOf {
                run_id: r.run_id.clone(),
                started_at: r.started_at.clone(),
                trials: vec![r.trial.clone()],
            }),
        }
    }
    runs.sort_by(|a, b| (&a.started_at, &a.run_id).cmp(&(&b.started_at, &b.run_id)));
    runs
}

/// The records of one build split by run: the latest run (that of the
/// trial that started last; runs of one workspace never overlap, they hold
/// its lock) and the earlier runs whose records are still there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Runs {
    pub(crate) latest: Option<RunOf>,
    pub(crate) earlier: Vec<RunOf>,
}

impl Runs {
    pub(crate) fn of(results: &[TrialResult]) -> Runs {
        let Some(newest) = results.iter().max_by_key(|r| r.started_unix_ms) else { return Runs::default() };
        let (mut latest, earlier): (Vec<RunOf>, Vec<RunOf>) =
            runs(results).into_iter().partition(|r| r.run_id == newest.run_id);
        Runs { latest: latest.pop(), earlier }
    }

    /// Says plainly how many results come from earlier runs, which and
    /// when; `None` when they all come from the latest run.
    pub(crate) fn mixed(&self) -> Option<String> {
        let latest = self.latest.as_ref()?;
        if self.earlier.is_empty() {
            return None;
        }
        let earlier: usize = self.earlier.iter().map(|r| r.trials.len()).sum();
        let runs: Vec<String> = self.earlier.iter().map(RunOf::describe).collect();
        Some(format!(
            "{earlier} of {} trial results come from earlier runs of this build, not from the latest run ({}, started {}): {}",
            earlier + latest.trials.len(),
            latest.run_id,
            latest.started_at,
            runs.join("; ")
        ))
    }
}

impl Runs {
    /// [`Runs::mixed`] in short, for a line on the terminal: `meta.json`
    /// and `run.json` name the runs and their trials (`earlier_runs`).
    pub(crate) fn mixed_short(&self) -> Option<String> {
        let latest = self.latest.as_ref()?;
        let (earlier, _) = earlier_results(&self.earlier)?;
        Some(format!(
            "{earlier} of {} trial results come from earlier runs of this build",
            earlier + latest.trials.len()
        ))
    }
}

/// How many results `earlier` (by when they started) hold, and the oldest
/// run of them (`run R, started T`); `None` when there is none.
fn earlier_results(earlier: &[RunOf]) -> Option<(usize, String)> {
    let oldest = earlier.first()?;
    let count = earlier.iter().map(|r| r.trials.len()).sum();
    Some((count, format!("run {}, started {}", oldest.run_id, oldest.started_at)))
}

/// `the report also uses 39 results of earlier runs of this build (oldest:
/// run R, started T)`, when `earlier` holds any.
pub(crate) fn also_uses(earlier: &[RunOf]) -> Option<String> {
    let (count, oldest) = earlier_results(earlier)?;
    let results = if count == 1 { "result" } else { "results" };
    Some(format!("the report also uses {count} {results} of earlier runs of this build (oldest: {oldest})"))
}

/// The build a run's records are of.
#[derive(Debug, Clone)]
pub(crate) enum RunBuild {
    Built(BuildManifest),
    /// The build failed: its planned manifest, when it had a plan, and why.
    Failed {
        planned: Option<BuildManifest>,
        error: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub(crate) schema_version: u32,
    pub(crate) config: String,
    pub(crate) config_path: PathBuf,
    pub(crate) description: String,
    pub(crate) host: String,
    /// One line per GPU (`nvidia-smi -L` or `rocm-smi --showproductname`), if any.
    pub(crate) gpus: Vec<String>,
    pub(crate) library_git_sha: Option<String>,
    /// The build the records are of; `null` only when a failed build had
    /// not even a plan (then `build_error` says why).
    pub(crate) build: Option<BuildManifest>,
    /// Why this run's shared build failed, when it did: its trials are
    /// recorded as failed, not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) build_error: Option<String>,
    /// This run's id (also in each of its trials' records).
    pub(crate) run_id: String,
    /// When this run's first trial started.
    pub(crate) started_at: Option<String>,
    pub(crate) finished_at: String,
    /// The trials this run ran.
    pub(crate) ran: Vec<String>,
    /// Earlier runs of the same build whose records `trials` also holds:
    /// trials this run did not run again.
    pub(crate) earlier_runs: Vec<RunOf>,
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

/// Static facts of a run that every rewrite of `run.json` repeats.
#[derive(Clone)]
pub(crate) struct RunInfo {
    /// This run's config (a cached build may have been made by another one).
    pub(crate) config: String,
    pub(crate) config_path: PathBuf,
    pub(crate) description: String,
    pub(crate) host: String,
    pub(crate) gpus: Vec<String>,
    pub(crate) library_git_sha: Option<String>,
    /// Every trial of the config's plan, ignored ones included.
    pub(crate) planned: Planned,
    /// The trials the name filter selected that this run does not run
    /// because they are ignored; those the filter left out are not here.
    pub(crate) ignored: Vec<Ignored>,
    /// [`run_id`].
    pub(crate) run_id: String,
}

/// Records finished trials and keeps `run.json` and `junit.xml` current
/// without rewriting them after every trial.
///
/// The per-trial records are the journal: each is one atomic write of its
/// own file, so recording a trial costs the same whatever the run's size, and
/// after a SIGKILL every trial that ended is readable (`load_checked`, which
/// `coverage_report` uses). `run.json` and `junit.xml` are views rebuilt from
/// those records, which costs O(trials); rebuilding them after every trial
/// made a run O(trials²). So they are rebuilt, always atomically and under the
/// workspace's `.lock`:
///
/// - at once when a trial ends and `run.json` is older than the interval (the
///   first trial's result is there before the next one starts), otherwise
///   by a background thread once the interval has passed: they lag the
///   records by at most the interval;
/// - the interval is 1 s, or 20 times what the last rebuild took, so
///   rebuilding takes at most 5 % of one core however many trials there are;
/// - at the end of the run (interrupted or not) by the last process that
///   recorded a trial: each holds `.writers.lock` shared while it runs, and on
///   finishing, under `.lock`, lets go of it and rebuilds only if it can then
///   take it exclusively. The processes of one nextest run (one trial each)
///   thus rebuild only when `run.json` is older than the interval (its age is
///   shared, being the file's), and leave the final rebuild to the last of
///   them instead of each paying O(trials) at its end.
///
/// A separate journal (one `run.jsonl` line per trial) was not needed: it would
/// duplicate the per-trial files, which the report reads anyway.
/// Cloned, it is the same writer: the line worker records through it too.
#[derive(Clone)]
pub(crate) struct RunWriter {
    shared: Arc<WriterShared>,
    flusher: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

struct WriterShared {
    ws: Workspace,
    state: Mutex<WriterState>,
    wake: Condvar,
    parsed: Mutex<ParsedRecords>,
}

#[derive(Default)]
struct WriterState {
    /// The build and run facts, from the first trial recorded.
    run: Option<Arc<(RunBuild, RunInfo)>>,
    /// Records written since the views were last rebuilt.
    dirty: bool,
    interval: Duration,
    stopping: bool,
    /// `.writers.lock`, held shared from the first trial recorded.
    writers: Option<File>,
}

/// Shortest time between two rebuilds of `run.json`.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// A rebuild waits this many times its own last duration, so that rebuilding
/// (which grows with the records) takes at most 1 % of a core.
const COST_FACTOR: u32 = 100;

impl RunWriter {
    pub fn new(ws: Workspace) -> RunWriter {
        let state = WriterState { interval: MIN_INTERVAL, ..WriterState::default() };
        RunWriter {
            shared: Arc::new(WriterShared {
                ws,
                state: Mutex::new(state),
                wake: Condvar::new(),
                parsed: Mutex::new(ParsedRecords::default()),
            }),
            flusher: Arc::new(Mutex::new(None)),
        }
    }

    /// Writes `results/<slug>.json` and schedules `run.json` and `junit.xml`.
    pub(crate) fn record(&self, result: &TrialResult, build: RunBuild, info: &RunInfo) -> Result<()> {
        let shared = &self.shared;
        result.write(&shared.ws)?;
        let interval = {
            let mut state = shared.lock();
            if state.writers.is_none() {
                let file = shared.ws.open_lock(&shared.ws.writers_lock_file())?;
                file.lock_shared().map_err(|e| lock_error(&shared.ws.writers_lock_file(), e))?;
                state.writers = Some(file);
            }
            if state.run.is_none() {
                state.run = Some(Arc::new((build, info.clone())));
            }
            state.dirty = true;
            state.interval
        };
        if shared.until_due(interval).is_zero() {
            return shared.rebuild();
        }
        let mut flusher = self.flusher.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if flusher.is_none() {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name("ccl-cov-run-json".into())
                .spawn(move || shared.flush_in_background())
                .context("cannot start the thread that writes run.json")?;
            *flusher = Some(thread);
        }
        shared.wake.notify_all();
        Ok(())
    }

    /// The build and run facts of the first trial recorded, for recording
    /// a trial again from another thread.
    pub(crate) fn run_facts(&self) -> Option<(RunBuild, RunInfo)> {
        self.shared.lock().run.as_deref().cloned()
    }

    /// Ends this process's part of the run: rebuilds `run.json` and
    /// `junit.xml` if no other process of the run is still recording.
    pub(crate) fn finish(&self) -> Result<()> {
        let shared = &self.shared;
        shared.lock().stopping = true;
        shared.wake.notify_all();
        if let Some(thread) = self.flusher.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = thread.join();
        }
        let (Some(writers), Some(run)) = ({
            let mut state = shared.lock();
            (state.writers.take(), state.run.clone())
        }) else {
            return Ok(());
        };
        let _lock = lock_workspace(&shared.ws)?;
        writers.unlock().map_err(|e| lock_error(&shared.ws.writers_lock_file(), e))?;
        if writers.try_lock().is_err() {
            return Ok(());
        }
        write_run(&shared.ws, &run.0, &run.1, None)
    }
}

impl WriterShared {
    fn lock(&self) -> MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long until `run.json` is `interval` old (it may have been rebuilt
    /// by another process of the run).
    fn until_due(&self, interval: Duration) -> Duration {
        let age = (self.ws.open_read(&self.ws.results_dir().join("run.json")).ok())
            .and_then(|f| f.metadata().ok())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok());
        age.map_or(Duration::ZERO, |age| interval.saturating_sub(age))
    }

    /// Rebuilds the views from the records, and times it to set the interval.
    fn rebuild(&self) -> Result<()> {
        let run = {
            let mut state = self.lock();
            state.dirty = false;
            state.run.clone().expect("a trial was recorded")
        };
        let started = Instant::now();
        let mut parsed = self.parsed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let written = lock_workspace(&self.ws).and_then(|_lock| write_run(&self.ws, &run.0, &run.1, Some(&mut parsed)));
        self.lock().interval = MIN_INTERVAL.max(started.elapsed() * COST_FACTOR);
        written
    }

    fn flush_in_background(&self) {
        let mut state = self.lock();
        while !state.stopping {
            if !state.dirty {
                state = self.wake.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            let wait = self.until_due(state.interval);
            if !wait.is_zero() {
                state = self.wake.wait_timeout(state, wait).unwrap_or_else(std::sync::PoisonError::into_inner).0;
                continue;
            }
            drop(state);
            // The end of the run tries again.
            if let Err(e) = self.rebuild() {
                crate::say!("ccl-coverage: cannot update run.json: {e}");
            }
            state = self.lock();
        }
    }
}

fn lock_error(path: &Path, e: std::io::Error) -> Error {
    Error::from(e).context(format_args!("cannot lock {}", path.display()))
}

/// The workspace's `.lock`, held while `run.json` is rebuilt.
fn lock_workspace(ws: &Workspace) -> Result<File> {
    let lock = ws.open_lock(&ws.lock_file())?;
    lock.lock().map_err(|e| lock_error(&ws.lock_file(), e))?;
    Ok(lock)
}

/// Rewrites `results/run.json` and `results/junit.xml` from the trial records
/// of the run's build; the caller holds the workspace's `.lock`.
fn write_run(ws: &Workspace, run_build: &RunBuild, info: &RunInfo, cache: Option<&mut ParsedRecords>) -> Result<()> {
    let (manifest, build_error) = match run_build {
        RunBuild::Built(manifest) => (Some(manifest), None),
        RunBuild::Failed { planned, error } => (planned.as_ref(), Some(error.clone())),
    };
    let build_id = manifest.map_or("", |m| m.build_id.as_str());
    // Records written by an older harness may predate redaction.
    let trials: Vec<TrialResult> =
        load_checked_with(ws, build_id, &info.planned, cache)?.results.iter().map(TrialResult::redacted).collect();
    let mut build = manifest.cloned();
    for step in build.iter_mut().flat_map(|b| &mut b.steps) {
        step.command = redact::shell_line(&step.command);
    }
    let count = |s: Status| trials.iter().filter(|t| t.status == s).count();
    let (this, earlier_runs): (Vec<RunOf>, Vec<RunOf>) =
        runs(&trials).into_iter().partition(|r| r.run_id == info.run_id);
    let this = this.into_iter().next();
    let recorded: BTreeSet<&str> = trials.iter().map(|t| t.trial.as_str()).collect();
    let ignored = info.ignored.iter().filter(|i| !recorded.contains(i.trial.as_str())).cloned().collect();
    let record = RunRecord {
        schema_version: 2,
        config: info.config.clone(),
        config_path: info.config_path.clone(),
        description: info.description.clone(),
        host: info.host.clone(),
        gpus: info.gpus.clone(),
        library_git_sha: info.library_git_sha.clone(),
        build,
        build_error,
        run_id: info.run_id.clone(),
        started_at: this.as_ref().map(|r| r.started_at.clone()),
        finished_at: crate::exec::host::now(),
        ran: this.map(|r| r.trials).unwrap_or_default(),
        earlier_runs,
        summary: Summary {
            total: trials.len(),
            passed: count(Status::Passed),
            failed: count(Status::Failed),
            timeout: count(Status::Timeout),
            interrupted: count(Status::Interrupted),
            flaky: trials.iter().filter(|t| t.flaky).count(),
            duration_s: trials.iter().map(|t| t.duration_s).sum(),
        },
        containment: trials.iter().fold(std::collections::BTreeMap::new(), |mut by, t| {
            *by.entry(t.containment).or_default() += 1;
            by
        }),
        trials,
        ignored,
    };
    let json = serde_json::to_string_pretty(&record).expect("run record serializes");
    ws.write(&ws.results_dir().join("run.json"), json.as_bytes())?;
    ws.write(&ws.results_dir().join("junit.xml"), junit(&record)?.as_bytes())
}

fn junit(record: &RunRecord) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestRerun, TestSuite};
    let mut suite = TestSuite::new(format!("collectives ({})", record.config));
    let classname = format!("ccl-coverage.{}", record.config);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn setup() -> (tempfile::TempDir, Workspace, BuildManifest, RunInfo) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        let info = RunInfo {
            config: "t".into(),
            config_path: "/c.json".into(),
            description: String::new(),
            host: "h".into(),
            gpus: Vec::new(),
            library_git_sha: None,
            planned: (0..100).map(|i| (trial_name(i), format!("T.{i}"))).collect(),
            ignored: Vec::new(),
            run_id: "r".into(),
        };
        (dir, ws, crate::build::cache::test_manifest("b1"), info)
    }

    fn trial_name(i: usize) -> String {
        format!("T::{i}")
    }

    fn trial(i: usize) -> TrialResult {
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

    /// Trials in `run.json`, and whether `junit.xml` agrees.
    fn trials_in_views(ws: &Workspace) -> Option<usize> {
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(ws.results_dir().join("run.json")).ok()?).unwrap();
        let count = run["trials"].as_array().unwrap().len();
        let junit = std::fs::read_to_string(ws.results_dir().join("junit.xml")).unwrap();
        assert!(junit.contains(&format!("tests=\"{count}\"")), "{junit}");
        Some(count)
    }

    #[test]
    fn views_are_rebuilt_at_once_then_at_most_every_interval_and_at_the_end() {
        let (_d, ws, manifest, info) = setup();
        let writer = RunWriter::new(ws.clone());
        writer.record(&trial(0), RunBuild::Built(manifest.clone()), &info).unwrap();
        assert_eq!(trials_in_views(&ws), Some(1), "the first trial is in run.json at once");
        for i in 1..50 {
            writer.record(&trial(i), RunBuild::Built(manifest.clone()), &info).unwrap();
        }
        let shown = trials_in_views(&ws).unwrap();
        assert!(shown < 50, "run.json was rewritten after every trial");
        assert!(ws.trial_result("T.49").exists(), "each trial's record is written at once");
        // With no further trial, the background thread catches up within the interval.
        let deadline = Instant::now() + Duration::from_secs(20);
        while trials_in_views(&ws) != Some(50) {
            assert!(Instant::now() < deadline, "run.json never caught up");
            std::thread::sleep(Duration::from_millis(50));
        }
        writer.record(&trial(50), RunBuild::Built(manifest.clone()), &info).unwrap();
        writer.finish().unwrap();
        assert_eq!(trials_in_views(&ws), Some(51), "complete at the end");
    }

    #[test]
    fn a_rebuild_parses_only_the_records_that_changed_since_the_last() {
        let (_d, ws, _manifest, info) = setup();
        for i in 0..3 {
            trial(i).write(&ws).unwrap();
        }
        let mut cache = ParsedRecords::default();
        let first = load_checked_with(&ws, "b1", &info.planned, Some(&mut cache)).unwrap();
        assert_eq!((first.results.len(), cache.0.len()), (3, 3));
        // A record written again is read again; the others come from the cache.
        let failed = TrialResult { status: Status::Failed, reason: "again".into(), ..trial(1) };
        failed.write(&ws).unwrap();
        let kept = cache.0["T.0.json"].0;
        let second = load_checked_with(&ws, "b1", &info.planned, Some(&mut cache)).unwrap();
        assert_eq!(
            second.results.iter().map(|r| r.status).collect::<Vec<_>>(),
            [Status::Passed, Status::Failed, Status::Passed]
        );
        assert!(cache.0["T.0.json"].0 == kept);
        // A record that is no longer one is named as damaged, cache or not.
        std::fs::write(ws.trial_result("T.2"), "{").unwrap();
        let third = load_checked_with(&ws, "b1", &info.planned, Some(&mut cache)).unwrap();
        assert_eq!((third.results.len(), third.damaged.len()), (2, 1));
    }

    #[test]
    fn only_the_last_process_of_a_run_rebuilds_the_views_at_its_end() {
        let (_d, ws, manifest, info) = setup();
        // Two writers lock like two processes: an flock belongs to an open file.
        let (a, b) = (RunWriter::new(ws.clone()), RunWriter::new(ws.clone()));
        a.record(&trial(0), RunBuild::Built(manifest.clone()), &info).unwrap();
        b.record(&trial(1), RunBuild::Built(manifest.clone()), &info).unwrap();
        std::fs::remove_file(ws.results_dir().join("run.json")).unwrap();
        a.finish().unwrap();
        assert_eq!(trials_in_views(&ws), None, "b still runs, so a leaves run.json to it");
        b.finish().unwrap();
        assert_eq!(trials_in_views(&ws), Some(2));
    }

    #[test]
    fn run_json_names_this_run_s_trials_and_the_earlier_runs_still_recorded() {
        let (_d, ws, manifest, info) = setup();
        let at = |i: usize, run: &str, day: u64| TrialResult {
            run_id: run.into(),
            started_at: format!("2026-01-0{day}T00:00:00Z"),
            started_unix_ms: day,
            ..trial(i)
        };
        at(1, "r0", 1).write(&ws).unwrap();
        at(2, "r1", 2).write(&ws).unwrap();
        let writer = RunWriter::new(ws.clone());
        writer.record(&at(3, "r", 3), RunBuild::Built(manifest.clone()), &info).unwrap();
        writer.finish().unwrap();
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(ws.results_dir().join("run.json")).unwrap()).unwrap();
        assert_eq!(
            (&run["run_id"], &run["started_at"], &run["ran"]),
            (&json!("r"), &json!("2026-01-03T00:00:00Z"), &json!(["T::3"]))
        );
        assert_eq!(
            run["earlier_runs"],
            json!([
                {"run_id": "r0", "started_at": "2026-01-01T00:00:00Z", "trials": ["T::1"]},
                {"run_id": "r1", "started_at": "2026-01-02T00:00:00Z", "trials": ["T::2"]}
            ])
        );
        assert_eq!(run["summary"]["total"], 3, "every record of the build is counted");
        let loaded = load_checked(&ws, "b1", &info.planned).unwrap().results;
        assert_eq!(
            Runs::of(&loaded).mixed().unwrap(),
            "2 of 3 trial results come from earlier runs of this build, not from the latest run (r, started \
             2026-01-03T00:00:00Z): T::1 (run r0, started 2026-01-01T00:00:00Z); T::2 (run r1, started 2026-01-02T00:00:00Z)"
        );
        assert_eq!(Runs::of(&[at(4, "r", 4), at(5, "r", 5)]).mixed(), None, "one run");
        assert_eq!(Runs::of(&[]), Runs::default());
    }

    #[test]
    fn ignored_trials_are_skipped_in_junit_unless_a_record_of_theirs_is_listed() {
        let (_d, ws, manifest, mut info) = setup();
        let ignored = |i: usize| Ignored { trial: trial_name(i), reason: format!("why {i}") };
        info.ignored = vec![ignored(1), ignored(2)];
        trial(2).write(&ws).unwrap();
        let writer = RunWriter::new(ws.clone());
        writer.record(&trial(0), RunBuild::Built(manifest.clone()), &info).unwrap();
        writer.finish().unwrap();
        let junit = std::fs::read_to_string(ws.results_dir().join("junit.xml")).unwrap();
        assert!(junit.contains("tests=\"3\" skipped=\"1\""), "{junit}");
        assert!(junit.contains("<testcase name=\"T::1\" classname=\"ccl-coverage.t\">"), "{junit}");
        assert!(junit.contains("<skipped message=\"why 1\"/>"), "{junit}");
        assert!(!junit.contains("why 2"), "{junit}");
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(ws.results_dir().join("run.json")).unwrap()).unwrap();
        assert_eq!(run["ignored"], json!([{"trial": "T::1", "reason": "why 1"}]));
    }

    #[test]
    fn a_flaky_pass_keeps_its_failed_attempts_in_run_json_and_junit() {
        let (_d, ws, manifest, info) = setup();
        let failed = TrialResult { status: Status::Failed, reason: "exit status 1".into(), ..trial(1) };
        let flaky = TrialResult { attempts: vec![Attempt::of(&failed, "the end")], flaky: true, ..trial(0) };
        let writer = RunWriter::new(ws.clone());
        writer.record(&flaky, RunBuild::Built(manifest.clone()), &info).unwrap();
        writer.finish().unwrap();
        let junit = std::fs::read_to_string(ws.results_dir().join("junit.xml")).unwrap();
        assert!(
            junit.contains("<flakyFailure ") && junit.contains("message=\"exit status 1\" type=\"FAILED\""),
            "{junit}"
        );
        assert!(junit.contains("the end"), "{junit}");
        let run: Value =
            serde_json::from_str(&std::fs::read_to_string(ws.results_dir().join("run.json")).unwrap()).unwrap();
        assert_eq!((&run["summary"]["flaky"], &run["summary"]["passed"]), (&json!(1), &json!(1)));
        assert_eq!(run["trials"][0]["attempts"][0]["status"], "FAILED");
    }

    #[test]
    fn a_process_that_recorded_nothing_writes_nothing() {
        let (_d, ws, _, _) = setup();
        RunWriter::new(ws.clone()).finish().unwrap();
        assert!(!ws.results_dir().join("run.json").exists());
    }
}
