//! One fuzzing process: its fds, regions, status arrays, buffers and
//! children, and one random action per step.

use crate::kfault;
use crate::mem::{Arena, PAGE, SLOT, SLOTS};
use crate::rng::{mix, Rng};
use crate::shared::{Ev, Op, Shared};
use knem_abi::{self as abi, cmd};
use std::ffi::c_void;
use std::mem::size_of;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const MAX_FDS: usize = 6;
const MAX_COOKIES: usize = 48;
const MAX_MAPS: usize = 6;
const MAX_CHILDREN: usize = 3;
const MAX_DEPTH: u32 = 2;
const MAX_REPORTS: u32 = 20;
const NOBODY: u32 = 65534;

const F_DMA: u32 = abi::KNEM_FLAG_DMA;
const F_ASYNC: u32 = abi::KNEM_FLAG_ASYNCDMACOMPLETE;
const F_DMATHREAD: u32 = abi::KNEM_FLAG_DMATHREAD;
const F_MEMCPYTHREAD: u32 = abi::KNEM_FLAG_MEMCPYTHREAD;
const F_PINLOCAL: u32 = abi::KNEM_FLAG_PINLOCAL;
const F_NOTIFY: u32 = abi::KNEM_FLAG_NOTIFY_FD;
const F_SINGLEUSE: u32 = abi::KNEM_FLAG_SINGLEUSE;
const F_ANYUSER: u32 = abi::KNEM_FLAG_ANY_USER_ACCESS;
const ANY_ASYNC: u32 = F_ASYNC | F_DMATHREAD | F_MEMCPYTHREAD;

/// Pieces one ASYNCDMACOMPLETE batch maps before the submission waits for
/// them (KNEM_DMA_MAX_PIECES in c-shim/knem_dma.c).
const DMA_FULL_ARRAY: u64 = 16384;
/// knem's dma_min in --dma mode (main.rs sets it), so that a piece array
/// fills from one 1 MiB buffer.
pub const DMA_MIN: u64 = 32;

/// The real command numbers (a "bad" ioctl must be none of them).
const REAL_CMDS: [u32; 11] = cmd::NUMBERS;

/// Constant cookies no driver may ever accept.
const IMPOSSIBLE_COOKIES: [u64; 2] = [0, u64::MAX];

/// What the process knows of one context (one O_RDWR open, shared by dups
/// and forks).
#[derive(Debug, Clone)]
struct CtxState {
    id: u64,
    /// Cookies created through it and not destroyed by this process.
    cookies: Vec<u64>,
    /// A status-array mmap of it succeeded (here or before a fork).
    mapped: bool,
    /// Slots of that array.
    slots: u64,
}

#[derive(Debug, Clone)]
struct Fdx {
    fd: i32,
    rdonly: bool,
    nonblock: bool,
    ctx: u64,
    /// The process that opened it (a context may serve only its opener).
    opener: i32,
}

#[derive(Debug, Clone)]
struct Mapping {
    base: usize,
    /// Mapped bytes (page-rounded).
    len: usize,
    /// First still-mapped byte offset.
    lo: usize,
    slots: u64,
    readable: bool,
}

/// Where an argument struct goes.
#[derive(Debug, Clone, Copy)]
enum Loc {
    Heap,
    /// Inside a writable arena buffer, maybe unaligned.
    Buf(usize),
    /// Inside an arena buffer made read-only during the call.
    RoBuf(usize),
    /// Straddling the end of a buffer into its guard page.
    Straddle(usize, usize),
    /// An address that is not user memory.
    Bad(u64),
}

/// An iovec array ready to be passed.
struct IoArr {
    _storage: Vec<abi::knem_cmd_param_iovec>,
    ptr: u64,
    nr: u32,
}

/// The running process.
pub struct Engine {
    shared: &'static Shared,
    rng: Rng,
    seed: u64,
    name: String,
    depth: u32,
    step: u64,
    max_steps: u64,
    verbose: bool,
    allow_setuid: bool,
    /// Keep kernel allocations sized by our arguments out of the band that
    /// can succeed only by waking the OOM killer (see `--no-oom-sizes`).
    tame: bool,
    arena: Arena,
    fds: Vec<Fdx>,
    ctxs: Vec<CtxState>,
    next_ctx: u64,
    maps: Vec<Mapping>,
    /// Cookies this process destroyed itself: certainly dead.
    dead: Vec<u64>,
    /// Cookies of contexts this process closed (maybe alive in a fork).
    stale: Vec<u64>,
    /// Fds of handed-off single-use regions, each closed when its count
    /// of steps runs out (`op_handoff`).
    handoff_fds: Vec<(i32, u32)>,
    children: Vec<i32>,
    nchild: u64,
    scratch: Vec<u8>,
    reports: u32,
    what: String,
    kill_at: u64,
    /// This step draws plausible arguments (live cookies, in-range
    /// offsets, accepted flags) so that deep paths run, not only checks.
    sane: bool,
    /// --dma: the DMA provider is loaded; plausible copies often ask for
    /// the engine, and some are larger than a batch's piece array.
    dma: bool,
}

/// What an open of /dev/knem may fail with: the file table full, memory,
/// a signal; and under --kernel-faults EFAULT, from fail_usercopy in the
/// kernel's copy of the path (getname), before the module is reached.
fn open_errno_allowed(e: i32) -> bool {
    matches!(e, libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EINTR)
        || (e == libc::EFAULT && kfault::enabled())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A short name for an errno value.
pub fn errno_name(e: i32) -> String {
    let n = match e {
        0 => "ok",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        512..=530 => return format!("kernel-internal-{e}"),
        _ => return format!("errno{e}"),
    };
    n.to_string()
}

/// Write a whole line to stdout with one write(2), so lines of concurrent
/// processes do not interleave.
pub fn say(line: &str) {
    let mut s = String::with_capacity(line.len() + 1);
    s.push_str(line);
    s.push('\n');
    // SAFETY: plain write of our own bytes.
    unsafe { libc::write(1, s.as_ptr().cast(), s.len()) };
}

/// How every process of a run behaves (from the command line).
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    pub verbose: bool,
    pub allow_setuid: bool,
    pub tame: bool,
    pub max_steps: u64,
    pub dma: bool,
}

impl Engine {
    /// A process with its own arena, starting from `seed`.
    pub fn new(shared: &'static Shared, seed: u64, name: String, opts: Opts) -> Self {
        let Opts {
            verbose,
            allow_setuid,
            tame,
            max_steps,
            dma,
        } = opts;
        let mut e = Self {
            shared,
            rng: Rng::new(seed),
            seed,
            name,
            depth: 0,
            step: 0,
            max_steps,
            verbose,
            allow_setuid,
            tame,
            arena: Arena::new(),
            fds: Vec::new(),
            ctxs: Vec::new(),
            next_ctx: 1,
            maps: Vec::new(),
            dead: Vec::new(),
            handoff_fds: Vec::new(),
            stale: Vec::new(),
            children: Vec::new(),
            nchild: 0,
            scratch: vec![0u8; 20000],
            reports: 0,
            what: String::new(),
            kill_at: 0,
            sane: false,
            dma,
        };
        for i in 0..SLOTS / 2 {
            e.arena.map(i * 2, &mut e.rng);
        }
        e
    }

    // ---- Reporting -------------------------------------------------------

    fn fail(&mut self, msg: &str) {
        self.shared
            .failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.reports < MAX_REPORTS {
            self.reports += 1;
            say(&format!(
                "FAIL proc={} seed={} step={} [{}]: {}",
                self.name, self.seed, self.step, self.what, msg
            ));
        }
    }

    fn trace(&self) {
        if self.verbose {
            say(&format!("{} #{} {}", self.name, self.step, self.what));
        }
    }

    // ---- The loop ----------------------------------------------------------

