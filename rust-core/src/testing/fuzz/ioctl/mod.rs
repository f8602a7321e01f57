//! The ioctl decoder on the mock kernel, against a reference model.
//!
//! An input is a sequence of operations on three contexts (two of uid
//! 1000, one of uid 2000): an ioctl of each of the eleven commands, an
//! undefined command (random, or a defined one with a bit flipped), a
//! status-array mapping, a step of a context's offload thread, a read of
//! its notifications, a completion of the DMA engine, a file release (and
//! reopen), a change of a caller's real uid (setuid() after open), and
//! changes of the access policy, the DMA engine, the locked
//! memory limit and the shim's pin batch size.
//!
//! Every field of an argument is chosen from the input either among the
//! values that name something (a live cookie, the iovec array just
//! written, a valid flag combination, a status slot) or raw; argument
//! structs sit in writable memory, read-only memory, across the end of a
//! mapping or nowhere; iovecs point at the data pages, the read-only pages,
//! across a mapping's end, at each other, or anywhere.
//!
//! The model predicts, from the decoded argument and its own state, the
//! set of errnos each call may legitimately fail with (one per violated
//! rule, so the checks' order is not modelled) or that it must succeed,
//! and then checks what the call did:
//!
//! * the return value is in that set (an undefined command gives ENOTTY),
//!   and the per-errno counter moved by one;
//! * the region table: new cookies are non-zero and fresh, destroyed and
//!   consumed (single-use) regions are gone, access follows the owner /
//!   caller's uid now / ptrace / ANY_USER_ACCESS rules and the protection;
//!   flag bits outside a command's mask are dropped, never refused;
//! * user memory: after every call the data pages hold exactly what the
//!   model's byte-by-byte copy predicts (memmove's result for a region
//!   copied onto itself; a copy that faults part-way stops less than a
//!   page before the first bad byte), and nothing else changed; the
//!   read-only pages never change;
//! * status: `current_status`, the status slots (no slot is ever written
//!   but the one a request names), PENDING for asynchronous requests,
//!   completion in submission order on run, NOTIFY_FD indices in order;
//! * resources after every operation: live regions, pinned pages (core
//!   counter, mock pins and the mm's `pinned_vm` alike), owner records,
//!   RCU frees, byte counters, queued requests and notification credits;
//!   at the end, after releasing every context, all of it is zero.

mod args;
mod checks;
mod model;
mod ops;

use super::Input;
use crate::edge::errno::*;
use crate::edge::kalloc::{KBox, MAX_ALLOC};
use crate::edge::shim::PAGE_SIZE;
use crate::edge::uaccess::{bytes_of, Pod, MAX_IOVECS};
use crate::state::context::{Context, DMA_ASYNC_MAX};
use crate::state::device::Device;
use crate::state::stats::KnemCoreStats;
use crate::testing::mock::MockEnv;
use core::mem::offset_of;
use knem_abi::knem_cmd_param_iovec as Iov;
use knem_abi::*;
use std::boxed::Box;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::vec::Vec;

/// The commands, in the order of [`Summary::ok`].
pub const CMDS: [u32; 11] = cmd::NUMBERS;

/// What one input exercised (the corpus test checks the corpus reaches
/// every path that matters).
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Successful calls per command of [`CMDS`].
    pub ok: [u32; 11],
    /// Failed calls per command of [`CMDS`].
    pub failed: [u32; 11],
    /// Undefined commands.
    pub undefined: u32,
    /// Synchronous copies that reported FAILED (a fault part-way).
    pub copy_failed: u32,
    /// Copies whose every destination byte was predicted exactly.
    pub data_exact: u32,
    /// Requests run by the offload thread.
    pub thread_done: u32,
    /// Thread requests run in the caller: no thread to be had.
    pub fallback_done: u32,
    /// Requests completed by the DMA engine.
    pub dma_done: u32,
    /// NOTIFY_FD indices read back.
    pub notified: u32,
    /// Single-use regions consumed.
    pub consumed: u32,
    /// Contexts released (during the sequence, not at the end).
    pub released: u32,
    /// Requests dropped by a release before they ran.
    pub dropped: u32,
}

pub(super) const DATA_PAGES: u64 = 4;
pub(super) const DATA_LEN: u64 = DATA_PAGES * PAGE_SIZE;
pub(super) const RO_PAGES: u64 = 2;
pub(super) const RO_LEN: u64 = RO_PAGES * PAGE_SIZE;
/// Longest copy modelled byte by byte (longer ones: any destination value).
pub(super) const MAX_MODELLED: u64 = 1 << 21;
pub(super) const UIDS: [u32; 3] = [1000, 1000, 2000];
/// Largest page array (in pages) a call may make the core allocate: a
/// call over a list of more pages (up to the core's 1 GiB allocation
/// limit) is not made, being slow and never pinnable here anyway.
pub(super) const MAX_PAGE_ARRAY: u128 = 1 << 20;
/// Initial value of every status slot: not a status, so a stray write shows.
pub(super) const SLOT_SENTINEL: u8 = 0x55;
/// Initial value of every output field of an argument.
pub(super) const OUT_SENTINEL: u64 = 0x5a5a_5a5a_5a5a_5a5a;

use model::Harness;

/// Runs one input; panics on the first disagreement with the model.
/// Returns what the input exercised.
pub fn run(data: &[u8]) -> Summary {
    let mut harness = Harness::new();
    let mut inp = Input::new(data);
    while !inp.is_empty() {
        harness.step(&mut inp);
        harness.check_state();
    }
    while harness.complete_dma() {}
    for c in 0..3 {
        harness.release(c, false);
    }
    harness.check_state();
    let s = harness.dev.stats.snapshot();
    assert_eq!((s.contexts, s.regions, s.pinned_pages), (0, 0, 0));
    assert_eq!(harness.dev.env.pinned(), 0, "pages left pinned");
    assert_eq!(harness.dev.env.owners.load(SeqCst), 0, "owner records left");
    assert_eq!(
        harness.dev.env.rcu_freed.load(SeqCst) as u64,
        harness.created
    );
    harness.dev.exit();
    harness.sum
}
