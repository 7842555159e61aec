//! The two `harness = false` test binaries, as library code so that
//! `tests/*.rs` stay one-liners and the `ccl-coverage` binary can run the same
//! harness on machines without cargo.

pub mod collectives;
pub mod coverage_report;
pub(crate) mod dry_run;
pub mod init;
pub mod select;
pub mod tools;
pub mod who_covers;

use crate::context::Context;
use crate::error::Result;
use crate::exec::cgroup;
use crate::exec::owner::Owner;
use crate::workspace::lock::WorkspaceLock;
use crate::{exec::interrupt, exec::proctree, workspace};
use std::path::PathBuf;
use std::process::ExitCode;

/// The context from the environment, or the exit code after saying why not
/// (a wrong config fails `--list` too: nothing can run from it).
fn load_context(entry: crate::reporter::Entry) -> Result<Context, ExitCode> {
    Context::from_env(entry).map_err(|e| {
        crate::say!("{e}");
        ExitCode::from(2)
    })
}

/// Whether a harness binary writes the workspace or only reads what is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Write,
    Report,
}

/// Everything before the first trial touches the workspace: signal handling,
/// modes, the leftovers of dead runs, the workspace's ownership and its lock.
fn take_workspace(ctx: &Context, access: Access) -> Result<WorkspaceLock, ExitCode> {
    interrupt::install();
    workspace::confined::restrict_umask();
    prepare_workspace(ctx, access).map_err(|e| {
        crate::say!("{e}");
        ExitCode::from(2)
    })
}

fn prepare_workspace(ctx: &Context, access: Access) -> Result<WorkspaceLock> {
    let config = ctx.config();
    if access == Access::Write {
        // Before any trial starts: its token names this run, alive while it holds this lock.
        Owner::register(&ctx.state_dir)?;
        let grace = std::time::Duration::from_secs(config.timeouts.grace);
        for o in &proctree::sweep_orphans(&ctx.state_dir, grace) {
            let by = format!("a run that died (harness pid {})", o.owner);
            crate::reporter::emit(crate::reporter::Event::LeftBehindKilled {
                pid: o.pid,
                command: &o.command,
                by: &by,
            });
        }
        // What left the trial's session and dropped its marker is known
        // only to its supervisor's record.
        for o in proctree::sweep_records(&ctx.children_dir()) {
            let by = format!("a trial whose supervisor died (supervisor pid {})", o.owner);
            crate::reporter::emit(crate::reporter::Event::LeftBehindKilled {
                pid: o.pid,
                command: &o.command,
                by: &by,
            });
        }
        say_containment();
    }
    let protected = protected_paths(ctx);
    let ws = &ctx.workspace;
    match access {
        Access::Write => ws.claim(&config.name, &ctx.loaded.path, &protected)?,
        Access::Report => ws.check_claimed(&config.name, &ctx.loaded.path, &protected, ctx.entry)?,
    }
    WorkspaceLock::acquire(ws)
}

/// For the report, before it reads anything: a place no workspace may be is
/// refused, and so is a folder that holds something but is not this
/// config's workspace (no marker, or another config's). A workspace that
/// does not exist yet, or is empty, has nothing to report, and is left alone.
fn check_place(ctx: &Context) -> Result<(), ExitCode> {
    let ws = &ctx.workspace;
    let protected = protected_paths(ctx);
    let holds_something = std::fs::read_dir(ws.root()).is_ok_and(|mut entries| entries.next().is_some());
    let checked = match holds_something {
        true => ws.check_claimed(&ctx.config().name, &ctx.loaded.path, &protected, ctx.entry),
        false => ws.check_place(&protected),
    };
    checked.map_err(|e| {
        crate::say!("{e}");
        ExitCode::from(2)
    })
}

/// Which mechanism holds this run's trial processes, once, before the first.
fn say_containment() {
    let mode = cgroup::Mode::from_env();
    let name = crate::env_names::CGROUP;
    let line = match (mode, cgroup::available()) {
        (cgroup::Mode::Off, _) => {
            format!("each trial's processes are held by its session, marker and supervisor ({name}=off: no cgroup)")
        }
        (_, Ok(base)) => format!("each trial runs in a cgroup v2 of its own, under {}", base.display()),
        (cgroup::Mode::Auto, Err(why)) => {
            format!("each trial's processes are held by its session, marker and supervisor: no cgroup v2 here ({why})")
        }
        (cgroup::Mode::On, Err(why)) => {
            crate::warning!("{name}=on, but there is no cgroup v2 here: {why}; every trial fails");
            return;
        }
    };
    crate::note!("{line}");
}

/// Folders a workspace must neither hold nor (for sources) lie inside.
fn protected_paths(ctx: &Context) -> Vec<workspace::Protected> {
    use workspace::Protected;
    let mut out = vec![
        Protected::holding("the ccl-coverage project", ctx.root.clone()),
        Protected::holding("the config", ctx.loaded.path.clone()),
        Protected::holding_or_inside(
            "the library sources",
            ctx.loaded.library_src(),
            ctx.config().library.hash_exclude.clone(),
        ),
        Protected::holding_or_inside("the test sources", ctx.loaded.tests_src(), ctx.config().tests_hash_exclude()),
    ];
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        out.push(Protected::holding("your home folder", PathBuf::from(home)));
    }
    out
}
