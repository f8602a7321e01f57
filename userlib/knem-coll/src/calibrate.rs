//! Measure the model's parameters with the transport in use: α, l and γ_c
//! as Contention-Aware Kernel-Assisted MPI Collectives Table III does (rank 0 exposes a buffer, the others read it
//! alone and concurrently), β on a copy big enough to leave the caches,
//! how steps of m concurrent big copies scale (memory bandwidth shared
//! by the copies, CPUs shared by the ranks), contention over block sizes
//! and copy counts in the three shapes collectives use (readers of the
//! same bytes, readers and writers of their own blocks of one buffer), and
//! the latency of a progress signal.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Contention, Params};
use crate::team::Team;
use knem_transport::{cma_pin_only, cma_touch_pages, Descriptor, Kind, Transport};
use std::time::Instant;

/// Pages per probe of the per-page costs (1 MiB with 4 KiB pages).
const PAGES: usize = 256;
/// Bytes per bandwidth probe: large messages, where bandwidth decides,
/// do not fit in a core's caches either.
pub const BIG: usize = 8 << 20;
/// Most concurrent big copies measured (the fit extrapolates beyond).
const MAX_MOVERS: usize = 16;

fn median(v: Vec<f64>) -> f64 {
    crate::units::median(&v).unwrap_or(0.0)
}

/// Median time of `f` run back to back for at least `window` seconds (and
/// `reps` times): concurrent probes started together then overlap for
/// most of their runs even when the ranks wake up at different times.
fn time_for(window: f64, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let start = Instant::now();
    let mut v = Vec::new();
    while v.len() < reps || start.elapsed().as_secs_f64() < window {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(median(v))
}

fn time(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(median(v))
}

/// CLOCK_MONOTONIC in seconds: comparable between the ranks' processes.
fn now() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The largest cache of CPU 0 that no other CPU shares (sysfs), 0 when
/// unknown.
pub fn private_cache() -> u64 {
    let mut best = 0;
    for i in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(size), Some(shared), Some(kind)) =
            (read("size"), read("shared_cpu_list"), read("type"))
        else {
            continue;
        };
        let private = !shared.contains([',', '-']);
        let size = size.trim();
        let bytes = size
            .strip_suffix('K')
            .and_then(|k| k.parse::<u64>().ok())
            .map(|k| k << 10)
            .or_else(|| size.strip_suffix('M')?.parse::<u64>().ok().map(|m| m << 20));
        if private && kind.trim() != "Instruction" {
            best = best.max(bytes.unwrap_or(0));
        }
    }
    best
}

/// The page size of this machine.
pub fn page_size() -> usize {
    // SAFETY: sysconf with a constant name.
    let s = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if s > 0 {
        s as usize
    } else {
        4096
    }
}

fn read_all(t: &dyn Transport, d: &Descriptor, off: usize, dst: &mut [u8]) -> Result<()> {
    t.read(d, off as u64, dst)?;
    Ok(())
}

/// Steps of m = 1..=max concurrent big reads, each of its own range of
/// rank 0, started together: the median time from the first start to the
/// last end, relative to m = 1.
fn step_points(
    team: &mut Team,
    root: &Descriptor,
    dst: &mut [u8],
    max: usize,
    reps: usize,
) -> Result<Vec<(usize, f64)>> {
    let me = team.rank();
    let mut points = Vec::new();
    let mut base = 0.0;
    for m in 1..=max {
        let mut steps = Vec::with_capacity(reps);
        for _ in 0..reps {
            team.barrier()?;
            let (mut start, mut end) = (0.0, 0.0);
            if me >= 1 && me <= m {
                start = now();
                read_all(team.transport(), root, (me - 1) * BIG, dst)?;
                end = now();
            }
            let all = team.allgather_words(&[start.to_bits(), end.to_bits()])?;
            let times = || (1..=m).map(|r| (f64::from_bits(all[r][0]), f64::from_bits(all[r][1])));
            let first = times().map(|t| t.0).fold(f64::INFINITY, f64::min);
            let last = times().map(|t| t.1).fold(0.0, f64::max);
            steps.push(last - first);
        }
        let t = median(steps);
        if m == 1 {
            base = t;
        }
        points.push((m, t / base.max(1e-12)));
    }
    Ok(points)
}

