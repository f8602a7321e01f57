//! Issue 21 (security III): bounds that one account cannot escape through
//! its user namespace or by exec/fork, and kernel memory the module keeps
//! for a user, charged to that user's memory cgroup.

use crate::ensure;
use crate::stats::counter;
use crate::t_bounds::with_param;
use crate::t_harden::set_memlock;
use crate::t_offload::{Copier, TestCgroup};
use crate::util::*;
use knem::{Device, Errno, Iovec, Protection, RegionFlags};
use nix::unistd::{setresgid, setresuid, Gid, Uid};
use std::os::fd::{AsRawFd, FromRawFd};

/// The account (uid in the initial namespace) the namespace tests run as.
const ACCOUNT: u32 = 1000;
/// First uid of its subordinate range, as newuidmap would map it.
const SUBUID_BASE: u32 = 200_000;
/// Uids of that range the tests switch among.
const SUBUIDS: u32 = 16;

/// Runs `f` in a forked process that is `ACCOUNT` in the initial user
/// namespace and root of a user namespace of its own, whose uids and gids
/// 0..SUBUIDS map to `SUBUID_BASE`.. (the map written from here, as root,
/// the way newuidmap writes an account's subordinate range).
fn in_account_namespace(f: impl FnOnce() -> TestResult) -> TestResult {
    let mut peer = spawn_peer(|chan| {
        setresgid(
            Gid::from_raw(ACCOUNT),
            Gid::from_raw(ACCOUNT),
            Gid::from_raw(ACCOUNT),
        )
        .ctx("setresgid")?;
        setresuid(
            Uid::from_raw(ACCOUNT),
            Uid::from_raw(ACCOUNT),
            Uid::from_raw(ACCOUNT),
        )
        .ctx("setresuid")?;
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
            .ctx("unshare(CLONE_NEWUSER) as an unprivileged user")?;
        chan.send(1)?;
        chan.recv()?;
        setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
            .ctx("setresgid(0) in the namespace")?;
        setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
            .ctx("setresuid(0) in the namespace")?;
        f()
    })?;
    peer.recv()?;
    let pid = peer.pid();
    let map = format!("0 {SUBUID_BASE} {SUBUIDS}");
    std::fs::write(format!("/proc/{pid}/uid_map"), &map).ctx("write uid_map")?;
    std::fs::write(format!("/proc/{pid}/gid_map"), &map).ctx("write gid_map")?;
    peer.send(1)?;
    peer.finish()
}

/// What a process of [`as_each_uid`] keeps until every one has reported.
type Held = Box<dyn std::any::Any>;

/// Runs `f` as uid and gid `id` of the current user namespace in one
/// forked process per id, all at once: each sends what `f` returns, then
/// holds on to what it made until every one has reported.  Returns the
/// values in the order of `ids`.
fn as_each_uid(
    ids: std::ops::Range<u32>,
    f: fn(u32) -> TestResult<(u64, Held)>,
) -> TestResult<Vec<u64>> {
    let mut peers = Vec::new();
    for id in ids {
        peers.push(spawn_peer(move |chan| {
            setresgid(Gid::from_raw(id), Gid::from_raw(id), Gid::from_raw(id)).ctx("setresgid")?;
            setresuid(Uid::from_raw(id), Uid::from_raw(id), Uid::from_raw(id)).ctx("setresuid")?;
            let (v, held) = f(id)?;
            chan.send(v)?;
            chan.recv()?;
            drop(held);
            Ok(())
        })?);
    }
    let mut out = Vec::new();
    for p in peers.iter_mut() {
        out.push(p.recv()?);
    }
    for p in peers.iter_mut() {
        p.send(0)?;
    }
    for p in peers {
        p.finish()?;
    }
    Ok(out)
}

