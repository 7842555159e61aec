//! One name per source file, in one place: every file name the report gets (llvm-cov's
//! host lcov, a backend's device lines) goes through [`SourceNames::name`] before any
//! format sees it. A library's build may copy its own sources into the build folder
//! (NCCL's make installs `src/include/nccl_device/**` into `<build>/include/`), and code
//! compiled against the copy is reported under the copy's path: a file under the build
//! whose bytes equal one source file of the library is that source file. A file under the
//! build that equals none (a generated source, a copy that differs) is named relative to
//! the build, `<build>/…`, so that no name holds the cache's hash or this machine's paths.
//! `docs/reports.md` ("One record per source file") gives the rule.

use crate::build::cache::BuildManifest;
use crate::coverage::lcov::{self, FileCoverage};
use crate::error::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

/// How a file under the build is named: this, then its path relative to the build folder.
pub const BUILD: &str = "<build>";

/// The library's files by size, each a path: listed once, when the first file under the
/// build is named; or why they could not be listed.
type Index = std::result::Result<BTreeMap<u64, Vec<PathBuf>>, String>;

/// The report's names of source files: a library's sources and build folder, and the names
/// given so far.
#[derive(Debug, Default)]
pub struct SourceNames {
    library_src: PathBuf,
    /// `None`: nothing is renamed.
    build_dir: Option<PathBuf>,
    index: OnceLock<Index>,
    /// Name given to each reported file under the build.
    named: Mutex<BTreeMap<String, String>>,
    /// Why a file under the build is not named as a source file it looks like, said once each.
    notes: Mutex<Vec<String>>,
    /// Whether [`Self::lcov`] made one record of several.
    merged: std::sync::atomic::AtomicBool,
}

impl SourceNames {
    /// The names of `manifest`'s build: its library sources and `{build_dir}`.
    pub fn of(manifest: &BuildManifest) -> SourceNames {
        SourceNames::new(&manifest.library_src, &manifest.build_dir)
    }

    pub fn new(library_src: &Path, build_dir: &Path) -> SourceNames {
        SourceNames {
            library_src: crate::workspace::normalize(library_src),
            build_dir: Some(crate::workspace::normalize(build_dir)).filter(|d| d.is_absolute()),
            ..SourceNames::default()
        }
    }

    /// The report's name of `reported`, a file name llvm-cov or a backend gave: the same
    /// name unless the file is under the build folder (and not under the library's sources
    /// inside it); then the source file of the same bytes, or `<build>/<path in the build>`.
    pub fn name(&self, reported: &str) -> String {
        let Some(build_dir) = &self.build_dir else { return reported.to_string() };
        let path = Path::new(reported);
        let Ok(rel) = path.strip_prefix(build_dir) else { return reported.to_string() };
        // An in-tree build's sources are the library's, not the build's.
        if self.library_src.starts_with(build_dir) && path.starts_with(&self.library_src) {
            return reported.to_string();
        }
        let mut named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(name) = named.get(reported) {
            return name.clone();
        }
        let build_name = format!("{BUILD}/{}", rel.display());
        let name = match self.source_of(path, rel) {
            Ok(Some(source)) => source.display().to_string(),
            Ok(None) => build_name,
            Err(why) => {
                self.note(format!("{build_name} is kept under its build name: {why}"));
                build_name
            }
        };
        named.insert(reported.to_string(), name.clone());
        name
    }

