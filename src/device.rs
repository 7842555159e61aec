//! Device coverage: AUTO, ON or OFF, resolved once per build into a decision
//! and the reason for it. AUTO turns device instrumentation on only when every
//! requirement holds and otherwise falls back to host-only, saying why; ON
//! turns a blocker into an error that says what to change; OFF never
//! instruments device code.

use crate::bail;
use crate::config::{DeviceConfig, DeviceMode};
use crate::error::Result;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceDecision {
    pub requested: DeviceMode,
    pub enabled: bool,
    pub reason: String,
}

impl DeviceDecision {
    /// One line for logs and reports: `host-only (auto): the config has no device target`.
    pub fn summary(&self) -> String {
        let state = if self.enabled { "host+device" } else { "host-only" };
        format!("{state} ({}): {}", self.requested.as_str(), self.reason)
    }
}

/// The mode in force: `CCL_COV_DEVICE_COVERAGE` if set, else the config's.
pub fn requested_mode(config: &DeviceConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<DeviceMode> {
    match env("CCL_COV_DEVICE_COVERAGE").filter(|v| !v.is_empty()) {
        None => Ok(config.mode),
        Some(v) => match DeviceMode::parse(&v) {
            Some(mode) => Ok(mode),
            None => bail!("CCL_COV_DEVICE_COVERAGE={v:?} is not a mode: expected auto, on or off"),
        },
    }
}

/// Resolves `requested` against what the config and toolchain allow.
pub fn decide(requested: DeviceMode, config: &DeviceConfig) -> Result<DeviceDecision> {
    let blocker = match &config.target {
        None => Some("the config has no device target (coverage.device.target)".to_string()),
        Some(_) => None,
    };
    let (enabled, reason) = match (requested, blocker) {
        (DeviceMode::Off, _) => (false, "device coverage is off".to_string()),
        (DeviceMode::On, Some(blocker)) => bail!(
            "device coverage is ON (CCL_COV_DEVICE_COVERAGE or coverage.device.mode) but unavailable because {blocker}; set it to auto or off, or fix the cause"
        ),
        (_, Some(blocker)) => (false, blocker),
        (_, None) => (true, "device code is instrumented".to_string()),
    };
    Ok(DeviceDecision { requested, enabled, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_config_and_bad_values_are_errors() {
        let cfg = DeviceConfig { mode: DeviceMode::Auto, target: None };
        assert_eq!(requested_mode(&cfg, &|_| Some("OFF".into())).unwrap(), DeviceMode::Off);
        assert_eq!(requested_mode(&cfg, &|_| None).unwrap(), DeviceMode::Auto);
        let err = requested_mode(&cfg, &|_| Some("maybe".into())).unwrap_err().to_string();
        assert!(err.contains("expected auto, on or off"), "{err}");
    }

    #[test]
    fn no_device_target_blocks() {
        let cfg = DeviceConfig { mode: DeviceMode::Auto, target: None };
        let auto = decide(DeviceMode::Auto, &cfg).unwrap();
        assert!(!auto.enabled);
        assert_eq!(auto.summary(), "host-only (auto): the config has no device target (coverage.device.target)");
        let err = decide(DeviceMode::On, &cfg).unwrap_err().to_string();
        assert!(err.contains("unavailable because the config has no device target"), "{err}");
        assert!(!decide(DeviceMode::Off, &cfg).unwrap().enabled);
    }
}
