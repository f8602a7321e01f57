//! Issue 7: copies offloaded to a dmaengine channel.  The channel is the
//! test-only software provider of tests/dma-provider (knem_dma_test.ko):
//! tests that need it load it from /opt when the VM run added it, and pass
//! without doing anything when it is absent (the plain suite run).

use crate::ensure;
use crate::util::*;
use knem::{
    Cookie, CopyFlags, CopyRequest, Device, InlineCopyRequest, Iovec, Protection, RegionFlags,
    Status, StatusArray,
};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const PROVIDER: &str = "knem_dma_test";
const PROVIDER_KO: &str = "/opt/knem_dma_test.ko";
const SEED: u8 = 0x5d;
const SENTINEL: u8 = 0xee;

fn provider_loaded() -> bool {
    Path::new(&format!("/sys/module/{PROVIDER}")).exists()
}

fn param_path(name: &str) -> String {
    format!("/sys/module/{PROVIDER}/parameters/{name}")
}

fn provider_param(name: &str) -> TestResult<u64> {
    let s = std::fs::read_to_string(param_path(name)).ctx(name)?;
    s.trim().parse().map_err(|e| format!("{name}: {e}"))
}

fn set_provider_param(name: &str, v: u64) -> TestResult {
    std::fs::write(param_path(name), format!("{v}\n")).ctx(name)
}

fn sh(args: &[&str]) -> TestResult<bool> {
    let st = Command::new(args[0])
        .args(&args[1..])
        .status()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    Ok(st.success())
}

/// Loads the provider if the VM run added it; false when it cannot be had.
fn ensure_provider() -> TestResult<bool> {
    if provider_loaded() {
        return Ok(true);
    }
    if !Path::new(PROVIDER_KO).exists() {
        eprintln!("note: no {PROVIDER_KO}: DMA engine tests skipped");
        return Ok(false);
    }
    ensure!(sh(&["insmod", PROVIDER_KO])?, "insmod {PROVIDER_KO} failed");
    Ok(true)
}

/// Puts the provider's knobs back to their defaults when dropped.
struct Knobs;

impl Drop for Knobs {
    fn drop(&mut self) {
        let _ = set_provider_param("delay_us", 0);
        let _ = set_provider_param("fail_every", 0);
    }
}

/// What a request should end as, and how it reports.
fn flag_cases() -> Vec<CopyFlags> {
    let dma = CopyFlags::DMA;
    vec![
        dma,
        dma | CopyFlags::ASYNC_DMA_COMPLETE,
        dma | CopyFlags::DMA_THREAD,
        dma | CopyFlags::DMA_THREAD | CopyFlags::ASYNC_DMA_COMPLETE,
        dma | CopyFlags::DMA_THREAD | CopyFlags::NOTIFY_FD,
        dma | CopyFlags::MEMCPY_THREAD | CopyFlags::NOTIFY_FD,
    ]
}

/// Completes a request: the status it returned, or for an asynchronous
/// one (PENDING), its slot (and its notification with NOTIFY_FD).
fn complete(
    dev: &Device,
    array: &StatusArray,
    flags: CopyFlags,
    idx: u32,
    r: knem::Result<Status>,
    what: &str,
) -> TestResult<Status> {
    let st = r.ctx(what)?;
    let asynchronous =
        flags.intersects(CopyFlags::ANY_THREAD) || flags.contains(CopyFlags::ASYNC_DMA_COMPLETE);
    if !asynchronous {
        ensure!(st != Status::Pending, "{what}: synchronous request PENDING");
        return Ok(st);
    }
    ensure!(st == Status::Pending, "{what}: expected PENDING, got {st}");
    let st = wait_slot(array, idx, what)?;
    if flags.contains(CopyFlags::NOTIFY_FD) {
        let mut n = [0u32; 1];
        dev.read_notifications(&mut n).ctx("read notification")?;
        ensure!(n[0] == idx, "{what}: notified {} instead of {idx}", n[0]);
    }
    Ok(st)
}

fn region3(dev: &Device, mem: &Mem, prot: Protection) -> TestResult<Cookie> {
    // SAFETY: the caller's mapping, only snapshotted, outlives the region.
    unsafe { dev.create_region_raw(&REGION3.iovecs(mem), prot, RegionFlags::NONE) }
        .ctx("CREATE_REGION")
}

