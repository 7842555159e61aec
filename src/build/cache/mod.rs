//! The build cache: the library built once with coverage instrumentation,
//! plus the uninstrumented test binaries, cached on disk under a key
//! (`key.rs`) with the manifest that says what they are (`manifest.rs`),
//! made by the config's steps (`steps.rs`).
//!
//! A build happens under a file lock, so concurrent processes (nextest runs
//! one per trial) wait for one build instead of racing; an interrupted build
//! is resumed because it has no manifest yet. A workspace whose recorded
//! build differs loses its profiles and reports: they describe other objects.

mod identity;
mod key;
mod manifest;
pub(crate) mod steps;

use identity::hash_tree;
use key::{build_key, inputs, inputs_differ, library_objects};
pub(crate) use manifest::Measured;
use manifest::programs;
pub(crate) use manifest::sources_changed;
#[cfg(test)]
pub(crate) use manifest::test_manifest;
pub use manifest::{BuildManifest, ObjectRecord, select_device_objects};
use manifest::{SourceSums, StepRecord};
use steps::{build_vars, render_steps, run_step, slug, with_device_env};

use crate::bail;
use crate::build::rccl;
use crate::config::template::Vars;
use crate::context::Context;
use crate::device::{self, DeviceDecision};
use crate::error::{Context as _, Error, Result};
use crate::exec::process::Cmd;
use crate::reporter::{self, Event};
use crate::toolchain::objects::{self, Instrumentation};
use crate::toolchain::{self, Toolchain};
use crate::workspace::files::FileSum;
use crate::workspace::{Area, Workspace, files};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything needed to run the build, resolved but not yet run.
pub(crate) struct BuildPlan {
    pub(crate) toolchain: Toolchain,
    pub(crate) device: DeviceDecision,
    pub(crate) coverage: bool,
    pub(crate) coverage_flags: Vec<String>,
    pub(crate) coverage_link_flags: Vec<String>,
    pub(crate) key: String,
    /// `{build_dir}`.
    pub(crate) build_dir: PathBuf,
    pub(crate) cache_dir: PathBuf,
    pub(crate) existing_build: bool,
    pub(crate) bin_dir: PathBuf,
    pub(crate) vars: Vars,
    /// Steps to run, library first; empty parts are the existing builds used.
    pub(crate) steps: Vec<(String, Cmd)>,
    /// Objects of an existing build, already inspected.
    existing_objects: Option<Vec<ObjectRecord>>,
    /// The source trees' hashes the key was made from (library, tests);
    /// `None` for a part an existing build stands for.
    source_sums: (Option<String>, Option<String>),
    /// Why an existing build (`CCL_COV_BUILD_DIR`, `CCL_COV_TESTS_DIR`)
    /// cannot be used: the dry run still shows the whole plan and names
    /// them, [`Self::build`] fails with them. The key then stands for no build.
    pub(crate) problems: Vec<Error>,
    /// The inputs the config names (`key::inputs`), recorded in the manifest.
    inputs: Vec<(String, String)>,
}

impl BuildPlan {
    pub fn new(ctx: &Context) -> Result<BuildPlan> {
        let loaded = &ctx.loaded;
        let config = &loaded.config;
        // A dry run builds and runs nothing: no device probe either.
        let tools = (!ctx.dry_run).then(|| ctx.state_dir.join("tools"));
        let setup =
            BuildSetup::new(config, ctx.coverage, ctx.device_mode, tools.as_deref(), &crate::config::process_env)?;
        let mut vars = build_vars(loaded, &setup, ctx.jobs);
        let mut problems = Vec::new();
        let inputs = inputs(ctx, &setup, (ctx.existing_build.as_deref(), ctx.existing_tests.as_deref()))?;
        let (key, existing_objects, source_sums) = build_key(ctx, &setup, &mut vars, &mut problems)?;
        let cache_dir = ctx.state_dir.join("builds").join(&key);
        let build_dir = ctx.existing_build.clone().unwrap_or_else(|| cache_dir.clone());
        vars.set("build_dir", build_dir.display().to_string());
        let (steps, bin_dir) = render_steps(ctx, &vars, setup.rccl)?;
        let steps = with_device_env(steps, &setup.device);
        Ok(BuildPlan {
            toolchain: setup.toolchain,
            device: setup.device,
            coverage: ctx.coverage,
            coverage_flags: setup.coverage_flags,
            coverage_link_flags: setup.coverage_link_flags,
            key,
            build_dir,
            cache_dir,
            existing_build: ctx.existing_build.is_some(),
            bin_dir,
            vars,
            steps,
            existing_objects,
            source_sums,
            problems,
            inputs,
        })
    }

    /// The manifest the build will have, without building: objects are not
    /// inspected yet. For dry runs.
    pub(crate) fn planned_manifest(&self, ctx: &Context) -> Result<BuildManifest> {
        let objects = match &self.existing_objects {
            Some(objects) => objects.clone(),
            None => ctx
                .loaded
                .config
                .library
                .objects
                .iter()
                .map(|o| {
                    Ok(ObjectRecord {
                        path: PathBuf::from(self.vars.render(o)?),
                        instrumentation: Instrumentation::default(),
                        sum: None,
                        backend: None,
                        build_id: None,
                    })
                })
                .collect::<Result<_>>()?,
        };
        let steps = self
            .steps
            .iter()
            .map(|(name, cmd)| StepRecord { name: name.clone(), command: cmd.display(), seconds: 0.0 })
            .collect();
        Ok(self.manifest(ctx, objects, Vec::new(), steps))
    }

