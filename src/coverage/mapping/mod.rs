//! The coverage mapping read once, in process, and each trial's lcov
//! computed from it and the trial's counters: what `llvm-cov export
//! -format=lcov` prints for one profile, without reading the library's
//! whole mapping again per trial (issue #24).
//!
//! It follows LLVM 22's `CoverageMapping.cpp` and `CoverageExporterLcov.cpp`
//! step by step (record loading, `SegmentBuilder`, `LineCoverageIterator`,
//! nested expansion branches), so the output is llvm-cov's own. The report
//! checks that on every run: the merged profile's lcov from here must equal
//! llvm-cov's, or per-trial attribution goes back to one llvm-cov export per
//! trial ([`crate::harness`] says so on screen). Each trial's counters are
//! read in process from its indexed profile, checked the same way against
//! `llvm-profdata merge -text` of the merged profile ([`CounterReader`]).

mod binary;
mod counts;
mod cxx_sort;
mod indexed;

pub use counts::ProfileCounts;
pub(crate) use indexed::{CounterReader, binary_ids, raw_binary_ids, raw_ids_at, read_in_process};

use super::lcov::Covered;
use crate::coverage::lcov::{FileCoverage, Lcov, Tally};
use binary::{Counter, Expression, FunctionMapping, Region, RegionKind};
use counts::InProfile;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Every function mapping of the report's objects, in llvm-cov's order.
#[derive(Debug)]
pub struct Mapping {
    functions: Vec<FunctionMapping>,
    /// Per function, which distinct list of file names it has: llvm-cov
    /// keeps one function per (file names, name).
    provenance: Vec<usize>,
    /// Every file name, sorted: files are compared by their index here.
    names: Vec<String>,
    /// Per function, the index in `names` of each of its file IDs.
    file_ids: Vec<Vec<u32>>,
    dialect: Dialect,
}

/// Where the lcov of llvm-cov releases differs: how branches are gathered
/// and numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// llvm-cov 19 and before: a file's own branches are its functions'
    /// main-file ones, expansion branches take the expansion's line, sorted
    /// by line and column, instantiations apart.
    Llvm19,
    /// llvm-cov 20 on: branches of every file ID of the file, expansion
    /// branches sorted by their nesting path, instantiations added up
    /// (`-unify-instantiations`).
    Llvm22,
}

type Loc = (u32, u32);

/// A region with its counts under one profile (LLVM's `CountedRegion`).
#[derive(Debug, Clone, Copy)]
struct Counted {
    region: Region,
    count: u64,
    false_count: u64,
}

impl Counted {
    fn start(&self) -> Loc {
        (self.region.line_start, self.region.col_start)
    }

    fn end(&self) -> Loc {
        (self.region.line_end, self.region.col_end)
    }

    fn true_folded(&self) -> bool {
        self.region.count == Counter::Zero
    }

    fn false_folded(&self) -> bool {
        self.region.false_count == Counter::Zero
    }
}

/// A function as llvm-cov loads it for one profile (`FunctionRecord`).
struct Function<'m> {
    /// The name without its `file:` prefix when that is the main file's name.
    name: &'m str,
    /// Its file IDs' files, as indices of [`Mapping::names`].
    files: &'m [u32],
    regions: Vec<Counted>,
    branches: Vec<Counted>,
    execution_count: u64,
}

/// The mapping under one profile: what `CoverageMapping::load` holds.
pub struct CountedMapping<'m> {
    functions: Vec<Function<'m>>,
    /// Per file, the functions that name it, in order.
    by_file: Vec<Vec<usize>>,
    names: &'m [String],
    dialect: Dialect,
}

/// What one object maps: its source files, and each function's (PGO name,
/// structural hash), the key a profile record must match to be counted.
#[derive(Debug, Default)]
pub(crate) struct ObjectMap {
    pub(crate) files: BTreeSet<String>,
    pub(crate) keys: HashSet<(String, u64)>,
    /// Every function it instrumented, mapped or not (no source to map).
    pub(crate) instrumented: HashSet<String>,
}

