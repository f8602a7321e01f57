//! COPY and COPY_BOUNDED between the regions of two processes.

use crate::ensure;
use crate::util::*;
use knem::{Cookie, Device, Errno, Iovec, Protection, RegionFlags};

const SEED_SRC: u8 = 0x5d;
const SENTINEL: u8 = 0xcd;

/// A peer declares REGION3 (pattern) read-only; we copy from it into our
/// own 2-segment writable region and check our memory.
pub fn region_to_region() -> TestResult {
    let mut peer = spawn_peer(|chan| {
        let dev = Device::open().ctx("peer open")?;
        let mem = Mem::new(REGION3.pages)?;
        REGION3.fill_with(&mem, |i| pat(SEED_SRC, i));
        // SAFETY: our mapping outlives the region; others only read it.
        let c = unsafe {
            dev.create_region_raw(&REGION3.iovecs(&mem), Protection::READ, RegionFlags::NONE)
        }
        .ctx("CREATE_REGION")?;
        chan.send(c.as_raw())?;
        chan.recv()?;
        dev.destroy_region(c).ctx("DESTROY_REGION")
    })?;
    let src = Cookie::from_raw(peer.recv()?);
    let dev = Device::open().ctx("open")?;
    let dst_layout = LOCAL2_BIG;
    let mem = Mem::new(dst_layout.pages)?;
    // SAFETY: our mapping, only snapshotted while the region lives.
    let dst = unsafe {
        dev.create_region_raw(
            &dst_layout.iovecs(&mem),
            Protection::WRITE,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION dst")?;
    let (st, dt) = (REGION3.total(), dst_layout.total());
    let src_offsets = [0, 1, 4095, 5003, 9101, st - 1, st, st + 7];
    let dst_offsets = [0, 2999, 3001, 4096, dt - 10, dt, u64::MAX];
    let lengths = [
        None,
        Some(0),
        Some(1),
        Some(4097),
        Some(9000),
        Some(u64::MAX),
    ];
    for &so in &src_offsets {
        for &dof in &dst_offsets {
            for &len in &lengths {
                mem.fill(SENTINEL);
                let what = format!(
                    "{} src offset {so} dst offset {dof} length {len:?}",
                    if len.is_some() {
                        "COPY_BOUNDED"
                    } else {
                        "COPY"
                    }
                );
                expect_success(&what, dev.copy(src, so, dst, dof, len))?;
                let n = expected_len(st, so, dt.saturating_sub(dof), len);
                dst_layout
                    .verify(
                        &mem.snapshot(),
                        |_| SENTINEL,
                        dof.min(dt),
                        n,
                        |k| pat(SEED_SRC, so + k),
                    )
                    .map_err(|e| format!("{what}: expected {n} bytes: {e}"))?;
            }
        }
    }
    peer.send(0)?;
    peer.finish()?;
    dev.destroy_region(dst).ctx("DESTROY_REGION")
}

/// COPY checks protection on both sides.
pub fn eacces() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(2)?;
    let mk = |off: usize, prot: Protection| -> TestResult<Cookie> {
        // SAFETY: our scratch mapping, only snapshotted.
        unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(off), 1000)],
                prot,
                RegionFlags::NONE,
            )
        }
        .ctx("CREATE_REGION")
    };
    let ro = mk(0, Protection::READ)?;
    let wo = mk(2000, Protection::WRITE)?;
    let rw = mk(4096, Protection::READ_WRITE)?;
    for len in [None, Some(10)] {
        expect_errno(
            &format!("COPY from write-only ({len:?})"),
            dev.copy(wo, 0, rw, 0, len),
            Errno::EACCES,
        )?;
        expect_errno(
            &format!("COPY to read-only ({len:?})"),
            dev.copy(rw, 0, ro, 0, len),
            Errno::EACCES,
        )?;
        expect_errno(
            &format!("COPY wo -> ro ({len:?})"),
            dev.copy(wo, 0, ro, 0, len),
            Errno::EACCES,
        )?;
        expect_success(
            &format!("COPY ro -> wo ({len:?})"),
            dev.copy(ro, 0, wo, 0, len),
        )?;
    }
    ensure!(
        mem.snapshot().iter().all(|&b| b == 0),
        "copies of zeros wrote something else"
    );
    for c in [ro, wo, rw] {
        dev.destroy_region(c).ctx("DESTROY_REGION")?;
    }
    Ok(())
}
