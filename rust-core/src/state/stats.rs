//! Counters, readable as `struct knem_core_stats`.  The fields come from
//! the header's `KNEM_CORE_STATS` list (`knem_abi::knem_core_stats_fields!`),
//! the struct from bindgen; the two are checked against each other here.
//!
//! The values live in the shim, one slot per counter per CPU
//! (`knem_shim_stat_add`), and are summed only when read: a copy on one CPU
//! never writes a cache line another CPU's copy writes.  A counter here is
//! only the index of its slot.  Gauges (live regions, pinned pages) go
//! down on whichever CPU releases, so a CPU's slot is a signed delta kept
//! in a u64 by wrapping arithmetic; the sum over CPUs is the value.
//!
//! Host builds (tests, feature `mock`) stand in for the per-CPU slots with
//! one atomic per counter, and count every add (`adds`), so tests can
//! check which operations touch counters.

use crate::edge::errno::{Errno, EACCES, EBUSY, EFAULT, EINVAL, ENOMEM, ENOTTY, EPERM};

/// `struct knem_core_stats` of `knem_core.h`.
pub use crate::edge::shim::sys::knem_core_stats as KnemCoreStats;

/// One counter: the index of its per-CPU slot in the shim.
pub struct Counter {
    idx: u32,
    #[cfg(any(test, feature = "mock"))]
    value: core::sync::atomic::AtomicU64,
}

impl Counter {
    const fn new(idx: u32) -> Counter {
        Counter {
            idx,
            #[cfg(any(test, feature = "mock"))]
            value: core::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The slot's index in `struct knem_core_stats`, in u64 fields.
    pub fn index(&self) -> u32 {
        self.idx
    }

    #[cfg(not(any(test, feature = "mock")))]
    fn add_wrapping(&self, delta: u64) {
        // SAFETY: idx is a field index of struct knem_core_stats (checked
        // at compile time below); the shim's add does not sleep or fail.
        unsafe { crate::edge::shim::sys::knem_shim_stat_add(self.idx, delta) }
    }

    #[cfg(any(test, feature = "mock"))]
    fn add_wrapping(&self, delta: u64) {
        self.value
            .fetch_add(delta, core::sync::atomic::Ordering::Relaxed);
        probe::count_add();
    }

    /// The value as the shim's sum reports it: a transiently negative sum
    /// (a release counted before its creation) reads as 0.
    #[cfg(any(test, feature = "mock"))]
    fn read(&self) -> u64 {
        let v = self.value.load(core::sync::atomic::Ordering::Relaxed);
        if (v as i64) < 0 {
            0
        } else {
            v
        }
    }
}

// In the kernel a counter holds nothing a copy could write: its values
// are the shim's per-CPU slots.
#[cfg(not(any(test, feature = "mock")))]
const _: () = assert!(core::mem::size_of::<Counter>() == core::mem::size_of::<u32>());

/// Adds `n` to a counter.
pub fn add(c: &Counter, n: u64) {
    c.add_wrapping(n);
}

/// Subtracts `n` from a counter (a gauge).
pub fn sub(c: &Counter, n: u64) {
    c.add_wrapping(n.wrapping_neg());
}

macro_rules! define_stats {
    ($($field:ident),* $(,)?) => {
        /// The counters, one per field of `struct knem_core_stats`.
        #[allow(missing_docs)]
        pub struct Stats {
            $(pub $field: Counter,)*
        }

        #[allow(non_camel_case_types)]
        #[repr(u32)]
        enum Index {
            $($field,)*
        }

        impl Stats {
            /// The counters (all at zero on the host).
            pub const fn new() -> Stats {
                Stats {
                    $($field: Counter::new(Index::$field as u32),)*
                }
            }

            /// A snapshot of every counter (host builds; the kernel's
            /// sums are the shim's).
            #[cfg(any(test, feature = "mock"))]
            pub fn snapshot(&self) -> KnemCoreStats {
                KnemCoreStats {
                    $($field: self.$field.read(),)*
                }
            }
        }

        // The list and the struct agree field for field, in order, so a
        // counter's index is its field's place in the struct.
        const FIELDS: usize = [$(stringify!($field)),*].len();
        const _: () = assert!(core::mem::size_of::<KnemCoreStats>() == FIELDS * 8);
        const _: () = {
            $(
                assert!(core::mem::offset_of!(KnemCoreStats, $field) == Index::$field as usize * 8);
            )*
        };
    };
}

knem_abi::knem_core_stats_fields!(define_stats);

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

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

/// Host builds: how many counter adds the current thread made (each one
/// a write to a per-CPU slot in the kernel).
#[cfg(any(test, feature = "mock"))]
pub mod probe {
    use std::cell::Cell;

    std::thread_local! {
        static ADDS: Cell<u64> = const { Cell::new(0) };
    }

    pub(super) fn count_add() {
        ADDS.with(|c| c.set(c.get() + 1));
    }

    /// Counter adds made by this thread so far.
    pub fn adds() -> u64 {
        ADDS.with(|c| c.get())
    }
}
