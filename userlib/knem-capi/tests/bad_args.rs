//! Sizes the C API computes from its arguments are checked: huge counts
//! give -EOVERFLOW on every rank (no abort, no peer left waiting), bad
//! pointers and roots give -EFAULT / -EINVAL, and the team still works
//! afterwards.  Ranks are threads of this process over the shm transport.

mod common;

use common::{last, team_of};
use knem_rs::*;
use libc::{c_void, iovec};
use std::ptr::{null, null_mut};

/// After the failures, a real allgather proves every rank is in step.
fn allgather_works(team: *mut CTeam, rank: usize, size: usize) {
    let send = [rank as u8 + 1; 8];
    let mut recv = vec![0u8; 8 * size];
    // SAFETY: buffers of the sizes passed.
    let rc = unsafe {
        knem_rs_allgather(
            team,
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            8,
            0,
            0,
        )
    };
    assert_eq!(rc, 0, "rank {rank}: {}", last());
    for (r, block) in recv.chunks(8).enumerate() {
        assert_eq!(block, [r as u8 + 1; 8], "rank {rank}: block {r}");
    }
}

#[test]
fn huge_counts_overflow_on_every_rank() {
    team_of(3, c"shm", |team, rank| {
        let mut buf = [0u8; 64];
        let (s, r) = (buf.as_ptr().cast::<c_void>(), buf.as_mut_ptr().cast());
        // n * 3 wraps around size_t; the second does not wrap but exceeds
        // SSIZE_MAX.
        for n in [usize::MAX / 3 + 1, isize::MAX as usize / 3 + 1] {
            // SAFETY: every call is rejected before a slice is made.
            let rcs = unsafe {
                [
                    ("scatter", knem_rs_scatter(team, s, r, n, 0, 0, 0)),
                    ("gather", knem_rs_gather(team, s, r, n, 0, 0, 0)),
                    ("allgather", knem_rs_allgather(team, s, r, n, 0, 0)),
                    ("alltoall", knem_rs_alltoall(team, s, r, n, 0, 0)),
                ]
            };
            for (op, rc) in rcs {
                assert_eq!(rc, -libc::EOVERFLOW, "rank {rank} {op} n={n}: {}", last());
            }
            assert!(last().contains("alltoall"), "{}", last());
        }
        // SAFETY: rejected before a slice is made.
        let rc = unsafe { knem_rs_bcast(team, r, usize::MAX, 0, 0, 0) };
        assert_eq!(rc, -libc::EOVERFLOW, "bcast: {}", last());
        allgather_works(team, rank, 3);
    });
}

#[test]
fn bad_roots_algorithms_and_pointers() {
    team_of(2, c"shm", |team, rank| {
        let mut buf = [0u8; 64];
        let (s, r) = (buf.as_ptr().cast::<c_void>(), buf.as_mut_ptr().cast());
        // SAFETY: each call is rejected before any buffer is touched.
        unsafe {
            assert_eq!(knem_rs_scatter(team, s, r, 4, -1, 0, 0), -libc::EINVAL);
            assert!(last().contains("negative root"), "{}", last());
            assert_eq!(knem_rs_bcast(team, r, 4, 0, 3, -2), -libc::EINVAL);
            assert_eq!(knem_rs_bcast(team, r, 4, 0, 99, 0), -libc::EINVAL);
            assert_eq!(knem_rs_bcast(team, r, 4, 0, -5, 0), -libc::EINVAL);
            assert_eq!(knem_rs_bcast(team, null_mut(), 4, 0, 0, 0), -libc::EFAULT);
            assert_eq!(knem_rs_alltoall(team, null(), r, 4, 0, 0), -libc::EFAULT);
            assert_eq!(knem_rs_gather(null_mut(), s, r, 4, 0, 0, 0), -libc::EINVAL);
            assert_eq!(knem_rs_team_barrier(null_mut()), -libc::EINVAL);
            // Root out of range: every rank fails in knem-coll's check.
            assert_eq!(knem_rs_bcast(team, r, 4, 2, 0, 0), -libc::EINVAL);
        }
        allgather_works(team, rank, 2);
    });
}

