//! The shared fixture: the library built once with coverage instrumentation,
//! plus the uninstrumented test binaries, cached on disk.
//!
//! The cache key covers what changes the result: the resolved build commands,
//! the library and test sources, the toolchain and the coverage mode. A build
//! happens under a file lock, so concurrent processes (nextest runs one per
//! trial) wait for one build instead of racing; an interrupted build is
//! resumed because it has no manifest yet. A workspace whose recorded build
//! differs loses its profiles and reports: they describe other objects.

use crate::bail;
use crate::config::{LoadedConfig, Step};
use crate::context::Context;
use crate::device::{self, DeviceDecision};
use crate::error::{Error, Result};
use crate::objects::{self, Instrumentation};
use crate::process::Cmd;
use crate::template::Vars;
use crate::toolchain::{self, Toolchain};
use crate::workspace::{self, Area, Workspace};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Stands for the build directory in the cache key, which must not depend
/// on where the cache lives.
const BUILD_DIR_MARK: &str = "<build_dir>";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectRecord {
    pub path: PathBuf,
    pub instrumentation: Instrumentation,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub name: String,
    pub command: String,
    pub seconds: f64,
}

/// What a finished build is; written next to it and copied into workspaces.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BuildManifest {
    pub build_id: String,
    pub config: String,
    pub build_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub library_src: PathBuf,
    pub tests_src: PathBuf,
    pub objects: Vec<ObjectRecord>,
    pub toolchain: Toolchain,
    pub device: DeviceDecision,
    pub coverage_flags: Vec<String>,
    pub steps: Vec<StepRecord>,
    pub built_at: String,
}

impl BuildManifest {
    /// Objects llvm-cov should read: those that carry coverage mapping.
    pub fn instrumented_objects(&self) -> Vec<PathBuf> {
        self.objects.iter().filter(|o| o.instrumentation.is_instrumented()).map(|o| o.path.clone()).collect()
    }

    pub fn read(path: &Path) -> Result<BuildManifest> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| Error::new(format!("{} is not a build manifest: {e}", path.display())))
    }

    fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).expect("manifest serializes");
        workspace::write_atomic(path, text.as_bytes())
    }
}

/// Everything needed to run the build, resolved but not yet run.
pub struct BuildPlan {
    pub toolchain: Toolchain,
    pub device: DeviceDecision,
    pub coverage_flags: Vec<String>,
    pub key: String,
    pub build_dir: PathBuf,
    pub vars: Vars,
    pub library_steps: Vec<Cmd>,
    pub tests_steps: Vec<Cmd>,
    step_names: Vec<String>,
}

impl BuildPlan {
    pub fn new(ctx: &Context) -> Result<BuildPlan> {
        let loaded = &ctx.loaded;
        let config = &loaded.config;
        let toolchain = toolchain::resolve(&config.toolchain, &crate::config::process_env)?;
        let device = device::decide(ctx.device_mode, &config.coverage.device)?;
        let coverage_flags = config.coverage.host_flags.clone();
        let mut vars = build_vars(loaded, &toolchain, &coverage_flags);
        vars.set("build_dir", BUILD_DIR_MARK);
        let mut hasher = Sha256::new();
        let mut feed = |label: &str, value: &str| {
            hasher.update(label.as_bytes());
            hasher.update([0]);
            hasher.update(value.as_bytes());
            hasher.update([0]);
        };
        feed("harness", env!("CARGO_PKG_VERSION"));
        feed("cc", &format!("{} {}", toolchain.cc.path.display(), toolchain.cc.version));
        feed("cxx", &format!("{} {}", toolchain.cxx.path.display(), toolchain.cxx.version));
        feed("coverage", &coverage_flags.join(" "));
        feed("device", &device.enabled.to_string());
        let steps = config.library.steps.iter().chain(&config.tests.steps);
        for step in steps {
            let cmd = step_cmd(step, &vars)?;
            feed("step", &cmd.display());
        }
        for object in &config.library.objects {
            feed("object", &vars.render(object)?);
        }
        feed("bin_dir", &vars.render(&config.tests.bin_dir)?);
        let library_hash = hash_tree(&loaded.library_src(), &config.library.hash_exclude)?;
        let tests_hash = hash_tree(&loaded.tests_src(), &config.tests.hash_exclude)?;
        feed("library_src", &library_hash);
        feed("tests_src", &tests_hash);
        let key: String = hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();

        let build_dir = ctx.state_dir.join("builds").join(&key);
        vars.set("build_dir", build_dir.display().to_string());
        let library_steps = config.library.steps.iter().map(|s| step_cmd(s, &vars)).collect::<Result<_>>()?;
        let tests_steps = config.tests.steps.iter().map(|s| step_cmd(s, &vars)).collect::<Result<_>>()?;
        let step_names = config.library.steps.iter().chain(&config.tests.steps).map(|s| s.name.clone()).collect();
        Ok(BuildPlan { toolchain, device, coverage_flags, key, build_dir, vars, library_steps, tests_steps, step_names })
    }

