//! The copy path by construction: what one copy does to state that other
//! CPUs share.  Each operation is measured alone: table and context mutex
//! acquisitions, heap allocations, questions to the DMA engine, changes to
//! the device's shared words (the table's allocation fields and slots, the
//! context id source) and counter adds (per-CPU slots in the kernel).  The
//! region's own reference count is the one shared word a copy may write.

use super::helpers::*;
use crate::edge::kalloc::fault;
use crate::ioctl::INLINE_IOVECS;
use crate::state::context::status;
use crate::state::stats::probe;
use knem_abi::*;
use std::sync::atomic::Ordering::SeqCst;

/// What one ioctl did.
#[derive(Debug, PartialEq, Eq)]
struct Footprint {
    table_locks: usize,
    ctx_locks: usize,
    allocations: u64,
    dma_probes: usize,
    shared_words_changed: bool,
    counter_adds: u64,
}

/// The footprint a copy may have: nothing but `adds` per-CPU counter adds.
fn lock_free(adds: u64) -> Footprint {
    Footprint {
        table_locks: 0,
        ctx_locks: 0,
        allocations: 0,
        dma_probes: 0,
        shared_words_changed: false,
        counter_adds: adds,
    }
}

/// Runs one ioctl (arguments already in user memory) and measures it.
fn measure(
    d: &Dev,
    ctx: &crate::state::context::Context,
    cmdno: u32,
    arg: u64,
) -> (i64, Footprint) {
    let p = &d.env.probes;
    let (t0, c0, q0) = (
        p.table_locks.load(SeqCst),
        p.ctx_locks.load(SeqCst),
        p.dma_probes.load(SeqCst),
    );
    let (a0, s0, f0) = (fault::allocations(), probe::adds(), d.fingerprint());
    let r = d.ioctl(ctx, cmdno, arg);
    let f = Footprint {
        table_locks: p.table_locks.load(SeqCst) - t0,
        ctx_locks: p.ctx_locks.load(SeqCst) - c0,
        allocations: fault::allocations() - a0,
        dma_probes: p.dma_probes.load(SeqCst) - q0,
        shared_words_changed: d.fingerprint() != f0,
        counter_adds: probe::adds() - s0,
    };
    (r, f)
}

/// An INLINE_COPY(_BOUNDED) argument block over `local` iovecs.
fn inline_arg(
    d: &Dev,
    local: &[(u64, u64)],
    write: bool,
    cookie: u64,
    bound: Option<u64>,
) -> (u32, u64) {
    let arr = d.env.put_slice(&iovs(local));
    match bound {
        None => (
            cmd::INLINE_COPY,
            d.env.put(&knem_cmd_inline_copy {
                local_iovec_array: arr,
                local_iovec_nr: local.len() as u32,
                write: write as u32,
                remote_cookie: cookie,
                async_status_index: 0,
                ..Default::default()
            }),
        ),
        Some(length) => (
            cmd::INLINE_COPY_BOUNDED,
            d.env.put(&knem_cmd_inline_copy_bounded {
                local_iovec_array: arr,
                local_iovec_nr: local.len() as u32,
                write: write as u32,
                remote_cookie: cookie,
                length,
                ..Default::default()
            }),
        ),
    }
}

/// A COPY(_BOUNDED) argument block.
fn copy_arg(d: &Dev, src: u64, dst: u64, bound: Option<u64>) -> (u32, u64) {
    match bound {
        None => (
            cmd::COPY,
            d.env.put(&knem_cmd_copy {
                src_cookie: src,
                dst_cookie: dst,
                ..Default::default()
            }),
        ),
        Some(length) => (
            cmd::COPY_BOUNDED,
            d.env.put(&knem_cmd_copy_bounded {
                src_cookie: src,
                dst_cookie: dst,
                length,
                ..Default::default()
            }),
        ),
    }
}

/// `n` iovecs of `each` bytes spread over a fresh mapping, and the mapping.
fn scattered(d: &Dev, n: u64, each: u64) -> (u64, Vec<(u64, u64)>) {
    let base = d.env.map(n * 2 * each, true);
    (base, (0..n).map(|i| (base + i * 2 * each, each)).collect())
}

/// The bytes of `iovs`, in order.
fn peek_iovs(d: &Dev, iovs: &[(u64, u64)]) -> Vec<u8> {
    iovs.iter()
        .flat_map(|&(a, l)| d.env.peek(a, l as usize))
        .collect()
}