/// v-variants on one rank: block ranges that overflow, a send buffer
/// shorter than the root's count (a Rust panic before the fix).
#[test]
fn v_counts_are_checked() {
    team_of(1, c"shm", |team, _| {
        let mut buf = [7u8; 16];
        let mut out = [0u8; 16];
        let (s, r) = (buf.as_mut_ptr().cast::<c_void>(), out.as_mut_ptr().cast());
        let huge = [usize::MAX];
        let two = [2usize];
        let zero = [0usize];
        let four = [4usize];
        // SAFETY: buffers and arrays of the sizes passed.
        unsafe {
            let rc = knem_rs_scatterv(team, s, 16, huge.as_ptr(), two.as_ptr(), r, 16, 0, 0, 0);
            assert_eq!(rc, -libc::EINVAL, "{}", last());
            let rc = knem_rs_gatherv(team, s, 16, r, 16, two.as_ptr(), huge.as_ptr(), 0, 0, 0);
            assert_eq!(rc, -libc::EINVAL, "{}", last());
            let rc = knem_rs_gatherv(team, s, 2, r, 16, four.as_ptr(), zero.as_ptr(), 0, 0, 0);
            assert_eq!(rc, -libc::EINVAL, "{}", last());
            assert!(last().contains("send buffer 2 < count 4"), "{}", last());
            let rc = knem_rs_gatherv(team, s, 4, r, 16, four.as_ptr(), two.as_ptr(), 0, 0, 0);
            assert_eq!(rc, 0, "{}", last());
        }
        assert_eq!(out[2..6], [7; 4]);
        assert_eq!(out[..2], [0; 2]);
    });
}

#[test]
fn transfer_lengths_are_checked() {
    let mut t = null_mut();
    // SAFETY: valid string and out pointer.
    assert_eq!(
        unsafe { knem_rs_transport_open(c"shm".as_ptr(), &mut t) },
        0
    );
    let mut mine = vec![3u8; 4096];
    let mut e = null_mut();
    let mut d = std::mem::MaybeUninit::uninit();
    // SAFETY: the buffer outlives the exposure, closed below.
    unsafe {
        assert_eq!(
            knem_rs_expose(t, mine.as_mut_ptr().cast(), 4096, 1, &mut e),
            0
        );
        assert_eq!(knem_rs_exposure_descriptor(e, d.as_mut_ptr()), 0);
    }
    // SAFETY: filled just above.
    let d = unsafe { d.assume_init() };
    let mut local = [0u8; 16];
    let p = local.as_mut_ptr().cast::<c_void>();
    let big = isize::MAX as usize / 2 + 1;
    let iov = [
        iovec {
            iov_base: p,
            iov_len: big,
        },
        iovec {
            iov_base: p,
            iov_len: big,
        },
    ];
    let wraps = [
        iovec {
            iov_base: p,
            iov_len: usize::MAX,
        },
        iovec {
            iov_base: p,
            iov_len: 2,
        },
    ];
    // SAFETY: every call is rejected before a slice is made, except the
    // last reads, which use the 16-byte buffer.
    unsafe {
        assert_eq!(
            knem_rs_readv(t, &d, 0, iov.as_ptr(), 2),
            -(libc::EOVERFLOW as isize)
        );
        assert_eq!(
            knem_rs_writev(t, &d, 0, wraps.as_ptr(), 2),
            -(libc::EOVERFLOW as isize)
        );
        assert_eq!(
            knem_rs_read(t, &d, 0, p, usize::MAX),
            -(libc::EOVERFLOW as isize)
        );
        assert_eq!(
            knem_rs_write(t, &d, 0, p, big * 2),
            -(libc::EOVERFLOW as isize)
        );
        assert_eq!(
            knem_rs_copy(t, &d, 0, &d, 0, usize::MAX),
            -(libc::EOVERFLOW as isize)
        );
        assert_eq!(knem_rs_read(t, null(), 0, p, 4), -(libc::EINVAL as isize));
        assert_eq!(
            knem_rs_read(t, &d, 0, null_mut(), 4),
            -(libc::EFAULT as isize)
        );
        let mut e2 = null_mut();
        assert_eq!(
            knem_rs_expose(t, p, usize::MAX, 0, &mut e2),
            -libc::EOVERFLOW
        );
        assert!(e2.is_null());
        assert_eq!(knem_rs_read(t, &d, 4090, p, 16), 6);
        assert_eq!(local[..6], [3; 6]);
        knem_rs_exposure_close(e);
        knem_rs_transport_close(t);
    }
}
