//! Beyond `mpirun` of Open MPI on one host, for real: MPICH's `mpirun.mpich`
//! (Hydra) beside Open MPI, with the perf binaries built against MPICH; and
//! Slurm, a single-node cluster these tests start themselves (munge,
//! slurmctld, slurmd), running trials through `srun` with Open MPI
//! (`--mpi=pmix`) and MPICH (`--mpi=pmi2`). Every daemon is stopped by PID
//! by a guard, even when a test fails; every wait is bounded.

use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{Setup, files_under, is_root, only, output_within, processes_mentioning, result, setup};

/// No harness run may take longer (a first run builds the fixture, and the
/// MPICH config builds its own copy).
const LIMIT: Duration = Duration::from_secs(600);

/// `configs/local.json` with its perf binaries built against MPICH: CMake's
/// `FindMPI` reads the include and link flags from MPICH's compiler wrapper
/// (the compiler stays clang). Open MPI's `mpirun` stays the default
/// alternative; MPICH is reached as `mpirun.mpich`.
fn build_against_mpich(v: &mut Value) {
    let configure = &mut v["tests"]["steps"][0]["argv"];
    configure.as_array_mut().unwrap().push(json!("-DMPI_CXX_COMPILER=mpicxx.mpich"));
}

/// A launcher for MPI ranks whose flavour the harness detects.
fn mpirun(program: &str) -> Value {
    json!({"kind": "mpirun", "program": program, "flavor": "auto", "program_args": ["-t", "1", "-g", "1"]})
}

/// The raw profiles a trial left (kept with `CCL_COV_KEEP_RAW=1`).
fn raw_profiles(s: &Setup, slug: &str) -> Vec<String> {
    files_under(&s.ws.join("profiles").join(slug))
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".profraw"))
        .collect()
}

/// Checks that `slug` passed with every rank's profile and that its argv
/// carries `needles`.
fn passed_with_every_profile(s: &Setup, slug: &str, ranks: usize, needles: &[&str], log: &str) {
    let r = result(s, slug);
    assert_eq!(r["status"], "PASSED", "{slug}: {}\n{log}", r["reason"]);
    let argv = r["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>().join(" ");
    for needle in needles {
        assert!(argv.contains(needle), "{slug}: {needle:?} not in {argv}");
    }
    // `%h-%p-%m`: one profile per rank and instrumented module (libccl, the tuner).
    let raw = raw_profiles(s, slug);
    let pids: std::collections::BTreeSet<&str> = raw.iter().filter_map(|n| n.rsplit('-').nth(1)).collect();
    assert_eq!(pids.len(), ranks, "{slug}: one process per rank wrote profiles: {raw:?}");
    assert_eq!(r["profiles"], raw.len(), "{slug}: {raw:?}");
    // `%h`: names stay apart across nodes, where pids repeat.
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim().split('.').next().unwrap();
    assert!(raw.iter().all(|name| name.starts_with(host)), "{slug}: profiles not named by host {host:?}: {raw:?}");
}

#[test]
fn mpich_mpirun_runs_beside_open_mpi_each_detected_from_its_version() {
    let ompi = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "ompi", "launcher": "ompi", "ranks": 3}]));
        let mut launcher = mpirun("mpirun");
        launcher["args"] = json!(["--oversubscribe", "--bind-to", "none"]);
        v["launchers"]["ompi"] = launcher;
    });
    let mpich = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "mpich", "launcher": "mpich", "ranks": 3}]));
        v["launchers"]["mpich"] = mpirun("mpirun.mpich");
        build_against_mpich(v);
    });
    let (mut ompi, mut mpich) = (ompi, mpich);
    for s in [&mut ompi, &mut mpich] {
        s.env.push(("CCL_COV_KEEP_RAW".into(), "1".into()));
    }
    // Side by side: both runs at once, each in its own workspace.
    let running = [&ompi, &mpich].map(|s| support::spawn(s, support::command(s, "collectives", &[])));
    let [ran_ompi, ran_mpich] = running.map(|r| r.wait(LIMIT));
    let (log_ompi, log_mpich) = (ran_ompi.text(), ran_mpich.text());
    assert!(ran_ompi.success, "{log_ompi}");
    assert!(ran_mpich.success, "{log_mpich}");
    let root = is_root();
    let ompi_needles: &[&str] =
        if root { &["mpirun --allow-run-as-root -np 3", "-x LLVM_PROFILE_FILE"] } else { &["-x"] };
    passed_with_every_profile(&ompi, "AllReduce.1K.ompi", 3, ompi_needles, &log_ompi);
    passed_with_every_profile(
        &mpich,
        "AllReduce.1K.mpich",
        3,
        &["mpirun.mpich -np 3 -genv ", "-genv LLVM_PROFILE_FILE /"],
        &log_mpich,
    );
    let argv = result(&mpich, "AllReduce.1K.mpich")["argv"].to_string();
    assert!(!argv.contains("--allow-run-as-root") && !argv.contains("\"-x\""), "{argv}");
    for s in [&ompi, &mpich] {
        let survivors = processes_mentioning(&s.ws.display().to_string());
        assert!(survivors.is_empty(), "processes survive: {survivors:?}");
    }
}

