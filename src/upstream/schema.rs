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
pub(super) enum FieldKind {
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
    /// Top-level `mpi_args`: [`FieldKind::MpiArgs`] or `{system: MpiArgs}`.
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

pub(super) type Field = (&'static str, FieldKind);

/// Fields a configuration, a suite entry and a test share as defaults.
const DEFAULTS: &[Field] = &[
    ("is_gtest", FieldKind::Bool),
    ("binary", FieldKind::Str),
    ("num_ranks", FieldKind::Count),
    ("num_nodes", FieldKind::Int(1)),
    ("num_gpus", FieldKind::Count),
    ("timeout", FieldKind::Int(0)),
    ("is_pytest", FieldKind::Bool),
    ("test_dir", FieldKind::Str),
    ("python_bin", FieldKind::Str),
    ("setup_venv", FieldKind::Bool),
    ("venv_dir", FieldKind::Str),
    ("requirements", FieldKind::Str),
];

/// The names of [`DEFAULTS`]: the cascade configuration → suite → test.
pub(super) fn default_fields() -> impl Iterator<Item = &'static str> {
    DEFAULTS.iter().map(|(k, _)| *k)
}

const CONFIGURATION: &[Field] = &[
    ("extends", FieldKind::Extends),
    ("env_variables", FieldKind::Env),
    ("rerun_env_variables", FieldKind::Env),
    ("args", FieldKind::StrList),
    ("mpi_args", FieldKind::MpiArgs),
    ("command_args", FieldKind::Str),
    ("description", FieldKind::Str),
    ("tests", FieldKind::Tests),
];

const TEST: &[Field] = &[
    ("name", FieldKind::Str),
    ("description", FieldKind::Str),
    ("test_binary_dir", FieldKind::Str),
    ("test_filter", FieldKind::Str),
    ("command_args", FieldKind::Str),
    ("env_variables", FieldKind::Env),
    ("rerun_env_variables", FieldKind::Env),
    ("mpi_args", FieldKind::MpiArgs),
];

const SUITE: &[Field] = &[
    ("name", FieldKind::Str),
    ("description", FieldKind::Str),
    ("config", FieldKind::Str),
    ("enabled", FieldKind::Bool),
    ("env_variables", FieldKind::Env),
    ("mpi_args", FieldKind::MpiArgs),
];

const SYSTEM: &[Field] = &[("name", FieldKind::Str), ("description", FieldKind::Str)];

const PATHS: &[Field] = &[
    ("workdir", FieldKind::Str),
    ("rocm_path", FieldKind::Str),
    ("mpi_path", FieldKind::Str),
    ("test_binary_dir", FieldKind::Str),
    ("llvm-profdata", FieldKind::CodeOnly),
    ("llvm-cov", FieldKind::CodeOnly),
];

const BUILD: &[Field] = &[
    ("requires_build", FieldKind::Bool),
    ("install_flags", FieldKind::StrList),
    ("cmake_options", FieldKind::CmakeOptions),
    ("env_variables", FieldKind::Env),
    ("parallel_jobs", FieldKind::Int(1)),
    ("generator", FieldKind::Str),
    ("build_type", FieldKind::CodeOnly),
];

const RCCL_TESTS_BUILD: &[Field] = &[
    ("enabled", FieldKind::Bool),
    ("source_dir", FieldKind::Str),
    ("install_script", FieldKind::Str),
    ("build_command", FieldKind::BuildCommand),
    ("install_flags", FieldKind::StrList),
    ("rccl_home", FieldKind::Str),
    ("env_variables", FieldKind::Env),
];

const TOP: &[Field] = &[
    ("system_configurations", FieldKind::Object(&[SYSTEM])),
    ("paths", FieldKind::Object(&[PATHS])),
    ("env_variables", FieldKind::Env),
    ("auto_detect_hosts", FieldKind::Bool),
    ("mpi_args", FieldKind::MpiArgsBySystem),
    ("system_env_variables", FieldKind::SystemEnv),
    ("build_configuration", FieldKind::Object(&[BUILD])),
    ("rccl_tests_build_configuration", FieldKind::Object(&[RCCL_TESTS_BUILD])),
    ("test_configurations", FieldKind::Configurations),
    ("test_suites", FieldKind::Suites),
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

fn check(ctx: &mut Ctx<'_>, v: &J, path: &str, kind: FieldKind) -> Result<()> {
    match (kind, v) {
        (FieldKind::Str, J::Str(_)) | (FieldKind::Bool, J::Bool(_)) => Ok(()),
        (FieldKind::Str, _) => Err(expected(ctx, path, "a string", v)),
        (FieldKind::Bool, _) => Err(expected(ctx, path, "a boolean", v)),
        (FieldKind::Int(min), J::Num(n)) if n.as_u64().is_some_and(|n| n >= min) => Ok(()),
        (FieldKind::Int(min), _) => Err(expected(ctx, path, &format!("an integer ≥ {min}"), v)),
        (FieldKind::Count, J::Num(n)) if n.as_u64().is_some_and(|n| n >= 1) => Ok(()),
        (FieldKind::Count, J::Str(s)) if s == "auto" => Ok(()),
        (FieldKind::Count, _) => Err(expected(ctx, path, "an integer ≥ 1 or \"auto\"", v)),
        (FieldKind::Env, J::Obj(o)) => {
            for (k, item) in o.iter() {
                if !matches!(item, J::Str(_)) {
                    return Err(expected(ctx, &join(path, k), "a string (environment values are strings)", item));
                }
            }
            Ok(())
        }
        (FieldKind::Env, _) => Err(expected(ctx, path, "an object of strings", v)),
        (FieldKind::MpiArgs | FieldKind::BuildCommand, J::Str(_)) => Ok(()),
        (FieldKind::MpiArgs | FieldKind::BuildCommand | FieldKind::StrList, J::Arr(items)) => {
            for (i, item) in items.iter().enumerate() {
                if !matches!(item, J::Str(_)) {
                    return Err(expected(ctx, &format!("{path}[{i}]"), "a string", item));
                }
            }
            Ok(())
        }
        (FieldKind::StrList, _) => Err(expected(ctx, path, "a list of strings", v)),
        (FieldKind::MpiArgs | FieldKind::BuildCommand, _) => {
            Err(expected(ctx, path, "a string or a list of strings", v))
        }
        (FieldKind::CodeOnly, J::Str(_)) => {
            ctx.warn(path, "upstream's schema rejects this key, but its runner reads it; used");
            Ok(())
        }
        (FieldKind::CodeOnly, _) => Err(expected(ctx, path, "a string", v)),
        (FieldKind::Object(fields), J::Obj(o)) => check_object(ctx, o, path, fields),
        (FieldKind::Object(_), _) => Err(expected(ctx, path, "an object", v)),
        (FieldKind::MpiArgsBySystem, J::Obj(o)) => {
            for (k, item) in o.iter() {
                check(ctx, item, &join(path, k), FieldKind::MpiArgs)?;
            }
            Ok(())
        }
        (FieldKind::MpiArgsBySystem, _) => check(ctx, v, path, FieldKind::MpiArgs),
        (FieldKind::SystemEnv, J::Obj(o)) => {
            for (k, item) in o.iter() {
                check(ctx, item, &join(path, k), FieldKind::Env)?;
            }
            Ok(())
        }
        (FieldKind::SystemEnv, _) => Err(expected(ctx, path, "an object of environment maps", v)),
        (FieldKind::CmakeOptions, J::Str(_)) => Ok(()),
        (FieldKind::CmakeOptions, J::Obj(o)) => {
            for (k, item) in o.iter() {
                if !matches!(item, J::Str(_) | J::Num(_) | J::Bool(_)) {
                    return Err(expected(ctx, &join(path, k), "a string, a number or a boolean", item));
                }
            }
            Ok(())
        }
        (FieldKind::CmakeOptions, _) => Err(expected(ctx, path, "a string or an object", v)),
        (FieldKind::Extends, J::Str(_)) => Ok(()),
        (FieldKind::Extends, J::Arr(items)) if !items.is_empty() => check(ctx, v, path, FieldKind::StrList),
        (FieldKind::Extends, _) => Err(expected(ctx, path, "a configuration name or a non-empty list of names", v)),
        (FieldKind::Tests, J::Arr(items)) => {
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
        (FieldKind::Tests, _) => Err(expected(ctx, path, "a list of tests", v)),
        (FieldKind::Configurations, J::Obj(o)) => {
            for (name, item) in o.iter() {
                check(ctx, item, &join(path, name), FieldKind::Object(&[DEFAULTS, CONFIGURATION]))?;
            }
            Ok(())
        }
        (FieldKind::Configurations, _) => Err(expected(ctx, path, "an object of named configurations", v)),
        (FieldKind::Suites, J::Arr(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                check(ctx, item, &at, FieldKind::Object(&[DEFAULTS, SUITE]))?;
                for key in ["name", "config"] {
                    if item.as_obj().is_some_and(|o| !o.contains(key)) {
                        return Err(ctx.error(&at, format!("missing field `{key}`: every suite needs one")));
                    }
                }
            }
            Ok(())
        }
        (FieldKind::Suites, _) => Err(expected(ctx, path, "a list of suites", v)),
    }
}
