//! Issue 4 (hardening): pinned-memory accounting, the access policy,
//! unguessable cookies, and teardown while copies run.

use crate::ensure;
use crate::util::*;
use knem::{Cookie, Device, Errno, Iovec, Protection, RegionFlags, Status};
use nix::libc;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARAMS: &str = "/sys/module/knem/parameters";

/// A region over the first `len` bytes of `mem`.
fn region(dev: &Device, mem: &Mem, len: usize, flags: RegionFlags) -> TestResult<Cookie> {
    region_at(dev, mem, 0, len, Protection::READ_WRITE, flags)
}

/// Same, keeping the error (for ENOMEM).
fn try_region(dev: &Device, mem: &Mem, len: usize) -> knem::Result<Cookie> {
    // SAFETY: our own scratch mapping, only ever snapshotted.
    unsafe {
        dev.create_region_raw(
            &[Iovec::from_raw(mem.addr(0), len as u64)],
            Protection::READ_WRITE,
            RegionFlags::NONE,
        )
    }
}

/// VmPin of this process, in KiB.
fn vm_pin_kib() -> TestResult<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ctx("/proc/self/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmPin in /proc/self/status".to_string())
}

fn expect_vm_pin(what: &str, pages: u64) -> TestResult {
    let got = vm_pin_kib()?;
    ensure!(
        got == pages * 4,
        "{what}: VmPin {got} kB, expected {} kB",
        pages * 4
    );
    Ok(())
}

pub(crate) fn set_memlock(pages: u64) -> TestResult {
    let lim = libc::rlimit {
        rlim_cur: pages * PAGE as u64,
        rlim_max: pages * PAGE as u64,
    };
    // SAFETY: plain setrlimit with a valid struct.
    let r = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
    ensure!(r == 0, "setrlimit(RLIMIT_MEMLOCK): {}", Errno::last());
    Ok(())
}

fn read_param(name: &str) -> TestResult<String> {
    std::fs::read_to_string(format!("{PARAMS}/{name}"))
        .map(|s| s.trim().to_string())
        .ctx(name)
}

fn write_param(name: &str, v: &str) -> TestResult {
    std::fs::write(format!("{PARAMS}/{name}"), v).ctx(&format!("write {name}={v}"))
}

