//! BIND_OFFLOAD: where the fd's offload thread may run.
//!
//! As in KNEM, binding is only possible before
//! [`Device::map_status_array`]; afterwards the driver answers EBUSY.  (The
//! thread itself starts later, at the fd's first asynchronous copy, inside
//! the submitter's cpuset.)

use crate::device::Device;
use crate::error::Result;
use knem_abi::{self as abi, cmd};

/// A set of CPUs in the kernel's cpumask layout: bit `n % 8` of byte
/// `n / 8` is CPU `n` (little-endian `unsigned long` words).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuMask {
    /// Always a whole number of 64-bit words.
    bytes: Vec<u8>,
}

impl CpuMask {
    /// No CPU.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CPUs listed.
    pub fn from_cpus(cpus: impl IntoIterator<Item = usize>) -> Self {
        let mut m = Self::new();
        for c in cpus {
            m.set(c);
        }
        m
    }

    /// Add CPU `cpu`.
    pub fn set(&mut self, cpu: usize) {
        let byte = cpu / 8;
        if byte >= self.bytes.len() {
            self.bytes.resize((byte / 8 + 1) * 8, 0);
        }
        self.bytes[byte] |= 1 << (cpu % 8);
    }

    /// Whether CPU `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        self.bytes
            .get(cpu / 8)
            .is_some_and(|b| b & (1 << (cpu % 8)) != 0)
    }

    /// The mask as the driver reads it (`mask_ptr`, `mask_len`).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Where the offload thread of a fd runs (`knem_cmd_bind_offload.flags`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindOffload {
    /// `KNEM_BIND_FLAG_CUSTOM`: on these CPUs.
    Custom(CpuMask),
    /// `KNEM_BIND_FLAG_CURRENT`: where the calling thread may run now.
    Current,
    /// `KNEM_BIND_FLAG_CURRENT_REVERSED`: everywhere the calling thread may
    /// not run (off the application's cores).
    CurrentReversed,
}

impl Device {
    /// BIND_OFFLOAD: choose the CPUs of this fd's offload thread.  Only
    /// before the status array is mapped (EBUSY after); an empty or
    /// unusable custom mask is the driver's to refuse (EINVAL).
    pub fn bind_offload(&self, how: &BindOffload) -> Result<()> {
        match how {
            BindOffload::Custom(mask) => {
                let bytes = mask.as_bytes();
                let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                self.bind_offload_raw(abi::KNEM_BIND_FLAG_CUSTOM, len, bytes.as_ptr() as u64)
            }
            BindOffload::Current => self.bind_offload_raw(abi::KNEM_BIND_FLAG_CURRENT, 0, 0),
            BindOffload::CurrentReversed => {
                self.bind_offload_raw(abi::KNEM_BIND_FLAG_CURRENT_REVERSED, 0, 0)
            }
        }
    }

    /// BIND_OFFLOAD with every field as given, e.g. undefined flag bits or
    /// a mask pointer the driver cannot read.  Safe: the driver only reads
    /// `mask_len` bytes at `mask_ptr`, and answers EFAULT where it cannot.
    pub fn bind_offload_raw(&self, flags: u32, mask_len: u32, mask_ptr: u64) -> Result<()> {
        let mut arg = abi::knem_cmd_bind_offload {
            flags,
            mask_len,
            mask_ptr,
        };
        // SAFETY: the argument matches the command; the driver only reads
        // through mask_ptr.
        unsafe { self.ioctl(cmd::BIND_OFFLOAD, &mut arg) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use nix::errno::Errno;
    use nix::fcntl::OFlag;

    #[test]
    fn cpumask_layout_is_the_kernels() {
        let m = CpuMask::from_cpus([0, 9, 63]);
        assert_eq!(m.as_bytes().len(), 8);
        assert_eq!(m.as_bytes()[0], 1);
        assert_eq!(m.as_bytes()[1], 2);
        assert_eq!(m.as_bytes()[7], 0x80);
        assert!(m.contains(9) && !m.contains(8) && !m.contains(1000));
        let m = CpuMask::from_cpus([64]);
        assert_eq!(m.as_bytes().len(), 16);
        assert_eq!(m.as_bytes()[8], 1);
        assert!(CpuMask::new().as_bytes().is_empty());
    }

    #[test]
    fn bind_errors_name_the_command() {
        let dev = Device::open_path("/dev/null", OFlag::O_RDWR).unwrap();
        for how in [
            BindOffload::Current,
            BindOffload::CurrentReversed,
            BindOffload::Custom(CpuMask::from_cpus([0])),
        ] {
            assert_eq!(
                dev.bind_offload(&how).unwrap_err(),
                Error::Ioctl {
                    call: "BIND_OFFLOAD",
                    errno: Errno::ENOTTY
                }
            );
        }
    }
}
