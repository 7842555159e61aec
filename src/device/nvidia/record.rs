//! The per-process record file of the CUPTI SASS collector: tab-separated lines, one tag each.

use std::collections::BTreeMap;
use std::path::Path;

use crate::bail;
use crate::error::{Context, Error, Result};

const MAGIC: &str = "ccl-coverage-sass";

/// The collector's record files in a trial's profile folder
/// (`sass-<host>-<pid>.tsv`), sorted; none when the folder does not exist.
pub(crate) fn record_files(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::from(e).context(format_args!("cannot list {}", dir.display()))),
    };
    // The entry's own type, not its target's: a link named like a record is not one.
    let mut files: Vec<std::path::PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "tsv")
                && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("sass-"))
        })
        .collect();
    files.sort();
    Ok(files)
}
/// Version 1 files (the first collector) lack the `cupti` and `dropped` lines; `skipped`
/// lines (kernels launched but not counted) came with version 3, and each instruction's thread
/// counts (`x` lines of six fields) with version 4.
const VERSIONS: std::ops::RangeInclusive<u32> = 1..=4;

/// The first version whose instructions carry thread counts, which device branches need.
const THREAD_COUNTS_SINCE: u32 = 4;

/// One instruction's thread counts, summed over repeated lines: the threads that executed it
/// (`smsp__sass_thread_inst_executed`) and those of them whose guard predicate was true
/// (`smsp__sass_thread_inst_executed_pred_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ThreadCounts {
    pub(crate) executed: u64,
    pub(crate) pred_on: u64,
}

/// Where one SASS instruction is: CUPTI keys its counts by cubin CRC, kernel and PC offset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct InstructionKey {
    pub(crate) crc: u32,
    pub(crate) function: String,
    pub(crate) offset: u64,
}

/// One process's record file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    /// The file it came from, for errors.
    pub(crate) origin: String,
    pub(crate) version: u32,
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// CUPTI's version string and the library path the collector loaded.
    pub(crate) cupti: Option<(String, String)>,
    /// Cubins the process loaded: CRC → size in bytes.
    pub(crate) cubins: BTreeMap<u32, u64>,
    pub(crate) events: Vec<String>,
    /// Records CUPTI dropped or the collector could not hold; any is lost coverage.
    pub(crate) dropped: u64,
    /// Executed count of each instruction, summed over repeated lines.
    pub(crate) executions: BTreeMap<InstructionKey, u64>,
    /// Thread counts of each instruction that has them (version 4, the thread metrics configured).
    pub(crate) threads: BTreeMap<InstructionKey, ThreadCounts>,
    /// Instructions of a version 4 record without thread counts (`-`): CUPTI would not configure
    /// the thread metrics.
    pub(crate) without_threads: usize,
    /// Launches the collector did not count, by kernel: of kernels outside
    /// those it was told to count (`skipped`), and past the launch limit (`capped`).
    pub(crate) skipped: BTreeMap<String, u64>,
    pub(crate) capped: BTreeMap<String, u64>,
    /// The reason the collector gave on its last line; `None` when the process did not flush.
    pub(crate) end: Option<String>,
}

