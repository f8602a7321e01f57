//! Regions kept declared while their buffers repeat (the region cache of
//! the Open MPI KNEM collectives paper).
//!
//! A knem region pins its pages when it is declared.  As long as the
//! buffer's virtual range keeps those pages, the region stays right for the
//! next call on the same buffer; once the range is unmapped, remapped or
//! has its pages dropped (munmap, mmap MAP_FIXED, mremap, madvise
//! DONTNEED, brk shrinking), the region would still hold the old pages, and
//! a peer would read stale bytes or write where the owner no longer looks.
//! So a cache is only correct if every such release is reported, before it
//! happens, through [`note_release`] (Open MPI's memory hooks do this for
//! its own registration caches).  The caller that enables a cache promises
//! that.
//!
//! [`note_release`] runs inside munmap and friends, possibly in the middle
//! of an allocation by the very thread that owns a cache: it only appends
//! to a fixed process-wide log with atomics (no allocation, no lock).  Each
//! cache reads the log at its next lookup and drops the regions a release
//! overlapped; a reader that finds an entry it cannot trust (overwritten,
//! still being written, or mixed by two writers of one slot) drops
//! everything, which is always safe.

use crate::error::Result;
use knem_transport::{Descriptor, Exposure, Kind, Transport};
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Releases the log remembers; a cache more than this many behind forgets
/// all its regions.
const LOG_SLOTS: usize = 256;

struct Slot {
    /// Writers of this slot: how many began ([`BEGUN`] each, wrapping),
    /// how many are writing now (the low bits, [`WRITING`]), and whether
    /// two writes overlapped ([`TORN`]).
    state: AtomicU64,
    /// Reservation number + 1 of the release written last.
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
}

/// One write begun, in a slot's state.
const BEGUN: u64 = 1 << 32;
/// Writes in progress, in a slot's state.
const WRITING: u64 = (1 << 20) - 1;
/// Two writes of the slot overlapped: what it holds may mix them.
const TORN: u64 = 1 << 31;

static NEXT: AtomicU64 = AtomicU64::new(0);
static LOG: [Slot; LOG_SLOTS] = [const {
    Slot {
        state: AtomicU64::new(0),
        seq: AtomicU64::new(0),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; LOG_SLOTS];

/// Bytes all the caches of this process keep together, and their bound
/// ([`set_process_limit`]; [`ENV_PROCESS_BYTES`] or
/// [`DEFAULT_PROCESS_BYTES`] until then).  Kept regions stay pinned: each
/// cache has its own bound, and this one holds however many teams (MPI
/// communicators) a process makes.
static KEPT: AtomicUsize = AtomicUsize::new(0);
static PROCESS_MAX: AtomicUsize = AtomicUsize::new(UNSET);
const UNSET: usize = usize::MAX;

/// Default bound on the bytes all the caches of a process keep: 512 MiB.
pub const DEFAULT_PROCESS_BYTES: usize = 512 << 20;
/// Environment: the bound on the bytes all the caches of a process keep.
pub const ENV_PROCESS_BYTES: &str = "KNEM_RS_CACHE_PROCESS_BYTES";

/// Bound the bytes all the region caches of this process keep together
/// (0: none is kept).  Caches already over it keep what they have until
/// they drop it; from then on a region is kept only if it fits.
pub fn set_process_limit(bytes: usize) {
    PROCESS_MAX.store(bytes.min(UNSET - 1), Ordering::Relaxed);
}

/// The bound on the bytes all the caches of this process keep.
pub fn process_limit() -> usize {
    let v = PROCESS_MAX.load(Ordering::Relaxed);
    if v != UNSET {
        return v;
    }
    let v = std::env::var(ENV_PROCESS_BYTES)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(DEFAULT_PROCESS_BYTES)
        .min(UNSET - 1);
    // A concurrent set_process_limit wins.
    let _ = PROCESS_MAX.compare_exchange(UNSET, v, Ordering::Relaxed, Ordering::Relaxed);
    PROCESS_MAX.load(Ordering::Relaxed)
}

/// Bytes all the caches of this process keep now.
pub fn process_kept_bytes() -> usize {
    KEPT.load(Ordering::Relaxed)
}

/// Take `len` bytes of the process's bound; false if they do not fit.
fn reserve_process(len: usize) -> bool {
    let max = process_limit();
    KEPT.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
        k.checked_add(len).filter(|t| *t <= max)
    })
    .is_ok()
}

