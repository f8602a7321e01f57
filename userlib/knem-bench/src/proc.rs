//! Forked peer processes and waiting for them without hanging forever.

use crate::err;
use crate::error::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, getpid, getppid, ForkResult, Pid};
use std::time::{Duration, Instant};

/// How long a wait may see no progress before the peer counts as stalled.
const STALL: Duration = Duration::from_secs(120);

/// A forked child; killed and reaped on drop unless [`Child::wait`] ran.
pub struct Child {
    pid: Pid,
    reaped: bool,
}

impl Child {
    /// The child's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Wait for the child and turn a non-zero exit into an error.
    pub fn wait(mut self) -> Result<()> {
        let st = waitpid(self.pid, None).ctx("waitpid")?;
        self.reaped = true;
        match st {
            WaitStatus::Exited(_, 0) => Ok(()),
            WaitStatus::Exited(_, c) => {
                Err(err!("peer process {} exited with status {c}", self.pid))
            }
            WaitStatus::Signaled(_, s, _) => Err(err!("peer process {} killed by {s}", self.pid)),
            other => Err(err!(
                "peer process {}: unexpected state {other:?}",
                self.pid
            )),
        }
    }

    /// True once the child has exited (without reaping it).
    pub fn exited(&self) -> bool {
        // SAFETY: a zeroed siginfo_t is a valid output buffer for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`; WNOWAIT leaves the child
        // to be reaped by `wait` or `drop`.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid.as_raw() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: waitid filled `info` (or left it zeroed: si_pid 0).
        rc != 0 || unsafe { info.si_pid() } != 0
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = waitpid(self.pid, None);
        }
    }
}

/// Fork; the child runs `body` and exits (0 on success, 1 after printing
/// the error), never returning into the caller's code.
pub fn spawn<F: FnOnce() -> Result<()>>(body: F) -> Result<Child> {
    spawn_inner(body, true)
}

/// As [`spawn`], but the child exits with 1 without printing its error
/// (for probes whose failure the parent explains).
pub fn spawn_quiet<F: FnOnce() -> Result<()>>(body: F) -> Result<Child> {
    spawn_inner(body, false)
}

fn spawn_inner<F: FnOnce() -> Result<()>>(body: F, report: bool) -> Result<Child> {
    // SAFETY: the program is single-threaded when it forks (the progress
    // bar draws from the main thread only), so the child may run Rust code.
    match unsafe { fork() }.ctx("fork")? {
        ForkResult::Parent { child } => Ok(Child {
            pid: child,
            reaped: false,
        }),
        ForkResult::Child => {
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(Ok(())) => 0,
                Ok(Err(e)) => {
                    if report {
                        eprintln!("knem-bench: peer process: {e}");
                    }
                    1
                }
                Err(_) => 101,
            };
            // SAFETY: _exit skips the parent's atexit handlers and buffered
            // stdio it inherited, which must run once, in the parent.
            unsafe { libc::_exit(code) }
        }
    }
}

/// Who a waiting process depends on: its parent (when it is a child) or the
/// children it forked.
pub enum Peers<'a> {
    /// We are a child of this parent.
    Parent(Pid),
    /// We are the parent of these.
    Children(&'a [Child]),
    /// Nobody (single-process benchmarks).
    None,
}

impl Peers<'_> {
    /// The peers of a freshly forked child.
    pub fn parent() -> Peers<'static> {
        Peers::Parent(getppid())
    }

    fn check(&self) -> Result<()> {
        match self {
            Peers::Parent(p) if getppid() != *p => {
                Err(err!("parent process {p} went away (pid {})", getpid()))
            }
            Peers::Children(cs) => match cs.iter().find(|c| c.exited()) {
                Some(c) => Err(err!("peer process {} exited early", c.pid())),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Spin (then yield) until `ready()`; fail if a peer dies or nothing
    /// happens for two minutes.
    pub fn wait_until(&self, mut ready: impl FnMut() -> bool) -> Result<()> {
        let mut spins: u64 = 0;
        let mut since = None::<Instant>;
        loop {
            if ready() {
                return Ok(());
            }
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
            if spins % 1024 == 0 {
                self.check()?;
                let start = *since.get_or_insert_with(Instant::now);
                if start.elapsed() > STALL {
                    return Err(err!("peer stalled for {} s", STALL.as_secs()));
                }
            }
        }
    }
}
