//! The global region table: cookie → region, lock-free for readers.
//!
//! Slots live in fixed-size chunks that never move while the module is
//! loaded.  A cookie is `tag << INDEX_BITS | index`: the index takes the
//! 20 bits that 2^20 slots need and the other 44 are the tag, random per
//! publication, never 0 (so neither is the cookie) and checked on every
//! lookup.  A slot's state word holds the tag, a generation bumped at each
//! reuse (so a reader can tell that the slot changed under it) and
//! LIVE/CONSUMED/FREE.
//!
//! Readers run under RCU: load the state, take a reference if the count is
//! not zero, re-load the state.  Writers (insert, destroy, release, the
//! removal of a consumed single-use region) hold the table lock, and a
//! slot's state changes only under it: a slot that is LIVE when a holder
//! looks stays LIVE until that holder lets go.  CONSUMED exists only
//! inside one hold (`consume_pair`'s claim, undone or freed before the
//! lock is released).
//!
//! The live regions of each user and of each context are counted (under
//! the table lock): a user may hold at most `Env::regions_per_user` at
//! every level of its account (`state::account`), the node at most
//! `Env::regions_max`, and a context's release stops scanning once it has
//! found all of its own.  A context's count lives in the context
//! (`RegionCount`), so counting costs the same however many contexts
//! there are.
//!
//! No hold of the table lock does work that grows with the table, the
//! number of contexts or the number of account keys counted: a release
//! looks at most `SCAN_PER_HOLD` slots per hold, and a key's count is
//! found, added or dropped moving at most `counts::MIGRATE_PER_NEW_KEY`
//! entries (`state::counts`).  [`Table::hold_work_max`] records the most work one hold did
//! (slots looked at plus count entries moved), which test builds expose.

use crate::edge::errno::{KResult, EINVAL, ENOMEM};
use crate::edge::kalloc::KBox;
use crate::edge::shim::{Env, RcuGuard, TableGuard};
use crate::state::account::{AccountRef, RegionCount};
use crate::state::counts::{seed, Counts};
use crate::state::region::{self, Region, RegionRef};
use crate::state::stats::Stats;
use core::cell::UnsafeCell;
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use knem_abi::KNEM_FLAG_SINGLEUSE;

/// Slots per chunk.
pub const CHUNK_SLOTS: usize = 256;
/// Chunks at most (so at most `CHUNK_SLOTS * MAX_CHUNKS` live regions).
pub const MAX_CHUNKS: usize = 4096;

/// Most slots a context's release looks at in one hold of the table lock.
pub const SCAN_PER_HOLD: usize = 1024;

/// Bits of a cookie that hold the slot index (`CHUNK_SLOTS * MAX_CHUNKS`).
pub const INDEX_BITS: u32 = 20;
/// Bits of a cookie's random tag.
pub const TAG_BITS: u32 = 64 - INDEX_BITS;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const _: () = assert!((CHUNK_SLOTS * MAX_CHUNKS) as u64 == 1 << INDEX_BITS);

const ST_FREE: u64 = 0;
const ST_LIVE: u64 = 1;
const ST_CONSUMED: u64 = 2;
const ST_MASK: u64 = 3;
// State word: tag (44 bits) | generation (18 bits) | state (2 bits).  The
// tag changes at every publication, so the generation only has to tell
// apart reuses that drew the same tag.
const GEN_MASK: u64 = (1 << (INDEX_BITS - 2)) - 1;

const fn make_state(tag: u64, gen: u64, st: u64) -> u64 {
    ((tag & TAG_MASK) << INDEX_BITS) | ((gen & GEN_MASK) << 2) | st
}
const fn tag_of(s: u64) -> u64 {
    s >> INDEX_BITS
}
const fn gen_of(s: u64) -> u64 {
    (s >> 2) & GEN_MASK
}
const fn with_st(s: u64, st: u64) -> u64 {
    (s & !ST_MASK) | st
}

/// The cookie of slot `idx` published with `tag` (non-zero, `TAG_BITS`).
pub const fn make_cookie(idx: u32, tag: u64) -> u64 {
    ((tag & TAG_MASK) << INDEX_BITS) | (idx as u64 & INDEX_MASK)
}

