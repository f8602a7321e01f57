//! Executing copy plans through the shim.

use crate::edge::shim::{Env, PAGE_SIZE};
use crate::plan::layout::SegList;
use crate::plan::planner::{InlinePlan, PairChunk, PairPlan};
use crate::state::region::Region;

/// How a copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes moved.
    pub bytes: u64,
    /// False if a fault stopped the copy, or the caller is dying or the
    /// offload thread stopping ([`Env::copy_should_stop`]): status FAILED.
    pub ok: bool,
}

/// Copies between `region` at `offset` and the caller's `local` segments,
/// region → local unless `write`.  Runs in the caller's context: the local
/// memory is touched with copy_{to,from}_user, never pinned.
pub fn inline<E: Env>(
    env: &E,
    region: &Region,
    offset: u64,
    local: &SegList,
    bound: Option<u64>,
    write: bool,
) -> Outcome {
    let mut bytes = 0u64;
    for c in InlinePlan::new(region.layout(), offset, local, bound) {
        let Some(page) = region.page(c.region.page) else {
            return Outcome { bytes, ok: false };
        };
        if env.copy_should_stop() {
            return Outcome { bytes, ok: false };
        }
        // SAFETY: the region's pages stay pinned while we hold a reference
        // to it; the planner keeps off + len within the page.
        let r = unsafe { env.copy_page_user(page, c.region.off, c.uaddr, c.len, !write) };
        if r.is_err() {
            return Outcome { bytes, ok: false };
        }
        bytes += c.len as u64;
    }
    Outcome { bytes, ok: true }
}

/// Copies from `src` at `src_off` to `dst` at `dst_off`.  Both sides are
/// pinned, so nothing can fault.
///
/// A region copied onto itself with the destination after an overlapping
/// source is copied from the end backwards, so the result is memmove's
/// (for regions whose offsets grow with the addresses, the usual layout;
/// the shim moves overlapping ranges of one page with memmove).
pub fn region_to_region<E: Env>(
    env: &E,
    src: &Region,
    src_off: u64,
    dst: &Region,
    dst_off: u64,
    bound: Option<u64>,
) -> Outcome {
    let len = src
        .layout()
        .total()
        .saturating_sub(src_off)
        .min(dst.layout().total().saturating_sub(dst_off))
        .min(bound.unwrap_or(u64::MAX));
    if core::ptr::eq(src, dst) && dst_off > src_off && dst_off - src_off < len {
        return backwards(env, src, src_off, dst_off, len);
    }
    let mut bytes = 0u64;
    for c in PairPlan::new(src.layout(), src_off, dst.layout(), dst_off, bound) {
        let (Some(s), Some(d)) = (src.page(c.src.page), dst.page(c.dst.page)) else {
            return Outcome { bytes, ok: false };
        };
        if env.copy_should_stop() {
            return Outcome { bytes, ok: false };
        }
        // SAFETY: both regions are referenced, so their pages are pinned;
        // the planner keeps both ranges within their pages.
        unsafe { env.copy_page_page(d, c.dst.off, s, c.src.off, c.len) };
        bytes += c.len as u64;
    }
    Outcome { bytes, ok: true }
}

/// Copies one chunk between two pinned regions; false if a page is missing.
fn pair_chunk<E: Env>(env: &E, src: &Region, dst: &Region, c: &PairChunk) -> bool {
    let (Some(s), Some(d)) = (src.page(c.src.page), dst.page(c.dst.page)) else {
        return false;
    };
    // SAFETY: both regions are referenced, so their pages are pinned; the
    // planner keeps both ranges within their pages.
    unsafe { env.copy_page_page(d, c.dst.off, s, c.src.off, c.len) };
    true
}