/// A release being written into its slot: [`note_release`]'s steps, apart
/// so that tests can interleave writers.
///
/// Two writers can hold one slot at once (a writer held up for as long as
/// LOG_SLOTS other releases take, then the one LOG_SLOTS later), and
/// their stores can interleave: the slot would then hold one's start, the
/// other's end, and either's number, which a reader could not tell from a
/// whole entry by the number alone.  So each writer counts itself in the
/// slot's state while it writes, and marks the slot [`TORN`] when another
/// writer was writing when it began or began while it wrote; a writer
/// that had the slot to itself clears the mark (what it wrote is whole,
/// and last).  Readers trust a slot only with no writer in it, no mark,
/// and the same state after their reads as before.
struct Writing {
    slot: &'static Slot,
    n: u64,
    /// The state before this writer began.
    before: u64,
}

impl Writing {
    fn begin() -> Writing {
        let n = NEXT.fetch_add(1, Ordering::AcqRel);
        let slot = &LOG[(n % LOG_SLOTS as u64) as usize];
        // Acquire: the stores of writers that finished before are ordered
        // before ours.  The fence: a reader that sees any store of ours
        // sees this count too.
        let before = slot.state.fetch_add(BEGUN + 1, Ordering::Acquire);
        fence(Ordering::Release);
        Writing { slot, n, before }
    }

    fn start(&self, addr: usize) {
        self.slot.start.store(addr, Ordering::Relaxed);
    }

    fn end(&self, end: usize) {
        self.slot.end.store(end, Ordering::Relaxed);
    }

    fn finish(self) {
        self.slot.seq.store(self.n + 1, Ordering::Relaxed);
        let alone_at_start = self.before & WRITING == 0;
        let began = self.before.wrapping_add(BEGUN) >> 32;
        // Release: readers that see this state see our stores.
        let _ = self
            .slot
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                let s = s - 1;
                Some(if alone_at_start && s >> 32 == began {
                    s & !TORN
                } else {
                    s | TORN
                })
            });
    }
}

/// Report that `addr..addr+len` is about to lose its pages (unmapped,
/// remapped, or advised away).  Safe from any thread and from inside
/// memory hooks: atomics only.
pub fn note_release(addr: usize, len: usize) {
    let w = Writing::begin();
    w.start(addr);
    w.end(addr.saturating_add(len));
    w.finish();
}

/// The range of release `i`, or None when the slot no longer (or not yet)
/// holds it whole.
fn release(i: u64) -> Option<(usize, usize)> {
    let s = &LOG[(i % LOG_SLOTS as u64) as usize];
    let before = s.state.load(Ordering::Acquire);
    if before & (WRITING | TORN) != 0 {
        return None;
    }
    let seq = s.seq.load(Ordering::Relaxed);
    let range = (
        s.start.load(Ordering::Relaxed),
        s.end.load(Ordering::Relaxed),
    );
    // A writer whose store we read is counted in the state we read next.
    fence(Ordering::Acquire);
    let after = s.state.load(Ordering::Relaxed);
    (seq == i + 1 && after == before).then_some(range)
}

/// The brk heap of this process: from the kernel's start of the break
/// (`start_brk` in /proc/self/stat) to the break now.  The heap only grows
/// into unmapped space, so a range kept while it lies outside the heap can
/// join the heap only after an unmapping, which the hooks do report.
struct BrkHeap {
    start: usize,
}

