//! Raw profiles and merging them.
//!
//! Each trial's raw profiles are merged into `profiles/<trial>.profdata` as
//! soon as the trial ends (while the next trial runs) and the raw files are
//! removed, so a suite that writes thousands of profiles never holds more
//! than about one trial's raw files and the report merges one small indexed
//! profile per trial. `llvm-profdata merge -sparse` reads its inputs from a
//! list file, never from argv.
//!
//! A truncated or garbled raw profile (a rank killed while writing) fails a
//! whole default merge. Instead of losing the trial, the inputs are checked
//! one by one, the bad ones move to `quarantine/<trial>/`, and the rest merge.
//!
//! A profile another process put in the trial's folder (issue #40: a trial
//! running at the same time credited another with code it never ran) is
//! foreign: it moves to `quarantine/<trial>/` before anything is merged,
//! and is named ([`Origin`]).

use crate::bail;
use crate::coverage::mapping::raw_ids_at;
use crate::device::{collector_records, is_device_profile};
use crate::error::{Context, Error, Result};
use crate::exec::process::{Cmd, Limits};
use crate::toolchain::Toolchain;
use crate::workspace::confined::EntryKind;
use crate::workspace::{self, Area, Workspace};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A raw profile llvm-profdata could not read, and where it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantined {
    pub file: PathBuf,
    pub(crate) reason: String,
}

/// What merging one trial's raw profiles did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialMerge {
    /// `profiles/<trial>.profdata`, unless no raw profile was usable.
    pub profdata: Option<PathBuf>,
    pub merged: usize,
    pub quarantined: Vec<Quarantined>,
    pub(crate) seconds: f64,
    /// SHA-256 of the merged profile as written, checked before a report uses it.
    #[serde(default)]
    pub(crate) sha256: Option<String>,
    /// What the merged profile covers, stored as `profiles/<trial>.lines`
    /// while the next trial ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lines: Option<StoredLines>,
    /// Why no lines were stored: the report computes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lines_error: Option<String>,
    /// The binaries that wrote raw profiles in the trial but are no file of
    /// its build, or whose profiles carry no build ID: the report can measure
    /// none of their code, and says so with what they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) unknown_binaries: Vec<UnknownBinary>,
}

/// A binary that wrote raw profiles in a trial but that the build has no
/// file of (`build_id`), or whose profiles carry no build ID (`None`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownBinary {
    pub(crate) build_id: Option<String>,
    /// Its raw profiles in the trial.
    pub(crate) files: usize,
    /// Its functions with non-zero counters.
    pub(crate) functions_with_counts: usize,
    /// Their names, sorted, the first [`UNKNOWN_NAMES`].
    pub(crate) functions: Vec<String>,
}

/// How many function names a trial records of each unknown binary.
const UNKNOWN_NAMES: usize = 2000;

/// The build IDs a raw profile of the workspace names, read from its header.
fn raw_ids(ws: &Workspace, file: &Path) -> Result<BTreeSet<String>> {
    use std::io::Read;
    let mut prefix = Vec::new();
    let mut reader = ws.open_read(file)?;
    (&mut reader).take(128).read_to_end(&mut prefix).with_context(|| format!("cannot read {}", file.display()))?;
    let (at, len) = raw_ids_at(&prefix)?;
    let want = (at + len).saturating_sub(prefix.len()) as u64;
    reader.take(want).read_to_end(&mut prefix).with_context(|| format!("cannot read {}", file.display()))?;
    crate::coverage::mapping::raw_binary_ids(&prefix)
}

/// The binaries among `raw` (a trial's own raw profiles, in `dir`) whose
/// build ID is not in `known`, or that carry none, each with the functions
/// its profiles counted: their profiles merged apart into a scratch file of
/// `dir`, read in process, and removed. A profile whose header cannot be
/// read is left to the merge, which quarantines it.
fn unknown_binaries(
    ws: &Workspace,
    toolchain: &Toolchain,
    dir: &Path,
    raw: &[PathBuf],
    known: &BTreeSet<String>,
) -> Result<Vec<UnknownBinary>> {
    let mut groups: BTreeMap<Option<String>, Vec<PathBuf>> = BTreeMap::new();
    for file in raw {
        let Ok(ids) = raw_ids(ws, file) else { continue };
        if ids.is_empty() {
            groups.entry(None).or_default().push(file.clone());
        }
        for id in ids.into_iter().filter(|id| !known.contains(id)) {
            groups.entry(Some(id)).or_default().push(file.clone());
        }
    }
    let mut unknown = Vec::new();
    for (build_id, files) in groups {
        let scratch = dir.join("unknown-binary.profdata");
        let list = dir.join("unknown-binary.list");
        let counted = merge(ws, toolchain, &files, &list, &scratch)
            .and_then(|()| crate::coverage::mapping::read_in_process(ws, &scratch));
        ws.remove(Area::Profiles, &list)?;
        ws.remove(Area::Profiles, &scratch)?;
        // An unreadable group is the merge's to quarantine and name.
        let Ok(counts) = counted else { continue };
        let names: BTreeSet<&str> = counts.ran().map(|(name, _)| name).collect();
        unknown.push(UnknownBinary {
            build_id,
            files: files.len(),
            functions_with_counts: names.len(),
            functions: names.into_iter().take(UNKNOWN_NAMES).map(String::from).collect(),
        });
    }
    Ok(unknown)
}

