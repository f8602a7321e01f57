//! DMA engine offload: which copies go to the engine, and running them.
//!
//! A copy asks for the engine with `KNEM_FLAG_DMA`; it gets it only when
//! the shim has a usable channel now ([`Env::dma_usable`]), otherwise the
//! flag is ignored (and GET_INFO says so).  A DMA copy runs page-piece by
//! page-piece like a CPU copy between two pinned regions (the caller's own
//! side of an inline copy is pinned first), each piece of at least
//! [`Env::dma_min`] bytes becoming one descriptor, shorter ones copied by
//! the CPU.  Synchronous requests wait in the ioctl; DMATHREAD requests
//! submit and wait on the fd's offload thread, which keeps their
//! completions in submission order.  ASYNCDMACOMPLETE requests without a
//! thread flag are submitted in the ioctl and completed by the engine: the
//! shim writes the slot from the completion callback, in submission order
//! among the fd's ASYNCDMACOMPLETE requests, and hands the request back to
//! [`Device::dma_release`] in process context.

use crate::edge::errno::{KResult, EIO};
use crate::edge::kalloc::KBox;
use crate::edge::shim::{DmaBatch, Env};
use crate::exec::copy::{self, Outcome};
use crate::exec::request::{status_of, AsyncReq, Job};
use crate::plan::planner::PairPlan;
use crate::state::context::Context;
use crate::state::device::Device;
use crate::state::region::Region;
use crate::state::stats;
use core::ffi::c_void;
use core::sync::atomic::Ordering::Release;
use knem_abi::*;

/// True when a copy with these flags goes to the DMA engine.
pub fn wanted<E: Env>(env: &E, flags: u32) -> bool {
    flags & KNEM_FLAG_DMA != 0 && env.dma_usable()
}

/// Copies from `src` at `src_off` to `dst` at `dst_off` through the DMA
/// engine, waiting for it; the CPU copies pieces under the engine's
/// minimum, pieces the engine refuses, and everything when the engine went
/// away.  A piece the engine fails makes the outcome FAILED.
///
/// Copies the engine must not take go to the CPU ([`engine_may_take`]).
pub fn region_to_region<E: Env>(
    env: &E,
    src: &Region,
    src_off: u64,
    dst: &Region,
    dst_off: u64,
    bound: Option<u64>,
) -> Outcome {
    let batch = if engine_may_take(src, dst) {
        env.dma_begin(None)
    } else {
        None
    };
    let Some(batch) = batch else {
        return copy::region_to_region(env, src, src_off, dst, dst_off, bound);
    };
    let mut out = queue(env, batch, src, src_off, dst, dst_off, bound);
    if env.dma_end(batch).is_err() {
        out.ok = false;
    }
    out
}

/// Whether a copy from `src` to `dst` may go to the engine.  Pieces in
/// flight together run in an order of the engine's, so no two may write
/// the same bytes: a region copied onto itself, or a destination whose
/// segments overlap (or are out of address order, conservatively), is
/// copied by the CPU, in sequence (memmove's order for the former, the
/// later segment's bytes last for the latter).
fn engine_may_take(src: &Region, dst: &Region) -> bool {
    !core::ptr::eq(src, dst) && dst.layout().ascending_disjoint()
}

/// Queues the pieces of a copy between two distinct regions on `batch`,
/// one descriptor each; the CPU copies those under the engine's minimum
/// and those the engine refuses.  `ok` is false when a page was missing,
/// the caller is dying ([`Env::copy_should_stop`], checked between
/// pieces as the CPU loops do) or the batch failed for good (EIO).
fn queue<E: Env>(
    env: &E,
    batch: DmaBatch,
    src: &Region,
    src_off: u64,
    dst: &Region,
    dst_off: u64,
    bound: Option<u64>,
) -> Outcome {
    let min = env.dma_min();
    let mut bytes = 0u64;
    for c in PairPlan::new(src.layout(), src_off, dst.layout(), dst_off, bound) {
        let (Some(s), Some(d)) = (src.page(c.src.page), dst.page(c.dst.page)) else {
            return Outcome { bytes, ok: false };
        };
        if env.copy_should_stop() {
            return Outcome { bytes, ok: false };
        }
        let queued = if c.len as u64 >= min {
            // SAFETY: the caller holds both regions (so their pages stay
            // pinned) until the batch ends; the planner keeps both ranges
            // within their pages; the destination's segments are disjoint
            // (engine_may_take), so no two pieces write the same bytes.
            match unsafe { env.dma_copy(batch, d, c.dst.off, s, c.src.off, c.len) } {
                Ok(()) => true,
                Err(EIO) => return Outcome { bytes, ok: false },
                Err(_) => false,
            }
        } else {
            false
        };
        if !queued {
            // SAFETY: as above.
            unsafe { env.copy_page_page(d, c.dst.off, s, c.src.off, c.len) };
        }
        bytes += c.len as u64;
    }
    Outcome { bytes, ok: true }
}

