//! What the device decision is, shared by the stage's front (`mod.rs`) and its
//! backends, which import it from here rather than from the front: the
//! questions every backend answers (`DeviceBackend`), the backend a target
//! names, what a backend found, the decision, and where a build's device
//! lines come from.

use super::lines::DeviceLines;
use crate::config::{DeviceConfig, DeviceMode};
use crate::env_names::{Known, Lookup};
use crate::error::Result;
use crate::toolchain::Tool;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One GPU vendor's device coverage: what it needs (`check`), and the
/// answers to what the other stages ask of device coverage. A backend is one
/// folder under `device/` and one line in `registry.rs`; `found` is what its
/// own `check` returned, in the build's `build.json`. The defaults are a
/// backend that adds nothing.
pub(crate) trait DeviceBackend: Sync {
    /// Its name in `build.json` and in messages: `nvidia`.
    fn name(&self) -> &'static str;

    /// Whether `found` holds its own fields, as its `check` wrote them: a
    /// `build.json` whose fields are not is refused when read, so no answer
    /// of the backend silently adds nothing ([`Found::get`]).
    fn fields_are_mine(&self, found: &Found) -> std::result::Result<(), String>;

    /// Whether a GPU architecture name (`coverage.device.target`) is this
    /// backend's; names are never guessed, so at most one backend takes one.
    fn takes_target(&self, target: &str) -> bool;

    /// The target names it takes, for the message that names none: `sm_*/compute_* (NVIDIA)`.
    fn target_forms(&self) -> &'static str;

    /// Whether OFF still runs `check`, to say whether device coverage would
    /// have been available (not where the probe itself needs the GPU).
    fn checks_when_off(&self) -> bool {
        true
    }

    /// The first blocker for `target`, or what makes device coverage
    /// available. `tools` is where it may build what it needs, `None` in a
    /// dry run. `Err` of the outer result is a failure of the harness itself.
    fn check(
        &self,
        target: &str,
        config: &DeviceConfig,
        cxx: &Tool,
        tools: Option<&Path>,
        env: Lookup,
    ) -> Result<std::result::Result<Available, Blocker>>;

    /// Where its device lines come from.
    fn line_source(&self) -> LineSource;

    /// The host instrumentation flags when its device code must stay
    /// uninstrumented (host-only).
    fn host_only_flags(&self, host_flags: &[String]) -> Vec<String> {
        host_flags.to_vec()
    }

    /// `{coverage_link_flags}` for the library's link, device coverage on.
    fn link_flags(&self, _found: &Found) -> Vec<String> {
        Vec::new()
    }

    /// What a build step's environment gains; `inherited` reads the step's
    /// own environment, then the harness's.
    fn build_env(&self, _found: &Found, _inherited: Lookup) -> Vec<(String, String)> {
        Vec::new()
    }

    /// What a trial's environment gains: its collector, writing into the
    /// trial's `profile_dir` and once per build under `cache_dir`.
    fn trial_env(
        &self,
        _found: &Found,
        _config: &DeviceConfig,
        _profile_dir: &Path,
        _cache_dir: &Path,
    ) -> Vec<(String, String)> {
        Vec::new()
    }

    /// What it does once the library is built, for its trials; what to say.
    fn after_build(&self, _found: &Found, _objects: &[PathBuf], _cache_dir: &Path, _env: Lookup) -> Option<String> {
        None
    }

    /// Why a passed trial's device coverage is lost, for a collector that
    /// writes records of its own: each of `expected` processes left a complete
    /// one in `dir`, or `Some(why)`.
    fn coverage_lost(&self, _dir: &Path, _expected: usize) -> Option<String> {
        None
    }

    /// Whether a raw profile in a trial's folder is this backend's device profile.
    fn is_device_profile(&self, _file_name: &str) -> bool {
        false
    }

    /// The records its own collector left in a trial's folder, sorted.
    fn collector_records(&self, _dir: &Path) -> Result<Vec<PathBuf>> {
        Ok(Vec::new())
    }

    /// The file that lists what its trials count, where it keeps one.
    fn counted_kernels_file(&self, _cache_dir: &Path) -> Option<PathBuf> {
        None
    }

    /// The device lines of each trial's checked `records` (by slug) and of
    /// all of them, for a backend whose lines come from its records.
    fn device_lines(
        &self,
        _found: &Found,
        _cache_dir: &Path,
        _records: &BTreeMap<String, Vec<PathBuf>>,
    ) -> Result<Option<DeviceLines>> {
        Ok(None)
    }

