//! The legacy commands of ABI 0x0d, kept for older MPICH.

use crate::ensure;
use crate::util::*;
use knem::abi::{self, cmd};
use knem::{Cookie, Device, Errno};

const SEED_SRC: u8 = 0x6e;
const SENTINEL: u8 = 0xcd;

/// The legacy commands older MPICH uses: INIT_SEND declares a read-only
/// single-use region, SYNC_RECV reads it at offset 0.
pub fn init_send_sync_recv() -> TestResult {
    let sender = Device::open().ctx("open")?;
    let receiver = Device::open().ctx("open second fd")?;
    let mem = Mem::new(REGION3.pages)?;
    REGION3.fill_with(&mem, |i| pat(SEED_SRC, i));
    let iov = REGION3.iovecs(&mem);
    let init_send = |flags: u32| -> Result<u64, Errno> {
        let mut a = abi::knem_cmd_init_send_param {
            send_iovec_array: iov.as_ptr() as u64,
            send_iovec_nr: iov.len() as u32,
            flags,
            send_cookie: 0,
        };
        // SAFETY: the struct of the command over our mapping, read-only.
        unsafe {
            sender.raw_ioctl(
                cmd::INIT_SEND,
                (&mut a as *mut abi::knem_cmd_init_send_param).cast(),
            )
        }
        .map(|_| a.send_cookie)
    };
    let cookie = init_send(0).map_err(|e| format!("INIT_SEND: {e:?}"))?;
    ensure!(cookie != 0, "INIT_SEND returned cookie 0");
    // Bits outside the create mask are dropped, as KNEM does.
    let extra = init_send(1 << 8).map_err(|e| format!("INIT_SEND with flag bit 8: {e:?}"))?;
    sender
        .destroy_region(Cookie::from_raw(extra))
        .ctx("DESTROY_REGION of an INIT_SEND region")?;
    // Read-only: a write is refused and does not consume it.
    expect_errno(
        "INLINE_COPY write into an INIT_SEND region",
        receiver.write_from(Cookie::from_raw(cookie), 0, &[1], None),
        Errno::EACCES,
    )?;
    let dst = Mem::new(LOCAL2_BIG.pages)?;
    dst.fill(SENTINEL);
    let local = LOCAL2_BIG.iovecs(&dst);
    let sync_recv = || -> Result<u32, Errno> {
        let mut a = abi::knem_cmd_sync_recv_param {
            recv_iovec_array: local.as_ptr() as u64,
            recv_iovec_nr: local.len() as u32,
            status: 0xdead,
            send_cookie: cookie,
            flags: 0,
            pad: 0xbeef,
        };
        // SAFETY: the struct of the command; the local segments are ours.
        unsafe {
            receiver.raw_ioctl(
                cmd::SYNC_RECV,
                (&mut a as *mut abi::knem_cmd_sync_recv_param).cast(),
            )
        }
        .map(|_| a.status)
    };
    let st = sync_recv().map_err(|e| format!("SYNC_RECV: {e:?}"))?;
    ensure!(
        st == abi::status::SUCCESS as u32,
        "SYNC_RECV status {st}, expected SUCCESS"
    );
    LOCAL2_BIG
        .verify(
            &dst.snapshot(),
            |_| SENTINEL,
            0,
            REGION3.total(),
            |k| pat(SEED_SRC, k),
        )
        .map_err(|e| format!("SYNC_RECV data: {e}"))?;
    expect_raw_errno("second SYNC_RECV", sync_recv().map(|_| 0), Errno::EINVAL)?;
    expect_errno(
        "DESTROY of a consumed INIT_SEND region",
        sender.destroy_region(Cookie::from_raw(cookie)),
        Errno::EINVAL,
    )
}