impl ObjectMap {
    pub(crate) fn read(object: &std::path::Path) -> crate::error::Result<ObjectMap> {
        let (functions, names) = binary::read_object_and_names(object)?;
        let mut map = ObjectMap { instrumented: names.into_iter().collect(), ..ObjectMap::default() };
        for f in functions {
            map.files.extend(f.filenames.iter().cloned());
            map.keys.insert((f.name, f.hash));
        }
        Ok(map)
    }
}

impl Mapping {
    /// Reads the mappings of `objects` (host objects first, as llvm-cov is
    /// given them), for the lcov that llvm-cov of `llvm_cov_major` writes.
    pub fn read(objects: &[PathBuf], llvm_cov_major: u32) -> crate::error::Result<Mapping> {
        let mut functions = Vec::new();
        for object in objects {
            functions.extend(binary::read_object(object)?);
        }
        let dialect = if llvm_cov_major <= 19 { Dialect::Llvm19 } else { Dialect::Llvm22 };
        let mut lists: HashMap<&[String], usize> = HashMap::new();
        let provenance = functions
            .iter()
            .map(|f| {
                let next = lists.len();
                *lists.entry(f.filenames.as_slice()).or_insert(next)
            })
            .collect();
        let names: Vec<String> =
            functions.iter().flat_map(|f| f.filenames.iter().cloned()).collect::<BTreeSet<_>>().into_iter().collect();
        let index: HashMap<&str, u32> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i as u32)).collect();
        let file_ids = functions.iter().map(|f| f.filenames.iter().map(|n| index[n.as_str()]).collect()).collect();
        Ok(Mapping { functions, provenance, names, file_ids, dialect })
    }

    /// Every function under `profile`, as `CoverageMapping::loadFunctionRecord` keeps them.
    pub fn load(&self, profile: &ProfileCounts) -> CountedMapping<'_> {
        let mut loaded = CountedMapping {
            functions: Vec::new(),
            by_file: vec![Vec::new(); self.names.len()],
            names: &self.names,
            dialect: self.dialect,
        };
        let mut seen: HashSet<(usize, &str)> = HashSet::new();
        for ((f, provenance), files) in self.functions.iter().zip(&self.provenance).zip(&self.file_ids) {
            let zeros;
            let counters: &[u64] = match profile.lookup(&f.name, f.hash) {
                InProfile::Found(c) => c,
                InProfile::HashMismatch => continue,
                InProfile::Unknown => {
                    zeros = vec![0; max_counter_id(f) + 1];
                    &zeros
                }
            };
            // A zero region of a function unused in this TU but run in another.
            if f.regions.len() == 1 && f.regions[0].count == Counter::Zero && counters.first().is_some_and(|c| *c > 0) {
                continue;
            }
            let Some(function) = count(f, files, counters) else { continue };
            if !seen.insert((*provenance, function.name)) {
                continue;
            }
            let index = loaded.functions.len();
            for file in files {
                let list = &mut loaded.by_file[*file as usize];
                if list.last() != Some(&index) {
                    list.push(index);
                }
            }
            loaded.functions.push(function);
        }
        loaded
    }
}

/// The largest counter ID a function's regions refer to (LLVM's
/// `getMaxCounterID`): an unknown function gets that many zeros.
fn max_counter_id(f: &FunctionMapping) -> usize {
    let mut memo = vec![None; f.expressions.len()];
    let id = |c: Counter, memo: &mut Vec<Option<i64>>| {
        fold(c, &f.expressions, &|id| Some(i64::from(id)), &|_, l, r| l.max(r), memo).unwrap_or(0)
    };
    let mut max = 0;
    for r in &f.regions {
        max = max.max(id(r.count, &mut memo));
        if matches!(r.kind, RegionKind::Branch | RegionKind::McdcBranch) {
            max = max.max(id(r.false_count, &mut memo));
        }
    }
    usize::try_from(max).unwrap_or(0)
}

/// `CounterMappingContext::evaluate`: `None` when a counter is out of range
/// (llvm-cov then leaves the function out). `memo` holds the expressions'
/// values, shared by the function's regions.
fn evaluate(c: Counter, expressions: &[Expression], counters: &[u64], memo: &mut [Option<i64>]) -> Option<i64> {
    let leaf = |id: u32| counters.get(id as usize).map(|v| *v as i64);
    fold(c, expressions, &leaf, &|e, l, r| if e.subtract { l.wrapping_sub(r) } else { l.wrapping_add(r) }, memo)
}

