//! The offload-thread policy on the mock kernel: a context gets its thread
//! at its first asynchronous submission, at most
//! `max_offload_threads_per_user` per user; beyond that (or when the shim
//! cannot make one) the copy runs in the caller, slot and notification
//! written before the ioctl returns; release gives the thread back.

use super::helpers::{self, dev, drain, finish, pattern, read_all, Dev, PENDING};
use crate::edge::kalloc::KBox;
use crate::state::context::{status, Context};
use knem_abi::*;
use proptest::prelude::*;
use std::sync::atomic::Ordering::*;
use std::vec::Vec;

const T: u32 = KNEM_FLAG_MEMCPYTHREAD;
const N: u32 = KNEM_FLAG_NOTIFY_FD;
const LEN: u64 = 5000;

/// A context of `uid` with a status array of `n` slots (the caller keeps
/// the array alive until the context is released).
fn ctx_with_array(d: &Dev, uid: u32, slots: &mut Vec<u8>, n: usize) -> KBox<Context> {
    let c = d.ctx_new(uid).unwrap();
    slots.resize(n, 0);
    // SAFETY: the caller keeps the array alive until the context is gone.
    unsafe { c.set_status_array(slots.as_mut_ptr(), n as u64).unwrap() };
    c
}

/// A readable region holding `pattern(LEN, seed)` and a writable one of
/// the same size, both of `c`; returns (source cookie, destination
/// cookie, destination address).
fn pair(d: &Dev, c: &Context, seed: u8) -> (u64, u64, u64) {
    let src = d.env.put_slice(&pattern(LEN as usize, seed));
    let dst = d.env.map(LEN, true);
    let s = helpers::create(d, c, &[(src, LEN)], 1, 0).unwrap();
    let t = helpers::create(d, c, &[(dst, LEN)], 2, 0).unwrap();
    (s, t, dst)
}

/// An asynchronous COPY of the whole pair into slot `index`.
fn submit(d: &Dev, c: &Context, p: (u64, u64, u64), flags: u32, index: u32) -> Result<u32, i64> {
    helpers::copy_indexed(d, c, (p.0, 0), (p.1, 0), None, flags, index)
}

#[test]
fn idle_contexts_with_arrays_start_no_thread() {
    let d = dev();
    let mut arrays: Vec<Vec<u8>> = (0..50).map(|_| Vec::new()).collect();
    let ctxs: Vec<_> = arrays
        .iter_mut()
        .map(|a| ctx_with_array(&d, 7, a, 16))
        .collect();
    // Synchronous copies do not need one either.
    let p = pair(&d, &ctxs[0], 1);
    assert_eq!(submit(&d, &ctxs[0], p, 0, 0), helpers::OK);
    assert_eq!(d.env.spawns.load(SeqCst), 0);
    assert_eq!(d.workers.of(&d.env, 7), 0);
    assert_eq!(d.stats.snapshot().offload_threads, 0);
    finish(&d, ctxs);
}

