//! The threaded writer of `run.json` and `junit.xml`: views of the trials'
//! records kept current during the run, so that they exist even if the run is
//! interrupted or the coverage report later fails.

use super::load::{ParsedRecords, Planned, load_checked_with};
use super::record::EarlierRun;
use super::record::{Ignored, RunHeader, RunJson, Summary, TrialResult};
use super::runs::runs;
use crate::build::cache::BuildManifest;
use crate::error::{Context, Error, Result};
use crate::exec::redact;
use crate::verdict::Status;
use crate::workspace::Workspace;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The build a run's records are of.
#[derive(Debug, Clone)]
pub(crate) enum RecordedBuild {
    Built(BuildManifest),
    /// The build failed: its planned manifest, when it had a plan, and why.
    Failed {
        planned: Option<BuildManifest>,
        error: String,
    },
}

/// Static facts of a run that every rewrite of `run.json` repeats.
#[derive(Clone)]
pub(crate) struct RunPlan {
    /// What `run.json` says of the run.
    pub(crate) header: RunHeader,
    /// Every trial of the config's plan, ignored ones included.
    pub(crate) planned: Planned,
    /// The trials the name filter selected that this run does not run
    /// because they are ignored; those the filter left out are not here.
    pub(crate) ignored: Vec<Ignored>,
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
pub(crate) struct RunJsonWriter {
    shared: Arc<WriterShared>,
    flusher: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

struct WriterShared {
    ws: Workspace,
    state: Mutex<WriterState>,
    wake: Condvar,
    parsed: Mutex<ParsedRecords>,
    own: Mutex<Own>,
}

/// What this process's trials were, as it saw them: what `run.json` and
/// `junit.xml` say of them, whatever the disk holds (a trial can rewrite
/// another's record).
#[derive(Default)]
struct Own {
    /// Each trial's record as this process last recorded it (redacted), by file name.
    verdicts: BTreeMap<String, TrialResult>,
    /// Records that could not be written, and why, by file name.
    unwritten: BTreeMap<String, String>,
}

impl Own {
    /// Why the run must fail because of its records: one it could not write,
    /// or one on disk that is not what it wrote (rewritten, replaced, gone).
    fn problems(&self, ws: &Workspace) -> Vec<String> {
        let mut problems: Vec<String> = self
            .unwritten
            .iter()
            .map(|(slug, why)| format!("results/{slug}.json could not be written: {why}"))
            .collect();
        for (slug, mine) in self.verdicts.iter().filter(|(slug, _)| !self.unwritten.contains_key(*slug)) {
            let path = ws.trial_result(slug);
            // Compared as the bytes written: parsing the record back would
            // not always give the same floats (serde_json's fast parser).
            let written = serde_json::to_string_pretty(mine).expect("result serializes");
            match ws.read_opt(&path).ok().flatten() {
                Some(bytes) if bytes == written.as_bytes() => {}
                Some(bytes) => {
                    let says = serde_json::from_slice::<TrialResult>(&bytes)
                        .map_or_else(|_| "something unreadable".to_string(), |t| t.status.as_str().to_string());
                    problems.push(format!(
                        "{} says {says}, but this run saw {} {}: the record was rewritten after the trial wrote it, so it is not trusted; run.json and junit.xml say what the run saw",
                        path.display(),
                        mine.trial,
                        mine.status.as_str()
                    ));
                }
                None => problems.push(format!(
                    "{} is gone since trial {} wrote it ({}); run.json and junit.xml say what the run saw",
                    path.display(),
                    mine.trial,
                    mine.status.as_str()
                )),
            }
        }
        problems
    }
}

#[derive(Default)]
struct WriterState {
    /// The build and run facts, from the first trial recorded.
    run: Option<Arc<(RecordedBuild, RunPlan)>>,
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

impl RunJsonWriter {
    pub fn new(ws: Workspace) -> RunJsonWriter {
        let state = WriterState { interval: MIN_INTERVAL, ..WriterState::default() };
        RunJsonWriter {
            shared: Arc::new(WriterShared {
                ws,
                state: Mutex::new(state),
                wake: Condvar::new(),
                parsed: Mutex::new(ParsedRecords::default()),
                own: Mutex::new(Own::default()),
            }),
            flusher: Arc::new(Mutex::new(None)),
        }
    }