impl BrkHeap {
    fn new() -> BrkHeap {
        // Fixed for the life of the process: read once, not per cache.
        // Without /proc, everything below the break counts as heap: the
        // safe side (static buffers are then not kept either).
        static START: OnceLock<usize> = OnceLock::new();
        BrkHeap {
            start: *START.get_or_init(|| start_brk().unwrap_or(0)),
        }
    }

    fn overlaps(&self, addr: usize, len: usize) -> bool {
        // SAFETY: sbrk(0) only reads the current break.
        let end = unsafe { libc::sbrk(0) } as usize;
        addr < end && self.start < addr.saturating_add(len)
    }
}

/// Field 47 of /proc/self/stat (Linux 3.5 on): where the heap begins.
fn start_brk() -> Option<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's closing parenthesis start at 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(47 - 3)?.parse().ok()
}

/// What a cache did since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered by a kept region.
    pub hits: u64,
    /// Lookups that declared a region.
    pub misses: u64,
    /// Regions dropped because a release overlapped them.
    pub invalidated: u64,
    /// Regions dropped to stay within the bounds (this cache's, or the
    /// process's), to retry a declaration refused for memory, or because
    /// the call that used them failed.
    pub evicted: u64,
    /// Regions kept now.  Buffers in the brk heap are never kept: their
    /// lookups count as misses and leave nothing here.
    pub entries: u64,
    /// Bytes they cover.
    pub bytes: u64,
}

struct Entry {
    addr: usize,
    len: usize,
    exp: Rc<Exposure>,
    used: u64,
    /// The last call that used it.
    call: u64,
}

/// An exposure for one call: kept in a cache or owned by the call, with
/// the descriptor of the bytes the call uses (a kept region may be longer).
pub(crate) struct Exposed {
    exp: Rc<Exposure>,
    desc: Descriptor,
}

impl Exposed {
    pub(crate) fn owned(exp: Exposure) -> Exposed {
        let desc = exp.descriptor();
        Exposed {
            exp: Rc::new(exp),
            desc,
        }
    }

    fn kept(exp: &Rc<Exposure>, len: usize) -> Exposed {
        let mut desc = exp.descriptor();
        desc.len = len as u64;
        Exposed {
            exp: Rc::clone(exp),
            desc,
        }
    }

    pub(crate) fn descriptor(&self) -> Descriptor {
        self.desc
    }

    pub(crate) fn publish(&self, offset: usize, len: usize) -> Result<()> {
        Ok(self.exp.publish(offset, len)?)
    }

    pub(crate) fn collect(&self, offset: usize, len: usize) -> Result<()> {
        Ok(self.exp.collect(offset, len)?)
    }
}

impl Drop for RegionCache {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The regions of one team member, looked up by start address.
pub(crate) struct RegionCache {
    entries: Vec<Entry>,
    max_entries: usize,
    max_bytes: usize,
    bytes: usize,
    /// Releases read so far.
    seen: u64,
    clock: u64,
    stats: CacheStats,
    heap: BrkHeap,
}

impl RegionCache {
    /// Only transports whose exposures leave the bytes in place: knem
    /// (regions) and CMA (addresses).  A shm exposure is a copy.
    pub(crate) fn suits(kind: Kind) -> bool {
        matches!(kind, Kind::Knem | Kind::Cma)
    }

    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> RegionCache {
        RegionCache {
            entries: Vec::with_capacity(max_entries.min(4096)),
            max_entries,
            max_bytes,
            bytes: 0,
            seen: NEXT.load(Ordering::Acquire),
            clock: 0,
            stats: CacheStats::default(),
            heap: BrkHeap::new(),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries.len() as u64,
            bytes: self.bytes as u64,
            ..self.stats
        }
    }

    fn remove(&mut self, i: usize) {
        let e = self.entries.swap_remove(i);
        self.bytes -= e.len;
        KEPT.fetch_sub(e.len, Ordering::Relaxed);
    }

    fn clear(&mut self) {
        self.entries.clear();
        KEPT.fetch_sub(self.bytes, Ordering::Relaxed);
        self.bytes = 0;
    }

