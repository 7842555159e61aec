//! The nodes a run may use, and whether a trial fits in them. They come from
//! a hostfile (`CCL_COV_HOSTFILE`: Open MPI's `host slots=N` or Hydra's
//! `host:N` lines), else from the Slurm allocation the harness runs in
//! (`scontrol show hostnames "$SLURM_JOB_NODELIST"`, slots from
//! `SLURM_TASKS_PER_NODE`), else from the config's `hosts`, else there is
//! none: the local machine, bounded by the config's `capacity`.
//!
//! A node's GPUs come from the config's host of the same name, else (in
//! Slurm) `SLURM_GPUS_PER_NODE` (salloc's `--gpus-per-node`) or
//! `SLURM_GPUS_ON_NODE`; unknown, a node has one GPU slot per rank slot.
//! Ranks are spread evenly: a trial of R ranks on N nodes needs ⌈R/N⌉ rank
//! slots, and as many GPUs times its GPUs per rank, on each of N nodes. A
//! launched trial (mpirun, srun) that needs more than the allocation has is
//! ignored with the reason, never started (srun would queue it, or fail it
//! with `--immediate`).

use crate::bail;
use crate::config::HostConfig;
use crate::env_names::Lookup;
use crate::error::{Context, Error, Result};
use crate::exec::process::Cmd;
use std::path::Path;

/// The hostfile variable.
pub(crate) const HOSTFILE: &str = "CCL_COV_HOSTFILE";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) name: String,
    /// Ranks it may run.
    pub(crate) slots: usize,
    /// Its GPUs, when known.
    pub(crate) gpus: Option<usize>,
}

impl Node {
    /// GPU slots trials share on it: its GPUs, else one per rank slot.
    pub(crate) fn gpu_slots(&self) -> usize {
        self.gpus.unwrap_or(self.slots)
    }
}

/// What a trial asks of the nodes it runs on: `nodes` nodes with `ranks`
/// rank slots and `gpus` GPU slots each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub(crate) nodes: usize,
    /// Ranks per node.
    pub(crate) ranks: usize,
    /// GPU slots per node.
    pub(crate) gpus: usize,
}

