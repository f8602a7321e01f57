//! Issue 3: asynchronous copies on the per-fd offload thread, the status
//! array, ASYNCDMACOMPLETE without DMA, PINLOCAL, INIT_ASYNC_RECV,
//! BIND_OFFLOAD, and what happens to pending copies when things go away.

use crate::ensure;
use crate::util::*;
use knem::abi::{self, cmd};
use knem::{
    BindOffload, Cookie, CopyFlags, CopyRequest, CpuMask, Device, Errno, InlineCopyRequest, Iovec,
    Protection, RegionFlags, Status, StatusArray,
};
use std::time::{Duration, Instant};

const SEED_SRC: u8 = 0x3c;
const SEED_LOCAL: u8 = 0xa7;
const SENTINEL: u8 = 0xee;

const MEMCPY: CopyFlags = CopyFlags::MEMCPY_THREAD;

/// Every slot except `used` must still be PENDING.
fn others_pending(array: &StatusArray, used: &[u32], what: &str) -> TestResult {
    for i in 0..array.len() {
        if used.contains(&(i as u32)) {
            continue;
        }
        let s = array.get(i).unwrap_or(Status::Pending);
        ensure!(
            s == Status::Pending,
            "{what}: slot {i}, used by no request, is {s}"
        );
    }
    Ok(())
}

/// A peer-less source: REGION3 filled with the source pattern, declared
/// read-only on `owner`.
fn source_region3(owner: &Device) -> TestResult<(Mem, Cookie)> {
    let mem = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&mem, |i| pat(SEED_SRC, i));
    // SAFETY: our mapping, returned with the cookie so it outlives it.
    let c = unsafe {
        owner.create_region_raw(&REGION3.iovecs(&mem), Protection::READ, RegionFlags::NONE)
    }
    .ctx("CREATE_REGION (3 segments)")?;
    Ok((mem, c))
}

/// MEMCPYTHREAD (and DMATHREAD, which is the same without an engine)
/// inline reads: PENDING at submission, SUCCESS in the slot later, every
/// byte of the local mapping right; the owned-buffer API too.
pub fn memcpythread_inline_read() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let (_src, cookie) = source_region3(&owner)?;
    let array = dev.map_status_array(64).ctx("mmap 64 slots")?;
    let cases: [(CopyFlags, u64, Option<u64>); 7] = [
        (MEMCPY, 0, None),
        (MEMCPY, 5000, Some(7000)),
        (CopyFlags::DMA_THREAD, 4099, None),
        (MEMCPY | CopyFlags::DMA, 18_000, Some(100)),
        (CopyFlags::DMA_THREAD | CopyFlags::DMA, 1, Some(1)),
        (MEMCPY | CopyFlags::PIN_LOCAL, 17_000, None),
        (MEMCPY, 18_102, None), // at the end: nothing to copy
    ];
    let mut pending = Vec::new();
    // Submit everything first, so several requests queue on the thread.
    for (k, &(flags, off, len)) in cases.iter().enumerate() {
        let local = Mem::new(LOCAL2_BIG.pages)?;
        local.fill(SENTINEL);
        let idx = (k * 3 + 1) as u32;
        let what = format!("async read {flags} offset {off} length {len:?} slot {idx}");
        // SAFETY: `local` is our scratch mapping, kept until the slot is
        // done and only snapshotted.
        let r = unsafe {
            dev.read_into_async(cookie, off, &LOCAL2_BIG.iovecs(&local), len, idx, flags)
        };
        expect_pending(&what, r)?;
        pending.push((local, idx, off, len, what));
    }
    let used: Vec<u32> = pending.iter().map(|p| p.1).collect();
    others_pending(&array, &used, "while reads are queued")?;
    for (local, idx, off, len, what) in &pending {
        wait_slot_success(&array, *idx, what)?;
        let n = expected_len(REGION3.total(), *off, LOCAL2_BIG.total(), *len);
        LOCAL2_BIG
            .verify(
                &local.snapshot(),
                |_| SENTINEL,
                0,
                n,
                |k| pat(SEED_SRC, off + k),
            )
            .map_err(|e| format!("{what}: {e}"))?;
    }
    others_pending(&array, &used, "after the reads")?;

    // The owned-buffer API: the buffer comes back with the status.
    let t = dev
        .read_async(&array, cookie, 100, vec![SENTINEL; 6000], None, 60, MEMCPY)
        .ctx("read_async (owned buffer)")?;
    let (st, buf) = t
        .wait_timeout(Duration::from_secs(20))
        .map_err(|_| "read_async: still pending after 20 s".to_string())?;
    ensure!(st == Status::Success, "read_async ended {st}");
    check_bytes("read_async data", &buf, |i| pat(SEED_SRC, 100 + i as u64))?;
    owner.destroy_region(cookie).ctx("DESTROY_REGION")
}

