//! The operations of a sequence: one per command, undefined commands, and
//! the thread, engine, release and policy events, each predicted by the
//! model and then checked.

use super::model::*;
use super::*;

impl Harness {
    pub(super) fn get_info(&mut self, inp: &mut Input<'_>, c: usize) {
        let p = self.place(inp, 16);
        let arg = self.put_arg(p, &[0x5a; 16]);
        let mut errs = Errs::default();
        if !self.space.ok(arg, 16, true) {
            errs.add(EFAULT);
        }
        let ret = self.ioctl(c, cmd::GET_INFO, arg);
        self.count(cmd::GET_INFO, ret);
        if self.end("GET_INFO", errs, false, ret) == End::Ok {
            let want = knem_cmd_info {
                abi: 0x0d,
                features: if self.dma_on { KNEM_FEATURE_DMA } else { 0 },
                ignored_flags: if self.dma_on { 0 } else { KNEM_FLAG_DMA },
                forced_flags: 0,
            };
            assert_eq!(self.dev.env.get::<knem_cmd_info>(arg), want);
        }
    }

    pub(super) fn bind(&mut self, inp: &mut Input<'_>, c: usize) {
        let p = self.place(inp, 16);
        let flags = match inp.u8() % 8 {
            0 | 6 | 7 => KNEM_BIND_FLAG_CUSTOM,
            1 => KNEM_BIND_FLAG_CURRENT,
            2 => KNEM_BIND_FLAG_CURRENT_REVERSED,
            3 => 0,
            4 => KNEM_BIND_FLAG_CUSTOM | KNEM_BIND_FLAG_CURRENT,
            _ => inp.u32(),
        };
        let b = inp.u8();
        let mask_len = match b % 4 {
            0 => 0,
            1 => 1 + (b >> 2) as u32 % 16,
            2 => inp.u16() as u32 % 1100,
            _ => inp.u32(),
        };
        let b = inp.u8();
        let env = &self.dev.env;
        let mask_ptr = match b % 4 {
            0 | 1 => {
                env.fill(self.mask, &[0; PAGE_SIZE as usize]);
                let content: Vec<u8> = (0..(b >> 2) % 17).map(|_| inp.u8()).collect();
                env.fill(self.mask, &content);
                self.mask
            }
            2 => self.mask + PAGE_SIZE - (b >> 2) as u64,
            _ => {
                let a = inp.u64();
                if self.space.overlaps(a, 1024) {
                    0
                } else {
                    a
                }
            }
        };
        let s = knem_cmd_bind_offload {
            flags,
            mask_len,
            mask_ptr,
        };
        let arg = self.put_arg(p, &as_bytes(&s));
        let mut errs = Errs::default();
        let m = mask_len.min(1024) as u64;
        if !self.space.ok(arg, 16, false) {
            errs.add(EFAULT);
        } else {
            if flags & !7 != 0 || !flags.is_power_of_two() {
                errs.add(EINVAL);
            }
            if self.ctxs[c].array.is_some() {
                errs.add(EBUSY);
            }
            if flags == KNEM_BIND_FLAG_CUSTOM {
                if mask_len == 0 {
                    errs.add(EINVAL);
                } else if !self.space.ok(mask_ptr, m, false) {
                    errs.add(EFAULT);
                } else if env
                    .peek(mask_ptr, m.min(8) as usize)
                    .iter()
                    .all(|&x| x == 0)
                {
                    errs.add(EINVAL);
                }
            }
        }
        let before = self.dev.env.bound.lock().unwrap().clone();
        let ret = self.ioctl(c, cmd::BIND_OFFLOAD, arg);
        self.count(cmd::BIND_OFFLOAD, ret);
        let now = self.dev.env.bound.lock().unwrap().clone();
        if self.end("BIND_OFFLOAD", errs, false, ret) == End::Ok {
            let mask = if flags == KNEM_BIND_FLAG_CUSTOM {
                self.dev.env.peek(mask_ptr, m as usize)
            } else {
                Vec::new()
            };
            assert_eq!(now, Some((flags, mask)), "the binding the shim got");
        } else {
            assert_eq!(now, before, "a failed BIND_OFFLOAD bound");
        }
    }

