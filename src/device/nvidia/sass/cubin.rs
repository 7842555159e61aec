//! SASS offset → source line tables of one cubin, read from its DWARF `.debug_line`.
//!
//! A cubin is an ELF64 little-endian file with `e_machine` `EM_CUDA`. Every kernel has its own
//! `.text.<mangled name>` section, all at address 0; `__noinline__` device functions are copied
//! into each caller's section. The line table has one sequence per kernel section, starting with
//! `DW_LNE_set_address 0` that a `.rela.debug_line` entry (`R_CUDA_64` against the kernel's symbol)
//! ties to its section. So an address alone does not say which function it is in: the relocation
//! does. ptxas marks inlined code with vendor extended opcode 0x90: its operands, two ULEBs, are
//! the row number (from 1, counted within the sequence) of the call site and the `.debug_str`
//! offset of the callee's name; `0, 0` ends the inlined code. The opcode sets a register that
//! every following row of the sequence carries until the next 0x90 or the end of the sequence.
//! A row's own file and line are the innermost frame; its call site, and that row's own call
//! site in turn, are the frames around it: `nvdisasm -gi` prints the same chain.

use std::collections::{BTreeMap, HashMap};

use gimli::{AttributeValue, EndianSlice, LittleEndian, Reader, RelocateReader};
use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget, SectionIndex};

use crate::bail;
use crate::error::{Context, Result};

/// Bytes per SASS instruction on `sm_70` and later, the only GPUs CUPTI's SASS metrics support.
pub(crate) const INSTRUCTION_BYTES: u64 = 16;

/// ELF relocation type `R_CUDA_64`: a 64-bit absolute address, the only kind nvcc puts in
/// `.rela.debug_line`.
const R_CUDA_64: object::elf::RelocationType = object::elf::RelocationType(2);

/// Relocated line-table addresses carry `slot + 1` above this bit, so that rows of different
/// sections, all starting at 0, stay apart while gimli runs the line program.
const SECTION_TAG_SHIFT: u32 = 40;
const OFFSET_MASK: u64 = (1 << SECTION_TAG_SHIFT) - 1;

/// A source position: full path (include directory joined with the file name) and line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FileLine {
    pub(crate) file: String,
    pub(crate) line: u32,
}

/// The source positions of one instruction: the innermost frame (the inlined code's own line)
/// first, then each call site it was inlined at, out to the kernel's own line. Never empty.
pub(crate) type Frames = std::sync::Arc<[FileLine]>;

/// The line rows of one kernel section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FunctionLines {
    /// Section size in bytes; the kernel has `size / INSTRUCTION_BYTES` instructions.
    pub(crate) size: u64,
    /// Rows sorted by offset; `None` marks an end of sequence: offsets from there on have no
    /// line until the next row. At one offset the last row wins, as in nvdisasm.
    pub(crate) rows: Vec<(u64, Option<Frames>)>,
}

impl FunctionLines {
    /// The frames of the instruction at `offset`: the last row at or before it; empty when it
    /// has no line.
    pub(crate) fn frames_at(&self, offset: u64) -> &[FileLine] {
        let after = self.rows.partition_point(|(row_offset, _)| *row_offset <= offset);
        after.checked_sub(1).and_then(|row| self.rows[row].1.as_deref()).unwrap_or_default()
    }

    /// Every instruction offset of the function with its frames (empty without a line).
    pub(crate) fn instructions(&self) -> impl Iterator<Item = (u64, &[FileLine])> {
        (0..self.size / INSTRUCTION_BYTES)
            .map(|index| index * INSTRUCTION_BYTES)
            .map(|offset| (offset, self.frames_at(offset)))
    }
}

/// Line tables of every kernel of one cubin, by mangled kernel name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CubinLines {
    pub(crate) functions: BTreeMap<String, FunctionLines>,
    /// Why some or all of its code maps to no line: no `.debug_line` (built
    /// without `-lineinfo`), or sequences that no kernel's section holds
    /// (code the device linker dropped). Said, not failed: the other kernels'
    /// lines are sound.
    pub(crate) unmapped: Option<String>,
}

impl CubinLines {
    /// Reads a cubin; `origin` (its path, say) names it in errors.
    pub(crate) fn parse(data: &[u8], origin: &str) -> Result<Self> {
        parse_cubin(data).map_err(|error| error.context(format_args!("cubin {origin}")))
    }

