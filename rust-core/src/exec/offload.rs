//! Asynchronous copies: what a submission holds, the per-context queue in
//! submission order, and its execution on the shim's offload thread, or in
//! the caller when the context has no thread and may not get one.
//!
//! A submission does every check, lookup, single-use consumption and pin in
//! the caller's context, so the thread only copies pinned page to pinned
//! page: the local side of an inline copy is pinned like a region
//! ([`Region::create_local`]).  The request then holds a reference on both
//! sides until it completes.  The thread runs one request at a time, oldest
//! first, which is what makes requests of one fd complete in submission
//! order.
//!
//! A context gets its thread at its first asynchronous submission, not
//! before (most files never submit one), and only while its user has fewer
//! than `Env::offload_threads_per_user` ([`crate::state::workers`]).  A
//! context without a thread runs the copy in the caller before the ioctl
//! returns: the slot and the notification are written as the thread would
//! have, and `current_status` still says PENDING, so the client sees an
//! asynchronous request that completed early, which it already handles.
//! Completion order holds: such a context has nothing queued.
//!
//! On file release the thread is stopped first (the request it is running
//! finishes); requests still queued are dropped without writing their
//! slots, their references and pins released; the thread is given back to
//! its user.

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

/// Where an accepted asynchronous request went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Queued for the context's offload thread.
    Queued,
    /// Run in the caller, done (no thread to be had).
    RanInCaller,
}

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
    /// Always Some until the request is queued or run.
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

    /// Hands an accepted request over: to the context's offload thread,
    /// started now if it has none and its user may have one more, else run
    /// here.  Cannot fail: everything was reserved.
    pub fn submit(&self, prep: Prepared<'_>, job: Job<'_, E>) -> Submitted {
        if self.worker_for(prep.ctx) {
            self.enqueue(prep, job);
            return Submitted::Queued;
        }
        stats::add(&self.stats.offload_fallbacks, 1);
        let mut prep = prep;
        let (ctx, index, notify) = (prep.ctx, prep.index, prep.notify.take());
        drop(prep);
        self.complete(ctx, job, index, notify);
        Submitted::RanInCaller
    }

    /// Whether `ctx` has an offload thread, starting one when it has none
    /// and its user is below the bound.  A submission racing with another
    /// one's start of the thread of the same context does without.
    fn worker_for(&self, ctx: &Context) -> bool {
        if ctx.has_worker() {
            return true;
        }
        if !ctx.begin_worker_start() {
            return ctx.has_worker();
        }
        let (max, node_max) = (
            self.env.offload_threads_per_user(),
            self.env.offload_threads_max(),
        );
        let started = self.workers.take(&self.env, &ctx.account, max, node_max)
            && match self.env.ctx_spawn(ctx.shim) {
                Ok(()) => true,
                Err(_) => {
                    self.workers.give(&self.env, &ctx.account);
                    false
                }
            };
        if started {
            stats::add(&self.stats.offload_threads, 1);
        }
        ctx.end_worker_start(started);
        started
    }

    /// File release, after the offload thread stopped: gives it back to
    /// its user.
    pub fn worker_stopped(&self, ctx: &Context) {
        if ctx.has_worker() {
            ctx.end_worker_start(false);
            self.workers.give(&self.env, &ctx.account);
            stats::sub(&self.stats.offload_threads, 1);
        }
    }

    /// Queues a job behind the context's earlier requests and wakes the
    /// offload thread, which the context has.
    fn enqueue(&self, mut prep: Prepared<'_>, job: Job<'_, E>) {
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

    /// Runs the oldest queued request of `ctx`, if any
    /// ([`Device::complete`]).  Returns false when the queue was empty.
    /// Called by the offload thread only, so requests never overtake each
    /// other.
    pub fn run_async(&self, ctx: &Context) -> bool {
        let Some(mut node) = ctx.with_queues(&self.env, |q| q.pending.pop()) else {
            return false;
        };
        let Some(req) = node.val.take() else {
            return true;
        };
        drop(node);
        let (job, index, notify) = req.into_job(&self.env, &self.stats);
        self.complete(ctx, job, index, notify);
        true
    }

    /// Runs an asynchronous request's copy, then gives up its references
    /// (so the counters are back to where they were before the slot says
    /// done), then writes the slot and queues the notification.
    fn complete(
        &self,
        ctx: &Context,
        job: Job<'_, E>,
        index: u32,
        notify: Option<KBox<Node<u32>>>,
    ) {
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