/// The offload threads and regions of one account, wherever its uids go.
/// With max_offload_threads_per_user=4, 16 uids of the account's user
/// namespace each submit a copy on 2 fds: the account gets 4 threads in
/// all (not 4 per uid), the 28 other copies run in their callers, and
/// every copy ends SUCCESS with its bytes.  With max_regions_per_user=6,
/// the same 16 uids declare regions until refused, all held at once: 6 in
/// all.  Everything is given back at the end.
pub fn account_bounds_across_userns_uids() -> TestResult {
    const THREADS: u64 = 4;
    const FDS: u64 = 2;
    const REGIONS: u64 = 6;
    // The account's 16 uids share one memlock budget at its level, and on
    // 5.10 their 32 status arrays are charged to it too: the default 64
    // KiB of 5.10 cannot hold them.  This test is about the region and
    // thread bounds, so the uids (which inherit it) get room.
    set_memlock(1 << 18)?;
    with_device_open_to_all(|| {
        let (threads, regions) = (counter("offload_threads")?, counter("regions")?);
        with_param("max_offload_threads_per_user", &THREADS.to_string(), || {
            let fallbacks = counter("offload_fallbacks")?;
            in_account_namespace(|| {
                as_each_uid(0..SUBUIDS, |id| {
                    let seed = |i: u64| (0x40 + id as u64 * FDS + i) as u8;
                    let fds = (0..FDS)
                        .map(|i| Copier::new(seed(i)))
                        .collect::<TestResult<Vec<_>>>()
                        .map_err(|e| format!("uid {id}: {e}"))?;
                    for (i, c) in fds.iter().enumerate() {
                        c.submit(&format!("uid {id} fd {i}"))?;
                    }
                    for (i, c) in fds.iter().enumerate() {
                        c.check(seed(i as u64), &format!("uid {id} fd {i}"))?;
                    }
                    Ok((0, Box::new(fds)))
                })?;
                Ok(())
            })?;
            // Read after the copies were checked, while no fd is closed yet
            // would be racy across processes: the fallback counter only grows.
            let ran_here = counter("offload_fallbacks")? - fallbacks;
            let want = SUBUIDS as u64 * FDS - THREADS;
            ensure!(
                ran_here == want,
                "{} copies of one account's {SUBUIDS} namespace uids ran in their callers, expected {want} (a bound of {THREADS} threads for the account)",
                ran_here
            );
            crate::stats::wait_counter("offload_threads", threads)
        })?;
        with_param("max_regions_per_user", &REGIONS.to_string(), || {
            in_account_namespace(|| {
                let per_uid = as_each_uid(0..SUBUIDS, |id| {
                    let dev = Device::open().ctx(&format!("open as uid {id}"))?;
                    let mem = Mem::new(1)?;
                    let held = regions_until_refused(&dev, &mem, 8)
                        .map_err(|e| format!("uid {id}: {e}"))?;
                    Ok((held.len() as u64, Box::new((dev, mem, held))))
                })?;
                let total: u64 = per_uid.iter().sum();
                ensure!(
                    total == REGIONS,
                    "one account's {SUBUIDS} namespace uids held {total} regions at once ({per_uid:?}), bound {REGIONS}"
                );
                Ok(())
            })
        })?;
        crate::stats::wait_counter("regions", regions)
    })
}

/// CAP_IPC_LOCK, bit 14 of the capability sets.
const CAP_IPC_LOCK: u32 = 14;
/// The memlock limit of [`memlock_cap_ipc_lock_only_in_initial_userns`].
const NS_MEMLOCK_PAGES: usize = 4;

/// Whether this process's effective capabilities hold CAP_IPC_LOCK (in
/// its own user namespace, which is what /proc/self/status shows).
fn has_cap_ipc_lock() -> TestResult<bool> {
    let s = std::fs::read_to_string("/proc/self/status").ctx("/proc/self/status")?;
    let eff = s
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or("no CapEff in /proc/self/status")?;
    Ok(eff & (1 << CAP_IPC_LOCK) != 0)
}

/// The user namespace this process is in, as its /proc link names it.
fn user_ns() -> TestResult<String> {
    std::fs::read_link("/proc/self/ns/user")
        .map(|p| p.to_string_lossy().into_owned())
        .ctx("readlink /proc/self/ns/user")
}

/// Keeps only CAP_IPC_LOCK (permitted and effective) across the switch of
/// every uid and gid to `id`, in the initial user namespace.
fn become_with_cap_ipc_lock(id: u32) -> TestResult {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: plain prctl with integer arguments.
    if unsafe { nix::libc::prctl(nix::libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) } != 0 {
        return Err(format!("prctl(PR_SET_KEEPCAPS): {}", Errno::last()));
    }
    setresgid(Gid::from_raw(id), Gid::from_raw(id), Gid::from_raw(id)).ctx("setresgid")?;
    setresuid(Uid::from_raw(id), Uid::from_raw(id), Uid::from_raw(id)).ctx("setresuid")?;
    let mut hdr = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let lock = Data {
        effective: 1 << CAP_IPC_LOCK,
        permitted: 1 << CAP_IPC_LOCK,
        inheritable: 0,
    };
    let none = Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let data = [lock, none];
    // SAFETY: capset(2) reads a version 3 header and two data structs,
    // both ours and alive for the call.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capset,
            &mut hdr as *mut Header,
            data.as_ptr(),
        )
    };
    ensure!(r == 0, "capset(CAP_IPC_LOCK only): {}", Errno::last());
    Ok(())
}

