//! Errors of teams and collectives.

use nix::errno::Errno;

/// Result of a team operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] knem_transport::Error),
    /// A system call failed.
    #[error("{call}: {errno}")]
    Sys {
        /// The call.
        call: &'static str,
        /// Its errno.
        errno: Errno,
    },
    /// Not started by knem-run and no team given.
    #[error("no team: {0} is not set (start the program with `knem-run -n N -- prog`)")]
    NoTeam(&'static str),
    /// Bad arguments.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A size computed from the arguments (count × team size) overflows.
    #[error("size overflow: {0}")]
    Overflow(String),
    /// A collective delivered wrong data (found by the check sweep).
    #[error("wrong data: {0}")]
    Mismatch(String),
    /// A peer did not arrive in time (it probably died).
    #[error("timed out after {secs} s waiting for {what} (a peer died or is stuck?)")]
    Timeout {
        /// What the rank waited for.
        what: &'static str,
        /// The limit.
        secs: u64,
    },
    /// A rank could not expose its buffer for this call (ENOMEM under
    /// RLIMIT_MEMLOCK, for one): every rank of the call returns this
    /// before any byte moved, so all can take another path together.
    #[error("{}", declined(ranks, cause.as_deref()))]
    Declined {
        /// The ranks that could not.
        ranks: Vec<usize>,
        /// Why, when this rank is one of them.
        cause: Option<String>,
    },
    /// A team's control block is not one this user made for the team
    /// (another user's file, a symbolic link, another mode or size).
    #[error("refused: {0}")]
    Untrusted(String),
    /// An I/O error (model file, team file).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn declined(ranks: &[usize], cause: Option<&str>) -> String {
    let why = cause.map_or(String::new(), |c| format!(" (here: {c})"));
    format!("rank(s) {ranks:?} could not expose their buffers{why}; nothing was moved on any rank")
}

impl Error {
    pub(crate) fn sys(call: &'static str) -> impl FnOnce(Errno) -> Error {
        move |errno| Error::Sys { call, errno }
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    /// The errno closest to this error (for the C API).
    pub fn errno(&self) -> Errno {
        match self {
            Error::Transport(e) => e.errno().unwrap_or(Errno::EIO),
            Error::Sys { errno, .. } => *errno,
            Error::NoTeam(_) => Errno::ENOENT,
            Error::Invalid(_) => Errno::EINVAL,
            Error::Overflow(_) => Errno::EOVERFLOW,
            Error::Mismatch(_) => Errno::EIO,
            Error::Timeout { .. } => Errno::ETIMEDOUT,
            Error::Declined { .. } => Errno::ECANCELED,
            Error::Untrusted(_) => Errno::EPERM,
            Error::Io { source, .. } => source
                .raw_os_error()
                .map(Errno::from_raw)
                .unwrap_or(Errno::EIO),
        }
    }
}
