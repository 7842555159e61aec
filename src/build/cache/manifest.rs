//! What a finished build is (`build.json`): its objects, programs, steps
//! and sources, written next to the cached build and copied into each
//! workspace; and whether the sources are still those it was made from.

use super::identity::hash_tree;
use crate::bail;
use crate::device::{Backend, DeviceDecision};
use crate::error::{Context as _, Result};
use crate::toolchain::Toolchain;
use crate::toolchain::objects::{self, Instrumentation};
use crate::workspace::files::FileSum;
use crate::workspace::{Workspace, files};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub path: PathBuf,
    pub(crate) instrumentation: Instrumentation,
    /// What the object was when the build finished: a cached build is
    /// reused only while its objects still are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sum: Option<FileSum>,
    /// The device-coverage backend of a device object; `None` for host objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) backend: Option<Backend>,
    /// Its `NT_GNU_BUILD_ID`, which every raw profile it writes carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) build_id: Option<String>,
}

/// A program a build made that trials run (a test binary of `tests.bin_dir`),
/// and what it was when the build finished: a truncated one would make every
/// trial die of SIGSEGV or SIGBUS.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProgramRecord {
    pub(crate) path: PathBuf,
    pub(crate) sum: FileSum,
}

/// The SHA-256 trees (`hash_tree`) of the sources a build was made from, for
/// the report to tell whether the sources it shows are still those.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SourceSums {
    pub(crate) library: String,
    pub(crate) tests: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StepRecord {
    pub(crate) name: String,
    pub(crate) command: String,
    pub(crate) seconds: f64,
}

/// What a finished build is; written next to it and copied into workspaces.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildManifest {
    pub(crate) build_id: String,
    pub(crate) config: String,
    /// `{build_dir}`: the cache folder, or the existing build in use.
    pub(crate) build_dir: PathBuf,
    /// Where this build's logs and manifest live.
    pub(crate) cache_dir: PathBuf,
    /// Set when the library was not built here (`CCL_COV_BUILD_DIR`).
    pub(crate) existing_build: bool,
    pub(crate) bin_dir: PathBuf,
    pub(crate) library_src: PathBuf,
    pub(crate) tests_src: PathBuf,
    /// Whether the library is instrumented at all (`CCL_COV_COVERAGE`).
    pub(crate) coverage: bool,
    pub(crate) objects: Vec<ObjectRecord>,
    /// Device code objects with coverage mapping; empty unless device coverage is on.
    pub(crate) device_objects: Vec<ObjectRecord>,
    pub(crate) toolchain: Toolchain,
    pub(crate) device: DeviceDecision,
    pub(crate) coverage_flags: Vec<String>,
    /// `{coverage_link_flags}`: the host collector, with device coverage on.
    #[serde(default)]
    pub(crate) coverage_link_flags: Vec<String>,
    pub(crate) steps: Vec<StepRecord>,
    pub(crate) built_at: String,
    /// The test binaries trials run, checked like the objects before a
    /// cached build is reused; empty in records of older versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) programs: Vec<ProgramRecord>,
    /// What the sources were; `None` in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sources: Option<SourceSums>,
    /// Every other instrumented program or shared library the build made
    /// (under `{build_dir}` and `bin_dir`): a test program with the library's
    /// header code or `.c` file compiled in. The report measures those that
    /// wrote profiles. `None` in records of older versions, which are built again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) discovered: Option<Vec<ObjectRecord>>,
    /// SHA-256 of the listing of what the build left in its cache folder
    /// (`contents.txt`, `identity::contents`); `None` in records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) contents_sha256: Option<String>,
    /// The build's inputs as the config named them (`key::inputs`), for the
    /// report to refuse a config that names others; `None` in records of
    /// older versions, whose reports are not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) inputs: Option<Vec<(String, String)>>,
}

impl BuildManifest {
    /// Host objects llvm-cov should read: those that carry coverage mapping.
    pub(crate) fn instrumented_objects(&self) -> Vec<PathBuf> {
        self.objects.iter().filter(|o| o.instrumentation.is_instrumented()).map(|o| o.path.clone()).collect()
    }

    /// Every object the build's trials may have run, as llvm-cov reads them:
    /// the library's, then (`programs`) the build's other instrumented
    /// binaries, then the device objects llvm-cov reads. A trial's stored
    /// lines are computed over these.
    pub(crate) fn every_object(&self, programs: bool) -> Vec<PathBuf> {
        self.measured(&self.known_ids(), programs).objects
    }