/// Runs `f` with /dev/knem world-usable and module parameters that are
/// restored afterwards, whatever `f` returns.
fn with_setup(params: &[(&str, &str)], f: impl FnOnce() -> TestResult) -> TestResult {
    with_device_open_to_all(|| {
        let mut saved = Vec::new();
        let mut r = Ok(());
        for (name, v) in params {
            match read_param(name).and_then(|old| write_param(name, v).map(|()| old)) {
                Ok(old) => saved.push((*name, old)),
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        if r.is_ok() {
            r = f();
        }
        for (name, old) in saved.into_iter().rev() {
            let _ = write_param(name, &old);
        }
        r
    })
}

/// Over RLIMIT_MEMLOCK without CAP_IPC_LOCK: ENOMEM, nothing charged;
/// under it: VmPin shows the charge until the region goes.
pub fn memlock_limit_enforced() -> TestResult {
    with_setup(&[("account_pinned", "1")], || {
        let peer = spawn_peer(|_| {
            set_memlock(16)?;
            become_nobody()?;
            let dev = Device::open().ctx("open as nobody")?;
            let mem = Mem::new(32)?;
            mem.fill(0x5a);
            expect_vm_pin("before", 0)?;
            let a = region(&dev, &mem, 8 * PAGE, RegionFlags::NONE)?;
            expect_vm_pin("8 pages", 8)?;
            expect_errno(
                "9 more pages",
                try_region(&dev, &mem, 9 * PAGE),
                Errno::ENOMEM,
            )?;
            expect_errno("32 pages", try_region(&dev, &mem, 32 * PAGE), Errno::ENOMEM)?;
            expect_vm_pin("after refusals", 8)?;
            let b = region(&dev, &mem, 8 * PAGE, RegionFlags::NONE)?;
            expect_vm_pin("at the limit", 16)?;
            let mut buf = [0u8; 64];
            expect_success("read at the limit", dev.read_into(b, 0, &mut buf, None))?;
            ensure!(buf == [0x5a; 64], "read gave {buf:?}");
            // A 1-byte probe (UCX) needs one page: refused now.
            expect_errno("1 byte over", try_region(&dev, &mem, 1), Errno::ENOMEM)?;
            dev.destroy_region(a).ctx("destroy a")?;
            expect_vm_pin("after destroy", 8)?;
            drop(dev);
            expect_vm_pin("after close", 0)
        })?;
        let pid = peer.pid();
        peer.finish()?;
        // The refusal is explained once in the kernel log (rate-limited),
        // naming the process and the limit: this test's peer, by its pid,
        // not a line another test's process left.
        let log = std::process::Command::new("dmesg").output().ctx("dmesg")?;
        let log = String::from_utf8_lossy(&log.stdout);
        let who = format!("knem: knem-tests[{pid}]: ");
        ensure!(
            log.lines()
                .any(|l| l.contains(&who) && l.contains("exceeds RLIMIT_MEMLOCK (64 KiB")),
            "no kernel log line naming this test's process ({who}...) and RLIMIT_MEMLOCK"
        );
        Ok(())
    })
}

/// Each pin the limit refuses is counted in pins_refused_memlock and the
/// client's error says what to change; a pin under the limit, or one that
/// CAP_IPC_LOCK lets through, is not counted.
pub fn memlock_refusals_counted() -> TestResult {
    const COUNTER: &str = "pins_refused_memlock";
    with_setup(&[("account_pinned", "1")], || {
        let before = crate::stats::counter(COUNTER)?;
        let peer = spawn_peer(|_| {
            set_memlock(4)?;
            become_nobody()?;
            let dev = Device::open().ctx("open as nobody")?;
            let mem = Mem::new(16)?;
            let a = region(&dev, &mem, 4 * PAGE, RegionFlags::NONE)?;
            let e = match try_region(&dev, &mem, PAGE) {
                Err(e) => e,
                Ok(c) => return Err(format!("a 5th page under a 4-page limit: {c:?}")),
            };
            let msg = e.to_string();
            ensure!(
                e.errno() == Some(Errno::ENOMEM)
                    && msg.contains("RLIMIT_MEMLOCK")
                    && msg.contains("/etc/security/limits.d/"),
                "the error does not say what to change: {msg}"
            );
            expect_errno("16 pages", try_region(&dev, &mem, 16 * PAGE), Errno::ENOMEM)?;
            dev.destroy_region(a).ctx("destroy")
        })?;
        peer.finish()?;
        let refused = crate::stats::counter(COUNTER)? - before;
        ensure!(refused == 2, "{COUNTER} grew by {refused}, expected 2");
        let peer = spawn_peer(|_| {
            set_memlock(4)?;
            let dev = Device::open().ctx("open as root")?;
            let mem = Mem::new(16)?;
            let c = region(&dev, &mem, 16 * PAGE, RegionFlags::NONE)?;
            dev.destroy_region(c).ctx("destroy")
        })?;
        peer.finish()?;
        let refused = crate::stats::counter(COUNTER)? - before;
        ensure!(
            refused == 2,
            "CAP_IPC_LOCK: {COUNTER} grew to +{refused}, expected +2"
        );
        Ok(())
    })
}

/// CAP_IPC_LOCK (root) bypasses the limit; VmPin still counts.
pub fn memlock_cap_ipc_lock_bypasses() -> TestResult {
    with_setup(&[("account_pinned", "1")], || {
        let peer = spawn_peer(|_| {
            set_memlock(4)?;
            let dev = Device::open().ctx("open")?;
            let mem = Mem::new(64)?;
            let c = region(&dev, &mem, 64 * PAGE, RegionFlags::NONE)?;
            expect_vm_pin("64 pages as root", 64)?;
            dev.destroy_region(c).ctx("destroy")?;
            expect_vm_pin("after destroy", 0)
        })?;
        peer.finish()
    })
}

/// account_pinned=0: KNEM's old behaviour, but VmPin still tells the truth.
pub fn memlock_account_pinned_off() -> TestResult {
    with_setup(&[("account_pinned", "0")], || {
        let peer = spawn_peer(|_| {
            set_memlock(4)?;
            become_nobody()?;
            let dev = Device::open().ctx("open as nobody")?;
            let mem = Mem::new(32)?;
            let c = region(&dev, &mem, 32 * PAGE, RegionFlags::NONE)?;
            expect_vm_pin("32 pages, not enforced", 32)?;
            dev.destroy_region(c).ctx("destroy")?;
            expect_vm_pin("after destroy", 0)
        })?;
        peer.finish()
    })
}

/// splitmix64: random probes from one seed of the kernel's randomness.
struct Rng(u64);

impl Rng {
    fn seeded() -> TestResult<Self> {
        let mut b = [0u8; 8];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").ctx("urandom")?,
            &mut b,
        )
        .ctx("read urandom")?;
        Ok(Rng(u64::from_le_bytes(b)))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A cookie's low 20 bits are the slot index, the other 44 a random tag.
const INDEX_MASK: u64 = (1 << 20) - 1;

/// Every tag bit is random: over 4000 cookies (two rounds of 2000 live
/// regions, so slots are reused) each of the 44 tag bits is set in 40-60 %
/// of them (9 standard deviations), no two are equal and none is 0.
pub fn cookie_tag_bits_random() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    let mut seen = std::collections::HashSet::new();
    let mut ones = [0u32; 64];
    for round in 0..2 {
        let mut live = Vec::new();
        for _ in 0..2000 {
            let c = region(&dev, &mem, 8, RegionFlags::NONE)?.as_raw();
            ensure!(c != 0, "cookie 0");
            ensure!(seen.insert(c), "round {round}: cookie {c:#x} repeated");
            for (bit, n) in ones.iter_mut().enumerate() {
                *n += (c >> bit) as u32 & 1;
            }
            live.push(c);
        }
        for c in live {
            dev.destroy_region(Cookie::from_raw(c)).ctx("destroy")?;
        }
    }
    let n = seen.len() as u32;
    for (bit, &set) in ones.iter().enumerate().skip(20) {
        ensure!(
            (n * 2 / 5..=n * 3 / 5).contains(&set),
            "cookie bit {bit} set in {set} of {n} cookies"
        );
    }
    Ok(())
}

/// Probes per run (about 2 s under TCG); the host mock runs as many.
const COOKIE_PROBES: u64 = 1_000_000;

/// Random cookies never reach one of 1000 live regions: half keep a live
/// index and guess the tag, half are fully random.  Each probe is a
/// 1-byte INLINE_COPY that must fail with EINVAL.
pub fn cookie_guessing_misses() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    let mut live = std::collections::HashSet::new();
    for _ in 0..1000 {
        live.insert(region(&dev, &mem, 64, RegionFlags::NONE)?.as_raw());
    }
    let max_idx = live.iter().map(|c| c & INDEX_MASK).max().unwrap_or(0) + 1;
    let mut rng = Rng::seeded()?;
    let mut buf = [0u8; 1];
    let start = Instant::now();
    let mut done = 0u64;
    while done < COOKIE_PROBES {
        let x = rng.next();
        let raw = if done & 1 == 0 {
            (x & !INDEX_MASK) | ((x & INDEX_MASK) % max_idx)
        } else {
            x
        };
        if live.contains(&raw) {
            continue; // a real cookie, not a guess
        }
        match dev.read_into(Cookie::from_raw(raw), 0, &mut buf, None) {
            Err(e) if e.errno() == Some(Errno::EINVAL) => {}
            other => return Err(format!("probe {raw:#x}: {other:?}")),
        }
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "cookie probes: {done} in {secs:.1} s ({:.0}/s)",
        done as f64 / secs
    );
    for c in live {
        dev.destroy_region(Cookie::from_raw(c)).ctx("destroy")?;
    }
    Ok(())
}

/// Runs `f` with `/sys/module/knem/parameters/access_policy` set to
/// `policy` and /dev/knem world-usable.
fn with_policy(policy: &str, f: impl FnOnce() -> TestResult) -> TestResult {
    with_setup(&[("access_policy", policy)], f)
}

/// One outcome of a read by a peer, for `want`.
fn read_outcome(dev: &Device, c: Cookie) -> u64 {
    let mut buf = [0u8; 16];
    let r = dev.read_into(c, 0, &mut buf, None);
    if matches!(r, Ok(Status::Success)) && buf != [0x77; 16] {
        return 0xbad;
    }
    encode_outcome(&r)
}

/// A nobody process owns a region; what a read of it gives to another
/// nobody process, to root, and to another nobody process once the owner
/// turned itself non-dumpable.
fn policy_matrix() -> TestResult<[u64; 3]> {
    let mut owner = spawn_peer(|chan| {
        become_nobody()?;
        // setuid() made us non-dumpable, as after any credential change;
        // an exec()ed MPI rank would be dumpable again.
        // SAFETY: plain prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        let dev = Device::open().ctx("owner open")?;
        let mem = Mem::new(1)?;
        mem.fill(0x77);
        let c = region(&dev, &mem, 64, RegionFlags::NONE)?;
        chan.send(c.as_raw())?;
        chan.recv()?;
        // SAFETY: plain prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        chan.send(1)?;
        chan.recv()?;
        drop(mem);
        Ok(())
    })?;
    let c = Cookie::from_raw(owner.recv()?);
    let as_nobody = |c: Cookie| -> TestResult<u64> {
        let mut p = spawn_peer(move |chan| {
            become_nobody()?;
            let dev = Device::open().ctx("reader open")?;
            chan.send(read_outcome(&dev, c))
        })?;
        let v = p.recv()?;
        p.finish()?;
        Ok(v)
    };
    let nobody = as_nobody(c)?;
    let dev = Device::open().ctx("root open")?;
    let root = read_outcome(&dev, c);
    owner.send(0)?;
    owner.recv()?;
    let undumpable = as_nobody(c)?;
    owner.send(0)?;
    owner.finish()?;
    Ok([nobody, root, undumpable])
}

/// Each `got[i]` (a peer's [`encode_outcome`]) is `want[i]`.
fn expect_named(
    policy: &str,
    names: &[&str],
    got: &[u64],
    want: &[Result<Status, Errno>],
) -> TestResult {
    for ((name, &got), want) in names.iter().zip(got).zip(want) {
        let w = match want {
            Ok(s) => s.to_raw() as u64,
            Err(e) => (1 << 63) | *e as i32 as u64,
        };
        ensure!(
            got == w,
            "{policy}: {name}: got {:?}, expected {want:?}",
            decode_outcome(got)
        );
    }
    Ok(())
}

fn expect_outcomes(policy: &str, got: [u64; 3], want: [Result<Status, Errno>; 3]) -> TestResult {
    let names = ["same uid", "root", "same uid, owner not dumpable"];
    expect_named(policy, &names, &got, &want)
}

/// access_policy=uid: KNEM's rule (root is another uid: EPERM).
pub fn access_policy_uid() -> TestResult {
    with_policy("uid", || {
        ensure!(read_param("access_policy")? == "uid", "parameter not uid");
        let got = policy_matrix()?;
        expect_outcomes(
            "uid",
            got,
            [Ok(Status::Success), Err(Errno::EPERM), Ok(Status::Success)],
        )
    })
}

/// access_policy=ptrace: root (CAP_SYS_PTRACE) may, the same uid may until
/// the owner turns non-dumpable; bad values are refused.
pub fn access_policy_ptrace() -> TestResult {
    with_policy("ptrace", || {
        ensure!(
            read_param("access_policy")? == "ptrace",
            "parameter not ptrace"
        );
        ensure!(
            write_param("access_policy", "bogus").is_err(),
            "bogus value accepted"
        );
        let got = policy_matrix()?;
        expect_outcomes(
            "ptrace",
            got,
            [Ok(Status::Success), Ok(Status::Success), Err(Errno::EPERM)],
        )
    })
}

const YAMA_SCOPE: &str = "/proc/sys/kernel/yama/ptrace_scope";

/// Runs `f` with Yama's ptrace_scope at `scope`, then restores it.
fn with_yama_scope(scope: u32, f: impl FnOnce() -> TestResult) -> TestResult {
    let old = std::fs::read_to_string(YAMA_SCOPE)
        .ctx("Yama is not active on this kernel (it is on Debian's)")?;
    std::fs::write(YAMA_SCOPE, scope.to_string()).ctx("set ptrace_scope")?;
    let r = f();
    std::fs::write(YAMA_SCOPE, old.trim()).ctx("restore ptrace_scope")?;
    r
}

/// A nobody process owns a region and its nobody child owns another; what
/// the parent's read of the child's region gives (Yama's "descendant"
/// case), then the child's read of the parent's.
fn yama_lineage() -> TestResult<[u64; 2]> {
    let mut parent = spawn_peer(|chan| {
        become_nobody()?;
        // SAFETY: plain prctl with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        let mut child = spawn_peer(|up| {
            let dev = Device::open().ctx("child open")?;
            let mem = Mem::new(1)?;
            mem.fill(0x77);
            let c = region(&dev, &mem, 64, RegionFlags::NONE)?;
            up.send(c.as_raw())?;
            let theirs = Cookie::from_raw(up.recv()?);
            up.send(read_outcome(&dev, theirs))?;
            up.recv()?;
            drop(mem);
            Ok(())
        })?;
        let theirs = Cookie::from_raw(child.recv()?);
        let dev = Device::open().ctx("parent open")?;
        let mem = Mem::new(1)?;
        mem.fill(0x77);
        let mine = region(&dev, &mem, 64, RegionFlags::NONE)?;
        let down = read_outcome(&dev, theirs);
        child.send(mine.as_raw())?;
        let up = child.recv()?;
        child.send(0)?;
        child.finish()?;
        chan.send(down)?;
        chan.send(up)
    })?;
    let down = parent.recv()?;
    let up = parent.recv()?;
    parent.finish()?;
    Ok([down, up])
}

