//! Linux errno values and the core's result type.
//!
//! Errors travel as positive [`Errno`] values inside the core and become a
//! negative `long` in exactly one place, the FFI edge.

/// A Linux errno (positive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

/// Operation not permitted.
pub const EPERM: Errno = Errno(1);
/// I/O error: the shim's DMA batch failed for good (a wait for the
/// engine timed out, or the caller is dying); the copy stops, FAILED.
pub const EIO: Errno = Errno(5);
/// Bad file descriptor.
pub const EBADF: Errno = Errno(9);
/// Out of memory.
pub const ENOMEM: Errno = Errno(12);
/// Permission denied.
pub const EACCES: Errno = Errno(13);
/// Bad address.
pub const EFAULT: Errno = Errno(14);
/// Device or resource busy.
pub const EBUSY: Errno = Errno(16);
/// Invalid argument.
pub const EINVAL: Errno = Errno(22);
/// Inappropriate ioctl for device.
pub const ENOTTY: Errno = Errno(25);
/// Quota exceeded: the shim's owner_new over RLIMIT_MEMLOCK, which the
/// core counts and turns into ENOMEM (what KNEM returns).
pub const EDQUOT: Errno = Errno(122);

impl Errno {
    /// The negative value returned to the shim.
    pub const fn to_neg(self) -> i64 {
        -(self.0 as i64)
    }

    /// Converts a negative return value of a shim function.
    pub const fn from_neg(v: i64) -> Errno {
        Errno(-v as i32)
    }
}

/// Result of a core operation.
pub type KResult<T> = Result<T, Errno>;
