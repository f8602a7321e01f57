//! Rules and tuning: a team's rules file (knem_rs_team_load_rules and
//! what reads it) and the tuner of knemrs-tune (knem_rs_tuner_*), whose
//! Open MPI side comes in as C callbacks.

use crate::team::{op_of, put_algorithm, team_op, CTeam};
use crate::{coll_err, fail, guard, opt_str, PANICKED};
use knem_coll::rules::{self, Choice, Node, Rules};
use knem_coll::tune::{self, Bench, Config, Plan};
use knem_coll::{units, Error, Op};
use libc::{c_char, c_int, c_uint, c_void, size_t};
use std::time::Instant;

/// Read the rules into the team (see knem_rs.h).
#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_load_rules(team: *mut CTeam, path: *const c_char) -> c_int {
    guard(PANICKED, || {
        let t = deref!(team, "team");
        t.rules = None;
        // SAFETY: NULL or a C string by contract.
        let named = try_c!(unsafe { opt_str(path) }).map(std::path::PathBuf::from);
        let path = named.clone().unwrap_or_else(rules::default_path);
        if named.is_none() && !path.exists() {
            return 0;
        }
        match Rules::load_for(&path, &Node::this_host()) {
            Ok(r) => {
                t.rules = Some(r);
                1
            }
            Err(e) => rules_err(e),
        }
    })
}

/// A rules file's error: its own line, without "invalid argument: ".
fn rules_err(e: Error) -> c_int {
    match e {
        Error::Invalid(m) => fail(libc::EINVAL, m),
        e => coll_err(e),
    }
}

/// A digest of the team's rules; 0 without rules.
#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_rules_digest(team: *const CTeam) -> u64 {
    guard(0, || {
        if team.is_null() {
            return 0;
        }
        // SAFETY: a live team by contract.
        let t = unsafe { &*team };
        t.rules.as_ref().map_or(0, Rules::digest)
    })
}

/// Forget the team's rules.
#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_drop_rules(team: *mut CTeam) {
    guard((), || {
        if !team.is_null() {
            // SAFETY: a live team by contract.
            unsafe { (*team).rules = None };
        }
    })
}

/// What the team's rules say for op on n bytes per block (see knem_rs.h).
#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_decide(
    team: *const CTeam,
    op: c_int,
    n: size_t,
    alg: *mut c_int,
    k: *mut c_int,
) -> c_int {
    guard(PANICKED, || {
        // SAFETY: a live team (or NULL) by contract.
        let (t, op) = try_c!(unsafe { team_op(team, op) });
        let tname = t.team.transport().kind().name();
        let Some(case) = t
            .rules
            .as_ref()
            .and_then(|r| r.case(op, t.team.size(), tname))
        else {
            return fail(
                libc::ENOENT,
                format!("no rule for {op} on {} ranks over {tname}", t.team.size()),
            );
        };
        decided(case.decide(n as u64), alg, k)
    })
}

/// The model files passed over when the team was made, "; "-separated
/// ("" when none).
#[no_mangle]
pub unsafe extern "C" fn knem_rs_team_model_notes(team: *const CTeam) -> *const c_char {
    guard(c"".as_ptr(), || {
        if team.is_null() {
            return c"".as_ptr();
        }
        // SAFETY: a live team by contract; the text lives as long as it.
        unsafe { (*team).notes.as_ptr() }
    })
}

/// Open MPI's side of a tuning run (knem_rs.h).
#[repr(C)]
pub struct KnemRsTuneMpi {
    /// Passed to both callbacks.
    pub ctx: *mut c_void,
    /// Time calls of a candidate (an algorithm through coll/knemrs, or
    /// the MPI's own module for alg -1).
    pub time: Option<
        unsafe extern "C" fn(*mut c_void, c_int, c_int, c_int, size_t, c_uint, *mut f64) -> c_int,
    >,
    /// The maximum over the ranks, in place.
    pub max_all: Option<unsafe extern "C" fn(*mut c_void, *mut f64, size_t) -> c_int>,
}

fn mpi_failed(what: &str, rc: c_int) -> Error {
    Error::Invalid(format!("Open MPI's {what} failed ({rc})"))
}

/// The bench of a tuning run from C: every candidate is timed by the
/// caller, as the MPI will run it (knemrs-tune: through coll/knemrs).
struct CallbackBench<'a> {
    mpi: &'a KnemRsTuneMpi,
    ranks: (usize, usize),
}

