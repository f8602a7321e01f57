//! Issue 33, M2 and M3: the budgets of user namespaces as the kernel's
//! ucounts give them.  Sibling namespaces that global root created
//! (containers of rootful runtimes) each get a budget of their own for
//! regions and offload threads, apart from root's and from each other's;
//! and pinned pages are counted at every level of the pinner's account, so
//! an account's subordinate uids share one RLIMIT_MEMLOCK.

use super::helpers::*;
use crate::edge::errno::ENOMEM;
use crate::edge::kalloc::KBox;
use crate::edge::shim::ShimCtx;
use crate::state::account::{whole_namespace, Account};
use crate::state::context::Context;
use knem_abi::{KNEM_FLAG_ANY_USER_ACCESS, KNEM_FLAG_PINLOCAL};
use std::sync::atomic::Ordering::SeqCst;

/// The initial user namespace's inode number (PROC_USER_INIT_INO).
const INIT: u64 = 0xEFFF_FFFD << 32;
/// Two namespaces global root created, and one that uid 1000 created.
const NS_A: u64 = 0x1000 << 32;
const NS_B: u64 = 0x1001 << 32;
const NS_U: u64 = 0x1002 << 32;

/// A context of (namespace `ns`, global uid `uid`), in a namespace that
/// global uid `creator` created in the initial one.
fn ctx_in(d: &Dev, ns: u64, uid: u32, creator: u32) -> KBox<Context> {
    let account = Account::from_chain(&[ns | uid as u64, INIT | creator as u64]).unwrap();
    d.ctx_new_in(uid, account, ShimCtx::NULL).unwrap()
}

/// Creates zero-length regions on `c` until refused (at most 16): how many.
fn fill(d: &Dev, c: &Context, m: u64) -> usize {
    let mut n = 0;
    while n < 16 {
        match create(d, c, &[(m, 0)], R, 0) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e, neg(ENOMEM));
                break;
            }
        }
    }
    n
}

/// With max_regions_per_user=3: the two uids of root-created namespace A
/// exhaust A's budget (3 in all: the namespace is one tenant), and that
/// refuses neither namespace B's uids nor root itself; a namespace that
/// uid 1000 created still shares uid 1000's budget.  The node's cap still
/// bounds everyone together.
#[test]
fn sibling_root_namespaces_have_their_own_region_budget() {
    let d = dev();
    d.env.regions_per_user.store(3, SeqCst);
    let m = d.env.map(4096, true);
    let a = [ctx_in(&d, NS_A, 100_000, 0), ctx_in(&d, NS_A, 100_001, 0)];
    let b = [ctx_in(&d, NS_B, 100_000, 0), ctx_in(&d, NS_B, 100_001, 0)];
    let of_init = |uid: u32| {
        let account = Account::from_chain(&[INIT | uid as u64]).unwrap();
        d.ctx_new_in(uid, account, ShimCtx::NULL).unwrap()
    };
    let root = of_init(0);
    assert_eq!(fill(&d, &a[0], m) + fill(&d, &a[1], m), 3, "A's budget");
    assert_eq!(fill(&d, &b[0], m) + fill(&d, &b[1], m), 3, "B refused");
    assert_eq!(fill(&d, &root, m), 3, "root refused");
    // uid 1000's own namespace shares its budget.
    let user = of_init(1000);
    let in_u = ctx_in(&d, NS_U, 200_000, 1000);
    assert_eq!(fill(&d, &user, m) + fill(&d, &in_u, m), 3);
    // The node's cap holds for all of them together.
    d.env.regions_per_user.store(100, SeqCst);
    d.env.regions_max.store(13, SeqCst);
    let c = ctx_in(&d, NS_A + (9 << 32), 100_000, 0);
    assert_eq!(fill(&d, &c, m), 1);
    let [a0, a1] = a;
    let [b0, b1] = b;
    finish(&d, vec![a0, a1, b0, b1, root, user, in_u, c]);
}

/// The same for offload threads: with max_offload_threads_per_user=1, A's
/// thread does not stop B's from starting.
#[test]
fn sibling_root_namespaces_have_their_own_thread_budget() {
    let d = dev();
    let (ka, kb) = (
        Account::from_chain(&[NS_A | 100_000, INIT]).unwrap(),
        Account::from_chain(&[NS_B | 100_000, INIT]).unwrap(),
    );
    let (mx, node) = (1, 10);
    assert!(d.workers.take(&d.env, &ka, mx, node));
    assert!(!d.workers.take(&d.env, &ka, mx, node), "A's budget");
    assert!(d.workers.take(&d.env, &kb, mx, node), "B refused");
    assert_eq!(d.workers.of(&d.env, whole_namespace(NS_A)), 1);
    assert_eq!(d.workers.of(&d.env, INIT), 0, "charged to root");
    d.workers.give(&d.env, &ka);
    d.workers.give(&d.env, &kb);
    assert_eq!(d.workers.total(&d.env), 0);
    finish(&d, vec![]);
}