    /// Device objects whose backend's coverage llvm-cov reads (AMDGPU's).
    pub(crate) fn llvm_device_objects(&self) -> Vec<PathBuf> {
        self.device_objects
            .iter()
            .filter(|o| o.backend.is_some_and(Backend::llvm_objects))
            .map(|o| o.path.clone())
            .collect()
    }

    /// The objects a report over profiles written by the binaries `ids`
    /// (build IDs) measures: the library's instrumented objects always, then
    /// each discovered binary whose ID is among them, then the device objects
    /// llvm-cov reads; and the IDs that no object of the build has.
    pub(crate) fn measured(&self, ids: &BTreeSet<String>, programs: bool) -> Measured {
        let library = self.instrumented_objects();
        let known: BTreeSet<&str> =
            self.objects.iter().chain(&self.device_objects).filter_map(|o| o.build_id.as_deref()).collect();
        let programs: Vec<ObjectRecord> = self
            .discovered
            .iter()
            .flatten()
            .filter(|_| programs)
            .filter(|o| o.build_id.as_ref().is_some_and(|id| ids.contains(id) && !known.contains(id.as_str())))
            .filter(|o| !library.contains(&o.path))
            .cloned()
            .collect();
        // Two files of one build ID (a copy in bin_dir) are one binary.
        let mut seen = BTreeSet::new();
        let programs: Vec<ObjectRecord> =
            programs.into_iter().filter(|o| seen.insert(o.build_id.clone().unwrap_or_default())).collect();
        let mut objects = library.clone();
        objects.extend(programs.iter().map(|o| o.path.clone()));
        objects.extend(self.llvm_device_objects());
        let all_known: BTreeSet<&str> = known
            .iter()
            .copied()
            .chain(self.discovered.iter().flatten().filter_map(|o| o.build_id.as_deref()))
            .collect();
        let unknown = ids.iter().filter(|id| !all_known.contains(id.as_str())).cloned().collect();
        Measured { objects, programs, unknown }
    }

    /// Every build ID of the build's instrumented objects, programs and device objects.
    pub(crate) fn known_ids(&self) -> BTreeSet<String> {
        self.objects
            .iter()
            .chain(&self.device_objects)
            .chain(self.discovered.iter().flatten())
            .filter_map(|o| o.build_id.clone())
            .collect()
    }

    /// Why this cached build's objects or test binaries are not what it
    /// built; `None` when every one still is. A record without checksums (an
    /// older harness) cannot be checked, so it is not trusted either.
    pub(super) fn damage(&self) -> Option<String> {
        let objects =
            self.objects.iter().chain(&self.device_objects).chain(self.discovered.iter().flatten()).find_map(|o| {
                match &o.sum {
                    Some(sum) => sum.differs(&o.path),
                    None => {
                        Some(format!("it records no checksum of {} (an older ccl-coverage made it)", o.path.display()))
                    }
                }
            });
        let programs = || {
            if self.programs.is_empty() {
                return Some(format!(
                    "it records no checksum of the test binaries in {} (an older ccl-coverage made it)",
                    self.bin_dir.display()
                ));
            }
            self.programs.iter().find_map(|p| p.sum.differs(&p.path))
        };
        objects.or_else(programs)
    }

    /// Why an object the report always reads is not what the build made (its
    /// coverage mapping would be read as `malformed coverage data` by every
    /// step): each object with a recorded checksum, damaged or not. The
    /// programs it measures are checked once it knows which (`Measured`).
    pub(crate) fn damaged_objects(&self) -> Vec<String> {
        self.objects
            .iter()
            .chain(&self.device_objects)
            .filter_map(|o| o.sum.as_ref().and_then(|sum| sum.differs(&o.path)))
            .collect()
    }

    /// The cached build's manifest at `path` (a regular file, not followed).
    pub fn read(path: &Path) -> Result<BuildManifest> {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::workspace::confined::open_regular(path)?, &mut text)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text, path)
    }

    /// The workspace's `build.json`, read through its handle.
    pub(crate) fn read_in(ws: &Workspace) -> Result<BuildManifest> {
        let path = ws.build_manifest();
        Self::parse(&ws.read_to_string(&path)?, &path)
    }

    fn parse(text: &str, path: &Path) -> Result<BuildManifest> {
        serde_json::from_str(text).with_context(|| format!("{} is not a build manifest", path.display()))
    }

    pub(super) fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).expect("manifest serializes");
        files::write_atomic(path, text.as_bytes())
    }
}