    /// Take random steps until `deadline` (or the step limit).
    pub fn run(&mut self, deadline: Instant) {
        while Instant::now() < deadline && (self.max_steps == 0 || self.step < self.max_steps) {
            self.step += 1;
            self.shared
                .steps
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.kill_at != 0 && self.step == self.kill_at {
                self.shared.event(Ev::ChildSelfKill);
                // SAFETY: signalling ourselves.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
            self.one_step(deadline);
            if self.step % 16 == 0 {
                self.reap(false);
            }
        }
    }

    /// Close everything and collect every child (SIGKILLing those still
    /// running).
    pub fn finish(&mut self) {
        for c in &self.children {
            // SAFETY: our own child.
            unsafe { libc::kill(*c, libc::SIGKILL) };
        }
        self.reap(true);
        for (fd, _) in self.handoff_fds.drain(..) {
            // SAFETY: our fd.
            kfault::during(|| unsafe { libc::close(fd) });
        }
        while let Some(f) = self.fds.pop() {
            // SAFETY: our fd.
            kfault::during(|| unsafe { libc::close(f.fd) });
        }
        for m in self.maps.drain(..) {
            // SAFETY: our mapping.
            unsafe { libc::munmap((m.base + m.lo) as *mut c_void, m.len - m.lo) };
        }
    }

    fn one_step(&mut self, deadline: Instant) {
        const W: [u32; 27] = [
            14, // 0 create
            3,  // 1 init_send
            8,  // 2 destroy
            12, // 3 inline
            8,  // 4 inline bounded
            8,  // 5 copy
            6,  // 6 copy bounded
            3,  // 7 sync_recv
            3,  // 8 init_async_recv
            2,  // 9 get_info
            3,  // 10 bind_offload
            4,  // 11 bad ioctl
            3,  // 12 mmap
            1,  // 13 status munmap
            2,  // 14 slot read
            2,  // 15 read
            2,  // 16 poll
            1,  // 17 write
            3,  // 18 open
            2,  // 19 close
            1,  // 20 dup
            3,  // 21 buffer map
            2,  // 22 buffer unmap
            1,  // 23 fork
            1,  // 24 kill a child
            0,  // 25 DMA copy past a full piece array (--dma)
            3,  // 26 single-use handoff, owner closes within 12 steps
        ];
        let mut w = W;
        if self.dma {
            w[25] = 2;
        }
        self.close_handoffs();
        let a = self.rng.weighted(&w);
        self.sane = self.rng.chance(35);
        if a <= 17 && self.fds.is_empty() {
            self.op_open();
            return;
        }
        match a {
            0 => self.op_create(false),
            1 => self.op_create(true),
            2 => self.op_destroy(),
            3 => self.op_inline(false),
            4 => self.op_inline(true),
            5 => self.op_copy(false),
            6 => self.op_copy(true),
            7 => self.op_sync_recv(),
            8 => self.op_init_async_recv(),
            9 => self.op_get_info(),
            10 => self.op_bind_offload(),
            11 => self.op_bad_ioctl(),
            12 => self.op_mmap(),
            13 => self.op_status_munmap(),
            14 => self.op_slot_read(),
            15 => self.op_read(),
            16 => self.op_poll(),
            17 => self.op_write(),
            18 => self.op_open(),
            19 => self.op_close(),
            20 => self.op_dup(),
            21 => {
                let i = self.rng.below(SLOTS as u64) as usize;
                self.what = format!("map buffer slot {i}");
                self.trace();
                self.arena.map(i, &mut self.rng);
                self.shared.event(Ev::BufMap);
            }
            22 => {
                let i = self.rng.below(SLOTS as u64) as usize;
                self.what = format!("munmap buffer slot {i}");
                self.trace();
                self.arena.unmap(i);
                self.shared.event(Ev::BufUnmap);
            }
            23 => self.op_fork(deadline),
            24 => self.op_kill_child(),
            26 => self.op_handoff(),
            _ => self.op_big_dma(),
        }
    }

    // ---- Fds and contexts ------------------------------------------------

    fn pick_fd(&mut self) -> usize {
        if self.sane {
            // SAFETY: getpid cannot fail.
            let me = unsafe { libc::getpid() };
            let rw: Vec<usize> = (0..self.fds.len())
                .filter(|&i| !self.fds[i].rdonly && self.fds[i].opener == me)
                .collect();
            if !rw.is_empty() {
                return self.rng.pick(&rw);
            }
        }
        let rd: Vec<usize> = (0..self.fds.len())
            .filter(|&i| self.fds[i].rdonly)
            .collect();
        let rw: Vec<usize> = (0..self.fds.len())
            .filter(|&i| !self.fds[i].rdonly)
            .collect();
        if !rd.is_empty() && (rw.is_empty() || self.rng.chance(8)) {
            self.rng.pick(&rd)
        } else {
            self.rng.pick(&rw)
        }
    }

    fn ctx_of(&mut self, fdi: usize) -> Option<&mut CtxState> {
        let id = self.fds[fdi].ctx;
        self.ctxs.iter_mut().find(|c| c.id == id)
    }

    fn op_open(&mut self) {
        if self.fds.len() >= MAX_FDS {
            self.op_close();
            return;
        }
        let rdonly = self.rng.chance(12);
        let nonblock = self.rng.chance(50);
        let mut flags = libc::O_CLOEXEC | if rdonly { libc::O_RDONLY } else { libc::O_RDWR };
        if nonblock {
            flags |= libc::O_NONBLOCK;
        }
        self.what = format!("open rdonly={rdonly} nonblock={nonblock}");
        self.trace();
        // SAFETY: a NUL-terminated path.
        let fd = kfault::during(|| unsafe { libc::open(c"/dev/knem".as_ptr(), flags) });
        if fd < 0 {
            let e = errno();
            if !open_errno_allowed(e) {
                self.fail(&format!("open /dev/knem: {}", errno_name(e)));
            }
            return;
        }
        self.shared
            .event(if rdonly { Ev::OpenRdonly } else { Ev::OpenRdwr });
        let id = self.next_ctx;
        self.next_ctx += 1;
        self.ctxs.push(CtxState {
            id,
            cookies: Vec::new(),
            mapped: false,
            slots: 0,
        });
        self.fds.push(Fdx {
            fd,
            rdonly,
            nonblock,
            ctx: id,
            // SAFETY: getpid cannot fail.
            opener: unsafe { libc::getpid() },
        });
    }

    /// Closes the handed-off fds whose steps ran out.
    fn close_handoffs(&mut self) {
        for h in self.handoff_fds.iter_mut() {
            h.1 = h.1.saturating_sub(1);
        }
        while let Some(i) = self.handoff_fds.iter().position(|h| h.1 == 0) {
            let (fd, _) = self.handoff_fds.swap_remove(i);
            // SAFETY: our fd.
            kfault::during(|| unsafe { libc::close(fd) });
        }
    }

    /// The owner's side of issue 33's use-after-free: a fresh fd declares a
    /// single-use region, hands the cookie to the other processes (which
    /// often pick handed-off cookies, see `pick_cookie`) and closes within
    /// 0 to 12 steps, so that its release races with their consuming
    /// copies.
    fn op_handoff(&mut self) {
        let Some((addr, avail)) = self.buf_addr(false) else {
            return;
        };
        let len = avail.min(4 * PAGE as u64);
        self.what = format!("single-use handoff of {addr:#x}+{len}, then close");
        self.trace();
        // SAFETY: a NUL-terminated path.
        let fd = kfault::during(|| unsafe {
            libc::open(c"/dev/knem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)
        });
        if fd < 0 {
            let e = errno();
            if !open_errno_allowed(e) {
                self.fail(&format!("open /dev/knem: {}", errno_name(e)));
            }
            return;
        }
        let iov = abi::knem_cmd_param_iovec { base: addr, len };
        let mut a = abi::knem_cmd_create_region {
            iovec_array: &iov as *const _ as u64,
            iovec_nr: 1,
            flags: F_SINGLEUSE | if self.rng.chance(50) { F_ANYUSER } else { 0 },
            protection: (libc::PROT_READ | libc::PROT_WRITE) as u32,
            pad: 0,
            cookie: 0,
        };
        let e = self.raw(fd, cmd::CREATE_REGION, &mut a as *mut _ as u64);
        self.shared.count(Op::CreateRegion, e);
        if e == 0 {
            self.shared.hand_off(a.cookie);
            self.shared.event(Ev::Handoff);
            let steps = self.rng.below(13) as u32;
            if steps > 0 && self.handoff_fds.len() < 8 {
                self.handoff_fds.push((fd, steps));
                return;
            }
        } else if !Op::CreateRegion.allows(e) {
            self.fail(&format!("CREATE_REGION (handoff): {}", errno_name(e)));
        }
        // SAFETY: our fd.
        kfault::during(|| unsafe { libc::close(fd) });
    }

    fn op_close(&mut self) {
        if self.fds.is_empty() {
            return;
        }
        let i = self.rng.below(self.fds.len() as u64) as usize;
        let f = self.fds.remove(i);
        self.what = format!("close fd {}", f.fd);
        self.trace();
        // SAFETY: our fd.
        kfault::during(|| unsafe { libc::close(f.fd) });
        self.shared.event(Ev::Close);
        if !self.fds.iter().any(|g| g.ctx == f.ctx) {
            if let Some(pos) = self.ctxs.iter().position(|c| c.id == f.ctx) {
                let c = self.ctxs.remove(pos);
                self.stale.extend(c.cookies);
                let n = self.stale.len();
                if n > 128 {
                    self.stale.drain(..n - 128);
                }
            }
        }
    }

    fn op_dup(&mut self) {
        if self.fds.is_empty() || self.fds.len() >= MAX_FDS {
            return;
        }
        let i = self.pick_fd();
        let mut f = self.fds[i].clone();
        self.what = format!("dup fd {}", f.fd);
        self.trace();
        // SAFETY: duplicating our fd.
        let fd = unsafe { libc::fcntl(f.fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd >= 0 {
            f.fd = fd;
            self.fds.push(f);
            self.shared.event(Ev::Dup);
        }
    }

    // ---- Value generators -------------------------------------------------

    fn bad_addr(&mut self) -> u64 {
        let slot = self.rng.below(SLOTS as u64) as usize;
        match self.rng.below(13) {
            0 => 0,
            1 => 1,
            2 => 0xfff,
            3 => self.arena.guard(slot) as u64 + self.rng.below(PAGE as u64),
            4 => {
                // An unmapped slot (if any), else a guard page.
                let free: Vec<usize> = (0..SLOTS)
                    .filter(|&i| self.arena.bufs[i].len == 0)
                    .collect();
                if free.is_empty() {
                    self.arena.guard(slot) as u64
                } else {
                    self.arena.slot(self.rng.pick(&free)) as u64 + self.rng.below(SLOT as u64 / 2)
                }
            }
            5 => 0x7fff_ffff_f000 + self.rng.below(PAGE as u64),
            6 => 0x0000_8000_0000_0000,
            7 => 0xffff_8880_0000_0000 + self.rng.below(1 << 30),
            8 => 0xffff_ffff_8100_0000,
            9 => u64::MAX,
            10 => u64::MAX - self.rng.below(PAGE as u64),
            11 => self.arena.guard(slot) as u64,
            _ => (1 << 63) | self.rng.next(),
        }
    }

    /// An address inside a mapped buffer and the bytes left after it.
    fn buf_addr(&mut self, writable: bool) -> Option<(u64, u64)> {
        let i = self.arena.any(&mut self.rng, writable)?;
        let len = self.arena.bufs[i].len as u64;
        let off = match self.rng.below(10) {
            0..=3 => 0,
            4..=7 => self.rng.below(len),
            8 => len - 1 - self.rng.below(len.min(64)),
            _ => self.rng.below(len / PAGE as u64) * PAGE as u64,
        };
        Some((self.arena.slot(i) as u64 + off, len - off))
    }

    fn gen_len(&mut self, avail: u64) -> u64 {
        if self.sane {
            return if self.rng.chance(50) {
                avail
            } else {
                self.rng.range(1, avail.max(1))
            };
        }
        match self.rng.below(20) {
            0..=5 => avail,
            6..=10 => self.rng.below(avail + 1),
            11 => 0,
            12 => 1,
            13 | 14 => avail + 1 + self.rng.below(2 * PAGE as u64),
            15 => PAGE as u64,
            _ => {
                let near = u64::MAX - self.rng.below(PAGE as u64);
                self.rng
                    .pick(&[1 << 31, 1 << 32, 1 << 40, 1 << 47, u64::MAX, near])
            }
        }
    }

    fn gen_iovec(&mut self, prev: &[abi::knem_cmd_param_iovec]) -> abi::knem_cmd_param_iovec {
        let r = if self.sane { 0 } else { self.rng.below(100) };
        if r < 85 {
            if let Some((base, avail)) = self.buf_addr(false) {
                let len = self.gen_len(avail);
                return abi::knem_cmd_param_iovec { base, len };
            }
        }
        if r < 90 && !prev.is_empty() {
            // Overlap: a previous segment again, or shifted.
            let mut v = prev[self.rng.below(prev.len() as u64) as usize];
            if self.rng.chance(50) {
                v.base = v.base.wrapping_add(self.rng.below(64));
            }
            return v;
        }
        if r < 95 {
            // Wrapping: base + len passes 2^64.
            let base = u64::MAX - self.rng.below(2 * PAGE as u64);
            return abi::knem_cmd_param_iovec {
                base,
                len: 2 * PAGE as u64 + self.rng.below(PAGE as u64),
            };
        }
        let base = self.bad_addr();
        let len = self.rng.pick(&[0, 1, 8, PAGE as u64, 1 << 20]);
        abi::knem_cmd_param_iovec { base, len }
    }

    /// Place `v` at the very end of a writable buffer so that reading past
    /// it runs into the guard page; returns its address.
    fn place_at_end(&mut self, bytes: &[u8], misalign: bool) -> Option<u64> {
        let i = self.arena.any(&mut self.rng, true)?;
        let len = self.arena.bufs[i].len;
        let n = bytes.len().min(len);
        let end = self.arena.slot(i) + len;
        let mut at = end - n;
        if misalign && at > self.arena.slot(i) {
            at -= 1;
        }
        // SAFETY: [at, at + n) lies in a writable buffer of our arena.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, n.min(end - at)) };
        Some(at as u64)
    }

    fn gen_iovecs(&mut self) -> IoArr {
        let mode = if self.sane {
            0
        } else {
            self.rng.weighted(&[75, 5, 5, 7, 8])
        };
        match mode {
            0 => {
                let n = match self
                    .rng
                    .weighted(&[50, 25, 15, 7, if self.sane { 0 } else { 3 }])
                {
                    0 => 1,
                    1 => self.rng.range(2, 4),
                    2 => self.rng.range(5, 16),
                    3 => self.rng.range(17, 200),
                    _ => self.rng.range(1000, 5000),
                } as usize;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    let io = self.gen_iovec(&v);
                    v.push(io);
                }
                if self.tame {
                    tame_lengths(&mut v);
                }
                let ptr = v.as_ptr() as u64;
                IoArr {
                    nr: n as u32,
                    ptr,
                    _storage: v,
                }
            }
            1 => {
                let ptr = if self.rng.chance(50) {
                    0
                } else {
                    self.scratch.as_ptr() as u64
                };
                IoArr {
                    _storage: Vec::new(),
                    ptr,
                    nr: 0,
                }
            }
            2 | 4 => {
                // The array ends at a guard page; nr may claim more entries
                // than there are (huge counts too).
                let k = self.rng.range(1, 8) as usize;
                let mut v = Vec::with_capacity(k);
                for _ in 0..k {
                    let io = self.gen_iovec(&v);
                    v.push(io);
                }
                if self.tame {
                    tame_lengths(&mut v);
                }
                // SAFETY: plain old data viewed as bytes.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        v.as_ptr().cast::<u8>(),
                        k * size_of::<abi::knem_cmd_param_iovec>(),
                    )
                };
                let misalign = self.rng.chance(20);
                let ptr = self.place_at_end(bytes, misalign).unwrap_or(0);
                let nr = if mode == 2 {
                    let nr = self.rng.pick(&[
                        1 << 16,
                        1 << 20,
                        1 << 24,
                        1 << 28,
                        u32::MAX,
                        (u32::MAX / 16) + 1,
                        (u32::MAX / 8) + 1,
                    ]);
                    // 16 bytes an entry: 2^24 entries is a 256 MiB kernel
                    // array.
                    if self.tame && (2 << 20..1 << 27).contains(&nr) {
                        1 << 20
                    } else {
                        nr
                    }
                } else if self.rng.chance(50) {
                    k as u32
                } else {
                    k as u32 + self.rng.range(1, 3) as u32
                };
                IoArr {
                    _storage: Vec::new(),
                    ptr,
                    nr,
                }
            }
            _ => IoArr {
                _storage: Vec::new(),
                ptr: self.bad_addr(),
                nr: self.rng.range(1, 4) as u32,
            },
        }
    }

    fn pick_cookie(&mut self, fdi: usize) -> u64 {
        let own = self
            .ctx_of(fdi)
            .map(|c| c.cookies.clone())
            .unwrap_or_default();
        let all: Vec<u64> = self
            .ctxs
            .iter()
            .flat_map(|c| c.cookies.iter().copied())
            .collect();
        if self.sane && self.rng.chance(30) {
            let c = self.shared.handed_off(self.rng.next());
            if c != 0 {
                return c;
            }
        }
        if self.sane && !all.is_empty() {
            return if !own.is_empty() && self.rng.chance(60) {
                self.rng.pick(&own)
            } else {
                self.rng.pick(&all)
            };
        }
        loop {
            match self.rng.weighted(&[35, 15, 8, 4, 20, 8, 10, 12]) {
                0 if !own.is_empty() => return self.rng.pick(&own),
                1 if !all.is_empty() => return self.rng.pick(&all),
                2 if !self.dead.is_empty() => return self.rng.pick(&self.dead),
                3 if !self.stale.is_empty() => return self.rng.pick(&self.stale),
                4 => {
                    let c = self.shared.recycled(self.rng.next());
                    if c != 0 {
                        return c;
                    }
                }
                5 => {
                    let r = self.rng.next();
                    return self.rng.pick(&[0, u64::MAX, 1, r, 1 << 32, 0xffff_ffff]);
                }
                7 => {
                    let c = self.shared.handed_off(self.rng.next());
                    if c != 0 {
                        return c;
                    }
                }
                6 if !all.is_empty() => {
                    let c = self.rng.pick(&all);
                    return match self.rng.below(3) {
                        0 => c ^ (1 << self.rng.below(64)),
                        1 => c.wrapping_add(1),
                        _ => c.wrapping_sub(1),
                    };
                }
                _ => {}
            }
        }
    }

    fn gen_offset(&mut self) -> u64 {
        if self.sane {
            return if self.rng.chance(50) {
                0
            } else {
                self.rng.below(PAGE as u64 * 4)
            };
        }
        match self.rng.below(10) {
            0..=4 => 0,
            5 | 6 => self.rng.below(PAGE as u64 * 2),
            7 => self.rng.below(1 << 20),
            _ => {
                let near = u64::MAX - self.rng.below(PAGE as u64);
                self.rng
                    .pick(&[1 << 32, 1 << 63, u64::MAX, near, (1 << 63) - 1])
            }
        }
    }

    fn gen_bound(&mut self) -> u64 {
        if self.sane {
            return self.rng.range(1, 1 << 18);
        }
        match self.rng.below(10) {
            0..=2 => self.rng.below(PAGE as u64),
            3 | 4 => self.rng.below(1 << 20),
            5 => 0,
            6 => PAGE as u64,
            _ => {
                let near = u64::MAX - self.rng.below(PAGE as u64);
                self.rng.pick(&[u64::MAX, near, 1 << 40, 1 << 63])
            }
        }
    }

    fn gen_copy_flags(&mut self) -> u32 {
        if self.sane && self.dma && self.rng.chance(50) {
            return self.rng.pick(&[
                F_DMA,
                F_DMA | F_ASYNC,
                F_DMA | F_ASYNC,
                F_DMA | F_DMATHREAD,
                F_DMA | F_ASYNC | F_PINLOCAL,
            ]);
        }
        if self.sane {
            return match self.rng.below(10) {
                0..=3 => 0,
                4 => F_PINLOCAL,
                5 | 6 => F_MEMCPYTHREAD,
                7 => F_MEMCPYTHREAD | F_NOTIFY,
                8 => F_ASYNC,
                _ => F_MEMCPYTHREAD | F_PINLOCAL,
            };
        }
        match self.rng.below(100) {
            0..=49 => 0,
            50..=79 => {
                let mask = F_DMA | F_ASYNC | F_DMATHREAD | F_MEMCPYTHREAD | F_PINLOCAL | F_NOTIFY;
                self.rng.next() as u32 & mask
            }
            80..=87 => self.rng.pick(&[
                F_MEMCPYTHREAD,
                F_MEMCPYTHREAD | F_NOTIFY,
                F_ASYNC,
                F_PINLOCAL,
                F_DMA,
            ]),
            88..=93 => (self.rng.next() as u32 & 0x7f) | (1 << self.rng.range(8, 31)),
            94..=96 => self.rng.pick(&[F_SINGLEUSE, F_ANYUSER]),
            _ => self.rng.next() as u32,
        }
    }

    fn gen_index(&mut self, fdi: usize) -> u32 {
        let slots = self.ctx_of(fdi).map(|c| c.slots).unwrap_or(0);
        if slots > 0 && (self.sane || self.rng.chance(70)) {
            return self.rng.below(slots.min(u32::MAX as u64)) as u32;
        }
        match self.rng.below(5) {
            0 => slots as u32,
            1 => slots.wrapping_add(1) as u32,
            2 => u32::MAX,
            3 => self.rng.below(4096) as u32,
            _ => self.rng.next() as u32,
        }
    }

    // ---- Issuing an ioctl ---------------------------------------------------

    fn pick_loc(&mut self, size: usize) -> Loc {
        if self.sane {
            return Loc::Heap;
        }
        match self.rng.below(100) {
            0..=87 => Loc::Heap,
            88..=92 => match self.arena.any(&mut self.rng, true) {
                Some(i) if self.arena.bufs[i].len >= size => {
                    let off = self.rng.below((self.arena.bufs[i].len - size + 1) as u64) as usize;
                    Loc::Buf(self.arena.slot(i) + off)
                }
                _ => Loc::Heap,
            },
            93 | 94 => match self.arena.any(&mut self.rng, true) {
                Some(i) if self.arena.bufs[i].len >= size => {
                    let off = self.rng.below((self.arena.bufs[i].len - size + 1) as u64) as usize;
                    Loc::RoBuf(self.arena.slot(i) + off)
                }
                _ => Loc::Heap,
            },
            95 | 96 => match self.arena.any(&mut self.rng, true) {
                Some(i) if size > 1 && self.arena.bufs[i].len >= size => {
                    let k = self.rng.range(1, size as u64 - 1) as usize;
                    Loc::Straddle(self.arena.slot(i) + self.arena.bufs[i].len - k, k)
                }
                _ => Loc::Heap,
            },
            _ => Loc::Bad(self.bad_addr()),
        }
    }

    fn raw(&self, fd: i32, c: u32, arg: u64) -> i32 {
        // SAFETY: the argument is our struct, a buffer of our arena, or an
        // address that is not user memory; the driver may write only into
        // the first two (see mem.rs).
        let r = kfault::during(|| unsafe { libc::ioctl(fd, c as _, arg as *mut c_void) });
        if r < 0 {
            errno()
        } else {
            0
        }
    }

    /// Issue `c` with `v` at a random place; returns the errno (0: success)
    /// and whether `v` holds what the driver wrote back.  Checks the errno
    /// against the op's set and the EBADF/EFAULT rules.
    fn call<T: Copy>(&mut self, op: Op, fdi: usize, c: u32, v: &mut T) -> (i32, bool) {
        let size = size_of::<T>();
        let fd = self.fds[fdi].fd;
        let loc = self.pick_loc(size);
        self.what.push_str(&format!(" loc={loc:?}"));
        self.trace();
        let (e, readback) = match loc {
            Loc::Heap => (self.raw(fd, c, v as *mut T as u64), true),
            Loc::Buf(at) | Loc::RoBuf(at) => {
                let ro = matches!(loc, Loc::RoBuf(_));
                // SAFETY: [at, at + size) is in a writable arena buffer.
                unsafe { std::ptr::write_unaligned(at as *mut T, *v) };
                let page = at & !(PAGE - 1);
                let plen = (at + size - page).div_ceil(PAGE) * PAGE;
                if ro {
                    // SAFETY: protection change inside our arena.
                    unsafe { libc::mprotect(page as *mut c_void, plen, libc::PROT_READ) };
                }
                let e = self.raw(fd, c, at as u64);
                if ro {
                    // SAFETY: as above, back to what the buffer had.
                    unsafe {
                        libc::mprotect(
                            page as *mut c_void,
                            plen,
                            libc::PROT_READ | libc::PROT_WRITE,
                        )
                    };
                }
                // SAFETY: as above.
                *v = unsafe { std::ptr::read_unaligned(at as *const T) };
                // What the driver wrote there is not necessarily what we
                // read: arena buffers are also copy targets, of this
                // process's pending async copies and of other processes'
                // copies into regions over them, which may land at any
                // time (a 30-minute run saw one).  Only the heap copy of
                // the argument is checked.
                (e, false)
            }
            Loc::Straddle(at, k) => {
                // SAFETY: [at, at + k) is the writable tail of a buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), at as *mut u8, k)
                };
                (self.raw(fd, c, at as u64), false)
            }
            Loc::Bad(a) => (self.raw(fd, c, a), false),
        };
        self.shared.count(op, e);
        if e != 0 && !op.allows(e) {
            self.fail(&format!(
                "{} failed with {} (not in its errno set)",
                op.name(),
                errno_name(e)
            ));
        }
        if self.fds[fdi].rdonly && e != libc::EBADF {
            self.fail(&format!(
                "{} on an O_RDONLY fd gave {}, expected EBADF",
                op.name(),
                errno_name(e)
            ));
        }
        if matches!(loc, Loc::Bad(_) | Loc::Straddle(..)) && e == 0 {
            self.fail(&format!(
                "{} succeeded with an unreadable argument",
                op.name()
            ));
        }
        if matches!(loc, Loc::RoBuf(_)) && e == 0 && op_writes_back(op) {
            self.fail(&format!(
                "{} succeeded although its result could not be written back",
                op.name()
            ));
        }
        (e, readback && e == 0)
    }

