//! End-to-end tests: ioctls through the device on the mock kernel.

use super::helpers::*;
use crate::edge::errno::*;
use crate::ioctl::INLINE_IOVECS;
use crate::state::context::status;
use crate::state::table::{make_cookie, split_cookie};
use knem_abi::*;
use std::sync::atomic::Ordering::*;
use std::vec::Vec;

#[test]
fn get_info_reports_abi_and_ignored_dma() {
    let d = dev();
    let c = d.ctx_new(1000).unwrap();
    let arg = d.env.put(&knem_cmd_info::default());
    assert_eq!(d.ioctl(&c, cmd::GET_INFO, arg), 0);
    let info: knem_cmd_info = d.env.get(arg);
    assert_eq!(
        info,
        knem_cmd_info {
            abi: 0x0d,
            features: 0,
            ignored_flags: KNEM_FLAG_DMA,
            forced_flags: 0
        }
    );
    assert_eq!(d.ioctl(&c, cmd::GET_INFO, 8), neg(EFAULT));
    finish(&d, vec![c]);
}

#[test]
fn unknown_command_is_enotty() {
    let d = dev();
    let c = d.ctx_new(0).unwrap();
    assert_eq!(d.ioctl(&c, 0x1234, 0), neg(ENOTTY));
    // Right nr, wrong size/direction: still unknown.
    assert_eq!(d.ioctl(&c, cmd::COPY ^ (1 << 16), 0), neg(ENOTTY));
    assert_eq!(d.stats.snapshot().err_enotty, 2);
    finish(&d, vec![c]);
}

#[test]
fn inline_copies_both_directions_multi_segment_unaligned() {
    let d = dev();
    let c = d.ctx_new(1000).unwrap();
    let a = d.env.map(3 * 4096, true);
    let b = d.env.map(4096, true);
    let src = pattern(3 * 4096, 7);
    d.env.fill(a, &src);
    // Region: 5000 bytes at a+100, an empty segment, 300 bytes at b+4000
    // (which straddles nothing: b has one page, 96 bytes left) -> use 96.
    let segs = [(a + 100, 5000), (b, 0), (b + 4000, 96)];
    let cookie = create(&d, &c, &segs, RW, 0).unwrap();
    assert_ne!(cookie, 0);
    let region_bytes: Vec<u8> = [d.env.peek(a + 100, 5000), d.env.peek(b + 4000, 96)].concat();

    // Read it all into two local segments.
    let l = d.env.map(8192, true);
    let r = Inline::new(&[(l + 1, 3000), (l + 5000, 3000)], false, cookie);
    assert_eq!(inline(&d, &c, &r), OK);
    assert_eq!(d.env.peek(l + 1, 3000), region_bytes[..3000]);
    assert_eq!(d.env.peek(l + 5000, 2096), region_bytes[3000..]);

    // Write at an offset, bounded.
    let w = d.env.put_slice(&pattern(1000, 99));
    let mut r = Inline::new(&[(w, 1000)], true, cookie);
    r.offset = 4990;
    r.bound = Some(20);
    assert_eq!(inline(&d, &c, &r), OK);
    assert_eq!(d.env.peek(a + 100 + 4990, 10), pattern(1000, 99)[..10]);
    assert_eq!(d.env.peek(b + 4000, 10), pattern(1000, 99)[10..20]);
    assert_eq!(d.env.peek(b + 4010, 1), region_bytes[5010..5011]);

    let s = d.stats.snapshot();
    assert_eq!((s.bytes_inline_read, s.bytes_inline_write), (5096, 20));
    assert_eq!(destroy(&d, &c, cookie), 0);
    assert!(d.env.dirtied() > 0, "a writable region is unpinned dirty");
    finish(&d, vec![c]);
}

#[test]
fn short_copy_and_offset_past_end_are_success() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(100, 1));
    let cookie = create(&d, &c, &[(a, 100)], R, 0).unwrap();
    let l = d.env.map(4096, true);
    let mut r = Inline::new(&[(l, 4096)], false, cookie);
    r.offset = 60;
    assert_eq!(inline(&d, &c, &r), OK);
    assert_eq!(d.env.peek(l, 40), pattern(100, 1)[60..]);
    r.offset = 100;
    assert_eq!(inline(&d, &c, &r), OK);
    r.offset = u64::MAX;
    assert_eq!(inline(&d, &c, &r), OK);
    assert_eq!(d.stats.snapshot().bytes_inline_read, 40);
    finish(&d, vec![c]);
}

#[test]
fn short_pins_are_completed_by_asking_again() {
    // The shim pins one VMA (and one batch) per call; a region spanning
    // several must still be pinned whole, not refused.
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(5 * 4096, true);
    let data = pattern(5 * 4096 - 100, 7);
    d.env.fill(a + 50, &data);
    d.env.set_pin_max(Some(2));
    let cookie = create(&d, &c, &[(a + 50, data.len() as u64)], R, 0).unwrap();
    d.env.set_pin_max(None);
    assert_eq!(d.env.pinned(), 5);
    let l = d.env.map(data.len() as u64, true);
    let r = Inline::new(&[(l, data.len() as u64)], false, cookie);
    assert_eq!(inline(&d, &c, &r), OK);
    assert_eq!(d.env.peek(l, data.len()), data);
    finish(&d, vec![c]);
}

