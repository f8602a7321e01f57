//! Segment lists and the copy planner against a reference model.
//!
//! Two iovec lists are decoded from the input (small segments in separate
//! 16 MiB slots, empty ones, segments that continue the previous one, ones
//! at the top of the address space and raw 64-bit ones), then:
//!
//! * [`SegList::new`] succeeds exactly when no segment wraps and the total
//!   fits in 64 bits, else fails with EFAULT (a wrap) or EINVAL (the total);
//!   its totals, prefix sums and page indices are the model's;
//! * `seek`, `page_of` and a [`Cursor`] walked with input-chosen steps name
//!   the model's segment, offset and address for each flattened offset;
//! * every chunk of [`InlinePlan`] and [`PairPlan`] (offsets and bounds
//!   from the input, including past-the-end and 2^64 - 1) is 1..=PAGE_SIZE
//!   bytes within one page of each page-array side, covers exactly the
//!   bytes the model puts at those flattened offsets, and the chunks add up
//!   to the length the model expects.
//!
//! The model never materialises the flattened list, so lists of any size
//! are checked; at most [`MAX_CHUNKS`] chunks of a plan are walked.

use super::Input;
use crate::edge::errno::{EFAULT, EINVAL};
use crate::edge::shim::{PAGE_SHIFT, PAGE_SIZE};
use crate::plan::layout::{Cursor, Pos, SegList};
use crate::plan::planner::{InlinePlan, PagePiece, PairPlan};
use knem_abi::knem_cmd_param_iovec as Iov;
use std::vec::Vec;

/// Chunks of one plan checked at most (a plan over huge raw segments
/// would otherwise run for ever).
pub const MAX_CHUNKS: usize = 4096;

/// One segment as the model sees it.
struct MSeg {
    base: u64,
    len: u64,
    start: u64,
    first_page: u64,
}

impl MSeg {
    fn pages(&self) -> u64 {
        if self.len == 0 {
            0
        } else {
            ((self.base + self.len - 1) >> PAGE_SHIFT) - (self.base >> PAGE_SHIFT) + 1
        }
    }
}

/// The reference model of a validated list.
struct Model {
    segs: Vec<MSeg>,
    total: u64,
    pages: u64,
}

