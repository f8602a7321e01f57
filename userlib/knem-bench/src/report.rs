//! Results: one record type for every benchmark, aligned tables, CSV, JSON.

use crate::err;
use crate::error::{Context, Result};
use crate::sizes::fmt_size;
use crate::sysinfo::Machine;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One measured point.
///
/// `param` is what the benchmark varies besides the size: concurrent readers
/// (contention), live regions (region-cost `live`), the chunk size
/// (shm-chunk); 0 otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// pingpong, contention, region-cost, live-regions, reuse, shm-chunk.
    pub bench: String,
    /// Mechanism or operation name.
    pub mechanism: String,
    /// `hot`, `off` or `-`.
    pub cache: String,
    /// Message size, bytes.
    pub size: u64,
    /// See the type's documentation.
    pub param: u64,
    /// Repetitions the median is taken over.
    pub reps: u32,
    /// Operations timed in each repetition.
    pub iters: u64,
    /// Median time of one operation, µs.
    pub median_us: f64,
    /// Fastest repetition, µs per operation.
    pub min_us: f64,
    /// Slowest repetition, µs per operation.
    pub max_us: f64,
    /// Bandwidth of one operation at the median, MiB/s (per reader for
    /// contention).
    pub mib_s: f64,
    /// All readers together, MiB/s (contention only).
    pub aggregate_mib_s: Option<f64>,
    /// Bandwidth relative to memcpy of the same size and cache mode.
    pub vs_memcpy: Option<f64>,
    /// Bandwidth relative to the CMA mechanism of the same direction.
    pub vs_cma: Option<f64>,
    /// Benchmark-specific ratio (see docs/PERFORMANCE.md).
    pub vs_base: Option<f64>,
}

/// A whole run: machine, what was skipped, and the records.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Where it ran.
    pub machine: Machine,
    /// The command line.
    pub command: String,
    /// `(mechanism, reason)` for everything skipped.
    pub skipped: Vec<(String, String)>,
    /// The measurements.
    pub records: Vec<Record>,
}

const CSV_HEADER: &str = "bench,mechanism,cache,size,param,reps,iters,median_us,min_us,max_us,mib_s,aggregate_mib_s,vs_memcpy,vs_cma,vs_base";

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.6}"))
}

fn clean(s: &str) -> String {
    s.replace([',', '\n'], " ")
}

/// The records as CSV, the machine on a leading `#` line.
pub fn to_csv(report: &Report) -> String {
    let mut out = format!(
        "# {}\n# {}\n{CSV_HEADER}\n",
        report.machine.header(),
        clean(&report.command)
    );
    for r in &report.records {
        out += &format!(
            "{},{},{},{},{},{},{},{:.4},{:.4},{:.4},{:.3},{},{},{},{}\n",
            clean(&r.bench),
            clean(&r.mechanism),
            clean(&r.cache),
            r.size,
            r.param,
            r.reps,
            r.iters,
            r.median_us,
            r.min_us,
            r.max_us,
            r.mib_s,
            opt(r.aggregate_mib_s),
            opt(r.vs_memcpy),
            opt(r.vs_cma),
            opt(r.vs_base)
        );
    }
    out
}

/// Parse CSV written by [`to_csv`] (comment lines ignored).
pub fn from_csv(text: &str) -> Result<Vec<Record>> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty());
    match lines.next() {
        Some((_, h)) if h.trim() == CSV_HEADER => {}
        _ => return Err(err!("not a knem-bench CSV (header line missing)")),
    }
    let num = |s: &str, line: usize| -> Result<f64> {
        s.parse::<f64>()
            .map_err(|_| err!("CSV line {}: bad number `{s}`", line + 1))
    };
    let optn = |s: &str, line: usize| -> Result<Option<f64>> {
        if s.is_empty() {
            Ok(None)
        } else {
            num(s, line).map(Some)
        }
    };
    let mut out = Vec::new();
    for (i, l) in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() != 15 {
            return Err(err!("CSV line {}: {} fields instead of 15", i + 1, f.len()));
        }
        out.push(Record {
            bench: f[0].into(),
            mechanism: f[1].into(),
            cache: f[2].into(),
            size: num(f[3], i)? as u64,
            param: num(f[4], i)? as u64,
            reps: num(f[5], i)? as u32,
            iters: num(f[6], i)? as u64,
            median_us: num(f[7], i)?,
            min_us: num(f[8], i)?,
            max_us: num(f[9], i)?,
            mib_s: num(f[10], i)?,
            aggregate_mib_s: optn(f[11], i)?,
            vs_memcpy: optn(f[12], i)?,
            vs_cma: optn(f[13], i)?,
            vs_base: optn(f[14], i)?,
        });
    }
    Ok(out)
}

/// Write the report as `.csv` or `.json`, chosen by the extension.
pub fn write(report: &Report, path: &Path) -> Result<()> {
    let text = match path.extension().and_then(|e| e.to_str()) {
        Some("csv") => to_csv(report),
        Some("json") => serde_json::to_string_pretty(report)? + "\n",
        _ => {
            return Err(err!(
                "--out {}: the file name must end in .csv or .json",
                path.display()
            ))
        }
    };
    std::fs::write(path, text).ctx(format_args!("writing {}", path.display()))
}

/// A text table with a header row, right-aligned columns (the first
/// `left` columns left-aligned) and blank lines where `rows` has `None`.
pub struct Table {
    /// Column titles.
    pub headers: Vec<String>,
    /// Rows; `None` prints an empty separator line.
    pub rows: Vec<Option<Vec<String>>>,
    /// How many leading columns are left-aligned.
    pub left: usize,
}

impl Table {
    /// An empty table with these column titles.
    pub fn new(headers: &[&str], left: usize) -> Table {
        Table {
            headers: headers.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            left,
        }
    }

