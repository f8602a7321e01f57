//! The Contention-Aware Kernel-Assisted MPI Collectives cost model T = α + nβ + lγ_c⌈n/s⌉, its parameters, and the
//! planner that picks an algorithm (and k) per operation, size and team size.

pub use crate::contention::Contention;
use crate::error::{Error, Result};
use crate::schedule;
use knem_transport::Kind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A collective operation (the v-variants plan like their plain forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// One-to-all, same data.
    Bcast,
    /// One-to-all, personalised (scatter, scatterv).
    Scatter,
    /// All-to-one (gather, gatherv).
    Gather,
    /// All-to-all, same data.
    Allgather,
    /// All-to-all, personalised.
    Alltoall,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 5] = [
        Op::Bcast,
        Op::Scatter,
        Op::Gather,
        Op::Allgather,
        Op::Alltoall,
    ];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Bcast => "bcast",
            Op::Scatter => "scatter",
            Op::Gather => "gather",
            Op::Allgather => "allgather",
            Op::Alltoall => "alltoall",
        }
    }

    /// The algorithms that implement this operation for `p` ranks on
    /// `nodes` NUMA nodes: throttling to every k from 2 to p−2 (p−1 is the
    /// direct schedule) and k-nomial trees of every radix from 2 to p−1.
    pub fn algorithms(self, p: usize, nodes: usize) -> Vec<Algorithm> {
        use Algorithm::*;
        let throttled = || (2..p.saturating_sub(1)).map(Throttled);
        let mut out = match self {
            Op::Bcast => {
                let mut v = vec![DirectRead, DirectWrite];
                v.extend(throttled());
                v.extend((2..p.max(3)).map(Knomial));
                v.push(ScatterAllgather);
                if nodes > 1 {
                    v.push(Hierarchical);
                }
                v
            }
            Op::Scatter => {
                let mut v = vec![DirectRead, Sequential];
                v.extend(throttled());
                v
            }
            Op::Gather => {
                let mut v = vec![DirectWrite, Sequential];
                v.extend(throttled());
                v
            }
            Op::Allgather => vec![RingSource, RingNeighbor, RecursiveDoubling, Bruck],
            Op::Alltoall => vec![Pairwise, Ring],
        };
        out.dedup();
        out
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Op {
    type Err = Error;
    fn from_str(s: &str) -> Result<Op> {
        let s = s.trim().to_ascii_lowercase();
        let s = s.trim_end_matches('v');
        Op::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| Error::Invalid(format!("unknown operation {s:?}")))
    }
}

/// A collective algorithm (Contention-Aware Kernel-Assisted MPI Collectives / Kernel Assisted Collective Intra-node Communication).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// Everyone reads from the source at once (parallel reads).
    DirectRead,
    /// Bcast: root writes to everyone in turn.  Gather: everyone writes
    /// into the root at once.
    DirectWrite,
    /// At most k concurrent readers (one-to-all) or writers (all-to-one).
    Throttled(usize),
    /// Scatter: root writes to each in turn.  Gather: root reads each in turn.
    Sequential,
    /// Bcast along a k-nomial tree, each source read by up to k-1 children.
    Knomial(usize),
    /// Bcast: root scatters p chunks (sequential writes), then a
    /// contention-free ring-source allgather.
    ScatterAllgather,
    /// Bcast: node leaders read from the root, then members from their leader.
    Hierarchical,
    /// Allgather: step i reads block rank-i from its owner.
    RingSource,
    /// Allgather: step i reads block rank-i from the left neighbour.
    RingNeighbor,
    /// Alltoall: step i reads from rank XOR i (p a power of two) or rank-i.
    Pairwise,
    /// Alltoall: step i writes to rank+i.
    Ring,
    /// Allgather: ⌈log2 p⌉ steps, step j reads the 2^j blocks of the
    /// sibling group (any p: see [`crate::schedule::recursive_doubling`]).
    RecursiveDoubling,
    /// Allgather: ⌈log2 p⌉ steps, step j reads up to 2^j blocks from rank
    /// + 2^j (see [`crate::schedule::bruck`]).
    Bruck,
}

impl Algorithm {
    /// Encode as (code, k) for the C API and the plan word.
    pub fn code(self) -> (u32, u32) {
        use Algorithm::*;
        match self {
            DirectRead => (1, 0),
            DirectWrite => (2, 0),
            Throttled(k) => (3, k as u32),
            Sequential => (4, 0),
            Knomial(k) => (5, k as u32),
            ScatterAllgather => (6, 0),
            Hierarchical => (7, 0),
            RingSource => (8, 0),
            RingNeighbor => (9, 0),
            Pairwise => (10, 0),
            Ring => (11, 0),
            RecursiveDoubling => (12, 0),
            Bruck => (13, 0),
        }
    }

    /// Decode [`Algorithm::code`]; code 0 is "let the planner choose".
    pub fn from_code(code: u32, k: u32) -> Option<Algorithm> {
        use Algorithm::*;
        let k = (k as usize).max(1);
        Some(match code {
            1 => DirectRead,
            2 => DirectWrite,
            3 => Throttled(k),
            4 => Sequential,
            5 => Knomial(k.max(2)),
            6 => ScatterAllgather,
            7 => Hierarchical,
            8 => RingSource,
            9 => RingNeighbor,
            10 => Pairwise,
            11 => Ring,
            12 => RecursiveDoubling,
            13 => Bruck,
            _ => return None,
        })
    }

