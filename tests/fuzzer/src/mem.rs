//! The buffer arena: every address the fuzzer hands the driver as user
//! memory (region segments, local iovecs, iovec arrays placed at a page
//! edge) lies in one reserved range of fixed 1 MiB slots, or is
//! deliberately invalid.  The driver may write into any region from
//! another process, so a region must never cover the fuzzer's own heap or
//! stack; and an address that was unmapped is refilled with PROT_NONE at
//! once, so a stale address can never come to mean the allocator's memory.

use crate::rng::Rng;

/// Page size on x86-64.
pub const PAGE: usize = 4096;
/// Bytes per slot; a buffer never takes the last page, which stays
/// PROT_NONE as a guard.
pub const SLOT: usize = 1 << 20;
/// Slots per process.
pub const SLOTS: usize = 24;

/// One slot's buffer (len 0: nothing mapped).
#[derive(Debug, Clone, Copy, Default)]
pub struct Buf {
    /// Mapped bytes from the slot's start.
    pub len: usize,
    /// PROT_WRITE (else PROT_READ only).
    pub writable: bool,
}

/// The arena of one process (inherited by its forks).
#[derive(Debug)]
pub struct Arena {
    /// Start of the reservation.
    pub base: usize,
    /// The slots.
    pub bufs: [Buf; SLOTS],
}

fn reserve(addr: usize, len: usize, fixed: bool) -> usize {
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | libc::MAP_NORESERVE
        | if fixed { libc::MAP_FIXED } else { 0 };
    // SAFETY: either a fresh mapping anywhere, or MAP_FIXED over the arena,
    // which only this module manages and nothing else points into.
    let p = unsafe { libc::mmap(addr as *mut _, len, libc::PROT_NONE, flags, -1, 0) };
    assert!(p != libc::MAP_FAILED, "arena mmap failed");
    p as usize
}

impl Arena {
    /// Reserve the address range, all PROT_NONE.
    pub fn new() -> Self {
        let base = reserve(0, SLOTS * SLOT, false);
        Self {
            base,
            bufs: [Buf::default(); SLOTS],
        }
    }

    /// Start address of slot `i`.
    pub fn slot(&self, i: usize) -> usize {
        self.base + i * SLOT
    }

    /// The guard page at the end of slot `i`: never mapped.
    pub fn guard(&self, i: usize) -> usize {
        self.slot(i) + SLOT - PAGE
    }

    /// Map a new buffer in slot `i` (replacing what was there).
    pub fn map(&mut self, i: usize, rng: &mut Rng) {
        self.unmap(i);
        let pages = match rng.below(10) {
            0..=3 => 1,
            4 => 2,
            5 => rng.range(3, 8),
            6 => 16,
            7 => rng.range(9, 64),
            8 => 64,
            _ => rng.range(65, (SLOT / PAGE - 1) as u64),
        } as usize;
        let len = pages * PAGE;
        let writable = rng.chance(85);
        let prot = libc::PROT_READ | if writable { libc::PROT_WRITE } else { 0 };
        let share = if rng.chance(80) {
            libc::MAP_PRIVATE
        } else {
            libc::MAP_SHARED
        };
        let addr = self.slot(i);
        // SAFETY: MAP_FIXED inside our own reservation (see module doc).
        let p = unsafe {
            libc::mmap(
                addr as *mut _,
                len,
                prot,
                share | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            // Out of memory in the guest: keep the slot PROT_NONE.
            reserve(addr, SLOT, true);
            return;
        }
        if writable {
            let byte = rng.next() as u8;
            // SAFETY: the mapping was just made writable, len bytes long.
            unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) };
        }
        self.bufs[i] = Buf { len, writable };
    }

    /// munmap slot `i` (regions may still pin its pages) and refill the
    /// hole with PROT_NONE.
    pub fn unmap(&mut self, i: usize) {
        let addr = self.slot(i);
        // SAFETY: our own reservation.
        unsafe { libc::munmap(addr as *mut _, SLOT) };
        reserve(addr, SLOT, true);
        self.bufs[i] = Buf::default();
    }

    /// Indices of mapped slots (writable only if asked).
    pub fn mapped(&self, writable: bool) -> Vec<usize> {
        (0..SLOTS)
            .filter(|&i| self.bufs[i].len > 0 && (!writable || self.bufs[i].writable))
            .collect()
    }

    /// A mapped (writable if asked) slot, mapping one if there is none.
    pub fn any(&mut self, rng: &mut Rng, writable: bool) -> Option<usize> {
        let m = self.mapped(writable);
        if !m.is_empty() {
            return Some(rng.pick(&m));
        }
        for _ in 0..4 {
            let i = rng.below(SLOTS as u64) as usize;
            self.map(i, rng);
            if self.bufs[i].len > 0 && (!writable || self.bufs[i].writable) {
                return Some(i);
            }
        }
        None
    }
}
