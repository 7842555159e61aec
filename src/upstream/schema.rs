//! The checks upstream's `lib/schema.json` makes, at the place a value is
//! written (before `extends` merges move it), so an error names the file's
//! own JSON path. A wrong type or a missing required field is an error (the
//! schema rejects the config); a key the schema does not know is a warning
//! and is ignored (without `jsonschema` installed upstream runs anyway and
//! never reads it), except the few the executor honours although the schema
//! rejects them.

use super::Ctx;
use super::json::{J, Obj, join};
use crate::error::Result;

#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Str,
    Bool,
    /// An integer, at least this.
    Int(u64),
    /// An integer ≥ 1 or `"auto"`.
    Count,
    /// `{name: string}`.
    Env,
    /// A string or a list of strings.
    MpiArgs,
    StrList,
    /// Rejected by the schema, read by upstream's code: checked as a string
    /// and warned about.
    CodeOnly,
    Object(&'static [&'static [Field]]),
    /// Top-level `mpi_args`: [`Kind::MpiArgs`] or `{system: MpiArgs}`.
    MpiArgsBySystem,
    /// `{system: Env}`.
    SystemEnv,
    /// A string or an object of strings, numbers and booleans.
    CmakeOptions,
    /// A string or a list of strings.
    BuildCommand,
    /// A configuration name or a non-empty list of them.
    Extends,
    Tests,
    Configurations,
    Suites,
}

pub(super) type Field = (&'static str, Kind);

/// Fields a configuration, a suite entry and a test share as defaults.
const DEFAULTS: &[Field] = &[
    ("is_gtest", Kind::Bool),
    ("binary", Kind::Str),
    ("num_ranks", Kind::Count),
    ("num_nodes", Kind::Int(1)),
    ("num_gpus", Kind::Count),
    ("timeout", Kind::Int(0)),
    ("is_pytest", Kind::Bool),
    ("test_dir", Kind::Str),
    ("python_bin", Kind::Str),
    ("setup_venv", Kind::Bool),
    ("venv_dir", Kind::Str),
    ("requirements", Kind::Str),
];

/// The names of [`DEFAULTS`]: the cascade configuration → suite → test.
pub(super) fn default_fields() -> impl Iterator<Item = &'static str> {
    DEFAULTS.iter().map(|(k, _)| *k)
}

const CONFIGURATION: &[Field] = &[
    ("extends", Kind::Extends),
    ("env_variables", Kind::Env),
    ("rerun_env_variables", Kind::Env),
    ("args", Kind::StrList),
    ("mpi_args", Kind::MpiArgs),
    ("command_args", Kind::Str),
    ("description", Kind::Str),
    ("tests", Kind::Tests),
];

const TEST: &[Field] = &[
    ("name", Kind::Str),
    ("description", Kind::Str),
    ("test_binary_dir", Kind::Str),
    ("test_filter", Kind::Str),
    ("command_args", Kind::Str),
    ("env_variables", Kind::Env),
    ("rerun_env_variables", Kind::Env),
    ("mpi_args", Kind::MpiArgs),
];

const SUITE: &[Field] = &[
    ("name", Kind::Str),
    ("description", Kind::Str),
    ("config", Kind::Str),
    ("enabled", Kind::Bool),
    ("env_variables", Kind::Env),
    ("mpi_args", Kind::MpiArgs),
];

const SYSTEM: &[Field] = &[("name", Kind::Str), ("description", Kind::Str)];

const PATHS: &[Field] = &[
    ("workdir", Kind::Str),
    ("rocm_path", Kind::Str),
    ("mpi_path", Kind::Str),
    ("test_binary_dir", Kind::Str),
    ("llvm-profdata", Kind::CodeOnly),
    ("llvm-cov", Kind::CodeOnly),
];

const BUILD: &[Field] = &[
    ("requires_build", Kind::Bool),
    ("install_flags", Kind::StrList),
    ("cmake_options", Kind::CmakeOptions),
    ("env_variables", Kind::Env),
    ("parallel_jobs", Kind::Int(1)),
    ("generator", Kind::Str),
    ("build_type", Kind::CodeOnly),
];

