//! The scale benchmark of issue #24: an RCCL-sized suite (up to 800 trials in
//! RCCL's `test_runner` format, gtest and perf, some under `mpirun` with 4 or 8
//! ranks) against a library whose coverage mapping is about libnccl's (about
//! 3,000 functions and 60,000 lines: the fixture with its tuner plugin grown
//! by `-DCCL_TUNER_SCALE_FUNCTIONS`), through the real harness binary, the
//! real instrumented build and real processes. On the CPU; no GPU.
//!
//!   cargo bench --features plot --bench scale                    # everything: prepare, then trials and report at 100, 800, 4000, then the plot
//!   cargo bench --profile dev --features plot --bench scale -- --dir target/tmp/scale-dev …   # the same with the harness `cargo test` builds
//!   cargo bench --features plot --bench scale -- prepare         # generate the configs, build the library (cached), record the mapping's size
//!   cargo bench --features plot --bench scale -- trials 100      # run the 100-trial suite: --list, dry run, collectives (time, RSS, disk)
//!   cargo bench --features plot --bench scale -- report 100      # the report on that workspace, with and without attribution and the minimal suite
//!   cargo bench --features plot --bench scale -- plot            # the PNG of report time against trials, from every results-*.json
//!   cargo bench --features plot --bench scale -- equal 800       # attribution from the mapping read once against llvm-cov per trial
//!
//! Options: `--dir DIR` (default `target/tmp/scale`), `--label NAME` (the
//! results file `results-NAME.json`, default `latest`), `--max-report-s S`
//! (default 840) and `--max-report-gib G` (default 12): a whole report
//! predicted, from the smaller sizes measured, to take longer or more memory
//! is not run, and its figure is extrapolated and labelled so. `report` only reads a workspace
//! that `trials` left, so it can be run again, unchanged, on the same trials
//! after the harness's report has changed (`--label after`).
//!
//! The trial phase runs `--test-threads 1`, so that the trials' own times add
//! up to the part of the harness's wall time that was spent in trials; the
//! rest, per trial, is the harness's own time. Everything is printed as JSON
//! and kept under the folder; docs/benchmarks.md holds one run's figures.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

