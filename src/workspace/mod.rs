//! The workspace: everything a run writes, and the contract between the
//! `collectives` and `coverage_report` binaries.
//!
//! ```text
//! <ws>/build.json             which build the profiles belong to (fixture.rs)
//! <ws>/profiles/<trial>/      raw profiles of one trial
//! <ws>/quarantine/<trial>/    profiles llvm-profdata could not read
//! <ws>/logs/<trial>.log       a trial's output
//! <ws>/results/<trial>.json   a trial's outcome and perf rows; run.json, junit.xml
//! <ws>/report/                html/, summary.json, summary.txt, coverage.lcov
//! ```
//!
//! A workspace is a folder the harness created and marked as its own
//! ([`MARKER`]): an existing folder that is not empty and carries no marker is
//! refused, and so are `/`, `$HOME` and any folder that holds the project, the
//! config or the sources ([`Workspace::claim`]). Deletion is confined to
//! `profiles/`, `quarantine/` and `report/` of a marked workspace, never
//! follows a symlink, and refuses a workspace whose folders are symlinks.

pub(crate) mod files;
pub(crate) mod lock;

use crate::bail;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The longest file name most file systems accept.
pub(crate) const FILE_NAME_BYTES: usize = 255;

/// The file that makes a folder a workspace of ours.
pub(crate) const MARKER: &str = ".ccl-coverage-workspace";

/// What the marker records: which config the workspace belongs to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub(crate) tool: String,
    pub(crate) config: String,
    pub(crate) config_path: PathBuf,
    pub(crate) created_at: String,
}

/// A folder the workspace must not hold, and (for sources, whose hash keys
/// the build) must not lie inside either.
#[derive(Debug, Clone)]
pub(crate) struct Protected {
    what: &'static str,
    path: PathBuf,
    inside_too: bool,
}

impl Protected {
    pub(crate) fn holding(what: &'static str, path: PathBuf) -> Protected {
        Protected { what, path, inside_too: false }
    }

    pub(crate) fn holding_or_inside(what: &'static str, path: PathBuf) -> Protected {
        Protected { what, path, inside_too: true }
    }
}

/// What older versions left in a workspace before the marker existed: such a
/// folder is adopted rather than refused.
const LEGACY_ENTRIES: [&str; 7] = ["build.json", "profiles", "quarantine", "logs", "results", "report", ".lock"];

/// Files of the workspace that no trial may write, relative to its root.
pub(crate) const RESERVED_FILES: &[&str] =
    &["results/run.json", "results/junit.xml", "build.json", ".lock", ".writers.lock"];

/// Every file and folder the trial with file name `slug` owns, relative to
/// the workspace root (what `trial_profiles`, `trial_profdata`,
/// `trial_quarantine`, `trial_log` and `trial_result` return). Config
/// validation checks that no two trials share one.
pub fn trial_files(slug: &str) -> [String; 7] {
    [
        format!("profiles/{slug}"),
        format!("profiles/{slug}.profdata"),
        format!("quarantine/{slug}"),
        format!("logs/{slug}.log"),
        format!("results/{slug}.json"),
        format!("cases/{slug}"),
        format!("logs/{slug}.rerun.log"),
    ]
}

/// Whether `slug` is one safe file name component: not empty, no `/`, no
/// control character, no leading `.` (so not `.` or `..`), and short enough
/// for its longest use (`<slug>.profdata`).
pub fn check_slug(slug: &str) -> std::result::Result<(), String> {
    const LONGEST_SUFFIX: usize = ".profdata".len();
    if slug.is_empty() || slug.starts_with('.') || slug.contains('/') || slug.chars().any(char::is_control) {
        return Err(format!("the trial's file name {slug:?} is not a safe file name"));
    }
    if slug.len() + LONGEST_SUFFIX > FILE_NAME_BYTES {
        return Err(format!(
            "the trial's file name is {} bytes long: expected at most {} (shorten the names)",
            slug.len(),
            FILE_NAME_BYTES - LONGEST_SUFFIX
        ));
    }
    Ok(())
}

/// `name` as it may leave the workspace (CI artifacts, archives, other file
/// systems): `:`, which AMD device profiles carry in their target ID
/// (`gfx942:xnack-`), is refused by artifact uploads and Windows, so it
/// becomes `%3A`; reversible, so two names never become one.
pub(crate) fn portable_name(name: &str) -> String {
    name.replace(':', "%3A")
}

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

