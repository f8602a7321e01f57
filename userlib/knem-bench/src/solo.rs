//! `solo`: one process copies between its own buffers through each
//! mechanism, so the kernel's copy path is measured without any hand-off
//! between processes: knem inline copies from and to a region the process
//! declared over its own pool (and region-to-region within it), CMA with
//! its own pid, and memcpy. On any machine, User-Mode Linux with one CPU
//! included, where a hand-off between two processes waits for a tick.
//!
//! Each copy moves `size` bytes from a source slot to a destination slot
//! of one pool: the same two slots every copy (cache-hot), or slots
//! rotated through a pool larger than the last-level cache (off-cache), as
//! pingpong's memcpy does. Before it is timed, every (mechanism, size) is
//! checked once byte for byte.

use crate::cma;
use crate::engine::{pool_len, slot, Cache, Run};
use crate::err;
use crate::error::Result;
use crate::knemdev::Device;
use crate::mech::Mech;
use crate::mem::{self, Mapping};
use crate::pingpong::{in_table_order, record, Settings};
use crate::report::Record;
use nix::unistd::getpid;
use std::collections::BTreeMap;
use std::time::Instant;

/// The mechanisms a single process can use on its own buffers, in table
/// order.
pub const MECHS: [Mech; 6] = [
    Mech::Memcpy,
    Mech::CmaRead,
    Mech::CmaWrite,
    Mech::KnemRead,
    Mech::KnemWrite,
    Mech::KnemCopy,
];

/// One process's pool, and its region over the whole pool when a knem
/// mechanism runs.
struct Solo {
    pool: Mapping,
    dev: Option<(Device, u64)>,
}

impl Solo {
    fn new(len: usize, knem: bool) -> Result<Solo> {
        let mut pool = Mapping::private(len)?;
        pool.fill(1);
        let dev = if knem {
            let d = Device::open()?;
            // SAFETY: the pool outlives the region: `drop` destroys the
            // region (through the device) before the pool is unmapped.
            let c = unsafe { d.create_region(pool.ptr(), pool.len())? };
            Some((d, c))
        } else {
            None
        };
        Ok(Solo { pool, dev })
    }

    fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off <= self.pool.len());
        // SAFETY: callers keep off + len within the pool (see `slot`).
        unsafe { self.pool.ptr().add(off) }
    }

    fn knem(&self) -> Result<(&Device, u64)> {
        self.dev
            .as_ref()
            .map(|(d, c)| (d, *c))
            .ok_or_else(|| err!("no knem region: the run has no knem mechanism"))
    }

    /// Copy `len` bytes from offset `s` to offset `d` of the pool with
    /// `mech`. The two ranges must not overlap.
    fn copy(&self, mech: Mech, s: usize, d: usize, len: usize) -> Result<()> {
        let base = self.pool.ptr() as usize;
        match mech {
            // SAFETY: both ranges lie in the pool and do not overlap.
            Mech::Memcpy => unsafe { mem::copy(self.at(d), self.at(s), len) },
            // SAFETY: the destination range is ours and writable; the
            // source is read by the kernel from our own address space.
            Mech::CmaRead => unsafe { cma::read(getpid(), self.at(d), base + s, len)? },
            // SAFETY: the source range is ours and readable.
            Mech::CmaWrite => unsafe { cma::write(getpid(), self.at(s), base + d, len)? },
            Mech::KnemRead => {
                let (dev, c) = self.knem()?;
                // SAFETY: the destination range is ours, writable, and not
                // borrowed; the region covers the source range.
                unsafe { dev.inline_copy(self.at(d), len, false, c, s)? }
            }
            Mech::KnemWrite => {
                let (dev, c) = self.knem()?;
                // SAFETY: the source range is ours and readable; the region
                // covers the destination range.
                unsafe { dev.inline_copy(self.at(s), len, true, c, d)? }
            }
            Mech::KnemCopy => {
                let (dev, c) = self.knem()?;
                dev.copy(c, s, c, d, len)?
            }
            m => return Err(err!("{m} needs two processes (pingpong)")),
        }
        Ok(())
    }

    /// One copy of a known pattern, checked byte for byte.
    fn check(&mut self, mech: Mech, s: usize, d: usize, len: usize) -> Result<()> {
        let seed = (len % 251) as u8 ^ mech as u8;
        mem::fill_pattern(&mut self.pool.bytes_mut()[s..s + len], seed);
        self.pool.bytes_mut()[d..d + len].fill(0);
        self.copy(mech, s, d, len)?;
        let b = self.pool.bytes();
        if b[s..s + len] != b[d..d + len] {
            return Err(err!("solo {mech}: {len} bytes copied wrong"));
        }
        Ok(())
    }

    /// ns per copy for `r`, over `r.iters` copies; `g` counts the copies
    /// made so far (off-cache slots rotate through the pool).
    fn time(&self, r: &Run, cache: Cache, g: &mut u64) -> Result<f64> {
        let pl = self.pool.len();
        let t0 = Instant::now();
        for i in 0..r.iters {
            let (s, d) = match cache {
                Cache::Hot => (0, pl / 2),
                Cache::Off => (
                    slot(2 * (*g + i), r.size, pl),
                    slot(2 * (*g + i) + 1, r.size, pl),
                ),
            };
            self.copy(r.mech, s, d, r.size)?;
        }
        *g += r.iters;
        Ok(t0.elapsed().as_nanos() as f64 / r.iters as f64)
    }
}

