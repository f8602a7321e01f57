//! Transport errors: each names the call and, where there is one, the errno.

use nix::errno::Errno;

/// Result of a transport operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong in a transport.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `KNEM_RS_TRANSPORT` (or a name passed in) is not one of knem, cma, shm.
    #[error("unknown transport {0:?}: use knem, cma or shm")]
    UnknownTransport(String),
    /// The knem module is not usable (no /dev/knem, or it failed to open).
    #[error(
        "knem transport unavailable: {0}; load the module or use KNEM_RS_TRANSPORT=cma or shm"
    )]
    KnemUnavailable(String),
    /// The kernel refused cross-process access for CMA.
    #[error("CMA refused by the ptrace access policy ({call} on pid {pid}: {errno}); \
             set kernel.yama.ptrace_scope=0 or use KNEM_RS_TRANSPORT=shm (or knem with the module loaded)")]
    CmaDenied {
        /// The syscall.
        call: &'static str,
        /// The peer.
        pid: u32,
        /// EPERM or EACCES.
        errno: Errno,
    },
    /// A system call failed.
    #[error("{call}: {errno}")]
    Sys {
        /// The call.
        call: &'static str,
        /// Its errno.
        errno: Errno,
    },
    /// A knem ioctl failed.
    #[error(transparent)]
    Knem(#[from] knem::Error),
    /// A knem copy completed with a non-success status.
    #[error("knem {call} finished with status {status}")]
    KnemStatus {
        /// The call.
        call: &'static str,
        /// The status the driver reported.
        status: knem::Status,
    },
    /// A descriptor of another transport, or malformed bytes.
    #[error("bad remote descriptor: {0}")]
    BadDescriptor(&'static str),
    /// A range outside an exposure.
    #[error("range {offset}+{len} outside a {size}-byte exposure")]
    Range {
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
        /// Exposure size.
        size: u64,
    },
    /// An I/O error on a shared-memory segment.
    #[error("shared segment {path}: {source}")]
    Segment {
        /// The segment's path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

impl Error {
    /// The errno behind the error, when there is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::CmaDenied { errno, .. } | Error::Sys { errno, .. } => Some(*errno),
            Error::Knem(e) => e.errno(),
            Error::Segment { source, .. } => source.raw_os_error().map(Errno::from_raw),
            Error::UnknownTransport(_) | Error::BadDescriptor(_) | Error::Range { .. } => {
                Some(Errno::EINVAL)
            }
            Error::KnemUnavailable(_) => Some(Errno::ENODEV),
            Error::KnemStatus { .. } => Some(Errno::EIO),
        }
    }
}
