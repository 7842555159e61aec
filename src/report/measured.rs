//! What a report measures (issue #47): the library's objects and every
//! other instrumented binary of the build that wrote profiles, the files of
//! theirs it leaves out and why, the binaries that wrote profiles but are no
//! file of the build, and the functions with counts that no measured object
//! maps. Each is said on screen and kept in `meta.json`: nothing that ran is
//! dropped in silence.

use crate::build::cache::{BuildManifest, Measured};
use crate::config::Config;
use crate::coverage::ignore::{LeftOut, Maps, Scope, build_maps, files, program_files};
use crate::coverage::mapping::{self, ObjectMap};
use crate::error::{Error, Result};
use crate::results::TrialResult;
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

/// How many names each list of `meta.json` keeps at most.
const NAMED: usize = 100;

/// One object the report measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MeasuredObject {
    pub(crate) path: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) build_id: Option<String>,
    /// `library.objects`, or a program of the build that wrote profiles.
    pub(crate) why: String,
}

/// A count of things and the first [`NAMED`] of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Named {
    pub(crate) count: usize,
    pub(crate) names: Vec<String>,
}

impl Named {
    fn of(all: impl IntoIterator<Item = String>) -> Named {
        let all: BTreeSet<String> = all.into_iter().collect();
        Named { count: all.len(), names: all.into_iter().take(NAMED).collect() }
    }
}

/// A binary that wrote profiles but that no file of the build has (or that
/// carries no build ID), with what its trials recorded of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Unknown {
    /// `None`: its profiles carry no build ID.
    pub(crate) build_id: Option<String>,
    /// Its functions with counts, over every trial that recorded it
    /// (`None` where no trial's record names it: a profile the report merged).
    pub(crate) functions_with_counts: Option<usize>,
    /// The trials it wrote profiles in.
    pub(crate) trials: Vec<String>,
    #[serde(skip)]
    functions: BTreeSet<String>,
}

/// `meta.json`'s `measured`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Measurement {
    pub(crate) objects: Vec<MeasuredObject>,
    /// Source files of the measured objects left out as the library's test code.
    pub(crate) test_code: Named,
    /// Source files only the build's other programs compile that are not the
    /// library's sources (a test framework's headers), left out.
    pub(crate) not_the_librarys: Named,
    /// Binaries that wrote profiles but that no file of the build has.
    pub(crate) unknown_binaries: Vec<Unknown>,
    /// Functions with counts in the merged profile that no measured object
    /// maps: every total leaves them out.
    pub(crate) dropped_functions: Named,
    /// Where the dropped functions came from, as far as the build tells.
    pub(crate) dropped_from: Vec<String>,
}

/// What one report reads and leaves out.
pub(crate) struct Measure {
    pub(crate) scope: Scope,
    pub(crate) measured: Measured,
    pub(crate) measurement: Measurement,
}

