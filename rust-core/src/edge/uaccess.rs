//! Moving ABI structs and iovec arrays across the user boundary.

use crate::edge::errno::{KResult, EFAULT, EINVAL};
use crate::edge::kalloc::KArray;
use crate::edge::shim::Env;
use knem_abi::*;

/// Plain ABI data: any byte pattern is a valid value and there is no
/// padding, so a value can be filled from and written as raw bytes.
///
/// # Safety
/// Implementors must be `repr(C)` without padding and valid for every bit
/// pattern.
pub unsafe trait Pod: Copy + Default {}

// SAFETY: bindgen repr(C) structs of u32/u64 fields whose sizes and offsets
// knem-abi checks at compile time: no padding, every pattern valid.
unsafe impl Pod for knem_cmd_info {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_param_iovec {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_create_region {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_init_send_param {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_sync_recv_param {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_copy {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_copy_bounded {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_inline_copy {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_inline_copy_bounded {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_init_async_recv_param {}
// SAFETY: as above.
unsafe impl Pod for knem_cmd_bind_offload {}
// SAFETY: an integer.
unsafe impl Pod for u64 {}
// SAFETY: an integer.
unsafe impl Pod for u32 {}

/// The bytes of a slice of Pod values.
pub fn bytes_of<T: Pod>(v: &[T]) -> &[u8] {
    // SAFETY: Pod has no padding, so every byte is initialised; the length
    // is the slice's size in bytes.
    unsafe { core::slice::from_raw_parts(v.as_ptr().cast(), core::mem::size_of_val(v)) }
}

/// The bytes of a slice of Pod values, writable.
pub fn bytes_of_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: Pod accepts any byte pattern, so writing bytes keeps every
    // element valid; the length is the slice's size in bytes.
    unsafe { core::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), core::mem::size_of_val(v)) }
}

/// Reads a `T` from user address `uaddr`; EFAULT if unreadable.
pub fn read<T: Pod, E: Env>(env: &E, uaddr: u64) -> KResult<T> {
    let mut v = [T::default()];
    env.copy_from_user(bytes_of_mut(&mut v), uaddr)
        .map_err(|_| EFAULT)?;
    Ok(v[0])
}

/// Writes `v` to user address `uaddr`; EFAULT if unwritable.
pub fn write<T: Pod, E: Env>(env: &E, uaddr: u64, v: T) -> KResult<()> {
    env.copy_to_user(uaddr, bytes_of(&[v])).map_err(|_| EFAULT)
}

/// Most iovecs one request may carry (16 MiB of kernel memory), as
/// `readv` has `UIO_MAXIOV`: without a bound, one ioctl could make the
/// kernel allocate 64 GiB on behalf of any user.
pub const MAX_IOVECS: u32 = 1 << 20;

/// Reads an array of `nr` iovecs; EINVAL past [`MAX_IOVECS`], ENOMEM if the
/// array cannot be allocated, EFAULT if unreadable.
pub fn read_iovecs<E: Env>(env: &E, uaddr: u64, nr: u32) -> KResult<KArray<knem_cmd_param_iovec>> {
    if nr > MAX_IOVECS {
        return Err(EINVAL);
    }
    let mut a = KArray::<knem_cmd_param_iovec>::try_default(nr as usize)?;
    if nr != 0 {
        env.copy_from_user(bytes_of_mut(&mut a), uaddr)
            .map_err(|_| EFAULT)?;
    }
    Ok(a)
}
// SAFETY: an integer.
unsafe impl Pod for u8 {}

/// Reads `out.len()` iovecs into a buffer of the caller's (no
/// allocation); EINVAL past [`MAX_IOVECS`], EFAULT if unreadable.
pub fn read_iovecs_into<E: Env>(
    env: &E,
    uaddr: u64,
    out: &mut [knem_cmd_param_iovec],
) -> KResult<()> {
    if out.len() > MAX_IOVECS as usize {
        return Err(EINVAL);
    }
    if !out.is_empty() {
        env.copy_from_user(bytes_of_mut(out), uaddr)
            .map_err(|_| EFAULT)?;
    }
    Ok(())
}