/// Pins `pages` pages of `mem` in one region.
fn try_pin_pages(dev: &Device, mem: &Mem, pages: usize) -> knem::Result<knem::Cookie> {
    // SAFETY: our own scratch mapping, only read.
    unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), (pages * PAGE) as u64)],
            Protection::READ,
            RegionFlags::NONE,
        )
    }
}

/// The memlock exemption is CAP_IPC_LOCK in the initial user namespace
/// (`capable()`), not in the caller's own.  Under a 4-page RLIMIT_MEMLOCK
/// with account_pinned=1, a process that is root of a user namespace of
/// its own (every capability there, CAP_IPC_LOCK included, checked in
/// CapEff; account 1000 outside, which has none) pins 4 pages, then one
/// page more and 16 pages are ENOMEM, each counted in
/// pins_refused_memlock.  The same account holding CAP_IPC_LOCK in the
/// initial namespace, under the same limit, pins 16 pages, and nothing is
/// counted.  A module that exempted by `ns_capable(current_user_ns(), ..)`
/// (any namespace) would let the first process through.
pub fn memlock_cap_ipc_lock_only_in_initial_userns() -> TestResult {
    const COUNTER: &str = "pins_refused_memlock";
    const OVER: usize = 16;
    with_param("account_pinned", "1", || {
        with_device_open_to_all(|| {
            let initial = user_ns()?;
            let before = counter(COUNTER)?;
            in_account_namespace(|| {
                ensure!(
                    user_ns()? != initial,
                    "still in the initial user namespace ({initial})"
                );
                ensure!(
                    has_cap_ipc_lock()?,
                    "root of its own user namespace without CAP_IPC_LOCK there"
                );
                set_memlock(NS_MEMLOCK_PAGES as u64)?;
                let dev = Device::open().ctx("open as root of a user namespace")?;
                let mem = Mem::new(OVER)?;
                let c = try_pin_pages(&dev, &mem, NS_MEMLOCK_PAGES)
                    .ctx("4 pages under a 4-page limit")?;
                expect_errno(
                    "one page over a 4-page limit, CAP_IPC_LOCK in a child user namespace",
                    try_pin_pages(&dev, &mem, 1),
                    Errno::ENOMEM,
                )?;
                expect_errno(
                    "16 pages over a 4-page limit, CAP_IPC_LOCK in a child user namespace",
                    try_pin_pages(&dev, &mem, OVER),
                    Errno::ENOMEM,
                )?;
                dev.destroy_region(c).ctx("destroy")
            })?;
            let refused = counter(COUNTER)? - before;
            ensure!(
                refused == 2,
                "{COUNTER} grew by {refused} for root of a child user namespace, expected 2"
            );
            let peer = spawn_peer(|_| {
                set_memlock(NS_MEMLOCK_PAGES as u64)?;
                become_with_cap_ipc_lock(ACCOUNT)?;
                ensure!(user_ns()? == initial, "not in the initial user namespace");
                ensure!(
                    has_cap_ipc_lock()?,
                    "uid {ACCOUNT} did not keep CAP_IPC_LOCK"
                );
                let dev = Device::open().ctx("open as uid 1000 with CAP_IPC_LOCK")?;
                let mem = Mem::new(OVER)?;
                let c = try_pin_pages(&dev, &mem, OVER).ctx(
                    "16 pages over a 4-page limit with CAP_IPC_LOCK in the initial namespace",
                )?;
                dev.destroy_region(c).ctx("destroy")
            })?;
            peer.finish()?;
            let refused = counter(COUNTER)? - before;
            ensure!(
                refused == 2,
                "{COUNTER} grew to +{refused} after CAP_IPC_LOCK in the initial namespace pinned, expected +2"
            );
            Ok(())
        })
    })
}

/// First uids of two namespaces that root creates, as a rootful container
/// runtime maps them.
const ROOT_NS_BASES: [u32; 2] = [300_000, 400_000];

