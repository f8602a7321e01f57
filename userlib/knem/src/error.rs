//! Errors of the client library: every one names the call that failed and,
//! where the kernel gave one, the errno.

use nix::errno::Errno;
use std::fmt;

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// A failed operation on `/dev/knem`.
///
/// `Display` gives one line fit for a tool's output, e.g.
/// `CREATE_REGION failed: Bad address (EFAULT)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening the device failed.
    #[error("cannot open {path}: {} ({errno:?}){}", describe(*errno), OpenHint(*errno))]
    Open {
        /// The path that was opened.
        path: String,
        /// What `open(2)` returned.
        errno: Errno,
    },
    /// An ioctl failed; `call` is the command name without its `KNEM_CMD_`
    /// prefix (`"CREATE_REGION"`, `"INLINE_COPY_BOUNDED"`, ...).
    #[error("{call} failed: {} ({errno:?})", describe(*errno))]
    Ioctl {
        /// The command.
        call: &'static str,
        /// What the driver returned.
        errno: Errno,
    },
    /// Mapping the status array failed.
    #[error("mmap of the status array failed: {} ({errno:?})", describe(*errno))]
    Mmap {
        /// What `mmap(2)` returned.
        errno: Errno,
    },
    /// Another system call on the device failed (`read` of the notify
    /// queue, `poll`, `fcntl`).
    #[error("{call} on /dev/knem failed: {} ({errno:?})", describe(*errno))]
    Sys {
        /// The system call.
        call: &'static str,
        /// What it returned.
        errno: Errno,
    },
    /// The driver refused to pin memory with ENOMEM while this process runs
    /// under a finite RLIMIT_MEMLOCK without CAP_IPC_LOCK: the limit, which
    /// the driver enforces as the kernel does for long-term pins, is what
    /// to change.
    #[error(
        "{call} failed: pinning {bytes} bytes exceeds RLIMIT_MEMLOCK (ulimit -l {limit_kib} KiB, \
         {pinned_kib} KiB pinned already) (ENOMEM); raise memlock in /etc/security/limits.d/ \
         (e.g. '* - memlock unlimited', then log in again) or give the process CAP_IPC_LOCK"
    )]
    Memlock {
        /// The command.
        call: &'static str,
        /// The bytes the call asked to pin.
        bytes: u64,
        /// The soft RLIMIT_MEMLOCK, in KiB.
        limit_kib: u64,
        /// What this process had pinned already (VmPin), in KiB.
        pinned_kib: u64,
    },
    /// The driver speaks another ABI version than this library.
    #[error("GET_INFO: driver ABI {found:#x}, this library speaks {expected:#x}")]
    AbiMismatch {
        /// The version the driver reported.
        found: u32,
        /// The version this library was built for (`KNEM_ABI_VERSION`).
        expected: u32,
    },
    /// A request could not be expressed in the ABI (too many segments for
    /// the u32 count, an empty status array, ...).
    #[error("{call}: {what}")]
    Invalid {
        /// The command that was being prepared.
        call: &'static str,
        /// What was wrong with the request.
        what: &'static str,
    },
}

impl Error {
    /// The errno behind this error, if the kernel returned one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Open { errno, .. }
            | Error::Ioctl { errno, .. }
            | Error::Sys { errno, .. }
            | Error::Mmap { errno } => Some(*errno),
            Error::Memlock { .. } => Some(Errno::ENOMEM),
            Error::AbiMismatch { .. } | Error::Invalid { .. } => None,
        }
    }

    pub(crate) fn ioctl(call: &'static str) -> impl FnOnce(Errno) -> Error {
        move |errno| Error::Ioctl { call, errno }
    }

    /// An ioctl that pins `bytes` bytes failed with `errno`: ENOMEM under
    /// a finite memlock limit without CAP_IPC_LOCK is the limit.
    pub(crate) fn pin(call: &'static str, bytes: u64) -> impl FnOnce(Error) -> Error {
        move |e| match e {
            Error::Ioctl {
                errno: Errno::ENOMEM,
                ..
            } => match memlock_state() {
                Some((limit_kib, pinned_kib)) => Error::Memlock {
                    call,
                    bytes,
                    limit_kib,
                    pinned_kib,
                },
                None => e,
            },
            e => e,
        }
    }
}