/// The raw `.profraw` files directly in `dir` (a folder of the workspace,
/// listed through its handle), sorted: the host's (`<pattern>`) and the
/// device's, which the host collector names `<target>.<pattern>` with the
/// target ID's colons (`amdgcn-amd-amdhsa.gfx942:xnack-.0.<pattern>`). Only
/// regular files: a link or a FIFO named like a profile is not one.
pub fn raw_files(ws: &Workspace, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = ws
        .list(dir)?
        .into_iter()
        .filter(|(name, kind)| *kind == EntryKind::File && Path::new(name).extension().is_some_and(|e| e == "profraw"))
        .map(|(name, _)| dir.join(name))
        .collect();
    files.sort();
    Ok(files)
}

pub(crate) fn trial_profdata(ws: &Workspace, slug: &str) -> PathBuf {
    ws.area(Area::Profiles).join(format!("{slug}.profdata"))
}

/// What tells an attempt's own profiles from foreign ones.
///
/// Every process of the attempt, on whatever node, inherits its
/// `LLVM_PROFILE_FILE`, whose names carry the attempt's random mark
/// (`launch::marked_pattern`); a process of another trial inherits that
/// trial's. A name without the mark was not written under this attempt's
/// pattern: foreign, whatever host it names. A marked name of this host
/// whose `%p` is no process the supervisor saw proves nothing by itself (it
/// samples, and a short-lived process may be missing), so it is foreign only
/// when that pid is provably another's: a live process of another trial
/// (another token) that started before this trial's supervisor, so that it
/// held the pid for the whole attempt. Other hosts' pids cannot be seen from
/// here: their names are checked for the mark alone.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The mark of the attempt's names; `None`: names are not checked.
    pub mark: Option<String>,
    /// This machine's name as `%h` spells it: up to its first dot.
    pub(crate) host: String,
    /// Pids of the trial's processes its supervisor saw, in every PID namespace.
    pub(crate) seen: BTreeSet<libc::pid_t>,
    /// When its supervisor started, in clock ticks after boot.
    pub(crate) since: Option<u64>,
    /// The trial's token (`CCL_COV_TRIAL_TOKEN`).
    pub(crate) token: String,
}

impl Origin {
    /// The origin of an attempt launched as `launch` that ended as `finished`.
    pub(crate) fn of(launch: &crate::launch::TrialLaunch, finished: &crate::trial::Finished) -> Origin {
        let host = crate::exec::host::hostname();
        Origin {
            mark: launch.mark.clone(),
            host: host.split('.').next().unwrap_or_default().to_string(),
            seen: finished.seen.iter().copied().collect(),
            since: finished.since,
            token: launch.token.clone(),
        }
    }

    /// The names of the attempt's profiles under `pattern`.
    fn pattern(&self, pattern: &str) -> String {
        match &self.mark {
            Some(mark) => crate::launch::marked_pattern(pattern, mark),
            None => pattern.to_string(),
        }
    }

    /// Why the raw profile `name` is not the attempt's own, or `None` when it
    /// may be. `tokens` are the marked pattern's; `another` says of a pid
    /// whether a live process of a trial holds it: its token, start and
    /// command line ([`crate::exec::proctree::trial_process`]).
    fn foreign(
        &self,
        name: &str,
        tokens: Option<&[Token]>,
        another: &dyn Fn(libc::pid_t) -> Option<(String, u64, String)>,
    ) -> Option<String> {
        let mark = self.mark.as_deref()?;
        if !name.contains(&format!(".{mark}")) {
            return Some(format!(
                "foreign: its name does not carry this attempt's mark .{mark}, which every process of the trial inherits in LLVM_PROFILE_FILE: a process of another trial, or one that set LLVM_PROFILE_FILE itself, wrote it here; not merged"
            ));
        }
        let mut parts = NameParts::default();
        if is_device_profile(name) || !tokens.is_some_and(|t| match_name(t, name, &mut parts)) {
            return None;
        }
        let (Some(host), Some(pid)) = (parts.host, parts.pid.and_then(|p| p.parse::<libc::pid_t>().ok())) else {
            return None;
        };
        if host != self.host || self.seen.contains(&pid) {
            return None;
        }
        let since = self.since?;
        let (token, started, command) = another(pid)?;
        (token != self.token && started < since).then(|| {
            format!(
                "foreign: its name says pid {pid} of this host, which no process of this trial had: pid {pid} is `{command}`, a process of another trial (CCL_COV_TRIAL_TOKEN={token}) running since before this trial started; not merged"
            )
        })
    }
}

/// Moves the raw profiles among `files` that are not `origin`'s own (see
/// [`Origin`]) to `quarantine/<slug>/`; returns the rest and what moved.
fn set_foreign_aside(
    ws: &Workspace,
    slug: &str,
    files: Vec<PathBuf>,
    pattern: &str,
    origin: &Origin,
) -> Result<(Vec<PathBuf>, Vec<Quarantined>)> {
    let marked = origin.pattern(pattern);
    let tokens = pattern_tokens(marked.rsplit('/').next().unwrap_or(&marked));
    let mut own = Vec::new();
    let mut foreign = Vec::new();
    for file in files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match origin.foreign(&name, tokens.as_deref(), &crate::exec::proctree::trial_process) {
            Some(reason) => {
                let to = quarantine_path(&ws.trial_quarantine(slug), &file);
                ws.rename(&file, &to)?;
                foreign.push(Quarantined { file: to, reason });
            }
            None => own.push(file),
        }
    }
    Ok((own, foreign))
}

