//! The ioctl decoder on the mock kernel, against a reference model.
//!
//! An input is a sequence of operations on three contexts (two of uid
//! 1000, one of uid 2000): an ioctl of each of the eleven commands, an
//! undefined command (random, or a defined one with a bit flipped), a
//! status-array mapping, a step of a context's offload thread, a read of
//! its notifications, a completion of the DMA engine, a file release (and
//! reopen), a change of a caller's real uid (setuid() after open), and
//! changes of the access policy, the DMA engine, the locked
//! memory limit and the shim's pin batch size.
//!
//! Every field of an argument is chosen from the input either among the
//! values that name something (a live cookie, the iovec array just
//! written, a valid flag combination, a status slot) or raw; argument
//! structs sit in writable memory, read-only memory, across the end of a
//! mapping or nowhere; iovecs point at the data pages, the read-only pages,
//! across a mapping's end, at each other, or anywhere.
//!
//! The model predicts, from the decoded argument and its own state, the
//! set of errnos each call may legitimately fail with (one per violated
//! rule, so the checks' order is not modelled) or that it must succeed,
//! and then checks what the call did:
//!
//! * the return value is in that set (an undefined command gives ENOTTY),
//!   and the per-errno counter moved by one;
//! * the region table: new cookies are non-zero and fresh, destroyed and
//!   consumed (single-use) regions are gone, access follows the owner /
//!   caller's uid now / ptrace / ANY_USER_ACCESS rules and the protection;
//!   flag bits outside a command's mask are dropped, never refused;
//! * user memory: after every call the data pages hold exactly what the
//!   model's byte-by-byte copy predicts (memmove's result for a region
//!   copied onto itself; a copy that faults part-way stops less than a
//!   page before the first bad byte), and nothing else changed; the
//!   read-only pages never change;
//! * status: `current_status`, the status slots (no slot is ever written
//!   but the one a request names), PENDING for asynchronous requests,
//!   completion in submission order on run, NOTIFY_FD indices in order;
//! * resources after every operation: live regions, pinned pages (core
//!   counter, mock pins and the mm's `pinned_vm` alike), owner records,
//!   RCU frees, byte counters, queued requests and notification credits;
//!   at the end, after releasing every context, all of it is zero.

use super::Input;
use crate::context::Context;
use crate::device::Device;
use crate::env::PAGE_SIZE;
use crate::errno::*;
use crate::kalloc::{KBox, MAX_ALLOC};
use crate::mock::MockEnv;
use crate::stats::KnemCoreStats;
use crate::user::{bytes_of, Pod, MAX_IOVECS};
use core::mem::offset_of;
use knem_abi::knem_cmd_param_iovec as Iov;
use knem_abi::*;
use std::boxed::Box;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::vec::Vec;

/// The commands, in the order of [`Summary::ok`].
pub const CMDS: [u32; 11] = [
    cmd::GET_INFO,
    cmd::BIND_OFFLOAD,
    cmd::INIT_SEND,
    cmd::CREATE_REGION,
    cmd::DESTROY_REGION,
    cmd::INIT_ASYNC_RECV,
    cmd::SYNC_RECV,
    cmd::COPY,
    cmd::INLINE_COPY,
    cmd::COPY_BOUNDED,
    cmd::INLINE_COPY_BOUNDED,
];

/// What one input exercised (the corpus test checks the corpus reaches
/// every path that matters).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Successful calls per command of [`CMDS`].
    pub ok: [u32; 11],
    /// Failed calls per command of [`CMDS`].
    pub failed: [u32; 11],
    /// Undefined commands.
    pub undefined: u32,
    /// Synchronous copies that reported FAILED (a fault part-way).
    pub copy_failed: u32,
    /// Copies whose every destination byte was predicted exactly.
    pub data_exact: u32,
    /// Requests run by the offload thread.
    pub thread_done: u32,
    /// Requests completed by the DMA engine.
    pub dma_done: u32,
    /// NOTIFY_FD indices read back.
    pub notified: u32,
    /// Single-use regions consumed.
    pub consumed: u32,
    /// Contexts released (during the sequence, not at the end).
    pub released: u32,
    /// Requests dropped by a release before they ran.
    pub dropped: u32,
}

const D_PAGES: u64 = 4;
const D_LEN: u64 = D_PAGES * PAGE_SIZE;
const R_PAGES: u64 = 2;
const R_LEN: u64 = R_PAGES * PAGE_SIZE;
/// Longest copy modelled byte by byte (longer ones: any destination value).
const MAX_MODELLED: u64 = 1 << 21;
const UIDS: [u32; 3] = [1000, 1000, 2000];
/// Largest page array (in pages) a call may make the core allocate: a
/// call over a list of more pages (up to the core's 1 GiB allocation
/// limit) is not made, being slow and never pinnable here anyway.
const MAX_PAGE_ARRAY: u128 = 1 << 20;
/// Initial value of every status slot: not a status, so a stray write shows.
const SLOT_SENTINEL: u8 = 0x55;
/// Initial value of every output field of an argument.
const OUT_SENTINEL: u64 = 0x5a5a_5a5a_5a5a_5a5a;

/// A set of errnos (bit n: errno n).
#[derive(Clone, Copy, Default)]
struct Errs(u32);

impl core::fmt::Debug for Errs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let set: Vec<i64> = (1..32).map(|n| -n).filter(|&r| self.has(r)).collect();
        write!(f, "{set:?}")
    }
}

impl Errs {
    fn add(&mut self, e: Errno) {
        self.0 |= 1 << e.0;
    }
    fn has(&self, r: i64) -> bool {
        (1..32).contains(&-r) && self.0 & (1 << -r) != 0
    }
    fn is_empty(&self) -> bool {
        self.0 == 0
    }
}

/// How a call ended, as the model saw it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// Failed before doing anything.
    Early,
    /// Did its work, then could not write its output (EFAULT).
    Late,
    /// Succeeded.
    Ok,
}

/// The harness's mappings: address, length, writable.
struct Space {
    maps: Vec<(u64, u64, bool)>,
}

impl Space {
    fn find(&self, addr: u64) -> Option<(u64, u64, bool)> {
        self.maps
            .iter()
            .copied()
            .find(|&(s, l, _)| s <= addr && addr - s < l)
    }

    /// `len` bytes at `addr` are mapped (and writable if `write`).
    fn ok(&self, addr: u64, len: u64, write: bool) -> bool {
        if len == 0 {
            return true;
        }
        let Some(last) = addr.checked_add(len - 1) else {
            return false;
        };
        // Mappings are separated by guard pages: one must hold it all.
        matches!(self.find(addr), Some((s, l, w)) if last - s < l && (w || !write))
    }

    /// Every page of every non-empty segment can be pinned.
    fn pinnable(&self, segs: &[Iov], write: bool) -> bool {
        segs.iter().filter(|v| v.len > 0).all(|v| {
            let first = v.base & !(PAGE_SIZE - 1);
            let last = (v.base + v.len - 1) & !(PAGE_SIZE - 1);
            matches!(self.find(first), Some((s, l, w)) if last - s < l && (w || !write))
        })
    }

    fn overlaps(&self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len);
        self.maps
            .iter()
            .any(|&(s, l, _)| addr < s.saturating_add(l) && s < end)
    }
}

/// Pages a validated list spans (u128: no overflow for any list).
fn pages_of(segs: &[Iov]) -> u128 {
    segs.iter()
        .filter(|v| v.len > 0)
        .map(|v| (((v.base + v.len - 1) / PAGE_SIZE) - v.base / PAGE_SIZE + 1) as u128)
        .sum()
}

fn total_of(segs: &[Iov]) -> u64 {
    segs.iter().map(|v| v.len).sum()
}

