//! Every line, function and branch of the merged report, numbered, so that
//! what one trial covered is one set of bits: at 4,000 trials of a
//! libnccl-sized library the trials' own lists of lines and branches would
//! not fit in memory, and attribution, the trials' summaries and the minimal
//! suite each pass over every trial's lines (issue #35).

use crate::coverage::lcov::Covered;
use crate::coverage::lcov::Lcov;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::ops::Range;

/// A set of element numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Bits(Vec<u64>);

impl Bits {
    pub(crate) fn with_len(len: usize) -> Bits {
        Bits(vec![0; len.div_ceil(64)])
    }

    #[cfg(test)]
    pub(crate) fn of(len: usize, elements: impl IntoIterator<Item = u32>) -> Bits {
        let mut bits = Bits::with_len(len);
        for e in elements {
            bits.insert(e as usize);
        }
        bits
    }

    /// Adds `e`; one past the end is ignored.
    pub(crate) fn insert(&mut self, e: usize) {
        if let Some(w) = self.0.get_mut(e / 64) {
            *w |= 1 << (e % 64);
        }
    }

    /// The members in `range`, in order.
    pub(crate) fn ones(&self, range: Range<usize>) -> impl Iterator<Item = usize> + '_ {
        let (start, end) = (range.start, range.end.min(self.0.len() * 64));
        (start / 64..end.div_ceil(64)).flat_map(move |w| {
            let mut word = self.0[w];
            if w == start / 64 {
                word &= u64::MAX << (start % 64);
            }
            if w == end / 64 {
                word &= (1u64 << (end % 64)).wrapping_sub(1);
            }
            std::iter::from_fn(move || {
                (word != 0).then(|| {
                    let bit = word.trailing_zeros() as usize;
                    word &= word - 1;
                    w * 64 + bit
                })
            })
        })
    }

    /// How many members are below `len` and not in `other`.
    pub(crate) fn count_not_in(&self, other: &Bits, len: usize) -> usize {
        let full = len / 64;
        let mut n = 0;
        for (w, word) in self.0.iter().enumerate().take(len.div_ceil(64)) {
            let mut word = word & !other.0.get(w).copied().unwrap_or(0);
            if w == full {
                word &= (1u64 << (len % 64)).wrapping_sub(1);
            }
            n += word.count_ones() as usize;
        }
        n
    }

    /// How many members in `range` are also in `other`.
    pub(crate) fn count_in(&self, other: &Bits, range: Range<usize>) -> usize {
        let (start, end) = (range.start, range.end.min(self.0.len() * 64));
        let mut n = 0;
        for w in start / 64..end.div_ceil(64) {
            let mut word = self.0[w] & other.0.get(w).copied().unwrap_or(0);
            if w == start / 64 {
                word &= u64::MAX << (start % 64);
            }
            if w == end / 64 {
                word &= (1u64 << (end % 64)).wrapping_sub(1);
            }
            n += word.count_ones() as usize;
        }
        n
    }

    /// Adds every member of `other`.
    pub(crate) fn union_with(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }
}

/// One file's numbered elements, each list sorted.
#[derive(Debug, Default)]
struct FileElements {
    lines: Vec<u32>,
    /// First lines of its functions: the model's function.
    functions: Vec<u32>,
    branches: Vec<(u32, u32, u32)>,
    /// The numbers of its first line, function and branch.
    line_base: usize,
    function_base: usize,
    branch_base: usize,
}

/// Every instrumented line, function and branch of the merged report,
/// numbered: lines first (file by file, in order), then functions, then
/// branches. A trial's profile covers nothing the merged profile does not
/// have, so what each trial covered is a set of these numbers.
#[derive(Debug, Default)]
pub(crate) struct Universe {
    /// Sorted by name, as the lcov's files are.
    names: Vec<String>,
    files: Vec<FileElements>,
    lines: usize,
    functions: usize,
    branches: usize,
}

impl Universe {
    /// The elements of `all`, the merged report's lcov. Branch ids must be
    /// numbers, as llvm-cov writes them.
    pub(crate) fn of(all: &Lcov) -> Result<Universe> {
        let mut u = Universe::default();
        let mut files = Vec::new();
        for (name, cov) in &all.files {
            let mut functions: Vec<u32> = cov.functions.values().map(|(start, _)| *start).collect();
            functions.sort_unstable();
            functions.dedup();
            let mut branches = Vec::with_capacity(cov.branches.len());
            for (line, block, branch) in cov.branches.keys() {
                let number = |id: &str| {
                    id.parse::<u32>().map_err(|_| {
                        Error::new(format!("{name}: branch {line},{block},{branch}: the ids are not numbers"))
                    })
                };
                branches.push((*line, number(block)?, number(branch)?));
            }
            branches.sort_unstable();
            u.names.push(name.clone());
            files.push(FileElements {
                lines: cov.lines.keys().copied().collect(),
                functions,
                branches,
                ..FileElements::default()
            });
        }
        for f in &mut files {
            f.line_base = u.lines;
            u.lines += f.lines.len();
        }
        for f in &mut files {
            f.function_base = u.lines + u.functions;
            u.functions += f.functions.len();
        }
        for f in &mut files {
            f.branch_base = u.lines + u.functions + u.branches;
            u.branches += f.branches.len();
        }
        u.files = files;
        Ok(u)
    }

