//! Issue 3: sharing rules under concurrency and across users, with the
//! asynchronous paths: a single-use region goes to exactly one of many
//! racing processes, refused attempts do not consume it, and another uid
//! needs ANY_USER_ACCESS (EPERM otherwise), for async requests too.

use crate::ensure;
use crate::util::*;
use knem::{Cookie, CopyFlags, Device, Errno, Iovec, Protection, RegionFlags, Status};

const SEED: u8 = 0x27;
const LEN: usize = 3 * PAGE + 123;
const MEMCPY: CopyFlags = CopyFlags::MEMCPY_THREAD;

/// One racer: a sync read (even ids) or a MEMCPYTHREAD async read (odd
/// ids) of the whole region once told to go; reports the outcome, having
/// verified the data if it won.
fn racer(id: usize, cookie: Cookie, chan: &mut Chan) -> TestResult {
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(4).ctx("mmap")?;
    let local = Mem::new(4)?;
    chan.send(0)?; // ready
    chan.recv()?; // go
    let iov = [Iovec::from_raw(local.addr(0), LEN as u64)];
    let r = if id % 2 == 0 {
        // SAFETY: our scratch mapping, only read back below.
        unsafe { dev.read_into_async(cookie, 0, &iov, None, 0, CopyFlags::NONE) }
    } else {
        // SAFETY: as above.
        unsafe { dev.read_into_async(cookie, 0, &iov, None, 2, MEMCPY) }
    };
    let r = match r {
        Ok(Status::Pending) => Ok(wait_slot(&array, 2, &format!("racer {id}"))?),
        other => other,
    };
    if let Ok(Status::Success) = r {
        check_bytes(&format!("racer {id} data"), &local.read(0, LEN), |i| {
            pat(SEED, i as u64)
        })?;
    }
    chan.send(encode_outcome(&r))
}

/// 8 processes race for one single-use region, half with synchronous and
/// half with asynchronous reads, twice: exactly one gets the data, the
/// others EINVAL.  Then the failed-check-does-not-consume rule on the async
/// path: an EACCES attempt and an EINVAL (bad slot) attempt leave the
/// region usable, the proper read consumes it.
pub fn single_use_race_8_processes() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let mem = Mem::new(4)?;
    mem.write(
        0,
        &(0..LEN as u64).map(|i| pat(SEED, i)).collect::<Vec<_>>(),
    );
    for round in 0..2 {
        let cookie = region_at(
            &owner,
            &mem,
            0,
            LEN,
            Protection::READ,
            RegionFlags::SINGLE_USE,
        )?;
        let mut peers = Vec::new();
        for id in 0..8 {
            peers.push(spawn_peer(move |chan| racer(id, cookie, chan))?);
        }
        for p in &mut peers {
            ensure!(p.recv()? == 0, "racer protocol");
        }
        for p in &mut peers {
            p.send(1)?;
        }
        let mut outcomes = Vec::new();
        for p in &mut peers {
            outcomes.push(decode_outcome(p.recv()?));
        }
        for p in peers {
            p.finish()?;
        }
        let winners = outcomes
            .iter()
            .filter(|o| **o == Ok(Status::Success))
            .count();
        let losers = outcomes
            .iter()
            .filter(|o| **o == Err(format!("{:?}", Errno::EINVAL)))
            .count();
        ensure!(
            winners == 1 && losers == 7,
            "round {round}: outcomes {outcomes:?}, expected one SUCCESS and seven EINVAL"
        );
        expect_errno(
            "DESTROY of the consumed region",
            owner.destroy_region(cookie),
            Errno::EINVAL,
        )?;
    }

    // Refused attempts do not consume it, on the async path either.
    let cookie = region_at(
        &owner,
        &mem,
        0,
        LEN,
        Protection::READ,
        RegionFlags::SINGLE_USE,
    )?;
    let dev = Device::open().ctx("open")?;
    // Exactly one page: the driver's array length is the mapping's.
    let array = dev.map_status_array(PAGE).ctx("mmap")?;
    let local = Mem::new(4)?;
    let iov = [Iovec::from_raw(local.addr(0), LEN as u64)];
    // SAFETY (all): our scratch mapping; writes only read it.
    expect_errno(
        "async write to a read-only single-use region",
        unsafe { dev.write_from_async(cookie, 0, &iov, None, 1, MEMCPY) },
        Errno::EACCES,
    )?;
    expect_errno(
        "async read of a single-use region with index 4096 of 4096",
        unsafe { dev.read_into_async(cookie, 0, &iov, None, PAGE as u32, MEMCPY) },
        Errno::EINVAL,
    )?;
    expect_errno(
        "NOTIFY_FD without a thread flag on a single-use region",
        unsafe { dev.read_into_async(cookie, 0, &iov, None, 1, CopyFlags::NOTIFY_FD) },
        Errno::EINVAL,
    )?;
    expect_pending("async read of the single-use region", unsafe {
        dev.read_into_async(cookie, 0, &iov, None, 1, MEMCPY)
    })?;
    wait_slot_success(&array, 1, "async read of the single-use region")?;
    check_bytes("single-use async read", &local.read(0, LEN), |i| {
        pat(SEED, i as u64)
    })?;
    expect_errno(
        "second async read of the single-use region",
        unsafe { dev.read_into_async(cookie, 0, &iov, None, 2, MEMCPY) },
        Errno::EINVAL,
    )?;
    expect_errno(
        "DESTROY of the consumed region",
        owner.destroy_region(cookie),
        Errno::EINVAL,
    )
}

