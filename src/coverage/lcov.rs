//! The one coverage model every report reads: lcov's lines, functions and
//! branches with their counts, per source file. llvm-cov's host export and
//! the device lines (`device::lines::to_lcov`) both feed it, as lcov text folded
//! into one record per file ([`fold_in`]), and records of one file add up: a
//! union. Every total of lines, functions
//! and branches in every report format is [`FileCoverage::tallies`] of it
//! (regions, which lcov cannot carry, are llvm-cov's: `model.rs`).

use crate::bail;
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
    pub fn retain_covered(&mut self) {
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

    /// The first lines of the functions that ran: a function is its first
    /// line, as llvm-cov groups a template's instantiations into one.
    pub(crate) fn covered_function_starts(&self) -> impl Iterator<Item = u32> + '_ {
        self.function_starts().into_iter().filter(|(_, ran)| *ran).map(|(line, _)| line)
    }

    /// Each function's first line and whether any of its instantiations ran.
    fn function_starts(&self) -> BTreeMap<u32, bool> {
        let mut starts = BTreeMap::new();
        for (start, hits) in self.functions.values() {
            *starts.entry(*start).or_insert(false) |= *hits > 0;
        }
        starts
    }

    /// The file's totals as the model counts them: every `DA` line (those
    /// of macro expansions too, which llvm-cov's summary leaves out), each
    /// function once however many instantiations it has (as llvm-cov), each
    /// instantiation (`FN` record), each `BRDA` branch.
    pub fn tallies(&self) -> Tallies {
        let tally = |covered: usize, count: usize| Tally { covered: covered as u64, count: count as u64 };
        let starts = self.function_starts();
        Tallies {
            lines: tally(self.covered_lines().count(), self.lines.len()),
            functions: tally(starts.values().filter(|ran| **ran).count(), starts.len()),
            instantiations: tally(self.covered_functions().count(), self.functions.len()),
            branches: tally(self.covered_branches().count(), self.branches.len()),
        }
    }
}

impl FileCoverage {
    /// Adds `other`, the coverage of another copy of the same source file (the same bytes
    /// under another path, `coverage/source_names.rs`): the copies' code is the file's code,
    /// counted once. A line's count is its hottest copy's, as llvm-cov counts a line as its
    /// hottest region and a device line as its hottest instruction; a function and a branch
    /// are the most-run copy's. Summing would count twice an inline function that both copies
    /// compiled and the linker kept once: both copies' records read its one set of counters.
    pub(crate) fn merge_copy(&mut self, other: &FileCoverage) {
        for (line, hits) in &other.lines {
            let mine = self.lines.entry(*line).or_insert(0);
            *mine = (*mine).max(*hits);
        }
        for (name, (start, hits)) in &other.functions {
            let mine = self.functions.entry(name.clone()).or_insert((*start, 0));
            mine.1 = mine.1.max(*hits);
        }
        for (branch, taken) in &other.branches {
            let mine = self.branches.entry(branch.clone()).or_insert(0);
            *mine = (*mine).max(*taken);
        }
    }

    /// The file's lcov record, in llvm-cov's order of record lines, its totals its own
    /// ([`FileCoverage::tallies`]); a branch never reached is 0.
    pub(crate) fn record(&self, name: &str) -> String {
        use std::fmt::Write as _;
        let mut out = format!("TN:\nSF:{name}\n");
        let mut functions: Vec<(&String, &(u32, u64))> = self.functions.iter().collect();
        functions.sort_by_key(|(name, (start, _))| (*start, *name));
        // Writing to a String cannot fail.
        for (name, (start, _)) in &functions {
            let _ = writeln!(out, "FN:{start},{name}");
        }
        for (name, (_, hits)) in &functions {
            let _ = writeln!(out, "FNDA:{hits},{name}");
        }
        let t = self.tallies();
        let _ = writeln!(out, "FNF:{}\nFNH:{}", t.functions.count, t.functions.covered);
        let number = |id: &str| id.parse::<u64>().map_or((1, 0, id.to_string()), |n| (0, n, String::new()));
        let mut branches: Vec<_> = self.branches.iter().collect();
        branches.sort_by_key(|((line, block, branch), _)| (*line, number(block), number(branch)));
        for ((line, block, branch), taken) in branches {
            let _ = writeln!(out, "BRDA:{line},{block},{branch},{taken}");
        }
        let _ = writeln!(out, "BRF:{}\nBRH:{}", t.branches.count, t.branches.covered);
        for (line, hits) in &self.lines {
            let _ = writeln!(out, "DA:{line},{hits}");
        }
        let _ = writeln!(out, "LF:{}\nLH:{}\nend_of_record", t.lines.count, t.lines.covered);
        out
    }
}

