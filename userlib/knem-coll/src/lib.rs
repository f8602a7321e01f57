//! Teams of local processes and contention-aware collectives over the
//! knem module, CMA or shared memory (Contention-Aware Kernel-Assisted MPI Collectives algorithms and cost model,
//! Kernel Assisted Collective Intra-node Communication copy directions).
//!
//! A program started by `knem-run -n N -- prog` calls [`Team::from_env`];
//! one started by another launcher calls [`Team::attach`] with a name and
//! its rank.  Collectives take `Option<Algorithm>`: `None` lets the planner
//! choose from the calibrated model ([`model::Params`]).

#![deny(missing_docs)]

pub mod bench;
pub mod calibrate;
pub mod check;
mod coll;
mod error;
pub mod launch;
pub mod model;
pub mod team;
pub mod topo;

pub use error::{Error, Result};
pub use model::{Algorithm, Op, Params};
pub use team::Team;
pub use topo::Topology;