/// The largest raw profile merged; a larger one is quarantined unread. A
/// real one holds a library's counters and names (tens of MiB for NCCL); a
/// 20 GB sparse file under a trial's mark cost llvm-profdata 216 s and 21 GB.
pub(crate) const RAW_PROFILE_MAX: u64 = 1 << 30;

/// Moves the raw profiles among `files` that no merge could use to
/// `quarantine/<slug>/`, each with why ([`unusable`]); returns the rest
/// and what moved. A profile is looked at by its size and header alone.
fn set_unusable_aside(
    ws: &Workspace,
    toolchain: &Toolchain,
    slug: &str,
    files: Vec<PathBuf>,
) -> Result<(Vec<PathBuf>, Vec<Quarantined>)> {
    let mut usable = Vec::new();
    let mut rejected = Vec::new();
    for file in files {
        match unusable(ws, &toolchain.llvm_profdata.path, &file)? {
            Some(reason) => {
                let to = quarantine_path(&ws.trial_quarantine(slug), &file);
                ws.rename(&file, &to)?;
                rejected.push(Quarantined { file: to, reason });
            }
            None => usable.push(file),
        }
    }
    Ok((usable, rejected))
}

/// Why the raw profile `file` cannot be merged, judged from its size and
/// its header (magic, version, header length) without reading the rest:
/// llvm-profdata merges a 0-byte file without a word, and names a file of
/// another version only in a warning before `no profile can be merged`.
fn unusable(ws: &Workspace, llvm_profdata: &Path, file: &Path) -> Result<Option<String>> {
    use std::io::Read;
    let mut reader = ws.open_read(file)?;
    let size = reader.metadata().with_context(|| format!("cannot stat {}", file.display()))?.len();
    if size > RAW_PROFILE_MAX {
        return Ok(Some(format!(
            "it is {size} bytes, more than the {} MiB a raw profile may have: not read",
            RAW_PROFILE_MAX >> 20
        )));
    }
    if size == 0 {
        return Ok(Some("it is empty (0 bytes): its process was killed while writing it, or it is no profile".into()));
    }
    let mut head = Vec::new();
    (&mut reader).take(24).read_to_end(&mut head).with_context(|| format!("cannot read {}", file.display()))?;
    if head.len() < 16 || head[..8] != RAW_MAGIC.to_le_bytes() {
        return Ok(Some(format!(
            "it is not an LLVM raw profile (its {size} bytes do not start with \\xfflprofr\\x81)"
        )));
    }
    let version = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")) & 0xffff_ffff;
    if let Some(reads) = raw_version_read_by(llvm_profdata)
        && version != reads
    {
        return Ok(Some(format!(
            "it is a raw profile of format version {version}, written by another LLVM's runtime; the build's llvm-profdata reads version {reads}"
        )));
    }
    // Every version's header is longer than 24 bytes; one the mapping reader
    // does not know (when the tool did not say its own) is left to the merge.
    let header = if head.len() < 24 { Some(24) } else { raw_ids_at(&head).ok().map(|(at, _)| at as u64) };
    if let Some(header) = header.filter(|&header| size < header) {
        return Ok(Some(format!("it is truncated: {size} bytes, shorter than its {header}-byte header")));
    }
    Ok(None)
}

/// `INSTR_PROF_RAW_MAGIC_64`, `\xfflprofr\x81`.
const RAW_MAGIC: u64 = 0xff6c_7072_6f66_7281;

/// The raw profile version `llvm_profdata` reads, found once per tool by
/// giving it a header of a version no LLVM writes: it answers `expected
/// version = N` (LLVM 19 to 22). `None` when it does not say (LLVM 14):
/// the merge then judges the version.
fn raw_version_read_by(llvm_profdata: &Path) -> Option<u64> {
    static FOUND: std::sync::Mutex<BTreeMap<PathBuf, Option<u64>>> = std::sync::Mutex::new(BTreeMap::new());
    let mut found = FOUND.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *found.entry(llvm_profdata.to_path_buf()).or_insert_with(|| {
        let mut probe = tempfile::Builder::new().suffix(".profraw").tempfile().ok()?;
        let mut header = RAW_MAGIC.to_le_bytes().to_vec();
        header.extend(0xfffe_u64.to_le_bytes());
        header.resize(1024, 0);
        std::io::Write::write_all(&mut probe, &header).ok()?;
        let (_, stdout, stderr) =
            Cmd::new(llvm_profdata).args(["merge", "-sparse", "-o", "/dev/null"]).arg(probe.path()).outcome().ok()?;
        let text = stdout + &stderr;
        let after = text.split("expected version = ").nth(1)?;
        after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    })
}

/// What a finished trial's profiles came to.
#[derive(Debug, Clone, Default)]
pub struct MergeOutcome {
    /// The trial's raw-profile folder.
    pub(crate) dir: PathBuf,
    /// Raw profiles the trial left.
    pub raw: usize,
    /// Profiles in its folder that were not its own, moved to quarantine.
    pub foreign: Vec<Quarantined>,
    /// Its own profiles that no merge could use (empty, truncated, another
    /// LLVM's, too large), moved to quarantine before the merge.
    pub rejected: Vec<Quarantined>,
    /// The processes that wrote them.
    pub(crate) writers: Writers,
    /// Its incremental merge, when it ran.
    pub merge: Option<TrialMerge>,
    pub error: Option<String>,
    /// Checksums of the raw profiles left unmerged, by file name.
    pub(crate) raw_sha256: BTreeMap<String, String>,
    /// Checksums of the NVIDIA collector's kernel records, by file name.
    pub(crate) device_sha256: BTreeMap<String, String>,
}

