//! One test per upstream rule, each on a small config written here.

use super::*;
use serde_json::{Value, json};

const FILE: &str = "/cfg/runner.json";

fn env(name: &str) -> Option<String> {
    match name {
        "PWD" => Some("/work/rccl".into()),
        "HOME" => Some("/home/dev".into()),
        "ROCM_PATH" => Some("/opt/rocm-7.15".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

/// A config with one suite per `(suite name, configuration)` and the given
/// configurations.
fn config(configs: Value, suites: &[(&str, &str)]) -> Value {
    let suites: Vec<Value> = suites.iter().map(|(n, c)| json!({"name": n, "config": c})).collect();
    json!({"test_configurations": configs, "test_suites": suites})
}

fn load(v: &Value) -> Resolved {
    resolve(Path::new(FILE), &v.to_string(), &env).unwrap()
}

fn load_err(v: &Value) -> String {
    resolve(Path::new(FILE), &v.to_string(), &env).unwrap_err().to_string()
}

fn test<'r>(r: &'r Resolved, trial: &str) -> &'r Test {
    r.tests.iter().find(|t| t.trial == trial).unwrap_or_else(|| panic!("no {trial}: {:?}", trials(r)))
}

fn trials(r: &Resolved) -> Vec<&str> {
    r.tests.iter().map(|t| t.trial.as_str()).collect()
}

fn warned(r: &Resolved, path: &str, fragment: &str) -> bool {
    r.warnings.iter().any(|w| w.json_path == path && w.message.contains(fragment))
}

#[test]
fn format_is_detected_from_top_level_keys() {
    assert!(is_upstream(&json!({"test_suites": []})));
    assert!(is_upstream(&json!({"test_configurations": {}})));
    assert!(!is_upstream(&json!({"name": "local", "tests": {}})));
    assert!(!is_upstream(&json!([1])));
}

#[test]
fn extends_single_inherits_fields_tests_and_env() {
    let r = load(&config(
        json!({
            "base": {"binary": "b", "timeout": 30, "env_variables": {"A": "base", "B": "base"},
                     "tests": [{"name": "t1", "test_filter": "X.*"}]},
            "child": {"extends": "base", "timeout": 60, "env_variables": {"B": "child"},
                      "tests": [{"name": "t2"}]}
        }),
        &[("S", "child")],
    ));
    assert_eq!(trials(&r), ["S::t1", "S::t2"], "parent tests first");
    let t1 = test(&r, "S::t1");
    assert_eq!(t1.timeout, Some(60), "the child's field wins");
    assert_eq!(t1.binary.as_deref(), Some("/work/rccl/build/release/test/b"));
    assert_eq!(t1.env["A"], "base");
    assert_eq!(t1.env["B"], "child");
}

#[test]
fn extends_list_earlier_parents_win_and_chains_follow() {
    let r = load(&config(
        json!({
            "root": {"num_gpus": 4, "env_variables": {"R": "root"}},
            "p1": {"extends": "root", "timeout": 1, "env_variables": {"X": "p1"}},
            "p2": {"timeout": 2, "num_nodes": 2, "env_variables": {"X": "p2", "Y": "p2"}},
            "c": {"extends": ["p1", "p2"], "tests": [{"name": "t"}]}
        }),
        &[("S", "c")],
    ));
    let t = test(&r, "S::t");
    assert_eq!((t.timeout, t.num_nodes, t.num_gpus), (Some(1), 2, Count::Fixed(4)));
    assert_eq!((t.env["X"].as_str(), t.env["Y"].as_str(), t.env["R"].as_str()), ("p1", "p2", "root"));
}

#[test]
fn extends_merges_tests_by_name_child_fields_winning() {
    let r = load(&config(
        json!({
            "base": {"tests": [{"name": "a", "timeout": 5, "test_filter": "A.*"}, "b"]},
            "child": {"extends": "base", "tests": [{"name": "a", "timeout": 9}, {"name": "c"}]}
        }),
        &[("S", "child")],
    ));
    assert_eq!(trials(&r), ["S::a", "S::b", "S::c"]);
    let a = test(&r, "S::a");
    assert_eq!((a.timeout, a.test_filter.as_deref()), (Some(9), Some("A.*")));
    assert_eq!(a.json_path, "test_configurations.child.tests[0]");
    assert!(warned(&r, "test_configurations.base.tests[1]", "bare test name"));
}

#[test]
fn extends_errors_name_the_path() {
    let err = load_err(&config(json!({"c": {"extends": ["nope"], "tests": []}}), &[("S", "c")]));
    assert!(
        err.starts_with("/cfg/runner.json: test_configurations.c.extends[0]: unknown configuration `nope`"),
        "{err}"
    );
    let err = load_err(&config(
        json!({"a": {"extends": "b"}, "b": {"extends": "c"}, "c": {"extends": "a", "tests": []}}),
        &[("S", "a")],
    ));
    assert!(err.contains("`extends` cycle: a → b → c → a"), "{err}");
    let err = load_err(&config(json!({"a": {"extends": "a"}}), &[("S", "a")]));
    assert!(err.contains("test_configurations.a.extends: `extends` cycle: a → a"), "{err}");
    let err = load_err(&config(json!({"a": {}}), &[("S", "zzz")]));
    assert!(err.contains("test_suites[0].config: unknown configuration `zzz`"), "{err}");
}

#[test]
fn defaults_cascade_configuration_then_suite_then_test() {
    let mut v = config(
        json!({"c": {"num_ranks": 2, "num_gpus": 2, "timeout": 10, "is_gtest": false, "binary": "cfg",
                     "tests": [{"name": "plain"}, {"name": "own", "num_ranks": 8, "binary": "mine"}]}}),
        &[("S", "c")],
    );
    v["test_suites"][0]["num_ranks"] = json!(4);
    v["test_suites"][0]["binary"] = json!("suite");
    let r = load(&v);
    let plain = test(&r, "S::plain");
    assert_eq!((plain.num_ranks, plain.num_gpus, plain.timeout), (Count::Fixed(4), Count::Fixed(2), Some(10)));
    assert_eq!((plain.kind, plain.binary.as_deref()), (TrialKind::Perf, Some("/work/rccl/build/release/test/suite")));
    let own = test(&r, "S::own");
    assert_eq!((own.num_ranks, own.binary.as_deref()), (Count::Fixed(8), Some("/work/rccl/build/release/test/mine")));
}

#[test]
fn runtime_fallbacks_and_kinds() {
    let r = load(&config(
        json!({"c": {"tests": [{"name": "g"}, {"name": "p", "is_pytest": true, "is_gtest": true, "test_dir": "test/py"}]}}),
        &[("S", "c")],
    ));
    let g = test(&r, "S::g");
    assert_eq!(
        (g.kind, g.num_ranks, g.num_nodes, g.num_gpus, g.timeout),
        (TrialKind::Gtest, Count::Fixed(1), 1, Count::Auto, None)
    );
    assert_eq!(g.binary.as_deref(), Some("/work/rccl/build/release/test/rccl-UnitTestsMPI"));
    assert_eq!(g.cwd.as_deref(), Some("/work/rccl/build/release/test"));
    let p = test(&r, "S::p");
    assert_eq!((p.kind, p.binary.as_deref(), p.cwd.as_deref()), (TrialKind::Pytest, None, Some("/work/rccl/test/py")));
}

#[test]
fn env_merges_global_then_configuration_then_test_and_suite_env_is_ignored() {
    let mut v = config(
        json!({"c": {"env_variables": {"G": "cfg", "C": "cfg"}, "rerun_env_variables": {"NCCL_DEBUG": "INFO", "R": "cfg"},
                     "tests": [{"name": "t", "env_variables": {"C": "test"}, "rerun_env_variables": {"R": "test"}}]}}),
        &[("S", "c")],
    );
    v["env_variables"] = json!({"G": "global", "ONLY": "global"});
    v["test_suites"][0]["env_variables"] = json!({"C": "suite"});
    let r = load(&v);
    let t = test(&r, "S::t");
    let env: Vec<(&str, &str)> = t.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(env, [("C", "test"), ("G", "cfg"), ("ONLY", "global")]);
    assert_eq!(t.rerun_env["NCCL_DEBUG"], "INFO");
    assert_eq!(t.rerun_env["R"], "test");
    assert!(warned(&r, "test_suites[0].env_variables", "never applies them"));
}

#[test]
fn system_overlay_applies_to_global_env_and_mpi_args() {
    let mut v = config(json!({"c": {"tests": [{"name": "t"}]}}), &[("S", "c")]);
    v["env_variables"] = json!({"A": "1", "B": "1"});
    v["system_env_variables"] = json!({"mlx": {"B": "2"}});
    v["mpi_args"] = json!({"mlx": ["--mca pml ucx", "--bind-to none"]});
    let opts = Options { system: Some("mlx"), rccl_root: None };
    let r = resolve_with(Path::new(FILE), &v.to_string(), &env, &opts).unwrap();
    assert_eq!((r.env["A"].as_str(), r.env["B"].as_str()), ("1", "2"));
    assert_eq!(r.mpi_base, ["--mca", "pml", "ucx", "--bind-to", "none"]);
    let r = load(&v);
    assert_eq!(r.mpi_base, ["--mca", "btl", "^vader,openib", "--bind-to", "none"]);
    assert!(warned(&r, "mpi_args", "no system was chosen"));
}

#[test]
fn mpi_args_default_replace_and_merge() {
    let base = json!({
        "p": {"mpi_args": ["-x P", "--shared"]},
        "c": {"extends": "p", "mpi_args": ["--shared", "-x C"], "tests": [{"name": "t", "mpi_args": "-x T"}]},
        "s": {"extends": "p", "mpi_args": "-x S", "tests": [{"name": "t"}]}
    });
    let mut v = config(base, &[("S", "c"), ("Str", "s")]);
    v["test_suites"][0]["mpi_args"] = json!("-x SUITE");
    let r = load(&v);
    let t = test(&r, "S::t");
    let default = ["--mca", "btl", "^vader,openib", "--bind-to", "none"];
    assert_eq!(t.mpi_args[..5], default, "no top-level mpi_args: upstream's default");
    assert_eq!(t.mpi_args[5..].join(" "), "-x P --shared -x C -x SUITE -x T");
    // A child's string is replaced by a parent's list (upstream's quirk).
    assert_eq!(test(&r, "Str::t").mpi_args[5..].join(" "), "-x P --shared");
    assert!(warned(&r, "test_configurations.s.mpi_args", "the string is dropped"));

    v["mpi_args"] = json!("--mca pml ucx");
    let r = load(&v);
    assert_eq!(test(&r, "S::t").mpi_args[..3], ["--mca", "pml", "ucx"], "a top-level value replaces the default");
    v["mpi_args"] = json!(["  ", ""]);
    assert_eq!(load(&v).mpi_base, default, "blank means the default");
}

#[test]
fn test_filter_forms() {
    let r = load(&config(
        json!({"c": {"tests": [
            {"name": "star", "test_filter": "*"}, {"name": "all", "test_filter": "ALL"},
            {"name": "some", "test_filter": "P2P_*:-*Slow"},
            {"name": "perf", "is_gtest": false, "test_filter": "X"},
            {"name": "py_k", "is_pytest": true, "test_dir": "/t", "test_filter": "smoke and not slow"},
            {"name": "py_raw", "is_pytest": true, "test_dir": "/t", "test_filter": "-m 'not gpu' -x"}
        ]}}),
        &[("S", "c")],
    ));
    assert_eq!(test(&r, "S::star").test_filter, None);
    assert_eq!(test(&r, "S::all").test_filter, None);
    assert_eq!(test(&r, "S::some").test_filter.as_deref(), Some("P2P_*:-*Slow"));
    assert!(warned(&r, "test_configurations.c.tests[3].test_filter", "ignores test_filter"));
    let k = &test(&r, "S::py_k").pytest.as_ref().unwrap().select_args;
    assert_eq!(k, &["-k", "smoke and not slow"]);
    let raw = &test(&r, "S::py_raw").pytest.as_ref().unwrap().select_args;
    assert_eq!(raw, &["-m", "not gpu", "-x"]);
}

#[test]
fn auto_counts_resolve_on_the_machine() {
    let r = load(&config(
        json!({"c": {"tests": [
            {"name": "auto", "num_ranks": "auto", "num_nodes": 2},
            {"name": "fixed", "num_ranks": 16, "num_nodes": 2, "num_gpus": 8}
        ]}}),
        &[("S", "c")],
    ));
    let auto = test(&r, "S::auto");
    assert_eq!((auto.num_ranks, auto.num_gpus), (Count::Auto, Count::Auto));
    assert_eq!(auto.placement(Some(4)), Placement { ranks: 8, nodes: 2, gpus_per_node: 4 });
    assert_eq!(auto.placement(None).ranks, 16, "8 GPUs per node when detection fails");
    let one_node = Machine { nodes: 1, gpus_per_node: Some(8) };
    assert_eq!(auto.ignore_reason(&one_node).unwrap(), "needs 2 nodes, 1 available");
    let small = Machine { nodes: 2, gpus_per_node: Some(4) };
    assert_eq!(test(&r, "S::fixed").ignore_reason(&small).unwrap(), "needs 8 GPUs per node, the machine has 4");
    assert_eq!(auto.ignore_reason(&Machine { nodes: 2, gpus_per_node: None }), None);
}

#[test]
fn timeout_zero_is_no_limit_and_enabled_false_is_kept() {
    let mut v =
        config(json!({"c": {"timeout": 0, "tests": [{"name": "t"}, {"name": "u", "timeout": 7}]}}), &[("S", "c")]);
    v["test_suites"][0]["enabled"] = json!(false);
    let r = load(&v);
    assert_eq!((test(&r, "S::t").timeout, test(&r, "S::u").timeout), (None, Some(7)));
    assert!(!test(&r, "S::t").enabled);
    let why = test(&r, "S::t").ignore_reason(&Machine { nodes: 1, gpus_per_node: Some(8) });
    assert_eq!(why.unwrap(), "suite `S` is disabled (enabled: false)");
}

#[test]
fn duplicate_keys_warn_with_their_path_and_the_last_wins() {
    let text = r#"{"test_configurations": {"c": {"timeout": 1, "timeout": 2, "tests": [{"name": "t"}]}},
                  "test_suites": [{"name": "S", "config": "c"}]}"#;
    let r = resolve(Path::new(FILE), text, &env).unwrap();
    assert_eq!(r.tests[0].timeout, Some(2));
    let w = r.warnings.iter().find(|w| w.json_path == "test_configurations.c.timeout").unwrap();
    assert_eq!(
        w.to_string(),
        "/cfg/runner.json: test_configurations.c.timeout: this key appears more than once; upstream (Python's json) keeps the last value"
    );
}

