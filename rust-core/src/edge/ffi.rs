//! The `knem_core_*` exports of `c-shim/knem_core.h`.  Errors become
//! negative errno values here and nowhere else.

use crate::edge::kalloc::KBox;
use crate::edge::shim::{KernelEnv, RcuHead, ShimCtx};
use crate::state::account::{Account, MAX_LEVELS};
use crate::state::context::Context;
use crate::state::device::Device;
use crate::state::region;
use core::ffi::{c_int, c_long, c_uint, c_void};

// `knem_core_abi`: "knem_core.h sha256 <hex>", the header this object was
// built from (build.rs); c-shim/Kbuild checks it against its own copy.
#[allow(non_upper_case_globals)]
mod abi_marker {
    include!(concat!(env!("OUT_DIR"), "/knem_core_abi.rs"));
}

/// The device of the loaded module.
static DEVICE: Device<KernelEnv> = Device::new(KernelEnv);

/// Module load: 0 or -ENOMEM.
#[no_mangle]
pub extern "C" fn knem_core_init() -> c_int {
    match DEVICE.init() {
        Ok(()) => 0,
        Err(e) => e.to_neg() as c_int,
    }
}

/// Module unload.
#[no_mangle]
pub extern "C" fn knem_core_exit() {
    DEVICE.exit();
}

/// A context for an O_RDWR open, charged to the `levels` keys at
/// `account`; NULL on allocation failure or a chain out of range.  `shim`
/// is passed back to the `knem_shim_ctx_*` functions.
///
/// # Safety
/// `account` points to `levels` readable u64s (or `levels` is 0).
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_new(
    uid: u32,
    account: *const u64,
    levels: u32,
    shim: *mut c_void,
) -> *mut Context {
    if account.is_null() || levels as usize > MAX_LEVELS {
        return core::ptr::null_mut();
    }
    // SAFETY: levels readable u64s at account (caller's contract), at most
    // MAX_LEVELS of them.
    let chain = unsafe { core::slice::from_raw_parts(account, levels as usize) };
    let Some(account) = Account::from_chain(chain) else {
        return core::ptr::null_mut();
    };
    match DEVICE.ctx_new_in(uid, account, ShimCtx(shim)) {
        Ok(ctx) => KBox::into_raw(ctx),
        Err(_) => core::ptr::null_mut(),
    }
}

/// File release: destroys the context's regions and frees it.
///
/// # Safety
/// `ctx` must come from `knem_core_ctx_new` and not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_release(ctx: *mut Context) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: the shim gives back the pointer of knem_core_ctx_new, once.
    DEVICE.ctx_release(unsafe { KBox::from_raw(ctx) });
}

/// mmap() of the status array: 0, -EBUSY or -EINVAL (`knem_core.h`);
/// `shared` is non-zero for a MAP_SHARED mapping.
///
/// # Safety
/// `ctx` must be live.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_status_mmap_check(
    ctx: *mut Context,
    pgoff: u64,
    len: u64,
    shared: c_int,
) -> c_int {
    // SAFETY: the shim passes a live context.
    let Some(ctx) = (unsafe { ctx.as_ref() }) else {
        return crate::edge::errno::EINVAL.to_neg() as c_int;
    };
    match ctx.status_mmap_check(pgoff, len, shared != 0) {
        Ok(()) => 0,
        Err(e) => e.to_neg() as c_int,
    }
}

/// Records the status array of a context; -EBUSY on a second one.
///
/// # Safety
/// `ctx` must be live; `kaddr` must hold `len` bytes valid until the
/// context is released.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_set_status_array(
    ctx: *mut Context,
    kaddr: *mut c_void,
    len: u64,
) -> c_int {
    // SAFETY: the shim passes a live context.
    let Some(ctx) = (unsafe { ctx.as_ref() }) else {
        return crate::edge::errno::EINVAL.to_neg() as c_int;
    };
    // SAFETY: the shim guarantees the memory's validity (header contract).
    match unsafe { ctx.set_status_array(kaddr.cast(), len) } {
        Ok(()) => 0,
        Err(e) => e.to_neg() as c_int,
    }
}

