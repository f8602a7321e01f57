//! Rules through the C API: a tuning run on a team of threads whose
//! "MPI" hands over instantly below 64 KiB and in 20 ms from there, the
//! file it writes, and what a team then decides with it; the refusals.

mod common;

use common::{last, team_of};
use knem_rs::*;
use libc::{c_int, c_void, size_t};
use std::ffi::{CStr, CString};
use std::ptr::null_mut;
use std::sync::{Barrier, Mutex};

const OP_BCAST: c_int = 0;
const OP_ALLTOALL: c_int = 4;

/// The max-reduction over a team of two threads, one per test (tests
/// run at once).
struct Reduction {
    slots: Mutex<Vec<Vec<f64>>>,
    barrier: Barrier,
}

impl Reduction {
    const fn new() -> Reduction {
        Reduction {
            slots: Mutex::new(Vec::new()),
            barrier: Barrier::new(2),
        }
    }
}

static REDUCTIONS: [Reduction; 2] = [Reduction::new(), Reduction::new()];

unsafe extern "C" fn hand_over(
    _ctx: *mut c_void,
    _op: c_int,
    n: size_t,
    _send: *const c_void,
    _recv: *mut c_void,
) -> c_int {
    if n >= 65536 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    0
}

/// ctx: the test's reduction × 2 + the rank.
unsafe extern "C" fn max_all(ctx: *mut c_void, v: *mut f64, len: size_t) -> c_int {
    let (r, rank) = (&REDUCTIONS[ctx as usize / 2], ctx as usize % 2);
    // SAFETY: the tuner passes len doubles.
    let v = unsafe { std::slice::from_raw_parts_mut(v, len) };
    {
        let mut slots = r.slots.lock().unwrap();
        slots.resize(2, Vec::new());
        slots[rank] = v.to_vec();
    }
    r.barrier.wait();
    {
        let slots = r.slots.lock().unwrap();
        for (i, x) in v.iter_mut().enumerate() {
            *x = slots.iter().map(|s| s[i]).fold(f64::NEG_INFINITY, f64::max);
        }
    }
    r.barrier.wait();
    0
}

/// Tune `ops` at `sizes` as `rank` of `team`, with reduction `test`: the
/// tuner, the run having succeeded.
///
/// # Safety
/// `team` is a live team of two ranks of this test.
unsafe fn tune(
    team: *mut CTeam,
    test: usize,
    rank: usize,
    ops: &CStr,
    sizes: &CStr,
    (min_reps, max_reps): (u32, u32),
    region_cache: c_int,
) -> *mut KnemRsTuner {
    // SAFETY: valid strings, team and callbacks for the whole run.
    unsafe {
        let tuner = knem_rs_tuner_new(c"test".as_ptr(), 0.05);
        assert!(!tuner.is_null(), "{}", last());
        let mpi = KnemRsTuneMpi {
            ctx: (test * 2 + rank) as *mut c_void,
            hand_over: Some(hand_over),
            max_all: Some(max_all),
        };
        let rc = knem_rs_tuner_run(
            tuner,
            team,
            &mpi,
            ops.as_ptr(),
            sizes.as_ptr(),
            min_reps,
            max_reps,
            10.0,
            region_cache,
            0,
        );
        assert_eq!(rc, 0, "{}", last());
        tuner
    }
}

fn path() -> CString {
    let p = std::env::temp_dir().join(format!("knem-rs-capi-rules-{}.json", std::process::id()));
    CString::new(p.to_str().unwrap()).unwrap()
}