/// MEMCPYTHREAD inline writes into a region, one at a time, every byte of
/// the region's mapping checked; the owned-buffer API too.
pub fn memcpythread_inline_write() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let dst = Mem::new(REGION3.pages)?;
    // SAFETY: our mapping, only snapshotted, outlives the region.
    let cookie = unsafe {
        owner.create_region_raw(&REGION3.iovecs(&dst), Protection::WRITE, RegionFlags::NONE)
    }
    .ctx("CREATE_REGION")?;
    let array = dev.map_status_array(16).ctx("mmap 16 slots")?;
    let src = Mem::new(LOCAL2_BIG.pages)?;
    LOCAL2_BIG.fill_with(&src, |i| pat(SEED_LOCAL, i));
    let cases: [(CopyFlags, u64, Option<u64>); 5] = [
        (MEMCPY, 0, None),
        (MEMCPY, 5003, Some(4099)),
        (CopyFlags::DMA_THREAD, 7, Some(12_345)),
        (MEMCPY | CopyFlags::PIN_LOCAL, 18_000, None),
        (MEMCPY, 9000, Some(0)),
    ];
    for (k, &(flags, off, len)) in cases.iter().enumerate() {
        dst.fill(SENTINEL);
        let idx = 15 - k as u32;
        let what = format!("async write {flags} offset {off} length {len:?} slot {idx}");
        // SAFETY: the driver only reads `src`, which lives to the end.
        let r =
            unsafe { dev.write_from_async(cookie, off, &LOCAL2_BIG.iovecs(&src), len, idx, flags) };
        expect_pending(&what, r)?;
        wait_slot_success(&array, idx, &what)?;
        let n = expected_len(REGION3.total(), off, LOCAL2_BIG.total(), len);
        REGION3
            .verify(
                &dst.snapshot(),
                |_| SENTINEL,
                off,
                n,
                |k| pat(SEED_LOCAL, k),
            )
            .map_err(|e| format!("{what}: {e}"))?;
    }
    dst.fill(SENTINEL);
    let data: Vec<u8> = (0..3000u64).map(|i| pat(SEED_LOCAL, i)).collect();
    let t = dev
        .write_async(&array, cookie, 4000, data.clone(), None, 0, MEMCPY)
        .ctx("write_async (owned buffer)")?;
    let (st, back) = t
        .wait_timeout(Duration::from_secs(20))
        .map_err(|_| "write_async: still pending after 20 s".to_string())?;
    ensure!(
        st == Status::Success && back == data,
        "write_async ended {st}"
    );
    REGION3
        .verify(
            &dst.snapshot(),
            |_| SENTINEL,
            4000,
            3000,
            |k| pat(SEED_LOCAL, k),
        )
        .map_err(|e| format!("write_async: {e}"))?;
    owner.destroy_region(cookie).ctx("DESTROY_REGION")
}

