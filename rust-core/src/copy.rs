//! Executing copy plans through the shim.

use crate::env::Env;
use crate::layout::SegList;
use crate::plan::{InlinePlan, PairPlan};
use crate::region::Region;

/// How a copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Bytes moved.
    pub bytes: u64,
    /// False if a fault stopped the copy (status FAILED).
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
pub fn region_to_region<E: Env>(
    env: &E,
    src: &Region,
    src_off: u64,
    dst: &Region,
    dst_off: u64,
    bound: Option<u64>,
) -> Outcome {
    let mut bytes = 0u64;
    for c in PairPlan::new(src.layout(), src_off, dst.layout(), dst_off, bound) {
        let (Some(s), Some(d)) = (src.page(c.src.page), dst.page(c.dst.page)) else {
            return Outcome { bytes, ok: false };
        };
        // SAFETY: both regions are referenced, so their pages are pinned;
        // the planner keeps both ranges within their pages.
        unsafe { env.copy_page_page(d, c.dst.off, s, c.src.off, c.len) };
        bytes += c.len as u64;
    }
    Outcome { bytes, ok: true }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::iov;
    use crate::mock::MockEnv;
    use crate::region::{RegionAttrs, PROT_READ};
    use crate::stats::Stats;

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
        };
        let r =
            Region::create(&env, &stats, SegList::new(&[iov(a, 8192)]).unwrap(), attrs).unwrap();
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
