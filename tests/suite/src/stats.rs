//! The driver's counters (sysfs) and the kernel's pin accounting
//! (/proc/vmstat), for checks that everything returns to its baseline.

use crate::util::TestResult;
use std::time::{Duration, Instant};

/// Where the shim publishes `struct knem_core_stats`, one file per field.
pub const SYSFS_DIR: &str = "/sys/class/misc/knem";

/// One counter of `struct knem_core_stats` by field name.
pub fn counter(name: &str) -> TestResult<u64> {
    let path = format!("{SYSFS_DIR}/{name}");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{path}: not an integer: {:?}", text.trim()))
}

/// Whether the sysfs counters exist at all.
pub fn counters_available() -> bool {
    counter("contexts").is_ok()
}

/// Fold the per-cpu vmstat deltas so /proc/vmstat is exact (root only;
/// silently skipped elsewhere).
fn refresh_vmstat() {
    let _ = std::fs::write("/proc/sys/vm/stat_refresh", "1");
}

/// A field of /proc/vmstat.
pub fn vmstat(name: &str) -> TestResult<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").map_err(|e| format!("/proc/vmstat: {e}"))?;
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == name).then(|| v.trim().parse().ok()).flatten()
        })
        .ok_or_else(|| format!("/proc/vmstat has no {name}"))
}

/// A field of /proc/meminfo, in KiB.
pub fn meminfo_kib(name: &str) -> TestResult<u64> {
    let text =
        std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("/proc/meminfo: {e}"))?;
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .ok_or_else(|| format!("/proc/meminfo has no {name}"))
}

/// Pages pinned with FOLL_PIN right now, system-wide (acquired - released).
pub fn foll_pins_outstanding() -> TestResult<i64> {
    refresh_vmstat();
    let acq = vmstat("nr_foll_pin_acquired")?;
    let rel = vmstat("nr_foll_pin_released")?;
    Ok(acq as i64 - rel as i64)
}

/// The counters that must come back after any test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// `contexts`.
    pub contexts: u64,
    /// `regions`.
    pub regions: u64,
    /// `pinned_pages`.
    pub pinned_pages: u64,
    /// `nr_foll_pin_acquired - nr_foll_pin_released`.
    pub foll_pins: i64,
}

impl Snapshot {
    /// Read everything now.
    pub fn take() -> TestResult<Self> {
        Ok(Self {
            contexts: counter("contexts")?,
            regions: counter("regions")?,
            pinned_pages: counter("pinned_pages")?,
            foll_pins: foll_pins_outstanding()?,
        })
    }

    /// What differs from `base`, as text; empty when equal.
    pub fn diff(&self, base: &Snapshot) -> String {
        let mut d = Vec::new();
        if self.contexts != base.contexts {
            d.push(format!("contexts {} -> {}", base.contexts, self.contexts));
        }
        if self.regions != base.regions {
            d.push(format!("regions {} -> {}", base.regions, self.regions));
        }
        if self.pinned_pages != base.pinned_pages {
            d.push(format!(
                "pinned_pages {} -> {}",
                base.pinned_pages, self.pinned_pages
            ));
        }
        if self.foll_pins != base.foll_pins {
            d.push(format!(
                "foll_pin acquired-released {} -> {}",
                base.foll_pins, self.foll_pins
            ));
        }
        d.join(", ")
    }
}

/// Wait (a little: frees may follow an RCU grace period) until every
/// counter equals `want` (a baseline, or a baseline plus live objects); the
/// exact differences if they do not.
pub fn wait_for(want: &Snapshot, what: &str) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let now = Snapshot::take()?;
        let d = now.diff(want);
        if d.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: {d}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Several counters by name, for delta checks.
pub fn counters(names: &[&str]) -> TestResult<Vec<u64>> {
    names.iter().map(|n| counter(n)).collect()
}

/// Wait (as [`wait_for`]) until one counter equals `want`.
pub fn wait_counter(name: &str, want: u64) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let now = counter(name)?;
        if now == want {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{name} is {now}, expected {want}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