/// What the report over the merged profile `profdata` measures.
pub(crate) fn measure(
    ws: &Workspace,
    config: &Config,
    manifest: &BuildManifest,
    results: &[TrialResult],
    profdata: &Path,
) -> Result<Measure> {
    let bytes = ws
        .read_opt(profdata)?
        .ok_or_else(|| Error::new(format!("cannot read {}: it does not exist", profdata.display())))?;
    let ids = profile_ids(manifest, &bytes, profdata)?;
    let measured = manifest.measured(&ids, config.report.measure_programs);
    let damaged: Vec<String> =
        measured.programs.iter().filter_map(|o| o.sum.as_ref().and_then(|sum| sum.differs(&o.path))).collect();
    if !damaged.is_empty() {
        return Err(Error::new(format!(
            "build {}'s programs that wrote profiles are not what it built, so no report is made from them: {}; build them again (`ccl-coverage clean --builds`, then the run)",
            manifest.build_id,
            damaged.join("; ")
        )));
    }
    let (library, programs) = build_maps(manifest)?;
    let scope = Scope::new(config, manifest, &files(&library), &program_files(config, &programs))?;
    let measured_programs: HashSet<&Path> = measured.programs.iter().map(|o| o.path.as_path()).collect();
    let read: Vec<&(PathBuf, ObjectMap)> =
        library.iter().chain(programs.iter().filter(|(p, _)| measured_programs.contains(p.as_path()))).collect();
    let mut objects: Vec<MeasuredObject> = manifest
        .objects
        .iter()
        .filter(|o| o.instrumentation.is_instrumented())
        .map(|o| MeasuredObject { path: o.path.clone(), build_id: o.build_id.clone(), why: "library.objects".into() })
        .collect();
    objects.extend(measured.programs.iter().map(|o| MeasuredObject {
        path: o.path.clone(),
        build_id: o.build_id.clone(),
        why: "a program of the build that wrote profiles".into(),
    }));
    let measured_files: BTreeSet<&String> = read.iter().flat_map(|(_, m)| &m.files).collect();
    let left = |why: LeftOut| {
        Named::of(measured_files.iter().filter(|f| scope.left_out(f) == Some(why)).map(|f| (*f).clone()))
    };
    // The functions that ran, less what the measured objects (device ones
    // too) map, and less those a measured object instrumented without a
    // mapping (a constructor the compiler made has no source line).
    let device: Maps = manifest
        .llvm_device_objects()
        .into_iter()
        .map(|p| ObjectMap::read(&p).map(|m| (p, m)))
        .collect::<Result<_>>()?;
    let measured_maps: Vec<&ObjectMap> = read.iter().copied().chain(&device).map(|(_, m)| m).collect();
    let mapped: HashSet<(&str, u64)> =
        measured_maps.iter().flat_map(|m| m.keys.iter().map(|(n, h)| (n.as_str(), *h))).collect();
    let unmapped: HashSet<&str> =
        measured_maps.iter().flat_map(|m| m.instrumented.iter().map(String::as_str)).collect();
    let counts = mapping::read_in_process(ws, profdata)?;
    let dropped: BTreeSet<(&str, u64)> = counts
        .ran()
        .filter(|k| !mapped.contains(k))
        .filter(|(name, hash)| mapped_elsewhere(&measured_maps, name, *hash) || !unmapped.contains(name))
        .collect();
    let unknown = unknown_binaries(results, &measured.unknown);
    let mut from: BTreeSet<String> = BTreeSet::new();
    for (name, _) in &dropped {
        let program = programs
            .iter()
            .filter(|(p, _)| !measured_programs.contains(p.as_path()))
            .find(|(_, m)| m.instrumented.contains(*name))
            .map(|(p, _)| format!("{} (not measured: report.measure_programs is false)", p.display()));
        let binary = || {
            unknown.iter().find(|u| u.functions.contains(*name)).map(|u| match &u.build_id {
                Some(id) => format!("the binary {id}, no file of the build"),
                None => format!("a binary without a build ID (in {})", u.trials.join(", ")),
            })
        };
        from.insert(program.or_else(binary).unwrap_or_else(|| {
            "a binary no trial's record names (a profile the report merged, or one of another build)".to_string()
        }));
    }
    // A binary without a build ID is named only for what it ran unmapped:
    // a device's profiles carry none, and their kernels are mapped.
    let unknown: Vec<Unknown> = unknown
        .into_iter()
        .filter(|u| u.build_id.is_some() || u.functions.iter().any(|f| dropped.iter().any(|(n, _)| n == f)))
        .collect();
    let measurement = Measurement {
        objects,
        test_code: left(LeftOut::TestCode),
        not_the_librarys: left(LeftOut::NotTheLibrarys),
        unknown_binaries: unknown,
        dropped_functions: Named::of(dropped.iter().map(|(n, _)| (*n).to_string())),
        dropped_from: from.into_iter().collect(),
    };
    Ok(Measure { scope, measured, measurement })
}

/// The build IDs of the binaries whose profiles the merged profile holds:
/// read in process, or, where that reader does not know the profile's
/// format (a newer LLVM), printed by `llvm-profdata show --binary-ids`.
fn profile_ids(manifest: &BuildManifest, bytes: &[u8], profdata: &Path) -> Result<BTreeSet<String>> {
    let in_process = match mapping::binary_ids(bytes) {
        Ok(ids) => return Ok(ids),
        Err(e) => e,
    };
    let text = crate::exec::process::Cmd::new(&manifest.toolchain.llvm_profdata.path)
        .limits(crate::exec::process::Limits::LLVM_TOOL)
        .args(["show", "--binary-ids"])
        .arg(profdata)
        .read()
        .map_err(|e| {
            Error::new(format!(
                "cannot read the binary IDs of the merged profile {} ({in_process}), nor can llvm-profdata: {e}",
                profdata.display()
            ))
        })?;
    let listed = text.split_once("Binary IDs:").map_or("", |(_, ids)| ids);
    Ok(listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_hexdigit()))
        .map(String::from)
        .collect())
}

/// The binaries the trials recorded as unknown to the build, and the build
/// IDs of the merged profile that no file of the build has (`ids`), each once.
fn unknown_binaries(results: &[TrialResult], ids: &[String]) -> Vec<Unknown> {
    let mut by_id: BTreeMap<Option<String>, Unknown> = BTreeMap::new();
    for r in results {
        for b in r.merge.iter().flat_map(|m| &m.unknown_binaries) {
            let u = by_id.entry(b.build_id.clone()).or_default();
            u.build_id.clone_from(&b.build_id);
            u.trials.push(r.trial.clone());
            u.functions.extend(b.functions.iter().cloned());
            let counted = u.functions_with_counts.unwrap_or(0).max(b.functions_with_counts);
            u.functions_with_counts = Some(counted.max(u.functions.len()));
        }
    }
    for id in ids {
        by_id.entry(Some(id.clone())).or_insert_with(|| Unknown { build_id: Some(id.clone()), ..Unknown::default() });
    }
    by_id.into_values().collect()
}

