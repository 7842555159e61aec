//! A profile's counters read in process from LLVM's indexed profile
//! (`.profdata`): exactly what `llvm-profdata merge -text` prints of it
//! (names, structural hashes, counters), without starting a process per
//! trial (issue #35).
//!
//! It follows LLVM's `IndexedInstrProfReader::readHeader` and
//! `InstrProfLookupTrait::ReadData` (InstrProfReader.cpp),
//! `IndexedInstrProf::Header::readFromBuffer` (InstrProf.cpp) and
//! `OnDiskIterableChainedHashTable` (OnDiskHashTable.h), for the format
//! versions llvm-profdata 19 (12) and 22 (13) write; 13 changed no layout.
//! It is stricter than LLVM where LLVM trusts the file: every offset and
//! length is checked, each record's name must hash to the MD5 stored beside
//! it and sit in the bucket that hash selects, and the bucket table must
//! name exactly the buckets the records fill. Anything else is an error
//! naming what was wrong, never a panic; the report then reads that profile
//! with llvm-profdata. The report also reads the merged profile both ways on
//! every run and uses this reader only if they agree ([`CounterReader`]).
//!
//! Records are keyed by name, as the text is: the index holds each
//! function's PGO name beside its MD5, so the mapping's lookup by name is
//! kept, and the MD5 is only checked.

use super::binary::md5_low;
use super::counts::ProfileCounts;
use crate::bail;
use crate::error::{Error, Result};
use crate::workspace::Workspace;
use std::path::{Path, PathBuf};

/// `IndexedInstrProf::Magic`: `\xfflprofi\x81`.
const MAGIC: u64 = u64::from_le_bytes(*b"\xfflprofi\x81");
/// `GET_VERSION`: the low 32 bits are the version, the high ones variant flags.
const VARIANT_MASKS_ALL: u64 = 0xffff_ffff_0000_0000;
/// The versions read: 12 (LLVM 19 to 21) and 13 (LLVM 22: the frontend's
/// stable hash changed, not the layout). Both have the 72-byte header with
/// the vtable names' offset.
const VERSIONS: [u64; 2] = [12, 13];
const HEADER_SIZE: usize = 72;
/// Variant flags that leave the records as they are (InstrProfData.inc):
/// IR-level, context-sensitive (a second summary follows the first),
/// function entry instrumented, loop entries instrumented.
const VARIANT_LOOP_ENTRIES: u64 = 1 << 55;
const VARIANT_IR: u64 = 1 << 56;
const VARIANT_CSIR: u64 = 1 << 57;
const VARIANT_INSTR_ENTRY: u64 = 1 << 58;
/// The rest, named for the error: those the project never writes, whose
/// counters mean something else or whose sections this reader does not read.
const REFUSED_VARIANTS: [(u64, &str); 5] = [
    (1 << 59, "debug-info correlation"),
    (1 << 60, "single-byte coverage, whose counts llvm-cov combines otherwise"),
    (1 << 61, "function-entry-only instrumentation"),
    (1 << 62, "a memory profile"),
    (1 << 63, "temporal profile traces"),
];
/// `IPVK_Last` of LLVM 19 to 22: indirect call targets, memop sizes, vtable targets.
const VALUE_KIND_LAST: u32 = 2;

/// Reads the counters of the indexed profile `bytes`; errors say where in
/// the file and what was wrong (the caller names the file).
impl ProfileCounts {
    /// Reads an indexed profile's bytes in process.
    pub fn from_indexed(bytes: &[u8]) -> Result<ProfileCounts> {
        parse(bytes)
    }
}

/// The build IDs (lower-case hex) of the binaries whose profiles an indexed
/// profile holds: llvm-profdata keeps every raw profile's binary IDs through
/// each merge (`--binary-ids` prints them). Read after the header check of
/// [`ProfileCounts::from_indexed`].
pub fn binary_ids(bytes: &[u8]) -> Result<std::collections::BTreeSet<String>> {
    let file = Bytes(bytes);
    if bytes.len() < HEADER_SIZE || file.u64(0, "the magic")? != MAGIC {
        return Err(Error::new("it is not an indexed profile (no \\xfflprofi\\x81 magic)"));
    }
    let version = file.u64(8, "the version")? & !VARIANT_MASKS_ALL;
    if !VERSIONS.contains(&version) {
        return Err(Error::new(format!(
            "its format version is {version}; binary IDs are read from versions 12 and 13"
        )));
    }
    let at = file.offset(48, "the binary IDs' offset")?;
    let len = usize::try_from(file.u64(at, "the length of the binary IDs")?).unwrap_or(usize::MAX);
    read_binary_ids(file.slice(at + 8, len, "the binary IDs")?)
}