    /// How many elements there are.
    pub(crate) fn len(&self) -> usize {
        self.lines + self.functions + self.branches
    }

    /// The numbers of the lines.
    pub(crate) fn line_range(&self) -> Range<usize> {
        0..self.lines
    }

    /// The numbers of the functions.
    pub(crate) fn function_range(&self) -> Range<usize> {
        self.lines..self.lines + self.functions
    }

    /// The numbers of the branches.
    pub(crate) fn branch_range(&self) -> Range<usize> {
        self.lines + self.functions..self.len()
    }

    /// Each file's name and its lines with their numbers, in order.
    pub(crate) fn files(&self) -> impl Iterator<Item = (&str, impl Iterator<Item = (u32, usize)> + '_)> {
        self.names
            .iter()
            .zip(&self.files)
            .map(|(name, f)| (name.as_str(), f.lines.iter().enumerate().map(|(i, l)| (*l, f.line_base + i))))
    }

    /// The file and line of line number `e`.
    pub(crate) fn line(&self, e: usize) -> Option<(&str, u32)> {
        let i = self.files.partition_point(|f| f.line_base + f.lines.len() <= e);
        let f = self.files.get(i)?;
        Some((self.names[i].as_str(), *f.lines.get(e.checked_sub(f.line_base)?)?))
    }

    /// What a trial covered, as numbers; an error names the first thing it
    /// covered that the merged report does not have.
    pub(crate) fn bits(&self, covered: &BTreeMap<String, Covered>) -> Result<Bits> {
        let mut bits = Bits::with_len(self.len());
        for (name, c) in covered {
            let Ok(i) = self.names.binary_search(name) else {
                if c.lines.is_empty() && c.functions.is_empty() && c.branches.is_empty() {
                    continue;
                }
                return Err(Error::new(format!("it covers {name}, which the merged report does not have")));
            };
            let f = &self.files[i];
            let missing = |what: String| {
                Error::new(format!("it covers {name}: {what}, which the merged report does not instrument"))
            };
            positions(&f.lines, &c.lines, |p| bits.insert(f.line_base + p))
                .map_err(|l| missing(format!("line {l}")))?;
            positions(&f.functions, &c.functions, |p| bits.insert(f.function_base + p))
                .map_err(|l| missing(format!("the function at line {l}")))?;
            positions(&f.branches, &c.branches, |p| bits.insert(f.branch_base + p))
                .map_err(|(l, b, r)| missing(format!("branch {l},{b},{r}")))?;
        }
        Ok(bits)
    }
}

/// Calls `found` with the position in `rows` of each of `items` (both sorted,
/// without repeats); the first item not in `rows` is the error.
fn positions<T: Ord + Copy>(rows: &[T], items: &[T], mut found: impl FnMut(usize)) -> std::result::Result<(), T> {
    let mut at = 0;
    for &item in items {
        // Covered lines come in runs: the next row is most often the one,
        // else one a few rows on (a search from here, doubling its step).
        if rows.get(at) != Some(&item) {
            let mut step = 1;
            while rows.get(at + step).is_some_and(|r| *r < item) {
                at += step;
                step *= 2;
            }
            at += rows[at..(at + step + 1).min(rows.len())].partition_point(|r| *r < item);
        }
        if rows.get(at) != Some(&item) {
            return Err(item);
        }
        found(at);
        at += 1;
    }
    Ok(())
}

/// The elements that exactly one of `sets` holds: a pass over each set's
/// words, where [`holders`] would lay out every element's holders.
pub(crate) fn held_once<'a>(sets: impl IntoIterator<Item = &'a Bits>, len: usize) -> Bits {
    let (mut once, mut twice) = (Bits::with_len(len), Bits::with_len(len));
    for set in sets {
        for ((o, t), w) in once.0.iter_mut().zip(twice.0.iter_mut()).zip(&set.0) {
            *t |= *o & w;
            *o |= w;
        }
    }
    for (o, t) in once.0.iter_mut().zip(&twice.0) {
        *o &= !t;
    }
    once
}

