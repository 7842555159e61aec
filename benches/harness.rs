//! Benchmarks of the harness on the CPU fixture, run with the real build,
//! real processes and real LLVM tools. Results are printed as JSON and kept
//! in docs/benchmarks.md.
//!
//!   cargo bench --bench harness -- profiles   # ≥ 4,000 raw profiles: incremental vs end-of-run merging
//!   cargo bench --bench harness -- trimming   # `-n 1 -w 0` under coverage vs the configured iterations
//!   cargo bench --bench harness -- handover   # rank slots: release → next waiter running
//!   cargo bench --bench harness -- flood      # a trial writing 2 GB (`FLOOD_BYTES`): time, harness RSS, log size
//!   cargo bench --profile dev --bench harness -- flood-lines   # the same in 2-byte lines (`y`, as `yes`
//!                                             # writes), with the debug harness `cargo test` runs
//!
//! Each measurement uses its own temporary workspace; the fixture build is
//! shared with the test suite through the on-disk cache (build it first with
//! `cargo test --test collectives`, or the first run includes the build).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

use ccl_coverage::launch::allocation::Want;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `configs/local.json` with absolute sources, edited by `edit`, in `dir`.
fn config(dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v: Value = serde_json::from_str(&fs::read_to_string(root().join("configs/local.json")).unwrap()).unwrap();
    v["library"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    v["tests"]["source_dir"] = json!(root().join("tests/fixtures/ccl-tests").display().to_string());
    v["report"]["snapshot"] = json!(false);
    edit(&mut v);
    let path = dir.join("config.json");
    fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    path
}

/// Runs `ccl-coverage <sub>`; returns its wall time and whether it passed.
fn harness(sub: &str, config: &Path, ws: &Path, env: &[(&str, &str)]) -> (f64, bool) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    cmd.arg(sub)
        .env("CCL_COV_CONFIG", config)
        .env("CCL_COV_WORKSPACE", ws)
        .env("CARGO_MANIFEST_DIR", root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let ok = cmd.status().unwrap().success();
    (started.elapsed().as_secs_f64(), ok)
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Total size of the raw profiles under `dir`.
fn raw_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if entry.path().extension().is_some_and(|e| e == "profraw") {
                total += meta.len();
            }
        }
    }
    total
}

fn run_json(ws: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(ws.join("results/run.json")).unwrap()).unwrap()
}

