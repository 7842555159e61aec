//! The in-process coverage-mapping reader against llvm-cov itself: a
//! fixture written for the mapping's features (tests/fixtures/mapping:
//! macros, templates, an inline function unused in one object, `#if 0`,
//! file-local functions of one name, one inline function with another body
//! in each object) is built with clang 22 and with clang
//! 19 into an executable and a shared library, run with inputs that take
//! different paths, and each profile's lcov from the reader must be exactly
//! `llvm-cov export -format=lcov`'s of the same LLVM, with and without an
//! ignore rule; and the region totals llvm-cov's summary's. Each profile's
//! counters, read in process from the indexed profile, must be exactly
//! `llvm-profdata merge -text`'s of the same LLVM, and the lcov is computed
//! from those.

use ccl_coverage::coverage::lcov::Covered;
use ccl_coverage::coverage::lcov::{Tallies, parse_lcov};
use ccl_coverage::coverage::mapping::{self, Mapping, ProfileCounts};
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const RUNS: [&[&str]; 4] = [&["0", "0"], &["1", "5"], &["2", "-3"], &["7", "6"]];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mapping")
}

/// Builds the fixture with `llvm`'s clang, runs it once per input, and
/// returns the two objects and each run's indexed profile, then the merged.
fn build_and_run(llvm: &Path, dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let src = fixture();
    let flags = ["-fprofile-instr-generate", "-fcoverage-mapping", "-O0", "-g0"];
    let lib = dir.join("libmapping.so");
    run(Command::new(llvm.join("clang++"))
        .args(flags)
        .args(["-shared", "-fPIC", "-DLIB_VARIANT", "-o"])
        .arg(&lib)
        .arg(src.join("lib.cc"))
        .arg(src.join("other.cc")));
    let exe = dir.join("mapping");
    run(Command::new(llvm.join("clang++"))
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(src.join("main.cc"))
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", dir.display())));
    let mut profiles = Vec::new();
    for (i, args) in RUNS.iter().enumerate() {
        let raw = dir.join(format!("run{i}-%p-%m.profraw"));
        run(Command::new(&exe).args(args.iter().copied()).env("LLVM_PROFILE_FILE", &raw));
        let raws: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("run{i}-")))
            .collect();
        assert_eq!(raws.len(), 2, "one raw profile per object of run {i}: {raws:?}");
        let profdata = dir.join(format!("run{i}.profdata"));
        run(Command::new(llvm.join("llvm-profdata")).args(["merge", "-sparse", "-o"]).arg(&profdata).args(&raws));
        profiles.push(profdata);
    }
    let merged = dir.join("merged.profdata");
    run(Command::new(llvm.join("llvm-profdata")).args(["merge", "-sparse", "-o"]).arg(&merged).args(&profiles));
    profiles.push(merged);
    (vec![exe, lib], profiles)
}

/// Runs `cmd` to its end within two minutes (killed and failed past it); its stdout.
fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = support::output_within(std::mem::replace(cmd, Command::new("true")), Duration::from_secs(120));
    assert!(out.status.success(), "{shown}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn llvm_cov(llvm: &Path, what: &[&str], profdata: &Path, objects: &[PathBuf], ignore: Option<&str>) -> String {
    let mut cmd = Command::new(llvm.join("llvm-cov"));
    cmd.arg("export")
        .args(what.iter().copied())
        .arg(format!("-instr-profile={}", profdata.display()))
        .arg(&objects[0])
        .arg("-object")
        .arg(&objects[1]);
    if let Some(r) = ignore {
        cmd.arg(format!("-ignore-filename-regex={r}"));
    }
    run(&mut cmd)
}

