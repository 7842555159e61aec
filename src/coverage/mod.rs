//! Coverage data: raw profiles and their per-trial merge, llvm-cov's
//! summary export as types, the lcov model every total comes from, the
//! one ignore rule, and the coverage mapping read in process.

pub mod ignore;
pub mod lcov;
pub mod llvm_export;
pub mod mapping;
pub(crate) mod model;
pub mod profiles;
pub(crate) mod sass;

use crate::build::cache::BuildManifest;
use crate::device::Backend;
use crate::error::Result;
use crate::workspace::Workspace;
use std::collections::BTreeMap;

/// Device lines from a backend whose coverage has a source of its own, not
/// llvm-cov's: NVIDIA's kernel records mapped through the build's cubins
/// (`sass`). `None` without device coverage, and for AMDGPU, whose device
/// objects llvm-cov reads beside the host's. `trials` are each trial's
/// name, slug and recorded checksums; `keep` says which source files count.
/// Records that fail their checksum are named in the returned `Verified`.
pub(crate) fn device_lines(
    ws: &Workspace,
    manifest: &BuildManifest,
    trials: &[(&str, &str, &BTreeMap<String, String>)],
    keep: &dyn Fn(&str) -> bool,
) -> Result<Option<(sass::DeviceLines, profiles::Verified)>> {
    match (manifest.device.enabled, manifest.device.backend) {
        (true, Some(Backend::Nvidia)) => {
            let (records, checked) = profiles::verified_device_records(ws, trials)?;
            let mut lines = sass::device_lines(&crate::device::nvidia::cubins_dir(&manifest.cache_dir), &records)?;
            lines.all.retain_files(keep);
            for trial in lines.trials.values_mut() {
                trial.retain_files(keep);
            }
            lines.uncounted_library = lines.uncounted_library_kernels(keep).into_iter().map(str::to_owned).collect();
            Ok(Some((lines, checked)))
        }
        _ => Ok(None),
    }
}