#[test]
fn inline_copies_take_no_lock_and_allocate_nothing() {
    let d = dev();
    let owner = d.ctx_new(0).unwrap();
    let reader = d.ctx_new(0).unwrap();
    let len = 3 * 4096 + 100;
    let src = d.env.map(len, true);
    let data = pattern(len as usize, 5);
    d.env.fill(src, &data);
    let cookie = create(&d, &owner, &[(src, len)], RW, 0).unwrap();

    // Read with one iovec, then with the most the stack holds.
    for n in [1, INLINE_IOVECS as u64] {
        let each = len / n;
        let (_, local) = scattered(&d, n, each);
        let (cmdno, arg) = inline_arg(&d, &local, false, cookie, None);
        let (r, f) = measure(&d, &reader, cmdno, arg);
        assert_eq!(r, 0);
        assert_eq!(f, lock_free(1), "INLINE_COPY read, {n} iovecs");
        assert_eq!(
            peek_iovs(&d, &local),
            data[..(each * n) as usize],
            "{n} iovecs"
        );
    }

    // Write, bounded.
    let (_, local) = scattered(&d, 4, 512);
    for (i, &(a, l)) in local.iter().enumerate() {
        d.env.fill(a, &pattern(l as usize, 40 + i as u8));
    }
    let (cmdno, arg) = inline_arg(&d, &local, true, cookie, Some(1000));
    let (r, f) = measure(&d, &reader, cmdno, arg);
    assert_eq!(r, 0);
    assert_eq!(f, lock_free(1), "INLINE_COPY_BOUNDED write");
    assert_eq!(d.env.peek(src, 1000), peek_iovs(&d, &local)[..1000]);
    assert_eq!(
        d.env.peek(src + 1000, 10),
        data[1000..1010],
        "past the bound"
    );

    finish(&d, vec![owner, reader]);
}

#[test]
fn region_copies_take_no_lock_and_allocate_nothing() {
    let d = dev();
    let c = d.ctx_new(0).unwrap();
    let len = 2 * 4096 + 7;
    let (a, b) = (d.env.map(len, true), d.env.map(len, true));
    let data = pattern(len as usize, 9);
    d.env.fill(a, &data);
    let src = create(&d, &c, &[(a, len)], RW, 0).unwrap();
    let dst = create(&d, &c, &[(b, len)], RW, KNEM_FLAG_ANY_USER_ACCESS).unwrap();

    let (cmdno, arg) = copy_arg(&d, src, dst, None);
    let (r, f) = measure(&d, &c, cmdno, arg);
    assert_eq!((r, f), (0, lock_free(1)), "COPY");
    assert_eq!(d.env.peek(b, len as usize), data);
    assert_eq!(
        d.env
            .get::<u32>(arg + std::mem::offset_of!(knem_cmd_copy, current_status) as u64),
        status::SUCCESS as u32
    );

    d.env.fill(a, &pattern(len as usize, 77));
    let (cmdno, arg) = copy_arg(&d, src, dst, Some(4096));
    let (r, f) = measure(&d, &c, cmdno, arg);
    assert_eq!((r, f), (0, lock_free(1)), "COPY_BOUNDED");
    assert_eq!(d.env.peek(b, 4096), pattern(len as usize, 77)[..4096]);
    assert_eq!(d.env.peek(b + 4096, 10), data[4096..4106], "past the bound");

    finish(&d, vec![c]);
}

/// The probes see what the copy path must not do: a single-use region is
/// consumed under the table lock and changes its slot, more iovecs than the
/// stack holds are allocated, the DMA flag asks the engine.
#[test]
fn probes_see_locks_allocations_and_dma_questions() {
    let d = dev();
    let c = d.ctx_new(0).unwrap();
    let (a, b) = (d.env.map(4096, true), d.env.map(4096, true));
    d.env.fill(a, &pattern(4096, 1));
    let once = create(&d, &c, &[(a, 4096)], RW, KNEM_FLAG_SINGLEUSE).unwrap();
    let dst = create(&d, &c, &[(b, 4096)], RW, 0).unwrap();

    let (cmdno, arg) = copy_arg(&d, once, dst, None);
    let (r, f) = measure(&d, &c, cmdno, arg);
    assert_eq!(r, 0);
    assert_eq!(f.table_locks, 1, "{f:?}");
    assert!(f.shared_words_changed, "{f:?}");
    assert_eq!(d.env.peek(b, 4096), pattern(4096, 1));

    let n = INLINE_IOVECS as u64 + 1;
    let (_, local) = scattered(&d, n, 16);
    let (cmdno, arg) = inline_arg(&d, &local, false, dst, None);
    let (r, f) = measure(&d, &c, cmdno, arg);
    assert_eq!(r, 0);
    assert!(f.allocations > 0, "{f:?}");
    assert!(!f.shared_words_changed && f.table_locks == 0, "{f:?}");
    assert_eq!(
        d.env.peek(local[n as usize - 1].0, 16),
        pattern(4096, 1)[(n - 1) as usize * 16..][..16]
    );

    let arr = d.env.put_slice(&iovs(&local[..1]));
    let arg = d.env.put(&knem_cmd_inline_copy {
        local_iovec_array: arr,
        local_iovec_nr: 1,
        remote_cookie: dst,
        flags: KNEM_FLAG_DMA,
        ..Default::default()
    });
    let (r, f) = measure(&d, &c, cmd::INLINE_COPY, arg);
    assert_eq!(r, 0);
    assert_eq!(f.dma_probes, 1, "{f:?}");

    finish(&d, vec![c]);
}
