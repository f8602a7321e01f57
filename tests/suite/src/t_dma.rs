//! Issue 7: copies offloaded to a dmaengine channel.  The channel is the
//! test-only software provider of tests/dma-provider (knem_dma_test.ko):
//! tests that need it load it from /opt when the VM run added it, and are
//! reported as skipped when it is absent (the plain suite run).

use crate::ensure;
use crate::t_offload::TestCgroup;
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

/// Why a test that needs the provider skips when the run did not add it
/// (`knem-tests --no-provider` lets exactly this skip stay a skip;
/// tests/vm/full-suite.sh counts these skips in its first pass).
pub const PROVIDER_SKIP: &str = "no /opt/knem_dma_test.ko (tests/dma-provider/run-vm.sh adds it)";
const SEED: u8 = 0x5d;
const SENTINEL: u8 = 0xee;

fn provider_loaded() -> bool {
    Path::new(&format!("/sys/module/{PROVIDER}")).exists()
}

fn param_path(name: &str) -> String {
    format!("/sys/module/{PROVIDER}/parameters/{name}")
}

pub(crate) fn provider_param(name: &str) -> TestResult<u64> {
    let s = std::fs::read_to_string(param_path(name)).ctx(name)?;
    s.trim().parse().map_err(|e| format!("{name}: {e}"))
}

pub(crate) fn set_provider_param(name: &str, v: u64) -> TestResult {
    std::fs::write(param_path(name), format!("{v}\n")).ctx(name)
}

fn sh(args: &[&str]) -> TestResult<bool> {
    let st = Command::new(args[0])
        .args(&args[1..])
        .status()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    Ok(st.success())
}

/// Loads the provider if the VM run added it; a skip when the run did not.
pub(crate) fn ensure_provider() -> TestResult {
    if provider_loaded() {
        return Ok(());
    }
    if !Path::new(PROVIDER_KO).exists() {
        return Err(skip(PROVIDER_SKIP));
    }
    ensure!(sh(&["insmod", PROVIDER_KO])?, "insmod {PROVIDER_KO} failed");
    Ok(())
}

/// One page holding [`SEED`]'s pattern.
pub(crate) fn seed_page() -> TestResult<Mem> {
    let m = Mem::new(1)?;
    m.write(
        0,
        &(0..PAGE as u64).map(|i| pat(SEED, i)).collect::<Vec<_>>(),
    );
    Ok(m)
}

/// Puts the provider's knobs back to their defaults when dropped.
pub(crate) struct Knobs;

impl Drop for Knobs {
    fn drop(&mut self) {
        let _ = set_provider_param("delay_us", 0);
        let _ = set_provider_param("fail_every", 0);
        let _ = set_provider_param("stall", 0);
        let _ = set_provider_param("lifo", 0);
    }
}

pub(crate) const KNEM_PARAMS: &str = "/sys/module/knem/parameters";

/// A knem module parameter, or None when the module has no such one.
pub(crate) fn knem_param(name: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("{KNEM_PARAMS}/{name}")).ok()?;
    s.trim().parse().ok()
}

/// A knem module parameter set while this lives, and back to what it was
/// after.  A module without the parameter is left as it is (`was` None).
pub(crate) struct KnemParam {
    name: &'static str,
    was: Option<u64>,
}

impl KnemParam {
    pub(crate) fn set(name: &'static str, v: u64) -> KnemParam {
        let mut was = knem_param(name);
        if was.is_some()
            && std::fs::write(format!("{KNEM_PARAMS}/{name}"), format!("{v}\n")).is_err()
        {
            was = None;
        }
        if was.is_none() {
            eprintln!("note: knem has no {name} to set");
        }
        KnemParam { name, was }
    }
}

impl Drop for KnemParam {
    fn drop(&mut self) {
        if let Some(v) = self.was {
            let _ = std::fs::write(format!("{KNEM_PARAMS}/{}", self.name), format!("{v}\n"));
        }
    }
}

/// Sets knem's dma_timeout_ms while it lives, back to what it was after.
/// A module without the parameter has the fixed 10 s.
pub(crate) struct DmaTimeout {
    _param: KnemParam,
    ms: u64,
}

impl DmaTimeout {
    pub(crate) fn set(ms: u64) -> DmaTimeout {
        let param = KnemParam::set("dma_timeout_ms", ms);
        let ms = if param.was.is_some() { ms } else { 10_000 };
        DmaTimeout { _param: param, ms }
    }
}

