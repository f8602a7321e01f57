//! End-to-end tests of asynchronous copies, NOTIFY_FD, BIND_OFFLOAD and
//! PINLOCAL on the mock kernel.  The offload thread is played by explicit
//! `run_async` calls, so every interleaving is chosen by the test.

use super::helpers::{self, dev, drain, finish, iov, neg, pattern, read_all, Dev, PENDING};
use crate::edge::errno::*;
use crate::state::context::{status, Context};
use knem_abi::*;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::Ordering::*;
use std::vec::Vec;

const T: u32 = KNEM_FLAG_MEMCPYTHREAD;
const N: u32 = KNEM_FLAG_NOTIFY_FD;

/// CREATE_REGION of one segment.
fn create(d: &Dev, c: &Context, base: u64, len: u64, prot: u32, flags: u32) -> u64 {
    helpers::create(d, c, &[(base, len)], prot, flags).expect("CREATE_REGION")
}

/// INLINE_COPY of `len` bytes at `local`; Ok(current_status) or Err(errno).
#[allow(clippy::too_many_arguments)]
fn inline(
    d: &Dev,
    c: &Context,
    local: u64,
    len: u64,
    write: bool,
    cookie: u64,
    flags: u32,
    index: u32,
) -> Result<u32, i64> {
    let mut r = helpers::Inline::new(&[(local, len)], write, cookie);
    r.flags = flags;
    r.index = index;
    helpers::inline(d, c, &r)
}

fn copy(d: &Dev, c: &Context, src: u64, dst: u64, flags: u32, index: u32) -> Result<u32, i64> {
    helpers::copy_indexed(d, c, (src, 0), (dst, 0), None, flags, index)
}

