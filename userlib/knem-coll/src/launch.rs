//! Starting a team: create a control block, run N copies of a command with
//! KNEM_RS_TEAM / KNEM_RS_RANK / KNEM_RS_SIZE set, wait for all of them.

use crate::error::{Error, Result};
use crate::team::{create_fresh_block, team_path, ENV_RANK, ENV_SIZE, ENV_TEAM, MAX_RANKS};
use std::process::{Child, Command};
use std::time::Duration;

/// The prefix of the control blocks knem-run makes.
pub const TEAM_PREFIX: &str = "knem-rs-team";

/// How a team run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code per rank (128+signal for a killed rank).
    pub codes: Vec<i32>,
}

impl Outcome {
    /// True when every rank exited 0.
    pub fn success(&self) -> bool {
        self.codes.iter().all(|c| *c == 0)
    }

    /// The first non-zero code, or 0.
    pub fn code(&self) -> i32 {
        self.codes.iter().copied().find(|c| *c != 0).unwrap_or(0)
    }
}

/// Remove the shm-transport segments a dead rank left behind (a rank that
/// exits normally unlinks its own).
fn remove_segments(pid: u32) {
    let prefix = format!("knem-rs-seg-{pid}-");
    let dir = std::env::var_os("KNEM_RS_SHM_DIR")
        .map_or_else(|| "/dev/shm".into(), std::path::PathBuf::from);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

fn code_of(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Run `n` copies of `cmd` as a team; `configure` may adjust each rank's
/// command (it already has the team variables).  When a rank fails the
/// others are killed after a grace period, so a broken run never hangs.
pub fn run(n: usize, mut make: impl FnMut(usize) -> Command) -> Result<Outcome> {
    if n == 0 || n > MAX_RANKS {
        return Err(Error::Invalid(format!(
            "team size {n} not in 1..={MAX_RANKS}"
        )));
    }
    let name = create_fresh_block(TEAM_PREFIX)?;
    let path = team_path(&name);
    let mut children: Vec<Option<Child>> = Vec::with_capacity(n);
    for r in 0..n {
        let mut cmd = make(r);
        cmd.env(ENV_TEAM, &name)
            .env(ENV_RANK, r.to_string())
            .env(ENV_SIZE, n.to_string());
        match cmd.spawn() {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                let _ = std::fs::remove_file(&path);
                return Err(Error::Io {
                    what: format!("start rank {r}"),
                    source: e,
                });
            }
        }
    }
    let mut codes = vec![0; n];
    let mut left = n;
    let mut failed_at: Option<std::time::Instant> = None;
    while left > 0 {
        let mut progressed = false;
        for (r, slot) in children.iter_mut().enumerate() {
            if let Some(c) = slot {
                if let Ok(Some(st)) = c.try_wait() {
                    codes[r] = code_of(st);
                    if codes[r] != 0 {
                        remove_segments(c.id());
                    }
                    if codes[r] != 0 && failed_at.is_none() {
                        failed_at = Some(std::time::Instant::now());
                    }
                    *slot = None;
                    left -= 1;
                    progressed = true;
                }
            }
        }
        if let Some(t) = failed_at {
            if t.elapsed() > Duration::from_secs(2) {
                for (r, slot) in children.iter_mut().enumerate() {
                    if let Some(mut c) = slot.take() {
                        let _ = c.kill();
                        codes[r] = c.wait().map(code_of).unwrap_or(137);
                        remove_segments(c.id());
                        left -= 1;
                    }
                }
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(Outcome { codes })
}

/// Run `n` copies of this very executable with `args` (a program that
/// checks [`crate::Team::in_team`] to know it is a member).
pub fn run_self(n: usize, args: &[String]) -> Result<Outcome> {
    let exe = std::env::current_exe().map_err(Error::io("find own executable"))?;
    run(n, |_| {
        let mut c = Command::new(&exe);
        c.args(args);
        c
    })
}
