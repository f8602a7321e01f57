//! The core's view of the kernel: the `knem_shim_*` functions of
//! `c-shim/knem_core.h` behind a trait.
//!
//! [`KernelEnv`] forwards to the shim; host tests use a mock that simulates
//! a user address space, pinned pages, RCU and the table lock.

use crate::edge::errno::KResult;
use core::ffi::c_void;

/// `c-shim/knem_core.h` as bindgen reads it (`build.rs`): the
/// `knem_shim_*` declarations, `struct knem_core_stats`, the constants.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    dead_code,
    missing_docs,
    clippy::all
)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/knem_core.rs"));
}

/// log2 of the page size the core assumes.
pub const PAGE_SHIFT: u32 = sys::KNEM_CORE_PAGE_SHIFT;
/// The page size the core assumes.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// Bytes reserved for the shim's `struct rcu_head`.
pub const RCU_HEAD_SIZE: usize = sys::KNEM_CORE_RCU_HEAD_SIZE as usize;
/// Default of the `max_regions_per_user` module parameter.
pub const REGIONS_PER_USER_DEFAULT: u64 = sys::KNEM_CORE_REGIONS_PER_USER_DEFAULT as u64;
/// Default of the `max_offload_threads_per_user` module parameter.
pub const OFFLOAD_THREADS_PER_USER_DEFAULT: u64 =
    sys::KNEM_CORE_OFFLOAD_THREADS_PER_USER_DEFAULT as u64;
/// The default of the `max_regions` module parameter.
pub const REGIONS_MAX_DEFAULT: u64 = sys::KNEM_CORE_REGIONS_MAX_DEFAULT as u64;
/// The default of the `max_offload_threads` module parameter.
pub const OFFLOAD_THREADS_MAX_DEFAULT: u64 = sys::KNEM_CORE_OFFLOAD_THREADS_MAX_DEFAULT as u64;

/// An opaque `struct page *` of a pinned page.  The core never dereferences it.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagePtr(pub *mut c_void);

impl PagePtr {
    /// The null page pointer, used to initialise page arrays.
    pub const NULL: PagePtr = PagePtr(core::ptr::null_mut());
}

// SAFETY: a PagePtr is an opaque handle the core only passes back to the
// shim; the shim's page functions may be called from any thread.
unsafe impl Send for PagePtr {}
// SAFETY: as above, sharing the handle never dereferences it.
unsafe impl Sync for PagePtr {}

/// The shim's opaque handle of one context (its per-file state), given to
/// `knem_core_ctx_new` and passed back to the `knem_shim_ctx_*` functions.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShimCtx(pub *mut c_void);

impl ShimCtx {
    /// No handle (host tests).
    pub const NULL: ShimCtx = ShimCtx(core::ptr::null_mut());
}

// SAFETY: an opaque handle the core only passes back to the shim, whose
// ctx functions may be called from any thread.
unsafe impl Send for ShimCtx {}
// SAFETY: as above.
unsafe impl Sync for ShimCtx {}

/// The shim's opaque record of who pinned a region's pages
/// (`knem_shim_owner_new`): the pinning process, for the ptrace access
/// rule, and its mm, charged for the pages until [`Env::owner_put`].
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerPtr(pub *mut c_void);

// SAFETY: an opaque handle the core only passes back to the shim, whose
// owner functions may be called from any thread.
unsafe impl Send for OwnerPtr {}
// SAFETY: as above.
unsafe impl Sync for OwnerPtr {}

/// Who may use another process's region (`access_policy` module parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessPolicy {
    /// KNEM's rule: the caller's real uid, at the call, is the owner's.
    Uid,
    /// CMA's rule: the caller may ptrace-attach the owner process.
    Ptrace,
}

/// Space for the shim's `struct rcu_head`, 8-aligned.
#[repr(C, align(8))]
pub struct RcuHead(pub [u8; RCU_HEAD_SIZE]);