use plotters::prelude::*;
use serde_json::{Value, json};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Generated functions in the tuner plugin: with the fixture's own 81 and the
/// plugin's 3, about 3,000 functions and 60,000 lines, like libnccl's host
/// mapping (2,913 functions, 57,547 lines on the 2×H200 run).
const SCALE_FUNCTIONS: u32 = 2950;
/// 4,000: about RCCL's six upstream configs together.
const SIZES: [usize; 3] = [100, 800, 4000];
/// The profile the harness (and this benchmark) was built in: `cargo test`
/// builds `dev`, `cargo bench` the `bench` profile (release's settings).
const PROFILE: &str = if cfg!(debug_assertions) { "dev" } else { "release" };
/// gtest filters of `ccl-UnitTests` that create communicators, so that the
/// tuner plugin (and with it the generated functions) is loaded.
const UNIT_FILTERS: [&str; 5] = [
    "ArgCheck.*",
    "Group.*",
    "Tuner.PluginThresholds",
    "ArgCheck.CollectiveArguments:Group.SendRecvRingInAGroup",
    "Tuner.*",
];
const PERF_BINARIES: [&str; 7] = [
    "all_reduce_perf",
    "reduce_perf",
    "reduce_scatter_perf",
    "all_gather_perf",
    "broadcast_perf",
    "alltoall_perf",
    "sendrecv_perf",
];
/// The steps that read per-trial attribution: `report::markdown` appends the
/// trials that add the most lines, so it computes attribution when it runs.
const ATTRIBUTION_STEPS: [&str; 3] = ["report::attribution", "report::minimal_suite", "report::markdown"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn write_json(path: &Path, value: &Value) {
    fs::write(path, serde_json::to_string_pretty(value).unwrap() + "\n").unwrap();
}

// ---------------------------------------------------------------- the suite

/// What trial `i` is. The pattern repeats every 20 trials, so the first 100
/// of the 800 have the same mix as all 800: 9 gtest trials in one process,
/// 8 perf trials in one process (2 rank threads), one gtest and one perf
/// trial under `mpirun -np 4`, and one under `mpirun -np 8` (gtest and perf
/// in turn): 15 % of the trials under mpirun.
fn test_entry(i: usize) -> (&'static str, Value) {
    let name = format!("t{i:04}");
    let env = json!({ "CCL_TUNER_SCALE_SEED": i.to_string() });
    let unit = |config, filter| (config, json!({ "name": name, "test_filter": filter, "env_variables": env }));
    let perf = |config| {
        let binary = PERF_BINARIES[(i / 3) % PERF_BINARIES.len()];
        (config, json!({ "name": name, "binary": binary, "command_args": "-b 1K -e 4K -f 4", "env_variables": env }))
    };
    match i % 20 {
        0..=8 => unit("unit", UNIT_FILTERS[i % UNIT_FILTERS.len()]),
        9..=16 => perf("perf"),
        17 => unit("unit_mpi4", "MPI.*"),
        18 => perf("perf_mpi4"),
        _ if (i / 20).is_multiple_of(2) => unit("unit_mpi8", "MPI.*"),
        _ => perf("perf_mpi8"),
    }
}

/// The first `n` trials, as an RCCL `test_runner` config.
fn upstream_config(n: usize) -> Value {
    let mut configs = json!({
        "base": { "num_gpus": 1, "timeout": 120 },
        "unit": { "extends": "base", "binary": "ccl-UnitTests", "num_ranks": 1, "tests": [] },
        "unit_mpi4": { "extends": "base", "binary": "ccl-UnitTestsMPI", "num_ranks": 4, "num_nodes": 1, "num_gpus": 4,
                       "tests": [] },
        "unit_mpi8": { "extends": "base", "binary": "ccl-UnitTestsMPI", "num_ranks": 8, "num_nodes": 1, "num_gpus": 8,
                       "tests": [] },
        "perf": { "extends": "base", "is_gtest": false, "num_gpus": 2, "command_args": "-c 1 -d float -n 1 -w 0 -g 1 -t 2",
                  "tests": [] },
        "perf_mpi4": { "extends": "base", "is_gtest": false, "num_ranks": 4, "num_nodes": 1, "num_gpus": 4,
                       "command_args": "-c 1 -d float -n 1 -w 0 -g 1 -t 1", "tests": [] },
        "perf_mpi8": { "extends": "base", "is_gtest": false, "num_ranks": 8, "num_nodes": 1, "num_gpus": 8,
                       "command_args": "-c 1 -d float -n 1 -w 0 -g 1 -t 1", "tests": [] },
    });
    for i in 0..n {
        let (config, test) = test_entry(i);
        configs[config]["tests"].as_array_mut().unwrap().push(test);
    }
    let suites: Vec<Value> = ["unit", "perf", "unit_mpi4", "perf_mpi4", "unit_mpi8", "perf_mpi8"]
        .iter()
        .filter(|c| !configs[**c]["tests"].as_array().unwrap().is_empty())
        .map(|c| json!({ "name": format!("Scale {c}"), "config": c }))
        .collect();
    json!({
        "system_configurations": {
            "name": format!("scale-{n}"),
            "description": format!("The scale benchmark's first {n} trials (benches/scale.rs)"),
        },
        "paths": { "workdir": root().join("tests/fixtures").display().to_string() },
        "env_variables": { "CCL_DEBUG": "WARN", "CCL_TUNER_PLUGIN": "../ccl-tuner/libccl-tuner.so" },
        "mpi_args": "--oversubscribe --bind-to none",
        "test_configurations": configs,
        "test_suites": suites,
    })
}

/// `configs/local_test_runner.overlay.json` with absolute sources, the tuner
/// grown to the mapping's size, room for 8 ranks and no snapshot.
fn overlay() -> Value {
    let mut v = read_json(&root().join("configs/local_test_runner.overlay.json"));
    v["description"] =
        json!("The scale benchmark (benches/scale.rs): the CPU fixture with a libnccl-sized tuner plugin.");
    v["library"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    v["tests"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    let steps = v["library"]["steps"].as_array_mut().unwrap();
    let tuner = steps.iter_mut().find(|s| s["name"] == "configure ccl-tuner").expect("the tuner's configure step");
    tuner["argv"].as_array_mut().unwrap().push(json!(format!("-DCCL_TUNER_SCALE_FUNCTIONS={SCALE_FUNCTIONS}")));
    v["capacity"] = json!(8);
    v["machine"] = json!({ "nodes": 1, "gpus_per_node": 8 });
    v["report"]["snapshot"] = json!(false);
    v
}

struct Bench {
    dir: PathBuf,
    label: String,
    max_report_s: f64,
    max_report_gib: f64,
}

impl Bench {
    fn config(&self, name: &str) -> PathBuf {
        self.dir.join(format!("scale-{name}.json"))
    }
    fn workspace(&self, name: &str) -> PathBuf {
        self.dir.join(format!("ws-{name}"))
    }
    fn results_path(&self) -> PathBuf {
        self.dir.join(format!("results-{}.json", self.label))
    }

    /// `ccl-coverage <args>` on the suite `name`, measured.
    fn harness(&self, name: &str, args: &[&str], env: &[(&str, &str)], stdout: Option<&Path>) -> Measured {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
        cmd.args(args)
            .env("CCL_COV_CONFIG", self.config(name))
            .env("CCL_COV_OVERLAY", self.dir.join("overlay.json"))
            .env("CCL_COV_WORKSPACE", self.workspace(name))
            .env("CARGO_MANIFEST_DIR", root())
            .stdin(Stdio::null())
            .stderr(Stdio::from(fs::File::create(self.dir.join(format!("{name}.stderr"))).unwrap()));
        match stdout {
            Some(path) => cmd.stdout(Stdio::from(fs::File::create(path).unwrap())),
            None => cmd.stdout(Stdio::null()),
        };
        for (k, v) in env {
            cmd.env(k, v);
        }
        measure(cmd)
    }
}

// -------------------------------------------------------------- measurement

/// One process, measured: wall time, its own peak RSS and CPU time (sampled
/// from /proc every 20 ms while it runs, so the last 20 ms may be missed),
/// and from `wait4` the largest peak RSS of it and its descendants and their
/// CPU time together.
struct Measured {
    ok: bool,
    wall_s: f64,
    exited_unix_ms: u64,
    own_hwm_kib: u64,
    own_cpu_s: f64,
    tree_max_rss_kib: u64,
    tree_cpu_s: f64,
}

impl Measured {
    fn json(&self) -> Value {
        json!({
            "ok": self.ok,
            "wall_s": self.wall_s,
            "own_peak_rss_mib": self.own_hwm_kib as f64 / 1024.0,
            "own_cpu_s": self.own_cpu_s,
            "largest_process_peak_rss_mib": self.tree_max_rss_kib as f64 / 1024.0,
            "cpu_s_with_children": self.tree_cpu_s,
        })
    }
}

#[expect(clippy::zombie_processes, reason = "the child is reaped by wait4, which also gives its rusage")]
fn measure(mut cmd: Command) -> Measured {
    let started = Instant::now();
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (mut hwm, mut cpu) = (0u64, 0f64);
    loop {
        if let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(kib) = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))
        {
            hwm = hwm.max(kib.trim().trim_end_matches("kB").trim().parse().unwrap_or(0));
        }
        if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
            let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = after.split_whitespace().collect();
            if let (Some(u), Some(s)) = (fields.get(11), fields.get(12)) {
                let t = (u.parse::<f64>().unwrap_or(0.0) + s.parse::<f64>().unwrap_or(0.0)) / ticks;
                cpu = cpu.max(t);
            }
        }
        let mut status = 0;
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our own child, not yet reaped; status and usage are valid for writing.
        let done = unsafe { libc::wait4(pid, &raw mut status, libc::WNOHANG, &raw mut usage) };
        if done == pid {
            let wall_s = started.elapsed().as_secs_f64();
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return Measured {
                ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                wall_s,
                exited_unix_ms: unix_ms(),
                own_hwm_kib: hwm,
                own_cpu_s: cpu,
                tree_max_rss_kib: usage.ru_maxrss as u64,
                tree_cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
            };
        }
        assert!(done == 0, "wait4: {}", std::io::Error::last_os_error());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Disk used under `dir` (allocated blocks, symlinks not followed), in bytes.
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = fs::symlink_metadata(entry.path()) else { continue };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn machine() -> Value {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':']));
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|m| m.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    json!({
        "cores": std::thread::available_parallelism().map(usize::from).unwrap_or(0),
        "cpu": model,
        "memory_gib": mem_kib as f64 / 1024.0 / 1024.0,
        "loadavg_at_start": fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "kernel": fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
    })
}

