//! ioctl decoding, validation and dispatch.
//!
//! Each command: copy the argument struct from the user, validate it, act,
//! write the outputs back.  Errors become a negative errno (and bump the
//! per-errno counter) in [`Device::ioctl`] only.

use crate::edge::errno::{KResult, EACCES, EBUSY, EFAULT, EINVAL, ENOTTY, EPERM};
use crate::edge::kalloc::KArray;
use crate::edge::shim::{AccessPolicy, Env};
use crate::edge::uaccess;
use crate::exec::copy::{self, Outcome};
use crate::exec::dma;
use crate::exec::request::{status_of, Job};
use crate::plan::layout::{SegList, Segment};
use crate::state::account::AccountRef;
use crate::state::context::{status, Context};
use crate::state::device::Device;
use crate::state::region::{Region, RegionAttrs, RegionRef, PROT_READ, PROT_WRITE};
use crate::state::stats;
use crate::state::table::Found;
use core::mem::offset_of;
use core::sync::atomic::{AtomicU8, Ordering::Release};
use knem_abi::*;

/// Every BIND_OFFLOAD flag.
const BIND_FLAGS: u32 =
    KNEM_BIND_FLAG_CUSTOM | KNEM_BIND_FLAG_CURRENT | KNEM_BIND_FLAG_CURRENT_REVERSED;
/// At most this much of a CUSTOM cpumask is read (8192 CPUs); bits beyond
/// name CPUs no supported kernel has.
const MAX_MASK_BYTES: u32 = 1024;
/// The only protection bits a region may have.
const PROT_MASK: u32 = PROT_READ | PROT_WRITE;
/// An inline copy with at most this many local iovecs reads and plans
/// them on the stack: MPI transports send one or a few, and the copy path
/// then allocates nothing.
pub const INLINE_IOVECS: usize = 8;

/// What GET_INFO reports without a DMA engine: the DMA flag is accepted
/// and ignored ([`info`] is what it reports when one is usable).
pub const INFO: knem_cmd_info = knem_cmd_info {
    abi: KNEM_ABI_VERSION,
    features: 0,
    ignored_flags: KNEM_FLAG_DMA,
    forced_flags: 0,
};

/// The flags a copy acts on, as KNEM computes them: forced ones added,
/// every bit outside the copy mask (SINGLEUSE, ANY_USER_ACCESS, bits no
/// ABI version defines) dropped, not refused.  The ignored DMA flag needs
/// no masking: [`dma::wanted`] is false whenever GET_INFO lists it as
/// ignored.
fn copy_flags(raw: u32) -> u32 {
    (raw | INFO.forced_flags) & KNEM_FLAG_ANY_COPY_MASK
}

/// How a copy reports its result.
enum Report<'c> {
    /// In `current_status` only.
    Sync,
    /// In `current_status` and in this status slot (ASYNCDMACOMPLETE
    /// without DMA: copy now, report in both).
    AlsoSlot(&'c AtomicU8),
    /// On the offload thread: `current_status` PENDING now, the slot (and
    /// the fd with NOTIFY_FD) later; or, when the context has no thread and
    /// may not get one, both before the ioctl returns, `current_status`
    /// still PENDING ([`crate::exec::offload`]).
    Async { index: u32, notify: bool },
    /// ASYNCDMACOMPLETE with a DMA engine: `current_status` PENDING now,
    /// the slot when the engine is done ([`crate::exec::dma`]).
    DmaComplete { index: u32 },
}

/// Who makes an ioctl: through which context, with which real uid now.
struct Caller<'c> {
    ctx: &'c Context,
    uid: u32,
}

/// A copy between the caller's iovecs and a region, decoded.
struct InlineReq {
    iovec_array: u64,
    iovec_nr: u32,
    write: bool,
    cookie: u64,
    offset: u64,
    bound: Option<u64>,
    flags: u32,
    async_index: u32,
}

/// A copy between two regions, decoded.
struct PairReq {
    src_cookie: u64,
    src_offset: u64,
    dst_cookie: u64,
    dst_offset: u64,
    bound: Option<u64>,
    flags: u32,
    async_index: u32,
}

