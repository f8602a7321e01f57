//! Long-term write pins of shared file mappings: refused where the
//! filesystem tracks writes to its pages (ext4 writes them back, ramfs
//! wants page_mkwrite), as GUP itself refuses them since 6.5; allowed for
//! shmem (tmpfs, memfd), hugetlbfs and private mappings.

use crate::ensure;
use crate::stats::{wait_for, Snapshot};
use crate::util::*;
use knem::{Cookie, CopyFlags, Device, Errno, InlineCopyRequest, Iovec, Protection, RegionFlags};
use nix::libc;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// Pages of each test file.
const FILE_PAGES: usize = 4;
const LEN: usize = FILE_PAGES * PAGE;
const SEED_FILE: u8 = 0x6d;
const SEED_SRC: u8 = 0x19;
const SEED_WRITE: u8 = 0xc4;

/// `mmap(at, len, READ|WRITE, flags, fd, 0)`: the address.  At `at` only
/// with MAP_FIXED over memory the caller owns (a [`Map`] of the test).
fn mmap_rw(at: u64, len: usize, flags: libc::c_int, fd: libc::c_int) -> TestResult<u64> {
    // SAFETY: a new mapping, or (MAP_FIXED) one over the caller's own.
    let p = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    ensure!(p != libc::MAP_FAILED, "mmap: {}", Errno::last());
    Ok(p as u64)
}

/// A mapping of `len` bytes, unmapped on drop.
///
/// # Invariants
///
/// `addr` is a live mapping of `len` bytes owned by this value.
struct Map {
    addr: u64,
    len: usize,
}

impl Map {
    /// `mmap(at, len, READ|WRITE, flags, fd, 0)`.
    fn new(at: u64, len: usize, flags: libc::c_int, fd: libc::c_int) -> TestResult<Self> {
        // INVARIANT: just mapped, owned by us.
        Ok(Self {
            addr: mmap_rw(at, len, flags, fd)?,
            len,
        })
    }

    /// The first `len` bytes of `file`, MAP_SHARED or MAP_PRIVATE.
    fn file(file: &File, len: usize, shared: bool) -> TestResult<Self> {
        let flags = if shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        Self::new(0, len, flags, file.as_raw_fd())
    }

    fn iov(&self) -> [Iovec; 1] {
        [Iovec::from_raw(self.addr, self.len as u64)]
    }