/// Block sizes of the contention grid: where pinning dominates (one
/// page) to where bandwidth does.
const GRID_SIZES: [usize; 6] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20];

/// Reader counts of the grid on p ranks: 1, 2, 4, ... and p-1.
fn grid_readers(p: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..)
        .map(|i| 1usize << i)
        .take_while(|&c| c < p - 1)
        .collect();
    v.push(p - 1);
    v.dedup();
    v
}

/// The mean over ranks 1..=c of each one's median time of `f` (run by
/// ranks 1..=c at once, the others wait).
fn concurrent(
    team: &Team,
    c: usize,
    reps: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let me = team.rank();
    team.barrier()?;
    let mut mine = 0.0;
    if me >= 1 && me <= c {
        mine = time_for(0.01, reps, || f(me))?;
    }
    let all = team.allgather_words(&[mine.to_bits()])?;
    Ok((1..=c).map(|r| f64::from_bits(all[r][0])).sum::<f64>() / c as f64)
}

/// Steps of a scatter (reads) or gather (`write`): ranks 1..=c each copy
/// their own n-byte block of rank 0's buffer (blocks side by side, as the
/// collective lays them out), started by a barrier; per size and reader
/// count the median over `reps` of the time from the first start to the
/// last end, which is what such a step costs a collective.  Readers of
/// disjoint blocks contend otherwise than readers of the same bytes (what
/// locks and cache lines they share), and writers into one buffer
/// otherwise than readers of it.
fn block_steps(
    team: &Team,
    root: &Descriptor,
    buf: &mut [u8],
    readers: &[usize],
    reps: usize,
    write: bool,
) -> Result<Vec<Vec<f64>>> {
    let me = team.rank();
    let t = team.transport();
    let mut table = Vec::with_capacity(GRID_SIZES.len());
    for &n in &GRID_SIZES {
        let mut row = Vec::with_capacity(readers.len());
        for &c in readers {
            let mut steps = Vec::with_capacity(reps);
            for _ in 0..reps {
                team.barrier()?;
                let (mut start, mut end) = (0.0, 0.0);
                if me >= 1 && me <= c {
                    let off = (me - 1) * n;
                    start = now();
                    if write {
                        t.write(root, off as u64, &buf[..n])?;
                    } else {
                        read_all(t, root, off, &mut buf[..n])?;
                    }
                    end = now();
                }
                let all = team.allgather_words(&[start.to_bits(), end.to_bits()])?;
                let times =
                    || (1..=c).map(|r| (f64::from_bits(all[r][0]), f64::from_bits(all[r][1])));
                let first = times().map(|t| t.0).fold(f64::INFINITY, f64::min);
                let last = times().map(|t| t.1).fold(0.0, f64::max);
                steps.push(last - first);
            }
            row.push(median(steps));
        }
        table.push(row);
    }
    Ok(table)
}

/// The wake-up latency of a progress signal, as throttled waves, trees and
/// the neighbour ring pay it: rank r waits for rank r−1's signal, then
/// signals; the chain's time over its p−1 hops (median over `reps`).
fn signal_hop(team: &mut Team, reps: usize) -> Result<f64> {
    let (me, p) = (team.rank(), team.size());
    let mut hops = Vec::with_capacity(reps);
    for _ in 0..reps {
        team.begin();
        team.barrier()?;
        let start = now();
        if me > 0 {
            team.wait_for(me - 1, 1)?;
        }
        team.signal(1);
        let end = now();
        let all = team.allgather_words(&[start.to_bits(), end.to_bits()])?;
        let first = f64::from_bits(all[0][0]);
        let last = f64::from_bits(all[p - 1][1]);
        hops.push((last - first) / (p - 1) as f64);
    }
    Ok(median(hops))
}

/// Bytes per block of the measured ring-source allgathers.
const RING_SIZES: [usize; 2] = [64 << 10, 1 << 20];