/// A counter's value: `leaf` of each profile counter, `combine` of each
/// expression's sides, zero for the zero counter. With an explicit stack,
/// as LLVM's, so a long chain of expressions cannot overflow the thread's
/// stack; `None` for an out-of-range reference or a cycle.
fn fold(
    c: Counter,
    expressions: &[Expression],
    leaf: &dyn Fn(u32) -> Option<i64>,
    combine: &dyn Fn(&Expression, i64, i64) -> i64,
    memo: &mut [Option<i64>],
) -> Option<i64> {
    let root = match c {
        Counter::Zero => return Some(0),
        Counter::Value(id) => return leaf(id),
        Counter::Expression(id) => id as usize,
    };
    let mut stack = vec![root];
    while let Some(&i) = stack.last() {
        if memo.get(i)?.is_some() {
            stack.pop();
            continue;
        }
        let e = expressions.get(i)?;
        let mut sides = [0i64; 2];
        let mut ready = true;
        for (side, counter) in sides.iter_mut().zip([e.lhs, e.rhs]) {
            match counter {
                Counter::Zero => {}
                Counter::Value(id) => *side = leaf(id)?,
                Counter::Expression(j) => match memo.get(j as usize)? {
                    Some(v) => *side = *v,
                    // Deeper than every expression twice over: a cycle.
                    None if stack.len() > 2 * expressions.len() + 2 => return None,
                    None => {
                        ready = false;
                        stack.push(j as usize);
                    }
                },
            }
        }
        if ready {
            memo[i] = Some(combine(e, sides[0], sides[1]));
            stack.pop();
        }
    }
    memo[root]
}

fn count<'m>(f: &'m FunctionMapping, files: &'m [u32], counters: &[u64]) -> Option<Function<'m>> {
    let mut memo = vec![None; f.expressions.len()];
    let mut function = Function {
        name: strip_file_prefix(&f.name, f.filenames.first().map_or("", String::as_str)),
        files,
        regions: Vec::new(),
        branches: Vec::new(),
        execution_count: 0,
    };
    for r in &f.regions {
        if r.kind == RegionKind::McdcDecision {
            continue;
        }
        let count = evaluate(r.count, &f.expressions, counters, &mut memo)? as u64;
        let false_count = evaluate(r.false_count, &f.expressions, counters, &mut memo)? as u64;
        let counted = Counted { region: *r, count, false_count };
        if matches!(r.kind, RegionKind::Branch | RegionKind::McdcBranch) {
            function.branches.push(counted);
        } else {
            if function.regions.is_empty() {
                function.execution_count = count;
            }
            function.regions.push(counted);
        }
    }
    Some(function)
}

/// `getFuncNameWithoutPrefix`.
fn strip_file_prefix<'a>(name: &'a str, file: &str) -> &'a str {
    if !file.is_empty() && name.starts_with(file) { name.get(file.len() + 1..).unwrap_or("") } else { name }
}

/// One `CoverageSegment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    line: u32,
    col: u32,
    count: u64,
    has_count: bool,
    is_region_entry: bool,
    is_gap: bool,
}

/// LLVM's `SegmentBuilder`, over regions of one file.
struct SegmentBuilder<'r> {
    regions: &'r [Counted],
    segments: Vec<Segment>,
    active: Vec<usize>,
    /// Scratch for the completed regions, kept to spare an allocation per region.
    done: Vec<usize>,
}