/// Splits a cookie into (slot index, tag); None for cookies that cannot
/// name a slot (tag 0, which no publication uses).
pub const fn split_cookie(cookie: u64) -> Option<(u32, u64)> {
    let tag = cookie >> INDEX_BITS;
    if tag == 0 {
        None
    } else {
        Some(((cookie & INDEX_MASK) as u32, tag))
    }
}

/// A fresh tag: `TAG_BITS` random bits, never 0 and never `old` (the
/// slot's previous tag), even if the random source repeats itself.
fn new_tag<E: Env>(env: &E, old: u64) -> u64 {
    let hi = env.random_u32() as u64;
    let lo = env.random_u32() as u64;
    let mut tag = ((hi << 32) | lo) & TAG_MASK;
    if tag == old {
        tag = tag.wrapping_add(1) & TAG_MASK;
    }
    if tag == 0 {
        tag = if old == 1 { 2 } else { 1 };
    }
    tag
}

struct Slot {
    state: AtomicU64,
    region: AtomicPtr<Region>,
    /// Free-list link (index + 1, 0 = end); only under the table lock.
    next_free: AtomicU32,
}

struct Chunk {
    slots: [Slot; CHUNK_SLOTS],
}

/// The region table.
pub struct Table {
    chunks: [AtomicPtr<Chunk>; MAX_CHUNKS],
    // The fields below change only under the table lock.
    nchunks: AtomicUsize,
    used: AtomicUsize,
    free_head: AtomicU32,
    live: UnsafeCell<Live>,
    /// The most work one hold of the lock did: slots looked at plus count
    /// entries moved (`Table::hold_work_max`).
    hold_work: AtomicU64,
    /// Slots release_ctx looked at (host tests).
    #[cfg(test)]
    pub scanned: AtomicUsize,
}

/// Live regions per account level, and in all (per context: in the
/// context, `RegionCount`).
struct Live {
    users: Counts,
    total: u64,
}

/// A hold of the table lock that records its work in
/// `Table::hold_work` when it ends.
struct Hold<'t, 'e, E: Env> {
    table: &'t Table,
    /// `Counts::moved` of the user counts when the hold began.
    moved: u64,
    /// Slots looked at in this hold.
    scanned: u64,
    // Dropped after `Hold::drop` ran: the lock is released last.
    _lock: TableGuard<'e, E>,
}

impl<E: Env> Drop for Hold<'_, '_, E> {
    fn drop(&mut self) {
        // SAFETY: the lock is still held (`_lock` goes after this); the
        // borrow ends here.
        let moved = unsafe { self.table.live() }.users.moved();
        let work = self.scanned.saturating_add(moved.wrapping_sub(self.moved));
        self.table.hold_work.fetch_max(work, Relaxed);
    }
}

// SAFETY: `live` is only touched with the table lock held (Table::live);
// everything else is atomic.
unsafe impl Sync for Table {}

/// A region found by [`Table::lookup`], with a reference held.
pub struct Found<'a, E: Env> {
    /// The region.
    pub region: RegionRef<'a, E>,
    slot: &'a Slot,
    idx: u32,
    state: u64,
}