/// Runs `f` in a forked process that is root in the initial namespace and
/// creates a user namespace of its own (so root is its owner), whose uids
/// and gids 0..SUBUIDS map to `base`.., as root in it.
fn in_root_namespace(
    base: u32,
    f: impl FnOnce(&mut crate::util::Chan) -> TestResult,
) -> TestResult<Peer> {
    let mut peer = spawn_peer(|chan| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
            .ctx("unshare(CLONE_NEWUSER) as root")?;
        chan.send(1)?;
        chan.recv()?;
        setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
            .ctx("setresgid(0) in the namespace")?;
        setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
            .ctx("setresuid(0) in the namespace")?;
        f(chan)
    })?;
    peer.recv()?;
    let pid = peer.pid();
    let map = format!("0 {base} {SUBUIDS}");
    std::fs::write(format!("/proc/{pid}/uid_map"), &map).ctx("write uid_map")?;
    std::fs::write(format!("/proc/{pid}/gid_map"), &map).ctx("write gid_map")?;
    peer.send(1)?;
    Ok(peer)
}

/// Declares regions of `len` bytes at the start of `mem` on `dev` until
/// ENOMEM (at most 64) and returns them, held.
fn regions_until_refused(dev: &Device, mem: &Mem, len: u64) -> TestResult<Vec<knem::Cookie>> {
    let mut held = Vec::new();
    while held.len() < 64 {
        // SAFETY: our own scratch memory, only read; the callers' `len`
        // stays within its first page.
        let r = unsafe {
            dev.create_region_raw(
                &[Iovec::from_raw(mem.addr(0), len)],
                Protection::READ,
                RegionFlags::NONE,
            )
        };
        match r {
            Ok(c) => held.push(c),
            Err(e) if e.errno() == Some(Errno::ENOMEM) => break,
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(held)
}

/// Issue 33, M2: sibling user namespaces that root created (rootful
/// containers) each have a budget of their own, as the kernel's ucounts
/// give them, not root's shared one.  With max_regions_per_user=6, root
/// of namespace A declares regions until refused (6) and holds them; root
/// of namespace B then gets 6 too, and root of the initial namespace 6,
/// all held at once.
pub fn root_namespaces_have_their_own_bounds() -> TestResult {
    const REGIONS: u64 = 6;
    with_device_open_to_all(|| {
        let regions = counter("regions")?;
        with_param("max_regions_per_user", &REGIONS.to_string(), || {
            let fill = |chan: &mut crate::util::Chan| -> TestResult {
                let dev = Device::open().ctx("open in the namespace")?;
                let mem = Mem::new(1)?;
                let held = regions_until_refused(&dev, &mem, 0)?;
                chan.send(held.len() as u64)?;
                chan.recv()?;
                drop((held, dev));
                Ok(())
            };
            let mut peers = Vec::new();
            let mut got = Vec::new();
            for base in ROOT_NS_BASES {
                let mut p = in_root_namespace(base, fill)?;
                got.push(p.recv()?);
                peers.push(p);
            }
            let dev = Device::open().ctx("open as root")?;
            let mem = Mem::new(1)?;
            let root = regions_until_refused(&dev, &mem, 0)?.len() as u64;
            for p in peers.iter_mut() {
                p.send(0)?;
            }
            for p in peers {
                p.finish()?;
            }
            ensure!(
                got == [REGIONS, REGIONS] && root == REGIONS,
                "namespaces A and B of root held {got:?} regions at once, then root {root}: expected {REGIONS} each (a bound per namespace)"
            );
            Ok(())
        })?;
        crate::stats::wait_counter("regions", regions)
    })
}

/// Issue 33, M3: an account's subordinate uids share its RLIMIT_MEMLOCK.
/// With a limit of 16 pages, 4 uids of uid 1000's namespace (4 kernel
/// uids, each with a locked_vm of its own) each try to pin 16 pages at
/// once and hold them: 16 pages in all, every other attempt ENOMEM.
pub fn memlock_shared_by_subordinate_uids() -> TestResult {
    const UIDS: u32 = 4;
    with_param("account_pinned", "1", || {
        with_device_open_to_all(|| {
            let pinned = counter("pinned_pages")?;
            in_account_namespace(|| {
                set_memlock(MEMLOCK_PAGES)?;
                let per_uid = as_each_uid(0..UIDS, |id| {
                    let dev = Device::open().ctx(&format!("open as uid {id}"))?;
                    let mem = Mem::new(MEMLOCK_PAGES as usize)?;
                    let len = MEMLOCK_PAGES as usize * PAGE;
                    // SAFETY: our own scratch pages, only read.
                    let r = unsafe {
                        dev.create_region_raw(
                            &[Iovec::from_raw(mem.addr(0), len as u64)],
                            Protection::READ,
                            RegionFlags::NONE,
                        )
                    };
                    let pages = match r {
                        Ok(_) => MEMLOCK_PAGES,
                        Err(e) if e.errno() == Some(Errno::ENOMEM) => 0,
                        Err(e) => return Err(format!("uid {id}: {e}")),
                    };
                    Ok((pages, Box::new((dev, mem))))
                })?;
                let total: u64 = per_uid.iter().sum();
                ensure!(
                    total == MEMLOCK_PAGES,
                    "{UIDS} uids of one account's namespace pinned {total} pages at once ({per_uid:?}) with RLIMIT_MEMLOCK at {MEMLOCK_PAGES}"
                );
                Ok(())
            })?;
            crate::stats::wait_counter("pinned_pages", pinned)
        })
    })
}

/// The environment variable that makes knem-tests run [`exec_round`]
/// instead of the suite: "FD:ROUND".
pub const EXEC_ENV: &str = "KNEM_TESTS_MEMLOCK_EXEC";
const EXEC_ROUNDS: u32 = 3;
const MEMLOCK_PAGES: u64 = 16;

/// Pins cannot be multiplied by starting fresh mms.  A process of uid
/// nobody with a 16-page RLIMIT_MEMLOCK pins 16 pages, then exec()s itself
/// three times keeping the fd (each time a new mm, the same process: the
/// fd still serves it), and each image tries to pin one page more on that
/// fd; a forked child tries on an fd of its own.  Pins are charged to the
/// user, so every one of them is ENOMEM, the node's pinned pages stay at
/// 16 above where they were, and once the first region goes a new mm may
/// pin 16 pages again.
pub fn memlock_per_user_across_exec() -> TestResult {
    with_param("account_pinned", "1", || {
        with_device_open_to_all(|| {
            let pinned = counter("pinned_pages")?;
            let peer = spawn_peer(|_| {
                set_memlock(MEMLOCK_PAGES)?;
                become_nobody()?;
                let dev = Device::open().ctx("open as nobody")?;
                let mem = Mem::new(MEMLOCK_PAGES as usize)?;
                region_at(
                    &dev,
                    &mem,
                    0,
                    MEMLOCK_PAGES as usize * PAGE,
                    Protection::READ,
                    RegionFlags::NONE,
                )?;
                let child = spawn_peer(|_| {
                    let mine = Mem::new(1)?;
                    let own = Device::open().ctx("open in a forked child")?;
                    expect_errno(
                        "one page in a forked child",
                        try_pin(&own, &mine),
                        Errno::ENOMEM,
                    )
                })?;
                child.finish()?;
                // Keep the fd across exec; the images report on stderr.
                let fd = dev.as_raw_fd();
                nix::fcntl::fcntl(
                    fd,
                    nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
                )
                .ctx("clear FD_CLOEXEC")?;
                std::mem::forget(dev);
                exec_self(fd, 0)
            })?;
            peer.finish()?;
            let now = counter("pinned_pages")?;
            ensure!(
                now == pinned,
                "pinned_pages {now} after the last image exited, expected {pinned}"
            );
            Ok(())
        })
    })
}

fn try_pin(dev: &Device, mem: &Mem) -> knem::Result<knem::Cookie> {
    // SAFETY: our own scratch page, only read.
    unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), PAGE as u64)],
            Protection::READ,
            RegionFlags::NONE,
        )
    }
}

