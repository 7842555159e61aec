//! A trial's log, read once: everything the verdict needs from the output
//! (the perf table, gtest's result lines, the profile runtime's errors, the
//! last lines for the failure message) is gathered in one pass, so the
//! harness's memory does not grow with the log. Bytes that are not UTF-8 are
//! read lossily, never as an empty log.
//!
//! The pass costs what reading the capped log costs, in the debug build that
//! `cargo test` runs too: lines are found with `memchr` (optimised even
//! there, see Cargo.toml), and only a line that can matter (its first
//! non-blank byte a digit or `#`, or holding `]` or the profile runtime's
//! error) becomes text. A 64 MiB log of two-byte lines (a flood from `yes`)
//! took 130 s when every line was; see docs/benchmarks.md.

use crate::exec::capped_log::CUT_MARK;
use crate::exec::process::TAIL_LINES;
use crate::verdict::perf::PerfReport;
use crate::verdict::{Case, CaseStatus};
use std::collections::VecDeque;
use std::io::Read;
use std::path::Path;

/// Longer lines are taken in pieces of this size: a flood without newlines
/// must not become one line in memory.
const MAX_LINE: usize = 1 << 20;
/// How much is read at once.
const CHUNK: usize = 1 << 20;
/// How much of one line the failure message quotes.
const TAIL_LINE_CHARS: usize = 1000;
/// What the profile runtime starts its complaints with.
const RUNTIME_ERROR: &str = "LLVM Profile Error";

#[derive(Debug, Default)]
pub(crate) struct TrialOutput {
    pub(crate) perf: PerfReport,
    pub(crate) gtest: GtestLines,
    /// The first few lines in which the profile runtime reported an error.
    pub(crate) runtime_errors: Vec<String>,
    /// The line the log's cap left where it cut output.
    pub(crate) cut: Option<String>,
    tail: VecDeque<String>,
    lines: usize,
    /// How many lines were made text (for the test that a flood's are not).
    #[cfg(test)]
    as_text: usize,
}

impl TrialOutput {
    /// The log at `path`; one that cannot be read is an empty one (the
    /// verdict then says the trial reported nothing), and so is one that is
    /// not a regular file (opened without following a link or blocking).
    pub(crate) fn read(path: &Path) -> TrialOutput {
        match crate::workspace::confined::open_regular(path) {
            Ok(file) => Self::scan(file),
            Err(_) => TrialOutput::default(),
        }
    }

    pub(crate) fn scan(mut reader: impl Read) -> TrialOutput {
        let mut out = TrialOutput::default();
        let runtime_error = memchr::memmem::Finder::new(RUNTIME_ERROR);
        // An unfinished line is shorter than MAX_LINE (else it was taken as a
        // piece), so after moving it to the front there is room for a CHUNK.
        let mut buf = vec![0u8; MAX_LINE + CHUNK];
        let mut end = 0;
        loop {
            let n = match reader.read(&mut buf[end..]) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            end += n;
            let used = out.lines_in(&buf[..end], n == 0, &runtime_error);
            if n == 0 {
                break;
            }
            buf.copy_within(used..end, 0);
            end -= used;
        }
        out
    }