    /// Every line any frame of any instruction of any kernel maps to, launched or not: what
    /// device coverage counts as instrumented.
    #[cfg(test)]
    pub(crate) fn instrumented_lines(&self) -> std::collections::BTreeSet<&FileLine> {
        self.functions.values().flat_map(FunctionLines::instructions).flat_map(|(_, frames)| frames).collect()
    }
}

fn parse_cubin(data: &[u8]) -> Result<CubinLines> {
    let elf = ElfFile64::<object::LittleEndian>::parse(data).context("not a 64-bit little-endian ELF")?;
    let machine = elf.elf_header().e_machine.get(object::LittleEndian);
    if machine != object::elf::EM_CUDA {
        bail!("ELF machine {machine} is not EM_CUDA ({})", object::elf::EM_CUDA);
    }
    let mut functions = BTreeMap::new();
    let mut function_sections = HashMap::new();
    for section in elf.sections() {
        let name = section.name().context("section name")?;
        if let Some(function) = name.strip_prefix(".text.") {
            let size = section.size();
            if size % INSTRUCTION_BYTES != 0 {
                bail!("section {name} is {size} bytes, not whole {INSTRUCTION_BYTES}-byte instructions");
            }
            function_sections.insert(section.index(), (function.to_owned(), section.address(), size));
            functions.insert(function.to_owned(), FunctionLines { size, rows: Vec::new() });
        }
    }
    let Some(debug_line) = elf.section_by_name(".debug_line") else {
        let unmapped =
            Some("it has no .debug_line section (built without -lineinfo): its kernels map to no line".into());
        return Ok(CubinLines { functions, unmapped });
    };
    let relocations = LineRelocations::read(&elf, &debug_line)?;
    let section_bytes = |name: &str| -> Result<&[u8]> {
        match elf.section_by_name(name) {
            Some(section) => section.data().context(name),
            None => Ok(&[]),
        }
    };
    let line_data = debug_line.data().context(".debug_line")?;
    let sequences =
        read_line_sequences(line_data, &relocations, section_bytes(".debug_str")?, section_bytes(".debug_line_str")?)?;
    let mut unplaced = 0;
    for sequence in sequences {
        let placed = match sequence.section {
            Some(index) => match function_sections.get(&index) {
                Some((function, base, _)) => Some((function.clone(), *base)),
                None => bail!(".debug_line sequence relocated against section {index}, not a .text section"),
            },
            None => untagged_function(&function_sections, sequence.start),
        };
        let Some((function, base)) = placed else {
            unplaced += 1;
            continue;
        };
        let Some(lines) = functions.get_mut(&function) else {
            bail!("internal: no entry for function {function}");
        };
        for (address, line) in sequence.rows {
            lines.rows.push((address.wrapping_sub(base), line));
        }
    }
    for lines in functions.values_mut() {
        // Stable, so rows at one offset keep program order; an end of sequence sorts before a
        // row of the next sequence starting at the same offset.
        lines.rows.sort_by_key(|(offset, line)| (*offset, line.is_some()));
    }
    let unmapped = (unplaced > 0).then(|| {
        format!("{unplaced} .debug_line sequences have no relocation and no single .text section holds them; skipped")
    });
    Ok(CubinLines { functions, unmapped })
}

/// A sequence without relocation belongs to the one function section whose address range holds
/// it (linked cubins with distinct section addresses); with sections all at 0 it is ambiguous.
fn untagged_function(sections: &HashMap<SectionIndex, (String, u64, u64)>, start: u64) -> Option<(String, u64)> {
    let mut containing =
        sections.values().filter(|(_, base, size)| start.checked_sub(*base).is_some_and(|offset| offset < *size));
    match (containing.next(), containing.next()) {
        (Some((function, base, _)), None) => Some((function.clone(), *base)),
        _ => None,
    }
}

/// `.rela.debug_line` entries by the offset of the address they patch.
#[derive(Debug, Clone, Default)]
struct LineRelocations {
    /// Offset in `.debug_line` → (slot, symbol value + addend).
    by_offset: HashMap<usize, (u64, u64)>,
    /// Slot → section of the relocation's symbol.
    sections: Vec<SectionIndex>,
}

