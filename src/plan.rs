//! The plan: one trial per collective × size × variant, named
//! `Collective::size[::variant]`, then one per program (plain, gtest or
//! ctest), named as the program, or per program × size, named
//! `program::size`; or, for an upstream RCCL `test_runner` config, one trial per
//! resolved test, named `<suite>::<test>`. Planning
//! reads only the config, so listing trials is instant and builds nothing.

use crate::config::{
    self, Collective, Config, LauncherConfig, LoadedConfig, Program, ProgramKind, UpstreamRun, Variant, limits,
};
use crate::error::Result;
use crate::upstream::{self, TrialKind};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct TrialSpec {
    /// `Collective::size[::variant]` or `<suite>::<test>`, as libtest and
    /// nextest show it.
    pub(crate) name: String,
    /// The name as a file name: `Collective.size[.variant]`.
    pub slug: String,
    pub(crate) source: Source,
    pub(crate) launcher: String,
    pub ranks: usize,
    pub(crate) ignored: bool,
    /// Why the trial is ignored, when the plan (not the user) decided it.
    pub(crate) ignore_reason: Option<String>,
}

/// Where a trial comes from, with what its launch needs.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// ccl-coverage's own matrix: indices into the config.
    Matrix { collective: usize, size: String, variant: Option<usize> },
    /// A program of the config: an index into `programs`, and its size
    /// (as written) when it has `sizes`.
    Program { index: usize, size: Option<String>, kind: TrialKind },
    /// A resolved upstream test.
    Upstream(Box<UpstreamTrial>),
}

#[derive(Debug, Clone)]
pub(crate) struct UpstreamTrial {
    pub(crate) test: upstream::Test,
    pub(crate) nodes: u64,
    /// GPUs per node the test asks for (`"auto"` decided).
    pub(crate) gpus: u64,
}