/// access_policy=ptrace follows Yama's ptrace_scope, as CMA does: 0 is the
/// classic rule; 1 lets only an ancestor (or CAP_SYS_PTRACE) in; 2 only
/// CAP_SYS_PTRACE.  The uid policy ignores it.
pub fn access_policy_ptrace_yama() -> TestResult {
    use Status::Success;
    const EPERM: Result<Status, Errno> = Err(Errno::EPERM);
    let lineage = |scope: &str, got: [u64; 2], want: [Result<Status, Errno>; 2]| {
        let names = ["ancestor reads descendant", "descendant reads ancestor"];
        expect_named(scope, &names, &got, &want)
    };
    with_policy("ptrace", || {
        with_yama_scope(0, || {
            expect_outcomes(
                "ptrace, scope 0",
                policy_matrix()?,
                [Ok(Success), Ok(Success), EPERM],
            )?;
            lineage(
                "ptrace, scope 0",
                yama_lineage()?,
                [Ok(Success), Ok(Success)],
            )
        })?;
        with_yama_scope(1, || {
            expect_outcomes(
                "ptrace, scope 1",
                policy_matrix()?,
                [EPERM, Ok(Success), EPERM],
            )?;
            lineage("ptrace, scope 1", yama_lineage()?, [Ok(Success), EPERM])
        })?;
        with_yama_scope(2, || {
            expect_outcomes(
                "ptrace, scope 2",
                policy_matrix()?,
                [EPERM, Ok(Success), EPERM],
            )?;
            lineage("ptrace, scope 2", yama_lineage()?, [EPERM, EPERM])
        })
    })?;
    with_policy("uid", || {
        with_yama_scope(2, || {
            expect_outcomes(
                "uid, scope 2",
                policy_matrix()?,
                [Ok(Success), EPERM, Ok(Success)],
            )
        })
    })
}

