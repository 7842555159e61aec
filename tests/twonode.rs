//! Two nodes simulated on one machine, for real: two network namespaces
//! joined by a veth pair (10.200.0.1/30 and .2, inside those namespaces
//! only), each held by a process with a UTS namespace of its own (its own
//! hostname), a PID namespace of its own (with its own `/proc`) and a mount
//! namespace where a generated hosts file is bound over `/etc/hosts`, so
//! both node names resolve on both nodes. The harness runs in node A's
//! namespaces; Open MPI's `plm_rsh_agent` is a generated script that,
//! instead of ssh, enters the target node's namespaces with `nsenter` and
//! runs the command there. Trials then run across the nodes through the
//! real harness, which passes the config's `hosts` to `mpirun` itself. The
//! nodes share the filesystem (the workspace) and `/dev/shm`, as cluster
//! nodes share a filesystem, unless a test hides the workspace from node B.
//! With separate PID namespaces the harness on A can neither see nor signal
//! B's processes: only the launcher's own teardown reaches them, as on a
//! real cluster. A guard kills each node's PID-namespace init (which takes
//! every process of the node with it) and the holders, and deletes the
//! namespaces (and with them the veth pair), even when the test fails. Must
//! run as root.
#![allow(clippy::print_stdout, clippy::print_stderr)] // a bench or test prints what it measured or why it failed

use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{files_under, is_root, only, output_within, processes_mentioning, result, setup};

/// No harness run may take longer (a first run builds the fixture).
const LIMIT: Duration = Duration::from_secs(600);
/// How long a namespace command or holder may take.
const STEP: Duration = Duration::from_secs(20);
/// Holders end on their own after this, should the guard never run (SIGKILL).
const HOLDER_LIFETIME_S: &str = "1200";
/// Every namespace of this test starts so (then the test's pid and the node).
const PREFIX: &str = "cclcov2n-";

/// One simulated node: its hostname, the holder process (`unshare`)
/// and the holder's child `init`, PID 1 of the node's PID namespace, whose
/// network, UTS, mount and PID namespaces are the node's.
struct Node {
    host: String,
    holder: Child,
    init: u32,
}

/// Two nodes, A and B. Dropping it kills the holders and deletes the
/// namespaces, never panicking.
struct TwoNodes {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    netns: Vec<String>,
    /// The `nsenter`s that started each node's ssh stand-in.
    rshd: Vec<Child>,
}

/// Runs `argv`, failing the test with its output unless it succeeds in time.
fn run(argv: &[&str]) -> String {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    let out = output_within(cmd, STEP);
    assert!(
        out.status.success(),
        "{argv:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Names of the network namespaces now present.
fn namespaces() -> Vec<String> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "list"]);
    let out = output_within(cmd, STEP);
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect()
}

/// Deletes namespaces of earlier runs of this test whose process is gone
/// (one killed with SIGKILL could not run its guard).
fn delete_stale_namespaces() {
    for ns in namespaces() {
        let Some(pid) = ns.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else { continue };
        if !Path::new("/proc").join(pid).exists() {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "delete", &ns]);
            let _ = output_within(cmd, STEP);
        }
    }
}

/// The processes in the PID namespace of `pid` (as this test, in the
/// parent namespace, sees them), with their command lines.
fn in_pid_namespace_of(pid: u32) -> Vec<(u32, String)> {
    let ns = |p: &str| fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let Some(node) = ns(&pid.to_string()) else { return Vec::new() };
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(p) = name.parse::<u32>() else { continue };
        if ns(&name).as_ref() == Some(&node) {
            let cmdline = fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default().replace('\0', " ");
            found.push((p, cmdline));
        }
    }
    found
}