    /// The first `n` bytes as the mapping shows them now.
    fn bytes(&self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n.min(self.len)];
        // SAFETY: the mapping is live and at least v.len() bytes long;
        // volatile, as the driver writes it behind our back.
        for (i, b) in v.iter_mut().enumerate() {
            *b = unsafe { std::ptr::read_volatile((self.addr as *const u8).add(i)) };
        }
        v
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping (see the invariant), unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// A scratch filesystem mounted on a fresh directory, gone on drop.
struct Mount {
    dir: String,
}

impl Mount {
    fn new(fstype: &str, data: Option<&str>) -> TestResult<Self> {
        let dir = format!("/tmp/knem-{fstype}-{}", std::process::id());
        std::fs::create_dir_all(&dir).ctx(&dir)?;
        let (src, d) = (CString::new(fstype).ok(), CString::new(dir.as_str()).ok());
        let data = data.and_then(|s| CString::new(s).ok());
        let (Some(src), Some(d)) = (src, d) else {
            return Err("NUL in a mount argument".into());
        };
        let data_ptr = data
            .as_ref()
            .map_or(std::ptr::null(), |c| c.as_ptr().cast());
        // SAFETY: NUL-terminated strings that outlive the call.
        let r = unsafe { libc::mount(src.as_ptr(), d.as_ptr(), src.as_ptr(), 0, data_ptr) };
        ensure!(r == 0, "mount -t {fstype} on {dir}: {}", Errno::last());
        Ok(Self { dir })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(d) = CString::new(self.dir.as_str()) {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount2(d.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A new file of `len` bytes of [`SEED_FILE`]'s pattern.
fn pattern_file(path: &str, len: usize) -> TestResult<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .ctx(path)?;
    let bytes: Vec<u8> = (0..len as u64).map(|i| pat(SEED_FILE, i)).collect();
    f.write_all_at(&bytes, 0).ctx("write the file")?;
    Ok(f)
}

/// The file's first `len` bytes, read(2) through the page cache.
fn file_bytes(f: &File, len: usize) -> TestResult<Vec<u8>> {
    let mut v = vec![0u8; len];
    f.read_exact_at(&mut v, 0).ctx("read the file back")?;
    Ok(v)
}

fn create(dev: &Device, iov: &[Iovec], prot: Protection) -> knem::Result<Cookie> {
    // SAFETY: mappings of this test, alive until the region is destroyed;
    // only the bytes the checks read back are written.
    unsafe { dev.create_region_raw(iov, prot, RegionFlags::NONE) }
}

/// On a filesystem that tracks writes (`dir` on `what`): every long-term
/// write pin of a shared mapping is EFAULT, nothing stays pinned, and
/// everything else still works.
fn refused_on(what: &str, dir: &str) -> TestResult {
    let owner = Device::open().ctx("open")?;
    let peer = Device::open().ctx("open second fd")?;
    let path = format!("{dir}/knem-write-pins");
    let f = pattern_file(&path, LEN)?;
    let shared = Map::file(&f, LEN, true)?;
    let base = Snapshot::take()?;

    for prot in [Protection::READ_WRITE, Protection::WRITE] {
        expect_errno(
            &format!("{what}: MAP_SHARED {prot:?} region"),
            create(&owner, &shared.iov(), prot),
            Errno::EFAULT,
        )?;
    }
    // One segment over anonymous memory, then the file: the pin takes the
    // first VMA, then stops at the second.
    let span = Map::new(
        0,
        2 * PAGE + LEN,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
    )?;
    let tail = Map::new(
        span.addr + 2 * PAGE as u64,
        LEN,
        libc::MAP_SHARED | libc::MAP_FIXED,
        f.as_raw_fd(),
    )?;
    expect_errno(
        &format!("{what}: READ_WRITE region over anonymous memory then MAP_SHARED"),
        create(&owner, &span.iov(), Protection::READ_WRITE),
        Errno::EFAULT,
    )?;
    let head = [Iovec::from_raw(span.addr, 2 * PAGE as u64)];
    let c = create(&owner, &head, Protection::READ_WRITE).ctx("anonymous part alone")?;
    owner.destroy_region(c).ctx("destroy")?;
    // Both go before anything else is mapped: span covers tail's range.
    drop(tail);
    drop(span);

    // A PINLOCAL read writes the caller's pages through pins: EFAULT, the
    // file untouched.  A plain inline read writes them as write(2) would.
    let src_mem = Mem::new(FILE_PAGES)?;
    let src_bytes: Vec<u8> = (0..LEN as u64).map(|i| pat(SEED_SRC, i)).collect();
    src_mem.write(0, &src_bytes);
    let src = region_at(
        &owner,
        &src_mem,
        0,
        LEN,
        Protection::READ,
        RegionFlags::NONE,
    )
    .map_err(|e| format!("{what}: source region: {e}"))?;
    for flags in [CopyFlags::PIN_LOCAL, CopyFlags::MEMCPY_THREAD] {
        let req = InlineCopyRequest {
            local: &shared.iov(),
            write: false,
            cookie: src,
            offset: 0,
            length: None,
            flags,
            async_status_index: 0,
        };
        let array = if flags == CopyFlags::MEMCPY_THREAD {
            Some(peer.map_status_array(4).ctx("mmap status array")?)
        } else {
            None
        };
        // SAFETY: the local side is this test's file mapping.
        let r = unsafe { peer.inline_copy(&req) };
        expect_errno(
            &format!("{what}: {flags} inline read into MAP_SHARED"),
            r,
            Errno::EFAULT,
        )?;
        drop(array);
    }
    check_bytes(
        &format!("{what}: file after the refused copies"),
        &file_bytes(&f, LEN)?,
        |i| pat(SEED_FILE, i as u64),
    )?;
    owner.destroy_region(src).ctx("destroy source")?;
    wait_for(&base, &format!("{what}: after the refusals"))?;

    // Read-only pins are fine: the region reads the file's bytes.
    let ro = create(&owner, &shared.iov(), Protection::READ)
        .map_err(|e| format!("{what}: MAP_SHARED READ region: {e}"))?;
    let mut buf = vec![0u8; LEN];
    expect_success(
        &format!("{what}: read of the READ region"),
        peer.read_into(ro, 0, &mut buf, None),
    )?;
    check_bytes(&format!("{what}: READ region"), &buf, |i| {
        pat(SEED_FILE, i as u64)
    })?;
    owner.destroy_region(ro).ctx("destroy")?;

    // A private mapping: the write pin breaks COW into anonymous pages.
    let private = Map::file(&f, LEN, false)?;
    let c = write_through_region(&owner, &peer, &private, &format!("{what}: MAP_PRIVATE"))?;
    check_bytes(
        &format!("{what}: file after a write to its private mapping"),
        &file_bytes(&f, LEN)?,
        |i| pat(SEED_FILE, i as u64),
    )?;
    owner.destroy_region(c).ctx("destroy")?;
    drop(private);

    // Not a pin: write(2)-like, into the page cache.
    let src = region_at(
        &owner,
        &src_mem,
        0,
        LEN,
        Protection::READ,
        RegionFlags::NONE,
    )
    .map_err(|e| format!("{what}: source region again: {e}"))?;
    let req = InlineCopyRequest {
        local: &shared.iov(),
        write: false,
        cookie: src,
        offset: 0,
        length: None,
        flags: CopyFlags::NONE,
        async_status_index: 0,
    };
    // SAFETY: the local side is this test's file mapping.
    expect_success(
        &format!("{what}: plain inline read into MAP_SHARED"),
        unsafe { peer.inline_copy(&req) },
    )?;
    check_bytes(
        &format!("{what}: file after a plain inline read"),
        &file_bytes(&f, LEN)?,
        |i| pat(SEED_SRC, i as u64),
    )?;
    owner.destroy_region(src).ctx("destroy source")?;
    drop(shared);
    drop(f);
    std::fs::remove_file(&path).ctx("remove the file")?;
    wait_for(&base, &format!("{what}: at the end"))
}

/// A READ_WRITE region over `map`, written through by `peer`: the
/// mapping shows the bytes.  Returns the region for the caller's checks.
fn write_through_region(
    owner: &Device,
    peer: &Device,
    map: &Map,
    what: &str,
) -> TestResult<Cookie> {
    let c = create(owner, &map.iov(), Protection::READ_WRITE)
        .map_err(|e| format!("{what} READ_WRITE region: {e}"))?;
    let data: Vec<u8> = (0..LEN as u64).map(|i| pat(SEED_WRITE, i)).collect();
    expect_success(
        &format!("{what}: write into the region"),
        peer.write_from(c, 0, &data, None),
    )?;
    check_bytes(
        &format!("{what}: mapping after the write"),
        &map.bytes(LEN),
        |i| pat(SEED_WRITE, i as u64),
    )?;
    Ok(c)
}

/// A MAP_SHARED mapping of `len` bytes of `f` (on `what`) takes a write
/// pin: a write through the region lands in the file (and in what read(2)
/// returns, where the filesystem has read(2)).
fn allowed_on(what: &str, f: &File, len: usize, readable: bool) -> TestResult {
    let owner = Device::open().ctx("open")?;
    let peer = Device::open().ctx("open second fd")?;
    let shared = Map::file(f, len, true)?;
    let c = write_through_region(&owner, &peer, &shared, &format!("{what}: MAP_SHARED"))?;
    if readable {
        check_bytes(
            &format!("{what}: file after the write"),
            &file_bytes(f, LEN)?,
            |i| pat(SEED_WRITE, i as u64),
        )?;
    }
    owner.destroy_region(c).ctx("destroy")
}

/// Sets /proc/sys/vm/nr_hugepages; the value before.
fn set_hugepages(n: u64) -> TestResult<u64> {
    const P: &str = "/proc/sys/vm/nr_hugepages";
    let old = std::fs::read_to_string(P).ctx(P)?;
    std::fs::write(P, n.to_string()).ctx(P)?;
    old.trim().parse().map_err(|_| format!("{P}: {old:?}"))
}

/// hugetlbfs with one 2 MiB page reserved for the test.
fn allowed_on_hugetlbfs() -> TestResult {
    let old = set_hugepages(1)?;
    let r = hugetlbfs_file();
    set_hugepages(old)?;
    r
}

fn hugetlbfs_file() -> TestResult {
    const HUGE: usize = 2 << 20;
    let got = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").ctx("nr_hugepages")?;
    ensure!(
        got.trim() == "1",
        "nr_hugepages is {}: no 2 MiB page free for hugetlbfs",
        got.trim()
    );
    let m = Mount::new("hugetlbfs", Some("pagesize=2M"))?;
    let path = format!("{}/knem-write-pins", m.dir);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .ctx(&path)?;
    f.set_len(HUGE as u64).ctx("ftruncate")?;
    let r = allowed_on("hugetlbfs", &f, HUGE, false);
    drop(f);
    let _ = std::fs::remove_file(&path);
    r
}

/// Why a test's ext4 half did not run: the run did not ask for the disk.
const NO_EXT4: &str = "no ext4 in this guest (tests/vm/run --scratch-ext4 attaches one, or fails)";

/// The directory the VM runner mounted ext4 on (`--scratch-ext4`), which
/// must be an ext4 mount; None when the run did not ask for one.
fn scratch_ext4() -> TestResult<Option<String>> {
    let v = std::env::var("KNEM_SCRATCH_EXT4").unwrap_or_default();
    if v.is_empty() {
        return Ok(None);
    }
    let mounts = std::fs::read_to_string("/proc/mounts").ctx("/proc/mounts")?;
    ensure!(
        mounts.lines().any(|l| {
            let mut w = l.split_whitespace().skip(1);
            w.next() == Some(v.as_str()) && w.next() == Some("ext4")
        }),
        "KNEM_SCRATCH_EXT4={v} is not an ext4 mount"
    );
    Ok(Some(v))
}

/// Long-term write pins of MAP_SHARED file mappings whose filesystem
/// writes pages back (ext4 from the runner) or wants to hear of writes
/// (ramfs): EFAULT for regions, for a span that reaches one, and for
/// inline reads that pin the caller's side, with nothing left pinned;
/// read-only regions and private mappings of the same file work.  tmpfs,
/// memfd and hugetlbfs shared mappings still take write pins.
/// Without ext4 the other filesystems are still checked, then the test
/// reports itself skipped: half of it did not run.
pub fn file_backed_write_pins_refused() -> TestResult {
    let ext4 = scratch_ext4()?;
    if let Some(dir) = &ext4 {
        refused_on("ext4", dir)?;
    }
    let ramfs = Mount::new("ramfs", None)?;
    refused_on("ramfs", &ramfs.dir)?;
    drop(ramfs);

    let tmpfs = Mount::new("tmpfs", None)?;
    let path = format!("{}/knem-write-pins", tmpfs.dir);
    let f = pattern_file(&path, LEN)?;
    allowed_on("tmpfs", &f, LEN, true)?;
    drop(f);
    drop(tmpfs);

    let name = CString::new("knem-write-pins").map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated name; the new fd is owned by `memfd`.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    ensure!(fd >= 0, "memfd_create: {}", Errno::last());
    // SAFETY: fd is ours alone, from the call above.
    let memfd = unsafe { File::from_raw_fd(fd) };
    memfd.set_len(LEN as u64).ctx("ftruncate memfd")?;
    allowed_on("memfd", &memfd, LEN, true)?;
    drop(memfd);

    allowed_on_hugetlbfs()?;
    match ext4 {
        Some(_) => Ok(()),
        None => Err(skip(format!(
            "ramfs, tmpfs, memfd and hugetlbfs passed, ext4: {NO_EXT4}"
        ))),
    }
}

/// How long, and how many declarations at most, a race below runs for.
const RACE_TIME: std::time::Duration = std::time::Duration::from_secs(2);
const RACE_ROUNDS: u32 = 50_000;

/// Maps one page at `addr` over whatever is there: `fd`'s first page
/// shared, or fresh anonymous memory when `fd` is None.
fn remap_page(addr: u64, fd: Option<libc::c_int>) -> TestResult {
    let (flags, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED | libc::MAP_FIXED, fd),
        None => (
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
        ),
    };
    let at = mmap_rw(addr, PAGE, flags, fd)?;
    ensure!(at == addr, "mmap MAP_FIXED at {addr:#x} gave {at:#x}");
    Ok(())
}

/// One page of address space that another thread keeps switching between
/// anonymous memory and a shared mapping of a file on `what`, while this
/// one declares READ_WRITE regions over it: every declaration must pin
/// anonymous memory or fail with EFAULT.  A region that pinned the file's
/// page shows as the file changing when the peer writes through it.
fn race_on(what: &str, dir: &str) -> TestResult {
    use std::sync::atomic::{AtomicBool, Ordering};
    let owner = Device::open().ctx("open")?;
    let peer = Device::open().ctx("open second fd")?;
    let path = format!("{dir}/knem-pin-race");
    let f = pattern_file(&path, PAGE)?;
    let fd = f.as_raw_fd();
    let slot = Map::new(0, PAGE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
    let addr = slot.addr;
    let base = Snapshot::take()?;
    let marker: Vec<u8> = (0..PAGE as u64).map(|i| pat(SEED_WRITE, i)).collect();
    let stop = AtomicBool::new(false);
    let (mut pinned, mut refused, mut rounds) = (0u32, 0u32, 0u32);

    let outcome = std::thread::scope(|s| -> TestResult<u64> {
        let racer = s.spawn(|| -> TestResult<u64> {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                remap_page(addr, Some(fd))?;
                remap_page(addr, None)?;
                swaps += 1;
            }
            Ok(swaps)
        });
        let t0 = std::time::Instant::now();
        let declared = (|| -> TestResult {
            while rounds < RACE_ROUNDS && t0.elapsed() < RACE_TIME {
                rounds += 1;
                let iov = [Iovec::from_raw(addr, PAGE as u64)];
                let c = match create(&owner, &iov, Protection::READ_WRITE) {
                    Ok(c) => c,
                    Err(e) if e.errno() == Some(Errno::EFAULT) => {
                        refused += 1;
                        continue;
                    }
                    Err(e) => return Err(format!("{what}: region {rounds}: {e}")),
                };
                pinned += 1;
                let wrote = peer.write_from(c, 0, &marker, None);
                owner.destroy_region(c).ctx("destroy")?;
                expect_success(&format!("{what}: write through region {rounds}"), wrote)?;
                check_bytes(
                    &format!("{what}: region {rounds} (over anonymous memory when checked) write-pinned the file's page: a write through it changed the file ({pinned} pinned, {refused} EFAULT before)"),
                    &file_bytes(&f, PAGE)?,
                    |i| pat(SEED_FILE, i as u64),
                )?;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        let swaps = racer.join().map_err(|_| "racer thread panicked")??;
        declared.map(|()| swaps)
    });
    let swaps = outcome?;
    drop(slot);
    drop(f);
    std::fs::remove_file(&path).ctx("remove the file")?;
    println!(
        "note file_write_pin_races_mmap: {what}: {rounds} regions declared during {swaps} file/anonymous swaps: {pinned} pinned anonymous memory, {refused} EFAULT"
    );
    // Both answers seen: the file really was mapped under some of the
    // declarations, and anonymous memory under others.
    ensure!(
        pinned > 0 && refused > 0,
        "{what}: the race never showed both mappings ({pinned} pinned, {refused} EFAULT in {rounds} rounds, {swaps} swaps)"
    );
    wait_for(&base, &format!("{what}: after the race"))
}

/// Item 5's rule holds against a racing mmap(): a thread of the caller
/// that maps a file over the range while a write pin is checked and taken
/// never gets the file's page write-pinned (before 6.5 the check and the
/// pin were two steps of mmap_lock, and GUP did not look).
pub fn file_write_pin_races_mmap() -> TestResult {
    let ramfs = Mount::new("ramfs", None)?;
    race_on("ramfs", &ramfs.dir)?;
    drop(ramfs);
    match scratch_ext4()? {
        Some(dir) => race_on("ext4", &dir),
        None => Err(skip(format!("ramfs half passed, ext4 half: {NO_EXT4}"))),
    }
}