#[test]
fn ucx_probe_one_byte_region_and_empty_region() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let cookie = create(&d, &c, &[(a + 4095, 1)], RW, 0).unwrap();
    assert_eq!(destroy(&d, &c, cookie), 0);
    let empty = create(&d, &c, &[], RW, 0).unwrap();
    let r = Inline::new(&[(a, 10)], false, empty);
    assert_eq!(inline(&d, &c, &r), OK);
    finish(&d, vec![c]);
}

#[test]
fn create_errors() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(8192, true);
    let ro = d.env.map(4096, false);
    assert_eq!(create(&d, &c, &[(a, 10)], 4, 0), Err(neg(EINVAL)));
    // Region range that cannot be pinned.
    assert_eq!(
        create(&d, &c, &[(a, 10), (0x10, 10)], RW, 0),
        Err(neg(EFAULT))
    );
    assert_eq!(
        create(&d, &c, &[(a, 3 * 4096)], RW, 0),
        Err(neg(EFAULT)),
        "runs into the guard page"
    );
    assert_eq!(
        create(&d, &c, &[(ro, 10)], RW, 0),
        Err(neg(EFAULT)),
        "write pin of read-only memory"
    );
    assert!(create(&d, &c, &[(ro, 10)], R, 0).is_ok());
    assert_eq!(create(&d, &c, &[(u64::MAX - 1, 4)], R, 0), Err(neg(EFAULT)));
    // Partial pin: unpins what was pinned.
    d.env.set_pin_budget(Some(1));
    assert_eq!(create(&d, &c, &[(a, 8192)], RW, 0), Err(neg(EFAULT)));
    d.env.set_pin_budget(None);
    assert_eq!(d.env.pinned(), 1, "only the read-only region stays pinned");
    // Unreadable iovec array / argument.
    let arg = d.env.put(&knem_cmd_create_region {
        iovec_array: 0x20,
        iovec_nr: 1,
        protection: RW,
        ..Default::default()
    });
    assert_eq!(d.ioctl(&c, cmd::CREATE_REGION, arg), neg(EFAULT));
    assert_eq!(d.ioctl(&c, cmd::CREATE_REGION, 0x30), neg(EFAULT));
    // Cookie write-back fails: the region is undone.
    let arr = d.env.put_slice(&iovs(&[(a, 10)]));
    let arg = d.env.map(4096, false);
    d.env.fill(
        arg,
        crate::edge::uaccess::bytes_of(&[knem_cmd_create_region {
            iovec_array: arr,
            iovec_nr: 1,
            protection: RW,
            ..Default::default()
        }]),
    );
    let before = d.stats.snapshot().regions;
    assert_eq!(d.ioctl(&c, cmd::CREATE_REGION, arg), neg(EFAULT));
    assert_eq!(d.stats.snapshot().regions, before);
    assert_eq!(d.env.pinned(), 1);
    let s = d.stats.snapshot();
    assert_eq!((s.err_einval, s.err_efault), (1, 8));
    finish(&d, vec![c]);
}

#[test]
fn access_checks_in_order() {
    let d = dev();
    let owner = d.ctx_new(1000).unwrap();
    let other = d.ctx_new(2000).unwrap();
    let a = d.env.map(4096, true);
    let l = d.env.map(4096, true);
    let ro = create(&d, &owner, &[(a, 100)], R, 0).unwrap();
    let wo = create(&d, &owner, &[(a, 100)], W, 0).unwrap();
    let none = create(&d, &owner, &[(a, 100)], 0, 0).unwrap();
    let shared = create(&d, &owner, &[(a, 100)], R, KNEM_FLAG_ANY_USER_ACCESS).unwrap();

    let (idx, tag) = split_cookie(ro).unwrap();
    let bad_tag = make_cookie(idx, tag ^ 1);
    for bad in [0u64, bad_tag, make_cookie(0xffff, tag), u64::MAX] {
        assert_eq!(
            inline(&d, &owner, &Inline::new(&[(l, 10)], false, bad)),
            Err(neg(EINVAL))
        );
    }
    // EINVAL before EPERM before EACCES before EFAULT.
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(l, 10)], false, bad_tag)),
        Err(neg(EINVAL))
    );
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(0x10, 10)], true, ro)),
        Err(neg(EPERM))
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(0x10, 10)], true, ro)),
        Err(neg(EACCES))
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 10)], false, wo)),
        Err(neg(EACCES))
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 10)], false, none)),
        Err(neg(EACCES))
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 10)], true, none)),
        Err(neg(EACCES))
    );
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(l, 10)], false, shared)),
        OK
    );
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(l, 10)], true, shared)),
        Err(neg(EACCES))
    );
    assert_eq!(inline(&d, &owner, &Inline::new(&[(l, 10)], true, wo)), OK);
    // Unreadable local iovec array.
    let arg = d.env.put(&knem_cmd_inline_copy {
        local_iovec_array: 0x40,
        local_iovec_nr: 1,
        remote_cookie: ro,
        ..Default::default()
    });
    assert_eq!(d.ioctl(&owner, cmd::INLINE_COPY, arg), neg(EFAULT));
    // Data fault: 0 and FAILED.
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 10), (0x50, 10)], false, ro)),
        FAILED
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(0x50, 10)], true, wo)),
        FAILED
    );
    let ro_local = d.env.map(4096, false);
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(ro_local, 10)], false, ro)),
        FAILED
    );
    let s = d.stats.snapshot();
    assert_eq!(
        (
            s.err_einval,
            s.err_eperm,
            s.err_eacces,
            s.err_efault,
            s.copies_failed
        ),
        (5, 1, 5, 1, 3)
    );
    finish(&d, vec![owner, other]);
}

