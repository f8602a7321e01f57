//! Region lifetime and accounting: what a close releases, many regions,
//! and the driver's own counters.

use crate::ensure;
use crate::stats::{self, Snapshot};
use crate::util::*;
use knem::{Cookie, Device, Errno, Iovec, Protection, RegionFlags};

/// Pages of the large region of the close test (64 MiB): large enough that
/// a leak of its pages stands far above MemFree's noise (seen up to 12 MB
/// in one emulated run).
const BIG_PAGES: usize = 16384;

/// MemFree lost by mapping, filling and unmapping the big buffer without
/// any region: the noise the region case is compared against.
fn memfree_lost_without_regions() -> TestResult<i64> {
    let before = stats::meminfo_kib("MemFree")? as i64;
    let big = Mem::new(BIG_PAGES)?;
    big.fill(0x42);
    drop(big);
    Ok(before - stats::meminfo_kib("MemFree")? as i64)
}

pub fn close_returns_to_baseline() -> TestResult {
    let control = memfree_lost_without_regions()?;
    let base = Snapshot::take()?;
    let free_before = stats::meminfo_kib("MemFree")? as i64;
    let big = Mem::new(BIG_PAGES)?;
    big.fill(0x42);
    let small = Mem::new(REGION3.pages)?;
    // Real pages: pins of the shared zero page are not counted in vmstat.
    small.fill(0x24);
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(4096).ctx("mmap status array")?;
    // SAFETY (all four): our mappings outlive the context, which is gone
    // before they are unmapped; the memory is never read back.
    let regions: [(&str, TestResult<Cookie>, u64); 4] = unsafe {
        [
            (
                "64 MiB",
                dev.create_region_raw(
                    &[Iovec::from_raw(big.addr(0), (BIG_PAGES * PAGE) as u64)],
                    Protection::READ_WRITE,
                    RegionFlags::NONE,
                )
                .ctx("CREATE_REGION 64 MiB"),
                BIG_PAGES as u64,
            ),
            (
                "3 segments",
                dev.create_region_raw(&REGION3.iovecs(&small), Protection::READ, RegionFlags::NONE)
                    .ctx("CREATE_REGION 3 segments"),
                REGION3.pinned_pages(),
            ),
            (
                "single-use",
                dev.create_region_raw(
                    &[Iovec::from_raw(big.addr(PAGE + 1), 2 * PAGE as u64)],
                    Protection::READ,
                    RegionFlags::SINGLE_USE,
                )
                .ctx("CREATE_REGION single-use"),
                3,
            ),
            (
                "1 byte",
                dev.create_region_raw(
                    &[Iovec::from_raw(small.addr(PAGE - 1), 1)],
                    Protection::WRITE,
                    RegionFlags::ANY_USER_ACCESS,
                )
                .ctx("CREATE_REGION 1 byte"),
                1,
            ),
        ]
    };
    let mut pages = 0;
    for (_, r, p) in &regions {
        r.clone()?;
        pages += p;
    }
    let live = Snapshot {
        contexts: base.contexts + 1,
        regions: base.regions + regions.len() as u64,
        pinned_pages: base.pinned_pages + pages,
        foll_pins: base.foll_pins + pages as i64,
    };
    stats::wait_for(&live, "with 4 live regions")?;
    // The status array's mapping holds the file open: closing the fd
    // alone releases nothing, unmapping it releases everything.
    drop(dev);
    stats::wait_for(&live, "after close, status array still mapped")?;
    drop(array);
    stats::wait_for(&base, "after close and munmap of the status array")?;
    drop(big);
    drop(small);
    // Nothing pinned stays behind: the 64 MiB come back (within noise).
    let lost = free_before - stats::meminfo_kib("MemFree")? as i64;
    let slack = 16 * 1024;
    ensure!(
        lost <= control.max(0) + slack,
        "MemFree dropped by {lost} kB across regions over a 64 MiB buffer, close and \
         unmap, but only by {control} kB for the same buffer without regions: pinned pages \
         kept a reference"
    );
    Ok(())
}

pub fn multi_region_1000() -> TestResult {
    const N: usize = 1000;
    let base = Snapshot::take()?;
    let created0 = stats::counter("regions_created")?;
    let dev = Device::open().ctx("open")?;
    let reader = Device::open().ctx("open second fd")?;
    let mem = Mem::new(N)?;
    for i in 0..N {
        mem.write(i * PAGE, &[(i % 251) as u8, (i / 251) as u8, 0xab]);
    }
    let mut cookies = Vec::with_capacity(N);
    for i in 0..N {
        // SAFETY: one page of our mapping each; read-only.
        let c = unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(i * PAGE), PAGE as u64)],
                Protection::READ,
                RegionFlags::NONE,
            )
        }
        .map_err(|e| format!("region {i}: {e}"))?;
        cookies.push(c);
    }
    let mut sorted = cookies.clone();
    sorted.sort();
    sorted.dedup();
    ensure!(
        sorted.len() == N,
        "only {} distinct cookies for {N} regions",
        sorted.len()
    );
    ensure!(sorted[0].as_raw() != 0, "cookie 0 handed out");
    let live = Snapshot {
        contexts: base.contexts + 2,
        regions: base.regions + N as u64,
        pinned_pages: base.pinned_pages + N as u64,
        foll_pins: base.foll_pins + N as i64,
    };
    stats::wait_for(&live, &format!("with {N} live regions"))?;
    let created = stats::counter("regions_created")? - created0;
    ensure!(
        created == N as u64,
        "regions_created grew by {created}, expected {N}"
    );
    for i in [0, 1, 499, 500, 998, 999] {
        let mut buf = [0u8; 3];
        expect_success(
            &format!("read region {i}"),
            reader.read_into(cookies[i], 0, &mut buf, None),
        )?;
        ensure!(
            buf == [(i % 251) as u8, (i / 251) as u8, 0xab],
            "region {i} gave {buf:?}"
        );
    }
    // Destroy in an order that is neither creation order nor its reverse.
    for k in 0..N {
        let i = (k * 7) % N;
        dev.destroy_region(cookies[i])
            .map_err(|e| format!("destroy region {i}: {e}"))?;
    }
    let mut buf = [0u8; 1];
    expect_errno(
        "read a destroyed region",
        reader.read_into(cookies[500], 0, &mut buf, None),
        Errno::EINVAL,
    )?;
    drop((dev, reader));
    stats::wait_for(&base, "after destroying 1000 regions")
}

