//! Rank and GPU slots: a trial holds its slots while it runs, so no more ranks
//! run at once than the config's capacity, and packed trials never share a
//! GPU on any node, whatever `--test-threads` says and whether trials are
//! threads of one process (cargo test) or processes (nextest).
//!
//! A pool is one machine with `capacity` slots (`slot-<i>.lock`), or the
//! nodes of a hostfile, Slurm allocation or the config's `hosts`
//! (`allocation.rs`), each with its GPU slots (`slot-<node>-<i>.lock`). A
//! trial asks for [`Want`]: so many nodes with so many GPU slots each, and
//! gets the same GPU indices on each of its nodes (so one
//! `CUDA_VISIBLE_DEVICES={slots}` serves every rank) and the nodes to hand
//! the launcher ([`SlotGuard::hosts`]).
//!
//! Everything is an `flock` on a file under the slots folder: a lock belongs
//! to one open file, so two threads contend exactly like two processes, one
//! mechanism serves both, and the kernel drops a lock when its holder dies, so
//! a killed harness never leaks capacity. Hand-over is event-driven and first
//! come, first served:
//!
//! - A waiter draws a ticket (the number in `tail`, under `alloc.lock`) and
//!   holds `ticket-<n>.lock` until it has its slots; it waits for its turn by
//!   blocking on its predecessor's ticket. So waiters are served in arrival
//!   order, and a 4-rank trial at the head is never overtaken by the 1-rank
//!   trials behind it (with slots taken in one pass it could starve).
//! - The head (the only one taking slots) takes every free slot file and
//!   blocks on every busy one at once, keeping each it gets, until what it
//!   holds has a placement; then it lets the rest go. A release (or a
//!   holder's death) wakes it at once, whichever slot frees first. Once all
//!   running trials end it holds everything, so a trial that fits the pool
//!   ([`Slots::misfit`]) is always placed.
//! - The blocking `flock`s run in helper threads; the waiter waits for them in
//!   bounded steps and gives up when the run is interrupted. A helper whose
//!   waiter is gone drops what it gets at once.

use crate::bail;
use crate::error::{Context, Error, Result};
use crate::launch::allocation::{Node, Want};
use crate::workspace;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// How often a waiter checks whether the run was interrupted.
const INTERRUPT_CHECK: Duration = Duration::from_millis(100);

pub struct Slots {
    dir: PathBuf,
    nodes: Vec<PoolNode>,
    /// Where the pool came from, for messages.
    source: String,
}

/// One node of a pool.
struct PoolNode {
    /// `None`: this machine, bounded by the config's capacity.
    name: Option<String>,
    /// Ranks it may run.
    ranks: usize,
    gpus: usize,
}

/// Held slots; dropping it releases them.
pub struct SlotGuard {
    _held: Vec<File>,
    indices: Vec<usize>,
    hosts: Vec<(String, usize)>,
}

impl SlotGuard {
    /// The GPU slots held, the same on each node: with one slot per GPU, the
    /// GPUs this trial may use (`{slots}` → `CUDA_VISIBLE_DEVICES`), so
    /// packed trials never share one.
    pub(crate) fn indices(&self) -> &[usize] {
        &self.indices
    }

    /// The nodes the trial was placed on and the ranks it runs on each, in
    /// the allocation's order; empty for this machine's pool.
    pub(crate) fn hosts(&self) -> &[(String, usize)] {
        &self.hosts
    }
}

impl Slots {
    /// This machine: `capacity` slots.
    pub fn new(dir: PathBuf, capacity: usize) -> Slots {
        let node = PoolNode { name: None, ranks: capacity, gpus: capacity };
        Slots { dir, nodes: vec![node], source: "the config's capacity".into() }
    }

    /// The GPU slots of `nodes` (of `source`, for messages).
    pub(crate) fn across(dir: PathBuf, nodes: &[Node], source: &str) -> Slots {
        let nodes = nodes
            .iter()
            .map(|n| PoolNode { name: Some(n.name.clone()), ranks: n.slots, gpus: n.gpu_slots() })
            .collect();
        Slots { dir, nodes, source: source.to_string() }
    }

