//! What machine the numbers come from.

use crate::overhead::Overheads;
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
    /// guest of the VM lab), `uml` (User-Mode Linux: the kernel runs as a
    /// host process, on real cores) or `native` (anything else: a host, or
    /// a guest whose CPU is not emulated).
    pub accel: String,
    /// System call, process hand-off and memcpy costs, measured before the
    /// tables under User-Mode Linux (see [`crate::overhead`]).
    pub overheads: Option<Overheads>,
}

/// Kernel copies above this size are dominated by TCG's emulation of
/// `rep movsb` (about 30 MiB/s) and say nothing about hardware.
pub const TCG_KERNEL_COPY_LIMIT: u64 = 64 << 10;

/// How the CPU runs: what the lab says (`KNEM_LAB_ACCEL`, set by
/// tests/vm/run and tests/uml/run), else User-Mode Linux's or QEMU's CPU
/// as /proc/cpuinfo names it, else native.
fn accel_of(cpuinfo: &str, cpu: &str) -> String {
    let uml = cpuinfo
        .lines()
        .any(|l| l.starts_with("vendor_id") && l.ends_with(": User Mode Linux"));
    match std::env::var("KNEM_LAB_ACCEL").as_deref() {
        Ok("tcg") => "tcg".into(),
        Ok("kvm") => "kvm".into(),
        Ok("uml") => "uml".into(),
        _ if uml => "uml".into(),
        _ if cpu.contains("TCG") => "tcg".into(),
        _ => "native".into(),
    }
}

impl Machine {
    /// Probe the running machine. Never fails: unknown fields say so.
    pub fn probe() -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = knem_coll::units::cpu_model_in(&cpuinfo).unwrap_or_else(|| "unknown CPU".into());
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
        let accel = accel_of(&cpuinfo, &cpu);
        // UML's /proc/cpuinfo names no CPU and sysfs has no caches: the
        // lab passes the host's (tests/uml/run).
        let host = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let (cpu, llc) = if accel == "uml" {
            let host_cpu = host("KNEM_LAB_HOST_CPU").unwrap_or_else(|| "an unknown CPU".into());
            let host_llc =
                host("KNEM_LAB_HOST_LLC").and_then(|v| crate::sizes::parse_size(&v).ok());
            (format!("UML on {host_cpu}"), llc_bytes().or(host_llc))
        } else {
            (cpu, llc_bytes())
        };
        Machine {
            accel,
            cpu,
            cores,
            kernel,
            vm,
            llc_bytes: llc,
            overheads: None,
            load: fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|l| l.split_whitespace().next()?.parse().ok()),
        }
    }

    /// True when the CPU is emulated (TCG): times are not hardware times.
    pub fn emulated(&self) -> bool {
        self.accel == "tcg"
    }

    /// True under User-Mode Linux.
    pub fn uml(&self) -> bool {
        self.accel == "uml"
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
            "uml" => "numbers: User-Mode Linux on real cores (system calls and page faults cost far more than on the host: see the overheads line)",
            _ => "numbers: hardware CPU",
        }
    }

    /// The overheads line printed under every table header, when they
    /// were measured.
    pub fn overheads_line(&self) -> Option<String> {
        let what = if self.uml() { "UML" } else { "measured" };
        self.overheads.as_ref().map(|o| o.line(what))
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
            overheads: None,
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
        assert!(machine("uml")
            .header()
            .contains("numbers: User-Mode Linux on real cores"));
    }

    #[test]
    fn uml_is_recognised_by_its_cpuinfo() {
        let uml = "processor\t: 0\nvendor_id\t: User Mode Linux\nmodel name\t: UML\n";
        let host = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)\n";
        // (KNEM_LAB_ACCEL is not set in cargo test runs)
        if std::env::var_os("KNEM_LAB_ACCEL").is_none() {
            assert_eq!(accel_of(uml, "UML"), "uml");
            assert_eq!(accel_of(host, "Intel(R) Xeon(R)"), "native");
            assert_eq!(accel_of(host, "QEMU TCG CPU version 2.5+"), "tcg");
        }
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
