//! `contention`: R processes read the same source buffer of one process at
//! once (Contention-Aware Kernel-Assisted MPI Collectives' one-to-all pattern).
//!
//! `memcpy` is the no-kernel reference: each reader copies from a private
//! copy of the source, so only memory bandwidth is shared.

use crate::cma;
use crate::err;
use crate::error::Result;
use crate::knemdev::Device;
use crate::mech::Mech;
use crate::mem::Mapping;
use crate::proc::{self, Peers};
use crate::report::{fmt_bw, fmt_ratio, fmt_sz, fmt_us, Record, Table};
use crate::stats::{median, min_max, ratio};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::{getppid, Pid};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

/// Mechanisms that make sense for one-to-all reads.
pub const MECHS: [Mech; 3] = [Mech::Memcpy, Mech::CmaRead, Mech::KnemRead];

fn now_ns() -> Result<u64> {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC)?;
    Ok(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// Settings of a contention sweep.
pub struct Settings {
    /// Message sizes.
    pub sizes: Vec<u64>,
    /// Reader counts.
    pub readers: Vec<usize>,
    /// Repetitions per point.
    pub reps: u32,
    /// Bytes each reader moves per repetition (sets the iteration count).
    pub target: u64,
    /// Cap on copies per repetition.
    pub max_iters: u64,
}

impl Settings {
    /// Copies per reader per repetition: four times the pingpong target,
    /// so that the start skew of R processes (a scheduler tick on a busy
    /// machine) stays small against the run.
    fn iters(&self, size: u64) -> u64 {
        (4 * self.target / size).clamp(16, 8 * self.max_iters.max(2))
    }
}

/// Timestamps of one run: `[reader][size][rep] = (start, end)` in a shared
/// mapping after a barrier counter.
struct Board {
    map: Mapping,
    nsizes: usize,
    reps: usize,
}

impl Board {
    fn new(readers: usize, nsizes: usize, reps: usize) -> Result<Board> {
        Ok(Board {
            map: Mapping::shared(64 + readers * nsizes * reps * 16)?,
            nsizes,
            reps,
        })
    }
    fn barrier(&self) -> &AtomicU64 {
        // SAFETY: the mapping starts page-aligned with 64 bytes reserved for
        // this counter, zero-initialised and only used atomically.
        unsafe { &*(self.map.ptr() as *const AtomicU64) }
    }
    fn cell(&self, reader: usize, size: usize, rep: usize) -> &[AtomicU64; 2] {
        let i = (reader * self.nsizes + size) * self.reps + rep;
        // SAFETY: i indexes within the readers*nsizes*reps cells allocated
        // after the first 64 bytes; 8-byte aligned, zero-initialised, used
        // atomically only.
        unsafe { &*(self.map.ptr().add(64 + i * 16) as *const [AtomicU64; 2]) }
    }
}

#[allow(clippy::too_many_arguments)]
fn reader(
    me: usize,
    nreaders: usize,
    mech: Mech,
    st: &Settings,
    board: &Board,
    src_addr: usize,
    cookie: u64,
) -> Result<()> {
    let max = *st.sizes.iter().max().unwrap_or(&4096) as usize;
    let mut dst = Mapping::private(max)?;
    dst.fill(0x55);
    let mut own = None;
    if mech == Mech::Memcpy {
        let mut m = Mapping::private(max)?;
        m.fill(0xAA);
        own = Some(m);
    }
    let dev = if mech == Mech::KnemRead {
        Some(Device::open()?)
    } else {
        None
    };
    let src_pid: Pid = getppid();
    let peers = Peers::parent();
    let mut gen = 0u64;
    for (si, &size) in st.sizes.iter().enumerate() {
        let size = size as usize;
        let iters = st.iters(size as u64);
        for rep in 0..st.reps as usize {
            gen += 1;
            let bar = board.barrier();
            bar.fetch_add(1, SeqCst);
            let want = gen * nreaders as u64;
            peers.wait_until(|| bar.load(SeqCst) >= want)?;
            let t0 = now_ns()?;
            for _ in 0..iters {
                match mech {
                    // SAFETY: both buffers are ours and `max >= size` long.
                    Mech::Memcpy => unsafe {
                        crate::mem::copy(
                            dst.ptr(),
                            own.as_ref().expect("memcpy source").ptr(),
                            size,
                        )
                    },
                    // SAFETY: dst is ours and `max >= size` long.
                    Mech::CmaRead => unsafe { cma::read(src_pid, dst.ptr(), src_addr, size)? },
                    // SAFETY: dst is ours and `max >= size` long.
                    Mech::KnemRead => unsafe {
                        dev.as_ref().expect("knem device").inline_copy(
                            dst.ptr(),
                            size,
                            false,
                            cookie,
                            0,
                        )?
                    },
                    _ => return Err(err!("{mech} is not a one-to-all read mechanism")),
                }
            }
            let t1 = now_ns()?;
            let c = board.cell(me, si, rep);
            c[0].store(t0, SeqCst);
            c[1].store(t1, SeqCst);
        }
    }
    Ok(())
}

/// Run the sweep for the mechanisms that can run.
pub fn contention(st: &Settings, mechs: &[Mech]) -> Result<Vec<Record>> {
    let max = *st.sizes.iter().max().unwrap_or(&4096) as usize;
    let total = (mechs.len() * st.readers.len()) as u64;
    let pb = crate::progress::bar(total, "contention");
    let mut recs = Vec::new();
    for &mech in mechs {
        for &nr in &st.readers {
            pb.set_message(format!("{mech} R={nr}"));
            let mut src = Mapping::private(max)?;
            src.fill(0x11);
            let dev = if mech == Mech::KnemRead {
                Some(Device::open()?)
            } else {
                None
            };
            let cookie = match &dev {
                // SAFETY: `src` outlives the region, destroyed below.
                Some(d) => unsafe { d.create_region(src.ptr(), src.len())? },
                None => 0,
            };
            cma::allow_peers();
            let board = Board::new(nr, st.sizes.len(), st.reps as usize)?;
            let src_addr = src.ptr() as usize;
            let mut kids = Vec::new();
            for me in 0..nr {
                let b = &board;
                kids.push(proc::spawn(move || {
                    reader(me, nr, mech, st, b, src_addr, cookie)
                })?);
            }
            // the source process only has to exist: wait, idle, for readers
            for k in kids {
                k.wait()?;
            }
            if let Some(d) = &dev {
                d.destroy_region(cookie)?;
            }
            for (si, &size) in st.sizes.iter().enumerate() {
                let iters = st.iters(size);
                let (mut per, mut agg, mut lat) = (Vec::new(), Vec::new(), Vec::new());
                for rep in 0..st.reps as usize {
                    let cells: Vec<(u64, u64)> = (0..nr)
                        .map(|r| {
                            let c = board.cell(r, si, rep);
                            (c[0].load(SeqCst), c[1].load(SeqCst))
                        })
                        .collect();
                    let bytes = (size * iters) as f64;
                    let durs: Vec<f64> =
                        cells.iter().map(|&(a, b)| (b - a).max(1) as f64).collect();
                    let mean_bw = durs.iter().map(|d| bytes / d).sum::<f64>() / nr as f64;
                    let start = cells.iter().map(|c| c.0).min().unwrap_or(0);
                    let end = cells.iter().map(|c| c.1).max().unwrap_or(1);
                    per.push(mean_bw * 1e9 / (1 << 20) as f64);
                    agg.push(
                        bytes * nr as f64 / (end - start).max(1) as f64 * 1e9 / (1 << 20) as f64,
                    );
                    lat.push(durs.iter().sum::<f64>() / nr as f64 / iters as f64 / 1000.0);
                }
                let (lo, hi) = min_max(&lat).unwrap_or((f64::NAN, f64::NAN));
                recs.push(Record {
                    bench: "contention".into(),
                    mechanism: mech.name().into(),
                    cache: "hot".into(),
                    size,
                    param: nr as u64,
                    reps: st.reps,
                    iters,
                    median_us: median(&lat).unwrap_or(f64::NAN),
                    min_us: lo,
                    max_us: hi,
                    mib_s: median(&per).unwrap_or(f64::NAN),
                    aggregate_mib_s: median(&agg),
                    vs_memcpy: None,
                    vs_cma: None,
                    vs_base: None,
                });
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    add_ratios(&mut recs);
    recs.sort_by_key(|r| {
        (
            r.size,
            r.param,
            MECHS.iter().position(|m| m.name() == r.mechanism),
        )
    });
    Ok(recs)
}

/// `vs_base`: aggregate relative to one reader; `vs_memcpy`/`vs_cma`:
/// aggregate relative to those mechanisms at the same R and size.
fn add_ratios(recs: &mut [Record]) {
    let agg: BTreeMap<(String, u64, u64), f64> = recs
        .iter()
        .filter_map(|r| Some(((r.mechanism.clone(), r.size, r.param), r.aggregate_mib_s?)))
        .collect();
    for r in recs.iter_mut() {
        let Some(a) = r.aggregate_mib_s else { continue };
        let get = |m: &str, p: u64| agg.get(&(m.to_string(), r.size, p)).copied();
        r.vs_base = get(&r.mechanism, 1).and_then(|b| ratio(a, b));
        if r.mechanism != "memcpy" {
            r.vs_memcpy = get("memcpy", r.param).and_then(|b| ratio(a, b));
        }
        if r.mechanism != "cma-read" && r.mechanism != "memcpy" {
            r.vs_cma = get("cma-read", r.param).and_then(|b| ratio(a, b));
        }
    }
}

/// The contention table.
pub fn table(recs: &[Record]) -> Table {
    let mut t = Table::new(
        &[
            "size",
            "R",
            "mechanism",
            "lat us",
            "per-reader MiB/s",
            "aggregate MiB/s",
            "x(R=1)",
            "xmemcpy",
            "xCMA",
        ],
        3,
    );
    let mut last = None;
    for r in recs {
        if last.is_some_and(|k| k != (r.size, r.param)) {
            t.gap();
        }
        last = Some((r.size, r.param));
        t.row(vec![
            fmt_sz(r.size),
            r.param.to_string(),
            r.mechanism.clone(),
            fmt_us(r.median_us),
            fmt_bw(r.mib_s),
            fmt_bw(r.aggregate_mib_s.unwrap_or(f64::NAN)),
            fmt_ratio(r.vs_base),
            fmt_ratio(r.vs_memcpy),
            fmt_ratio(r.vs_cma),
        ]);
    }
    t
}
