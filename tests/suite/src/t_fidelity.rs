//! Behaviours a KNEM client can observe and relies on, as KNEM 1.1 has
//! them: the access rule is evaluated with the caller's real uid at each
//! call; a blocking NOTIFY_FD read fills the buffer; flag bits outside a
//! command's mask are dropped, not refused.

use crate::ensure;
use crate::util::*;
use knem::abi::{self, cmd};
use knem::{
    Cookie, CopyFlags, CopyRequest, Device, Errno, InlineCopyRequest, Iovec, Protection,
    RegionFlags, Status,
};
use nix::libc;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::{setresgid, setresuid, Gid, Uid};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// A region of `len` bytes at the start of `mem` (which must outlive it).
fn region(
    dev: &Device,
    mem: &Mem,
    len: u64,
    prot: Protection,
    flags: RegionFlags,
) -> TestResult<Cookie> {
    // SAFETY: our own scratch mapping, only ever snapshotted.
    unsafe { dev.create_region_raw(&[Iovec::from_raw(mem.addr(0), len)], prot, flags) }
        .ctx("CREATE_REGION")
}

fn set_ids(r: u32, e: u32, s: u32) -> TestResult {
    setresuid(Uid::from_raw(r), Uid::from_raw(e), Uid::from_raw(s))
        .ctx(&format!("setresuid({r}, {e}, {s})"))
}

