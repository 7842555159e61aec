//! What the device decision is, shared by the stage's front (`mod.rs`) and its
//! backends, which import it from here rather than from the front: the
//! backend a target names, what a backend found, the decision, and where a
//! build's device lines come from.

use crate::config::DeviceMode;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where device coverage comes from, chosen by the device target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// HIP device code instrumented by LLVM; llvm-cov reads its code objects.
    Amdgpu,
    /// CUDA kernels counted by CUPTI's SASS metrics, mapped to lines by the
    /// cubins' `.debug_line`.
    Nvidia,
}

impl Backend {
    /// The backend a GPU architecture names: `gfx*` is AMDGPU, `sm_*` and
    /// `compute_*` are NVIDIA; any other name is none, never a guess.
    pub(crate) fn of_target(target: &str) -> Option<Backend> {
        if target.starts_with("gfx") {
            Some(Backend::Amdgpu)
        } else if target.starts_with("sm_") || target.starts_with("compute_") {
            Some(Backend::Nvidia)
        } else {
            None
        }
    }

    /// Whether the backend's device objects go to llvm-cov (LLVM's own
    /// coverage mapping), rather than to a source of its own.
    pub(crate) fn llvm_objects(self) -> bool {
        self == Backend::Amdgpu
    }
}

/// What a backend found that the build and the trials use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum Found {
    Amdgpu {
        /// The device profile runtime.
        runtime: PathBuf,
        /// The host collector linked into the library.
        collector: PathBuf,
    },
    Nvidia {
        /// The CUPTI library the collector is linked against.
        cupti: PathBuf,
        /// Its version, as its file or its wheel names it.
        cupti_version: String,
        /// The injection library (`CUDA_INJECTION64_PATH`) built against it.
        collector: PathBuf,
        /// Whether this CUPTI counts only the kernels it is told to (the probe
        /// switched counting off for one kernel and on again for the next).
        #[serde(default)]
        selective: bool,
    },
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

    /// Whether the target is AMDGPU (HIP), where host-only needs the
    /// `-Xarch_host` flag forms.
    pub(crate) fn is_hip(&self) -> bool {
        self.backend == Some(Backend::Amdgpu)
    }

    /// The NVIDIA collector and its CUPTI, when NVIDIA device coverage is on.
    pub(crate) fn nvidia(&self) -> Option<(&Path, &Path)> {
        match (&self.found, self.enabled) {
            (Some(Found::Nvidia { collector, cupti, .. }), true) => Some((collector, cupti)),
            _ => None,
        }
    }

    /// Whether NVIDIA device coverage is on with a CUPTI that counts only the
    /// kernels it is told to.
    pub(crate) fn nvidia_selective(&self) -> bool {
        matches!((&self.found, self.enabled), (Some(Found::Nvidia { selective: true, .. }), true))
    }
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

impl DeviceDecision {
    /// Where this build's device lines come from.
    pub(crate) fn line_source(&self) -> LineSource {
        match (self.enabled, self.backend) {
            (true, Some(Backend::Amdgpu)) => LineSource::LlvmObjects,
            (true, Some(Backend::Nvidia)) => LineSource::KernelRecords,
            _ => LineSource::None,
        }
    }
}

/// Paths for a message: `a, b, c`.
pub(super) fn join(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
