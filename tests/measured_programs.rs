//! Issue #47 end to end, on tests/fixtures/cmake-ring built with every
//! target instrumented: the report measures each program of the build that
//! wrote profiles beside `library.objects`, so the library's code counts
//! wherever it was compiled (`src/ring_sum.h`, a header only `ring_test`
//! compiles; `ring_ok`, a static function of `src/ring.c` that only
//! `ring_inside`, which compiles `ring.c` in, runs), and the tests' own files
//! are left out. The oracle is the fixture itself: what its programs call.

mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use support::{Setup, harness, root};

const LIMIT: Duration = Duration::from_secs(480);

fn setup(objects: Value, report: Value) -> Setup {
    setup_with(objects, report, json!({}))
}

fn setup_with(objects: Value, report: Value, inside_env: Value) -> Setup {
    support::setup(|v| {
        let fixture = root().join("tests/fixtures/cmake-ring").display().to_string();
        v["library"] = json!({
            "source_dir": fixture,
            "steps": [
                {"name": "configure", "argv": ["cmake", "-S", "{library_src}", "-B", "{build_dir}",
                    "-DCMAKE_C_COMPILER={cc}", "-DCMAKE_CXX_COMPILER={cxx}", "-DRING_COVERAGE_FLAGS={coverage_flags}"]},
                {"name": "build", "argv": ["cmake", "--build", "{build_dir}", "-j", "{jobs}"]}
            ],
            "objects": objects
        });
        v.as_object_mut().unwrap().remove("tests");
        for key in ["collectives", "sizes", "variants", "args"] {
            v.as_object_mut().unwrap().remove(key);
        }
        v["launch"] = json!({"launcher": "threads", "ranks": 1});
        v["programs"] = json!([
            {"name": "push", "kind": "gtest", "binary": "ring_test", "filter": "RingTest.*"},
            {"name": "inside", "binary": "ring_inside"},
            {"name": "bench", "binary": "ring_bench", "args": ["1024"], "env": inside_env}
        ]);
        for (key, value) in report.as_object().unwrap() {
            v["report"][key] = value.clone();
        }
    })
}

/// Per file of `coverage.lcov`, each line's count.
fn lcov(s: &Setup) -> BTreeMap<String, BTreeMap<u32, u64>> {
    let text = std::fs::read_to_string(s.ws.join("report/coverage.lcov")).unwrap();
    let mut files: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
    let mut file = String::new();
    for line in text.lines() {
        if let Some(f) = line.strip_prefix("SF:") {
            file = f.to_string();
            files.entry(file.clone()).or_default();
        } else if let Some(da) = line.strip_prefix("DA:") {
            let mut parts = da.split(',');
            let n: u32 = parts.next().unwrap().parse().unwrap();
            let count: u64 = parts.next().unwrap().parse().unwrap();
            files.get_mut(&file).unwrap().insert(n, count);
        }
    }
    files
}

/// The number of the line of fixture file `file` that contains `text`.
fn line_of(file: &str, text: &str) -> u32 {
    let source = std::fs::read_to_string(root().join("tests/fixtures/cmake-ring").join(file)).unwrap();
    source.lines().position(|l| l.contains(text)).unwrap_or_else(|| panic!("{file} has no {text:?}")) as u32 + 1
}

fn meta(s: &Setup) -> Value {
    serde_json::from_str(&std::fs::read_to_string(s.ws.join("report/meta.json")).unwrap()).unwrap()
}

