//! Request status: the `current_status` of a copy and the slots of the
//! status array a process maps from its fd.

use crate::error::{Error, Result};
use knem_abi::status as raw;
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

/// The state of a request (`enum knem_status_e`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Not completed yet (asynchronous requests; also a slot's initial value).
    Pending,
    /// Completed; every byte in range was copied (a short copy is a success).
    Success,
    /// A fault happened while moving the data.
    Failed,
    /// A value the ABI does not define, kept for diagnosis.
    Unknown(u32),
}

impl Status {
    /// Decode a `current_status` field or a slot.
    pub const fn from_raw(v: u32) -> Self {
        if v == raw::PENDING as u32 {
            Status::Pending
        } else if v == raw::SUCCESS as u32 {
            Status::Success
        } else if v == raw::FAILED as u32 {
            Status::Failed
        } else {
            Status::Unknown(v)
        }
    }

    /// The ABI value.
    pub const fn to_raw(self) -> u32 {
        match self {
            Status::Pending => raw::PENDING as u32,
            Status::Success => raw::SUCCESS as u32,
            Status::Failed => raw::FAILED as u32,
            Status::Unknown(v) => v,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Pending => f.write_str("PENDING"),
            Status::Success => f.write_str("SUCCESS"),
            Status::Failed => f.write_str("FAILED"),
            Status::Unknown(v) => write!(f, "unknown status {v}"),
        }
    }
}

/// The status array of a fd: `len` one-byte slots the driver writes when an
/// asynchronous request completes, mapped at file offset 0.  Unmapped on
/// drop.
///
/// # Invariants
///
/// `ptr` is the start of a live shared mapping of `len` bytes that this
/// value owns.
pub struct StatusArray {
    ptr: NonNull<u8>,
    len: usize,
    /// [`crate::Device`] identity of the fd it was mapped from.
    owner: u64,
    /// Slots held by pending owned transfers ([`crate::Transfer`]).
    claimed: Mutex<HashSet<u32>>,
}

// SAFETY: the mapping is plain shared memory owned by this value; slots are
// read with volatile loads, so sharing between threads is as safe as the
// kernel writing them concurrently already is.
unsafe impl Send for StatusArray {}
// SAFETY: as above; no method mutates through `&self` except by volatile
// stores of whole bytes.
unsafe impl Sync for StatusArray {}

impl StatusArray {
    /// Map `len` slots of the device open on `fd`.
    pub(crate) fn map(fd: impl AsFd, len: usize, owner: u64) -> Result<Self> {
        let n = NonZeroUsize::new(len).ok_or(Error::Invalid {
            call: "mmap",
            what: "a status array needs at least one slot",
        })?;
        // SAFETY: a fresh mapping at an address the kernel picks replaces
        // nothing of ours.
        let ptr = unsafe {
            mmap(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                knem_abi::KNEM_STATUS_ARRAY_FILE_OFFSET as i64,
            )
        }
        .map_err(|errno| Error::Mmap { errno })?;
        // INVARIANT: mmap succeeded for len bytes and we own the mapping.
        Ok(Self {
            ptr: ptr.cast(),
            len,
            owner,
            claimed: Mutex::new(HashSet::new()),
        })
    }

    /// An array over memory mapped by a test, owned from here on.
    #[cfg(test)]
    pub(crate) fn from_raw_parts(ptr: NonNull<u8>, len: usize, owner: u64) -> Self {
        Self {
            ptr,
            len,
            owner,
            claimed: Mutex::new(HashSet::new()),
        }
    }

    /// Write a slot the way the driver does, for tests.
    #[cfg(test)]
    pub(crate) fn set_raw_for_test(&self, i: usize, v: u8) {
        assert!(i < self.len);
        // SAFETY: i < len, the mapping is live and writable.
        unsafe { self.ptr.as_ptr().add(i).write_volatile(v) };
    }

    /// Identity of the device this array was mapped from.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Reserve slot `i` for an owned transfer; false if it is taken.
    pub(crate) fn claim(&self, i: u32) -> bool {
        self.claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(i)
    }

    /// Give slot `i` back.
    pub(crate) fn release(&self, i: u32) {
        self.claimed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&i);
    }

    /// Slot `i` decoded, with acquire ordering once it left PENDING: the
    /// data of the request that completed it is visible after this returns
    /// `Some(status)` other than PENDING.
    pub fn get_acquire(&self, i: usize) -> Option<Status> {
        let s = self.get(i)?;
        if s != Status::Pending {
            fence(Ordering::Acquire);
        }
        Some(s)
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no slots (never true for a mapped array).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The raw byte of slot `i`, read once with a volatile load; `None` past
    /// the end.
    pub fn raw(&self, i: usize) -> Option<u8> {
        if i >= self.len {
            return None;
        }
        // SAFETY: i < len and the mapping is live (type invariant).
        Some(unsafe { self.ptr.as_ptr().add(i).read_volatile() })
    }

    /// Slot `i` decoded; `None` past the end.
    pub fn get(&self, i: usize) -> Option<Status> {
        self.raw(i).map(|v| Status::from_raw(v.into()))
    }

    /// Reset slot `i` to PENDING (clients do this before reusing a slot).
    /// Returns false past the end.
    pub fn reset(&self, i: usize) -> bool {
        if i >= self.len {
            return false;
        }
        // SAFETY: i < len, the mapping is live and writable.
        unsafe { self.ptr.as_ptr().add(i).write_volatile(raw::PENDING) };
        true
    }

    /// Index and value of the first slot that is not PENDING.
    pub fn first_non_pending(&self) -> Option<(usize, u8)> {
        (0..self.len)
            .map(|i| (i, self.raw(i).unwrap_or(0)))
            .find(|&(_, v)| v != raw::PENDING)
    }
}

impl Drop for StatusArray {
    fn drop(&mut self) {
        // SAFETY: we own the mapping (type invariant) and nothing borrows it
        // past this point.  Failure leaves a mapping behind, nothing worse.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

impl fmt::Debug for StatusArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StatusArray")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips() {
        for v in 0..5 {
            assert_eq!(Status::from_raw(v).to_raw(), v);
        }
        assert_eq!(Status::from_raw(1), Status::Success);
        assert_eq!(Status::from_raw(2).to_string(), "FAILED");
        assert_eq!(Status::from_raw(9).to_string(), "unknown status 9");
    }
}