    /// Whether this algorithm implements `op`.
    pub fn supports(self, op: Op) -> bool {
        use Algorithm::*;
        matches!(
            (op, self),
            (
                Op::Bcast,
                DirectRead | DirectWrite | Throttled(_) | Knomial(_)
            ) | (Op::Bcast, ScatterAllgather | Hierarchical)
                | (Op::Scatter, DirectRead | Sequential | Throttled(_))
                | (Op::Gather, DirectWrite | Sequential | Throttled(_))
                | (
                    Op::Allgather,
                    RingSource | RingNeighbor | RecursiveDoubling | Bruck
                )
                | (Op::Alltoall, Pairwise | Ring)
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Algorithm::*;
        match self {
            DirectRead => f.write_str("direct-read"),
            DirectWrite => f.write_str("direct-write"),
            Throttled(k) => write!(f, "throttled-{k}"),
            Sequential => f.write_str("sequential"),
            Knomial(k) => write!(f, "knomial-{k}"),
            ScatterAllgather => f.write_str("scatter-allgather"),
            Hierarchical => f.write_str("hierarchical"),
            RingSource => f.write_str("ring-source"),
            RingNeighbor => f.write_str("ring-neighbor"),
            Pairwise => f.write_str("pairwise"),
            Ring => f.write_str("ring"),
            RecursiveDoubling => f.write_str("recursive-doubling"),
            Bruck => f.write_str("bruck"),
        }
    }
}

impl FromStr for Algorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Algorithm> {
        use Algorithm::*;
        let s = s.trim().to_ascii_lowercase();
        let with_k =
            |prefix: &str| -> Option<usize> { s.strip_prefix(prefix).and_then(|k| k.parse().ok()) };
        if let Some(k) = with_k("throttled-") {
            return Ok(Throttled(k.max(1)));
        }
        if let Some(k) = with_k("knomial-") {
            return Ok(Knomial(k.max(2)));
        }
        Ok(match s.as_str() {
            "direct-read" => DirectRead,
            "direct-write" => DirectWrite,
            "sequential" => Sequential,
            "scatter-allgather" => ScatterAllgather,
            "hierarchical" => Hierarchical,
            "ring-source" => RingSource,
            "ring-neighbor" => RingNeighbor,
            "pairwise" => Pairwise,
            "ring" => Ring,
            "recursive-doubling" => RecursiveDoubling,
            "bruck" => Bruck,
            _ => return Err(Error::Invalid(format!("unknown algorithm {s:?}"))),
        })
    }
}

/// Model parameters (seconds, bytes), as the model file stores them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Where they come from (a preset name or "calibrated on ...").
    pub source: String,
    /// α: startup cost per message.
    pub alpha: f64,
    /// β: transfer time per byte.
    pub beta: f64,
    /// l: time to lock and pin a page without contention.
    pub l: f64,
    /// s: page size.
    pub page: u64,
    /// γ_c = a·c² + b·c for c > 1 concurrent accessors (γ_1 = 1).
    pub gamma_a: f64,
    /// See `gamma_a`.
    pub gamma_b: f64,
    /// Cost of a small-message collective step (T^sm = sync·⌈lg p⌉).
    pub sync: f64,
    /// Cost of one point-to-point signal (throttling, trees).
    pub signal: f64,
    /// Measured γ points (c, γ_c), for the record.
    #[serde(default)]
    pub gamma_points: Vec<(usize, f64)>,
    /// Parallel efficiency e of copies that run at once (memory bandwidth
    /// and caches they share): m of them progress 1 + e·(m−1) times as
    /// fast as one, i.e. each one's nβ + lγ_c⌈n/s⌉ is stretched by
    /// δ_m = m / (1 + e·(m−1)).  Contention-Aware Kernel-Assisted MPI Collectives assumes e = 1 (bandwidth to
    /// spare); e = 0 means the copies get no further than one would.
    #[serde(default = "full_efficiency")]
    pub bw_par: f64,
    /// Extra cost, as a fraction, of a step whose copies outnumber the
    /// CPUs beyond sharing them evenly (preemption, cache refills, ranks
    /// waking up).  0 unless calibrated.
    #[serde(default)]
    pub oversub: f64,
    /// Bytes of a core's private cache (0: unknown).  Copies that fit
    /// there hardly compete for memory bandwidth, so δ applies to the
    /// fraction of a copy beyond it.
    #[serde(default)]
    pub cache: u64,
    /// Measured step points (m, time of m concurrent big copies from one
    /// process / time of one), for the record.
    #[serde(default)]
    pub step_points: Vec<(usize, f64)>,
    /// CPUs the ranks share (0: one per rank, the paper's setting).  The Contention-Aware
    /// Kernel-Assisted MPI Collectives paper runs one rank per core, so c concurrent copies progress
    /// together; with fewer CPUs than copies only `cpus` of them run at a
    /// time (contention γ at that concurrency) and the rest wait their
    /// turn, so a step of c copies costs c/cpus times a step of `cpus`
    /// copies.  Set from the host by [`Params::for_host`]; not stored.
    #[serde(skip)]
    pub cpus: usize,
    /// Contention measured over block sizes and reader counts; None in
    /// model files from before it was measured (and in the presets): γ_c
    /// then stands for it, the same at every size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<Contention>,
    /// Bytes of a source's address space under one page lock (a page of
    /// page-table entries, 2 MiB with 4 KiB pages, on kernels with split
    /// page-table locks): copies of disjoint ranges of one buffer contend
    /// only with those in the same span.  0: every copy from the source
    /// contends, as Contention-Aware Kernel-Assisted MPI Collectives
    /// measured.
    #[serde(default)]
    pub lock_span: u64,
    /// How much longer the p−1 steps of the ring schedules (ring-source,
    /// ring-neighbor, pairwise, ring) take than p−1 steps in lockstep:
    /// nothing synchronises the steps, so ranks drift apart and a step's
    /// copies no longer run together.  1 unless calibrated (fitted to
    /// `ring_points`).
    #[serde(default = "full_efficiency")]
    pub ring_drift: f64,
    /// Measured ring-source allgathers on the calibration's team, for the
    /// record and the fit report: (bytes per block, seconds).
    #[serde(default)]
    pub ring_points: Vec<(u64, f64)>,
}

