//! Bounds on what one user can take from the kernel: regions per user,
//! pins of one page, the status array's sharing, and copies that stop
//! when their caller dies.

use crate::ensure;
use crate::t_harden::knem_mappings;
use crate::util::*;
use knem::{Cookie, CopyFlags, CopyRequest, Device, Errno, Iovec, Protection, RegionFlags};
use nix::libc;
use std::time::{Duration, Instant};

const PARAMS: &str = "/sys/module/knem/parameters";

/// Runs `f` with module parameter `name` set to `v`, restored afterwards.
pub fn with_param(name: &str, v: &str, f: impl FnOnce() -> TestResult) -> TestResult {
    let path = format!("{PARAMS}/{name}");
    let old = std::fs::read_to_string(&path).ctx(&path)?;
    std::fs::write(&path, v).ctx(&format!("write {name}={v}"))?;
    let r = f();
    let _ = std::fs::write(&path, old.trim());
    r
}

/// A region of `n` iovecs over the same `len` bytes of `mem`.
fn repeated_region(
    dev: &Device,
    mem: &Mem,
    len: usize,
    n: usize,
    prot: Protection,
) -> knem::Result<Cookie> {
    let iov = vec![Iovec::from_raw(mem.addr(0), len as u64); n];
    // SAFETY: our own scratch mapping, which outlives the region.
    unsafe { dev.create_region_raw(&iov, prot, RegionFlags::NONE) }
}

/// max_regions_per_user=50: the 51st live region of a uid is ENOMEM on
/// any of its fds; destroying one gives room back; another uid is not
/// affected.
pub fn regions_per_user_bounded() -> TestResult {
    with_device_open_to_all(|| {
        with_param("max_regions_per_user", "50", || {
            let (a, b) = (Device::open().ctx("open")?, Device::open().ctx("open")?);
            let mem = Mem::new(1)?;
            let mut live = Vec::new();
            for i in 0..50 {
                let dev = if i % 2 == 0 { &a } else { &b };
                live.push(region_at(
                    dev,
                    &mem,
                    0,
                    0,
                    Protection::READ,
                    RegionFlags::NONE,
                )?);
            }
            for (name, dev) in [("fd a", &a), ("fd b", &b)] {
                expect_errno(
                    &format!("51st region on {name}"),
                    // SAFETY: our own scratch mapping.
                    unsafe {
                        dev.create_region_raw(
                            &[Iovec::from_raw(mem.addr(0), 8)],
                            Protection::READ,
                            RegionFlags::NONE,
                        )
                    },
                    Errno::ENOMEM,
                )?;
            }
            let other = spawn_peer(|_| {
                become_nobody()?;
                let dev = Device::open().ctx("open as nobody")?;
                let mem = Mem::new(1)?;
                for _ in 0..10 {
                    region_at(&dev, &mem, 0, 8, Protection::READ, RegionFlags::NONE)?;
                }
                Ok(())
            })?;
            other.finish()?;
            a.destroy_region(live[0]).ctx("destroy")?;
            live[0] = region_at(&b, &mem, 0, 8, Protection::READ, RegionFlags::NONE)
                .ctx("after a destroy")?;
            drop(a);
            // Closing fd a gave its 24 remaining regions back.
            for _ in 0..24 {
                region_at(&b, &mem, 0, 8, Protection::READ, RegionFlags::NONE)
                    .ctx("after closing fd a")?;
            }
            Ok(())
        })
    })
}

/// mmap() of one page of status array on `dev` with `flags`.
fn map_status(dev: &Device, flags: libc::c_int) -> Result<*mut libc::c_void, Errno> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(dev);
    // SAFETY: a fresh mapping of the device anywhere; callers unmap it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(p)
    }
}

/// A status array mapped MAP_PRIVATE is EINVAL (MPICH, UCX and Open MPI
/// map it MAP_SHARED); MAP_SHARED works.
pub fn status_array_map_shared_only() -> TestResult {
    let dev = Device::open().ctx("open")?;
    match map_status(&dev, libc::MAP_PRIVATE) {
        Err(Errno::EINVAL) => {}
        other => {
            return Err(format!(
                "MAP_PRIVATE status array: {other:?}, expected EINVAL"
            ))
        }
    }
    let p = map_status(&dev, libc::MAP_SHARED).map_err(|e| format!("MAP_SHARED: {e}"))?;
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, PAGE) };
    Ok(())
}

