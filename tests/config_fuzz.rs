//! Property tests of the config loader and the `${VAR}` expander: no input,
//! however wrong, may panic, and every error names the config file.
//!
//! Deterministic: every property runs with a fixed seed
//! (`RngSeed::Fixed(SEED)`, proptest's default `ChaCha` RNG) and a fixed number
//! of cases, so CI sees the same inputs on every run and a failure reproduces
//! by rerunning the test; `PROPTEST_*` variables cannot change either, and no
//! regression file is written (`failure_persistence: None`). To explore other
//! inputs locally, change `SEED`.

use ccl_coverage::config::expand::expand;
use ccl_coverage::config::{self, Config, DEFAULT_CONFIG_TEXT, limits};
use ccl_coverage::plan;
use ccl_coverage::workspace;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use serde_json::Value;
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

const SEED: u64 = 0x0cc1_c0fe;

fn fixed(cases: u32) -> ProptestConfig {
    ProptestConfig { cases, rng_seed: RngSeed::Fixed(SEED), failure_persistence: None, ..ProptestConfig::default() }
}

const FILE: &str = "/fuzz/config.json";

/// Text rich in what the expander and the template checker parse.
fn tricky_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[${}:\\-+=?AB_1x. /{}é\u{0}]{0,24}",
        any::<String>(),
        Just(String::new()),
        Just("${A:-${B:-${C}}}".to_string()),
        Just("$$${A}$$".to_string()),
    ]
}

fn env_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(vec!["A", "B", "C", "A_1"]).prop_map(String::from),
        tricky_text(),
        0..4,
    )
}

/// Any JSON value, with keys that are sometimes the config's own.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        tricky_text().prop_map(Value::String),
    ];
    let key = prop_oneof![
        prop::sample::select(vec![
            "name",
            "toolchain",
            "cc",
            "cxx",
            "library",
            "tests",
            "steps",
            "argv",
            "launchers",
            "kind",
            "capacity",
            "launch",
            "ranks",
            "collectives",
            "sizes",
            "variants",
            "timeouts",
            "default",
            "grace",
        ])
        .prop_map(String::from),
        "[a-z_]{0,8}",
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// Loads `text`; an error must name the file. A config that loads must keep
/// every promise the harness relies on later.
fn check_load(text: &str) -> Result<(), TestCaseError> {
    match config::load_str(text, Path::new(FILE), &no_env).and_then(|loaded| plan::check(&loaded).map(|()| loaded)) {
        Ok(loaded) => check_loaded(&loaded.config),
        Err(e) => {
            prop_assert!(e.to_string().starts_with(&format!("{FILE}: ")), "error without the file: {e}");
            Ok(())
        }
    }
}

fn check_loaded(c: &Config) -> Result<(), TestCaseError> {
    let trials = plan::plan(c);
    prop_assert!(!trials.is_empty() && trials.len() <= limits::TRIALS);
    let mut files = HashSet::new();
    for t in &trials {
        prop_assert!(workspace::check_slug(&t.slug).is_ok(), "unsafe slug {:?}", t.slug);
        for f in workspace::trial_files(&t.slug) {
            prop_assert!(files.insert(f.to_lowercase()), "two trials share {f}");
        }
        prop_assert!((1..=c.capacity).contains(&t.ranks));
        prop_assert!(t.timeout(c, true).as_secs() <= limits::TIMEOUT_SECONDS.max);
    }
    prop_assert!(c.timeouts.grace <= limits::GRACE_SECONDS.max);
    Ok(())
}

/// Where a mutation applies: a JSON path as keys and indices.
#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

fn all_paths(v: &Value, prefix: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        Value::Object(map) => {
            for (k, item) in map {
                prefix.push(Seg::Key(k.clone()));
                out.push(prefix.clone());
                all_paths(item, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                prefix.push(Seg::Index(i));
                out.push(prefix.clone());
                all_paths(item, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn parent_mut<'v>(v: &'v mut Value, path: &[Seg]) -> &'v mut Value {
    path.iter().fold(v, |v, seg| match seg {
        Seg::Key(k) => &mut v[k.as_str()],
        Seg::Index(i) => &mut v[*i],
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Remove,
    Replace(Value),
    /// Copies the value into its array again (duplicate names, slugs).
    Duplicate,
    /// Replaces a name or a size, where trial file names come from.
    Rename(Value),
}

fn interesting_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..5000).prop_map(Value::from),
        prop::sample::select(vec![0i64, -1, 1, 4096, 4097, 604_800, 604_801, 3600, 3601, 1_000_000, 1_000_001])
            .prop_map(Value::from),
        prop::sample::select(vec![0.5, 2.0, 1e30, -1e30, 1.8446744073709552e19]).prop_map(Value::from),
    ]
}

fn interesting_string() -> impl Strategy<Value = Value> {
    prop_oneof![
        tricky_text(),
        prop::sample::select(vec![
            "",
            ".",
            "..",
            ".x",
            "a/b",
            "A::B",
            "AllReduce.1K",
            "1K.ring",
            "ring.profdata",
            "allreduce",
            "1K",
            "1024",
            "0K",
            "1025G",
            "direct.1K",
            "ring.1K.ring",
            "Reduce.1K",
            "RING",
            "{ranks}",
            "{nope}",
            "${CCL_COV_FUZZ_UNSET}",
            "${X",
            "mpi",
            "threads",
        ])
        .prop_map(String::from),
        (1usize..300).prop_map(|n| "n".repeat(n)),
    ]
    .prop_map(Value::String)
}

/// Names that collide with `configs/local.json`'s in file names (case,
/// `.profdata`, dots), or are taken.
fn colliding_name() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        "RING",
        "Ring",
        "ring.profdata",
        "allreduce",
        "REDUCE",
        "AllReduce.1K",
        "1K.ring",
        "mpi",
        "direct",
        "1K",
        "1024",
        "256k",
        "262144",
    ])
    .prop_map(Value::from)
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => Just(Mutation::Remove),
        2 => json_value().prop_map(Mutation::Replace),
        3 => interesting_number().prop_map(Mutation::Replace),
        3 => interesting_string().prop_map(Mutation::Replace),
        2 => Just(Mutation::Duplicate),
        4 => prop_oneof![colliding_name(), interesting_string()].prop_map(Mutation::Rename),
    ]
}

