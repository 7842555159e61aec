//! The formats converted from the model's lcov text: Cobertura's XML,
//! Codecov's JSON, and file names made relative to the sources and back.

use crate::coverage::lcov::Lcov;
use crate::error::{Error, Result};
use crate::workspace;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

/// Cobertura XML (GitLab, Jenkins) converted from the lcov export.
/// `lcov` (the model's text, absolute paths) as Cobertura XML, its file
/// names relative to `base_dir`.
pub(crate) fn cobertura(ws: &workspace::Workspace, lcov: &str, base_dir: &Path, out: &Path) -> Result<()> {
    // A file name may hold any byte; the XML may not (`results::junit::xml_text`).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov;

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
}
