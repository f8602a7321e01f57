//! Shared-memory double copy: an exposure is a segment in /dev/shm that
//! mirrors the buffer; the owner copies in ([`Exposure::publish`]) and out
//! ([`Exposure::collect`]), peers copy from and to the segment with
//! pread/pwrite, so every byte is copied twice, as in the classic
//! shared-buffer scheme.
//!
//! The two copies are pipelined chunk by chunk.  The segment starts with a
//! header page(s) holding one sequence flag per [`SHM_CHUNK`]-byte chunk of
//! the mirror.  An exposure created with `publish` of more than
//! [`PIPELINE_MIN`] bytes returns (and its descriptor can travel) before its
//! content is in the segment: a copy-in thread of the owner fills chunk
//! after chunk and marks each one ready (release store), while peers wait
//! for the flag of a chunk (acquire load) just before they copy it out.  So
//! the owner's copy of chunk i+1 overlaps the readers' copy of chunk i.
//! The mirror is a full image of the buffer, not a ring of slots, because
//! the transport offers random access at any offset, by any number of
//! readers and writers, for the life of the exposure; a ring would force
//! every reader through every slot in order.
//!
//! Pipelining is on when the process may use at least [`PIPELINE_CPUS`]
//! CPUs, or as `KNEM_RS_SHM_PIPELINE=1|0` says; without it the owner copies
//! the whole buffer in before the exposure exists (flags all ready).
//!
//! Peers also wait for the flags before writing a chunk, so a write never
//! races the copy-in.  The owner's own [`Exposure::publish`] and
//! [`Exposure::collect`] first wait for the copy-in to finish; until then
//! (or until the exposure is dropped) the owner must not write the buffer
//! (see [`crate::Transport::expose_raw`]).

use crate::{total, Descriptor, Error, Exposure, Holder, Kind, Result, Transport};
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes per pipelined chunk (one sequence flag each).
pub const SHM_CHUNK: usize = 64 << 10;
/// Exposures published with at least this many bytes are copied in by a
/// helper thread, chunk by chunk, while peers already read; smaller ones
/// are copied before `expose_raw` returns.
pub const PIPELINE_MIN: usize = 2 * SHM_CHUNK;

/// `KNEM_RS_SHM_PIPELINE=1|0` forces the pipelined copy-in on or off.
pub const ENV_PIPELINE: &str = "KNEM_RS_SHM_PIPELINE";
/// Without `KNEM_RS_SHM_PIPELINE`, the copy-in is pipelined when the
/// process may run on at least this many CPUs.  The overlap needs a CPU
/// for the owner's helper thread while readers copy; on 2 CPUs shared by
/// 4 ranks (measured: 8 MiB scatter 5.0-7.1 ms pipelined vs 3.6-4.1 ms
/// not) there is none, and the waiting only adds cost.
pub const PIPELINE_CPUS: usize = 4;

const MAGIC: u64 = 0x6b6e_656d_7273_6d32; // "knemrsm2"
/// Header words before the flags: magic, length, chunk size.
const HDR_FIXED: usize = 3;
const PENDING: u64 = 0;
const READY: u64 = 1;
const FAILED: u64 = 2;
/// How long a peer waits for a chunk before giving up (the owner died).
const WAIT_LIMIT: Duration = Duration::from_secs(120);

static NEXT_SEGMENT: AtomicU64 = AtomicU64::new(1);

