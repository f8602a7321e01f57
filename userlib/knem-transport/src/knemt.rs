//! The knem module: an exposure is a region (read and write allowed), the
//! descriptor carries its cookie, transfers are inline copies.

use crate::{total, Descriptor, Error, Exposure, Holder, Kind, Result, Transport};
use knem::{Cookie, Device, Iovec, Protection, RegionFlags, Status};
use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;

/// The knem transport: one open /dev/knem shared by its exposures.
#[derive(Debug, Clone)]
pub struct Knem {
    dev: Arc<Device>,
}

impl Knem {
    /// Open /dev/knem.
    pub fn open() -> Result<Knem> {
        let dev = Device::open().map_err(|e| Error::KnemUnavailable(e.to_string()))?;
        Ok(Knem { dev: Arc::new(dev) })
    }

    /// The device, for callers that want the full knem API.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

/// A region destroyed on drop.
#[derive(Debug)]
pub(crate) struct RegionHolder {
    dev: Arc<Device>,
    cookie: Cookie,
}

impl Drop for RegionHolder {
    fn drop(&mut self) {
        let _ = self.dev.destroy_region(self.cookie);
    }
}

fn check(call: &'static str, status: Status) -> Result<()> {
    match status {
        Status::Success => Ok(()),
        status => Err(Error::KnemStatus { call, status }),
    }
}

impl Transport for Knem {
    fn kind(&self) -> Kind {
        Kind::Knem
    }

    unsafe fn expose_raw(&self, ptr: *mut u8, len: usize, _publish: bool) -> Result<Exposure> {
        if len == 0 {
            // Nothing to reach: no region (the driver may refuse an empty
            // one), and transfers against it move zero bytes.
            return Ok(Exposure {
                desc: Descriptor {
                    kind: Kind::Knem as u32,
                    pid: std::process::id(),
                    ..Descriptor::default()
                },
                ptr,
                len,
                holder: Holder::Cma,
            });
        }
        let iov = [Iovec::from_raw(ptr as u64, len as u64)];
        // SAFETY: the caller of expose_raw made the promise create_region_raw
        // asks for (memory valid and writable by peers until drop).
        let cookie = unsafe {
            self.dev
                .create_region_raw(&iov, Protection::READ_WRITE, RegionFlags::NONE)?
        };
        Ok(Exposure {
            desc: Descriptor {
                kind: Kind::Knem as u32,
                pid: std::process::id(),
                addr: 0,
                len: len as u64,
                id: cookie.as_raw(),
            },
            ptr,
            len,
            holder: Holder::Knem(RegionHolder {
                dev: self.dev.clone(),
                cookie,
            }),
        })
    }

    fn read_vectored(
        &self,
        d: &Descriptor,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<usize> {
        d.expect(Kind::Knem)?;
        let want = d.clamp(offset, total(bufs.iter().map(|b| b.len())));
        if want == 0 {
            return Ok(0);
        }
        let st =
            self.dev
                .read_into_vectored(Cookie::from_raw(d.id), offset, bufs, Some(want as u64))?;
        check("read", st)?;
        Ok(want)
    }

    fn write_vectored(&self, d: &Descriptor, offset: u64, bufs: &[IoSlice<'_>]) -> Result<usize> {
        d.expect(Kind::Knem)?;
        let want = d.clamp(offset, total(bufs.iter().map(|b| b.len())));
        if want == 0 {
            return Ok(0);
        }
        let st = self.dev.write_from_vectored(
            Cookie::from_raw(d.id),
            offset,
            bufs,
            Some(want as u64),
        )?;
        check("write", st)?;
        Ok(want)
    }

    fn copy(
        &self,
        src: &Descriptor,
        src_offset: u64,
        dst: &Descriptor,
        dst_offset: u64,
        len: usize,
    ) -> Result<usize> {
        src.expect(Kind::Knem)?;
        dst.expect(Kind::Knem)?;
        let want = dst.clamp(dst_offset, src.clamp(src_offset, len));
        if want == 0 {
            return Ok(0);
        }
        let st = self.dev.copy(
            Cookie::from_raw(src.id),
            src_offset,
            Cookie::from_raw(dst.id),
            dst_offset,
            Some(want as u64),
        )?;
        check("copy", st)?;
        Ok(want)
    }
}
