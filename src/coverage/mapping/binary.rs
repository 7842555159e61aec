//! The coverage mapping as clang writes it into an ELF object
//! (`__llvm_covmap`, `__llvm_covfun`, `__llvm_prf_names`), decoded as
//! LLVM's `CoverageMappingReader.cpp` decodes it (format versions 4 to 7:
//! clang 11 to 22).

use crate::bail;
use crate::error::{Context, Error, Result};
use md5::{Digest, Md5};
use object::{Object, ObjectSection};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

/// A counter of a region: zero, a profile counter, or an expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    Zero,
    Value(u32),
    Expression(u32),
}

/// `lhs - rhs` or `lhs + rhs`; the kind is given by the references to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expression {
    pub(crate) subtract: bool,
    pub(crate) lhs: Counter,
    pub(crate) rhs: Counter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RegionKind {
    Code = 0,
    Expansion = 1,
    Skipped = 2,
    Gap = 3,
    Branch = 4,
    McdcDecision = 5,
    McdcBranch = 6,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) count: Counter,
    /// A branch's false count; zero for other kinds.
    pub(crate) false_count: Counter,
    pub(crate) file_id: u32,
    pub(crate) expanded_file_id: u32,
    pub(crate) line_start: u32,
    pub(crate) col_start: u32,
    pub(crate) line_end: u32,
    pub(crate) col_end: u32,
    pub(crate) kind: RegionKind,
}

/// One function's mapping: what `CoverageMappingRecord` holds.
#[derive(Debug, Clone)]
pub(crate) struct FunctionMapping {
    /// The PGO name, as the profile names it.
    pub(crate) name: String,
    pub(crate) hash: u64,
    /// The function's files, by file ID (0 is where it is defined).
    pub(crate) filenames: Vec<String>,
    pub(crate) expressions: Vec<Expression>,
    pub(crate) regions: Vec<Region>,
}

/// The low 64 bits of MD5, as LLVM's `MD5Hash` names functions and filename tables.
pub(crate) fn md5_low(bytes: &[u8]) -> u64 {
    let digest = Md5::digest(bytes);
    u64::from_le_bytes(digest[..8].try_into().expect("MD5 has 16 bytes"))
}

/// Reads the function mappings of one object, deduplicated as LLVM's
/// reader does: per function name the first mapping that is not a dummy
/// (a zero region clang writes for an inline function unused in a TU).
pub(crate) fn read_object(path: &Path) -> Result<Vec<FunctionMapping>> {
    read_object_and_names(path).map(|(functions, _)| functions)
}

/// [`read_object`]'s mappings, and the name of every function the object
/// instrumented (`__llvm_prf_names`): those with counters but no mapping too
/// (a constructor the compiler made has no source to map).
pub(crate) fn read_object_and_names(path: &Path) -> Result<(Vec<FunctionMapping>, Vec<String>)> {
    let data = std::fs::read(path).with_context(|| format!("cannot read the object {}", path.display()))?;
    let where_ = |what: &str| format!("{} ({what})", path.display());
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not an object file llvm-cov reads", path.display()))?;
    // Every section of the name, joined; function records padded to 8
    // bytes each, as LLVM joins them (a relocatable object has one per
    // COMDAT group).
    let section = |name: &str| -> Result<Option<Vec<u8>>> {
        let mut joined: Option<Vec<u8>> = None;
        for s in file.sections().filter(|s| s.name() == Ok(name)) {
            let data =
                s.uncompressed_data().with_context(|| format!("cannot read section {name} of {}", path.display()))?;
            let out = joined.get_or_insert_with(Vec::new);
            out.extend_from_slice(&data);
            if name == "__llvm_covfun" {
                out.resize(out.len().next_multiple_of(8), 0);
            }
        }
        Ok(joined)
    };
    // llvm-cov passes over an object without a mapping.
    let (Some(covmap), Some(covfun)) = (section("__llvm_covmap")?, section("__llvm_covfun")?) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let names = match section("__llvm_prf_names")? {
        Some(bytes) => read_names(&bytes).with_context(|| where_("__llvm_prf_names"))?,
        None => HashMap::new(),
    };
    let tables = read_covmap(&covmap).with_context(|| where_("__llvm_covmap"))?;
    let functions = read_covfun(&covfun, &tables, &names).with_context(|| where_("__llvm_covfun"))?;
    Ok((functions, names.into_values().collect()))
}