impl Want {
    /// `ranks` ranks spread evenly over `nodes` nodes, each rank holding
    /// `gpus_per_rank` GPUs (at least one slot: a rank without GPUs still
    /// counts against `capacity`, as on one machine).
    pub fn spread(ranks: usize, nodes: usize, gpus_per_rank: usize) -> Want {
        let nodes = nodes.max(1);
        let per_node = ranks.div_ceil(nodes);
        Want { nodes, ranks: per_node, gpus: per_node.saturating_mul(gpus_per_rank.max(1)) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Allocation {
    /// Where the nodes came from, for messages: `CCL_COV_HOSTFILE=/h`,
    /// `the Slurm allocation (job 12)`.
    pub(crate) source: String,
    pub(crate) nodes: Vec<Node>,
}

impl Allocation {
    /// From `env` (the process environment in the harness): the hostfile,
    /// else the Slurm allocation, else the config's `hosts` (of the config
    /// at `config`), else `None`. GPU counts as the module says.
    pub(crate) fn detect(env: Lookup<'_>, hosts: &[HostConfig], config: &Path) -> Result<Option<Allocation>> {
        let found = match Self::from_env(env)? {
            Some(found) => found,
            None if hosts.is_empty() => return Ok(None),
            None => Allocation {
                source: format!("the config's hosts ({})", config.display()),
                nodes: hosts.iter().map(|h| Node { name: h.name.to_string(), slots: h.slots, gpus: h.gpus }).collect(),
            },
        };
        let slurm_gpus = match env("SLURM_JOB_NODELIST").filter(|l| !l.is_empty()) {
            Some(_) => slurm_gpus(env)?,
            None => None,
        };
        let nodes = found
            .nodes
            .into_iter()
            .map(|n| {
                let named = hosts.iter().find(|h| h.name.as_str() == n.name).and_then(|h| h.gpus);
                Node { gpus: n.gpus.or(named).or(slurm_gpus), ..n }
            })
            .collect();
        Ok(Some(Allocation { nodes, ..found }))
    }

    /// The hostfile, else the Slurm allocation, as they name the nodes.
    fn from_env(env: Lookup<'_>) -> Result<Option<Allocation>> {
        if let Some(path) = env(HOSTFILE).filter(|p| !p.is_empty()) {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("{HOSTFILE}={path}: cannot read the hostfile"))?;
            return parse_hostfile(Path::new(&path), &text).map(Some);
        }
        let Some(list) = env("SLURM_JOB_NODELIST").filter(|l| !l.is_empty()) else { return Ok(None) };
        let names: Vec<String> = Cmd::new("scontrol")
            .args(["show", "hostnames", &list])
            .read()?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        let job = env("SLURM_JOB_ID").unwrap_or_else(|| "?".into());
        let per_node = match env("SLURM_TASKS_PER_NODE").or_else(|| env("SLURM_JOB_CPUS_PER_NODE")) {
            Some(spec) => expand_counts(&spec).ok_or_else(|| {
                Error::new(format!(
                    "SLURM_TASKS_PER_NODE={spec:?} is not a Slurm count list such as \"4\" or \"2(x3),1\""
                ))
            })?,
            None => vec![1; names.len()],
        };
        if per_node.len() != names.len() {
            bail!(
                "the Slurm allocation (job {job}) names {} nodes ({list}) but {} task counts (SLURM_TASKS_PER_NODE)",
                names.len(),
                per_node.len()
            );
        }
        let nodes = names.into_iter().zip(per_node).map(|(name, slots)| Node { name, slots, gpus: None }).collect();
        Ok(Some(Allocation { source: format!("the Slurm allocation (job {job})"), nodes }))
    }

    /// Why a trial of `ranks` ranks over `nodes` nodes, each rank holding
    /// `gpus_per_rank` GPUs, cannot run here, or `None` when it fits.
    pub(crate) fn misfit(&self, nodes: usize, ranks: usize, gpus_per_rank: usize) -> Option<String> {
        let names = self
            .nodes
            .iter()
            .map(|n| match n.gpus {
                Some(g) => format!("{}:{} ({g} GPUs)", n.name, n.slots),
                None => format!("{}:{}", n.name, n.slots),
            })
            .collect::<Vec<_>>()
            .join(", ");
        if nodes > self.nodes.len() {
            return Some(format!("needs {nodes} nodes but {} has {} ({names})", self.source, self.nodes.len()));
        }
        let want = Want::spread(ranks, nodes, gpus_per_rank);
        let roomy = self.nodes.iter().filter(|n| n.slots >= want.ranks).count();
        if roomy < want.nodes {
            let best = self.nodes.iter().map(|n| n.slots).max().unwrap_or(0);
            return Some(if nodes == 1 {
                format!("needs {ranks} ranks on 1 node(s) but {} has {best} slots there ({names})", self.source)
            } else {
                format!(
                    "needs {ranks} ranks on {nodes} node(s), {} on each, but {} has {roomy} node(s) with that many slots ({names})",
                    want.ranks, self.source
                )
            });
        }
        let with_gpus = self.nodes.iter().filter(|n| n.slots >= want.ranks && n.gpu_slots() >= want.gpus).count();
        (with_gpus < want.nodes).then(|| {
            format!(
                "needs {} GPUs on each of {nodes} node(s) ({} rank(s) there × {} GPU(s) each) but {} has {with_gpus} such node(s) ({names})",
                want.gpus,
                want.ranks,
                gpus_per_rank.max(1),
                self.source
            )
        })
    }
}

/// The GPUs per node of a Slurm job: `SLURM_GPUS_PER_NODE` (`8` or
/// `h100:8`, from `--gpus-per-node`), else `SLURM_GPUS_ON_NODE`; `None`
/// when the job asked for none.
fn slurm_gpus(env: Lookup<'_>) -> Result<Option<usize>> {
    for var in ["SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"] {
        let Some(spec) = env(var).filter(|v| !v.is_empty()) else { continue };
        let count = spec.rsplit(':').next().unwrap_or_default();
        match count.trim().parse::<usize>() {
            Ok(n) if n > 0 => return Ok(Some(n)),
            Ok(_) => return Ok(None),
            Err(_) => bail!("{var}={spec:?} is not a GPU count such as \"8\" or \"h100:8\""),
        }
    }
    Ok(None)
}

/// `host`, `host slots=N` (Open MPI) or `host:N` (Hydra); `#` comments.
fn parse_hostfile(path: &Path, text: &str) -> Result<Allocation> {
    let mut nodes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: &str| {
            Error::new(format!(
                "{}: line {}: {line:?}: {what}; expected `host`, `host slots=N` or `host:N`",
                path.display(),
                i + 1
            ))
        };
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or_default();
        let (name, mut slots) = match first.split_once(':') {
            Some((name, n)) => (name, Some(n.parse::<usize>().map_err(|_| bad("the slot count is not a number"))?)),
            None => (first, None),
        };
        for word in words {
            match word.strip_prefix("slots=") {
                Some(n) => slots = Some(n.parse().map_err(|_| bad("the slot count is not a number"))?),
                // Open MPI's other keys (max_slots=) do not change the count.
                None if word.contains('=') => {}
                None => return Err(bad("unexpected word")),
            }
        }
        if name.is_empty() || slots == Some(0) {
            return Err(bad("a host needs a name and at least one slot"));
        }
        nodes.push(Node { name: name.to_string(), slots: slots.unwrap_or(1), gpus: None });
    }
    if nodes.is_empty() {
        bail!("{}: the hostfile names no host; expected lines such as `node1 slots=4`", path.display());
    }
    Ok(Allocation { source: format!("{HOSTFILE}={}", path.display()), nodes })
}

/// Slurm's count lists: `4`, `2(x3),1` → `[2, 2, 2, 1]`.
fn expand_counts(spec: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((count, rest)) => (count, rest.strip_suffix(')')?.parse().ok()?),
            None => (part, 1),
        };
        let count: usize = count.trim().parse().ok()?;
        out.extend(std::iter::repeat_n(count, times));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_count_lists_expand() {
        assert_eq!(expand_counts("4"), Some(vec![4]));
        assert_eq!(expand_counts("2(x3),1"), Some(vec![2, 2, 2, 1]));
        assert_eq!(expand_counts("2(x"), None);
        assert_eq!(expand_counts(""), None);
    }

