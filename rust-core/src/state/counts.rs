//! Counts per key (an account level): an open-addressing hash table of
//! (key, count) with no live entry for a count of 0, grown fallibly and
//! incrementally.  The table keeps one for its regions, the offload
//! workers one for their threads and the pin accounting one for pinned
//! pages, each under its lock.
//!
//! One user can make a key per (namespace, uid) it opens from, about 131k
//! of them within its region bound, so no operation may cost O(keys): a
//! lookup probes linearly from a hash of the key keyed by a random seed
//! per array (so that nobody can choose keys that collide), the array is
//! at most half full (live and dead slots), and growth does not rehash at
//! once.  When a new key finds the array at its threshold, a new array is
//! allocated, sized for the live keys, and the old one is drained into it
//! [`MIGRATE_PER_NEW_KEY`] slots at each new key after that, before the
//! new one can reach its own threshold (lookups look in both meanwhile).
//! Dropping a key leaves a dead slot, which the next migration discards.
//! So adding or dropping a key moves at most `MIGRATE_PER_NEW_KEY`
//! entries; [`Counts::moved`] says how many were moved in all (the table
//! bounds its work per hold of its lock with it).

use crate::edge::errno::{KResult, ENOMEM};
use crate::edge::kalloc::KArray;
use crate::edge::shim::Env;

/// A random 64-bit value from the environment: the seed of a new array.
pub fn seed<E: Env>(env: &E) -> u64 {
    (env.random_u32() as u64) << 32 | env.random_u32() as u64
}

/// Slots of the old array examined (and their live entries moved) at each
/// new key while a migration runs.
pub const MIGRATE_PER_NEW_KEY: usize = 8;

/// Smallest array.
const MIN_SLOTS: usize = 8;

/// A slot: live when `count > 0`; otherwise empty (`key == EMPTY`) or dead
/// (`key == DEAD`, a key that was dropped: probes go on past it).
#[derive(Clone, Copy, Default)]
struct Slot {
    key: u64,
    count: u64,
}

const EMPTY: u64 = 0;
const DEAD: u64 = 1;

impl Slot {
    fn live(&self) -> bool {
        self.count != 0
    }

    fn empty(&self) -> bool {
        self.count == 0 && self.key == EMPTY
    }
}

/// One array.
///
/// # Invariants
/// `slots.len()` is 0 or a power of two; `used` is the number of live and
/// dead slots, at most half of them, so a probe always ends at an empty
/// slot.
struct Map {
    slots: KArray<Slot>,
    seed: u64,
    used: usize,
}

impl Map {
    const fn empty() -> Map {
        Map {
            slots: KArray::empty(),
            seed: 0,
            used: 0,
        }
    }

    fn with_slots(n: usize, seed: u64) -> KResult<Map> {
        Ok(Map {
            slots: KArray::try_default(n)?,
            seed,
            used: 0,
        })
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// Where the probe for `key` starts (splitmix64's finaliser of the
    /// seeded key).
    fn home(&self, key: u64) -> usize {
        let mut z = key ^ self.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z as usize) & self.mask()
    }

    /// The slot holding `key` live, and the probe length.
    fn find(&self, key: u64) -> (Option<usize>, usize) {
        let mut i = self.home(key);
        for step in 0..self.slots.len() {
            match self.slots.get(i) {
                Some(s) if s.live() && s.key == key => return (Some(i), step + 1),
                Some(s) if s.empty() => return (None, step + 1),
                Some(_) => i = (i + 1) & self.mask(),
                None => break,
            }
        }
        (None, self.slots.len())
    }

    /// Puts a key that is not in the array into the first free slot of its
    /// probe (room checked by the caller); the probe length.
    fn put(&mut self, key: u64, count: u64) -> usize {
        let mut i = self.home(key);
        for step in 0..self.slots.len() {
            let mask = self.mask();
            match self.slots.get_mut(i) {
                Some(s) if !s.live() => {
                    if s.empty() {
                        self.used += 1;
                    }
                    *s = Slot { key, count };
                    return step + 1;
                }
                Some(_) => i = (i + 1) & mask,
                None => break,
            }
        }
        self.slots.len()
    }

    /// Whether one more key fits under the threshold.
    fn has_room(&self) -> bool {
        self.used < self.slots.len() / 2
    }
}

/// Counts per key.
///
/// # Invariants
/// A key is live in at most one of `cur` and `old`; `old` holds entries
/// only while a migration runs, and its slots before `cursor` are no
/// longer live.  `live` is the number of live keys in both.
pub struct Counts {
    cur: Map,
    old: Map,
    cursor: usize,
    live: usize,
    /// Entries moved (migrated) since creation.
    moved: u64,
    /// The longest probe since creation (tests).
    probe_max: usize,
}

impl Default for Counts {
    fn default() -> Self {
        Self::new()
    }
}

