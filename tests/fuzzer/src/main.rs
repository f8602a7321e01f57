//! knem-fuzz: random sequences of every /dev/knem command, with garbage and
//! edge arguments, over many fds and processes that fork, exit and are
//! SIGKILLed in the middle.  Runs in the VM (tests/fuzzer/run.sh).
//!
//! Usage: `knem-fuzz [--seed N] [--duration SECS] [--procs N]
//!                   [--max-steps N] [--no-setuid] [--no-oom-sizes] [--verbose]
//!                   [--dma PROVIDER.ko] [--kernel-faults]`
//!
//! `--dma` loads the test DMA provider (tests/dma-provider) and runs the
//! conductor (conductor.rs) beside the workers: it parks and releases the
//! engine's descriptors, slows and fails them, lowers knem's dma_timeout_ms
//! and SIGKILLs fuzzing processes in the middle of ioctls (a worker killed
//! so is replaced); the workers often ask for the engine and submit
//! ASYNCDMACOMPLETE copies larger than a batch's piece array.
//!
//! `--kernel-faults` turns each process's make-it-fail on for the length of
//! each call into /dev/knem (kfault.rs), for a run under the kernel's
//! task-filtered fault injection (tests/faults/in-vm.sh).
//!
//! `--no-oom-sizes` keeps iovec counts and region lengths out of the band
//! where the driver's kernel arrays (16 bytes an iovec, 8 bytes a page)
//! would be 32 MiB..2 GiB, which a 1 GiB guest can only serve by OOM-killing
//! (a known issue of the driver; without the option the fuzzer finds it).
//!
//! Checks: every call fails only with an errno of its documented set (and
//! never succeeds where it must fail); at the end, with every fd closed and
//! every process reaped, the driver's counters contexts, regions and
//! pinned_pages are 0 and the kernel's FOLL_PIN balance is what it was at
//! the start.  A failure line names the process, its seed and its step;
//! each process's sequence of decisions depends only on its seed and on the
//! results it gets (`--procs 1 --max-steps N` replays one process exactly
//! as far as the driver answers the same).  Prints a summary and
//! `N passed, N failed` last.

mod conductor;
mod engine;
mod kfault;
mod mem;
mod rng;
mod shared;

use engine::{errno_name, proc_text, say, Engine, Opts};
use rng::mix;
use shared::{Shared, ALL_OPS, EV_NAMES, NERR};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const SYSFS: &str = "/sys/class/misc/knem";

struct Args {
    seed: u64,
    duration: u64,
    procs: u32,
    max_steps: u64,
    setuid: bool,
    tame: bool,
    verbose: bool,
    /// --dma: the provider module to load.
    dma: Option<String>,
    kernel_faults: bool,
    /// Seconds after the deadline before a process still running is
    /// looked at (`--grace`).
    grace: u64,
    /// `--linger`: worker w0 spins (true) or sleeps (false) this long after
    /// its deadline, to check the hang detection below.
    linger: Option<(bool, u64)>,
}

fn usage() -> ! {
    eprintln!(
        "usage: knem-fuzz [--seed N] [--duration SECS] [--procs N] [--max-steps N] [--no-setuid] [--no-oom-sizes] [--verbose] [--dma PROVIDER.ko] [--kernel-faults] [--grace SECS] [--linger busy:SECS|idle:SECS]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        seed: random_seed(),
        duration: 60,
        procs: 4,
        max_steps: 0,
        setuid: true,
        tame: false,
        verbose: false,
        dma: None,
        kernel_faults: false,
        grace: 30,
        linger: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> u64 {
            let v = it.next().unwrap_or_else(|| usage());
            let v = v.trim();
            let r = if let Some(h) = v.strip_prefix("0x") {
                u64::from_str_radix(h, 16)
            } else {
                v.parse()
            };
            r.unwrap_or_else(|_| {
                eprintln!("knem-fuzz: {name} wants a number, not {v:?}");
                std::process::exit(2)
            })
        };
        match arg.as_str() {
            "--seed" => a.seed = num("--seed"),
            "--duration" => a.duration = num("--duration"),
            "--procs" => a.procs = num("--procs").clamp(1, 64) as u32,
            "--max-steps" => a.max_steps = num("--max-steps"),
            "--no-setuid" => a.setuid = false,
            "--no-oom-sizes" => a.tame = true,
            "--verbose" | "-v" => a.verbose = true,
            "--dma" => a.dma = Some(it.next().unwrap_or_else(|| usage())),
            "--kernel-faults" => a.kernel_faults = true,
            "--grace" => a.grace = num("--grace").max(1),
            "--linger" => {
                let v = it.next().unwrap_or_else(|| usage());
                let parsed = v.split_once(':').and_then(|(mode, secs)| {
                    let busy = match mode {
                        "busy" => true,
                        "idle" => false,
                        _ => return None,
                    };
                    Some((busy, secs.parse().ok()?))
                });
                a.linger = Some(parsed.unwrap_or_else(|| {
                    eprintln!("knem-fuzz: --linger wants busy:SECS or idle:SECS, not {v:?}");
                    std::process::exit(2)
                }));
            }
            "-h" | "--help" => usage(),
            _ => {
                eprintln!("knem-fuzz: unknown argument {arg:?}");
                usage()
            }
        }
    }
    a
}