#[test]
fn copy_flags() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let l = d.env.map(4096, true);
    let cookie = create(&d, &c, &[(a, 100)], RW, 0).unwrap();
    let with = |flags: u32, index: u32| {
        let mut r = Inline::new(&[(l, 10)], false, cookie);
        r.flags = flags;
        r.index = index;
        inline(&d, &c, &r)
    };
    // Thread flags need a status array.
    for f in [
        KNEM_FLAG_MEMCPYTHREAD,
        KNEM_FLAG_DMATHREAD,
        KNEM_FLAG_NOTIFY_FD,
    ] {
        assert_eq!(with(f, 0), Err(neg(EINVAL)), "flag {f:#x}");
    }
    // DMA without an engine is ignored; PINLOCAL is accepted.
    assert_eq!(with(KNEM_FLAG_DMA, 0), OK);
    assert_eq!(with(KNEM_FLAG_PINLOCAL | KNEM_FLAG_DMA, 12345), OK);
    // ASYNCDMACOMPLETE needs a status array and an index inside it.
    assert_eq!(with(KNEM_FLAG_ASYNCDMACOMPLETE, 0), Err(neg(EINVAL)));
    let mut slots = vec![0u8; 16];
    // SAFETY: slots outlives the context (released in finish below).
    unsafe { c.set_status_array(slots.as_mut_ptr(), 16).unwrap() };
    assert_eq!(with(KNEM_FLAG_ASYNCDMACOMPLETE, 16), Err(neg(EINVAL)));
    // A synchronous copy never writes the status array.
    assert_eq!(with(0, 3), OK);
    assert_eq!(with(KNEM_FLAG_DMA, 4), OK);
    assert_eq!(slots, vec![0u8; 16]);
    assert_eq!(with(KNEM_FLAG_ASYNCDMACOMPLETE | KNEM_FLAG_DMA, 5), OK);
    let mut want = vec![0u8; 16];
    want[5] = status::SUCCESS;
    assert_eq!(slots, want);
    // A failing ASYNCDMACOMPLETE copy reports FAILED in both.
    let mut r = Inline::new(&[(0x60, 10)], false, cookie);
    r.flags = KNEM_FLAG_ASYNCDMACOMPLETE;
    r.index = 15;
    assert_eq!(inline(&d, &c, &r), FAILED);
    assert_eq!(slots[15], status::FAILED);
    finish(&d, vec![c]);
    drop(slots);
}

/// KNEM's access rule is evaluated at each call with the caller's real uid
/// now: a process that opened as root and then setuid()s loses root's
/// private regions, its own context's included; EPERM still comes before
/// EACCES and a refused copy consumes nothing.
#[test]
fn access_uses_the_callers_uid_at_each_call() {
    const NOBODY: u32 = 65534;
    let d = dev();
    let root = d.ctx_new(0).unwrap();
    let a = d.env.put_slice(&pattern(4096, 3));
    let l = d.env.map(4096, true);
    let ro = create(&d, &root, &[(a, 100)], R, 0).unwrap();
    let rw = create(&d, &root, &[(a + 200, 100)], RW, 0).unwrap();
    let once = create(&d, &root, &[(a, 100)], R, KNEM_FLAG_SINGLEUSE).unwrap();
    let shared = create(&d, &root, &[(a, 100)], R, KNEM_FLAG_ANY_USER_ACCESS).unwrap();
    let read_as = |uid, cookie| inline_as(&d, &root, uid, &Inline::new(&[(l, 10)], false, cookie));
    let write_as = |uid, cookie| inline_as(&d, &root, uid, &Inline::new(&[(l, 10)], true, cookie));

    // After setuid(nobody): EPERM, through the very fd that created them.
    assert_eq!(read_as(NOBODY, ro), Err(neg(EPERM)));
    assert_eq!(write_as(NOBODY, rw), Err(neg(EPERM)));
    // EPERM before EACCES (ro is not writable), EINVAL before both.
    assert_eq!(write_as(NOBODY, ro), Err(neg(EPERM)));
    assert_eq!(write_as(0, ro), Err(neg(EACCES)));
    assert_eq!(read_as(NOBODY, ro ^ (1 << 40)), Err(neg(EINVAL)));
    assert_eq!(
        copy_as(&d, &root, NOBODY, (ro, 0), (rw, 0), None, 0),
        Err(neg(EPERM))
    );
    assert_eq!(
        copy_as(&d, &root, NOBODY, (shared, 0), (rw, 0), None, 0),
        Err(neg(EPERM)),
        "the destination is checked too"
    );
    // A refused copy does not consume a single-use region.
    assert_eq!(read_as(NOBODY, once), Err(neg(EPERM)));
    assert_eq!(read_as(0, once), OK);
    assert_eq!(d.env.peek(l, 10), pattern(4096, 3)[..10]);
    assert_eq!(read_as(0, once), Err(neg(EINVAL)));
    // ANY_USER_ACCESS admits anyone; the uid at open does not matter.
    assert_eq!(read_as(NOBODY, shared), OK);
    let other = d.ctx_new(NOBODY).unwrap();
    assert_eq!(
        inline_as(&d, &other, 0, &Inline::new(&[(l, 10)], false, ro)),
        OK,
        "opened as nobody, now root"
    );
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(l, 10)], false, ro)),
        Err(neg(EPERM))
    );
    // Under the ptrace policy the creating context (its own process)
    // keeps access whatever its uid; others follow the ptrace answer.
    d.env.ptrace_policy.store(true, SeqCst);
    d.env.ptrace_denied.store(true, SeqCst);
    assert_eq!(read_as(NOBODY, ro), OK);
    assert_eq!(
        inline_as(&d, &other, 0, &Inline::new(&[(l, 10)], false, ro)),
        Err(neg(EPERM))
    );
    let s = d.stats.snapshot();
    assert_eq!((s.err_eperm, s.err_eacces, s.err_einval), (8, 1, 2));
    finish(&d, vec![root, other]);
}

