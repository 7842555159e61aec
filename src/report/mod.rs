//! Coverage reports with `llvm-cov`, over exactly the objects the build
//! manifest lists as instrumented (found by their coverage-mapping sections),
//! and the normalised summary that is snapshot-checked. Every total is the
//! lcov model's (`coverage::model`): llvm-cov's own summaries count the
//! lines of macro expansions in no file, its lcov export does.

pub mod attribution;
pub(crate) mod attribution_pages;
pub(crate) mod device_pages;
pub(crate) mod diff_coverage;
pub(crate) mod elements;
pub(crate) mod html_index;
pub(crate) mod minimal_suite;
pub(crate) mod screen;
pub(crate) mod session;
pub(crate) mod shards;

use crate::bail;
use crate::build::cache::BuildManifest;
use crate::coverage::ignore::IgnoreRule;
use crate::coverage::lcov::{self, Lcov};
use crate::coverage::llvm_export::{Counts, FileSummary, Metric, SummaryExport};
use crate::coverage::profiles::Quarantined;
use crate::error::{Context, Error, Result};
use crate::exec::process::Cmd;
use crate::results::{RunOf, Runs, TrialResult};
use crate::verdict::Status;
use crate::workspace;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What every llvm-cov invocation of one report shares.
#[derive(Debug, Clone)]
pub struct ReportInputs {
    pub llvm_cov: PathBuf,
    pub cxxfilt: Option<PathBuf>,
    pub profdata: PathBuf,
    /// Host objects first, then device code objects.
    pub objects: Vec<PathBuf>,
    /// The files every llvm-cov call leaves out.
    pub ignore: IgnoreRule,
    pub title: String,
}

impl ReportInputs {
    pub fn new(manifest: &BuildManifest, profdata: PathBuf, ignore: IgnoreRule, title: String) -> Result<Self> {
        if manifest.instrumented_objects().is_empty() {
            bail!("the build manifest lists no instrumented object; nothing to report on");
        }
        let objects = manifest.coverage_objects();
        for object in &objects {
            if !object.is_file() {
                bail!("instrumented object {} is gone; rebuild with `cargo test --test collectives`", object.display());
            }
        }
        Ok(ReportInputs {
            llvm_cov: manifest.toolchain.llvm_cov.path.clone(),
            cxxfilt: manifest.toolchain.cxxfilt(),
            profdata,
            objects,
            ignore,
            title,
        })
    }

    /// The same report over only `objects` (host or device totals).
    pub fn with_objects(&self, objects: Vec<PathBuf>) -> ReportInputs {
        ReportInputs { objects, ..self.clone() }
    }

    /// The same report over another profile (one trial's).
    pub(crate) fn with_profdata(&self, profdata: PathBuf) -> ReportInputs {
        ReportInputs { profdata, ..self.clone() }
    }

    /// `llvm-cov export -format=lcov`, as text.
    pub(crate) fn lcov_text(&self) -> Result<String> {
        self.cmd("export").arg("-format=lcov").read()
    }

    /// `llvm-cov export -summary-only`, as text.
    fn summary_text(&self) -> Result<String> {
        self.cmd("export").arg("-summary-only").read()
    }

    /// `llvm-cov export -summary-only`, as types: llvm-cov's own totals.
    pub(crate) fn summary(&self) -> Result<SummaryExport> {
        SummaryExport::parse(&self.summary_text()?)
    }

    /// The model's summary of `model` (these objects' lcov), in the shape
    /// of `llvm-cov export -summary-only`, whose regions it keeps: as JSON
    /// text and as types.
    pub(crate) fn model_summary(&self, model: &Lcov) -> Result<(String, SummaryExport)> {
        let mut export: Value =
            serde_json::from_str(&self.summary_text()?).context("unexpected llvm-cov export -summary-only")?;
        crate::coverage::model::apply(&mut export, model, "llvm-cov export -summary-only")?;
        let text = serde_json::to_string(&export).expect("a JSON value serializes");
        let summary = SummaryExport::parse(&text)?;
        Ok((text, summary))
    }

    /// `llvm-cov <subcommand> -instr-profile=P <obj0> -object <obj1> ... [-ignore-filename-regex=R]`.
    fn cmd(&self, subcommand: &str) -> Cmd {
        let mut cmd =
            Cmd::new(&self.llvm_cov).arg(subcommand).arg(format!("-instr-profile={}", self.profdata.display()));
        for (i, object) in self.objects.iter().enumerate() {
            if i > 0 {
                cmd = cmd.arg("-object");
            }
            cmd = cmd.arg(object);
        }
        if let Some(arg) = self.ignore.llvm_cov_arg() {
            cmd = cmd.arg(arg);
        }
        cmd
    }

    /// The model's summary over these objects (their lcov export, and the
    /// summary export's regions), written to `out` and read as types.
    pub fn summary_json(&self, ws: &workspace::Workspace, out: &Path) -> Result<SummaryExport> {
        let model = lcov::parse_lcov(&self.lcov_text()?, "llvm-cov export -format=lcov")?;
        let (text, summary) = self.model_summary(&model)?;
        ws.write(out, text.as_bytes())?;
        Ok(summary)
    }