/// Bytes of the region [`ptrace_owner_leader_exited`]'s owner declares.
const LEADER_LEN: usize = 2 * PAGE - 3;
const LEADER_SEED: u8 = 0x5e;

/// The state letter of `/proc/PID/status` (`R`, `S`, `Z`...).
fn proc_state(pid: i32) -> TestResult<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ctx("/proc/PID/status")?;
    s.lines()
        .find_map(|l| l.strip_prefix("State:"))
        .and_then(|v| v.trim().chars().next())
        .ok_or_else(|| format!("no State in /proc/{pid}/status"))
}

/// What a read of `c` gives a fresh nobody process: its
/// [`encode_outcome`], or `0xbad` when it succeeded with wrong bytes.
fn read_as_nobody(c: Cookie) -> TestResult<u64> {
    let mut p = spawn_peer(move |chan| {
        become_nobody()?;
        let dev = Device::open().ctx("reader open")?;
        let mut buf = vec![0u8; LEADER_LEN];
        let r = dev.read_into(c, 0, &mut buf, None);
        let ok = (0..LEADER_LEN).all(|i| buf[i] == pat(LEADER_SEED, i as u64));
        chan.send(if matches!(r, Ok(Status::Success)) && !ok {
            0xbad
        } else {
            encode_outcome(&r)
        })
    })?;
    let v = p.recv()?;
    p.finish()?;
    Ok(v)
}