impl LineRelocations {
    fn read(
        elf: &ElfFile64<'_, object::LittleEndian>,
        debug_line: &object::read::elf::ElfSection64<'_, '_, object::LittleEndian>,
    ) -> Result<Self> {
        let mut relocations = LineRelocations::default();
        for (offset, relocation) in debug_line.relocations() {
            if let RelocationFlags::Elf { r_type } = relocation.flags()
                && r_type != R_CUDA_64
            {
                bail!(".rela.debug_line at {offset:#x}: relocation type {}, expected R_CUDA_64 (2)", r_type.0);
            }
            let RelocationTarget::Symbol(symbol_index) = relocation.target() else {
                bail!(".rela.debug_line at {offset:#x}: target is not a symbol");
            };
            let symbol =
                elf.symbol_by_index(symbol_index).with_context(|| format!(".rela.debug_line at {offset:#x}"))?;
            let Some(section) = symbol.section_index() else {
                bail!(".rela.debug_line at {offset:#x}: symbol {} is not in a section", symbol_index.0);
            };
            let value = symbol.address().wrapping_add_signed(relocation.addend());
            let slot = relocations.sections.len() as u64;
            let Ok(offset) = usize::try_from(offset) else {
                bail!(".rela.debug_line offset {offset:#x} is out of range");
            };
            relocations.by_offset.insert(offset, (slot, value));
            relocations.sections.push(section);
        }
        Ok(relocations)
    }
}

impl gimli::Relocate for &LineRelocations {
    fn relocate_address(&self, offset: usize, value: u64) -> gimli::Result<u64> {
        match self.by_offset.get(&offset) {
            // RELA: the stored value is ignored; S + A, tagged with its section's slot.
            Some(&(slot, target)) if target <= OFFSET_MASK && slot < (1 << (63 - SECTION_TAG_SHIFT)) => {
                Ok(((slot + 1) << SECTION_TAG_SHIFT) | target)
            }
            Some(_) => Err(gimli::Error::AddressOverflow),
            None => Ok(value),
        }
    }

    fn relocate_offset(&self, _offset: usize, value: usize) -> gimli::Result<usize> {
        Ok(value)
    }
}

type LineReader<'data, 'relocations> = RelocateReader<EndianSlice<'data, LittleEndian>, &'relocations LineRelocations>;

/// One line-table sequence: the rows of one run of addresses in one section.
#[derive(Debug)]
struct Sequence {
    /// The section its start address was relocated against, if it was.
    section: Option<SectionIndex>,
    /// Start address (section-relative when relocated).
    start: u64,
    rows: Vec<(u64, Option<Frames>)>,
}

/// Runs every line program of `.debug_line` (a cubin has no `.debug_info` pointing at them, so
/// they are read back to back).
fn read_line_sequences(
    debug_line: &[u8],
    relocations: &LineRelocations,
    debug_str: &[u8],
    debug_line_str: &[u8],
) -> Result<Vec<Sequence>> {
    let no_relocations = LineRelocations::default();
    let reader = |data, relocations| LineReader::new(EndianSlice::new(data, LittleEndian), relocations);
    let lines = gimli::DebugLine::from(reader(debug_line, relocations));
    let strings = Strings {
        debug_str: gimli::DebugStr::from(reader(debug_str, &no_relocations)),
        debug_line_str: gimli::DebugLineStr::from(reader(debug_line_str, &no_relocations)),
    };
    let mut sequences = Vec::new();
    let mut unit_offset = 0usize;
    while unit_offset < debug_line.len() {
        let program = lines
            .program(gimli::DebugLineOffset(unit_offset), 8, None, None)
            .with_context(|| format!(".debug_line unit at {unit_offset:#x}"))?;
        let header = program.header();
        let unit_end = header
            .unit_length()
            .checked_add(usize::from(header.format().initial_length_size()))
            .and_then(|length| unit_offset.checked_add(length));
        let Some(next_offset) = unit_end else {
            bail!(".debug_line unit at {unit_offset:#x}: length overflows");
        };
        read_unit_sequences(program, &strings, relocations, &mut sequences)
            .map_err(|error| error.context(format_args!(".debug_line unit at {unit_offset:#x}")))?;
        unit_offset = next_offset;
    }
    Ok(sequences)
}

/// The string sections file names may point into (DWARF 5 `DW_FORM_strp`/`DW_FORM_line_strp`).
struct Strings<'data, 'relocations> {
    debug_str: gimli::DebugStr<LineReader<'data, 'relocations>>,
    debug_line_str: gimli::DebugLineStr<LineReader<'data, 'relocations>>,
}

