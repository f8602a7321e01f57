//! Issue 33, M1: the node's pool of pins not checked yet (knem_pin.c)
//! must not be held hostage by callers whose GUP never completes.
//!
//! Before, a call reserved up to 2^16 pins of the 2^20 pool and held them
//! across its GUP, which sleeps for as long as a userfaultfd handler does
//! not answer: 16 such calls emptied the pool and every other user's
//! CREATE_REGION or PINLOCAL copy waited for it in `wait_event_killable`.
//! Now a call reserves a small chunk at a time, right before pinning it.

use crate::ensure;
use crate::util::*;
use knem::{CopyFlags, Device, InlineCopyRequest, Iovec, Protection, RegionFlags, Status};
use nix::libc;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Stalled callers, each asking for the old per-call maximum of 2^16
/// pages: together the whole production pool of 2^20.
const STALLERS: usize = 16;
const STALL_PAGES: usize = 1 << 16;
/// How long another uid's one-page pins may take meanwhile (TCG on a
/// loaded host: they take milliseconds when nothing holds the pool).
const VICTIM_DEADLINE: Duration = Duration::from_secs(60);

// <linux/userfaultfd.h>
const UFFD_API: u64 = 0xaa;
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f; // _IOWR(0xaa, 0x3f, 24 bytes)
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00; // _IOWR(0xaa, 0x00, 32 bytes)
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_MSG_SIZE: usize = 32;

/// What the stalling process reports: every GUP waits in the uffd, or one
/// returned (`NO_STALL | errno`) without waiting.
const STALLED: u64 = 1;
const NO_STALL: u64 = 1 << 32;

/// A userfaultfd for kernel and user faults (no UFFD_USER_MODE_ONLY: a
/// GUP's fault must wait for the handler), with `len` bytes from `addr`
/// registered for missing pages.  Nothing ever resolves them.
fn userfaultfd_over(addr: u64, len: u64) -> TestResult<OwnedFd> {
    // SAFETY: plain system call with integer flags.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(skip(format!(
            "userfaultfd() for kernel faults: {e} (needs CAP_SYS_PTRACE or vm.unprivileged_userfaultfd=1)"
        )));
    }
    // SAFETY: a new fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let mut api = [UFFD_API, 0, 0];
    // SAFETY: struct uffdio_api is three u64s.
    if unsafe { libc::ioctl(raw, UFFDIO_API, api.as_mut_ptr()) } != 0 {
        return Err(format!("UFFDIO_API: {}", std::io::Error::last_os_error()));
    }
    let mut reg = [addr, len, UFFDIO_REGISTER_MODE_MISSING, 0];
    // SAFETY: struct uffdio_register is four u64s.
    if unsafe { libc::ioctl(raw, UFFDIO_REGISTER, reg.as_mut_ptr()) } != 0 {
        return Err(format!(
            "UFFDIO_REGISTER: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(fd)
}

/// The stalling process: `STALLERS` threads each create a region of
/// `STALL_PAGES` pages over a userfaultfd range nobody serves, at distinct
/// first pages; once the uffd has reported all their faults (every GUP is
/// asleep in it, past its reservation) it sends 1 and waits to be killed.
fn staller(chan: &mut Chan) -> TestResult {
    let len = (STALLERS + STALL_PAGES) * PAGE;
    // SAFETY: a new private mapping; no page is ever touched (they would
    // fault into the uffd), only handed to the driver.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    ensure!(
        base != libc::MAP_FAILED,
        "mmap {len}: {}",
        std::io::Error::last_os_error()
    );
    let base = base as u64;
    let uffd = userfaultfd_over(base, len as u64)?;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for i in 0..STALLERS {
        let dev = Device::open().ctx("open")?;
        let done_tx = done_tx.clone();
        std::thread::spawn(move || {
            let iov = [Iovec::from_raw(
                base + (i * PAGE) as u64,
                (STALL_PAGES * PAGE) as u64,
            )];
            // SAFETY: the mapping lives as long as the process; the call
            // returns only where the kernel does not wait for the uffd.
            let r =
                unsafe { dev.create_region_raw(&iov, Protection::READ_WRITE, RegionFlags::NONE) };
            let _ = done_tx.send(r.err().and_then(|e| e.errno()).map_or(0, |e| e as i32));
        });
    }
    // Reading the messages does not resolve the faults.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let raw = std::os::fd::AsRawFd::as_raw_fd(&uffd);
    while seen.len() < STALLERS {
        if let Ok(errno) = done_rx.try_recv() {
            chan.send(NO_STALL | errno as u64)?;
            let _ = chan.recv();
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "only {} of {STALLERS} GUPs reached the userfaultfd in 120 s",
            seen.len()
        );
        let mut pfd = libc::pollfd {
            fd: raw,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 1000) } <= 0 {
            continue;
        }
        let mut msg = [0u8; UFFD_MSG_SIZE];
        // SAFETY: reads one struct uffd_msg into msg.
        let n = unsafe { libc::read(raw, msg.as_mut_ptr().cast(), UFFD_MSG_SIZE) };
        ensure!(
            n == UFFD_MSG_SIZE as isize,
            "read uffd: {n} ({})",
            std::io::Error::last_os_error()
        );
        ensure!(
            msg[0] == UFFD_EVENT_PAGEFAULT,
            "uffd event {:#x}, expected a page fault",
            msg[0]
        );
        let mut a = [0u8; 8];
        a.copy_from_slice(&msg[16..24]);
        seen.insert(u64::from_ne_bytes(a) & !(PAGE as u64 - 1));
    }
    eprintln!("pin_pool_not_held_by_stalled_gup: {STALLERS} GUPs wait in the userfaultfd");
    chan.send(STALLED)?;
    // Until killed; the uffd stays open, so the faults stay unresolved.
    let _ = chan.recv();
    drop(uffd);
    Ok(())
}

