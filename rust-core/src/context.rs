//! One context per O_RDWR open of the device: the owner identity of the
//! regions it creates and its status array.
//!
//! The per-context in-order queue of asynchronous requests (issue 3) will
//! live here too; the shim's per-fd thread will drain it through the core.

use crate::errno::{KResult, EBUSY, EINVAL};
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering::*};

/// Status slot values.
pub use knem_abi::status;

/// A context.
pub struct Context {
    /// Unique id, never reused while the module is loaded.
    pub id: u64,
    /// euid of the opener, owner of every region created here.
    pub uid: u32,
    status: StatusArray,
}

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
    /// A context for a process with euid `uid`.
    pub const fn new(id: u64, uid: u32) -> Context {
        Context {
            id,
            uid,
            status: StatusArray {
                state: AtomicU8::new(ARRAY_NONE),
                ptr: AtomicPtr::new(core::ptr::null_mut()),
                len: AtomicU64::new(0),
            },
        }
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
        let c = Context::new(1, 0);
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
}
