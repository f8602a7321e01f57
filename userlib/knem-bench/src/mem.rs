//! Anonymous memory mappings: private pools (each process's own buffers) and
//! shared ones (control blocks and the double-copy chunk buffers).

use crate::error::{Context, Result};
use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// Page size assumed for offsets and per-page costs.
pub const PAGE: usize = 4096;

/// An anonymous mapping, unmapped on drop.
///
/// # Invariants
/// `ptr` points to `len` bytes mapped readable and writable for the life of
/// the value (and of any forked copy of the process that inherited it).
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize, flags: MapFlags, what: &str) -> Result<Self> {
        let len = len.max(1).div_ceil(PAGE) * PAGE;
        let nz = NonZeroUsize::new(len).expect("len is at least one page");
        // SAFETY: an anonymous mapping at an address the kernel chooses
        // cannot alias any Rust object.
        let p = unsafe {
            mmap_anonymous(
                None,
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                flags,
            )
        }
        .ctx(format_args!("mmap of {len} bytes for {what}"))?;
        // INVARIANT: mmap succeeded for `len` bytes, read/write.
        Ok(Mapping { ptr: p.cast(), len })
    }

    /// A private mapping (copy-on-write across fork: touch it after forking).
    pub fn private(len: usize) -> Result<Self> {
        Self::new(len, MapFlags::MAP_PRIVATE, "a buffer pool")
    }

    /// A mapping shared with every process forked after its creation.
    pub fn shared(len: usize) -> Result<Self> {
        Self::new(len, MapFlags::MAP_SHARED, "shared memory")
    }

    /// Start of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg_attr(not(test), allow(dead_code))]
    /// The bytes. Other processes may write a shared mapping concurrently;
    /// callers use this only where the protocol says nobody else does.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the invariant guarantees `len` readable bytes.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    /// The bytes, mutably (same caveat as [`Mapping::bytes`]).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the invariant guarantees `len` writable bytes and `&mut
        // self` excludes other Rust references in this process.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }

    /// Fault every page in and fill it with a pattern derived from `seed`
    /// (so that copies move real, distinguishable data).
    pub fn fill(&mut self, seed: u8) {
        fill_pattern(self.bytes_mut(), seed);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing borrows it any more.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// The byte expected at `index` of a buffer filled with `seed`.
pub fn pattern_byte(index: usize, seed: u8) -> u8 {
    ((index / 7) as u8) ^ ((index >> 12) as u8).wrapping_mul(31) ^ seed
}

/// Fill `buf` with the pattern of `seed`.
pub fn fill_pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(i, seed);
    }
}

/// Copy `len` bytes between raw buffers (the libc `memcpy` the mechanisms
/// are compared with).
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and the two
/// ranges must not overlap.
#[inline(never)]
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: forwarded to the caller.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
    std::hint::black_box(dst);
}
