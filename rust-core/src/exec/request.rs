//! What an accepted copy holds between its checks and its completion: a
//! [`Job`] (two referenced regions and where to copy), the [`AsyncReq`]
//! a context queues, and the status a finished copy writes.  Both the
//! offload thread ([`crate::exec::offload`]) and the DMA engine
//! ([`crate::exec::dma`]) build on this; neither imports the other's
//! requests.

use crate::edge::kalloc::KBox;
use crate::edge::shim::Env;
use crate::exec::copy::Outcome;
use crate::state::queue::Node;
use crate::state::region::{Region, RegionRef};
use crate::state::stats::Stats;
use core::ptr::NonNull;
use knem_abi::status;

/// A copy between two pinned regions, a reference held on each.
pub struct Job<'a, E: Env> {
    /// Read from.
    pub src: RegionRef<'a, E>,
    /// Offset into `src`.
    pub src_off: u64,
    /// Written to.
    pub dst: RegionRef<'a, E>,
    /// Offset into `dst`.
    pub dst_off: u64,
    /// Bounded copies stop at this length.
    pub bound: Option<u64>,
    /// Through the DMA engine ([`crate::exec::dma`]) rather than the CPU.
    pub dma: bool,
}

/// A queued request.
///
/// # Invariants
/// `src` and `dst` each carry one reference the request owns; they are
/// given up by [`AsyncReq::into_job`].  A notification node means a
/// reserved notification credit.
pub struct AsyncReq {
    src: NonNull<Region>,
    src_off: u64,
    dst: NonNull<Region>,
    dst_off: u64,
    bound: Option<u64>,
    dma: bool,
    index: u32,
    notify: Option<KBox<Node<u32>>>,
}

// SAFETY: region references may be given up from any thread.
unsafe impl Send for AsyncReq {}

impl AsyncReq {
    /// Takes over a job's references; `notify` is the node of a reserved
    /// notification credit, if the request has one.
    pub(crate) fn from_job<E: Env>(
        job: Job<'_, E>,
        index: u32,
        notify: Option<KBox<Node<u32>>>,
    ) -> AsyncReq {
        AsyncReq {
            src: job.src.into_raw(),
            src_off: job.src_off,
            dst: job.dst.into_raw(),
            dst_off: job.dst_off,
            bound: job.bound,
            dma: job.dma,
            index,
            notify,
        }
    }

    /// Takes back the references as a job; also returns the slot index and
    /// the notification node.
    pub(crate) fn into_job<'a, E: Env>(
        self,
        env: &'a E,
        stats: &'a Stats,
    ) -> (Job<'a, E>, u32, Option<KBox<Node<u32>>>) {
        // SAFETY: the request owns one reference on each side (invariant),
        // and is consumed here, so each moves to exactly one RegionRef.
        let (src, dst) = unsafe {
            (
                RegionRef::from_owned(self.src, env, stats),
                RegionRef::from_owned(self.dst, env, stats),
            )
        };
        let job = Job {
            src,
            src_off: self.src_off,
            dst,
            dst_off: self.dst_off,
            bound: self.bound,
            dma: self.dma,
        };
        (job, self.index, self.notify)
    }
}

/// The slot value of a finished copy.
pub fn status_of(o: Outcome) -> u8 {
    if o.ok {
        status::SUCCESS
    } else {
        status::FAILED
    }
}
