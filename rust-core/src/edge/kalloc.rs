//! Fallible allocation.
//!
//! In the kernel object the global allocator forwards to `knem_shim_alloc`.
//! The core never uses an allocating API that can fail without telling
//! (`Vec::push`, `Box::new`, ...): every object lives in a [`KBox`] or a
//! [`KArray`], whose constructors return `ENOMEM` instead.

use crate::edge::errno::{KResult, ENOMEM};
use alloc::alloc::{alloc, alloc_zeroed, dealloc, Layout};
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

/// Largest single allocation the core asks for.  Larger requests fail with
/// ENOMEM before reaching the shim, so a hostile `iovec_nr` cannot make the
/// kernel allocator warn.
pub const MAX_ALLOC: usize = 1 << 30;

#[cfg(all(not(test), target_os = "none"))]
mod global {
    use super::MAX_ALLOC;
    use crate::edge::shim::sys::{knem_shim_alloc, knem_shim_free};
    use core::alloc::{GlobalAlloc, Layout};

    /// The shim's allocator (8-byte alignment at least).
    struct ShimAlloc;

    // SAFETY: knem_shim_alloc returns NULL or a fresh block of at least
    // `size` bytes aligned to 8; larger alignments are refused.
    unsafe impl GlobalAlloc for ShimAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.align() > 8 || layout.size() > MAX_ALLOC {
                return core::ptr::null_mut();
            }
            // SAFETY: plain allocation call.
            unsafe { knem_shim_alloc(layout.size() as u64).cast() }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
            // SAFETY: ptr came from knem_shim_alloc (GlobalAlloc contract).
            unsafe { knem_shim_free(ptr.cast()) }
        }
    }

    #[global_allocator]
    static GLOBAL: ShimAlloc = ShimAlloc;
}

fn checked_layout(layout: Layout) -> KResult<Layout> {
    fault::record(layout.size());
    if layout.size() == 0 || layout.size() > MAX_ALLOC || fault::inject() {
        return Err(ENOMEM);
    }
    Ok(layout)
}

/// Allocation failure injection for host tests (the n-th allocation of
/// the current thread from now fails), and a count of allocations.
#[cfg(test)]
pub mod fault {
    use core::alloc::Layout;
    use std::cell::{Cell, RefCell};
    use std::vec::Vec;

    std::thread_local! {
        static COUNTDOWN: Cell<Option<usize>> = const { Cell::new(None) };
        static LARGEST: Cell<usize> = const { Cell::new(0) };
        static ATTEMPTS: Cell<u64> = const { Cell::new(0) };
    }

    /// The largest allocation the current thread asked for since the last
    /// call.
    pub fn take_largest() -> usize {
        LARGEST.with(|c| c.replace(0))
    }

    pub(super) fn record(size: usize) {
        LARGEST.with(|c| c.set(c.get().max(size)));
    }

    /// Heap allocations the current thread asked for so far.
    pub fn allocations() -> u64 {
        ATTEMPTS.with(|c| c.get())
    }

    /// Makes the allocation after `n` successful ones fail (None: never).
    pub fn fail_after(n: Option<usize>) {
        COUNTDOWN.with(|c| c.set(n));
    }

    std::thread_local! {
        /// Blocks freed while the quarantine is on.
        static QUARANTINE: RefCell<Option<Vec<(usize, Layout)>>> = const { RefCell::new(None) };
    }

    /// What a quarantined block is filled with when it is freed (SLUB's
    /// POISON_FREE).
    pub const POISON: u8 = 0x6b;

    /// From now on, `KBox`es freed on this thread are filled with
    /// [`POISON`] and kept instead of being given back, so that a write
    /// through a dangling pointer lands in a block [`quarantine_end`]
    /// checks, and a read finds poison, never another object's bytes.
    pub fn quarantine_begin() {
        QUARANTINE.with(|q| *q.borrow_mut() = Some(Vec::new()));
    }

