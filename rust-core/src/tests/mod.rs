//! End-to-end tests: ioctls through the device on the mock kernel, each
//! file one area, all on the wrappers of [`helpers`].

mod consume_race;
mod copy_path;
mod dma;
mod harden;
mod helpers;
mod layers;
mod offload;
mod offload_bound;
mod sync;
mod table_holds;
mod tenants;