/// GET_INFO follows the engine: the feature bit and no ignored DMA flag
/// with a provider, the reverse without; DMA copies succeed either way.
pub fn info_follows_engine() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let info = dev.info().ctx("GET_INFO")?;
    let want = provider_loaded();
    ensure!(
        info.has_dma() == want,
        "feature DMA {} with the provider {}",
        info.has_dma(),
        if want { "loaded" } else { "absent" }
    );
    ensure!(
        (info.ignored_flags & knem::abi::KNEM_FLAG_DMA != 0) != want,
        "ignored_flags {:#x}",
        info.ignored_flags
    );
    let src = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&src, |i| pat(SEED, i));
    let k = region3(&dev, &src, Protection::READ)?;
    let mut buf = vec![0u8; 18_000];
    let r = dev.copy_with(&CopyRequest {
        src: k,
        src_offset: 0,
        dst: k,
        dst_offset: 0,
        length: Some(0),
        flags: CopyFlags::DMA,
        async_status_index: 0,
    });
    expect_errno("COPY DMA into a read-only region", r, knem::Errno::EACCES)?;
    let local = [Iovec::from_mut_slice(&mut buf)];
    let req = InlineCopyRequest {
        local: &local,
        write: false,
        cookie: k,
        offset: 3,
        length: None,
        flags: CopyFlags::DMA,
        async_status_index: 0,
    };
    // SAFETY: a synchronous read into our own buffer.
    expect_success("INLINE_COPY DMA", unsafe { dev.inline_copy(&req) })?;
    check_bytes("INLINE_COPY DMA data", &buf, |i| pat(SEED, 3 + i as u64))
}

/// Every flag combination on inline reads, inline writes and region
/// copies over multi-segment unaligned layouts; data checked, and the
/// provider really ran descriptors.
pub fn engine_matrix() -> TestResult {
    if !ensure_provider()? {
        return Ok(());
    }
    let _k = Knobs;
    let owner = Device::open().ctx("open")?;
    let dev = Device::open().ctx("open second fd")?;
    let info = dev.info().ctx("GET_INFO")?;
    ensure!(info.has_dma(), "provider loaded but no DMA feature");
    let array = dev.map_status_array(4096).ctx("mmap")?;
    let src = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&src, |i| pat(SEED, i));
    let ksrc = region3(&owner, &src, Protection::READ)?;
    let dst = Mem::new(REGION3.pages)?;
    let kdst = region3(&owner, &dst, Protection::WRITE)?;
    let local = Mem::new(LOCAL2_BIG.pages)?;
    let done0 = provider_param("done")?;
    let mut idx = 1u32;
    for flags in flag_cases() {
        for &(off, len) in &[(0u64, None), (4099, Some(9001u64)), (1, Some(1))] {
            // Inline read.
            local.fill(SENTINEL);
            let what = format!("read {flags} off {off} len {len:?}");
            let iov = LOCAL2_BIG.iovecs(&local);
            let req = InlineCopyRequest {
                local: &iov,
                write: false,
                cookie: ksrc,
                offset: off,
                length: len,
                flags,
                async_status_index: idx,
            };
            // SAFETY: our scratch mapping, only snapshotted after the end.
            let r = unsafe { dev.inline_copy(&req) };
            let st = complete(&dev, &array, flags, idx, r, &what)?;
            ensure!(st == Status::Success, "{what}: {st}");
            let n = expected_len(REGION3.total(), off, LOCAL2_BIG.total(), len);
            LOCAL2_BIG
                .verify(
                    &local.snapshot(),
                    |_| SENTINEL,
                    0,
                    n,
                    |k| pat(SEED, off + k),
                )
                .map_err(|e| format!("{what}: {e}"))?;
            idx += 1;

            // Inline write.
            dst.fill(SENTINEL);
            LOCAL2_BIG.fill_with(&local, |i| pat(SEED ^ 0xff, i));
            let what = format!("write {flags} off {off} len {len:?}");
            let req = InlineCopyRequest {
                write: true,
                cookie: kdst,
                async_status_index: idx,
                ..req
            };
            // SAFETY: the driver only reads our mapping.
            let r = unsafe { dev.inline_copy(&req) };
            let st = complete(&dev, &array, flags, idx, r, &what)?;
            ensure!(st == Status::Success, "{what}: {st}");
            let n = expected_len(REGION3.total(), off, LOCAL2_BIG.total(), len);
            REGION3
                .verify(
                    &dst.snapshot(),
                    |_| SENTINEL,
                    off,
                    n,
                    |k| pat(SEED ^ 0xff, k),
                )
                .map_err(|e| format!("{what}: {e}"))?;
            idx += 1;

            // Region to region, same offset on both sides.
            dst.fill(SENTINEL);
            let what = format!("copy {flags} off {off} len {len:?}");
            let r = dev.copy_with(&CopyRequest {
                src: ksrc,
                src_offset: off,
                dst: kdst,
                dst_offset: off,
                length: len,
                flags,
                async_status_index: idx,
            });
            let st = complete(&dev, &array, flags, idx, r, &what)?;
            ensure!(st == Status::Success, "{what}: {st}");
            let n = expected_len(REGION3.total(), off, REGION3.total(), len);
            REGION3
                .verify(
                    &dst.snapshot(),
                    |_| SENTINEL,
                    off,
                    n,
                    |k| pat(SEED, off + k),
                )
                .map_err(|e| format!("{what}: {e}"))?;
            idx += 1;
        }
    }
    let ran = provider_param("done")? - done0;
    ensure!(ran >= 100, "only {ran} descriptors ran on the provider");
    Ok(())
}

