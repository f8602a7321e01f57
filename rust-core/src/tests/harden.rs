//! Hardening on the mock: pinned-memory accounting, the ptrace
//! access policy, and cookies that cannot be guessed.

use super::helpers::*;
use crate::edge::errno::*;
use crate::state::context::Context;
use crate::state::table::{make_cookie, split_cookie, TAG_BITS};
use knem_abi::*;
use std::collections::HashSet;
use std::sync::atomic::Ordering::*;

/// A small deterministic generator (splitmix64), independent of the mock's
/// own random source that makes the tags.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[test]
fn pinned_pages_are_charged_and_refused_over_the_limit() {
    let d = dev();
    let c = d.ctx_new(1000).unwrap();
    let a = d.env.map(8 * 4096, true);
    *d.env.memlock_pages.lock().unwrap() = Some(4);

    let three = create(&d, &c, &[(a, 3 * 4096)], RW, 0).unwrap();
    assert_eq!(d.env.pinned_vm.load(SeqCst), 3);
    // One page more than the limit allows: nothing pinned, nothing charged.
    assert_eq!(create(&d, &c, &[(a, 2 * 4096)], R, 0), Err(neg(ENOMEM)));
    assert_eq!((d.env.pinned(), d.env.pinned_vm.load(SeqCst)), (3, 3));
    let one = create(&d, &c, &[(a + 4096, 1)], R, 0).unwrap();
    assert_eq!(d.env.pinned_vm.load(SeqCst), 4);
    // A copy that pins the caller's pages (PINLOCAL) is charged too.
    let l = d.env.map(4096, true);
    let mut r = Inline::new(&[(l, 10)], false, one);
    r.flags = KNEM_FLAG_PINLOCAL;
    assert_eq!(inline(&d, &c, &r), Err(neg(ENOMEM)));
    assert_eq!(destroy(&d, &c, three), 0);
    assert_eq!(d.env.pinned_vm.load(SeqCst), 1);
    assert_eq!(inline(&d, &c, &r), OK);
    assert_eq!(d.env.pinned_vm.load(SeqCst), 1, "local pin uncharged");
    assert_eq!(d.stats.snapshot().err_enomem, 2);
    assert_eq!(d.stats.snapshot().pins_refused_memlock, 2);

    *d.env.memlock_pages.lock().unwrap() = None;
    let big = create(&d, &c, &[(a, 8 * 4096)], RW, 0).unwrap();
    assert_eq!(d.env.pinned_vm.load(SeqCst), 9);
    let _ = big;
    finish(&d, vec![c]);
    assert_eq!(d.env.pinned_vm.load(SeqCst), 0);
    assert_eq!(d.env.owners.load(SeqCst), 0);
}

#[test]
fn a_failed_pin_uncharges() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(2 * 4096, true);
    assert_eq!(
        create(&d, &c, &[(a, 2 * 4096), (0x1000, 1)], R, 0),
        Err(neg(EFAULT))
    );
    assert_eq!(
        (d.env.pinned_vm.load(SeqCst), d.env.owners.load(SeqCst)),
        (0, 0)
    );
    finish(&d, vec![c]);
}

#[test]
fn ptrace_policy_decides_who_else_may_use_a_region() {
    let d = dev();
    let owner = d.ctx_new(1000).unwrap();
    let same_uid = d.ctx_new(1000).unwrap();
    let other = d.ctx_new(2000).unwrap();
    let a = d.env.map(4096, true);
    let l = d.env.map(4096, true);
    let private = create(&d, &owner, &[(a, 100)], RW, 0).unwrap();
    let shared = create(&d, &owner, &[(a, 100)], R, KNEM_FLAG_ANY_USER_ACCESS).unwrap();
    let read = |ctx: &Context, cookie| inline(&d, ctx, &Inline::new(&[(l, 10)], false, cookie));

    // uid: KNEM's rule whatever ptrace would say.
    d.env.ptrace_denied.store(true, SeqCst);
    assert_eq!(read(&same_uid, private), OK);
    assert_eq!(read(&other, private), Err(neg(EPERM)));

    // ptrace: attachable → allowed, even from another uid.
    d.env.ptrace_policy.store(true, SeqCst);
    d.env.ptrace_denied.store(false, SeqCst);
    assert_eq!(read(&other, private), OK);
    // Not attachable → EPERM, even for the owner's uid; still EINVAL first
    // and EACCES after.
    d.env.ptrace_denied.store(true, SeqCst);
    assert_eq!(read(&same_uid, private), Err(neg(EPERM)));
    assert_eq!(read(&other, private ^ (1 << 40)), Err(neg(EINVAL)));
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(l, 10)], true, shared)),
        Err(neg(EACCES))
    );
    // ANY_USER_ACCESS and the creating context always pass.
    assert_eq!(read(&other, shared), OK);
    assert_eq!(read(&owner, private), OK);
    finish(&d, vec![owner, same_uid, other]);
}

