//! knem-stat: the knem-rs driver's counters, as administrators want them.
//!
//! The driver publishes each field of `struct knem_core_stats` as one file
//! in `/sys/class/misc/knem/`.  This tool prints them as an aligned table,
//! as JSON (`--json`), in Prometheus's text format (`--prometheus`, for
//! node_exporter's textfile collector), or every SECS seconds with the
//! change and the rate since the previous sample (`--watch SECS`).
//! `--output FILE` replaces FILE atomically instead of printing.  `--sysfs
//! DIR` reads another directory (tests use a fake one).
//!
//! The program (src/main.rs) only calls [`main`]; [`Cli`] is public so that
//! the man page and the shell completions are generated from this one
//! definition (userlib/knem-gen-docs).

use clap::Parser;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the driver publishes its counters.
const DEFAULT_SYSFS: &str = "/sys/class/misc/knem";

/// The counters of `struct knem_core_stats` (c-shim/knem_core.h), in
/// order, with what each means.  Counters the driver adds later are shown
/// too, after these, in name order.
const KNOWN: &[(&str, &str)] = &knem_abi::STATS;

/// Counters that are levels, not running totals.
const GAUGES: &[&str] = &["contexts", "regions", "pinned_pages", "offload_threads"];

/// Prefix of every Prometheus metric.
const PROM_PREFIX: &str = "knem_";

/// The gauge that says knem-stat's memlock warning applies (1) or not (0).
const PROM_MEMLOCK_WARNING: &str = "knem_pins_refused_memlock_warning";

/// The command line (public: the man page and completions are made from it).
#[derive(Parser, Debug)]
#[command(
    name = "knem-stat",
    version,
    about = "Print the knem-rs driver counters (/sys/class/misc/knem)",
    long_about = "Print the knem-rs driver counters: live contexts, regions and pinned pages, \
                  bytes copied per mode, failed copies, ioctl errors per errno, pins refused \
                  by RLIMIT_MEMLOCK and offload threads. The module publishes each counter as \
                  a file of /sys/class/misc/knem (readable by every user, or by the group knem \
                  when /etc/knem-rs/device.conf says KNEM_RS_ACCESS=group). Prints an aligned \
                  table, JSON, Prometheus's text format, or every SECS seconds the change and \
                  the rate of each counter. A warning on standard error names the fix when \
                  RLIMIT_MEMLOCK has refused pins.",
    after_long_help = "The knem-stat-prometheus.timer unit (disabled by default) runs \
                       knem-stat --prometheus --output \
                       /var/lib/prometheus/node-exporter/knem-rs.prom every 30 s for \
                       node_exporter's textfile collector: systemctl enable --now \
                       knem-stat-prometheus.timer. Exit status: 0, or 1 when the counters \
                       cannot be read (the module is not loaded) or FILE cannot be written."
)]
pub struct Cli {
    /// Print JSON instead of a table (one object per sample with --watch).
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,

    /// Print Prometheus's text exposition format: totals as counters
    /// (knem_NAME_total), levels as gauges (knem_NAME), and the memlock
    /// warning as the gauge knem_pins_refused_memlock_warning (0 or 1).
    #[arg(long, conflicts_with = "watch")]
    prometheus: bool,

    /// Write to FILE instead of standard output, atomically: a temporary
    /// file in FILE's directory, renamed over FILE once complete (readers
    /// such as node_exporter never see half a file).
    #[arg(long, value_name = "FILE", conflicts_with = "watch")]
    output: Option<PathBuf>,

    /// Sample every SECS seconds and print each counter's change and rate.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,

    /// With --watch: stop after N samples (default: until interrupted).
    #[arg(long, value_name = "N", requires = "watch")]
    count: Option<u64>,

    /// Read the counters from DIR instead of /sys/class/misc/knem.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_SYSFS)]
    sysfs: PathBuf,
}

/// One reading of every counter, in display order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sample {
    counters: Vec<(String, u64)>,
}

impl Sample {
    fn get(&self, name: &str) -> Option<u64> {
        self.counters.iter().find(|(n, _)| n == name).map(|c| c.1)
    }
}

