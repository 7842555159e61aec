//! Raw profiles and merging them.
//!
//! Each trial's raw profiles are merged into `profiles/<trial>.profdata` as
//! soon as the trial ends (while the next trial runs) and the raw files are
//! removed, so a suite that writes thousands of profiles never holds more
//! than about one trial's raw files and the report merges one small indexed
//! profile per trial. `llvm-profdata merge -sparse` reads its inputs from a
//! list file, never from argv.
//!
//! A truncated or garbled raw profile (a rank killed while writing) fails a
//! whole default merge. Instead of losing the trial, the inputs are checked
//! one by one, the bad ones move to `quarantine/<trial>/`, and the rest merge.

use crate::bail;
use crate::error::{Error, Result};
use crate::process::Cmd;
use crate::toolchain::Toolchain;
use crate::workspace::{self, Area, Workspace};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A raw profile llvm-profdata could not read, and where it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    pub file: PathBuf,
    pub reason: String,
}

/// What merging one trial's raw profiles did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialMerge {
    /// `profiles/<trial>.profdata`, unless no raw profile was usable.
    pub profdata: Option<PathBuf>,
    pub merged: usize,
    pub quarantined: Vec<Quarantined>,
    pub seconds: f64,
    /// SHA-256 of the merged profile as written, checked before a report uses it.
    #[serde(default)]
    pub sha256: Option<String>,
}

/// The raw `.profraw` files directly in `dir`, sorted: the host's
/// (`<pattern>`) and the device's, which the host collector names
/// `<target>.<pattern>` with the target ID's colons
/// (`amdgcn-amd-amdhsa.gfx942:xnack-.0.<pattern>`).
pub fn raw_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "profraw") && path.is_file() {
                    files.push(path);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::new(format!("cannot list {}: {e}", dir.display()))),
    }
    files.sort();
    Ok(files)
}

/// The profile of one trial in the workspace: its merged profile if it has
/// one, else its raw files.
pub fn trial_inputs(ws: &Workspace, slug: &str) -> Result<Vec<PathBuf>> {
    let merged = trial_profdata(ws, slug);
    if merged.is_file() {
        return Ok(vec![merged]);
    }
    raw_files(&ws.trial_profiles(slug))
}

pub fn trial_profdata(ws: &Workspace, slug: &str) -> PathBuf {
    ws.area(Area::Profiles).join(format!("{slug}.profdata"))
}

/// What a finished trial's profiles came to.
#[derive(Debug, Clone, Default)]
pub struct MergeOutcome {
    /// The trial's raw-profile folder.
    pub dir: PathBuf,
    /// Raw profiles the trial left.
    pub raw: usize,
    /// Its incremental merge, when it ran.
    pub merge: Option<TrialMerge>,
    pub error: Option<String>,
    /// Checksums of the raw profiles left unmerged, by file name.
    pub raw_sha256: BTreeMap<String, String>,
}

impl MergeOutcome {
    /// `path (why)` of each raw profile set aside as unreadable.
    pub fn quarantined(&self) -> Vec<String> {
        self.merge
            .iter()
            .flat_map(|m| m.quarantined.iter().map(|q| format!("{} ({})", q.file.display(), q.reason)))
            .collect()
    }
}

/// Counts a finished trial's raw profiles and, under coverage, merges them
/// (`incremental`) and records checksums of what is left raw, so the report
/// can tell that nothing was altered.
pub fn finish_trial(
    ws: &Workspace,
    toolchain: &Toolchain,
    slug: &str,
    incremental: bool,
    keep_raw: bool,
) -> MergeOutcome {
    let dir = ws.trial_profiles(slug);
    let raw = raw_files(&dir).map(|f| f.len()).unwrap_or(0);
    let mut outcome = MergeOutcome { dir: dir.clone(), raw, ..MergeOutcome::default() };
    if incremental && raw > 0 {
        match merge_trial(ws, toolchain, slug, keep_raw) {
            Ok(m) => outcome.merge = Some(m),
            Err(e) => outcome.error = Some(e.to_string()),
        }
    }
    match raw_checksums(&dir) {
        Ok(sums) => outcome.raw_sha256 = sums,
        Err(e) => outcome.error = Some(e.to_string()),
    }
    outcome
}

