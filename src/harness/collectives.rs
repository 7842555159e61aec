//! `cargo test --test collectives`: one libtest-mimic trial per planned
//! trial, each run by the suite (`suite/`: the shared build, placement, the
//! trial's lifecycle), with a line of progress as each ends.

use super::select::{Intent, Selection};
use crate::exec::interrupt;
use crate::plan;
use crate::reporter::{self, Entry, TrialMark};
use crate::suite::{Outcome, Suite};
use crate::verdict::Status;
use libtest_mimic::{Completion, Failed, Trial};
use std::process::ExitCode;
use std::sync::Arc;

struct Shared {
    suite: Suite,
    progress: Progress,
}

/// `[n/M]`, each trial's verdict and duration, and the time left, one line
/// per trial on stderr, shown by the reporter (which colours the verdict, and
/// leaves passes out under `-q`).
struct Progress {
    /// Trials this run will run: not filtered out, not ignored.
    total: std::sync::atomic::AtomicUsize,
    done: std::sync::atomic::AtomicUsize,
    started: std::time::Instant,
    /// What this run's trials came to, as the run saw them.
    tally: std::sync::Mutex<Tally>,
}

/// What the trials of one run came to, from their verdicts in memory: the
/// run's last line says this, never what `run.json` says (a trial can
/// rewrite records, and a run whose records could not be written leaves an
/// earlier run's there).
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub(crate) run_id: String,
    pub(crate) ran: usize,
    pub(crate) passed: usize,
    pub(crate) flaky: usize,
    pub(crate) failed: usize,
    pub(crate) timed_out: usize,
    pub(crate) interrupted: usize,
    /// Not run (the shared build failed, a trial's folders could not be
    /// prepared, the run was interrupted first): not counted in `ran`.
    pub(crate) not_run: usize,
    /// Why, each cause once, in the order first seen, with how many trials.
    pub(crate) not_run_causes: Vec<(String, usize)>,
    /// Why `run.json` and `junit.xml` may not be this run's: the error that
    /// ended the writing of the run's records.
    pub(crate) records_error: Option<String>,
}

impl Tally {
    fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Ignored(_) => return,
            Outcome::NotRun { cause, .. } => {
                self.not_run += 1;
                match self.not_run_causes.iter_mut().find(|(c, _)| c == cause) {
                    Some((_, n)) => *n += 1,
                    None => self.not_run_causes.push((cause.clone(), 1)),
                }
                return;
            }
            Outcome::Passed { .. } => self.passed += 1,
            Outcome::Flaky { .. } => {
                self.passed += 1;
                self.flaky += 1;
            }
            Outcome::Failed(Status::Timeout, _) => self.timed_out += 1,
            Outcome::Failed(Status::Interrupted, _) => self.interrupted += 1,
            Outcome::Failed(_, _) => self.failed += 1,
        }
        self.ran += 1;
    }
}

impl Progress {
    /// `since`: when the build was ready, so that its time is not taken for
    /// the trials' (the first trial's estimate would include it); `waited`:
    /// its wait for rank slots, shown apart from its own time `took`.
    fn finished(
        &self,
        name: &str,
        took: std::time::Duration,
        waited: std::time::Duration,
        since: Option<std::time::Instant>,
        outcome: &Outcome,
    ) {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(outcome);
        let (done, total, verdict, mut detail) = self.ended(took, since, outcome);
        if waited >= std::time::Duration::from_millis(10) {
            detail = format!("{detail}; waited {} for rank slots", short(waited));
        }
        reporter::emit(reporter::Event::TrialEnded { done, total, verdict, name, detail: &detail });
    }

    /// The trial's number, the total, its verdict, and its time and the time
    /// left, once [`EARLIEST_GUESS`] trials ended.
    fn ended(
        &self,
        took: std::time::Duration,
        since: Option<std::time::Instant>,
        outcome: &Outcome,
    ) -> (usize, usize, TrialMark, String) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let verdict = match outcome {
            Outcome::Passed { .. } => TrialMark::Pass,
            Outcome::Flaky { .. } => TrialMark::Flaky,
            Outcome::Ignored(_) => TrialMark::Ignored,
            Outcome::Failed(Status::Timeout, _) => TrialMark::Timeout,
            Outcome::Failed(Status::Interrupted, _) => TrialMark::Interrupted,
            Outcome::Failed(_, _) => TrialMark::Fail,
            Outcome::NotRun { .. } => TrialMark::NotRun,
        };
        let total = self.total.load(std::sync::atomic::Ordering::SeqCst).max(done);
        // Trials run side by side: the wall time so far per trial ended. One
        // or two trials say little of the rest (a first trial of 30 s before
        // 40 of 3 s said "about 21m" of a 3.5-minute run): no guess before
        // EARLIEST_GUESS of them ended.
        let since = since.map_or(self.started, |ready| ready.max(self.started));
        let left = (done < total && done >= EARLIEST_GUESS)
            .then(|| since.elapsed().mul_f64((total - done) as f64 / done as f64));
        let left = left.map_or_else(String::new, |l| format!(", about {} left", short(l)));
        let (flaky, tests) = match *outcome {
            Outcome::Flaky { attempts, tests } => (format!(", passed on attempt {}", attempts + 1), tests),
            Outcome::Passed { tests } => (String::new(), tests),
            _ => (String::new(), None),
        };
        let tests = match tests {
            Some(1) => ", 1 test".to_string(),
            Some(n) => format!(", {n} tests"),
            None => String::new(),
        };
        (done, total, verdict, format!("{}{tests}{flaky}{left}", short(took)))
    }
}

