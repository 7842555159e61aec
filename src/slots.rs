//! Rank slots: a trial holds one slot per rank while it runs, so no more ranks
//! run at once than the config's capacity, whatever `--test-threads` says and
//! whether trials are threads of one process (cargo test) or processes
//! (nextest).
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
//! - The head takes the free `slot-<i>.lock`s and blocks on every busy one at
//!   once, keeping each it gets, until it has enough: a release (or a
//!   holder's death) wakes it at once, whichever slot frees first.
//! - The blocking `flock`s run in helper threads; the waiter waits for them in
//!   bounded steps and gives up when the run is interrupted. A helper whose
//!   waiter is gone drops what it gets at once.

use crate::bail;
use crate::error::{Error, Result};
use crate::workspace;
use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// How often a waiter checks whether the run was interrupted.
const INTERRUPT_CHECK: Duration = Duration::from_millis(100);

pub struct Slots {
    dir: PathBuf,
    capacity: usize,
}

/// Held slots; dropping it releases them.
pub struct SlotGuard {
    _held: Vec<File>,
    indices: Vec<usize>,
}

impl SlotGuard {
    /// Which slots are held: with one slot per GPU, the GPUs this trial may
    /// use (`{slots}` → `CUDA_VISIBLE_DEVICES`), so packed trials never share one.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

impl Slots {
    pub fn new(dir: PathBuf, capacity: usize) -> Slots {
        Slots { dir, capacity }
    }

    /// Waits for this caller's turn and until `ranks` slots are free, and
    /// takes them together.
    pub fn acquire(&self, ranks: usize) -> Result<SlotGuard> {
        self.acquire_unless(ranks, crate::interrupt::requested)
    }

    /// [`Slots::acquire`], giving up once `interrupted` names a signal.
    fn acquire_unless(&self, ranks: usize, interrupted: impl Fn() -> Option<i32>) -> Result<SlotGuard> {
        if ranks > self.capacity {
            bail!("this trial needs {ranks} ranks but the config's capacity is {}", self.capacity);
        }
        workspace::create_dir(&self.dir)?;
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
        let guard = self.take(ranks, &interrupted)?;
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
        workspace::write_atomic(&tail, (number + 1).to_string().as_bytes())?;
        Ok((ticket, number))
    }

    /// At the head of the queue: takes the free slots, then the busy ones as
    /// they free up, until it holds `ranks`.
    fn take(&self, ranks: usize, interrupted: &impl Fn() -> Option<i32>) -> Result<SlotGuard> {
        let mut held = BTreeMap::new();
        let mut busy = Vec::new();
        for slot in 0..self.capacity {
            if held.len() == ranks {
                break;
            }
            let name = format!("slot-{slot}.lock");
            let file = self.open(&name)?;
            match file.try_lock() {
                Ok(()) => {
                    held.insert(slot, file);
                }
                Err(TryLockError::WouldBlock) => busy.push((slot, file)),
                Err(TryLockError::Error(e)) => return Err(self.lock_error(&name, e)),
            }
        }
        if held.len() < ranks {
            let freed = lock_in_threads(busy)?;
            held.extend(wait(&freed, ranks - held.len(), interrupted)?);
        }
        let (indices, held) = held.into_iter().unzip();
        Ok(SlotGuard { _held: held, indices })
    }

    fn open(&self, name: &str) -> Result<File> {
        let path = self.dir.join(name);
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::new(format!("cannot open {}: {e}", path.display())))
    }

    fn open_existing(&self, path: &Path) -> Result<Option<File>> {
        match File::options().write(true).open(path) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => bail!("cannot open {}: {e}", path.display()),
        }
    }

    fn lock_error(&self, name: &str, e: std::io::Error) -> Error {
        Error::new(format!("cannot lock {}: {e}", self.dir.join(name).display()))
    }
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
            .map_err(|e| Error::new(format!("cannot start a thread to wait for rank slots: {e}")))?;
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
                        crate::process::signal_name(sig)
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
                    let guard = slots.acquire(ranks).unwrap();
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
        let a = slots.acquire(2).unwrap();
        let b = slots.acquire(2).unwrap();
        let c = slots.acquire(4).unwrap();
        let mut all: Vec<usize> = [a.indices(), b.indices(), c.indices()].concat();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        drop(b);
        assert_eq!(slots.acquire(2).unwrap().indices(), [2, 3], "freed slots are reused");
    }

    #[test]
    fn oversized_trial_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Slots::new(dir.path().to_path_buf(), 2).acquire(3).err().unwrap().to_string();
        assert!(err.contains("needs 3 ranks but the config's capacity is 2"), "{err}");
    }

    /// Waits in a thread; the guard comes back on the channel with the time it
    /// was granted.
    fn waiter(slots: &Arc<Slots>, ranks: usize) -> Receiver<(SlotGuard, Instant)> {
        let (tx, rx) = mpsc::channel();
        let slots = slots.clone();
        std::thread::spawn(move || {
            let guard = slots.acquire(ranks).unwrap();
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
        let running = slots.acquire(3).unwrap();
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
                let holder = slots.acquire(2).unwrap();
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
        let _held = slots.acquire(2).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        {
            let (slots, stop) = (slots.clone(), stop.clone());
            std::thread::spawn(move || {
                let got = slots.acquire_unless(1, || stop.load(Ordering::SeqCst).then_some(libc::SIGINT));
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
        let _held = Slots::new(dir.into(), 4).acquire(3).unwrap();
        println!("held");
        std::thread::sleep(LIMIT);
    }

    #[test]
    fn slots_are_shared_with_other_processes_and_freed_when_they_die() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "slots::tests::child_holds_three_slots", "--ignored", "--nocapture"])
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
            move || slots.acquire(1).unwrap()
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
