//! Flag words of the ABI as small typed wrappers.
//!
//! Each wrapper keeps the raw `u32` it was built from, including bits no ABI
//! version defines: tests need to send those to check that the driver
//! refuses them.

use knem_abi as abi;
use std::ops::{BitOr, BitOrAssign};

macro_rules! flag_word {
    ($(#[$doc:meta])* $name:ident { $($(#[$cdoc:meta])* $c:ident = $v:expr;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// No flag.
            pub const NONE: Self = Self(0);
            $($(#[$cdoc])* pub const $c: Self = Self($v);)*

            /// The raw bits, exactly as given, defined or not.
            pub const fn from_bits_retain(bits: u32) -> Self {
                Self(bits)
            }

            /// The raw value sent to the driver.
            pub const fn bits(self) -> u32 {
                self.0
            }

            /// Whether every bit of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
        }

        impl BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }

        impl BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }
    };
}

flag_word!(
    /// Flags of CREATE_REGION (`KNEM_FLAG_ANY_CREATE_MASK`).
    RegionFlags {
        /// `KNEM_FLAG_SINGLEUSE`: the region disappears at its first copy.
        SINGLE_USE = abi::KNEM_FLAG_SINGLEUSE;
        /// `KNEM_FLAG_ANY_USER_ACCESS`: processes of other uids may use it.
        ANY_USER_ACCESS = abi::KNEM_FLAG_ANY_USER_ACCESS;
    }
);

flag_word!(
    /// Flags of the copy commands (`KNEM_FLAG_ANY_COPY_MASK`).
    CopyFlags {
        /// `KNEM_FLAG_DMA`: offload to a DMA engine if there is one.
        DMA = abi::KNEM_FLAG_DMA;
        /// `KNEM_FLAG_ASYNCDMACOMPLETE`: report completion in the status slot.
        ASYNC_DMA_COMPLETE = abi::KNEM_FLAG_ASYNCDMACOMPLETE;
        /// `KNEM_FLAG_DMATHREAD`: submit DMA from the offload thread.
        DMA_THREAD = abi::KNEM_FLAG_DMATHREAD;
        /// `KNEM_FLAG_MEMCPYTHREAD`: copy on the offload thread.
        MEMCPY_THREAD = abi::KNEM_FLAG_MEMCPYTHREAD;
        /// `KNEM_FLAG_PINLOCAL`: pin the caller's pages too.
        PIN_LOCAL = abi::KNEM_FLAG_PINLOCAL;
        /// `KNEM_FLAG_NOTIFY_FD`: queue the slot index on the fd when done.
        NOTIFY_FD = abi::KNEM_FLAG_NOTIFY_FD;
    }
);

impl CopyFlags {
    /// `KNEM_FLAG_ANY_THREAD_MASK`: the flags that run a copy on the fd's
    /// offload thread.
    pub const ANY_THREAD: Self = Self(abi::KNEM_FLAG_ANY_THREAD_MASK);
    /// `KNEM_FLAG_ANY_ASYNC_MASK`: the flags that make a request report in
    /// the status array.
    pub const ANY_ASYNC: Self = Self(abi::KNEM_FLAG_ANY_ASYNC_MASK);

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether a request with these flags reports in the status array
    /// (any of ASYNCDMACOMPLETE, DMATHREAD, MEMCPYTHREAD).
    pub const fn is_async(self) -> bool {
        self.intersects(Self::ANY_ASYNC)
    }

    /// Whether a request with these flags runs on the offload thread (any
    /// of DMATHREAD, MEMCPYTHREAD), the only requests NOTIFY_FD may ride on.
    pub const fn is_threaded(self) -> bool {
        self.intersects(Self::ANY_THREAD)
    }
}

impl std::fmt::Display for CopyFlags {
    /// The `KNEM_FLAG_` names without the prefix, joined by `|`, with any
    /// undefined bits in hex; `0` when empty.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const NAMES: [(u32, &str); 6] = [
            (abi::KNEM_FLAG_DMA, "DMA"),
            (abi::KNEM_FLAG_ASYNCDMACOMPLETE, "ASYNCDMACOMPLETE"),
            (abi::KNEM_FLAG_DMATHREAD, "DMATHREAD"),
            (abi::KNEM_FLAG_MEMCPYTHREAD, "MEMCPYTHREAD"),
            (abi::KNEM_FLAG_PINLOCAL, "PINLOCAL"),
            (abi::KNEM_FLAG_NOTIFY_FD, "NOTIFY_FD"),
        ];
        if self.0 == 0 {
            return f.write_str("0");
        }
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in NAMES {
            if rest & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                rest &= !bit;
                first = false;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

flag_word!(
    /// What other processes may do with a region (`protection` field, the
    /// `PROT_READ`/`PROT_WRITE` bits of mmap).
    Protection {
        /// Others may read the region.
        READ = nix::libc::PROT_READ as u32;
        /// Others may write the region.
        WRITE = nix::libc::PROT_WRITE as u32;
        /// Both.
        READ_WRITE = (nix::libc::PROT_READ | nix::libc::PROT_WRITE) as u32;
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_the_abi() {
        assert_eq!(RegionFlags::SINGLE_USE.bits(), 1 << 5);
        assert_eq!(RegionFlags::ANY_USER_ACCESS.bits(), 1 << 7);
        assert_eq!(CopyFlags::NOTIFY_FD.bits(), 1 << 6);
        assert_eq!(Protection::READ_WRITE, Protection::READ | Protection::WRITE);
        assert_eq!(Protection::READ_WRITE.bits(), 3);
    }

    #[test]
    fn async_classification() {
        assert!(!CopyFlags::NONE.is_async());
        assert!(!(CopyFlags::PIN_LOCAL | CopyFlags::DMA).is_async());
        assert!(CopyFlags::ASYNC_DMA_COMPLETE.is_async());
        assert!(!CopyFlags::ASYNC_DMA_COMPLETE.is_threaded());
        for f in [CopyFlags::MEMCPY_THREAD, CopyFlags::DMA_THREAD] {
            assert!(f.is_async() && f.is_threaded());
        }
        assert_eq!(CopyFlags::ANY_THREAD.bits(), 0x0c);
        assert_eq!(CopyFlags::ANY_ASYNC.bits(), 0x0e);
        assert!(!CopyFlags::NOTIFY_FD.is_async());
    }

    #[test]
    fn copy_flags_display_names() {
        assert_eq!(CopyFlags::NONE.to_string(), "0");
        assert_eq!(
            (CopyFlags::MEMCPY_THREAD | CopyFlags::NOTIFY_FD).to_string(),
            "MEMCPYTHREAD|NOTIFY_FD"
        );
        assert_eq!(
            CopyFlags::from_bits_retain((1 << 9) | 1).to_string(),
            "DMA|0x200"
        );
        assert_eq!(CopyFlags::from_bits_retain(1 << 5).to_string(), "0x20");
    }

    #[test]
    fn undefined_bits_survive() {
        let f = RegionFlags::from_bits_retain(1 << 8) | RegionFlags::SINGLE_USE;
        assert_eq!(f.bits(), (1 << 8) | (1 << 5));
        assert!(f.contains(RegionFlags::SINGLE_USE));
        assert!(!f.contains(RegionFlags::ANY_USER_ACCESS));
    }
}
