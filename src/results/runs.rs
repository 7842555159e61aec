//! Which runs the records of one build come from: the latest and the
//! earlier ones whose records are still there.

use super::record::{EarlierRun, TrialResult};

/// This run's id: nextest's, when nextest runs the trials (one process
/// each, one run), else this process's start time and pid.
pub(crate) fn run_id() -> String {
    match std::env::var(crate::env_names::NEXTEST_RUN_ID).ok().filter(|id| !id.is_empty()) {
        Some(id) => format!("nextest-{id}"),
        None => format!("{}-{}", crate::exec::host::now(), std::process::id()),
    }
}

/// The runs that `results` (sorted by trial) come from, by when they started.
pub(crate) fn runs(results: &[TrialResult]) -> Vec<EarlierRun> {
    let mut runs: Vec<EarlierRun> = Vec::new();
    for r in results {
        match runs.iter_mut().find(|run| run.run_id == r.run_id) {
            Some(run) => {
                run.trials.push(r.trial.clone());
                if r.started_at < run.started_at {
                    run.started_at.clone_from(&r.started_at);
                }
            }
            None => runs.push(EarlierRun {
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
pub(crate) struct RecordsByRun {
    pub(crate) latest: Option<EarlierRun>,
    pub(crate) earlier: Vec<EarlierRun>,
}

impl RecordsByRun {
    pub(crate) fn of(results: &[TrialResult]) -> RecordsByRun {
        let Some(newest) = results.iter().max_by_key(|r| r.started_unix_ms) else { return RecordsByRun::default() };
        let (mut latest, earlier): (Vec<EarlierRun>, Vec<EarlierRun>) =
            runs(results).into_iter().partition(|r| r.run_id == newest.run_id);
        RecordsByRun { latest: latest.pop(), earlier }
    }

    /// Says plainly how many results come from earlier runs, which and
    /// when; `None` when they all come from the latest run.
    pub(crate) fn mixed(&self) -> Option<String> {
        let latest = self.latest.as_ref()?;
        if self.earlier.is_empty() {
            return None;
        }
        let earlier: usize = self.earlier.iter().map(|r| r.trials.len()).sum();
        let runs: Vec<String> = self.earlier.iter().map(EarlierRun::describe).collect();
        Some(format!(
            "{earlier} of {} trial results come from earlier runs of this build, not from the latest run ({}, started {}): {}",
            earlier + latest.trials.len(),
            latest.run_id,
            latest.started_at,
            runs.join("; ")
        ))
    }
}

impl RecordsByRun {
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
fn earlier_results(earlier: &[EarlierRun]) -> Option<(usize, String)> {
    let oldest = earlier.first()?;
    let count = earlier.iter().map(|r| r.trials.len()).sum();
    Some((count, format!("run {}, started {}", oldest.run_id, oldest.started_at)))
}

/// `the report also uses 39 results of earlier runs of this build (oldest:
/// run R, started T)`, when `earlier` holds any.
pub(crate) fn also_uses(earlier: &[EarlierRun]) -> Option<String> {
    let (count, oldest) = earlier_results(earlier)?;
    let results = if count == 1 { "result" } else { "results" };
    Some(format!("the report also uses {count} {results} of earlier runs of this build (oldest: {oldest})"))
}
