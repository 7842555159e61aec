//! Resolution: `extends` (`TestConfigProcessor.combine_configs`), the
//! defaults cascade (`parse_test_suites`, `_apply_test_defaults`), and what
//! the executor makes of each test (`TestExecutor.run_test`,
//! `_resolve_binary_path`, `_run_pytest_test`, `build_rccl`,
//! `build_rccl_tests`).

use super::json::{J, Obj, join};
use super::names::Names;
use super::text;
use super::{
    BuildCommand, BuildConfiguration, BuildType, Count, Ctx, Options, Paths, Pytest, RcclTestsBuild, Resolved, Test,
    TrialKind, UpstreamEnv, schema,
};
use crate::env_names::Lookup;
use crate::error::Result;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Upstream's Open MPI base arguments, used when the config has no
/// top-level `mpi_args` (`MPI_IMPL_CONFIG["openmpi"]`).
const DEFAULT_MPI_ARGS: &str = "--mca btl ^vader,openib --bind-to none";

/// `extends` chains deeper than this are refused: recursion must stay
/// bounded on any input.
const MAX_EXTENDS_DEPTH: usize = 64;

pub(super) fn resolve(ctx: &mut Ctx<'_>, root: &Obj, env: Lookup<'_>, options: &Options<'_>) -> Result<Resolved> {
    schema::check_root(ctx, root)?;
    let empty = Obj::default();
    let configs = root.get("test_configurations").and_then(J::as_obj).unwrap_or(&empty);
    let suites: &[J] = match root.get("test_suites") {
        Some(J::Arr(s)) => s,
        _ => &[],
    };
    let build_cfg = root.get("build_configuration").and_then(J::as_obj).unwrap_or(&empty);
    let build_type = build_type(ctx, build_cfg, configs, suites)?;

    // What upstream's process environment holds when it expands: the caller's,
    // plus what `test_config.py` exports at import and at load.
    let root_dir = options.rccl_root.map(Path::to_path_buf).or_else(|| rccl_root_of(ctx.file));
    let mut injected: Vec<(&str, String)> = vec![("RCCL_BUILD_TYPE", str_of(build_type).into())];
    if let Some(dir) = &root_dir {
        if env("WORKDIR").is_none() {
            injected.push(("WORKDIR", dir.display().to_string()));
        }
        if env("RCCL_TESTS_DIR").is_none() {
            let tests_dir = dir.parent().unwrap_or(dir).join("rccl-tests");
            injected.push(("RCCL_TESTS_DIR", tests_dir.display().to_string()));
        }
    }
    let lookup = |name: &str| injected.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()).or_else(|| env(name));
    let mut r = Resolver { ctx, env: &lookup, configs, cache: HashMap::new() };

    let paths = r.paths(root.get("paths").and_then(J::as_obj).unwrap_or(&empty));
    let build_dir = r.build_dir(&paths.workdir, build_type);
    let system = options.system.map(str::to_string);
    let global_env = r.global_env(root, system.as_deref());
    let mpi_base = r.mpi_base(root, system.as_deref())?;
    let build = r.build(build_cfg);
    let rccl_tests_build = match root.get("rccl_tests_build_configuration").and_then(J::as_obj) {
        Some(cfg) if cfg.iter().next().is_some() => Some(r.rccl_tests_build(cfg, &paths.workdir, &build_dir)),
        _ => None,
    };
    let site = Site { global_env: &global_env, mpi_base: &mpi_base, paths: &paths, build_dir: &build_dir };
    let mut tests = Vec::new();
    let mut names = Names::default();
    for (i, suite) in suites.iter().enumerate() {
        let Some(suite) = suite.as_obj() else { continue };
        for mut test in r.suite(suite, &format!("test_suites[{i}]"), &site)? {
            let named = names.name(&test.suite, &test.name);
            if let Some(why) = named.renamed {
                r.ctx.warn(&test.json_path, why);
            }
            test.trial = named.trial;
            test.slug = named.slug;
            tests.push(test);
        }
    }
    let system_cfg = root.get("system_configurations").and_then(J::as_obj);
    let meta = |key| system_cfg.and_then(|o| o.get(key)).and_then(J::as_str).map(str::to_string);
    Ok(Resolved {
        name: meta("name"),
        description: meta("description"),
        system,
        paths,
        build_dir,
        build_type,
        env: global_env,
        mpi_base,
        auto_detect_hosts: matches!(root.get("auto_detect_hosts"), Some(J::Bool(true))),
        build,
        rccl_tests_build,
        tests,
        warnings: std::mem::take(&mut r.ctx.warnings),
    })
}