/// access_policy=ptrace while the owner's main thread has left with the
/// raw exit system call (not exit_group) and a second thread keeps the
/// process alive: a process of the same uid may still read the region
/// (bytes checked).  Once the whole process is gone, with its context kept
/// alive by a copy of its fd, nobody may (EPERM); closing that copy brings
/// the counters back.
pub fn ptrace_owner_leader_exited() -> TestResult {
    with_policy("ptrace", || {
        with_yama_scope(0, || {
            let base = crate::stats::Snapshot::take()?;
            let (hold_r, hold_w) = nix::unistd::pipe().ctx("pipe")?;
            let (r_raw, w_raw) = (hold_r.as_raw_fd(), hold_w.as_raw_fd());
            let mut owner = spawn_peer(move |chan| {
                // SAFETY: the write end is the test's; our copy goes.
                unsafe { libc::close(w_raw) };
                become_nobody()?;
                // SAFETY: plain prctl with integer arguments.
                unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
                let dev = Device::open().ctx("owner open")?;
                let mem = Mem::new(2)?;
                let bytes: Vec<u8> = (0..LEADER_LEN)
                    .map(|i| pat(LEADER_SEED, i as u64))
                    .collect();
                mem.write(0, &bytes);
                let c = region(&dev, &mem, LEADER_LEN, RegionFlags::NONE)?;
                // The second thread waits for the test, then ends the
                // whole process.
                std::thread::spawn(move || {
                    let mut b = [0u8; 1];
                    // SAFETY: a read into our buffer from the pipe we own.
                    unsafe { libc::read(r_raw, b.as_mut_ptr().cast(), 1) };
                    // SAFETY: ends the process; nothing of ours must run.
                    unsafe { libc::_exit(0) }
                });
                chan.send(c.as_raw())?;
                chan.send(std::process::id() as u64)?;
                chan.send(dev.as_raw_fd() as u64)?;
                chan.recv()?;
                // The region's memory and fd stay with the process.
                std::mem::forget(mem);
                std::mem::forget(dev);
                // SAFETY: ends this thread only; the other one lives on.
                unsafe { libc::syscall(libc::SYS_exit, 0) };
                Err("SYS_exit returned".into())
            })?;
            drop(hold_r);
            let c = Cookie::from_raw(owner.recv()?);
            let pid = owner.recv()? as i32;
            let owner_fd = owner.recv()? as i32;
            // A copy of the owner's fd keeps its context (and the region)
            // after the process is gone.
            // SAFETY: pidfd_open and pidfd_getfd with integer arguments.
            let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
            ensure!(pidfd >= 0, "pidfd_open: {}", Errno::last());
            // SAFETY: as above.
            let keep = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, owner_fd, 0) } as i32;
            ensure!(keep >= 0, "pidfd_getfd: {}", Errno::last());
            // SAFETY: our pidfd, closed once.
            unsafe { libc::close(pidfd) };
            let live = read_as_nobody(c)?;
            owner.send(0)?;
            let deadline = Instant::now() + Duration::from_secs(20);
            while proc_state(pid)? != 'Z' {
                ensure!(
                    Instant::now() < deadline,
                    "the owner's leader never became a zombie"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
                .ctx("/proc/PID/task")?
                .count();
            ensure!(threads == 2, "owner has {threads} threads, expected 2");
            let leader_gone = read_as_nobody(c)?;
            // The thread's read returns: it ends the process.
            drop(hold_w);
            owner.finish()?;
            let process_gone = read_as_nobody(c)?;
            let mut sample = [0u8; 8];
            let dev = Device::open().ctx("root open")?;
            let as_root = encode_outcome(&dev.read_into(c, 0, &mut sample, None));
            let regions = crate::stats::counter("regions")?;
            ensure!(
                regions == base.regions + 1,
                "regions {regions} while the owner's context is kept, expected {}",
                base.regions + 1
            );
            // SAFETY: the copy of the owner's fd, closed once.
            unsafe { libc::close(keep) };
            drop(dev);
            crate::stats::wait_for(&base, "after the last copy of the owner's fd")?;
            use Status::Success;
            const EPERM: Result<Status, Errno> = Err(Errno::EPERM);
            expect_named(
                "ptrace",
                &[
                    "owner alive",
                    "owner's leader exited, a thread lives",
                    "owner gone (same uid)",
                    "owner gone (root)",
                ],
                &[live, leader_gone, process_gone, as_root],
                &[Ok(Success), Ok(Success), EPERM, EPERM],
            )
        })
    })
}