/// Replaces this process with knem-tests running [`exec_round`] `round`.
fn exec_self(fd: i32, round: u32) -> TestResult {
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("/proc/self/exe")
        .env(EXEC_ENV, format!("{fd}:{round}"))
        .exec();
    Err(format!("exec of round {round}: {err}"))
}

/// One image of [`memlock_per_user_across_exec`]: a fresh mm with the fd
/// that pinned the limit already.  One page more must be ENOMEM; the node
/// must not hold more than the limit above what the first image pinned.
/// Then the next round, or after the last, the region goes and a full
/// limit is pinned again.  Returns the exit status.
pub fn exec_round(spec: &str) -> i32 {
    let r = (|| -> TestResult {
        let (fd, round) = spec
            .split_once(':')
            .and_then(|(f, r)| Some((f.parse::<i32>().ok()?, r.parse::<u32>().ok()?)))
            .ok_or_else(|| format!("{EXEC_ENV}={spec}: not FD:ROUND"))?;
        // SAFETY: the fd the previous image left open for us, owned by
        // nobody else in this image.
        let dev = Device::from_fd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        let mine = Mem::new(MEMLOCK_PAGES as usize)?;
        expect_errno(
            &format!("one page more after exec {}", round + 1),
            try_pin(&dev, &mine),
            Errno::ENOMEM,
        )?;
        if round + 1 < EXEC_ROUNDS {
            std::mem::forget(dev);
            return exec_self(fd, round + 1);
        }
        // Closing the fd frees the first image's region and its charge.
        drop(dev);
        let own = Device::open().ctx("open after the last exec")?;
        mine.fill(0x3d);
        let c = region_at(
            &own,
            &mine,
            0,
            MEMLOCK_PAGES as usize * PAGE,
            Protection::READ,
            RegionFlags::NONE,
        )?;
        let mut buf = vec![0u8; PAGE];
        expect_success("read it back", own.read_into(c, 0, &mut buf, None))?;
        check_bytes("read it back", &buf, |_| 0x3d)
    })();
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("memlock_per_user_across_exec: {e}");
            1
        }
    }
}

