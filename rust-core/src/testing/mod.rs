//! Host-only scaffolding (tests, feature `mock`; never in the kernel
//! object): a simulated kernel behind the shim trait ([`mock`]) with its
//! DMA engine ([`mock_dma`]), and the bodies of the cargo-fuzz targets
//! ([`fuzz`]), which `cargo test` replays over the checked-in corpus.

pub mod fuzz;
pub mod mock;
pub mod mock_dma;
