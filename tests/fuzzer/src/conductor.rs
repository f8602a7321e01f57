//! --dma: the test DMA provider (tests/dma-provider) is loaded, and one
//! extra process, the conductor, turns its knobs while the workers fuzz:
//! it parks descriptors and lets them run (`stall`), slows and fails them
//! (`delay_us`, `fail_every`, `lifo`), lowers knem's `dma_timeout_ms` so
//! waits give up, and SIGKILLs fuzzing processes that are inside an ioctl.
//! Together they drive the paths where a submission's wait is cut (by a
//! timeout or a fatal signal) and the batch is abandoned while the engine
//! still holds its pieces.

use crate::engine::{proc_text, say, DMA_MIN};
use crate::rng::Rng;
use crate::shared::{Ev, Shared};
use std::time::{Duration, Instant};

/// The provider's module name and parameters.
pub const PROVIDER: &str = "knem_dma_test";
const KNEM_PARAMS: &str = "/sys/module/knem/parameters";

fn provider_path(name: &str) -> String {
    format!("/sys/module/{PROVIDER}/parameters/{name}")
}

/// A provider parameter or counter.
pub fn provider_param(name: &str) -> Option<u64> {
    std::fs::read_to_string(provider_path(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn set_provider(name: &str, v: u64) -> bool {
    std::fs::write(provider_path(name), format!("{v}\n")).is_ok()
}

/// A knem module parameter.
pub fn knem_param(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("{KNEM_PARAMS}/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn set_knem(name: &str, v: u64) -> bool {
    std::fs::write(format!("{KNEM_PARAMS}/{name}"), format!("{v}\n")).is_ok()
}

/// What the DMA mode changed, to put back at the end.
pub struct DmaSetup {
    dma_min: Option<u64>,
    dma_timeout_ms: Option<u64>,
    /// The provider's `done` and `failed` counters at the start.
    pub done0: u64,
    pub failed0: u64,
}

/// Loads the provider from `ko` unless it is loaded, and lowers knem's
/// dma_min so a piece array fills from one buffer.
pub fn setup(ko: &str) -> Result<DmaSetup, String> {
    if !std::path::Path::new(&format!("/sys/module/{PROVIDER}")).exists() {
        let st = std::process::Command::new("insmod")
            .arg(ko)
            .status()
            .map_err(|e| format!("insmod {ko}: {e}"))?;
        if !st.success() {
            return Err(format!("insmod {ko} failed ({st})"));
        }
    }
    let setup = DmaSetup {
        dma_min: knem_param("dma_min"),
        dma_timeout_ms: knem_param("dma_timeout_ms"),
        done0: provider_param("done").ok_or("the provider has no done counter")?,
        failed0: provider_param("failed").unwrap_or(0),
    };
    if !set_knem("dma_min", DMA_MIN) {
        return Err("cannot set knem's dma_min".into());
    }
    Ok(setup)
}

/// The provider back to plain running (parked descriptors run), knem's
/// parameters back to what they were.
pub fn release(setup: &DmaSetup) {
    for (k, v) in [
        ("stall", 0),
        ("delay_us", 0),
        ("fail_every", 0),
        ("lifo", 0),
    ] {
        set_provider(k, v);
    }
    if let Some(v) = setup.dma_min {
        set_knem("dma_min", v);
    }
    if let Some(v) = setup.dma_timeout_ms {
        set_knem("dma_timeout_ms", v);
    }
}

/// Fuzzing processes other than `main_pid` and this one, and whether each
/// is inside an ioctl now (/proc/PID/syscall: 16 is ioctl on x86-64).
fn fuzzers(main_pid: i32, me: i32) -> Vec<(i32, bool)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == main_pid || pid == me || proc_text(pid, "comm").trim() != "knem-fuzz" {
            continue;
        }
        let in_ioctl = proc_text(pid, "syscall").split_whitespace().next() == Some("16");
        v.push((pid, in_ioctl));
    }
    v
}

/// The conductor's loop, until `deadline`; then the provider runs freely.
pub fn run(shared: &'static Shared, seed: u64, main_pid: i32, deadline: Instant, setup: &DmaSetup) {
    let mut rng = Rng::new(seed);
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    while Instant::now() < deadline {
        let pause = Duration::from_millis(rng.range(30, 700));
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        // Whether the abandoned-batch paths are being reached at all.
        if knem_param("dma_abandoned").is_some_and(|n| n > 0) {
            shared.event(Ev::AbandonedSeen);
        }
        match rng.weighted(&[30, 10, 8, 4, 10, 25]) {
            0 => {
                // Park: a few, exactly a full piece array, or everything.
                let n = match rng.below(4) {
                    0 => 0,
                    1 => rng.range(1, 64),
                    2 => 16384,
                    _ => 1_000_000,
                };
                set_provider("stall", n);
            }
            1 => {
                set_provider("delay_us", rng.pick(&[0, 0, 20, 200, 2000]));
            }
            2 => {
                set_provider("fail_every", rng.pick(&[0, 0, 0, 3, 17]));
            }
            3 => {
                set_provider("lifo", rng.below(2));
            }
            4 => {
                // Short timeouts make waits on parked pieces give up.
                let ms = rng.pick(&[200, 500, 1000, setup.dma_timeout_ms.unwrap_or(10_000)]);
                set_knem("dma_timeout_ms", ms);
            }
            _ => {
                let procs = fuzzers(main_pid, me);
                let busy: Vec<i32> = procs.iter().filter(|p| p.1).map(|p| p.0).collect();
                if busy.is_empty() {
                    continue;
                }
                let pid = rng.pick(&busy);
                shared.note_kill(pid);
                // SAFETY: a fuzzing process (comm checked just now).
                unsafe { libc::kill(pid, libc::SIGKILL) };
                shared.event(Ev::KillInIoctl);
                continue;
            }
        }
        shared.event(Ev::DmaToggle);
    }
    release(setup);
    say(&format!(
        "knem-fuzz: conductor done: provider ran {} descriptors, failed {}",
        provider_param("done")
            .unwrap_or(0)
            .wrapping_sub(setup.done0),
        provider_param("failed")
            .unwrap_or(0)
            .wrapping_sub(setup.failed0)
    ));
}
