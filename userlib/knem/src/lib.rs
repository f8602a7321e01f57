//! Safe userspace client for `/dev/knem`, the KNEM 0x0d interface of
//! knem-rs.
//!
//! A process opens the [`Device`], declares memory as a [`Region`] and hands
//! the region's [`Cookie`] to another process, which then reads or writes
//! that memory with one copy ([`Device::read_into`], [`Device::write_from`])
//! or copies between two regions ([`Device::copy`]).
//!
//! ```no_run
//! use knem::{Device, Region, RegionFlags, Status};
//!
//! let dev = Device::open()?;
//! let data = vec![7u8; 8192];
//! let region = Region::new(&dev, [data.as_slice()], RegionFlags::NONE)?;
//! // ... send region.cookie() to a peer, which does:
//! let peer = Device::open()?;
//! let mut buf = [0u8; 100];
//! let st = peer.read_into(region.cookie(), 4000, &mut buf, None)?;
//! assert_eq!(st, Status::Success);
//! # Ok::<(), knem::Error>(())
//! ```
//!
//! Asynchronous copies report in the fd's status array
//! ([`Device::map_status_array`]): [`Device::copy_async`] between regions,
//! [`Device::read_async`] / [`Device::write_async`] over owned buffers
//! returned by a [`Transfer`], and unsafe raw-iovec variants
//! ([`Device::read_into_async`], ...).  Completions can also be read from
//! the fd itself ([`Device::read_notifications`], [`Device::poll_readable`])
//! and the offload thread placed with [`Device::bind_offload`].
//!
//! Every error names the command and carries the errno ([`Error`]).
#![deny(missing_docs)]

mod asynchronous;
mod device;
mod error;
mod flags;
pub mod iovec;
pub mod notify;
mod offload;
mod region;
mod status;

pub use asynchronous::Transfer;
pub use device::{CopyRequest, Device, Info, InlineCopyRequest};
pub use error::{Error, Result};
pub use flags::{CopyFlags, Protection, RegionFlags};
pub use iovec::Iovec;
pub use knem_abi as abi;
pub use nix::errno::Errno;
pub use offload::{BindOffload, CpuMask};
pub use region::Region;
pub use status::{Status, StatusArray};

use std::fmt;

/// The ABI version this library speaks (`KNEM_ABI_VERSION`).
pub const ABI_VERSION: u32 = knem_abi::KNEM_ABI_VERSION;

/// The opaque handle of a region (`knem_cookie_t`).  The driver never hands
/// out 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cookie(u64);

impl Cookie {
    /// Wrap a raw cookie, e.g. one received from another process.
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The raw value, to send to another process.
    pub const fn as_raw(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Cookie {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_round_trips_and_prints_hex() {
        let c = Cookie::from_raw(0x1234_0000_0001);
        assert_eq!(c.as_raw(), 0x1234_0000_0001);
        assert_eq!(c.to_string(), "0x0000123400000001");
    }
}