/// Mappings of /dev/knem in this process, from /proc/self/maps.
pub(crate) fn knem_mappings() -> TestResult<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").ctx("/proc/self/maps")?;
    Ok(maps.lines().filter(|l| l.ends_with("/dev/knem")).count())
}

/// The status array is not inherited: a forked child has no mapping of it
/// (it could only have scribbled on the parent's slots), and the parent's
/// array keeps working after the child is gone.
pub fn fork_child_has_no_status_array() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let array = dev.map_status_array(64).ctx("map status array")?;
    ensure!(
        knem_mappings()? == 1,
        "parent: {} /dev/knem mappings",
        knem_mappings()?
    );
    let child = spawn_peer(|_| {
        let n = knem_mappings()?;
        ensure!(n == 0, "child inherited {n} /dev/knem mappings");
        Ok(())
    })?;
    child.finish()?;
    let mem = Mem::new(1)?;
    mem.fill(0x5a);
    let c = region(&dev, &mem, PAGE, RegionFlags::NONE)?;
    let t = dev
        .read_async(
            &array,
            c,
            0,
            vec![0u8; PAGE],
            None,
            7,
            knem::CopyFlags::MEMCPY_THREAD,
        )
        .ctx("async read after fork")?;
    let (st, buf) = t
        .wait_timeout(Duration::from_secs(20))
        .map_err(|_| "async read after fork: still pending after 20 s".to_string())?;
    ensure!(st == Status::Success, "async read after fork ended {st}");
    check_bytes("async read after fork", &buf, |_| 0x5a)?;
    dev.destroy_region(c).ctx("destroy")
}

/// A forked child shares the parent's fd, but not its context: every
/// ioctl on it is EBADF, so it can neither destroy nor write the parent's
/// regions, and its exit changes nothing.  With its own fd it may read
/// them (same uid), and its writes to its copy of the memory stay its own.
pub fn fork_child_cannot_touch_parent_regions() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(4)?;
    mem.fill(0x42);
    let c = region(&dev, &mem, 4 * PAGE, RegionFlags::NONE)?;
    let child = spawn_peer(|_| {
        let mut buf = [0u8; 32];
        expect_errno(
            "inherited fd: read",
            dev.read_into(c, 0, &mut buf, None),
            Errno::EBADF,
        )?;
        expect_errno(
            "inherited fd: write",
            dev.write_from(c, 0, &buf, None),
            Errno::EBADF,
        )?;
        expect_errno("inherited fd: destroy", dev.destroy_region(c), Errno::EBADF)?;
        expect_errno(
            "inherited fd: create",
            try_region(&dev, &mem, PAGE),
            Errno::EBADF,
        )?;
        expect_errno(
            "inherited fd: status array",
            dev.map_status_array(64).map(drop),
            Errno::EBADF,
        )?;
        // Its own copy of the memory: the parent's pinned pages stay.
        mem.fill(0x99);
        let own = Device::open().ctx("child open")?;
        expect_success("own fd: read", own.read_into(c, 0, &mut buf, None))?;
        ensure!(buf == [0x42; 32], "child read {buf:?}");
        Ok(())
    })?;
    child.finish()?;
    let got = mem.snapshot();
    check_bytes("parent memory after the child", &got, |_| 0x42)?;
    let mut buf = vec![0u8; 4 * PAGE];
    expect_success(
        "parent read after the child",
        dev.read_into(c, 0, &mut buf, None),
    )?;
    check_bytes("parent region after the child", &buf, |_| 0x42)?;
    mem.fill(0x43);
    expect_success(
        "parent read of new data",
        dev.read_into(c, 0, &mut buf, None),
    )?;
    check_bytes("region follows the parent's writes", &buf, |_| 0x43)?;
    dev.destroy_region(c).ctx("destroy")
}