/// The kernel services the core uses.  Every method may sleep unless said
/// otherwise.
pub trait Env: Sync {
    /// `copy_from_user` of the current task into `dst`.
    fn copy_from_user(&self, dst: &mut [u8], src: u64) -> KResult<()>;
    /// `copy_to_user` of the current task from `src`.
    fn copy_to_user(&self, dst: u64, src: &[u8]) -> KResult<()>;
    /// Pins `pages.len()` pages of the current task from the page-aligned
    /// `start`; returns how many were pinned (maybe fewer) or an errno when
    /// none were.
    fn pin_pages(&self, start: u64, write: bool, pages: &mut [PagePtr]) -> KResult<usize>;
    /// Unpins pages, dirtying them first when `dirty`.
    ///
    /// # Safety
    /// Every entry must be a page pinned by [`Env::pin_pages`] and not yet
    /// unpinned; none may be used afterwards.
    unsafe fn unpin_pages(&self, pages: &[PagePtr], dirty: bool);
    /// Copies `len` bytes between a pinned page at `off` and the current
    /// task's memory at `uaddr`.
    ///
    /// # Safety
    /// `page` must be pinned and `off + len <= PAGE_SIZE`.
    unsafe fn copy_page_user(
        &self,
        page: PagePtr,
        off: u32,
        uaddr: u64,
        len: u32,
        to_user: bool,
    ) -> KResult<()>;
    /// Copies `len` bytes between two pinned pages.
    ///
    /// # Safety
    /// Both pages must be pinned and both ranges must stay within them.
    unsafe fn copy_page_page(
        &self,
        dst: PagePtr,
        dst_off: u32,
        src: PagePtr,
        src_off: u32,
        len: u32,
    );
    /// A random value.  Does not sleep.
    fn random_u32(&self) -> u32;
    /// Enters an RCU read-side section (no sleeping until the unlock).
    fn rcu_read_lock(&self);
    /// Leaves an RCU read-side section.
    fn rcu_read_unlock(&self);
    /// Calls [`crate::state::region::rcu_free`] on `head` after a grace period.
    ///
    /// # Safety
    /// `head` must be the head of a region that no new reader can find, and
    /// must not be touched by the caller afterwards.
    unsafe fn call_rcu(&self, head: *mut RcuHead);
    /// Takes the mutex that serialises writers of the region table.
    fn table_lock(&self);
    /// Releases the table mutex.
    fn table_unlock(&self);
    /// Takes the mutex of one context (its request and notification
    /// queues).  Never held across a call that takes it again.
    fn ctx_lock(&self, shim: ShimCtx);
    /// Releases the context mutex.
    fn ctx_unlock(&self, shim: ShimCtx);
    /// Wakes the context's offload thread: a request was queued.  Only
    /// once [`Env::ctx_spawn`] succeeded for it; never under the context
    /// mutex (it may sleep).
    fn ctx_kick(&self, shim: ShimCtx);
    /// Creates and starts the context's offload thread, from the calling
    /// (submitting) task: in its cgroups, on CPUs of its cpuset.  An error
    /// leaves no thread.  At most one call at a time per context, none
    /// after a success.
    fn ctx_spawn(&self, shim: ShimCtx) -> KResult<()>;
    /// Wakes readers and pollers of the context's fd: a notification was
    /// queued.
    fn ctx_notify(&self, shim: ShimCtx);
    /// Records where the context's offload thread will run (BIND_OFFLOAD):
    /// `flags` is exactly one `KNEM_BIND_FLAG_*`, `mask` the cpumask bytes
    /// of CUSTOM (empty otherwise).  EINVAL if no online CPU remains, EBUSY
    /// once the thread started.
    fn ctx_bind(&self, shim: ShimCtx, flags: u32, mask: &[u8]) -> KResult<()>;