fn seg_dir() -> PathBuf {
    std::env::var_os("KNEM_RS_SHM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

fn seg_path(pid: u32, id: u64) -> PathBuf {
    seg_dir().join(format!("knem-rs-seg-{pid}-{id}"))
}

fn chunks_of(len: usize) -> usize {
    len.div_ceil(SHM_CHUNK)
}

/// Header bytes (a whole number of pages) before the mirror of the buffer.
fn header_len(len: usize) -> usize {
    ((HDR_FIXED + chunks_of(len)) * 8).div_ceil(4096) * 4096
}

fn seg_err(path: &Path, source: std::io::Error) -> Error {
    Error::Segment {
        path: path.display().to_string(),
        source,
    }
}

/// The header of a segment, mapped shared.
#[derive(Debug)]
struct Header {
    base: *mut AtomicU64,
    bytes: usize,
    chunks: usize,
}

// SAFETY: the mapping is shared memory accessed only through atomics.
unsafe impl Send for Header {}
// SAFETY: as above.
unsafe impl Sync for Header {}

impl Header {
    fn map(file: &File, len: usize, path: &Path) -> Result<Header> {
        let bytes = header_len(len);
        // SAFETY: a fresh shared mapping of the file's first `bytes` bytes,
        // which exist (the file is at least that long); unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(seg_err(path, std::io::Error::last_os_error()));
        }
        Ok(Header {
            base: p.cast(),
            bytes,
            chunks: chunks_of(len),
        })
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < HDR_FIXED + self.chunks);
        // SAFETY: inside the mapping (asserted), 8-byte aligned (page base),
        // and the mapping lives as long as `self`.
        unsafe { &*self.base.add(i) }
    }

    fn flag(&self, chunk: usize) -> &AtomicU64 {
        self.word(HDR_FIXED + chunk)
    }

    fn set_all(&self, v: u64) {
        for c in 0..self.chunks {
            self.flag(c).store(v, Ordering::Release);
        }
    }

    /// Wait until chunk `c` is copied in by the owner.
    fn wait(&self, c: usize, owner: u32, path: &Path) -> Result<()> {
        let f = self.flag(c);
        let mut spins = 0u32;
        let mut start: Option<Instant> = None;
        loop {
            match f.load(Ordering::Acquire) {
                READY => return Ok(()),
                FAILED => {
                    return Err(seg_err(
                        path,
                        std::io::Error::other("the owner failed to fill the segment"),
                    ))
                }
                PENDING => {}
                _ => {
                    return Err(seg_err(
                        path,
                        std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk flag"),
                    ))
                }
            }
            spins += 1;
            if spins < 128 {
                std::hint::spin_loop();
                continue;
            }
            // Ranks may outnumber cores: let the owner's copy-in run.
            std::thread::yield_now();
            if spins % 1024 == 0 {
                let t0 = *start.get_or_insert_with(Instant::now);
                // SAFETY: signal 0 only checks that the process exists.
                let alive = unsafe { libc::kill(owner as libc::pid_t, 0) } == 0
                    || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
                if !alive || t0.elapsed() > WAIT_LIMIT {
                    return Err(seg_err(
                        path,
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "waiting for the owner to copy a chunk in",
                        ),
                    ));
                }
                if spins > 1 << 16 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }

    fn check(&self, path: &Path, len: usize) -> Result<()> {
        if self.word(0).load(Ordering::Acquire) != MAGIC
            || self.word(1).load(Ordering::Relaxed) != len as u64
            || self.word(2).load(Ordering::Relaxed) != SHM_CHUNK as u64
        {
            return Err(seg_err(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not a knem-rs segment of this version",
                ),
            ));
        }
        Ok(())
    }
}