    /// CREATE_REGION, or INIT_SEND (a read-only single-use region).
    pub(super) fn create(&mut self, inp: &mut Input<'_>, c: usize, legacy: bool) {
        let size = if legacy { 24 } else { 32 };
        let p = self.place(inp, size);
        let (arr, nr) = self.iovecs(inp);
        let flags = Self::create_flags(inp);
        let (cmdno, bytes, cookie_at, prot, flags_eff) = if legacy {
            let s = knem_cmd_init_send_param {
                send_iovec_array: arr,
                send_iovec_nr: nr,
                flags,
                send_cookie: OUT_SENTINEL,
            };
            (
                cmd::INIT_SEND,
                as_bytes(&s),
                16,
                1,
                (flags & KNEM_FLAG_ANY_CREATE_MASK) | KNEM_FLAG_SINGLEUSE,
            )
        } else {
            let b = inp.u8();
            let prot = match b % 8 {
                0..=3 => (b % 4) as u32,
                4..=6 => (b >> 3) as u32,
                _ => inp.u32(),
            };
            let s = knem_cmd_create_region {
                iovec_array: arr,
                iovec_nr: nr,
                flags,
                protection: prot,
                pad: Self::pad(inp),
                cookie: OUT_SENTINEL,
            };
            (
                cmd::CREATE_REGION,
                as_bytes(&s),
                24,
                prot,
                flags & KNEM_FLAG_ANY_CREATE_MASK,
            )
        };
        let arg = self.put_arg(p, &bytes);
        let mut errs = Errs::default();
        let mut late = false;
        let mut made = None;
        if !self.space.ok(arg, size, false) {
            errs.add(EFAULT);
        } else {
            // Flags outside the mask are dropped, not refused.
            if prot & !3 != 0 {
                errs.add(EINVAL);
            }
            if let Some(segs) = self.local(&mut errs, arr, nr) {
                let Some(pages) = self.pin_errs(&mut errs, &segs, prot & 2 != 0) else {
                    return;
                };
                made = Some((segs, pages));
            }
            late = !self.space.ok(arg + cookie_at, 8, true);
        }
        let ret = self.ioctl(c, cmdno, arg);
        self.count(cmdno, ret);
        let what = if legacy { "INIT_SEND" } else { "CREATE_REGION" };
        match self.end(what, errs, late, ret) {
            End::Early => {}
            End::Late => {
                // Created, then destroyed when the cookie could not be
                // written back.
                self.created += 1;
                self.regions_created += 1;
            }
            End::Ok => {
                let cookie: u64 = self.dev.env.get(arg + cookie_at);
                assert!(cookie != 0 && cookie != OUT_SENTINEL, "cookie {cookie:#x}");
                assert!(
                    !self.table.contains_key(&cookie),
                    "cookie reused while live"
                );
                let (segs, pages) = made.expect("a valid region");
                let obj = self.new_obj(segs, pages, true);
                self.regions_created += 1;
                let ctx = &self.ctxs[c];
                self.table.insert(
                    cookie,
                    Entry {
                        obj,
                        owner: ctx.id,
                        uid: ctx.uid,
                        prot,
                        flags: flags_eff,
                    },
                );
                self.history.push(cookie);
            }
        }
    }

    pub(super) fn destroy(&mut self, inp: &mut Input<'_>, c: usize) {
        let p = self.place(inp, 8);
        let cookie = self.cookie(inp);
        let arg = self.put_arg(p, &cookie.to_le_bytes());
        let mut errs = Errs::default();
        if !self.space.ok(arg, 8, false) {
            errs.add(EFAULT);
        } else if !matches!(self.table.get(&cookie), Some(e) if e.owner == self.ctxs[c].id) {
            errs.add(EINVAL);
        }
        let ret = self.ioctl(c, cmd::DESTROY_REGION, arg);
        self.count(cmd::DESTROY_REGION, ret);
        if self.end("DESTROY_REGION", errs, false, ret) == End::Ok {
            let e = self.table.remove(&cookie).unwrap();
            self.put(e.obj);
        }
    }

