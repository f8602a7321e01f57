//! Pinned pages per account level: the pinning task's chain of keys
//! (`state::account`, the same levels as its regions and threads), each
//! level bounded by the task's RLIMIT_MEMLOCK.  The kernel's own charge
//! (the shim's: its user's `locked_vm`, per kernel uid) cannot see that two
//! uids belong to one account, so a user with a subordinate uid range could
//! pin the limit under each of them; here they share it at the account's
//! level, as the kernel's ucounts share RLIMIT_MEMLOCK for SHM_LOCK.  The
//! shim's charge stays too (it is shared with io_uring and the other users
//! of `locked_vm`), and so does `mm->pinned_vm`, so VmPin stays truthful.
//!
//! Exempt tasks (CAP_IPC_LOCK, asked only past the limit) are not charged;
//! with the `account_pinned=0` parameter nothing is refused but pages are
//! still counted.

use crate::edge::errno::{KResult, EDQUOT, ENOMEM};
use crate::edge::kalloc::KArray;
use crate::edge::shim::{Env, PinsGuard};
use crate::state::account::{self, Account, MAX_LEVELS};
use crate::state::counts::{seed, Counts};
use core::cell::UnsafeCell;
use core::ptr;

/// Pinned pages per account level.
///
/// # Invariants
/// `levels` is only touched with the pins mutex held (`Env::pins_lock`).
pub struct Pins {
    levels: UnsafeCell<Counts>,
}

// SAFETY: the counts are only touched under the pins mutex (invariant).
unsafe impl Sync for Pins {}

impl Default for Pins {
    fn default() -> Self {
        Self::new()
    }
}

/// What one pin charged, given back by [`PinCharge::release`] (which
/// needs the environment, for the lock).
///
/// # Invariants
/// `pins` is null (nothing charged) or points to the [`Pins`] that
/// `keys` were charged `pages` at, which outlives every region (it is the
/// device's).
pub struct PinCharge {
    pins: *const Pins,
    keys: KArray<u64>,
    pages: u64,
}

// SAFETY: the pointer is only used to reach the Pins, which is Sync.
unsafe impl Send for PinCharge {}
// SAFETY: as above; a shared PinCharge is never used to change anything.
unsafe impl Sync for PinCharge {}

impl PinCharge {
    /// Nothing charged.
    pub const NONE: PinCharge = PinCharge {
        pins: ptr::null(),
        keys: KArray::empty(),
        pages: 0,
    };

    /// Gives the pages back at every level.  Called once, by whoever
    /// unpins them.
    pub fn release<E: Env>(&self, env: &E) {
        // SAFETY: null or the device's Pins, which outlives the charge
        // (invariant).
        let Some(pins) = (unsafe { self.pins.as_ref() }) else {
            return;
        };
        pins.with(env, |c| account::uncharge_keys(&self.keys, c, self.pages));
    }
}

impl Pins {
    /// No page counted.
    pub const fn new() -> Pins {
        Pins {
            levels: UnsafeCell::new(Counts::new()),
        }
    }

    fn with<E: Env, R>(&self, env: &E, f: impl FnOnce(&mut Counts) -> R) -> R {
        let _g = PinsGuard::new(env);
        // SAFETY: the mutex is held, so this is the only access
        // (invariant); the borrow ends before the guard drops.
        f(unsafe { &mut *self.levels.get() })
    }

    /// Charges `pages` about to be pinned by the current task at every
    /// level of its account, within its RLIMIT_MEMLOCK at each: EDQUOT
    /// over it at some level (nothing charged) unless the task is exempt
    /// (then nothing is charged and the pin goes on), ENOMEM if memory is
    /// short.
    pub fn charge<E: Env>(&self, env: &E, pages: u64) -> KResult<PinCharge> {
        if pages == 0 {
            return Ok(PinCharge::NONE);
        }
        let mut chain = [0u64; MAX_LEVELS];
        let n = env.pin_account(&mut chain);
        let account = chain.get(..n).and_then(Account::from_chain).ok_or(ENOMEM)?;
        let keys = KArray::try_from_fn(account.keys().len(), |i| {
            account.keys().get(i).copied().unwrap_or(0)
        })?;
        let limit = env.memlock_limit();
        let r = self.with(env, |c| {
            let mut seed = || seed(env);
            match account::charge_keys(&keys, c, pages, limit, &mut seed) {
                Ok(()) => Ok(()),
                // Over the limit or short of memory: tell which (a key
                // that is new needs memory, an old one hit the limit).
                Err(e) => Err((e, most(&keys, c))),
            }
        });
        match r {
            Ok(()) => Ok(PinCharge {
                pins: self,
                keys,
                pages,
            }),
            Err((_, Some(pinned))) if pinned.saturating_add(pages) > limit => {
                if env.memlock_over(pages, limit, pinned) {
                    Ok(PinCharge::NONE)
                } else {
                    Err(EDQUOT)
                }
            }
            Err((e, _)) => Err(e),
        }
    }

    /// The pages counted at key `key` (tests and assertions).
    pub fn of<E: Env>(&self, env: &E, key: u64) -> u64 {
        self.with(env, |c| c.get(key))
    }

    /// Keys with pages counted.
    pub fn keys<E: Env>(&self, env: &E) -> usize {
        self.with(env, |c| c.len())
    }

    /// Module unload (every region is gone, so every count is 0 already):
    /// frees the memory.
    pub fn exit<E: Env>(&self, env: &E) {
        self.with(env, |c| c.clear());
    }
}

/// The most pages any level of `keys` holds.
fn most(keys: &[u64], c: &Counts) -> Option<u64> {
    keys.iter().map(|&k| c.get(k)).max()
}