/// No random cookie reaches a live region: a million probes, half with an
/// index inside the live range and a random tag, half fully random.
#[test]
fn a_million_random_cookies_miss() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let live: HashSet<u64> = (0..1000)
        .map(|_| create(&d, &c, &[(a, 64)], RW, 0).unwrap())
        .collect();
    let max_idx = live
        .iter()
        .map(|&k| split_cookie(k).unwrap().0)
        .max()
        .unwrap() as u64;
    let mut rng = Rng(0x006b_6e65_6d2d_7273);
    let mut probes = 0u32;
    while probes < 1_000_000 {
        let x = rng.next();
        let cookie = if probes & 1 == 0 {
            make_cookie((x % (max_idx + 1)) as u32, x >> (64 - TAG_BITS))
        } else {
            x
        };
        if live.contains(&cookie) {
            continue; // a real cookie, not a guess
        }
        assert_eq!(
            d.table.lookup(&d.env, &d.stats, cookie).err(),
            Some(EINVAL),
            "{cookie:#x}"
        );
        probes += 1;
    }
    // The same through the whole ioctl path, fewer (the mock maps memory
    // for every argument).
    let l = d.env.map(4096, true);
    for _ in 0..20_000 {
        let x = rng.next();
        let cookie = make_cookie((x % (max_idx + 1)) as u32, x >> (64 - TAG_BITS));
        if !live.contains(&cookie) {
            assert_eq!(
                inline(&d, &c, &Inline::new(&[(l, 1)], false, cookie)),
                Err(neg(EINVAL))
            );
        }
    }
    finish(&d, vec![c]);
}

/// Every one of the tag's 44 bits is random: over 4096 cookies (created,
/// destroyed and recreated, so slots are reused) each tag bit is set in
/// 40-60 % of them, no two cookies are equal and none is 0.
#[test]
fn cookie_tag_bits_random() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let mut seen = HashSet::new();
    let mut ones = [0u32; 64];
    for round in 0..4 {
        let live: Vec<u64> = (0..1024)
            .map(|_| create(&d, &c, &[(a, 8)], R, 0).unwrap())
            .collect();
        for &k in &live {
            assert_ne!(k, 0);
            assert!(seen.insert(k), "round {round}: cookie {k:#x} repeated");
            for (bit, n) in ones.iter_mut().enumerate() {
                *n += (k >> bit) as u32 & 1;
            }
        }
        for k in live {
            assert_eq!(destroy(&d, &c, k), 0);
        }
    }
    let n = seen.len() as u32;
    for (bit, &set) in ones.iter().enumerate().skip(64 - TAG_BITS as usize) {
        assert!(
            (n * 2 / 5..=n * 3 / 5).contains(&set),
            "cookie bit {bit} set in {set} of {n} cookies"
        );
    }
    finish(&d, vec![c]);
}

