//! llvm-cov's JSON exports (`-summary-only` and the full one) with the
//! model's totals: every file's `summary` and the `totals` get the lines,
//! functions, instantiations and branches of the lcov model
//! ([`crate::coverage::lcov`]); regions and MC/DC, which lcov cannot carry,
//! stay llvm-cov's. So `summary.json`, `coverage.json` and everything read
//! from them give the totals that `coverage.lcov` and Cobertura give.

use crate::coverage::lcov::{FileCoverage, Lcov, Tallies, Tally};
use crate::error::{Error, Result};
use serde_json::{Map, Value, json};

/// A metric as llvm-cov exports it: its percentage is 0 when nothing
/// counts, and branches (and regions) also say how many were not covered.
fn metric(t: Tally, with_notcovered: bool) -> Value {
    let percent = if t.count == 0 { 0.0 } else { t.covered as f64 * 100.0 / t.count as f64 };
    let mut m = json!({ "count": t.count, "covered": t.covered, "percent": percent });
    if with_notcovered {
        m["notcovered"] = json!(t.count - t.covered);
    }
    m
}

/// Writes `tallies` into one `summary` (or `totals`) object.
fn set_tallies(summary: &mut Map<String, Value>, tallies: &Tallies) {
    summary.insert("lines".into(), metric(tallies.lines, false));
    summary.insert("functions".into(), metric(tallies.functions, false));
    summary.insert("instantiations".into(), metric(tallies.instantiations, false));
    summary.insert("branches".into(), metric(tallies.branches, true));
}

/// Gives `export` (llvm-cov's JSON export, parsed) the model's totals. A
/// file of the model that llvm-cov's export lacks (NVIDIA kernel lines of a
/// file without host code) is added, with no regions and, in a full
/// export, empty segments, branches and expansions; a file of the export
/// that the model lacks has no lines, functions or branches. `origin`
/// names the export in errors.
pub(crate) fn apply(export: &mut Value, model: &Lcov, origin: &str) -> Result<()> {
    let bad = |what: &str| Error::new(format!("{origin}: not an llvm-cov JSON export: {what}"));
    let data = export
        .get_mut("data")
        .and_then(Value::as_array_mut)
        .and_then(|d| d.first_mut())
        .ok_or_else(|| bad("no data"))?;
    let files = data.get_mut("files").and_then(Value::as_array_mut).ok_or_else(|| bad("no files"))?;
    let mut seen = std::collections::BTreeSet::new();
    let empty = FileCoverage::default();
    let mut totals = Tallies::default();
    for file in files.iter_mut() {
        let name = file.get("filename").and_then(Value::as_str).ok_or_else(|| bad("a file without a filename"))?;
        let tallies = model.files.get(name).unwrap_or(&empty).tallies();
        seen.insert(name.to_string());
        totals += tallies;
        let summary =
            file.get_mut("summary").and_then(Value::as_object_mut).ok_or_else(|| bad("a file without a summary"))?;
        set_tallies(summary, &tallies);
    }
    // The keys beside `summary` that hold lists in a full export.
    let lists: Vec<String> = files
        .first()
        .and_then(Value::as_object)
        .map(|f| f.iter().filter(|(_, v)| v.is_array()).map(|(k, _)| k.clone()).collect())
        .unwrap_or_default();
    for (name, coverage) in model.files.iter().filter(|(name, _)| !seen.contains(*name)) {
        let tallies = coverage.tallies();
        totals += tallies;
        let mut summary = Map::new();
        set_tallies(&mut summary, &tallies);
        summary.insert("regions".into(), metric(Tally::default(), true));
        let mut file = Map::new();
        file.insert("filename".into(), json!(name));
        file.insert("summary".into(), Value::Object(summary));
        for list in &lists {
            file.insert(list.clone(), json!([]));
        }
        files.push(Value::Object(file));
    }
    let total = data.get_mut("totals").and_then(Value::as_object_mut).ok_or_else(|| bad("no totals"))?;
    set_tallies(total, &totals);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov::parse_lcov;
    use crate::coverage::llvm_export::SummaryExport;

    #[test]
    fn the_export_gets_the_models_totals_and_keeps_its_regions() {
        let mut export = json!({"data": [{"files": [
            {"filename": "/s/a.cc", "segments": [[1, 1, 2, true, true, false]], "summary": {
                "lines": {"count": 2, "covered": 1, "percent": 50.0},
                "functions": {"count": 1, "covered": 1, "percent": 100.0},
                "instantiations": {"count": 1, "covered": 1, "percent": 100.0},
                "regions": {"count": 4, "covered": 3, "notcovered": 1, "percent": 75.0},
                "branches": {"count": 0, "covered": 0, "notcovered": 0, "percent": 0.0}}},
            {"filename": "/s/empty.h", "segments": [], "summary": {
                "lines": {"count": 0, "covered": 0, "percent": 0.0},
                "functions": {"count": 0, "covered": 0, "percent": 0.0},
                "instantiations": {"count": 0, "covered": 0, "percent": 0.0},
                "regions": {"count": 0, "covered": 0, "notcovered": 0, "percent": 0.0},
                "branches": {"count": 0, "covered": 0, "notcovered": 0, "percent": 0.0}}}],
            "totals": {"lines": {"count": 2, "covered": 1, "percent": 50.0},
                "functions": {"count": 1, "covered": 1, "percent": 100.0},
                "regions": {"count": 4, "covered": 3, "notcovered": 1, "percent": 75.0},
                "branches": {"count": 0, "covered": 0, "notcovered": 0, "percent": 0.0}}}],
            "type": "llvm.coverage.json.export", "version": "3.0.1"});
        // a.cc has a macro's line (9) llvm-cov's summary left out; k.cu is a kernel file only the model has.
        let model = parse_lcov(
            "SF:/s/a.cc\nFN:1,f\nFNDA:2,f\nDA:1,2\nDA:2,0\nDA:9,2\nBRDA:1,0,0,1\nBRDA:1,0,1,0\nend_of_record\n\
             SF:/s/k.cu\nDA:5,1\nend_of_record\n",
            "t",
        )
        .unwrap();
        apply(&mut export, &model, "t").unwrap();
        let summary = SummaryExport::parse(&export.to_string()).unwrap();
        assert_eq!(
            summary.totals().rows(),
            [("lines", 3, 4), ("functions", 1, 1), ("regions", 3, 4), ("branches", 1, 2)]
        );
        let files = &export["data"][0]["files"];
        assert_eq!(files[0]["summary"]["lines"], json!({"count": 3, "covered": 2, "percent": 200.0 / 3.0}));
        assert_eq!(files[0]["summary"]["branches"]["notcovered"], 1);
        assert_eq!(files[0]["segments"], json!([[1, 1, 2, true, true, false]]), "the rest is llvm-cov's");
        assert_eq!(files[1]["summary"]["lines"]["count"], 0);
        assert_eq!(files[2]["filename"], "/s/k.cu");
        assert_eq!(
            (files[2]["summary"]["regions"]["count"].as_u64(), files[2]["segments"].clone()),
            (Some(0), json!([]))
        );
        assert_eq!(export["data"][0]["totals"]["instantiations"]["count"], 1);
        let err = apply(&mut json!({"data": []}), &model, "summary.json").unwrap_err().to_string();
        assert!(err.starts_with("summary.json: not an llvm-cov JSON export: no data"), "{err}");
    }
}
