//! Shared-memory double copy: an exposure is a segment in /dev/shm that
//! mirrors the buffer; the owner copies in ([`Exposure::publish`]) and out
//! ([`Exposure::collect`]), peers copy from and to the segment with
//! pread/pwrite, so every byte is copied twice, as in the classic
//! shared-buffer scheme.  Large copies go in chunks so owner and peers
//! pipeline through the page cache instead of one giant copy.

use crate::{total, Descriptor, Error, Exposure, Holder, Kind, Result, Transport};
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, IoSliceMut};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes per pipelined step.
const CHUNK: usize = 256 << 10;

static NEXT_SEGMENT: AtomicU64 = AtomicU64::new(1);

fn seg_dir() -> PathBuf {
    std::env::var_os("KNEM_RS_SHM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
}

fn seg_path(pid: u32, id: u64) -> PathBuf {
    seg_dir().join(format!("knem-rs-seg-{pid}-{id}"))
}

/// The shared-memory transport.
#[derive(Debug)]
pub struct Shm {
    _private: (),
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
        Ok(Shm { _private: () })
    }
}

/// An owned segment, unlinked on drop.
#[derive(Debug)]
pub(crate) struct Segment {
    file: File,
    path: PathBuf,
}

impl Segment {
    fn err(&self, source: std::io::Error) -> Error {
        Error::Segment {
            path: self.path.display().to_string(),
            source,
        }
    }

    pub(crate) fn publish(&self, offset: usize, src: &[u8]) -> Result<()> {
        for (i, c) in src.chunks(CHUNK).enumerate() {
            self.file
                .write_all_at(c, (offset + i * CHUNK) as u64)
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    pub(crate) fn collect(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        for (i, c) in dst.chunks_mut(CHUNK).enumerate() {
            self.file
                .read_exact_at(c, (offset + i * CHUNK) as u64)
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn open_remote(d: &Descriptor, write: bool) -> Result<(File, PathBuf)> {
    d.expect(Kind::Shm)?;
    let path = seg_path(d.pid, d.id);
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .open(&path)
        .map_err(|source| Error::Segment {
            path: path.display().to_string(),
            source,
        })?;
    Ok((file, path))
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
            .map_err(|source| Error::Segment {
                path: path.display().to_string(),
                source,
            })?;
        let seg = Segment { file, path };
        seg.file.set_len(len as u64).map_err(|e| seg.err(e))?;
        if publish && len > 0 {
            // SAFETY: the caller guarantees ptr..ptr+len is valid.
            seg.publish(0, unsafe { std::slice::from_raw_parts(ptr, len) })?;
        }
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
        let (file, path) = open_remote(d, false)?;
        let mut done = 0usize;
        for buf in bufs.iter_mut() {
            let n = buf.len().min(want - done);
            for (i, c) in buf[..n].chunks_mut(CHUNK).enumerate() {
                file.read_exact_at(c, offset + (done + i * CHUNK) as u64)
                    .map_err(|source| Error::Segment {
                        path: path.display().to_string(),
                        source,
                    })?;
            }
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
        let (file, path) = open_remote(d, true)?;
        let mut done = 0usize;
        for buf in bufs {
            let n = buf.len().min(want - done);
            for (i, c) in buf[..n].chunks(CHUNK).enumerate() {
                file.write_all_at(c, offset + (done + i * CHUNK) as u64)
                    .map_err(|source| Error::Segment {
                        path: path.display().to_string(),
                        source,
                    })?;
            }
            done += n;
            if done == want {
                break;
            }
        }
        Ok(done)
    }
}