    fn manifest(
        &self,
        ctx: &Context,
        objects: Vec<ObjectRecord>,
        device_objects: Vec<ObjectRecord>,
        steps: Vec<StepRecord>,
    ) -> BuildManifest {
        BuildManifest {
            build_id: self.key.clone(),
            config: ctx.loaded.config.name.to_string(),
            build_dir: self.build_dir.clone(),
            cache_dir: self.cache_dir.clone(),
            existing_build: self.existing_build,
            bin_dir: self.bin_dir.clone(),
            library_src: ctx.loaded.library_src(),
            tests_src: ctx.loaded.tests_src(),
            coverage: self.coverage,
            objects,
            device_objects,
            toolchain: self.toolchain.clone(),
            device: self.device.clone(),
            coverage_flags: self.coverage_flags.clone(),
            coverage_link_flags: self.coverage_link_flags.clone(),
            steps,
            built_at: crate::exec::host::now(),
            programs: Vec::new(),
            sources: None,
            discovered: None,
            contents_sha256: None,
            inputs: Some(self.inputs.clone()),
        }
    }

    /// The sources' hashes for the manifest: those the key was made from,
    /// the others (a part an existing build stands for) hashed now.
    fn source_sums(&self, ctx: &Context) -> Option<SourceSums> {
        let config = &ctx.loaded.config;
        let (library, tests) = &self.source_sums;
        let library = match library {
            Some(sum) => sum.clone(),
            None => hash_tree(&ctx.loaded.library_src(), &config.library.hash_exclude).ok()?,
        };
        let tests = match tests {
            Some(sum) => sum.clone(),
            None => hash_tree(&ctx.loaded.tests_src(), &config.tests_hash_exclude()).ok()?,
        };
        Some(SourceSums { library, tests })
    }

    /// Whether a finished build with this key is already cached.
    pub(crate) fn is_cached(&self) -> bool {
        self.manifest_path().is_file()
    }

    fn manifest_path(&self) -> PathBuf {
        self.cache_dir.join("build.json")
    }

    /// Builds (or reuses) the fixture and returns its manifest, and the
    /// run's hold on it: a shared lock on `builds/<key>.lock` for as long as
    /// the run keeps it. Runs of one build share it; building it, or
    /// deleting it (`clean --builds`), needs it alone.
    pub(crate) fn build(&self, ctx: &Context) -> Result<(BuildManifest, BuildInUse)> {
        if !self.problems.is_empty() {
            let problems: Vec<String> = self.problems.iter().map(ToString::to_string).collect();
            bail!("{}", problems.join("\n"));
        }
        files::create_dir(self.cache_dir.parent().expect("builds/<key>"))?;
        let lock_path = self.cache_dir.with_extension("lock");
        let cannot_lock =
            |e: std::io::Error| Error::from(e).context(format_args!("cannot lock {}", lock_path.display()));
        let lock = loop {
            let lock = files::open_lock_file(&lock_path)?;
            if lock.try_lock_shared().is_err() {
                reporter::emit(Event::BuildWaiting { dir: &self.cache_dir, in_use_by: None });
                lock.lock_shared().map_err(cannot_lock)?;
            }
            if still_the_lock(&lock, &lock_path) {
                break lock;
            }
        };
        let damage = match self.cached() {
            Cached::Whole(manifest) => {
                return Ok((*manifest, self.hand_over(ctx, lock)?));
            }
            Cached::Damaged(why) => Some(why),
            Cached::Missing => None,
        };
        // To build: alone. A run that uses the build holds it until it ends.
        lock.unlock().map_err(cannot_lock)?;
        if lock.try_lock().is_err() {
            let users = users_of(&self.cache_dir, &ctx.state_dir);
            let who = if users.is_empty() { "another process building it".to_string() } else { users.join("; ") };
            reporter::emit(Event::BuildWaiting { dir: &self.cache_dir, in_use_by: Some(&who) });
            lock.lock().map_err(cannot_lock)?;
        }
        if !still_the_lock(&lock, &lock_path) {
            // `clean --builds` deleted the build meanwhile: start again.
            drop(lock);
            return self.build(ctx);
        }
        // Another process may have built it meanwhile.
        let manifest = match (self.cached(), damage) {
            (Cached::Whole(manifest), _) => *manifest,
            (Cached::Damaged(why), _) | (Cached::Missing, Some(why)) => {
                reporter::emit(Event::BuildDamaged { id: &self.key, why: &why });
                if self.manifest_path().exists() {
                    self.discard_cache()?;
                }
                self.build_locked(ctx)?
            }
            (Cached::Missing, None) => self.build_locked(ctx)?,
        };
        // flock turns the lock into a shared one without a gap for another builder.
        lock.lock_shared().map_err(cannot_lock)?;
        if !self.manifest_path().is_file() {
            bail!(
                "the build {} was deleted as it was handed over (by `ccl-coverage clean --builds`?): run again",
                self.cache_dir.display()
            );
        }
        Ok((manifest, self.hand_over(ctx, lock)?))
    }

    /// The run's hold on the build, its lock held shared: noted, the folder
    /// for its device backend's files made beside it, and this workspace's
    /// failed builds deleted.
    fn hand_over(&self, ctx: &Context, lock: std::fs::File) -> Result<BuildInUse> {
        if self.device.enabled {
            files::create_dir(&device::files_beside(&self.cache_dir))?;
        }
        let in_use = BuildInUse::note(ctx, &self.cache_dir, lock);
        remove_failed_builds(&ctx.state_dir.join("builds"), ctx.workspace.root(), &self.key);
        Ok(in_use)
    }

    /// The cached build: whole, damaged (why), or not built.
    fn cached(&self) -> Cached {
        let Ok(manifest) = BuildManifest::read(&self.manifest_path()) else { return Cached::Missing };
        if manifest.discovered.is_none() {
            return Cached::Damaged(
                "it records no list of the instrumented programs its build made (an older ccl-coverage made it)".into(),
            );
        }
        let Some(contents) = manifest.contents_sha256.clone() else {
            return Cached::Damaged(
                "it records no listing of what its build made (an older ccl-coverage made it)".into(),
            );
        };
        match manifest.damage() {
            None => {
                reporter::emit(Event::BuildReused { id: &self.key, dir: &self.build_dir });
                match identity::left_in_cache(&self.cache_dir, &contents) {
                    Ok(None) => {}
                    Ok(Some(said)) => reporter::emit(Event::BuildHoldsOthers { dir: &self.cache_dir, said: &said }),
                    Err(e) => reporter::emit(Event::BuildUncheckable { dir: &self.cache_dir, why: &e.to_string() }),
                }
                Cached::Whole(Box::new(manifest))
            }
            Some(why) => Cached::Damaged(why),
        }
    }