/// Asynchronous COPY and COPY_BOUNDED between a 3-segment region and a
/// 2-segment one.
pub fn memcpythread_copy() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let (_src, src) = source_region3(&owner)?;
    let dmem = Mem::new(LOCAL2_BIG.pages)?;
    // SAFETY: our mapping, only snapshotted, outlives the region.
    let dst = unsafe {
        dev.create_region_raw(
            &LOCAL2_BIG.iovecs(&dmem),
            Protection::WRITE,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION")?;
    let array = dev.map_status_array(32).ctx("mmap 32 slots")?;
    let cases: [(CopyFlags, u64, u64, Option<u64>); 6] = [
        (MEMCPY, 0, 0, None),
        (MEMCPY, 5002, 3000, None),
        (CopyFlags::DMA_THREAD, 9101, 1, Some(9001)),
        (MEMCPY | CopyFlags::DMA, 100, 22_000, Some(5000)),
        (MEMCPY, 18_101, 0, Some(5)),
        (MEMCPY, 4096, 4096, Some(8192)),
    ];
    for (k, &(flags, so, d_o, len)) in cases.iter().enumerate() {
        dmem.fill(SENTINEL);
        let idx = 3 + 2 * k as u32;
        let what = format!("async COPY {flags} src {so} dst {d_o} length {len:?} slot {idx}");
        expect_pending(&what, dev.copy_async(src, so, dst, d_o, len, idx, flags))?;
        wait_slot_success(&array, idx, &what)?;
        let n = REGION3
            .total()
            .saturating_sub(so)
            .min(LOCAL2_BIG.total().saturating_sub(d_o))
            .min(len.unwrap_or(u64::MAX));
        LOCAL2_BIG
            .verify(
                &dmem.snapshot(),
                |_| SENTINEL,
                d_o,
                n,
                |k| pat(SEED_SRC, so + k),
            )
            .map_err(|e| format!("{what}: {e}"))?;
    }
    dev.destroy_region(dst).ctx("DESTROY_REGION")?;
    owner.destroy_region(src).ctx("DESTROY_REGION")
}

/// Sizes of the ring's requests, cycled.
const RING_SIZES: [usize; 8] = [1, 4096, 65_536, 300, 196_608, 8191, 100_000, 17];
const RING: usize = 256;

/// Scan slots `[0, n)` from the top down (a slot seen done implies every
/// lower one was done before it, so the later reads of lower slots must see
/// them done): whenever slot i is done, every slot below is too.
fn check_order(array: &StatusArray, n: usize) -> TestResult<usize> {
    let mut highest_done: Option<usize> = None;
    let mut done = 0;
    for i in (0..n).rev() {
        match array.get(i).unwrap_or(Status::Pending) {
            Status::Pending => {
                if let Some(h) = highest_done {
                    return Err(format!(
                        "out of order: slot {h} completed while slot {i} (submitted \
                         earlier) is still PENDING"
                    ));
                }
            }
            Status::Success => {
                highest_done.get_or_insert(i);
                done += 1;
            }
            s => return Err(format!("slot {i} ended {s}")),
        }
    }
    Ok(done)
}

/// 256 asynchronous requests of varied sizes and kinds (COPY_BOUNDED on
/// MEMCPYTHREAD and DMATHREAD, inline reads) on one fd complete in
/// submission order, checked on every poll; all data verified.
pub fn completion_order_ring_256() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    const SRC_LEN: usize = 256 * 1024;
    let smem = Mem::new(SRC_LEN / PAGE)?;
    smem.write(
        0,
        &(0..SRC_LEN as u64)
            .map(|i| pat(SEED_SRC, i))
            .collect::<Vec<_>>(),
    );
    let src = region_at(
        &owner,
        &smem,
        0,
        SRC_LEN,
        Protection::READ,
        RegionFlags::NONE,
    )?;
    let plan: Vec<(usize, usize, usize)> = {
        let mut at = 0;
        (0..RING)
            .map(|k| {
                let size = RING_SIZES[k % RING_SIZES.len()];
                let so = (k * 977) % (SRC_LEN - size + 1);
                let p = (so, at, size);
                at += size;
                p
            })
            .collect()
    };
    let total: usize = plan.iter().map(|p| p.2).sum();
    let dmem = Mem::new(total.div_ceil(PAGE))?;
    dmem.fill(SENTINEL);
    let dst = region_at(&dev, &dmem, 0, total, Protection::WRITE, RegionFlags::NONE)?;
    let array = dev.map_status_array(RING).ctx("mmap 256 slots")?;
    let mut partial_views = 0;
    for (k, &(so, d_o, size)) in plan.iter().enumerate() {
        let idx = k as u32;
        let what = format!("request {k} ({size} bytes)");
        let r = match k % 3 {
            0 => dev.copy_async(
                src,
                so as u64,
                dst,
                d_o as u64,
                Some(size as u64),
                idx,
                MEMCPY,
            ),
            1 => dev.copy_async(
                src,
                so as u64,
                dst,
                d_o as u64,
                Some(size as u64),
                idx,
                CopyFlags::DMA_THREAD,
            ),
            _ => {
                let local = [Iovec::from_raw(dmem.addr(d_o), size as u64)];
                // SAFETY: our scratch mapping, only snapshotted.
                unsafe { dev.read_into_async(src, so as u64, &local, None, idx, MEMCPY) }
            }
        };
        expect_pending(&what, r)?;
        let done = check_order(&array, k + 1).map_err(|e| format!("after submitting {k}: {e}"))?;
        if done > 0 && done <= k {
            partial_views += 1;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = check_order(&array, RING).map_err(|e| format!("while polling: {e}"))?;
        if done == RING {
            break;
        }
        if done > 0 {
            partial_views += 1;
        }
        ensure!(
            Instant::now() < deadline,
            "only {done} of {RING} requests done after 60 s"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let snap = dmem.snapshot();
    for (k, &(so, d_o, size)) in plan.iter().enumerate() {
        check_bytes(&format!("request {k} data"), &snap[d_o..d_o + size], |i| {
            pat(SEED_SRC, (so + i) as u64)
        })?;
    }
    eprintln!("completion_order_ring_256: {partial_views} partially completed views checked");
    dev.destroy_region(dst).ctx("DESTROY_REGION")?;
    owner.destroy_region(src).ctx("DESTROY_REGION")
}

/// ASYNCDMACOMPLETE without DMA copies at once and reports in both
/// `current_status` and the slot, including FAILED for a local fault.
pub fn asyncdmacomplete_without_dma() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let info = dev.info().ctx("GET_INFO")?;
    let (_src, src) = source_region3(&owner)?;
    let dmem = Mem::new(2)?;
    let dst = region_at(
        &dev,
        &dmem,
        0,
        2 * PAGE,
        Protection::READ_WRITE,
        RegionFlags::NONE,
    )?;
    let array = dev.map_status_array(16).ctx("mmap 16 slots")?;
    let adc = CopyFlags::ASYNC_DMA_COMPLETE;
    let both = |what: &str, r: knem::Result<Status>, idx: u32, want: Status| -> TestResult {
        let st = r.ctx(what)?;
        ensure!(st == want, "{what}: current_status {st}, expected {want}");
        let slot = array.get_acquire(idx as usize).unwrap_or(Status::Pending);
        ensure!(
            slot == want,
            "{what}: slot {idx} is {slot} right after the call, expected {want}"
        );
        Ok(())
    };
    // Inline read.
    let local = Mem::new(LOCAL2_BIG.pages)?;
    local.fill(SENTINEL);
    // SAFETY: our scratch mapping, only snapshotted.
    let r = unsafe { dev.read_into_async(src, 10, &LOCAL2_BIG.iovecs(&local), None, 3, adc) };
    both("ASYNCDMACOMPLETE inline read", r, 3, Status::Success)?;
    let n = expected_len(REGION3.total(), 10, LOCAL2_BIG.total(), None);
    LOCAL2_BIG
        .verify(
            &local.snapshot(),
            |_| SENTINEL,
            0,
            n,
            |k| pat(SEED_SRC, 10 + k),
        )
        .map_err(|e| format!("ASYNCDMACOMPLETE inline read: {e}"))?;
    // Region to region, bounded.
    dmem.fill(SENTINEL);
    let r = dev.copy_async(src, 7, dst, 1, Some(5000), 4, adc);
    both("ASYNCDMACOMPLETE COPY_BOUNDED", r, 4, Status::Success)?;
    check_bytes(
        "ASYNCDMACOMPLETE COPY_BOUNDED data",
        &dmem.read(0, 5002),
        |i| {
            if i == 0 || i == 5001 {
                SENTINEL
            } else {
                pat(SEED_SRC, 6 + i as u64)
            }
        },
    )?;
    // Inline write.
    let data: Vec<u8> = (0..700u64).map(|i| pat(SEED_LOCAL, i)).collect();
    let r = unsafe {
        // SAFETY: the driver only reads `data`, which outlives the call
        // (the copy is over when it returns).
        dev.write_from_async(dst, 100, &[Iovec::from_slice(&data)], None, 5, adc)
    };
    both("ASYNCDMACOMPLETE inline write", r, 5, Status::Success)?;
    check_bytes("ASYNCDMACOMPLETE write data", &dmem.read(100, 700), |i| {
        data[i]
    })?;
    // DMA is ignored without an engine: ASYNCDMACOMPLETE|DMA is the same.
    if !info.has_dma() {
        ensure!(
            info.ignored_flags & abi::KNEM_FLAG_DMA != 0,
            "no DMA engine but DMA not in ignored_flags ({:#x})",
            info.ignored_flags
        );
        let r = dev.copy_async(src, 0, dst, 0, None, 6, adc | CopyFlags::DMA);
        both(
            "ASYNCDMACOMPLETE|DMA COPY without an engine",
            r,
            6,
            Status::Success,
        )?;
    }
    // A fault moving the data: FAILED in both places, no crash.
    let hole = unmapped_addr(2)?;
    // SAFETY: the local segment is unmapped; nothing of ours is touched.
    let r = unsafe { dev.read_into_async(src, 0, &[Iovec::from_raw(hole, 8192)], None, 7, adc) };
    both(
        "ASYNCDMACOMPLETE read into unmapped memory",
        r,
        7,
        Status::Failed,
    )?;
    others_pending(&array, &[3, 4, 5, 6, 7], "after ASYNCDMACOMPLETE requests")?;
    dev.destroy_region(dst).ctx("DESTROY_REGION")?;
    owner.destroy_region(src).ctx("DESTROY_REGION")
}

/// The EINVAL rules of asynchronous requests: no status array, an index
/// past it, NOTIFY_FD without a thread flag or with ASYNCDMACOMPLETE.
/// Nothing is copied and no slot is written.
pub fn async_einval_rules() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let mem = Mem::new(2)?;
    mem.fill(0x42);
    let region = region_at(
        &owner,
        &mem,
        0,
        4096,
        Protection::READ_WRITE,
        RegionFlags::NONE,
    )?;
    let region2 = region_at(
        &owner,
        &mem,
        4096,
        4096,
        Protection::READ_WRITE,
        RegionFlags::NONE,
    )?;
    let local = Mem::new(1)?;
    local.fill(SENTINEL);
    let iov = [Iovec::from_raw(local.addr(0), 1000)];
    let try_all = |dev: &Device, flags: CopyFlags, idx: u32, what: &str| -> TestResult {
        for length in [None, Some(100)] {
            for write in [false, true] {
                let req = InlineCopyRequest {
                    local: &iov,
                    write,
                    cookie: region,
                    offset: 0,
                    length,
                    flags,
                    async_status_index: idx,
                };
                // SAFETY: our scratch mapping.
                let r = unsafe { dev.inline_copy(&req) };
                expect_errno(
                    &format!(
                        "{what}: inline {} length {length:?}",
                        if write { "write" } else { "read" }
                    ),
                    r,
                    Errno::EINVAL,
                )?;
            }
            let r = dev.copy_with(&CopyRequest {
                src: region,
                src_offset: 0,
                dst: region2,
                dst_offset: 0,
                length,
                flags,
                async_status_index: idx,
            });
            expect_errno(&format!("{what}: COPY length {length:?}"), r, Errno::EINVAL)?;
        }
        Ok(())
    };
    let adc = CopyFlags::ASYNC_DMA_COMPLETE;
    let notify = CopyFlags::NOTIFY_FD;
    // No status array mapped.
    let bare = Device::open().ctx("open")?;
    for f in [
        MEMCPY,
        CopyFlags::DMA_THREAD,
        adc,
        MEMCPY | notify,
        adc | CopyFlags::DMA,
    ] {
        try_all(&bare, f, 0, &format!("{f} without a status array"))?;
    }
    // The driver sees the mapping, whose length is whole pages: an array
    // of 8 bytes has 4096 slots.  Map exactly one page.
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(PAGE).ctx("mmap 4096 slots")?;
    for f in [MEMCPY, CopyFlags::DMA_THREAD, adc, MEMCPY | notify] {
        for idx in [PAGE as u32, PAGE as u32 + 1, 65_536, 0x8000_0000, u32::MAX] {
            try_all(&dev, f, idx, &format!("{f} index {idx} of {PAGE}"))?;
        }
    }
    for f in [
        notify,
        notify | CopyFlags::PIN_LOCAL,
        notify | CopyFlags::DMA,
        notify | adc,
        notify | adc | MEMCPY,
        notify | adc | CopyFlags::DMA_THREAD,
    ] {
        try_all(&dev, f, 1, &format!("{f}"))?;
    }
    others_pending(&array, &[], "after refused requests")?;
    ensure!(
        local.snapshot().iter().all(|&b| b == SENTINEL),
        "a refused read wrote local memory"
    );
    ensure!(
        mem.snapshot().iter().all(|&b| b == 0x42),
        "a refused request wrote a region"
    );
    owner.destroy_region(region).ctx("DESTROY_REGION")?;
    owner.destroy_region(region2).ctx("DESTROY_REGION")
}

/// PINLOCAL on synchronous inline copies: observable only as success and
/// data (and, through the harness, a balanced FOLL_PIN count).
pub fn pinlocal_sync_copy() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let (_src, src) = source_region3(&owner)?;
    let wmem = Mem::new(REGION3.pages)?;
    // SAFETY: our mapping, only snapshotted, outlives the region.
    let dst = unsafe {
        owner.create_region_raw(&REGION3.iovecs(&wmem), Protection::WRITE, RegionFlags::NONE)
    }
    .ctx("CREATE_REGION")?;
    let array = dev.map_status_array(8).ctx("mmap 8 slots")?;
    let pin = CopyFlags::PIN_LOCAL;
    for layout in [LOCAL2_BIG, LOCAL2_SMALL] {
        for (off, len) in [
            (0u64, None),
            (4000, Some(9000)),
            (18_000, None),
            (1, Some(1)),
        ] {
            let local = Mem::new(layout.pages)?;
            local.fill(SENTINEL);
            let what = format!(
                "PINLOCAL read offset {off} length {len:?} into {} bytes",
                layout.total()
            );
            let req = InlineCopyRequest {
                local: &layout.iovecs(&local),
                write: false,
                cookie: src,
                offset: off,
                length: len,
                flags: pin,
                async_status_index: 3,
            };
            // SAFETY: our scratch mapping, only snapshotted.
            expect_success(&what, unsafe { dev.inline_copy(&req) })?;
            let n = expected_len(REGION3.total(), off, layout.total(), len);
            layout
                .verify(
                    &local.snapshot(),
                    |_| SENTINEL,
                    0,
                    n,
                    |k| pat(SEED_SRC, off + k),
                )
                .map_err(|e| format!("{what}: {e}"))?;
            // And back, into the writable region.
            wmem.fill(SENTINEL);
            layout.fill_with(&local, |i| pat(SEED_LOCAL, i));
            let req = InlineCopyRequest {
                write: true,
                cookie: dst,
                ..req
            };
            let what = format!(
                "PINLOCAL write offset {off} length {len:?} from {} bytes",
                layout.total()
            );
            // SAFETY: the driver only reads `local`.
            expect_success(&what, unsafe { dev.inline_copy(&req) })?;
            REGION3
                .verify(
                    &wmem.snapshot(),
                    |_| SENTINEL,
                    off,
                    n,
                    |k| pat(SEED_LOCAL, k),
                )
                .map_err(|e| format!("{what}: {e}"))?;
        }
    }
    others_pending(&array, &[], "synchronous PINLOCAL copies")?;
    owner.destroy_region(dst).ctx("DESTROY_REGION")?;
    owner.destroy_region(src).ctx("DESTROY_REGION")
}

