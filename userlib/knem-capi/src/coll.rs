//! Collectives.  Every size the API derives from its arguments (n × team
//! size) is checked on every rank before any peer is contacted, so an
//! overflow fails alike everywhere instead of leaving peers waiting.

use crate::team::CTeam;
use crate::{blocks, bytes, bytes_mut, coll_err, fail, guard, length, sizes, PANICKED};
use knem_coll::Algorithm;
use libc::{c_int, c_void, size_t};

fn alg_of(alg: c_int, k: c_int) -> Result<Option<Algorithm>, c_int> {
    if alg == 0 {
        return Ok(None);
    }
    if k < 0 {
        return Err(fail(libc::EINVAL, format!("negative k {k}")));
    }
    u32::try_from(alg)
        .ok()
        .and_then(|a| Algorithm::from_code(a, k as u32))
        .map(Some)
        .ok_or_else(|| fail(libc::EINVAL, format!("unknown algorithm code {alg}")))
}

fn root_of(root: c_int) -> Result<usize, c_int> {
    usize::try_from(root).map_err(|_| fail(libc::EINVAL, format!("negative root {root}")))
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let (root, alg) = (try_c!(root_of(root)), try_c!(alg_of(alg, k)));
        try_c!(length(len, "bcast"));
        // SAFETY: buffer contract of the header.
        let buf = try_c!(unsafe { bytes_mut(buf, len) });
        try_c!(t.team.bcast(buf, root, alg).map_err(coll_err));
        0
    })
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let (root, alg) = (try_c!(root_of(root)), try_c!(alg_of(alg, k)));
        let total = try_c!(blocks(n, t.team.size(), "scatter"));
        let send_len = if t.team.rank() == root { total } else { 0 };
        // SAFETY: buffer contracts of the header.
        let send = try_c!(unsafe { bytes(send, send_len) });
        let recv = try_c!(unsafe { bytes_mut(recv, n) });
        try_c!(t.team.scatter(send, recv, root, alg).map_err(coll_err));
        0
    })
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let p = t.team.size();
        let (root, alg) = (try_c!(root_of(root)), try_c!(alg_of(alg, k)));
        // SAFETY: buffer and array contracts of the header; the ranges
        // counts/displs name are checked against send_len by knem-coll.
        let send = try_c!(unsafe { bytes(send, send_len) });
        let recv = try_c!(unsafe { bytes_mut(recv, recv_len) });
        let (counts, displs) = unsafe { (sizes(counts, p), sizes(displs, p)) };
        try_c!(t
            .team
            .scatterv(send, counts, displs, recv, root, alg)
            .map_err(coll_err));
        0
    })
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let (root, alg) = (try_c!(root_of(root)), try_c!(alg_of(alg, k)));
        let total = try_c!(blocks(n, t.team.size(), "gather"));
        let recv_len = if t.team.rank() == root { total } else { 0 };
        // SAFETY: buffer contracts of the header.
        let send = try_c!(unsafe { bytes(send, n) });
        let recv = try_c!(unsafe { bytes_mut(recv, recv_len) });
        try_c!(t.team.gather(send, recv, root, alg).map_err(coll_err));
        0
    })
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let p = t.team.size();
        let (root, alg) = (try_c!(root_of(root)), try_c!(alg_of(alg, k)));
        // SAFETY: buffer and array contracts of the header; the ranges
        // counts/displs name are checked against recv_len by knem-coll.
        let send = try_c!(unsafe { bytes(send, send_len) });
        let recv = try_c!(unsafe { bytes_mut(recv, recv_len) });
        let (counts, displs) = unsafe { (sizes(counts, p), sizes(displs, p)) };
        try_c!(t
            .team
            .gatherv(send, recv, counts, displs, root, alg)
            .map_err(coll_err));
        0
    })
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let alg = try_c!(alg_of(alg, k));
        let total = try_c!(blocks(n, t.team.size(), "allgather"));
        // SAFETY: buffer contracts of the header.
        let send = try_c!(unsafe { bytes(send, n) });
        let recv = try_c!(unsafe { bytes_mut(recv, total) });
        try_c!(t.team.allgather(send, recv, alg).map_err(coll_err));
        0
    })
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        let alg = try_c!(alg_of(alg, k));
        let total = try_c!(blocks(n, t.team.size(), "alltoall"));
        // SAFETY: buffer contracts of the header.
        let send = try_c!(unsafe { bytes(send, total) });
        let recv = try_c!(unsafe { bytes_mut(recv, total) });
        try_c!(t.team.alltoall(send, recv, alg).map_err(coll_err));
        0
    })
}
