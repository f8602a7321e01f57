//! C API of knem-rs userspace (header: include/knem_rs.h).  Every function
//! checks its pointers and the sizes it computes, turns errors into a
//! negative errno at this edge, and leaves a one-line message for
//! `knem_rs_last_error`.  No panic unwinds into C: each entry point runs
//! under [`guard`].

#![allow(clippy::missing_safety_doc)] // documented in include/knem_rs.h

use libc::{c_char, c_int, c_void, size_t};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: impl std::fmt::Display) {
    let s = CString::new(msg.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = s);
}

fn fail(errno: i32, msg: impl std::fmt::Display) -> c_int {
    set_error(msg);
    -errno
}

fn coll_err(e: knem_coll::Error) -> c_int {
    let errno = e.errno() as i32;
    fail(errno, e)
}

fn transport_err(e: knem_transport::Error) -> c_int {
    let errno = e.errno().map_or(libc::EIO, |e| e as i32);
    fail(errno, e)
}

/// What an entry point returns when its body panicked (a bug in knem-rs).
const PANICKED: c_int = -libc::ENOTRECOVERABLE;

/// Run an entry point's body.  Unwinding out of an `extern "C"` function
/// aborts (or is undefined before Rust 1.81), so a panic becomes
/// `on_panic` plus a message.  Builds with `panic = "abort"` (the release
/// profile) abort before getting here; the argument checks are what keep
/// panics out of reach.
fn guard<R>(on_panic: R, body: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("unknown panic");
            set_error(format_args!("internal error (a knem-rs bug): {msg}"));
            on_panic
        }
    }
}

/// The message of the calling thread's last failure ("" if none).
#[no_mangle]
pub extern "C" fn knem_rs_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The largest buffer or transfer: Rust slices and `ssize_t` results both
/// stop at isize::MAX.
const MAX_LEN: usize = isize::MAX as usize;

/// `count` blocks of `each` bytes as one length, or -EOVERFLOW.
fn blocks(each: usize, count: usize, what: &str) -> Result<usize, c_int> {
    each.checked_mul(count)
        .filter(|t| *t <= MAX_LEN)
        .ok_or_else(|| {
            fail(
                libc::EOVERFLOW,
                format!("{what}: {count} x {each} bytes does not fit in ssize_t"),
            )
        })
}

/// `len` as a transfer length, or -EOVERFLOW.
fn length(len: usize, what: &str) -> Result<usize, c_int> {
    blocks(len, 1, what)
}

/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn opt_str<'a>(name: *const c_char) -> Result<Option<&'a str>, c_int> {
    if name.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| fail(libc::EINVAL, "name is not UTF-8"))?;
    Ok(if s.is_empty() { None } else { Some(s) })
}

/// Pointer and length of a caller's buffer, checked before any slice is
/// made of them.
fn span(p: *const c_void, len: usize) -> Result<(), c_int> {
    length(len, "buffer")?;
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL buffer with a non-zero length"));
    }
    if (p as usize).checked_add(len).is_none() {
        return Err(fail(libc::EFAULT, "buffer wraps around the address space"));
    }
    Ok(())
}

/// # Safety
/// `p` is valid for `len` bytes, or `len` is 0.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], c_int> {
    if len == 0 {
        return Ok(&[]);
    }
    span(p, len)?;
    // SAFETY: non-null, at most isize::MAX bytes, valid by contract.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// # Safety
/// `p` is valid for writes of `len` bytes, or `len` is 0.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], c_int> {
    if len == 0 {
        return Ok(&mut []);
    }
    span(p, len)?;
    // SAFETY: non-null, at most isize::MAX bytes, valid by contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast(), len) })
}

/// # Safety
/// `p` is NULL or valid for `n` elements.
unsafe fn sizes<'a>(p: *const size_t, n: usize) -> &'a [usize] {
    if p.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: non-null and valid for n elements by the caller's contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}

macro_rules! try_c {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code as _,
        }
    };
}

macro_rules! deref {
    ($p:expr, $what:literal) => {
        if $p.is_null() {
            return fail(libc::EINVAL, concat!("NULL ", $what)) as _;
        } else {
            // SAFETY: non-null; the caller passes a pointer this API
            // returned and has not closed.
            unsafe { &mut *$p }
        }
    };
}

mod coll;
mod rules;
mod team;
mod transport;

pub use coll::*;
pub use rules::*;
pub use team::*;
pub use transport::*;

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: returns a valid C string.
        unsafe { CStr::from_ptr(knem_rs_last_error()) }
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_panic_becomes_an_error_code() {
        let rc = guard(PANICKED, || -> c_int { panic!("boom {}", 7) });
        assert_eq!(rc, -libc::ENOTRECOVERABLE);
        assert!(last().contains("boom 7"), "{}", last());
        assert_eq!(guard(PANICKED, || 5), 5);
    }

    #[test]
    fn sizes_are_checked() {
        assert_eq!(blocks(3, 4, "x"), Ok(12));
        assert_eq!(blocks(usize::MAX / 3 + 1, 3, "x"), Err(-libc::EOVERFLOW));
        assert!(last().contains("x: 3 x"), "{}", last());
        assert_eq!(blocks(MAX_LEN / 2 + 1, 2, "x"), Err(-libc::EOVERFLOW));
        assert_eq!(blocks(MAX_LEN, 1, "x"), Ok(MAX_LEN));
        let b = [0u8; 4];
        // SAFETY: rejected before any slice is made.
        let r = unsafe { bytes(b.as_ptr().cast(), MAX_LEN + 1) };
        assert_eq!(r.err(), Some(-libc::EOVERFLOW));
        // SAFETY: as above.
        let r = unsafe { bytes(std::ptr::null(), 1) };
        assert_eq!(r.err(), Some(-libc::EFAULT));
        // SAFETY: as above.
        let r = unsafe { bytes(usize::MAX as *const c_void, 2) };
        assert_eq!(r.err(), Some(-libc::EFAULT));
    }
}
