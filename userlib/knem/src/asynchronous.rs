//! Asynchronous copies: requests that return at once with
//! `current_status = PENDING` and report later in a slot of the fd's
//! [`StatusArray`].
//!
//! Three flavours, from thinnest to safest:
//!
//! * [`Device::copy_async`]: region to region.  Safe, since both sides are
//!   regions whose owners consented to the access.
//! * [`Device::read_into_async`], [`Device::write_from_async`],
//!   [`Device::init_async_recv`]: inline copies over raw [`Iovec`]s.
//!   Unsafe: the driver touches the caller's memory after the call returns.
//! * [`Device::read_async`], [`Device::write_async`]: inline copies over an
//!   owned buffer, returned by the [`Transfer`] once its slot says the
//!   request is over.  Safe.
//!
//! Which flag does what (SPEC §3):
//!
//! * `MEMCPY_THREAD` (or `DMA_THREAD`, which behaves the same without a DMA
//!   engine): the copy runs on the fd's offload thread; requests of one fd
//!   complete in submission order.
//! * `ASYNC_DMA_COMPLETE` without `DMA` and without a thread flag: the copy
//!   runs now, and its outcome is written to both `current_status` and the
//!   slot.
//! * `NOTIFY_FD` (with a thread flag only): on completion the slot index is
//!   also queued on the fd, see [`Device::read_notifications`].

use crate::device::{CopyRequest, Device, InlineCopyRequest};
use crate::error::{Error, Result};
use crate::flags::CopyFlags;
use crate::iovec::Iovec;
use crate::status::{Status, StatusArray};
use crate::Cookie;
use knem_abi::{self as abi, cmd};
use std::fmt;
use std::time::{Duration, Instant};

impl Device {
    /// Asynchronous read of the region `cookie`, from `offset`, into the
    /// caller's `local` segments (INLINE_COPY, or INLINE_COPY_BOUNDED when
    /// `len` is given), reporting in slot `index` of this fd's status array.
    ///
    /// Returns the request's `current_status`: PENDING for requests that
    /// run on the offload thread, the final status for ASYNCDMACOMPLETE
    /// without DMA (which then also writes the slot), and for requests
    /// without any asynchronous flag (which never touch the slot).
    ///
    /// The driver pins the local pages at submission, so an unmapped local
    /// segment fails at once with EFAULT.
    ///
    /// # Safety
    ///
    /// The bytes the `local` segments cover are overwritten, possibly
    /// after this call returns and until slot `index` leaves PENDING: they
    /// must be memory the caller allows to be written that long, and that
    /// no Rust reference observes meanwhile.  Slot `index` must not be in
    /// use by another pending request of this fd.
    #[allow(clippy::too_many_arguments)] // one per ABI field
    pub unsafe fn read_into_async(
        &self,
        cookie: Cookie,
        offset: u64,
        local: &[Iovec],
        len: Option<u64>,
        index: u32,
        flags: CopyFlags,
    ) -> Result<Status> {
        let req = InlineCopyRequest {
            local,
            write: false,
            cookie,
            offset,
            length: len,
            flags,
            async_status_index: index,
        };
        // SAFETY: forwarded to the caller.
        unsafe { self.inline_copy(&req) }
    }

    /// Asynchronous write of the caller's `local` segments into the region
    /// `cookie` at `offset`; otherwise as [`Device::read_into_async`].
    ///
    /// # Safety
    ///
    /// The driver reads the `local` segments until slot `index` leaves
    /// PENDING: they must stay valid (the driver pins them, so unmapping
    /// them is harmless, but freeing them to an allocator that hands them
    /// out again changes what is written) and hold the data to send that
    /// long.  Slot `index` must not be in use by another pending request
    /// of this fd.
    #[allow(clippy::too_many_arguments)] // one per ABI field
    pub unsafe fn write_from_async(
        &self,
        cookie: Cookie,
        offset: u64,
        local: &[Iovec],
        len: Option<u64>,
        index: u32,
        flags: CopyFlags,
    ) -> Result<Status> {
        let req = InlineCopyRequest {
            local,
            write: true,
            cookie,
            offset,
            length: len,
            flags,
            async_status_index: index,
        };
        // SAFETY: forwarded to the caller; the driver only reads `local`.
        unsafe { self.inline_copy(&req) }
    }

