//! Issue 3: NOTIFY_FD.  Completed requests queue their u32 status index on
//! the fd; read() returns whole u32s (blocking, or EAGAIN when
//! non-blocking), poll()/select() report POLLIN, and at most N (the status
//! array's length) notifications may be queued or in flight.

use crate::ensure;
use crate::util::*;
use knem::{Cookie, CopyFlags, Device, Errno, Iovec, Protection, RegionFlags, Status};
use nix::libc;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const SEED: u8 = 0x4d;
const NOTIFY: CopyFlags =
    CopyFlags::from_bits_retain(CopyFlags::MEMCPY_THREAD.bits() | CopyFlags::NOTIFY_FD.bits());

/// A source and a destination region of `len` bytes each on `dev`, the
/// source filled with the pattern.
fn pair(dev: &Device, len: usize) -> TestResult<(Mem, Mem, Cookie, Cookie)> {
    let s = Mem::new(len.div_ceil(PAGE))?;
    s.write(
        0,
        &(0..len as u64).map(|i| pat(SEED, i)).collect::<Vec<_>>(),
    );
    let d = Mem::new(len.div_ceil(PAGE))?;
    let src = region_at(dev, &s, 0, len, Protection::READ, RegionFlags::NONE)?;
    let dst = region_at(dev, &d, 0, len, Protection::WRITE, RegionFlags::NONE)?;
    Ok((s, d, src, dst))
}

/// Read exactly `n` notifications (blocking reads; SIGALRM guards hangs).
fn read_n(dev: &Device, n: usize) -> TestResult<Vec<u32>> {
    let mut got = Vec::new();
    while got.len() < n {
        let mut buf = [0u32; 256];
        let want = (n - got.len()).min(buf.len());
        let k = dev
            .read_notifications(&mut buf[..want])
            .ctx("read notifications")?;
        ensure!(
            k >= 1 && k <= want,
            "read returned {k} notifications for {want} asked"
        );
        got.extend_from_slice(&buf[..k]);
    }
    Ok(got)
}

/// A raw read(2) of `len` bytes on the device: bytes read or errno.
fn raw_read(dev: &Device, len: usize) -> Result<usize, Errno> {
    let mut buf = [0u8; 64];
    // SAFETY: `buf` is writable for its whole length, which bounds `len`.
    let n = unsafe { libc::read(dev.as_raw_fd(), buf.as_mut_ptr().cast(), len.min(buf.len())) };
    Errno::result(n).map(|n| n as usize)
}

/// Blocking read: it returns once a copy completes, with its index, and
/// the slot is already SUCCESS; several completions come in order; a read
/// of a count that is not a multiple of 4 is EINVAL.
pub fn notify_fd_blocking_read() -> TestResult {
    alarm(60);
    let dev = Device::open().ctx("open")?;
    const BIG: usize = 4 << 20;
    let (_s, d, src, dst) = pair(&dev, BIG)?;
    let array = dev.map_status_array(16).ctx("mmap 16 slots")?;
    // A big copy: the read very likely blocks until it is done.
    expect_pending(
        "4 MiB COPY with NOTIFY_FD",
        dev.copy_async(src, 0, dst, 0, None, 5, NOTIFY),
    )?;
    let got = read_n(&dev, 1)?;
    ensure!(got == [5], "notifications {got:?}, expected [5]");
    ensure!(
        array.get_acquire(5) == Some(Status::Success),
        "slot 5 is {:?} when its notification is read",
        array.get(5)
    );
    check_bytes("4 MiB COPY", &d.read(BIG - 4096, 4096), |i| {
        pat(SEED, (BIG - 4096 + i) as u64)
    })?;
    // Three in a row come back in submission order.
    for idx in [7u32, 8, 9] {
        expect_pending(
            &format!("COPY slot {idx}"),
            dev.copy_async(src, idx as u64, dst, 0, Some(200_000), idx, NOTIFY),
        )?;
    }
    let got = read_n(&dev, 3)?;
    ensure!(
        got == [7, 8, 9],
        "notifications {got:?}, expected [7, 8, 9]"
    );
    // Inline requests notify too (DMATHREAD, behaving as MEMCPYTHREAD).
    let local = Mem::new(2)?;
    let iov = [Iovec::from_raw(local.addr(0), 5000)];
    let flags = CopyFlags::DMA_THREAD | CopyFlags::NOTIFY_FD;
    // SAFETY: our scratch mapping, only read after its notification.
    let r = unsafe { dev.read_into_async(src, 77, &iov, None, 15, flags) };
    expect_pending("inline read DMATHREAD|NOTIFY_FD", r)?;
    ensure!(read_n(&dev, 1)? == [15], "inline read notification");
    check_bytes("inline read", &local.read(0, 5000), |i| {
        pat(SEED, 77 + i as u64)
    })?;
    // Short buffers: EINVAL, and nothing is lost.
    for idx in [1u32, 2] {
        expect_pending(
            &format!("COPY slot {idx}"),
            dev.copy_async(src, 0, dst, 0, Some(10), idx, NOTIFY),
        )?;
    }
    ensure!(
        dev.poll_readable(Some(Duration::from_secs(20)))
            .ctx("poll")?,
        "not readable 20 s after two submissions"
    );
    for len in [1usize, 3] {
        ensure!(
            raw_read(&dev, len) == Err(Errno::EINVAL),
            "read of {len} bytes: {:?}, expected EINVAL",
            raw_read(&dev, len)
        );
    }
    // Wait for the second completion: a 6-byte read is EINVAL too (whole
    // indices only, as KNEM), and both are still there.
    wait_slot_success(&array, 2, "COPY slot 2")?;
    ensure!(
        raw_read(&dev, 6) == Err(Errno::EINVAL),
        "read of 6 bytes: {:?}, expected EINVAL",
        raw_read(&dev, 6)
    );
    ensure!(read_n(&dev, 2)? == [1, 2], "notifications 1 and 2");
    alarm(0);
    dev.destroy_region(src).ctx("DESTROY_REGION")?;
    dev.destroy_region(dst).ctx("DESTROY_REGION")
}