impl TrialSpec {
    pub(crate) fn collective<'c>(&self, config: &'c Config) -> Option<&'c Collective> {
        match &self.source {
            Source::Matrix { collective, .. } => config.collectives.get(*collective),
            Source::Program { .. } | Source::Upstream(_) => None,
        }
    }

    pub(crate) fn variant<'c>(&self, config: &'c Config) -> Option<&'c Variant> {
        match &self.source {
            Source::Matrix { variant, .. } => variant.and_then(|i| config.variants.get(i)),
            Source::Program { .. } | Source::Upstream(_) => None,
        }
    }

    pub(crate) fn program<'c>(&self, config: &'c Config) -> Option<&'c Program> {
        match &self.source {
            Source::Program { index, .. } => config.programs.get(*index),
            Source::Matrix { .. } | Source::Upstream(_) => None,
        }
    }

    /// The size as written (`1K`); empty for a trial without one.
    pub(crate) fn size(&self) -> &str {
        match &self.source {
            Source::Matrix { size, .. } => size,
            Source::Program { size, .. } => size.as_deref().unwrap_or_default(),
            Source::Upstream(_) => "",
        }
    }

    pub(crate) fn upstream(&self) -> Option<&UpstreamTrial> {
        match &self.source {
            Source::Matrix { .. } | Source::Program { .. } => None,
            Source::Upstream(u) => Some(u),
        }
    }

    /// How the trial is launched and judged: a collective's is a perf
    /// binary, a program's its `kind`, an upstream test's as upstream decided.
    pub(crate) fn kind(&self) -> TrialKind {
        match &self.source {
            Source::Matrix { .. } => TrialKind::Perf,
            Source::Program { kind, .. } => *kind,
            Source::Upstream(u) => u.test.kind,
        }
    }

    /// The first part of its name as the records keep it (`collective`):
    /// the collective, the program, or the upstream suite.
    pub(crate) fn group(&self, config: &Config) -> String {
        match &self.source {
            Source::Matrix { .. } => self.collective(config).map(|c| c.name.to_string()).unwrap_or_default(),
            Source::Program { .. } => self.program(config).map(|p| p.name.to_string()).unwrap_or_default(),
            Source::Upstream(u) => u.test.suite.clone(),
        }
    }

    /// Why the trial is ignored, `None` if it is not: the plan's reason, else
    /// the config's `"ignore": true` on its collective or variant. Records of
    /// the run (JUnit) give it; the plan's own reason stays the one printed.
    pub(crate) fn why_ignored(&self, config: &Config) -> Option<String> {
        if !self.ignored {
            return None;
        }
        let by_config = || {
            let marked = match (self.collective(config).filter(|c| c.ignore), self.program(config)) {
                (Some(c), _) => format!("collective {}", c.name.as_str()),
                (None, Some(p)) => format!("program {}", p.name.as_str()),
                (None, None) => format!("variant {}", self.variant(config).map_or("", |v| v.name.as_str())),
            };
            format!("the config marks {marked} \"ignore\": true (run it with --include-ignored)")
        };
        Some(self.ignore_reason.clone().unwrap_or_else(by_config))
    }

    pub(crate) fn launcher<'c>(&self, config: &'c Config) -> Option<&'c LauncherConfig> {
        config.launchers.get(self.launcher.as_str())
    }

    /// The timeout: the default, then matching `overrides`, then (with device
    /// coverage on) matching `device_coverage` rules; later rules win. An
    /// upstream test's own timeout, or the overlay's cap where it has none,
    /// times the overlay's device-coverage factor.
    pub fn timeout(&self, config: &Config, device_coverage: bool) -> Duration {
        self.timeout_set_by(config, device_coverage).0
    }

    /// The timeout and the config key that sets it, for a timed-out trial's
    /// message: `timeouts.default`, `timeouts.overrides[1]`, `programs[0].timeout`.
    pub(crate) fn timeout_set_by(&self, config: &Config, device_coverage: bool) -> (Duration, String) {
        if let (Source::Upstream(u), Some(run)) = (&self.source, &config.upstream) {
            let factor = if device_coverage { run.device_coverage_factor } else { 1 };
            let seconds = u.test.timeout.unwrap_or(run.uncapped_cap).saturating_mul(factor);
            let mut key = match u.test.timeout {
                Some(_) => format!("the upstream test's own \"timeout\" ({})", u.test.name),
                None => "the overlay's timeouts.uncapped_cap".to_string(),
            };
            if factor > 1 {
                key.push_str(" times the overlay's timeouts.device_coverage_factor");
            }
            return (Duration::from_secs(seconds.min(limits::TIMEOUT_SECONDS.max)), key);
        }
        if let Source::Program { index: i, .. } = self.source
            && let Some(p) = config.programs.get(i)
        {
            return match p.timeout {
                Some(seconds) => (Duration::from_secs(seconds), format!("programs[{i}].timeout")),
                None => (Duration::from_secs(config.timeouts.default), "timeouts.default".into()),
            };
        }
        let collective = self.collective(config).map_or("", |c| c.name.as_str());
        let variant = self.variant(config).map(|v| v.name.as_str());
        let overrides =
            config.timeouts.overrides.iter().enumerate().map(|(i, r)| (format!("timeouts.overrides[{i}]"), r));
        let device_rules = if device_coverage { &config.timeouts.device_coverage[..] } else { &[] };
        let device_rules = device_rules.iter().enumerate().map(|(i, r)| (format!("timeouts.device_coverage[{i}]"), r));
        overrides
            .chain(device_rules)
            .rfind(|(_, rule)| rule.matches(collective, self.size(), variant))
            .map_or((Duration::from_secs(config.timeouts.default), "timeouts.default".into()), |(key, rule)| {
                (Duration::from_secs(rule.seconds), key)
            })
    }

    /// Whether the timeout is the overlay's cap on a test that upstream
    /// lets run forever (`timeout: 0`).
    pub(crate) fn capped(&self) -> bool {
        self.upstream().is_some_and(|u| u.test.timeout.is_none())
    }
}

/// One shard of a run split across jobs, as nextest spells it: `count:K/N`
/// deals the trials that would run out in turn (the first to shard 1, the
/// second to shard 2, …); `hash:K/N` puts a trial in the shard its name
/// hashes to, so a trial stays in its shard when others are added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Partition {
    Count { shard: u64, of: u64 },
    Hash { shard: u64, of: u64 },
}

