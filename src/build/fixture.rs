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
use crate::build::rccl;
use crate::config::template::Vars;
use crate::config::{LoadedConfig, Step};
use crate::context::Context;
use crate::device::{self, Backend, DeviceDecision};
use crate::error::{Context as _, Error, Result};
use crate::exec::interrupt;
use crate::exec::process::Cmd;
use crate::exec::supervisor::Supervised;
use crate::toolchain::objects::{self, Instrumentation};
use crate::toolchain::{self, Toolchain};
use crate::workspace::files::FileSum;
use crate::workspace::{Area, Workspace, files};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Stands for the build directory in the cache key, which must not depend
/// on where the cache lives.
const BUILD_DIR_MARK: &str = "<build_dir>";

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
}

impl BuildManifest {
    /// Host objects llvm-cov should read: those that carry coverage mapping.
    pub(crate) fn instrumented_objects(&self) -> Vec<PathBuf> {
        self.objects.iter().filter(|o| o.instrumentation.is_instrumented()).map(|o| o.path.clone()).collect()
    }

    /// Device objects whose backend's coverage llvm-cov reads (AMDGPU's).
    pub(crate) fn llvm_device_objects(&self) -> Vec<PathBuf> {
        self.device_objects
            .iter()
            .filter(|o| o.backend.is_some_and(Backend::llvm_objects))
            .map(|o| o.path.clone())
            .collect()
    }

    /// Why this cached build's objects or test binaries are not what it
    /// built; `None` when every one still is. A record without checksums (an
    /// older harness) cannot be checked, so it is not trusted either.
    fn damage(&self) -> Option<String> {
        let objects = self.objects.iter().chain(&self.device_objects).find_map(|o| match &o.sum {
            Some(sum) => sum.differs(&o.path),
            None => Some(format!("it records no checksum of {} (an older ccl-coverage made it)", o.path.display())),
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

    /// Why an object the report reads is not what the build made (its
    /// coverage mapping would be read as `malformed coverage data` by every
    /// step): each object with a recorded checksum, damaged or not.
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
        std::io::Read::read_to_string(&mut files::open_regular(path)?, &mut text)
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

    fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).expect("manifest serializes");
        files::write_atomic(path, text.as_bytes())
    }
}

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
}