    /// Asynchronous copy from region `src` at `src_offset` to region `dst`
    /// at `dst_offset` (COPY, or COPY_BOUNDED when `len` is given),
    /// reporting in slot `index`; the return value is as for
    /// [`Device::read_into_async`].
    #[allow(clippy::too_many_arguments)] // one per ABI field
    pub fn copy_async(
        &self,
        src: Cookie,
        src_offset: u64,
        dst: Cookie,
        dst_offset: u64,
        len: Option<u64>,
        index: u32,
        flags: CopyFlags,
    ) -> Result<Status> {
        self.copy_with(&CopyRequest {
            src,
            src_offset,
            dst,
            dst_offset,
            length: len,
            flags,
            async_status_index: index,
        })
    }

    /// Legacy INIT_ASYNC_RECV: read the region `cookie` from offset 0 into
    /// the `local` segments; the outcome is reported only in slot
    /// `status_index` (there is no `current_status`).
    ///
    /// # Safety
    ///
    /// As [`Device::read_into_async`].
    pub unsafe fn init_async_recv(
        &self,
        cookie: Cookie,
        local: &[Iovec],
        status_index: u32,
        flags: CopyFlags,
    ) -> Result<()> {
        let nr = u32::try_from(local.len()).map_err(|_| Error::Invalid {
            call: "INIT_ASYNC_RECV",
            what: "more than 2^32-1 segments",
        })?;
        let mut arg = abi::knem_cmd_init_async_recv_param {
            recv_iovec_array: local.as_ptr() as u64,
            recv_iovec_nr: nr,
            status_index,
            send_cookie: cookie.as_raw(),
            flags: flags.bits(),
            pad: 0,
        };
        // SAFETY: the argument matches the command; the caller vouches for
        // the local segments.
        unsafe { self.ioctl(cmd::INIT_ASYNC_RECV, &mut arg) }
    }

    /// Asynchronous read of the region `cookie`, from `offset`, into the
    /// owned `buf` (all of it, or the first `len` bytes), reporting in slot
    /// `index` of `array`, which must be this fd's status array.  The slot
    /// is reset to PENDING first.
    ///
    /// The buffer comes back from [`Transfer::wait`] (or
    /// [`Transfer::try_finish`]) once the slot says the request is over; a
    /// `Transfer` dropped before that leaks its buffer rather than let the
    /// driver write into freed memory.
    ///
    /// Errors: [`Error::Invalid`] when `array` belongs to another device,
    /// `index` is past its end or taken by another pending [`Transfer`];
    /// otherwise what the driver answers (the buffer is dropped then).
    ///
    /// ```no_run
    /// use knem::{CopyFlags, Cookie, Device, Status};
    ///
    /// let dev = Device::open()?;
    /// let slots = dev.map_status_array(4096)?;
    /// # let cookie = Cookie::from_raw(1);
    /// let t = dev.read_async(&slots, cookie, 0, vec![0; 1 << 20], None, 0,
    ///                        CopyFlags::MEMCPY_THREAD)?;
    /// // ... overlap other work with the copy ...
    /// let (status, data) = t.wait();
    /// assert_eq!(status, Status::Success);
    /// # drop(data);
    /// # Ok::<(), knem::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)] // one per ABI field
    pub fn read_async<'a>(
        &self,
        array: &'a StatusArray,
        cookie: Cookie,
        offset: u64,
        buf: Vec<u8>,
        len: Option<u64>,
        index: u32,
        flags: CopyFlags,
    ) -> Result<Transfer<'a>> {
        self.submit_owned(array, cookie, offset, buf, len, index, flags, false)
    }

    /// Asynchronous write of the owned `buf` into the region `cookie` at
    /// `offset`; otherwise as [`Device::read_async`].
    #[allow(clippy::too_many_arguments)] // one per ABI field
    pub fn write_async<'a>(
        &self,
        array: &'a StatusArray,
        cookie: Cookie,
        offset: u64,
        buf: Vec<u8>,
        len: Option<u64>,
        index: u32,
        flags: CopyFlags,
    ) -> Result<Transfer<'a>> {
        self.submit_owned(array, cookie, offset, buf, len, index, flags, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn submit_owned<'a>(
        &self,
        array: &'a StatusArray,
        cookie: Cookie,
        offset: u64,
        mut buf: Vec<u8>,
        len: Option<u64>,
        index: u32,
        flags: CopyFlags,
        write: bool,
    ) -> Result<Transfer<'a>> {
        let call = if write { "async write" } else { "async read" };
        if array.owner() != self.id() {
            return Err(Error::Invalid {
                call,
                what: "the status array belongs to another device",
            });
        }
        if index as usize >= array.len() {
            return Err(Error::Invalid {
                call,
                what: "status index past the end of the array",
            });
        }
        if !array.claim(index) {
            return Err(Error::Invalid {
                call,
                what: "status slot in use by a pending transfer",
            });
        }
        array.reset(index as usize);
        let local = [Iovec::from_mut_slice(&mut buf)];
        let req = InlineCopyRequest {
            local: &local,
            write,
            cookie,
            offset,
            length: len,
            flags,
            async_status_index: index,
        };
        // SAFETY: `buf` is owned by the Transfer from here on; its heap
        // memory does not move with it and is handed back (or leaked) only
        // once the slot, which we hold exclusively, left PENDING.
        match unsafe { self.inline_copy(&req) } {
            Ok(status) => Ok(Transfer {
                array,
                index,
                buf: Some(buf),
                // Not PENDING: the request is over (synchronous, or
                // ASYNCDMACOMPLETE without DMA).
                done: (status != Status::Pending).then_some(status),
            }),
            Err(e) => {
                array.release(index);
                Err(e)
            }
        }
    }
}

