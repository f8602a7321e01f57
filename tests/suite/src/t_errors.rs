//! Every errno of SPEC §3 "Access", in the order the driver checks them.

use crate::ensure;
use crate::util::*;
use knem::abi::{self, cmd};
use knem::{Cookie, Device, Errno, Iovec, Protection, RegionFlags, Status};
use nix::sys::mman::ProtFlags;

/// A region of `len` bytes at the start of `mem` (which must outlive it).
fn region(
    dev: &Device,
    mem: &Mem,
    len: u64,
    prot: Protection,
    flags: RegionFlags,
) -> TestResult<Cookie> {
    // SAFETY: our own scratch mapping, only ever snapshotted.
    unsafe { dev.create_region_raw(&[Iovec::from_raw(mem.addr(0), len)], prot, flags) }
        .ctx("CREATE_REGION")
}

pub fn eacces_protection() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let peer = Device::open().ctx("open second fd")?;
    let mem = Mem::new(1)?;
    mem.fill(0x77);
    let wo = region(&owner, &mem, 100, Protection::WRITE, RegionFlags::NONE)?;
    let ro = region(&owner, &mem, 100, Protection::READ, RegionFlags::NONE)?;
    let mut buf = [0u8; 10];
    expect_errno(
        "read a write-only region",
        peer.read_into(wo, 0, &mut buf, None),
        Errno::EACCES,
    )?;
    expect_errno(
        "bounded read of a write-only region",
        peer.read_into(wo, 0, &mut buf, Some(5)),
        Errno::EACCES,
    )?;
    ensure!(buf == [0; 10], "refused reads wrote {buf:?}");
    expect_errno(
        "write a read-only region",
        peer.write_from(ro, 0, &[1, 2, 3], None),
        Errno::EACCES,
    )?;
    expect_errno(
        "bounded write of a read-only region",
        peer.write_from(ro, 0, &[1, 2, 3], Some(2)),
        Errno::EACCES,
    )?;
    ensure!(
        mem.snapshot().iter().all(|&b| b == 0x77),
        "refused writes modified the region"
    );
    // The owner's own context is subject to the same protection.
    expect_errno(
        "owner reads its write-only region",
        owner.read_into(wo, 0, &mut buf, None),
        Errno::EACCES,
    )?;
    // And the allowed directions work.
    expect_success(
        "read a read-only region",
        peer.read_into(ro, 0, &mut buf, None),
    )?;
    ensure!(buf == [0x77; 10], "read gave {buf:?}");
    expect_success(
        "write a write-only region",
        peer.write_from(wo, 0, &[1, 2, 3], None),
    )?;
    ensure!(mem.snapshot()[..4] == [1, 2, 3, 0x77], "write did not land");
    Ok(())
}

pub fn einval_unknown_cookie() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    let live = region(&dev, &mem, 64, Protection::READ_WRITE, RegionFlags::NONE)?;
    let mut buf = [0u8; 8];
    let raw = live.as_raw();
    // Zero, random values, and the live cookie with its tag or index bits
    // flipped: only the exact cookie may match.
    let bogus = [
        0,
        1,
        u64::MAX,
        0x1234_5678_9abc_def0,
        raw ^ (1 << 63),
        raw ^ (1 << 40),
        raw ^ 1,
        raw.wrapping_add(1 << 32),
    ];
    for b in bogus {
        let c = Cookie::from_raw(b);
        expect_errno(
            &format!("read cookie {c}"),
            dev.read_into(c, 0, &mut buf, None),
            Errno::EINVAL,
        )?;
        expect_errno(
            &format!("bounded write cookie {c}"),
            dev.write_from(c, 0, &buf, Some(1)),
            Errno::EINVAL,
        )?;
        expect_errno(
            &format!("COPY from cookie {c}"),
            dev.copy(c, 0, live, 0, None),
            Errno::EINVAL,
        )?;
        expect_errno(
            &format!("COPY_BOUNDED to cookie {c}"),
            dev.copy(live, 0, c, 0, Some(8)),
            Errno::EINVAL,
        )?;
        expect_errno(
            &format!("DESTROY cookie {c}"),
            dev.destroy_region(c),
            Errno::EINVAL,
        )?;
    }
    expect_success(
        "the live region still works",
        dev.read_into(live, 0, &mut buf, None),
    )?;
    dev.destroy_region(live).ctx("DESTROY_REGION")
}