#[test]
fn repeated_suite_and_test_pairs_get_unique_names() {
    let r = load(&config(json!({"c": {"tests": [{"name": "t"}, {"name": "t"}]}}), &[("S", "c"), ("S", "c")]));
    assert_eq!(trials(&r), ["S::t", "S::t#2", "S::t#3", "S::t#4"]);
    assert_eq!(r.tests[1].slug, "S.t#2");
    assert!(warned(&r, "test_configurations.c.tests[1]", "repeats an earlier test"));
}

#[test]
fn binary_path_resolution_order() {
    let mut v = config(
        json!({"c": {"tests": [
            {"name": "abs", "binary": "/opt/${UNSET_DIR:-x}/b"},
            {"name": "var", "binary": "${ROCM_PATH}/bin/b"},
            {"name": "home", "binary": "~/bin/b"},
            {"name": "rel_var", "binary": "$EMPTY/b", "test_binary_dir": "/per/test"},
            {"name": "test_dir", "binary": "b", "test_binary_dir": "~/tests"},
            {"name": "paths_dir", "binary": "b"}
        ]}}),
        &[("S", "c")],
    );
    v["paths"] = json!({"test_binary_dir": "${HOME}/perf"});
    let r = load(&v);
    let bin = |t: &str| test(&r, t).binary.clone().unwrap();
    assert_eq!(bin("S::abs"), "/opt/x/b");
    assert_eq!(bin("S::var"), "/opt/rocm-7.15/bin/b");
    assert_eq!(bin("S::home"), "/home/dev/bin/b");
    assert_eq!(bin("S::rel_var"), "/b", "expands to an absolute path");
    assert_eq!(bin("S::test_dir"), "/home/dev/tests/b");
    assert_eq!(bin("S::paths_dir"), "/home/dev/perf/b");
}

