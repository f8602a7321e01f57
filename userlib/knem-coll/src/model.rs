//! The Contention-Aware Kernel-Assisted MPI Collectives cost model T = α + nβ + lγ_c⌈n/s⌉, its parameters, and the
//! planner that picks an algorithm (and k) per operation, size and team size.

use crate::error::{Error, Result};
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
    /// `nodes` NUMA nodes (k-variants for k = 2, 4, 8, ... below p).
    pub fn algorithms(self, p: usize, nodes: usize) -> Vec<Algorithm> {
        let ks = || {
            let mut v = Vec::new();
            let mut k = 2;
            while k < p.saturating_sub(1) {
                v.push(k);
                k *= 2;
            }
            v
        };
        use Algorithm::*;
        let mut out = match self {
            Op::Bcast => {
                let mut v = vec![DirectRead, DirectWrite];
                v.extend(ks().into_iter().map(Throttled));
                let mut k = 2;
                while k < p.max(3) {
                    v.push(Knomial(k));
                    k *= 2;
                }
                v.push(ScatterAllgather);
                if nodes > 1 {
                    v.push(Hierarchical);
                }
                v
            }
            Op::Scatter => {
                let mut v = vec![DirectRead, Sequential];
                v.extend(ks().into_iter().map(Throttled));
                v
            }
            Op::Gather => {
                let mut v = vec![DirectWrite, Sequential];
                v.extend(ks().into_iter().map(Throttled));
                v
            }
            Op::Allgather => vec![RingSource, RingNeighbor],
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
                | (Op::Allgather, RingSource | RingNeighbor)
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
}

fn full_efficiency() -> f64 {
    1.0
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

    /// A step in which `movers` ranks each copy n bytes at once, at most
    /// `per_source` of them from the same source process.  Contention-Aware Kernel-Assisted MPI Collectives has a
    /// core per rank: all movers run together and contend with γ at
    /// `per_source`.  With fewer CPUs only `cpus` copies run at a time (so
    /// γ and δ at no more than that) and the step takes movers/cpus such
    /// rounds (fractional: the scheduler time-slices the copies), plus the
    /// calibrated cost of time slicing.
    pub fn step(&self, n: u64, movers: usize, per_source: usize) -> f64 {
        let movers = movers.max(1);
        let run = if self.cpus == 0 {
            movers
        } else {
            movers.min(self.cpus)
        };
        let c = per_source.clamp(1, run);
        let t = self.transfer(n, c, run) * (movers as f64 / run as f64).max(1.0);
        if movers > run {
            t * (1.0 + self.oversub.max(0.0))
        } else {
            t
        }
    }

    /// One transfer of n bytes with c concurrent accessors of the source,
    /// while `run` copies (this one included) run at once.
    pub fn transfer(&self, n: u64, c: usize, run: usize) -> f64 {
        if n == 0 {
            return self.alpha;
        }
        let pages = n.div_ceil(self.page.max(1)) as f64;
        self.alpha + (n as f64 * self.beta + self.l * self.gamma(c) * pages) * self.delta(run, n)
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
        use Algorithm::*;
        if !alg.supports(op) {
            return None;
        }
        if p <= 1 {
            return Some(0.0);
        }
        let q = p - 1;
        let sm = self.t_sm(p);
        // c concurrent copies of n bytes from one source (γ_c), and c
        // concurrent copies from distinct sources: both serialized beyond
        // the CPU count (see `step`).
        let shared = |n, c| self.step(n, c, c);
        let apart = |n, c| self.step(n, c, 1);
        Some(match alg {
            DirectRead => 2.0 * sm + shared(n, q),
            DirectWrite if op == Op::Gather => 2.0 * sm + shared(n, q),
            DirectWrite | Sequential => 2.0 * sm + q as f64 * shared(n, 1),
            Throttled(k) => {
                let k = k.clamp(1, q);
                2.0 * sm + q.div_ceil(k) as f64 * (shared(n, k) + self.signal)
            }
            Knomial(k) => {
                // Ranks read as soon as their parent has the data, in
                // waves (see `knomial_waves`); a wave after the first
                // waits for a signal.
                let waves = knomial_waves(p, k);
                let total: f64 = waves
                    .iter()
                    .enumerate()
                    .map(|(i, &(movers, per_source))| {
                        self.step(n, movers, per_source) + if i > 0 { self.signal } else { 0.0 }
                    })
                    .sum();
                2.0 * sm + total
            }
            ScatterAllgather => {
                let c = n.div_ceil(p as u64);
                // The root writes q chunks alone, then q steps in which
                // the q others read at once, each from another rank.
                3.0 * sm + q as f64 * shared(c, 1) + q as f64 * apart(c, q)
            }
            Hierarchical => {
                let leaders = nodes.max(1) - 1;
                let members = group.max(1) - 1;
                // Members of every node read from their leaders at once.
                let movers = p.saturating_sub(nodes.max(1)).max(members);
                2.0 * sm
                    + if leaders > 0 {
                        shared(n, leaders) + self.signal
                    } else {
                        0.0
                    }
                    + if members > 0 {
                        self.step(n, movers, members)
                    } else {
                        0.0
                    }
            }
            // q steps in which all p ranks copy at once, each from its own
            // source.
            RingSource | Pairwise | Ring => 2.0 * sm + q as f64 * apart(n, p),
            RingNeighbor => 2.0 * sm + q as f64 * (apart(n, p) + self.signal),
        })
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
        let mut v: Vec<(Algorithm, f64)> = op
            .algorithms(p, nodes)
            .into_iter()
            .filter_map(|a| self.cost(op, a, n, p, nodes, group).map(|c| (a, c)))
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
    crate::model_file::read(&text).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}

/// Store `params` for `kind` in the model file at `path`, keeping others.
pub fn store(path: &std::path::Path, kind: Kind, params: &Params) -> Result<()> {
    let mut all = load(path).unwrap_or_default();
    all.insert(kind.name().to_string(), params.clone());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    }
    let text = crate::model_file::write(&all);
    std::fs::write(path, text).map_err(Error::io(format!("write {}", path.display())))
}

impl Params {
    /// The calibrated parameters of `kind` from [`model_path`], if any.
    pub fn load_for(kind: Kind) -> Option<Params> {
        load(&model_path()).ok()?.remove(kind.name())
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
