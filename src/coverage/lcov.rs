//! The one coverage model every report reads: lcov's lines, functions and
//! branches with their counts, per source file. llvm-cov's host export and
//! NVIDIA's kernel lines (`sass::to_lcov`) both feed it, as lcov text, and
//! records of one file add up: a union.

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// One lcov tracefile: per source file, the hits of every instrumented line
/// and of every function.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Lcov {
    pub files: BTreeMap<String, FileCoverage>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileCoverage {
    /// Line number → execution count (`DA:line,count`).
    pub(crate) lines: BTreeMap<u32, u64>,
    /// Function name → (first line, execution count) (`FN`, `FNDA`).
    pub(crate) functions: BTreeMap<String, (u32, u64)>,
    /// (line, block, branch) → times taken (`BRDA`; `-`, never reached, is 0).
    pub(crate) branches: BTreeMap<(u32, String, String), u64>,
}

impl Lcov {
    /// Drops every line, function and branch that was not covered.
    pub(crate) fn retain_covered(&mut self) {
        for f in self.files.values_mut() {
            f.lines.retain(|_, n| *n > 0);
            f.functions.retain(|_, (_, n)| *n > 0);
            f.branches.retain(|_, n| *n > 0);
        }
    }
}

impl FileCoverage {
    pub fn covered_lines(&self) -> impl Iterator<Item = u32> + '_ {
        self.lines.iter().filter(|(_, n)| **n > 0).map(|(l, _)| *l)
    }

    pub(crate) fn covered_functions(&self) -> impl Iterator<Item = &str> + '_ {
        self.functions.iter().filter(|(_, (_, n))| *n > 0).map(|(f, _)| f.as_str())
    }

    /// The branches taken at least once.
    pub fn covered_branches(&self) -> impl Iterator<Item = &(u32, String, String)> + '_ {
        self.branches.iter().filter(|(_, n)| **n > 0).map(|(b, _)| b)
    }
}

/// Parses an lcov tracefile (`origin` names it in errors). Records of the
/// same source file are added up; records lcov writes that are not about
/// lines, functions or branches (totals, test names) are skipped.
pub fn parse_lcov(text: &str, origin: &str) -> Result<Lcov> {
    let mut lcov = Lcov::default();
    let mut current: Option<String> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        let bad = |what: &str| Error::new(format!("{origin}:{}: {what}: {line:?}", n + 1));
        let Some((key, value)) = line.split_once(':') else {
            if line == "end_of_record" {
                current = None;
            } else if !line.is_empty() {
                return Err(bad("not an lcov record"));
            }
            continue;
        };
        if key == "SF" {
            lcov.files.entry(value.to_string()).or_default();
            current = Some(value.to_string());
            continue;
        }
        let file = match key {
            "DA" | "FN" | "FNDA" | "BRDA" => {
                let name = current.as_ref().ok_or_else(|| bad(&format!("{key} outside a file record (no SF)")))?;
                lcov.files.entry(name.clone()).or_default()
            }
            _ => continue,
        };
        match key {
            "DA" => {
                let mut parts = value.split(',');
                let line_no = parts.next().and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| bad("bad line number"))?;
                let count = parts.next().and_then(parse_count).ok_or_else(|| bad("bad execution count"))?;
                let hits = file.lines.entry(line_no).or_insert(0);
                *hits = hits.saturating_add(count);
            }
            "FN" => {
                // lcov 1.x: `FN:line,name`; lcov 2.x: `FN:line,end,name`.
                let mut parts = value.splitn(3, ',');
                let start = parts.next().and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| bad("bad line number"))?;
                let rest: Vec<&str> = parts.collect();
                let name = match rest.as_slice() {
                    [end, name] if end.parse::<u32>().is_ok() => (*name).to_string(),
                    [name] => (*name).to_string(),
                    [a, b] => format!("{a},{b}"),
                    _ => return Err(bad("no function name")),
                };
                file.functions.entry(name).or_insert((start, 0)).0 = start;
            }
            "BRDA" => {
                let mut parts = value.splitn(4, ',');
                let line_no = parts.next().and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| bad("bad line number"))?;
                let (Some(block), Some(branch), Some(taken)) = (parts.next(), parts.next(), parts.next()) else {
                    return Err(bad("expected BRDA:line,block,branch,taken"));
                };
                let taken =
                    if taken.trim() == "-" { 0 } else { parse_count(taken).ok_or_else(|| bad("bad taken count"))? };
                let hits = file.branches.entry((line_no, block.to_string(), branch.to_string())).or_insert(0);
                *hits = hits.saturating_add(taken);
            }
            _ => {
                let (count, name) = value.split_once(',').ok_or_else(|| bad("no function name"))?;
                let count = parse_count(count).ok_or_else(|| bad("bad execution count"))?;
                let entry = file.functions.entry(name.to_string()).or_insert((0, 0));
                entry.1 = entry.1.saturating_add(count);
            }
        }
    }
    Ok(lcov)
}

/// An lcov count: a non-negative integer (some producers write negative
/// counts for bad data, or floats: both are errors, never a panic).
fn parse_count(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_functions_and_branches_add_up_across_records() {
        let text = "SF:/s/a.cc\nFN:3,f\nFNDA:0,f\nDA:3,0\nDA:4,2\nBRDA:4,0,0,2\nBRDA:4,0,1,-\nend_of_record\n\
                    SF:/s/a.cc\nFNDA:1,f\nDA:3,1\nBRDA:4,0,1,5\nBRDA:9,0,0,0\nend_of_record\n";
        let lcov = parse_lcov(text, "t").unwrap();
        let a = &lcov.files["/s/a.cc"];
        assert_eq!(a.lines, BTreeMap::from([(3, 1), (4, 2)]));
        assert_eq!(a.functions["f"], (3, 1));
        let b = |l, x: &str, y: &str| (l, x.to_string(), y.to_string());
        assert_eq!(a.branches, BTreeMap::from([(b(4, "0", "0"), 2), (b(4, "0", "1"), 5), (b(9, "0", "0"), 0)]));
        assert_eq!(a.covered_branches().count(), 2);
        for bad in ["SF:x\nBRDA:4,0\n", "SF:x\nBRDA:4,0,0,many\n", "BRDA:1,0,0,1\n"] {
            assert!(parse_lcov(bad, "t").is_err(), "{bad:?}");
        }
    }
}
