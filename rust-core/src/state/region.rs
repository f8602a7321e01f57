//! A region: validated segments, the pinned pages behind them, protection,
//! owner, and a reference count.
//!
//! The region table holds one reference while the region is published;
//! every copy holds one while it runs.  The last reference unpins the pages
//! (dirtying them when the region was writable) and hands the memory to
//! RCU, which frees it in [`rcu_free`] once no reader can still see it.

use crate::edge::errno::{KResult, EDQUOT, EFAULT, ENOMEM};
use crate::edge::kalloc::{KArray, KBox};
use crate::edge::shim::{Env, OwnerPtr, PagePtr, RcuHead, PAGE_SIZE};
use crate::plan::layout::SegList;
use crate::state::account::AccountRef;
use crate::state::pins::{PinCharge, Pins};
use crate::state::stats::{self, Stats};
use core::ops::Deref;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicUsize, Ordering};

/// `PROT_READ`.
pub const PROT_READ: u32 = 1;
/// `PROT_WRITE`.
pub const PROT_WRITE: u32 = 2;

impl Default for PagePtr {
    fn default() -> Self {
        PagePtr::NULL
    }
}

/// Who created a region and what it allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionAttrs {
    /// `PROT_READ | PROT_WRITE` bits.
    pub prot: u32,
    /// Creation flags (`SINGLEUSE`, `ANY_USER_ACCESS`).
    pub flags: u32,
    /// Id of the creating context.
    pub owner_ctx: u64,
    /// uid of the creating context.
    pub owner_uid: u32,
    /// Where the table charges it (the creating context's account).
    pub account: AccountRef,
}

/// A declared region.
///
/// # Invariants
/// Every entry of `pages` is pinned while `refs > 0`, and `owner` and
/// `pin` hold their charges; `rcu` is the first field, so a pointer to it is a pointer
/// to the region.
#[repr(C)]
pub struct Region {
    rcu: RcuHead,
    refs: AtomicUsize,
    layout: SegList<'static>,
    pages: KArray<PagePtr>,
    attrs: RegionAttrs,
    /// The pinning process and the mm its pages are charged to.
    owner: OwnerPtr,
    /// The pages' charge at every level of the pinner's account.
    pin: PinCharge,
    /// False for the caller's own memory pinned for one copy: it is not a
    /// declared region and stays out of the region counters.
    counted: bool,
}

impl Region {
    /// Pins the pages of `layout` (write intent iff PROT_WRITE) and builds a
    /// region with one reference.  A pin that fails or is partial undoes
    /// what was pinned: EFAULT (ENOMEM if the shim says so, e.g. over the
    /// locked-memory limit).
    /// The pages are charged to the pinner's account in `pins`.
    pub fn create<E: Env>(
        env: &E,
        stats: &Stats,
        pins: &Pins,
        layout: SegList<'static>,
        attrs: RegionAttrs,
    ) -> KResult<KBox<Region>> {
        Self::pin_new(env, stats, pins, layout, attrs, true)
    }

    /// Pins the caller's local segments for one copy that a thread executes
    /// page to page (or PINLOCAL): write intent iff the copy writes them,
    /// and the pages are unpinned dirty then.  Not a declared region: never
    /// published, not counted in `regions`.
    pub fn create_local<E: Env>(
        env: &E,
        stats: &Stats,
        pins: &Pins,
        layout: SegList<'static>,
        written: bool,
    ) -> KResult<KBox<Region>> {
        let attrs = RegionAttrs {
            prot: if written { PROT_WRITE } else { PROT_READ },
            flags: 0,
            owner_ctx: 0,
            owner_uid: 0,
            account: AccountRef::NONE,
        };
        Self::pin_new(env, stats, pins, layout, attrs, false)
    }