// ------------------------------------------------------------------ phases

/// Writes the configs and the overlay, builds the library (through the
/// harness, on a one-trial suite) and records the coverage mapping's size.
fn prepare(b: &Bench) -> Value {
    fs::create_dir_all(&b.dir).unwrap();
    write_json(&b.dir.join("overlay.json"), &overlay());
    for n in SIZES.iter().copied().chain([1]) {
        let name = if n == 1 { "warmup".to_string() } else { n.to_string() };
        write_json(&b.config(&name), &upstream_config(n));
    }
    let ws = b.workspace("warmup");
    if ws.exists() {
        fs::remove_dir_all(&ws).unwrap();
    }
    let build = b.harness("warmup", &["collectives"], &[], None);
    assert!(build.ok, "the build or the warm-up trial failed; see {}", b.dir.join("warmup.stderr").display());
    let report = b.harness("warmup", &["report", "--exact", "report::summary_json"], &[], None);
    assert!(report.ok, "the warm-up report failed; see {}", b.dir.join("warmup.stderr").display());
    let summary = read_json(&ws.join("report/summary.json"));
    let totals = &summary["data"][0]["totals"];
    let manifest = read_json(&ws.join("build.json"));
    let count = |m: &str| totals[m]["count"].as_u64().unwrap();
    let mapping = json!({
        "functions": count("functions"),
        "lines": count("lines"),
        "regions": count("regions"),
        "branches": count("branches"),
        "files": summary["data"][0]["files"].as_array().map_or(0, Vec::len),
        "objects": manifest["objects"].as_array().map_or(0, Vec::len),
        "generated_functions": SCALE_FUNCTIONS,
        "build_dir_mib": mib(disk_bytes(Path::new(manifest["build_dir"].as_str().unwrap()))),
        "build_and_one_trial_s": build.wall_s,
        "llvm": manifest["toolchain"]["llvm_cov"]["version"],
    });
    write_json(&b.dir.join("mapping.json"), &mapping);
    mapping
}

