//! One transport abstraction for single-copy (and fallback double-copy)
//! transfers between local processes.
//!
//! A process *exposes* a buffer and gets an [`Exposure`] whose
//! [`Descriptor`] (32 bytes, plain data) it sends to its peers; a peer then
//! reads from or writes into the exposed buffer with [`Transport::read`] /
//! [`Transport::write`] at any offset.  Three implementations:
//!
//! * [`Kind::Knem`]: the module; the exposure is a region, the descriptor
//!   carries its cookie.
//! * [`Kind::Cma`]: `process_vm_readv`/`writev`; the descriptor carries the
//!   pid, address and length of the buffer.
//! * [`Kind::Shm`]: double copy through a shared segment in `/dev/shm`,
//!   the owner's copy in and the peers' copies out pipelined chunk by chunk
//!   ([`SHM_CHUNK`], per-chunk ready flags in the segment; see [`Shm`]).
//!
//! [`Transport::copy`] copies between two exposures, neither necessarily
//! the caller's (knem: region to region in the kernel).
//!
//! Semantics are the same for all three, given one rule that costs nothing
//! on the single-copy transports: after the owner changes an exposed buffer
//! locally it calls [`Exposure::publish`] before peers read the range, and
//! before it looks at bytes peers wrote it calls [`Exposure::collect`].
//! Reads and writes are clamped to the exposure like knem's inline copies:
//! they stop at the end of either side and return the bytes moved.
//!
//! [`from_env`] picks the transport: `KNEM_RS_TRANSPORT=knem|cma|shm`, or
//! automatically the first of knem, CMA, shm that works here.

#![deny(missing_docs)]

mod cma;
mod error;
mod knemt;
mod shm;

pub use cma::{cma_pin_only, cma_read_at, cma_touch_pages, cma_write_at, Cma};
pub use error::{Error, Result};
pub use knemt::Knem;
pub use shm::{Shm, ENV_PIPELINE, PIPELINE_CPUS, PIPELINE_MIN, SHM_CHUNK};

use std::fmt;
use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;
use std::ops::Deref;
use std::str::FromStr;

/// Bounce-buffer size of [`Transport::copy`] on transports without a
/// native remote-to-remote copy.
pub const COPY_BOUNCE: usize = 1 << 20;

/// The environment variable that overrides the automatic choice.
pub const ENV_TRANSPORT: &str = "KNEM_RS_TRANSPORT";

/// Which mechanism a transport uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Kind {
    /// The knem module: regions and cookies.
    Knem = 1,
    /// Cross-memory attach: process_vm_readv/writev.
    Cma = 2,
    /// Shared-memory double copy.
    Shm = 3,
}

impl Kind {
    /// Every kind, in the order of automatic preference.
    pub const ALL: [Kind; 3] = [Kind::Knem, Kind::Cma, Kind::Shm];

    /// The lower-case name used by `KNEM_RS_TRANSPORT`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Knem => "knem",
            Kind::Cma => "cma",
            Kind::Shm => "shm",
        }
    }

    fn from_u32(v: u32) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| *k as u32 == v)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::UnknownTransport(s.to_string()))
    }
}

/// What a peer needs to reach an exposed buffer: plain data, sent as four
/// 64-bit words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Descriptor {
    /// The [`Kind`] as a number (0: none).
    pub kind: u32,
    /// The owner's pid.
    pub pid: u32,
    /// CMA: the buffer's address in the owner.  Others: 0.
    pub addr: u64,
    /// The exposed length in bytes.
    pub len: u64,
    /// knem: the cookie.  shm: the segment number.  CMA: 0.
    pub id: u64,
}

impl Descriptor {
    /// The transport kind this descriptor belongs to.
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_u32(self.kind)
    }

    /// As four words, e.g. for a shared-memory mailbox.
    pub fn to_words(&self) -> [u64; 4] {
        [
            (u64::from(self.kind) << 32) | u64::from(self.pid),
            self.addr,
            self.len,
            self.id,
        ]
    }

    /// From the words of [`Descriptor::to_words`].
    pub fn from_words(w: [u64; 4]) -> Descriptor {
        Descriptor {
            kind: (w[0] >> 32) as u32,
            pid: w[0] as u32,
            addr: w[1],
            len: w[2],
            id: w[3],
        }
    }

    /// How many bytes a transfer of `want` bytes at `offset` moves.
    pub fn clamp(&self, offset: u64, want: usize) -> usize {
        let avail = self.len.saturating_sub(offset);
        want.min(usize::try_from(avail).unwrap_or(usize::MAX))
    }

    fn expect(&self, kind: Kind) -> Result<()> {
        if self.kind == kind as u32 {
            Ok(())
        } else {
            Err(Error::BadDescriptor("descriptor of another transport"))
        }
    }
}