#[test]
fn async_inline_reads_complete_in_order_with_data() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let mut slots = vec![0u8; 8];
    // SAFETY: slots outlives the context (released in finish).
    unsafe { c.set_status_array(slots.as_mut_ptr(), 8).unwrap() };
    let a = d.env.put_slice(&pattern(10000, 3));
    let k = create(&d, &c, a, 10000, 1, 0);
    let locals: Vec<u64> = (0..3).map(|_| d.env.map(10000, true)).collect();
    for (i, &l) in locals.iter().enumerate() {
        assert_eq!(inline(&d, &c, l, 10000, false, k, T, i as u32 + 2), PENDING);
    }
    assert_eq!(d.env.kicks.load(SeqCst), 3);
    // The local pages are pinned at submission, nothing copied yet.
    assert_eq!(d.env.pinned(), 3 + 3 * 3);
    assert_eq!(d.env.peek(locals[0], 4), vec![0; 4]);
    assert_eq!(slots, vec![0; 8]);
    assert!(d.run_async(&c));
    assert_eq!(&slots[2..5], &[status::SUCCESS, 0, 0]);
    assert_eq!(d.env.peek(locals[0], 10000), pattern(10000, 3));
    assert_eq!(d.env.pinned(), 3 + 2 * 3, "pins given up before the slot");
    assert_eq!(drain(&d, &c), 2);
    assert!(!d.run_async(&c));
    assert_eq!(&slots[2..5], &[status::SUCCESS; 3]);
    assert_eq!(d.env.peek(locals[2], 10000), pattern(10000, 3));
    assert_eq!(d.env.dirtied(), 9, "written local pages unpinned dirty");
    let s = d.stats.snapshot();
    assert_eq!((s.bytes_async, s.bytes_inline_read), (30000, 0));
    assert_eq!(s.regions_created, 1, "local pins are not regions");
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn async_inline_write_and_region_copy() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let mut slots = vec![0u8; 4];
    // SAFETY: slots outlives the context.
    unsafe { c.set_status_array(slots.as_mut_ptr(), 4).unwrap() };
    let r = d.env.map(5000, true);
    let r2 = d.env.map(5000, true);
    let k = create(&d, &c, r, 5000, 3, 0);
    let k2 = create(&d, &c, r2, 5000, 3, KNEM_FLAG_SINGLEUSE);
    let l = d.env.put_slice(&pattern(5000, 9));
    assert_eq!(
        inline(&d, &c, l, 5000, true, k, KNEM_FLAG_DMATHREAD, 0),
        PENDING
    );
    assert_eq!(
        copy(&d, &c, k, k2, T | KNEM_FLAG_ASYNCDMACOMPLETE, 1),
        PENDING
    );
    // The single-use destination is consumed at submission.
    assert_eq!(copy(&d, &c, k, k2, 0, 0), Err(neg(EINVAL)));
    assert_eq!(drain(&d, &c), 2);
    assert_eq!(&slots[..2], &[status::SUCCESS; 2]);
    assert_eq!(d.env.peek(r, 5000), pattern(5000, 9));
    assert_eq!(
        d.env.peek(r2, 5000),
        pattern(5000, 9),
        "in order: after the write"
    );
    assert_eq!(d.stats.snapshot().bytes_async, 10000);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn async_checks_come_first_and_consume_nothing() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(100, 1));
    let k = create(&d, &c, a, 100, 1, KNEM_FLAG_SINGLEUSE);
    let l = d.env.map(100, true);
    assert_eq!(
        inline(&d, &c, l, 100, false, k, T, 0),
        Err(neg(EINVAL)),
        "no array"
    );
    let mut slots = vec![0u8; 4];
    // SAFETY: slots outlives the context.
    unsafe { c.set_status_array(slots.as_mut_ptr(), 4).unwrap() };
    assert_eq!(inline(&d, &c, l, 100, false, k, T, 4), Err(neg(EINVAL)));
    assert_eq!(inline(&d, &c, l, 100, false, 999, T, 4), Err(neg(EINVAL)));
    assert_eq!(
        inline(&d, &c, l, 100, false, k, N, 0),
        Err(neg(EINVAL)),
        "needs a thread"
    );
    assert_eq!(
        inline(
            &d,
            &c,
            l,
            100,
            false,
            k,
            T | N | KNEM_FLAG_ASYNCDMACOMPLETE,
            0
        ),
        Err(neg(EINVAL))
    );
    // A local range that cannot be pinned (or not for writing): EFAULT.
    assert_eq!(inline(&d, &c, 0x40, 100, false, k, T, 0), Err(neg(EFAULT)));
    let ro = d.env.map(100, false);
    assert_eq!(inline(&d, &c, ro, 100, false, k, T, 0), Err(neg(EFAULT)));
    assert_eq!(c.notify_in_flight(), 0);
    // Nothing was consumed: the single-use region still works once.
    assert_eq!(inline(&d, &c, l, 100, false, k, T | N, 1), PENDING);
    assert_eq!(inline(&d, &c, l, 100, false, k, T, 2), Err(neg(EINVAL)));
    assert_eq!(slots, vec![0; 4]);
    assert_eq!(drain(&d, &c), 1);
    assert_eq!(d.env.peek(l, 100), pattern(100, 1));
    assert_eq!(read_all(&d, &c), vec![1]);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn notify_fd_limit_is_the_array_size() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let mut slots = vec![0u8; 3];
    // SAFETY: slots outlives the context.
    unsafe { c.set_status_array(slots.as_mut_ptr(), 3).unwrap() };
    let a = d.env.map(64, true);
    let k = create(&d, &c, a, 64, 3, 0);
    let l = d.env.map(64, true);
    for i in 0..3 {
        assert_eq!(inline(&d, &c, l, 64, false, k, T | N, 2 - i), PENDING);
    }
    assert_eq!(inline(&d, &c, l, 64, false, k, T | N, 0), Err(neg(EBUSY)));
    // Requests without NOTIFY_FD are not limited.
    assert_eq!(inline(&d, &c, l, 64, false, k, T, 0), PENDING);
    assert!(d.run_async(&c));
    assert_eq!(d.env.notifies.load(SeqCst), 1);
    assert_eq!(
        inline(&d, &c, l, 64, false, k, T | N, 0),
        Err(neg(EBUSY)),
        "queued counts"
    );
    assert_eq!(read_all(&d, &c), vec![2]);
    assert_eq!(inline(&d, &c, l, 64, false, k, T | N, 0), PENDING);
    assert_eq!(drain(&d, &c), 4);
    assert_eq!(read_all(&d, &c), vec![1, 0, 0]);
    assert_eq!(c.notify_in_flight(), 0);
    assert_eq!(d.stats.snapshot().err_ebusy, 2);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn release_drops_queued_requests_and_their_pins() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let other = d.ctx_new(2).unwrap();
    let mut slots = vec![0u8; 4];
    // SAFETY: slots outlives the context.
    unsafe { c.set_status_array(slots.as_mut_ptr(), 4).unwrap() };
    let a = d.env.map(8192, true);
    // A region of another context, destroyed while requests hold it.
    let k = create(&d, &other, a, 8192, 3, KNEM_FLAG_ANY_USER_ACCESS);
    let l = d.env.map(8192, true);
    assert_eq!(inline(&d, &c, l, 8192, false, k, T | N, 0), PENDING);
    assert_eq!(inline(&d, &c, l, 8192, true, k, T | N, 1), PENDING);
    d.ctx_release(other);
    assert_eq!(d.stats.snapshot().regions, 1, "held by the queued requests");
    assert!(d.run_async(&c));
    finish(&d, vec![c]);
    assert_eq!(
        &slots[..2],
        &[status::SUCCESS, 0],
        "a dropped request leaves its slot"
    );
    drop(slots);
}