fn full_efficiency() -> f64 {
    1.0
}

/// How well a fitted term matches the measurements it was fitted to.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The term.
    pub term: &'static str,
    /// Measured points.
    pub points: usize,
    /// The largest |model − measured| / measured over them.
    pub worst: f64,
    /// Where the worst one is ("c=3", "m=2", "65536 B").
    pub worst_at: String,
    /// The mean of |model − measured| / measured.
    pub mean: f64,
}

impl Fit {
    fn of(
        term: &'static str,
        at: fn(u64) -> String,
        pairs: impl Iterator<Item = (u64, f64, f64)>,
    ) -> Option<Fit> {
        let errs: Vec<(u64, f64)> = pairs
            .filter(|&(_, _, seen)| seen > 0.0)
            .map(|(x, model, seen)| (x, (model - seen).abs() / seen))
            .collect();
        let (worst_at, worst) = errs.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1))?;
        Some(Fit {
            term,
            points: errs.len(),
            worst,
            worst_at: at(worst_at),
            mean: errs.iter().map(|e| e.1).sum::<f64>() / errs.len() as f64,
        })
    }
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} points, mean error {:.1}%, worst {:.1}% (at {})",
            self.term,
            self.points,
            100.0 * self.mean,
            100.0 * self.worst,
            self.worst_at
        )
    }
}

impl Default for Params {
    /// A mid-range x86 guess (Broadwell-like), used until `calibrate` ran.
    fn default() -> Params {
        let mut p = Params::broadwell();
        p.source = "default (Broadwell-like guess; run `knem-coll calibrate`)".into();
        p
    }
}

const US: f64 = 1e-6;

impl Params {
    fn table_iv(
        name: &str,
        alpha_us: f64,
        gbps: f64,
        l_us: f64,
        page: u64,
        a: f64,
        b: f64,
    ) -> Params {
        Params {
            source: format!("Contention-Aware Kernel-Assisted MPI Collectives Table IV, {name}"),
            alpha: alpha_us * US,
            beta: 1.0 / (gbps * 1e9),
            l: l_us * US,
            page,
            gamma_a: a,
            gamma_b: b,
            sync: 1.0 * US,
            signal: 0.5 * US,
            gamma_points: Vec::new(),
            bw_par: 1.0,
            oversub: 0.0,
            cache: 0,
            step_points: Vec::new(),
            cpus: 0,
            contention: None,
            lock_span: 0,
            ring_drift: 1.0,
            ring_points: Vec::new(),
        }
    }

    /// Contention-Aware Kernel-Assisted MPI Collectives Table IV: Knights Landing.
    pub fn knl() -> Params {
        Params::table_iv("KNL", 1.43, 3.29, 0.25, 4096, 0.11, 1.6)
    }

    /// Contention-Aware Kernel-Assisted MPI Collectives Table IV: Broadwell.
    pub fn broadwell() -> Params {
        Params::table_iv("Broadwell", 0.98, 13.2, 0.11, 4096, 0.18, 0.83)
    }

    /// Contention-Aware Kernel-Assisted MPI Collectives Table IV: Power8.
    pub fn power8() -> Params {
        Params::table_iv("Power8", 0.75, 3.17, 0.53, 65536, 0.04, 1.95)
    }

    /// A preset by name (knl, broadwell, power8).
    pub fn preset(name: &str) -> Option<Params> {
        match name.to_ascii_lowercase().as_str() {
            "knl" => Some(Params::knl()),
            "broadwell" => Some(Params::broadwell()),
            "power8" => Some(Params::power8()),
            _ => None,
        }
    }

    /// γ_c.
    pub fn gamma(&self, c: usize) -> f64 {
        if c <= 1 {
            1.0
        } else {
            let c = c as f64;
            (self.gamma_a * c * c + self.gamma_b * c).max(1.0)
        }
    }