impl<'a, E: Env> Found<'a, E> {
    /// The region reference, once the lookup's other uses are over.
    pub fn into_region(self) -> RegionRef<'a, E> {
        self.region
    }
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// An empty table (no memory until the first insert).
    pub const fn new() -> Table {
        Table {
            chunks: [const { AtomicPtr::new(null_mut()) }; MAX_CHUNKS],
            nchunks: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            free_head: AtomicU32::new(0),
            live: UnsafeCell::new(Live {
                users: Counts::new(),
                total: 0,
            }),
            hold_work: AtomicU64::new(0),
            #[cfg(test)]
            scanned: AtomicUsize::new(0),
        }
    }

    /// Takes the table lock for one hold whose work is recorded.
    fn hold<'e, E: Env>(&self, env: &'e E) -> Hold<'_, 'e, E> {
        let lock = TableGuard::new(env);
        // SAFETY: table lock held; the borrow ends here.
        let moved = unsafe { self.live() }.users.moved();
        Hold {
            table: self,
            moved,
            scanned: 0,
            _lock: lock,
        }
    }

    /// The most work one hold of the table lock did since load or the last
    /// reset (slots looked at plus count entries moved); with `reset`, the
    /// record starts again from 0.
    pub fn hold_work_max(&self, reset: bool) -> u64 {
        if reset {
            self.hold_work.swap(0, Relaxed)
        } else {
            self.hold_work.load(Relaxed)
        }
    }

    /// The live-region counts.
    ///
    /// # Safety
    /// The table lock must be held, and the borrow must end before it is
    /// released or `live` is borrowed again.
    #[allow(clippy::mut_from_ref)]
    unsafe fn live(&self) -> &mut Live {
        // SAFETY: the lock makes this the only access (caller's contract).
        unsafe { &mut *self.live.get() }
    }

    fn slot(&self, idx: u32) -> Option<&Slot> {
        let idx = idx as usize;
        let chunk = self.chunks.get(idx / CHUNK_SLOTS)?.load(Acquire);
        // SAFETY: published chunks stay allocated until Table::exit, which
        // runs when no context (hence no caller) is left.
        let chunk = unsafe { chunk.as_ref() }?;
        chunk.slots.get(idx % CHUNK_SLOTS)
    }

    /// Takes a free slot; table lock held.
    fn alloc_slot(&self) -> KResult<u32> {
        let head = self.free_head.load(Relaxed);
        if head != 0 {
            let slot = self.slot(head - 1).ok_or(ENOMEM)?;
            self.free_head.store(slot.next_free.load(Relaxed), Relaxed);
            return Ok(head - 1);
        }
        let used = self.used.load(Relaxed);
        let n = self.nchunks.load(Relaxed);
        if used == n * CHUNK_SLOTS {
            let cell = self.chunks.get(n).ok_or(ENOMEM)?;
            // SAFETY: all-zero is a valid Chunk (atomics at 0, FREE state).
            let chunk = unsafe { KBox::<Chunk>::try_new_zeroed() }?;
            cell.store(KBox::into_raw(chunk), Release);
            self.nchunks.store(n + 1, Relaxed);
        }
        self.used.store(used + 1, Relaxed);
        Ok(used as u32)
    }

    /// Returns a slot whose region was LIVE within this hold of the table
    /// lock to the free list, and uncounts the region.
    fn free_slot(&self, idx: u32, slot: &Slot) {
        // SAFETY: the slot still holds the table's reference, which the
        // caller puts only after this.
        if let Some(r) = unsafe { slot.region.load(Relaxed).as_ref() } {
            // SAFETY: table lock held; the borrow ends here.
            let live = unsafe { self.live() };
            Self::uncount(live, r.attrs().account);
        }
        slot.region.store(null_mut(), Relaxed);
        slot.next_free.store(self.free_head.load(Relaxed), Relaxed);
        self.free_head.store(idx + 1, Relaxed);
    }

    /// Counts a new region of `account` (and its context): ENOMEM when a
    /// level of the account holds `max` already, the node `node_max`, or
    /// memory is short.  Table lock held.
    fn count_new<E: Env>(
        &self,
        env: &E,
        account: AccountRef,
        max: u64,
        node_max: u64,
    ) -> KResult<()> {
        // SAFETY: table lock held; the borrow ends here.
        let live = unsafe { self.live() };
        if live.total >= node_max {
            return Err(ENOMEM);
        }
        // SAFETY: the region is being inserted by its (live) context, with
        // the table lock held.
        if let Some(a) = unsafe { account.get() } {
            a.charge(&mut live.users, 1, max, || seed(env))?;
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { account.regions() } {
            c.add();
        }
        live.total += 1;
        Ok(())
    }

    /// Undoes [`Table::count_new`]; table lock held, the region (or the
    /// one being inserted by its live context) in a slot seen LIVE in
    /// this hold.
    fn uncount(live: &mut Live, account: AccountRef) {
        // SAFETY: the slot was LIVE within this hold of the lock (caller's
        // contract), so the context lives (AccountRef's invariant).
        if let Some(a) = unsafe { account.get() } {
            a.uncharge(&mut live.users, 1);
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { account.regions() } {
            c.sub();
        }
        live.total = live.total.saturating_sub(1);
    }

    /// Publishes a region; the table takes over its reference.  Returns the
    /// cookie.  On failure the region is discarded: ENOMEM when the table
    /// is full, the node holds `Env::regions_max` live regions, or a level
    /// of the owner's account already holds `Env::regions_per_user`.
    pub fn insert<E: Env>(&self, env: &E, stats: &Stats, region: KBox<Region>) -> KResult<u64> {
        let account = region.attrs().account;
        let (max, node_max) = (env.regions_per_user(), env.regions_max());
        let guard = self.hold(env);
        let slot = self.count_new(env, account, max, node_max).and_then(|()| {
            self.alloc_slot()
                .and_then(|i| Ok((i, self.slot(i).ok_or(ENOMEM)?)))
                .inspect_err(|_| {
                    // SAFETY: table lock held; the borrow ends here.
                    Self::uncount(unsafe { self.live() }, account);
                })
        });
        let (idx, slot) = match slot {
            Ok(s) => s,
            Err(e) => {
                drop(guard);
                Region::discard(region, env, stats);
                return Err(e);
            }
        };
        let old = slot.state.load(Relaxed);
        let tag = new_tag(env, tag_of(old));
        slot.region.store(KBox::into_raw(region), Relaxed);
        slot.state
            .store(make_state(tag, gen_of(old) + 1, ST_LIVE), Release);
        Ok(make_cookie(idx, tag))
    }

    /// Finds a live region and takes a reference, without consuming it.
    /// Unknown, destroyed or consumed cookies give EINVAL.
    pub fn lookup<'a, E: Env>(
        &'a self,
        env: &'a E,
        stats: &'a Stats,
        cookie: u64,
    ) -> KResult<Found<'a, E>> {
        let (idx, tag) = split_cookie(cookie).ok_or(EINVAL)?;
        let slot = self.slot(idx).ok_or(EINVAL)?;
        let rcu = RcuGuard::new(env);
        let state = slot.state.load(Acquire);
        if state & ST_MASK != ST_LIVE || tag_of(state) != tag {
            return Err(EINVAL);
        }
        let ptr = NonNull::new(slot.region.load(Acquire)).ok_or(EINVAL)?;
        // SAFETY: we are inside an RCU read-side section and the region was
        // published in this slot, so its memory is not freed before we leave
        // the section, even if it is being destroyed.
        if !unsafe { ptr.as_ref() }.try_get() {
            return Err(EINVAL);
        }
        let again = slot.state.load(Acquire);
        drop(rcu);
        // SAFETY: try_get gave us a reference, handed to the RegionRef (its
        // drop, outside RCU, may be the last put if the slot changed).
        let region = unsafe { RegionRef::from_owned(ptr, env, stats) };
        if again != state {
            return Err(EINVAL);
        }
        Ok(Found {
            region,
            slot,
            idx,
            state,
        })
    }

    /// Consumes a single-use region found by [`Table::lookup`]: the caller
    /// that wins the state transition removes it from the table; any other
    /// gets EINVAL.  A region that is not single-use is left alone.
    ///
    /// The transition is made under the table lock, like every other
    /// change of a slot's state: a LIVE slot then always holds a region
    /// whose context lives (the owner's release, which takes the lock,
    /// removes them all before the context is freed), so the uncount
    /// below never follows a pointer into a freed context.  A consumer
    /// that marks the slot first and locks afterwards lets the release
    /// skip the slot and free the context in between.
    pub fn consume<E: Env>(&self, env: &E, stats: &Stats, found: &Found<'_, E>) -> KResult<()> {
        if found.region.attrs().flags & KNEM_FLAG_SINGLEUSE == 0 {
            return Ok(());
        }
        let table_ref = {
            let _g = self.hold(env);
            found
                .slot
                .state
                .compare_exchange(found.state, with_st(found.state, ST_FREE), AcqRel, Relaxed)
                .map_err(|_| EINVAL)?;
            let p = found.slot.region.load(Relaxed);
            self.free_slot(found.idx, found.slot);
            p
        };
        if let Some(p) = NonNull::new(table_ref) {
            // SAFETY: the table's reference on the region, handed over by
            // clearing the slot above.  Ours (in `found`) keeps it alive.
            unsafe { region::put(p, env, stats) };
        }
        Ok(())
    }

    /// Consumes the single-use ones of two regions found by
    /// [`Table::lookup`], both or neither: if another copy consumed one of
    /// them first, the other stays in the table and this gives EINVAL.
    /// When neither is single-use nothing happens (and no lock is taken).
    ///
    /// Both claims happen under the table lock, so destroy and release
    /// (which take it too) never see the claim that is undone; a lock-free
    /// lookup racing with us may see a claimed region as already consumed,
    /// as it would have had we kept it.
    pub fn consume_pair<E: Env>(
        &self,
        env: &E,
        stats: &Stats,
        a: &Found<'_, E>,
        b: &Found<'_, E>,
    ) -> KResult<()> {
        let single = |f: &Found<'_, E>| f.region.attrs().flags & KNEM_FLAG_SINGLEUSE != 0;
        let claim = |f: &Found<'_, E>| {
            f.slot
                .state
                .compare_exchange(f.state, with_st(f.state, ST_CONSUMED), AcqRel, Relaxed)
                .is_ok()
        };
        let (sa, sb) = (single(a), single(b));
        if !sa && !sb {
            // Nothing to consume: the copy path takes no lock.
            return Ok(());
        }
        let mut refs = [None::<NonNull<Region>>; 2];
        {
            let _g = self.hold(env);
            if sa && !claim(a) {
                return Err(EINVAL);
            }
            if sb && !claim(b) {
                if sa {
                    // Undo our claim: nobody else changes a CONSUMED slot,
                    // and the writers that could are excluded by the lock.
                    a.slot.state.store(a.state, Release);
                }
                return Err(EINVAL);
            }
            for ((f, s), r) in [(a, sa), (b, sb)].into_iter().zip(refs.iter_mut()) {
                if s {
                    *r = NonNull::new(f.slot.region.load(Relaxed));
                    f.slot.state.store(with_st(f.state, ST_FREE), Release);
                    self.free_slot(f.idx, f.slot);
                }
            }
        }
        for p in refs.into_iter().flatten() {
            // SAFETY: the table's reference, handed over by freeing the
            // slot above; the caller's lookups keep the regions alive.
            unsafe { region::put(p, env, stats) };
        }
        Ok(())
    }

    /// Removes a live region created by context `ctx` (DESTROY_REGION).
    /// Unknown cookies and other contexts' regions give EINVAL.
    pub fn destroy<E: Env>(&self, env: &E, stats: &Stats, cookie: u64, ctx: u64) -> KResult<()> {
        let (idx, tag) = split_cookie(cookie).ok_or(EINVAL)?;
        let slot = self.slot(idx).ok_or(EINVAL)?;
        let p = {
            let _g = self.hold(env);
            let state = slot.state.load(Acquire);
            if state & ST_MASK != ST_LIVE || tag_of(state) != tag {
                return Err(EINVAL);
            }
            let p = NonNull::new(slot.region.load(Acquire)).ok_or(EINVAL)?;
            // SAFETY: a LIVE slot holds the table's reference on its region,
            // and only table-lock holders (us) can drop it.
            if unsafe { p.as_ref() }.attrs().owner_ctx != ctx {
                return Err(EINVAL);
            }
            // Every change of a slot's state is made under the lock we
            // hold, so the LIVE state read above cannot have changed.
            slot.state
                .compare_exchange(state, with_st(state, ST_FREE), Release, Relaxed)
                .map_err(|_| EINVAL)?;
            self.free_slot(idx, slot);
            p
        };
        // SAFETY: the table's reference, handed over by freeing the slot.
        unsafe { region::put(p, env, stats) };
        Ok(())
    }

    /// Removes every live region of context `ctx`, whose count is
    /// `regions` (file release).  Copies running against them finish on
    /// their own references.  The scan stops once the context has no live
    /// region left, so a context that created none scans nothing.  Each
    /// hold of the table lock frees at most 32 regions and looks at most
    /// `SCAN_PER_HOLD` slots, so other users' creations wait for no long
    /// scan while many fds close.
    pub fn release_ctx<E: Env>(&self, env: &E, stats: &Stats, ctx: u64, regions: &RegionCount) {
        const BATCH: usize = 32;
        let mut next = 0usize;
        loop {
            let mut batch = [None::<NonNull<Region>>; BATCH];
            let mut n = 0;
            let used = {
                let mut hold = self.hold(env);
                let mut used = self.used.load(Relaxed);
                let first = next;
                while next < used && n < BATCH && next - first < SCAN_PER_HOLD {
                    if regions.get() == 0 {
                        used = next;
                        break;
                    }
                    let idx = next as u32;
                    next += 1;
                    #[cfg(test)]
                    self.scanned.fetch_add(1, Relaxed);
                    let Some(slot) = self.slot(idx) else { continue };
                    let state = slot.state.load(Acquire);
                    if state & ST_MASK != ST_LIVE {
                        continue;
                    }
                    let Some(p) = NonNull::new(slot.region.load(Acquire)) else {
                        continue;
                    };
                    // SAFETY: LIVE slot, table lock held: the table's
                    // reference keeps the region alive.
                    if unsafe { p.as_ref() }.attrs().owner_ctx != ctx {
                        continue;
                    }
                    if slot
                        .state
                        .compare_exchange(state, with_st(state, ST_FREE), Release, Relaxed)
                        .is_err()
                    {
                        continue; // cannot happen: states change under our lock
                    }
                    self.free_slot(idx, slot);
                    if let Some(b) = batch.get_mut(n) {
                        *b = Some(p);
                    }
                    n += 1;
                }
                hold.scanned = (next - first) as u64;
                used
            };
            // Unpinning may take a while: do it without the table lock.
            for p in batch.iter().flatten() {
                // SAFETY: the table's reference, handed over by freeing the slot.
                unsafe { region::put(*p, env, stats) };
            }
            if next >= used {
                break;
            }
        }
    }

    /// Frees the chunks at module unload (no context is left).
    pub fn exit(&self) {
        for cell in self.chunks.iter() {
            let p = cell.swap(null_mut(), AcqRel);
            if !p.is_null() {
                // SAFETY: p came from KBox::into_raw in alloc_slot and no
                // reader is left.
                drop(unsafe { KBox::from_raw(p) });
            }
        }
        self.nchunks.store(0, Relaxed);
        self.used.store(0, Relaxed);
        self.free_head.store(0, Relaxed);
        // SAFETY: no context is left, so nobody else touches the table.
        let live = unsafe { self.live() };
        live.users.clear();
    }

    /// Live regions charged to user `uid` in the initial namespace (the
    /// key of `Account::of_uid`; tests and assertions).
    pub fn user_regions<E: Env>(&self, env: &E, uid: u32) -> u64 {
        let _g = TableGuard::new(env);
        // SAFETY: table lock held; the borrow ends here.
        unsafe { self.live() }.users.get(uid as u64)
    }

    /// Every word of the table that operations other than lookups write:
    /// the allocation fields and each used slot's state, region and link
    /// (structural tests compare it before and after an operation).
    #[cfg(test)]
    pub fn fingerprint(&self) -> std::vec::Vec<u64> {
        let used = self.used.load(Relaxed);
        let mut v = std::vec![
            self.nchunks.load(Relaxed) as u64,
            used as u64,
            self.free_head.load(Relaxed) as u64,
        ];
        for slot in (0..used as u32).filter_map(|i| self.slot(i)) {
            v.push(slot.state.load(Relaxed));
            v.push(slot.region.load(Relaxed) as u64);
            v.push(slot.next_free.load(Relaxed) as u64);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::errno::EINVAL;
    use crate::plan::layout::{iov, SegList};
    use crate::state::account::Account;
    use crate::state::region::{RegionAttrs, PROT_READ};
    use crate::testing::mock::MockEnv;

    static ACCOUNT: Account = Account::of_uid(0);

    fn region(
        env: &MockEnv,
        stats: &Stats,
        flags: u32,
        ctx: u64,
        count: &RegionCount,
    ) -> KBox<Region> {
        let a = env.map(4096, true);
        let layout = SegList::new(&[iov(a, 10)]).unwrap();
        let attrs = RegionAttrs {
            prot: PROT_READ,
            flags,
            owner_ctx: ctx,
            owner_uid: 0,
            account: AccountRef::of(&ACCOUNT, count),
        };
        Region::create(env, stats, &env.pin_counts, layout, attrs).unwrap()
    }

    #[test]
    fn cookie_encoding() {
        assert_eq!(split_cookie(0), None);
        assert_eq!(split_cookie(INDEX_MASK), None, "tag 0 is never issued");
        assert_eq!(
            split_cookie(0x1234_5678_9ab0_0001),
            Some((1, 0x0123_4567_89ab))
        );
        assert_eq!(split_cookie(make_cookie(0, 1)), Some((0, 1)));
        assert_eq!(
            split_cookie(make_cookie(INDEX_MASK as u32, TAG_MASK)),
            Some((INDEX_MASK as u32, TAG_MASK))
        );
        assert_eq!(tag_of(make_state(TAG_MASK, GEN_MASK, ST_LIVE)), TAG_MASK);
        let s = make_state(7, GEN_MASK + 1, ST_LIVE);
        assert_eq!(
            (tag_of(s), gen_of(s), s & ST_MASK),
            (7, 0, ST_LIVE),
            "generation wraps"
        );
    }

    #[test]
    fn lookups_outside_the_table_are_einval() {
        let (env, stats, t) = (MockEnv::new(), Stats::new(), Table::new());
        let c = RegionCount::new();
        assert_eq!(t.lookup(&env, &stats, 1).err(), Some(EINVAL));
        let k = t
            .insert(&env, &stats, region(&env, &stats, 0, 1, &c))
            .unwrap();
        let (idx, tag) = split_cookie(k).unwrap();
        let beyond = make_cookie(CHUNK_SLOTS as u32 * 2 + 1, tag);
        assert_eq!(t.lookup(&env, &stats, beyond).err(), Some(EINVAL));
        assert_eq!(
            t.lookup(&env, &stats, make_cookie(idx + 1, tag)).err(),
            Some(EINVAL)
        );
        assert!(t.lookup(&env, &stats, k).is_ok());
        t.release_ctx(&env, &stats, 1, &c);
        t.exit();
    }

    #[test]
    fn slots_are_reused_and_chunks_grow() {
        let (env, stats, t) = (MockEnv::new(), Stats::new(), Table::new());
        let c = RegionCount::new();
        let n = CHUNK_SLOTS + 3;
        let keys: std::vec::Vec<u64> = (0..n)
            .map(|_| {
                t.insert(&env, &stats, region(&env, &stats, 0, 9, &c))
                    .unwrap()
            })
            .collect();
        assert_eq!(t.nchunks.load(Relaxed), 2);
        assert_eq!(t.destroy(&env, &stats, keys[5], 9), Ok(()));
        let again = t
            .insert(&env, &stats, region(&env, &stats, 0, 9, &c))
            .unwrap();
        assert_eq!(split_cookie(again).unwrap().0, 5, "freed slot reused first");
        assert_eq!(t.lookup(&env, &stats, keys[5]).err(), Some(EINVAL));
        t.release_ctx(&env, &stats, 9, &c);
        assert_eq!(stats.snapshot().regions, 0);
        assert_eq!(env.pinned(), 0);
        t.exit();
    }

    #[test]
    fn consume_only_single_use_and_only_once() {
        let (env, stats, t) = (MockEnv::new(), Stats::new(), Table::new());
        let c = RegionCount::new();
        let plain = t
            .insert(&env, &stats, region(&env, &stats, 0, 1, &c))
            .unwrap();
        let once = t
            .insert(
                &env,
                &stats,
                region(&env, &stats, KNEM_FLAG_SINGLEUSE, 1, &c),
            )
            .unwrap();
        let f = t.lookup(&env, &stats, plain).unwrap();
        assert_eq!(t.consume(&env, &stats, &f), Ok(()));
        assert_eq!(t.consume(&env, &stats, &f), Ok(()), "not single-use: stays");
        let f1 = t.lookup(&env, &stats, once).unwrap();
        let f2 = t.lookup(&env, &stats, once).unwrap();
        assert_eq!(t.consume(&env, &stats, &f1), Ok(()));
        assert_eq!(t.consume(&env, &stats, &f2), Err(EINVAL));
        assert_eq!(
            f1.region.refcount(),
            2,
            "the two lookups hold it; the table let go"
        );
        drop((f, f1, f2));
        assert_eq!(stats.snapshot().regions, 1);
        t.release_ctx(&env, &stats, 1, &c);
        assert_eq!(stats.snapshot().regions, 0);
        t.exit();
    }
}
