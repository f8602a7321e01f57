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
    /// How the CPU runs: `tcg` (emulated by QEMU), `kvm` (a hardware
    /// guest of the VM lab) or `native` (anything else: a host, or a guest
    /// whose CPU is not emulated).
    pub accel: String,
}

/// Kernel copies above this size are dominated by TCG's emulation of
/// `rep movsb` (about 30 MiB/s) and say nothing about hardware.
pub const TCG_KERNEL_COPY_LIMIT: u64 = 64 << 10;

/// How the CPU runs: what the VM lab says (`KNEM_LAB_ACCEL`, set by
/// tests/vm/run), else QEMU's emulated CPU model, else native.
fn accel_of(cpu: &str) -> String {
    match std::env::var("KNEM_LAB_ACCEL").as_deref() {
        Ok("tcg") => "tcg".into(),
        Ok("kvm") => "kvm".into(),
        _ if cpu.contains("TCG") => "tcg".into(),
        _ => "native".into(),
    }
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
        let accel = accel_of(&cpu);
        Machine {
            accel,
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

    /// True when the CPU is emulated (TCG): times are not hardware times.
    pub fn emulated(&self) -> bool {
        self.accel == "tcg"
    }

    /// The header lines printed above tables.
    pub fn header(&self) -> String {
        format!(
            "machine: {} | {} cores | kernel {} | VM: {} | LLC: {} | load {} | {}",
            self.cpu,
            self.cores,
            self.kernel,
            self.vm.as_deref().unwrap_or("no"),
            self.llc_bytes.map_or("unknown".into(), fmt_size),
            self.load.map_or("unknown".into(), |l| format!("{l:.2}")),
            self.numbers()
        )
    }

    /// What the numbers are, said above every table.
    pub fn numbers(&self) -> &'static str {
        match self.accel.as_str() {
            "tcg" => "numbers: EMULATED CPU (QEMU TCG), not hardware times",
            "kvm" => "numbers: hardware CPU (KVM guest)",
            _ => "numbers: hardware CPU",
        }
    }

    /// Under TCG, the warning owed by a table whose records give ratios
    /// for kernel copies above [`TCG_KERNEL_COPY_LIMIT`].
    pub fn ratio_warning(&self, recs: &[crate::report::Record]) -> Option<String> {
        let kernel = |m: &str| m.starts_with("knem") || m.starts_with("cma");
        let big = recs.iter().any(|r| {
            r.size > TCG_KERNEL_COPY_LIMIT
                && kernel(&r.mechanism)
                && (r.vs_memcpy.is_some() || r.vs_cma.is_some() || r.vs_base.is_some())
        });
        // Lower case: the VM lab fails a run whose console shows "WARNING:",
        // which is how the kernel reports its own warnings.
        (self.emulated() && big).then(|| {
            format!(
                "warning: emulated CPU (TCG): ratios of kernel copies above {} measure \
                 QEMU's emulation of the kernel's copy loop (about 30 MiB/s), not the \
                 mechanisms; do not quote them",
                fmt_size(TCG_KERNEL_COPY_LIMIT)
            )
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Record;

    fn machine(accel: &str) -> Machine {
        Machine {
            cpu: "QEMU TCG CPU version 2.5+".into(),
            cores: 2,
            kernel: "6.1.0".into(),
            vm: None,
            llc_bytes: None,
            load: None,
            accel: accel.into(),
        }
    }

    fn rec(mechanism: &str, size: u64, vs_cma: Option<f64>) -> Record {
        Record {
            bench: "pingpong".into(),
            mechanism: mechanism.into(),
            cache: "hot".into(),
            size,
            param: 0,
            reps: 1,
            iters: 1,
            median_us: 1.0,
            min_us: 1.0,
            max_us: 1.0,
            mib_s: 1.0,
            aggregate_mib_s: None,
            vs_memcpy: None,
            vs_cma,
            vs_base: None,
        }
    }

    #[test]
    fn header_says_whether_numbers_are_emulated() {
        assert!(machine("tcg").header().contains("EMULATED CPU (QEMU TCG)"));
        assert!(machine("kvm")
            .header()
            .ends_with("numbers: hardware CPU (KVM guest)"));
        assert!(machine("native")
            .header()
            .ends_with("numbers: hardware CPU"));
    }

    #[test]
    fn tcg_ratios_of_big_kernel_copies_carry_a_warning() {
        let big = [rec("knem-read", 128 << 10, Some(0.9))];
        let w = machine("tcg").ratio_warning(&big).unwrap();
        assert!(w.starts_with("warning: emulated CPU (TCG)"), "{w}");
        assert!(w.contains("above 64K"), "{w}");
        assert_eq!(machine("kvm").ratio_warning(&big), None);
        let at_limit = [rec("knem-read", 64 << 10, Some(0.9))];
        assert_eq!(machine("tcg").ratio_warning(&at_limit), None);
        let user = [rec("memcpy", 1 << 20, Some(1.0))];
        assert_eq!(machine("tcg").ratio_warning(&user), None);
        let no_ratio = [rec("cma-read", 1 << 20, None)];
        assert_eq!(machine("tcg").ratio_warning(&no_ratio), None);
    }
}
