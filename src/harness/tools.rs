//! The command line's own subcommands and lines beside the two harnesses:
//! `show-env` (what the environment and the config resolve to), `clean`
//! (deleting what the harness made: the workspace and, when asked, the build
//! cache), `list` (the planned trials), `run`'s last line (what the run did
//! and what the report also covers), the report folder the command line
//! hands reports over from, and `--show-missing-lines`.

use super::Access;
use super::select::Selection;
use crate::context::Context;
use crate::error::{Context as _, Error, Result};
use crate::exec::redact;
use crate::reporter::Entry;
use crate::workspace::files;
use std::process::ExitCode;

/// Every `CCL_COV_*` setting with its value here (secrets masked), then the
/// config, workspace and build cache they resolve to.
pub fn show_env() -> ExitCode {
    let internal = |meaning: &str| meaning.starts_with("internal:") || meaning.starts_with("set for ");
    for known in crate::context::known_env().filter(|k| !internal(k.meaning)) {
        let value = std::env::var(known.name)
            .map_or_else(|_| "(unset)".to_string(), |v| format!("{:?}", redact::value(known.name, &v)));
        crate::show!("{:<32} {value:<24} {}\n", known.name, known.meaning);
    }
    match Context::from_env(Entry::Cli) {
        Ok(ctx) => {
            crate::show!("\nconfig:      {} ({})\n", ctx.config().name, ctx.loaded.path.display());
            crate::show!("workspace:   {}\n", ctx.workspace.root().display());
            crate::show!("build cache: {}\n", ctx.state_dir.join("builds").display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            crate::say!("{e}");
            ExitCode::from(2)
        }
    }
}

/// Deletes the config's workspace (only one the harness marked as its own,
/// and not while a run holds it) and, with `builds`, every cached build,
/// failed ones too, that no run is building or using and no workspace
/// reports on: a running suite holds its build (a shared lock) from its
/// first trial to its end, each workspace registers in the build it uses
/// (checked against its `build.json`), and a build kept is named with why.
pub fn clean(builds: bool) -> ExitCode {
    match clean_all(builds) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            crate::say!("{e}");
            ExitCode::from(2)
        }
    }
}

fn clean_all(builds: bool) -> Result<()> {
    let ctx = Context::from_env(Entry::Cli)?;
    let ws = &ctx.workspace;
    let mut left = false;
    if ws.root().exists() {
        let lock = super::take_workspace(&ctx, Access::Report)
            .map_err(|_| Error::new(format!("{} was not deleted", ws.root().display())))?;
        let cleaned = ws.clean()?;
        drop(lock);
        // What could not be deleted is named; the builds are still cleaned.
        if let Err(e) = ws.finish_clean(&cleaned) {
            crate::say!("{e}");
            left = true;
        }
    } else {
        crate::say!("no workspace at {}", ws.root().display());
    }
    if builds {
        let dir = ctx.state_dir.join("builds");
        let (mut kept, mut undeletable) = (0, 0);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let key = entry.file_name().to_string_lossy().into_owned();
            // Only the harness's own builds: a real folder with its manifest,
            // or a failed one whose note says the harness started it.
            let finished = path.join("build.json").is_file();
            if !entry.file_type().is_ok_and(|t| t.is_dir())
                || !(finished || crate::build::cache::unfinished(&path, &key).is_some())
            {
                continue;
            }
            // A build being made holds its lock alone, one in use shared.
            let lock_path = path.with_extension("lock");
            let lock = files::open_lock_file(&lock_path)?;
            if lock.try_lock().is_err() {
                let users = crate::build::cache::users_of(&path, &ctx.state_dir);
                let who = if users.is_empty() { "a process building it".to_string() } else { users.join("; ") };
                crate::say!("kept the cached build {}: it is in use by {who}", path.display());
                kept += 1;
                continue;
            }
            // No run holds it; a workspace, wherever it lives, may still report on it.
            let (registered, stale) = crate::build::cache::registered_users(&path, &key);
            for why in stale {
                crate::say!("a stale registration does not keep the cached build {key}: {why}");
            }
            let mut using = registered;
            using.extend(workspaces_using(&ctx.state_dir, &key));
            using.sort();
            using.dedup();
            if !using.is_empty() {
                let shown: Vec<String> = using.iter().map(|w| w.display().to_string()).collect();
                crate::say!(
                    "kept the cached build {}: the workspace {} still uses it (its build.json names this build; delete that workspace first: `ccl-coverage clean --workspace {}`)",
                    path.display(),
                    shown.join(", "),
                    crate::exec::process::shell_quote(&shown[0])
                );
                continue;
            }
            // One build that cannot be deleted does not stop the others.
            if let Err(e) = crate::workspace::confined::remove_tree(&path) {
                crate::warning!("kept the cached build {}: {e}", path.display());
                undeletable += 1;
                continue;
            }
            crate::build::cache::remove_notes(&path);
            // Held alone: a process waiting on it finds it gone and opens a new one.
            let _ = std::fs::remove_file(&lock_path);
            drop(lock);
            let what = if finished { "cached build" } else { "failed build" };
            crate::say!("deleted the {what} {}", path.display());
        }
        if kept > 0 {
            return Err(Error::new(format!(
                "{kept} cached builds are in use and were kept: run `{}` again once those runs end",
                command_again("clean --builds")
            )));
        }
        if undeletable > 0 {
            return Err(Error::new(format!("{undeletable} cached builds could not be deleted (each is named above)")));
        }
    }
    if left {
        crate::bail!("the workspace {} could not be wholly deleted: what is left is named above", ws.root().display());
    }
    Ok(())
}

