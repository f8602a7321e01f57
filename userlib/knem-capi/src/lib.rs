//! C API of knem-rs userspace (header: include/knem_rs.h).  Every function
//! checks its pointers, turns errors into a negative errno at this edge,
//! and leaves a one-line message for `knem_rs_last_error`.

#![allow(clippy::missing_safety_doc)] // documented in include/knem_rs.h

use knem_coll::{Algorithm, Op, Team};
use knem_transport::{Descriptor, Exposure, Kind, Transport};
use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::io::{IoSlice, IoSliceMut};

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

/// The message of the calling thread's last failure ("" if none).
#[no_mangle]
pub extern "C" fn knem_rs_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// An open transport.
pub struct CTransport {
    t: Box<dyn Transport>,
    name: CString,
}

/// A team.
pub struct CTeam {
    team: Team,
    tname: CString,
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

fn open_transport(name: Option<&str>) -> Result<Box<dyn Transport>, c_int> {
    match name {
        None => knem_transport::from_env(),
        Some(n) => n.parse::<Kind>().and_then(knem_transport::open),
    }
    .map_err(transport_err)
}

/// # Safety
/// `p` is valid for `len` bytes, or `len` is 0.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], c_int> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL buffer with a non-zero length"));
    }
    // SAFETY: non-null and valid for len bytes by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// # Safety
/// `p` is valid for writes of `len` bytes, or `len` is 0.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], c_int> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(fail(libc::EFAULT, "NULL buffer with a non-zero length"));
    }
    // SAFETY: non-null and valid for len bytes by the caller's contract.
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

