//! The device: the environment, the region table, the counters and the
//! context lifecycle.  The kernel has one, in a static; tests make many.

use crate::edge::errno::KResult;
use crate::edge::kalloc::KBox;
use crate::edge::shim::{Env, ShimCtx};
use crate::state::account::Account;
use crate::state::context::Context;
use crate::state::pins::Pins;
use crate::state::stats::{self, Stats};
use crate::state::table::Table;
use crate::state::workers::Workers;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Everything the core keeps between calls.
pub struct Device<E: Env> {
    /// The kernel services.
    pub env: E,
    /// The region table.
    pub table: Table,
    /// The counters.
    pub stats: Stats,
    /// Offload threads per user.
    pub workers: Workers,
    /// Pinned pages per user.
    pub pins: Pins,
    next_ctx: AtomicU64,
}

impl<E: Env> Device<E> {
    /// A device with an empty table.
    pub const fn new(env: E) -> Self {
        Device {
            env,
            table: Table::new(),
            stats: Stats::new(),
            workers: Workers::new(),
            pins: Pins::new(),
            next_ctx: AtomicU64::new(0),
        }
    }

    /// Module load.  The table allocates lazily, so nothing can fail yet.
    pub fn init(&self) -> KResult<()> {
        Ok(())
    }

    /// Module unload (no context is left).
    pub fn exit(&self) {
        self.table.exit();
        self.workers.exit(&self.env);
        self.pins.exit(&self.env);
    }

    /// A context for an opener with real uid `uid`, without a shim handle
    /// (host tests).
    pub fn ctx_new(&self, uid: u32) -> KResult<KBox<Context>> {
        self.ctx_new_with(uid, ShimCtx::NULL)
    }

    /// A context for an opener with real uid `uid`; `shim` is the handle the
    /// core passes back to the shim's `knem_shim_ctx_*` functions.
    pub fn ctx_new_with(&self, uid: u32, shim: ShimCtx) -> KResult<KBox<Context>> {
        self.ctx_new_in(uid, Account::of_uid(uid), shim)
    }

    /// As [`Device::ctx_new_with`], charged to `account` (the opener's
    /// user namespace levels).
    pub fn ctx_new_in(&self, uid: u32, account: Account, shim: ShimCtx) -> KResult<KBox<Context>> {
        let id = self.next_ctx.fetch_add(1, Relaxed) + 1;
        let ctx = KBox::try_new(Context::new(id, uid, account, shim))?;
        stats::add(&self.stats.contexts, 1);
        Ok(ctx)
    }

    /// The file is released (its offload thread already stopped): drop
    /// the requests that never started, give the thread back to its user,
    /// destroy the context's regions and free it.
    pub fn ctx_release(&self, ctx: KBox<Context>) {
        self.drain_async(&ctx);
        self.worker_stopped(&ctx);
        self.table
            .release_ctx(&self.env, &self.stats, ctx.id, &ctx.regions);
        stats::sub(&self.stats.contexts, 1);
        drop(ctx);
    }

    /// The device's shared words besides the counters (which are per-CPU
    /// in the kernel) and region reference counts: the context id source
    /// and the table's [`Table::fingerprint`].
    #[cfg(test)]
    pub fn fingerprint(&self) -> std::vec::Vec<u64> {
        let mut v = self.table.fingerprint();
        v.push(self.next_ctx.load(Relaxed));
        v
    }
}
