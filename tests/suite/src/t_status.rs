//! The status array: synchronous requests never write it (MPICH relies on
//! it), and a fd has only one.

use crate::ensure;
use crate::util::*;
use knem::abi::{self, cmd};
use knem::{CopyFlags, CopyRequest, Device, InlineCopyRequest, Iovec, Protection, RegionFlags};

/// MPICH maps exactly this many slots, async or not.
const SLOTS: usize = 4096;

pub fn untouched_by_sync() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let other = Device::open().ctx("open second fd")?;
    let array = dev.map_status_array(SLOTS).ctx("mmap 4096 slots")?;
    let array2 = other
        .map_status_array(SLOTS)
        .ctx("mmap 4096 slots on the second fd")?;
    if let Some((i, v)) = array.first_non_pending().or(array2.first_non_pending()) {
        return Err(format!("fresh status array: slot {i} is {v}, expected 0"));
    }
    let mem = Mem::new(4)?;
    mem.fill(0x12);
    // SAFETY: our scratch mapping; only snapshotted.
    let src = unsafe {
        other.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), 8192)],
            Protection::READ_WRITE,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION")?;
    // SAFETY: as above.
    let dst = unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(8192), 8192)],
            Protection::READ_WRITE,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION")?;
    let local_mem = Mem::new(1)?;
    let local = [Iovec::from_raw(local_mem.addr(0), 3000)];
    // Slots in range, at the edge, past the end, and garbage: a synchronous
    // request ignores the index entirely.
    let indexes = [0u32, 1, 7, 100, 4095, 4096, 65535, 0x8000_0000, u32::MAX];
    let mut n = 0;
    for &idx in &indexes {
        for length in [None, Some(1000)] {
            for write in [false, true] {
                let req = InlineCopyRequest {
                    local: &local,
                    write,
                    cookie: src,
                    offset: 10,
                    length,
                    flags: CopyFlags::NONE,
                    async_status_index: idx,
                };
                // SAFETY: our scratch mapping.
                let r = unsafe { dev.inline_copy(&req) };
                expect_success(
                    &format!("inline copy (write={write}, length={length:?}, index {idx})"),
                    r,
                )?;
                n += 1;
            }
            // PINLOCAL is synchronous too.
            let req = InlineCopyRequest {
                local: &local,
                write: false,
                cookie: src,
                offset: 0,
                length,
                flags: CopyFlags::PIN_LOCAL,
                async_status_index: idx,
            };
            // SAFETY: as above.
            let r = unsafe { dev.inline_copy(&req) };
            expect_success(
                &format!("PINLOCAL inline read (length={length:?}, index {idx})"),
                r,
            )?;
            let r = dev.copy_with(&CopyRequest {
                src,
                src_offset: 5,
                dst,
                dst_offset: 7,
                length,
                flags: CopyFlags::NONE,
                async_status_index: idx,
            });
            expect_success(&format!("COPY (length={length:?}, index {idx})"), r)?;
            n += 2;
        }
        // Garbage in pad, as uninitialised C structs have.
        let mut a = abi::knem_cmd_inline_copy_bounded {
            local_iovec_array: local.as_ptr() as u64,
            local_iovec_nr: 1,
            write: 0,
            remote_cookie: src.as_raw(),
            remote_offset: 0,
            length: 10,
            flags: 0,
            current_status: 0xdead_beef,
            async_status_index: idx,
            pad: 0xdead_beef,
        };
        // SAFETY: the struct of the command; the local segment is ours.
        unsafe {
            dev.raw_ioctl(
                cmd::INLINE_COPY_BOUNDED,
                (&mut a as *mut abi::knem_cmd_inline_copy_bounded).cast(),
            )
        }
        .ctx("INLINE_COPY_BOUNDED with garbage pad")?;
        ensure!(
            a.current_status == abi::status::SUCCESS as u32,
            "INLINE_COPY_BOUNDED with garbage pad: current_status {}",
            a.current_status
        );
        let mut c = abi::knem_cmd_copy {
            src_cookie: src.as_raw(),
            src_offset: 0,
            dst_cookie: dst.as_raw(),
            dst_offset: 0,
            flags: 0,
            current_status: 0xdead_beef,
            async_status_index: idx,
            pad: 0xffff_ffff,
        };
        // SAFETY: the struct of the command, no pointers.
        unsafe { dev.raw_ioctl(cmd::COPY, (&mut c as *mut abi::knem_cmd_copy).cast()) }
            .ctx("COPY with garbage pad")?;
        ensure!(
            c.current_status == abi::status::SUCCESS as u32,
            "COPY with garbage pad: current_status {}",
            c.current_status
        );
        n += 2;
        for (name, arr) in [("first fd", &array), ("second fd", &array2)] {
            if let Some((i, v)) = arr.first_non_pending() {
                return Err(format!(
                    "after {n} synchronous requests (last index {idx}): {name} slot {i} is {v}, expected 0"
                ));
            }
        }
    }
    ensure!(array.len() == SLOTS, "array length");
    dev.destroy_region(dst).ctx("DESTROY_REGION")?;
    other.destroy_region(src).ctx("DESTROY_REGION")
}

