//! One error type for the whole tool: a message that reads as one line.

use std::fmt;

/// An error that is printed as `knem-bench: <message>` and ends the run.
#[derive(Debug)]
pub struct Error(pub String);

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error(e.to_string())
    }
}

impl From<nix::Error> for Error {
    fn from(e: nix::Error) -> Self {
        Error(format!("{e} ({})", e as i32))
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error(e.to_string())
    }
}

/// Attach what was being done to an error.
pub trait Context<T> {
    /// Prefix the error with `what: `.
    fn ctx(self, what: impl fmt::Display) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {}", e.into())))
    }
}

/// Build an [`Error`] from a format string.
#[macro_export]
macro_rules! err {
    ($($t:tt)*) => { $crate::error::Error(format!($($t)*)) };
}