/// Another uid, meanwhile: a one-page region, and a PINLOCAL copy out of
/// it, bytes checked.
fn victim() -> TestResult {
    become_nobody()?;
    let dev = Device::open().ctx("open as nobody")?;
    let mem = Mem::new(2)?;
    for i in 0..PAGE {
        mem.write(i, &[pat(33, i as u64)]);
    }
    let cookie = region_at(&dev, &mem, 0, PAGE, Protection::READ, RegionFlags::NONE)?;
    let local = [Iovec::from_raw(mem.addr(PAGE), PAGE as u64)];
    let req = InlineCopyRequest {
        local: &local,
        write: false,
        cookie,
        offset: 0,
        length: None,
        flags: CopyFlags::PIN_LOCAL,
        async_status_index: 0,
    };
    // SAFETY: our own mapping.
    match unsafe { dev.inline_copy(&req) } {
        Ok(Status::Success) => {}
        other => return Err(format!("PINLOCAL copy: {other:?}, expected SUCCESS")),
    }
    check_bytes("PINLOCAL copy", &mem.read(PAGE, PAGE), |i| {
        pat(33, i as u64)
    })?;
    dev.destroy_region(cookie).ctx("destroy")
}

/// 16 threads (root, with a userfaultfd for kernel faults) stall in the
/// GUP of CREATE_REGION over 2^16 pages each, the old per-call
/// reservation, i.e. the whole pool; meanwhile uid nobody's one-page
/// CREATE_REGION and PINLOCAL copy must complete within 60 s (they waited
/// for the pool until killed before).  Killing the stalled process then
/// ends it promptly, and the harness checks that nothing stays pinned.
pub fn pin_pool_not_held_by_stalled_gup() -> TestResult {
    with_device_open_to_all(|| {
        let mut stall = spawn_peer(staller)?;
        match stall.recv()? {
            STALLED => {}
            v if v & NO_STALL != 0 => {
                return Err(skip(format!(
                    "a CREATE_REGION over a userfaultfd range returned ({:?}) instead of waiting for the handler: this kernel's FOLL_LONGTERM GUP pins with mmap_lock held and no FAULT_FLAG_ALLOW_RETRY (5.10, 6.1), so handle_userfault() answers SIGBUS",
                    knem::Errno::from_raw((v & 0xffff_ffff) as i32)
                )))
            }
            v => return Err(format!("the stalling process sent {v:#x}")),
        }
        let start = Instant::now();
        let v = spawn_peer(|_| victim())?;
        eprintln!("pin_pool_not_held_by_stalled_gup: uid nobody pins meanwhile");
        let vpid = v.pid();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(v.finish());
        });
        let outcome = rx.recv_timeout(VICTIM_DEADLINE);
        if outcome.is_err() {
            let _ = nix::sys::signal::kill(vpid, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = waiter.join();
        let took = start.elapsed();
        let killed = stall.kill_timed()?;
        match outcome {
            Ok(r) => r.map_err(|e| format!("uid nobody's pins while {STALLERS} GUPs stall: {e}"))?,
            Err(_) => {
                return Err(format!(
                    "uid nobody's one-page CREATE_REGION and PINLOCAL copy did not complete in {} s while {STALLERS} GUPs of {STALL_PAGES} pages stall in a userfaultfd",
                    VICTIM_DEADLINE.as_secs()
                ))
            }
        }
        eprintln!(
            "pin_pool_not_held_by_stalled_gup: nobody's pins took {} ms beside {STALLERS} stalled GUPs; the stalled process died in {} ms",
            took.as_millis(),
            killed.as_millis()
        );
        ensure!(
            killed < Duration::from_secs(30),
            "SIGKILL took {} ms to end the stalled GUPs",
            killed.as_millis()
        );
        Ok(())
    })
}