/// User addresses of `take` flattened bytes from offset `skip`.
fn flat(segs: &[Iov], skip: u64, take: u64) -> Vec<u64> {
    let mut out = Vec::with_capacity(take as usize);
    let mut skip = skip;
    for v in segs {
        if out.len() as u64 == take {
            break;
        }
        if skip >= v.len {
            skip -= v.len;
            continue;
        }
        let n = (v.len - skip).min(take - out.len() as u64);
        out.extend((0..n).map(|k| v.base + skip + k));
        skip = 0;
    }
    out
}

/// A pinned segment list: a region, or the caller's side of a copy that
/// runs page to page.
struct Obj {
    segs: Vec<Iov>,
    pages: u64,
    counted: bool,
    refs: u32,
}

/// A live table entry.
#[derive(Clone, Copy)]
struct Entry {
    obj: usize,
    owner: u64,
    uid: u32,
    prot: u32,
    flags: u32,
}

/// A request between two pinned lists, as queued.
struct Job {
    src: usize,
    src_off: u64,
    dst: usize,
    dst_off: u64,
    bound: Option<u64>,
    index: u32,
    notify: bool,
    /// Submitted to the engine with a minimum: the small pieces were
    /// copied by the CPU then.
    split: bool,
}

/// A context as the model sees it.
struct MCtx {
    id: u64,
    /// Real uid at open: the owner of the regions it creates.
    uid: u32,
    /// Real uid of the calling process now (it may have setuid()ed).
    caller_uid: u32,
    /// Index into `H::arrays`, and the slots' expected values.
    array: Option<(usize, Vec<u8>)>,
    pending: VecDeque<Job>,
    ready: VecDeque<u32>,
    credits: u64,
}

/// Expected value of a destination byte.
#[derive(Clone, Copy, Debug)]
enum Want {
    Exact(u8),
    Either(u8, u8),
    Any,
}

/// Which copy command.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Inline { bounded: bool },
    SyncRecv,
    AsyncRecv,
    Pair { bounded: bool },
}

/// A copy command's decoded argument.
struct CopyArg {
    arr: u64,
    nr: u32,
    write: bool,
    cookie: u64,
    offset: u64,
    dst_cookie: u64,
    dst_offset: u64,
    bound: Option<u64>,
    flags: u32,
    index: u32,
    /// Offset of the status the call writes back (None: INIT_ASYNC_RECV).
    status_at: Option<u64>,
}

/// Where an argument struct is put.
#[derive(Clone, Copy)]
enum Place {
    /// The writable argument page, at this offset.
    Rw(u64),
    /// The read-only argument page, at this offset.
    Ro(u64),
    /// The end of the writable page, the last bytes in the guard page.
    Straddle(u64),
    /// An unmapped address.
    Nowhere(u64),
}

/// The harness: the device, the contexts, and the model.
struct H {
    dev: Box<Device<MockEnv>>,
    kctx: Vec<Option<KBox<Context>>>,
    space: Space,
    d: u64,
    r: u64,
    arg: u64,
    arg_ro: u64,
    iov: u64,
    mask: u64,
    shadow_d: Vec<u8>,
    shadow_r: Vec<u8>,
    objs: Vec<Option<Obj>>,
    table: BTreeMap<u64, Entry>,
    history: Vec<u64>,
    ctxs: Vec<MCtx>,
    /// Status arrays, alive until every context is released.
    arrays: Vec<Box<[AtomicU8]>>,
    /// ASYNCDMACOMPLETE requests the engine has not completed (context).
    dma_q: VecDeque<(usize, Job)>,
    dma_on: bool,
    dma_min: u64,
    ptrace: bool,
    denied: bool,
    memlock: Option<u64>,
    /// Expected counters.
    created: u64,
    regions_created: u64,
    bytes_read: u64,
    bytes_write: u64,
    bytes_pair: u64,
    bytes_async: u64,
    copies_failed: u64,
    sum: Summary,
}