impl Record {
    pub(crate) fn read(path: &Path) -> Result<Self> {
        let origin = path.display().to_string();
        // A regular file only, opened without following a link or blocking on a FIFO.
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::workspace::confined::open_regular(path)?, &mut text)
            .context(&origin)?;
        Self::parse(&text, &origin)
    }

    /// Parses a record file's text; `origin` names it in errors, with the line number.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<Self> {
        let mut record = Record { origin: origin.to_owned(), ..Record::default() };
        let mut host = None;
        let mut pid = None;
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let at = |error: Error| error.context(format_args!("{origin}:{number}"));
            if record.end.is_some() {
                return Err(at(Error::new("line after the end line")));
            }
            if index == 0 {
                record.version = parse_header(line).map_err(at)?;
                continue;
            }
            record.parse_line(line, &mut host, &mut pid).map_err(at)?;
        }
        if record.version == 0 {
            bail!("{origin}: empty, no {MAGIC} header");
        }
        let (Some(host), Some(pid)) = (host, pid) else {
            bail!("{origin}: no host or pid line");
        };
        record.host = host;
        record.pid = pid;
        if let Some(key) = record.executions.keys().find(|key| !record.cubins.contains_key(&key.crc)) {
            bail!("{origin}: counts for cubin {:08x}, which has no cubin line", key.crc);
        }
        Ok(record)
    }

    /// A process that did not reach its `end` line lost whatever it had not flushed.
    pub(crate) fn is_complete(&self) -> bool {
        self.end.is_some()
    }

    /// Why this record gives no branch outcomes, if it does not: an older collector counted
    /// executed instructions only, or CUPTI would not configure the thread metrics.
    pub(crate) fn branches_unavailable(&self) -> Option<String> {
        if self.version < THREAD_COUNTS_SINCE {
            Some(format!(
                "{}: a version {} record counts executed instructions only (thread counts came with version {THREAD_COUNTS_SINCE})",
                self.origin, self.version
            ))
        } else if self.without_threads > 0 {
            Some(format!(
                "{}: {} instructions have no thread counts (CUPTI did not configure the thread metrics; see its event lines)",
                self.origin, self.without_threads
            ))
        } else {
            None
        }
    }

    fn parse_line(&mut self, line: &str, host: &mut Option<String>, pid: &mut Option<u32>) -> Result<()> {
        let (tag, rest) = line.split_once('\t').unwrap_or((line, ""));
        match tag {
            "host" => set_once(host, fields::<1>(rest)?[0].to_owned(), "host"),
            "pid" => set_once(pid, parse_number(fields::<1>(rest)?[0], 10, "pid")?, "pid"),
            "cupti" if self.version >= 2 => {
                let [version, library] = fields(rest)?;
                set_once(&mut self.cupti, (version.to_owned(), library.to_owned()), "cupti")
            }
            "cubin" => {
                let [crc, bytes] = fields(rest)?;
                let crc = parse_number(crc, 16, "cubin CRC")?;
                if self.cubins.insert(crc, parse_number(bytes, 10, "cubin size")?).is_some() {
                    bail!("cubin {crc:08x} listed twice");
                }
                Ok(())
            }
            // Free text that may hold tabs itself.
            "event" => {
                self.events.push(rest.to_owned());
                Ok(())
            }
            "dropped" if self.version >= 2 => {
                let dropped: u64 = parse_number(fields::<1>(rest)?[0], 10, "dropped count")?;
                self.dropped = self.dropped.saturating_add(dropped);
                Ok(())
            }
            "x" => {
                let (crc, offset, count, threads, function) = if self.version >= THREAD_COUNTS_SINCE {
                    let [crc, offset, count, threads, pred_on, function] = fields(rest)?;
                    (crc, offset, count, Some((threads, pred_on)), function)
                } else {
                    let [crc, offset, count, function] = fields(rest)?;
                    (crc, offset, count, None, function)
                };
                if function.is_empty() {
                    bail!("empty function name");
                }
                let key = InstructionKey {
                    crc: parse_number(crc, 16, "cubin CRC")?,
                    function: function.to_owned(),
                    offset: parse_number(offset, 16, "PC offset")?,
                };
                let count: u64 = parse_number(count, 10, "count")?;
                match threads {
                    Some(("-", "-")) => self.without_threads += 1,
                    Some((threads, pred_on)) => {
                        let executed: u64 = parse_number(threads, 10, "thread count")?;
                        let pred_on: u64 = parse_number(pred_on, 10, "predicated-on thread count")?;
                        if pred_on > executed {
                            bail!("{pred_on} threads predicated on of {executed} that executed");
                        }
                        let total = self.threads.entry(key.clone()).or_default();
                        total.executed = total.executed.saturating_add(executed);
                        total.pred_on = total.pred_on.saturating_add(pred_on);
                    }
                    None => {}
                }
                let total = self.executions.entry(key).or_default();
                *total = total.saturating_add(count);
                Ok(())
            }
            "skipped" | "capped" if self.version >= 3 => {
                let [launches, function] = fields(rest)?;
                if function.is_empty() {
                    bail!("empty function name");
                }
                let launches: u64 = parse_number(launches, 10, "launch count")?;
                let map = if tag == "skipped" { &mut self.skipped } else { &mut self.capped };
                let total = map.entry(function.to_owned()).or_default();
                *total = total.saturating_add(launches);
                Ok(())
            }
            "end" => {
                self.end = Some(rest.to_owned());
                Ok(())
            }
            _ => bail!("unknown line tag {tag:?}"),
        }
    }
}

fn parse_header(line: &str) -> Result<u32> {
    let Some(version) = line.strip_prefix(MAGIC).and_then(|rest| rest.strip_prefix('\t')) else {
        bail!("not a {MAGIC} record file: the first line is {line:?}");
    };
    let version = parse_number(version, 10, "version")?;
    if !VERSIONS.contains(&version) {
        bail!("{MAGIC} version {version} is not supported (only {VERSIONS:?})");
    }
    Ok(version)
}

/// Exactly `N` tab-separated fields.
fn fields<const N: usize>(rest: &str) -> Result<[&str; N]> {
    let found: Vec<&str> = rest.split('\t').collect();
    <[&str; N]>::try_from(found.as_slice()).map_err(|_| Error::new(format!("{} fields where {N} belong", found.len())))
}