/// The workspaces under `state_dir` (each config's default one) whose
/// build is `key`. A link is no workspace, and `build.json` is read only as
/// a regular file inside it: a FIFO planted there would block `clean`.
fn workspaces_using(state_dir: &std::path::Path, key: &str) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(state_dir).into_iter().flatten().flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let bytes = crate::workspace::Workspace::new(&entry.path())
            .and_then(|ws| ws.read_opt(&ws.root().join("build.json")))
            .ok()
            .flatten();
        let id = bytes.and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        if id.is_some_and(|m| m["build_id"] == key) {
            out.push(entry.path());
        }
    }
    out.sort();
    out
}

/// `ccl-coverage ARGS` as the user would type it again: with the config and
/// workspace they gave, as options or as variables.
fn command_again(args: &str) -> String {
    let mut vars = String::new();
    let mut options = String::new();
    for (var, option) in [("CCL_COV_CONFIG", "--config"), ("CCL_COV_WORKSPACE", "--workspace")] {
        let Some(value) = std::env::var(var).ok().filter(|v| !v.is_empty()) else { continue };
        let value = crate::exec::process::shell_quote(&value);
        match crate::env_names::option_of(var) {
            Some(_) => options.push_str(&format!(" {option} {value}")),
            None => vars.push_str(&format!("{var}={value} ")),
        }
    }
    format!("{vars}ccl-coverage {args}{options}")
}

/// The workspace's report folder, for the command line to hand reports over.
pub fn report_dir() -> Option<std::path::PathBuf> {
    Context::from_env(Entry::Cli).ok().map(|ctx| ctx.workspace.report_dir())
}

/// After `ccl-coverage run`: what this run did (the trials it ran, passed,
/// failed, timed out, from its verdicts in memory: `tally`), then what the
/// report also covers (results of earlier runs of the build, the oldest
/// named, when `run.json` is this run's; `run.json` and `meta.json` name
/// every one) and the minimal suite, in one line (from `minimal-suite.json`).
pub fn print_run_line(tally: &super::collectives::Tally) {
    let Ok(ctx) = Context::from_env(Entry::Cli) else { return };
    let read = |path: std::path::PathBuf| -> Option<Vec<u8>> { ctx.workspace.read_opt(&path).ok()? };
    let run: Option<crate::results::RunJson> =
        read(ctx.workspace.results_dir().join("run.json")).and_then(|b| serde_json::from_slice(&b).ok());
    let planned = crate::plan::names(ctx.config()).len();
    let flaky = match tally.flaky {
        0 => String::new(),
        f => format!(" ({f} flaky: passed on a retry)"),
    };
    let mut line = format!(
        "{} of {planned} trials ran: {} passed{flaky}, {} failed, {} timed out",
        tally.ran, tally.passed, tally.failed, tally.timed_out
    );
    if tally.interrupted > 0 {
        line.push_str(&format!(", {} interrupted", tally.interrupted));
    }
    if tally.not_run > 0 {
        line.push_str(&format!("; {} not run: {}", tally.not_run, not_run_causes(&tally.not_run_causes)));
    }
    if let Some(run) = run.filter(|run| run.header.run_id == tally.run_id) {
        if let Some(also) = crate::results::also_uses(&run.earlier_runs) {
            line.push_str(&format!("; {also}"));
        }
    } else {
        line.push_str("; results/run.json is not this run's: it could not be written");
        if let Some(why) = &tally.records_error {
            line.push_str(&format!(" ({})", one_line(why, 400)));
        }
    }
    let minimal = ctx.workspace.report_dir().join("minimal-suite.json");
    let suite: Option<serde_json::Value> = read(minimal.clone()).and_then(|b| serde_json::from_slice(&b).ok());
    if let Some(suite) = suite {
        line.push_str(&format!(
            "; minimal equivalent suite: {} of {} trials ({})",
            suite["trial_count"],
            suite["full_suite_trials"],
            minimal.display()
        ));
    }
    crate::say!("{line}");
}

