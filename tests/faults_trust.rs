//! The trust side of the fault matrix (issue #40): shards and records are
//! data, never configuration; a run's tally is what the run saw; no write
//! through a hard link; output that parses. Each case runs the real
//! `ccl-coverage` binary on the real fixture, plays the hostile or careless
//! part by hand (a shard edited, a trial that rewrites what it should not),
//! and checks the message and that nothing it should not touch changed.

mod support;

use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{Setup, harness, only, result, setup};

/// The harness is killed past this: every case here ends in seconds.
const LIMIT: Duration = Duration::from_secs(300);

/// One trial of one rank: fast, and never short of rank slots.
fn one_trial() -> Setup {
    setup(|v| only(v, "AllReduce", &["1K"], json!([{"name": "t", "ranks": 1}])))
}

/// The same config as `s`, with the workspace `ws`.
fn at(s: &Setup, ws: PathBuf) -> Setup {
    Setup { dir: tempfile::tempdir().unwrap(), config: s.config.clone(), ws, env: s.env.clone() }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn write_json(path: &Path, v: &Value) {
    fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// An executable shell script at `path`.
fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A program that notes each call in `log`, then runs `real`: what a hostile
/// shard or trial would name as the report's tools.
fn logging_wrapper(dir: &Path, name: &str, real: &str, log: &Path) -> PathBuf {
    let path = dir.join(name);
    script(&path, &format!("echo \"$0 $*\" >> '{}'\nexec '{real}' \"$@\"", log.display()));
    path
}

/// A workspace in which the one trial ran and passed.
fn ran_once() -> Setup {
    let s = one_trial();
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    s
}

/// `build.json` of `ws` with its llvm-profdata and llvm-cov pointed at
/// logging wrappers; the real tools' paths.
fn plant_tool_wrappers(ws: &Path, dir: &Path, log: &Path) -> (String, String) {
    let manifest = ws.join("build.json");
    let mut build = read_json(&manifest);
    let real = |tool: &str| build["toolchain"][tool]["path"].as_str().unwrap().to_string();
    let (profdata, cov) = (real("llvm_profdata"), real("llvm_cov"));
    build["toolchain"]["llvm_profdata"]["path"] =
        json!(logging_wrapper(dir, "llvm-profdata", &profdata, log).display().to_string());
    build["toolchain"]["llvm_cov"]["path"] = json!(logging_wrapper(dir, "llvm-cov", &cov, log).display().to_string());
    build["toolchain"]["llvm_bin"] = json!(dir.display().to_string());
    write_json(&manifest, &build);
    (profdata, cov)
}

// ---- item 1: a shard (or a trial) never chooses the programs the report runs

/// A shard whose `build.json` names wrappers as the LLVM tools: the merged
/// report runs the tools it resolves itself; the wrappers never run (they
/// ran 6 times, exit 0, no warning).
#[test]
fn a_shard_s_build_json_never_chooses_the_report_s_programs() {
    let s = ran_once();
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("calls.log");
    plant_tool_wrappers(&s.ws, tools.path(), &log);
    let merged = at(&s, s.dir.path().join("merged"));
    let ran = harness(&merged, "report", &["--merge-from", &s.ws.display().to_string()], LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert!(!log.exists(), "a program the shard named ran: {}", fs::read_to_string(&log).unwrap_or_default());
    let build = read_json(&merged.ws.join("build.json"));
    assert!(!build.to_string().contains(&tools.path().display().to_string()), "the shard's build.json was copied");
}

/// A trial that rewrites its workspace's `build.json` to name wrappers:
/// the report never runs them (the wrapper ran 4 times).
#[test]
fn a_rewritten_build_json_never_chooses_the_report_s_programs() {
    let s = ran_once();
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("calls.log");
    plant_tool_wrappers(&s.ws, tools.path(), &log);
    let ran = harness(&s, "report", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert!(!log.exists(), "a program build.json named ran: {}", fs::read_to_string(&log).unwrap_or_default());
}

/// `LLVM_COV`, which docs/environment.md says overrides the tool, is the
/// llvm-cov the report takes (it was silently ignored) and checks against the
/// build's: a logging wrapper around the real one is another program (its
/// SHA-256 is not the build's), so it is named and refused, and nothing is
/// exported with it. Whether the build recorded a checksum does not matter to
/// the first half: an older `build.json` without one is checked by version.
#[test]
fn llvm_cov_from_the_environment_is_the_one_the_report_takes_and_checks() {
    let mut s = ran_once();
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("calls.log");
    let build = read_json(&s.ws.join("build.json"));
    let real = build["toolchain"]["llvm_cov"]["path"].as_str().unwrap().to_string();
    let wrapper = logging_wrapper(tools.path(), "logged-llvm-cov", &real, &log);
    s.env.push(("LLVM_COV".into(), wrapper.display().to_string()));
    let ran = harness(&s, "report", &[], LIMIT);
    let text = ran.text();
    let calls = fs::read_to_string(&log).unwrap_or_default();
    if build["toolchain"]["llvm_cov"]["sha256"].is_string() {
        assert!(!ran.success, "{text}");
        assert!(text.contains(&format!("the report's llvm-cov is {}", wrapper.display())), "{text}");
        assert!(!calls.contains(" export ") && !calls.contains(" report "), "it exported with it: {calls}");
    } else {
        assert!(calls.contains(" export ") || calls.contains(" report "), "LLVM_COV was not used: {calls}\n{text}");
    }
}

/// An `LLVM_COV` of another release than the build's: refused, naming both
/// versions and the variable, before anything is merged.
#[test]
fn an_llvm_cov_of_another_version_than_the_build_s_is_refused() {
    let mut s = ran_once();
    let tools = tempfile::tempdir().unwrap();
    let build = read_json(&s.ws.join("build.json"));
    let major = build["toolchain"]["llvm_cov"]["major"].as_u64().unwrap();
    let other = tools.path().join("llvm-cov");
    script(&other, &format!("echo 'LLVM (http://llvm.org/):'\necho '  LLVM version {major}.0.0-other'"));
    s.env.push(("LLVM_COV".into(), other.display().to_string()));
    let ran = harness(&s, "report", &[], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(text.contains("the report's llvm-cov is") && text.contains("not the one build.json records"), "{text}");
    assert!(text.contains(&format!("LLVM version {major}.0.0-other")) && text.contains("LLVM_COV"), "{text}");
    assert!(!s.ws.join("report/summary.json").exists(), "a report was made with it");
}

/// A build whose recorded llvm-profdata checksum is not the resolved tool's
/// (another program of the same version): refused, naming both checksums.
#[test]
fn an_llvm_profdata_whose_checksum_is_not_the_build_s_is_refused() {
    let s = ran_once();
    let manifest = s.ws.join("build.json");
    let mut build = read_json(&manifest);
    build["toolchain"]["llvm_profdata"]["sha256"] = json!("0".repeat(64));
    write_json(&manifest, &build);
    let ran = harness(&s, "report", &[], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(
        text.contains("the report's llvm-profdata is") && text.contains(&format!("the build's was {}", "0".repeat(64))),
        "{text}"
    );
}

// ---- item 2: a name from a record or shard is one plain path component

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The shard's record of its one trial made to name `name` (relative to
/// its profile folder) as a raw profile, with the checksum of what is there.
fn record_naming(shard: &Path, name: &str) {
    let record = shard.join("results/AllReduce.1K.t.json");
    let mut r = read_json(&record);
    let target = shard.join("profiles/AllReduce.1K.t").join(name);
    let bytes = fs::read(&target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    r["merge"] = Value::Null;
    r["raw_sha256"] = json!({ name: sha256_hex(&bytes) });
    write_json(&record, &r);
    fs::create_dir_all(shard.join("profiles/AllReduce.1K.t")).unwrap();
}

/// Merges the shard `from` into a new workspace; the run and the workspace.
fn merge_into_new(s: &Setup, from: &Path) -> (support::Ran, Setup) {
    let merged = at(s, s.dir.path().join("merged"));
    let ran = harness(&merged, "report", &["--merge-from", &from.display().to_string()], LIMIT);
    (ran, merged)
}

/// A shard record whose raw profile is named `../../build.json`: refused
/// and named, in the output and `shards.json`; the target's build record
/// kept (it was replaced by the shard's).
#[test]
fn a_shard_profile_name_leading_to_build_json_is_refused_and_named() {
    let s = ran_once();
    let shard = s.dir.path().join("shard");
    support::copy_tree(&s.ws, &shard);
    let mut build = read_json(&shard.join("build.json"));
    build["config"] = json!("planted");
    write_json(&shard.join("build.json"), &build);
    record_naming(&shard, "../../build.json");
    let (ran, merged) = merge_into_new(&s, &shard);
    let text = ran.text();
    assert!(text.contains("names a raw profile \"../../build.json\", which is not one plain file name"), "{text}");
    assert_ne!(read_json(&merged.ws.join("build.json"))["config"], "planted", "the shard's file replaced build.json");
    let record = read_json(&merged.ws.join("shards.json"));
    assert!(record["refused"].to_string().contains("../../build.json"), "{record}");
}

/// A shard record whose raw profile is the workspace's marker, with
/// `created_root` flipped: refused and named; the target's marker kept, so
/// `clean` still leaves the folder the user made.
#[test]
fn a_shard_profile_name_leading_to_the_marker_is_refused_and_the_marker_never_copied() {
    let s = ran_once();
    let shard = s.dir.path().join("shard");
    support::copy_tree(&s.ws, &shard);
    let marker = shard.join(".ccl-coverage-workspace");
    let mut m = read_json(&marker);
    m["created_root"] = json!(true);
    write_json(&marker, &m);
    record_naming(&shard, "../../.ccl-coverage-workspace");
    // A folder the user made: the harness adopts it, and `clean` must keep it.
    let merged = at(&s, s.dir.path().join("mine"));
    fs::create_dir(&merged.ws).unwrap();
    let ran = harness(&merged, "report", &["--merge-from", &shard.display().to_string()], LIMIT);
    let text = ran.text();
    assert!(text.contains("names a raw profile \"../../.ccl-coverage-workspace\""), "{text}");
    let kept = read_json(&merged.ws.join(".ccl-coverage-workspace"));
    assert_eq!(kept["created_root"], json!(false), "the shard's marker was copied: {kept}");
    let cleaned = harness(&merged, "clean", &[], LIMIT);
    assert!(cleaned.success, "{}", cleaned.text());
    assert!(merged.ws.is_dir(), "clean deleted a folder the user made");
}

// ---- item 4: the tally is what the run saw

/// A setup whose `AllReduce::1K` variants (`name`, shell lines run before
/// the real perf binary) each run a wrapper script; `$WS` is the workspace.
fn wrapped(variants: &[(&str, &str)]) -> Setup {
    let s = setup(|v| {
        let list: Vec<Value> = variants
            .iter()
            .map(|(name, _)| {
                json!({"name": name, "ranks": 1,
                       "env": {"REAL_BINARY": "{bin_dir}/all_reduce_perf", "CCL_WRAPPED": name}})
            })
            .collect();
        only(v, "AllReduce", &["1K"], Value::Array(list));
    });
    let wrapper = s.dir.path().join("wrapper.sh");
    let mut body =
        String::from("WS=$(dirname \"$(dirname \"$(dirname \"$LLVM_PROFILE_FILE\")\")\")\ncase \"$CCL_WRAPPED\" in\n");
    for (name, before) in variants {
        body += &format!("{name}) {before}\n;;\n");
    }
    body += "esac\nexec \"$REAL_BINARY\" \"$@\"";
    script(&wrapper, &body);
    let mut v = read_json(&s.config);
    v["collectives"][0]["binary"] = json!(wrapper.display().to_string());
    write_json(&s.config, &v);
    s
}

/// A trial that rewrites another trial's record from FAILED to PASSED: the
/// run still fails, `junit.xml` and `run.json` say what the run saw (they
/// said 0 failures), and the rewritten record is named.
#[test]
fn a_record_rewritten_by_another_trial_does_not_change_the_run_s_tally() {
    let s = wrapped(&[
        ("a_fails", "exit 3"),
        (
            "b_liar",
            "sed -i 's/\"status\": \"FAILED\"/\"status\": \"PASSED\"/' \"$WS/results/AllReduce.1K.a_fails.json\"",
        ),
    ]);
    let ran = harness(&s, "run", &["--no-report", "--test-threads", "1"], LIMIT);
    let text = ran.text();
    let liar_wrote = read_json(&s.ws.join("results/AllReduce.1K.a_fails.json"));
    assert_eq!(liar_wrote["status"], "PASSED", "the liar did not rewrite it: {text}");
    assert!(!ran.success, "{text}");
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("failures=\"1\""), "{junit}");
    let run = read_json(&s.ws.join("results/run.json"));
    assert_eq!(run["summary"]["failed"], 1, "{run}");
    assert!(
        text.contains("AllReduce.1K.a_fails.json says PASSED, but this run saw AllReduce::1K::a_fails FAILED"),
        "{text}"
    );
    assert!(text.contains("2 trials ran: 1 passed, 1 failed"), "{text}");
}

/// A run whose records cannot be written (`results/` replaced by a link):
/// it fails, says so, and its last line is its own tally (it was the
/// earlier run's, `1 passed, 0 failed`).
#[test]
fn a_run_whose_records_could_not_be_written_fails_and_says_so() {
    let s = one_trial();
    assert!(harness(&s, "run", &["--no-report"], LIMIT).success);
    let elsewhere = s.dir.path().join("elsewhere");
    fs::rename(s.ws.join("results"), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, s.ws.join("results")).unwrap();
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(!text.contains("1 passed, 0 failed"), "the earlier run's tally: {text}");
    // Its build could not be recorded in the workspace: the trial did not run.
    assert!(text.contains("0 of 1 trials ran: 0 passed, 0 failed, 0 timed out; 1 not run"), "{text}");
    assert!(text.contains("results/run.json is not this run's: it could not be written"), "{text}");
}

/// A trial that replaces its own `profiles/<trial>` with a link (issue #40,
/// item 8): its verdict names the folder and why it cannot be read (it said
/// `wrote no coverage profile … is the instrumented library the one loaded?`,
/// and the link was named only later, by every report step).
#[test]
fn a_trial_that_links_its_own_profile_folder_is_told_so_in_its_verdict() {
    let s = wrapped(&[(
        "linker",
        "d=$(dirname \"$LLVM_PROFILE_FILE\"); mv \"$d\" \"$d.moved\"; ln -s \"$d.moved\" \"$d\"",
    )]);
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    assert!(fs::symlink_metadata(s.ws.join("profiles/AllReduce.1K.linker")).unwrap().is_symlink(), "{text}");
    assert!(
        text.contains("coverage lost: its profile folder")
            && text.contains("profiles/AllReduce.1K.linker cannot be read"),
        "{text}"
    );
    assert!(!text.contains("wrote no coverage profile"), "{text}");
}

// ---- item 5: a profile another process put in a trial's folder is foreign

/// Shell lines that wait, at most 60 s, until the file `$WS/../<flag>` exists.
fn wait_for(flag: &str) -> String {
    format!("i=0; while [ ! -e \"$WS/../{flag}\" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done")
}

/// Issue #40's attack: while `victim` runs, a trial beside it writes real
/// profiles of `broadcast_perf` (which the victim never runs) into the
/// victim's profile folder: once under its own trial's `LLVM_PROFILE_FILE`
/// name, once under a name of its choosing. The victim merges only its own
/// (it was credited with `broadcast.cc`): the four files (two processes, two
/// instrumented modules each) move to `quarantine/<victim>/`, are named on
/// screen, in the victim's record and by the report's health.
#[test]
fn profiles_another_trial_writes_into_a_trial_s_folder_are_foreign() {
    let attack = |name: &str| {
        format!(
            "LLVM_PROFILE_FILE=\"$WS/profiles/AllReduce.1K.victim/{name}\" \"$(dirname \"$REAL_BINARY\")/broadcast_perf\" \"$@\" >/dev/null"
        )
    };
    let victim = format!("touch \"$WS/../victim-runs\"; {}", wait_for("attacked"));
    let attacker = format!(
        "{}; {}; {}; touch \"$WS/../attacked\"",
        wait_for("victim-runs"),
        attack("$(basename \"$LLVM_PROFILE_FILE\")"),
        attack("%h-%p-%m.profraw")
    );
    let s = wrapped(&[("victim", &victim), ("attacker", &attacker)]);
    let ran = harness(&s, "run", &["--test-threads", "2"], LIMIT);
    let text = ran.text();
    assert!(s.dir.path().join("attacked").exists(), "the attack did not run: {text}");
    let victim = result(&s, "AllReduce.1K.victim");
    assert_eq!(victim["status"], "PASSED", "{text}");
    let foreign = victim["foreign"].as_array().cloned().unwrap_or_default();
    assert_eq!(foreign.len(), 4, "{victim}\n{text}");
    for f in &foreign {
        let file = PathBuf::from(f["file"].as_str().unwrap());
        assert!(file.starts_with(s.ws.join("quarantine/AllReduce.1K.victim")) && file.is_file(), "{f}");
        assert!(f["reason"].as_str().unwrap().contains("does not carry this attempt's mark"), "{f}");
    }
    assert_eq!(victim["merge"]["merged"], 2, "only its own process's two profiles: {victim}");
    assert!(text.contains("AllReduce::1K::victim: 4 profile(s) in its folder are not its own"), "{text}");
    assert!(text.contains("does not carry this attempt's mark"), "the report's health names them: {text}");
}

/// A short-lived instrumented child of the trial (it ends within
/// milliseconds, so the supervisor's sampling misses it): its profile
/// carries the trial's mark and is merged, never quarantined, though no
/// record of the trial's processes names its pid.
#[test]
fn a_short_lived_child_s_profile_is_the_trial_s_own() {
    let s = wrapped(&[("child", "\"$REAL_BINARY\" -h >/dev/null")]);
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    let r = result(&s, "AllReduce.1K.child");
    assert!(r["foreign"].as_array().is_none_or(Vec::is_empty), "{r}");
    assert!(
        !s.ws.join("quarantine/AllReduce.1K.child").exists() || files(&s.ws.join("quarantine/AllReduce.1K.child")) == 0
    );
    // The main process's two modules, and the child's library (it loads no plugin).
    assert_eq!(r["merge"]["merged"], 3, "{r}");
}

fn files(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, Iterator::count)
}

// ---- item 8: a trial's working folder is its own

/// Trials that create files in their current directory (issue #40's made
/// 200,000 there, in the shared build cache `ccl-tests/`, which every
/// workspace reuses): the files land in the trial's own `work/<trial>/` of
/// the workspace, never in the cache; a passed trial's folder is deleted, a
/// failed one's kept for whoever looks into the failure, and `clean`
/// removes `work/`.
#[test]
fn what_a_trial_writes_in_its_current_directory_stays_out_of_the_build_cache() {
    let s = wrapped(&[
        ("litter", "for i in 1 2 3; do echo x > \"left-behind-$i\"; done"),
        ("fails", "echo x > left-behind-f; exit 3"),
    ]);
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    let r = result(&s, "AllReduce.1K.litter");
    assert_eq!(r["status"], "PASSED", "{text}");
    assert_eq!(r["cwd"], json!(s.ws.join("work/AllReduce.1K.litter")), "{r}");
    let real = r["env"].as_array().unwrap().iter().find(|kv| kv[0] == "REAL_BINARY").unwrap()[1].clone();
    let bin_dir = PathBuf::from(real.as_str().unwrap()).parent().unwrap().to_path_buf();
    for name in ["left-behind-1", "left-behind-f"] {
        assert!(!bin_dir.join(name).exists(), "a trial left {name} in the build cache {}", bin_dir.display());
    }
    assert!(!s.ws.join("work/AllReduce.1K.litter").exists(), "a passed trial's working folder stayed");
    assert!(s.ws.join("work/AllReduce.1K.fails/left-behind-f").is_file(), "a failed trial's working folder went");
    let cleaned = harness(&s, "clean", &[], LIMIT);
    assert!(cleaned.success, "{}", cleaned.text());
    assert!(!s.ws.join("work").exists(), "clean left work/");
}

// ---- item 6: never a write in place into a file the harness did not just make

/// After a first run, the workspace's `rel` is replaced by a hard link to a
/// file outside the workspace; a second run must leave that file as it was
/// (with `logs/<trial>.log` it was truncated and the log written into it).
fn a_hard_link_is_never_written_through(rel: &str) {
    let s = one_trial();
    assert!(harness(&s, "collectives", &[], LIMIT).success);
    let first_run = result(&s, "AllReduce.1K.t")["run_id"].clone();
    let outside = s.dir.path().join("precious.txt");
    fs::write(&outside, "precious").unwrap();
    let planted = s.ws.join(rel);
    fs::remove_file(&planted).unwrap();
    fs::hard_link(&outside, &planted).unwrap();
    let ran = harness(&s, "collectives", &[], LIMIT);
    assert_eq!(fs::read_to_string(&outside).unwrap(), "precious", "{rel} was written through: {}", ran.text());
    // And the run did its work: a verdict, a record of this run, a new file in the link's place.
    assert!(ran.success, "{}", ran.text());
    let record = result(&s, "AllReduce.1K.t");
    assert_eq!(record["status"], "PASSED", "{record}");
    assert_ne!(record["run_id"], first_run, "the record is the first run's: {record}");
    let (new, kept) = (fs::metadata(&planted).unwrap(), fs::metadata(&outside).unwrap());
    assert!(new.is_file() && new.ino() != kept.ino() && kept.nlink() == 1, "{rel} is still the link");
    let text = fs::read_to_string(&planted).unwrap();
    let written = match rel.rsplit('.').next() {
        Some("log") => text.contains("AllReduce"),
        Some("xml") => text.contains("<testcase") && text.contains("failures=\"0\""),
        _ => text.contains(record["run_id"].as_str().unwrap()),
    };
    assert!(written, "{rel} holds no output of this run:\n{text}");
}

#[test]
fn a_hard_linked_trial_log_is_not_written_through() {
    a_hard_link_is_never_written_through("logs/AllReduce.1K.t.log");
}

#[test]
fn a_hard_linked_trial_record_is_not_written_through() {
    a_hard_link_is_never_written_through("results/AllReduce.1K.t.json");
}

#[test]
fn a_hard_linked_run_json_is_not_written_through() {
    a_hard_link_is_never_written_through("results/run.json");
}

#[test]
fn a_hard_linked_junit_xml_is_not_written_through() {
    a_hard_link_is_never_written_through("results/junit.xml");
}

// ---- item 3: every refusal named

/// A shard record for a trial the config does not plan: named in the
/// output and `shards.json`'s `refused` (it was dropped without a word).
#[test]
fn a_shard_record_of_an_unplanned_trial_is_named() {
    let s = ran_once();
    let shard = s.dir.path().join("shard");
    support::copy_tree(&s.ws, &shard);
    let mut r = read_json(&shard.join("results/AllReduce.1K.t.json"));
    r["trial"] = json!("Bogus::1K::ring");
    r["slug"] = json!("Bogus.1K.ring");
    write_json(&shard.join("results/Bogus.1K.ring.json"), &r);
    let (ran, merged) = merge_into_new(&s, &shard);
    let text = ran.text();
    assert!(
        text.contains("not merged: ") && text.contains("it is a record of trial Bogus::1K::ring, which config"),
        "{text}"
    );
    let record = read_json(&merged.ws.join("shards.json"));
    assert!(record["refused"].to_string().contains("Bogus::1K::ring"), "{record}");
}

/// A shard record of another build: named in the output and `shards.json`
/// (the plain report names such records; the merge dropped them silently).
#[test]
fn a_shard_record_of_another_build_is_named() {
    let s = ran_once();
    let shard = s.dir.path().join("shard");
    support::copy_tree(&s.ws, &shard);
    let path = shard.join("results/AllReduce.1K.t.json");
    let mut r = read_json(&path);
    r["build_id"] = json!("0123456789abcdef");
    write_json(&path, &r);
    let (ran, merged) = merge_into_new(&s, &shard);
    let text = ran.text();
    assert!(text.contains("it is a record of build 0123456789abcdef, not of "), "{text}");
    let record = read_json(&merged.ws.join("shards.json"));
    assert!(record["refused"].to_string().contains("0123456789abcdef"), "{record}");
}

// ---- item 8: smaller

/// `--config` naming a FIFO: `list` says so at once, never hangs (it hung
/// forever in `open`).
#[test]
fn a_fifo_given_as_the_config_is_refused_without_hanging() {
    let s = one_trial();
    let fifo = s.dir.path().join("config.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let mut cmd = support::command(&s, "list", &[]);
    cmd.env("CCL_COV_CONFIG", &fifo);
    let out = support::output_within(cmd, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("it is a FIFO, not a regular file"), "{text}");
}

// ---- issue #48, item 1: every trial this run selected has a verdict, whatever fails

/// What a trial (or anyone) can leave where the harness makes a trial's folders.
#[derive(Clone, Copy, Debug)]
enum Planted {
    Fifo,
    Link,
    File,
}

fn plant(at: &Path, what: Planted, dir: &Path) {
    let _ = fs::remove_dir_all(at);
    let _ = fs::remove_file(at);
    match what {
        Planted::Fifo => {
            let made = std::process::Command::new("mkfifo").arg(at).status().unwrap();
            assert!(made.success());
        }
        Planted::Link => {
            let target = dir.join("link-target");
            fs::create_dir_all(&target).unwrap();
            fs::write(target.join("keep"), "not the harness's").unwrap();
            std::os::unix::fs::symlink(&target, at).unwrap();
        }
        Planted::File => fs::write(at, "not a folder").unwrap(),
    }
}

/// A link, FIFO or plain file where a trial's folders go, after a run in
/// which the trial passed: the trial is recorded as not run with the cause
/// (the earlier `PASSED` record stayed, and `run.json`, `junit.xml` and
/// `summary.md` said 0 failed), and the last line names the cause (it
/// blamed `run.json`). Whatever the link points to is untouched.
#[test]
fn a_trial_whose_folders_cannot_be_prepared_is_recorded_with_the_cause() {
    let cases = [
        ("work/AllReduce.1K.b", Planted::Fifo),
        ("work", Planted::File),
        ("profiles/AllReduce.1K.b", Planted::Link),
        ("quarantine/AllReduce.1K.b", Planted::File),
        ("cases/AllReduce.1K.b", Planted::Link),
    ];
    for (i, (place, what)) in cases.into_iter().enumerate() {
        let s = wrapped(&[("a", ""), ("b", "")]);
        let first = harness(&s, "collectives", &[], LIMIT);
        assert!(first.success, "{}", first.text());
        let at = s.ws.join(place);
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        plant(&at, what, s.dir.path());
        // The report once (it is the slow part): summary.md must say it too.
        let args: &[&str] = if i == 0 { &["--test-threads", "1"] } else { &["--no-report", "--test-threads", "1"] };
        let ran = harness(&s, "run", args, LIMIT);
        let text = ran.text();
        let case = format!("{place} as {what:?}: {text}");
        assert!(!ran.success, "{case}");
        // `work` itself stops both trials.
        let both = place == "work";
        let run = read_json(&s.ws.join("results/run.json"));
        let (failed, passed) = if both { (2, 0) } else { (1, 1) };
        assert_eq!((&run["summary"]["failed"], &run["summary"]["passed"]), (&json!(failed), &json!(passed)), "{case}");
        assert_eq!(run["ran"], json!(["AllReduce::1K::a", "AllReduce::1K::b"]), "{case}\n{run}");
        let record = read_json(&s.ws.join("results/AllReduce.1K.b.json"));
        assert_eq!(record["status"], "FAILED", "{case}");
        assert_eq!(record["run_id"], run["run_id"], "the earlier run's record: {case}");
        let reason = record["reason"].as_str().unwrap();
        assert!(reason.starts_with("not run: ") && reason.contains(place), "{reason}: {case}");
        let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
        assert!(junit.contains(&format!("failures=\"{failed}\"")), "{case}\n{junit}");
        if i == 0 {
            let md = fs::read_to_string(s.ws.join("report/summary.md")).unwrap_or_else(|e| panic!("{e}: {case}"));
            assert!(md.contains("Trials: 1 passed, 1 failed"), "{case}\n{md}");
        }
        let last = text.lines().rfind(|l| l.contains("trials ran")).unwrap_or_default();
        let tally = if both {
            "0 of 2 trials ran: 0 passed, 0 failed, 0 timed out; 2 not run: AllReduce::1K::a: "
        } else {
            "1 of 2 trials ran: 1 passed, 0 failed, 0 timed out; 1 not run: AllReduce::1K::b: "
        };
        assert!(last.contains(tally), "{case}");
        assert!(last.contains(place), "the last line does not name the cause: {case}");
        assert!(!text.contains("run.json is not this run's"), "{case}");
        if let Planted::Link = what {
            let kept = s.dir.path().join("link-target/keep");
            assert_eq!(fs::read_to_string(kept).unwrap(), "not the harness's", "{case}");
        }
    }
}

/// A trial whose record cannot be written (`results/<trial>.json` is a
/// folder) on a workspace with no earlier record: `run.json` and
/// `junit.xml` still list it as the run saw it (it was missing from both),
/// and the run fails naming the record.
#[test]
fn a_trial_whose_record_cannot_be_written_is_still_in_run_json_and_junit() {
    let s = wrapped(&[("fails", "exit 3")]);
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    assert!(!ran.success, "{}", ran.text());
    fs::remove_file(s.ws.join("results/AllReduce.1K.fails.json")).unwrap();
    fs::remove_file(s.ws.join("results/run.json")).unwrap();
    fs::remove_file(s.ws.join("results/junit.xml")).unwrap();
    fs::create_dir(s.ws.join("results/AllReduce.1K.fails.json")).unwrap();
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    let run = read_json(&s.ws.join("results/run.json"));
    assert_eq!(run["summary"]["failed"], 1, "{text}\n{run}");
    assert_eq!(run["trials"][0]["trial"], "AllReduce::1K::fails", "{run}");
    let junit = fs::read_to_string(s.ws.join("results/junit.xml")).unwrap();
    assert!(junit.contains("tests=\"1\"") && junit.contains("failures=\"1\""), "{junit}");
    assert!(text.contains("results/AllReduce.1K.fails.json could not be written"), "{text}");
    assert!(text.contains("1 of 1 trials ran: 0 passed, 1 failed"), "{text}");
}

// ---- issue #48, item 2: deleting never recurses on the call stack

/// `depth` folders one inside the other under `top`, made level by level.
fn deep_tree(top: &Path, depth: usize) {
    use rustix::fs::{Mode, OFlags, mkdirat, open, openat};
    fs::create_dir_all(top).unwrap();
    let mut fd = open(top, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..depth {
        mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
}

/// A passed trial that leaves a folder 5,000 levels deep in its working
/// folder: the folder is deleted as any other, and the trial recorded and
/// tallied (the recursive delete overflowed the stack: SIGABRT, exit 134,
/// no record, no tally).
#[test]
fn a_passed_trial_s_5000_deep_folder_is_deleted_and_the_run_recorded() {
    let s = wrapped(&[(
        "deep",
        "( for n in 2000 2000 1000; do p=$(printf 'd/%.0s' $(seq $n)); mkdir -p \"$p\" && cd \"$p\" || exit 9; done )",
    )]);
    let ran = harness(&s, "run", &["--no-report"], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert_eq!(read_json(&s.ws.join("results/AllReduce.1K.deep.json"))["status"], "PASSED", "{text}");
    assert!(!s.ws.join("work/AllReduce.1K.deep").exists(), "{text}");
    assert!(text.contains("1 of 1 trials ran: 1 passed, 0 failed"), "{text}");
    assert!(ran.took < Duration::from_secs(120), "{:?}", ran.took);
}

/// A tree 100,000 levels deep in a trial's working folder (which made every
/// later `run`, and `clean`, abort): the next run empties it before the
/// trial, and `clean`, under a 1 GiB address-space limit, deletes it, each
/// in seconds.
#[test]
fn a_100_000_deep_tree_is_emptied_by_run_and_deleted_by_clean_under_a_cap() {
    let s = ran_once();
    let work = s.ws.join("work/AllReduce.1K.t");
    deep_tree(&work, 100_000);
    let ran = harness(&s, "run", &["--no-report"], Duration::from_secs(120));
    assert!(ran.success, "{}", ran.text());
    assert!(!work.join("d").exists(), "{}", ran.text());
    deep_tree(&work, 100_000);
    let mut cmd = support::command(&s, "clean", &[]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let cap = rustix::process::Rlimit { current: Some(1 << 30), maximum: Some(1 << 30) };
            rustix::process::setrlimit(rustix::process::Resource::As, cap)?;
            Ok(())
        });
    }
    let cleaned = support::spawn(&s, cmd).wait(Duration::from_secs(60));
    assert!(cleaned.success, "{}", cleaned.text());
    assert!(!s.ws.exists(), "{}", cleaned.text());
    assert!(cleaned.took < Duration::from_secs(30), "{:?}", cleaned.took);
}

/// SIGINT while the first of two trials runs (`--test-threads 1`): the
/// second never starts and is `NOT RUN`, counted as not run, never as a
/// failed trial that ran (it was `FAIL` and counted among those that ran).
#[test]
fn trials_an_interruption_kept_from_starting_are_not_run_not_failed() {
    let s = wrapped(&[("a_sleeps", "sleep 60"), ("b_later", "")]);
    let running = support::spawn(&s, support::command(&s, "run", &["--no-report", "--test-threads", "1"]));
    let log = s.ws.join("logs/AllReduce.1K.a_sleeps.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !fs::read_to_string(&log).is_ok_and(|l| l.contains("sleep")) {
        assert!(std::time::Instant::now() < deadline, "the first trial never started: {}", running.text_so_far());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(running.pid(), libc::SIGINT) }, 0);
    let ran = running.wait(Duration::from_secs(60));
    let text = ran.text();
    assert_eq!(ran.code, Some(130), "{text}");
    assert!(text.contains("NOT RUN AllReduce::1K::b_later"), "{text}");
    assert!(
        text.contains("1 of 2 trials ran: 0 passed, 0 failed, 0 timed out, 1 interrupted; 1 not run: the run was interrupted by SIGINT"),
        "{text}"
    );
}

/// `LLVM_COV` naming a link to the build's own llvm-cov (Debian's
/// `/usr/bin/llvm-cov-22`): the report takes it, as the program the link
/// names (it failed: `Too many levels of symbolic links`).
#[test]
fn llvm_cov_through_a_link_to_the_build_s_own_is_taken() {
    let mut s = ran_once();
    let build = read_json(&s.ws.join("build.json"));
    let real = build["toolchain"]["llvm_cov"]["path"].as_str().unwrap().to_string();
    let link = s.dir.path().join("llvm-cov-22");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    s.env.push(("LLVM_COV".into(), link.display().to_string()));
    let ran = harness(&s, "report", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
}

// ---- issue #48, item 5: profiles are checked before the merge

/// Issue #48, item 5: a trial leaves, under its own mark, a 0-byte profile,
/// one cut to 60 bytes, one of another LLVM's format version (8), and a
/// 2 GiB sparse one; one more leaves only the 0-byte one (its program's
/// profile goes elsewhere). Each bad file moves to `quarantine/<trial>/`
/// before the merge, unread past its header (the sparse one in well under a
/// second), and is named with its cause in the verdict and the record. The
/// empty and the other-version file were merged without a word, and the
/// trial with only the empty one was told it `wrote no coverage profile …`.
#[test]
fn unusable_profiles_are_quarantined_before_the_merge_with_their_cause() {
    // A name under the trial's own mark (`%h-%p-%m.<mark>.profraw`), for
    // the shell's pid, which the program then keeps (`exec`).
    let own = "d=$(dirname \"$LLVM_PROFILE_FILE\"); m=$(basename \"$LLVM_PROFILE_FILE\" .profraw); F=\"$d/$(hostname)-$$-7.${m##*.}.profraw\"";
    let cut =
        "\"$REAL_BINARY\" \"$@\"; rc=$?; for f in \"$d\"/*.profraw; do truncate -s 60 \"$f\"; break; done; exit $rc";
    let s = wrapped(&[
        ("empty", &format!("{own}; : > \"$F\"")),
        ("truncated", &format!("{own}; {cut}")),
        (
            "other_version",
            &format!(
                "{own}; printf '\\201rforpl\\377\\010\\0\\0\\0\\0\\0\\0\\0' > \"$F\"; head -c 200 /dev/zero >> \"$F\""
            ),
        ),
        ("huge", &format!("{own}; truncate -s 2G \"$F\"")),
        ("only_empty", &format!("{own}; : > \"$F\"; export LLVM_PROFILE_FILE=\"$WS/../elsewhere-%p.profraw\"")),
    ]);
    let ran = harness(&s, "run", &["--no-report", "--test-threads", "2"], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    for (trial, cause) in [
        ("empty", "it is empty (0 bytes)"),
        ("truncated", "it is truncated: 60 bytes, shorter than its 128-byte header"),
        (
            "other_version",
            "it is a raw profile of format version 8, written by another LLVM's runtime; the build's llvm-profdata reads version 10",
        ),
        ("huge", "it is 2147483648 bytes, more than the 1024 MiB a raw profile may have: not read"),
        ("only_empty", "it is empty (0 bytes)"),
    ] {
        let slug = format!("AllReduce.1K.{trial}");
        let r = result(&s, &slug);
        let (reason, rejected) = (r["reason"].as_str().unwrap_or_default(), &r["rejected"]);
        assert_eq!(r["status"], "FAILED", "{trial}: {reason}\n{text}");
        assert_eq!(rejected.as_array().map(Vec::len), Some(1), "{trial}: {rejected}\n{text}");
        assert!(rejected[0]["reason"].as_str().unwrap().starts_with(cause), "{trial}: {rejected}");
        let file = PathBuf::from(rejected[0]["file"].as_str().unwrap());
        assert!(file.starts_with(s.ws.join("quarantine").join(&slug)) && file.is_file(), "{trial}: {rejected}");
        assert!(reason.contains(&format!("{} ({cause}", file.display())), "{trial}: {reason}");
        assert!(!reason.contains("wrote no coverage profile"), "{trial}: {reason}");
        // The program's own profiles (its two modules) merged, but the one cut.
        let merged = match trial {
            "only_empty" => 0,
            "truncated" => 1,
            _ => 2,
        };
        assert_eq!(r["merge"]["merged"].as_u64().unwrap_or(0), merged, "{trial}: {}", r["merge"]);
    }
    let huge = s.ws.join("quarantine/AllReduce.1K.huge");
    let moved = fs::read_dir(&huge).unwrap().next().unwrap().unwrap().path();
    assert_eq!(fs::metadata(&moved).unwrap().len(), 2 << 30);
    let only = result(&s, "AllReduce.1K.only_empty");
    assert!(only["reason"].as_str().unwrap().starts_with("coverage lost: none of its 1 raw profile(s) in "), "{only}");
}

// ---- issue #48, item 3: every child the harness runs is bounded

/// Issue #48, item 3: `nvidia-smi`, which every run asks for the GPUs (from
/// `PATH`, so any program of that name), leaves a grandchild holding its
/// output, then floods it. The run ends in seconds either way: the output is
/// read until the command exits, the grandchild is killed with its group,
/// and a flood is stopped at the 64 MiB cap (the run says no GPU). It used
/// to wait for end of file (till the grandchild ended) and read a flood
/// whole into memory.
#[test]
fn a_probe_whose_grandchild_holds_its_output_or_that_floods_it_is_bounded() {
    let mut s = one_trial();
    let bin = s.dir.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let pid = s.dir.path().join("grandchild.pid");
    script(
        &bin.join("nvidia-smi"),
        &format!(
            "if [ -e '{flood}' ]; then exec yes 0, Flooding GPU; fi\nsleep 120 & echo $! > '{pid}'\necho '0, Fake GPU, 1.0, 0000:00:00.0'",
            flood = s.dir.path().join("flood").display(),
            pid = pid.display()
        ),
    );
    s.env.push(("PATH".into(), format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())));
    let started = std::time::Instant::now();
    let ran = harness(&s, "run", &["--no-report"], Duration::from_secs(90));
    assert!(ran.success, "{}", ran.text());
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    let run = fs::read_to_string(s.ws.join("results/run.json")).unwrap();
    assert!(run.contains("0, Fake GPU, 1.0, 0000:00:00.0"), "{run}");
    let grandchild: i32 = fs::read_to_string(&pid).unwrap().trim().parse().unwrap();
    let gone = |pid: i32| {
        fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gone(grandchild) {
        assert!(std::time::Instant::now() < deadline, "the grandchild {grandchild} outlived its probe");
        std::thread::sleep(Duration::from_millis(50));
    }
    fs::write(s.dir.path().join("flood"), "").unwrap();
    let started = std::time::Instant::now();
    let ran = harness(&s, "run", &["--no-report"], Duration::from_secs(90));
    assert!(ran.success, "{}", ran.text());
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    let run = fs::read_to_string(s.ws.join("results/run.json")).unwrap();
    assert!(!run.contains("Flooding GPU"), "a flood past the cap is no answer");
}

// ---- issue #48, item 4: file names are data in every format

/// Issue #48, item 4: a program compiled from a source file whose name holds
/// `\nend_of_record\nSF:forged.cc\nDA:7,99\nend_of_record\nSF:y.c`
/// (tests/fixtures/line-break-name) runs in a trial. lcov cannot carry the
/// name, and `codecov.json` and `cobertura.xml` are made from lcov: the
/// report is refused, naming the file with its line breaks escaped, and no
/// format holds a forged record (each held `forged.cc`, line 7 hit 99 times).
#[test]
fn a_file_name_with_line_breaks_forges_no_record_and_is_named() {
    let sources = tempfile::tempdir().unwrap();
    let fixture = support::root().join("tests/fixtures/line-break-name");
    for file in ["main.c", "part.c", "build.sh"] {
        fs::copy(fixture.join(file), sources.path().join(file)).unwrap();
    }
    let s = setup(|v| {
        v["library"] = json!({
            "source_dir": sources.path().display().to_string(),
            "steps": [{"name": "build", "argv": ["sh", "{library_src}/build.sh", "{cc}", "{coverage_flags}",
                "{coverage_link_flags}", "{library_src}", "{build_dir}"]}],
            "objects": ["{build_dir}/prog"]
        });
        let config = v.as_object_mut().unwrap();
        for key in ["tests", "collectives", "sizes", "variants", "args"] {
            config.remove(key);
        }
        v["launch"] = json!({"launcher": "threads", "ranks": 1});
        v["programs"] = json!([{"name": "weird", "binary": "prog"}]);
    });
    let ran = harness(&s, "run", &[], LIMIT);
    let text = ran.text();
    assert_eq!(result(&s, "weird")["status"], "PASSED", "{text}");
    for format in ["coverage.lcov", "codecov.json", "cobertura.xml"] {
        let path = s.ws.join("report").join(format);
        let written = fs::read_to_string(&path).unwrap_or_default();
        assert!(!written.contains("forged.cc"), "{format}: {written}");
    }
    assert!(!ran.success, "{text}");
    assert!(text.contains("the report is refused: 1 source file name(s) hold a line break"), "{text}");
    assert!(text.contains(r"/x\nend_of_record\nSF:forged.cc\nDA:7,99\nend_of_record\nSF:y.c"), "{text}");
}

// ---- issue #48, minor: a trial's own log

/// Issue #48, minor item: a trial that deletes its own log, and one that
/// replaces it with a copy of its real output (a passing table), each fail,
/// and say so: their output cannot be judged (the replacer passed on the
/// copy it chose; the deleter was judged on nothing, without a word).
#[test]
fn a_trial_that_deletes_or_replaces_its_own_log_is_told_so() {
    let s = wrapped(&[
        ("deleter", "rm \"$WS/logs/AllReduce.1K.deleter.log\""),
        (
            "replacer",
            "\"$REAL_BINARY\" \"$@\" > \"$WS/../copy.log\" || exit 1; mv \"$WS/../copy.log\" \"$WS/logs/AllReduce.1K.replacer.log\"; exit 0",
        ),
    ]);
    let ran = harness(&s, "run", &["--no-report", "--test-threads", "1"], LIMIT);
    let text = ran.text();
    assert!(!ran.success, "{text}");
    for (trial, how) in
        [("deleter", "was deleted while it ran"), ("replacer", "was replaced by another file while it ran")]
    {
        let slug = format!("AllReduce.1K.{trial}");
        let r = result(&s, &slug);
        let reason = r["reason"].as_str().unwrap_or_default();
        assert_eq!(r["status"], "FAILED", "{trial}: {reason}\n{text}");
        let log = s.ws.join("logs").join(format!("{slug}.log"));
        assert!(reason.starts_with(&format!("its log {} {how}", log.display())), "{reason}");
        assert!(reason.contains(", so its output cannot be judged"), "{reason}");
    }
    let replaced = fs::read_to_string(s.ws.join("logs/AllReduce.1K.replacer.log")).unwrap();
    assert!(replaced.contains("# Out of bounds values : 0 OK"), "the copy holds a passing table: {replaced}");
}
