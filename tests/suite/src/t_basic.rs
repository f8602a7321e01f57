//! The device itself: GET_INFO, read-only opens, unknown commands, cookies.

use crate::ensure;
use crate::stats;
use crate::util::*;
use knem::abi::{self, cmd};
use knem::{Device, Errno, Iovec, Protection, RegionFlags};
use nix::sys::mman::{mmap, MapFlags, ProtFlags};
use std::collections::HashSet;
use std::io::Read;
use std::num::NonZeroUsize;

/// Feature bits this suite knows (ABI 0x0d plus no extension yet).
const KNOWN_FEATURES: u32 = abi::KNEM_FEATURE_DMA;
/// Every flag bit the ABI defines.
const KNOWN_FLAGS: u32 = abi::KNEM_FLAG_ANY_COPY_MASK | abi::KNEM_FLAG_ANY_CREATE_MASK;

pub fn get_info() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let info = dev.info_unchecked().ctx("GET_INFO")?;
    ensure!(info.abi == 0x0d, "abi is {:#x}, expected 0xd", info.abi);
    ensure!(
        info.features & !KNOWN_FEATURES == 0,
        "features {:#x} has unknown bits {:#x}",
        info.features,
        info.features & !KNOWN_FEATURES
    );
    ensure!(
        info.ignored_flags & !KNOWN_FLAGS == 0,
        "ignored_flags {:#x} has undefined bits",
        info.ignored_flags
    );
    ensure!(
        info.forced_flags & !KNOWN_FLAGS == 0,
        "forced_flags {:#x} has undefined bits",
        info.forced_flags
    );
    // Without an engine DMA must be listed as ignored, not refused.
    if !info.has_dma() {
        ensure!(
            info.ignored_flags & abi::KNEM_FLAG_DMA != 0,
            "no DMA feature but DMA not in ignored_flags {:#x}",
            info.ignored_flags
        );
    }
    dev.info().ctx("Device::info")?;
    // The driver fills the struct whatever was in it before.
    let mut garbage = abi::knem_cmd_info {
        abi: 0xdead_beef,
        features: 0xffff_ffff,
        ignored_flags: 0xffff_ffff,
        forced_flags: 0xffff_ffff,
    };
    // SAFETY: a knem_cmd_info for GET_INFO.
    unsafe {
        dev.raw_ioctl(
            cmd::GET_INFO,
            (&mut garbage as *mut abi::knem_cmd_info).cast(),
        )
    }
    .ctx("raw GET_INFO")?;
    ensure!(
        garbage.abi == info.abi
            && garbage.features == info.features
            && garbage.ignored_flags == info.ignored_flags
            && garbage.forced_flags == info.forced_flags,
        "GET_INFO over a pre-filled struct gave {garbage:?}, expected {info:?}"
    );
    Ok(())
}

pub fn sysfs_counters_present() -> TestResult {
    let missing: Vec<String> = abi::STATS
        .iter()
        .filter_map(|(n, _)| stats::counter(n).err())
        .collect();
    ensure!(missing.is_empty(), "{}", missing.join("; "));
    // An open context is counted, and uncounted at close.
    let before = stats::counter("contexts")?;
    let dev = Device::open().ctx("open")?;
    let during = stats::counter("contexts")?;
    drop(dev);
    let after = stats::counter("contexts")?;
    ensure!(
        during == before + 1 && after == before,
        "contexts: {before} before open, {during} while open, {after} after close"
    );
    Ok(())
}