    /// Builds the fixture; the caller holds the build's lock alone.
    fn build_locked(&self, ctx: &Context) -> Result<BuildManifest> {
        let config = &ctx.loaded.config;
        if self.existing_build {
            let id = &self.key;
            reporter::emit(Event::BuildStarted { config: &config.name, id, dir: &self.build_dir, existing: true });
        } else {
            let id = &self.key;
            reporter::emit(Event::BuildStarted { config: &config.name, id, dir: &self.build_dir, existing: false });
        }
        let logs = self.cache_dir.join("logs");
        files::create_dir(&logs)?;
        let started = StartedBy { key: self.key.clone(), workspace: ctx.workspace.root().to_path_buf() };
        files::write_atomic(
            &self.cache_dir.join(STARTED_BY),
            &serde_json::to_vec(&started).expect("the note serializes"),
        )?;
        let started = Instant::now();
        let mut records = Vec::new();
        let total = self.steps.len();
        for (i, (name, cmd)) in self.steps.iter().enumerate() {
            let step_started = Instant::now();
            let log = logs.join(format!("{:02}-{}.log", i + 1, slug(name)));
            reporter::emit(Event::BuildStep { i: i + 1, n: total, name, took: None });
            if let Some(dir) = cmd.get_cwd() {
                files::create_dir(dir)?;
            }
            std::fs::write(&log, format!("$ {}\n", cmd.display()))
                .with_context(|| format!("cannot write {}", log.display()))?;
            run_step(ctx, cmd, &log).with_context(|| format!("build step {name:?} failed"))?;
            let took = step_started.elapsed();
            reporter::emit(Event::BuildStep { i: i + 1, n: total, name, took: Some(took) });
            let seconds = took.as_secs_f64();
            records.push(StepRecord { name: name.clone(), command: cmd.display(), seconds });
        }
        let objects = match &self.existing_objects {
            Some(objects) => objects.clone(),
            None => self.inspect_objects(ctx)?,
        };
        let device_objects = self.device_objects(ctx)?;
        let paths: Vec<PathBuf> = objects.iter().map(|o| o.path.clone()).collect();
        if let Some(said) = device::after_build(&self.device, &paths, &self.cache_dir, &crate::config::process_env) {
            reporter::emit(Event::DeviceAfterBuild { said: &said });
        }
        if !self.bin_dir.is_dir() {
            bail!(
                "the test binaries' folder {} does not exist (tests.bin_dir, or CCL_COV_TESTS_DIR)",
                self.bin_dir.display()
            );
        }
        let mut manifest = self.manifest(ctx, objects, device_objects, records);
        for object in manifest.objects.iter_mut().chain(&mut manifest.device_objects) {
            object.sum = Some(FileSum::of(&object.path)?);
        }
        manifest.programs = programs(&self.bin_dir)?;
        manifest.discovered = Some(self.discover(&manifest)?);
        manifest.sources = self.source_sums(ctx);
        let contents = identity::listing(&self.cache_dir)?;
        files::write_atomic(&self.cache_dir.join(identity::CONTENTS), contents.as_bytes())?;
        manifest.contents_sha256 = Some(files::hex(&<sha2::Sha256 as sha2::Digest>::digest(contents.as_bytes())));
        manifest.write(&self.manifest_path())?;
        reporter::emit(Event::BuildReady { id: &self.key, took: started.elapsed() });
        Ok(manifest)
    }

    /// Removes a cached build that cannot be trusted, so that it is built
    /// from nothing: a build tool would take a damaged object that is newer
    /// than its inputs as up to date. An existing build (`CCL_COV_BUILD_DIR`)
    /// is not ours: only its record goes, and it is inspected again.
    fn discard_cache(&self) -> Result<()> {
        if self.existing_build {
            return std::fs::remove_file(self.manifest_path())
                .with_context(|| format!("cannot delete {}", self.manifest_path().display()));
        }
        let meta = std::fs::symlink_metadata(&self.cache_dir)
            .with_context(|| format!("cannot inspect {}", self.cache_dir.display()))?;
        if !meta.is_dir() {
            bail!("refusing to delete {}: it is not a folder the harness made", self.cache_dir.display());
        }
        crate::workspace::confined::remove_tree(&self.cache_dir).context("cannot delete the damaged build")
    }

    /// Every configured object must exist and (with coverage on) carry
    /// coverage mapping: an uninstrumented library would give an empty
    /// report much later.
    fn inspect_objects(&self, ctx: &Context) -> Result<Vec<ObjectRecord>> {
        let config = &ctx.loaded.path;
        let flags = "{coverage_flags}";
        library_objects(
            ctx,
            &self.vars,
            self.coverage,
            |i, path| {
                Error::new(format!(
                    "{}: library.objects[{i}]: the build finished but {} does not exist; fix the path or the build steps",
                    config.display(),
                    path.display()
                ))
            },
            |i, path| {
                Error::new(format!(
                    "{}: library.objects[{i}]: {} has no coverage mapping (__llvm_covmap/__llvm_covfun and __llvm_prf_cnts): the build did not apply {flags} to it",
                    config.display(),
                    path.display()
                ))
            },
        )
    }