/// The fewest steps a run must take to count: one per second of
/// `--duration` per process (at least one), or `--max-steps` per process
/// when that is fewer.  Workers take about 50 steps a second each under
/// TCG on a loaded 2-core host (4287 steps in 20 s with 4 processes, load
/// 20), and about 9 with `--dma`, whose conductor parks and fails their
/// copies (940 in 26 s), so only a run that hardly ran falls short.
fn min_steps(a: &Args) -> u64 {
    let per_proc = a.duration.max(1);
    let per_proc = if a.max_steps > 0 {
        per_proc.min(a.max_steps)
    } else {
        per_proc
    };
    per_proc.saturating_mul(u64::from(a.procs))
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // Keep it short enough to type.
    mix(u64::from_le_bytes(b) ^ t) % 1_000_000_000
}

fn counter(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("{SYSFS}/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn vmstat(name: &str) -> Option<i64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// FOLL_PIN pages outstanding system-wide (acquired - released), after
/// folding the per-cpu deltas.
fn foll_pins() -> Option<i64> {
    let _ = std::fs::write("/proc/sys/vm/stat_refresh", "1");
    Some(vmstat("nr_foll_pin_acquired")? - vmstat("nr_foll_pin_released")?)
}

extern "C" fn on_alarm(_: libc::c_int) {}

fn install_signals() {
    // SAFETY: a handler that does nothing, installed without SA_RESTART so
    // a blocked read returns EINTR; SIGPIPE ignored.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Children of this process (direct, or orphans handed to us as subreaper).
fn my_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = proc_text(pid, "stat");
            // pid (comm) state ppid ...
            if let Some(rest) = stat.rsplit_once(')').map(|x| x.1) {
                let ppid = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|x| x.parse::<i32>().ok());
                if ppid == Some(me) {
                    v.push(pid);
                }
            }
        }
    }
    v
}

/// `--linger`: stay past the deadline, spinning on the CPU or asleep.
fn linger(busy: bool, how_long: Duration) {
    let end = Instant::now() + how_long;
    while Instant::now() < end {
        if busy {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(end.saturating_duration_since(Instant::now()));
        }
    }
}

/// CPU time (user + system, in clock ticks) the processes have used.
fn cpu_ticks(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|&pid| {
            let stat = proc_text(pid, "stat");
            // After "pid (comm)": state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')')?.1;
            let mut f = rest.split_whitespace().skip(11);
            let utime: u64 = f.next()?.parse().ok()?;
            let stime: u64 = f.next()?.parse().ok()?;
            Some(utime + stime)
        })
        .sum()
}

