//! Cross-memory attach: the descriptor names pid, address and length, and
//! every transfer is one process_vm_readv/writev per local buffer.

use crate::{total, Descriptor, Error, Exposure, Holder, Kind, Result, Transport};
use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{IoSlice, IoSliceMut};

/// The CMA transport.
#[derive(Debug)]
pub struct Cma {
    _private: (),
}

impl Cma {
    /// Check that CMA works at all here (not compiled out, not filtered by
    /// seccomp) by reading one byte of our own memory.
    pub fn open() -> Result<Cma> {
        let src = [0x5au8];
        let mut dst = [0u8];
        let remote = [RemoteIoVec {
            base: src.as_ptr() as usize,
            len: 1,
        }];
        process_vm_readv(
            nix::unistd::getpid(),
            &mut [IoSliceMut::new(&mut dst)],
            &remote,
        )
        .map_err(|errno| map_errno("process_vm_readv", std::process::id(), errno))?;
        if let Ok(scope) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
            if scope.trim().parse::<u32>().unwrap_or(0) >= 2 {
                return Err(Error::CmaDenied {
                    call: "yama ptrace_scope",
                    pid: std::process::id(),
                    errno: Errno::EPERM,
                });
            }
        }
        Ok(Cma { _private: () })
    }
}

fn map_errno(call: &'static str, pid: u32, errno: Errno) -> Error {
    match errno {
        Errno::EPERM | Errno::EACCES => Error::CmaDenied { call, pid, errno },
        _ => Error::Sys { call, errno },
    }
}

/// Fills `buf` from address `addr` of process `pid`, completing short
/// transfers (a signal can cut one short); nothing moved is EFAULT.
fn read_into(pid: Pid, buf: &mut [u8], addr: u64) -> Result<()> {
    let mut at = 0usize;
    while at < buf.len() {
        let remote = [RemoteIoVec {
            base: addr as usize + at,
            len: buf.len() - at,
        }];
        let got = process_vm_readv(pid, &mut [IoSliceMut::new(&mut buf[at..])], &remote)
            .map_err(|e| map_errno("process_vm_readv", pid.as_raw() as u32, e))?;
        if got == 0 {
            return Err(Error::Sys {
                call: "process_vm_readv",
                errno: Errno::EFAULT,
            });
        }
        at += got;
    }
    Ok(())
}

/// Writes `buf` to address `addr` of process `pid`, as [`read_into`].
fn write_from(pid: Pid, buf: &[u8], addr: u64) -> Result<()> {
    let mut at = 0usize;
    while at < buf.len() {
        let remote = [RemoteIoVec {
            base: addr as usize + at,
            len: buf.len() - at,
        }];
        let put = process_vm_writev(pid, &[IoSlice::new(&buf[at..])], &remote)
            .map_err(|e| map_errno("process_vm_writev", pid.as_raw() as u32, e))?;
        if put == 0 {
            return Err(Error::Sys {
                call: "process_vm_writev",
                errno: Errno::EFAULT,
            });
        }
        at += put;
    }
    Ok(())
}

/// Copies `len` bytes at address `remote` of process `pid` to `local`: the
/// raw-address entry point, for callers that know the peer's addresses
/// without a descriptor (the benchmarks' shared pools).
///
/// # Safety
/// `local` must be writable for `len` bytes and not otherwise referenced.
pub unsafe fn cma_read_at(pid: u32, local: *mut u8, remote: u64, len: usize) -> Result<()> {
    // SAFETY: forwarded to the caller.
    let buf = unsafe { std::slice::from_raw_parts_mut(local, len) };
    read_into(Pid::from_raw(pid as i32), buf, remote)
}

/// Copies `len` bytes from `local` to address `remote` of process `pid`,
/// as [`cma_read_at`].
///
/// # Safety
/// `local` must be readable for `len` bytes.
pub unsafe fn cma_write_at(pid: u32, local: *const u8, remote: u64, len: usize) -> Result<()> {
    // SAFETY: forwarded to the caller.
    let buf = unsafe { std::slice::from_raw_parts(local, len) };
    write_from(Pid::from_raw(pid as i32), buf, remote)
}

