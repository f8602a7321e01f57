//! Issue 21, item 7: no hold of the table lock does work that grows with
//! the number of contexts or the table's size, and the per-context region
//! counts (kept in each context) agree with a model of what each context
//! created, destroyed, lost to a single-use consumer and released.  Issue
//! 33: nor with the number of account keys counted (100k here).

use super::helpers::{create, destroy, dev, finish, inline, Inline, OK, R};
use crate::edge::kalloc::KBox;
use crate::state::context::Context;
use crate::state::counts::MIGRATE_PER_NEW_KEY;
use crate::state::table::SCAN_PER_HOLD;
use knem_abi::KNEM_FLAG_SINGLEUSE;
use proptest::prelude::*;
use std::vec::Vec;

/// Count entries one hold may move besides the slots it looks at: a hold
/// adds or drops at most one key per level of one account (these tests'
/// accounts have one level), and a new key moves at most
/// `MIGRATE_PER_NEW_KEY` entries of a growing array, a dropped one none,
/// however many keys there are.
const KEYS_MOVED_MAX: u64 = MIGRATE_PER_NEW_KEY as u64;

/// 100k contexts of 100k accounts (one key each, made in descending
/// order, each new key first in key order) with one region each, then
/// destroyed in ascending order (each dropped key first in key order): no
/// hold moved more than `KEYS_MOVED_MAX` count entries, and every count is
/// back at 0.
#[test]
fn table_hold_work_independent_of_keys() {
    const KEYS: u32 = 100_000;
    let d = dev();
    let m = d.env.map(4096, true);
    d.table.hold_work_max(true);
    let ctxs: Vec<(KBox<Context>, u64)> = (0..KEYS)
        .rev()
        .map(|uid| {
            let c = d.ctx_new(uid + 10).unwrap();
            let k = create(&d, &c, &[(m, 8)], R, 0).unwrap();
            (c, k)
        })
        .collect();
    let most = d.table.hold_work_max(true);
    assert!(
        most <= KEYS_MOVED_MAX,
        "{most} count entries moved in one hold of the table lock ({KEYS} keys)"
    );
    assert_eq!(d.table.user_regions(&d.env, KEYS + 9), 1);
    let ctxs: Vec<KBox<Context>> = ctxs
        .into_iter()
        .rev()
        .map(|(c, k)| {
            assert_eq!(destroy(&d, &c, k), 0);
            c
        })
        .collect();
    let most = d.table.hold_work_max(false);
    assert!(
        most <= KEYS_MOVED_MAX,
        "{most} slots and count entries in one hold of the table lock ({KEYS} keys)"
    );
    assert_eq!(d.table.user_regions(&d.env, KEYS + 9), 0);
    finish(&d, ctxs);
}

/// 3000 contexts with one region each, released in the order they were
/// made (the order in which a sorted array of per-context counts would
/// shift all the others), while another user creates regions: no hold did
/// more than `SCAN_PER_HOLD` slots plus a few count entries.
#[test]
fn table_hold_work_independent_of_contexts() {
    const CONTEXTS: usize = 3000;
    let d = dev();
    let m = d.env.map(4096, true);
    let other = d.ctx_new(2).unwrap();
    let ctxs: Vec<KBox<Context>> = (0..CONTEXTS).map(|_| d.ctx_new(1).unwrap()).collect();
    for c in &ctxs {
        create(&d, c, &[(m, 8)], R, 0).unwrap();
        assert_eq!(c.regions.get(), 1);
    }
    assert_eq!(d.table.user_regions(&d.env, 1), CONTEXTS as u64);
    d.table.hold_work_max(true);
    for (i, c) in ctxs.into_iter().enumerate() {
        if i % 100 == 0 {
            let k = create(&d, &other, &[(m, 8)], R, 0).unwrap();
            assert_eq!(destroy(&d, &other, k), 0);
        }
        d.ctx_release(c);
    }
    let most = d.table.hold_work_max(false);
    assert!(
        most <= SCAN_PER_HOLD as u64 + KEYS_MOVED_MAX,
        "{most} slots and count entries in one hold of the table lock"
    );
    assert!(most >= 1, "the releases looked at no slot");
    assert_eq!(d.table.user_regions(&d.env, 1), 0);
    finish(&d, vec![other]);
}

