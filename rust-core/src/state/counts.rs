//! Counts per key (an account level): a sorted array of (key, count) with
//! no entry for a count of 0, grown fallibly.  The table keeps one for its
//! regions and the offload workers one for their threads, each under its
//! lock.  Adding or dropping a key moves the entries after it, so it costs
//! O(keys); [`Counts::moved`] says how many entries were moved in all
//! (the table bounds its work per hold of its lock with it).

use crate::edge::errno::{KResult, ENOMEM};
use crate::edge::kalloc::KArray;

#[derive(Clone, Copy, Default)]
struct Entry {
    key: u64,
    count: u64,
}

/// Counts per key.
pub struct Counts {
    /// `list[..len]` sorted by key, every count non-zero.
    list: KArray<Entry>,
    len: usize,
    /// Entries copied or shifted since creation.
    moved: u64,
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
            list: KArray::empty(),
            len: 0,
            moved: 0,
        }
    }

    /// Entries copied (growth) or shifted (a new or dropped key) so far.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// Index of `key` in the list, or where it would go.
    fn find(&self, key: u64) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.list.get(mid) {
                Some(e) if e.key == key => return Ok(mid),
                Some(e) if e.key < key => lo = mid + 1,
                _ => hi = mid,
            }
        }
        Err(lo)
    }

    /// The count of `key` (0 when it has none).
    pub fn get(&self, key: u64) -> u64 {
        match self.find(key) {
            Ok(i) => self.list.get(i).map_or(0, |e| e.count),
            Err(_) => 0,
        }
    }

    /// Adds one to `key`'s count unless that would exceed `max`: ENOMEM
    /// then, or when a new key finds no memory.
    pub fn add(&mut self, key: u64, max: u64) -> KResult<()> {
        let i = match self.find(key) {
            Ok(i) => {
                let e = self.list.get_mut(i).ok_or(ENOMEM)?;
                if e.count >= max {
                    return Err(ENOMEM);
                }
                e.count += 1;
                return Ok(());
            }
            Err(i) => i,
        };
        if max == 0 {
            return Err(ENOMEM);
        }
        if self.len == self.list.len() {
            let cap = (self.list.len() * 2).max(8);
            let old = &self.list;
            let grown = KArray::try_from_fn(cap, |j| old.get(j).copied().unwrap_or_default())?;
            self.list = grown;
            self.moved = self.moved.wrapping_add(self.len as u64);
        }
        self.moved = self.moved.wrapping_add(self.len.saturating_sub(i) as u64);
        // Shift list[i..len] one place up and put the key at i.
        let mut j = self.len;
        while j > i {
            let prev = self.list.get(j - 1).copied().unwrap_or_default();
            if let Some(e) = self.list.get_mut(j) {
                *e = prev;
            }
            j -= 1;
        }
        let e = self.list.get_mut(i).ok_or(ENOMEM)?;
        *e = Entry { key, count: 1 };
        self.len += 1;
        Ok(())
    }

    /// Takes one from `key`'s count (nothing if it has none).
    pub fn sub(&mut self, key: u64) {
        let Ok(i) = self.find(key) else { return };
        let Some(e) = self.list.get_mut(i) else {
            return;
        };
        e.count = e.count.saturating_sub(1);
        if e.count != 0 {
            return;
        }
        self.moved = self
            .moved
            .wrapping_add(self.len.saturating_sub(i + 1) as u64);
        for j in i + 1..self.len {
            let next = self.list.get(j).copied().unwrap_or_default();
            if let Some(e) = self.list.get_mut(j - 1) {
                *e = next;
            }
        }
        self.len -= 1;
        if self.len == 0 {
            self.list = KArray::empty();
        }
    }

    /// Forgets every key and frees the memory.
    pub fn clear(&mut self) {
        self.list = KArray::empty();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Random add/sub sequences against a BTreeMap.
    #[test]
    fn matches_a_map() {
        let mut x = 0x243f_6a88_85a3_08d3u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for max in [1u64, 3, 50] {
            let mut c = Counts::new();
            let mut model = BTreeMap::<u64, u64>::new();
            for _ in 0..20_000 {
                let r = next();
                let key = r % 40;
                if r >> 40 & 1 == 0 {
                    let have = model.get(&key).copied().unwrap_or(0);
                    let want = if have >= max { Err(ENOMEM) } else { Ok(()) };
                    assert_eq!(c.add(key, max), want);
                    if want.is_ok() {
                        *model.entry(key).or_default() += 1;
                    }
                } else {
                    c.sub(key);
                    if let Some(n) = model.get_mut(&key) {
                        *n -= 1;
                        if *n == 0 {
                            model.remove(&key);
                        }
                    }
                }
                assert_eq!(c.len, model.len());
                for k in 0..40 {
                    assert_eq!(c.get(k), model.get(&k).copied().unwrap_or(0));
                }
            }
        }
    }

    #[test]
    fn a_failed_allocation_changes_nothing() {
        let mut c = Counts::new();
        for k in 0..8 {
            c.add(k, 1).unwrap();
        }
        crate::edge::kalloc::fault::fail_after(Some(0));
        assert_eq!(c.add(100, 1), Err(ENOMEM));
        crate::edge::kalloc::fault::fail_after(None);
        assert_eq!((c.len, c.get(100), c.get(7)), (8, 0, 1));
        c.clear();
        assert_eq!(c.get(7), 0);
    }
}
