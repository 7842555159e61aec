//! Which SASS instructions of a cubin are device branches, as NVIDIA's own disassembler lists
//! them: a control transfer (`BRA`, `BRX`, `JMP`, `CALL`, `RET`, `EXIT`, ...) whose guard
//! predicate is not `PT` (`@P0 BRA`, `@!P1 BRA`, `@UP0 BRA`, `@P0 EXIT`). `nvdisasm -c` runs once
//! per cubin of a build; its listing is kept beside the cubin (`<crc>.branches`), tied to the
//! cubin's SHA-256, and made again when the cubin's bytes are not those it was made from.
//!
//! Not listed: a `BRA` with a predicate operand besides its guard (`@!P0 BRA P1, target`), which
//! jumps only where both hold. CUPTI's predicated-on count sees the guard alone, so its taken
//! outcome is not measured.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bail;
use crate::error::{Context, Error, Result};
use crate::exec::process::Cmd;

const MAGIC: &str = "ccl-coverage-branches";
const VERSION: u32 = 1;

/// The base mnemonics (before the first `.`) that transfer control.
const TRANSFERS: [&str; 11] = ["BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "RET", "EXIT", "KILL", "RTT"];

/// How long nvdisasm may take on one cubin (NCCL's largest take seconds).
const NVDISASM_LIMIT: Duration = Duration::from_secs(300);

/// The guard of a branch: a predicate register (`P0`, `UP1`), negated or not.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Guard {
    pub(crate) predicate: String,
    pub(crate) negated: bool,
}

impl std::fmt::Display for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "@{}{}", if self.negated { "!" } else { "" }, self.predicate)
    }
}

impl Guard {
    /// `P0`, `!UP3`: `None` for the always-true `PT`/`UPT` (either way round) and for text
    /// that is not a predicate register.
    fn parse(text: &str) -> Option<Guard> {
        let (negated, predicate) = match text.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let number = predicate.strip_prefix("UP").or_else(|| predicate.strip_prefix('P'))?;
        if number == "T" || number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some(Guard { predicate: predicate.to_owned(), negated })
    }
}

/// One conditional control transfer of a kernel.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Branch {
    pub(crate) offset: u64,
    pub(crate) guard: Guard,
    /// The opcode with its modifiers: `BRA`, `EXIT`, `RET.REL.NODEC`.
    pub(crate) opcode: String,
}

/// The branches of every kernel of one cubin, by mangled kernel name, in offset order.
pub(crate) type Branches = BTreeMap<String, Vec<Branch>>;