/// What an exposure holds on top of the memory, per transport.
#[derive(Debug)]
pub(crate) enum Holder {
    Cma,
    // Held for its Drop, which destroys the region.
    Knem(#[allow(dead_code)] knemt::RegionHolder),
    Shm(shm::Segment),
}

/// A buffer made reachable by peers.  Dropping it withdraws access (knem:
/// destroys the region; shm: unlinks the segment).
///
/// # Invariants
///
/// `ptr..ptr+len` stays valid for reads and writes while the exposure lives
/// (promised by the caller of [`Transport::expose_raw`]).
#[derive(Debug)]
pub struct Exposure {
    desc: Descriptor,
    ptr: *mut u8,
    len: usize,
    holder: Holder,
}

// SAFETY: the exposure only holds a pointer whose validity the creator
// guarantees for its lifetime, plus fds; nothing is tied to a thread.
unsafe impl Send for Exposure {}

impl Exposure {
    /// The descriptor to hand to peers.
    pub fn descriptor(&self) -> Descriptor {
        self.desc
    }

    /// The exposed length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is exposed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len) {
            Ok(())
        } else {
            Err(Error::Range {
                offset: offset as u64,
                len: len as u64,
                size: self.len as u64,
            })
        }
    }

    /// Make the owner's local changes to `offset..offset+len` visible to
    /// peers (shm: copy into the segment; others: nothing to do).
    pub fn publish(&self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        match &self.holder {
            // SAFETY: the range is inside the exposure (checked), valid by
            // the type invariant.
            Holder::Shm(seg) => seg.publish(offset, unsafe {
                std::slice::from_raw_parts(self.ptr.add(offset), len)
            }),
            Holder::Cma | Holder::Knem(_) => Ok(()),
        }
    }

    /// Bring bytes peers wrote into `offset..offset+len` into the owner's
    /// buffer (shm: copy out of the segment; others: nothing to do).
    pub fn collect(&self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        match &self.holder {
            // SAFETY: as in publish; the owner has no other live reference
            // to these bytes while collecting (contract of expose_raw).
            Holder::Shm(seg) => seg.collect(offset, unsafe {
                std::slice::from_raw_parts_mut(self.ptr.add(offset), len)
            }),
            Holder::Cma | Holder::Knem(_) => Ok(()),
        }
    }
}

/// An exposure of a borrowed buffer, from [`expose`].
#[derive(Debug)]
pub struct Exposed<'a> {
    inner: Exposure,
    _buf: PhantomData<&'a mut [u8]>,
}

impl Deref for Exposed<'_> {
    type Target = Exposure;
    fn deref(&self) -> &Exposure {
        &self.inner
    }
}

/// Expose `buf` (and publish its current content) for as long as the
/// returned value lives; the borrow keeps the owner's hands off it.
pub fn expose<'a>(t: &dyn Transport, buf: &'a mut [u8]) -> Result<Exposed<'a>> {
    // SAFETY: `buf` stays mutably borrowed, hence valid and untouched by
    // the owner, for the lifetime of the result.
    let inner = unsafe { t.expose_raw(buf.as_mut_ptr(), buf.len(), true)? };
    Ok(Exposed {
        inner,
        _buf: PhantomData,
    })
}

/// A way to move bytes between the buffers of local processes.
pub trait Transport: Send + Sync {
    /// Which mechanism this is.
    fn kind(&self) -> Kind;

    /// Let peers reach `ptr..ptr+len`; with `publish`, its current content
    /// is visible to them at once (see [`Exposure::publish`]).
    ///
    /// # Safety
    ///
    /// The memory must stay valid until the exposure is dropped, and peers
    /// may read and overwrite it at any time until then: it must not be
    /// memory Rust assumes unchanged (no live shared reference to it).
    /// With `publish`, the owner must not write the buffer before its
    /// first [`Exposure::publish`] or [`Exposure::collect`] call (or the
    /// drop), since shm may still be copying it into the segment, chunk
    /// by chunk, while peers read (a pipelined double copy).
    unsafe fn expose_raw(&self, ptr: *mut u8, len: usize, publish: bool) -> Result<Exposure>;