#[test]
fn the_library_s_code_counts_in_whichever_program_it_was_compiled_and_the_tests_own_files_do_not() {
    let s = setup(json!(["{build_dir}/libring.so"]), json!({}));
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert!(
        text.contains(
            "measured 4 objects: libring.so (library.objects), ring_bench, ring_inside, ring_test (programs that wrote profiles); meta.json names them"
        ),
        "{text}"
    );
    let summary = std::fs::read_to_string(s.ws.join("report/summary.md")).unwrap();
    assert!(summary.contains("- measured 4 objects: libring.so (library.objects)"), "{summary}");
    let files = lcov(&s);
    // ring_sum({1, 2, 3}) in RingTest.Sum: its loop body ran three times.
    let sum = line_of("src/ring_sum.h", "sum += values[i];");
    assert_eq!(files.get("src/ring_sum.h").and_then(|f| f.get(&sum)), Some(&3), "{files:?}");
    // ring_inside calls ring_ok once, on a consistent ring.
    let ok = line_of("src/ring.c", "if (r->len > r->capacity)");
    assert_eq!(files["src/ring.c"].get(&ok), Some(&1), "{files:?}");
    // The tests' own files and googletest's count nowhere.
    assert!(files.keys().all(|f| !f.starts_with("tests/") && !f.contains("gtest")), "{:?}", files.keys());
    let measured = &meta(&s)["measured"];
    let test_code: Vec<&str> =
        measured["test_code"]["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(test_code.iter().any(|n| n.ends_with("/tests/ring_test.cc")), "{measured}");
    assert!(test_code.iter().any(|n| n.ends_with("/tests/ring_inside.c")), "{measured}");
    assert_eq!(measured["dropped_functions"]["count"], 0, "{measured}");
    // Attribution and the minimal suite read the same objects: each trial
    // alone covers lines of the library that the other does not.
    let who = harness(&s, "who-covers", &[&format!("src/ring_sum.h:{sum}")], Duration::from_secs(120));
    assert!(who.success && who.stdout.contains("push") && !who.stdout.contains("inside"), "{}", who.text());
    let who = harness(&s, "who-covers", &[&format!("src/ring.c:{ok}")], Duration::from_secs(120));
    assert!(who.success && who.stdout.contains("inside") && !who.stdout.contains("push"), "{}", who.text());
    let minimal = std::fs::read_to_string(s.ws.join("report/minimal-suite.json")).unwrap();
    assert!(minimal.contains("\"push\"") && minimal.contains("\"inside\""), "{minimal}");

    // Narrowed after the run, the report reads the library alone: what the
    // trials stored over every program is computed again, not reused.
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&s.config).unwrap()).unwrap();
    config["report"]["measure_programs"] = json!(false);
    std::fs::write(&s.config, config.to_string()).unwrap();
    let narrowed = harness(&s, "report", &[], LIMIT);
    assert!(narrowed.success, "{}", narrowed.text());
    assert!(!lcov(&s).contains_key("src/ring_sum.h"));
    assert!(
        narrowed.text().contains(
            "measurement: library.objects and the programs that wrote profiles (the report's is library.objects alone)"
        ),
        "{}",
        narrowed.text()
    );
}

#[test]
fn measuring_library_objects_alone_names_what_ran_unmeasured() {
    let s = setup(json!(["{build_dir}/libring.so"]), json!({"measure_programs": false}));
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    let files = lcov(&s);
    assert!(!files.contains_key("src/ring_sum.h"), "{:?}", files.keys());
    let ok = line_of("src/ring.c", "if (r->len > r->capacity)");
    assert_eq!(files["src/ring.c"].get(&ok), Some(&0), "{files:?}");
    assert!(text.contains("functions ran but no measured object maps them, so every total leaves them out"), "{text}");
    assert!(text.contains("/ring_test (not measured: report.measure_programs is false)"), "{text}");
    assert!(text.contains("/ring_inside (not measured: report.measure_programs is false)"), "{text}");
    let dropped = &meta(&s)["measured"]["dropped_functions"];
    let names: Vec<&str> = dropped["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.contains("ring_sum")), "{dropped}");
    assert!(names.iter().any(|n| n.contains("ring_ok")), "{dropped}");
}

#[test]
fn library_objects_take_patterns_and_one_that_matches_nothing_is_named() {
    let s = setup(json!(["{build_dir}/libring.so", "{build_dir}/ring_*"]), json!({"measure_programs": false}));
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    let objects = &meta(&s)["measured"]["objects"];
    let named: Vec<&str> = objects.as_array().unwrap().iter().map(|o| o["path"].as_str().unwrap()).collect();
    for program in ["/libring.so", "/ring_test", "/ring_inside", "/ring_bench"] {
        assert!(named.iter().any(|n| n.ends_with(program)), "{program}: {objects}");
    }
    assert!(lcov(&s).contains_key("src/ring_sum.h"));

    let s = setup(json!(["{build_dir}/libring.so", "{build_dir}/nothing_*"]), json!({}));
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(
        text.contains("library.objects[1]: the pattern ")
            && text.contains("/nothing_* matches no instrumented program or library"),
        "{text}"
    );
}

/// A trial that loads an instrumented `libring.so` built elsewhere (another
/// build ID): the report cannot measure it, and says so with the build ID
/// `llvm-readelf` prints, what it ran, and the function only it has.
#[test]
fn a_binary_that_is_no_file_of_the_build_is_named_with_what_it_ran() {
    let other = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(root().join("tests/fixtures/cmake-ring/src/ring.c")).unwrap();
    let source = format!("{source}\n__attribute__((constructor)) static void ring_elsewhere(void) {{}}\n");
    std::fs::write(other.path().join("ring.c"), source).unwrap();
    let include = root().join("tests/fixtures/cmake-ring/src");
    let built = std::process::Command::new("/usr/lib/llvm-22/bin/clang")
        .args(["-fprofile-instr-generate", "-fcoverage-mapping", "-shared", "-fPIC", "-I"])
        .arg(&include)
        .arg(other.path().join("ring.c"))
        .arg("-o")
        .arg(other.path().join("libring.so"))
        .status()
        .unwrap();
    assert!(built.success());
    let readelf = std::process::Command::new("/usr/lib/llvm-22/bin/llvm-readelf")
        .arg("-n")
        .arg(other.path().join("libring.so"))
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&readelf.stdout);
    let id = notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).unwrap().trim().to_string();

    let env = json!({"LD_LIBRARY_PATH": other.path().display().to_string()});
    let s = setup_with(json!(["{build_dir}/libring.so"]), json!({}), env);
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert!(
        text.contains(&format!("warning: a binary with build ID {id} wrote profiles in bench, but no file of the build has that ID, so none of its code is measured (")),
        "{text}"
    );
    let measured = &meta(&s)["measured"];
    let unknown = &measured["unknown_binaries"];
    assert_eq!(unknown.as_array().map(Vec::len), Some(1), "{measured}");
    assert_eq!(unknown[0]["build_id"], json!(id));
    assert_eq!(unknown[0]["trials"], json!(["bench"]));
    assert!(
        unknown[0]["functions_with_counts"].as_u64().unwrap() >= 5,
        "ring_new, push, pop, free and the constructor: {unknown}"
    );
    let dropped: Vec<&str> =
        measured["dropped_functions"]["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(dropped.iter().any(|n| n.ends_with("ring_elsewhere")), "{measured}");
    assert!(text.contains(&format!("the binary {id}, no file of the build")), "{text}");
}

