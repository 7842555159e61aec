//! Shared by the end-to-end tests that run the real `ccl-coverage` binary on
//! a config derived from `configs/local.json` in a temporary workspace (the
//! same pattern as `tests/harness_e2e.rs`), with a hard limit on how long the
//! harness may run.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `git -C dir <args>` as a fixed author, within a minute; its stdout (fails the test if git does).
pub fn git(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir).args(args);
    for (k, v) in [
        ("GIT_AUTHOR_NAME", "t"),
        ("GIT_AUTHOR_EMAIL", "t@t"),
        ("GIT_COMMITTER_NAME", "t"),
        ("GIT_COMMITTER_EMAIL", "t@t"),
    ] {
        cmd.env(k, v);
    }
    let out = output_within(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Copies the folder `from` to `to`, recursively (a fixture into a temporary repository).
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

pub struct Setup {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub ws: PathBuf,
    /// Extra environment for the harness process.
    pub env: Vec<(String, String)>,
}

/// A config like `configs/local.json` (sources as absolute paths, so the
/// build key matches the main suite's), edited by `edit`.
pub fn setup(edit: impl FnOnce(&mut Value)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut v: Value = serde_json::from_str(&fs::read_to_string(root().join("configs/local.json")).unwrap()).unwrap();
    v["library"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    v["tests"]["source_dir"] = json!(root().join("tests/fixtures/ccl-tests").display().to_string());
    v["report"]["snapshot"] = json!(false);
    edit(&mut v);
    let config = dir.path().join("config.json");
    fs::write(&config, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let ws = dir.path().join("ws");
    Setup { dir, config, ws, env: Vec::new() }
}

/// Keeps only `collective`, with `sizes` and `variants`.
pub fn only(v: &mut Value, collective: &str, sizes: &[&str], variants: Value) {
    let keep: Vec<Value> =
        v["collectives"].as_array().unwrap().iter().filter(|c| c["name"] == collective).cloned().collect();
    v["collectives"] = Value::Array(keep);
    v["sizes"] = json!(sizes);
    v["variants"] = variants;
}

pub struct Ran {
    pub success: bool,
    /// The exit code; `None` when a signal ended the harness.
    pub code: Option<i32>,
    /// stdout, then stderr.
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Ran {
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A harness started in the background, output going to files (so a full
/// pipe cannot stall it).
pub struct Running {
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
    started: Instant,
}

/// The harness command, hermetic: no `CCL_COV_*` switch of the caller leaks
/// in, but `CCL_COV_CGROUP`, so that the whole suite also runs on the
/// process-tree fallback (`CCL_COV_CGROUP=off cargo test`).
pub fn command(s: &Setup, subcommand: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ccl-coverage"));
    for (key, _) in std::env::vars() {
        let hermetic = key.starts_with("CCL_COV_") && key != "CCL_COV_CGROUP";
        if hermetic || key == "GITHUB_STEP_SUMMARY" || key == "NEXTEST_RUN_ID" {
            cmd.env_remove(key);
        }
    }
    cmd.arg(subcommand)
        .args(args)
        .env("CCL_COV_CONFIG", &s.config)
        .env("CCL_COV_WORKSPACE", &s.ws)
        .env("CARGO_MANIFEST_DIR", root())
        .current_dir(root())
        .stdin(Stdio::null());
    for (k, v) in &s.env {
        cmd.env(k, v);
    }
    cmd
}

/// Starts `cmd` with its output in files under `s.dir`.
pub fn spawn(s: &Setup, mut cmd: Command) -> Running {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let out = s.dir.path().join(format!("harness-{}-{n}.out", std::process::id()));
    let err = s.dir.path().join(format!("harness-{}-{n}.err", std::process::id()));
    cmd.stdout(fs::File::create(&out).unwrap()).stderr(fs::File::create(&err).unwrap());
    Running { child: cmd.spawn().unwrap(), out, err, started: Instant::now() }
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// What it printed so far.
    pub fn text_so_far(&self) -> String {
        let read = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
        format!("{}{}", read(&self.out), read(&self.err))
    }

    /// Waits for it to end, killing it (and failing the test) past `limit`.
    pub fn wait(mut self, limit: Duration) -> Ran {
        self.wait_mut(limit)
    }

    fn wait_mut(&mut self, limit: Duration) -> Ran {
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break Some(status);
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let read = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
        let ran = Ran {
            success: status.is_some_and(|s| s.success()),
            code: status.and_then(|s| s.code()),
            stdout: read(&self.out),
            stderr: read(&self.err),
            took: self.started.elapsed(),
        };
        let _ = fs::remove_file(&self.out);
        let _ = fs::remove_file(&self.err);
        assert!(status.is_some(), "the harness ran past {limit:?} and was killed:\n{}", ran.text());
        ran
    }
}

/// A test that fails before it waits must not leave its harness running:
/// killing it (SIGKILL) makes its trial supervisors stop the trials.
impl Drop for Running {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits for `child`, killing it and failing the test past `limit`.
pub fn wait_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a child ran past {limit:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to the end like `Command::output`, but kills it and fails the
/// test past `limit`: no test waits on a child without a bound.
pub fn output_within(mut cmd: Command, limit: Duration) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    cmd.stdin(Stdio::null()).stdout(fs::File::create(&out).unwrap()).stderr(fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{:?} ran past {limit:?} and was killed:\n{}{}",
                cmd,
                String::from_utf8_lossy(&fs::read(&out).unwrap_or_default()),
                String::from_utf8_lossy(&fs::read(&err).unwrap_or_default())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::process::Output { status, stdout: fs::read(&out).unwrap(), stderr: fs::read(&err).unwrap() }
}

/// Runs the harness binary hermetically and kills it if it runs past
/// `limit`: a hung harness must fail the test, not hang it.
pub fn harness(s: &Setup, subcommand: &str, args: &[&str], limit: Duration) -> Ran {
    spawn(s, command(s, subcommand, args)).wait(limit)
}

pub fn result(s: &Setup, slug: &str) -> Value {
    let path = s.ws.join("results").join(format!("{slug}.json"));
    serde_json::from_str(&fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Every file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// Live processes whose environment mentions `needle` (a workspace path).
pub fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) {
            continue;
        }
        let environ = fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            found.push(format!(
                "{name}: {}",
                fs::read_to_string(entry.path().join("cmdline")).unwrap_or_default().replace('\0', " ")
            ));
        }
    }
    found
}

/// Whether the tests run as root (uid 0), read from `/proc` rather than libc:
/// the Slurm and namespace tests need it.
pub fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}

/// The entries of the workspace `ws` (relative paths, folders too) that no
/// row of docs/layout.md's workspace table names: every output file is
/// documented there. A row's `<trial>` stands for any one file name; a
/// row ending in `/` covers what is in its folder; a folder is named by a
/// row below it.
pub fn undocumented_workspace_entries(ws: &Path) -> Vec<String> {
    let docs = fs::read_to_string(root().join("docs/layout.md")).unwrap();
    let table = docs.split("<!-- workspace-files:").nth(1).expect("docs/layout.md has no workspace-files table");
    let mut rows: Vec<(regex::Regex, bool)> = Vec::new();
    for line in table.lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).skip(2) {
        let cell = line.split('|').nth(1).unwrap_or_default();
        for path in cell.split(',').map(|p| p.trim().trim_matches('`')) {
            let folder = path.ends_with('/');
            let pattern = regex::escape(path.trim_end_matches('/')).replace("<trial>", "[^/]+");
            rows.push((regex::Regex::new(&format!("^{pattern}$")).unwrap(), folder));
        }
    }
    let mut entries = Vec::new();
    let mut stack = vec![ws.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let is_dir = fs::symlink_metadata(entry.path()).unwrap().is_dir();
            if is_dir {
                stack.push(entry.path());
            }
            entries.push((entry.path().strip_prefix(ws).unwrap().display().to_string(), is_dir));
        }
    }
    let named = |rel: &str, is_dir: bool| {
        let parts: Vec<&str> = rel.split('/').collect();
        rows.iter().any(|(re, folder)| {
            // The entry, or a folder above it that a folder row names.
            (1..=parts.len()).any(|n| {
                let prefix = parts[..n].join("/");
                re.is_match(&prefix) && (n == parts.len() || *folder)
            })
        }) || (is_dir && rows.iter().any(|(re, _)| re.as_str().starts_with(&format!("^{}/", regex::escape(rel)))))
    };
    let mut missing: Vec<String> = entries.into_iter().filter(|(rel, d)| !named(rel, *d)).map(|(rel, _)| rel).collect();
    missing.sort();
    missing
}

/// Makes `tool` (`llvm_cov` or `llvm_profdata`) of this setup's build and
/// report a wrapper around the real one (`CCL_COV_LLVM_BIN`, default
/// `/usr/lib/llvm-22/bin`, as `configs/local.json`), named by `LLVM_COV` /
/// `LLVM_PROFDATA` before the first run. The wrapper's own bytes never change,
/// so the build records its checksum once and the report, which runs only the
/// tools it resolves and checks them against the build's (issue #40), accepts
/// it; what it does is [`tool_behaviour`]'s, a script it sources when there is one.
#[allow(dead_code)] // not every test binary that has `support` fakes a tool
pub fn tool_wrapper(s: &mut Setup, tool: &str) {
    use std::os::unix::fs::PermissionsExt;
    let (binary, var) = match tool {
        "llvm_cov" => ("llvm-cov", "LLVM_COV"),
        _ => ("llvm-profdata", "LLVM_PROFDATA"),
    };
    let bin = std::env::var("CCL_COV_LLVM_BIN").unwrap_or_else(|_| "/usr/lib/llvm-22/bin".into());
    let wrapper = s.dir.path().join(binary);
    let behaviour = s.dir.path().join(format!("{tool}.sh"));
    let text = format!(
        "#!/bin/sh\nREAL='{bin}/{binary}'\nif [ -f '{b}' ]; then . '{b}'; fi\nexec \"$REAL\" \"$@\"\n",
        b = behaviour.display()
    );
    fs::write(&wrapper, text).unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    s.env.push((var.into(), wrapper.display().to_string()));
}

/// What [`tool_wrapper`]'s `tool` does from now on: `script(real)`, shell
/// lines sourced with the tool's arguments, `real` being the real tool
/// (`"$REAL"`); falling off its end runs the real tool.
#[allow(dead_code)]
pub fn tool_behaviour(s: &Setup, tool: &str, script: impl FnOnce(&str) -> String) {
    fs::write(s.dir.path().join(format!("{tool}.sh")), script("\"$REAL\"") + "\n").unwrap();
}

/// [`tool_wrapper`]'s `tool` runs the real tool again.
#[allow(dead_code)]
pub fn tool_as_is(s: &Setup, tool: &str) {
    let _ = fs::remove_file(s.dir.path().join(format!("{tool}.sh")));
}
