//! knem-bench: compare knem-rs with memcpy, shared-memory double copy and
//! CMA, the way the KNEM papers do. See docs/PERFORMANCE.md.
//!
//! The program (src/main.rs) only calls [`main`]; [`Cli`] is public so that
//! the man page and the shell completions are generated from this one
//! definition (userlib/knem-gen-docs).

mod cma;
mod coll;
mod contention;
mod engine;
mod error;
mod knemdev;
mod mech;
mod mem;
mod overhead;
mod pingpong;
mod plot;
mod proc;
mod progress;
mod regions;
mod report;
mod sizes;
mod solo;
mod stats;
mod sysinfo;

use clap::{Args, Parser, Subcommand};
use engine::Cache;
use error::{Context, Result};
use mech::{Mech, Probes};
use report::{Record, Report};
use sizes::{fmt_size, parse_size, parse_size_list};
use std::path::PathBuf;
use std::process::ExitCode;
use sysinfo::Machine;

#[derive(Parser)]
#[command(
    name = "knem-bench",
    version,
    about = "Measure knem-rs against memcpy, shared-memory double copy and CMA",
    long_about = "Measure knem-rs against memcpy, shared-memory double copy and CMA \
                  (process_vm_readv/writev), all in the same run. Sizes accept K/M/G \
                  suffixes (powers of 1024) and ranges like 1K..64M stepped by --step."
)]
/// The command line (public: the man page and completions are made from it).
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct Common {
    /// Repetitions per point; tables report the median.
    #[arg(long, global = true)]
    reps: Option<u32>,
    /// CI smoke test: small sizes, few repetitions, seconds on a host.
    #[arg(long, global = true)]
    quick: bool,
    /// Also write the results to FILE.csv or FILE.json.
    #[arg(long, global = true, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also draw the results to FILE.png.
    #[arg(long, global = true, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Bytes moved per timed repetition (sets the iteration count).
    #[arg(long, global = true, value_name = "SIZE")]
    target: Option<String>,
    /// Most operations per timed repetition.
    #[arg(long, global = true, value_name = "N")]
    max_iters: Option<u64>,
}

