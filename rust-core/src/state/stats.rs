//! Counters, readable as `struct knem_core_stats`.  The fields come from
//! the header's `KNEM_CORE_STATS` list (`knem_abi::knem_core_stats_fields!`),
//! the struct from bindgen; the two are checked against each other here.

use crate::edge::errno::{Errno, EACCES, EBUSY, EFAULT, EINVAL, ENOMEM, ENOTTY, EPERM};
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `struct knem_core_stats` of `knem_core.h`.
pub use crate::edge::shim::sys::knem_core_stats as KnemCoreStats;

/// Adds `n` to a counter.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Subtracts `n` from a counter.
pub fn sub(c: &AtomicU64, n: u64) {
    c.fetch_sub(n, Relaxed);
}

macro_rules! define_stats {
    ($($field:ident),* $(,)?) => {
        /// The live counters, one per field of `struct knem_core_stats`.
        #[derive(Default)]
        #[allow(missing_docs)]
        pub struct Stats {
            $(pub $field: AtomicU64,)*
        }

        impl Stats {
            /// All counters at zero.
            pub const fn new() -> Stats {
                Stats {
                    $($field: AtomicU64::new(0),)*
                }
            }

            /// A snapshot of every counter.
            pub fn snapshot(&self) -> KnemCoreStats {
                KnemCoreStats {
                    $($field: self.$field.load(Relaxed),)*
                }
            }
        }

        // The list and the struct agree field for field, in order.
        const FIELDS: usize = [$(stringify!($field)),*].len();
        const _: () = assert!(core::mem::size_of::<KnemCoreStats>() == FIELDS * 8);
        const _: () = {
            let mut i = 0;
            $(
                assert!(core::mem::offset_of!(KnemCoreStats, $field) == i * 8);
                i += 1;
            )*
            let _ = i;
        };
    };
}

knem_abi::knem_core_stats_fields!(define_stats);

impl Stats {
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
}
