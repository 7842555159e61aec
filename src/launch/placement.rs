//! Where a trial runs: the nodes of this run (hostfile, Slurm allocation or
//! the config's hosts), the slot pool a trial draws its ranks and GPUs from,
//! and why a trial does not fit.

use crate::config::LauncherKind;
use crate::context::Context;
use crate::error::Result;
use crate::launch::allocation::{Allocation, Want};
use crate::launch::slots::Slots;
use crate::plan::TrialSpec;

/// Why a trial cannot run in the allocation (too many nodes, ranks or GPUs),
/// or `None`: it fits, or it runs in this machine's pool.
pub(crate) fn misfit(ctx: &Context, allocation: Option<&Allocation>, spec: &TrialSpec) -> Option<String> {
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
pub(crate) fn pool(ctx: &Context, allocation: Option<&Allocation>, spec: &TrialSpec) -> (Slots, Want) {
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
pub(crate) fn detect_allocation(ctx: &Context) -> Result<Option<Allocation>> {
    Allocation::detect(&crate::config::process_env, &ctx.config().hosts, &ctx.loaded.path)
}