#[test]
fn init_async_recv_reports_only_through_its_slot() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(300, 5));
    let arr = d.env.put_slice(&[iov(a, 300)]);
    let arg = d.env.put(&knem_cmd_init_send_param {
        send_iovec_array: arr,
        send_iovec_nr: 1,
        flags: 0,
        send_cookie: 0,
    });
    assert_eq!(d.ioctl(&c, cmd::INIT_SEND, arg), 0);
    let cookie = d.env.get::<knem_cmd_init_send_param>(arg).send_cookie;
    let l = d.env.map(300, true);
    let larr = d.env.put_slice(&[iov(l, 300)]);
    let recv = |index: u32, flags: u32| {
        let p = knem_cmd_init_async_recv_param {
            recv_iovec_array: larr,
            recv_iovec_nr: 1,
            status_index: index,
            send_cookie: cookie,
            flags,
            pad: 0xffff,
        };
        let arg = d.env.put(&p);
        let r = d.ioctl(&c, cmd::INIT_ASYNC_RECV, arg);
        assert_eq!(d.env.get::<knem_cmd_init_async_recv_param>(arg), p);
        r
    };
    assert_eq!(recv(77, 0), neg(EINVAL), "no status array");
    let mut slots = vec![0u8; 100];
    // SAFETY: slots outlives the context.
    unsafe { c.set_status_array(slots.as_mut_ptr(), 100).unwrap() };
    assert_eq!(recv(100, 0), neg(EINVAL));
    // Undefined bits are dropped, not refused.
    assert_eq!(recv(77, 1 << 9 | KNEM_FLAG_SINGLEUSE), 0);
    assert_eq!(recv(78, 0), neg(EINVAL), "single-use");
    assert_eq!(slots[77], status::PENDING);
    assert!(d.run_async(&c));
    assert_eq!(slots[77], status::SUCCESS);
    assert_eq!(d.env.peek(l, 300), pattern(300, 5));
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn bind_offload_validation() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let bind = |flags: u32, mask_len: u32, mask_ptr: u64| {
        let arg = d.env.put(&knem_cmd_bind_offload {
            flags,
            mask_len,
            mask_ptr,
        });
        d.ioctl(&c, cmd::BIND_OFFLOAD, arg)
    };
    let zero = d.env.put_slice(&[0u8; 16]);
    let cpu1 = d.env.put_slice(&[2u8, 0, 0, 0]);
    for f in [0, 3, 5, 6, 7, 8, 1 << 31] {
        assert_eq!(bind(f, 4, cpu1), neg(EINVAL), "flags {f:#x}");
    }
    assert_eq!(bind(KNEM_BIND_FLAG_CUSTOM, 0, cpu1), neg(EINVAL));
    assert_eq!(bind(KNEM_BIND_FLAG_CUSTOM, 16, zero), neg(EINVAL));
    assert_eq!(bind(KNEM_BIND_FLAG_CUSTOM, 4, 0x40), neg(EFAULT));
    assert_eq!(bind(KNEM_BIND_FLAG_CUSTOM, 4, cpu1), 0);
    assert_eq!(
        *d.env.bound.lock().unwrap(),
        Some((KNEM_BIND_FLAG_CUSTOM, vec![2, 0, 0, 0]))
    );
    assert_eq!(bind(KNEM_BIND_FLAG_CURRENT_REVERSED, 0, 0), 0);
    assert_eq!(bind(KNEM_BIND_FLAG_CURRENT, 0, 0), 0);
    let mut slots = vec![0u8; 1];
    // SAFETY: slots outlives the context.
    unsafe { c.set_status_array(slots.as_mut_ptr(), 1).unwrap() };
    assert_eq!(bind(KNEM_BIND_FLAG_CURRENT, 0, 0), neg(EBUSY));
    assert_eq!(bind(0, 0, 0), neg(EINVAL), "flags checked first");
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn pinlocal_sync_copies_page_to_page() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(9000, 4));
    let k = create(&d, &c, a, 9000, 3, 0);
    let l = d.env.map(9000, true);
    let pl = KNEM_FLAG_PINLOCAL;
    assert_eq!(inline(&d, &c, l, 9000, false, k, pl, 0xffff), Ok(1));
    assert_eq!(d.env.peek(l, 9000), pattern(9000, 4));
    assert_eq!(d.env.pinned(), 3, "local pins given back");
    assert_eq!(inline(&d, &c, 0x40, 10, false, k, pl, 0), Err(neg(EFAULT)));
    d.env.fill(l, &pattern(9000, 6));
    assert_eq!(inline(&d, &c, l, 9000, true, k, pl, 0), Ok(1));
    assert_eq!(d.env.peek(a, 9000), pattern(9000, 6));
    let s = d.stats.snapshot();
    assert_eq!((s.bytes_inline_read, s.bytes_inline_write), (9000, 9000));
    finish(&d, vec![c]);
}