    /// Whether [`Self::lcov`] has made one record of several copies' records: what was
    /// computed from llvm-cov's records alone (a trial's stored lines) then counts otherwise.
    pub fn merged_any(&self) -> bool {
        self.merged.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether `name` (the report's) is a file under the build with no source of its own.
    pub fn is_build_name(name: &str) -> bool {
        name.strip_prefix(BUILD).is_some_and(|rest| rest.starts_with('/'))
    }

    /// Where the file the report names `name` is, to read its text: `<build>/…` is under
    /// the build folder; any other name is its path.
    pub fn path_of(&self, name: &str) -> PathBuf {
        match (name.strip_prefix(BUILD).and_then(|rest| rest.strip_prefix('/')), &self.build_dir) {
            (Some(rel), Some(build_dir)) => build_dir.join(rel),
            _ => PathBuf::from(name),
        }
    }

    /// The reported names that were given `name`, `name` itself first when it was reported.
    pub fn reported_as(&self, name: &str) -> Vec<String> {
        let named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = vec![name.to_string()];
        out.extend(named.iter().filter(|(from, to)| *to == name && *from != name).map(|(from, _)| from.clone()));
        out
    }

    /// The name llvm-cov gave the file the report names `name`, for its page: a build name's
    /// path under the build, any other name itself.
    pub fn llvm_cov_name(&self, name: &str) -> String {
        match self.reported_as(name).get(1) {
            Some(reported) if Self::is_build_name(name) => reported.clone(),
            _ => name.to_string(),
        }
    }

    /// Why files under the build kept their build names though they look like a source file.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn note(&self, note: String) {
        crate::reporter::emit(crate::reporter::Event::SourceNameKept { note: &note });
        self.notes.lock().unwrap_or_else(PoisonError::into_inner).push(note);
    }

    /// The library's source file whose bytes equal those of `path` (`rel` under the build):
    /// among several, the one whose path ends as `rel` does for the most components; `None`
    /// when none is equal, or no one is most alike (said, as is a namesake that differs).
    fn source_of(&self, path: &Path, rel: &Path) -> std::result::Result<Option<PathBuf>, String> {
        let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if !meta.file_type().is_file() {
            return Err(format!("{} is not a regular file (a link is not followed)", path.display()));
        }
        let index = self.index.get_or_init(|| self.list_sources()).as_ref().map_err(Clone::clone)?;
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let same = |source: &&PathBuf| std::fs::read(source).is_ok_and(|theirs| theirs == bytes);
        let equal: Vec<&PathBuf> = index.get(&meta.len()).into_iter().flatten().filter(same).collect();
        let alike = |source: &Path| {
            let theirs = source.strip_prefix(&self.library_src).unwrap_or(source).components().rev();
            theirs.zip(rel.components().rev()).take_while(|(a, b)| a == b).count()
        };
        let best = equal.iter().map(|s| alike(s)).max().unwrap_or(0);
        let most_alike: Vec<&&PathBuf> = equal.iter().filter(|s| alike(s) == best).collect();
        let build_name = format!("{BUILD}/{}", rel.display());
        match most_alike.as_slice() {
            [one] => Ok(Some((**one).clone())),
            [] => {
                // A source file of the same name that differs: the copy is not that file.
                let namesake =
                    index.values().flatten().filter(|s| s.file_name() == rel.file_name()).max_by_key(|s| alike(s));
                if let Some(namesake) = namesake {
                    self.note(format!(
                        "{build_name} is kept apart from {}: their bytes differ, so they are not one source file",
                        namesake.display()
                    ));
                }
                Ok(None)
            }
            several => {
                let names: Vec<String> = several.iter().map(|s| s.display().to_string()).collect();
                self.note(format!(
                    "{build_name} is kept under its build name: its bytes equal several source files alike ({})",
                    names.join(", ")
                ));
                Ok(None)
            }
        }
    }

    /// Every regular file under the library's sources by size, as `hash_tree` sees the tree:
    /// hidden entries left out, no link followed, nothing of the build folder.
    fn list_sources(&self) -> Index {
        let mut index: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
        let mut stack = vec![self.library_src.clone()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| format!("the library's sources could not be listed: {}: {e}", dir.display()))?;
            for entry in entries.flatten() {
                let path = entry.path();
                let hidden = entry.file_name().to_string_lossy().starts_with('.');
                if hidden || self.build_dir.as_deref() == Some(path.as_path()) {
                    continue;
                }
                match std::fs::symlink_metadata(&path) {
                    Ok(meta) if meta.is_dir() => stack.push(path),
                    Ok(meta) if meta.is_file() => index.entry(meta.len()).or_default().push(path),
                    _ => {}
                }
            }
        }
        for paths in index.values_mut() {
            paths.sort();
        }
        Ok(index)
    }

