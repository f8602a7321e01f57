//! What machine the numbers come from.

use crate::sizes::fmt_size;
use serde::Serialize;
use std::fs;

/// The machine a run happened on, printed above every table.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model name from /proc/cpuinfo.
    pub cpu: String,
    /// CPUs this process may run on.
    pub cores: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Why we believe this is a virtual machine, if we do.
    pub vm: Option<String>,
    /// Size of the largest (last-level) cache, bytes.
    pub llc_bytes: Option<u64>,
    /// 1-minute load average when the run started (other tenants' load).
    pub load: Option<f64>,
}

impl Machine {
    /// Probe the running machine. Never fails: unknown fields say so.
    pub fn probe() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let hyper = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .is_some_and(|l| l.split_whitespace().any(|f| f == "hypervisor"));
        let vendor = fs::read_to_string("/sys/class/dmi/id/sys_vendor")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let vm = match (hyper, vendor) {
            (true, Some(v)) => Some(format!("yes (hypervisor flag, vendor {v})")),
            (true, None) => Some("yes (hypervisor flag)".into()),
            (false, Some(v)) if v.contains("QEMU") => Some(format!("yes (vendor {v})")),
            _ => None,
        };
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Machine {
            cpu,
            cores,
            kernel,
            vm,
            llc_bytes: llc_bytes(),
            load: fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next()?.parse().ok()),
        }
    }

    /// The header lines printed above tables.
    pub fn header(&self) -> String {
        format!(
            "machine: {} | {} cores | kernel {} | VM: {} | LLC: {} | load {}",
            self.cpu,
            self.cores,
            self.kernel,
            self.vm.as_deref().unwrap_or("no"),
            self.llc_bytes.map_or("unknown".into(), fmt_size),
            self.load.map_or("unknown".into(), |l| format!("{l:.2}"))
        )
    }
}

/// Largest cache of cpu0 as sysfs reports it.
fn llc_bytes() -> Option<u64> {
    let dir = fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let size = fs::read_to_string(e.path().join("size")).ok()?;
            crate::sizes::parse_size(size.trim()).ok()
        })
        .max()
}