    /// The same parameters for the CPUs this process may run on
    /// (`KNEM_RS_CPUS` overrides; 0 means one CPU per rank).
    pub fn for_host(mut self) -> Params {
        self.cpus = host_cpus();
        self
    }

    /// δ_m for n-byte copies: how much m copies running at once stretch
    /// each one, for the part of a copy beyond the private cache.
    pub fn delta(&self, m: usize, n: u64) -> f64 {
        let m = m.max(1) as f64;
        let full = m / (1.0 + self.bw_par.clamp(0.0, 1.0) * (m - 1.0));
        1.0 + (full - 1.0) * self.beyond_cache(n)
    }

    fn beyond_cache(&self, n: u64) -> f64 {
        if self.cache == 0 || n == 0 {
            1.0
        } else {
            (1.0 - self.cache as f64 / n as f64).max(0.0)
        }
    }

    /// [`Params::step_cost`] for `movers` ranks that each copy their own
    /// n-byte block of one rank's buffer at once, `access` saying whether
    /// they read it (scatter) or write it (gather).  Uses the measured
    /// steps of that shape when the calibration took them, else the
    /// same-bytes grid among the copies under one page lock.
    pub fn blocks_step_cost(&self, n: u64, movers: usize, access: Access) -> CopyCost {
        let mut t = self.step_cost(n, movers, movers);
        let Some(g) = self.contention.as_ref().filter(|g| g.is_valid()) else {
            return self.step_cost(n, movers, self.contenders(n, movers));
        };
        let c = t.readers;
        let measured = match access {
            Access::Write => g
                .write_excess(n, c, self.page)
                .map(|x| (x, "own blocks, writes")),
            _ => None,
        }
        .or_else(|| g.apart_excess(n, c, self.page).map(|x| (x, "own blocks")));
        match measured {
            Some((x, what)) => {
                t.excess = x;
                t.pin_excess = None;
                t.grid = what;
                t
            }
            None => self.step_cost(n, movers, self.contenders(n, movers)),
        }
    }

    /// A step in which `movers` ranks each copy n bytes at once, at most
    /// `per_source` of them from the same source process.  Contention-Aware Kernel-Assisted MPI Collectives has a
    /// core per rank: all movers run together and contend with γ at
    /// `per_source`.  With fewer CPUs only `cpus` copies run at a time (so
    /// γ and δ at no more than that) and the step takes movers/cpus such
    /// rounds (fractional: the scheduler time-slices the copies), plus the
    /// calibrated cost of time slicing.
    pub fn step(&self, n: u64, movers: usize, per_source: usize) -> f64 {
        self.step_cost(n, movers, per_source).seconds()
    }

    /// [`Params::step`] with its parts.
    pub fn step_cost(&self, n: u64, movers: usize, per_source: usize) -> CopyCost {
        let movers = movers.max(1);
        let run = if self.cpus == 0 {
            movers
        } else {
            movers.min(self.cpus)
        };
        let c = per_source.clamp(1, run);
        let mut t = self.copy_cost(n, c, run);
        t.rounds = (movers as f64 / run as f64).max(1.0);
        if movers > run {
            t.rounds *= 1.0 + self.oversub.max(0.0);
        }
        t
    }

    /// One transfer of n bytes with c concurrent accessors of the source,
    /// while `run` copies (this one included) run at once.
    pub fn transfer(&self, n: u64, c: usize, run: usize) -> f64 {
        self.copy_cost(n, c, run).seconds()
    }

    /// [`Params::transfer`] with its parts: the lone copy α + nβ + l·pages,
    /// the contention excess (measured X(n, c), else l(γ_c − 1)·pages)
    /// and the stretch of bandwidth shared with the other copies running.
    pub fn copy_cost(&self, n: u64, c: usize, run: usize) -> CopyCost {
        let mut t = CopyCost {
            alpha: self.alpha,
            readers: c.max(1),
            stretch: 1.0,
            rounds: 1.0,
            grid: "gamma",
            ..CopyCost::default()
        };
        if n == 0 {
            return t;
        }
        let pages = n.div_ceil(self.page.max(1)) as f64;
        t.bytes = n as f64 * self.beta;
        t.pages = self.l * pages;
        match self.contention.as_ref().filter(|g| g.is_valid()) {
            Some(g) => {
                t.excess = g.copy_excess(n, c, self.page);
                t.pin_excess = g.pin_excess(n, c, self.page);
                t.grid = "same bytes";
                // The grid's c copies shared bandwidth already.
                t.stretch = self.delta(run, n) / self.delta(c.min(run), n);
            }
            None => {
                t.excess = self.l * (self.gamma(c) - 1.0) * pages;
                t.stretch = self.delta(run, n);
            }
        }
        t
    }

    /// How many of c copies of disjoint n-byte ranges of one buffer
    /// contend with each other: those under the same page lock.
    pub fn contenders(&self, n: u64, c: usize) -> usize {
        if self.lock_span == 0 || n == 0 {
            return c.max(1);
        }
        (self.lock_span.div_ceil(n) as usize).clamp(1, c.max(1))
    }

