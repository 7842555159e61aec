//! A run split in three shards (`--partition count:K/3`, and the harness's
//! `CCL_COV_PARTITION`) on the default suite, merged by `report
//! --merge-from`: the merged totals are a single run's, and the merged
//! totals, attribution and minimal suite are those of one workspace that
//! holds the same trial runs (the minimal suite breaks ties by a trial's
//! duration, which no two runs share, so it is compared on the same runs). Shards of another build are refused, naming each; a trial
//! two shards ran is counted once and named; a profile altered in a shard
//! is not merged.

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{Setup, harness, setup, undocumented_workspace_entries};

const LIMIT: Duration = Duration::from_secs(900);

/// The same config as `s`, with the workspace `ws`.
fn at(s: &Setup, ws: PathBuf) -> Setup {
    Setup { dir: tempfile::tempdir().unwrap(), config: s.config.clone(), ws, env: s.env.clone() }
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// What must be equal between the single run's report and the merged one.
fn outcome(ws: &Path) -> (Value, Value, Value) {
    let summary = json(&ws.join("report/summary.json"));
    let minimal = json(&ws.join("report/minimal-suite.json"));
    (summary["data"][0]["totals"].clone(), json(&ws.join("report/attribution.json")), minimal["trials"].clone())
}

#[test]
fn three_shards_merged_report_what_one_run_reports() {
    let single = setup(|_| {});
    let ran = harness(&single, "run", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());

    let root = tempfile::tempdir().unwrap();
    let shard = |k: usize| root.path().join(format!("shard{k}"));
    let one = at(&single, shard(1));
    let ran = harness(&one, "run", &["--partition", "count:1/3"], LIMIT);
    assert!(ran.success, "{}", ran.text());
    assert!(ran.text().contains("partition count:1/3: 14 of 42 trials in this shard"), "{}", ran.text());
    for k in [2, 3] {
        // The harness itself, as CI runs it on a machine without cargo.
        let mut s = at(&single, shard(k));
        s.env.push(("CCL_COV_PARTITION".into(), format!("count:{k}/3")));
        let ran = harness(&s, "collectives", &[], LIMIT);
        assert!(ran.success, "{}", ran.text());
    }

    let merged = at(&single, root.path().join("merged"));
    let (a, b, c) = (shard(1).display().to_string(), shard(2).display().to_string(), shard(3).display().to_string());
    let ran = harness(&merged, "report", &["--merge-from", &a, &b, &c], LIMIT);
    let text = ran.text();
    assert!(ran.success, "{text}");
    assert!(!text.contains("ran in two shards"), "{text}");
    let record = json(&merged.ws.join("shards.json"));
    let taken: usize = record["shards"].as_array().unwrap().iter().map(|s| s["trials"].as_array().unwrap().len()).sum();
    assert_eq!(taken, 42, "{record}");

    let (m_totals, m_attribution, m_minimal) = outcome(&merged.ws);
    let (s_totals, s_attribution, s_minimal) = outcome(&single.ws);
    assert_eq!(m_totals, s_totals, "merged totals against the single run's");
    // The minimal suite is chosen from coverage alone, ties by name (#33):
    // the single run's, though its trials ran apart from the shards'.
    assert_eq!(m_minimal, s_minimal, "merged minimal suite against the single run's");
    assert_eq!(m_attribution, s_attribution, "merged attribution against the single run's");
    // One workspace holding the shards' trial runs, put together by hand.
    let union = root.path().join("union");
    copy(&shard(1), &union);
    for k in [2, 3] {
        for sub in ["results", "profiles"] {
            for entry in std::fs::read_dir(shard(k).join(sub)).unwrap().flatten() {
                let name = entry.file_name();
                let ext = Path::new(&name).extension().and_then(|e| e.to_str());
                if ext == Some("json") && name != "run.json" || ext == Some("profdata") {
                    std::fs::copy(entry.path(), union.join(sub).join(&name)).unwrap();
                }
            }
        }
    }
    let ran = harness(&at(&single, union.clone()), "report", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let (totals, attribution, minimal) = outcome(&union);
    assert_eq!(m_totals, totals, "merged totals");
    assert!(!minimal.as_array().unwrap().is_empty(), "{minimal}");
    assert_eq!(m_minimal, minimal, "merged minimal suite");
    assert_eq!(m_attribution, attribution, "merged attribution");
    for ws in [&merged.ws, &shard(2)] {
        let undocumented = undocumented_workspace_entries(ws);
        assert!(undocumented.is_empty(), "docs/layout.md names none of {undocumented:?} ({})", ws.display());
    }

    // A trial two shards ran counts once, and is named.
    let twice = at(&single, root.path().join("twice"));
    let ran = harness(&twice, "report", &["--merge-from", &a, &a], LIMIT);
    assert!(ran.text().contains("trial AllReduce::1K::ring ran in two shards: counted once, from "), "{}", ran.text());

    // A shard of another build is refused, each shard's build named.
    let other = root.path().join("other");
    copy(&shard(3), &other);
    let manifest = other.join("build.json");
    let mut build = json(&manifest);
    build["build_id"] = "0123456789abcdef".into();
    std::fs::write(&manifest, build.to_string()).unwrap();
    let refused = at(&single, root.path().join("refused"));
    let ran = harness(&refused, "report", &["--merge-from", &a, &other.display().to_string()], LIMIT);
    let text = ran.text();
    assert_eq!(ran.code, Some(2), "{text}");
    assert!(text.contains("the shards hold different builds"), "{text}");
    assert!(text.contains(&format!("{}: build 0123456789abcdef", other.display())), "{text}");

    // A profile altered in a shard is not merged, and is named.
    let altered = root.path().join("altered");
    copy(&shard(1), &altered);
    let profdata = altered.join("profiles/AllReduce.1K.ring.profdata");
    let mut bytes = std::fs::read(&profdata).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&profdata, bytes).unwrap();
    let checked = at(&single, root.path().join("checked"));
    let ran = harness(&checked, "report", &["--merge-from", &altered.display().to_string()], LIMIT);
    let text = ran.text();
    assert!(text.contains("not merged: AllReduce::1K::ring from "), "{text}");
    assert!(text.contains("is not the profile its trial recorded"), "{text}");
    assert!(!checked.ws.join("profiles/AllReduce.1K.ring.profdata").exists());
}

/// Copies a workspace folder (a CI artifact downloaded elsewhere).
fn copy(from: &Path, to: &Path) {
    support::copy_tree(from, to);
}