/// The current task of the mock kernel becomes global uid `uid` of
/// namespace `ns`, which uid `creator` created.
fn become_(d: &Dev, ns: u64, uid: u32, creator: u32) {
    *d.env.task.lock().unwrap() = (uid, vec![ns | uid as u64, INIT | creator as u64]);
}

/// With RLIMIT_MEMLOCK at 16 pages, uid 1000 pins 16 pages as the first
/// uid of its subordinate range in its namespace; switching to the second
/// uid (another kernel uid, with a locked_vm of its own) it can pin no
/// page more, neither for a region nor for a PINLOCAL copy, and the
/// node's pinned pages stay at 16.  Once the first region goes, the second
/// uid pins 16.  A sibling namespace of root's is not refused by it.
#[test]
fn subordinate_uids_share_the_memlock_limit() {
    let d = dev();
    let m = d.env.map(16 * 4096, true);
    let l = d.env.map(4096, true);
    *d.env.memlock_pages.lock().unwrap() = Some(16);
    become_(&d, NS_U, 200_000, 1000);
    let first = d.ctx_new(200_000).unwrap();
    let k = create(&d, &first, &[(m, 16 * 4096)], R, KNEM_FLAG_ANY_USER_ACCESS).unwrap();
    become_(&d, NS_U, 200_001, 1000);
    let second = d.ctx_new(200_001).unwrap();
    assert_eq!(create(&d, &second, &[(m, 4096)], R, 0), Err(neg(ENOMEM)));
    let mut pinlocal = Inline::new(&[(l, 8)], false, k);
    pinlocal.flags = KNEM_FLAG_PINLOCAL;
    assert_eq!(inline(&d, &second, &pinlocal), Err(neg(ENOMEM)));
    assert_eq!(d.env.pinned(), 16);
    assert_eq!(d.env.pinned_vm.load(SeqCst), 16, "VmPin");
    assert_eq!(d.stats.snapshot().pins_refused_memlock, 2);
    assert_eq!(d.pins.of(&d.env, INIT | 1000), 16);
    // Root's sibling namespace has its own level.
    become_(&d, NS_A, 100_000, 0);
    let other = d.ctx_new(100_000).unwrap();
    let theirs = create(&d, &other, &[(m, 16 * 4096)], R, 0).unwrap();
    assert_eq!(d.pins.of(&d.env, whole_namespace(NS_A)), 16);
    assert_eq!(destroy(&d, &other, theirs), 0);
    // The first region goes: the second uid has the whole limit again.
    assert_eq!(destroy(&d, &first, k), 0);
    become_(&d, NS_U, 200_001, 1000);
    create(&d, &second, &[(m, 16 * 4096)], R, 0).unwrap();
    assert_eq!(d.pins.of(&d.env, INIT | 1000), 16);
    assert_eq!(d.pins.of(&d.env, NS_U | 200_000), 0);
    finish(&d, vec![first, second, other]);
    assert_eq!(d.env.pinned_vm.load(SeqCst), 0);
}

/// CAP_IPC_LOCK over the limit: pinned and not charged to the account; a
/// limit of none (or account_pinned=0): counted, never refused.
#[test]
fn exempt_pins_are_not_charged() {
    let d = dev();
    let m = d.env.map(8 * 4096, true);
    *d.env.memlock_pages.lock().unwrap() = Some(4);
    d.env.ipc_lock.store(true, SeqCst);
    become_(&d, NS_U, 200_000, 1000);
    let c = d.ctx_new(200_000).unwrap();
    let k = create(&d, &c, &[(m, 8 * 4096)], R, 0).unwrap();
    assert_eq!(d.pins.of(&d.env, INIT | 1000), 0);
    assert_eq!(d.env.pinned_vm.load(SeqCst), 8, "VmPin");
    assert_eq!(destroy(&d, &c, k), 0);
    d.env.ipc_lock.store(false, SeqCst);
    *d.env.memlock_pages.lock().unwrap() = None;
    let k = create(&d, &c, &[(m, 8 * 4096)], R, 0).unwrap();
    assert_eq!(d.pins.of(&d.env, INIT | 1000), 8);
    assert_eq!(d.pins.of(&d.env, NS_U | 200_000), 8);
    assert_eq!(destroy(&d, &c, k), 0);
    assert_eq!(d.pins.keys(&d.env), 0);
    finish(&d, vec![c]);
}