impl BuildPlan {
    pub fn new(ctx: &Context) -> Result<BuildPlan> {
        let loaded = &ctx.loaded;
        let config = &loaded.config;
        // A dry run builds and runs nothing: no device probe either.
        let tools = (!ctx.dry_run).then(|| ctx.state_dir.join("tools"));
        let resolved =
            Resolved::new(config, ctx.coverage, ctx.device_mode, tools.as_deref(), &crate::config::process_env)?;
        let mut vars = build_vars(loaded, &resolved, ctx.jobs);
        let mut problems = Vec::new();
        let (key, existing_objects, source_sums) = build_key(ctx, &resolved, &mut vars, &mut problems)?;
        let cache_dir = ctx.state_dir.join("builds").join(&key);
        let build_dir = ctx.existing_build.clone().unwrap_or_else(|| cache_dir.clone());
        vars.set("build_dir", build_dir.display().to_string());
        let (steps, bin_dir) = render_steps(ctx, &vars, resolved.rccl)?;
        let steps = with_device_env(steps, &resolved.device);
        Ok(BuildPlan {
            toolchain: resolved.toolchain,
            device: resolved.device,
            coverage: ctx.coverage,
            coverage_flags: resolved.coverage_flags,
            coverage_link_flags: resolved.coverage_link_flags,
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
            None => hash_tree(&ctx.loaded.tests_src(), &config.tests.hash_exclude).ok()?,
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
        let lock = files::open_lock_file(&lock_path)?;
        let cannot_lock = |e: std::io::Error| Error::new(format!("cannot lock {}: {e}", lock_path.display()));
        if lock.try_lock_shared().is_err() {
            eprintln!("ccl-coverage: waiting for another process building {}", self.cache_dir.display());
            lock.lock_shared().map_err(cannot_lock)?;
        }
        let damage = match self.cached() {
            Cached::Whole(manifest) => return Ok((*manifest, BuildInUse::note(ctx, &self.cache_dir, lock))),
            Cached::Damaged(why) => Some(why),
            Cached::Missing => None,
        };
        // To build: alone. A run that uses the build holds it until it ends.
        lock.unlock().map_err(cannot_lock)?;
        if lock.try_lock().is_err() {
            let users = users_of(&self.cache_dir, &ctx.state_dir);
            let who = if users.is_empty() { "another process building it".to_string() } else { users.join("; ") };
            eprintln!("ccl-coverage: waiting to build {}: it is in use by {who}", self.cache_dir.display());
            lock.lock().map_err(cannot_lock)?;
        }
        // Another process may have built it meanwhile.
        let manifest = match (self.cached(), damage) {
            (Cached::Whole(manifest), _) => *manifest,
            (Cached::Damaged(why), _) | (Cached::Missing, Some(why)) => {
                eprintln!("ccl-coverage: the cached build {} cannot be reused: {why}; building it again", self.key);
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
        Ok((manifest, BuildInUse::note(ctx, &self.cache_dir, lock)))
    }

    /// The cached build: whole, damaged (why), or not built.
    fn cached(&self) -> Cached {
        let Ok(manifest) = BuildManifest::read(&self.manifest_path()) else { return Cached::Missing };
        match manifest.damage() {
            None => {
                eprintln!("ccl-coverage: reusing build {} ({})", self.key, self.build_dir.display());
                Cached::Whole(Box::new(manifest))
            }
            Some(why) => Cached::Damaged(why),
        }
    }

    /// Builds the fixture; the caller holds the build's lock alone.
    fn build_locked(&self, ctx: &Context) -> Result<BuildManifest> {
        let config = &ctx.loaded.config;
        if self.existing_build {
            eprintln!("ccl-coverage: using the existing build {} as build {}", self.build_dir.display(), self.key);
        } else {
            eprintln!("ccl-coverage: building {} as build {} in {}", config.name, self.key, self.build_dir.display());
        }
        let logs = self.cache_dir.join("logs");
        files::create_dir(&logs)?;
        let started = Instant::now();
        let mut records = Vec::new();
        let total = self.steps.len();
        for (i, (name, cmd)) in self.steps.iter().enumerate() {
            let step_started = Instant::now();
            let log = logs.join(format!("{:02}-{}.log", i + 1, slug(name)));
            eprintln!("ccl-coverage:   [{}/{total}] {name}", i + 1);
            if let Some(dir) = cmd.get_cwd() {
                files::create_dir(dir)?;
            }
            std::fs::write(&log, format!("$ {}\n", cmd.display()))
                .with_context(|| format!("cannot write {}", log.display()))?;
            run_step(ctx, cmd, &log).with_context(|| format!("build step {name:?} failed"))?;
            let seconds = step_started.elapsed().as_secs_f64();
            eprintln!("ccl-coverage:   [{}/{total}] {name}: {seconds:.1}s", i + 1);
            records.push(StepRecord { name: name.clone(), command: cmd.display(), seconds });
        }
        let objects = match &self.existing_objects {
            Some(objects) => objects.clone(),
            None => self.inspect_objects(ctx)?,
        };
        let device_objects = self.device_objects(ctx)?;
        if self.device.nvidia_selective() {
            self.list_library_kernels(&objects);
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
        manifest.sources = self.source_sums(ctx);
        manifest.write(&self.manifest_path())?;
        eprintln!("ccl-coverage: build {} ready in {:.1}s", self.key, started.elapsed().as_secs_f64());
        Ok(manifest)
    }

    /// The kernels of the library's objects, for the trials to count only
    /// those (`coverage.device.kernels`). Said and passed over when they
    /// cannot be listed: the trials then count every kernel, which costs
    /// time, never coverage.
    fn list_library_kernels(&self, objects: &[ObjectRecord]) {
        let paths: Vec<PathBuf> = objects.iter().map(|o| o.path.clone()).collect();
        match device::nvidia::write_library_kernels(&paths, &self.cache_dir, &crate::config::process_env) {
            Ok(n) => eprintln!(
                "ccl-coverage: {n} kernels in the library's objects ({}): trials count only these unless coverage.device.kernels is \"all\"",
                device::nvidia::library_kernels_file(&self.cache_dir).display()
            ),
            Err(why) => eprintln!(
                "ccl-coverage: warning: the library's kernels could not be listed ({why}): trials count every kernel, the test programs' own too"
            ),
        }
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
        std::fs::remove_dir_all(&self.cache_dir)
            .with_context(|| format!("cannot delete the damaged build {}", self.cache_dir.display()))
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
                found.push(ObjectRecord { path, instrumentation, sum: None, backend: device.backend });
            } else {
                skipped.push(path.display().to_string());
            }
        }
    }
    for path in &skipped {
        eprintln!("ccl-coverage: device object {path} has no coverage mapping; left out of the report");
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

/// The toolchain and the device-coverage decision: what the build will be
/// made with, from the config and an environment lookup (the process's, or
/// a fake one in tests).
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) toolchain: Toolchain,
    pub(crate) device: DeviceDecision,
    /// `{coverage_flags}`: host flags, plus the device forms when device coverage is on.
    pub(crate) coverage_flags: Vec<String>,
    /// `{coverage_link_flags}`: see [`device::link_flags`].
    pub(crate) coverage_link_flags: Vec<String>,
    pub(crate) rccl: rccl::Coverage,
}

impl Resolved {
    pub fn new(
        config: &crate::config::Config,
        coverage: bool,
        device_mode: crate::config::DeviceMode,
        tools: Option<&Path>,
        env: toolchain::Lookup,
    ) -> Result<Resolved> {
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
        Ok(Resolved { toolchain, device, coverage_flags, coverage_link_flags, rccl })
    }
}

/// The build's cache key: a hash of labelled values, each ended by a NUL so
/// that no two sequences of values hash alike.
struct BuildKey(Sha256);

impl BuildKey {
    fn new() -> BuildKey {
        BuildKey(Sha256::new())
    }

    fn feed(&mut self, label: &str, value: &str) {
        self.0.update(label.as_bytes());
        self.0.update([0]);
        self.0.update(value.as_bytes());
        self.0.update([0]);
    }

    fn finish(self) -> String {
        files::hex(&self.0.finalize()[..8])
    }
}

/// The key covers what changes the result: the harness, the toolchain, the
/// coverage mode, the resolved build commands (with `{build_dir}` left as a
/// mark, so the key does not depend on where the cache lives) and the
/// sources, or the identity of existing builds. Existing objects are
/// inspected on the way and returned; why an existing build cannot be used
/// goes to `problems`.
type KeyParts = (String, Option<Vec<ObjectRecord>>, (Option<String>, Option<String>));

fn build_key(ctx: &Context, resolved: &Resolved, vars: &mut Vars, problems: &mut Vec<Error>) -> Result<KeyParts> {
    let loaded = &ctx.loaded;
    let config = &loaded.config;
    let tc = &resolved.toolchain;
    let mut key = BuildKey::new();
    key.feed("harness", env!("CARGO_PKG_VERSION"));
    key.feed("cc", &format!("{} {}", tc.cc.path.display(), tc.cc.version));
    key.feed("cxx", &format!("{} {}", tc.cxx.path.display(), tc.cxx.version));
    key.feed("coverage", &format!("{} {}", ctx.coverage, resolved.coverage_flags.join(" ")));
    key.feed("device", &resolved.device.enabled.to_string());
    let mut sums = (None, None);
    let existing_objects = if let Some(dir) = &ctx.existing_build {
        vars.set("build_dir", dir.display().to_string());
        let inspected = inspect_existing(ctx, vars, dir).and_then(|objects| {
            for object in &objects {
                key.feed("existing object", &file_identity(&object.path)?);
            }
            Ok(objects)
        });
        inspected.map_err(|e| problems.push(e)).ok()
    } else {
        vars.set("build_dir", BUILD_DIR_MARK);
        for step in &config.library.steps {
            key.feed("library step", &step_cmd(step, vars, resolved.rccl)?.display());
        }
        for object in &config.library.objects {
            key.feed("object", &vars.render(object)?);
        }
        let sum = hash_tree(&loaded.library_src(), &config.library.hash_exclude)?;
        key.feed("library_src", &sum);
        sums.0 = Some(sum);
        None
    };
    if let Some(dir) = &ctx.existing_tests {
        match dir_identity(dir) {
            Ok(identity) => key.feed("existing tests", &identity),
            Err(e) => problems.push(e),
        }
    } else {
        for step in &config.tests.steps {
            key.feed("tests step", &step_cmd(step, vars, resolved.rccl)?.display());
        }
        key.feed("bin_dir", &vars.render(&config.tests.bin_dir)?);
        let sum = hash_tree(&loaded.tests_src(), &config.tests.hash_exclude)?;
        key.feed("tests_src", &sum);
        sums.1 = Some(sum);
    }
    Ok((key.finish(), existing_objects, sums))
}

/// The build steps to run, library first (none for a part that an existing
/// build replaces), and the test binaries' folder.
fn render_steps(ctx: &Context, vars: &Vars, rccl: rccl::Coverage) -> Result<(Vec<(String, Cmd)>, PathBuf)> {
    let config = &ctx.loaded.config;
    let mut steps = Vec::new();
    if ctx.existing_build.is_none() {
        for step in &config.library.steps {
            steps.push((step.name.clone(), step_cmd(step, vars, rccl)?));
        }
    }
    let bin_dir = if let Some(dir) = &ctx.existing_tests {
        dir.clone()
    } else {
        for step in &config.tests.steps {
            steps.push((step.name.clone(), step_cmd(step, vars, rccl)?));
        }
        PathBuf::from(vars.render(&config.tests.bin_dir)?)
    };
    Ok((steps, bin_dir))
}

/// Each step's environment with what device coverage adds to it (NVIDIA's
/// `-lineinfo`), on top of the step's own value or the harness's.
fn with_device_env(steps: Vec<(String, Cmd)>, device: &DeviceDecision) -> Vec<(String, Cmd)> {
    steps
        .into_iter()
        .map(|(name, cmd)| {
            let own = |key: &str| {
                cmd.get_envs()
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| v.as_ref().map(|v| v.to_string_lossy().into_owned()))
                    .or_else(|| std::env::var(key).ok())
            };
            let extra = device::build_env(device, own("NVCC_APPEND_FLAGS").as_deref());
            (name, cmd.envs(extra))
        })
        .collect()
}

/// Inspects the objects of an existing build: each must exist and carry
/// coverage mapping, else the error says how to get one that does.
fn inspect_existing(ctx: &Context, vars: &Vars, dir: &Path) -> Result<Vec<ObjectRecord>> {
    if !dir.is_dir() {
        bail!("the existing build {} (CCL_COV_BUILD_DIR or library.existing_build) does not exist", dir.display());
    }
    library_objects(
        ctx,
        vars,
        ctx.coverage,
        |_, path| {
            Error::new(format!("the existing build {} has no {} (library.objects)", dir.display(), path.display()))
        },
        |_, path| {
            Error::new(format!(
                "the existing build's {} carries no coverage mapping: it was built without coverage instrumentation. Rebuild it with {} (for RCCL: install.sh --debug --enable-code-coverage), or unset CCL_COV_BUILD_DIR so that ccl-coverage builds the library itself",
                path.display(),
                ctx.loaded.config.coverage.host_flags.join(" ")
            ))
        },
    )
}

/// The config's `library.objects`, each of which must exist and, when
/// `coverage` is on, carry coverage mapping; `missing` and `uninstrumented`
/// say why not (with the object's index).
fn library_objects(
    ctx: &Context,
    vars: &Vars,
    coverage: bool,
    missing: impl Fn(usize, &Path) -> Error,
    uninstrumented: impl Fn(usize, &Path) -> Error,
) -> Result<Vec<ObjectRecord>> {
    let mut records = Vec::new();
    for (i, template) in ctx.loaded.config.library.objects.iter().enumerate() {
        let path = PathBuf::from(vars.render(template)?);
        if !path.is_file() {
            return Err(missing(i, &path));
        }
        let instrumentation = objects::inspect(&path)?;
        if coverage && !instrumentation.is_instrumented() {
            return Err(uninstrumented(i, &path));
        }
        records.push(ObjectRecord { path, instrumentation, sum: None, backend: None });
    }
    Ok(records)
}

/// A file's identity for the build key: its content hash, so a rebuild in
/// place gives a new build id and retires the old profiles.
fn file_identity(path: &Path) -> Result<String> {
    Ok(format!("{} {}", path.display(), files::sha256_file(path)?))
}

/// A folder's identity: its files' names, sizes and modification times.
fn dir_identity(dir: &Path) -> Result<String> {
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot list {} (CCL_COV_TESTS_DIR or tests.existing_bin_dir)", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let mtime = meta.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
            Some(format!("{} {} {mtime}", e.file_name().to_string_lossy(), meta.len()))
        })
        .collect();
    entries.sort();
    Ok(format!("{} {}", dir.display(), entries.join(";")))
}

