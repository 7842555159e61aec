//! One coverage model feeds every format (#23): the real harness, on the
//! default suite and on the upstream-format config, then the report twice
//! (the second against the first as its baseline, with every line of the
//! library changed against its git base, and every bar at 100 % so that the
//! thresholds name the totals they read). Each format's totals are read
//! from its file as a user's tool would read it, not through the crate, and
//! must all be equal: summary.txt, summary.json, summary.md, the screen,
//! the thresholds, the snapshot, coverage.lcov (its records and its LF/LH
//! totals), coverage.json, cobertura.xml, html/index.html, attribution.json
//! and the attribution index, minimal-suite.json, baseline.json and
//! diff.json. The library is a copy of the fixture's in a git repository
//! whose only commit is empty, so that every line is a changed line.

mod support;

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{Setup, harness, root};

/// Per metric (`lines`, `functions`, `regions`, `branches`): (covered, count).
type Totals = BTreeMap<&'static str, (u64, u64)>;

const METRICS: [&str; 4] = ["lines", "functions", "regions", "branches"];
const LIMIT: Duration = Duration::from_secs(900);

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn num(text: &str) -> u64 {
    text.trim().parse().unwrap_or_else(|e| panic!("{text:?} is not a count: {e}"))
}

/// Every `(covered/count)` in `text`, in order.
fn fractions(text: &str) -> Vec<(u64, u64)> {
    let re = regex::Regex::new(r"(\d+)/(\d+)").unwrap();
    re.captures_iter(text).map(|c| (num(&c[1]), num(&c[2]))).collect()
}

/// A copy of the fixture library (ccl and its tuner) in a fresh git
/// repository whose one commit is empty: against it, every file is new.
fn library(dir: &Path) -> PathBuf {
    let lib = dir.join("lib");
    for part in ["ccl", "ccl-tuner"] {
        support::copy_tree(&root().join("tests/fixtures").join(part), &lib.join(part));
    }
    support::git(&lib, &["init", "-q"]);
    support::git(&lib, &["commit", "-q", "--allow-empty", "-m", "empty"]);
    lib
}

/// Writes `value` as `<dir>/configs/<name>`: a config's snapshots are
/// looked for in `<dir>/snapshots`, which does not exist, so the report
/// writes its first snapshot into the workspace.
fn write_config(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join("configs").join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path
}

/// The default suite (`configs/local.json`, every trial) on `lib`.
fn default_suite(dir: tempfile::TempDir, lib: &Path) -> Setup {
    let mut v: Value = serde_json::from_str(&read(&root().join("configs/local.json"))).unwrap();
    v["library"]["source_dir"] = json!(lib.display().to_string());
    v["tests"]["source_dir"] = json!(root().join("tests/fixtures/ccl-tests").display().to_string());
    let config = write_config(dir.path(), "local.json", &v);
    let ws = dir.path().join("ws");
    Setup { dir, config, ws, env: Vec::new() }
}

/// `configs/local_test_runner.json` (RCCL `test_runner`'s format) with one
/// perf test, its overlay building `lib`.
fn upstream_suite(dir: tempfile::TempDir, lib: &Path) -> Setup {
    let mut config: Value = serde_json::from_str(&read(&root().join("configs/local_test_runner.json"))).unwrap();
    let perf = config["test_configurations"]["perf"]["tests"].as_array().unwrap()[..1].to_vec();
    config["test_configurations"]["perf"]["tests"] = Value::Array(perf);
    let mut overlay: Value =
        serde_json::from_str(&read(&root().join("configs/local_test_runner.overlay.json"))).unwrap();
    overlay["library"]["source_dir"] = json!(lib.display().to_string());
    overlay["tests"]["source_dir"] = json!(root().join("tests/fixtures").display().to_string());
    let config = write_config(dir.path(), "runner.json", &config);
    let overlay = write_config(dir.path(), "runner.overlay.json", &overlay);
    let ws = dir.path().join("ws");
    Setup { dir, config, ws, env: vec![("CCL_COV_OVERLAY".into(), overlay.display().to_string())] }
}

