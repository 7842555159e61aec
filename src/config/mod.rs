//! Configs (`configs/*.json`): typed, strict, and explained when wrong.
//!
//! Loading (`load.rs`) is four steps, each with errors that name the file
//! and the JSON path: parse JSON; expand `${VAR}` in every string value
//! (`expand.rs`); deserialize into the structs of `types.rs` (unknown keys
//! rejected), whose values check themselves (`values.rs`, and the bounded
//! numbers of `limits.rs`); then check what no single value can
//! (`validate.rs`): references between sections and trial names.

pub mod expand;
pub(crate) mod template;

use std::collections::BTreeMap;
use std::path::Path;

mod load;
mod overlay;
pub mod schema;
mod types;
mod validate;
mod values;
pub use load::*;
pub(crate) use overlay::UpstreamRun;
pub use types::*;
pub(crate) use validate::{Invalid, invalid};
pub use values::{
    AtBuild, AtTrial, BuildTemplate, EnvName, HostName, Name, Placeholders, Size, Template, TrialTemplate,
};

/// The embedded default: the CPU fixture, runnable on any Linux machine.
pub const DEFAULT_CONFIG_TEXT: &str = include_str!("../../configs/local.json");
/// Where the default config lives, relative to the project root.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "configs/local.json";

/// The environment a build step (`Env<BuildTemplate>`) or a trial
/// (`Env<TrialTemplate>`) adds.
pub(crate) type Env<T> = BTreeMap<EnvName, T>;

/// The accepted range of a number in a config, checked while deserializing so
/// that the error names the JSON path, and so that nothing downstream (a
/// deadline `Instant + timeout + grace`, a slot per rank, a `-n` argument) can
/// overflow or ask for something absurd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub(crate) min: u64,
    pub max: u64,
    /// What the number counts, for the error message.
    pub(crate) unit: &'static str,
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an integer in {}..={} ({})", self.min, self.max, self.unit)
    }
}

pub mod limits;

