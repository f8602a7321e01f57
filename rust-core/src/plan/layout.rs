//! The segments of a region or of a local iovec list: validation, prefix
//! sums, pages per segment and an O(log n) seek.

use crate::edge::errno::{KResult, EFAULT, EINVAL};
use crate::edge::kalloc::KArray;
use crate::edge::shim::{PAGE_SHIFT, PAGE_SIZE};
use knem_abi::knem_cmd_param_iovec;

/// One validated segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// User address of the first byte.
    pub base: u64,
    /// Length in bytes (never 0: an empty iovec gets no segment).
    pub len: u64,
    /// Offset of the first byte in the flattened list (prefix sum).
    pub start: u64,
    /// Index of the segment's first page in the list's page array.
    pub first_page: u64,
}

impl Segment {
    /// Pages the segment touches (0 for an empty segment).
    pub fn pages(&self) -> u64 {
        pages_spanned(self.base, self.len)
    }
}

/// Pages touched by `len` bytes at `base`; `base + len` must not overflow.
pub fn pages_spanned(base: u64, len: u64) -> u64 {
    if len == 0 {
        0
    } else {
        ((base + len - 1) >> PAGE_SHIFT) - (base >> PAGE_SHIFT) + 1
    }
}

/// A position inside a [`SegList`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    /// Segment index.
    pub seg: usize,
    /// Offset inside that segment.
    pub in_seg: u64,
}

/// Where a list's segments are: its own heap array (a region's), or a
/// buffer of the caller's (a short local list, on the stack).
enum Segs<'s> {
    Owned(KArray<Segment>),
    Borrowed(&'s [Segment]),
}

/// A validated list of segments.
///
/// # Invariants
/// For every segment `base + len` does not overflow, `start` is the sum of
/// the lengths before it and `first_page` the sum of their page counts;
/// `total` and `pages` are the full sums.
pub struct SegList<'s> {
    segs: Segs<'s>,
    total: u64,
    pages: u64,
}

/// The segments `iovecs` make: one per non-empty iovec.  An empty one
/// carries no byte, and keeping it would let a region of 2^20 of them hold
/// 32 MiB of segments without pinning a page (the bound on pinned memory
/// is what bounds a region's size).
fn segment_count(iovecs: &[knem_cmd_param_iovec]) -> usize {
    iovecs.iter().filter(|v| v.len > 0).count()
}

/// Fills `segs` (of [`segment_count`] entries) from `iovecs`; returns
/// (total, pages).
fn fill(segs: &mut [Segment], iovecs: &[knem_cmd_param_iovec]) -> KResult<(u64, u64)> {
    let mut total: u64 = 0;
    let mut pages: u64 = 0;
    let mut out = segs.iter_mut();
    for iov in iovecs.iter().filter(|v| v.len > 0) {
        if iov.base.checked_add(iov.len).is_none() {
            return Err(EFAULT);
        }
        let seg = out.next().ok_or(EINVAL)?;
        *seg = Segment {
            base: iov.base,
            len: iov.len,
            start: total,
            first_page: pages,
        };
        total = total.checked_add(iov.len).ok_or(EINVAL)?;
        pages = pages.checked_add(seg.pages()).ok_or(EINVAL)?;
    }
    Ok((total, pages))
}

impl SegList<'static> {
    /// Validates user iovecs into a list of its own.  A segment whose end
    /// wraps around the address space is EFAULT; a total length that
    /// overflows u64 is EINVAL.
    pub fn new(iovecs: &[knem_cmd_param_iovec]) -> KResult<SegList<'static>> {
        let mut segs = KArray::<Segment>::try_default(segment_count(iovecs))?;
        let (total, pages) = fill(&mut segs, iovecs)?;
        // INVARIANT: checked and accumulated by fill.
        Ok(SegList {
            segs: Segs::Owned(segs),
            total,
            pages,
        })
    }
}

impl<'s> SegList<'s> {
    /// As [`SegList::new`], with the segments in `buf` when they fit
    /// (no allocation), on the heap otherwise.
    pub fn new_in(iovecs: &[knem_cmd_param_iovec], buf: &'s mut [Segment]) -> KResult<Self> {
        let Some(segs) = buf.get_mut(..segment_count(iovecs)) else {
            return SegList::new(iovecs);
        };
        let (total, pages) = fill(segs, iovecs)?;
        // INVARIANT: checked and accumulated by fill.
        Ok(SegList {
            segs: Segs::Borrowed(segs),
            total,
            pages,
        })
    }