impl Bench for CallbackBench<'_> {
    fn run(&mut self, op: Op, choice: Choice, n: u64) -> knem_coll::Result<f64> {
        let f = self.mpi.time.ok_or_else(|| mpi_failed("time (NULL)", 0))?;
        let code = Op::ALL.iter().position(|o| *o == op).unwrap_or(0) as c_int;
        let (mut alg, mut k) = (-1, 0);
        if let Choice::Knem(a) = choice {
            put_algorithm(a, &mut alg, &mut k);
        }
        let n = size_t::try_from(n).map_err(|_| Error::Overflow(format!("{n} bytes")))?;
        let mut secs = 0.0;
        // SAFETY: the caller's callback; secs outlives the call.
        let rc = unsafe {
            f(
                self.mpi.ctx,
                code,
                alg,
                k,
                n,
                tune::BURST as c_uint,
                &mut secs,
            )
        };
        match rc {
            0 => Ok(secs),
            1 => Err(Error::Declined {
                ranks: Vec::new(),
                cause: Some(format!("{choice} cannot carry {op} of {n} bytes here")),
            }),
            _ => Err(mpi_failed(&format!("{op} by {choice}"), rc)),
        }
    }

    fn max_all(&mut self, values: &mut [f64]) -> knem_coll::Result<()> {
        let f = self
            .mpi
            .max_all
            .ok_or_else(|| mpi_failed("max_all (NULL)", 0))?;
        // SAFETY: the caller's callback, on values.len() doubles.
        let rc = unsafe { f(self.mpi.ctx, values.as_mut_ptr(), values.len()) };
        if rc != 0 {
            return Err(mpi_failed("allreduce", rc));
        }
        Ok(())
    }

    fn ranks(&self) -> (usize, usize) {
        self.ranks
    }

    fn can_hand_over(&self) -> bool {
        true
    }
}

/// A tuning run's state: the rules it has made so far.
pub struct KnemRsTuner {
    rules: Rules,
    start: Instant,
}

/// A tuner (see knem_rs.h); NULL with knem_rs_last_error() on bad input.
#[no_mangle]
pub unsafe extern "C" fn knem_rs_tuner_new(
    open_mpi: *const c_char,
    ci_target: f64,
) -> *mut KnemRsTuner {
    guard(std::ptr::null_mut(), || {
        // SAFETY: NULL or a C string by contract.
        let Ok(ompi) = (unsafe { opt_str(open_mpi) }) else {
            return std::ptr::null_mut();
        };
        if !(ci_target > 0.0 && ci_target < 1.0) {
            fail(
                libc::EINVAL,
                format!("confidence target {ci_target} is not in (0, 1)"),
            );
            return std::ptr::null_mut();
        }
        let mut node = Node::this_host();
        node.open_mpi = ompi.unwrap_or_default().to_string();
        Box::into_raw(Box::new(KnemRsTuner {
            rules: Rules::new(node, ci_target),
            start: Instant::now(),
        }))
    })
}

fn parse_list<T>(
    text: Option<&str>,
    each: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, c_int> {
    text.map_or(Ok(Vec::new()), |s| {
        s.split(',')
            .filter(|w| !w.trim().is_empty())
            .map(|w| each(w.trim()))
            .collect::<Result<Vec<T>, String>>()
            .map_err(|e| fail(libc::EINVAL, e))
    })
}

/// Tune one team; every rank of it calls this alike (see knem_rs.h).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn knem_rs_tuner_run(
    tuner: *mut KnemRsTuner,
    team: *mut CTeam,
    mpi: *const KnemRsTuneMpi,
    ops: *const c_char,
    sizes: *const c_char,
    min_reps: c_uint,
    max_reps: c_uint,
    max_seconds: f64,
    verbose: c_int,
) -> c_int {
    guard(PANICKED, || {
        let tuner = deref!(tuner, "tuner");
        let t = deref!(team, "team");
        if mpi.is_null() {
            return fail(libc::EINVAL, "NULL callbacks");
        }
        // SAFETY: non-null, the caller's struct for the whole call.
        let mpi = unsafe { &*mpi };
        // SAFETY: NULL or C strings by contract.
        let (ops, sizes) = (
            try_c!(unsafe { opt_str(ops) }),
            try_c!(unsafe { opt_str(sizes) }),
        );
        let mut ops = try_c!(parse_list(ops, |w| w
            .parse::<Op>()
            .map_err(|e| e.to_string())));
        if ops.is_empty() {
            ops = Op::ALL.to_vec();
        }
        let mut sizes = try_c!(parse_list(sizes, units::parse_size));
        if sizes.is_empty() {
            sizes = tune::default_sizes();
        }
        if min_reps == 0 || max_reps < min_reps || max_seconds.is_nan() || max_seconds <= 0.0 {
            return fail(
                libc::EINVAL,
                format!("repetitions {min_reps}..{max_reps} or {max_seconds} s per size"),
            );
        }
        let plan = Plan {
            ops,
            sizes,
            cfg: Config {
                min_reps: min_reps as usize,
                max_reps: max_reps as usize,
                ci_target: tuner.rules.ci_target,
                max_seconds,
                ..Config::default()
            },
        };
        let topo = t.team.topology();
        let shape = (t.team.size(), topo.node_count(), topo.largest_group());
        let params = t.team.params().clone();
        let tname = t.team.transport().kind().name();
        let rank = t.team.rank();
        let mut bench = CallbackBench {
            mpi,
            ranks: (rank, shape.0),
        };
        let cases = try_c!(
            tune::tune_team(&mut bench, &params, shape, tname, &plan, |op, pt| {
                if verbose != 0 && rank == 0 {
                    let all: Vec<String> = pt
                        .timings
                        .iter()
                        .map(|x| {
                            format!(
                                "{} {:.1} us ±{:.1}% ({} reps)",
                                x.choice,
                                x.median_us,
                                100.0 * (x.ci_us[1] - x.median_us).max(x.median_us - x.ci_us[0])
                                    / x.median_us.max(f64::MIN_POSITIVE),
                                x.reps
                            )
                        })
                        .collect();
                    println!(
                        "knemrs-tune: {op} on {} ranks, {} B per block: {} | {}",
                        shape.0,
                        pt.bytes,
                        pt.choice,
                        all.join(", ")
                    );
                }
            })
            .map_err(coll_err)
        );
        for c in cases {
            tuner.rules.add(c);
        }
        0
    })
}

