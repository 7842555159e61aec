//! One writer per workspace.
//!
//! Two runs on one workspace rewrite each other's logs, results and profiles
//! and give false verdicts, so a run holds `<ws>/.owner.lock` (an `flock`,
//! which the kernel drops when its holder dies) from start to end, and
//! `<ws>/.owner.json` says who holds it. A second run fails fast with a
//! message that names the holder.
//!
//! The test processes of one `cargo nextest` run (same `NEXTEST_RUN_ID`) are
//! one run: they share the lock (`LOCK_SH`), and a process of another run or
//! a plain `cargo test` cannot join them. Taking the lock and reading or
//! writing the holder record happen under `<ws>/.owner.guard`, held for
//! milliseconds, so the check and the take are one step.

use crate::bail;
use crate::error::{Context, Result};
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::fs::{File, TryLockError};
use std::path::PathBuf;

/// Who holds a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holder {
    pub(crate) pid: u32,
    /// The holder's start time in clock ticks after boot (tells a reused pid apart).
    pub(crate) start_time: u64,
    pub(crate) command: String,
    pub(crate) started_at: String,
    /// `NEXTEST_RUN_ID` of the holder, when nextest runs it.
    pub(crate) run_id: Option<String>,
}

impl Holder {
    fn me(run_id: Option<String>) -> Holder {
        let pid = std::process::id();
        Holder {
            pid,
            start_time: crate::exec::proctree::stat_of(pid as libc::pid_t).map_or(0, |s| s.start_time),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            started_at: crate::exec::host::now(),
            run_id,
        }
    }

    fn describe(&self) -> String {
        let run = self.run_id.as_ref().map(|r| format!(", nextest run {r}")).unwrap_or_default();
        format!("pid {} (`{}`), started {}{run}", self.pid, self.command, self.started_at)
    }

    fn alive(&self) -> bool {
        crate::exec::proctree::stat_of(self.pid as libc::pid_t).is_some_and(|s| s.start_time == self.start_time)
    }
}

/// The held lock; dropping it releases the workspace.
#[derive(Debug)]
pub(crate) struct WorkspaceLock {
    file: File,
    ws: Workspace,
    /// `.owner.guard`, taken again for the release.
    guard: PathBuf,
    record: PathBuf,
    exclusive: bool,
}

impl WorkspaceLock {
    /// Takes `ws` for this process, sharing it only with processes of the
    /// same nextest run (`NEXTEST_RUN_ID`).
    pub fn acquire(ws: &Workspace) -> Result<WorkspaceLock> {
        Self::acquire_as(ws, std::env::var(crate::env_names::NEXTEST_RUN_ID).ok().filter(|r| !r.is_empty()))
    }

    pub(crate) fn acquire_as(ws: &Workspace, run_id: Option<String>) -> Result<WorkspaceLock> {
        // The first file a run writes in a workspace it already owns.
        let open = |name: &str| {
            ws.open_lock(&ws.root().join(name))
                .with_context(|| format!("the workspace {} is not writable", ws.root().display()))
        };
        let guard_path = ws.root().join(".owner.guard");
        let guard = open(".owner.guard")?;
        guard.lock().with_context(|| format!("cannot lock {}", guard_path.display()))?;
        let file = open(".owner.lock")?;
        let record = ws.root().join(".owner.json");
        let previous: Option<Holder> =
            ws.read_opt(&record).ok().flatten().and_then(|bytes| serde_json::from_slice(&bytes).ok());
        match file.try_lock() {
            Ok(()) => {
                if let Some(prev) = previous.filter(|p| p.pid != std::process::id() && !p.alive()) {
                    let holder = prev.describe();
                    crate::reporter::emit(crate::reporter::Event::WorkspaceTakenOver {
                        root: ws.root(),
                        holder: &holder,
                    });
                }
                let me = Holder::me(run_id.clone());
                let text = serde_json::to_string_pretty(&me).expect("holder serializes");
                ws.write(&record, text.as_bytes())?;
                let exclusive = run_id.is_none();
                if !exclusive {
                    // Under the guard nobody can slip in between the two calls.
                    file.unlock().and_then(|()| file.lock_shared()).with_context(|| {
                        format!("cannot share the lock {}", ws.root().join(".owner.lock").display())
                    })?;
                }
                Ok(WorkspaceLock { file, ws: ws.clone(), guard: guard_path, record, exclusive })
            }
            Err(TryLockError::WouldBlock) => {
                let same_run = run_id.is_some() && previous.as_ref().is_some_and(|p| p.run_id == run_id);
                if same_run && file.try_lock_shared().is_ok() {
                    return Ok(WorkspaceLock { file, ws: ws.clone(), guard: guard_path, record, exclusive: false });
                }
                let holder = previous.map_or_else(|| "another process".to_string(), |p| p.describe());
                bail!(
                    "the workspace {} is in use by {holder}: two runs on one workspace would mix their logs, results and profiles. Wait for it to finish, or set CCL_COV_WORKSPACE to another folder",
                    ws.root().display()
                )
            }
            Err(TryLockError::Error(e)) => {
                bail!("cannot lock {}: {e}", ws.root().join(".owner.lock").display())
            }
        }
    }
}

