//! Transports, exposures and point-to-point copies.

use crate::{bytes, bytes_mut, fail, guard, length, opt_str, transport_err, MAX_LEN, PANICKED};
use knem_transport::{Descriptor, Exposure, Kind, Transport};
use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};
use std::ffi::CString;
use std::io::{IoSlice, IoSliceMut};

/// An open transport.
pub struct CTransport {
    t: Box<dyn Transport>,
    name: CString,
}

pub(crate) fn open_transport(name: Option<&str>) -> Result<Box<dyn Transport>, c_int> {
    match name {
        None => knem_transport::from_env(),
        Some(n) => n.parse::<Kind>().and_then(knem_transport::open),
    }
    .map_err(transport_err)
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_transport_open(
    name: *const c_char,
    out: *mut *mut CTransport,
) -> c_int {
    guard(PANICKED, || {
        if out.is_null() {
            return fail(libc::EINVAL, "NULL out pointer");
        }
        // SAFETY: forwarded contract on `name`.
        let name = try_c!(unsafe { opt_str(name) });
        let t = try_c!(open_transport(name));
        let cname = CString::new(t.kind().name()).unwrap_or_default();
        // SAFETY: out is non-null and writable by contract.
        unsafe { *out = Box::into_raw(Box::new(CTransport { t, name: cname })) };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_transport_name(t: *const CTransport) -> *const c_char {
    if t.is_null() {
        return c"".as_ptr();
    }
    // SAFETY: a live transport by contract.
    unsafe { (*t).name.as_ptr() }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_transport_close(t: *mut CTransport) {
    if !t.is_null() {
        // SAFETY: allocated by knem_rs_transport_open, closed once.
        guard((), || drop(unsafe { Box::from_raw(t) }));
    }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_expose(
    t: *mut CTransport,
    buf: *mut c_void,
    len: size_t,
    publish: c_int,
    out: *mut *mut Exposure,
) -> c_int {
    guard(PANICKED, || {
        let t = deref!(t, "transport");
        if out.is_null() {
            return fail(libc::EINVAL, "NULL out pointer");
        }
        if len > 0 {
            try_c!(crate::span(buf, len));
        }
        // SAFETY: the C caller keeps buf valid and lets peers access it
        // until knem_rs_exposure_close, as the header documents.
        let e =
            try_c!(unsafe { t.t.expose_raw(buf.cast(), len, publish != 0) }.map_err(transport_err));
        // SAFETY: out is non-null.
        unsafe { *out = Box::into_raw(Box::new(e)) };
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_exposure_descriptor(
    e: *const Exposure,
    out: *mut Descriptor,
) -> c_int {
    if e.is_null() || out.is_null() {
        return fail(libc::EINVAL, "NULL exposure or out pointer");
    }
    // SAFETY: live exposure and writable out by contract; Descriptor is
    // repr(C) and matches knem_rs_desc.
    unsafe { *out = (*e).descriptor() };
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_exposure_publish(
    e: *mut Exposure,
    offset: size_t,
    len: size_t,
) -> c_int {
    guard(PANICKED, || {
        let e = deref!(e, "exposure");
        try_c!(e.publish(offset, len).map_err(transport_err));
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_exposure_collect(
    e: *mut Exposure,
    offset: size_t,
    len: size_t,
) -> c_int {
    guard(PANICKED, || {
        let e = deref!(e, "exposure");
        try_c!(e.collect(offset, len).map_err(transport_err));
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_exposure_close(e: *mut Exposure) {
    if !e.is_null() {
        // SAFETY: allocated by knem_rs_expose, closed once.
        guard((), || drop(unsafe { Box::from_raw(e) }));
    }
}

/// A byte count (at most the caller's length, itself at most SSIZE_MAX).
fn count(r: knem_transport::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => ssize_t::try_from(n).unwrap_or(ssize_t::MAX),
        Err(e) => transport_err(e) as ssize_t,
    }
}

/// # Safety
/// `d` is NULL or points to a descriptor.
unsafe fn desc<'a>(d: *const Descriptor) -> Result<&'a Descriptor, ssize_t> {
    if d.is_null() {
        return Err(fail(libc::EINVAL, "NULL descriptor") as ssize_t);
    }
    // SAFETY: non-null, a descriptor by contract.
    Ok(unsafe { &*d })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_read(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    buf: *mut c_void,
    len: size_t,
) -> ssize_t {
    guard(PANICKED as ssize_t, || {
        let t = deref!(t, "transport");
        // SAFETY: descriptor and buffer contracts of the header.
        let remote = try_c!(unsafe { desc(remote) });
        let buf = try_c!(unsafe { bytes_mut(buf, len) });
        count(t.t.read(remote, offset, buf))
    })
}

/// Copy between two exposures (neither need be ours), clamped at the end
/// of either; knem copies region to region in the kernel, CMA and shm
/// through a bounce buffer.
#[no_mangle]
pub unsafe extern "C" fn knem_rs_copy(
    t: *mut CTransport,
    src: *const Descriptor,
    src_offset: u64,
    dst: *const Descriptor,
    dst_offset: u64,
    len: size_t,
) -> ssize_t {
    guard(PANICKED as ssize_t, || {
        let t = deref!(t, "transport");
        // SAFETY: descriptor contracts of the header.
        let (src, dst) = (try_c!(unsafe { desc(src) }), try_c!(unsafe { desc(dst) }));
        let len = try_c!(length(len, "copy"));
        count(t.t.copy(src, src_offset, dst, dst_offset, len))
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_write(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    buf: *const c_void,
    len: size_t,
) -> ssize_t {
    guard(PANICKED as ssize_t, || {
        let t = deref!(t, "transport");
        // SAFETY: descriptor and buffer contracts of the header.
        let remote = try_c!(unsafe { desc(remote) });
        let buf = try_c!(unsafe { bytes(buf, len) });
        count(t.t.write(remote, offset, buf))
    })
}

/// # Safety
/// `iov` is valid for `cnt` entries, each valid for its length.
unsafe fn iovs<'a>(iov: *const iovec, cnt: c_int) -> Result<Vec<&'a mut [u8]>, c_int> {
    if cnt < 0 || (iov.is_null() && cnt > 0) {
        return Err(fail(libc::EINVAL, "bad iovec array"));
    }
    let list = if cnt == 0 {
        &[][..]
    } else {
        // SAFETY: non-null, cnt entries by contract.
        unsafe { std::slice::from_raw_parts(iov, cnt as usize) }
    };
    // The total must fit the ssize_t result (the transports add it up).
    let total = list
        .iter()
        .try_fold(0usize, |acc, v| acc.checked_add(v.iov_len))
        .filter(|t| *t <= MAX_LEN);
    if total.is_none() {
        return Err(fail(
            libc::EOVERFLOW,
            "iovec lengths add up to more than SSIZE_MAX",
        ));
    }
    list.iter()
        // SAFETY: each entry valid for its length by contract.
        .map(|v| unsafe { bytes_mut(v.iov_base, v.iov_len) })
        .collect()
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_readv(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    iov: *const iovec,
    iovcnt: c_int,
) -> ssize_t {
    guard(PANICKED as ssize_t, || {
        let t = deref!(t, "transport");
        // SAFETY: descriptor and iovec contracts of the header.
        let remote = try_c!(unsafe { desc(remote) });
        let bufs = try_c!(unsafe { iovs(iov, iovcnt) });
        let mut slices: Vec<IoSliceMut<'_>> = bufs.into_iter().map(IoSliceMut::new).collect();
        count(t.t.read_vectored(remote, offset, &mut slices))
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_writev(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    iov: *const iovec,
    iovcnt: c_int,
) -> ssize_t {
    guard(PANICKED as ssize_t, || {
        let t = deref!(t, "transport");
        // SAFETY: descriptor and iovec contracts of the header; the
        // buffers are only read here.
        let remote = try_c!(unsafe { desc(remote) });
        let bufs = try_c!(unsafe { iovs(iov, iovcnt) });
        let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        count(t.t.write_vectored(remote, offset, &slices))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn descriptor_layout_matches_header() {
        assert_eq!(std::mem::size_of::<Descriptor>(), 32);
        assert_eq!(std::mem::offset_of!(Descriptor, addr), 8);
        assert_eq!(std::mem::offset_of!(Descriptor, id), 24);
    }

    #[test]
    fn unknown_transport_sets_the_message() {
        let mut out = std::ptr::null_mut();
        // SAFETY: valid string and out pointer.
        let rc = unsafe { knem_rs_transport_open(c"rdma".as_ptr(), &mut out) };
        assert_eq!(rc, -libc::EINVAL);
        // SAFETY: returns a valid C string.
        let msg = unsafe { CStr::from_ptr(crate::knem_rs_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("knem, cma or shm"), "{msg}");
    }
}