fn str_of(t: BuildType) -> &'static str {
    match t {
        BuildType::Debug => "debug",
        BuildType::Release => "release",
    }
}

/// The RCCL checkout of a config in `<rccl>/tools/scripts/test_runner/configs/`:
/// the root upstream's runner computes from its own location.
fn rccl_root_of(config: &Path) -> Option<PathBuf> {
    let dir = config.parent()?;
    dir.ends_with("tools/scripts/test_runner/configs").then(|| dir.ancestors().nth(4)).flatten().map(Path::to_path_buf)
}

/// `resolve_rccl_build_type`: `build_configuration.build_type`; else release
/// when every enabled suite runs only rccl-tests binaries; else debug when
/// `install_flags` holds `--debug` or `--debug-fast`; else release.
fn build_type(ctx: &Ctx<'_>, build: &Obj, configs: &Obj, suites: &[J]) -> Result<BuildType> {
    if let Some(value) = build.get("build_type").and_then(J::as_str).filter(|s| !s.is_empty()) {
        return match value.trim().to_lowercase().as_str() {
            "debug" => Ok(BuildType::Debug),
            "release" => Ok(BuildType::Release),
            _ => Err(ctx.error("build_configuration.build_type", format!("expected debug or release, got {value:?}"))),
        };
    }
    let (perf, gtest) = test_kinds(configs, suites);
    if perf && !gtest {
        return Ok(BuildType::Release);
    }
    let debug = matches!(build.get("install_flags"), Some(J::Arr(flags))
        if flags.iter().any(|f| matches!(f.as_str(), Some("--debug" | "--debug-fast"))));
    Ok(if debug { BuildType::Debug } else { BuildType::Release })
}

/// `classify_test_kinds`: whether enabled suites run rccl-tests binaries and
/// gtest binaries, from each configuration's own `tests` (not inherited ones)
/// and `is_gtest` found along `extends`.
fn test_kinds(configs: &Obj, suites: &[J]) -> (bool, bool) {
    fn inherited(configs: &Obj, name: &str, seen: &mut Vec<String>) -> Option<bool> {
        let node = configs.get(name)?.as_obj()?;
        if let Some(J::Bool(b)) = node.get("is_gtest") {
            return Some(*b);
        }
        seen.push(name.to_string());
        let mut found = None;
        for parent in parents(node) {
            if found.is_none() && seen.len() <= MAX_EXTENDS_DEPTH && !seen.contains(&parent) {
                found = inherited(configs, &parent, seen);
            }
        }
        seen.pop();
        found
    }
    let (mut perf, mut gtest) = (false, false);
    for suite in suites.iter().filter_map(J::as_obj) {
        if matches!(suite.get("enabled"), Some(J::Bool(false))) {
            continue;
        }
        let config = suite.get("config").and_then(J::as_str).unwrap_or_default();
        let suite_value = match suite.get("is_gtest") {
            Some(J::Bool(b)) => Some(*b),
            _ => inherited(configs, config, &mut Vec::new()),
        };
        let tests = match configs.get(config).and_then(J::as_obj).and_then(|n| n.get("tests")) {
            Some(J::Arr(t)) if !t.is_empty() => t.as_slice(),
            _ => &[J::Null],
        };
        for test in tests {
            let value = match test.as_obj().and_then(|t| t.get("is_gtest")) {
                Some(J::Bool(b)) => Some(*b),
                _ => suite_value,
            };
            if value == Some(false) { perf = true } else { gtest = true }
        }
    }
    (perf, gtest)
}