    /// Why `coverage.profile_pattern` cannot work with its device coverage on.
    fn profile_pattern_problem(&self, _pattern: &str) -> Option<String> {
        None
    }

    /// This machine's GPUs as the vendor's tools list them; empty without them.
    fn gpus(&self) -> Vec<String> {
        Vec::new()
    }

    /// Its own `CCL_COV_*` variables: the context checks the environment
    /// against these and the crate's list together.
    fn env_names(&self) -> &'static [Known] {
        &[]
    }
}

/// The backend a target picks: one of the registry's (`registry.rs`, which
/// also finds one by target or by name), written to `build.json` by its name.
#[derive(Clone, Copy)]
pub struct Backend(pub(crate) &'static dyn DeviceBackend);

impl Backend {
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Whether its device objects go to llvm-cov with the host's.
    pub(crate) fn llvm_objects(self) -> bool {
        self.0.line_source() == LineSource::LlvmObjects
    }
}

impl PartialEq for Backend {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Backend {}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Backend {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// What a backend found that the build and the trials use: its own fields,
/// which only it reads ([`Found::get`]), beside its name. Read back, the
/// fields must be the backend's own type, or the read fails naming why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    pub backend: Backend,
    #[serde(flatten)]
    fields: serde_json::Map<String, serde_json::Value>,
}

impl<'de> Deserialize<'de> for Found {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            backend: Backend,
            #[serde(flatten)]
            fields: serde_json::Map<String, serde_json::Value>,
        }
        let Raw { backend, fields } = Raw::deserialize(deserializer)?;
        let found = Found { backend, fields };
        backend.0.fields_are_mine(&found).map_err(|why| {
            serde::de::Error::custom(format!("what the {} backend found is not its own: {why}", backend.name()))
        })?;
        Ok(found)
    }
}

impl Found {
    /// `fields`, which must serialize to a JSON object, as `backend` found them.
    pub(crate) fn new(backend: Backend, fields: &impl Serialize) -> Found {
        let fields = match serde_json::to_value(fields) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        Found { backend, fields }
    }

    /// The fields as the backend's own type, or why they are not. A read
    /// `build.json` was checked ([`DeviceBackend::fields_are_mine`]), so an
    /// answer's `.ok()` can only miss on a backend asking for another's type.
    pub fn get<T: DeserializeOwned>(&self) -> std::result::Result<T, String> {
        serde_json::from_value(serde_json::Value::Object(self.fields.clone())).map_err(|e| e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceDecision {
    pub requested: DeviceMode,
    pub enabled: bool,
    pub reason: String,
    /// The GPU architecture, when the config names one.
    pub target: Option<String>,
    /// The backend the target picks, when there is a target.
    #[serde(default)]
    pub backend: Option<Backend>,
    /// What the backend needs, when device coverage is on.
    #[serde(default)]
    pub found: Option<Found>,
}

impl DeviceDecision {
    /// One line for logs and reports: `host-only (auto): the config has no device target`.
    pub(crate) fn summary(&self) -> String {
        let state = if self.enabled { "host+device" } else { "host-only" };
        format!("{state} ({}): {}", self.requested.as_str(), self.reason)
    }

    /// The backend and what it found, when device coverage is on.
    pub(crate) fn on(&self) -> Option<(Backend, &Found)> {
        match (self.enabled, self.backend, &self.found) {
            (true, Some(backend), Some(found)) => Some((backend, found)),
            _ => None,
        }
    }

    /// Where this build's device lines come from.
    pub(crate) fn line_source(&self) -> LineSource {
        self.on().map_or(LineSource::None, |(backend, _)| backend.0.line_source())
    }
}

/// Why device coverage is unavailable, in the backend's own words, and what
/// to change so that ON works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Blocker {
    pub(crate) message: String,
    pub(crate) fix: String,
}

/// What makes device coverage available, and the sentence that says so.
pub(crate) struct Available {
    pub(crate) found: Found,
    pub(crate) detail: String,
}

/// Where a build's device lines come from, whatever the vendor: none, the
/// device objects llvm-cov reads with the host's (LLVM's own mapping), or
/// kernel records of the backend's collector mapped through its code
/// objects' line tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineSource {
    None,
    LlvmObjects,
    KernelRecords,
}

/// Paths for a message: `a, b, c`.
pub(super) fn join(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
