//! The command line's own subcommands beside the two harnesses: `show-env`
//! (what the environment and the config resolve to) and `clean` (deleting
//! what the harness made: the workspace and, when asked, the build cache).

use super::Access;
use crate::context::Context;
use crate::env_names::KNOWN;
use crate::error::{Context as _, Error, Result};
use crate::exec::redact;
use crate::workspace::files;
use std::process::ExitCode;

/// Every `CCL_COV_*` setting with its value here (secrets masked), then the
/// config, workspace and build cache they resolve to.
pub fn show_env() -> ExitCode {
    let internal = |meaning: &str| meaning.starts_with("internal:") || meaning.starts_with("set for ");
    for known in KNOWN.iter().filter(|k| !internal(k.meaning)) {
        let value = std::env::var(known.name)
            .map_or_else(|_| "(unset)".to_string(), |v| format!("{:?}", redact::value(known.name, &v)));
        println!("{:<32} {value:<24} {}", known.name, known.meaning);
    }
    match Context::from_env() {
        Ok(ctx) => {
            println!("\nconfig:      {} ({})", ctx.config().name, ctx.loaded.path.display());
            println!("workspace:   {}", ctx.workspace.root().display());
            println!("build cache: {}", ctx.state_dir.join("builds").display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ccl-coverage: {e}");
            ExitCode::from(2)
        }
    }
}

/// Deletes the config's workspace (only one the harness marked as its own,
/// and not while a run holds it) and, with `builds`, every cached build that
/// no run is building or using: a running suite holds its build (a shared
/// lock) from its first trial to its end, and a build in use is kept and
/// its runs named.
pub fn clean(builds: bool) -> ExitCode {
    match clean_all(builds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ccl-coverage: {e}");
            ExitCode::from(2)
        }
    }
}

fn clean_all(builds: bool) -> Result<()> {
    let ctx = Context::from_env()?;
    let ws = &ctx.workspace;
    if ws.root().exists() {
        let lock = super::take_workspace(&ctx, Access::Report)
            .map_err(|_| Error::new(format!("{} was not deleted", ws.root().display())))?;
        let cleaned = ws.clean()?;
        drop(lock);
        ws.finish_clean(&cleaned)?;
    } else {
        eprintln!("ccl-coverage: no workspace at {}", ws.root().display());
    }
    if builds {
        let dir = ctx.state_dir.join("builds");
        let mut kept = 0;
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) || !path.join("build.json").is_file() {
                continue;
            }
            // A build being made holds its lock alone, one in use shared.
            let lock = files::open_lock_file(&path.with_extension("lock"))?;
            if lock.try_lock().is_err() {
                let users = crate::build::cache::users_of(&path, &ctx.state_dir);
                let who = if users.is_empty() { "a process building it".to_string() } else { users.join("; ") };
                eprintln!("ccl-coverage: kept the cached build {}: it is in use by {who}", path.display());
                kept += 1;
                continue;
            }
            std::fs::remove_dir_all(&path).with_context(|| format!("cannot delete {}", path.display()))?;
            let _ = std::fs::remove_dir_all(path.with_extension("users"));
            eprintln!("ccl-coverage: deleted the cached build {}", path.display());
        }
        if kept > 0 {
            return Err(Error::new(format!(
                "{kept} cached builds are in use and were kept: run `ccl-coverage clean --builds` again once those runs end"
            )));
        }
    }
    Ok(())
}

/// The workspace's report folder, for the command line to hand reports over.
pub fn report_dir() -> Option<std::path::PathBuf> {
    Context::from_env().ok().map(|ctx| ctx.workspace.report_dir())
}

/// After `ccl-coverage run`: the trials passed, failed and not run, and the
/// minimal suite, in one line (from `run.json` and `minimal-suite.json`).
pub fn print_run_line() {
    let Ok(ctx) = Context::from_env() else { return };
    let read = |path: std::path::PathBuf| -> Option<serde_json::Value> {
        serde_json::from_slice(&ctx.workspace.read_opt(&path).ok()??).ok()
    };
    let Some(run) = read(ctx.workspace.results_dir().join("run.json")) else { return };
    let n = |key: &str| run["summary"][key].as_u64().unwrap_or(0);
    let planned = crate::plan::names(ctx.config()).len() as u64;
    let flaky = match n("flaky") {
        0 => String::new(),
        f => format!(" ({f} flaky: passed on a retry)"),
    };
    let mut line = format!(
        "ccl-coverage: {} trials: {} passed{flaky}, {} failed, {} timed out, {} not run (ignored or filtered out)",
        planned,
        n("passed"),
        n("failed"),
        n("timeout"),
        planned.saturating_sub(n("total"))
    );
    let minimal = ctx.workspace.report_dir().join("minimal-suite.json");
    if let Some(suite) = read(minimal.clone()) {
        line.push_str(&format!(
            "; minimal equivalent suite: {} of {} trials ({})",
            suite["trial_count"],
            suite["full_suite_trials"],
            minimal.display()
        ));
    }
    eprintln!("{line}");
}

/// `--show-missing-lines`: each file's lines that no trial ran, from the
/// installed report's `coverage.lcov` (the model; its file names), as
/// `file: 3, 7-9` under a heading, as cargo-llvm-cov lists them.
pub fn missing_lines(report: &std::path::Path) -> Result<String> {
    let path = report.join("coverage.lcov");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(missing_lines_of(&crate::coverage::lcov::parse_lcov(&text, &path.display().to_string())?))
}

fn missing_lines_of(lcov: &crate::coverage::lcov::Lcov) -> String {
    let mut out = String::from("Uncovered lines:\n");
    for (file, coverage) in &lcov.files {
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for (&line, _) in coverage.lines.iter().filter(|(_, hits)| **hits == 0) {
            match ranges.last_mut() {
                Some(last) if last.1 + 1 == line => last.1 = line,
                _ => ranges.push((line, line)),
            }
        }
        if !ranges.is_empty() {
            out.push_str(&format!("{file}: {}\n", crate::report::attribution::ranges_text(&ranges)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_lines_are_ranges_per_file_with_uncovered_lines() {
        let lcov = crate::coverage::lcov::parse_lcov(
            "SF:a.cc\nDA:1,1\nDA:2,0\nDA:3,0\nDA:5,0\nend_of_record\nSF:b.cc\nDA:1,4\nend_of_record\n",
            "t",
        )
        .unwrap();
        assert_eq!(super::missing_lines_of(&lcov), "Uncovered lines:\na.cc: 2-3, 5\n");
    }
}