#[derive(Subcommand)]
enum Cmd {
    /// One-way latency and bandwidth by message size, every mechanism side
    /// by side, cache-hot and off-cache.
    Pingpong {
        /// Sizes: list (4K,1M) or range (1K..64M).
        #[arg(long)]
        sizes: Option<String>,
        /// Factor between sizes of a range.
        #[arg(long, default_value_t = 4)]
        step: u64,
        /// Mechanisms to compare.
        #[arg(long, value_delimiter = ',', default_values_t = Mech::ALL.to_vec())]
        mechs: Vec<Mech>,
        /// Cache modes.
        #[arg(long, value_delimiter = ',', default_values_t = vec![Cache::Hot, Cache::Off])]
        cache: Vec<Cache>,
        /// Chunk size of the shm double copy (default measured with
        /// `shm-chunk`, see docs/PERFORMANCE.md).
        #[arg(long, default_value = "256K")]
        chunk: String,
        /// Off-cache buffer pool per process (default: 2 x LLC within 64M..1G).
        #[arg(long)]
        pool: Option<String>,
    },
    /// One process copies between its own buffers through each mechanism
    /// (knem from and to a region over its own pool, CMA with its own pid,
    /// memcpy): the kernel's copy path without any hand-off between
    /// processes.
    Solo {
        /// Sizes: list (4K,1M) or range (1K..64M).
        #[arg(long)]
        sizes: Option<String>,
        /// Factor between sizes of a range.
        #[arg(long, default_value_t = 4)]
        step: u64,
        /// Mechanisms to compare (memcpy, cma-read, cma-write, knem-read,
        /// knem-write, knem-copy).
        #[arg(long, value_delimiter = ',', default_values_t = solo::MECHS.to_vec())]
        mechs: Vec<Mech>,
        /// Cache modes.
        #[arg(long, value_delimiter = ',', default_values_t = vec![Cache::Hot, Cache::Off])]
        cache: Vec<Cache>,
        /// Off-cache buffer pool (default: 2 x LLC within 64M..1G).
        #[arg(long)]
        pool: Option<String>,
    },
    /// The fixed costs in every measured time: one system call, one
    /// hand-off between two processes, memcpy's bandwidth.
    Overhead {
        /// Print them as KNEM_LAB_HOST_*= lines (what tests/uml/run passes
        /// to the guest as the host's costs).
        #[arg(long)]
        env: bool,
    },
    /// R readers copy the same buffer of one process at once (one-to-all).
    Contention {
        /// Sizes.
        #[arg(long)]
        sizes: Option<String>,
        /// Reader counts (default 1,2,4.. up to 2 x cores, at least 4).
        #[arg(long, value_delimiter = ',')]
        readers: Vec<usize>,
        /// Mechanisms (memcpy: each reader copies a private source).
        #[arg(long, value_delimiter = ',', default_values_t = contention::MECHS.to_vec())]
        mechs: Vec<Mech>,
    },
    /// Region create/destroy cost vs CMA's pin-per-copy, and copy cost with
    /// many live regions.
    RegionCost {
        /// Region sizes.
        #[arg(long)]
        sizes: Option<String>,
        /// Live-region counts.
        #[arg(long, value_delimiter = ',')]
        live: Vec<u64>,
        /// Copy size for the live-regions test.
        #[arg(long, default_value = "4K")]
        copy_size: String,
    },
    /// Reading one declared region many times vs declaring one per copy.
    Reuse {
        /// Sizes.
        #[arg(long)]
        sizes: Option<String>,
    },
    /// Bandwidth of the shm double copy by chunk size (picks --chunk).
    ShmChunk {
        /// Message size.
        #[arg(long)]
        size: Option<String>,
        /// Chunk sizes.
        #[arg(long)]
        chunks: Option<String>,
        /// Cache modes.
        #[arg(long, value_delimiter = ',', default_values_t = vec![Cache::Hot, Cache::Off])]
        cache: Vec<Cache>,
    },
    /// Collectives: every operation × algorithm × size on a team of
    /// local processes, with the planner's choice (see knem-coll).
    Coll(CollArgs),
    /// Draw a PNG from a CSV written by --out.
    Plot {
        /// CSV file.
        input: PathBuf,
        /// PNG file.
        output: PathBuf,
    },
}

#[derive(Args)]
struct CollArgs {
    /// Team size.
    #[arg(short = 'n', long, default_value_t = 4)]
    ranks: usize,
    /// Operations: bcast, scatter, gather, allgather, alltoall (default all).
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Total message sizes (default 4K,64K,1M,8M).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
}

fn sizes_or(
    spec: &Option<String>,
    quick: bool,
    full: &str,
    small: &str,
    step: u64,
) -> Result<Vec<u64>> {
    let s = spec.as_deref().unwrap_or(if quick { small } else { full });
    parse_size_list(s, step).ctx("--sizes")
}

/// A table under a title that says what its numbers are (emulated or
/// not), followed under TCG by the warning its kernel-copy ratios need.
/// The off-cache buffer pool (bytes) and the LLC size it was sized from:
/// `--pool` if given, 16 MiB in a quick run, else twice the LLC within
/// 64 MiB..1 GiB, so that a buffer has left the cache when it comes back.
fn off_cache_pool(machine: &Machine, pool: Option<&str>, quick: bool) -> Result<(u64, u64)> {
    let llc = machine.llc_bytes.unwrap_or(32 << 20);
    let pool = match pool {
        Some(p) => parse_size(p).ctx("--pool")?,
        None if quick => 16 << 20,
        None => (2 * llc).clamp(64 << 20, 1 << 30),
    };
    Ok((pool, llc))
}