/// Flag bits outside a command's mask are dropped, as KNEM does: a copy
/// with SINGLEUSE, ANY_USER_ACCESS or undefined bits proceeds as if they
/// were clear; CREATE_REGION keeps only SINGLEUSE and ANY_USER_ACCESS.
#[test]
fn flags_outside_the_mask_are_dropped() {
    let d = dev();
    let c = d.ctx_new(1000).unwrap();
    let other = d.ctx_new(2000).unwrap();
    let a = d.env.put_slice(&pattern(4096, 9));
    let b = d.env.map(4096, true);
    let l = d.env.map(4096, true);
    let src = create(&d, &c, &[(a, 4096)], R, 0).unwrap();
    let dst = create(&d, &c, &[(b, 4096)], W, 0).unwrap();
    let masked = [
        1 << 8,
        1 << 31,
        KNEM_FLAG_SINGLEUSE,
        KNEM_FLAG_ANY_USER_ACCESS,
        !KNEM_FLAG_ANY_COPY_MASK,
        KNEM_FLAG_SINGLEUSE | KNEM_FLAG_PINLOCAL | KNEM_FLAG_DMA,
    ];
    for (i, &f) in masked.iter().enumerate() {
        let mut r = Inline::new(&[(l, 100)], false, src);
        r.offset = i as u64 * 100;
        r.flags = f;
        assert_eq!(inline(&d, &c, &r), OK, "inline flags {f:#x}");
        assert_eq!(
            d.env.peek(l, 100),
            pattern(4096, 9)[i * 100..(i + 1) * 100],
            "inline flags {f:#x}"
        );
        assert_eq!(
            copy(&d, &c, (src, 0), (dst, i as u64 * 10), Some(10), f),
            OK,
            "copy flags {f:#x}"
        );
    }
    // Nothing was single-use: both regions are still there.
    assert_eq!(d.env.peek(b, 60), pattern(4096, 9)[..10].repeat(6));
    // Every copy flag plus SINGLEUSE (63): a thread copy like 31.
    let mut slots = vec![0u8; 4];
    // SAFETY: slots outlives the context (released in finish below).
    unsafe { c.set_status_array(slots.as_mut_ptr(), 4).unwrap() };
    let mut r = Inline::new(&[(l, 4096)], false, src);
    r.flags = 63;
    r.index = 2;
    assert_eq!(inline(&d, &c, &r), Ok(status::PENDING as u32));
    assert!(d.run_async(&c));
    assert_eq!(slots[2], status::SUCCESS);
    assert_eq!(d.env.peek(l, 4096), pattern(4096, 9));
    // CREATE_REGION with every bit: single-use and open to every uid.
    let any = create(&d, &c, &[(a, 64)], R, u32::MAX).unwrap();
    let r = Inline::new(&[(l, 64)], false, any);
    assert_eq!(inline(&d, &other, &r), OK);
    assert_eq!(inline(&d, &other, &r), Err(neg(EINVAL)));
    assert_eq!(d.stats.snapshot().err_einval, 1);
    finish(&d, vec![c, other]);
    drop(slots);
}

#[test]
fn status_written_only_in_current_status() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let cookie = create(&d, &c, &[(a, 100)], RW, 0).unwrap();
    let arr = d.env.put_slice(&iovs(&[(a + 200, 50)]));
    let before = knem_cmd_inline_copy_bounded {
        local_iovec_array: arr,
        local_iovec_nr: 1,
        write: 0,
        remote_cookie: cookie,
        remote_offset: 0,
        length: 10,
        flags: 0,
        current_status: 77,
        async_status_index: 0xabcd,
        pad: 0x1234,
    };
    let arg = d.env.put(&before);
    assert_eq!(d.ioctl(&c, cmd::INLINE_COPY_BOUNDED, arg), 0);
    let after: knem_cmd_inline_copy_bounded = d.env.get(arg);
    assert_eq!(
        after,
        knem_cmd_inline_copy_bounded {
            current_status: 1,
            ..before
        }
    );
    finish(&d, vec![c]);
}