/// Waits up to `secs` for `f` to hold.
pub(crate) fn wait_until(secs: u64, mut f: impl FnMut() -> TestResult<bool>) -> TestResult<bool> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if f()? {
            return Ok(true);
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(20));
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
    ensure_provider()?;
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
    ensure_provider()?;
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
    ensure_provider()?;
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
    ensure_provider()?;
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
    // knem remembers "no engine" for a second before it looks again.
    ensure!(
        wait_until(3, || Ok(dev.info().ctx("GET_INFO after insmod")?.has_dma()))?,
        "provider loaded after knem not found within 3 s"
    );
    Ok(())
}

/// Open MPI's old sm BTL with an engine: DMA | ASYNCDMACOMPLETE reads of
/// one fd, completed by the engine's callback, must fill their slots in
/// submission order (a ring walker stops at the first PENDING); slow
/// descriptors make overtaking visible if it could happen.
pub fn engine_asyncdmacomplete_order() -> TestResult {
    ensure_provider()?;
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

/// The one batch a timeout abandoned is counted while the provider parks
/// its descriptor (`when` says at which point); once the stall is
/// released the engine calls back and the batch is freed.
fn reap_abandoned_batch(when: &str) -> TestResult {
    ensure!(
        knem_param("dma_abandoned") == Some(1),
        "dma_abandoned is {:?} {when}, expected 1",
        knem_param("dma_abandoned")
    );
    release_stall()?;
    Ok(())
}

/// Lets the provider run what it parked, and waits (5 s at most) for the
/// engine to call back every abandoned batch, so that all are reaped.
fn release_stall() -> TestResult {
    set_provider_param("stall", 0)?;
    ensure!(
        wait_until(5, || Ok(
            provider_param("stalled")? == 0 && knem_param("dma_abandoned") == Some(0)
        ))?,
        "after the stall: {} parked, dma_abandoned {:?}",
        provider_param("stalled")?,
        knem_param("dma_abandoned")
    );
    Ok(())
}

/// A fd that copies one region to another through the engine in a loop,
/// every copy's bytes checked: the other user of the shared channel in the
/// timeout tests.
struct DmaLoop {
    dev: Device,
    smem: Mem,
    dmem: Mem,
    src: Cookie,
    dst: Cookie,
    pages: usize,
}

impl DmaLoop {
    fn new(pages: usize) -> TestResult<Self> {
        let dev = Device::open().ctx("open B")?;
        let (smem, dmem) = (Mem::new(pages)?, Mem::new(pages)?);
        let len = pages * PAGE;
        let src = region_at(&dev, &smem, 0, len, Protection::READ, RegionFlags::NONE)?;
        let dst = region_at(&dev, &dmem, 0, len, Protection::WRITE, RegionFlags::NONE)?;
        Ok(DmaLoop {
            dev,
            smem,
            dmem,
            src,
            dst,
            pages,
        })
    }

    /// One DMA copy of a pattern made from seed, checked on arrival.
    fn copy(&self, seed: u8, what: &str) -> TestResult {
        let data: Vec<u8> = (0..(self.pages * PAGE) as u64)
            .map(|i| pat(seed, i))
            .collect();
        self.smem.write(0, &data);
        self.dmem.fill(SENTINEL);
        let r = self.dev.copy_with(&CopyRequest {
            src: self.src,
            src_offset: 0,
            dst: self.dst,
            dst_offset: 0,
            length: None,
            flags: CopyFlags::DMA,
            async_status_index: 0,
        });
        expect_success(what, r)?;
        check_bytes(what, &self.dmem.snapshot(), |i| pat(seed, i as u64))
    }
}

/// One fd's stalled descriptor times out without stopping the others'
/// work on the shared channel: fd A's one-page copy is parked by the
/// provider and ends FAILED after dma_timeout_ms, while fd B (another
/// process's fd, same channel) copies before, across and after A's
/// timeout with every byte checked.  Once the stall is released, the
/// abandoned batch is reaped (dma_abandoned back to 0) and the harness
/// finds pins and counters at baseline.
pub fn timeout_isolated() -> TestResult {
    ensure_provider()?;
    let _k = Knobs;
    let t = DmaTimeout::set(1000);
    let timeout = Duration::from_millis(t.ms);
    set_provider_param("delay_us", 300)?;
    set_provider_param("stall", 1)?;
    let mut a = spawn_peer(|chan| {
        let dev = Device::open().ctx("open A")?;
        let (smem, dmem) = (Mem::new(1)?, Mem::new(1)?);
        smem.fill(0xa5);
        let src = region_at(&dev, &smem, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
        let dst = region_at(&dev, &dmem, 0, PAGE, Protection::WRITE, RegionFlags::NONE)?;
        chan.send(0)?;
        let start = Instant::now();
        let r = dev.copy_with(&CopyRequest {
            src,
            src_offset: 0,
            dst,
            dst_offset: 0,
            length: None,
            flags: CopyFlags::DMA,
            async_status_index: 0,
        });
        chan.send(start.elapsed().as_millis() as u64)?;
        chan.send(encode_outcome(&r))
    })?;
    a.recv()?;
    ensure!(
        wait_until(10, || Ok(provider_param("stalled")? == 1))?,
        "fd A's descriptor was not parked by the provider"
    );
    let parked = Instant::now();
    const PAGES: usize = 16;
    let b = DmaLoop::new(PAGES)?;
    let done0 = provider_param("done")?;
    let mut copies = 0u64;
    // B copies until a while after A's timeout.
    while parked.elapsed() < timeout + Duration::from_millis(1500) {
        let what = format!(
            "fd B's copy {copies} ({:?} after A's piece stalled)",
            parked.elapsed()
        );
        b.copy(copies as u8, &what)?;
        copies += 1;
    }
    ensure!(
        provider_param("done")? - done0 >= (PAGES as u64) * copies,
        "fd B's copies did not run on the engine"
    );
    let took = Duration::from_millis(a.recv()?);
    let st = decode_outcome(a.recv()?);
    a.finish()?;
    ensure!(
        st == Ok(Status::Failed),
        "fd A's stalled copy ended {st:?}, expected FAILED"
    );
    ensure!(
        took >= timeout && took < timeout + Duration::from_secs(3),
        "fd A's stalled copy took {took:?} with a timeout of {timeout:?}"
    );
    reap_abandoned_batch("while A's piece is parked")?;
    eprintln!("fd A FAILED after {took:?}; fd B made {copies} copies meanwhile");
    Ok(())
}

/// A process SIGKILLed 100 ms into a 64 MiB DMA copy is gone in half a
/// whole copy's time: the DMA loop stops queuing between pieces, and the
/// wait for what is queued gives way to the fatal signal (the batch is
/// abandoned, reaped once the engine calls it back).
pub fn fatal_signal_stops_long_dma_copy() -> TestResult {
    ensure_provider()?;
    let _k = Knobs;
    const SRC: usize = 16 << 20;
    const REPEAT: usize = 4;
    let mut child = spawn_peer(|chan| {
        let dev = Device::open().ctx("open")?;
        let (smem, dmem) = (Mem::new(SRC / PAGE)?, Mem::new(SRC * REPEAT / PAGE)?);
        smem.fill(0x3c);
        let iov = vec![Iovec::from_raw(smem.addr(0), SRC as u64); REPEAT];
        // SAFETY: our own scratch mapping, which outlives the region.
        let s = unsafe { dev.create_region_raw(&iov, Protection::READ, RegionFlags::NONE) }
            .ctx("source")?;
        let d = region_at(
            &dev,
            &dmem,
            0,
            SRC * REPEAT,
            Protection::WRITE,
            RegionFlags::NONE,
        )?;
        loop {
            let t = Instant::now();
            let st = dev
                .copy_with(&CopyRequest {
                    src: s,
                    src_offset: 0,
                    dst: d,
                    dst_offset: 0,
                    length: None,
                    flags: CopyFlags::DMA,
                    async_status_index: 0,
                })
                .ctx("copy")?;
            ensure!(st == Status::Success, "copy ended {st}");
            chan.send(t.elapsed().as_millis() as u64)?;
        }
    })?;
    let whole = Duration::from_millis(child.recv()?);
    std::thread::sleep(Duration::from_millis(100));
    let gone = child.kill_timed()?;
    eprintln!("64 MiB DMA copy: {whole:?}; killed 100 ms into the next, gone in {gone:?}");
    ensure!(
        gone < whole / 2,
        "killed process took {gone:?} to go; a whole DMA copy takes {whole:?}"
    );
    // What the engine still held is reaped once it is done.
    ensure!(
        wait_until(60, || Ok(knem_param("dma_abandoned").unwrap_or(0) == 0))?,
        "dma_abandoned still {:?} a minute later",
        knem_param("dma_abandoned")
    );
    Ok(())
}

/// A destination whose iovecs alias the same bytes (fully, then partly)
/// gets what copying the segments in sequence gives, as the CPU path
/// does, with an engine that runs the last issued descriptor first: such
/// pieces must not be in flight together.  By region copy and by inline
/// read into aliasing local iovecs.
pub fn overlapping_destination() -> TestResult {
    ensure_provider()?;
    let _k = Knobs;
    set_provider_param("lifo", 1)?;
    let dev = Device::open().ctx("open")?;
    let src = Mem::new(6)?;
    let n = 6 * PAGE;
    src.write(0, &(0..n as u64).map(|i| pat(SEED, i)).collect::<Vec<_>>());
    let ksrc = region_at(&dev, &src, 0, n, Protection::READ, RegionFlags::NONE)?;
    let dst = Mem::new(4)?;
    let layouts: [&[(usize, usize)]; 2] = [
        &[(0, 2 * PAGE), (0, 2 * PAGE)],
        &[(0, 2 * PAGE), (1000, 2 * PAGE), (12000, 100)],
    ];
    for segs in layouts {
        let mut want = vec![SENTINEL; 4 * PAGE];
        let mut k = 0u64;
        for &(at, len) in segs {
            for (j, w) in want[at..at + len].iter_mut().enumerate() {
                *w = pat(SEED, k + j as u64);
            }
            k += len as u64;
        }
        let iov: Vec<Iovec> = segs
            .iter()
            .map(|&(at, len)| Iovec::from_raw(dst.addr(at), len as u64))
            .collect();
        dst.fill(SENTINEL);
        // SAFETY: our own scratch mapping, which outlives the region.
        let kdst = unsafe { dev.create_region_raw(&iov, Protection::WRITE, RegionFlags::NONE) }
            .ctx("CREATE_REGION")?;
        let r = dev.copy_with(&CopyRequest {
            src: ksrc,
            src_offset: 0,
            dst: kdst,
            dst_offset: 0,
            length: None,
            flags: CopyFlags::DMA,
            async_status_index: 0,
        });
        let what = format!("region copy into {segs:?}");
        expect_success(&what, r)?;
        check_bytes(&what, &dst.snapshot(), |i| want[i])?;
        dst.fill(SENTINEL);
        let req = InlineCopyRequest {
            local: &iov,
            write: false,
            cookie: ksrc,
            offset: 0,
            length: None,
            flags: CopyFlags::DMA,
            async_status_index: 0,
        };
        let what = format!("inline read into {segs:?}");
        // SAFETY: our scratch mapping, only snapshotted after the copy.
        expect_success(&what, unsafe { dev.inline_copy(&req) })?;
        check_bytes(&what, &dst.snapshot(), |i| want[i])?;
    }
    Ok(())
}

/// ASYNCDMACOMPLETE requests in flight are bounded per fd (one per status
/// slot, at most 4096): with the engine holding every descriptor, a fd
/// with a one-page status array gets PENDING 4096 times, then EBUSY, while
/// another fd still gets PENDING; once the engine runs them all are
/// SUCCESS with their bytes, and the fd accepts requests again (once the
/// releases that follow the slots ran: retried for up to 3 s).
pub fn async_batches_bounded() -> TestResult {
    ensure_provider()?;
    let _k = Knobs;
    const MAX: usize = 4096;
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(PAGE).ctx("mmap")?;
    let other = Device::open().ctx("open another fd")?;
    let other_array = other.map_status_array(PAGE).ctx("mmap another")?;
    let src = seed_page()?;
    let k = region_at(&dev, &src, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
    let ko = region_at(&other, &src, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
    let locals = Mem::new(MAX + 2)?;
    let flags = CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE;
    let read = |dev: &Device, k: Cookie, page: usize, idx: u32| {
        let iov = [Iovec::from_raw(locals.addr(page * PAGE), PAGE as u64)];
        // SAFETY: our scratch mapping, only read after its slot.
        unsafe { dev.read_into_async(k, 0, &iov, None, idx, flags) }
    };
    set_provider_param("stall", 1_000_000)?;
    let run = || -> TestResult {
        for i in 0..MAX {
            expect_pending(&format!("request {i}"), read(&dev, k, i, i as u32))?;
        }
        let over = format!("request {MAX} with {MAX} in flight");
        expect_errno(&over, read(&dev, k, MAX, 0), knem::Errno::EBUSY)?;
        expect_pending("another fd's request", read(&other, ko, MAX + 1, 0))
    };
    let r = run();
    set_provider_param("stall", 0)?;
    r?;
    for i in 0..MAX {
        let st = wait_slot(&array, i as u32, &format!("request {i}"))?;
        ensure!(st == Status::Success, "request {i}: {st}");
    }
    ensure!(
        wait_slot(&other_array, 0, "another fd's request")? == Status::Success,
        "another fd's request failed"
    );
    for p in 0..MAX + 2 {
        if p == MAX {
            continue;
        }
        check_bytes(
            &format!("request into page {p}"),
            &locals.read(p * PAGE, PAGE),
            |b| pat(SEED, b as u64),
        )?;
    }
    array.reset(0);
    let mut again = read(&dev, k, MAX, 0);
    let start = Instant::now();
    while again.as_ref().err().and_then(|e| e.errno()) == Some(knem::Errno::EBUSY)
        && start.elapsed() < Duration::from_secs(3)
    {
        std::thread::sleep(Duration::from_millis(20));
        again = read(&dev, k, MAX, 0);
    }
    expect_pending("request after the others completed", again)?;
    let st = wait_slot(&array, 0, "request after")?;
    ensure!(st == Status::Success, "request after: {st}");
    check_bytes("request after", &locals.read(MAX * PAGE, PAGE), |b| {
        pat(SEED, b as u64)
    })
}

/// Closing an fd whose ASYNCDMACOMPLETE request the engine holds returns
/// once dma_timeout_ms passed without stopping the shared channel: another
/// process's fd copies across the close with every byte checked, and the
/// abandoned request is reaped once the engine lets it go.
pub fn timeout_isolated_on_close() -> TestResult {
    ensure_provider()?;
    let _k = Knobs;
    let t = DmaTimeout::set(1000);
    let timeout = Duration::from_millis(t.ms);
    set_provider_param("delay_us", 300)?;
    let run_for = timeout + Duration::from_millis(1500);
    // Forked first, so it holds no copy of fd A.
    let mut b = spawn_peer(move |chan| {
        let b = DmaLoop::new(32)?;
        chan.send(0)?;
        chan.recv()?;
        let start = Instant::now();
        let mut copies = 0u64;
        while start.elapsed() < run_for {
            let what = format!("fd B's copy {copies} ({:?} in)", start.elapsed());
            b.copy(copies as u8, &what)?;
            copies += 1;
        }
        chan.send(copies)
    })?;
    b.recv()?;
    set_provider_param("stall", 1)?;
    let a = Device::open().ctx("open A")?;
    let array = a.map_status_array(PAGE).ctx("mmap A")?;
    let (asrc, adst) = (Mem::new(1)?, Mem::new(1)?);
    let ks = region_at(&a, &asrc, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
    let kd = region_at(&a, &adst, 0, PAGE, Protection::WRITE, RegionFlags::NONE)?;
    let flags = CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE;
    expect_pending("fd A's request", a.copy_async(ks, 0, kd, 0, None, 0, flags))?;
    ensure!(
        wait_until(10, || Ok(provider_param("stalled")? == 1))?,
        "fd A's descriptor was not parked by the provider"
    );
    b.send(1)?;
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    drop(array);
    drop(a);
    let took = start.elapsed();
    let copies = b.recv()?;
    b.finish()?;
    // dma_timeout_ms=1000 asked for: a module without it waits longer.
    ensure!(
        took < Duration::from_secs(4),
        "closing fd A took {took:?} with a timeout of {timeout:?}"
    );
    reap_abandoned_batch("after the close")?;
    eprintln!("fd A closed in {took:?}; fd B made {copies} copies meanwhile");
    Ok(())
}

/// What the module holds for an ASYNCDMACOMPLETE request in flight is
/// charged to the submitter's memory cgroup: 4096 parked one-page reads
/// raise the group's unreclaimable slab by at least 4 KiB each (the shim's
/// batch and its piece array; the core's request alone is far less), and
/// it falls back once they have completed.
pub fn async_batches_charged() -> TestResult {
    ensure_provider()?;
    const N: usize = 4096;
    const PER_REQUEST: u64 = 4096;
    let _k = Knobs;
    let cg = TestCgroup::with(&["memory"])?;
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(PAGE).ctx("mmap")?;
    let src = seed_page()?;
    let k = region_at(&dev, &src, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
    let locals = Mem::new(N)?;
    let flags = CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE;
    let slab = || {
        cg.memory_stat("slab_unreclaimable")?
            .ok_or_else(|| "memory.stat has no slab_unreclaimable".to_string())
    };
    let before = slab()?;
    set_provider_param("stall", 1_000_000)?;
    let submit = || -> TestResult<u64> {
        for i in 0..N {
            let iov = [Iovec::from_raw(locals.addr(i * PAGE), PAGE as u64)];
            // SAFETY: our scratch mapping, only read after its slot.
            let r = unsafe { dev.read_into_async(k, 0, &iov, None, i as u32, flags) };
            expect_pending(&format!("request {i}"), r)?;
        }
        slab()
    };
    let during = submit();
    set_provider_param("stall", 0)?;
    let during = during?;
    for i in 0..N {
        wait_slot_success(&array, i as u32, &format!("request {i}"))?;
    }
    for p in [0, N / 2, N - 1] {
        check_bytes(
            &format!("request into page {p}"),
            &locals.read(p * PAGE, PAGE),
            |b| pat(SEED, b as u64),
        )?;
    }
    let charged = during.saturating_sub(before);
    ensure!(
        charged >= N as u64 * PER_REQUEST,
        "{N} requests in flight raised the group's unreclaimable slab by {charged} bytes ({} per request), expected at least {PER_REQUEST} each",
        charged / N as u64
    );
    // Completed requests give it back (their batches are freed by a work
    // item after the last callback).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = slab()?;
        if now < before + charged / 4 {
            println!(
                "note dma_async_batches_charged: {N} requests in flight charged {charged} bytes of slab ({} per request), {} left after",
                charged / N as u64,
                now.saturating_sub(before)
            );
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "5 s after the {N} requests completed the group's unreclaimable slab is {} bytes above where it was, {charged} at its height",
            now - before
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Past 65536 pieces that one fd's ASYNCDMACOMPLETE requests keep mapped
/// (256 MiB), a submission waits for its own pieces before it maps more.
/// With the engine parking everything, four 64 MiB reads (one batch of
/// 16384 pieces each) reach the bound and return PENDING at once; a fifth
/// of two pages parks its first piece and does not return while the
/// engine holds it.  Once the engine runs again, it returns and all five
/// end SUCCESS with their bytes.
pub fn async_pieces_bounded() -> TestResult {
    ensure_provider()?;
    const BIG: usize = 16384;
    const FILL: usize = 4;
    let _k = Knobs;
    let _t = DmaTimeout::set(120_000);
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(8).ctx("mmap")?;
    let src = seed_page()?;
    let iovs: Vec<Iovec> = (0..BIG)
        .map(|_| Iovec::from_raw(src.addr(0), PAGE as u64))
        .collect();
    // SAFETY: src lives until the region is destroyed, and is only read.
    let k = unsafe { dev.create_region_raw(&iovs, Protection::READ, RegionFlags::NONE) }
        .ctx("region of one page 16384 times")?;
    let locals = Mem::new(FILL * BIG + 2)?;
    let flags = CopyFlags::DMA | CopyFlags::ASYNC_DMA_COMPLETE;
    // Addresses, not the mapping: the fifth read runs on another thread.
    let at = |page: usize| locals.addr(page * PAGE);
    let read = |addr: u64, pages: usize, idx: u32| {
        let iov = [Iovec::from_raw(addr, (pages * PAGE) as u64)];
        // SAFETY: our scratch mapping, only read after its slot.
        unsafe { dev.read_into_async(k, 0, &iov, None, idx, flags) }
    };
    let parked = (FILL * BIG + 1) as u64;
    set_provider_param("stall", parked)?;
    let run = || -> TestResult {
        for i in 0..FILL {
            expect_pending(
                &format!("64 MiB read {i}"),
                read(at(i * BIG), BIG, i as u32),
            )?;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let fifth = at(FILL * BIG);
        std::thread::scope(|s| -> TestResult {
            s.spawn(|| {
                let _ = tx.send(read(fifth, 2, FILL as u32).map_err(|e| e.to_string()));
            });
            let deadline = Instant::now() + Duration::from_secs(60);
            while provider_param("stalled")? < parked {
                ensure!(
                    Instant::now() < deadline,
                    "the engine parked {} of {parked} pieces in 60 s",
                    provider_param("stalled")?
                );
                if let Ok(r) = rx.try_recv() {
                    return Err(format!("the read past 65536 pieces returned ({r:?}) before its first piece was parked"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(r) = rx.recv_timeout(Duration::from_millis(500)) {
                return Err(format!(
                    "the read past 65536 pieces in flight returned ({r:?}) while the engine held its first piece; expected it to wait for that piece"
                ));
            }
            set_provider_param("stall", 0)?;
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(Ok(Status::Pending | Status::Success)) => Ok(()),
                Ok(r) => Err(format!(
                    "the read past the bound, once the engine ran: {r:?}"
                )),
                Err(_) => Err(
                    "the read past the bound did not return 60 s after the engine ran again".into(),
                ),
            }
        })
    };
    let r = run();
    set_provider_param("stall", 0)?;
    r?;
    for i in 0..=FILL {
        wait_slot_success(&array, i as u32, &format!("read {i}"))?;
    }
    for p in (0..FILL * BIG + 2)
        .step_by(BIG / 4)
        .chain([FILL * BIG, FILL * BIG + 1])
    {
        check_bytes(&format!("page {p}"), &locals.read(p * PAGE, PAGE), |b| {
            pat(SEED, b as u64)
        })?;
    }
    dev.destroy_region(k).ctx("destroy")
}

/// Batches given up on are bounded node-wide, not only per fd: with the
/// engine parking every descriptor and a 200 ms timeout, the first
/// `dma_abandoned_max` (3 here) one-page DMA copies end FAILED and leave
/// one abandoned batch each; past that, copies go to the CPU (SUCCESS,
/// bytes checked) and nothing more is abandoned or given to the engine.
/// Once the engine runs what it parked, the batches are reaped and copies
/// use the engine again.  (Found by a 30-minute fuzz: a stalling engine
/// and dying submitters piled up 735 MiB of abandoned batches.)
pub fn abandoned_batches_bounded() -> TestResult {
    const MAX: u64 = 3;
    ensure_provider()?;
    let _k = Knobs;
    let _t = DmaTimeout::set(200);
    let _m = KnemParam::set("dma_abandoned_max", MAX);
    ensure!(
        knem_param("dma_abandoned") == Some(0),
        "dma_abandoned is {:?} at the start",
        knem_param("dma_abandoned")
    );
    set_provider_param("stall", 1000)?;
    let l = DmaLoop::new(1)?;
    let req = CopyRequest {
        src: l.src,
        src_offset: 0,
        dst: l.dst,
        dst_offset: 0,
        length: None,
        flags: CopyFlags::DMA,
        async_status_index: 0,
    };
    for i in 0..MAX {
        let r = l.dev.copy_with(&req);
        ensure!(
            matches!(r, Ok(Status::Failed)),
            "copy {i} with the engine parking everything ended {r:?}, expected FAILED"
        );
        ensure!(
            knem_param("dma_abandoned") == Some(i + 1),
            "after {} timed-out copies dma_abandoned is {:?}",
            i + 1,
            knem_param("dma_abandoned")
        );
    }
    let parked = provider_param("stalled")?;
    for i in 0..4u64 {
        l.copy(
            0x40 + i as u8,
            &format!("copy {} past dma_abandoned_max", MAX + i),
        )?;
    }
    ensure!(
        knem_param("dma_abandoned") == Some(MAX),
        "dma_abandoned is {:?} after 4 more copies, bound {MAX}",
        knem_param("dma_abandoned")
    );
    ensure!(
        provider_param("stalled")? == parked,
        "copies past the bound still went to the engine ({} parked, {parked} before)",
        provider_param("stalled")?
    );
    release_stall()?;
    let done0 = provider_param("done")?;
    l.copy(0x77, "the copy after the engine caught up")?;
    ensure!(
        provider_param("done")? > done0,
        "after the engine caught up, the copy did not go to it"
    );
    Ok(())
}
