//! Reading `results/`: the records of one build's planned trials, each
//! trusted only as the record its file name says, and those left out, named.

use super::record::TrialResult;
use crate::bail;
use crate::error::{Context, Error, Result};
use crate::workspace::{self, Workspace};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The trials of the config's plan, by name, with their file names.
pub(crate) type Planned = std::collections::BTreeMap<String, String>;

/// Records parsed by an earlier rebuild of `run.json`, by file name, with
/// what the file was then: a rebuild while the trials run parses only the
/// records written since, so its cost does not grow with every record
/// parsed again (issue #35). The last rebuild of a run reads everything.
#[derive(Default)]
pub(super) struct ParsedRecords(HashMap<String, (Stamp, TrialResult)>);

/// A file's identity and last change, as `fstat` gives them.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// The record in `path` (a regular file of the workspace), parsed, or from
/// `cache` when the file is what it was when it was parsed there.
fn read_record(ws: &Workspace, path: &Path, name: &str, cache: Option<&mut ParsedRecords>) -> Result<TrialResult> {
    let Some(cache) = cache else {
        let bytes = ws.read_opt(path)?.ok_or_else(|| Error::new("it vanished while it was read"))?;
        return Ok(serde_json::from_slice::<TrialResult>(&bytes)?);
    };
    let mut file = ws.open_read(path)?;
    let stamp = Stamp::of(&file.metadata().with_context(|| format!("cannot stat {}", path.display()))?);
    if let Some((seen, result)) = cache.0.get(name)
        && *seen == stamp
    {
        return Ok(result.clone());
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    let result = serde_json::from_slice::<TrialResult>(&bytes)?;
    cache.0.insert(name.to_string(), (stamp, result.clone()));
    Ok(result)
}

/// What `results/` holds for one build.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The records of this build's planned trials, by trial name.
    pub(crate) results: Vec<TrialResult>,
    /// Records that cannot be read as a trial's result, or are not the
    /// record their file name says, and why: a damaged record must be
    /// named, not skipped.
    pub(crate) damaged: Vec<(PathBuf, String)>,
    /// Records of another build, with its id: never counted. A build change
    /// deletes them (`cache::adopt`); one found anyway is named.
    pub(crate) other_builds: Vec<(PathBuf, String)>,
    /// Records of trials the config does not plan, with the trial they name:
    /// never counted, and named where they came from elsewhere (a shard).
    pub(crate) unplanned: Vec<(PathBuf, String)>,
}

/// The trial results in the workspace recorded for build `build_id`, of the
/// trials named in `planned` (results of trials the config no longer has are
/// left out), with the records it leaves out and why. Each entry is
/// read only if it is a regular file (through the workspace's handle, so a
/// FIFO cannot hang the read nor a link lead elsewhere), and trusted only as
/// the record of the trial its file name says: a copy of `one.json` saved as
/// `two.json` would count `one` twice.
pub(crate) fn load_checked(ws: &Workspace, build_id: &str, planned: &Planned) -> Result<Loaded> {
    load_checked_with(ws, build_id, planned, None)
}

pub(super) fn load_checked_with(
    ws: &Workspace,
    build_id: &str,
    planned: &Planned,
    mut cache: Option<&mut ParsedRecords>,
) -> Result<Loaded> {
    let dir = ws.results_dir();
    let mut results = Vec::new();
    let mut damaged = Vec::new();
    let mut other_builds = Vec::new();
    let mut unplanned = Vec::new();
    for (name, kind) in ws.list(&dir)? {
        let name = name.to_string_lossy().into_owned();
        let path = dir.join(&name);
        let json = Path::new(&name).extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        // A name with a leading dot is no trial's (`check_slug`): a write in progress.
        if !json || name == "run.json" || name.starts_with('.') {
            continue;
        }
        let stem = &name[..name.len() - ".json".len()];
        let parsed = match kind {
            workspace::confined::EntryKind::File => read_record(ws, &path, &name, cache.as_deref_mut()),
            other => Err(Error::new(format!("it is {}, not a regular file", other.describe()))),
        };
        match parsed.and_then(|result| trusted_as(result, stem, planned)) {
            Ok(result) if result.build_id != build_id => other_builds.push((path, result.build_id)),
            Ok(result) if planned.contains_key(&result.trial) => results.push(result),
            Ok(result) => unplanned.push((path, result.trial)),
            Err(why) => damaged.push((path, why.to_string())),
        }
    }
    results.sort_by(|a, b| a.trial.cmp(&b.trial));
    damaged.sort();
    other_builds.sort();
    unplanned.sort();
    Ok(Loaded { results, damaged, other_builds, unplanned })
}

/// `result`, read from `<stem>.json`, if it is that file's record: its slug
/// is the file's name and, for a trial of the plan, the plan's slug for it.
fn trusted_as(result: TrialResult, stem: &str, planned: &Planned) -> Result<TrialResult> {
    if result.slug != stem {
        bail!(
            "it is the record of trial {} (results/{}.json), not of {stem}: a copied or moved record is not trusted",
            result.trial,
            result.slug
        );
    }
    match planned.get(&result.trial) {
        Some(slug) if *slug != result.slug => Err(Error::new(format!(
            "it names trial {}, whose record is results/{slug}.json, not {stem}.json: not trusted",
            result.trial
        ))),
        _ => Ok(result),
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::samples::{trial, trial_name};
    use super::*;
    use crate::verdict::Status;

    fn planned() -> Planned {
        (0..100).map(|i| (trial_name(i), format!("T.{i}"))).collect()
    }

    #[test]
    fn a_rebuild_parses_only_the_records_that_changed_since_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        let planned = planned();
        for i in 0..3 {
            trial(i).write(&ws).unwrap();
        }
        let mut cache = ParsedRecords::default();
        let first = load_checked_with(&ws, "b1", &planned, Some(&mut cache)).unwrap();
        assert_eq!((first.results.len(), cache.0.len()), (3, 3));
        // A record written again is read again; the others come from the cache.
        let failed = TrialResult { status: Status::Failed, reason: "again".into(), ..trial(1) };
        failed.write(&ws).unwrap();
        let kept = cache.0["T.0.json"].0;
        let second = load_checked_with(&ws, "b1", &planned, Some(&mut cache)).unwrap();
        assert_eq!(
            second.results.iter().map(|r| r.status).collect::<Vec<_>>(),
            [Status::Passed, Status::Failed, Status::Passed]
        );
        assert!(cache.0["T.0.json"].0 == kept);
        // A record that is no longer one is named as damaged, cache or not.
        std::fs::write(ws.trial_result("T.2"), "{").unwrap();
        let third = load_checked_with(&ws, "b1", &planned, Some(&mut cache)).unwrap();
        assert_eq!((third.results.len(), third.damaged.len()), (2, 1));
    }
}