/// The causes of the trials not run, the first three (with how many trials
/// each, when more than one).
fn not_run_causes(causes: &[(String, usize)]) -> String {
    if let [(cause, _)] = causes {
        return one_line(cause, 400);
    }
    let mut said: Vec<String> = causes
        .iter()
        .take(3)
        .map(|(cause, n)| match n {
            1 => one_line(cause, 300),
            n => format!("{} ({n} trials)", one_line(cause, 300)),
        })
        .collect();
    if causes.len() > 3 {
        said.push(format!("and {} other causes (each trial's is above)", causes.len() - 3));
    }
    said.join("; ")
}

/// `text` on one line (its lines joined by ` / `), cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let joined: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let joined = joined.join(" / ");
    match joined.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}

/// How `ccl-coverage list` prints the trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFormat {
    /// One a line, an ignored one with why.
    Pretty,
    /// libtest's `NAME: test`.
    Terse,
    /// One JSON array of `{name, ignored, ignore_reason}`.
    Json,
}

/// `ccl-coverage list`: the planned trials the selection keeps (an ignored
/// one is listed, marked), on stdout; a filter that matches no trial is
/// refused, as `run` refuses it. Builds and writes nothing.
pub fn list(selection: &Selection, format: ListFormat) -> ExitCode {
    let ctx = match super::load_context(Entry::Cli) {
        Ok(ctx) => ctx,
        Err(code) => return code,
    };
    let specs = crate::plan::plan(ctx.config());
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    if let Some(why) = selection.refusal("trial", &names) {
        crate::say!("{why}");
        return ExitCode::from(2);
    }
    let listed: Vec<&crate::plan::TrialSpec> =
        specs.iter().filter(|s| selection.keeps(&s.name) && (!selection.args.ignored || s.ignored)).collect();
    if listed.is_empty() {
        crate::say!("no ignored trial is among those the filters select");
        return ExitCode::from(2);
    }
    let why = |s: &crate::plan::TrialSpec| s.ignored.then(|| s.why_ignored(ctx.config()).unwrap_or_default());
    match format {
        ListFormat::Pretty => {
            for spec in listed {
                match why(spec) {
                    Some(why) if !why.is_empty() => crate::show!("{}  (ignored: {why})\n", spec.name),
                    Some(_) => crate::show!("{}  (ignored)\n", spec.name),
                    None => crate::show!("{}\n", spec.name),
                }
            }
        }
        ListFormat::Terse => listed.iter().for_each(|s| crate::output!("{}: test\n", s.name)),
        ListFormat::Json => {
            let trials: Vec<serde_json::Value> = listed
                .iter()
                .map(|s| serde_json::json!({"name": s.name, "ignored": s.ignored, "ignore_reason": why(s).filter(|w| !w.is_empty())}))
                .collect();
            crate::output!("{}\n", serde_json::to_string_pretty(&trials).expect("a list serializes"));
        }
    }
    ExitCode::SUCCESS
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

    /// Only a real folder's regular `build.json` keeps a build: a link to a
    /// workspace that uses it keeps nothing more, and a FIFO in its place is
    /// not waited on (a plain read blocks there until a writer comes).
    #[test]
    fn only_a_real_workspace_s_build_record_keeps_a_build_and_a_fifo_blocks_nothing() {
        let state = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let d = state.path().join(name);
            std::fs::create_dir(&d).unwrap();
            d
        };
        std::fs::write(dir("real").join("build.json"), r#"{"build_id": "k1"}"#).unwrap();
        std::fs::write(dir("other").join("build.json"), r#"{"build_id": "k2"}"#).unwrap();
        std::os::unix::fs::symlink(state.path().join("real"), state.path().join("link")).unwrap();
        let fifo =
            std::ffi::CString::new(dir("fifo").join("build.json").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path and touches no other memory.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let path = state.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(super::workspaces_using(&path, "k1")).unwrap());
        let using = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("a FIFO blocked the search");
        assert_eq!(using, [state.path().join("real")]);
    }
}