    /// Fit `bw_par` and `oversub` to steps of m concurrent n-byte copies
    /// from one process (`points`: m, time relative to m = 1), the other
    /// parameters and `cpus` being set.  Steps within the CPUs give e,
    /// oversubscribed ones what sharing the CPUs evenly leaves out.
    pub fn fit_steps(&mut self, points: &[(usize, f64)], n: u64) {
        let pages = n.div_ceil(self.page.max(1)) as f64;
        let one = self.transfer(n, 1, 1);
        let copy = |c: usize| n as f64 * self.beta + self.l * self.gamma(c) * pages;
        let fits = |m: usize| self.cpus == 0 || m <= self.cpus;
        let e: Vec<f64> = points
            .iter()
            .filter(|&&(m, _)| m >= 2 && fits(m) && copy(m) > 0.0)
            .map(|&(m, r)| {
                // The measured stretch, then the one of a copy that misses
                // the cache entirely.
                let seen = (r * one - self.alpha) / copy(m);
                let full = 1.0 + (seen - 1.0) / self.beyond_cache(n).max(0.05);
                (m as f64 / full.max(1e-9) - 1.0) / (m as f64 - 1.0)
            })
            .collect();
        if !e.is_empty() {
            self.bw_par = (e.iter().sum::<f64>() / e.len() as f64).clamp(0.0, 1.0);
        }
        self.oversub = 0.0;
        let o: Vec<f64> = points
            .iter()
            .filter(|&&(m, _)| !fits(m))
            .map(|&(m, r)| r * one / self.step(n, m, m) - 1.0)
            .collect();
        if !o.is_empty() {
            self.oversub = (o.iter().sum::<f64>() / o.len() as f64).max(0.0);
        }
    }

    fn t_sm(&self, p: usize) -> f64 {
        self.sync * (p.max(2) as f64).log2().ceil()
    }

    /// Predicted time of `alg` for `op` with `n` bytes per block (the whole
    /// message for bcast) on `p` ranks, `nodes` NUMA nodes of at most
    /// `group` ranks.  None when the algorithm does not implement `op`.
    pub fn cost(
        &self,
        op: Op,
        alg: Algorithm,
        n: u64,
        p: usize,
        nodes: usize,
        group: usize,
    ) -> Option<f64> {
        Some(self.predict(op, alg, n, p, nodes, group)?.total())
    }

    /// [`Params::cost`] term by term.
    pub fn predict(
        &self,
        op: Op,
        alg: Algorithm,
        n: u64,
        p: usize,
        nodes: usize,
        group: usize,
    ) -> Option<Prediction> {
        use Algorithm::*;
        if !alg.supports(op) {
            return None;
        }
        let mut out = Prediction::default();
        if p <= 1 {
            return Some(out);
        }
        let q = p - 1;
        let sm = self.t_sm(p);
        let syncs = |out: &mut Prediction, count: usize| {
            out.add("synchronisation (barriers)", count as f64, sm);
        };
        let signals = |out: &mut Prediction, count: usize| {
            if count > 0 {
                out.add("progress signals", count as f64, self.signal);
            }
        };
        // Steps of c concurrent copies of the same bytes, of disjoint
        // ranges of one buffer, and from distinct sources; all serialized
        // beyond the CPU count (see `step`).
        let shared = |out: &mut Prediction, count: usize, n, c| {
            out.step(count as f64, self.step_cost(n, c, c), n, c);
        };
        // Scatter reads, gather writes, blocks of the root's buffer.
        let access = if op == Op::Gather {
            Access::Write
        } else {
            Access::Read
        };
        let disjoint = |out: &mut Prediction, count: usize, n, c| {
            out.step(count as f64, self.blocks_step_cost(n, c, access), n, c);
        };
        let apart = |out: &mut Prediction, count: usize, n, c| {
            out.step(count as f64, self.step_cost(n, c, 1), n, c);
        };
        let one_to_all = op == Op::Scatter || op == Op::Gather;
        match alg {
            DirectRead | DirectWrite if alg == DirectRead || op == Op::Gather => {
                // Everyone at once: the same bytes (bcast) or disjoint
                // blocks of the root's buffer.
                syncs(&mut out, 2);
                if one_to_all {
                    disjoint(&mut out, 1, n, q);
                } else {
                    shared(&mut out, 1, n, q);
                }
            }
            DirectRead | DirectWrite | Sequential => {
                syncs(&mut out, 2);
                shared(&mut out, q, n, 1);
            }
            Throttled(k) => {
                let k = k.clamp(1, q);
                let waves = q.div_ceil(k);
                syncs(&mut out, 2);
                if one_to_all {
                    disjoint(&mut out, waves, n, k);
                } else {
                    shared(&mut out, waves, n, k);
                }
                signals(&mut out, waves);
            }
            Knomial(k) => {
                // Ranks read as soon as their parent has the data, in
                // waves (see `knomial_waves`); a wave after the first
                // waits for a signal.
                let waves = knomial_waves(p, k);
                syncs(&mut out, 2);
                for &(movers, per_source) in &waves {
                    out.step(1.0, self.step_cost(n, movers, per_source), n, movers);
                }
                signals(&mut out, waves.len().saturating_sub(1));
            }
            ScatterAllgather => {
                let c = n.div_ceil(p as u64);
                // The root writes q chunks alone, then q steps in which
                // the q others read at once, each from another rank.
                syncs(&mut out, 3);
                shared(&mut out, q, c, 1);
                apart(&mut out, q, c, q);
            }
            Hierarchical => {
                let leaders = nodes.max(1) - 1;
                let members = group.max(1) - 1;
                // Members of every node read from their leaders at once.
                let movers = p.saturating_sub(nodes.max(1)).max(members);
                syncs(&mut out, 2);
                if leaders > 0 {
                    shared(&mut out, 1, n, leaders);
                    signals(&mut out, 1);
                }
                if members > 0 {
                    out.step(1.0, self.step_cost(n, movers, members), n, movers);
                }
            }
            // q steps in which all p ranks copy at once, each from its own
            // source.
            RingSource | Pairwise | Ring => {
                syncs(&mut out, 2);
                apart(&mut out, q, n, p);
                self.drift(&mut out, q, n, p);
            }
            RingNeighbor => {
                syncs(&mut out, 2);
                apart(&mut out, q, n, p);
                self.drift(&mut out, q, n, p);
                signals(&mut out, q);
            }
            RecursiveDoubling | Bruck => {
                let plan = if alg == Bruck {
                    schedule::bruck
                } else {
                    schedule::recursive_doubling
                };
                syncs(&mut out, 2);
                let steps = schedule::log_steps(p);
                for j in 0..steps {
                    // The step lasts as long as its biggest read, at the
                    // most readers one source serves.
                    let (mut blocks, mut runs, mut movers) = (0, 1, 0);
                    let mut per_source = vec![0usize; p];
                    for r in 0..p {
                        if let Some((src, first, count)) = plan(r, j, p) {
                            blocks = blocks.max(count);
                            runs = runs.max(schedule::runs(first, count, p).len());
                            per_source[src] += 1;
                            movers += 1;
                        }
                    }
                    let c = per_source.iter().copied().max().unwrap_or(1);
                    let mut t = self.step_cost(n * blocks as u64, movers, c);
                    t.alpha *= runs as f64;
                    out.step(1.0, t, n * blocks as u64, movers);
                }
                signals(&mut out, steps.saturating_sub(1));
            }
        }
        Some(out)
    }