#[test]
fn tuned_rules_decide_for_the_team_and_bad_files_are_refused() {
    team_of(2, c"shm", |team, rank| {
        let file = path();
        // SAFETY: valid strings, team and callbacks for the whole run.
        unsafe {
            let tuner = tune(team, 0, rank, c"bcast", c"1K,256K", (10, 40), 0);
            if rank == 0 {
                assert_eq!(knem_rs_tuner_write(tuner, file.as_ptr()), 0, "{}", last());
            }
            knem_rs_tuner_free(tuner);
            knem_rs_team_barrier(team);

            assert_eq!(
                knem_rs_team_load_rules(team, file.as_ptr()),
                1,
                "{}",
                last()
            );
            let d = knem_rs_team_rules_digest(team);
            let mut words = [0u64; 16];
            assert_eq!(
                knem_rs_team_allgather_words(team, &d, 1, words.as_mut_ptr()),
                0
            );
            assert_eq!((words[0], words[8]), (d, d), "ranks read different rules");
            let (mut alg, mut k) = (-1, -1);
            assert_eq!(
                knem_rs_team_decide(team, OP_BCAST, 1024, &mut alg, &mut k),
                0
            );
            assert_eq!(
                knem_rs_team_decide(team, OP_BCAST, 256 << 10, &mut alg, &mut k),
                1
            );
            assert!((1..=7).contains(&alg), "bcast algorithm code {alg}");
            assert_eq!(
                knem_rs_team_decide(team, OP_ALLTOALL, 1024, null_mut(), null_mut()),
                -libc::ENOENT
            );
            assert!(
                last().contains("no rule for alltoall on 2 ranks over shm"),
                "{}",
                last()
            );
            knem_rs_team_barrier(team);

            // Refusals: one line naming the file and why; no rules kept.
            let text = std::fs::read_to_string(file.to_str().unwrap()).unwrap();
            let bad = |name: &str, body: &str| {
                let p = format!("{}.{name}.{rank}", file.to_str().unwrap());
                std::fs::write(&p, body).unwrap();
                CString::new(p).unwrap()
            };
            let other = text.replacen("\"cores\": ", "\"cores\": 1000", 1);
            for (p, errno, why) in [
                (
                    bad("garbage", "root:x:0:0\n"),
                    libc::EINVAL,
                    "not a knem-rs rules file",
                ),
                (
                    bad("other", &other),
                    libc::EINVAL,
                    "tuned on another machine",
                ),
                (
                    bad("old", &text.replacen("\"version\": 1", "\"version\": 7", 1)),
                    libc::EINVAL,
                    "rules of version 7",
                ),
                (
                    CString::new("/nonexistent/rules.json").unwrap(),
                    libc::ENOENT,
                    "No such file",
                ),
            ] {
                assert_eq!(
                    knem_rs_team_load_rules(team, p.as_ptr()),
                    -errno,
                    "{}",
                    last()
                );
                let msg = last();
                assert!(
                    msg.contains(why) && msg.contains(p.to_str().unwrap()),
                    "{msg}"
                );
                assert!(!msg.contains('\n'), "{msg:?}");
                assert_eq!(knem_rs_team_rules_digest(team), 0);
                assert_eq!(
                    knem_rs_team_decide(team, OP_BCAST, 1024, null_mut(), null_mut()),
                    -libc::ENOENT
                );
                let _ = std::fs::remove_file(p.to_str().unwrap());
            }
            knem_rs_team_barrier(team);
            if rank == 0 {
                std::fs::remove_file(file.to_str().unwrap()).unwrap();
            }
            assert_eq!(
                knem_rs_team_load_rules(null_mut(), file.as_ptr()),
                -libc::EINVAL
            );
            assert_eq!(knem_rs_team_rules_digest(std::ptr::null()), 0);
            assert!(knem_rs_tuner_new(null_mut(), 2.0).is_null());
        }
    });
}

/// With region_cache 1 over CMA the tuner keeps regions while it times
/// (as coll/knemrs will) and leaves the team as it found it: no cache.
#[test]
fn tuning_with_the_region_cache_leaves_no_cache_behind() {
    team_of(2, c"cma", |team, rank| {
        // SAFETY: valid strings, team and callbacks for the whole run.
        unsafe {
            let tuner = tune(team, 1, rank, c"bcast,alltoall", c"4K,32K", (5, 10), 1);
            knem_rs_tuner_free(tuner);
            let mut stats = std::mem::zeroed();
            assert_eq!(
                knem_rs_team_region_cache_stats(team, &mut stats),
                -libc::ENOENT
            );
            let mut limit = 0u64;
            let unlimited = knem_rs_pins_unlimited(&mut limit);
            assert!(unlimited == 0 || unlimited == 1);
        }
    });
}