fn reader_equals_llvm_cov(llvm: &Path, major: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (objects, profiles) = build_and_run(llvm, dir.path());
    let mapping = Mapping::read(&objects, major).unwrap();
    let profdata = llvm.join("llvm-profdata");
    let mut differing_runs = std::collections::BTreeSet::new();
    // Not sparse: functions that never ran keep their zero records.
    let dense = dir.path().join("dense.profdata");
    run(Command::new(&profdata).args(["merge", "-o"]).arg(&dense).args(&profiles));
    assert_counters_are_llvm_profdatas(&profdata, &[&profiles[..], &[dense]].concat());
    for profile in &profiles {
        let counts = ProfileCounts::from_indexed(&std::fs::read(profile).unwrap()).unwrap();
        let loaded = mapping.load(&counts);
        for ignore in [None, Some("other\\.cc$")] {
            let theirs = mapping::without_summaries(&llvm_cov(llvm, &["-format=lcov"], profile, &objects, ignore));
            let ours = loaded.lcov(&|f| ignore.is_none_or(|r| !regex::Regex::new(r).unwrap().is_match(f)));
            assert!(theirs.contains("BRDA:") && theirs.contains("FNDA:"), "{theirs}");
            assert_eq!(ours, theirs, "{} with ignore {ignore:?}", profile.display());
            let keep = |f: &str| ignore.is_none_or(|r| !regex::Regex::new(r).unwrap().is_match(f));
            let mut model = parse_lcov(&ours, "ours").unwrap();
            assert_eq!(loaded.model(&keep), model, "the model without the text");
            let mut totals = Tallies::default();
            for file in model.files.values() {
                totals += file.tallies();
            }
            model.retain_covered();
            let (covered, lines, functions) = loaded.taken(&keep);
            assert_eq!(covered, Covered::of(&model).unwrap(), "what a trial keeps");
            assert_eq!((lines, functions), (totals.lines, totals.functions), "a trial's totals");
            differing_runs.insert(ours);
            let summary: serde_json::Value =
                serde_json::from_str(&llvm_cov(llvm, &["-summary-only"], profile, &objects, ignore)).unwrap();
            let regions = &summary["data"][0]["totals"]["regions"];
            let keep = |f: &str| ignore.is_none_or(|r| !regex::Regex::new(r).unwrap().is_match(f));
            assert_eq!(
                loaded.regions(&keep),
                (regions["covered"].as_u64().unwrap(), regions["count"].as_u64().unwrap()),
                "{}",
                profile.display()
            );
        }
    }
    assert_eq!(differing_runs.len(), 2 * profiles.len(), "each run covers something else");
}

/// Each profile's counters read in process equal `llvm-profdata merge -text`'s.
fn assert_counters_are_llvm_profdatas(llvm_profdata: &Path, profiles: &[PathBuf]) {
    for profile in profiles {
        let theirs = ProfileCounts::read(llvm_profdata, profile).unwrap();
        let ours = ProfileCounts::from_indexed(&std::fs::read(profile).unwrap()).unwrap();
        assert_eq!(theirs.difference(&ours), None, "{}", profile.display());
        assert_eq!(theirs, ours, "{}", profile.display());
    }
}

/// The text profiles of tests/fixtures/profdata (bitmap bytes, value
/// profiles, two hashes of a name, context-sensitive records) written as
/// indexed profiles by `llvm`'s llvm-profdata, dense and sparse, read in
/// process as that llvm-profdata reads them.
fn crafted_profiles_read_as_llvm_profdata_does(llvm: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/profdata");
    let profdata = llvm.join("llvm-profdata");
    let mut profiles = Vec::new();
    for name in ["fe", "cs"] {
        for sparse in [false, true] {
            let out = dir.path().join(format!("{name}-{sparse}.profdata"));
            let mut cmd = Command::new(&profdata);
            cmd.arg("merge")
                .args(sparse.then_some("-sparse"))
                .arg("-o")
                .arg(&out)
                .arg(src.join(format!("{name}.proftext")));
            run(&mut cmd);
            profiles.push(out);
        }
    }
    assert_counters_are_llvm_profdatas(&profdata, &profiles);
}

#[test]
fn crafted_profiles_read_in_process_as_llvm_profdata_19_reads_them() {
    crafted_profiles_read_as_llvm_profdata_does(Path::new("/usr/lib/llvm-19/bin"));
}

#[test]
fn crafted_profiles_read_in_process_as_llvm_profdata_22_reads_them() {
    crafted_profiles_read_as_llvm_profdata_does(Path::new("/usr/lib/llvm-22/bin"));
}

#[test]
fn the_reader_gives_llvm_cov_22s_lcov_for_every_profile() {
    reader_equals_llvm_cov(Path::new("/usr/lib/llvm-22/bin"), 22);
}

#[test]
fn the_reader_gives_llvm_cov_19s_lcov_for_every_profile() {
    reader_equals_llvm_cov(Path::new("/usr/lib/llvm-19/bin"), 19);
}
