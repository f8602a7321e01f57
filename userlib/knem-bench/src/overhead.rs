//! The fixed costs every mechanism's time contains, measured where the run
//! happens: one system call, one hand-off between two processes (what each
//! pingpong message pays besides its copy) and memcpy's bandwidth. Printed
//! above the tables under User-Mode Linux, where a system call costs tens
//! of times what it costs on the host, beside the host's own numbers
//! (`KNEM_LAB_HOST_*`, measured by `knem-bench overhead` on the host before
//! the boot), so a reader knows from which size on the ratios hold.

use crate::error::Result;
use crate::mem::{self, Mapping};
use crate::proc::{self, Child, Peers};
use crate::sizes::fmt_size;
use crate::stats::{median, mib_per_s};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

/// What the fixed costs are, here and (when the lab passed them) on the
/// host that runs the lab.
#[derive(Debug, Clone, Serialize)]
pub struct Overheads {
    /// One `getppid` system call, µs.
    pub syscall_us: f64,
    /// One hand-off between two processes spinning on shared memory
    /// (half a round trip), µs.
    pub handoff_us: f64,
    /// memcpy of 1 MiB, cache-hot, MiB/s.
    pub memcpy_mib_s: f64,
    /// The host's system call, µs (`KNEM_LAB_HOST_SYSCALL_US`).
    pub host_syscall_us: Option<f64>,
    /// The host's hand-off, µs (`KNEM_LAB_HOST_HANDOFF_US`).
    pub host_handoff_us: Option<f64>,
}

/// A hand-off above this means the processes wait for timer ticks (a CPU
/// shared by both, no spinning peer): two-process times measure the tick.
const TICK_BOUND_US: f64 = 1000.0;

fn env_f64(name: &str) -> Option<f64> {
    std::env::var(name)
        .ok()?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
}

impl Overheads {
    /// Measure here (about a second), and read the host's from the
    /// environment.
    pub fn measure() -> Result<Overheads> {
        Ok(Overheads {
            syscall_us: syscall_us(),
            handoff_us: handoff_us()?,
            memcpy_mib_s: memcpy_mib_s()?,
            host_syscall_us: env_f64("KNEM_LAB_HOST_SYSCALL_US"),
            host_handoff_us: env_f64("KNEM_LAB_HOST_HANDOFF_US"),
        })
    }

    /// The smallest power-of-two size whose copy at memcpy's bandwidth
    /// takes ten system calls' time: below it a kernel copy's time is
    /// mostly the call's.
    pub fn ratios_from(&self) -> u64 {
        let bytes = 10.0 * self.syscall_us * 1e-6 * self.memcpy_mib_s * 1024.0 * 1024.0;
        if !bytes.is_finite() || bytes < 4096.0 {
            return 4096;
        }
        (bytes.ceil() as u64).next_power_of_two()
    }

    /// Whether two processes hand off on timer ticks.
    pub fn tick_bound(&self) -> bool {
        self.handoff_us > TICK_BOUND_US
    }

    /// One line for the tables' headers.
    pub fn line(&self, what: &str) -> String {
        let host = |v: Option<f64>| v.map_or(String::new(), |h| format!(" (host {h:.2} us)"));
        let mut s = format!(
            "{what} overheads: syscall {:.2} us{}, process handoff {:.2} us{}, memcpy 1M hot {:.0} MiB/s; \
             kernel-copy ratios hold from about {} (a copy at memcpy speed takes 10 syscalls there)",
            self.syscall_us,
            host(self.host_syscall_us),
            self.handoff_us,
            host(self.host_handoff_us),
            self.memcpy_mib_s,
            fmt_size(self.ratios_from()),
        );
        if self.tick_bound() {
            s += "; handoffs wait for timer ticks: two-process latencies measure the tick, \
                  use `knem-bench solo`";
        }
        s
    }

    /// `KNEM_LAB_HOST_*=` lines for the lab to pass into the guest.
    pub fn env(&self) -> String {
        format!(
            "KNEM_LAB_HOST_SYSCALL_US={:.3}\nKNEM_LAB_HOST_HANDOFF_US={:.3}\n",
            self.syscall_us, self.handoff_us
        )
    }
}

/// Median over 5 runs of 20,000 `getppid` calls (a system call libc does
/// not cache), µs per call.
fn syscall_us() -> f64 {
    const N: u32 = 20_000;
    let runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..N {
                // SAFETY: getppid takes no arguments and cannot fail.
                std::hint::black_box(unsafe { libc::syscall(libc::SYS_getppid) });
            }
            t.elapsed().as_nanos() as f64 / f64::from(N) / 1000.0
        })
        .collect();
    median(&runs).unwrap_or(f64::NAN)
}

