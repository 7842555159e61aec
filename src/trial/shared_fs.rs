//! The shared-filesystem check. Every rank writes its profiles into the
//! workspace, wherever it runs, so a trial across nodes only works when
//! every node sees the workspace at the same path. Before the first trial
//! of a launcher that spans more than one node, the harness writes a marker
//! of unique content into the workspace's `profiles/` folder and reads it
//! back from each node of the allocation through that launcher
//! (`mpirun --host NODE:1 -np 1 cat MARKER`, `srun --nodelist=NODE … cat
//! MARKER`), under a supervisor and a time limit like a trial. A node that
//! prints anything else, fails, or does not answer in time is named in the
//! error with what it printed; without this, its ranks' profiles would be
//! lost on a node-local disk and the trial would fail later for a reason
//! nobody could see (or pass without that node's coverage).

use crate::config::LauncherConfig;
use crate::env_names::{PROFILE_INIT_ONCE, TRIAL_TOKEN};
use crate::error::{Context, Error, Result};
use crate::exec::process::{Cmd, describe_status, indent_tail};
use crate::launch::allocation::Node;
use crate::launch::{self, TrialLaunch};
use crate::trial::{self as run, Ending};
use crate::upstream::TrialKind;
use crate::workspace::{self, Area, Workspace};
use std::path::Path;
use std::time::Duration;

/// How long reading the marker back from one node may take.
pub(crate) const LIMIT: Duration = Duration::from_secs(60);

/// Checks that each of `nodes` sees the workspace `ws` through `launcher`
/// (flavour resolved) with its rendered `args`. The error names the first
/// node that does not, and what it printed.
pub(crate) fn check(
    ws: &Workspace,
    launcher: &LauncherConfig,
    args: &[String],
    nodes: &[Node],
    supervisor: &Path,
    grace: Duration,
) -> Result<()> {
    let token = crate::exec::owner::new_token();
    let content = format!("ccl-coverage shared filesystem check {token} {}", random_hex()?);
    let dir = ws.area(Area::Profiles);
    ws.create_dir(&dir)?;
    ws.create_dir(&ws.logs_dir())?;
    let marker = dir.join(format!(".shared-filesystem-check-{token}"));
    ws.write(&marker, content.as_bytes())?;
    let probe = Probe { ws, launcher, args, marker: &marker, content: &content, supervisor, grace };
    let checked = nodes.iter().try_for_each(|node| probe.read_back(node));
    ws.remove(Area::Profiles, &marker)?;
    checked
}

/// One check's marker and how to reach the nodes.
struct Probe<'a> {
    ws: &'a Workspace,
    launcher: &'a LauncherConfig,
    args: &'a [String],
    marker: &'a Path,
    content: &'a str,
    supervisor: &'a Path,
    grace: Duration,
}

impl Probe<'_> {
    /// Reads the marker on `node`; an error unless it printed the content.
    fn read_back(&self, node: &Node) -> Result<()> {
        let Probe { ws, launcher, args, marker, content, supervisor, grace } = *self;
        let cat = ["cat".to_string(), marker.display().to_string()];
        let argv = launch::on_node(launcher, args, &node.name, &cat, launch::is_root());
        let Some(cmd) = Cmd::from_argv(&argv) else { return Err(Error::new("empty command line")) };
        let token = crate::exec::owner::new_token();
        let cmd = cmd.env(TRIAL_TOKEN, &token).env_remove(PROFILE_INIT_ONCE);
        let log = ws.logs_dir().join(format!(".shared-filesystem.{}.log", workspace::portable_name(&node.name)));
        let display = cmd.display();
        ws.write_new(&log, format!("$ {display}\n").as_bytes())?;
        let probe = TrialLaunch {
            cmd,
            env: vec![(TRIAL_TOKEN.into(), token.clone())],
            timeout: LIMIT,
            grace,
            // It prints one line.
            log_cap: 1 << 20,
            records: None,
            token,
            mark: None,
            kind: TrialKind::Perf,
            cases_dir: None,
            binary: "cat".into(),
        };
        let finished = run::run(&probe, &log, supervisor, LIMIT, &|_| {})?;
        let text = ws.read_lossy(&log);
        let printed = text.split_once('\n').map_or("", |(_, rest)| rest);
        let saw = match &finished.ending {
            Ending::Exited(status) if status.success() && printed.lines().any(|l| l.trim_end() == content) => {
                return Ok(());
            }
            Ending::Exited(status) if status.success() => "printed something else than the marker".to_string(),
            Ending::Exited(status) => format!("failed ({})", describe_status(*status)),
            Ending::TimedOut { .. } => format!("did not answer within {}s", LIMIT.as_secs()),
            Ending::SupervisorLost { why } => format!("ended unknown: {why}"),
            Ending::Interrupted { .. } => {
                return Err(Error::new(format!("the run was interrupted while checking node {}", node.name)));
            }
        };
        Err(Error::new(format!(
            "shared filesystem check: node {} does not see the workspace {}: reading the marker {} there with \
         `{display}` {saw}; it printed:\n{}\n(log: {}). Every node must see the workspace at the same path \
         (each rank writes its profiles there): put it on a filesystem all nodes mount (CCL_COV_WORKSPACE)",
            node.name,
            ws.root().display(),
            marker.display(),
            indent_tail(printed, crate::exec::process::TAIL_LINES),
            log.display()
        )))
    }
}

/// 16 random bytes as hex, so no stale or foreign file can pass for the marker.
fn random_hex() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for the shared filesystem check")?;
    Ok(workspace::files::hex(&bytes))
}