    /// True when copies asking for `KNEM_FLAG_DMA` can go to a DMA engine
    /// now.  The default (an Env without an engine) says no.
    fn dma_usable(&self) -> bool {
        false
    }
    /// Pieces shorter than this are copied by the CPU.
    fn dma_min(&self) -> u64 {
        u64::MAX
    }
    /// Starts one copy's use of the DMA engine; None: copy with the CPU.
    /// `shim` is the context an ASYNCDMACOMPLETE batch will finish on
    /// (its pieces count against that fd's bound), None for a batch the
    /// caller waits for.
    fn dma_begin(&self, _shim: Option<ShimCtx>) -> Option<DmaBatch> {
        None
    }
    /// Queues one piece on the engine.  An error means it was not queued:
    /// EIO when the batch failed for good (the copy stops, FAILED), any
    /// other when the caller should copy this piece with the CPU.
    ///
    /// # Safety
    /// `b` comes from [`Env::dma_begin`] and has not ended; both pages stay
    /// pinned until [`Env::dma_end`] and both ranges stay within them; the
    /// piece overlaps no other piece of the batch.
    unsafe fn dma_copy(
        &self,
        _b: DmaBatch,
        _dst: PagePtr,
        _dst_off: u32,
        _src: PagePtr,
        _src_off: u32,
        _len: u32,
    ) -> KResult<()> {
        Err(crate::edge::errno::ENOMEM)
    }
    /// Waits for every queued piece and ends the batch; an error when any
    /// piece failed.
    fn dma_end(&self, _b: DmaBatch) -> KResult<()> {
        Ok(())
    }
    /// Ends a batch without waiting (ASYNCDMACOMPLETE): once every queued
    /// piece is done (at once if none is), the shim writes SUCCESS, or
    /// FAILED when a piece or `failed` says so, into `slot`, in the order
    /// the context `shim` submitted such batches, then calls
    /// `knem_core_dma_release(token, ok)` from process context.
    ///
    /// # Safety
    /// `b` is a live batch, ended here; `slot` stays valid until the
    /// context is released (which waits for the batch); `token` is what
    /// [`crate::exec::dma`] gives the release.
    unsafe fn dma_finish_async(
        &self,
        _b: DmaBatch,
        _shim: ShimCtx,
        _slot: *mut u8,
        _token: *mut c_void,
        _failed: bool,
    ) {
    }
    /// Records the current process as the owner of `pages` pages about to
    /// be pinned and charges them to its mm (`pinned_vm`, against
    /// RLIMIT_MEMLOCK unless the shim's policy says otherwise): EDQUOT over
    /// the limit, ENOMEM if the record cannot be allocated.
    fn owner_new(&self, pages: u64) -> KResult<OwnerPtr>;
    /// Uncharges the pages of an owner record and frees it.  May run in
    /// any task (the offload thread, another process's close).
    ///
    /// # Safety
    /// `owner` must come from [`Env::owner_new`] and not be used afterwards.
    unsafe fn owner_put(&self, owner: OwnerPtr);
    /// The access rule in force now.  Does not sleep.
    fn access_policy(&self) -> AccessPolicy;
    /// Whether the current task may ptrace-attach the owner process (false
    /// once it is gone).  May sleep: never called inside an RCU section.
    fn may_access(&self, owner: OwnerPtr) -> bool;
    /// The current task's account levels (`state::account`), its own
    /// first, into `keys`; returns how many (at least 1, at most
    /// `keys.len()`).  Does not sleep.
    fn pin_account(&self, keys: &mut [u64]) -> usize;
    /// The current task's RLIMIT_MEMLOCK in pages, `u64::MAX` for none or
    /// when the `account_pinned` parameter is off.  Does not sleep.
    fn memlock_limit(&self) -> u64;
    /// A pin of `pages` would take a level of the current task's account
    /// from `pinned` pages over `limit`: true when the task is exempt
    /// (CAP_IPC_LOCK), else false after one rate-limited log line.
    fn memlock_over(&self, pages: u64, limit: u64, pinned: u64) -> bool;
    /// Takes the mutex of the pinned-page counts (`state::pins`).
    fn pins_lock(&self);
    /// Releases it.
    fn pins_unlock(&self);
    /// Most live regions one user may hold (at each level of its
    /// account).  Does not sleep.
    fn regions_per_user(&self) -> u64;
    /// Most live regions on the node.  Does not sleep.
    fn regions_max(&self) -> u64;
    /// Most live offload threads one user may have (at each level of its
    /// account).  Does not sleep.
    fn offload_threads_per_user(&self) -> u64;
    /// Most live offload threads on the node.  Does not sleep.
    fn offload_threads_max(&self) -> u64;
    /// Whether a copy running now should stop between two pieces: the
    /// calling process is dying, or the offload thread running it is being
    /// stopped.  Does not sleep.
    fn copy_should_stop(&self) -> bool;
}

