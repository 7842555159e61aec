//! One record per source file (issue #42, item 4), through the real harness: the fixture's
//! build also installs a copy of ccl's sources into the build folder, as NCCL's make installs
//! its headers, changes one file of the copy (`ring.cc`, a blank line added), and builds a
//! second libccl from the copy, which the report reads beside the first; the tuner plugin
//! is built with a generated source (`ballast.cc`) in its build folder. Every file of the
//! copy whose bytes are ccl's is reported as ccl's file, one record whose counts are the
//! source's (both copies' records read the same counters, so a sum would show each count
//! twice); the changed `ring.cc` stays apart, said, and it and the generated file are named
//! relative to the build, with no path under `target/` in any name.

mod support;

use ccl_coverage::coverage::lcov::parse_lcov;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{harness, only, root, setup};

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_copy_of_a_source_file_under_the_build_is_that_file_and_the_rest_is_named_by_the_build() {
    let limit = Duration::from_secs(900);
    let s = setup(|v| {
        only(v, "AllReduce", &["1K"], json!([{"name": "ring", "env": {"CCL_ALGO": "ring"}}]));
        let flags = ["-DCMAKE_BUILD_TYPE=Debug", "-DCMAKE_CXX_COMPILER={cxx}", "-DCMAKE_CXX_FLAGS={coverage_flags}"];
        let mut configure = vec!["cmake", "-S", "{build_dir}/ccl-installed", "-B", "{build_dir}/ccl-copy"];
        configure.extend(flags);
        let copy = json!([
            {"name": "install ccl", "argv": ["cmake", "-E", "copy_directory", "{library_src}/ccl", "{build_dir}/ccl-installed"]},
            {"name": "change the copy's ring.cc", "argv": ["sh", "-c", "printf '\\n' >> \"$1\"", "sh", "{build_dir}/ccl-installed/src/ring.cc"]},
            {"name": "configure the copy", "argv": configure},
            {"name": "build the copy", "argv": ["cmake", "--build", "{build_dir}/ccl-copy", "--parallel", "{jobs}"]}
        ]);
        let steps = v["library"]["steps"].as_array_mut().unwrap();
        let at = steps.iter().position(|s| s["name"] == "build ccl").unwrap() + 1;
        for (i, step) in copy.as_array().unwrap().iter().enumerate() {
            steps.insert(at + i, step.clone());
        }
        let tuner = steps.iter_mut().find(|s| s["name"] == "configure ccl-tuner").unwrap();
        tuner["argv"].as_array_mut().unwrap().push(json!("-DCCL_TUNER_BALLAST_FUNCTIONS=2"));
        v["library"]["objects"].as_array_mut().unwrap().push(json!("{build_dir}/ccl-copy/libccl.so"));
    });
    let run = harness(&s, "run", &[], limit);
    let text = run.text();
    assert!(run.success, "{text}");
    let build: Value = serde_json::from_str(&read(&s.ws.join("build.json"))).unwrap();
    let build_dir = build["build_dir"].as_str().unwrap().to_string();
    let fixtures = root().join("tests/fixtures").display().to_string();
    let report = s.ws.join("report");

    // summary.json (host and device together): each file once, none by its path in the cache.
    let summary: Value = serde_json::from_str(&read(&report.join("summary.json"))).unwrap();
    let files = summary["data"][0]["files"].as_array().unwrap();
    let names: Vec<&str> = files.iter().map(|f| f["filename"].as_str().unwrap()).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len(), "one entry per file: {names:#?}");
    assert!(names.iter().all(|n| !n.contains(&build_dir) && !n.contains("/builds/")), "{names:#?}");
    for expected in [
        "<build>/ccl-tuner/ballast.cc".to_string(),
        "<build>/ccl-installed/src/ring.cc".to_string(),
        format!("{fixtures}/ccl/src/ring.cc"),
        format!("{fixtures}/ccl/src/all_reduce.cc"),
    ] {
        assert!(unique.contains(expected.as_str()), "{expected} in {names:#?}");
    }
    assert!(
        text.contains(&format!(
            "<build>/ccl-installed/src/ring.cc is kept apart from {fixtures}/ccl/src/ring.cc: their bytes differ"
        )),
        "{text}"
    );

    // coverage.lcov: one record per file; each of ccl's files has the counts of ccl's own
    // object, as llvm-cov reports them from it alone.
    let lcov_text = read(&report.join("coverage.lcov"));
    let records: Vec<&str> = lcov_text.lines().filter_map(|l| l.strip_prefix("SF:")).collect();
    assert_eq!(records.iter().collect::<BTreeSet<_>>().len(), records.len(), "{records:#?}");
    assert!(records.contains(&"<build>/ccl-installed/src/ring.cc") && records.contains(&"ccl/src/ring.cc"));
    let model = parse_lcov(&lcov_text, "coverage.lcov").unwrap();
    let llvm_cov = build["toolchain"]["llvm_cov"]["path"].as_str().unwrap();
    let out = support::output_within(
        {
            let mut cmd = Command::new(llvm_cov);
            cmd.args(["export", "-format=lcov"])
                .arg(format!("-instr-profile={}", report.join("coverage.profdata").display()))
                .arg(format!("{build_dir}/ccl/libccl.so"))
                .arg("-ignore-filename-regex=^/usr/");
            cmd
        },
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let source_only = parse_lcov(&String::from_utf8(out.stdout).unwrap(), "llvm-cov export").unwrap();
    let mut compared = 0;
    for (file, theirs) in &source_only.files {
        let relative = file.strip_prefix(&format!("{fixtures}/")).unwrap();
        let ours = &model.files[relative];
        assert_eq!(ours.tallies().lines, theirs.tallies().lines, "{relative}");
        assert_eq!(ours.tallies().functions, theirs.tallies().functions, "{relative}");
        assert_eq!(ours.tallies().branches, theirs.tallies().branches, "{relative}");
        let lines = |f: &ccl_coverage::coverage::lcov::FileCoverage| f.covered_lines().collect::<Vec<_>>();
        assert_eq!(lines(ours), lines(theirs), "{relative}");
        compared += 1;
    }
    assert!(compared > 10, "{compared} files compared");
    // The counts themselves: a line's count is its source's, not both copies' added.
    let all_reduce = |lcov: &str, file: &str| -> Vec<String> {
        let record = lcov.split("end_of_record").find(|r| r.contains(&format!("SF:{file}\n"))).unwrap();
        record.lines().filter(|l| l.starts_with("DA:")).map(str::to_string).collect()
    };
    let theirs_text = {
        let mut cmd = Command::new(llvm_cov);
        cmd.args(["export", "-format=lcov"])
            .arg(format!("-instr-profile={}", report.join("coverage.profdata").display()))
            .arg(format!("{build_dir}/ccl/libccl.so"));
        String::from_utf8(support::output_within(cmd, Duration::from_secs(120)).stdout).unwrap()
    };
    assert_eq!(
        all_reduce(&lcov_text, "ccl/src/all_reduce.cc"),
        all_reduce(&theirs_text, &format!("{fixtures}/ccl/src/all_reduce.cc"))
    );

    // who-covers knows a file by its build name, and reads it from the build.
    let copy = "<build>/ccl-installed/src/ring.cc";
    let record = lcov_text.split("end_of_record").find(|r| r.contains(&format!("SF:{copy}\n"))).unwrap();
    let (line, count) = record.lines().find_map(|l| l.strip_prefix("DA:")?.split_once(',')).unwrap();
    let who = harness(&s, "who-covers", &[&format!("{copy}:{line}")], Duration::from_secs(60));
    let answer = if count == "0" { "none of the 1 trials" } else { "1 of 1 trials:\nAllReduce::1K::ring" };
    assert!(who.stdout.contains(&format!("{copy}:{line}: covered by {answer}\n")), "{}", who.text());
    let lines = read(&Path::new(&build_dir).join("ccl-installed/src/ring.cc")).lines().count();
    let past = harness(&s, "who-covers", &[&format!("{copy}:{}", lines + 2)], Duration::from_secs(60));
    assert!(past.text().contains(&format!("past the end of the file ({lines} lines)")), "{}", past.text());

    // Cobertura and Codecov's JSON have the same names, once each.
    let cobertura = read(&report.join("cobertura.xml"));
    assert_eq!(cobertura.matches("filename=\"&lt;build&gt;/ccl-installed/src/ring.cc\"").count(), 1, "{cobertura}");
    assert_eq!(cobertura.matches("filename=\"ccl/src/all_reduce.cc\"").count(), 1);
    assert!(!cobertura.contains(&build_dir));
    let codecov: Value = serde_json::from_str(&read(&report.join("codecov.json"))).unwrap();
    assert!(codecov["coverage"]["<build>/ccl-tuner/ballast.cc"].is_object(), "{codecov}");

    // The HTML index names the files as the report does and links each to llvm-cov's page.
    let index = read(&report.join("html/index.html"));
    assert!(index.contains("&lt;build&gt;/ccl-installed/src/ring.cc"), "the build name shown");
    assert!(index.contains(&format!("coverage{build_dir}/ccl-installed/src/ring.cc.html")), "its llvm-cov page");
}