/// `--list`, the JSON dry run and the collectives run of the first `n` trials.
fn trials(b: &Bench, n: usize) -> Value {
    let name = n.to_string();
    assert!(b.dir.join("overlay.json").is_file(), "no overlay in {}: run `prepare` first", b.dir.display());
    write_json(&b.config(&name), &upstream_config(n));
    let ws = b.workspace(&name);
    if ws.exists() {
        fs::remove_dir_all(&ws).unwrap();
    }
    let listing = b.dir.join(format!("list-{n}.txt"));
    let list: Vec<Measured> =
        (0..5).map(|_| b.harness(&name, &["collectives", "--list"], &[], Some(&listing))).collect();
    assert!(list.iter().all(|m| m.ok), "--list failed; see {}", b.dir.join(format!("{name}.stderr")).display());
    let listed = fs::read_to_string(&listing).unwrap().lines().filter(|l| l.ends_with(": test")).count();
    assert_eq!(listed, n, "--list lists {listed} trials, not {n}");
    let plan = b.dir.join(format!("dry-run-{n}.json"));
    let dry: Vec<Measured> =
        (0..5).map(|_| b.harness(&name, &["collectives"], &[("CCL_COV_DRY_RUN", "json")], Some(&plan))).collect();
    assert!(dry.iter().all(|m| m.ok), "the dry run failed; see {}", b.dir.join(format!("{name}.stderr")).display());
    let plan_bytes = fs::metadata(&plan).unwrap().len();

    let run = b.harness(&name, &["collectives", "--test-threads", "1"], &[], None);
    assert!(run.ok, "the suite failed; see {} and {}", b.dir.join(format!("{name}.stderr")).display(), ws.display());
    let record = read_json(&ws.join("results/run.json"));
    let trials = record["trials"].as_array().unwrap();
    assert_eq!(trials.len(), n, "run.json has {} trials, not {n}", trials.len());
    let passed = trials.iter().filter(|t| t["status"] == "PASSED").count();
    let sum = |f: &dyn Fn(&Value) -> f64| trials.iter().map(f).sum::<f64>();
    let trial_s = sum(&|t| t["duration_s"].as_f64().unwrap());
    let merge_s = sum(&|t| t["merge"]["seconds"].as_f64().unwrap_or(0.0));
    let first_start = trials.iter().map(|t| t["started_unix_ms"].as_u64().unwrap()).min().unwrap();
    let last_end = trials
        .iter()
        .map(|t| t["started_unix_ms"].as_u64().unwrap() + (t["duration_s"].as_f64().unwrap() * 1000.0) as u64)
        .max()
        .unwrap();
    let started_unix_ms = run.exited_unix_ms - (run.wall_s * 1000.0) as u64;
    let under_mpirun =
        trials.iter().filter(|t| t["ranks"].as_u64().unwrap_or(1) > 1 && t["launcher"] != "threads").count();
    let profiles = ws.join("profiles");
    let idle = idle_s(trials, started_unix_ms, run.exited_unix_ms);
    let stored_lines = trials.iter().filter(|t| t["merge"]["lines"]["sha256"].is_string()).count();
    let lines_s = sum(&|t| t["merge"]["lines"]["seconds"].as_f64().unwrap_or(0.0));
    // The same trials with libtest's default threads (the cores), in a
    // workspace of their own that is deleted after: each trial's profile
    // merge then overlaps the next trial, as in a normal run. Trials overlap
    // each other too, so the harness's own time is the time no trial ran.
    let par_name = format!("{n}-par");
    fs::copy(b.config(&name), b.config(&par_name)).unwrap();
    let par = b.harness(&par_name, &["collectives"], &[], None);
    assert!(par.ok, "the suite failed; see {}", b.dir.join(format!("{par_name}.stderr")).display());
    let par_record = read_json(&b.workspace(&par_name).join("results/run.json"));
    let par_trials = par_record["trials"].as_array().unwrap();
    let par_idle = idle_s(par_trials, par.exited_unix_ms - (par.wall_s * 1000.0) as u64, par.exited_unix_ms);
    let par_trial_s: f64 = par_trials.iter().map(|t| t["duration_s"].as_f64().unwrap()).sum();
    fs::remove_dir_all(b.workspace(&par_name)).unwrap();
    fs::remove_file(b.config(&par_name)).unwrap();
    let out = json!({
        "trials": n,
        "harness_profile": PROFILE,
        "passed": passed,
        "under_mpirun": under_mpirun,
        "list_s": median(list.iter().map(|m| m.wall_s).collect()),
        "list_runs_s": list.iter().map(|m| m.wall_s).collect::<Vec<_>>(),
        "list_peak_rss_mib": list[0].tree_max_rss_kib as f64 / 1024.0,
        "dry_run_json_s": median(dry.iter().map(|m| m.wall_s).collect()),
        "dry_run_json_runs_s": dry.iter().map(|m| m.wall_s).collect::<Vec<_>>(),
        "dry_run_json_bytes": plan_bytes,
        "collectives": run.json(),
        "trials_own_s": trial_s,
        "mean_trial_s": trial_s / n as f64,
        "merges_s": merge_s,
        "trials_that_stored_their_lines": stored_lines,
        "stored_lines_s": lines_s,
        "stored_lines_ms_per_trial": lines_s * 1000.0 / n as f64,
        "harness_own_s_per_trial": (run.wall_s - trial_s) / n as f64,
        "start_to_first_trial_s": first_start.saturating_sub(started_unix_ms) as f64 / 1000.0,
        "between_trials_s_per_gap": ((last_end - first_start) as f64 / 1000.0 - trial_s) / (n.max(2) - 1) as f64,
        "last_trial_end_to_exit_s": run.exited_unix_ms.saturating_sub(last_end) as f64 / 1000.0,
        "harness_cpu_ms_per_trial": run.own_cpu_s * 1000.0 / n as f64,
        "no_trial_running_s_per_trial": idle / n as f64,
        "default_threads": {
            "collectives": par.json(),
            "trials_own_s": par_trial_s,
            "passed": par_trials.iter().filter(|t| t["status"] == "PASSED").count(),
            "no_trial_running_s": par_idle,
            "no_trial_running_s_per_trial": par_idle / n as f64,
            "harness_cpu_ms_per_trial": par.own_cpu_s * 1000.0 / n as f64,
        },
        "workspace_mib": mib(disk_bytes(&ws)),
        "profiles_mib": mib(disk_bytes(&profiles)),
        "results_mib": mib(disk_bytes(&ws.join("results"))),
        "logs_mib": mib(disk_bytes(&ws.join("logs"))),
    });
    write_json(&b.dir.join(format!("trials-{n}.json")), &out);
    out
}

