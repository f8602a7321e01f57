//! Rules through the C API: a tuning run on a team of threads whose
//! "MPI" hands over instantly below 64 KiB and in 20 ms from there, the
//! file it writes, and what a team then decides with it; the refusals.

mod common;

use common::{last, team_of};
use knem_coll::rules::{Choice, Rules};
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

/// A tuning run's MPI side in these tests: the team, and below which size
/// the knem-rs candidates cannot carry a call (the callback says so).
struct Ctx {
    test: usize,
    rank: usize,
    team: *mut CTeam,
    decline_below: size_t,
}

/// Hand over is instant below 64 KiB and takes 20 ms from there; a knem-rs
/// algorithm is timed for real, on the team over its transport.
unsafe extern "C" fn time(
    ctx: *mut c_void,
    op: c_int,
    alg: c_int,
    k: c_int,
    n: size_t,
    calls: u32,
    seconds: *mut f64,
) -> c_int {
    // SAFETY: tune() passes its Ctx, alive for the whole run.
    let c = unsafe { &*(ctx as *const Ctx) };
    if alg < 0 {
        // SAFETY: the tuner's out pointer.
        unsafe { *seconds = if n >= 65536 { 0.02 } else { 1e-7 } };
        return 0;
    }
    if n < c.decline_below {
        return 1;
    }
    let (mut send, mut recv) = (vec![c.rank as u8; n * 2], vec![0u8; n * 2]);
    // SAFETY: a live team of this test; buffers of n × 2 ranks.
    unsafe {
        knem_rs_team_barrier(c.team);
        let t = std::time::Instant::now();
        for _ in 0..calls {
            let (sp, rp) = (send.as_mut_ptr().cast(), recv.as_mut_ptr().cast());
            let rc = match op {
                OP_BCAST => knem_rs_bcast(c.team, rp, n, 0, alg, k),
                OP_ALLTOALL => knem_rs_alltoall(c.team, sp, rp, n, alg, k),
                _ => -libc::EINVAL,
            };
            if rc != 0 {
                return rc;
            }
        }
        *seconds = t.elapsed().as_secs_f64() / f64::from(calls);
    }
    0
}

/// The max-reduction of the test's two ranks.
unsafe extern "C" fn max_all(ctx: *mut c_void, v: *mut f64, len: size_t) -> c_int {
    // SAFETY: tune() passes its Ctx, alive for the whole run.
    let c = unsafe { &*(ctx as *const Ctx) };
    let (r, rank) = (&REDUCTIONS[c.test], c.rank);
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
    decline_below: size_t,
) -> *mut KnemRsTuner {
    let mut ctx = Ctx {
        test,
        rank,
        team,
        decline_below,
    };
    // SAFETY: valid strings, team and callbacks for the whole run.
    unsafe {
        let tuner = knem_rs_tuner_new(c"test".as_ptr(), 0.05);
        assert!(!tuner.is_null(), "{}", last());
        let mpi = KnemRsTuneMpi {
            ctx: (&mut ctx as *mut Ctx).cast(),
            time: Some(time),
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

/// A candidate the MPI side cannot run (its callback says 1 on every
/// rank) is dropped at that size, on every rank alike, and hand over or
/// another candidate decides.
#[test]
fn candidates_the_mpi_cannot_run_are_dropped() {
    team_of(2, c"cma", |team, rank| {
        let file = path();
        // SAFETY: valid strings, team and callbacks for the whole run.
        unsafe {
            let tuner = tune(team, 1, rank, c"alltoall", c"4K,128K", (5, 10), 65536);
            if rank == 0 {
                let p = CString::new(format!("{}.declined", file.to_str().unwrap())).unwrap();
                assert_eq!(knem_rs_tuner_write(tuner, p.as_ptr()), 0, "{}", last());
                let text = std::fs::read_to_string(p.to_str().unwrap()).unwrap();
                let rules = Rules::parse(&text).unwrap();
                let points = &rules.cases[0].points;
                // 4 KiB: only hand over was timed, and took it.
                assert_eq!(points[0].choice, Choice::HandOver, "{text}");
                assert_eq!(points[0].timings.len(), 1, "{text}");
                // 128 KiB: knem-rs against 20 ms of hand over.
                assert_ne!(points[1].choice, Choice::HandOver, "{text}");
                assert!(points[1].timings.len() > 1, "{text}");
                std::fs::remove_file(p.to_str().unwrap()).unwrap();
            }
            knem_rs_tuner_free(tuner);
        }
    });
}
