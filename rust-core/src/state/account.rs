//! Who a context's regions and offload thread, and a task's pinned pages,
//! are charged to: one key per user-namespace level, from the opener's
//! own (namespace, uid) up to the initial namespace, where the key is the
//! account that created the namespaces above it.  The bounds hold at every
//! level, as the kernel's ucounts do for RLIMIT_NPROC and inotify watches:
//! an account that maps 65536 subordinate uids into a namespace of its own
//! and switches among them is still one key at the top level, so together
//! they stay within one user's bound.
//!
//! The limit at a level comes from that level, as in ucounts, where a
//! namespace records the limit of the task that created it (its
//! `rlimit_max`) and the one of global root is no limit: the uids of a
//! namespace that global root created do not share root's budget, nor each
//! other's namespaces'.  Here such a namespace is a tenant of its own: the
//! top key of its chain is the namespace as a whole ([`whole_namespace`])
//! instead of (initial namespace, uid 0), so sibling containers of rootful
//! runtimes each get one budget, which all their uids and the namespaces
//! they nest share.  The node's caps still bound the sum.

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

    /// The account with levels `chain` (its own first, each key a
    /// namespace's inode number << 32 | a uid as the initial namespace sees
    /// it, the last in the initial namespace), or None when the chain is
    /// empty or deeper than the kernel nests namespaces.  A top level of
    /// uid 0 above a namespace (global root created it) becomes that
    /// namespace as a whole (see the top).
    pub fn from_chain(chain: &[u64]) -> Option<Account> {
        if chain.is_empty() || chain.len() > MAX_LEVELS {
            return None;
        }
        let mut keys = [0; MAX_LEVELS];
        keys.get_mut(..chain.len())?.copy_from_slice(chain);
        if let [.., below, top] = chain {
            if top & UID_MASK == 0 {
                *keys.get_mut(chain.len() - 1)? = whole_namespace(*below);
            }
        }
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

    /// Counts `n` more at every level unless that takes a level over
    /// `max` (or memory for a new key is short): ENOMEM then, and nothing
    /// changed.  `seed` gives random values for the counts' arrays.
    pub fn charge(
        &self,
        counts: &mut Counts,
        n: u64,
        max: u64,
        mut seed: impl FnMut() -> u64,
    ) -> KResult<()> {
        charge_keys(self.keys(), counts, n, max, &mut seed)
    }

    /// Gives `n` back at every level.
    pub fn uncharge(&self, counts: &mut Counts, n: u64) {
        uncharge_keys(self.keys(), counts, n);
    }
}

/// Bits of a key that hold the uid.
const UID_MASK: u64 = 0xffff_ffff;

/// The key of a whole namespace, from the key of one of its levels: its
/// inode number with uid `u32::MAX`, which no task has (the kernel maps no
/// uid to it), so it is never a (namespace, uid) level.
pub const fn whole_namespace(level: u64) -> u64 {
    level | UID_MASK
}

/// [`Account::charge`] of a chain of keys.
pub fn charge_keys(
    keys: &[u64],
    counts: &mut Counts,
    n: u64,
    max: u64,
    seed: &mut impl FnMut() -> u64,
) -> KResult<()> {
    for (i, &key) in keys.iter().enumerate() {
        if let Err(e) = counts.add(key, n, max, &mut *seed) {
            uncharge_keys(keys.get(..i).unwrap_or(&[]), counts, n);
            return Err(e);
        }
    }
    Ok(())
}

/// [`Account::uncharge`] of a chain of keys.
pub fn uncharge_keys(keys: &[u64], counts: &mut Counts, n: u64) {
    for &key in keys {
        counts.sub(key, n);
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

    fn seed() -> u64 {
        0x9e37_79b9_7f4a_7c15
    }

    #[test]
    fn every_level_is_bounded() {
        let mut c = Counts::new();
        // Two uids of one namespace (key 7 at the top level for both).
        let a = Account::from_chain(&[100, 7]).unwrap();
        let b = Account::from_chain(&[101, 7]).unwrap();
        assert_eq!(a.charge(&mut c, 1, 2, seed), Ok(()));
        assert_eq!(b.charge(&mut c, 1, 2, seed), Ok(()));
        // The top level is full: refused, and b's own level is unchanged.
        assert!(b.charge(&mut c, 1, 2, seed).is_err());
        assert_eq!((c.get(100), c.get(101), c.get(7)), (1, 1, 2));
        a.uncharge(&mut c, 1);
        assert_eq!(b.charge(&mut c, 1, 2, seed), Ok(()));
        assert_eq!((c.get(100), c.get(101), c.get(7)), (0, 2, 2));
        // b's own level is full too now.
        a.uncharge(&mut c, 1);
        assert!(b.charge(&mut c, 1, 2, seed).is_err());
    }

    /// Namespaces that global root created (top key: initial namespace,
    /// uid 0) are budgets of their own, apart from root's; one that uid
    /// 1000 created shares uid 1000's.
    #[test]
    fn root_created_namespaces_are_budgets_of_their_own() {
        const INIT: u64 = 0xEFFF_FFFD << 32;
        let (ns_a, ns_b) = (0x1000u64 << 32, 0x1001u64 << 32);
        let mut c = Counts::new();
        let a = Account::from_chain(&[ns_a | 7, INIT]).unwrap();
        let b = Account::from_chain(&[ns_b | 7, INIT]).unwrap();
        let root = Account::from_chain(&[INIT]).unwrap();
        assert_eq!(a.keys(), &[ns_a | 7, whole_namespace(ns_a)]);
        assert_eq!(a.charge(&mut c, 2, 2, seed), Ok(()));
        assert!(a.charge(&mut c, 1, 2, seed).is_err(), "A's budget");
        assert_eq!(b.charge(&mut c, 2, 2, seed), Ok(()), "B refused");
        assert_eq!(root.charge(&mut c, 2, 2, seed), Ok(()), "root refused");
        let user = Account::from_chain(&[ns_a | 7, INIT | 1000]).unwrap();
        assert_eq!(user.keys(), &[ns_a | 7, INIT | 1000]);
        // Nested in A: A's budget is above it.
        let nested = Account::from_chain(&[0x2000 << 32 | 9, ns_a | 100_000, INIT]).unwrap();
        assert_eq!(nested.keys()[2], whole_namespace(ns_a));
        assert!(nested.charge(&mut c, 1, 2, seed).is_err());
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
