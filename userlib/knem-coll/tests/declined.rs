//! A rank that cannot expose its buffer (as under a small RLIMIT_MEMLOCK)
//! makes every rank of the call return `Error::Declined` at once, with no
//! byte moved, and the team stays usable; and the region cache keeps
//! exposures while buffers repeat and drops them on a reported release.
//! Teams are this test binary re-run under the launcher, entering `member`
//! (CMA, which every host the tests run on has).

use knem_coll::team::{ENV_RANK, ENV_SIZE, ENV_TEAM};
use knem_coll::{launch, Error, Team};
use knem_transport::{Descriptor, Exposure, Kind, Transport};
use std::io::{IoSlice, IoSliceMut};
use std::process::Command;
use std::time::{Duration, Instant};

const ROLE: &str = "KNEM_RS_TEST_ROLE";
/// Rank 1 refuses to expose this many bytes or more.
const REFUSED_FROM: usize = 4096;

/// CMA, except that rank 1 refuses big exposures with ENOMEM (what knem
/// answers over RLIMIT_MEMLOCK).
struct Refusing {
    inner: Box<dyn Transport>,
    refuse: bool,
}

impl Transport for Refusing {
    fn kind(&self) -> Kind {
        self.inner.kind()
    }

    unsafe fn expose_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        publish: bool,
    ) -> knem_transport::Result<Exposure> {
        if self.refuse && len >= REFUSED_FROM {
            return Err(knem_transport::Error::Sys {
                call: "test: pin under a small memlock limit",
                errno: nix::errno::Errno::ENOMEM,
            });
        }
        // SAFETY: forwarded from the caller.
        unsafe { self.inner.expose_raw(ptr, len, publish) }
    }

    fn read_vectored(
        &self,
        remote: &Descriptor,
        offset: u64,
        bufs: &mut [IoSliceMut<'_>],
    ) -> knem_transport::Result<usize> {
        self.inner.read_vectored(remote, offset, bufs)
    }

    fn write_vectored(
        &self,
        remote: &Descriptor,
        offset: u64,
        bufs: &[IoSlice<'_>],
    ) -> knem_transport::Result<usize> {
        self.inner.write_vectored(remote, offset, bufs)
    }

    fn prepare_peer_access(&self) -> knem_transport::Result<()> {
        self.inner.prepare_peer_access()
    }
}

fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("{var} not set"))
}

fn attach() -> Team {
    let rank: usize = env(ENV_RANK).parse().unwrap();
    let size: usize = env(ENV_SIZE).parse().unwrap();
    let t = Refusing {
        inner: knem_transport::open(Kind::Cma).expect("CMA"),
        refuse: rank == 1,
    };
    Team::attach(&env(ENV_TEAM), rank, size, Box::new(t)).expect("attach")
}

fn pat(rank: usize, i: usize, salt: usize) -> u8 {
    (rank * 31 + i * 7 + (i >> 8) + salt * 13) as u8
}

/// Every collective on n bytes per block; Ok(()) with the data checked, or
/// the error, the receive buffers checked untouched.
fn round(t: &mut Team, n: usize, salt: usize) -> Result<(), Error> {
    let (me, p) = (t.rank(), t.size());
    let fill = 0xEEu8;
    let untouched = |b: &[u8]| assert!(b.iter().all(|x| *x == fill), "rank {me}: bytes moved");
    let root = salt % p;

    let mut b: Vec<u8> = (0..n)
        .map(|i| if me == root { pat(root, i, salt) } else { fill })
        .collect();
    match t.bcast(&mut b, root, None) {
        Ok(()) => assert!(b.iter().enumerate().all(|(i, x)| *x == pat(root, i, salt))),
        Err(e) => {
            if me != root {
                untouched(&b);
            }
            return Err(e);
        }
    }
    let send: Vec<u8> = (0..n * p).map(|i| pat(me, i, salt)).collect();
    let mut recv = vec![fill; n * p];
    match t.alltoall(&send, &mut recv, None) {
        Ok(()) => {
            for r in 0..p {
                for i in 0..n {
                    assert_eq!(recv[r * n + i], pat(r, me * n + i, salt), "alltoall");
                }
            }
        }
        Err(e) => {
            untouched(&recv);
            return Err(e);
        }
    }
    let mut recv = vec![fill; n * p];
    match t.gather(&send[..n], &mut recv, root, None) {
        Ok(()) if me == root => {
            for r in 0..p {
                for i in 0..n {
                    assert_eq!(recv[r * n + i], pat(r, i, salt), "gather");
                }
            }
        }
        Ok(()) => {}
        Err(e) => {
            untouched(&recv);
            return Err(e);
        }
    }
    let mut one = vec![fill; n];
    match t.scatter(&send, &mut one, root, None) {
        Ok(()) => assert!(one
            .iter()
            .enumerate()
            .all(|(i, x)| *x == pat(root, me * n + i, salt))),
        Err(e) => {
            untouched(&one);
            return Err(e);
        }
    }
    Ok(())
}