/// The serial run's trials in tenths by start order, each tenth's mean
/// stored-lines, profile-merge and trial time (ms): a cost that grows as the
/// run goes on (what the harness holds, the workspace) rises from the first
/// tenth to the eighth; the last two are the `mpirun` trials, slower.
fn by_tenth(ws: &Path) -> Value {
    let record = read_json(&ws.join("results/run.json"));
    let mut trials: Vec<&Value> = record["trials"].as_array().unwrap().iter().collect();
    trials.sort_by_key(|t| t["started_unix_ms"].as_u64().unwrap());
    let tenth = trials.len().div_ceil(10).max(1);
    let ms = |chunk: &[&Value], f: &dyn Fn(&Value) -> Option<f64>| {
        chunk.iter().map(|t| f(t).unwrap_or(0.0)).sum::<f64>() * 1000.0 / chunk.len() as f64
    };
    let rows: Vec<Value> = trials
        .chunks(tenth)
        .map(|c| {
            json!({
                "stored_lines_ms": ms(c, &|t| t["merge"]["lines"]["seconds"].as_f64()),
                "merge_ms": ms(c, &|t| t["merge"]["seconds"].as_f64()),
                "trial_ms": ms(c, &|t| t["duration_s"].as_f64()),
            })
        })
        .collect();
    Value::Array(rows)
}

/// Seconds between `from` and `to` (Unix ms) in which none of `trials` ran.
fn idle_s(trials: &[Value], from: u64, to: u64) -> f64 {
    let mut spans: Vec<(u64, u64)> = trials
        .iter()
        .map(|t| {
            let start = t["started_unix_ms"].as_u64().unwrap();
            (start, start + (t["duration_s"].as_f64().unwrap() * 1000.0) as u64)
        })
        .collect();
    spans.sort_unstable();
    let (mut busy, mut reach) = (0, from);
    for (start, end) in spans {
        let start = start.max(reach);
        if end > start {
            busy += end - start;
            reach = end;
        }
    }
    (to - from).saturating_sub(busy) as f64 / 1000.0
}