const RCCL_TESTS_BUILD: &[Field] = &[
    ("enabled", Kind::Bool),
    ("source_dir", Kind::Str),
    ("install_script", Kind::Str),
    ("build_command", Kind::BuildCommand),
    ("install_flags", Kind::StrList),
    ("rccl_home", Kind::Str),
    ("env_variables", Kind::Env),
];

const TOP: &[Field] = &[
    ("system_configurations", Kind::Object(&[SYSTEM])),
    ("paths", Kind::Object(&[PATHS])),
    ("env_variables", Kind::Env),
    ("auto_detect_hosts", Kind::Bool),
    ("mpi_args", Kind::MpiArgsBySystem),
    ("system_env_variables", Kind::SystemEnv),
    ("build_configuration", Kind::Object(&[BUILD])),
    ("rccl_tests_build_configuration", Kind::Object(&[RCCL_TESTS_BUILD])),
    ("test_configurations", Kind::Configurations),
    ("test_suites", Kind::Suites),
];

/// Checks the whole document; `test_configurations` and a non-empty
/// `test_suites` are required (`validate_config`).
pub(super) fn check_root(ctx: &mut Ctx<'_>, root: &Obj) -> Result<()> {
    check_object(ctx, root, "", &[TOP])?;
    for key in ["test_configurations", "test_suites"] {
        if !root.contains(key) {
            return Err(ctx.error("", format!("missing field `{key}`: upstream requires it")));
        }
    }
    if matches!(root.get("test_suites"), Some(J::Arr(s)) if s.is_empty()) {
        return Err(ctx.error("test_suites", "expected at least one suite (upstream: no test suites defined)"));
    }
    Ok(())
}

fn check_object(ctx: &mut Ctx<'_>, obj: &Obj, path: &str, fields: &[&[Field]]) -> Result<()> {
    for (key, value) in obj.iter() {
        let at = join(path, key);
        if let Some((_, kind)) = fields.iter().flat_map(|f| f.iter()).find(|(k, _)| *k == key) {
            check(ctx, value, &at, *kind)?;
        } else {
            let known: Vec<&str> = fields.iter().flat_map(|f| f.iter()).map(|(k, _)| *k).collect();
            ctx.warn(
                &at,
                format!(
                    "unknown key: upstream's schema rejects it and upstream never reads it; ignored (known keys: {})",
                    known.join(", ")
                ),
            );
        }
    }
    Ok(())
}

fn expected(ctx: &Ctx<'_>, path: &str, what: &str, got: &J) -> crate::error::Error {
    ctx.error(path, format!("expected {what}, got {}", describe(got)))
}

fn describe(v: &J) -> String {
    match v {
        J::Num(n) => format!("{n}"),
        J::Str(s) if s.len() <= 40 => format!("{s:?}"),
        other => other.kind().to_string(),
    }
}

