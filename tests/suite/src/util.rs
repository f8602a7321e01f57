//! Helpers shared by the tests: raw memory, patterns, segment layouts, peer
//! processes, and checks that return `Err(String)` instead of panicking
//! (the release profile aborts on panic).

use knem::{Errno, Iovec, Status};
use nix::sys::mman::{mmap_anonymous, mprotect, munmap, MapFlags, ProtFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, pipe, ForkResult, Pid};
use std::fs::File;
use std::io::{Read, Write};
use std::num::NonZeroUsize;
use std::ptr::NonNull;

/// Result type of every test and helper.
pub type TestResult<T = ()> = Result<T, String>;

/// How the message of a test that could not run here begins (see [`skip`]).
pub const SKIP_PREFIX: &str = "skipped: ";

/// The `Err` of a test that cannot run here, saying why: the harness
/// reports it as skipped, never as passed (and as failed with `--no-skip`).
/// Only an `Err` that is exactly this is a skip; context added on top
/// (`.ctx(..)`) turns it into a failure.
pub fn skip(why: impl std::fmt::Display) -> String {
    format!("{SKIP_PREFIX}{why}")
}

/// How the skip of a part that only a fault-injection build can run
/// begins (see [`skip_fault`]).
pub const FAULT_SKIP: &str = "not a fault-injection build (KNEM_FAULT_INJECT=1): ";

/// The skip of a test whose rest needs a fault-injection build's test-only
/// module parameters, after what a release build can check passed.  With
/// `--no-skip` the harness fails it only when the loaded module is a
/// fault-injection build (where it cannot happen): a release module has
/// no way to run it, and runs that load one with `--no-skip` (the
/// DMA-provider suite) still report it as a skip.
pub fn skip_fault(why: impl std::fmt::Display) -> String {
    skip(format!("{FAULT_SKIP}{why}"))
}

/// Whether the loaded knem is a fault-injection build: it has the
/// test-only `fault_*` parameters.
pub fn fault_build() -> bool {
    std::fs::read_dir("/sys/module/knem/parameters")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("fault_"))
        })
        .unwrap_or(false)
}

/// Page size the driver and these tests assume.
pub const PAGE: usize = 4096;

