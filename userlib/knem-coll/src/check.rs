//! Correctness sweep: every operation × algorithm × size × root, data
//! checked on every rank.  Used by the tests, `knem-coll check` and the VM.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Op};
use crate::team::Team;
use std::cell::RefCell;

/// The byte rank `src` sends to rank `dst` at index `i` (salted per call).
pub fn pattern(src: usize, dst: usize, i: usize, salt: u64) -> u8 {
    ((i as u64).wrapping_mul(31) ^ (src as u64 * 7 + dst as u64 * 13 + salt)) as u8
}

/// The pattern repeats every 256 bytes: build one period, then fill and
/// compare with slice copies (memcpy/memcmp, fast even unoptimised).
/// `flip` inverts it: a receive buffer is poisoned with the inverse of
/// what it should receive, so every byte a collective fails to write is
/// caught.
fn period(src: usize, dst: usize, salt: u64, flip: bool) -> [u8; 256] {
    let mut p = [0u8; 256];
    for (i, b) in p.iter_mut().enumerate() {
        *b = pattern(src, dst, i, salt) ^ if flip { 0xff } else { 0 };
    }
    p
}

fn fill_with(p: &[u8; 256], buf: &mut [u8]) {
    for c in buf.chunks_mut(256) {
        c.copy_from_slice(&p[..c.len()]);
    }
}

fn fill(src: usize, dst: usize, salt: u64, buf: &mut [u8]) {
    fill_with(&period(src, dst, salt, false), buf);
}

/// Make `buf` wrong everywhere for the data `src` will send `dst`.
fn poison(src: usize, dst: usize, salt: u64, buf: &mut [u8]) {
    fill_with(&period(src, dst, salt, true), buf);
}

fn verify(what: &str, src: usize, dst: usize, salt: u64, buf: &[u8]) -> Result<()> {
    let p = period(src, dst, salt, false);
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

thread_local! {
    /// Buffers of earlier checks.  Reusing them skips first-touch page
    /// faults, most of a big check's cost under emulation (QEMU TCG).
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of `len` bytes with unspecified content: every caller fills
/// or poisons all of it.
fn buffer(len: usize) -> Vec<u8> {
    let mut v = SPARE.with(|s| {
        let mut s = s.borrow_mut();
        // The smallest spare that fits, else the largest (it grows).
        let fits = (0..s.len())
            .filter(|i| s[*i].capacity() >= len)
            .min_by_key(|i| s[*i].capacity());
        let pick = fits.or_else(|| (0..s.len()).max_by_key(|i| s[*i].capacity()));
        pick.map(|i| s.swap_remove(i)).unwrap_or_default()
    });
    v.resize(len, 0);
    v
}

fn spare(v: Vec<u8>) {
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < 2 {
            s.push(v);
        }
    });
}

/// Algorithms to exercise for `op` on `p` ranks (None: the planner).
pub fn variants(op: Op, p: usize) -> Vec<Option<Algorithm>> {
    use Algorithm::*;
    let mut v: Vec<Option<Algorithm>> = vec![None];
    // Every throttle factor and radix up to the team size (at least the
    // smallest ones, whatever the size).
    let ks = 1..=p.max(3);
    match op {
        Op::Bcast => {
            v.extend([DirectRead, DirectWrite, ScatterAllgather, Hierarchical].map(Some));
            v.extend(ks.clone().map(|k| Some(Throttled(k))));
            v.extend((2..=p.max(4)).map(|k| Some(Knomial(k))));
        }
        Op::Scatter => {
            v.extend([DirectRead, Sequential].map(Some));
            v.extend(ks.clone().map(|k| Some(Throttled(k))));
        }
        Op::Gather => {
            v.extend([DirectWrite, Sequential].map(Some));
            v.extend(ks.map(|k| Some(Throttled(k))));
        }
        Op::Allgather => v.extend([RingSource, RingNeighbor, RecursiveDoubling, Bruck].map(Some)),
        Op::Alltoall => v.extend([Pairwise, Ring].map(Some)),
    }
    v.dedup();
    v
}

