//! The bodies of the cargo-fuzz targets of `rust-core/fuzz`, here so that
//! the host tests can replay the checked-in corpus through the very same
//! code (`harness::corpus`).  Host only: built for tests and with the
//! `mock` feature, never into the kernel object.
//!
//! * [`plan`]: segment-list validation, seek, cursors and both copy
//!   planners, checked against a model that maps every flattened offset to
//!   its user address.
//! * [`ioctl`]: sequences of ioctls (every command, plus undefined ones)
//!   and offload-thread, DMA-engine, release and policy events on the mock
//!   kernel, checked against a reference model of the region table, the
//!   contexts, the pinned pages and the user memory.
//!
//! Both take any byte string; an input that is too short reads as zeros.
//! A failed check panics, which libFuzzer reports as a crash.

pub mod ioctl;
pub mod plan;

#[cfg(test)]
mod corpus;

/// Reads fuzz input front to back; past the end every read gives zeros.
pub(crate) struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        let n = self.data.len().min(N);
        b[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        b
    }

    pub(crate) fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}