/// What GET_INFO reports: the DMA feature when an engine is usable now,
/// else the DMA flag among the ignored ones.
fn info(usable: bool) -> knem_cmd_info {
    knem_cmd_info {
        abi: KNEM_ABI_VERSION,
        features: if usable { KNEM_FEATURE_DMA } else { 0 },
        ignored_flags: if usable { 0 } else { KNEM_FLAG_DMA },
        forced_flags: 0,
    }
}

impl<E: Env> Device<E> {
    /// Handles one ioctl from a caller whose uid is still the one the
    /// context was opened under: 0 or a negative errno.
    pub fn ioctl(&self, ctx: &Context, cmd: u32, arg: u64) -> i64 {
        self.ioctl_as(ctx, ctx.uid, cmd, arg)
    }

    /// Handles one ioctl from a caller whose real uid is now `caller_uid`
    /// (the access rule compares it with region owners): 0 or a negative
    /// errno.
    pub fn ioctl_as(&self, ctx: &Context, caller_uid: u32, cmd: u32, arg: u64) -> i64 {
        let caller = Caller {
            ctx,
            uid: caller_uid,
        };
        match self.dispatch(&caller, cmd, arg) {
            Ok(()) => 0,
            Err(e) => {
                self.stats.count_error(e);
                e.to_neg()
            }
        }
    }

    fn dispatch(&self, caller: &Caller<'_>, cmd: u32, arg: u64) -> KResult<()> {
        let ctx = caller.ctx;
        match cmd {
            cmd::GET_INFO => uaccess::write(&self.env, arg, info(self.env.dma_usable())),
            cmd::CREATE_REGION => self.create_region(ctx, arg),
            cmd::DESTROY_REGION => self.destroy_region(ctx, arg),
            cmd::INLINE_COPY => {
                let c: knem_cmd_inline_copy = uaccess::read(&self.env, arg)?;
                let req = InlineReq {
                    iovec_array: c.local_iovec_array,
                    iovec_nr: c.local_iovec_nr,
                    write: c.write != 0,
                    cookie: c.remote_cookie,
                    offset: c.remote_offset,
                    bound: None,
                    flags: c.flags,
                    async_index: c.async_status_index,
                };
                self.inline_copy(
                    caller,
                    &req,
                    Some(arg + offset_of!(knem_cmd_inline_copy, current_status) as u64),
                )
            }
            cmd::INLINE_COPY_BOUNDED => {
                let c: knem_cmd_inline_copy_bounded = uaccess::read(&self.env, arg)?;
                let req = InlineReq {
                    iovec_array: c.local_iovec_array,
                    iovec_nr: c.local_iovec_nr,
                    write: c.write != 0,
                    cookie: c.remote_cookie,
                    offset: c.remote_offset,
                    bound: Some(c.length),
                    flags: c.flags,
                    async_index: c.async_status_index,
                };
                self.inline_copy(
                    caller,
                    &req,
                    Some(arg + offset_of!(knem_cmd_inline_copy_bounded, current_status) as u64),
                )
            }
            cmd::COPY => {
                let c: knem_cmd_copy = uaccess::read(&self.env, arg)?;
                let req = PairReq {
                    src_cookie: c.src_cookie,
                    src_offset: c.src_offset,
                    dst_cookie: c.dst_cookie,
                    dst_offset: c.dst_offset,
                    bound: None,
                    flags: c.flags,
                    async_index: c.async_status_index,
                };
                self.pair_copy(
                    caller,
                    &req,
                    arg + offset_of!(knem_cmd_copy, current_status) as u64,
                )
            }
            cmd::COPY_BOUNDED => {
                let c: knem_cmd_copy_bounded = uaccess::read(&self.env, arg)?;
                let req = PairReq {
                    src_cookie: c.src_cookie,
                    src_offset: c.src_offset,
                    dst_cookie: c.dst_cookie,
                    dst_offset: c.dst_offset,
                    bound: Some(c.length),
                    flags: c.flags,
                    async_index: c.async_status_index,
                };
                self.pair_copy(
                    caller,
                    &req,
                    arg + offset_of!(knem_cmd_copy_bounded, current_status) as u64,
                )
            }
            cmd::INIT_SEND => self.init_send(ctx, arg),
            cmd::SYNC_RECV => self.sync_recv(caller, arg),
            cmd::BIND_OFFLOAD => self.bind_offload(ctx, arg),
            cmd::INIT_ASYNC_RECV => self.init_async_recv(caller, arg),
            _ => Err(ENOTTY),
        }
    }

