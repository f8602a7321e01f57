//! The notification queue of a fd: requests submitted with
//! [`crate::CopyFlags::NOTIFY_FD`] queue their status index on the fd when
//! they complete; `read(2)` on the fd returns those indexes as whole
//! native-endian `u32`s, and `poll(2)` reports `POLLIN` while any is queued.
//!
//! At most as many notifications as the status array has slots may be
//! queued or in flight; a further NOTIFY_FD submission fails with EBUSY
//! until some are read.

use crate::device::Device;
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::libc;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Size of one notification in the byte stream.
pub const NOTIFICATION_SIZE: usize = std::mem::size_of::<u32>();

impl Device {
    /// Read notifications into `out`: the number of indexes stored.  On a
    /// blocking fd the driver returns only once `out` is full (as KNEM
    /// does), so ask for at most as many as are in flight; a signal that
    /// arrives after some were delivered returns those (fewer than
    /// `out.len()`), one before any is retried.  On a non-blocking fd
    /// ([`Device::set_nonblocking`]) it returns what is queued, `EAGAIN`
    /// when nothing is.  An empty `out` reads nothing (0).
    pub fn read_notifications(&self, out: &mut [u32]) -> Result<usize> {
        let bytes = std::mem::size_of_val(out);
        loop {
            // SAFETY: `out` is writable for `bytes` bytes, and any byte
            // pattern is a valid u32.
            let n = unsafe {
                libc::read(
                    self.as_raw_fd(),
                    out.as_mut_ptr().cast::<libc::c_void>(),
                    bytes,
                )
            };
            match Errno::result(n) {
                Ok(n) => {
                    let n = n as usize;
                    if n % NOTIFICATION_SIZE != 0 {
                        return Err(Error::Invalid {
                            call: "read",
                            what: "the driver returned a partial notification",
                        });
                    }
                    return Ok(n / NOTIFICATION_SIZE);
                }
                Err(Errno::EINTR) => continue,
                Err(errno) => {
                    return Err(Error::Sys {
                        call: "read",
                        errno,
                    })
                }
            }
        }
    }

    /// Wait until the fd is readable (a notification is queued): `true`
    /// when it is, `false` when `timeout` passed first.  `None` waits
    /// forever, `Some(Duration::ZERO)` only checks.
    pub fn poll_readable(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let ms: libc::c_int = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    // Round up so a short wait is not a busy loop.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
                }
            };
            let mut pfd = libc::pollfd {
                fd: self.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            match Errno::result(n) {
                Ok(0) => return Ok(false),
                Ok(_) => {
                    if pfd.revents & libc::POLLNVAL != 0 {
                        return Err(Error::Sys {
                            call: "poll",
                            errno: Errno::EBADF,
                        });
                    }
                    return Ok(pfd.revents & libc::POLLIN != 0);
                }
                Err(Errno::EINTR) => continue,
                Err(errno) => {
                    return Err(Error::Sys {
                        call: "poll",
                        errno,
                    })
                }
            }
        }
    }

    /// Make `read` on this fd non-blocking (`O_NONBLOCK`) or blocking
    /// again.  The flag belongs to the open file, so it is shared with
    /// duplicates of the fd.
    pub fn set_nonblocking(&self, nonblocking: bool) -> Result<()> {
        let fd = self.as_raw_fd();
        // SAFETY: fcntl with integer arguments on our fd.
        let fl = Errno::result(unsafe { libc::fcntl(fd, libc::F_GETFL) }).map_err(|errno| {
            Error::Sys {
                call: "fcntl",
                errno,
            }
        })?;
        let new = if nonblocking {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        if new != fl {
            // SAFETY: as above.
            Errno::result(unsafe { libc::fcntl(fd, libc::F_SETFL, new) }).map_err(|errno| {
                Error::Sys {
                    call: "fcntl",
                    errno,
                }
            })?;
        }
        Ok(())
    }

    /// Whether `read` on this fd is non-blocking.
    pub fn is_nonblocking(&self) -> Result<bool> {
        // SAFETY: fcntl with integer arguments on our fd.
        let fl = Errno::result(unsafe { libc::fcntl(self.as_raw_fd(), libc::F_GETFL) }).map_err(
            |errno| Error::Sys {
                call: "fcntl",
                errno,
            },
        )?;
        Ok(fl & libc::O_NONBLOCK != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::OFlag;

    #[test]
    fn nonblocking_round_trips() {
        let dev = Device::open_path("/dev/null", OFlag::O_RDWR).unwrap();
        assert!(!dev.is_nonblocking().unwrap());
        dev.set_nonblocking(true).unwrap();
        assert!(dev.is_nonblocking().unwrap());
        dev.set_nonblocking(true).unwrap();
        dev.set_nonblocking(false).unwrap();
        assert!(!dev.is_nonblocking().unwrap());
    }

    #[test]
    fn reads_whole_u32s() {
        // /dev/zero gives as many zero bytes as asked: 3 indexes of 0.
        let dev = Device::open_path("/dev/zero", OFlag::O_RDONLY).unwrap();
        let mut out = [7u32; 3];
        assert_eq!(dev.read_notifications(&mut out).unwrap(), 3);
        assert_eq!(out, [0; 3]);
        assert!(dev.poll_readable(Some(Duration::ZERO)).unwrap());
    }

    #[test]
    fn poll_times_out_and_read_errors_name_the_call() {
        // An empty pipe: never readable, and EAGAIN when non-blocking.
        let (rx, _tx) = nix::unistd::pipe().unwrap();
        let dev = Device::from_fd(rx);
        let t = Instant::now();
        assert!(!dev.poll_readable(Some(Duration::from_millis(20))).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(20));
        dev.set_nonblocking(true).unwrap();
        let e = dev.read_notifications(&mut [0u32; 2]).unwrap_err();
        assert_eq!(
            e,
            Error::Sys {
                call: "read",
                errno: Errno::EAGAIN
            }
        );
        assert_eq!(e.errno(), Some(Errno::EAGAIN));
        assert!(
            e.to_string().starts_with("read on /dev/knem failed: "),
            "{e}"
        );
    }
}