    // ---- Commands ---------------------------------------------------------

    fn op_get_info(&mut self) {
        let fdi = self.pick_fd();
        self.what = "GET_INFO".into();
        let mut a: abi::knem_cmd_info = unsafe_zeroed();
        let (_, ok) = self.call(Op::GetInfo, fdi, cmd::GET_INFO, &mut a);
        if ok && a.abi != abi::KNEM_ABI_VERSION {
            self.fail(&format!("GET_INFO abi {:#x}", a.abi));
        }
    }

    fn op_bind_offload(&mut self) {
        let fdi = self.pick_fd();
        let flags = match self.rng.below(20) {
            0..=9 => self.rng.pick(&[
                abi::KNEM_BIND_FLAG_CUSTOM,
                abi::KNEM_BIND_FLAG_CURRENT,
                abi::KNEM_BIND_FLAG_CURRENT_REVERSED,
            ]),
            10..=13 => 0,
            14..=16 => self.rng.next() as u32 & 7,
            _ => self.rng.next() as u32,
        };
        let mask_len = self
            .rng
            .pick(&[0, 1, 4, 8, 16, 128, 512, 4096, 1 << 20, u32::MAX]);
        let mut mask = vec![0u8; 4096];
        match self.rng.below(3) {
            0 => mask.iter_mut().for_each(|b| *b = 0xff),
            1 => mask.iter_mut().for_each(|b| *b = self.rng.next() as u8),
            _ => {}
        }
        let mask_ptr = match self.rng.below(10) {
            0..=6 => mask.as_ptr() as u64,
            7 => self.bad_addr(),
            _ => {
                let n = (mask_len as usize).clamp(1, 64);
                self.place_at_end(&mask[..n], false).unwrap_or(0)
            }
        };
        self.what =
            format!("BIND_OFFLOAD flags={flags:#x} mask_len={mask_len} mask_ptr={mask_ptr:#x}");
        let mut a = abi::knem_cmd_bind_offload {
            flags,
            mask_len,
            mask_ptr,
        };
        let (e, _) = self.call(Op::BindOffload, fdi, cmd::BIND_OFFLOAD, &mut a);
        let mapped = self.ctx_of(fdi).map(|c| c.mapped).unwrap_or(false);
        if e == 0 && mapped {
            self.fail("BIND_OFFLOAD succeeded after the status array was mapped (want EBUSY)");
        }
    }