/// The shim's opaque handle of one copy's DMA batch.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaBatch(pub *mut c_void);

/// A context's mutex, released on drop.
pub struct CtxGuard<'a, E: Env>(&'a E, ShimCtx);

impl<'a, E: Env> CtxGuard<'a, E> {
    /// Takes the context mutex.
    pub fn new(env: &'a E, shim: ShimCtx) -> Self {
        env.ctx_lock(shim);
        CtxGuard(env, shim)
    }
}

impl<E: Env> Drop for CtxGuard<'_, E> {
    fn drop(&mut self) {
        self.0.ctx_unlock(self.1);
    }
}

/// An RCU read-side section, left on drop.
pub struct RcuGuard<'a, E: Env>(&'a E);

impl<'a, E: Env> RcuGuard<'a, E> {
    /// Enters a read-side section.
    pub fn new(env: &'a E) -> Self {
        env.rcu_read_lock();
        RcuGuard(env)
    }
}

impl<E: Env> Drop for RcuGuard<'_, E> {
    fn drop(&mut self) {
        self.0.rcu_read_unlock();
    }
}

/// The mutex of the pinned-page counts, released on drop.
pub struct PinsGuard<'a, E: Env>(&'a E);

impl<'a, E: Env> PinsGuard<'a, E> {
    /// Takes the mutex.
    pub fn new(env: &'a E) -> Self {
        env.pins_lock();
        PinsGuard(env)
    }
}

impl<E: Env> Drop for PinsGuard<'_, E> {
    fn drop(&mut self) {
        self.0.pins_unlock();
    }
}

/// The table mutex, released on drop.
pub struct TableGuard<'a, E: Env>(&'a E);

impl<'a, E: Env> TableGuard<'a, E> {
    /// Takes the table mutex.
    pub fn new(env: &'a E) -> Self {
        env.table_lock();
        TableGuard(env)
    }
}

impl<E: Env> Drop for TableGuard<'_, E> {
    fn drop(&mut self) {
        self.0.table_unlock();
    }
}

#[cfg(not(any(test, feature = "mock")))]
pub use kernel::KernelEnv;

#[cfg(not(any(test, feature = "mock")))]
mod kernel {
    use super::*;
    use crate::edge::errno::Errno;
    use core::ffi::c_int;

    use super::sys::*;

    /// Converts a shim return value (0 or a negative errno).
    fn errno_of(ret: i64) -> KResult<()> {
        if ret == 0 {
            Ok(())
        } else {
            Err(Errno::from_neg(ret))
        }
    }

    /// The real kernel, through the shim's exports.
    pub struct KernelEnv;

    impl Env for KernelEnv {
        fn copy_from_user(&self, dst: &mut [u8], src: u64) -> KResult<()> {
            // SAFETY: dst is a valid writable buffer of dst.len() bytes.
            let r =
                unsafe { knem_shim_copy_from_user(dst.as_mut_ptr().cast(), src, dst.len() as u64) };
            errno_of(r as i64)
        }

        fn copy_to_user(&self, dst: u64, src: &[u8]) -> KResult<()> {
            // SAFETY: src is a valid readable buffer of src.len() bytes.
            let r = unsafe { knem_shim_copy_to_user(dst, src.as_ptr().cast(), src.len() as u64) };
            errno_of(r as i64)
        }

        fn pin_pages(&self, start: u64, write: bool, pages: &mut [PagePtr]) -> KResult<usize> {
            // SAFETY: pages has room for pages.len() entries and PagePtr is a
            // transparent wrapper of void *.
            let r = unsafe {
                knem_shim_pin_pages(
                    start,
                    pages.len() as u64,
                    write as c_int,
                    pages.as_mut_ptr().cast(),
                )
            };
            if r < 0 {
                Err(Errno::from_neg(r as i64))
            } else {
                Ok((r as usize).min(pages.len()))
            }
        }

