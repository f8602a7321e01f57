//! Issue 33, item 1: a single-use region consumed while its owner closes.
//!
//! The owner creates a SINGLEUSE region and hands the cookie over; the
//! reader starts an INLINE_COPY of it; the owner closes its fd while the
//! reader is inside the copy, between its lookup and its hold of the
//! region table mutex.  A consumer that marks the slot before it takes the
//! mutex lets the owner's release skip the region and free the owner's
//! context, which the consumer then writes to (a slab use-after-free that
//! KASAN reports).  Done right, the release, which took the mutex first,
//! removes the region and the copy finds it gone (EINVAL, nothing copied).
//!
//! A fault-injection build puts the reader exactly there: the module
//! makes the process `fault_table_lock_delay_pid` sleep
//! `fault_table_lock_delay_ms` before it takes the table mutex.  A release
//! build runs the same protocol without the delay, where either outcome
//! is right, then reports the deterministic part as skipped.

use crate::ensure;
use crate::stats::counters;
use crate::t_dma::{knem_param, wait_until, KnemParam};
use crate::util::*;
use knem::{Cookie, CopyFlags, Device, Errno, Iovec, Protection, RegionFlags, Status};
use std::time::Duration;

const SEED: u8 = 0x5e;
const LEN: usize = 2 * PAGE + 77;
/// The reader's first sleep before the table mutex; doubled when the
/// owner's close did not end inside it (a slow VM), at most `TRIES` times.
const DELAY_MS: u64 = 300;
const TRIES: u32 = 4;

/// CLOCK_MONOTONIC in ns: one clock for the owner and the reader.
fn mono_ns() -> u64 {
    let mut ts = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One round: the owner closes `close_after_ms` after the reader starts
/// its copy, the reader sleeping `delay_ms` (0: none) before the table
/// mutex.  Returns the copy's outcome (bytes verified when it succeeded)
/// and whether the owner's close had ended before the reader's sleep did.
fn round(delay_ms: u64) -> TestResult<(Result<Status, String>, bool)> {
    let reader = Device::open().ctx("open (reader)")?;
    let local = Mem::new(3)?;
    let mut owner = spawn_peer(|chan| {
        let dev = Device::open().ctx("open (owner)")?;
        let mem = Mem::new(3)?;
        mem.write(
            0,
            &(0..LEN as u64).map(|i| pat(SEED, i)).collect::<Vec<_>>(),
        );
        let k = region_at(
            &dev,
            &mem,
            0,
            LEN,
            Protection::READ,
            RegionFlags::SINGLE_USE,
        )?;
        chan.send(k.as_raw())?;
        let wait_ms = chan.recv()?;
        std::thread::sleep(Duration::from_millis(wait_ms));
        // The release runs before close() returns to us.
        drop(dev);
        chan.send(mono_ns())
    })?;
    let cookie = Cookie::from_raw(owner.recv()?);
    let _delay = (delay_ms > 0).then(|| {
        (
            KnemParam::set("fault_table_lock_delay_ms", delay_ms),
            KnemParam::set("fault_table_lock_delay_pid", std::process::id() as u64),
        )
    });
    owner.send(delay_ms / 4)?;
    let start = mono_ns();
    let iov = [Iovec::from_raw(local.addr(0), LEN as u64)];
    // SAFETY: our scratch mapping, only read back below.
    let r = unsafe { reader.read_into_async(cookie, 0, &iov, None, 0, CopyFlags::NONE) };
    drop(_delay);
    let closed_at = owner.recv()?;
    owner.finish()?;
    if let Ok(Status::Success) = r {
        check_bytes("the copied bytes", &local.read(0, LEN), |i| {
            pat(SEED, i as u64)
        })?;
    } else if r.is_err() {
        check_bytes("the untouched destination", &local.read(0, LEN), |_| 0)?;
    }
    let outcome = decode_outcome(encode_outcome(&r));
    Ok((outcome, closed_at < start + delay_ms * 1_000_000))
}

/// The owner of a single-use region closes while a reader of it is between
/// its lookup and the table mutex: the release wins, the copy gets EINVAL
/// and copies nothing, and the regions, pinned pages and contexts come
/// back to where they were.  (Under KASAN the old order is a
/// slab-use-after-free report in the copy.)
pub fn single_use_consumed_while_owner_closes() -> TestResult {
    let names = ["regions", "pinned_pages", "contexts"];
    let base = counters(&names)?;
    let settle = |what: &str| -> TestResult {
        ensure!(
            wait_until(10, || Ok(counters(&names)? == base))?,
            "{what}: regions, pinned pages and contexts {:?}, expected {base:?}",
            counters(&names)?
        );
        Ok(())
    };
    let (r, _) = round(0)?;
    ensure!(
        r == Ok(Status::Success) || r == Err(format!("{:?}", Errno::EINVAL)),
        "without a delay: {r:?}, expected SUCCESS or EINVAL"
    );
    settle("without a delay")?;
    if knem_param("fault_table_lock_delay_ms").is_none() {
        return Err(skip_fault(
            "no fault_table_lock_delay_ms to hold the reader before the table mutex",
        ));
    }
    let mut delay = DELAY_MS;
    for _ in 0..TRIES {
        let (r, release_first) = round(delay)?;
        settle(&format!("with a {delay} ms delay"))?;
        if !release_first {
            // The owner's close ended after the reader's sleep: the
            // interleaving was not reached, try a longer sleep.
            delay *= 2;
            continue;
        }
        ensure!(
            r == Err(format!("{:?}", Errno::EINVAL)),
            "the owner's close ended while the reader waited for the table mutex, \
             yet the copy of its single-use region gave {r:?}, expected EINVAL \
             (the copy consumed the region before taking the mutex)"
        );
        return Ok(());
    }
    Err(format!(
        "the owner's close never ended inside the reader's sleep before the table mutex (last {} ms)",
        delay / 2
    ))
}
