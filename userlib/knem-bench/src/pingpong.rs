//! `pingpong` and `shm-chunk`: one-way latency and bandwidth by size.

use crate::engine::{self, Cache, Run};
use crate::error::Result;
use crate::mech::Mech;
use crate::report::{fmt_bw, fmt_ratio, fmt_sz, fmt_us, Record, Table};
use crate::stats::{median, mib_per_s, min_max, ratio};
use std::collections::BTreeMap;

/// Settings shared by the two-process benchmarks.
pub struct Settings {
    /// Message sizes.
    pub sizes: Vec<u64>,
    /// Repetitions per point.
    pub reps: u32,
    /// Bytes to move per run (sets the iteration count).
    pub target: u64,
    /// Cap on round trips per run.
    pub max_iters: u64,
    /// Off-cache pool, bytes per process.
    pub pool: usize,
    /// Cache modes.
    pub caches: Vec<Cache>,
}

impl Settings {
    /// Round trips for a message size: about `target` bytes, within
    /// `1..=max_iters`.
    pub fn iters(&self, size: u64) -> u64 {
        (self.target / (2 * size)).clamp(1, self.max_iters.max(1))
    }
}

/// Samples (ns per message) per (cache, mechanism, size, chunk).
type Samples = BTreeMap<(Cache, Mech, u64, u64), Vec<f64>>;

fn sweep(st: &Settings, runs_of: impl Fn(u64) -> Vec<Run>, label: &str) -> Result<Samples> {
    // one untimed pass at the smallest size first: page tables, caches,
    // branch predictors and the kernel paths of every mechanism get warm
    let first = st.sizes.first().copied().unwrap_or(4096);
    let warm: Vec<Run> = runs_of(first)
        .into_iter()
        .map(|r| Run {
            iters: r.iters.min(20),
            ..r
        })
        .collect();
    let mut runs = warm.clone();
    for &size in &st.sizes {
        for _ in 0..st.reps {
            runs.extend(runs_of(size));
        }
    }
    let pb = crate::progress::bar((runs.len() * st.caches.len()) as u64, label);
    let mut out = Samples::new();
    for &cache in &st.caches {
        pb.set_message(cache.name());
        let ns = engine::execute(cache, st.pool, &runs, &mut || pb.inc(1))?;
        for (r, v) in runs.iter().zip(ns).skip(warm.len()) {
            out.entry((cache, r.mech, r.size as u64, r.chunk as u64))
                .or_default()
                .push(v);
        }
    }
    pb.finish_and_clear();
    Ok(out)
}

/// The record of one (cache, mechanism, size) cell from its samples (ns);
/// `iters` is the number of messages each sample timed.
pub(crate) fn record(
    bench: &str,
    cache: Cache,
    mech: Mech,
    size: u64,
    param: u64,
    iters: u64,
    v: &[f64],
) -> Record {
    let med = median(v).unwrap_or(f64::NAN) / 1000.0;
    let (lo, hi) = min_max(v).unwrap_or((f64::NAN, f64::NAN));
    Record {
        bench: bench.into(),
        mechanism: mech.name().into(),
        cache: cache.name().into(),
        size,
        param,
        reps: v.len() as u32,
        iters,
        median_us: med,
        min_us: lo / 1000.0,
        max_us: hi / 1000.0,
        mib_s: mib_per_s(size, med * 1000.0),
        aggregate_mib_s: None,
        vs_memcpy: None,
        vs_cma: None,
        vs_base: None,
    }
}

/// Fill `vs_memcpy` and `vs_cma` by comparing bandwidths in the same cache
/// mode and size.
pub fn add_ratios(recs: &mut [Record]) {
    let bw: BTreeMap<(String, String, u64), f64> = recs
        .iter()
        .map(|r| ((r.cache.clone(), r.mechanism.clone(), r.size), r.mib_s))
        .collect();
    for r in recs.iter_mut() {
        let get = |m: &str| bw.get(&(r.cache.clone(), m.to_string(), r.size)).copied();
        if r.mechanism != "memcpy" {
            r.vs_memcpy = get("memcpy").and_then(|b| ratio(r.mib_s, b));
        }
        let mech = Mech::ALL.iter().find(|m| m.name() == r.mechanism);
        if let Some(&m) = mech {
            let reference = m.cma_reference();
            if reference != m && m != Mech::Memcpy {
                r.vs_cma = get(reference.name()).and_then(|b| ratio(r.mib_s, b));
            }
        }
    }
}

/// Run the pingpong sweep.
pub fn pingpong(st: &Settings, mechs: &[Mech], chunk: u64) -> Result<Vec<Record>> {
    let samples = sweep(
        st,
        |size| {
            mechs
                .iter()
                .map(|&mech| Run {
                    mech,
                    size: size as usize,
                    chunk: chunk as usize,
                    iters: st.iters(size),
                })
                .collect()
        },
        "pingpong",
    )?;
    let mut recs: Vec<Record> = samples
        .iter()
        .map(|(&(cache, mech, size, _), v)| {
            record("pingpong", cache, mech, size, 0, 2 * st.iters(size), v)
        })
        .collect();
    in_table_order(&mut recs, mechs);
    Ok(recs)
}

