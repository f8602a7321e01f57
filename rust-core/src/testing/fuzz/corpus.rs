//! The checked-in corpus of `rust-core/fuzz/corpus/<target>/` replayed
//! through the fuzz targets' harness on every `cargo test`: an input that
//! ever made a target fail stays a regression test, and the seeds keep
//! covering every command.

use super::{ioctl, plan};
use std::path::PathBuf;
use std::vec::Vec;

/// The files of one target's corpus, sorted.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// Runs `f` on every file; fails naming each file that panicked.
fn replay<T>(target: &str, min_files: usize, mut f: impl FnMut(&[u8]) -> T) -> Vec<T> {
    let files = corpus(target);
    assert!(
        files.len() >= min_files,
        "{target}: {} corpus files, expected at least {min_files}",
        files.len()
    );
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for (name, data) in &files {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(data))) {
            Ok(v) => out.push(v),
            Err(_) => failed.push(name.clone()),
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: failing corpus inputs {failed:?}"
    );
    out
}

#[test]
fn plan_corpus_passes() {
    replay("plan", 10, plan::run);
}

#[test]
fn ioctl_corpus_passes_and_covers_every_command() {
    let runs = replay("ioctl", 20, ioctl::run);
    let mut total = ioctl::Summary::default();
    for s in &runs {
        for i in 0..ioctl::CMDS.len() {
            total.ok[i] += s.ok[i];
            total.failed[i] += s.failed[i];
        }
        total.undefined += s.undefined;
        total.copy_failed += s.copy_failed;
        total.data_exact += s.data_exact;
        total.thread_done += s.thread_done;
        total.fallback_done += s.fallback_done;
        total.dma_done += s.dma_done;
        total.notified += s.notified;
        total.consumed += s.consumed;
        total.released += s.released;
        total.dropped += s.dropped;
    }
    for (i, c) in ioctl::CMDS.iter().enumerate() {
        assert!(
            total.ok[i] > 0,
            "no corpus input runs command {c:#x} successfully"
        );
        assert!(
            total.failed[i] > 0,
            "no corpus input makes command {c:#x} fail"
        );
    }
    let t = &total;
    for (n, what) in [
        (t.undefined, "undefined commands"),
        (t.copy_failed, "copies that fault part-way"),
        (t.data_exact, "copies checked byte for byte"),
        (t.thread_done, "offload-thread requests"),
        (t.fallback_done, "thread requests run in the caller"),
        (t.dma_done, "DMA-engine completions"),
        (t.notified, "NOTIFY_FD notifications"),
        (t.consumed, "single-use regions consumed"),
        (t.released, "releases mid-sequence"),
        (t.dropped, "requests dropped by a release"),
    ] {
        assert!(n > 0, "the ioctl corpus has no {what}");
    }
}

/// Hand-written seeds, in the input grammar of [`ioctl`] and [`plan`].
/// `KNEM_WRITE_SEEDS=1 cargo test -p knem-core --lib seeds_match` rewrites
/// the `seed-*` files (other corpus files are inputs the fuzzers found).
mod seeds {
    use crate::edge::shim::PAGE_SIZE;
    use std::vec::Vec;

    /// First byte `b` with `f(b)`.
    fn byte(f: impl Fn(u8) -> bool) -> u8 {
        (0..=255).find(|&b| f(b)).expect("an encodable byte")
    }

    /// Builds an ioctl input.
    #[derive(Default)]
    pub(super) struct Ops(pub(super) Vec<u8>);

    /// Where a seed's argument goes.
    #[derive(Clone, Copy)]
    pub(super) enum At {
        Rw,
        Ro,
        Straddle,
        Nowhere,
    }

    /// A segment of a seed's iovec array.
    #[derive(Clone, Copy)]
    pub(super) enum Seg {
        /// In the data pages: offset, length (at most to their end).
        D(u16, u16),
        /// In the data pages at this offset, running past their end.
        Cross(u16, u16),
        /// In the read-only pages.
        R(u16, u16),
        /// Same base as the previous segment, this length.
        Again(u16),
        /// Empty, at this address.
        Empty(u64),
        /// Anything.
        Raw(u64, u64),
    }

    /// Where a seed's iovec array goes, and its `iovec_nr`.
    #[derive(Clone, Copy)]
    pub(super) enum Arr {
        /// End of the iovec page; nr = the segment count.
        End,
        /// End of the page, nr larger by this (1..=4): runs into the guard.
        EndPlus(u8),
        /// Start of the zeroed page, nr larger by this: empty segments.
        StartPlus(u8),
        /// Exactly nr = 2^20 + this (0 or 1).
        Huge(u8),
        /// Inside the read-only pages at this offset (their bytes as
        /// iovecs), nr = this.
        InRo(u16, u32),
    }