/// SHA-256 of each raw profile left in `dir`, by file name.
pub fn raw_checksums(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut sums = BTreeMap::new();
    for file in raw_files(dir)? {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        sums.insert(name, workspace::sha256_file(&file)?);
    }
    Ok(sums)
}

/// The profiles a report may use, after checking each against the checksum
/// its trial recorded.
#[derive(Debug, Default)]
pub struct Verified {
    pub inputs: Vec<PathBuf>,
    /// Altered (or never recorded) profiles, moved to quarantine.
    pub quarantined: Vec<Quarantined>,
    /// Profiles a trial recorded that are no longer there.
    pub missing: Vec<String>,
}

/// What a trial recorded about the profiles it stored.
#[derive(Debug, Clone, Copy)]
pub struct Recorded<'a> {
    pub trial: &'a str,
    pub slug: &'a str,
    /// Set when the trial merged its profiles: the merged profile's checksum.
    pub merge: Option<&'a TrialMerge>,
    /// Checksums of the raw profiles it left unmerged, by file name.
    pub raw_sha256: &'a BTreeMap<String, String>,
}

/// Every profile input of `trials`, checked: a profile whose content differs
/// from what its trial recorded (or that no trial recorded) moves to
/// `quarantine/<trial>/` and is named; a recorded one that is gone is listed
/// as missing.
pub fn verified_inputs(ws: &Workspace, trials: &[Recorded]) -> Result<Verified> {
    let mut verified = Verified::default();
    for result in trials {
        let slug = result.slug;
        let merged = trial_profdata(ws, slug);
        let recorded_merge = result.merge.filter(|m| m.profdata.is_some());
        let checks: Vec<(PathBuf, Option<&String>)> = if merged.is_file() {
            vec![(merged.clone(), recorded_merge.and_then(|m| m.sha256.as_ref()))]
        } else {
            if recorded_merge.is_some() {
                verified.missing.push(format!("{}: its merged profile {} is gone", result.trial, merged.display()));
            }
            let raw = raw_files(&ws.trial_profiles(slug))?;
            if raw.is_empty() && recorded_merge.is_none() && !result.raw_sha256.is_empty() {
                verified.missing.push(format!(
                    "{}: its {} raw profiles in {} are gone",
                    result.trial,
                    result.raw_sha256.len(),
                    ws.trial_profiles(slug).display()
                ));
            }
            raw.into_iter()
                .map(|f| {
                    let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    (f, result.raw_sha256.get(&name))
                })
                .collect()
        };
        for (file, recorded) in checks {
            let actual = workspace::sha256_file(&file)?;
            let why = match recorded {
                Some(sum) if *sum == actual => {
                    verified.inputs.push(file);
                    continue;
                }
                Some(sum) => format!("altered after its trial wrote it (sha256 recorded {sum}, now {actual})"),
                None => format!("not recorded by trial {} (no checksum), so not trusted", result.trial),
            };
            let dir = ws.trial_quarantine(slug);
            workspace::create_dir(&dir)?;
            let to = quarantine_path(&dir, &file);
            ws.rename(&file, &to)?;
            verified.quarantined.push(Quarantined { file: to, reason: why });
        }
    }
    Ok(verified)
}

/// Where `file` goes in the quarantine folder `dir`: under its portable
/// name, because quarantine is what gets uploaded and inspected elsewhere.
fn quarantine_path(dir: &Path, file: &Path) -> PathBuf {
    dir.join(workspace::portable_name(&file.file_name().expect("a file").to_string_lossy()))
}

