//! The device file and one method per ioctl.

use crate::error::{Error, Result};
use crate::flags::{CopyFlags, Protection, RegionFlags};
use crate::iovec::{self, Iovec};
use crate::status::{Status, StatusArray};
use crate::Cookie;
use knem_abi::{self as abi, cmd};
use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use std::ffi::{c_void, CStr};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Source of [`Device`] identities, so a [`StatusArray`] knows which fd it
/// belongs to even after fd numbers are reused.
static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

fn next_device_id() -> u64 {
    NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed)
}

/// What GET_INFO reports about the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// ABI version (`KNEM_ABI_VERSION`, 0x0d).
    pub abi: u32,
    /// `KNEM_FEATURE_*` bits.
    pub features: u32,
    /// Flags the driver accepts but does not honour (e.g. DMA without an
    /// engine).
    pub ignored_flags: u32,
    /// Flags the driver applies to every request.
    pub forced_flags: u32,
}

impl Info {
    /// Whether a DMA engine is available (`KNEM_FEATURE_DMA`).
    pub fn has_dma(&self) -> bool {
        self.features & abi::KNEM_FEATURE_DMA != 0
    }
}

impl From<abi::knem_cmd_info> for Info {
    fn from(i: abi::knem_cmd_info) -> Self {
        Self {
            abi: i.abi,
            features: i.features,
            ignored_flags: i.ignored_flags,
            forced_flags: i.forced_flags,
        }
    }
}

/// An inline copy between the caller's memory and a region, with every
/// field of the ABI request exposed.
#[derive(Debug, Clone, Copy)]
pub struct InlineCopyRequest<'a> {
    /// The caller's segments.
    pub local: &'a [Iovec],
    /// false: region → local (read); true: local → region (write).
    pub write: bool,
    /// The region.
    pub cookie: Cookie,
    /// Where in the region to start.
    pub offset: u64,
    /// `Some(n)`: INLINE_COPY_BOUNDED with `length = n`; `None`: INLINE_COPY.
    pub length: Option<u64>,
    /// Copy flags.
    pub flags: CopyFlags,
    /// Slot for asynchronous completion (ignored by synchronous requests).
    pub async_status_index: u32,
}

/// A copy between two regions, with every field of the ABI request exposed.
#[derive(Debug, Clone, Copy)]
pub struct CopyRequest {
    /// The region read from.
    pub src: Cookie,
    /// Where in `src` to start.
    pub src_offset: u64,
    /// The region written to.
    pub dst: Cookie,
    /// Where in `dst` to start.
    pub dst_offset: u64,
    /// `Some(n)`: COPY_BOUNDED with `length = n`; `None`: COPY.
    pub length: Option<u64>,
    /// Copy flags.
    pub flags: CopyFlags,
    /// Slot for asynchronous completion (ignored by synchronous requests).
    pub async_status_index: u32,
}

/// An open `/dev/knem`.
///
/// Opened read-write, the fd is a *context*: regions created through it
/// belong to it and are destroyed when it is closed.  Opened read-only it
/// only gives the statistics text.
#[derive(Debug)]
pub struct Device {
    fd: OwnedFd,
    /// Unique in this process; stamped on the status array mapped from it.
    id: u64,
}

/// The device path, `KNEM_DEVICE_FILENAME`.
pub fn device_path() -> &'static str {
    CStr::from_bytes_with_nul(abi::KNEM_DEVICE_FILENAME)
        .ok()
        .and_then(|c| c.to_str().ok())
        .unwrap_or("/dev/knem")
}

/// The name of a command for error messages.
fn call_name(c: u32) -> &'static str {
    cmd::name(c).unwrap_or("ioctl")
}

impl Device {
    /// Open `/dev/knem` read-write: a new context.
    pub fn open() -> Result<Self> {
        Self::open_path(device_path(), OFlag::O_RDWR)
    }

    /// Open `/dev/knem` read-only: no context, ioctls fail with EBADF,
    /// `read` gives the statistics.
    pub fn open_readonly() -> Result<Self> {
        Self::open_path(device_path(), OFlag::O_RDONLY)
    }

    /// Open another path with `flags` (plus `O_CLOEXEC`); for tests and for
    /// devices renamed by udev rules.
    pub fn open_path(path: impl AsRef<Path>, flags: OFlag) -> Result<Self> {
        let path = path.as_ref();
        let fd =
            open(path, flags | OFlag::O_CLOEXEC, Mode::empty()).map_err(|errno| Error::Open {
                path: path.display().to_string(),
                errno,
            })?;
        // SAFETY: open() just returned this fd and nothing else owns it.
        Ok(Self {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            id: next_device_id(),
        })
    }

