//! The collectives.  Each one: expose the buffers peers will touch,
//! exchange descriptors through the control block (one barrier), move the
//! data with the chosen algorithm, a closing barrier, then bring in what
//! peers wrote (a no-op except for the shm transport).
//!
//! Copy directions follow Kernel Assisted Collective Intra-node Communication: readers pull in one-to-all operations
//! (bcast, scatter), writers push in gather; Contention-Aware Kernel-Assisted MPI Collectives' throttling, trees,
//! sequential and ring schedules are the alternatives.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Op};
use crate::region_cache::Exposed;
use crate::schedule;
use crate::team::{Team, MAX_RANKS};
use knem_transport::Descriptor;

/// The descriptor kind a rank posts when it could not expose its buffer
/// (no transport uses it).
const DECLINED: u32 = u32::MAX;

/// Every rank's descriptor and extra words, from one exchange.
type Descriptors = Vec<(Descriptor, [u64; 4])>;

/// Virtual rank relative to the root.
fn vrank(r: usize, root: usize, p: usize) -> usize {
    (r + p - root) % p
}

fn real(v: usize, root: usize, p: usize) -> usize {
    (v + root) % p
}

/// `count` blocks of `each` bytes, or an overflow error.
fn blocks(what: &str, each: usize, count: usize) -> Result<usize> {
    each.checked_mul(count)
        .ok_or_else(|| Error::Overflow(format!("{what}: {count} x {each} bytes")))
}

impl Team {
    /// Expose `ptr..ptr+len` (then publish `own`, a range of it, if given)
    /// and exchange descriptors: one barrier.  A rank that cannot expose
    /// its buffer (ENOMEM under RLIMIT_MEMLOCK, for one) posts
    /// [`DECLINED`] instead of a descriptor, and then every rank returns
    /// [`Error::Declined`] before any byte moved.
    ///
    /// Why every rank decides alike: each rank writes its mailbox (its
    /// descriptor or the marker) before it arrives at the exchange's
    /// barrier, and reads all mailboxes after leaving it; no rank writes
    /// its mailbox again before every rank passed the next barrier (the
    /// closing one of the call, or the one below when a rank declined).
    /// So all ranks read the same set of markers, and take the same
    /// branch.  The normal case costs nothing more than the exchange it
    /// already had; a declined call adds one barrier.
    ///
    /// # Safety
    ///
    /// As [`Team::expose_ptr`].
    unsafe fn expose_exchange(
        &mut self,
        ptr: *const u8,
        len: usize,
        publish: bool,
        own: Option<(usize, usize)>,
    ) -> Result<(Exposed, Descriptors)> {
        // SAFETY: forwarded from the caller.
        let exp = unsafe { self.expose_ptr(ptr, len, publish) }.and_then(|e| {
            if let Some((a, n)) = own {
                e.publish(a, n)?;
            }
            Ok(e)
        });
        let desc = match &exp {
            Ok(e) => e.descriptor(),
            Err(_) => Descriptor {
                kind: DECLINED,
                pid: std::process::id(),
                ..Descriptor::default()
            },
        };
        let descs = self.exchange_desc(desc, [0; 4])?;
        let ranks: Vec<usize> = (0..self.size())
            .filter(|r| descs[*r].0.kind == DECLINED)
            .collect();
        match exp {
            Ok(e) if ranks.is_empty() => Ok((e, descs)),
            exp => {
                let cause = exp.err().map(|e| e.to_string());
                // Nobody posts again before everyone read the markers.
                self.barrier()?;
                Err(Error::Declined { ranks, cause })
            }
        }
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.size() {
            return Err(Error::Invalid(format!(
                "root {root} >= team size {}",
                self.size()
            )));
        }
        Ok(())
    }

    fn choose(&self, op: Op, alg: Option<Algorithm>, n: u64) -> Result<Algorithm> {
        match alg {
            Some(a) if a.supports(op) => Ok(a),
            Some(a) => Err(Error::Invalid(format!("{a} does not implement {op}"))),
            None => {
                let t = self.topology();
                Ok(self
                    .params()
                    .plan(op, n, self.size(), t.node_count(), t.largest_group())
                    .0)
            }
        }
    }

    fn read_exact(&self, d: &Descriptor, off: usize, buf: &mut [u8]) -> Result<()> {
        let n = self.transport().read(d, off as u64, buf)?;
        if n != buf.len() {
            return Err(Error::Invalid(format!(
                "peer exposed {} bytes, read of {} at {off} is out of range",
                d.len,
                buf.len()
            )));
        }
        Ok(())
    }

