//! A profile's counters: read from `llvm-profdata merge -text` (the one
//! format every llvm-profdata since LLVM 4 writes the same way), or in
//! process from the indexed profile itself ([`super::indexed`]), which the
//! report checks against the text on every run.

use crate::error::{Context, Error, Result};
use crate::exec::process::{Cmd, Limits};
use std::collections::HashMap;
use std::path::Path;

/// Per function name, each (structural hash, counters) the profile holds,
/// in the order of their hashes (the text's order), so that two readings
/// of one profile compare equal.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProfileCounts {
    functions: HashMap<String, Vec<(u64, Vec<u64>)>>,
}

/// What a mapping's function finds in a profile (LLVM's `getFunctionCounts`).
pub(crate) enum InProfile<'a> {
    Found(&'a [u64]),
    /// The profile has the name with other hashes: llvm-cov leaves it out.
    HashMismatch,
    /// The profile never saw it: counted as zeros.
    Unknown,
}

impl ProfileCounts {
    /// Runs `llvm-profdata merge -text -o - <profdata>` and reads it.
    pub fn read(llvm_profdata: &Path, profdata: &Path) -> Result<ProfileCounts> {
        let text = Cmd::new(llvm_profdata)
            .limits(Limits::LLVM_TOOL)
            .arg("merge")
            .arg("-text")
            .arg("-o")
            .arg("-")
            .arg(profdata)
            .read()?;
        Self::parse(&text).with_context(|| format!("the text of {}", profdata.display()))
    }

    /// Adds a record; false when the name already has one of this hash.
    pub(super) fn insert(&mut self, name: &str, hash: u64, counters: Vec<u64>) -> bool {
        let records = match self.functions.get_mut(name) {
            Some(records) => records,
            None => self.functions.entry(name.to_string()).or_default(),
        };
        if records.iter().any(|(h, _)| *h == hash) {
            return false;
        }
        records.push((hash, counters));
        true
    }

    /// Each (name, hash) whose counters are not all zero: a function that ran.
    pub(crate) fn ran(&self) -> impl Iterator<Item = (&str, u64)> {
        self.functions.iter().flat_map(|(name, records)| {
            records.iter().filter(|(_, c)| c.iter().any(|n| *n > 0)).map(move |(hash, _)| (name.as_str(), *hash))
        })
    }

    /// Puts each name's records in the order of their hashes.
    pub(super) fn sort(&mut self) {
        for records in self.functions.values_mut() {
            records.sort_by_key(|(hash, _)| *hash);
        }
    }