pub fn einval_destroyed_cookie() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let other = Device::open().ctx("open second fd")?;
    let mem = Mem::new(1)?;
    let c = region(&dev, &mem, 64, Protection::READ_WRITE, RegionFlags::NONE)?;
    let mut buf = [0u8; 8];
    expect_success("read before destroy", other.read_into(c, 0, &mut buf, None))?;
    dev.destroy_region(c).ctx("DESTROY_REGION")?;
    expect_errno(
        "read after destroy",
        other.read_into(c, 0, &mut buf, None),
        Errno::EINVAL,
    )?;
    expect_errno(
        "write after destroy",
        other.write_from(c, 0, &buf, None),
        Errno::EINVAL,
    )?;
    expect_errno("second DESTROY", dev.destroy_region(c), Errno::EINVAL)?;
    // A new region (likely in the same slot) does not revive the old cookie.
    let c2 = region(&dev, &mem, 64, Protection::READ_WRITE, RegionFlags::NONE)?;
    ensure!(c2 != c, "a new region got the destroyed cookie {c}");
    expect_errno(
        "old cookie after slot reuse",
        other.read_into(c, 0, &mut buf, None),
        Errno::EINVAL,
    )?;
    // Closing the fd destroys its regions.
    drop(dev);
    expect_errno(
        "read after the owner closed",
        other.read_into(c2, 0, &mut buf, None),
        Errno::EINVAL,
    )?;
    Ok(())
}

pub fn einval_destroy_other_context() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let other = Device::open().ctx("open second fd")?;
    let mem = Mem::new(1)?;
    let c = region(
        &dev,
        &mem,
        64,
        Protection::READ,
        RegionFlags::ANY_USER_ACCESS,
    )?;
    expect_errno(
        "DESTROY from another fd",
        other.destroy_region(c),
        Errno::EINVAL,
    )?;
    // From another process, with its own context.
    let mut peer = spawn_peer(move |chan| {
        let d = Device::open().ctx("peer open")?;
        let r = d.destroy_region(c);
        chan.send(
            r.err()
                .and_then(|e| e.errno())
                .map_or(0, |e| e as i32 as u64),
        )
    })?;
    let got = peer.recv()?;
    peer.finish()?;
    ensure!(
        got == Errno::EINVAL as i32 as u64,
        "DESTROY from another process: expected EINVAL, got {:?}",
        Errno::from_raw(got as i32)
    );
    let mut buf = [0u8; 8];
    expect_success(
        "region survives foreign DESTROYs",
        other.read_into(c, 0, &mut buf, None),
    )?;
    dev.destroy_region(c).ctx("DESTROY by the owner")
}

pub fn efault_bad_pointers() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    let c = region(&dev, &mem, 64, Protection::READ_WRITE, RegionFlags::NONE)?;
    let no_access = Mem::new(1)?;
    no_access.protect(0, 1, ProtFlags::PROT_NONE)?;
    // Last: a later mmap could reuse the hole.
    let hole = unmapped_addr(1)? as *mut std::ffi::c_void;
    let kernel = 0xffff_8000_0000_0000u64 as *mut std::ffi::c_void;
    for (name, c) in [
        ("GET_INFO", cmd::GET_INFO),
        ("CREATE_REGION", cmd::CREATE_REGION),
        ("DESTROY_REGION", cmd::DESTROY_REGION),
        ("COPY", cmd::COPY),
        ("COPY_BOUNDED", cmd::COPY_BOUNDED),
        ("INLINE_COPY", cmd::INLINE_COPY),
        ("INLINE_COPY_BOUNDED", cmd::INLINE_COPY_BOUNDED),
    ] {
        for (where_, p) in [
            ("unmapped", hole),
            ("PROT_NONE", no_access.addr(0) as *mut _),
            ("NULL", std::ptr::null_mut()),
            ("kernel", kernel),
        ] {
            // SAFETY: the pointers are unmapped or not user memory at all.
            let r = unsafe { dev.raw_ioctl(c, p) };
            expect_raw_errno(
                &format!("{name} with a {where_} argument pointer"),
                r,
                Errno::EFAULT,
            )?;
        }
    }
    // Unreadable iovec arrays.
    for (where_, arr) in [("unmapped", hole as u64), ("PROT_NONE", no_access.addr(0))] {
        efault_iovec_arrays(&dev, c, where_, arr)?;
    }
    dev.destroy_region(c).ctx("DESTROY_REGION")
}

