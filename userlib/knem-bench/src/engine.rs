//! The two-process transfer engine behind `pingpong` and `shm-chunk`.
//!
//! Both processes execute the same list of runs. A run is `2 × iters`
//! one-way messages alternating direction (A→B, B→A, …); process A times the
//! whole run, so one message costs `elapsed / (2 × iters)`: the copy plus
//! the one shared-memory hand-off a real protocol also needs.
//!
//! Hand-off: a sequence counter `seq` in shared memory. Pushing mechanisms
//! (the sender copies) wait for `seq == i`, copy, and publish `i + 1`;
//! pulling mechanisms (the receiver copies) do the same on the receiving
//! side. `shm` synchronises through its two chunk flags only.
//!
//! Off-cache runs rotate message `k` through slots of a pool larger than the
//! last-level cache, each slot shifted by one cache line past the previous
//! message (Data Transfer in a SMP System), so a slot is reused only after the whole pool.

use crate::cma;
use crate::error::Result;
use crate::knemdev::Device;
use crate::mech::Mech;
use crate::mem::{self, Mapping, PAGE};
use crate::proc::{self, Child, Peers};
use clap::ValueEnum;
use nix::unistd::{getpid, Pid};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Instant;

/// Whether buffers are reused (cache-hot) or rotated through a large pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum)]
pub enum Cache {
    /// Same buffers every message.
    Hot,
    /// Rotate through a pool larger than the LLC.
    Off,
}

impl Cache {
    /// `hot` / `off`.
    pub fn name(self) -> &'static str {
        match self {
            Cache::Hot => "hot",
            Cache::Off => "off",
        }
    }
}

impl std::fmt::Display for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One timed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Mechanism.
    pub mech: Mech,
    /// Bytes per message.
    pub size: usize,
    /// Chunk size for `shm` (ignored otherwise).
    pub chunk: usize,
    /// Round trips (the run moves `2 × iters` messages).
    pub iters: u64,
}

/// A cache line of its own for each flag.
#[repr(C, align(64))]
struct Line(AtomicU64);

/// The control block at the start of the shared mapping. All-zero bytes are
/// a valid initial state.
#[repr(C)]
struct Ctl {
    seq: Line,
    bar: [Line; 2],
    full: [Line; 2],
    base: [Line; 2],
    pid: [Line; 2],
    cookie: [Line; 2],
}

const CTL_BYTES: usize = std::mem::size_of::<Ctl>().div_ceil(PAGE) * PAGE;

/// Shared control block plus two chunk buffers.
struct Shared {
    map: Mapping,
    chunk_max: usize,
}

impl Shared {
    fn new(chunk_max: usize) -> Result<Shared> {
        Ok(Shared {
            map: Mapping::shared(CTL_BYTES + 2 * chunk_max)?,
            chunk_max,
        })
    }

    fn ctl(&self) -> &Ctl {
        // SAFETY: the mapping is at least CTL_BYTES long, page-aligned, zero
        // initialised (a valid Ctl) and only ever accessed through atomics.
        unsafe { &*(self.map.ptr() as *const Ctl) }
    }

    fn chunk(&self, b: usize) -> *mut u8 {
        // SAFETY: b < 2 and the mapping holds two chunk_max buffers after
        // the control block.
        unsafe { self.map.ptr().add(CTL_BYTES + (b & 1) * self.chunk_max) }
    }
}

/// Offset of message slot `k` for `len`-byte messages in a `pool`-byte pool.
pub fn slot(k: u64, len: usize, pool: usize) -> usize {
    let stride = len.div_ceil(PAGE) * PAGE + 64;
    let n = ((pool.saturating_sub(len)) / stride).max(1) as u64;
    (k % n) as usize * stride
}

/// Pool size a run list needs: `off_pool` for off-cache (at least four
/// slots of the largest message), two messages for cache-hot.
pub fn pool_len(cache: Cache, runs: &[Run], off_pool: usize) -> usize {
    let max = runs.iter().map(|r| r.size).max().unwrap_or(PAGE);
    let slot = max.div_ceil(PAGE) * PAGE + PAGE;
    match cache {
        Cache::Hot => 2 * slot,
        Cache::Off => off_pool.max(4 * slot),
    }
}

/// One process's side of the engine.
struct Side<'a> {
    me: usize,
    sh: &'a Shared,
    pool: Mapping,
    dev: Option<Device>,
    cookie: u64,
    peer_pid: Pid,
    peer_base: usize,
    peer_cookie: u64,
    peers: Peers<'a>,
    gen: u64,
    solo: bool,
}

