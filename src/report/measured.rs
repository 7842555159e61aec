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
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
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

/// `meta.json`'s `measured`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Measurement {
    pub(crate) objects: Vec<MeasuredObject>,
    /// Source files of the measured objects left out as the library's test code.
    pub(crate) test_code: Named,
    /// Source files only the build's other programs compile that are not the
    /// library's sources (a test framework's headers), left out.
    pub(crate) not_the_librarys: Named,
    /// Build IDs that wrote profiles but that no file of the build has.
    pub(crate) unknown_binaries: Vec<String>,
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
pub(crate) fn measure(ws: &Workspace, config: &Config, manifest: &BuildManifest, profdata: &Path) -> Result<Measure> {
    let bytes = ws
        .read_opt(profdata)?
        .ok_or_else(|| Error::new(format!("cannot read {}: it does not exist", profdata.display())))?;
    let ids = mapping::binary_ids(&bytes).map_err(|e| {
        Error::new(format!("cannot read the binary IDs of the merged profile {}: {e}", profdata.display()))
    })?;
    let measured = manifest.measured(&ids, config.report.measure_programs);
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
    let mut from: BTreeSet<String> = BTreeSet::new();
    for (name, _) in &dropped {
        let owner = programs
            .iter()
            .filter(|(p, _)| !measured_programs.contains(p.as_path()))
            .find(|(_, m)| m.instrumented.contains(*name))
            .map(|(p, _)| format!("{} (not measured: report.measure_programs is false)", p.display()));
        from.insert(owner.unwrap_or_else(|| {
            if measured.unknown.is_empty() {
                "a binary without a build ID, or a profile of another build".to_string()
            } else {
                format!("binaries that are no file of the build: {}", measured.unknown.join(", "))
            }
        }));
    }
    let measurement = Measurement {
        objects,
        test_code: left(LeftOut::TestCode),
        not_the_librarys: left(LeftOut::NotTheLibrarys),
        unknown_binaries: measured.unknown.clone(),
        dropped_functions: Named::of(dropped.iter().map(|(n, _)| (*n).to_string())),
        dropped_from: from.into_iter().collect(),
    };
    Ok(Measure { scope, measured, measurement })
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
                "measured {} objects: {} (library.objects){}",
                self.objects.len(),
                library.join(", "),
                if programs.is_empty() {
                    String::new()
                } else {
                    format!(", {} (programs that wrote profiles)", programs.join(", "))
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
        for id in &self.unknown_binaries {
            lines.push(format!("warning: a binary with build ID {id} wrote profiles, but no file of the build has that ID: its code is not measured"));
        }
        if self.dropped_functions.count > 0 {
            lines.push(format!(
                "warning: {} functions ran but no measured object maps them, so every total leaves them out ({}); meta.json names them (measured.dropped_functions)",
                self.dropped_functions.count,
                self.dropped_from.join("; ")
            ));
        }
        lines
    }
}
