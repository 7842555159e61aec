//! `ccl-coverage report --merge-from DIR…`: the workspaces of the shards of
//! one partitioned run (`--partition`), brought into this workspace so that
//! one report covers them all. Every shard must hold the same build (its
//! `build.json`'s key), else the merge is refused naming each shard's. A
//! shard is read-only, untrusted input: read through a handle on its folder
//! (no link followed, regular files only), its records trusted only under
//! their own file names and for this config's planned trials, and each
//! profile copied only if its checksum is the one its trial recorded. A
//! trial is counted once: the first workspace that holds it keeps it (this
//! workspace's own records first, then the shards in the order given), and
//! one found in two is named.

use crate::bail;
use crate::build::cache::BuildManifest;
use crate::context::Context;
use crate::coverage::{profiles, trial_lines};
use crate::error::{Context as _, Result};
use crate::results::{self, TrialResult};
use crate::workspace::{Area, Workspace};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a merge did, as `shards.json` records it.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Merged {
    pub(crate) build_id: String,
    /// Each workspace merged, in order, with the trials taken from it.
    pub(crate) shards: Vec<Shard>,
    /// Trials found in more than one workspace: counted from the first.
    pub(crate) duplicates: Vec<Duplicate>,
    /// Trials left out, and why: an altered profile, a damaged record.
    pub(crate) refused: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Shard {
    pub(crate) dir: PathBuf,
    pub(crate) trials: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Duplicate {
    pub(crate) trial: String,
    pub(crate) counted_from: PathBuf,
    pub(crate) also_in: PathBuf,
}

/// Merges the workspaces `dirs` into `ctx`'s (held by the caller's lock).
pub(crate) fn merge(ctx: &Context, dirs: &[PathBuf]) -> Result<Merged> {
    let target = &ctx.workspace;
    let config = ctx.config();
    let mut shards = Vec::new();
    for dir in dirs {
        let shard = Workspace::new(dir)?;
        if crate::workspace::normalize(&canonical(shard.root()))
            == crate::workspace::normalize(&canonical(target.root()))
        {
            bail!("--merge-from {}: that is the workspace being merged into", dir.display());
        }
        shard
            .check_marked(&config.name)
            .with_context(|| format!("--merge-from {}: not a shard of config {}", dir.display(), config.name))?;
        let manifest = read_manifest(&shard)?.ok_or_else(|| {
            crate::error::Error::new(format!(
                "--merge-from {}: it has no build.json: no trial ran there",
                dir.display()
            ))
        })?;
        shards.push((shard, manifest));
    }
    // This workspace's own trials count too, when it has any.
    let own = read_manifest(target)?;
    let builds: Vec<(PathBuf, &str)> = own
        .iter()
        .map(|(m, _)| (target.root().to_path_buf(), m.build_id.as_str()))
        .chain(shards.iter().map(|(ws, (m, _))| (ws.root().to_path_buf(), m.build_id.as_str())))
        .collect();
    let build_id = builds[0].1.to_string();
    if builds.iter().any(|(_, id)| *id != build_id) {
        let each: Vec<String> = builds.iter().map(|(dir, id)| format!("{}: build {id}", dir.display())).collect();
        bail!(
            "the shards hold different builds, so their coverage cannot be merged (every shard must run the same build of the same sources and commands):\n  {}",
            each.join("\n  ")
        );
    }
    if own.is_none() {
        let manifest = cached_manifest(ctx, &build_id)?;
        let text = serde_json::to_string_pretty(&manifest).expect("manifest serializes");
        target.write(&target.build_manifest(), text.as_bytes())?;
    }

    let planned = crate::plan::names(config);
    let mut merged = Merged { build_id: build_id.clone(), ..Merged::default() };
    let mut counted: BTreeMap<String, PathBuf> = BTreeMap::new();
    if own.is_some() {
        let loaded = results::load_checked(target, &build_id, &planned)?;
        let trials: Vec<String> = loaded.results.iter().map(|r| r.trial.clone()).collect();
        for trial in &trials {
            counted.insert(trial.clone(), target.root().to_path_buf());
        }
        merged.shards.push(Shard { dir: target.root().to_path_buf(), trials });
    }
    for (shard, _) in &shards {
        let loaded = results::load_checked(shard, &build_id, &planned)?;
        for (path, why) in &loaded.damaged {
            merged.refused.push(format!("{}: {why}", path.display()));
        }
        for (path, id) in &loaded.other_builds {
            merged.refused.push(format!("{}: it is a record of build {id}, not of {build_id}", path.display()));
        }
        for (path, trial) in &loaded.unplanned {
            merged.refused.push(format!(
                "{}: it is a record of trial {trial}, which config {} does not plan",
                path.display(),
                config.name
            ));
        }
        let mut taken = Vec::new();
        for result in &loaded.results {
            if let Some(first) = counted.get(&result.trial) {
                merged.duplicates.push(Duplicate {
                    trial: result.trial.clone(),
                    counted_from: first.clone(),
                    also_in: shard.root().to_path_buf(),
                });
                continue;
            }
            match import(shard, target, result) {
                Ok(()) => {
                    counted.insert(result.trial.clone(), shard.root().to_path_buf());
                    taken.push(result.trial.clone());
                }
                Err(e) => merged.refused.push(format!("{} from {}: {e}", result.trial, shard.root().display())),
            }
        }
        merged.shards.push(Shard { dir: shard.root().to_path_buf(), trials: taken });
    }
    let text = serde_json::to_string_pretty(&merged).expect("the merge serializes");
    target.write(&target.root().join(SHARDS_FILE), text.as_bytes())?;
    Ok(merged)
}

/// Where the last merge is recorded, at the top of the workspace.
pub(crate) const SHARDS_FILE: &str = "shards.json";

/// Build `build_id`'s manifest as this machine's build cache holds it: a
/// shard's `build.json` only says which build the shard ran, and is never
/// the source of programs, paths or options (the report runs what its
/// manifest names).
fn cached_manifest(ctx: &Context, build_id: &str) -> Result<BuildManifest> {
    if build_id.is_empty() || !build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("the shards' build.json names build {build_id:?}: a build id is hexadecimal digits; refused");
    }
    let path = ctx.state_dir.join("builds").join(build_id).join("build.json");
    let manifest = BuildManifest::read(&path).map_err(|e| {
        crate::error::Error::new(format!(
            "build {build_id}, which the shards ran, is not in this machine's build cache ({e}): merge where that build is (the same build cache, or CCL_COV_BUILD_DIR); a shard's own build.json is never used"
        ))
    })?;
    if manifest.build_id != build_id {
        bail!("{} records build {}, not {build_id}: refused", path.display(), manifest.build_id);
    }
    Ok(manifest)
}

/// A shard's `build.json`, parsed, with its bytes as read.
fn read_manifest(ws: &Workspace) -> Result<Option<(BuildManifest, Vec<u8>)>> {
    let path = ws.build_manifest();
    let Some(bytes) = ws.read_opt(&path)? else { return Ok(None) };
    let manifest: BuildManifest =
        serde_json::from_slice(&bytes).with_context(|| format!("{} is not a build record", path.display()))?;
    Ok(Some((manifest, bytes)))
}

/// Copies `result`'s record, profiles and log from `shard` into `target`,
/// each profile only if it is the one the trial recorded.
fn import(shard: &Workspace, target: &Workspace, result: &TrialResult) -> Result<()> {
    let slug = &result.slug;
    crate::workspace::check_slug(slug)?;
    let recorded = result.recorded_profiles();
    for name in recorded.raw_sha256.keys() {
        plain_profile_name(name)?;
    }
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    let profdata = profiles::trial_profdata(shard, slug);
    match recorded.merge.and_then(|m| m.sha256.as_deref().filter(|_| m.profdata.is_some())) {
        Some(sha) => files.push((profiles::trial_profdata(target, slug), checked(shard, &profdata, sha)?)),
        None => {
            for (name, sha) in recorded.raw_sha256 {
                let from = shard.trial_profiles(slug).join(name);
                files.push((target.trial_profiles(slug).join(name), checked(shard, &from, sha)?));
            }
        }
    }
    // Its stored lines come too when they are what it recorded; otherwise the
    // report computes them, saying so.
    let lines = recorded
        .merge
        .and_then(|m| m.lines.as_ref())
        .and_then(|stored| checked(shard, &trial_lines::stored_path(shard, slug), &stored.sha256).ok());
    if let Some(bytes) = lines {
        files.push((trial_lines::stored_path(target, slug), bytes));
    }
    let record = shard
        .read_opt(&shard.trial_result(slug))?
        .ok_or_else(|| crate::error::Error::new("its record vanished while it was read"))?;
    // Nothing of an earlier run of the trial may be merged with the shard's.
    target.clear(Area::Profiles, &target.trial_profiles(slug))?;
    target.remove(Area::Profiles, &profiles::trial_profdata(target, slug))?;
    target.remove(Area::Profiles, &trial_lines::stored_path(target, slug))?;
    for (path, bytes) in &files {
        if let Some(dir) = path.parent() {
            target.create_dir(dir)?;
        }
        target.write(path, bytes)?;
    }
    if let Some(log) = shard.read_opt(&shard.trial_log(slug))? {
        target.create_dir(&target.logs_dir())?;
        target.write(&target.trial_log(slug), &log)?;
    }
    target.create_dir(&target.results_dir())?;
    target.write(&target.trial_result(slug), &record)
}

/// Refuses `name`, a raw profile's name from a shard's record, unless it is
/// one plain file name of a raw profile: it becomes a path in this
/// workspace (`../../build.json` replaced the target's build record).
fn plain_profile_name(name: &str) -> Result<()> {
    let plain = !name.starts_with('.')
        && !name.contains('/')
        && !name.chars().any(char::is_control)
        && name.len() <= 255
        && name.ends_with(".profraw");
    if !plain {
        bail!(
            "its record names a raw profile {name:?}, which is not one plain file name of a raw profile (`<name>.profraw`): nothing of it is merged"
        );
    }
    Ok(())
}

/// The bytes of the shard's file `path`, if their SHA-256 is `sha`.
fn checked(shard: &Workspace, path: &Path, sha: &str) -> Result<Vec<u8>> {
    let bytes = shard.read_opt(path)?.ok_or_else(|| crate::error::Error::new(format!("{} is gone", path.display())))?;
    let actual = crate::workspace::files::hex(&Sha256::digest(&bytes));
    if actual != sha {
        bail!(
            "{} is not the profile its trial recorded (SHA-256 {actual}, recorded {sha}): not merged",
            path.display()
        );
    }
    Ok(bytes)
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
