//! The plan: one trial per collective × size × variant, named
//! `Collective::size[::variant]`. Planning reads only the config, so listing
//! trials is instant and builds nothing.

use crate::config::{self, Collective, Config, LauncherConfig, LoadedConfig, Variant};
use crate::error::Result;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TrialSpec {
    /// `Collective::size[::variant]`, as libtest and nextest show it.
    pub name: String,
    /// The name as a file name: `Collective.size[.variant]`.
    pub slug: String,
    pub collective: usize,
    pub size: String,
    pub variant: Option<usize>,
    pub launcher: String,
    pub ranks: usize,
    pub ignored: bool,
}

impl TrialSpec {
    pub fn collective<'c>(&self, config: &'c Config) -> &'c Collective {
        &config.collectives[self.collective]
    }

    pub fn variant<'c>(&self, config: &'c Config) -> Option<&'c Variant> {
        self.variant.map(|i| &config.variants[i])
    }

    pub fn launcher<'c>(&self, config: &'c Config) -> &'c LauncherConfig {
        &config.launchers[self.launcher.as_str()]
    }

    /// The timeout: the default, then matching `overrides`, then (with device
    /// coverage on) matching `device_coverage` rules; later rules win.
    pub fn timeout(&self, config: &Config, device_coverage: bool) -> Duration {
        let collective = &self.collective(config).name;
        let variant = self.variant(config).map(|v| v.name.as_str());
        let device_rules = if device_coverage { &config.timeouts.device_coverage[..] } else { &[] };
        let seconds = config
            .timeouts
            .overrides
            .iter()
            .chain(device_rules)
            .rfind(|rule| rule.matches(collective, &self.size, variant))
            .map_or(config.timeouts.default, |rule| rule.seconds);
        Duration::from_secs(seconds)
    }
}

/// Every trial of the config, in config order (collective, then size, then variant).
pub fn plan(config: &Config) -> Vec<TrialSpec> {
    let variants: Vec<Option<usize>> =
        if config.variants.is_empty() { vec![None] } else { (0..config.variants.len()).map(Some).collect() };
    let mut trials = Vec::new();
    for (ci, collective) in config.collectives.iter().enumerate() {
        for size in &config.sizes {
            for &vi in &variants {
                let variant = vi.map(|i| &config.variants[i]);
                let mut parts = vec![collective.name.as_str(), size.as_str()];
                if let Some(v) = variant {
                    parts.push(&v.name);
                }
                trials.push(TrialSpec {
                    name: parts.join("::"),
                    slug: parts.join("."),
                    collective: ci,
                    size: size.to_string(),
                    variant: vi,
                    launcher: variant
                        .and_then(|v| v.launcher.clone())
                        .unwrap_or_else(|| config.launch.launcher.clone()),
                    ranks: variant.and_then(|v| v.ranks).unwrap_or(config.launch.ranks),
                    ignored: collective.ignore || variant.is_some_and(|v| v.ignore),
                });
            }
        }
    }
    trials
}

fn trial_parts<'c>(c: &'c Config, t: &TrialSpec) -> Vec<(String, &'c str)> {
    let size = c.sizes.iter().position(|s| s.as_str() == t.size).unwrap_or_default();
    let mut parts = vec![
        (format!("collectives[{}].name", t.collective), c.collectives[t.collective].name.as_str()),
        (format!("sizes[{size}]"), c.sizes[size].as_str()),
    ];
    if let Some(v) = t.variant {
        parts.push((format!("variants[{v}].name"), c.variants[v].name.as_str()));
    }
    parts
}

/// Two trials must never share a log, a result or a profile folder, whatever
/// their names: trial names are `Collective::size[::variant]` but file names
/// join the parts with `.`, so `A.1K` × `1K` × `x` and `A` × `1K` × `1K.x`
/// would both write `A.1K.1K.x`, and variant `ring.profdata` would put its
/// raw profiles where variant `ring`'s merged profile goes. Names are
/// compared ignoring case, so a workspace on a case-insensitive file system
/// (or copied to one as a CI artifact) is safe too. No trial file may be one
/// of the workspace's own (`results/run.json`, `results/junit.xml`). The
/// error names the config file and the JSON path of the name to change.
pub fn check(loaded: &LoadedConfig) -> Result<()> {
    let c = &loaded.config;
    let invalid = |json_path: String, msg: String| config::error_at(&loaded.path, &json_path, &msg);
    let trials = plan(c);
    let parts = |t: &TrialSpec| trial_parts(c, t);
    let describe = |t: &TrialSpec| {
        let paths: Vec<String> = parts(t).into_iter().map(|(p, _)| p).collect();
        format!("{:?} ({})", t.name, paths.join(", "))
    };
    let reserved: BTreeSet<String> = crate::workspace::RESERVED_FILES.iter().map(|f| f.to_lowercase()).collect();
    let mut owners: HashMap<String, usize> = HashMap::new();
    for (i, trial) in trials.iter().enumerate() {
        if let Err(why) = crate::workspace::check_slug(&trial.slug) {
            let (path, _) = parts(trial).swap_remove(0);
            return Err(invalid(path, format!("{why}; trial {}", describe(trial))));
        }
        for file in crate::workspace::trial_files(&trial.slug) {
            let key = file.to_lowercase();
            if reserved.contains(&key) {
                let (path, _) = parts(trial).swap_remove(0);
                return Err(invalid(
                    path,
                    format!(
                        "trial {} would write {file}, which the workspace keeps for itself: rename it",
                        describe(trial)
                    ),
                ));
            }
            let Some(first) = owners.insert(key, i).filter(|&owner| owner != i) else { continue };
            let earlier = &trials[first];
            // Report at the first part in which the later trial differs.
            let path = parts(trial)
                .into_iter()
                .zip(parts(earlier))
                .find(|((_, a), (_, b))| a != b)
                .map_or_else(|| parts(trial).swap_remove(0).0, |((p, _), _)| p);
            return Err(invalid(
                path,
                format!(
                    "trials {} and {} would share the workspace file {file} (file names join the name's parts with '.', \
                     compared ignoring case): rename one of them",
                    describe(earlier),
                    describe(trial)
                ),
            ));
        }
    }
    Ok(())
}