fn parents(node: &Obj) -> Vec<String> {
    match node.get("extends") {
        Some(J::Str(s)) => vec![s.clone()],
        Some(J::Arr(items)) => items.iter().filter_map(J::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

/// A test entry and where it is written.
#[derive(Clone)]
struct TestSrc {
    value: J,
    path: String,
}

/// A configuration after `extends`: its fields, and its tests (upstream keeps
/// a child's own list untouched unless a parent also has tests).
#[derive(Clone)]
struct Combined {
    fields: Obj,
    tests: Option<Vec<TestSrc>>,
}

/// What every test of the config shares.
struct Site<'a> {
    global_env: &'a UpstreamEnv,
    mpi_base: &'a [String],
    paths: &'a Paths,
    build_dir: &'a Path,
}

struct Resolver<'c, 'f> {
    ctx: &'c mut Ctx<'f>,
    env: Lookup<'c>,
    configs: &'c Obj,
    cache: HashMap<String, Combined>,
}

impl Resolver<'_, '_> {
    /// Upstream's expander; a reference left unexpanded (its variable is
    /// unset) stays, as upstream leaves it, with a warning.
    fn expand(&mut self, value: &str, path: &str) -> String {
        let out = text::expand(value, self.env);
        self.check_expanded(&out, path);
        out
    }

    /// [`Self::expand`] then `~` (`_expand` in `build_rccl_tests`).
    fn expand_home(&mut self, value: &str, path: &str) -> String {
        let out = text::expanduser(&text::expand(value, self.env), self.env);
        self.check_expanded(&out, path);
        out
    }

    fn check_expanded(&mut self, out: &str, path: &str) {
        if text::has_reference(out) {
            self.ctx.warn(
                path,
                format!("{out:?} still refers to an unset variable after upstream's expansion; upstream keeps the text as it is"),
            );
        }
    }

    /// `paths`, every string expanded at load (`_expand_env_vars_in_dict`).
    fn paths(&mut self, paths: &Obj) -> Paths {
        let mut get = |key: &str| {
            let value = paths.get(key).and_then(J::as_str)?;
            Some(self.expand(value, &join("paths", key)))
        };
        let [workdir, rocm_path, mpi_path, test_binary_dir, llvm_profdata, llvm_cov] =
            ["workdir", "rocm_path", "mpi_path", "test_binary_dir", "llvm-profdata", "llvm-cov"].map(&mut get);
        let workdir = workdir.unwrap_or_else(|| (self.env)("PWD").unwrap_or_else(|| ".".into()));
        Paths { workdir, rocm_path, mpi_path, test_binary_dir, llvm_profdata, llvm_cov }
    }

    /// `setup_directories`: `RCCL_LIB_PATH` or `RCCL_BUILD_DIR` (made
    /// absolute), else `<workdir>/build/<type>`.
    fn build_dir(&mut self, workdir: &str, build_type: BuildType) -> PathBuf {
        let custom = ["RCCL_LIB_PATH", "RCCL_BUILD_DIR"].iter().find_map(|k| (self.env)(k).filter(|v| !v.is_empty()));
        match custom {
            Some(dir) => {
                let dir = text::expanduser(&text::python_expandvars(&dir, self.env), self.env);
                let cwd = (self.env)("PWD").unwrap_or_default();
                crate::workspace::normalize(&Path::new(&cwd).join(dir))
            }
            None => Path::new(workdir).join("build").join(str_of(build_type)),
        }
    }

    /// Global `env_variables`, then `system_env_variables[system]` over them.
    fn global_env(&mut self, root: &Obj, system: Option<&str>) -> UpstreamEnv {
        let mut env = env_of(root.get("env_variables"));
        if let Some(system) = system {
            match root.get("system_env_variables").and_then(J::as_obj) {
                Some(by_system) if by_system.contains(system) => env.extend(env_of(by_system.get(system))),
                Some(by_system) if by_system.iter().next().is_some() => self.ctx.warn(
                    "system_env_variables",
                    format!("no entry for system `{system}` (upstream warns and uses the global environment)"),
                ),
                _ => {}
            }
        }
        env
    }

    /// Top-level `mpi_args` (the `--system` entry when it is an object)
    /// replace upstream's default; empty means the default.
    fn mpi_base(&mut self, root: &Obj, system: Option<&str>) -> Result<Vec<String>> {
        let (value, path) = match (root.get("mpi_args"), system) {
            (Some(J::Obj(by_system)), Some(s)) => (by_system.get(s), join("mpi_args", s)),
            (Some(J::Obj(_)), None) => {
                self.ctx.warn("mpi_args", "keyed by system, but no system was chosen: upstream uses its default");
                (None, String::new())
            }
            (value, _) => (value, "mpi_args".to_string()),
        };
        let joined = normalize_mpi_args(value);
        if joined.is_empty() {
            return Ok(DEFAULT_MPI_ARGS.split(' ').map(str::to_string).collect());
        }
        self.words(&joined, &path)
    }

    /// Shell words of a command-line fragment upstream hands to `sh -c`.
    fn words(&mut self, line: &str, path: &str) -> Result<Vec<String>> {
        if text::shell_active(line) {
            self.ctx.warn(
                path,
                format!("{line:?} holds characters a shell acts on; upstream runs it through `sh -c`, ccl-coverage passes the words as they are"),
            );
        }
        text::shell_words(line).ok_or_else(|| {
            self.ctx.error(
                path,
                format!("expected shell words with closed quotes, got {line:?} (upstream's shell fails on it)"),
            )
        })
    }

    fn build(&mut self, cfg: &Obj) -> BuildConfiguration {
        if cfg.contains("generator") {
            self.ctx.warn(
                "build_configuration.generator",
                "upstream's schema allows it but its build never uses it; ignored",
            );
        }
        let install_flags = self.flags(cfg.get("install_flags"), "build_configuration.install_flags", false);
        let cmake_options = match cfg.get("cmake_options") {
            Some(J::Str(s)) => self.expand(s, "build_configuration.cmake_options"),
            Some(J::Obj(o)) => {
                let parts: Vec<String> = o
                    .iter()
                    .map(|(k, v)| {
                        let value = self.expand(&v.python_str(), &join("build_configuration.cmake_options", k));
                        format!("-D{k}={value}")
                    })
                    .collect();
                parts.join(" ")
            }
            _ => String::new(),
        };
        BuildConfiguration {
            requires_build: !matches!(cfg.get("requires_build"), Some(J::Bool(false))),
            install_flags,
            cmake_options,
            parallel_jobs: match cfg.get("parallel_jobs") {
                Some(J::Num(n)) => n.as_u64(),
                _ => None,
            },
            env: env_of(cfg.get("env_variables")),
        }
    }

    fn flags(&mut self, value: Option<&J>, path: &str, home: bool) -> Vec<String> {
        let Some(J::Arr(items)) = value else { return Vec::new() };
        let items: Vec<&str> = items.iter().filter_map(J::as_str).collect();
        items
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                let at = format!("{path}[{i}]");
                if home { self.expand_home(f, &at) } else { self.expand(f, &at) }
            })
            .collect()
    }

    fn rccl_tests_build(&mut self, cfg: &Obj, workdir: &str, build_dir: &Path) -> RcclTestsBuild {
        const AT: &str = "rccl_tests_build_configuration";
        let default_source = py_join(workdir, "rccl-tests");
        let source_dir = cfg.get("source_dir").and_then(J::as_str).unwrap_or(&default_source).to_string();
        let build_dir = build_dir.display().to_string();
        let rccl_home = cfg.get("rccl_home").and_then(J::as_str).unwrap_or(&build_dir).to_string();
        let build_command = match cfg.get("build_command") {
            Some(J::Str(s)) if !s.is_empty() => {
                Some(BuildCommand::Shell(self.expand_home(s, &join(AT, "build_command"))))
            }
            Some(argv @ J::Arr(items)) if !items.is_empty() => {
                Some(BuildCommand::Argv(self.flags(Some(argv), &join(AT, "build_command"), true)))
            }
            _ => None,
        };
        RcclTestsBuild {
            enabled: !matches!(cfg.get("enabled"), Some(J::Bool(false))),
            source_dir: self.expand_home(&source_dir, &join(AT, "source_dir")),
            install_script: cfg.get("install_script").and_then(J::as_str).unwrap_or("install.sh").to_string(),
            build_command,
            install_flags: self.flags(cfg.get("install_flags"), &join(AT, "install_flags"), true),
            rccl_home: self.expand_home(&rccl_home, &join(AT, "rccl_home")),
            env: env_of(cfg.get("env_variables")),
        }
    }

    /// `combine_configs`: each parent in list order fills in what the child
    /// lacks; `env_variables` merge (child and earlier parents win); `args`
    /// and `mpi_args` lists concatenate parent-first without repeats; `tests`
    /// merge by name (child fields win).
    fn combine(&mut self, name: &str, stack: &mut Vec<String>) -> Result<Combined> {
        if let Some(done) = self.cache.get(name) {
            return Ok(done.clone());
        }
        let path = join("test_configurations", name);
        let mut fields = self.configs.get(name).and_then(J::as_obj).cloned().unwrap_or_default();
        if fields.contains("args") {
            self.ctx.warn(
                &join(&path, "args"),
                "upstream merges `args` through `extends` but never passes them to a test; ignored",
            );
        }
        let mut tests = match fields.remove("tests") {
            Some(J::Arr(items)) => Some(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, value)| TestSrc { value, path: format!("{path}.tests[{i}]") })
                    .collect(),
            ),
            _ => None,
        };
        let extends = fields.remove("extends");
        let list = matches!(extends, Some(J::Arr(_)));
        let parent_names: Vec<String> = match extends {
            Some(J::Str(s)) => vec![s],
            Some(J::Arr(items)) => items.iter().filter_map(J::as_str).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        stack.push(name.to_string());
        for (i, parent) in parent_names.iter().enumerate() {
            let at = if list { format!("{path}.extends[{i}]") } else { join(&path, "extends") };
            if !self.configs.contains(parent) {
                let known: Vec<&str> = self.configs.keys().collect();
                return Err(self.ctx.error(
                    &at,
                    format!(
                        "unknown configuration `{parent}`: expected one of test_configurations ({})",
                        known.join(", ")
                    ),
                ));
            }
            if let Some(start) = stack.iter().position(|s| s == parent) {
                let cycle = stack[start..].iter().chain([parent]).map(String::as_str).collect::<Vec<_>>().join(" → ");
                return Err(self.ctx.error(&at, format!("`extends` cycle: {cycle} (expected a chain that ends)")));
            }
            if stack.len() >= MAX_EXTENDS_DEPTH {
                return Err(self.ctx.error(&at, format!("`extends` chain deeper than {MAX_EXTENDS_DEPTH}")));
            }
            let p = self.combine(parent, stack)?;
            let parent_path = join("test_configurations", parent);
            for (key, value) in p.fields.iter() {
                match (key, value) {
                    ("env_variables", J::Obj(parent_env)) => {
                        let mut merged = parent_env.clone();
                        if let Some(J::Obj(own)) = fields.get(key) {
                            for (k, v) in own.iter() {
                                merged.insert(k.to_string(), v.clone());
                            }
                        }
                        fields.insert(key.to_string(), J::Obj(merged));
                    }
                    ("args" | "mpi_args", J::Arr(parent_items)) => match fields.get(key) {
                        None => {
                            fields.insert(key.to_string(), J::Arr(unique(parent_items.iter())));
                        }
                        Some(J::Arr(own)) => {
                            let merged = unique(parent_items.iter().chain(own));
                            fields.insert(key.to_string(), J::Arr(merged));
                        }
                        Some(_) => {
                            self.ctx.warn(
                                &join(&path, key),
                                format!("a string here is replaced by the list of `{parent}` (upstream merges only lists); the string is dropped"),
                            );
                            fields.insert(key.to_string(), value.clone());
                        }
                    },
                    ("args" | "mpi_args", _) => self.ctx.warn(
                        &join(&parent_path, key),
                        format!(
                            "a string here is dropped when `{name}` extends `{parent}` (upstream merges only lists)"
                        ),
                    ),
                    _ => {
                        if !fields.contains(key) {
                            fields.insert(key.to_string(), value.clone());
                        }
                    }
                }
            }
            if let Some(parent_tests) = p.tests {
                tests = Some(self.merge_tests(parent_tests, tests.unwrap_or_default()));
            }
        }
        stack.pop();
        let done = Combined { fields, tests };
        self.cache.insert(name.to_string(), done.clone());
        Ok(done)
    }

    /// `_merge_tests`: by name, in first-seen order; a bare string becomes
    /// `{"name": ...}` and replaces; a child object is merged over the
    /// parent's test of that name.
    fn merge_tests(&mut self, parent: Vec<TestSrc>, child: Vec<TestSrc>) -> Vec<TestSrc> {
        let mut merged: Vec<(String, TestSrc)> = Vec::new();
        let n_parent = parent.len();
        for (i, t) in parent.into_iter().chain(child).enumerate() {
            let from_child = i >= n_parent;
            let (name, entry) = match &t.value {
                J::Str(s) => {
                    let mut o = Obj::default();
                    o.insert("name".into(), J::Str(s.clone()));
                    (s.clone(), TestSrc { value: J::Obj(o), path: t.path.clone() })
                }
                J::Obj(o) => {
                    if let Some(n) = o.get("name").and_then(J::as_str).filter(|n| !n.is_empty()) {
                        (n.to_string(), t.clone())
                    } else {
                        self.ctx
                            .warn(&t.path, "a test without a name is dropped by upstream when configurations merge");
                        continue;
                    }
                }
                _ => continue,
            };
            match merged.iter().position(|(n, _)| *n == name) {
                Some(at) => {
                    if self.same_owner(&merged[at].1.path, &t.path) {
                        self.ctx.warn(
                            &t.path,
                            format!("test `{name}` is listed twice here; upstream merges them into one"),
                        );
                    }
                    let slot = &mut merged[at].1;
                    match (&mut slot.value, entry.value, from_child && matches!(t.value, J::Obj(_))) {
                        (J::Obj(base), J::Obj(over), true) => {
                            for (k, v) in over.iter() {
                                base.insert(k.to_string(), v.clone());
                            }
                            slot.path = entry.path;
                        }
                        (_, value, _) => *slot = TestSrc { value, path: entry.path },
                    }
                }
                None => merged.push((name, entry)),
            }
        }
        merged.into_iter().map(|(_, t)| t).collect()
    }

    /// Whether two test paths are in the same configuration's list.
    fn same_owner(&self, a: &str, b: &str) -> bool {
        let owner = |p: &str| p.rsplit_once(".tests[").map(|(o, _)| o.to_string());
        owner(a) == owner(b)
    }

    /// `parse_test_suites` for one suite entry, then `run_test` for each test.
    fn suite(&mut self, suite: &Obj, path: &str, site: &Site<'_>) -> Result<Vec<Test>> {
        let suite_name = suite.get("name").and_then(J::as_str).unwrap_or_default().to_string();
        let config = suite.get("config").and_then(J::as_str).unwrap_or_default();
        if !self.configs.contains(config) {
            let known: Vec<&str> = self.configs.keys().collect();
            return Err(self.ctx.error(
                &join(path, "config"),
                format!("unknown configuration `{config}`: expected one of test_configurations ({})", known.join(", ")),
            ));
        }
        if suite.contains("env_variables") {
            self.ctx.warn(
                &join(path, "env_variables"),
                "upstream's schema allows suite-level env_variables but its runner never applies them; ignored",
            );
        }
        let combined = self.combine(config, &mut Vec::new())?;
        let config_path = join("test_configurations", config);

        // Defaults: configuration (num_gpus "auto" when absent), then suite entry.
        let mut defaults = Obj::default();
        for field in schema::default_fields() {
            let value = suite.get(field).or_else(|| combined.fields.get(field));
            match value {
                Some(v) => {
                    defaults.insert(field.into(), v.clone());
                }
                None if field == "num_gpus" => {
                    defaults.insert(field.into(), J::Str("auto".into()));
                }
                None => {}
            }
        }
        // Suite-entry mpi_args are appended to the configuration's.
        let mut config_mpi =
            vec![(normalize_mpi_args(combined.fields.get("mpi_args")), join(&config_path, "mpi_args"))];
        if suite.contains("mpi_args") {
            config_mpi.push((normalize_mpi_args(suite.get("mpi_args")), join(path, "mpi_args")));
        }
        let tests = combined.tests.clone().unwrap_or_default();
        if tests.is_empty() {
            self.ctx.warn(path, format!("configuration `{config}` has no tests: upstream warns and runs nothing"));
        }
        let shared = SuiteShared {
            name: &suite_name,
            enabled: !matches!(suite.get("enabled"), Some(J::Bool(false))),
            combined: &combined,
            config_path: &config_path,
            config_mpi: &config_mpi,
        };
        let mut out = Vec::new();
        for src in tests {
            let J::Obj(own) = &src.value else {
                return Err(self.ctx.error(
                    &src.path,
                    "expected a test object: upstream fails on a bare name unless a parent configuration also lists tests",
                ));
            };
            let mut t = defaults.clone();
            for (k, v) in own.iter() {
                t.insert(k.to_string(), v.clone());
            }
            out.push(self.test(&t, &src.path, &shared, site)?);
        }
        Ok(out)
    }

    /// One test as `run_test` (or `_run_pytest_test`) would run it.
    fn test(&mut self, t: &Obj, path: &str, suite: &SuiteShared<'_>, site: &Site<'_>) -> Result<Test> {
        let s = |key: &str| t.get(key).and_then(J::as_str).map(str::to_string);
        let flag = |key: &str, default: bool| match t.get(key) {
            Some(J::Bool(b)) => *b,
            _ => default,
        };
        let count = |key: &str, default: Count| match t.get(key) {
            Some(J::Num(n)) => n.as_u64().map_or(default, Count::Fixed),
            Some(J::Str(_)) => Count::Auto,
            _ => default,
        };
        let kind = if flag("is_pytest", false) {
            TrialKind::Pytest
        } else if flag("is_gtest", true) {
            TrialKind::Gtest
        } else {
            TrialKind::Perf
        };
        let name = s("name").unwrap_or_default();
        let filter = s("test_filter");
        if kind == TrialKind::Perf && filter.is_some() {
            self.ctx.warn(
                &join(path, "test_filter"),
                "upstream's executor ignores test_filter for non-gtest tests (its schema says otherwise); ignored",
            );
        }
        let test_filter = filter.filter(|f| f != "*" && f != "ALL" && !(kind == TrialKind::Pytest && f.is_empty()));

        let mut env = site.global_env.clone();
        env.extend(env_of(suite.combined.fields.get("env_variables")));
        env.extend(env_of(t.get("env_variables")));
        let mut rerun_env = env_of(suite.combined.fields.get("rerun_env_variables"));
        rerun_env.extend(env_of(t.get("rerun_env_variables")));

        let mut mpi_args = site.mpi_base.to_vec();
        let test_mpi = (normalize_mpi_args(t.get("mpi_args")), join(path, "mpi_args"));
        let extra =
            (normalize_mpi_args((self.env)("RCCL_TEST_MPI_ARGS").map(J::Str).as_ref()), "$RCCL_TEST_MPI_ARGS".into());
        for (line, at) in suite.config_mpi.iter().chain([&test_mpi, &extra]) {
            if !line.is_empty() {
                mpi_args.extend(self.words(line, at)?);
            }
        }

        let base_args = suite.combined.fields.get("command_args").and_then(J::as_str).unwrap_or_default();
        let test_args = s("command_args").unwrap_or_default();
        let line = format!("{base_args} {test_args}");
        let args_at =
            if test_args.is_empty() { join(suite.config_path, "command_args") } else { join(path, "command_args") };
        let args = self.words(line.trim(), &args_at)?;

        let (binary, cwd, pytest, problem) = if kind == TrialKind::Pytest {
            let pytest = Pytest {
                python_bin: s("python_bin").filter(|p| !p.is_empty()),
                setup_venv: flag("setup_venv", false),
                venv_dir: s("venv_dir").filter(|p| !p.is_empty()),
                requirements: s("requirements").filter(|p| !p.is_empty()),
                select_args: match &test_filter {
                    Some(f) if f.trim_start().starts_with('-') => self.words(f, &join(path, "test_filter"))?,
                    Some(f) => vec!["-k".into(), f.clone()],
                    None => Vec::new(),
                },
            };
            match s("test_dir").filter(|d| !d.is_empty()) {
                Some(dir) => {
                    let dir = text::expanduser(&text::python_expandvars(&dir, self.env), self.env);
                    let dir = if dir.starts_with('/') { dir } else { py_join(&site.paths.workdir, &dir) };
                    (None, Some(dir), Some(pytest), None)
                }
                None => {
                    (None, None, Some(pytest), Some("pytest test missing 'test_dir' (upstream fails it)".to_string()))
                }
            }
        } else {
            let binary = s("binary").unwrap_or_else(|| "rccl-UnitTestsMPI".into());
            let resolved = self.binary_path(&binary, s("test_binary_dir").as_deref(), site, &join(path, "binary"));
            (Some(resolved), Some(site.build_dir.join("test").display().to_string()), None, None)
        };

        Ok(Test {
            suite: suite.name.to_string(),
            name,
            trial: String::new(),
            slug: String::new(),
            json_path: path.to_string(),
            description: s("description"),
            kind,
            binary,
            args,
            test_filter,
            num_ranks: count("num_ranks", Count::Fixed(1)),
            num_nodes: match t.get("num_nodes") {
                Some(J::Num(n)) => n.as_u64().unwrap_or(1),
                _ => 1,
            },
            num_gpus: count("num_gpus", Count::Auto),
            timeout: match t.get("timeout") {
                Some(J::Num(n)) => n.as_u64().filter(|&s| s > 0),
                _ => None,
            },
            enabled: suite.enabled,
            env,
            rerun_env,
            mpi_args,
            cwd,
            pytest,
            problem,
        })
    }

    /// `_resolve_binary_path`: an absolute path (expanded); a path with `$`
    /// or `~` that expands to an absolute one; else joined to the test's
    /// `test_binary_dir`, to `paths.test_binary_dir`, or to
    /// `<build_dir>/test`.
    fn binary_path(&mut self, binary: &str, test_dir: Option<&str>, site: &Site<'_>, path: &str) -> String {
        if binary.starts_with('/') {
            return self.expand_home(binary, path);
        }
        let mut binary = binary.to_string();
        if binary.contains(['$', '~']) {
            binary = self.expand_home(&binary, path);
            if binary.starts_with('/') {
                return binary;
            }
        }
        if let Some(dir) = test_dir.filter(|d| !d.is_empty()) {
            let dir = self.expand_home(dir, &path.replace(".binary", ".test_binary_dir"));
            return py_join(&dir, &binary);
        }
        if let Some(dir) = &site.paths.test_binary_dir {
            let dir = self.expand_home(dir, "paths.test_binary_dir");
            return py_join(&dir, &binary);
        }
        site.build_dir.join("test").join(&binary).display().to_string()
    }
}