#[test]
fn paths_expand_with_upstream_defaults_and_warn_when_left_literal() {
    let mut v = config(json!({"c": {"tests": [{"name": "t"}]}}), &[("S", "c")]);
    v["paths"] = json!({"workdir": "${WORKDIR:-$PWD}", "rocm_path": "${ROCM_PATH:-/opt/rocm}",
                        "mpi_path": "${MPI_PATH:-/opt/ompi}", "test_binary_dir": "${NOPE}/bin"});
    let r = load(&v);
    assert_eq!(r.paths.workdir, "/work/rccl");
    assert_eq!(r.paths.rocm_path.as_deref(), Some("/opt/rocm-7.15"));
    assert_eq!(r.paths.mpi_path.as_deref(), Some("/opt/ompi"));
    assert_eq!(r.paths.test_binary_dir.as_deref(), Some("${NOPE}/bin"));
    assert!(warned(&r, "paths.test_binary_dir", "unset variable"));
    // Inside an RCCL checkout, WORKDIR defaults to the checkout, as upstream sets it.
    let r = resolve(Path::new("/src/rccl/tools/scripts/test_runner/configs/x.json"), &v.to_string(), &env).unwrap();
    assert_eq!(r.paths.workdir, "/src/rccl");
    assert_eq!(r.build_dir, Path::new("/src/rccl/build/release"));
}