/// An ASYNCDMACOMPLETE request between its submission and the release the
/// shim calls once the engine finished it and its slot was written.  It
/// holds one of its context's in-flight reservations
/// ([`Context::reserve_dma_async`]), given back when it drops.
pub struct DmaToken {
    /// The request's references; Some once submitted.
    req: Option<AsyncReq>,
    /// Bytes the request moves.
    bytes: u64,
    /// The context whose reservation this is; it outlives the token (its
    /// release waits for the fd's ASYNCDMACOMPLETE requests).
    ctx: *const Context,
}

impl Drop for DmaToken {
    fn drop(&mut self) {
        // SAFETY: the context outlives its tokens (field invariant).
        unsafe { &*self.ctx }.unreserve_dma_async();
    }
}

impl<E: Env> Device<E> {
    /// What [`Device::dma_submit`] needs, allocated before the request
    /// commits anything: EBUSY when the fd has as many ASYNCDMACOMPLETE
    /// requests in flight as its bound allows.
    pub fn dma_token(&self, ctx: &Context) -> KResult<KBox<DmaToken>> {
        ctx.reserve_dma_async()?;
        KBox::try_new(DmaToken {
            req: None,
            bytes: 0,
            ctx,
        })
        .inspect_err(|_| ctx.unreserve_dma_async())
    }

    /// Runs an ASYNCDMACOMPLETE request (PENDING was reported): its pieces
    /// are queued on the engine, and the engine's completion writes slot
    /// `index`, no thread involved; the references and pins are given up
    /// afterwards, in process context ([`Device::dma_release`]).  When the
    /// engine went away since the request was accepted, or for a copy the
    /// engine must not take, the CPU copies now and the slot is written now.
    pub fn dma_submit(
        &self,
        ctx: &Context,
        index: u32,
        job: Job<'_, E>,
        mut token: KBox<DmaToken>,
    ) {
        // The index was checked at submission and the array never shrinks.
        let Ok(slot) = ctx.status_slot(index) else {
            return;
        };
        let batch = if engine_may_take(&job.src, &job.dst) {
            self.env.dma_begin(Some(ctx.shim))
        } else {
            None
        };
        let Some(batch) = batch else {
            let out = copy::region_to_region(
                &self.env,
                &job.src,
                job.src_off,
                &job.dst,
                job.dst_off,
                job.bound,
            );
            drop(job);
            self.account(out);
            slot.store(status_of(out), Release);
            return;
        };
        let out = queue(
            &self.env,
            batch,
            &job.src,
            job.src_off,
            &job.dst,
            job.dst_off,
            job.bound,
        );
        token.bytes = out.bytes;
        token.req = Some(AsyncReq::from_job(job, index, None));
        // SAFETY: a live batch, ended here; the slot lives in the context's
        // array, which the shim keeps until the context is released, and
        // the release waits for the batch; the token goes to dma_release.
        unsafe {
            self.env.dma_finish_async(
                batch,
                ctx.shim,
                slot.as_ptr(),
                KBox::into_raw(token).cast(),
                !out.ok,
            )
        }
    }

    /// Gives up what an ASYNCDMACOMPLETE request held, after its slot was
    /// written (`ok`: it said SUCCESS).
    ///
    /// # Safety
    /// `token` comes from [`Device::dma_submit`] (through the shim) and is
    /// released once.
    pub unsafe fn dma_release(&self, token: *mut c_void, ok: bool) {
        // SAFETY: dma_submit made the token with KBox::into_raw (caller).
        let mut token = unsafe { KBox::from_raw(token.cast::<DmaToken>()) };
        if let Some(req) = token.req.take() {
            let (job, _, _) = req.into_job(&self.env, &self.stats);
            drop(job);
        }
        self.account(Outcome {
            bytes: token.bytes,
            ok,
        });
    }

    fn account(&self, out: Outcome) {
        stats::add(&self.stats.bytes_async, out.bytes);
        if !out.ok {
            stats::add(&self.stats.copies_failed, 1);
        }
    }
}
