//! Live offload threads per account level (`state::account`: the opener's
//! user namespace levels, up to the account that owns them in the initial
//! namespace) and on the node: the policy that bounds how many kernel
//! threads one user's open files cost, and all users' together.  A context
//! asks for its thread at its first asynchronous submission and gives it
//! back at release; a refusal means the copy runs in the caller.

use crate::edge::shim::{Env, TableGuard};
use crate::state::account::Account;
use crate::state::counts::Counts;
use core::cell::UnsafeCell;

/// Offload threads per account level, and in all.
///
/// # Invariants
/// `live` is only touched with the table mutex held: thread starts and
/// stops are rare (once per file each), so they share it rather than add
/// a lock to the shim.  `total` is the number of threads counted.
pub struct Workers {
    live: UnsafeCell<Live>,
}

struct Live {
    levels: Counts,
    total: u64,
}

// SAFETY: the counts are only touched under the table mutex (invariant).
unsafe impl Sync for Workers {}

impl Default for Workers {
    fn default() -> Self {
        Self::new()
    }
}

impl Workers {
    /// No thread counted.
    pub const fn new() -> Workers {
        Workers {
            live: UnsafeCell::new(Live {
                levels: Counts::new(),
                total: 0,
            }),
        }
    }

    /// Runs `f` on the counts with the table mutex held.
    fn with<E: Env, R>(&self, env: &E, f: impl FnOnce(&mut Live) -> R) -> R {
        let _g = TableGuard::new(env);
        // SAFETY: the mutex is held, so this is the only access
        // (invariant); the borrow ends before the guard drops.
        f(unsafe { &mut *self.live.get() })
    }

    /// Counts a thread for `account` unless a level of it has `max`
    /// already, the node has `node_max`, or memory for a new key is short:
    /// false then, and nothing changed.
    pub fn take<E: Env>(&self, env: &E, account: &Account, max: u64, node_max: u64) -> bool {
        self.with(env, |l| {
            let seed = || crate::state::counts::seed(env);
            if l.total >= node_max || account.charge(&mut l.levels, 1, max, seed).is_err() {
                return false;
            }
            l.total += 1;
            true
        })
    }

    /// Gives back one thread of `account`.
    pub fn give<E: Env>(&self, env: &E, account: &Account) {
        self.with(env, |l| {
            account.uncharge(&mut l.levels, 1);
            l.total = l.total.saturating_sub(1);
        });
    }

    /// The live threads charged to key `key` (a uid in the initial
    /// namespace: `Account::of_uid`).
    pub fn of<E: Env>(&self, env: &E, key: u64) -> u64 {
        self.with(env, |l| l.levels.get(key))
    }

    /// The live threads on the node.
    pub fn total<E: Env>(&self, env: &E) -> u64 {
        self.with(env, |l| l.total)
    }

    /// Module unload (every context is gone, so every count is 0 already):
    /// frees the memory.
    pub fn exit<E: Env>(&self, env: &E) {
        self.with(env, |l| {
            l.levels.clear();
            l.total = 0;
        });
    }
}