fn set_once<T>(slot: &mut Option<T>, value: T, what: &str) -> Result<()> {
    if slot.replace(value).is_some() {
        bail!("a second {what} line");
    }
    Ok(())
}

/// Digits only: `from_str_radix` alone would take a leading `+`.
fn parse_number<T: FromRadix>(text: &str, radix: u32, what: &str) -> Result<T> {
    if text.is_empty() || !text.chars().all(|digit| digit.is_digit(radix)) {
        bail!("{what} {text:?} is not a base-{radix} number");
    }
    T::from_radix(text, radix).with_context(|| format!("{what} {text:?}"))
}

trait FromRadix: Sized {
    fn from_radix(text: &str, radix: u32) -> Result<Self, std::num::ParseIntError>;
}

impl FromRadix for u32 {
    fn from_radix(text: &str, radix: u32) -> Result<Self, std::num::ParseIntError> {
        u32::from_str_radix(text, radix)
    }
}

impl FromRadix for u64 {
    fn from_radix(text: &str, radix: u32) -> Result<Self, std::num::ParseIntError> {
        u64::from_str_radix(text, radix)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const PROBE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/cuda-sass/probe-record.v2.tsv");

    fn parse(text: &str) -> Result<Record> {
        Record::parse(text, "r.tsv")
    }

    #[test]
    fn reads_the_probe_record() {
        let record = Record::read(Path::new(PROBE)).unwrap();
        assert_eq!((record.version, record.host.as_str(), record.pid), (2, "vm", 1272));
        assert_eq!(record.cupti.as_ref().map(|(version, _)| version.as_str()), Some("13.4.92"));
        assert_eq!(record.cubins, BTreeMap::from([(0x1a0a_3cc3, 10728)]));
        assert_eq!(record.dropped, 0);
        assert_eq!(record.executions.len(), 31);
        let key = InstructionKey { crc: 0x1a0a_3cc3, function: "_Z5probePKiPii".to_owned(), offset: 0x220 };
        assert_eq!(record.executions[&key], 3);
        assert!(record.events.contains(&"configured\tdevice 0 chip GH100".to_owned()));
        assert!(record.is_complete());
    }

    #[test]
    fn a_record_without_end_is_incomplete() {
        let text = std::fs::read_to_string(PROBE).unwrap();
        let cut = text.trim_end().rsplit_once('\n').unwrap().0;
        let record = parse(cut).unwrap();
        assert!(!record.is_complete());
        assert_eq!(record.executions.len(), 31);
    }

    #[test]
    fn version_1_has_no_cupti_or_dropped_lines() {
        let v1 = "ccl-coverage-sass\t1\nhost\th\npid\t1\ncubin\tab\t10\nx\tab\t10\t4\tk\nx\tab\t10\t1\tk\nend\texit\n";
        let record = parse(v1).unwrap();
        let key = InstructionKey { crc: 0xab, function: "k".to_owned(), offset: 0x10 };
        assert_eq!(record.executions, BTreeMap::from([(key, 5)]));
        let error = parse(&v1.replace("end\t", "dropped\t3\nend\t")).unwrap_err().to_string();
        assert_eq!(error, "r.tsv:7: unknown line tag \"dropped\"");
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let good = "ccl-coverage-sass\t2\nhost\th\npid\t7\ncubin\tab\t10\ndropped\t2\nx\tab\t10\t4\tk\nend\texit\n";
        assert_eq!(parse(good).unwrap().dropped, 2);
        let cases = [
            (
                "ccl-coverage-sass\t2",
                "ccl-coverage-sass\t5",
                "r.tsv:1: ccl-coverage-sass version 5 is not supported (only 1..=4)",
            ),
            ("x\tab\t10\t4\tk", "skipped\t3\tprepare", "r.tsv:6: unknown line tag \"skipped\""),
            (
                "ccl-coverage-sass\t2",
                "ccl-coverage\t2",
                "r.tsv:1: not a ccl-coverage-sass record file: the first line is \"ccl-coverage\\t2\"",
            ),
            ("pid\t7", "pid\t-7", "r.tsv:3: pid \"-7\" is not a base-10 number"),
            ("pid\t7", "pid\t7\npid\t8", "r.tsv:4: a second pid line"),
            ("dropped\t2", "dropped\t+2", "r.tsv:5: dropped count \"+2\" is not a base-10 number"),
            ("x\tab\t10\t4\tk", "x\tab\t1g\t4\tk", "r.tsv:6: PC offset \"1g\" is not a base-16 number"),
            ("x\tab\t10\t4\tk", "x\tab\t10\t4", "r.tsv:6: 3 fields where 4 belong"),
            (
                "x\tab\t10\t4\tk",
                "x\tab\t10\t99999999999999999999\tk",
                "r.tsv:6: count \"99999999999999999999\": number too large to fit in target type",
            ),
            ("x\tab\t10\t4\tk", "y\tab", "r.tsv:6: unknown line tag \"y\""),
            ("x\tab\t10\t4\tk", "x\tcd\t10\t4\tk", "r.tsv: counts for cubin 000000cd, which has no cubin line"),
            ("end\texit\n", "end\texit\nx\tab\t10\t4\tk\n", "r.tsv:8: line after the end line"),
            ("host\th\n", "", "r.tsv: no host or pid line"),
        ];
        for (from, to, expected) in cases {
            assert_eq!(parse(&good.replace(from, to)).unwrap_err().to_string(), expected, "{to:?}");
        }
        assert_eq!(parse("").unwrap_err().to_string(), "r.tsv: empty, no ccl-coverage-sass header");
    }

    #[test]
    fn version_3_names_the_kernels_it_did_not_count() {
        let v3 = "ccl-coverage-sass\t3\nhost\th\npid\t7\ncubin\tab\t10\ndropped\t0\nx\tab\t10\t4\tk\n\
                  skipped\t2\tprepare\nskipped\t1\tverify\nskipped\t1\tprepare\ncapped\t19\tk\nend\texit\n";
        let record = parse(v3).unwrap();
        assert_eq!(record.skipped, BTreeMap::from([("prepare".to_owned(), 3), ("verify".to_owned(), 1)]));
        assert_eq!(record.capped, BTreeMap::from([("k".to_owned(), 19)]));
        assert_eq!(
            parse(&v3.replace("skipped\t2\t", "skipped\tx\t")).unwrap_err().to_string(),
            "r.tsv:7: launch count \"x\" is not a base-10 number"
        );
        assert_eq!(parse(&v3.replace("\tverify", "")).unwrap_err().to_string(), "r.tsv:8: 1 fields where 2 belong");
    }

    #[test]
    fn version_4_carries_each_instruction_s_thread_counts() {
        let v4 = "ccl-coverage-sass\t4\nhost\th\npid\t7\ncubin\tab\t10\ndropped\t0\n\
                  x\tab\t10\t4\t100\t25\tk\nx\tab\t20\t2\t64\t0\tk\nx\tab\t10\t1\t32\t32\tk\nend\texit\n";
        let record = parse(v4).unwrap();
        let key = |offset| InstructionKey { crc: 0xab, function: "k".to_owned(), offset };
        assert_eq!(record.executions, BTreeMap::from([(key(0x10), 5), (key(0x20), 2)]));
        assert_eq!(
            record.threads,
            BTreeMap::from([
                (key(0x10), ThreadCounts { executed: 132, pred_on: 57 }),
                (key(0x20), ThreadCounts { executed: 64, pred_on: 0 })
            ])
        );
        assert_eq!(record.branches_unavailable(), None);
        let cases = [
            ("\t100\t25\t", "\t100\t101\t", "r.tsv:6: 101 threads predicated on of 100 that executed"),
            ("\t100\t25\t", "\t100\t-\t", "r.tsv:6: predicated-on thread count \"-\" is not a base-10 number"),
            ("\t100\t25\t", "\t-\t25\t", "r.tsv:6: thread count \"-\" is not a base-10 number"),
            ("\t100\t25\tk", "\t100\tk", "r.tsv:6: 5 fields where 6 belong"),
        ];
        for (from, to, expected) in cases {
            assert_eq!(parse(&v4.replacen(from, to, 1)).unwrap_err().to_string(), expected, "{to:?}");
        }
        // The collector fell back to the first metric: lines, and the reason there are no branches.
        let one_metric = parse(&v4.replace("\t100\t25\t", "\t-\t-\t")).unwrap();
        assert_eq!(one_metric.executions.len(), 2);
        assert_eq!(
            one_metric.branches_unavailable().unwrap(),
            "r.tsv: 1 instructions have no thread counts (CUPTI did not configure the thread metrics; see its event lines)"
        );
    }

    #[test]
    fn older_records_still_read_and_say_why_they_have_no_branches() {
        let record = Record::read(Path::new(PROBE)).unwrap();
        assert!(record.threads.is_empty());
        assert_eq!(
            record.branches_unavailable().unwrap(),
            format!(
                "{PROBE}: a version 2 record counts executed instructions only (thread counts came with version 4)"
            )
        );
        // A version 3 line of four fields is not a version 4 line.
        let v3 = "ccl-coverage-sass\t3\nhost\th\npid\t7\ncubin\tab\t10\nx\tab\t10\t4\tk\nend\texit\n";
        assert_eq!(parse(v3).unwrap().executions.len(), 1);
        assert_eq!(parse(&v3.replace("\t3\n", "\t4\n")).unwrap_err().to_string(), "r.tsv:5: 4 fields where 6 belong");
    }
}
