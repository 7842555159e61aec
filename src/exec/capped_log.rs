//! A trial's log with a cap on disk: the supervisor copies the trial's
//! output from a pipe into the log, keeping the first half of the cap as it
//! comes and the last half in a ring, so that a trial writing gigabytes
//! leaves a log of at most the cap, with the start (the command, the setup)
//! and the end (the result table, the crash) both kept and a line saying how
//! much was cut between them. The tail is written when the trial's
//! processes are gone: a supervisor killed with SIGKILL loses it (the head
//! is on disk as it comes).

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The line that marks where output was cut; the harness looks for it.
pub(crate) const CUT_MARK: &str = "[ccl-coverage: output cut here:";

/// How long the copy goes on after the trial's processes are gone, for what
/// one that escaped the tree still writes.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// How long one poll of the pipe waits, so that `done` is seen soon after it is set.
const POLL_WAIT: Timespec = Timespec { tv_sec: 0, tv_nsec: 50_000_000 };

/// The most of a log's tail held in memory (the supervisor's, per trial):
/// a large `logs.max_mib` grows the head, on disk, not this.
const TAIL_MAX: u64 = 32 << 20;

/// How far into the tail its first line start is looked for.
const LINE_START_SEARCH: usize = 4096;

/// What the copy wrote: every byte the trial wrote, and how many of them were
/// cut out of the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Copied {
    pub(crate) total: u64,
    pub(crate) cut: u64,
}

/// The last `cap` bytes written to it.
struct Ring {
    buf: Vec<u8>,
    cap: usize,
    start: usize,
    len: usize,
    dropped: u64,
}

impl Ring {
    fn new(cap: usize) -> Ring {
        // Allocated on the first byte: most trials never fill the head.
        Ring { buf: Vec::new(), cap, start: 0, len: 0, dropped: 0 }
    }

    fn push(&mut self, mut data: &[u8]) {
        if self.cap == 0 {
            self.dropped += data.len() as u64;
            return;
        }
        if self.buf.is_empty() {
            self.buf = vec![0; self.cap];
        }
        if data.len() >= self.cap {
            self.dropped += (self.len + data.len() - self.cap) as u64;
            data = &data[data.len() - self.cap..];
            self.buf.copy_from_slice(data);
            self.start = 0;
            self.len = self.cap;
            return;
        }
        let overflow = (self.len + data.len()).saturating_sub(self.cap);
        let at = (self.start + self.len) % self.cap;
        let first = data.len().min(self.cap - at);
        self.buf[at..at + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
        self.len = (self.len + data.len()).min(self.cap);
        self.start = (self.start + overflow) % self.cap;
        self.dropped += overflow as u64;
    }

    /// The kept bytes, oldest first.
    fn slices(&self) -> (&[u8], &[u8]) {
        let end = self.start + self.len;
        if end <= self.cap {
            (&self.buf[self.start..end], &[])
        } else {
            (&self.buf[self.start..], &self.buf[..end - self.cap])
        }
    }
}

/// The log being written: the head goes straight to the file (or the
/// buffer, for a command's output in memory), the rest to the ring until
/// [`CappedLog::finish`].
pub(crate) struct CappedLog<W: Write> {
    file: W,
    head_left: u64,
    head: u64,
    tail: Ring,
    total: u64,
    /// What sets the cap, named in the cut line.
    setting: &'static str,
}

impl<W: Write> CappedLog<W> {
    /// A log of at most `cap` bytes, whose cut line names `setting`.
    pub(crate) fn new(file: W, cap: u64, setting: &'static str) -> CappedLog<W> {
        // The tail is held in memory until the end: at most half the cap and
        // at most TAIL_MAX, the head takes the rest.
        let tail = (cap / 2).min(TAIL_MAX);
        let head = cap - tail;
        CappedLog {
            file,
            head_left: head,
            head,
            tail: Ring::new(usize::try_from(tail).unwrap_or(usize::MAX)),
            total: 0,
            setting,
        }
    }

    /// Takes the next bytes of output. A log that can no longer be written
    /// (full disk) loses them; the trial is not held up for it.
    pub(crate) fn write(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let to_head = usize::try_from(self.head_left).unwrap_or(usize::MAX).min(data.len());
        if to_head > 0 {
            let _ = self.file.write_all(&data[..to_head]);
            self.head_left -= to_head as u64;
        }
        if to_head < data.len() {
            self.tail.push(&data[to_head..]);
        }
    }

