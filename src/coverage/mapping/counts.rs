//! A profile's counters, read from `llvm-profdata merge -text`: the one
//! format every llvm-profdata since LLVM 4 writes the same way, and small
//! (no coverage mapping in it), so reading it per trial is cheap.

use crate::error::{Error, Result};
use crate::exec::process::Cmd;
use std::collections::HashMap;
use std::path::Path;

/// Per function name, each (structural hash, counters) the profile holds.
#[derive(Debug, Default)]
pub struct ProfileCounts {
    functions: HashMap<String, Vec<(u64, Vec<u64>)>>,
}

/// What a mapping's function finds in a profile (LLVM's `getFunctionCounts`).
pub(crate) enum Lookup<'a> {
    Found(&'a [u64]),
    /// The profile has the name with other hashes: llvm-cov leaves it out.
    HashMismatch,
    /// The profile never saw it: counted as zeros.
    Unknown,
}

impl ProfileCounts {
    /// Runs `llvm-profdata merge -text -o - <profdata>` and reads it.
    pub fn read(llvm_profdata: &Path, profdata: &Path) -> Result<ProfileCounts> {
        let text = Cmd::new(llvm_profdata).arg("merge").arg("-text").arg("-o").arg("-").arg(profdata).read()?;
        Self::parse(&text).map_err(|e| e.context(format!("the text of {}", profdata.display())))
    }

    pub(crate) fn parse(text: &str) -> Result<ProfileCounts> {
        let mut out = ProfileCounts::default();
        let mut lines = text.lines().enumerate().peekable();
        while let Some((n, line)) = lines.next() {
            let line = line.trim();
            // Blank lines end records; `:ir`-style flags and `#` comments head the file.
            if line.is_empty() || line.starts_with('#') || line.starts_with(':') {
                continue;
            }
            let name = line.to_string();
            let mut number = |what: &str| -> Result<u64> {
                for (m, l) in lines.by_ref() {
                    let l = l.trim();
                    if l.starts_with('#') {
                        continue;
                    }
                    return l
                        .parse::<u64>()
                        .map_err(|_| Error::new(format!("line {}: {what} of {name} is not a number: {l:?}", m + 1)));
                }
                Err(Error::new(format!("line {}: the record of {name} ends before its {what}", n + 1)))
            };
            let hash = number("function hash")?;
            let count = number("counter count")?;
            let mut counters = Vec::with_capacity(usize::try_from(count.min(1 << 20)).unwrap_or(0));
            for _ in 0..count {
                counters.push(number("counter")?);
            }
            out.functions.entry(name).or_default().push((hash, counters));
            // Bitmap bytes and value profiles follow until the blank line.
            while lines.peek().is_some_and(|(_, l)| !l.trim().is_empty()) {
                lines.next();
            }
        }
        Ok(out)
    }

    pub(crate) fn lookup(&self, name: &str, hash: u64) -> Lookup<'_> {
        match self.functions.get(name) {
            None => Lookup::Unknown,
            Some(records) => {
                records.iter().find(|(h, _)| *h == hash).map_or(Lookup::HashMismatch, |(_, c)| Lookup::Found(c))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_with_bitmaps_and_flags_are_read_and_bad_numbers_named() {
        let text = ":fe\n_Z1fv\n# Func Hash:\n7\n# Num Counters:\n2\n# Counter Values:\n3\n0\n# Num Bitmap Bytes:\n$1\n# Bitmap Byte Values:\n0x1\n\nfile.cc:g\n# Func Hash:\n0\n# Num Counters:\n1\n# Counter Values:\n9\n\n";
        let p = ProfileCounts::parse(text).unwrap();
        assert!(matches!(p.lookup("_Z1fv", 7), Lookup::Found([3, 0])));
        assert!(matches!(p.lookup("_Z1fv", 8), Lookup::HashMismatch));
        assert!(matches!(p.lookup("file.cc:g", 0), Lookup::Found([9])));
        assert!(matches!(p.lookup("h", 0), Lookup::Unknown));
        let bad = ProfileCounts::parse("_Z1fv\n# Func Hash:\nx\n").unwrap_err().to_string();
        assert!(bad.contains("function hash of _Z1fv is not a number"), "{bad}");
        let short = ProfileCounts::parse("_Z1fv\n# Func Hash:\n1\n# Num Counters:\n3\n1\n").unwrap_err().to_string();
        assert!(short.contains("ends before its counter"), "{short}");
    }
}
