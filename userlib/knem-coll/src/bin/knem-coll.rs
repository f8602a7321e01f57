//! knem-coll: calibrate the cost model, explain the planner, check and
//! benchmark the collectives.  Commands that need a team start one
//! themselves (`-n`) unless already run under knem-run.

use clap::Parser;
use knem_coll::cli::coll::{Cli, Cmd};
use knem_coll::{bench, calibrate, check, model, units, Op, Params, Team};
use std::path::PathBuf;
use std::process::ExitCode;

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("knem-coll: {e}");
    ExitCode::FAILURE
}

fn relaunch(n: usize) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match knem_coll::launch::run_self(n, &args) {
        Ok(o) if o.success() => ExitCode::SUCCESS,
        Ok(o) => fail(format!("a rank failed (exit codes {:?})", o.codes)),
        Err(e) => fail(e),
    }
}

/// Where ranks of `knem-coll check` leave their tallies for the launcher.
const ENV_SUMMARY: &str = "KNEM_RS_CHECK_SUMMARY";

/// `check` outside a team: start the ranks, then print one summary line
/// last, `P passed, F failed`, whatever happened (a rank that died without
/// a tally counts as one failure).  `args` go to every rank.
fn relaunch_check(teams: &[usize], args: &[String]) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(e),
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for &n in teams {
        let base = std::env::temp_dir().join(format!("knem-coll-check-{}-{n}", std::process::id()));
        let out = knem_coll::launch::run(n, |_| {
            let mut c = std::process::Command::new(&exe);
            c.args(["check", "-n", &n.to_string()])
                .args(args)
                .env(ENV_SUMMARY, &base);
            c
        });
        let (mut p, mut f) = (usize::MAX, 0usize);
        for r in 0..n {
            let mut path = base.clone().into_os_string();
            path.push(format!(".{r}"));
            let tally = std::fs::read_to_string(&path).ok().and_then(|s| {
                let mut w = s.split_whitespace().map(|x| x.parse::<usize>().ok());
                Some((w.next()??, w.next()??))
            });
            let _ = std::fs::remove_file(&path);
            match tally {
                Some((a, b)) => {
                    p = p.min(a);
                    f = f.max(b);
                }
                None => f = f.max(1),
            }
        }
        match out {
            Ok(o) if o.success() => {}
            Ok(o) => {
                eprintln!(
                    "knem-coll: {n} ranks: a rank failed (exit codes {:?})",
                    o.codes
                );
                f = f.max(1);
            }
            Err(e) => {
                eprintln!("knem-coll: {n} ranks: {e}");
                f = f.max(1);
            }
        }
        passed += if p == usize::MAX { 0 } else { p };
        failed += f;
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The rules `explain` shows: a file the user named must be usable (else
/// the error, before anything is printed); the default one is noted on
/// stderr when it is there but cannot be used.  Ok(Err(path)): no file.
fn explain_rules_load(
    named: Option<PathBuf>,
) -> Result<Result<(knem_coll::rules::Rules, PathBuf), PathBuf>, String> {
    use knem_coll::rules::{self, Node, Rules};
    let path = named.clone().unwrap_or_else(rules::default_path);
    if named.is_none() && !path.exists() {
        return Ok(Err(path));
    }
    match Rules::load_for(&path, &Node::this_host()) {
        Ok(r) => Ok(Ok((r, path))),
        Err(knem_coll::Error::Invalid(m)) if named.is_some() => Err(m),
        Err(e) if named.is_some() => Err(e.to_string()),
        Err(e) => {
            eprintln!("knem-coll: passed over {e}");
            Ok(Err(path))
        }
    }
}

/// What the rules say for the case, beside the model's `chosen`, and
/// which of the two decides.
fn explain_rules(
    rules: &Result<(knem_coll::rules::Rules, PathBuf), PathBuf>,
    op: Op,
    n: u64,
    p: usize,
    transport: &str,
    chosen: Option<knem_coll::Algorithm>,
) {
    let model = chosen.map_or("none".to_string(), |a| a.to_string());
    let (r, path) = match rules {
        Ok((r, path)) => (r, path),
        Err(path) => {
            println!(
                "\nrules: none usable at {} (run knemrs-tune): the model decides ({model})",
                path.display()
            );
            return;
        }
    };
    let source = format!(
        "{}, tuned with Open MPI {} on {} CPUs",
        path.display(),
        if r.node.open_mpi.is_empty() {
            "-"
        } else {
            &r.node.open_mpi
        },
        r.node.cores
    );
    let Some(case) = r.case(op, p, transport) else {
        let tuned: Vec<String> = r
            .cases
            .iter()
            .map(|c| format!("{}/{}/{}", c.op, c.ranks, c.transport))
            .collect();
        println!(
            "\nrules ({source}): no case for {op} on {p} ranks over {transport} (tuned: {}): \
             the model decides ({model})",
            tuned.join(", ")
        );
        return;
    };
    let choice = case.decide(n);
    let range = case
        .ranges
        .iter()
        .find(|r| r.from <= n.max(1) && n.max(1) < r.to);
    println!(
        "\nrules ({source}): {choice}{}",
        match range {
            Some(r) if r.to == u64::MAX => format!(" from {} B on", r.from),
            Some(r) => format!(" for {} to {} B", r.from, r.to - 1),
            None => String::new(),
        }
    );
    for pt in &case.points {
        let times: Vec<String> = pt
            .timings
            .iter()
            .map(|t| format!("{} {:.1} us", t.choice, t.median_us))
            .collect();
        println!("  measured at {} B: {}", pt.bytes, times.join(", "));
    }
    println!("decides: the rules ({choice}; the model would take {model})");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Explain {
            op,
            size,
            p,
            nodes,
            preset,
            transport,
            model,
            rules,
            cpus,
        } => {
            let op: Op = match op.parse() {
                Ok(o) => o,
                Err(e) => return fail(e),
            };
            let Some(n) = units::parse_size(&size).ok().map(|n| n as usize) else {
                return fail(format!("bad size {size:?}"));
            };
            let rules = match explain_rules_load(rules) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            let host = preset.is_none();
            // The transport the rules are looked up for: the one named,
            // else the automatic one (knem where /dev/knem opens).
            let rules_transport = match &transport {
                Some(t) => t.clone(),
                None => knem_transport::from_env()
                    .map(|t| t.kind().name().to_string())
                    .unwrap_or_else(|_| "knem".into()),
            };
            let mut params = if let Some(name) = preset {
                match Params::preset(&name) {
                    Some(p) => p,
                    None => {
                        return fail(format!("unknown preset {name:?} (knl, broadwell, power8)"))
                    }
                }
            } else {
                let kind = match transport.map(|t| t.parse()).transpose() {
                    Ok(Some(k)) => k,
                    Ok(None) => match knem_transport::from_env() {
                        Ok(t) => t.kind(),
                        Err(e) => return fail(e),
                    },
                    Err(e) => return fail(e),
                };
                match model {
                    // A file the user named must be a model with this
                    // transport in it: anything else is an error, never
                    // the default guess in its place.
                    Some(m) => match model::load(&m) {
                        Ok(mut all) => match all.remove(kind.name()) {
                            Some(p) => p,
                            None => {
                                return fail(format!(
                                    "{}: no calibration for the {} transport in it (it has: {})",
                                    m.display(),
                                    kind.name(),
                                    if all.is_empty() {
                                        "none".to_string()
                                    } else {
                                        all.keys().cloned().collect::<Vec<_>>().join(", ")
                                    }
                                ))
                            }
                        },
                        Err(knem_coll::Error::Invalid(m)) => return fail(m),
                        Err(e) => return fail(e),
                    },
                    // The usual places: a file that is there but cannot be
                    // used is named on stderr, then the next one is tried.
                    None => model::load_first_noting(&model::model_paths(), kind, |line| {
                        eprintln!("knem-coll: {line}")
                    })
                    .map(|(p, _)| p)
                    .unwrap_or_default(),
                }
            };
            params.cpus = cpus.unwrap_or(if host { model::host_cpus() } else { 0 });
            let group = p.div_ceil(nodes.max(1));
            println!(
                "{op} of {n} B on {p} ranks ({nodes} node(s), {}); parameters: {}",
                if params.cpus == 0 {
                    "a CPU per rank".to_string()
                } else {
                    format!("{} CPUs", params.cpus)
                },
                params.source
            );
            println!(
                "{:<20} {:>14} {:>10}",
                "algorithm", "predicted_us", "vs_best"
            );
            let all = params.explain(op, n as u64, p, nodes, group);
            let best = all.first().map_or(1.0, |b| b.1);
            for (i, (a, c)) in all.iter().enumerate() {
                println!(
                    "{:<20} {:>14.2} {:>10.2}{}",
                    a.to_string(),
                    c * 1e6,
                    c / best,
                    if i == 0 { "  <- chosen" } else { "" }
                );
            }
            println!(
                "\nterms (count x each; a copy is alpha + (bytes + pages + contention) \
                 x shared bandwidth, x CPU turns); contention: {}",
                match &params.contention {
                    Some(g) => format!(
                        "measured, {} sizes x {} reader counts{}",
                        g.sizes.len(),
                        g.readers.len(),
                        match (g.apart.is_empty(), g.write.is_empty()) {
                            (false, false) => ", with steps of own blocks read and written",
                            (false, true) => ", with steps of own blocks read",
                            _ => "",
                        }
                    ),
                    None => "l (gamma_c - 1) per page (no measured grid)".to_string(),
                }
            );
            let chosen = all.first().map(|c| c.0);
            explain_rules(&rules, op, n as u64, p, &rules_transport, chosen);
            for (a, _) in &all {
                println!("{a}:");
                if let Some(pred) = params.predict(op, *a, n as u64, p, nodes, group) {
                    for t in &pred.terms {
                        println!("  {t}");
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Cmd::Calibrate {
            n,
            reps,
            model,
            system,
        } => {
            if !Team::in_team() {
                return relaunch(n);
            }
            let mut team = match Team::from_env() {
                Ok(t) => t,
                Err(e) => return fail(e),
            };
            match calibrate::calibrate(&mut team, reps) {
                Ok(Some(p)) => {
                    let path = if system {
                        PathBuf::from(model::SYSTEM_MODEL)
                    } else {
                        model.unwrap_or_else(model::model_path)
                    };
                    if let Err(e) = model::store(&path, team.transport().kind(), &p) {
                        return fail(e);
                    }
                    println!(
                        "{}: alpha {:.3} us, beta^-1 {:.2} GB/s, l {:.4} us/page, s {} B, gamma(c) = {:.4} c^2 + {:.4} c, sync {:.2} us",
                        p.source,
                        p.alpha * 1e6,
                        if p.beta > 0.0 { 1e-9 / p.beta } else { f64::INFINITY },
                        p.l * 1e6,
                        p.page,
                        p.gamma_a,
                        p.gamma_b,
                        p.sync * 1e6
                    );
                    println!("gamma points: {:?}", p.gamma_points);
                    println!(
                        "steps of m concurrent 8 MiB copies (m, time / one): {:?}",
                        p.step_points
                    );
                    println!(
                        "copies at once: parallel efficiency e {:.3} (beyond a {} KiB cache); beyond {} CPUs: +{:.0}% for time slicing",
                        p.bw_par,
                        p.cache >> 10,
                        p.cpus,
                        p.oversub * 100.0
                    );
                    if let Some(g) = &p.contention {
                        println!(
                            "contention (us per reader; rows: size, columns: readers {:?}){}:",
                            g.readers,
                            if g.pin.is_empty() {
                                ""
                            } else {
                                ", copy / pin only"
                            }
                        );
                        for (i, n) in g.sizes.iter().enumerate() {
                            let cells: Vec<String> = (0..g.readers.len())
                                .map(|j| match g.pin.get(i) {
                                    Some(pin) => {
                                        format!("{:.2}/{:.2}", g.copy[i][j] * 1e6, pin[j] * 1e6)
                                    }
                                    None => format!("{:.2}", g.copy[i][j] * 1e6),
                                })
                                .collect();
                            println!("  {:>8} B: {}", n, cells.join("  "));
                        }
                        for (what, table) in [
                            ("reading their own blocks of one buffer", &g.apart),
                            ("writing their own blocks of one buffer", &g.write),
                        ] {
                            if table.is_empty() {
                                continue;
                            }
                            println!(
                                "steps of ranks {what} (us until the last ends; columns: ranks):"
                            );
                            for (n, row) in g.sizes.iter().zip(table) {
                                let cells: Vec<String> =
                                    row.iter().map(|t| format!("{:.2}", t * 1e6)).collect();
                                println!("  {:>8} B: {}", n, cells.join("  "));
                            }
                        }
                    }
                    println!("progress signal: {:.2} us a hop", p.signal * 1e6);
                    println!(
                        "ring drift: unsynchronised ring steps take {:.2}x lockstep",
                        p.ring_drift
                    );
                    println!("how well each fitted term matches its own measurements:");
                    for f in p.fit_report(n, calibrate::BIG as u64) {
                        println!("  {f}");
                    }
                    println!(
                        "page lock span: {}",
                        if p.lock_span == 0 {
                            "the whole source (disjoint blocks contend)".to_string()
                        } else {
                            format!(
                                "{} KiB (disjoint blocks further apart do not contend)",
                                p.lock_span >> 10
                            )
                        }
                    );
                    println!("stored in {}", path.display());
                    ExitCode::SUCCESS
                }
                Ok(None) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Cmd::Check {
            n,
            quick,
            all_teams,
            teams,
            sizes,
            big,
        } => {
            let (mut small_sizes, mut big_sizes) = check::sizes(quick);
            for (list, arg) in [(&mut small_sizes, &sizes), (&mut big_sizes, &big)] {
                if arg.is_empty() {
                    continue;
                }
                // `--big ''` (an empty list) turns the big sizes off.
                let items = arg.iter().filter(|s| !s.trim().is_empty());
                match items
                    .map(|s| units::parse_size(s).ok().map(|n| n as usize))
                    .collect()
                {
                    Some(v) => *list = v,
                    None => return fail(format!("bad size list {}", arg.join(","))),
                }
            }
            if !Team::in_team() {
                let teams: Vec<usize> = if !teams.is_empty() {
                    teams
                } else if all_teams {
                    (1..=n).collect()
                } else {
                    vec![n]
                };
                let join = |v: &[usize]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
                let args = [
                    "--sizes".to_string(),
                    join(&small_sizes).join(","),
                    "--big".to_string(),
                    join(&big_sizes).join(","),
                ];
                return relaunch_check(&teams, &args);
            }
            let mut team = match Team::from_env() {
                Ok(t) => t,
                Err(e) => return fail(e),
            };
            let (small, big) = (small_sizes, big_sizes);
            let started = std::time::Instant::now();
            let rank = team.rank();
            let (t, r) = check::sweep_tally(&mut team, &small, &big, |m| {
                eprintln!("knem-coll: rank {rank}: FAIL {m}");
            });
            let failed = t.failed + usize::from(r.is_err());
            if let Err(e) = &r {
                eprintln!("knem-coll: rank {rank}: {e}");
            }
            if r.is_ok() && rank == 0 {
                println!(
                    "{}: {} collectives checked on {} ranks with {} in {:.1} s",
                    if t.failed == 0 { "ok" } else { "FAILED" },
                    t.passed + t.failed,
                    team.size(),
                    team.transport().kind(),
                    started.elapsed().as_secs_f64()
                );
            }
            // Under `knem-coll check` the launcher prints the summary last;
            // under another launcher rank 0 (and any rank that stopped
            // early) prints it.
            match std::env::var_os(ENV_SUMMARY) {
                Some(path) => {
                    let mut path = path;
                    path.push(format!(".{rank}"));
                    let _ = std::fs::write(&path, format!("{} {}\n", t.passed, failed));
                }
                None if rank == 0 || r.is_err() => {
                    println!("{} passed, {failed} failed", t.passed);
                }
                None => {}
            }
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Cmd::Bench {
            n,
            ops,
            sizes,
            reps,
            out,
        } => {
            if !Team::in_team() {
                return relaunch(n);
            }
            let ops: Vec<Op> = if ops.is_empty() {
                Op::ALL.to_vec()
            } else {
                match ops.iter().map(|o| o.parse()).collect() {
                    Ok(v) => v,
                    Err(e) => return fail(e),
                }
            };
            let Some(sizes) = sizes
                .iter()
                .map(|s| units::parse_size(s).ok().map(|n| n as usize))
                .collect::<Option<Vec<_>>>()
            else {
                return fail("bad size list");
            };
            let mut team = match Team::from_env() {
                Ok(t) => t,
                Err(e) => return fail(e),
            };
            match bench::run(&mut team, &ops, &sizes, reps) {
                Ok(rows) if team.rank() == 0 => {
                    println!(
                        "{} ranks, transport {}, model: {}",
                        team.size(),
                        team.transport().kind(),
                        team.params().source
                    );
                    bench::print(&rows);
                    if let Some(path) = out {
                        let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
                        if let Err(e) = std::fs::write(&path, text) {
                            return fail(format!("{}: {e}", path.display()));
                        }
                    }
                    ExitCode::SUCCESS
                }
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => fail(format!("rank {}: {e}", team.rank())),
            }
        }
    }
}