#[no_mangle]
pub unsafe extern "C" fn knem_rs_transport_open(
    name: *const c_char,
    out: *mut *mut CTransport,
) -> c_int {
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
        drop(unsafe { Box::from_raw(t) });
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
    let t = deref!(t, "transport");
    if out.is_null() || (buf.is_null() && len > 0) {
        return fail(libc::EINVAL, "NULL out pointer or buffer");
    }
    // SAFETY: the C caller keeps buf valid and lets peers access it until
    // knem_rs_exposure_close, as the header documents.
    let e = try_c!(unsafe { t.t.expose_raw(buf.cast(), len, publish != 0) }.map_err(transport_err));
    // SAFETY: out is non-null.
    unsafe { *out = Box::into_raw(Box::new(e)) };
    0
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
    let e = deref!(e, "exposure");
    try_c!(e.publish(offset, len).map_err(transport_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_exposure_collect(
    e: *mut Exposure,
    offset: size_t,
    len: size_t,
) -> c_int {
    let e = deref!(e, "exposure");
    try_c!(e.collect(offset, len).map_err(transport_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_exposure_close(e: *mut Exposure) {
    if !e.is_null() {
        // SAFETY: allocated by knem_rs_expose, closed once.
        drop(unsafe { Box::from_raw(e) });
    }
}

fn count(r: knem_transport::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => transport_err(e) as ssize_t,
    }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_read(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    buf: *mut c_void,
    len: size_t,
) -> ssize_t {
    let t = deref!(t, "transport");
    if remote.is_null() {
        return fail(libc::EINVAL, "NULL descriptor") as ssize_t;
    }
    // SAFETY: buffer contract of the header.
    let buf = try_c!(unsafe { bytes_mut(buf, len) }.map_err(|c| c as ssize_t));
    // SAFETY: remote is non-null and points to a descriptor.
    count(t.t.read(unsafe { &*remote }, offset, buf))
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
    let t = deref!(t, "transport");
    if src.is_null() || dst.is_null() {
        return fail(libc::EINVAL, "NULL descriptor") as ssize_t;
    }
    // SAFETY: both are non-null and point to descriptors.
    let (src, dst) = unsafe { (&*src, &*dst) };
    count(t.t.copy(src, src_offset, dst, dst_offset, len))
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_write(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    buf: *const c_void,
    len: size_t,
) -> ssize_t {
    let t = deref!(t, "transport");
    if remote.is_null() {
        return fail(libc::EINVAL, "NULL descriptor") as ssize_t;
    }
    // SAFETY: buffer contract of the header.
    let buf = try_c!(unsafe { bytes(buf, len) }.map_err(|c| c as ssize_t));
    // SAFETY: remote is non-null and points to a descriptor.
    count(t.t.write(unsafe { &*remote }, offset, buf))
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
    let t = deref!(t, "transport");
    if remote.is_null() {
        return fail(libc::EINVAL, "NULL descriptor") as ssize_t;
    }
    // SAFETY: iovec contract of the header.
    let bufs = try_c!(unsafe { iovs(iov, iovcnt) }.map_err(|c| c as ssize_t));
    let mut slices: Vec<IoSliceMut<'_>> = bufs.into_iter().map(IoSliceMut::new).collect();
    // SAFETY: remote is non-null and points to a descriptor.
    count(t.t.read_vectored(unsafe { &*remote }, offset, &mut slices))
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_writev(
    t: *mut CTransport,
    remote: *const Descriptor,
    offset: u64,
    iov: *const iovec,
    iovcnt: c_int,
) -> ssize_t {
    let t = deref!(t, "transport");
    if remote.is_null() {
        return fail(libc::EINVAL, "NULL descriptor") as ssize_t;
    }
    // SAFETY: iovec contract of the header; only read here.
    let bufs = try_c!(unsafe { iovs(iov, iovcnt) }.map_err(|c| c as ssize_t));
    let slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    // SAFETY: remote is non-null and points to a descriptor.
    count(t.t.write_vectored(unsafe { &*remote }, offset, &slices))
}

fn new_team(team: Team, out: *mut *mut CTeam) -> c_int {
    let tname = CString::new(team.transport().kind().name()).unwrap_or_default();
    // SAFETY: out checked non-null by the callers.
    unsafe { *out = Box::into_raw(Box::new(CTeam { team, tname })) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_attach_env(out: *mut *mut CTeam) -> c_int {
    if out.is_null() {
        return fail(libc::EINVAL, "NULL out pointer");
    }
    new_team(try_c!(Team::from_env().map_err(coll_err)), out)
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_attach(
    name: *const c_char,
    rank: c_int,
    size: c_int,
    transport: *const c_char,
    out: *mut *mut CTeam,
) -> c_int {
    if out.is_null() || rank < 0 || size <= 0 {
        return fail(libc::EINVAL, "NULL out pointer or bad rank/size");
    }
    // SAFETY: string contracts of the header.
    let Some(name) = try_c!(unsafe { opt_str(name) }) else {
        return fail(libc::EINVAL, "empty team name");
    };
    // SAFETY: as above.
    let t = try_c!(open_transport(try_c!(unsafe { opt_str(transport) })));
    new_team(
        try_c!(Team::attach(name, rank as usize, size as usize, t).map_err(coll_err)),
        out,
    )
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_rank(team: *const CTeam) -> c_int {
    if team.is_null() {
        return fail(libc::EINVAL, "NULL team");
    }
    // SAFETY: a live team by contract.
    unsafe { (*team).team.rank() as c_int }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_size(team: *const CTeam) -> c_int {
    if team.is_null() {
        return fail(libc::EINVAL, "NULL team");
    }
    // SAFETY: a live team by contract.
    unsafe { (*team).team.size() as c_int }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_transport_name(team: *const CTeam) -> *const c_char {
    if team.is_null() {
        return c"".as_ptr();
    }
    // SAFETY: a live team by contract.
    unsafe { (*team).tname.as_ptr() }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_barrier(team: *mut CTeam) -> c_int {
    let t = deref!(team, "team");
    try_c!(t.team.barrier().map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_allgather_words(
    team: *mut CTeam,
    words: *const u64,
    n: size_t,
    out: *mut u64,
) -> c_int {
    let t = deref!(team, "team");
    if n > knem_coll::team::SLOT_WORDS || (words.is_null() && n > 0) || out.is_null() {
        return fail(libc::EINVAL, "bad word arrays (at most 8 words)");
    }
    let input = if n == 0 {
        &[][..]
    } else {
        // SAFETY: n words by contract.
        unsafe { std::slice::from_raw_parts(words, n) }
    };
    let all = try_c!(t.team.allgather_words(input).map_err(coll_err));
    for (r, w) in all.iter().enumerate() {
        // SAFETY: out holds size*8 words by contract.
        unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), out.add(r * 8), 8) };
    }
    0
}

fn op_of(op: c_int) -> Option<Op> {
    Op::ALL.get(usize::try_from(op).ok()?).copied()
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_plan(
    team: *const CTeam,
    op: c_int,
    n: size_t,
    alg: *mut c_int,
    k: *mut c_int,
    predicted_seconds: *mut f64,
) -> c_int {
    if team.is_null() {
        return fail(libc::EINVAL, "NULL team");
    }
    let Some(op) = op_of(op) else {
        return fail(libc::EINVAL, "unknown operation");
    };
    // SAFETY: a live team by contract.
    let t = unsafe { &(*team).team };
    let topo = t.topology();
    let (a, c) = t.params().plan(
        op,
        n as u64,
        t.size(),
        topo.node_count(),
        topo.largest_group(),
    );
    let (code, kk) = a.code();
    // SAFETY: each out pointer is NULL or writable.
    unsafe {
        if !alg.is_null() {
            *alg = code as c_int;
        }
        if !k.is_null() {
            *k = kk as c_int;
        }
        if !predicted_seconds.is_null() {
            *predicted_seconds = c;
        }
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_close(team: *mut CTeam) {
    if !team.is_null() {
        // SAFETY: allocated by an attach function, closed once.
        drop(unsafe { Box::from_raw(team) });
    }
}

fn alg_of(alg: c_int, k: c_int) -> Result<Option<Algorithm>, c_int> {
    if alg == 0 {
        return Ok(None);
    }
    Algorithm::from_code(alg.max(0) as u32, k.max(0) as u32)
        .map(Some)
        .ok_or_else(|| fail(libc::EINVAL, format!("unknown algorithm code {alg}")))
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_bcast(
    team: *mut CTeam,
    buf: *mut c_void,
    len: size_t,
    root: c_int,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    // SAFETY: buffer contract of the header.
    let buf = try_c!(unsafe { bytes_mut(buf, len) });
    let alg = try_c!(alg_of(alg, k));
    try_c!(t
        .team
        .bcast(buf, root.max(0) as usize, alg)
        .map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_scatter(
    team: *mut CTeam,
    send: *const c_void,
    recv: *mut c_void,
    n: size_t,
    root: c_int,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    let p = t.team.size();
    let send_len = if t.team.rank() == root.max(0) as usize {
        n * p
    } else {
        0
    };
    // SAFETY: buffer contracts of the header.
    let (send, recv) = (
        try_c!(unsafe { bytes(send, send_len) }),
        try_c!(unsafe { bytes_mut(recv, n) }),
    );
    let alg = try_c!(alg_of(alg, k));
    try_c!(t
        .team
        .scatter(send, recv, root.max(0) as usize, alg)
        .map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_scatterv(
    team: *mut CTeam,
    send: *const c_void,
    send_len: size_t,
    counts: *const size_t,
    displs: *const size_t,
    recv: *mut c_void,
    recv_len: size_t,
    root: c_int,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    let p = t.team.size();
    // SAFETY: buffer and array contracts of the header.
    let (send, recv) = (
        try_c!(unsafe { bytes(send, send_len) }),
        try_c!(unsafe { bytes_mut(recv, recv_len) }),
    );
    // SAFETY: as above.
    let (counts, displs) = unsafe { (sizes(counts, p), sizes(displs, p)) };
    let alg = try_c!(alg_of(alg, k));
    try_c!(t
        .team
        .scatterv(send, counts, displs, recv, root.max(0) as usize, alg)
        .map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_gather(
    team: *mut CTeam,
    send: *const c_void,
    recv: *mut c_void,
    n: size_t,
    root: c_int,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    let p = t.team.size();
    let recv_len = if t.team.rank() == root.max(0) as usize {
        n * p
    } else {
        0
    };
    // SAFETY: buffer contracts of the header.
    let (send, recv) = (
        try_c!(unsafe { bytes(send, n) }),
        try_c!(unsafe { bytes_mut(recv, recv_len) }),
    );
    let alg = try_c!(alg_of(alg, k));
    try_c!(t
        .team
        .gather(send, recv, root.max(0) as usize, alg)
        .map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_gatherv(
    team: *mut CTeam,
    send: *const c_void,
    send_len: size_t,
    recv: *mut c_void,
    recv_len: size_t,
    counts: *const size_t,
    displs: *const size_t,
    root: c_int,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    let p = t.team.size();
    // SAFETY: buffer and array contracts of the header.
    let (send, recv) = (
        try_c!(unsafe { bytes(send, send_len) }),
        try_c!(unsafe { bytes_mut(recv, recv_len) }),
    );
    // SAFETY: as above.
    let (counts, displs) = unsafe { (sizes(counts, p), sizes(displs, p)) };
    let alg = try_c!(alg_of(alg, k));
    try_c!(t
        .team
        .gatherv(send, recv, counts, displs, root.max(0) as usize, alg)
        .map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_allgather(
    team: *mut CTeam,
    send: *const c_void,
    recv: *mut c_void,
    n: size_t,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    let p = t.team.size();
    // SAFETY: buffer contracts of the header.
    let (send, recv) = (
        try_c!(unsafe { bytes(send, n) }),
        try_c!(unsafe { bytes_mut(recv, n * p) }),
    );
    let alg = try_c!(alg_of(alg, k));
    try_c!(t.team.allgather(send, recv, alg).map_err(coll_err));
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_alltoall(
    team: *mut CTeam,
    send: *const c_void,
    recv: *mut c_void,
    n: size_t,
    alg: c_int,
    k: c_int,
) -> c_int {
    let t = deref!(team, "team");
    let p = t.team.size();
    // SAFETY: buffer contracts of the header.
    let (send, recv) = (
        try_c!(unsafe { bytes(send, n * p) }),
        try_c!(unsafe { bytes_mut(recv, n * p) }),
    );
    let alg = try_c!(alg_of(alg, k));
    try_c!(t.team.alltoall(send, recv, alg).map_err(coll_err));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let msg = unsafe { CStr::from_ptr(knem_rs_last_error()) }
            .to_str()
            .unwrap();
        assert!(msg.contains("knem, cma or shm"), "{msg}");
    }
}