/// Covered and total of one metric.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub covered: u64,
    pub count: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Tally) {
        self.covered += other.covered;
        self.count += other.count;
    }
}

/// What the model counts, per file or in total.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tallies {
    pub lines: Tally,
    pub functions: Tally,
    pub instantiations: Tally,
    pub branches: Tally,
}

impl std::ops::AddAssign for Tallies {
    fn add_assign(&mut self, other: Tallies) {
        self.lines += other.lines;
        self.functions += other.functions;
        self.instantiations += other.instantiations;
        self.branches += other.branches;
    }
}

/// lcov text whose per-record totals (`FNF`, `FNH`, `BRF`, `BRH`, `LF`,
/// `LH`) are the record's own, as [`FileCoverage::tallies`] counts them.
/// llvm-cov writes its summary's there, which leave out the lines of macro
/// expansions that its `DA` records list, so a reader of `LF` would see
/// another total than one of `DA`. A missing total is added before
/// `end_of_record`.
pub(crate) fn recount(text: &str, origin: &str) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut record: Vec<&str> = Vec::new();
    for line in text.split_inclusive('\n') {
        record.push(line);
        if line.trim_end() == "end_of_record" {
            recount_record(&record, origin, &mut out)?;
            record.clear();
        }
    }
    out.extend(record);
    Ok(out)
}

/// One record (`SF` to `end_of_record`) of [`recount`].
fn recount_record(record: &[&str], origin: &str, out: &mut String) -> Result<()> {
    let lcov = parse_lcov(&record.concat(), origin)?;
    let tallies = lcov.files.values().next().map(FileCoverage::tallies).unwrap_or_default();
    let totals = [
        ("FNF", tallies.functions.count),
        ("FNH", tallies.functions.covered),
        ("BRF", tallies.branches.count),
        ("BRH", tallies.branches.covered),
        ("LF", tallies.lines.count),
        ("LH", tallies.lines.covered),
    ];
    let mut written = [false; 6];
    for line in record {
        let key = line.split_once(':').map(|(k, _)| k);
        if let Some(i) = totals.iter().position(|(k, _)| Some(*k) == key) {
            out.push_str(&format!("{}:{}\n", totals[i].0, totals[i].1));
            written[i] = true;
            continue;
        }
        if line.trim_end() == "end_of_record" {
            for ((k, v), _) in totals.iter().zip(written).filter(|(_, done)| !done) {
                out.push_str(&format!("{k}:{v}\n"));
            }
        }
        out.push_str(line);
    }
    Ok(())
}