/// What one report measures ([`BuildManifest::measured`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Measured {
    /// What llvm-cov reads, in its order: the library's, the programs', the device's.
    pub(crate) objects: Vec<PathBuf>,
    /// The build's other instrumented binaries that wrote profiles.
    pub(crate) programs: Vec<ObjectRecord>,
    /// Build IDs that wrote profiles but that no binary of the build has.
    pub(crate) unknown: Vec<String>,
}

/// With device coverage on: the device code objects matching `patterns` that
/// carry coverage mapping. Chosen by their sections, never because a file
/// exists: upstream's host-only fallback still writes `device-*.elf`. With
/// device coverage off: none, whatever is there.
pub fn select_device_objects(patterns: &[PathBuf], device: &DeviceDecision) -> Result<Vec<ObjectRecord>> {
    // NVIDIA's device coverage comes from kernel records, not from objects llvm-cov reads.
    if !device.enabled || !device.backend.is_some_and(Backend::llvm_objects) {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for pattern in patterns {
        for path in glob_files(pattern)? {
            let instrumentation = objects::inspect(&path)?;
            if instrumentation.is_instrumented() {
                let build_id = objects::inspect_with_id(&path)?.1;
                found.push(ObjectRecord { path, instrumentation, sum: None, backend: device.backend, build_id });
            } else {
                skipped.push(path.display().to_string());
            }
        }
    }
    for path in &skipped {
        crate::reporter::emit(crate::reporter::Event::DeviceObjectUnmapped { path });
    }
    if found.is_empty() {
        bail!(
            "device coverage is on ({}), but no device code object with coverage mapping matches coverage.device.objects {:?}{}",
            device.reason,
            patterns,
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" (found without mapping: {})", skipped.join(", "))
            }
        );
    }
    Ok(found)
}

/// Files matching `pattern`, whose last component may hold `*`, `?` and
/// `[…]` (matched by `globset`, never across a `/`).
pub(super) fn glob_files(pattern: &Path) -> Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name().and_then(|n| n.to_str())) else {
        return Ok(Vec::new());
    };
    let matcher = globset::GlobBuilder::new(name)
        .literal_separator(true)
        .build()
        .with_context(|| format!("{} is not a file pattern", pattern.display()))?
        .compile_matcher();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| matcher.is_match(e.file_name()))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    Ok(found)
}

/// The programs directly in `bin_dir` (regular files with an execute bit:
/// the test binaries trials run, not a build tool's folders and objects),
/// each with its checksum.
pub(super) fn programs(bin_dir: &Path) -> Result<Vec<ProgramRecord>> {
    use std::os::unix::fs::PermissionsExt;
    let entries = std::fs::read_dir(bin_dir).with_context(|| format!("cannot list {}", bin_dir.display()))?;
    let mut programs = Vec::new();
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            programs.push(ProgramRecord { path: entry.path(), sum: FileSum::of(&entry.path())? });
        }
    }
    programs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(programs)
}

/// Why the sources a report would show are not those `manifest`'s build was
/// made from (a line number would point at other code); `None` when they
/// are, or when the record has no hashes (an older ccl-coverage made it).
/// `entry`: the command the person ran, which the hint names.
pub(crate) fn sources_changed(
    manifest: &BuildManifest,
    config: &crate::config::Config,
    entry: crate::reporter::Entry,
) -> Option<String> {
    let recorded = manifest.sources.as_ref()?;
    let tests_exclude = config.tests_hash_exclude();
    let parts = [
        ("library", &manifest.library_src, &config.library.hash_exclude, &recorded.library),
        ("test", &manifest.tests_src, &tests_exclude, &recorded.tests),
    ];
    let changed: Vec<(&str, &Path)> = parts
        .iter()
        .filter(|(_, dir, exclude, sum)| hash_tree(dir, exclude).unwrap_or_else(|e| e.to_string()) != **sum)
        .map(|(what, dir, ..)| (*what, dir.as_path()))
        .collect();
    changed_sentence(&changed, &manifest.build_id, entry)
}