/// INIT_SEND through the raw ioctl, as older MPICH does.
fn init_send(dev: &Device, iov: &[Iovec]) -> TestResult<Cookie> {
    let mut a = abi::knem_cmd_init_send_param {
        send_iovec_array: iov.as_ptr() as u64,
        send_iovec_nr: iov.len() as u32,
        flags: 0,
        send_cookie: 0,
    };
    // SAFETY: the struct of the command over the caller's read-only memory.
    unsafe {
        dev.raw_ioctl(
            cmd::INIT_SEND,
            (&mut a as *mut abi::knem_cmd_init_send_param).cast(),
        )
    }
    .map_err(|e| format!("INIT_SEND: {e:?}"))?;
    Ok(Cookie::from_raw(a.send_cookie))
}

/// Legacy INIT_ASYNC_RECV: inline read at offset 0 reported only in slot
/// `status_index`, with MEMCPYTHREAD and with no flag; the EINVAL cases do
/// not consume the single-use INIT_SEND region.
pub fn init_async_recv() -> TestResult {
    let sender = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let src = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&src, |i| pat(SEED_SRC, i));
    let siov = REGION3.iovecs(&src);
    let bare = Device::open().ctx("open third fd")?;
    let array = dev.map_status_array(PAGE).ctx("mmap 4096 slots")?;
    for (flags, idx) in [
        (MEMCPY, 3u32),
        (CopyFlags::NONE, 5),
        (CopyFlags::DMA_THREAD, 6),
    ] {
        let what = format!("INIT_ASYNC_RECV {flags} slot {idx}");
        let cookie = init_send(&sender, &siov)?;
        let local = Mem::new(LOCAL2_BIG.pages)?;
        local.fill(SENTINEL);
        let liov = LOCAL2_BIG.iovecs(&local);
        // Refusals first: they must not consume the region.
        // SAFETY (all three): our scratch mapping, only snapshotted.
        expect_errno(
            &format!("{what} without a status array"),
            unsafe { bare.init_async_recv(cookie, &liov, 0, flags) },
            Errno::EINVAL,
        )?;
        expect_errno(
            &format!("{what} with index 4096 of 4096"),
            unsafe { dev.init_async_recv(cookie, &liov, PAGE as u32, flags) },
            Errno::EINVAL,
        )?;
        unsafe { dev.init_async_recv(cookie, &liov, idx, flags) }.ctx(&what)?;
        wait_slot_success(&array, idx, &what)?;
        LOCAL2_BIG
            .verify(
                &local.snapshot(),
                |_| SENTINEL,
                0,
                REGION3.total(),
                |k| pat(SEED_SRC, k),
            )
            .map_err(|e| format!("{what}: {e}"))?;
        expect_errno(
            &format!("second {what} of the consumed region"),
            // SAFETY: as above.
            unsafe { dev.init_async_recv(cookie, &liov, 7, flags) },
            Errno::EINVAL,
        )?;
    }
    others_pending(&array, &[3, 5, 6], "after INIT_ASYNC_RECV")
}

