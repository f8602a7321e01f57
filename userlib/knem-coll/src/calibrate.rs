//! Measure α, β, l, γ_c with the transport in use (seed 002 Table III):
//! rank 0 exposes a buffer, the others read it alone and concurrently.

use crate::error::{Error, Result};
use crate::model::Params;
use crate::team::Team;
use knem_transport::{cma_pin_only, cma_touch_pages, Descriptor, Kind};
use std::time::Instant;

/// Pages per probe (1 MiB with 4 KiB pages).
const PAGES: usize = 256;

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
    let me = team.rank();
    let kind = team.transport().kind();
    let mut src = vec![0x5au8; if me == 0 { chunk * (p - 1) } else { 1 }];
    // SAFETY: peers only read the buffer, which we leave alone until the
    // exposure is dropped at the end of this function.
    let exp = unsafe {
        team.transport()
            .expose_raw(src.as_mut_ptr(), src.len(), true)?
    };
    let words = team.allgather_words(&exp.descriptor().to_words())?;
    let root = Descriptor::from_words([words[0][0], words[0][1], words[0][2], words[0][3]]);
    let mut dst = vec![0u8; chunk];
    let t = team.transport();
    let syscall_only = || -> Result<()> { Ok(cma_pin_only(root.pid, root.addr, 0)?) };
    let read1 = |dst: &mut [u8]| -> Result<()> {
        t.read(&root, 0, &mut dst[..1])?;
        Ok(())
    };
    let pin_pages = |off: usize| -> Result<()> {
        Ok(cma_touch_pages(root.pid, root.addr + off as u64, PAGES, s)?)
    };
    // Uncontended Table III steps, measured by rank 1.
    let mut solo = [0f64; 4];
    if me == 1 {
        // Warm up: fault the pages in on both sides.
        t.read(&root, 0, &mut dst)?;
        // T1 system call, T2 access check (a 1-byte copy), T3 lock+pin
        // (one byte from each of N pages), T4 copy of N pages.
        if kind == Kind::Cma {
            solo[0] = time(reps * 4, syscall_only)?;
        }
        solo[1] = time(reps * 4, || read1(&mut dst))?;
        solo[2] = if kind == Kind::Cma {
            time(reps, || pin_pages(0))?
        } else {
            solo[1]
        };
        solo[3] = time(reps, || {
            t.read(&root, 0, &mut dst).map(|_| ()).map_err(Into::into)
        })?;
    }
    let w = team.allgather_words(&solo.map(f64::to_bits))?;
    let solo: Vec<f64> = w[1][..4].iter().map(|b| f64::from_bits(*b)).collect();
    let (t2, t3, t4) = (solo[1], solo[2], solo[3]);
    // Contention: c readers at once, each on its own range of rank 0.
    let mut points = Vec::new();
    let mut base = 0.0;
    for c in 1..p {
        team.barrier()?;
        let mut mine = 0.0;
        if me >= 1 && me <= c {
            let off = (me - 1) * chunk;
            mine = if kind == Kind::Cma {
                time(reps, || pin_pages(off))?
            } else {
                time(reps, || {
                    t.read(&root, off as u64, &mut dst)
                        .map(|_| ())
                        .map_err(Into::into)
                })?
            };
        }
        let all = team.allgather_words(&[mine.to_bits()])?;
        let avg = (1..=c).map(|r| f64::from_bits(all[r][0])).sum::<f64>() / c as f64;
        let cost = (avg - t2).max(1e-9);
        if c == 1 {
            base = cost;
        }
        points.push((c, cost / base));
    }
    // Synchronisation: barrier cost.
    let sync = time(reps * 4, || team.barrier())? / (p.max(2) as f64).log2().ceil();
    drop(exp);
    team.barrier()?;
    if me != 0 {
        return Ok(None);
    }
    let n = PAGES as f64;
    let (alpha, beta, l) = if kind == Kind::Cma {
        (
            t2,
            ((t4 - t3) / (n * s as f64)).max(1e-13),
            ((t3 - t2) / n).max(0.0),
        )
    } else {
        // No per-copy pinning: l carries the per-page copy time, so γ_c
        // models the bandwidth contention of concurrent readers instead.
        (t2, 0.0, ((t4 - t2) / n).max(1e-12))
    };
    // γ is contention among copies that run at once: readers beyond the
    // CPU count wait for a CPU instead (the model's `step` serializes
    // them), so only c <= cpus enters the fit.
    let cpus = crate::model::host_cpus();
    let fit: Vec<(usize, f64)> = points
        .iter()
        .copied()
        .filter(|&(c, _)| cpus == 0 || c <= cpus)
        .collect();
    let (a, b) = Params::fit_gamma(if fit.len() >= 2 { &fit } else { &points });
    Ok(Some(Params {
        source: format!("calibrated with {kind} on {p} ranks, {PAGES} pages, {reps} reps"),
        alpha,
        beta,
        l,
        page: s as u64,
        gamma_a: a,
        gamma_b: b,
        sync,
        signal: sync / 2.0,
        gamma_points: points,
        cpus,
    }))
}