/// `host` lcov with the records of `extra` (NVIDIA's kernel lines) folded in: one record per
/// source file, as genhtml, Codecov and Cobertura readers each merge two records of one file
/// their own way. A file in both keeps its host record, line for line, with the extra record's
/// functions after the host's and its lines among the host's, in line order; a line in both
/// has the sum of its counts, so it is covered when either ran (the two count different things:
/// host executions, and warp-level executions of the line's hottest instruction; the split
/// stays in `summary-device.json`, `summary.md` and the device pages). Files only `extra` has
/// follow as they were. The totals of a folded record are the host's: [`recount`] them.
pub(crate) fn fold_in(host: &str, extra: &str, origin: &str) -> Result<String> {
    let extra_model = parse_lcov(extra, origin)?;
    let mut out = String::with_capacity(host.len() + extra.len());
    let mut folded = std::collections::BTreeSet::new();
    let mut record: Vec<&str> = Vec::new();
    for line in host.split_inclusive('\n') {
        record.push(line);
        if line.trim_end() != "end_of_record" {
            continue;
        }
        let file = record.iter().find_map(|l| l.trim_end().strip_prefix("SF:"));
        match file.and_then(|f| extra_model.files.get(f).map(|coverage| (f, coverage))) {
            Some((file, coverage)) => {
                fold_record(&record, coverage, &mut out);
                folded.insert(file);
            }
            None => out.extend(record.iter().copied()),
        }
        record.clear();
    }
    out.extend(record.drain(..));
    // The records of `extra` for files the host has no record of, as they were.
    for line in extra.split_inclusive('\n') {
        record.push(line);
        if line.trim_end() != "end_of_record" {
            continue;
        }
        let file = record.iter().find_map(|l| l.trim_end().strip_prefix("SF:"));
        if !file.is_some_and(|f| folded.contains(f)) {
            out.extend(record.iter().copied());
        }
        record.clear();
    }
    out.extend(record);
    Ok(out)
}

/// One host record (`SF` to `end_of_record`) with `extra`'s functions and lines of its file,
/// in llvm-cov's order of record lines: `FN`, `FNDA`, `FNF`, `FNH`, `BRDA`, `BRF`, `BRH`,
/// `DA`, `LF`, `LH`.
fn fold_record(record: &[&str], extra: &FileCoverage, out: &mut String) {
    const ORDER: [&str; 10] = ["FN", "FNDA", "FNF", "FNH", "BRDA", "BRF", "BRH", "DA", "LF", "LH"];
    // Lines before the first of ORDER (TN, SF), each kind of ORDER, then anything else.
    let mut head = Vec::new();
    let mut groups: [Vec<String>; ORDER.len()] = Default::default();
    let mut rest = Vec::new();
    for line in record.iter().filter(|l| l.trim_end() != "end_of_record") {
        let key = line.split_once(':').map_or("", |(key, _)| key);
        match ORDER.iter().position(|k| *k == key) {
            Some(i) => groups[i].push((*line).to_string()),
            None if groups.iter().all(Vec::is_empty) => head.push((*line).to_string()),
            None => rest.push((*line).to_string()),
        }
    }
    let value = |line: &str| line.trim_end().split_once(':').map_or("", |(_, v)| v).to_string();
    let named: std::collections::BTreeSet<String> =
        groups[0].iter().filter_map(|l| value(l).rsplit_once(',').map(|(_, name)| name.to_string())).collect();
    let new_functions = || extra.functions.iter().filter(|(name, _)| !named.contains(*name));
    groups[0].extend(new_functions().map(|(name, (start, _))| format!("FN:{start},{name}\n")));
    for line in &mut groups[1] {
        if let Some((count, name)) = value(line).split_once(',')
            && let Some((_, hits)) = extra.functions.get(name)
        {
            *line = format!("FNDA:{},{name}\n", parse_count(count).unwrap_or(0).saturating_add(*hits));
        }
    }
    groups[1].extend(new_functions().map(|(name, (_, hits))| format!("FNDA:{hits},{name}\n")));
    // The extra branches after the host's, their blocks numbered after the host's on each line
    // so that no host branch is counted twice (a `-` of the extra record folds in as 0).
    let mut next_block: BTreeMap<u32, u64> = BTreeMap::new();
    for line in &groups[4] {
        let mut fields = value(line).split(',').map(str::to_owned).collect::<Vec<_>>().into_iter();
        if let (Some(number), Some(block)) = (fields.next().and_then(|n| n.parse().ok()), fields.next()) {
            let block = block.trim_start_matches('e').parse::<u64>().unwrap_or(0);
            let next = next_block.entry(number).or_default();
            *next = (*next).max(block + 1);
        }
    }
    let mut extra_branches: Vec<(u32, u64, &str, u64)> = extra
        .branches
        .iter()
        .map(|((number, block, branch), taken)| {
            let base = next_block.get(number).copied().unwrap_or(0);
            (*number, base + block.parse::<u64>().unwrap_or(0), branch.as_str(), *taken)
        })
        .collect();
    extra_branches.sort();
    groups[4].extend(
        extra_branches
            .into_iter()
            .map(|(number, block, branch, taken)| format!("BRDA:{number},{block},{branch},{taken}\n")),
    );
    let mut extra_lines = extra.lines.clone();
    let mut lines: Vec<(u32, String)> = groups[7]
        .iter()
        .map(|line| {
            let v = value(line);
            let mut fields = v.split(',');
            let number = fields.next().and_then(|n| n.parse::<u32>().ok()).unwrap_or(u32::MAX);
            match extra_lines.remove(&number) {
                Some(hits) => {
                    let host = fields.next().and_then(parse_count).unwrap_or(0);
                    (number, format!("DA:{number},{}\n", host.saturating_add(hits)))
                }
                None => (number, line.clone()),
            }
        })
        .collect();
    lines.extend(extra_lines.into_iter().map(|(number, hits)| (number, format!("DA:{number},{hits}\n"))));
    // Stable: host lines of one number keep their order.
    lines.sort_by_key(|(number, _)| *number);
    groups[7] = lines.into_iter().map(|(_, line)| line).collect();
    out.extend(head);
    out.extend(groups.into_iter().flatten());
    out.extend(rest);
    out.push_str("end_of_record\n");
}