/// Ring-source allgathers on the whole team, as the collective runs them
/// (nothing synchronises its steps): per size the median over `reps` of
/// the slowest rank's time, for [`Params::fit_ring_drift`].
fn ring_points(team: &mut Team, reps: usize) -> Result<Vec<(u64, f64)>> {
    let p = team.size();
    let mut out = Vec::with_capacity(RING_SIZES.len());
    for n in RING_SIZES {
        let send = vec![0x3cu8; n];
        let mut recv = vec![0u8; n * p];
        let alg = Some(Algorithm::RingSource);
        team.allgather(&send, &mut recv, alg)?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            team.barrier()?;
            let start = now();
            team.allgather(&send, &mut recv, alg)?;
            let mine = now() - start;
            let all = team.allgather_words(&[mine.to_bits()])?;
            times.push(all.iter().map(|w| f64::from_bits(w[0])).fold(0.0, f64::max));
        }
        out.push((n as u64, median(times)));
    }
    Ok(out)
}

/// The contention grid: c readers copy the same n bytes of rank 0 at once
/// (and, with CMA, only pin its pages), for every size and reader count;
/// then whether readers of disjoint ranges one page-table page apart
/// contend as much (the lock span).
fn contention_grid(
    team: &Team,
    root: &Descriptor,
    dst: &mut [u8],
    reps: usize,
) -> Result<(Contention, u64)> {
    let p = team.size();
    let s = page_size();
    let cma = team.transport().kind() == Kind::Cma;
    let readers = grid_readers(p);
    let mut grid = Contention {
        sizes: GRID_SIZES.iter().map(|&n| n as u64).collect(),
        readers: readers.clone(),
        ..Contention::default()
    };
    for &n in &GRID_SIZES {
        let (mut copy, mut pin) = (Vec::new(), Vec::new());
        for &c in &readers {
            let t = team.transport();
            copy.push(concurrent(team, c, reps, |_| {
                read_all(t, root, 0, &mut dst[..n])
            })?);
            if cma {
                pin.push(concurrent(team, c, reps, |_| {
                    Ok(cma_touch_pages(root.pid, root.addr, n / s, s)?)
                })?);
            }
        }
        grid.copy.push(copy);
        if cma {
            grid.pin.push(pin);
        }
    }
    grid.apart = block_steps(team, root, dst, &readers, reps, false)?;
    grid.write = block_steps(team, root, dst, &readers, reps, true)?;
    // Disjoint 64 KiB blocks, each in its own page-table page: if they
    // wait less than half what readers of the same block wait, copies
    // contend only within such a span.
    let span = s * s / 8;
    let (n, c) = (64 << 10, p - 1);
    let mut lock_span = 0;
    if c >= 2 {
        let t = team.transport();
        let apart = concurrent(team, c, reps, |me| {
            read_all(t, root, (me - 1) * span, &mut dst[..n])
        })?;
        let j = GRID_SIZES.iter().position(|&g| g == n).unwrap_or(0);
        let (alone, together) = (grid.copy[j][0], grid.copy[j][readers.len() - 1]);
        if apart - alone < 0.5 * (together - alone) {
            lock_span = span as u64;
        }
    }
    Ok((grid, lock_span))
}