impl SegmentBuilder<'_> {
    fn build(mut regions: Vec<Counted>) -> Vec<Segment> {
        cxx_sort::sort(&mut regions, &|a, b| {
            a.start().cmp(&b.start()).then(b.end().cmp(&a.end())).then(a.region.kind.cmp(&b.region.kind)).is_lt()
        });
        let combined = combine(regions);
        let mut builder =
            SegmentBuilder { regions: &combined, segments: Vec::new(), active: Vec::new(), done: Vec::new() };
        builder.build_impl();
        builder.segments
    }

    fn start_segment(&mut self, region: usize, start: Loc, is_region_entry: bool, emit_skipped: bool) {
        let r = &self.regions[region];
        let has_count = !emit_skipped && r.region.kind != RegionKind::Skipped;
        if !is_region_entry
            && !emit_skipped
            && let Some(last) = self.segments.last()
            && last.has_count == has_count
            && last.count == r.count
            && !last.is_region_entry
        {
            return;
        }
        self.segments.push(if has_count {
            Segment {
                line: start.0,
                col: start.1,
                count: r.count,
                has_count: true,
                is_region_entry,
                is_gap: r.region.kind == RegionKind::Gap,
            }
        } else {
            Segment { line: start.0, col: start.1, count: 0, has_count: false, is_region_entry, is_gap: false }
        });
    }

    fn complete_regions_until(&mut self, loc: Option<Loc>, first_completed: usize) {
        let regions = self.regions;
        let completed = &mut self.active[first_completed..];
        completed.sort_by_key(|i| regions[*i].end());
        let n = self.active.len();
        for i in first_completed + 1..n {
            let mut completed_region = self.active[i];
            let prev = self.active[i - 1];
            let segment_loc = regions[prev].end();
            if loc == Some(segment_loc) {
                break;
            }
            if segment_loc == regions[completed_region].end() {
                continue;
            }
            for j in i + 1..n {
                if regions[completed_region].end() == regions[self.active[j]].end() {
                    completed_region = self.active[j];
                }
            }
            self.start_segment(completed_region, segment_loc, false, false);
        }
        let last = *self.active.last().expect("completing needs an active region");
        if first_completed > 0 && Some(regions[last].end()) != loc {
            self.start_segment(self.active[first_completed - 1], regions[last].end(), false, false);
        } else if first_completed == 0 && loc != Some(regions[last].end()) {
            self.start_segment(last, regions[last].end(), false, true);
        }
        self.active.truncate(first_completed);
    }

    fn build_impl(&mut self) {
        let regions = self.regions;
        for (index, r) in regions.iter().enumerate() {
            let start = r.start();
            // std::stable_partition: those still active first, in order.
            if self.active.iter().any(|&a| regions[a].end() <= start) {
                let mut done = std::mem::take(&mut self.done);
                done.clear();
                self.active.retain(|&a| {
                    let keep = regions[a].end() > start;
                    if !keep {
                        done.push(a);
                    }
                    keep
                });
                let first_completed = self.active.len();
                self.active.extend_from_slice(&done);
                self.done = done;
                self.complete_regions_until(Some(start), first_completed);
            }
            let gap = r.region.kind == RegionKind::Gap;
            if start == r.end() {
                let skipped = index + 1 == regions.len() || r.region.kind == RegionKind::Skipped;
                let from = self.active.last().copied().unwrap_or(index);
                self.start_segment(from, start, !gap, skipped);
                if skipped && let Some(&last) = self.active.last() {
                    self.start_segment(last, start, false, false);
                }
                continue;
            }
            if index + 1 == regions.len() || start != regions[index + 1].start() {
                self.start_segment(index, start, !gap, false);
            }
            self.active.push(index);
        }
        if !self.active.is_empty() {
            self.complete_regions_until(None, 0);
        }
    }
}

/// `combineRegions`: regions of the same span become one, counting those of its kind.
fn combine(regions: Vec<Counted>) -> Vec<Counted> {
    let mut out: Vec<Counted> = Vec::with_capacity(regions.len());
    for r in regions {
        match out.last_mut() {
            Some(active) if active.start() == r.start() && active.end() == r.end() => {
                if active.region.kind == r.region.kind {
                    active.count = active.count.wrapping_add(r.count);
                }
            }
            _ => out.push(r),
        }
    }
    out
}

/// `LineCoverageIterator` from line 1: each mapped line and its count.
fn line_counts(segments: &[Segment], mut emit: impl FnMut(u32, u64)) {
    let mut next = 0;
    let mut line = 1u32;
    let mut wrapped: Option<&Segment> = None;
    let mut on_line: Vec<&Segment> = Vec::new();
    while next < segments.len() {
        if let Some(last) = on_line.last() {
            wrapped = Some(last);
        }
        on_line.clear();
        while next < segments.len() && segments[next].line == line {
            on_line.push(&segments[next]);
            next += 1;
        }
        let start_of_region = |s: &&&Segment| !s.is_gap && s.has_count && s.is_region_entry;
        let min_region_count = on_line.iter().filter(start_of_region).take(2).count();
        let start_of_skipped = on_line.first().is_some_and(|s| !s.has_count && s.is_region_entry);
        let mut mapped = !start_of_skipped && (wrapped.is_some_and(|w| w.has_count) || min_region_count > 0);
        mapped |= on_line.iter().any(|s| s.is_region_entry && s.has_count);
        if mapped {
            let mut count = wrapped.map_or(0, |w| w.count);
            if min_region_count > 0 {
                for s in on_line.iter().filter(start_of_region) {
                    count = count.max(s.count);
                }
            }
            emit(line, count);
        }
        line = line.wrapping_add(1);
        if line == 0 {
            return;
        }
    }
}