/// Runs the suite and the report twice; the second report's output.
fn run(s: &mut Setup) -> String {
    let ran = harness(s, "collectives", &[], LIMIT);
    assert!(ran.success, "{}", ran.text());
    let first = harness(s, "report", &[], LIMIT);
    assert!(first.success, "{}", first.text());
    let base = s.env.clone();
    s.env.push(("CCL_COV_BASELINE".into(), s.ws.display().to_string()));
    s.env.push(("CCL_COV_DIFF_BASE".into(), "HEAD".into()));
    for metric in METRICS {
        s.env.push((format!("CCL_COV_FAIL_UNDER_{}", metric.to_ascii_uppercase()), "100".into()));
    }
    let second = harness(s, "report", &[], LIMIT);
    s.env = base;
    let text = second.text();
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("test report::") && l.ends_with("FAILED")).collect();
    assert_eq!(failed.len(), 1, "only the bars of 100 % fail:\n{text}");
    assert!(failed[0].starts_with("test report::thresholds "), "{text}");
    text
}

/// The totals of the `host` row of the table printed after the report.
fn screen(output: &str) -> Totals {
    let row = output.lines().find(|l| l.starts_with("host ")).unwrap_or_else(|| panic!("no host row:\n{output}"));
    let cells = fractions(row);
    assert_eq!(cells.len(), 4, "{row}");
    METRICS.into_iter().zip(cells).collect()
}

/// What `report::thresholds` said: `lines 76.45% (724/947) is under …`;
/// a metric at 100 % is not named, and is then taken from `reference`.
fn thresholds(output: &str, reference: &Totals) -> Totals {
    let re = regex::Regex::new(r"(lines|functions|regions|branches) [0-9.]+% \((\d+)/(\d+)\) is under").unwrap();
    let named: BTreeMap<String, (u64, u64)> =
        re.captures_iter(output).map(|c| (c[1].to_string(), (num(&c[2]), num(&c[3])))).collect();
    assert!(!named.is_empty(), "the thresholds named no total:\n{output}");
    METRICS
        .into_iter()
        .map(|m| {
            let full = reference[m];
            (
                m,
                named.get(m).copied().unwrap_or_else(|| {
                    assert_eq!(full.0, full.1, "{m} is not named");
                    full
                }),
            )
        })
        .collect()
}

/// llvm-cov's JSON shape: `{"count", "covered"}` per metric.
fn json_totals(counts: &Value) -> Totals {
    METRICS
        .into_iter()
        .map(|m| (m, (counts[m]["covered"].as_u64().unwrap(), counts[m]["count"].as_u64().unwrap())))
        .collect()
}

/// The sum of every file's `summary` of an llvm-cov JSON export.
fn json_file_sum(export: &Value) -> Totals {
    let mut sum: Totals = METRICS.into_iter().map(|m| (m, (0, 0))).collect();
    for file in export["data"][0]["files"].as_array().unwrap() {
        for (m, (c, n)) in json_totals(&file["summary"]) {
            let s = sum.get_mut(m).unwrap();
            *s = (s.0 + c, s.1 + n);
        }
    }
    sum
}

/// `summary.txt`'s TOTAL row: count, missed, cover for regions,
/// functions, lines, branches.
fn summary_txt(text: &str) -> Totals {
    let row = text.lines().find(|l| l.starts_with("TOTAL")).unwrap_or_else(|| panic!("no TOTAL:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
    assert_eq!(cells.len(), 12, "{row}");
    ["regions", "functions", "lines", "branches"]
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let (count, missed) = (num(cells[3 * i]), num(cells[3 * i + 1]));
            (m, (count - missed, count))
        })
        .collect()
}