/// This shard's share of the trials that would run (`CCL_COV_PARTITION`,
/// dealt in plan order as nextest deals tests); those that would not run
/// (filtered out, ignored) stay, for libtest to show as such.
fn shard(
    partition: plan::Partition,
    specs: Vec<plan::TrialSpec>,
    trials: Vec<Trial>,
    would_run: impl Fn(&Trial) -> bool,
) -> (Vec<plan::TrialSpec>, Vec<Trial>) {
    let mut index = 0;
    let (mut kept, mut dealt) = (0, 0);
    let (specs, trials): (Vec<_>, Vec<_>) = specs
        .into_iter()
        .zip(trials)
        .filter(|(spec, trial)| {
            if !would_run(trial) {
                return true;
            }
            let holds = partition.holds(index, &spec.name);
            index += 1;
            dealt += 1;
            kept += usize::from(holds);
            holds
        })
        .unzip();
    crate::note!("partition {}: {kept} of {dealt} trials in this shard", partition.describe());
    (specs, trials)
}

/// `0.86s`, `1m20s`, `2h05m`.
fn short(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.2}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    }
}

pub fn main() -> ExitCode {
    if let Some(code) = crate::exec::supervisor::run_if_requested() {
        return code;
    }
    main_with(Selection::from_args(), Intent::from_env(), Entry::of_test_binary())
}

/// `entry`: the command the person ran, which hints name.
pub fn main_with(selection: Selection, intent: Intent, entry: Entry) -> ExitCode {
    run(&selection, intent, entry).code
}

/// How a run of the trials ended, for `ccl-coverage run`.
pub struct Ran {
    pub code: ExitCode,
    /// Whether it held the workspace and ran: a run refused (a wrong config,
    /// a workspace in use, a filter that matches no trial) ran nothing, so
    /// the workspace's results are another run's, and are neither reported
    /// nor tallied as its own.
    pub ran: bool,
    /// What its trials came to.
    pub tally: Tally,
}