/// Refuses llvm-cov's lcov `text` when a file name cannot be carried by it:
/// lcov is one record per line, so a name with a line break
/// (`x\nend_of_record\nSF:forged.cc\nDA:7,99`) would forge records in
/// `coverage.lcov` and in `codecov.json` and `cobertura.xml`, which are made
/// from it. `names` are the file names of llvm-cov's JSON summary, which
/// carries any name; every `SF:` of `text` must be one of them.
pub(crate) fn check_file_names(text: &str, names: &[&str]) -> Result<()> {
    let broken: Vec<String> = names.iter().filter(|n| n.contains(['\n', '\r'])).map(|n| format!("{n:?}")).collect();
    if !broken.is_empty() {
        bail!(
            "the report is refused: {} source file name(s) hold a line break, which lcov cannot carry (coverage.lcov, codecov.json and cobertura.xml are made from it, and the name would forge records there): {}; rename the file, or leave it out with report.ignore_filename_regex",
            broken.len(),
            broken.join(", ")
        );
    }
    let known: std::collections::BTreeSet<&str> = names.iter().copied().collect();
    let unknown: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("SF:"))
        .filter(|n| !known.contains(n))
        .map(|n| format!("{n:?}"))
        .collect();
    if !unknown.is_empty() {
        bail!(
            "the report is refused: llvm-cov's lcov export names {} file(s) its JSON summary does not: {}",
            unknown.len(),
            unknown.join(", ")
        );
    }
    Ok(())
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

/// What one trial covered in one file: only what ran, as sorted numbers,
/// so that thousands of trials of a libnccl-sized library fit in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Covered {
    pub(crate) lines: Vec<u32>,
    /// The first lines of the functions that ran (the model's functions).
    pub(crate) functions: Vec<u32>,
    /// `(line, block, branch)` of each branch taken.
    pub(crate) branches: Vec<(u32, u32, u32)>,
}

