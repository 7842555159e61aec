//! Per-trial attribution, the minimal equivalent suite, changed-line and
//! lost coverage, end to end: the real harness on a modified copy of the
//! fixture library in a temporary git repository (one changed function that
//! every trial runs, one that none runs), with a threads trial and an Open
//! MPI trial.

mod support;

use ccl_coverage::coverage::lcov::{Lcov, parse_lcov};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{git, harness, only, root, setup};

/// Runs `cmd` to its end, killing it (and failing) past `limit`; its stdout.
fn run_limited(cmd: Command, limit: Duration) -> String {
    let shown = format!("{cmd:?}");
    let out = support::output_within(cmd, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{shown}: {}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Replaces the one line equal to `old` (trimmed) by `new` lines.
fn edit(file: &Path, old: &str, new: &[&str]) {
    let text = fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.trim() == old).unwrap_or_else(|| panic!("{old:?} not in {}", file.display()));
    let mut out: Vec<&str> = lines[..at].to_vec();
    out.extend(new);
    out.extend(&lines[at + 1..]);
    fs::write(file, out.join("\n") + "\n").unwrap();
}

fn line_of(file: &Path, needle: &str) -> u32 {
    let text = fs::read_to_string(file).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in {}", file.display()))
        as u32
        + 1
}

fn covered(lcov: &Lcov) -> BTreeSet<(String, u32)> {
    lcov.files.iter().flat_map(|(f, c)| c.covered_lines().map(move |l| (f.clone(), l))).collect()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

#[test]
fn attribution_minimal_suite_and_changed_lines_on_a_modified_fixture() {
    let limit = Duration::from_secs(900);
    let lib_dir = tempfile::tempdir().unwrap();
    let lib = lib_dir.path().join("lib");
    for part in ["ccl", "ccl-tuner"] {
        support::copy_tree(&root().join("tests/fixtures").join(part), &lib.join(part));
    }
    git(&lib, &["init", "-q"]);
    git(&lib, &["add", "-A"]);
    git(&lib, &["commit", "-q", "-m", "fixture"]);
    // Covered by every trial: alignUp. Covered by none: cclGetErrorString
    // (plus a comment, which holds no code).
    let transport = lib.join("ccl/src/transport.cc");
    let align = line_of(&transport, "size_t alignUp(size_t n)");
    edit(
        &transport,
        "size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }",
        &[
            "size_t alignUp(size_t n) {",
            "  size_t blocks = (n + kAlign - 1) / kAlign;",
            "  return blocks * kAlign;",
            "}",
        ],
    );
    let init = lib.join("ccl/src/init.cc");
    edit(&init, "switch (result) {", &["  // Every result code has a name.", "  switch (result) {"]);
    edit(
        &init,
        "case cclSystemError: return \"unhandled system error\";",
        &["    case cclSystemError: return \"unhandled system error (see errno)\";"],
    );
    let comment = line_of(&init, "// Every result code has a name.");
    let system_error = line_of(&init, "unhandled system error (see errno)");

    let mut s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([
                {"name": "ring", "env": {"CCL_ALGO": "ring"}},
                {"name": "mpi", "launcher": "mpi", "ranks": 3}
            ]),
        );
        v["library"]["source_dir"] = json!(lib.display().to_string());
    });
    let run = harness(&s, "collectives", &[], limit);
    assert!(run.success, "{}", run.text());

    s.env = vec![("CCL_COV_DIFF_BASE".into(), "HEAD".into()), ("CCL_COV_FAIL_UNDER_DIFF".into(), "90".into())];
    let report = harness(&s, "report", &[], limit);
    let text = report.text();
    assert!(!report.success, "4 of 5 changed lines is under 90%:\n{text}");
    assert!(
        text.contains("test report::diff")
            && text.contains("changed-line coverage 80.00% (4/5) is under CCL_COV_FAIL_UNDER_DIFF=90"),
        "{text}"
    );
    for step in ["report::attribution", "report::minimal_suite", "report::snapshot"] {
        assert!(text.contains(&format!("test {step}")), "{text}");
    }
    // The screen's list of the report's files names the changed lines' page.
    assert!(text.contains(&format!("\n  {}\n", s.ws.join("report/diff.md").display())), "{text}");
    assert!(
        text.contains("test report::attribution ... ok") || text.contains("test report::attribution     ... ok"),
        "{text}"
    );

    // The diff report, exactly.
    let report_dir = s.ws.join("report");
    let diff = read_json(&report_dir.join("diff.json"));
    assert_eq!(diff["base"], "HEAD");
    assert_eq!(diff["base_commit"], git(&lib, &["rev-parse", "HEAD"]).trim());
    assert_eq!((diff["instrumented"].as_u64(), diff["covered"].as_u64()), (Some(5), Some(4)), "{diff:#}");
    assert_eq!(
        diff["files"],
        json!([
            {"path": "ccl/src/init.cc", "renamed_from": null, "changed": [[comment, comment], [system_error, system_error]],
             "instrumented": [[system_error, system_error]], "covered": [], "uncovered": [[system_error, system_error]]},
            {"path": "ccl/src/transport.cc", "renamed_from": null, "changed": [[align, align + 3]],
             "instrumented": [[align, align + 3]], "covered": [[align, align + 3]], "uncovered": []}
        ]),
        "{diff:#}"
    );
    let md = fs::read_to_string(report_dir.join("diff.md")).unwrap();
    assert!(md.contains(&format!("| `ccl/src/init.cc` | 1 | 0 | {system_error} |")), "{md}");
    assert!(md.contains("| `ccl/src/transport.cc` | 4 | 4 | none |"), "{md}");

    // Attribution: the tuner is asked only when no algorithm is forced, which
    // in this suite is only the MPI variant's case.
    let tuner_call = line_of(&lib.join("ccl/src/algo.cc"), "comm->tuner.api->getAlgorithm");
    let who = support::command(&s, "who-covers", &[&format!("ccl/src/algo.cc:{tuner_call}")]);
    let started = Instant::now();
    let answer = run_limited(who, Duration::from_secs(30));
    assert!(started.elapsed() < Duration::from_secs(1), "who-covers took {:?}", started.elapsed());
    assert!(
        answer.ends_with(&format!("ccl/src/algo.cc:{tuner_call}: covered by 1 of 2 trials:\nAllReduce::1K::mpi\n")),
        "{answer}"
    );
    let trials = read_json(&report_dir.join("trials.json"));
    assert_eq!(trials.as_array().map(Vec::len), Some(2));
    assert!(trials[0]["unique_lines"].as_u64().unwrap() > 0, "the MPI trial alone covers the tuner: {trials:#}");
    assert!(report_dir.join("attribution/index.html").is_file());
    let summary = fs::read_to_string(report_dir.join("summary.md")).unwrap();
    assert!(summary.contains("| `AllReduce::1K::mpi` |"), "{summary}");

    // The minimal suite: its profiles merged cover exactly the full suite's lines.
    let suite = read_json(&report_dir.join("minimal-suite.json"));
    let build = read_json(&s.ws.join("build.json"));
    let profdata = s.dir.path().join("minimal.profdata");
    let mut merge = Command::new(build["toolchain"]["llvm_profdata"]["path"].as_str().unwrap());
    merge.args(["merge", "-sparse", "-o"]).arg(&profdata);
    for name in suite["trials"].as_array().unwrap() {
        merge.arg(s.ws.join("profiles").join(format!("{}.profdata", name.as_str().unwrap().replace("::", "."))));
    }
    run_limited(merge, Duration::from_secs(60));
    let mut export = Command::new(build["toolchain"]["llvm_cov"]["path"].as_str().unwrap());
    export
        .args(["export", "-format=lcov", "-ignore-filename-regex=^/usr/"])
        .arg(format!("-instr-profile={}", profdata.display()));
    for (i, object) in build["objects"].as_array().unwrap().iter().enumerate() {
        if i > 0 {
            export.arg("-object");
        }
        export.arg(object["path"].as_str().unwrap());
    }
    let minimal = parse_lcov(&run_limited(export, Duration::from_secs(60)), "minimal").unwrap();
    // The report's lcov names files relative to the library's sources (for Codecov).
    let library = std::path::PathBuf::from(build["library_src"].as_str().unwrap());
    let report_lcov = fs::read_to_string(report_dir.join("coverage.lcov")).unwrap();
    assert!(report_lcov.lines().any(|l| l == "SF:ccl/src/init.cc"), "absolute paths in the lcov");
    let absolute: String = report_lcov
        .lines()
        .map(|l| match l.strip_prefix("SF:") {
            Some(f) if !f.starts_with('/') => format!("SF:{}\n", library.join(f).display()),
            _ => format!("{l}\n"),
        })
        .collect();
    let full = parse_lcov(&absolute, "full").unwrap();
    assert!(!covered(&full).is_empty());
    assert_eq!(covered(&minimal), covered(&full), "the minimal suite {suite:#} covers other lines");
    assert_eq!(suite["lines"].as_u64(), Some(covered(&full).len() as u64));
    let branches = |lcov: &Lcov| -> BTreeSet<(String, (u32, String, String))> {
        lcov.files.iter().flat_map(|(f, c)| c.covered_branches().map(move |b| (f.clone(), b.clone()))).collect()
    };
    assert!(!branches(&full).is_empty());
    assert_eq!(branches(&minimal), branches(&full), "the minimal suite {suite:#} takes other branches");
    assert_eq!(suite["branches"].as_u64(), Some(branches(&full).len() as u64));
    assert!(suite["nextest"].as_str().is_some_and(|n| n.contains("-E 'test(=")), "{suite:#}");
    let argv: Vec<&str> = suite["argv"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let manifest = root().join("Cargo.toml").display().to_string();
    assert_eq!(argv[..8], ["cargo", "test", "--manifest-path", &manifest, "--test", "collectives", "--", "--exact"]);
    assert_eq!(suite["env"]["CCL_COV_CONFIG"], s.config.display().to_string(), "{suite:#}");
    assert_eq!(suite["env"]["CCL_COV_WORKSPACE"], s.ws.display().to_string(), "{suite:#}");

    // Lost coverage: a baseline that covered the changed error string.
    let baseline = s.dir.path().join("baseline.lcov");
    let lcov = fs::read_to_string(report_dir.join("coverage.lcov")).unwrap();
    let init_path = init.display().to_string();
    let mut in_init = false;
    let edited: Vec<String> = lcov
        .lines()
        .map(|l| {
            if let Some(f) = l.strip_prefix("SF:") {
                in_init = library.join(f) == init;
            }
            if in_init && l == format!("DA:{system_error},0") { format!("DA:{system_error},7") } else { l.to_string() }
        })
        .collect();
    fs::write(&baseline, edited.join("\n") + "\n").unwrap();
    s.env =
        vec![("CCL_COV_BASELINE".into(), baseline.display().to_string()), ("CCL_COV_FAIL_ON_LOST".into(), "1".into())];
    let out = harness(&s, "report", &["--exact", "report::baseline"], limit);
    let text = out.text();
    assert!(!out.success, "{text}");
    assert!(
        text.contains(&format!("lost baseline coverage: 1 lines the baseline {} covered", baseline.display())),
        "{text}"
    );
    assert!(text.contains(&format!("{init_path}: {system_error}")), "{text}");
    let lost = read_json(&report_dir.join("baseline.json"));
    assert_eq!(lost["lost_baseline_coverage"], json!({ init_path.clone(): [[system_error, system_error]] }));
    assert!(fs::read_to_string(report_dir.join("baseline.md")).unwrap().contains("LBC: lost baseline coverage"));
    // Against an earlier workspace with the same coverage, nothing is lost.
    let earlier = s.dir.path().join("earlier");
    fs::create_dir_all(earlier.join("report")).unwrap();
    fs::copy(report_dir.join("coverage.lcov"), earlier.join("report/coverage.lcov")).unwrap();
    s.env =
        vec![("CCL_COV_BASELINE".into(), earlier.display().to_string()), ("CCL_COV_FAIL_ON_LOST".into(), "1".into())];
    let out = harness(&s, "report", &["--exact", "report::baseline"], limit);
    assert!(out.success, "{}", out.text());
    assert_eq!(read_json(&report_dir.join("baseline.json"))["lost_lines"], 0);

    // The minimal suite's command, run as the file gives it (`env`, then
    // `argv`) from another folder, with none of the caller's settings: a new
    // run in this workspace, of this config, of exactly the chosen trials.
    let before = read_json(&s.ws.join("results/run.json"))["run_id"].clone();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut again = Command::new(argv[0]);
    again.args(&argv[1..]).current_dir(elsewhere.path());
    for (key, _) in std::env::vars() {
        if (key.starts_with("CCL_COV_") && key != "CCL_COV_CGROUP")
            || ["CARGO_MANIFEST_DIR", "NEXTEST_RUN_ID", "GITHUB_STEP_SUMMARY"].contains(&key.as_str())
        {
            again.env_remove(key);
        }
    }
    for (key, value) in suite["env"].as_object().unwrap() {
        again.env(key, value.as_str().unwrap());
    }
    let shown = run_limited(again, Duration::from_secs(300));
    let run = read_json(&s.ws.join("results/run.json"));
    assert_ne!(run["run_id"], before, "the command ran nothing in {}:\n{shown}", s.ws.display());
    assert_eq!(run["config_path"], s.config.display().to_string());
    let ran: BTreeSet<&str> = run["ran"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    let chosen: BTreeSet<&str> = suite["trials"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(ran, chosen, "{shown}");
}

#[test]
fn the_report_lists_the_new_steps() {
    let s = setup(|_| {});
    let out = harness(&s, "report", &["--list"], Duration::from_secs(60));
    for step in ["report::attribution", "report::minimal_suite", "report::diff", "report::baseline"] {
        assert!(out.stdout.contains(&format!("{step}: test")), "{}", out.text());
    }
}

/// The attribution pages as a browser shows them: headless Chromium
/// (installed by `scripts/install-deps`) loads them from the report, and the
/// DOM it builds has llvm-cov's index linking to them, relative file names,
/// one row per line with the count of trials linking to who they are, and a
/// page per trial. A screenshot of the index is kept in the test's folder
/// and must be a real PNG.
#[test]
fn the_attribution_pages_render_in_a_browser() {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|c| which(c))
        .expect("headless Chromium is needed (scripts/install-deps installs it)");
    let s = setup(|v| {
        only(
            v,
            "AllReduce",
            &["1K"],
            json!([{"name": "ring", "ranks": 2}, {"name": "mpi", "launcher": "mpi", "ranks": 2}]),
        );
    });
    let limit = Duration::from_secs(480);
    assert!(harness(&s, "collectives", &[], limit).success);
    let report = harness(&s, "report", &[], limit);
    assert!(report.success, "{}", report.text());
    let dom = |page: &Path| {
        let mut cmd = Command::new(chromium);
        cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(format!("file://{}", page.display()))
            .env("HOME", s.dir.path());
        run_limited(cmd, Duration::from_secs(120))
    };
    let dir = s.ws.join("report");
    let llvm_index = dom(&dir.join("html/index.html"));
    assert!(
        llvm_index.contains("href=\"../attribution/index.html\""),
        "llvm-cov's index does not link the attribution"
    );
    let index = dom(&dir.join("attribution/index.html"));
    assert!(index.contains("href=\"../html/style.css\""), "not styled like llvm-cov's pages");
    assert!(index.contains(">ccl/src/all_reduce.cc</a>"), "file names are not relative: {index}");
    assert!(!index.contains(&root().display().to_string()), "an absolute path is shown: {index}");
    assert!(index.contains("href=\"trial-AllReduce__1K__mpi.html\""), "{index}");
    let page = fs::read_dir(dir.join("attribution"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("all_reduce.cc-")))
        .unwrap();
    let file = dom(&page);
    let source_lines = fs::read_to_string(root().join("tests/fixtures/ccl/src/all_reduce.cc")).unwrap().lines().count();
    assert_eq!(file.matches("<tr id=\"L").count(), source_lines, "one row per line");
    assert!(file.contains("<a href=\"#S"), "the count of trials links to who they are");
    let trial = dom(&dir.join("attribution/trial-AllReduce__1K__mpi.html"));
    assert!(trial.contains("lines covered in"), "{trial}");
    let shot = s.dir.path().join("attribution.png");
    let mut cmd = Command::new(chromium);
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,900"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", dir.join("attribution/index.html").display()))
        .env("HOME", s.dir.path());
    run_limited(cmd, Duration::from_secs(120));
    let png = fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "the screenshot is {} bytes", png.len());
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// Issues #24 and #35: per-trial attribution from the coverage mapping read
/// once and each trial's counters read in process, stored by each trial as it
/// ended, gives exactly what one llvm-cov export per trial gave, on the whole
/// default suite: attribution.json, trials.json, the minimal suite and
/// who-covers, byte for byte; so does a report that finds one trial's stored
/// lines altered and another's gone, and computes them again.
#[test]
fn attribution_from_the_mapping_read_once_equals_llvm_cov_per_trial() {
    let limit = Duration::from_secs(900);
    let mut s = setup(|_| {});
    let run = harness(&s, "collectives", &[], limit);
    assert!(run.success, "{}", run.text());
    let report_dir = s.ws.join("report");
    let files = ["attribution.json", "trials.json", "minimal-suite.json"];
    let attribution_of = |s: &support::Setup| {
        let report = harness(s, "report", &[], limit);
        assert!(report.success, "{}", report.text());
        let mut out: Vec<String> = files.iter().map(|f| fs::read_to_string(report_dir.join(f)).unwrap()).collect();
        // who-covers of the first line of each file the attribution names.
        let attribution = read_json(&report_dir.join("attribution.json"));
        for (file, ranges) in attribution["files"].as_object().unwrap() {
            let line = ranges[0][0].as_u64().unwrap();
            out.push(run_limited(support::command(s, "who-covers", &[&format!("{file}:{line}")]), limit));
        }
        (out, report.stderr)
    };
    // Every trial stored its lines as it ended (issue #35), and the report used them.
    let results = s.ws.join("results");
    for slug in ["AllReduce.1K.ring", "SendRecv.256K.direct"] {
        let record = read_json(&results.join(format!("{slug}.json")));
        assert!(record["merge"]["lines"]["sha256"].is_string(), "{slug} stored no lines: {record:#}");
        assert!(s.ws.join(format!("profiles/{slug}.lines")).is_file());
    }
    let (stored, stderr) = attribution_of(&s);
    assert!(!stderr.contains("runs llvm-cov once per trial"), "the in-process reader was not used:\n{stderr}");
    assert!(!stderr.contains("with llvm-profdata"), "the counters were not read in process:\n{stderr}");
    assert!(!stderr.contains("per-trial attribution computed"), "stored lines were not used:\n{stderr}");
    // One stored file altered, one gone: both computed again and named, the altered one quarantined.
    let altered = s.ws.join("profiles/AllReduce.1K.ring.lines");
    let mut bytes = fs::read(&altered).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    fs::write(&altered, bytes).unwrap();
    fs::remove_file(s.ws.join("profiles/SendRecv.256K.direct.lines")).unwrap();
    let (recomputed, stderr) = attribution_of(&s);
    assert!(stderr.contains("per-trial attribution computed 2 of 42 trials' lines in the report"), "{stderr}");
    assert!(
        stderr.contains("AllReduce::1K::ring (") && stderr.contains("was altered after its trial wrote it"),
        "{stderr}"
    );
    assert!(stderr.contains("SendRecv::256K::direct (") && stderr.contains(".lines is gone"), "{stderr}");
    assert!(s.ws.join("quarantine/AllReduce.1K.ring/AllReduce.1K.ring.lines").is_file(), "{stderr}");
    s.env = vec![("CCL_COV_ATTRIBUTION_EXPORTS".into(), "on".into())];
    let (exports, stderr) = attribution_of(&s);
    assert!(stderr.contains("runs llvm-cov once per trial, as CCL_COV_ATTRIBUTION_EXPORTS=on asks"), "{stderr}");
    assert!(stored.len() > files.len() + 3, "who-covers asked of a few files: {}", stored.len());
    for (way, ours) in [("stored by each trial", &stored), ("partly computed again", &recomputed)] {
        for (i, (a, b)) in ours.iter().zip(&exports).enumerate() {
            assert!(a == b, "{} differs:\n{way}: {a}\nllvm-cov per trial: {b}", files.get(i).unwrap_or(&"who-covers"));
        }
    }
    let trials = read_json(&report_dir.join("trials.json"));
    assert_eq!(trials.as_array().map(Vec::len), Some(42), "the whole default suite");
}
