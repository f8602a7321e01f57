//! State every fuzzing process shares through one `MAP_SHARED` anonymous
//! mapping made before the first fork: call and errno counters (so even a
//! SIGKILLed child's calls are counted), the failure count, and a pool of
//! cookies that processes publish for each other to use.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Errno values counted individually; larger ones share the last slot.
pub const NERR: usize = 134;

/// What the fuzzer does to the device, one histogram row each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Op {
    GetInfo,
    BindOffload,
    InitSend,
    CreateRegion,
    DestroyRegion,
    InitAsyncRecv,
    SyncRecv,
    Copy,
    InlineCopy,
    CopyBounded,
    InlineCopyBounded,
    BadIoctl,
    Mmap,
    Read,
    Poll,
    Write,
}

/// Number of [`Op`]s.
pub const NOPS: usize = 16;

/// Every op, in histogram order.
pub const ALL_OPS: [Op; NOPS] = [
    Op::GetInfo,
    Op::BindOffload,
    Op::InitSend,
    Op::CreateRegion,
    Op::DestroyRegion,
    Op::InitAsyncRecv,
    Op::SyncRecv,
    Op::Copy,
    Op::InlineCopy,
    Op::CopyBounded,
    Op::InlineCopyBounded,
    Op::BadIoctl,
    Op::Mmap,
    Op::Read,
    Op::Poll,
    Op::Write,
];

const fn bits(list: &[i32]) -> u128 {
    let mut m = 0u128;
    let mut i = 0;
    while i < list.len() {
        m |= 1 << list[i];
        i += 1;
    }
    m
}

use libc::{EACCES, EAGAIN, EBADF, EBUSY, EFAULT, EINTR, EINVAL, ENOMEM, ENOTTY, EOVERFLOW, EPERM};

impl Op {
    /// The name printed in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Op::GetInfo => "GET_INFO",
            Op::BindOffload => "BIND_OFFLOAD",
            Op::InitSend => "INIT_SEND",
            Op::CreateRegion => "CREATE_REGION",
            Op::DestroyRegion => "DESTROY_REGION",
            Op::InitAsyncRecv => "INIT_ASYNC_RECV",
            Op::SyncRecv => "SYNC_RECV",
            Op::Copy => "COPY",
            Op::InlineCopy => "INLINE_COPY",
            Op::CopyBounded => "COPY_BOUNDED",
            Op::InlineCopyBounded => "INLINE_COPY_BOUNDED",
            Op::BadIoctl => "unknown/wrong ioctl",
            Op::Mmap => "mmap",
            Op::Read => "read",
            Op::Poll => "poll",
            Op::Write => "write",
        }
    }

    /// The errnos this op may fail with (SPEC §3: the documented set,
    /// narrowed per command where the spec says more).
    pub fn allowed_errnos(self) -> u128 {
        match self {
            Op::GetInfo => bits(&[EFAULT, EBADF, EINTR]),
            Op::DestroyRegion => bits(&[EINVAL, EFAULT, EBADF, EINTR]),
            Op::InitSend | Op::CreateRegion => {
                bits(&[EINVAL, EFAULT, ENOMEM, EBADF, EINTR, EAGAIN, EBUSY])
            }
            Op::BindOffload => bits(&[EINVAL, EFAULT, ENOMEM, EBUSY, EBADF, EPERM, EINTR]),
            Op::InitAsyncRecv
            | Op::SyncRecv
            | Op::Copy
            | Op::InlineCopy
            | Op::CopyBounded
            | Op::InlineCopyBounded => bits(&[
                EINVAL, EPERM, EACCES, EFAULT, ENOMEM, EBUSY, EBADF, EAGAIN, EINTR,
            ]),
            // An undefined command, or a defined one with the wrong size or
            // direction, is not a command of the driver.
            Op::BadIoctl => bits(&[ENOTTY, EBADF]),
            // EOVERFLOW: the mm's own check of offset + length.
            Op::Mmap => bits(&[
                EINVAL, EBUSY, EBADF, ENOMEM, EACCES, EPERM, EAGAIN, EINTR, EOVERFLOW,
            ]),
            Op::Read => bits(&[EAGAIN, EINTR, EINVAL, EFAULT, EBADF]),
            Op::Poll => bits(&[EINTR]),
            Op::Write => bits(&[EINVAL, EBADF, EFAULT, EPERM]),
        }
    }

    /// Whether `errno` is in [`Op::allowed_errnos`].
    pub fn allows(self, errno: i32) -> bool {
        (0..128).contains(&errno) && self.allowed_errnos() & (1 << errno) != 0
    }
}

/// Events that are not calls on the device, counted for the summary.
#[derive(Debug, Clone, Copy)]
#[repr(usize)]
pub enum Ev {
    OpenRdwr,
    OpenRdonly,
    Close,
    Dup,
    Fork,
    KillChild,
    ChildSelfKill,
    ChildExitNoClose,
    SetUid,
    BufMap,
    BufUnmap,
    StatusMunmap,
    SlotRead,
    AsyncPending,
    NotifyRead,
    BigDma,
    DmaToggle,
    KillInIoctl,
    WorkerRespawn,
    AbandonedSeen,
    Handoff,
    HandoffConsumed,
}