#[test]
fn bound_reached_runs_in_the_caller() {
    let d = dev();
    d.env.offload_threads_per_user.store(2, SeqCst);
    let mut arrays: Vec<Vec<u8>> = (0..4).map(|_| Vec::new()).collect();
    let mut it = arrays.iter_mut();
    let mut ctxs: Vec<_> = (0..3)
        .map(|_| ctx_with_array(&d, 1, it.next().unwrap(), 8))
        .collect();
    // Another user has a bound of its own.
    let other = ctx_with_array(&d, 2, it.next().unwrap(), 8);
    let pairs: Vec<_> = (0..3).map(|i| pair(&d, &ctxs[i], i as u8)).collect();
    for i in 0..2 {
        assert_eq!(submit(&d, &ctxs[i], pairs[i], T, 3), PENDING);
    }
    assert_eq!(d.env.spawns.load(SeqCst), 2);
    assert_eq!(d.env.kicks.load(SeqCst), 2);
    assert_eq!(d.workers.of(&d.env, 1), 2);
    // The third context of uid 1 is over the bound: done at once, and its
    // current_status still reads PENDING, as for a fast thread.
    assert_eq!(submit(&d, &ctxs[2], pairs[2], T, 3), PENDING);
    assert_eq!(d.env.spawns.load(SeqCst), 2, "no thread over the bound");
    assert_eq!(d.env.kicks.load(SeqCst), 2, "nothing queued");
    assert_eq!(arrays[2][3], status::SUCCESS);
    assert_eq!(
        d.env.peek(pairs[2].2, LEN as usize),
        pattern(LEN as usize, 2)
    );
    assert_eq!((arrays[0][3], arrays[1][3]), (0, 0), "queued, not run");
    let s = d.stats.snapshot();
    assert_eq!((s.offload_threads, s.offload_fallbacks), (2, 1));
    assert_eq!(s.bytes_async, LEN);
    let po = pair(&d, &other, 9);
    assert_eq!(submit(&d, &other, po, T, 0), PENDING);
    assert_eq!(d.env.spawns.load(SeqCst), 3, "uid 2 is under its bound");
    assert_eq!(d.workers.of(&d.env, 2), 1);
    // The queued ones complete on their threads.
    for i in 0..2 {
        assert_eq!(drain(&d, &ctxs[i]), 1);
        assert_eq!(arrays[i][3], status::SUCCESS);
        assert_eq!(
            d.env.peek(pairs[i].2, LEN as usize),
            pattern(LEN as usize, i as u8)
        );
    }
    // Release gives a thread back: the context that ran in the caller gets
    // one at its next submission.
    d.ctx_release(ctxs.remove(0));
    assert_eq!(d.workers.of(&d.env, 1), 1);
    assert_eq!(d.stats.snapshot().offload_threads, 2);
    assert_eq!(submit(&d, &ctxs[1], pairs[2], T, 4), PENDING);
    assert_eq!(d.env.spawns.load(SeqCst), 4);
    assert_eq!(arrays[2][4], 0, "queued this time");
    assert_eq!(drain(&d, &ctxs[1]), 1);
    assert_eq!(arrays[2][4], status::SUCCESS);
    assert_eq!(d.stats.snapshot().offload_fallbacks, 1);
    ctxs.push(other);
    finish(&d, ctxs);
    assert_eq!(d.workers.of(&d.env, 1) + d.workers.of(&d.env, 2), 0);
    drop(arrays);
}

