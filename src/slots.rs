//! Rank slots: a trial holds one slot per rank while it runs, so no more ranks
//! run at once than the config's capacity, whatever `--test-threads` says and
//! whether trials are threads of one process (cargo test) or processes
//! (nextest). Slots are lock files; the kernel drops a lock when its holder
//! dies, so a killed harness never leaks capacity.

use crate::bail;
use crate::error::{Error, Result};
use crate::workspace;
use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

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

    /// Waits until `ranks` slots are free and takes them together.
    pub fn acquire(&self, ranks: usize) -> Result<SlotGuard> {
        if ranks > self.capacity {
            bail!("this trial needs {ranks} ranks but the config's capacity is {}", self.capacity);
        }
        workspace::create_dir(&self.dir)?;
        let open = |name: String| {
            let path = self.dir.join(name);
            File::create(&path).map_err(|e| Error::new(format!("cannot create {}: {e}", path.display())))
        };
        loop {
            // Taking slots one by one under a shared allocation lock means two
            // trials never each hold half of what both need.
            let allocation = open("alloc.lock".into())?;
            allocation.lock().map_err(|e| Error::new(format!("cannot lock {}: {e}", self.dir.display())))?;
            let mut held = Vec::with_capacity(ranks);
            let mut indices = Vec::with_capacity(ranks);
            for slot in 0..self.capacity {
                if held.len() == ranks {
                    break;
                }
                let file = open(format!("slot-{slot}.lock"))?;
                if file.try_lock().is_ok() {
                    held.push(file);
                    indices.push(slot);
                }
            }
            drop(allocation);
            if held.len() == ranks {
                return Ok(SlotGuard { _held: held, indices });
            }
            drop(held);
            if let Some(sig) = crate::interrupt::requested() {
                bail!(
                    "not run: the run was interrupted by {} while this trial waited for rank slots",
                    crate::process::signal_name(sig)
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        for t in threads {
            t.join().unwrap();
        }
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
}