    /// The ring schedules' q unsynchronised steps of p copies of n bytes:
    /// what they take beyond lockstep ([`Params::ring_drift`]).
    fn drift(&self, out: &mut Prediction, q: usize, n: u64, p: usize) {
        if self.ring_drift != 1.0 && n > 0 {
            let step = self.step_cost(n, p, 1).seconds();
            out.add(
                "drift of unsynchronised steps",
                q as f64,
                step * (self.ring_drift - 1.0),
            );
        }
    }

    /// Fit [`Params::ring_drift`] to measured ring-source allgathers of `p`
    /// ranks (`points`: bytes per block, seconds), the other parameters
    /// being set: the mean over the points of the measured time of the
    /// steps (the whole minus the model's synchronisation) over the
    /// model's lockstep steps.  Kept within 0.5 to 20.
    pub fn fit_ring_drift(&mut self, points: &[(u64, f64)], p: usize) {
        self.ring_drift = 1.0;
        let q = p.saturating_sub(1);
        let d: Vec<f64> = points
            .iter()
            .filter(|&&(n, t)| n > 0 && t > 0.0 && q > 0)
            .map(|&(n, t)| {
                let steps = q as f64 * self.step_cost(n, p, 1).seconds();
                let fixed = self
                    .cost(Op::Allgather, Algorithm::RingSource, n, p, 1, p)
                    .unwrap_or(0.0)
                    - steps;
                (t - fixed) / steps.max(1e-12)
            })
            .collect();
        if !d.is_empty() {
            self.ring_drift = (d.iter().sum::<f64>() / d.len() as f64).clamp(0.5, 20.0);
        }
    }

    /// How well each fitted term matches its own measurements (the
    /// calibration's report): γ_c against its points (copies within the
    /// CPUs), the steps of m copies against theirs (relative to one copy),
    /// and ring-source allgathers of `p` ranks against theirs.
    pub fn fit_report(&self, p: usize, step_bytes: u64) -> Vec<Fit> {
        let within = |c: usize| self.cpus == 0 || c <= self.cpus;
        let gamma = Fit::of(
            "gamma_c (lock contention)",
            |c| format!("c={c}"),
            self.gamma_points
                .iter()
                .filter(|&&(c, _)| within(c))
                .map(|&(c, g)| (c as u64, self.gamma(c), g)),
        );
        let one = self.step(step_bytes, 1, 1);
        let steps = Fit::of(
            "steps of m copies (bandwidth, CPU turns)",
            |m| format!("m={m}"),
            self.step_points
                .iter()
                .map(|&(m, r)| (m as u64, self.step(step_bytes, m, m) / one, r)),
        );
        let ring = Fit::of(
            "ring drift (unsynchronised steps)",
            |n| format!("{n} B per block"),
            self.ring_points.iter().map(|&(n, t)| {
                let model = self.cost(Op::Allgather, Algorithm::RingSource, n, p, 1, p);
                (n, model.unwrap_or(0.0), t)
            }),
        );
        [gamma, steps, ring].into_iter().flatten().collect()
    }