/// Handles one ioctl from a caller whose real uid is now `caller_uid`:
/// 0 or a negative errno.
///
/// # Safety
/// `ctx` must be live for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ioctl(
    ctx: *mut Context,
    cmd: c_uint,
    arg: u64,
    caller_uid: u32,
) -> c_long {
    // SAFETY: the shim passes a live context (the file is open).
    let Some(ctx) = (unsafe { ctx.as_ref() }) else {
        return crate::edge::errno::EBADF.to_neg() as c_long;
    };
    DEVICE.ioctl_as(ctx, caller_uid, cmd, arg) as c_long
}

/// Offload thread: runs the oldest queued request; 1 if one ran, 0 if the
/// queue was empty.
///
/// # Safety
/// `ctx` must be live; only the context's offload thread calls this.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_run_async(ctx: *mut Context) -> c_int {
    // SAFETY: the shim passes a live context.
    let Some(ctx) = (unsafe { ctx.as_ref() }) else {
        return 0;
    };
    DEVICE.run_async(ctx) as c_int
}

/// Whether a request is queued (lock-free; the thread's sleep test).
///
/// # Safety
/// `ctx` must be live.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_async_queued(ctx: *mut Context) -> c_int {
    // SAFETY: the shim passes a live context.
    unsafe { ctx.as_ref() }.is_some_and(|c| c.has_queued()) as c_int
}

/// Whether a notification waits for read() (lock-free; poll).
///
/// # Safety
/// `ctx` must be live.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_notify_ready(ctx: *mut Context) -> c_int {
    // SAFETY: the shim passes a live context.
    unsafe { ctx.as_ref() }.is_some_and(|c| c.has_ready()) as c_int
}

/// Pops up to `max` completed NOTIFY_FD indices into `out`; returns how
/// many.
///
/// # Safety
/// `ctx` must be live and `out` writable for `max` u32s.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ctx_read_notify(
    ctx: *mut Context,
    out: *mut u32,
    max: u32,
) -> u32 {
    // SAFETY: the shim passes a live context.
    let Some(ctx) = (unsafe { ctx.as_ref() }) else {
        return 0;
    };
    if out.is_null() {
        return 0;
    }
    // SAFETY: the shim passes a buffer of max u32s.
    let buf = unsafe { core::slice::from_raw_parts_mut(out, max as usize) };
    DEVICE.read_notify(ctx, buf) as u32
}

/// An ASYNCDMACOMPLETE request's slot was written: gives up its
/// references and pins (process context).
///
/// # Safety
/// `token` is the one the core passed to `knem_shim_dma_finish_async`,
/// released once.
#[no_mangle]
pub unsafe extern "C" fn knem_core_dma_release(token: *mut c_void, ok: c_int) {
    // SAFETY: forwarded contract.
    unsafe { DEVICE.dma_release(token, ok != 0) }
}

/// The most work one hold of the region table's lock did since load or
/// the last reset (slots looked at plus count entries moved); with `reset`
/// non-zero the record starts again.  Test builds expose it.
#[no_mangle]
pub extern "C" fn knem_core_table_hold_work(reset: c_int) -> u64 {
    DEVICE.table.hold_work_max(reset != 0)
}

/// Frees a region after its RCU grace period.
///
/// # Safety
/// `rcu_head` must be a pointer the core passed to `knem_shim_call_rcu`.
#[no_mangle]
pub unsafe extern "C" fn knem_core_rcu_free(rcu_head: *mut c_void) {
    // SAFETY: forwarded contract.
    unsafe { region::rcu_free(rcu_head.cast::<RcuHead>()) }
}

/// Any panic left in the object references an undefined symbol, so
/// `nm -u` (rust-core/check-kobj.sh) reveals it and the module cannot link.
#[cfg(target_os = "none")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    extern "C" {
        fn knem_core_panic_is_linked() -> !;
    }
    // SAFETY: never resolved; the reference itself is the point.
    unsafe { knem_core_panic_is_linked() }
}