/// Live processes of node `init`'s PID namespace whose environment
/// mentions `needle` (the workspace: every process of a trial carries it).
fn node_processes_mentioning(init: u32, needle: &str) -> Vec<String> {
    let live = processes_mentioning(needle);
    let mine: Vec<u32> = in_pid_namespace_of(init).into_iter().map(|(p, _)| p).collect();
    live.into_iter()
        .filter(|l| l.split(':').next().and_then(|p| p.parse().ok()).is_some_and(|p| mine.contains(&p)))
        .collect()
}

impl TwoNodes {
    fn start() -> TwoNodes {
        use std::sync::atomic::{AtomicU32, Ordering};
        static INSTANCE: AtomicU32 = AtomicU32::new(0);
        delete_stale_namespaces();
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // Tests of this file run side by side: each pair of nodes has names of its own.
        let pid = format!("{}-{}", std::process::id(), INSTANCE.fetch_add(1, Ordering::SeqCst) % 10);
        let mut two = TwoNodes { dir, nodes: Vec::new(), netns: Vec::new(), rshd: Vec::new() };
        let spec = [("a", "10.200.0.1"), ("b", "10.200.0.2")];
        let hosts = two.dir.path().join("hosts");
        let mut text = String::from("127.0.0.1 localhost\n");
        for (n, addr) in spec {
            text += &format!("{addr} cclnode{n}-{pid}\n");
        }
        fs::write(&hosts, text).unwrap();
        for (n, _) in spec {
            let ns = format!("{PREFIX}{pid}-{n}");
            run(&["ip", "netns", "add", &ns]);
            two.netns.push(ns);
        }
        let short = pid.replace('-', "");
        let veth = [format!("c2n{short}a"), format!("c2n{short}b")];
        run(&["ip", "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1]]);
        for (i, (n, addr)) in spec.into_iter().enumerate() {
            let ns = two.netns[i].clone();
            run(&["ip", "link", "set", &veth[i], "netns", &ns]);
            run(&["ip", "-n", &ns, "addr", "add", &format!("{addr}/30"), "dev", &veth[i]]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            run(&["ip", "-n", &ns, "link", "set", &veth[i], "up"]);
            // `ip netns exec` execs `unshare` (the holder), which forks
            // `sleep`: PID 1 of the node's PID namespace, with its own /proc.
            let holder = Command::new("ip")
                .args(["netns", "exec", &ns, "unshare", "--uts", "--mount", "--propagation", "private"])
                .args(["--pid", "--fork", "--mount-proc", "--"])
                .args(["sleep", HOLDER_LIFETIME_S])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let host = format!("cclnode{n}-{pid}");
            let children = format!("/proc/{0}/task/{0}/children", holder.id());
            two.nodes.push(Node { host: host.clone(), holder, init: 0 });
            let started = Instant::now();
            let init = loop {
                let child =
                    fs::read_to_string(&children).unwrap_or_default().split_whitespace().next().map(String::from);
                let comm = child.as_ref().and_then(|c| fs::read_to_string(format!("/proc/{c}/comm")).ok());
                if let (Some(child), Some("sleep")) = (child.as_ref(), comm.as_deref().map(str::trim)) {
                    break child.parse::<u32>().unwrap();
                }
                assert!(started.elapsed() < STEP, "the holder of {ns} did not start its PID namespace");
                std::thread::sleep(Duration::from_millis(20));
            };
            two.nodes.last_mut().unwrap().init = init;
            let target = init.to_string();
            run(&["nsenter", "--target", &target, "--uts", "--", "hostname", &host]);
            run(&[
                "nsenter",
                "--target",
                &target,
                "--mount",
                "--",
                "mount",
                "--bind",
                &hosts.display().to_string(),
                "/etc/hosts",
            ]);
        }
        two.start_rshd();
        two
    }

    fn init(&self, i: usize) -> String {
        self.nodes[i].init.to_string()
    }

    /// `argv` entering node `i`'s namespaces (network, hostname, mounts,
    /// PIDs) in `wd`.
    fn on_node(&self, i: usize, wd: &Path, argv: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["--target", &self.init(i), "--net", "--uts", "--mount", "--pid"])
            .arg(format!("--wd={}", wd.display()))
            .arg("--")
            .args(argv);
        cmd
    }

    /// `command` run on node `i`, with its environment and working directory.
    fn wrap(&self, i: usize, command: &Command) -> Command {
        let wd = command.get_current_dir().map(Path::to_path_buf).unwrap_or_else(|| std::env::current_dir().unwrap());
        let program = command.get_program().to_string_lossy().into_owned();
        let mut cmd = self.on_node(i, &wd, &[&program]);
        cmd.args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(v) => cmd.env(key, v),
                None => cmd.env_remove(key),
            };
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// The config's `hosts`: both nodes, two rank slots (and so two GPU
    /// slots) each.
    fn hosts(&self) -> serde_json::Value {
        self.nodes.iter().map(|n| json!({"name": n.host, "slots": 2})).collect()
    }

    /// Starts the ssh stand-in's server on every node, inside all of the
    /// node's namespaces (the test, in the parent PID namespace, may enter
    /// them; a process in node A's may not enter B's), and waits until each
    /// listens.
    fn start_rshd(&mut self) {
        let server = self.dir.path().join("rshd.py");
        fs::write(&server, RSHD).unwrap();
        for i in 0..self.nodes.len() {
            let ready = self.dir.path().join(format!("rshd-{i}.ready"));
            let mut cmd = self.on_node(i, self.dir.path(), &["python3"]);
            cmd.arg(&server).arg(RSH_PORT.to_string()).arg(&ready);
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            self.rshd.push(cmd.spawn().unwrap());
            let started = Instant::now();
            while !ready.exists() {
                assert!(started.elapsed() < STEP, "the ssh stand-in did not start on {}", self.nodes[i].host);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The `plm_rsh_agent`: called as `agent <host> <command words…>` like
    /// ssh, it connects to the node's server over the veth pair and relays
    /// what the remote command prints, as ssh would.
    fn agent(&self) -> PathBuf {
        let path = self.dir.path().join("agent");
        fs::write(&path, RSH_CLIENT.replace("{port}", &RSH_PORT.to_string())).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

/// The port of the ssh stand-in, in each node's own network namespace.
const RSH_PORT: u16 = 2222;

/// The ssh stand-in's server: runs each connection's command line (its first
/// line) with `/bin/sh -c` on this node, the connection as its stdin,
/// stdout and stderr. `rshd.py PORT READY_FILE`.
const RSHD: &str = r#"import os, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1])))
srv.listen(64)
open(sys.argv[2], "w").close()
while True:
    conn, _ = srv.accept()
    if os.fork() == 0:
        srv.close()
        line = b""
        while not line.endswith(b"\n"):
            byte = conn.recv(1)
            if not byte:
                os._exit(1)
            line += byte
        for fd in (0, 1, 2):
            os.dup2(conn.fileno(), fd)
        os.execv("/bin/sh", ["sh", "-c", line.decode().rstrip("\n")])
    conn.close()
"#;

/// The ssh stand-in's client, the `plm_rsh_agent`.
const RSH_CLIENT: &str = r#"#!/usr/bin/env python3
# ssh stand-in: runs the words on the named simulated node, through its server.
import socket, sys
conn = socket.create_connection((sys.argv[1], {port}), timeout=20)
conn.settimeout(None)
conn.sendall(" ".join(sys.argv[2:]).encode() + b"\n")
while True:
    data = conn.recv(65536)
    if not data:
        break
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
"#;

impl Drop for TwoNodes {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            // PID 1 of the node's namespace: the kernel kills every process
            // of the node with it.
            if node.init > 0 {
                // SAFETY: kill(2) on the node's init, a child of our holder.
                unsafe { libc::kill(node.init as i32, libc::SIGKILL) };
            }
            // The holder reaps its init and exits; bounded, then killed.
            let started = Instant::now();
            while node.holder.try_wait().ok().flatten().is_none() && started.elapsed() < STEP {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = node.holder.kill();
            let _ = node.holder.wait();
        }
        for rshd in &mut self.rshd {
            let _ = rshd.kill();
            let _ = rshd.wait();
        }
        for ns in &self.netns {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "delete", ns]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            if let Ok(mut child) = cmd.spawn() {
                let started = Instant::now();
                while child.try_wait().ok().flatten().is_none() && started.elapsed() < STEP {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A config whose trials run on both nodes through `mpirun` (launcher
/// `twonode`, the agent, ranks one per node), the hosts from the config;
/// `variants` as given.
fn two_node_setup(nodes: &TwoNodes, variants: serde_json::Value, timeouts: serde_json::Value) -> support::Setup {
    let agent = nodes.agent();
    let mut s = setup(|v| {
        only(v, "AllReduce", &["1K"], variants);
        v["hosts"] = nodes.hosts();
        v["launchers"]["twonode"] = json!({
            "kind": "mpirun", "flavor": "openmpi", "nodes": 2,
            "args": ["--mca", "plm_rsh_agent", agent.display().to_string(), "--map-by", "node", "--bind-to", "none"],
            "program_args": ["-t", "1", "-g", "1"]
        });
        v["timeouts"] = timeouts;
    });
    // Raw profiles stay for the report to merge (and for the test to read).
    s.env.push(("CCL_COV_INCREMENTAL_MERGE".into(), "off".into()));
    s
}

/// No process of the run is left on either node: each node's PID namespace
/// is searched for processes whose environment names the workspace, for up
/// to `limit` (the launcher's teardown may still be finishing).
fn assert_nothing_left(nodes: &TwoNodes, ws: &Path, limit: Duration) {
    let needle = ws.display().to_string();
    let started = Instant::now();
    loop {
        let left: Vec<(String, Vec<String>)> = nodes
            .nodes
            .iter()
            .map(|n| (n.host.clone(), node_processes_mentioning(n.init, &needle)))
            .filter(|(_, found)| !found.is_empty())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(started.elapsed() < limit, "processes of the run left after {limit:?}: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_two_node_mpirun_trial_runs_across_two_simulated_nodes() {
    assert!(is_root(), "this test creates network namespaces: run it as root (CI does)");
    let nodes = TwoNodes::start();
    let netns = nodes.netns.clone();
    let (host_a, host_b) = (nodes.nodes[0].host.clone(), nodes.nodes[1].host.clone());
    // The nodes are apart: each has its own hostname, reaches the other by
    // name over the veth pair only, and sees only its own processes.
    let wd = std::env::temp_dir();
    for (i, (me, other)) in [(&host_a, &host_b), (&host_b, &host_a)].into_iter().enumerate() {
        let out = output_within(nodes.on_node(i, &wd, &["hostname"]), STEP);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), me.as_str());
        let out = output_within(nodes.on_node(i, &wd, &["getent", "hosts", other]), STEP);
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("10.200.0."), "{other} does not resolve on {me}");
        let out = output_within(nodes.on_node(i, &wd, &["cat", "/proc/1/comm"]), STEP);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sleep", "{me} has a PID namespace of its own");
    }
    let links = run(&["ip", "-n", &netns[0], "-o", "addr", "show"]);
    assert!(links.contains("10.200.0.1/30"), "{links}");

    let s = two_node_setup(
        &nodes,
        json!([{"name": "twonode", "launcher": "twonode", "ranks": 2}]),
        json!({"default": 120, "grace": 5}),
    );
    let harness = nodes.wrap(0, &support::command(&s, "collectives", &[]));
    let ran = support::spawn(&s, harness).wait(LIMIT);
    let log = ran.text();
    let took = ran.took;
    let trial_log = fs::read_to_string(s.ws.join("logs/AllReduce.1K.twonode.log")).unwrap_or_default();
    assert!(ran.success, "{log}\n--- trial log\n{trial_log}");
    // Both nodes were checked for the workspace before the trial.
    assert!(
        log.contains(&format!("shared filesystem: every node of the config's hosts ({}) ({host_a}, {host_b}) sees the workspace through launcher twonode", s.config.display())),
        "{log}"
    );
    let r = result(&s, "AllReduce.1K.twonode");
    assert_eq!(r["status"], "PASSED", "{r}\n{trial_log}");
    // The config's hosts reach mpirun, placed by the harness: one rank on each.
    let argv = r["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>().join(" ");
    assert!(argv.contains(&format!("-np 2 --host {host_a}:1,{host_b}:1 --mca plm_rsh_agent")), "{argv}");

    // Which node each rank ran on: rank 0 (with mpirun) on A, rank 1 on B,
    // as the ranks themselves report (gathered by MPI to rank 0).
    let on = |rank: usize, host: &str| {
        trial_log.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() > 8 && w[1] == "Rank" && w[2] == rank.to_string() && w[7] == "on" && w[8] == host
        })
    };
    assert!(on(0, &host_a) && on(1, &host_b), "ranks not one per node (0 on {host_a}, 1 on {host_b}):\n{trial_log}");

    // `%h`: each rank's profiles are named by its own node.
    let raw: Vec<String> = files_under(&s.ws.join("profiles/AllReduce.1K.twonode"))
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".profraw"))
        .collect();
    for host in [&host_a, &host_b] {
        assert!(raw.iter().any(|n| n.starts_with(&format!("{host}-"))), "no profile of {host}: {raw:?}");
    }
    assert!(
        raw.iter().all(|n| n.starts_with(&format!("{host_a}-")) || n.starts_with(&format!("{host_b}-"))),
        "{raw:?}"
    );
    assert_eq!(r["profiles"], raw.len(), "{raw:?}");
    // The check's marker is gone.
    let stray: Vec<_> = fs::read_dir(s.ws.join("profiles"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    assert!(stray.is_empty(), "{stray:?}");

    // Both nodes' profiles merge into the report.
    let report = support::harness(&s, "report", &[], LIMIT);
    assert!(report.success, "{}", report.text());
    let merged = fs::read_to_string(s.ws.join("report/profiles.list")).unwrap();
    for host in [&host_a, &host_b] {
        assert!(merged.lines().any(|l| l.contains(&format!("/{host}-"))), "{host} not merged: {merged}");
    }
    assert!(s.ws.join("report/summary.json").is_file());

    // Nothing is left: no process of the run on either node, and after the
    // guard, no holder and no namespace.
    assert_nothing_left(&nodes, &s.ws, STEP);
    let survivors = processes_mentioning(&s.ws.display().to_string());
    assert!(survivors.is_empty(), "processes survive: {survivors:?}");
    let holders: Vec<u32> = nodes.nodes.iter().flat_map(|n| [n.holder.id(), n.init]).collect();
    drop(nodes);
    let left: Vec<String> = namespaces().into_iter().filter(|n| netns.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    for pid in holders {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty(), "holder {pid} left: {stat}");
    }
    eprintln!("two-node harness run took {took:?}");
}

/// A trial hung on node B (its rank 1 blocks forever) times out, and is
/// then killed on both nodes. The harness on A cannot see or signal B's
/// processes (B has its own PID namespace): only mpirun's teardown, which
/// the supervisor's SIGTERM to mpirun starts, reaches them.
#[test]
fn a_hung_two_node_trial_is_killed_on_both_nodes() {
    assert!(is_root(), "this test creates network namespaces: run it as root (CI does)");
    let nodes = TwoNodes::start();
    let s = two_node_setup(
        &nodes,
        json!([{"name": "hang", "launcher": "twonode", "ranks": 2,
                "env": {"CCL_FAULT": "hang", "CCL_FAULT_RANK": "1"}}]),
        json!({"default": 120, "grace": 3, "overrides": [{"variant": "hang", "seconds": 8}]}),
    );
    let harness = support::spawn(&s, nodes.wrap(0, &support::command(&s, "collectives", &[])));
    // Node B's rank really runs (and hangs) there, out of the harness's sight.
    let needle = s.ws.display().to_string();
    let started = Instant::now();
    let on_b = loop {
        let found = node_processes_mentioning(nodes.nodes[1].init, &needle);
        if found.iter().any(|p| p.contains("all_reduce_perf")) {
            break found;
        }
        assert!(started.elapsed() < LIMIT, "no rank ever ran on node B:\n{}", harness.text_so_far());
        std::thread::sleep(Duration::from_millis(100));
    };
    let ran = harness.wait(LIMIT);
    // Nothing of the trial is left on either node (checked first: it is
    // what this test is for).
    assert_nothing_left(&nodes, &s.ws, STEP);
    let log = ran.text();
    let trial_log = fs::read_to_string(s.ws.join("logs/AllReduce.1K.hang.log")).unwrap_or_default();
    assert!(!ran.success, "a hung trial fails the run:\n{log}");
    let r = result(&s, "AllReduce.1K.hang");
    assert_eq!(r["status"], "TIMEOUT", "{r}\n{trial_log}");
    assert!(r["duration_s"].as_f64().unwrap() < 8.0 + 3.0 + 15.0, "{r}");
    eprintln!("node B ran {on_b:?} and it is gone");
}

/// Node B does not see the workspace (a private tmpfs covers its folder in
/// B's mounts): the shared-filesystem check names node B, the 2-node trial
/// fails unrun, and the run fails; a 1-node trial beside it still passes.
#[test]
fn a_node_that_does_not_see_the_workspace_stops_the_multi_node_trials() {
    assert!(is_root(), "this test creates network namespaces: run it as root (CI does)");
    let nodes = TwoNodes::start();
    let s = two_node_setup(
        &nodes,
        json!([
            {"name": "twonode", "launcher": "twonode", "ranks": 2},
            {"name": "alone", "launcher": "threads", "ranks": 2}
        ]),
        json!({"default": 120, "grace": 5}),
    );
    let host_b = nodes.nodes[1].host.clone();
    let hidden = s.dir.path().display().to_string();
    run(&["nsenter", "--target", &nodes.init(1), "--mount", "--", "mount", "-t", "tmpfs", "tmpfs", &hidden]);
    let ran = support::spawn(&s, nodes.wrap(0, &support::command(&s, "collectives", &[]))).wait(LIMIT);
    let log = ran.text();
    assert!(!ran.success, "{log}");
    let said = format!("shared filesystem check: node {host_b} does not see the workspace {}", s.ws.display());
    assert!(log.contains(&said), "{log}");
    let saw = "cat: ".to_string() + &s.ws.join("profiles/.shared-filesystem-check-").display().to_string();
    assert!(log.contains(&saw) && log.contains("No such file or directory"), "what node B saw is shown: {log}");
    assert!(log.contains("AllReduce::1K::twonode") && log.contains("not run: shared filesystem check: node"), "{log}");
    // Nothing passed falsely: the 2-node trial never ran, and its record
    // says so (issue #48: every planned trial has a verdict); the 1-node
    // trial did run and passed.
    let twonode = result(&s, "AllReduce.1K.twonode");
    assert_eq!(twonode["status"], "FAILED", "{twonode}");
    let reason = twonode["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("not run: shared filesystem check: node"), "{twonode}");
    assert!(!s.ws.join("logs/AllReduce.1K.twonode.log").exists(), "{log}");
    assert_eq!(result(&s, "AllReduce.1K.alone")["status"], "PASSED", "{log}");
    assert_nothing_left(&nodes, &s.ws, STEP);
}