    /// Every instrumented program or shared library under `{build_dir}` and
    /// `bin_dir` that is not one of `library.objects`, with its build ID and
    /// checksum: the report measures those that wrote profiles.
    fn discover(&self, manifest: &BuildManifest) -> Result<Vec<ObjectRecord>> {
        let roots: Vec<&Path> = if self.bin_dir.starts_with(&self.build_dir) {
            vec![&self.build_dir]
        } else {
            vec![&self.build_dir, &self.bin_dir]
        };
        let library: Vec<&Path> = manifest.objects.iter().map(|o| o.path.as_path()).collect();
        let mut records = Vec::new();
        for found in objects::discover(&roots) {
            if library.contains(&found.path.as_path()) {
                continue;
            }
            records.push(ObjectRecord {
                sum: Some(FileSum::of(&found.path)?),
                path: found.path,
                instrumentation: found.instrumentation,
                backend: None,
                build_id: found.build_id,
            });
        }
        Ok(records)
    }

    fn device_objects(&self, ctx: &Context) -> Result<Vec<ObjectRecord>> {
        let patterns = ctx
            .loaded
            .config
            .coverage
            .device
            .objects
            .iter()
            .map(|p| Ok(PathBuf::from(self.vars.render(p)?)))
            .collect::<Result<Vec<_>>>()?;
        select_device_objects(&patterns, &self.device)
    }
}

/// The toolchain and the device-coverage decision: what the build will be
/// made with, from the config and an environment lookup (the process's, or
/// a fake one in tests).
#[derive(Debug, Clone)]
pub(crate) struct BuildSetup {
    pub(crate) toolchain: Toolchain,
    pub(crate) device: DeviceDecision,
    /// `{coverage_flags}`: host flags, plus the device forms when device coverage is on.
    pub(crate) coverage_flags: Vec<String>,
    /// `{coverage_link_flags}`: see [`device::link_flags`].
    pub(crate) coverage_link_flags: Vec<String>,
    pub(crate) rccl: rccl::Coverage,
}

impl BuildSetup {
    pub fn new(
        config: &crate::config::Config,
        coverage: bool,
        device_mode: crate::config::DeviceMode,
        tools: Option<&Path>,
        env: crate::env_names::Lookup,
    ) -> Result<BuildSetup> {
        let toolchain = toolchain::resolve(&config.toolchain, env)?;
        let device = if coverage {
            device::decide(device_mode, &config.coverage.device, &toolchain.cxx, tools, env)?
        } else {
            DeviceDecision {
                requested: device_mode,
                enabled: false,
                reason: "coverage is off (CCL_COV_COVERAGE=off)".into(),
                target: config.coverage.device.target.clone(),
                backend: None,
                found: None,
            }
        };
        if let Some(problem) = device::profile_pattern_problem(&device, &config.coverage.profile_pattern) {
            bail!("device coverage is on ({}), but {problem}", device.reason);
        }
        let coverage_flags =
            if coverage { device::coverage_flags(&config.coverage.host_flags, &device) } else { Vec::new() };
        let coverage_link_flags = device::link_flags(&device);
        let rccl = if coverage { rccl::Coverage::On { full: device.enabled } } else { rccl::Coverage::Off };
        Ok(BuildSetup { toolchain, device, coverage_flags, coverage_link_flags, rccl })
    }
}

/// Why a report must not read the workspace's build `manifest`: the config
/// names other build inputs (objects, steps, flags, tools) than the build
/// recorded, so the report would describe objects the config no longer
/// builds. `None` when they agree, or when the build recorded none (an
/// older ccl-coverage). The device decision and the existing builds are the
/// build's: the device mode and `CCL_COV_BUILD_DIR`/`CCL_COV_TESTS_DIR` are
/// the run's choice, often for that run alone, not the config's.
pub(crate) fn config_differs(ctx: &Context, manifest: &BuildManifest) -> Result<Option<String>> {
    let Some(built) = &manifest.inputs else { return Ok(None) };
    let existing = |label: &str| built.iter().find(|(l, _)| l == label).map(|(_, dir)| Path::new(dir.as_str()));
    let config = ctx.config();
    let device = manifest.device.clone();
    let setup = BuildSetup {
        toolchain: toolchain::resolve(&config.toolchain, &crate::config::process_env)?,
        coverage_flags: device::coverage_flags(&config.coverage.host_flags, &device),
        coverage_link_flags: device::link_flags(&device),
        rccl: rccl::Coverage::On { full: device.enabled },
        device,
    };
    let now = inputs(ctx, &setup, (existing("existing build"), existing("existing tests")))?;
    let differs = inputs_differ(built, &now);
    Ok((!differs.is_empty()).then(|| {
        format!(
            "the config names other build inputs than build {}, which this workspace's trials ran on, so a report would describe objects the config no longer builds: {}; run `{}` to build what the config names and run the trials on it, then the report (or restore the config)",
            manifest.build_id,
            differs.join("; "),
            ctx.entry.trials()
        )
    }))
}

/// Whether `lock` is still the file at `path`: `clean --builds` deletes a
/// build's lock file with the build (holding it alone), so a process that
/// waited on it holds a lock on a file no other process can open, and must
/// open the new one.
fn still_the_lock(lock: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (lock.metadata(), std::fs::metadata(path)) {
        (Ok(held), Ok(there)) => held.dev() == there.dev() && held.ino() == there.ino(),
        _ => false,
    }
}

/// The note in a build's folder naming the workspace whose run started it:
/// the harness made that folder, and a build of that workspace that
/// succeeds later may delete it if it never finished.
const STARTED_BY: &str = "started-by.json";

#[derive(Debug, Serialize, Deserialize)]
struct StartedBy {
    key: String,
    workspace: PathBuf,
}