/// A little-endian cursor over a byte slice, erring instead of panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, at: 0 }
    }

    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len()).ok_or_else(|| {
            Error::new(format!("truncated: {n} bytes wanted at offset {} of {}", self.at, self.bytes.len()))
        })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn leb(&mut self) -> Result<u64> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = *self.take(1)?.first().expect("1 byte");
            if shift >= 64 {
                bail!("a LEB128 number at offset {} is longer than 64 bits", self.at);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    fn leb32(&mut self) -> Result<u32> {
        let v = self.leb()?;
        u32::try_from(v).map_err(|_| Error::new(format!("{v} at offset {} does not fit 32 bits", self.at)))
    }

    fn string(&mut self) -> Result<&'a str> {
        let len = usize::try_from(self.leb()?).map_err(|_| Error::new("a string length overflows"))?;
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| Error::new(format!("a name at offset {} is not UTF-8", self.at)))
    }

    fn align8(&mut self) {
        self.at = self.at.next_multiple_of(8).min(self.bytes.len());
    }
}

fn inflate(compressed: &[u8], size: usize) -> Result<Vec<u8>> {
    // zlib shrinks by at most about 1032 to 1: a larger size is not believed for the allocation.
    let mut out = Vec::with_capacity(size.min(compressed.len().saturating_mul(1032)));
    flate2::read::ZlibDecoder::new(compressed).read_to_end(&mut out).context("cannot decompress (zlib)")?;
    if out.len() != size {
        bail!("decompressed {} bytes where {size} were announced", out.len());
    }
    Ok(out)
}

/// `__llvm_prf_names`: chunks of `\x01`-separated names, each maybe
/// compressed; keyed by their MD5, as the mapping records name functions.
fn read_names(bytes: &[u8]) -> Result<HashMap<u64, String>> {
    let mut names = HashMap::new();
    let mut c = Cursor::new(bytes);
    while !c.done() {
        let size = usize::try_from(c.leb()?).map_err(|_| Error::new("a names size overflows"))?;
        let compressed = usize::try_from(c.leb()?).map_err(|_| Error::new("a names size overflows"))?;
        let text = if compressed > 0 { inflate(c.take(compressed)?, size)? } else { c.take(size)?.to_vec() };
        for name in text.split(|b| *b == 1) {
            if let Ok(name) = std::str::from_utf8(name) {
                names.insert(md5_low(name.as_bytes()), name.to_string());
            }
        }
        // Chunks may be followed by padding zeros.
        while !c.done() && c.bytes[c.at] == 0 {
            c.at += 1;
        }
    }
    Ok(names)
}

/// The covmap format version LLVM calls `Version7`, counted from 0.
const LATEST_VERSION: u32 = 6;
const FIRST_VERSION: u32 = 3;

/// Filename tables by the MD5 of their encoding. A hash two different tables share is `None`: LLVM drops the
/// functions that refer to it.
type Tables = HashMap<u64, Option<Vec<String>>>;

/// `__llvm_covmap`: one header and filename table per translation unit,
/// keyed as function records refer to it.
fn read_covmap(bytes: &[u8]) -> Result<Tables> {
    let mut tables = HashMap::new();
    let mut c = Cursor::new(bytes);
    while !c.done() {
        let _records = c.u32()?;
        let filenames_size = c.u32()? as usize;
        let coverage_size = c.u32()? as usize;
        let version = c.u32()?;
        if !(FIRST_VERSION..=LATEST_VERSION).contains(&version) {
            bail!(
                "coverage mapping format version {} is not one this reader knows (versions {} to {}: clang 11 to 22)",
                version + 1,
                FIRST_VERSION + 1,
                LATEST_VERSION + 1
            );
        }
        let blob = c.take(filenames_size)?;
        let _ = c.take(coverage_size)?;
        c.align8();
        let names = read_filenames(blob, version).context("the filename table")?;
        match tables.entry(md5_low(blob)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Some(names));
            }
            std::collections::hash_map::Entry::Occupied(mut o) => {
                if o.get().as_ref().is_some_and(|n| *n != names) {
                    o.insert(None);
                }
            }
        }
    }
    Ok(tables)
}