/// When the last trial's process ended, in Unix milliseconds.
fn last_trial_end(run: &Value) -> u64 {
    run["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["started_unix_ms"].as_u64().unwrap() + (t["duration_s"].as_f64().unwrap() * 1000.0) as u64)
        .max()
        .unwrap()
}

/// One pass of the many-profiles suite: collectives (sampling raw-profile
/// disk use) then `coverage_report`.
fn profile_pass(dir: &Path, config: &Path, incremental: bool, overlap: bool) -> Value {
    let ws = dir.join(format!("ws-{incremental}-{overlap}"));
    let mode = if incremental { "on" } else { "off" };
    let overlap_mode = if overlap { "on" } else { "off" };
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, peak, profiles) = (stop.clone(), peak.clone(), ws.join("profiles"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(raw_bytes(&profiles), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let (collectives_s, ok) = harness(
        "collectives",
        config,
        &ws,
        &[("CCL_COV_INCREMENTAL_MERGE", mode), ("CCL_COV_MERGE_OVERLAP", overlap_mode)],
    );
    assert!(ok, "the suite failed; see {}", ws.display());
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let run = run_json(&ws);
    let (report_s, ok) = harness("report", config, &ws, &[("CCL_COV_INCREMENTAL_MERGE", mode)]);
    assert!(ok, "the report failed; see {}", ws.display());
    let report_done = unix_ms();
    let trials = run["trials"].as_array().unwrap();
    let raw_profiles: u64 = trials.iter().map(|t| t["profiles"].as_u64().unwrap()).sum();
    let mean = |f: &dyn Fn(&Value) -> f64| trials.iter().map(f).sum::<f64>() / trials.len() as f64;
    let mean_trial_s = mean(&|t| t["duration_s"].as_f64().unwrap());
    let mean_merge_s = mean(&|t| t["merge"]["seconds"].as_f64().unwrap_or(0.0));
    let largest_trial =
        trials.iter().map(|t| raw_bytes(Path::new(t["profile_dir"].as_str().unwrap()))).max().unwrap_or(0);
    json!({
        "incremental": incremental,
        "overlap": overlap,
        "trials": trials.len(),
        "raw_profiles": raw_profiles,
        "collectives_s": collectives_s,
        "report_s": report_s,
        "last_trial_end_to_report_s": (report_done - last_trial_end(&run)) as f64 / 1000.0,
        "peak_raw_bytes": peak.load(Ordering::Relaxed),
        "mean_trial_s": mean_trial_s,
        "mean_trial_merge_s": mean_merge_s,
        "largest_trial_raw_bytes_left": largest_trial,
    })
}

/// Functions added to the tuner plugin so each raw profile is about as big as
/// NCCL's (2 MB); the fixture's own profiles are a few KB.
const BALLAST_FUNCTIONS: &str = "25000";

fn profiles(dir: &Path) -> Value {
    let config = config(dir, |v| {
        let steps = v["library"]["steps"].as_array_mut().unwrap();
        let tuner = steps.iter_mut().find(|s| s["name"] == "configure ccl-tuner").expect("the tuner's configure step");
        tuner["argv"].as_array_mut().unwrap().push(json!(format!("-DCCL_TUNER_BALLAST_FUNCTIONS={BALLAST_FUNCTIONS}")));
        v["report"]["ignore_filename_regex"] = json!(["^/usr/", "/ballast\\.cc$"]);
        v["args"] = json!(["-c", "1", "-d", "float"]);
        // 42 trials of 51 processes (the binary and 50 children exiting
        // together, like the ranks of a job), each writing two profiles. Each
        // trial takes the whole rank capacity, so trials run one at a time
        // and the raw profiles on disk belong to as few trials as possible.
        v["sizes"] = json!(["8", "16", "32", "64", "128", "256"]);
        v["variants"] = json!([{"name": "spawn", "ranks": 4, "env": {"CCL_TESTS_SPAWN": "50", "CCL_ALGO": "ring"}}]);
        for c in v["collectives"].as_array_mut().unwrap() {
            c["args"] = json!([]);
        }
    });
    let end = profile_pass(dir, &config, false, true);
    let incremental = profile_pass(dir, &config, true, true);
    let serial = profile_pass(dir, &config, true, false);
    // The end-of-run merge on its own: every raw profile, one llvm-profdata merge.
    let ws_end = dir.join("ws-false-true");
    let build: Value = serde_json::from_str(&fs::read_to_string(ws_end.join("build.json")).unwrap()).unwrap();
    let profdata = build["toolchain"]["llvm_profdata"]["path"].as_str().unwrap().to_string();
    let mut list = String::new();
    let mut stack = vec![ws_end.join("profiles")];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else if entry.path().extension().is_some_and(|e| e == "profraw") {
                list.push_str(&format!("{}\n", entry.path().display()));
            }
        }
    }
    let list_file = dir.join("all-raw.list");
    fs::write(&list_file, &list).unwrap();
    let started = Instant::now();
    let merged = Command::new(&profdata)
        .args(["merge", "-sparse", &format!("--input-files={}", list_file.display()), "-o"])
        .arg(dir.join("all.profdata"))
        .status()
        .unwrap();
    assert!(merged.success());
    let merge_all_s = started.elapsed().as_secs_f64();
    let ratio = |pass: &Value| pass["last_trial_end_to_report_s"].as_f64().unwrap() / merge_all_s;
    json!({
        "merge_every_raw_profile_s": merge_all_s,
        "raw_profiles_merged": list.lines().count(),
        "end_of_run_merging": end,
        "incremental_merging_overlapped": incremental,
        "incremental_merging_serial": serial,
        "after_last_trial_vs_merge_all": {"overlapped": ratio(&incremental), "serial": ratio(&serial)},
    })
}

fn trimming(dir: &Path) -> Value {
    let config = config(dir, |_| {});
    let mut passes = Vec::new();
    for trim in ["off", "on"] {
        let ws = dir.join(format!("ws-trim-{trim}"));
        let (collectives_s, ok) = harness("collectives", &config, &ws, &[("CCL_COV_TRIM_ITERATIONS", trim)]);
        assert!(ok, "the suite failed; see {}", ws.display());
        let (_, ok) = harness("report", &config, &ws, &[]);
        assert!(ok, "the report failed; see {}", ws.display());
        let summary: Value =
            serde_json::from_str(&fs::read_to_string(ws.join("report/summary.json")).unwrap()).unwrap();
        let totals = &summary["data"][0]["totals"];
        let trials =
            run_json(&ws)["trials"].as_array().unwrap().iter().map(|t| t["duration_s"].as_f64().unwrap()).sum::<f64>();
        passes.push(json!({
            "trim": trim,
            "collectives_s": collectives_s,
            "trial_time_s": trials,
            "lines": format!("{}/{}", totals["lines"]["covered"], totals["lines"]["count"]),
            "functions": format!("{}/{}", totals["functions"]["covered"], totals["functions"]["count"]),
            "regions": format!("{}/{}", totals["regions"]["covered"], totals["regions"]["count"]),
            "branches": format!("{}/{}", totals["branches"]["covered"], totals["branches"]["count"]),
        }));
    }
    let speedup = passes[0]["trial_time_s"].as_f64().unwrap() / passes[1]["trial_time_s"].as_f64().unwrap();
    json!({ "passes": passes, "trial_time_speedup": speedup })
}

/// Rank-slot hand-over latency: a waiter blocked on a full capacity, from
/// the holder's release to the waiter holding the slots. Hand-over used to
/// poll every 25 ms.
fn handover(dir: &Path) -> Value {
    let slots = Arc::new(ccl_coverage::launch::slots::Slots::new(dir.join("slots"), 4));
    let mut micros: Vec<f64> = (0..200)
        .map(|i| {
            let holder = slots.acquire(Want::spread(4, 1, 0)).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let waiter = slots.clone();
            std::thread::spawn(move || {
                let guard = waiter.acquire(Want::spread(1 + i % 4, 1, 0)).unwrap();
                tx.send(Instant::now()).unwrap();
                drop(guard);
            });
            std::thread::sleep(Duration::from_millis(5));
            let released = Instant::now();
            drop(holder);
            let granted = rx.recv_timeout(Duration::from_secs(10)).expect("the waiter got its slots");
            (granted - released).as_secs_f64() * 1e6
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q) as usize];
    json!({"handovers": micros.len(), "median_us": at(0.5), "p90_us": at(0.9), "max_us": at(1.0)})
}

/// A trial that writes `FLOOD_BYTES` (default 2 GB) to stdout and then runs
/// the real perf binary: the harness's wall time, its own peak RSS (`VmHWM`,
/// sampled from /proc while it runs), and the log's size on disk. With
/// `lines`, the flood is `y` lines (as `yes` writes: the capped log then
/// holds 33.5 M lines), else one line of `x`.
fn flood(dir: &Path, lines: bool) -> Value {
    let bytes: u64 = std::env::var("FLOOD_BYTES").ok().and_then(|b| b.parse().ok()).unwrap_or(2_000_000_000);
    let name = if lines { "flood-lines" } else { "flood" };
    let wrapper = dir.join(format!("{name}.sh"));
    let source = if lines { "yes" } else { "tr '\\0' x < /dev/zero" };
    fs::write(&wrapper, format!("#!/bin/sh\n{source} | head -c {bytes}\necho\nexec \"$REAL_BINARY\" \"$@\"\n"))
        .unwrap();
    fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = config(dir, |v| {
        let keep: Vec<Value> =
            v["collectives"].as_array().unwrap().iter().filter(|c| c["name"] == "AllReduce").cloned().collect();
        v["collectives"] = Value::Array(keep);
        v["collectives"][0]["binary"] = json!(wrapper.display().to_string());
        v["sizes"] = json!(["1K"]);
        v["variants"] = json!([{"name": "flood", "ranks": 2, "env": {"REAL_BINARY": "{bin_dir}/all_reduce_perf"}}]);
    });
    let ws = dir.join(format!("ws-{name}"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    cmd.arg("collectives")
        .env("CCL_COV_CONFIG", &config)
        .env("CCL_COV_WORKSPACE", &ws)
        .env("CARGO_MANIFEST_DIR", root())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let status = format!("/proc/{}/status", child.id());
    let stat = format!("/proc/{}/stat", child.id());
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (mut peak_kib, mut cpu_s) = (0u64, 0.0);
    let ok = loop {
        if let Some(done) = child.try_wait().unwrap() {
            break done.success();
        }
        let hwm = fs::read_to_string(&status).unwrap_or_default();
        if let Some(kib) = hwm.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
            peak_kib = peak_kib.max(kib.trim().trim_end_matches(" kB").trim().parse().unwrap_or(0));
        }
        // The harness's own CPU time (utime + stime), not its children's:
        // the supervisor's copying and llvm-profdata are left out.
        let fields: Vec<f64> = fs::read_to_string(&stat)
            .unwrap_or_default()
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|f| f.parse().ok())
            .collect();
        if fields.len() == 2 {
            cpu_s = (fields[0] + fields[1]) / ticks;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = started.elapsed().as_secs_f64();
    let result: Value =
        serde_json::from_str(&fs::read_to_string(ws.join("results/AllReduce.1K.flood.json")).unwrap()).unwrap();
    let trial_s = result["duration_s"].as_f64().unwrap_or_default();
    json!({
        "flood_bytes": bytes,
        "lines": lines,
        "harness": if cfg!(debug_assertions) { "debug" } else { "optimised" },
        "passed": ok,
        "status": result["status"],
        "output_cut_bytes": result["output_cut_bytes"],
        "trial_s": trial_s,
        "harness_wall_s": wall,
        "after_the_trial_s": wall - trial_s,
        "harness_cpu_s": cpu_s,
        "harness_peak_rss_mib": peak_kib as f64 / 1024.0,
        "log_bytes": fs::metadata(ws.join("logs/AllReduce.1K.flood.log")).unwrap().len(),
    })
}

fn main() {
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wanted = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    let dir = tempfile::tempdir().unwrap();
    let mut out = serde_json::Map::new();
    if wanted("profiles") {
        out.insert("profiles".into(), profiles(dir.path()));
    }
    if wanted("trimming") {
        out.insert("trimming".into(), trimming(dir.path()));
    }
    if wanted("handover") {
        out.insert("handover".into(), handover(dir.path()));
    }
    if wanted("flood") {
        out.insert("flood".into(), flood(dir.path(), false));
    }
    if wanted("flood-lines") {
        out.insert("flood-lines".into(), flood(dir.path(), true));
    }
    println!("{}", serde_json::to_string_pretty(&Value::Object(out)).unwrap());
}
