//! Inline copies between two processes, verified byte for byte.

use crate::ensure;
use crate::util::*;
use knem::{CopyFlags, Device, InlineCopyRequest, Iovec, Protection, RegionFlags, Status};

/// Seed of the region owner's pattern.
const SEED_REGION: u8 = 0x3c;
/// Seed of the copier's local pattern.
const SEED_LOCAL: u8 = 0xa7;
/// Filler of memory that must not be written.
const SENTINEL: u8 = 0xee;

/// Region offsets: page and segment boundaries of [`REGION3`] (segments end
/// at 5003, 9102 and 18102), the end, and far past it.
fn offsets() -> Vec<u64> {
    let t = REGION3.total();
    vec![
        0,
        1,
        12,
        4095,
        4096,
        4097,
        5002,
        5003,
        5004,
        9101,
        9102,
        9103,
        12345,
        t - 4097,
        t - 1,
        t,
        t + 1,
        t + 100_000,
        u64::MAX,
    ]
}

/// Lengths for the bounded commands; `None` is the unbounded command.
fn lengths() -> Vec<Option<u64>> {
    let mut v = vec![None];
    v.extend(
        [
            0,
            1,
            2,
            4095,
            4096,
            4097,
            5003,
            9999,
            18102,
            30000,
            u64::MAX,
        ]
        .into_iter()
        .map(Some),
    );
    v
}

/// One inline copy of the matrix.
#[derive(Clone, Copy, Debug)]
struct Case {
    local: Layout,
    offset: u64,
    length: Option<u64>,
}

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for local in [LOCAL2_BIG, LOCAL2_SMALL] {
        for &offset in &offsets() {
            for length in lengths() {
                v.push(Case {
                    local,
                    offset,
                    length,
                });
            }
        }
    }
    v
}

fn describe(c: &Case) -> String {
    format!(
        "{} at offset {} into {}-byte local, length {}",
        if c.length.is_some() {
            "INLINE_COPY_BOUNDED"
        } else {
            "INLINE_COPY"
        },
        c.offset,
        c.local.total(),
        c.length.map_or("-".to_string(), |l| l.to_string())
    )
}

/// A peer declares a 3-segment region with a pattern; we read it at every
/// offset and length of the matrix, with both commands, into 2 segments.
pub fn read_two_processes() -> TestResult {
    let mut peer = spawn_peer(|chan| {
        let dev = Device::open().ctx("peer open")?;
        let mem = Mem::new(REGION3.pages)?;
        mem.fill(0x11);
        REGION3.fill_with(&mem, |i| pat(SEED_REGION, i));
        let before = mem.snapshot();
        // SAFETY: our mapping outlives the region; others only read it.
        let cookie = unsafe {
            dev.create_region_raw(&REGION3.iovecs(&mem), Protection::READ, RegionFlags::NONE)
        }
        .ctx("CREATE_REGION")?;
        chan.send(cookie.as_raw())?;
        chan.recv()?;
        ensure!(
            mem.snapshot() == before,
            "reads modified the region's memory"
        );
        dev.destroy_region(cookie).ctx("DESTROY_REGION")
    })?;
    let cookie = knem::Cookie::from_raw(peer.recv()?);
    let dev = Device::open().ctx("open")?;
    let total = REGION3.total();
    for c in cases() {
        let mem = Mem::new(c.local.pages)?;
        mem.fill(SENTINEL);
        let local = c.local.iovecs(&mem);
        let req = InlineCopyRequest {
            local: &local,
            write: false,
            cookie,
            offset: c.offset,
            length: c.length,
            flags: CopyFlags::NONE,
            async_status_index: 0,
        };
        // SAFETY: the local segments are in our own scratch mapping.
        let r = unsafe { dev.inline_copy(&req) };
        expect_success(&describe(&c), r)?;
        let n = expected_len(total, c.offset, c.local.total(), c.length);
        c.local
            .verify(
                &mem.snapshot(),
                |_| SENTINEL,
                0,
                n,
                |k| pat(SEED_REGION, c.offset + k),
            )
            .map_err(|e| format!("{}: expected {n} bytes: {e}", describe(&c)))?;
    }
    // The convenience API too: a plain slice.
    let mut buf = vec![0u8; 100];
    expect_success("read_into", dev.read_into(cookie, 5000, &mut buf, None))?;
    let want: Vec<u8> = (0..100).map(|k| pat(SEED_REGION, 5000 + k)).collect();
    ensure!(buf == want, "read_into at 5000: wrong data");
    peer.send(0)?;
    peer.finish()
}