/// The programs directly in `bin_dir` (regular files with an execute bit:
/// the test binaries trials run, not a build tool's folders and objects),
/// each with its checksum.
fn programs(bin_dir: &Path) -> Result<Vec<ProgramRecord>> {
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

/// Files matching `pattern`, whose last component may hold `*`, `?` and
/// `[…]` (matched by `globset`, never across a `/`).
fn glob_files(pattern: &Path) -> Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name().and_then(|n| n.to_str())) else {
        return Ok(Vec::new());
    };
    let matcher = globset::GlobBuilder::new(name)
        .literal_separator(true)
        .build()
        .with_context(|| format!("coverage.device.objects: {} is not a file pattern", pattern.display()))?
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

/// Runs one build step under a supervisor, like a trial: an interrupted or
/// killed harness stops it (and everything it started) instead of leaving a
/// compiler running, and the cache, which has no manifest yet, is never used
/// half-built.
fn run_step(ctx: &Context, cmd: &Cmd, log: &Path) -> Result<()> {
    let token = crate::exec::owner::new_token();
    let cmd = cmd.clone().env(crate::env_names::TRIAL_TOKEN, token.clone());
    let grace = std::time::Duration::from_secs(ctx.config().timeouts.grace);
    let children = ctx.children_dir();
    let mut step =
        Supervised::spawn(&ctx.supervisor, &cmd, &token, log, grace, ctx.config().logs.max_bytes(), Some(&children))?;
    let (status, _) = step.wait(None, None)?;
    let (report, _) = step.finish(status)?;
    if let Some(why) = &report.lost {
        bail!("{} ended unknown: {why}; the build is not cached", cmd.display());
    }
    if report.stopped.is_some() {
        bail!(
            "interrupted by {}: {} was stopped; the build is not cached and resumes on the next run",
            interrupt::describe(),
            cmd.display()
        );
    }
    match report.wait_status.map(<std::process::ExitStatus as std::os::unix::process::ExitStatusExt>::from_raw) {
        Some(status) if status.success() => Ok(()),
        status => {
            let text = files::read_lossy(log);
            bail!(
                "command failed ({}): {}\nlast lines of {}:\n{}",
                status.map_or_else(|| "no exit status".into(), crate::exec::process::describe_status),
                cmd.display(),
                log.display(),
                crate::exec::process::indent_tail(&text, crate::exec::process::TAIL_LINES)
            )
        }
    }
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
            eprintln!(
                "ccl-coverage: build changed ({} -> {}): deleting the workspace's results, profiles and reports of the old build",
                p.build_id, manifest.build_id
            );
            for area in
                [Area::Results, Area::Profiles, Area::Quarantine, Area::Report, Area::ReportStaging, Area::Cases]
            {
                ws.clear(area, &ws.area(area))?;
            }
        }
        None => {}
    }
    let text = serde_json::to_string_pretty(manifest).expect("manifest serializes");
    ws.write(&ws.build_manifest(), text.as_bytes())
}