    /// Wrap an fd already open on the device.
    pub fn from_fd(fd: OwnedFd) -> Self {
        Self {
            fd,
            id: next_device_id(),
        }
    }

    /// This value's identity, unique in the process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Issue any ioctl on the device, as is.
    ///
    /// # Safety
    ///
    /// `arg` is handed to the driver, which reads and writes as many bytes
    /// at it as `cmd` encodes, and follows any user pointers inside: every
    /// memory the driver may write must be memory the caller allows to be
    /// overwritten.  Unmapped addresses are fine (the driver answers
    /// EFAULT).
    pub unsafe fn raw_ioctl(&self, cmd: u32, arg: *mut c_void) -> std::result::Result<i32, Errno> {
        // SAFETY: forwarded to the caller.
        Errno::result(unsafe { nix::libc::ioctl(self.fd.as_raw_fd(), cmd as _, arg) })
    }

    /// One ioctl on an ABI struct, with the error named after the command.
    ///
    /// # Safety
    ///
    /// `T` must be the argument type of `c`, and any user pointer inside
    /// `arg` must satisfy [`Device::raw_ioctl`]'s contract.
    pub(crate) unsafe fn ioctl<T>(&self, c: u32, arg: &mut T) -> Result<()> {
        debug_assert_eq!(cmd::size(c), std::mem::size_of::<T>());
        // SAFETY: forwarded to the caller.
        unsafe { self.raw_ioctl(c, (arg as *mut T).cast()) }
            .map(drop)
            .map_err(Error::ioctl(call_name(c)))
    }

    /// GET_INFO, checking that the driver speaks ABI 0x0d.
    pub fn info(&self) -> Result<Info> {
        let info = self.info_unchecked()?;
        if info.abi != abi::KNEM_ABI_VERSION {
            return Err(Error::AbiMismatch {
                found: info.abi,
                expected: abi::KNEM_ABI_VERSION,
            });
        }
        Ok(info)
    }

    /// GET_INFO without checking the version.
    pub fn info_unchecked(&self) -> Result<Info> {
        let mut arg = abi::knem_cmd_info::default();
        // SAFETY: the argument is a knem_cmd_info, with no pointer inside.
        unsafe { self.ioctl(cmd::GET_INFO, &mut arg)? };
        Ok(arg.into())
    }

    /// CREATE_REGION over raw segments.  Prefer [`crate::Region`], which
    /// ties the memory's lifetime to the region and destroys it on drop.
    ///
    /// # Safety
    ///
    /// Until the region is destroyed (explicitly, by a single-use copy, or
    /// by closing this fd), other processes may read the segments if
    /// `prot` has READ and overwrite them if it has WRITE: the memory must
    /// stay valid for that and must not be memory Rust assumes unchanged.
    /// Unmapped ranges are fine (the driver answers EFAULT).
    pub unsafe fn create_region_raw(
        &self,
        segments: &[Iovec],
        prot: Protection,
        flags: RegionFlags,
    ) -> Result<Cookie> {
        let nr = u32::try_from(segments.len()).map_err(|_| Error::Invalid {
            call: "CREATE_REGION",
            what: "more than 2^32-1 segments",
        })?;
        let mut arg = abi::knem_cmd_create_region {
            iovec_array: segments.as_ptr() as u64,
            iovec_nr: nr,
            flags: flags.bits(),
            protection: prot.bits(),
            ..Default::default()
        };
        let bytes = segments.iter().fold(0u64, |t, s| t.saturating_add(s.len()));
        // SAFETY: a knem_cmd_create_region whose iovec array is `segments`,
        // alive for the call; the caller vouches for the segments.
        unsafe { self.ioctl(cmd::CREATE_REGION, &mut arg) }
            .map_err(Error::pin("CREATE_REGION", bytes))?;
        Ok(Cookie::from_raw(arg.cookie))
    }

    /// DESTROY_REGION.  Only the context that created a region may destroy
    /// it; others (and destroyed or consumed cookies) get EINVAL.
    pub fn destroy_region(&self, cookie: Cookie) -> Result<()> {
        let mut raw = cookie.as_raw();
        // SAFETY: the argument is a knem_cookie_t.
        unsafe { self.ioctl(cmd::DESTROY_REGION, &mut raw) }
    }

