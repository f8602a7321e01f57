//! A team: N local processes sharing a control block in /dev/shm (rank
//! slots, a barrier, progress counters and a small mailbox per rank).

use crate::error::{Error, Result};
use crate::model::Params;
use crate::region_cache::{CacheStats, Exposed, RegionCache};
use crate::topo::Topology;
use knem_transport::{Descriptor, Transport};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::fs::OpenOptions;
use std::num::NonZeroUsize;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Largest team.
pub const MAX_RANKS: usize = 64;
/// 64-bit words in a rank's mailbox.
pub const SLOT_WORDS: usize = 8;
/// Environment: the control block's name (a file in /dev/shm).
pub const ENV_TEAM: &str = "KNEM_RS_TEAM";
/// Environment: this process's rank.
pub const ENV_RANK: &str = "KNEM_RS_RANK";
/// Environment: the team size.
pub const ENV_SIZE: &str = "KNEM_RS_SIZE";
/// Environment: seconds a rank waits for a peer before giving up.
pub const ENV_TIMEOUT: &str = "KNEM_RS_TIMEOUT";

const MAGIC: u64 = 0x6b6e_656d_7273_0001;

#[repr(C, align(64))]
struct RankSlot {
    pid: AtomicU64,
    node: AtomicU64,
    progress: AtomicU64,
    words: [AtomicU64; SLOT_WORDS],
}

#[repr(C, align(64))]
struct Line(AtomicU64);

#[repr(C)]
struct Ctl {
    magic: AtomicU64,
    size: AtomicU64,
    arrived: Line,
    generation: Line,
    ranks: [RankSlot; MAX_RANKS],
    /// Root-written per-rank values (counts and displacements of v-ops).
    aux: [AtomicU64; 2 * MAX_RANKS],
    /// Root-written plan of a v-op.
    plan: AtomicU64,
}

/// The control block's path for a team name.
pub fn team_path(name: &str) -> PathBuf {
    if name.starts_with('/') {
        PathBuf::from(name)
    } else {
        PathBuf::from("/dev/shm").join(name)
    }
}

/// A member of a team.
pub struct Team {
    ctl: NonNull<Ctl>,
    rank: usize,
    size: usize,
    seq: u64,
    timeout: Duration,
    /// Regions kept between calls (dropped before the transport).
    cache: Option<RegionCache>,
    transport: Box<dyn Transport>,
    topo: Topology,
    params: Params,
    /// The model files passed over when the team was made (one line each).
    model_notes: Vec<String>,
}

// SAFETY: the control block is shared memory accessed only through
// atomics; the mapping lives as long as the Team.
unsafe impl Send for Team {}

impl Drop for Team {
    fn drop(&mut self) {
        // SAFETY: mapped in attach with this size, not used after drop.
        let _ = unsafe { munmap(self.ctl.cast(), std::mem::size_of::<Ctl>()) };
    }
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("transport", &self.transport.kind())
            .finish()
    }
}

/// How many fresh names [`create_fresh_block`] tries before it gives up
/// (each is new random bits: a collision means someone else made the file).
const CREATE_TRIES: usize = 8;

/// Teams this process named so far: one counter for every thread, so two
/// teams made at once (MPI_THREAD_MULTIPLE) never get one name.
static NAMED: AtomicU64 = AtomicU64::new(0);

/// 128 random bits from the kernel (getrandom, else /dev/urandom).
fn random_bits() -> Result<u128> {
    let mut b = [0u8; 16];
    // SAFETY: writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut b))
            .map_err(Error::io("read /dev/urandom"))?;
    }
    Ok(u128::from_ne_bytes(b))
}

/// A fresh control-block name: `prefix`, this process's pid, a
/// process-wide counter and 128 random bits, so that no other user can
/// guess it ahead and no two teams (two threads, or two jobs in separate
/// pid namespaces sharing /dev/shm) get the same one.
pub fn fresh_name(prefix: &str) -> Result<String> {
    let n = NAMED.fetch_add(1, Ordering::Relaxed);
    Ok(format!(
        "{prefix}-{}-{n}-{:032x}",
        std::process::id(),
        random_bits()?
    ))
}