    /// Writes `results/<slug>.json` and schedules `run.json` and `junit.xml`.
    /// The verdict is kept in memory first, and the run's facts before the
    /// record is written: `run.json` and `junit.xml` say what the run saw
    /// even when the record cannot be written.
    pub(crate) fn record(&self, result: &TrialResult, build: RecordedBuild, info: &RunPlan) -> Result<()> {
        let shared = &self.shared;
        shared.own().verdicts.insert(result.slug.clone(), result.redacted());
        {
            let mut state = shared.lock();
            if state.run.is_none() {
                state.run = Some(Arc::new((build, info.clone())));
            }
            state.dirty = true;
        }
        if let Err(e) = result.write(&shared.ws) {
            let why = set_aside_earlier_record(&shared.ws, &result.slug, e.to_string());
            shared.own().unwritten.insert(result.slug.clone(), why);
            return Err(e);
        }
        shared.own().unwritten.remove(&result.slug);
        let interval = {
            let mut state = shared.lock();
            if state.writers.is_none() {
                let file = shared.ws.open_lock(&shared.ws.writers_lock_file())?;
                file.lock_shared().map_err(|e| lock_error(&shared.ws.writers_lock_file(), e))?;
                state.writers = Some(file);
            }
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
    pub(crate) fn run_facts(&self) -> Option<(RecordedBuild, RunPlan)> {
        self.shared.lock().run.as_deref().cloned()
    }

    /// Ends this process's part of the run: rebuilds `run.json` and
    /// `junit.xml` if no other process of the run is still recording. Fails,
    /// naming each, when a record of this process's trials could not be
    /// written or is not on disk as it wrote it.
    pub(crate) fn finish(&self) -> Result<()> {
        let shared = &self.shared;
        shared.lock().stopping = true;
        shared.wake.notify_all();
        if let Some(thread) = self.flusher.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = thread.join();
        }
        let problems = shared.own().problems(&shared.ws);
        let written = self.finish_views();
        if problems.is_empty() {
            return written;
        }
        let mut said = format!(
            "{} record(s) of this run's trials are not what the run saw, so the run fails:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
        if let Err(e) = written {
            said.push_str(&format!("\nand run.json could not be written: {e}"));
        }
        Err(Error::new(said))
    }

    /// With no record written (none could be), this process still writes
    /// the views of what it saw, unless another process of the run is
    /// still recording.
    fn finish_views(&self) -> Result<()> {
        let shared = &self.shared;
        let (writers, Some(run)) = ({
            let mut state = shared.lock();
            (state.writers.take(), state.run.clone())
        }) else {
            return Ok(());
        };
        let _lock = lock_workspace(&shared.ws)?;
        let writers = match writers {
            Some(writers) => {
                writers.unlock().map_err(|e| lock_error(&shared.ws.writers_lock_file(), e))?;
                writers
            }
            None => shared.ws.open_lock(&shared.ws.writers_lock_file())?,
        };
        if writers.try_lock().is_err() {
            return Ok(());
        }
        write_run(&shared.ws, &run.0, &run.1, None, &shared.own().verdicts)
    }
}

impl WriterShared {
    fn lock(&self) -> MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn own(&self) -> MutexGuard<'_, Own> {
        self.own.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let written = lock_workspace(&self.ws).and_then(|_lock| {
            let own = self.own();
            write_run(&self.ws, &run.0, &run.1, Some(&mut parsed), &own.verdicts)
        });
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
                crate::reporter::emit(crate::reporter::Event::RunJsonNotUpdated { why: &e.to_string() });
            }
            state = self.lock();
        }
    }
}

/// After the record of `slug` could not be written (`why`): what lies at
/// its path (an earlier run's record) is moved to quarantine, so that no
/// reader takes it for this run's; `why`, with what became of it.
fn set_aside_earlier_record(ws: &Workspace, slug: &str, why: String) -> String {
    let path = ws.trial_result(slug);
    match ws.kind(&path) {
        Ok(None) => why,
        Ok(Some(_)) => match ws.quarantine_result(slug, &path) {
            Ok(to) => format!("{why}; what lay there (an earlier record) was moved to {}", to.display()),
            Err(e) => format!("{why}; what lies there is not this run's record and could not be moved aside: {e}"),
        },
        Err(e) => format!("{why}; and {} cannot be looked at: {e}", path.display()),
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
/// of the run's build, those of `own` (this process's trials, by file name)
/// as this process saw them, whatever the disk says; the caller holds the
/// workspace's `.lock`.
fn write_run(
    ws: &Workspace,
    run_build: &RecordedBuild,
    info: &RunPlan,
    cache: Option<&mut ParsedRecords>,
    own: &BTreeMap<String, TrialResult>,
) -> Result<()> {
    let (manifest, build_error) = match run_build {
        RecordedBuild::Built(manifest) => (Some(manifest), None),
        RecordedBuild::Failed { planned, error } => (planned.as_ref(), Some(error.clone())),
    };
    let build_id = manifest.map_or("", |m| m.build_id.as_str());
    // Records written by an older harness may predate redaction.
    let mut trials: Vec<TrialResult> = load_checked_with(ws, build_id, &info.planned, cache)?
        .results
        .iter()
        .filter(|t| !own.contains_key(&t.slug))
        .map(TrialResult::redacted)
        .collect();
    trials.extend(own.values().filter(|t| t.build_id == build_id).cloned());
    trials.sort_by(|a, b| a.trial.cmp(&b.trial));
    let mut build = manifest.cloned();
    for step in build.iter_mut().flat_map(|b| &mut b.steps) {
        step.command = redact::shell_line(&step.command);
    }
    let count = |s: Status| trials.iter().filter(|t| t.status == s).count();
    let (this, earlier_runs): (Vec<EarlierRun>, Vec<EarlierRun>) =
        runs(&trials).into_iter().partition(|r| r.run_id == info.header.run_id);
    let this = this.into_iter().next();
    let recorded: BTreeSet<&str> = trials.iter().map(|t| t.trial.as_str()).collect();
    let ignored = info.ignored.iter().filter(|i| !recorded.contains(i.trial.as_str())).cloned().collect();
    let record = RunJson {
        schema_version: 2,
        header: info.header.clone(),
        build,
        build_error,
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
        containment: trials.iter().fold(BTreeMap::new(), |mut by, t| {
            *by.entry(t.containment).or_default() += 1;
            by
        }),
        trials,
        ignored,
    };
    let json = serde_json::to_string_pretty(&record).expect("run record serializes");
    ws.write(&ws.results_dir().join("run.json"), json.as_bytes())?;
    ws.write(&ws.results_dir().join("junit.xml"), super::junit::junit(&record)?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::super::load::load_checked;
    use super::super::record::Attempt;
    use super::super::record::samples::{trial, trial_name};
    use super::super::runs::RecordsByRun;
    use super::*;
    use serde_json::{Value, json};

    fn setup() -> (tempfile::TempDir, Workspace, BuildManifest, RunPlan) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        let info = RunPlan {
            header: RunHeader {
                config: "t".into(),
                config_path: "/c.json".into(),
                description: String::new(),
                host: "h".into(),
                gpus: Vec::new(),
                library_git_sha: None,
                run_id: "r".into(),
            },
            planned: (0..100).map(|i| (trial_name(i), format!("T.{i}"))).collect(),
            ignored: Vec::new(),
        };
        (dir, ws, crate::build::cache::test_manifest("b1"), info)
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
        let writer = RunJsonWriter::new(ws.clone());
        writer.record(&trial(0), RecordedBuild::Built(manifest.clone()), &info).unwrap();
        assert_eq!(trials_in_views(&ws), Some(1), "the first trial is in run.json at once");
        for i in 1..50 {
            writer.record(&trial(i), RecordedBuild::Built(manifest.clone()), &info).unwrap();
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
        writer.record(&trial(50), RecordedBuild::Built(manifest.clone()), &info).unwrap();
        writer.finish().unwrap();
        assert_eq!(trials_in_views(&ws), Some(51), "complete at the end");
    }

    #[test]
    fn only_the_last_process_of_a_run_rebuilds_the_views_at_its_end() {
        let (_d, ws, manifest, info) = setup();
        // Two writers lock like two processes: an flock belongs to an open file.
        let (a, b) = (RunJsonWriter::new(ws.clone()), RunJsonWriter::new(ws.clone()));
        a.record(&trial(0), RecordedBuild::Built(manifest.clone()), &info).unwrap();
        b.record(&trial(1), RecordedBuild::Built(manifest.clone()), &info).unwrap();
        // run.json rewritten now, as the first trial left it: b's writer
        // thread waits its interval from now, and a must not rewrite it (a
        // missing run.json would be due at once for b's thread).
        assert_eq!(trials_in_views(&ws), Some(1));
        let run_json = ws.results_dir().join("run.json");
        std::fs::write(&run_json, std::fs::read(&run_json).unwrap()).unwrap();
        a.finish().unwrap();
        assert_eq!(trials_in_views(&ws), Some(1), "b still runs, so a leaves run.json to it");
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
        let writer = RunJsonWriter::new(ws.clone());
        writer.record(&at(3, "r", 3), RecordedBuild::Built(manifest.clone()), &info).unwrap();
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
            RecordsByRun::of(&loaded).mixed().unwrap(),
            "2 of 3 trial results come from earlier runs of this build, not from the latest run (r, started \
             2026-01-03T00:00:00Z): T::1 (run r0, started 2026-01-01T00:00:00Z); T::2 (run r1, started 2026-01-02T00:00:00Z)"
        );
        assert_eq!(RecordsByRun::of(&[at(4, "r", 4), at(5, "r", 5)]).mixed(), None, "one run");
        assert_eq!(RecordsByRun::of(&[]), RecordsByRun::default());
    }

    #[test]
    fn ignored_trials_are_skipped_in_junit_unless_a_record_of_theirs_is_listed() {
        let (_d, ws, manifest, mut info) = setup();
        let ignored = |i: usize| Ignored { trial: trial_name(i), reason: format!("why {i}") };
        info.ignored = vec![ignored(1), ignored(2)];
        trial(2).write(&ws).unwrap();
        let writer = RunJsonWriter::new(ws.clone());
        writer.record(&trial(0), RecordedBuild::Built(manifest.clone()), &info).unwrap();
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
        let writer = RunJsonWriter::new(ws.clone());
        writer.record(&flaky, RecordedBuild::Built(manifest.clone()), &info).unwrap();
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
        RunJsonWriter::new(ws.clone()).finish().unwrap();
        assert!(!ws.results_dir().join("run.json").exists());
    }
}