/// A single-node Slurm cluster of this test's own: munged (as the munge
/// user, with a key and socket of its own), slurmctld and slurmd in the
/// foreground as this process's children, from a temporary `slurm.conf` on
/// free ports. Dropping it cancels every job, then stops each daemon by its
/// PID (SIGTERM, then SIGKILL), even when the test failed.
struct Slurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

/// How long a daemon may take to be ready, or to go.
const DAEMON_LIMIT: Duration = Duration::from_secs(30);

impl Slurm {
    fn start() -> Slurm {
        let dir = tempfile::tempdir().unwrap();
        // munged wants every folder above its socket to be searchable by all.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let (uid, gid) = user_ids("munge");
        let munge = dir.path().join("munge");
        fs::create_dir(&munge).unwrap();
        std::os::unix::fs::chown(&munge, Some(uid), Some(gid)).unwrap();
        let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let host = host.trim().split('.').next().unwrap().to_string();
        let (ctld_port, slurmd_port) = (free_port(), free_port());
        let socket = munge.join("munge.socket");
        let d = dir.path().display();
        let conf = dir.path().join("slurm.conf");
        for sub in ["state", "spool"] {
            fs::create_dir(dir.path().join(sub)).unwrap();
        }
        fs::write(
            &conf,
            format!(
                "ClusterName=cclcov\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\n\
                 AuthType=auth/munge\nAuthInfo=socket={}\nSlurmUser=root\nSlurmdUser=root\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
                 SlurmdParameters=config_overrides\nMpiDefault=none\nReturnToService=2\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n\
                 PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
                socket.display()
            ),
        )
        .unwrap();
        let mut slurm = Slurm { conf, daemons: Vec::new(), dir };
        let key = munge.join("munge.key");
        let mut mungekey = Command::new("mungekey");
        mungekey.args(["--create", "--keyfile"]).arg(&key).uid(uid).gid(gid);
        let made = output_within(mungekey, DAEMON_LIMIT);
        assert!(made.status.success(), "mungekey: {}", String::from_utf8_lossy(&made.stderr));
        let mut munged = Command::new("/usr/sbin/munged");
        munged
            .arg("--foreground")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", munge.join("munged.pid").display()))
            .arg(format!("--log-file={}", munge.join("munged.log").display()))
            .arg(format!("--seed-file={}", munge.join("munged.seed").display()))
            .uid(uid)
            .gid(gid);
        slurm.spawn("munged", munged);
        slurm.wait_until("munged's socket", |_| socket.exists());
        for daemon in ["slurmctld", "slurmd"] {
            let mut cmd = Command::new(daemon);
            cmd.arg("-D").arg("-f").arg(&slurm.conf).env("SLURM_CONF", &slurm.conf);
            slurm.spawn(daemon, cmd);
        }
        slurm.wait_until("the node to be idle", |slurm| {
            slurm.output(&["sinfo", "-h", "-o", "%T"]).is_some_and(|o| o.trim() == "idle")
        });
        slurm
    }

    fn spawn(&mut self, name: &'static str, mut cmd: Command) {
        let log = fs::File::create(self.dir.path().join(format!("{name}.out"))).unwrap();
        cmd.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        self.daemons.push((name, child));
    }