fn build_vars(loaded: &LoadedConfig, resolved: &Resolved, jobs: usize) -> Vars {
    let toolchain = &resolved.toolchain;
    let mut vars = Vars::default();
    vars.set("cc", toolchain.cc.path.display().to_string())
        .set("cxx", toolchain.cxx.path.display().to_string())
        .set("llvm_bin", toolchain.llvm_bin.display().to_string())
        .set("coverage_flags", resolved.coverage_flags.join(" "))
        .set("coverage_link_flags", resolved.coverage_link_flags.join(" "))
        .set("jobs", jobs.to_string())
        .set("config_dir", loaded.dir.display().to_string())
        .set("library_src", loaded.library_src().display().to_string())
        .set("tests_src", loaded.tests_src().display().to_string());
    vars
}

fn step_cmd(step: &Step, vars: &Vars, rccl: rccl::Coverage) -> Result<Cmd> {
    let argv = match &step.rccl_install {
        Some(spec) => rccl::install_argv(spec, vars, rccl)?,
        None => vars.render_all(&step.argv)?,
    };
    let mut cmd = Cmd::from_argv(&argv).expect("config validation requires a command");
    for (k, v) in &step.env {
        cmd = cmd.env(k.as_str(), vars.render(v)?);
    }
    let cwd = match &step.cwd {
        Some(dir) => vars.render(dir)?,
        None => vars.get("build_dir").unwrap_or_default().to_string(),
    };
    Ok(cmd.cwd(cwd).env_remove(crate::env_names::PROFILE_INIT_ONCE))
}

fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

/// A hash of every file under `root` (paths and contents), leaving out hidden
/// entries and the top-level names in `exclude`.
pub(crate) fn hash_tree(root: &Path, exclude: &[String]) -> Result<String> {
    if !root.is_dir() {
        bail!("source folder {} does not exist", root.display());
    }
    let mut hasher = Sha256::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(std::result::Result::ok)
            .collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries.into_iter().rev() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with('.') || (dir == root && exclude.contains(&name)) {
                continue;
            }
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let meta =
                std::fs::symlink_metadata(&path).with_context(|| format!("cannot inspect {}", path.display()))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap_or_default();
                hasher.update(format!("L {rel} {}\0", target.display()).as_bytes());
            } else {
                let data = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
                hasher.update(format!("F {rel} {}\0", data.len()).as_bytes());
                hasher.update(&data);
            }
        }
    }
    Ok(files::hex(&hasher.finalize()))
}

/// Why the sources a report would show are not those `manifest`'s build was
/// made from (a line number would point at other code); `None` when they
/// are, or when the record has no hashes (an older ccl-coverage made it).
pub(crate) fn sources_changed(manifest: &BuildManifest, config: &crate::config::Config) -> Option<String> {
    let recorded = manifest.sources.as_ref()?;
    let parts = [
        ("library", &manifest.library_src, &config.library.hash_exclude, &recorded.library),
        ("test", &manifest.tests_src, &config.tests.hash_exclude, &recorded.tests),
    ];
    let changed: Vec<String> = parts
        .iter()
        .filter_map(|(what, dir, exclude, sum)| {
            let now = hash_tree(dir, exclude).unwrap_or_else(|e| e.to_string());
            (now != **sum).then(|| {
                format!(
                    "the {what} sources in {} changed after build {} was made from them",
                    dir.display(),
                    manifest.build_id
                )
            })
        })
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "{}: the report's lines and counts are of the sources as they were built, not as they are now; run `cargo test --test collectives` to build and run them again",
            changed.join("; ")
        )
    })
}

