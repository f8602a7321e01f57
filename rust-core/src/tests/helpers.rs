//! What the end-to-end tests share: a device on the mock kernel, ioctl
//! wrappers that return the written-back status or the errno, and the
//! check that everything returned to baseline.

use crate::edge::errno::*;
use crate::edge::kalloc::KBox;
use crate::state::context::{status, Context};
use crate::state::device::Device;
use crate::testing::mock::MockEnv;
use knem_abi::*;
use std::sync::atomic::Ordering::*;
use std::vec::Vec;

pub(super) type Dev = Device<MockEnv>;

pub(super) const RW: u32 = 3;
pub(super) const R: u32 = 1;
pub(super) const W: u32 = 2;

pub(super) fn dev() -> Box<Dev> {
    Box::new(Device::new(MockEnv::new()))
}

pub(super) fn iovs(list: &[(u64, u64)]) -> Vec<knem_cmd_param_iovec> {
    list.iter()
        .map(|&(base, len)| knem_cmd_param_iovec { base, len })
        .collect()
}

/// Bytes that differ with the seed and do not repeat every 256 bytes.
pub(super) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + i / 251) as u8).wrapping_add(seed))
        .collect()
}

/// CREATE_REGION; Ok(cookie) or Err(negative errno).
pub(super) fn create(
    d: &Dev,
    ctx: &Context,
    segs: &[(u64, u64)],
    prot: u32,
    flags: u32,
) -> Result<u64, i64> {
    let arr = d.env.put_slice(&iovs(segs));
    let arg = d.env.put(&knem_cmd_create_region {
        iovec_array: arr,
        iovec_nr: segs.len() as u32,
        flags,
        protection: prot,
        pad: 0xdead_beef,
        cookie: 0,
    });
    match d.ioctl(ctx, cmd::CREATE_REGION, arg) {
        0 => Ok(d.env.get::<knem_cmd_create_region>(arg).cookie),
        e => Err(e),
    }
}

pub(super) struct Inline {
    pub(super) local: Vec<(u64, u64)>,
    pub(super) write: bool,
    pub(super) cookie: u64,
    pub(super) offset: u64,
    pub(super) bound: Option<u64>,
    pub(super) flags: u32,
    pub(super) index: u32,
}

impl Inline {
    pub(super) fn new(local: &[(u64, u64)], write: bool, cookie: u64) -> Inline {
        Inline {
            local: local.to_vec(),
            write,
            cookie,
            offset: 0,
            bound: None,
            flags: 0,
            index: 0xffff_ffff,
        }
    }
}

/// INLINE_COPY(_BOUNDED); Ok(current_status) or Err(negative errno).
pub(super) fn inline(d: &Dev, ctx: &Context, r: &Inline) -> Result<u32, i64> {
    inline_as(d, ctx, ctx.uid, r)
}

/// INLINE_COPY(_BOUNDED) from a caller whose real uid is now `uid`.
pub(super) fn inline_as(d: &Dev, ctx: &Context, uid: u32, r: &Inline) -> Result<u32, i64> {
    let arr = d.env.put_slice(&iovs(&r.local));
    let (cmdno, arg, off) = match r.bound {
        None => {
            let a = d.env.put(&knem_cmd_inline_copy {
                local_iovec_array: arr,
                local_iovec_nr: r.local.len() as u32,
                write: r.write as u32,
                remote_cookie: r.cookie,
                remote_offset: r.offset,
                flags: r.flags,
                current_status: 0x55,
                async_status_index: r.index,
                pad: 0xdead_beef,
            });
            (
                cmd::INLINE_COPY,
                a,
                std::mem::offset_of!(knem_cmd_inline_copy, current_status),
            )
        }
        Some(length) => {
            let a = d.env.put(&knem_cmd_inline_copy_bounded {
                local_iovec_array: arr,
                local_iovec_nr: r.local.len() as u32,
                write: r.write as u32,
                remote_cookie: r.cookie,
                remote_offset: r.offset,
                length,
                flags: r.flags,
                current_status: 0x55,
                async_status_index: r.index,
                pad: 0xdead_beef,
            });
            (
                cmd::INLINE_COPY_BOUNDED,
                a,
                std::mem::offset_of!(knem_cmd_inline_copy_bounded, current_status),
            )
        }
    };
    match d.ioctl_as(ctx, uid, cmdno, arg) {
        0 => Ok(d.env.get::<u32>(arg + off as u64)),
        e => {
            assert_eq!(
                d.env.get::<u32>(arg + off as u64),
                0x55,
                "status written on error"
            );
            Err(e)
        }
    }
}

