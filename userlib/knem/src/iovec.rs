//! Segment descriptors (`struct knem_cmd_param_iovec`).

use knem_abi::knem_cmd_param_iovec;
use std::io::{IoSlice, IoSliceMut};

/// One segment, `{u64 base; u64 len}`, as the driver reads it.
///
/// An `Iovec` is only an address and a length: it borrows nothing.  Safe
/// constructors take a slice; [`Iovec::from_raw`] takes anything, which is
/// what tests need to hand the driver unmapped or bogus ranges.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Iovec(knem_cmd_param_iovec);

// The driver reads arrays of `Iovec` as arrays of the ABI struct.
const _: () = assert!(std::mem::size_of::<Iovec>() == 16);

impl Iovec {
    /// A segment at address `base` of `len` bytes; nothing is checked.
    pub const fn from_raw(base: u64, len: u64) -> Self {
        Self(knem_cmd_param_iovec { base, len })
    }

    /// A segment covering `buf`.
    pub fn from_slice(buf: &[u8]) -> Self {
        Self::from_raw(buf.as_ptr() as u64, buf.len() as u64)
    }

    /// A segment covering `buf`, for regions or copies that write into it.
    pub fn from_mut_slice(buf: &mut [u8]) -> Self {
        Self::from_raw(buf.as_mut_ptr() as u64, buf.len() as u64)
    }

    /// Start address.
    pub const fn base(&self) -> u64 {
        self.0.base
    }

    /// Length in bytes.
    pub const fn len(&self) -> u64 {
        self.0.len
    }

    /// Whether the segment is empty.
    pub const fn is_empty(&self) -> bool {
        self.0.len == 0
    }
}

/// Segments for a list of slices, in order.
pub fn from_slices(bufs: &[&[u8]]) -> Vec<Iovec> {
    bufs.iter().map(|b| Iovec::from_slice(b)).collect()
}

/// Segments for a list of `IoSlice`s, in order.
pub fn from_io_slices(bufs: &[IoSlice<'_>]) -> Vec<Iovec> {
    bufs.iter().map(|b| Iovec::from_slice(b)).collect()
}

/// Segments for a list of `IoSliceMut`s, in order.
pub fn from_io_slices_mut(bufs: &mut [IoSliceMut<'_>]) -> Vec<Iovec> {
    bufs.iter_mut().map(|b| Iovec::from_mut_slice(b)).collect()
}

/// Total length of a list of segments (saturating: the driver clamps).
pub fn total_len(iov: &[Iovec]) -> u64 {
    iov.iter().fold(0u64, |acc, v| acc.saturating_add(v.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_gives_address_and_length() {
        let buf = [0u8; 37];
        let v = Iovec::from_slice(&buf[5..]);
        assert_eq!(v.base(), buf.as_ptr() as u64 + 5);
        assert_eq!(v.len(), 32);
        assert!(!v.is_empty());
    }

    #[test]
    fn io_slices_keep_order_and_lengths() {
        let a = [1u8; 3];
        let b = [2u8; 4096];
        let c: [u8; 0] = [];
        let v = from_io_slices(&[IoSlice::new(&a), IoSlice::new(&b), IoSlice::new(&c)]);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], Iovec::from_raw(a.as_ptr() as u64, 3));
        assert_eq!(v[1], Iovec::from_raw(b.as_ptr() as u64, 4096));
        assert!(v[2].is_empty());
        assert_eq!(total_len(&v), 4099);
        assert_eq!(v, from_slices(&[&a, &b, &c]));
    }

    #[test]
    fn io_slices_mut() {
        let mut a = [0u8; 10];
        let mut b = [0u8; 20];
        let (pa, pb) = (a.as_ptr() as u64, b.as_ptr() as u64);
        let v = from_io_slices_mut(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]);
        assert_eq!(v, [Iovec::from_raw(pa, 10), Iovec::from_raw(pb, 20)]);
    }

    #[test]
    fn layout_is_the_abi_struct() {
        let v = [Iovec::from_raw(0x1122, 0x33), Iovec::from_raw(7, 8)];
        // SAFETY: Iovec is repr(transparent) over two u64s; [Iovec; 2] is
        // 32 bytes of plain integers.
        let words: [u64; 4] = unsafe { std::mem::transmute(v) };
        assert_eq!(words, [0x1122, 0x33, 7, 8]);
        assert_eq!(total_len(&[Iovec::from_raw(0, u64::MAX), v[1]]), u64::MAX);
    }
}