/// Round trips of a counter between this process and a forked peer, each
/// side waiting as the benchmarks do (spin, then yield): µs per one-way
/// hand-off, median of 3 runs of about 0.2 s each (at least 10 round
/// trips, so a tick-bound machine takes about 0.6 s a run).
fn handoff_us() -> Result<f64> {
    let sh = Mapping::shared(mem::PAGE)?;
    // SAFETY: the shared mapping is a zeroed page, aligned for AtomicU64,
    // and only ever accessed through atomics by both processes.
    let ctr = unsafe { &*(sh.ptr() as *const AtomicU64) };
    let child = proc::spawn(|| {
        let parent = Peers::parent();
        let mut v = 1;
        loop {
            parent.wait_until(|| ctr.load(Acquire) >= v)?;
            let got = ctr.load(Acquire);
            if got == u64::MAX {
                return Ok(());
            }
            ctr.store(got + 1, Release);
            v = got + 2;
        }
    })?;
    let children: Vec<Child> = vec![child];
    let peers = Peers::Children(&children);
    let mut next = 1;
    let mut round = |n: u64| -> Result<f64> {
        let t = Instant::now();
        for _ in 0..n {
            ctr.store(next, Release);
            peers.wait_until(|| ctr.load(Acquire) == next + 1)?;
            next += 2;
        }
        Ok(t.elapsed().as_nanos() as f64 / (2 * n) as f64 / 1000.0)
    };
    let probe = round(10)?;
    let n =
        (Duration::from_millis(200).as_secs_f64() / (2.0 * probe * 1e-6)).clamp(10.0, 100_000.0);
    let runs = (0..3)
        .map(|_| round(n as u64))
        .collect::<Result<Vec<f64>>>()?;
    ctr.store(u64::MAX, Release);
    for c in children {
        c.wait()?;
    }
    Ok(median(&runs).unwrap_or(f64::NAN))
}

/// memcpy of 1 MiB between two buffers of one pool, cache-hot: median of
/// 5 runs of 64 copies, MiB/s.
fn memcpy_mib_s() -> Result<f64> {
    const LEN: usize = 1 << 20;
    let mut pool = Mapping::private(2 * LEN)?;
    pool.fill(3);
    let (s, d) = (pool.ptr(), pool.ptr().wrapping_add(LEN));
    let runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..64 {
                // SAFETY: both halves of the pool, 1 MiB each, disjoint.
                unsafe { mem::copy(d, s, LEN) };
            }
            t.elapsed().as_nanos() as f64 / 64.0
        })
        .collect();
    Ok(mib_per_s(LEN as u64, median(&runs).unwrap_or(f64::NAN)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(syscall_us: f64, handoff_us: f64, memcpy_mib_s: f64) -> Overheads {
        Overheads {
            syscall_us,
            handoff_us,
            memcpy_mib_s,
            host_syscall_us: Some(0.3),
            host_handoff_us: None,
        }
    }

    #[test]
    fn ratios_hold_where_a_copy_outweighs_ten_syscalls() {
        // 20 us syscalls at 10 GiB/s: 10 x 20 us moves 2.05 MiB -> 4M
        assert_eq!(o(20.0, 1.0, 10240.0).ratios_from(), 4 << 20);
        // 10 us: 1.02 MiB -> 2M
        assert_eq!(o(10.0, 1.0, 10240.0).ratios_from(), 2 << 20);
        // 0.3 us on the host: 10 x 0.3 us moves 30 KiB -> 32K
        assert_eq!(o(0.3, 0.2, 10240.0).ratios_from(), 32 << 10);
        assert_eq!(o(0.001, 0.2, 10240.0).ratios_from(), 4096);
        assert_eq!(o(f64::NAN, 0.2, 10240.0).ratios_from(), 4096);
    }

    #[test]
    fn the_line_names_both_machines_and_the_tick() {
        let l = o(20.0, 10_000.0, 10240.0).line("UML");
        assert!(
            l.starts_with(
                "UML overheads: syscall 20.00 us (host 0.30 us), process handoff 10000.00 us,"
            ),
            "{l}"
        );
        assert!(l.contains("ratios hold from about 4M"), "{l}");
        assert!(l.contains("wait for timer ticks"), "{l}");
        assert!(!o(20.0, 2.0, 10240.0).line("UML").contains("ticks"));
    }

    #[test]
    fn measured_here_the_costs_are_positive() {
        let m = Overheads::measure().unwrap();
        assert!(m.syscall_us > 0.0 && m.syscall_us < 1000.0, "{m:?}");
        assert!(m.handoff_us > 0.0, "{m:?}");
        assert!(m.memcpy_mib_s > 1.0, "{m:?}");
        let env = m.env();
        assert!(env.starts_with("KNEM_LAB_HOST_SYSCALL_US="), "{env}");
    }
}