/// madvise(MADV_DOFORK) cannot bring the status array into a child: the
/// call is refused (EINVAL) and a forked child has no mapping of it.
pub fn status_array_not_inherited_after_dofork() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let p = map_status(&dev, libc::MAP_SHARED).map_err(|e| format!("map: {e}"))?;
    // SAFETY: advice on our own mapping; MADV_DOFORK changes no data.
    let r = unsafe { libc::madvise(p, PAGE, libc::MADV_DOFORK) };
    let advice = if r == 0 { None } else { Some(Errno::last()) };
    let child = spawn_peer(|_| {
        let n = knem_mappings()?;
        ensure!(n == 0, "child inherited {n} /dev/knem mappings");
        Ok(())
    })?;
    let inherited = child.finish();
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, PAGE) };
    inherited?;
    ensure!(
        advice == Some(Errno::EINVAL),
        "madvise(MADV_DOFORK) on the status array: {advice:?}, expected EINVAL"
    );
    Ok(())
}

/// Bytes behind the long copies, and how often their iovecs repeat them:
/// a 384 MiB copy over 64 MiB of memory, several seconds under TCG.
const LONG_MEM: usize = 32 << 20;
const LONG_REPEAT: usize = 12;

/// A process killed during a long copy must be gone in half the
/// time a whole copy takes (exit and unpinning included): a ratio, since
/// a loaded TCG host slows both alike.  Without the stop it takes what is
/// left of the copy, or more.
fn check_gone(whole: Duration, gone: Duration) -> TestResult {
    ensure!(
        gone < whole / 2,
        "killed process took {gone:?} to go; a whole copy takes {whole:?}"
    );
    Ok(())
}

/// Two regions of the long copies: source (read) and destination (write).
fn long_regions(dev: &Device, src: &Mem, dst: &Mem) -> TestResult<(Cookie, Cookie)> {
    src.fill(0x3c);
    let s = repeated_region(dev, src, LONG_MEM, LONG_REPEAT, Protection::READ).ctx("source")?;
    let d = repeated_region(dev, dst, LONG_MEM, LONG_REPEAT, Protection::WRITE).ctx("dest")?;
    Ok((s, d))
}

fn long_copy(dev: &Device, s: Cookie, d: Cookie, flags: CopyFlags) -> knem::Result<knem::Status> {
    dev.copy_with(&CopyRequest {
        src: s,
        src_offset: 0,
        dst: d,
        dst_offset: 0,
        length: None,
        flags,
        async_status_index: 0,
    })
}

/// A process SIGKILLed 100 ms into a 384 MiB synchronous copy is gone
/// in half a whole copy's time (the copy stops between pieces); the
/// harness checks that regions and pins are back to baseline.
pub fn fatal_signal_stops_long_copy() -> TestResult {
    let mut child = spawn_peer(|chan| {
        let dev = Device::open().ctx("open")?;
        let (src, dst) = (Mem::new(LONG_MEM / PAGE)?, Mem::new(LONG_MEM / PAGE)?);
        let (s, d) = long_regions(&dev, &src, &dst)?;
        loop {
            let t = Instant::now();
            let st = long_copy(&dev, s, d, CopyFlags::NONE).ctx("copy")?;
            ensure!(st == knem::Status::Success, "copy ended {st}");
            chan.send(t.elapsed().as_millis() as u64)?;
        }
    })?;
    let whole = Duration::from_millis(child.recv()?);
    let into = kill_delay(whole, 100);
    thread_sleep(into);
    let gone = child.kill_timed()?;
    eprintln!("384 MiB copy: {whole:?}; killed {into} ms into the next, gone in {gone:?}");
    check_gone(whole, gone)
}

