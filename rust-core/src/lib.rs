//! knem-core: the logic of knem-rs, linked into the kernel module as a
//! no_std object (`knem_core.o`) behind the contract of `c-shim/knem_core.h`.
//!
//! Planning is pure ([`layout`], [`plan`]); execution goes through the
//! [`env::Env`] trait, which the kernel build binds to the C shim and the
//! host tests to a mock.
#![cfg_attr(not(any(test, feature = "mock")), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

pub mod context;
pub mod copy;
pub mod device;
pub mod dma;
pub mod env;
pub mod errno;
pub mod ioctl;
pub mod kalloc;
pub mod layout;
pub mod offload;
pub mod plan;
pub mod queue;
pub mod region;
pub mod stats;
pub mod table;
pub mod user;

#[cfg(not(any(test, feature = "mock")))]
pub mod ffi;

#[cfg(any(test, feature = "mock"))]
pub mod harness;
#[cfg(any(test, feature = "mock"))]
pub mod mock;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_async;
#[cfg(test)]
mod tests_dma;