    /// `text`, lcov, with every `SF` named by [`Self::name`], and the records that get one
    /// name made one ([`FileCoverage::merge_copy`]) where the first of them was. `origin`
    /// names the text in errors.
    pub(crate) fn lcov(&self, text: &str, origin: &str) -> Result<String> {
        if self.build_dir.is_none() {
            return Ok(text.to_string());
        }
        // Each record as text, its name given; the order of first appearance.
        // A record without `SF` (none is llvm-cov's) has no name and stays where it was.
        let mut records: Vec<(Option<String>, String)> = Vec::new();
        let mut renamed_any: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let mut record = String::new();
        for line in text.split_inclusive('\n') {
            record.push_str(line);
            if line.trim_end() != "end_of_record" {
                continue;
            }
            let file = record.lines().find_map(|l| l.strip_prefix("SF:")).map(str::to_string);
            let Some(file) = file else {
                records.push((None, std::mem::take(&mut record)));
                continue;
            };
            let name = self.name(&file);
            let renamed = if name == file {
                std::mem::take(&mut record)
            } else {
                renamed_any.insert(name.clone());
                let text = std::mem::take(&mut record);
                text.split_inclusive('\n')
                    .map(|l| {
                        if l.strip_prefix("SF:").is_some_and(|f| f.trim_end() == file) {
                            format!("SF:{name}\n")
                        } else {
                            l.to_string()
                        }
                    })
                    .collect()
            };
            records.push((Some(name), renamed));
        }
        let tail = record;
        // Only records a rename brought together are merged: llvm-cov's own are as they were.
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for name in records.iter().filter_map(|(name, _)| name.as_deref()).filter(|n| renamed_any.contains(*n)) {
            *count.entry(name).or_default() += 1;
        }
        if count.values().all(|n| *n == 1) {
            return Ok(records.into_iter().map(|(_, r)| r).collect::<String>() + &tail);
        }
        let mut merged: BTreeMap<&str, FileCoverage> = BTreeMap::new();
        self.merged.store(true, std::sync::atomic::Ordering::Relaxed);
        let merging = |name: &str| count.get(name).is_some_and(|n| *n > 1);
        for (name, text) in records.iter().filter_map(|(name, text)| Some((name.as_deref()?, text))) {
            if !merging(name) {
                continue;
            }
            let copy = lcov::parse_lcov(text, origin)?.files.remove(name).unwrap_or_default();
            if let Some(file) = merged.get_mut(name) {
                file.merge_copy(&copy);
            } else {
                merged.insert(name, copy);
            }
        }
        let mut out = String::with_capacity(text.len());
        for (name, text) in &records {
            match name.as_deref() {
                Some(name) if merging(name) => {
                    if let Some(file) = merged.remove(name) {
                        out.push_str(&file.record(name));
                    }
                }
                _ => out.push_str(text),
            }
        }
        Ok(out + &tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library with a header and a build folder that holds a copy of it, a copy of it that
    /// differs, and a generated file.
    fn tree() -> (tempfile::TempDir, SourceNames, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("lib");
        let build = dir.path().join("target/builds/0123abcd");
        for d in ["src/include/dev", "src/other"] {
            std::fs::create_dir_all(src.join(d)).unwrap();
        }
        for d in ["lib/include/dev", "lib/include/old", "lib/obj/gensrc"] {
            std::fs::create_dir_all(build.join(d)).unwrap();
        }
        std::fs::write(src.join("src/include/dev/a.h"), "inline int a() { return 1; }\n").unwrap();
        std::fs::write(src.join("src/include/dev/b.h"), "inline int b() { return 2; }\n").unwrap();
        std::fs::write(build.join("lib/include/dev/a.h"), "inline int a() { return 1; }\n").unwrap();
        std::fs::write(build.join("lib/include/dev/b.h"), "inline int b() { return 3; }\n").unwrap();
        std::fs::write(build.join("lib/obj/gensrc/k.cu"), "__global__ void k() {}\n").unwrap();
        let names = SourceNames::new(&src, &build);
        (dir, names, src.display().to_string(), build.display().to_string())
    }

    #[test]
    fn a_copy_is_its_source_and_the_rest_of_the_build_is_named_relative_to_it() {
        let (_dir, names, src, build) = tree();
        assert_eq!(names.name(&format!("{build}/lib/include/dev/a.h")), format!("{src}/src/include/dev/a.h"));
        assert_eq!(names.name(&format!("{build}/lib/obj/gensrc/k.cu")), "<build>/lib/obj/gensrc/k.cu");
        // A copy that differs from its namesake stays apart, said.
        assert_eq!(names.name(&format!("{build}/lib/include/dev/b.h")), "<build>/lib/include/dev/b.h");
        let notes = names.notes();
        assert!(notes.len() == 1 && notes[0].contains("kept apart from") && notes[0].ends_with("not one source file"));
        // Files elsewhere keep their names; a name under the build reads from the build.
        for other in [format!("{src}/src/include/dev/a.h"), "/usr/include/stdio.h".to_string()] {
            assert_eq!(names.name(&other), other);
        }
        assert_eq!(names.path_of("<build>/lib/obj/gensrc/k.cu"), Path::new(&build).join("lib/obj/gensrc/k.cu"));
        assert_eq!(
            names.reported_as(&format!("{src}/src/include/dev/a.h")),
            [format!("{src}/src/include/dev/a.h"), format!("{build}/lib/include/dev/a.h")]
        );
        assert!(SourceNames::is_build_name("<build>/x.cu") && !SourceNames::is_build_name("<build>x"));
        assert_eq!(names.llvm_cov_name("<build>/lib/obj/gensrc/k.cu"), format!("{build}/lib/obj/gensrc/k.cu"));
        assert_eq!(names.llvm_cov_name(&format!("{src}/src/include/dev/a.h")), format!("{src}/src/include/dev/a.h"));
    }

    #[test]
    fn equal_sources_alike_in_name_are_preferred_and_a_tie_or_a_link_keeps_the_build_name() {
        let (dir, names, src, build) = tree();
        // The same bytes in two source files: the one whose path ends as the copy's wins.
        std::fs::write(Path::new(&src).join("src/other/a.h"), "inline int a() { return 1; }\n").unwrap();
        assert_eq!(names.name(&format!("{build}/lib/include/dev/a.h")), format!("{src}/src/include/dev/a.h"));
        std::fs::write(Path::new(&build).join("lib/include/old/a.h"), "inline int a() { return 1; }\n").unwrap();
        assert_eq!(names.name(&format!("{build}/lib/include/old/a.h")), "<build>/lib/include/old/a.h");
        assert!(names.notes().iter().any(|n| n.contains("equal several source files")));
        // A link in the build is not followed, even to a source file of the same bytes.
        let link = Path::new(&build).join("lib/include/dev/l.h");
        std::os::unix::fs::symlink(Path::new(&src).join("src/include/dev/a.h"), &link).unwrap();
        assert_eq!(names.name(&link.display().to_string()), "<build>/lib/include/dev/l.h");
        assert!(names.notes().iter().any(|n| n.contains("a link is not followed")));
        // No build folder: nothing is renamed.
        let none = SourceNames::default();
        assert_eq!(none.name(&format!("{build}/lib/include/dev/a.h")), format!("{build}/lib/include/dev/a.h"));
        drop(dir);
    }

    #[test]
    fn records_of_one_source_become_one_whose_lines_count_as_the_hottest_copy() {
        let (_dir, names, src, build) = tree();
        let text = format!(
            "TN:\nSF:{src}/src/include/dev/a.h\nFN:1,a\nFNDA:3,a\nFNF:1\nFNH:1\nBRDA:1,0,0,3\nBRDA:1,0,1,0\nBRF:2\nBRH:1\n\
             DA:1,3\nDA:2,0\nLF:2\nLH:1\nend_of_record\n\
             TN:\nSF:/usr/include/x.h\nDA:5,1\nLF:1\nLH:1\nend_of_record\n\
             TN:\nSF:{build}/lib/include/dev/a.h\nFN:1,a\nFNDA:3,a\nFN:4,b\nFNDA:0,b\nFNF:2\nFNH:1\nBRDA:1,0,0,3\nBRDA:1,0,1,-\n\
             BRDA:4,0,0,-\nBRDA:4,0,1,-\nBRF:4\nBRH:1\nDA:1,3\nDA:2,2\nDA:4,0\nLF:3\nLH:2\nend_of_record\n\
             TN:\nSF:{build}/lib/obj/gensrc/k.cu\nDA:1,1\nLF:1\nLH:1\nend_of_record\n"
        );
        let alone = format!("SF:{build}/lib/obj/gensrc/k.cu\nDA:1,1\nend_of_record\n");
        assert_eq!(names.lcov(&alone, "t").unwrap(), "SF:<build>/lib/obj/gensrc/k.cu\nDA:1,1\nend_of_record\n");
        assert!(!names.merged_any(), "a rename alone merges nothing");
        let out = names.lcov(&text, "t").unwrap();
        assert!(names.merged_any());
        assert_eq!(
            out,
            format!(
                "TN:\nSF:{src}/src/include/dev/a.h\nFN:1,a\nFN:4,b\nFNDA:3,a\nFNDA:0,b\nFNF:2\nFNH:1\n\
                 BRDA:1,0,0,3\nBRDA:1,0,1,0\nBRDA:4,0,0,0\nBRDA:4,0,1,0\nBRF:4\nBRH:1\nDA:1,3\nDA:2,2\nDA:4,0\nLF:3\nLH:2\nend_of_record\n\
                 TN:\nSF:/usr/include/x.h\nDA:5,1\nLF:1\nLH:1\nend_of_record\n\
                 TN:\nSF:<build>/lib/obj/gensrc/k.cu\nDA:1,1\nLF:1\nLH:1\nend_of_record\n"
            )
        );
        // The merged record's totals are its records'.
        let merged = &out[..out.find("TN:\nSF:/usr").unwrap()];
        assert!(lcov::recount(&out, "t").unwrap().starts_with(merged));
        // Records of one name that no rename brought together stay as llvm-cov wrote them.
        let twice = "SF:/s/x.h\nDA:1,1\nend_of_record\nSF:/s/x.h\nDA:1,1\nend_of_record\n";
        assert_eq!(names.lcov(twice, "t").unwrap(), twice);
        let bad = format!(
            "SF:{src}/src/include/dev/a.h\nDA:1\nend_of_record\nSF:{build}/lib/include/dev/a.h\nend_of_record\n"
        );
        assert!(names.lcov(&bad, "t").is_err());
    }
}