#[test]
fn single_use_is_consumed_once_and_failed_checks_do_not_consume() {
    let d = dev();
    let owner = d.ctx_new(1).unwrap();
    let other = d.ctx_new(2).unwrap();
    let a = d.env.put_slice(&pattern(64, 3));
    let l = d.env.map(4096, true);
    let cookie = create(&d, &owner, &[(a, 64)], R, KNEM_FLAG_SINGLEUSE).unwrap();
    assert_eq!(
        inline(&d, &other, &Inline::new(&[(l, 64)], false, cookie)),
        Err(neg(EPERM))
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 64)], true, cookie)),
        Err(neg(EACCES))
    );
    let bad_local = d.env.put(&knem_cmd_inline_copy {
        local_iovec_array: 0x70,
        local_iovec_nr: 1,
        remote_cookie: cookie,
        ..Default::default()
    });
    assert_eq!(d.ioctl(&owner, cmd::INLINE_COPY, bad_local), neg(EFAULT));
    assert_eq!(
        d.stats.snapshot().regions,
        1,
        "failed checks must not consume"
    );
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 64)], false, cookie)),
        OK
    );
    assert_eq!(d.env.peek(l, 64), pattern(64, 3));
    assert_eq!(d.stats.snapshot().regions, 0, "consumed and gone");
    assert_eq!(
        inline(&d, &owner, &Inline::new(&[(l, 64)], false, cookie)),
        Err(neg(EINVAL))
    );
    assert_eq!(destroy(&d, &owner, cookie), neg(EINVAL));
    finish(&d, vec![owner, other]);
}

