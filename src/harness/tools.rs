//! The command line's own subcommands beside the two harnesses: `show-env`
//! (what the environment and the config resolve to) and `clean` (deleting
//! what the harness made: the workspace and, when asked, the build cache).

use super::Access;
use crate::context::Context;
use crate::env_names::KNOWN;
use crate::error::{Error, Result};
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
/// no process is building. A build's lock is held only while it is built
/// or checked, so a run on another workspace that uses a cached build would
/// lose it: `--builds` is for when nothing runs.
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
        let mut kept = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) || !path.join("build.json").is_file() {
                continue;
            }
            // A build being made or reused holds its lock.
            let lock = files::open_lock_file(&path.with_extension("lock"))?;
            if lock.try_lock().is_err() {
                kept.push(path.display().to_string());
                continue;
            }
            std::fs::remove_dir_all(&path).map_err(|e| Error::new(format!("cannot delete {}: {e}", path.display())))?;
            eprintln!("ccl-coverage: deleted the cached build {}", path.display());
        }
        if !kept.is_empty() {
            eprintln!("ccl-coverage: kept builds in use: {}", kept.join(", "));
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
    let mut line = format!(
        "ccl-coverage: {} trials: {} passed, {} failed, {} timed out, {} not run (ignored or filtered out)",
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