/// The indexed profile's list of binary IDs (the raw profile's layout):
/// each a u64 length and that many bytes, padded to 8.
fn read_binary_ids(mut list: &[u8]) -> Result<std::collections::BTreeSet<String>> {
    let mut ids = std::collections::BTreeSet::new();
    while !list.is_empty() {
        let (len, rest) = list.split_at_checked(8).ok_or_else(|| Error::new("a binary ID's length is cut short"))?;
        let len = usize::try_from(u64::from_le_bytes(len.try_into().expect("8 bytes"))).unwrap_or(usize::MAX);
        let padded = len.checked_next_multiple_of(8).filter(|p| *p <= rest.len()).ok_or_else(|| {
            Error::new(format!("a binary ID of {len} bytes runs past its list ({} bytes left)", rest.len()))
        })?;
        if len > 0 {
            ids.insert(crate::workspace::files::hex(&rest[..len]));
        }
        list = &rest[padded..];
    }
    Ok(ids)
}

/// `INSTR_PROF_RAW_MAGIC_64`: `\xfflprofr\x81`, little-endian.
const RAW_MAGIC: u64 = u64::from_le_bytes(*b"\x81rforpl\xff");

/// The largest list of binary IDs read from a raw profile: one ID per
/// module is a few dozen bytes.
pub(crate) const RAW_IDS_MAX: usize = 1 << 20;

/// Where a raw profile's binary IDs lie: their offset and length, from the
/// start of its header (`prefix`, at least 24 bytes). Raw format versions 8
/// to 10 (LLVM 15 to 22), whose headers are 11, 14 and 16 words long.
pub(crate) fn raw_ids_at(prefix: &[u8]) -> Result<(usize, usize)> {
    let file = Bytes(prefix);
    if file.u64(0, "the magic")? != RAW_MAGIC {
        return Err(Error::new("it is not a 64-bit little-endian raw profile"));
    }
    let words = match file.u64(8, "the version")? & !VARIANT_MASKS_ALL {
        8 => 11,
        9 => 14,
        10 => 16,
        v => {
            return Err(Error::new(format!(
                "its raw format version is {v}; binary IDs are read from versions 8 to 10"
            )));
        }
    };
    let len = usize::try_from(file.u64(16, "the length of the binary IDs")?).unwrap_or(usize::MAX);
    if len > RAW_IDS_MAX {
        return Err(Error::new(format!("it claims {len} bytes of binary IDs, more than {RAW_IDS_MAX}")));
    }
    Ok((words * 8, len))
}

/// The build IDs a raw profile's header names (`raw_ids_at` tells how many
/// of its first bytes `prefix` must hold): with `%m`, a process writes one
/// raw profile per instrumented module, so one ID, or none where the binary
/// was linked without one.
pub(crate) fn raw_binary_ids(prefix: &[u8]) -> Result<std::collections::BTreeSet<String>> {
    let (at, len) = raw_ids_at(prefix)?;
    read_binary_ids(Bytes(prefix).slice(at, len, "the binary IDs")?)
}

fn parse(bytes: &[u8]) -> Result<ProfileCounts> {
    let file = Bytes(bytes);
    if bytes.len() < 8 || file.u64(0, "the magic")? != MAGIC {
        return Err(Error::new("it is not an indexed profile (no \\xfflprofi\\x81 magic)"));
    }
    let raw_version = file.u64(8, "the version")?;
    let version = raw_version & !VARIANT_MASKS_ALL;
    if !VERSIONS.contains(&version) {
        return Err(Error::new(format!(
            "its format version is {version}; this reader knows versions {} and {} (llvm-profdata 19 to 22)",
            VERSIONS[0], VERSIONS[1]
        )));
    }
    let flags = raw_version & VARIANT_MASKS_ALL;
    for (bit, what) in REFUSED_VARIANTS {
        if flags & bit != 0 {
            return Err(Error::new(format!("it is a profile with {what}: not read in process")));
        }
    }
    let unknown = flags & !(VARIANT_LOOP_ENTRIES | VARIANT_IR | VARIANT_CSIR | VARIANT_INSTR_ENTRY);
    if unknown != 0 {
        return Err(Error::new(format!("its version has variant flags {unknown:#x} this reader does not know")));
    }
    let hash_type = file.u64(24, "the hash type")?;
    if hash_type != 0 {
        return Err(Error::new(format!("its hash type is {hash_type}, not 0 (MD5)")));
    }
    let hash_offset = file.offset(32, "the hash table's offset")?;
    let mem_prof_offset = file.u64(40, "the memory profile's offset")?;
    if mem_prof_offset != 0 {
        return Err(Error::new(format!("it names a memory profile at offset {mem_prof_offset}: not read in process")));
    }
    file.sized_section(file.offset(48, "the binary IDs' offset")?, "the binary IDs", true)?;
    let temporal = file.u64(56, "the temporal traces' offset")?;
    if temporal != 0 {
        return Err(Error::new(format!("it names temporal profile traces at offset {temporal}: not read in process")));
    }
    file.sized_section(file.offset(64, "the vtable names' offset")?, "the vtable names", false)?;

    let mut payload = file.summary_end(HEADER_SIZE, "the summary")?;
    if flags & VARIANT_CSIR != 0 {
        payload = file.summary_end(payload, "the context-sensitive summary")?;
    }
    let table = Table::at(&file, hash_offset, payload)?;
    let counts = table.records(&file, payload)?;
    Ok(counts)
}