fn read_filenames(blob: &[u8], version: u32) -> Result<Vec<String>> {
    let mut c = Cursor::new(blob);
    let count = usize::try_from(c.leb()?).map_err(|_| Error::new("a filename count overflows"))?;
    let size = usize::try_from(c.leb()?).map_err(|_| Error::new("a filename size overflows"))?;
    let compressed = usize::try_from(c.leb()?).map_err(|_| Error::new("a filename size overflows"))?;
    let inflated;
    let mut plain = if compressed > 0 {
        inflated = inflate(c.take(compressed)?, size)?;
        Cursor::new(&inflated)
    } else {
        Cursor::new(&blob[c.at..])
    };
    let mut names: Vec<String> = Vec::with_capacity(count.min(blob.len()));
    for i in 0..count {
        let name = plain.string()?;
        // Version 6 on: the first entry is the compilation directory, and
        // relative names are relative to it.
        if version >= 5 && i > 0 && !name.starts_with('/') {
            names.push(join_removing_dots(&names[0], name));
        } else {
            names.push(name.to_string());
        }
    }
    Ok(names)
}

/// `sys::path::append` then `remove_dots(…, remove_dot_dot = true)`.
fn join_removing_dots(dir: &str, name: &str) -> String {
    let absolute = dir.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in dir.split('/').chain(name.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    if absolute { format!("/{joined}") } else { joined }
}

/// `__llvm_covfun`: a record per function, each 8-byte aligned.
fn read_covfun(bytes: &[u8], tables: &Tables, names: &HashMap<u64, String>) -> Result<Vec<FunctionMapping>> {
    let mut out: Vec<FunctionMapping> = Vec::new();
    let mut by_name: HashMap<u64, usize> = HashMap::new();
    // Each kept record's encoded mapping and hash, for the dummy check.
    let mut raw: Vec<(&[u8], u64)> = Vec::new();
    let mut c = Cursor::new(bytes);
    while !c.done() {
        let name_ref = c.u64()?;
        let size = c.u32()? as usize;
        let hash = c.u64()?;
        let filenames_ref = c.u64()?;
        let data = c.take(size)?;
        c.align8();
        let table = tables.get(&filenames_ref).ok_or_else(|| {
            Error::new(format!(
                "a function record names filename table {filenames_ref:#x}, which is not in __llvm_covmap"
            ))
        })?;
        let Some(table) = table else { continue };
        if let Some(&i) = by_name.get(&name_ref) {
            // As LLVM: a real mapping replaces a dummy one, nothing else does.
            if raw[i].1 == 0 && is_dummy(raw[i].0)? && !(hash == 0 && is_dummy(data)?) {
                raw[i] = (data, hash);
                let name = std::mem::take(&mut out[i].name);
                out[i] = decode(data, table, name, hash)?;
            }
            continue;
        }
        let name = names
            .get(&name_ref)
            .cloned()
            .ok_or_else(|| Error::new(format!("function {name_ref:#x} has no name in __llvm_prf_names")))?;
        by_name.insert(name_ref, out.len());
        raw.push((data, hash));
        out.push(decode(data, table, name, hash)?);
    }
    Ok(out)
}

/// LLVM's `RawCoverageMappingDummyChecker`: one file, no expressions, one region with a zero counter.
fn is_dummy(data: &[u8]) -> Result<bool> {
    let mut c = Cursor::new(data);
    if c.leb()? != 1 {
        return Ok(false);
    }
    c.leb()?;
    if c.leb()? != 0 {
        return Ok(false);
    }
    if c.leb()? != 1 {
        return Ok(false);
    }
    Ok(c.leb()? & 3 == 0)
}

/// An expansion region counts what the first region of the file it
/// expands counts, through nested expansions: LLVM sets it when reading.
fn propagate_expansion_counts(regions: &mut [Region], files: usize) {
    loop {
        let mut slot: Vec<Option<usize>> = vec![None; files];
        for (i, r) in regions.iter().enumerate() {
            if r.kind == RegionKind::Expansion {
                slot[r.expanded_file_id as usize] = Some(i);
            }
        }
        let mut changed = false;
        for i in 0..regions.len() {
            let file = regions[i].file_id as usize;
            if let Some(e) = slot[file].take()
                && regions[e].count != regions[i].count
            {
                regions[e].count = regions[i].count;
                changed = true;
            }
        }
        if !changed {
            return;
        }
    }
}

const TAG_BITS: u32 = 2;
const EXPANSION_BIT: u64 = 1 << TAG_BITS;

fn decode_counter(value: u64, expressions: &mut [Expression]) -> Result<Counter> {
    let id = u32::try_from(value >> TAG_BITS).map_err(|_| Error::new(format!("counter {value} overflows")))?;
    match value & 3 {
        0 => Ok(Counter::Zero),
        1 => Ok(Counter::Value(id)),
        tag => {
            let n = expressions.len();
            let e = expressions
                .get_mut(id as usize)
                .ok_or_else(|| Error::new(format!("expression {id} of {n} is referenced")))?;
            e.subtract = tag == 2;
            Ok(Counter::Expression(id))
        }
    }
}

fn decode(data: &[u8], table: &[String], name: String, hash: u64) -> Result<FunctionMapping> {
    decode_mapping(data, table, &name, hash).with_context(|| format!("function {name}"))
}

fn decode_mapping(data: &[u8], table: &[String], name: &str, hash: u64) -> Result<FunctionMapping> {
    let mut c = Cursor::new(data);
    let files = c.leb()? as usize;
    let mut filenames = Vec::with_capacity(files.min(data.len()));
    for _ in 0..files {
        let i = c.leb()? as usize;
        filenames.push(
            table
                .get(i)
                .cloned()
                .ok_or_else(|| Error::new(format!("file {i} of a table of {} is referenced", table.len())))?,
        );
    }
    let count = c.leb()? as usize;
    let mut expressions =
        vec![Expression { subtract: true, lhs: Counter::Zero, rhs: Counter::Zero }; count.min(data.len())];
    if expressions.len() != count {
        bail!("{count} expressions cannot fit {} bytes", data.len());
    }
    for i in 0..count {
        let lhs = c.leb()?;
        let rhs = c.leb()?;
        let lhs = decode_counter(lhs, &mut expressions)?;
        let rhs = decode_counter(rhs, &mut expressions)?;
        expressions[i].lhs = lhs;
        expressions[i].rhs = rhs;
    }
    let mut regions = Vec::new();
    for file_id in 0..files as u32 {
        let n = c.leb()?;
        let mut line = 0u32;
        for _ in 0..n {
            let encoded = c.leb()?;
            let mut kind = RegionKind::Code;
            let mut expanded_file_id = 0;
            let mut count = Counter::Zero;
            let mut false_count = Counter::Zero;
            if encoded & 3 != 0 {
                count = decode_counter(encoded, &mut expressions)?;
            } else if encoded & EXPANSION_BIT != 0 {
                kind = RegionKind::Expansion;
                expanded_file_id = u32::try_from(encoded >> (TAG_BITS + 1)).unwrap_or(u32::MAX);
                if expanded_file_id as usize >= files {
                    bail!("an expansion names file {expanded_file_id} of {files}");
                }
            } else {
                match encoded >> (TAG_BITS + 1) {
                    0 => {}
                    2 => kind = RegionKind::Skipped,
                    4 => {
                        kind = RegionKind::Branch;
                        count = decode_counter(c.leb()?, &mut expressions)?;
                        false_count = decode_counter(c.leb()?, &mut expressions)?;
                    }
                    5 => {
                        kind = RegionKind::McdcDecision;
                        c.leb()?;
                        c.leb()?;
                    }
                    6 => {
                        kind = RegionKind::McdcBranch;
                        count = decode_counter(c.leb()?, &mut expressions)?;
                        false_count = decode_counter(c.leb()?, &mut expressions)?;
                        c.leb()?;
                        c.leb()?;
                        c.leb()?;
                    }
                    other => bail!("region kind {other} is not one LLVM writes"),
                }
            }
            let delta = c.leb32()?;
            let mut col_start = c.leb32()?;
            let lines = c.leb32()?;
            let mut col_end = c.leb32()?;
            if col_end & (1 << 31) != 0 {
                kind = RegionKind::Gap;
                col_end &= !(1 << 31);
            }
            if col_start == 0 && col_end == 0 {
                col_start = 1;
                col_end = u32::MAX;
            }
            line = line.checked_add(delta).ok_or_else(|| Error::new("a region's line overflows"))?;
            let line_end = line.checked_add(lines).ok_or_else(|| Error::new("a region's end line overflows"))?;
            if (line, col_start) > (line_end, col_end) {
                bail!("a region ends ({line_end}:{col_end}) before it starts ({line}:{col_start})");
            }
            regions.push(Region {
                count,
                false_count,
                file_id,
                expanded_file_id,
                line_start: line,
                col_start,
                line_end,
                col_end,
                kind,
            });
        }
    }
    propagate_expansion_counts(&mut regions, files);
    Ok(FunctionMapping { name: name.to_string(), hash, filenames, expressions, regions })
}