/// `Err(format!(...))` unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// Add context to an error.
pub trait Context<T> {
    /// Prefix the error with `what`.
    fn ctx(self, what: &str) -> TestResult<T>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> TestResult<T> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// The call must fail with exactly `want`.
pub fn expect_errno<T: std::fmt::Debug>(what: &str, r: knem::Result<T>, want: Errno) -> TestResult {
    match r {
        Err(e) if e.errno() == Some(want) => Ok(()),
        Err(e) => Err(format!("{what}: expected {want:?}, got {e}")),
        Ok(v) => Err(format!("{what}: expected {want:?}, got success ({v:?})")),
    }
}

/// Same for a raw ioctl.
pub fn expect_raw_errno(what: &str, r: Result<i32, Errno>, want: Errno) -> TestResult {
    match r {
        Err(e) if e == want => Ok(()),
        Err(e) => Err(format!("{what}: expected {want:?}, got {e:?}")),
        Ok(v) => Err(format!(
            "{what}: expected {want:?}, got success (returned {v})"
        )),
    }
}

/// The call must succeed with status SUCCESS.
pub fn expect_success(what: &str, r: knem::Result<Status>) -> TestResult {
    match r {
        Ok(Status::Success) => Ok(()),
        Ok(s) => Err(format!("{what}: expected status SUCCESS, got {s}")),
        Err(e) => Err(format!("{what}: expected SUCCESS, got {e}")),
    }
}

/// A byte of a test pattern: position-dependent, not periodic in pages.
pub fn pat(seed: u8, i: u64) -> u8 {
    ((i.wrapping_add(seed as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 56) as u8)
        ^ seed
}

/// Anonymous private memory, accessed only through raw pointers and
/// volatile copies, so the driver may write it behind Rust's back.
///
/// # Invariants
///
/// `ptr` is a live mapping of `len` bytes owned by this value.
pub struct Mem {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mem {
    /// `pages` fresh zeroed pages.
    pub fn new(pages: usize) -> TestResult<Self> {
        let len = pages * PAGE;
        let n = NonZeroUsize::new(len).ok_or("Mem::new(0)")?;
        // SAFETY: a new private mapping at an address the kernel picks.
        let p = unsafe {
            mmap_anonymous(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .ctx("mmap")?;
        // INVARIANT: just mapped, owned by us.
        Ok(Self { ptr: p.cast(), len })
    }

    /// User address of byte `off`.
    pub fn addr(&self, off: usize) -> u64 {
        self.ptr.as_ptr() as u64 + off as u64
    }

    /// Set every byte to `b`.
    pub fn fill(&self, b: u8) {
        // SAFETY: the mapping is live and len bytes long.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), b, self.len) };
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Write `data` at `off` (must fit).
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds (checked), the mapping is live.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        };
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Copy of the whole mapping as it is now.
    pub fn snapshot(&self) -> Vec<u8> {
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        let mut v = vec![0u8; self.len];
        for (i, b) in v.iter_mut().enumerate() {
            // SAFETY: i < len, the mapping is live; volatile because the
            // driver writes this memory without Rust knowing.
            *b = unsafe { self.ptr.as_ptr().add(i).read_volatile() };
        }
        v
    }

    /// Copy of bytes `[off, off + len)` as they are now (must fit).
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        (0..len)
            // SAFETY: in bounds (checked), the mapping is live; volatile as
            // in snapshot().
            .map(|i| unsafe { self.ptr.as_ptr().add(off + i).read_volatile() })
            .collect()
    }

    /// Change the protection of pages `[first, first + n)`.
    pub fn protect(&self, first: usize, n: usize, prot: ProtFlags) -> TestResult {
        assert!((first + n) * PAGE <= self.len);
        // SAFETY: the pages are ours; nothing in Rust holds a reference.
        unsafe {
            mprotect(
                NonNull::new_unchecked(self.ptr.as_ptr().add(first * PAGE).cast()),
                n * PAGE,
                prot,
            )
        }
        .ctx("mprotect")
    }

    /// Unmap pages `[first, first + n)`, leaving a hole.
    pub fn punch(&self, first: usize, n: usize) -> TestResult {
        assert!((first + n) * PAGE <= self.len);
        // SAFETY: the pages are ours; reading them afterwards would fault,
        // so callers only hand their addresses to the driver.  Drop unmaps
        // the whole range again, which is harmless for a hole.
        unsafe {
            munmap(
                NonNull::new_unchecked(self.ptr.as_ptr().add(first * PAGE).cast()),
                n * PAGE,
            )
        }
        .ctx("munmap")
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: our mapping (type invariant).
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

/// An address range that is not mapped (mapped then unmapped).
pub fn unmapped_addr(pages: usize) -> TestResult<u64> {
    let m = Mem::new(pages)?;
    Ok(m.addr(0))
}

/// Segments as (offset, length) pairs inside a [`Mem`].
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Pages of the backing mapping.
    pub pages: usize,
    /// The segments.
    pub segs: &'static [(usize, usize)],
}

/// Three segments of odd sizes with unaligned starts, each crossing pages.
pub const REGION3: Layout = Layout {
    pages: 12,
    segs: &[(13, 5003), (3 * PAGE + 4000, 4099), (8 * PAGE + 1, 9000)],
};

/// Two local segments, larger than [`REGION3`] in total.
pub const LOCAL2_BIG: Layout = Layout {
    pages: 12,
    segs: &[(777, 3001), (2 * PAGE + 4095, 20000)],
};

/// Two local segments, smaller than most copies: the local side clamps.
pub const LOCAL2_SMALL: Layout = Layout {
    pages: 4,
    segs: &[(4000, 300), (2 * PAGE + 5, 400)],
};

impl Layout {
    /// Sum of segment lengths.
    pub fn total(&self) -> u64 {
        self.segs.iter().map(|s| s.1 as u64).sum()
    }

    /// Pages each segment spans, summed (what pinning them costs).
    pub fn pinned_pages(&self) -> u64 {
        self.segs
            .iter()
            .filter(|s| s.1 > 0)
            .map(|&(o, l)| ((o + l).div_ceil(PAGE) - o / PAGE) as u64)
            .sum()
    }

    /// The segments as iovecs over `mem`.
    pub fn iovecs(&self, mem: &Mem) -> Vec<Iovec> {
        self.segs
            .iter()
            .map(|&(o, l)| Iovec::from_raw(mem.addr(o), l as u64))
            .collect()
    }

    /// Offset in the mapping of flattened byte `i`.
    pub fn locate(&self, mut i: usize) -> Option<usize> {
        for &(o, l) in self.segs {
            if i < l {
                return Some(o + i);
            }
            i -= l;
        }
        None
    }

    /// Write `f(i)` at every flattened position `i`.
    pub fn fill_with(&self, mem: &Mem, f: impl Fn(u64) -> u8) {
        let mut i = 0u64;
        for &(o, l) in self.segs {
            let v: Vec<u8> = (0..l as u64).map(|k| f(i + k)).collect();
            mem.write(o, &v);
            i += l as u64;
        }
    }

    /// Compare a snapshot of the whole mapping with what it should hold:
    /// `background` everywhere except flattened positions `[start, start+n)`,
    /// which hold `f(position - start)`.  Reports the first difference.
    pub fn verify(
        &self,
        snap: &[u8],
        background: impl Fn(usize) -> u8,
        start: u64,
        n: u64,
        f: impl Fn(u64) -> u8,
    ) -> TestResult {
        let mut want: Vec<u8> = (0..snap.len()).map(&background).collect();
        let mut k = 0u64;
        while k < n {
            let Some(off) = self.locate((start + k) as usize) else {
                return Err(format!(
                    "verify: position {} is outside the layout",
                    start + k
                ));
            };
            want[off] = f(k);
            k += 1;
        }
        if let Some(at) = (0..snap.len()).find(|&i| snap[i] != want[i]) {
            let flat = self.flat_index(at);
            return Err(format!(
                "byte at mapping offset {at} ({}) is {:#04x}, expected {:#04x}",
                match flat {
                    Some(p) => format!("flattened {p}"),
                    None => "outside the segments".to_string(),
                },
                snap[at],
                want[at]
            ));
        }
        Ok(())
    }

    /// Flattened position of mapping offset `at`, if inside a segment.
    pub fn flat_index(&self, at: usize) -> Option<usize> {
        let mut base = 0;
        for &(o, l) in self.segs {
            if at >= o && at < o + l {
                return Some(base + at - o);
            }
            base += l;
        }
        None
    }
}

/// Bytes a clamped copy moves: `min(remote - offset, local, length)`.
pub fn expected_len(remote: u64, offset: u64, local: u64, length: Option<u64>) -> u64 {
    remote
        .saturating_sub(offset)
        .min(local)
        .min(length.unwrap_or(u64::MAX))
}

/// One end of a pair of pipes between a test and its peer process.
pub struct Chan {
    rx: File,
    tx: File,
}

impl Chan {
    /// Send one u64.
    pub fn send(&mut self, v: u64) -> TestResult {
        self.tx.write_all(&v.to_le_bytes()).ctx("pipe write")
    }

    /// Whether a value (or the end of the channel) is waiting: a poll that
    /// does not block.
    pub fn ready(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut fds = [nix::libc::pollfd {
            fd: self.rx.as_raw_fd(),
            events: nix::libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: one pollfd of ours, no wait.
        unsafe { nix::libc::poll(fds.as_mut_ptr(), 1, 0) > 0 }
    }

    /// Receive one u64; `Err` when the other side has gone.
    pub fn recv(&mut self) -> TestResult<u64> {
        let mut b = [0u8; 8];
        self.rx
            .read_exact(&mut b)
            .map_err(|e| format!("peer channel closed ({e})"))?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A forked peer process running a closure.  Killed and reaped on drop if
/// the test gives up on it early.
pub struct Peer {
    pid: Pid,
    chan: Chan,
    err: File,
    reaped: bool,
}

/// Encode a copy outcome as one u64 for the channel: the status in the low
/// bits, or `1 << 63 | errno`.
pub fn encode_outcome(r: &knem::Result<Status>) -> u64 {
    match r {
        Ok(s) => s.to_raw() as u64,
        Err(e) => (1 << 63) | e.errno().map(|e| e as i32 as u64).unwrap_or(0xffff),
    }
}

/// Inverse of [`encode_outcome`], as text for messages.
pub fn decode_outcome(v: u64) -> Result<Status, String> {
    if v & (1 << 63) != 0 {
        Err(format!("{:?}", Errno::from_raw((v & 0xffff) as i32)))
    } else {
        Ok(Status::from_raw(v as u32))
    }
}

/// Start a peer process that runs `f` and exits; its `Err` message is
/// passed back and reported by [`Peer::finish`] or [`Peer::recv`].
pub fn spawn_peer(f: impl FnOnce(&mut Chan) -> TestResult) -> TestResult<Peer> {
    let (p2c_r, p2c_w) = pipe().ctx("pipe")?;
    let (c2p_r, c2p_w) = pipe().ctx("pipe")?;
    let (err_r, err_w) = pipe().ctx("pipe")?;
    let _ = std::io::stdout().flush();
    // SAFETY: the test process is single-threaded; the child only runs the
    // closure and exits without returning into the harness.
    match unsafe { fork() }.ctx("fork")? {
        ForkResult::Child => {
            // Die with the test, whatever happens to it.
            // SAFETY: plain prctl with integer arguments.
            unsafe { nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL) };
            drop((p2c_w, c2p_r, err_r));
            let mut chan = Chan {
                rx: File::from(p2c_r),
                tx: File::from(c2p_w),
            };
            let code = match f(&mut chan) {
                Ok(()) => 0,
                Err(msg) => {
                    let _ = File::from(err_w).write_all(msg.as_bytes());
                    1
                }
            };
            drop(chan);
            // SAFETY: leaving without running the harness's destructors.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => Ok(Peer {
            pid: child,
            chan: Chan {
                rx: File::from(c2p_r),
                tx: File::from(p2c_w),
            },
            err: File::from(err_r),
            reaped: false,
        }),
    }
}

impl Peer {
    /// Send one u64 to the peer.
    pub fn send(&mut self, v: u64) -> TestResult {
        self.chan.send(v)
    }

    /// Receive one u64; if the peer died, its own error message.
    pub fn recv(&mut self) -> TestResult<u64> {
        match self.chan.recv() {
            Ok(v) => Ok(v),
            Err(e) => match self.wait() {
                Ok(()) => Err(format!("peer exited early: {e}")),
                Err(peer) => Err(peer),
            },
        }
    }

    fn wait(&mut self) -> TestResult {
        self.reaped = true;
        let st = waitpid(self.pid, None).ctx("waitpid")?;
        let mut msg = String::new();
        let _ = self.err.read_to_string(&mut msg);
        match st {
            WaitStatus::Exited(_, 0) => Ok(()),
            WaitStatus::Exited(_, c) => Err(format!("peer failed (exit {c}): {msg}")),
            WaitStatus::Signaled(_, s, _) => Err(format!("peer killed by {s:?} {msg}")),
            other => Err(format!("peer: unexpected wait status {other:?}")),
        }
    }

    /// Wait for the peer to exit; its error if it failed.
    pub fn finish(mut self) -> TestResult {
        self.wait()
    }

    /// The peer's process id.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The peer's wait status if it has ended (it is reaped then), None
    /// while it runs.
    pub fn poll_exit(&mut self) -> TestResult<Option<WaitStatus>> {
        ensure!(!self.reaped, "the peer was reaped already");
        match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)).ctx("waitpid")? {
            WaitStatus::StillAlive => Ok(None),
            st => {
                self.reaped = true;
                Ok(Some(st))
            }
        }
    }

    /// Wait for the peer to end; its wait status, whatever it is.
    pub fn exit_status(mut self) -> TestResult<WaitStatus> {
        self.reaped = true;
        waitpid(self.pid, None).ctx("waitpid")
    }

    /// SIGKILL the peer; how long until it was reaped.
    pub fn kill_timed(&mut self) -> TestResult<std::time::Duration> {
        let start = std::time::Instant::now();
        kill(self.pid, Signal::SIGKILL).ctx("kill")?;
        self.reaped = true;
        waitpid(self.pid, None).ctx("waitpid")?;
        Ok(start.elapsed())
    }

    /// After the peer is gone: a value it sent that was not received yet,
    /// if any (None at the end of the channel).
    pub fn recv_after_exit(&mut self) -> Option<u64> {
        self.chan.recv().ok()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = waitpid(self.pid, None);
        }
    }
}

/// Wait (up to 20 s) until slot `i` of `array` leaves PENDING; its status.
pub fn wait_slot(array: &knem::StatusArray, i: u32, what: &str) -> TestResult<Status> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut nap = std::time::Duration::from_micros(10);
    loop {
        match array.get_acquire(i as usize) {
            None => return Err(format!("{what}: slot {i} is past the array")),
            Some(Status::Pending) => {}
            Some(s) => return Ok(s),
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("{what}: slot {i} still PENDING after 20 s"));
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(std::time::Duration::from_millis(2));
    }
}

/// Wait for slot `i` and require SUCCESS.
pub fn wait_slot_success(array: &knem::StatusArray, i: u32, what: &str) -> TestResult {
    match wait_slot(array, i, what)? {
        Status::Success => Ok(()),
        s => Err(format!("{what}: slot {i} ended {s}, expected SUCCESS")),
    }
}

/// An asynchronous submission must be accepted with `current_status`
/// PENDING.
pub fn expect_pending(what: &str, r: knem::Result<Status>) -> TestResult {
    match r {
        Ok(Status::Pending) => Ok(()),
        Ok(s) => Err(format!("{what}: expected current_status PENDING, got {s}")),
        Err(e) => Err(format!("{what}: expected PENDING, got {e}")),
    }
}

/// Kill this (test) process with SIGALRM after `secs` seconds, so a read
/// that blocks forever fails the test quickly; 0 cancels.
pub fn alarm(secs: u32) {
    // SAFETY: plain alarm(2).
    unsafe { nix::libc::alarm(secs) };
}

/// A region over `len` bytes at offset `off` of `mem` (which must outlive
/// it).
pub fn region_at(
    dev: &knem::Device,
    mem: &Mem,
    off: usize,
    len: usize,
    prot: knem::Protection,
    flags: knem::RegionFlags,
) -> TestResult<knem::Cookie> {
    // SAFETY: our own scratch mapping, only ever snapshotted.
    unsafe { dev.create_region_raw(&[Iovec::from_raw(mem.addr(off), len as u64)], prot, flags) }
        .ctx("CREATE_REGION")
}

/// First mismatch between `got` and `want(i)`, as a message.
pub fn check_bytes(what: &str, got: &[u8], want: impl Fn(usize) -> u8) -> TestResult {
    match (0..got.len()).find(|&i| got[i] != want(i)) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            got.len(),
            got[i],
            want(i)
        )),
    }
}

/// The uid (and gid) tests drop to, to act as another user.
pub const NOBODY: u32 = 65534;

/// Drops this process to uid and gid [`NOBODY`] (a forked peer, normally).
pub fn become_nobody() -> TestResult {
    nix::unistd::setgid(nix::unistd::Gid::from_raw(NOBODY)).ctx("setgid")?;
    nix::unistd::setuid(nix::unistd::Uid::from_raw(NOBODY)).ctx("setuid")
}

/// Runs `f` with /dev/knem usable by every uid (mode 0666), and puts the
/// old mode back whatever `f` returns.  Needs root, as switching uid does.
pub fn with_device_open_to_all(f: impl FnOnce() -> TestResult) -> TestResult {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        return Err("needs root to switch uid".into());
    }
    let path = "/dev/knem";
    let old_mode = std::fs::metadata(path)
        .ctx("stat /dev/knem")?
        .permissions()
        .mode();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .ctx("chmod /dev/knem")?;
    let r = f();
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(old_mode & 0o7777));
    r
}