    /// Takes the lines of `data` (each up to `MAX_LINE` bytes; at the end of
    /// the log also the last one without a newline) and returns how many
    /// bytes it took. Only the lines [`worth_reading`] become text, and of
    /// the rest only the last `TAIL_LINES` (for the tail).
    fn lines_in(&mut self, data: &[u8], at_end: bool, runtime_error: &memchr::memmem::Finder) -> usize {
        let mut seen = Seen { last: [(0, 0); TAIL_LINES], count: 0 };
        let mut pos = 0;
        for newline in memchr::memchr_iter(b'\n', data) {
            while newline - pos >= MAX_LINE {
                self.take(data, pos, pos + MAX_LINE, &mut seen);
                pos += MAX_LINE;
            }
            self.take(data, pos, newline, &mut seen);
            pos = newline + 1;
        }
        while data.len() - pos >= MAX_LINE {
            self.take(data, pos, pos + MAX_LINE, &mut seen);
            pos += MAX_LINE;
        }
        if at_end && pos < data.len() {
            self.take(data, pos, data.len(), &mut seen);
            pos = data.len();
        }
        self.lines += seen.count;
        for i in seen.count.saturating_sub(TAIL_LINES)..seen.count {
            let (from, to) = seen.last[i % TAIL_LINES];
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(String::from_utf8_lossy(&data[from..to]).chars().take(TAIL_LINE_CHARS).collect());
        }
        // The profile runtime's complaint may be anywhere in a line (after a
        // rank's prefix): looked for in the whole of what was taken.
        let mut at = 0;
        while self.runtime_errors.len() < 3
            && let Some(found) = runtime_error.find(&data[at..pos])
        {
            let from = memchr::memrchr(b'\n', &data[..at + found]).map_or(0, |i| i + 1);
            let to = memchr::memchr(b'\n', &data[at + found..pos]).map_or(pos, |i| at + found + i);
            self.runtime_errors.push(String::from_utf8_lossy(trim_end(&data[from..to])).into_owned());
            at = to.min(pos);
        }
        pos
    }

    /// One line, `data[from..to]`.
    fn take(&mut self, data: &[u8], from: usize, to: usize, seen: &mut Seen) {
        let line = trim_end(&data[from..to]);
        if worth_reading(line) {
            self.line(&String::from_utf8_lossy(line));
        }
        seen.last[seen.count % TAIL_LINES] = (from, from + line.len());
        seen.count += 1;
    }

    /// A line that [`worth_reading`] let through.
    fn line(&mut self, line: &str) {
        #[cfg(test)]
        {
            self.as_text += 1;
        }
        self.perf.line(line);
        self.gtest.line(line);
        if self.cut.is_none() && line.starts_with(CUT_MARK) {
            self.cut = Some(line.to_string());
        }
    }

    /// The last lines, indented to read as quoted output.
    pub(crate) fn tail(&self) -> String {
        let earlier = self.lines - self.tail.len();
        let mut out: Vec<String> = Vec::new();
        if earlier > 0 {
            out.push(format!("    ... ({earlier} earlier lines)"));
        }
        out.extend(self.tail.iter().map(|l| format!("    {l}")));
        if out.is_empty() {
            out.push("    (no output)".into());
        }
        out.join("\n")
    }
}

/// The line without what `str::trim_end_matches(['\n', '\r'])` removes.
fn trim_end(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r' | b'\n'] = line {
        line = rest;
    }
    line
}

/// The lines of one call of `lines_in`: how many, and where the last ones are.
struct Seen {
    last: [(usize, usize); TAIL_LINES],
    count: usize,
}

/// Whether a line can matter to the verdict, by its first byte that
/// `str::trim` does not skip: a perf row or summary starts with a digit, a
/// sign or `#`; a gtest line or the cut mark with `[`, or with a control
/// byte that `strip_ansi_escapes` drops (an escape sequence, a backspace).
/// A byte past ASCII may be a Unicode blank before any of them.
fn worth_reading(line: &[u8]) -> bool {
    // Plain loops: this runs once per line of a flood, unoptimised under `cargo test`.
    for &b in line {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => {}
            b'0'..=b'9' | b'+' | b'#' | b'[' | 0x00..=0x1f | 0x7f..=0xff => return true,
            _ => return false,
        }
    }
    false
}

/// gtest's result lines in the output: the cases they report (for when no
/// JSON report is readable) and the tests started and not finished.
#[derive(Debug, Default)]
pub(crate) struct GtestLines {
    /// `[       OK ] Suite.Test (1 ms)`, `[  FAILED  ] …`, `[  SKIPPED ] …`;
    /// the summary's repeated `[  FAILED  ]` list adds nothing new.
    pub(crate) cases: Vec<Case>,
    /// `[ RUN ]` without its `[ OK ]`, `[ FAILED ]` or `[ SKIPPED ]`.
    open: Vec<String>,
}