/// O_NONBLOCK: an empty queue is EAGAIN, before and after notifications.
pub fn notify_fd_nonblocking_eagain() -> TestResult {
    alarm(60);
    let dev = Device::open().ctx("open")?;
    let (_s, _d, src, dst) = pair(&dev, 64 * 1024)?;
    let array = dev.map_status_array(4).ctx("mmap 4 slots")?;
    dev.set_nonblocking(true).ctx("O_NONBLOCK")?;
    let mut buf = [0u32; 4];
    expect_errno(
        "non-blocking read of an empty queue",
        dev.read_notifications(&mut buf),
        Errno::EAGAIN,
    )?;
    // Synchronous and non-notifying async requests queue nothing.
    expect_success("sync COPY", dev.copy(src, 0, dst, 0, None))?;
    expect_pending(
        "async COPY without NOTIFY_FD",
        dev.copy_async(src, 0, dst, 0, None, 0, CopyFlags::MEMCPY_THREAD),
    )?;
    wait_slot_success(&array, 0, "async COPY without NOTIFY_FD")?;
    expect_errno(
        "non-blocking read after requests without NOTIFY_FD",
        dev.read_notifications(&mut buf),
        Errno::EAGAIN,
    )?;
    expect_pending(
        "COPY with NOTIFY_FD",
        dev.copy_async(src, 0, dst, 0, None, 3, NOTIFY),
    )?;
    ensure!(
        dev.poll_readable(Some(Duration::from_secs(20)))
            .ctx("poll")?,
        "not readable 20 s after a NOTIFY_FD copy"
    );
    let n = dev.read_notifications(&mut buf).ctx("non-blocking read")?;
    ensure!(n == 1 && buf[0] == 3, "read {:?}, expected [3]", &buf[..n]);
    expect_errno(
        "non-blocking read once drained",
        dev.read_notifications(&mut buf),
        Errno::EAGAIN,
    )?;
    ensure!(
        !dev.poll_readable(Some(Duration::ZERO)).ctx("poll")?,
        "readable once drained"
    );
    alarm(0);
    Ok(())
}

/// select() on the device: whether `fd` is readable within `ms`.
fn select_readable(fd: i32, ms: i64) -> TestResult<bool> {
    // SAFETY: fd_set manipulated with the libc macros on a zeroed value;
    // fd < FD_SETSIZE in this small process.
    unsafe {
        let mut set: libc::fd_set = std::mem::zeroed();
        libc::FD_ZERO(&mut set);
        libc::FD_SET(fd, &mut set);
        let mut tv = libc::timeval {
            tv_sec: ms / 1000,
            tv_usec: (ms % 1000) * 1000,
        };
        let n = libc::select(
            fd + 1,
            &mut set,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut tv,
        );
        Errno::result(n).ctx("select")?;
        Ok(n == 1 && libc::FD_ISSET(fd, &set))
    }
}