fn efault_iovec_arrays(dev: &Device, c: Cookie, where_: &str, arr: u64) -> TestResult {
    let mut create = abi::knem_cmd_create_region {
        iovec_array: arr,
        iovec_nr: 2,
        protection: Protection::READ.bits(),
        ..Default::default()
    };
    // SAFETY: a create_region struct whose iovec array is unmapped.
    let r = unsafe {
        dev.raw_ioctl(
            cmd::CREATE_REGION,
            (&mut create as *mut abi::knem_cmd_create_region).cast(),
        )
    };
    expect_raw_errno(
        &format!("CREATE_REGION with an {where_} iovec array"),
        r,
        Errno::EFAULT,
    )?;
    ensure!(
        create.cookie == 0,
        "failed CREATE_REGION wrote cookie {:#x}",
        create.cookie
    );

    for (name, c_, bounded) in [
        ("INLINE_COPY", cmd::INLINE_COPY, false),
        ("INLINE_COPY_BOUNDED", cmd::INLINE_COPY_BOUNDED, true),
    ] {
        for write in [0, 1] {
            let r = if bounded {
                let mut a = abi::knem_cmd_inline_copy_bounded {
                    local_iovec_array: arr,
                    local_iovec_nr: 1,
                    write,
                    remote_cookie: c.as_raw(),
                    length: 10,
                    ..Default::default()
                };
                // SAFETY: the local iovec array is unmapped.
                unsafe {
                    dev.raw_ioctl(
                        c_,
                        (&mut a as *mut abi::knem_cmd_inline_copy_bounded).cast(),
                    )
                }
            } else {
                let mut a = abi::knem_cmd_inline_copy {
                    local_iovec_array: arr,
                    local_iovec_nr: 1,
                    write,
                    remote_cookie: c.as_raw(),
                    ..Default::default()
                };
                // SAFETY: as above.
                unsafe { dev.raw_ioctl(c_, (&mut a as *mut abi::knem_cmd_inline_copy).cast()) }
            };
            expect_raw_errno(
                &format!("{name} (write={write}) with an {where_} iovec array"),
                r,
                Errno::EFAULT,
            )?;
        }
    }
    Ok(())
}

pub fn efault_unmapped_region() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let hole = unmapped_addr(4)?;
    for prot in [Protection::READ, Protection::WRITE, Protection::READ_WRITE] {
        // SAFETY: the range is unmapped; the driver must refuse it.
        let r = unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(hole + 100, 3 * 4096)],
                prot,
                RegionFlags::NONE,
            )
        };
        expect_errno(
            &format!("region over an unmapped range ({prot:?})"),
            r,
            Errno::EFAULT,
        )?;
    }
    // Mapped then unmapped in the middle: the pages pinned before the hole
    // must be released (the harness checks pinned_pages and FOLL_PIN).
    let mem = Mem::new(8)?;
    mem.fill(1);
    mem.punch(5, 2)?;
    // SAFETY: as above, for the part that is unmapped.
    let r = unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(10), 8 * 4096 - 20)],
            Protection::READ,
            RegionFlags::NONE,
        )
    };
    expect_errno("region over a partly unmapped range", r, Errno::EFAULT)?;
    // A good segment followed by a bad one.
    // SAFETY: as above.
    let r = unsafe {
        dev.create_region_raw(
            &[
                Iovec::from_raw(mem.addr(0), 4096),
                Iovec::from_raw(mem.addr(5 * 4096), 1),
            ],
            Protection::READ,
            RegionFlags::NONE,
        )
    };
    expect_errno("region whose second segment is unmapped", r, Errno::EFAULT)?;
    Ok(())
}

pub fn efault_readonly_mapping() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(2)?;
    mem.fill(3);
    mem.protect(0, 2, ProtFlags::PROT_READ)?;
    // SAFETY: our mapping; writes into it are what must be refused.
    let r = unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), 8192)],
            Protection::WRITE,
            RegionFlags::NONE,
        )
    };
    expect_errno("writable region over a PROT_READ mapping", r, Errno::EFAULT)?;
    // Read-only declaration of the same memory is fine.
    // SAFETY: as above.
    let c = unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), 8192)],
            Protection::READ,
            RegionFlags::NONE,
        )
    }
    .ctx("read-only region over a PROT_READ mapping")?;
    dev.destroy_region(c).ctx("DESTROY_REGION")
}

