//! One context per O_RDWR open of the device: the owner identity of the
//! regions it creates, its status array, whether it has an offload thread,
//! and its two queues: asynchronous requests in submission order (drained
//! by that thread through [`crate::exec::offload`]) and completed
//! NOTIFY_FD indices waiting for read().

use crate::edge::errno::{KResult, EBUSY, EINVAL};
use crate::edge::shim::{CtxGuard, Env, ShimCtx, PAGE_SHIFT};
use crate::exec::request::AsyncReq;
use crate::state::account::{Account, RegionCount};
use crate::state::queue::{Fifo, Node};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering::*};

/// Status slot values.
pub use knem_abi::status;

/// Most slots a status array may have: an index is a u32.
pub const MAX_STATUS_SLOTS: u64 = 1 << 32;

/// The file page offset of the status array's mapping.
const STATUS_ARRAY_PGOFF: u64 = knem_abi::KNEM_STATUS_ARRAY_FILE_OFFSET as u64 >> PAGE_SHIFT;

/// A context.
pub struct Context {
    /// Unique id, never reused while the module is loaded.
    pub id: u64,
    /// Real uid of the opener at open, owner of every region created here.
    pub uid: u32,
    /// Where its regions and offload thread are counted against the
    /// per-user bounds (the opener's user namespace levels).
    pub account: Account,
    /// Its live regions in the table (the table's count, under its lock).
    pub regions: RegionCount,
    /// The shim's handle of this context.
    pub shim: ShimCtx,
    status: StatusArray,
    queues: UnsafeCell<Queues>,
    /// Requests queued and not yet taken by the thread (lock-free view for
    /// the thread's sleep test).
    queued: AtomicU64,
    /// Notifications waiting for read() (lock-free view for poll).
    ready: AtomicU64,
    /// NOTIFY_FD requests accepted whose notification was not read yet.
    notify_credits: AtomicU64,
    /// The offload thread: WORKER_NONE until one starts, then WORKER_LIVE
    /// until release.
    worker: AtomicU8,
    /// ASYNCDMACOMPLETE requests accepted and not released yet.
    dma_async: AtomicU64,
}

/// Most ASYNCDMACOMPLETE requests one fd may have in flight: the slots of
/// a one-page status array (each request holds a batch, a few KiB, until
/// the engine is done; the shim bounds the fd's mapped pieces itself).
pub const DMA_ASYNC_MAX: u64 = 4096;

/// The queues of a context.
///
/// # Invariants
/// Only accessed with the context mutex ([`Env::ctx_lock`]) held;
/// `Context::queued` and `Context::ready` equal the lengths.
#[derive(Default)]
pub struct Queues {
    /// Asynchronous requests, oldest first.  The node holds None only
    /// while the request it held is running or released.
    pub pending: Fifo<Option<AsyncReq>>,
    /// Status indices of completed NOTIFY_FD requests, oldest first.
    pub ready: Fifo<u32>,
}

// SAFETY: the queues are only touched under the context mutex (Queues
// invariant); everything else is atomic or immutable.
unsafe impl Sync for Context {}
// SAFETY: as above; a context moves between threads only as a whole.
unsafe impl Send for Context {}

const WORKER_NONE: u8 = 0;
const WORKER_STARTING: u8 = 1;
const WORKER_LIVE: u8 = 2;

const ARRAY_NONE: u8 = 0;
const ARRAY_SETTING: u8 = 1;
const ARRAY_SET: u8 = 2;

/// The mmapped status array: one byte per slot, set at most once.
struct StatusArray {
    state: AtomicU8,
    ptr: AtomicPtr<AtomicU8>,
    len: AtomicU64,
}

impl Context {
    /// A context for a process whose real uid is `uid`, charged to
    /// `account`.
    pub const fn new(id: u64, uid: u32, account: Account, shim: ShimCtx) -> Context {
        Context {
            id,
            uid,
            account,
            regions: RegionCount::new(),
            shim,
            status: StatusArray {
                state: AtomicU8::new(ARRAY_NONE),
                ptr: AtomicPtr::new(core::ptr::null_mut()),
                len: AtomicU64::new(0),
            },
            queues: UnsafeCell::new(Queues {
                pending: Fifo::new(),
                ready: Fifo::new(),
            }),
            queued: AtomicU64::new(0),
            ready: AtomicU64::new(0),
            notify_credits: AtomicU64::new(0),
            worker: AtomicU8::new(WORKER_NONE),
            dma_async: AtomicU64::new(0),
        }
    }