    /// Every candidate with its predicted cost, cheapest first (ties keep
    /// the order of [`Op::algorithms`]).
    pub fn explain(
        &self,
        op: Op,
        n: u64,
        p: usize,
        nodes: usize,
        group: usize,
    ) -> Vec<(Algorithm, f64)> {
        self.rank(op, n, p, nodes, group, &op.algorithms(p, nodes))
    }

    /// `candidates` with their predicted costs, cheapest first.
    pub fn rank(
        &self,
        op: Op,
        n: u64,
        p: usize,
        nodes: usize,
        group: usize,
        candidates: &[Algorithm],
    ) -> Vec<(Algorithm, f64)> {
        let mut v: Vec<(Algorithm, f64)> = candidates
            .iter()
            .filter_map(|&a| self.cost(op, a, n, p, nodes, group).map(|c| (a, c)))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v
    }

    /// The planner's choice and its predicted cost.
    pub fn plan(&self, op: Op, n: u64, p: usize, nodes: usize, group: usize) -> (Algorithm, f64) {
        self.explain(op, n, p, nodes, group)
            .into_iter()
            .next()
            .unwrap_or((op.algorithms(p, nodes)[0], 0.0))
    }

    /// Fit γ_c = a·c² + b·c to measured points by least squares.
    pub fn fit_gamma(points: &[(usize, f64)]) -> (f64, f64) {
        // Normal equations of min Σ (a c² + b c − g)².
        let (mut s4, mut s3, mut s2, mut s2g, mut s1g) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(c, g) in points {
            let c = c as f64;
            s4 += c.powi(4);
            s3 += c.powi(3);
            s2 += c * c;
            s2g += c * c * g;
            s1g += c * g;
        }
        let det = s4 * s2 - s3 * s3;
        if det.abs() < 1e-12 {
            let b = if s2 > 0.0 { s1g / s2 } else { 1.0 };
            return (0.0, b);
        }
        let a = (s2g * s2 - s3 * s1g) / det;
        if a < 0.0 {
            // A concave fit extrapolates to γ < 1 at high concurrency
            // (typical with few points); keep it linear instead.
            return (0.0, s1g / s2);
        }
        (a, (s4 * s1g - s3 * s2g) / det)
    }
}

/// How the ranks of a step touch the buffer they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// They read it.
    Read,
    /// They write it.
    Write,
}

/// One copy's predicted time, in parts (seconds).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CopyCost {
    /// Which measurement the contention comes from: "same bytes" (the
    /// grid of readers of one block), "own blocks" / "own blocks, writes"
    /// (steps of ranks copying their own blocks of one buffer), "gamma"
    /// (γ_c of the pinning, no grid).
    pub grid: &'static str,
    /// α: the call.
    pub alpha: f64,
    /// nβ: the bytes, alone.
    pub bytes: f64,
    /// l·pages: pinning the pages, alone.
    pub pages: f64,
    /// Contention: what the other readers of the source add.
    pub excess: f64,
    /// The part of `excess` that pinning alone shows, when measured.
    pub pin_excess: Option<f64>,
    /// Concurrent readers of the source this copy contends with (itself
    /// included).
    pub readers: usize,
    /// Bandwidth shared with the other copies running at once (δ).
    pub stretch: f64,
    /// Turns the step takes on the CPUs (1 with a CPU per copy).
    pub rounds: f64,
}

impl CopyCost {
    /// The copy's time.
    pub fn seconds(&self) -> f64 {
        (self.alpha + (self.bytes + self.pages + self.excess) * self.stretch) * self.rounds
    }
}

/// One term of a prediction: `count` × `each` seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// What it is.
    pub what: String,
    /// How many in sequence.
    pub count: f64,
    /// Seconds of one.
    pub each: f64,
    /// The parts of one, when it is a step of copies.
    pub copy: Option<CopyCost>,
}

/// A predicted time as the terms it sums.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prediction {
    /// The terms, in the order the algorithm runs them.
    pub terms: Vec<Term>,
}

impl Prediction {
    /// The predicted time.
    pub fn total(&self) -> f64 {
        self.terms.iter().map(|t| t.count * t.each).sum()
    }

    fn add(&mut self, what: &str, count: f64, each: f64) {
        self.terms.push(Term {
            what: what.to_string(),
            count,
            each,
            copy: None,
        });
    }

    fn step(&mut self, count: f64, copy: CopyCost, n: u64, movers: usize) {
        self.terms.push(Term {
            what: format!("steps of {movers} copies of {n} B"),
            count,
            each: copy.seconds(),
            copy: Some(copy),
        });
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |s: f64| s * 1e6;
        write!(
            f,
            "{:>6} x {:>10.2} us  {}",
            format!("{}", self.count),
            us(self.each),
            self.what
        )?;
        if let Some(c) = &self.copy {
            write!(
                f,
                ": alpha {:.2} + bytes {:.2} + pages {:.2} + contention({} per source, {}) {:.2}",
                us(c.alpha),
                us(c.bytes),
                us(c.pages),
                c.readers,
                c.grid,
                us(c.excess)
            )?;
            if let Some(pin) = c.pin_excess {
                write!(f, " (pinning {:.2})", us(pin))?;
            }
            if c.stretch != 1.0 {
                write!(f, ", x{:.3} shared bandwidth", c.stretch)?;
            }
            if c.rounds != 1.0 {
                write!(f, ", x{:.3} CPU turns", c.rounds)?;
            }
        }
        Ok(())
    }
}