/// A branch with where it is nested (`NestedCountedRegion`).
#[derive(Clone)]
struct Nested {
    branch: Counted,
    path: Vec<Loc>,
    position: usize,
}

/// What one file's report draws on (`CoverageData`): its regions' segments,
/// its own branches and the expansions in it.
struct FileData<'l, 'm> {
    segments: Vec<Segment>,
    branches: Vec<Counted>,
    /// (expansion region, function).
    expansions: Vec<(Counted, &'l Function<'m>)>,
}

impl<'m> CountedMapping<'m> {
    /// The files llvm-cov reports on: every file any function names.
    fn files(&self) -> BTreeSet<u32> {
        self.functions.iter().flat_map(|f| f.files.iter().copied()).collect()
    }

    fn functions_of(&self, file: u32) -> impl Iterator<Item = &Function<'m>> {
        self.by_file[file as usize].iter().map(|i| &self.functions[*i])
    }

    /// `getCoverageForFile`.
    fn file_data(&self, file: u32) -> FileData<'_, 'm> {
        let mut regions = Vec::new();
        let mut data = FileData { segments: Vec::new(), branches: Vec::new(), expansions: Vec::new() };
        for f in self.functions_of(file) {
            let main = main_file_id(f).filter(|id| f.files[*id as usize] == file);
            let in_file = |r: &Counted| f.files.get(r.region.file_id as usize) == Some(&file);
            for r in f.regions.iter().filter(|r| in_file(r)) {
                regions.push(*r);
                if main.is_some_and(|m| is_expansion(r, m)) {
                    data.expansions.push((*r, f));
                }
            }
            // llvm-cov 19 keeps only branches of file ID 0 (`FileID == ExpandedFileID`).
            let own = |r: &&Counted| in_file(r) && (self.dialect == Dialect::Llvm22 || r.region.file_id == 0);
            data.branches.extend(f.branches.iter().filter(own).copied());
        }
        data.segments = SegmentBuilder::build(regions);
        data
    }

    /// lcov as `llvm-cov export -format=lcov` writes it for these files,
    /// without its summary lines (FNF, FNH, BRF, BRH, LF, LH), which no
    /// reader of the model uses: they follow from the records.
    pub fn lcov(&self, keep: &dyn Fn(&str) -> bool) -> String {
        let mut out = Text(String::new());
        self.emit(keep, &mut out);
        out.0
    }

    /// The same lcov as the model reads it ([`lcov::parse_lcov`] of
    /// [`Self::lcov`]), without the text: per trial that is most of the work.
    pub fn model(&self, keep: &dyn Fn(&str) -> bool) -> Lcov {
        let mut out = Model::default();
        self.emit(keep, &mut out);
        out.lcov
    }

    /// What a trial's attribution keeps: per file, the lines, functions
    /// (their first lines) and branches that ran, as numbers, and the
    /// model's totals of lines and functions over all of it; what
    /// [`Self::model`] would give, without making the model.
    pub fn taken(&self, keep: &dyn Fn(&str) -> bool) -> (BTreeMap<String, Covered>, Tally, Tally) {
        let mut out = Taken::default();
        self.emit(keep, &mut out);
        (out.files, out.lines, out.functions)
    }

    /// The records of [`Self::lcov`], in its order.
    fn emit(&self, keep: &dyn Fn(&str) -> bool, out: &mut dyn Records<'m>) {
        for file in self.files().into_iter().filter(|f| keep(&self.names[*f as usize])) {
            out.file(&self.names[file as usize]);
            let functions: Vec<&Function> = self.functions_of(file).filter(|f| f.files[0] == file).collect();
            for f in &functions {
                out.function(f.regions.first().map_or(0, |r| r.region.line_start), f.name);
            }
            for f in &functions {
                out.function_count(f.execution_count, f.name);
            }
            let data = self.file_data(file);
            line_counts(&data.segments, |line, count| out.line(line, count));
            self.branches(&data, out);
            out.end();
        }
    }

    /// `renderBranchExecutionCounts`.
    fn branches(&self, data: &FileData, out: &mut dyn Records<'m>) {
        if self.dialect == Dialect::Llvm19 {
            return self.branches_llvm19(data, out);
        }
        let unfolded = |b: &Counted| !b.true_folded() || !b.false_folded();
        let mut all: Vec<Nested> = data
            .branches
            .iter()
            .filter(|b| unfolded(b))
            .enumerate()
            .map(|(position, b)| Nested { branch: *b, path: vec![b.start()], position })
            .collect();
        let mut path = Vec::new();
        let mut position = 0;
        let mut nested = Vec::new();
        self.nested_branches(&data.expansions, &mut path, &mut position, &mut nested);
        all.extend(nested.into_iter().filter(|n| unfolded(&n.branch)));
        cxx_sort::sort(&mut all, &|a, b| (&a.path, a.position) < (&b.path, b.position));
        // `combineInstanceCounts` (`-unify-instantiations`, on by default):
        // branches at the same place add up into the first.
        let mut kept: Vec<Nested> = Vec::with_capacity(all.len());
        for n in all {
            match kept.last_mut() {
                Some(k) if k.path == n.path => {
                    k.branch.count = k.branch.count.wrapping_add(n.branch.count);
                    k.branch.false_count = k.branch.false_count.wrapping_add(n.branch.false_count);
                }
                _ => kept.push(n),
            }
        }
        let all = kept;
        let mut i = 0;
        while i < all.len() {
            let line = all[i].path[0].0;
            let mut pair = 0;
            let mut index = 0;
            while i < all.len() && all[i].path[0].0 == line {
                // llvm-cov prints these as `unsigned`.
                let (t, f) = (all[i].branch.count as u32, all[i].branch.false_count as u32);
                for taken in [t, f] {
                    out.branch(line, pair, index, (t != 0 || f != 0).then_some(taken));
                    index += 1;
                }
                pair += 1;
                i += 1;
            }
        }
    }

    /// llvm-cov 19's `renderBranchExecutionCounts`.
    fn branches_llvm19(&self, data: &FileData, out: &mut dyn Records<'m>) {
        let mut all = data.branches.clone();
        let mut nested = Vec::new();
        self.nested_branches(&data.expansions, &mut Vec::new(), &mut 0, &mut nested);
        // Each takes the line of the outermost expansion it is in.
        all.extend(nested.into_iter().map(|mut n| {
            n.branch.region.line_start = n.path[0].0;
            n.branch
        }));
        cxx_sort::sort(&mut all, &|a, b| {
            (a.region.line_start, a.region.col_start) < (b.region.line_start, b.region.col_start)
        });
        let mut i = 0;
        while i < all.len() {
            let line = all[i].region.line_start;
            let (mut pair, mut index) = (0, 0);
            while i < all.len() && all[i].region.line_start == line {
                let b = &all[i];
                // Folded: both counters are the constant zero.
                if !(b.true_folded() && b.false_folded()) {
                    let (t, f) = (b.count as u32, b.false_count as u32);
                    for taken in [t, f] {
                        out.branch(line, pair, index, (t != 0 || f != 0).then_some(taken));
                        index += 1;
                    }
                    pair += 1;
                }
                i += 1;
            }
        }
    }

    /// `collectNestedBranches`: branches of expansions, deepest first.
    fn nested_branches(
        &self,
        expansions: &[(Counted, &Function)],
        path: &mut Vec<Loc>,
        position: &mut usize,
        out: &mut Vec<Nested>,
    ) {
        for (region, f) in expansions {
            let file_id = region.region.expanded_file_id;
            path.push(region.start());
            let inner: Vec<(Counted, &Function)> =
                f.regions.iter().filter(|r| is_expansion(r, file_id)).map(|r| (*r, *f)).collect();
            self.nested_branches(&inner, path, position, out);
            for b in f.branches.iter().filter(|b| b.region.file_id == file_id) {
                out.push(Nested { branch: *b, path: path.clone(), position: *position });
                *position += 1;
            }
            path.pop();
        }
    }

    /// Code regions covered and counted, as llvm-cov's summary counts them:
    /// per function over all its files, the most of any instantiation of
    /// one definition, summed over the kept files.
    pub fn regions(&self, keep: &dyn Fn(&str) -> bool) -> (u64, u64) {
        let (mut covered, mut count) = (0, 0);
        for file in self.files().into_iter().filter(|f| keep(&self.names[*f as usize])) {
            let mut groups: BTreeMap<Loc, (u64, u64)> = BTreeMap::new();
            for f in self.functions_of(file) {
                let Some(main) = main_file_id(f).filter(|id| f.files[*id as usize] == file) else { continue };
                let Some(first) = f.regions.iter().find(|r| r.region.file_id == main) else { continue };
                let code = f.regions.iter().filter(|r| r.region.kind == RegionKind::Code);
                let n = code.clone().count() as u64;
                let c = code.filter(|r| r.count != 0).count() as u64;
                let g = groups.entry(first.start()).or_insert((c, n));
                *g = (g.0.max(c), g.1.max(n));
            }
            for (c, n) in groups.values() {
                covered += c;
                count += n;
            }
        }
        (covered, count)
    }
}