    /// The manifest the build will have, without building: objects are not
    /// inspected yet. For dry runs.
    pub fn planned_manifest(&self, ctx: &Context) -> Result<BuildManifest> {
        let config = &ctx.loaded.config;
        let objects = config
            .library
            .objects
            .iter()
            .map(|o| Ok(ObjectRecord { path: PathBuf::from(self.vars.render(o)?), instrumentation: Instrumentation::default() }))
            .collect::<Result<_>>()?;
        Ok(BuildManifest {
            build_id: self.key.clone(),
            config: config.name.clone(),
            build_dir: self.build_dir.clone(),
            bin_dir: PathBuf::from(self.vars.render(&config.tests.bin_dir)?),
            library_src: ctx.loaded.library_src(),
            tests_src: ctx.loaded.tests_src(),
            objects,
            toolchain: self.toolchain.clone(),
            device: self.device.clone(),
            coverage_flags: self.coverage_flags.clone(),
            steps: self
                .library_steps
                .iter()
                .chain(&self.tests_steps)
                .zip(&self.step_names)
                .map(|(cmd, name)| StepRecord { name: name.clone(), command: cmd.display(), seconds: 0.0 })
                .collect(),
            built_at: String::new(),
        })
    }

    /// Whether a finished build with this key is already cached.
    pub fn is_cached(&self) -> bool {
        self.manifest_path().is_file()
    }

    fn manifest_path(&self) -> PathBuf {
        self.build_dir.join("build.json")
    }

    /// Builds (or reuses) the fixture and returns its manifest.
    pub fn build(&self, ctx: &Context) -> Result<BuildManifest> {
        workspace::create_dir(self.build_dir.parent().expect("builds/<key>"))?;
        let lock_path = self.build_dir.with_extension("lock");
        let lock = File::create(&lock_path).map_err(|e| Error::new(format!("cannot create {}: {e}", lock_path.display())))?;
        if lock.try_lock().is_err() {
            eprintln!("ccl-coverage: waiting for another process building {}", self.build_dir.display());
            lock.lock().map_err(|e| Error::new(format!("cannot lock {}: {e}", lock_path.display())))?;
        }
        if let Ok(manifest) = BuildManifest::read(&self.manifest_path()) {
            eprintln!("ccl-coverage: reusing build {} ({})", self.key, self.build_dir.display());
            return Ok(manifest);
        }
        let config = &ctx.loaded.config;
        eprintln!("ccl-coverage: building {} as build {} in {}", config.name, self.key, self.build_dir.display());
        let logs = self.build_dir.join("logs");
        workspace::create_dir(&logs)?;
        let started = Instant::now();
        let mut records = Vec::new();
        let all: Vec<&Cmd> = self.library_steps.iter().chain(&self.tests_steps).collect();
        for (i, (cmd, name)) in all.iter().zip(&self.step_names).enumerate() {
            let step_started = Instant::now();
            let log = logs.join(format!("{:02}-{}.log", i + 1, slug(name)));
            eprintln!("ccl-coverage:   [{}/{}] {name}", i + 1, all.len());
            std::fs::write(&log, format!("$ {}\n", cmd.display())).map_err(|e| Error::new(format!("cannot write {}: {e}", log.display())))?;
            cmd.run_logged(&log).map_err(|e| e.context(format!("build step {name:?} failed")))?;
            let seconds = step_started.elapsed().as_secs_f64();
            eprintln!("ccl-coverage:   [{}/{}] {name}: {seconds:.1}s", i + 1, all.len());
            records.push(StepRecord { name: name.clone(), command: cmd.display(), seconds });
        }
        let objects = self.inspect_objects(ctx)?;
        let bin_dir = PathBuf::from(self.vars.render(&config.tests.bin_dir)?);
        if !bin_dir.is_dir() {
            bail!("the test build finished but tests.bin_dir {} does not exist", bin_dir.display());
        }
        let manifest = BuildManifest {
            build_id: self.key.clone(),
            config: config.name.clone(),
            build_dir: self.build_dir.clone(),
            bin_dir,
            library_src: ctx.loaded.library_src(),
            tests_src: ctx.loaded.tests_src(),
            objects,
            toolchain: self.toolchain.clone(),
            device: self.device.clone(),
            coverage_flags: self.coverage_flags.clone(),
            steps: records,
            built_at: crate::results::now(),
        };
        manifest.write(&self.manifest_path())?;
        eprintln!("ccl-coverage: build {} done in {:.1}s", self.key, started.elapsed().as_secs_f64());
        Ok(manifest)
    }