/// We declare a writable 3-segment region; the peer writes into it from
/// its 2 segments at every case of the matrix; we check our own memory.
pub fn write_two_processes() -> TestResult {
    let all = cases();
    let n_cases = all.len();
    let mut peer = spawn_peer(move |chan| {
        let dev = Device::open().ctx("peer open")?;
        let cookie = knem::Cookie::from_raw(chan.recv()?);
        let big = Mem::new(LOCAL2_BIG.pages)?;
        let small = Mem::new(LOCAL2_SMALL.pages)?;
        for (layout, mem) in [(LOCAL2_BIG, &big), (LOCAL2_SMALL, &small)] {
            mem.fill(0x22);
            layout.fill_with(mem, |i| pat(SEED_LOCAL, i));
        }
        loop {
            let k = chan.recv()?;
            if k as usize >= n_cases {
                return Ok(());
            }
            let c = all[k as usize];
            let mem = if c.local.total() == LOCAL2_BIG.total() {
                &big
            } else {
                &small
            };
            let local = c.local.iovecs(mem);
            let req = InlineCopyRequest {
                local: &local,
                write: true,
                cookie,
                offset: c.offset,
                length: c.length,
                flags: CopyFlags::NONE,
                async_status_index: 0,
            };
            // SAFETY: a write only reads our local segments.
            let r = unsafe { dev.inline_copy(&req) };
            chan.send(encode_outcome(&r))?;
        }
    })?;
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(REGION3.pages)?;
    // SAFETY: our mapping outlives the region and is only accessed through
    // volatile snapshots while others write it.
    let cookie = unsafe {
        dev.create_region_raw(&REGION3.iovecs(&mem), Protection::WRITE, RegionFlags::NONE)
    }
    .ctx("CREATE_REGION")?;
    peer.send(cookie.as_raw())?;
    let total = REGION3.total();
    for (k, c) in cases().into_iter().enumerate() {
        mem.fill(SENTINEL);
        peer.send(k as u64)?;
        let outcome = decode_outcome(peer.recv()?);
        let what = describe(&c).replace("COPY", "COPY write");
        ensure!(
            outcome == Ok(Status::Success),
            "{what}: expected SUCCESS, got {outcome:?}"
        );
        let n = expected_len(total, c.offset, c.local.total(), c.length);
        let start = c.offset.min(total);
        REGION3
            .verify(
                &mem.snapshot(),
                |_| SENTINEL,
                start,
                n,
                |k| pat(SEED_LOCAL, k),
            )
            .map_err(|e| format!("{what}: expected {n} bytes: {e}"))?;
    }
    peer.send(u64::MAX)?;
    peer.finish()?;
    dev.destroy_region(cookie).ctx("DESTROY_REGION")
}

/// UCX probes the driver by declaring a 1-byte buffer on its stack.
pub fn ucx_probe_one_byte_stack() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let other = Device::open().ctx("open second fd")?;
    let mut byte = [0x42u8; 1];
    let iov = [Iovec::from_raw(byte.as_mut_ptr() as u64, 1)];
    // SAFETY: the byte outlives the region (destroyed below) and is read
    // back with a volatile load only.
    let cookie =
        unsafe { owner.create_region_raw(&iov, Protection::READ_WRITE, RegionFlags::NONE) }
            .ctx("CREATE_REGION over 1 stack byte")?;
    let mut out = [0u8; 4];
    expect_success("read", other.read_into(cookie, 0, &mut out, None))?;
    ensure!(
        out == [0x42, 0, 0, 0],
        "read gave {out:?}, expected [0x42, 0, 0, 0]"
    );
    expect_success("write", other.write_from(cookie, 0, &[0x99, 0x98], None))?;
    // SAFETY: a live stack byte; volatile because the driver wrote it.
    let now = unsafe { std::ptr::read_volatile(byte.as_ptr()) };
    ensure!(
        now == 0x99,
        "stack byte is {now:#x} after write, expected 0x99"
    );
    let mut out = [7u8; 1];
    expect_success(
        "read at offset 1",
        other.read_into(cookie, 1, &mut out, None),
    )?;
    ensure!(out == [7], "read at offset 1 (past the end) wrote {out:?}");
    owner.destroy_region(cookie).ctx("DESTROY_REGION")
}