/// Create the control block `name`, which must not exist yet: created
/// here and now (`O_CREAT | O_EXCL | O_NOFOLLOW`, so neither a file nor a
/// symbolic link someone put there first is used), readable and writable
/// by this user only, and sized.  The creator unlinks it once every rank
/// attached.
pub fn create_block(name: &str) -> Result<PathBuf> {
    let path = team_path(name);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(Error::io(format!("create team block {}", path.display())))?;
    // Whatever the umask: the ranks check for exactly this mode.
    let sized = f
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(Error::io(format!("chmod team block {}", path.display())))
        .and_then(|()| {
            f.set_len(std::mem::size_of::<Ctl>() as u64)
                .map_err(Error::io(format!("size team block {}", path.display())))
        });
    if let Err(e) = sized {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// Create a control block under a fresh name ([`fresh_name`]); its name.
pub fn create_fresh_block(prefix: &str) -> Result<String> {
    let mut last = None;
    for _ in 0..CREATE_TRIES {
        let name = fresh_name(prefix)?;
        match create_block(&name) {
            Ok(_) => return Ok(name),
            Err(Error::Io { source, what })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                last = Some(Error::Io { source, what });
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Invalid("no team block created".into())))
}

/// Open the control block at `path` for a rank: it must exist (only its
/// creator makes it), be no symbolic link, and be what [`create_block`]
/// made: a regular file of this user's, mode 0600, one link, the size of
/// a control block.  Anything else may be another user's file put there
/// to read or rewrite the team's descriptors: refused.
fn open_block(path: &std::path::Path) -> Result<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(Error::io(format!("open team block {}", path.display())))?;
    // fstat of what was opened, not a second look up of the name.
    let md = file
        .metadata()
        .map_err(Error::io(format!("fstat team block {}", path.display())))?;
    // SAFETY: geteuid cannot fail and touches no memory of ours.
    let euid = unsafe { libc::geteuid() };
    let want = std::mem::size_of::<Ctl>() as u64;
    let why = if !md.file_type().is_file() {
        Some("not a regular file".to_string())
    } else if md.uid() != euid {
        Some(format!("owned by uid {}, not {euid}", md.uid()))
    } else if md.mode() & 0o7777 != 0o600 {
        Some(format!("mode {:04o}, not 0600", md.mode() & 0o7777))
    } else if md.nlink() != 1 {
        Some(format!("{} links, not 1", md.nlink()))
    } else if md.len() != want {
        Some(format!("{} bytes, not {want}", md.len()))
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::Untrusted(format!(
            "team block {}: {why}",
            path.display()
        ))),
        None => Ok(file),
    }
}

fn env_usize(var: &'static str) -> Result<usize> {
    let v = std::env::var(var).map_err(|_| Error::NoTeam(var))?;
    v.trim()
        .parse()
        .map_err(|_| Error::Invalid(format!("{var}={v:?} is not a number")))
}

impl Team {
    /// Attach as set up by `knem-run` (KNEM_RS_TEAM, KNEM_RS_RANK,
    /// KNEM_RS_SIZE) with the transport from KNEM_RS_TRANSPORT or automatic.
    pub fn from_env() -> Result<Team> {
        let name = std::env::var(ENV_TEAM).map_err(|_| Error::NoTeam(ENV_TEAM))?;
        let rank = env_usize(ENV_RANK)?;
        let size = env_usize(ENV_SIZE)?;
        Team::attach(&name, rank, size, knem_transport::from_env()?)
    }

    /// True when this process was started by knem-run.
    pub fn in_team() -> bool {
        std::env::var_os(ENV_TEAM).is_some()
    }