/// poll() and select() report POLLIN exactly while a notification is
/// queued, and wake up a waiter when one arrives.
pub fn notify_fd_poll_select() -> TestResult {
    alarm(60);
    let dev = Device::open().ctx("open")?;
    const BIG: usize = 2 << 20;
    let (_s, _d, src, dst) = pair(&dev, BIG)?;
    let _array = dev.map_status_array(8).ctx("mmap 8 slots")?;
    let fd = dev.as_raw_fd();
    ensure!(
        !dev.poll_readable(Some(Duration::ZERO)).ctx("poll")?,
        "readable with nothing queued"
    );
    ensure!(
        !select_readable(fd, 0)?,
        "select: readable with nothing queued"
    );
    ensure!(
        !dev.poll_readable(Some(Duration::from_millis(50)))
            .ctx("poll")?,
        "readable with nothing queued (50 ms)"
    );
    // poll() sleeping when the completion arrives is woken.
    expect_pending(
        "2 MiB COPY",
        dev.copy_async(src, 0, dst, 0, None, 6, NOTIFY),
    )?;
    let t = Instant::now();
    ensure!(
        dev.poll_readable(Some(Duration::from_secs(20)))
            .ctx("poll")?,
        "poll: not readable 20 s after a NOTIFY_FD copy"
    );
    ensure!(
        select_readable(fd, 0)?,
        "select: not readable while poll says so"
    );
    ensure!(read_n(&dev, 1)? == [6], "notification after poll");
    ensure!(!select_readable(fd, 0)?, "select: readable after draining");
    // select() sleeping when the completion arrives is woken.
    expect_pending(
        "2 MiB COPY",
        dev.copy_async(src, 0, dst, 0, None, 7, NOTIFY),
    )?;
    ensure!(
        select_readable(fd, 20_000)?,
        "select: not readable 20 s after a NOTIFY_FD copy"
    );
    ensure!(read_n(&dev, 1)? == [7], "notification after select");
    ensure!(
        !dev.poll_readable(Some(Duration::ZERO)).ctx("poll")?,
        "readable after draining"
    );
    eprintln!(
        "notify_fd_poll_select: first completion after {:?}",
        t.elapsed()
    );
    alarm(0);
    Ok(())
}

/// At most N notifications queued or in flight, N being the status array's
/// length as the driver sees it (the mapping: whole pages, so the smallest
/// array has 4096 slots): N NOTIFY_FD submissions are accepted, the next is
/// EBUSY (moves nothing, writes no slot) whether they are still in flight
/// or completed and unread; requests without NOTIFY_FD still go; reading
/// one makes room for exactly one more.
pub fn notify_fd_ebusy_at_queue_limit() -> TestResult {
    alarm(90);
    const N: u32 = PAGE as u32;
    let dev = Device::open().ctx("open")?;
    let (_s, d, src, dst) = pair(&dev, 8192)?;
    let array = dev.map_status_array(N as usize).ctx("mmap 4096 slots")?;
    for i in 0..N {
        let r = dev.copy_async(
            src,
            (i % 4096) as u64,
            dst,
            (i % 64) as u64,
            Some(1),
            i,
            NOTIFY,
        );
        expect_pending(&format!("NOTIFY_FD COPY {i} of {N}"), r)?;
    }
    for when in ["right after the submissions", "once they completed"] {
        let completed = when == "once they completed";
        if completed {
            for i in 0..N {
                wait_slot_success(&array, i, &format!("NOTIFY_FD COPY {i}"))?;
            }
            // A refused request must not write its slot.
            array.reset(7);
        }
        let before = d.read(100, 200);
        expect_errno(
            &format!("NOTIFY_FD COPY {} {when}", N + 1),
            dev.copy_async(src, 100, dst, 100, Some(50), 7, NOTIFY),
            Errno::EBUSY,
        )?;
        let iov = [Iovec::from_raw(d.addr(200), 10)];
        // SAFETY: our scratch mapping.
        let r = unsafe { dev.read_into_async(src, 0, &iov, None, 7, NOTIFY) };
        expect_errno(&format!("NOTIFY_FD inline read {when}"), r, Errno::EBUSY)?;
        ensure!(
            d.read(100, 200) == before,
            "a refused NOTIFY_FD request moved data"
        );
        if completed {
            ensure!(
                array.get(7) == Some(Status::Pending),
                "a refused NOTIFY_FD request wrote its slot"
            );
        }
    }
    // Requests without NOTIFY_FD do not count.
    array.reset(1);
    expect_pending(
        "MEMCPYTHREAD COPY without NOTIFY_FD at the limit",
        dev.copy_async(src, 0, dst, 300, Some(10), 1, CopyFlags::MEMCPY_THREAD),
    )?;
    wait_slot_success(&array, 1, "COPY without NOTIFY_FD")?;
    // Reading one notification makes room for exactly one more.
    let first = read_n(&dev, 1)?;
    ensure!(first == [0], "first notification {first:?}, expected [0]");
    array.reset(0);
    expect_pending(
        "NOTIFY_FD COPY after reading one",
        dev.copy_async(src, 0, dst, 0, Some(10), 0, NOTIFY),
    )?;
    expect_errno(
        "NOTIFY_FD COPY beyond the limit again",
        dev.copy_async(src, 0, dst, 0, Some(10), 2, NOTIFY),
        Errno::EBUSY,
    )?;
    let rest = read_n(&dev, N as usize)?;
    let want: Vec<u32> = (1..N).chain([0]).collect();
    if let Some(k) = (0..rest.len()).find(|&k| rest[k] != want[k]) {
        return Err(format!(
            "remaining notification #{k} is {}, expected {} (in submission order)",
            rest[k], want[k]
        ));
    }
    dev.set_nonblocking(true).ctx("O_NONBLOCK")?;
    expect_errno(
        "queue empty at the end",
        dev.read_notifications(&mut [0u32; 4]),
        Errno::EAGAIN,
    )?;
    alarm(0);
    Ok(())
}

