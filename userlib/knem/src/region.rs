//! Regions: memory declared to the driver, destroyed on drop.

use crate::device::Device;
use crate::error::Result;
use crate::flags::{Protection, RegionFlags};
use crate::iovec::Iovec;
use crate::{Cookie, Errno};
use std::marker::PhantomData;

/// A declared region of this process's memory.
///
/// It borrows the [`Device`] it was created on and the memory it covers for
/// `'a`, and is destroyed (DESTROY_REGION) when dropped.  Hand
/// [`Region::cookie`] to other processes so they can copy from or to it.
///
/// # Invariants
///
/// `cookie` was returned by CREATE_REGION on `dev`; the memory it covers
/// stays valid for `'a` and, when others may write it, is not accessed by
/// Rust code during `'a`.
#[derive(Debug)]
pub struct Region<'a> {
    dev: &'a Device,
    cookie: Cookie,
    single_use: bool,
    _mem: PhantomData<&'a mut [u8]>,
}

impl<'a> Region<'a> {
    /// A read-only region (PROT_READ) over `segments`, in order.  Others
    /// can read it; the memory stays borrowed, shared, while the region
    /// lives.
    pub fn new<I>(dev: &'a Device, segments: I, flags: RegionFlags) -> Result<Self>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let iov: Vec<Iovec> = segments.into_iter().map(Iovec::from_slice).collect();
        // SAFETY: PROT_READ only, so others never write the memory, which we
        // borrow shared for 'a.
        unsafe { Self::from_iovecs(dev, &iov, Protection::READ, flags) }
    }

    /// A region over `segments` with any protection.  The memory is
    /// borrowed exclusively while the region lives, since others may write
    /// it; read it after dropping the region.
    pub fn new_mut<I>(
        dev: &'a Device,
        segments: I,
        prot: Protection,
        flags: RegionFlags,
    ) -> Result<Self>
    where
        I: IntoIterator<Item = &'a mut [u8]>,
    {
        let iov: Vec<Iovec> = segments.into_iter().map(Iovec::from_mut_slice).collect();
        // SAFETY: the segments are borrowed mutably for 'a, so Rust code
        // does not touch them while others may write them.
        unsafe { Self::from_iovecs(dev, &iov, prot, flags) }
    }

    /// A region over raw segments.
    ///
    /// # Safety
    ///
    /// As [`Device::create_region_raw`], for the whole lifetime `'a`.
    pub unsafe fn from_iovecs(
        dev: &'a Device,
        segments: &[Iovec],
        prot: Protection,
        flags: RegionFlags,
    ) -> Result<Self> {
        // SAFETY: forwarded to the caller.
        let cookie = unsafe { dev.create_region_raw(segments, prot, flags)? };
        // INVARIANT: the cookie comes from CREATE_REGION on dev.
        Ok(Self {
            dev,
            cookie,
            single_use: flags.contains(RegionFlags::SINGLE_USE),
            _mem: PhantomData,
        })
    }

    /// The cookie other processes use to reach this region.
    pub fn cookie(&self) -> Cookie {
        self.cookie
    }

    /// Whether the region was created single-use.
    pub fn is_single_use(&self) -> bool {
        self.single_use
    }

    /// Destroy now and report the outcome, which drop cannot: EINVAL means
    /// the region was already gone (e.g. a consumed single-use region).
    pub fn destroy(self) -> Result<()> {
        let r = self.dev.destroy_region(self.cookie);
        std::mem::forget(self);
        r
    }

    /// Give up ownership: the region stays declared until destroyed by
    /// cookie or until its fd is closed.
    ///
    /// # Safety
    ///
    /// The memory must stay valid, and untouched by Rust code when the
    /// region is writable, until then — beyond the borrow `'a`.
    pub unsafe fn into_cookie(self) -> Cookie {
        let c = self.cookie;
        std::mem::forget(self);
        c
    }
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        match self.dev.destroy_region(self.cookie) {
            Ok(()) => {}
            // A consumed single-use region is already gone.
            Err(e) if self.single_use && e.errno() == Some(Errno::EINVAL) => {}
            // Nothing to do from a destructor: the fd's close reclaims it.
            Err(_) => {}
        }
    }
}