impl Model {
    /// The model of `iovs`, or the errnos validation may fail with.
    fn new(iovs: &[Iov]) -> Result<Model, Vec<i64>> {
        let wraps = iovs.iter().any(|v| v.base.checked_add(v.len).is_none());
        let sum: u128 = iovs.iter().map(|v| v.len as u128).sum();
        let mut errs = Vec::new();
        if wraps {
            errs.push(EFAULT.to_neg());
        }
        if sum > u64::MAX as u128 {
            errs.push(EINVAL.to_neg());
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let (mut start, mut first_page) = (0u64, 0u64);
        let mut segs = Vec::with_capacity(iovs.len());
        // An empty iovec carries no byte and gets no segment.
        for v in iovs.iter().filter(|v| v.len > 0) {
            let s = MSeg {
                base: v.base,
                len: v.len,
                start,
                first_page,
            };
            start += s.len;
            first_page += s.pages();
            segs.push(s);
        }
        Ok(Model {
            segs,
            total: start,
            pages: first_page,
        })
    }

    /// The non-empty segment holding flattened offset `off`.
    fn seg_at(&self, off: u64) -> Option<usize> {
        self.segs
            .iter()
            .position(|s| s.len > 0 && s.start <= off && off - s.start < s.len)
    }

    /// User address of the page at index `idx` of the page array.
    fn page_addr(&self, idx: u64) -> Option<u64> {
        let s = self
            .segs
            .iter()
            .find(|s| s.len > 0 && s.first_page <= idx && idx - s.first_page < s.pages())?;
        Some((s.base & !(PAGE_SIZE - 1)) + ((idx - s.first_page) << PAGE_SHIFT))
    }

    /// Asserts that the flattened bytes `start..start + len` are the user
    /// bytes `addr..addr + len`, one for one.
    fn check_run(&self, start: u64, len: u64, addr: u64, what: &str) {
        let end = start.checked_add(len).expect("chunk end overflows");
        assert!(
            end <= self.total,
            "{what}: chunk {start}+{len} past the end"
        );
        for s in self.segs.iter().filter(|s| s.len > 0) {
            let lo = start.max(s.start);
            let hi = end.min(s.start + s.len);
            if lo < hi {
                let want = s.base + (lo - s.start);
                let got = addr.checked_add(lo - start);
                assert_eq!(got, Some(want), "{what}: flattened offset {lo}");
            }
        }
    }
}

/// Up to 7 segments of the kinds listed in the module documentation.
fn iovecs(inp: &mut Input<'_>) -> Vec<Iov> {
    let n = inp.u8() % 8;
    let mut v: Vec<Iov> = Vec::new();
    for i in 0..n as u64 {
        let kind = inp.u8();
        let iov = match kind % 8 {
            0..=3 => Iov {
                base: ((i + 1) << 24) + inp.u16() as u64,
                len: (inp.u16() % 9000) as u64,
            },
            4 => Iov {
                base: inp.u64(),
                len: 0,
            },
            5 => {
                let prev = v.last().copied().unwrap_or_default();
                Iov {
                    base: prev.base.saturating_add(prev.len),
                    len: (inp.u16() % 9000) as u64,
                }
            }
            6 => Iov {
                base: u64::MAX - inp.u16() as u64,
                len: inp.u16() as u64,
            },
            _ => Iov {
                base: inp.u64(),
                len: inp.u64(),
            },
        };
        v.push(iov);
    }
    v
}

/// An offset into a list of `total` bytes: small, 16-bit, raw, or near
/// the end (either side of it).
fn offset(inp: &mut Input<'_>, total: u64) -> u64 {
    let b = inp.u8();
    let k = (b >> 2) as u64;
    match b % 4 {
        0 => k,
        1 => inp.u16() as u64,
        2 => inp.u64(),
        _ if k < 32 => total.saturating_sub(k),
        _ => total.saturating_add(k - 32),
    }
}

fn bound(inp: &mut Input<'_>) -> Option<u64> {
    let b = inp.u8();
    match b % 4 {
        0 => None,
        1 => Some(inp.u16() as u64),
        2 => Some(inp.u64()),
        _ => Some((b >> 2) as u64),
    }
}

/// Validation against the model; the model when it succeeded.
fn validate(iovs: &[Iov]) -> Option<(SegList<'static>, Model)> {
    match (SegList::new(iovs), Model::new(iovs)) {
        (Ok(l), Ok(m)) => {
            assert_eq!((l.total(), l.pages()), (m.total, m.pages), "totals");
            assert_eq!(l.segments().len(), m.segs.len());
            for (s, ms) in l.segments().iter().zip(&m.segs) {
                assert_eq!(
                    (s.base, s.len, s.start, s.first_page),
                    (ms.base, ms.len, ms.start, ms.first_page)
                );
                assert_eq!(s.pages(), ms.pages());
            }
            Some((l, m))
        }
        (Err(e), Err(allowed)) => {
            assert!(
                allowed.contains(&e.to_neg()),
                "{iovs:?}: {e:?}, want one of {allowed:?}"
            );
            None
        }
        (l, m) => panic!(
            "{iovs:?}: SegList::new ok={}, model ok={}",
            l.is_ok(),
            m.is_ok()
        ),
    }
}

/// seek and page_of of `off` against the model.
fn check_seek(l: &SegList, m: &Model, off: u64) {
    let pos = l.seek(off);
    let Some(i) = m.seg_at(off) else {
        assert_eq!(pos, None, "seek({off}) past the end");
        return;
    };
    let s = &m.segs[i];
    let want = Pos {
        seg: i,
        in_seg: off - s.start,
    };
    assert_eq!(pos, Some(want), "seek({off})");
    let addr = s.base + want.in_seg;
    let (page, in_page) = l.page_of(want).expect("page_of of a valid position");
    assert_eq!(
        m.page_addr(page),
        Some(addr & !(PAGE_SIZE - 1)),
        "page_of({off})"
    );
    assert_eq!(in_page as u64, addr & (PAGE_SIZE - 1));
}

/// A cursor from `off`, moved by input-chosen steps (0: the whole run).
fn check_cursor(inp: &mut Input<'_>, l: &SegList, m: &Model, off: u64) {
    let mut c = Cursor::at(l, off);
    let mut at = off;
    for _ in 0..64 {
        let Some(i) = m.seg_at(at) else {
            assert_eq!(c.current(), None, "cursor at {at} past the end");
            return;
        };
        let s = &m.segs[i];
        let run = s.len - (at - s.start);
        assert_eq!(
            c.current(),
            Some((s.base + (at - s.start), run)),
            "cursor at {at}"
        );
        let step = match inp.u16() as u64 {
            0 => run,
            n => n.min(run),
        };
        c.advance(step);
        at += step;
    }
}

fn check_piece(m: &Model, p: PagePiece, len: u32, start: u64, what: &str) {
    assert!(
        len >= 1 && p.off as u64 + len as u64 <= PAGE_SIZE,
        "{what}: {len} bytes at {} cross a page",
        p.off
    );
    let page = m
        .page_addr(p.page)
        .unwrap_or_else(|| panic!("{what}: page {} not in the page array", p.page));
    m.check_run(start, len as u64, page + p.off as u64, what);
}

/// Runs one input; panics on the first disagreement with the model.
pub fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let a = iovecs(&mut inp);
    let b = iovecs(&mut inp);
    let va = validate(&a);
    let vb = validate(&b);
    let (Some((la, ma)), Some((lb, mb))) = (va, vb) else {
        return;
    };
    let off = offset(&mut inp, ma.total);
    let boff = offset(&mut inp, mb.total);
    let bound = bound(&mut inp);
    for k in [0, off, ma.total.saturating_sub(1), ma.total] {
        check_seek(&la, &ma, k);
    }
    let seek = offset(&mut inp, ma.total);
    check_seek(&la, &ma, seek);
    check_cursor(&mut inp, &la, &ma, seek);

    let want = ma
        .total
        .saturating_sub(off)
        .min(mb.total)
        .min(bound.unwrap_or(u64::MAX));
    let mut plan = InlinePlan::new(&la, off, &lb, bound);
    let mut done = 0u64;
    let mut finished = false;
    for _ in 0..MAX_CHUNKS {
        let Some(c) = plan.next() else {
            finished = true;
            break;
        };
        check_piece(&ma, c.region, c.len, off + done, "inline region side");
        mb.check_run(done, c.len as u64, c.uaddr, "inline local side");
        done += c.len as u64;
    }
    if finished {
        assert_eq!(done, want, "inline plan length");
    }

    let want = ma
        .total
        .saturating_sub(off)
        .min(mb.total.saturating_sub(boff))
        .min(bound.unwrap_or(u64::MAX));
    let mut plan = PairPlan::new(&la, off, &lb, boff, bound);
    let mut done = 0u64;
    let mut finished = false;
    for _ in 0..MAX_CHUNKS {
        let Some(c) = plan.next() else {
            finished = true;
            break;
        };
        check_piece(&ma, c.src, c.len, off + done, "pair source");
        check_piece(&mb, c.dst, c.len, boff + done, "pair destination");
        done += c.len as u64;
    }
    if finished {
        assert_eq!(done, want, "pair plan length");
    }
}