impl Transport for Cma {
    fn kind(&self) -> Kind {
        Kind::Cma
    }

    unsafe fn expose_raw(&self, ptr: *mut u8, len: usize, _publish: bool) -> Result<Exposure> {
        Ok(Exposure {
            desc: Descriptor {
                kind: Kind::Cma as u32,
                pid: std::process::id(),
                addr: ptr as u64,
                len: len as u64,
                id: 0,
            },
            ptr,
            len,
            holder: Holder::Cma,
        })
    }

    fn read_vectored(
        &self,
        d: &Descriptor,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<usize> {
        d.expect(Kind::Cma)?;
        let want = d.clamp(offset, total(bufs.iter().map(|b| b.len())));
        let pid = Pid::from_raw(d.pid as i32);
        let mut done = 0usize;
        for buf in bufs.iter_mut() {
            let n = buf.len().min(want - done);
            read_into(pid, &mut buf[..n], d.addr + offset + done as u64)?;
            done += n;
            if done == want {
                break;
            }
        }
        Ok(done)
    }

    fn write_vectored(&self, d: &Descriptor, offset: u64, bufs: &[IoSlice<'_>]) -> Result<usize> {
        d.expect(Kind::Cma)?;
        let want = d.clamp(offset, total(bufs.iter().map(|b| b.len())));
        let pid = Pid::from_raw(d.pid as i32);
        let mut done = 0usize;
        for buf in bufs {
            let n = buf.len().min(want - done);
            write_from(pid, &buf[..n], d.addr + offset + done as u64)?;
            done += n;
            if done == want {
                break;
            }
        }
        Ok(done)
    }

    fn prepare_peer_access(&self) -> Result<()> {
        // Under Yama ptrace_scope=1 only ancestors may attach; team members
        // are siblings, so each one names any process as allowed tracer.
        // EINVAL means Yama is not built in, which is fine.
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        if rc != 0 && Errno::last() != Errno::EINVAL {
            return Err(Error::Sys {
                call: "prctl(PR_SET_PTRACER)",
                errno: Errno::last(),
            });
        }
        Ok(())
    }
}

/// Contention-Aware Kernel-Assisted MPI Collectives Table III probe: `process_vm_readv` with no local buffer and a
/// remote range of `len` bytes, which runs the access check and (for
/// `len > 0`) locks and pins the remote pages without copying anything.
/// Recent kernels return before the access check when no local buffer is
/// given, so it then measures the bare system call only.
pub fn cma_pin_only(pid: u32, addr: u64, len: usize) -> Result<()> {
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    let riovcnt = if len == 0 { 0 } else { 1 };
    // SAFETY: no local iovec is passed, so the kernel writes nothing in
    // this process; the remote iovec is read only for its fields.
    let rc =
        unsafe { libc::process_vm_readv(pid as i32, std::ptr::null(), 0, &remote, riovcnt, 0) };
    if rc < 0 {
        Err(map_errno("process_vm_readv", pid, Errno::last()))
    } else {
        Ok(())
    }
}

/// Lock and pin `pages` remote pages while copying one byte from each:
/// the Table III "Lock+Pin" step on kernels that return early when no
/// local buffer is given (the copy of one byte per page is negligible).
pub fn cma_touch_pages(pid: u32, addr: u64, pages: usize, page: usize) -> Result<()> {
    let mut local = vec![0u8; pages];
    let remote: Vec<RemoteIoVec> = (0..pages)
        .map(|i| RemoteIoVec {
            base: addr as usize + i * page,
            len: 1,
        })
        .collect();
    // The kernel takes at most IOV_MAX remote iovecs per call.
    for (i, chunk) in remote.chunks(1024).enumerate() {
        let at = i * 1024;
        process_vm_readv(
            Pid::from_raw(pid as i32),
            &mut [IoSliceMut::new(&mut local[at..at + chunk.len()])],
            chunk,
        )
        .map_err(|e| map_errno("process_vm_readv", pid, e))?;
    }
    Ok(())
}