    fn op_create(&mut self, legacy: bool) {
        let fdi = self.pick_fd();
        let n_live: usize = self.ctxs.iter().map(|c| c.cookies.len()).sum();
        if n_live >= MAX_COOKIES {
            self.op_destroy();
            return;
        }
        let io = self.gen_iovecs();
        let flags = match if self.sane { 0 } else { self.rng.below(100) } {
            0..=74 => {
                (if self.rng.chance(15) { F_SINGLEUSE } else { 0 })
                    | (if self.rng.chance(30) { F_ANYUSER } else { 0 })
            }
            75..=89 => {
                (self.rng.next() as u32 & (F_SINGLEUSE | F_ANYUSER)) | (1 << self.rng.range(8, 31))
            }
            _ => self.rng.next() as u32,
        };
        let prot = match if self.sane { 0 } else { self.rng.below(100) } {
            0..=49 => (libc::PROT_READ | libc::PROT_WRITE) as u32,
            50..=74 => libc::PROT_READ as u32,
            75..=89 => libc::PROT_WRITE as u32,
            90..=94 => 0,
            _ => self.rng.next() as u32,
        };
        let (_, ok, cookie) = if legacy {
            self.what = format!("INIT_SEND iov={:#x} nr={} flags={flags:#x}", io.ptr, io.nr);
            let mut a = abi::knem_cmd_init_send_param {
                send_iovec_array: io.ptr,
                send_iovec_nr: io.nr,
                flags,
                send_cookie: self.rng.next(),
            };
            let (e, ok) = self.call(Op::InitSend, fdi, cmd::INIT_SEND, &mut a);
            (e, ok, a.send_cookie)
        } else {
            self.what = format!(
                "CREATE_REGION iov={:#x} nr={} flags={flags:#x} prot={prot:#x}",
                io.ptr, io.nr
            );
            let mut a = abi::knem_cmd_create_region {
                iovec_array: io.ptr,
                iovec_nr: io.nr,
                flags,
                protection: prot,
                pad: self.rng.next() as u32,
                cookie: self.rng.next(),
            };
            let (e, ok) = self.call(Op::CreateRegion, fdi, cmd::CREATE_REGION, &mut a);
            (e, ok, a.cookie)
        };
        drop(io);
        if ok {
            if cookie == 0 {
                self.fail("cookie 0");
            }
            let slot = self.rng.next();
            self.shared.publish(slot, cookie);
            if let Some(c) = self.ctx_of(fdi) {
                c.cookies.push(cookie);
            }
        }
    }