    /// Every copy command.
    pub(super) fn copy(&mut self, inp: &mut Input<'_>, c: usize, kind: Kind) {
        let (cmdno, size) = match kind {
            Kind::Inline { bounded: false } => (cmd::INLINE_COPY, 48),
            Kind::Inline { bounded: true } => (cmd::INLINE_COPY_BOUNDED, 56),
            Kind::SyncRecv => (cmd::SYNC_RECV, 32),
            Kind::AsyncRecv => (cmd::INIT_ASYNC_RECV, 32),
            Kind::Pair { bounded: false } => (cmd::COPY, 48),
            Kind::Pair { bounded: true } => (cmd::COPY_BOUNDED, 56),
        };
        let p = self.place(inp, size);
        let (a, arg) = self.copy_arg(inp, kind, p);
        let pair = matches!(kind, Kind::Pair { .. });

        // The prediction.
        // KNEM masks flags, it does not refuse them: bits outside the
        // copy mask are dropped (and SYNC_RECV drops the async ones).
        let flags = KNEM_FLAG_ANY_COPY_MASK
            & match kind {
                Kind::AsyncRecv => a.flags | KNEM_FLAG_MEMCPYTHREAD,
                Kind::SyncRecv => a.flags & !(KNEM_FLAG_ANY_ASYNC_MASK | KNEM_FLAG_NOTIFY_FD),
                _ => a.flags,
            };
        let thread = flags & KNEM_FLAG_ANY_THREAD_MASK != 0;
        let notify = flags & KNEM_FLAG_NOTIFY_FD != 0;
        let adc = flags & KNEM_FLAG_ASYNCDMACOMPLETE != 0;
        let dma = flags & KNEM_FLAG_DMA != 0 && self.dma_on;
        let is_async = thread || (adc && dma);
        let pinned = is_async || flags & KNEM_FLAG_PINLOCAL != 0 || dma;
        let status_ok = a.status_at.is_none_or(|o| {
            arg.checked_add(o)
                .is_some_and(|u| self.space.ok(u, 4, true))
        });
        let mut errs = Errs::default();
        let mut late = false;
        let mut remote = None;
        let mut dst = None;
        let mut local = None;
        let mut local_pages = 0;
        let mut same_single = false;
        if !self.space.ok(arg, size, false) {
            errs.add(EFAULT);
        } else {
            if notify && (!thread || adc) {
                errs.add(EINVAL);
            }
            let len = self.ctxs[c].array.as_ref().map(|(_, s)| s.len() as u64);
            let slot_ok = matches!(len, Some(n) if (a.index as u64) < n);
            if (thread || adc) && !slot_ok {
                errs.add(EINVAL);
            }
            if thread && notify && slot_ok && self.ctxs[c].credits >= len.unwrap() {
                errs.add(EBUSY);
            }
            let dma_async = self.dma_q.iter().filter(|&&(cc, _)| cc == c).count() as u64;
            if adc && dma && !thread && slot_ok && dma_async >= len.unwrap().min(DMA_ASYNC_MAX) {
                errs.add(EBUSY);
            }
            match self.lookup(c, a.cookie, !pair && a.write) {
                Ok(e) => remote = Some(e),
                Err(e) => errs.add(e),
            }
            if pair {
                match self.lookup(c, a.dst_cookie, true) {
                    Ok(e) => dst = Some(e),
                    Err(e) => errs.add(e),
                }
                let single = remote.is_some_and(|e| e.flags & KNEM_FLAG_SINGLEUSE != 0);
                if dst.is_some() && a.cookie == a.dst_cookie && single {
                    // consume_pair cannot take the same region twice; an
                    // asynchronous request says PENDING before that.
                    same_single = true;
                    if is_async && !status_ok {
                        errs.add(EFAULT);
                    }
                    errs.add(EINVAL);
                }
            } else if let Some(segs) = self.local(&mut errs, a.arr, a.nr) {
                if pinned {
                    // The caller's pages are written when it reads.
                    let Some(n) = self.pin_errs(&mut errs, &segs, !a.write) else {
                        return;
                    };
                    local_pages = n;
                }
                local = Some(segs);
            }
            late = !status_ok;
        }

        let before = self.dev.stats.snapshot();
        let ret = self.ioctl(c, cmdno, arg);
        self.count(cmdno, ret);
        let end = self.end("copy", errs, late, ret);
        let after = self.dev.stats.snapshot();
        if end == End::Early {
            // A failed copy leaves current_status alone, except that an
            // asynchronous COPY of a single-use region onto itself said
            // PENDING before it found out.
            if let Some(o) = a.status_at {
                if self.space.ok(arg, size, true) && !(same_single && is_async) {
                    let st: u32 = self.dev.env.get(arg + o);
                    assert_eq!(st, OUT_SENTINEL as u32, "status written by a failed copy");
                }
            }
            self.check_mem(&[]);
            return;
        }
        let pinned_local = !pair && pinned;
        if is_async && end == End::Late {
            // Pinned, then released when PENDING could not be written.
            if pinned_local {
                self.created += 1;
            }
            self.check_mem(&[]);
            return;
        }
        let st_at = a.status_at.map(|o| arg + o);

        // What the request holds while it runs: a reference on each side
        // (the caller's pinned side is new), or on the region alone for a
        // plain inline copy.
        let remote = remote.unwrap();
        let local_obj = if pinned_local {
            let segs = local.clone().unwrap();
            Some(self.new_obj(segs, local_pages, false))
        } else {
            None
        };
        let (src, src_off, dst_obj, dst_off) = match (pair, local_obj) {
            (true, _) => (remote.obj, a.offset, dst.unwrap().obj, a.dst_offset),
            (false, Some(l)) if a.write => (l, 0, remote.obj, a.offset),
            (false, Some(l)) => (remote.obj, a.offset, l, 0),
            (false, None) => (remote.obj, a.offset, remote.obj, 0),
        };
        let held: Vec<usize> = if pair || local_obj.is_some() {
            vec![src, dst_obj]
        } else {
            vec![remote.obj]
        };
        for &o in &held {
            if Some(o) != local_obj {
                self.get(o);
            }
        }
        self.consume(a.cookie);
        if pair && a.dst_cookie != a.cookie {
            self.consume(a.dst_cookie);
        }
        let job = Job {
            src,
            src_off,
            dst: dst_obj,
            dst_off,
            bound: a.bound,
            index: a.index,
            notify,
            split: self.dma_min > 0,
        };

        if is_async {
            if let Some(u) = st_at {
                assert_eq!(self.dev.env.get::<u32>(u), 0, "PENDING");
            }
            if thread {
                if notify {
                    self.ctxs[c].credits += 1;
                }
                if self.worker_for(c) {
                    self.ctxs[c].pending.push_back(job);
                    self.check_mem(&[]);
                } else {
                    // No thread to be had: done before the ioctl returns.
                    self.finish_job(c, job, true);
                    self.sum.fallback_done += 1;
                }
            } else if (pair && src == dst_obj) || !self.disjoint(dst_obj) {
                // A region onto itself, or a destination whose segments
                // may overlap: the CPU copies at once.
                self.finish_job(c, job, true);
            } else {
                let want = match self.transfer(&job) {
                    Some((src, dst)) if job.split => self.expect(&src, &dst, 0, src.len(), false),
                    Some(_) => Vec::new(),
                    None => self.anything(),
                };
                self.check_mem(&want);
                self.dma_q.push_back((c, job));
            }
            return;
        }

        // Synchronous: the copy is done, its status reported.
        let (want, moved, ok) = if pair || local_obj.is_some() {
            let (want, n) = self.expect_full(&job);
            (want, n, true)
        } else {
            self.plain_inline(&a, &remote, local.as_deref().unwrap(), &before, &after)
        };
        let st = if ok { 1 } else { 2 };
        if pair {
            self.bytes_pair += moved;
        } else if a.write {
            self.bytes_write += moved;
        } else {
            self.bytes_read += moved;
        }
        if !ok {
            self.copies_failed += 1;
            self.sum.copy_failed += 1;
        }
        if adc {
            self.set_slot(c, a.index, st);
        }
        if end == End::Ok {
            assert_eq!(self.dev.env.get::<u32>(st_at.unwrap()), st as u32, "status");
        }
        for o in held {
            self.put(o);
        }
        self.check_mem(&want);
    }