#[test]
fn pair_copy_losing_the_destination_keeps_the_source() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(8192, true);
    let src = create(&d, &c, a, 100, 1, KNEM_FLAG_SINGLEUSE);
    let dst = create(&d, &c, a + 4096, 100, 2, KNEM_FLAG_SINGLEUSE);
    // Another copy consumes dst between this copy's lookups and consumes.
    let fs = d.table.lookup(&d.env, &d.stats, src).unwrap();
    let fd = d.table.lookup(&d.env, &d.stats, dst).unwrap();
    let other = d.table.lookup(&d.env, &d.stats, dst).unwrap();
    assert_eq!(d.table.consume(&d.env, &d.stats, &other), Ok(()));
    assert_eq!(
        d.table.consume_pair(&d.env, &d.stats, &fs, &fd),
        Err(EINVAL)
    );
    drop((fs, fd, other));
    assert!(
        d.table.lookup(&d.env, &d.stats, src).is_ok(),
        "source not consumed"
    );
    // The same single-use region on both sides: neither consumed.
    let f1 = d.table.lookup(&d.env, &d.stats, src).unwrap();
    let f2 = d.table.lookup(&d.env, &d.stats, src).unwrap();
    assert_eq!(
        d.table.consume_pair(&d.env, &d.stats, &f1, &f2),
        Err(EINVAL)
    );
    drop((f1, f2));
    assert!(d.table.lookup(&d.env, &d.stats, src).is_ok());
    finish(&d, vec![c]);
}