        unsafe fn unpin_pages(&self, pages: &[PagePtr], dirty: bool) {
            // SAFETY: the caller guarantees these pages are pinned; the shim
            // does not write the array.
            unsafe {
                knem_shim_unpin_pages(pages.as_ptr() as *mut _, pages.len() as u64, dirty as c_int)
            }
        }

        unsafe fn copy_page_user(
            &self,
            page: PagePtr,
            off: u32,
            uaddr: u64,
            len: u32,
            to_user: bool,
        ) -> KResult<()> {
            // SAFETY: the caller guarantees a pinned page and an in-page range.
            let r = unsafe { knem_shim_copy_page_user(page.0, off, uaddr, len, to_user as c_int) };
            errno_of(r as i64)
        }

        unsafe fn copy_page_page(
            &self,
            dst: PagePtr,
            dst_off: u32,
            src: PagePtr,
            src_off: u32,
            len: u32,
        ) {
            // SAFETY: the caller guarantees pinned pages and in-page ranges.
            unsafe { knem_shim_copy_page_page(dst.0, dst_off, src.0, src_off, len) }
        }

        fn random_u32(&self) -> u32 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_random_u32() }
        }

        fn rcu_read_lock(&self) {
            // SAFETY: no preconditions; paired by RcuGuard.
            unsafe { knem_shim_rcu_read_lock() }
        }

        fn rcu_read_unlock(&self) {
            // SAFETY: only called by RcuGuard, after its rcu_read_lock.
            unsafe { knem_shim_rcu_read_unlock() }
        }

        unsafe fn call_rcu(&self, head: *mut RcuHead) {
            // SAFETY: the caller hands over an unreachable region's head.
            unsafe { knem_shim_call_rcu(head.cast()) }
        }

        fn table_lock(&self) {
            // SAFETY: no preconditions; paired by TableGuard.
            unsafe { knem_shim_table_lock() }
        }

        fn table_unlock(&self) {
            // SAFETY: only called by TableGuard, which holds the mutex.
            unsafe { knem_shim_table_unlock() }
        }

        fn ctx_lock(&self, shim: ShimCtx) {
            // SAFETY: shim is the handle of a live context (the core only
            // reaches it through that context); paired by CtxGuard.
            unsafe { knem_shim_ctx_lock(shim.0) }
        }

        fn ctx_unlock(&self, shim: ShimCtx) {
            // SAFETY: only called by CtxGuard, which holds the mutex.
            unsafe { knem_shim_ctx_unlock(shim.0) }
        }

        fn ctx_kick(&self, shim: ShimCtx) {
            // SAFETY: the handle of a live context.
            unsafe { knem_shim_ctx_kick(shim.0) }
        }

        fn ctx_notify(&self, shim: ShimCtx) {
            // SAFETY: the handle of a live context.
            unsafe { knem_shim_ctx_notify(shim.0) }
        }

        fn ctx_spawn(&self, shim: ShimCtx) -> KResult<()> {
            // SAFETY: the handle of a live context; the core serialises the
            // calls for one context (Context::begin_worker_start).
            let r = unsafe { knem_shim_ctx_spawn(shim.0) };
            errno_of(r as i64)
        }

        fn dma_usable(&self) -> bool {
            // SAFETY: no preconditions.
            unsafe { knem_shim_dma_usable() != 0 }
        }

        fn dma_min(&self) -> u64 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_dma_min() }
        }

        fn dma_begin(&self, shim: Option<ShimCtx>) -> Option<DmaBatch> {
            let shim = shim.map_or(core::ptr::null_mut(), |s| s.0);
            // SAFETY: shim is null or the handle of a live context.
            let b = unsafe { knem_shim_dma_begin(shim) };
            (!b.is_null()).then_some(DmaBatch(b))
        }

        unsafe fn dma_copy(
            &self,
            b: DmaBatch,
            dst: PagePtr,
            dst_off: u32,
            src: PagePtr,
            src_off: u32,
            len: u32,
        ) -> KResult<()> {
            // SAFETY: the caller guarantees a live batch, pinned pages and
            // in-page ranges.
            let r = unsafe { knem_shim_dma_copy(b.0, dst.0, dst_off, src.0, src_off, len) };
            errno_of(r as i64)
        }

        fn dma_end(&self, b: DmaBatch) -> KResult<()> {
            // SAFETY: b came from dma_begin and is ended exactly once here.
            let r = unsafe { knem_shim_dma_end(b.0) };
            errno_of(r as i64)
        }

        unsafe fn dma_finish_async(
            &self,
            b: DmaBatch,
            shim: ShimCtx,
            slot: *mut u8,
            token: *mut c_void,
            failed: bool,
        ) {
            // SAFETY: forwarded contract (a live batch, ended here).
            unsafe { knem_shim_dma_finish_async(b.0, shim.0, slot, token, failed as c_int) }
        }

        fn ctx_bind(&self, shim: ShimCtx, flags: u32, mask: &[u8]) -> KResult<()> {
            // SAFETY: the handle of a live context; mask is readable for
            // mask.len() bytes (the caller bounds it far below u32::MAX).
            let r = unsafe {
                knem_shim_ctx_bind(shim.0, flags, mask.as_ptr().cast(), mask.len() as u32)
            };
            errno_of(r as i64)
        }

        fn owner_new(&self, pages: u64) -> KResult<OwnerPtr> {
            let mut owner = core::ptr::null_mut();
            // SAFETY: owner is a valid place for the shim to store its handle.
            let r = unsafe { knem_shim_owner_new(pages, &mut owner) };
            errno_of(r as i64)?;
            Ok(OwnerPtr(owner))
        }

        unsafe fn owner_put(&self, owner: OwnerPtr) {
            // SAFETY: the caller hands over a handle from owner_new.
            unsafe { knem_shim_owner_put(owner.0) }
        }

        fn access_policy(&self) -> AccessPolicy {
            // SAFETY: no preconditions.
            match unsafe { knem_shim_access_policy() } as u32 {
                KNEM_CORE_ACCESS_PTRACE => AccessPolicy::Ptrace,
                _ => AccessPolicy::Uid,
            }
        }

        fn may_access(&self, owner: OwnerPtr) -> bool {
            // SAFETY: a handle from owner_new, kept by a referenced region.
            unsafe { knem_shim_may_access(owner.0) != 0 }
        }

        fn pin_account(&self, keys: &mut [u64]) -> usize {
            let mut chain = [0u64; KNEM_CORE_ACCOUNT_LEVELS as usize];
            // SAFETY: chain has room for the KNEM_CORE_ACCOUNT_LEVELS keys
            // the shim writes at most.
            let n = unsafe { knem_shim_account(chain.as_mut_ptr()) } as usize;
            let n = n.min(keys.len()).min(chain.len());
            if let (Some(dst), Some(src)) = (keys.get_mut(..n), chain.get(..n)) {
                dst.copy_from_slice(src);
            }
            n
        }

        fn memlock_limit(&self) -> u64 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_memlock_limit() }
        }

        fn memlock_over(&self, pages: u64, limit: u64, pinned: u64) -> bool {
            // SAFETY: no preconditions.
            unsafe { knem_shim_memlock_over(pages, limit, pinned) != 0 }
        }

        fn pins_lock(&self) {
            // SAFETY: no preconditions; paired by PinsGuard.
            unsafe { knem_shim_pins_lock() }
        }

        fn pins_unlock(&self) {
            // SAFETY: only called by PinsGuard, which holds the mutex.
            unsafe { knem_shim_pins_unlock() }
        }

        fn regions_per_user(&self) -> u64 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_regions_per_user() }
        }

        fn regions_max(&self) -> u64 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_regions_max() }
        }

        fn offload_threads_per_user(&self) -> u64 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_offload_threads_per_user() }
        }

        fn offload_threads_max(&self) -> u64 {
            // SAFETY: no preconditions.
            unsafe { knem_shim_offload_threads_max() }
        }

        fn copy_should_stop(&self) -> bool {
            // SAFETY: no preconditions.
            unsafe { knem_shim_copy_should_stop() != 0 }
        }
    }
}