/// The names of every trial of the config, ignored ones included.
pub fn names(config: &Config) -> BTreeSet<String> {
    plan(config).into_iter().map(|t| t.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEFAULT_CONFIG_TEXT, TimeoutRule, load_str};
    use std::path::Path;

    /// Loads `v` and checks its plan, as the harness does.
    fn checked(v: &serde_json::Value) -> Result<LoadedConfig> {
        let loaded = load_str(&v.to_string(), Path::new("/p/configs/local.json"), &|_| None)?;
        check(&loaded)?;
        Ok(loaded)
    }

    #[test]
    fn trials_sharing_a_file_name_are_an_error_naming_both() {
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v["collectives"][1]["name"] = "AllReduce.1K".into();
        v["variants"][0]["name"] = "1K.direct".into();
        let err = checked(&v).unwrap_err().to_string();
        assert!(
            err.contains("\"AllReduce::1K::1K.direct\" (collectives[0].name, sizes[0], variants[0].name)"),
            "{err}"
        );
        assert!(
            err.contains("\"AllReduce.1K::1K::direct\" (collectives[1].name, sizes[0], variants[1].name)"),
            "{err}"
        );
        assert!(err.contains("profiles/AllReduce.1K.1K.direct"), "{err}");

        // A raw-profile folder where another trial's merged profile goes.
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v["variants"][1]["name"] = "ring.profdata".into();
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": variants[1].name: trials"), "{err}");
        assert!(err.contains("profiles/AllReduce.1K.ring.profdata"), "{err}");

        // Case only.
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v["collectives"][1]["name"] = "allreduce".into();
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": collectives[1].name: trials \"AllReduce::1K::ring\""), "{err}");
    }

    fn local() -> Config {
        load_str(DEFAULT_CONFIG_TEXT, Path::new("/p/configs/local.json"), &|_| None).unwrap().config
    }

    #[test]
    fn names_are_collective_size_variant() {
        let config = local();
        let trials = plan(&config);
        assert_eq!(trials.len(), config.collectives.len() * config.sizes.len() * config.variants.len());
        assert_eq!(trials[0].name, "AllReduce::1K::ring");
        assert_eq!(trials[0].slug, "AllReduce.1K.ring");
        let mpi = trials.iter().find(|t| t.name == "SendRecv::256K::mpi").unwrap();
        assert_eq!((mpi.launcher.as_str(), mpi.ranks), ("mpi", 3));
        assert!(trials.iter().filter(|t| t.ignored).all(|t| t.name.ends_with("::smallchunks")));
    }

    #[test]
    fn without_variants_names_have_two_parts() {
        let mut config = local();
        config.variants.clear();
        let trials = plan(&config);
        assert_eq!(trials[0].name, "AllReduce::1K");
        assert_eq!(trials[0].launcher, config.launch.launcher);
    }

    #[test]
    fn later_and_device_rules_win() {
        let mut config = local();
        let rule = |collective: Option<&str>, size: Option<&str>, seconds| TimeoutRule {
            collective: collective.map(Into::into),
            size: size.map(Into::into),
            variant: None,
            seconds,
        };
        config.timeouts.overrides = vec![rule(Some("AllReduce"), None, 50), rule(None, Some("256K"), 70)];
        config.timeouts.device_coverage = vec![rule(Some("AllReduce"), Some("256K"), 1800)];
        let trials = plan(&config);
        let get = |name: &str| trials.iter().find(|t| t.name == name).unwrap();
        let secs = |name: &str, device| get(name).timeout(&config, device).as_secs();
        assert_eq!(secs("Reduce::1K::ring", false), config.timeouts.default);
        assert_eq!(secs("AllReduce::1K::ring", false), 50);
        assert_eq!(secs("AllReduce::256K::ring", false), 70);
        assert_eq!(secs("AllReduce::256K::ring", true), 1800);
        assert_eq!(secs("Reduce::256K::ring", true), 70);
    }
}