    /// Why `want` can never be placed in this pool, or `None`.
    pub(crate) fn misfit(&self, want: Want) -> Option<String> {
        let fitting = self.nodes.iter().filter(|n| n.ranks >= want.ranks && n.gpus >= want.gpus).count();
        if fitting >= want.nodes {
            return None;
        }
        Some(match self.nodes.as_slice() {
            [PoolNode { name: None, gpus, .. }] => {
                format!("this trial needs {} ranks but the config's capacity is {gpus}", want.gpus)
            }
            _ => format!(
                "needs {} GPU slot(s) and {} rank slot(s) on each of {} node(s) but {} has {fitting} such node(s)",
                want.gpus, want.ranks, want.nodes, self.source
            ),
        })
    }

    /// Where `want` goes when nothing else runs (the dry run's answer), or
    /// `None` if it never fits.
    pub(crate) fn idle_hosts(&self, want: Want) -> Option<Vec<(String, usize)>> {
        let free: Vec<BTreeSet<usize>> = self.nodes.iter().map(|n| (0..n.gpus).collect()).collect();
        let (nodes, _) = self.choose(&free, want)?;
        Some(self.hosts_of(&nodes, want))
    }

    /// Waits for this caller's turn and until `want` can be placed, and
    /// takes those slots together.
    pub fn acquire(&self, want: Want) -> Result<SlotGuard> {
        self.acquire_unless(want, crate::exec::interrupt::requested)
    }

    /// [`Slots::acquire`], giving up once `interrupted` names a signal.
    fn acquire_unless(&self, want: Want, interrupted: impl Fn() -> Option<i32>) -> Result<SlotGuard> {
        if let Some(why) = self.misfit(want) {
            bail!("{why}");
        }
        workspace::files::create_dir(&self.dir)?;
        let (ticket, number) = self.draw_ticket()?;
        if let Some(number) = number.checked_sub(1) {
            let previous = self.dir.join(format!("ticket-{number}.lock"));
            // No file: the predecessor was served and its successor's file is gone too.
            if let Some(file) = self.open_existing(&previous)? {
                let turn = lock_in_threads(vec![(0, file)])?;
                wait(&turn, 1, &interrupted)?;
                let _ = std::fs::remove_file(&previous);
            }
        }
        let guard = self.take(want, &interrupted)?;
        // The next waiter's turn.
        drop(ticket);
        Ok(guard)
    }

    /// This caller's place in the queue: its ticket, locked, and its number.
    fn draw_ticket(&self) -> Result<(File, u64)> {
        let alloc = self.open("alloc.lock")?;
        alloc.lock().map_err(|e| self.lock_error("alloc.lock", e))?;
        let tail = self.dir.join("tail");
        let number = std::fs::read_to_string(&tail).ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(0);
        let name = format!("ticket-{number}.lock");
        let ticket = self.open(&name)?;
        ticket.lock().map_err(|e| self.lock_error(&name, e))?;
        workspace::files::write_atomic(&tail, (number + 1).to_string().as_bytes())?;
        Ok((ticket, number))
    }

    /// The lock file of GPU slot `gpu` of node `node`.
    fn slot_name(&self, node: usize, gpu: usize) -> String {
        match self.nodes.get(node).and_then(|n| n.name.as_deref()) {
            None => format!("slot-{gpu}.lock"),
            Some(name) => format!("slot-{}-{gpu}.lock", file_safe(name)),
        }
    }

