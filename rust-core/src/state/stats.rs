//! Counters, readable as `struct knem_core_stats`.

use crate::edge::errno::{Errno, EACCES, EBUSY, EFAULT, EINVAL, ENOMEM, ENOTTY, EPERM};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `struct knem_core_stats` of `knem_core.h`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct KnemCoreStats {
    pub contexts: u64,
    pub regions: u64,
    pub pinned_pages: u64,
    pub regions_created: u64,
    pub bytes_inline_read: u64,
    pub bytes_inline_write: u64,
    pub bytes_region_copy: u64,
    pub bytes_async: u64,
    pub copies_failed: u64,
    pub err_einval: u64,
    pub err_eperm: u64,
    pub err_eacces: u64,
    pub err_efault: u64,
    pub err_enomem: u64,
    pub err_ebusy: u64,
    pub err_enotty: u64,
    pub err_other: u64,
}

const _: () = assert!(core::mem::size_of::<KnemCoreStats>() == 17 * 8);

/// The live counters.
#[derive(Default)]
#[allow(missing_docs)]
pub struct Stats {
    pub contexts: AtomicU64,
    pub regions: AtomicU64,
    pub pinned_pages: AtomicU64,
    pub regions_created: AtomicU64,
    pub bytes_inline_read: AtomicU64,
    pub bytes_inline_write: AtomicU64,
    pub bytes_region_copy: AtomicU64,
    pub bytes_async: AtomicU64,
    pub copies_failed: AtomicU64,
    pub err_einval: AtomicU64,
    pub err_eperm: AtomicU64,
    pub err_eacces: AtomicU64,
    pub err_efault: AtomicU64,
    pub err_enomem: AtomicU64,
    pub err_ebusy: AtomicU64,
    pub err_enotty: AtomicU64,
    pub err_other: AtomicU64,
}

/// Adds `n` to a counter.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Subtracts `n` from a counter.
pub fn sub(c: &AtomicU64, n: u64) {
    c.fetch_sub(n, Relaxed);
}

impl Stats {
    /// All counters at zero.
    pub const fn new() -> Stats {
        Stats {
            contexts: AtomicU64::new(0),
            regions: AtomicU64::new(0),
            pinned_pages: AtomicU64::new(0),
            regions_created: AtomicU64::new(0),
            bytes_inline_read: AtomicU64::new(0),
            bytes_inline_write: AtomicU64::new(0),
            bytes_region_copy: AtomicU64::new(0),
            bytes_async: AtomicU64::new(0),
            copies_failed: AtomicU64::new(0),
            err_einval: AtomicU64::new(0),
            err_eperm: AtomicU64::new(0),
            err_eacces: AtomicU64::new(0),
            err_efault: AtomicU64::new(0),
            err_enomem: AtomicU64::new(0),
            err_ebusy: AtomicU64::new(0),
            err_enotty: AtomicU64::new(0),
            err_other: AtomicU64::new(0),
        }
    }

    /// Counts a failed ioctl.
    pub fn count_error(&self, e: Errno) {
        let c = match e {
            EINVAL => &self.err_einval,
            EPERM => &self.err_eperm,
            EACCES => &self.err_eacces,
            EFAULT => &self.err_efault,
            ENOMEM => &self.err_enomem,
            EBUSY => &self.err_ebusy,
            ENOTTY => &self.err_enotty,
            _ => &self.err_other,
        };
        add(c, 1);
    }

    /// A snapshot of every counter.
    pub fn snapshot(&self) -> KnemCoreStats {
        let g = |c: &AtomicU64| c.load(Relaxed);
        KnemCoreStats {
            contexts: g(&self.contexts),
            regions: g(&self.regions),
            pinned_pages: g(&self.pinned_pages),
            regions_created: g(&self.regions_created),
            bytes_inline_read: g(&self.bytes_inline_read),
            bytes_inline_write: g(&self.bytes_inline_write),
            bytes_region_copy: g(&self.bytes_region_copy),
            bytes_async: g(&self.bytes_async),
            copies_failed: g(&self.copies_failed),
            err_einval: g(&self.err_einval),
            err_eperm: g(&self.err_eperm),
            err_eacces: g(&self.err_eacces),
            err_efault: g(&self.err_efault),
            err_enomem: g(&self.err_enomem),
            err_ebusy: g(&self.err_ebusy),
            err_enotty: g(&self.err_enotty),
            err_other: g(&self.err_other),
        }
    }
}