pub fn single_use() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let other = Device::open().ctx("open second fd")?;
    let mem = Mem::new(1)?;
    mem.fill(0x31);
    let base_regions = crate::stats::counter("regions").ok();
    let c = region(&dev, &mem, 100, Protection::READ, RegionFlags::SINGLE_USE)?;
    let mut buf = [0u8; 100];
    // A refused access does not consume it.
    expect_errno(
        "write to a read-only single-use region",
        other.write_from(c, 0, &buf, None),
        Errno::EACCES,
    )?;
    expect_success("first read", other.read_into(c, 10, &mut buf, Some(50)))?;
    ensure!(
        buf[..50] == [0x31; 50] && buf[50..] == [0; 50],
        "first read gave wrong data"
    );
    if let Some(base) = base_regions {
        crate::stats::wait_counter("regions", base)
            .map_err(|e| format!("consumed single-use region still counted: {e}"))?;
    }
    expect_errno(
        "second read",
        other.read_into(c, 0, &mut buf, None),
        Errno::EINVAL,
    )?;
    expect_errno("DESTROY after use", dev.destroy_region(c), Errno::EINVAL)?;

    // Through the RAII type: drop after consumption must be silent, and a
    // region-to-region copy consumes too.
    let data = vec![0x5bu8; 300];
    let r =
        knem::Region::new(&dev, [data.as_slice()], RegionFlags::SINGLE_USE).ctx("Region::new")?;
    ensure!(r.is_single_use(), "Region forgot SINGLE_USE");
    let dst_mem = Mem::new(1)?;
    let dst = region(&dev, &dst_mem, 4096, Protection::WRITE, RegionFlags::NONE)?;
    expect_success(
        "COPY from single-use",
        other.copy(r.cookie(), 0, dst, 0, None),
    )?;
    ensure!(
        dst_mem.snapshot()[..301] == [[0x5b; 300].as_slice(), &[0]].concat()[..],
        "COPY data"
    );
    expect_errno(
        "second COPY from single-use",
        other.copy(r.cookie(), 0, dst, 0, None),
        Errno::EINVAL,
    )?;
    drop(r);
    // Single-use as the destination.
    let w = region(&dev, &mem, 100, Protection::WRITE, RegionFlags::SINGLE_USE)?;
    expect_success(
        "write into single-use",
        other.write_from(w, 0, &[9; 4], None),
    )?;
    expect_errno(
        "second write into single-use",
        other.write_from(w, 0, &[9; 4], None),
        Errno::EINVAL,
    )?;
    ensure!(
        mem.snapshot()[..5] == [9, 9, 9, 9, 0x31],
        "write into single-use did not land"
    );
    dev.destroy_region(dst).ctx("DESTROY_REGION")
}

pub fn eperm_other_uid() -> TestResult {
    with_device_open_to_all(eperm_body)
}

fn eperm_body() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    mem.fill(0x66);
    let private = region(&dev, &mem, 100, Protection::READ_WRITE, RegionFlags::NONE)?;
    let private_wo = region(&dev, &mem, 100, Protection::WRITE, RegionFlags::NONE)?;
    let private_su = region(&dev, &mem, 100, Protection::READ, RegionFlags::SINGLE_USE)?;
    let shared = region(
        &dev,
        &mem,
        100,
        Protection::READ,
        RegionFlags::ANY_USER_ACCESS,
    )?;
    let mut peer = spawn_peer(move |chan| {
        become_nobody()?;
        let d = Device::open().ctx("open as nobody")?;
        let mut buf = [0u8; 10];
        expect_errno(
            "read another uid's region",
            d.read_into(private, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "write another uid's region",
            d.write_from(private, 0, &buf, None),
            Errno::EPERM,
        )?;
        // EPERM is decided before protection.
        expect_errno(
            "read another uid's write-only region",
            d.read_into(private_wo, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "read another uid's single-use region",
            d.read_into(private_su, 0, &mut buf, None),
            Errno::EPERM,
        )?;
        expect_errno(
            "DESTROY another uid's region",
            d.destroy_region(shared),
            Errno::EINVAL,
        )?;
        // ANY_USER_ACCESS lets us in, protection still applies.
        expect_success(
            "read an ANY_USER_ACCESS region",
            d.read_into(shared, 0, &mut buf, None),
        )?;
        ensure!(buf == [0x66; 10], "read as nobody gave {buf:?}");
        expect_errno(
            "write a read-only ANY_USER_ACCESS region",
            d.write_from(shared, 0, &buf, None),
            Errno::EACCES,
        )?;
        chan.send(1)
    })?;
    peer.recv()?;
    peer.finish()?;
    // The failed foreign attempt did not consume the single-use region.
    let mut buf = [0u8; 4];
    let st = dev
        .read_into(private_su, 0, &mut buf, None)
        .ctx("owner reads its single-use region")?;
    ensure!(
        st == Status::Success,
        "owner read of single-use region: {st}"
    );
    for c in [private, private_wo, shared] {
        dev.destroy_region(c).ctx("DESTROY_REGION")?;
    }
    Ok(())
}
