//! Measured contention: how long one of c processes takes to copy n bytes
//! of one source while the others copy from it too, over a grid of block
//! sizes and reader counts, and what the model reads off it.
//!
//! The model uses the excess over a lone copy, X(n, c) = T(n, c) − T(n, 1):
//! the time lost waiting for the source's page locks and sharing its
//! memory.  It adds that to its own uncontended copy (α + nβ + l·pages),
//! which is calibrated on buffers that move between cores as a
//! collective's do.  Between measured points X is interpolated: linearly
//! in the readers, log-log in the size; beyond the largest size it grows
//! with the bytes, below the smallest with the pages; beyond the most
//! readers it follows the last measured slope.

use serde::{Deserialize, Serialize};

/// A grid of concurrent-copy times from one source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Contention {
    /// Block sizes (bytes), ascending.
    pub sizes: Vec<u64>,
    /// Reader counts, ascending, starting at 1.
    pub readers: Vec<usize>,
    /// `copy[i][j]`: seconds one reader takes to copy `sizes[i]` bytes
    /// while `readers[j]` copy the same bytes at once (median).
    pub copy: Vec<Vec<f64>>,
    /// The same with only the pinning of the pages (one byte of each,
    /// CMA), empty when not measured: how much of the excess is lock wait
    /// rather than shared bandwidth.
    #[serde(default)]
    pub pin: Vec<Vec<f64>>,
    /// Steps of a scatter: `readers[j]` ranks each read their own
    /// `sizes[i]`-byte block of one buffer (blocks side by side), started
    /// together; seconds until the last one ends (median).  Empty when not
    /// measured (model files from before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apart: Vec<Vec<f64>>,
    /// The same with writes into the buffer (the steps of a gather).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<Vec<f64>>,
}

/// Linear interpolation in `x` over ascending `xs`, following the last
/// segment's slope beyond the end and clamping before the start.
fn along(xs: &[f64], ys: &[f64], x: f64) -> f64 {
    match xs.len() {
        0 => 0.0,
        1 => ys[0],
        len => {
            if x <= xs[0] {
                return ys[0];
            }
            let i = (1..len).find(|&i| x <= xs[i]).unwrap_or(len - 1);
            let (x0, x1, y0, y1) = (xs[i - 1], xs[i], ys[i - 1], ys[i]);
            y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        }
    }
}

impl Contention {
    /// Whether the grid is usable: sizes and readers ascending, readers
    /// starting at 1, a time for every point.
    pub fn is_valid(&self) -> bool {
        let rows_ok = |t: &Vec<Vec<f64>>| {
            t.len() == self.sizes.len()
                && t.iter().all(|r| {
                    r.len() == self.readers.len() && r.iter().all(|x| x.is_finite() && *x >= 0.0)
                })
        };
        !self.sizes.is_empty()
            && self.readers.first() == Some(&1)
            && self.sizes.windows(2).all(|w| w[0] < w[1])
            && self.readers.windows(2).all(|w| w[0] < w[1])
            && self.sizes[0] > 0
            && rows_ok(&self.copy)
            && [&self.pin, &self.apart, &self.write]
                .iter()
                .all(|t| t.is_empty() || rows_ok(t))
    }

    /// Excess of `table` at measured size `i` for c readers.  Running
    /// maxima: more readers never wait less.
    fn excess_at(&self, table: &[Vec<f64>], i: usize, c: usize) -> f64 {
        let row = &table[i];
        let mut ys = Vec::with_capacity(row.len());
        let mut top: f64 = 0.0;
        for t in row {
            top = top.max(t - row[0]);
            ys.push(top);
        }
        let xs: Vec<f64> = self.readers.iter().map(|&r| r as f64).collect();
        along(&xs, &ys, c as f64).max(0.0)
    }

    fn excess(&self, table: &[Vec<f64>], n: u64, c: usize, page: u64) -> f64 {
        if c <= 1 || n == 0 || table.is_empty() {
            return 0.0;
        }
        // Running maximum over the sizes: more bytes never wait less.
        let mut at = Vec::with_capacity(self.sizes.len());
        let mut top: f64 = 0.0;
        for i in 0..self.sizes.len() {
            top = top.max(self.excess_at(table, i, c));
            at.push(top);
        }
        let (first, last) = (self.sizes[0], *self.sizes.last().unwrap_or(&1));
        if n <= first {
            let pages = |b: u64| b.div_ceil(page.max(1)) as f64;
            return at[0] * pages(n) / pages(first);
        }
        if n >= last {
            return at[at.len() - 1] * n as f64 / last as f64;
        }
        let i = self.sizes.iter().position(|&s| s >= n).unwrap_or(1).max(1);
        let (s0, s1) = (self.sizes[i - 1] as f64, self.sizes[i] as f64);
        let t = (n as f64 / s0).ln() / (s1 / s0).ln();
        let (x0, x1) = (at[i - 1], at[i]);
        if x0 > 0.0 && x1 > 0.0 {
            (x0.ln() + t * (x1.ln() - x0.ln())).exp()
        } else {
            x0 + t * (x1 - x0)
        }
    }

    /// X(n, c): seconds one of c concurrent copies of the same n bytes of
    /// a source takes beyond a lone copy (`page`: the page size, for
    /// blocks below the smallest measured size).
    pub fn copy_excess(&self, n: u64, c: usize, page: u64) -> f64 {
        self.excess(&self.copy, n, c, page)
    }