    /// Any inline copy, every ABI field under the caller's control.
    ///
    /// # Safety
    ///
    /// For a read (`write == false`) the driver overwrites the bytes the
    /// `local` segments cover: they must be memory the caller allows to be
    /// overwritten.  Asynchronous requests keep using the segments after
    /// the call returns, until their slot leaves PENDING.
    pub unsafe fn inline_copy(&self, req: &InlineCopyRequest<'_>) -> Result<Status> {
        let nr = u32::try_from(req.local.len()).map_err(|_| Error::Invalid {
            call: "INLINE_COPY",
            what: "more than 2^32-1 segments",
        })?;
        let status = match req.length {
            None => {
                let mut arg = abi::knem_cmd_inline_copy {
                    local_iovec_array: req.local.as_ptr() as u64,
                    local_iovec_nr: nr,
                    write: req.write.into(),
                    remote_cookie: req.cookie.as_raw(),
                    remote_offset: req.offset,
                    flags: req.flags.bits(),
                    async_status_index: req.async_status_index,
                    ..Default::default()
                };
                // SAFETY: the argument matches the command; the caller
                // vouches for the local segments.
                unsafe { self.ioctl(cmd::INLINE_COPY, &mut arg)? };
                arg.current_status
            }
            Some(length) => {
                let mut arg = abi::knem_cmd_inline_copy_bounded {
                    local_iovec_array: req.local.as_ptr() as u64,
                    local_iovec_nr: nr,
                    write: req.write.into(),
                    remote_cookie: req.cookie.as_raw(),
                    remote_offset: req.offset,
                    length,
                    flags: req.flags.bits(),
                    async_status_index: req.async_status_index,
                    ..Default::default()
                };
                // SAFETY: as above.
                unsafe { self.ioctl(cmd::INLINE_COPY_BOUNDED, &mut arg)? };
                arg.current_status
            }
        };
        Ok(Status::from_raw(status))
    }

    /// Synchronous read of a region into `buf`, starting `offset` bytes into
    /// the region; stops at the end of either side, and after `len` bytes
    /// when given (INLINE_COPY_BOUNDED).  An offset past the end copies
    /// nothing and succeeds.
    pub fn read_into(
        &self,
        cookie: Cookie,
        offset: u64,
        buf: &mut [u8],
        len: Option<u64>,
    ) -> Result<Status> {
        self.read_into_vectored(cookie, offset, &mut [IoSliceMut::new(buf)], len)
    }

    /// [`Device::read_into`] scattering into several buffers.
    pub fn read_into_vectored(
        &self,
        cookie: Cookie,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
        len: Option<u64>,
    ) -> Result<Status> {
        let local = iovec::from_io_slices_mut(bufs);
        let req = InlineCopyRequest {
            local: &local,
            write: false,
            cookie,
            offset,
            length: len,
            flags: CopyFlags::NONE,
            async_status_index: 0,
        };
        // SAFETY: a synchronous read into buffers we hold mutably.
        unsafe { self.inline_copy(&req) }
    }

    /// Synchronous write of `buf` into a region at `offset`; clamped like
    /// [`Device::read_into`].
    pub fn write_from(
        &self,
        cookie: Cookie,
        offset: u64,
        buf: &[u8],
        len: Option<u64>,
    ) -> Result<Status> {
        self.write_from_vectored(cookie, offset, &[IoSlice::new(buf)], len)
    }