/// Where the lcov records go: written out, or straight into the model.
/// What the lcov of [`CountedMapping::emit`] is made into; function names
/// live as long as the mapping (`'m`), so a recorder may keep them.
trait Records<'m> {
    fn file(&mut self, name: &str);
    fn function(&mut self, start: u32, name: &'m str);
    fn function_count(&mut self, count: u64, name: &'m str);
    fn line(&mut self, line: u32, count: u64);
    /// `None`: never reached (`-`).
    fn branch(&mut self, line: u32, block: u32, branch: u32, taken: Option<u32>);
    fn end(&mut self);
}

struct Text(String);

impl Records<'_> for Text {
    fn file(&mut self, name: &str) {
        let _ = writeln!(self.0, "SF:{name}");
    }
    fn function(&mut self, start: u32, name: &str) {
        let _ = writeln!(self.0, "FN:{start},{name}");
    }
    fn function_count(&mut self, count: u64, name: &str) {
        let _ = writeln!(self.0, "FNDA:{count},{name}");
    }
    fn line(&mut self, line: u32, count: u64) {
        let _ = writeln!(self.0, "DA:{line},{count}");
    }
    fn branch(&mut self, line: u32, block: u32, branch: u32, taken: Option<u32>) {
        match taken {
            Some(n) => writeln!(self.0, "BRDA:{line},{block},{branch},{n}"),
            None => writeln!(self.0, "BRDA:{line},{block},{branch},-"),
        }
        .expect("writing to a String");
    }
    fn end(&mut self) {
        self.0.push_str("end_of_record\n");
    }
}