/// Table order (cache, size, mechanism as given), then the ratios between
/// mechanisms of each cell.
pub(crate) fn in_table_order(recs: &mut [Record], mechs: &[Mech]) {
    recs.sort_by_key(|r| {
        (
            r.cache.clone(),
            r.size,
            mechs.iter().position(|m| m.name() == r.mechanism),
        )
    });
    add_ratios(recs);
}

/// The pingpong table of one cache mode.
pub fn pingpong_table(recs: &[Record], cache: &str) -> Table {
    copy_table(recs, "pingpong", cache)
}

/// The table of one cache mode of `bench` (pingpong, solo): time per
/// message (per copy for solo), bandwidth, ratios.
pub fn copy_table(recs: &[Record], bench: &str, cache: &str) -> Table {
    let mut t = Table::new(
        &[
            "size",
            "mechanism",
            "lat us",
            "MiB/s",
            "xmemcpy",
            "xCMA",
            "min us",
            "max us",
        ],
        2,
    );
    let mut last = None;
    for r in recs.iter().filter(|r| r.bench == bench && r.cache == cache) {
        if last.is_some_and(|s| s != r.size) {
            t.gap();
        }
        last = Some(r.size);
        t.row(vec![
            fmt_sz(r.size),
            r.mechanism.clone(),
            fmt_us(r.median_us),
            fmt_bw(r.mib_s),
            fmt_ratio(r.vs_memcpy),
            fmt_ratio(r.vs_cma),
            fmt_us(r.min_us),
            fmt_us(r.max_us),
        ]);
    }
    t
}

/// Sweep the shm chunk size for one message size (Data Transfer in a SMP System's Fig. 3).
pub fn shm_chunk(st: &Settings, size: u64, chunks: &[u64]) -> Result<Vec<Record>> {
    let one = Settings {
        sizes: vec![size],
        reps: st.reps,
        target: st.target,
        max_iters: st.max_iters,
        pool: st.pool,
        caches: st.caches.clone(),
    };
    let samples = sweep(
        &one,
        |size| {
            chunks
                .iter()
                .map(|&c| Run {
                    mech: Mech::Shm,
                    size: size as usize,
                    chunk: c as usize,
                    iters: one.iters(size),
                })
                .collect()
        },
        "shm-chunk",
    )?;
    let mut recs: Vec<Record> = samples
        .iter()
        .map(|(&(cache, mech, size, chunk), v)| {
            record(
                "shm-chunk",
                cache,
                mech,
                size,
                chunk,
                2 * one.iters(size),
                v,
            )
        })
        .collect();
    recs.sort_by_key(|r| (r.cache.clone(), r.param));
    Ok(recs)
}

/// The shm-chunk table.
pub fn shm_chunk_table(recs: &[Record]) -> Table {
    let mut t = Table::new(&["chunk", "cache", "size", "lat us", "MiB/s"], 2);
    let mut last = None;
    for r in recs {
        if last.is_some_and(|c: String| c != r.cache) {
            t.gap();
        }
        last = Some(r.cache.clone());
        t.row(vec![
            fmt_sz(r.param),
            r.cache.clone(),
            fmt_sz(r.size),
            fmt_us(r.median_us),
            fmt_bw(r.mib_s),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cache: &str, mech: &str, size: u64, mib_s: f64) -> Record {
        Record {
            bench: "pingpong".into(),
            mechanism: mech.into(),
            cache: cache.into(),
            size,
            param: 0,
            reps: 1,
            iters: 2,
            median_us: 1.0,
            min_us: 1.0,
            max_us: 1.0,
            mib_s,
            aggregate_mib_s: None,
            vs_memcpy: None,
            vs_cma: None,
            vs_base: None,
        }
    }

    #[test]
    fn ratios_compare_like_with_like() {
        let mut v = vec![
            r("hot", "memcpy", 4096, 1000.0),
            r("hot", "cma-read", 4096, 250.0),
            r("hot", "cma-write", 4096, 200.0),
            r("hot", "knem-read", 4096, 500.0),
            r("hot", "knem-write", 4096, 300.0),
            r("off", "knem-read", 4096, 100.0),
        ];
        add_ratios(&mut v);
        assert_eq!(v[0].vs_memcpy, None);
        assert_eq!(v[1].vs_memcpy, Some(0.25));
        assert_eq!(v[1].vs_cma, None, "cma-read is its own reference");
        assert_eq!(v[3].vs_cma, Some(2.0));
        assert_eq!(v[4].vs_cma, Some(1.5), "writes compare with cma-write");
        assert_eq!(v[5].vs_memcpy, None, "no memcpy measured off-cache");
        let t = pingpong_table(&v, "hot").render();
        assert!(t.lines().next().unwrap().starts_with("size  mechanism"));
        assert!(t.contains("0.25x"));
        assert!(!t.contains("off"));
    }

    #[test]
    fn iteration_counts_are_bounded() {
        let st = Settings {
            sizes: vec![],
            reps: 1,
            target: 1 << 20,
            max_iters: 100,
            pool: 0,
            caches: vec![],
        };
        assert_eq!(st.iters(1024), 100);
        assert_eq!(st.iters(64 << 20), 1);
        assert_eq!(st.iters(128 << 10), 4);
    }
}