/// Read every counter file of `dir`: the known ones in struct order, then
/// any other file holding a single unsigned integer (sysfs's `dev`,
/// `uevent` and the subdirectories are not counters and are skipped).
fn read_sample(dir: &Path) -> Result<Sample, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{} does not exist: the knem module is not loaded (modprobe knem)",
                dir.display()
            ))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if let Some(v) = parse_value(&text) {
            found.push((name, v));
        }
    }
    if found.is_empty() {
        return Err(format!(
            "{} has no counters: is this knem-rs's knem module?",
            dir.display()
        ));
    }
    let rank = |n: &str| KNOWN.iter().position(|k| k.0 == n).unwrap_or(KNOWN.len());
    found.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then_with(|| a.0.cmp(&b.0)));
    Ok(Sample { counters: found })
}

/// A sysfs counter: one unsigned integer and a newline.
fn parse_value(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() || t.contains(char::is_whitespace) {
        return None;
    }
    t.parse().ok()
}

fn describe(name: &str) -> &'static str {
    KNOWN
        .iter()
        .find(|k| k.0 == name)
        .map(|k| k.1)
        .unwrap_or("")
}

/// 1234567 -> "1,234,567".
fn group(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes for humans, "" below 1 KiB.
fn human_bytes(v: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if v < 1024.0 {
        return String::new();
    }
    let mut x = v;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    format!("{x:.1} {}", UNITS[u])
}

fn is_bytes(name: &str) -> bool {
    name.starts_with("bytes_")
}

/// The table of one sample.
fn format_table(s: &Sample, dir: &Path) -> String {
    let w = s.counters.iter().map(|c| c.0.len()).max().unwrap_or(0);
    let vals: Vec<String> = s.counters.iter().map(|c| group(c.1)).collect();
    let vw = vals.iter().map(String::len).max().unwrap_or(0);
    let mut out = format!("knem counters ({})\n", dir.display());
    for ((name, v), val) in s.counters.iter().zip(&vals) {
        let mut note = describe(name).to_string();
        if is_bytes(name) {
            let h = human_bytes(*v as f64);
            if !h.is_empty() {
                note = format!("{note} ({h})");
            }
        }
        let line = format!("{name:<w$}  {val:>vw$}  {note}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// Lines for the administrator about counters that mean lost performance
/// and have a known fix.
fn warnings(s: &Sample) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = s.get("pins_refused_memlock").filter(|&n| n > 0) {
        out.push(format!(
            "warning: RLIMIT_MEMLOCK refused {n} pin(s), so those transfers did not use knem's \
             single copy: raise memlock for the users of MPI jobs (ulimit -l; \
             /etc/security/limits.d/knem-rs.conf has an example) or load knem with \
             account_pinned=0"
        ));
    }
    out
}

/// JSON of one sample: `{"sysfs": DIR, "counters": {NAME: VALUE, ...}}`.
fn format_json(s: &Sample, dir: &Path) -> String {
    let mut out = String::from("{\"sysfs\":");
    out.push_str(&serde_json::to_string(&dir.display().to_string()).unwrap_or_default());
    out.push_str(",\"counters\":");
    push_object(
        &mut out,
        s.counters.iter().map(|(n, v)| (n.as_str(), v.to_string())),
    );
    out.push('}');
    out
}

fn push_object<'a>(out: &mut String, fields: impl Iterator<Item = (&'a str, String)>) {
    out.push('{');
    for (i, (n, v)) in fields.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(n).unwrap_or_default());
        out.push(':');
        out.push_str(&v);
    }
    out.push('}');
}

/// A metric name for counter `name`: `knem_` and the name, with any
/// character Prometheus does not allow in a name replaced by `_`.
fn prom_name(name: &str) -> String {
    let mut out = String::from(PROM_PREFIX);
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// HELP text as the format wants it: backslash and newline escaped.
fn prom_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

fn push_metric(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {}", prom_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

/// One sample in Prometheus's text exposition format (0.0.4), as
/// node_exporter's textfile collector reads it: each level (GAUGES) as the
/// gauge `knem_NAME`, every other counter (running totals since the module
/// loaded, including counters this knem-stat does not know) as the counter
/// `knem_NAME_total`, each with its HELP and TYPE lines; then, when the
/// module counts memlock refusals, the gauge of [`warnings`]'s memlock
/// warning, 1 when it applies.
fn format_prometheus(s: &Sample) -> String {
    let mut out = String::new();
    for (name, v) in &s.counters {
        let metric = prom_name(name);
        let what = describe(name);
        let help = if what.is_empty() {
            format!("knem-rs counter {name} (/sys/class/misc/knem/{name})")
        } else {
            format!("{what} (/sys/class/misc/knem/{name})")
        };
        if GAUGES.contains(&name.as_str()) {
            push_metric(&mut out, &metric, "gauge", &help, *v);
        } else {
            push_metric(&mut out, &format!("{metric}_total"), "counter", &help, *v);
        }
    }
    if let Some(n) = s.get("pins_refused_memlock") {
        push_metric(
            &mut out,
            PROM_MEMLOCK_WARNING,
            "gauge",
            "1 when RLIMIT_MEMLOCK has refused pins since the module loaded, so those \
             transfers did not use knem's single copy: raise memlock for the users of MPI \
             jobs (/etc/security/limits.d/knem-rs.conf) or load knem with account_pinned=0",
            u64::from(n > 0),
        );
    }
    out
}

/// Replace `path` with `text` atomically: write a temporary file in the
/// same directory (so that the rename stays within one filesystem), flush
/// it to disk, then rename it over `path`.  The temporary file is removed
/// on any failure.  Mode 0644: node_exporter runs as another user.
fn write_atomic(path: &Path, text: &str) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(file_name) = path.file_name() else {
        return Err(format!("--output {}: not a file name", path.display()));
    };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })
}