/// What the tests of one suite entry share.
struct SuiteShared<'a> {
    name: &'a str,
    enabled: bool,
    combined: &'a Combined,
    config_path: &'a str,
    /// Configuration then suite-entry `mpi_args`, each with its JSON path.
    config_mpi: &'a [(String, String)],
}

/// `dict.fromkeys(items)`: first occurrence kept, order kept.
fn unique<'a>(items: impl Iterator<Item = &'a J>) -> Vec<J> {
    let mut out: Vec<J> = Vec::new();
    for item in items {
        if !out.contains(item) {
            out.push(item.clone());
        }
    }
    out
}

/// `_normalize_mpi_args`: a string trimmed, or a list's non-blank items
/// trimmed and joined with spaces.
fn normalize_mpi_args(value: Option<&J>) -> String {
    match value {
        Some(J::Str(s)) => s.trim().to_string(),
        Some(J::Arr(items)) => {
            items.iter().filter_map(J::as_str).map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" ")
        }
        _ => String::new(),
    }
}

fn env_of(value: Option<&J>) -> UpstreamEnv {
    value
        .and_then(J::as_obj)
        .map(|o| o.iter().filter_map(|(k, v)| Some((k.to_string(), v.as_str()?.to_string()))).collect())
        .unwrap_or_default()
}

/// Python's `os.path.join` for two parts.
fn py_join(dir: &str, name: &str) -> String {
    if name.starts_with('/') || dir.is_empty() {
        name.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}