#[test]
fn single_use_race_has_one_winner() {
    for round in 0..20 {
        let d = dev();
        let owner = d.ctx_new(1).unwrap();
        let a = d.env.put_slice(&pattern(4096, round));
        let cookie = create(&d, &owner, &[(a, 4096)], R, KNEM_FLAG_SINGLEUSE).unwrap();
        let locals: Vec<u64> = (0..4).map(|_| d.env.map(4096, true)).collect();
        let results: Vec<Result<u32, i64>> = std::thread::scope(|s| {
            let hs: Vec<_> = locals
                .iter()
                .map(|&l| {
                    let (d, owner) = (&d, &owner);
                    s.spawn(move || inline(d, owner, &Inline::new(&[(l, 4096)], false, cookie)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            results.iter().filter(|r| **r == OK).count(),
            1,
            "{results:?}"
        );
        assert_eq!(
            results.iter().filter(|r| **r == Err(neg(EINVAL))).count(),
            3
        );
        finish(&d, vec![owner]);
    }
}

#[test]
fn destroy_rules() {
    let d = dev();
    let c1 = d.ctx_new(1).unwrap();
    let c2 = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let cookie = create(&d, &c1, &[(a, 10)], RW, 0).unwrap();
    assert_eq!(
        destroy(&d, &c2, cookie),
        neg(EINVAL),
        "same uid, other context"
    );
    assert_eq!(destroy(&d, &c1, cookie ^ (1 << 40)), neg(EINVAL));
    assert_eq!(destroy(&d, &c1, 0), neg(EINVAL));
    assert_eq!(d.ioctl(&c1, cmd::DESTROY_REGION, 0x80), neg(EFAULT));
    assert_eq!(destroy(&d, &c1, cookie), 0);
    assert_eq!(destroy(&d, &c1, cookie), neg(EINVAL));
    assert_eq!(
        inline(&d, &c1, &Inline::new(&[(a, 10)], false, cookie)),
        Err(neg(EINVAL))
    );
    finish(&d, vec![c1, c2]);
}

#[test]
fn release_removes_only_own_regions() {
    let d = dev();
    let c1 = d.ctx_new(1).unwrap();
    let c2 = d.ctx_new(1).unwrap();
    let a = d.env.map(4 * 4096, true);
    let mine: Vec<u64> = (0..100)
        .map(|i| create(&d, &c1, &[(a + i, 5000)], RW, 0).unwrap())
        .collect();
    let theirs = create(&d, &c2, &[(a, 10)], R, 0).unwrap();
    assert_eq!(d.stats.snapshot().regions, 101);
    d.ctx_release(c1);
    assert_eq!(d.stats.snapshot().regions, 1);
    for cookie in mine {
        assert_eq!(
            inline(&d, &c2, &Inline::new(&[(a, 10)], false, cookie)),
            Err(neg(EINVAL))
        );
    }
    assert_eq!(
        inline(&d, &c2, &Inline::new(&[(a + 100, 10)], false, theirs)),
        OK
    );
    finish(&d, vec![c2]);
}

#[test]
fn reference_outlives_release() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let cookie = create(&d, &c, &[(a, 10)], RW, 0).unwrap();
    let found = d.table.lookup(&d.env, &d.stats, cookie).unwrap();
    d.ctx_release(c);
    assert_eq!(d.env.pinned(), 1, "a running copy keeps the pages pinned");
    assert_eq!(d.stats.snapshot().regions, 1);
    drop(found);
    assert_eq!(d.env.pinned(), 0);
    assert_eq!(d.env.rcu_freed.load(SeqCst), 1);
    finish(&d, vec![]);
}

#[test]
fn cookies_never_zero_and_change_on_reuse() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    d.env.force_random(Some(0));
    let first = create(&d, &c, &[(a, 10)], RW, 0).unwrap();
    assert_ne!(first, 0);
    assert_eq!(destroy(&d, &c, first), 0);
    let second = create(&d, &c, &[(a, 10)], RW, 0).unwrap();
    assert_ne!(second, 0);
    assert_ne!(second, first, "slot reused with a repeating random source");
    assert_eq!(
        split_cookie(first).unwrap().0,
        split_cookie(second).unwrap().0
    );
    assert_eq!(
        inline(&d, &c, &Inline::new(&[(a + 100, 10)], false, first)),
        Err(neg(EINVAL))
    );
    d.env.force_random(None);
    let many: Vec<u64> = (0..600)
        .map(|_| create(&d, &c, &[(a, 1)], R, 0).unwrap())
        .collect();
    assert!(many.iter().all(|&k| k != 0));
    let mut sorted = many.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), many.len());
    finish(&d, vec![c]);
}

#[test]
fn region_to_region_copy() {
    let d = dev();
    let c1 = d.ctx_new(1).unwrap();
    let c2 = d.ctx_new(2).unwrap();
    let s = d.env.map(3 * 4096, true);
    let t = d.env.map(3 * 4096, true);
    d.env.fill(s, &pattern(3 * 4096, 5));
    let src = create(
        &d,
        &c1,
        &[(s + 10, 5000), (s + 8192, 100)],
        R,
        KNEM_FLAG_ANY_USER_ACCESS,
    )
    .unwrap();
    let dst = create(&d, &c2, &[(t + 4000, 7000)], W, 0).unwrap();
    assert_eq!(copy(&d, &c2, (src, 0), (dst, 0), None, 0), OK);
    let want: Vec<u8> = [d.env.peek(s + 10, 5000), d.env.peek(s + 8192, 100)].concat();
    assert_eq!(d.env.peek(t + 4000, 5100), want);
    assert_eq!(copy(&d, &c2, (src, 4990), (dst, 1), Some(3), 0), OK);
    assert_eq!(d.env.peek(t + 4001, 3), want[4990..4993]);
    assert_eq!(d.stats.snapshot().bytes_region_copy, 5103);
    // Per-side checks: src needs READ (and uid), dst needs WRITE.
    assert_eq!(copy(&d, &c2, (dst, 0), (dst, 0), None, 0), Err(neg(EACCES)));
    assert_eq!(
        copy(&d, &c2, (src, 0), (src, 0), None, 0),
        Err(neg(EACCES)),
        "shared but read-only"
    );
    let private = create(&d, &c1, &[(s, 10)], RW, 0).unwrap();
    assert_eq!(
        copy(&d, &c2, (private, 0), (dst, 0), None, 0),
        Err(neg(EPERM))
    );
    assert_eq!(
        copy(&d, &c2, (src, 0), (private, 0), None, 0),
        Err(neg(EPERM))
    );
    assert_eq!(
        copy(&d, &c2, (99, 0), (private, 0), None, 0),
        Err(neg(EINVAL)),
        "src side first"
    );
    finish(&d, vec![c1, c2]);
}

#[test]
fn region_copy_single_use_needs_both_sides() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    let src = create(&d, &c, &[(a, 100)], R, KNEM_FLAG_SINGLEUSE).unwrap();
    let ro_dst = create(&d, &c, &[(a + 200, 100)], R, 0).unwrap();
    assert_eq!(
        copy(&d, &c, (src, 0), (ro_dst, 0), None, 0),
        Err(neg(EACCES))
    );
    assert_eq!(
        copy(&d, &c, (src, 0), (12345, 0), None, 0),
        Err(neg(EINVAL))
    );
    let dst = create(&d, &c, &[(a + 200, 100)], W, 0).unwrap();
    assert_eq!(
        copy(&d, &c, (src, 0), (dst, 0), None, KNEM_FLAG_MEMCPYTHREAD),
        Err(neg(EINVAL))
    );
    assert_eq!(copy(&d, &c, (src, 0), (dst, 0), None, 0), OK);
    assert_eq!(copy(&d, &c, (src, 0), (dst, 0), None, 0), Err(neg(EINVAL)));
    finish(&d, vec![c]);
}

#[test]
fn legacy_init_send_and_sync_recv() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.put_slice(&pattern(300, 8));
    let arr = d.env.put_slice(&iovs(&[(a, 300)]));
    // Flags outside the create mask are dropped, as KNEM does.
    let arg = d.env.put(&knem_cmd_init_send_param {
        send_iovec_array: arr,
        send_iovec_nr: 1,
        flags: KNEM_FLAG_DMA | 1 << 8 | 1 << 31,
        send_cookie: 0,
    });
    assert_eq!(d.ioctl(&c, cmd::INIT_SEND, arg), 0);
    let cookie = d.env.get::<knem_cmd_init_send_param>(arg).send_cookie;
    // Read-only.
    assert_eq!(
        inline(&d, &c, &Inline::new(&[(a, 10)], true, cookie)),
        Err(neg(EACCES))
    );
    let l = d.env.map(4096, true);
    let larr = d.env.put_slice(&iovs(&[(l, 100), (l + 1000, 500)]));
    let recv = knem_cmd_sync_recv_param {
        recv_iovec_array: larr,
        recv_iovec_nr: 2,
        status: 0x55,
        send_cookie: cookie,
        // Every bit: the asynchronous and undefined ones are dropped.
        flags: u32::MAX,
        pad: 3,
    };
    let rarg = d.env.put(&recv);
    assert_eq!(d.ioctl(&c, cmd::SYNC_RECV, rarg), 0);
    assert_eq!(
        d.env.get::<knem_cmd_sync_recv_param>(rarg),
        knem_cmd_sync_recv_param { status: 1, ..recv }
    );
    assert_eq!(d.env.peek(l, 100), pattern(300, 8)[..100]);
    assert_eq!(d.env.peek(l + 1000, 200), pattern(300, 8)[100..]);
    // Single-use: gone.
    let rarg = d.env.put(&recv);
    assert_eq!(d.ioctl(&c, cmd::SYNC_RECV, rarg), neg(EINVAL));
    assert_eq!(d.ioctl(&c, cmd::INIT_ASYNC_RECV, rarg), neg(EINVAL));
    assert_eq!(d.ioctl(&c, cmd::BIND_OFFLOAD, rarg), neg(EINVAL));
    finish(&d, vec![c]);
}