impl Drop for Header {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

/// The source of the copy-in thread.
struct SendPtr(*const u8, usize);
// SAFETY: the exposure's buffer stays valid and untouched by the owner
// until the thread is joined (contract of expose_raw, joined in drop).
unsafe impl Send for SendPtr {}

/// The shared-memory transport.
#[derive(Debug)]
pub struct Shm {
    /// Copy in with a helper thread while peers read.  Off: the whole
    /// buffer is copied in before `expose_raw` returns.
    pipeline: bool,
}

impl Shm {
    /// Check that segments can be created.
    pub fn open() -> Result<Shm> {
        let dir = seg_dir();
        if !dir.is_dir() {
            return Err(Error::Segment {
                path: dir.display().to_string(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        let pipeline = match std::env::var(ENV_PIPELINE).as_deref().map(str::trim) {
            Ok("0") => false,
            Ok("1") => true,
            _ => std::thread::available_parallelism().map_or(1, |n| n.get()) >= PIPELINE_CPUS,
        };
        Ok(Shm { pipeline })
    }

    /// [`Shm::open`] with the pipelined copy-in on or off, whatever the
    /// environment and the host.
    pub fn with_pipeline(on: bool) -> Result<Shm> {
        let mut s = Shm::open()?;
        s.pipeline = on;
        Ok(s)
    }

    /// Whether exposures are copied in while peers read.
    pub fn pipelined(&self) -> bool {
        self.pipeline
    }
}

/// An owned segment, unlinked on drop.
#[derive(Debug)]
pub(crate) struct Segment {
    file: File,
    path: PathBuf,
    data: u64,
    // Keeps the flags mapped while the copy-in thread runs.
    _hdr: std::sync::Arc<Header>,
    copy_in: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl Segment {
    fn err(&self, source: std::io::Error) -> Error {
        seg_err(&self.path, source)
    }

    /// Wait for the pipelined copy-in, if one is running.
    fn settle(&self) -> Result<()> {
        let h = self
            .copy_in
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match h {
            Some(h) => h.join().unwrap_or_else(|_| {
                Err(self.err(std::io::Error::other("copy-in thread panicked")))
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn publish(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.settle()?;
        for (i, c) in src.chunks(SHM_CHUNK).enumerate() {
            self.file
                .write_all_at(c, self.data + (offset + i * SHM_CHUNK) as u64)
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    pub(crate) fn collect(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.settle()?;
        for (i, c) in dst.chunks_mut(SHM_CHUNK).enumerate() {
            self.file
                .read_exact_at(c, self.data + (offset + i * SHM_CHUNK) as u64)
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = self.settle();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Copy `src` into the segment chunk by chunk, marking each one ready.
fn copy_in(file: &File, data: u64, hdr: &Header, src: &[u8]) -> Result<()> {
    for (i, c) in src.chunks(SHM_CHUNK).enumerate() {
        if let Err(e) = file.write_all_at(c, data + (i * SHM_CHUNK) as u64) {
            for j in i..hdr.chunks {
                hdr.flag(j).store(FAILED, Ordering::Release);
            }
            return Err(Error::Segment {
                path: String::from("copy-in"),
                source: e,
            });
        }
        hdr.flag(i).store(READY, Ordering::Release);
    }
    Ok(())
}

/// A peer's view of a segment.
struct Remote {
    file: File,
    path: PathBuf,
    hdr: Header,
    data: u64,
    owner: u32,
}

impl Remote {
    fn open(d: &Descriptor) -> Result<Remote> {
        d.expect(Kind::Shm)?;
        let path = seg_path(d.pid, d.id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| seg_err(&path, source))?;
        let len = usize::try_from(d.len).map_err(|_| Error::BadDescriptor("length"))?;
        let hdr = Header::map(&file, len, &path)?;
        hdr.check(&path, len)?;
        Ok(Remote {
            file,
            path,
            data: header_len(len) as u64,
            hdr,
            owner: d.pid,
        })
    }

    /// Call `f(segment offset, piece)` for each chunk-aligned piece of
    /// `offset..offset+len`, after the owner copied that chunk in.
    fn pieces(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(u64, usize, usize) -> std::io::Result<()>,
    ) -> Result<()> {
        let mut done = 0usize;
        while done < len {
            let at = offset as usize + done;
            let c = at / SHM_CHUNK;
            let n = ((c + 1) * SHM_CHUNK - at).min(len - done);
            self.hdr.wait(c, self.owner, &self.path)?;
            f(self.data + at as u64, done, n).map_err(|e| seg_err(&self.path, e))?;
            done += n;
        }
        Ok(())
    }
}

impl Transport for Shm {
    fn kind(&self) -> Kind {
        Kind::Shm
    }

    unsafe fn expose_raw(&self, ptr: *mut u8, len: usize, publish: bool) -> Result<Exposure> {
        let pid = std::process::id();
        let id = NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed);
        let path = seg_path(pid, id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| seg_err(&path, source))?;
        let data = header_len(len);
        // Remove the file if anything below fails.
        struct Unlink(Option<PathBuf>);
        impl Drop for Unlink {
            fn drop(&mut self) {
                if let Some(p) = &self.0 {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        let mut guard = Unlink(Some(path.clone()));
        file.set_len((data + len) as u64)
            .map_err(|e| seg_err(&path, e))?;
        let hdr = std::sync::Arc::new(Header::map(&file, len, &path)?);
        hdr.word(1).store(len as u64, Ordering::Relaxed);
        hdr.word(2).store(SHM_CHUNK as u64, Ordering::Relaxed);
        let mut handle = None;
        if publish && self.pipeline && len >= PIPELINE_MIN {
            // Flags stay PENDING; the copy-in thread fills chunk by chunk.
            let f2 = file.try_clone().map_err(|e| seg_err(&path, e))?;
            let h2 = std::sync::Arc::clone(&hdr);
            let src = SendPtr(ptr, len);
            let off = data as u64;
            handle = Some(
                std::thread::Builder::new()
                    .name("knem-rs-shm-copy-in".into())
                    .spawn(move || {
                        let src = src;
                        // SAFETY: valid and unchanged until this thread is
                        // joined (Segment::settle / drop).
                        let s = unsafe { std::slice::from_raw_parts(src.0, src.1) };
                        copy_in(&f2, off, &h2, s)
                    })
                    .map_err(|e| seg_err(&path, e))?,
            );
        } else {
            if publish && len > 0 {
                // SAFETY: the caller guarantees ptr..ptr+len is valid.
                let s = unsafe { std::slice::from_raw_parts(ptr, len) };
                copy_in(&file, data as u64, &hdr, s)?;
            }
            hdr.set_all(READY);
        }
        // Peers check the magic last: everything above is visible then.
        hdr.word(0).store(MAGIC, Ordering::Release);
        guard.0 = None;
        let seg = Segment {
            file,
            path,
            data: data as u64,
            _hdr: hdr,
            copy_in: Mutex::new(handle),
        };
        Ok(Exposure {
            desc: Descriptor {
                kind: Kind::Shm as u32,
                pid,
                addr: 0,
                len: len as u64,
                id,
            },
            ptr,
            len,
            holder: Holder::Shm(seg),
        })
    }

    fn read_vectored(
        &self,
        d: &Descriptor,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<usize> {
        let want = d.clamp(offset, total(bufs.iter().map(|b| b.len())));
        if want == 0 {
            d.expect(Kind::Shm)?;
            return Ok(0);
        }
        let r = Remote::open(d)?;
        let mut done = 0usize;
        for buf in bufs.iter_mut() {
            let n = buf.len().min(want - done);
            let b = &mut buf[..n];
            r.pieces(offset + done as u64, n, |at, from, len| {
                r.file.read_exact_at(&mut b[from..from + len], at)
            })?;
            done += n;
            if done == want {
                break;
            }
        }
        Ok(done)
    }

    fn write_vectored(&self, d: &Descriptor, offset: u64, bufs: &[IoSlice<'_>]) -> Result<usize> {
        let want = d.clamp(offset, total(bufs.iter().map(|b| b.len())));
        if want == 0 {
            d.expect(Kind::Shm)?;
            return Ok(0);
        }
        let r = Remote::open(d)?;
        let mut done = 0usize;
        for buf in bufs {
            let n = buf.len().min(want - done);
            let b = &buf[..n];
            r.pieces(offset + done as u64, n, |at, from, len| {
                r.file.write_all_at(&b[from..from + len], at)
            })?;
            done += n;
            if done == want {
                break;
            }
        }
        Ok(done)
    }
}
