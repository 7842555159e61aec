//! llvm-cov's JSON exports (`-summary-only` and the full one) with the
//! model's totals: every file's `summary` and the `totals` get the lines,
//! functions, instantiations and branches of the lcov model
//! ([`crate::coverage::lcov`]); regions and MC/DC, which lcov cannot carry,
//! stay llvm-cov's. So `summary.json`, `coverage.json` and everything read
//! from them give the totals that `coverage.lcov` and Cobertura give.

use crate::coverage::lcov::{FileCoverage, Lcov, Tallies, Tally};
use crate::coverage::source_names::SourceNames;
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
/// that the model lacks has no lines, functions or branches. Each file is
/// named as the model names it ([`SourceNames`]), and files that get one
/// name become one entry ([`merge_copy`]). `origin` names the export in errors.
pub(crate) fn apply(export: &mut Value, model: &Lcov, names: &SourceNames, origin: &str) -> Result<()> {
    let bad = |what: &str| Error::new(format!("{origin}: not an llvm-cov JSON export: {what}"));
    let data = export
        .get_mut("data")
        .and_then(Value::as_array_mut)
        .and_then(|d| d.first_mut())
        .ok_or_else(|| bad("no data"))?;
    rename_functions(data, names);
    let files = data.get_mut("files").and_then(Value::as_array_mut).ok_or_else(|| bad("no files"))?;
    rename_files(files, names, &bad)?;
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

/// The functions of a full export with their files named as the model names them.
fn rename_functions(data: &mut Value, names: &SourceNames) {
    let functions = data.get_mut("functions").and_then(Value::as_array_mut).into_iter().flatten();
    for filenames in functions.filter_map(|f| f.get_mut("filenames").and_then(Value::as_array_mut)) {
        for name in filenames.iter_mut() {
            if let Some(reported) = name.as_str() {
                *name = json!(names.name(reported));
            }
        }
    }
}

/// `files` (an export's) each named as the model names it; an entry whose name an earlier
/// one already has is merged into it ([`merge_copy`]).
fn rename_files(files: &mut Vec<Value>, names: &SourceNames, bad: &dyn Fn(&str) -> Error) -> Result<()> {
    let mut out: Vec<Value> = Vec::with_capacity(files.len());
    let mut at: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for mut file in files.drain(..) {
        let reported = file.get("filename").and_then(Value::as_str).ok_or_else(|| bad("a file without a filename"))?;
        let name = names.name(reported);
        file["filename"] = json!(name);
        if let Some(&i) = at.get(&name) {
            merge_copy(&mut out[i], &file);
        } else {
            at.insert(name, out.len());
            out.push(file);
        }
    }
    *files = out;
    Ok(())
}

/// `copy`, another copy's entry of one source file, merged into `file`: its lists (segments,
/// branches, expansions, MC/DC records) added, segments kept in source order; its summary's
/// counts added. Lines, functions and branches are then the model's, set after this; regions
/// stay llvm-cov's, which counts each copy's regions as regions of the objects, so that the
/// files' regions add up to llvm-cov's totals.
fn merge_copy(file: &mut Value, copy: &Value) {
    let (Some(file), Some(copy)) = (file.as_object_mut(), copy.as_object()) else { return };
    for (key, theirs) in copy {
        match (file.get_mut(key), theirs) {
            (Some(Value::Array(mine)), Value::Array(theirs)) => {
                mine.extend(theirs.iter().cloned());
                if key == "segments" {
                    let at = |s: &Value| (s[0].as_u64().unwrap_or(0), s[1].as_u64().unwrap_or(0));
                    mine.sort_by_key(at);
                }
            }
            (Some(Value::Object(mine)), Value::Object(theirs)) if key == "summary" => {
                for (metric, counts) in theirs {
                    let Some(Value::Object(m)) = mine.get_mut(metric) else { continue };
                    for field in ["count", "covered"] {
                        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
                        let sum = n(m.get(field)).saturating_add(n(counts.get(field)));
                        m.insert(field.into(), json!(sum));
                    }
                    let (count, covered) = (m["count"].as_u64().unwrap_or(0), m["covered"].as_u64().unwrap_or(0));
                    if m.contains_key("notcovered") {
                        m.insert("notcovered".into(), json!(count.saturating_sub(covered)));
                    }
                    let percent = if count == 0 { 0.0 } else { covered as f64 * 100.0 / count as f64 };
                    m.insert("percent".into(), json!(percent));
                }
            }
            _ => {}
        }
    }
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
        apply(&mut export, &model, &SourceNames::default(), "t").unwrap();
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
        let err =
            apply(&mut json!({"data": []}), &model, &SourceNames::default(), "summary.json").unwrap_err().to_string();
        assert!(err.starts_with("summary.json: not an llvm-cov JSON export: no data"), "{err}");
    }

    #[test]
    fn copies_of_one_source_are_one_entry_and_generated_files_are_named_by_the_build() {
        let dir = tempfile::tempdir().unwrap();
        let (src, build) = (dir.path().join("lib"), dir.path().join("builds/9f"));
        std::fs::create_dir_all(src.join("include")).unwrap();
        std::fs::create_dir_all(build.join("include")).unwrap();
        std::fs::write(src.join("include/h.h"), "int h;\n").unwrap();
        std::fs::write(build.join("include/h.h"), "int h;\n").unwrap();
        std::fs::write(build.join("gen.cc"), "int g;\n").unwrap();
        let names = SourceNames::new(&src, &build);
        let (header, copy, generated) = (
            src.join("include/h.h").display().to_string(),
            build.join("include/h.h").display().to_string(),
            build.join("gen.cc").display().to_string(),
        );
        let regions = |count: u64, covered: u64| {
            json!({"lines": {"count": 0, "covered": 0, "percent": 0.0},
                "regions": {"count": count, "covered": covered, "notcovered": count - covered, "percent": 0.0}})
        };
        let mut export = json!({"data": [{
            "files": [
                {"filename": header, "segments": [[1, 1, 2, true, true, false], [5, 1, 0, false, false, false]], "summary": regions(2, 1)},
                {"filename": copy, "segments": [[3, 1, 4, true, true, false]], "summary": regions(1, 1)},
                {"filename": generated, "segments": [], "summary": regions(1, 0)}],
            "functions": [{"name": "f", "filenames": [copy, generated]}],
            "totals": {}}]});
        let model = parse_lcov(
            &format!("SF:{header}\nDA:1,2\nDA:3,4\nend_of_record\nSF:<build>/gen.cc\nDA:1,0\nend_of_record\n"),
            "t",
        )
        .unwrap();
        apply(&mut export, &model, &names, "t").unwrap();
        let data = &export["data"][0];
        let files: Vec<&str> =
            data["files"].as_array().unwrap().iter().map(|f| f["filename"].as_str().unwrap()).collect();
        assert_eq!(files, [header.as_str(), "<build>/gen.cc"]);
        let merged = &data["files"][0];
        assert_eq!(
            merged["segments"],
            json!([[1, 1, 2, true, true, false], [3, 1, 4, true, true, false], [5, 1, 0, false, false, false]])
        );
        assert_eq!(
            (merged["summary"]["regions"]["count"].as_u64(), merged["summary"]["regions"]["notcovered"].as_u64()),
            (Some(3), Some(1))
        );
        assert_eq!(merged["summary"]["lines"]["count"], 2, "the model's lines, once");
        assert_eq!(data["functions"][0]["filenames"], json!([header, "<build>/gen.cc"]));
        assert_eq!(data["totals"]["lines"]["count"], 3);
    }
}