    /// Drop the regions call `call` used: it failed, and a peer that is
    /// late (or stuck) may still read or write them after the caller
    /// gave the buffers another use.  Dropped, they are destroyed once
    /// the call's own references are gone (they are, by the time it
    /// returned), and such a peer's access fails instead.
    pub(crate) fn drop_call(&mut self, call: u64) {
        let mut j = 0;
        while j < self.entries.len() {
            if self.entries[j].call == call {
                self.remove(j);
                self.stats.evicted += 1;
            } else {
                j += 1;
            }
        }
    }

    /// Drop the regions releases reported since the last lookup overlapped.
    fn catch_up(&mut self) {
        let cur = NEXT.load(Ordering::Acquire);
        let mut all = cur - self.seen > LOG_SLOTS as u64;
        let mut i = self.seen;
        while !all && i < cur {
            match release(i) {
                Some((start, end)) => {
                    let before = self.entries.len();
                    let mut j = 0;
                    while j < self.entries.len() {
                        let e = &self.entries[j];
                        if e.addr < end && start < e.addr + e.len {
                            self.remove(j);
                        } else {
                            j += 1;
                        }
                    }
                    self.stats.invalidated += (before - self.entries.len()) as u64;
                }
                None => all = true,
            }
            i += 1;
        }
        if all {
            self.stats.invalidated += self.entries.len() as u64;
            self.clear();
        }
        self.seen = cur;
    }