    pub(super) const CUSTOM: u8 = 0;
    pub(super) const CURRENT: u8 = 1;

    impl Ops {
        fn b(&mut self, v: u8) -> &mut Self {
            self.0.push(v);
            self
        }
        fn w16(&mut self, v: u16) -> &mut Self {
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn w32(&mut self, v: u32) -> &mut Self {
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn w64(&mut self, v: u64) -> &mut Self {
            self.0.extend_from_slice(&v.to_le_bytes());
            self
        }
        fn op(&mut self, op: u8, ctx: u8) -> &mut Self {
            self.b(op).b(ctx)
        }
        fn at(&mut self, at: At) -> &mut Self {
            match at {
                At::Rw => self.b(0),
                At::Ro => self.b(5),
                At::Straddle => self.b(6),
                At::Nowhere => self.b(7).w64(0x7000_0000_0000),
            }
        }
        fn iovecs(&mut self, arr: Arr, segs: &[Seg]) -> &mut Self {
            let n = segs.len() as u8;
            let place = match arr {
                Arr::End | Arr::EndPlus(_) | Arr::Huge(_) => 0,
                Arr::StartPlus(_) => 1,
                Arr::InRo(..) => 2,
            };
            self.b(byte(|b| b % 7 == n && (b >> 3) % 4 == place));
            for s in segs {
                match *s {
                    Seg::D(off, len) => self.b(0).w16(off).w16(len),
                    Seg::Cross(off, len) => self.b(3).w16(off).w16(len),
                    Seg::R(off, len) => self.b(4).w16(off).w16(len),
                    Seg::Again(len) => self.b(5).w16(len),
                    Seg::Empty(base) => self.b(6).w64(base),
                    Seg::Raw(base, len) => self.b(7).w64(base).w64(len),
                };
            }
            match arr {
                Arr::End => self.b(0),
                Arr::EndPlus(k) | Arr::StartPlus(k) => self.b(5 + ((k - 1) << 3)),
                Arr::Huge(k) => self.b(7 + (k << 3)),
                Arr::InRo(off, nr) => self.b(6).w32(nr).w16(off),
            }
        }
        /// The `i`th cookie ever returned.
        fn nth(&mut self, i: u8) -> &mut Self {
            self.b(3 + (i << 3))
        }
        fn flags(&mut self, f: u8) -> &mut Self {
            if f == 0 {
                self.b(0)
            } else if f & !0x5f == 0 {
                self.b(1).b(f)
            } else {
                self.b(2).b(f)
            }
        }
        fn index(&mut self, i: u8) -> &mut Self {
            self.b(i << 2)
        }
        fn off(&mut self, v: u16) -> &mut Self {
            self.b(1).w16(v)
        }
        fn info(&mut self, ctx: u8, at: At) -> &mut Self {
            self.op(0, ctx).at(at)
        }
        /// BIND_OFFLOAD with a flag choice, a mask length and mask bytes.
        pub(super) fn bind(&mut self, ctx: u8, flags: u8, len: u8, mask: &[u8]) -> &mut Self {
            self.op(1, ctx).at(At::Rw).b(flags);
            if len == 0 {
                self.b(0);
            } else {
                self.b(1 + ((len - 1) << 2));
            }
            self.b((mask.len() as u8) << 2);
            for &m in mask {
                self.b(m);
            }
            self
        }
        pub(super) fn send(&mut self, ctx: u8, segs: &[Seg]) -> &mut Self {
            self.op(2, ctx).at(At::Rw).iovecs(Arr::End, segs).b(0)
        }
        /// CREATE_REGION: flags 0, SINGLEUSE (s), ANY_USER (a).
        #[allow(clippy::too_many_arguments)]
        pub(super) fn create_at(
            &mut self,
            ctx: u8,
            at: At,
            arr: Arr,
            segs: &[Seg],
            single: bool,
            any: bool,
            prot: u8,
        ) -> &mut Self {
            let f = match (single, any) {
                (false, false) => 0,
                (true, false) => 2,
                (false, true) => 3,
                (true, true) => 4,
            };
            self.op(3, ctx)
                .at(at)
                .iovecs(arr, segs)
                .b(f)
                .b(prot)
                .b(0x33)
        }
        pub(super) fn create(&mut self, ctx: u8, segs: &[Seg], prot: u8) -> &mut Self {
            self.create_at(ctx, At::Rw, Arr::End, segs, false, false, prot)
        }
        pub(super) fn create_raw(
            &mut self,
            ctx: u8,
            segs: &[Seg],
            flags: u32,
            prot: u32,
        ) -> &mut Self {
            self.op(3, ctx)
                .at(At::Rw)
                .iovecs(Arr::End, segs)
                .b(6)
                .w32(flags)
                .b(7)
                .w32(prot)
                .b(0)
        }
        pub(super) fn destroy(&mut self, ctx: u8, nth: u8) -> &mut Self {
            self.op(4, ctx).at(At::Rw).nth(nth)
        }
        pub(super) fn async_recv(
            &mut self,
            ctx: u8,
            segs: &[Seg],
            nth: u8,
            flags: u8,
            index: u8,
        ) -> &mut Self {
            self.op(5, ctx)
                .at(At::Rw)
                .iovecs(Arr::End, segs)
                .nth(nth)
                .flags(flags)
                .b(0)
                .index(index)
        }
        pub(super) fn sync_recv(&mut self, ctx: u8, segs: &[Seg], nth: u8, flags: u8) -> &mut Self {
            self.op(6, ctx)
                .at(At::Rw)
                .iovecs(Arr::End, segs)
                .nth(nth)
                .flags(flags)
                .b(0)
        }
        /// COPY(_BOUNDED) from the `src`th cookie to the `dst`th.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn copy(
            &mut self,
            ctx: u8,
            at: At,
            src: u8,
            soff: u16,
            dst: u8,
            doff: u16,
            bound: Option<u16>,
            flags: u8,
            index: u8,
        ) -> &mut Self {
            self.op(if bound.is_some() { 9 } else { 7 }, ctx)
                .at(at)
                .nth(src)
                .off(soff)
                .nth(dst)
                .off(doff);
            if let Some(b) = bound {
                self.off(b);
            }
            self.flags(flags).index(index).b(0xa5)
        }
        /// INLINE_COPY(_BOUNDED) with the `nth` cookie.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn inline(
            &mut self,
            ctx: u8,
            at: At,
            arr: Arr,
            segs: &[Seg],
            write: bool,
            nth: u8,
            off: u16,
            bound: Option<u16>,
            flags: u8,
            index: u8,
        ) -> &mut Self {
            self.op(if bound.is_some() { 10 } else { 8 }, ctx)
                .at(at)
                .iovecs(arr, segs)
                .b(write as u8)
                .nth(nth)
                .off(off);
            if let Some(b) = bound {
                self.off(b);
            }
            self.flags(flags).index(index).b(0)
        }
        pub(super) fn read(&mut self, ctx: u8, segs: &[Seg], nth: u8, off: u16) -> &mut Self {
            self.inline(ctx, At::Rw, Arr::End, segs, false, nth, off, None, 0, 0)
        }
        pub(super) fn undefined(&mut self, ctx: u8, raw: u32) -> &mut Self {
            self.op(11, ctx).b(0).w32(raw).at(At::Rw)
        }
        pub(super) fn near_miss(&mut self, ctx: u8, which: u8, bit: u8) -> &mut Self {
            self.op(11, ctx).b(1 + (which << 1)).b(bit).at(At::Rw)
        }
        pub(super) fn status_array(&mut self, ctx: u8, len: u8) -> &mut Self {
            self.op(12, ctx).b(len)
        }
        pub(super) fn run(&mut self, ctx: u8) -> &mut Self {
            self.op(13, ctx)
        }
        pub(super) fn notify(&mut self, ctx: u8, n: u8) -> &mut Self {
            self.op(14, ctx).b(n - 1)
        }
        /// DMA engine on or off, and its minimum (0, 512, a page, 1).
        pub(super) fn dma(&mut self, on: bool, min: u8) -> &mut Self {
            self.op(15, 0).b(((on as u8) | (min << 1)) << 3)
        }
        pub(super) fn complete(&mut self) -> &mut Self {
            self.op(15, 0).b(1)
        }
        pub(super) fn policy(&mut self, ptrace: bool, denied: bool) -> &mut Self {
            self.op(15, 0)
                .b(2 | ((ptrace as u8 | (denied as u8) << 1) << 3))
        }
        /// RLIMIT_MEMLOCK in pages (None: unlimited).
        pub(super) fn memlock(&mut self, pages: Option<u8>) -> &mut Self {
            self.op(15, 0).b(3 | (pages.map_or(0, |p| p + 1) << 3))
        }
        pub(super) fn pin_max(&mut self, n: u8) -> &mut Self {
            self.op(15, 0).b(4 | (n << 3))
        }
        pub(super) fn release(&mut self, ctx: u8) -> &mut Self {
            self.op(15, ctx).b(5)
        }
        /// The process of `ctx` changes its real uid to `UIDS[uid]`.
        pub(super) fn setuid(&mut self, ctx: u8, uid: u8) -> &mut Self {
            self.op(15, ctx).b(5 | ((3 + 4 * uid) << 3))
        }
        pub(super) fn run_all(&mut self, ctx: u8) -> &mut Self {
            self.op(15, ctx).b(6)
        }
        pub(super) fn complete_all(&mut self) -> &mut Self {
            self.op(15, 0).b(7)
        }
        /// max_offload_threads_per_user = [0, 1, 2, unbounded][bound], and
        /// whether the shim fails to make threads.
        pub(super) fn threads(&mut self, bound: u8, fails: bool) -> &mut Self {
            let x = 3 | (bound << 2) | ((fails as u8) << 4);
            self.op(15, 0).b(6 | (x << 3))
        }
    }