    fn op_destroy(&mut self) {
        let fdi = self.pick_fd();
        let own = self
            .ctx_of(fdi)
            .map(|c| c.cookies.clone())
            .unwrap_or_default();
        let (cookie, mine) = if !own.is_empty() && self.rng.chance(70) {
            (self.rng.pick(&own), true)
        } else {
            (self.pick_cookie(fdi), false)
        };
        self.what = format!("DESTROY_REGION {cookie:#x} mine={mine}");
        let mut a: u64 = cookie;
        let (e, _) = self.call(Op::DestroyRegion, fdi, cmd::DESTROY_REGION, &mut a);
        if e == 0 {
            if self.dead.contains(&cookie) {
                self.fail("destroyed a cookie twice");
            }
            if IMPOSSIBLE_COOKIES.contains(&cookie) {
                self.fail("destroyed an impossible cookie");
            }
        }
        // Whatever happened, a cookie of ours that was not destroyed here
        // may be gone (single use, a fork destroyed it): forget it on
        // EINVAL, remember it as dead on success.
        if e == 0 || e == libc::EINVAL {
            for c in self.ctxs.iter_mut() {
                c.cookies.retain(|&x| x != cookie);
            }
        }
        if e == 0 {
            self.dead.push(cookie);
            let n = self.dead.len();
            if n > 256 {
                self.dead.drain(..n - 256);
            }
        }
    }

    /// Checks common to every copy: impossible or destroyed cookies, and
    /// the status written back.  (Undefined flag bits are masked off, as
    /// KNEM does, so a copy carrying them may succeed.)
    fn check_copy(&mut self, e: i32, ok: bool, flags: u32, cookies: &[u64], status: u32) {
        if e != 0 {
            return;
        }
        for c in cookies {
            if IMPOSSIBLE_COOKIES.contains(c) {
                self.fail(&format!("copy succeeded with cookie {c:#x}"));
            }
            if self.dead.contains(c) {
                self.fail(&format!("copy succeeded with destroyed cookie {c:#x}"));
            }
        }
        // A handed-off cookie is single-use: the copy that succeeded with
        // it consumed it, so no later copy may.
        for &c in cookies {
            if self
                .shared
                .handoff
                .iter()
                .any(|h| h.load(Ordering::Acquire) == c)
            {
                self.shared.event(Ev::HandoffConsumed);
                self.dead.push(c);
            }
        }
        if !ok {
            return;
        }
        if status > 2 {
            self.fail(&format!("current_status {status}"));
        }
        if flags & ANY_ASYNC == 0 && status == 0 {
            self.fail("synchronous request returned PENDING");
        }
        if flags & ANY_ASYNC != 0 && status == 0 {
            self.shared.event(Ev::AsyncPending);
        }
    }

    fn forget_single_use(&mut self, cookies: &[u64]) {
        // Single-use regions vanish at lookup: keep the lists small by
        // dropping cookies now and then; the pool keeps them for reuse.
        if self.rng.chance(10) {
            for c in self.ctxs.iter_mut() {
                c.cookies.retain(|x| !cookies.contains(x));
            }
        }
    }

    fn op_inline(&mut self, bounded: bool) {
        let fdi = self.pick_fd();
        let io = self.gen_iovecs();
        let cookie = self.pick_cookie(fdi);
        let write = if self.sane || self.rng.chance(92) {
            self.rng.below(2) as u32
        } else {
            self.rng.next() as u32
        };
        let off = self.gen_offset();
        let flags = self.gen_copy_flags();
        let idx = self.gen_index(fdi);
        let (e, ok, st) = if bounded {
            let length = self.gen_bound();
            self.what = format!(
                "INLINE_COPY_BOUNDED iov={:#x} nr={} write={write} cookie={cookie:#x} off={off:#x} len={length:#x} flags={flags:#x} idx={idx}",
                io.ptr, io.nr
            );
            let mut a = abi::knem_cmd_inline_copy_bounded {
                local_iovec_array: io.ptr,
                local_iovec_nr: io.nr,
                write,
                remote_cookie: cookie,
                remote_offset: off,
                length,
                flags,
                current_status: 0xdead,
                async_status_index: idx,
                pad: self.rng.next() as u32,
            };
            let (e, ok) = self.call(Op::InlineCopyBounded, fdi, cmd::INLINE_COPY_BOUNDED, &mut a);
            (e, ok, a.current_status)
        } else {
            self.what = format!(
                "INLINE_COPY iov={:#x} nr={} write={write} cookie={cookie:#x} off={off:#x} flags={flags:#x} idx={idx}",
                io.ptr, io.nr
            );
            let mut a = abi::knem_cmd_inline_copy {
                local_iovec_array: io.ptr,
                local_iovec_nr: io.nr,
                write,
                remote_cookie: cookie,
                remote_offset: off,
                flags,
                current_status: 0xdead,
                async_status_index: idx,
                pad: self.rng.next() as u32,
            };
            let (e, ok) = self.call(Op::InlineCopy, fdi, cmd::INLINE_COPY, &mut a);
            (e, ok, a.current_status)
        };
        drop(io);
        self.check_copy(e, ok, flags, &[cookie], st);
        self.forget_single_use(&[cookie]);
    }