    /// Append a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Some(cells));
    }

    /// Append a separator line.
    pub fn gap(&mut self) {
        if matches!(self.rows.last(), Some(Some(_))) {
            self.rows.push(None);
        }
    }

    /// Render with two spaces between columns, no trailing blanks.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut w: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in self.rows.iter().flatten() {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                if i > 0 {
                    s += "  ";
                }
                let pad = w[i] - c.chars().count();
                if i < self.left {
                    s += c;
                    s += &" ".repeat(pad);
                } else {
                    s += &" ".repeat(pad);
                    s += c;
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        out += &(w
            .iter()
            .map(|&x| "-".repeat(x))
            .collect::<Vec<_>>()
            .join("  ")
            + "\n");
        for r in &self.rows {
            match r {
                Some(cells) => out += &line(cells),
                None => out += "\n",
            }
        }
        out
    }
}

/// A time in µs with sensible precision.
pub fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        "-".into()
    } else if us < 10.0 {
        format!("{us:.2}")
    } else if us < 1000.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// A bandwidth in MiB/s.
pub fn fmt_bw(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0}")
    } else {
        "-".into()
    }
}

/// A ratio like `0.45x`, or `-`.
pub fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or("-".into(), |x| format!("{x:.2}x"))
}

/// A size column cell.
pub fn fmt_sz(v: u64) -> String {
    fmt_size(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(mech: &str, size: u64, us: f64) -> Record {
        Record {
            bench: "pingpong".into(),
            mechanism: mech.into(),
            cache: "hot".into(),
            size,
            param: 0,
            reps: 3,
            iters: 10,
            median_us: us,
            min_us: us * 0.9,
            max_us: us * 1.1,
            mib_s: crate::stats::mib_per_s(size, us * 1000.0),
            aggregate_mib_s: None,
            vs_memcpy: Some(0.5),
            vs_cma: None,
            vs_base: Some(2.0),
        }
    }

    fn report() -> Report {
        Report {
            machine: Machine {
                cpu: "Test CPU".into(),
                cores: 2,
                kernel: "6.1.0".into(),
                vm: None,
                llc_bytes: Some(32 << 20),
                load: Some(0.5),
                accel: "native".into(),
                overheads: None,
            },
            command: "knem-bench pingpong, --quick".into(),
            skipped: vec![("knem-read".into(), "no /dev/knem".into())],
            records: vec![rec("memcpy", 1024, 0.25), rec("shm", 1 << 20, 120.0)],
        }
    }

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["size", "mechanism", "us"], 2);
        t.row(vec!["1K".into(), "memcpy".into(), fmt_us(0.25)]);
        t.gap();
        t.row(vec!["64M".into(), "knem-write".into(), fmt_us(12345.0)]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "size  mechanism      us");
        assert_eq!(lines[1], "----  ----------  -----");
        assert_eq!(lines[2], "1K    memcpy       0.25");
        assert_eq!(lines[3], "");
        assert_eq!(lines[4], "64M   knem-write  12345");
        // every non-empty line has the same width
        let w = lines[1].len();
        assert!(lines.iter().filter(|l| !l.is_empty()).all(|l| l.len() == w));
    }

    #[test]
    fn ratio_and_number_formatting() {
        assert_eq!(fmt_ratio(Some(0.456)), "0.46x");
        assert_eq!(fmt_ratio(None), "-");
        assert_eq!(fmt_us(1.234), "1.23");
        assert_eq!(fmt_us(12.34), "12.3");
        assert_eq!(fmt_us(f64::NAN), "-");
        assert_eq!(fmt_bw(1234.6), "1235");
    }

    #[test]
    fn csv_shape_and_round_trip() {
        let r = report();
        let csv = to_csv(&r);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("# machine: Test CPU"));
        assert_eq!(lines[1], "# knem-bench pingpong  --quick");
        assert_eq!(lines[2], CSV_HEADER);
        assert_eq!(lines.len(), 5);
        assert!(lines[3].starts_with("pingpong,memcpy,hot,1024,0,3,10,0.2500,"));
        // empty optional fields stay empty, never "None"
        assert!(lines[3].contains(",0.500000,,2.000000"));
        let back = from_csv(&csv).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].mechanism, "shm");
        assert_eq!(back[1].size, 1 << 20);
        assert!((back[1].median_us - 120.0).abs() < 1e-9);
        assert_eq!(back[0].vs_cma, None);
        assert!(from_csv("a,b\n1,2\n").is_err());
    }

    #[test]
    fn json_shape() {
        let v: serde_json::Value = serde_json::to_value(report()).unwrap();
        assert_eq!(v["machine"]["cpu"], "Test CPU");
        assert_eq!(v["machine"]["cores"], 2);
        assert_eq!(v["skipped"][0][0], "knem-read");
        let r0 = &v["records"][0];
        for key in [
            "bench",
            "mechanism",
            "cache",
            "size",
            "param",
            "reps",
            "iters",
            "median_us",
            "min_us",
            "max_us",
            "mib_s",
            "aggregate_mib_s",
            "vs_memcpy",
            "vs_cma",
            "vs_base",
        ] {
            assert!(r0.get(key).is_some(), "missing {key}");
        }
        assert_eq!(r0["size"], 1024);
        assert!(r0["vs_cma"].is_null());
    }

    #[test]
    fn out_extension_checked() {
        let dir = std::env::temp_dir().join(format!("knem-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(write(&report(), &dir.join("x.txt")).is_err());
        write(&report(), &dir.join("x.json")).unwrap();
        write(&report(), &dir.join("x.csv")).unwrap();
        let back = from_csv(&std::fs::read_to_string(dir.join("x.csv")).unwrap()).unwrap();
        assert_eq!(back.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