impl Partition {
    pub(crate) fn parse(text: &str) -> std::result::Result<Partition, String> {
        let expected = || format!("{text:?} is not a partition: expected count:K/N or hash:K/N with 1 <= K <= N");
        let (kind, share) = text.split_once(':').ok_or_else(expected)?;
        let (k, n) = share.split_once('/').ok_or_else(expected)?;
        let (Ok(shard), Ok(of)) = (k.parse::<u64>(), n.parse::<u64>()) else { return Err(expected()) };
        if shard == 0 || shard > of {
            return Err(expected());
        }
        match kind {
            "count" => Ok(Partition::Count { shard, of }),
            "hash" => Ok(Partition::Hash { shard, of }),
            _ => Err(expected()),
        }
    }

    /// As it was given: `count:2/3`.
    pub(crate) fn describe(self) -> String {
        match self {
            Partition::Count { shard, of } => format!("count:{shard}/{of}"),
            Partition::Hash { shard, of } => format!("hash:{shard}/{of}"),
        }
    }

    /// Whether the trial `name`, the `index`-th (from 0) of the trials that
    /// would run, is this shard's.
    pub(crate) fn holds(self, index: usize, name: &str) -> bool {
        match self {
            Partition::Count { shard, of } => index as u64 % of == shard - 1,
            Partition::Hash { shard, of } => {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(name.as_bytes());
                let first: [u8; 8] = digest[..8].try_into().expect("a SHA-256 has 32 bytes");
                u64::from_be_bytes(first) % of == shard - 1
            }
        }
    }
}

/// Every trial of the config, in config order (collective, then size, then
/// variant; or upstream's suite and test order).
pub fn plan(config: &Config) -> Vec<TrialSpec> {
    if let Some(run) = &config.upstream {
        return plan_upstream(run, config.capacity);
    }
    let variants: Vec<Option<usize>> =
        if config.variants.is_empty() { vec![None] } else { (0..config.variants.len()).map(Some).collect() };
    let mut trials = Vec::new();
    for (ci, collective) in config.collectives.iter().enumerate() {
        for size in &config.sizes {
            for &vi in &variants {
                let variant = vi.and_then(|i| config.variants.get(i));
                let mut parts = vec![collective.name.as_str(), size.as_str()];
                if let Some(v) = variant {
                    parts.push(&v.name);
                }
                trials.push(TrialSpec {
                    name: parts.join("::"),
                    slug: parts.join("."),
                    source: Source::Matrix { collective: ci, size: size.to_string(), variant: vi },
                    launcher: variant
                        .and_then(|v| v.launcher.clone())
                        .unwrap_or_else(|| config.launch.launcher.clone()),
                    ranks: variant.and_then(|v| v.ranks).unwrap_or(config.launch.ranks),
                    ignored: collective.ignore || variant.is_some_and(|v| v.ignore),
                    ignore_reason: None,
                });
            }
        }
    }
    for (index, program) in config.programs.iter().enumerate() {
        let kind = match program.kind {
            ProgramKind::Plain => TrialKind::Plain,
            ProgramKind::Gtest => TrialKind::Gtest,
            ProgramKind::Ctest => TrialKind::Ctest,
        };
        let sizes: Vec<Option<&str>> = if program.sizes.is_empty() {
            vec![None]
        } else {
            program.sizes.iter().map(|s| Some(s.as_str())).collect()
        };
        for size in sizes {
            let parts: Vec<&str> = std::iter::once(program.name.as_str()).chain(size).collect();
            trials.push(TrialSpec {
                name: parts.join("::"),
                slug: parts.join("."),
                source: Source::Program { index, size: size.map(str::to_string), kind },
                launcher: program.launcher.clone().unwrap_or_else(|| config.launch.launcher.clone()),
                ranks: program.ranks.unwrap_or(config.launch.ranks),
                ignored: program.ignore,
                ignore_reason: None,
            });
        }
    }
    trials
}