/// Issue #48, item 7: one ctest trial that runs three different
/// instrumented programs (`ring_test` twice, `ring_bench`, `ring_inside`,
/// each writing profiles for other modules) passes, and each program's
/// counts reach the report. The oracle is the fixture: only `ring_inside`
/// runs `ring_ok`, once; only `RingTest.Sum` runs `ring_sum`'s loop, three
/// times; `ring_bench 1024` pushes 256 ints.
#[test]
fn a_ctest_trial_that_runs_several_instrumented_programs_passes_with_each_one_s_counts() {
    let project = tempfile::tempdir().unwrap();
    support::copy_tree(&root().join("tests/fixtures/cmake-ring"), project.path());
    let lists = project.path().join("CMakeLists.txt");
    let mut text = std::fs::read_to_string(&lists).unwrap();
    text.push_str(
        "add_test(NAME ring_bench_run COMMAND ring_bench 1024)\nadd_test(NAME ring_inside_run COMMAND ring_inside)\n",
    );
    std::fs::write(&lists, text).unwrap();
    let s = setup(json!(["{build_dir}/libring.so"]), json!({}));
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&s.config).unwrap()).unwrap();
    config["library"]["source_dir"] = json!(project.path().display().to_string());
    config["programs"] = json!([{"name": "all", "kind": "ctest"}]);
    std::fs::write(&s.config, config.to_string()).unwrap();

    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    let record = support::result(&s, "all");
    assert_eq!(record["status"], "PASSED", "{record}");
    let cases: Vec<&str> = record["cases"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cases, ["ring_push", "ring_fill", "ring_bench_run", "ring_inside_run"], "{record}");
    let files = lcov(&s);
    let ok = line_of("src/ring.c", "if (r->len > r->capacity)");
    assert_eq!(files["src/ring.c"].get(&ok), Some(&1), "{files:?}");
    let sum = line_of("src/ring_sum.h", "sum += values[i];");
    assert_eq!(files.get("src/ring_sum.h").and_then(|f| f.get(&sum)), Some(&3), "{files:?}");
    assert!(
        text.contains("measured 4 objects: libring.so (library.objects), ring_bench, ring_inside, ring_test (programs that wrote profiles)"),
        "{text}"
    );

    // Item 9: CTest's Testing/ is written in the trial's own folder, not in
    // the cached build its tests run from, and the next run reuses the
    // build without naming anything it did not make.
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(s.ws.join("build.json")).unwrap()).unwrap();
    let bin_dir = std::path::PathBuf::from(manifest["bin_dir"].as_str().unwrap());
    assert!(
        bin_dir.join("CTestTestfile.cmake").is_file() && !bin_dir.join("Testing").exists(),
        "{}",
        bin_dir.display()
    );
    let again = harness(&s, "run", &[], LIMIT);
    let text = again.text();
    assert!(again.success && text.contains("reusing build"), "{text}");
    assert!(!text.contains("its build did not make"), "{text}");
}
