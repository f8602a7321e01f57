//! Micro-benchmarks of the core's hot paths on the host mock: cookie
//! lookup with few and many live regions, seeking into a region with many
//! segments, and planning a copy.  `cargo bench -p knem-core --features mock`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use knem_abi::{cmd, knem_cmd_create_region, knem_cmd_param_iovec};
use knem_core::plan::layout::SegList;
use knem_core::plan::planner::InlinePlan;
use knem_core::state::device::Device;
use knem_core::testing::mock::MockEnv;
use std::hint::black_box;

const PROT_READ: u32 = 1;

/// Creates `n` one-page regions over one buffer; returns their cookies.
fn regions(d: &Device<MockEnv>, ctx: &knem_core::state::context::Context, n: usize) -> Vec<u64> {
    let buf = d.env.map(4096, true);
    let iov = d.env.put_slice(&[knem_cmd_param_iovec {
        base: buf,
        len: 4096,
    }]);
    (0..n)
        .map(|_| {
            let arg = d.env.put(&knem_cmd_create_region {
                iovec_array: iov,
                iovec_nr: 1,
                protection: PROT_READ,
                ..Default::default()
            });
            assert_eq!(d.ioctl(ctx, cmd::CREATE_REGION, arg), 0);
            d.env.get::<knem_cmd_create_region>(arg).cookie
        })
        .collect()
}

fn cookie_lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("cookie_lookup");
    for live in [1usize, 1_000, 100_000] {
        let d = Box::new(Device::new(MockEnv::new()));
        let ctx = d.ctx_new(0).unwrap();
        let cookies = regions(&d, &ctx, live);
        let probe = cookies[cookies.len() / 2];
        g.bench_with_input(BenchmarkId::from_parameter(live), &probe, |b, &cookie| {
            b.iter(|| {
                let found = d.table.lookup(&d.env, &d.stats, black_box(cookie));
                black_box(found.is_ok())
            })
        });
        d.ctx_release(ctx);
    }
    g.finish();
}

/// `n` segments of 3000 bytes, unaligned, one page apart.
fn segments(n: u64) -> SegList<'static> {
    let iov: Vec<_> = (0..n)
        .map(|i| knem_cmd_param_iovec {
            base: 0x10_0000 + i * 8192 + 100,
            len: 3000,
        })
        .collect();
    SegList::new(&iov).unwrap()
}

fn offset_seek(c: &mut Criterion) {
    let mut g = c.benchmark_group("offset_seek");
    for n in [1u64, 64, 4096] {
        let list = segments(n);
        let off = list.total() * 3 / 4;
        g.bench_with_input(BenchmarkId::from_parameter(n), &off, |b, &off| {
            b.iter(|| black_box(list.seek(black_box(off))))
        });
    }
    g.finish();
}

fn segment_iteration(c: &mut Criterion) {
    // A 512 KiB piece (UCX's pipeline unit) out of a 256-segment region
    // into a single local buffer: the chunk list a copy walks.
    let region = segments(256);
    let local = SegList::new(&[knem_cmd_param_iovec {
        base: 0x4000_0000,
        len: 512 * 1024,
    }])
    .unwrap();
    c.bench_function("plan_512k_inline", |b| {
        b.iter(|| {
            InlinePlan::new(&region, black_box(100_000), &local, Some(512 * 1024))
                .map(|ch| ch.len as u64)
                .sum::<u64>()
        })
    });
}

criterion_group!(benches, cookie_lookup, offset_seek, segment_iteration);
criterion_main!(benches);
