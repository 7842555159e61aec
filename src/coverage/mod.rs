//! Coverage data: raw profiles and their per-trial merge, llvm-cov's
//! summary export as types, the lcov model every total comes from, the
//! one ignore rule, and the coverage mapping read in process.

pub(crate) mod device_lines;
pub mod ignore;
pub mod lcov;
pub mod llvm_export;
pub mod mapping;
pub(crate) mod model;
pub mod profiles;
pub(crate) mod sass;
pub mod trial_lines;

use crate::build::cache::BuildManifest;
use crate::device::{LineSource, kernel_objects_dir};
use crate::error::Result;
use crate::workspace::Workspace;
use std::collections::BTreeMap;

/// Device lines from a backend whose lines have a source of their own, not
/// llvm-cov's: kernel records mapped through the build's code objects
/// (`sass`, NVIDIA's). `None` without device coverage, and where the device
/// objects go to llvm-cov with the host's (AMDGPU's). `trials` are each
/// trial's name, slug and recorded checksums; `keep` says which source files
/// count. Records that fail their checksum are named in the returned `Verified`.
pub(crate) fn device_lines(
    ws: &Workspace,
    manifest: &BuildManifest,
    trials: &[(&str, &str, &BTreeMap<String, String>)],
    keep: &dyn Fn(&str) -> bool,
) -> Result<Option<(device_lines::DeviceLines, profiles::Verified)>> {
    match manifest.device.line_source() {
        LineSource::KernelRecords => {
            let (records, checked) = profiles::verified_device_records(ws, trials)?;
            let mut lines = sass::device_lines(&kernel_objects_dir(&manifest.cache_dir), &records)?;
            lines.all.retain_files(keep);
            for trial in lines.trials.values_mut() {
                trial.retain_files(keep);
            }
            lines.uncounted_library = lines.uncounted_library_kernels(keep).into_iter().map(str::to_owned).collect();
            Ok(Some((lines, checked)))
        }
        LineSource::LlvmObjects | LineSource::None => Ok(None),
    }
}