    fn op_copy(&mut self, bounded: bool) {
        let fdi = self.pick_fd();
        let src = self.pick_cookie(fdi);
        let dst = self.pick_cookie(fdi);
        let so = self.gen_offset();
        let dof = self.gen_offset();
        let flags = self.gen_copy_flags();
        let idx = self.gen_index(fdi);
        let (e, ok, st) = if bounded {
            let length = self.gen_bound();
            self.what = format!(
                "COPY_BOUNDED src={src:#x}+{so:#x} dst={dst:#x}+{dof:#x} len={length:#x} flags={flags:#x} idx={idx}"
            );
            let mut a = abi::knem_cmd_copy_bounded {
                src_cookie: src,
                src_offset: so,
                dst_cookie: dst,
                dst_offset: dof,
                length,
                flags,
                current_status: 0xdead,
                async_status_index: idx,
                pad: self.rng.next() as u32,
            };
            let (e, ok) = self.call(Op::CopyBounded, fdi, cmd::COPY_BOUNDED, &mut a);
            (e, ok, a.current_status)
        } else {
            self.what = format!(
                "COPY src={src:#x}+{so:#x} dst={dst:#x}+{dof:#x} flags={flags:#x} idx={idx}"
            );
            let mut a = abi::knem_cmd_copy {
                src_cookie: src,
                src_offset: so,
                dst_cookie: dst,
                dst_offset: dof,
                flags,
                current_status: 0xdead,
                async_status_index: idx,
                pad: self.rng.next() as u32,
            };
            let (e, ok) = self.call(Op::Copy, fdi, cmd::COPY, &mut a);
            (e, ok, a.current_status)
        };
        self.check_copy(e, ok, flags, &[src, dst], st);
        self.forget_single_use(&[src, dst]);
    }

    /// --dma: an ASYNCDMACOMPLETE copy of more pieces than a batch's array
    /// holds, so the submission waits in the ioctl for its first 16384:
    /// the wait that the conductor's stalls, lowered timeouts and SIGKILLs
    /// cut, which abandons the batch (issue 21, item 1).  The source region
    /// is one page's pieces over and over; the destination one buffer.
    fn op_big_dma(&mut self) {
        if self.fds.is_empty() {
            self.op_open();
            return;
        }
        // Plausible all through: the point is the deep path.
        self.sane = true;
        let fdi = self.pick_fd();
        let (Some(si), Some(di)) = (
            self.arena.any(&mut self.rng, false),
            self.arena.any(&mut self.rng, true),
        ) else {
            return;
        };
        let piece = self.rng.pick(&[DMA_MIN, DMA_MIN, 48, 64]);
        let dlen = self.arena.bufs[di].len as u64;
        let n = (DMA_FULL_ARRAY + 1 + self.rng.below(512)).min(dlen / piece);
        let per_page = (self.arena.bufs[si].len as u64).min(PAGE as u64) / piece;
        if n == 0 || per_page == 0 {
            return;
        }
        let sbase = self.arena.slot(si) as u64;
        let dbase = self.arena.slot(di) as u64;
        let src: Vec<abi::knem_cmd_param_iovec> = (0..n)
            .map(|i| abi::knem_cmd_param_iovec {
                base: sbase + (i % per_page) * piece,
                len: piece,
            })
            .collect();
        let dst = [abi::knem_cmd_param_iovec {
            base: dbase,
            len: n * piece,
        }];
        let mut cookies = [0u64; 2];
        for (k, (io, prot)) in [
            (&src[..], libc::PROT_READ as u32),
            (&dst[..], libc::PROT_WRITE as u32),
        ]
        .into_iter()
        .enumerate()
        {
            self.what = format!(
                "CREATE_REGION (big DMA) iov={:#x} nr={} prot={prot:#x}",
                io.as_ptr() as u64,
                io.len()
            );
            let mut a = abi::knem_cmd_create_region {
                iovec_array: io.as_ptr() as u64,
                iovec_nr: io.len() as u32,
                flags: 0,
                protection: prot,
                pad: 0,
                cookie: 0,
            };
            let (_, ok) = self.call(Op::CreateRegion, fdi, cmd::CREATE_REGION, &mut a);
            if !ok {
                return;
            }
            cookies[k] = a.cookie;
            self.shared.publish(self.rng.next(), a.cookie);
            if let Some(c) = self.ctx_of(fdi) {
                c.cookies.push(a.cookie);
            }
        }
        let flags = F_DMA | F_ASYNC;
        let idx = self.gen_index(fdi);
        self.what = format!(
            "COPY (big DMA, {n} pieces of {piece}) src={:#x} dst={:#x} flags={flags:#x} idx={idx}",
            cookies[0], cookies[1]
        );
        self.shared.event(Ev::BigDma);
        let mut a = abi::knem_cmd_copy {
            src_cookie: cookies[0],
            src_offset: 0,
            dst_cookie: cookies[1],
            dst_offset: 0,
            flags,
            current_status: 0xdead,
            async_status_index: idx,
            pad: 0,
        };
        let (e, ok) = self.call(Op::Copy, fdi, cmd::COPY, &mut a);
        self.check_copy(e, ok, flags, &cookies, a.current_status);
    }

    fn op_sync_recv(&mut self) {
        let fdi = self.pick_fd();
        let io = self.gen_iovecs();
        let cookie = self.pick_cookie(fdi);
        let flags = self.gen_copy_flags();
        self.what = format!(
            "SYNC_RECV iov={:#x} nr={} cookie={cookie:#x} flags={flags:#x}",
            io.ptr, io.nr
        );
        let mut a = abi::knem_cmd_sync_recv_param {
            recv_iovec_array: io.ptr,
            recv_iovec_nr: io.nr,
            status: 0xdead,
            send_cookie: cookie,
            flags,
            pad: self.rng.next() as u32,
        };
        let (e, ok) = self.call(Op::SyncRecv, fdi, cmd::SYNC_RECV, &mut a);
        drop(io);
        let status = a.status;
        self.check_copy(e, ok, flags, &[cookie], status);
        self.forget_single_use(&[cookie]);
    }

    fn op_init_async_recv(&mut self) {
        let fdi = self.pick_fd();
        let io = self.gen_iovecs();
        let cookie = self.pick_cookie(fdi);
        let flags = self.gen_copy_flags();
        let idx = self.gen_index(fdi);
        self.what = format!(
            "INIT_ASYNC_RECV iov={:#x} nr={} cookie={cookie:#x} flags={flags:#x} idx={idx}",
            io.ptr, io.nr
        );
        let mut a = abi::knem_cmd_init_async_recv_param {
            recv_iovec_array: io.ptr,
            recv_iovec_nr: io.nr,
            status_index: idx,
            send_cookie: cookie,
            flags,
            pad: self.rng.next() as u32,
        };
        let (e, _) = self.call(Op::InitAsyncRecv, fdi, cmd::INIT_ASYNC_RECV, &mut a);
        drop(io);
        self.check_copy(e, false, flags, &[cookie], 0);
        self.forget_single_use(&[cookie]);
    }