/// Number of [`Ev`]s.
pub const NEV: usize = 22;

/// Event names, in [`Ev`] order.
pub const EV_NAMES: [&str; NEV] = [
    "open O_RDWR",
    "open O_RDONLY",
    "close",
    "dup",
    "fork",
    "SIGKILL a child",
    "child SIGKILLs itself",
    "child _exit without close",
    "child setuid(nobody)",
    "buffer mmap",
    "buffer munmap (regions may pin it)",
    "status array munmap",
    "status slot read",
    "async request PENDING",
    "notify values read",
    "DMA copy past a full piece array",
    "DMA provider knob turned (--dma)",
    "SIGKILL a process inside an ioctl",
    "worker SIGKILLed, respawned",
    "conductor saw abandoned DMA batches",
    "single-use region handed off, its fd closed within 12 steps",
    "handed-off single-use region consumed by a copy",
];

/// Pids the conductor (--dma) SIGKILLed, most recent last (a ring).
pub const KILLED: usize = 256;

/// Cookies published by every process.
pub const POOL: usize = 1024;

/// The most recent single-use cookies whose owner closed its fd right
/// after publishing them (a ring).
pub const HANDOFF: usize = 16;

/// The shared block.
#[repr(C)]
pub struct Shared {
    /// Steps taken by all processes.
    pub steps: AtomicU64,
    /// Failures found by all processes.
    pub failures: AtomicU64,
    /// `calls[op][errno]`, errno 0 meaning success.
    pub calls: [[AtomicU64; NERR]; NOPS],
    /// Event counts.
    pub events: [AtomicU64; NEV],
    /// Published cookies (0 = empty slot).
    pub pool: [AtomicU64; POOL],
    /// Pids the conductor SIGKILLed (0 = empty), written before the kill.
    pub killed: [AtomicI32; KILLED],
    /// Next entry of `killed`.
    pub killed_next: AtomicU64,
    /// Handed-off single-use cookies (0 = empty slot), see [`HANDOFF`].
    pub handoff: [AtomicU64; HANDOFF],
    /// Next entry of `handoff`.
    pub handoff_next: AtomicU64,
}

impl Shared {
    /// Map a zeroed block shared with every later fork.
    pub fn create() -> &'static Shared {
        let size = std::mem::size_of::<Shared>();
        // SAFETY: a fresh anonymous mapping; all-zero bytes are valid
        // AtomicU64s, and the mapping is never unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(p != libc::MAP_FAILED, "mmap of the shared block failed");
            &*(p as *const Shared)
        }
    }

    /// Count one call of `op` that ended with `errno` (0: success).
    pub fn count(&self, op: Op, errno: i32) {
        let e = (errno.max(0) as usize).min(NERR - 1);
        self.calls[op as usize][e].fetch_add(1, Ordering::Relaxed);
    }

    /// Count one event.
    pub fn event(&self, ev: Ev) {
        self.events[ev as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Note that `pid` is about to be SIGKILLed by the conductor.
    pub fn note_kill(&self, pid: i32) {
        let i = self.killed_next.fetch_add(1, Ordering::Relaxed) as usize % KILLED;
        self.killed[i].store(pid, Ordering::Release);
    }

    /// Whether the conductor SIGKILLed `pid` (among its last KILLED kills).
    pub fn was_killed(&self, pid: i32) -> bool {
        self.killed.iter().any(|k| k.load(Ordering::Acquire) == pid)
    }

    /// Publish a cookie at a random slot.
    pub fn publish(&self, slot: u64, cookie: u64) {
        self.pool[slot as usize % POOL].store(cookie, Ordering::Relaxed);
    }

    /// Hand off a single-use cookie whose owner is about to close it.
    pub fn hand_off(&self, cookie: u64) {
        let i = self.handoff_next.fetch_add(1, Ordering::Relaxed) as usize % HANDOFF;
        self.handoff[i].store(cookie, Ordering::Release);
    }

    /// A handed-off cookie (maybe 0, maybe consumed or gone).
    pub fn handed_off(&self, slot: u64) -> u64 {
        self.handoff[slot as usize % HANDOFF].load(Ordering::Acquire)
    }

    /// A published cookie (maybe 0, maybe long dead).
    pub fn recycled(&self, slot: u64) -> u64 {
        self.pool[slot as usize % POOL].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_sets() {
        assert!(Op::CreateRegion.allows(EFAULT));
        assert!(!Op::CreateRegion.allows(ENOTTY));
        assert!(Op::BadIoctl.allows(ENOTTY));
        assert!(!Op::BadIoctl.allows(EINVAL));
        assert!(!Op::Copy.allows(libc::EIO));
        assert!(!Op::Copy.allows(-1));
        assert!(!Op::Copy.allows(200));
        assert!(Op::Mmap.allows(EOVERFLOW));
        assert!(!Op::Mmap.allows(libc::EIO));
        for (i, op) in ALL_OPS.iter().enumerate() {
            assert_eq!(*op as usize, i);
        }
    }
}
