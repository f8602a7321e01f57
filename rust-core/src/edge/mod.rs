//! The boundary with the C shim: the `knem_shim_*` functions behind a
//! trait ([`shim`]), memory ([`kalloc`]), user memory ([`uaccess`]),
//! errno values ([`errno`]) and, in the kernel build, the `knem_core_*`
//! exports ([`ffi`]).

pub mod errno;
pub mod kalloc;
pub mod shim;
pub mod uaccess;

#[cfg(not(any(test, feature = "mock")))]
pub mod ffi;