/// RLIMIT_MEMLOCK is charged before the page array is allocated: a region
/// of 16384 pages over a 4-page limit is refused without allocating its
/// 128 KiB page array, and an allocation failing after the charge leaves
/// nothing charged.
#[test]
fn memlock_charged_before_page_array() {
    use crate::edge::kalloc::fault;
    let d = dev();
    let c = d.ctx_new(1000).unwrap();
    let a = d.env.map(4096, true);
    *d.env.memlock_pages.lock().unwrap() = Some(4);
    let arr = d.env.put_slice(&iovs(&[(a, 16384 * 4096)]));
    let arg = d.env.put(&knem_cmd_create_region {
        iovec_array: arr,
        iovec_nr: 1,
        flags: 0,
        protection: R,
        pad: 0,
        cookie: 0,
    });
    fault::take_largest();
    assert_eq!(d.ioctl(&c, cmd::CREATE_REGION, arg), neg(ENOMEM));
    let largest = fault::take_largest();
    assert!(
        largest < 16384 * 8,
        "allocated {largest} bytes before refusing"
    );
    assert_eq!(
        (d.env.pinned_vm.load(SeqCst), d.env.owners.load(SeqCst)),
        (0, 0)
    );

    *d.env.memlock_pages.lock().unwrap() = None;
    let mut failed = 0;
    for n in 0..8 {
        fault::fail_after(Some(n));
        let r = create(&d, &c, &[(a, 100)], R, 0);
        fault::fail_after(None);
        match r {
            Ok(k) => assert_eq!(destroy(&d, &c, k), 0),
            Err(e) => {
                assert_eq!(e, neg(ENOMEM));
                failed += 1;
            }
        }
        assert_eq!(
            (d.env.pinned_vm.load(SeqCst), d.env.owners.load(SeqCst)),
            (0, 0),
            "allocation {n} failing"
        );
    }
    assert!(failed >= 2, "only {failed} allocations could fail");
    finish(&d, vec![c]);
}

/// At most `regions_per_user` live regions per uid, across its contexts:
/// one more is ENOMEM; destroying, consuming or releasing gives room back;
/// other users are not affected.
#[test]
fn regions_per_user_bounded() {
    let d = dev();
    d.env.regions_per_user.store(5, SeqCst);
    let (a, b, other) = (
        d.ctx_new(1000).unwrap(),
        d.ctx_new(1000).unwrap(),
        d.ctx_new(1001).unwrap(),
    );
    let m = d.env.map(4096, true);
    let mine: Vec<u64> = (0..4)
        .map(|_| create(&d, &a, &[(m, 8)], R, 0).unwrap())
        .collect();
    let once = create(&d, &b, &[(m, 8)], R, KNEM_FLAG_SINGLEUSE).unwrap();
    assert_eq!(create(&d, &a, &[(m, 8)], R, 0), Err(neg(ENOMEM)));
    assert_eq!(
        create(&d, &b, &[(m, 0)], R, 0),
        Err(neg(ENOMEM)),
        "zero-length too"
    );
    assert_eq!(d.table.user_regions(&d.env, 1000), 5);
    let theirs = create(&d, &other, &[(m, 8)], R, 0).unwrap();
    assert_eq!(destroy(&d, &a, mine[0]), 0);
    let again = create(&d, &b, &[(m, 8)], R, 0).unwrap();
    assert_eq!(create(&d, &b, &[(m, 8)], R, 0), Err(neg(ENOMEM)));
    // A single-use region consumed by a copy is gone from the count.
    let l = d.env.map(4096, true);
    assert_eq!(inline(&d, &a, &Inline::new(&[(l, 8)], false, once)), OK);
    assert_eq!(d.table.user_regions(&d.env, 1000), 4);
    d.ctx_release(a);
    assert_eq!(d.table.user_regions(&d.env, 1000), 1);
    let _ = (again, theirs);
    assert_eq!(d.stats.snapshot().err_enomem, 3);
    finish(&d, vec![b, other]);
    assert_eq!(d.table.user_regions(&d.env, 1000), 0);
}

