//! Who a context's regions and offload thread are charged to: one key per
//! user-namespace level, from the opener's own (namespace, uid) up to the
//! initial namespace, where the key is the account that created the
//! namespaces above it.  The bounds hold at every level, as the kernel's
//! ucounts do for RLIMIT_NPROC and inotify watches: an account that maps
//! 65536 subordinate uids into a namespace of its own and switches among
//! them is still one key at the top level, so together they stay within
//! one user's bound.

use crate::edge::errno::KResult;
use crate::state::counts::Counts;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Most levels a chain has: the kernel nests user namespaces 32 deep
/// below the initial one.
pub const MAX_LEVELS: usize = 33;

/// The keys a context is charged under, its own level first.
///
/// # Invariants
/// `len >= 1` and `len <= MAX_LEVELS`; `keys[..len]` are the levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Account {
    keys: [u64; MAX_LEVELS],
    len: usize,
}

impl Account {
    /// The account of a user with no namespace above it: the key is the
    /// uid (host tests, and openers in the initial namespace).
    pub const fn of_uid(uid: u32) -> Account {
        let mut keys = [0; MAX_LEVELS];
        keys[0] = uid as u64;
        Account { keys, len: 1 }
    }

    /// The account with levels `chain` (its own first), or None when the
    /// chain is empty or deeper than the kernel nests namespaces.
    pub fn from_chain(chain: &[u64]) -> Option<Account> {
        if chain.is_empty() || chain.len() > MAX_LEVELS {
            return None;
        }
        let mut keys = [0; MAX_LEVELS];
        keys.get_mut(..chain.len())?.copy_from_slice(chain);
        // INVARIANT: 1 <= len <= MAX_LEVELS, checked above.
        Some(Account {
            keys,
            len: chain.len(),
        })
    }

    /// The levels, the context's own first.
    pub fn keys(&self) -> &[u64] {
        self.keys.get(..self.len).unwrap_or(&[])
    }

    /// Counts one more at every level unless a level holds `max` already
    /// (or memory for a new key is short): ENOMEM then, and nothing
    /// changed.
    pub fn charge(&self, counts: &mut Counts, max: u64) -> KResult<()> {
        for (i, &key) in self.keys().iter().enumerate() {
            if let Err(e) = counts.add(key, max) {
                for &done in self.keys().get(..i).unwrap_or(&[]) {
                    counts.sub(done);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Gives one back at every level.
    pub fn uncharge(&self, counts: &mut Counts) {
        for &key in self.keys() {
            counts.sub(key);
        }
    }
}

/// The live regions of one context in the table, kept in the context so
/// that counting one costs the same however many contexts there are.
/// Only the table changes it, under its lock (atomic so that a context
/// can be made and read without that lock).
#[derive(Debug, Default)]
pub struct RegionCount(AtomicU64);

impl RegionCount {
    /// No region.
    pub const fn new() -> RegionCount {
        RegionCount(AtomicU64::new(0))
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }

    /// One more; table lock held.
    pub fn add(&self) {
        self.0.store(self.get().saturating_add(1), Relaxed);
    }

    /// One less; table lock held.
    pub fn sub(&self) {
        self.0.store(self.get().saturating_sub(1), Relaxed);
    }
}

/// A region's way back to its context's account and region count, to
/// uncharge it when the region leaves the table (which a single-use lookup
/// by another context may do).
///
/// # Invariants
/// Both pointers are null, or point into the context that created the
/// region, which may be freed once the region has left the table.  A slot
/// that holds the region and is LIVE while the table lock is held implies
/// that context lives: the context's release takes, under the lock, every
/// one of its LIVE slots out before the context is freed, and every
/// change of a slot's state (a single-use consumer's too) is made under
/// the lock, so no slot leaves LIVE behind the release's back.  Only the
/// table dereferences them, for a region in a slot it has just seen LIVE,
/// before that hold of the lock ends.  A region outside the table (in a
/// copy's hands) must never follow them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccountRef {
    account: *const Account,
    regions: *const RegionCount,
}

// SAFETY: plain pointers to data that is immutable while it is used
// (Account is never changed after the context is made) or atomic
// (RegionCount).
unsafe impl Send for AccountRef {}
// SAFETY: as above.
unsafe impl Sync for AccountRef {}

impl AccountRef {
    /// No account: a region that never enters the table, or a host test's.
    pub const NONE: AccountRef = AccountRef {
        account: ptr::null(),
        regions: ptr::null(),
    };

    /// The account and region count of a context, for the regions it
    /// creates.
    pub fn of(account: &Account, regions: &RegionCount) -> AccountRef {
        AccountRef { account, regions }
    }

    /// The account.
    ///
    /// # Safety
    /// The table lock must be held, and the region holding this must sit in
    /// a slot that was LIVE within this hold of the lock (so its context
    /// lives, see the invariant).
    pub unsafe fn get(&self) -> Option<&Account> {
        // SAFETY: null or a live context's account (caller's contract).
        unsafe { self.account.as_ref() }
    }

    /// The context's region count.
    ///
    /// # Safety
    /// As for [`AccountRef::get`].
    pub unsafe fn regions(&self) -> Option<&RegionCount> {
        // SAFETY: null or a live context's count (caller's contract).
        unsafe { self.regions.as_ref() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_is_bounded() {
        let mut c = Counts::new();
        // Two uids of one namespace (key 7 at the top level for both).
        let a = Account::from_chain(&[100, 7]).unwrap();
        let b = Account::from_chain(&[101, 7]).unwrap();
        assert_eq!(a.charge(&mut c, 2), Ok(()));
        assert_eq!(b.charge(&mut c, 2), Ok(()));
        // The top level is full: refused, and b's own level is unchanged.
        assert!(b.charge(&mut c, 2).is_err());
        assert_eq!((c.get(100), c.get(101), c.get(7)), (1, 1, 2));
        a.uncharge(&mut c);
        assert_eq!(b.charge(&mut c, 2), Ok(()));
        assert_eq!((c.get(100), c.get(101), c.get(7)), (0, 2, 2));
        // b's own level is full too now.
        a.uncharge(&mut c);
        assert!(b.charge(&mut c, 2).is_err());
    }

    #[test]
    fn chains_out_of_range_are_refused() {
        assert_eq!(Account::from_chain(&[]), None);
        assert_eq!(Account::from_chain(&[1; MAX_LEVELS + 1]), None);
        let deep = Account::from_chain(&[3; MAX_LEVELS]).unwrap();
        assert_eq!(deep.keys().len(), MAX_LEVELS);
        assert_eq!(Account::of_uid(5).keys(), &[5]);
    }
}