impl<'data, 'relocations> Strings<'data, 'relocations> {
    fn text(&self, value: AttributeValue<LineReader<'data, 'relocations>>) -> Result<String> {
        let reader = match value {
            AttributeValue::String(reader) => reader,
            AttributeValue::DebugStrRef(offset) => self.debug_str.get_str(offset).context(".debug_str")?,
            AttributeValue::DebugLineStrRef(offset) => {
                self.debug_line_str.get_str(offset).context(".debug_line_str")?
            }
            other => bail!("file name of unsupported form {other:?}"),
        };
        let text = reader.to_string().context("file name")?;
        Ok(text.into_owned())
    }
}

/// NVIDIA's extended opcode for inlined code (`DW_LNE_lo_user` + 0x10); gimli hands it over as
/// `UnknownExtended`, with its operands.
const DW_LNE_NV_INLINED_CALL: gimli::DwLne = gimli::DwLne(0x90);

/// Runs one line program with gimli's row state machine, instruction by instruction, so that
/// the inlined-call opcode, which gimli leaves alone, is seen: each row's frames are its own
/// line and the frames of the row it names as its call site.
fn read_unit_sequences<'data, 'relocations>(
    mut program: gimli::IncompleteLineProgram<LineReader<'data, 'relocations>>,
    strings: &Strings<'data, 'relocations>,
    relocations: &LineRelocations,
    sequences: &mut Vec<Sequence>,
) -> Result<()> {
    let mut paths: HashMap<u64, String> = HashMap::new();
    let mut instructions = program.header().instructions();
    let mut row = gimli::LineRow::new(program.header());
    // The open sequence: its section tag, the sequence, and every row's frames in order, for
    // the call sites that later rows name by number.
    let mut current: Option<(u64, Sequence, Vec<Option<Frames>>)> = None;
    // The inlined-call register: the call site's row number (from 1) in the open sequence.
    let mut call_site: u64 = 0;
    while let Some(instruction) = instructions.next_instruction(program.header()).context("line program")? {
        match instruction {
            gimli::LineInstruction::UnknownExtended(DW_LNE_NV_INLINED_CALL, mut operands) => {
                let operand = |reader: &mut LineReader<'_, '_>| reader.read_uleb128().context("inlined-call opcode");
                call_site = operand(&mut operands)?;
                // The callee's name (a .debug_str offset) is not needed for lines.
                operand(&mut operands)?;
                continue;
            }
            gimli::LineInstruction::SetAddress(address) if address < row.address() => {
                bail!("DW_LNE_set_address {address:#x} goes back from {:#x}", row.address());
            }
            _ => {}
        }
        if !row.execute(instruction, &mut program).context("line program")? {
            continue;
        }
        let tag = row.address() >> SECTION_TAG_SHIFT;
        let address = if tag == 0 { row.address() } else { row.address() & OFFSET_MASK };
        let (sequence_tag, sequence, frames) = if let Some(open) = &mut current {
            open
        } else {
            let section = tagged_section(tag, relocations)?;
            current.insert((tag, Sequence { section, start: address, rows: Vec::new() }, Vec::new()))
        };
        if *sequence_tag != tag {
            bail!("a sequence starting at {:#x} runs into another section", sequence.start);
        }
        if row.end_sequence() {
            sequence.rows.push((address, None));
            if let Some((_, done, _)) = current.take() {
                sequences.push(done);
            }
            call_site = 0;
            row.reset(program.header());
            continue;
        }
        let own = match row.line() {
            // Line 0 is DWARF's "no source line".
            None => None,
            Some(line) => {
                let Ok(line) = u32::try_from(line.get()) else {
                    bail!("line {line} at {address:#x} is out of range");
                };
                let file = if let Some(path) = paths.get(&row.file_index()) {
                    path.clone()
                } else {
                    let path = file_path(program.header(), row.file_index(), strings)?;
                    paths.insert(row.file_index(), path.clone());
                    path
                };
                Some(FileLine { file, line })
            }
        };
        let outer: &[FileLine] = match call_site {
            0 => &[],
            site => match usize::try_from(site - 1).ok().and_then(|index| frames.get(index)) {
                Some(outer) => outer.as_deref().unwrap_or_default(),
                None => bail!(
                    "row {} at {address:#x} is inlined at row {site}, which the sequence does not have before it",
                    frames.len() + 1
                ),
            },
        };
        let chain: Option<Frames> = match (own, outer.is_empty()) {
            (None, true) => None,
            (own, _) => Some(own.into_iter().chain(outer.iter().cloned()).collect()),
        };
        frames.push(chain.clone());
        sequence.rows.push((address, chain));
        row.reset(program.header());
    }
    // A program cut short before its end_sequence still says where its rows are.
    if let Some((_, open, _)) = current {
        sequences.push(open);
    }
    Ok(())
}

