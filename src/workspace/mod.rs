//! The workspace: everything a run writes, and the contract between the
//! `collectives` and `coverage_report` binaries.
//!
//! ```text
//! <ws>/build.json             which build the profiles belong to (build/cache/manifest.rs)
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
//! config or the sources, folders the whole system shares (`/tmp`,
//! `/var/tmp`, `/dev/shm`, `/run`, …) and mount points ([`Workspace::claim`]).
//! Deletion is confined to `profiles/`, `quarantine/`, `cases/` and `report/`
//! of a marked workspace. Every create, write, read, rename and delete goes
//! through a handle on the workspace folder that follows no link at any step
//! ([`confined`]): a planted link is refused and named.

pub(crate) mod confined;
pub(crate) mod files;
pub(crate) mod lock;

use crate::bail;
use crate::error::{Context, Error, Result};
use confined::{Beneath, EntryKind};
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
    /// Whether the harness created the folder itself (rather than adopting
    /// an empty one): `clean` removes the folder only then.
    #[serde(default)]
    pub(crate) created_root: bool,
}

/// A folder the workspace must not hold, and (for sources, whose hash keys
/// the build) must not lie inside either.
#[derive(Debug, Clone)]
pub(crate) struct Protected {
    what: &'static str,
    path: PathBuf,
    inside_too: bool,
    /// Top-level entries of `path` left out of the build key
    /// (`hash_exclude`): a workspace inside one keys nothing.
    excluded: Vec<String>,
}

impl Protected {
    pub(crate) fn holding(what: &'static str, path: PathBuf) -> Protected {
        Protected { what, path, inside_too: false, excluded: Vec::new() }
    }

