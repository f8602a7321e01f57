//! What the core keeps between calls: regions and their pinned pages, the
//! cookie table, per-open contexts and their queues, offload threads and
//! pinned pages per user, the counters, and the device holding them with the context
//! lifecycle.

pub mod account;
pub mod context;
pub mod counts;
pub mod device;
pub mod pins;
pub mod queue;
pub mod region;
pub mod stats;
pub mod table;
pub mod workers;
