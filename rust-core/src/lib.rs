//! knem-core: the logic of knem-rs, linked into the kernel module as a
//! no_std object (`knem_core.o`) behind the contract of `c-shim/knem_core.h`.
//!
//! Layers, each importing only those before it (`docs/DESIGN.md`):
//!
//! * [`edge`]: the boundary with the shim: its functions behind the
//!   [`edge::shim::Env`] trait, the allocator, user memory, errno values,
//!   and the `knem_core_*` exports.
//! * [`plan`]: pure: validated segment lists and the copy planners.
//! * [`state`]: what lives between calls: regions, the cookie table,
//!   contexts, counters, the device.
//! * [`exec`]: running copies: CPU, offload thread, DMA engine.
//! * [`ioctl`]: the commands.
//!
//! Host builds (tests, feature `mock`) add [`testing`]: the mock kernel
//! and the fuzz targets' bodies.
#![cfg_attr(not(any(test, feature = "mock")), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

pub mod edge;
pub mod exec;
pub mod ioctl;
pub mod plan;
pub mod state;

#[cfg(any(test, feature = "mock"))]
pub mod testing;
#[cfg(test)]
mod tests;
