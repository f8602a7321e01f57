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

/// A DMA copy stops queuing once `copy_should_stop` says so (the caller is
/// dying), as the CPU loops do: FAILED, only the pieces before the stop
/// went to the engine, nothing written past them.
#[test]
fn fatal_signal_stops_long_dma_copy() {
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    let len = 64 * 4096;
    let data = pattern(len, 6);
    let a = d.env.put_slice(&data);
    let b = d.env.map(len as u64, true);
    let ka = create(&d, &c, &[iov(a, len as u64)], 1);
    let kb = create(&d, &c, &[iov(b, len as u64)], 3);
    *d.env.stop_after.lock().unwrap() = Some(5);
    assert_eq!(copy(&d, &c, ka, kb, 0, DMA), Ok(status::FAILED as u32));
    assert_eq!(d.env.dma.pieces.load(SeqCst), 5);
    let got = d.env.peek(b, len);
    assert_eq!(got[..5 * 4096], data[..5 * 4096]);
    assert!(
        got[5 * 4096..].iter().all(|&x| x == 0),
        "copied past the stop"
    );
    *d.env.stop_after.lock().unwrap() = None;
    assert_eq!(copy(&d, &c, ka, kb, 0, DMA), OK);
    assert_eq!(d.env.peek(b, len), data);
    finish(&d, vec![c]);
}

/// A batch that failed for good (EIO from the shim: a timed-out wait)
/// stops the copy: FAILED, and no later piece goes to the CPU either.
#[test]
fn dead_batch_stops_the_copy() {
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    let len = 16 * 4096;
    let a = d.env.put_slice(&pattern(len, 8));
    let b = d.env.map(len as u64, true);
    let ka = create(&d, &c, &[iov(a, len as u64)], 1);
    let kb = create(&d, &c, &[iov(b, len as u64)], 3);
    d.env.dma.dead_after.store(3, SeqCst);
    assert_eq!(copy(&d, &c, ka, kb, 0, DMA), Ok(status::FAILED as u32));
    assert_eq!(d.env.dma.pieces.load(SeqCst), 3);
    assert!(
        d.env.peek(b, len)[3 * 4096..].iter().all(|&x| x == 0),
        "the CPU copied after the batch died"
    );
    assert_eq!(d.env.dma.open.load(SeqCst), 0, "batch ended");
    finish(&d, vec![c]);
}

/// Pieces whose destination bytes overlap never go to the engine together:
/// with an engine that runs a batch last to first, a copy into a region
/// whose segments alias (fully, then partly) still gives the sequential
/// result (each later segment's bytes last), by region copy and by an
/// inline read into aliasing local segments; a disjoint destination still
/// goes to the engine.
#[test]
fn dma_overlapping_destination() {
    let d = engine_dev(true);
    d.env.dma.reverse.store(true, SeqCst);
    let c = d.ctx_new(1).unwrap();
    let data = pattern(3 * 8192, 3);
    let a = d.env.put_slice(&data);
    let ka = create(&d, &c, &[iov(a, data.len() as u64)], 1);
    let m = d.env.map(4 * 4096, true);
    for segs in [
        vec![iov(m, 8192), iov(m, 8192)],
        vec![iov(m, 8192), iov(m + 1000, 8192), iov(m + 12000, 100)],
    ] {
        // What writing the segments in sequence gives.
        let mut want = vec![0u8; 4 * 4096];
        let mut k = 0;
        for s in &segs {
            let at = (s.base - m) as usize;
            want[at..at + s.len as usize].copy_from_slice(&data[k..k + s.len as usize]);
            k += s.len as usize;
        }
        d.env.fill(m, &vec![0u8; 4 * 4096]);
        let kb = create(&d, &c, &segs, 3);
        let before = d.env.dma.pieces.load(SeqCst);
        assert_eq!(copy(&d, &c, ka, kb, 0, DMA), OK);
        assert_eq!(d.env.peek(m, 4 * 4096), want, "region copy");
        assert_eq!(d.env.dma.pieces.load(SeqCst), before, "went to the engine");
        d.env.fill(m, &vec![0u8; 4 * 4096]);
        assert_eq!(inline(&d, &c, &segs, false, ka, DMA, 0), OK);
        assert_eq!(d.env.peek(m, 4 * 4096), want, "inline read");
    }
    let kb = create(&d, &c, &[iov(m, 8192), iov(m + 8192, 8000)], 3);
    let before = d.env.dma.pieces.load(SeqCst);
    assert_eq!(copy(&d, &c, ka, kb, 0, DMA), OK);
    assert_eq!(d.env.peek(m, 16192), data[..16192].to_vec());
    assert!(
        d.env.dma.pieces.load(SeqCst) > before,
        "disjoint: the engine"
    );
    finish(&d, vec![c]);
}