    /// An empty list.
    pub const fn empty() -> Self {
        SegList {
            segs: Segs::Owned(KArray::empty()),
            total: 0,
            pages: 0,
        }
    }

    /// True when the segments are in increasing address order and no byte
    /// is in two of them: pieces written to them in any order then give
    /// what writing them in sequence gives.  False for lists that overlap,
    /// and (conservatively) for disjoint lists out of address order.
    pub fn ascending_disjoint(&self) -> bool {
        let mut end = 0u64;
        for s in self.segments().iter().filter(|s| s.len > 0) {
            if s.base < end {
                return false;
            }
            end = s.base.saturating_add(s.len);
        }
        true
    }

    /// The segments.
    pub fn segments(&self) -> &[Segment] {
        match &self.segs {
            Segs::Owned(a) => a,
            Segs::Borrowed(b) => b,
        }
    }

    /// Whether the segments are in a buffer of the caller's.
    pub fn is_borrowed(&self) -> bool {
        matches!(self.segs, Segs::Borrowed(_))
    }

    /// Total bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Total pages (the size of the page array of a region).
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// The position of flattened offset `off`, or None at or past the end.
    /// Binary search: O(log segments).
    pub fn seek(&self, off: u64) -> Option<Pos> {
        if off >= self.total {
            return None;
        }
        // Last segment starting at or before off.  Since off < total it is
        // non-empty and contains off (empty segments share the start of the
        // next one, so they are never the last one to start at or before a
        // byte that exists).
        let segs = self.segments();
        let idx = segs.partition_point(|s| s.start <= off).checked_sub(1)?;
        let seg = segs.get(idx)?;
        Some(Pos {
            seg: idx,
            in_seg: off - seg.start,
        })
    }

    /// Index in the page array of the page holding the byte at `pos`, and
    /// that byte's offset inside the page.
    pub fn page_of(&self, pos: Pos) -> Option<(u64, u32)> {
        let seg = self.segments().get(pos.seg)?;
        let addr = seg.base + pos.in_seg;
        let idx = seg.first_page + (addr >> PAGE_SHIFT) - (seg.base >> PAGE_SHIFT);
        Some((idx, (addr & (PAGE_SIZE - 1)) as u32))
    }
}

/// A moving position in a [`SegList`], skipping empty segments.
#[derive(Clone)]
pub struct Cursor<'a> {
    list: &'a SegList<'a>,
    pos: Pos,
}

impl<'a> Cursor<'a> {
    /// A cursor at flattened offset `off` (exhausted when past the end).
    pub fn at(list: &'a SegList<'a>, off: u64) -> Cursor<'a> {
        let pos = list.seek(off).unwrap_or(Pos {
            seg: list.segments().len(),
            in_seg: 0,
        });
        Cursor { list, pos }
    }

    /// Current position.
    pub fn pos(&self) -> Pos {
        self.pos
    }

    /// The list this cursor walks.
    pub fn list(&self) -> &'a SegList<'a> {
        self.list
    }

    /// User address of the current byte and bytes left in its segment, or
    /// None when exhausted.  Never returns an empty run.
    pub fn current(&self) -> Option<(u64, u64)> {
        let seg = self.list.segments().get(self.pos.seg)?;
        Some((seg.base + self.pos.in_seg, seg.len - self.pos.in_seg))
    }

    /// Moves `n` bytes forward; `n` must not exceed the current run.
    pub fn advance(&mut self, n: u64) {
        self.pos.in_seg += n;
        while let Some(seg) = self.list.segments().get(self.pos.seg) {
            if self.pos.in_seg < seg.len {
                break;
            }
            self.pos.seg += 1;
            self.pos.in_seg = 0;
        }
    }
}

