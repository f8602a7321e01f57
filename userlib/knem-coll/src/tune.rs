//! Tuning by measurement: for each operation and size, the model's
//! shortlist of knem-coll algorithms and "hand over" (Open MPI's own
//! module) are timed side by side on the node, and the fastest becomes the
//! rule ([`crate::rules`]).
//!
//! Timing is OSU-like: untimed warm-up runs, then repetitions in which
//! every candidate runs once, in an order that rotates, each run started
//! together by a barrier.  A run of the real bench ([`TeamBench`]) is
//! [`BURST`] calls back to back, timed together, as applications' loops
//! and coll_check's timing mode call collectives: Open MPI's pipelined
//! trees overlap successive calls, which a single call after a barrier
//! would not show.  A knem-rs candidate pays, per call, the word exchange
//! by which coll/knemrs's ranks agree to take knem-rs, as it will there.  A repetition's time is the slowest rank's: every
//! batch of repetitions is max-reduced over the ranks ([`Bench::max_all`])
//! before anything is decided, so every rank holds the same numbers and
//! takes the same decisions (when to stop, who won) without another
//! message.  Repetitions go on until each candidate's median is known to
//! `ci_target` (the half-width of its 95% confidence interval, relative)
//! or `max_reps` is reached; the interval reached is stored either way.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Op, Params};
use crate::rules::{Case, Choice, Point, Timing};
use crate::team::Team;
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

/// Time `candidates` at one size and pick the fastest (smallest median).
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
    loop {
        // One batch: every candidate once per repetition, rotating.
        let mut batch = vec![0.0; alive.len() * BATCH + 1];
        for b in 0..BATCH {
            for i in 0..alive.len() {
                let c = (i + rep + b) % alive.len();
                batch[c * BATCH + b] = bench.run(op, alive[c], n)?;
            }
        }
        batch[alive.len() * BATCH] = start.elapsed().as_secs_f64();
        bench.max_all(&mut batch)?;
        for (c, s) in samples.iter_mut().enumerate() {
            s.extend_from_slice(&batch[c * BATCH..(c + 1) * BATCH]);
        }
        rep += BATCH;
        let known = samples
            .iter()
            .all(|s| median_ci(s).rel_halfwidth() <= cfg.ci_target);
        if rep >= cfg.max_reps
            || (rep >= cfg.min_reps && known)
            || batch[alive.len() * BATCH] >= cfg.max_seconds
        {
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
        choice: timings[0].choice,
        timings,
    })
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

/// Open MPI's side of a tuning run, for [`TeamBench`]: its collective for
/// op on n bytes per block from `send` into `recv` (root 0), and the max
/// reduction over the ranks.
pub trait Mpi {
    /// Run Open MPI's own module for `op`.
    fn hand_over(&mut self, op: Op, n: u64, send: &[u8], recv: &mut [u8]) -> Result<()>;
    /// See [`Bench::max_all`].
    fn max_all(&mut self, values: &mut [f64]) -> Result<()>;
}

/// Calls back to back per repetition of the real bench.
pub const BURST: usize = 5;

/// The real bench: knem-coll's collectives on a team, Open MPI's through
/// [`Mpi`] (or none: then hand over is not timed and the maximum is taken
/// through the team's own word exchange).
pub struct TeamBench<'a> {
    team: &'a mut Team,
    mpi: Option<&'a mut dyn Mpi>,
    send: Vec<u8>,
    recv: Vec<u8>,
    cache: bool,
}

