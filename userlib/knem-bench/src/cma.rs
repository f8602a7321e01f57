//! Cross Memory Attach: `process_vm_readv` / `process_vm_writev`.

use crate::err;
use crate::error::Result;
use crate::proc;
use nix::unistd::{getppid, Pid};

/// Let any process of ours attach (and so use CMA) to this one, as MPI
/// libraries do for their CMA transports. Without Yama this is a no-op
/// that fails harmlessly.
pub fn allow_peers() {
    // SAFETY: PR_SET_PTRACER takes an integer argument and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// Read `len` bytes at `remote` in `pid` into `local`
/// (`knem_transport::cma_read_at`).
///
/// # Safety
/// `local` must be writable for `len` bytes and not referenced elsewhere.
pub unsafe fn read(pid: Pid, local: *mut u8, remote: usize, len: usize) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { knem_transport::cma_read_at(pid.as_raw() as u32, local, remote as u64, len) }
        .map_err(|e| err!("{e}"))
}

/// Write `len` bytes from `local` to `remote` in `pid`
/// (`knem_transport::cma_write_at`).
///
/// # Safety
/// `local` must be readable for `len` bytes.
pub unsafe fn write(pid: Pid, local: *const u8, remote: usize, len: usize) -> Result<()> {
    // SAFETY: forwarded to the caller.
    unsafe { knem_transport::cma_write_at(pid.as_raw() as u32, local, remote as u64, len) }
        .map_err(|e| err!("{e}"))
}

/// Why CMA cannot be used between a parent and its forked child, if it
/// cannot: a child tries to read 8 bytes of this process.
pub fn unavailable_reason() -> Option<String> {
    allow_peers();
    let probe: [u8; 8] = *b"knemcma!";
    let addr = probe.as_ptr() as usize;
    let child = match proc::spawn_quiet(move || {
        let mut got = [0u8; 8];
        // SAFETY: `got` is a local 8-byte buffer.
        unsafe { read(getppid(), got.as_mut_ptr(), addr, 8) }?;
        if &got != b"knemcma!" {
            return Err(err!("CMA probe read wrong bytes"));
        }
        Ok(())
    }) {
        Ok(c) => c,
        Err(e) => return Some(e.0),
    };
    let r = child.wait();
    std::hint::black_box(&probe);
    r.err().map(|_| {
        "process_vm_readv between parent and child refused (ptrace policy: Yama ptrace_scope, seccomp or LSM)"
            .to_string()
    })
}