/// The report on the workspace `trials` left for `n`: first without the
/// steps that read attribution, then whole (the one `cargo test --test
/// coverage_report` runs), unless a whole report is predicted to take longer
/// than `--max-report-s`; then its figure is extrapolated, and says so.
fn report(b: &Bench, n: usize) -> Value {
    let name = n.to_string();
    let trials_path = b.dir.join(format!("trials-{n}.json"));
    assert!(trials_path.is_file(), "no trials for {n}: run `trials {n}` first");
    let trials = read_json(&trials_path);
    let tail = trials["last_trial_end_to_exit_s"].as_f64().unwrap();
    let mut results = if b.results_path().is_file() { read_json(&b.results_path()) } else { json!({}) };
    let mut skip_args = vec!["report"];
    for step in ATTRIBUTION_STEPS {
        skip_args.extend(["--skip", step]);
    }
    let without = b.harness(&name, &skip_args, &[], None);
    assert!(without.ok, "the report failed; see {}", b.dir.join(format!("{name}.stderr")).display());
    let measured = measured_sizes(&results, n, "attribution_s");
    let predicted = fit(&measured).map(|(a, slope)| without.wall_s + a + slope * n as f64);
    let rss_points = measured_sizes(&results, n, "full_peak_rss_mib");
    let predicted_rss_mib = fit(&rss_points).map(|(a, slope)| a + slope * n as f64);
    let mut out = json!({
        "trials": n,
        "without_attribution": without.json(),
        "last_trial_end_to_report_without_attribution_s": tail + without.wall_s,
        "collectives_tail_s": tail,
        "serial_trials_by_tenth": by_tenth(&b.workspace(&name)),
    });
    let too_long = predicted.filter(|p| *p > b.max_report_s);
    let too_big = predicted_rss_mib.filter(|m| *m > b.max_report_gib * 1024.0);
    if too_long.is_some() || too_big.is_some() {
        let (a, slope) = fit(&measured).unwrap();
        let p = predicted.unwrap();
        let sizes: Vec<f64> = measured.iter().map(|(m, _)| *m).collect();
        let why = match (too_long, too_big) {
            (Some(t), _) => format!("predicted {t:.0} s > --max-report-s {:.0}", b.max_report_s),
            (None, Some(m)) => format!("predicted peak RSS {m:.0} MiB > --max-report-gib {}", b.max_report_gib),
            (None, None) => unreachable!(),
        };
        out["full"] = json!({
            "extrapolated": true,
            "wall_s": p,
            "own_peak_rss_mib": predicted_rss_mib,
            "method": format!(
                "not run: {why}; the report without attribution measured at {n} ({:.1} s) plus the attribution \
                 cost (whole minus without) fitted by least squares over the sizes measured ({sizes:?}): \
                 {a:.2} s + {slope:.4} s per trial; peak RSS fitted the same way",
                without.wall_s,
            ),
        });
        out["last_trial_end_to_report_s"] = json!(tail + p);
    } else {
        let full = b.harness(&name, &["report"], &[], None);
        assert!(full.ok, "the report failed; see {}", b.dir.join(format!("{name}.stderr")).display());
        let ws = b.workspace(&name);
        let mut f = full.json();
        f["extrapolated"] = json!(false);
        // Trials whose lines the report computed itself rather than read from what they stored.
        let stderr = fs::read_to_string(b.dir.join(format!("{name}.stderr"))).unwrap_or_default();
        let computed = stderr.lines().find_map(|l| {
            let rest = l.split_once("per-trial attribution computed ")?.1;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        });
        out["trials_computed_in_the_report"] = json!(computed.unwrap_or(0));
        out["full"] = f;
        out["attribution_s"] = json!(full.wall_s - without.wall_s);
        out["attribution_s_per_trial"] = json!((full.wall_s - without.wall_s) / n as f64);
        out["full_peak_rss_mib"] = json!(full.own_hwm_kib as f64 / 1024.0);
        out["last_trial_end_to_report_s"] = json!(tail + full.wall_s);
        out["report_dir_mib"] = json!(mib(disk_bytes(&ws.join("report"))));
        out["attribution_json_bytes"] = json!(fs::metadata(ws.join("report/attribution.json")).map_or(0, |m| m.len()));
        out["workspace_mib"] = json!(mib(disk_bytes(&ws)));
        let minimal = read_json(&ws.join("report/minimal-suite.json"));
        out["minimal_suite_trials"] = minimal["trials"].as_array().map_or(Value::Null, |t| json!(t.len()));
    }
    if results.get("machine").is_none() {
        results["machine"] = machine();
    }
    if let Ok(mapping) = fs::read_to_string(b.dir.join("mapping.json")) {
        results["mapping"] = serde_json::from_str(&mapping).unwrap();
    }
    results["harness"] = json!({ "git": git_describe(), "profile": PROFILE });
    results["sizes"][name] = json!({ "trials": trials, "report": out });
    write_json(&b.results_path(), &results);
    out
}