    /// Every configured object must exist and carry coverage mapping: an
    /// uninstrumented library would give an empty report much later.
    fn inspect_objects(&self, ctx: &Context) -> Result<Vec<ObjectRecord>> {
        let mut records = Vec::new();
        for (i, template) in ctx.loaded.config.library.objects.iter().enumerate() {
            let path = PathBuf::from(self.vars.render(template)?);
            if !path.is_file() {
                bail!(
                    "{}: library.objects[{i}]: the build finished but {} does not exist; fix the path or the build steps",
                    ctx.loaded.path.display(),
                    path.display()
                );
            }
            let instrumentation = objects::inspect(&path)?;
            if !instrumentation.is_instrumented() {
                bail!(
                    "{}: library.objects[{i}]: {} has no coverage mapping (__llvm_covmap/__llvm_covfun and __llvm_prf_cnts): the build did not apply {{coverage_flags}} to it",
                    ctx.loaded.path.display(),
                    path.display()
                );
            }
            records.push(ObjectRecord { path, instrumentation });
        }
        Ok(records)
    }
}

/// Makes `manifest` the workspace's build. Profiles and reports recorded for
/// another build are deleted: they describe other objects.
pub fn adopt(ws: &Workspace, manifest: &BuildManifest) -> Result<()> {
    ws.create()?;
    let lock = File::create(ws.lock_file()).map_err(|e| Error::new(format!("cannot create {}: {e}", ws.lock_file().display())))?;
    lock.lock().map_err(|e| Error::new(format!("cannot lock {}: {e}", ws.lock_file().display())))?;
    let previous = BuildManifest::read(&ws.build_manifest()).ok();
    match previous {
        Some(p) if p.build_id == manifest.build_id => return Ok(()),
        Some(p) => {
            eprintln!(
                "ccl-coverage: build changed ({} -> {}): deleting the workspace's profiles and reports of the old build",
                p.build_id, manifest.build_id
            );
            for area in [Area::Profiles, Area::Quarantine, Area::Report] {
                ws.clear(area, &ws.area(area))?;
            }
        }
        None => {}
    }
    manifest.write(&ws.build_manifest())
}

fn build_vars(loaded: &LoadedConfig, toolchain: &Toolchain, coverage_flags: &[String]) -> Vars {
    let mut vars = Vars::default();
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    vars.set("cc", toolchain.cc.path.display().to_string())
        .set("cxx", toolchain.cxx.path.display().to_string())
        .set("llvm_bin", toolchain.llvm_bin.display().to_string())
        .set("coverage_flags", coverage_flags.join(" "))
        .set("jobs", jobs.to_string())
        .set("config_dir", loaded.dir.display().to_string())
        .set("library_src", loaded.library_src().display().to_string())
        .set("tests_src", loaded.tests_src().display().to_string());
    vars
}