/// Reads the branches out of `nvdisasm -c` output: `.section .text.<kernel>` starts a kernel,
/// `/*<offset>*/ [@guard] OPCODE operands ;` is an instruction. `origin` names the text in errors.
pub(crate) fn parse_disassembly(text: &str, origin: &str) -> Result<Branches> {
    let mut branches = Branches::new();
    let mut kernel: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let at = |what: String| Error::new(format!("{origin}:{}: {what}", index + 1));
        let line = line.trim();
        if let Some(rest) = line.strip_prefix(".section").filter(|rest| rest.starts_with(char::is_whitespace)) {
            let section = rest.trim_start().split(',').next().unwrap_or_default();
            kernel = section.strip_prefix(".text.").map(str::to_owned);
            if let Some(name) = &kernel {
                branches.entry(name.clone()).or_default();
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("/*") else { continue };
        let Some((offset, instruction)) = rest.split_once("*/") else { continue };
        // Encodings (`-hex`) are comments of their own, not instructions.
        let Ok(offset) = u64::from_str_radix(offset.trim(), 16) else { continue };
        let Some(name) = &kernel else {
            return Err(at(format!("instruction at {offset:#x} outside a .text section")));
        };
        let instruction = instruction.split(';').next().unwrap_or_default().trim();
        let mut words = instruction.split_whitespace();
        let Some(first) = words.next() else { continue };
        let (guard, opcode) = match first.strip_prefix('@') {
            Some(guard) => (Guard::parse(guard), words.next().unwrap_or_default()),
            None => (None, first),
        };
        let Some(guard) = guard else { continue };
        if !TRANSFERS.contains(&opcode.split('.').next().unwrap_or_default()) {
            continue;
        }
        // `BRA P1, target`: a second condition the guard's count does not see (module doc).
        let operand = words.next().unwrap_or_default().trim_end_matches(',');
        if opcode.starts_with("BRA") && Guard::parse(operand).is_some() {
            continue;
        }
        let list = branches.entry(name.clone()).or_default();
        if list.last().is_some_and(|last| last.offset >= offset) {
            return Err(at(format!("instruction at {offset:#x} of {name} is not after the one before")));
        }
        list.push(Branch { offset, guard, opcode: opcode.to_owned() });
    }
    Ok(branches)
}

/// NVIDIA's disassembler: `<cuda>/bin/nvdisasm` of the toolkit that built the library; else
/// `nvdisasm` on `path`; else the `nvidia-cuda-nvdisasm` wheel of a Python environment on `path`
/// (`<prefix>/lib/python3*/site-packages/nvidia/cu13/bin/nvdisasm`).
pub(crate) fn find_nvdisasm(cuda: &Path, path: Option<&str>) -> Option<PathBuf> {
    let toolkit = cuda.join("bin/nvdisasm");
    if toolkit.is_file() {
        return Some(toolkit);
    }
    let dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
    if let Some(found) = dirs.iter().map(|dir| dir.join("nvdisasm")).find(|p| p.is_file()) {
        return Some(found);
    }
    dirs.iter().filter_map(|bin| bin.parent()).find_map(|prefix| {
        let mut pythons: Vec<PathBuf> =
            std::fs::read_dir(prefix.join("lib")).ok()?.flatten().map(|e| e.path()).collect();
        pythons.sort();
        pythons.into_iter().map(|python| python.join("site-packages/nvidia/cu13/bin/nvdisasm")).find(|p| p.is_file())
    })
}

/// `nvdisasm -c <cubin>`, read for its branches.
pub(crate) fn disassemble(nvdisasm: &Path, cubin: &Path) -> Result<Branches> {
    let text = Cmd::new(nvdisasm).arg("-c").arg(cubin).time_limit(NVDISASM_LIMIT).read()?;
    parse_disassembly(&text, &format!("{} -c {}", nvdisasm.display(), cubin.display()))
}

/// The listing kept beside `cubin`: `<crc>.cubin` → `<crc>.branches`.
pub(crate) fn listing_path(cubin: &Path) -> PathBuf {
    cubin.with_extension("branches")
}

/// The listing's text: a header naming the cubin's SHA-256, then one line per branch.
pub(crate) fn write_listing(branches: &Branches, cubin_sha256: &str) -> String {
    let mut text = format!("{MAGIC}\t{VERSION}\ncubin\t{cubin_sha256}\n");
    for (kernel, list) in branches {
        for Branch { offset, guard, opcode } in list {
            text.push_str(&format!("b\t{kernel}\t{offset:x}\t{guard}\t{opcode}\n"));
        }
    }
    text.push_str("end\n");
    text
}

/// Reads a listing: `Ok(None)` when it was made from other bytes than `cubin_sha256` (the cubin
/// changed: make it again); an error naming the file and line when it is not a whole listing.
pub(crate) fn read_listing(text: &str, origin: &str, cubin_sha256: &str) -> Result<Option<Branches>> {
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, line)| line).unwrap_or_default();
    if header != format!("{MAGIC}\t{VERSION}") {
        bail!("{origin}:1: not a {MAGIC} {VERSION} listing: the first line is {header:?}");
    }
    match lines.next() {
        Some((_, line)) if line.strip_prefix("cubin\t") == Some(cubin_sha256) => {}
        Some((_, line)) if line.starts_with("cubin\t") => return Ok(None),
        _ => bail!("{origin}:2: no cubin line"),
    }
    let mut branches = Branches::new();
    let mut ended = false;
    for (index, line) in lines {
        let at = |what: &str| Error::new(format!("{origin}:{}: {what}", index + 1));
        if ended {
            return Err(at("a line after the end line"));
        }
        if line == "end" {
            ended = true;
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let ["b", kernel, offset, guard, opcode] = fields.as_slice() else {
            return Err(at(&format!("expected b<TAB>kernel<TAB>offset<TAB>guard<TAB>opcode, found {line:?}")));
        };
        let offset = u64::from_str_radix(offset, 16).map_err(|_| at(&format!("offset {offset:?} is not hex")))?;
        let guard = guard.strip_prefix('@').and_then(Guard::parse).ok_or_else(|| at(&format!("guard {guard:?}")))?;
        if kernel.is_empty() || opcode.is_empty() {
            return Err(at("empty kernel or opcode"));
        }
        let list = branches.entry((*kernel).to_owned()).or_default();
        if list.last().is_some_and(|last| last.offset >= offset) {
            return Err(at(&format!("offset {offset:#x} of {kernel} is not after the one before")));
        }
        list.push(Branch { offset, guard, opcode: (*opcode).to_owned() });
    }
    if !ended {
        bail!("{origin}: no end line (cut short)");
    }
    Ok(Some(branches))
}