/// A region of 2^20 empty iovecs holds no kernel memory for them: in a
/// memory cgroup, the group's memory use with the region declared is
/// within 4 MiB of what it was before (the 32 MiB of segments it used to
/// keep are gone), and the region still behaves (a read of it copies
/// nothing and succeeds).
pub fn empty_iovecs_hold_no_kernel_memory() -> TestResult {
    const IOVECS: usize = 1 << 20;
    let cg = TestCgroup::with(&["memory"])?;
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    // Built (and its pages touched) before the first reading.
    let iovecs: Vec<Iovec> = (0..IOVECS)
        .map(|_| Iovec::from_raw(mem.addr(0), 0))
        .collect();
    let before = memory_current(&cg)?;
    // SAFETY: zero-length iovecs: no byte of them is ever touched.
    let c = unsafe { dev.create_region_raw(&iovecs, Protection::READ, RegionFlags::NONE) }
        .ctx("a region of 2^20 empty iovecs")?;
    let during = memory_current(&cg)?;
    ensure!(
        during < before + (4 << 20),
        "a region of {IOVECS} empty iovecs raised the group's memory.current from {before} to {during}"
    );
    let mut buf = [0u8; 16];
    expect_success(
        "read of the empty region",
        dev.read_into(c, 0, &mut buf, None),
    )?;
    dev.destroy_region(c).ctx("destroy")?;
    drop(iovecs);
    drop(dev);
    drop(cg);
    Ok(())
}

fn memory_current(cg: &TestCgroup) -> TestResult<u64> {
    let v = cg.read("memory.current")?;
    v.parse()
        .map_err(|_| format!("memory.current: not an integer: {v:?}"))
}

/// What an open costs the kernel is charged to the opener's memory
/// cgroup: 1000 O_RDONLY opens (each with its statistics text, 2 KiB, and
/// the file state) raise the group's unreclaimable slab by at least 2.5 KiB
/// each, and 1000 O_RDWR opens (file state and context) by at least 1 KiB
/// each; closing them gives it back.
pub fn per_open_memory_charged_to_memcg() -> TestResult {
    const FDS: u64 = 1000;
    let cg = TestCgroup::with(&["memory"])?;
    for (what, per_fd, open) in [
        (
            "O_RDONLY",
            2560u64,
            Device::open_readonly as fn() -> knem::Result<Device>,
        ),
        ("O_RDWR", 1024, Device::open),
    ] {
        let before = slab(&cg)?;
        let fds = (0..FDS)
            .map(|i| open().ctx(&format!("{what} open {i}")))
            .collect::<TestResult<Vec<_>>>()?;
        let during = slab(&cg)?;
        ensure!(
            during >= before + FDS * per_fd,
            "{FDS} {what} opens raised the group's slab_unreclaimable by {} bytes ({} per fd), expected at least {per_fd} per fd",
            during.saturating_sub(before),
            during.saturating_sub(before) / FDS
        );
        drop(fds);
    }
    drop(cg);
    Ok(())
}

fn slab(cg: &TestCgroup) -> TestResult<u64> {
    cg.memory_stat("slab_unreclaimable")?
        .ok_or_else(|| "no slab_unreclaimable in memory.stat".to_string())
}
