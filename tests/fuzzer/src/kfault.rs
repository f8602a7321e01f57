//! `--kernel-faults`: the kernel's own fault injection aimed at the module.
//!
//! tests/faults/in-vm.sh sets failslab, fail_page_alloc, fail_usercopy or
//! fail_function with `task-filter=Y`: they then fail allocations, user
//! copies and the module's error-injectable functions only in tasks whose
//! `/proc/<tid>/make-it-fail` is 1.  Each fuzzing process sets its own to
//! 1 for the length of each call into /dev/knem (ioctl, mmap, read, write,
//! open, close) and back to 0 after, so the failures land in the module's
//! paths and not in the fuzzer's own fork, mmap or page faults, and the
//! count the script reads (the `times` left) is a count of failures
//! injected into /dev/knem calls.  Only root's processes are windowed:
//! writing make-it-fail takes CAP_SYS_RESOURCE, so a process that dropped
//! to nobody runs its calls without faults.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static ON: AtomicBool = AtomicBool::new(false);
/// This process's make-it-fail, and the pid it was opened for: a forked
/// child inherits its parent's fd, which names the parent's task.
static FD: AtomicI32 = AtomicI32::new(-1);
static FOR_PID: AtomicI32 = AtomicI32::new(0);

/// Turn the windows on for this process and every process forked after.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Open this process's make-it-fail unless it is open already; call it in
/// a fresh child before it gives up root (the file is root's).  The
/// processes are single-threaded, so the thread's file is the process's.
/// A process that cannot open it stops (exit status 3, which the parent
/// reports): running on without the faults would count for nothing.
pub fn reopen() {
    // SAFETY: geteuid cannot fail.
    if !enabled() || unsafe { libc::geteuid() } != 0 {
        return; // see `during`
    }
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    if FOR_PID.load(Ordering::Relaxed) == pid {
        return;
    }
    let old = FD.swap(-1, Ordering::Relaxed);
    if old >= 0 {
        // SAFETY: the parent's fd, which this process must not use.
        unsafe { libc::close(old) };
    }
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c"/proc/thread-self/make-it-fail".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        crate::engine::say(&format!(
            "knem-fuzz: --kernel-faults: cannot open /proc/thread-self/make-it-fail: {}",
            std::io::Error::last_os_error()
        ));
        // SAFETY: leave at once; the parent reports the exit status.
        unsafe { libc::_exit(3) };
    }
    FD.store(fd, Ordering::Relaxed);
    FOR_PID.store(pid, Ordering::Relaxed);
}

/// Write `v` to make-it-fail.  Turning it off can itself be failed by
/// fail_usercopy (the write copies from user memory while it is still on):
/// it is retried, and a process that cannot turn it off stops.
fn set(fd: i32, v: &[u8]) {
    for _ in 0..10_000 {
        // SAFETY: a write of our own bytes to our fd.
        if unsafe { libc::pwrite(fd, v.as_ptr().cast(), v.len(), 0) } == v.len() as isize {
            return;
        }
    }
    crate::engine::say(&format!(
        "knem-fuzz: --kernel-faults: writing make-it-fail failed 10000 times, last with {}",
        std::io::Error::last_os_error()
    ));
    // SAFETY: leave at once; the parent reports the exit status.
    unsafe { libc::_exit(3) };
}

/// Run `f` (one call into /dev/knem) with this process's make-it-fail on,
/// keeping the errno `f` left.
pub fn during<R>(f: impl FnOnce() -> R) -> R {
    // Writing make-it-fail takes CAP_SYS_RESOURCE: a process that gave
    // up root (and its children) runs its calls without faults.
    // SAFETY: geteuid cannot fail.
    if !enabled() || unsafe { libc::geteuid() } != 0 {
        return f();
    }
    reopen();
    let fd = FD.load(Ordering::Relaxed);
    set(fd, b"1");
    let r = f();
    // SAFETY: errno is thread-local.
    let e = unsafe { *libc::__errno_location() };
    set(fd, b"0");
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
    r
}
