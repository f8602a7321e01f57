//! The pipelined shm double copy: readers that start while the owner is
//! still copying in get every byte right, for sizes and offsets around
//! chunk boundaries, through plain and vectored reads and writes.

use knem_transport::{Kind, Shm, Transport, PIPELINE_MIN, SHM_CHUNK};
use std::io::{IoSlice, IoSliceMut};

fn pattern(n: usize, salt: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 131 + salt) % 251) as u8).collect()
}

const C: usize = SHM_CHUNK;

fn sizes() -> Vec<usize> {
    vec![
        0,
        1,
        C - 1,
        C,
        C + 1,
        PIPELINE_MIN - 1,
        PIPELINE_MIN,
        PIPELINE_MIN + 1,
        3 * C - 1,
        3 * C,
        3 * C + 7,
        8 * C + 4095,
        (4 << 20) + 1,
    ]
}

#[test]
fn concurrent_readers_see_every_byte() {
    for on in [true, false] {
        readers(&Shm::with_pipeline(on).unwrap());
    }
}

fn readers(t: &Shm) {
    assert_eq!(t.kind(), Kind::Shm);
    for (k, n) in sizes().into_iter().enumerate() {
        let mut src = pattern(n, k);
        let want = src.clone();
        // SAFETY: `src` is not touched until `exp` is dropped.
        let exp = unsafe { t.expose_raw(src.as_mut_ptr(), n, true).unwrap() };
        let d = exp.descriptor();
        std::thread::scope(|s| {
            // Readers start at once, racing the copy-in thread.
            let whole = s.spawn(|| {
                let mut b = vec![0u8; n];
                assert_eq!(t.read(&d, 0, &mut b).unwrap(), n);
                b
            });
            let split = s.spawn(|| {
                // Vectored, pieces straddling chunk boundaries.
                let cut = (C - 3).min(n);
                let (mut a, mut b) = (vec![0u8; cut], vec![0u8; n - cut]);
                let got = t
                    .read_vectored(
                        &d,
                        0,
                        &mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)],
                    )
                    .unwrap();
                assert_eq!(got, n);
                a.extend_from_slice(&b);
                a
            });
            let tail = s.spawn(|| {
                // A read from just before a boundary, past the end.
                let off = n.saturating_sub(C + 5);
                let mut b = vec![0u8; C + 64];
                let got = t.read(&d, off as u64, &mut b).unwrap();
                assert_eq!(got, n - off);
                (off, b[..got].to_vec())
            });
            assert!(whole.join().unwrap() == want, "whole read of {n}");
            assert!(split.join().unwrap() == want, "vectored read of {n}");
            let (off, b) = tail.join().unwrap();
            assert!(b[..] == want[off..], "tail read of {n} at {off}");
        });
        drop(exp);
        assert!(src == want, "owner buffer of {n} unchanged");
    }
}

#[test]
fn writes_during_copy_in_are_not_lost() {
    let t = Shm::with_pipeline(true).unwrap();
    assert!(t.pipelined());
    for (k, n) in sizes().into_iter().enumerate() {
        let mut buf = pattern(n, k);
        let mut want = buf.clone();
        // SAFETY: `buf` is only touched through collect until `exp` drops.
        let exp = unsafe { t.expose_raw(buf.as_mut_ptr(), n, true).unwrap() };
        let d = exp.descriptor();
        // Overwrite a range straddling each chunk boundary (vectored).
        let mut b = C;
        while b < n {
            let lo = b - 2.min(b);
            let hi = (b + 3).min(n);
            let w1 = vec![0xa5u8; b - lo];
            let w2 = vec![0x5au8; hi - b];
            let got = t
                .write_vectored(&d, lo as u64, &[IoSlice::new(&w1), IoSlice::new(&w2)])
                .unwrap();
            assert_eq!(got, hi - lo);
            want[lo..b].fill(0xa5);
            want[b..hi].fill(0x5a);
            b += C;
        }
        exp.collect(0, n).unwrap();
        drop(exp);
        assert!(buf == want, "size {n}");
    }
}

#[test]
fn publish_after_pipelined_expose() {
    let t = Shm::with_pipeline(true).unwrap();
    let n = 5 * C + 11;
    let mut buf = pattern(n, 9);
    // SAFETY: `buf` is written only after `publish` settled the copy-in...
    let exp = unsafe { t.expose_raw(buf.as_mut_ptr(), n, true).unwrap() };
    let d = exp.descriptor();
    exp.publish(0, 0).unwrap(); // waits for the copy-in
                                // ...through the raw pointer the exposure was made from.
    let p = buf.as_mut_ptr();
    // SAFETY: in bounds; no reference to `buf` is live.
    unsafe { std::ptr::write_bytes(p.add(C - 1), 0xee, 2) };
    exp.publish(C - 1, 2).unwrap();
    let mut got = vec![0u8; n];
    assert_eq!(t.read(&d, 0, &mut got).unwrap(), n);
    drop(exp);
    assert!(got == buf);
    assert_eq!(got[C - 1..C + 1], [0xee, 0xee]);
}
