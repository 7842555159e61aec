//! Every device backend this build knows, in the order targets are offered
//! to them: the one line a new backend adds outside its own folder.

use super::decision::DeviceBackend;

/// The backends, each a folder of `device/`.
pub(crate) fn backends() -> &'static [&'static dyn DeviceBackend] {
    &[
        &super::amdgpu::Amdgpu,
        &super::nvidia::Nvidia,
        #[cfg(test)]
        &super::test_backend::Plain,
    ]
}
