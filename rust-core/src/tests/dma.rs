//! DMA routing and execution on the mock kernel and its simulated engine
//! ([`crate::testing::mock_dma::MockDma`]): GET_INFO, which requests go to the engine,
//! the CPU fallback for small pieces, failures, and pins given back.

use super::helpers::{self, finish, iov, pattern, Dev, OK, PENDING};
use crate::edge::errno::*;
use crate::state::context::{status, Context};
use crate::state::device::Device;
use crate::testing::mock::MockEnv;
use knem_abi::*;
use std::sync::atomic::Ordering::*;
use std::vec::Vec;

const DMA: u32 = KNEM_FLAG_DMA;
const ADC: u32 = KNEM_FLAG_ASYNCDMACOMPLETE;

fn engine_dev(engine: bool) -> Box<Dev> {
    let d = Box::new(Device::new(MockEnv::new()));
    d.env.dma.on.store(engine, SeqCst);
    d.env.dma.min.store(512, SeqCst);
    d
}

fn pairs(segs: &[knem_cmd_param_iovec]) -> Vec<(u64, u64)> {
    segs.iter().map(|s| (s.base, s.len)).collect()
}

fn create(d: &Dev, c: &Context, segs: &[knem_cmd_param_iovec], prot: u32) -> u64 {
    helpers::create(d, c, &pairs(segs), prot, 0).expect("CREATE_REGION")
}

fn inline(
    d: &Dev,
    c: &Context,
    local: &[knem_cmd_param_iovec],
    write: bool,
    cookie: u64,
    flags: u32,
    index: u32,
) -> Result<u32, i64> {
    let mut r = helpers::Inline::new(&pairs(local), write, cookie);
    r.flags = flags;
    r.index = index;
    helpers::inline(d, c, &r)
}

fn copy(d: &Dev, c: &Context, src: u64, dst: u64, off: u64, flags: u32) -> Result<u32, i64> {
    helpers::copy_indexed(d, c, (src, off), (dst, off), None, flags, 0)
}

fn info(d: &Dev, c: &Context) -> knem_cmd_info {
    let arg = d.env.put(&knem_cmd_info::default());
    assert_eq!(d.ioctl(c, cmd::GET_INFO, arg), 0);
    d.env.get(arg)
}

#[test]
fn get_info_follows_the_engine() {
    let d = engine_dev(false);
    let c = d.ctx_new(1).unwrap();
    let i = info(&d, &c);
    assert_eq!((i.features, i.ignored_flags), (0, KNEM_FLAG_DMA));
    d.env.dma.on.store(true, SeqCst);
    let i = info(&d, &c);
    assert_eq!(
        (i.abi, i.features, i.ignored_flags),
        (0x0d, KNEM_FEATURE_DMA, 0)
    );
    finish(&d, vec![c]);
}

#[test]
fn sync_dma_multi_segment_unaligned_with_small_pieces_on_cpu() {
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    // Remote: three unaligned segments; local: two, cut elsewhere.
    let base = d.env.map(5 * 4096, true);
    let segs = [
        iov(base + 3, 5000),
        iov(base + 6000, 100),
        iov(base + 9001, 7000),
    ];
    let k = create(&d, &c, &segs, 3);
    let total = 12100usize;
    let data = pattern(total, 5);
    let l = d.env.put_slice(&data);
    let local = [iov(l, 4444), iov(l + 4444, (total - 4444) as u64)];
    assert_eq!(inline(&d, &c, &local, true, k, DMA, 0), OK);
    let mut got = Vec::new();
    for s in &segs {
        got.extend(d.env.peek(s.base, s.len as usize));
    }
    assert_eq!(got, data);
    let pieces = d.env.dma.pieces.load(SeqCst);
    assert!(pieces > 3, "pieces went to the engine: {pieces}");
    // Read back through the engine into fresh memory.
    let back = d.env.map(total as u64, true);
    assert_eq!(
        inline(&d, &c, &[iov(back, total as u64)], false, k, DMA, 0),
        OK
    );
    assert_eq!(d.env.peek(back, total), data);
    // Pieces under dma_min stayed on the CPU: with min above a page,
    // nothing goes to the engine.
    d.env.dma.min.store(8192, SeqCst);
    let before = d.env.dma.pieces.load(SeqCst);
    let back2 = d.env.map(total as u64, true);
    assert_eq!(
        inline(&d, &c, &[iov(back2, total as u64)], false, k, DMA, 0),
        OK
    );
    assert_eq!(d.env.peek(back2, total), data);
    assert_eq!(d.env.dma.pieces.load(SeqCst), before);
    finish(&d, vec![c]);
}

#[test]
fn region_copy_by_dma_and_failure_is_failed() {
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(20000, 1));
    let b = d.env.map(20000, true);
    let ka = create(&d, &c, &[iov(a, 20000)], 1);
    let kb = create(&d, &c, &[iov(b, 20000)], 3);
    assert_eq!(copy(&d, &c, ka, kb, 7, DMA), OK);
    assert_eq!(d.env.peek(b + 7, 19993), pattern(20000, 1)[7..].to_vec());
    d.env.dma.fail_every.store(2, SeqCst);
    assert_eq!(copy(&d, &c, ka, kb, 0, DMA), Ok(status::FAILED as u32));
    assert_eq!(d.stats.snapshot().copies_failed, 1);
    // Overlapping self-copy: the CPU's memmove order, not the engine.
    d.env.dma.fail_every.store(0, SeqCst);
    let before = d.env.dma.pieces.load(SeqCst);
    assert_eq!(copy(&d, &c, kb, kb, 0, DMA), OK);
    assert_eq!(d.env.dma.pieces.load(SeqCst), before);
    finish(&d, vec![c]);
}

