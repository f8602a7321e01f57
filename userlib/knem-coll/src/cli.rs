//! The command lines of the two programs, knem-run and knem-coll
//! (src/bin/), here so that their man pages and shell completions are
//! generated from the same definitions (userlib/knem-gen-docs).

/// `knem-run -n N -- prog args`.
pub mod run {
    use clap::Parser;

    /// knem-run's command line.
    #[derive(Parser)]
    #[command(
        name = "knem-run",
        version,
        about = "Run N local processes as a knem-rs team \
        (sets KNEM_RS_TEAM, KNEM_RS_RANK, KNEM_RS_SIZE)"
    )]
    pub struct Cli {
        /// Number of processes.
        #[arg(short = 'n', long = "np", default_value_t = 2)]
        pub n: usize,
        /// Transport for every rank (knem, cma, shm); default automatic.
        #[arg(long)]
        pub transport: Option<String>,
        /// The program and its arguments.
        #[arg(required = true, last = true)]
        pub cmd: Vec<String>,
    }
}

/// `knem-coll calibrate|explain|check|bench`.
pub mod coll {
    use clap::{Parser, Subcommand};
    use std::path::PathBuf;

    /// knem-coll's command line.
    #[derive(Parser)]
    #[command(
        name = "knem-coll",
        version,
        about = "Contention-aware collectives: calibrate, explain, check, bench"
    )]
    pub struct Cli {
        /// The command.
        #[command(subcommand)]
        pub cmd: Cmd,
    }

    /// The commands of knem-coll.
    #[derive(Subcommand)]
    pub enum Cmd {
        /// Measure α, β, l, γ_c with the transport in use and store them.
        Calibrate {
            /// Team size (readers = n-1).
            #[arg(short = 'n', default_value_t = 4)]
            n: usize,
            /// Repetitions per point.
            #[arg(long, default_value_t = 30)]
            reps: usize,
            /// Model file (default $KNEM_RS_MODEL or $XDG_CACHE_HOME/knem-rs/model.json).
            #[arg(long, conflicts_with = "system")]
            model: Option<PathBuf>,
            /// Store the node-wide model, /etc/knem-rs/model.json, which every
            /// team reads when its user has no model of their own (needs root).
            #[arg(long)]
            system: bool,
        },
        /// Print the predicted cost of every candidate algorithm and its terms.
        Explain {
            /// bcast, scatter, gather, allgather, alltoall.
            #[arg(long)]
            op: String,
            /// Bytes per block (bcast: the message).
            #[arg(long)]
            size: String,
            /// Team size.
            #[arg(short = 'p', default_value_t = 8)]
            p: usize,
            /// NUMA nodes.
            #[arg(long, default_value_t = 1)]
            nodes: usize,
            /// Parameters: knl, broadwell, power8 (Contention-Aware Kernel-Assisted MPI Collectives Table IV).
            #[arg(long)]
            preset: Option<String>,
            /// Transport whose calibration to use (default: the automatic one).
            #[arg(long)]
            transport: Option<String>,
            /// Model file.
            #[arg(long)]
            model: Option<PathBuf>,
            /// Rules file of knemrs-tune (default $KNEM_RS_RULES, else
            /// /etc/knem-rs/coll-rules.json when there): what it says for
            /// the case, beside the model, and which of the two decides.
            #[arg(long)]
            rules: Option<PathBuf>,
            /// CPUs the ranks share (0: one per rank, as in Contention-Aware Kernel-Assisted MPI Collectives); default:
            /// 0 with --preset, else this host's.
            #[arg(long)]
            cpus: Option<usize>,
        },
        /// Check every collective × algorithm × size on a team.
        Check {
            /// Team size.
            #[arg(short = 'n', default_value_t = 4)]
            n: usize,
            /// Big sizes 4M+1 only (default 4M+1, 16M, 16M+3).
            #[arg(long)]
            quick: bool,
            /// Check every team size from 1 to n in turn (one summary line).
            #[arg(long)]
            all_teams: bool,
            /// Check these team sizes in turn instead (one summary line),
            /// e.g. 5,6,7,8 with a lighter grid than the small teams get.
            #[arg(long, value_delimiter = ',', conflicts_with_all = ["n", "all_teams"])]
            teams: Vec<usize>,
            /// Replace the dense grid (every algorithm, roots 0 and p-1),
            /// e.g. 0,1,4K+1.
            #[arg(long, value_delimiter = ',')]
            sizes: Vec<String>,
            /// Replace the big sizes (every algorithm, one root each), e.g.
            /// 16M,16M+3.
            #[arg(long, value_delimiter = ',')]
            big: Vec<String>,
        },
        /// Time every collective × algorithm × size and the planner's choice.
        Bench {
            /// Team size.
            #[arg(short = 'n', default_value_t = 4)]
            n: usize,
            /// Operations (default all).
            #[arg(long, value_delimiter = ',')]
            ops: Vec<String>,
            /// Total sizes.
            #[arg(long, value_delimiter = ',', default_value = "4K,64K,1M,8M")]
            sizes: Vec<String>,
            /// Repetitions.
            #[arg(long, default_value_t = 5)]
            reps: usize,
            /// Also write JSON rows here.
            #[arg(long)]
            out: Option<PathBuf>,
        },
    }
}
