//! Correctness sweep: every operation × algorithm × size × root, data
//! checked on every rank.  Used by the tests, `knem-coll check` and the VM.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Op};
use crate::team::Team;

/// The byte rank `src` sends to rank `dst` at index `i` (salted per call).
pub fn pattern(src: usize, dst: usize, i: usize, salt: u64) -> u8 {
    ((i as u64).wrapping_mul(31) ^ (src as u64 * 7 + dst as u64 * 13 + salt)) as u8
}

/// The pattern repeats every 256 bytes: build one period, then fill and
/// compare with slice copies (memcpy/memcmp, fast even unoptimised).
fn period(src: usize, dst: usize, salt: u64) -> [u8; 256] {
    let mut p = [0u8; 256];
    for (i, b) in p.iter_mut().enumerate() {
        *b = pattern(src, dst, i, salt);
    }
    p
}

fn fill(src: usize, dst: usize, salt: u64, buf: &mut [u8]) {
    let p = period(src, dst, salt);
    for c in buf.chunks_mut(256) {
        c.copy_from_slice(&p[..c.len()]);
    }
}

fn verify(what: &str, src: usize, dst: usize, salt: u64, buf: &[u8]) -> Result<()> {
    let p = period(src, dst, salt);
    for (k, c) in buf.chunks(256).enumerate() {
        if c != &p[..c.len()] {
            let j = (0..c.len()).find(|j| c[*j] != p[*j]).unwrap_or(0);
            return Err(Error::Mismatch(format!(
                "{what}: byte {} of the block from rank {src} is {:#x}, expected {:#x}",
                k * 256 + j,
                c[j],
                p[j]
            )));
        }
    }
    Ok(())
}

/// Algorithms to exercise for `op` on `p` ranks (None: the planner).
pub fn variants(op: Op, p: usize) -> Vec<Option<Algorithm>> {
    use Algorithm::*;
    let mut v: Vec<Option<Algorithm>> = vec![None];
    let ks = [1, 2, 3, p.max(1)];
    match op {
        Op::Bcast => {
            v.extend([DirectRead, DirectWrite, ScatterAllgather, Hierarchical].map(Some));
            v.extend(ks.iter().map(|k| Some(Throttled(*k))));
            v.extend([2, 3, 4].map(|k| Some(Knomial(k))));
        }
        Op::Scatter => {
            v.extend([DirectRead, Sequential].map(Some));
            v.extend(ks.iter().map(|k| Some(Throttled(*k))));
        }
        Op::Gather => {
            v.extend([DirectWrite, Sequential].map(Some));
            v.extend(ks.iter().map(|k| Some(Throttled(*k))));
        }
        Op::Allgather => v.extend([RingSource, RingNeighbor].map(Some)),
        Op::Alltoall => v.extend([Pairwise, Ring].map(Some)),
    }
    v.dedup();
    v
}

fn name(alg: Option<Algorithm>) -> String {
    alg.map_or_else(|| "planner".to_string(), |a| a.to_string())
}

/// Run one operation with one algorithm; `size` is the total bytes at the
/// root (bcast: the message; others: about size/p per rank, rounded up).
/// `vary` uses the v-variants with uneven counts (some zero).  Returns
/// the seconds the collective call itself took (after a barrier), data
/// preparation and checks excluded.
pub fn run_one(
    team: &mut Team,
    op: Op,
    alg: Option<Algorithm>,
    size: usize,
    root: usize,
    vary: bool,
    salt: u64,
) -> Result<f64> {
    let p = team.size();
    let me = team.rank();
    let what = format!(
        "{}{} {} size {size} root {root} on {p} ranks ({})",
        op,
        if vary { "v" } else { "" },
        name(alg),
        team.transport().kind()
    );
    let wrap = |e: Error| Error::Invalid(format!("{what}: {e}"));
    let n = size.div_ceil(p.max(1));
    // v-variants: uneven counts, some zero, blocks laid out in reverse.
    let counts: Vec<usize> = (0..p)
        .map(|r| {
            if vary {
                if r % 3 == 1 {
                    0
                } else {
                    n + r * 5
                }
            } else {
                n
            }
        })
        .collect();
    let mut displs: Vec<usize> = (0..p).map(|r| r * n).collect();
    let mut total = n * p;
    if vary {
        let mut at = 0;
        for r in (0..p).rev() {
            displs[r] = at;
            at += counts[r] + 1;
        }
        total = at;
    }
    let elapsed: f64;
    match op {
        Op::Bcast => {
            let mut buf = vec![0u8; size];
            if me == root {
                fill(root, 0, salt, &mut buf);
            }
            elapsed = timed(team, |t| t.bcast(&mut buf, root, alg)).map_err(wrap)?;
            verify(&what, root, 0, salt, &buf)?;
            Ok(elapsed)
        }
        Op::Scatter => {
            let mut send = vec![0u8; if me == root { total } else { 0 }];
            if me == root {
                for r in 0..p {
                    fill(root, r, salt, &mut send[displs[r]..displs[r] + counts[r]]);
                }
            }
            let mut recv = vec![0u8; counts[me]];
            if vary {
                elapsed = timed(team, |t| {
                    t.scatterv(&send, &counts, &displs, &mut recv, root, alg)
                })
                .map_err(wrap)?;
            } else {
                elapsed = timed(team, |t| t.scatter(&send, &mut recv, root, alg)).map_err(wrap)?;
            }
            verify(&what, root, me, salt, &recv)?;
            Ok(elapsed)
        }
        Op::Gather => {
            let mut send = vec![0u8; counts[me]];
            fill(me, root, salt, &mut send);
            let mut recv = vec![0u8; if me == root { total } else { 0 }];
            if vary {
                elapsed = timed(team, |t| {
                    t.gatherv(&send, &mut recv, &counts, &displs, root, alg)
                })
                .map_err(wrap)?;
            } else {
                elapsed = timed(team, |t| t.gather(&send, &mut recv, root, alg)).map_err(wrap)?;
            }
            if me == root {
                for r in 0..p {
                    verify(
                        &what,
                        r,
                        root,
                        salt,
                        &recv[displs[r]..displs[r] + counts[r]],
                    )?;
                }
            }
            Ok(elapsed)
        }
        Op::Allgather => {
            let mut send = vec![0u8; n];
            fill(me, 0, salt, &mut send);
            let mut recv = vec![0u8; n * p];
            elapsed = timed(team, |t| t.allgather(&send, &mut recv, alg)).map_err(wrap)?;
            for r in 0..p {
                verify(&what, r, 0, salt, &recv[r * n..(r + 1) * n])?;
            }
            Ok(elapsed)
        }
        Op::Alltoall => {
            let mut send = vec![0u8; n * p];
            for d in 0..p {
                fill(me, d, salt, &mut send[d * n..(d + 1) * n]);
            }
            let mut recv = vec![0u8; n * p];
            elapsed = timed(team, |t| t.alltoall(&send, &mut recv, alg)).map_err(wrap)?;
            for r in 0..p {
                verify(&what, r, me, salt, &recv[r * n..(r + 1) * n])?;
            }
            Ok(elapsed)
        }
    }
}