/// 4 processes × 1000 asynchronous inline reads with NOTIFY_FD, indexes
/// reused modulo a 32-slot array, reads keeping up: each process sees
/// every request's index exactly once, in submission order, with its slot
/// SUCCESS and its data right.
pub fn notify_fd_4_processes_1000_copies() -> TestResult {
    const PROCS: usize = 4;
    const PER: usize = 1000;
    const N: usize = 32;
    const SRC_LEN: usize = 64 * 1024;
    let owner = Device::open().ctx("open")?;
    let smem = Mem::new(SRC_LEN / PAGE)?;
    smem.write(
        0,
        &(0..SRC_LEN as u64)
            .map(|i| pat(SEED, i))
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
    let mut peers = Vec::new();
    for p in 0..PROCS {
        let peer = spawn_peer(move |chan| {
            alarm(120);
            let dev = Device::open().ctx("open")?;
            let array = dev.map_status_array(N).ctx("mmap 32 slots")?;
            let local = Mem::new(N)?;
            let plan = |k: usize| {
                let size = 1 + (k * 131 + p * 17) % PAGE;
                let off = (k * 4093 + p * 1000) % (SRC_LEN - size);
                (off, size)
            };
            let (mut submitted, mut seen) = (0usize, 0usize);
            let mut buf = [0u32; N];
            while seen < PER {
                // Submit while the array has room (at most N in flight).
                while submitted < PER && submitted - seen < N {
                    let k = submitted;
                    let slot = (k % N) as u32;
                    let (off, size) = plan(k);
                    array.reset(slot as usize);
                    let iov = [Iovec::from_raw(
                        local.addr(slot as usize * PAGE),
                        size as u64,
                    )];
                    // SAFETY: our scratch mapping; the page is only read
                    // after the request's notification.
                    let r =
                        unsafe { dev.read_into_async(src, off as u64, &iov, None, slot, NOTIFY) };
                    expect_pending(&format!("process {p} request {k}"), r)?;
                    submitted += 1;
                }
                // A blocking read fills its buffer: ask for what is in
                // flight at most.
                let n = dev
                    .read_notifications(&mut buf[..submitted - seen])
                    .ctx("read notifications")?;
                for &idx in &buf[..n] {
                    let k = seen;
                    ensure!(
                        k < submitted,
                        "process {p}: notification {idx} with nothing in flight"
                    );
                    let want = (k % N) as u32;
                    ensure!(
                        idx == want,
                        "process {p}: notification #{k} is index {idx}, expected {want}"
                    );
                    let st = array.get_acquire(idx as usize);
                    ensure!(
                        st == Some(Status::Success),
                        "process {p}: request {k} notified with slot {st:?}"
                    );
                    let (off, size) = plan(k);
                    check_bytes(
                        &format!("process {p} request {k}"),
                        &local.read(idx as usize * PAGE, size),
                        |i| pat(SEED, (off + i) as u64),
                    )?;
                    seen += 1;
                }
            }
            dev.set_nonblocking(true).ctx("O_NONBLOCK")?;
            expect_errno(
                &format!("process {p}: queue after {PER} notifications"),
                dev.read_notifications(&mut buf),
                Errno::EAGAIN,
            )?;
            chan.send(seen as u64)
        })?;
        peers.push(peer);
    }
    for (p, mut peer) in peers.into_iter().enumerate() {
        let n = peer.recv().map_err(|e| format!("process {p}: {e}"))?;
        ensure!(n == PER as u64, "process {p} saw {n} notifications");
        peer.finish().map_err(|e| format!("process {p}: {e}"))?;
    }
    owner.destroy_region(src).ctx("DESTROY_REGION")
}