/// The algorithms of [`variants`] with distinct schedules, for the big
/// sizes: the planner's run repeats one of them, throttling to k >= p-1
/// is the direct schedule, and a k-nomial tree of radix >= p is the
/// same whatever the radix.  Factors and radices beyond 4 differ from the
/// smaller ones only in how many wait for whom, which the small sizes
/// (every factor, unaligned blocks included) check; big sizes keep the
/// sweep short.
pub fn distinct_variants(op: Op, p: usize) -> Vec<Algorithm> {
    use Algorithm::*;
    let mut out: Vec<Algorithm> = Vec::new();
    for alg in variants(op, p).into_iter().flatten() {
        let alg = match alg {
            Throttled(k) if k > 3 && k + 1 < p => continue,
            Knomial(k) if k > 4 && k < p => continue,
            Throttled(k) if k + 1 >= p && op == Op::Gather => DirectWrite,
            Throttled(k) if k + 1 >= p => DirectRead,
            Knomial(k) if k >= p => Knomial(p.max(2)),
            a => a,
        };
        if !out.contains(&alg) {
            out.push(alg);
        }
    }
    out
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
            let mut buf = buffer(size);
            if me == root {
                fill(root, 0, salt, &mut buf);
            } else {
                poison(root, 0, salt, &mut buf);
            }
            elapsed = timed(team, |t| t.bcast(&mut buf, root, alg)).map_err(wrap)?;
            verify(&what, root, 0, salt, &buf)?;
            spare(buf);
        }
        Op::Scatter => {
            let mut send = buffer(if me == root { total } else { 0 });
            if me == root {
                for r in 0..p {
                    fill(root, r, salt, &mut send[displs[r]..displs[r] + counts[r]]);
                }
            }
            let mut recv = buffer(counts[me]);
            poison(root, me, salt, &mut recv);
            if vary {
                elapsed = timed(team, |t| {
                    t.scatterv(&send, &counts, &displs, &mut recv, root, alg)
                })
                .map_err(wrap)?;
            } else {
                elapsed = timed(team, |t| t.scatter(&send, &mut recv, root, alg)).map_err(wrap)?;
            }
            verify(&what, root, me, salt, &recv)?;
            spare(send);
            spare(recv);
        }
        Op::Gather => {
            let mut send = buffer(counts[me]);
            fill(me, root, salt, &mut send);
            let mut recv = buffer(if me == root { total } else { 0 });
            if me == root {
                for r in 0..p {
                    poison(r, root, salt, &mut recv[displs[r]..displs[r] + counts[r]]);
                }
            }
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
            spare(send);
            spare(recv);
        }
        Op::Allgather => {
            let mut send = buffer(n);
            fill(me, 0, salt, &mut send);
            let mut recv = buffer(n * p);
            for r in 0..p {
                poison(r, 0, salt, &mut recv[r * n..(r + 1) * n]);
            }
            elapsed = timed(team, |t| t.allgather(&send, &mut recv, alg)).map_err(wrap)?;
            for r in 0..p {
                verify(&what, r, 0, salt, &recv[r * n..(r + 1) * n])?;
            }
            spare(send);
            spare(recv);
        }
        Op::Alltoall => {
            let mut send = buffer(n * p);
            let mut recv = buffer(n * p);
            for d in 0..p {
                fill(me, d, salt, &mut send[d * n..(d + 1) * n]);
                poison(d, me, salt, &mut recv[d * n..(d + 1) * n]);
            }
            elapsed = timed(team, |t| t.alltoall(&send, &mut recv, alg)).map_err(wrap)?;
            for r in 0..p {
                verify(&what, r, me, salt, &recv[r * n..(r + 1) * n])?;
            }
            spare(send);
            spare(recv);
        }
    }
    Ok(elapsed)
}