fn timed(team: &mut Team, f: impl FnOnce(&mut Team) -> Result<()>) -> Result<f64> {
    team.barrier()?;
    let t = std::time::Instant::now();
    f(team)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Sizes of the sweep: small and odd ones for every algorithm, big ones
/// (up to 16 MiB) sampled with the planner's choice.
pub fn sizes(quick: bool) -> (Vec<usize>, Vec<usize>) {
    let small = vec![0, 1, 7, 4096, 4097, 65_537, (1 << 20) + 3];
    let big = if quick {
        vec![(4 << 20) + 1]
    } else {
        vec![(4 << 20) + 1, 16 << 20]
    };
    (small, big)
}

/// Checks that passed and failed (on any rank).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Collectives whose data every rank found right.
    pub passed: usize,
    /// Collectives with wrong data on at least one rank.
    pub failed: usize,
}

/// The whole sweep; returns the number of checked collectives, or the
/// first failure.
pub fn sweep(team: &mut Team, small: &[usize], big: &[usize]) -> Result<usize> {
    let mut first = None;
    let (t, r) = sweep_tally(team, small, big, |m| {
        first.get_or_insert_with(|| m.to_string());
    });
    r?;
    match first {
        Some(m) => Err(Error::Mismatch(m)),
        None => Ok(t.passed + t.failed),
    }
}

/// The whole sweep, going on after wrong data: every rank learns whether
/// each collective was right everywhere (one word exchange per check) and
/// `report` gets the message of each local mismatch.  An error of the
/// collective itself (transport, timeout) still stops the sweep, since the
/// ranks may no longer agree on where they are; a caller counts it as one
/// more failure.  Returns the tally so far and how the sweep ended.
pub fn sweep_tally(
    team: &mut Team,
    small: &[usize],
    big: &[usize],
    mut report: impl FnMut(&str),
) -> (Tally, Result<()>) {
    let p = team.size();
    let roots: Vec<usize> = if p > 1 { vec![0, p - 1] } else { vec![0] };
    let mut tally = Tally::default();
    let r = sweep_inner(team, small, big, &roots, &mut tally, &mut report);
    (tally, r)
}

fn sweep_inner(
    team: &mut Team,
    small: &[usize],
    big: &[usize],
    roots: &[usize],
    tally: &mut Tally,
    report: &mut impl FnMut(&str),
) -> Result<()> {
    let p = team.size();
    let mut salt = 1u64;
    let mut one = |team: &mut Team,
                   op: Op,
                   alg: Option<Algorithm>,
                   size: usize,
                   root: usize,
                   vary: bool,
                   salt: u64|
     -> Result<()> {
        let bad = match run_one(team, op, alg, size, root, vary, salt) {
            Ok(_) => false,
            Err(Error::Mismatch(m)) => {
                report(&m);
                true
            }
            Err(e) => return Err(e),
        };
        let words = team.allgather_words(&[u64::from(bad)])?;
        if words.iter().any(|w| w[0] != 0) {
            tally.failed += 1;
        } else {
            tally.passed += 1;
        }
        Ok(())
    };
    for op in Op::ALL {
        let varies: &[bool] = if matches!(op, Op::Scatter | Op::Gather) {
            &[false, true]
        } else {
            &[false]
        };
        for &vary in varies {
            for alg in variants(op, p) {
                for &size in small {
                    let rs: &[usize] = if matches!(op, Op::Allgather | Op::Alltoall) {
                        &roots[..1]
                    } else {
                        roots
                    };
                    for &root in rs {
                        salt += 1;
                        one(team, op, alg, size, root, vary, salt)?;
                    }
                }
            }
            for &size in big {
                salt += 1;
                one(team, op, None, size, 0, vary, salt)?;
            }
        }
    }
    Ok(())
}