#[cfg(test)]
pub(crate) fn iov(base: u64, len: u64) -> knem_cmd_param_iovec {
    knem_cmd_param_iovec { base, len }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_list_seeks_nowhere() {
        let l = SegList::new(&[]).unwrap();
        assert_eq!(l.total(), 0);
        assert_eq!(l.seek(0), None);
        assert_eq!(Cursor::at(&l, 0).current(), None);
    }

    #[test]
    fn zero_length_segments_are_skipped() {
        let l = SegList::new(&[
            iov(0x1000, 0),
            iov(0x2000, 10),
            iov(0x9000, 0),
            iov(0x5000, 5),
            iov(0, 0),
        ])
        .unwrap();
        assert_eq!(l.total(), 15);
        assert_eq!(l.pages(), 2);
        assert_eq!(l.segments().len(), 2);
        assert_eq!(l.seek(0), Some(Pos { seg: 0, in_seg: 0 }));
        assert_eq!(l.seek(10), Some(Pos { seg: 1, in_seg: 0 }));
        assert_eq!(l.seek(14), Some(Pos { seg: 1, in_seg: 4 }));
        assert_eq!(l.seek(15), None);
        let mut c = Cursor::at(&l, 0);
        c.advance(10);
        assert_eq!(c.current(), Some((0x5000, 5)));
        c.advance(5);
        assert_eq!(c.current(), None);
    }

    #[test]
    fn empty_iovecs_hold_no_memory() {
        let l = SegList::new(&[iov(0x1000, 0); 4096]).unwrap();
        assert_eq!((l.segments().len(), l.total(), l.pages()), (0, 0, 0));
        let mut buf = [Segment::default(); 2];
        let l =
            SegList::new_in(&[iov(0, 0), iov(0x1000, 3), iov(0, 0), iov(9, 1)], &mut buf).unwrap();
        assert!(l.is_borrowed());
        assert_eq!(l.segments().len(), 2);
        assert_eq!(l.seek(3), Some(Pos { seg: 1, in_seg: 0 }));
    }

    #[test]
    fn wrapping_segment_is_efault() {
        assert_eq!(SegList::new(&[iov(u64::MAX, 2)]).err(), Some(EFAULT));
        // Ending exactly at the top of the address space is representable.
        assert!(SegList::new(&[iov(u64::MAX - 1, 1)]).is_ok());
    }

    #[test]
    fn overflowing_total_is_einval() {
        assert_eq!(
            SegList::new(&[iov(0, u64::MAX), iov(0, 1)]).err(),
            Some(EINVAL)
        );
    }

    #[test]
    fn unaligned_segment_pages() {
        // 2 bytes straddling a page boundary touch 2 pages.
        let l = SegList::new(&[iov(0x1fff, 2), iov(0x3000, 4096), iov(0x4001, 4096)]).unwrap();
        assert_eq!(l.pages(), 2 + 1 + 2);
        assert_eq!(l.page_of(Pos { seg: 0, in_seg: 1 }), Some((1, 0)));
        assert_eq!(l.page_of(Pos { seg: 2, in_seg: 0 }), Some((3, 1)));
        assert_eq!(
            l.page_of(Pos {
                seg: 2,
                in_seg: 4095
            }),
            Some((4, 0))
        );
    }

    #[test]
    fn seek_many_segments() {
        let iovs: std::vec::Vec<_> = (0..1000).map(|i| iov(i * 0x10000, i % 3)).collect();
        let l = SegList::new(&iovs).unwrap();
        let mut off = 0;
        // Empty iovecs get no segment.
        for (i, v) in iovs.iter().filter(|v| v.len > 0).enumerate() {
            for k in 0..v.len {
                assert_eq!(l.seek(off + k), Some(Pos { seg: i, in_seg: k }));
            }
            off += v.len;
        }
        assert_eq!(l.seek(off), None);
    }

    mod disjoint {
        use super::*;
        use proptest::prelude::*;
        use std::vec::Vec;

        proptest! {
            /// ascending_disjoint against the bytes: true exactly when,
            /// skipping empty segments, each one starts at or after the
            /// end of the one before; and then no byte is in two.
            #[test]
            fn ascending_disjoint_matches_bytes(
                segs in prop::collection::vec((0u64..64, 0u64..16), 0..6),
            ) {
                let iovs: Vec<_> = segs.iter().map(|&(b, l)| iov(0x10000 + b, l)).collect();
                let l = SegList::new(&iovs).unwrap();
                let ne: Vec<_> = iovs.iter().filter(|v| v.len > 0).collect();
                let model = ne.windows(2).all(|w| w[0].base + w[0].len <= w[1].base);
                prop_assert_eq!(l.ascending_disjoint(), model);
                if model {
                    let mut bytes: Vec<u64> = ne
                        .iter()
                        .flat_map(|v| v.base..v.base + v.len)
                        .collect();
                    let n = bytes.len();
                    bytes.sort_unstable();
                    bytes.dedup();
                    prop_assert_eq!(bytes.len(), n);
                }
            }
        }
    }
}