    #[test]
    fn hostfiles_of_both_mpis_parse_and_bad_lines_are_named() {
        let a = parse_hostfile(Path::new("/h"), "# cluster\nn1 slots=4 max_slots=8\nn2:2\nn3\n").unwrap();
        let slots: Vec<_> = a.nodes.iter().map(|n| (n.name.as_str(), n.slots)).collect();
        assert_eq!(slots, [("n1", 4), ("n2", 2), ("n3", 1)]);
        let err = parse_hostfile(Path::new("/h"), "n1\nn2 slots=x\n").unwrap_err().to_string();
        assert!(err.starts_with("/h: line 2: \"n2 slots=x\": the slot count is not a number"), "{err}");
        assert!(parse_hostfile(Path::new("/h"), "# none\n").unwrap_err().to_string().contains("names no host"));
    }

    #[test]
    fn a_trial_fits_or_is_told_why_not() {
        let a = parse_hostfile(Path::new("/h"), "n1 slots=4\nn2 slots=2\n").unwrap();
        assert_eq!(a.misfit(2, 4, 0), None);
        assert_eq!(a.misfit(1, 4, 0), None);
        let nodes = a.misfit(3, 2, 0).unwrap();
        assert_eq!(nodes, "needs 3 nodes but CCL_COV_HOSTFILE=/h has 2 (n1:4, n2:2)");
        let ranks = a.misfit(1, 5, 0).unwrap();
        assert!(ranks.starts_with("needs 5 ranks on 1 node(s) but CCL_COV_HOSTFILE=/h has 4 slots there"), "{ranks}");
        // Spread evenly: 6 ranks on 2 nodes is 3 on each, and n2 has 2.
        let uneven = a.misfit(2, 6, 0).unwrap();
        assert!(
            uneven.starts_with("needs 6 ranks on 2 node(s), 3 on each, but CCL_COV_HOSTFILE=/h has 1 node(s)"),
            "{uneven}"
        );
    }

    #[test]
    fn gpus_come_from_the_config_hosts_or_slurm_and_bound_the_trials() {
        let hosts: Vec<HostConfig> = serde_json::from_value(serde_json::json!([
            {"name": "n1", "slots": 4, "gpus": 2}, {"name": "n2", "slots": 4, "gpus": 4}
        ]))
        .unwrap();
        let a = Allocation::detect(&|_| None, &hosts, Path::new("/c.json")).unwrap().unwrap();
        assert_eq!(a.source, "the config's hosts (/c.json)");
        assert_eq!(a.nodes.iter().map(Node::gpu_slots).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(a.misfit(2, 4, 1), None);
        let gpus = a.misfit(2, 4, 2).unwrap();
        assert!(gpus.starts_with("needs 4 GPUs on each of 2 node(s) (2 rank(s) there × 2 GPU(s) each)"), "{gpus}");
        assert!(gpus.contains("n1:4 (2 GPUs), n2:4 (4 GPUs)"), "{gpus}");
        // A hostfile's node takes the GPUs of the config's host of its name.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(&file, "n2 slots=8\nn3 slots=2\n").unwrap();
        let path = file.display().to_string();
        let a = Allocation::detect(&|k| (k == HOSTFILE).then(|| path.clone()), &hosts, Path::new("/c.json"))
            .unwrap()
            .unwrap();
        assert_eq!(a.nodes.iter().map(|n| n.gpus).collect::<Vec<_>>(), [Some(4), None]);
        assert_eq!(a.nodes[1].gpu_slots(), 2, "unknown: one GPU slot per rank slot");
        // Slurm's GPUs per node.
        let env = |k: &str| match k {
            "SLURM_GPUS_PER_NODE" => Some("h100:8".to_string()),
            _ => None,
        };
        assert_eq!(slurm_gpus(&env).unwrap(), Some(8));
        let bad = |k: &str| (k == "SLURM_GPUS_ON_NODE").then(|| "lots".to_string());
        assert!(
            slurm_gpus(&bad).unwrap_err().to_string().starts_with("SLURM_GPUS_ON_NODE=\"lots\" is not a GPU count")
        );
    }

    #[test]
    fn no_hostfile_and_no_allocation_means_the_local_machine() {
        assert_eq!(Allocation::detect(&|_| None, &[], Path::new("/c.json")).unwrap(), None);
        let err = Allocation::detect(&|k| (k == HOSTFILE).then(|| "/nonexistent/hosts".into()), &[], Path::new("/c"))
            .unwrap_err();
        assert!(err.to_string().starts_with("CCL_COV_HOSTFILE=/nonexistent/hosts: cannot read"), "{err}");
    }
}
