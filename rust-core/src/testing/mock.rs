//! A host stand-in for the kernel: a simulated user address space whose
//! unmapped addresses fault, pinned pages that are host memory, RCU with
//! deferred frees, and the table mutex.  Used by the unit tests and, with
//! the `mock` feature, by the fuzz targets.

use crate::edge::errno::{KResult, EDQUOT, EFAULT, EINVAL, ENOMEM};
use crate::edge::shim::{AccessPolicy, Env, OwnerPtr, PagePtr, RcuHead, ShimCtx, PAGE_SIZE};
use crate::edge::uaccess::{bytes_of, bytes_of_mut, Pod};
use crate::state::region;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Condvar, Mutex};
use std::vec::Vec;

#[repr(C, align(4096))]
struct HostPage([u8; PAGE_SIZE as usize]);

struct Mapping {
    pages: Vec<Box<HostPage>>,
    writable: bool,
}

#[derive(Default)]
struct Mem {
    maps: BTreeMap<u64, Mapping>,
    /// Unmapped mappings whose pages may still be pinned: kept alive.
    graveyard: Vec<Mapping>,
    next: u64,
    pins: HashMap<usize, usize>,
    dirtied: usize,
    pin_budget: Option<usize>,
    /// Most pages one pin call returns, as the shim's per-VMA short pins.
    pin_max: Option<usize>,
}

impl Mem {
    fn find(&mut self, addr: u64) -> Option<(&mut Mapping, usize, usize)> {
        let (&start, m) = self.maps.range_mut(..=addr).next_back()?;
        let rel = addr - start;
        let page = (rel / PAGE_SIZE) as usize;
        if page >= m.pages.len() {
            return None;
        }
        Some((m, page, (rel % PAGE_SIZE) as usize))
    }

    fn read(&mut self, addr: u64, out: &mut [u8]) -> bool {
        let mut done = 0usize;
        while done < out.len() {
            let Some(a) = addr.checked_add(done as u64) else {
                return false;
            };
            let Some((m, p, o)) = self.find(a) else {
                return false;
            };
            let n = (PAGE_SIZE as usize - o).min(out.len() - done);
            out[done..done + n].copy_from_slice(&m.pages[p].0[o..o + n]);
            done += n;
        }
        true
    }