/// Change of one counter between two samples: signed (gauges go down; a
/// module reload resets totals).
#[derive(Debug, Clone, PartialEq)]
struct Delta {
    name: String,
    value: u64,
    delta: i128,
    rate: f64,
}

fn deltas(prev: &Sample, now: &Sample, secs: f64) -> Vec<Delta> {
    now.counters
        .iter()
        .map(|(n, v)| {
            let before = prev.get(n).unwrap_or(*v);
            let delta = i128::from(*v) - i128::from(before);
            let rate = if secs > 0.0 { delta as f64 / secs } else { 0.0 };
            Delta {
                name: n.clone(),
                value: *v,
                delta,
                rate,
            }
        })
        .collect()
}

fn format_rate(name: &str, rate: f64) -> String {
    if GAUGES.contains(&name) {
        return String::new();
    }
    if is_bytes(name) {
        let h = human_bytes(rate.abs());
        if !h.is_empty() {
            return format!("{}{h}/s", if rate < 0.0 { "-" } else { "" });
        }
    }
    format!("{rate:.1}/s")
}

/// The table of one watch interval: value, change and rate per counter.
fn format_watch(ds: &[Delta], secs: f64) -> String {
    let w = ds.iter().map(|d| d.name.len()).max().unwrap_or(0).max(7);
    let rows: Vec<(String, String, String)> = ds
        .iter()
        .map(|d| {
            let delta = if d.delta > 0 {
                format!("+{}", group(d.delta as u64))
            } else if d.delta < 0 {
                format!("-{}", group(d.delta.unsigned_abs() as u64))
            } else {
                "0".into()
            };
            (group(d.value), delta, format_rate(&d.name, d.rate))
        })
        .collect();
    let vw = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(5);
    let dw = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(6);
    let mut out = format!("--- {secs:.1} s\n");
    let _ = writeln!(
        out,
        "{:<w$}  {:>vw$}  {:>dw$}  rate",
        "counter", "value", "change"
    );
    for (d, r) in ds.iter().zip(&rows) {
        let line = format!("{:<w$}  {:>vw$}  {:>dw$}  {}", d.name, r.0, r.1, r.2);
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

fn format_watch_json(ds: &[Delta], secs: f64, dir: &Path) -> String {
    let mut out = String::from("{\"sysfs\":");
    out.push_str(&serde_json::to_string(&dir.display().to_string()).unwrap_or_default());
    let _ = write!(out, ",\"interval_s\":{secs:.3},\"counters\":");
    push_object(
        &mut out,
        ds.iter().map(|d| (d.name.as_str(), d.value.to_string())),
    );
    out.push_str(",\"deltas\":");
    push_object(
        &mut out,
        ds.iter().map(|d| (d.name.as_str(), d.delta.to_string())),
    );
    out.push_str(",\"rates\":");
    push_object(
        &mut out,
        ds.iter().map(|d| {
            let r = if d.rate.is_finite() { d.rate } else { 0.0 };
            (d.name.as_str(), format!("{r:.3}"))
        }),
    );
    out.push('}');
    out
}

fn run(cli: &Cli) -> Result<(), String> {
    let first = read_sample(&cli.sysfs)?;
    for w in warnings(&first) {
        eprintln!("knem-stat: {w}");
    }
    let Some(secs) = cli.watch else {
        let text = if cli.prometheus {
            format_prometheus(&first)
        } else if cli.json {
            format!("{}\n", format_json(&first, &cli.sysfs))
        } else {
            format_table(&first, &cli.sysfs)
        };
        match &cli.output {
            Some(path) => write_atomic(path, &text)?,
            None => print!("{text}"),
        }
        return Ok(());
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!(
            "--watch wants a positive number of seconds, not {secs}"
        ));
    }
    if cli.json {
        println!("{}", format_json(&first, &cli.sysfs));
    } else {
        print!("{}", format_table(&first, &cli.sysfs));
    }
    let mut prev = first;
    let mut t = Instant::now();
    let mut n = 0u64;
    while cli.count.map_or(true, |c| n < c) {
        std::thread::sleep(Duration::from_secs_f64(secs));
        let now = read_sample(&cli.sysfs)?;
        let dt = t.elapsed().as_secs_f64();
        t = Instant::now();
        let ds = deltas(&prev, &now, dt);
        if cli.json {
            println!("{}", format_watch_json(&ds, dt, &cli.sysfs));
        } else {
            print!("{}", format_watch(&ds, dt));
        }
        prev = now;
        n += 1;
    }
    Ok(())
}

/// The program: parse the command line, print, exit 1 with one line on
/// standard error on failure.
pub fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(&cli) {
        eprintln!("knem-stat: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake /sys/class/misc/knem in a fresh temporary directory.
    struct FakeSysfs(PathBuf);

    impl FakeSysfs {
        fn new(tag: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("knem-stat-test-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn set(&self, name: &str, text: &str) {
            fs::write(self.0.join(name), text).unwrap();
        }

        /// Every known counter, with value = 10 * its index, plus what a
        /// real misc device directory also holds.
        fn full(tag: &str) -> Self {
            let f = Self::new(tag);
            for (i, (n, _)) in KNOWN.iter().enumerate() {
                f.set(n, &format!("{}\n", i * 10));
            }
            f.set("dev", "10:122\n");
            f.set(
                "uevent",
                "MAJOR=10\nMINOR=122\nDEVNAME=knem\nDEVMODE=0666\n",
            );
            fs::create_dir_all(f.0.join("power")).unwrap();
            f.set("power/runtime_status", "unsupported\n");
            f
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_known_counters_in_struct_order_and_skips_the_rest() {
        let f = FakeSysfs::full("order");
        let s = read_sample(&f.0).unwrap();
        let names: Vec<&str> = s.counters.iter().map(|c| c.0.as_str()).collect();
        let want: Vec<&str> = KNOWN.iter().map(|k| k.0).collect();
        assert_eq!(names, want);
        assert_eq!(s.get("regions"), Some(10));
        assert_eq!(s.get("err_other"), Some(160));
        assert_eq!(s.get("dev"), None);
        assert_eq!(s.get("uevent"), None);
    }

    #[test]
    fn unknown_counters_come_last_in_name_order() {
        let f = FakeSysfs::full("unknown");
        f.set("zeta_new", "5\n");
        f.set("alpha_new", "7\n");
        f.set("broken", "12 apples\n");
        f.set("negative", "-3\n");
        let s = read_sample(&f.0).unwrap();
        let tail: Vec<&str> = s.counters[KNOWN.len()..]
            .iter()
            .map(|c| c.0.as_str())
            .collect();
        assert_eq!(tail, ["alpha_new", "zeta_new"]);
    }

    #[test]
    fn parse_values() {
        assert_eq!(parse_value("0\n"), Some(0));
        assert_eq!(parse_value(" 18446744073709551615\n"), Some(u64::MAX));
        assert_eq!(parse_value("18446744073709551616"), None);
        assert_eq!(parse_value(""), None);
        assert_eq!(parse_value("10:122"), None);
        assert_eq!(parse_value("1\n2\n"), None);
    }

    #[test]
    fn missing_directory_says_module_not_loaded() {
        let dir = std::env::temp_dir().join("knem-stat-test-definitely-missing");
        let e = read_sample(&dir).unwrap_err();
        assert!(e.contains("not loaded"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn directory_without_counters_is_an_error() {
        let f = FakeSysfs::new("empty");
        f.set("uevent", "MAJOR=10\n");
        let e = read_sample(&f.0).unwrap_err();
        assert!(e.contains("no counters"), "{e}");
    }

    #[test]
    fn memlock_refusals_give_a_warning_with_the_fix() {
        let f = FakeSysfs::new("memlock");
        f.set("contexts", "0\n");
        f.set("pins_refused_memlock", "0\n");
        assert!(warnings(&read_sample(&f.0).unwrap()).is_empty());
        f.set("pins_refused_memlock", "17\n");
        let w = warnings(&read_sample(&f.0).unwrap());
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("warning: RLIMIT_MEMLOCK refused 17 pin(s)"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("/etc/security/limits.d/"), "{}", w[0]);
    }

    #[test]
    fn table_is_aligned() {
        let f = FakeSysfs::new("table");
        f.set("contexts", "3\n");
        f.set("bytes_async", "1234567\n");
        f.set("err_einval", "42\n");
        let s = read_sample(&f.0).unwrap();
        let t = format_table(&s, Path::new("/x"));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "knem counters (/x)");
        assert_eq!(lines[1], "contexts             3  live O_RDWR opens");
        assert_eq!(
            lines[2],
            "bytes_async  1,234,567  bytes copied by asynchronous requests (1.2 MiB)"
        );
        assert_eq!(
            lines[3],
            "err_einval          42  ioctls failed with EINVAL"
        );
        // The values end in the same column.
        let ends: Vec<usize> = lines[1..]
            .iter()
            .map(|l| l.find(|c: char| c.is_ascii_digit()).unwrap())
            .collect();
        assert!(ends.iter().all(|&e| e > 0));
    }

    #[test]
    fn json_is_valid_and_ordered() {
        let f = FakeSysfs::full("json");
        let s = read_sample(&f.0).unwrap();
        let j = format_json(&s, &f.0);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["counters"]["pinned_pages"], 20);
        assert_eq!(v["sysfs"], f.0.display().to_string());
        assert!(j.find("\"contexts\"").unwrap() < j.find("\"err_other\"").unwrap());
    }

    #[test]
    fn deltas_and_rates() {
        let a = Sample {
            counters: vec![("regions".into(), 10), ("bytes_async".into(), 1000)],
        };
        let b = Sample {
            counters: vec![
                ("regions".into(), 4),
                ("bytes_async".into(), 1000 + 4 * 1048576),
                ("new_one".into(), 9),
            ],
        };
        let d = deltas(&a, &b, 2.0);
        assert_eq!(d[0].delta, -6);
        assert_eq!(d[1].delta, 4 * 1048576);
        assert_eq!(d[1].rate, 2.0 * 1048576.0);
        assert_eq!(d[2].delta, 0, "a counter that appeared has no change yet");
        let t = format_watch(&d, 2.0);
        assert!(t.contains("regions"), "{t}");
        assert!(t.contains("-6"), "{t}");
        assert!(t.contains("+4,194,304  2.0 MiB/s"), "{t}");
        let j: serde_json::Value =
            serde_json::from_str(&format_watch_json(&d, 2.0, Path::new("/s"))).unwrap();
        assert_eq!(j["deltas"]["regions"], -6);
        assert_eq!(j["rates"]["bytes_async"], 2097152.0);
    }

    #[test]
    fn grouping_and_units() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(human_bytes(100.0), "");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(3.0 * 1073741824.0), "3.0 GiB");
    }

    #[test]
    fn cli_parses() {
        let c = Cli::try_parse_from([
            "knem-stat",
            "--json",
            "--watch",
            "0.5",
            "--count",
            "3",
            "--sysfs",
            "/tmp/x",
        ])
        .unwrap();
        assert!(c.json);
        assert_eq!(c.watch, Some(0.5));
        assert_eq!(c.count, Some(3));
        assert!(Cli::try_parse_from(["knem-stat", "--count", "3"]).is_err());
    }

    #[test]
    fn prometheus_exact_lines() {
        let s = Sample {
            counters: vec![
                ("regions".into(), 3),
                ("bytes_async".into(), 1234567),
                ("pins_refused_memlock".into(), 0),
            ],
        };
        assert_eq!(
            format_prometheus(&s),
            "# HELP knem_regions live regions (/sys/class/misc/knem/regions)\n\
             # TYPE knem_regions gauge\n\
             knem_regions 3\n\
             # HELP knem_bytes_async_total bytes copied by asynchronous requests \
             (/sys/class/misc/knem/bytes_async)\n\
             # TYPE knem_bytes_async_total counter\n\
             knem_bytes_async_total 1234567\n\
             # HELP knem_pins_refused_memlock_total pins refused by RLIMIT_MEMLOCK \
             (/sys/class/misc/knem/pins_refused_memlock)\n\
             # TYPE knem_pins_refused_memlock_total counter\n\
             knem_pins_refused_memlock_total 0\n\
             # HELP knem_pins_refused_memlock_warning 1 when RLIMIT_MEMLOCK has refused pins \
             since the module loaded, so those transfers did not use knem's single copy: \
             raise memlock for the users of MPI jobs (/etc/security/limits.d/knem-rs.conf) \
             or load knem with account_pinned=0\n\
             # TYPE knem_pins_refused_memlock_warning gauge\n\
             knem_pins_refused_memlock_warning 0\n"
        );
    }

    /// Every counter of a full sysfs once, typed by what it is, after its
    /// HELP and TYPE lines, with its value.
    #[test]
    fn prometheus_types_every_counter() {
        let f = FakeSysfs::full("prom");
        let text = format_prometheus(&read_sample(&f.0).unwrap());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3 * (KNOWN.len() + 1), "{text}");
        for (i, (name, what)) in KNOWN.iter().enumerate() {
            let gauge = ["contexts", "regions", "pinned_pages", "offload_threads"].contains(name);
            let metric = if gauge {
                format!("knem_{name}")
            } else {
                format!("knem_{name}_total")
            };
            let l = &lines[3 * i..3 * i + 3];
            assert_eq!(
                l[0],
                format!("# HELP {metric} {what} (/sys/class/misc/knem/{name})")
            );
            let kind = if gauge { "gauge" } else { "counter" };
            assert_eq!(l[1], format!("# TYPE {metric} {kind}"));
            assert_eq!(l[2], format!("{metric} {}", i * 10));
        }
        // pins_refused_memlock is not 0 in the full fake: the warning is on.
        assert_eq!(
            lines[lines.len() - 1],
            "knem_pins_refused_memlock_warning 1"
        );
    }

    #[test]
    fn prometheus_names_and_help_of_unknown_counters() {
        let s = Sample {
            counters: vec![("new-counter.x".into(), u64::MAX)],
        };
        let text = format_prometheus(&s);
        assert!(
            text.contains("\n# TYPE knem_new_counter_x_total counter\nknem_new_counter_x_total 18446744073709551615\n"),
            "{text}"
        );
        // No memlock counter, no warning gauge.
        assert!(!text.contains("warning"), "{text}");
        assert_eq!(prom_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn output_replaces_the_file_atomically() {
        let f = FakeSysfs::new("output");
        let out = f.0.join("knem-rs.prom");
        fs::write(&out, "old\n").unwrap();
        write_atomic(&out, "new\n").unwrap();
        assert_eq!(fs::read_to_string(&out).unwrap(), "new\n");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let names: Vec<String> = fs::read_dir(&f.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["knem-rs.prom"], "no temporary file is left");
        let e = write_atomic(&f.0.join("missing/knem-rs.prom"), "x").unwrap_err();
        assert!(e.starts_with("cannot write "), "{e}");
    }

    #[test]
    fn run_writes_prometheus_to_output() {
        let f = FakeSysfs::new("run-prom");
        f.set("regions", "2\n");
        f.set("pins_refused_memlock", "5\n");
        let out = std::env::temp_dir().join(format!("knem-stat-run-prom-{}", std::process::id()));
        let c = Cli::try_parse_from([
            "knem-stat".as_ref(),
            "--prometheus".as_ref(),
            "--output".as_ref(),
            out.as_os_str(),
            "--sysfs".as_ref(),
            f.0.as_os_str(),
        ])
        .unwrap();
        run(&c).unwrap();
        let text = fs::read_to_string(&out).unwrap();
        let _ = fs::remove_file(&out);
        assert!(text.contains("\nknem_regions 2\n"), "{text}");
        assert!(
            text.ends_with("\nknem_pins_refused_memlock_warning 1\n"),
            "{text}"
        );
        assert!(Cli::try_parse_from(["knem-stat", "--prometheus", "--json"]).is_err());
        assert!(Cli::try_parse_from(["knem-stat", "--prometheus", "--watch", "1"]).is_err());
        assert!(Cli::try_parse_from(["knem-stat", "--output", "x", "--watch", "1"]).is_err());
    }

    #[test]
    fn run_reports_missing_module() {
        let c = Cli::try_parse_from(["knem-stat", "--sysfs", "/nonexistent/knem"]).unwrap();
        let e = run(&c).unwrap_err();
        assert!(e.contains("not loaded"));
    }
}