    /// Attach to the control block `name`, made beforehand by
    /// [`create_block`] or [`create_fresh_block`] (a launcher, or rank 0
    /// before it hands the name to the others), as `rank` of `size`.
    /// Refuses a block this user did not create as those do (see
    /// `open_block`).  Returns once all `size` ranks attached.
    pub fn attach(
        name: &str,
        rank: usize,
        size: usize,
        transport: Box<dyn Transport>,
    ) -> Result<Team> {
        if size == 0 || size > MAX_RANKS || rank >= size {
            return Err(Error::Invalid(format!(
                "rank {rank} of team size {size} (1..={MAX_RANKS})"
            )));
        }
        let file = open_block(&team_path(name))?;
        let len = NonZeroUsize::new(std::mem::size_of::<Ctl>()).expect("nonzero");
        // SAFETY: a fresh shared mapping of a file exactly `len` long
        // (checked by open_block); we only ever access it through atomics.
        let ptr = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &file,
                0,
            )
        }
        .map_err(Error::sys("mmap team block"))?;
        let timeout = Duration::from_secs(
            std::env::var(ENV_TIMEOUT)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(120),
        );
        let mut model_notes = Vec::new();
        let params =
            crate::model::load_first_noting(&crate::model::model_paths(), transport.kind(), |l| {
                model_notes.push(l)
            })
            .map(|(p, _)| p)
            .unwrap_or_default()
            .for_host();
        let mut team = Team {
            ctl: ptr.cast(),
            rank,
            size,
            seq: 0,
            timeout,
            cache: None,
            transport,
            topo: Topology::single(size),
            params,
            model_notes,
        };
        let ctl = team.ctl();
        if let Err(cur) =
            ctl.size
                .compare_exchange(0, size as u64, Ordering::AcqRel, Ordering::Acquire)
        {
            if cur != size as u64 {
                return Err(Error::Invalid(format!(
                    "team {name} has size {cur}, not {size}"
                )));
            }
        }
        ctl.magic.store(MAGIC, Ordering::Release);
        team.transport.prepare_peer_access()?;
        let slot = &ctl.ranks[rank];
        slot.pid
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        slot.node
            .store(u64::from(crate::topo::current_node()), Ordering::Relaxed);
        slot.progress.store(0, Ordering::Release);
        team.barrier()?;
        let nodes: Vec<u32> = (0..size)
            .map(|r| ctl.ranks[r].node.load(Ordering::Relaxed) as u32)
            .collect();
        team.topo = Topology::from_env_or(nodes);
        Ok(team)
    }

    fn ctl(&self) -> &Ctl {
        // SAFETY: mapped for the life of self, zero-initialised by the file
        // (all-zero atomics are valid), accessed only through atomics.
        unsafe { self.ctl.as_ref() }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The transport in use.
    pub fn transport(&self) -> &dyn Transport {
        self.transport.as_ref()
    }

    /// Keep the regions this rank declares for collectives while their
    /// buffers repeat: at most `max_entries` regions covering `max_bytes`
    /// (least recently used go first); 0 for either drops every kept
    /// region and stops keeping them.  knem and CMA teams only.
    ///
    /// # Safety
    ///
    /// From now on, every range of this process that is about to be
    /// unmapped, remapped or lose its pages must be reported with
    /// [`crate::note_release`] before it happens (a region keeps the pages
    /// it pinned); Open MPI's memory release hooks are such a reporter.
    /// The brk heap is the exception: its buffers are never kept, since
    /// its trims often go unreported.
    pub unsafe fn cache_regions(&mut self, max_entries: usize, max_bytes: usize) -> Result<()> {
        if max_entries == 0 || max_bytes == 0 {
            self.cache = None;
            return Ok(());
        }
        let kind = self.transport.kind();
        if !RegionCache::suits(kind) {
            return Err(Error::Invalid(format!(
                "a {kind} team keeps no regions (its exposures are copies)"
            )));
        }
        self.cache = Some(RegionCache::new(max_entries, max_bytes));
        Ok(())
    }

    /// What the region cache did, if there is one.
    pub fn region_cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(RegionCache::stats)
    }

    /// Expose `ptr..ptr+len` for one call, through the region cache if
    /// there is one.
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must stay valid until the exposure is dropped, and the
    /// collective protocol must keep local accesses and peer accesses of
    /// the same bytes apart (ordered by barriers and progress signals).
    pub(crate) unsafe fn expose_ptr(
        &mut self,
        ptr: *const u8,
        len: usize,
        publish: bool,
    ) -> Result<Exposed> {
        // SAFETY: forwarded from the caller; the cache's own promise was
        // made to cache_regions.
        unsafe {
            match &mut self.cache {
                Some(c) => c.expose(self.transport.as_ref(), ptr, len, publish, self.seq),
                None => Ok(Exposed::owned(self.transport.expose_raw(
                    ptr.cast_mut(),
                    len,
                    publish,
                )?)),
            }
        }
    }

    /// The NUMA grouping of the ranks.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Replace the NUMA grouping (tests, or a launcher that knows better).
    /// Every rank must set the same one.
    pub fn set_topology(&mut self, topo: Topology) -> Result<()> {
        if topo.size() != self.size {
            return Err(Error::Invalid("topology of another team size".into()));
        }
        self.topo = topo;
        Ok(())
    }

    /// The model parameters the planner uses.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The model files passed over when the team was made, each with why
    /// (a file that is there but is no model); the team then used the
    /// next one, or the defaults.
    pub fn model_notes(&self) -> &[String] {
        &self.model_notes
    }

    /// Replace the model parameters (every rank must use the same).
    pub fn set_params(&mut self, p: Params) {
        self.params = p;
    }

    /// Pid of a rank.
    pub fn pid_of(&self, rank: usize) -> u32 {
        self.ctl().ranks[rank].pid.load(Ordering::Relaxed) as u32
    }

    fn spin_until(&self, what: &'static str, mut ready: impl FnMut() -> bool) -> Result<()> {
        let start = Instant::now();
        let mut i = 0u64;
        while !ready() {
            i += 1;
            if i < 64 {
                std::hint::spin_loop();
            } else {
                // Yield first; when a peer is slow (more ranks than cores)
                // sleep a little so the ranks doing the work get the CPU.
                if i < 512 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
                if i % 256 == 0 && start.elapsed() > self.timeout {
                    return Err(Error::Timeout {
                        what,
                        secs: self.timeout.as_secs(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Wait until every rank called barrier.
    pub fn barrier(&self) -> Result<()> {
        let ctl = self.ctl();
        // Read the generation before arriving: the last arrival bumps it.
        let gen = ctl.generation.0.load(Ordering::Acquire);
        if ctl.arrived.0.fetch_add(1, Ordering::AcqRel) + 1 == self.size as u64 {
            ctl.arrived.0.store(0, Ordering::Relaxed);
            ctl.generation.0.fetch_add(1, Ordering::Release);
            return Ok(());
        }
        self.spin_until("barrier", || {
            ctl.generation.0.load(Ordering::Acquire) != gen
        })
    }

    /// Run one collective call: when it fails after it began (a peer
    /// timed out, a copy failed), the regions it kept are dropped, since a
    /// late peer may still reach them once the caller reuses the buffers.
    /// A declined call keeps them: every rank returned before any byte
    /// moved.
    pub(crate) fn call<T>(&mut self, f: impl FnOnce(&mut Team) -> Result<T>) -> Result<T> {
        let seq = self.seq;
        let r = f(self);
        if let Err(e) = &r {
            if self.seq != seq && !matches!(e, Error::Declined { .. }) {
                if let Some(c) = &mut self.cache {
                    c.drop_call(self.seq);
                }
            }
        }
        r
    }

    /// How long a rank waits for a peer before its call fails with
    /// [`Error::Timeout`] (KNEM_RS_TIMEOUT, else 120 s, at attach).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Start a collective: a fresh sequence number for progress signals.
    pub(crate) fn begin(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn progress_value(&self, step: u64) -> u64 {
        (self.seq << 20) | step
    }

    /// Tell peers this rank reached `step` of the current collective.
    pub(crate) fn signal(&self, step: u64) {
        self.ctl().ranks[self.rank]
            .progress
            .store(self.progress_value(step), Ordering::Release);
    }

    /// Wait until `peer` reached `step` of the current collective.
    pub(crate) fn wait_for(&self, peer: usize, step: u64) -> Result<()> {
        let want = self.progress_value(step);
        let p = &self.ctl().ranks[peer].progress;
        self.spin_until("a peer's progress signal", || {
            p.load(Ordering::Acquire) >= want
        })
    }

    /// Write this rank's mailbox.
    pub(crate) fn put_words(&self, words: &[u64]) {
        for (w, v) in self.ctl().ranks[self.rank].words.iter().zip(words) {
            w.store(*v, Ordering::Relaxed);
        }
    }

    /// Read a rank's mailbox (after a barrier that follows its put).
    pub(crate) fn get_words(&self, rank: usize) -> [u64; SLOT_WORDS] {
        let mut out = [0u64; SLOT_WORDS];
        for (o, w) in out.iter_mut().zip(&self.ctl().ranks[rank].words) {
            *o = w.load(Ordering::Relaxed);
        }
        out
    }

    /// Exchange descriptors plus four extra words; one barrier.  The
    /// caller must pass another barrier before the next exchange.
    pub(crate) fn exchange_desc(
        &self,
        d: Descriptor,
        extra: [u64; 4],
    ) -> Result<Vec<(Descriptor, [u64; 4])>> {
        let w = d.to_words();
        self.put_words(&[
            w[0], w[1], w[2], w[3], extra[0], extra[1], extra[2], extra[3],
        ]);
        self.barrier()?;
        Ok((0..self.size)
            .map(|r| {
                let g = self.get_words(r);
                (
                    Descriptor::from_words([g[0], g[1], g[2], g[3]]),
                    [g[4], g[5], g[6], g[7]],
                )
            })
            .collect())
    }

    /// Small-message allgather: every rank's `words` (up to 8), e.g. to
    /// pass cookies or descriptors around.  Two barriers.
    pub fn allgather_words(&self, words: &[u64]) -> Result<Vec<[u64; SLOT_WORDS]>> {
        if words.len() > SLOT_WORDS {
            return Err(Error::Invalid(format!("more than {SLOT_WORDS} words")));
        }
        self.put_words(words);
        self.barrier()?;
        let out = (0..self.size).map(|r| self.get_words(r)).collect();
        self.barrier()?;
        Ok(out)
    }

    pub(crate) fn set_aux(&self, i: usize, v: u64) {
        self.ctl().aux[i].store(v, Ordering::Relaxed);
    }

    pub(crate) fn aux(&self, i: usize) -> u64 {
        self.ctl().aux[i].load(Ordering::Relaxed)
    }

    pub(crate) fn set_plan(&self, v: u64) {
        self.ctl().plan.store(v, Ordering::Relaxed);
    }

    pub(crate) fn plan_word(&self) -> u64 {
        self.ctl().plan.load(Ordering::Relaxed)
    }
}
