//! Tuning by measurement: for each operation and size, the model's
//! shortlist of knem-coll algorithms and "hand over" (Open MPI's own
//! module) are timed side by side on the node, and the fastest becomes the
//! rule ([`crate::rules`]), where its lead over hand over is beyond the
//! measurement's confidence interval ([`decide`]).
//!
//! Timing is OSU-like: untimed warm-up runs, then repetitions in which
//! every candidate runs once, in an order that rotates.  The real bench,
//! knemrs-tune's (through the C API), times each candidate through
//! coll/knemrs itself, its algorithm forced, or through Open MPI's own
//! module: [`BURST`] calls back to back after a barrier, as applications'
//! loops and coll_check's timing mode call collectives (Open MPI's
//! pipelined trees overlap successive calls, which a single call after a
//! barrier would not show), with coll/knemrs's per-call agreement, region
//! cache and buffers of the malloc heap as the jobs will have them.
//! A repetition's time is the mean of the ranks' times, as OSU and
//! coll_check report a collective's latency (the slowest rank's would
//! favour knem-rs's algorithms, whose ranks finish together, over Open
//! MPI's, whose ranks do not).  Every batch of repetitions is shared by
//! all ranks before anything is decided (each rank's numbers in its own
//! slot of a max reduction, [`Bench::max_all`], which is exact), so every
//! rank holds the same numbers and takes the same decisions (when to
//! stop, who won) without another message.  Repetitions go on until each
//! candidate's median is known to `ci_target` (the half-width of its 95%
//! confidence interval, relative) or `max_reps` is reached; the interval
//! reached is stored either way.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Op, Params};
use crate::rules::{Case, Choice, Point, Timing};
use std::time::Instant;

/// A median and its 95% confidence interval (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// The median.
    pub median: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Samples.
    pub reps: usize,
}

impl Stats {
    /// The interval's larger half-width relative to the median.
    pub fn rel_halfwidth(&self) -> f64 {
        if self.median <= 0.0 {
            return 0.0;
        }
        (self.hi - self.median).max(self.median - self.lo) / self.median
    }
}

/// The median of `samples` with a distribution-free 95% interval: the
/// order statistics of ranks n/2 − 1.96·√n/2 and 1 + n/2 + 1.96·√n/2
/// (1-based, rounded: the normal approximation of the binomial); below 6
/// samples, the whole range.
pub fn median_ci(samples: &[f64]) -> Stats {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Stats {
            median: 0.0,
            lo: 0.0,
            hi: 0.0,
            reps: 0,
        };
    }
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let (lo, hi) = if n < 6 {
        (v[0], v[n - 1])
    } else {
        let half = 1.96 * (n as f64).sqrt() / 2.0;
        let j = ((n as f64 / 2.0 - half).round() as usize).clamp(1, n) - 1;
        let k = ((1.0 + n as f64 / 2.0 + half).round() as usize).clamp(1, n) - 1;
        (v[j], v[k])
    };
    Stats {
        median,
        lo,
        hi,
        reps: n,
    }
}

/// The knem-coll algorithms worth timing for `op` on `n` bytes per block:
/// the model's best three, and every other within 1.5× of its best.
pub fn shortlist(
    params: &Params,
    op: Op,
    n: u64,
    p: usize,
    nodes: usize,
    group: usize,
) -> Vec<Algorithm> {
    let ranked = params.explain(op, n, p, nodes, group);
    let best = ranked.first().map_or(0.0, |r| r.1);
    ranked
        .iter()
        .enumerate()
        .filter(|(i, (_, c))| *i < 3 || *c <= best * 1.5)
        .map(|(_, (a, _))| *a)
        .collect()
}

/// What a tuning run times with: one rank's side of a team.
pub trait Bench {
    /// Run `choice` for `op` on `n` bytes per block (root 0), started
    /// together with the other ranks; this rank's seconds per call.  Every rank
    /// makes the same calls in the same order.  [`Error::Declined`] (on
    /// every rank alike) drops the candidate at this size.
    fn run(&mut self, op: Op, choice: Choice, n: u64) -> Result<f64>;
    /// Replace every value with its maximum over the ranks.
    fn max_all(&mut self, values: &mut [f64]) -> Result<()>;
    /// This rank and the number of ranks.
    fn ranks(&self) -> (usize, usize);
    /// Whether "hand over" can be timed (an MPI program can; a team of
    /// knem-run alone cannot).
    fn can_hand_over(&self) -> bool;
}

/// How long to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// Untimed runs of each candidate before the first repetition.
    pub warmup: usize,
    /// Repetitions at least, and at most.
    pub min_reps: usize,
    /// See `min_reps`.
    pub max_reps: usize,
    /// Stop once every candidate's median is known this well (relative
    /// half-width of its 95% interval).
    pub ci_target: f64,
    /// Stop a size after this many seconds (the slowest rank's clock),
    /// whatever the intervals.
    pub max_seconds: f64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            warmup: 2,
            min_reps: 10,
            max_reps: 200,
            ci_target: 0.05,
            max_seconds: 20.0,
        }
    }
}

/// Repetitions between two reductions.
const BATCH: usize = 5;