/// Injected descriptor failures end in FAILED, synchronously and in the
/// slot, and leak nothing (the harness checks pins and counters).
pub fn engine_failures() -> TestResult {
    if !ensure_provider()? {
        return Ok(());
    }
    let _k = Knobs;
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(64).ctx("mmap")?;
    let src = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&src, |i| pat(SEED, i));
    let ksrc = region3(&dev, &src, Protection::READ)?;
    let dst = Mem::new(REGION3.pages)?;
    let kdst = region3(&dev, &dst, Protection::WRITE)?;
    set_provider_param("fail_every", 2)?;
    let failed0 = provider_param("failed")?;
    for (k, flags) in flag_cases().into_iter().enumerate() {
        let idx = k as u32 + 1;
        let what = format!("copy {flags} with fail_every=2");
        let r = dev.copy_with(&CopyRequest {
            src: ksrc,
            src_offset: 0,
            dst: kdst,
            dst_offset: 0,
            length: None,
            flags,
            async_status_index: idx,
        });
        let st = complete(&dev, &array, flags, idx, r, &what)?;
        ensure!(st == Status::Failed, "{what}: {st}, expected FAILED");
    }
    ensure!(
        provider_param("failed")? > failed0,
        "no failure was injected"
    );
    set_provider_param("fail_every", 0)?;
    let r = dev.copy_with(&CopyRequest {
        src: ksrc,
        src_offset: 0,
        dst: kdst,
        dst_offset: 0,
        length: None,
        flags: CopyFlags::DMA,
        async_status_index: 0,
    });
    expect_success("COPY DMA after failures stopped", r)
}

/// A process dies (SIGKILL) with slow DMA in flight, synchronous and on
/// its thread: the harness then checks that every pin and counter is back.
pub fn engine_sigkill_in_flight() -> TestResult {
    if !ensure_provider()? {
        return Ok(());
    }
    let _k = Knobs;
    set_provider_param("delay_us", 2000)?;
    const SZ: usize = 1 << 20;
    // 0: synchronous, 1: DMATHREAD, 2: ASYNCDMACOMPLETE (engine callback).
    for mode in 0..3u32 {
        let mut peer = spawn_peer(move |chan| {
            let dev = Device::open().ctx("open")?;
            let smem = Mem::new(SZ / PAGE)?;
            smem.fill(0x11);
            let dmem = Mem::new(SZ / PAGE)?;
            let src = region_at(&dev, &smem, 0, SZ, Protection::READ, RegionFlags::NONE)?;
            let dst = region_at(&dev, &dmem, 0, SZ, Protection::WRITE, RegionFlags::NONE)?;
            let _array = dev.map_status_array(64).ctx("mmap")?;
            if mode == 0 {
                chan.send(1)?;
                let _ = dev.copy_with(&CopyRequest {
                    src,
                    src_offset: 0,
                    dst,
                    dst_offset: 0,
                    length: None,
                    flags: CopyFlags::DMA,
                    async_status_index: 0,
                });
            } else {
                let flags = if mode == 1 {
                    CopyFlags::DMA | CopyFlags::DMA_THREAD
                } else {
                    CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE
                };
                for k in 0..4u32 {
                    expect_pending("async DMA", dev.copy_async(src, 0, dst, 0, None, k, flags))?;
                }
                chan.send(1)?;
            }
            std::thread::sleep(Duration::from_secs(60));
            Ok(())
        })?;
        ensure!(peer.recv()? == 1, "peer protocol");
        std::thread::sleep(Duration::from_millis(150));
        drop(peer); // SIGKILL and reap
    }
    Ok(())
}