impl MergeOutcome {
    /// `path (why)` of each raw profile set aside as unreadable.
    pub(crate) fn quarantined(&self) -> Vec<String> {
        self.rejected
            .iter()
            .chain(self.merge.iter().flat_map(|m| &m.quarantined))
            .map(|q| format!("{} ({})", q.file.display(), q.reason))
            .collect()
    }
}

/// How a finished trial's profiles are merged.
#[derive(Debug, Clone, Copy, Default)]
pub struct Merging<'a> {
    /// Merged as the trial ends (`incremental_merge`), not by the report.
    pub incremental: bool,
    /// The raw profiles are kept after the merge.
    pub keep_raw: bool,
    /// The build IDs of the build's binaries: the others are named
    /// ([`UnknownBinary`]); `None` looks for none.
    pub known: Option<&'a BTreeSet<String>>,
}

/// Sets aside the profiles in a finished trial's folder that are not
/// `origin`'s ([`Origin`]), counts its raw profiles and, under coverage,
/// merges them (`incremental`) and records checksums of what is left raw,
/// so the report can tell that nothing was altered.
pub fn finish_trial(
    ws: &Workspace,
    toolchain: &Toolchain,
    slug: &str,
    pattern: &str,
    origin: &Origin,
    merging: Merging<'_>,
) -> MergeOutcome {
    let Merging { incremental, keep_raw, known } = merging;
    let dir = ws.trial_profiles(slug);
    // A folder the trial replaced (by a link, say) is named as such, not
    // taken for one where nothing was written.
    let files = match raw_files(ws, &dir) {
        Ok(files) => files,
        Err(e) => {
            let error = Some(format!("its profile folder {} cannot be read: {e}", dir.display()));
            return MergeOutcome { dir, error, ..MergeOutcome::default() };
        }
    };
    let (files, foreign) = match set_foreign_aside(ws, slug, files, pattern, origin) {
        Ok(split) => split,
        Err(e) => {
            let error = Some(format!("its foreign profiles could not be set aside: {e}"));
            return MergeOutcome { dir, error, ..MergeOutcome::default() };
        }
    };
    let (files, rejected) = match set_unusable_aside(ws, toolchain, slug, files) {
        Ok(split) => split,
        Err(e) => {
            let error = Some(format!("its unusable profiles could not be set aside: {e}"));
            return MergeOutcome { dir, foreign, error, ..MergeOutcome::default() };
        }
    };
    let (raw, writers) = (files.len(), writers(&files, &origin.pattern(pattern)));
    let mut outcome = MergeOutcome { dir: dir.clone(), raw, writers, foreign, rejected, ..MergeOutcome::default() };
    if incremental && raw > 0 {
        match merge_trial(ws, toolchain, slug, keep_raw, known) {
            Ok(m) => outcome.merge = Some(m),
            Err(e) => outcome.error = Some(e.to_string()),
        }
    }
    match raw_checksums(ws, &dir) {
        Ok(sums) => outcome.raw_sha256 = sums,
        Err(e) => outcome.error = Some(e.to_string()),
    }
    match collector_records(&dir).and_then(|files| checksums(ws, &files)) {
        Ok(sums) => outcome.device_sha256 = sums,
        Err(e) => outcome.error = Some(e.to_string()),
    }
    outcome
}

/// The processes that wrote a trial's raw profiles ([`writers`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Writers {
    /// Processes that wrote a profile for every module any process wrote.
    pub(crate) complete: usize,
    /// The others: `host:pid (k of n modules)`.
    pub(crate) partial: Vec<String>,
    /// Host profiles whose names do not follow the pattern: written (and
    /// merged) under another `LLVM_PROFILE_FILE` than the harness's, so their
    /// processes cannot be told apart or counted.
    pub(crate) unmatched: Vec<String>,
}

/// Which processes wrote the raw profiles `files`, told apart by the `%h`
/// and `%p` parts of their names under `pattern` (`coverage.profile_pattern`).
/// A process writes one file per instrumented module it loaded (`%m`): with
/// the library and a plugin instrumented, two files are one rank, so files
/// are not ranks. And a rank that ends without its exit handlers loses the
/// library's profile but may still have written a plugin's, which was
/// unloaded earlier: a process counts as complete unless another process of
/// the trial wrote a profile for every module it did and more. A ctest or
/// plain trial may run several instrumented programs, each with modules of
/// its own that the others lack: neither is short of the other, so each
/// counts (requiring every module of the trial made none complete, and the
/// trial lost its coverage). Names that do not
/// follow the pattern (the device profiles' `<target>.<pattern>`) are not
/// counted. Without `%p` in the pattern processes cannot be told apart, and
/// each file counts as one complete writer.
pub(crate) fn writers(files: &[PathBuf], pattern: &str) -> Writers {
    // The files are listed by name; a pattern with folders names them last.
    let pattern = pattern.rsplit('/').next().unwrap_or(pattern);
    let Some(tokens) = pattern_tokens(pattern).filter(|t| t.contains(&Token::Pid)) else {
        return Writers { complete: files.len(), ..Writers::default() };
    };
    let mut modules_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unmatched = Vec::new();
    for file in files {
        let Some(name) = file.file_name().and_then(|n| n.to_str()) else { continue };
        if is_device_profile(name) {
            continue;
        }
        let mut parts = NameParts::default();
        if match_name(&tokens, name, &mut parts) {
            modules_of.entry(parts.process.join(":")).or_default().insert(parts.module);
        } else {
            unmatched.push(name.to_string());
        }
    }
    let mut writers = Writers { unmatched, ..Writers::default() };
    for (process, modules) in &modules_of {
        let fuller = modules_of.values().filter(|other| other.len() > modules.len() && other.is_superset(modules));
        match fuller.map(BTreeSet::len).max() {
            None => writers.complete += 1,
            Some(most) => writers.partial.push(format!("{process} ({} of {most} modules)", modules.len())),
        }
    }
    writers
}

