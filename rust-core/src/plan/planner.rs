//! The copy planner: pure functions from segment lists, offsets and an
//! optional length bound to chunks that never cross a page of a region.
//!
//! Unbounded copies stop at the end of either side, bounded ones also at
//! the bound; an offset at or past the end of a region plans 0 bytes.

use crate::edge::shim::PAGE_SIZE;
use crate::plan::layout::{Cursor, SegList};

/// A place in a region: page-array index and offset in the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagePiece {
    /// Index in the region's page array.
    pub page: u64,
    /// Offset inside the page.
    pub off: u32,
}

/// One step of a copy between a region and the caller's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineChunk {
    /// Where the region bytes are.
    pub region: PagePiece,
    /// User address of the local bytes.
    pub uaddr: u64,
    /// Bytes to copy (1..=PAGE_SIZE).
    pub len: u32,
}

/// One step of a copy between two regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairChunk {
    /// Source bytes.
    pub src: PagePiece,
    /// Destination bytes.
    pub dst: PagePiece,
    /// Bytes to copy (1..=PAGE_SIZE).
    pub len: u32,
}

fn page_left(addr: u64) -> u64 {
    PAGE_SIZE - (addr & (PAGE_SIZE - 1))
}

fn piece(c: &Cursor<'_>) -> Option<PagePiece> {
    let (page, off) = c.list().page_of(c.pos())?;
    Some(PagePiece { page, off })
}

/// Chunks of a copy between `region` from `offset` and `local` from its
/// start, at most `bound` bytes.
pub struct InlinePlan<'a> {
    region: Cursor<'a>,
    local: Cursor<'a>,
    left: u64,
}

impl<'a> InlinePlan<'a> {
    /// Plans a copy; `bound` None means "until either side ends".
    pub fn new(region: &'a SegList, offset: u64, local: &'a SegList, bound: Option<u64>) -> Self {
        InlinePlan {
            region: Cursor::at(region, offset),
            local: Cursor::at(local, 0),
            left: bound.unwrap_or(u64::MAX),
        }
    }
}

impl Iterator for InlinePlan<'_> {
    type Item = InlineChunk;

    fn next(&mut self) -> Option<InlineChunk> {
        if self.left == 0 {
            return None;
        }
        let (raddr, rrun) = self.region.current()?;
        let (laddr, lrun) = self.local.current()?;
        let len = rrun.min(lrun).min(page_left(raddr)).min(self.left);
        let region = piece(&self.region)?;
        self.region.advance(len);
        self.local.advance(len);
        self.left -= len;
        Some(InlineChunk {
            region,
            uaddr: laddr,
            len: len as u32,
        })
    }
}

/// Chunks of a copy from `src` at `src_off` to `dst` at `dst_off`.
pub struct PairPlan<'a> {
    src: Cursor<'a>,
    dst: Cursor<'a>,
    left: u64,
}

impl<'a> PairPlan<'a> {
    /// Plans a region-to-region copy; `bound` None means "until either side
    /// ends".
    pub fn new(
        src: &'a SegList,
        src_off: u64,
        dst: &'a SegList,
        dst_off: u64,
        bound: Option<u64>,
    ) -> Self {
        PairPlan {
            src: Cursor::at(src, src_off),
            dst: Cursor::at(dst, dst_off),
            left: bound.unwrap_or(u64::MAX),
        }
    }
}