/// `summary.md`'s `| metric | covered | total | % |` rows.
fn summary_md(text: &str) -> Totals {
    METRICS
        .into_iter()
        .map(|m| {
            let row =
                text.lines().find(|l| l.starts_with(&format!("| {m} |"))).unwrap_or_else(|| panic!("no {m}:\n{text}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (m, (num(cells[2]), num(cells[3])))
        })
        .collect()
}

/// `html/index.html`'s Totals row: functions, lines, regions, branches.
fn html_index(text: &str) -> Totals {
    let at = text.find("<td><pre>Totals</pre></td>").unwrap_or_else(|| panic!("no Totals row:\n{text}"));
    let row = &text[at..at + text[at..].find("</tr>").unwrap()];
    let cells = fractions(row);
    assert_eq!(cells.len(), 4, "{row}");
    ["functions", "lines", "regions", "branches"].into_iter().zip(cells).collect()
}

/// The lcov's records, counted as lcov's readers count them: every `DA`
/// line, a function per first line (`FN`) run when any of its
/// instantiations ran (`FNDA`), every `BRDA` branch; and the sums of its
/// per-record totals (`LF`, `LH`, `FNF`, `FNH`, `BRF`, `BRH`).
fn lcov(text: &str) -> (Totals, Totals) {
    let (mut lines, mut starts, mut hits, mut branches) =
        (BTreeMap::new(), BTreeMap::new(), BTreeMap::<(String, String), u64>::new(), BTreeMap::new());
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    let mut file = String::new();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let fields: Vec<&str> = value.split(',').collect();
        match key {
            "SF" => file = value.to_string(),
            "DA" => *lines.entry((file.clone(), num(fields[0]))).or_insert(0) += num(fields[1]),
            "FN" => {
                starts.insert((file.clone(), fields[1..].join(",")), num(fields[0]));
            }
            "FNDA" => *hits.entry((file.clone(), fields[1..].join(","))).or_insert(0) += num(fields[0]),
            "BRDA" => {
                let taken = if fields[3] == "-" { 0 } else { num(fields[3]) };
                *branches.entry((file.clone(), fields[..3].join(","))).or_insert(0) += taken;
            }
            "LF" | "LH" | "FNF" | "FNH" | "BRF" | "BRH" => *sums.entry(key).or_insert(0) += num(value),
            _ => {}
        }
    }
    let mut functions: BTreeMap<(String, u64), bool> = BTreeMap::new();
    for ((file, name), start) in &starts {
        *functions.entry((file.clone(), *start)).or_insert(false) |=
            hits.get(&(file.clone(), name.clone())).is_some_and(|h| *h > 0);
    }
    let records: Totals = [
        ("lines", (covered(&lines), lines.len() as u64)),
        ("functions", (functions.values().filter(|r| **r).count() as u64, functions.len() as u64)),
        ("branches", (covered(&branches), branches.len() as u64)),
    ]
    .into();
    let totals: Totals = [
        ("lines", (sums["LH"], sums["LF"])),
        ("functions", (sums["FNH"], sums["FNF"])),
        ("branches", (sums["BRH"], sums["BRF"])),
    ]
    .into();
    (records, totals)
}

/// How many of `m`'s counts are not 0.
fn covered<K>(m: &BTreeMap<K, u64>) -> u64 {
    m.values().filter(|h| **h > 0).count() as u64
}

/// `cobertura.xml`'s `lines-covered`/`lines-valid` and branches.
fn cobertura(text: &str) -> Totals {
    let tag = &text[text.find("<coverage ").unwrap()..];
    let tag = &tag[..tag.find('>').unwrap()];
    let attr = |name: &str| {
        let at = tag.find(&format!(" {name}=\"")).unwrap_or_else(|| panic!("no {name} in {tag}")) + name.len() + 3;
        num(&tag[at..at + tag[at..].find('"').unwrap()])
    };
    [
        ("lines", (attr("lines-covered"), attr("lines-valid"))),
        ("branches", (attr("branches-covered"), attr("branches-valid"))),
    ]
    .into()
}

/// `attribution.json`: instrumented lines, and those some trial covered
/// (set 0 is "covered by no trial").
fn attribution(json: &Value) -> Totals {
    let (mut covered, mut count) = (0, 0);
    for ranges in json["files"].as_object().unwrap().values() {
        for r in ranges.as_array().unwrap() {
            let n = r[1].as_u64().unwrap() - r[0].as_u64().unwrap() + 1;
            count += n;
            if r[2].as_u64().unwrap() != 0 {
                covered += n;
            }
        }
    }
    [("lines", (covered, count))].into()
}

/// The attribution index's Files table: lines covered and instrumented per file, summed.
fn attribution_index(text: &str) -> Totals {
    let files = &text[text.find("<h2>Files</h2>").unwrap()..text.find("<h2>Trials</h2>").unwrap()];
    // Each file's row, then the Totals row, which must be their sum.
    let re =
        regex::Regex::new(r"<tr class='(light-row|light-row-bold)'>.*?<pre>\s*[\d.]+% \((\d+)/(\d+)\)</pre>").unwrap();
    let (mut covered, mut count, mut totals) = (0, 0, None);
    for c in re.captures_iter(files) {
        match &c[1] {
            "light-row" => (covered, count) = (covered + num(&c[2]), count + num(&c[3])),
            _ => totals = Some((num(&c[2]), num(&c[3]))),
        }
    }
    assert_eq!(totals, Some((covered, count)), "the attribution index's Totals row is not its files' sum");
    [("lines", (covered, count))].into()
}

/// The minimal suite covers what the whole suite covers.
fn minimal_suite(json: &Value, reference: &Totals) -> Totals {
    ["lines", "functions", "branches"].into_iter().map(|m| (m, (json[m].as_u64().unwrap(), reference[m].1))).collect()
}

/// Against a baseline of the same coverage, every line is covered (CBC) or
/// uncovered (UBC) baseline code.
fn baseline(json: &Value) -> Totals {
    let counts = &json["counts"];
    let of = |c: &str| counts[c].as_u64().unwrap_or_else(|| panic!("no {c} in {counts}"));
    for other in ["LBC", "UNC", "GNC", "GBC", "ECB", "EUB"] {
        assert_eq!(of(other), 0, "{other} against the same coverage: {json:#}");
    }
    [("lines", (of("CBC"), of("CBC") + of("UBC")))].into()
}

/// Every line changed: the changed lines with code are all the lines.
fn diff(json: &Value) -> Totals {
    [("lines", (json["covered"].as_u64().unwrap(), json["instrumented"].as_u64().unwrap()))].into()
}

/// The report's first snapshot: its totals and host totals (`covered/count`).
fn snapshot(text: &str) -> (Totals, Totals) {
    let body: Value = serde_json::from_str(text.splitn(3, "---\n").nth(2).unwrap()).unwrap();
    let of = |v: &Value| -> Totals {
        METRICS
            .into_iter()
            .map(|m| {
                let f = fractions(v[m].as_str().unwrap());
                (m, f[0])
            })
            .collect()
    };
    (of(&body["totals"]), of(&body["host_totals"]))
}

/// Reads every format's totals and checks them against summary.json's.
fn check_every_format(s: &Setup, output: &str, config: &str) {
    let snap = support::files_under(&s.ws.join("report/snapshot"));
    assert_eq!(snap.len(), 1, "one first snapshot: {snap:?}");
    let dir = s.ws.join("report");
    let summary = read_json(&dir.join("summary.json"));
    let reference = json_totals(&summary["data"][0]["totals"]);
    assert!(reference["lines"].1 > 0 && reference["branches"].1 > 0, "{reference:?}");
    let coverage_json = read_json(&dir.join("coverage.json"));
    let (lcov_records, lcov_totals) = lcov(&read(&dir.join("coverage.lcov")));
    let (snap_totals, snap_host) = snapshot(&read(&snap[0]));
    let formats: Vec<(&str, Totals)> = vec![
        ("summary.json (files summed)", json_file_sum(&summary)),
        ("summary.txt", summary_txt(&read(&dir.join("summary.txt")))),
        ("summary.md", summary_md(&read(&dir.join("summary.md")))),
        ("the screen", screen(output)),
        ("the thresholds", thresholds(output, &reference)),
        ("the snapshot's totals", snap_totals),
        ("the snapshot's host totals", snap_host),
        ("coverage.lcov (records)", lcov_records),
        ("coverage.lcov (LF, FNF, BRF …)", lcov_totals),
        ("coverage.json", json_totals(&coverage_json["data"][0]["totals"])),
        ("coverage.json (files summed)", json_file_sum(&coverage_json)),
        ("cobertura.xml", cobertura(&read(&dir.join("cobertura.xml")))),
        ("html/index.html", html_index(&read(&dir.join("html/index.html")))),
        ("attribution.json", attribution(&read_json(&dir.join("attribution.json")))),
        ("attribution/index.html", attribution_index(&read(&dir.join("attribution/index.html")))),
        ("minimal-suite.json", minimal_suite(&read_json(&dir.join("minimal-suite.json")), &reference)),
        ("baseline.json", baseline(&read_json(&dir.join("baseline.json")))),
        ("diff.json", diff(&read_json(&dir.join("diff.json")))),
    ];
    let mut wrong = Vec::new();
    for (format, totals) in &formats {
        for (metric, got) in totals {
            if reference[metric] != *got {
                wrong.push(format!(
                    "{format}: {metric} {}/{} (summary.json: {}/{})",
                    got.0, got.1, reference[metric].0, reference[metric].1
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{config}: the formats disagree:\n  {}", wrong.join("\n  "));
    let checked: BTreeSet<&str> = formats.iter().flat_map(|(_, t)| t.keys().copied()).collect();
    assert_eq!(checked, METRICS.into_iter().collect(), "every metric is compared");
}

#[test]
fn every_format_gives_the_same_totals_on_the_default_suite() {
    let dir = tempfile::tempdir().unwrap();
    let lib = library(dir.path());
    let mut s = default_suite(dir, &lib);
    let output = run(&mut s);
    check_every_format(&s, &output, "the default suite");
}

#[test]
fn every_format_gives_the_same_totals_on_an_upstream_format_config() {
    let dir = tempfile::tempdir().unwrap();
    let lib = library(dir.path());
    let mut s = upstream_suite(dir, &lib);
    let output = run(&mut s);
    check_every_format(&s, &output, "the upstream-format config");
}
