//! Segment iteration: validation never panics, and every planned chunk
//! maps the right bytes (checked against the flattened segments).
#![no_main]

use knem_abi::knem_cmd_param_iovec;
use knem_core::env::PAGE_SIZE;
use knem_core::layout::SegList;
use knem_core::plan::{InlinePlan, PagePiece, PairPlan};
use libfuzzer_sys::fuzz_target;

fn take<const N: usize>(data: &mut &[u8]) -> [u8; N] {
    let mut b = [0u8; N];
    let n = data.len().min(N);
    b[..n].copy_from_slice(&data[..n]);
    *data = &data[n..];
    b
}

/// Up to 6 segments; small ones most of the time, raw u64s sometimes.
fn iovecs(data: &mut &[u8]) -> Vec<knem_cmd_param_iovec> {
    let n = take::<1>(data)[0] % 7;
    (0..n)
        .map(|i| {
            let [kind] = take::<1>(data);
            if kind & 0x80 != 0 {
                let base = u64::from_le_bytes(take::<8>(data));
                let len = u64::from_le_bytes(take::<8>(data));
                knem_cmd_param_iovec { base, len }
            } else {
                let base = ((i as u64) << 24) + u16::from_le_bytes(take::<2>(data)) as u64;
                let len = (u16::from_le_bytes(take::<2>(data)) % 9000) as u64;
                knem_cmd_param_iovec { base, len }
            }
        })
        .collect()
}

fn flat(iovs: &[knem_cmd_param_iovec]) -> Vec<u64> {
    iovs.iter()
        .flat_map(|v| (0..v.len).map(move |k| v.base + k))
        .collect()
}

fn pages(iovs: &[knem_cmd_param_iovec]) -> Vec<u64> {
    let mut p = Vec::new();
    for v in iovs.iter().filter(|v| v.len > 0) {
        p.extend((v.base / PAGE_SIZE..=(v.base + v.len - 1) / PAGE_SIZE).map(|x| x * PAGE_SIZE));
    }
    p
}

fn addr(pages: &[u64], p: PagePiece, k: u64) -> u64 {
    pages[p.page as usize] + p.off as u64 + k
}

fuzz_target!(|data: &[u8]| {
    let mut data = data;
    let a = iovecs(&mut data);
    let b = iovecs(&mut data);
    let off = u16::from_le_bytes(take::<2>(&mut data)) as u64;
    let boff = u16::from_le_bytes(take::<2>(&mut data)) as u64;
    let [bounded] = take::<1>(&mut data);
    let bound = (bounded & 1 == 1).then(|| u16::from_le_bytes(take::<2>(&mut data)) as u64);
    let (Ok(la), Ok(lb)) = (SegList::new(&a), SegList::new(&b)) else {
        return;
    };
    // Only small lists are modelled byte by byte.
    if la.total() > 100_000 || lb.total() > 100_000 {
        let _ = InlinePlan::new(&la, off, &lb, bound).take(1000).count();
        return;
    }
    let (fa, fb, pa, pb) = (flat(&a), flat(&b), pages(&a), pages(&b));
    let mut done = 0u64;
    for c in InlinePlan::new(&la, off, &lb, bound) {
        assert!(c.len > 0 && c.region.off as u64 + c.len as u64 <= PAGE_SIZE);
        for k in 0..c.len as u64 {
            assert_eq!(addr(&pa, c.region, k), fa[(off + done + k) as usize]);
            assert_eq!(c.uaddr + k, fb[(done + k) as usize]);
        }
        done += c.len as u64;
    }
    let want = la
        .total()
        .saturating_sub(off)
        .min(lb.total())
        .min(bound.unwrap_or(u64::MAX));
    assert_eq!(done, want);
    let mut done = 0u64;
    for c in PairPlan::new(&la, off, &lb, boff, bound) {
        for k in 0..c.len as u64 {
            assert_eq!(addr(&pa, c.src, k), fa[(off + done + k) as usize]);
            assert_eq!(addr(&pb, c.dst, k), fb[(boff + done + k) as usize]);
        }
        done += c.len as u64;
    }
    let want = la
        .total()
        .saturating_sub(off)
        .min(lb.total().saturating_sub(boff))
        .min(bound.unwrap_or(u64::MAX));
    assert_eq!(done, want);
});