/// The provider unloaded while idle: the feature bit clears, DMA copies
/// fall back to the CPU; loaded again, it is found again.
pub fn engine_provider_unload() -> TestResult {
    if !ensure_provider()? {
        return Ok(());
    }
    let dev = Device::open().ctx("open")?;
    ensure!(
        dev.info().ctx("GET_INFO")?.has_dma(),
        "no DMA with the provider"
    );
    // knem lets an idle channel go after a short while: rmmod then works.
    let start = Instant::now();
    loop {
        if sh(&["rmmod", PROVIDER])? {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(10),
            "rmmod {PROVIDER} kept failing: knem holds the idle channel"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let info = dev.info().ctx("GET_INFO after rmmod")?;
    ensure!(!info.has_dma(), "DMA feature still set after rmmod");
    ensure!(
        info.ignored_flags & knem::abi::KNEM_FLAG_DMA != 0,
        "DMA not ignored after rmmod"
    );
    let src = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&src, |i| pat(SEED, i));
    let ksrc = region3(&dev, &src, Protection::READ)?;
    let mut buf = vec![SENTINEL; REGION3.total() as usize];
    let local = [Iovec::from_mut_slice(&mut buf)];
    let req = InlineCopyRequest {
        local: &local,
        write: false,
        cookie: ksrc,
        offset: 0,
        length: None,
        flags: CopyFlags::DMA,
        async_status_index: 0,
    };
    // SAFETY: a synchronous read into our own buffer.
    expect_success("INLINE_COPY DMA without provider", unsafe {
        dev.inline_copy(&req)
    })?;
    check_bytes("CPU fallback data", &buf, |i| pat(SEED, i as u64))?;
    ensure!(sh(&["insmod", PROVIDER_KO])?, "insmod again failed");
    ensure!(
        dev.info().ctx("GET_INFO after insmod")?.has_dma(),
        "provider loaded after knem not found"
    );
    Ok(())
}

/// Open MPI's old sm BTL with an engine: DMA | ASYNCDMACOMPLETE reads of
/// one fd, completed by the engine's callback, must fill their slots in
/// submission order (a ring walker stops at the first PENDING); slow
/// descriptors make overtaking visible if it could happen.
pub fn engine_asyncdmacomplete_order() -> TestResult {
    if !ensure_provider()? {
        return Ok(());
    }
    let _k = Knobs;
    set_provider_param("delay_us", 100)?;
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(256).ctx("mmap")?;
    let src = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&src, |i| pat(SEED, i));
    let k = region3(&dev, &src, Protection::READ)?;
    const N: usize = 64;
    let locals: Vec<Mem> = (0..N).map(|_| Mem::new(5)).collect::<TestResult<_>>()?;
    let flags = CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE;
    for (i, l) in locals.iter().enumerate() {
        // Small and large requests alternate: a small one all on the CPU
        // (under dma_min) must still wait for the large one before it.
        let len = if i % 2 == 0 { 5 * PAGE as u64 - 3 } else { 100 };
        let iov = [Iovec::from_raw(l.addr(3), len)];
        // SAFETY: our scratch mapping, only snapshotted after its slot.
        let r = unsafe { dev.read_into_async(k, 7, &iov, None, i as u32, flags) };
        expect_pending(&format!("request {i}"), r)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Read from the last slot down: with in-order completion, a slot
        // seen done proves every earlier one done by the time it is read.
        // Reading upwards would race with completions between two reads.
        let mut states: Vec<Status> = (0..N).rev().map(|i| array.get(i).unwrap()).collect();
        states.reverse();
        let first_pending = states
            .iter()
            .position(|s| *s == Status::Pending)
            .unwrap_or(N);
        if let Some(j) = states[first_pending..]
            .iter()
            .position(|s| *s != Status::Pending)
        {
            return Err(format!(
                "slot {} done while slot {first_pending} is still PENDING",
                first_pending + j
            ));
        }
        if first_pending == N {
            break;
        }
        ensure!(Instant::now() < deadline, "slots still PENDING after 60 s");
        std::thread::yield_now();
    }
    for (i, l) in locals.iter().enumerate() {
        ensure!(
            array.get(i) == Some(Status::Success),
            "slot {i} not SUCCESS"
        );
        // The region holds REGION3.total() - 7 bytes from offset 7.
        let len = if i % 2 == 0 { 5 * PAGE - 3 } else { 100 };
        let len = len.min(REGION3.total() as usize - 7);
        check_bytes(&format!("request {i}"), &l.read(3, len), |b| {
            pat(SEED, 7 + b as u64)
        })?;
    }
    Ok(())
}
