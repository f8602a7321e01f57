//! The reference model: the mappings, the pinned lists and table entries
//! it expects, the contexts' queues and slots, and the harness that holds
//! it beside the device under test.

use super::*;

/// A set of errnos (bit n: errno n).
#[derive(Clone, Copy, Default)]
pub(super) struct Errs(pub(super) u32);

impl core::fmt::Debug for Errs {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let set: Vec<i64> = (1..32).map(|n| -n).filter(|&ret| self.has(ret)).collect();
        write!(f, "{set:?}")
    }
}

impl Errs {
    pub(super) fn add(&mut self, e: Errno) {
        self.0 |= 1 << e.0;
    }
    pub(super) fn has(&self, ret: i64) -> bool {
        (1..32).contains(&-ret) && self.0 & (1 << -ret) != 0
    }
    pub(super) fn is_empty(&self) -> bool {
        self.0 == 0
    }
}

/// How a call ended, as the model saw it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum End {
    /// Failed before doing anything.
    Early,
    /// Did its work, then could not write its output (EFAULT).
    Late,
    /// Succeeded.
    Ok,
}

/// The harness's mappings: address, length, writable.
pub(super) struct Space {
    pub(super) maps: Vec<(u64, u64, bool)>,
}

impl Space {
    pub(super) fn find(&self, addr: u64) -> Option<(u64, u64, bool)> {
        self.maps
            .iter()
            .copied()
            .find(|&(s, l, _)| s <= addr && addr - s < l)
    }

    /// `len` bytes at `addr` are mapped (and writable if `write`).
    pub(super) fn ok(&self, addr: u64, len: u64, write: bool) -> bool {
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
    pub(super) fn pinnable(&self, segs: &[Iov], write: bool) -> bool {
        segs.iter().filter(|v| v.len > 0).all(|v| {
            let first = v.base & !(PAGE_SIZE - 1);
            let last = (v.base + v.len - 1) & !(PAGE_SIZE - 1);
            matches!(self.find(first), Some((s, l, w)) if last - s < l && (w || !write))
        })
    }

    pub(super) fn overlaps(&self, addr: u64, len: u64) -> bool {
        let end = addr.saturating_add(len);
        self.maps
            .iter()
            .any(|&(s, l, _)| addr < s.saturating_add(l) && s < end)
    }
}

/// Pages a validated list spans (u128: no overflow for any list).
pub(super) fn pages_of(segs: &[Iov]) -> u128 {
    segs.iter()
        .filter(|v| v.len > 0)
        .map(|v| (((v.base + v.len - 1) / PAGE_SIZE) - v.base / PAGE_SIZE + 1) as u128)
        .sum()
}

pub(super) fn total_of(segs: &[Iov]) -> u64 {
    segs.iter().map(|v| v.len).sum()
}

/// User addresses of `take` flattened bytes from offset `skip`.
pub(super) fn flat(segs: &[Iov], skip: u64, take: u64) -> Vec<u64> {
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
pub(super) struct Obj {
    pub(super) segs: Vec<Iov>,
    pub(super) pages: u64,
    pub(super) counted: bool,
    pub(super) refs: u32,
}

/// A live table entry.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) obj: usize,
    pub(super) owner: u64,
    pub(super) uid: u32,
    pub(super) prot: u32,
    pub(super) flags: u32,
}

/// A request between two pinned lists, as queued.
pub(super) struct Job {
    pub(super) src: usize,
    pub(super) src_off: u64,
    pub(super) dst: usize,
    pub(super) dst_off: u64,
    pub(super) bound: Option<u64>,
    pub(super) index: u32,
    pub(super) notify: bool,
    /// Submitted to the engine with a minimum: the small pieces were
    /// copied by the CPU then.
    pub(super) split: bool,
}

/// A context as the model sees it.
pub(super) struct ModelCtx {
    pub(super) id: u64,
    /// Real uid at open: the owner of the regions it creates.
    pub(super) uid: u32,
    /// Real uid of the calling process now (it may have setuid()ed).
    pub(super) caller_uid: u32,
    /// Index into `Harness::arrays`, and the slots' expected values.
    pub(super) array: Option<(usize, Vec<u8>)>,
    pub(super) pending: VecDeque<Job>,
    pub(super) ready: VecDeque<u32>,
    pub(super) credits: u64,
    /// It has an offload thread (its first thread copy found its user
    /// under the bound), until release.
    pub(super) worker: bool,
}

/// Expected value of a destination byte.
#[derive(Clone, Copy, Debug)]
pub(super) enum Want {
    Exact(u8),
    Either(u8, u8),
    Any,
}

/// Which copy command.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Inline { bounded: bool },
    SyncRecv,
    AsyncRecv,
    Pair { bounded: bool },
}