#[test]
fn concurrent_lookups_and_destroys_are_safe() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    std::thread::scope(|s| {
        let (d, c) = (&d, &c);
        let cookies: Vec<u64> = (0..50)
            .map(|_| create(d, c, &[(a, 100)], RW, 0).unwrap())
            .collect();
        let readers: Vec<_> = (0..3)
            .map(|t| {
                let cookies = cookies.clone();
                s.spawn(move || {
                    let l = d.env.map(4096, true);
                    for i in 0..200 {
                        let k = cookies[(i * 7 + t) % cookies.len()];
                        let r = inline(d, c, &Inline::new(&[(l, 100)], false, k));
                        assert!(r == OK || r == Err(neg(EINVAL)), "{r:?}");
                    }
                })
            })
            .collect();
        for k in &cookies {
            assert_eq!(destroy(d, c, *k), 0);
            let _ = create(d, c, &[(a, 100)], RW, 0).unwrap();
        }
        for r in readers {
            r.join().unwrap();
        }
    });
    finish(&d, vec![c]);
}

#[test]
fn pinned_region_survives_unmap_of_its_memory() {
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(4096, true);
    d.env.fill(a, &pattern(4096, 42));
    let cookie = create(&d, &c, &[(a, 4096)], R, 0).unwrap();
    d.env.unmap(a);
    let l = d.env.map(4096, true);
    assert_eq!(
        inline(&d, &c, &Inline::new(&[(l, 4096)], false, cookie)),
        OK
    );
    assert_eq!(d.env.peek(l, 4096), pattern(4096, 42));
    finish(&d, vec![c]);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// Segments inside a 4-page buffer: (start, len) pairs, any alignment,
    /// empty ones included.
    fn segs() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec((0u64..16384, prop_oneof![Just(0u64), 1u64..6000]), 0..5)
            .prop_map(|v| v.into_iter().map(|(s, l)| (s, l.min(16384 - s))).collect())
    }

    fn flat(base: u64, segs: &[(u64, u64)]) -> Vec<u64> {
        segs.iter()
            .flat_map(|&(s, l)| (0..l).map(move |k| base + s + k))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// A region-to-region copy through the ioctl matches the model.
        #[test]
        fn region_copy_matches_model(
            ssegs in segs(), dsegs in segs(),
            soff in 0u64..20000, doff in 0u64..20000,
            bound in prop::option::of(0u64..20000),
        ) {
            let d = dev();
            let c = d.ctx_new(1).unwrap();
            let sb = d.env.map(16384, true);
            let db = d.env.map(16384, true);
            let (ps, pd) = (pattern(16384, 3), pattern(16384, 4));
            d.env.fill(sb, &ps);
            d.env.fill(db, &pd);
            let sreg: Vec<(u64, u64)> = ssegs.iter().map(|&(s, l)| (sb + s, l)).collect();
            let dreg: Vec<(u64, u64)> = dsegs.iter().map(|&(s, l)| (db + s, l)).collect();
            let src = create(&d, &c, &sreg, R, 0).unwrap();
            let dst = create(&d, &c, &dreg, W, 0).unwrap();
            let (sflat, dflat) = (flat(sb, &ssegs), flat(db, &dsegs));
            let mut want = pd.clone();
            let n = (sflat.len() as u64).saturating_sub(soff)
                .min((dflat.len() as u64).saturating_sub(doff))
                .min(bound.unwrap_or(u64::MAX));
            for k in 0..n {
                let from = sflat[(soff + k) as usize] - sb;
                let to = dflat[(doff + k) as usize] - db;
                want[to as usize] = ps[from as usize];
            }
            prop_assert_eq!(copy(&d, &c, (src, soff), (dst, doff), bound, 0), OK);
            prop_assert_eq!(d.env.peek(db, 16384), want);
            prop_assert_eq!(d.env.peek(sb, 16384), ps);
            prop_assert_eq!(d.stats.snapshot().bytes_region_copy, n);
            finish(&d, vec![c]);
        }

        /// An inline copy through the ioctl moves exactly the bytes the
        /// naive model says (byte-by-byte over the flattened segments).
        #[test]
        fn inline_copy_matches_model(
            rsegs in segs(), lsegs in segs(), write in any::<bool>(),
            offset in prop_oneof![0u64..20000, Just(u64::MAX)],
            bound in prop::option::of(0u64..20000),
        ) {
            let d = dev();
            let c = d.ctx_new(1).unwrap();
            let rb = d.env.map(16384, true);
            let lb = d.env.map(16384, true);
            d.env.fill(rb, &pattern(16384, 1));
            d.env.fill(lb, &pattern(16384, 2));
            let region: Vec<(u64, u64)> = rsegs.iter().map(|&(s, l)| (rb + s, l)).collect();
            let local: Vec<(u64, u64)> = lsegs.iter().map(|&(s, l)| (lb + s, l)).collect();
            let cookie = create(&d, &c, &region, RW, 0).unwrap();

            // Model: copy byte k of the region (from offset) to byte k of
            // the local list, in order; overlapping segments are fine since
            // the model replays the same order.
            let rflat = flat(rb, &rsegs);
            let lflat = flat(lb, &lsegs);
            let mut model: std::collections::HashMap<u64, u8> = Default::default();
            let (pr, pl) = (pattern(16384, 1), pattern(16384, 2));
            let mem = |a: u64| if a >= lb { pl[(a - lb) as usize] } else { pr[(a - rb) as usize] };
            let n = (rflat.len() as u64).saturating_sub(offset).min(lflat.len() as u64).min(bound.unwrap_or(u64::MAX));
            for k in 0..n {
                let (ra, la) = (rflat[(offset + k) as usize], lflat[k as usize]);
                let (from, to) = if write { (la, ra) } else { (ra, la) };
                let v = model.get(&from).copied().unwrap_or_else(|| mem(from));
                model.insert(to, v);
            }
            let mut r = Inline::new(&local, write, cookie);
            r.offset = offset;
            r.bound = bound;
            prop_assert_eq!(inline(&d, &c, &r), OK);
            let got_r = d.env.peek(rb, 16384);
            let got_l = d.env.peek(lb, 16384);
            for a in 0..16384u64 {
                prop_assert_eq!(got_r[a as usize], model.get(&(rb + a)).copied().unwrap_or_else(|| mem(rb + a)));
                prop_assert_eq!(got_l[a as usize], model.get(&(lb + a)).copied().unwrap_or_else(|| mem(lb + a)));
            }
            let s = d.stats.snapshot();
            prop_assert_eq!(s.bytes_inline_read + s.bytes_inline_write, n);
            finish(&d, vec![c]);
        }
    }
}