    /// A synchronous inline copy through copy_{to,from}_user: stops at the
    /// chunk holding the first byte of the caller's side it cannot access.
    pub(super) fn plain_inline(
        &mut self,
        a: &CopyArg,
        remote: &Entry,
        local: &[Iov],
        before: &KnemCoreStats,
        after: &KnemCoreStats,
    ) -> (Vec<(u64, Want)>, u64, bool) {
        let rsegs = &self.obj(remote.obj).segs;
        let len = total_of(rsegs)
            .saturating_sub(a.offset)
            .min(total_of(local))
            .min(a.bound.unwrap_or(u64::MAX));
        let moved = if a.write {
            after.bytes_inline_write - before.bytes_inline_write
        } else {
            after.bytes_inline_read - before.bytes_inline_read
        };
        if len > MAX_MODELLED {
            return (self.anything(), moved, moved == len);
        }
        let remote = flat(rsegs, a.offset, len);
        let l = flat(local, 0, len);
        let bad = l
            .iter()
            .position(|&x| !self.space.ok(x, 1, !a.write))
            .map(|f| f as u64);
        match bad {
            None => assert_eq!(moved, len, "bytes of a copy that cannot fault"),
            Some(f) => assert!(
                moved <= f && f - moved < PAGE_SIZE,
                "stopped at {moved}, first bad byte {f}"
            ),
        }
        let (src, dst) = if a.write { (l, remote) } else { (remote, l) };
        let n = moved as usize;
        let want = self.expect(&src, &dst, n, n, false);
        if bad.is_none() && want.iter().all(|(_, w)| matches!(w, Want::Exact(_))) {
            self.sum.data_exact += 1;
        }
        (want, moved, bad.is_none())
    }