/// One section per cache mode, each with its table and the records it
/// holds (for the section's TCG warning).
fn cache_sections(
    machine: &Machine,
    caches: &[Cache],
    prefix: &str,
    recs: &[Record],
    table: impl Fn(&str) -> String,
) -> String {
    let mut text = String::new();
    for cache in caches {
        let what = if *cache == Cache::Hot {
            "cache-hot buffers"
        } else {
            "off-cache buffers"
        };
        let mine: Vec<Record> = recs
            .iter()
            .filter(|r| r.cache == cache.name())
            .cloned()
            .collect();
        text += &section(
            machine,
            &format!("{prefix}{what}"),
            &table(cache.name()),
            &mine,
        );
    }
    text
}

fn section(machine: &Machine, title: &str, table: &str, recs: &[Record]) -> String {
    let mut s = format!("\n[{title}] {}\n", machine.numbers());
    if let Some(o) = machine.overheads_line() {
        s += &o;
        s += "\n";
    }
    s += table;
    if let Some(w) = machine.ratio_warning(recs) {
        s += &w;
        s += "\n";
    }
    s
}

/// The program: parse the command line, run, one line on standard error
/// and exit status 1 on failure.
pub fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("knem-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let c = &cli.common;
    let mut machine = Machine::probe();
    if let Cmd::Overhead { env } = &cli.cmd {
        let o = overhead::Overheads::measure()?;
        if *env {
            print!("{}", o.env());
        } else {
            println!("{}", machine.header());
            println!("{}", o.line(if machine.uml() { "UML" } else { "measured" }));
        }
        return Ok(());
    }
    // Under UML every table says what a system call and a hand-off cost
    // there (and on the host), so a reader sees which sizes they swamp.
    if machine.uml() && !knem_coll::Team::in_team() {
        machine.overheads = Some(overhead::Overheads::measure()?);
    }
    if let Cmd::Coll(a) = &cli.cmd {
        if !knem_coll::Team::in_team() {
            println!("{}", machine.header());
            if let Some(o) = machine.overheads_line() {
                println!("{o}");
            }
        }
        let out = c.out.as_deref();
        return coll::run(a.ranks, &a.ops, &a.sizes, c.reps.unwrap_or(5), c.quick, out);
    }
    if let Cmd::Plot { input, output } = &cli.cmd {
        let text =
            std::fs::read_to_string(input).ctx(format_args!("reading {}", input.display()))?;
        let recs = report::from_csv(&text).ctx(input.display())?;
        plot::render(&recs, output)?;
        println!("wrote {}", output.display());
        return Ok(());
    }
    // refuse a bad output name before spending minutes measuring
    if let Some(p) = &c.out {
        if !matches!(p.extension().and_then(|e| e.to_str()), Some("csv" | "json")) {
            return Err(err!(
                "--out {}: the file name must end in .csv or .json",
                p.display()
            ));
        }
    }
    if let Some(p) = &c.plot {
        if p.extension().and_then(|e| e.to_str()) != Some("png") {
            return Err(err!(
                "--plot {}: the file name must end in .png",
                p.display()
            ));
        }
    }
    let q = c.quick;
    let reps = c.reps.unwrap_or(if q { 3 } else { 5 }).max(1);
    let target = match &c.target {
        Some(t) => parse_size(t).ctx("--target")?,
        None if q => 1 << 20,
        None => 64 << 20,
    };
    let max_iters = c.max_iters.unwrap_or(if q { 50 } else { 1000 });
    println!("{}", machine.header());
    let mut skipped: Vec<(Mech, String)> = Vec::new();
    let mut text = String::new();
    let recs: Vec<Record> = match &cli.cmd {
        Cmd::Pingpong {
            sizes,
            step,
            mechs,
            cache,
            chunk,
            pool,
        } => {
            let chunk = parse_size(chunk).ctx("--chunk")?;
            let (pool, llc) = off_cache_pool(&machine, pool.as_deref(), q)?;
            let st = pingpong::Settings {
                sizes: sizes_or(sizes, q, "1K..64M", "1K..1M", *step)?,
                reps,
                target,
                max_iters,
                pool: pool as usize,
                caches: cache.clone(),
            };
            let probes = Probes::run(mechs);
            let (run, sk) = probes.select(mechs);
            skipped = sk;
            println!(
                "pingpong: one-way time per message (half a round trip), median of {reps} reps; shm chunk {}; off-cache pool {} per process{}",
                fmt_size(chunk),
                fmt_size(pool),
                if pool < llc { " (smaller than the LLC: off-cache numbers are optimistic)" } else { "" }
            );
            let recs = pingpong::pingpong(&st, &run, chunk)?;
            text += &cache_sections(&machine, &st.caches, "", &recs, |c| {
                pingpong::pingpong_table(&recs, c).render()
            });
            recs
        }
        Cmd::Solo {
            sizes,
            step,
            mechs,
            cache,
            pool,
        } => {
            let (pool, llc) = off_cache_pool(&machine, pool.as_deref(), q)?;
            let st = pingpong::Settings {
                sizes: sizes_or(sizes, q, "4K..64M", "4K..1M", *step)?,
                reps,
                target,
                max_iters,
                pool: pool as usize,
                caches: cache.clone(),
            };
            let probes = Probes::run(mechs);
            let (run, sk) = probes.select(mechs);
            skipped = sk;
            println!(
                "solo: one process copies its own buffers, time per copy, median of {reps} reps; off-cache pool {}{}",
                fmt_size(pool),
                if pool < llc { " (smaller than the LLC: off-cache numbers are optimistic)" } else { "" }
            );
            let recs = solo::solo(&st, &run)?;
            text += &cache_sections(&machine, &st.caches, "solo, ", &recs, |c| {
                pingpong::copy_table(&recs, "solo", c).render()
            });
            recs
        }
        Cmd::Contention {
            sizes,
            readers,
            mechs,
        } => {
            let readers = if readers.is_empty() {
                let top = if q { 2 } else { (2 * machine.cores).max(4) };
                std::iter::successors(Some(1usize), |r| Some(r * 2))
                    .take_while(|&r| r <= top)
                    .collect()
            } else {
                readers.clone()
            };
            if readers.contains(&0) {
                return Err(err!("--readers: counts must be at least 1"));
            }
            let probes = Probes::run(mechs);
            let (mut run, sk) = probes.select(mechs);
            skipped = sk;
            run.retain(|m| {
                let ok = contention::MECHS.contains(m);
                if !ok {
                    eprintln!("knem-bench: skipping {m}: not a one-to-all read mechanism");
                    skipped.push((*m, "not a one-to-all read mechanism".into()));
                }
                ok
            });
            let st = contention::Settings {
                sizes: sizes_or(sizes, q, "64K,1M,4M", "64K,1M", 4)?,
                readers,
                reps,
                target,
                max_iters,
            };
            println!(
                "contention: R readers copy the same source concurrently; median of {reps} reps"
            );
            let recs = contention::contention(&st, &run)?;
            text += &section(
                &machine,
                "contention",
                &contention::table(&recs).render(),
                &recs,
            );
            recs
        }
        Cmd::RegionCost {
            sizes,
            live,
            copy_size,
        } => {
            let all = [Mech::CmaRead, Mech::KnemRead];
            let probes = Probes::run(&all);
            if let Some(w) = &probes.knem {
                eprintln!("knem-bench: skipping knem rows and live-regions: {w}");
                skipped.push((Mech::KnemRead, w.clone()));
            }
            if let Some(w) = &probes.cma {
                eprintln!("knem-bench: skipping cma-read: {w}");
                skipped.push((Mech::CmaRead, w.clone()));
            }
            let st = regions::Settings {
                sizes: sizes_or(sizes, q, "4K..64M", "4K..1M", 4)?,
                reps,
                target,
                max_iters,
            };
            println!("region-cost: one process, cache-hot; median of {reps} reps");
            let mut recs = regions::region_cost(&st, probes.knem.is_none(), probes.cma.is_none())?;
            text += &section(
                &machine,
                "region-cost",
                &regions::region_cost_table(&recs).render(),
                &recs,
            );
            if probes.knem.is_none() {
                let counts = if live.is_empty() {
                    if q {
                        vec![1, 10, 100, 1000]
                    } else {
                        vec![1, 10, 100, 1000, 10_000, 100_000]
                    }
                } else {
                    live.clone()
                };
                let cs = parse_size(copy_size).ctx("--copy-size")?;
                let live = regions::live_regions(&counts, cs, reps, max_iters.max(10))?;
                text += &section(
                    &machine,
                    "copy with N live regions",
                    &regions::live_table(&live).render(),
                    &live,
                );
                if let Some(line) = regions::live_ratio_line(&live) {
                    text += &line;
                }
                recs.extend(live);
            }
            recs
        }
        Cmd::Reuse { sizes } => {
            let all = [Mech::CmaRead, Mech::KnemRead];
            let probes = Probes::run(&all);
            if let Some(w) = &probes.knem {
                eprintln!("knem-bench: skipping knem-reuse and knem-declare-each: {w}");
                skipped.push((Mech::KnemRead, w.clone()));
            }
            if let Some(w) = &probes.cma {
                eprintln!("knem-bench: skipping cma-read: {w}");
                skipped.push((Mech::CmaRead, w.clone()));
            }
            let st = regions::Settings {
                sizes: sizes_or(sizes, q, "4K..64M", "4K..1M", 4)?,
                reps,
                target,
                max_iters,
            };
            println!("reuse: one region read many times vs create+read+destroy per copy; median of {reps} reps");
            let recs = regions::reuse(&st, probes.knem.is_none(), probes.cma.is_none())?;
            text += &section(
                &machine,
                "reuse",
                &regions::reuse_table(&recs).render(),
                &recs,
            );
            recs
        }
        Cmd::ShmChunk {
            size,
            chunks,
            cache,
        } => {
            let size =
                parse_size(size.as_deref().unwrap_or(if q { "1M" } else { "4M" })).ctx("--size")?;
            let chunks = parse_size_list(
                chunks
                    .as_deref()
                    .unwrap_or(if q { "4K..256K" } else { "1K..1M" }),
                if q { 4 } else { 2 },
            )
            .ctx("--chunks")?;
            let llc = machine.llc_bytes.unwrap_or(32 << 20);
            let st = pingpong::Settings {
                sizes: vec![size],
                reps,
                target: target.max(16 * size),
                max_iters,
                pool: if q {
                    16 << 20
                } else {
                    (2 * llc).clamp(64 << 20, 1 << 30)
                } as usize,
                caches: cache.clone(),
            };
            println!(
                "shm-chunk: {} messages through two chunk buffers; median of {reps} reps",
                fmt_size(size)
            );
            let recs = pingpong::shm_chunk(&st, size, &chunks)?;
            text += &section(
                &machine,
                "shm-chunk",
                &pingpong::shm_chunk_table(&recs).render(),
                &recs,
            );
            recs
        }
        Cmd::Plot { .. } | Cmd::Coll(_) | Cmd::Overhead { .. } => {
            unreachable!("handled above")
        }
    };
    print!("{text}");
    let report = Report {
        machine,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        skipped: skipped
            .into_iter()
            .map(|(m, w)| (m.name().to_string(), w))
            .collect(),
        records: recs,
    };
    if let Some(p) = &c.out {
        report::write(&report, p)?;
        eprintln!("knem-bench: wrote {}", p.display());
    }
    if let Some(p) = &c.plot {
        plot::render(&report.records, p)?;
        eprintln!("knem-bench: wrote {}", p.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn cli_parses_mechanism_lists() {
        let cli = Cli::try_parse_from([
            "knem-bench",
            "pingpong",
            "--mechs",
            "memcpy,shm,cma-read",
            "--quick",
        ])
        .unwrap();
        match cli.cmd {
            Cmd::Pingpong { mechs, .. } => {
                assert_eq!(mechs, vec![Mech::Memcpy, Mech::Shm, Mech::CmaRead])
            }
            _ => panic!("wrong subcommand"),
        }
        assert!(cli.common.quick);
        assert!(Cli::try_parse_from(["knem-bench", "pingpong", "--mechs", "bogus"]).is_err());
    }
}
