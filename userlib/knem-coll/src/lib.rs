//! Teams of local processes and contention-aware collectives over the
//! knem module, CMA or shared memory (Contention-Aware Kernel-Assisted MPI Collectives algorithms and cost model,
//! Kernel Assisted Collective Intra-node Communication copy directions).
//!
//! A program started by `knem-run -n N -- prog` calls [`Team::from_env`];
//! with another launcher, one process (the launcher, or rank 0) makes the
//! control block with [`team::create_fresh_block`] and hands its name to
//! the others, then every rank calls [`Team::attach`] with the name and
//! its rank.  Collectives take `Option<Algorithm>`: `None` lets the planner
//! choose from the calibrated model ([`model::Params`]).

//!
//! The measuring tools (`bench`, `check`, `calibrate` and the binaries)
//! need the `tools` feature (default); the C library builds without it.

#![deny(missing_docs)]

#[cfg(feature = "tools")]
pub mod bench;
#[cfg(feature = "tools")]
pub mod calibrate;
#[cfg(feature = "tools")]
pub mod check;
#[cfg(feature = "tools")]
pub mod cli;
mod coll;
mod contention;
mod error;
pub mod launch;
pub mod model;
mod model_file;
pub mod region_cache;
pub mod rules;
pub mod schedule;
pub mod team;
pub mod topo;
pub mod tune;
pub mod units;

pub use error::{Error, Result};
pub use model::{Algorithm, Op, Params};
pub use region_cache::{note_release, CacheStats};
pub use team::Team;
pub use topo::Topology;
