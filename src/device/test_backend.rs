//! A third backend that exists only in the unit tests: proof that a vendor
//! plugs in with its own file and one line in `registry.rs`, no edit
//! anywhere else (docs/architecture.md, "Adding a device backend"). Its
//! targets are `plain_*`; its collector writes `*.plainrec` files of
//! `file:line count` lines, and its device lines come from them.

use super::backend::{Available, Backend, Blocker, DeviceBackend, Found, LineSource};
use super::lines::{DeviceCoverage, DeviceLines, LinesOrigin};
use crate::config::DeviceConfig;
use crate::env_names::Lookup;
use crate::error::{Context, Result};
use crate::toolchain::Tool;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) struct Plain;

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Needs {
    collector: PathBuf,
}

impl DeviceBackend for Plain {
    fn name(&self) -> &'static str {
        "plain"
    }

    fn fields_are_mine(&self, found: &Found) -> std::result::Result<(), String> {
        found.get::<Needs>().map(|_| ())
    }

    fn takes_target(&self, target: &str) -> bool {
        target.starts_with("plain_")
    }

    fn target_forms(&self) -> &'static str {
        "plain_* (the tests' backend)"
    }

    fn check(
        &self,
        target: &str,
        _config: &DeviceConfig,
        _cxx: &Tool,
        _tools: Option<&Path>,
        env: Lookup,
    ) -> Result<std::result::Result<Available, Blocker>> {
        Ok(match env("PLAIN_COLLECTOR") {
            Some(collector) => Ok(Available {
                found: Found::new(Backend(&Plain), &Needs { collector: collector.into() }),
                detail: format!("{target} counted by the plain collector"),
            }),
            None => Err(Blocker { message: "PLAIN_COLLECTOR is not set".into(), fix: "set PLAIN_COLLECTOR".into() }),
        })
    }

    fn line_source(&self) -> LineSource {
        LineSource::KernelRecords
    }

    fn trial_env(&self, found: &Found, _: &DeviceConfig, profile_dir: &Path, _: &Path) -> Vec<(String, String)> {
        let needs: Needs = found.get().expect("the plain backend's own fields");
        vec![
            ("PLAIN_PRELOAD".into(), needs.collector.display().to_string()),
            ("PLAIN_RECORDS".into(), profile_dir.display().to_string()),
        ]
    }

    fn collector_records(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let Ok(entries) = std::fs::read_dir(dir) else { return Ok(Vec::new()) };
        let mut records: Vec<_> = entries
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "plainrec"))
            .collect();
        records.sort();
        Ok(records)
    }

    fn device_lines(
        &self,
        _found: &Found,
        _cache_dir: &Path,
        records: &BTreeMap<String, Vec<PathBuf>>,
    ) -> Result<Option<DeviceLines>> {
        let mut lines = DeviceLines {
            origin: LinesOrigin { id: "plain", name: "the plain collector", short: "plain lines" },
            ..DeviceLines::default()
        };
        for (slug, files) in records {
            let mut trial = DeviceCoverage::default();
            for file in files {
                let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
                for (source, line, count) in text.lines().filter_map(parse) {
                    for coverage in [&mut trial, &mut lines.all] {
                        *coverage.files.entry(source.to_string()).or_default().lines.entry(line).or_default() += count;
                    }
                }
            }
            lines.trials.insert(slug.clone(), trial);
        }
        Ok(Some(lines))
    }
}

/// `file:line count`.
fn parse(text: &str) -> Option<(&str, u32, u64)> {
    let (place, count) = text.split_once(' ')?;
    let (file, line) = place.rsplit_once(':')?;
    Some((file, line.parse().ok()?, count.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceMode;
    use crate::device::lines::to_lcov;
    use crate::device::tests::{no_device, tool};
    use crate::device::{self, DeviceDecision};

    #[test]
    fn a_backend_in_its_own_file_is_chosen_decided_recorded_and_read_like_the_others() {
        let cfg = DeviceConfig { target: Some("plain_1".into()), ..no_device() };
        let env = |name: &str| (name == "PLAIN_COLLECTOR").then(|| "/opt/plain.so".to_string());
        let decision = device::decide(DeviceMode::Auto, &cfg, &tool(), None, &env).unwrap();
        assert!(decision.enabled, "{decision:?}");
        assert_eq!(decision.summary(), "host+device (auto): plain_1 counted by the plain collector");
        // build.json holds it by name, and reads back the same.
        let json = serde_json::to_string(&decision).unwrap();
        assert!(json.contains(r#""found":{"backend":"plain","collector":"/opt/plain.so"}"#), "{json}");
        assert_eq!(serde_json::from_str::<DeviceDecision>(&json).unwrap(), decision);
        // Fields that are not its own (another release's, a hand edit) are refused, saying why.
        let altered = json.replace(r#""collector":"/opt/plain.so""#, r#""collecter":"/opt/plain.so""#);
        let err = serde_json::from_str::<DeviceDecision>(&altered).unwrap_err().to_string();
        assert!(err.contains("what the plain backend found is not its own: missing field `collector`"), "{err}");

        let ws = tempfile::tempdir().unwrap();
        let env = device::trial_env(&decision, &cfg, ws.path(), ws.path());
        assert_eq!(env[0], ("PLAIN_PRELOAD".to_string(), "/opt/plain.so".to_string()));
        assert_eq!(decision.line_source(), LineSource::KernelRecords);

        std::fs::write(ws.path().join("rank0.plainrec"), "k.cu:3 5\nk.cu:4 0\n").unwrap();
        std::fs::write(ws.path().join("h-1-lib.profraw"), "").unwrap();
        let records = device::collector_records(ws.path()).unwrap();
        assert_eq!(records, [ws.path().join("rank0.plainrec")]);
        let lines =
            device::device_lines(&decision, ws.path(), &BTreeMap::from([("t".to_string(), records)])).unwrap().unwrap();
        assert_eq!(to_lcov(&lines.all), "TN:\nSF:k.cu\nFNF:0\nFNH:0\nDA:3,5\nDA:4,0\nLF:2\nLH:1\nend_of_record\n");

        // Unavailable, and ON: its own blocker and fix.
        let err = device::decide(DeviceMode::On, &cfg, &tool(), None, &|_| None).unwrap_err().to_string();
        assert!(err.contains("because PLAIN_COLLECTOR is not set. To fix: set PLAIN_COLLECTOR"), "{err}");
        // An unknown target names every backend's forms, this one's too.
        let other = DeviceConfig { target: Some("tpu_1".into()), ..no_device() };
        let err = device::decide(DeviceMode::Auto, &other, &tool(), None, &|_| None).unwrap_err().to_string();
        assert!(err.contains("plain_* (the tests' backend)") && err.contains("gfx*"), "{err}");
    }
}
