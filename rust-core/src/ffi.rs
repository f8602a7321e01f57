//! The `knem_core_*` exports of `c-shim/knem_core.h`.  Errors become
//! negative errno values here and nowhere else.

use crate::context::Context;
use crate::device::Device;
use crate::env::{KernelEnv, RcuHead};
use crate::kalloc::KBox;
use crate::region;
use crate::stats::KnemCoreStats;
use core::ffi::{c_int, c_long, c_uint, c_void};

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

/// A context for an O_RDWR open; NULL on allocation failure.
#[no_mangle]
pub extern "C" fn knem_core_ctx_new(uid: u32) -> *mut Context {
    match DEVICE.ctx_new(uid) {
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
        return crate::errno::EINVAL.to_neg() as c_int;
    };
    // SAFETY: the shim guarantees the memory's validity (header contract).
    match unsafe { ctx.set_status_array(kaddr.cast(), len) } {
        Ok(()) => 0,
        Err(e) => e.to_neg() as c_int,
    }
}

/// Handles one ioctl: 0 or a negative errno.
///
/// # Safety
/// `ctx` must be live for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn knem_core_ioctl(ctx: *mut Context, cmd: c_uint, arg: u64) -> c_long {
    // SAFETY: the shim passes a live context (the file is open).
    let Some(ctx) = (unsafe { ctx.as_ref() }) else {
        return crate::errno::EBADF.to_neg() as c_long;
    };
    DEVICE.ioctl(ctx, cmd, arg) as c_long
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

/// Fills `*out` with the counters.
///
/// # Safety
/// `out` must be valid for a write of `struct knem_core_stats`.
#[no_mangle]
pub unsafe extern "C" fn knem_core_get_stats(out: *mut KnemCoreStats) {
    if out.is_null() {
        return;
    }
    // SAFETY: the shim passes a writable struct knem_core_stats.
    unsafe { out.write(DEVICE.stats.snapshot()) }
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