/// What a profile name says of its writer.
#[derive(Debug, Default)]
struct NameParts {
    /// Host and pid, as the name spells them.
    process: Vec<String>,
    /// The `%h` part and the `%p` part, when the pattern has them.
    host: Option<String>,
    pid: Option<String>,
    /// The `%m` part: the module's signature and merge pool.
    module: String,
}

/// One piece of a profile-name pattern, as the profile runtime expands it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `%p`: the process id.
    Pid,
    /// `%h`: the host name.
    Host,
    /// `%m` or `%Nm`: the module's signature and merge pool (`1234_0`).
    Module,
    /// `%c`: continuous mode, expands to nothing.
    Continuous,
}

/// `pattern` as tokens; `None` for a specifier this code does not read
/// (`%t` expands to a folder).
fn pattern_tokens(pattern: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            tokens.push(Token::Literal(c));
            continue;
        }
        while chars.peek().is_some_and(char::is_ascii_digit) {
            chars.next();
        }
        tokens.push(match chars.next()? {
            'p' => Token::Pid,
            'h' => Token::Host,
            'm' => Token::Module,
            'c' => Token::Continuous,
            _ => return None,
        });
    }
    Some(tokens)
}

/// Whether `name` follows `tokens`, and what its parts say.
fn match_name(tokens: &[Token], name: &str, parts: &mut NameParts) -> bool {
    let Some((token, rest)) = tokens.split_first() else { return name.is_empty() };
    let digits = name.bytes().take_while(u8::is_ascii_digit).count();
    let ends: Vec<usize> = match token {
        Token::Literal(c) => return name.starts_with(*c) && match_name(rest, &name[c.len_utf8()..], parts),
        Token::Continuous => return match_name(rest, name, parts),
        Token::Pid => (1..=digits).rev().collect(),
        Token::Module => {
            let pool = name[digits..].strip_prefix('_').map_or(0, |r| r.bytes().take_while(u8::is_ascii_digit).count());
            let mut ends: Vec<usize> = (1..=digits).rev().collect();
            if digits > 0 && pool > 0 {
                ends.insert(0, digits + 1 + pool);
            }
            ends
        }
        Token::Host => name.char_indices().map(|(i, _)| i).skip(1).chain([name.len()]).collect(),
    };
    for end in ends {
        let piece = name[..end].to_string();
        match token {
            Token::Host => parts.host = Some(piece.clone()),
            Token::Pid => parts.pid = Some(piece.clone()),
            Token::Module | Token::Literal(_) | Token::Continuous => {}
        }
        if matches!(token, Token::Module) {
            parts.module = piece;
        } else {
            parts.process.push(piece);
        }
        if match_name(rest, &name[end..], parts) {
            return true;
        }
        if !matches!(token, Token::Module) {
            parts.process.pop();
        }
    }
    false
}

/// SHA-256 of each raw profile left in `dir`, by file name.
pub(crate) fn raw_checksums(ws: &Workspace, dir: &Path) -> Result<BTreeMap<String, String>> {
    checksums(ws, &raw_files(ws, dir)?)
}

/// SHA-256 of each of `files` (of the workspace), by file name.
fn checksums(ws: &Workspace, files: &[PathBuf]) -> Result<BTreeMap<String, String>> {
    let mut sums = BTreeMap::new();
    for file in files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        sums.insert(name, ws.sha256(file)?);
    }
    Ok(sums)
}

/// Each trial's NVIDIA kernel records that are as its trial recorded them;
/// an altered or unrecorded one moves to `quarantine/<trial>/`, and a
/// recorded one that is gone is missing, as with profiles.
pub(crate) fn verified_device_records(
    ws: &Workspace,
    trials: &[(&str, &str, &BTreeMap<String, String>)],
) -> Result<(BTreeMap<String, Vec<PathBuf>>, Verified)> {
    let mut by_trial = BTreeMap::new();
    let mut verified = Verified::default();
    for &(trial, slug, recorded) in trials {
        let files = collector_records(&ws.trial_profiles(slug))?;
        for name in recorded.keys() {
            if !files.iter().any(|f| f.file_name().is_some_and(|n| n.to_string_lossy() == name.as_str())) {
                verified.missing.push(format!("{trial}: its kernel record {name} is gone"));
            }
        }
        let mut kept = Vec::new();
        for file in files {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if trust_or_quarantine(ws, slug, trial, &file, recorded.get(&name), None, &mut verified.quarantined)? {
                kept.push(file);
            }
        }
        by_trial.insert(slug.to_string(), kept);
    }
    Ok((by_trial, verified))
}