/// A manifest for unit tests of later stages.
#[cfg(test)]
pub(crate) fn test_manifest(build_id: &str) -> BuildManifest {
    let tool = toolchain::Tool { path: "/llvm/bin/clang".into(), version: "clang version 22".into(), major: 22 };
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
    }
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
        let off = Resolved::new(config, false, crate::config::DeviceMode::Auto, None, &none).unwrap();
        assert_eq!(off.device.reason, "coverage is off (CCL_COV_COVERAGE=off)");
        assert!(off.coverage_flags.is_empty());
        let on = Resolved::new(config, true, crate::config::DeviceMode::Auto, None, &none).unwrap();
        assert!(!on.device.enabled, "a config without a device target is host-only");
        assert_eq!(on.coverage_flags, config.coverage.host_flags);
        assert_eq!(on.toolchain.cxx.major, 22);
        let missing = |name: &str| (name == "CXX").then(|| "/nonexistent/clang++".to_string());
        let err = Resolved::new(config, true, crate::config::DeviceMode::Auto, None, &missing).unwrap_err().to_string();
        assert!(err.contains("(from $CXX)"), "{err}");
    }

    #[test]
    fn nvidia_device_coverage_gives_every_build_step_line_tables() {
        use crate::device::{Backend, Found};
        let mut device = test_manifest("b").device;
        device.enabled = true;
        device.backend = Some(Backend::Nvidia);
        device.found = Some(Found::Nvidia {
            cupti: "/c".into(),
            cupti_version: "13.4".into(),
            collector: "/t".into(),
            selective: true,
        });
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