/// ASYNCDMACOMPLETE requests in flight are bounded per fd: one per status
/// slot (and DMA_ASYNC_MAX), EBUSY past it, counted; completing one gives
/// room back, and another fd is not affected.
#[test]
fn dma_async_batches_bounded() {
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    let other = d.ctx_new(1).unwrap();
    let mut slots = vec![0u8; 4];
    let mut slots2 = vec![0u8; 1];
    // SAFETY: the slots outlive the contexts (released in finish).
    unsafe {
        c.set_status_array(slots.as_mut_ptr(), 4).unwrap();
        other.set_status_array(slots2.as_mut_ptr(), 1).unwrap();
    }
    let a = d.env.put_slice(&pattern(8192, 5));
    let k = create(&d, &c, &[iov(a, 8192)], 1);
    let locals: Vec<u64> = (0..6).map(|_| d.env.map(8192, true)).collect();
    for (i, &l) in locals.iter().take(4).enumerate() {
        assert_eq!(
            inline(&d, &c, &[iov(l, 8192)], false, k, DMA | ADC, i as u32),
            PENDING
        );
    }
    let ebusy0 = d.stats.snapshot().err_ebusy;
    assert_eq!(
        inline(&d, &c, &[iov(locals[4], 8192)], false, k, DMA | ADC, 0),
        Err(EBUSY.to_neg())
    );
    assert_eq!(d.stats.snapshot().err_ebusy, ebusy0 + 1);
    assert_eq!(c.dma_async_in_flight(), 4);
    // Another fd has its own room.
    let ko = create(&d, &other, &[iov(a, 8192)], 1);
    assert_eq!(
        inline(&d, &other, &[iov(locals[5], 8192)], false, ko, DMA | ADC, 0),
        PENDING
    );
    assert!(d.env.dma.complete_async(&d));
    assert_eq!(slots[0], status::SUCCESS);
    assert_eq!(c.dma_async_in_flight(), 3);
    assert_eq!(
        inline(&d, &c, &[iov(locals[4], 8192)], false, k, DMA | ADC, 0),
        PENDING
    );
    while d.env.dma.complete_async(&d) {}
    assert_eq!(c.dma_async_in_flight(), 0);
    assert_eq!(other.dma_async_in_flight(), 0);
    for &l in &locals[..5] {
        assert_eq!(d.env.peek(l, 8192), pattern(8192, 5));
    }
    finish(&d, vec![c, other]);
    drop((slots, slots2));
}

/// The per-fd bound caps a large status array at DMA_ASYNC_MAX.
#[test]
fn dma_async_bound_caps_large_arrays() {
    use crate::state::context::DMA_ASYNC_MAX;
    let d = engine_dev(true);
    let c = d.ctx_new(1).unwrap();
    let n = DMA_ASYNC_MAX as usize + 8;
    let mut slots = vec![0u8; n];
    // SAFETY: slots outlives the context (released in finish).
    unsafe { c.set_status_array(slots.as_mut_ptr(), n as u64).unwrap() };
    let a = d.env.put_slice(&pattern(1024, 1));
    let k = create(&d, &c, &[iov(a, 1024)], 1);
    let l = d.env.map(1024, true);
    for i in 0..DMA_ASYNC_MAX as u32 {
        assert_eq!(
            inline(&d, &c, &[iov(l, 1024)], false, k, DMA | ADC, i),
            PENDING
        );
    }
    assert_eq!(
        inline(
            &d,
            &c,
            &[iov(l, 1024)],
            false,
            k,
            DMA | ADC,
            DMA_ASYNC_MAX as u32
        ),
        Err(EBUSY.to_neg())
    );
    while d.env.dma.complete_async(&d) {}
    finish(&d, vec![c]);
    drop(slots);
}
