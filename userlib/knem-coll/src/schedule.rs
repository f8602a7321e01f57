//! Who reads what from whom in the logarithmic allgathers, for any team
//! size: the collectives run these schedules and the cost model counts
//! them, so both agree by construction.
//!
//! Blocks stay at their owner's index in every receive buffer (one-sided
//! reads need no final rotation), so a step reads at most two contiguous
//! runs of blocks.

/// One read of a step: (source rank, first block, blocks).
pub type Read = (usize, usize, usize);

/// A schedule: rank, step and team size to the read of that step.
pub type Schedule = fn(usize, usize, usize) -> Option<Read>;

/// Steps of the logarithmic allgathers on p ranks: ⌈log2 p⌉.
pub fn log_steps(p: usize) -> usize {
    p.max(1).next_power_of_two().trailing_zeros() as usize
}

/// Recursive doubling, step j (distance d = 2^j): rank r holds the blocks
/// of its aligned group of d ranks and reads those of the sibling group
/// from one of its members, which holds them all after step j−1.  With p
/// not a power of two the sibling group may be cut short or missing; its
/// members then serve several readers.  Returns (source, first block,
/// blocks), or None when there is nothing to read.
pub fn recursive_doubling(r: usize, j: usize, p: usize) -> Option<Read> {
    let d = 1usize << j;
    let sibling = (r & !(d - 1)) ^ d;
    if sibling >= p {
        return None;
    }
    let count = d.min(p - sibling);
    Some((sibling + (r & (d - 1)) % count, sibling, count))
}

/// Bruck, step j (distance d = 2^j): rank r holds blocks r..r+d−1 (mod p)
/// and reads the next ones, up to p−d of them, from rank r+d, which holds
/// them after step j−1.  Returns (source, first block, blocks): blocks
/// first..first+blocks−1 mod p.
pub fn bruck(r: usize, j: usize, p: usize) -> Option<Read> {
    let d = 1usize << j;
    if d >= p {
        return None;
    }
    let src = (r + d) % p;
    Some((src, src, d.min(p - d)))
}

/// The contiguous runs (first block, blocks) of `count` blocks from
/// `first` on, mod p.
pub fn runs(first: usize, count: usize, p: usize) -> Vec<(usize, usize)> {
    if first + count <= p {
        vec![(first, count)]
    } else {
        vec![(first, p - first), (0, first + count - p)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a schedule on paper: every rank ends with every block, and
    /// reads only blocks its source already holds.
    fn complete(p: usize, step: Schedule) {
        let mut has: Vec<Vec<bool>> = (0..p).map(|r| (0..p).map(|b| b == r).collect()).collect();
        for j in 0..log_steps(p) {
            let before = has.clone();
            for (r, mine) in has.iter_mut().enumerate() {
                if let Some((src, first, count)) = step(r, j, p) {
                    assert_ne!(src, r, "p {p} step {j} rank {r} reads itself");
                    for (a, n) in runs(first, count, p) {
                        for b in a..a + n {
                            assert!(before[src][b], "p {p} step {j}: {r} reads {b} {src} lacks");
                            mine[b] = true;
                        }
                    }
                }
            }
        }
        for (r, mine) in has.iter().enumerate() {
            assert!(
                mine.iter().all(|x| *x),
                "p {p}: rank {r} ends with {mine:?}"
            );
        }
    }

    #[test]
    fn every_team_size_ends_with_every_block() {
        for p in 1..=40 {
            complete(p, recursive_doubling);
            complete(p, bruck);
        }
    }

    #[test]
    fn steps_and_runs() {
        assert_eq!([1, 2, 3, 4, 5, 8, 9].map(log_steps), [0, 1, 2, 2, 3, 3, 4]);
        assert_eq!(runs(2, 3, 8), [(2, 3)]);
        assert_eq!(runs(6, 3, 8), [(6, 2), (0, 1)]);
        // p = 6, step 2: ranks 0..3 read the cut group {4, 5}, two each.
        let srcs: Vec<_> = (0..4)
            .map(|r| recursive_doubling(r, 2, 6).unwrap().0)
            .collect();
        assert_eq!(srcs, [4, 5, 4, 5]);
        assert_eq!(recursive_doubling(4, 2, 6), Some((0, 0, 4)));
        // Bruck on 5: the last step fetches only the one missing block.
        assert_eq!(bruck(0, 2, 5), Some((4, 4, 1)));
    }
}