impl GtestLines {
    fn line(&mut self, line: &str) {
        if !line.contains(']') {
            return;
        }
        // gtest may colour its output although it goes to a file.
        let line = strip_ansi_escapes::strip_str(line);
        let Some(rest) = line.trim_start().strip_prefix('[') else { return };
        let Some((tag, name)) = rest.split_once(']') else { return };
        let name = name.trim().split(' ').next().unwrap_or_default();
        let status = match tag.trim() {
            "RUN" => {
                self.open.push(name.to_string());
                return;
            }
            "OK" => CaseStatus::Passed,
            "FAILED" => CaseStatus::Failed,
            "SKIPPED" => CaseStatus::Skipped,
            _ => return,
        };
        self.open.retain(|n| n != name);
        if !name.contains('.') || name.ends_with(',') {
            return;
        }
        match self.cases.iter_mut().find(|c| c.name == name) {
            Some(seen) if status == CaseStatus::Failed => seen.status = status,
            Some(_) => {}
            None => self.cases.push(Case { name: name.to_string(), status, time_s: 0.0, message: String::new() }),
        }
    }

    /// The last test started and not finished.
    pub(crate) fn running(&self) -> Option<&str> {
        self.open.last().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_is_read_lossily_and_the_table_still_found() {
        let mut log = b"$ ./all_reduce_perf\n# nccl-tests \xff\xfe garbage\n".to_vec();
        log.extend_from_slice(b"  1024  256  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0\n");
        log.extend_from_slice(b"# Out of bounds values : 0 OK\n");
        let out = TrialOutput::scan(&log[..]);
        assert_eq!(out.perf.rows.len(), 1);
        assert!(out.perf.out_of_bounds.as_ref().is_some_and(|o| o.ok));
        assert!(out.tail().contains("# nccl-tests \u{fffd}\u{fffd} garbage"), "{}", out.tail());
    }

    #[test]
    fn the_tail_holds_the_last_lines_and_counts_the_rest() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let out = TrialOutput::scan(text.as_bytes());
        let tail = out.tail();
        assert!(tail.starts_with(&format!(
            "    ... ({} earlier lines)\n    line {}",
            100 - TAIL_LINES,
            100 - TAIL_LINES
        )));
        assert!(tail.ends_with("    line 99"));
        assert_eq!(TrialOutput::scan(&b""[..]).tail(), "    (no output)");
    }

    #[test]
    fn a_line_without_end_is_taken_in_pieces() {
        let flood = vec![b'x'; 3 * MAX_LINE + 5];
        let out = TrialOutput::scan(&flood[..]);
        assert_eq!(out.lines, 4);
        assert!(out.tail.iter().all(|l| l.len() <= TAIL_LINE_CHARS));
    }

