//! Resolves each config under `tests/fixtures/upstream-configs/` (our own
//! configs in RCCL `test_runner`'s format) and snapshots the resolved model,
//! warnings included, as JSON; and checks that no JSON value, however wrong,
//! makes the resolver panic, and that every error names the file.
//!
//! The property test is deterministic like `config_fuzz.rs`: a fixed seed and
//! case count, no persisted regressions.

use ccl_coverage::upstream::{self, Options};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fixed environment: the snapshots must not depend on the machine.
fn env(name: &str) -> Option<String> {
    match name {
        "PWD" => Some("/work/rccl".into()),
        "HOME" => Some("/home/dev".into()),
        "WORKDIR" => Some("/work/rccl".into()),
        _ => None,
    }
}

fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(root().join("snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings
}

fn resolve_fixture(name: &str, options: &Options<'_>) -> Value {
    let rel = Path::new("tests/fixtures/upstream-configs").join(name);
    let text = std::fs::read_to_string(root().join(&rel)).unwrap();
    assert!(upstream::is_upstream(&serde_json::from_str(&text).unwrap()), "{name} is in upstream's format");
    let resolved = upstream::resolve_with(&rel, &text, &env, options).unwrap_or_else(|e| panic!("{e}"));
    serde_json::to_value(&resolved).unwrap()
}

#[test]
fn upstream_fixture_configs_resolve_to_their_snapshots() {
    let plain = Options::default();
    for (name, options) in [
        ("rccl-shaped.json", plain),
        ("extends-chains.json", plain),
        ("quirks.json", plain),
        ("system-profiles.json", Options { system: Some("mellanox"), rccl_root: None }),
    ] {
        let value = resolve_fixture(name, &options);
        let snapshot = format!("upstream-{}", name.trim_end_matches(".json"));
        settings().bind(|| insta::assert_json_snapshot!(snapshot, value));
    }
}

const SEED: u64 = 0x0cc1_c0fe;
const FILE: &str = "/fuzz/upstream.json";

/// Any JSON value, with keys that are often upstream's own.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u64..20).prop_map(Value::from),
        prop::sample::select(vec!["auto", "*", "ALL", "a", "b", "${X:-${Y}}", "$HOME/~", "'", "-k x"])
            .prop_map(Value::from),
    ];
    let key = prop::sample::select(vec![
        "test_configurations",
        "test_suites",
        "extends",
        "tests",
        "name",
        "config",
        "env_variables",
        "mpi_args",
        "num_ranks",
        "num_gpus",
        "num_nodes",
        "timeout",
        "is_gtest",
        "is_pytest",
        "binary",
        "test_filter",
        "command_args",
        "enabled",
        "paths",
        "a",
        "b",
    ])
    .prop_map(String::from);
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A well-formed config with some values replaced by arbitrary ones.
fn near_valid() -> impl Strategy<Value = Value> {
    (json_value(), json_value(), json_value(), prop::sample::select(vec!["a", "b", "c"])).prop_map(
        |(x, y, z, parent)| {
            json!({
                "test_configurations": {
                    "a": {"extends": parent, "tests": [{"name": "t", "num_ranks": x}]},
                    "b": {"extends": ["a"], "env_variables": y, "tests": z},
                    "c": {}
                },
                "test_suites": [{"name": "S", "config": "b"}, {"name": "S", "config": "a"}]
            })
        },
    )
}

fn check(value: &Value) -> Result<(), TestCaseError> {
    match upstream::resolve(Path::new(FILE), &value.to_string(), &env) {
        Ok(r) => {
            let mut slugs = std::collections::HashSet::new();
            for t in &r.tests {
                prop_assert!(slugs.insert(t.slug.to_lowercase()), "two tests share {}", t.slug);
                prop_assert!(ccl_coverage::workspace::check_slug(&t.slug).is_ok());
            }
        }
        Err(e) => prop_assert!(e.to_string().starts_with(&format!("{FILE}: ")), "error without the file: {e}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: RngSeed::Fixed(SEED), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn upstream_resolver_never_panics_on_json(value in json_value()) {
        check(&value)?;
    }

    #[test]
    fn upstream_resolver_never_panics_on_near_valid_configs(value in near_valid()) {
        check(&value)?;
    }
}
