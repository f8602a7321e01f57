//! knem_rs_team_cache_regions, _region_cache_stats and knem_rs_note_release
//! through the C entry points: repeats hit, a reported release makes the
//! next call declare again, the bounds hold, shm refuses, and turning the
//! cache off or closing the team leaves nothing kept.  Ranks are threads
//! of this process over CMA (the knem side runs in the VM, under Open MPI).

mod common;

use common::{last, team_of};
use knem_rs::*;
use libc::c_void;
use std::ptr::null_mut;

fn stats(team: *mut CTeam) -> CCacheStats {
    let mut s = CCacheStats::default();
    // SAFETY: a live team and a writable out struct.
    let rc = unsafe { knem_rs_team_region_cache_stats(team, &mut s) };
    assert_eq!(rc, 0, "stats: {}", last());
    s
}

/// An allgather of n bytes per rank from `send` into `recv`, checked.
fn allgather(team: *mut CTeam, rank: usize, send: &mut [u8], recv: &mut [u8], salt: u8) {
    let n = send.len();
    send.fill(rank as u8 ^ salt);
    // SAFETY: buffers of the sizes passed (recv holds 2 blocks).
    let rc = unsafe {
        knem_rs_allgather(
            team,
            send.as_ptr().cast::<c_void>(),
            recv.as_mut_ptr().cast(),
            n,
            0,
            0,
        )
    };
    assert_eq!(rc, 0, "rank {rank}: {}", last());
    for (r, block) in recv.chunks(n).enumerate() {
        assert!(
            block.iter().all(|b| *b == r as u8 ^ salt),
            "rank {rank}: block {r}"
        );
    }
}

#[test]
fn repeats_hit_releases_and_bounds() {
    team_of(2, c"cma", |team, rank| {
        // SAFETY: a live team; this test reports its releases itself.
        assert_eq!(unsafe { knem_rs_team_cache_regions(team, 2, 1 << 20) }, 0);
        let mut send = vec![0u8; 4096];
        let mut recvs = vec![vec![0u8; 8192]; 3];
        for salt in 0..5 {
            allgather(team, rank, &mut send, &mut recvs[0], salt);
        }
        // allgather exposes the receive buffer: declared once, kept.
        let s = stats(team);
        assert_eq!((s.misses, s.hits, s.entries, s.bytes), (1, 4, 1, 8192));
        // A release inside the kept buffer: the next call declares again.
        knem_rs_note_release(recvs[0][100..].as_ptr().cast(), 1);
        allgather(team, rank, &mut send, &mut recvs[0], 9);
        let s = stats(team);
        assert_eq!((s.misses, s.invalidated), (2, 1));
        // Three buffers through a cache of two: the oldest goes.
        for r in recvs.iter_mut() {
            allgather(team, rank, &mut send, r, 3);
        }
        let s = stats(team);
        assert_eq!((s.entries, s.evicted), (2, 1));
        // Off: nothing kept, and no stats.
        // SAFETY: as above.
        assert_eq!(unsafe { knem_rs_team_cache_regions(team, 0, 0) }, 0);
        let mut out = CCacheStats::default();
        // SAFETY: as above.
        let rc = unsafe { knem_rs_team_region_cache_stats(team, &mut out) };
        assert_eq!(rc, -libc::ENOENT);
    });
}

#[test]
fn shm_and_null_refuse() {
    team_of(1, c"shm", |team, _| {
        // SAFETY: a live team, then NULLs the API rejects.
        unsafe {
            assert_eq!(knem_rs_team_cache_regions(team, 4, 1 << 20), -libc::EINVAL);
            assert!(last().contains("shm team keeps no regions"), "{}", last());
            assert_eq!(knem_rs_team_cache_regions(null_mut(), 4, 1), -libc::EINVAL);
            assert_eq!(
                knem_rs_team_region_cache_stats(team, null_mut()),
                -libc::EINVAL
            );
        }
    });
}