fn timed(team: &mut Team, f: impl FnOnce(&mut Team) -> Result<()>) -> Result<f64> {
    team.barrier()?;
    let t = std::time::Instant::now();
    f(team)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Sizes of the sweep: a dense grid of small and odd sizes (every
/// algorithm, roots 0 and p-1) and big ones (every algorithm, one root
/// each, alternating).  16 MiB + 3 is divisible by no team size from 2 to
/// 8, so every block and chunk boundary is unaligned there.
pub fn sizes(quick: bool) -> (Vec<usize>, Vec<usize>) {
    let small = vec![0, 1, 7, 4096, 4097, 65_537, (1 << 20) + 3];
    let big = if quick {
        vec![(4 << 20) + 1]
    } else {
        vec![(4 << 20) + 1, 16 << 20, (16 << 20) + 3]
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
        // All-to-all operations have no root.
        let rs = if matches!(op, Op::Allgather | Op::Alltoall) {
            &roots[..1]
        } else {
            roots
        };
        for &vary in varies {
            for alg in variants(op, p) {
                // Factors and radices beyond 4 add waits, not code paths:
                // one root each (the smaller ones run with both).
                let many =
                    matches!(alg, Some(Algorithm::Throttled(k) | Algorithm::Knomial(k)) if k > 4);
                let rs = if many { &rs[..1] } else { rs };
                for &size in small {
                    for &root in rs {
                        salt += 1;
                        one(team, op, alg, size, root, vary, salt)?;
                    }
                }
            }
            for alg in distinct_variants(op, p) {
                for (i, &size) in big.iter().enumerate() {
                    salt += 1;
                    one(team, op, Some(alg), size, rs[i % rs.len()], vary, salt)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_differs_from_the_data_at_every_byte() {
        for (src, dst, salt) in [(0, 0, 1), (3, 5, 77), (7, 2, 255), (1, 6, 256)] {
            let mut buf = vec![0u8; 1000];
            poison(src, dst, salt, &mut buf);
            for (i, b) in buf.iter().enumerate() {
                assert_ne!(*b, pattern(src, dst, i, salt), "byte {i}");
            }
            // One byte the collective did not write is reported, by index.
            fill(src, dst, salt, &mut buf[..999]);
            let e = verify("t", src, dst, salt, &buf).unwrap_err().to_string();
            assert!(e.contains("byte 999 "), "{e}");
            fill(src, dst, salt, &mut buf);
            verify("t", src, dst, salt, &buf).unwrap();
        }
    }

    #[test]
    fn buffers_are_reused() {
        let a = buffer(1 << 20);
        let ptr = a.as_ptr();
        spare(a);
        let b = buffer(1000);
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(b.len(), 1000);
        spare(b);
    }

    #[test]
    fn big_sizes_skip_repeated_schedules() {
        use Algorithm::*;
        assert_eq!(
            distinct_variants(Op::Scatter, 3),
            [DirectRead, Sequential, Throttled(1)]
        );
        // Factors 1 to 3 (p-1 and p are direct writes).
        assert_eq!(
            distinct_variants(Op::Gather, 8),
            [
                DirectWrite,
                Sequential,
                Throttled(1),
                Throttled(2),
                Throttled(3)
            ]
        );
        // Small sizes: every factor and radix up to p, on an odd team.
        let v = variants(Op::Bcast, 7);
        assert!((1..=7).all(|k| v.contains(&Some(Throttled(k)))), "{v:?}");
        assert!((2..=7).all(|k| v.contains(&Some(Knomial(k)))), "{v:?}");
        let b = distinct_variants(Op::Bcast, 7);
        assert!(b.contains(&Knomial(7)) && !b.contains(&Knomial(5)), "{b:?}");
        assert_eq!(
            distinct_variants(Op::Allgather, 5),
            [RingSource, RingNeighbor, RecursiveDoubling, Bruck]
        );
        let b = distinct_variants(Op::Bcast, 3);
        assert!(b.contains(&Knomial(2)) && b.contains(&Knomial(3)), "{b:?}");
        assert!(
            !b.contains(&Knomial(4)) && !b.contains(&Throttled(2)),
            "{b:?}"
        );
        assert_eq!(distinct_variants(Op::Alltoall, 5), [Pairwise, Ring]);
    }
}
