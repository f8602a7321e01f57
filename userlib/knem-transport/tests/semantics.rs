//! Same semantics on every transport: read, write, vectored buffers,
//! offsets, clamping, publish/collect.  The process reaches its own
//! exposures, which every transport allows.  CMA and shm must open on any
//! host the tests run on; knem is left out, saying so, only where
//! /dev/knem does not exist (the module is loaded only in the VM).

use knem_transport::{open, Descriptor, Error, Kind, Transport};
use std::io::{IoSlice, IoSliceMut};

fn available() -> Vec<Box<dyn Transport>> {
    Kind::ALL
        .into_iter()
        .filter_map(|k| match open(k) {
            Ok(t) => Some(t),
            Err(e) if k == Kind::Knem && !std::path::Path::new("/dev/knem").exists() => {
                eprintln!("skipped: {k}: {e} (no /dev/knem: the module is not loaded here)");
                None
            }
            Err(e) => panic!("the {k} transport does not open here: {e}"),
        })
        .collect()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn read_write_offsets_vectored_clamp() {
    let ts = available();
    assert!(
        ts.iter().any(|t| t.kind() == Kind::Shm),
        "shm must always work"
    );
    for t in &ts {
        let kind = t.kind();
        let mut remote = pattern(10_000);
        let expected = remote.clone();
        // SAFETY: `remote` is not touched by this thread except through
        // publish/collect until `exp` is dropped.
        let exp = unsafe {
            t.expose_raw(remote.as_mut_ptr(), remote.len(), true)
                .unwrap()
        };
        let d = exp.descriptor();
        assert_eq!(d.kind(), Some(kind));
        assert_eq!(d.len, 10_000);

        let mut buf = vec![0u8; 100];
        assert_eq!(t.read(&d, 5_000, &mut buf).unwrap(), 100, "{kind}");
        assert_eq!(buf[..], expected[5_000..5_100], "{kind}");

        // Clamped at the end of the exposure, and past it.
        let mut tail = vec![0u8; 64];
        assert_eq!(t.read(&d, 9_990, &mut tail).unwrap(), 10, "{kind}");
        assert_eq!(tail[..10], expected[9_990..], "{kind}");
        assert_eq!(t.read(&d, 20_000, &mut tail).unwrap(), 0, "{kind}");

        // Vectored read across buffers.
        let (mut a, mut b) = (vec![0u8; 3], vec![0u8; 4_000]);
        let n = t
            .read_vectored(
                &d,
                1,
                &mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)],
            )
            .unwrap();
        assert_eq!(n, 4_003);
        assert_eq!(a[..], expected[1..4]);
        assert_eq!(b[..], expected[4..4_004]);

        // Vectored write, then the owner collects.
        let w1 = vec![0xaa; 5];
        let w2 = vec![0xbb; 7];
        assert_eq!(
            t.write_vectored(&d, 100, &[IoSlice::new(&w1), IoSlice::new(&w2)])
                .unwrap(),
            12
        );
        assert_eq!(t.write(&d, 9_998, &[1, 2, 3, 4]).unwrap(), 2, "{kind}");
        exp.collect(100, 12).unwrap();
        exp.collect(9_998, 2).unwrap();
        drop(exp);
        assert_eq!(remote[100..105], [0xaa; 5], "{kind}");
        assert_eq!(remote[105..112], [0xbb; 7], "{kind}");
        assert_eq!(remote[9_998..], [1, 2], "{kind}");
        assert_eq!(remote[..100], expected[..100], "{kind}");
    }
}

#[test]
fn zero_length_exposure() {
    for t in available() {
        let mut empty: Vec<u8> = Vec::new();
        let e = knem_transport::expose(t.as_ref(), &mut empty).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(t.read(&e.descriptor(), 0, &mut buf).unwrap(), 0);
        assert_eq!(t.write(&e.descriptor(), 0, &buf).unwrap(), 0);
    }
}

#[test]
fn descriptor_of_another_transport_is_refused() {
    for t in available() {
        let other = Kind::ALL.into_iter().find(|k| *k != t.kind()).unwrap();
        let d = Descriptor {
            kind: other as u32,
            pid: std::process::id(),
            len: 10,
            ..Default::default()
        };
        let mut buf = [0u8; 4];
        assert!(matches!(
            t.read(&d, 0, &mut buf),
            Err(Error::BadDescriptor(_))
        ));
    }
}

#[test]
fn cma_denied_message_names_the_alternative() {
    let e = Error::CmaDenied {
        call: "process_vm_readv",
        pid: 42,
        errno: nix::errno::Errno::EPERM,
    };
    let msg = e.to_string();
    assert!(msg.contains("ptrace"), "{msg}");
    assert!(msg.contains("KNEM_RS_TRANSPORT=shm"), "{msg}");
}

#[test]
fn env_override_names() {
    assert_eq!("CMA".parse::<Kind>().unwrap(), Kind::Cma);
    assert!("xpmem"
        .parse::<Kind>()
        .unwrap_err()
        .to_string()
        .contains("knem, cma or shm"));
}

#[test]
fn copy_between_two_exposures() {
    for t in available() {
        let kind = t.kind();
        for n in [0usize, 1, 4095, 70_000, (1 << 20) + 5, 3 << 20] {
            let mut a = pattern(n);
            let want = a.clone();
            let mut b = vec![0u8; n + 20];
            let ea = knem_transport::expose(t.as_ref(), &mut a).unwrap();
            // SAFETY: `b` is only read after collect and drop.
            let eb = unsafe { t.expose_raw(b.as_mut_ptr(), n + 20, false).unwrap() };
            let (da, db) = (ea.descriptor(), eb.descriptor());
            // Whole, then clamped at the end of the source, then of the
            // destination.
            assert_eq!(t.copy(&da, 0, &db, 3, n).unwrap(), n, "{kind} {n}");
            let off = n.saturating_sub(7) as u64;
            let at = (n + 3) as u64;
            let tail = n - off as usize;
            assert_eq!(t.copy(&da, off, &db, at, 100).unwrap(), tail, "{kind} {n}");
            assert_eq!(
                t.copy(&da, 0, &db, (n + 19) as u64, 100).unwrap(),
                n.min(1),
                "{kind} {n}"
            );
            eb.collect(0, n + 20).unwrap();
            drop(eb);
            drop(ea);
            assert!(b[3..3 + n] == want[..], "{kind} {n}");
            assert!(b[n + 3..n + 3 + tail] == want[off as usize..], "{kind} {n}");
            if n > 0 {
                assert_eq!(b[n + 19], want[0], "{kind} {n}");
            }
        }
    }
}
