//! The few /dev/knem operations the benchmarks need, over the `knem` client
//! crate, on raw pool addresses.
//!
//! The benchmarks see only this [`Device`]; the asynchronous mechanism
//! (`knem-async`) waits by polling a one-slot status array, as MPI
//! libraries do.

use crate::err;
use crate::error::Result;
use knem::{Cookie, Iovec, Protection, RegionFlags, Status};

/// An open read-write /dev/knem file (one KNEM context).
pub struct Device {
    dev: knem::Device,
    /// One status slot for `knem-async`, mapped on first use (the first
    /// asynchronous copy then starts the file's offload thread).
    status: std::cell::OnceCell<knem::StatusArray>,
}

/// Why the knem mechanisms cannot run here, as one line.
pub fn unavailable_reason() -> Option<String> {
    Device::open().err().map(|e| e.0)
}

/// The test-only software provider of tests/dma-provider.
const SOFTWARE_PROVIDER: &str = "/sys/module/knem_dma_test";

/// Why `knem-dma` cannot run here (no DMA engine: the copy would be the
/// CPU's), as one line.  When the engine is the test-only software
/// provider, says so on stderr: its numbers are a kthread's memcpy.
pub fn dma_unavailable_reason() -> Option<String> {
    let dev = match knem::Device::open() {
        Ok(d) => d,
        Err(e) => return Some(format!("knem {e}")),
    };
    match dev.info() {
        Ok(i) if i.has_dma() => {
            if std::path::Path::new(SOFTWARE_PROVIDER).exists() {
                eprintln!(
                    "knem-bench: knem-dma measures knem_dma_test, the software DMA provider \
                     of the test VM (a kernel thread's memcpy), not DMA hardware"
                );
            }
            None
        }
        Ok(_) => Some("no DMA engine (GET_INFO: no KNEM_FEATURE_DMA; module parameter dma=1 and a DMA_MEMCPY channel are needed)".into()),
        Err(e) => Some(format!("knem {e}")),
    }
}

fn ok(st: knem::Result<Status>) -> Result<()> {
    match st {
        Ok(Status::Success) => Ok(()),
        Ok(other) => Err(err!("knem copy finished with status {other}")),
        Err(e) => Err(err!("knem {e}")),
    }
}

impl Device {
    /// Open the device and check the ABI version.
    pub fn open() -> Result<Device> {
        let dev = knem::Device::open().map_err(|e| match e.errno() {
            Some(knem::Errno::ENOENT) => {
                err!("no /dev/knem (knem-rs module not loaded)")
            }
            _ => err!("{e}"),
        })?;
        dev.info().map_err(|e| err!("knem {e}"))?;
        Ok(Device {
            dev,
            status: std::cell::OnceCell::new(),
        })
    }

    /// Declare `len` bytes at `ptr` as a readable and writable region.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay mapped until the region is destroyed (or
    /// this device dropped) and may be read and written by other processes
    /// meanwhile: benchmark pools only.
    pub unsafe fn create_region(&self, ptr: *const u8, len: usize) -> Result<u64> {
        // SAFETY: the caller vouches for the range.
        let buf = unsafe { std::slice::from_raw_parts(ptr, len) };
        // SAFETY: as above; the region is destroyed before the pool goes.
        let c = unsafe {
            self.dev.create_region_raw(
                &[Iovec::from_slice(buf)],
                Protection::READ_WRITE,
                RegionFlags::NONE,
            )
        }
        .map_err(|e| err!("knem {e}"))?;
        Ok(c.as_raw())
    }

    /// Destroy a region this context created.
    pub fn destroy_region(&self, cookie: u64) -> Result<()> {
        self.dev
            .destroy_region(Cookie::from_raw(cookie))
            .map_err(|e| err!("knem {e}"))
    }

    /// Synchronous inline copy between `len` local bytes at `local` and the
    /// region `cookie` at `offset`: `write` copies local → region.
    ///
    /// # Safety
    /// `local` must be valid for `len` bytes (written when `!write`) and not
    /// borrowed elsewhere.
    pub unsafe fn inline_copy(
        &self,
        local: *mut u8,
        len: usize,
        write: bool,
        cookie: u64,
        offset: usize,
    ) -> Result<()> {
        let c = Cookie::from_raw(cookie);
        if write {
            // SAFETY: forwarded to the caller.
            let buf = unsafe { std::slice::from_raw_parts(local, len) };
            ok(self.dev.write_from(c, offset as u64, buf, None))
        } else {
            // SAFETY: forwarded to the caller.
            let buf = unsafe { std::slice::from_raw_parts_mut(local, len) };
            ok(self.dev.read_into(c, offset as u64, buf, None))
        }
    }

    /// Synchronous region-to-region copy of `len` bytes through the DMA
    /// engine (`KNEM_FLAG_DMA`).
    pub fn copy_dma(
        &self,
        src: u64,
        src_offset: usize,
        dst: u64,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        ok(self.dev.copy_with(&knem::CopyRequest {
            src: Cookie::from_raw(src),
            src_offset: src_offset as u64,
            dst: Cookie::from_raw(dst),
            dst_offset: dst_offset as u64,
            length: Some(len as u64),
            flags: knem::CopyFlags::DMA,
            async_status_index: 0,
        }))
    }

    /// Region-to-region copy of `len` bytes on the module's offload thread
    /// (`KNEM_FLAG_MEMCPYTHREAD`), waited for by polling its status slot,
    /// as MPI libraries do.
    pub fn copy_async(
        &self,
        src: u64,
        src_offset: usize,
        dst: u64,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        let array = match self.status.get() {
            Some(a) => a,
            None => {
                let a = self.dev.map_status_array(1).map_err(|e| err!("knem {e}"))?;
                self.status.get_or_init(|| a)
            }
        };
        array.reset(0);
        let st = self
            .dev
            .copy_async(
                Cookie::from_raw(src),
                src_offset as u64,
                Cookie::from_raw(dst),
                dst_offset as u64,
                Some(len as u64),
                0,
                knem::CopyFlags::MEMCPY_THREAD,
            )
            .map_err(|e| err!("knem {e}"))?;
        if st != Status::Pending {
            return Err(err!("knem async copy returned {st}, not PENDING"));
        }
        loop {
            match array.get_acquire(0) {
                Some(Status::Pending) => std::thread::yield_now(),
                Some(st) => return ok(Ok(st)),
                None => return Err(err!("knem status array has no slot 0")),
            }
        }
    }

    /// Synchronous region-to-region copy of `len` bytes.
    pub fn copy(
        &self,
        src: u64,
        src_offset: usize,
        dst: u64,
        dst_offset: usize,
        len: usize,
    ) -> Result<()> {
        ok(self.dev.copy(
            Cookie::from_raw(src),
            src_offset as u64,
            Cookie::from_raw(dst),
            dst_offset as u64,
            Some(len as u64),
        ))
    }
}