    fn op_bad_ioctl(&mut self) {
        let fdi = self.pick_fd();
        let k = b'K' as u32;
        let c = loop {
            let c = match self.rng.below(20) {
                0..=5 => {
                    let dir = self.rng.below(4) as u32;
                    let any = self.rng.below(0x4000);
                    let size = self.rng.pick(&[0, 8, 16, 24, 32, 48, 56, any]) as u32;
                    (dir << 30) | (size << 16) | (k << 8) | self.rng.below(256) as u32
                }
                6..=13 => {
                    let base = self.rng.pick(&REAL_CMDS);
                    match self.rng.below(4) {
                        0 => base ^ ((self.rng.range(1, 3) as u32) << 30),
                        1 => {
                            let size = (base >> 16) & 0x3fff;
                            let ns = self.rng.pick(&[
                                0,
                                size.wrapping_sub(8),
                                size + 8,
                                0x3fff,
                                size / 2,
                            ]) & 0x3fff;
                            (base & !(0x3fff << 16)) | (ns << 16)
                        }
                        2 => {
                            (base & !0xff)
                                | ((base as u8).wrapping_add(self.rng.pick(&[1u8, 255, 16, 0x40]))
                                    as u32)
                        }
                        _ => base ^ (1 << self.rng.below(32)),
                    }
                }
                14..=16 => self.rng.next() as u32,
                _ => {
                    // Numbers near KNEM's, and the extension range above 0x40.
                    let nr = self.rng.pick(&[
                        0x12u32, 0x1f, 0x23, 0x2f, 0x36, 0x40, 0x41, 0x50, 0x7f, 0xff, 0x00,
                    ]);
                    let dir = self.rng.below(4) as u32;
                    let size = self.rng.pick(&[0u32, 8, 16, 32, 64]);
                    (dir << 30) | (size << 16) | (k << 8) | nr
                }
            };
            let magic = (c >> 8) & 0xff;
            // The VFS answers some numbers itself before the driver sees
            // them (FIONBIO, FIOASYNC, FIGETBSZ, FICLONE, FS_IOC_*).
            let vfs = matches!(magic, 0x00 | 0x15 | 0x54 | 0x58 | 0x66 | 0x94);
            if !REAL_CMDS.contains(&c) && !vfs {
                break c;
            }
        };
        let arg = if self.rng.chance(90) {
            self.scratch.as_mut_ptr() as u64
        } else {
            self.bad_addr()
        };
        self.what = format!("bad ioctl {c:#010x} arg={arg:#x}");
        self.trace();
        let fd = self.fds[fdi].fd;
        let e = self.raw(fd, c, arg);
        self.shared.count(Op::BadIoctl, e);
        if e == 0 {
            self.fail("an undefined command succeeded");
        } else if !Op::BadIoctl.allows(e) {
            self.fail(&format!(
                "undefined command gave {}, expected ENOTTY",
                errno_name(e)
            ));
        }
    }

    // ---- Status arrays, read, poll, write -------------------------------------