/// CAP_IPC_LOCK, the capability that exempts pins from RLIMIT_MEMLOCK.
const CAP_IPC_LOCK: u32 = 14;

/// The soft RLIMIT_MEMLOCK and this process's VmPin, in KiB, when the
/// limit applies to it (finite, and no CAP_IPC_LOCK).
fn memlock_state() -> Option<(u64, u64)> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, _) = getrlimit(Resource::RLIMIT_MEMLOCK).ok()?;
    if soft == nix::libc::RLIM_INFINITY {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let caps = u64::from_str_radix(field("CapEff:")?, 16).ok()?;
    if caps & (1 << CAP_IPC_LOCK) != 0 {
        return None;
    }
    let pinned_kib = field("VmPin:")
        .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    Some((soft / 1024, pinned_kib))
}

/// The C library's text for `errno` (nix's own table differs from glibc's
/// for a few values, e.g. ENOTTY).
pub(crate) fn describe(errno: Errno) -> String {
    let s = std::io::Error::from_raw_os_error(errno as i32).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Admins see ENOENT far more often than any other open error: say why.
struct OpenHint(Errno);

impl fmt::Display for OpenHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Errno::ENOENT | Errno::ENODEV | Errno::ENXIO => {
                f.write_str("; is the knem module loaded?")
            }
            Errno::EACCES | Errno::EPERM => f.write_str("; check the permissions of the device"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_error_names_call_and_errno() {
        let e = Error::Ioctl {
            call: "CREATE_REGION",
            errno: Errno::EFAULT,
        };
        assert_eq!(e.to_string(), "CREATE_REGION failed: Bad address (EFAULT)");
        assert_eq!(e.errno(), Some(Errno::EFAULT));
    }

    #[test]
    fn open_error_hints_at_the_module() {
        let e = Error::Open {
            path: "/dev/knem".into(),
            errno: Errno::ENOENT,
        };
        assert_eq!(
            e.to_string(),
            "cannot open /dev/knem: No such file or directory (ENOENT); is the knem module loaded?"
        );
    }

    #[test]
    fn memlock_error_says_what_to_change() {
        let e = Error::Memlock {
            call: "CREATE_REGION",
            bytes: 16 << 20,
            limit_kib: 8192,
            pinned_kib: 4,
        };
        assert_eq!(
            e.to_string(),
            "CREATE_REGION failed: pinning 16777216 bytes exceeds RLIMIT_MEMLOCK \
             (ulimit -l 8192 KiB, 4 KiB pinned already) (ENOMEM); raise memlock in \
             /etc/security/limits.d/ (e.g. '* - memlock unlimited', then log in again) \
             or give the process CAP_IPC_LOCK"
        );
        assert_eq!(e.errno(), Some(Errno::ENOMEM));
    }

    #[test]
    fn only_enomem_becomes_a_memlock_error() {
        let efault = Error::Ioctl {
            call: "CREATE_REGION",
            errno: Errno::EFAULT,
        };
        assert_eq!(Error::pin("CREATE_REGION", 1)(efault.clone()), efault);
        let enomem = Error::Ioctl {
            call: "CREATE_REGION",
            errno: Errno::ENOMEM,
        };
        let e = Error::pin("CREATE_REGION", 1)(enomem.clone());
        // Whether the limit applies depends on how the test runs (root,
        // ulimit -l unlimited): the errno is ENOMEM either way.
        assert_eq!(e.errno(), Some(Errno::ENOMEM));
        match memlock_state() {
            Some(_) => assert!(matches!(e, Error::Memlock { bytes: 1, .. })),
            None => assert_eq!(e, enomem),
        }
    }

    #[test]
    fn abi_mismatch_is_hex() {
        let e = Error::AbiMismatch {
            found: 0xc,
            expected: 0xd,
        };
        assert_eq!(
            e.to_string(),
            "GET_INFO: driver ABI 0xc, this library speaks 0xd"
        );
        assert_eq!(e.errno(), None);
    }

    #[test]
    fn mmap_error() {
        let e = Error::Mmap {
            errno: Errno::EBUSY,
        };
        assert_eq!(
            e.to_string(),
            "mmap of the status array failed: Device or resource busy (EBUSY)"
        );
    }
}
