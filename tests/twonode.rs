//! Two nodes simulated on one machine, for real: two network namespaces
//! joined by a veth pair (10.200.0.1/30 and .2, inside those namespaces
//! only), each held by a process with a UTS namespace of its own (its own
//! hostname) and a mount namespace where a generated hosts file is bound over
//! `/etc/hosts`, so both node names resolve on both nodes. The harness runs
//! in node A's namespaces; Open MPI's `plm_rsh_agent` is a generated script
//! that, instead of ssh, enters the target node's namespaces with `nsenter`
//! and runs the command there. A 2-rank, 2-node AllReduce trial then runs
//! across the nodes through the real harness. The nodes share the
//! filesystem (the workspace) and `/dev/shm`, as cluster nodes share a
//! filesystem. A guard deletes the namespaces (and with them the veth pair)
//! and kills the holders, even when the test fails. Must run as root.

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

/// One simulated node: its hostname, address, and the holder process whose
/// network, UTS and mount namespaces are the node's.
struct Node {
    host: String,
    addr: &'static str,
    holder: Child,
}

/// Two nodes, A and B. Dropping it kills the holders and deletes the
/// namespaces, never panicking.
struct TwoNodes {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
    netns: Vec<String>,
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

impl TwoNodes {
    fn start() -> TwoNodes {
        delete_stale_namespaces();
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let pid = std::process::id();
        let mut two = TwoNodes { dir, nodes: Vec::new(), netns: Vec::new() };
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
        let veth = [format!("c2n{pid}a"), format!("c2n{pid}b")];
        run(&["ip", "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1]]);
        for (i, (n, addr)) in spec.into_iter().enumerate() {
            let ns = two.netns[i].clone();
            run(&["ip", "link", "set", &veth[i], "netns", &ns]);
            run(&["ip", "-n", &ns, "addr", "add", &format!("{addr}/30"), "dev", &veth[i]]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            run(&["ip", "-n", &ns, "link", "set", &veth[i], "up"]);
            // `ip netns exec` and `unshare` exec (no fork): the child is the
            // holder, `sleep`, once both have set up its namespaces.
            let holder = Command::new("ip")
                .args(["netns", "exec", &ns, "unshare", "--uts", "--mount", "--propagation", "private", "--"])
                .args(["sleep", HOLDER_LIFETIME_S])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let host = format!("cclnode{n}-{pid}");
            two.nodes.push(Node { host: host.clone(), addr, holder });
            let node = two.nodes.last().unwrap();
            let started = Instant::now();
            let comm = Path::new("/proc").join(node.holder.id().to_string()).join("comm");
            while fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
                assert!(started.elapsed() < STEP, "the holder of {ns} did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
            let target = node.holder.id().to_string();
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
        two
    }

    fn holder(&self, i: usize) -> String {
        self.nodes[i].holder.id().to_string()
    }

    /// `argv` entering node `i`'s namespaces (network, hostname, mounts) in `wd`.
    fn on_node(&self, i: usize, wd: &Path, argv: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["--target", &self.holder(i), "--net", "--uts", "--mount"])
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

    /// Open MPI's hostfile: both nodes, one slot each.
    fn hostfile(&self) -> PathBuf {
        let path = self.dir.path().join("hostfile");
        let text: String = self.nodes.iter().map(|n| format!("{} slots=1\n", n.host)).collect();
        fs::write(&path, text).unwrap();
        path
    }

    /// The `plm_rsh_agent`: called as `agent <host> <command words…>` like
    /// ssh, it enters that node's namespaces and runs the words as ssh's
    /// remote shell would.
    fn agent(&self) -> PathBuf {
        let path = self.dir.path().join("agent");
        let mut cases = String::new();
        for n in &self.nodes {
            cases += &format!("  {}|{}) pid={} ;;\n", n.host, n.addr, n.holder.id());
        }
        fs::write(
            &path,
            format!(
                "#!/bin/sh\n# ssh stand-in: enters the simulated node's namespaces.\nhost=\"$1\"; shift\n\
                 case \"$host\" in\n{cases}  *) echo \"agent: no simulated node $host\" >&2; exit 255 ;;\nesac\n\
                 exec nsenter --target \"$pid\" --net --uts --mount -- /bin/sh -c \"$*\"\n"
            ),
        )
        .unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.holder.kill();
            let _ = node.holder.wait();
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

#[test]
fn a_two_node_mpirun_trial_runs_across_two_simulated_nodes() {
    assert!(is_root(), "this test creates network namespaces: run it as root (CI does)");
    let nodes = TwoNodes::start();
    let netns = nodes.netns.clone();
    let (host_a, host_b) = (nodes.nodes[0].host.clone(), nodes.nodes[1].host.clone());
    // The nodes are apart: each has its own hostname, and reaches the other
    // by name over the veth pair only.
    let wd = std::env::temp_dir();
    for (i, (me, other)) in [(&host_a, &host_b), (&host_b, &host_a)].into_iter().enumerate() {
        let out = output_within(nodes.on_node(i, &wd, &["hostname"]), STEP);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), me.as_str());
        let out = output_within(nodes.on_node(i, &wd, &["getent", "hosts", other]), STEP);
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("10.200.0."), "{other} does not resolve on {me}");
    }
    let links = run(&["ip", "-n", &netns[0], "-o", "addr", "show"]);
    assert!(links.contains("10.200.0.1/30"), "{links}");

    let agent = nodes.agent();
    let hostfile = nodes.hostfile();
    let mut s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "twonode", "launcher": "twonode", "ranks": 2}]));
        v["launchers"]["twonode"] = json!({
            "kind": "mpirun", "flavor": "openmpi", "nodes": 2,
            "args": ["--hostfile", "${CCL_COV_HOSTFILE}", "--mca", "plm_rsh_agent", agent.display().to_string(),
                     "--map-by", "node", "--bind-to", "none"],
            "program_args": ["-t", "1", "-g", "1"]
        });
    });
    s.env.push(("CCL_COV_HOSTFILE".into(), hostfile.display().to_string()));
    // Raw profiles stay for the report to merge (and for this test to read).
    s.env.push(("CCL_COV_INCREMENTAL_MERGE".into(), "off".into()));
    let harness = nodes.wrap(0, &support::command(&s, "collectives", &[]));
    let ran = support::spawn(&s, harness).wait(LIMIT);
    let log = ran.text();
    let took = ran.took;
    let trial_log = fs::read_to_string(s.ws.join("logs/AllReduce.1K.twonode.log")).unwrap_or_default();
    assert!(ran.success, "{log}\n--- trial log\n{trial_log}");
    let r = result(&s, "AllReduce.1K.twonode");
    assert_eq!(r["status"], "PASSED", "{r}\n{trial_log}");
    let argv = r["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>().join(" ");
    assert!(argv.contains(&format!("-np 2 --hostfile {} --mca plm_rsh_agent", hostfile.display())), "{argv}");

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

    // Both nodes' profiles merge into the report.
    let report = support::harness(&s, "report", &[], LIMIT);
    assert!(report.success, "{}", report.text());
    let merged = fs::read_to_string(s.ws.join("report/profiles.list")).unwrap();
    for host in [&host_a, &host_b] {
        assert!(merged.lines().any(|l| l.contains(&format!("/{host}-"))), "{host} not merged: {merged}");
    }
    assert!(s.ws.join("report/summary.json").is_file());

    // Nothing is left: no process of the run, and after the guard, no holder
    // and no namespace.
    let survivors = processes_mentioning(&s.ws.display().to_string());
    assert!(survivors.is_empty(), "processes survive: {survivors:?}");
    let holders: Vec<u32> = nodes.nodes.iter().map(|n| n.holder.id()).collect();
    drop(nodes);
    let left: Vec<String> = namespaces().into_iter().filter(|n| netns.contains(n)).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    for pid in holders {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty(), "holder {pid} left: {stat}");
    }
    eprintln!("two-node harness run took {took:?}");
}