impl<'a> TeamBench<'a> {
    /// A bench on `team`, with Open MPI's side when given.  With `cache`
    /// the team keeps its regions between calls, as coll/knemrs's region
    /// cache does where it is on (by default where the rank's pins are not
    /// limited): knem-rs is then timed as coll/knemrs will run it, buffers
    /// reused without being declared again.
    pub fn new(
        team: &'a mut Team,
        mpi: Option<&'a mut dyn Mpi>,
        cache: bool,
    ) -> Result<TeamBench<'a>> {
        if cache {
            // SAFETY: the bench's two buffers are all the team's
            // collectives see, and `buffers` and `drop` report each one
            // before it goes.
            unsafe { team.cache_regions(CACHE_ENTRIES, CACHE_BYTES)? };
        }
        Ok(TeamBench {
            team,
            mpi,
            send: Vec::new(),
            recv: Vec::new(),
            cache,
        })
    }

    /// Report the buffers as released (they are about to go).
    fn release(&mut self) {
        if self.cache {
            for v in [&self.send, &self.recv] {
                crate::note_release(v.as_ptr() as usize, v.capacity());
            }
        }
    }

    fn buffers(&mut self, len: usize) -> Result<()> {
        if self.send.len() < len {
            self.release();
            let fill = |v: &mut Vec<u8>| -> Result<()> {
                *v = Vec::new();
                v.try_reserve_exact(len)
                    .map_err(|_| Error::Invalid(format!("cannot allocate {len} bytes")))?;
                v.extend((0..len).map(|i| i as u8));
                Ok(())
            };
            fill(&mut self.send)?;
            fill(&mut self.recv)?;
        }
        Ok(())
    }
}

impl Drop for TeamBench<'_> {
    fn drop(&mut self) {
        self.release();
        if self.cache {
            // SAFETY: 0 entries drops every kept region; nothing to promise.
            let _ = unsafe { self.team.cache_regions(0, 0) };
        }
    }
}

/// coll/knemrs's region cache bounds per communicator (its defaults).
const CACHE_ENTRIES: usize = 64;
const CACHE_BYTES: usize = 256 << 20;

impl Bench for TeamBench<'_> {
    fn run(&mut self, op: Op, choice: Choice, n: u64) -> Result<f64> {
        let p = self.team.size();
        let n = usize::try_from(n).map_err(|_| Error::Overflow(format!("{n} bytes")))?;
        let total = n
            .checked_mul(p)
            .ok_or_else(|| Error::Overflow(format!("{p} x {n} bytes")))?;
        self.buffers(total)?;
        let (send, recv) = (&self.send[..total], &mut self.recv[..total]);
        self.team.barrier()?;
        let t = Instant::now();
        for _ in 0..BURST {
            match choice {
                Choice::HandOver => match self.mpi.as_deref_mut() {
                    Some(m) => m.hand_over(op, n as u64, send, recv)?,
                    None => return Err(Error::Invalid("no MPI to hand the call to".into())),
                },
                Choice::Knem(a) => {
                    let (team, alg) = (&mut *self.team, Some(a));
                    let r = team.rank() == 0;
                    // coll/knemrs's agreement to take knem-rs.
                    team.allgather_words(&[1])?;
                    match op {
                        Op::Bcast => team.bcast(&mut recv[..n], 0, alg)?,
                        Op::Scatter => {
                            team.scatter(if r { send } else { &[] }, &mut recv[..n], 0, alg)?
                        }
                        Op::Gather => {
                            team.gather(&send[..n], if r { &mut *recv } else { &mut [] }, 0, alg)?
                        }
                        Op::Allgather => team.allgather(&send[..n], recv, alg)?,
                        Op::Alltoall => team.alltoall(send, recv, alg)?,
                    }
                }
            }
        }
        Ok(t.elapsed().as_secs_f64() / BURST as f64)
    }

    fn max_all(&mut self, values: &mut [f64]) -> Result<()> {
        if let Some(m) = self.mpi.as_deref_mut() {
            return m.max_all(values);
        }
        for chunk in values.chunks_mut(crate::team::SLOT_WORDS) {
            let words: Vec<u64> = chunk.iter().map(|v| v.to_bits()).collect();
            let all = self.team.allgather_words(&words)?;
            for (i, v) in chunk.iter_mut().enumerate() {
                *v = all
                    .iter()
                    .map(|w| f64::from_bits(w[i]))
                    .fold(f64::NEG_INFINITY, f64::max);
            }
        }
        Ok(())
    }

    fn can_hand_over(&self) -> bool {
        self.mpi.is_some()
    }
}