/// Faults around asynchronous inline copies never crash: unmapped local
/// memory at submission is EFAULT (the driver pins it then); local memory
/// unmapped after submission still completes (pinned); the FAILED case is
/// ASYNCDMACOMPLETE (see asyncdmacomplete_without_dma).
pub fn async_local_fault_no_crash() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    const BIG: usize = 4 << 20;
    let smem = Mem::new(BIG / PAGE)?;
    smem.fill(0x99);
    let src = region_at(
        &owner,
        &smem,
        0,
        BIG,
        Protection::READ_WRITE,
        RegionFlags::NONE,
    )?;
    let array = dev.map_status_array(16).ctx("mmap 16 slots")?;
    let hole = unmapped_addr(4)?;
    let half = Mem::new(4)?;
    half.punch(1, 3)?;
    for (name, iov) in [
        ("unmapped", Iovec::from_raw(hole, 4 * PAGE as u64)),
        (
            "partly unmapped",
            Iovec::from_raw(half.addr(0), 4 * PAGE as u64),
        ),
    ] {
        for write in [false, true] {
            for flags in [MEMCPY, CopyFlags::DMA_THREAD] {
                let req = InlineCopyRequest {
                    local: &[iov],
                    write,
                    cookie: src,
                    offset: 0,
                    length: None,
                    flags,
                    async_status_index: 1,
                };
                // SAFETY: the local memory is (partly) unmapped; the mapped
                // page is our scratch.
                let r = unsafe { dev.inline_copy(&req) };
                expect_errno(
                    &format!(
                        "{flags} {} over {name} local memory",
                        if write { "write" } else { "read" }
                    ),
                    r,
                    Errno::EFAULT,
                )?;
            }
        }
    }
    others_pending(&array, &[], "after EFAULT submissions")?;
    // Unmapped right after submission: the pinned pages keep the copy safe.
    for (k, write) in [false, true, false].into_iter().enumerate() {
        let local = Mem::new(BIG / PAGE)?;
        local.fill(0x11);
        let idx = 4 + k as u32;
        let iov = [Iovec::from_raw(local.addr(0), BIG as u64)];
        let what = format!(
            "async {} of 4 MiB, local memory unmapped after submission",
            if write { "write" } else { "read" }
        );
        let req = InlineCopyRequest {
            local: &iov,
            write,
            cookie: src,
            offset: 0,
            length: None,
            flags: MEMCPY,
            async_status_index: idx,
        };
        // SAFETY: the memory is ours and is unmapped right away; the
        // driver holds its own pins on the pages.
        expect_pending(&what, unsafe { dev.inline_copy(&req) })?;
        drop(local);
        wait_slot_success(&array, idx, &what)?;
    }
    // A write of 0x11 pages landed in the region.
    check_bytes(
        "region after the async write",
        &smem.read(BIG - 64, 64),
        |_| 0x11,
    )?;
    owner.destroy_region(src).ctx("DESTROY_REGION")
}