#[test]
fn build_sections_and_build_type() {
    let mut v = config(json!({"c": {"is_gtest": false, "tests": [{"name": "t"}]}}), &[("S", "c")]);
    v["build_configuration"] = json!({"install_flags": ["--debug", "-l"], "cmake_options": {"A": "ON", "B": 2, "C": true},
                                      "parallel_jobs": 16, "env_variables": {"CC": "clang"}, "generator": "Ninja"});
    v["rccl_tests_build_configuration"] =
        json!({"install_flags": ["--mpi", "--x=${HOME}"], "build_command": ["make", "-C", "~/rt"]});
    let r = load(&v);
    assert_eq!(r.build_type, BuildType::Release, "perf-only configs build release upstream");
    assert_eq!(r.build.cmake_options, "-DA=ON -DB=2 -DC=True");
    assert_eq!((r.build.parallel_jobs, r.build.env["CC"].as_str()), (Some(16), "clang"));
    assert!(warned(&r, "build_configuration.generator", "never uses it"));
    let rt = r.rccl_tests_build.as_ref().unwrap();
    assert_eq!(rt.source_dir, "/work/rccl/rccl-tests");
    assert_eq!(rt.rccl_home, "/work/rccl/build/release");
    assert_eq!(rt.install_flags, ["--mpi", "--x=/home/dev"]);
    assert!(matches!(&rt.build_command, Some(BuildCommand::Argv(a)) if a == &["make", "-C", "/home/dev/rt"]));

    v["test_configurations"]["c"]["is_gtest"] = json!(true);
    v["build_configuration"]["cmake_options"] = json!("-DX=1");
    v["rccl_tests_build_configuration"] = json!({});
    let r = load(&v);
    assert_eq!((r.build_type, r.build.cmake_options.as_str()), (BuildType::Debug, "-DX=1"));
    assert!(r.rccl_tests_build.is_none(), "an empty section is skipped upstream");
    assert_eq!(r.build_dir, Path::new("/work/rccl/build/debug"));
}

