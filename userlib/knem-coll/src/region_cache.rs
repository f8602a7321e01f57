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
//! or still being written) drops everything, which is always safe.

use crate::error::Result;
use knem_transport::{Descriptor, Exposure, Kind, Transport};
use std::rc::Rc;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Releases the log remembers; a cache more than this many behind forgets
/// all its regions.
const LOG_SLOTS: usize = 256;

struct Slot {
    /// Reservation number + 1 once written; 0 while being written.
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
}

static NEXT: AtomicU64 = AtomicU64::new(0);
static LOG: [Slot; LOG_SLOTS] = [const {
    Slot {
        seq: AtomicU64::new(0),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; LOG_SLOTS];

/// Report that `addr..addr+len` is about to lose its pages (unmapped,
/// remapped, or advised away).  Safe from any thread and from inside
/// memory hooks: atomics only.
pub fn note_release(addr: usize, len: usize) {
    let n = NEXT.fetch_add(1, Ordering::AcqRel);
    let s = &LOG[(n % LOG_SLOTS as u64) as usize];
    // A seqlock writer: readers that see seq change around their reads of
    // start and end discard what they read.
    s.seq.store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    s.start.store(addr, Ordering::Relaxed);
    s.end.store(addr.saturating_add(len), Ordering::Relaxed);
    s.seq.store(n + 1, Ordering::Release);
}

/// The range of release `i`, or None when the slot no longer (or not yet)
/// holds it.
fn release(i: u64) -> Option<(usize, usize)> {
    let s = &LOG[(i % LOG_SLOTS as u64) as usize];
    let before = s.seq.load(Ordering::Acquire);
    let range = (
        s.start.load(Ordering::Relaxed),
        s.end.load(Ordering::Relaxed),
    );
    fence(Ordering::Acquire);
    let after = s.seq.load(Ordering::Relaxed);
    (before == i + 1 && after == before).then_some(range)
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
    /// Regions dropped to stay within the bounds (or to retry a
    /// declaration refused for memory).
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
            self.entries.clear();
            self.bytes = 0;
        }
        self.seen = cur;
    }

    /// Drop least recently used regions no call holds until one more of
    /// `len` bytes fits; false if it cannot.
    fn make_room(&mut self, len: usize) -> bool {
        while self.entries.len() >= self.max_entries || self.bytes + len > self.max_bytes {
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
        true
    }

    /// The exposure of `ptr..ptr+len` for one call: a kept region that
    /// starts at `ptr` and covers `len`, else a new one (kept if it fits).
    ///
    /// # Safety
    ///
    /// As [`Transport::expose_raw`]; besides, every release of a range the
    /// cache may hold was reported with [`note_release`] before it took
    /// effect.
    pub(crate) unsafe fn expose(
        &mut self,
        t: &dyn Transport,
        ptr: *const u8,
        len: usize,
        publish: bool,
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
                let x = unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), true) }.unwrap();
                assert_eq!(x.descriptor().len, 4096);
            }
        }
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries, s.bytes), (4, 2, 2, 8192));
        // Two more buffers: the two least recently used go.
        for b in &bufs[2..] {
            // SAFETY: as above.
            unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), false) }.unwrap();
        }
        let s = c.stats();
        assert_eq!((s.misses, s.evicted, s.entries), (4, 2, 2));
        // A shorter use of a kept buffer hits, with its own length.
        // SAFETY: as above.
        let x = unsafe { c.expose(t.as_ref(), bufs[3].as_ptr(), 100, false) }.unwrap();
        assert_eq!(x.descriptor().len, 100);
        assert_eq!(c.stats().hits, 5);
        // The byte bound: a buffer bigger than it is used but not kept.
        let mut small = RegionCache::new(8, 6000);
        // SAFETY: as above.
        unsafe { small.expose(t.as_ref(), bufs[0].as_ptr(), 4096, false) }.unwrap();
        // SAFETY: as above.
        unsafe { small.expose(t.as_ref(), bufs[1].as_ptr(), 4096, false) }.unwrap();
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
                unsafe { c.expose(t.as_ref(), v.as_ptr(), v.len(), false) }.unwrap();
            }
        }
        assert_eq!(c.stats().hits, 2);
        // The last byte of a, and a range that touches neither.
        note_release(a.as_ptr() as usize + 8191, 1);
        note_release(usize::MAX - 10, 5);
        // SAFETY: as above.
        unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), false) }.unwrap();
        let s = c.stats();
        assert_eq!((s.hits, s.invalidated, s.entries), (3, 1, 1));
        // SAFETY: as above.
        unsafe { c.expose(t.as_ref(), a.as_ptr(), a.len(), false) }.unwrap();
        assert_eq!(c.stats().misses, 3);
        // More releases than the log holds: everything goes.
        for i in 0..=LOG_SLOTS {
            note_release(usize::MAX - 100 - i, 1);
        }
        // SAFETY: as above.
        unsafe { c.expose(t.as_ref(), b.as_ptr(), b.len(), false) }.unwrap();
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
                let x = unsafe { c.expose(t.as_ref(), p, len, false) }.unwrap();
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