    /// Whether the offload thread runs (Acquire: the shim's handle of it
    /// is visible to whoever sees true).
    pub fn has_worker(&self) -> bool {
        self.worker.load(Acquire) == WORKER_LIVE
    }

    /// Claims the start of the offload thread: false when it runs or
    /// another submission is starting it.  A claim ends with
    /// [`Context::end_worker_start`].
    pub fn begin_worker_start(&self) -> bool {
        self.worker
            .compare_exchange(WORKER_NONE, WORKER_STARTING, Acquire, Relaxed)
            .is_ok()
    }

    /// Ends a claim: the thread now runs (`started`) or still does not.
    pub fn end_worker_start(&self, started: bool) {
        let to = if started { WORKER_LIVE } else { WORKER_NONE };
        self.worker.store(to, Release);
    }

    /// Runs `f` on the queues with the context mutex held.  `f` must not
    /// call back into anything that takes the mutex.
    pub fn with_queues<E: Env, R>(&self, env: &E, f: impl FnOnce(&mut Queues) -> R) -> R {
        let _g = CtxGuard::new(env, self.shim);
        // SAFETY: the mutex is held, so this is the only access (Queues
        // invariant); the borrow ends before the guard drops.
        let q = unsafe { &mut *self.queues.get() };
        let r = f(q);
        self.queued.store(q.pending.len() as u64, Release);
        self.ready.store(q.ready.len() as u64, Release);
        r
    }

    /// Whether a request waits for the offload thread (no lock: a hint
    /// for its sleep test, exact once the submitter's wake-up arrived).
    pub fn has_queued(&self) -> bool {
        self.queued.load(Acquire) != 0
    }

    /// Whether a notification waits for read() (no lock, for poll).
    pub fn has_ready(&self) -> bool {
        self.ready.load(Acquire) != 0
    }

    /// Whether the status array is mapped (BIND_OFFLOAD is over then).
    pub fn has_status_array(&self) -> bool {
        self.status.state.load(Acquire) != ARRAY_NONE
    }

    /// Reserves a notification for a NOTIFY_FD request: at most one per
    /// status slot may be queued or in flight, else EBUSY.
    pub fn reserve_notify(&self) -> KResult<()> {
        let max = if self.status.state.load(Acquire) == ARRAY_SET {
            self.status.len.load(Relaxed)
        } else {
            0
        };
        self.notify_credits
            .fetch_update(AcqRel, Relaxed, |n| (n < max).then_some(n + 1))
            .map(|_| ())
            .map_err(|_| EBUSY)
    }

    /// Gives back `n` notification reservations (read, or never queued).
    pub fn unreserve_notify(&self, n: u64) {
        self.notify_credits.fetch_sub(n, AcqRel);
    }

    /// Reserves room for one ASYNCDMACOMPLETE request: at most one per
    /// status slot and [`DMA_ASYNC_MAX`] may be in flight, else EBUSY (as
    /// for NOTIFY_FD: a client that reuses a slot only once it left
    /// PENDING never sees it).
    pub fn reserve_dma_async(&self) -> KResult<()> {
        let slots = if self.status.state.load(Acquire) == ARRAY_SET {
            self.status.len.load(Relaxed)
        } else {
            0
        };
        let max = slots.min(DMA_ASYNC_MAX);
        self.dma_async
            .fetch_update(AcqRel, Relaxed, |n| (n < max).then_some(n + 1))
            .map(|_| ())
            .map_err(|_| EBUSY)
    }

    /// Gives back one ASYNCDMACOMPLETE reservation.
    pub fn unreserve_dma_async(&self) {
        self.dma_async.fetch_sub(1, AcqRel);
    }

    /// ASYNCDMACOMPLETE requests in flight (tests).
    pub fn dma_async_in_flight(&self) -> u64 {
        self.dma_async.load(Relaxed)
    }

    /// Notifications queued or in flight (tests).
    pub fn notify_in_flight(&self) -> u64 {
        self.notify_credits.load(Relaxed)
    }