impl Drop for WorkspaceLock {
    /// The last holder removes the record, so the next run does not take a
    /// run that ended for one that died. A shared holder (a nextest process)
    /// is the last when it can take the lock alone; under the guard no
    /// process joins meanwhile, and the record goes before the lock does.
    fn drop(&mut self) {
        // `clean` may have emptied the workspace: no guard is made again then.
        let guard = self.ws.beneath().and_then(|b| b.open_read(&self.guard));
        if let Ok(guard) = &guard {
            let _ = guard.lock();
        }
        if self.exclusive || self.file.try_lock().is_ok() {
            let _ = self.ws.beneath().and_then(|b| b.remove(&self.record));
        }
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn a_second_run_is_refused_and_told_who_holds_it() {
        let (_d, ws) = ws();
        let first = WorkspaceLock::acquire_as(&ws, None).unwrap();
        let err = WorkspaceLock::acquire_as(&ws, None).unwrap_err().to_string();
        assert!(err.contains(&format!("in use by pid {}", std::process::id())), "{err}");
        assert!(err.contains("started "), "{err}");
        drop(first);
        WorkspaceLock::acquire_as(&ws, None).expect("free again once released");
    }

    #[test]
    fn one_nextest_run_shares_and_another_is_refused() {
        let (_d, ws) = ws();
        let a = WorkspaceLock::acquire_as(&ws, Some("run-1".into())).unwrap();
        let b = WorkspaceLock::acquire_as(&ws, Some("run-1".into())).expect("same run shares");
        let err = WorkspaceLock::acquire_as(&ws, Some("run-2".into())).unwrap_err().to_string();
        assert!(err.contains("nextest run run-1"), "{err}");
        let err = WorkspaceLock::acquire_as(&ws, None).unwrap_err().to_string();
        assert!(err.contains("in use by"), "{err}");
        drop(a);
        let err = WorkspaceLock::acquire_as(&ws, None).unwrap_err().to_string();
        assert!(err.contains("nextest run run-1"), "b still holds it, and the record still says so: {err}");
        drop(b);
        assert!(!ws.root().join(".owner.json").exists(), "the run's last process removes the record");
        WorkspaceLock::acquire_as(&ws, None).expect("free once the whole run is done");
    }

    /// The workspace folder of [`child_takes_the_workspace`]; with
    /// [`CHILD_HOLDS`] set it holds the lock until killed.
    const CHILD_DIR: &str = "CCL_COV_TEST_LOCK_CHILD";
    const CHILD_HOLDS: &str = "CCL_COV_TEST_LOCK_CHILD_HOLDS";

    /// Not a test on its own: a process of
    /// `a_clean_nextest_run_leaves_no_claim_and_a_dead_holder_is_still_named`.
    #[test]
    #[ignore = "run as a child process by another test"]
    fn child_takes_the_workspace() {
        let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
        let ws = Workspace::new(std::path::Path::new(&dir)).unwrap();
        let _lock = WorkspaceLock::acquire(&ws).unwrap();
        crate::output!("held\n");
        if std::env::var_os(CHILD_HOLDS).is_some() {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }

    /// One process of a run that takes `ws` (as nextest's test processes
    /// do, with `run_id`), and ends or, with `hold`, holds it.
    fn process(ws: &Workspace, run_id: Option<&str>, hold: bool) -> std::process::Child {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "workspace::lock::tests::child_takes_the_workspace", "--ignored", "--nocapture"])
            .env(CHILD_DIR, ws.root())
            .env_remove(CHILD_HOLDS)
            .env_remove(crate::env_names::NEXTEST_RUN_ID)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if let Some(id) = run_id {
            cmd.env(crate::env_names::NEXTEST_RUN_ID, id);
        }
        if hold {
            cmd.env(CHILD_HOLDS, "1");
        }
        cmd.spawn().unwrap()
    }

    /// What a process that ran to its end printed on stderr.
    fn stderr_of_clean_run(ws: &Workspace, run_id: Option<&str>) -> String {
        let out = process(ws, run_id, false).wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    #[test]
    fn a_clean_nextest_run_leaves_no_claim_and_a_dead_holder_is_still_named() {
        use std::io::BufRead;
        let (_d, ws) = ws();
        assert_eq!(stderr_of_clean_run(&ws, Some("run-1")), "");
        assert_eq!(stderr_of_clean_run(&ws, Some("run-2")), "", "no takeover after a clean nextest run");
        assert_eq!(stderr_of_clean_run(&ws, None), "", "nor after its second run");
        assert!(!ws.root().join(".owner.json").exists(), "a run that ended leaves no claim");

        let mut holder = process(&ws, Some("run-3"), true);
        let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
        let held = (&mut out).lines().map_while(std::result::Result::ok).any(|l| l == "held");
        assert!(held, "the holder took the workspace");
        let pid = holder.id();
        holder.kill().unwrap();
        holder.wait().unwrap();
        let next = stderr_of_clean_run(&ws, None);
        let expected = format!("taking over the workspace {}: its last holder, pid {pid} (", ws.root().display());
        assert!(next.contains(&expected) && next.contains("nextest run run-3"), "{next}");
    }

    #[test]
    fn a_stale_record_of_a_dead_holder_is_taken_over() {
        let (_d, ws) = ws();
        let dead = Holder {
            pid: u32::MAX / 2,
            start_time: 1,
            command: "collectives".into(),
            started_at: "then".into(),
            run_id: None,
        };
        std::fs::write(ws.root().join(".owner.json"), serde_json::to_string(&dead).unwrap()).unwrap();
        let lock = WorkspaceLock::acquire_as(&ws, None).unwrap();
        let record: Holder =
            serde_json::from_str(&std::fs::read_to_string(ws.root().join(".owner.json")).unwrap()).unwrap();
        assert_eq!(record.pid, std::process::id());
        drop(lock);
    }
}