fn mutate(v: &mut Value, at: prop::sample::Index, m: &Mutation) {
    let mut paths = Vec::new();
    all_paths(v, &mut Vec::new(), &mut paths);
    if let Mutation::Rename(_) = m {
        // Only where names go: `*.name` and `sizes[i]`.
        paths.retain(|p| match p.as_slice() {
            [.., Seg::Key(k)] => k == "name",
            [Seg::Key(k), Seg::Index(_)] => k == "sizes",
            _ => false,
        });
    }
    if paths.is_empty() {
        return;
    }
    let path = &paths[at.index(paths.len())];
    let (last, parent_path) = path.split_last().expect("paths are not empty");
    let parent = parent_mut(v, parent_path);
    match (m, last, parent) {
        (Mutation::Remove, Seg::Key(k), Value::Object(map)) => {
            map.remove(k);
        }
        (Mutation::Remove, Seg::Index(i), Value::Array(items)) => {
            items.remove(*i);
        }
        (Mutation::Duplicate, Seg::Index(i), Value::Array(items)) => {
            let copy = items[*i].clone();
            items.push(copy);
        }
        (Mutation::Replace(new) | Mutation::Rename(new), Seg::Key(k), Value::Object(map)) => {
            map.insert(k.clone(), new.clone());
        }
        (Mutation::Replace(new) | Mutation::Rename(new), Seg::Index(i), Value::Array(items)) => items[*i] = new.clone(),
        _ => {}
    }
}

proptest! {
    #![proptest_config(fixed(512))]

    /// Any text and any environment: a value or an error, never a panic.
    #[test]
    fn expander_never_panics(text in tricky_text(), env in env_map()) {
        let _ = expand(&text, &|name| env.get(name).cloned());
    }

    /// A variable's value is used as it is, whatever it holds, and no name
    /// inside it is looked up.
    #[test]
    fn variable_text_is_not_expanded_again(value in tricky_text(), prefix in "[a-z/ ]{0,6}") {
        let lookups = Cell::new(0);
        let lookup = |name: &str| {
            lookups.set(lookups.get() + 1);
            (name == "A").then(|| value.clone())
        };
        prop_assert_eq!(expand(&format!("{prefix}${{A}}"), &lookup).unwrap(), format!("{prefix}{value}"));
        prop_assert_eq!(lookups.get(), 1);
        prop_assert_eq!(expand("${UNSET_B:-${A}}", &lookup).unwrap(), value.clone());
        prop_assert_eq!(lookups.get(), 3);
    }

    /// `$$` is a literal `$`: escaping every `$` of any text gives it back,
    /// without looking anything up.
    #[test]
    fn dollar_dollar_round_trips(text in tricky_text()) {
        let escaped = text.replace('$', "$$");
        let out = expand(&escaped, &|name| -> Option<String> { panic!("looked up {name}") });
        prop_assert_eq!(out.unwrap(), text);
    }

    /// Any JSON value: loads, or an error naming the file.
    #[test]
    fn loader_never_panics_on_json(value in json_value()) {
        check_load(&value.to_string())?;
    }

    /// Any text, including broken JSON.
    #[test]
    fn loader_never_panics_on_text(text in tricky_text()) {
        check_load(&text)?;
    }

    /// The default config with a few random edits (a key removed, a type
    /// changed, a number or a name replaced, an entry duplicated): loads with
    /// every promise kept, or an error naming the file.
    #[test]
    fn mutated_config_never_panics(edits in prop::collection::vec((any::<prop::sample::Index>(), mutation()), 1..4)) {
        let mut v: Value = serde_json::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        for (at, m) in &edits {
            mutate(&mut v, *at, m);
        }
        check_load(&v.to_string())?;
    }
}

proptest! {
    #![proptest_config(fixed(64))]

    /// Any bytes in the config file (not UTF-8, empty, binary): an error
    /// naming the file, never a panic.
    #[test]
    fn loader_never_panics_on_file_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = config::load(&path, &no_env) {
            prop_assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
    }
}
