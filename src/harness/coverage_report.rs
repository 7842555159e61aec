//! `cargo test --test coverage_report`: the report's steps (`report/session/`)
//! as libtest-mimic trials, one per step so that a failure names its step. It
//! never runs a trial and never deletes a profile (report-only); the report
//! replaces `report/` as a whole, so no stale report survives next to a new
//! one, and every report says which build and runs it came from. A filter
//! selects steps as libtest does, unless `cargo coverage` or `ccl-coverage
//! run` handed over the trials' filter ([`Intent::Trials`]): then every step
//! runs on what the trials left.

use super::select::{Intent, Selection};
use crate::exec::interrupt;
use crate::report::session::{Done, Inputs, Session, Step};
use crate::reporter::Entry;
use libtest_mimic::{Completion, Failed, Trial};
use std::process::ExitCode;
use std::sync::Arc;

pub fn main() -> ExitCode {
    if let Some(code) = crate::exec::supervisor::run_if_requested() {
        return code;
    }
    main_with(Selection::from_args(), Intent::from_env(), Entry::of_test_binary())
}

/// `ccl-coverage report --merge-from DIR…`: brings the shards' trials into
/// this workspace (`report/shards.rs`), under its lock, before the report
/// runs on it; says what two shards both ran and what was refused.
pub fn merge_shards(dirs: &[std::path::PathBuf]) -> ExitCode {
    let ctx = match super::load_context(Entry::Cli) {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    let _lock = match super::take_workspace(&ctx, super::Access::Write) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    match crate::report::shards::merge(&ctx, dirs) {
        Ok(merged) => {
            for shard in &merged.shards {
                crate::note!("merged {} trials from {}", shard.trials.len(), shard.dir.display());
            }
            for d in &merged.duplicates {
                crate::say!(
                    "trial {} ran in two shards: counted once, from {}; also in {}",
                    d.trial,
                    d.counted_from.display(),
                    d.also_in.display()
                );
            }
            for why in &merged.refused {
                crate::say!("not merged: {why}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::say!("{e}");
            ExitCode::from(2)
        }
    }
}

/// `entry`: the command the person ran, which hints name.
pub fn main_with(selection: Selection, intent: Intent, entry: Entry) -> ExitCode {
    run(&selection, intent, entry).code
}

/// How a report ended, for `ccl-coverage run` and `report`.
pub struct Reported {
    pub code: ExitCode,
    /// Whether this report was installed whole (a failed check, a bar not
    /// reached, still installs it): its files may be handed over, so that
    /// CI gets the lcov of a run whose coverage dropped.
    pub installed: bool,
}

/// The report as [`main_with`] writes it, saying whether it was installed.
pub fn run(selection: &Selection, intent: Intent, entry: Entry) -> Reported {
    report(selection, intent, false, entry)
}

/// `ccl-coverage run`'s report, after its trials: every step (`display`:
/// libtest's `--color` and `--quiet`); the run's last line says which
/// results it covers, so the report does not.
pub fn after_run(display: &Selection) -> Reported {
    report(display, Intent::Trials, true, Entry::Cli)
}

fn report(selection: &Selection, intent: Intent, after_run: bool, entry: Entry) -> Reported {
    let refused = |code| Reported { code, installed: false };
    let ctx = match super::load_context(entry) {
        Ok(ctx) => ctx,
        Err(code) => return refused(code),
    };
    let names = Step::ALL.map(Step::name);
    let selection = match intent {
        // `cargo coverage -- AllReduce::1K` hands the trials' selection to this binary too.
        Intent::Trials => {
            if !selection.filters.is_empty() || !selection.args.skip.is_empty() {
                crate::note!("the test filter selects trials (cargo coverage): every report step runs");
            }
            selection.without_selection()
        }
        Intent::Steps => {
            if let Some(why) = selection.refusal("report step", &names) {
                crate::say!("{why}; `ccl-coverage report --list` names every step");
                return refused(ExitCode::from(2));
            }
            selection.clone()
        }
        Intent::Libtest => selection.clone(),
    };
    let args = selection.libtest(names);
    interrupt::stop_commands_too();
    // A place no workspace may be is refused before anything there is read.
    let place = super::check_place(&ctx);
    if let (Err(code), false) = (place, args.list) {
        return refused(code);
    }
    let inputs = if place.is_ok() { Inputs::read(&ctx) } else { Inputs::default() };
    let mut session = Session::new(ctx);
    session.after_run = after_run;
    let session = Arc::new(session);
    // Under nextest a step ignored at run time shows as PASS: a line says it.
    let nextest = std::env::var_os(crate::env_names::NEXTEST_RUN_ID).is_some_and(|v| !v.is_empty());
    let trials: Vec<Trial> = Step::ALL
        .into_iter()
        .map(|step| {
            let nothing = step.nothing_to_check(&session.ctx, &inputs);
            let session = session.clone();
            Trial::ignorable_test(step.name(), move || match session.run(step) {
                Ok(Done::Completed) => Ok(Completion::Completed),
                Ok(Done::Ignored(why)) => {
                    if nextest {
                        crate::output!("SKIP: {}: {why}\n", step.name());
                    }
                    Ok(Completion::ignored_with(why))
                }
                Err(e) => Err(Failed::from(crate::reporter::clean(&e.to_string()).into_owned())),
            })
            .with_ignored_flag(nothing.is_some())
        })
        .collect();
    let selected = |t: &&Trial| !args.is_filtered_out(t) && (!args.ignored || t.has_ignored_flag());
    let runs = |t: &&Trial| !t.has_ignored_flag() || args.ignored || args.include_ignored;
    let running = trials.iter().filter(selected).filter(runs).count();
    if !args.list {
        match &inputs.nothing {
            Some(nothing) if trials.iter().any(|t| selected(&t)) => {
                crate::say!("nothing to report: {nothing}");
            }
            _ => {
                for (step, trial) in Step::ALL.iter().zip(&trials) {
                    if selected(&trial) && !runs(&trial) {
                        let why = step.nothing_to_check(&session.ctx, &inputs).unwrap_or_default();
                        crate::reporter::emit(crate::reporter::Event::TrialIgnored { trial: step.name(), why: &why });
                    }
                }
            }
        }
    }
    // Listing, or running no step, reads nothing and writes nothing: no
    // lock, no workspace (a plain `cargo test FILTER` meant for other tests).
    let _lock = if args.list || running == 0 {
        None
    } else {
        match super::take_workspace(&session.ctx, super::Access::Report) {
            Ok(lock) => Some(lock),
            Err(code) => return refused(code),
        }
    };
    let mut trials = trials;
    if !args.list {
        let mut ranked: Vec<(u8, Trial)> = Step::ALL.iter().map(|s| s.run_rank()).zip(trials).collect();
        ranked.sort_by_key(|(rank, _)| *rank);
        trials = ranked.into_iter().map(|(_, t)| t).collect();
    }
    let conclusion = libtest_mimic::run(&args, trials);
    match session.install() {
        Err(e) => {
            crate::say!("{e}");
            refused(ExitCode::FAILURE)
        }
        Ok(installed) => Reported {
            code: interrupt::exit_code().map_or_else(|| conclusion.exit_code(), ExitCode::from),
            installed: installed && !args.list,
        },
    }
}