/// Close fds with asynchronous copies queued: the regions' owner first
/// (the queued copies hold references), then the submitter, then a
/// process killed with copies pending.  The harness checks that contexts,
/// regions, pinned pages and FOLL_PIN counts return to baseline.
pub fn close_with_pending_async() -> TestResult {
    const SZ: usize = 2 << 20;
    let smem = Mem::new(SZ / PAGE)?;
    smem.fill(0x5c);
    let dmem = Mem::new(SZ / PAGE)?;
    let local = Mem::new(SZ / PAGE)?;
    // 1. Owner of the source closes while copies from it are queued.
    {
        let owner = Device::open().ctx("open")?;
        let dev = Device::open().ctx("open second fd")?;
        let src = region_at(&owner, &smem, 0, SZ, Protection::READ, RegionFlags::NONE)?;
        let dst = region_at(&dev, &dmem, 0, SZ, Protection::WRITE, RegionFlags::NONE)?;
        let array = dev.map_status_array(64).ctx("mmap 64 slots")?;
        for k in 0..16u32 {
            expect_pending(
                &format!("COPY {k}"),
                dev.copy_async(src, 0, dst, 0, None, k, MEMCPY),
            )?;
        }
        drop(owner);
        for k in 0..16u32 {
            let st = wait_slot(
                &array,
                k,
                &format!("COPY {k} after the source's owner closed"),
            )?;
            ensure!(
                st == Status::Success || st == Status::Failed,
                "COPY {k} after the source's owner closed ended {st}"
            );
        }
    }
    // 2. Close the submitting fd (and unmap its array) with copies queued.
    {
        let owner = Device::open().ctx("open")?;
        let dev = Device::open().ctx("open second fd")?;
        let src = region_at(&owner, &smem, 0, SZ, Protection::READ, RegionFlags::NONE)?;
        let dst = region_at(&dev, &dmem, 0, SZ, Protection::WRITE, RegionFlags::NONE)?;
        let array = dev.map_status_array(64).ctx("mmap 64 slots")?;
        for k in 0..24u32 {
            let r = if k % 2 == 0 {
                dev.copy_async(src, 0, dst, 0, None, k, MEMCPY)
            } else {
                let iov = [Iovec::from_raw(local.addr(0), SZ as u64)];
                // SAFETY: our scratch mapping, which outlives the fd.
                unsafe { dev.read_into_async(src, 0, &iov, None, k, CopyFlags::DMA_THREAD) }
            };
            expect_pending(&format!("request {k}"), r)?;
        }
        drop(array);
        drop(dev);
        drop(owner);
    }
    // 3. A process dies (SIGKILL) with copies queued.
    let mut peer = spawn_peer(|chan| {
        let owner = Device::open().ctx("open")?;
        let dev = Device::open().ctx("open second fd")?;
        let src = region_at(&owner, &smem, 0, SZ, Protection::READ, RegionFlags::NONE)?;
        let dst = region_at(&dev, &dmem, 0, SZ, Protection::WRITE, RegionFlags::NONE)?;
        let _array = dev.map_status_array(64).ctx("mmap 64 slots")?;
        for k in 0..24u32 {
            expect_pending(
                &format!("COPY {k}"),
                dev.copy_async(src, 0, dst, 0, None, k, MEMCPY | CopyFlags::NOTIFY_FD),
            )?;
        }
        chan.send(1)?;
        std::thread::sleep(Duration::from_secs(60));
        Ok(())
    })?;
    ensure!(peer.recv()? == 1, "peer protocol");
    drop(peer); // SIGKILL and reap
    Ok(())
}