pub fn second_mmap_fails() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let first = dev.map_status_array(SLOTS).ctx("first mmap")?;
    match dev.map_status_array(SLOTS) {
        Err(knem::Error::Mmap { .. }) => {}
        Err(e) => return Err(format!("second mmap: unexpected error {e}")),
        Ok(_) => return Err("second mmap of the status array succeeded".into()),
    }
    // Userspace may write its slots (clients reset them to PENDING).
    ensure!(
        first.reset(5) && first.get(5) == Some(knem::Status::Pending),
        "slot reset"
    );
    // Another fd has its own array.
    let other = Device::open().ctx("open second fd")?;
    let _second = other
        .map_status_array(1)
        .ctx("one-slot mmap on another fd")?;
    Ok(())
}

/// Whether this kernel's status arrays are charged to RLIMIT_MEMLOCK (and
/// shown in VmPin) because the memcg cannot take them: before 5.11, where
/// knem_compat.h's Kbuild probe finds the Kmemcg page type.
pub(crate) fn status_array_charges_memlock() -> TestResult<bool> {
    Ok(crate::t_offload::kernel_version()? < (5, 11))
}

/// Issue 33, M5: where the kernel cannot charge the status array to the
/// memory cgroup (5.10: its pages would carry the Kmemcg type, which
/// vm_insert_page() refuses), it is charged to the caller's
/// RLIMIT_MEMLOCK, as pinned pages are, so one user's arrays are bounded
/// in all and not per fd only; elsewhere the memcg takes it and memlock
/// does not.  As uid nobody under a 256 KiB limit: a 1 MiB array is
/// ENOMEM on 5.10 and maps elsewhere; 64 KiB arrays on five fds: four map
/// and the fifth is ENOMEM on 5.10 (all five elsewhere); closing one fd
/// gives its charge back, so a sixth maps.
pub fn status_array_charged_to_memlock_without_memcg() -> TestResult {
    const LIMIT_PAGES: u64 = 64;
    const SMALL: usize = 16 * PAGE;
    let charged = status_array_charges_memlock()?;
    let account = std::fs::read_to_string("/sys/module/knem/parameters/account_pinned")
        .ctx("account_pinned")?;
    ensure!(
        account.trim() == "Y",
        "account_pinned is {account:?}: the module must enforce RLIMIT_MEMLOCK"
    );
    with_device_open_to_all(|| {
        let peer = spawn_peer(move |_| {
            crate::t_harden::set_memlock(LIMIT_PAGES)?;
            become_nobody()?;
            let big = Device::open().ctx("open")?;
            let r = big.map_status_array(1 << 20);
            if charged {
                expect_errno(
                    "a 1 MiB status array under a 256 KiB RLIMIT_MEMLOCK on 5.10",
                    r,
                    knem::Errno::ENOMEM,
                )?;
            } else {
                r.ctx("a 1 MiB status array under a 256 KiB RLIMIT_MEMLOCK (memcg-charged)")?;
            }
            let mut fds = Vec::new();
            for i in 0..5 {
                let dev = Device::open().ctx("open")?;
                let r = dev.map_status_array(SMALL);
                if charged && i == 4 {
                    expect_errno(
                        "a fifth 64 KiB status array under a 256 KiB RLIMIT_MEMLOCK on 5.10",
                        r,
                        knem::Errno::ENOMEM,
                    )?;
                } else {
                    let a = r.ctx(&format!("64 KiB status array {} of 5", i + 1))?;
                    fds.push((dev, a));
                }
            }
            // The array goes with its fd and its mapping.
            drop(fds.remove(0));
            let dev = Device::open().ctx("open")?;
            let a = dev
                .map_status_array(SMALL)
                .ctx("a 64 KiB status array after closing one of the others")?;
            drop((a, dev, fds));
            Ok(())
        })?;
        peer.finish()
    })
}