impl Iterator for PairPlan<'_> {
    type Item = PairChunk;

    fn next(&mut self) -> Option<PairChunk> {
        if self.left == 0 {
            return None;
        }
        let (saddr, srun) = self.src.current()?;
        let (daddr, drun) = self.dst.current()?;
        let len = srun
            .min(drun)
            .min(page_left(saddr))
            .min(page_left(daddr))
            .min(self.left);
        let src = piece(&self.src)?;
        let dst = piece(&self.dst)?;
        self.src.advance(len);
        self.dst.advance(len);
        self.left -= len;
        Some(PairChunk {
            src,
            dst,
            len: len as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::layout::iov;
    use proptest::prelude::*;
    use std::vec::Vec;

    /// The naive model: the user address of every byte of a flattened list.
    fn flatten(iovs: &[knem_abi::knem_cmd_param_iovec]) -> Vec<u64> {
        iovs.iter()
            .flat_map(|v| (0..v.len).map(move |k| v.base + k))
            .collect()
    }

    /// Page addresses of a list's page array, as a region would pin them.
    fn page_array(iovs: &[knem_abi::knem_cmd_param_iovec]) -> Vec<u64> {
        let mut pages = Vec::new();
        for v in iovs.iter().filter(|v| v.len > 0) {
            let first = v.base / PAGE_SIZE;
            let last = (v.base + v.len - 1) / PAGE_SIZE;
            pages.extend((first..=last).map(|p| p * PAGE_SIZE));
        }
        pages
    }

    fn addr_of(pages: &[u64], p: PagePiece, k: u64) -> u64 {
        pages[p.page as usize] + p.off as u64 + k
    }

    fn expected_len(rtotal: u64, off: u64, ltotal: u64, bound: Option<u64>) -> u64 {
        rtotal
            .saturating_sub(off)
            .min(ltotal)
            .min(bound.unwrap_or(u64::MAX))
    }

    #[test]
    fn offset_past_end_plans_nothing() {
        let r = SegList::new(&[iov(0x1000, 100)]).unwrap();
        let l = SegList::new(&[iov(0x9000, 100)]).unwrap();
        assert_eq!(InlinePlan::new(&r, 100, &l, None).count(), 0);
        assert_eq!(InlinePlan::new(&r, u64::MAX, &l, None).count(), 0);
        assert_eq!(PairPlan::new(&r, 0, &l, 100, None).count(), 0);
    }

    #[test]
    fn bound_zero_plans_nothing() {
        let r = SegList::new(&[iov(0x1000, 100)]).unwrap();
        assert_eq!(InlinePlan::new(&r, 0, &r, Some(0)).count(), 0);
    }

    #[test]
    fn chunks_stop_at_region_pages() {
        let r = SegList::new(&[iov(0x1ffe, 8)]).unwrap();
        let l = SegList::new(&[iov(0x50000, 8)]).unwrap();
        let c: Vec<_> = InlinePlan::new(&r, 0, &l, None).collect();
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0],
            InlineChunk {
                region: PagePiece {
                    page: 0,
                    off: 0xffe
                },
                uaddr: 0x50000,
                len: 2
            }
        );
        assert_eq!(
            c[1],
            InlineChunk {
                region: PagePiece { page: 1, off: 0 },
                uaddr: 0x50002,
                len: 6
            }
        );
    }

    #[test]
    fn unbounded_stops_at_shorter_local() {
        let r = SegList::new(&[iov(0x1000, 100)]).unwrap();
        let l = SegList::new(&[iov(0x9000, 0), iov(0x9000, 30)]).unwrap();
        let n: u64 = InlinePlan::new(&r, 10, &l, None)
            .map(|c| c.len as u64)
            .sum();
        assert_eq!(n, 30);
    }

    fn iovecs() -> impl Strategy<Value = Vec<knem_abi::knem_cmd_param_iovec>> {
        // Segments at distinct 1 MiB slots so they never overlap, unaligned
        // starts, lengths up to 3 pages, zero-length ones included.
        prop::collection::vec(
            (0u64..64, 0u64..4096, prop_oneof![Just(0u64), 1u64..12289]),
            0..8,
        )
        .prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (slot, off, len))| iov(((slot * 8 + i as u64) << 20) + off, len))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn inline_plan_matches_model(
            riov in iovecs(), liov in iovecs(),
            off in prop_oneof![0u64..20000, Just(u64::MAX)],
            bound in prop::option::of(prop_oneof![0u64..20000, Just(u64::MAX)]),
        ) {
            let r = SegList::new(&riov).unwrap();
            let l = SegList::new(&liov).unwrap();
            let rflat = flatten(&riov);
            let lflat = flatten(&liov);
            let pages = page_array(&riov);
            prop_assert_eq!(r.pages() as usize, pages.len());
            let mut done = 0u64;
            for c in InlinePlan::new(&r, off, &l, bound) {
                prop_assert!(c.len >= 1 && c.region.off as u64 + c.len as u64 <= PAGE_SIZE);
                for k in 0..c.len as u64 {
                    prop_assert_eq!(addr_of(&pages, c.region, k), rflat[(off + done + k) as usize]);
                    prop_assert_eq!(c.uaddr + k, lflat[(done + k) as usize]);
                }
                done += c.len as u64;
            }
            prop_assert_eq!(done, expected_len(r.total(), off, l.total(), bound));
        }

        #[test]
        fn pair_plan_matches_model(
            siov in iovecs(), diov in iovecs(),
            soff in 0u64..20000, doff in prop_oneof![0u64..20000, Just(u64::MAX)],
            bound in prop::option::of(0u64..30000),
        ) {
            let s = SegList::new(&siov).unwrap();
            let d = SegList::new(&diov).unwrap();
            let (sflat, dflat) = (flatten(&siov), flatten(&diov));
            let (spages, dpages) = (page_array(&siov), page_array(&diov));
            let mut done = 0u64;
            for c in PairPlan::new(&s, soff, &d, doff, bound) {
                prop_assert!(c.src.off as u64 + c.len as u64 <= PAGE_SIZE);
                prop_assert!(c.dst.off as u64 + c.len as u64 <= PAGE_SIZE);
                for k in 0..c.len as u64 {
                    prop_assert_eq!(addr_of(&spages, c.src, k), sflat[(soff + done + k) as usize]);
                    prop_assert_eq!(addr_of(&dpages, c.dst, k), dflat[(doff + done + k) as usize]);
                }
                done += c.len as u64;
            }
            let want = s.total().saturating_sub(soff).min(d.total().saturating_sub(doff))
                .min(bound.unwrap_or(u64::MAX));
            prop_assert_eq!(done, want);
        }

        #[test]
        fn seglist_validation_is_overflow_safe(
            v in prop::collection::vec((any::<u64>(), any::<u64>()), 0..6),
        ) {
            let iovs: Vec<_> = v.iter().map(|&(b, l)| iov(b, l)).collect();
            match SegList::new(&iovs) {
                Ok(l) => {
                    let sum: u128 = v.iter().map(|&(_, l)| l as u128).sum();
                    prop_assert_eq!(l.total() as u128, sum);
                    prop_assert!(v.iter().all(|&(b, l)| b.checked_add(l).is_some()));
                }
                Err(e) => {
                    let wraps = v.iter().any(|&(b, l)| b.checked_add(l).is_none());
                    let sum: u128 = v.iter().map(|&(_, l)| l as u128).sum();
                    prop_assert!(wraps || sum > u64::MAX as u128, "{:?}", e);
                }
            }
        }
    }
}