/// The overlapping self-copy of [`region_to_region`]: blocks of at most a
/// page from the end, the chunks of each block last to first.  A block
/// with more chunks than fit the stack buffer (tiny segments) is halved
/// until they fit; one byte is always one chunk.
fn backwards<E: Env>(env: &E, r: &Region, src_off: u64, dst_off: u64, len: u64) -> Outcome {
    const MAX_CHUNKS: usize = 8;
    let mut bytes = 0u64;
    let mut end = len;
    let mut block = PAGE_SIZE;
    while end > 0 {
        let b = block.min(end);
        let start = end - b;
        let mut buf = [None::<PairChunk>; MAX_CHUNKS];
        let mut n = 0;
        let mut plan = PairPlan::new(
            r.layout(),
            src_off + start,
            r.layout(),
            dst_off + start,
            Some(b),
        );
        for (slot, c) in buf.iter_mut().zip(&mut plan) {
            *slot = Some(c);
            n += 1;
        }
        if n == MAX_CHUNKS && plan.next().is_some() && b > 1 {
            block = b / 2;
            continue;
        }
        for c in buf.iter().take(n).rev().flatten() {
            if env.copy_should_stop() || !pair_chunk(env, r, r, c) {
                return Outcome { bytes, ok: false };
            }
            bytes += c.len as u64;
        }
        end = start;
        block = PAGE_SIZE;
    }
    Outcome { bytes, ok: true }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::layout::iov;
    use crate::state::account::AccountRef;
    use crate::state::region::{RegionAttrs, PROT_READ, PROT_WRITE};
    use crate::state::stats::Stats;
    use crate::testing::mock::MockEnv;

    fn memmove_case(segs: &[(u64, u64)], src_off: u64, dst_off: u64, bound: Option<u64>) {
        let (env, stats) = (MockEnv::new(), Stats::new());
        let a = env.map(4 * 4096, true);
        let data: std::vec::Vec<u8> = (0..4 * 4096u32).map(|i| (i * 7 + i / 253) as u8).collect();
        env.fill(a, &data);
        let iovs: std::vec::Vec<_> = segs.iter().map(|&(o, l)| iov(a + o, l)).collect();
        let layout = SegList::new(&iovs).unwrap();
        let attrs = RegionAttrs {
            prot: PROT_READ | PROT_WRITE,
            flags: 0,
            owner_ctx: 1,
            owner_uid: 0,
            account: AccountRef::NONE,
        };
        // The model: the region's bytes as one array, then memmove.
        let mut model: std::vec::Vec<u8> = segs
            .iter()
            .flat_map(|&(o, l)| data[o as usize..(o + l) as usize].to_vec())
            .collect();
        let total = model.len() as u64;
        let len = (total - src_off.min(total))
            .min(total - dst_off.min(total))
            .min(bound.unwrap_or(u64::MAX)) as usize;
        model.copy_within(src_off as usize..src_off as usize + len, dst_off as usize);
        let r = Region::create(&env, &stats, &env.pin_counts, layout, attrs).unwrap();
        let out = region_to_region(&env, &r, src_off, &r, dst_off, bound);
        assert_eq!(
            out,
            Outcome {
                bytes: len as u64,
                ok: true
            }
        );
        let mut got = std::vec::Vec::new();
        for &(o, l) in segs {
            got.extend(env.peek(a + o, l as usize));
        }
        assert_eq!(got, model, "segs {segs:?} {src_off} -> {dst_off}");
        Region::discard(r, &env, &stats);
    }

    #[test]
    fn overlapping_self_copy_is_memmove() {
        let whole = [(0, 4 * 4096)];
        for (s, d) in [(0, 1), (0, 100), (10, 4096), (0, 5000), (100, 0), (3, 3)] {
            memmove_case(&whole, s, d, None);
            memmove_case(&whole, s, d, Some(6000));
        }
        // Tiny segments: more chunks per page than the block buffer holds.
        let tiny: std::vec::Vec<(u64, u64)> = (0..300).map(|i| (i * 40, 3)).collect();
        memmove_case(&tiny, 0, 7, None);
        memmove_case(&[(0, 3000), (5000, 6000)], 1000, 2500, None);
    }

    #[test]
    fn fault_midway_reports_bytes_done() {
        let (env, stats) = (MockEnv::new(), Stats::new());
        let a = env.map(8192, true);
        let l = env.map(4096, true);
        let attrs = RegionAttrs {
            prot: PROT_READ,
            flags: 0,
            owner_ctx: 1,
            owner_uid: 0,
            account: AccountRef::NONE,
        };
        let r = Region::create(
            &env,
            &stats,
            &env.pin_counts,
            SegList::new(&[iov(a, 8192)]).unwrap(),
            attrs,
        )
        .unwrap();
        // 4096 good bytes, then the guard page after l.
        let local = SegList::new(&[iov(l, 6000)]).unwrap();
        assert_eq!(
            inline(&env, &r, 0, &local, None, false),
            Outcome {
                bytes: 4096,
                ok: false
            }
        );
        assert_eq!(
            inline(&env, &r, 0, &local, Some(4096), false),
            Outcome {
                bytes: 4096,
                ok: true
            }
        );
        assert_eq!(
            inline(&env, &r, 9000, &local, None, false),
            Outcome { bytes: 0, ok: true }
        );
        Region::discard(r, &env, &stats);
    }
}
