//! The ioctl decoder: arbitrary command numbers and argument bytes, with
//! pointers and cookies steered towards valid ones often enough to get past
//! the first checks.  Never panics, returns only known errnos, and releasing
//! the contexts brings every counter and pin back to zero.
#![no_main]

use knem_abi::{cmd, knem_cmd_param_iovec};
use knem_core::device::Device;
use knem_core::mock::MockEnv;
use libfuzzer_sys::fuzz_target;

const CMDS: [u32; 11] = [
    cmd::GET_INFO,
    cmd::BIND_OFFLOAD,
    cmd::INIT_SEND,
    cmd::CREATE_REGION,
    cmd::DESTROY_REGION,
    cmd::INIT_ASYNC_RECV,
    cmd::SYNC_RECV,
    cmd::COPY,
    cmd::INLINE_COPY,
    cmd::COPY_BOUNDED,
    cmd::INLINE_COPY_BOUNDED,
];
const ERRNOS: [i64; 7] = [-1, -12, -13, -14, -16, -22, -25];

fuzz_target!(|data: &[u8]| {
    let dev = Box::new(Device::new(MockEnv::new()));
    let ctxs = [dev.ctx_new(1000).unwrap(), dev.ctx_new(2000).unwrap()];
    let buf = dev.env.map(4 * 4096, true);
    let ro = dev.env.map(4096, false);
    let iovs: Vec<knem_cmd_param_iovec> = (0..4)
        .map(|i| knem_cmd_param_iovec {
            base: buf + i * 3000 + 7,
            len: 2000 + i * 1000,
        })
        .collect();
    let iov_arr = dev.env.put_slice(&iovs);
    let mut cookies: Vec<u64> = vec![0];

    for op in data.chunks(66) {
        if op.len() < 2 {
            break;
        }
        let (sel, ctx_sel, raw) = (op[0], op[1], &op[2..]);
        let cmdno = match CMDS.get(sel as usize % 12) {
            Some(&c) => c,
            None => u32::from_le_bytes([raw.first().copied().unwrap_or(0), 0x4b, 0, 0x80]),
        };
        let mut arg = [0u8; 64];
        arg[..raw.len()].copy_from_slice(raw);
        // Steer: every u64 field whose low byte is small names something
        // valid (the iovec array, a live cookie, the read-only page).
        for f in arg.chunks_mut(8) {
            let v = u64::from_le_bytes(f.try_into().unwrap());
            let steered = match v & 0xff {
                0..=15 => iov_arr,
                16..=31 => cookies[(v >> 8) as usize % cookies.len()],
                32..=35 => ro,
                36..=39 => (v >> 8) % 5,
                _ => v,
            };
            f.copy_from_slice(&steered.to_le_bytes());
        }
        let argp = dev.env.put_slice(&arg);
        let ctx = &ctxs[ctx_sel as usize % 2];
        let r = dev.ioctl(ctx, cmdno, argp);
        assert!(r == 0 || ERRNOS.contains(&r), "cmd {cmdno:#x} gave {r}");
        if r == 0 && (cmdno == cmd::CREATE_REGION || cmdno == cmd::INIT_SEND) {
            let off = if cmdno == cmd::CREATE_REGION { 24 } else { 16 };
            let c: u64 = dev.env.get(argp + off);
            assert_ne!(c, 0);
            cookies.push(c);
        }
    }
    for c in ctxs {
        dev.ctx_release(c);
    }
    let s = dev.stats.snapshot();
    assert_eq!((s.contexts, s.regions, s.pinned_pages), (0, 0, 0));
    assert_eq!(dev.env.pinned(), 0);
    dev.exit();
});