    fn pin_new<E: Env>(
        env: &E,
        stats: &Stats,
        pins: &Pins,
        layout: SegList<'static>,
        attrs: RegionAttrs,
        counted: bool,
    ) -> KResult<KBox<Region>> {
        let n = usize::try_from(layout.pages()).map_err(|_| ENOMEM)?;
        // Charged first, as RDMA does: over RLIMIT_MEMLOCK nothing gets
        // pinned, nor is the page array (up to 1 GiB) allocated.  The
        // client sees ENOMEM, as from KNEM; the counter tells the
        // administrator that the limit was the cause.  First at every
        // level of the pinner's account, then the shim's own charge.
        let memlock = |e| {
            if e == EDQUOT {
                stats::add(&stats.pins_refused_memlock, 1);
                ENOMEM
            } else {
                e
            }
        };
        let pin = pins.charge(env, n as u64).map_err(memlock)?;
        let owner = env.owner_new(n as u64).map_err(|e| {
            pin.release(env);
            memlock(e)
        })?;
        // Allocate everything before pinning so that nothing can fail with
        // pages pinned except the pinning itself.
        let region = KArray::<PagePtr>::try_default(n).and_then(|pages| {
            KBox::try_new(Region {
                rcu: RcuHead([0; 16]),
                refs: AtomicUsize::new(1),
                layout,
                pages,
                attrs,
                owner,
                pin: PinCharge::NONE,
                counted,
            })
        });
        let mut region = match region {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: the record just made, used by nothing else.
                unsafe { env.owner_put(owner) };
                pin.release(env);
                return Err(e);
            }
        };
        region.pin = pin;
        let write = attrs.prot & PROT_WRITE != 0;
        let mut pinned = 0usize;
        let r = &mut *region;
        if let Err(e) = pin_all(env, &r.layout, &mut r.pages, write, &mut pinned) {
            // SAFETY: exactly pages[..pinned] were pinned above, and the
            // owner record is not used after its put.
            unsafe {
                env.unpin_pages(r.pages.get(..pinned).unwrap_or(&[]), false);
                env.owner_put(r.owner);
            }
            r.pin.release(env);
            // Nothing is pinned any more: the box may drop without put().
            return Err(e);
        }
        // INVARIANT: every page is pinned and charged; refs is 1 (the
        // creator's).
        if counted {
            stats::add(&stats.regions, 1);
            stats::add(&stats.regions_created, 1);
        }
        stats::add(&stats.pinned_pages, n as u64);
        Ok(region)
    }

    /// The region's segments.
    pub fn layout(&self) -> &SegList<'static> {
        &self.layout
    }

    /// The pinned page at index `i` of the page array.
    pub fn page(&self, i: u64) -> Option<PagePtr> {
        self.pages.get(usize::try_from(i).ok()?).copied()
    }

    /// Protection, flags and owner.
    pub fn attrs(&self) -> &RegionAttrs {
        &self.attrs
    }

    /// The shim's record of the pinning process.
    pub fn owner(&self) -> OwnerPtr {
        self.owner
    }

    /// Takes a reference unless the count already dropped to zero (the
    /// region is dying); usable under RCU on a region found in the table.
    pub fn try_get(&self) -> bool {
        let mut n = self.refs.load(Ordering::Relaxed);
        while n != 0 {
            match self
                .refs
                .compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(cur) => n = cur,
            }
        }
        false
    }

    /// Current reference count (tests and assertions).
    pub fn refcount(&self) -> usize {
        self.refs.load(Ordering::Relaxed)
    }
}

fn pin_all<E: Env>(
    env: &E,
    layout: &SegList,
    pages: &mut [PagePtr],
    write: bool,
    pinned: &mut usize,
) -> KResult<()> {
    for seg in layout.segments().iter().filter(|s| s.len > 0) {
        let first = usize::try_from(seg.first_page).map_err(|_| EFAULT)?;
        let count = usize::try_from(seg.pages()).map_err(|_| EFAULT)?;
        let mut done = 0;
        // The shim may pin fewer pages than asked (one VMA or one batch at a
        // time); ask again for the rest until the segment is pinned.
        while done < count {
            let slot = pages
                .get_mut(first + done..first.saturating_add(count))
                .ok_or(EFAULT)?;
            let start = (seg.base & !(PAGE_SIZE - 1)) + (done as u64) * PAGE_SIZE;
            let got = env.pin_pages(start, write, slot).map_err(|e| {
                if e == ENOMEM {
                    ENOMEM
                } else {
                    EFAULT
                }
            })?;
            if got == 0 || got > count - done {
                return Err(EFAULT);
            }
            *pinned += got;
            done += got;
        }
    }
    Ok(())
}

/// Gives up one reference on a region.  The last one unpins its pages and
/// schedules the memory for [`rcu_free`].  Must be called where sleeping is
/// allowed, outside any RCU read-side section.
///
/// # Safety
/// `r` must point to a live region on which the caller owns a reference,
/// which this call consumes.
pub unsafe fn put<E: Env>(r: NonNull<Region>, env: &E, stats: &Stats) {
    // SAFETY: the caller's reference keeps the region alive until here.
    let region = unsafe { r.as_ref() };
    if region.refs.fetch_sub(1, Ordering::Release) != 1 {
        return;
    }
    fence(Ordering::Acquire);
    let dirty = region.attrs.prot & PROT_WRITE != 0;
    // SAFETY: refs reached zero, so nobody uses the pages any more and no
    // new reference can be taken (try_get refuses zero).
    unsafe { env.unpin_pages(&region.pages, dirty) };
    // SAFETY: the pages it was charged for are unpinned; nothing uses the
    // record afterwards (the region is only freed from here on).
    unsafe { env.owner_put(region.owner) };
    region.pin.release(env);
    if region.counted {
        stats::sub(&stats.regions, 1);
    }
    stats::sub(&stats.pinned_pages, region.pages.len() as u64);
    // SAFETY: the region is unreachable for new readers (a zero count is
    // only reached after the table dropped its reference); rcu is the first
    // field of the repr(C) Region, and we do not touch it afterwards.
    unsafe { env.call_rcu(core::ptr::addr_of_mut!((*r.as_ptr()).rcu)) };
}

/// Frees a region after its grace period (`knem_core_rcu_free`).
///
/// # Safety
/// `head` must be the pointer passed to [`Env::call_rcu`] by [`put`], once.
pub unsafe fn rcu_free(head: *mut RcuHead) {
    // SAFETY: head is the first field of a region leaked from a KBox (see
    // Table::insert), so it is that KBox's pointer; nobody else refers to it.
    drop(unsafe { KBox::from_raw(head.cast::<Region>()) });
}