    fn op_mmap(&mut self) {
        if self.maps.len() >= MAX_MAPS {
            self.op_status_munmap();
        }
        let fdi = self.pick_fd();
        let len: u64 = match if self.sane { 0 } else { self.rng.below(100) } {
            0..=19 => 4096,
            20..=29 => 1,
            30..=39 => self.rng.range(2, 4095),
            40..=49 => 4097,
            50..=64 => self.rng.range(4098, 1 << 16),
            65..=74 => 1 << 20,
            75..=79 => 0,
            // Large, but small enough that a few dozen of them (one per
            // context, kept by mappings and forks) fit the 1 GiB guest.
            80..=83 => 1 << 22,
            84..=89 => 1 << 32,
            90..=93 => (1 << 32) + 1,
            94..=96 => 1 << 33,
            _ => self.rng.pick(&[1 << 40, !0xfff, u64::MAX]),
        };
        let off: i64 = match if self.sane { 0 } else { self.rng.below(20) } {
            0..=16 => 0,
            17 => 4096,
            18 => 1,
            _ => self.rng.pick(&[1i64 << 32, i64::MAX & !0xfff, -4096]),
        };
        let prot = match if self.sane { 0 } else { self.rng.below(20) } {
            0..=9 => libc::PROT_READ,
            10..=15 => libc::PROT_READ | libc::PROT_WRITE,
            16 => libc::PROT_WRITE,
            17 => libc::PROT_READ | libc::PROT_EXEC,
            _ => libc::PROT_NONE,
        };
        let flags = if self.sane || self.rng.chance(85) {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        let fd = self.fds[fdi].fd;
        self.what = format!("mmap len={len:#x} off={off:#x} prot={prot} flags={flags:#x} fd={fd}");
        self.trace();
        // SAFETY: a new mapping anywhere the kernel likes; never MAP_FIXED.
        let p = kfault::during(|| unsafe {
            libc::mmap(std::ptr::null_mut(), len as usize, prot, flags, fd, off)
        });
        let e = if p == libc::MAP_FAILED { errno() } else { 0 };
        self.shared.count(Op::Mmap, e);
        if e != 0 {
            if !Op::Mmap.allows(e) {
                self.fail(&format!("mmap failed with {}", errno_name(e)));
            }
            return;
        }
        let rdonly = self.fds[fdi].rdonly;
        let already = self.ctx_of(fdi).map(|c| c.mapped).unwrap_or(false);
        if rdonly && flags == libc::MAP_SHARED {
            self.fail("status-array mmap of an O_RDONLY fd succeeded");
        }
        if flags == libc::MAP_PRIVATE {
            self.fail("MAP_PRIVATE status-array mmap succeeded");
        }
        if already {
            self.fail("a second status-array mmap of one fd succeeded");
        }
        if off != 0 {
            self.fail("status-array mmap at a nonzero offset succeeded");
        }
        if len > 1 << 32 {
            self.fail("status array over 2^32 slots mapped");
        }
        if let Some(c) = self.ctx_of(fdi) {
            c.mapped = true;
            c.slots = len;
        }
        self.maps.push(Mapping {
            base: p as usize,
            len: (len as usize).div_ceil(PAGE) * PAGE,
            lo: 0,
            slots: len,
            readable: prot & libc::PROT_READ != 0,
        });
    }

    fn op_status_munmap(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let i = self.rng.below(self.maps.len() as u64) as usize;
        let m = &mut self.maps[i];
        if m.len - m.lo > PAGE && self.rng.chance(30) {
            // Split: drop the first still-mapped page.
            self.what = format!("munmap first page of status array at {:#x}", m.base + m.lo);
            // SAFETY: our mapping.
            unsafe { libc::munmap((m.base + m.lo) as *mut c_void, PAGE) };
            m.lo += PAGE;
        } else {
            let m = self.maps.remove(i);
            self.what = format!("munmap status array at {:#x}", m.base);
            // SAFETY: our mapping.
            unsafe { libc::munmap((m.base + m.lo) as *mut c_void, m.len - m.lo) };
        }
        self.trace();
        self.shared.event(Ev::StatusMunmap);
    }

    fn op_slot_read(&mut self) {
        let r: Vec<usize> = (0..self.maps.len())
            .filter(|&i| self.maps[i].readable && (self.maps[i].lo as u64) < self.maps[i].slots)
            .collect();
        if r.is_empty() {
            return;
        }
        let m = self.maps[self.rng.pick(&r)].clone();
        let top = m.slots.min(m.len as u64);
        let idx = m.lo as u64 + self.rng.below(top - m.lo as u64);
        self.what = format!("read status slot {idx} of array at {:#x}", m.base);
        self.trace();
        // SAFETY: idx is inside the still-mapped, readable part.
        let v = unsafe { std::ptr::read_volatile((m.base as u64 + idx) as *const u8) };
        self.shared.event(Ev::SlotRead);
        if v > 2 {
            self.fail(&format!("status slot {idx} holds {v}"));
        }
    }

    fn op_read(&mut self) {
        let fdi = self.pick_fd();
        let f = self.fds[fdi].clone();
        let count = self.rng.pick(&[0usize, 1, 3, 4, 8, 64, 4096, 16384]);
        let buf = match self.rng.below(20) {
            0..=16 => self.scratch.as_mut_ptr() as u64,
            17 | 18 => self.bad_addr(),
            _ => self.buf_addr(false).map(|b| b.0).unwrap_or(0),
        };
        let mut timer = false;
        let mut ready = false;
        if !f.rdonly && !f.nonblock {
            let mut p = libc::pollfd {
                fd: f.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            ready = n > 0 && p.revents & libc::POLLIN != 0;
            if !ready && !self.rng.chance(10) {
                return;
            }
            // A blocking read: a repeating timer interrupts it even if the
            // first signal comes before the read starts to wait.
            timer = true;
        }
        self.what = format!(
            "read fd={} count={count} buf={buf:#x} blocking-with-timer={timer}",
            f.fd
        );
        self.trace();
        if timer {
            arm_timer(20);
        }
        // A read the timer may interrupt runs without faults: the
        // kernel's copy of the signal frame on the way out would be failed
        // too, and SIGSEGV the fuzzer (nothing of the module's).
        // SAFETY: buf is our scratch (20000 bytes), an arena buffer, or not
        // user memory.
        let read = || unsafe { libc::read(f.fd, buf as *mut c_void, count) };
        let r = if timer { read() } else { kfault::during(read) };
        let e = if r < 0 { errno() } else { 0 };
        if timer {
            arm_timer(0);
        }
        self.shared.count(Op::Read, e);
        if e != 0 && !Op::Read.allows(e) {
            self.fail(&format!("read failed with {}", errno_name(e)));
        }
        if r > count as isize {
            self.fail(&format!("read returned {r} > {count}"));
        }
        // SAFETY: getpid cannot fail.
        let me = unsafe { libc::getpid() };
        if ready && e == libc::EINTR && count >= 4 && f.opener == me && self.children.is_empty() {
            // Nobody else holds this file (opened here, no live fork), so
            // nobody can have drained the queue between poll and read.
            self.fail("poll() reported POLLIN but a blocking read() waited until a signal");
        }
        if !f.rdonly && r > 0 {
            if r % 4 != 0 {
                self.fail(&format!("notify read returned {r} bytes, not whole u32s"));
            }
            self.shared.event(Ev::NotifyRead);
        }
    }

    fn op_poll(&mut self) {
        let fdi = self.pick_fd();
        let fd = self.fds[fdi].fd;
        let events = self.rng.pick(&[
            libc::POLLIN,
            libc::POLLOUT,
            libc::POLLIN | libc::POLLPRI,
            -1i16,
        ]);
        self.what = format!("poll fd={fd} events={events:#x}");
        self.trace();
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        let e = if n < 0 { errno() } else { 0 };
        self.shared.count(Op::Poll, e);
        if e != 0 && !Op::Poll.allows(e) {
            self.fail(&format!("poll failed with {}", errno_name(e)));
        }
        if n > 0 && p.revents & (libc::POLLNVAL | libc::POLLERR) != 0 {
            self.fail(&format!("poll revents {:#x}", p.revents));
        }
    }

    fn op_write(&mut self) {
        let fdi = self.pick_fd();
        let fd = self.fds[fdi].fd;
        let count = self.rng.pick(&[0usize, 1, 4, 64]);
        self.what = format!("write fd={fd} count={count}");
        self.trace();
        // SAFETY: the driver may only read our scratch.
        let r = kfault::during(|| unsafe { libc::write(fd, self.scratch.as_ptr().cast(), count) });
        let e = if r < 0 { errno() } else { 0 };
        self.shared.count(Op::Write, e);
        if e != 0 && !Op::Write.allows(e) {
            self.fail(&format!("write failed with {}", errno_name(e)));
        }
        if r > 0 {
            self.fail("write to /dev/knem succeeded");
        }
    }

    // ---- Processes -----------------------------------------------------------

    fn op_fork(&mut self, deadline: Instant) {
        if self.children.len() >= MAX_CHILDREN || self.depth >= MAX_DEPTH {
            return;
        }
        if deadline.saturating_duration_since(Instant::now()) < Duration::from_millis(200) {
            return;
        }
        let seed = mix(self.rng.next());
        self.nchild += 1;
        let name = format!("{}.c{}", self.name, self.nchild);
        self.what = format!("fork {name} seed={seed}");
        self.trace();
        // SAFETY: the process is single-threaded.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return;
        }
        if pid > 0 {
            self.children.push(pid);
            self.shared.event(Ev::Fork);
            return;
        }
        // The child: its own sequence with the parent's fds, regions and
        // buffers, then one of three ends.  Status arrays stay with the
        // parent (VM_DONTCOPY): none of them may be mapped here.
        for m in std::mem::take(&mut self.maps) {
            let mut vec = 0u8;
            // SAFETY: mincore only reports on the range; base is page-aligned.
            let r = unsafe { libc::mincore((m.base + m.lo) as *mut c_void, 1, &mut vec) };
            if r == 0 {
                self.fail(&format!(
                    "status array at {:#x} inherited by a fork",
                    m.base
                ));
            }
        }
        self.name = name;
        self.seed = seed;
        self.rng = Rng::new(seed);
        self.step = 0;
        self.depth += 1;
        self.children.clear();
        self.nchild = 0;
        self.reports = 0;
        // Its own make-it-fail, opened while it is still root.
        kfault::reopen();
        if self.allow_setuid && self.rng.chance(20) {
            // SAFETY: plain credential changes of this process.
            let ok = unsafe { libc::setgid(NOBODY) == 0 && libc::setuid(NOBODY) == 0 };
            if ok {
                self.shared.event(Ev::SetUid);
            }
        }
        // Inherited fds may serve only the parent: open some of our own.
        for _ in 0..self.rng.below(3) {
            self.op_open();
        }
        let life = Duration::from_millis(self.rng.range(50, 3000));
        let end = deadline.min(Instant::now() + life);
        let ending = self.rng.below(100);
        if ending >= 85 {
            self.kill_at = self.rng.range(1, 3000);
        }
        self.run(end);
        if ending < 60 {
            self.finish();
        } else {
            // Leave everything open to the kernel, children included.
            self.shared.event(Ev::ChildExitNoClose);
            if self.rng.chance(50) {
                for c in &self.children {
                    // SAFETY: our own child.
                    unsafe { libc::kill(*c, libc::SIGKILL) };
                }
            }
        }
        // SAFETY: leave at once, without running the parent's exit code.
        unsafe { libc::_exit(0) };
    }

    fn op_kill_child(&mut self) {
        if self.children.is_empty() {
            return;
        }
        let c = self.rng.pick(&self.children);
        self.what = format!("SIGKILL child {c}");
        self.trace();
        // SAFETY: our own child.
        unsafe { libc::kill(c, libc::SIGKILL) };
        self.shared.event(Ev::KillChild);
    }

    /// Collect exited children; with `all`, wait (20 s at most) for every
    /// one.
    fn reap(&mut self, all: bool) {
        let start = Instant::now();
        loop {
            let mut i = 0;
            while i < self.children.len() {
                let pid = self.children[i];
                let mut st = 0;
                // SAFETY: our own child.
                let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
                if r == pid || r < 0 {
                    self.children.remove(i);
                    if r == pid {
                        self.check_exit(pid, st);
                    }
                } else {
                    i += 1;
                }
            }
            if !all || self.children.is_empty() {
                return;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let list = self.children.clone();
                for pid in list {
                    let w = proc_text(pid, "wchan");
                    let s = proc_text(pid, "stack");
                    self.what = format!("reap child {pid}");
                    self.fail(&format!(
                        "child {pid} still alive 20 s after SIGKILL; wchan={w} stack={}",
                        s.replace('\n', " | ")
                    ));
                }
                self.children.clear();
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn check_exit(&mut self, pid: i32, st: i32) {
        if libc::WIFSIGNALED(st) && libc::WTERMSIG(st) != libc::SIGKILL {
            self.what = format!("reap child {pid}");
            self.fail(&format!(
                "child {pid} died of signal {}",
                libc::WTERMSIG(st)
            ));
        } else if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) != 0 {
            self.what = format!("reap child {pid}");
            self.fail(&format!(
                "child {pid} exited with {}",
                libc::WEXITSTATUS(st)
            ));
        }
    }
}

/// Kernel arrays sized by the declared pages (8 bytes a page) between
/// 32 MiB and 2 GiB can be allocated only at the cost of the OOM killer in
/// a 1 GiB guest; shrink the lengths that put a request in that band.
fn tame_lengths(v: &mut [abi::knem_cmd_param_iovec]) {
    let band = |v: &[abi::knem_cmd_param_iovec]| {
        let pages: u64 = v
            .iter()
            .fold(0u64, |a, io| a.saturating_add(io.len / PAGE as u64 + 2));
        let bytes = pages.saturating_mul(8);
        (32 << 20..=1 << 31).contains(&bytes)
    };
    if band(v) {
        for io in v.iter_mut() {
            if io.len > 1 << 20 {
                io.len &= (1 << 20) - 1;
            }
        }
    }
}

/// Whether the driver writes the argument back on success.
fn op_writes_back(op: Op) -> bool {
    matches!(
        op,
        Op::GetInfo
            | Op::InitSend
            | Op::CreateRegion
            | Op::SyncRecv
            | Op::Copy
            | Op::CopyBounded
            | Op::InlineCopy
            | Op::InlineCopyBounded
    )
}

fn unsafe_zeroed<T: Copy>() -> T {
    // SAFETY: only used for the plain-integer ABI structs.
    unsafe { std::mem::zeroed() }
}

/// Repeating ITIMER_REAL every `ms` milliseconds (0 disarms); the SIGALRM
/// handler does nothing, so a blocked read returns EINTR.
pub fn arm_timer(ms: i64) {
    let t = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: ms / 1000,
            tv_usec: (ms % 1000) * 1000,
        },
        it_value: libc::timeval {
            tv_sec: ms / 1000,
            tv_usec: (ms % 1000) * 1000,
        },
    };
    // SAFETY: plain syscall with a valid struct.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &t, std::ptr::null_mut()) };
}

/// A file of /proc/PID, trimmed ("?" if unreadable).
pub fn proc_text(pid: i32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}