    /// Writes the tail, after a line naming the cut when there was one. The
    /// tail then starts at a line's beginning, unless its first line is long
    /// (a flood without newlines is kept as it is).
    pub(crate) fn finish(mut self) -> (Copied, W) {
        let (mut a, mut b) = self.tail.slices();
        let mut cut = self.tail.dropped;
        if cut > 0 {
            let skip = a.iter().chain(b).take(LINE_START_SEARCH).position(|&c| c == b'\n').map_or(0, |i| i + 1);
            cut += skip as u64;
            if skip <= a.len() {
                a = &a[skip..];
            } else {
                b = &b[skip - a.len()..];
                a = &[];
            }
            let kept_tail = (a.len() + b.len()) as u64;
            let mark = format!(
                "\n{CUT_MARK} {cut} of {} bytes; the log keeps the first {} and the last {kept_tail} ({})]\n",
                self.total, self.head, self.setting
            );
            let _ = self.file.write_all(mark.as_bytes());
        }
        let _ = self.file.write_all(a).and_then(|()| self.file.write_all(b));
        let copied = Copied { total: self.total, cut };
        (copied, self.file)
    }
}

/// Copies `pipe` into `log` until end of file, or until `done` is set and the
/// pipe has been quiet (or [`DRAIN_LIMIT`] passed): a process that escaped
/// the trial's tree may hold the pipe open forever. `seen` counts the bytes
/// read so far, for a caller that stops a command past a cap.
pub(crate) fn copy<W: Write>(
    mut pipe: impl Read + AsFd,
    mut log: CappedLog<W>,
    done: &Arc<AtomicBool>,
    seen: &AtomicU64,
) -> (Copied, W) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut drain_until: Option<Instant> = None;
    loop {
        if drain_until.is_none() && done.load(Ordering::Acquire) {
            drain_until = Some(Instant::now() + DRAIN_LIMIT);
        }
        if drain_until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let mut fds = [PollFd::new(&pipe, PollFlags::IN)];
        let ready = match poll(&mut fds, Some(&POLL_WAIT)) {
            Err(rustix::io::Errno::INTR) => continue,
            ready => ready.unwrap_or(0),
        };
        if ready == 0 {
            if drain_until.is_some() {
                break;
            }
            continue;
        }
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                log.write(&buf[..n]);
                seen.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    log.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(cap: u64, chunks: &[&[u8]]) -> (String, Copied) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut log = CappedLog::new(std::fs::File::create(&path).unwrap(), cap, "logs.max_mib");
        for c in chunks {
            log.write(c);
        }
        let (copied, _) = log.finish();
        (String::from_utf8(std::fs::read(&path).unwrap()).unwrap(), copied)
    }

    #[test]
    fn output_under_the_cap_is_kept_whole() {
        let (text, copied) = written(100, &[b"one\n", b"two\n"]);
        assert_eq!(text, "one\ntwo\n");
        assert_eq!(copied, Copied { total: 8, cut: 0 });
    }

    #[test]
    fn a_flood_keeps_the_head_and_the_tail_from_a_line_start_and_says_what_was_cut() {
        let mut lines: Vec<Vec<u8>> = (0..1000).map(|i| format!("line {i:04}\n").into_bytes()).collect();
        lines.push(b"# Out of bounds values : 0 OK\n".to_vec());
        let chunks: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let (text, copied) = written(200, &chunks);
        assert!(text.starts_with("line 0000\nline 0001\n"), "{text}");
        assert!(text.ends_with("line 0999\n# Out of bounds values : 0 OK\n"), "{text}");
        let mark = text.lines().find(|l| l.starts_with(CUT_MARK)).expect(&text);
        assert_eq!(copied.total, 1000 * 10 + 30);
        assert!(mark.contains(&format!("{} of {} bytes", copied.cut, copied.total)), "{mark}");
        // Everything not cut is in the log, plus the mark and its newline.
        assert_eq!(text.len() as u64, copied.total - copied.cut + mark.len() as u64 + 2);
        assert!(text.len() <= 200 + mark.len() + 2);
    }

    #[test]
    fn the_ring_keeps_the_last_bytes_across_wraps_and_large_writes() {
        let mut ring = Ring::new(5);
        for chunk in [&b"abc"[..], b"de", b"fg", b"h"] {
            ring.push(chunk);
        }
        let (a, b) = ring.slices();
        assert_eq!([a, b].concat(), b"defgh");
        assert_eq!(ring.dropped, 3);
        ring.push(b"0123456789");
        let (a, b) = ring.slices();
        assert_eq!([a, b].concat(), b"56789");
        assert_eq!(ring.dropped, 13);
    }
}