    /// A request done by the thread or the engine (or the CPU at once):
    /// data, byte count, slot SUCCESS, references given up, notification.
    pub(super) fn finish_job(&mut self, c: usize, job: Job, now: bool) {
        let (mut want, n) = self.expect_full(&job);
        if !now && job.split {
            // The engine's pieces land now; the small ones already did.
            for (a, w) in want.iter_mut() {
                if let Want::Exact(v) = *w {
                    *w = Want::Either(self.data_shadow[(*a - self.data) as usize], v);
                }
            }
        }
        self.bytes_async += n;
        self.check_mem(&want);
        self.set_slot(c, job.index, 1);
        self.put(job.src);
        self.put(job.dst);
        if job.notify {
            self.ctxs[c].ready.push_back(job.index);
        }
    }

    /// Whether context c has an offload thread, giving it one when its
    /// user has fewer than the bound and the shim can make one.
    fn worker_for(&mut self, c: usize) -> bool {
        if !self.ctxs[c].worker {
            let uid = self.ctxs[c].uid;
            let live = self
                .ctxs
                .iter()
                .filter(|m| m.worker && m.uid == uid)
                .count() as u64;
            self.ctxs[c].worker = live < self.thread_bound && !self.spawn_fails;
        }
        self.ctxs[c].worker
    }

    pub(super) fn run_thread(&mut self, c: usize) -> bool {
        let ran = self.dev.run_async(self.kctx(c));
        assert_eq!(ran, !self.ctxs[c].pending.is_empty(), "run_async");
        if let Some(job) = self.ctxs[c].pending.pop_front() {
            self.finish_job(c, job, true);
            self.sum.thread_done += 1;
        }
        ran
    }

    pub(super) fn complete_dma(&mut self) -> bool {
        let done = self.dev.env.dma.complete_async(&self.dev);
        assert_eq!(done, !self.dma_q.is_empty(), "complete_async");
        if let Some((c, job)) = self.dma_q.pop_front() {
            self.finish_job(c, job, false);
            self.sum.dma_done += 1;
        }
        done
    }

    pub(super) fn read_notify(&mut self, c: usize, n: usize) {
        let mut buf = [0u32; 4];
        let got = self.dev.read_notify(self.kctx(c), &mut buf[..n]);
        let m = &mut self.ctxs[c];
        let want: Vec<u32> = (0..n).map_while(|_| m.ready.pop_front()).collect();
        assert_eq!(&buf[..got], &want[..], "notifications");
        m.credits -= got as u64;
        self.sum.notified += got as u32;
    }

    pub(super) fn status_array(&mut self, c: usize, len: usize) {
        let arr: Box<[AtomicU8]> = (0..len.max(1))
            .map(|_| AtomicU8::new(SLOT_SENTINEL))
            .collect();
        // SAFETY: once accepted, the array lives in `self.arrays` until
        // the end of the run, after every context has been released (a
        // refused one is not kept by the core); its bytes are atomics, so
        // the core may write them through this pointer while the harness
        // reads them.
        let ret = unsafe {
            self.kctx(c)
                .set_status_array(arr.as_ptr() as *mut u8, len as u64)
        };
        if self.ctxs[c].array.is_some() {
            assert_eq!(ret, Err(EBUSY), "a second status array");
            return;
        }
        assert_eq!(ret, Ok(()));
        self.arrays.push(arr);
        self.ctxs[c].array = Some((self.arrays.len() - 1, vec![SLOT_SENTINEL; len]));
    }