/// A fault on the caller's own memory while moving data is status FAILED,
/// not an errno.
pub fn local_fault_is_failed() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let src = Mem::new(2)?;
    src.fill(0x5a);
    // SAFETY: a region over our mapping, which we only snapshot.
    let cookie = unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(src.addr(0), 8192)],
            Protection::READ_WRITE,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION")?;
    let hole = unmapped_addr(2)?;
    let local = [Iovec::from_raw(hole, 8192)];
    for (write, length) in [(false, None), (false, Some(100)), (true, None)] {
        let req = InlineCopyRequest {
            local: &local,
            write,
            cookie,
            offset: 0,
            length,
            flags: CopyFlags::NONE,
            async_status_index: 0,
        };
        // SAFETY: the local segment is unmapped; nothing of ours is touched.
        let r = unsafe { dev.inline_copy(&req) };
        let what =
            format!("inline copy (write={write}, length={length:?}) to unmapped local memory");
        match r {
            Ok(Status::Failed) => {}
            other => return Err(format!("{what}: expected status FAILED, got {other:?}")),
        }
    }
    dev.destroy_region(cookie).ctx("DESTROY_REGION")
}

/// A read-only region must keep showing the owner's memory as the owner
/// writes it: over pages never touched, over pages only read so far (the
/// shared zero page backs both), and across a fork of the owner.  Clients
/// with registration caches (Open MPI smsc, UCX rcache) keep regions
/// across messages and refill the buffer in between.
pub fn region_tracks_owner_writes() -> TestResult {
    let owner = Device::open().ctx("open")?;
    let reader = Device::open().ctx("open second fd")?;
    let untouched = Mem::new(3)?;
    let read_only_so_far = Mem::new(3)?;
    let _ = read_only_so_far.snapshot();
    let written = Mem::new(3)?;
    written.fill(1);
    let mut failures = Vec::new();
    for (what, mem) in [
        ("never-touched memory", &untouched),
        ("memory only read so far", &read_only_so_far),
        ("written memory", &written),
    ] {
        if let Err(e) = tracks_owner_writes(&owner, &reader, what, mem) {
            failures.push(e);
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("; "));
    Ok(())
}

fn tracks_owner_writes(owner: &Device, reader: &Device, what: &str, mem: &Mem) -> TestResult {
    let len = 3 * PAGE - 100;
    // SAFETY: our mapping outlives the region; others only read it.
    let c = unsafe {
        owner.create_region_raw(
            &[Iovec::from_raw(mem.addr(50), len as u64)],
            Protection::READ,
            RegionFlags::NONE,
        )
    }
    .ctx("CREATE_REGION")?;
    let r = tracks_owner_writes_rounds(reader, c, what, mem, len);
    owner.destroy_region(c).ctx("DESTROY_REGION")?;
    r
}

fn tracks_owner_writes_rounds(
    reader: &Device,
    c: knem::Cookie,
    what: &str,
    mem: &Mem,
    len: usize,
) -> TestResult {
    let check = |when: &str, data: &[u8]| -> TestResult {
        let mut buf = vec![0u8; len];
        expect_success(
            &format!("read of {what} {when}"),
            reader.read_into(c, 0, &mut buf, None),
        )?;
        match (0..len).find(|&i| buf[i] != data[i]) {
            None => Ok(()),
            Some(at) => Err(format!(
                "region over {what}, {when}: byte {at} reads {:#04x}, the owner wrote {:#04x}",
                buf[at], data[at]
            )),
        }
    };
    for round in 0..2u8 {
        let data: Vec<u8> = (0..len as u64)
            .map(|i| pat(round.wrapping_mul(77) ^ 0x15, i))
            .collect();
        mem.write(50, &data);
        check(
            &format!("written after CREATE_REGION (round {round})"),
            &data,
        )?;
    }
    // Fork the owner (the child only waits), then write: the pinned pages
    // must stay the parent's.
    let mut peer = spawn_peer(|chan| chan.recv().map(drop))?;
    let data: Vec<u8> = (0..len as u64).map(|i| pat(0x99, i)).collect();
    mem.write(50, &data);
    let r = check("written after a fork", &data);
    peer.send(0)?;
    peer.finish()?;
    r
}
