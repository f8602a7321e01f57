//! Arguments drawn from the input: where an argument struct sits, cookies,
//! iovec arrays, flags, offsets and indices, each either a value that
//! names something or raw.

use super::model::*;
use super::*;

impl Harness {
    /// The iovecs the kernel reads and validates, or the errnos of why not.
    pub(super) fn local(&self, errs: &mut Errs, arr: u64, nr: u32) -> Option<Vec<Iov>> {
        if nr > MAX_IOVECS {
            errs.add(EINVAL);
            return None;
        }
        let bytes = nr as u64 * 16;
        if !self.space.ok(arr, bytes, false) {
            errs.add(EFAULT);
            return None;
        }
        let raw = if nr == 0 {
            Vec::new()
        } else {
            self.dev.env.peek(arr, bytes as usize)
        };
        let segs: Vec<Iov> = raw
            .chunks(16)
            .map(|c| Iov {
                base: u64::from_le_bytes(c[..8].try_into().unwrap()),
                len: u64::from_le_bytes(c[8..].try_into().unwrap()),
            })
            .collect();
        let mut bad = false;
        if segs.iter().any(|v| v.base.checked_add(v.len).is_none()) {
            errs.add(EFAULT);
            bad = true;
        }
        if segs.iter().map(|v| v.len as u128).sum::<u128>() > u64::MAX as u128 {
            errs.add(EINVAL);
            bad = true;
        }
        (!bad).then_some(segs)
    }

    pub(super) fn place(&self, inp: &mut Input<'_>, size: u64) -> Place {
        let b = inp.u8();
        let off = ((b >> 3) % 8) as u64 * 8;
        match b % 8 {
            0..=4 => Place::Rw(off),
            5 => Place::Ro(off),
            6 => Place::Straddle(1 + (b >> 3) as u64 % (size - 1)),
            _ => {
                let a = inp.u64();
                Place::Nowhere(if self.space.overlaps(a, size) { 0 } else { a })
            }
        }
    }

    /// Writes the argument where `p` says; its user address.
    pub(super) fn put_arg(&self, p: Place, bytes: &[u8]) -> u64 {
        let env = &self.dev.env;
        match p {
            Place::Rw(off) => {
                env.fill(self.arg + off, bytes);
                self.arg + off
            }
            Place::Ro(off) => {
                env.fill(self.arg_ro + off, bytes);
                self.arg_ro + off
            }
            Place::Straddle(k) => {
                let a = self.arg + PAGE_SIZE - k;
                env.fill(a, &bytes[..k as usize]);
                a
            }
            Place::Nowhere(a) => a,
        }
    }

    pub(super) fn cookie(&self, inp: &mut Input<'_>) -> u64 {
        let b = inp.u8();
        let k = (b >> 3) as usize;
        let pick = |v: &[u64]| if v.is_empty() { 0 } else { v[k % v.len()] };
        match b % 8 {
            0..=2 => pick(&self.table.keys().copied().collect::<Vec<_>>()),
            3 => pick(&self.history),
            4 => 0,
            5 => pick(&self.history) ^ (1 << (inp.u8() % 64)),
            6 => u64::MAX,
            _ => inp.u64(),
        }
    }

    /// Writes an iovec array as the input says; (address, iovec_nr).
    pub(super) fn iovecs(&self, inp: &mut Input<'_>) -> (u64, u32) {
        let b = inp.u8();
        let count = (b % 7) as u64;
        let mut segs: Vec<Iov> = Vec::new();
        for _ in 0..count {
            let k = inp.u8();
            let v = match k % 8 {
                0..=2 => {
                    let off = inp.u16() as u64 % DATA_LEN;
                    let len = inp.u16() as u64 % (DATA_LEN - off + 1);
                    Iov {
                        base: self.data + off,
                        len,
                    }
                }
                3 => Iov {
                    base: self.data + inp.u16() as u64 % DATA_LEN,
                    len: inp.u16() as u64,
                },
                4 => {
                    let off = inp.u16() as u64 % RO_LEN;
                    let len = inp.u16() as u64 % (RO_LEN - off + 1);
                    Iov {
                        base: self.ro + off,
                        len,
                    }
                }
                5 => {
                    let p = segs.last().copied().unwrap_or_default();
                    Iov {
                        base: p.base,
                        len: inp.u16() as u64 % p.len.saturating_add(1),
                    }
                }
                6 => Iov {
                    base: inp.u64(),
                    len: 0,
                },
                _ => Iov {
                    base: inp.u64(),
                    len: inp.u64(),
                },
            };
            segs.push(v);
        }
        let n = inp.u8();
        let nr = match n % 8 {
            0..=4 => count as u32,
            5 => count as u32 + 1 + (n >> 3) as u32 % 4,
            6 => inp.u32(),
            _ => MAX_IOVECS + (n >> 3) as u32 % 2,
        };
        let env = &self.dev.env;
        let bytes = bytes_of(&segs);
        let arr = match (b >> 3) % 4 {
            0 => {
                env.fill(self.iov, &[0; PAGE_SIZE as usize]);
                let a = self.iov + PAGE_SIZE - bytes.len() as u64;
                env.fill(a, bytes);
                a
            }
            1 => {
                env.fill(self.iov, &[0; PAGE_SIZE as usize]);
                env.fill(self.iov, bytes);
                self.iov
            }
            2 => self.ro + inp.u16() as u64 % RO_LEN,
            _ => {
                let a = inp.u64();
                if self.space.overlaps(a, 16) {
                    0
                } else {
                    a
                }
            }
        };
        (arr, nr)
    }