    /// Ends the quarantine of [`quarantine_begin`] and gives its blocks
    /// back: returns how many blocks were freed meanwhile and how many of
    /// them were written to after their free (their poison changed).
    pub fn quarantine_end() -> (usize, usize) {
        let blocks = QUARANTINE
            .with(|q| q.borrow_mut().take())
            .unwrap_or_default();
        let mut written = 0;
        for &(addr, layout) in &blocks {
            // SAFETY: the quarantine kept the block allocated; it is
            // `layout.size()` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, layout.size()) };
            written += bytes.iter().any(|&b| b != POISON) as usize;
            // SAFETY: allocated by the global allocator with `layout`, and
            // kept (not freed) by the quarantine until now.
            unsafe { alloc::alloc::dealloc(addr as *mut u8, layout) };
        }
        (blocks.len(), written)
    }

    /// Whether the quarantine keeps the block `p` being freed (it is then
    /// poisoned, and [`quarantine_end`] frees it).
    pub(super) fn quarantine(p: *mut u8, layout: Layout) -> bool {
        QUARANTINE.with(|q| match q.borrow_mut().as_mut() {
            Some(blocks) => {
                // SAFETY: `p` is a block of `layout.size()` bytes that its
                // owner is freeing and no longer uses.
                unsafe { p.write_bytes(POISON, layout.size()) };
                blocks.push((p as usize, layout));
                true
            }
            None => false,
        })
    }

    pub(super) fn inject() -> bool {
        ATTEMPTS.with(|c| c.set(c.get() + 1));
        COUNTDOWN.with(|c| match c.get() {
            Some(0) => {
                c.set(None);
                true
            }
            Some(n) => {
                c.set(Some(n - 1));
                false
            }
            None => false,
        })
    }
}

#[cfg(not(test))]
mod fault {
    pub(super) const fn inject() -> bool {
        false
    }

    pub(super) const fn record(_size: usize) {}

    pub(super) const fn quarantine(_p: *mut u8, _layout: core::alloc::Layout) -> bool {
        false
    }
}

/// An owned heap object, allocated fallibly.
///
/// # Invariants
/// `ptr` points to an initialised `T` in a block of `Layout::new::<T>()`
/// from the global allocator, owned by this box.
pub struct KBox<T>(NonNull<T>);

// SAFETY: KBox owns its T like Box does.
unsafe impl<T: Send> Send for KBox<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for KBox<T> {}

impl<T> KBox<T> {
    /// Moves `value` to the heap, or ENOMEM.
    pub fn try_new(value: T) -> KResult<Self> {
        let layout = checked_layout(Layout::new::<T>())?;
        // SAFETY: layout has a non-zero size.
        let p = unsafe { alloc(layout) }.cast::<T>();
        let p = NonNull::new(p).ok_or(ENOMEM)?;
        // SAFETY: p is a fresh, suitably aligned block for a T.
        unsafe { p.as_ptr().write(value) };
        // INVARIANT: p holds an initialised T.
        Ok(KBox(p))
    }

    /// Allocates a zero-filled T, or ENOMEM.
    ///
    /// # Safety
    /// The all-zero bit pattern must be a valid `T`.
    pub unsafe fn try_new_zeroed() -> KResult<Self> {
        let layout = checked_layout(Layout::new::<T>())?;
        // SAFETY: layout has a non-zero size.
        let p = unsafe { alloc_zeroed(layout) }.cast::<T>();
        // INVARIANT: zeroes are a valid T (caller's obligation).
        NonNull::new(p).map(KBox).ok_or(ENOMEM)
    }

    /// Gives up ownership; undo with [`KBox::from_raw`].
    pub fn into_raw(b: Self) -> *mut T {
        let p = b.0.as_ptr();
        core::mem::forget(b);
        p
    }

    /// Takes back ownership of a pointer from [`KBox::into_raw`].
    ///
    /// # Safety
    /// `p` must come from `into_raw` and not have been taken back before.
    pub unsafe fn from_raw(p: *mut T) -> Self {
        // SAFETY: into_raw never returns null.
        KBox(unsafe { NonNull::new_unchecked(p) })
    }
}

impl<T> Deref for KBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: by the invariant the pointee is a live T we own.
        unsafe { self.0.as_ref() }
    }
}