    const PAGE: u16 = PAGE_SIZE as u16;
    const TH: u8 = 0x08; // MEMCPYTHREAD
    const DMA: u8 = 0x01;
    const ADC: u8 = 0x02;
    const PIN: u8 = 0x10;
    const NOTIFY: u8 = 0x40;
    use At::*;
    use Seg::*;

    /// The ioctl seeds: one scenario each.
    pub(super) fn ioctl() -> Vec<(&'static str, Vec<u8>)> {
        let mut v: Vec<(&'static str, Vec<u8>)> = Vec::new();
        let mut add = |name, o: &mut Ops| v.push((name, std::mem::take(&mut o.0)));
        let o = &mut Ops::default();

        o.info(0, Rw).info(1, Ro).info(2, Straddle).info(0, Nowhere);
        add("get-info", o);

        o.create(0, &[D(0, 3 * PAGE)], 3)
            .destroy(1, 0)
            .destroy(0, 0)
            .destroy(0, 0)
            .create(0, &[D(100, 50), Empty(0), D(5000, 7000), Again(10)], 1)
            .create(1, &[], 3)
            .destroy(0, 2);
        add("create-destroy", o);

        o.create_raw(0, &[D(0, 16)], 0x40, 1)
            .create_raw(0, &[D(0, 16)], 0, 4)
            .create(0, &[Raw(u64::MAX - 4, 16)], 1)
            .create(0, &[Raw(0, u64::MAX), Raw(0, 2)], 1)
            .create(0, &[Cross(0, 4 * PAGE + 1)], 1)
            .create(0, &[R(0, 100)], 3)
            .create(0, &[R(10, 2 * PAGE - 10)], 1)
            .create(0, &[Raw(0x1000, 1 << 40)], 1)
            .create_at(0, Ro, Arr::End, &[D(0, 64)], false, false, 1)
            .create_at(0, Straddle, Arr::End, &[D(0, 64)], false, false, 1)
            .create_at(0, Rw, Arr::EndPlus(1), &[D(0, 64)], false, false, 1)
            .create_at(0, Rw, Arr::StartPlus(3), &[D(0, 64)], false, false, 1)
            .create_at(0, Rw, Arr::Huge(1), &[], false, false, 1)
            .create_at(0, Rw, Arr::InRo(8, 2), &[], false, false, 1);
        add("create-errors", o);

        o.send(0, &[D(0, 1000)])
            .sync_recv(1, &[D(8192, 1000)], 0, 0)
            .sync_recv(1, &[D(8192, 1000)], 0, 0)
            .send(0, &[D(0, 10), D(20, 10)])
            .sync_recv(2, &[D(8192, 20)], 1, 0)
            .status_array(1, 1)
            .sync_recv(1, &[D(8192, 20)], 1, TH)
            .sync_recv(1, &[D(8192, 20)], 1, ADC)
            .sync_recv(1, &[D(8192, 20)], 1, PIN)
            .sync_recv(1, &[D(8192, 20)], 1, 0);
        add("send-recv", o);

        o.create(0, &[D(0, 2 * PAGE)], 3)
            .read(0, &[D(9000, 300), D(12000, 5000)], 0, 7)
            .inline(
                0,
                Rw,
                Arr::End,
                &[D(10000, 4000)],
                true,
                0,
                100,
                Some(1500),
                0,
                0,
            )
            .inline(0, Rw, Arr::End, &[R(0, 3000)], true, 0, 0, None, 0, 0)
            .inline(
                1,
                Rw,
                Arr::End,
                &[D(8 * 1024, 5000), D(0, 3)],
                false,
                0,
                4000,
                Some(6000),
                0,
                0,
            )
            .read(0, &[R(0, 500)], 0, 0)
            .read(0, &[Cross(15000, 5000)], 0, 0)
            .inline(0, Ro, Arr::End, &[D(9000, 10)], false, 0, 0, None, 0, 0);
        add("inline-copies", o);

        o.create(0, &[D(0, 4096)], 1)
            .create_at(0, Rw, Arr::End, &[D(4096, 4096)], false, true, 3)
            .read(2, &[D(12000, 100)], 0, 0)
            .read(2, &[D(12000, 100)], 1, 0)
            .inline(1, Rw, Arr::End, &[D(12000, 100)], true, 0, 0, None, 0, 0)
            .read(1, &[D(12000, 100)], 0, 0)
            .policy(true, false)
            .read(2, &[D(12000, 100)], 0, 0)
            .policy(true, true)
            .read(2, &[D(12000, 100)], 0, 0)
            .read(0, &[D(12000, 100)], 0, 0);
        add("access-rules", o);

        // Access follows the caller's uid at each call, not the uid at open.
        o.create(0, &[D(0, 4096)], 1)
            .create_at(0, Rw, Arr::End, &[D(4096, 100)], true, false, 1)
            .setuid(0, 2)
            .read(0, &[D(12000, 100)], 0, 0)
            .read(0, &[D(12000, 100)], 1, 0)
            .inline(0, Rw, Arr::End, &[D(12000, 100)], true, 0, 0, None, 0, 0)
            .read(2, &[D(12000, 100)], 0, 0)
            .setuid(2, 0)
            .read(2, &[D(12000, 100)], 0, 0)
            .setuid(0, 0)
            .read(0, &[D(12000, 100)], 1, 0)
            .policy(true, true)
            .setuid(0, 2)
            .read(0, &[D(12000, 100)], 0, 0)
            .read(2, &[D(12000, 100)], 0, 0);
        add("setuid-after-open", o);

        o.create(0, &[D(0, 6000)], 3)
            .create(1, &[D(6000, 3000), D(12000, 4000)], 3)
            .copy(0, Rw, 0, 10, 1, 20, None, 0, 0)
            .copy(1, Rw, 1, 0, 0, 5000, Some(700), 0, 0)
            .copy(0, Rw, 0, 0, 0, 100, None, 0, 0)
            .copy(0, Rw, 0, 100, 0, 0, Some(5000), 0, 0)
            .copy(0, Ro, 0, 0, 1, 0, None, 0, 0)
            .create_at(0, Rw, Arr::End, &[D(100, 100)], true, false, 3)
            .copy(0, Rw, 2, 0, 2, 0, None, 0, 0)
            .copy(0, Rw, 2, 0, 1, 0, None, 0, 0)
            .copy(0, Rw, 2, 0, 1, 0, None, 0, 0);
        add("region-copies", o);

        o.create(0, &[D(0, 8192)], 3)
            .status_array(1, 4)
            .status_array(1, 4)
            .inline(
                1,
                Rw,
                Arr::End,
                &[D(9000, 3000)],
                false,
                0,
                5,
                None,
                TH | NOTIFY,
                1,
            )
            .inline(
                1,
                Rw,
                Arr::End,
                &[D(12000, 100)],
                true,
                0,
                0,
                Some(50),
                TH,
                2,
            )
            .async_recv(1, &[D(13000, 100)], 0, 0, 3)
            .inline(1, Rw, Arr::End, &[D(9000, 10)], false, 0, 0, None, TH, 4)
            .inline(1, Ro, Arr::End, &[D(9000, 10)], false, 0, 0, None, TH, 0)
            .run(1)
            .notify(1, 4)
            .run_all(1)
            .run(1)
            .notify(1, 2);
        add("thread-copies", o);

        o.create(0, &[D(0, 4096)], 3)
            .create(0, &[D(4096, 4096)], 3)
            .status_array(0, 1)
            .copy(0, Rw, 0, 0, 1, 0, None, TH | NOTIFY, 0)
            .copy(0, Rw, 1, 0, 0, 0, None, TH | NOTIFY, 0)
            .run(0)
            .copy(0, Rw, 1, 0, 0, 0, None, TH | NOTIFY, 0)
            .notify(0, 1)
            .copy(0, Rw, 1, 0, 0, 0, None, TH | NOTIFY, 0)
            .copy(0, Rw, 1, 0, 0, 0, Some(10), NOTIFY, 0)
            .copy(0, Rw, 1, 0, 0, 0, None, TH, 1)
            .run(0)
            .notify(0, 1);
        add("notify-credits", o);

        // One thread for uid 1000: its second fd runs copies in the caller
        // until the first is released; then a shim that cannot make one.
        o.threads(1, false)
            .create(0, &[D(0, 4096)], 3)
            .create(0, &[D(4096, 4096)], 3)
            .create(1, &[D(8192, 4096)], 3)
            .create(1, &[D(12288, 4096)], 3)
            .create(2, &[D(0, 100)], 3)
            .create(2, &[D(200, 100)], 3)
            .status_array(0, 4)
            .status_array(1, 4)
            .status_array(2, 4)
            .copy(0, Rw, 0, 0, 1, 0, None, TH, 0)
            .copy(1, Rw, 2, 0, 3, 0, None, TH | NOTIFY, 1)
            .copy(0, Rw, 1, 0, 0, 0, None, TH, 1)
            .notify(1, 1)
            .run(0)
            .release(0)
            .copy(1, Rw, 3, 0, 2, 0, None, TH, 2)
            .run(1)
            .threads(3, true)
            .copy(2, Rw, 4, 0, 5, 0, None, TH | NOTIFY, 0)
            .notify(2, 1)
            .threads(3, false)
            .copy(2, Rw, 5, 0, 4, 0, None, TH, 1)
            .run_all(2);
        add("thread-bound", o);

        o.dma(true, 0)
            .info(0, Rw)
            .create(0, &[D(0, 6000)], 3)
            .create(1, &[D(8192, 6000)], 3)
            .status_array(0, 2)
            .copy(0, Rw, 0, 0, 1, 0, None, DMA, 0)
            .copy(0, Rw, 1, 0, 0, 0, None, DMA | ADC, 1)
            .inline(
                0,
                Rw,
                Arr::End,
                &[D(15000, 1000)],
                false,
                0,
                0,
                None,
                DMA | ADC,
                0,
            )
            .complete()
            .copy(0, Ro, 0, 0, 1, 0, None, DMA | ADC, 0)
            .copy(0, Rw, 0, 0, 0, 3000, None, DMA | ADC, 0)
            .inline(0, Rw, Arr::End, &[D(15000, 1000)], true, 1, 0, None, DMA, 0)
            .dma(true, 1)
            .copy(0, Rw, 0, 0, 1, 10, None, DMA | ADC, 1)
            .copy(0, Rw, 0, 0, 1, 10, None, DMA | TH, 0)
            .run(0)
            .complete_all()
            .dma(false, 0)
            .copy(0, Rw, 0, 0, 1, 0, None, DMA | ADC, 1);
        add("dma", o);

        o.create(0, &[D(0, 4096)], 3)
            .status_array(0, 8)
            .status_array(1, 8)
            .inline(
                0,
                Rw,
                Arr::End,
                &[D(8192, 4096)],
                false,
                0,
                0,
                None,
                TH | NOTIFY,
                0,
            )
            .inline(0, Rw, Arr::End, &[D(8192, 4096)], false, 0, 0, None, TH, 1)
            .run(0)
            .dma(true, 0)
            .copy(0, Rw, 0, 0, 0, 10, None, DMA | ADC, 2)
            .inline(1, Rw, Arr::End, &[D(12288, 100)], false, 0, 0, None, TH, 0)
            .release(0)
            .run(1)
            .create(0, &[D(0, 100)], 3)
            .release(1)
            .read(1, &[D(500, 10)], 1, 0);
        add("release", o);

        o.memlock(Some(2))
            .create(0, &[D(0, 3 * PAGE)], 1)
            .create(0, &[D(0, 2 * PAGE)], 1)
            .create(1, &[D(0, 1)], 1)
            .status_array(0, 1)
            .inline(0, Rw, Arr::End, &[D(9000, 1)], false, 0, 0, None, TH, 0)
            .memlock(None)
            .pin_max(1)
            .create(1, &[D(100, 3 * PAGE), R(0, 2 * PAGE)], 1)
            .inline(0, Rw, Arr::End, &[D(9000, 5000)], false, 1, 0, None, PIN, 0)
            .pin_max(0);
        add("memlock-and-short-pins", o);

        o.bind(0, CURRENT, 0, &[])
            .bind(0, CUSTOM, 8, &[1, 0, 0, 0, 0, 0, 0, 0])
            .bind(0, CUSTOM, 4, &[0, 0, 0, 0])
            .bind(0, CUSTOM, 0, &[])
            .bind(0, 3, 0, &[])
            .bind(0, 4, 0, &[])
            .status_array(0, 1)
            .bind(0, CURRENT, 0, &[]);
        add("bind-offload", o);

        o.undefined(0, 0)
            .undefined(1, 0x4b00)
            .near_miss(0, 3, 16)
            .near_miss(1, 8, 31)
            .near_miss(2, 0, 0);
        add("undefined-commands", o);

        o.create(0, &[D(0, 8192)], 3)
            .status_array(0, 2)
            .inline(
                0,
                Rw,
                Arr::End,
                &[D(9000, 100), Cross(16000, 1000)],
                false,
                0,
                0,
                None,
                ADC,
                1,
            )
            .inline(0, Rw, Arr::End, &[D(9000, 100)], false, 0, 0, None, PIN, 0)
            .inline(
                0,
                Rw,
                Arr::End,
                &[Cross(16000, 1000)],
                false,
                0,
                0,
                None,
                PIN,
                0,
            )
            .inline(
                0,
                Rw,
                Arr::End,
                &[D(9000, 100), R(0, 100)],
                false,
                0,
                0,
                None,
                PIN,
                0,
            )
            .inline(
                0,
                Rw,
                Arr::End,
                &[R(0, 100)],
                true,
                0,
                0,
                None,
                PIN | ADC,
                0,
            )
            .inline(0, Rw, Arr::End, &[D(9000, 10)], false, 0, 0, None, 0x80, 0)
            .inline(
                0,
                Rw,
                Arr::End,
                &[D(9000, 10)],
                false,
                0,
                0,
                None,
                NOTIFY,
                0,
            )
            .inline(0, Rw, Arr::End, &[D(9000, 10)], false, 0, 0, None, ADC, 5)
            .status_array(0, 8)
            .inline(0, Rw, Arr::End, &[D(9000, 10)], false, 0, 0, None, 63, 3)
            .run_all(0)
            .inline(0, Rw, Arr::End, &[D(9000, 10)], false, 0, 0, None, 0xe0, 0);
        add("pinlocal-and-flags", o);

        o.create(0, &[D(0, 200)], 3)
            .inline(
                0,
                Rw,
                Arr::StartPlus(2),
                &[D(5000, 10)],
                false,
                0,
                0,
                None,
                0,
                0,
            )
            .inline(
                0,
                Rw,
                Arr::EndPlus(1),
                &[D(5000, 10)],
                false,
                0,
                0,
                None,
                0,
                0,
            )
            .inline(0, Rw, Arr::Huge(0), &[], false, 0, 0, None, 0, 0)
            .inline(0, Rw, Arr::InRo(0, 1), &[], false, 0, 0, None, 0, 0)
            .inline(
                0,
                Rw,
                Arr::End,
                &[Raw(u64::MAX, 2)],
                false,
                0,
                0,
                None,
                0,
                0,
            )
            .inline(
                0,
                Rw,
                Arr::End,
                &[Raw(1 << 40, 1 << 63), Raw(0, 1 << 63)],
                false,
                0,
                0,
                None,
                0,
                0,
            )
            .inline(
                0,
                Rw,
                Arr::End,
                &[Raw(1 << 40, 1 << 20)],
                false,
                0,
                0,
                None,
                0,
                0,
            )
            .inline(
                0,
                Straddle,
                Arr::End,
                &[D(5000, 10)],
                false,
                0,
                0,
                None,
                0,
                0,
            );
        add("local-iovecs", o);
        v
    }

    /// Builds a plan input.
    #[derive(Default)]
    pub(super) struct Lists(pub(super) Vec<u8>);

    /// A plan seed's segment.
    #[derive(Clone, Copy)]
    pub(super) enum P {
        /// In the i-th 16 MiB slot, at this offset: length (< 9000).
        Slot(u16, u16),
        Empty(u64),
        /// Continues the previous segment.
        Next(u16),
        /// At 2^64 - 1 - this: length.
        Top(u16, u16),
        Raw(u64, u64),
    }

    impl Lists {
        pub(super) fn list(&mut self, segs: &[P]) -> &mut Self {
            self.0.push(segs.len() as u8);
            for s in segs {
                match *s {
                    P::Slot(off, len) => {
                        self.0.push(0);
                        self.0.extend_from_slice(&off.to_le_bytes());
                        self.0.extend_from_slice(&len.to_le_bytes());
                    }
                    P::Empty(base) => {
                        self.0.push(4);
                        self.0.extend_from_slice(&base.to_le_bytes());
                    }
                    P::Next(len) => {
                        self.0.push(5);
                        self.0.extend_from_slice(&len.to_le_bytes());
                    }
                    P::Top(below, len) => {
                        self.0.push(6);
                        self.0.extend_from_slice(&below.to_le_bytes());
                        self.0.extend_from_slice(&len.to_le_bytes());
                    }
                    P::Raw(base, len) => {
                        self.0.push(7);
                        self.0.extend_from_slice(&base.to_le_bytes());
                        self.0.extend_from_slice(&len.to_le_bytes());
                    }
                }
            }
            self
        }
        /// An offset: small (< 64), 16-bit, raw.
        pub(super) fn off(&mut self, v: u64) -> &mut Self {
            if v < 64 {
                self.0.push((v as u8) << 2);
            } else if v <= u16::MAX as u64 {
                self.0.push(1);
                self.0.extend_from_slice(&(v as u16).to_le_bytes());
            } else {
                self.0.push(2);
                self.0.extend_from_slice(&v.to_le_bytes());
            }
            self
        }
        /// `total - k` (k < 32) or `total + k - 32`.
        pub(super) fn near_end(&mut self, k: u8) -> &mut Self {
            self.0.push(3 | (k << 2));
            self
        }
        pub(super) fn bound(&mut self, b: Option<u64>) -> &mut Self {
            match b {
                None => self.0.push(0),
                Some(v) if v <= u16::MAX as u64 => {
                    self.0.push(1);
                    self.0.extend_from_slice(&(v as u16).to_le_bytes());
                }
                Some(v) => {
                    self.0.push(2);
                    self.0.extend_from_slice(&v.to_le_bytes());
                }
            }
            self
        }
        pub(super) fn steps(&mut self, s: &[u16]) -> &mut Self {
            for v in s {
                self.0.extend_from_slice(&v.to_le_bytes());
            }
            self
        }
    }

    /// The plan seeds.
    pub(super) fn plan() -> Vec<(&'static str, Vec<u8>)> {
        use P::*;
        let mut v: Vec<(&'static str, Vec<u8>)> = Vec::new();
        let mut add = |name, l: &mut Lists| v.push((name, std::mem::take(&mut l.0)));
        let l = &mut Lists::default();
        l.list(&[]).list(&[]).off(0).off(0).bound(None).off(0);
        add("empty", l);
        l.list(&[Slot(0xffe, 8)])
            .list(&[Slot(0, 8)])
            .off(0)
            .off(0)
            .bound(None)
            .off(1)
            .steps(&[1, 0]);
        add("page-straddle", l);
        l.list(&[
            Slot(100, 0),
            Slot(4000, 5000),
            Empty(7),
            Next(3000),
            Slot(1, 0),
        ])
        .list(&[Slot(4095, 2), Slot(0, 8999), Empty(0)])
        .off(50)
        .off(1)
        .bound(Some(6000))
        .near_end(1)
        .steps(&[2, 100, 0, 0]);
        add("empty-and-adjacent-segments", l);
        l.list(&[Slot(3, 8999), Slot(4093, 8999), Slot(17, 8999)])
            .list(&[Slot(0, 5), Slot(4091, 8999), Next(8999), Slot(2, 4097)])
            .off(4000)
            .off(8000)
            .bound(Some(12345))
            .off(8999)
            .steps(&[4096, 1, 0]);
        add("many-pages", l);
        l.list(&[Slot(0, 100)])
            .list(&[Slot(0, 100)])
            .near_end(0)
            .near_end(33)
            .bound(Some(0))
            .near_end(32);
        add("offsets-at-and-past-the-end", l);
        l.list(&[Slot(0, 100)])
            .list(&[Slot(0, 100)])
            .off(u64::MAX)
            .off(u64::MAX)
            .bound(Some(u64::MAX))
            .off(u64::MAX);
        add("offsets-2-64", l);
        l.list(&[Top(0, 1)])
            .list(&[Top(4095, 4096)])
            .off(0)
            .off(0)
            .bound(None)
            .off(0);
        add("top-of-address-space", l);
        l.list(&[Top(0, 2)]).list(&[Slot(0, 1)]);
        add("wrapping-segment", l);
        l.list(&[Raw(0, u64::MAX), Raw(0, 1)]).list(&[Slot(0, 1)]);
        add("total-overflow", l);
        l.list(&[Raw(0, u64::MAX), Raw(u64::MAX, 1)]).list(&[]);
        add("wrap-and-overflow", l);
        l.list(&[Raw(0x1000, 1 << 40), Slot(5, 100)])
            .list(&[Raw(0x123, 1 << 50)])
            .off(1 << 39)
            .off(7)
            .bound(None)
            .off(1 << 40)
            .steps(&[0, 0, 0]);
        add("huge-segments", l);
        l.list(&[
            Raw(0x1000, 1 << 62),
            Raw(0x2000, 1 << 62),
            Raw(0, 1 << 62),
            Raw(0, (1 << 62) - 1),
        ])
        .list(&[Slot(0, 10)])
        .near_end(1)
        .off(0)
        .bound(None)
        .near_end(0);
        add("total-just-fits", l);
        v
    }
}

/// The `seed-*` files of the checked-in corpus are exactly what the seed
/// builder makes, and each passes; `KNEM_WRITE_SEEDS=1 cargo test -p
/// knem-core --lib seeds_match` rewrites them after a change here.
#[test]
fn seeds_match_the_builder() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let write = std::env::var_os("KNEM_WRITE_SEEDS").is_some_and(|v| v == "1");
    for (target, seeds) in [("ioctl", seeds::ioctl()), ("plan", seeds::plan())] {
        let dir = root.join(target);
        for (name, data) in seeds {
            match target {
                "ioctl" => {
                    ioctl::run(&data);
                }
                _ => plan::run(&data),
            }
            let path = dir.join(format!("seed-{name}"));
            if write {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &data).unwrap();
            } else {
                let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
                    panic!("{}: {e} (KNEM_WRITE_SEEDS=1 writes it)", path.display())
                });
                assert!(
                    on_disk == data,
                    "{} differs from its builder (KNEM_WRITE_SEEDS=1 rewrites it)",
                    path.display()
                );
            }
        }
    }
}