    /// What one of c ranks reading their own n-byte blocks of one buffer
    /// at once adds to a lone read, as a step (until the last one ends);
    /// None when not measured.
    pub fn apart_excess(&self, n: u64, c: usize, page: u64) -> Option<f64> {
        (!self.apart.is_empty()).then(|| self.excess(&self.apart, n, c, page))
    }

    /// [`Contention::apart_excess`] for writes into the buffer; None when
    /// not measured.
    pub fn write_excess(&self, n: u64, c: usize, page: u64) -> Option<f64> {
        (!self.write.is_empty()).then(|| self.excess(&self.write, n, c, page))
    }

    /// The part of [`Contention::copy_excess`] that pinning alone shows
    /// (at most all of it); None without pin measurements.
    pub fn pin_excess(&self, n: u64, c: usize, page: u64) -> Option<f64> {
        if self.pin.is_empty() {
            return None;
        }
        Some(
            self.excess(&self.pin, n, c, page)
                .min(self.copy_excess(n, c, page)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Contention {
        Contention {
            sizes: vec![4096, 65536],
            readers: vec![1, 2, 4],
            copy: vec![vec![1.0, 2.0, 5.0], vec![4.0, 8.0, 36.0]],
            ..Contention::default()
        }
    }

    #[test]
    fn measured_points_come_back() {
        let g = grid();
        assert!(g.is_valid());
        assert_eq!(g.copy_excess(4096, 1, 4096), 0.0);
        assert_eq!(g.copy_excess(4096, 2, 4096), 1.0);
        assert_eq!(g.copy_excess(65536, 4, 4096), 32.0);
        assert_eq!(g.pin_excess(65536, 4, 4096), None);
    }

    #[test]
    fn interpolates_readers_linearly_and_sizes_log_log() {
        let g = grid();
        assert_eq!(g.copy_excess(4096, 3, 4096), 2.5);
        // Halfway in log size between excesses 4 and 32 (c = 4 at 4K is 4).
        let mid = g.copy_excess(16384, 4, 4096);
        assert!((mid - (4.0f64 * 32.0).sqrt()).abs() < 1e-9, "{mid}");
        // Beyond the most readers: the last slope (14 per reader at 64K).
        assert!((g.copy_excess(65536, 6, 4096) - 60.0).abs() < 1e-9);
    }

    #[test]
    fn extrapolates_with_bytes_and_pages() {
        let g = grid();
        assert!((g.copy_excess(4 * 65536, 2, 4096) - 16.0).abs() < 1e-9);
        // One page: what a 4 KiB block waits.
        assert_eq!(g.copy_excess(100, 2, 4096), 1.0);
        assert_eq!(g.copy_excess(0, 2, 4096), 0.0);
    }

    #[test]
    fn never_cheaper_with_more_readers_or_bytes() {
        let g = Contention {
            sizes: vec![4096, 65536, 1 << 20],
            readers: vec![1, 2, 4],
            copy: vec![
                vec![1.0, 3.0, 2.0],
                vec![4.0, 5.0, 9.0],
                vec![20.0, 20.0, 30.0],
            ],
            pin: vec![vec![0.5, 1.0, 1.5]; 3],
            ..Contention::default()
        };
        assert!(g.is_valid());
        let mut last = 0.0;
        for c in 1..8 {
            let x = g.copy_excess(4096, c, 4096);
            assert!(x >= last, "c {c}: {x} < {last}");
            last = x;
        }
        let mut last = 0.0;
        for n in [1u64, 4096, 8192, 65536, 300_000, 1 << 20, 8 << 20] {
            let x = g.copy_excess(n, 2, 4096);
            assert!(x >= last, "n {n}: {x} < {last}");
            last = x;
        }
        assert_eq!(g.pin_excess(65536, 4, 4096), Some(1.0));
    }

    #[test]
    fn block_steps_are_their_own_tables() {
        let mut g = grid();
        assert_eq!(g.apart_excess(65536, 4, 4096), None);
        assert_eq!(g.write_excess(65536, 4, 4096), None);
        g.apart = vec![vec![2.0, 3.0, 4.0], vec![10.0, 12.0, 20.0]];
        g.write = vec![vec![2.0, 4.0, 8.0], vec![10.0, 30.0, 70.0]];
        assert!(g.is_valid());
        assert_eq!(g.apart_excess(65536, 4, 4096), Some(10.0));
        assert_eq!(g.write_excess(65536, 4, 4096), Some(60.0));
        assert_eq!(g.write_excess(4096, 3, 4096), Some(4.0));
        // The same-bytes table is untouched.
        assert_eq!(g.copy_excess(65536, 4, 4096), 32.0);
        g.write.pop();
        assert!(!g.is_valid());
    }

    #[test]
    fn malformed_grids_are_invalid() {
        let mut g = grid();
        g.readers = vec![2, 3, 4];
        assert!(!g.is_valid());
        let mut g = grid();
        g.copy[1].pop();
        assert!(!g.is_valid());
        let mut g = grid();
        g.sizes = vec![65536, 4096];
        assert!(!g.is_valid());
        assert!(!Contention::default().is_valid());
    }
}