    /// Drop least recently used regions no call holds until one more of
    /// `len` bytes fits, in this cache and in the process's bound (whose
    /// share it then takes); false if it cannot.
    fn make_room(&mut self, len: usize) -> bool {
        // What other caches keep is theirs: when even dropping all of
        // ours that no call holds would not make room, drop nothing.
        let ours: usize = self
            .entries
            .iter()
            .filter(|e| Rc::strong_count(&e.exp) == 1)
            .map(|e| e.len)
            .sum();
        let others = process_kept_bytes().saturating_sub(ours);
        if others.saturating_add(len) > process_limit() {
            return false;
        }
        loop {
            let fits = self.entries.len() < self.max_entries && self.bytes + len <= self.max_bytes;
            if fits && reserve_process(len) {
                return true;
            }
            let victim = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| Rc::strong_count(&e.exp) == 1)
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i);
            match victim {
                Some(i) => {
                    self.remove(i);
                    self.stats.evicted += 1;
                }
                None => return false,
            }
        }
    }

    /// The exposure of `ptr..ptr+len` for one call: a kept region that
    /// starts at `ptr` and covers `len`, else a new one (kept if it fits).
    ///
    /// # Safety
    ///
    /// As [`Transport::expose_raw`]; besides, every release of a range the
    /// cache may hold was reported with [`note_release`] before it took
    /// effect.
    ///
    /// `call` names the collective call (see [`RegionCache::drop_call`]).
    pub(crate) unsafe fn expose(
        &mut self,
        t: &dyn Transport,
        ptr: *const u8,
        len: usize,
        publish: bool,
        call: u64,
    ) -> Result<Exposed> {
        if len == 0 {
            // Nothing is declared for an empty buffer.
            // SAFETY: forwarded from the caller.
            return Ok(Exposed::owned(unsafe {
                t.expose_raw(ptr.cast_mut(), 0, publish)?
            }));
        }
        self.catch_up();
        self.clock += 1;
        let addr = ptr as usize;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.addr == addr && e.len >= len)
        {
            e.used = self.clock;
            e.call = call;
            self.stats.hits += 1;
            let x = Exposed::kept(&e.exp, len);
            if publish {
                x.publish(0, len)?;
            }
            return Ok(x);
        }
        self.stats.misses += 1;
        // A shorter region at the same start is replaced by this one.
        if let Some(i) = self.entries.iter().position(|e| e.addr == addr) {
            if Rc::strong_count(&self.entries[i].exp) == 1 {
                self.remove(i);
                self.stats.evicted += 1;
            }
        }
        // SAFETY: forwarded from the caller.
        let exp = match unsafe { t.expose_raw(ptr.cast_mut(), len, publish) } {
            Ok(e) => e,
            // Kept regions count against RLIMIT_MEMLOCK: give them back
            // and try once more before the call declines.
            Err(e) if e.errno() == Some(nix::errno::Errno::ENOMEM) && self.drop_unused() > 0 => {
                // SAFETY: as above.
                unsafe { t.expose_raw(ptr.cast_mut(), len, publish)? }
            }
            Err(e) => return Err(e.into()),
        };
        if len > self.max_bytes || self.heap.overlaps(addr, len) || !self.make_room(len) {
            return Ok(Exposed::owned(exp));
        }
        let exp = Rc::new(exp);
        let x = Exposed::kept(&exp, len);
        self.entries.push(Entry {
            addr,
            len,
            exp,
            used: self.clock,
            call,
        });
        self.bytes += len;
        Ok(x)
    }

    /// Drop every region no call holds; how many.
    fn drop_unused(&mut self) -> usize {
        let before = self.entries.len();
        let mut j = 0;
        while j < self.entries.len() {
            if Rc::strong_count(&self.entries[j].exp) == 1 {
                self.remove(j);
            } else {
                j += 1;
            }
        }
        let n = before - self.entries.len();
        self.stats.evicted += n as u64;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The release log is process-wide: one test at a time writes it.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn cma() -> Box<dyn Transport> {
        knem_transport::open(Kind::Cma).expect("CMA transport")
    }

    /// A buffer of its own pages, outside the brk heap wherever the test
    /// runs (a small Vec on the main thread would be in it).
    struct Mapped {
        ptr: std::ptr::NonNull<u8>,
        len: usize,
    }

    impl Mapped {
        fn new(len: usize) -> Mapped {
            use nix::sys::mman::{mmap_anonymous, MapFlags, ProtFlags};
            // SAFETY: a new private anonymous mapping aliases nothing.
            let p = unsafe {
                mmap_anonymous(
                    None,
                    std::num::NonZeroUsize::new(len).expect("a length"),
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_PRIVATE,
                )
            }
            .expect("mmap");
            Mapped { ptr: p.cast(), len }
        }

        fn as_ptr(&self) -> *const u8 {
            self.ptr.as_ptr()
        }

        fn len(&self) -> usize {
            self.len
        }
    }

    impl Drop for Mapped {
        fn drop(&mut self) {
            // SAFETY: our own mapping, unmapped once.
            let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.len) };
        }
    }

    #[test]
    fn repeats_hit_and_bounds_hold() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = cma();
        let bufs: Vec<Mapped> = (0..4).map(|_| Mapped::new(4096)).collect();
        let mut c = RegionCache::new(2, 1 << 20);
        for _ in 0..3 {
            for b in &bufs[..2] {
                // SAFETY: the buffers outlive the cache's use of them here.
                let x = unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), true, 0) }.unwrap();
                assert_eq!(x.descriptor().len, 4096);
            }
        }
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries, s.bytes), (4, 2, 2, 8192));
        // Two more buffers: the two least recently used go.
        for b in &bufs[2..] {
            // SAFETY: as above.
            unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), false, 0) }.unwrap();
        }
        let s = c.stats();
        assert_eq!((s.misses, s.evicted, s.entries), (4, 2, 2));
        // A shorter use of a kept buffer hits, with its own length.
        // SAFETY: as above.
        let x = unsafe { c.expose(t.as_ref(), bufs[3].as_ptr(), 100, false, 0) }.unwrap();
        assert_eq!(x.descriptor().len, 100);
        assert_eq!(c.stats().hits, 5);
        // The byte bound: a buffer bigger than it is used but not kept.
        let mut small = RegionCache::new(8, 6000);
        // SAFETY: as above.
        unsafe { small.expose(t.as_ref(), bufs[0].as_ptr(), 4096, false, 0) }.unwrap();
        // SAFETY: as above.
        unsafe { small.expose(t.as_ref(), bufs[1].as_ptr(), 4096, false, 0) }.unwrap();
        let s = small.stats();
        assert_eq!((s.entries, s.bytes, s.evicted), (1, 4096, 1));
    }

    #[test]
    fn releases_drop_what_they_overlap() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = cma();
        let a = Mapped::new(8192);
        let b = Mapped::new(8192);
        let mut c = RegionCache::new(8, 1 << 20);
        for _ in 0..2 {
            for v in [&a, &b] {
                // SAFETY: the buffers outlive the cache's use of them here.
                unsafe { c.expose(t.as_ref(), v.as_ptr(), v.len(), false, 0) }.unwrap();
            }
        }
        assert_eq!(c.stats().hits, 2);
        // The last byte of a, and a range that touches neither.
        note_release(a.as_ptr() as usize + 8191, 1);
        note_release(usize::MAX - 10, 5);
        // SAFETY: as above.
        unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), false, 0) }.unwrap();
        let s = c.stats();
        assert_eq!((s.hits, s.invalidated, s.entries), (3, 1, 1));
        // SAFETY: as above.
        unsafe { c.expose(t.as_ref(), a.as_ptr(), a.len(), false, 0) }.unwrap();
        assert_eq!(c.stats().misses, 3);
        // More releases than the log holds: everything goes.
        for i in 0..=LOG_SLOTS {
            note_release(usize::MAX - 100 - i, 1);
        }
        // SAFETY: as above.
        unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), false, 0) }.unwrap();
        let s = c.stats();
        assert_eq!((s.misses, s.invalidated, s.entries), (4, 3, 1));
    }

    #[test]
    fn heap_buffers_are_used_but_never_kept() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = cma();
        // Two pages of the brk heap of our own, never given back (the
        // allocator copes with a break moved by someone else).
        // SAFETY: grows the break; nothing else owns the new pages.
        let heap = unsafe { libc::sbrk(8192) };
        assert_ne!(heap as isize, -1, "sbrk");
        let heap = heap.cast::<u8>().cast_const();
        let out = Mapped::new(4096);
        let mut c = RegionCache::new(8, 1 << 20);
        for _ in 0..3 {
            for (p, len) in [
                (heap, 8192),
                (heap.wrapping_add(100), 50),
                (out.as_ptr(), 4096),
            ] {
                // SAFETY: both buffers outlive the cache's use of them here.
                let x = unsafe { c.expose(t.as_ref(), p, len, false, 0) }.unwrap();
                assert_eq!(x.descriptor().len, len as u64);
            }
        }
        // Only the mapped buffer is kept: its repeats hit; every use of
        // the heap declares again.
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries, s.bytes), (2, 7, 1, 4096));
    }

    #[test]
    fn start_brk_is_where_the_heap_begins() {
        let start = start_brk().expect("start_brk in /proc/self/stat");
        // SAFETY: sbrk(0) only reads the current break.
        let end = unsafe { libc::sbrk(0) } as usize;
        assert!(
            start > 0 && start <= end,
            "start_brk {start:#x}, break {end:#x}"
        );
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        if let Some(line) = maps.lines().find(|l| l.ends_with("[heap]")) {
            let lo = usize::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
            assert_eq!(lo, start, "{line}");
        }
    }

    /// All the caches of a process keep at most the process's bound
    /// together: a second cache keeps nothing the first one's bytes leave
    /// no room for (and drops none of its own for it), then keeps it once
    /// the first is gone; the process's count returns to zero.
    #[test]
    fn caches_of_a_process_share_its_bound() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let t = cma();
        // The bound is back as it was even when a check below fails.
        struct Restore(usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                set_process_limit(self.0);
            }
        }
        let _r = Restore(process_limit());
        assert_eq!(process_kept_bytes(), 0);
        set_process_limit(12 << 10);
        let (a, b, small) = (Mapped::new(8192), Mapped::new(8192), Mapped::new(4096));
        let mut one = RegionCache::new(8, 1 << 20);
        let mut two = RegionCache::new(8, 1 << 20);
        // SAFETY (every expose below): the buffers outlive the caches.
        unsafe { one.expose(t.as_ref(), a.as_ptr(), a.len(), false, 0) }.unwrap();
        unsafe { two.expose(t.as_ref(), small.as_ptr(), small.len(), false, 0) }.unwrap();
        assert_eq!(process_kept_bytes(), 12 << 10);
        let x = unsafe { two.expose(t.as_ref(), b.as_ptr(), b.len(), false, 0) }.unwrap();
        assert_eq!(x.descriptor().len, 8192, "used for the call");
        drop(x);
        let s = two.stats();
        assert_eq!(
            (s.entries, s.bytes, s.evicted),
            (1, 4096, 0),
            "kept beyond the bound"
        );
        assert_eq!(process_kept_bytes(), 12 << 10);
        drop(one);
        assert_eq!(process_kept_bytes(), 4 << 10);
        unsafe { two.expose(t.as_ref(), b.as_ptr(), b.len(), false, 0) }.unwrap();
        let s = two.stats();
        assert_eq!((s.entries, s.bytes), (2, 12 << 10));
        drop(two);
        assert_eq!(process_kept_bytes(), 0);
    }

    /// The default bound: DEFAULT_PROCESS_BYTES unless the environment
    /// says otherwise (read in a child, whose environment is its own).
    #[test]
    fn the_process_bound_comes_from_the_environment() {
        if let Ok(v) = std::env::var("KNEM_RS_TEST_PROCESS_BOUND") {
            assert_eq!(process_limit().to_string(), v);
            return;
        }
        let exe = std::env::current_exe().unwrap();
        for (env, want) in [
            (None, DEFAULT_PROCESS_BYTES),
            (Some("12345"), 12345),
            (Some("junk"), DEFAULT_PROCESS_BYTES),
        ] {
            let mut c = std::process::Command::new(&exe);
            c.args([
                "--exact",
                "region_cache::tests::the_process_bound_comes_from_the_environment",
            ])
            .env("KNEM_RS_TEST_PROCESS_BOUND", want.to_string());
            match env {
                Some(v) => c.env(ENV_PROCESS_BYTES, v),
                None => c.env_remove(ENV_PROCESS_BYTES),
            };
            let out = c.output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "{env:?}: {text}"
            );
        }
    }

    /// A call that fails once it began (here a peer never comes: the
    /// exchange times out) drops the regions it kept, where a late peer
    /// could still reach them once the caller reuses the buffer; the
    /// calls before kept theirs.
    #[test]
    fn a_failed_call_drops_its_kept_regions() {
        use crate::team::{create_fresh_block, team_path, Team};
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let name = create_fresh_block("knem-rs-test").unwrap();
        let go = std::sync::Barrier::new(2);
        let done = std::sync::Barrier::new(2);
        // Each rank: its cache after the first call, and rank 0's error
        // and cache after the call rank 1 never makes.  The checks come
        // after both threads ended: a rank that failed one would leave
        // the other waiting.
        let seen = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|rank| {
                    let (name, go, done) = (&name, &go, &done);
                    s.spawn(move || {
                        let mut team = Team::attach(name, rank, 2, cma()).unwrap();
                        // SAFETY: the buffers below stay mapped while kept.
                        unsafe { team.cache_regions(8, 1 << 20) }.unwrap();
                        let send = Mapped::new(4096);
                        let recv = Mapped::new(8192);
                        // SAFETY: our own mappings, used by this thread only.
                        let (send_s, recv_s) = unsafe {
                            (
                                std::slice::from_raw_parts(send.as_ptr(), 4096),
                                std::slice::from_raw_parts_mut(recv.as_ptr().cast_mut(), 8192),
                            )
                        };
                        let first = team
                            .allgather(send_s, recv_s, None)
                            .map(|()| team.region_cache_stats().unwrap());
                        go.wait();
                        let failed = (rank == 0).then(|| {
                            team.set_timeout(std::time::Duration::from_secs(1));
                            let e = team.allgather(send_s, recv_s, None).err();
                            (e.map(|e| e.to_string()), team.region_cache_stats().unwrap())
                        });
                        done.wait();
                        (first.map_err(|e| e.to_string()), failed)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        let _ = std::fs::remove_file(team_path(&name));
        for (rank, (first, _)) in seen.iter().enumerate() {
            let s = first.as_ref().unwrap();
            assert_eq!((s.entries, s.bytes), (1, 8192), "rank {rank}");
        }
        let (e, s) = seen[0].1.clone().unwrap();
        assert!(e.as_deref().unwrap_or("").contains("timed out"), "{e:?}");
        assert_eq!(
            (s.hits, s.entries, s.bytes, s.evicted),
            (1, 0, 0, 1),
            "regions of the failed call still kept"
        );
        assert_eq!(process_kept_bytes(), 0);
    }

    /// `n` releases far from anything, to go round the log.
    fn fill(n: usize) {
        for k in 0..n {
            note_release(0x7000_0000_0000 + k * 0x1000, 0x1000);
        }
    }

    /// A writer held up in the middle of its entry while the log goes
    /// round once more: the writer LOG_SLOTS later writes the same slot
    /// and finishes first, then the first one finishes.  The slot then
    /// holds the second's start with the first's end and number: neither
    /// entry may be read (before, the first read as (0x7000, 0x2000), a
    /// range that overlaps nothing, so its release was lost).
    #[test]
    fn a_writer_overtaken_in_its_slot_leaves_no_torn_entry() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let a = Writing::begin();
        let n = a.n;
        a.start(0x1000);
        fill(LOG_SLOTS - 1);
        let b = Writing::begin();
        assert_eq!(b.n, n + LOG_SLOTS as u64);
        b.start(0x7000);
        b.end(0x8000);
        b.finish();
        a.end(0x2000);
        a.finish();
        assert_eq!(release(n), None, "the overtaken writer's entry");
        assert_eq!(
            release(n + LOG_SLOTS as u64),
            None,
            "the overtaking writer's entry"
        );
        // The next writer that has the slot to itself makes it whole.
        fill(LOG_SLOTS - 1);
        note_release(0x9000, 0x1000);
        assert_eq!(release(n + 2 * LOG_SLOTS as u64), Some((0x9000, 0xa000)));
    }

    /// A writer held up before its stores while the log goes round: the
    /// entry LOG_SLOTS later is written whole, then the late writer's
    /// start lands on it.  Not to be read, neither then nor once the late
    /// writer is done (before, it read as (0xdead000, 0x6000) while the
    /// late writer was still to store its number).
    #[test]
    fn a_late_writer_of_an_older_entry_is_not_read_through() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let x = Writing::begin();
        let i = x.n + LOG_SLOTS as u64;
        fill(LOG_SLOTS - 1);
        note_release(0x5000, 0x1000);
        x.start(0xdead000);
        assert_eq!(release(i), None, "read while a late writer is in its slot");
        x.end(0xdeae000);
        x.finish();
        assert_eq!(release(i), None, "read after a late writer mixed into it");
        assert_eq!(
            release(i - LOG_SLOTS as u64),
            None,
            "the late writer's own entry"
        );
    }

    #[test]
    fn a_slot_being_rewritten_is_not_trusted() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        note_release(0x1000, 0x1000);
        let i = NEXT.load(Ordering::Acquire) - 1;
        assert_eq!(release(i), Some((0x1000, 0x2000)));
        // The number of a release the slot does not hold (the one that
        // will overwrite it) reads as unknown.
        assert_eq!(release(i + LOG_SLOTS as u64), None);
    }
}
