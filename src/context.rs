//! What both harness binaries read from their environment: the project root,
//! the config, the workspace and the switches. Paths are resolved at run time,
//! not compiled in, so the binaries also run from a checkout on another
//! machine (the GPU host has no cargo).

use crate::config::{self, DeviceMode, LoadedConfig};
use crate::device;
use crate::error::Result;
use crate::workspace::Workspace;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct Context {
    /// The ccl-coverage checkout (`CARGO_MANIFEST_DIR` under cargo, else the
    /// current directory).
    pub root: PathBuf,
    pub loaded: LoadedConfig,
    pub workspace: Workspace,
    /// `target/ccl-coverage`: build cache, rank slots, default workspaces.
    pub state_dir: PathBuf,
    pub device_mode: DeviceMode,
    pub dry_run: bool,
}

impl Context {
    /// Reads `CCL_COV_CONFIG`, `CCL_COV_WORKSPACE`, `CCL_COV_DEVICE_COVERAGE`
    /// and `CCL_COV_DRY_RUN` from the process environment.
    pub fn from_env() -> Result<Context> {
        let env = config::process_env;
        let root = match env("CARGO_MANIFEST_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => std::env::current_dir().unwrap_or_default(),
        };
        let config_path = match env("CCL_COV_CONFIG").filter(|v| !v.is_empty()) {
            Some(p) => absolute(&root, Path::new(&p)),
            None => root.join(config::DEFAULT_CONFIG_PATH),
        };
        let loaded = config::load(&config_path, &config::config_env(&root))?;
        let target = env("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |t| absolute(&root, Path::new(&t)));
        let state_dir = target.join("ccl-coverage");
        let workspace = match env("CCL_COV_WORKSPACE").filter(|v| !v.is_empty()) {
            Some(ws) => Workspace::new(&absolute(&root, Path::new(&ws)))?,
            None => Workspace::new(&state_dir.join(&loaded.config.name))?,
        };
        let device_mode = device::requested_mode(&loaded.config.coverage.device, &env)?;
        let dry_run = env("CCL_COV_DRY_RUN").is_some_and(|v| !v.is_empty() && v != "0");
        Ok(Context { root, loaded, workspace, state_dir, device_mode, dry_run })
    }

    pub fn config(&self) -> &config::Config {
        &self.loaded.config
    }
}

/// `path` made absolute against the current directory, falling back to `root`.
fn absolute(root: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir().map_or_else(|_| root.join(path), |cwd| cwd.join(path))
}