    /// Read from a peer's exposure at `offset` into `bufs`; returns the
    /// bytes read (clamped at the end of either side).
    fn read_vectored(
        &self,
        remote: &Descriptor,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<usize>;

    /// Write `bufs` into a peer's exposure at `offset`; returns the bytes
    /// written (clamped at the end of either side).
    fn write_vectored(
        &self,
        remote: &Descriptor,
        offset: u64,
        bufs: &[IoSlice<'_>],
    ) -> Result<usize>;

    /// [`Transport::read_vectored`] into one buffer.
    fn read(&self, remote: &Descriptor, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_vectored(remote, offset, &mut [IoSliceMut::new(buf)])
    }

    /// [`Transport::write_vectored`] from one buffer.
    fn write(&self, remote: &Descriptor, offset: u64, buf: &[u8]) -> Result<usize> {
        self.write_vectored(remote, offset, &[IoSlice::new(buf)])
    }

    /// Copy from one exposure to another, neither of them necessarily
    /// ours: `src` at `src_offset` to `dst` at `dst_offset`, at most `len`
    /// bytes, clamped at the end of either exposure; returns the bytes
    /// copied.  knem copies region to region in the kernel (one copy);
    /// the default, used by CMA and shm, goes through a bounce buffer in
    /// this process in [`COPY_BOUNCE`]-byte pieces.
    fn copy(
        &self,
        src: &Descriptor,
        src_offset: u64,
        dst: &Descriptor,
        dst_offset: u64,
        len: usize,
    ) -> Result<usize> {
        let want = dst.clamp(dst_offset, src.clamp(src_offset, len));
        let mut bounce = vec![0u8; want.min(COPY_BOUNCE)];
        let mut done = 0;
        while done < want {
            let n = (want - done).min(COPY_BOUNCE);
            let got = self.read(src, src_offset + done as u64, &mut bounce[..n])?;
            if got == 0 {
                break;
            }
            let put = self.write(dst, dst_offset + done as u64, &bounce[..got])?;
            done += put;
            if put < got {
                break;
            }
        }
        if want == 0 {
            src.expect(self.kind())?;
            dst.expect(self.kind())?;
        }
        Ok(done)
    }

    /// Called once by every team member before peers access it (CMA: lets
    /// siblings attach under Yama ptrace_scope=1).  Default: nothing.
    fn prepare_peer_access(&self) -> Result<()> {
        Ok(())
    }
}

/// Open the transport of a given kind.
pub fn open(kind: Kind) -> Result<Box<dyn Transport>> {
    Ok(match kind {
        Kind::Knem => Box::new(Knem::open()?),
        Kind::Cma => Box::new(Cma::open()?),
        Kind::Shm => Box::new(Shm::open()?),
    })
}

/// The kind named by `KNEM_RS_TRANSPORT`, if set and not empty.
pub fn env_kind() -> Result<Option<Kind>> {
    match std::env::var(ENV_TRANSPORT) {
        Ok(v) if !v.trim().is_empty() => v.parse().map(Some),
        _ => Ok(None),
    }
}

/// `KNEM_RS_TRANSPORT` if set, else the first of knem, CMA, shm that works.
pub fn from_env() -> Result<Box<dyn Transport>> {
    if let Some(kind) = env_kind()? {
        return open(kind);
    }
    for kind in Kind::ALL {
        if let Ok(t) = open(kind) {
            return Ok(t);
        }
    }
    open(Kind::Shm)
}

/// Total length of a list of slices.
pub(crate) fn total(lens: impl IntoIterator<Item = usize>) -> usize {
    lens.into_iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_words_roundtrip() {
        let d = Descriptor {
            kind: 2,
            pid: 1234,
            addr: 0xdead_beef,
            len: 77,
            id: 9,
        };
        assert_eq!(Descriptor::from_words(d.to_words()), d);
        assert_eq!(d.kind(), Some(Kind::Cma));
    }

    #[test]
    fn clamp_at_end() {
        let d = Descriptor {
            len: 10,
            ..Default::default()
        };
        assert_eq!(d.clamp(0, 4), 4);
        assert_eq!(d.clamp(8, 4), 2);
        assert_eq!(d.clamp(12, 4), 0);
    }

    #[test]
    fn kind_names() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>().unwrap(), k);
        }
        assert!(matches!(
            "rdma".parse::<Kind>(),
            Err(Error::UnknownTransport(_))
        ));
    }
}