/// The waves of the k-nomial broadcast as the collective runs it: virtual
/// rank v reads from v without its leading base-k digit as soon as that
/// parent has the data, so wave w is the ranks with w non-zero digits (the
/// root's children, at every level, read at once in wave 1).  Per wave:
/// (readers, most readers of one parent).
pub fn knomial_waves(p: usize, k: usize) -> Vec<(usize, usize)> {
    let k = k.max(2);
    let mut waves: Vec<BTreeMap<usize, usize>> = Vec::new();
    for v in 1..p {
        let (mut digits, mut span, mut x) = (0, 1usize, v);
        while x > 0 {
            digits += usize::from(x % k != 0);
            x /= k;
            if x > 0 {
                span = span.saturating_mul(k);
            }
        }
        if waves.len() < digits {
            waves.resize_with(digits, BTreeMap::new);
        }
        *waves[digits - 1].entry(v % span).or_insert(0) += 1;
    }
    waves
        .iter()
        .map(|w| (w.values().sum(), w.values().copied().max().unwrap_or(1)))
        .collect()
}

/// Environment: the model file.
pub const ENV_MODEL: &str = "KNEM_RS_MODEL";

/// Where the model lives: $KNEM_RS_MODEL, else
/// $XDG_CACHE_HOME/knem-rs/model.json, else ~/.cache/knem-rs/model.json.
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os(ENV_MODEL) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("knem-rs").join("model.json")
}

/// The model file: parameters per transport.
pub type ModelFile = BTreeMap<String, Params>;

/// Read the model file at `path`.
pub fn load(path: &std::path::Path) -> Result<ModelFile> {
    let text =
        std::fs::read_to_string(path).map_err(Error::io(format!("read {}", path.display())))?;
    crate::model_file::read(&text).map_err(|e| {
        Error::Invalid(format!(
            "{}: not a knem-rs model file ({e})",
            path.display()
        ))
    })
}

/// Store `params` for `kind` in the model file at `path`, keeping others.
/// A file that is there but is not a model file is refused, never replaced.
pub fn store(path: &std::path::Path, kind: Kind, params: &Params) -> Result<()> {
    let mut all = match load(path) {
        Ok(all) => all,
        Err(_) if !path.exists() => ModelFile::new(),
        Err(e) => return Err(e),
    };
    all.insert(kind.name().to_string(), params.clone());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    }
    let text = crate::model_file::write(&all);
    std::fs::write(path, text).map_err(Error::io(format!("write {}", path.display())))
}

/// The node-wide model that `knem-coll calibrate --system` writes: teams
/// of users who have no calibration of their own read it.
pub const SYSTEM_MODEL: &str = "/etc/knem-rs/model.json";

/// The model files a team reads, first match wins: $KNEM_RS_MODEL alone
/// when set, else the user's [`model_path`] then [`SYSTEM_MODEL`].
pub fn model_paths() -> Vec<PathBuf> {
    if std::env::var_os(ENV_MODEL).is_some() {
        vec![model_path()]
    } else {
        vec![model_path(), PathBuf::from(SYSTEM_MODEL)]
    }
}

/// The parameters of `kind` in the first of `paths` that has them (files
/// missing or unreadable are passed over), with the file they came from.
pub fn load_first(paths: &[PathBuf], kind: Kind) -> Option<(Params, PathBuf)> {
    load_first_noting(paths, kind, |_| {})
}

/// As [`load_first`], and `note` gets one line for each file that is there
/// but was passed over (not readable, not a model file); a missing file is
/// the normal state of a node never calibrated and is not noted.
pub fn load_first_noting(
    paths: &[PathBuf],
    kind: Kind,
    mut note: impl FnMut(String),
) -> Option<(Params, PathBuf)> {
    paths.iter().find_map(|path| match load(path) {
        Ok(mut all) => Some((all.remove(kind.name())?, path.clone())),
        Err(Error::Invalid(m)) => {
            note(format!("passed over {m}"));
            None
        }
        Err(e) => {
            if path.exists() {
                note(format!("passed over {}: {e}", path.display()));
            }
            None
        }
    })
}

impl Params {
    /// The calibrated parameters of `kind` from [`model_paths`], if any.
    pub fn load_for(kind: Kind) -> Option<Params> {
        load_first(&model_paths(), kind).map(|(p, _)| p)
    }
}

/// CPUs this process may run on: `KNEM_RS_CPUS` if set, else the affinity
/// mask / cgroup quota as std sees it (online CPUs at most).
pub fn host_cpus() -> usize {
    if let Some(n) = std::env::var("KNEM_RS_CPUS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return n;
    }
    std::thread::available_parallelism().map_or(0, |n| n.get())
}
