//! The bounds of every number a config holds.

use super::Bound;

/// `capacity`: ranks that may run at once (one lock file each).
pub(crate) const CAPACITY: Bound = Bound { min: 1, max: 4096, unit: "ranks" };
/// `launch.ranks`, `variants[].ranks`; also at most `capacity`.
pub(crate) const RANKS: Bound = Bound { min: 1, max: 4096, unit: "ranks, at most the config's capacity" };
/// `timeouts.default`, `timeouts.overrides[].seconds`,
/// `timeouts.device_coverage[].seconds`: a week is far beyond any real
/// trial and keeps every deadline representable.
pub const TIMEOUT_SECONDS: Bound = Bound { min: 1, max: 7 * 24 * 3600, unit: "seconds, at most 7 days" };
/// `timeouts.grace`: SIGTERM to SIGKILL.
pub const GRACE_SECONDS: Bound = Bound { min: 0, max: 3600, unit: "seconds, at most 1 hour" };
/// `launchers.*.nodes`: nodes one trial spans.
pub(crate) const NODES: Bound = Bound { min: 1, max: 4096, unit: "nodes" };
/// `launchers.*.gpus_per_task`.
pub(crate) const GPUS_PER_TASK: Bound = Bound { min: 0, max: 64, unit: "GPUs per rank" };
/// `hosts[].slots`: ranks one node may run.
pub(crate) const HOST_SLOTS: Bound = Bound { min: 1, max: 4096, unit: "ranks" };
/// `hosts[].gpus`: GPUs of one node.
pub(crate) const HOST_GPUS: Bound = Bound { min: 1, max: 1024, unit: "GPUs" };
/// `hosts`: nodes a config may name.
pub(crate) const HOSTS: usize = 4096;
/// `logs.max_mib`: a log of more than 64 GiB is no cap.
pub(crate) const LOG_MIB: Bound = Bound { min: 1, max: 65_536, unit: "MiB" };
/// `iterations.iters` (`-n`).
pub(crate) const ITERS: Bound = Bound { min: 1, max: 1_000_000, unit: "iterations" };
/// `iterations.warmup` (`-w`).
pub(crate) const WARMUP: Bound = Bound { min: 0, max: 1_000_000, unit: "iterations" };
/// `sizes[]`, in bytes after the K/M/G suffix (1 TiB = `1024G`).
pub(crate) const SIZE_BYTES: Bound = Bound { min: 0, max: 1 << 40, unit: "bytes, at most 1024G" };
/// Collective, variant, launcher and config names: short enough that a
/// trial's file name (`Collective.size.variant.profdata`) stays under the
/// 255-byte limit of a file name.
pub(crate) const NAME_BYTES: usize = 100;
/// Collectives × sizes × variants: the plan is built in memory at every
/// start (even `--list`).
pub const TRIALS: usize = 10_000;