#[test]
fn no_engine_means_cpu_and_nothing_pinned_locally() {
    let d = engine_dev(false);
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(9000, 2));
    let k = create(&d, &c, &[iov(a, 9000)], 1);
    let l = d.env.map(9000, true);
    assert_eq!(inline(&d, &c, &[iov(l, 9000)], false, k, DMA, 0), OK);
    assert_eq!(d.env.peek(l, 9000), pattern(9000, 2));
    assert_eq!(d.env.dma.pieces.load(SeqCst), 0);
    // ASYNCDMACOMPLETE without an engine: copy now, report in both.
    let mut slots = vec![0u8; 4];
    // SAFETY: slots outlives the context (released in finish).
    unsafe { c.set_status_array(slots.as_mut_ptr(), 4).unwrap() };
    assert_eq!(inline(&d, &c, &[iov(l, 9000)], false, k, DMA | ADC, 3), OK);
    assert_eq!(slots[3], status::SUCCESS);
    assert_eq!(d.env.kicks.load(SeqCst), 0);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn asyncdmacomplete_completes_on_the_engine_and_dmathread_on_the_thread() {
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    let mut slots = vec![0u8; 4];
    // SAFETY: slots outlives the context (released in finish).
    unsafe { c.set_status_array(slots.as_mut_ptr(), 4).unwrap() };
    let a = d.env.put_slice(&pattern(10000, 4));
    let k = create(&d, &c, &[iov(a, 10000)], 3);
    let l1 = d.env.map(10000, true);
    let l2 = d.env.map(10000, true);
    let pinned = d.env.pinned();
    assert_eq!(
        inline(&d, &c, &[iov(l1, 10000)], false, k, DMA | ADC, 1),
        PENDING
    );
    // No thread involved: nothing queued for it; the local side is pinned
    // until the engine is done and the release ran.
    assert_eq!(d.env.kicks.load(SeqCst), 0);
    assert!(d.env.pinned() > pinned);
    assert_eq!(slots[1], 0);
    let th = DMA | KNEM_FLAG_DMATHREAD | KNEM_FLAG_NOTIFY_FD;
    assert_eq!(inline(&d, &c, &[iov(l2, 10000)], false, k, th, 2), PENDING);
    assert_eq!(d.env.kicks.load(SeqCst), 1);
    // NOTIFY_FD still needs a thread flag and refuses ASYNCDMACOMPLETE.
    let n = KNEM_FLAG_NOTIFY_FD;
    assert_eq!(
        inline(&d, &c, &[iov(l2, 1)], false, k, DMA | ADC | n, 0),
        Err(EINVAL.to_neg())
    );
    assert!(d.env.dma.complete_async(&d));
    assert!(!d.env.dma.complete_async(&d));
    assert_eq!(slots[1], status::SUCCESS);
    assert_eq!(d.env.peek(l1, 10000), pattern(10000, 4));
    assert!(d.run_async(&c));
    assert!(!d.run_async(&c));
    assert_eq!(slots[2], status::SUCCESS);
    assert_eq!(d.env.peek(l2, 10000), pattern(10000, 4));
    assert_eq!(d.env.pinned(), pinned, "pins given back");
    let mut buf = [0u32; 4];
    assert_eq!(d.read_notify(&c, &mut buf), 1);
    assert_eq!(buf[0], 2);
    assert_eq!(d.stats.snapshot().bytes_async, 20000);
    // A failed piece: FAILED in the slot, counted.
    d.env.dma.fail_every.store(1, SeqCst);
    let kb = create(&d, &c, &[iov(l1, 10000)], 3);
    assert_eq!(copy(&d, &c, k, kb, 0, DMA | ADC), PENDING);
    assert!(d.env.dma.complete_async(&d));
    assert_eq!(slots[0], status::FAILED);
    assert_eq!(d.stats.snapshot().copies_failed, 1);
    finish(&d, vec![c]);
    drop(slots);
}

#[test]
fn failed_async_dma_marks_the_slot_failed() {
    let d = engine_dev(true);
    d.env.dma.fail_every.store(1, SeqCst);
    let c = d.ctx_new(1).unwrap();
    let mut slots = vec![0u8; 2];
    // SAFETY: slots outlives the context (released in finish).
    unsafe { c.set_status_array(slots.as_mut_ptr(), 2).unwrap() };
    let a = d.env.put_slice(&pattern(4096, 4));
    let k = create(&d, &c, &[iov(a, 4096)], 1);
    let l = d.env.map(4096, true);
    let f = DMA | KNEM_FLAG_DMATHREAD;
    assert_eq!(inline(&d, &c, &[iov(l, 4096)], false, k, f, 1), PENDING);
    assert!(d.run_async(&c));
    assert_eq!(slots[1], status::FAILED);
    finish(&d, vec![c]);
    drop(slots);
}