/// Reads the environment the way the whole crate does, so tests can swap it.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The `${VAR}` lookup for a config: the process environment, plus the
/// variables the harness defines itself.
pub(crate) fn config_env(root: &Path) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| match name {
        "CCL_COV_ROOT" => Some(root.display().to_string()),
        _ => process_env(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Result;
    use serde_json::Value;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn default_value() -> Value {
        serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap()
    }

    fn load_value(value: &Value) -> Result<LoadedConfig> {
        load_str(&value.to_string(), Path::new("/cfg/test.json"), &|n| (n == "HOME").then(|| "/home/x".to_string()))
    }

    #[test]
    fn embedded_default_loads() {
        let loaded = load_str(DEFAULT_CONFIG_TEXT, Path::new("/p/configs/local.json"), &no_env).unwrap();
        assert_eq!(loaded.config.name.as_str(), "local");
        assert_eq!(loaded.dir, Path::new("/p/configs"));
        assert_eq!(loaded.library_src(), Path::new("/p/tests/fixtures"), "relative to the config, normalised");
    }

    #[test]
    fn unknown_key_names_file_path_and_expected_keys() {
        let mut v = default_value();
        v["library"]["stepz"] = Value::Array(vec![]);
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: library"), "{err}");
        assert!(err.contains("unknown field `stepz`"), "{err}");
        assert!(err.contains("`steps`"), "lists what was expected: {err}");
    }

    #[test]
    fn wrong_type_names_the_json_path() {
        let mut v = default_value();
        v["launchers"]["threads"]["program_args"] = Value::String("-t".into());
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains("launchers.threads.program_args"), "{err}");
        assert!(err.contains("expected a sequence"), "{err}");
    }

    #[test]
    fn unset_variable_names_variable_and_path() {
        let mut v = default_value();
        v["collectives"][0]["args"] = serde_json::json!(["-x", "${CCL_COV_SURELY_UNSET}"]);
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains("collectives[0].args[1]"), "{err}");
        assert!(err.contains("CCL_COV_SURELY_UNSET is not set"), "{err}");
    }

    #[test]
    fn variables_expand_once_with_defaults() {
        let mut v = default_value();
        v["env"]["PLACE"] = Value::String("${HOME}/${NOPE:-d}".into());
        let loaded = load_value(&v).unwrap();
        assert_eq!(loaded.config.env["PLACE"].as_str(), "/home/x/d");
    }

    #[test]
    fn bad_json_says_where() {
        let err = load_str("{\"name\": ", Path::new("/x.json"), &no_env).unwrap_err().to_string();
        assert!(err.starts_with("/x.json: not valid JSON"), "{err}");
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn semantic_errors_name_their_path() {
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Edit, &str)> = vec![
            ("variants[0].launcher", Box::new(|v| v["variants"][0]["launcher"] = "nope".into()), "unknown launcher"),
            ("variants[0].ranks", Box::new(|v| v["variants"][0]["ranks"] = 999.into()), "capacity"),
            ("sizes[0]", Box::new(|v| v["sizes"][0] = "1KB".into()), "not a size"),
            (
                "collectives[1].name",
                Box::new(|v| v["collectives"][1]["name"] = v["collectives"][0]["name"].clone()),
                "duplicate",
            ),
            (
                "collectives[0].name",
                Box::new(|v| v["collectives"][0]["name"] = "All::Reduce".into()),
                "not a usable name",
            ),
            (
                "library.steps[0].argv[0]",
                Box::new(|v| v["library"]["steps"][0]["argv"][0] = "{ranks}".into()),
                "unknown placeholder",
            ),
            (
                "timeouts.overrides[0].size",
                Box::new(|v| v["timeouts"]["overrides"] = serde_json::json!([{"size": "7T", "seconds": 1}])),
                "names no size",
            ),
            (
                "launchers.threads",
                Box::new(|v| v["launchers"]["threads"]["args"] = serde_json::json!(["x"])),
                "direct launcher",
            ),
        ];
        for (path, edit, needle) in cases {
            let mut v = default_value();
            edit(&mut v);
            let err = load_value(&v).unwrap_err().to_string();
            assert!(err.contains(&format!(": {path}: ")), "expected path {path} in: {err}");
            assert!(err.contains(needle), "expected {needle:?} in: {err}");
        }
    }

    #[test]
    fn missing_field_is_reported_at_its_parent() {
        let mut v = default_value();
        v.as_object_mut().unwrap().remove("capacity");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: $: missing field `capacity`"), "at the root: {err}");

        let mut v = default_value();
        v["launch"].as_object_mut().unwrap().remove("ranks");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: launch: missing field `ranks`"), "at `launch`: {err}");

        let mut v = default_value();
        v["variants"][2]["env"] = serde_json::json!({});
        v["library"]["steps"][1].as_object_mut().unwrap().remove("name");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.starts_with("/cfg/test.json: library.steps[1]: missing field `name`"), "{err}");
    }

    #[test]
    fn numbers_out_of_range_name_path_and_range() {
        use serde_json::json;
        let cases: Vec<(&str, Value, &str)> = vec![
            ("capacity", json!(0), "expected an integer in 1..=4096 (ranks), got 0"),
            ("capacity", json!(4097), "1..=4096"),
            ("capacity", json!(-1), "got -1"),
            ("capacity", json!(2.5), "got 2.5"),
            ("capacity", json!(1e30), "got 1e30"),
            ("capacity", json!("4"), "invalid type: string \"4\", expected an integer in 1..=4096"),
            ("timeouts.default", json!(604_801), "1..=604800 (seconds, at most 7 days), got 604801"),
            ("timeouts.grace", json!(3601), "0..=3600"),
            ("iterations.iters", json!(0), "1..=1000000"),
            ("iterations.warmup", json!(1_000_001), "0..=1000000"),
            ("launch.ranks", json!(u64::MAX), "got 18446744073709551615"),
        ];
        for (path, value, needle) in cases {
            let mut v = default_value();
            let (parent, field) = path.rsplit_once('.').map_or(("", path), |(p, f)| (p, f));
            let target = if parent.is_empty() { &mut v } else { &mut v[parent] };
            target[field] = value;
            let err = load_value(&v).unwrap_err().to_string();
            assert!(err.starts_with(&format!("/cfg/test.json: {path}: ")), "expected path {path} in: {err}");
            assert!(err.contains(needle), "expected {needle:?} in: {err}");
        }
        // Beyond u64: serde_json reads it as a float; still an error with the range.
        let text = DEFAULT_CONFIG_TEXT.replace("\"capacity\": 4", "\"capacity\": 18446744073709551616");
        let err = load_str(&text, Path::new("/c.json"), &no_env).unwrap_err().to_string();
        assert!(err.starts_with("/c.json: capacity: expected an integer in 1..=4096"), "{err}");
    }

    #[test]
    fn sizes_are_bounded_and_compared_by_bytes() {
        let cases = [
            (serde_json::json!(["1K", "1024"]), "sizes[1]", "same size as sizes[0]"),
            (serde_json::json!(["1025G"]), "sizes[0]", "expected an integer in 0..=1099511627776"),
            (serde_json::json!(["99999999999999999999K"]), "sizes[0]", "too large"),
        ];
        for (sizes, path, needle) in cases {
            let mut v = default_value();
            v["sizes"] = sizes;
            let err = load_value(&v).unwrap_err().to_string();
            assert!(err.contains(&format!(": {path}: ")) && err.contains(needle), "{path} {needle:?}: {err}");
        }
    }

    #[test]
    fn long_names_and_too_many_trials_are_errors() {
        let mut v = default_value();
        v["variants"][0]["name"] = "v".repeat(101).into();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": variants[0].name: a name of 101 bytes is too long: expected at most 100"), "{err}");

        let mut v = default_value();
        v["sizes"] = (0..3000).map(|i| Value::from(i.to_string())).collect();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(
            err.contains(": collectives: 7 collectives × 3000 sizes × 4 variants is more than 10000 trials"),
            "{err}"
        );
    }

    #[test]
    fn nul_characters_and_bad_env_names_are_errors() {
        let mut v = default_value();
        v["args"][0] = "a\u{0}b".into();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": args[0]: the value contains a NUL character"), "{err}");

        let mut v = default_value();
        v["env"]["A=B"] = "x".into();
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": env.A=B: \"A=B\" is not an environment variable name"), "{err}");
    }

    #[test]
    fn a_step_has_exactly_one_command() {
        let mut v = default_value();
        v["library"]["steps"][0]["rccl_install"] = serde_json::json!({"script": "{library_src}/install.sh"});
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": library.steps[0]: expected either argv or rccl_install, not both"), "{err}");

        v["library"]["steps"][0].as_object_mut().unwrap().remove("argv");
        assert!(load_value(&v).is_ok(), "rccl_install alone is a command");

        v["library"]["steps"][0].as_object_mut().unwrap().remove("rccl_install");
        let err = load_value(&v).unwrap_err().to_string();
        assert!(err.contains(": library.steps[0]: expected argv (program first) or rccl_install"), "{err}");
    }

    #[test]
    fn without_a_tests_section_the_library_builds_the_tests() {
        let mut v = default_value();
        v.as_object_mut().unwrap().remove("tests");
        v["library"]["hash_exclude"] = serde_json::json!(["target"]);
        let loaded = load_value(&v).unwrap();
        assert_eq!(loaded.config.tests.bin_dir.as_str(), "{build_dir}");
        assert!(loaded.config.tests.steps.is_empty());
        assert_eq!(loaded.tests_src(), loaded.library_src());
        // The library's in-tree folders (a workspace beside the project) key nothing twice.
        assert_eq!(loaded.config.tests_hash_exclude(), ["target"]);
        // Own sources keep their own exclusions only.
        v["tests"] = serde_json::json!({"source_dir": "t", "hash_exclude": ["out"]});
        let loaded = load_value(&v).unwrap();
        assert_eq!(loaded.config.tests_hash_exclude(), ["out"]);
        assert_eq!(loaded.tests_src(), Path::new("/cfg/t"));
        // An empty steps list is no longer an error.
        v["tests"]["steps"] = serde_json::json!([]);
        load_value(&v).unwrap();
    }

    #[test]
    fn timeout_rules_match_by_each_given_field() {
        let rule =
            TimeoutRule { collective: Some("AllReduce".into()), size: None, variant: Some("mpi".into()), seconds: 9 };
        assert!(rule.matches("AllReduce", "1K", Some("mpi")));
        assert!(!rule.matches("AllReduce", "1K", Some("ring")));
        assert!(!rule.matches("Reduce", "1K", Some("mpi")));
    }
}