/// A process SIGKILLed 200 ms into a 384 MiB copy on its fd's offload
/// thread is gone in half a whole copy's time: closing the fd stops
/// the copy between pieces instead of waiting for it.  The copy must
/// have been submitted (PENDING) and still in flight when the kill
/// landed: the victim watches its slot and reports the end of the copy,
/// and no such report may be waiting once it is gone.
pub fn fatal_signal_stops_long_async_copy() -> TestResult {
    let mut child = spawn_peer(|chan| {
        let dev = Device::open().ctx("open")?;
        let array = dev.map_status_array(PAGE).ctx("map status array")?;
        let (src, dst) = (Mem::new(LONG_MEM / PAGE)?, Mem::new(LONG_MEM / PAGE)?);
        let (s, d) = long_regions(&dev, &src, &dst)?;
        let st = long_copy(&dev, s, d, CopyFlags::MEMCPY_THREAD).ctx("async copy")?;
        ensure!(st == knem::Status::Pending, "async copy ended {st} at once");
        chan.send(1)?;
        let t = Instant::now();
        // wait_slot's 20 s are too few for this copy on a loaded host.
        let st = loop {
            match array.get_acquire(0) {
                Some(knem::Status::Pending) if t.elapsed() < Duration::from_secs(200) => {
                    thread_sleep(10)
                }
                other => break other,
            }
        };
        ensure!(st == Some(knem::Status::Success), "async copy ended {st:?}");
        chan.send(t.elapsed().as_millis() as u64)?;
        loop {
            thread_sleep(1000);
        }
    })?;
    child.recv()?;
    let whole = Duration::from_millis(child.recv()?);
    drop(child);
    let mut child = spawn_peer(|chan| {
        let dev = Device::open().ctx("open")?;
        let array = dev.map_status_array(PAGE).ctx("map status array")?;
        let (src, dst) = (Mem::new(LONG_MEM / PAGE)?, Mem::new(LONG_MEM / PAGE)?);
        let (s, d) = long_regions(&dev, &src, &dst)?;
        let st = long_copy(&dev, s, d, CopyFlags::MEMCPY_THREAD).ctx("async copy")?;
        ensure!(st == knem::Status::Pending, "async copy ended {st} at once");
        chan.send(1)?;
        // Until the kill: report the slot's end, should it come first.
        loop {
            match array.get_acquire(0) {
                Some(knem::Status::Pending) => thread_sleep(5),
                other => {
                    chan.send(COPY_ENDED | encode_status(other))?;
                    loop {
                        thread_sleep(1000);
                    }
                }
            }
        }
    })?;
    child.recv()?;
    let into = kill_delay(whole, 200);
    thread_sleep(into);
    let gone = child.kill_timed()?;
    if let Some(v) = child.recv_after_exit() {
        let slot = match v & !COPY_ENDED {
            0xff => "no status".to_string(),
            raw => knem::Status::from_raw(raw as u32).to_string(),
        };
        return Err(format!(
            "the async copy ended ({slot}) before the kill {into} ms after its submission: the kill did not land in flight (a whole copy takes {whole:?})"
        ));
    }
    eprintln!("384 MiB async copy: {whole:?}; killed {into} ms into one, gone in {gone:?}");
    check_gone(whole, gone)
}

/// Marks a victim's report that its async copy ended before the kill.
const COPY_ENDED: u64 = 1 << 62;

/// A status slot as a number for the channel (0xff: no status).
fn encode_status(st: Option<knem::Status>) -> u64 {
    st.map_or(0xff, |s| s.to_raw() as u64)
}

/// How long into a long copy the kill comes: `most` ms, or a quarter of a
/// whole copy when that is shorter (on real cores the 384 MiB copy takes
/// about 130 ms, and a kill 100 ms in would land at its very end; under
/// TCG it takes seconds and the delay stays `most`).
fn kill_delay(whole: Duration, most: u64) -> u64 {
    (whole.as_millis() as u64 / 4).clamp(1, most)
}

fn thread_sleep(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Regions of 65536 one-byte iovecs over one page, created until refused:
/// ENOMEM once the page holds about 2^19 pins, well before its refcount
/// (1024 per pin) could overflow, and no kernel warning.  Then everything
/// goes, and a region over the page works again.
pub fn page_refcount_pins_bounded() -> TestResult {
    const IOVECS: usize = 1 << 16;
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    mem.fill(0x77);
    let mut live = Vec::new();
    let refused = loop {
        ensure!(
            live.len() < 48,
            "48 regions of {IOVECS} pins of one page accepted"
        );
        match repeated_region(&dev, &mem, 1, IOVECS, Protection::READ) {
            Ok(c) => live.push(c),
            Err(e) => break e,
        }
    };
    ensure!(
        refused.errno() == Some(Errno::ENOMEM),
        "region {}: {refused}, expected ENOMEM",
        live.len() + 1
    );
    ensure!(
        (4..=8).contains(&live.len()),
        "{} regions of {IOVECS} pins accepted, expected 4 to 8",
        live.len()
    );
    eprintln!("pins of one page: refused after {} regions", live.len());
    for c in live {
        dev.destroy_region(c).ctx("destroy")?;
    }
    let c = region_at(&dev, &mem, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
    let mut buf = vec![0u8; PAGE];
    expect_success("read after", dev.read_into(c, 0, &mut buf, None))?;
    check_bytes("read after", &buf, |_| 0x77)?;
    dev.destroy_region(c).ctx("destroy")
}