    /// At the head of the queue: takes the free slots, then the busy ones as
    /// they free up, until what it holds places `want`; lets the rest go.
    fn take(&self, want: Want, interrupted: &impl Fn() -> Option<i32>) -> Result<SlotGuard> {
        let mut keys = Vec::new();
        let mut held: BTreeMap<(usize, usize), File> = BTreeMap::new();
        let mut busy = Vec::new();
        for (n, node) in self.nodes.iter().enumerate() {
            for gpu in 0..node.gpus {
                let name = self.slot_name(n, gpu);
                let file = self.open(&name)?;
                match file.try_lock() {
                    Ok(()) => {
                        held.insert((n, gpu), file);
                    }
                    Err(TryLockError::WouldBlock) => {
                        busy.push((keys.len(), file));
                        keys.push((n, gpu));
                    }
                    Err(TryLockError::Error(e)) => return Err(self.lock_error(&name, e)),
                }
            }
        }
        let mut freed: Option<Receiver<Locked>> = None;
        loop {
            let mut free: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); self.nodes.len()];
            for &(n, gpu) in held.keys() {
                free[n].insert(gpu);
            }
            if let Some((nodes, indices)) = self.choose(&free, want) {
                let keep: BTreeSet<(usize, usize)> =
                    nodes.iter().flat_map(|&n| indices.iter().map(move |&g| (n, g))).collect();
                // The rest is let go here, for the next in line.
                held.retain(|key, _| keep.contains(key));
                let hosts = self.hosts_of(&nodes, want);
                return Ok(SlotGuard { _held: held.into_values().collect(), indices, hosts });
            }
            let rx = match freed.take() {
                Some(rx) => rx,
                None => lock_in_threads(std::mem::take(&mut busy))?,
            };
            for (tag, file) in wait(&rx, 1, interrupted)? {
                held.insert(keys[tag], file);
            }
            freed = Some(rx);
        }
    }

    /// A placement of `want` in `free` (each node's free GPU indices): the
    /// same indices on `want.nodes` nodes that have the rank slots, earliest
    /// nodes and lowest indices first. With every slot free it finds one
    /// whenever [`Slots::misfit`] says the trial fits.
    fn choose(&self, free: &[BTreeSet<usize>], want: Want) -> Option<(Vec<usize>, Vec<usize>)> {
        let eligible: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].ranks >= want.ranks && free[n].len() >= want.gpus)
            .collect();
        for &anchor in &eligible {
            let mut common = free[anchor].clone();
            let mut chosen = vec![anchor];
            for &n in eligible.iter().filter(|&&n| n != anchor) {
                if chosen.len() >= want.nodes {
                    break;
                }
                let both: BTreeSet<usize> = common.intersection(&free[n]).copied().collect();
                if both.len() >= want.gpus {
                    common = both;
                    chosen.push(n);
                }
            }
            if chosen.len() >= want.nodes {
                chosen.sort_unstable();
                return Some((chosen, common.into_iter().take(want.gpus).collect()));
            }
        }
        None
    }

    /// The named nodes among `nodes`, with the ranks `want` runs on each.
    fn hosts_of(&self, nodes: &[usize], want: Want) -> Vec<(String, usize)> {
        nodes.iter().filter_map(|&n| self.nodes[n].name.clone().map(|name| (name, want.ranks))).collect()
    }

    fn open(&self, name: &str) -> Result<File> {
        workspace::files::open_lock_file(&self.dir.join(name))
    }

    fn open_existing(&self, path: &Path) -> Result<Option<File>> {
        match File::options().write(true).open(path) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::from(e).context(format_args!("cannot open {}", path.display()))),
        }
    }

    fn lock_error(&self, name: &str, e: std::io::Error) -> Error {
        Error::from(e).context(format_args!("cannot lock {}", self.dir.join(name).display()))
    }
}

/// A node name as part of a file name: bytes other than letters, digits,
/// `.`, `-` and `_` as `%XX`, so two names never share a file.
fn file_safe(name: &str) -> String {
    name.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

type Locked = std::io::Result<(usize, File)>;

/// Blocks on each file's lock in a thread of its own; each lock taken comes
/// back on the channel, tagged.
fn lock_in_threads(files: Vec<(usize, File)>) -> Result<Receiver<Locked>> {
    let (tx, rx) = mpsc::channel();
    for (tag, file) in files {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("ccl-cov-slot-wait".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                // If the waiter is gone the lock is dropped, so released, here.
                let _ = tx.send(file.lock().map(|()| (tag, file)));
            })
            .context("cannot start a thread to wait for rank slots")?;
    }
    Ok(rx)
}