/// For each element of `range`, the set of `sets` (by index) that hold it:
/// `words` 64-bit words per element, row after row.
pub(crate) fn holders<'a>(sets: impl IntoIterator<Item = &'a Bits>, range: Range<usize>) -> (usize, Vec<u64>) {
    let sets: Vec<&Bits> = sets.into_iter().collect();
    let words = sets.len().div_ceil(64).max(1);
    let mut rows = vec![0u64; range.len() * words];
    for (i, set) in sets.iter().enumerate() {
        for e in set.ones(range.clone()) {
            rows[(e - range.start) * words + i / 64] |= 1 << (i % 64);
        }
    }
    (words, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::lcov::parse_lcov;

    const ALL: &str = "SF:/a.cc\nFN:3,f\nFN:9,g\nFNDA:1,f\nFNDA:0,g\nDA:3,1\nDA:4,1\nDA:9,0\nBRDA:4,0,0,1\nBRDA:4,0,1,0\n\
        BRDA:4,10,0,0\nBRDA:4,2,0,0\nend_of_record\nSF:/b.cc\nDA:1,1\nend_of_record\n";

    #[test]
    fn elements_are_numbered_lines_then_functions_then_branches() {
        let u = Universe::of(&parse_lcov(ALL, "all").unwrap()).unwrap();
        assert_eq!((u.line_range(), u.function_range(), u.branch_range()), (0..4, 4..6, 6..10));
        assert_eq!((u.line(2), u.line(3), u.line(4)), (Some(("/a.cc", 9)), Some(("/b.cc", 1)), None));
        // Branch blocks are numbers: 10 sorts after 2.
        let covered = Covered::of(
            &parse_lcov(
                "SF:/a.cc\nBRDA:4,10,0,3\nDA:9,1\nFN:9,g\nFNDA:1,g\nend_of_record\nSF:/b.cc\nDA:1,1\nend_of_record\n",
                "t",
            )
            .unwrap(),
        )
        .unwrap();
        let bits = u.bits(&covered).unwrap();
        assert_eq!(bits.ones(0..u.len()).collect::<Vec<_>>(), [2, 3, 5, 9]);
        let files: Vec<(&str, Vec<(u32, usize)>)> = u.files().map(|(f, lines)| (f, lines.collect())).collect();
        assert_eq!(files, [("/a.cc", vec![(3, 0), (4, 1), (9, 2)]), ("/b.cc", vec![(1, 3)])]);
    }

    #[test]
    fn what_the_merged_report_does_not_have_is_named() {
        let u = Universe::of(&parse_lcov(ALL, "all").unwrap()).unwrap();
        let of = |lcov: &str| u.bits(&Covered::of(&parse_lcov(lcov, "t").unwrap()).unwrap()).unwrap_err().to_string();
        assert!(
            of("SF:/a.cc\nDA:5,1\nend_of_record\n")
                .contains("/a.cc: line 5, which the merged report does not instrument")
        );
        assert!(
            of("SF:/c.cc\nDA:1,1\nend_of_record\n").contains("it covers /c.cc, which the merged report does not have")
        );
        assert!(of("SF:/a.cc\nBRDA:4,1,0,1\nend_of_record\n").contains("branch 4,1,0"));
        assert!(
            u.bits(&Covered::of(&parse_lcov("SF:/c.cc\nDA:1,0\nend_of_record\n", "t").unwrap()).unwrap()).is_ok(),
            "nothing covered there"
        );
    }

    #[test]
    fn positions_are_found_near_and_far_and_a_missing_item_is_named() {
        let rows: Vec<u32> = (0..1000).map(|i| i * 3).collect();
        let items = [0, 3, 6, 300, 303, 2997];
        let mut found = Vec::new();
        assert_eq!(positions(&rows, &items, |p| found.push(p)), Ok(()));
        assert_eq!(found, [0, 1, 2, 100, 101, 999]);
        for (items, missing) in [(&[0, 4][..], 4), (&[2998][..], 2998), (&[1][..], 1), (&[3, 3][..], 3)] {
            assert_eq!(positions(&rows, items, |_| {}), Err(missing), "{items:?}");
        }
    }

    #[test]
    fn bits_count_and_iterate_within_their_range() {
        let a = Bits::of(200, [0, 63, 64, 130, 199]);
        let b = Bits::of(200, [63, 130]);
        assert_eq!(a.ones(1..131).collect::<Vec<_>>(), [63, 64, 130]);
        assert_eq!(a.ones(64..64).count(), 0);
        assert_eq!(a.count_not_in(&b, 200), 3);
        assert_eq!(a.count_not_in(&b, 131), 2, "199 is past the length asked");
        let mut c = b.clone();
        c.union_with(&a);
        assert_eq!(c, a);
        let (words, rows) = holders([&a, &b], 63..65);
        assert_eq!((words, rows), (1, vec![0b11, 0b01]));
        let only = held_once([&a, &b, &Bits::of(200, [199])], 200);
        assert_eq!(only.ones(0..200).collect::<Vec<_>>(), [0, 64]);
        assert_eq!((a.count_in(&only, 0..200), a.count_in(&only, 1..200), b.count_in(&only, 0..200)), (2, 1, 0));
    }
}
