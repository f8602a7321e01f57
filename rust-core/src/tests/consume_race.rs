//! Issue 33, item 1: a single-use region consumed while its owner closes.
//!
//! The owner's release runs exactly between what a copy does before it
//! takes the table lock and what it does under it (the mock kernel's
//! `at_next_table_lock` hook), and the owner's context is freed into a
//! poisoning quarantine (`kalloc::fault`): a consumer that follows the
//! region's way back to its context after that writes into the poison.

use super::helpers::{copy, create, dev, finish, inline, neg, pattern, Dev, Inline, R, RW};
use crate::edge::errno::EINVAL;
use crate::edge::kalloc::{fault, KBox};
use crate::state::context::Context;
use knem_abi::{KNEM_FLAG_PINLOCAL, KNEM_FLAG_SINGLEUSE};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

const LEN: usize = 64;

/// Releases `owner` (closes its file) inside the next taker of the table
/// lock, before it locks; the flag says it ran.
fn close_at_next_table_lock(d: &'static Dev, owner: KBox<Context>) -> Arc<AtomicBool> {
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    d.env.at_next_table_lock(move || {
        d.ctx_release(owner);
        flag.store(true, SeqCst);
    });
    ran
}

/// Runs `copy` (which must consume the owner's single-use region `k`)
/// with the owner closing at its table lock; checks that nothing freed was
/// written to, that the owner's release won (the copy finds the region
/// gone: EINVAL, `dst` untouched) and that every count is back to 0.
fn owner_closes_inside(
    flags: u32,
    copy: impl FnOnce(&'static Dev, &Context, u64, u64) -> Result<u32, i64>,
) {
    let d: &'static Dev = Box::leak(dev());
    let (owner, reader) = (d.ctx_new(1).unwrap(), d.ctx_new(1).unwrap());
    let src = d.env.map(4096, true);
    d.env.fill(src, &pattern(LEN, 3));
    let k = create(d, &owner, &[(src, LEN as u64)], R, flags).unwrap();
    let dst = d.env.map(4096, true);
    fault::quarantine_begin();
    let ran = close_at_next_table_lock(d, owner);
    let r = copy(d, &reader, k, dst);
    let (freed, written) = fault::quarantine_end();
    assert!(
        ran.load(SeqCst),
        "the owner's release did not run in the copy"
    );
    assert!(freed >= 1, "the owner's context was not freed");
    assert_eq!(
        written, 0,
        "{written} of {freed} blocks freed by the owner's release were written after their free"
    );
    assert_eq!(
        r,
        Err(neg(EINVAL)),
        "the release ran first: the region is gone"
    );
    assert_eq!(d.env.peek(dst, LEN), vec![0; LEN], "bytes of a gone region");
    assert_eq!(
        d.table.user_regions(&d.env, 1),
        reader.regions.get(),
        "uid 1's count: the reader's regions only"
    );
    finish(d, vec![reader]);
}

#[test]
fn single_use_inline_read_while_owner_closes() {
    owner_closes_inside(KNEM_FLAG_SINGLEUSE, |d, c, k, dst| {
        inline(d, c, &Inline::new(&[(dst, LEN as u64)], false, k))
    });
}

#[test]
fn single_use_pinlocal_read_while_owner_closes() {
    owner_closes_inside(KNEM_FLAG_SINGLEUSE, |d, c, k, dst| {
        let mut r = Inline::new(&[(dst, LEN as u64)], false, k);
        r.flags = KNEM_FLAG_PINLOCAL;
        inline(d, c, &r)
    });
}

/// COPY from the closing owner's single-use region into the reader's own
/// region (`consume_pair`).
#[test]
fn single_use_copy_while_owner_closes() {
    owner_closes_inside(KNEM_FLAG_SINGLEUSE, |d, c, k, dst| {
        let mine = create(d, c, &[(dst, LEN as u64)], RW, 0).unwrap();
        copy(d, c, (k, 0), (mine, 0), None, 0)
    });
}

/// The same interleaving with a region that is not single-use: the copy
/// takes no table lock, so the hook runs at the next one (the reader's
/// close in `finish`), and the copy delivers the bytes.
#[test]
fn plain_region_read_is_not_affected() {
    let d: &'static Dev = Box::leak(dev());
    let (owner, reader) = (d.ctx_new(1).unwrap(), d.ctx_new(1).unwrap());
    let src = d.env.map(4096, true);
    d.env.fill(src, &pattern(LEN, 5));
    let k = create(d, &owner, &[(src, LEN as u64)], R, 0).unwrap();
    let dst = d.env.map(4096, true);
    let ran = close_at_next_table_lock(d, owner);
    let r = inline(d, &reader, &Inline::new(&[(dst, LEN as u64)], false, k));
    assert!(!ran.load(SeqCst), "a plain read took the table lock");
    assert_eq!(r, Ok(1));
    assert_eq!(d.env.peek(dst, LEN), pattern(LEN, 5));
    finish(d, vec![reader]);
    assert!(ran.load(SeqCst));
}