fn fill_pattern(seed: u32, len: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn as_bytes<T: Pod>(v: &T) -> Vec<u8> {
    bytes_of(std::slice::from_ref(v)).to_vec()
}

impl H {
    fn new() -> H {
        let dev = Box::new(Device::new(MockEnv::new()));
        let env = &dev.env;
        let d = env.map(D_LEN, true);
        let r = env.map(R_LEN, false);
        let arg = env.map(PAGE_SIZE, true);
        let arg_ro = env.map(PAGE_SIZE, false);
        let iov = env.map(PAGE_SIZE, true);
        let mask = env.map(PAGE_SIZE, true);
        let shadow_d = fill_pattern(0x9e37_79b9, D_LEN);
        let shadow_r = fill_pattern(0x85eb_ca6b, R_LEN);
        env.fill(d, &shadow_d);
        env.fill(r, &shadow_r);
        let space = Space {
            maps: vec![
                (d, D_LEN, true),
                (r, R_LEN, false),
                (arg, PAGE_SIZE, true),
                (arg_ro, PAGE_SIZE, false),
                (iov, PAGE_SIZE, true),
                (mask, PAGE_SIZE, true),
            ],
        };
        let mut kctx = Vec::new();
        let mut ctxs = Vec::new();
        for uid in UIDS {
            let k = dev.ctx_new(uid).expect("context");
            ctxs.push(MCtx {
                id: k.id,
                uid,
                caller_uid: uid,
                array: None,
                pending: VecDeque::new(),
                ready: VecDeque::new(),
                credits: 0,
            });
            kctx.push(Some(k));
        }
        H {
            dev,
            kctx,
            space,
            d,
            r,
            arg,
            arg_ro,
            iov,
            mask,
            shadow_d,
            shadow_r,
            objs: Vec::new(),
            table: BTreeMap::new(),
            history: Vec::new(),
            ctxs,
            arrays: Vec::new(),
            dma_q: VecDeque::new(),
            dma_on: false,
            dma_min: 0,
            ptrace: false,
            denied: false,
            memlock: None,
            created: 0,
            regions_created: 0,
            bytes_read: 0,
            bytes_write: 0,
            bytes_pair: 0,
            bytes_async: 0,
            copies_failed: 0,
            sum: Summary::default(),
        }
    }

    fn kctx(&self, c: usize) -> &Context {
        self.kctx[c].as_deref().expect("open context")
    }

    // ---- the model's memory ------------------------------------------

    /// The model's value of a data or read-only byte.
    fn value(&self, a: u64) -> Option<u8> {
        if a >= self.d && a - self.d < D_LEN {
            Some(self.shadow_d[(a - self.d) as usize])
        } else if a >= self.r && a - self.r < R_LEN {
            Some(self.shadow_r[(a - self.r) as usize])
        } else {
            None
        }
    }

    /// Expected destination bytes of a copy of `src[k]` to `dst[k]` of
    /// which the first `sure` bytes were copied and the next up to `maybe`
    /// may have been.  A destination written twice may end up with any
    /// value, and so may one whose source is also a destination, unless
    /// the copy is a `snapshot` (memmove: every source read before any
    /// destination is written).
    fn expect(
        &self,
        src: &[u64],
        dst: &[u64],
        sure: usize,
        maybe: usize,
        snapshot: bool,
    ) -> Vec<(u64, Want)> {
        let dsts: HashSet<u64> = dst[..maybe].iter().copied().collect();
        let mut count = vec![0u32; D_LEN as usize];
        for &a in &dst[..maybe] {
            if a >= self.d && a - self.d < D_LEN {
                count[(a - self.d) as usize] += 1;
            }
        }
        let mut out = Vec::new();
        for k in 0..maybe {
            let a = dst[k];
            if a < self.d || a - self.d >= D_LEN {
                continue;
            }
            let v = if !snapshot && dsts.contains(&src[k]) {
                None
            } else {
                self.value(src[k])
            };
            let w = match v {
                Some(v) if count[(a - self.d) as usize] == 1 => {
                    if k < sure {
                        Want::Exact(v)
                    } else {
                        Want::Either(self.shadow_d[(a - self.d) as usize], v)
                    }
                }
                _ => Want::Any,
            };
            out.push((a, w));
        }
        out
    }

    /// Everything in the data pages may have changed.
    fn anything(&self) -> Vec<(u64, Want)> {
        (0..D_LEN).map(|i| (self.d + i, Want::Any)).collect()
    }

    /// Compares memory with the model plus `want`, then adopts it.
    fn check_mem(&mut self, want: &[(u64, Want)]) {
        let env = &self.dev.env;
        let now_r = env.peek(self.r, R_LEN as usize);
        assert!(now_r == self.shadow_r, "read-only memory changed");
        let now = env.peek(self.d, D_LEN as usize);
        if want.is_empty() {
            if now != self.shadow_d {
                let i = (0..now.len())
                    .find(|&i| now[i] != self.shadow_d[i])
                    .unwrap();
                panic!("data byte {i} changed: {} -> {}", self.shadow_d[i], now[i]);
            }
            return;
        }
        let mut w: Vec<Option<Want>> = vec![None; D_LEN as usize];
        for &(a, x) in want {
            w[(a - self.d) as usize] = Some(x);
        }
        for (i, x) in w.iter().enumerate() {
            let (old, got) = (self.shadow_d[i], now[i]);
            let good = match *x {
                None => got == old,
                Some(Want::Exact(v)) => got == v,
                Some(Want::Either(a, b)) => got == a || got == b,
                Some(Want::Any) => true,
            };
            assert!(good, "data byte {i}: {got}, was {old}, want {x:?}");
        }
        self.shadow_d = now;
    }

    // ---- the model's regions -----------------------------------------

    fn new_obj(&mut self, segs: Vec<Iov>, pages: u64, counted: bool) -> usize {
        self.created += 1;
        self.objs.push(Some(Obj {
            segs,
            pages,
            counted,
            refs: 1,
        }));
        self.objs.len() - 1
    }

    fn obj(&self, id: usize) -> &Obj {
        self.objs[id].as_ref().expect("live object")
    }

    fn get(&mut self, id: usize) {
        self.objs[id].as_mut().expect("live object").refs += 1;
    }

    fn put(&mut self, id: usize) {
        let o = self.objs[id].as_mut().expect("live object");
        o.refs -= 1;
        if o.refs == 0 {
            self.objs[id] = None;
        }
    }

    fn pinned(&self) -> u64 {
        self.objs.iter().flatten().map(|o| o.pages).sum()
    }

    /// A single-use entry named by a successful copy leaves the table.
    fn consume(&mut self, cookie: u64) {
        let e = self.table[&cookie];
        if e.flags & KNEM_FLAG_SINGLEUSE != 0 {
            self.table.remove(&cookie);
            self.put(e.obj);
            self.sum.consumed += 1;
        }
    }

    /// lookup_checked's rules: live, allowed, protection.
    fn lookup(&self, c: usize, cookie: u64, write: bool) -> Result<Entry, Errno> {
        let e = *self.table.get(&cookie).ok_or(EINVAL)?;
        let ctx = &self.ctxs[c];
        let allowed = e.flags & KNEM_FLAG_ANY_USER_ACCESS != 0
            || if self.ptrace {
                e.owner == ctx.id || !self.denied
            } else {
                e.uid == ctx.caller_uid
            };
        if !allowed {
            return Err(EPERM);
        }
        let need = if write { 2 } else { 1 };
        if e.prot & need == 0 {
            return Err(EACCES);
        }
        Ok(e)
    }

    /// The iovecs the kernel reads and validates, or the errnos of why not.
    fn local(&self, errs: &mut Errs, arr: u64, nr: u32) -> Option<Vec<Iov>> {
        if nr > MAX_IOVECS {
            errs.add(EINVAL);
            return None;
        }
        let bytes = nr as u64 * 16;
        if !self.space.ok(arr, bytes, false) {
            errs.add(EFAULT);
            return None;
        }
        let raw = if nr == 0 {
            Vec::new()
        } else {
            self.dev.env.peek(arr, bytes as usize)
        };
        let segs: Vec<Iov> = raw
            .chunks(16)
            .map(|c| Iov {
                base: u64::from_le_bytes(c[..8].try_into().unwrap()),
                len: u64::from_le_bytes(c[8..].try_into().unwrap()),
            })
            .collect();
        let mut bad = false;
        if segs.iter().any(|v| v.base.checked_add(v.len).is_none()) {
            errs.add(EFAULT);
            bad = true;
        }
        if segs.iter().map(|v| v.len as u128).sum::<u128>() > u64::MAX as u128 {
            errs.add(EINVAL);
            bad = true;
        }
        (!bad).then_some(segs)
    }

    /// Pinning `segs`: the page array, RLIMIT_MEMLOCK, then the pages.
    /// None when the page array would be too big to be worth it (the
    /// operation is skipped).
    fn pin_errs(&self, errs: &mut Errs, segs: &[Iov], write: bool) -> Option<u64> {
        let pages = pages_of(segs);
        if pages * 8 > MAX_ALLOC as u128 {
            errs.add(ENOMEM);
            return Some(0);
        }
        if pages > MAX_PAGE_ARRAY {
            return None;
        }
        if matches!(self.memlock, Some(lim) if self.pinned() as u128 + pages > lim as u128) {
            errs.add(ENOMEM);
        }
        if !self.space.pinnable(segs, write) {
            errs.add(EFAULT);
        }
        Some(pages as u64)
    }

    // ---- calling the core --------------------------------------------

    /// One ioctl; checks the errno counters moved as they should.
    fn ioctl(&mut self, c: usize, cmd: u32, arg: u64) -> i64 {
        let before = self.dev.stats.snapshot();
        let r = self
            .dev
            .ioctl_as(self.kctx(c), self.ctxs[c].caller_uid, cmd, arg);
        let after = self.dev.stats.snapshot();
        let errs = |s: &KnemCoreStats| {
            [
                s.err_einval,
                s.err_eperm,
                s.err_eacces,
                s.err_efault,
                s.err_enomem,
                s.err_ebusy,
                s.err_enotty,
                s.err_other,
            ]
        };
        let (b, a) = (errs(&before), errs(&after));
        let which = [EINVAL, EPERM, EACCES, EFAULT, ENOMEM, EBUSY, ENOTTY]
            .iter()
            .position(|e| e.to_neg() == r)
            .unwrap_or(7);
        for i in 0..8 {
            let bump = (r != 0 && i == which) as u64;
            assert_eq!(a[i], b[i] + bump, "error counter {i} after {r}");
        }
        r
    }

    /// Checks `r` against the prediction.
    fn end(&self, what: &str, errs: Errs, late: bool, r: i64) -> End {
        if !errs.is_empty() {
            assert!(errs.has(r), "{what}: got {r}, want one of {errs:?}");
            End::Early
        } else if late {
            assert_eq!(r, EFAULT.to_neg(), "{what}: the output is unwritable");
            End::Late
        } else {
            assert_eq!(r, 0, "{what}: must succeed");
            End::Ok
        }
    }

    fn count(&mut self, cmd: u32, r: i64) {
        let i = CMDS.iter().position(|&c| c == cmd).unwrap();
        if r == 0 {
            self.sum.ok[i] += 1;
        } else {
            self.sum.failed[i] += 1;
        }
    }

    // ---- argument generation -----------------------------------------

    fn place(&self, inp: &mut Input<'_>, size: u64) -> Place {
        let b = inp.u8();
        let off = ((b >> 3) % 8) as u64 * 8;
        match b % 8 {
            0..=4 => Place::Rw(off),
            5 => Place::Ro(off),
            6 => Place::Straddle(1 + (b >> 3) as u64 % (size - 1)),
            _ => {
                let a = inp.u64();
                Place::Nowhere(if self.space.overlaps(a, size) { 0 } else { a })
            }
        }
    }

    /// Writes the argument where `p` says; its user address.
    fn put_arg(&self, p: Place, bytes: &[u8]) -> u64 {
        let env = &self.dev.env;
        match p {
            Place::Rw(off) => {
                env.fill(self.arg + off, bytes);
                self.arg + off
            }
            Place::Ro(off) => {
                env.fill(self.arg_ro + off, bytes);
                self.arg_ro + off
            }
            Place::Straddle(k) => {
                let a = self.arg + PAGE_SIZE - k;
                env.fill(a, &bytes[..k as usize]);
                a
            }
            Place::Nowhere(a) => a,
        }
    }

    fn cookie(&self, inp: &mut Input<'_>) -> u64 {
        let b = inp.u8();
        let k = (b >> 3) as usize;
        let pick = |v: &[u64]| if v.is_empty() { 0 } else { v[k % v.len()] };
        match b % 8 {
            0..=2 => pick(&self.table.keys().copied().collect::<Vec<_>>()),
            3 => pick(&self.history),
            4 => 0,
            5 => pick(&self.history) ^ (1 << (inp.u8() % 64)),
            6 => u64::MAX,
            _ => inp.u64(),
        }
    }

    /// Writes an iovec array as the input says; (address, iovec_nr).
    fn iovecs(&self, inp: &mut Input<'_>) -> (u64, u32) {
        let b = inp.u8();
        let count = (b % 7) as u64;
        let mut segs: Vec<Iov> = Vec::new();
        for _ in 0..count {
            let k = inp.u8();
            let v = match k % 8 {
                0..=2 => {
                    let off = inp.u16() as u64 % D_LEN;
                    let len = inp.u16() as u64 % (D_LEN - off + 1);
                    Iov {
                        base: self.d + off,
                        len,
                    }
                }
                3 => Iov {
                    base: self.d + inp.u16() as u64 % D_LEN,
                    len: inp.u16() as u64,
                },
                4 => {
                    let off = inp.u16() as u64 % R_LEN;
                    let len = inp.u16() as u64 % (R_LEN - off + 1);
                    Iov {
                        base: self.r + off,
                        len,
                    }
                }
                5 => {
                    let p = segs.last().copied().unwrap_or_default();
                    Iov {
                        base: p.base,
                        len: inp.u16() as u64 % p.len.saturating_add(1),
                    }
                }
                6 => Iov {
                    base: inp.u64(),
                    len: 0,
                },
                _ => Iov {
                    base: inp.u64(),
                    len: inp.u64(),
                },
            };
            segs.push(v);
        }
        let n = inp.u8();
        let nr = match n % 8 {
            0..=4 => count as u32,
            5 => count as u32 + 1 + (n >> 3) as u32 % 4,
            6 => inp.u32(),
            _ => MAX_IOVECS + (n >> 3) as u32 % 2,
        };
        let env = &self.dev.env;
        let bytes = bytes_of(&segs);
        let arr = match (b >> 3) % 4 {
            0 => {
                env.fill(self.iov, &[0; PAGE_SIZE as usize]);
                let a = self.iov + PAGE_SIZE - bytes.len() as u64;
                env.fill(a, bytes);
                a
            }
            1 => {
                env.fill(self.iov, &[0; PAGE_SIZE as usize]);
                env.fill(self.iov, bytes);
                self.iov
            }
            2 => self.r + inp.u16() as u64 % R_LEN,
            _ => {
                let a = inp.u64();
                if self.space.overlaps(a, 16) {
                    0
                } else {
                    a
                }
            }
        };
        (arr, nr)
    }

    fn copy_flags(inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 4 {
            0 => 0,
            1 => (inp.u8() & 0x5f) as u32,
            2 => inp.u8() as u32,
            _ => inp.u32(),
        }
    }

    fn index(inp: &mut Input<'_>) -> u32 {
        let b = inp.u8();
        if b % 4 == 3 {
            inp.u32()
        } else {
            (b >> 2) as u32 % 20
        }
    }

    fn offset(inp: &mut Input<'_>) -> u64 {
        let b = inp.u8();
        match b % 4 {
            0 => (b >> 2) as u64,
            1 => inp.u16() as u64,
            2 => inp.u64(),
            _ => [
                0,
                1,
                PAGE_SIZE - 1,
                PAGE_SIZE,
                D_LEN,
                1 << 63,
                u64::MAX - 1,
                u64::MAX,
            ][(b >> 2) as usize % 8],
        }
    }

    fn pad(inp: &mut Input<'_>) -> u32 {
        (inp.u8() as u32).wrapping_mul(0x0101_0101)
    }

    fn create_flags(inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 8 {
            2 => KNEM_FLAG_SINGLEUSE,
            3 => KNEM_FLAG_ANY_USER_ACCESS,
            4 => KNEM_FLAG_SINGLEUSE | KNEM_FLAG_ANY_USER_ACCESS,
            5 => inp.u8() as u32,
            6 => inp.u32(),
            _ => 0,
        }
    }

    // ---- the operations ----------------------------------------------

    fn get_info(&mut self, inp: &mut Input<'_>, c: usize) {
        let p = self.place(inp, 16);
        let arg = self.put_arg(p, &[0x5a; 16]);
        let mut errs = Errs::default();
        if !self.space.ok(arg, 16, true) {
            errs.add(EFAULT);
        }
        let r = self.ioctl(c, cmd::GET_INFO, arg);
        self.count(cmd::GET_INFO, r);
        if self.end("GET_INFO", errs, false, r) == End::Ok {
            let want = knem_cmd_info {
                abi: 0x0d,
                features: if self.dma_on { KNEM_FEATURE_DMA } else { 0 },
                ignored_flags: if self.dma_on { 0 } else { KNEM_FLAG_DMA },
                forced_flags: 0,
            };
            assert_eq!(self.dev.env.get::<knem_cmd_info>(arg), want);
        }
    }

    fn bind(&mut self, inp: &mut Input<'_>, c: usize) {
        let p = self.place(inp, 16);
        let flags = match inp.u8() % 8 {
            0 | 6 | 7 => KNEM_BIND_FLAG_CUSTOM,
            1 => KNEM_BIND_FLAG_CURRENT,
            2 => KNEM_BIND_FLAG_CURRENT_REVERSED,
            3 => 0,
            4 => KNEM_BIND_FLAG_CUSTOM | KNEM_BIND_FLAG_CURRENT,
            _ => inp.u32(),
        };
        let b = inp.u8();
        let mask_len = match b % 4 {
            0 => 0,
            1 => 1 + (b >> 2) as u32 % 16,
            2 => inp.u16() as u32 % 1100,
            _ => inp.u32(),
        };
        let b = inp.u8();
        let env = &self.dev.env;
        let mask_ptr = match b % 4 {
            0 | 1 => {
                env.fill(self.mask, &[0; PAGE_SIZE as usize]);
                let content: Vec<u8> = (0..(b >> 2) % 17).map(|_| inp.u8()).collect();
                env.fill(self.mask, &content);
                self.mask
            }
            2 => self.mask + PAGE_SIZE - (b >> 2) as u64,
            _ => {
                let a = inp.u64();
                if self.space.overlaps(a, 1024) {
                    0
                } else {
                    a
                }
            }
        };
        let s = knem_cmd_bind_offload {
            flags,
            mask_len,
            mask_ptr,
        };
        let arg = self.put_arg(p, &as_bytes(&s));
        let mut errs = Errs::default();
        let m = mask_len.min(1024) as u64;
        if !self.space.ok(arg, 16, false) {
            errs.add(EFAULT);
        } else {
            if flags & !7 != 0 || !flags.is_power_of_two() {
                errs.add(EINVAL);
            }
            if self.ctxs[c].array.is_some() {
                errs.add(EBUSY);
            }
            if flags == KNEM_BIND_FLAG_CUSTOM {
                if mask_len == 0 {
                    errs.add(EINVAL);
                } else if !self.space.ok(mask_ptr, m, false) {
                    errs.add(EFAULT);
                } else if env
                    .peek(mask_ptr, m.min(8) as usize)
                    .iter()
                    .all(|&x| x == 0)
                {
                    errs.add(EINVAL);
                }
            }
        }
        let before = self.dev.env.bound.lock().unwrap().clone();
        let r = self.ioctl(c, cmd::BIND_OFFLOAD, arg);
        self.count(cmd::BIND_OFFLOAD, r);
        let now = self.dev.env.bound.lock().unwrap().clone();
        if self.end("BIND_OFFLOAD", errs, false, r) == End::Ok {
            let mask = if flags == KNEM_BIND_FLAG_CUSTOM {
                self.dev.env.peek(mask_ptr, m as usize)
            } else {
                Vec::new()
            };
            assert_eq!(now, Some((flags, mask)), "the binding the shim got");
        } else {
            assert_eq!(now, before, "a failed BIND_OFFLOAD bound");
        }
    }

    /// CREATE_REGION, or INIT_SEND (a read-only single-use region).
    fn create(&mut self, inp: &mut Input<'_>, c: usize, legacy: bool) {
        let size = if legacy { 24 } else { 32 };
        let p = self.place(inp, size);
        let (arr, nr) = self.iovecs(inp);
        let flags = Self::create_flags(inp);
        let (cmdno, bytes, cookie_at, prot, flags_eff) = if legacy {
            let s = knem_cmd_init_send_param {
                send_iovec_array: arr,
                send_iovec_nr: nr,
                flags,
                send_cookie: OUT_SENTINEL,
            };
            (
                cmd::INIT_SEND,
                as_bytes(&s),
                16,
                1,
                (flags & KNEM_FLAG_ANY_CREATE_MASK) | KNEM_FLAG_SINGLEUSE,
            )
        } else {
            let b = inp.u8();
            let prot = match b % 8 {
                0..=3 => (b % 4) as u32,
                4..=6 => (b >> 3) as u32,
                _ => inp.u32(),
            };
            let s = knem_cmd_create_region {
                iovec_array: arr,
                iovec_nr: nr,
                flags,
                protection: prot,
                pad: Self::pad(inp),
                cookie: OUT_SENTINEL,
            };
            (
                cmd::CREATE_REGION,
                as_bytes(&s),
                24,
                prot,
                flags & KNEM_FLAG_ANY_CREATE_MASK,
            )
        };
        let arg = self.put_arg(p, &bytes);
        let mut errs = Errs::default();
        let mut late = false;
        let mut made = None;
        if !self.space.ok(arg, size, false) {
            errs.add(EFAULT);
        } else {
            // Flags outside the mask are dropped, not refused.
            if prot & !3 != 0 {
                errs.add(EINVAL);
            }
            if let Some(segs) = self.local(&mut errs, arr, nr) {
                let Some(pages) = self.pin_errs(&mut errs, &segs, prot & 2 != 0) else {
                    return;
                };
                made = Some((segs, pages));
            }
            late = !self.space.ok(arg + cookie_at, 8, true);
        }
        let r = self.ioctl(c, cmdno, arg);
        self.count(cmdno, r);
        let what = if legacy { "INIT_SEND" } else { "CREATE_REGION" };
        match self.end(what, errs, late, r) {
            End::Early => {}
            End::Late => {
                // Created, then destroyed when the cookie could not be
                // written back.
                self.created += 1;
                self.regions_created += 1;
            }
            End::Ok => {
                let cookie: u64 = self.dev.env.get(arg + cookie_at);
                assert!(cookie != 0 && cookie != OUT_SENTINEL, "cookie {cookie:#x}");
                assert!(
                    !self.table.contains_key(&cookie),
                    "cookie reused while live"
                );
                let (segs, pages) = made.expect("a valid region");
                let obj = self.new_obj(segs, pages, true);
                self.regions_created += 1;
                let ctx = &self.ctxs[c];
                self.table.insert(
                    cookie,
                    Entry {
                        obj,
                        owner: ctx.id,
                        uid: ctx.uid,
                        prot,
                        flags: flags_eff,
                    },
                );
                self.history.push(cookie);
            }
        }
    }

    fn destroy(&mut self, inp: &mut Input<'_>, c: usize) {
        let p = self.place(inp, 8);
        let cookie = self.cookie(inp);
        let arg = self.put_arg(p, &cookie.to_le_bytes());
        let mut errs = Errs::default();
        if !self.space.ok(arg, 8, false) {
            errs.add(EFAULT);
        } else if !matches!(self.table.get(&cookie), Some(e) if e.owner == self.ctxs[c].id) {
            errs.add(EINVAL);
        }
        let r = self.ioctl(c, cmd::DESTROY_REGION, arg);
        self.count(cmd::DESTROY_REGION, r);
        if self.end("DESTROY_REGION", errs, false, r) == End::Ok {
            let e = self.table.remove(&cookie).unwrap();
            self.put(e.obj);
        }
    }

    /// Decodes a copy command's argument from the input and writes it.
    fn copy_arg(&self, inp: &mut Input<'_>, kind: Kind, p: Place) -> (CopyArg, u64) {
        let mut a = CopyArg {
            arr: 0,
            nr: 0,
            write: false,
            cookie: 0,
            offset: 0,
            dst_cookie: 0,
            dst_offset: 0,
            bound: None,
            flags: 0,
            index: 0,
            status_at: None,
        };
        let bytes = match kind {
            Kind::Inline { bounded } => {
                (a.arr, a.nr) = self.iovecs(inp);
                let b = inp.u8();
                let write = match b % 4 {
                    0 | 1 => (b % 2) as u32,
                    2 => (b >> 2) as u32,
                    _ => inp.u32(),
                };
                a.write = write != 0;
                a.cookie = self.cookie(inp);
                a.offset = Self::offset(inp);
                if bounded {
                    a.bound = Some(Self::offset(inp));
                }
                a.flags = Self::copy_flags(inp);
                a.index = Self::index(inp);
                let pad = Self::pad(inp);
                if let Some(length) = a.bound {
                    a.status_at =
                        Some(offset_of!(knem_cmd_inline_copy_bounded, current_status) as u64);
                    as_bytes(&knem_cmd_inline_copy_bounded {
                        local_iovec_array: a.arr,
                        local_iovec_nr: a.nr,
                        write,
                        remote_cookie: a.cookie,
                        remote_offset: a.offset,
                        length,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                } else {
                    a.status_at = Some(offset_of!(knem_cmd_inline_copy, current_status) as u64);
                    as_bytes(&knem_cmd_inline_copy {
                        local_iovec_array: a.arr,
                        local_iovec_nr: a.nr,
                        write,
                        remote_cookie: a.cookie,
                        remote_offset: a.offset,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                }
            }
            Kind::SyncRecv | Kind::AsyncRecv => {
                (a.arr, a.nr) = self.iovecs(inp);
                a.cookie = self.cookie(inp);
                a.flags = Self::copy_flags(inp);
                let pad = Self::pad(inp);
                if kind == Kind::SyncRecv {
                    a.status_at = Some(offset_of!(knem_cmd_sync_recv_param, status) as u64);
                    as_bytes(&knem_cmd_sync_recv_param {
                        recv_iovec_array: a.arr,
                        recv_iovec_nr: a.nr,
                        status: OUT_SENTINEL as u32,
                        send_cookie: a.cookie,
                        flags: a.flags,
                        pad,
                    })
                } else {
                    a.index = Self::index(inp);
                    as_bytes(&knem_cmd_init_async_recv_param {
                        recv_iovec_array: a.arr,
                        recv_iovec_nr: a.nr,
                        status_index: a.index,
                        send_cookie: a.cookie,
                        flags: a.flags,
                        pad,
                    })
                }
            }
            Kind::Pair { bounded } => {
                a.cookie = self.cookie(inp);
                a.offset = Self::offset(inp);
                a.dst_cookie = self.cookie(inp);
                a.dst_offset = Self::offset(inp);
                if bounded {
                    a.bound = Some(Self::offset(inp));
                }
                a.flags = Self::copy_flags(inp);
                a.index = Self::index(inp);
                let pad = Self::pad(inp);
                if let Some(length) = a.bound {
                    a.status_at = Some(offset_of!(knem_cmd_copy_bounded, current_status) as u64);
                    as_bytes(&knem_cmd_copy_bounded {
                        src_cookie: a.cookie,
                        src_offset: a.offset,
                        dst_cookie: a.dst_cookie,
                        dst_offset: a.dst_offset,
                        length,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                } else {
                    a.status_at = Some(offset_of!(knem_cmd_copy, current_status) as u64);
                    as_bytes(&knem_cmd_copy {
                        src_cookie: a.cookie,
                        src_offset: a.offset,
                        dst_cookie: a.dst_cookie,
                        dst_offset: a.dst_offset,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                }
            }
        };
        let arg = self.put_arg(p, &bytes);
        (a, arg)
    }

    /// Bytes a copy moves, and the source and destination address of each.
    fn transfer(&self, job: &Job) -> Option<(Vec<u64>, Vec<u64>)> {
        let (s, d) = (&self.obj(job.src).segs, &self.obj(job.dst).segs);
        let len = total_of(s)
            .saturating_sub(job.src_off)
            .min(total_of(d).saturating_sub(job.dst_off))
            .min(job.bound.unwrap_or(u64::MAX));
        (len <= MAX_MODELLED).then(|| (flat(s, job.src_off, len), flat(d, job.dst_off, len)))
    }

    /// A region copied onto itself has memmove's result when its
    /// addresses grow with its offsets (copy::region_to_region).
    fn memmove(&self, job: &Job) -> bool {
        job.src == job.dst && {
            let segs: Vec<&Iov> = self
                .obj(job.src)
                .segs
                .iter()
                .filter(|v| v.len > 0)
                .collect();
            segs.windows(2).all(|w| w[0].base + w[0].len <= w[1].base)
        }
    }

    /// Expected bytes of a copy done in full.
    fn expect_full(&mut self, job: &Job) -> (Vec<(u64, Want)>, u64) {
        match self.transfer(job) {
            Some((s, d)) => {
                let n = s.len();
                let want = self.expect(&s, &d, n, n, self.memmove(job));
                if want.iter().all(|(_, w)| matches!(w, Want::Exact(_))) {
                    self.sum.data_exact += 1;
                }
                (want, n as u64)
            }
            None => {
                let len = total_of(&self.obj(job.src).segs)
                    .saturating_sub(job.src_off)
                    .min(total_of(&self.obj(job.dst).segs).saturating_sub(job.dst_off))
                    .min(job.bound.unwrap_or(u64::MAX));
                (self.anything(), len)
            }
        }
    }

    fn set_slot(&mut self, c: usize, index: u32, v: u8) {
        let (_, slots) = self.ctxs[c].array.as_mut().expect("a status array");
        slots[index as usize] = v;
    }

    /// Every copy command.
    fn copy(&mut self, inp: &mut Input<'_>, c: usize, kind: Kind) {
        let (cmdno, size) = match kind {
            Kind::Inline { bounded: false } => (cmd::INLINE_COPY, 48),
            Kind::Inline { bounded: true } => (cmd::INLINE_COPY_BOUNDED, 56),
            Kind::SyncRecv => (cmd::SYNC_RECV, 32),
            Kind::AsyncRecv => (cmd::INIT_ASYNC_RECV, 32),
            Kind::Pair { bounded: false } => (cmd::COPY, 48),
            Kind::Pair { bounded: true } => (cmd::COPY_BOUNDED, 56),
        };
        let p = self.place(inp, size);
        let (a, arg) = self.copy_arg(inp, kind, p);
        let pair = matches!(kind, Kind::Pair { .. });

        // The prediction.
        // KNEM masks flags, it does not refuse them: bits outside the
        // copy mask are dropped (and SYNC_RECV drops the async ones).
        let flags = KNEM_FLAG_ANY_COPY_MASK
            & match kind {
                Kind::AsyncRecv => a.flags | KNEM_FLAG_MEMCPYTHREAD,
                Kind::SyncRecv => a.flags & !(KNEM_FLAG_ANY_ASYNC_MASK | KNEM_FLAG_NOTIFY_FD),
                _ => a.flags,
            };
        let thread = flags & KNEM_FLAG_ANY_THREAD_MASK != 0;
        let notify = flags & KNEM_FLAG_NOTIFY_FD != 0;
        let adc = flags & KNEM_FLAG_ASYNCDMACOMPLETE != 0;
        let dma = flags & KNEM_FLAG_DMA != 0 && self.dma_on;
        let is_async = thread || (adc && dma);
        let pinned = is_async || flags & KNEM_FLAG_PINLOCAL != 0 || dma;
        let status_ok = a.status_at.is_none_or(|o| {
            arg.checked_add(o)
                .is_some_and(|u| self.space.ok(u, 4, true))
        });
        let mut errs = Errs::default();
        let mut late = false;
        let mut remote = None;
        let mut dst = None;
        let mut local = None;
        let mut local_pages = 0;
        let mut same_single = false;
        if !self.space.ok(arg, size, false) {
            errs.add(EFAULT);
        } else {
            if notify && (!thread || adc) {
                errs.add(EINVAL);
            }
            let len = self.ctxs[c].array.as_ref().map(|(_, s)| s.len() as u64);
            let slot_ok = matches!(len, Some(n) if (a.index as u64) < n);
            if (thread || adc) && !slot_ok {
                errs.add(EINVAL);
            }
            if thread && notify && slot_ok && self.ctxs[c].credits >= len.unwrap() {
                errs.add(EBUSY);
            }
            match self.lookup(c, a.cookie, !pair && a.write) {
                Ok(e) => remote = Some(e),
                Err(e) => errs.add(e),
            }
            if pair {
                match self.lookup(c, a.dst_cookie, true) {
                    Ok(e) => dst = Some(e),
                    Err(e) => errs.add(e),
                }
                let single = remote.is_some_and(|e| e.flags & KNEM_FLAG_SINGLEUSE != 0);
                if dst.is_some() && a.cookie == a.dst_cookie && single {
                    // consume_pair cannot take the same region twice; an
                    // asynchronous request says PENDING before that.
                    same_single = true;
                    if is_async && !status_ok {
                        errs.add(EFAULT);
                    }
                    errs.add(EINVAL);
                }
            } else if let Some(segs) = self.local(&mut errs, a.arr, a.nr) {
                if pinned {
                    // The caller's pages are written when it reads.
                    let Some(n) = self.pin_errs(&mut errs, &segs, !a.write) else {
                        return;
                    };
                    local_pages = n;
                }
                local = Some(segs);
            }
            late = !status_ok;
        }

        let before = self.dev.stats.snapshot();
        let r = self.ioctl(c, cmdno, arg);
        self.count(cmdno, r);
        let end = self.end("copy", errs, late, r);
        let after = self.dev.stats.snapshot();
        if end == End::Early {
            // A failed copy leaves current_status alone, except that an
            // asynchronous COPY of a single-use region onto itself said
            // PENDING before it found out.
            if let Some(o) = a.status_at {
                if self.space.ok(arg, size, true) && !(same_single && is_async) {
                    let st: u32 = self.dev.env.get(arg + o);
                    assert_eq!(st, OUT_SENTINEL as u32, "status written by a failed copy");
                }
            }
            self.check_mem(&[]);
            return;
        }
        let pinned_local = !pair && pinned;
        if is_async && end == End::Late {
            // Pinned, then released when PENDING could not be written.
            if pinned_local {
                self.created += 1;
            }
            self.check_mem(&[]);
            return;
        }
        let st_at = a.status_at.map(|o| arg + o);

        // What the request holds while it runs: a reference on each side
        // (the caller's pinned side is new), or on the region alone for a
        // plain inline copy.
        let remote = remote.unwrap();
        let local_obj = if pinned_local {
            let segs = local.clone().unwrap();
            Some(self.new_obj(segs, local_pages, false))
        } else {
            None
        };
        let (src, src_off, dst_obj, dst_off) = match (pair, local_obj) {
            (true, _) => (remote.obj, a.offset, dst.unwrap().obj, a.dst_offset),
            (false, Some(l)) if a.write => (l, 0, remote.obj, a.offset),
            (false, Some(l)) => (remote.obj, a.offset, l, 0),
            (false, None) => (remote.obj, a.offset, remote.obj, 0),
        };
        let held: Vec<usize> = if pair || local_obj.is_some() {
            vec![src, dst_obj]
        } else {
            vec![remote.obj]
        };
        for &o in &held {
            if Some(o) != local_obj {
                self.get(o);
            }
        }
        self.consume(a.cookie);
        if pair && a.dst_cookie != a.cookie {
            self.consume(a.dst_cookie);
        }
        let job = Job {
            src,
            src_off,
            dst: dst_obj,
            dst_off,
            bound: a.bound,
            index: a.index,
            notify,
            split: self.dma_min > 0,
        };

        if is_async {
            if let Some(u) = st_at {
                assert_eq!(self.dev.env.get::<u32>(u), 0, "PENDING");
            }
            if thread {
                if notify {
                    self.ctxs[c].credits += 1;
                }
                self.ctxs[c].pending.push_back(job);
                self.check_mem(&[]);
            } else if pair && src == dst_obj {
                // A region onto itself: the CPU copies at once.
                self.finish_job(c, job, true);
            } else {
                let want = match self.transfer(&job) {
                    Some((s, d)) if job.split => self.expect(&s, &d, 0, s.len(), false),
                    Some(_) => Vec::new(),
                    None => self.anything(),
                };
                self.check_mem(&want);
                self.dma_q.push_back((c, job));
            }
            return;
        }

        // Synchronous: the copy is done, its status reported.
        let (want, moved, ok) = if pair || local_obj.is_some() {
            let (want, n) = self.expect_full(&job);
            (want, n, true)
        } else {
            self.plain_inline(&a, &remote, local.as_deref().unwrap(), &before, &after)
        };
        let st = if ok { 1 } else { 2 };
        if pair {
            self.bytes_pair += moved;
        } else if a.write {
            self.bytes_write += moved;
        } else {
            self.bytes_read += moved;
        }
        if !ok {
            self.copies_failed += 1;
            self.sum.copy_failed += 1;
        }
        if adc {
            self.set_slot(c, a.index, st);
        }
        if end == End::Ok {
            assert_eq!(self.dev.env.get::<u32>(st_at.unwrap()), st as u32, "status");
        }
        for o in held {
            self.put(o);
        }
        self.check_mem(&want);
    }

    /// A synchronous inline copy through copy_{to,from}_user: stops at the
    /// chunk holding the first byte of the caller's side it cannot access.
    fn plain_inline(
        &mut self,
        a: &CopyArg,
        remote: &Entry,
        local: &[Iov],
        before: &KnemCoreStats,
        after: &KnemCoreStats,
    ) -> (Vec<(u64, Want)>, u64, bool) {
        let rsegs = &self.obj(remote.obj).segs;
        let len = total_of(rsegs)
            .saturating_sub(a.offset)
            .min(total_of(local))
            .min(a.bound.unwrap_or(u64::MAX));
        let moved = if a.write {
            after.bytes_inline_write - before.bytes_inline_write
        } else {
            after.bytes_inline_read - before.bytes_inline_read
        };
        if len > MAX_MODELLED {
            return (self.anything(), moved, moved == len);
        }
        let r = flat(rsegs, a.offset, len);
        let l = flat(local, 0, len);
        let bad = l
            .iter()
            .position(|&x| !self.space.ok(x, 1, !a.write))
            .map(|f| f as u64);
        match bad {
            None => assert_eq!(moved, len, "bytes of a copy that cannot fault"),
            Some(f) => assert!(
                moved <= f && f - moved < PAGE_SIZE,
                "stopped at {moved}, first bad byte {f}"
            ),
        }
        let (s, d) = if a.write { (l, r) } else { (r, l) };
        let n = moved as usize;
        let want = self.expect(&s, &d, n, n, false);
        if bad.is_none() && want.iter().all(|(_, w)| matches!(w, Want::Exact(_))) {
            self.sum.data_exact += 1;
        }
        (want, moved, bad.is_none())
    }

    /// A request done by the thread or the engine (or the CPU at once):
    /// data, byte count, slot SUCCESS, references given up, notification.
    fn finish_job(&mut self, c: usize, job: Job, now: bool) {
        let (mut want, n) = self.expect_full(&job);
        if !now && job.split {
            // The engine's pieces land now; the small ones already did.
            for (a, w) in want.iter_mut() {
                if let Want::Exact(v) = *w {
                    *w = Want::Either(self.shadow_d[(*a - self.d) as usize], v);
                }
            }
        }
        self.bytes_async += n;
        self.check_mem(&want);
        self.set_slot(c, job.index, 1);
        self.put(job.src);
        self.put(job.dst);
        if job.notify {
            self.ctxs[c].ready.push_back(job.index);
        }
    }

    fn run_thread(&mut self, c: usize) -> bool {
        let ran = self.dev.run_async(self.kctx(c));
        assert_eq!(ran, !self.ctxs[c].pending.is_empty(), "run_async");
        if let Some(job) = self.ctxs[c].pending.pop_front() {
            self.finish_job(c, job, true);
            self.sum.thread_done += 1;
        }
        ran
    }

    fn complete_dma(&mut self) -> bool {
        let done = self.dev.env.dma.complete_async(&self.dev);
        assert_eq!(done, !self.dma_q.is_empty(), "complete_async");
        if let Some((c, job)) = self.dma_q.pop_front() {
            self.finish_job(c, job, false);
            self.sum.dma_done += 1;
        }
        done
    }

    fn read_notify(&mut self, c: usize, n: usize) {
        let mut buf = [0u32; 4];
        let got = self.dev.read_notify(self.kctx(c), &mut buf[..n]);
        let m = &mut self.ctxs[c];
        let want: Vec<u32> = (0..n).map_while(|_| m.ready.pop_front()).collect();
        assert_eq!(&buf[..got], &want[..], "notifications");
        m.credits -= got as u64;
        self.sum.notified += got as u32;
    }

    fn status_array(&mut self, c: usize, len: usize) {
        let arr: Box<[AtomicU8]> = (0..len.max(1))
            .map(|_| AtomicU8::new(SLOT_SENTINEL))
            .collect();
        // SAFETY: once accepted, the array lives in `self.arrays` until
        // the end of the run, after every context has been released (a
        // refused one is not kept by the core); its bytes are atomics, so
        // the core may write them through this pointer while the harness
        // reads them.
        let r = unsafe {
            self.kctx(c)
                .set_status_array(arr.as_ptr() as *mut u8, len as u64)
        };
        if self.ctxs[c].array.is_some() {
            assert_eq!(r, Err(EBUSY), "a second status array");
            return;
        }
        assert_eq!(r, Ok(()));
        self.arrays.push(arr);
        self.ctxs[c].array = Some((self.arrays.len() - 1, vec![SLOT_SENTINEL; len]));
    }

    /// File release: the engine finishes the context's requests first (the
    /// shim waits for them), queued ones are dropped unrun, its regions go.
    fn release(&mut self, c: usize, reopen: bool) {
        while self.dma_q.iter().any(|&(cc, _)| cc == c) {
            self.complete_dma();
        }
        let k = self.kctx[c].take().expect("open context");
        self.dev.ctx_release(k);
        let m = &mut self.ctxs[c];
        let jobs: Vec<Job> = m.pending.drain(..).collect();
        m.ready.clear();
        m.credits = 0;
        m.array = None;
        let id = m.id;
        self.sum.dropped += jobs.len() as u32;
        for j in jobs {
            self.put(j.src);
            self.put(j.dst);
        }
        let mine: Vec<u64> = self
            .table
            .iter()
            .filter(|(_, e)| e.owner == id)
            .map(|(&k, _)| k)
            .collect();
        for k in mine {
            let e = self.table.remove(&k).unwrap();
            self.put(e.obj);
        }
        if reopen {
            let k = self.dev.ctx_new(self.ctxs[c].uid).expect("context");
            self.ctxs[c].id = k.id;
            self.ctxs[c].caller_uid = self.ctxs[c].uid;
            self.kctx[c] = Some(k);
            self.sum.released += 1;
        }
        self.check_mem(&[]);
    }

    fn undefined(&mut self, inp: &mut Input<'_>, c: usize) {
        let b = inp.u8();
        let cmdno = if b & 1 == 1 {
            CMDS[(b >> 1) as usize % CMDS.len()] ^ (1 << (inp.u8() % 32))
        } else {
            inp.u32()
        };
        if CMDS.contains(&cmdno) {
            return;
        }
        let p = self.place(inp, 64);
        let arg = self.put_arg(p, &[0; 64]);
        let r = self.ioctl(c, cmdno, arg);
        assert_eq!(r, ENOTTY.to_neg(), "undefined command {cmdno:#x}");
        self.sum.undefined += 1;
    }

    /// The model's resources against the core's and the mock kernel's.
    fn check_state(&self) {
        let s = self.dev.stats.snapshot();
        let env = &self.dev.env;
        let live: Vec<&Obj> = self.objs.iter().flatten().collect();
        let counted = live.iter().filter(|o| o.counted).count() as u64;
        let pinned = self.pinned();
        assert_eq!(s.regions, counted, "live regions");
        assert_eq!(s.pinned_pages, pinned, "pinned pages");
        assert_eq!(env.pinned() as u64, pinned, "pins held in the mock");
        assert_eq!(env.pinned_vm.load(SeqCst), pinned, "pinned_vm");
        assert_eq!(env.owners.load(SeqCst), live.len(), "owner records");
        assert_eq!(
            env.rcu_freed.load(SeqCst) as u64,
            self.created - live.len() as u64,
            "regions freed through RCU"
        );
        assert_eq!(s.regions_created, self.regions_created, "regions created");
        assert_eq!(
            (s.bytes_inline_read, s.bytes_inline_write),
            (self.bytes_read, self.bytes_write),
            "inline bytes"
        );
        assert_eq!(s.bytes_region_copy, self.bytes_pair, "region copy bytes");
        assert_eq!(s.bytes_async, self.bytes_async, "asynchronous bytes");
        assert_eq!(s.copies_failed, self.copies_failed, "failed copies");
        assert_eq!(s.contexts, self.kctx.iter().flatten().count() as u64);
        // Only ASYNCDMACOMPLETE batches stay open, until the engine is done.
        assert_eq!(env.dma.inflight.lock().unwrap().len(), self.dma_q.len());
        assert_eq!(
            env.dma.open.load(SeqCst),
            self.dma_q.len() as i64,
            "DMA batches open"
        );
        for (k, m) in self.kctx.iter().zip(&self.ctxs) {
            let Some(k) = k else { continue };
            assert_eq!(k.has_queued(), !m.pending.is_empty(), "queued requests");
            assert_eq!(k.has_ready(), !m.ready.is_empty(), "ready notifications");
            assert_eq!(k.notify_in_flight(), m.credits, "notification credits");
            assert_eq!(k.has_status_array(), m.array.is_some());
            if let Some((i, slots)) = &m.array {
                for (j, want) in slots.iter().enumerate() {
                    assert_eq!(self.arrays[*i][j].load(SeqCst), *want, "status slot {j}");
                }
            }
        }
    }

    fn step(&mut self, inp: &mut Input<'_>) {
        let op = inp.u8();
        let c = inp.u8() as usize % 3;
        match op % 16 {
            0 => self.get_info(inp, c),
            1 => self.bind(inp, c),
            2 => self.create(inp, c, true),
            3 => self.create(inp, c, false),
            4 => self.destroy(inp, c),
            5 => self.copy(inp, c, Kind::AsyncRecv),
            6 => self.copy(inp, c, Kind::SyncRecv),
            7 => self.copy(inp, c, Kind::Pair { bounded: false }),
            8 => self.copy(inp, c, Kind::Inline { bounded: false }),
            9 => self.copy(inp, c, Kind::Pair { bounded: true }),
            10 => self.copy(inp, c, Kind::Inline { bounded: true }),
            11 => self.undefined(inp, c),
            12 => self.status_array(c, inp.u8() as usize % 17),
            13 => {
                self.run_thread(c);
            }
            14 => self.read_notify(c, 1 + inp.u8() as usize % 4),
            _ => self.event(inp, c),
        }
    }

    fn event(&mut self, inp: &mut Input<'_>, c: usize) {
        let v = inp.u8();
        match (v % 8, v >> 3) {
            (0, x) => {
                self.dma_on = x & 1 == 1;
                self.dma_min = [0, 512, PAGE_SIZE, 1][(x >> 1) as usize % 4];
                self.dev.env.dma.on.store(self.dma_on, SeqCst);
                self.dev.env.dma.min.store(self.dma_min, SeqCst);
            }
            (1, _) => {
                self.complete_dma();
            }
            (2, x) => {
                self.ptrace = x & 1 == 1;
                self.denied = x & 2 == 2;
                self.dev.env.ptrace_policy.store(self.ptrace, SeqCst);
                self.dev.env.ptrace_denied.store(self.denied, SeqCst);
            }
            (3, x) => {
                self.memlock = (x != 0).then(|| (x - 1) as u64);
                *self.dev.env.memlock_pages.lock().unwrap() = self.memlock;
            }
            (4, x) => self
                .dev
                .env
                .set_pin_max((x % 4 != 0).then_some((x % 4) as usize)),
            // The process behind context c changes its real uid.
            (5, x) if x % 4 == 3 => self.ctxs[c].caller_uid = UIDS[(x as usize / 4) % UIDS.len()],
            (5, _) => self.release(c, true),
            (6, _) => while self.run_thread(c) {},
            _ => while self.complete_dma() {},
        }
    }
}

/// Runs one input; panics on the first disagreement with the model.
/// Returns what the input exercised.
pub fn run(data: &[u8]) -> Summary {
    let mut h = H::new();
    let mut inp = Input::new(data);
    while !inp.is_empty() {
        h.step(&mut inp);
        h.check_state();
    }
    while h.complete_dma() {}
    for c in 0..3 {
        h.release(c, false);
    }
    h.check_state();
    let s = h.dev.stats.snapshot();
    assert_eq!((s.contexts, s.regions, s.pinned_pages), (0, 0, 0));
    assert_eq!(h.dev.env.pinned(), 0, "pages left pinned");
    assert_eq!(h.dev.env.owners.load(SeqCst), 0, "owner records left");
    assert_eq!(h.dev.env.rcu_freed.load(SeqCst) as u64, h.created);
    h.dev.exit();
    h.sum
}