impl<'a> Side<'a> {
    fn setup(
        me: usize,
        sh: &'a Shared,
        pool_len: usize,
        knem: bool,
        peers: Peers<'a>,
        solo: bool,
    ) -> Result<Side<'a>> {
        let mut pool = Mapping::private(pool_len)?;
        pool.fill(me as u8 + 1);
        let ctl = sh.ctl();
        ctl.base[me].0.store(pool.ptr() as u64, SeqCst);
        ctl.pid[me].0.store(getpid().as_raw() as u64, SeqCst);
        let (dev, cookie) = if knem {
            let d = Device::open()?;
            // SAFETY: the pool lives in this Side, which destroys the
            // region (or drops the device) before the pool.
            let c = unsafe { d.create_region(pool.ptr(), pool.len())? };
            ctl.cookie[me].0.store(c, SeqCst);
            (Some(d), c)
        } else {
            (None, 0)
        };
        let mut s = Side {
            me,
            sh,
            pool,
            dev,
            cookie,
            peer_pid: Pid::from_raw(0),
            peer_base: 0,
            peer_cookie: 0,
            peers,
            gen: 0,
            solo,
        };
        s.barrier()?;
        let o = 1 - me;
        s.peer_pid = Pid::from_raw(ctl.pid[o].0.load(SeqCst) as i32);
        s.peer_base = ctl.base[o].0.load(SeqCst) as usize;
        s.peer_cookie = ctl.cookie[o].0.load(SeqCst);
        Ok(s)
    }

    fn barrier(&mut self) -> Result<()> {
        if self.solo {
            return Ok(());
        }
        self.gen += 1;
        let ctl = self.sh.ctl();
        let g = self.gen;
        ctl.bar[self.me].0.store(g, SeqCst);
        self.peers
            .wait_until(|| ctl.bar[1 - self.me].0.load(SeqCst) >= g)
    }

    fn local(&self, off: usize) -> *mut u8 {
        debug_assert!(off <= self.pool.len());
        // SAFETY: callers keep off + len within the pool (see `slot`).
        unsafe { self.pool.ptr().add(off) }
    }

    fn dev(&self) -> &Device {
        self.dev
            .as_ref()
            .expect("knem mechanisms run only with a device")
    }

    fn wait_seq(&self, at_least: u64) -> Result<()> {
        let seq = &self.sh.ctl().seq.0;
        self.peers.wait_until(|| seq.load(Acquire) >= at_least)
    }

    fn publish(&self, v: u64) {
        self.sh.ctl().seq.0.store(v, Release);
    }

    /// The copy a pushing mechanism does as sender.
    fn push(&self, mech: Mech, off: usize, len: usize) -> Result<()> {
        match mech {
            // SAFETY: local(off) is readable for len bytes of our pool.
            Mech::CmaWrite => unsafe {
                cma::write(self.peer_pid, self.local(off), self.peer_base + off, len)
            },
            // SAFETY: as above.
            Mech::KnemWrite => unsafe {
                self.dev()
                    .inline_copy(self.local(off), len, true, self.peer_cookie, off)
            },
            _ => unreachable!("{mech} does not push"),
        }
    }

    /// The copy a pulling mechanism does as receiver.
    fn pull(&self, mech: Mech, off: usize, len: usize) -> Result<()> {
        match mech {
            // SAFETY: local(off) is writable for len bytes of our pool.
            Mech::CmaRead => unsafe {
                cma::read(self.peer_pid, self.local(off), self.peer_base + off, len)
            },
            // SAFETY: as above.
            Mech::KnemRead => unsafe {
                self.dev()
                    .inline_copy(self.local(off), len, false, self.peer_cookie, off)
            },
            Mech::KnemCopy => self
                .dev()
                .copy(self.peer_cookie, off, self.cookie, off, len),
            Mech::KnemAsync => self
                .dev()
                .copy_async(self.peer_cookie, off, self.cookie, off, len),
            Mech::KnemDma => self
                .dev()
                .copy_dma(self.peer_cookie, off, self.cookie, off, len),
            _ => unreachable!("{mech} does not pull"),
        }
    }

    fn shm_send(&self, i: u64, off: usize, len: usize, chunk: usize) -> Result<()> {
        let ctl = self.sh.ctl();
        let (mut done, mut k) = (0, 0);
        while done < len {
            let c = chunk.min(len - done);
            let flag = &ctl.full[k & 1].0;
            self.peers.wait_until(|| flag.load(Acquire) == 0)?;
            // SAFETY: the chunk buffer holds chunk_max >= chunk bytes and the
            // receiver does not touch it until the flag says full; the pool
            // range is ours.
            unsafe { mem::copy(self.sh.chunk(k), self.local(off + done), c) };
            flag.store(i + 1, Release);
            done += c;
            k += 1;
        }
        Ok(())
    }

    fn shm_recv(&self, i: u64, off: usize, len: usize, chunk: usize) -> Result<()> {
        let ctl = self.sh.ctl();
        let (mut done, mut k) = (0, 0);
        while done < len {
            let c = chunk.min(len - done);
            let flag = &ctl.full[k & 1].0;
            // the flag names the message, so a sender never mistakes its
            // own full chunk for the peer's reply
            self.peers.wait_until(|| flag.load(Acquire) == i + 1)?;
            // SAFETY: the flag says the sender filled this chunk and will not
            // touch it until we clear the flag; the pool range is ours.
            unsafe { mem::copy(self.local(off + done), self.sh.chunk(k), c) };
            flag.store(0, Release);
            done += c;
            k += 1;
        }
        Ok(())
    }

    fn send(&self, r: &Run, i: u64, off: usize) -> Result<()> {
        match r.mech {
            Mech::Shm => self.shm_send(i, off, r.size, r.chunk),
            m if m.pulls() => Ok(()),
            m => {
                self.wait_seq(i)?;
                self.push(m, off, r.size)?;
                self.publish(i + 1);
                Ok(())
            }
        }
    }

    fn recv(&self, r: &Run, i: u64, off: usize) -> Result<()> {
        match r.mech {
            Mech::Shm => self.shm_recv(i, off, r.size, r.chunk),
            m if m.pulls() => {
                self.wait_seq(i)?;
                self.pull(m, off, r.size)?;
                self.publish(i + 1);
                Ok(())
            }
            _ => self.wait_seq(i + 1),
        }
    }

    fn memcpy_run(&self, r: &Run, cache: Cache, g: u64) {
        let pl = self.pool.len();
        for i in 0..2 * r.iters {
            let (s, d) = match cache {
                Cache::Hot => (0, pl / 2),
                Cache::Off => (
                    slot(2 * (g + i), r.size, pl),
                    slot(2 * (g + i) + 1, r.size, pl),
                ),
            };
            // SAFETY: both slots lie inside the pool and do not overlap
            // (distinct slots of one stride, or the two halves).
            unsafe { mem::copy(self.local(d), self.local(s), r.size) };
        }
    }

    /// Execute every run; process A returns ns per message for each.
    fn execute(&mut self, cache: Cache, runs: &[Run], tick: &mut dyn FnMut()) -> Result<Vec<f64>> {
        let mut out = Vec::with_capacity(runs.len());
        let mut g: u64 = 0;
        let pl = self.pool.len();
        for r in runs {
            if self.me == 0 {
                self.publish(0);
            }
            self.barrier()?;
            let t0 = Instant::now();
            if r.mech == Mech::Memcpy {
                if self.me == 0 {
                    self.memcpy_run(r, cache, g);
                }
            } else {
                for i in 0..2 * r.iters {
                    let off = match cache {
                        Cache::Hot => 0,
                        Cache::Off => slot(g + i, r.size, pl),
                    };
                    if (i % 2 == 0) == (self.me == 0) {
                        self.send(r, i, off)?;
                    } else {
                        self.recv(r, i, off)?;
                    }
                }
            }
            let ns = t0.elapsed().as_nanos() as f64 / (2 * r.iters) as f64;
            g += 2 * r.iters;
            out.push(ns);
            if self.me == 0 {
                tick();
            }
        }
        self.barrier()?;
        if let (Some(d), true) = (&self.dev, self.cookie != 0) {
            d.destroy_region(self.cookie)?;
        }
        Ok(out)
    }
}