/// The folders whose contents the harness may delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    Profiles,
    Quarantine,
    Report,
    /// `cases/<slug>/`: a trial's own test report (gtest JSON, pytest JUnit).
    Cases,
    /// `results/`: the trials' records, `run.json` and `junit.xml`.
    Results,
    /// `report.new/<pid>/`: the report one process is writing, swapped in
    /// for `report/` once it is whole ([`Workspace::install_report`]).
    ReportStaging,
}

impl Area {
    fn dir_name(self) -> &'static str {
        match self {
            Area::Profiles => "profiles",
            Area::Quarantine => "quarantine",
            Area::Report => "report",
            Area::Cases => "cases",
            Area::Results => "results",
            Area::ReportStaging => "report.new",
        }
    }
}

impl Workspace {
    /// Uses `root` (made absolute against the current directory).
    pub fn new(root: &Path) -> Result<Self> {
        let root = std::path::absolute(root)
            .map_err(|e| Error::new(format!("cannot make workspace path {} absolute: {e}", root.display())))?;
        Ok(Workspace { root: normalize(&root) })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn area(&self, area: Area) -> PathBuf {
        self.root.join(area.dir_name())
    }

    pub fn trial_profiles(&self, slug: &str) -> PathBuf {
        self.area(Area::Profiles).join(slug)
    }

    pub(crate) fn trial_quarantine(&self, slug: &str) -> PathBuf {
        self.area(Area::Quarantine).join(slug)
    }

    pub(crate) fn report_dir(&self) -> PathBuf {
        self.area(Area::Report)
    }

    pub(crate) fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub(crate) fn trial_log(&self, slug: &str) -> PathBuf {
        self.logs_dir().join(format!("{slug}.log"))
    }

    /// The folder a trial's own test report goes to (gtest's JSON, pytest's
    /// JUnit XML), emptied before it runs.
    pub(crate) fn trial_cases(&self, slug: &str) -> PathBuf {
        self.area(Area::Cases).join(slug)
    }

    /// The log of a failed trial's diagnostic rerun.
    pub(crate) fn trial_rerun_log(&self, slug: &str) -> PathBuf {
        self.logs_dir().join(format!("{slug}.rerun.log"))
    }

    pub(crate) fn results_dir(&self) -> PathBuf {
        self.area(Area::Results)
    }

    pub(crate) fn trial_result(&self, slug: &str) -> PathBuf {
        self.results_dir().join(format!("{slug}.json"))
    }

    pub(crate) fn build_manifest(&self) -> PathBuf {
        self.root.join("build.json")
    }

    pub(crate) fn lock_file(&self) -> PathBuf {
        self.root.join(".lock")
    }

    /// Held shared by each process recording trials, so the last one can tell
    /// it is last (`results::RunWriter`).
    pub(crate) fn writers_lock_file(&self) -> PathBuf {
        self.root.join(".writers.lock")
    }

    pub(crate) fn marker_file(&self) -> PathBuf {
        self.root.join(MARKER)
    }

    /// Makes sure the workspace is ours to write in, creating and marking it
    /// if it is new (or an empty folder). Refused: a symlink, `/`, a folder
    /// that holds or lies inside one of `protected` (what, path), a non-empty
    /// folder without the marker, and a workspace of another config.
    pub(crate) fn claim(&self, config: &str, config_path: &Path, protected: &[Protected]) -> Result<()> {
        self.check_place(protected)?;
        match fs::symlink_metadata(&self.root) {
            Ok(meta) if !meta.is_dir() => bail!("CCL_COV_WORKSPACE={} is not a folder", self.root.display()),
            Ok(_) => {
                if let Some(marker) = self.read_marker()? {
                    return self.check_config(&marker, config, config_path);
                } else {
                    let entries = self.entries()?;
                    let legacy =
                        entries.iter().all(|e| LEGACY_ENTRIES.contains(&e.as_str())) && self.has_build_record();
                    if legacy {
                        eprintln!(
                            "ccl-coverage: adopting {} as a workspace: it holds only what an older ccl-coverage wrote there",
                            self.root.display()
                        );
                    } else if !entries.is_empty() {
                        bail!(
                            "refusing to use {} as the workspace: the folder is not empty ({}) and ccl-coverage did not create it (it has no {MARKER} marker); the harness deletes inside its workspace, so point CCL_COV_WORKSPACE at a new or empty folder",
                            self.root.display(),
                            preview(&entries)
                        );
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => files::create_dir(&self.root)?,
            Err(e) => bail!("cannot inspect the workspace {}: {e}", self.root.display()),
        }
        let marker = Marker {
            tool: "ccl-coverage".into(),
            config: config.into(),
            config_path: config_path.to_path_buf(),
            created_at: crate::exec::host::now(),
        };
        let text = serde_json::to_string_pretty(&marker).expect("marker serializes");
        files::write_atomic(&self.marker_file(), text.as_bytes())
            .map_err(|e| e.context(format!("the workspace {} is not writable", self.root.display())))?;
        self.create().map_err(|e| e.context(format!("the workspace {} is not writable", self.root.display())))
    }

    /// For readers that must not create anything (`coverage_report`): the
    /// workspace must exist, carry the marker, and belong to `config`.
    pub(crate) fn check_claimed(&self, config: &str, config_path: &Path, protected: &[Protected]) -> Result<()> {
        self.check_place(protected)?;
        match self.read_marker()? {
            Some(marker) => self.check_config(&marker, config, config_path),
            None => bail!(
                "{} is not a ccl-coverage workspace (no {MARKER} marker); run `cargo test --test collectives` first, with the same CCL_COV_CONFIG and CCL_COV_WORKSPACE",
                self.root.display()
            ),
        }
    }

    fn check_place(&self, protected: &[Protected]) -> Result<()> {
        let root = canonical(&self.root);
        if root.parent().is_none() {
            bail!("refusing to use / as the workspace: point CCL_COV_WORKSPACE at a folder of its own");
        }
        if fs::symlink_metadata(&self.root).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "refusing to use {} as the workspace: it is a symlink (to {}); point CCL_COV_WORKSPACE at the real folder",
                self.root.display(),
                root.display()
            );
        }
        for p in protected {
            let path = canonical(&p.path);
            if path.starts_with(&root) {
                bail!(
                    "refusing to use {} as the workspace: it holds {} ({}); the harness deletes inside its workspace, so point CCL_COV_WORKSPACE at a folder of its own",
                    self.root.display(),
                    p.what,
                    path.display()
                );
            }
            if p.inside_too && root.starts_with(&path) {
                bail!(
                    "refusing to use {} as the workspace: it lies inside {} ({}), whose contents key the build; point CCL_COV_WORKSPACE elsewhere",
                    self.root.display(),
                    p.what,
                    path.display()
                );
            }
        }
        Ok(())
    }

    fn check_config(&self, marker: &Marker, config: &str, config_path: &Path) -> Result<()> {
        if marker.config != config {
            bail!(
                "the workspace {} holds the results of config {:?} ({}), not of {config:?} ({}): the two would be mixed in one run.json and report; use another CCL_COV_WORKSPACE, or delete {} yourself",
                self.root.display(),
                marker.config,
                marker.config_path.display(),
                config_path.display(),
                self.root.display()
            );
        }
        Ok(())
    }

    /// Whether `build.json` is a build record (older versions wrote one first).
    fn has_build_record(&self) -> bool {
        fs::read_to_string(self.build_manifest())
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .is_some_and(|v| v.get("build_id").is_some_and(serde_json::Value::is_string))
    }

    fn read_marker(&self) -> Result<Option<Marker>> {
        let path = self.marker_file();
        match fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| Error::new(format!("{} is not a ccl-coverage workspace marker: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => bail!("cannot read {}: {e}", path.display()),
        }
    }

    fn entries(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = fs::read_dir(&self.root)
            .map_err(|e| Error::new(format!("cannot list {}: {e}", self.root.display())))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Creates the workspace folders.
    pub fn create(&self) -> Result<()> {
        for dir in [self.area(Area::Profiles), self.logs_dir(), self.results_dir()] {
            files::create_dir(&dir)?;
        }
        Ok(())
    }

    /// Empties `path`, which must be `area` itself or inside it; the folder
    /// itself stays (or is created). Symlinks inside are removed, never followed.
    pub(crate) fn clear(&self, area: Area, path: &Path) -> Result<()> {
        let Some(path) = self.confined(area, path)? else { return files::create_dir(&normalize(path)) };
        for entry in fs::read_dir(&path).map_err(|e| Error::new(format!("cannot list {}: {e}", path.display())))? {
            let entry = entry.map_err(|e| Error::new(format!("cannot list {}: {e}", path.display())))?;
            remove_no_follow(&entry.path())?;
        }
        Ok(())
    }

    /// Deletes the whole workspace, for `ccl-coverage clean`: only after
    /// [`Self::check_claimed`] found the harness's marker, under the lock.
    pub(crate) fn delete_all(&self) -> Result<()> {
        remove_no_follow(&self.root)
    }

    /// An error unless `area` is a real folder of the workspace, or absent:
    /// a symlink would have the harness write and delete elsewhere.
    pub(crate) fn check_area(&self, area: Area) -> Result<()> {
        let dir = self.area(area);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => bail!(
                "refusing to use {}: it is a symlink (the workspace's own folders must be real folders)",
                dir.display()
            ),
            Ok(m) if !m.is_dir() => bail!("refusing to use {}: it is not a folder", dir.display()),
            _ => Ok(()),
        }
    }

    /// Makes `staged` (a folder of `report.new/`) the report: exchanged with
    /// `report/` in one step (`renameat2(RENAME_EXCHANGE)`), so a reader sees
    /// the old report or the new one, never a mix or none; the old one is
    /// then deleted. Only where the filesystem cannot exchange, two renames,
    /// undone if the second fails.
    pub(crate) fn install_report(&self, staged: &Path) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let report = self.area(Area::Report);
        self.check_area(Area::ReportStaging)?;
        self.check_area(Area::Report)?;
        if !fs::symlink_metadata(staged).is_ok_and(|m| m.is_dir()) {
            bail!("cannot install the report: {} is not there", staged.display());
        }
        let moved = |from: &Path, to: &Path| {
            fs::rename(from, to)
                .map_err(|e| Error::new(format!("cannot move {} to {}: {e}", from.display(), to.display())))
        };
        if !report.exists() {
            return moved(staged, &report);
        }
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).expect("paths hold no NUL");
        let (from, to) = (c(staged), c(&report));
        // SAFETY: two NUL-terminated paths, relative to no directory fd.
        let exchanged = unsafe {
            libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_EXCHANGE)
        };
        if exchanged == 0 {
            return remove_no_follow(staged);
        }
        let error = std::io::Error::last_os_error();
        if !matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) {
            bail!("cannot exchange {} with {}: {error}", staged.display(), report.display());
        }
        let old = self.root.join("report.old");
        if old.exists() {
            remove_no_follow(&old)?;
        }
        moved(&report, &old)?;
        if let Err(e) = moved(staged, &report) {
            // The last good report goes back where it was.
            moved(&old, &report)?;
            return Err(e);
        }
        remove_no_follow(&old)
    }

    /// Moves each top-level entry of `staged` into `report/`, replacing its
    /// old version and keeping the entries it does not have: what a run of
    /// only some report steps wrote.
    pub(crate) fn install_report_entries(&self, staged: &Path) -> Result<()> {
        let report = self.area(Area::Report);
        self.check_area(Area::Report)?;
        files::create_dir(&report)?;
        for entry in fs::read_dir(staged).map_err(|e| Error::new(format!("cannot list {}: {e}", staged.display())))? {
            let entry = entry.map_err(|e| Error::new(format!("cannot list {}: {e}", staged.display())))?;
            let to = report.join(entry.file_name());
            if fs::symlink_metadata(&to).is_ok() {
                remove_no_follow(&to)?;
            }
            fs::rename(entry.path(), &to)
                .map_err(|e| Error::new(format!("cannot move {} to {}: {e}", entry.path().display(), to.display())))?;
        }
        Ok(())
    }

    /// Removes one file (or symlink) inside `area`; a missing file is fine.
    pub(crate) fn remove(&self, area: Area, path: &Path) -> Result<()> {
        match self.confined(area, path)? {
            Some(path) => remove_no_follow(&path),
            None => Ok(()),
        }
    }

    /// Moves a damaged trial record, `results/<slug>.json`, to
    /// `quarantine/<slug>/result.json`: the one move out of `results/`,
    /// whose records the harness itself wrote. Neither `results/` nor the
    /// record may be a symlink.
    pub(crate) fn quarantine_result(&self, slug: &str, file: &Path) -> Result<PathBuf> {
        let results = self.results_dir();
        let real = |p: &Path, dir: bool| {
            fs::symlink_metadata(p).is_ok_and(|m| if dir { m.file_type().is_dir() } else { m.file_type().is_file() })
        };
        if file.parent() != Some(results.as_path()) || !real(&results, true) || !real(file, false) {
            bail!("refusing to move {}: it is not a trial record in {}", file.display(), results.display());
        }
        let dir = self.trial_quarantine(slug);
        files::create_dir(&dir)?;
        let to = dir.join("result.json");
        fs::rename(file, &to)
            .map_err(|e| Error::new(format!("cannot move {} to {}: {e}", file.display(), to.display())))?;
        Ok(to)
    }

    /// Moves a file between the workspace's profile and quarantine folders.
    pub(crate) fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let areas = [Area::Profiles, Area::Quarantine];
        let inside = |p: &Path| areas.iter().any(|&a| normalize(p).starts_with(self.area(a)));
        if !inside(from) || !inside(to) {
            bail!(
                "refusing to move {} to {}: only profile and quarantine files may move",
                from.display(),
                to.display()
            );
        }
        let source = match self.confined(Area::Profiles, from) {
            Ok(found) => found,
            Err(_) => self.confined(Area::Quarantine, from)?,
        };
        let Some(source) = source else { bail!("cannot move {}: it does not exist", from.display()) };
        fs::rename(&source, to)
            .map_err(|e| Error::new(format!("cannot move {} to {}: {e}", source.display(), to.display())))
    }

    /// `path` normalised, if it is `area` or inside it and every folder from
    /// the workspace root down to it is a real folder (a symlinked
    /// `profiles/` would make deletion leave the workspace). `None` if it
    /// does not exist.
    fn confined(&self, area: Area, path: &Path) -> Result<Option<PathBuf>> {
        let area_dir = self.area(area);
        let path = normalize(path);
        if !path.starts_with(&area_dir) {
            bail!("refusing to delete {}: only {} may be cleaned", path.display(), area_dir.display());
        }
        let mut walk = self.root.clone();
        let parts: Vec<_> = path.strip_prefix(&self.root).expect("checked above").components().collect();
        for (i, part) in parts.iter().enumerate() {
            walk.push(part);
            match fs::symlink_metadata(&walk) {
                Ok(meta) if meta.file_type().is_symlink() && i + 1 < parts.len() => bail!(
                    "refusing to clean {}: {} is a symlink (the workspace's own folders must be real folders)",
                    path.display(),
                    walk.display()
                ),
                Ok(meta) if meta.file_type().is_symlink() && walk == area_dir => bail!(
                    "refusing to clean {}: {} is a symlink (the workspace's own folders must be real folders)",
                    path.display(),
                    walk.display()
                ),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => bail!("cannot inspect {}: {e}", walk.display()),
            }
        }
        Ok(Some(path))
    }
}