pub fn rdonly_open_no_context() -> TestResult {
    let counted = stats::counters_available();
    let before = if counted {
        stats::counter("contexts")?
    } else {
        0
    };
    let ro = Device::open_readonly().ctx("open O_RDONLY")?;
    if counted {
        let during = stats::counter("contexts")?;
        ensure!(
            during == before,
            "O_RDONLY open created a context: {before} -> {during}"
        );
    }
    // SAFETY: GET_INFO's argument is 16 writable bytes.
    let mut info = abi::knem_cmd_info::default();
    let r = unsafe { ro.raw_ioctl(cmd::GET_INFO, (&mut info as *mut abi::knem_cmd_info).cast()) };
    expect_raw_errno("GET_INFO on O_RDONLY", r, Errno::EBADF)?;
    let byte = [1u8];
    // SAFETY: a one-byte read-only region over a live array.
    let r = unsafe {
        ro.create_region_raw(
            &[Iovec::from_slice(&byte)],
            Protection::READ,
            RegionFlags::NONE,
        )
    };
    expect_errno("CREATE_REGION on O_RDONLY", r, Errno::EBADF)?;
    // SAFETY: a fresh shared mapping of the device; unmapped if it succeeds.
    let m = unsafe {
        mmap(
            None,
            NonZeroUsize::new(4096).unwrap_or(NonZeroUsize::MIN),
            ProtFlags::PROT_READ,
            MapFlags::MAP_SHARED,
            &ro,
            0,
        )
    };
    match m {
        Err(Errno::EBADF) => {}
        Err(e) => return Err(format!("mmap on O_RDONLY: expected EBADF, got {e:?}")),
        Ok(p) => {
            // SAFETY: the mapping we just made.
            let _ = unsafe { nix::sys::mman::munmap(p, 4096) };
            return Err("mmap on O_RDONLY: expected EBADF, got a mapping".into());
        }
    }
    drop(ro);

    let mut text = String::new();
    std::fs::File::open(knem_path())
        .and_then(|mut f| f.read_to_string(&mut text))
        .ctx("reading the device")?;
    ensure!(!text.trim().is_empty(), "reading the device gave no text");
    ensure!(
        text.chars()
            .all(|c| c.is_ascii_graphic() || c.is_ascii_whitespace()),
        "device text is not plain ASCII: {:?}",
        &text[..text.len().min(200)]
    );
    ensure!(
        text.contains("regions"),
        "device text does not mention regions: {:?}",
        &text[..text.len().min(200)]
    );
    Ok(())
}

fn knem_path() -> &'static str {
    "/dev/knem"
}

pub fn unknown_command_enotty() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mut arg = [0u64; 8];
    let p = arg.as_mut_ptr().cast();
    let r = cmd::DIR_READ;
    let w = cmd::DIR_WRITE;
    let cases = [
        ("unused nr 0x3f", cmd::ioc(r, b'K', 0x3f, 8)),
        ("unused nr 0x12", cmd::ioc(w, b'K', 0x12, 16)),
        ("GET_INFO with size 8", cmd::ioc(w, b'K', 0x10, 8)),
        ("GET_INFO as _IOR", cmd::ioc(r, b'K', 0x10, 16)),
        (
            "CREATE_REGION with size 24",
            cmd::ioc(r | w, b'K', 0x21, 24),
        ),
        ("COPY as _IOWR", cmd::ioc(r | w, b'K', 0x32, 48)),
        ("magic 'k'", cmd::ioc(w, b'k', 0x10, 16)),
        ("TCGETS", 0x5401),
    ];
    for (what, c) in cases {
        // SAFETY: 64 writable bytes, more than any of these sizes.
        let res = unsafe { dev.raw_ioctl(c, p) };
        expect_raw_errno(what, res, Errno::ENOTTY)?;
    }
    Ok(())
}

pub fn cookie_nonzero_and_distinct() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    let mut seen = HashSet::new();
    for i in 0..64 {
        // SAFETY: 64 bytes of our mapping, read-only region.
        let c = unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(i * 64), 64)],
                Protection::READ,
                RegionFlags::NONE,
            )
        }
        .ctx("CREATE_REGION")?;
        ensure!(c.as_raw() != 0, "cookie 0 returned");
        ensure!(seen.insert(c), "cookie {c} returned twice");
        if i % 2 == 0 {
            dev.destroy_region(c).ctx("DESTROY_REGION")?;
        }
    }
    // Slots get reused; cookies of destroyed regions must not come back.
    for _ in 0..64 {
        // SAFETY: as above.
        let c = unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(0), 1)],
                Protection::READ,
                RegionFlags::NONE,
            )
        }
        .ctx("CREATE_REGION")?;
        ensure!(c.as_raw() != 0, "cookie 0 returned");
        ensure!(
            seen.insert(c),
            "cookie {c} of a destroyed region handed out again"
        );
        dev.destroy_region(c).ctx("DESTROY_REGION")?;
    }
    Ok(())
}