/// Calibrate on a team of at least 2; every rank calls it, rank 0 gets the
/// parameters.  `reps` repetitions per point, medians.
pub fn calibrate(team: &mut Team, reps: usize) -> Result<Option<Params>> {
    let p = team.size();
    if p < 2 {
        return Err(Error::Invalid(
            "calibrate needs a team of at least 2 (knem-run -n 2 or more)".into(),
        ));
    }
    let reps = reps.max(3);
    let s = page_size();
    let chunk = PAGES * s;
    let movers = (p - 1).min(MAX_MOVERS);
    let me = team.rank();
    let kind = team.transport().kind();
    let span = s * s / 8;
    let len = (chunk * (p - 1))
        .max(BIG * movers)
        .max(span * (p - 1))
        .max(GRID_SIZES[GRID_SIZES.len() - 1] * (p - 1));
    let mut src = vec![0x5au8; if me == 0 { len } else { 1 }];
    // SAFETY: peers read and overwrite the buffer (its bytes do not
    // matter), which we leave alone until the exposure is dropped at the
    // end of this function.
    let exp = unsafe {
        team.transport()
            .expose_raw(src.as_mut_ptr(), src.len(), true)?
    };
    let words = team.allgather_words(&exp.descriptor().to_words())?;
    let root = Descriptor::from_words([words[0][0], words[0][1], words[0][2], words[0][3]]);
    let mut dst = vec![0u8; if me == 0 { 1 } else { BIG }];
    let t = team.transport();
    let pin_pages = |off: usize| -> Result<()> {
        Ok(cma_touch_pages(root.pid, root.addr + off as u64, PAGES, s)?)
    };
    // Uncontended Table III steps, measured by rank 1: T1 system call, T2
    // access check (a 1-byte copy), T3 lock+pin (one byte from each of N
    // pages), T4 the copy of BIG bytes.
    let mut solo = [0f64; 4];
    if me == 1 {
        // Warm up: fault the pages in on both sides.
        read_all(t, &root, 0, &mut dst)?;
        if kind == Kind::Cma {
            solo[0] = time(reps * 4, || Ok(cma_pin_only(root.pid, root.addr, 0)?))?;
            solo[2] = time(reps, || pin_pages(0))?;
        }
        solo[1] = time(reps * 4, || read_all(t, &root, 0, &mut dst[..1]))?;
        solo[3] = time(reps, || read_all(t, &root, 0, &mut dst))?;
    }
    let w = team.allgather_words(&solo.map(f64::to_bits))?;
    let solo: Vec<f64> = w[1][..4].iter().map(|b| f64::from_bits(*b)).collect();
    let (t2, t3, t4) = (solo[1], solo[2], solo[3]);
    // Lock contention (CMA pins per copy): c readers at once, each on its
    // own range of rank 0, pinning only.
    let mut gamma_points = Vec::new();
    if kind == Kind::Cma {
        let mut base = 0.0;
        for c in 1..p {
            team.barrier()?;
            let mut mine = 0.0;
            if me >= 1 && me <= c {
                mine = time_for(0.02, reps, || pin_pages((me - 1) * chunk))?;
            }
            let all = team.allgather_words(&[mine.to_bits()])?;
            let avg = (1..=c).map(|r| f64::from_bits(all[r][0])).sum::<f64>() / c as f64;
            let cost = (avg - t2).max(1e-9);
            if c == 1 {
                base = cost;
            }
            gamma_points.push((c, cost / base));
        }
    }
    let step_points = step_points(team, &root, &mut dst, movers, reps)?;
    let (grid, lock_span) = contention_grid(team, &root, &mut dst, reps)?;
    // Synchronisation: barrier cost, and a progress signal's.
    let sync = time(reps * 4, || team.barrier())? / (p.max(2) as f64).log2().ceil();
    let signal = signal_hop(team, reps * 4)?;
    drop(exp);
    let ring = ring_points(team, reps)?;
    team.barrier()?;
    if me != 0 {
        return Ok(None);
    }
    let cpus = crate::model::host_cpus();
    let mut params = Params {
        source: format!("calibrated with {kind} on {p} ranks, {reps} reps"),
        alpha: t2,
        page: s as u64,
        sync,
        signal,
        cache: private_cache(),
        cpus,
        ..Params::default()
    };
    if kind == Kind::Cma {
        params.l = ((t3 - t2) / PAGES as f64).max(0.0);
        // γ is contention among copies that run at once: readers beyond
        // the CPU count wait for a CPU instead (the model's `step`
        // serializes them), so only c <= cpus enters the fit.
        let fit: Vec<(usize, f64)> = gamma_points
            .iter()
            .copied()
            .filter(|&(c, _)| cpus == 0 || c <= cpus)
            .collect();
        let (a, b) = Params::fit_gamma(if fit.len() >= 2 { &fit } else { &gamma_points });
        (params.gamma_a, params.gamma_b) = (a, b);
    } else {
        // No per-copy pinning (knem regions are pinned once, shm has none):
        // no page term, the copy is all in β.
        (params.l, params.gamma_a, params.gamma_b) = (0.0, 0.0, 0.0);
    }
    let pin = params.l * BIG.div_ceil(s) as f64;
    params.beta = ((t4 - t2 - pin) / BIG as f64).max(1e-13);
    params.gamma_points = gamma_points;
    params.fit_steps(&step_points, BIG as u64);
    params.step_points = step_points;
    params.contention = Some(grid);
    params.lock_span = lock_span;
    params.fit_ring_drift(&ring, p);
    params.ring_points = ring;
    Ok(Some(params))
}