/// An owned-buffer asynchronous inline copy ([`Device::read_async`],
/// [`Device::write_async`]): holds the buffer, and the status slot, until
/// the request is over.
///
/// # Invariants
///
/// While `done` is `None`, `buf` may be in use by the driver and slot
/// `index` of `array` is claimed by this value.
pub struct Transfer<'a> {
    array: &'a StatusArray,
    index: u32,
    buf: Option<Vec<u8>>,
    done: Option<Status>,
}

impl Transfer<'_> {
    /// The status slot this transfer reports in.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The final status if the request is over, `None` while PENDING.
    pub fn poll(&mut self) -> Option<Status> {
        if self.done.is_none() {
            match self.array.get_acquire(self.index as usize) {
                Some(Status::Pending) | None => {}
                Some(s) => self.done = Some(s),
            }
        }
        self.done
    }

    /// Status and buffer if the request is over; the transfer back if not.
    pub fn try_finish(mut self) -> std::result::Result<(Status, Vec<u8>), Self> {
        match self.poll() {
            Some(s) => Ok((s, self.take_buf())),
            None => Err(self),
        }
    }

    /// Wait (polling the slot, sleeping a little longer each time up to
    /// 1 ms) until the request is over; its status and the buffer.
    pub fn wait(self) -> (Status, Vec<u8>) {
        let mut t = self;
        let mut nap = Duration::from_micros(1);
        loop {
            match t.try_finish() {
                Ok(r) => return r,
                Err(back) => t = back,
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// As [`Transfer::wait`] for at most `timeout`; the transfer back if it
    /// is still pending.
    pub fn wait_timeout(self, timeout: Duration) -> std::result::Result<(Status, Vec<u8>), Self> {
        let deadline = Instant::now() + timeout;
        let mut t = self;
        let mut nap = Duration::from_micros(1);
        loop {
            match t.try_finish() {
                Ok(r) => return Ok(r),
                Err(back) if Instant::now() >= deadline => return Err(back),
                Err(back) => t = back,
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// The buffer, once `done` is set; releases the slot.
    fn take_buf(&mut self) -> Vec<u8> {
        debug_assert!(self.done.is_some());
        self.array.release(self.index);
        self.buf.take().unwrap_or_default()
    }
}

impl Drop for Transfer<'_> {
    fn drop(&mut self) {
        if self.poll().is_some() {
            if self.buf.is_some() {
                self.array.release(self.index);
            }
        } else if let Some(buf) = self.buf.take() {
            // Still pending: the driver may write this memory later.  Leak
            // it, and keep the slot claimed, rather than let either be
            // reused under the driver's feet.
            std::mem::forget(buf);
        }
    }
}

impl fmt::Debug for Transfer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transfer")
            .field("index", &self.index)
            .field("len", &self.buf.as_ref().map(Vec::len))
            .field("done", &self.done)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::OFlag;
    use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
    use std::num::NonZeroUsize;
    use std::os::fd::AsFd;

    /// A status array over anonymous memory, for tests without the driver.
    fn fake_array(len: usize, owner: u64) -> StatusArray {
        // SAFETY: a fresh anonymous shared mapping; ownership passes to the
        // StatusArray, which unmaps it on drop.
        let p = unsafe {
            mmap_anonymous(
                None,
                NonZeroUsize::new(len).unwrap(),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
            )
        }
        .unwrap();
        StatusArray::from_raw_parts(p.cast(), len, owner)
    }

    #[test]
    fn owned_submission_checks_before_the_driver() {
        // /dev/null is not knem: anything reaching the driver is ENOTTY.
        let dev = Device::open_path("/dev/null", OFlag::O_RDWR).unwrap();
        let other = Device::open_path("/dev/null", OFlag::O_RDWR).unwrap();
        let array = fake_array(8, dev.id());
        let c = Cookie::from_raw(1);
        let f = CopyFlags::MEMCPY_THREAD;
        let e = other
            .read_async(&array, c, 0, vec![0; 4], None, 0, f)
            .unwrap_err();
        assert!(matches!(e, Error::Invalid { .. }), "{e}");
        let e = dev
            .read_async(&array, c, 0, vec![0; 4], None, 8, f)
            .unwrap_err();
        assert!(matches!(e, Error::Invalid { .. }), "{e}");
        // A claimed slot is refused; a failed submission gives it back.
        assert!(array.claim(3));
        let e = dev
            .write_async(&array, c, 0, vec![0; 4], None, 3, f)
            .unwrap_err();
        assert!(e.to_string().contains("in use"), "{e}");
        array.release(3);
        let e = dev
            .write_async(&array, c, 0, vec![0; 4], Some(2), 3, f)
            .unwrap_err();
        assert_eq!(
            e,
            Error::Ioctl {
                call: "INLINE_COPY_BOUNDED",
                errno: nix::errno::Errno::ENOTTY
            }
        );
        assert!(array.claim(3));
        let _ = dev.as_fd();
    }

    #[test]
    fn transfer_completes_when_its_slot_does() {
        let array = fake_array(4, 0);
        assert!(array.claim(2));
        let mut t = Transfer {
            array: &array,
            index: 2,
            buf: Some(vec![5; 16]),
            done: None,
        };
        assert_eq!(t.poll(), None);
        let t = t.wait_timeout(Duration::from_millis(5)).unwrap_err();
        // What the driver does on completion.
        array.set_raw_for_test(2, abi::status::FAILED);
        let (st, buf) = t.wait();
        assert_eq!(st, Status::Failed);
        assert_eq!(buf, vec![5; 16]);
        assert!(array.claim(2), "slot released on completion");
    }

    #[test]
    fn pending_transfer_keeps_its_slot_when_dropped() {
        let array = fake_array(4, 0);
        assert!(array.claim(1));
        drop(Transfer {
            array: &array,
            index: 1,
            buf: Some(vec![0; 8]),
            done: None,
        });
        assert!(!array.claim(1), "a pending transfer's slot must stay taken");
        assert!(array.claim(0));
        let done = Transfer {
            array: &array,
            index: 0,
            buf: Some(vec![0; 8]),
            done: Some(Status::Success),
        };
        assert_eq!(done.try_finish().unwrap().0, Status::Success);
        assert!(array.claim(0));
    }
}