/// The branches of the cubin at `cubin` (whose bytes are `data`): from its listing when that
/// was made from these bytes, else from `nvdisasm`, whose listing is then kept beside the cubin
/// (a folder that cannot be written to costs the listing, not the branches). `Ok(Err(why))`
/// when there is no listing and no nvdisasm to make one.
pub(crate) fn branches_of(cubin: &Path, data: &[u8], nvdisasm: Option<&Path>) -> Result<Result<Branches, String>> {
    let sha256 = crate::workspace::files::hex(&<sha2::Sha256 as sha2::Digest>::digest(data));
    let listing = listing_path(cubin);
    let origin = listing.display().to_string();
    match crate::workspace::confined::open_regular(&listing) {
        Ok(mut file) => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut file, &mut text).context(&origin)?;
            if let Some(branches) = read_listing(&text, &origin, &sha256)? {
                return Ok(Ok(branches));
            }
        }
        Err(_) if !listing.exists() && listing.symlink_metadata().is_err() => {}
        Err(error) => return Err(error.context(&origin)),
    }
    let Some(nvdisasm) = nvdisasm else {
        return Ok(Err(format!(
            "{} has no branch listing and no nvdisasm was found ($CUDA_HOME/bin, PATH, or the nvidia-cuda-nvdisasm wheel)",
            cubin.display()
        )));
    };
    let branches = disassemble(nvdisasm, cubin)?;
    if let Err(error) = crate::workspace::files::write_atomic(&listing, write_listing(&branches, &sha256).as_bytes()) {
        crate::reporter::emit(crate::reporter::Event::BranchListingNotKept { of: cubin, why: &error.to_string() });
    }
    Ok(Ok(branches))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const CAPTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-capture/cubins");

    const SAMPLE: &str = "\t.section\t.text._Z1kPii,\"ax\",@progbits\n\
        \t.sectioninfo\t@\"SHI_REGISTERS=8\"\n\
        .text._Z1kPii:\n\
        \x20       /*0000*/                   LDC R1, c[0x0][0x28] ;\n\
        \x20       /*0050*/               @P0 EXIT ;\n\
        \x20       /*0060*/              @!P1 BRA `(.L_x_0) ;\n\
        \x20       /*0070*/              @!P0 BRA P1, `(.L_x_3) ;\n\
        \x20       /*0080*/              @UP2 BRA.U `(.L_x_1) ;\n\
        \x20       /*0090*/               @P0 REDG.E.ADD.64.STRONG.GPU desc[UR8][R2.64], R4 ;\n\
        \x20       /*00a0*/              @!PT BRA `(.L_x_1) ;\n\
        \x20       /*00b0*/                   BRA `(.L_x_2) ;\n\
        \x20       /*00c0*/               @P3 RET.REL.NODEC R6 `(_Z1kPii) ;\n\
        \x20                                                                         /* 0x000fe40000000f00 */\n\
        \t.section\t.text._Z2k2v,\"ax\",@progbits\n\
        \x20       /*0000*/                   EXIT ;\n";

    fn guard(predicate: &str, negated: bool) -> Guard {
        Guard { predicate: predicate.to_owned(), negated }
    }

    #[test]
    fn lists_guarded_control_transfers_only() {
        let branches = parse_disassembly(SAMPLE, "k.sass").unwrap();
        let found: Vec<(u64, String, &str)> =
            branches["_Z1kPii"].iter().map(|b| (b.offset, b.guard.to_string(), b.opcode.as_str())).collect();
        assert_eq!(
            found,
            [
                (0x50, "@P0".to_owned(), "EXIT"),
                (0x60, "@!P1".to_owned(), "BRA"),
                (0x80, "@UP2".to_owned(), "BRA.U"),
                (0xc0, "@P3".to_owned(), "RET.REL.NODEC")
            ]
        );
        assert_eq!(branches["_Z2k2v"], []);
        assert_eq!(branches["_Z1kPii"][1].guard, guard("P1", true));
    }

    #[test]
    fn bad_disassembly_is_an_error_naming_the_line() {
        let error = parse_disassembly("   /*0010*/  @P0 BRA `(.L_x_0) ;\n", "k.sass").unwrap_err().to_string();
        assert_eq!(error, "k.sass:1: instruction at 0x10 outside a .text section");
        let twice = format!("{SAMPLE}\t.section\t.text._Z1kPii,\"ax\",@progbits\n /*0010*/ @P0 EXIT ;\n");
        let error = parse_disassembly(&twice, "k.sass").unwrap_err().to_string();
        assert_eq!(error, "k.sass:17: instruction at 0x10 of _Z1kPii is not after the one before");
    }

    #[test]
    fn a_listing_reads_back_and_is_refused_when_damaged() {
        let branches = parse_disassembly(SAMPLE, "k.sass").unwrap();
        let text = write_listing(&branches, "abc");
        assert_eq!(
            read_listing(&text, "l", "abc").unwrap(),
            Some(branches.into_iter().filter(|(_, b)| !b.is_empty()).collect())
        );
        assert_eq!(read_listing(&text, "l", "other").unwrap(), None, "made from other bytes");
        let cases = [
            (
                MAGIC,
                "ccl-coverage-branchez",
                "l:1: not a ccl-coverage-branches 1 listing: the first line is \"ccl-coverage-branchez\\t1\"",
            ),
            ("cubin\tabc", "cubi\tabc", "l:2: no cubin line"),
            ("\t50\t", "\t5x\t", "l:3: offset \"5x\" is not hex"),
            ("@P0", "@PT", "l:3: guard \"@PT\""),
            (
                "\tEXIT\n",
                "\n",
                "l:3: expected b<TAB>kernel<TAB>offset<TAB>guard<TAB>opcode, found \"b\\t_Z1kPii\\t50\\t@P0\"",
            ),
            ("\t60\t", "\t40\t", "l:4: offset 0x40 of _Z1kPii is not after the one before"),
            ("end\n", "", "l: no end line (cut short)"),
            ("end\n", "end\nb\tk\t1\t@P0\tBRA\n", "l:8: a line after the end line"),
        ];
        for (from, to, expected) in cases {
            let damaged = text.replacen(from, to, 1);
            assert_eq!(read_listing(&damaged, "l", "abc").unwrap_err().to_string(), expected, "{to:?}");
        }
    }

    /// The listings kept beside the captured cubins are what nvdisasm lists, where it is found.
    #[test]
    #[allow(clippy::print_stderr)] // says why it checked nothing
    fn the_captured_listings_are_live_nvdisasm_s() {
        let cuda = std::env::var("CUDA_HOME").unwrap_or_else(|_| "/usr/local/cuda".to_owned());
        let Some(nvdisasm) = find_nvdisasm(Path::new(&cuda), std::env::var("PATH").ok().as_deref()) else {
            eprintln!("no nvdisasm: skipping the live comparison");
            return;
        };
        let mut listed = 0;
        for entry in std::fs::read_dir(CAPTURE).unwrap() {
            let cubin = entry.unwrap().path();
            if cubin.extension().is_none_or(|e| e != "cubin") {
                continue;
            }
            let data = std::fs::read(&cubin).unwrap();
            let sha = crate::workspace::files::hex(&<sha2::Sha256 as sha2::Digest>::digest(&data));
            let kept = read_listing(&std::fs::read_to_string(listing_path(&cubin)).unwrap(), "kept", &sha).unwrap();
            let live: Branches =
                disassemble(&nvdisasm, &cubin).unwrap().into_iter().filter(|(_, b)| !b.is_empty()).collect();
            listed += live.values().map(Vec::len).sum::<usize>();
            assert_eq!(kept, Some(live), "{}", cubin.display());
        }
        assert!(listed > 100, "only {listed} branches in the captured cubins");
    }

    #[test]
    fn a_listing_is_made_once_and_made_again_for_other_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let cubin = dir.path().join("c0de.cubin");
        std::fs::write(&cubin, b"not really a cubin").unwrap();
        let why = branches_of(&cubin, b"not really a cubin", None).unwrap().unwrap_err();
        assert!(why.ends_with("has no branch listing and no nvdisasm was found ($CUDA_HOME/bin, PATH, or the nvidia-cuda-nvdisasm wheel)"), "{why}");
        // A fake nvdisasm that says what it was asked and lists one branch.
        let fake = dir.path().join("nvdisasm");
        let asked = dir.path().join("asked");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$@\" >> {}\nprintf '\\t.section\\t.text._Z1kv,\"ax\"\\n  /*0010*/ @!P2 BRA `(.L_x_0) ;\\n'\n",
                asked.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let expected = Branches::from([(
            "_Z1kv".to_owned(),
            vec![Branch { offset: 0x10, guard: guard("P2", true), opcode: "BRA".to_owned() }],
        )]);
        for _ in 0..2 {
            assert_eq!(branches_of(&cubin, b"not really a cubin", Some(&fake)).unwrap().unwrap(), expected);
        }
        assert_eq!(std::fs::read_to_string(&asked).unwrap().lines().count(), 1, "nvdisasm ran once");
        // The kept listing serves without nvdisasm, until the bytes change.
        assert_eq!(branches_of(&cubin, b"not really a cubin", None).unwrap().unwrap(), expected);
        assert!(branches_of(&cubin, b"other bytes", None).unwrap().is_err());
        branches_of(&cubin, b"other bytes", Some(&fake)).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&asked).unwrap().lines().count(), 2, "made again for other bytes");
        // A damaged listing is an error naming it, never silently replaced.
        std::fs::write(listing_path(&cubin), "garbage\n").unwrap();
        let error = branches_of(&cubin, b"other bytes", Some(&fake)).unwrap_err().to_string();
        assert!(error.contains("c0de.branches:1: not a ccl-coverage-branches 1 listing"), "{error}");
    }
}