/// Whether `file` has the checksum its trial recorded; if not, it moves to
/// the trial's quarantine folder with the reason (`unrecorded`, when given,
/// says why the trial recorded none). Something that is not a regular file
/// (a link, a FIFO) is never opened: it is quarantined as it is.
fn trust_or_quarantine(
    ws: &Workspace,
    slug: &str,
    trial: &str,
    file: &Path,
    recorded: Option<&String>,
    unrecorded: Option<String>,
    quarantined: &mut Vec<Quarantined>,
) -> Result<bool> {
    let why = match ws.kind(file)? {
        Some(EntryKind::File) => {
            let actual = ws.sha256(file)?;
            match recorded {
                Some(sum) if *sum == actual => return Ok(true),
                Some(sum) => format!("altered after its trial wrote it (sha256 recorded {sum}, now {actual})"),
                None => {
                    unrecorded.unwrap_or_else(|| format!("not recorded by trial {trial} (no checksum), so not trusted"))
                }
            }
        }
        Some(kind) => format!("it is {}, not a profile file", kind.describe()),
        None => return Ok(false),
    };
    let to = quarantine_path(&ws.trial_quarantine(slug), file);
    ws.beneath()?.rename_any(file, &to)?;
    quarantined.push(Quarantined { file: to, reason: why });
    Ok(false)
}

/// The profiles a report may use, after checking each against the checksum
/// its trial recorded.
#[derive(Debug, Default)]
pub(crate) struct Verified {
    pub(crate) inputs: Vec<PathBuf>,
    /// Altered (or never recorded) profiles, moved to quarantine.
    pub(crate) quarantined: Vec<Quarantined>,
    /// Profiles a trial recorded that are no longer there.
    pub(crate) missing: Vec<String>,
}

/// What a trial recorded about the profiles it stored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recorded<'a> {
    pub(crate) trial: &'a str,
    pub(crate) slug: &'a str,
    /// Set when the trial merged its profiles: the merged profile's checksum.
    pub(crate) merge: Option<&'a TrialMerge>,
    /// Checksums of the raw profiles it left unmerged, by file name.
    pub(crate) raw_sha256: &'a BTreeMap<String, String>,
    /// Why its merge failed, when it did: what is left of the output is no profile.
    pub(crate) merge_error: Option<&'a str>,
}

/// Every profile input of `trials`, checked: a profile whose content differs
/// from what its trial recorded (or that no trial recorded) moves to
/// `quarantine/<trial>/` and is named; a recorded one that is gone is listed
/// as missing.
pub(crate) fn verified_inputs(ws: &Workspace, trials: &[Recorded]) -> Result<Verified> {
    // Hashing is most of it (4,000 trials' profiles are half a GB): each
    // core takes a share, and the shares are joined in the trials' order.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let share = trials.len().div_ceil(cores).max(1);
    let parts: Vec<Result<Verified>> = std::thread::scope(|scope| {
        let handles: Vec<_> = trials.chunks(share).map(|part| scope.spawn(move || verified_share(ws, part))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::new("checking profiles panicked"))))
            .collect()
    });
    let mut verified = Verified::default();
    for part in parts {
        let part = part?;
        verified.inputs.extend(part.inputs);
        verified.quarantined.extend(part.quarantined);
        verified.missing.extend(part.missing);
    }
    Ok(verified)
}

fn verified_share(ws: &Workspace, trials: &[Recorded]) -> Result<Verified> {
    let mut verified = Verified::default();
    for result in trials {
        let slug = result.slug;
        let merged = trial_profdata(ws, slug);
        let recorded_merge = result.merge.filter(|m| m.profdata.is_some());
        let checks: Vec<(PathBuf, Option<&String>)> = if ws.kind(&merged)?.is_some() {
            vec![(merged.clone(), recorded_merge.and_then(|m| m.sha256.as_ref()))]
        } else {
            if recorded_merge.is_some() {
                verified.missing.push(format!("{}: its merged profile {} is gone", result.trial, merged.display()));
            }
            let raw = raw_files(ws, &ws.trial_profiles(slug))?;
            if raw.is_empty() && recorded_merge.is_none() && !result.raw_sha256.is_empty() {
                verified.missing.push(format!(
                    "{}: its {} raw profiles in {} are gone",
                    result.trial,
                    result.raw_sha256.len(),
                    ws.trial_profiles(slug).display()
                ));
            }
            raw.into_iter()
                .map(|f| {
                    let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    (f, result.raw_sha256.get(&name))
                })
                .collect()
        };
        let unrecorded = result
            .merge_error
            .map(|e| format!("left by trial {}'s merge, which failed ({e}), so not a whole profile", result.trial));
        for (file, recorded) in checks {
            if trust_or_quarantine(
                ws,
                slug,
                result.trial,
                &file,
                recorded,
                unrecorded.clone(),
                &mut verified.quarantined,
            )? {
                verified.inputs.push(file);
            }
        }
    }
    Ok(verified)
}

/// Where `file` goes in the quarantine folder `dir`: under its portable
/// name, because quarantine is what gets uploaded and inspected elsewhere.
pub(super) fn quarantine_path(dir: &Path, file: &Path) -> PathBuf {
    dir.join(workspace::portable_name(&file.file_name().expect("a file").to_string_lossy()))
}

