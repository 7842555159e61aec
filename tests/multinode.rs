//! Beyond `mpirun` of Open MPI on one host, for real: MPICH's `mpirun.mpich`
//! (Hydra) beside Open MPI, with the perf binaries built against MPICH; and
//! Slurm, a single-node cluster these tests start themselves (munge,
//! slurmctld, slurmd), running trials through `srun` with Open MPI
//! (`--mpi=pmix`) and MPICH (`--mpi=pmi2`). Every daemon is stopped by PID
//! by a guard, even when a test fails; every wait is bounded.

use serde_json::{Value, json};
use std::time::Duration;

mod support;
use support::{Setup, files_under, only, processes_mentioning, result, setup};

/// No harness run may take longer (a first run builds the fixture, and the
/// MPICH config builds its own copy).
const LIMIT: Duration = Duration::from_secs(600);

/// `configs/local.json` with its perf binaries built against MPICH: CMake's
/// FindMPI reads the include and link flags from MPICH's compiler wrapper
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
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
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

/// Whether the tests run as root (uid 0), read from `/proc` rather than libc.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}