/// Deletes the builds that `workspace`'s runs started and that never
/// finished (no `build.json`: a step failed, or the run was stopped), now
/// that its build `done` is ready: each change to a build command is a new
/// folder, and a failed one would stay until `clean --builds`. Only a real
/// folder (not a link) whose note names this workspace and its own key is
/// deleted, and only while its lock can be taken alone: a build another run
/// is making or using is left. Whatever cannot be deleted is left, and said.
fn remove_failed_builds(builds: &Path, workspace: &Path, done: &str) {
    let workspace = crate::workspace::normalize(workspace);
    for entry in std::fs::read_dir(builds).into_iter().flatten().flatten() {
        let path = entry.path();
        let Some(key) = entry.file_name().to_str().map(str::to_string) else { continue };
        if key == done || !entry.file_type().is_ok_and(|t| t.is_dir()) || !unfinished_of(&path, &key, &workspace) {
            continue;
        }
        let lock_path = path.with_extension("lock");
        let Ok(lock) = files::open_lock_file(&lock_path) else { continue };
        if lock.try_lock().is_err() || !still_the_lock(&lock, &lock_path) {
            continue;
        }
        // Checked again under the lock: another run may have finished it meanwhile.
        if !unfinished_of(&path, &key, &workspace) {
            continue;
        }
        match crate::workspace::confined::remove_tree(&path) {
            Ok(()) => {
                remove_notes(&path);
                // Held alone: a process waiting on it finds it gone and opens a new one.
                let _ = std::fs::remove_file(&lock_path);
                reporter::emit(Event::FailedBuildDeleted { dir: &path, done });
            }
            Err(e) => reporter::emit(Event::FailedBuildKept { dir: &path, why: &e.to_string() }),
        }
    }
}

/// Whether the folder `path` (not a link) is a build with key `key` that
/// `workspace`'s run started and that has no `build.json`.
fn unfinished_of(path: &Path, key: &str, workspace: &Path) -> bool {
    unfinished(path, key).is_some_and(|started| crate::workspace::normalize(&started) == workspace)
}

/// The workspace whose run started the build `path` (a folder, not a link)
/// with key `key`, when its note says the harness started it under that key
/// and it never finished (no `build.json`): a failed or stopped build.
pub(crate) fn unfinished(path: &Path, key: &str) -> Option<PathBuf> {
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    if !is_dir || std::fs::symlink_metadata(path.join("build.json")).is_ok() {
        return None;
    }
    let note: StartedBy = crate::workspace::confined::open_regular(&path.join(STARTED_BY)).ok().and_then(|file| {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, 64 * 1024), &mut bytes).ok()?;
        serde_json::from_slice(&bytes).ok()
    })?;
    (note.key == key).then_some(note.workspace)
}

/// What the cache holds for a build key.
enum Cached {
    Whole(Box<BuildManifest>),
    Damaged(String),
    Missing,
}

/// A run's hold on its cached build, released when dropped (or when the
/// process ends): the shared lock, and a note naming the run beside the
/// build (`builds/<key>.users/<owner id>.json`) for `clean` to say who uses it.
#[derive(Debug)]
pub(crate) struct BuildInUse {
    _lock: std::fs::File,
    note: Option<PathBuf>,
}

/// Who a note says uses a build.
#[derive(Debug, Serialize, Deserialize)]
struct UserNote {
    pid: u32,
    command: String,
    started_at: String,
    workspace: PathBuf,
}

impl BuildInUse {
    fn note(ctx: &Context, cache_dir: &Path, lock: std::fs::File) -> BuildInUse {
        let note = crate::exec::owner::Owner::get().and_then(|owner| {
            let path = users_dir(cache_dir).join(format!("{}.json", owner.id()));
            let info = crate::exec::owner::OwnerInfo::me();
            let note = UserNote {
                pid: info.pid,
                command: info.command,
                started_at: info.started_at,
                workspace: ctx.workspace.root().to_path_buf(),
            };
            // A note that cannot be written only makes `clean` less precise.
            files::write_atomic(&path, &serde_json::to_vec(&note).expect("serializes")).ok().map(|()| path)
        });
        BuildInUse { _lock: lock, note }
    }
}

impl Drop for BuildInUse {
    fn drop(&mut self) {
        if let Some(note) = &self.note {
            let _ = std::fs::remove_file(note);
        }
    }
}

fn users_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.with_extension("users")
}

/// Deletes what the harness keeps beside a deleted build: its runs' notes,
/// its workspaces' registrations and its device backend's files.
pub(crate) fn remove_notes(cache_dir: &Path) {
    for beside in [users_dir(cache_dir), registry_dir(cache_dir), device::files_beside(cache_dir)] {
        let _ = crate::workspace::confined::remove_tree(&beside);
    }
}

/// The runs that use the build in `cache_dir`, as people read them; notes
/// of runs that are gone are removed.
pub(crate) fn users_of(cache_dir: &Path, state_dir: &Path) -> Vec<String> {
    use crate::exec::owner::{self, Liveness};
    let mut users = Vec::new();
    for entry in std::fs::read_dir(users_dir(cache_dir)).into_iter().flatten().flatten() {
        let path = entry.path();
        let Some(id) = path.file_stem().and_then(|s| s.to_str()) else { continue };
        let note: Option<UserNote> = std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok());
        match (owner::liveness(&owner::owner_lock(state_dir, id)), note) {
            (Liveness::Alive, Some(n)) => users.push(format!(
                "the run on workspace {} (pid {}, `{}`, started {})",
                n.workspace.display(),
                n.pid,
                n.command,
                n.started_at
            )),
            (Liveness::Alive, None) => users.push(format!("a run ({})", path.display())),
            (Liveness::Gone(_) | Liveness::Unknown, _) => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    users
}

/// The folder beside a build (`builds/<key>.workspaces/`) where each
/// workspace that uses it registers, wherever that workspace lives: `clean
/// --builds` keeps a build one of them still uses. Beside the build's
/// folder, not in it: that holds only what its build made.
fn registry_dir(cache_dir: &Path) -> PathBuf {
    cache_dir.with_extension("workspaces")
}

/// A workspace's registration in the build it uses: data, never trusted as
/// configuration. It keeps the build only while that workspace's marker and
/// `build.json` say so.
#[derive(Debug, Serialize, Deserialize)]
struct Registration {
    workspace: PathBuf,
    config: String,
}

/// Registers `ws` (of config `config`) in the cached build `build_id` under
/// `state_dir`, as a run or report uses it. The build's folder is found from
/// the key alone (a `build.json` is the workspace's data: its `cache_dir` is
/// not followed). One that cannot be written is said: another config's
/// `clean --builds` would then not see this workspace.
pub(crate) fn register_workspace(state_dir: &Path, ws: &Workspace, config: &str, build_id: &str) {
    if build_id.is_empty() || !build_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return;
    }
    let cache_dir = state_dir.join("builds").join(build_id);
    if !std::fs::symlink_metadata(&cache_dir).is_ok_and(|m| m.is_dir()) {
        return;
    }
    let root = crate::workspace::normalize(ws.root());
    let name = &files::hex(&<sha2::Sha256 as sha2::Digest>::digest(root.as_os_str().as_encoded_bytes()))[..16];
    let path = registry_dir(&cache_dir).join(format!("{name}.json"));
    let note = Registration { workspace: root, config: config.to_string() };
    if let Err(e) = files::write_atomic(&path, &serde_json::to_vec(&note).expect("serializes")) {
        reporter::emit(Event::NotRegistered { workspace: ws.root(), build: &cache_dir, why: &e.to_string() });
    }
}