/// Region size of the teardown tests.
const TEAR_LEN: usize = 16 * PAGE;

/// Reads `c` until EINVAL: every success must carry the owner's pattern.
/// Returns the successes; the first one is announced on `chan`.
fn read_until_gone(
    dev: &Device,
    c: Cookie,
    chan: &mut Chan,
    deadline: Duration,
) -> TestResult<u64> {
    let mut buf = vec![0u8; TEAR_LEN];
    let start = Instant::now();
    let mut ok = 0u64;
    loop {
        match dev.read_into(c, 0, &mut buf, None) {
            Ok(Status::Success) => {
                check_bytes("read while the owner dies", &buf, |i| pat(0x1d, i as u64))?;
                ok += 1;
                if ok == 1 {
                    chan.send(1)?;
                }
            }
            Err(e) if e.errno() == Some(Errno::EINVAL) => break,
            other => return Err(format!("read while the owner dies: {other:?}")),
        }
        ensure!(start.elapsed() < deadline, "region never went away");
    }
    // Gone for good.
    for _ in 0..10 {
        expect_errno(
            "read after",
            dev.read_into(c, 0, &mut buf, None),
            Errno::EINVAL,
        )?;
    }
    Ok(ok)
}

/// SIGKILL of a region owner while 4 readers copy from it in a loop.
pub fn sigkill_owner_under_4_readers() -> TestResult {
    let mut owner = spawn_peer(|chan| {
        let dev = Device::open().ctx("owner open")?;
        let mem = Mem::new(TEAR_LEN / PAGE)?;
        let data: Vec<u8> = (0..TEAR_LEN as u64).map(|i| pat(0x1d, i)).collect();
        mem.write(0, &data);
        let c = region(&dev, &mem, TEAR_LEN, RegionFlags::NONE)?;
        chan.send(c.as_raw())?;
        chan.recv()?; // killed while waiting here
        Ok(())
    })?;
    let c = Cookie::from_raw(owner.recv()?);
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(spawn_peer(move |chan| {
            let dev = Device::open().ctx("reader open")?;
            let n = read_until_gone(&dev, c, chan, Duration::from_secs(120))?;
            chan.send(n)
        })?);
    }
    for r in &mut readers {
        r.recv()?; // each has read the data at least once
    }
    drop(owner); // SIGKILL
    for mut r in readers {
        let n = r.recv()?;
        ensure!(n >= 1, "reader saw no success");
        r.finish()?;
    }
    Ok(())
}