/// Merges a finished trial's raw profiles into `profiles/<trial>.profdata`,
/// quarantining unreadable ones; removes the raw files unless `keep_raw`.
/// `known`: the build IDs of the build's binaries; the others are named
/// ([`UnknownBinary`]).
pub(crate) fn merge_trial(
    ws: &Workspace,
    toolchain: &Toolchain,
    slug: &str,
    keep_raw: bool,
    known: Option<&BTreeSet<String>>,
) -> Result<TrialMerge> {
    let started = Instant::now();
    let raw = raw_files(ws, &ws.trial_profiles(slug))?;
    let unknown = match known {
        Some(known) => unknown_binaries(ws, toolchain, &ws.trial_profiles(slug), &raw, known)?,
        None => Vec::new(),
    };
    let output = trial_profdata(ws, slug);
    let list = ws.trial_profiles(slug).join("inputs.list");
    let quarantine_dir = ws.trial_quarantine(slug);
    let (merged, quarantined) = merge_checked(ws, toolchain, &raw, &list, &output, &|_| quarantine_dir.clone())?;
    ws.remove(Area::Profiles, &list)?;
    if !keep_raw && merged > 0 {
        for file in &raw {
            ws.remove(Area::Profiles, file)?;
        }
    }
    let sha256 = if merged > 0 { Some(ws.sha256(&output)?) } else { None };
    Ok(TrialMerge {
        profdata: (merged > 0).then_some(output),
        merged,
        quarantined,
        seconds: started.elapsed().as_secs_f64(),
        sha256,
        lines: None,
        lines_error: None,
        unknown_binaries: unknown,
    })
}

/// Merges `inputs` into `output`. If llvm-profdata refuses the set, every
/// input is checked on its own; unreadable raw profiles move to the folder
/// `quarantine_for(input)` names, and the rest merge. Returns how many inputs
/// were merged and what was quarantined.
pub(crate) fn merge_checked(
    ws: &Workspace,
    toolchain: &Toolchain,
    inputs: &[PathBuf],
    list_file: &Path,
    output: &Path,
    quarantine_for: &dyn Fn(&Path) -> PathBuf,
) -> Result<(usize, Vec<Quarantined>)> {
    if inputs.is_empty() {
        return Ok((0, Vec::new()));
    }
    let first = merge(ws, toolchain, inputs, list_file, output);
    if first.is_ok() {
        return Ok((inputs.len(), Vec::new()));
    }
    // Stopped by an interruption, the merge says nothing of the profiles:
    // none may be quarantined for it.
    if crate::exec::interrupt::stops_commands() {
        return first.map(|()| (inputs.len(), Vec::new()));
    }
    let mut good = Vec::new();
    let mut quarantined = Vec::new();
    for input in inputs {
        match check(toolchain, input) {
            Ok(()) => good.push(input.clone()),
            Err(why) if input.extension().is_some_and(|e| e == "profraw") => {
                let to = quarantine_path(&quarantine_for(input), input);
                ws.rename(input, &to)?;
                quarantined.push(Quarantined { file: to, reason: why.to_string() });
            }
            // A bad indexed profile is one of ours: a bug, not bad data.
            Err(why) => bail!("the merged profile {} is unreadable: {why}", input.display()),
        }
    }
    if good.is_empty() {
        return Ok((0, quarantined));
    }
    merge(ws, toolchain, &good, list_file, output)
        .with_context(|| format!("merging the {} readable profiles", good.len()))?;
    Ok((good.len(), quarantined))
}

/// Whether llvm-profdata can read `input` on its own.
fn check(toolchain: &Toolchain, input: &Path) -> Result<()> {
    Cmd::new(&toolchain.llvm_profdata.path)
        .limits(Limits::LLVM_TOOL)
        .args(["merge", "-sparse", "-o", "/dev/null"])
        .arg(input)
        .read()
        .map(drop)
        .map_err(|e| {
            // llvm-profdata names the cause on a line that names the file
            // (`warning: F: raw profile version mismatch …`), then ends with
            // `error: no profile can be merged`, which says no cause.
            let text = e.to_string();
            let named = format!("{}: ", input.display());
            let cause = text.lines().find_map(|l| l.split_once(&named).filter(|_| !l.starts_with("command failed")));
            let last = || text.lines().rev().find(|l| !l.trim().is_empty());
            Error::new(cause.map(|(_, why)| why).or_else(last).unwrap_or(&text).trim())
        })
}

/// Merges `inputs` into the indexed profile `output` (both in the
/// workspace). llvm-profdata writes `output` by its path, so whatever lies
/// there first goes, through the workspace's handle: a link planted there is
/// refused, never written through.
pub(crate) fn merge(
    ws: &Workspace,
    toolchain: &Toolchain,
    inputs: &[PathBuf],
    list_file: &Path,
    output: &Path,
) -> Result<()> {
    let list: String = inputs.iter().map(|p| format!("{}\n", p.display())).collect();
    ws.write(list_file, list.as_bytes())?;
    ws.clear_for_tool(output)?;
    Cmd::new(&toolchain.llvm_profdata.path)
        .limits(Limits::LLVM_TOOL)
        .args(["merge", "-sparse"])
        .arg(format!("--input-files={}", list_file.display()))
        .arg("-o")
        .arg(output)
        .env_remove(crate::env_names::PROFILE_INIT_ONCE)
        .read()
        .map(drop)
}