    /// The full llvm JSON export (per-file segments, branches, functions),
    /// its summaries the model's, as text (absolute paths).
    pub(crate) fn json(&self, model: &Lcov) -> Result<String> {
        let text = self.cmd("export").arg("-format=text").read()?;
        let mut export: Value = serde_json::from_str(&text).context("unexpected llvm-cov export -format=text")?;
        crate::coverage::model::apply(&mut export, model, "llvm-cov export -format=text")?;
        Ok(serde_json::to_string(&export).expect("a JSON value serializes"))
    }

    pub(crate) fn html(&self, out_dir: &Path) -> Result<PathBuf> {
        let mut cmd = self
            .cmd("show")
            .arg("-format=html")
            .arg(format!("-output-dir={}", out_dir.display()))
            .arg(format!("-project-title={}", self.title))
            .arg("-show-line-counts-or-regions")
            .arg("-show-branches=count");
        if let Some(filt) = &self.cxxfilt {
            cmd = cmd.arg(format!("-Xdemangler={}", filt.display()));
        }
        cmd.read()?;
        let index = out_dir.join("index.html");
        if !index.is_file() {
            bail!("llvm-cov show finished but wrote no {}", index.display());
        }
        Ok(index)
    }
}

/// `report/summary.txt`: per file and in total, the columns of `llvm-cov
/// report -show-region-summary -show-branch-summary`, with the model's
/// numbers; file names relative to `roots`.
pub(crate) fn summary_text(summary: &SummaryExport, roots: &[&Path]) -> String {
    let cover =
        |m: &Metric| if m.count == 0 { "-".to_string() } else { format!("{:.2}%", percent(m.covered, m.count)) };
    let cells = |c: &Counts| {
        let branches = c.branches.unwrap_or(Metric { count: 0, covered: 0 });
        let mut row = Vec::new();
        for m in [&c.regions, &c.functions, &c.lines, &branches] {
            row.extend([m.count.to_string(), (m.count - m.covered).to_string(), cover(m)]);
        }
        row
    };
    let mut rows: Vec<(String, Vec<String>)> =
        summary.files().iter().map(|f| (relative(&f.filename, roots), cells(&f.summary))).collect();
    rows.sort();
    rows.push(("TOTAL".to_string(), cells(summary.totals())));
    let header = [
        "Regions",
        "Missed Regions",
        "Cover",
        "Functions",
        "Missed Functions",
        "Executed",
        "Lines",
        "Missed Lines",
        "Cover",
        "Branches",
        "Missed Branches",
        "Cover",
    ];
    let name_width = rows.iter().map(|(n, _)| n.len()).chain(["Filename".len()]).max().unwrap_or(0) + 3;
    let widths: Vec<usize> = header.iter().map(|h| h.len().max(8) + 3).collect();
    let line = |name: &str, cells: &[String]| {
        let mut out = format!("{name:<name_width$}");
        for (cell, width) in cells.iter().zip(&widths) {
            out.push_str(&format!("{cell:>width$}"));
        }
        out.push('\n');
        out
    };
    let rule = "-".repeat(name_width + widths.iter().sum::<usize>()) + "\n";
    let header: Vec<String> = header.iter().map(|h| (*h).to_string()).collect();
    let mut out = line("Filename", &header);
    out.push_str(&rule);
    let (total, files) = rows.split_last().expect("the TOTAL row is there");
    for (name, cells) in files {
        out.push_str(&line(name, cells));
    }
    out.push_str(&rule);
    out.push_str(&line(&total.0, &total.1));
    out
}

/// A report's totals, typed until a writer shows them: covered and total of
/// each metric; regions and branches only where they are counted (NVIDIA
/// kernel lines have neither, older llvm-cov exports no branches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) lines: Metric,
    pub(crate) functions: Metric,
    pub(crate) regions: Option<Metric>,
    pub(crate) branches: Option<Metric>,
}

impl Totals {
    /// The totals of a summary export.
    pub(crate) fn of(summary: &SummaryExport) -> Totals {
        Totals::from(summary.totals())
    }

    /// `covered/count` strings of each metric (null where not counted), as
    /// `summary-device.json` and the snapshot show them.
    pub(crate) fn json(&self) -> Value {
        let m = |m: Option<Metric>| m.map_or(Value::Null, |m| Value::String(m.to_string()));
        json!({
            "lines": m(Some(self.lines)),
            "functions": m(Some(self.functions)),
            "regions": m(self.regions),
            "branches": m(self.branches),
        })
    }
}

impl From<&Counts> for Totals {
    fn from(c: &Counts) -> Totals {
        Totals { lines: c.lines, functions: c.functions, regions: Some(c.regions), branches: c.branches }
    }
}