/// Threads copy from regions of one fd (through another fd, and through
/// the same fd) while the main thread closes it.
pub fn close_racing_copies_threads() -> TestResult {
    let owner = Device::open().ctx("open owner")?;
    let reader = Arc::new(Device::open().ctx("open reader")?);
    let mem = Mem::new(TEAR_LEN / PAGE)?;
    let data: Vec<u8> = (0..TEAR_LEN as u64).map(|i| pat(0x2e, i)).collect();
    mem.write(0, &data);
    let cookies: Vec<Cookie> = (0..4)
        .map(|_| region(&owner, &mem, TEAR_LEN, RegionFlags::NONE))
        .collect::<TestResult<_>>()?;
    let owner_fd = owner.as_raw_fd();
    let started = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, &c) in cookies.iter().enumerate() {
        let (reader, started, stop) = (reader.clone(), started.clone(), stop.clone());
        threads.push(std::thread::spawn(move || -> TestResult<u64> {
            let mut buf = vec![0u8; TEAR_LEN];
            let iov = [Iovec::from_raw(buf.as_mut_ptr() as u64, TEAR_LEN as u64)];
            let mut arg = knem::abi::knem_cmd_inline_copy {
                local_iovec_array: iov.as_ptr() as u64,
                local_iovec_nr: 1,
                remote_cookie: c.as_raw(),
                ..Default::default()
            };
            let mut ok = 0u64;
            while !stop.load(SeqCst) {
                // Odd threads copy through the owner's own fd, raw: the
                // Device is closed under them.
                let r = if i % 2 == 1 {
                    // SAFETY: arg and its iovec point at our own buffer.
                    Errno::result(unsafe {
                        libc::ioctl(owner_fd, knem::abi::cmd::INLINE_COPY as _, &mut arg)
                    })
                    .map(|_| Status::from_raw(arg.current_status))
                } else {
                    reader
                        .read_into(c, 0, &mut buf, None)
                        .map_err(|e| e.errno().unwrap_or(Errno::UnknownErrno))
                };
                match r {
                    Ok(Status::Success) => {
                        check_bytes("racing read", &buf, |j| pat(0x2e, j as u64))?;
                        ok += 1;
                        if ok == 1 {
                            started.fetch_add(1, SeqCst);
                        }
                    }
                    Err(Errno::EINVAL) | Err(Errno::EBADF) => {}
                    other => return Err(format!("racing read: {other:?}")),
                }
            }
            Ok(ok)
        }));
    }
    let t0 = Instant::now();
    while started.load(SeqCst) < 4 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(owner); // close while copies run
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, SeqCst);
    for t in threads {
        let n = t.join().map_err(|_| "thread panicked".to_string())??;
        ensure!(n >= 1, "a thread never copied");
    }
    for c in cookies {
        let mut b = [0u8; 1];
        expect_errno(
            "after close",
            reader.read_into(c, 0, &mut b, None),
            Errno::EINVAL,
        )?;
    }
    Ok(())
}

/// rmmod is refused while a fd is open (the run's final rmmod checks the
/// other half).
pub fn unload_refused_while_open() -> TestResult {
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(1)?;
    let c = region(&dev, &mem, 64, RegionFlags::NONE)?;
    let st = std::process::Command::new("rmmod")
        .arg("knem")
        .stderr(std::process::Stdio::null())
        .status()
        .ctx("run rmmod")?;
    ensure!(!st.success(), "rmmod succeeded with /dev/knem open");
    ensure!(
        std::path::Path::new("/sys/module/knem").exists(),
        "module gone"
    );
    let mut b = [0u8; 8];
    expect_success(
        "read after the refused unload",
        dev.read_into(c, 0, &mut b, None),
    )?;
    dev.destroy_region(c).ctx("destroy")
}

/// The charge of a region goes back to its owner's mm even when the last
/// reference is dropped by another process's offload thread: 8 queued
/// asynchronous reads of another process hold the region while its owner
/// destroys it.  The reader's own pinned pages are charged to it and
/// uncharged too.
pub fn charge_returns_to_the_owner() -> TestResult {
    const PAGES: usize = 1024;
    let dev = Device::open().ctx("open")?;
    let mem = Mem::new(PAGES)?;
    let data: Vec<u8> = (0..(PAGES * PAGE) as u64).map(|i| pat(0x3f, i)).collect();
    mem.write(0, &data);
    let base = vm_pin_kib()? / 4;
    let c = region(&dev, &mem, PAGES * PAGE, RegionFlags::NONE)?;
    expect_vm_pin("owner with the region", base + PAGES as u64)?;
    let mut reader = spawn_peer(move |chan| {
        let d = Device::open().ctx("reader open")?;
        let array = d.map_status_array(64).ctx("status array")?;
        let mut transfers = Vec::new();
        for i in 0..8u32 {
            let t = d
                .read_async(
                    &array,
                    c,
                    0,
                    vec![0; PAGES * PAGE],
                    None,
                    i,
                    knem::CopyFlags::MEMCPY_THREAD,
                )
                .ctx("read_async")?;
            transfers.push(t);
        }
        chan.send(1)?;
        for t in transfers {
            let (st, buf) = t
                .wait_timeout(Duration::from_secs(60))
                .map_err(|_| "async read still pending after 60 s".to_string())?;
            ensure!(st == Status::Success, "async read ended {st}");
            check_bytes("async read", &buf, |i| pat(0x3f, i as u64))?;
        }
        chan.send(vm_pin_kib()?)
    })?;
    reader.recv()?;
    dev.destroy_region(c).ctx("destroy with reads queued")?;
    let reader_pin = reader.recv()?;
    reader.finish()?;
    // Its status array (one page) stays charged where the memcg cannot
    // take it (knem_status.c): VmPin shows that charge too.
    let array_kib = if crate::t_status::status_array_charges_memlock()? {
        4
    } else {
        0
    };
    ensure!(
        reader_pin == array_kib,
        "reader VmPin {reader_pin} kB after its copies, expected {array_kib} kB (its status array's charge)"
    );
    let t0 = Instant::now();
    while vm_pin_kib()? != base * 4 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    expect_vm_pin("owner after the last reader", base)
}