/// Waits for `count` locks from [`lock_in_threads`], checking for an
/// interruption in between.
fn wait(
    locked: &Receiver<Locked>,
    count: usize,
    interrupted: &impl Fn() -> Option<i32>,
) -> Result<BTreeMap<usize, File>> {
    let mut got = BTreeMap::new();
    while got.len() < count {
        match locked.recv_timeout(INTERRUPT_CHECK) {
            Ok(Ok((tag, file))) => {
                got.insert(tag, file);
            }
            Ok(Err(e)) => bail!("cannot lock a rank slot: {e}"),
            Err(RecvTimeoutError::Timeout) => {
                if let Some(sig) = interrupted() {
                    bail!(
                        "not run: the run was interrupted by {} while this trial waited for rank slots",
                        crate::exec::process::signal_name(sig)
                    );
                }
            }
            Err(RecvTimeoutError::Disconnected) => bail!("every wait for a rank slot ended without the slot"),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Instant;

    /// Runs `f` in a thread and fails the test if it takes longer than `limit`.
    fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(limit).unwrap_or_else(|e| panic!("not done within {limit:?}: {e}"))
    }

    const LIMIT: Duration = Duration::from_secs(30);

    /// `ranks` ranks on one node.
    fn one(ranks: usize) -> Want {
        Want::spread(ranks, 1, 0)
    }

    #[test]
    fn never_more_ranks_than_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Arc::new(Slots::new(dir.path().join("slots"), 4));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = [3, 2, 4, 1, 3, 2, 1, 4]
            .into_iter()
            .map(|ranks| {
                let (slots, running, peak) = (slots.clone(), running.clone(), peak.clone());
                std::thread::spawn(move || {
                    let guard = slots.acquire(one(ranks)).unwrap();
                    assert_eq!(guard.indices().len(), ranks);
                    let now = running.fetch_add(ranks, Ordering::SeqCst) + ranks;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    running.fetch_sub(ranks, Ordering::SeqCst);
                })
            })
            .collect();
        within(LIMIT, move || threads.into_iter().for_each(|t| t.join().unwrap()));
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak <= 4, "peak {peak} ranks exceeded capacity 4");
        assert!(peak >= 3, "trials did run side by side (peak {peak})");
    }

    #[test]
    fn concurrent_holders_get_disjoint_slots() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Slots::new(dir.path().to_path_buf(), 8);
        let a = slots.acquire(one(2)).unwrap();
        let b = slots.acquire(one(2)).unwrap();
        let c = slots.acquire(one(4)).unwrap();
        let mut all: Vec<usize> = [a.indices(), b.indices(), c.indices()].concat();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        drop(b);
        assert_eq!(slots.acquire(one(2)).unwrap().indices(), [2, 3], "freed slots are reused");
    }

    #[test]
    fn oversized_trial_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Slots::new(dir.path().to_path_buf(), 2).acquire(one(3)).err().unwrap().to_string();
        assert!(err.contains("needs 3 ranks but the config's capacity is 2"), "{err}");
    }

    fn two_nodes(gpus: usize) -> Vec<Node> {
        ["n1", "n2"].iter().map(|n| Node { name: n.to_string(), slots: 4, gpus: Some(gpus) }).collect()
    }

    #[test]
    fn packed_trials_on_two_nodes_never_share_a_node_and_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Arc::new(Slots::across(dir.path().to_path_buf(), &two_nodes(4), "the test's hosts"));
        let busy = Arc::new(std::sync::Mutex::new(BTreeSet::<(String, usize)>::new()));
        let peak = Arc::new(AtomicUsize::new(0));
        // 2-node trials of 2 or 4 ranks (1 or 2 GPUs a node) and 1-node ones.
        let wants = [(2, 2), (4, 2), (1, 1), (2, 2), (3, 1), (2, 2), (4, 2), (1, 1), (2, 1), (4, 2)];
        let threads: Vec<_> = wants
            .into_iter()
            .map(|(ranks, nodes)| {
                let (slots, busy, peak) = (slots.clone(), busy.clone(), peak.clone());
                std::thread::spawn(move || {
                    let want = Want::spread(ranks, nodes, 1);
                    let guard = slots.acquire(want).unwrap();
                    assert_eq!(guard.hosts().len(), nodes);
                    assert_eq!(guard.indices().len(), want.gpus);
                    let pairs: Vec<(String, usize)> = guard
                        .hosts()
                        .iter()
                        .flat_map(|(host, _)| guard.indices().iter().map(move |&g| (host.clone(), g)))
                        .collect();
                    {
                        let mut now = busy.lock().unwrap();
                        for pair in &pairs {
                            assert!(now.insert(pair.clone()), "{pair:?} is held by two trials at once");
                        }
                        peak.fetch_max(now.len(), Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(40));
                    let mut now = busy.lock().unwrap();
                    for pair in &pairs {
                        now.remove(pair);
                    }
                })
            })
            .collect();
        within(LIMIT, move || threads.into_iter().for_each(|t| t.join().unwrap()));
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak > 4, "trials were packed side by side (peak {peak} GPUs of 8 held)");
    }

    #[test]
    fn a_two_node_trial_waits_for_the_same_gpus_on_both_nodes() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Arc::new(Slots::across(dir.path().to_path_buf(), &two_nodes(2), "the test's hosts"));
        // One GPU held on n1 only: a 2-node trial of 1 GPU a node takes the other on both.
        let n1 = Slots::across(dir.path().to_path_buf(), &two_nodes(2)[..1], "n1").acquire(one(1)).unwrap();
        assert_eq!((n1.hosts(), n1.indices()), (&[("n1".to_string(), 1)][..], &[0][..]));
        let both = slots.acquire(Want::spread(2, 2, 1)).unwrap();
        assert_eq!(both.hosts(), [("n1".to_string(), 1), ("n2".to_string(), 1)]);
        assert_eq!(both.indices(), [1]);
        // Now n2's GPU 0 is free but n1's is not: 2 GPUs a node must wait for both.
        let waiting = {
            let (tx, rx) = mpsc::channel();
            let slots = slots.clone();
            std::thread::spawn(move || {
                let _ = tx.send(slots.acquire(Want::spread(4, 2, 1)).map(|g| g.indices().to_vec()));
            });
            rx
        };
        std::thread::sleep(SETTLE);
        drop(both);
        std::thread::sleep(SETTLE);
        assert!(waiting.try_recv().is_err(), "placed while n1's GPU 0 was held");
        drop(n1);
        assert_eq!(waiting.recv_timeout(LIMIT).unwrap().unwrap(), [0, 1]);
    }

    #[test]
    fn a_trial_too_big_for_the_nodes_is_told_why() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Slots::across(dir.path().to_path_buf(), &two_nodes(2), "the config's hosts (/c.json)");
        assert_eq!(slots.misfit(Want::spread(4, 2, 1)), None);
        let why = slots.misfit(Want::spread(4, 2, 2)).unwrap();
        assert_eq!(
            why,
            "needs 4 GPU slot(s) and 2 rank slot(s) on each of 2 node(s) but the config's hosts (/c.json) has 0 such node(s)"
        );
        assert_eq!(slots.acquire(Want::spread(4, 2, 2)).err().unwrap().to_string(), why, "never waits for it");
        assert_eq!(slots.idle_hosts(Want::spread(4, 2, 1)), Some(vec![("n1".into(), 2), ("n2".into(), 2)]));
        assert_eq!(slots.idle_hosts(Want::spread(2, 3, 1)), None);
    }

    /// Waits in a thread; the guard comes back on the channel with the time it
    /// was granted.
    fn waiter(slots: &Arc<Slots>, ranks: usize) -> Receiver<(SlotGuard, Instant)> {
        let (tx, rx) = mpsc::channel();
        let slots = slots.clone();
        std::thread::spawn(move || {
            let guard = slots.acquire(one(ranks)).unwrap();
            let _ = tx.send((guard, Instant::now()));
        });
        rx
    }

    /// Long enough for a waiter thread to have queued.
    const SETTLE: Duration = Duration::from_millis(300);

    #[test]
    fn a_big_trial_that_came_first_is_not_overtaken_by_small_ones() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Arc::new(Slots::new(dir.path().to_path_buf(), 4));
        let running = slots.acquire(one(3)).unwrap();
        let big = waiter(&slots, 4);
        std::thread::sleep(SETTLE);
        let small: Vec<_> = (0..2).map(|_| waiter(&slots, 1)).collect();
        std::thread::sleep(SETTLE);
        // One slot is free, but the 4-rank trial is first in line.
        assert!(small.iter().all(|s| s.try_recv().is_err()), "a 1-rank trial overtook the 4-rank one");
        drop(running);
        let (big_guard, big_at) = big.recv_timeout(LIMIT).expect("the 4-rank trial runs once the slots are free");
        assert_eq!(big_guard.indices(), [0, 1, 2, 3]);
        std::thread::sleep(SETTLE);
        assert!(small.iter().all(|s| s.try_recv().is_err()), "capacity exceeded");
        drop(big_guard);
        for s in small {
            let (guard, at) = s.recv_timeout(LIMIT).expect("the 1-rank trials run after it");
            assert!(at > big_at);
            assert_eq!(guard.indices().len(), 1);
        }
    }

    #[test]
    fn a_waiter_wakes_as_soon_as_slots_are_freed() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Arc::new(Slots::new(dir.path().to_path_buf(), 2));
        let mut latencies: Vec<Duration> = (0..15)
            .map(|_| {
                let holder = slots.acquire(one(2)).unwrap();
                let next = waiter(&slots, 1);
                std::thread::sleep(Duration::from_millis(20));
                let released = Instant::now();
                drop(holder);
                let (_guard, at) = next.recv_timeout(LIMIT).expect("woken");
                at - released
            })
            .collect();
        latencies.sort();
        // Waking on the interruption check instead would take 50 ms on average.
        let median = latencies[latencies.len() / 2];
        assert!(median < Duration::from_millis(30), "median hand-over {median:?}: {latencies:?}");
    }

    #[test]
    fn an_interrupted_waiter_gives_up_promptly() {
        let dir = tempfile::tempdir().unwrap();
        let slots = Arc::new(Slots::new(dir.path().to_path_buf(), 2));
        let _held = slots.acquire(one(2)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        {
            let (slots, stop) = (slots.clone(), stop.clone());
            std::thread::spawn(move || {
                let got = slots.acquire_unless(one(1), || stop.load(Ordering::SeqCst).then_some(libc::SIGINT));
                let _ = tx.send(got.err().map(|e| e.to_string()));
            });
        }
        std::thread::sleep(SETTLE);
        let stopped = Instant::now();
        stop.store(true, Ordering::SeqCst);
        let err = rx.recv_timeout(LIMIT).unwrap().expect("gave up");
        assert!(stopped.elapsed() < Duration::from_secs(1), "took {:?}", stopped.elapsed());
        assert!(err.contains("interrupted by SIGINT while this trial waited for rank slots"), "{err}");
    }

    const CHILD_DIR: &str = "CCL_COV_TEST_SLOTS_CHILD";

    /// Not a test on its own: the other process of
    /// `slots_are_shared_with_other_processes_and_freed_when_they_die`.
    #[test]
    #[ignore = "run as a child process by another test"]
    fn child_holds_three_slots() {
        let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
        let _held = Slots::new(dir.into(), 4).acquire(one(3)).unwrap();
        crate::output!("held\n");
        std::thread::sleep(LIMIT);
    }

    #[test]
    fn slots_are_shared_with_other_processes_and_freed_when_they_die() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "launch::slots::tests::child_holds_three_slots", "--ignored", "--nocapture"])
            .env(CHILD_DIR, dir.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let held = within(LIMIT, move || out.lines().map_while(std::result::Result::ok).any(|l| l == "held"));
        assert!(held, "the child took its slots");
        let slots = Arc::new(Slots::new(dir.path().to_path_buf(), 4));
        let one = within(LIMIT, {
            let slots = slots.clone();
            move || slots.acquire(one(1)).unwrap()
        });
        assert_eq!(one.indices(), [3], "the child holds 0, 1 and 2");
        let two = waiter(&slots, 2);
        std::thread::sleep(SETTLE);
        assert!(two.try_recv().is_err(), "capacity exceeded across processes");
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        let (guard, at) = two.recv_timeout(LIMIT).expect("the dead child's slots are free");
        assert!(guard.indices().len() == 2 && guard.indices().iter().all(|&i| i < 3), "{:?}", guard.indices());
        assert!(at - killed < Duration::from_secs(2), "took {:?}", at - killed);
    }
}