/// The file's bytes, read little-endian with every offset checked.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn slice(&self, at: usize, len: usize, what: &str) -> Result<&[u8]> {
        at.checked_add(len).and_then(|end| self.0.get(at..end)).ok_or_else(|| {
            Error::new(format!(
                "{what} ({len} bytes at offset {at}) would end past the end of the file ({} bytes): it is truncated or corrupt",
                self.0.len()
            ))
        })
    }

    fn u64(&self, at: usize, what: &str) -> Result<u64> {
        let b = self.slice(at, 8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn u16(&self, at: usize, what: &str) -> Result<u16> {
        let b = self.slice(at, 2, what)?;
        Ok(u16::from_le_bytes(b.try_into().expect("2 bytes")))
    }

    /// A u64 at `at` that is an offset into the file.
    fn offset(&self, at: usize, what: &str) -> Result<usize> {
        let v = self.u64(at, what)?;
        usize::try_from(v).ok().filter(|v| *v <= self.0.len()).ok_or_else(|| {
            Error::new(format!("{what} is {v}, past the end of the file ({} bytes): it is corrupt", self.0.len()))
        })
    }

    /// A section that starts with its length in bytes (binary IDs, vtable
    /// names): it must lie within the file; the binary IDs' length is a
    /// multiple of 8, as `readHeader` requires.
    fn sized_section(&self, at: usize, what: &str, whole_words: bool) -> Result<()> {
        let len = self.u64(at, &format!("the length of {what}"))?;
        if whole_words && !len.is_multiple_of(8) {
            return Err(Error::new(format!("{what} at offset {at} have {len} bytes, not a multiple of 8")));
        }
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        self.slice(at + 8, len, what).map(|_| ())
    }

    /// `readSummary`: the offset just after the summary at `at`.
    fn summary_end(&self, at: usize, what: &str) -> Result<usize> {
        let fields = self.u64(at, &format!("the field count of {what}"))?;
        let entries = self.u64(at + 8, &format!("the cutoff count of {what}"))?;
        let size = fields
            .checked_mul(8)
            .and_then(|f| entries.checked_mul(24).and_then(|e| e.checked_add(f)))
            .and_then(|s| s.checked_add(16))
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(|| Error::new(format!("{what} at offset {at} claims {fields} fields and {entries} cutoffs")))?;
        self.slice(at, size, what)?;
        Ok(at + size)
    }
}

/// The on-disk chained hash table's bucket array (`OnDiskChainedHashTable::Create`).
struct Table {
    /// Where each bucket's records start; 0 for an empty bucket.
    buckets: Vec<usize>,
    entries: u64,
    /// Where the bucket array starts: the records lie before it.
    start: usize,
}

impl Table {
    fn at(file: &Bytes, start: usize, payload: usize) -> Result<Table> {
        if start < payload {
            return Err(Error::new(format!(
                "the hash table's offset {start} lies inside the header and summary (which end at {payload})"
            )));
        }
        let count = file.u64(start, "the hash table's bucket count")?;
        let entries = file.u64(start + 8, "the hash table's record count")?;
        if !count.is_power_of_two() {
            return Err(Error::new(format!("the hash table has {count} buckets, not a power of two")));
        }
        let len = usize::try_from(count).ok().and_then(|c| c.checked_mul(8)).unwrap_or(usize::MAX);
        let array = file.slice(start + 16, len, "the hash table's buckets")?;
        let buckets = array
            .chunks_exact(8)
            .map(|b| {
                let off = u64::from_le_bytes(b.try_into().expect("8 bytes"));
                // A bucket's records lie between the summary and the bucket array.
                usize::try_from(off).ok().filter(|o| *o == 0 || (payload..start).contains(o)).ok_or_else(|| {
                    Error::new(format!(
                        "a bucket of the hash table starts at offset {off}, outside the records ({payload}..{start})"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Table { buckets, entries, start })
    }

    /// Every record, walked from `payload` as LLVM's data iterator walks
    /// them (a bucket's item count, then per item its MD5, key and data
    /// lengths, name and data), each checked against the bucket array.
    fn records(&self, file: &Bytes, payload: usize) -> Result<ProfileCounts> {
        let mut counts = ProfileCounts::default();
        let mut at = payload;
        let mut buckets_seen = 0usize;
        let mut left_in_bucket = 0u16;
        let mut bucket_start = 0usize;
        let mut bucket_index = None;
        for n in 0..self.entries {
            if at >= self.start {
                return Err(Error::new(format!(
                    "the hash table names {} records; record {n} would start at offset {at}, past the records' end ({})",
                    self.entries, self.start
                )));
            }
            if left_in_bucket == 0 {
                left_in_bucket = file.u16(at, "a bucket's record count")?;
                if left_in_bucket == 0 {
                    return Err(Error::new(format!("the bucket at offset {at} has no records")));
                }
                bucket_start = at;
                bucket_index = None;
                buckets_seen += 1;
                at += 2;
            }
            let hash = file.u64(at, "a record's name hash")?;
            let key_len = file.u64(at + 8, "a record's name length")?;
            let data_len = file.u64(at + 16, "a record's data length")?;
            at += 24;
            let end = self.start;
            let within = |at: usize, len: u64, what: &str| -> Result<usize> {
                usize::try_from(len).ok().filter(|l| at.checked_add(*l).is_some_and(|e| e <= end)).ok_or_else(|| {
                    Error::new(format!("{what} at offset {at} is {len} bytes, past the records' end ({end})"))
                })
            };
            let key_len = within(at, key_len, "a record's name")?;
            let key = file.slice(at, key_len, "a record's name")?;
            at += key_len;
            let data_len = within(at, data_len, "a record's data")?;
            let data = file.slice(at, data_len, "a record's data")?;
            let data_at = at;
            at += data_len;

            let name = std::str::from_utf8(key)
                .map_err(|_| Error::new(format!("the name at offset {} is not UTF-8", data_at - key_len)))?;
            if name.is_empty() {
                return Err(Error::new(format!("the record at offset {data_at} has an empty name")));
            }
            if md5_low(key) != hash {
                return Err(Error::new(format!(
                    "the record of {name} stores the name hash {hash:#x}, not its MD5 {:#x}",
                    md5_low(key)
                )));
            }
            let index = (hash & (self.buckets.len() as u64 - 1)) as usize;
            if self.buckets[index] != bucket_start || bucket_index.is_some_and(|i| i != index) {
                return Err(Error::new(format!(
                    "the record of {name} lies in the bucket at offset {bucket_start}, but its hash selects bucket {index}, which starts at {}",
                    self.buckets[index]
                )));
            }
            bucket_index = Some(index);
            left_in_bucket -= 1;
            read_data(name, data, data_at, &mut counts)?;
        }
        if left_in_bucket != 0 {
            return Err(Error::new(format!(
                "the bucket at offset {bucket_start} claims {left_in_bucket} records more than the hash table's {}",
                self.entries
            )));
        }
        let filled = self.buckets.iter().filter(|b| **b != 0).count();
        if filled != buckets_seen {
            return Err(Error::new(format!(
                "the hash table names {filled} buckets with records, the records fill {buckets_seen}"
            )));
        }
        // The generator pads to the bucket array's 8-byte alignment with zeros.
        let padding = file.slice(at, self.start - at, "the padding before the hash table")?;
        if padding.len() >= 8 || padding.iter().any(|b| *b != 0) {
            return Err(Error::new(format!(
                "{} bytes lie between the last record (ending at offset {at}) and the hash table at {}",
                padding.len(),
                self.start
            )));
        }
        counts.sort();
        Ok(counts)
    }
}

/// `InstrProfLookupTrait::ReadData` for versions 11 on: per structural hash,
/// its counters, its bitmap bytes (each in a u64) and its value-profile
/// data, as long as the data lasts.
fn read_data(name: &str, data: &[u8], offset: usize, counts: &mut ProfileCounts) -> Result<()> {
    let bad = |at: usize, what: String| Error::new(format!("the record of {name} (offset {}): {what}", offset + at));
    if !data.len().is_multiple_of(8) {
        return Err(bad(0, format!("its data has {} bytes, not a multiple of 8", data.len())));
    }
    let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
    let words_left = |at: usize| (data.len() - at) / 8;
    let mut at = 0;
    if data.is_empty() {
        return Err(bad(0, "it has no data".into()));
    }
    while at < data.len() {
        // A hash must be followed by something (LLVM: `D + 8 >= End` is corrupt).
        if words_left(at) < 2 {
            return Err(bad(at, "it ends after a structural hash".into()));
        }
        let hash = word(at);
        let n = word(at + 8);
        at += 16;
        if n > words_left(at) as u64 {
            return Err(bad(at, format!("hash {hash} claims {n} counters, more than its data holds")));
        }
        let counters: Vec<u64> = (0..n as usize).map(|i| word(at + 8 * i)).collect();
        at += 8 * n as usize;
        if words_left(at) < 1 {
            return Err(bad(at, format!("hash {hash} ends before its bitmap byte count")));
        }
        let bitmap = word(at);
        at += 8;
        if bitmap > words_left(at) as u64 {
            return Err(bad(at, format!("hash {hash} claims {bitmap} bitmap bytes, more than its data holds")));
        }
        at += 8 * bitmap as usize;
        at += value_profile_size(&data[at..]).map_err(|why| bad(at, format!("hash {hash}: {why}")))?;
        if !counts.insert(name, hash, counters) {
            return Err(bad(at, format!("it has two records of hash {hash}")));
        }
    }
    Ok(())
}

/// The size of the value-profile data at the start of `data`
/// (`ValueProfData::getValueProfData` and `checkIntegrity`): its total size
/// and kind count, then per kind its site count, one byte per site (padded
/// to 8) and 16 bytes per value. Only checked, not kept: attribution reads
/// counters alone.
fn value_profile_size(data: &[u8]) -> Result<usize> {
    let u32_at = |at: usize| data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    let (Some(total), Some(kinds)) = (u32_at(0), u32_at(4)) else {
        bail!("it ends before its value-profile data");
    };
    let total = total as usize;
    if total < 8 || !total.is_multiple_of(8) || total > data.len() {
        bail!("its value-profile data claims {total} bytes, of {} left", data.len());
    }
    if kinds > VALUE_KIND_LAST + 1 {
        bail!("its value-profile data has {kinds} kinds, more than the {} there are", VALUE_KIND_LAST + 1);
    }
    let mut at = 8;
    for _ in 0..kinds {
        let (Some(kind), Some(sites)) = (u32_at(at), u32_at(at + 4)) else {
            bail!("a value-profile record lies past the data's total size");
        };
        if kind > VALUE_KIND_LAST {
            bail!("a value-profile record has kind {kind}");
        }
        let header = (8 + sites as usize).div_ceil(8) * 8;
        let values: usize =
            data.get(at + 8..at + 8 + sites as usize).map_or(usize::MAX, |s| s.iter().map(|c| *c as usize).sum());
        at = values
            .checked_mul(16)
            .and_then(|v| v.checked_add(header))
            .and_then(|r| r.checked_add(at))
            .unwrap_or(usize::MAX);
        if at > total {
            bail!("a value-profile record lies past the data's total size");
        }
    }
    Ok(total)
}

/// How each trial's counters are read: in process, once the merged
/// profile's counters read so equal llvm-profdata's; otherwise with
/// `llvm-profdata merge -text`, as before.
pub(crate) struct CounterReader {
    llvm_profdata: PathBuf,
    /// Why the in-process reader is not used; `None` when it is.
    fallback: Option<String>,
}

impl CounterReader {
    /// Reads `merged` with llvm-profdata and in process, and compares them.
    /// Returns the reader to use per trial and llvm-profdata's counts of
    /// `merged`; an error only when llvm-profdata cannot read it.
    pub(crate) fn checked(
        ws: &Workspace,
        llvm_profdata: &Path,
        merged: &Path,
    ) -> Result<(CounterReader, ProfileCounts)> {
        let theirs = ProfileCounts::read(llvm_profdata, merged)?;
        let fallback = match caught(merged, || read_indexed(ws, merged)) {
            Ok(ours) => theirs.difference(&ours).map(|d| format!("on the merged profile {}: {d}", merged.display())),
            Err(why) => Some(why.to_string()),
        };
        Ok((CounterReader { llvm_profdata: llvm_profdata.to_path_buf(), fallback }, theirs))
    }

    /// Why the counters are read with llvm-profdata; `None` when in process.
    pub(crate) fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The counters of `profdata`: in process when the check passed, and
    /// with llvm-profdata when it did not, or when the in-process reader
    /// fails on this file (said on screen, naming the file and why).
    pub(crate) fn read(&self, ws: &Workspace, profdata: &Path) -> Result<ProfileCounts> {
        if self.fallback.is_none() {
            match caught(profdata, || read_indexed(ws, profdata)) {
                Ok(counts) => return Ok(counts),
                Err(why) => crate::reporter::emit(crate::reporter::Event::ReaderFellBack { why: &why.to_string() }),
            }
        }
        ProfileCounts::read(&self.llvm_profdata, profdata)
    }
}

/// `profdata`'s counters read in process only, a panic of the reader
/// turned into an error: where no llvm-profdata check has run yet (a trial's
/// own lines, checked by the report against the merged profile).
pub(crate) fn read_in_process(ws: &Workspace, profdata: &Path) -> Result<ProfileCounts> {
    caught(profdata, || read_indexed(ws, profdata))
}

/// `profdata`'s counters in process, read through the workspace's handle.
fn read_indexed(ws: &Workspace, profdata: &Path) -> Result<ProfileCounts> {
    let bytes = ws
        .read_opt(profdata)?
        .ok_or_else(|| Error::new(format!("cannot read {}: it does not exist", profdata.display())))?;
    ProfileCounts::from_indexed(&bytes).map_err(|e| e.context(profdata.display()))
}

/// `f`'s result, with an error or a panic on reading `profdata` as its message.
fn caught(profdata: &Path, f: impl FnOnce() -> Result<ProfileCounts>) -> Result<ProfileCounts> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(ToString::to_string))
                .unwrap_or_default();
            Err(Error::new(format!("{}: it panicked: {what}", profdata.display())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::counts::InProfile;
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/profdata");

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
    }

    fn error(bytes: &[u8]) -> String {
        ProfileCounts::from_indexed(bytes).unwrap_err().to_string()
    }

    fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// Where the first bucket's records start: after the header and the summary.
    fn payload(bytes: &[u8]) -> usize {
        Bytes(bytes).summary_end(HEADER_SIZE, "the summary").unwrap()
    }

    /// The profiles llvm-profdata 19 and 22 wrote from tests/fixtures/profdata/*.proftext
    /// (bitmap bytes, value profiles of two kinds, two hashes of one name, zero
    /// counts, a file-local name; an IR profile with context-sensitive records and
    /// its second summary) read exactly as llvm-profdata's text of them.
    #[test]
    fn llvm_profdata_19_and_22s_profiles_read_as_their_text() {
        for (llvm, version) in [(19, 12), (22, 13)] {
            for profile in ["fe", "cs"] {
                let bytes = fixture(&format!("{profile}{llvm}.profdata"));
                assert_eq!(bytes[8], version, "{profile}{llvm} is written in version {version}");
                let ours = ProfileCounts::from_indexed(&bytes).unwrap();
                let text = String::from_utf8(fixture(&format!("{profile}{llvm}.txt"))).unwrap();
                let theirs = ProfileCounts::parse(&text).unwrap();
                assert_eq!(theirs.difference(&ours), None, "{profile}{llvm}");
                assert_eq!(ours, theirs);
            }
        }
        let fe = ProfileCounts::from_indexed(&fixture("fe22.profdata")).unwrap();
        assert!(matches!(fe.lookup("_Z1fv", 7), InProfile::Found([3, 0])));
        assert!(matches!(fe.lookup("_Z1fv", 1 << 60 | 7), InProfile::Found([1, 2, u64::MAX])));
        assert!(
            matches!(fe.lookup("main", 24), InProfile::Found([1])),
            "the value profile after its counters is skipped"
        );
        assert!(matches!(fe.lookup("lib.cc:_ZL6helperi", 99164), InProfile::Found([0, 0, 0, 0])));
        assert!(matches!(fe.lookup("_Z5emptyv", 1), InProfile::HashMismatch));
        let cs = ProfileCounts::from_indexed(&fixture("cs22.profdata")).unwrap();
        assert!(matches!(cs.lookup("foo", 29), InProfile::Found([6])));
        assert!(matches!(cs.lookup("foo", 1 << 60 | 1), InProfile::Found([5, 1])));
    }

    /// The oracle is `llvm-profdata show --binary-ids` on the same files:
    /// raw profiles of a program and its library, and their merge.
    #[test]
    fn binary_ids_are_those_llvm_profdata_prints() {
        let bin = Path::new("/usr/lib/llvm-22/bin");
        if !bin.join("clang").is_file() {
            assert!(std::env::var_os("CI").is_none(), "clang 22 is missing under CI");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("lib.c"), "int lib_f(int x) { return x > 1 ? 2 * x : x; }\n").unwrap();
        std::fs::write(
            d.join("main.c"),
            "int lib_f(int);\nint main(int c, char **v) { (void)v; return lib_f(c) - 1; }\n",
        )
        .unwrap();
        let run = |program: &Path, args: &[&str], env: Option<&str>| {
            let mut cmd = std::process::Command::new(program);
            cmd.current_dir(d).args(args);
            if let Some(pattern) = env {
                cmd.env("LLVM_PROFILE_FILE", pattern);
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{program:?} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let cc = bin.join("clang");
        let cov = ["-fprofile-instr-generate", "-fcoverage-mapping"];
        run(&cc, &[&cov[..], &["-shared", "-fPIC", "lib.c", "-o", "libl.so"]].concat(), None);
        run(&cc, &[&cov[..], &["main.c", "./libl.so", "-Wl,-rpath,.", "-o", "prog"]].concat(), None);
        run(&d.join("prog"), &[], Some("%p-%m.profraw"));
        let profdata = bin.join("llvm-profdata");
        let printed = |file: &Path| -> std::collections::BTreeSet<String> {
            let text = run(&profdata, &["show", "--binary-ids", file.to_str().unwrap()], None);
            let at = text.find("Binary IDs:").expect("llvm-profdata prints binary IDs");
            text[at..].lines().skip(1).map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
        };
        let mut raws: Vec<_> = std::fs::read_dir(d).unwrap().flatten().map(|e| e.path()).collect();
        raws.retain(|p| p.extension().is_some_and(|e| e == "profraw"));
        assert_eq!(raws.len(), 2);
        // One raw profile per module: the program's and the library's.
        let mut all = std::collections::BTreeSet::new();
        for raw in &raws {
            let ids = raw_binary_ids(&std::fs::read(raw).unwrap()).unwrap();
            assert_eq!(ids.len(), 1);
            assert_eq!(ids, printed(raw), "{}", raw.display());
            all.extend(ids);
        }
        let merged = d.join("all.profdata");
        let mut args = vec!["merge".to_string(), "-o".into(), merged.display().to_string()];
        args.extend(raws.iter().map(|r| r.display().to_string()));
        run(&profdata, &args.iter().map(String::as_str).collect::<Vec<_>>(), None);
        let ids = binary_ids(&std::fs::read(&merged).unwrap()).unwrap();
        assert_eq!(ids, all);
        assert_eq!(ids, printed(&merged));
        // A list cut short is an error, never a panic.
        assert!(read_binary_ids(&[20, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]).is_err());
        assert!(binary_ids(b"not a profile at all").is_err());
        let bytes = std::fs::read(&raws[0]).unwrap();
        assert!(raw_binary_ids(&bytes[..140]).is_err());
        assert!(raw_binary_ids(b"not a profile at all, not at all").is_err());
    }

    #[test]
    fn versions_variants_and_hash_types_it_does_not_read_are_named() {
        let fe = fixture("fe22.profdata");
        for version in [11u64, 14] {
            let mut bytes = fe.clone();
            put_u64(&mut bytes, 8, version);
            let e = error(&bytes);
            assert!(e.contains(&format!("format version is {version}; this reader knows versions 12 and 13")), "{e}");
        }
        let e = error(&fixture("temporal22.profdata"));
        assert!(e.contains("temporal profile traces: not read in process"), "{e}");
        let e = error(&fixture("single22.profdata"));
        assert!(e.contains("single-byte coverage"), "{e}");
        let mut bytes = fe.clone();
        put_u64(&mut bytes, 8, 13 | 1 << 40);
        assert!(error(&bytes).contains("variant flags 0x10000000000 this reader does not know"));
        let mut bytes = fe.clone();
        put_u64(&mut bytes, 24, 1);
        assert!(error(&bytes).contains("hash type is 1, not 0 (MD5)"));
        let mut bytes = fe.clone();
        put_u64(&mut bytes, 40, 64);
        assert!(error(&bytes).contains("memory profile at offset 64"));
        assert!(error(b"\xfflprofr\x81rest of a raw profile").contains("not an indexed profile"));
        assert!(error(b"").contains("not an indexed profile"));
    }

    #[test]
    fn damaged_records_and_tables_are_named() {
        let fe = fixture("fe22.profdata");
        let first = payload(&fe);
        let hash_at = first + 2;
        let stored = u64::from_le_bytes(fe[hash_at..hash_at + 8].try_into().unwrap());
        // Another name hash: the name no longer hashes to it.
        let mut bytes = fe.clone();
        put_u64(&mut bytes, hash_at, stored ^ 1 << 40);
        assert!(error(&bytes).contains("not its MD5"), "{}", error(&bytes));
        // A name one byte longer eats into its data.
        let mut bytes = fe.clone();
        let key_len = u64::from_le_bytes(fe[hash_at + 8..hash_at + 16].try_into().unwrap());
        put_u64(&mut bytes, hash_at + 8, key_len + 1);
        assert!(!error(&bytes).is_empty());
        // One record more than there are.
        let table = u64::from_le_bytes(fe[32..40].try_into().unwrap()) as usize;
        let entries = u64::from_le_bytes(fe[table + 8..table + 16].try_into().unwrap());
        let mut bytes = fe.clone();
        put_u64(&mut bytes, table + 8, entries + 1);
        assert!(error(&bytes).contains("has no records"), "the padding read as a bucket: {}", error(&bytes));
        let mut bytes = fe.clone();
        put_u64(&mut bytes, table + 8, entries - 1);
        assert!(error(&bytes).contains("names 3 buckets with records, the records fill 2"), "{}", error(&bytes));
        // The first record's bucket moved: its hash no longer selects where it lies.
        let buckets = u64::from_le_bytes(fe[table..table + 8].try_into().unwrap());
        let index = (stored & (buckets - 1)) as usize;
        let mut bytes = fe.clone();
        put_u64(&mut bytes, table + 16 + 8 * index, 0);
        assert!(error(&bytes).contains("but its hash selects bucket"), "{}", error(&bytes));
        let mut bytes = fe.clone();
        put_u64(&mut bytes, table, 3);
        assert!(error(&bytes).contains("3 buckets, not a power of two"));
        let mut bytes = fe.clone();
        put_u64(&mut bytes, 32, 16);
        assert!(error(&bytes).contains("lies inside the header and summary"));
    }

    /// A profile this reader refuses and llvm-profdata reads (version 11,
    /// which llvm-profdata 22 writes when asked): as the merged profile, the
    /// check names why and trials are read with llvm-profdata; as a trial's
    /// once the check passed, that trial is read with llvm-profdata.
    #[test]
    fn what_the_reader_refuses_is_read_with_llvm_profdata() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let llvm_profdata = Path::new("/usr/lib/llvm-22/bin/llvm-profdata");
        let old = dir.path().join("v11.profdata");
        crate::exec::process::Cmd::new(llvm_profdata)
            .arg("merge")
            .arg("--write-prev-version")
            .arg("-o")
            .arg(&old)
            .arg(format!("{FIXTURES}/fe.proftext"))
            .read()
            .unwrap();
        let text = ProfileCounts::read(llvm_profdata, &old).unwrap();
        let (reader, theirs) = CounterReader::checked(&ws, llvm_profdata, &old).unwrap();
        assert_eq!(theirs, text);
        let why = reader.fallback().unwrap();
        assert!(why.starts_with(&format!("{}: its format version is 11", old.display())), "{why}");
        assert_eq!(reader.read(&ws, &old).unwrap(), text);

        let good = dir.path().join("fe22.profdata");
        std::fs::write(&good, fixture("fe22.profdata")).unwrap();
        let (reader, _) = CounterReader::checked(&ws, llvm_profdata, &good).unwrap();
        assert_eq!(reader.fallback(), None);
        assert_eq!(reader.read(&ws, &old).unwrap(), text, "the trial the reader refuses");
        let fe = ProfileCounts::parse(&String::from_utf8(fixture("fe22.txt")).unwrap()).unwrap();
        assert_eq!(reader.read(&ws, &good).unwrap(), fe);
        let missing = reader.read(&ws, &dir.path().join("none.profdata")).unwrap_err().to_string();
        assert!(missing.contains("none.profdata"), "{missing}");
    }

    /// Cut at every length, each byte changed three ways: an error naming
    /// what was wrong for every cut, and never a panic.
    #[test]
    fn cut_or_flipped_profiles_are_errors_never_panics() {
        for name in ["fe19.profdata", "fe22.profdata", "cs22.profdata"] {
            let bytes = fixture(name);
            for length in 0..bytes.len() {
                let e = error(&bytes[..length]);
                assert!(!e.is_empty(), "{name} cut at {length}");
            }
            let mut read = 0;
            for at in 0..bytes.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut mutated = bytes.clone();
                    mutated[at] ^= flip;
                    read += usize::from(ProfileCounts::from_indexed(&mutated).is_ok());
                }
            }
            // Counter values, summary fields and unused bytes may change and still read.
            assert!(read > 0 && read < 3 * bytes.len(), "{name}: {read}");
        }
    }
}