/// Adds records up as `lcov::parse_lcov` does.
#[derive(Default)]
struct Model {
    lcov: Lcov,
    file: Option<(String, FileCoverage)>,
}

impl Model {
    fn current(&mut self) -> &mut FileCoverage {
        &mut self.file.as_mut().expect("records come inside a file").1
    }
}

impl Records<'_> for Model {
    fn file(&mut self, name: &str) {
        let coverage = self.lcov.files.remove(name).unwrap_or_default();
        self.file = Some((name.to_string(), coverage));
    }
    fn function(&mut self, start: u32, name: &str) {
        let f = self.current();
        match f.functions.get_mut(name) {
            Some(e) => e.0 = start,
            None => {
                f.functions.insert(name.to_string(), (start, 0));
            }
        }
    }
    fn function_count(&mut self, count: u64, name: &str) {
        let f = self.current();
        match f.functions.get_mut(name) {
            Some(e) => e.1 = e.1.saturating_add(count),
            None => {
                f.functions.insert(name.to_string(), (0, count));
            }
        }
    }
    fn line(&mut self, line: u32, count: u64) {
        let hits = self.current().lines.entry(line).or_insert(0);
        *hits = hits.saturating_add(count);
    }
    fn branch(&mut self, line: u32, block: u32, branch: u32, taken: Option<u32>) {
        let hits = self.current().branches.entry((line, block.to_string(), branch.to_string())).or_insert(0);
        *hits = hits.saturating_add(u64::from(taken.unwrap_or(0)));
    }
    fn end(&mut self) {
        let (name, coverage) = self.file.take().expect("records come inside a file");
        self.lcov.files.insert(name, coverage);
    }
}