/// A counted reference to a region, given up on drop.
pub struct RegionRef<'a, E: Env> {
    ptr: NonNull<Region>,
    env: &'a E,
    stats: &'a Stats,
}

impl<'a, E: Env> RegionRef<'a, E> {
    /// Wraps a reference the caller owns.
    ///
    /// # Safety
    /// The caller must own one reference on the live region at `ptr` and
    /// hand it over.
    pub unsafe fn from_owned(ptr: NonNull<Region>, env: &'a E, stats: &'a Stats) -> Self {
        RegionRef { ptr, env, stats }
    }

    /// The raw pointer (identity comparisons).
    pub fn as_ptr(&self) -> *const Region {
        self.ptr.as_ptr()
    }

    /// Gives up the wrapper, keeping the reference: the caller now owns it
    /// and must hand it to [`put`] eventually.
    pub fn into_raw(self) -> NonNull<Region> {
        let p = self.ptr;
        core::mem::forget(self);
        p
    }

    /// Wraps a fresh region (never published) and its only reference.
    pub fn from_box(region: KBox<Region>, env: &'a E, stats: &'a Stats) -> Self {
        // SAFETY: into_raw never returns null; the box held the region's
        // single reference, which moves into the wrapper.
        let ptr = unsafe { NonNull::new_unchecked(KBox::into_raw(region)) };
        RegionRef { ptr, env, stats }
    }
}

impl<E: Env> Deref for RegionRef<'_, E> {
    type Target = Region;
    fn deref(&self) -> &Region {
        // SAFETY: our reference keeps the region alive.
        unsafe { self.ptr.as_ref() }
    }
}

impl<E: Env> Drop for RegionRef<'_, E> {
    fn drop(&mut self) {
        // SAFETY: we own one reference on the region (type invariant).
        unsafe { put(self.ptr, self.env, self.stats) }
    }
}

impl Region {
    /// Gives up the only reference of a region that was never published.
    pub fn discard<E: Env>(region: KBox<Region>, env: &E, stats: &Stats) {
        let p = KBox::into_raw(region);
        // SAFETY: into_raw never returns null; the box was the only owner,
        // holding the single reference, which put consumes.
        unsafe { put(NonNull::new_unchecked(p), env, stats) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::layout::iov;
    use crate::testing::mock::MockEnv;

    fn attrs(prot: u32) -> RegionAttrs {
        RegionAttrs {
            prot,
            flags: 0,
            owner_ctx: 1,
            owner_uid: 0,
            account: AccountRef::NONE,
        }
    }

    #[test]
    fn empty_region_pins_nothing() {
        let (env, stats) = (MockEnv::new(), Stats::new());
        let r = Region::create(
            &env,
            &stats,
            &env.pin_counts,
            SegList::new(&[iov(0x10, 0)]).unwrap(),
            attrs(PROT_READ),
        )
        .unwrap();
        assert_eq!((r.layout().pages(), env.pinned()), (0, 0));
        Region::discard(r, &env, &stats);
        assert_eq!(env.rcu_freed.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn overlapping_segments_pin_each_page_per_use() {
        let (env, stats) = (MockEnv::new(), Stats::new());
        let a = env.map(8192, true);
        let l = SegList::new(&[iov(a + 10, 5000), iov(a, 100)]).unwrap();
        let r = Region::create(
            &env,
            &stats,
            &env.pin_counts,
            l,
            attrs(PROT_READ | PROT_WRITE),
        )
        .unwrap();
        assert_eq!(env.pinned(), 3);
        assert_eq!(stats.snapshot().pinned_pages, 3);
        assert_eq!(r.page(0), r.page(2), "the first page twice");
        Region::discard(r, &env, &stats);
        assert_eq!((env.pinned(), env.dirtied()), (0, 3));
        assert_eq!(stats.snapshot().pinned_pages, 0);
    }

    #[test]
    fn failure_in_a_later_segment_unpins_earlier_ones() {
        let (env, stats) = (MockEnv::new(), Stats::new());
        let a = env.map(8192, true);
        let l = SegList::new(&[iov(a, 8192), iov(0x1000, 1)]).unwrap();
        assert_eq!(
            Region::create(&env, &stats, &env.pin_counts, l, attrs(PROT_READ)).err(),
            Some(EFAULT)
        );
        assert_eq!(env.pinned(), 0);
        assert_eq!(env.dirtied(), 0, "never dirty on the error path");
        assert_eq!(stats.snapshot().regions, 0);
    }

    #[test]
    fn try_get_refuses_a_dying_region() {
        let (env, stats) = (MockEnv::new(), Stats::new());
        let r = Region::create(&env, &stats, &env.pin_counts, SegList::empty(), attrs(0)).unwrap();
        assert!(r.try_get());
        assert_eq!(r.refcount(), 2);
        r.refs.store(0, Ordering::SeqCst);
        assert!(!r.try_get());
        r.refs.store(1, Ordering::SeqCst);
        Region::discard(r, &env, &stats);
    }
}