#[test]
fn command_args_join_configuration_then_test() {
    let r = load(&config(
        json!({"c": {"is_gtest": false, "command_args": "-g 1 -d all", "tests": [{"name": "t", "command_args": "-b '1 K'"}]}}),
        &[("S", "c")],
    ));
    assert_eq!(test(&r, "S::t").args, ["-g", "1", "-d", "all", "-b", "1 K"]);
    let err = load_err(&config(json!({"c": {"tests": [{"name": "t", "command_args": "-x 'open"}]}}), &[("S", "c")]));
    assert!(
        err.contains("test_configurations.c.tests[0].command_args: expected shell words with closed quotes"),
        "{err}"
    );
}

#[test]
fn schema_errors_and_warnings_name_the_path() {
    let bad = |v: Value| load_err(&v);
    let err = bad(config(json!({"c": {"num_ranks": 0}}), &[("S", "c")]));
    assert!(err.contains("test_configurations.c.num_ranks: expected an integer ≥ 1 or \"auto\", got 0"), "{err}");
    let err = bad(config(json!({"c": {"tests": [{"timeout": 1}]}}), &[("S", "c")]));
    assert!(err.contains("test_configurations.c.tests[0]: missing field `name`"), "{err}");
    let err = bad(config(json!({"c": {"env_variables": {"A": 1}}}), &[("S", "c")]));
    assert!(err.contains("test_configurations.c.env_variables.A: expected a string"), "{err}");
    let err = bad(json!({"test_configurations": {}, "test_suites": []}));
    assert!(err.contains("test_suites: expected at least one suite"), "{err}");
    let err = bad(json!({"test_suites": [{"name": "S"}]}));
    assert!(err.contains("test_suites[0]: missing field `config`"), "{err}");

    let mut v = config(json!({"c": {"tests": [{"name": "t", "enabled": false}], "args": ["-v"]}}), &[("S", "c")]);
    v["paths"] = json!({"llvm-cov": "/x/llvm-cov"});
    let r = load(&v);
    assert!(warned(&r, "test_configurations.c.tests[0].enabled", "unknown key"));
    assert!(warned(&r, "paths.llvm-cov", "its runner reads it; used"));
    assert!(warned(&r, "test_configurations.c.args", "never passes them"));
    assert_eq!(r.paths.llvm_cov.as_deref(), Some("/x/llvm-cov"));
}

#[test]
fn pytest_without_test_dir_is_a_problem_not_an_error() {
    let r = load(&config(json!({"c": {"is_pytest": true, "tests": [{"name": "t"}]}}), &[("S", "c")]));
    assert_eq!(r.tests[0].problem.as_deref(), Some("pytest test missing 'test_dir' (upstream fails it)"));
}