/// The trials as [`main_with`] runs them, saying whether they ran at all.
pub fn run(selection: &Selection, intent: Intent, entry: Entry) -> Ran {
    let refused = |code| Ran { code, ran: false, tally: Tally::default() };
    let ctx = match super::load_context(entry) {
        Ok(ctx) => ctx,
        Err(code) => return refused(code),
    };
    let specs = plan::plan(ctx.config());
    if let Some(run) = &ctx.config().upstream {
        // Listings and the JSON dry run stay machine-readable: stdout is theirs.
        for w in &run.resolved.warnings {
            crate::warning!("{w}");
        }
    }
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    if intent == Intent::Trials
        && let Some(why) = selection.refusal("trial", &names)
    {
        crate::say!("{why}; `ccl-coverage list` names every trial");
        return refused(ExitCode::from(2));
    }
    let args = selection.libtest(names.iter().copied());
    if ctx.dry_run && !args.list {
        return refused(super::dry_run::print(&ctx, &specs, &args));
    }
    let progress = Progress {
        total: std::sync::atomic::AtomicUsize::new(0),
        done: std::sync::atomic::AtomicUsize::new(0),
        started: std::time::Instant::now(),
        tally: std::sync::Mutex::default(),
    };
    let shared = Arc::new(Shared { suite: Suite::new(ctx), progress });
    let trials: Vec<Trial> = specs
        .iter()
        .cloned()
        .map(|spec| {
            let shared = shared.clone();
            let ignored = spec.ignored;
            Trial::ignorable_test(spec.name.clone(), move || {
                let started = std::time::Instant::now();
                let (outcome, waited) = shared.suite.run(&spec);
                // The build, run by the first trial, and the wait for rank slots are not its own time.
                let ready = shared.suite.ready_at();
                let began = ready.map_or(started, |r| r.max(started));
                shared.progress.finished(&spec.name, began.elapsed().saturating_sub(waited), waited, ready, &outcome);
                match outcome {
                    Outcome::Passed { .. } | Outcome::Flaky { .. } => Ok(Completion::Completed),
                    Outcome::Ignored(reason) => Ok(Completion::ignored_with(reason)),
                    // libtest prints the message as it is: cleaned here, by the reporter's one rule.
                    Outcome::Failed(_, message) | Outcome::NotRun { message, .. } => {
                        Err(Failed::from(reporter::clean(&message).into_owned()))
                    }
                }
            })
            .with_ignored_flag(ignored)
        })
        .collect();
    // As libtest decides: `--ignored` filters out the trials not ignored.
    let is_selected = |t: &Trial| !args.is_filtered_out(t) && (!args.ignored || t.has_ignored_flag());
    let runs = |t: &Trial| !t.has_ignored_flag() || args.ignored || args.include_ignored;
    let (specs, trials) = match shared.suite.ctx.partition {
        Some(partition) => shard(partition, specs, trials, |t| is_selected(t) && runs(t)),
        None => (specs, trials),
    };
    let selected: Vec<(plan::TrialSpec, bool)> =
        specs.into_iter().zip(&trials).filter(|(_, t)| is_selected(t)).map(|(spec, t)| (spec, runs(t))).collect();
    let running = selected.iter().filter(|(_, runs)| *runs).count();
    if intent == Intent::Trials && !args.list && running == 0 {
        let why = if selected.is_empty() {
            "no ignored trial is among those the filters select".to_string()
        } else {
            format!("the {} trials the filters select are all ignored; --include-ignored runs them", selected.len())
        };
        crate::say!("{why}");
        return refused(ExitCode::from(2));
    }
    if !args.list {
        for (spec, _) in selected.iter().filter(|(_, runs)| !runs) {
            if let Some(why) = &spec.ignore_reason {
                reporter::emit(reporter::Event::TrialIgnored { trial: &spec.name, why });
            }
        }
    }
    // Listing reads nothing and writes nothing. A run that selects no trial
    // still takes its workspace, so that one it may not use (a folder the
    // harness did not make, another config's, a protected place) is refused
    // whatever the filter.
    let _lock = if args.list {
        None
    } else {
        match super::take_workspace(&shared.suite.ctx, super::Access::Write) {
            Ok(lock) => Some(lock),
            Err(code) => return refused(code),
        }
    };
    shared.progress.total.store(running, std::sync::atomic::Ordering::SeqCst);
    shared.suite.select(selected);
    let conclusion = libtest_mimic::run(&args, trials);
    let written = shared.suite.finish().inspect_err(|e| crate::say!("{e}"));
    // Every trial and its supervisor ended: nothing of this run is left to sweep.
    if let Some(owner) = crate::exec::owner::Owner::get() {
        owner.unregister();
    }
    let code = if let Some(code) = interrupt::exit_code() {
        crate::say!(
            "interrupted by {}: results of the trials that ended are in {}",
            interrupt::describe(),
            shared.suite.ctx.workspace.results_dir().display()
        );
        ExitCode::from(code)
    } else if written.is_err() {
        ExitCode::FAILURE
    } else {
        conclusion.exit_code()
    };
    let mut tally = shared.progress.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    tally.run_id = shared.suite.run_id().to_string();
    tally.records_error = written.err().map(|e| e.to_string());
    Ran { code, ran: !args.list && running > 0, tally }
}

/// How many trials must have ended before the time left is guessed.
const EARLIEST_GUESS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// The first trial waits for the build: the time left is counted from
    /// when the build was ready, not from the run's start.
    #[test]
    fn the_time_left_leaves_the_build_out() {
        let now = Instant::now();
        let progress = Progress {
            total: std::sync::atomic::AtomicUsize::new(6),
            done: std::sync::atomic::AtomicUsize::new(0),
            started: now.checked_sub(Duration::from_secs(600)).unwrap(),
            tally: std::sync::Mutex::default(),
        };
        let ready = now.checked_sub(Duration::from_secs(6)).unwrap();
        let (done, total, verdict, detail) =
            progress.ended(Duration::from_secs(2), Some(ready), &Outcome::Passed { tests: None });
        assert_eq!((done, total, verdict), (1, 6, TrialMark::Pass));
        assert_eq!(detail, "2.00s", "one trial says nothing of the rest");
        let (.., detail) = progress.ended(Duration::from_secs(2), Some(ready), &Outcome::Passed { tests: None });
        assert_eq!(detail, "2.00s", "nor do two");
        // 6 s since the build was ready for 3 trials: 2 s each, 3 left.
        let (.., detail) = progress.ended(Duration::from_secs(2), Some(ready), &Outcome::Passed { tests: None });
        assert!(detail.starts_with("2.00s, about 6."), "{detail}");
        let (.., detail) = progress.ended(Duration::from_secs(1), None, &Outcome::Passed { tests: None });
        assert!(detail.contains("about 5m"), "without a build, from the start: {detail}");
        let flaky = Outcome::Flaky { attempts: 1, tests: Some(1) };
        let (.., detail) = progress.ended(Duration::from_secs(1), None, &flaky);
        assert!(detail.starts_with("1.00s, 1 test, passed on attempt 2, about "), "{detail}");
        let (.., detail) = progress.ended(Duration::from_secs(1), None, &Outcome::Passed { tests: Some(2) });
        assert_eq!(detail, "1.00s, 2 tests", "a runner's test count; the last trial: no time left");
        assert_eq!(short(Duration::from_secs(4000)), "1h06m");
    }
}
