//! A trial's log, read once and line by line: everything the verdict needs
//! from the output (the perf table, gtest's result lines, the profile
//! runtime's errors, the last lines for the failure message) is gathered in
//! one pass, so the harness's memory does not grow with the log. Bytes that
//! are not UTF-8 are read lossily, never as an empty log.

use crate::exec::capped_log::CUT_MARK;
use crate::exec::process::TAIL_LINES;
use crate::verdict::perf::PerfReport;
use crate::verdict::{Case, CaseStatus};
use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::path::Path;

/// Longer lines are taken in pieces of this size: a flood without newlines
/// must not become one line in memory.
const MAX_LINE: u64 = 1 << 20;
/// How much of one line the failure message quotes.
const TAIL_LINE_CHARS: usize = 1000;

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
}

impl TrialOutput {
    /// The log at `path`; one that cannot be read is an empty one (the
    /// verdict then says the trial reported nothing), and so is one that is
    /// not a regular file (opened without following a link or blocking).
    pub(crate) fn read(path: &Path) -> TrialOutput {
        match crate::workspace::confined::open_regular(path) {
            Ok(file) => Self::scan(std::io::BufReader::with_capacity(1 << 16, file)),
            Err(_) => TrialOutput::default(),
        }
    }

    pub(crate) fn scan(mut reader: impl BufRead) -> TrialOutput {
        let mut out = TrialOutput::default();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&buf);
            out.line(text.trim_end_matches(['\n', '\r']));
        }
        out
    }

    fn line(&mut self, line: &str) {
        self.lines += 1;
        self.perf.line(line);
        self.gtest.line(line);
        if self.runtime_errors.len() < 3 && line.contains("LLVM Profile Error") {
            self.runtime_errors.push(line.to_string());
        }
        if self.cut.is_none() && line.starts_with(CUT_MARK) {
            self.cut = Some(line.to_string());
        }
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line.chars().take(TAIL_LINE_CHARS).collect());
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
        let flood = vec![b'x'; (3 * MAX_LINE + 5) as usize];
        let out = TrialOutput::scan(&flood[..]);
        assert_eq!(out.lines, 4);
        assert!(out.tail.iter().all(|l| l.len() <= TAIL_LINE_CHARS));
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
