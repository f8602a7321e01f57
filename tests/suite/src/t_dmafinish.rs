//! Issue 21, item 1: the end of an ASYNCDMACOMPLETE submission whose batch
//! was abandoned while its piece array was full (a wait that a fatal signal
//! cut), racing the engine that completes the abandoned pieces and the
//! reaper that frees the batch.  Needs the test DMA provider.
//!
//! In a fault-injection build (`KNEM_FAULT_INJECT=1`) the module has
//! `fault_dma_finish_delay_ms`, a sleep in knem_shim_dma_finish_async right
//! after it drops the file's DMA lock; the test sets it so the batch is
//! reaped and freed while the killed submitter is still inside that
//! function.  A module that reads the batch after that point (the bug)
//! reads freed memory, which KASAN reports (tests/debug-kernel).

use crate::ensure;
use crate::t_dma::{
    ensure_provider, knem_param, provider_param, seed_page, set_provider_param, wait_until,
    DmaTimeout, Knobs, KNEM_PARAMS,
};
use crate::util::*;
use knem::{CopyFlags, Device, Iovec, Protection, RegionFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::WaitStatus;
use std::time::{Duration, Instant};

/// Pieces one ASYNCDMACOMPLETE batch maps before it waits for them
/// (KNEM_DMA_MAX_PIECES in c-shim/knem_dma.c).
const FULL_ARRAY: usize = 16384;
/// The fault-injection delay asked for: longer than the engine takes to
/// run 16384 parked one-page descriptors under TCG with KASAN.
const DELAY_MS: u64 = 30_000;
/// Overrides DELAY_MS: a stock kernel reaps the batch in about 2 s under
/// TCG, so tests/vm/fault-tests.sh asks for less (a delay too short fails
/// the test: "the window was missed").
const DELAY_ENV: &str = "KNEM_SUITE_DMA_FINISH_DELAY_MS";

/// Sets knem's fault_dma_finish_delay_ms while it lives (0 after); None
/// when the module is not a fault-injection build.
struct FinishDelay(Option<u64>);

impl FinishDelay {
    fn set(ms: u64) -> TestResult<FinishDelay> {
        if knem_param("fault_dma_finish_delay_ms").is_none() {
            return Ok(FinishDelay(None));
        }
        std::fs::write(
            format!("{KNEM_PARAMS}/fault_dma_finish_delay_ms"),
            format!("{ms}\n"),
        )
        .ctx("fault_dma_finish_delay_ms")?;
        Ok(FinishDelay(Some(ms)))
    }
}

impl Drop for FinishDelay {
    fn drop(&mut self) {
        if self.0.is_some() {
            let _ = std::fs::write(format!("{KNEM_PARAMS}/fault_dma_finish_delay_ms"), "0\n");
        }
    }
}

/// A submitter of 16385 one-page pieces (one past a full array) is
/// SIGKILLed while the provider parks the first 16384: its wait gives way,
/// the batch is abandoned, and the submission ends with a dead batch
/// (knem_shim_dma_finish_async reports it FAILED).  The provider then runs
/// the parked pieces, the reaper frees the batch, and every count goes
/// back: the abandoned batch (dma_abandoned), the parked descriptors, and
/// (the harness) contexts, regions and pins.  With the fault-injection
/// delay, the batch must be freed while the submitter is still in the
/// delay, which is the window of the bug.
pub fn dma_finish_async_abandoned_batch() -> TestResult {
    ensure_provider()?;
    let _k = Knobs;
    // Only the SIGKILL may end the wait, however slow the VM.
    let _t = DmaTimeout::set(120_000);
    let delay_ms = match std::env::var(DELAY_ENV) {
        Ok(v) => v
            .parse()
            .map_err(|_| format!("{DELAY_ENV}={v}: not a number"))?,
        Err(_) => DELAY_MS,
    };
    let delay = FinishDelay::set(delay_ms)?;
    ensure!(
        knem_param("dma_abandoned") == Some(0),
        "dma_abandoned is {:?} before the test",
        knem_param("dma_abandoned")
    );
    let stalled0 = provider_param("stalled")?;
    ensure!(
        stalled0 == 0,
        "{stalled0} descriptors parked before the test"
    );
    set_provider_param("stall", 1_000_000)?;
    let mut peer = spawn_peer(|chan| {
        let dev = Device::open().ctx("open")?;
        let _array = dev.map_status_array(8).ctx("mmap")?;
        let src = seed_page()?;
        let iovs: Vec<Iovec> = (0..=FULL_ARRAY)
            .map(|_| Iovec::from_raw(src.addr(0), PAGE as u64))
            .collect();
        // SAFETY: src lives until the process ends, and is only read.
        let k = unsafe { dev.create_region_raw(&iovs, Protection::READ, RegionFlags::NONE) }
            .ctx("region of one page 16385 times")?;
        let locals = Mem::new(FULL_ARRAY + 1)?;
        let iov = [Iovec::from_raw(
            locals.addr(0),
            ((FULL_ARRAY + 1) * PAGE) as u64,
        )];
        chan.send(1)?;
        let flags = CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE;
        // SAFETY: our scratch mapping; the process is killed in this call.
        let r = unsafe { dev.read_into_async(k, 0, &iov, None, 0, flags) };
        Err(format!(
            "the submission of 16385 pieces returned ({r:?}) while the engine held 16384; expected it to wait for them"
        ))
    })?;
    ensure!(peer.recv()? == 1, "peer protocol");
    let pid = peer.pid();
    let mut killed_at = None;
    let mut run = || -> TestResult<Option<WaitStatus>> {
        let parked = FULL_ARRAY as u64;
        ensure!(
            wait_until(120, || Ok(provider_param("stalled")? >= parked))?,
            "the engine parked {} of {parked} pieces in 120 s",
            provider_param("stalled")?
        );
        // The 16385th piece waits for room: the submitter is in the wait.
        std::thread::sleep(Duration::from_millis(300));
        ensure!(
            provider_param("stalled")? == parked,
            "{} pieces parked, expected the submission to stop at {parked}",
            provider_param("stalled")?
        );
        kill(pid, Signal::SIGKILL).ctx("kill")?;
        killed_at = Some(Instant::now());
        ensure!(
            wait_until(30, || Ok(knem_param("dma_abandoned") == Some(1)))?,
            "the killed submitter's batch was not abandoned: dma_abandoned {:?}",
            knem_param("dma_abandoned")
        );
        // Give the submitter time to report the dead batch and drop the
        // lock (into the delay, in a fault-injection build).
        std::thread::sleep(Duration::from_millis(200));
        set_provider_param("stall", 0)?;
        let released = Instant::now();
        ensure!(
            wait_until(60, || Ok(
                provider_param("stalled")? == 0 && knem_param("dma_abandoned") == Some(0)
            ))?,
            "60 s after the stall: {} parked, dma_abandoned {:?}",
            provider_param("stalled")?,
            knem_param("dma_abandoned")
        );
        let reaped_in = released.elapsed();
        let gone = peer.poll_exit()?;
        eprintln!(
            "dma_finish_async_abandoned_batch: batch reaped {reaped_in:?} after the stall, submitter {}",
            if gone.is_none() { "still in the submission" } else { "gone" }
        );
        Ok(gone)
    };
    let r = run();
    let _ = set_provider_param("stall", 0);
    let gone_at_reap = r?;
    let alive_at_reap = gone_at_reap.is_none();
    let st = match gone_at_reap {
        Some(st) => st,
        None => peer.exit_status()?,
    };
    if let Some(t) = killed_at {
        eprintln!(
            "dma_finish_async_abandoned_batch: submitter reaped {:?} after the SIGKILL (fault_dma_finish_delay_ms {:?})",
            t.elapsed(),
            delay.0
        );
    }
    ensure!(
        matches!(st, WaitStatus::Signaled(_, Signal::SIGKILL, _)),
        "the submitter ended {st:?}, expected SIGKILL"
    );
    if let Some(ms) = delay.0 {
        ensure!(
            alive_at_reap,
            "with fault_dma_finish_delay_ms={ms} the batch was reaped only after the submitter left knem_shim_dma_finish_async: the window was missed"
        );
    }
    Ok(())
}