/// The workspaces registered in the build `cache_dir` (key `key`) that still
/// use it: the folder carries the marker of the registered config and its
/// `build.json` names this build, each read without following a link. A
/// stale registration (the workspace gone, another build's, or a file that
/// cannot be read as one) keeps nothing: it is removed, and why is returned.
pub(crate) fn registered_users(cache_dir: &Path, key: &str) -> (Vec<PathBuf>, Vec<String>) {
    let (mut users, mut stale) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(registry_dir(cache_dir)).into_iter().flatten().flatten() {
        let path = entry.path();
        let note = crate::workspace::confined::open_regular(&path).ok().and_then(|file| {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(file, 64 * 1024), &mut bytes).ok()?;
            serde_json::from_slice::<Registration>(&bytes).ok()
        });
        let why = match &note {
            None => format!("{} is not a registration", path.display()),
            Some(note) => match Workspace::new(&note.workspace) {
                Err(e) => e.to_string(),
                Ok(ws) => match ws.check_marked(&note.config).and_then(|()| BuildManifest::read_in(&ws)) {
                    Ok(manifest) if manifest.build_id == key => {
                        users.push(ws.root().to_path_buf());
                        continue;
                    }
                    Ok(manifest) => format!("{} now uses build {}", ws.root().display(), manifest.build_id),
                    Err(e) => format!("{}: {e}", ws.root().display()),
                },
            },
        };
        // The registry folder is the harness's: a stale entry, file or link, goes.
        if entry.file_type().is_ok_and(|t| !t.is_dir()) {
            let _ = std::fs::remove_file(&path);
        }
        stale.push(why);
    }
    users.sort();
    users.dedup();
    (users, stale)
}