impl Covered {
    /// What each file of `lcov` covered. Block and branch ids are numbers
    /// in what llvm-cov writes; other text is an error naming the branch.
    pub fn of(lcov: &Lcov) -> Result<BTreeMap<String, Covered>> {
        let mut out = BTreeMap::new();
        for (file, cov) in &lcov.files {
            let mut branches = Vec::new();
            for (line, block, branch) in cov.covered_branches() {
                let number = |id: &str| {
                    id.parse::<u32>().map_err(|_| {
                        Error::new(format!("{file}: branch {line},{block},{branch}: the ids are not numbers"))
                    })
                };
                branches.push((*line, number(block)?, number(branch)?));
            }
            branches.sort_unstable();
            let covered = Covered {
                lines: cov.covered_lines().collect(),
                functions: cov.covered_function_starts().collect(),
                branches,
            };
            out.insert(file.clone(), covered);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name with a line break forges records in llvm-cov's lcov: refused,
    /// and named with its line breaks escaped; so is an `SF:` the summary
    /// does not name.
    #[test]
    fn a_file_name_lcov_cannot_carry_refuses_the_lcov() {
        let name = "/s/x\nend_of_record\nSF:forged.cc\nDA:7,99\nend_of_record\nSF:/s/y.c";
        let text = format!("SF:{name}\nDA:1,1\nend_of_record\nSF:/s/a.c\nDA:1,0\nend_of_record\n");
        let error = check_file_names(&text, &[name, "/s/a.c"]).unwrap_err().to_string();
        assert!(error.contains(r#""/s/x\nend_of_record\nSF:forged.cc\nDA:7,99\nend_of_record\nSF:/s/y.c""#), "{error}");
        assert!(error.starts_with("the report is refused: 1 source file name(s) hold a line break"), "{error}");
        let carriage = check_file_names("", &["/s/a\r.c"]).unwrap_err().to_string();
        assert!(carriage.contains(r#""/s/a\r.c""#), "{carriage}");
        let forged = check_file_names("SF:/s/a.c\nend_of_record\nSF:forged.cc\nend_of_record\n", &["/s/a.c"]);
        assert!(forged.unwrap_err().to_string().contains(r#"names 1 file(s) its JSON summary does not: "forged.cc""#));
        assert!(check_file_names("SF:/s/a.c\nDA:1,1\nend_of_record\n", &["/s/a.c"]).is_ok());
    }

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

    #[test]
    fn a_function_is_counted_once_and_every_line_and_branch_record_counts() {
        // Two instantiations of one template (line 3), one of them run; a
        // function that never ran (line 9); a macro's line (20) among `DA`.
        let text = "SF:/s/a.cc\nFN:3,_Z1fIiEvv\nFN:3,_Z1fIfEvv\nFN:9,g\nFNDA:2,_Z1fIiEvv\nFNDA:0,_Z1fIfEvv\nFNDA:0,g\n\
                    FNF:2\nFNH:1\nDA:3,2\nDA:9,0\nDA:20,2\nBRDA:3,0,0,1\nBRDA:3,0,1,-\nBRF:2\nBRH:1\nLF:2\nLH:1\nend_of_record\n";
        let lcov = parse_lcov(text, "t").unwrap();
        let t = lcov.files["/s/a.cc"].tallies();
        let tally = |covered, count| Tally { covered, count };
        assert_eq!(
            t,
            Tallies { lines: tally(2, 3), functions: tally(1, 2), instantiations: tally(1, 3), branches: tally(1, 2) }
        );
        assert_eq!(lcov.files["/s/a.cc"].covered_function_starts().collect::<Vec<_>>(), [3]);
        let recounted = recount(text, "t").unwrap();
        assert_eq!(recounted, text.replace("LF:2\n", "LF:3\n").replace("LH:1\n", "LH:2\n"));
        // Totals a producer left out are added; text after the last record stays.
        let bare = recount("SF:/s/b.cc\nDA:1,1\nend_of_record\n", "t").unwrap();
        assert_eq!(bare, "SF:/s/b.cc\nDA:1,1\nFNF:0\nFNH:0\nBRF:0\nBRH:0\nLF:1\nLH:1\nend_of_record\n");
        assert!(recount("SF:x\nDA:1\nend_of_record\n", "t").is_err());
    }

    #[test]
    fn device_records_fold_into_the_host_record_of_their_file() {
        let host = "TN:\nSF:/s/a.h\nFN:3,host_fn\nFNDA:2,host_fn\nFNF:1\nFNH:1\nBRDA:4,0,0,1\nBRDA:4,0,1,-\nBRF:2\nBRH:1\n\
                    DA:3,2\nDA:4,2\nDA:9,0\nLF:3\nLH:2\nend_of_record\nSF:/s/b.cc\nDA:1,1\nLF:1\nLH:1\nend_of_record\n";
        let device = "TN:\nSF:/s/a.h\nFN:7,kernel\nFNDA:5,kernel\nFNF:1\nFNH:1\nDA:4,5\nDA:7,5\nDA:9,5\nDA:12,0\nLF:4\nLH:3\nend_of_record\n\
                      TN:\nSF:/s/k.cu\nDA:2,1\nLF:1\nLH:1\nend_of_record\n";
        let folded = recount(&fold_in(host, device, "device").unwrap(), "folded").unwrap();
        assert_eq!(
            folded,
            "TN:\nSF:/s/a.h\nFN:3,host_fn\nFN:7,kernel\nFNDA:2,host_fn\nFNDA:5,kernel\nFNF:2\nFNH:2\n\
             BRDA:4,0,0,1\nBRDA:4,0,1,-\nBRF:2\nBRH:1\nDA:3,2\nDA:4,7\nDA:7,5\nDA:9,5\nDA:12,0\nLF:5\nLH:4\nend_of_record\n\
             SF:/s/b.cc\nDA:1,1\nLF:1\nLH:1\nFNF:0\nFNH:0\nBRF:0\nBRH:0\nend_of_record\n\
             TN:\nSF:/s/k.cu\nDA:2,1\nLF:1\nLH:1\nFNF:0\nFNH:0\nBRF:0\nBRH:0\nend_of_record\n"
        );
        // One record per file, and the model the same as the two records added up.
        assert_eq!(folded.matches("SF:/s/a.h\n").count(), 1);
        let two = parse_lcov(&format!("{host}{device}"), "two").unwrap();
        assert_eq!(parse_lcov(&folded, "folded").unwrap(), two);
        // Nothing to fold: the host text as it was.
        assert_eq!(fold_in(host, "", "none").unwrap(), host);
        assert!(fold_in(host, "SF:x\nDA:1\nend_of_record\n", "bad").is_err());
    }

    #[test]
    fn device_branches_fold_in_after_the_host_s_without_sharing_a_block() {
        let host = "TN:\nSF:/s/a.h\nBRDA:4,0,0,1\nBRDA:4,0,1,-\nBRDA:4,1,0,0\nBRDA:4,1,1,3\nBRF:4\nBRH:2\n\
                    DA:4,2\nLF:1\nLH:1\nend_of_record\n";
        let device = "TN:\nSF:/s/a.h\nFNF:0\nFNH:0\nBRDA:4,0,0,32\nBRDA:4,0,1,0\nBRDA:9,0,0,-\nBRDA:9,0,1,-\nBRF:4\nBRH:1\n\
                      DA:4,5\nDA:9,0\nLF:2\nLH:1\nend_of_record\n";
        let folded = recount(&fold_in(host, device, "device").unwrap(), "folded").unwrap();
        assert_eq!(
            folded,
            "TN:\nSF:/s/a.h\nBRDA:4,0,0,1\nBRDA:4,0,1,-\nBRDA:4,1,0,0\nBRDA:4,1,1,3\nBRDA:4,2,0,32\nBRDA:4,2,1,0\n\
             BRDA:9,0,0,0\nBRDA:9,0,1,0\nBRF:8\nBRH:3\nDA:4,7\nDA:9,0\nLF:2\nLH:1\nFNF:0\nFNH:0\nend_of_record\n"
        );
        // Every branch of both records, none merged into another.
        let model = parse_lcov(&folded, "folded").unwrap();
        assert_eq!(model.files["/s/a.h"].branches.len(), 8);
    }
}