/// Regions of several uids of one user namespace count against the
/// account that owns the namespace too, a single-use region consumed by
/// another context gives its room back at every level, and the node bound
/// holds for every account together.
#[test]
fn namespaced_regions_share_their_accounts_bound() {
    use crate::edge::shim::ShimCtx;
    use crate::state::account::Account;
    let d = dev();
    d.env.regions_per_user.store(3, SeqCst);
    let in_ns = |uid: u64| {
        let account = Account::from_chain(&[9 << 32 | uid, 1000]).unwrap();
        d.ctx_new_in(uid as u32, account, ShimCtx::NULL).unwrap()
    };
    let (a, b, c) = (in_ns(100), in_ns(101), in_ns(102));
    let m = d.env.map(4096, true);
    create(&d, &a, &[(m, 8)], R, 0).unwrap();
    create(&d, &b, &[(m, 8)], R, 0).unwrap();
    let once = create(
        &d,
        &c,
        &[(m, 8)],
        R,
        KNEM_FLAG_SINGLEUSE | KNEM_FLAG_ANY_USER_ACCESS,
    )
    .unwrap();
    // c's own level has room, the account's does not.
    assert_eq!(create(&d, &c, &[(m, 8)], R, 0), Err(neg(ENOMEM)));
    assert_eq!(d.table.user_regions(&d.env, 1000), 3);
    // Consumed through another context: room at both levels again.
    let other = d.ctx_new(1000).unwrap();
    let l = d.env.map(4096, true);
    assert_eq!(inline(&d, &other, &Inline::new(&[(l, 8)], false, once)), OK);
    assert_eq!(d.table.user_regions(&d.env, 1000), 2);
    create(&d, &c, &[(m, 8)], R, 0).unwrap();
    // The node bound.
    d.env.regions_per_user.store(100, SeqCst);
    d.env.regions_max.store(4, SeqCst);
    create(&d, &other, &[(m, 8)], R, 0).unwrap();
    assert_eq!(create(&d, &other, &[(m, 8)], R, 0), Err(neg(ENOMEM)));
    finish(&d, vec![a, b, c, other]);
    assert_eq!(d.table.user_regions(&d.env, 1000), 0);
    d.env.regions_max.store(1, SeqCst);
    let fresh = d.ctx_new(5).unwrap();
    create(&d, &fresh, &[(m, 8)], R, 0).unwrap();
    finish(&d, vec![fresh]);
}

/// Releasing a context that has no region left looks at no slot, and one
/// whose only region is in the first slot stops there, however many
/// regions other contexts hold.
#[test]
fn release_ctx_without_regions_scans_nothing() {
    let d = dev();
    let (first, busy, idle) = (
        d.ctx_new(1).unwrap(),
        d.ctx_new(1).unwrap(),
        d.ctx_new(1).unwrap(),
    );
    let m = d.env.map(4096, true);
    create(&d, &first, &[(m, 8)], R, 0).unwrap();
    for _ in 0..1000 {
        create(&d, &busy, &[(m, 8)], R, 0).unwrap();
    }
    let gone = create(&d, &idle, &[(m, 8)], R, 0).unwrap();
    assert_eq!(destroy(&d, &idle, gone), 0);
    d.table.scanned.store(0, SeqCst);
    d.ctx_release(idle);
    assert_eq!(d.table.scanned.load(SeqCst), 0);
    d.ctx_release(first);
    assert_eq!(d.table.scanned.load(SeqCst), 1);
    d.ctx_release(busy);
    assert_eq!(d.table.scanned.load(SeqCst), 1002);
    finish(&d, vec![]);
}

/// A copy stops between two pieces once `copy_should_stop` says so (the
/// caller is dying, or the offload thread stopping): FAILED, with only
/// the pieces before it moved, inline and region to region.
#[test]
fn fatal_signal_stops_long_copy() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let len = 64 * 4096;
    let (a, b, l) = (
        d.env.map(len, true),
        d.env.map(len, true),
        d.env.map(len, true),
    );
    let data = pattern(len as usize, 9);
    d.env.fill(a, &data);
    let src = create(&d, &c, &[(a, len)], R, 0).unwrap();
    let dst = create(&d, &c, &[(b, len)], W, 0).unwrap();

    *d.env.stop_after.lock().unwrap() = Some(10);
    assert_eq!(
        inline(&d, &c, &Inline::new(&[(l, len)], false, src)),
        FAILED
    );
    let got = d.env.peek(l, len as usize);
    assert_eq!(got[..10 * 4096], data[..10 * 4096]);
    assert!(
        got[10 * 4096..].iter().all(|&x| x == 0),
        "copied past the stop"
    );

    *d.env.stop_after.lock().unwrap() = Some(5);
    assert_eq!(copy(&d, &c, (src, 0), (dst, 0), None, 0), FAILED);
    let got = d.env.peek(b, len as usize);
    assert_eq!(got[..5 * 4096], data[..5 * 4096]);
    assert!(
        got[5 * 4096..].iter().all(|&x| x == 0),
        "copied past the stop"
    );

    *d.env.stop_after.lock().unwrap() = None;
    assert_eq!(copy(&d, &c, (src, 0), (dst, 0), None, 0), OK);
    assert_eq!(d.env.peek(b, len as usize), data);
    finish(&d, vec![c]);
}