/// `path` with symlinks resolved as far as it exists, the rest appended.
fn canonical(path: &Path) -> PathBuf {
    let mut existing = normalize(path);
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = fs::canonicalize(&existing) {
            return rest.iter().rev().fold(real, |p, part: &std::ffi::OsString| p.join(part));
        }
        match (existing.file_name().map(ToOwned::to_owned), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return normalize(path),
        }
    }
}

fn preview(entries: &[String]) -> String {
    let shown: Vec<&str> = entries.iter().take(3).map(String::as_str).collect();
    let more = entries.len().saturating_sub(shown.len());
    if more > 0 { format!("{}, and {more} more", shown.join(", ")) } else { shown.join(", ") }
}

/// Removes a file, a symlink (not its target) or a folder tree.
fn remove_no_follow(path: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| Error::new(format!("cannot inspect {}: {e}", path.display())))?;
    let result = if meta.is_dir() { fs::remove_dir_all(path) } else { fs::remove_file(path) };
    result.map_err(|e| Error::new(format!("cannot delete {}: {e}", path.display())))
}

/// Removes `.` and `..` lexically, so `starts_with` checks cannot be fooled
/// and paths read the same in every report.
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_files_are_what_the_workspace_writes() {
        let ws = Workspace::new(Path::new("/ws")).unwrap();
        let files = trial_files("A.1K.x");
        let paths = [
            ws.trial_profiles("A.1K.x"),
            crate::coverage::profiles::trial_profdata(&ws, "A.1K.x"),
            ws.trial_quarantine("A.1K.x"),
            ws.trial_log("A.1K.x"),
            ws.trial_result("A.1K.x"),
            ws.trial_cases("A.1K.x"),
            ws.trial_rerun_log("A.1K.x"),
        ];
        for (file, path) in files.iter().zip(paths) {
            assert_eq!(ws.root().join(file), path);
        }
        assert!(!files.iter().any(|f| RESERVED_FILES.contains(&f.as_str())));
        // A slug `run` would be the run record's file.
        assert!(trial_files("run").iter().any(|f| RESERVED_FILES.contains(&f.as_str())));
    }

    #[test]
    fn slugs_must_be_one_safe_file_name() {
        assert!(check_slug("AllReduce.1K.ring").is_ok());
        for bad in ["", ".", "..", ".hidden", "a/b", "a\nb", "a\u{7f}"] {
            assert!(check_slug(bad).is_err(), "{bad:?}");
        }
        assert!(check_slug(&"x".repeat(246)).is_ok());
        assert!(check_slug(&"x".repeat(247)).unwrap_err().contains("at most 246"));
    }
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        (dir, ws)
    }

    #[test]
    fn clear_empties_a_trial_folder_but_keeps_it() {
        let (_d, ws) = setup();
        let trial = ws.trial_profiles("AllReduce.1K");
        files::create_dir(&trial.join("nested")).unwrap();
        fs::write(trial.join("a.profraw"), "x").unwrap();
        fs::write(trial.join("nested/b.profraw"), "x").unwrap();
        ws.clear(Area::Profiles, &trial).unwrap();
        assert!(trial.is_dir());
        assert_eq!(fs::read_dir(&trial).unwrap().count(), 0);
    }

    #[test]
    fn clear_never_follows_symlinks_out_of_the_workspace() {
        let (d, ws) = setup();
        let outside = d.path().join("precious");
        files::create_dir(&outside).unwrap();
        fs::write(outside.join("keep.txt"), "x").unwrap();
        let trial = ws.trial_profiles("T");
        files::create_dir(&trial).unwrap();
        symlink(&outside, trial.join("link")).unwrap();
        symlink(outside.join("keep.txt"), trial.join("file-link")).unwrap();
        ws.clear(Area::Profiles, &trial).unwrap();
        assert!(outside.join("keep.txt").exists(), "target of a symlink survives");
        assert!(!trial.join("link").exists());
    }

    #[test]
    fn clear_refuses_symlinked_area_and_paths_outside_it() {
        let (d, ws) = setup();
        let outside = d.path().join("elsewhere");
        files::create_dir(&outside).unwrap();
        fs::write(outside.join("keep.profraw"), "x").unwrap();
        fs::remove_dir(ws.area(Area::Profiles)).unwrap();
        symlink(&outside, ws.area(Area::Profiles)).unwrap();
        let err = ws.clear(Area::Profiles, &ws.area(Area::Profiles)).unwrap_err().to_string();
        assert!(err.contains("is a symlink"), "{err}");
        assert!(outside.join("keep.profraw").exists());

        let escape = ws.area(Area::Report).join("../results");
        let err = ws.clear(Area::Report, &escape).unwrap_err().to_string();
        assert!(err.contains("refusing to delete"), "{err}");
        let err = ws.clear(Area::Report, &ws.area(Area::Profiles)).unwrap_err().to_string();
        assert!(err.contains("refusing to delete"), "{err}");
    }

    #[test]
    fn atomic_write_replaces_whole_files() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (_d, ws) = setup();
        let path = ws.results_dir().join("run.json");
        // A reader racing a writer sees one whole version or the other, never
        // an empty or half-written file (which a plain truncate-and-write shows).
        let versions = [vec![b'a'; 1 << 20], vec![b'b'; 1 << 20]];
        files::write_atomic(&path, &versions[0]).unwrap();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let reader = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(Ordering::SeqCst) || reads == 0 {
                    let seen = fs::read(&path).unwrap();
                    assert!(
                        seen.len() == 1 << 20 && (seen[0] == b'a' || seen[0] == b'b'),
                        "torn read: {} bytes",
                        seen.len()
                    );
                    assert!(seen.iter().all(|&b| b == seen[0]), "mixed versions");
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..50 {
            files::write_atomic(&path, &versions[i % 2]).unwrap();
        }
        done.store(true, Ordering::SeqCst);
        assert!(reader.join().unwrap() > 0);
        assert_eq!(fs::read(&path).unwrap(), versions[1]);
        let left: Vec<_> = fs::read_dir(ws.results_dir()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["run.json"], "no temporary file is left behind");
    }

    #[test]
    fn portable_names_have_no_colons_and_stay_apart() {
        assert_eq!(
            portable_name("amdgcn-amd-amdhsa.gfx942:sramecc+:xnack-.0.h-1.profraw"),
            "amdgcn-amd-amdhsa.gfx942%3Asramecc+%3Axnack-.0.h-1.profraw"
        );
        assert_ne!(portable_name("gfx942:xnack-"), portable_name("gfx942_xnack-"));
        assert_eq!(portable_name("h-1-2_0.profraw"), "h-1-2_0.profraw");
    }
}