fn step_cmd(step: &Step, vars: &Vars) -> Result<Cmd> {
    let argv = vars.render_all(&step.argv)?;
    let mut cmd = Cmd::from_argv(&argv).expect("config validation requires a non-empty argv");
    for (k, v) in &step.env {
        cmd = cmd.env(k.clone(), vars.render(v)?);
    }
    let cwd = match &step.cwd {
        Some(dir) => vars.render(dir)?,
        None => vars.get("build_dir").unwrap_or_default().to_string(),
    };
    Ok(cmd.cwd(cwd).env_remove("__LLVM_PROFILE_RT_INIT_ONCE"))
}

fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// A hash of every file under `root` (paths and contents), leaving out hidden
/// entries and the top-level names in `exclude`.
pub fn hash_tree(root: &Path, exclude: &[String]) -> Result<String> {
    if !root.is_dir() {
        bail!("source folder {} does not exist", root.display());
    }
    let mut hasher = Sha256::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| Error::new(format!("cannot list {}: {e}", dir.display())))?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries.into_iter().rev() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') || (dir == root && exclude.contains(&name)) {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::new(format!("cannot inspect {}: {e}", path.display())))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                hasher.update(format!("L {rel} {}\0", target.display()).as_bytes());
            } else {
                let data = std::fs::read(&path).map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
                hasher.update(format!("F {rel} {}\0", data.len()).as_bytes());
                hasher.update(&data);
            }
        }
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_hash_sees_contents_and_skips_hidden_and_excluded() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.cc"), "int a;").unwrap();
        let base = hash_tree(root, &[]).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "x").unwrap();
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::write(root.join("build/out.o"), "x").unwrap();
        assert_eq!(hash_tree(root, &["build".into()]).unwrap(), base);
        assert_ne!(hash_tree(root, &[]).unwrap(), base, "build/ counts unless excluded");
        std::fs::write(root.join("src/a.cc"), "int b;").unwrap();
        assert_ne!(hash_tree(root, &["build".into()]).unwrap(), base);
    }

    fn manifest(build_id: &str) -> BuildManifest {
        let tool = crate::toolchain::Tool { path: "/llvm/bin/clang".into(), version: "clang version 22".into(), major: 22 };
        BuildManifest {
            build_id: build_id.into(),
            config: "t".into(),
            build_dir: "/b".into(),
            bin_dir: "/b/bin".into(),
            library_src: "/src".into(),
            tests_src: "/src/tests".into(),
            objects: Vec::new(),
            toolchain: Toolchain { cc: tool.clone(), cxx: tool.clone(), llvm_bin: "/llvm/bin".into(), llvm_profdata: tool.clone(), llvm_cov: tool },
            device: DeviceDecision { requested: crate::config::DeviceMode::Auto, enabled: false, reason: "r".into() },
            coverage_flags: Vec::new(),
            steps: Vec::new(),
            built_at: String::new(),
        }
    }

    #[test]
    fn a_new_build_invalidates_profiles_and_reports_of_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        adopt(&ws, &manifest("aaaa")).unwrap();
        let profile = ws.trial_profiles("T").join("x.profraw");
        let report = ws.report_dir().join("summary.json");
        let log = ws.trial_log("T");
        for file in [&profile, &report, &log] {
            workspace::create_dir(file.parent().unwrap()).unwrap();
            std::fs::write(file, "x").unwrap();
        }
        adopt(&ws, &manifest("aaaa")).unwrap();
        assert!(profile.exists() && report.exists(), "same build keeps its profiles");
        adopt(&ws, &manifest("bbbb")).unwrap();
        assert!(!profile.exists() && !report.exists(), "profiles of the old build were kept");
        assert!(log.exists(), "logs are not the harness's to delete");
        assert_eq!(BuildManifest::read(&ws.build_manifest()).unwrap().build_id, "bbbb");
    }

    #[test]
    fn missing_source_folder_is_an_error() {
        let err = hash_tree(Path::new("/no/such/src"), &[]).unwrap_err().to_string();
        assert!(err.contains("source folder /no/such/src does not exist"), "{err}");
    }
}