#[test]
fn allocation_failure_at_every_step_leaks_nothing() {
    use crate::edge::kalloc::fault::fail_after;
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    let a = d.env.map(3 * 4096, true);
    let mut failures = 0;
    for k in 0.. {
        fail_after(Some(k));
        let r = create(&d, &c, &[(a + 1, 5000), (a + 8192, 10)], RW, 0);
        fail_after(None);
        match r {
            Err(e) => {
                assert_eq!(e, neg(ENOMEM), "step {k}");
                failures += 1;
                assert_eq!(d.env.pinned(), 0, "pages leaked at step {k}");
                assert_eq!(d.stats.snapshot().regions, 0);
            }
            Ok(cookie) => {
                assert_eq!(destroy(&d, &c, cookie), 0);
                break;
            }
        }
    }
    assert!(
        failures >= 4,
        "iovecs, segments, pages, region, table chunk: {failures}"
    );
    assert_eq!(d.stats.snapshot().err_enomem, failures);
    // Inline copies allocate (local iovecs and segments) only past what
    // the stack holds.
    let cookie = create(&d, &c, &[(a, 100)], RW, 0).unwrap();
    let many: Vec<(u64, u64)> = (0..INLINE_IOVECS as u64 + 1)
        .map(|i| (a + 200 + 10 * i, 10))
        .collect();
    for k in 0..2 {
        fail_after(Some(k));
        let r = inline(&d, &c, &Inline::new(&many, false, cookie));
        fail_after(None);
        assert_eq!(r, Err(neg(ENOMEM)));
    }
    fail_after(Some(0));
    let r = inline(&d, &c, &Inline::new(&many[..INLINE_IOVECS], false, cookie));
    fail_after(None);
    assert_eq!(r, OK, "no allocation up to INLINE_IOVECS");
    fail_after(Some(0));
    assert!(d.ctx_new(2).is_err());
    finish(&d, vec![c]);
}

#[test]
fn iovec_count_is_bounded_before_any_allocation() {
    // A count past MAX_IOVECS is refused before the kernel array is
    // allocated, whatever the pointer: no user can size a kernel allocation
    // beyond 16 MiB this way.
    use crate::edge::uaccess::MAX_IOVECS;
    let d = dev();
    let c = d.ctx_new(1).unwrap();
    for nr in [MAX_IOVECS + 1, u32::MAX] {
        let arg = d.env.put(&knem_cmd_create_region {
            iovec_array: 0x20,
            iovec_nr: nr,
            protection: R,
            ..Default::default()
        });
        assert_eq!(d.ioctl(&c, cmd::CREATE_REGION, arg), neg(EINVAL));
    }
    // At the bound, the count is accepted and the unreadable array faults.
    let arg = d.env.put(&knem_cmd_create_region {
        iovec_array: 0x20,
        iovec_nr: MAX_IOVECS,
        protection: R,
        ..Default::default()
    });
    assert_eq!(d.ioctl(&c, cmd::CREATE_REGION, arg), neg(EFAULT));
    finish(&d, vec![c]);
}