    /// File release: the engine finishes the context's requests first (the
    /// shim waits for them), queued ones are dropped unrun, its regions go.
    pub(super) fn release(&mut self, c: usize, reopen: bool) {
        while self.dma_q.iter().any(|&(cc, _)| cc == c) {
            self.complete_dma();
        }
        let k = self.kctx[c].take().expect("open context");
        self.dev.ctx_release(k);
        let m = &mut self.ctxs[c];
        let jobs: Vec<Job> = m.pending.drain(..).collect();
        m.ready.clear();
        m.credits = 0;
        m.array = None;
        m.worker = false;
        let id = m.id;
        self.sum.dropped += jobs.len() as u32;
        for j in jobs {
            self.put(j.src);
            self.put(j.dst);
        }
        let mine: Vec<u64> = self
            .table
            .iter()
            .filter(|(_, e)| e.owner == id)
            .map(|(&k, _)| k)
            .collect();
        for k in mine {
            let e = self.table.remove(&k).unwrap();
            self.put(e.obj);
        }
        if reopen {
            let k = self.dev.ctx_new(self.ctxs[c].uid).expect("context");
            self.ctxs[c].id = k.id;
            self.ctxs[c].caller_uid = self.ctxs[c].uid;
            self.kctx[c] = Some(k);
            self.sum.released += 1;
        }
        self.check_mem(&[]);
    }

    pub(super) fn undefined(&mut self, inp: &mut Input<'_>, c: usize) {
        let b = inp.u8();
        let cmdno = if b & 1 == 1 {
            CMDS[(b >> 1) as usize % CMDS.len()] ^ (1 << (inp.u8() % 32))
        } else {
            inp.u32()
        };
        if CMDS.contains(&cmdno) {
            return;
        }
        let p = self.place(inp, 64);
        let arg = self.put_arg(p, &[0; 64]);
        let ret = self.ioctl(c, cmdno, arg);
        assert_eq!(ret, ENOTTY.to_neg(), "undefined command {cmdno:#x}");
        self.sum.undefined += 1;
    }

    pub(super) fn step(&mut self, inp: &mut Input<'_>) {
        let op = inp.u8();
        let c = inp.u8() as usize % 3;
        match op % 16 {
            0 => self.get_info(inp, c),
            1 => self.bind(inp, c),
            2 => self.create(inp, c, true),
            3 => self.create(inp, c, false),
            4 => self.destroy(inp, c),
            5 => self.copy(inp, c, Kind::AsyncRecv),
            6 => self.copy(inp, c, Kind::SyncRecv),
            7 => self.copy(inp, c, Kind::Pair { bounded: false }),
            8 => self.copy(inp, c, Kind::Inline { bounded: false }),
            9 => self.copy(inp, c, Kind::Pair { bounded: true }),
            10 => self.copy(inp, c, Kind::Inline { bounded: true }),
            11 => self.undefined(inp, c),
            12 => self.status_array(c, inp.u8() as usize % 17),
            13 => {
                self.run_thread(c);
            }
            14 => self.read_notify(c, 1 + inp.u8() as usize % 4),
            _ => self.event(inp, c),
        }
    }

    pub(super) fn event(&mut self, inp: &mut Input<'_>, c: usize) {
        let v = inp.u8();
        match (v % 8, v >> 3) {
            (0, x) => {
                self.dma_on = x & 1 == 1;
                self.dma_min = [0, 512, PAGE_SIZE, 1][(x >> 1) as usize % 4];
                self.dev.env.dma.on.store(self.dma_on, SeqCst);
                self.dev.env.dma.min.store(self.dma_min, SeqCst);
            }
            (1, _) => {
                self.complete_dma();
            }
            (2, x) => {
                self.ptrace = x & 1 == 1;
                self.denied = x & 2 == 2;
                self.dev.env.ptrace_policy.store(self.ptrace, SeqCst);
                self.dev.env.ptrace_denied.store(self.denied, SeqCst);
            }
            (3, x) => {
                self.memlock = (x != 0).then(|| (x - 1) as u64);
                *self.dev.env.memlock_pages.lock().unwrap() = self.memlock;
            }
            (4, x) => self
                .dev
                .env
                .set_pin_max((x % 4 != 0).then_some((x % 4) as usize)),
            // The process behind context c changes its real uid.
            (5, x) if x % 4 == 3 => self.ctxs[c].caller_uid = UIDS[(x as usize / 4) % UIDS.len()],
            (5, _) => self.release(c, true),
            (6, x) if x % 4 == 3 => {
                self.thread_bound = [0, 1, 2, u64::MAX][(x as usize / 4) % 4];
                self.spawn_fails = x & 16 != 0;
                let env = &self.dev.env;
                env.offload_threads_per_user
                    .store(self.thread_bound, SeqCst);
                env.spawn_fails.store(self.spawn_fails, SeqCst);
            }
            (6, _) => while self.run_thread(c) {},
            _ => while self.complete_dma() {},
        }
    }
}