    pub(super) fn copy_flags(inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 4 {
            0 => 0,
            1 => (inp.u8() & 0x5f) as u32,
            2 => inp.u8() as u32,
            _ => inp.u32(),
        }
    }

    pub(super) fn index(inp: &mut Input<'_>) -> u32 {
        let b = inp.u8();
        if b % 4 == 3 {
            inp.u32()
        } else {
            (b >> 2) as u32 % 20
        }
    }

    pub(super) fn offset(inp: &mut Input<'_>) -> u64 {
        let b = inp.u8();
        match b % 4 {
            0 => (b >> 2) as u64,
            1 => inp.u16() as u64,
            2 => inp.u64(),
            _ => [
                0,
                1,
                PAGE_SIZE - 1,
                PAGE_SIZE,
                DATA_LEN,
                1 << 63,
                u64::MAX - 1,
                u64::MAX,
            ][(b >> 2) as usize % 8],
        }
    }

    pub(super) fn pad(inp: &mut Input<'_>) -> u32 {
        (inp.u8() as u32).wrapping_mul(0x0101_0101)
    }

    pub(super) fn create_flags(inp: &mut Input<'_>) -> u32 {
        match inp.u8() % 8 {
            2 => KNEM_FLAG_SINGLEUSE,
            3 => KNEM_FLAG_ANY_USER_ACCESS,
            4 => KNEM_FLAG_SINGLEUSE | KNEM_FLAG_ANY_USER_ACCESS,
            5 => inp.u8() as u32,
            6 => inp.u32(),
            _ => 0,
        }
    }

    /// Decodes a copy command's argument from the input and writes it.
    pub(super) fn copy_arg(&self, inp: &mut Input<'_>, kind: Kind, p: Place) -> (CopyArg, u64) {
        let mut a = CopyArg {
            arr: 0,
            nr: 0,
            write: false,
            cookie: 0,
            offset: 0,
            dst_cookie: 0,
            dst_offset: 0,
            bound: None,
            flags: 0,
            index: 0,
            status_at: None,
        };
        let bytes = match kind {
            Kind::Inline { bounded } => {
                (a.arr, a.nr) = self.iovecs(inp);
                let b = inp.u8();
                let write = match b % 4 {
                    0 | 1 => (b % 2) as u32,
                    2 => (b >> 2) as u32,
                    _ => inp.u32(),
                };
                a.write = write != 0;
                a.cookie = self.cookie(inp);
                a.offset = Self::offset(inp);
                if bounded {
                    a.bound = Some(Self::offset(inp));
                }
                a.flags = Self::copy_flags(inp);
                a.index = Self::index(inp);
                let pad = Self::pad(inp);
                if let Some(length) = a.bound {
                    a.status_at =
                        Some(offset_of!(knem_cmd_inline_copy_bounded, current_status) as u64);
                    as_bytes(&knem_cmd_inline_copy_bounded {
                        local_iovec_array: a.arr,
                        local_iovec_nr: a.nr,
                        write,
                        remote_cookie: a.cookie,
                        remote_offset: a.offset,
                        length,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                } else {
                    a.status_at = Some(offset_of!(knem_cmd_inline_copy, current_status) as u64);
                    as_bytes(&knem_cmd_inline_copy {
                        local_iovec_array: a.arr,
                        local_iovec_nr: a.nr,
                        write,
                        remote_cookie: a.cookie,
                        remote_offset: a.offset,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                }
            }
            Kind::SyncRecv | Kind::AsyncRecv => {
                (a.arr, a.nr) = self.iovecs(inp);
                a.cookie = self.cookie(inp);
                a.flags = Self::copy_flags(inp);
                let pad = Self::pad(inp);
                if kind == Kind::SyncRecv {
                    a.status_at = Some(offset_of!(knem_cmd_sync_recv_param, status) as u64);
                    as_bytes(&knem_cmd_sync_recv_param {
                        recv_iovec_array: a.arr,
                        recv_iovec_nr: a.nr,
                        status: OUT_SENTINEL as u32,
                        send_cookie: a.cookie,
                        flags: a.flags,
                        pad,
                    })
                } else {
                    a.index = Self::index(inp);
                    as_bytes(&knem_cmd_init_async_recv_param {
                        recv_iovec_array: a.arr,
                        recv_iovec_nr: a.nr,
                        status_index: a.index,
                        send_cookie: a.cookie,
                        flags: a.flags,
                        pad,
                    })
                }
            }
            Kind::Pair { bounded } => {
                a.cookie = self.cookie(inp);
                a.offset = Self::offset(inp);
                a.dst_cookie = self.cookie(inp);
                a.dst_offset = Self::offset(inp);
                if bounded {
                    a.bound = Some(Self::offset(inp));
                }
                a.flags = Self::copy_flags(inp);
                a.index = Self::index(inp);
                let pad = Self::pad(inp);
                if let Some(length) = a.bound {
                    a.status_at = Some(offset_of!(knem_cmd_copy_bounded, current_status) as u64);
                    as_bytes(&knem_cmd_copy_bounded {
                        src_cookie: a.cookie,
                        src_offset: a.offset,
                        dst_cookie: a.dst_cookie,
                        dst_offset: a.dst_offset,
                        length,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                } else {
                    a.status_at = Some(offset_of!(knem_cmd_copy, current_status) as u64);
                    as_bytes(&knem_cmd_copy {
                        src_cookie: a.cookie,
                        src_offset: a.offset,
                        dst_cookie: a.dst_cookie,
                        dst_offset: a.dst_offset,
                        flags: a.flags,
                        current_status: OUT_SENTINEL as u32,
                        async_status_index: a.index,
                        pad,
                    })
                }
            }
        };
        let arg = self.put_arg(p, &bytes);
        (a, arg)
    }
}