/// The first few of `names`, and how many more there are: a line of the screen.
fn first(names: &[String]) -> String {
    const SHOWN: usize = 8;
    let shown = names[..names.len().min(SHOWN)].join(", ");
    match names.len().saturating_sub(SHOWN) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Whether a measured object maps `name` under another hash: the profile's
/// record of this hash came from a binary compiled otherwise.
fn mapped_elsewhere(maps: &[&ObjectMap], name: &str, hash: u64) -> bool {
    maps.iter().any(|m| m.keys.iter().any(|(n, h)| n == name && *h != hash))
}

impl Measurement {
    /// The report's opening lines: what it measured and left out, for a person.
    pub(crate) fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let name =
            |p: &Path| p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
        let library: Vec<String> =
            self.objects.iter().filter(|o| o.why == "library.objects").map(|o| name(&o.path)).collect();
        let programs: Vec<String> =
            self.objects.iter().filter(|o| o.why != "library.objects").map(|o| name(&o.path)).collect();
        if !programs.is_empty() || self.test_code.count > 0 || self.not_the_librarys.count > 0 {
            lines.push(format!(
                "measured {} objects: {} (library.objects){}; meta.json names them (measured.objects)",
                self.objects.len(),
                first(&library),
                if programs.is_empty() {
                    String::new()
                } else {
                    format!(", {} (programs that wrote profiles)", first(&programs))
                }
            ));
        }
        let shown = |n: &Named| {
            let first: Vec<&str> = n.names.iter().take(3).map(String::as_str).collect();
            format!("{}{}", first.join(", "), if n.count > first.len() { ", …" } else { "" })
        };
        if self.test_code.count > 0 {
            lines.push(format!(
                "left out {} files as test code (tests.source_dir, report.test_code): {}",
                self.test_code.count,
                shown(&self.test_code)
            ));
        }
        if self.not_the_librarys.count > 0 {
            lines.push(format!(
                "left out {} files that only the build's programs compile and that are not the library's sources: {}",
                self.not_the_librarys.count,
                shown(&self.not_the_librarys)
            ));
        }
        for u in &self.unknown_binaries {
            let ran = match u.functions_with_counts {
                Some(n) => format!("{n} of its functions ran"),
                None => "no trial's record says what it ran".to_string(),
            };
            let trials = if u.trials.is_empty() { String::new() } else { format!(" in {}", u.trials.join(", ")) };
            lines.push(match &u.build_id {
                Some(id) => format!(
                    "warning: a binary with build ID {id} wrote profiles{trials}, but no file of the build has that ID, so none of its code is measured ({ran})"
                ),
                None => format!(
                    "warning: a binary without a build ID wrote profiles{trials}, so what it ran cannot be matched to a file of the build ({ran}); link it with --build-id"
                ),
            });
        }
        if self.dropped_functions.count > 0 {
            lines.push(format!(
                "warning: {} functions ran but no measured object maps them, so every total leaves them out ({}); meta.json names them (measured.dropped_functions)",
                self.dropped_functions.count,
                first(&self.dropped_from)
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile whose format the in-process reader does not know (its
    /// version changed in the bytes read) has its IDs read by
    /// llvm-profdata from the file, which still has its own: the same IDs.
    #[test]
    fn binary_ids_of_an_unknown_format_come_from_llvm_profdata() {
        let bin = Path::new("/usr/lib/llvm-22/bin");
        if !bin.join("clang").is_file() {
            assert!(std::env::var_os("CI").is_none(), "clang 22 is missing under CI");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("main.c"), "int main(void) { return 0; }\n").unwrap();
        let run = |program: PathBuf, args: &[&str]| {
            let out = std::process::Command::new(program)
                .current_dir(d)
                .args(args)
                .env("LLVM_PROFILE_FILE", "p.profraw")
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        };
        run(bin.join("clang"), &["-fprofile-instr-generate", "-fcoverage-mapping", "main.c", "-o", "prog"]);
        run(d.join("prog"), &[]);
        run(bin.join("llvm-profdata"), &["merge", "-o", "m.profdata", "p.profraw"]);
        let profdata = d.join("m.profdata");
        let bytes = std::fs::read(&profdata).unwrap();
        let mut manifest = crate::build::cache::test_manifest("b");
        manifest.toolchain.llvm_profdata.path = bin.join("llvm-profdata");
        let ids = profile_ids(&manifest, &bytes, &profdata).unwrap();
        assert_eq!(ids.len(), 1);
        let mut newer = bytes.clone();
        newer[8] = 99;
        assert!(mapping::binary_ids(&newer).is_err());
        assert_eq!(profile_ids(&manifest, &newer, &profdata).unwrap(), ids);
        manifest.toolchain.llvm_profdata.path = d.join("no-such-llvm-profdata");
        let err = profile_ids(&manifest, &newer, &profdata).unwrap_err().to_string();
        assert!(
            err.contains("cannot read the binary IDs of the merged profile") && err.contains("nor can llvm-profdata"),
            "{err}"
        );
    }
}
