//! What every call is checked against: the predicted errno set, the
//! per-errno counters, user memory byte by byte, and the resources after
//! every operation.

use super::model::*;
use super::*;

impl Harness {
    /// Expected destination bytes of a copy of `src[k]` to `dst[k]` of
    /// which the first `sure` bytes were copied and the next up to `maybe`
    /// may have been.  A destination written twice may end up with any
    /// value, and so may one whose source is also a destination, unless
    /// the copy is a `snapshot` (memmove: every source read before any
    /// destination is written).
    pub(super) fn expect(
        &self,
        src: &[u64],
        dst: &[u64],
        sure: usize,
        maybe: usize,
        snapshot: bool,
    ) -> Vec<(u64, Want)> {
        let dsts: HashSet<u64> = dst[..maybe].iter().copied().collect();
        let mut count = vec![0u32; DATA_LEN as usize];
        for &a in &dst[..maybe] {
            if a >= self.data && a - self.data < DATA_LEN {
                count[(a - self.data) as usize] += 1;
            }
        }
        let mut out = Vec::new();
        for k in 0..maybe {
            let a = dst[k];
            if a < self.data || a - self.data >= DATA_LEN {
                continue;
            }
            let v = if !snapshot && dsts.contains(&src[k]) {
                None
            } else {
                self.value(src[k])
            };
            let w = match v {
                Some(v) if count[(a - self.data) as usize] == 1 => {
                    if k < sure {
                        Want::Exact(v)
                    } else {
                        Want::Either(self.data_shadow[(a - self.data) as usize], v)
                    }
                }
                _ => Want::Any,
            };
            out.push((a, w));
        }
        out
    }

    /// Everything in the data pages may have changed.
    pub(super) fn anything(&self) -> Vec<(u64, Want)> {
        (0..DATA_LEN).map(|i| (self.data + i, Want::Any)).collect()
    }

    /// Compares memory with the model plus `want`, then adopts it.
    pub(super) fn check_mem(&mut self, want: &[(u64, Want)]) {
        let env = &self.dev.env;
        let now_r = env.peek(self.ro, RO_LEN as usize);
        assert!(now_r == self.ro_shadow, "read-only memory changed");
        let now = env.peek(self.data, DATA_LEN as usize);
        if want.is_empty() {
            if now != self.data_shadow {
                let i = (0..now.len())
                    .find(|&i| now[i] != self.data_shadow[i])
                    .unwrap();
                panic!(
                    "data byte {i} changed: {} -> {}",
                    self.data_shadow[i], now[i]
                );
            }
            return;
        }
        let mut w: Vec<Option<Want>> = vec![None; DATA_LEN as usize];
        for &(a, x) in want {
            w[(a - self.data) as usize] = Some(x);
        }
        for (i, x) in w.iter().enumerate() {
            let (old, got) = (self.data_shadow[i], now[i]);
            let good = match *x {
                None => got == old,
                Some(Want::Exact(v)) => got == v,
                Some(Want::Either(a, b)) => got == a || got == b,
                Some(Want::Any) => true,
            };
            assert!(good, "data byte {i}: {got}, was {old}, want {x:?}");
        }
        self.data_shadow = now;
    }

    /// Pinning `segs`: the page array, RLIMIT_MEMLOCK, then the pages.
    /// None when the page array would be too big to be worth it (the
    /// operation is skipped).
    pub(super) fn pin_errs(&self, errs: &mut Errs, segs: &[Iov], write: bool) -> Option<u64> {
        let pages = pages_of(segs);
        if pages * 8 > MAX_ALLOC as u128 {
            errs.add(ENOMEM);
            return Some(0);
        }
        if pages > MAX_PAGE_ARRAY {
            return None;
        }
        if matches!(self.memlock, Some(lim) if self.pinned() as u128 + pages > lim as u128) {
            errs.add(ENOMEM);
        }
        if !self.space.pinnable(segs, write) {
            errs.add(EFAULT);
        }
        Some(pages as u64)
    }

    /// One ioctl; checks the errno counters moved as they should.
    pub(super) fn ioctl(&mut self, c: usize, cmd: u32, arg: u64) -> i64 {
        let before = self.dev.stats.snapshot();
        let ret = self
            .dev
            .ioctl_as(self.kctx(c), self.ctxs[c].caller_uid, cmd, arg);
        let after = self.dev.stats.snapshot();
        let errs = |s: &KnemCoreStats| {
            [
                s.err_einval,
                s.err_eperm,
                s.err_eacces,
                s.err_efault,
                s.err_enomem,
                s.err_ebusy,
                s.err_enotty,
                s.err_other,
            ]
        };
        let (b, a) = (errs(&before), errs(&after));
        let which = [EINVAL, EPERM, EACCES, EFAULT, ENOMEM, EBUSY, ENOTTY]
            .iter()
            .position(|e| e.to_neg() == ret)
            .unwrap_or(7);
        for i in 0..8 {
            let bump = (ret != 0 && i == which) as u64;
            assert_eq!(a[i], b[i] + bump, "error counter {i} after {ret}");
        }
        ret
    }