/// Run `runs` (in order) between this process and one forked peer and
/// return the median-ready samples: ns per one-way message, one per run.
pub fn execute(
    cache: Cache,
    off_pool: usize,
    runs: &[Run],
    tick: &mut dyn FnMut(),
) -> Result<Vec<f64>> {
    let pool = pool_len(cache, runs, off_pool);
    let chunk_max = runs
        .iter()
        .filter(|r| r.mech == Mech::Shm)
        .map(|r| r.chunk)
        .max()
        .unwrap_or(PAGE);
    let knem = runs.iter().any(|r| r.mech.is_knem());
    let solo = runs.iter().all(|r| r.mech == Mech::Memcpy);
    let sh = Shared::new(chunk_max)?;
    if solo {
        let mut a = Side::setup(0, &sh, pool, false, Peers::None, true)?;
        return a.execute(cache, runs, tick);
    }
    cma::allow_peers();
    let child = proc::spawn(|| {
        let mut b = Side::setup(1, &sh, pool, knem, Peers::parent(), false)?;
        b.execute(cache, runs, &mut || {}).map(|_| ())
    })?;
    let children: Vec<Child> = vec![child];
    let result = {
        let mut a = Side::setup(0, &sh, pool, knem, Peers::Children(&children), false)?;
        a.execute(cache, runs, tick)?
    };
    for c in children {
        c.wait()?;
    }
    Ok(result)
}

