//! The nodes a run may use, and whether a trial fits in them. They come from
//! a hostfile (`CCL_COV_HOSTFILE`: Open MPI's `host slots=N` or Hydra's
//! `host:N` lines), else from the Slurm allocation the harness runs in
//! (`scontrol show hostnames "$SLURM_JOB_NODELIST"`, slots from
//! `SLURM_TASKS_PER_NODE`), else there is none: the local machine, bounded by
//! the config's `capacity`. A launched trial (mpirun, srun) that needs more
//! nodes or ranks than the allocation has is ignored with the reason, never
//! started (srun would queue it, or fail it with `--immediate`).

use crate::bail;
use crate::error::{Error, Result};
use crate::process::Cmd;
use std::path::Path;

/// The hostfile variable.
pub const HOSTFILE: &str = "CCL_COV_HOSTFILE";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// Ranks it may run.
    pub slots: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Where the nodes came from, for messages: `CCL_COV_HOSTFILE=/h`,
    /// `the Slurm allocation (job 12)`.
    pub source: String,
    pub nodes: Vec<Node>,
}

impl Allocation {
    /// From `env` (the process environment in the harness): the hostfile,
    /// else the Slurm allocation, else `None`.
    pub fn detect(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Allocation>> {
        if let Some(path) = env(HOSTFILE).filter(|p| !p.is_empty()) {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Error::new(format!("{HOSTFILE}={path}: cannot read the hostfile: {e}")))?;
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
        let nodes = names.into_iter().zip(per_node).map(|(name, slots)| Node { name, slots }).collect();
        Ok(Some(Allocation { source: format!("the Slurm allocation (job {job})"), nodes }))
    }

    /// Why a trial of `ranks` ranks over `nodes` nodes cannot run here, or
    /// `None` when it fits.
    pub fn misfit(&self, nodes: usize, ranks: usize) -> Option<String> {
        let names = self.nodes.iter().map(|n| format!("{}:{}", n.name, n.slots)).collect::<Vec<_>>().join(", ");
        if nodes > self.nodes.len() {
            return Some(format!("needs {nodes} nodes but {} has {} ({names})", self.source, self.nodes.len()));
        }
        let mut slots: Vec<usize> = self.nodes.iter().map(|n| n.slots).collect();
        slots.sort_unstable_by(|a, b| b.cmp(a));
        let best: usize = slots.iter().take(nodes).sum();
        (ranks > best).then(|| {
            format!("needs {ranks} ranks on {nodes} node(s) but {} has {best} slots there ({names})", self.source)
        })
    }
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
        nodes.push(Node { name: name.to_string(), slots: slots.unwrap_or(1) });
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
        assert_eq!(a.misfit(2, 6), None);
        assert_eq!(a.misfit(1, 4), None);
        let nodes = a.misfit(3, 2).unwrap();
        assert_eq!(nodes, "needs 3 nodes but CCL_COV_HOSTFILE=/h has 2 (n1:4, n2:2)");
        let ranks = a.misfit(1, 5).unwrap();
        assert!(ranks.starts_with("needs 5 ranks on 1 node(s) but CCL_COV_HOSTFILE=/h has 4 slots there"), "{ranks}");
    }

    #[test]
    fn no_hostfile_and_no_allocation_means_the_local_machine() {
        assert_eq!(Allocation::detect(&|_| None).unwrap(), None);
        let err = Allocation::detect(&|k| (k == HOSTFILE).then(|| "/nonexistent/hosts".into())).unwrap_err();
        assert!(err.to_string().starts_with("CCL_COV_HOSTFILE=/nonexistent/hosts: cannot read"), "{err}");
    }
}