/// Write the rules made so far to path (see knem_rs.h).
#[no_mangle]
pub unsafe extern "C" fn knem_rs_tuner_write(
    tuner: *mut KnemRsTuner,
    path: *const c_char,
) -> c_int {
    guard(PANICKED, || {
        let tuner = deref!(tuner, "tuner");
        // SAFETY: NULL or a C string by contract.
        let Some(path) = try_c!(unsafe { opt_str(path) }) else {
            return fail(libc::EINVAL, "no path");
        };
        tuner.rules.tuning_seconds = tuner.start.elapsed().as_secs_f64();
        // Write a temporary file and rename it: a team reading the old
        // file meanwhile never sees half of the new one.
        let tmp = format!("{path}.tmp{}", std::process::id());
        let r =
            std::fs::write(&tmp, tuner.rules.to_json()).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            return fail(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("write {path}: {e}"),
            );
        }
        0
    })
}

/// Free a tuner (NULL is fine).
#[no_mangle]
pub unsafe extern "C" fn knem_rs_tuner_free(tuner: *mut KnemRsTuner) {
    guard((), || {
        if !tuner.is_null() {
            // SAFETY: a pointer knem_rs_tuner_new returned, freed once.
            drop(unsafe { Box::from_raw(tuner) });
        }
    })
}

/// What the rules file at `path` says for `op` on `ranks` ranks over
/// `transport` and n bytes per block, without a team (see knem_rs.h).
#[no_mangle]
pub unsafe extern "C" fn knem_rs_rules_decide(
    path: *const c_char,
    op: c_int,
    ranks: c_int,
    transport: *const c_char,
    n: size_t,
    alg: *mut c_int,
    k: *mut c_int,
) -> c_int {
    guard(PANICKED, || {
        // SAFETY: NULL or C strings by contract.
        let (path, tname) = (
            try_c!(unsafe { opt_str(path) }),
            try_c!(unsafe { opt_str(transport) }),
        );
        let (Some(path), Some(tname)) = (path, tname) else {
            return fail(libc::EINVAL, "no rules file or no transport named");
        };
        let Some(op) = op_of(op) else {
            return fail(libc::EINVAL, "unknown operation");
        };
        let Ok(ranks) = usize::try_from(ranks) else {
            return fail(libc::EINVAL, format!("negative team size {ranks}"));
        };
        let rules = try_c!(
            Rules::load_for(std::path::Path::new(path), &Node::this_host()).map_err(rules_err)
        );
        let Some(case) = rules.case(op, ranks, tname) else {
            return fail(
                libc::ENOENT,
                format!("no rule for {op} on {ranks} ranks over {tname}"),
            );
        };
        decided(case.decide(n as u64), alg, k)
    })
}

/// 0 for hand over; 1 with the algorithm's code in *alg and *k (each
/// NULL or writable).
fn decided(choice: Choice, alg: *mut c_int, k: *mut c_int) -> c_int {
    match choice {
        Choice::HandOver => 0,
        Choice::Knem(a) => {
            put_algorithm(a, alg, k);
            1
        }
    }
}

/// Whether knem lets this process pin without limit (see knem_rs.h): the
/// same test as coll/knemrs's region cache default.
#[no_mangle]
pub unsafe extern "C" fn knem_rs_pins_unlimited(limit_kib: *mut u64) -> c_int {
    guard(0, || {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a valid rlimit to fill.
        if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } == 0
            && rl.rlim_cur == libc::RLIM_INFINITY
        {
            return 1;
        }
        // CAP_IPC_LOCK (bit 14) counts only in the initial user namespace,
        // whose uid_map is the whole identity map.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let ipc_lock = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << 14) != 0);
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        let initial = uid_map
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .collect::<Vec<_>>()
            == [vec!["0", "0", "4294967295"]];
        if ipc_lock && initial {
            return 1;
        }
        let counted = std::fs::read_to_string("/sys/module/knem/parameters/account_pinned")
            .map_or(true, |v| !v.starts_with('N'));
        if !limit_kib.is_null() {
            // SAFETY: non-null, writable by contract.
            unsafe { *limit_kib = rl.rlim_cur / 1024 };
        }
        c_int::from(!counted)
    })
}