    /// Checks `ret` against the prediction.
    pub(super) fn end(&self, what: &str, errs: Errs, late: bool, ret: i64) -> End {
        if !errs.is_empty() {
            assert!(errs.has(ret), "{what}: got {ret}, want one of {errs:?}");
            End::Early
        } else if late {
            assert_eq!(ret, EFAULT.to_neg(), "{what}: the output is unwritable");
            End::Late
        } else {
            assert_eq!(ret, 0, "{what}: must succeed");
            End::Ok
        }
    }

    pub(super) fn count(&mut self, cmd: u32, ret: i64) {
        let i = CMDS.iter().position(|&c| c == cmd).unwrap();
        if ret == 0 {
            self.sum.ok[i] += 1;
        } else {
            self.sum.failed[i] += 1;
        }
    }

    /// The model's resources against the core's and the mock kernel's.
    pub(super) fn check_state(&self) {
        let s = self.dev.stats.snapshot();
        let env = &self.dev.env;
        let live: Vec<&Obj> = self.objs.iter().flatten().collect();
        let counted = live.iter().filter(|o| o.counted).count() as u64;
        let pinned = self.pinned();
        assert_eq!(s.regions, counted, "live regions");
        assert_eq!(s.pinned_pages, pinned, "pinned pages");
        assert_eq!(env.pinned() as u64, pinned, "pins held in the mock");
        assert_eq!(env.pinned_vm.load(SeqCst), pinned, "pinned_vm");
        assert_eq!(env.owners.load(SeqCst), live.len(), "owner records");
        assert_eq!(
            env.rcu_freed.load(SeqCst) as u64,
            self.created - live.len() as u64,
            "regions freed through RCU"
        );
        assert_eq!(s.regions_created, self.regions_created, "regions created");
        assert_eq!(
            (s.bytes_inline_read, s.bytes_inline_write),
            (self.bytes_read, self.bytes_write),
            "inline bytes"
        );
        assert_eq!(s.bytes_region_copy, self.bytes_pair, "region copy bytes");
        assert_eq!(s.bytes_async, self.bytes_async, "asynchronous bytes");
        assert_eq!(s.copies_failed, self.copies_failed, "failed copies");
        assert_eq!(s.contexts, self.kctx.iter().flatten().count() as u64);
        let workers = self.ctxs.iter().filter(|m| m.worker).count() as u64;
        assert_eq!(s.offload_threads, workers, "offload threads");
        for &uid in UIDS.iter() {
            let mine = self.ctxs.iter().filter(|m| m.worker && m.uid == uid);
            assert_eq!(
                self.dev.workers.of(&self.dev.env, uid as u64),
                mine.count() as u64
            );
        }
        assert_eq!(
            s.offload_fallbacks, self.sum.fallback_done as u64,
            "thread copies run in the caller"
        );
        // Only ASYNCDMACOMPLETE batches stay open, until the engine is done.
        assert_eq!(env.dma.inflight.lock().unwrap().len(), self.dma_q.len());
        assert_eq!(
            env.dma.open.load(SeqCst),
            self.dma_q.len() as i64,
            "DMA batches open"
        );
        for (c, (k, m)) in self.kctx.iter().zip(&self.ctxs).enumerate() {
            let Some(k) = k else { continue };
            assert_eq!(k.has_queued(), !m.pending.is_empty(), "queued requests");
            assert_eq!(k.has_ready(), !m.ready.is_empty(), "ready notifications");
            assert_eq!(k.notify_in_flight(), m.credits, "notification credits");
            assert_eq!(
                k.dma_async_in_flight(),
                self.dma_q.iter().filter(|&&(cc, _)| cc == c).count() as u64,
                "ASYNCDMACOMPLETE requests in flight"
            );
            assert_eq!(k.has_status_array(), m.array.is_some());
            if let Some((i, slots)) = &m.array {
                for (j, want) in slots.iter().enumerate() {
                    assert_eq!(self.arrays[*i][j].load(SeqCst), *want, "status slot {j}");
                }
            }
        }
    }
}
