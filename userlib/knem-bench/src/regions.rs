//! `region-cost` and `reuse`: what declaring a region costs, against CMA,
//! which pins on every copy (the KNEM paper (Goglin & Moreaud, KNEM: a Generic and Scalable Kernel-Assisted Intra-node MPI Communication Framework) §5, Fig. 13; Data Transfer in a SMP System Table III).
//!
//! Both run in one process: the kernel work (pin, insert, look up, copy,
//! unpin) is the same whichever process owns the region, and leaving out
//! the cross-process hand-off isolates it.

use crate::cma;
use crate::error::{Context, Result};
use crate::knemdev::Device;
use crate::mem::{self, Mapping, PAGE};
use crate::report::{fmt_bw, fmt_ratio, fmt_sz, fmt_us, Record, Table};
use crate::stats::{median, mib_per_s, min_max, ratio};
use nix::unistd::getpid;
use std::time::{Duration, Instant};

/// Settings for the single-process region benchmarks.
pub struct Settings {
    /// Region / message sizes.
    pub sizes: Vec<u64>,
    /// Repetitions per point.
    pub reps: u32,
    /// Bytes per repetition (sets the iteration count).
    pub target: u64,
    /// Cap on operations per repetition.
    pub max_iters: u64,
}

impl Settings {
    fn iters(&self, size: u64) -> u64 {
        (self.target / size).clamp(2, self.max_iters.max(2))
    }
}

fn rec(bench: &str, mech: &str, size: u64, param: u64, iters: u64, us: &[f64]) -> Record {
    let m = median(us).unwrap_or(f64::NAN);
    let (lo, hi) = min_max(us).unwrap_or((f64::NAN, f64::NAN));
    Record {
        bench: bench.into(),
        mechanism: mech.into(),
        cache: "hot".into(),
        size,
        param,
        reps: us.len() as u32,
        iters,
        median_us: m,
        min_us: lo,
        max_us: hi,
        mib_s: mib_per_s(size, m * 1000.0),
        aggregate_mib_s: None,
        vs_memcpy: None,
        vs_cma: None,
        vs_base: None,
    }
}

fn per_op(total: Duration, n: u64) -> f64 {
    total.as_nanos() as f64 / n as f64 / 1000.0
}

/// The two references every table carries: memcpy and CMA reading this
/// process (pin + copy + unpin on every call).
fn references(
    size: usize,
    iters: u64,
    src: &Mapping,
    dst: &Mapping,
    cma_ok: bool,
) -> Result<(f64, Option<f64>)> {
    let t = Instant::now();
    for _ in 0..iters {
        // SAFETY: both mappings are ours and at least `size` long.
        unsafe { mem::copy(dst.ptr(), src.ptr(), size) };
    }
    let memcpy = per_op(t.elapsed(), iters);
    let cma = if cma_ok {
        let t = Instant::now();
        for _ in 0..iters {
            // SAFETY: dst is ours and at least `size` long.
            unsafe { cma::read(getpid(), dst.ptr(), src.ptr() as usize, size)? };
        }
        Some(per_op(t.elapsed(), iters))
    } else {
        None
    };
    Ok((memcpy, cma))
}

fn buffers(max: usize) -> Result<(Mapping, Mapping)> {
    let mut src = Mapping::private(max)?;
    src.fill(3);
    let mut dst = Mapping::private(max)?;
    dst.fill(4);
    Ok((src, dst))
}