/// `(m, report[key])` of the sizes m below `n` whose whole report was measured.
fn measured_sizes(results: &Value, n: usize, key: &str) -> Vec<(f64, f64)> {
    let Some(sizes) = results["sizes"].as_object() else { return Vec::new() };
    sizes
        .values()
        .filter_map(|s| {
            let r = &s["report"];
            let m = r["trials"].as_u64()? as usize;
            let y = r[key].as_f64()?;
            (m < n && r["full"]["extrapolated"] == false).then_some((m as f64, y))
        })
        .collect()
}

/// Least-squares line through the points (a single point: through the origin).
fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    match points {
        [] => None,
        [(x, y)] => Some((0.0, y / x)),
        _ => {
            let k = points.len() as f64;
            let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
            let (mx, my) = (sx / k, sy / k);
            let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
            let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
            let slope = sxy / sxx;
            Some((my - slope * mx, slope))
        }
    }
}

fn git_describe() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

// -------------------------------------------------------------------- plot

/// Report time (last trial's end → finished report) against trials, for
/// every `results-*.json` in the folder; extrapolated points hollow.
fn plot(b: &Bench) -> PathBuf {
    let font = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf"]
        .iter()
        .find_map(|p| fs::read(p).ok())
        .expect("DejaVuSans.ttf (Debian: fonts-dejavu-core) for the plot's text");
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font).map_err(|_| "bad font").unwrap();
    let mut series = Vec::new();
    let mut caption = "Last trial's end → finished report".to_string();
    let mut labels: Vec<PathBuf> = fs::read_dir(&b.dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "json")
                && p.file_stem().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with("results-"))
        })
        .collect();
    labels.sort();
    for path in &labels {
        let label = path.file_stem().unwrap().to_string_lossy().trim_start_matches("results-").to_string();
        let results = read_json(path);
        if let (Some(cores), Some(lines)) = (results["machine"]["cores"].as_u64(), results["mapping"]["lines"].as_u64())
        {
            caption = format!("Last trial's end → finished report ({cores} cores, a {lines}-line mapping)");
        }
        let Some(sizes) = results["sizes"].as_object() else { continue };
        let mut full = Vec::new();
        let mut without = Vec::new();
        for s in sizes.values() {
            let r = &s["report"];
            let n = r["trials"].as_f64().unwrap();
            if let Some(t) = r["last_trial_end_to_report_s"].as_f64() {
                full.push((n, t, r["full"]["extrapolated"] == true));
            }
            if let Some(t) = r["last_trial_end_to_report_without_attribution_s"].as_f64() {
                without.push((n, t, false));
            }
        }
        full.sort_by(|a, b| a.0.total_cmp(&b.0));
        without.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push((format!("{label}: whole report"), full));
        series.push((format!("{label}: without attribution, minimal suite"), without));
    }
    let out = b.dir.join("report-time.png");
    let ymax = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)).fold(60.0_f64, f64::max) * 1.5;
    let ymin = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.1)).fold(1.0_f64, f64::min) * 0.6;
    let xmax = series.iter().flat_map(|(_, s)| s.iter().map(|p| p.0)).fold(100.0_f64, f64::max) * 1.05;
    {
        let area = BitMapBackend::new(&out, (1000, 640)).into_drawing_area();
        area.fill(&WHITE).unwrap();
        let mut chart = ChartBuilder::on(&area)
            .caption(caption, ("sans-serif", 24))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..xmax, (ymin..ymax).log_scale())
            .unwrap();
        chart
            .configure_mesh()
            .x_desc("trials")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| if *y < 10.0 { format!("{y:.1}") } else { format!("{y:.0}") })
            .y_desc("seconds (log scale)")
            .label_style(("sans-serif", 16))
            .axis_desc_style(("sans-serif", 18))
            .draw()
            .unwrap();
        chart
            .draw_series(LineSeries::new([(0.0, 60.0), (xmax, 60.0)], RED.stroke_width(1)))
            .unwrap()
            .label("issue #24's target: 60 s")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED));
        chart
            .draw_series([(800.0, 5.0), (4000.0, 8.0)].map(|p| Cross::new(p, 7, RED.stroke_width(3))))
            .unwrap()
            .label("issue #35's targets: 5 s at 800, 8 s at 4,000")
            .legend(|(x, y)| Cross::new((x + 10, y), 6, RED.stroke_width(3)));
        let colors = [BLUE, RGBColor(0, 140, 0), MAGENTA, RGBColor(0, 140, 160), BLACK, RGBColor(200, 120, 0)];
        for (i, (name, points)) in series.iter().enumerate() {
            let color = colors[i % colors.len()];
            chart
                .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), color.stroke_width(2)))
                .unwrap()
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
            chart
                .draw_series(points.iter().map(|&(x, y, extrapolated)| {
                    let style = if extrapolated { color.stroke_width(2) } else { color.filled() };
                    Circle::new((x, y), 5, style)
                }))
                .unwrap();
            let lift = if i % 2 == 0 { -24 } else { -20 };
            chart
                .draw_series(points.iter().map(|&(x, y, extrapolated)| {
                    let text = if extrapolated { format!("{y:.0} s (extrapolated)") } else { format!("{y:.1} s") };
                    EmptyElement::at((x, y))
                        + Text::new(text, (-14, lift), ("sans-serif", 15).into_font().color(&color))
                }))
                .unwrap();
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()
            .unwrap();
        area.present().unwrap();
    }
    out
}

