//! Coverage data: raw profiles and their per-trial merge, llvm-cov's
//! summary export as types, the lcov model every total comes from, the
//! one ignore rule, and the coverage mapping read in process.

pub mod ignore;
pub mod lcov;
pub mod llvm_export;
pub mod mapping;
pub(crate) mod model_totals;
pub mod profiles;
pub mod source_names;
pub mod trial_lines;

use crate::build::cache::BuildManifest;
use crate::device::lines::DeviceLines;
use crate::error::Result;
use crate::workspace::Workspace;
use std::collections::BTreeMap;

/// Device lines from a backend whose lines have a source of their own, not
/// llvm-cov's (NVIDIA's kernel records mapped through the build's code
/// objects). `None` without device coverage, and where the device objects go
/// to llvm-cov with the host's (AMDGPU's). `trials` are each trial's name,
/// slug and recorded checksums; `keep` says which source files count (of
/// their names as the backend gives them, as llvm-cov's rule reads the host's);
/// `names` then names them as the report does.
/// Records that fail their checksum are named in the returned `Verified`.
pub(crate) fn device_lines(
    ws: &Workspace,
    manifest: &BuildManifest,
    trials: &[(&str, &str, &BTreeMap<String, String>)],
    keep: &dyn Fn(&str) -> bool,
    names: &source_names::SourceNames,
) -> Result<Option<(DeviceLines, profiles::Verified)>> {
    if manifest.device.line_source() != crate::device::LineSource::KernelRecords {
        return Ok(None);
    }
    let (records, checked) = profiles::verified_device_records(ws, trials)?;
    let Some(mut lines) = crate::device::device_lines(&manifest.device, &manifest.cache_dir, &records)? else {
        return Ok(None);
    };
    lines.all.retain_files(keep);
    for trial in lines.trials.values_mut() {
        trial.retain_files(keep);
    }
    lines.uncounted_library = lines.uncounted_library_kernels(keep).into_iter().map(str::to_owned).collect();
    lines.rename(&|file| names.name(file));
    Ok(Some((lines, checked)))
}