    /// The scan before it looked only at lines that can matter: every line
    /// as text, through every per-line step.
    fn every_line_as_text(data: &[u8]) -> TrialOutput {
        use std::io::BufRead;
        let mut out = TrialOutput::default();
        let mut reader = std::io::BufReader::new(data);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&buf);
            let line = text.trim_end_matches(['\n', '\r']);
            out.lines += 1;
            out.perf.line(line);
            out.gtest.line(line);
            if out.runtime_errors.len() < 3 && line.contains(RUNTIME_ERROR) {
                out.runtime_errors.push(line.to_string());
            }
            if out.cut.is_none() && line.starts_with(CUT_MARK) {
                out.cut = Some(line.to_string());
            }
            if out.tail.len() == TAIL_LINES {
                out.tail.pop_front();
            }
            out.tail.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
        }
        out
    }

    fn same(a: &TrialOutput, b: &TrialOutput) {
        assert_eq!(a.lines, b.lines);
        assert_eq!(a.tail, b.tail);
        assert_eq!(a.perf, b.perf);
        assert_eq!(a.gtest.cases, b.gtest.cases);
        assert_eq!(a.gtest.open, b.gtest.open);
        assert_eq!(a.runtime_errors, b.runtime_errors);
        assert_eq!(a.cut, b.cut);
    }

    /// Lines that cross the reads, CRLF, blanks of every kind before a row,
    /// pieces of long lines, gtest and the runtime's errors amid a flood:
    /// the same verdict input as reading every line.
    #[test]
    fn only_the_lines_that_matter_are_read_and_nothing_is_missed() {
        let row = "  1024  256  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0";
        let mut log = Vec::new();
        for i in 0..(3 * CHUNK / 2) {
            match i % 50_000 {
                7 => log.extend_from_slice(format!("{row}\r\n").as_bytes()),
                8 => log.extend_from_slice(format!("\x0b\x0c\t{row}\n").as_bytes()),
                9 => log.extend_from_slice("\u{3000}2048 512 float sum -1 1 1 1 0\n".as_bytes()),
                10 => log.extend_from_slice(b"[ RUN      ] Suite.Test\n\t\x1b[32m[       OK ] Suite.Test (1 ms)\n"),
                13 => log.extend_from_slice(b"\x08[  FAILED  ] Other.Test (2 ms)\n"),
                11 => log.extend_from_slice(b"rank 3: LLVM Profile Error: failed to write\n"),
                12 => log.extend_from_slice(b"# Out of bounds values : 2 FAILED\n"),
                _ => log.extend_from_slice(b"y\n"),
            }
        }
        log.extend(std::iter::repeat_n(b'x', 2 * MAX_LINE + 3));
        log.extend_from_slice(format!("\n{CUT_MARK} 1 of 2 bytes]\n{row}\n").as_bytes());
        log.extend_from_slice(b"\xff\xfe tail\r");
        let out = TrialOutput::scan(&log[..]);
        same(&out, &every_line_as_text(&log));
        // Three rows in each block of 50,000 lines, and the last.
        assert_eq!(out.perf.rows.len(), 3 * (3 * CHUNK / 2).div_ceil(50_000) + 1);
        assert!(out.perf.out_of_bounds.as_ref().is_some_and(|o| o.count == 2 && !o.ok));
        assert!(out.cut.is_some() && out.runtime_errors.len() == 3);
        assert_eq!(out.gtest.cases.len(), 2);
        for text in ["", "\n", "a", "a\n\n", "\r\n\r", "# x : y\n1 2 3"] {
            same(&TrialOutput::scan(text.as_bytes()), &every_line_as_text(text.as_bytes()));
        }
    }

    /// What made a 64 MiB log of `y` lines cost 36 s in the debug build:
    /// every line made text and parsed. Now none of them is.
    #[test]
    fn a_flood_of_short_lines_makes_no_text_of_them() {
        let mut log = b"y\n".repeat(3 * CHUNK);
        log.extend_from_slice(b"# Out of bounds values : 0 OK\n");
        let out = TrialOutput::scan(&log[..]);
        assert_eq!(out.lines, 3 * CHUNK + 1);
        assert_eq!(out.as_text, 1, "only the summary line is read as text");
        assert!(out.perf.out_of_bounds.as_ref().is_some_and(|o| o.ok));
        assert!(out.tail().ends_with("    y\n    # Out of bounds values : 0 OK"), "{}", out.tail());
    }

    #[test]
    fn the_cut_mark_and_runtime_errors_are_noticed() {
        let text = format!(
            "a\nLLVM Profile Error: failed to write file\n{CUT_MARK} 10 of 20 bytes; ...]\nLLVM Profile Error: x\n"
        );
        let out = TrialOutput::scan(text.as_bytes());
        assert!(out.cut.as_deref().is_some_and(|c| c.contains("10 of 20")));
        assert_eq!(out.runtime_errors.len(), 2);
    }
}