// -------------------------------------------------------------------- main

/// Issue #24's equality check at scale: the report's attribution from the
/// coverage mapping read once, then with `CCL_COV_ATTRIBUTION_EXPORTS=on`
/// (one `llvm-cov export` per trial, as before), on the workspace `trials`
/// left: `attribution.json`, `trials.json`, `minimal-suite.json` and
/// `who-covers` of the first line of every file must be byte for byte the
/// same. Panics, naming the file, if not.
fn equal(b: &Bench, n: usize) -> Value {
    let name = n.to_string();
    let report = b.workspace(&name).join("report");
    let files = ["attribution.json", "trials.json", "minimal-suite.json"];
    let outputs = |env: &[(&str, &str)]| -> (Vec<Vec<u8>>, f64) {
        let ran = b.harness(&name, &["report"], env, None);
        assert!(ran.ok, "the report on {n} trials failed: see {}", b.dir.join(format!("{name}.stderr")).display());
        let mut out: Vec<Vec<u8>> = files.iter().map(|f| fs::read(report.join(f)).unwrap()).collect();
        let attribution = read_json(&report.join("attribution.json"));
        for (file, ranges) in attribution["files"].as_object().unwrap() {
            let query = format!("{file}:{}", ranges[0][0]);
            let answer = b.dir.join("who-covers.out");
            b.harness(&name, &["who-covers", &query], env, Some(&answer));
            out.push(fs::read(&answer).unwrap());
        }
        (out, ran.wall_s)
    };
    let (mapping, mapping_s) = outputs(&[]);
    let (exports, exports_s) = outputs(&[("CCL_COV_ATTRIBUTION_EXPORTS", "on")]);
    assert_eq!(mapping.len(), exports.len());
    for (i, (a, e)) in mapping.iter().zip(&exports).enumerate() {
        assert!(
            a == e,
            "{n} trials: {} differs between the mapping read once and llvm-cov per trial",
            files.get(i).unwrap_or(&"who-covers")
        );
    }
    json!({
        "trials": n,
        "equal": files.iter().map(ToString::to_string).chain([format!("who-covers of {} lines", mapping.len() - files.len())]).collect::<Vec<_>>(),
        "bytes": mapping.iter().map(Vec::len).sum::<usize>(),
        "report_s_mapping": mapping_s,
        "report_s_exports": exports_s,
    })
}

fn main() {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // cargo bench passes --bench to a harness = false target.
    args.retain(|a| a != "--bench");
    let mut positional = Vec::new();
    let mut dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("scale");
    let mut label = "latest".to_string();
    let mut max_report_s = 840.0;
    let mut max_report_gib = 12.0;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{} needs a value", a.to_string_lossy()));
        match a.to_str() {
            Some("--dir") => dir = PathBuf::from(value()),
            Some("--label") => label = value().into_string().unwrap(),
            Some("--max-report-s") => max_report_s = value().into_string().unwrap().parse().unwrap(),
            Some("--max-report-gib") => max_report_gib = value().into_string().unwrap().parse().unwrap(),
            _ => positional.push(a.into_string().unwrap()),
        }
    }
    let b = Bench { dir, label, max_report_s, max_report_gib };
    let sizes = |rest: &[String]| -> Vec<usize> {
        if rest.is_empty() {
            SIZES.to_vec()
        } else {
            rest.iter().map(|s| s.parse().expect("a number of trials")).collect()
        }
    };
    let out = match positional.split_first() {
        Some((phase, _)) if phase == "prepare" => prepare(&b),
        Some((phase, rest)) if phase == "trials" => {
            Value::Array(sizes(rest).into_iter().map(|n| trials(&b, n)).collect())
        }
        Some((phase, rest)) if phase == "report" => {
            Value::Array(sizes(rest).into_iter().map(|n| report(&b, n)).collect())
        }
        Some((phase, _)) if phase == "plot" => json!({ "png": plot(&b) }),
        Some((phase, rest)) if phase == "equal" => {
            Value::Array(sizes(rest).into_iter().map(|n| equal(&b, n)).collect())
        }
        None => {
            prepare(&b);
            for n in SIZES {
                trials(&b, n);
                report(&b, n);
            }
            plot(&b);
            read_json(&b.results_path())
        }
        Some((phase, _)) => {
            panic!("unknown phase {phase}: prepare, trials [N…], report [N…], plot, equal [N…], or none for all")
        }
    };
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