/// A process of another uid: EPERM on every kind of request (sync, async
/// inline, async COPY, ASYNCDMACOMPLETE, NOTIFY_FD) without
/// ANY_USER_ACCESS; with it, async reads and writes work and notify, and
/// protection still applies.
pub fn any_user_access_other_uid() -> TestResult {
    with_device_open_to_all(other_uid_body)
}

fn other_uid_body() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(4)?;
    mem.write(0, &(0..8192u64).map(|i| pat(SEED, i)).collect::<Vec<_>>());
    let rw = Protection::READ_WRITE;
    let private = region_at(&dev, &mem, 0, 4096, rw, RegionFlags::NONE)?;
    let shared_ro = region_at(
        &dev,
        &mem,
        0,
        4096,
        Protection::READ,
        RegionFlags::ANY_USER_ACCESS,
    )?;
    let shared_rw = region_at(&dev, &mem, 8192, 8192, rw, RegionFlags::ANY_USER_ACCESS)?;
    let private_su = region_at(
        &dev,
        &mem,
        0,
        100,
        Protection::READ,
        RegionFlags::SINGLE_USE,
    )?;
    let mut peer = spawn_peer(move |chan| {
        become_nobody()?;
        alarm(60); // the notification read below blocks
        let d = Device::open().ctx("open as nobody")?;
        let array = d.map_status_array(16).ctx("mmap as nobody")?;
        let local = Mem::new(2)?;
        local.fill(0xee);
        let own = region_at(&d, &local, PAGE, PAGE, rw, RegionFlags::NONE)?;
        let iov = [Iovec::from_raw(local.addr(0), 4096)];
        let notify = MEMCPY | CopyFlags::NOTIFY_FD;
        for (name, flags) in [
            ("sync", CopyFlags::NONE),
            ("MEMCPYTHREAD", MEMCPY),
            ("DMATHREAD", CopyFlags::DMA_THREAD),
            ("ASYNCDMACOMPLETE", CopyFlags::ASYNC_DMA_COMPLETE),
            ("MEMCPYTHREAD|NOTIFY_FD", notify),
        ] {
            for c in [private, private_su] {
                // SAFETY (both): our scratch mapping.
                expect_errno(
                    &format!("{name} read of another uid's region"),
                    unsafe { d.read_into_async(c, 0, &iov, None, 0, flags) },
                    Errno::EPERM,
                )?;
            }
            expect_errno(
                &format!("{name} write of another uid's region"),
                unsafe { d.write_from_async(private, 0, &iov, None, 0, flags) },
                Errno::EPERM,
            )?;
            expect_errno(
                &format!("{name} COPY from another uid's region"),
                d.copy_async(private, 0, own, 0, None, 0, flags),
                Errno::EPERM,
            )?;
        }
        ensure!(
            array.first_non_pending().is_none(),
            "refused requests wrote the status array"
        );
        ensure!(
            local.snapshot().iter().all(|&b| b == 0xee),
            "refused requests wrote local memory"
        );
        // With ANY_USER_ACCESS: async read, async write, notify.
        expect_pending("MEMCPYTHREAD read of an ANY_USER_ACCESS region", unsafe {
            d.read_into_async(shared_ro, 10, &iov, Some(1000), 3, notify)
        })?;
        let mut n = [0u32; 1];
        let k = d
            .read_notifications(&mut n)
            .ctx("read notifications as nobody")?;
        ensure!(
            k == 1 && n[0] == 3,
            "notifications as nobody: {:?}",
            &n[..k]
        );
        ensure!(
            array.get_acquire(3) == Some(Status::Success),
            "slot 3 after notification"
        );
        check_bytes("read as nobody", &local.read(0, 1000), |i| {
            pat(SEED, 10 + i as u64)
        })?;
        let data: Vec<u8> = (0..500).map(|i| (i % 7) as u8 + 1).collect();
        // SAFETY: the driver only reads `data`, alive until the slot is done.
        expect_pending("MEMCPYTHREAD write of an ANY_USER_ACCESS region", unsafe {
            d.write_from_async(
                shared_rw,
                4000,
                &[Iovec::from_slice(&data)],
                None,
                4,
                MEMCPY,
            )
        })?;
        wait_slot_success(&array, 4, "write as nobody")?;
        expect_pending(
            "COPY from an ANY_USER_ACCESS region",
            d.copy_async(shared_ro, 0, own, 0, Some(64), 5, MEMCPY),
        )?;
        wait_slot_success(&array, 5, "COPY as nobody")?;
        check_bytes("COPY as nobody", &local.read(PAGE, 64), |i| {
            pat(SEED, i as u64)
        })?;
        // Protection still applies.
        expect_errno(
            "async write of a read-only ANY_USER_ACCESS region",
            unsafe { d.write_from_async(shared_ro, 0, &iov, None, 6, MEMCPY) },
            Errno::EACCES,
        )?;
        chan.send(1)
    })?;
    ensure!(peer.recv()? == 1, "peer protocol");
    peer.finish()?;
    check_bytes(
        "region written by nobody",
        &mem.read(8192 + 4000, 500),
        |i| (i % 7) as u8 + 1,
    )?;
    // The foreign attempts did not consume the single-use region.
    let mut buf = [0u8; 100];
    expect_success(
        "owner reads its single-use region",
        dev.read_into(private_su, 0, &mut buf, None),
    )?;
    for c in [private, shared_ro, shared_rw] {
        dev.destroy_region(c).ctx("DESTROY_REGION")?;
    }
    Ok(())
}