impl<T> DerefMut for KBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: by the invariant the pointee is a live T we own uniquely.
        unsafe { self.0.as_mut() }
    }
}

impl<T> Drop for KBox<T> {
    fn drop(&mut self) {
        // SAFETY: by the invariant we own an initialised T allocated with
        // this layout; it is dropped and freed exactly once.
        unsafe {
            core::ptr::drop_in_place(self.0.as_ptr());
            if !fault::quarantine(self.0.as_ptr().cast(), Layout::new::<T>()) {
                dealloc(self.0.as_ptr().cast(), Layout::new::<T>());
            }
        }
    }
}

/// A fixed-length heap array, allocated fallibly.
///
/// # Invariants
/// `ptr` points to `len` initialised `T`s in a block of
/// `Layout::array::<T>(len)` owned by this array, or is dangling when the
/// block would be empty.
pub struct KArray<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: KArray owns its elements like Vec does.
unsafe impl<T: Send> Send for KArray<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for KArray<T> {}

impl<T> KArray<T> {
    /// An empty array (no allocation).
    pub const fn empty() -> Self {
        KArray {
            ptr: NonNull::dangling(),
            len: 0,
        }
    }

    /// `len` elements made by `f(index)`, or ENOMEM.
    pub fn try_from_fn(len: usize, mut f: impl FnMut(usize) -> T) -> KResult<Self> {
        let layout = Layout::array::<T>(len).map_err(|_| ENOMEM)?;
        if layout.size() == 0 {
            // Zero-sized: a dangling pointer is valid for every element.
            let a: KArray<T> = KArray {
                ptr: NonNull::dangling(),
                len,
            };
            for i in 0..len {
                // SAFETY: writing a ZST through a dangling, aligned pointer.
                unsafe { a.ptr.as_ptr().add(i).write(f(i)) };
            }
            return Ok(a);
        }
        let layout = checked_layout(layout)?;
        // SAFETY: layout has a non-zero size.
        let p = NonNull::new(unsafe { alloc(layout) }.cast::<T>()).ok_or(ENOMEM)?;
        for i in 0..len {
            // SAFETY: i < len, inside the fresh block; f cannot fail.
            unsafe { p.as_ptr().add(i).write(f(i)) };
        }
        // INVARIANT: every element was written above.
        Ok(KArray { ptr: p, len })
    }
}

impl<T: Copy + Default> KArray<T> {
    /// `len` default elements, or ENOMEM.
    pub fn try_default(len: usize) -> KResult<Self> {
        Self::try_from_fn(len, |_| T::default())
    }
}

impl<T> Deref for KArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: by the invariant, len initialised elements at ptr.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for KArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: by the invariant, len initialised elements we own uniquely.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for KArray<T> {
    fn drop(&mut self) {
        // SAFETY: by the invariant the elements are initialised and owned;
        // the block (if any) was allocated with this layout.
        unsafe {
            core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            if let Ok(layout) = Layout::array::<T>(self.len) {
                if layout.size() != 0 {
                    dealloc(self.ptr.as_ptr().cast(), layout);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karray_from_fn_and_drop() {
        let a = KArray::try_from_fn(5, |i| i * 2).unwrap();
        assert_eq!(&a[..], &[0, 2, 4, 6, 8]);
        let e: KArray<u64> = KArray::try_default(0).unwrap();
        assert!(e.is_empty());
    }

    #[test]
    fn karray_too_large_is_enomem() {
        assert_eq!(
            KArray::<u64>::try_default(usize::MAX / 4).err(),
            Some(ENOMEM)
        );
        assert_eq!(KArray::<u64>::try_default(MAX_ALLOC).err(), Some(ENOMEM));
    }

    #[test]
    fn kbox_roundtrip() {
        let b = KBox::try_new([7u64; 4]).unwrap();
        let p = KBox::into_raw(b);
        // SAFETY: p came from into_raw just above.
        let b = unsafe { KBox::from_raw(p) };
        assert_eq!(b[3], 7);
    }
}