#[test]
fn member() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let mut t = attach();
    let me = t.rank();
    match role.as_str() {
        "decline" => {
            // Small calls work, big ones are declined on every rank, in
            // any order, and the team keeps working in between.
            for salt in 0..20 {
                let n = if salt % 2 == 0 { 100 } else { 2 * REFUSED_FROM };
                let start = Instant::now();
                match round(&mut t, n, salt) {
                    Ok(()) => assert_eq!(n, 100, "rank {me}: {n} bytes were not declined"),
                    Err(Error::Declined { ranks, cause }) => {
                        assert_eq!(n, 2 * REFUSED_FROM, "rank {me}: {n} bytes declined");
                        assert_eq!(ranks, vec![1], "rank {me}");
                        assert_eq!(cause.is_some(), me == 1, "rank {me}: cause {cause:?}");
                        let e = Error::Declined { ranks, cause };
                        assert_eq!(e.errno(), nix::errno::Errno::ECANCELED);
                    }
                    Err(e) => panic!("rank {me}: {e}"),
                }
                assert!(start.elapsed() < Duration::from_secs(10), "rank {me}: slow");
            }
        }
        "cache" => {
            // SAFETY: every release below is reported (note_release); the
            // test allocates nothing it unmaps behind the cache's back
            // that a kept exposure covers (the Vecs live to the end).
            unsafe { t.cache_regions(8, 1 << 20) }.expect("cache");
            let mut b = vec![0u8; 1000];
            for salt in 0..10 {
                let root = salt % t.size();
                if me == root {
                    b.iter_mut()
                        .enumerate()
                        .for_each(|(i, x)| *x = pat(root, i, salt));
                }
                t.bcast(&mut b, root, None).expect("bcast");
                assert!(b.iter().enumerate().all(|(i, x)| *x == pat(root, i, salt)));
            }
            let s = t.region_cache_stats().expect("a cache");
            assert_eq!(
                (s.misses, s.hits, s.entries, s.bytes),
                (1, 9, 1, 1000),
                "{s:?}"
            );
            knem_coll::note_release(b.as_ptr() as usize + 999, 1);
            t.bcast(&mut b, 0, None).expect("bcast");
            let s = t.region_cache_stats().expect("a cache");
            assert_eq!((s.misses, s.invalidated), (2, 1), "{s:?}");
            // Turning it off drops what it kept.
            // SAFETY: nothing is kept from here on.
            unsafe { t.cache_regions(0, 0) }.expect("off");
            assert!(t.region_cache_stats().is_none());
        }
        other => panic!("unknown role {other}"),
    }
}

fn team(n: usize, role: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = launch::run(n, |_| {
        let mut c = Command::new(&exe);
        c.args(["--exact", "member", "--nocapture", "--test-threads=1", "-q"])
            .env(ROLE, role)
            .env("KNEM_RS_TIMEOUT", "30")
            .env("KNEM_RS_MODEL", "/nonexistent/knem-rs-test-model.json");
        c
    })
    .unwrap();
    assert!(
        out.success(),
        "{role} team of {n}: exit codes {:?}",
        out.codes
    );
}

#[test]
fn a_refused_exposure_declines_the_call_on_every_rank() {
    team(2, "decline");
    team(4, "decline");
}

#[test]
fn kept_regions_hit_and_releases_drop_them() {
    team(3, "cache");
}