#[derive(Clone, Debug)]
enum Op {
    /// Submit an asynchronous read (with NOTIFY_FD if true).
    Submit(bool),
    /// The offload thread runs up to n requests.
    Run(u8),
    /// read() of up to n notifications.
    Read(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<bool>().prop_map(Op::Submit),
        2 => (0u8..4).prop_map(Op::Run),
        1 => (1u8..4).prop_map(Op::Read),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Submissions interleaved with partial drains and reads, against a
    /// model: requests complete in submission order, each exactly once;
    /// notifications come out in completion order; NOTIFY_FD is refused
    /// with EBUSY exactly when one per slot is owed; nothing leaks.
    #[test]
    fn queue_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
        const SLOTS: usize = 5;
        let d = dev();
        let c = d.ctx_new(1).unwrap();
        let mut slots = vec![0u8; SLOTS];
        // SAFETY: slots outlives the context.
        unsafe { c.set_status_array(slots.as_mut_ptr(), SLOTS as u64).unwrap() };
        let a = d.env.put_slice(&pattern(64, 0));
        let k = create(&d, &c, a, 64, 1, 0);
        let mut queued: VecDeque<(u32, bool, u64)> = VecDeque::new();
        let mut ready: VecDeque<u32> = VecDeque::new();
        let mut done: Vec<u32> = Vec::new();
        let mut next = 0u32;
        for op in ops {
            match op {
                Op::Submit(notify) => {
                    let owed = ready.len() + queued.iter().filter(|q| q.1).count();
                    let seq = next;
                    next += 1;
                    let index = seq % SLOTS as u32;
                    let l = d.env.map(64, true);
                    let flags = if notify { T | N } else { T };
                    slots[index as usize] = 0;
                    let r = inline(&d, &c, l, 64, false, k, flags, index);
                    if notify && owed == SLOTS {
                        prop_assert_eq!(r, Err(neg(EBUSY)));
                    } else {
                        prop_assert_eq!(r, PENDING);
                        queued.push_back((seq, notify, l));
                    }
                }
                Op::Run(n) => {
                    for _ in 0..n {
                        let ran = d.run_async(&c);
                        let Some((seq, notify, l)) = queued.pop_front() else {
                            prop_assert!(!ran);
                            break;
                        };
                        prop_assert!(ran);
                        let index = seq % SLOTS as u32;
                        prop_assert_eq!(slots[index as usize], status::SUCCESS);
                        prop_assert_eq!(d.env.peek(l, 64), pattern(64, 0));
                        done.push(seq);
                        if notify {
                            ready.push_back(index);
                        }
                    }
                }
                Op::Read(n) => {
                    let mut buf = vec![0u32; n as usize];
                    let got = d.read_notify(&c, &mut buf);
                    let want: Vec<u32> =
                        (0..got.min(ready.len())).filter_map(|_| ready.pop_front()).collect();
                    prop_assert_eq!(&buf[..got], &want[..]);
                    prop_assert!(ready.is_empty() || got == n as usize);
                }
            }
            prop_assert_eq!(c.has_queued(), !queued.is_empty());
            prop_assert_eq!(c.has_ready(), !ready.is_empty());
        }
        prop_assert!(done.windows(2).all(|w| w[0] < w[1]), "in submission order");
        d.ctx_release(c);
        let s = d.stats.snapshot();
        prop_assert_eq!((s.regions, s.pinned_pages), (0, 0));
        prop_assert_eq!(d.env.pinned(), 0);
        d.exit();
        drop(slots);
    }
}