impl Drop for Solo {
    fn drop(&mut self) {
        if let Some((d, c)) = &self.dev {
            // Dropping the device would destroy it too; this says so early.
            let _ = d.destroy_region(*c);
        }
    }
}

/// Run the sweep: every mechanism of `mechs` at every size, in each cache
/// mode of `st`; `st.iters(size)` copies per timed repetition, twice the
/// round trips pingpong makes (one copy per pingpong message).
pub fn solo(st: &Settings, mechs: &[Mech]) -> Result<Vec<Record>> {
    if let Some(m) = mechs.iter().find(|m| !MECHS.contains(m)) {
        return Err(err!("solo: {m} needs two processes (pingpong)"));
    }
    let iters = |size: u64| 2 * st.iters(size);
    let run = |mech: Mech, size: u64| Run {
        mech,
        size: size as usize,
        chunk: 0,
        iters: iters(size),
    };
    let mut all: Vec<Run> = Vec::new();
    for &size in &st.sizes {
        all.extend(mechs.iter().map(|&m| run(m, size)));
    }
    let knem = mechs.iter().any(|m| m.is_knem());
    let mut samples: BTreeMap<(Cache, Mech, u64), Vec<f64>> = BTreeMap::new();
    let pb = crate::progress::bar(
        (all.len() * st.reps as usize * st.caches.len()) as u64,
        "solo",
    );
    for &cache in &st.caches {
        pb.set_message(cache.name());
        let mut p = Solo::new(pool_len(cache, &all, st.pool), knem)?;
        let pl = p.pool.len();
        // checked once, then one untimed pass per run (page tables,
        // caches, the kernel paths of every mechanism), then timed
        for r in &all {
            let (s, d) = match cache {
                Cache::Hot => (0, pl / 2),
                Cache::Off => (slot(0, r.size, pl), slot(1, r.size, pl)),
            };
            p.check(r.mech, s, d, r.size)?;
        }
        let mut g = 0;
        for r in &all {
            let warm = Run {
                iters: r.iters.min(20),
                ..*r
            };
            p.time(&warm, cache, &mut g)?;
        }
        for _ in 0..st.reps {
            for r in &all {
                let ns = p.time(r, cache, &mut g)?;
                samples
                    .entry((cache, r.mech, r.size as u64))
                    .or_default()
                    .push(ns);
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let mut recs: Vec<Record> = samples
        .iter()
        .map(|(&(cache, mech, size), v)| record("solo", cache, mech, size, 0, iters(size), v))
        .collect();
    in_table_order(&mut recs, mechs);
    Ok(recs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(caches: Vec<Cache>) -> Settings {
        Settings {
            sizes: vec![4096, 100_003],
            reps: 2,
            target: 1 << 20,
            max_iters: 5,
            pool: 1 << 20,
            caches,
        }
    }

    #[test]
    fn memcpy_and_cma_solo_copies_are_checked_and_timed() {
        let mut mechs = vec![Mech::Memcpy];
        // CMA with one's own pid needs no ptrace permission beyond oneself
        if cma::unavailable_reason().is_none() {
            mechs.extend([Mech::CmaRead, Mech::CmaWrite]);
        }
        let recs = solo(&settings(vec![Cache::Hot, Cache::Off]), &mechs).unwrap();
        assert_eq!(recs.len(), 2 * 2 * mechs.len());
        for r in &recs {
            assert_eq!(r.bench, "solo");
            assert_eq!(r.reps, 2);
            assert!(r.median_us > 0.0 && r.mib_s > 0.0, "{r:?}");
            if r.mechanism != "memcpy" {
                assert!(r.vs_memcpy.is_some(), "{r:?}");
            }
        }
    }

    #[test]
    fn knem_solo_copies_when_the_module_is_there() {
        if let Some(why) = crate::knemdev::unavailable_reason() {
            eprintln!("skipping knem solo test: {why}");
            return;
        }
        let mechs = [Mech::KnemRead, Mech::KnemWrite, Mech::KnemCopy];
        let recs = solo(&settings(vec![Cache::Off]), &mechs).unwrap();
        assert_eq!(recs.len(), 2 * 3);
    }

    #[test]
    fn two_process_mechanisms_are_refused() {
        let e = solo(&settings(vec![Cache::Hot]), &[Mech::Shm]).unwrap_err();
        assert!(e.0.contains("needs two processes"), "{}", e.0);
        let mut p = Solo::new(8192, false).unwrap();
        assert!(p.check(Mech::KnemRead, 0, 4096, 100).is_err());
    }
}