    /// Queues a completed NOTIFY_FD request's index.
    pub fn push_ready<E: Env>(&self, env: &E, node: crate::edge::kalloc::KBox<Node<u32>>) {
        self.with_queues(env, |q| q.ready.push(node));
        env.ctx_notify(self.shim);
    }

    /// Records the status array (`len` bytes at `kaddr`); EBUSY if the
    /// context already has one.
    ///
    /// # Safety
    /// `kaddr` must point to `len` bytes that stay valid and writable until
    /// the context is freed.
    pub unsafe fn set_status_array(&self, kaddr: *mut u8, len: u64) -> KResult<()> {
        if kaddr.is_null() {
            return Err(EINVAL);
        }
        self.status
            .state
            .compare_exchange(ARRAY_NONE, ARRAY_SETTING, Acquire, Relaxed)
            .map_err(|_| EBUSY)?;
        self.status.ptr.store(kaddr.cast(), Relaxed);
        self.status.len.store(len, Relaxed);
        self.status.state.store(ARRAY_SET, Release);
        Ok(())
    }

    /// Whether an mmap() of `len` bytes at file page offset `pgoff` may
    /// become this context's status array: EBUSY when it has one, EINVAL
    /// at any offset but the ABI's, past [`MAX_STATUS_SLOTS`], or for a
    /// private mapping (`shared` false: the slots the module writes must
    /// be the ones userspace reads, and MPI libraries all map MAP_SHARED).
    pub fn status_mmap_check(&self, pgoff: u64, len: u64, shared: bool) -> KResult<()> {
        if self.status.state.load(Acquire) != ARRAY_NONE {
            return Err(EBUSY);
        }
        if !shared || pgoff != STATUS_ARRAY_PGOFF || len > MAX_STATUS_SLOTS {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// The status slot `index`, or EINVAL without an array or outside it.
    pub fn status_slot(&self, index: u32) -> KResult<&AtomicU8> {
        if self.status.state.load(Acquire) != ARRAY_SET
            || index as u64 >= self.status.len.load(Relaxed)
        {
            return Err(EINVAL);
        }
        let p = self.status.ptr.load(Relaxed);
        // SAFETY: set_status_array's caller guarantees len valid bytes at p
        // for the context's lifetime, and index < len.  The bytes are shared
        // with userspace, hence the atomic view.
        Ok(unsafe { &*p.add(index as usize) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_status_array_is_ebusy() {
        let c = Context::new(1, 0, Account::of_uid(0), ShimCtx::NULL);
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        assert_eq!(c.status_slot(0).err(), Some(EINVAL));
        // SAFETY: the arrays outlive the context.
        unsafe {
            assert_eq!(c.set_status_array(a.as_mut_ptr(), 8), Ok(()));
            assert_eq!(c.set_status_array(b.as_mut_ptr(), 8), Err(EBUSY));
        }
        assert!(c.status_slot(7).is_ok());
        assert_eq!(c.status_slot(8).err(), Some(EINVAL));
        c.status_slot(3).unwrap().store(status::SUCCESS, Relaxed);
        assert_eq!(a[3], status::SUCCESS);
    }

    #[test]
    fn status_mmap_rules() {
        let c = Context::new(1, 0, Account::of_uid(0), ShimCtx::NULL);
        assert_eq!(c.status_mmap_check(0, 4096, true), Ok(()));
        assert_eq!(c.status_mmap_check(0, 4096, false), Err(EINVAL));
        assert_eq!(c.status_mmap_check(0, MAX_STATUS_SLOTS, true), Ok(()));
        assert_eq!(
            c.status_mmap_check(0, MAX_STATUS_SLOTS + 1, true),
            Err(EINVAL)
        );
        assert_eq!(c.status_mmap_check(1, 4096, true), Err(EINVAL));
        // A page offset that wraps to 0 once shifted is still not 0.
        assert_eq!(c.status_mmap_check(1 << 52, 4096, true), Err(EINVAL));
        let mut a = [0u8; 8];
        // SAFETY: the array outlives the context.
        unsafe { c.set_status_array(a.as_mut_ptr(), 8) }.unwrap();
        // A second array is refused before the offset is looked at.
        assert_eq!(c.status_mmap_check(0, 4096, true), Err(EBUSY));
        assert_eq!(c.status_mmap_check(1, 4096, false), Err(EBUSY));
    }
}