/// Region create / destroy cost by size, with memcpy and CMA per-copy cost.
pub fn region_cost(st: &Settings, knem: bool, cma_ok: bool) -> Result<Vec<Record>> {
    let max = *st.sizes.iter().max().unwrap_or(&4096) as usize;
    let (src, dst) = buffers(max)?;
    let dev = if knem { Some(Device::open()?) } else { None };
    let pb = crate::progress::bar(st.sizes.len() as u64, "region-cost");
    let mut recs = Vec::new();
    for &size in &st.sizes {
        let n = st.iters(size);
        let (mut cr, mut de, mut mc, mut cm) = (vec![], vec![], vec![], vec![]);
        for _ in 0..st.reps {
            if let Some(d) = &dev {
                let (mut tc, mut td) = (Duration::ZERO, Duration::ZERO);
                for _ in 0..n {
                    let t = Instant::now();
                    // SAFETY: `src` outlives the region, destroyed below.
                    let c = unsafe { d.create_region(src.ptr(), size as usize)? };
                    tc += t.elapsed();
                    let t = Instant::now();
                    d.destroy_region(c)?;
                    td += t.elapsed();
                }
                cr.push(per_op(tc, n));
                de.push(per_op(td, n));
            }
            let (m, c) = references(size as usize, n, &src, &dst, cma_ok)?;
            mc.push(m);
            if let Some(c) = c {
                cm.push(c);
            }
        }
        let pin_est: Vec<f64> = cm.iter().zip(&mc).map(|(c, m)| c - m).collect();
        let both: Vec<f64> = cr.iter().zip(&de).map(|(a, b)| a + b).collect();
        for (name, v) in [
            ("knem-create", &cr),
            ("knem-destroy", &de),
            ("knem-create+destroy", &both),
            ("cma-read", &cm),
            ("cma-minus-memcpy", &pin_est),
            ("memcpy", &mc),
        ] {
            if !v.is_empty() {
                let mut r = rec("region-cost", name, size, 0, n, v);
                // what one region costs per page, ns (vs_base)
                r.vs_base = Some(r.median_us * 1000.0 / size.div_ceil(PAGE as u64) as f64);
                recs.push(r);
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(recs)
}

/// Copy cost on one region while `n` regions are alive.
pub fn live_regions(counts: &[u64], copy_size: u64, reps: u32, iters: u64) -> Result<Vec<Record>> {
    let (src, dst) = buffers(copy_size as usize)?;
    let pb = crate::progress::bar(counts.len() as u64, "live-regions");
    let mut recs = Vec::new();
    for &n in counts {
        let dev = Device::open()?;
        let mut cookies = Vec::with_capacity(n as usize);
        let t = Instant::now();
        for i in 0..n {
            // SAFETY: `src` outlives `dev`, whose closing destroys them all.
            let c = unsafe { dev.create_region(src.ptr(), copy_size as usize) }
                .ctx(format_args!("creating live region {} of {n}", i + 1))?;
            cookies.push(c);
        }
        let create_us = per_op(t.elapsed(), n.max(1));
        let target = cookies[cookies.len() / 2];
        let mut v = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            for _ in 0..iters {
                // SAFETY: dst is ours and copy_size long.
                unsafe { dev.inline_copy(dst.ptr(), copy_size as usize, false, target, 0)? };
            }
            v.push(per_op(t.elapsed(), iters));
        }
        pb.suspend(|| {
            eprintln!("knem-bench: live-regions: {n} regions created at {create_us:.2} us each")
        });
        recs.push(rec("live-regions", "knem-read", copy_size, n, iters, &v));
        drop(dev); // closing the fd destroys all n regions
        pb.inc(1);
    }
    pb.finish_and_clear();
    let base = recs.first().map(|r| r.median_us);
    for r in &mut recs {
        r.vs_base = base.and_then(|b| ratio(r.median_us, b));
    }
    Ok(recs)
}

/// Most the copy time may differ, either way, between the fewest and the
/// most live regions for the lookup to count as independent of the
/// table's size (a faster copy with more regions is noise, not a win).
pub const LIVE_TOLERANCE: f64 = 0.05;

/// The lookup-cost line under the live-regions table: the copy time with
/// the most live regions against the time with the fewest.
pub fn live_ratio_line(recs: &[Record]) -> Option<String> {
    let lo = recs.iter().min_by_key(|r| r.param)?;
    let hi = recs.iter().max_by_key(|r| r.param)?;
    if hi.param == lo.param {
        return None;
    }
    let x = ratio(hi.median_us, lo.median_us)?;
    Some(format!(
        "lookup cost: a {} copy with {} live regions takes {x:.3}x its time with {} ({:.2} vs {:.2} us): {} {:.0}%\n",
        fmt_sz(hi.size),
        hi.param,
        lo.param,
        hi.median_us,
        lo.median_us,
        if (x - 1.0).abs() <= LIVE_TOLERANCE {
            "within"
        } else {
            "NOT within"
        },
        LIVE_TOLERANCE * 100.0
    ))
}

/// Reading one declared region many times vs declaring one per copy.
pub fn reuse(st: &Settings, knem: bool, cma_ok: bool) -> Result<Vec<Record>> {
    let max = *st.sizes.iter().max().unwrap_or(&4096) as usize;
    let (src, dst) = buffers(max)?;
    let dev = if knem { Some(Device::open()?) } else { None };
    let pb = crate::progress::bar(st.sizes.len() as u64, "reuse");
    let mut recs = Vec::new();
    for &size in &st.sizes {
        let n = st.iters(size);
        let s = size as usize;
        let (mut reuse, mut each, mut mc, mut cm) = (vec![], vec![], vec![], vec![]);
        for _ in 0..st.reps {
            if let Some(d) = &dev {
                // SAFETY: `src` outlives the region, destroyed below.
                let c = unsafe { d.create_region(src.ptr(), s)? };
                let t = Instant::now();
                for _ in 0..n {
                    // SAFETY: dst is ours and at least s long.
                    unsafe { d.inline_copy(dst.ptr(), s, false, c, 0)? };
                }
                reuse.push(per_op(t.elapsed(), n));
                d.destroy_region(c)?;
                let t = Instant::now();
                for _ in 0..n {
                    // SAFETY: src outlives the region and dst is ours, at
                    // least s long.
                    let c = unsafe { d.create_region(src.ptr(), s)? };
                    // SAFETY: as above.
                    unsafe { d.inline_copy(dst.ptr(), s, false, c, 0)? };
                    d.destroy_region(c)?;
                }
                each.push(per_op(t.elapsed(), n));
            }
            let (m, c) = references(s, n, &src, &dst, cma_ok)?;
            mc.push(m);
            if let Some(c) = c {
                cm.push(c);
            }
        }
        let mut group = Vec::new();
        for (name, v) in [
            ("knem-reuse", &reuse),
            ("knem-declare-each", &each),
            ("cma-read", &cm),
            ("memcpy", &mc),
        ] {
            if !v.is_empty() {
                group.push(rec("reuse", name, size, 0, n, v));
            }
        }
        let bw = |name: &str, g: &[Record]| g.iter().find(|r| r.mechanism == name).map(|r| r.mib_s);
        let (mbw, cbw, rbw) = (
            bw("memcpy", &group),
            bw("cma-read", &group),
            bw("knem-reuse", &group),
        );
        for r in &mut group {
            if r.mechanism != "memcpy" {
                r.vs_memcpy = mbw.and_then(|b| ratio(r.mib_s, b));
            }
            if r.mechanism.starts_with("knem") {
                r.vs_cma = cbw.and_then(|b| ratio(r.mib_s, b));
            }
            if r.mechanism == "knem-declare-each" {
                // how much slower declaring per copy is than reusing
                r.vs_base = rbw.and_then(|b| ratio(b, r.mib_s));
            }
        }
        recs.extend(group);
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(recs)
}

/// The region-cost table.
pub fn region_cost_table(recs: &[Record]) -> Table {
    let mut t = Table::new(
        &["size", "operation", "us/op", "ns/page", "min us", "max us"],
        2,
    );
    let mut last = None;
    for r in recs {
        if last.is_some_and(|s| s != r.size) {
            t.gap();
        }
        last = Some(r.size);
        t.row(vec![
            fmt_sz(r.size),
            r.mechanism.clone(),
            fmt_us(r.median_us),
            r.vs_base.map_or("-".into(), |x| format!("{x:.1}")),
            fmt_us(r.min_us),
            fmt_us(r.max_us),
        ]);
    }
    t
}

/// The live-regions table.
pub fn live_table(recs: &[Record]) -> Table {
    let mut t = Table::new(
        &[
            "live regions",
            "copy size",
            "us/copy",
            "x(N=1)",
            "min us",
            "max us",
        ],
        0,
    );
    for r in recs {
        t.row(vec![
            r.param.to_string(),
            fmt_sz(r.size),
            fmt_us(r.median_us),
            fmt_ratio(r.vs_base),
            fmt_us(r.min_us),
            fmt_us(r.max_us),
        ]);
    }
    t
}

/// The reuse table.
pub fn reuse_table(recs: &[Record]) -> Table {
    let mut t = Table::new(
        &[
            "size",
            "mechanism",
            "us/copy",
            "MiB/s",
            "xmemcpy",
            "xCMA",
            "slowdown",
        ],
        2,
    );
    let mut last = None;
    for r in recs {
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
            fmt_ratio(r.vs_base),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_ratio_line_compares_most_with_fewest() {
        let recs = vec![
            rec("live-regions", "knem-read", 4096, 100_000, 10, &[10.4]),
            rec("live-regions", "knem-read", 4096, 1, 10, &[10.0]),
            rec("live-regions", "knem-read", 4096, 1000, 10, &[99.0]),
        ];
        let line = live_ratio_line(&recs).unwrap();
        assert!(
            line.contains("100000 live regions takes 1.040x its time with 1"),
            "{line}"
        );
        assert!(line.contains(": within 5%"), "{line}");
        let slow = vec![
            rec("live-regions", "knem-read", 4096, 1, 10, &[10.0]),
            rec("live-regions", "knem-read", 4096, 10, 10, &[10.6]),
        ];
        assert!(live_ratio_line(&slow).unwrap().contains("NOT within 5%"));
        let noisy = vec![
            rec("live-regions", "knem-read", 4096, 1, 10, &[10.0]),
            rec("live-regions", "knem-read", 4096, 100_000, 10, &[4.0]),
        ];
        let line = live_ratio_line(&noisy).unwrap();
        assert!(
            line.contains("0.400x") && line.contains("NOT within 5%"),
            "{line}"
        );
        assert_eq!(live_ratio_line(&slow[..1]), None);
    }
}