/// Merges a finished trial's raw profiles into `profiles/<trial>.profdata`,
/// quarantining unreadable ones; removes the raw files unless `keep_raw`.
pub fn merge_trial(ws: &Workspace, toolchain: &Toolchain, slug: &str, keep_raw: bool) -> Result<TrialMerge> {
    let started = Instant::now();
    let raw = raw_files(&ws.trial_profiles(slug))?;
    let output = trial_profdata(ws, slug);
    let list = ws.trial_profiles(slug).join("inputs.list");
    let quarantine_dir = ws.trial_quarantine(slug);
    let (merged, quarantined) = merge_checked(ws, toolchain, &raw, &list, &output, &|_| quarantine_dir.clone())?;
    ws.remove(Area::Profiles, &list)?;
    if !keep_raw && merged > 0 {
        for file in &raw {
            if file.exists() {
                ws.remove(Area::Profiles, file)?;
            }
        }
    }
    let sha256 = if merged > 0 { Some(workspace::sha256_file(&output)?) } else { None };
    Ok(TrialMerge {
        profdata: (merged > 0).then_some(output),
        merged,
        quarantined,
        seconds: started.elapsed().as_secs_f64(),
        sha256,
    })
}

/// Merges `inputs` into `output`. If llvm-profdata refuses the set, every
/// input is checked on its own; unreadable raw profiles move to the folder
/// `quarantine_for(input)` names, and the rest merge. Returns how many inputs
/// were merged and what was quarantined.
pub fn merge_checked(
    ws: &Workspace,
    toolchain: &Toolchain,
    inputs: &[PathBuf],
    list_file: &Path,
    output: &Path,
    quarantine_for: &dyn Fn(&Path) -> PathBuf,
) -> Result<(usize, Vec<Quarantined>)> {
    if inputs.is_empty() {
        return Ok((0, Vec::new()));
    }
    let first = merge(toolchain, inputs, list_file, output);
    if first.is_ok() {
        return Ok((inputs.len(), Vec::new()));
    }
    let mut good = Vec::new();
    let mut quarantined = Vec::new();
    for input in inputs {
        match check(toolchain, input) {
            Ok(()) => good.push(input.clone()),
            Err(why) if input.extension().is_some_and(|e| e == "profraw") => {
                let dir = quarantine_for(input);
                workspace::create_dir(&dir)?;
                let to = quarantine_path(&dir, input);
                ws.rename(input, &to)?;
                quarantined.push(Quarantined { file: to, reason: why });
            }
            // A bad indexed profile is one of ours: a bug, not bad data.
            Err(why) => bail!("the merged profile {} is unreadable: {why}", input.display()),
        }
    }
    if good.is_empty() {
        return Ok((0, quarantined));
    }
    merge(toolchain, &good, list_file, output)
        .map_err(|e| e.context(format!("merging the {} readable profiles", good.len())))?;
    Ok((good.len(), quarantined))
}

/// Whether llvm-profdata can read `input` on its own.
fn check(toolchain: &Toolchain, input: &Path) -> std::result::Result<(), String> {
    Cmd::new(&toolchain.llvm_profdata.path)
        .args(["merge", "-sparse", "-o", "/dev/null"])
        .arg(input)
        .read()
        .map(drop)
        .map_err(|e| {
            let text = e.to_string();
            text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(&text).trim().to_string()
        })
}

/// Merges `inputs` into the indexed profile `output`.
pub fn merge(toolchain: &Toolchain, inputs: &[PathBuf], list_file: &Path, output: &Path) -> Result<()> {
    let list: String = inputs.iter().map(|p| format!("{}\n", p.display())).collect();
    workspace::write_atomic(list_file, list.as_bytes())?;
    Cmd::new(&toolchain.llvm_profdata.path)
        .args(["merge", "-sparse"])
        .arg(format!("--input-files={}", list_file.display()))
        .arg("-o")
        .arg(output)
        .env_remove(crate::env_names::PROFILE_INIT_ONCE)
        .read()
        .map(drop)
}
