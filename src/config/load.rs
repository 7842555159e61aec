//! Loading a config: read (or the embedded default), parse, expand
//! `${VAR}` in every string value, deserialize, then validate; every error
//! names the file and the JSON path.

use super::*;
use crate::bail;
use crate::env_names::Lookup;
use crate::error::{Context, Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A config together with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub(crate) path: PathBuf,
    /// Relative paths in the config are relative to this directory.
    pub(crate) dir: PathBuf,
    pub config: Config,
}

impl LoadedConfig {
    pub(crate) fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        crate::workspace::normalize(&if p.is_absolute() { p.to_path_buf() } else { self.dir.join(p) })
    }

    pub(crate) fn library_src(&self) -> PathBuf {
        self.resolve(&self.config.library.source_dir)
    }

    /// The test programs' sources: the library's when `tests.source_dir` is
    /// unset (one build makes both).
    pub(crate) fn tests_src(&self) -> PathBuf {
        self.resolve(self.config.tests.source_dir.as_deref().unwrap_or(&self.config.library.source_dir))
    }

    /// The project the config belongs to: the folder that holds it, or that
    /// folder's parent when it is called `configs` (this repository's layout:
    /// `configs/local.json` beside `snapshots/` and `target/`). Never found
    /// from the current directory, and never the harness's own checkout
    /// unless the config is there.
    pub(crate) fn project_dir(&self) -> PathBuf {
        match self.dir.file_name() {
            Some(name) if name == "configs" => self.dir.parent().map_or_else(|| self.dir.clone(), Path::to_path_buf),
            _ => self.dir.clone(),
        }
    }

    /// The project's `snapshots/` ([`LoadedConfig::project_dir`]).
    pub(crate) fn snapshots_dir(&self) -> PathBuf {
        self.project_dir().join("snapshots")
    }
}

/// The most a config (or an overlay) may hold. The largest shipped config
/// is a few KiB and an upstream `test_runner` config some hundreds; a file of
/// hundreds of MiB is some other file, and parsing it took minutes and GiB.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The text of the config file at `path`, refused past [`MAX_CONFIG_BYTES`]
/// before it is read whole (a FIFO or `/dev/zero` is read only that far).
pub(crate) fn read_text(path: &Path, what: &str) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    // Opened without blocking: a FIFO with no writer would hang `open` forever.
    let file = std::fs::File::options().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_fifo() || kind.is_socket() {
        let what = if kind.is_fifo() { "a FIFO" } else { "a socket" };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file: a config is a file"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        let size = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file).map(|m| m.len());
        let size = size.map_or_else(|| "more than 4 MiB".to_string(), |n| format!("{n} bytes"));
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{what} is {size}: expected at most {MAX_CONFIG_BYTES} bytes (4 MiB); is it the right file?"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Loads the config at `path`, or the embedded default's text if `path` is
/// the default location and does not exist there.
pub fn load(path: &Path, env: Lookup<'_>) -> Result<LoadedConfig> {
    let text = match read_text(path, "the config") {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && path.ends_with(DEFAULT_CONFIG_PATH) => {
            DEFAULT_CONFIG_TEXT.to_string()
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            bail!("{}: not valid JSON: the file is not UTF-8 text ({e})", path.display())
        }
        Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => bail!("{}: {e}", path.display()),
        Err(e) => {
            bail!("cannot read config {}: {e}", path.display())
        }
    };
    load_str(&text, path, env)
}

/// Loads the config at `path` in either format: an upstream RCCL
/// `test_runner` config (told by its top-level keys) is combined with the
/// overlay at `overlay`; anything else is ccl-coverage's own format.
pub(crate) fn load_any(path: &Path, overlay: &Path, env: Lookup<'_>) -> Result<LoadedConfig> {
    // `load` says why an unreadable file cannot be read.
    let Ok(text) = read_text(path, "the config") else { return load(path, env) };
    match serde_json::from_str::<Value>(&text) {
        Ok(value) if crate::upstream::is_upstream(&value) => overlay::load_upstream(path, &text, overlay, env),
        _ => load_str(&text, path, env),
    }
}

/// An error in the config at `path`, at `json_path` (`$` for the whole).
pub(crate) fn error_at(path: &Path, json_path: &str, msg: &dyn std::fmt::Display) -> Error {
    Error::new(format!("{}: {}: {msg}", path.display(), if json_path.is_empty() { "$" } else { json_path }))
}

/// Parses, expands and checks config text said to come from `path`.
pub fn load_str(text: &str, path: &Path, env: Lookup<'_>) -> Result<LoadedConfig> {
    let at = |json_path: &str, msg: &dyn std::fmt::Display| error_at(path, json_path, msg);
    let mut value: Value = serde_json::from_str(text).with_context(|| format!("{}: not valid JSON", path.display()))?;
    if !value.is_object() {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        return Err(at("", &format!("expected a JSON object (the config), got {kind}")));
    }
    expand_strings(&mut value, &mut String::new(), env).map_err(|(p, e)| at(&p, &e))?;
    let config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let json_path = e.path().to_string();
        at(if json_path == "." { "" } else { &json_path }, e.inner())
    })?;
    validate::validate(&config).map_err(|(p, e)| at(&p, &e))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    Ok(LoadedConfig { path: path.to_path_buf(), dir, config })
}

/// Expands `${VAR}` in every string value, and rejects NUL characters in
/// values and keys: they cannot reach an argv, an environment or a path.
pub(super) fn expand_strings(value: &mut Value, json_path: &mut String, env: Lookup<'_>) -> Result<(), Invalid> {
    const NUL: &str = "contains a NUL character, which no argument, environment variable or path can hold";
    match value {
        Value::String(s) => {
            *s = expand::expand(s, env).map_err(|e| invalid(json_path.clone(), e.to_string()))?;
            if s.contains('\0') {
                return Err(invalid(json_path.clone(), format!("the value {NUL}")));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = json_path.len();
                json_path.push_str(&format!("[{i}]"));
                expand_strings(item, json_path, env)?;
                json_path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = json_path.len();
                if !json_path.is_empty() {
                    json_path.push('.');
                }
                json_path.push_str(key);
                if key.contains('\0') {
                    return Err(invalid(json_path.clone(), format!("the key {NUL}")));
                }
                expand_strings(item, json_path, env)?;
                json_path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}