/// A copy command's decoded argument.
pub(super) struct CopyArg {
    pub(super) arr: u64,
    pub(super) nr: u32,
    pub(super) write: bool,
    pub(super) cookie: u64,
    pub(super) offset: u64,
    pub(super) dst_cookie: u64,
    pub(super) dst_offset: u64,
    pub(super) bound: Option<u64>,
    pub(super) flags: u32,
    pub(super) index: u32,
    /// Offset of the status the call writes back (None: INIT_ASYNC_RECV).
    pub(super) status_at: Option<u64>,
}

/// Where an argument struct is put.
#[derive(Clone, Copy)]
pub(super) enum Place {
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
pub(super) struct Harness {
    pub(super) dev: Box<Device<MockEnv>>,
    pub(super) kctx: Vec<Option<KBox<Context>>>,
    pub(super) space: Space,
    /// The data pages copies read and write.
    pub(super) data: u64,
    /// The read-only pages.
    pub(super) ro: u64,
    pub(super) arg: u64,
    pub(super) arg_ro: u64,
    pub(super) iov: u64,
    pub(super) mask: u64,
    pub(super) data_shadow: Vec<u8>,
    pub(super) ro_shadow: Vec<u8>,
    pub(super) objs: Vec<Option<Obj>>,
    pub(super) table: BTreeMap<u64, Entry>,
    pub(super) history: Vec<u64>,
    pub(super) ctxs: Vec<ModelCtx>,
    /// Status arrays, alive until every context is released.
    pub(super) arrays: Vec<Box<[AtomicU8]>>,
    /// ASYNCDMACOMPLETE requests the engine has not completed (context).
    pub(super) dma_q: VecDeque<(usize, Job)>,
    pub(super) dma_on: bool,
    pub(super) dma_min: u64,
    pub(super) ptrace: bool,
    pub(super) denied: bool,
    pub(super) memlock: Option<u64>,
    /// The `max_offload_threads_per_user` parameter.
    pub(super) thread_bound: u64,
    /// The shim fails to make a thread.
    pub(super) spawn_fails: bool,
    /// Expected counters.
    pub(super) created: u64,
    pub(super) regions_created: u64,
    pub(super) bytes_read: u64,
    pub(super) bytes_write: u64,
    pub(super) bytes_pair: u64,
    pub(super) bytes_async: u64,
    pub(super) copies_failed: u64,
    pub(super) sum: Summary,
}

pub(super) fn fill_pattern(seed: u32, len: u64) -> Vec<u8> {
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

pub(super) fn as_bytes<T: Pod>(v: &T) -> Vec<u8> {
    bytes_of(std::slice::from_ref(v)).to_vec()
}

impl Harness {
    pub(super) fn new() -> Harness {
        let dev = Box::new(Device::new(MockEnv::new()));
        let env = &dev.env;
        let data = env.map(DATA_LEN, true);
        let ro = env.map(RO_LEN, false);
        let arg = env.map(PAGE_SIZE, true);
        let arg_ro = env.map(PAGE_SIZE, false);
        let iov = env.map(PAGE_SIZE, true);
        let mask = env.map(PAGE_SIZE, true);
        let data_shadow = fill_pattern(0x9e37_79b9, DATA_LEN);
        let ro_shadow = fill_pattern(0x85eb_ca6b, RO_LEN);
        env.fill(data, &data_shadow);
        env.fill(ro, &ro_shadow);
        let space = Space {
            maps: vec![
                (data, DATA_LEN, true),
                (ro, RO_LEN, false),
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
            ctxs.push(ModelCtx {
                id: k.id,
                uid,
                caller_uid: uid,
                array: None,
                pending: VecDeque::new(),
                ready: VecDeque::new(),
                credits: 0,
                worker: false,
            });
            kctx.push(Some(k));
        }
        Harness {
            dev,
            kctx,
            space,
            data,
            ro,
            arg,
            arg_ro,
            iov,
            mask,
            data_shadow,
            ro_shadow,
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
            thread_bound: crate::edge::shim::OFFLOAD_THREADS_PER_USER_DEFAULT,
            spawn_fails: false,
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

    pub(super) fn kctx(&self, c: usize) -> &Context {
        self.kctx[c].as_deref().expect("open context")
    }

    /// The model's value of a data or read-only byte.
    pub(super) fn value(&self, a: u64) -> Option<u8> {
        if a >= self.data && a - self.data < DATA_LEN {
            Some(self.data_shadow[(a - self.data) as usize])
        } else if a >= self.ro && a - self.ro < RO_LEN {
            Some(self.ro_shadow[(a - self.ro) as usize])
        } else {
            None
        }
    }

    pub(super) fn new_obj(&mut self, segs: Vec<Iov>, pages: u64, counted: bool) -> usize {
        self.created += 1;
        self.objs.push(Some(Obj {
            segs,
            pages,
            counted,
            refs: 1,
        }));
        self.objs.len() - 1
    }

    pub(super) fn obj(&self, id: usize) -> &Obj {
        self.objs[id].as_ref().expect("live object")
    }

    pub(super) fn get(&mut self, id: usize) {
        self.objs[id].as_mut().expect("live object").refs += 1;
    }

    pub(super) fn put(&mut self, id: usize) {
        let o = self.objs[id].as_mut().expect("live object");
        o.refs -= 1;
        if o.refs == 0 {
            self.objs[id] = None;
        }
    }

    pub(super) fn pinned(&self) -> u64 {
        self.objs.iter().flatten().map(|o| o.pages).sum()
    }

    /// A single-use entry named by a successful copy leaves the table.
    pub(super) fn consume(&mut self, cookie: u64) {
        let e = self.table[&cookie];
        if e.flags & KNEM_FLAG_SINGLEUSE != 0 {
            self.table.remove(&cookie);
            self.put(e.obj);
            self.sum.consumed += 1;
        }
    }

    /// lookup_checked's rules: live, allowed, protection.
    pub(super) fn lookup(&self, c: usize, cookie: u64, write: bool) -> Result<Entry, Errno> {
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

    /// Bytes a copy moves, and the source and destination address of each.
    pub(super) fn transfer(&self, job: &Job) -> Option<(Vec<u64>, Vec<u64>)> {
        let (src, dst) = (&self.obj(job.src).segs, &self.obj(job.dst).segs);
        let len = total_of(src)
            .saturating_sub(job.src_off)
            .min(total_of(dst).saturating_sub(job.dst_off))
            .min(job.bound.unwrap_or(u64::MAX));
        (len <= MAX_MODELLED).then(|| (flat(src, job.src_off, len), flat(dst, job.dst_off, len)))
    }

    /// A region copied onto itself has memmove's result when its
    /// addresses grow with its offsets (copy::region_to_region).
    pub(super) fn memmove(&self, job: &Job) -> bool {
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

    /// Whether an object's non-empty segments ascend without sharing a
    /// byte, so the engine may write them (exec::dma::engine_may_take).
    pub(super) fn disjoint(&self, o: usize) -> bool {
        let segs: Vec<&Iov> = self.obj(o).segs.iter().filter(|v| v.len > 0).collect();
        segs.windows(2).all(|w| w[0].base + w[0].len <= w[1].base)
    }

    /// Expected bytes of a copy done in full.
    pub(super) fn expect_full(&mut self, job: &Job) -> (Vec<(u64, Want)>, u64) {
        match self.transfer(job) {
            Some((src, dst)) => {
                let n = src.len();
                let want = self.expect(&src, &dst, n, n, self.memmove(job));
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

    pub(super) fn set_slot(&mut self, c: usize, index: u32, v: u8) {
        let (_, slots) = self.ctxs[c].array.as_mut().expect("a status array");
        slots[index as usize] = v;
    }
}