/// Time `candidates` at one size and pick one ([`decide`]).
pub fn measure(
    bench: &mut dyn Bench,
    op: Op,
    n: u64,
    candidates: &[Choice],
    cfg: &Config,
) -> Result<Point> {
    let start = Instant::now();
    let mut alive: Vec<Choice> = Vec::new();
    for &c in candidates {
        let mut ok = true;
        for _ in 0..cfg.warmup.max(1) {
            match bench.run(op, c, n) {
                Ok(_) => {}
                Err(Error::Declined { .. }) => {
                    ok = false;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if ok {
            alive.push(c);
        }
    }
    if alive.is_empty() {
        return Err(Error::Invalid(format!(
            "{op} of {n} bytes: every candidate was declined"
        )));
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); alive.len()];
    let mut rep = 0;
    let (rank, p) = bench.ranks();
    // A rank's batch: every candidate's BATCH times, then its clock.
    let width = alive.len() * BATCH + 1;
    loop {
        // One batch: every candidate once per repetition, rotating, into
        // this rank's slot; the others' slots stay -inf, so the max
        // reduction hands every rank every rank's numbers, exactly.
        let mut all = vec![f64::NEG_INFINITY; width * p];
        let mine = &mut all[rank * width..(rank + 1) * width];
        for b in 0..BATCH {
            for i in 0..alive.len() {
                let c = (i + rep + b) % alive.len();
                mine[c * BATCH + b] = bench.run(op, alive[c], n)?;
            }
        }
        mine[width - 1] = start.elapsed().as_secs_f64();
        bench.max_all(&mut all)?;
        let slots: Vec<&[f64]> = all.chunks(width).collect();
        for (c, s) in samples.iter_mut().enumerate() {
            for b in c * BATCH..(c + 1) * BATCH {
                s.push(slots.iter().map(|r| r[b]).sum::<f64>() / p as f64);
            }
        }
        rep += BATCH;
        let known = samples
            .iter()
            .all(|s| median_ci(s).rel_halfwidth() <= cfg.ci_target);
        let clock = slots
            .iter()
            .map(|r| r[width - 1])
            .fold(f64::NEG_INFINITY, f64::max);
        if rep >= cfg.max_reps || (rep >= cfg.min_reps && known) || clock >= cfg.max_seconds {
            break;
        }
    }
    let mut timings: Vec<Timing> = alive
        .iter()
        .zip(&samples)
        .map(|(&choice, s)| {
            let st = median_ci(s);
            Timing {
                choice,
                median_us: st.median * 1e6,
                ci_us: [st.lo * 1e6, st.hi * 1e6],
                reps: st.reps,
            }
        })
        .collect();
    timings.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
    Ok(Point {
        bytes: n,
        choice: decide(&timings),
        timings,
    })
}

/// The candidate a point goes to, from its timings sorted by median: the
/// fastest, except that Open MPI's own module keeps the call unless a
/// knem-rs algorithm beats it beyond doubt, its whole interval below
/// hand-over's.  The promise is "never slower than the default": a
/// knem-rs algorithm whose lead is within the noise would keep that
/// promise only by luck.
pub fn decide(timings: &[Timing]) -> Choice {
    let Some(best) = timings.first() else {
        return Choice::HandOver;
    };
    match timings.iter().find(|t| t.choice == Choice::HandOver) {
        Some(h) if best.choice != Choice::HandOver && best.ci_us[1] >= h.ci_us[0] => {
            Choice::HandOver
        }
        _ => best.choice,
    }
}

/// What to tune.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The operations.
    pub ops: Vec<Op>,
    /// Bytes per block (the message for bcast), any order.
    pub sizes: Vec<u64>,
    /// How long to measure each size.
    pub cfg: Config,
}

/// The default grid: 256 B to 64 MiB per block, ×4.
pub fn default_sizes() -> Vec<u64> {
    (0..10).map(|i| 256u64 << (2 * i)).collect()
}

/// Tune every operation of `plan` on one team: `p` ranks on `nodes` NUMA
/// nodes of at most `group`, over `transport`.  `progress` sees each
/// point as it is decided (every rank gets the same points).
pub fn tune_team(
    bench: &mut dyn Bench,
    params: &Params,
    (p, nodes, group): (usize, usize, usize),
    transport: &str,
    plan: &Plan,
    mut progress: impl FnMut(Op, &Point),
) -> Result<Vec<Case>> {
    let mut sizes = plan.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut cases = Vec::new();
    for &op in &plan.ops {
        let mut points = Vec::new();
        for &n in &sizes {
            let mut cands: Vec<Choice> = shortlist(params, op, n, p, nodes, group)
                .into_iter()
                .map(Choice::Knem)
                .collect();
            if bench.can_hand_over() {
                cands.push(Choice::HandOver);
            }
            let pt = measure(bench, op, n, &cands, &plan.cfg)?;
            progress(op, &pt);
            points.push(pt);
        }
        if !points.is_empty() {
            cases.push(Case::from_points(op, p, transport, points));
        }
    }
    Ok(cases)
}

/// Calls back to back per repetition of the real bench (knemrs-tune's,
/// through the C API).
pub const BURST: usize = 5;