    /// Sources: a workspace may neither hold them nor lie inside them,
    /// unless inside one of their `excluded` top-level entries.
    pub(crate) fn holding_or_inside(what: &'static str, path: PathBuf, excluded: Vec<String>) -> Protected {
        Protected { what, path, inside_too: true, excluded }
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
pub fn check_slug(slug: &str) -> Result<()> {
    const LONGEST_SUFFIX: usize = ".profdata".len();
    if slug.is_empty() || slug.starts_with('.') || slug.contains('/') || slug.chars().any(char::is_control) {
        bail!("the trial's file name {slug:?} is not a safe file name");
    }
    if slug.len() + LONGEST_SUFFIX > FILE_NAME_BYTES {
        bail!(
            "the trial's file name is {} bytes long: expected at most {} (shorten the names)",
            slug.len(),
            FILE_NAME_BYTES - LONGEST_SUFFIX
        );
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
    /// `work/<slug>/`: a trial's working folder.
    Work,
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
            Area::Work => "work",
            Area::ReportStaging => "report.new",
        }
    }
}

impl Workspace {
    /// Uses `root` (made absolute against the current directory).
    pub fn new(root: &Path) -> Result<Self> {
        let root = std::path::absolute(root)
            .with_context(|| format!("cannot make workspace path {} absolute", root.display()))?;
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

    /// A trial's working folder (its processes' current directory): made
    /// empty before it runs, so that nothing a trial writes there lands in
    /// the shared build cache, and deleted when it passes.
    pub(crate) fn trial_work(&self, slug: &str) -> PathBuf {
        self.area(Area::Work).join(slug)
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
    /// it is last (`results::run_json::RunJsonWriter`).
    pub(crate) fn writers_lock_file(&self) -> PathBuf {
        self.root.join(".writers.lock")
    }

    pub(crate) fn marker_file(&self) -> PathBuf {
        self.root.join(MARKER)
    }

    /// Every create, write, read, rename and delete under the workspace goes
    /// through this handle on its folder ([`confined`]): no link is followed.
    pub(crate) fn beneath(&self) -> Result<Beneath> {
        Beneath::open(&self.root)
    }

    /// Writes `contents` to `path` (under the workspace) atomically. Never
    /// the ownership marker, which only [`Self::claim`] writes: a name taken
    /// from a record or shard that leads there is refused.
    pub(crate) fn write(&self, path: &Path, contents: &[u8]) -> Result<()> {
        if normalize(&self.root.join(path)) == normalize(&self.marker_file()) {
            bail!(
                "refusing to write {}: the workspace's marker is written only when the harness claims the folder, never copied",
                path.display()
            );
        }
        self.beneath()?.write_atomic(path, contents)
    }

    /// Creates or empties the file `path` and writes `contents`: a log's head.
    pub(crate) fn write_new(&self, path: &Path, contents: &[u8]) -> Result<()> {
        self.beneath()?.write_new(path, contents)
    }

    /// Creates the folder `path` (under the workspace) and the ones above it.
    pub(crate) fn create_dir(&self, path: &Path) -> Result<()> {
        self.beneath()?.create_dir_all(path)
    }

    /// The regular file `path`, opened for reading (see [`Beneath::open_read`]).
    pub(crate) fn open_read(&self, path: &Path) -> Result<fs::File> {
        self.beneath()?.open_read(path)
    }

    /// The bytes of the regular file `path`; `None` when it does not exist.
    pub(crate) fn read_opt(&self, path: &Path) -> Result<Option<Vec<u8>>> {
        if fs::symlink_metadata(&self.root).is_err() {
            return Ok(None);
        }
        let Some(mut file) = self.beneath()?.open_read_opt(path)? else { return Ok(None) };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
        Ok(Some(bytes))
    }

    /// The text of the regular file `path`.
    pub(crate) fn read_to_string(&self, path: &Path) -> Result<String> {
        let bytes = self
            .read_opt(path)?
            .ok_or_else(|| Error::new(format!("cannot read {}: it does not exist", path.display())))?;
        String::from_utf8(bytes)
            .map_err(|e| Error::new(format!("cannot read {}: it is not UTF-8 text ({e})", path.display())))
    }

    /// A log's text, bytes that are not UTF-8 replaced; empty when it cannot
    /// be read (see [`files::read_lossy`]).
    pub(crate) fn read_lossy(&self, path: &Path) -> String {
        self.read_opt(path).ok().flatten().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
    }

    /// The SHA-256 of the regular file `path`, in hex.
    pub(crate) fn sha256(&self, path: &Path) -> Result<String> {
        files::sha256_of(self.open_read(path)?, path)
    }

    /// Opens (creating it, never truncating) a lock file of the workspace.
    pub(crate) fn open_lock(&self, path: &Path) -> Result<fs::File> {
        self.beneath()?.open_lock(path)
    }

    /// Makes `path` ready for a tool that writes it by its path
    /// (llvm-profdata's `-o`, llvm-cov's `-output-dir`): its folders are
    /// created as real folders and whatever lies there is removed; a link
    /// there is refused, never written through.
    pub(crate) fn clear_for_tool(&self, path: &Path) -> Result<()> {
        let beneath = self.beneath()?;
        if let Some(parent) = path.parent() {
            beneath.create_dir_all(parent)?;
        }
        match beneath.kind(path)? {
            Some(EntryKind::Link) => bail!(
                "refusing to write {}: it is a symlink, not a file the harness wrote; the harness follows no link in its workspace (remove it)",
                path.display()
            ),
            Some(_) => beneath.remove(path),
            None => Ok(()),
        }
    }

    /// What `path` is, not followed; `None` when nothing is there.
    pub(crate) fn kind(&self, path: &Path) -> Result<Option<EntryKind>> {
        self.beneath()?.kind(path)
    }

    /// The entries of the folder `path`, and what each is (not followed).
    pub(crate) fn list(&self, path: &Path) -> Result<Vec<(std::ffi::OsString, EntryKind)>> {
        Ok(self.beneath()?.list(path)?.unwrap_or_default())
    }

    /// Makes sure the workspace is ours to write in, creating and marking it
    /// if it is new (or an empty folder). Refused: a symlink, `/`, a folder
    /// the whole system shares or a mount point, a folder that holds or lies
    /// inside one of `protected` (what, path), a non-empty folder without the
    /// marker, and a workspace of another config.
    pub(crate) fn claim(&self, config: &str, config_path: &Path, protected: &[Protected]) -> Result<()> {
        self.check_place(protected)?;
        let created_root = match fs::symlink_metadata(&self.root) {
            Ok(meta) if !meta.is_dir() => bail!("CCL_COV_WORKSPACE={} is not a folder", self.root.display()),
            Ok(_) => {
                if let Some(marker) = self.read_marker()? {
                    return self.check_config(&marker, config, config_path);
                }
                let entries = self.entries()?;
                let legacy = entries.iter().all(|e| LEGACY_ENTRIES.contains(&e.as_str())) && self.has_build_record();
                if legacy {
                    crate::reporter::emit(crate::reporter::Event::WorkspaceAdopted { root: &self.root });
                } else if !entries.is_empty() {
                    bail!(
                        "refusing to use {} as the workspace: the folder is not empty ({}) and ccl-coverage did not create it (it has no {MARKER} marker); the harness deletes inside its workspace, so point CCL_COV_WORKSPACE at a new or empty folder",
                        self.root.display(),
                        preview(&entries)
                    );
                }
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let unwritable = |e: std::io::Error| {
                    Error::from(e).context(format_args!(
                        "the workspace {} is not writable: cannot create it",
                        self.root.display()
                    ))
                };
                if let Some(parent) = self.root.parent() {
                    fs::create_dir_all(parent).map_err(unwritable)?;
                }
                match fs::create_dir(&self.root) {
                    Ok(()) => true,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
                    Err(e) => return Err(unwritable(e)),
                }
            }
            Err(e) => {
                return Err(
                    Error::from(e).context(format_args!("cannot inspect the workspace {}", self.root.display()))
                );
            }
        };
        let marker = Marker {
            tool: "ccl-coverage".into(),
            config: config.into(),
            config_path: config_path.to_path_buf(),
            created_at: crate::exec::host::now(),
            created_root,
        };
        let text = serde_json::to_string_pretty(&marker).expect("marker serializes");
        self.beneath()?
            .write_atomic(&self.marker_file(), text.as_bytes())
            .with_context(|| format!("the workspace {} is not writable", self.root.display()))?;
        self.create().with_context(|| format!("the workspace {} is not writable", self.root.display()))
    }

    /// For readers that must not create anything (`coverage_report`): the
    /// workspace must exist, carry the marker, and belong to `config`.
    /// `entry`: the command the person ran, which the hint names.
    pub(crate) fn check_claimed(
        &self,
        config: &str,
        config_path: &Path,
        protected: &[Protected],
        entry: crate::reporter::Entry,
    ) -> Result<()> {
        self.check_place(protected)?;
        match self.read_marker()? {
            Some(marker) => self.check_config(&marker, config, config_path),
            None => bail!(
                "{} is not a ccl-coverage workspace (no {MARKER} marker); run `{}` first, with the same CCL_COV_CONFIG and CCL_COV_WORKSPACE",
                self.root.display(),
                entry.trials()
            ),
        }
    }

    /// For a workspace read only as input (a shard to merge): it carries the
    /// marker of `config`. Nothing is created, locked or written.
    pub(crate) fn check_marked(&self, config: &str) -> Result<()> {
        match self.read_marker()? {
            Some(marker) if marker.config == config => Ok(()),
            Some(marker) => bail!("{} holds the results of config {:?}", self.root.display(), marker.config),
            None => bail!("{} is not a ccl-coverage workspace (no {MARKER} marker)", self.root.display()),
        }
    }

    /// Refuses a place no workspace may be, whatever it holds (see [`Self::claim`]).
    pub(crate) fn check_place(&self, protected: &[Protected]) -> Result<()> {
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
        if let Some(why) = shared_folder(&root) {
            bail!(
                "refusing to use {} as the workspace: {why}; the harness deletes inside its workspace, so point CCL_COV_WORKSPACE at a folder of its own inside it (e.g. {})",
                self.root.display(),
                root.join("ccl-coverage").display()
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
            let keys_nothing = p.excluded.iter().any(|e| !e.is_empty() && root.starts_with(path.join(e)));
            if p.inside_too && root.starts_with(&path) && !keys_nothing {
                bail!(
                    "refusing to use {} as the workspace: it lies inside {} ({}), whose contents key the build; point CCL_COV_WORKSPACE elsewhere, or name the workspace's top-level folder there in hash_exclude",
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
        self.read_opt(&self.build_manifest())
            .ok()
            .flatten()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .is_some_and(|v| v.get("build_id").is_some_and(serde_json::Value::is_string))
    }

    fn read_marker(&self) -> Result<Option<Marker>> {
        let path = self.marker_file();
        match self.read_opt(&path)? {
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .with_context(|| format!("{} is not a ccl-coverage workspace marker", path.display())),
            None => Ok(None),
        }
    }

    fn entries(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = fs::read_dir(&self.root)
            .with_context(|| format!("cannot list {}", self.root.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Creates the workspace folders (and the workspace, if it is not there).
    pub fn create(&self) -> Result<()> {
        if fs::symlink_metadata(&self.root).is_err() {
            files::create_dir(&self.root)?;
        }
        let beneath = self.beneath()?;
        for dir in [self.area(Area::Profiles), self.logs_dir(), self.results_dir()] {
            beneath.create_dir_all(&dir)?;
        }
        Ok(())
    }

    /// Empties `path`, which must be `area` itself or inside it; the folder
    /// itself stays (or is created). No link on the way is followed: one is
    /// refused; links inside are unlinked, their targets untouched.
    pub(crate) fn clear(&self, area: Area, path: &Path) -> Result<()> {
        let path = self.in_area(area, path)?;
        let beneath = self.beneath()?;
        match beneath.kind(&path)? {
            None => beneath.create_dir_all(&path),
            Some(_) => beneath.empty(&path),
        }
    }

    /// Deletes what the harness made in the workspace, for `ccl-coverage
    /// clean`: only after [`Self::check_claimed`] found the harness's marker,
    /// under the lock. What it did not make stays, and is named; the lock
    /// files go in [`Self::finish_clean`], once the lock is let go.
    pub(crate) fn clean(&self) -> Result<Cleaned> {
        let marker = self.read_marker()?.ok_or_else(|| {
            Error::new(format!("refusing to clean {}: it has no {MARKER} marker", self.root.display()))
        })?;
        let beneath = self.beneath()?;
        let (mut kept, mut failed) = (Vec::new(), Vec::new());
        for name in self.entries()? {
            if name == MARKER || LOCK_ENTRIES.contains(&name.as_str()) {
                continue;
            }
            if OWN_ENTRIES.contains(&name.as_str()) {
                // One tree that cannot be deleted does not stop the rest.
                if let Err(e) = beneath.remove(&self.root.join(&name)) {
                    failed.push(e.to_string());
                }
            } else {
                kept.push(name);
            }
        }
        // What is left of the harness's own stays marked as such, for a
        // later clean to finish.
        if failed.is_empty() {
            beneath.remove(&self.marker_file())?;
        }
        Ok(Cleaned { kept, failed, created_root: marker.created_root })
    }

    /// After [`Self::clean`] and the lock's release: the lock files, then
    /// the folder itself when the harness created it and nothing else is
    /// left in it. Says what happened.
    pub(crate) fn finish_clean(&self, cleaned: &Cleaned) -> Result<()> {
        let beneath = self.beneath()?;
        for name in LOCK_ENTRIES {
            beneath.remove(&self.root.join(name))?;
        }
        let root = self.root.display();
        if !cleaned.failed.is_empty() {
            bail!(
                "cleaned the workspace {root} but for {} of what ccl-coverage made, left where it is (the marker stays, so that clean can finish later):\n  {}",
                cleaned.failed.len(),
                cleaned.failed.join("\n  ")
            );
        }
        let kept = preview(&cleaned.kept);
        let kept = (!cleaned.kept.is_empty()).then_some((kept.as_str(), cleaned.kept.len()));
        let folder_deleted = kept.is_none() && cleaned.created_root;
        if folder_deleted {
            fs::remove_dir(&self.root).with_context(|| format!("cannot delete {root}"))?;
        }
        crate::reporter::emit(crate::reporter::Event::WorkspaceCleaned { root: &self.root, kept, folder_deleted });
        Ok(())
    }

    /// An error unless `area` is a real folder of the workspace, or absent:
    /// a symlink would have the harness write and delete elsewhere.
    pub(crate) fn check_area(&self, area: Area) -> Result<()> {
        let dir = self.area(area);
        match self.kind(&dir)? {
            Some(EntryKind::Dir) | None => Ok(()),
            Some(kind) => bail!(
                "refusing to use {}: it is {} (the workspace's own folders must be real folders)",
                dir.display(),
                kind.describe()
            ),
        }
    }

    /// Makes `staged` (a folder of `report.new/`) the report: exchanged with
    /// `report/` in one step (`renameat2(RENAME_EXCHANGE)`), so a reader sees
    /// the old report or the new one, never a mix or none; the old one is
    /// then deleted. Only where the filesystem cannot exchange, two renames,
    /// undone if the second fails.
    pub(crate) fn install_report(&self, staged: &Path) -> Result<()> {
        let report = self.area(Area::Report);
        self.check_area(Area::ReportStaging)?;
        self.check_area(Area::Report)?;
        let staged = self.in_area(Area::ReportStaging, staged)?;
        let beneath = self.beneath()?;
        if beneath.kind(&staged)? != Some(EntryKind::Dir) {
            bail!("cannot install the report: {} is not there", staged.display());
        }
        if beneath.kind(&report)?.is_none() {
            return beneath.rename(&staged, &report);
        }
        if beneath.exchange(&staged, &report)? {
            return beneath.remove(&staged);
        }
        let old = self.root.join("report.old");
        beneath.remove(&old)?;
        beneath.rename(&report, &old)?;
        if let Err(e) = beneath.rename(&staged, &report) {
            // The last good report goes back where it was.
            beneath.rename(&old, &report)?;
            return Err(e);
        }
        beneath.remove(&old)
    }

    /// Moves each top-level entry of `staged` into `report/`, replacing its
    /// old version and keeping the entries it does not have: what a run of
    /// only some report steps wrote.
    pub(crate) fn install_report_entries(&self, staged: &Path) -> Result<()> {
        let report = self.area(Area::Report);
        self.check_area(Area::Report)?;
        let staged = self.in_area(Area::ReportStaging, staged)?;
        let beneath = self.beneath()?;
        beneath.create_dir_all(&report)?;
        for (name, _) in beneath.list(&staged)?.unwrap_or_default() {
            let to = report.join(&name);
            beneath.remove(&to)?;
            beneath.rename(&staged.join(&name), &to)?;
        }
        Ok(())
    }

    /// Removes one file or folder inside `area`; a missing one is fine. A
    /// link there is refused, as a link on the way is.
    pub(crate) fn remove(&self, area: Area, path: &Path) -> Result<()> {
        let path = self.in_area(area, path)?;
        let beneath = self.beneath()?;
        match beneath.kind(&path)? {
            Some(EntryKind::Link) => bail!(
                "refusing to delete {}: it is a symlink, not a file the harness wrote; the harness follows no link in its workspace (remove it)",
                path.display()
            ),
            _ => beneath.remove(&path),
        }
    }

    /// Moves what lies at `results/<slug>.json` (a record that cannot be
    /// trusted, or something that is not a record at all) to
    /// `quarantine/<slug>/result.json`: the one move out of `results/`.
    /// The move never opens it; a folder there is refused.
    pub(crate) fn quarantine_result(&self, slug: &str, file: &Path) -> Result<PathBuf> {
        let results = self.results_dir();
        let file = normalize(file);
        if file.parent() != Some(results.as_path()) || matches!(self.kind(&file)?, Some(EntryKind::Dir) | None) {
            bail!("refusing to move {}: it is not a trial record in {}", file.display(), results.display());
        }
        let to = self.trial_quarantine(slug).join("result.json");
        let beneath = self.beneath()?;
        beneath.remove(&to)?;
        beneath.create_dir_all(&self.trial_quarantine(slug))?;
        // A link moves as the link (never followed): the quarantine holds what was there.
        beneath.rename_any(&file, &to)?;
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
        self.beneath()?.rename(from, to)
    }

    /// `path` normalised, if it is `area` or inside it (the folders on the
    /// way are checked by every operation: a symlinked `profiles/` would
    /// make deletion leave the workspace).
    fn in_area(&self, area: Area, path: &Path) -> Result<PathBuf> {
        let area_dir = self.area(area);
        let path = normalize(path);
        if !path.starts_with(&area_dir) {
            bail!("refusing to delete {}: only {} may be cleaned", path.display(), area_dir.display());
        }
        Ok(path)
    }
}

/// What `clean` left of a workspace.
#[derive(Debug, Clone)]
pub(crate) struct Cleaned {
    /// Entries of the folder the harness did not make, kept.
    pub(crate) kept: Vec<String>,
    /// Why each of the harness's own entries that could not be deleted was
    /// left.
    pub(crate) failed: Vec<String>,
    pub(crate) created_root: bool,
}

/// What the harness makes at the top of a workspace (besides its marker and
/// lock files): what `clean` deletes.
const OWN_ENTRIES: [&str; 15] = [
    "build.json",
    "shards.json",
    "profiles",
    "quarantine",
    "logs",
    "results",
    "report",
    "report.new",
    "report.old",
    "cases",
    "work",
    ".lock",
    ".writers.lock",
    ".owner.json",
    "shared-fs",
];

/// The lock files of [`lock`], which `clean` removes once it let go of them.
const LOCK_ENTRIES: [&str; 2] = [".owner.lock", ".owner.guard"];

/// Folders the whole system shares: never a workspace, which the harness
/// empties (nor their usual children below `/run` and `/var`).
const SHARED_FOLDERS: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/run",
    "/run/lock",
    "/run/shm",
    "/run/user",
    "/var",
    "/var/lib",
    "/var/cache",
    "/var/log",
    "/dev",
    "/proc",
    "/sys",
    "/usr",
    "/usr/local",
    "/etc",
    "/home",
    "/opt",
    "/srv",
    "/mnt",
    "/media",
    "/boot",
    "/root",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
];

/// Why `root` (resolved) is not a folder a workspace may be: a folder the
/// whole system shares, the temporary or runtime folder of this session,
/// or a mount point (a file system of its own, often one other programs use).
fn shared_folder(root: &Path) -> Option<String> {
    if SHARED_FOLDERS.iter().any(|f| root == Path::new(f)) {
        return Some("it is a folder the whole system shares (other programs keep their files there)".into());
    }
    let session = [("TMPDIR", "the temporary folder"), ("XDG_RUNTIME_DIR", "your session's runtime folder")];
    for (var, what) in session {
        if std::env::var_os(var).is_some_and(|d| !d.is_empty() && canonical(Path::new(&d)) == root) {
            return Some(format!("it is {what} (${var}), which other programs share"));
        }
    }
    if root.parent().is_some_and(|p| p == Path::new("/run/user")) {
        return Some("it is a session's runtime folder, which other programs share".into());
    }
    if is_mount_point(root) {
        return Some(format!(
            "it is a mount point (a file system of its own is mounted at {}), which is not the harness's to empty",
            root.display()
        ));
    }
    None
}

/// Whether a file system is mounted at `dir`: listed in
/// `/proc/self/mountinfo` (bind mounts too), or on another device than its parent.
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::metadata(dir) else { return false };
    if let Ok(info) = fs::read_to_string("/proc/self/mountinfo") {
        // Field 5 is the mount point, with spaces and the like as `\040` octal escapes.
        let listed = info.lines().filter_map(|l| l.split(' ').nth(4)).any(|p| Path::new(&unescape_octal(p)) == dir);
        if listed {
            return true;
        }
    }
    dir.parent().and_then(|p| fs::metadata(p).ok()).is_some_and(|parent| parent.dev() != meta.dev())
}

/// `/proc/self/mountinfo`'s `\NNN` escapes undone.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        if let Some(d) = escape {
            out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
    fn a_workspace_inside_the_sources_is_refused_unless_in_an_excluded_entry() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("project");
        fs::create_dir_all(src.join("target")).unwrap();
        let ws = Workspace::new(&src.join("target/ccl-coverage/x")).unwrap();
        let sources = |excluded: &[&str]| {
            [Protected::holding_or_inside(
                "the library sources",
                src.clone(),
                excluded.iter().map(ToString::to_string).collect(),
            )]
        };
        let err = ws.check_place(&sources(&[])).unwrap_err().to_string();
        assert!(err.contains("it lies inside the library sources"), "{err}");
        assert!(err.contains("hash_exclude"), "says how: {err}");
        ws.check_place(&sources(&["target"])).unwrap();
        assert!(ws.check_place(&sources(&["targ", "build"])).is_err(), "a prefix of the name is not the entry");
        // Holding the sources is refused whatever is excluded.
        let above = Workspace::new(dir.path()).unwrap();
        assert!(
            above.check_place(&sources(&["target"])).unwrap_err().to_string().contains("it holds the library sources")
        );
    }

    #[test]
    fn slugs_must_be_one_safe_file_name() {
        assert!(check_slug("AllReduce.1K.ring").is_ok());
        for bad in ["", ".", "..", ".hidden", "a/b", "a\nb", "a\u{7f}"] {
            assert!(check_slug(bad).is_err(), "{bad:?}");
        }
        assert!(check_slug(&"x".repeat(246)).is_ok());
        assert!(check_slug(&"x".repeat(247)).unwrap_err().to_string().contains("at most 246"));
    }
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        (dir, ws)
    }

    /// A name from a record that leads to the marker, however spelt, is
    /// refused: only `claim` writes it.
    #[test]
    fn the_marker_is_written_only_by_claim() {
        let (_d, ws) = setup();
        for path in [ws.marker_file(), ws.trial_profiles("T").join("../../.ccl-coverage-workspace")] {
            let err = ws.write(&path, b"{}").unwrap_err().to_string();
            assert!(err.contains("the workspace's marker is written only when the harness claims"), "{err}");
        }
        assert!(!ws.marker_file().exists());
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
