//! Parsing the nccl-tests / rccl-tests result table and closing lines:
//!
//! ```text
//! #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//!         1024           256     float     sum      -1    12.34    0.08    0.12      0    11.11    0.09    0.14      0
//! # Out of bounds values : 0 OK
//! # Avg bus bandwidth    : 0.123
//! ```

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Measure {
    pub(crate) time_us: f64,
    pub(crate) algbw_gbs: f64,
    pub(crate) busbw_gbs: f64,
    /// `None` when the test ran without checking (`-c 0` prints `N/A`).
    pub(crate) wrong: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PerfRow {
    pub(crate) size: u64,
    pub(crate) count: u64,
    #[serde(rename = "type")]
    pub(crate) dtype: String,
    pub(crate) redop: String,
    pub(crate) root: i64,
    pub(crate) out_of_place: Measure,
    pub(crate) in_place: Option<Measure>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutOfBounds {
    pub(crate) count: u64,
    pub(crate) ok: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PerfReport {
    pub(crate) rows: Vec<PerfRow>,
    pub(crate) out_of_bounds: Option<OutOfBounds>,
    pub(crate) avg_busbw_gbs: Option<f64>,
}

impl PerfReport {
    /// Rows whose `#wrong` column is not zero.
    pub(crate) fn wrong_rows(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| std::iter::once(&r.out_of_place).chain(&r.in_place).any(|m| m.wrong.unwrap_or(0) > 0))
            .count()
    }

    /// Takes one line of the output: a result row, a summary line, or noise.
    pub(crate) fn line(&mut self, line: &str) {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix('#') {
            let Some((key, value)) = rest.split_once(':') else { return };
            match key.trim() {
                "Out of bounds values" => {
                    let mut words = value.split_whitespace();
                    if let Some(count) = words.next().and_then(|w| w.parse().ok()) {
                        self.out_of_bounds = Some(OutOfBounds { count, ok: words.next() == Some("OK") });
                    }
                }
                "Avg bus bandwidth" => {
                    self.avg_busbw_gbs = value.split_whitespace().next().and_then(|w| w.parse().ok());
                }
                _ => {}
            }
        } else if let Some(row) = parse_row(trimmed) {
            self.rows.push(row);
        }
    }
}

fn parse_row(line: &str) -> Option<PerfRow> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 9 {
        return None;
    }
    let measure = |f: &[&str]| -> Option<Measure> {
        Some(Measure {
            time_us: f[0].parse().ok()?,
            algbw_gbs: f[1].parse().ok()?,
            busbw_gbs: f[2].parse().ok()?,
            wrong: if f[3] == "N/A" { None } else { Some(f[3].parse::<f64>().ok()? as u64) },
        })
    };
    Some(PerfRow {
        size: fields[0].parse().ok()?,
        count: fields[1].parse().ok()?,
        dtype: fields[2].to_string(),
        redop: fields[3].to_string(),
        root: fields[4].parse().ok()?,
        out_of_place: measure(&fields[5..9])?,
        in_place: fields.get(9..13).and_then(measure),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn parse(output: &str) -> PerfReport {
        let mut report = PerfReport::default();
        output.lines().for_each(|l| report.line(l));
        report
    }

    const NCCL_TESTS: &str = "\
# nccl-tests version 2.17.1 nccl-headers=22803 nccl-library=22803
# Collective test starting: all_gather_perf
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024            32     float    none      -1    18.04    0.06    0.03      0    17.58    0.06    0.03      0
  1073741824      33554432     float    none      -1   5121.2  209.66  104.83     14   5110.4  210.11  105.05      0
# Out of bounds values : 14 FAILED
# Avg bus bandwidth    : 52.4855
#
# Collective test concluded: all_gather_perf
";

    #[test]
    fn parses_rows_and_summary() {
        let report = parse(NCCL_TESTS);
        assert_eq!(report.rows.len(), 2);
        let big = &report.rows[1];
        assert_eq!(
            (big.size, big.count, big.dtype.as_str(), big.redop.as_str(), big.root),
            (1073741824, 33554432, "float", "none", -1)
        );
        assert_eq!(big.out_of_place.wrong, Some(14));
        assert_eq!(big.in_place.as_ref().unwrap().busbw_gbs, 105.05);
        assert_eq!(report.out_of_bounds, Some(OutOfBounds { count: 14, ok: false }));
        assert_eq!(report.avg_busbw_gbs, Some(52.4855));
        assert_eq!(report.wrong_rows(), 1);
    }

    #[test]
    fn unchecked_runs_show_na() {
        let report = parse(
            "        8   2   float  sum  -1   1.0  0.00  0.00    N/A   1.1  0.00  0.00    N/A\n# Out of bounds values : 0 OK\n",
        );
        assert_eq!(report.rows[0].out_of_place.wrong, None);
        assert_eq!(report.out_of_bounds, Some(OutOfBounds { count: 0, ok: true }));
        assert_eq!(report.wrong_rows(), 0);
    }

    #[test]
    fn ignores_noise() {
        let report = parse("NCCL INFO Bootstrap : Using eth0\nrank 0 ready\n[1] warning: 3 4 5\n");
        assert!(report.rows.is_empty());
        assert!(report.out_of_bounds.is_none());
    }
}
