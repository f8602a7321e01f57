//! Teams: attach, rank and size, barrier, word exchange, the planner.

use crate::transport::open_transport;
use crate::{coll_err, fail, guard, opt_str, PANICKED};
use knem_coll::launch::TEAM_PREFIX;
use knem_coll::{Op, Team};
use libc::{c_char, c_int, c_void, size_t};
use std::ffi::CString;

/// A team.
pub struct CTeam {
    pub(crate) team: Team,
    tname: CString,
    /// The rules loaded by knem_rs_team_load_rules.
    pub(crate) rules: Option<knem_coll::rules::Rules>,
    /// knem_rs_team_model_notes's text.
    pub(crate) notes: CString,
}

fn new_team(team: Team, out: *mut *mut CTeam) -> c_int {
    let tname = CString::new(team.transport().kind().name()).unwrap_or_default();
    let notes = CString::new(team.model_notes().join("; ").replace('\0', " ")).unwrap_or_default();
    let t = CTeam {
        team,
        tname,
        rules: None,
        notes,
    };
    // SAFETY: out checked non-null by the callers.
    unsafe { *out = Box::into_raw(Box::new(t)) };
    0
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_attach_env(out: *mut *mut CTeam) -> c_int {
    guard(PANICKED, || {
        if out.is_null() {
            return fail(libc::EINVAL, "NULL out pointer");
        }
        new_team(try_c!(Team::from_env().map_err(coll_err)), out)
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_create(
    prefix: *const c_char,
    name: *mut c_char,
    cap: size_t,
) -> c_int {
    guard(PANICKED, || {
        if name.is_null() {
            return fail(libc::EINVAL, "NULL name buffer");
        }
        // SAFETY: string contract of the header.
        let prefix = try_c!(unsafe { opt_str(prefix) }).unwrap_or(TEAM_PREFIX);
        let made = try_c!(knem_coll::team::create_fresh_block(prefix).map_err(coll_err));
        if made.len() >= cap {
            // Nobody will attach to it or unlink it.
            let _ = std::fs::remove_file(knem_coll::team::team_path(&made));
            return fail(
                libc::ERANGE,
                format!(
                    "a team name needs {} bytes, the buffer has {cap}",
                    made.len() + 1
                ),
            );
        }
        // SAFETY: name holds cap > made.len() bytes by contract.
        unsafe {
            std::ptr::copy_nonoverlapping(made.as_ptr(), name.cast::<u8>(), made.len());
            *name.add(made.len()) = 0;
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_create_named(name: *const c_char) -> c_int {
    guard(PANICKED, || {
        // SAFETY: string contract of the header.
        let Some(name) = try_c!(unsafe { opt_str(name) }) else {
            return fail(libc::EINVAL, "empty team name");
        };
        try_c!(knem_coll::team::create_block(name).map_err(coll_err));
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_unlink(name: *const c_char) -> c_int {
    guard(PANICKED, || {
        // SAFETY: string contract of the header.
        let Some(name) = try_c!(unsafe { opt_str(name) }) else {
            return fail(libc::EINVAL, "empty team name");
        };
        let path = knem_coll::team::team_path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => 0,
            Err(e) => fail(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("unlink {}: {e}", path.display()),
            ),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_attach(
    name: *const c_char,
    rank: c_int,
    size: c_int,
    transport: *const c_char,
    out: *mut *mut CTeam,
) -> c_int {
    guard(PANICKED, || {
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
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_rank(team: *const CTeam) -> c_int {
    if team.is_null() {
        return fail(libc::EINVAL, "NULL team");
    }
    // SAFETY: a live team by contract; ranks are below 64.
    unsafe { (*team).team.rank() as c_int }
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_size(team: *const CTeam) -> c_int {
    if team.is_null() {
        return fail(libc::EINVAL, "NULL team");
    }
    // SAFETY: a live team by contract; sizes are at most 64.
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
    guard(PANICKED, || {
        let t = deref!(team, "team");
        try_c!(t.team.barrier().map_err(coll_err));
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_allgather_words(
    team: *mut CTeam,
    words: *const u64,
    n: size_t,
    out: *mut u64,
) -> c_int {
    guard(PANICKED, || {
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
            // SAFETY: out holds size*8 words by contract (size <= 64).
            unsafe { std::ptr::copy_nonoverlapping(w.as_ptr(), out.add(r * 8), 8) };
        }
        0
    })
}

pub(crate) fn op_of(op: c_int) -> Option<Op> {
    Op::ALL.get(usize::try_from(op).ok()?).copied()
}

/// The team behind `team` and the operation `op` names, checked.
///
/// # Safety
/// `team` is NULL or a live team of this API.
pub(crate) unsafe fn team_op<'a>(team: *const CTeam, op: c_int) -> Result<(&'a CTeam, Op), c_int> {
    if team.is_null() {
        return Err(fail(libc::EINVAL, "NULL team"));
    }
    let Some(op) = op_of(op) else {
        return Err(fail(libc::EINVAL, "unknown operation"));
    };
    // SAFETY: non-null and live by the caller's contract.
    Ok((unsafe { &*team }, op))
}

/// Write `a`'s code and k to the out pointers, each NULL or writable.
pub(crate) fn put_algorithm(a: knem_coll::Algorithm, alg: *mut c_int, k: *mut c_int) {
    let (code, kk) = a.code();
    // SAFETY: each out pointer is NULL or writable (the callers' contract).
    unsafe {
        if !alg.is_null() {
            *alg = code as c_int;
        }
        if !k.is_null() {
            *k = c_int::try_from(kk).unwrap_or(c_int::MAX);
        }
    }
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
    guard(PANICKED, || {
        // SAFETY: a live team (or NULL) by contract.
        let (t, op) = try_c!(unsafe { team_op(team, op) });
        let t = &t.team;
        let topo = t.topology();
        let (a, c) = t.params().plan(
            op,
            n as u64,
            t.size(),
            topo.node_count(),
            topo.largest_group(),
        );
        put_algorithm(a, alg, k);
        if !predicted_seconds.is_null() {
            // SAFETY: non-null, writable by contract.
            unsafe { *predicted_seconds = c };
        }
        0
    })
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_cache_regions(
    team: *mut CTeam,
    max_entries: size_t,
    max_bytes: size_t,
) -> c_int {
    guard(PANICKED, || {
        let t = deref!(team, "team");
        // SAFETY: the caller's promise to report releases (header).
        try_c!(unsafe { t.team.cache_regions(max_entries, max_bytes) }.map_err(coll_err));
        0
    })
}

/// What knem_rs_team_region_cache_stats fills in (knem_rs_cache_stats).
#[repr(C)]
#[derive(Default)]
pub struct CCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub invalidated: u64,
    pub evicted: u64,
    pub entries: u64,
    pub bytes: u64,
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_region_cache_stats(
    team: *const CTeam,
    out: *mut CCacheStats,
) -> c_int {
    guard(PANICKED, || {
        if team.is_null() || out.is_null() {
            return fail(libc::EINVAL, "NULL team or out pointer");
        }
        // SAFETY: a live team by contract.
        let Some(s) = (unsafe { &(*team).team }).region_cache_stats() else {
            return fail(libc::ENOENT, "the team keeps no regions");
        };
        // SAFETY: out is writable by contract.
        unsafe {
            *out = CCacheStats {
                hits: s.hits,
                misses: s.misses,
                invalidated: s.invalidated,
                evicted: s.evicted,
                entries: s.entries,
                bytes: s.bytes,
            }
        };
        0
    })
}

#[no_mangle]
pub extern "C" fn knem_rs_region_cache_process_limit(bytes: size_t) {
    knem_coll::region_cache::set_process_limit(bytes);
}

/// Atomics only: callable from memory hooks, inside munmap, from any
/// thread (no guard needed: nothing here can panic).
#[no_mangle]
pub extern "C" fn knem_rs_note_release(addr: *const c_void, len: size_t) {
    knem_coll::note_release(addr as usize, len);
}

#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_close(team: *mut CTeam) {
    if !team.is_null() {
        // SAFETY: allocated by an attach function, closed once.
        guard((), || drop(unsafe { Box::from_raw(team) }));
    }
}