    /// Validates copy flags (already masked by [`copy_flags`]) and picks
    /// how the result is reported.
    ///
    /// With a usable DMA engine (`dma`) and no thread flag,
    /// ASYNCDMACOMPLETE makes the request asynchronous: submitted in the
    /// ioctl, its slot written when the engine completes it.
    fn report_mode<'c>(
        &self,
        ctx: &'c Context,
        flags: u32,
        async_index: u32,
        dma: bool,
    ) -> KResult<Report<'c>> {
        let thread = flags & KNEM_FLAG_ANY_THREAD_MASK != 0;
        let notify = flags & KNEM_FLAG_NOTIFY_FD != 0;
        if notify && (!thread || flags & KNEM_FLAG_ASYNCDMACOMPLETE != 0) {
            return Err(EINVAL);
        }
        if thread {
            // Before anything else is done: no array or index outside it.
            ctx.status_slot(async_index)?;
            return Ok(Report::Async {
                index: async_index,
                notify,
            });
        }
        if flags & KNEM_FLAG_ASYNCDMACOMPLETE != 0 {
            let slot = ctx.status_slot(async_index)?;
            if dma {
                return Ok(Report::DmaComplete { index: async_index });
            }
            return Ok(Report::AlsoSlot(slot));
        }
        Ok(Report::Sync)
    }

    /// Looks a region up and runs the access checks in the ABI's order:
    /// unknown → EINVAL, not allowed by the access policy → EPERM,
    /// protection → EACCES.  Nothing is consumed.
    ///
    /// The policy decides who may use a region created without
    /// ANY_USER_ACCESS (the owner's explicit consent, which admits anyone):
    /// callers whose real uid, now, is the owner's (KNEM: the uid is read
    /// at each call, so a process that drops privileges loses access, even
    /// to its own context's regions), or whoever may ptrace-attach the
    /// owner process (CMA; the creating context, which serves the owner
    /// process itself, is admitted without asking).
    fn lookup_checked(
        &self,
        caller: &Caller<'_>,
        cookie: u64,
        write: bool,
    ) -> KResult<Found<'_, E>> {
        let found = self.table.lookup(&self.env, &self.stats, cookie)?;
        let a = found.region.attrs();
        let allowed = a.flags & KNEM_FLAG_ANY_USER_ACCESS != 0
            || match self.env.access_policy() {
                AccessPolicy::Uid => a.owner_uid == caller.uid,
                AccessPolicy::Ptrace => {
                    a.owner_ctx == caller.ctx.id || self.env.may_access(found.region.owner())
                }
            };
        if !allowed {
            return Err(EPERM); // The core's only EPERM: the shim logs it as this refusal.
        }
        let need = if write { PROT_WRITE } else { PROT_READ };
        if a.prot & need == 0 {
            return Err(EACCES);
        }
        Ok(found)
    }

    /// Reports a copy's end: status slot (if asked) and `current_status`.
    fn finish(&self, report: Report<'_>, out: Outcome, status_uaddr: Option<u64>) -> KResult<()> {
        let st = status_of(out);
        if !out.ok {
            stats::add(&self.stats.copies_failed, 1);
        }
        if let Report::AlsoSlot(slot) = report {
            slot.store(st, Release);
        }
        match status_uaddr {
            Some(u) => uaccess::write(&self.env, u, st as u32),
            None => Ok(()),
        }
    }

    /// Tells the caller an asynchronous request is on its way.
    fn report_pending(&self, status_uaddr: Option<u64>) -> KResult<()> {
        match status_uaddr {
            Some(u) => uaccess::write(&self.env, u, status::PENDING as u32),
            None => Ok(()),
        }
    }

    /// Looks the remote region up and pins the caller's side, for a copy
    /// that runs page to page (thread or PINLOCAL).  Nothing is consumed.
    fn pin_inline<'a>(
        &'a self,
        caller: &Caller<'_>,
        req: &InlineReq,
    ) -> KResult<(Found<'a, E>, RegionRef<'a, E>)> {
        let found = self.lookup_checked(caller, req.cookie, req.write)?;
        let iovs = uaccess::read_iovecs(&self.env, req.iovec_array, req.iovec_nr)?;
        let local = SegList::new(&iovs)?;
        drop(iovs);
        // Reading the region writes the caller's memory, and vice versa.
        let local = Region::create_local(&self.env, &self.stats, &self.pins, local, !req.write)?;
        Ok((found, RegionRef::from_box(local, &self.env, &self.stats)))
    }

    /// The page-to-page job of an inline copy whose region was consumed.
    fn inline_job<'a>(
        req: &InlineReq,
        remote: RegionRef<'a, E>,
        local: RegionRef<'a, E>,
    ) -> Job<'a, E> {
        if req.write {
            Job {
                src: local,
                src_off: 0,
                dst: remote,
                dst_off: req.offset,
                bound: req.bound,
                dma: false,
            }
        } else {
            Job {
                src: remote,
                src_off: req.offset,
                dst: local,
                dst_off: 0,
                bound: req.bound,
                dma: false,
            }
        }
    }

    /// The caller's iovecs of an inline copy as segments: in `buf` for up
    /// to [`INLINE_IOVECS`] of them, on the heap beyond.
    fn local_segments<'s>(
        &self,
        req: &InlineReq,
        buf: &'s mut [Segment; INLINE_IOVECS],
    ) -> KResult<SegList<'s>> {
        let mut iovs = [knem_cmd_param_iovec::default(); INLINE_IOVECS];
        if let Some(iovs) = iovs.get_mut(..req.iovec_nr as usize) {
            uaccess::read_iovecs_into(&self.env, req.iovec_array, iovs)?;
            return SegList::new_in(iovs, buf);
        }
        let iovs = uaccess::read_iovecs(&self.env, req.iovec_array, req.iovec_nr)?;
        SegList::new(&iovs)
    }

    fn inline_copy(
        &self,
        caller: &Caller<'_>,
        req: &InlineReq,
        status_uaddr: Option<u64>,
    ) -> KResult<()> {
        let ctx = caller.ctx;
        let flags = copy_flags(req.flags);
        let dma = dma::wanted(&self.env, flags);
        let report = self.report_mode(ctx, flags, req.async_index, dma)?;
        if let Report::Async { index, notify } = report {
            let prep = self.prepare(ctx, index, notify)?;
            let (found, local) = self.pin_inline(caller, req)?;
            self.report_pending(status_uaddr)?;
            self.table.consume(&self.env, &self.stats, &found)?;
            let mut job = Self::inline_job(req, found.into_region(), local);
            job.dma = dma;
            self.submit(prep, job);
            return Ok(());
        }
        if let Report::DmaComplete { index } = report {
            let token = self.dma_token(ctx)?;
            let (found, local) = self.pin_inline(caller, req)?;
            self.report_pending(status_uaddr)?;
            self.table.consume(&self.env, &self.stats, &found)?;
            let mut job = Self::inline_job(req, found.into_region(), local);
            job.dma = true;
            self.dma_submit(ctx, index, job, token);
            return Ok(());
        }
        let counter = if req.write {
            &self.stats.bytes_inline_write
        } else {
            &self.stats.bytes_inline_read
        };
        // The engine needs the caller's pages pinned, as PINLOCAL does.
        if flags & KNEM_FLAG_PINLOCAL != 0 || dma {
            let (found, local) = self.pin_inline(caller, req)?;
            self.table.consume(&self.env, &self.stats, &found)?;
            let mut job = Self::inline_job(req, found.into_region(), local);
            job.dma = dma;
            let out = job.run(&self.env);
            drop(job);
            stats::add(counter, out.bytes);
            return self.finish(report, out, status_uaddr);
        }
        let found = self.lookup_checked(caller, req.cookie, req.write)?;
        let mut seg_buf = [Segment::default(); INLINE_IOVECS];
        let local = self.local_segments(req, &mut seg_buf)?;
        self.table.consume(&self.env, &self.stats, &found)?;
        let out = copy::inline(
            &self.env,
            &found.region,
            req.offset,
            &local,
            req.bound,
            req.write,
        );
        stats::add(counter, out.bytes);
        drop(found);
        self.finish(report, out, status_uaddr)
    }

    fn pair_copy(&self, caller: &Caller<'_>, req: &PairReq, status_uaddr: u64) -> KResult<()> {
        let ctx = caller.ctx;
        let flags = copy_flags(req.flags);
        let dma = dma::wanted(&self.env, flags);
        let report = self.report_mode(ctx, flags, req.async_index, dma)?;
        let prep = match report {
            Report::Async { index, notify } => Some(self.prepare(ctx, index, notify)?),
            _ => None,
        };
        let token = match report {
            Report::DmaComplete { .. } => Some(self.dma_token(ctx)?),
            _ => None,
        };
        let src = self.lookup_checked(caller, req.src_cookie, false)?;
        let dst = self.lookup_checked(caller, req.dst_cookie, true)?;
        if prep.is_some() || token.is_some() {
            self.report_pending(Some(status_uaddr))?;
        }
        // Both sides passed their checks: only now may single-use ones go,
        // both or neither (a copy that loses either race consumes nothing).
        self.table
            .consume_pair(&self.env, &self.stats, &src, &dst)?;
        if let (Report::DmaComplete { index }, Some(token)) = (&report, token) {
            let job = Job {
                src: src.into_region(),
                src_off: req.src_offset,
                dst: dst.into_region(),
                dst_off: req.dst_offset,
                bound: req.bound,
                dma: true,
            };
            self.dma_submit(ctx, *index, job, token);
            return Ok(());
        }
        if let Some(prep) = prep {
            let job = Job {
                src: src.into_region(),
                src_off: req.src_offset,
                dst: dst.into_region(),
                dst_off: req.dst_offset,
                bound: req.bound,
                dma,
            };
            self.submit(prep, job);
            return Ok(());
        }
        let copy = if dma {
            dma::region_to_region
        } else {
            copy::region_to_region
        };
        let out = copy(
            &self.env,
            &src.region,
            req.src_offset,
            &dst.region,
            req.dst_offset,
            req.bound,
        );
        stats::add(&self.stats.bytes_region_copy, out.bytes);
        drop((src, dst));
        self.finish(report, out, Some(status_uaddr))
    }

    /// Validates, pins and publishes a region; returns its cookie.
    fn create(
        &self,
        ctx: &Context,
        iovec_array: u64,
        iovec_nr: u32,
        prot: u32,
        flags: u32,
    ) -> KResult<u64> {
        let iovs = uaccess::read_iovecs(&self.env, iovec_array, iovec_nr)?;
        let layout = SegList::new(&iovs)?;
        drop(iovs);
        let attrs = RegionAttrs {
            prot,
            flags,
            owner_ctx: ctx.id,
            owner_uid: ctx.uid,
            account: AccountRef::of(&ctx.account, &ctx.regions),
        };
        let region = Region::create(&self.env, &self.stats, &self.pins, layout, attrs)?;
        self.table.insert(&self.env, &self.stats, region)
    }

    /// Writes a new cookie back; if that fails, the region is destroyed so
    /// nothing unreachable stays pinned.
    fn return_cookie(&self, ctx: &Context, uaddr: u64, cookie: u64) -> KResult<()> {
        if uaccess::write(&self.env, uaddr, cookie).is_err() {
            let _ = self.table.destroy(&self.env, &self.stats, cookie, ctx.id);
            return Err(EFAULT);
        }
        Ok(())
    }

    fn create_region(&self, ctx: &Context, arg: u64) -> KResult<()> {
        let c: knem_cmd_create_region = uaccess::read(&self.env, arg)?;
        if c.protection & !PROT_MASK != 0 {
            return Err(EINVAL);
        }
        // Flags outside the create mask are dropped, as KNEM does.
        let flags = c.flags & KNEM_FLAG_ANY_CREATE_MASK;
        let cookie = self.create(ctx, c.iovec_array, c.iovec_nr, c.protection, flags)?;
        self.return_cookie(
            ctx,
            arg + offset_of!(knem_cmd_create_region, cookie) as u64,
            cookie,
        )
    }

    fn destroy_region(&self, ctx: &Context, arg: u64) -> KResult<()> {
        let cookie: u64 = uaccess::read(&self.env, arg)?;
        self.table.destroy(&self.env, &self.stats, cookie, ctx.id)
    }

    /// Legacy: a read-only single-use region.
    fn init_send(&self, ctx: &Context, arg: u64) -> KResult<()> {
        let c: knem_cmd_init_send_param = uaccess::read(&self.env, arg)?;
        let flags = (c.flags & KNEM_FLAG_ANY_CREATE_MASK) | KNEM_FLAG_SINGLEUSE;
        let cookie = self.create(ctx, c.send_iovec_array, c.send_iovec_nr, PROT_READ, flags)?;
        self.return_cookie(
            ctx,
            arg + offset_of!(knem_cmd_init_send_param, send_cookie) as u64,
            cookie,
        )
    }

    /// Legacy: synchronous inline read at offset 0, status in `status`.
    /// It has no slot to report in, so the asynchronous flags (NOTIFY_FD
    /// included) are masked off with the undefined ones.
    fn sync_recv(&self, caller: &Caller<'_>, arg: u64) -> KResult<()> {
        let c: knem_cmd_sync_recv_param = uaccess::read(&self.env, arg)?;
        let req = InlineReq {
            iovec_array: c.recv_iovec_array,
            iovec_nr: c.recv_iovec_nr,
            write: false,
            cookie: c.send_cookie,
            offset: 0,
            bound: None,
            flags: c.flags & !(KNEM_FLAG_ANY_ASYNC_MASK | KNEM_FLAG_NOTIFY_FD),
            async_index: 0,
        };
        self.inline_copy(
            caller,
            &req,
            Some(arg + offset_of!(knem_cmd_sync_recv_param, status) as u64),
        )
    }

    /// Legacy: asynchronous inline read at offset 0 on the offload thread,
    /// reported only through slot `status_index`.  The flags are those of
    /// a thread copy (a thread flag is implied).
    fn init_async_recv(&self, caller: &Caller<'_>, arg: u64) -> KResult<()> {
        let c: knem_cmd_init_async_recv_param = uaccess::read(&self.env, arg)?;
        let req = InlineReq {
            iovec_array: c.recv_iovec_array,
            iovec_nr: c.recv_iovec_nr,
            write: false,
            cookie: c.send_cookie,
            offset: 0,
            bound: None,
            flags: c.flags | KNEM_FLAG_MEMCPYTHREAD,
            async_index: c.status_index,
        };
        self.inline_copy(caller, &req, None)
    }

    /// Chooses the CPUs of the offload thread; only before the status-array
    /// mmap, as KNEM (the thread itself starts later, at the first
    /// asynchronous submission).  The shim turns the choice into a cpumask.
    fn bind_offload(&self, ctx: &Context, arg: u64) -> KResult<()> {
        let b: knem_cmd_bind_offload = uaccess::read(&self.env, arg)?;
        if b.flags & !BIND_FLAGS != 0 || !b.flags.is_power_of_two() {
            return Err(EINVAL);
        }
        if ctx.has_status_array() {
            return Err(EBUSY);
        }
        if b.flags != KNEM_BIND_FLAG_CUSTOM {
            return self.env.ctx_bind(ctx.shim, b.flags, &[]);
        }
        if b.mask_len == 0 {
            return Err(EINVAL);
        }
        let mut mask = KArray::<u8>::try_default(b.mask_len.min(MAX_MASK_BYTES) as usize)?;
        self.env.copy_from_user(&mut mask, b.mask_ptr)?;
        self.env.ctx_bind(ctx.shim, b.flags, &mask)
    }
}