    /// The output of a Slurm client command against this cluster, `None`
    /// when it failed.
    fn output(&self, argv: &[&str]) -> Option<String> {
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]).env("SLURM_CONF", &self.conf);
        let out = output_within(cmd, DAEMON_LIMIT);
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn wait_until(&mut self, what: &str, ready: impl Fn(&Slurm) -> bool) {
        let started = Instant::now();
        while !ready(self) {
            let exited = self.daemons.iter_mut().find_map(|(name, c)| c.try_wait().unwrap().map(|s| (*name, s)));
            if let Some((name, status)) = exited {
                panic!("{name} exited ({status}) while waiting for {what}:\n{}", self.logs());
            }
            assert!(started.elapsed() < DAEMON_LIMIT, "no {what} after {DAEMON_LIMIT:?}:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every daemon's output and log, for a failure message.
    fn logs(&self) -> String {
        let mut text = String::new();
        for file in files_under(self.dir.path()) {
            if file.extension().is_some_and(|e| e == "log" || e == "out") {
                let body = fs::read_to_string(&file).unwrap_or_default();
                let tail: Vec<&str> = body.lines().rev().take(20).collect();
                text += &format!("--- {}\n", file.display());
                text += &tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                text += "\n";
            }
        }
        text
    }

    /// `command` run inside a fresh allocation of `tasks` tasks on one node.
    fn salloc(&self, tasks: usize, command: &Command) -> Command {
        let mut salloc = Command::new("salloc");
        salloc
            .args(["--nodes", "1", "--ntasks", &tasks.to_string(), "--immediate=30", "--"])
            .arg(command.get_program())
            .args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(v) => salloc.env(key, v),
                None => salloc.env_remove(key),
            };
        }
        if let Some(dir) = command.get_current_dir() {
            salloc.current_dir(dir);
        }
        salloc.env("SLURM_CONF", &self.conf);
        salloc
    }

    /// Jobs (and their steps) still known to the cluster.
    fn jobs(&self) -> String {
        self.output(&["squeue", "-h", "-o", "%i %j %T"]).unwrap_or_else(|| "(squeue failed)".into())
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Bounded, and never a panic: this may run while a test fails.
        let mut scancel = Command::new("scancel");
        scancel
            .args(["--full", "--user", "root"])
            .env("SLURM_CONF", &self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Ok(mut child) = scancel.spawn() {
            let started = Instant::now();
            while child.try_wait().ok().flatten().is_none() && started.elapsed() < DAEMON_LIMIT {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // Reverse order: slurmd, slurmctld, munged last (the others need it).
        for (_, child) in self.daemons.iter_mut().rev() {
            let pid = child.id() as i32;
            // SAFETY: kill(2) on our own child's PID, which we have not reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let started = Instant::now();
            while child.try_wait().ok().flatten().is_none() && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A TCP port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A user's uid and gid, from /etc/passwd.
fn user_ids(user: &str) -> (u32, u32) {
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    let fields: Vec<&str> = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == user)
        .unwrap_or_else(|| panic!("no user {user} in /etc/passwd (scripts/install-deps installs munge)"));
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

/// An srun launcher for programs built against `flavor`'s MPI.
fn srun(flavor: &str) -> Value {
    json!({"kind": "srun", "flavor": flavor, "program_args": ["-t", "1", "-g", "1"]})
}

#[test]
fn srun_runs_open_mpi_and_mpich_trials_in_a_slurm_cluster_of_our_own() {
    assert!(is_root(), "this test starts munged as the munge user and slurmd as root: run it as root (CI does)");
    let slurm = Slurm::start();
    let mut ompi = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                {"name": "srun", "launcher": "srun", "ranks": 2},
                {"name": "toolarge", "launcher": "srun", "ranks": 8},
                {"name": "hang", "launcher": "srun", "ranks": 2,
                 "env": {"CCL_FAULT": "hang-ignore-term", "CCL_FAULT_RANK": "1"}}
            ]),
        );
        v["launchers"]["srun"] = srun("openmpi");
        v["capacity"] = json!(8);
        v["timeouts"] = json!({"default": 60, "grace": 2, "overrides": [{"variant": "hang", "seconds": 5}]});
    });
    let mut mpich = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "srun", "launcher": "srun", "ranks": 2}]));
        v["launchers"]["srun"] = srun("mpich");
        build_against_mpich(v);
    });
    for s in [&mut ompi, &mut mpich] {
        s.env.push(("CCL_COV_KEEP_RAW".into(), "1".into()));
    }
    // Two allocations of 4 tasks side by side on the 8-CPU node.
    let running = [&ompi, &mpich]
        .map(|s| support::spawn(s, slurm.salloc(4, &support::command(s, "collectives", &["--test-threads", "1"]))));
    let [ran_ompi, ran_mpich] = running.map(|r| r.wait(LIMIT));
    let (log_ompi, log_mpich) = (ran_ompi.text(), ran_mpich.text());
    assert!(ran_mpich.success, "{log_mpich}\n{}", slurm.logs());
    passed_with_every_profile(
        &mpich,
        "AllReduce.1K.srun",
        2,
        &["--ntasks 2 --nodes 1 --mpi=pmi2 --immediate --export=ALL"],
        &log_mpich,
    );
    // The hung trial fails the run; the others have their own verdicts.
    assert!(!ran_ompi.success, "{log_ompi}");
    passed_with_every_profile(
        &ompi,
        "AllReduce.1K.srun",
        2,
        &["--ntasks 2 --nodes 1 --mpi=pmix --immediate --export=ALL"],
        &log_ompi,
    );
    // Too large for the allocation: ignored with the reason, never run or queued.
    assert!(
        log_ompi
            .contains("AllReduce::1K::toolarge ... ignored (needs 8 ranks on 1 node(s) but the Slurm allocation (job"),
        "{log_ompi}"
    );
    assert!(!ompi.ws.join("results/AllReduce.1K.toolarge.json").exists());
    let hang = result(&ompi, "AllReduce.1K.hang");
    assert_eq!(hang["status"], "TIMEOUT", "{hang}");
    assert!(hang["duration_s"].as_f64().unwrap() < 5.0 + 2.0 + 3.0, "{hang}");
    for s in [&ompi, &mpich] {
        let survivors = processes_mentioning(&s.ws.display().to_string());
        assert!(survivors.is_empty(), "processes survive: {survivors:?}");
    }
    // The allocations ended with their harnesses: no job or step is left.
    let started = Instant::now();
    while !slurm.jobs().trim().is_empty() && started.elapsed() < DAEMON_LIMIT {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(slurm.jobs().trim(), "", "jobs left in the cluster");
}