fn check(ctx: &mut Ctx<'_>, v: &J, path: &str, kind: Kind) -> Result<()> {
    match (kind, v) {
        (Kind::Str, J::Str(_)) | (Kind::Bool, J::Bool(_)) => Ok(()),
        (Kind::Str, _) => Err(expected(ctx, path, "a string", v)),
        (Kind::Bool, _) => Err(expected(ctx, path, "a boolean", v)),
        (Kind::Int(min), J::Num(n)) if n.as_u64().is_some_and(|n| n >= min) => Ok(()),
        (Kind::Int(min), _) => Err(expected(ctx, path, &format!("an integer ≥ {min}"), v)),
        (Kind::Count, J::Num(n)) if n.as_u64().is_some_and(|n| n >= 1) => Ok(()),
        (Kind::Count, J::Str(s)) if s == "auto" => Ok(()),
        (Kind::Count, _) => Err(expected(ctx, path, "an integer ≥ 1 or \"auto\"", v)),
        (Kind::Env, J::Obj(o)) => {
            for (k, item) in o.iter() {
                if !matches!(item, J::Str(_)) {
                    return Err(expected(ctx, &join(path, k), "a string (environment values are strings)", item));
                }
            }
            Ok(())
        }
        (Kind::Env, _) => Err(expected(ctx, path, "an object of strings", v)),
        (Kind::MpiArgs | Kind::BuildCommand, J::Str(_)) => Ok(()),
        (Kind::MpiArgs | Kind::BuildCommand | Kind::StrList, J::Arr(items)) => {
            for (i, item) in items.iter().enumerate() {
                if !matches!(item, J::Str(_)) {
                    return Err(expected(ctx, &format!("{path}[{i}]"), "a string", item));
                }
            }
            Ok(())
        }
        (Kind::StrList, _) => Err(expected(ctx, path, "a list of strings", v)),
        (Kind::MpiArgs | Kind::BuildCommand, _) => Err(expected(ctx, path, "a string or a list of strings", v)),
        (Kind::CodeOnly, J::Str(_)) => {
            ctx.warn(path, "upstream's schema rejects this key, but its runner reads it; used");
            Ok(())
        }
        (Kind::CodeOnly, _) => Err(expected(ctx, path, "a string", v)),
        (Kind::Object(fields), J::Obj(o)) => check_object(ctx, o, path, fields),
        (Kind::Object(_), _) => Err(expected(ctx, path, "an object", v)),
        (Kind::MpiArgsBySystem, J::Obj(o)) => {
            for (k, item) in o.iter() {
                check(ctx, item, &join(path, k), Kind::MpiArgs)?;
            }
            Ok(())
        }
        (Kind::MpiArgsBySystem, _) => check(ctx, v, path, Kind::MpiArgs),
        (Kind::SystemEnv, J::Obj(o)) => {
            for (k, item) in o.iter() {
                check(ctx, item, &join(path, k), Kind::Env)?;
            }
            Ok(())
        }
        (Kind::SystemEnv, _) => Err(expected(ctx, path, "an object of environment maps", v)),
        (Kind::CmakeOptions, J::Str(_)) => Ok(()),
        (Kind::CmakeOptions, J::Obj(o)) => {
            for (k, item) in o.iter() {
                if !matches!(item, J::Str(_) | J::Num(_) | J::Bool(_)) {
                    return Err(expected(ctx, &join(path, k), "a string, a number or a boolean", item));
                }
            }
            Ok(())
        }
        (Kind::CmakeOptions, _) => Err(expected(ctx, path, "a string or an object", v)),
        (Kind::Extends, J::Str(_)) => Ok(()),
        (Kind::Extends, J::Arr(items)) if !items.is_empty() => check(ctx, v, path, Kind::StrList),
        (Kind::Extends, _) => Err(expected(ctx, path, "a configuration name or a non-empty list of names", v)),
        (Kind::Tests, J::Arr(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                match item {
                    J::Obj(o) => {
                        check_object(ctx, o, &at, &[DEFAULTS, TEST])?;
                        if !o.contains("name") {
                            return Err(ctx.error(&at, "missing field `name`: every test needs one"));
                        }
                    }
                    J::Str(_) => ctx.warn(
                        &at,
                        "a bare test name: upstream's schema wants an object, and upstream reads it as \
                         {\"name\": ...} only when a parent configuration also has tests",
                    ),
                    other => return Err(expected(ctx, &at, "a test object", other)),
                }
            }
            Ok(())
        }
        (Kind::Tests, _) => Err(expected(ctx, path, "a list of tests", v)),
        (Kind::Configurations, J::Obj(o)) => {
            for (name, item) in o.iter() {
                check(ctx, item, &join(path, name), Kind::Object(&[DEFAULTS, CONFIGURATION]))?;
            }
            Ok(())
        }
        (Kind::Configurations, _) => Err(expected(ctx, path, "an object of named configurations", v)),
        (Kind::Suites, J::Arr(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                check(ctx, item, &at, Kind::Object(&[DEFAULTS, SUITE]))?;
                for key in ["name", "config"] {
                    if item.as_obj().is_some_and(|o| !o.contains(key)) {
                        return Err(ctx.error(&at, format!("missing field `{key}`: every suite needs one")));
                    }
                }
            }
            Ok(())
        }
        (Kind::Suites, _) => Err(expected(ctx, path, "a list of suites", v)),
    }
}