/// `text` for HTML, in an element or in an attribute quoted either way:
/// the one escaper of every page the report writes (the HTML index, the
/// attribution and the device pages, the sources-changed banner).
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Cobertura XML (GitLab, Jenkins) converted from the lcov export.
/// `lcov` (the model's text, absolute paths) as Cobertura XML, its file
/// names relative to `base_dir`.
pub(crate) fn cobertura(ws: &workspace::Workspace, lcov: &str, base_dir: &Path, out: &Path) -> Result<()> {
    // A file name may hold any byte; the XML may not (`results::xml_text`).
    let lcov = crate::results::xml_text(lcov);
    let data = lcov2cobertura::parse_lines(std::io::BufRead::lines(lcov.as_bytes()), base_dir, &[])
        .map_err(|e| Error::new(format!("cannot read {} as lcov: {e}", out.display())))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let xml = lcov2cobertura::coverage_to_string(&data, now, lcov2cobertura::NullDemangler::new())
        .map_err(|e| Error::new(format!("cannot convert to Cobertura XML ({}): {e}", out.display())))?;
    ws.write(out, xml.as_bytes())
}

/// `prefix` as it starts a file name: ending in `/`; empty keeps paths.
fn dir_prefix(prefix: &str) -> String {
    if prefix.is_empty() || prefix.ends_with('/') { prefix.to_string() } else { format!("{prefix}/") }
}

