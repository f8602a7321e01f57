//! Running accepted copies: page to page by the CPU ([`copy`]), queued on
//! the offload thread ([`offload`]), or by the DMA engine ([`dma`]), all
//! over the requests of [`request`].

pub mod copy;
pub mod dma;
pub mod offload;
pub mod request;
