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
//! Deletion is confined to `profiles/`, `quarantine/` and `report/`, never
//! follows a symlink, and refuses a workspace whose folders are symlinks.

use crate::bail;
use crate::error::{Error, Result};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// Files of the workspace that no trial may write, relative to its root.
pub const RESERVED_FILES: &[&str] = &["results/run.json", "results/junit.xml", "build.json", ".lock"];

/// Every file and folder the trial with file name `slug` owns, relative to
/// the workspace root (what `trial_profiles`, `trial_profdata`,
/// `trial_quarantine`, `trial_log` and `trial_result` return). Config
/// validation checks that no two trials share one.
pub fn trial_files(slug: &str) -> [String; 5] {
    [
        format!("profiles/{slug}"),
        format!("profiles/{slug}.profdata"),
        format!("quarantine/{slug}"),
        format!("logs/{slug}.log"),
        format!("results/{slug}.json"),
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
    if slug.len() + LONGEST_SUFFIX > crate::config::limits::FILE_NAME_BYTES {
        return Err(format!(
            "the trial's file name is {} bytes long: expected at most {} (shorten the names)",
            slug.len(),
            crate::config::limits::FILE_NAME_BYTES - LONGEST_SUFFIX
        ));
    }
    Ok(())
}

#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

/// The folders whose contents the harness may delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Area {
    Profiles,
    Quarantine,
    Report,
}

impl Area {
    fn dir_name(self) -> &'static str {
        match self {
            Area::Profiles => "profiles",
            Area::Quarantine => "quarantine",
            Area::Report => "report",
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

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn area(&self, area: Area) -> PathBuf {
        self.root.join(area.dir_name())
    }

    pub fn trial_profiles(&self, slug: &str) -> PathBuf {
        self.area(Area::Profiles).join(slug)
    }

    pub fn trial_quarantine(&self, slug: &str) -> PathBuf {
        self.area(Area::Quarantine).join(slug)
    }

    pub fn report_dir(&self) -> PathBuf {
        self.area(Area::Report)
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn trial_log(&self, slug: &str) -> PathBuf {
        self.logs_dir().join(format!("{slug}.log"))
    }

    pub fn results_dir(&self) -> PathBuf {
        self.root.join("results")
    }

    pub fn trial_result(&self, slug: &str) -> PathBuf {
        self.results_dir().join(format!("{slug}.json"))
    }

    pub fn build_manifest(&self) -> PathBuf {
        self.root.join("build.json")
    }

    pub fn lock_file(&self) -> PathBuf {
        self.root.join(".lock")
    }

    /// Creates the workspace folders.
    pub fn create(&self) -> Result<()> {
        for dir in [self.area(Area::Profiles), self.logs_dir(), self.results_dir()] {
            create_dir(&dir)?;
        }
        Ok(())
    }

    /// Empties `path`, which must be `area` itself or inside it; the folder
    /// itself stays (or is created). Symlinks inside are removed, never followed.
    pub fn clear(&self, area: Area, path: &Path) -> Result<()> {
        let path = match self.confined(area, path)? {
            Some(path) => path,
            None => return create_dir(&normalize(path)),
        };
        for entry in fs::read_dir(&path).map_err(|e| Error::new(format!("cannot list {}: {e}", path.display())))? {
            let entry = entry.map_err(|e| Error::new(format!("cannot list {}: {e}", path.display())))?;
            remove_no_follow(&entry.path())?;
        }
        Ok(())
    }

    /// Removes one file (or symlink) inside `area`; a missing file is fine.
    pub fn remove(&self, area: Area, path: &Path) -> Result<()> {
        match self.confined(area, path)? {
            Some(path) => remove_no_follow(&path),
            None => Ok(()),
        }
    }

    /// Moves a file between the workspace's profile and quarantine folders.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<()> {
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

/// Removes a file, a symlink (not its target) or a folder tree.
fn remove_no_follow(path: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| Error::new(format!("cannot inspect {}: {e}", path.display())))?;
    let result = if meta.is_dir() { fs::remove_dir_all(path) } else { fs::remove_file(path) };
    result.map_err(|e| Error::new(format!("cannot delete {}: {e}", path.display())))
}

pub fn create_dir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))
}

/// Removes `.` and `..` lexically, so `starts_with` checks cannot be fooled
/// and paths read the same in every report.
pub fn normalize(path: &Path) -> PathBuf {
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

/// Writes `contents` to `path` atomically (temporary file, then rename), so a
/// reader never sees half a file even if the run is interrupted.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = path.parent().ok_or_else(|| Error::new(format!("{} has no parent folder", path.display())))?;
    create_dir(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| Error::new(format!("cannot create a file in {}: {e}", dir.display())))?;
    std::io::Write::write_all(&mut tmp, contents)
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    tmp.persist(path).map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
    Ok(())
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
            crate::profiles::trial_profdata(&ws, "A.1K.x"),
            ws.trial_quarantine("A.1K.x"),
            ws.trial_log("A.1K.x"),
            ws.trial_result("A.1K.x"),
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
        create_dir(&trial.join("nested")).unwrap();
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
        create_dir(&outside).unwrap();
        fs::write(outside.join("keep.txt"), "x").unwrap();
        let trial = ws.trial_profiles("T");
        create_dir(&trial).unwrap();
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
        create_dir(&outside).unwrap();
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
        let (_d, ws) = setup();
        let path = ws.results_dir().join("run.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
    }
}