/// Makes `manifest` the workspace's build. Results, profiles and reports
/// recorded for another build are deleted: they describe other objects, and
/// a record kept across a change would count again once the build returns
/// to its key, with its profiles gone.
pub(crate) fn adopt(ws: &Workspace, manifest: &BuildManifest) -> Result<()> {
    ws.create()?;
    let lock = ws.open_lock(&ws.lock_file())?;
    lock.lock().with_context(|| format!("cannot lock {}", ws.lock_file().display()))?;
    let previous = BuildManifest::read_in(ws).ok();
    match previous {
        Some(p) if p.build_id == manifest.build_id => return Ok(()),
        Some(p) => {
            reporter::emit(Event::BuildChanged { from: &p.build_id, to: &manifest.build_id });
            for area in [
                Area::Results,
                Area::Profiles,
                Area::Quarantine,
                Area::Report,
                Area::ReportStaging,
                Area::Cases,
                Area::Work,
            ] {
                ws.clear(area, &ws.area(area))?;
            }
        }
        None => {}
    }
    let text = serde_json::to_string_pretty(manifest).expect("manifest serializes");
    ws.write(&ws.build_manifest(), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::manifest::glob_files;
    use super::*;

    /// A lock whose file `clean --builds` deleted (or replaced) is no lock.
    #[test]
    fn a_lock_on_a_deleted_lock_file_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let held = files::open_lock_file(&path).unwrap();
        assert!(still_the_lock(&held, &path));
        std::fs::remove_file(&path).unwrap();
        assert!(!still_the_lock(&held, &path), "deleted");
        let _new = files::open_lock_file(&path).unwrap();
        assert!(!still_the_lock(&held, &path), "replaced by a new file");
    }

    /// After a build of workspace W succeeds, W's unfinished builds go;
    /// finished ones, other workspaces', folders without the harness's note
    /// (or with one copied from another build), links, and builds whose
    /// lock another holder has, stay.
    #[test]
    fn a_success_removes_only_the_failed_builds_this_workspace_started() {
        let dir = tempfile::tempdir().unwrap();
        let builds = dir.path().join("builds");
        let ws = dir.path().join("ws");
        let build = |key: &str, noted: Option<(&str, &Path)>, finished: bool| {
            let path = builds.join(key);
            files::create_dir(&path.join("logs")).unwrap();
            std::fs::write(path.join("logs/01-lib.log"), "error: x").unwrap();
            if let Some((key, workspace)) = noted {
                let note = StartedBy { key: key.into(), workspace: workspace.to_path_buf() };
                std::fs::write(path.join(STARTED_BY), serde_json::to_vec(&note).unwrap()).unwrap();
            }
            if finished {
                std::fs::write(path.join("build.json"), "{}").unwrap();
            }
            path
        };
        let failed = build("f1", Some(("f1", &ws.join("."))), false);
        files::create_dir(&users_dir(&failed)).unwrap();
        files::open_lock_file(&failed.with_extension("lock")).unwrap();
        let kept = [
            build("ok", Some(("ok", &ws)), true),
            build("other", Some(("other", &dir.path().join("ws2"))), false),
            build("unnoted", None, false),
            build("copied", Some(("f1", &ws)), false),
            build("done", Some(("done", &ws)), false),
            build("busy", Some(("busy", &ws)), false),
        ];
        let busy = files::open_lock_file(&builds.join("busy.lock")).unwrap();
        busy.lock_shared().unwrap();
        let outside = dir.path().join("outside");
        files::create_dir(&outside).unwrap();
        let note = StartedBy { key: "link".into(), workspace: ws.clone() };
        std::fs::write(outside.join(STARTED_BY), serde_json::to_vec(&note).unwrap()).unwrap();
        std::os::unix::fs::symlink(&outside, builds.join("link")).unwrap();

        remove_failed_builds(&builds, &ws, "done");
        assert!(!failed.exists(), "the failed build of this workspace stays");
        assert!(!users_dir(&failed).exists() && !failed.with_extension("lock").exists());
        for path in &kept {
            assert!(path.join("logs/01-lib.log").is_file(), "{} was deleted", path.display());
        }
        assert!(outside.join(STARTED_BY).is_file() && builds.join("link").exists(), "a link was followed");
        drop(busy);
        remove_failed_builds(&builds, &ws, "done");
        assert!(!builds.join("busy").exists(), "once no run holds it, it goes");
    }

    /// A registration keeps its build only while the workspace's marker and
    /// `build.json` say so; a link, a file that is no registration, a
    /// workspace gone or on another build keep nothing and are removed, and
    /// what a link points at is neither read nor touched.
    #[test]
    fn only_a_registered_workspace_that_still_uses_the_build_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let cache = state.join("builds/k1");
        files::create_dir(&cache).unwrap();
        let workspace = |name: &str, build: &str| {
            let ws = Workspace::new(&dir.path().join(name)).unwrap();
            ws.claim("cfg", &dir.path().join("cfg.json"), &[]).unwrap();
            adopt(&ws, &test_manifest(build)).unwrap();
            register_workspace(&state, &ws, "cfg", "k1");
            ws
        };
        let using = workspace("using", "k1");
        let moved = workspace("moved", "k1");
        adopt(&moved, &test_manifest("k2")).unwrap();
        let gone = workspace("gone", "k1");
        std::fs::remove_dir_all(gone.root()).unwrap();
        // A planted link to a registration of a workspace that uses the build.
        let outside = dir.path().join("outside.json");
        let note = Registration { workspace: using.root().to_path_buf(), config: "cfg".into() };
        std::fs::write(&outside, serde_json::to_vec(&note).unwrap()).unwrap();
        std::os::unix::fs::symlink(&outside, registry_dir(&cache).join("link.json")).unwrap();
        std::fs::write(registry_dir(&cache).join("junk.json"), "[]").unwrap();
        // Keys are names, never paths: nothing is registered outside the cache.
        register_workspace(&state, &using, "cfg", "../../escape");
        assert!(!dir.path().join("escape.workspaces").exists());

        let (users, stale) = registered_users(&cache, "k1");
        assert_eq!(users, [using.root().to_path_buf()]);
        assert_eq!(stale.len(), 4, "{stale:?}");
        assert!(stale.iter().any(|s| s.ends_with("/moved now uses build k2")), "{stale:?}");
        assert!(stale.iter().any(|s| s.contains("link.json is not a registration")), "{stale:?}");
        let left: Vec<_> = std::fs::read_dir(registry_dir(&cache)).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "stale registrations stay");
        assert!(outside.is_file(), "the link's target was touched");
        assert_eq!(registered_users(&cache, "k2").0, Vec::<PathBuf>::new(), "using's build.json names k1");
    }

    #[test]
    fn what_is_left_in_a_cache_folder_or_gone_from_it_or_changed_in_it_is_named() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ccl-tests")).unwrap();
        std::fs::create_dir_all(root.join("logs")).unwrap();
        let perf = root.join("ccl-tests/all_reduce_perf");
        std::fs::write(&perf, "elf").unwrap();
        std::fs::write(root.join("logs/01-build.log"), "log").unwrap();
        std::os::unix::fs::symlink("all_reduce_perf", root.join("ccl-tests/link")).unwrap();
        let built = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(1_700_000_000_123_456_789);
        for file in [&perf, &root.join("logs/01-build.log")] {
            std::fs::File::options().write(true).open(file).unwrap().set_modified(built).unwrap();
        }
        let listing = identity::listing(root).unwrap();
        let lines: Vec<&str> = listing.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "ccl-tests/",
                "ccl-tests/all_reduce_perf\t3\t1700000000123456789",
                "ccl-tests/link@",
                "logs/",
                "logs/01-build.log\t3\t1700000000123456789"
            ]
        );
        std::fs::write(root.join(identity::CONTENTS), &listing).unwrap();
        let sum = files::hex(&sha2::Sha256::digest(listing.as_bytes()));
        // The manifest, written after the listing, is not in it.
        std::fs::write(root.join("build.json"), "{}").unwrap();
        assert_eq!(identity::left_in_cache(root, &sum).unwrap(), None);
        std::fs::write(root.join("ccl-tests/left-behind"), "x").unwrap();
        std::fs::remove_file(root.join("logs/01-build.log")).unwrap();
        let said = identity::left_in_cache(root, &sum).unwrap().unwrap();
        assert!(
            said.contains("holds 1 entries its build did not make") && said.contains(": ccl-tests/left-behind"),
            "{said}"
        );
        assert!(said.ends_with("lacks 1 entries its build made: logs/01-build.log"), "{said}");
        // Edited in place: the same size, a new time.
        std::fs::write(&perf, "ELF").unwrap();
        let said = identity::left_in_cache(root, &sum).unwrap().unwrap();
        assert!(
            said.ends_with(
                "holds 1 files its build made whose size or modification time changed since: ccl-tests/all_reduce_perf"
            ),
            "{said}"
        );
        // An older listing, names alone, is compared by name.
        let names = "ccl-tests/\nccl-tests/all_reduce_perf\nccl-tests/link@\nlogs/";
        std::fs::write(root.join(identity::CONTENTS), names).unwrap();
        let old = files::hex(&sha2::Sha256::digest(names.as_bytes()));
        let said = identity::left_in_cache(root, &old).unwrap().unwrap();
        assert_eq!(
            said,
            "holds 1 entries its build did not make (a trial, whose working folder it once was, or another program left them): ccl-tests/left-behind"
        );
        std::fs::write(root.join(identity::CONTENTS), "ccl-tests/\n").unwrap();
        let said = identity::left_in_cache(root, &sum).unwrap().unwrap();
        assert!(said.contains("is not the one build.json records, so they cannot be named"), "{said}");
    }

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

    #[test]
    fn a_new_build_invalidates_profiles_and_reports_of_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(&dir.path().join("ws")).unwrap();
        adopt(&ws, &test_manifest("aaaa")).unwrap();
        let profile = ws.trial_profiles("T").join("x.profraw");
        let report = ws.report_dir().join("summary.json");
        let log = ws.trial_log("T");
        for file in [&profile, &report, &log] {
            files::create_dir(file.parent().unwrap()).unwrap();
            std::fs::write(file, "x").unwrap();
        }
        adopt(&ws, &test_manifest("aaaa")).unwrap();
        assert!(profile.exists() && report.exists(), "same build keeps its profiles");
        adopt(&ws, &test_manifest("bbbb")).unwrap();
        assert!(!profile.exists() && !report.exists(), "profiles of the old build were kept");
        assert!(log.exists(), "logs are not the harness's to delete");
        assert_eq!(BuildManifest::read_in(&ws).unwrap().build_id, "bbbb");
    }

    #[test]
    fn wildcards_match_whole_names() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["device-gfx942.elf", "device-gfx90a.elf", "device-gfx942.elf.bak", "other.elf", "libx.so"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        let found = glob_files(&dir.path().join("device-*.elf")).unwrap();
        assert_eq!(found, [dir.path().join("device-gfx90a.elf"), dir.path().join("device-gfx942.elf")]);
        assert_eq!(glob_files(&dir.path().join("lib?.so")).unwrap(), [dir.path().join("libx.so")]);
        let bad = glob_files(&dir.path().join("device-[.elf")).unwrap_err().to_string();
        assert!(bad.contains("is not a file pattern"), "{bad}");
    }

    #[test]
    fn missing_source_folder_is_an_error() {
        let err = hash_tree(Path::new("/no/such/src"), &[]).unwrap_err().to_string();
        assert!(err.contains("source folder /no/such/src does not exist"), "{err}");
    }

    /// The stage reads only the environment it is given: here one where
    /// `CXX` names a compiler that is not clang, and one without it.
    #[test]
    fn the_toolchain_and_device_decision_come_from_the_given_environment() {
        let dir = tempfile::tempdir().unwrap();
        let text = r#"{"name": "t", "toolchain": {"cc": "${LLVM}/clang", "cxx": "${LLVM}/clang++"},
            "library": {"source_dir": ".", "steps": [{"name": "s", "argv": ["true"]}], "objects": ["{build_dir}/libx.so"]},
            "tests": {"source_dir": ".", "steps": [{"name": "t", "argv": ["true"]}], "bin_dir": "{build_dir}"},
            "launchers": {"threads": {"kind": "direct"}}, "capacity": 1, "launch": {"launcher": "threads", "ranks": 1},
            "collectives": [{"name": "AllReduce", "binary": "all_reduce_perf"}], "sizes": ["1K"]}"#;
        let llvm = "/usr/lib/llvm-22/bin".to_string();
        let config_env = |name: &str| (name == "LLVM").then(|| llvm.clone());
        let loaded = crate::config::load_str(text, &dir.path().join("t.json"), &config_env).unwrap();
        let config = &loaded.config;
        let none = |_: &str| None;
        let off = BuildSetup::new(config, false, crate::config::DeviceMode::Auto, None, &none).unwrap();
        assert_eq!(off.device.reason, "coverage is off (CCL_COV_COVERAGE=off)");
        assert!(off.coverage_flags.is_empty());
        let on = BuildSetup::new(config, true, crate::config::DeviceMode::Auto, None, &none).unwrap();
        assert!(!on.device.enabled, "a config without a device target is host-only");
        assert_eq!(on.coverage_flags, config.coverage.host_flags);
        assert_eq!(on.toolchain.cxx.major, 22);
        let missing = |name: &str| (name == "CXX").then(|| "/nonexistent/clang++".to_string());
        let err =
            BuildSetup::new(config, true, crate::config::DeviceMode::Auto, None, &missing).unwrap_err().to_string();
        assert!(err.contains("(from $CXX)"), "{err}");
    }

    #[test]
    fn nvidia_device_coverage_gives_every_build_step_line_tables() {
        let mut device = test_manifest("b").device;
        device.enabled = true;
        device.backend = device::Backend::named("nvidia");
        device.found = Some(device::nvidia::tests::found(true));
        let steps = vec![
            ("make".to_string(), Cmd::new("make")),
            ("own".to_string(), Cmd::new("make").env("NVCC_APPEND_FLAGS", "-O3")),
        ];
        let flags = |steps: &[(String, Cmd)], i: usize| {
            steps[i].1.get_envs().iter().rev().find(|(k, _)| k == "NVCC_APPEND_FLAGS").and_then(|(_, v)| v.clone())
        };
        let with = with_device_env(steps.clone(), &device);
        if std::env::var_os("NVCC_APPEND_FLAGS").is_none() {
            assert_eq!(flags(&with, 0), Some("-lineinfo".into()));
        }
        assert_eq!(flags(&with, 1), Some("-O3 -lineinfo".into()));
        device.enabled = false;
        assert_eq!(flags(&with_device_env(steps, &device), 0), None);
    }
}