#[test]
fn fallback_notifies_and_keeps_credits() {
    let d = dev();
    d.env.offload_threads_per_user.store(0, SeqCst);
    let mut slots = Vec::new();
    let c = ctx_with_array(&d, 1, &mut slots, 2);
    let p = pair(&d, &c, 4);
    assert_eq!(submit(&d, &c, p, T | N, 1), PENDING);
    assert_eq!(submit(&d, &c, p, T | N, 0), PENDING);
    assert_eq!(slots, vec![status::SUCCESS; 2]);
    assert_eq!(d.env.notifies.load(SeqCst), 2);
    // One notification per slot may be owed, whoever ran the copy.
    assert_eq!(
        submit(&d, &c, p, T | N, 0),
        Err(helpers::neg(crate::edge::errno::EBUSY))
    );
    assert_eq!(read_all(&d, &c), vec![1, 0]);
    assert_eq!(c.notify_in_flight(), 0);
    assert_eq!(d.stats.snapshot().offload_fallbacks, 2);
    assert_eq!(d.env.spawns.load(SeqCst), 0);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn fallback_reports_a_failed_copy_in_the_slot() {
    let d = dev();
    d.env.offload_threads_per_user.store(0, SeqCst);
    let mut slots = Vec::new();
    let c = ctx_with_array(&d, 1, &mut slots, 1);
    let p = pair(&d, &c, 5);
    *d.env.stop_after.lock().unwrap() = Some(0);
    assert_eq!(submit(&d, &c, p, T, 0), PENDING);
    *d.env.stop_after.lock().unwrap() = None;
    assert_eq!(slots[0], status::FAILED);
    assert_eq!(d.stats.snapshot().copies_failed, 1);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn spawn_failure_gives_the_count_back() {
    let d = dev();
    d.env.offload_threads_per_user.store(1, SeqCst);
    d.env.spawn_fails.store(true, SeqCst);
    let mut slots = Vec::new();
    let c = ctx_with_array(&d, 1, &mut slots, 2);
    let p = pair(&d, &c, 6);
    assert_eq!(submit(&d, &c, p, T, 0), PENDING);
    assert_eq!(slots[0], status::SUCCESS, "ran in the caller");
    assert_eq!(d.workers.of(&d.env, 1), 0, "count given back");
    assert_eq!(d.stats.snapshot().offload_threads, 0);
    // The next submission tries again.
    d.env.spawn_fails.store(false, SeqCst);
    assert_eq!(submit(&d, &c, p, T, 1), PENDING);
    assert_eq!(slots[1], 0);
    assert_eq!(d.workers.of(&d.env, 1), 1);
    assert_eq!(drain(&d, &c), 1);
    assert_eq!(slots[1], status::SUCCESS);
    finish(&d, vec![c]);
    assert_eq!(d.workers.of(&d.env, 1), 0);
    drop(slots);
}

#[test]
fn a_queued_context_stays_on_its_thread_when_the_bound_drops() {
    let d = dev();
    let mut slots = Vec::new();
    let c = ctx_with_array(&d, 1, &mut slots, 3);
    let p = pair(&d, &c, 8);
    assert_eq!(submit(&d, &c, p, T, 0), PENDING);
    // Lowering the bound never takes a running thread away, so later
    // requests still queue behind earlier ones.
    d.env.offload_threads_per_user.store(0, SeqCst);
    assert_eq!(submit(&d, &c, p, T, 1), PENDING);
    assert_eq!(submit(&d, &c, p, T, 2), PENDING);
    assert_eq!(slots, vec![0; 3]);
    assert_eq!(drain(&d, &c), 3);
    assert_eq!(slots, vec![status::SUCCESS; 3]);
    assert_eq!(d.stats.snapshot().offload_fallbacks, 0);
    finish(&d, vec![c]);
    drop(slots);
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    /// Submit an asynchronous copy on context i.
    Submit(usize),
    /// Run context i's queue.
    Drain(usize),
    /// Release context i and open a new one for the same uid.
    Reopen(usize),
    /// Set the bound.
    Bound(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6usize).prop_map(Op::Submit),
        2 => (0..6usize).prop_map(Op::Drain),
        1 => (0..6usize).prop_map(Op::Reopen),
        1 => (0..4u64).prop_map(Op::Bound),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Six contexts of two users against a model of the policy: a context
    /// has a thread once a submission found its user under the bound, and
    /// until release; every submission without one runs in the caller;
    /// per user the live threads never exceed the bound in force when the
    /// last one started; slots say SUCCESS exactly when the model says the
    /// request ran; release gives the count back.
    #[test]
    fn policy_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        let d = dev();
        const SLOTS: usize = 64;
        let uid = |i: usize| (i % 2) as u32 + 1;
        let mut arrays: Vec<Vec<u8>> = (0..6).map(|_| vec![0u8; SLOTS]).collect();
        let mut ctxs: Vec<KBox<Context>> = Vec::new();
        for (i, a) in arrays.iter_mut().enumerate() {
            let c = d.ctx_new(uid(i)).unwrap();
            // SAFETY: every array outlives its contexts (released below).
            unsafe { c.set_status_array(a.as_mut_ptr(), SLOTS as u64).unwrap() };
            ctxs.push(c);
        }
        let mut pairs: Vec<_> = (0..6).map(|i| pair(&d, &ctxs[i], i as u8)).collect();
        // Model: thread per context, queued slots per context, next slot,
        // threads per uid, fallbacks.
        let mut bound = crate::edge::shim::OFFLOAD_THREADS_PER_USER_DEFAULT;
        let mut thread = [false; 6];
        let mut queued: Vec<Vec<usize>> = vec![Vec::new(); 6];
        let mut next = [0usize; 6];
        let mut fallbacks = 0u64;
        for op in ops {
            match op {
                Op::Bound(b) => {
                    bound = b;
                    d.env.offload_threads_per_user.store(b, SeqCst);
                }
                Op::Submit(i) => {
                    if next[i] == SLOTS {
                        continue;
                    }
                    let slot = next[i];
                    next[i] += 1;
                    prop_assert_eq!(submit(&d, &ctxs[i], pairs[i], T, slot as u32), PENDING);
                    if !thread[i] {
                        let live = (0..6).filter(|&j| thread[j] && uid(j) == uid(i)).count();
                        thread[i] = (live as u64) < bound;
                    }
                    if thread[i] {
                        queued[i].push(slot);
                        prop_assert_eq!(arrays[i][slot], 0);
                    } else {
                        fallbacks += 1;
                        prop_assert_eq!(arrays[i][slot], status::SUCCESS);
                    }
                }
                Op::Drain(i) => {
                    prop_assert_eq!(drain(&d, &ctxs[i]), queued[i].len());
                    for s in queued[i].drain(..) {
                        prop_assert_eq!(arrays[i][s], status::SUCCESS);
                    }
                }
                Op::Reopen(i) => {
                    // The regions go with the context: the new one gets its
                    // own.
                    let old = core::mem::replace(&mut ctxs[i], d.ctx_new(uid(i)).unwrap());
                    d.ctx_release(old);
                    thread[i] = false;
                    queued[i].clear();
                    next[i] = 0;
                    arrays[i] = vec![0u8; SLOTS];
                    // SAFETY: as above.
                    unsafe { ctxs[i].set_status_array(arrays[i].as_mut_ptr(), SLOTS as u64).unwrap() };
                    pairs[i] = pair(&d, &ctxs[i], i as u8);
                }
            }
            for u in [1u32, 2] {
                let live = (0..6).filter(|&j| thread[j] && uid(j) == u).count() as u64;
                prop_assert_eq!(d.workers.of(&d.env, u as u64), live);
            }
            let s = d.stats.snapshot();
            prop_assert_eq!(s.offload_fallbacks, fallbacks);
            prop_assert_eq!(s.offload_threads, thread.iter().filter(|&&t| t).count() as u64);
        }
        finish(&d, ctxs);
        drop(arrays);
    }
}

/// Contexts of several uids of one user namespace share the bound of the
/// account that owns it (the top key), and the node bound holds for all
/// accounts together.
#[test]
fn namespaced_uids_share_their_accounts_bound() {
    use crate::state::account::Account;
    use crate::state::context::Context;
    let d = dev();
    d.env.offload_threads_per_user.store(2, SeqCst);
    let mut arrays: Vec<Vec<u8>> = (0..6).map(|_| Vec::new()).collect();
    // Levels: (namespace 9, uid 100 + i), then (initial namespace, 1000).
    let ctx_of = |uid: u64, slots: &mut Vec<u8>| -> KBox<Context> {
        let account = Account::from_chain(&[9 << 32 | uid, 1000]).unwrap();
        let c = d
            .ctx_new_in(uid as u32, account, crate::edge::shim::ShimCtx::NULL)
            .unwrap();
        slots.resize(8, 0);
        // SAFETY: the arrays outlive the contexts (finish below).
        unsafe { c.set_status_array(slots.as_mut_ptr(), 8).unwrap() };
        c
    };
    let mut it = arrays.iter_mut();
    let ctxs: Vec<_> = (0..4)
        .map(|i| ctx_of(100 + i, it.next().unwrap()))
        .collect();
    for (i, c) in ctxs.iter().enumerate() {
        let p = pair(&d, c, i as u8);
        assert_eq!(submit(&d, c, p, T, 0), PENDING);
    }
    // Four uids, but one account above them: two threads in all.
    assert_eq!(d.env.spawns.load(SeqCst), 2);
    assert_eq!(
        (d.workers.of(&d.env, 1000), d.workers.total(&d.env)),
        (2, 2)
    );
    assert_eq!(d.stats.snapshot().offload_fallbacks, 2);
    // The node bound: another account is refused once the node is full.
    d.env.offload_threads_per_user.store(100, SeqCst);
    d.env.offload_threads_max.store(2, SeqCst);
    let other = d.ctx_new(7).unwrap();
    let slots = it.next().unwrap();
    slots.resize(8, 0);
    // SAFETY: the array outlives the context.
    unsafe { other.set_status_array(slots.as_mut_ptr(), 8).unwrap() };
    let p = pair(&d, &other, 9);
    assert_eq!(submit(&d, &other, p, T, 0), PENDING);
    assert_eq!(d.env.spawns.load(SeqCst), 2, "node bound");
    assert_eq!(d.workers.of(&d.env, 7), 0);
    for c in &ctxs {
        drain(&d, c);
    }
    let mut all = ctxs;
    all.push(other);
    finish(&d, all);
    assert_eq!(
        (d.workers.of(&d.env, 1000), d.workers.total(&d.env)),
        (0, 0)
    );
    drop(arrays);
}