    /// The first function, by name, whose records differ between `self`
    /// (llvm-profdata's) and `other` (the in-process reader's), both sides
    /// said; `None` when they are equal.
    pub fn difference(&self, other: &ProfileCounts) -> Option<String> {
        if self == other {
            return None;
        }
        let names: std::collections::BTreeSet<&String> = self.functions.keys().chain(other.functions.keys()).collect();
        let shown = |records: Option<&Vec<(u64, Vec<u64>)>>| match records {
            None => "no record".to_string(),
            Some(records) => records
                .iter()
                .map(|(hash, c)| {
                    let head: Vec<String> = c.iter().take(8).map(u64::to_string).collect();
                    let more = if c.len() > 8 { ", …" } else { "" };
                    format!("hash {hash} with {} counters [{}{more}]", c.len(), head.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; "),
        };
        let name = names.into_iter().find(|n| self.functions.get(*n) != other.functions.get(*n))?;
        Some(format!(
            "{} functions by llvm-profdata, {} in process; {name}: llvm-profdata {}, in process {}",
            self.functions.len(),
            other.functions.len(),
            shown(self.functions.get(name)),
            shown(other.functions.get(name))
        ))
    }

    pub(crate) fn parse(text: &str) -> Result<ProfileCounts> {
        let mut out = ProfileCounts::default();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        // A record starts with its name, the line before `# Func Hash:`;
        // blank lines also fall inside records (before value profiles).
        let starts_record = |i: usize| {
            lines.get(i).is_some_and(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(':'))
                && lines.get(i + 1) == Some(&"# Func Hash:")
        };
        if lines.iter().take_while(|l| l.starts_with(':') || l.starts_with('#')).any(|l| *l == ":single_byte_coverage")
        {
            return Err(Error::new(
                "it is a single-byte coverage profile, whose counts llvm-cov combines otherwise (not read in process)",
            ));
        }
        let mut i = 0;
        while i < lines.len() {
            if !starts_record(i) {
                if !lines[i].is_empty() && !lines[i].starts_with('#') && !lines[i].starts_with(':') {
                    return Err(Error::new(format!("line {}: {:?} is not the start of a record", i + 1, lines[i])));
                }
                i += 1;
                continue;
            }
            let name = lines[i].to_string();
            i += 1;
            let mut number = |what: &str| -> Result<u64> {
                while let Some(l) = lines.get(i) {
                    i += 1;
                    if l.starts_with('#') {
                        continue;
                    }
                    return l
                        .parse::<u64>()
                        .map_err(|_| Error::new(format!("line {i}: {what} of {name} is not a number: {l:?}")));
                }
                Err(Error::new(format!("line {i}: the record of {name} ends before its {what}")))
            };
            let hash = number("function hash")?;
            let count = number("counter count")?;
            if count > lines.len() as u64 {
                return Err(Error::new(format!("{name} has {count} counters, more than the text has lines")));
            }
            let mut counters = Vec::with_capacity(count as usize);
            for _ in 0..count {
                counters.push(number("counter")?);
            }
            out.functions.entry(name).or_default().push((hash, counters));
            // Bitmap bytes and value profiles follow, up to the next record.
            while i < lines.len() && !starts_record(i) {
                i += 1;
            }
        }
        out.sort();
        Ok(out)
    }

    /// As `IndexedInstrProfReader::getInstrProfRecord`: a record of another
    /// hash is a mismatch only if it has the same context-sensitive flag
    /// (bit 60); otherwise the function is unknown.
    pub(crate) fn lookup(&self, name: &str, hash: u64) -> InProfile<'_> {
        let cs = |h: u64| (h >> 60) & 1;
        let Some(records) = self.functions.get(name) else { return InProfile::Unknown };
        if let Some((_, counters)) = records.iter().find(|(h, _)| *h == hash) {
            return InProfile::Found(counters);
        }
        if records.iter().any(|(h, _)| cs(*h) == cs(hash)) { InProfile::HashMismatch } else { InProfile::Unknown }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_with_bitmaps_and_flags_are_read_and_bad_numbers_named() {
        let text = ":fe\n_Z1fv\n# Func Hash:\n7\n# Num Counters:\n2\n# Counter Values:\n3\n0\n# Num Bitmap Bytes:\n$1\n# Bitmap Byte Values:\n0x1\n\nfile.cc:g\n# Func Hash:\n0\n# Num Counters:\n1\n# Counter Values:\n9\n\n";
        let p = ProfileCounts::parse(text).unwrap();
        assert!(matches!(p.lookup("_Z1fv", 7), InProfile::Found([3, 0])));
        assert!(matches!(p.lookup("_Z1fv", 8), InProfile::HashMismatch));
        assert!(matches!(p.lookup("file.cc:g", 0), InProfile::Found([9])));
        assert!(matches!(p.lookup("h", 0), InProfile::Unknown));
        // A blank line inside a record (before value profiles) does not end it.
        let split = "_Z1fv\n# Func Hash:\n7\n# Num Counters:\n1\n# Counter Values:\n3\n# Num Bitmap Bytes:\n$1\n\n# Num Value Kinds:\n1\n# ValueKind = IPVK_IndirectCallTarget:\n0\n# NumValueSites:\n1\n1\n_Z1gv:4\n\n";
        let p = ProfileCounts::parse(split).unwrap();
        assert!(matches!(p.lookup("_Z1fv", 7), InProfile::Found([3])));
        assert!(matches!(p.lookup("1", 0), InProfile::Unknown), "a value-profile line is not a record");
        // Another hash is a mismatch only with the same context-sensitive flag (bit 60).
        let cs = ProfileCounts::parse(&format!(
            "_Z1hv\n# Func Hash:\n{}\n# Num Counters:\n1\n# Counter Values:\n1\n\n",
            5u64 | 1 << 60
        ))
        .unwrap();
        assert!(matches!(cs.lookup("_Z1hv", 6), InProfile::Unknown));
        assert!(matches!(cs.lookup("_Z1hv", 6 | 1 << 60), InProfile::HashMismatch));
        let single = ProfileCounts::parse(":single_byte_coverage\n_Z1fv\n# Func Hash:\n1\n").unwrap_err().to_string();
        assert!(single.contains("single-byte"), "{single}");
        let bad = ProfileCounts::parse("_Z1fv\n# Func Hash:\nx\n").unwrap_err().to_string();
        assert!(bad.contains("function hash of _Z1fv is not a number"), "{bad}");
        let short = ProfileCounts::parse("_Z1fv\n# Func Hash:\n1\n# Num Counters:\n3\n1\n").unwrap_err().to_string();
        assert!(short.contains("ends before its counter"), "{short}");
    }
}