fn main() {
    let args = parse_args();
    if args.kernel_faults {
        kfault::enable();
    }
    say(&format!(
        "knem-fuzz: seed {} duration {}s procs {} (replay: knem-fuzz --seed {} --duration {} --procs {})",
        args.seed, args.duration, args.procs, args.seed, args.duration, args.procs
    ));
    let mut checks: Vec<(String, Result<(), String>)> = Vec::new();

    // SAFETY: probing the device path.
    let fd = unsafe { libc::open(c"/dev/knem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        say(&format!(
            "FAIL device: cannot open /dev/knem: {}",
            errno_name(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        ));
        say("0 passed, 1 failed");
        std::process::exit(1);
    }
    // SAFETY: our fd.
    unsafe { libc::close(fd) };

    let root = unsafe { libc::geteuid() } == 0;
    let old_mode = std::fs::metadata("/dev/knem").ok().map(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o7777
    });
    if root && args.setuid {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions("/dev/knem", std::fs::Permissions::from_mode(0o666));
    }
    let base_pins = foll_pins();
    let base: Vec<(&str, Option<u64>)> = knem_abi::STATS
        .iter()
        .map(|&(n, _)| (n, counter(n)))
        .collect();

    install_signals();
    // SAFETY: plain prctl: orphans of SIGKILLed children come to us.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let shared = Shared::create();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.duration);

    let dma = match &args.dma {
        None => None,
        Some(ko) => match conductor::setup(ko) {
            Ok(d) => Some(d),
            Err(e) => {
                say(&format!("FAIL --dma: {e}"));
                say("0 passed, 1 failed");
                std::process::exit(1);
            }
        },
    };
    // SAFETY: getpid cannot fail.
    let main_pid = unsafe { libc::getpid() };
    let mut conductor_pid = 0;
    if let Some(d) = &dma {
        // SAFETY: single-threaded; the child leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            conductor::run(shared, mix(args.seed ^ 0xd1a), main_pid, deadline, d);
            // SAFETY: leave without the parent's exit path.
            unsafe { libc::_exit(0) };
        }
        say(&format!("knem-fuzz: DMA conductor pid {pid}"));
        conductor_pid = pid;
    }
    let spawn = |name: String, seed: u64| -> i32 {
        // SAFETY: single-threaded; the child leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            kfault::reopen();
            let opts = Opts {
                verbose: args.verbose,
                allow_setuid: args.setuid && root,
                tame: args.tame,
                max_steps: args.max_steps,
                dma: dma.is_some(),
            };
            let lingers = if name == "w0" { args.linger } else { None };
            let mut e = Engine::new(shared, seed, name, opts);
            e.run(deadline);
            e.finish();
            if let Some((busy, secs)) = lingers {
                linger(busy, Duration::from_secs(secs));
            }
            // SAFETY: leave without the parent's exit path.
            unsafe { libc::_exit(0) };
        }
        if pid > 0 {
            say(&format!("knem-fuzz: worker {name} pid {pid} seed {seed}"));
        }
        pid
    };
    let mut workers = Vec::new();
    for i in 0..args.procs {
        let seed = mix(args.seed ^ (u64::from(i) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let pid = spawn(format!("w{i}"), seed);
        if pid > 0 {
            workers.push(pid);
        }
    }
    let mut respawned = 0u64;

    // Wait for the workers, and every orphan handed to us.  Workers end at
    // the deadline and then wait up to 20 s for their own children; the
    // grace (30 s) after the deadline anything still running is hung (its
    // kernel stack is printed) and is SIGKILLed, unless it is still using
    // CPU: on an overloaded (emulated) machine a worker's last steps and
    // cleanup can take longer, so the check is repeated every third of the
    // grace while they work, up to four graces after the deadline.  20 s
    // after the kill, anything left survived SIGKILL.
    let mut procs_ok = Ok(());
    let grace = Duration::from_secs(args.grace);
    let resample = Duration::from_secs((args.grace / 3).max(1));
    let mut hung_at = deadline + grace;
    let slow_limit = deadline + 4 * grace;
    let mut ticks_seen: Option<u64> = None;
    let mut said_slow = false;
    let mut give_up = hung_at + Duration::from_secs(20);
    let mut killed_stragglers = false;
    let mut killed_hung = false;
    loop {
        let mut st = 0;
        // SAFETY: reaping our own children.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
        if r > 0 {
            let is_worker = workers.contains(&r);
            workers.retain(|&w| w != r);
            let by_conductor = libc::WIFSIGNALED(st)
                && libc::WTERMSIG(st) == libc::SIGKILL
                && shared.was_killed(r);
            if is_worker && by_conductor {
                // Killed mid-call on purpose: a fresh worker takes over.
                if Instant::now() + Duration::from_secs(1) < deadline {
                    respawned += 1;
                    let seed = mix(args.seed ^ respawned.wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
                    let pid = spawn(format!("r{respawned}"), seed);
                    if pid > 0 {
                        workers.push(pid);
                    }
                    shared.event(shared::Ev::WorkerRespawn);
                }
                continue;
            }
            let bad = if r == conductor_pid && !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0)
            {
                Some(format!(
                    "the DMA conductor (pid {r}) ended with status {st:#x}"
                ))
            } else if libc::WIFSIGNALED(st) {
                let s = libc::WTERMSIG(st);
                (is_worker && !killed_hung || s != libc::SIGKILL).then(|| {
                    let hint = if s == libc::SIGKILL {
                        " (the OOM killer? see the kernel log)"
                    } else {
                        ""
                    };
                    format!("pid {r} died of signal {s}{hint}")
                })
            } else if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) != 0 {
                Some(format!("pid {r} exited with {}", libc::WEXITSTATUS(st)))
            } else {
                None
            };
            if let Some(b) = bad {
                say(&format!("FAIL {b}"));
                procs_ok = Err(b);
            }
            continue;
        }
        if r < 0 {
            break; // ECHILD: nobody left
        }
        let now = Instant::now();
        if workers.is_empty() && !killed_stragglers && now > deadline + Duration::from_secs(5) {
            // Orphans run to their own deadline; anything left now goes.
            for p in my_children() {
                // SAFETY: a process we are the (sub)reaper of.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            killed_stragglers = true;
        }
        if now > hung_at && !killed_hung && now < slow_limit {
            let ticks = cpu_ticks(&my_children());
            // The first look only takes a sample; the next ones compare.
            if ticks_seen.map_or(true, |t| ticks > t) {
                if ticks_seen.is_some() && !said_slow {
                    say(&format!(
                        "knem-fuzz: still running after the deadline, but using CPU: waiting up to {} s",
                        4 * args.grace
                    ));
                    said_slow = true;
                }
                ticks_seen = Some(ticks);
                hung_at = now + resample;
                give_up = hung_at + Duration::from_secs(20);
            }
        }
        if now > hung_at && !killed_hung {
            let after = now.saturating_duration_since(deadline).as_secs();
            let mut msg = format!("still running {after} s after the deadline:");
            for p in my_children() {
                msg.push_str(&format!(
                    " pid {p}{} wchan={} stack=[{}]",
                    if workers.contains(&p) {
                        " (worker)"
                    } else {
                        ""
                    },
                    proc_text(p, "wchan"),
                    proc_text(p, "stack").replace('\n', " | ")
                ));
                // SAFETY: as above.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            say(&format!("FAIL {msg}"));
            procs_ok = Err(msg);
            killed_hung = true;
        }
        if now > give_up {
            let mut msg = String::from("survived SIGKILL for 20 s:");
            for p in my_children() {
                msg.push_str(&format!(
                    " pid {p} wchan={} stack=[{}]",
                    proc_text(p, "wchan"),
                    proc_text(p, "stack").replace('\n', " | ")
                ));
            }
            say(&format!("FAIL {msg}"));
            procs_ok = Err(msg);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = start.elapsed().as_secs_f64();

    if let Some(m) = old_mode {
        if root && args.setuid {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions("/dev/knem", std::fs::Permissions::from_mode(m));
        }
    }

    // The engine runs whatever is parked, so abandoned batches are reaped.
    if let Some(d) = &dma {
        conductor::release(d);
    }
    // Counters back to zero (frees may wait for RCU and offload threads,
    // abandoned DMA batches for the provider to run what was parked, which
    // on the KASAN lab kernel under TCG took longer than 10 s once): a
    // leak never gets there, so waiting up to a minute costs nothing.
    let want0 = ["contexts", "regions", "pinned_pages", "offload_threads"];
    let t0 = Instant::now();
    let leak = loop {
        let vals: Vec<(&str, Option<u64>)> = want0.iter().map(|&n| (n, counter(n))).collect();
        let pins = foll_pins();
        let mut d = Vec::new();
        for (n, v) in &vals {
            match v {
                Some(0) => {}
                Some(x) => d.push(format!("{n} = {x}")),
                None => d.push(format!("{SYSFS}/{n} unreadable")),
            }
        }
        if dma.is_some() {
            match conductor::knem_param("dma_abandoned") {
                Some(0) | None => {}
                Some(n) => d.push(format!("dma_abandoned = {n}")),
            }
        }
        match (base_pins, pins) {
            (Some(b), Some(p)) if b != p => d.push(format!(
                "FOLL_PIN acquired-released {b} at start, {p} now ({} pages)",
                p - b
            )),
            (Some(_), Some(_)) => {}
            _ => d.push("/proc/vmstat has no nr_foll_pin_*".into()),
        }
        if d.is_empty() || t0.elapsed() > Duration::from_secs(60) {
            break d;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if t0.elapsed() > Duration::from_secs(1) {
        say(&format!(
            "knem-fuzz: the counters took {:.1} s to settle after the run",
            t0.elapsed().as_secs_f64()
        ));
    }
    let (counters_res, pins_res) = {
        let (p, c): (Vec<String>, Vec<String>) = leak
            .into_iter()
            .partition(|s| s.contains("FOLL_PIN") || s.contains("vmstat"));
        (
            if c.is_empty() {
                Ok(())
            } else {
                Err(c.join(", "))
            },
            if p.is_empty() {
                Ok(())
            } else {
                Err(p.join(", "))
            },
        )
    };

    // ---- Summary ----------------------------------------------------------
    let steps = shared.steps.load(Ordering::Relaxed);
    let failures = shared.failures.load(Ordering::Relaxed);
    say(&format!(
        "knem-fuzz: seed {} ran {:.1}s, {} steps ({:.0}/s), {} failure(s)",
        args.seed,
        elapsed,
        steps,
        steps as f64 / elapsed.max(0.001),
        failures
    ));
    say("calls per command (errno: count):");
    let mut total = vec![0u64; NERR];
    for op in ALL_OPS {
        let row = &shared.calls[op as usize];
        let n: u64 = row.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let mut parts = Vec::new();
        for (e, c) in row.iter().enumerate() {
            let c = c.load(Ordering::Relaxed);
            if c > 0 {
                total[e] += c;
                parts.push(format!("{} {}", errno_name(e as i32), c));
            }
        }
        say(&format!(
            "  {:<20} {:>8}  {}",
            op.name(),
            n,
            parts.join(", ")
        ));
    }
    let hist: Vec<String> = total
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(e, c)| format!("{} {}", errno_name(e as i32), c))
        .collect();
    say(&format!("errno histogram: {}", hist.join(", ")));
    say("events:");
    for (i, name) in EV_NAMES.iter().enumerate() {
        say(&format!(
            "  {:<36} {}",
            name,
            shared.events[i].load(Ordering::Relaxed)
        ));
    }
    let deltas: Vec<String> = base
        .iter()
        .filter_map(|(n, b)| {
            let now = counter(n)?;
            let d = now.wrapping_sub(b.unwrap_or(0));
            (d != 0).then(|| format!("{n} +{d}"))
        })
        .collect();
    say(&format!(
        "driver counters during the run: {}",
        deltas.join(", ")
    ));

    // A run that took (almost) no step checked (almost) nothing: it fails.
    let want = min_steps(&args);
    checks.push((
        format!("the processes took at least {want} steps"),
        if steps >= want {
            Ok(())
        } else {
            Err(format!(
                "{steps} steps in the whole run, expected at least {want} ({} process(es) x {} s at 1 step/s{})",
                args.procs,
                args.duration,
                if args.max_steps > 0 {
                    format!(", at most --max-steps {} each", args.max_steps)
                } else {
                    String::new()
                }
            ))
        },
    ));
    checks.push((
        "no errno outside the documented sets, no wrong success".into(),
        if failures == 0 {
            Ok(())
        } else {
            Err(format!("{failures} failure(s), see FAIL lines"))
        },
    ));
    checks.push((
        "every process exited normally or by SIGKILL".into(),
        procs_ok,
    ));
    checks.push((
        "contexts, regions, pinned_pages back to 0".into(),
        counters_res,
    ));
    checks.push(("FOLL_PIN balance back to its start value".into(), pins_res));
    if let Some(d) = &dma {
        let ran = conductor::provider_param("done")
            .unwrap_or(0)
            .wrapping_sub(d.done0);
        say(&format!(
            "DMA: provider ran {ran} descriptors, failed {} on purpose; {respawned} worker(s) respawned",
            conductor::provider_param("failed")
                .unwrap_or(0)
                .wrapping_sub(d.failed0)
        ));
        // Under --kernel-faults the injected failures may refuse every
        // DMA copy before it reaches the engine: the count is reported
        // (tests/faults/in-vm.sh prints it per run), not required.
        if !args.kernel_faults {
            checks.push((
                "the DMA provider ran descriptors (--dma)".into(),
                if ran > 0 {
                    Ok(())
                } else {
                    Err("no descriptor ran on the provider: the DMA path was not reached".into())
                },
            ));
        }
    }
    let (mut passed, mut failed) = (0, 0);
    for (name, r) in &checks {
        match r {
            Ok(()) => {
                passed += 1;
                say(&format!("ok {name}"));
            }
            Err(m) => {
                failed += 1;
                say(&format!("FAIL {name}: {m} (seed {})", args.seed));
            }
        }
    }
    say(&format!("{passed} passed, {failed} failed"));
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