    fn write(&mut self, addr: u64, data: &[u8], check: bool) -> bool {
        // Check everything first so a fault writes nothing (simpler tests).
        let mut done = 0usize;
        while done < data.len() {
            let Some(a) = addr.checked_add(done as u64) else {
                return false;
            };
            match self.find(a) {
                Some((m, _, o)) if m.writable || !check => {
                    done += (PAGE_SIZE as usize - o).min(data.len() - done)
                }
                _ => return false,
            }
        }
        done = 0;
        while done < data.len() {
            let (m, p, o) = self.find(addr + done as u64).unwrap();
            let n = (PAGE_SIZE as usize - o).min(data.len() - done);
            m.pages[p].0[o..o + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        true
    }
}

#[derive(Default)]
struct Rcu {
    readers: usize,
    pending: Vec<usize>,
}

/// The mock kernel.
pub struct MockEnv {
    mem: Mutex<Mem>,
    rcu: Mutex<Rcu>,
    table: Mutex<bool>,
    table_cv: Condvar,
    rng: AtomicU32,
    forced_random: Mutex<Option<u32>>,
    /// Regions freed through RCU.
    pub rcu_freed: AtomicUsize,
    ctx: Mutex<bool>,
    ctx_cv: Condvar,
    /// ctx_kick calls (requests queued).
    pub kicks: AtomicUsize,
    /// ctx_notify calls (notifications queued).
    pub notifies: AtomicUsize,
    /// The last BIND_OFFLOAD choice: flags and mask.
    pub bound: Mutex<Option<(u32, Vec<u8>)>>,
    /// Pages charged to the (single) mock mm: its `pinned_vm`.
    pub pinned_vm: AtomicU64,
    /// Pages charged to each kernel uid's `user->locked_vm` by owner
    /// records (the shim's charge, per uid of the current task).
    pub locked_vm: Mutex<std::collections::HashMap<u32, u64>>,
    /// RLIMIT_MEMLOCK in pages; None: unlimited.
    pub memlock_pages: Mutex<Option<u64>>,
    /// The current task has CAP_IPC_LOCK.
    pub ipc_lock: AtomicBool,
    /// The current task: its uid in the initial namespace and its account
    /// chain (`Env::pin_account`), uid 0 and `[0]` at first.
    pub task: Mutex<(u32, Vec<u64>)>,
    pins: Mutex<bool>,
    pins_cv: Condvar,
    /// Pinned-page counts for the tests that make regions without a
    /// device (regions made through a device use the device's).
    pub pin_counts: crate::state::pins::Pins,
    /// Owner records not yet put.
    pub owners: AtomicUsize,
    /// The `ptrace` access policy is in force.
    pub ptrace_policy: AtomicBool,
    /// Under it, ptrace_may_access() says no.
    pub ptrace_denied: AtomicBool,
    /// The simulated DMA engine (off unless a test turns it on).
    pub dma: crate::testing::mock_dma::MockDma,
    /// The `max_regions_per_user` module parameter.
    pub regions_per_user: AtomicU64,
    /// The `max_offload_threads_per_user` module parameter.
    pub offload_threads_per_user: AtomicU64,
    /// The `max_regions` module parameter.
    pub regions_max: AtomicU64,
    /// The `max_offload_threads` module parameter.
    pub offload_threads_max: AtomicU64,
    /// Offload threads started (ctx_spawn successes).
    pub spawns: AtomicUsize,
    /// ctx_spawn fails (as kthread_create can) while set.
    pub spawn_fails: AtomicBool,
    /// Copies stop after this many more pieces (None: never), as when the
    /// caller gets a fatal signal.
    pub stop_after: Mutex<Option<u64>>,
    /// Acquisitions of the table mutex, of any context mutex, and
    /// questions to the DMA engine (`dma_usable`), for structural tests.
    pub probes: Probes,
    /// Run once by the next `table_lock` call, on the caller's thread,
    /// before it takes the mutex: the interleaving hook of
    /// [`MockEnv::at_next_table_lock`].
    table_hook: Mutex<Option<TableHook>>,
}

/// What [`MockEnv::at_next_table_lock`] runs.
pub type TableHook = Box<dyn FnOnce() + Send>;

/// What the copy path must not do, counted.
#[derive(Default)]
pub struct Probes {
    /// table_lock calls.
    pub table_locks: AtomicUsize,
    /// ctx_lock calls.
    pub ctx_locks: AtomicUsize,
    /// dma_usable calls.
    pub dma_probes: AtomicUsize,
}

impl MockEnv {
    /// An empty address space.
    pub fn new() -> MockEnv {
        MockEnv {
            mem: Mutex::new(Mem {
                next: 0x10_0000,
                ..Mem::default()
            }),
            rcu: Mutex::new(Rcu::default()),
            table: Mutex::new(false),
            table_cv: Condvar::new(),
            rng: AtomicU32::new(0x1234_5678),
            forced_random: Mutex::new(None),
            rcu_freed: AtomicUsize::new(0),
            ctx: Mutex::new(false),
            ctx_cv: Condvar::new(),
            kicks: AtomicUsize::new(0),
            notifies: AtomicUsize::new(0),
            bound: Mutex::new(None),
            pinned_vm: AtomicU64::new(0),
            locked_vm: Mutex::new(Default::default()),
            memlock_pages: Mutex::new(None),
            ipc_lock: AtomicBool::new(false),
            task: Mutex::new((0, vec![0])),
            pins: Mutex::new(false),
            pins_cv: Condvar::new(),
            pin_counts: crate::state::pins::Pins::new(),
            owners: AtomicUsize::new(0),
            ptrace_policy: AtomicBool::new(false),
            ptrace_denied: AtomicBool::new(false),
            dma: Default::default(),
            regions_per_user: AtomicU64::new(crate::edge::shim::REGIONS_PER_USER_DEFAULT),
            offload_threads_per_user: AtomicU64::new(
                crate::edge::shim::OFFLOAD_THREADS_PER_USER_DEFAULT,
            ),
            regions_max: AtomicU64::new(crate::edge::shim::REGIONS_MAX_DEFAULT),
            offload_threads_max: AtomicU64::new(crate::edge::shim::OFFLOAD_THREADS_MAX_DEFAULT),
            spawns: AtomicUsize::new(0),
            spawn_fails: AtomicBool::new(false),
            stop_after: Mutex::new(None),
            probes: Probes::default(),
            table_hook: Mutex::new(None),
        }
    }

    /// Runs `f` in the next caller of the table lock, just before that
    /// caller takes it: a test puts another path (a release, a destroy)
    /// exactly between what a core function does before its lock and what
    /// it does under it.  The hook may take the lock itself.
    pub fn at_next_table_lock(&self, f: impl FnOnce() + Send + 'static) {
        *self.table_hook.lock().unwrap() = Some(Box::new(f));
    }

    /// Maps `len` bytes (at least one page), zeroed, with an unmapped guard
    /// page after; returns the page-aligned user address.
    pub fn map(&self, len: u64, writable: bool) -> u64 {
        let n = len.div_ceil(PAGE_SIZE).max(1);
        let mut mem = self.mem.lock().unwrap();
        let start = mem.next;
        mem.next += (n + 1) * PAGE_SIZE;
        let pages = (0..n)
            .map(|_| Box::new(HostPage([0; PAGE_SIZE as usize])))
            .collect();
        mem.maps.insert(start, Mapping { pages, writable });
        start
    }

    /// Unmaps the mapping starting at `start` (pinned pages stay valid).
    pub fn unmap(&self, start: u64) {
        let mut mem = self.mem.lock().unwrap();
        let m = mem.maps.remove(&start).expect("not a mapping");
        mem.graveyard.push(m);
    }

    /// Writes bytes into the address space (ignoring write protection).
    pub fn fill(&self, addr: u64, data: &[u8]) {
        assert!(
            self.mem.lock().unwrap().write(addr, data, false),
            "fill of unmapped memory"
        );
    }

    /// Reads bytes from the address space.
    pub fn peek(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        assert!(
            self.mem.lock().unwrap().read(addr, &mut v),
            "peek of unmapped memory"
        );
        v
    }

    /// Maps a copy of `v` (writable) and returns its address.
    pub fn put<T: Pod>(&self, v: &T) -> u64 {
        self.put_slice(std::slice::from_ref(v))
    }

    /// Maps a copy of `v` (writable) and returns its address.
    pub fn put_slice<T: Pod>(&self, v: &[T]) -> u64 {
        let a = self.map(std::mem::size_of_val(v) as u64, true);
        self.fill(a, bytes_of(v));
        a
    }

    /// Reads a `T` back.
    pub fn get<T: Pod>(&self, addr: u64) -> T {
        let mut v = [T::default()];
        let b = self.peek(addr, std::mem::size_of::<T>());
        bytes_of_mut(&mut v).copy_from_slice(&b);
        v[0]
    }

    /// Pins currently held.
    pub fn pinned(&self) -> usize {
        self.mem.lock().unwrap().pins.values().sum()
    }

    /// Pages unpinned dirty so far.
    pub fn dirtied(&self) -> usize {
        self.mem.lock().unwrap().dirtied
    }

    /// Caps the pages one pin call returns (None: unlimited), as the shim
    /// does per VMA and per batch.
    pub fn set_pin_max(&self, n: Option<usize>) {
        self.mem.lock().unwrap().pin_max = n;
    }

    /// Lets only `n` more pages be pinned (None: unlimited).
    pub fn set_pin_budget(&self, n: Option<usize>) {
        self.mem.lock().unwrap().pin_budget = n;
    }

    /// Makes random_u32 return `v` (None: pseudo-random again).
    pub fn force_random(&self, v: Option<u32>) {
        *self.forced_random.lock().unwrap() = v;
    }

    fn free_now(&self, heads: Vec<usize>) {
        for h in heads {
            // SAFETY: h came from call_rcu, i.e. from region::put, once,
            // and every reader that could see it has left.
            unsafe { region::rcu_free(h as *mut RcuHead) };
            self.rcu_freed.fetch_add(1, SeqCst);
        }
    }
}

impl Default for MockEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl Env for MockEnv {
    fn copy_from_user(&self, dst: &mut [u8], src: u64) -> KResult<()> {
        if self.mem.lock().unwrap().read(src, dst) {
            Ok(())
        } else {
            Err(EFAULT)
        }
    }

    fn copy_to_user(&self, dst: u64, src: &[u8]) -> KResult<()> {
        if self.mem.lock().unwrap().write(dst, src, true) {
            Ok(())
        } else {
            Err(EFAULT)
        }
    }

    fn pin_pages(&self, start: u64, write: bool, pages: &mut [PagePtr]) -> KResult<usize> {
        assert_eq!(start % PAGE_SIZE, 0, "pin of an unaligned address");
        let mut mem = self.mem.lock().unwrap();
        let mut n = 0;
        for (i, out) in pages.iter_mut().enumerate() {
            if mem.pin_budget == Some(0) || mem.pin_max == Some(n) {
                break;
            }
            let Some((m, p, _)) = start
                .checked_add(i as u64 * PAGE_SIZE)
                .and_then(|a| mem.find(a))
            else {
                break;
            };
            if write && !m.writable {
                break;
            }
            let host = &mut *m.pages[p] as *mut HostPage as usize;
            *out = PagePtr(host as *mut _);
            *mem.pins.entry(host).or_insert(0) += 1;
            if let Some(b) = mem.pin_budget.as_mut() {
                *b -= 1;
            }
            n += 1;
        }
        if n == 0 {
            Err(EFAULT)
        } else {
            Ok(n)
        }
    }

    unsafe fn unpin_pages(&self, pages: &[PagePtr], dirty: bool) {
        let mut mem = self.mem.lock().unwrap();
        for p in pages {
            let c = mem
                .pins
                .get_mut(&(p.0 as usize))
                .expect("unpin of a page that is not pinned");
            assert!(*c > 0, "unpin of a page that is not pinned");
            *c -= 1;
            if dirty {
                mem.dirtied += 1;
            }
        }
    }

    unsafe fn copy_page_user(
        &self,
        page: PagePtr,
        off: u32,
        uaddr: u64,
        len: u32,
        to_user: bool,
    ) -> KResult<()> {
        assert!(off as u64 + len as u64 <= PAGE_SIZE);
        let mut mem = self.mem.lock().unwrap();
        assert!(
            mem.pins.get(&(page.0 as usize)).copied().unwrap_or(0) > 0,
            "copy from an unpinned page"
        );
        let host = (page.0 as *mut u8).wrapping_add(off as usize);
        let mut buf = vec![0u8; len as usize];
        if to_user {
            // SAFETY: a pinned host page (checked above), range within it.
            unsafe { std::ptr::copy(host, buf.as_mut_ptr(), len as usize) };
            if mem.write(uaddr, &buf, true) {
                Ok(())
            } else {
                Err(EFAULT)
            }
        } else {
            if !mem.read(uaddr, &mut buf) {
                return Err(EFAULT);
            }
            // SAFETY: as above.
            unsafe { std::ptr::copy(buf.as_ptr(), host, len as usize) };
            Ok(())
        }
    }

    unsafe fn copy_page_page(
        &self,
        dst: PagePtr,
        dst_off: u32,
        src: PagePtr,
        src_off: u32,
        len: u32,
    ) {
        assert!(
            dst_off as u64 + len as u64 <= PAGE_SIZE && src_off as u64 + len as u64 <= PAGE_SIZE
        );
        let _mem = self.mem.lock().unwrap();
        // SAFETY: pinned host pages, ranges within them (caller contract);
        // the memory lock serialises every access to page contents.
        unsafe {
            std::ptr::copy(
                (src.0 as *const u8).add(src_off as usize),
                (dst.0 as *mut u8).add(dst_off as usize),
                len as usize,
            )
        };
    }

    fn random_u32(&self) -> u32 {
        if let Some(v) = *self.forced_random.lock().unwrap() {
            return v;
        }
        let mut x = self.rng.load(Relaxed);
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng.store(x, Relaxed);
        x
    }

    fn rcu_read_lock(&self) {
        self.rcu.lock().unwrap().readers += 1;
    }

    fn rcu_read_unlock(&self) {
        let heads = {
            let mut r = self.rcu.lock().unwrap();
            r.readers -= 1;
            if r.readers == 0 {
                std::mem::take(&mut r.pending)
            } else {
                Vec::new()
            }
        };
        self.free_now(heads);
    }

    unsafe fn call_rcu(&self, head: *mut RcuHead) {
        let now = {
            let mut r = self.rcu.lock().unwrap();
            if r.readers == 0 {
                true
            } else {
                r.pending.push(head as usize);
                false
            }
        };
        if now {
            self.free_now(vec![head as usize]);
        }
    }

    fn table_lock(&self) {
        let hook = self.table_hook.lock().unwrap().take();
        if let Some(f) = hook {
            f();
        }
        self.probes.table_locks.fetch_add(1, SeqCst);
        let mut locked = self.table.lock().unwrap();
        while *locked {
            locked = self.table_cv.wait(locked).unwrap();
        }
        *locked = true;
    }

    fn table_unlock(&self) {
        *self.table.lock().unwrap() = false;
        self.table_cv.notify_one();
    }

    /// One mutex for every context: enough to serialise the tests' threads.
    fn ctx_lock(&self, _shim: ShimCtx) {
        self.probes.ctx_locks.fetch_add(1, SeqCst);
        let mut locked = self.ctx.lock().unwrap();
        while *locked {
            locked = self.ctx_cv.wait(locked).unwrap();
        }
        *locked = true;
    }

    fn ctx_unlock(&self, _shim: ShimCtx) {
        *self.ctx.lock().unwrap() = false;
        self.ctx_cv.notify_one();
    }

    fn ctx_kick(&self, _shim: ShimCtx) {
        self.kicks.fetch_add(1, SeqCst);
    }

    fn ctx_notify(&self, _shim: ShimCtx) {
        self.notifies.fetch_add(1, SeqCst);
    }

    fn ctx_spawn(&self, _shim: ShimCtx) -> KResult<()> {
        if self.spawn_fails.load(SeqCst) {
            return Err(ENOMEM);
        }
        self.spawns.fetch_add(1, SeqCst);
        Ok(())
    }

    /// Like the shim: a CUSTOM mask must name a CPU (the mock has 64).
    fn ctx_bind(&self, _shim: ShimCtx, flags: u32, mask: &[u8]) -> KResult<()> {
        if flags == knem_abi::KNEM_BIND_FLAG_CUSTOM && mask.iter().take(8).all(|&b| b == 0) {
            return Err(EINVAL);
        }
        *self.bound.lock().unwrap() = Some((flags, mask.to_vec()));
        Ok(())
    }

    /// Like the shim: charge the current uid's locked_vm, refuse over the
    /// limit (unless CAP_IPC_LOCK: then not charged), count pinned_vm,
    /// record the charge.
    fn owner_new(&self, pages: u64) -> KResult<OwnerPtr> {
        let uid = self.task.lock().unwrap().0;
        let mut locked = self.locked_vm.lock().unwrap();
        let cur = locked.get(&uid).copied().unwrap_or(0);
        let limit = self.memlock_pages.lock().unwrap().unwrap_or(u64::MAX);
        let charged = if cur.saturating_add(pages) <= limit {
            *locked.entry(uid).or_default() += pages;
            true
        } else if self.ipc_lock.load(SeqCst) {
            false
        } else {
            return Err(EDQUOT);
        };
        drop(locked);
        self.pinned_vm.fetch_add(pages, SeqCst);
        self.owners.fetch_add(1, SeqCst);
        let rec = (charged.then_some(uid), pages);
        Ok(OwnerPtr(Box::into_raw(Box::new(rec)).cast()))
    }

    unsafe fn owner_put(&self, owner: OwnerPtr) {
        // SAFETY: owner_new made it from a Box; put once (contract).
        let (uid, pages) = *unsafe { Box::from_raw(owner.0.cast::<(Option<u32>, u64)>()) };
        if let Some(uid) = uid {
            let mut locked = self.locked_vm.lock().unwrap();
            if let Some(n) = locked.get_mut(&uid) {
                *n -= pages;
                if *n == 0 {
                    locked.remove(&uid);
                }
            }
        }
        self.pinned_vm.fetch_sub(pages, SeqCst);
        self.owners.fetch_sub(1, SeqCst);
    }

    fn pin_account(&self, keys: &mut [u64]) -> usize {
        let task = self.task.lock().unwrap();
        let n = task.1.len().min(keys.len());
        keys[..n].copy_from_slice(&task.1[..n]);
        n
    }

    fn memlock_limit(&self) -> u64 {
        self.memlock_pages.lock().unwrap().unwrap_or(u64::MAX)
    }

    fn memlock_over(&self, _pages: u64, _limit: u64, _pinned: u64) -> bool {
        self.ipc_lock.load(SeqCst)
    }

    fn pins_lock(&self) {
        let mut locked = self.pins.lock().unwrap();
        while *locked {
            locked = self.pins_cv.wait(locked).unwrap();
        }
        *locked = true;
    }

    fn pins_unlock(&self) {
        *self.pins.lock().unwrap() = false;
        self.pins_cv.notify_one();
    }

    fn access_policy(&self) -> AccessPolicy {
        if self.ptrace_policy.load(SeqCst) {
            AccessPolicy::Ptrace
        } else {
            AccessPolicy::Uid
        }
    }

    fn may_access(&self, owner: OwnerPtr) -> bool {
        assert!(!owner.0.is_null(), "a region without an owner record");
        !self.ptrace_denied.load(SeqCst)
    }

    fn regions_per_user(&self) -> u64 {
        self.regions_per_user.load(SeqCst)
    }

    fn regions_max(&self) -> u64 {
        self.regions_max.load(SeqCst)
    }

    fn offload_threads_per_user(&self) -> u64 {
        self.offload_threads_per_user.load(SeqCst)
    }

    fn offload_threads_max(&self) -> u64 {
        self.offload_threads_max.load(SeqCst)
    }

    fn copy_should_stop(&self) -> bool {
        match &mut *self.stop_after.lock().unwrap() {
            Some(0) => true,
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }

    fn dma_usable(&self) -> bool {
        self.probes.dma_probes.fetch_add(1, SeqCst);
        self.dma.usable()
    }

    fn dma_min(&self) -> u64 {
        self.dma.min.load(SeqCst)
    }

    fn dma_begin(&self, _shim: Option<ShimCtx>) -> Option<crate::edge::shim::DmaBatch> {
        self.dma.begin()
    }

    unsafe fn dma_copy(
        &self,
        b: crate::edge::shim::DmaBatch,
        dst: PagePtr,
        dst_off: u32,
        src: PagePtr,
        src_off: u32,
        len: u32,
    ) -> KResult<()> {
        // SAFETY: the caller's contract is MockDma::copy's.
        unsafe { self.dma.copy(b, dst, dst_off, src, src_off, len) }
    }

    fn dma_end(&self, b: crate::edge::shim::DmaBatch) -> KResult<()> {
        self.dma.end(self, b)
    }

    unsafe fn dma_finish_async(
        &self,
        b: crate::edge::shim::DmaBatch,
        _shim: ShimCtx,
        slot: *mut u8,
        token: *mut core::ffi::c_void,
        failed: bool,
    ) {
        self.dma.finish_async(b, slot, token, failed);
    }
}