/// What a trial recorded of its stored lines (in its merge's record).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredLines {
    /// SHA-256 of `profiles/<trial>.lines` as written.
    pub(crate) sha256: String,
    pub(crate) seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(pattern: &str, names: &[&str]) -> usize {
        let files: Vec<PathBuf> = names.iter().map(|n| PathBuf::from("/ws/profiles/T").join(n)).collect();
        writers(&files, pattern).complete
    }

    #[test]
    fn a_process_writing_one_file_per_module_counts_once() {
        let pattern = "%h-%p-%m.profraw";
        // The fixture's library and tuner plugin, as two ranks wrote them.
        let names = [
            "vm-20957-15490804499498110433_0.profraw",
            "vm-20957-9280116824611981399_0.profraw",
            "vm-20958-15490804499498110433_0.profraw",
            "vm-20958-9280116824611981399_0.profraw",
        ];
        assert_eq!(count(pattern, &names), 2);
        assert_eq!(count(pattern, &names[..2]), 1);
        // Host names with dashes; the same pid on two nodes is two processes.
        let two_nodes =
            ["node-1-42-7_0.profraw", "node-1-42-8_0.profraw", "node-2-42-7_0.profraw", "node-2-42-8_0.profraw"];
        assert_eq!(count(pattern, &two_nodes), 2);
        // A rank that lost the library's profile but wrote the plugin's.
        let lost = writers(&[names[0], names[1], "vm-20959-9280116824611981399_0.profraw"].map(PathBuf::from), pattern);
        assert_eq!(
            lost,
            Writers { complete: 1, partial: vec!["vm:20959 (1 of 2 modules)".into()], unmatched: Vec::new() }
        );
        // Three programs of one ctest trial, each with its own module beside
        // the library's (one links none): none is short of another.
        let programs =
            ["vm-1-11_0.profraw", "vm-1-99_0.profraw", "vm-2-22_0.profraw", "vm-2-99_0.profraw", "vm-3-33_0.profraw"];
        assert_eq!(count(pattern, &programs), 3);
        // Device profiles of a process that wrote its host profile too.
        assert_eq!(count(pattern, &["vm-7-1_0.profraw", "amdgcn-amd-amdhsa.gfx942:xnack-.0.vm-7-2_0.profraw"]), 1);
    }

    #[test]
    fn patterns_without_a_pid_or_unknown_count_files() {
        assert_eq!(count("%m.profraw", &["1_0.profraw", "2_0.profraw"]), 2);
        assert_eq!(count("%h-%p-%q.profraw", &["a-1-x.profraw", "a-1-y.profraw"]), 2);
        // Other specifiers and a merge-pool width.
        assert_eq!(count("%t/%c%p-%4m.profraw", &["5-11_3.profraw", "5-12_3.profraw"]), 1);
        // Names that do not follow the pattern are not counted.
        assert_eq!(count("%h-%p-%m.profraw", &["stray.profraw"]), 0);
    }

    #[test]
    fn a_profile_is_foreign_without_the_mark_or_when_its_pid_is_provably_another_trial_s() {
        type Another = dyn Fn(libc::pid_t) -> Option<(String, u64, String)>;
        let origin = Origin {
            mark: Some("0a1b2c3d4e5f".into()),
            host: "vm".into(),
            seen: [100, 7].into(),
            since: Some(5000),
            token: "me-1".into(),
        };
        let tokens = pattern_tokens(&origin.pattern("%h-%p-%m.profraw")).unwrap();
        let why = |name: &str, another: &Another| origin.foreign(name, Some(&tokens), another);
        let nobody = |_| None;
        let other_trial = |_| Some(("them-2".to_string(), 10, "sh attack".to_string()));
        // Its own: a process the supervisor saw, or one it did not see (a
        // short-lived one) whose pid no other trial has held all along.
        assert_eq!(why("vm-100-1_0.0a1b2c3d4e5f.profraw", &other_trial), None);
        assert_eq!(why("vm-555-1_0.0a1b2c3d4e5f.profraw", &nobody), None);
        // Another node's pid cannot be checked from here; a device profile's neither.
        assert_eq!(why("node2-555-1_0.0a1b2c3d4e5f.profraw", &other_trial), None);
        assert_eq!(why("amdgcn-amd-amdhsa.gfx942:xnack-.0.vm-555-1_0.0a1b2c3d4e5f.profraw", &other_trial), None);
        // Without this attempt's mark: foreign, whatever host it names.
        for name in [
            "vm-100-1_0.profraw",
            "node2-9-1_0.ffffffffffff.profraw",
            "mine.profraw",
            "amdgcn-amd-amdhsa.gfx942:xnack-.0.vm-100-1_0.profraw",
        ] {
            let w = why(name, &nobody);
            assert!(
                w.as_deref().is_some_and(|w| w.contains("does not carry this attempt's mark .0a1b2c3d4e5f")),
                "{name}"
            );
        }
        // A pid another trial's process has held since before this trial started.
        let w = why("vm-555-1_0.0a1b2c3d4e5f.profraw", &other_trial).unwrap();
        assert!(w.contains("pid 555 is `sh attack`, a process of another trial (CCL_COV_TRIAL_TOKEN=them-2)"), "{w}");
        // Not if that process started after this trial (the pid may have been
        // this trial's before), nor if it carries this trial's own token.
        let later = |_| Some(("them-2".to_string(), 6000, "x".to_string()));
        assert_eq!(why("vm-555-1_0.0a1b2c3d4e5f.profraw", &later), None);
        let mine = |_| Some(("me-1".to_string(), 10, "x".to_string()));
        assert_eq!(why("vm-555-1_0.0a1b2c3d4e5f.profraw", &mine), None);
        // No mark given (a caller that checks nothing): nothing is foreign.
        assert_eq!(Origin::default().foreign("vm-1-1_0.profraw", None, &other_trial), None);
    }
}