    fn write_exact(&self, d: &Descriptor, off: usize, buf: &[u8]) -> Result<()> {
        let n = self.transport().write(d, off as u64, buf)?;
        if n != buf.len() {
            return Err(Error::Invalid(format!(
                "peer exposed {} bytes, write of {} at {off} is out of range",
                d.len,
                buf.len()
            )));
        }
        Ok(())
    }

    /// Broadcast `buf` (same length everywhere) from `root`; `alg` None
    /// lets the planner choose.
    pub fn bcast(&mut self, buf: &mut [u8], root: usize, alg: Option<Algorithm>) -> Result<()> {
        self.call(|t| t.bcast_call(buf, root, alg))
    }

    fn bcast_call(&mut self, buf: &mut [u8], root: usize, alg: Option<Algorithm>) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        let n = buf.len();
        let alg = self.choose(Op::Bcast, alg, n as u64)?;
        if p == 1 || n == 0 {
            return Ok(());
        }
        self.begin();
        let me = self.rank();
        let v = vrank(me, root, p);
        // SAFETY: buf is exclusively ours for the call; peers only touch it
        // between the exchange and the closing barrier, in the ranges the
        // algorithm gives them, while we do not touch those ranges.
        let (exp, descs) = unsafe { self.expose_exchange(buf.as_ptr(), n, me == root, None)? };
        let d = |r: usize| descs[r].0;
        let mut collect: Option<(usize, usize)> = None;
        match alg {
            Algorithm::DirectRead | Algorithm::Throttled(_) => {
                let k = match alg {
                    Algorithm::Throttled(k) => k.max(1),
                    _ => p,
                };
                if v != 0 {
                    if v > k {
                        self.wait_for(real(v - k, root, p), 1)?;
                    }
                    self.read_exact(&d(root), 0, buf)?;
                    self.signal(1);
                }
            }
            Algorithm::DirectWrite => {
                if v == 0 {
                    for w in 1..p {
                        self.write_exact(&d(real(w, root, p)), 0, buf)?;
                    }
                } else {
                    collect = Some((0, n));
                }
            }
            Algorithm::Knomial(k) => {
                let k = k.max(2);
                if v != 0 {
                    let mut span = 1;
                    while span * k <= v {
                        span *= k;
                    }
                    let parent = v % span;
                    if parent != 0 {
                        self.wait_for(real(parent, root, p), 1)?;
                    }
                    self.read_exact(&d(real(parent, root, p)), 0, buf)?;
                    exp.publish(0, n)?;
                    self.signal(1);
                }
            }
            Algorithm::ScatterAllgather => {
                let c = n.div_ceil(p);
                let range = |j: usize| {
                    let a = (j * c).min(n);
                    (a, (a + c).min(n))
                };
                if v == 0 {
                    for j in 1..p {
                        let (a, b) = range(j);
                        self.write_exact(&d(real(j, root, p)), a, &buf[a..b])?;
                    }
                }
                self.barrier()?;
                if v != 0 {
                    for i in 1..p {
                        let j = (v + p - i) % p;
                        let (a, b) = range(j);
                        self.read_exact(&d(real(j, root, p)), a, &mut buf[a..b])?;
                    }
                    let (a, b) = range(v);
                    collect = Some((a, b - a));
                }
            }
            Algorithm::Hierarchical => {
                let g = self.topology().groups(root);
                let leader = g.leader_of[me];
                if me != root {
                    if me == leader {
                        self.read_exact(&d(root), 0, buf)?;
                        exp.publish(0, n)?;
                        self.signal(1);
                    } else {
                        if leader != root {
                            self.wait_for(leader, 1)?;
                        }
                        self.read_exact(&d(leader), 0, buf)?;
                    }
                }
            }
            other => return Err(Error::Invalid(format!("{other} does not implement bcast"))),
        }
        self.barrier()?;
        if let Some((a, len)) = collect {
            exp.collect(a, len)?;
        }
        Ok(())
    }

    /// Scatter: rank r receives `recv.len()` bytes from `send[r*n..]` of the
    /// root (`send` is only read at the root).
    pub fn scatter(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        let n = recv.len();
        let p = self.size();
        let total = blocks("scatter", n, p)?;
        if self.rank() == root && send.len() < total {
            return Err(Error::Invalid(format!(
                "scatter: send buffer {} < {p} x {n}",
                send.len()
            )));
        }
        let counts = vec![n; p];
        let displs: Vec<usize> = (0..p).map(|r| r * n).collect();
        let alg = self.choose(Op::Scatter, alg, n as u64)?;
        self.scatterv_inner(send, &counts, &displs, recv, root, Some(alg))
    }

    /// Scatterv: rank r receives `counts[r]` bytes from `send[displs[r]..]`
    /// of the root; `counts`, `displs` and `send` matter only at the root.
    pub fn scatterv(
        &mut self,
        send: &[u8],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [u8],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        self.scatterv_inner(send, counts, displs, recv, root, alg)
    }

    fn check_v(&self, what: &str, buf: usize, counts: &[usize], displs: &[usize]) -> Result<()> {
        let p = self.size();
        if counts.len() < p || displs.len() < p {
            return Err(Error::Invalid(format!(
                "{what}: counts/displs shorter than team size {p}"
            )));
        }
        for r in 0..p {
            if !matches!(displs[r].checked_add(counts[r]), Some(e) if e <= buf) {
                return Err(Error::Invalid(format!(
                    "{what}: block {r} ({}+{}) outside the {buf}-byte buffer",
                    displs[r], counts[r]
                )));
            }
        }
        Ok(())
    }

    /// Root side: pick the plan of a v-op and post counts, displacements
    /// and plan for the others (read after the exchange barrier).
    fn post_v(
        &self,
        op: Op,
        counts: &[usize],
        displs: &[usize],
        alg: Option<Algorithm>,
    ) -> Result<Algorithm> {
        let p = self.size();
        let biggest = counts[..p].iter().copied().max().unwrap_or(0);
        let alg = self.choose(op, alg, biggest as u64)?;
        for r in 0..p {
            self.set_aux(r, counts[r] as u64);
            self.set_aux(MAX_RANKS + r, displs[r] as u64);
        }
        let (c, k) = alg.code();
        self.set_plan((u64::from(c) << 32) | u64::from(k));
        Ok(alg)
    }

    fn read_plan(&self) -> Result<Algorithm> {
        let w = self.plan_word();
        Algorithm::from_code((w >> 32) as u32, w as u32)
            .ok_or_else(|| Error::Invalid("root posted no plan".into()))
    }

    fn scatterv_inner(
        &mut self,
        send: &[u8],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [u8],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        self.call(|t| t.scatterv_call(send, counts, displs, recv, root, alg))
    }

    fn scatterv_call(
        &mut self,
        send: &[u8],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [u8],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        let me = self.rank();
        if me == root {
            self.check_v("scatterv", send.len(), counts, displs)?;
            if recv.len() < counts[me] {
                return Err(Error::Invalid(
                    "scatterv: root receive buffer too small".into(),
                ));
            }
        }
        if p == 1 {
            recv[..counts[0]].copy_from_slice(&send[displs[0]..displs[0] + counts[0]]);
            return Ok(());
        }
        self.begin();
        let v = vrank(me, root, p);
        let planned = if me == root {
            Some(self.post_v(Op::Scatter, counts, displs, alg)?)
        } else {
            None
        };
        // SAFETY: root's send buffer is only read by peers; a receive
        // buffer is written by the root only (sequential), between the
        // exchange and the closing barrier, and we do not touch it then.
        let (exp, descs) = unsafe {
            if me == root {
                self.expose_exchange(send.as_ptr(), send.len(), true, None)?
            } else {
                self.expose_exchange(recv.as_ptr(), recv.len(), false, None)?
            }
        };
        let alg = match planned {
            Some(a) => a,
            None => self.read_plan()?,
        };
        let my_count = self.aux(me) as usize;
        let my_displ = self.aux(MAX_RANKS + me) as usize;
        if me != root && recv.len() < my_count {
            return Err(Error::Invalid(format!(
                "scatterv: rank {me} receive buffer {} < count {my_count}",
                recv.len()
            )));
        }
        let mut collect = 0;
        match alg {
            Algorithm::DirectRead | Algorithm::Throttled(_) => {
                let k = match alg {
                    Algorithm::Throttled(k) => k.max(1),
                    _ => p,
                };
                if v != 0 {
                    if v > k {
                        self.wait_for(real(v - k, root, p), 1)?;
                    }
                    self.read_exact(&descs[root].0, my_displ, &mut recv[..my_count])?;
                    self.signal(1);
                }
            }
            Algorithm::Sequential => {
                if v == 0 {
                    for w in 1..p {
                        let r = real(w, root, p);
                        let (c, o) = (counts[r], displs[r]);
                        self.write_exact(&descs[r].0, 0, &send[o..o + c])?;
                    }
                } else {
                    collect = my_count;
                }
            }
            other => {
                return Err(Error::Invalid(format!(
                    "{other} does not implement scatter"
                )))
            }
        }
        if me == root {
            recv[..my_count].copy_from_slice(&send[my_displ..my_displ + my_count]);
        }
        self.barrier()?;
        if collect > 0 {
            exp.collect(0, collect)?;
        }
        Ok(())
    }

    /// Gather: the root receives every rank's `send` at `recv[r*n..]`.
    pub fn gather(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        let n = send.len();
        let p = self.size();
        let total = blocks("gather", n, p)?;
        if self.rank() == root && recv.len() < total {
            return Err(Error::Invalid(format!(
                "gather: receive buffer {} < {p} x {n}",
                recv.len()
            )));
        }
        let counts = vec![n; p];
        let displs: Vec<usize> = (0..p).map(|r| r * n).collect();
        let alg = self.choose(Op::Gather, alg, n as u64)?;
        self.gatherv(send, recv, &counts, &displs, root, Some(alg))
    }

    /// Gatherv: the root receives `counts[r]` bytes of rank r's `send` at
    /// `recv[displs[r]..]`; `counts`, `displs` and `recv` matter only at
    /// the root, each rank sends `counts[rank]` bytes (what the root says).
    pub fn gatherv(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        counts: &[usize],
        displs: &[usize],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        self.call(|t| t.gatherv_call(send, recv, counts, displs, root, alg))
    }

    fn gatherv_call(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        counts: &[usize],
        displs: &[usize],
        root: usize,
        alg: Option<Algorithm>,
    ) -> Result<()> {
        self.check_root(root)?;
        let p = self.size();
        let me = self.rank();
        if me == root {
            self.check_v("gatherv", recv.len(), counts, displs)?;
        }
        if p == 1 {
            if send.len() < counts[0] {
                return Err(Error::Invalid(format!(
                    "gatherv: send buffer {} < count {}",
                    send.len(),
                    counts[0]
                )));
            }
            recv[displs[0]..displs[0] + counts[0]].copy_from_slice(&send[..counts[0]]);
            return Ok(());
        }
        self.begin();
        let v = vrank(me, root, p);
        let planned = if me == root {
            Some(self.post_v(Op::Gather, counts, displs, alg)?)
        } else {
            None
        };
        // SAFETY: the root's receive buffer is written by peers into their
        // own blocks only, between the exchange and the closing barrier;
        // a send buffer is only read.
        let (exp, descs) = unsafe {
            if me == root {
                self.expose_exchange(recv.as_ptr(), recv.len(), false, None)?
            } else {
                self.expose_exchange(send.as_ptr(), send.len(), true, None)?
            }
        };
        let alg = match planned {
            Some(a) => a,
            None => self.read_plan()?,
        };
        let my_count = self.aux(me) as usize;
        let my_displ = self.aux(MAX_RANKS + me) as usize;
        if send.len() < my_count {
            return Err(Error::Invalid(format!(
                "gatherv: rank {me} send buffer {} < count {my_count}",
                send.len()
            )));
        }
        let mut written_by_peers = false;
        match alg {
            Algorithm::DirectWrite | Algorithm::Throttled(_) => {
                let k = match alg {
                    Algorithm::Throttled(k) => k.max(1),
                    _ => p,
                };
                if v != 0 {
                    if v > k {
                        self.wait_for(real(v - k, root, p), 1)?;
                    }
                    self.write_exact(&descs[root].0, my_displ, &send[..my_count])?;
                    self.signal(1);
                } else {
                    written_by_peers = true;
                }
            }
            Algorithm::Sequential => {
                if v == 0 {
                    for w in 1..p {
                        let r = real(w, root, p);
                        let (c, o) = (counts[r], displs[r]);
                        self.read_exact(&descs[r].0, 0, &mut recv[o..o + c])?;
                    }
                }
            }
            other => return Err(Error::Invalid(format!("{other} does not implement gather"))),
        }
        self.barrier()?;
        if me == root {
            if written_by_peers {
                for r in (0..p).filter(|r| *r != root && counts[*r] > 0) {
                    exp.collect(displs[r], counts[r])?;
                }
            }
            recv[my_displ..my_displ + my_count].copy_from_slice(&send[..my_count]);
        }
        Ok(())
    }

    /// Allgather: every rank receives every rank's `send` at `recv[r*n..]`.
    pub fn allgather(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        alg: Option<Algorithm>,
    ) -> Result<()> {
        self.call(|t| t.allgather_call(send, recv, alg))
    }

    fn allgather_call(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        alg: Option<Algorithm>,
    ) -> Result<()> {
        let p = self.size();
        let n = send.len();
        let total = blocks("allgather", n, p)?;
        if recv.len() < total {
            return Err(Error::Invalid(format!(
                "allgather: receive buffer {} < {p} x {n}",
                recv.len()
            )));
        }
        let alg = self.choose(Op::Allgather, alg, n as u64)?;
        let me = self.rank();
        recv[me * n..(me + 1) * n].copy_from_slice(send);
        if p == 1 || n == 0 {
            return Ok(());
        }
        self.begin();
        // SAFETY: peers read blocks of our receive buffer that we already
        // hold (own block) or announced with a signal (ring-neighbor), and
        // never write it; we only write blocks nobody reads from us yet.
        let (exp, descs) =
            unsafe { self.expose_exchange(recv.as_ptr(), total, false, Some((me * n, n)))? };
        match alg {
            Algorithm::RingSource => {
                for i in 1..p {
                    let src = (me + p - i) % p;
                    self.read_exact(&descs[src].0, src * n, &mut recv[src * n..(src + 1) * n])?;
                }
            }
            Algorithm::RingNeighbor => {
                let left = (me + p - 1) % p;
                for i in 1..p {
                    let b = (me + p - i) % p;
                    if i > 1 {
                        self.wait_for(left, (i - 1) as u64)?;
                    }
                    self.read_exact(&descs[left].0, b * n, &mut recv[b * n..(b + 1) * n])?;
                    exp.publish(b * n, n)?;
                    self.signal(i as u64);
                }
            }
            Algorithm::RecursiveDoubling | Algorithm::Bruck => {
                let plan = if alg == Algorithm::Bruck {
                    schedule::bruck
                } else {
                    schedule::recursive_doubling
                };
                for j in 0..schedule::log_steps(p) {
                    if let Some((src, first, count)) = plan(me, j, p) {
                        // The source holds these blocks once it finished
                        // step j-1 (its own block from the start).
                        if j > 0 {
                            self.wait_for(src, j as u64)?;
                        }
                        for (a, len) in schedule::runs(first, count, p) {
                            let (lo, hi) = (a * n, (a + len) * n);
                            self.read_exact(&descs[src].0, lo, &mut recv[lo..hi])?;
                            exp.publish(lo, hi - lo)?;
                        }
                    }
                    self.signal(j as u64 + 1);
                }
            }
            other => {
                return Err(Error::Invalid(format!(
                    "{other} does not implement allgather"
                )))
            }
        }
        self.barrier()?;
        Ok(())
    }

    /// Alltoall: rank r's block j (`send[j*n..]`) lands in rank j's
    /// `recv[r*n..]`; n = send.len() / size.
    pub fn alltoall(&mut self, send: &[u8], recv: &mut [u8], alg: Option<Algorithm>) -> Result<()> {
        self.call(|t| t.alltoall_call(send, recv, alg))
    }

    fn alltoall_call(
        &mut self,
        send: &[u8],
        recv: &mut [u8],
        alg: Option<Algorithm>,
    ) -> Result<()> {
        let p = self.size();
        let n = send.len() / p;
        if send.len() != n * p || recv.len() < n * p {
            return Err(Error::Invalid(format!(
                "alltoall: send {} not a multiple of {p} or receive {} too small",
                send.len(),
                recv.len()
            )));
        }
        let alg = self.choose(Op::Alltoall, alg, n as u64)?;
        let me = self.rank();
        if p == 1 || n == 0 {
            recv[..n * p].copy_from_slice(send);
            return Ok(());
        }
        self.begin();
        match alg {
            Algorithm::Pairwise => {
                // SAFETY: peers only read our send buffer.
                let (_exp, descs) =
                    unsafe { self.expose_exchange(send.as_ptr(), send.len(), true, None)? };
                for i in 1..p {
                    let peer = if p.is_power_of_two() {
                        me ^ i
                    } else {
                        (me + p - i) % p
                    };
                    self.read_exact(&descs[peer].0, me * n, &mut recv[peer * n..(peer + 1) * n])?;
                }
                self.barrier()?;
            }
            Algorithm::Ring => {
                // SAFETY: peers write disjoint blocks of our receive buffer,
                // which we do not touch until after the closing barrier.
                let (exp, descs) =
                    unsafe { self.expose_exchange(recv.as_ptr(), p * n, false, None)? };
                for i in 1..p {
                    let dst = (me + i) % p;
                    self.write_exact(&descs[dst].0, me * n, &send[dst * n..(dst + 1) * n])?;
                }
                self.barrier()?;
                exp.collect(0, p * n)?;
            }
            other => {
                return Err(Error::Invalid(format!(
                    "{other} does not implement alltoall"
                )))
            }
        }
        recv[me * n..(me + 1) * n].copy_from_slice(&send[me * n..(me + 1) * n]);
        Ok(())
    }
}