/// BIND_OFFLOAD: CUSTOM, CURRENT and CURRENT_REVERSED before the status
/// array is mapped are accepted; after, EBUSY; undefined or contradictory
/// flags EINVAL; an unreadable mask EFAULT; async copies work on a bound
/// thread.
pub fn bind_offload_rules() -> TestResult {
    // Run on CPU 0 only, so CURRENT_REVERSED is not empty on 2 CPUs.
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    if ncpu >= 2 {
        // SAFETY: a zeroed cpu_set_t with one bit set, for ourselves.
        unsafe {
            let mut set: nix::libc::cpu_set_t = std::mem::zeroed();
            nix::libc::CPU_SET(0, &mut set);
            nix::libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
        }
    }
    let dev = Device::open().ctx("open")?;
    dev.bind_offload(&BindOffload::Current)
        .ctx("BIND_OFFLOAD CURRENT")?;
    if ncpu >= 2 {
        dev.bind_offload(&BindOffload::CurrentReversed)
            .ctx("BIND_OFFLOAD CURRENT_REVERSED (running on CPU 0 only)")?;
    }
    dev.bind_offload(&BindOffload::Custom(CpuMask::from_cpus([0])))
        .ctx("BIND_OFFLOAD CUSTOM {0}")?;
    let all = CpuMask::from_cpus(0..ncpu);
    dev.bind_offload(&BindOffload::Custom(all.clone()))
        .ctx("BIND_OFFLOAD CUSTOM all CPUs")?;
    let c = abi::KNEM_BIND_FLAG_CUSTOM;
    let cur = abi::KNEM_BIND_FLAG_CURRENT;
    let rev = abi::KNEM_BIND_FLAG_CURRENT_REVERSED;
    let m = all.as_bytes();
    for flags in [
        1u32 << 3,
        1 << 31,
        0xffff_fff8,
        cur | rev,
        c | cur,
        c | rev,
        c | cur | rev,
        cur | (1 << 8),
    ] {
        expect_errno(
            &format!("BIND_OFFLOAD flags {flags:#x}"),
            dev.bind_offload_raw(flags, m.len() as u32, m.as_ptr() as u64),
            Errno::EINVAL,
        )?;
    }
    let hole = unmapped_addr(1)?;
    expect_errno(
        "BIND_OFFLOAD CUSTOM with an unmapped mask",
        dev.bind_offload_raw(c, 8, hole),
        Errno::EFAULT,
    )?;
    // Mapping ends binding, as in KNEM.
    let array = dev.map_status_array(4).ctx("mmap 4 slots")?;
    for how in [
        BindOffload::Current,
        BindOffload::CurrentReversed,
        BindOffload::Custom(CpuMask::from_cpus([0])),
    ] {
        expect_errno(
            &format!("BIND_OFFLOAD {how:?} after mmap"),
            dev.bind_offload(&how),
            Errno::EBUSY,
        )?;
    }
    // Another fd is not bound yet.
    let other = Device::open().ctx("open second fd")?;
    other
        .bind_offload(&BindOffload::Custom(CpuMask::from_cpus([ncpu - 1])))
        .ctx("BIND_OFFLOAD on another fd")?;
    // The bound thread copies.
    let mem = Mem::new(2)?;
    mem.write(
        0,
        &(0..4096u64).map(|i| pat(SEED_SRC, i)).collect::<Vec<_>>(),
    );
    let a = region_at(&dev, &mem, 0, 4096, Protection::READ, RegionFlags::NONE)?;
    let b = region_at(&dev, &mem, 4096, 4096, Protection::WRITE, RegionFlags::NONE)?;
    expect_pending(
        "COPY on the bound thread",
        dev.copy_async(a, 0, b, 0, None, 2, MEMCPY),
    )?;
    wait_slot_success(&array, 2, "COPY on the bound thread")?;
    check_bytes("COPY on the bound thread", &mem.read(4096, 4096), |i| {
        pat(SEED_SRC, i as u64)
    })?;
    let other_array = other.map_status_array(4).ctx("mmap on the other fd")?;
    expect_pending(
        "COPY on the other bound thread",
        other.copy_async(a, 1, b, 0, Some(10), 0, MEMCPY),
    )?;
    wait_slot_success(&other_array, 0, "COPY on the other bound thread")?;
    dev.destroy_region(a).ctx("DESTROY_REGION")?;
    dev.destroy_region(b).ctx("DESTROY_REGION")
}