/// One trial per resolved upstream test. A test upstream would skip here
/// (disabled suite, more GPUs or nodes than the machine has), one that needs
/// more ranks than the overlay's capacity, and one upstream fails without
/// running are ignored with the reason.
fn plan_upstream(run: &UpstreamRun, capacity: usize) -> Vec<TrialSpec> {
    run.resolved
        .tests
        .iter()
        .map(|test| {
            let p = test.placement(run.machine.gpus_per_node);
            let ranks = usize::try_from(p.ranks).unwrap_or(usize::MAX);
            let ignore_reason = test
                .ignore_reason(&run.machine)
                .or_else(|| test.problem.clone())
                .or_else(|| (ranks > capacity).then(|| format!("needs {ranks} ranks, the capacity is {capacity}")))
                .or_else(|| (ranks == 0).then(|| "asks for 0 ranks".to_string()));
            TrialSpec {
                name: test.trial.clone(),
                slug: test.slug.clone(),
                launcher: if ranks > 1 { "mpirun" } else { "direct" }.into(),
                ranks: ranks.max(1),
                ignored: ignore_reason.is_some(),
                ignore_reason,
                source: Source::Upstream(Box::new(UpstreamTrial {
                    test: test.clone(),
                    nodes: p.nodes,
                    gpus: p.gpus_per_node,
                })),
            }
        })
        .collect()
}

