//! Hardening on the mock: pinned-memory accounting, the ptrace
//! access policy, and cookies that cannot be guessed.

use super::helpers::*;
use crate::edge::errno::*;
use crate::state::context::Context;
use crate::state::table::split_cookie;
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
            (x & 0xffff_ffff_0000_0000) | (x % (max_idx + 1) + 1)
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
        let cookie = (x & 0xffff_ffff_0000_0000) | (x % (max_idx + 1) + 1);
        if !live.contains(&cookie) {
            assert_eq!(
                inline(&d, &c, &Inline::new(&[(l, 1)], false, cookie)),
                Err(neg(EINVAL))
            );
        }
    }
    finish(&d, vec![c]);
}
