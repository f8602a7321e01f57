//! Live offload threads per user (the real uid a context was opened
//! under, the owner uid of its regions): the policy that bounds how many
//! kernel threads one user's open files cost.  A context asks for its
//! thread at its first asynchronous submission and gives it back at
//! release; a refusal means the copy runs in the caller.

use crate::edge::shim::{Env, TableGuard};
use crate::state::counts::Counts;
use core::cell::UnsafeCell;

/// Offload threads per uid.
///
/// # Invariants
/// `live` is only touched with the table mutex held: thread starts and
/// stops are rare (once per file each), so they share it rather than add
/// a lock to the shim.
pub struct Workers {
    live: UnsafeCell<Counts>,
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
            live: UnsafeCell::new(Counts::new()),
        }
    }

    /// Runs `f` on the counts with the table mutex held.
    fn with<E: Env, R>(&self, env: &E, f: impl FnOnce(&mut Counts) -> R) -> R {
        let _g = TableGuard::new(env);
        // SAFETY: the mutex is held, so this is the only access
        // (invariant); the borrow ends before the guard drops.
        f(unsafe { &mut *self.live.get() })
    }

    /// Counts a thread for `uid` unless it has `max` already (or memory
    /// for a new user is short): false then, and nothing changed.
    pub fn take<E: Env>(&self, env: &E, uid: u32, max: u64) -> bool {
        self.with(env, |c| c.add(uid as u64, max).is_ok())
    }

    /// Gives back one thread of `uid`.
    pub fn give<E: Env>(&self, env: &E, uid: u32) {
        self.with(env, |c| c.sub(uid as u64));
    }

    /// The live threads of `uid`.
    pub fn of<E: Env>(&self, env: &E, uid: u32) -> u64 {
        self.with(env, |c| c.get(uid as u64))
    }

    /// Module unload (every context is gone, so every count is 0 already):
    /// frees the memory.
    pub fn exit<E: Env>(&self, env: &E) {
        self.with(env, |c| c.clear());
    }
}
