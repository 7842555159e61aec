//! `cargo test --test coverage_report`: the report's steps (`report/session/`)
//! as libtest-mimic trials, one per step so that a failure names its step. It
//! never runs a trial and never deletes a profile (report-only); the report
//! replaces `report/` as a whole, so no stale report survives next to a new
//! one, and every report says which build and runs it came from.

use crate::exec::interrupt;
use crate::report::session::{Done, Session, Step};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::process::ExitCode;
use std::sync::Arc;

pub fn main() -> ExitCode {
    if let Some(code) = crate::exec::supervisor::run_if_requested() {
        return code;
    }
    main_with(Arguments::from_args())
}

/// `ccl-coverage report --merge-from DIR…`: brings the shards' trials into
/// this workspace (`report/shards.rs`), under its lock, before the report
/// runs on it; says what two shards both ran and what was refused.
pub fn merge_shards(dirs: &[std::path::PathBuf]) -> ExitCode {
    let ctx = match super::load_context() {
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
                eprintln!("ccl-coverage: merged {} trials from {}", shard.trials.len(), shard.dir.display());
            }
            for d in &merged.duplicates {
                eprintln!(
                    "ccl-coverage: trial {} ran in two shards: counted once, from {}; also in {}",
                    d.trial,
                    d.counted_from.display(),
                    d.also_in.display()
                );
            }
            for why in &merged.refused {
                eprintln!("ccl-coverage: not merged: {why}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ccl-coverage: {e}");
            ExitCode::from(2)
        }
    }
}

pub fn main_with(args: Arguments) -> ExitCode {
    run(args).code
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
pub fn run(mut args: Arguments) -> Reported {
    let refused = |code| Reported { code, installed: false };
    let ctx = match super::load_context() {
        Ok(ctx) => ctx,
        Err(code) => return refused(code),
    };
    drop_trial_filter(&mut args, &Step::ALL.map(Step::name));
    interrupt::stop_commands_too();
    // Listing reads nothing and writes nothing: no lock, no workspace.
    let _lock = if args.list {
        None
    } else {
        match super::take_workspace(&ctx, super::Access::Report) {
            Ok(lock) => Some(lock),
            Err(code) => return refused(code),
        }
    };
    let session = Arc::new(Session::new(ctx));
    let trials = Step::ALL
        .into_iter()
        .map(|step| {
            let nothing = step.nothing_to_check(&session.ctx);
            let session = session.clone();
            let trial = Trial::ignorable_test(step.name(), move || match session.run(step) {
                Ok(Done::Completed) => Ok(Completion::Completed),
                Ok(Done::Ignored(why)) => Ok(Completion::ignored_with(why)),
                Err(e) => Err(Failed::from(e.to_string())),
            })
            .with_ignored_flag(nothing.is_some());
            let skipped = !args.list && !args.is_filtered_out(&trial) && args.is_ignored(&trial);
            if let Some(why) = nothing.filter(|_| skipped) {
                eprintln!("ccl-coverage: {} is ignored: {why}", step.name());
            }
            trial
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    match session.install() {
        Err(e) => {
            eprintln!("ccl-coverage: {e}");
            refused(ExitCode::FAILURE)
        }
        Ok(installed) => Reported {
            code: interrupt::exit_code().map_or_else(|| conclusion.exit_code(), ExitCode::from),
            installed: installed && !args.list,
        },
    }
}

/// `cargo coverage -- AllReduce::1K` passes its trial filter to this binary
/// too: a filter that names no step is dropped, so that every step runs on
/// whatever trials ran; one that names steps (`report::html`) selects them.
fn drop_trial_filter(args: &mut Arguments, steps: &[&str]) {
    let Some(filter) = args.filter.as_deref() else { return };
    let named = |step: &&str| if args.exact { *step == filter } else { step.contains(filter) };
    if !steps.iter().any(named) {
        eprintln!("ccl-coverage: the filter {filter:?} names no report step (a trial filter?): every report step runs");
        args.filter = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filtered(args: &[&str]) -> Option<String> {
        let mut args = Arguments::from_iter(std::iter::once("report").chain(args.iter().copied()));
        drop_trial_filter(&mut args, &["report::merge", "report::html", "report::diff"]);
        args.filter
    }

    #[test]
    fn a_trial_filter_is_dropped_and_a_step_filter_kept() {
        assert_eq!(filtered(&["AllReduce::1K"]), None);
        assert_eq!(filtered(&["--exact", "AllReduce::1K::mpi"]), None);
        assert_eq!(filtered(&["--exact", "report::htm"]), None, "--exact names no step");
        assert_eq!(filtered(&["report::html"]).as_deref(), Some("report::html"));
        assert_eq!(filtered(&["--exact", "report::diff"]).as_deref(), Some("report::diff"));
        assert_eq!(filtered(&["report::"]).as_deref(), Some("report::"));
        assert_eq!(filtered(&["--skip", "AllReduce"]), None);
    }
}