/// Every failed ioctl is counted once under its errno.
pub fn stats_error_counters() -> TestResult {
    let names = [
        "err_einval",
        "err_eperm",
        "err_eacces",
        "err_efault",
        "err_enomem",
        "err_ebusy",
        "err_enotty",
    ];
    let before = stats::counters(&names)?;
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    // SAFETY: our scratch mapping.
    let ro = unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), 64)],
            Protection::READ,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION")?;
    let mut buf = [0u8; 8];
    // 3 × EINVAL, 2 × EACCES, 1 × EFAULT, 1 × ENOTTY.
    expect_errno(
        "unknown cookie",
        dev.read_into(Cookie::from_raw(1), 0, &mut buf, None),
        Errno::EINVAL,
    )?;
    expect_errno(
        "unknown cookie",
        dev.destroy_region(Cookie::from_raw(1)),
        Errno::EINVAL,
    )?;
    expect_errno(
        "bad protection",
        // SAFETY: our scratch mapping.
        unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(0), 8)],
                Protection::from_bits_retain(4),
                RegionFlags::NONE,
            )
        },
        Errno::EINVAL,
    )?;
    expect_errno(
        "write read-only",
        dev.write_from(ro, 0, &buf, None),
        Errno::EACCES,
    )?;
    expect_errno(
        "write read-only",
        dev.write_from(ro, 0, &buf, Some(1)),
        Errno::EACCES,
    )?;
    let hole = unmapped_addr(1)?;
    // SAFETY: the argument pointer is unmapped.
    let r = unsafe { dev.raw_ioctl(knem::abi::cmd::GET_INFO, hole as *mut _) };
    expect_raw_errno("GET_INFO on unmapped", r, Errno::EFAULT)?;
    // SAFETY: 8 writable bytes, more than the command's size.
    let r = unsafe {
        dev.raw_ioctl(
            knem::abi::cmd::ioc(2, b'K', 0x3f, 8),
            buf.as_mut_ptr().cast(),
        )
    };
    expect_raw_errno("unknown command", r, Errno::ENOTTY)?;
    let after = stats::counters(&names)?;
    let want = [3u64, 0, 2, 1, 0, 0, 1];
    let got: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    ensure!(
        got == want,
        "counter deltas {}",
        names
            .iter()
            .zip(got.iter().zip(want))
            .map(|(n, (g, w))| format!("{n} +{g} (expected +{w})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    dev.destroy_region(ro).ctx("DESTROY_REGION")
}

/// Bytes moved are counted per mode, exactly.
pub fn stats_byte_counters() -> TestResult {
    let names = [
        "bytes_inline_read",
        "bytes_inline_write",
        "bytes_region_copy",
        "bytes_async",
    ];
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(4)?;
    // SAFETY: our scratch mapping, only snapshotted.
    let (a, b) = unsafe {
        (
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(0), 10_000)],
                Protection::READ_WRITE,
                RegionFlags::NONE,
            )
            .ctx("CREATE_REGION")?,
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(10_000), 5_000)],
                Protection::READ_WRITE,
                RegionFlags::NONE,
            )
            .ctx("CREATE_REGION")?,
        )
    };
    let before = stats::counters(&names)?;
    let mut buf = vec![0u8; 3000];
    expect_success("read", dev.read_into(a, 9_000, &mut buf, None))?; // 1000 (region end)
    expect_success("read", dev.read_into(a, 0, &mut buf, Some(123)))?; // 123
    expect_success("write", dev.write_from(b, 0, &buf[..777], None))?; // 777
    expect_success("write", dev.write_from(b, 4_990, &buf, None))?; // 10
    expect_success("copy", dev.copy(a, 0, b, 0, None))?; // 5000
    expect_success("copy", dev.copy(a, 500, b, 100, Some(42)))?; // 42
    expect_success(
        "read past the end",
        dev.read_into(a, 20_000, &mut buf, None),
    )?; // 0
    let after = stats::counters(&names)?;
    let got: Vec<u64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
    let want = [1123u64, 787, 5042, 0];
    ensure!(
        got == want,
        "deltas of {names:?}: {got:?}, expected {want:?}"
    );
    dev.destroy_region(a).ctx("DESTROY_REGION")?;
    dev.destroy_region(b).ctx("DESTROY_REGION")
}