/// lcov text with `prefix` taken off its `SF:` file names.
pub(crate) fn relative_lcov(text: &str, prefix: &str) -> String {
    let prefix = dir_prefix(prefix);
    if prefix.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("SF:").and_then(|f| f.strip_prefix(prefix.as_str())) {
            Some(rest) => {
                out.push_str("SF:");
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// `report/codecov.json`: the model in Codecov's own JSON coverage format
/// (`{"coverage": {file: {line: hits | "covered/total"}}}`), file names with
/// `prefix` taken off as in `coverage.lcov`. A line with branches of which
/// some, not all, were taken is partial: `"taken/total"`, as Codecov reads it.
pub(crate) fn codecov_json(model: &Lcov, prefix: &str) -> String {
    let prefix = dir_prefix(prefix);
    let mut coverage = serde_json::Map::new();
    for (file, c) in &model.files {
        let name = file.strip_prefix(prefix.as_str()).filter(|_| !prefix.is_empty()).unwrap_or(file);
        let mut branches: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for (&(line, _, _), &taken) in &c.branches {
            let b = branches.entry(line).or_default();
            b.0 += u64::from(taken > 0);
            b.1 += 1;
        }
        let lines: serde_json::Map<String, Value> = c
            .lines
            .iter()
            .map(|(&line, &hits)| {
                let value = match branches.get(&line) {
                    Some(&(taken, total)) if hits > 0 && taken < total => json!(format!("{taken}/{total}")),
                    _ => json!(hits),
                };
                (line.to_string(), value)
            })
            .collect();
        coverage.insert(name.to_string(), Value::Object(lines));
    }
    serde_json::to_string(&json!({ "coverage": coverage })).expect("a JSON value serializes")
}

/// lcov text whose relative `SF:` file names are made absolute under
/// `prefix` again (a baseline written by [`relative_lcov`]).
pub(crate) fn absolute_lcov(text: &str, prefix: &str) -> String {
    let prefix = dir_prefix(prefix);
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("SF:").filter(|f| !f.starts_with('/') && !prefix.is_empty()) {
            Some(rest) => {
                out.push_str("SF:");
                out.push_str(&prefix);
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// llvm-cov's JSON export with `prefix` taken off every string that starts
/// with it (the `filename`s and `filenames`).
pub(crate) fn relative_json(text: &str, prefix: &str) -> String {
    let prefix = dir_prefix(prefix);
    if prefix.is_empty() {
        return text.to_string();
    }
    let quoted = serde_json::to_string(&prefix).expect("a string serializes");
    text.replace(&quoted[..quoted.len() - 1], "\"")
}

pub(crate) fn percent(covered: u64, count: u64) -> f64 {
    if count == 0 { 100.0 } else { covered as f64 * 100.0 / count as f64 }
}

/// Whether any `CCL_COV_FAIL_UNDER_<METRIC>` bar is set (`bars`: the
/// variables as set, by name): known before the report is merged, so that a
/// run without one lists the check as ignored.
pub(crate) fn any_bar(bars: &BTreeMap<String, String>) -> bool {
    bars.values().any(|v| !v.is_empty())
}

/// Checks `CCL_COV_FAIL_UNDER_<METRIC>` bars against the totals; the
/// shortfalls, or `None` when no bar is set.
pub(crate) fn check_bars(summary: &SummaryExport, bars: &BTreeMap<String, String>) -> Result<Option<Vec<String>>> {
    let mut any = false;
    let mut short = Vec::new();
    for (metric, covered, count) in summary.totals().rows() {
        let Some((_, var)) = crate::env_names::FAIL_UNDER.iter().find(|(m, _)| *m == metric) else { continue };
        let value = bars.get(*var).map_or("", String::as_str);
        let Some(bar) = crate::env_names::percent(var, value)? else { continue };
        any = true;
        let got = percent(covered, count);
        if got < bar {
            short.push(format!(
                "{metric} {got:.2}% ({covered}/{count}) is under {}",
                crate::env_names::setting(var, value)
            ));
        }
    }
    Ok(any.then_some(short))
}

/// A summary export's totals as `covered/count` strings, as
/// `summary-device.json` shows them (`tests/device_coverage.rs` reads them so).
pub fn totals(summary: &SummaryExport) -> Value {
    Totals::of(summary).json()
}

/// The summary made comparable between machines and runs: paths relative to
/// the source roots, `covered/count` per file and in total.
pub(crate) fn normalize(summary: &SummaryExport, roots: &[&Path]) -> Value {
    let mut files = serde_json::Map::new();
    let mut sorted: Vec<&FileSummary> = summary.files().iter().collect();
    sorted.sort_by(|a, b| a.filename.cmp(&b.filename));
    for file in sorted {
        files.insert(relative(&file.filename, roots), Totals::from(&file.summary).json());
    }
    json!({ "totals": Totals::of(summary).json(), "files": files })
}

/// A summary snapshot as insta writes it (`source:` header, pretty JSON),
/// for a config that has none yet: copied into `snapshots/`, insta reads it.
pub(crate) fn snapshot_text(value: &Value) -> String {
    let json = serde_json::to_string_pretty(value).expect("a JSON value serializes");
    format!("---\nsource: {}\n---\n{json}\n", file!())
}

pub(crate) fn relative(path: &str, roots: &[&Path]) -> String {
    let p = Path::new(path);
    roots
        .iter()
        .filter_map(|root| p.strip_prefix(root).ok())
        .min_by_key(|rel| rel.components().count())
        .map_or_else(|| path.to_string(), |rel| rel.display().to_string())
}

/// What a report cannot vouch for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Health {
    /// Unreadable, altered or unrecorded profiles, moved to quarantine.
    pub(crate) quarantined: Vec<Quarantined>,
    pub(crate) merge_errors: Vec<String>,
    /// Profiles a trial recorded that are gone.
    pub(crate) missing: Vec<String>,
    /// Trials that exited 0 but left no profile.
    pub(crate) no_profile: Vec<String>,
    /// Timed out, interrupted or killed by a signal: their processes wrote no profile.
    pub(crate) no_coverage: Vec<String>,
    /// Killed under device coverage: `trial (why)`; see `TrialResult::device_counters_lost`.
    pub(crate) device_counters_lost: Vec<String>,
    /// Trial records that could not be read, moved to quarantine: `file (why)`.
    pub(crate) damaged_results: Vec<String>,
    /// Why the sources are no longer those the build was made from
    /// (`cache::manifest::sources_changed`): every format says so.
    pub(crate) sources_changed: Option<String>,
}

impl Health {
    /// From the trials' records, plus what the report itself found
    /// (`quarantined`, `missing`) while checking and merging profiles.
    pub fn new(results: &[TrialResult], quarantined: Vec<Quarantined>, missing: Vec<String>) -> Health {
        let mut health = Health { quarantined, missing, ..Health::default() };
        for r in results {
            if let Some(m) = &r.merge {
                health.quarantined.extend(m.quarantined.iter().cloned());
            }
            if let Some(e) = &r.merge_error {
                health.merge_errors.push(format!("{}: {e}", r.trial));
            }
            if r.no_profile {
                health.no_profile.push(r.trial.clone());
            }
            if matches!(r.status, Status::Timeout | Status::Interrupted) || r.signal.is_some() {
                health.no_coverage.push(format!("{} ({})", r.trial, r.reason));
            }
            if let Some(why) = &r.device_counters_lost {
                health.device_counters_lost.push(format!("{} ({why})", r.trial));
            }
        }
        health
    }

    /// Why the report's profiles cannot be trusted, or `None` if they can.
    /// Trials without coverage because they timed out are said, not failed.
    pub(crate) fn problems(&self) -> Option<String> {
        let mut problems = Vec::new();
        if !self.quarantined.is_empty() {
            let files: Vec<String> =
                self.quarantined.iter().map(|q| format!("    {}: {}", q.file.display(), q.reason)).collect();
            problems.push(format!(
                "{} profiles were unreadable or altered and moved to quarantine (reports use the rest):\n{}",
                self.quarantined.len(),
                files.join("\n")
            ));
        }
        if !self.damaged_results.is_empty() {
            problems.push(format!(
                "{} trial results were unreadable and moved to quarantine (their trials are not in the report):\n    {}",
                self.damaged_results.len(),
                self.damaged_results.join("\n    ")
            ));
        }
        if !self.merge_errors.is_empty() {
            problems.push(format!("merging failed for: {}", self.merge_errors.join("; ")));
        }
        if !self.missing.is_empty() {
            problems.push(format!("profiles vanished after their trials wrote them: {}", self.missing.join("; ")));
        }
        if !self.no_profile.is_empty() {
            problems.push(format!(
                "these trials exited 0 but left no profile (is the instrumented library the one loaded? check LD_LIBRARY_PATH): {}",
                self.no_profile.join(", ")
            ));
        }
        if problems.is_empty() {
            return None;
        }
        if !self.no_coverage.is_empty() {
            problems
                .push(format!("no coverage from these trials (timed out or killed): {}", self.no_coverage.join("; ")));
        }
        Some(problems.join("\n"))
    }
}

/// `report/meta.json`: which build, trials and runs a report came from, and
/// what it could not vouch for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReportMeta {
    pub(crate) build_id: String,
    pub(crate) generated_at: String,
    pub(crate) device_coverage: String,
    pub(crate) profiles_merged: usize,
    /// The run of the trial that started last, and earlier runs of this
    /// build whose trials were not run again: the report counts them all.
    pub(crate) latest_run: Option<RunOf>,
    pub(crate) earlier_runs: Vec<RunOf>,
    pub(crate) trials: Vec<MetaTrial>,
    pub(crate) quarantined: Vec<Quarantined>,
    pub(crate) missing: Vec<String>,
    pub(crate) no_coverage_from: Vec<String>,
    #[serde(default)]
    pub(crate) device_counters_lost: Vec<String>,
    pub(crate) exited_0_without_profile: Vec<String>,
    /// Set when the sources changed after the build: the report's lines are
    /// of the sources as they were built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) sources_changed: Option<String>,
    /// The report's own pages and files beside llvm-cov's, by what they hold.
    #[serde(default)]
    pub(crate) pages: BTreeMap<String, String>,
}

/// What `meta.json` lists under `pages`: written by the attribution,
/// minimal-suite, diff and baseline steps (the last two only when asked for).
const PAGES: [(&str, &str); 6] = [
    ("attribution_html", "attribution/index.html"),
    ("attribution", "attribution.json"),
    ("trials", "trials.json"),
    ("minimal_suite", "minimal-suite.json"),
    ("diff (CCL_COV_DIFF_BASE)", "diff.md"),
    ("baseline (CCL_COV_BASELINE)", "baseline.md"),
];

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct MetaTrial {
    pub(crate) trial: String,
    pub(crate) run_id: String,
    pub(crate) status: Status,
}

impl ReportMeta {
    pub fn new(
        manifest: &BuildManifest,
        results: &[TrialResult],
        profiles_merged: usize,
        health: &Health,
    ) -> ReportMeta {
        let runs = Runs::of(results);
        ReportMeta {
            build_id: manifest.build_id.clone(),
            generated_at: crate::exec::host::now(),
            device_coverage: manifest.device.summary(),
            profiles_merged,
            latest_run: runs.latest,
            earlier_runs: runs.earlier,
            trials: results
                .iter()
                .map(|r| MetaTrial { trial: r.trial.clone(), run_id: r.run_id.clone(), status: r.status })
                .collect(),
            quarantined: health.quarantined.clone(),
            missing: health.missing.clone(),
            no_coverage_from: health.no_coverage.clone(),
            device_counters_lost: health.device_counters_lost.clone(),
            exited_0_without_profile: health.no_profile.clone(),
            sources_changed: health.sources_changed.clone(),
            pages: PAGES.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        }
    }
}

/// `report/summary.md`: totals, the device-coverage decision, the trials'
/// outcomes and runs, and what the report could not vouch for.
pub(crate) fn markdown(
    config: &str,
    manifest: &BuildManifest,
    summary: &SummaryExport,
    results: &[TrialResult],
    health: &Health,
) -> String {
    let mut md = format!("## Coverage: {config} (build {})\n\n", manifest.build_id);
    if let Some(changed) = &health.sources_changed {
        md.push_str(&format!("**Sources changed after the build:** {changed}.\n\n"));
    }
    md.push_str("| | covered | total | % |\n|---|---:|---:|---:|\n");
    for (metric, covered, count) in summary.totals().rows() {
        md.push_str(&format!("| {metric} | {covered} | {count} | {:.2} |\n", percent(covered, count)));
    }
    md.push_str(&format!("\nDevice coverage: {}\n\n", manifest.device.summary()));
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    let runs: BTreeSet<&str> = results.iter().map(|r| r.run_id.as_str()).collect();
    md.push_str(&format!(
        "Trials: {} passed, {} failed, {} timed out, {} interrupted (runs {}).\n",
        count(Status::Passed),
        count(Status::Failed),
        count(Status::Timeout),
        count(Status::Interrupted),
        runs.into_iter().collect::<Vec<_>>().join(", ")
    ));
    let flaky: Vec<String> = results.iter().filter(|r| r.flaky).map(|r| format!("`{}`", r.trial)).collect();
    if !flaky.is_empty() {
        md.push_str(&format!("\n**Flaky:** {} passed only on a retry: {}.\n", flaky.len(), flaky.join(", ")));
    }
    if let Some(mixed) = Runs::of(results).mixed() {
        md.push_str(&format!("\n**Not one run:** {mixed}. Their coverage is counted.\n"));
    }
    if !health.quarantined.is_empty() {
        md.push_str(&format!("\nQuarantined profiles: {}\n", health.quarantined.len()));
    }
    if !health.missing.is_empty() {
        md.push_str(&format!("\nVanished profiles: {}\n", health.missing.join("; ")));
    }
    if !health.no_coverage.is_empty() {
        md.push_str(&format!("\nNo coverage from: {}\n", health.no_coverage.join("; ")));
    }
    if !health.device_counters_lost.is_empty() {
        md.push_str(&format!("\nDevice counters lost: {}\n", health.device_counters_lost.join("; ")));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPORT: &str = r#"{"data":[{"files":[
        {"filename":"/src/fixtures/ccl/src/init.cc","summary":{"lines":{"count":10,"covered":7,"percent":70},"functions":{"count":2,"covered":2,"percent":100},"instantiations":{"count":2,"covered":2,"percent":100},"regions":{"count":5,"covered":4,"percent":80},"branches":{"count":4,"covered":1,"percent":25}}},
        {"filename":"/elsewhere/gen.cc","summary":{"lines":{"count":1,"covered":0,"percent":0},"functions":{"count":1,"covered":0,"percent":0},"instantiations":{"count":1,"covered":0,"percent":0},"regions":{"count":1,"covered":0,"percent":0},"branches":{"count":0,"covered":0,"percent":0}}}],
        "totals":{"lines":{"count":11,"covered":7,"percent":63},"functions":{"count":3,"covered":2,"percent":66},"instantiations":{"count":3,"covered":2,"percent":66},"regions":{"count":6,"covered":4,"percent":66},"branches":{"count":4,"covered":1,"percent":25}}}],
        "type":"llvm.coverage.json.export","version":"3.0.1"}"#;

    #[test]
    fn normalize_makes_paths_relative_and_counts_compact() {
        let export = SummaryExport::parse(EXPORT).unwrap();
        let v = normalize(&export, &[Path::new("/src/fixtures"), Path::new("/src")]);
        assert_eq!(v["totals"]["lines"], "7/11");
        assert_eq!(v["files"]["ccl/src/init.cc"]["branches"], "1/4");
        assert_eq!(v["files"]["/elsewhere/gen.cc"]["functions"], "0/1");
        assert_eq!(
            export.totals().rows(),
            [("lines", 7, 11), ("functions", 2, 3), ("regions", 4, 6), ("branches", 1, 4)]
        );
        let bars = |lines: &str| BTreeMap::from([("CCL_COV_FAIL_UNDER_LINES".to_string(), lines.to_string())]);
        assert_eq!(check_bars(&export, &BTreeMap::new()).unwrap(), None);
        assert!(!any_bar(&BTreeMap::new()) && !any_bar(&bars("")));
        assert!(any_bar(&bars("60")));
        assert_eq!(check_bars(&export, &bars("60")).unwrap(), Some(vec![]));
        let short = check_bars(&export, &bars("70")).unwrap().unwrap();
        assert_eq!(short, ["lines 63.64% (7/11) is under CCL_COV_FAIL_UNDER_LINES=70"]);
        assert!(check_bars(&export, &bars("lots")).is_err());
        assert!(check_bars(&export, &bars("150")).is_err(), "a bar no coverage can reach");
        let metrics: Vec<&str> = crate::env_names::FAIL_UNDER.iter().map(|(m, _)| *m).collect();
        assert_eq!(export.totals().rows().iter().map(|r| r.0).collect::<Vec<_>>(), metrics, "every metric has a bar");
        for (_, var) in crate::env_names::FAIL_UNDER {
            let known = crate::env_names::lookup(var).map(|k| k.kind);
            assert_eq!(known, Some(crate::env_names::ValueKind::Percent), "{var} is a known percentage");
        }
    }

    #[test]
    fn the_text_summary_lays_out_the_totals_as_llvm_cov_report() {
        let export = SummaryExport::parse(EXPORT).unwrap();
        let text = summary_text(&export, &[Path::new("/src/fixtures")]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[0].starts_with("Filename ") && lines[0].ends_with("Missed Branches      Cover"), "{text}");
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        // Sorted by the name shown: the absolute path first.
        assert_eq!(cells(lines[2])[0], "/elsewhere/gen.cc");
        assert_eq!(
            cells(lines[3]),
            ["ccl/src/init.cc", "5", "1", "80.00%", "2", "0", "100.00%", "10", "3", "70.00%", "4", "3", "25.00%"]
        );
        assert_eq!(cells(lines[2])[10..], ["0", "0", "-"], "no branches: no percentage");
        assert!(lines[1].chars().all(|c| c == '-') && lines[4] == lines[1], "{text}");
        assert_eq!(cells(lines[5])[..4], ["TOTAL", "6", "2", "66.67%"]);
        assert_eq!(cells(lines[5])[7..10], ["11", "4", "63.64%"]);
    }

    #[test]
    fn a_written_snapshot_is_one_insta_accepts() {
        let dir = tempfile::tempdir().unwrap();
        let value = json!({"config": "mine", "files": {"a.cc": {"lines": "1/2"}}, "empty": [], "trials": 3});
        std::fs::write(dir.path().join("coverage_summary-mine.snap"), snapshot_text(&value)).unwrap();
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(dir.path());
        settings.set_prepend_module_to_snapshot(false);
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_json_snapshot!("coverage_summary-mine", value));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["coverage_summary-mine.snap"], "insta wrote nothing of its own");
    }

    #[test]
    fn objects_after_the_first_use_dash_object() {
        let inputs = ReportInputs {
            llvm_cov: "/llvm/bin/llvm-cov".into(),
            cxxfilt: None,
            profdata: "/ws/report/coverage.profdata".into(),
            objects: vec!["/b/libccl.so".into(), "/b/libccl-tuner.so".into()],
            ignore: IgnoreRule::new(&["^/usr/".into(), "tmpxft_".into()]).unwrap(),
            title: "t".into(),
        };
        assert_eq!(
            inputs.cmd("export").argv(),
            [
                "/llvm/bin/llvm-cov",
                "export",
                "-instr-profile=/ws/report/coverage.profdata",
                "/b/libccl.so",
                "-object",
                "/b/libccl-tuner.so",
                "-ignore-filename-regex=^/usr/|tmpxft_"
            ]
        );
    }

    fn trial(name: &str, status: &str, reason: &str) -> TrialResult {
        serde_json::from_value(json!({
            "trial": name, "slug": name.replace("::", "."), "collective": "AllReduce", "size": "1K",
            "variant": null, "build_id": "b", "run_id": "r1", "status": status, "reason": reason,
            "exit_code": 0, "signal": null, "started_at": "", "started_unix_ms": 0, "duration_s": 1.0,
            "timeout_s": 60, "launcher": "threads", "ranks": 1, "command": "", "argv": [], "env": [],
            "cwd": "/", "log": "/l", "profile_dir": "/p", "profiles": 1, "no_profile": false,
            "merge": null, "merge_error": null, "leftovers": 0, "perf": {"rows": [], "out_of_bounds": null}
        }))
        .unwrap()
    }

    #[test]
    fn health_fails_only_on_untrusted_or_missing_profiles() {
        let timed_out = trial("A::1K::t", "TIMEOUT", "TIMEOUT after 3s");
        let health = Health::new(std::slice::from_ref(&timed_out), Vec::new(), Vec::new());
        assert_eq!(health.no_coverage, ["A::1K::t (TIMEOUT after 3s)"]);
        assert_eq!(health.problems(), None, "a timeout alone is said, not failed");
        let bad = Quarantined { file: "/ws/quarantine/A.1K/x.profraw".into(), reason: "truncated".into() };
        let health = Health::new(&[timed_out], vec![bad], vec!["A::1K::b: gone".into()]);
        let problems = health.problems().unwrap();
        assert!(problems.starts_with("1 profiles were unreadable or altered"), "{problems}");
        assert!(problems.contains("    /ws/quarantine/A.1K/x.profraw: truncated"), "{problems}");
        assert!(problems.contains("profiles vanished after their trials wrote them: A::1K::b: gone"), "{problems}");
        assert!(problems.ends_with("no coverage from these trials (timed out or killed): A::1K::t (TIMEOUT after 3s)"));
        let mut no_profile = trial("A::1K::n", "FAILED", "coverage lost");
        no_profile.no_profile = true;
        assert!(Health::new(&[no_profile], Vec::new(), Vec::new()).problems().unwrap().contains("left no profile"));
    }

    #[test]
    fn markdown_gives_totals_outcomes_and_doubts() {
        let summary = json!({"data": [{"files": [], "totals": {
            "lines": {"covered": 3, "count": 4}, "functions": {"covered": 1, "count": 2},
            "regions": {"covered": 0, "count": 0}, "branches": {"covered": 1, "count": 4}
        }}]})
        .to_string();
        let summary = SummaryExport::parse(&summary).unwrap();
        let results = [trial("A::1K::a", "PASSED", ""), trial("A::1K::i", "INTERRUPTED", "INTERRUPTED by SIGINT")];
        let health = Health::new(&results, Vec::new(), Vec::new());
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &results, &health);
        assert!(md.starts_with("## Coverage: local (build b1)\n"), "{md}");
        assert!(md.contains("| lines | 3 | 4 | 75.00 |"), "{md}");
        assert!(md.contains("Trials: 1 passed, 0 failed, 0 timed out, 1 interrupted (runs r1)."), "{md}");
        assert!(md.contains("No coverage from: A::1K::i (INTERRUPTED by SIGINT)"), "{md}");
        assert!(!md.contains("Not one run") && !md.contains("Flaky"), "{md}");
        let flaky = TrialResult { flaky: true, ..trial("A::1K::f", "PASSED", "") };
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &[flaky], &health);
        assert!(md.contains("\n**Flaky:** 1 passed only on a retry: `A::1K::f`.\n"), "{md}");
        let later = TrialResult { run_id: "r2".into(), started_unix_ms: 1, ..trial("A::1K::l", "PASSED", "") };
        let mixed = [results[0].clone(), later];
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &mixed, &health);
        assert!(md.contains("\n**Not one run:** 1 of 2 trial results come from earlier runs of this build"), "{md}");
        assert!(md.contains(": A::1K::a (run r1, started ). Their coverage is counted.\n"), "{md}");
        assert!(!md.contains("Device counters lost"), "{md}");
        let mut lost = trial("A::1G::t", "TIMEOUT", "TIMEOUT after 1800s");
        lost.device_counters_lost = Some("TIMEOUT after 1800s: drained only at exit".into());
        let health = Health::new(std::slice::from_ref(&lost), Vec::new(), Vec::new());
        let md = markdown("local", &crate::build::cache::test_manifest("b1"), &summary, &[lost], &health);
        assert!(md.contains("\nDevice counters lost: A::1G::t (TIMEOUT after 1800s: drained only at exit)\n"), "{md}");
    }

    #[test]
    fn meta_names_the_build_trials_and_doubts() {
        let results = [trial("A::1K::a", "PASSED", "")];
        let health = Health { missing: vec!["x".into()], ..Health::default() };
        let meta = ReportMeta::new(&crate::build::cache::test_manifest("b1"), &results, 7, &health);
        let v = serde_json::to_value(&meta).unwrap();
        assert_eq!(v["build_id"], "b1");
        assert_eq!(v["profiles_merged"], 7);
        assert_eq!(v["trials"], json!([{"trial": "A::1K::a", "run_id": "r1", "status": "PASSED"}]));
        assert_eq!(v["latest_run"], json!({"run_id": "r1", "started_at": "", "trials": ["A::1K::a"]}));
        assert_eq!(v["earlier_runs"], json!([]));
        assert_eq!(v["missing"], json!(["x"]));
        assert_eq!(v["device_counters_lost"], json!([]));
        assert_eq!(v["pages"]["attribution_html"], "attribution/index.html");
        let health = Health { device_counters_lost: vec!["A::1G (killed)".into()], ..Health::default() };
        let v = serde_json::to_value(ReportMeta::new(&crate::build::cache::test_manifest("b1"), &results, 7, &health))
            .unwrap();
        assert_eq!(v["device_counters_lost"], json!(["A::1G (killed)"]));
    }

    #[test]
    fn codecov_json_gives_hits_and_partial_branches_per_line() {
        let lcov = lcov::parse_lcov(
            "SF:/src/lib/a.cc\nDA:1,3\nDA:2,0\nDA:3,1\nBRDA:3,0,0,1\nBRDA:3,0,1,0\nDA:4,2\nBRDA:4,0,0,1\nBRDA:4,0,1,1\nend_of_record\nSF:/usr/x.h\nDA:7,1\nend_of_record\n",
            "t",
        )
        .unwrap();
        let v: Value = serde_json::from_str(&codecov_json(&lcov, "/src/lib")).unwrap();
        assert_eq!(
            v,
            json!({"coverage": {"a.cc": {"1": 3, "2": 0, "3": "1/2", "4": 2}, "/usr/x.h": {"7": 1}}}),
            "a line with every branch taken is plain hits"
        );
    }

    /// A source file whose name holds ESC and BEL: cobertura.xml still
    /// parses as XML 1.0 (it was `not well-formed (invalid token)`).
    #[test]
    fn cobertura_is_valid_xml_whatever_the_file_names_hold() {
        let dir = tempfile::tempdir().unwrap();
        let ws = workspace::Workspace::new(&dir.path().join("ws")).unwrap();
        ws.create().unwrap();
        let lcov = "SF:/src/lib/a\u{1b}]0;x\u{7}.cc\nFN:1,f\nFNDA:1,f\nDA:1,1\nDA:2,0\nend_of_record\n";
        let out = ws.report_dir().join("cobertura.xml");
        cobertura(&ws, lcov, Path::new("/src/lib"), &out).unwrap();
        let xml = std::fs::read_to_string(&out).unwrap();
        crate::results::assert_xml_1_0(&xml);
        assert!(xml.contains("a\\x1B]0;x\\x07.cc"), "{xml}");
    }

    #[test]
    fn paths_are_made_relative_to_the_prefix_and_back() {
        let lcov = "SF:/src/lib/a.cc\nDA:1,1\nend_of_record\nSF:/usr/include/x.h\nDA:2,0\nend_of_record\n";
        let rel = relative_lcov(lcov, "/src/lib");
        assert_eq!(rel, "SF:a.cc\nDA:1,1\nend_of_record\nSF:/usr/include/x.h\nDA:2,0\nend_of_record\n");
        assert_eq!(absolute_lcov(&rel, "/src/lib/"), lcov);
        assert_eq!(relative_lcov(lcov, ""), lcov, "an empty prefix keeps absolute paths");
        let json = r#"{"filename":"/src/lib/a.cc","filenames":["/src/lib/b.cc","/src/library.cc"]}"#;
        assert_eq!(relative_json(json, "/src/lib"), r#"{"filename":"a.cc","filenames":["b.cc","/src/library.cc"]}"#);
    }
}