impl Counts {
    /// No key counted (no memory).
    pub const fn new() -> Counts {
        Counts {
            cur: Map::empty(),
            old: Map::empty(),
            cursor: 0,
            live: 0,
            moved: 0,
            probe_max: 0,
        }
    }

    /// Entries moved (by migration) so far.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// The longest probe any operation made so far.
    pub fn probe_max(&self) -> usize {
        self.probe_max
    }

    /// Keys with a non-zero count.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no key has a count.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn probed(&mut self, n: usize) {
        self.probe_max = self.probe_max.max(n);
    }

    /// The live slot of `key`: (in `old`, index).
    fn find(&mut self, key: u64) -> Option<(bool, usize)> {
        let (i, p) = self.cur.find(key);
        self.probed(p);
        if let Some(i) = i {
            return Some((false, i));
        }
        if self.old.slots.is_empty() {
            return None;
        }
        let (i, p) = self.old.find(key);
        self.probed(p);
        i.map(|i| (true, i))
    }

    fn slot_mut(&mut self, at: (bool, usize)) -> Option<&mut Slot> {
        if at.0 {
            self.old.slots.get_mut(at.1)
        } else {
            self.cur.slots.get_mut(at.1)
        }
    }

    /// The count of `key` (0 when it has none).
    pub fn get(&self, key: u64) -> u64 {
        for m in [&self.cur, &self.old] {
            if let (Some(i), _) = m.find(key) {
                return m.slots.get(i).map_or(0, |s| s.count);
            }
        }
        0
    }

    /// Moves the live entries of the next `n` slots of the old array (all
    /// of them when `n` is `usize::MAX`) into the current one.
    fn migrate(&mut self, n: usize) {
        let end = self.old.slots.len();
        let stop = self.cursor.saturating_add(n).min(end);
        while self.cursor < stop {
            let Some(slot) = self.old.slots.get_mut(self.cursor) else {
                break;
            };
            let s = *slot;
            if s.live() {
                // Dead in the old array, so a lookup finds it only here.
                *slot = Slot {
                    key: DEAD,
                    count: 0,
                };
            }
            self.cursor += 1;
            if s.live() {
                let p = self.cur.put(s.key, s.count);
                self.probed(p);
                self.moved = self.moved.wrapping_add(1);
            }
        }
        if self.cursor >= end && end != 0 {
            self.old = Map::empty();
            self.cursor = 0;
        }
    }

    /// Makes room for one new key in `cur`: a migration step, or a new
    /// array to migrate into (seeded by `seed`).  ENOMEM, with nothing
    /// changed that a reader can see, when it cannot be allocated.
    fn make_room(&mut self, seed: impl FnOnce() -> u64) -> KResult<()> {
        if !self.old.slots.is_empty() {
            self.migrate(MIGRATE_PER_NEW_KEY);
            if self.cur.has_room() {
                return Ok(());
            }
            // Not reached (the new array is sized for the migration), but
            // never overfill: finish it.
            self.migrate(usize::MAX);
        }
        if self.cur.has_room() {
            return Ok(());
        }
        // Room for the live keys, plus the new keys the migration of the
        // current array can see (one per MIGRATE_PER_NEW_KEY of its slots),
        // within half of the new array.
        let old_len = self.cur.slots.len();
        let want = (self.live + 1)
            .saturating_mul(2)
            .saturating_add(old_len / MIGRATE_PER_NEW_KEY * 2 + 2);
        let n = want
            .max(MIN_SLOTS)
            .checked_next_power_of_two()
            .ok_or(ENOMEM)?;
        let new = Map::with_slots(n, seed())?;
        self.old = core::mem::replace(&mut self.cur, new);
        self.cursor = 0;
        self.migrate(MIGRATE_PER_NEW_KEY);
        Ok(())
    }

    /// Adds `n` to `key`'s count unless that would exceed `max`: ENOMEM
    /// then, or when a new key finds no memory.  `seed` gives a random
    /// value, asked for only when an array is allocated.  Adding 0 changes
    /// nothing.
    pub fn add(&mut self, key: u64, n: u64, max: u64, seed: impl FnOnce() -> u64) -> KResult<()> {
        if n == 0 {
            return Ok(());
        }
        if let Some(at) = self.find(key) {
            let s = self.slot_mut(at).ok_or(ENOMEM)?;
            match s.count.checked_add(n) {
                Some(c) if c <= max => {
                    s.count = c;
                    return Ok(());
                }
                _ => return Err(ENOMEM),
            }
        }
        if n > max {
            return Err(ENOMEM);
        }
        self.make_room(seed)?;
        let p = self.cur.put(key, n);
        self.probed(p);
        self.live += 1;
        Ok(())
    }

    /// Takes `n` from `key`'s count (down to 0 at most; nothing if it has
    /// none).
    pub fn sub(&mut self, key: u64, n: u64) {
        let Some(at) = self.find(key) else { return };
        let Some(s) = self.slot_mut(at) else { return };
        s.count = s.count.saturating_sub(n);
        if s.count != 0 {
            return;
        }
        s.key = DEAD;
        self.live = self.live.saturating_sub(1);
        if self.live == 0 {
            self.clear();
        }
    }

    /// Forgets every key and frees the memory.
    pub fn clear(&mut self) {
        self.cur = Map::empty();
        self.old = Map::empty();
        self.cursor = 0;
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn seed() -> u64 {
        0x243f_6a88_85a3_08d3
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(u64, u64, u64),
        Sub(u64, u64),
    }

    fn op(keys: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..keys, 0..4u64, 0..6u64).prop_map(|(k, n, m)| Op::Add(k, n, m)),
            2 => (0..keys, 0..4u64).prop_map(|(k, n)| Op::Sub(k, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Add (with a bound) and sub sequences against a BTreeMap, over
        /// few keys (counts go up and down) and many (growth and
        /// migrations with dead slots): same counts, same refusals, and no
        /// operation moves more than `MIGRATE_PER_NEW_KEY` entries.
        #[test]
        fn matches_a_map(
            few in proptest::collection::vec(op(12), 1..400),
            many in proptest::collection::vec(op(5000), 1..3000),
        ) {
            for ops in [few, many] {
                let mut c = Counts::new();
                let mut model = BTreeMap::<u64, u64>::new();
                for op in &ops {
                    let moved = c.moved();
                    match *op {
                        Op::Add(k, n, max) => {
                            // Keys 0 and 1 are the markers' values: they
                            // must count like any other.
                            let key = k.wrapping_sub(2);
                            let have = model.get(&key).copied().unwrap_or(0);
                            let want = if n > 0 && have + n > max { Err(ENOMEM) } else { Ok(()) };
                            prop_assert_eq!(c.add(key, n, max, seed), want);
                            if want.is_ok() && n > 0 {
                                *model.entry(key).or_default() += n;
                            }
                        }
                        Op::Sub(k, n) => {
                            let key = k.wrapping_sub(2);
                            c.sub(key, n);
                            if let Some(v) = model.get_mut(&key) {
                                *v = v.saturating_sub(n);
                                if *v == 0 {
                                    model.remove(&key);
                                }
                            }
                        }
                    }
                    prop_assert!(c.moved() - moved <= MIGRATE_PER_NEW_KEY as u64);
                    prop_assert_eq!(c.len(), model.len());
                }
                for (&k, &v) in &model {
                    prop_assert_eq!(c.get(k), v);
                }
                prop_assert_eq!(c.get(u64::MAX - 7), model.get(&(u64::MAX - 7)).copied().unwrap_or(0));
            }
        }
    }

    /// 100k keys added in descending order (each new key sorted first),
    /// then dropped in ascending order: no add or drop moves more than
    /// `MIGRATE_PER_NEW_KEY` entries, probes stay short, and the memory
    /// goes when the last key does.
    #[test]
    fn hundred_thousand_keys_bounded_moves() {
        const KEYS: u64 = 100_000;
        let mut c = Counts::new();
        let mut most = 0;
        let mut seeds = 0u64;
        for k in (0..KEYS).rev() {
            let before = c.moved();
            c.add(k << 32 | 1000, 1, 1, || {
                seeds += 1;
                seeds.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            })
            .unwrap();
            most = most.max(c.moved() - before);
        }
        assert_eq!(c.len(), KEYS as usize);
        assert_eq!(c.get(77 << 32 | 1000), 1);
        assert_eq!(c.add(77 << 32 | 1000, 1, 1, seed), Err(ENOMEM), "bound");
        for k in 0..KEYS {
            let before = c.moved();
            c.sub(k << 32 | 1000, 1);
            most = most.max(c.moved() - before);
        }
        assert!(
            most <= MIGRATE_PER_NEW_KEY as u64,
            "{most} entries moved by one operation"
        );
        assert!(c.probe_max() <= 64, "a probe of {} slots", c.probe_max());
        assert!(c.is_empty());
        assert!(c.cur.slots.is_empty() && c.old.slots.is_empty());
    }

    #[test]
    fn a_failed_allocation_changes_nothing() {
        let mut c = Counts::new();
        for k in 0..4 {
            c.add(k, 1, 1, seed).unwrap();
        }
        // The 8-slot array is at its threshold: the next key needs a new one.
        crate::edge::kalloc::fault::fail_after(Some(0));
        assert_eq!(c.add(100, 1, 1, seed), Err(ENOMEM));
        crate::edge::kalloc::fault::fail_after(None);
        assert_eq!((c.len(), c.get(100), c.get(3)), (4, 0, 1));
        assert_eq!(c.add(100, 2, 5, seed), Ok(()));
        assert_eq!((c.len(), c.get(100), c.get(3)), (5, 2, 1));
        c.clear();
        assert_eq!(c.get(3), 0);
    }
}