/// A context whose two regions sit 20000 slots apart is released in holds
/// that each do at most `SCAN_PER_HOLD` slots (and a few count entries).
#[test]
fn sparse_release_hold_work_bounded() {
    let d = dev();
    let (sparse, busy) = (d.ctx_new(1).unwrap(), d.ctx_new(2).unwrap());
    let m = d.env.map(4096, true);
    create(&d, &sparse, &[(m, 8)], R, 0).unwrap();
    for _ in 0..20_000 {
        create(&d, &busy, &[(m, 8)], R, 0).unwrap();
    }
    create(&d, &sparse, &[(m, 8)], R, 0).unwrap();
    d.table.hold_work_max(true);
    d.ctx_release(sparse);
    let most = d.table.hold_work_max(true);
    assert!(
        (SCAN_PER_HOLD as u64..=SCAN_PER_HOLD as u64 + KEYS_MOVED_MAX).contains(&most),
        "{most} slots and count entries in one hold, expected a full scan window"
    );
    assert_eq!(
        d.table.user_regions(&d.env, 1),
        0,
        "a region of it was left"
    );
    assert_eq!(busy.regions.get(), 20_000);
    finish(&d, vec![busy]);
}

#[derive(Clone, Debug)]
enum Op {
    /// Context i creates a region (single-use or not).
    Create(usize, bool),
    /// Context i destroys its j-th live region (modulo how many it has).
    Destroy(usize, usize),
    /// Context i reads context j's k-th live region (consuming it when
    /// single-use; the contexts share uid 1 or 2 by parity).
    Read(usize, usize, usize),
    /// Context i is released and a new one takes its place.
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, any::<bool>()).prop_map(|(i, s)| Op::Create(i, s)),
        2 => (0..4usize, 0..8usize).prop_map(|(i, j)| Op::Destroy(i, j)),
        2 => (0..4usize, 0..4usize, 0..8usize).prop_map(|(i, j, k)| Op::Read(i, j, k)),
        1 => (0..4usize).prop_map(Op::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Four contexts of two users against a model of their live regions
    /// (cookie, single-use): each context's count, each user's count, and
    /// which cookies the table still knows match it after every step.
    #[test]
    fn region_counts_match_model(ops in proptest::collection::vec(op(), 1..80)) {
        let d = dev();
        let m = d.env.map(4096, true);
        let local = d.env.map(4096, true);
        let uid = |i: usize| (i % 2) as u32 + 1;
        let mut ctxs: Vec<KBox<Context>> = (0..4).map(|i| d.ctx_new(uid(i)).unwrap()).collect();
        let mut model: Vec<Vec<(u64, bool)>> = vec![Vec::new(); 4];
        let mut gone: Vec<u64> = Vec::new();
        for op in ops {
            match op {
                Op::Create(i, single) => {
                    let flags = if single { KNEM_FLAG_SINGLEUSE } else { 0 };
                    let k = create(&d, &ctxs[i], &[(m, 8)], R, flags).unwrap();
                    model[i].push((k, single));
                }
                Op::Destroy(i, j) => {
                    if !model[i].is_empty() {
                        let at = j % model[i].len();
                        let (k, _) = model[i].remove(at);
                        prop_assert_eq!(destroy(&d, &ctxs[i], k), 0);
                        gone.push(k);
                    }
                }
                Op::Read(i, j, k) => {
                    if uid(i) == uid(j) && !model[j].is_empty() {
                        let at = k % model[j].len();
                        let (cookie, single) = model[j][at];
                        let r = Inline::new(&[(local, 8)], false, cookie);
                        prop_assert_eq!(inline(&d, &ctxs[i], &r), OK);
                        if single {
                            model[j].remove(at);
                            gone.push(cookie);
                        }
                    }
                }
                Op::Release(i) => {
                    let c = std::mem::replace(&mut ctxs[i], d.ctx_new(uid(i)).unwrap());
                    d.ctx_release(c);
                    gone.extend(model[i].drain(..).map(|(k, _)| k));
                }
            }
            for (c, live) in ctxs.iter().zip(&model) {
                prop_assert_eq!(c.regions.get(), live.len() as u64);
            }
            for u in [1u32, 2] {
                let want: usize = (0..4).filter(|&i| uid(i) == u).map(|i| model[i].len()).sum();
                prop_assert_eq!(d.table.user_regions(&d.env, u), want as u64);
            }
            for &k in &gone {
                prop_assert!(d.table.lookup(&d.env, &d.stats, k).is_err());
            }
            for &(k, _) in model.iter().flatten() {
                prop_assert!(d.table.lookup(&d.env, &d.stats, k).is_ok());
            }
        }
        finish(&d, ctxs);
    }
}