/// Bytes copied on the offload thread are counted in `bytes_async`,
/// exactly (clamped lengths included), and not in the synchronous
/// counters; ASYNCDMACOMPLETE without DMA copies at once and counts as a
/// synchronous copy.
pub fn stats_async_byte_counter() -> TestResult {
    let names = [
        "bytes_inline_read",
        "bytes_inline_write",
        "bytes_region_copy",
        "bytes_async",
    ];
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(4)?;
    let a = region_at(
        &dev,
        &mem,
        0,
        10_000,
        Protection::READ_WRITE,
        RegionFlags::NONE,
    )?;
    let b = region_at(
        &dev,
        &mem,
        10_000,
        5_000,
        Protection::READ_WRITE,
        RegionFlags::NONE,
    )?;
    let array = dev.map_status_array(PAGE).ctx("mmap")?;
    let local = Mem::new(1)?;
    let l3000 = [Iovec::from_raw(local.addr(0), 3000)];
    let before = crate::stats::counters(&names)?;
    // SAFETY (all): our scratch mappings, alive until the slots are done.
    let reqs: [(&str, knem::Result<Status>); 6] = unsafe {
        [
            (
                "read 1000 (region end)",
                dev.read_into_async(a, 9_000, &l3000, None, 0, MEMCPY),
            ),
            (
                "read 123",
                dev.read_into_async(a, 0, &l3000, Some(123), 1, CopyFlags::DMA_THREAD),
            ),
            (
                "write 777",
                dev.write_from_async(b, 0, &l3000, Some(777), 2, MEMCPY),
            ),
            (
                "write 10 (region end)",
                dev.write_from_async(b, 4_990, &l3000, None, 3, MEMCPY),
            ),
            ("COPY 5000", dev.copy_async(a, 0, b, 0, None, 4, MEMCPY)),
            (
                "COPY 42",
                dev.copy_async(a, 500, b, 100, Some(42), 5, MEMCPY),
            ),
        ]
    };
    for (k, (what, r)) in reqs.into_iter().enumerate() {
        expect_pending(what, r)?;
        wait_slot_success(&array, k as u32, what)?;
    }
    let mid = crate::stats::counters(&names)?;
    let got: Vec<u64> = mid.iter().zip(&before).map(|(x, y)| x - y).collect();
    let want = [0u64, 0, 0, 1000 + 123 + 777 + 10 + 5000 + 42];
    ensure!(
        got == want,
        "after thread copies, deltas of {names:?}: {got:?}, expected {want:?}"
    );
    let adc = CopyFlags::ASYNC_DMA_COMPLETE;
    // SAFETY: as above.
    let r = unsafe { dev.read_into_async(a, 0, &l3000, Some(300), 6, adc) };
    expect_success("ASYNCDMACOMPLETE read 300", r)?;
    expect_success(
        "ASYNCDMACOMPLETE COPY 64",
        dev.copy_async(a, 0, b, 0, Some(64), 7, adc),
    )?;
    let after = crate::stats::counters(&names)?;
    let got: Vec<u64> = after.iter().zip(&mid).map(|(x, y)| x - y).collect();
    let want = [300u64, 0, 64, 0];
    ensure!(
        got == want,
        "after ASYNCDMACOMPLETE copies, deltas of {names:?}: {got:?}, expected {want:?}"
    );
    dev.destroy_region(a).ctx("DESTROY_REGION")?;
    dev.destroy_region(b).ctx("DESTROY_REGION")
}
