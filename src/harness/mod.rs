//! The two `harness = false` test binaries, as library code so that
//! `tests/*.rs` stay one-liners and the `ccl-coverage` binary can run the same
//! harness on machines without cargo.

pub mod collectives;
pub mod coverage_report;
pub(crate) mod dry_run;
pub mod who_covers;

use crate::config::LauncherKind;
use crate::context::Context;
use crate::error::Result;
use crate::launch::allocation::{Allocation, Want};
use crate::launch::slots::Slots;
use crate::plan::TrialSpec;
use crate::workspace::lock::WorkspaceLock;
use crate::{exec::interrupt, exec::proctree, workspace};
use std::path::PathBuf;
use std::process::ExitCode;

/// The context from the environment, or the exit code after saying why not
/// (a wrong config fails `--list` too: nothing can run from it).
fn load_context() -> Result<Context, ExitCode> {
    Context::from_env().map_err(|e| {
        eprintln!("ccl-coverage: {e}");
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
    workspace::files::restrict_umask();
    prepare_workspace(ctx, access).map_err(|e| {
        eprintln!("ccl-coverage: {e}");
        ExitCode::from(2)
    })
}

fn prepare_workspace(ctx: &Context, access: Access) -> Result<WorkspaceLock> {
    let config = ctx.config();
    if access == Access::Write {
        let orphans = proctree::sweep_orphans(std::time::Duration::from_secs(config.timeouts.grace));
        for o in &orphans {
            eprintln!(
                "ccl-coverage: killed pid {} left behind by a run that died (harness pid {}): {}",
                o.pid, o.owner, o.command
            );
        }
    }
    let protected = protected_paths(ctx);
    let ws = &ctx.workspace;
    match access {
        Access::Write => ws.claim(&config.name, &ctx.loaded.path, &protected)?,
        Access::Report => ws.check_claimed(&config.name, &ctx.loaded.path, &protected)?,
    }
    WorkspaceLock::acquire(ws)
}

/// Folders a workspace must neither hold nor (for sources) lie inside.
fn protected_paths(ctx: &Context) -> Vec<workspace::Protected> {
    use workspace::Protected;
    let mut out = vec![
        Protected::holding("the ccl-coverage project", ctx.root.clone()),
        Protected::holding("the config", ctx.loaded.path.clone()),
        Protected::holding_or_inside("the library sources", ctx.loaded.library_src()),
        Protected::holding_or_inside("the test sources", ctx.loaded.tests_src()),
    ];
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        out.push(Protected::holding("your home folder", PathBuf::from(home)));
    }
    out
}

/// Why a trial cannot run in the allocation (too many nodes, ranks or GPUs),
/// or `None`: it fits, or it runs in this machine's pool.
fn misfit(ctx: &Context, allocation: Option<&Allocation>, spec: &TrialSpec) -> Option<String> {
    let (slots, want) = pool(ctx, allocation, spec);
    let launcher = spec.launcher(ctx.config()).filter(|l| l.kind != LauncherKind::Direct);
    match (allocation, launcher) {
        (Some(a), Some(l)) => a.misfit(l.nodes, spec.ranks, l.gpus_per_task),
        _ => None,
    }
    .or_else(|| slots.misfit(want))
}

/// The slot pool a trial draws from and what it asks of it. A launched
/// trial of the matrix draws GPU slots on the allocation's nodes, spread
/// over its launcher's nodes; any other trial runs here: on the
/// allocation's node of this host's name, else in the config's capacity.
fn pool(ctx: &Context, allocation: Option<&Allocation>, spec: &TrialSpec) -> (Slots, Want) {
    let dir = ctx.state_dir.join("slots");
    let here = Want::spread(spec.ranks, 1, 0);
    let Some(a) = allocation else { return (Slots::new(dir, ctx.config().capacity), here) };
    let launcher = spec.launcher(ctx.config()).filter(|l| l.kind != LauncherKind::Direct);
    match launcher {
        Some(l) if spec.upstream().is_none() => {
            (Slots::across(dir, &a.nodes, &a.source), Want::spread(spec.ranks, l.nodes, l.gpus_per_task))
        }
        _ => {
            let host = crate::exec::host::hostname();
            let short = host.split('.').next().unwrap_or_default();
            match a.nodes.iter().find(|n| n.name == host || n.name.split('.').next() == Some(short)) {
                Some(node) => (Slots::across(dir, std::slice::from_ref(node), &a.source), here),
                None => (Slots::new(dir, ctx.config().capacity), here),
            }
        }
    }
}

/// The nodes, hostfile, Slurm allocation or config `hosts`, of this run.
fn detect_allocation(ctx: &Context) -> Result<Option<Allocation>> {
    Allocation::detect(&crate::config::process_env, &ctx.config().hosts, &ctx.loaded.path)
}