/// The JSON paths and values a trial's name is made of.
fn trial_parts(c: &Config, t: &TrialSpec) -> Vec<(String, String)> {
    match &t.source {
        Source::Matrix { collective, size, variant } => {
            let si = c.sizes.iter().position(|s| s.as_str() == size).unwrap_or_default();
            let mut parts = vec![
                (
                    format!("collectives[{collective}].name"),
                    c.collectives.get(*collective).map_or_else(String::new, |x| x.name.to_string()),
                ),
                (format!("sizes[{si}]"), size.clone()),
            ];
            if let Some(v) = variant {
                parts.push((
                    format!("variants[{v}].name"),
                    c.variants.get(*v).map_or_else(String::new, |x| x.name.to_string()),
                ));
            }
            parts
        }
        Source::Program { index, size, .. } => {
            let program = c.programs.get(*index);
            let mut parts =
                vec![(format!("programs[{index}].name"), program.map_or_else(String::new, |p| p.name.to_string()))];
            if let Some(size) = size {
                let si = program.and_then(|p| p.sizes.iter().position(|s| s.as_str() == size)).unwrap_or_default();
                parts.push((format!("programs[{index}].sizes[{si}]"), size.clone()));
            }
            parts
        }
        Source::Upstream(u) => vec![(format!("{}.name", u.test.json_path), u.test.name.clone())],
    }
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

/// The names of every trial of the config, ignored ones included, each
/// with its file name (`slug`): a record is trusted only under its own.
pub(crate) fn names(config: &Config) -> std::collections::BTreeMap<String, String> {
    plan(config).into_iter().map(|t| (t.name, t.slug)).collect()
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
    fn an_ignored_trial_says_which_part_of_the_config_ignores_it() {
        let mut config = local();
        let why = |config: &Config, name: &str| {
            plan(config).into_iter().find(|t| t.name == name).unwrap().why_ignored(config)
        };
        assert_eq!(why(&config, "AllReduce::1K::ring"), None);
        let by_variant = "the config marks variant smallchunks \"ignore\": true (run it with --include-ignored)";
        assert_eq!(why(&config, "AllReduce::1K::smallchunks").as_deref(), Some(by_variant));
        config.collectives[0].ignore = true;
        let by_collective = "the config marks collective AllReduce \"ignore\": true (run it with --include-ignored)";
        assert_eq!(why(&config, "AllReduce::1K::ring").as_deref(), Some(by_collective));
        assert_eq!(why(&config, "AllReduce::1K::smallchunks").as_deref(), Some(by_collective));
    }

    #[test]
    fn a_program_is_one_plain_trial_named_as_the_program() {
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v.as_object_mut().unwrap().remove("collectives");
        v.as_object_mut().unwrap().remove("sizes");
        v["programs"] = serde_json::json!([
            {"name": "unit", "binary": "vec_test", "args": ["--all"], "timeout": 7},
            {"name": "stress", "binary": "/abs/stress", "launcher": "mpi", "ranks": 2, "ignore": true}
        ]);
        let loaded = checked(&v).unwrap();
        let trials = plan(&loaded.config);
        let names: Vec<(&str, &str)> = trials.iter().map(|t| (t.name.as_str(), t.slug.as_str())).collect();
        assert_eq!(names, [("unit", "unit"), ("stress", "stress")]);
        assert_eq!(trials[0].kind(), TrialKind::Plain);
        assert_eq!((trials[0].launcher.as_str(), trials[0].ranks), ("threads", 4), "launch's defaults");
        assert_eq!(trials[0].timeout(&loaded.config, false).as_secs(), 7);
        assert_eq!(trials[1].timeout(&loaded.config, false).as_secs(), 120, "timeouts.default");
        assert_eq!(trials[0].timeout_set_by(&loaded.config, false).1, "programs[0].timeout");
        assert_eq!(trials[1].timeout_set_by(&loaded.config, false).1, "timeouts.default");
        assert_eq!((trials[1].launcher.as_str(), trials[1].ranks, trials[1].ignored), ("mpi", 2, true));
        let why = trials[1].why_ignored(&loaded.config).unwrap();
        assert!(why.contains("program stress"), "{why}");

        // A program and a collective's trial may not share files.
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v["programs"] = serde_json::json!([{"name": "AllReduce.1K.ring", "binary": "x"}]);
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": programs[0].name: trials"), "{err}");

        // Nothing to run, and collectives without sizes, are errors.
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v.as_object_mut().unwrap().remove("collectives");
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": $: expected `collectives`"), "{err}");
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v.as_object_mut().unwrap().remove("sizes");
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": sizes: missing"), "{err}");
    }

    /// A config with `programs` only.
    fn with_programs(programs: serde_json::Value) -> serde_json::Value {
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v.as_object_mut().unwrap().remove("collectives");
        v.as_object_mut().unwrap().remove("sizes");
        v["programs"] = programs;
        v
    }

    #[test]
    fn a_program_with_sizes_is_one_trial_per_size_named_as_a_collectives() {
        let v = with_programs(serde_json::json!([
            {"name": "bench", "binary": "b", "args": ["{size}", "-n", "{bytes}"], "sizes": ["1K", "2M"]},
            {"name": "g", "kind": "gtest", "binary": "t", "filter": "*A*", "sizes": ["8"]}
        ]));
        let loaded = checked(&v).unwrap();
        let trials = plan(&loaded.config);
        let names: Vec<(&str, &str, &str)> =
            trials.iter().map(|t| (t.name.as_str(), t.slug.as_str(), t.size())).collect();
        assert_eq!(names, [("bench::1K", "bench.1K", "1K"), ("bench::2M", "bench.2M", "2M"), ("g::8", "g.8", "8")]);
        assert_eq!(trials[2].kind(), TrialKind::Gtest);
        // Two sizes of one program that are one size.
        let v = with_programs(serde_json::json!([{"name": "b", "binary": "b", "sizes": ["1K", "1024"]}]));
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": programs[0].sizes[1]: \"1024\" is the same size as programs[0].sizes[0]"), "{err}");
        let v = with_programs(serde_json::json!([{"name": "b", "binary": "b", "sizes": []}]));
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": programs[0].sizes: expected at least one size"), "{err}");
    }

    #[test]
    fn size_placeholders_without_sizes_are_errors_at_their_path() {
        let cases = [
            (
                serde_json::json!({"args": ["{size}"]}),
                "programs[0].args[0]: `{size}` has no value: program \"p\" has no sizes",
            ),
            (serde_json::json!({"env": {"N": "{bytes}"}}), "programs[0].env.N: `{bytes}` has no value"),
        ];
        for (extra, needle) in cases {
            let mut program = serde_json::json!({"name": "p", "binary": "b"});
            program.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let err = checked(&with_programs(serde_json::json!([program]))).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        // The config's env is rendered for every trial: named with the program.
        let mut v = with_programs(serde_json::json!([{"name": "p", "binary": "b"}]));
        v["env"]["SIZE"] = "{size}".into();
        let err = checked(&v).unwrap_err().to_string();
        assert!(err.contains(": env.SIZE: `{size}` has no value: program \"p\" has no sizes (programs[0]"), "{err}");
        // A collective always has a size.
        let mut v: serde_json::Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        v["collectives"][0]["args"] = serde_json::json!(["{bytes}"]);
        checked(&v).unwrap();
    }

    #[test]
    fn a_programs_kind_decides_what_it_needs() {
        let err =
            |program: serde_json::Value| checked(&with_programs(serde_json::json!([program]))).unwrap_err().to_string();
        let e = err(serde_json::json!({"name": "p", "kind": "gtest"}));
        assert!(e.contains(": programs[0]: missing field `binary`: a gtest program needs its binary"), "{e}");
        let e = err(serde_json::json!({"name": "p", "binary": "b", "filter": "A.*"}));
        assert!(e.contains(": programs[0].filter: a plain program takes no filter"), "{e}");
        let e = err(serde_json::json!({"name": "p", "kind": "gtest", "binary": "b", "filter": ""}));
        assert!(e.contains(": programs[0].filter: expected a filter"), "{e}");
        let e = err(serde_json::json!({"name": "p", "kind": "gtest", "binary": "b", "args": ["--gtest_filter=A.*"]}));
        assert!(e.contains(": programs[0].args[0]: the harness gives a gtest trial --gtest_filter itself"), "{e}");
        let e = err(serde_json::json!({"name": "p", "kind": "ctest", "args": ["-R", "x"]}));
        assert!(e.contains(": programs[0].args[0]: the harness gives a ctest trial -R itself"), "{e}");
        let e = err(serde_json::json!({"name": "p", "kind": "ctest", "launcher": "mpi"}));
        assert!(e.contains(": programs[0].launcher: a ctest program runs ctest"), "{e}");
        let e = err(serde_json::json!({"name": "p", "kind": "tap", "binary": "b"}));
        assert!(
            e.contains(": programs[0].kind: unknown variant `tap`, expected one of `plain`, `gtest`, `ctest`"),
            "{e}"
        );
        // ctest needs no binary: `ctest` on PATH.
        let v = with_programs(serde_json::json!([{"name": "p", "kind": "ctest", "launcher": "threads"}]));
        assert_eq!(plan(&checked(&v).unwrap().config)[0].kind(), TrialKind::Ctest);
    }

    #[test]
    fn partitions_split_the_trials_into_disjoint_shards_that_cover_them_all() {
        let names: Vec<String> = plan(&local()).into_iter().map(|t| t.name).collect();
        for kind in ["count", "hash"] {
            let shards: Vec<Partition> = (1..=3).map(|k| Partition::parse(&format!("{kind}:{k}/3")).unwrap()).collect();
            for (i, name) in names.iter().enumerate() {
                let holders = shards.iter().filter(|p| p.holds(i, name)).count();
                assert_eq!(holders, 1, "{kind}: {name} is in {holders} shards");
            }
            let sizes: Vec<usize> =
                shards.iter().map(|p| names.iter().enumerate().filter(|(i, n)| p.holds(*i, n)).count()).collect();
            assert!(sizes.iter().all(|&n| n > 0), "{kind}: an empty shard: {sizes:?}");
        }
        let count = Partition::parse("count:2/3").unwrap();
        assert!(!count.holds(0, "a") && count.holds(1, "a") && count.holds(4, "a"), "dealt in turn");
        let hash = Partition::parse("hash:1/2").unwrap();
        assert_eq!(hash.holds(0, "AllReduce::1K::ring"), hash.holds(9, "AllReduce::1K::ring"), "by name alone");
        for bad in ["count:0/3", "count:4/3", "count:1", "slice:1/2", "hash:a/b", "count:1/0", ""] {
            assert!(Partition::parse(bad).unwrap_err().contains("expected count:K/N or hash:K/N"), "{bad}");
        }
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
        let key = |name: &str, device| get(name).timeout_set_by(&config, device).1;
        assert_eq!(key("Reduce::1K::ring", false), "timeouts.default");
        assert_eq!(key("AllReduce::256K::ring", false), "timeouts.overrides[1]");
        assert_eq!(key("AllReduce::256K::ring", true), "timeouts.device_coverage[0]");
    }
}