/// The sentence for the source folders that changed, `(what, folder)`: a
/// folder is named once, with all it holds (`the library and test sources
/// in …`), where the library and its tests share it.
fn changed_sentence(changed: &[(&str, &Path)], build_id: &str, entry: crate::reporter::Entry) -> Option<String> {
    let mut folders: Vec<(Vec<&str>, &Path)> = Vec::new();
    for &(what, dir) in changed {
        match folders.iter_mut().find(|(_, d)| *d == dir) {
            Some((whats, _)) => whats.push(what),
            None => folders.push((vec![what], dir)),
        }
    }
    let said: Vec<String> = folders
        .iter()
        .map(|(whats, dir)| {
            format!(
                "the {} sources in {} changed after build {build_id} was made from them",
                whats.join(" and "),
                dir.display()
            )
        })
        .collect();
    (!said.is_empty()).then(|| {
        format!(
            "{}: the report's lines and counts are of the sources as they were built, not as they are now; run `{}` to build and run them again",
            said.join("; "),
            entry.trials()
        )
    })
}

/// A manifest for unit tests of later stages.
#[cfg(test)]
pub(crate) fn test_manifest(build_id: &str) -> BuildManifest {
    let tool = crate::toolchain::Tool {
        path: "/llvm/bin/clang".into(),
        version: "clang version 22".into(),
        major: 22,
        sha256: None,
    };
    BuildManifest {
        build_id: build_id.into(),
        config: "t".into(),
        build_dir: "/b".into(),
        cache_dir: "/b".into(),
        existing_build: false,
        bin_dir: "/b/bin".into(),
        library_src: "/src".into(),
        tests_src: "/src/tests".into(),
        coverage: true,
        objects: Vec::new(),
        device_objects: Vec::new(),
        toolchain: Toolchain {
            cc: tool.clone(),
            cxx: tool.clone(),
            llvm_bin: "/llvm/bin".into(),
            llvm_profdata: tool.clone(),
            llvm_cov: tool,
        },
        device: DeviceDecision {
            requested: crate::config::DeviceMode::Auto,
            enabled: false,
            reason: "r".into(),
            target: None,
            backend: None,
            found: None,
        },
        coverage_flags: Vec::new(),
        coverage_link_flags: Vec::new(),
        steps: Vec::new(),
        built_at: String::new(),
        programs: Vec::new(),
        sources: None,
        discovered: Some(Vec::new()),
        contents_sha256: None,
        inputs: None,
    }
}

#[cfg(test)]
mod measured_tests {
    use super::*;

    fn object(path: &str, id: &str) -> ObjectRecord {
        let instrumentation = Instrumentation { coverage_mapping: true, counters: true };
        ObjectRecord { path: path.into(), instrumentation, sum: None, backend: None, build_id: Some(id.into()) }
    }

    /// A program counts only once it wrote profiles, once per build ID,
    /// never twice as the library; an ID of no file of the build is named.
    #[test]
    fn programs_that_wrote_profiles_are_measured_after_the_library_and_unknown_ids_named() {
        let mut m = test_manifest("b");
        m.objects = vec![object("/b/libring.so", "aa")];
        m.discovered = Some(vec![
            object("/b/ring_test", "bb"),
            object("/b/bin/ring_test", "bb"),
            object("/b/ring_bench", "cc"),
            object("/b/lib_copy.so", "aa"),
        ]);
        let ids: BTreeSet<String> = ["aa", "bb", "ff"].map(String::from).into();
        let measured = m.measured(&ids, true);
        assert_eq!(measured.objects, [PathBuf::from("/b/libring.so"), PathBuf::from("/b/ring_test")]);
        assert_eq!(measured.unknown, ["ff"]);
        let library_alone = m.measured(&ids, false);
        assert_eq!(library_alone.objects, [PathBuf::from("/b/libring.so")]);
        assert_eq!(library_alone.unknown, ["ff"], "a program not measured is still a file of the build");
        assert_eq!(m.every_object(true).len(), 3, "the library, ring_test once, ring_bench");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reporter::Entry;

    /// Issue #49: a library and tests in one folder were said to have
    /// changed twice, in two identical clauses.
    #[test]
    fn a_folder_that_changed_is_named_once() {
        let shared = Path::new("/p/ring");
        let said = changed_sentence(&[("library", shared), ("test", shared)], "b1", Entry::Cli).unwrap();
        assert_eq!(said.matches("/p/ring").count(), 1, "{said}");
        assert!(
            said.starts_with("the library and test sources in /p/ring changed after build b1 was made from them: ")
        );
        let said = changed_sentence(&[("library", shared), ("test", Path::new("/p/tests"))], "b1", Entry::Cli).unwrap();
        assert!(
            said.contains("the library sources in /p/ring changed") && said.contains("; the test sources in /p/tests")
        );
        assert_eq!(changed_sentence(&[], "b1", Entry::Cli), None);
    }
}