    /// [`Device::write_from`] gathering from several buffers.
    pub fn write_from_vectored(
        &self,
        cookie: Cookie,
        offset: u64,
        bufs: &[IoSlice<'_>],
        len: Option<u64>,
    ) -> Result<Status> {
        let local = iovec::from_io_slices(bufs);
        let req = InlineCopyRequest {
            local: &local,
            write: true,
            cookie,
            offset,
            length: len,
            flags: CopyFlags::NONE,
            async_status_index: 0,
        };
        // SAFETY: a synchronous write only reads our buffers.
        unsafe { self.inline_copy(&req) }
    }

    /// Synchronous copy from region `src` at `src_offset` to region `dst`
    /// at `dst_offset`, stopping at the end of either region and after `len`
    /// bytes when given (COPY_BOUNDED).
    pub fn copy(
        &self,
        src: Cookie,
        src_offset: u64,
        dst: Cookie,
        dst_offset: u64,
        len: Option<u64>,
    ) -> Result<Status> {
        self.copy_with(&CopyRequest {
            src,
            src_offset,
            dst,
            dst_offset,
            length: len,
            flags: CopyFlags::NONE,
            async_status_index: 0,
        })
    }

    /// Any region-to-region copy, every ABI field under the caller's
    /// control.  Safe: both sides are regions, whose creators consented to
    /// the access their protection allows.
    pub fn copy_with(&self, req: &CopyRequest) -> Result<Status> {
        let status = match req.length {
            None => {
                let mut arg = abi::knem_cmd_copy {
                    src_cookie: req.src.as_raw(),
                    src_offset: req.src_offset,
                    dst_cookie: req.dst.as_raw(),
                    dst_offset: req.dst_offset,
                    flags: req.flags.bits(),
                    async_status_index: req.async_status_index,
                    ..Default::default()
                };
                // SAFETY: the argument matches the command, with no pointer.
                unsafe { self.ioctl(cmd::COPY, &mut arg)? };
                arg.current_status
            }
            Some(length) => {
                let mut arg = abi::knem_cmd_copy_bounded {
                    src_cookie: req.src.as_raw(),
                    src_offset: req.src_offset,
                    dst_cookie: req.dst.as_raw(),
                    dst_offset: req.dst_offset,
                    length,
                    flags: req.flags.bits(),
                    async_status_index: req.async_status_index,
                    ..Default::default()
                };
                // SAFETY: as above.
                unsafe { self.ioctl(cmd::COPY_BOUNDED, &mut arg)? };
                arg.current_status
            }
        };
        Ok(Status::from_raw(status))
    }

    /// Map the status array of this fd: `slots` one-byte slots, all
    /// PENDING.  A fd has at most one.  Mapping it ends the time to bind
    /// the fd's offload thread ([`Device::bind_offload`]), which starts at
    /// the first asynchronous copy.
    ///
    /// The driver sees the mapping, which the kernel rounds up to whole
    /// pages: it accepts indexes (and queues up to as many NOTIFY_FD
    /// notifications) up to that rounded length, while [`StatusArray`]
    /// gives access to the `slots` asked for.  Ask for a multiple of the
    /// page size to make the two agree.
    pub fn map_status_array(&self, slots: usize) -> Result<StatusArray> {
        StatusArray::map(self.fd.as_fd(), slots, self.id)
    }
}

impl AsFd for Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Device {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl From<Device> for OwnedFd {
    fn from(d: Device) -> OwnedFd {
        d.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_path_is_the_header_constant() {
        assert_eq!(device_path(), "/dev/knem");
    }

    #[test]
    fn missing_device_gives_a_clear_error() {
        let e = Device::open_path("/nonexistent/knem", OFlag::O_RDWR).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOENT));
        assert_eq!(
            e.to_string(),
            "cannot open /nonexistent/knem: No such file or directory (ENOENT); \
             is the knem module loaded?"
        );
        if !Path::new(device_path()).exists() {
            let e = Device::open().unwrap_err();
            assert!(e.to_string().starts_with("cannot open /dev/knem: "), "{e}");
        }
    }

    #[test]
    fn ioctl_errors_name_the_command() {
        // /dev/null is not knem: every command is ENOTTY, named after itself.
        let dev = Device::open_path("/dev/null", OFlag::O_RDWR).unwrap();
        let e = dev.info().unwrap_err();
        assert_eq!(
            e,
            Error::Ioctl {
                call: "GET_INFO",
                errno: Errno::ENOTTY
            }
        );
        let e = dev.destroy_region(Cookie::from_raw(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "DESTROY_REGION failed: Inappropriate ioctl for device (ENOTTY)"
        );
        let mut buf = [0u8; 4];
        let e = dev
            .read_into(Cookie::from_raw(1), 0, &mut buf, Some(2))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "INLINE_COPY_BOUNDED failed: Inappropriate ioctl for device (ENOTTY)"
        );
        let e = dev
            .copy(Cookie::from_raw(1), 0, Cookie::from_raw(2), 0, None)
            .unwrap_err();
        assert_eq!(e.errno(), Some(Errno::ENOTTY));
        assert!(e.to_string().starts_with("COPY failed"));
    }

    #[test]
    fn every_command_has_a_name() {
        for c in cmd::NUMBERS {
            assert_ne!(call_name(c), "ioctl");
        }
        assert_eq!(call_name(0), "ioctl");
    }
}