/// The recorder of [`CountedMapping::taken`]: what [`Model`] keeps of the
/// lines, functions and branches that ran, and its totals of lines and
/// functions (records of a file are unique here: one `SF` per file, one `DA`
/// per line, one `BRDA` per line, block and branch).
#[derive(Default)]
struct Taken<'m> {
    files: BTreeMap<String, Covered>,
    file: Option<(String, TakenFile<'m>)>,
    lines: Tally,
    functions: Tally,
}

#[derive(Default)]
struct TakenFile<'m> {
    lines: Vec<u32>,
    /// Name → (first line, execution count), as the model keeps functions.
    functions: HashMap<&'m str, (u32, u64)>,
    branches: Vec<(u32, u32, u32)>,
}

impl<'m> Taken<'m> {
    fn current(&mut self) -> &mut TakenFile<'m> {
        &mut self.file.as_mut().expect("records come inside a file").1
    }
}

impl<'m> Records<'m> for Taken<'m> {
    fn file(&mut self, name: &str) {
        self.file = Some((name.to_string(), TakenFile::default()));
    }
    fn function(&mut self, start: u32, name: &'m str) {
        self.current().functions.entry(name).or_insert((start, 0)).0 = start;
    }
    fn function_count(&mut self, count: u64, name: &'m str) {
        let e = self.current().functions.entry(name).or_insert((0, 0));
        e.1 = e.1.saturating_add(count);
    }
    fn line(&mut self, line: u32, count: u64) {
        self.lines.count += 1;
        if count > 0 {
            self.lines.covered += 1;
            self.current().lines.push(line);
        }
    }
    fn branch(&mut self, line: u32, block: u32, branch: u32, taken: Option<u32>) {
        if taken.unwrap_or(0) > 0 {
            self.current().branches.push((line, block, branch));
        }
    }
    fn end(&mut self) {
        let (name, mut file) = self.file.take().expect("records come inside a file");
        // A function is its first line, however many instantiations it has.
        let mut starts: BTreeMap<u32, bool> = BTreeMap::new();
        for (start, hits) in file.functions.values() {
            *starts.entry(*start).or_insert(false) |= *hits > 0;
        }
        self.functions.count += starts.len() as u64;
        let functions: Vec<u32> = starts.into_iter().filter(|(_, ran)| *ran).map(|(line, _)| line).collect();
        self.functions.covered += functions.len() as u64;
        file.lines.sort_unstable();
        file.lines.dedup();
        file.branches.sort_unstable();
        file.branches.dedup();
        let covered = self.files.entry(name).or_default();
        covered.lines = file.lines;
        covered.functions = functions;
        covered.branches = file.branches;
    }
}

fn is_expansion(r: &Counted, file_id: u32) -> bool {
    r.region.kind == RegionKind::Expansion && r.region.file_id == file_id
}

/// `findMainViewFileID`: the first file no expansion expands.
fn main_file_id(f: &Function) -> Option<u32> {
    let mut expanded = vec![false; f.files.len()];
    for r in &f.regions {
        if r.region.kind == RegionKind::Expansion
            && let Some(e) = expanded.get_mut(r.region.expanded_file_id as usize)
        {
            *e = true;
        }
    }
    expanded.iter().position(|e| !e).map(|i| i as u32)
}

/// llvm-cov's lcov without its summary lines, which [`CountedMapping::lcov`] leaves out.
pub fn without_summaries(lcov: &str) -> String {
    let summary = ["FNF:", "FNH:", "LF:", "LH:", "BRF:", "BRH:"];
    let mut out = String::with_capacity(lcov.len());
    for line in lcov.lines().filter(|l| !summary.iter().any(|s| l.starts_with(s))) {
        out.push_str(line);
        out.push('\n');
    }
    out
}