/// The section a tagged address was relocated against; tag 0 is an address without relocation.
fn tagged_section(tag: u64, relocations: &LineRelocations) -> Result<Option<SectionIndex>> {
    let Some(slot) = tag.checked_sub(1) else {
        return Ok(None);
    };
    match usize::try_from(slot).ok().and_then(|slot| relocations.sections.get(slot)) {
        Some(&section) => Ok(Some(section)),
        None => bail!("address tag {tag} has no relocation"),
    }
}

/// The full path of file `index`: its name when absolute, else joined to its include directory.
fn file_path<'data, 'relocations>(
    header: &gimli::LineProgramHeader<LineReader<'data, 'relocations>>,
    index: u64,
    strings: &Strings<'data, 'relocations>,
) -> Result<String> {
    let Some(file) = header.file(index) else {
        bail!("file index {index} is not in the line program header");
    };
    let name = strings.text(file.path_name())?;
    if name.starts_with('/') {
        return Ok(name);
    }
    let directory = match file.directory(header) {
        Some(directory) => strings.text(directory)?,
        None => String::new(),
    };
    Ok(if directory.is_empty() { name } else { format!("{}/{name}", directory.trim_end_matches('/')) })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-sass");
    const ARCHES: [&str; 2] = ["sm_90", "sm_100"];
    const HEADER: &str = "/tmp/ccl-cuda-sass/kmath.cuh";
    const SOURCE: &str = "/tmp/ccl-cuda-sass/k.cu";

    pub(crate) fn fixture_cubin(arch: &str) -> CubinLines {
        let path = format!("{FIXTURES}/k.{arch}.cubin");
        CubinLines::parse(&std::fs::read(&path).unwrap(), &path).unwrap()
    }

    /// Each instruction's frames, innermost first, by function.
    type Disassembly = BTreeMap<String, Vec<(u64, Vec<FileLine>)>>;

    /// Reads `nvdisasm -gi -c` output: before an instruction whose line changes, one
    /// `//## File "...", line N[ inlined at "...", line M]` comment per frame, innermost first;
    /// they hold for the instructions after it, up to the next comments or section. (`-g`
    /// without `-i` prints the innermost frame alone.)
    pub(crate) fn parse_nvdisasm(text: &str) -> Disassembly {
        let mut functions = Disassembly::new();
        let mut function = None;
        let mut current = Vec::new();
        let mut fresh = false;
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix(".section\t.text.") {
                let name = rest.split(',').next().unwrap().to_owned();
                functions.insert(name.clone(), Vec::new());
                function = Some(name);
                current.clear();
            } else if let Some(rest) = line.strip_prefix("//## File \"") {
                if !fresh {
                    current.clear();
                    fresh = true;
                }
                let (file, rest) = rest.split_once("\", line ").unwrap();
                let line = rest.split(' ').next().unwrap().parse().unwrap();
                current.push(FileLine { file: file.to_owned(), line });
            } else if let Some(rest) = line.strip_prefix("/*") {
                fresh = false;
                let (offset, _) = rest.split_once("*/").unwrap();
                let offset = u64::from_str_radix(offset, 16).unwrap();
                functions.get_mut(function.as_ref().unwrap()).unwrap().push((offset, current.clone()));
            }
        }
        functions
    }

    /// Our frames of every instruction, or only the innermost (`-g`'s view).
    pub(crate) fn our_disassembly(cubin: &CubinLines, every_frame: bool) -> Disassembly {
        cubin
            .functions
            .iter()
            .map(|(name, lines)| {
                let rows = lines
                    .instructions()
                    .map(|(offset, frames)| {
                        let shown = if every_frame { frames } else { &frames[..frames.len().min(1)] };
                        (offset, shown.to_vec())
                    })
                    .collect();
                (name.clone(), rows)
            })
            .collect()
    }

    pub(crate) fn assert_same_lines(ours: &Disassembly, theirs: &Disassembly, what: &str) {
        assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>(), "{what}: functions");
        for (function, rows) in ours {
            let expected = &theirs[function];
            assert_eq!(rows.len(), expected.len(), "{what}: {function}: instruction count");
            for (row, expected) in rows.iter().zip(expected) {
                assert_eq!(row, expected, "{what}: {function} at {:#x}", row.0);
            }
        }
    }

    #[test]
    fn object_reads_cubins_as_elf64_em_cuda() {
        let data = std::fs::read(format!("{FIXTURES}/k.sm_90.cubin")).unwrap();
        let elf = ElfFile64::<object::LittleEndian>::parse(&*data).unwrap();
        assert_eq!(elf.elf_header().e_machine.get(object::LittleEndian), object::elf::EM_CUDA);
        assert!(elf.section_by_name(".rela.debug_line").is_some());
    }

    #[test]
    fn every_instruction_matches_saved_nvdisasm() {
        for arch in ARCHES {
            let text = std::fs::read_to_string(format!("{FIXTURES}/k.{arch}.nvdisasm.txt")).unwrap();
            let theirs = parse_nvdisasm(&text);
            assert_eq!(theirs.len(), 3, "{arch}");
            assert_same_lines(&our_disassembly(&fixture_cubin(arch), false), &theirs, arch);
        }
    }

    #[test]
    fn every_frame_matches_saved_nvdisasm_gi() {
        for arch in ARCHES {
            let text = std::fs::read_to_string(format!("{FIXTURES}/k.{arch}.nvdisasm-gi.txt")).unwrap();
            let theirs = parse_nvdisasm(&text);
            assert!(theirs.values().flatten().any(|(_, frames)| frames.len() > 1), "{arch}: no inlined code");
            assert_same_lines(&our_disassembly(&fixture_cubin(arch), true), &theirs, arch);
        }
    }

    /// NVIDIA's disassembler, where this machine has one: `NVDISASM`, else `nvdisasm` on
    /// `PATH` (`scripts/install-deps` puts the `nvidia-cuda-nvdisasm` wheel's there), else a
    /// Python environment's wheel (`nvidia/cu13/bin/nvdisasm` beside a `bin` on `PATH`).
    pub(crate) fn nvdisasm() -> Option<std::path::PathBuf> {
        if let Some(named) = std::env::var_os("NVDISASM") {
            return Some(named.into());
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let dirs: Vec<std::path::PathBuf> = std::env::split_paths(&path).collect();
        if let Some(found) = dirs.iter().map(|dir| dir.join("nvdisasm")).find(|p| p.is_file()) {
            return Some(found);
        }
        dirs.iter().filter_map(|bin| bin.parent()).find_map(|prefix| {
            let pythons = std::fs::read_dir(prefix.join("lib")).ok()?;
            pythons
                .flatten()
                .map(|python| python.path().join("site-packages/nvidia/cu13/bin/nvdisasm"))
                .find(|p| p.is_file())
        })
    }

    /// `nvdisasm <flags> -c <cubin>`, parsed.
    fn live_nvdisasm(nvdisasm: &std::path::Path, flags: &str, cubin: &str) -> Disassembly {
        let output = std::process::Command::new(nvdisasm).args([flags, "-c", cubin]).output().unwrap();
        assert!(output.status.success(), "{} {flags} failed on {cubin}", nvdisasm.display());
        parse_nvdisasm(&String::from_utf8(output.stdout).unwrap())
    }

    /// Runs where nvdisasm is (see [`nvdisasm`]); without it, says so and checks nothing.
    #[test]
    fn every_instruction_matches_live_nvdisasm() {
        let Some(nvdisasm) = nvdisasm() else {
            crate::say!("no nvdisasm: skipping the live comparison");
            return;
        };
        for arch in ARCHES {
            let path = format!("{FIXTURES}/k.{arch}.cubin");
            for (flags, saved, every_frame) in [("-g", "nvdisasm.txt", false), ("-gi", "nvdisasm-gi.txt", true)] {
                let live = live_nvdisasm(&nvdisasm, flags, &path);
                let saved = parse_nvdisasm(&std::fs::read_to_string(format!("{FIXTURES}/k.{arch}.{saved}")).unwrap());
                assert_eq!(live, saved, "{arch}: live nvdisasm {flags} against the saved output");
                assert_same_lines(&our_disassembly(&fixture_cubin(arch), every_frame), &live, arch);
            }
        }
    }

    /// The cubins the H200 capture saved (the CUDA fixture's kernels, `tests/fixtures/cuda-capture`),
    /// or those of the folder `CCL_COV_CUDA_CUBINS` names (NCCL's, on the GPU host): every
    /// instruction's frames, innermost to outermost, as `nvdisasm -gi` prints them.
    #[test]
    fn every_frame_of_the_captured_cubins_matches_live_nvdisasm_gi() {
        let Some(nvdisasm) = nvdisasm() else {
            crate::say!("no nvdisasm: skipping the live comparison");
            return;
        };
        let dir = std::env::var("CCL_COV_CUDA_CUBINS")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-capture/cubins").to_owned());
        let mut inlined = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // Beside each cubin, its branch listing.
            if path.extension().is_none_or(|extension| extension != "cubin") {
                continue;
            }
            let path = path.display().to_string();
            let cubin = CubinLines::parse(&std::fs::read(&path).unwrap(), &path).unwrap();
            let theirs = live_nvdisasm(&nvdisasm, "-gi", &path);
            inlined += theirs.values().flatten().filter(|(_, frames)| frames.len() > 1).count();
            assert_same_lines(&our_disassembly(&cubin, true), &theirs, &path);
        }
        assert!(inlined > 100, "only {inlined} inlined instructions in the captured cubins");
    }

    #[test]
    fn inlined_template_rows_point_into_the_header_from_both_kernels() {
        for arch in ARCHES {
            let cubin = fixture_cubin(arch);
            for kernel in ["_Z12scale_floatsPKfPfif", "_Z10scale_intsPKiPii"] {
                let lines: std::collections::BTreeSet<_> =
                    cubin.functions[kernel].instructions().filter_map(|(_, frames)| frames.first().cloned()).collect();
                // scale_add's body is kmath.cuh lines 6-7; the float kernel fuses both into one FFMA.
                let header_line = FileLine { file: HEADER.to_owned(), line: 7 };
                assert!(lines.contains(&header_line), "{arch} {kernel}: {lines:?}");
                assert!(lines.iter().any(|line| line.file == SOURCE), "{arch} {kernel}");
            }
        }
    }

    #[test]
    fn instrumented_lines_include_the_kernel_never_launched() {
        let cubin = fixture_cubin("sm_90");
        let lines = cubin.instrumented_lines();
        // never_launched is k.cu lines 28-30.
        for line in 28..=30 {
            assert!(lines.contains(&FileLine { file: SOURCE.to_owned(), line }), "line {line}");
        }
        assert!(lines.iter().all(|line| line.file == SOURCE || line.file == HEADER));
    }

    #[test]
    fn offsets_before_the_first_row_or_after_an_end_of_sequence_have_no_line() {
        let line: Frames = vec![FileLine { file: "a.cu".to_owned(), line: 3 }].into();
        let lines = FunctionLines { size: 0x40, rows: vec![(0x10, Some(line.clone())), (0x30, None)] };
        let found: Vec<_> = lines.instructions().collect();
        assert_eq!(found, vec![(0, &[][..]), (0x10, &line[..]), (0x20, &line[..]), (0x30, &[][..])]);
    }

    #[test]
    fn bad_inputs_are_errors_that_name_the_cubin() {
        let data = std::fs::read(format!("{FIXTURES}/k.sm_90.cubin")).unwrap();
        for length in (0..data.len()).step_by(97) {
            if let Err(error) = CubinLines::parse(&data[..length], "cut.cubin") {
                assert!(error.to_string().starts_with("cubin cut.cubin: "), "{error}");
            }
        }
        // Garbage over every byte of the headers and the line table, one byte at a time.
        let mut state = 0x9e37_79b9_u32;
        for index in 0..data.len().min(0x1000) {
            let mut mutated = data.clone();
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            mutated[index] = state.to_le_bytes()[0];
            let _ = CubinLines::parse(&mutated, "mutated.cubin");
        }
        let host_binary = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let error = CubinLines::parse(&host_binary, "host").unwrap_err().to_string();
        assert!(error.contains("not EM_CUDA"), "{error}");
        assert!(CubinLines::parse(b"\x7fELF garbage", "g").unwrap_err().to_string().starts_with("cubin g: "));
    }

    /// A one-sequence line table in DWARF `version`, as nvcc lays it out, with NVIDIA's
    /// inlined-call opcode naming row `call_site` as the call site of the second row, and
    /// ending the inlined code before the third. Returns the `.debug_line` bytes, the offset of
    /// the `DW_LNE_set_address` operand and the `.debug_line_str` bytes.
    fn line_table(version: u16, call_site: u8) -> (Vec<u8>, usize, Vec<u8>) {
        let mut header = Vec::new();
        header.extend([1, 1, 1, 0xfb, 14, 13]); // min length, max ops, is_stmt, line base -5, range, opcode base
        if version < 4 {
            header.remove(1);
        }
        header.extend([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1]);
        let line_str = b"k.cu\0h.cuh\0".to_vec();
        let (first_file, second_file) = if version >= 5 {
            header.extend([1, 1, 0x08, 2]); // directories: path as DW_FORM_string, 2 of them
            header.extend(b"/comp\0/inc\0");
            header.extend([2, 1, 0x1f, 2, 0x0b, 2]); // files: line_strp path, data1 directory
            header.extend([0, 0, 0, 0, 0, 5, 0, 0, 0, 1]);
            (0, 1)
        } else {
            header.extend(b"/inc\0\0/abs/k.cu\0\0\0\0h.cuh\0\x01\0\0\0");
            (1, 2)
        };
        let mut program = vec![0, 9, 2];
        let address_at = program.len();
        program.extend([0; 8]);
        program.extend([4, first_file, 3, 9, 1]); // set file, line 10, copy
        program.extend([0, 3, 0x90, call_site, 0x1b]); // inlined at row `call_site`, callee name at 0x1b
        program.extend([4, second_file, 3, 2, 2, 0x20, 1]); // set file, line 12, pc += 0x20, copy
        program.extend([0, 3, 0x90, 0, 0]); // the inlined code ends
        program.extend([2, 0x20, 1]); // pc += 0x20, copy
        program.extend([2, 0x20, 0, 1, 1]); // pc += 0x20, end_sequence
        let mut after_length = version.to_le_bytes().to_vec();
        if version >= 5 {
            after_length.extend([8, 0]);
        }
        after_length.extend(u32::try_from(header.len()).unwrap().to_le_bytes());
        after_length.extend(header);
        let address_at = 4 + after_length.len() + address_at;
        after_length.extend(program);
        let mut table = u32::try_from(after_length.len()).unwrap().to_le_bytes().to_vec();
        table.extend(after_length);
        (table, address_at, line_str)
    }

    #[test]
    fn reads_dwarf_2_to_5_line_tables_with_their_inline_chains() {
        for version in 2..=5 {
            let (table, address_at, line_str) = line_table(version, 1);
            let section = SectionIndex(7);
            let relocations =
                LineRelocations { by_offset: HashMap::from([(address_at, (0, 0x100))]), sections: vec![section] };
            let sequences = read_line_sequences(&table, &relocations, &[], &line_str).unwrap();
            let first = if version >= 5 { "/comp/k.cu" } else { "/abs/k.cu" };
            let at = |frames: &[(&str, u32)]| -> Option<Frames> {
                Some(frames.iter().map(|(file, line)| FileLine { file: (*file).to_owned(), line: *line }).collect())
            };
            assert_eq!(sequences.len(), 1, "version {version}");
            assert_eq!(sequences[0].section, Some(section), "version {version}");
            assert_eq!(
                sequences[0].rows,
                vec![
                    (0x100, at(&[(first, 10)])),
                    (0x120, at(&[("/inc/h.cuh", 12), (first, 10)])),
                    (0x140, at(&[("/inc/h.cuh", 12)])),
                    (0x160, None)
                ],
                "version {version}"
            );
            let unrelocated = read_line_sequences(&table, &LineRelocations::default(), &[], &line_str).unwrap();
            assert_eq!((unrelocated[0].section, unrelocated[0].start), (None, 0), "version {version}");
            for length in 0..table.len() {
                let _ = read_line_sequences(&table[..length], &relocations, &[], &line_str);
            }
        }
    }

    #[test]
    fn a_call_site_that_is_not_an_earlier_row_is_an_error() {
        for call_site in [2, 3, 0x7f] {
            let (table, _, line_str) = line_table(5, call_site);
            let error = read_line_sequences(&table, &LineRelocations::default(), &[], &line_str).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!(
                    ".debug_line unit at 0x0: row 2 at 0x20 is inlined at row {call_site}, which the sequence does not have before it"
                )
            );
        }
    }
}