/// Move one `len`-byte message A→B with `mech` and return what B received
/// (for tests: checks the data path byte for byte).
#[cfg(test)]
pub fn transfer_once(mech: Mech, len: usize, chunk: usize) -> Result<(Vec<u8>, Vec<u8>)> {
    // The child copies what it received into shared memory for the parent.
    let out = Mapping::shared(len)?;
    let sh = Shared::new(chunk)?;
    let knem = mech.is_knem();
    let r = Run {
        mech,
        size: len,
        chunk,
        iters: 1,
    };
    cma::allow_peers();
    let outp = out.ptr() as usize;
    let child = proc::spawn(|| {
        let mut b = Side::setup(1, &sh, 2 * len + 2 * PAGE, knem, Peers::parent(), false)?;
        // clear the landing zone so stale bytes cannot pass the check
        // SAFETY: the pool is ours and at least len bytes long.
        unsafe { std::ptr::write_bytes(b.local(0), 0, len) };
        b.barrier()?;
        b.recv(&r, 0, 0)?;
        // SAFETY: `out` is a shared mapping of len bytes.
        unsafe { mem::copy(outp as *mut u8, b.local(0), len) };
        b.barrier()
    })?;
    let children = vec![child];
    let mut a = Side::setup(
        0,
        &sh,
        2 * len + 2 * PAGE,
        knem,
        Peers::Children(&children),
        false,
    )?;
    a.publish(0);
    a.barrier()?;
    a.send(&r, 0, 0)?;
    a.barrier()?;
    let sent = a.pool.bytes()[..len].to_vec();
    drop(a);
    for c in children {
        c.wait()?;
    }
    Ok((sent, out.bytes()[..len].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Forking tests run one at a time: each pair of processes wants both
    /// cores, and forking while another test thread is mid-fork is asking
    /// for trouble.
    static FORK: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        FORK.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[test]
    fn slots_stay_inside_the_pool_and_rotate() {
        let pool = 1 << 20;
        for len in [1usize, 1000, 4096, 65536, 200_000] {
            let mut seen = std::collections::HashSet::new();
            for k in 0..1000 {
                let o = slot(k, len, pool);
                assert!(o + len <= pool, "len {len} k {k}");
                assert_eq!(o % 64, 0);
                seen.insert(o);
            }
            assert!(seen.len() >= 2 || len * 2 > pool);
        }
        // consecutive slots never overlap
        let a = slot(0, 5000, pool);
        let b = slot(1, 5000, pool);
        assert!(b >= a + 5000);
    }

    #[test]
    fn shm_double_copy_is_byte_exact() {
        let _g = serial();
        // odd sizes so that the last chunk is partial
        for (len, chunk) in [
            (1usize, 4096usize),
            (100_003, 4096),
            (1 << 20, 65536),
            (70_000, 70_000),
        ] {
            let (sent, got) = transfer_once(Mech::Shm, len, chunk).unwrap();
            assert_eq!(sent.len(), len);
            assert!(sent.iter().any(|&b| b != 0));
            assert!(sent == got, "shm mismatch at len {len} chunk {chunk}");
        }
    }

    #[test]
    fn cma_read_and_write_are_byte_exact() {
        let _g = serial();
        if let Some(why) = cma::unavailable_reason() {
            eprintln!("skipping CMA test: {why}");
            return;
        }
        for mech in [Mech::CmaRead, Mech::CmaWrite] {
            for len in [1usize, 4095, 1 << 20] {
                let (sent, got) = transfer_once(mech, len, PAGE).unwrap();
                assert!(sent == got, "{mech} mismatch at len {len}");
            }
        }
    }

    #[test]
    fn knem_transfers_are_byte_exact_when_the_module_is_there() {
        let _g = serial();
        if let Some(why) = crate::knemdev::unavailable_reason() {
            eprintln!("skipping knem test: {why}");
            return;
        }
        for mech in [Mech::KnemRead, Mech::KnemWrite, Mech::KnemCopy] {
            let (sent, got) = transfer_once(mech, 300_001, PAGE).unwrap();
            assert!(sent == got, "{mech} mismatch");
        }
    }

    #[test]
    fn a_short_pingpong_runs() {
        let _g = serial();
        let runs: Vec<Run> = [Mech::Memcpy, Mech::Shm]
            .iter()
            .map(|&mech| Run {
                mech,
                size: 8192,
                chunk: 4096,
                iters: 3,
            })
            .collect();
        let mut ticks = 0;
        let ns = execute(Cache::Off, 1 << 20, &runs, &mut || ticks += 1).unwrap();
        assert_eq!(ns.len(), 2);
        assert_eq!(ticks, 2);
        assert!(ns.iter().all(|&x| x > 0.0));
    }
}