/// COPY(_BOUNDED) naming status slot 7; Ok(current_status) or Err(negative
/// errno).
pub(super) fn copy(
    d: &Dev,
    ctx: &Context,
    src: (u64, u64),
    dst: (u64, u64),
    bound: Option<u64>,
    flags: u32,
) -> Result<u32, i64> {
    copy_as(d, ctx, ctx.uid, src, dst, bound, flags)
}

/// COPY(_BOUNDED) from a caller whose real uid is now `uid`.
pub(super) fn copy_as(
    d: &Dev,
    ctx: &Context,
    uid: u32,
    src: (u64, u64),
    dst: (u64, u64),
    bound: Option<u64>,
    flags: u32,
) -> Result<u32, i64> {
    copy_full(d, ctx, uid, src, dst, bound, flags, 7)
}

/// COPY(_BOUNDED) naming status slot `index`; Ok(current_status) or
/// Err(negative errno).
pub(super) fn copy_indexed(
    d: &Dev,
    ctx: &Context,
    src: (u64, u64),
    dst: (u64, u64),
    bound: Option<u64>,
    flags: u32,
    index: u32,
) -> Result<u32, i64> {
    copy_full(d, ctx, ctx.uid, src, dst, bound, flags, index)
}

#[allow(clippy::too_many_arguments)]
fn copy_full(
    d: &Dev,
    ctx: &Context,
    uid: u32,
    src: (u64, u64),
    dst: (u64, u64),
    bound: Option<u64>,
    flags: u32,
    index: u32,
) -> Result<u32, i64> {
    let (cmdno, arg, off) = match bound {
        None => (
            cmd::COPY,
            d.env.put(&knem_cmd_copy {
                src_cookie: src.0,
                src_offset: src.1,
                dst_cookie: dst.0,
                dst_offset: dst.1,
                flags,
                current_status: 0x55,
                async_status_index: index,
                pad: 9,
            }),
            std::mem::offset_of!(knem_cmd_copy, current_status),
        ),
        Some(length) => (
            cmd::COPY_BOUNDED,
            d.env.put(&knem_cmd_copy_bounded {
                src_cookie: src.0,
                src_offset: src.1,
                dst_cookie: dst.0,
                dst_offset: dst.1,
                length,
                flags,
                current_status: 0x55,
                async_status_index: index,
                pad: 9,
            }),
            std::mem::offset_of!(knem_cmd_copy_bounded, current_status),
        ),
    };
    match d.ioctl_as(ctx, uid, cmdno, arg) {
        0 => Ok(d.env.get::<u32>(arg + off as u64)),
        e => Err(e),
    }
}

pub(super) fn destroy(d: &Dev, ctx: &Context, cookie: u64) -> i64 {
    let arg = d.env.put(&cookie);
    d.ioctl(ctx, cmd::DESTROY_REGION, arg)
}

pub(super) const OK: Result<u32, i64> = Ok(status::SUCCESS as u32);
pub(super) const FAILED: Result<u32, i64> = Ok(status::FAILED as u32);

pub(super) fn neg(e: Errno) -> i64 {
    e.to_neg()
}

/// Releases contexts and checks that everything returned to baseline.
pub(super) fn finish(d: &Dev, ctxs: Vec<KBox<Context>>) {
    for c in ctxs {
        d.ctx_release(c);
    }
    let s = d.stats.snapshot();
    assert_eq!((s.contexts, s.regions, s.pinned_pages), (0, 0, 0));
    assert_eq!(s.offload_threads, 0, "offload threads not given back");
    assert_eq!(d.env.pinned(), 0, "pages left pinned");
    assert_eq!(d.env.dma.open.load(SeqCst), 0, "DMA batch left open");
    assert_eq!(d.pins.keys(&d.env), 0, "pinned pages left counted");
    d.exit();
}

pub(super) const PENDING: Result<u32, i64> = Ok(status::PENDING as u32);

/// One iovec.
pub(super) fn iov(base: u64, len: u64) -> knem_cmd_param_iovec {
    knem_cmd_param_iovec { base, len }
}

/// Runs every queued request of `c` on the calling thread; returns how many.
pub(super) fn drain(d: &Dev, c: &Context) -> usize {
    let mut n = 0;
    while d.run_async(c) {
        n += 1;
    }
    n
}

/// Every completed NOTIFY_FD index of `c`, oldest first.
pub(super) fn read_all(d: &Dev, c: &Context) -> Vec<u32> {
    let mut buf = [0u32; 7];
    let mut out = Vec::new();
    loop {
        let n = d.read_notify(c, &mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}
