//! Every device backend this build knows, in the order targets are offered
//! to them: the one line a new backend adds outside its own folder.

use super::backend::{Backend, DeviceBackend};
use serde::{Deserialize, Deserializer};

/// The backends, each a folder of `device/`.
pub(crate) fn backends() -> &'static [&'static dyn DeviceBackend] {
    &[
        &super::amdgpu::Amdgpu,
        &super::nvidia::Nvidia,
        #[cfg(test)]
        &super::test_backend::Plain,
    ]
}

impl Backend {
    /// The backend a GPU architecture names; any other name is none, never a guess.
    pub(crate) fn of_target(target: &str) -> Option<Backend> {
        backends().iter().find(|b| b.takes_target(target)).map(|&b| Backend(b))
    }

    /// The backend called `name` (`build.json`'s word for it).
    pub fn named(name: &str) -> Option<Backend> {
        backends().iter().find(|b| b.name() == name).map(|&b| Backend(b))
    }
}

impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Backend::named(&name).ok_or_else(|| {
            let known: Vec<_> = backends().iter().map(|b| b.name()).collect();
            serde::de::Error::custom(format!("{name:?} names no device backend: expected one of {}", known.join(", ")))
        })
    }
}