/// A process that opened /dev/knem as root and then changes its uids: the
/// owner of root's regions is compared with its real uid at each copy, so
/// with a real uid of nobody it gets EPERM (before EACCES), even on the
/// regions its own fd created, and ANY_USER_ACCESS regions stay usable;
/// a real uid of root with an effective uid of nobody keeps access.  The
/// refused reads do not consume a single-use region.
pub fn access_checked_with_callers_uid_at_each_call() -> TestResult {
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root to switch uid".into());
    }
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    mem.fill(0x66);
    let private = region(&dev, &mem, 100, Protection::READ_WRITE, RegionFlags::NONE)?;
    let private_ro = region(&dev, &mem, 100, Protection::READ, RegionFlags::NONE)?;
    let private_su = region(&dev, &mem, 100, Protection::READ, RegionFlags::SINGLE_USE)?;
    let shared = region(
        &dev,
        &mem,
        100,
        Protection::READ,
        RegionFlags::ANY_USER_ACCESS,
    )?;
    let mut peer = spawn_peer(move |chan| {
        // Opened as root: the fd's uid is root's from here on.
        let d = Device::open().ctx("open as root")?;
        let own_mem = Mem::new(1)?;
        let mine = region(&d, &own_mem, 100, Protection::READ_WRITE, RegionFlags::NONE)?;
        let mut buf = [0u8; 10];
        expect_success("read as root", d.read_into(private, 0, &mut buf, None))?;
        // Real uid root, effective uid nobody: still root's (real uid).
        set_ids(0, NOBODY, 0)?;
        expect_success(
            "read with real uid root, effective uid nobody",
            d.read_into(private, 0, &mut buf, None),
        )?;
        set_ids(0, 0, 0)?;
        // Real uid nobody, effective uid root: not root's any more.
        set_ids(NOBODY, 0, 0)?;
        expect_errno(
            "read with real uid nobody, effective uid root",
            d.read_into(private, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        set_ids(0, 0, 0)?;
        let nobody = Gid::from_raw(NOBODY);
        setresgid(nobody, nobody, nobody).ctx("setresgid")?;
        set_ids(NOBODY, NOBODY, NOBODY)?;
        expect_errno(
            "read root's region after setuid(nobody)",
            d.read_into(private, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "write root's region after setuid(nobody)",
            d.write_from(private, 0, &buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "write root's read-only region after setuid(nobody) (EPERM before EACCES)",
            d.write_from(private_ro, 0, &buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "read root's single-use region after setuid(nobody)",
            d.read_into(private_su, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "read the region this fd created as root, after setuid(nobody)",
            d.read_into(mine, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "COPY from root's region after setuid(nobody)",
            d.copy(private, 0, shared, 0, None),
            Errno::EPERM,
        )?;
        expect_success(
            "read an ANY_USER_ACCESS region after setuid(nobody)",
            d.read_into(shared, 0, &mut buf, None),
        )?;
        ensure!(buf == [0x66; 10], "ANY_USER_ACCESS read gave {buf:?}");
        expect_errno(
            "write a read-only ANY_USER_ACCESS region",
            d.write_from(shared, 0, &buf, None),
            Errno::EACCES,
        )?;
        d.destroy_region(mine)
            .ctx("DESTROY_REGION of its own region")?;
        chan.send(1)
    })?;
    peer.recv()?;
    peer.finish()?;
    let mut buf = [0u8; 4];
    expect_success(
        "owner reads its single-use region after the refused reads",
        dev.read_into(private_su, 0, &mut buf, None),
    )?;
    ensure!(buf == [0x66; 4], "single-use read gave {buf:?}");
    for c in [private, private_ro, shared] {
        dev.destroy_region(c).ctx("DESTROY_REGION")?;
    }
    Ok(())
}

const NOTIFY: CopyFlags =
    CopyFlags::from_bits_retain(CopyFlags::MEMCPY_THREAD.bits() | CopyFlags::NOTIFY_FD.bits());

extern "C" fn ignore_signal(_: libc::c_int) {}

/// A raw read(2) of `count` bytes into `out`: bytes read or errno.
fn read_raw(dev: &Device, out: &mut [u32], count: usize) -> Result<usize, Errno> {
    assert!(count <= std::mem::size_of_val(out));
    // SAFETY: `out` is writable for at least `count` bytes.
    let n = unsafe { libc::read(dev.as_raw_fd(), out.as_mut_ptr().cast(), count) };
    Errno::result(n).map(|n| n as usize)
}

/// Sends SIGUSR1 to `thread` after `after`.
fn signal_later(thread: libc::pthread_t, after: Duration) {
    std::thread::sleep(after);
    // SAFETY: the thread is the test's main thread, alive (it joins us).
    unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
}

/// A blocking read of N indices returns only once all N were delivered,
/// whatever arrives in between; a signal ends it early with what was
/// read so far (or EINTR when nothing was); a non-blocking read returns
/// what is queued (EAGAIN when nothing is); a count that is not a
/// multiple of 4 is EINVAL.
pub fn notify_fd_blocking_read_fills_buffer() -> TestResult {
    alarm(60);
    // SIGUSR1 interrupts reads (no SA_RESTART) and does nothing else.
    let act = SigAction::new(
        SigHandler::Handler(ignore_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler does nothing.
    unsafe { sigaction(Signal::SIGUSR1, &act) }.ctx("sigaction")?;
    let dev = Device::open().ctx("open")?;
    let s = Mem::new(1)?;
    s.fill(0x3c);
    let d = Mem::new(1)?;
    let src = region(&dev, &s, 4096, Protection::READ, RegionFlags::NONE)?;
    let dst = region(&dev, &d, 4096, Protection::WRITE, RegionFlags::NONE)?;
    let array = dev.map_status_array(16).ctx("mmap 16 slots")?;
    // SAFETY: pthread_self cannot fail.
    let main = unsafe { libc::pthread_self() };
    let mut out = [0u32; 4];

    // Three completions 300 ms apart: one read of 3 gets all three.
    let got = std::thread::scope(|sc| {
        let submitter = sc.spawn(|| -> TestResult {
            for idx in [1u32, 2, 3] {
                std::thread::sleep(Duration::from_millis(300));
                expect_pending(
                    &format!("COPY slot {idx}"),
                    dev.copy_async(src, 0, dst, 0, Some(100), idx, NOTIFY),
                )?;
            }
            Ok(())
        });
        let r = read_raw(&dev, &mut out, 12);
        submitter.join().map_err(|_| "submitter panicked")??;
        Ok::<_, String>(r)
    })?;
    ensure!(
        got == Ok(12) && out[..3] == [1, 2, 3],
        "blocking read of 3 indices: {got:?} {:?}, expected 12 bytes [1, 2, 3]",
        &out[..got.unwrap_or(0).min(16) / 4]
    );

    // A signal after one of two: what was read so far.
    let got = std::thread::scope(|sc| {
        sc.spawn(|| {
            let r = dev.copy_async(src, 0, dst, 0, Some(100), 4, NOTIFY);
            let _ = wait_slot(&array, 4, "COPY slot 4");
            signal_later(main, Duration::from_millis(300));
            r
        });
        read_raw(&dev, &mut out, 8)
    });
    ensure!(
        got == Ok(4) && out[0] == 4,
        "read of 2 indices interrupted after 1: {got:?} {:?}, expected 4 bytes [4]",
        out[0]
    );
    // A signal before any: EINTR.
    let got = std::thread::scope(|sc| {
        sc.spawn(|| signal_later(main, Duration::from_millis(300)));
        read_raw(&dev, &mut out, 4)
    });
    ensure!(
        got == Err(Errno::EINTR),
        "read interrupted before any index: {got:?}, expected EINTR"
    );

    // Whole indices only.
    for count in [1usize, 3, 5, 6, 15] {
        let got = read_raw(&dev, &mut out, count);
        ensure!(
            got == Err(Errno::EINVAL),
            "read of {count} bytes: {got:?}, expected EINVAL"
        );
    }

    // Non-blocking: what is queued, EAGAIN when nothing is.
    dev.set_nonblocking(true).ctx("O_NONBLOCK")?;
    ensure!(
        read_raw(&dev, &mut out, 16) == Err(Errno::EAGAIN),
        "non-blocking read of an empty queue: {:?}",
        read_raw(&dev, &mut out, 16)
    );
    for idx in [5u32, 6] {
        expect_pending(
            &format!("COPY slot {idx}"),
            dev.copy_async(src, 0, dst, 0, Some(100), idx, NOTIFY),
        )?;
        wait_slot_success(&array, idx, &format!("COPY slot {idx}"))?;
    }
    ensure!(
        dev.poll_readable(Some(Duration::from_secs(20)))
            .ctx("poll")?,
        "not readable after two completions"
    );
    let got = read_raw(&dev, &mut out, 16);
    ensure!(
        got == Ok(8) && out[..2] == [5, 6],
        "non-blocking read of 4 with 2 queued: {got:?} {:?}",
        &out[..2]
    );
    ensure!(
        read_raw(&dev, &mut out, 0) == Ok(0),
        "read of 0 bytes: {:?}",
        read_raw(&dev, &mut out, 0)
    );
    alarm(0);
    ensure!(
        d.read(0, 100) == [0x3c; 100],
        "the notified copies did not land"
    );
    dev.destroy_region(src).ctx("DESTROY_REGION")?;
    dev.destroy_region(dst).ctx("DESTROY_REGION")
}

/// Copies with SINGLEUSE, ANY_USER_ACCESS or undefined flag bits proceed
/// as if those bits were clear (every copy command, every byte checked);
/// flags = 63 is an offload-thread copy; CREATE_REGION keeps SINGLEUSE and
/// ANY_USER_ACCESS and drops the rest; the legacy commands do the same.
pub fn flags_outside_mask_are_ignored() -> TestResult {
    alarm(60);
    let dev = Device::open().ctx("open")?;
    let other = Device::open().ctx("open second fd")?;
    let mem = Mem::new(1)?;
    mem.write(0, &(0..4096u64).map(|i| pat(0x5a, i)).collect::<Vec<_>>());
    let c = region(&dev, &mem, 4096, Protection::READ_WRITE, RegionFlags::NONE)?;
    let ignored = [
        1u32 << 8,
        1 << 9,
        1 << 16,
        1 << 31,
        0xffff_ff00,
        abi::KNEM_FLAG_SINGLEUSE,
        abi::KNEM_FLAG_ANY_USER_ACCESS,
        abi::KNEM_FLAG_SINGLEUSE | abi::KNEM_FLAG_ANY_USER_ACCESS | 1 << 8,
    ];
    let local_mem = Mem::new(1)?;
    for (n, &f) in ignored.iter().enumerate() {
        let flags = CopyFlags::from_bits_retain(f);
        for length in [None, Some(16)] {
            let want_len = length.unwrap_or(64) as usize;
            // Read 64 (or 16) bytes at offset 100 + n.
            local_mem.fill(0);
            let off = 100 + n as u64;
            let local = [Iovec::from_raw(local_mem.addr(0), 64)];
            let req = InlineCopyRequest {
                local: &local,
                write: false,
                cookie: c,
                offset: off,
                length,
                flags,
                async_status_index: 0xffff,
            };
            // SAFETY: our scratch mapping.
            let r = unsafe { other.inline_copy(&req) };
            let what = format!("inline read with flags {f:#x}, length {length:?}");
            expect_success(&what, r)?;
            check_bytes(&what, &local_mem.read(0, want_len), |i| {
                pat(0x5a, off + i as u64)
            })?;
            // Write them back at offset 2048 + 64n.
            let woff = 2048 + 64 * n as u64;
            let req = InlineCopyRequest {
                write: true,
                offset: woff,
                ..req
            };
            // SAFETY: our scratch mapping, only read by the driver.
            let r = unsafe { other.inline_copy(&req) };
            let what = format!("inline write with flags {f:#x}, length {length:?}");
            expect_success(&what, r)?;
            check_bytes(&what, &mem.read(woff as usize, want_len), |i| {
                pat(0x5a, off + i as u64)
            })?;
            // Region to region: 16 (or 64) bytes from offset 0 to 1024.
            let r = other.copy_with(&CopyRequest {
                src: c,
                src_offset: 0,
                dst: c,
                dst_offset: 1024,
                length,
                flags,
                async_status_index: 0xffff,
            });
            let what = format!("COPY with flags {f:#x}, length {length:?}");
            expect_success(&what, r)?;
            check_bytes(&what, &mem.read(1024, want_len), |i| pat(0x5a, i as u64))?;
        }
    }
    // Every copy flag plus SINGLEUSE: an offload-thread copy.
    let array = other.map_status_array(4).ctx("mmap 4 slots")?;
    local_mem.fill(0);
    let local = [Iovec::from_raw(local_mem.addr(0), 4096)];
    let req = InlineCopyRequest {
        local: &local,
        write: false,
        cookie: c,
        offset: 0,
        length: None,
        flags: CopyFlags::from_bits_retain(63),
        async_status_index: 2,
    };
    // SAFETY: our scratch mapping, read only after the slot says SUCCESS.
    expect_pending("inline read with flags 63", unsafe {
        other.inline_copy(&req)
    })?;
    wait_slot_success(&array, 2, "inline read with flags 63")?;
    check_bytes("inline read with flags 63", &local_mem.read(0, 4096), |i| {
        mem.read(i, 1)[0]
    })?;
    dev.destroy_region(c).ctx("DESTROY_REGION")?;

    // CREATE_REGION: undefined bits and DMA dropped, the rest kept.
    let mut buf = [0u8; 8];
    for f in [1u32 << 8, 1 << 31, abi::KNEM_FLAG_DMA, 0xffff_ff00] {
        let r = region(
            &dev,
            &mem,
            64,
            Protection::READ,
            RegionFlags::from_bits_retain(f),
        )
        .map_err(|e| format!("CREATE_REGION with flags {f:#x}: {e}"))?;
        for k in 0..2 {
            expect_success(
                &format!("read {k} of a region created with flags {f:#x}"),
                other.read_into(r, 0, &mut buf, None),
            )?;
        }
        dev.destroy_region(r).ctx("DESTROY_REGION")?;
    }
    let r = region(
        &dev,
        &mem,
        64,
        Protection::READ,
        RegionFlags::from_bits_retain(u32::MAX),
    )
    .map_err(|e| format!("CREATE_REGION with flags 0xffffffff: {e}"))?;
    expect_success(
        "first read of a region created with every flag",
        other.read_into(r, 0, &mut buf, None),
    )?;
    expect_errno(
        "second read of a region created with every flag (single-use)",
        other.read_into(r, 0, &mut buf, None),
        Errno::EINVAL,
    )?;

    // Legacy: INIT_SEND and SYNC_RECV with bits they do not use.
    let iov = [Iovec::from_raw(mem.addr(0), 300)];
    let mut send = abi::knem_cmd_init_send_param {
        send_iovec_array: iov.as_ptr() as u64,
        send_iovec_nr: 1,
        flags: 1 << 8 | abi::KNEM_FLAG_DMA,
        send_cookie: 0,
    };
    // SAFETY: the command's struct over our mapping, read-only.
    unsafe {
        dev.raw_ioctl(
            cmd::INIT_SEND,
            (&mut send as *mut abi::knem_cmd_init_send_param).cast(),
        )
    }
    .map_err(|e| format!("INIT_SEND with flags {:#x}: {e:?}", send.flags))?;
    local_mem.fill(0);
    let mut recv = abi::knem_cmd_sync_recv_param {
        recv_iovec_array: local.as_ptr() as u64,
        recv_iovec_nr: 1,
        status: 0xdead,
        send_cookie: send.send_cookie,
        flags: 1 << 8 | abi::KNEM_FLAG_MEMCPYTHREAD | abi::KNEM_FLAG_NOTIFY_FD,
        pad: 0,
    };
    // SAFETY: the command's struct; the local segment is ours.
    unsafe {
        other.raw_ioctl(
            cmd::SYNC_RECV,
            (&mut recv as *mut abi::knem_cmd_sync_recv_param).cast(),
        )
    }
    .map_err(|e| format!("SYNC_RECV with flags {:#x}: {e:?}", recv.flags))?;
    ensure!(
        Status::from_raw(recv.status) == Status::Success,
        "SYNC_RECV with async flags: status {}, expected SUCCESS now",
        recv.status
    );
    check_bytes("SYNC_RECV", &local_mem.read(0, 300), |i| mem.read(i, 1)[0])?;
    alarm(0);
    Ok(())
}
