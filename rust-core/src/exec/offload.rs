//! Asynchronous copies: what a submission holds, the per-context queue in
//! submission order, and its execution on the shim's offload thread.
//!
//! A submission does every check, lookup, single-use consumption and pin in
//! the caller's context, so the thread only copies pinned page to pinned
//! page: the local side of an inline copy is pinned like a region
//! ([`Region::create_local`]).  The request then holds a reference on both
//! sides until it completes.  The thread runs one request at a time, oldest
//! first, which is what makes requests of one fd complete in submission
//! order.
//!
//! On file release the thread is stopped first (the request it is running
//! finishes); requests still queued are dropped without writing their
//! slots, their references and pins released.

use crate::edge::errno::KResult;
use crate::edge::kalloc::KBox;
use crate::edge::shim::Env;
use crate::exec::copy::{self, Outcome};
use crate::exec::dma;
use crate::exec::request::{status_of, AsyncReq, Job};
use crate::state::context::Context;
use crate::state::device::Device;
use crate::state::queue::Node;
use crate::state::stats;
use core::sync::atomic::Ordering::Release;

impl<E: Env> Job<'_, E> {
    /// Copies page to page (the shim reschedules between pages), by the
    /// DMA engine when the job asks for it.
    pub fn run(&self, env: &E) -> Outcome {
        let copy = if self.dma {
            dma::region_to_region
        } else {
            copy::region_to_region
        };
        copy(
            env,
            &self.src,
            self.src_off,
            &self.dst,
            self.dst_off,
            self.bound,
        )
    }
}

/// What a submission allocates and reserves before it commits anything, so
/// that queueing cannot fail afterwards.  Dropping it gives all back.
pub struct Prepared<'c> {
    ctx: &'c Context,
    index: u32,
    /// Always Some until [`Device::enqueue`] takes it.
    node: Option<KBox<Node<Option<AsyncReq>>>>,
    notify: Option<KBox<Node<u32>>>,
}

impl Drop for Prepared<'_> {
    fn drop(&mut self) {
        if self.notify.take().is_some() {
            self.ctx.unreserve_notify(1);
        }
    }
}

impl<E: Env> Device<E> {
    /// Reserves what an asynchronous request to slot `index` needs: a
    /// notification credit (EBUSY when the fd already owes one per slot)
    /// and the queue nodes (ENOMEM).
    pub fn prepare<'c>(&self, ctx: &'c Context, index: u32, notify: bool) -> KResult<Prepared<'c>> {
        let notify = if notify {
            ctx.reserve_notify()?;
            match Node::try_new(index) {
                Ok(n) => Some(n),
                Err(e) => {
                    ctx.unreserve_notify(1);
                    return Err(e);
                }
            }
        } else {
            None
        };
        // From here on the Prepared gives the credit back if we fail.
        let node = match Node::try_new(None) {
            Ok(n) => n,
            Err(e) => {
                if notify.is_some() {
                    ctx.unreserve_notify(1);
                }
                return Err(e);
            }
        };
        Ok(Prepared {
            ctx,
            index,
            node: Some(node),
            notify,
        })
    }

    /// Queues a job behind the context's earlier requests and wakes the
    /// offload thread.  Cannot fail: everything was reserved.
    pub fn enqueue(&self, mut prep: Prepared<'_>, job: Job<'_, E>) {
        let Some(mut node) = prep.node.take() else {
            return; // unreachable: only enqueue takes the node
        };
        let req = AsyncReq::from_job(job, prep.index, prep.notify.take());
        let ctx = prep.ctx;
        // INVARIANT: the node now owns the request's references.
        node.val = Some(req);
        drop(prep);
        ctx.with_queues(&self.env, |q| q.pending.push(node));
        self.env.ctx_kick(ctx.shim);
    }

    /// Runs the oldest queued request of `ctx`, if any: the copy, then the
    /// references are given up (so the counters are back to where they
    /// were before the slot says done), then the slot and the notification.
    /// Returns false when the queue was empty.  Called by the offload
    /// thread only, so requests never overtake each other.
    pub fn run_async(&self, ctx: &Context) -> bool {
        let Some(mut node) = ctx.with_queues(&self.env, |q| q.pending.pop()) else {
            return false;
        };
        let Some(req) = node.val.take() else {
            return true;
        };
        drop(node);
        let (job, index, notify) = req.into_job(&self.env, &self.stats);
        let out = job.run(&self.env);
        drop(job);
        stats::add(&self.stats.bytes_async, out.bytes);
        if !out.ok {
            stats::add(&self.stats.copies_failed, 1);
        }
        // The index was checked at submission and the array never shrinks.
        if let Ok(slot) = ctx.status_slot(index) {
            // Release: whoever sees the status also sees the data.
            slot.store(status_of(out), Release);
        }
        if let Some(n) = notify {
            ctx.push_ready(&self.env, n);
        }
        true
    }

    /// Pops up to `out.len()` completed NOTIFY_FD indices, oldest first;
    /// returns how many.
    pub fn read_notify(&self, ctx: &Context, out: &mut [u32]) -> usize {
        let n = ctx.with_queues(&self.env, |q| {
            let mut n = 0;
            for o in out.iter_mut() {
                let Some(node) = q.ready.pop() else { break };
                *o = node.val;
                n += 1;
            }
            n
        });
        ctx.unreserve_notify(n as u64);
        n
    }

    /// File release, after the offload thread stopped: drops the requests
    /// that never started, releasing their references and pins, and the
    /// unread notifications.  No slot is written.
    pub fn drain_async(&self, ctx: &Context) {
        while let Some(mut node) = ctx.with_queues(&self.env, |q| q.pending.pop()) {
            if let Some(req) = node.val.take() {
                let (job, _, notify) = req.into_job(&self.env, &self.stats);
                drop(job);
                if notify.is_some() {
                    ctx.unreserve_notify(1);
                }
            }
        }
        let unread = ctx.with_queues(&self.env, |q| {
            let mut n = 0u64;
            while q.ready.pop().is_some() {
                n += 1;
            }
            n
        });
        ctx.unreserve_notify(unread);
    }
}
