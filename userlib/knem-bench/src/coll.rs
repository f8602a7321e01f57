//! `coll`: every collective × algorithm × size on a team of local
//! processes, beside the planner's choice.  The work lives in knem-coll;
//! this re-runs knem-bench itself as the team members.

use crate::err;
use crate::error::Result;
use knem_coll::{bench, launch, Op, Team};

/// Run as launcher (no team in the environment) or as a member.
/// With `out` (a .json name) rank 0 also writes the rows there.
pub fn run(
    n: usize,
    ops: &[String],
    sizes: &[String],
    reps: u32,
    quick: bool,
    out: Option<&std::path::Path>,
) -> Result<()> {
    if let Some(p) = out {
        if p.extension().and_then(|e| e.to_str()) != Some("json") {
            return Err(err!(
                "--out {}: coll writes JSON, the name must end in .json",
                p.display()
            ));
        }
    }
    if !Team::in_team() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let out = launch::run_self(n, &args).map_err(|e| err!("coll: {e}"))?;
        if !out.success() {
            return Err(err!("coll: a rank failed (exit codes {:?})", out.codes));
        }
        return Ok(());
    }
    let ops: Vec<Op> = if ops.is_empty() {
        Op::ALL.to_vec()
    } else {
        ops.iter()
            .map(|o| o.parse().map_err(|e| err!("--ops: {e}")))
            .collect::<Result<_>>()?
    };
    let default = if quick { "4K,256K" } else { "4K,64K,1M,8M" };
    let list: Vec<String> = if sizes.is_empty() {
        default.split(',').map(String::from).collect()
    } else {
        sizes.to_vec()
    };
    let sizes = list
        .iter()
        .map(|s| {
            knem_coll::units::parse_size(s)
                .map(|n| n as usize)
                .map_err(|e| err!("--sizes: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut team = Team::from_env().map_err(|e| err!("coll: {e}"))?;
    let rows = bench::run(&mut team, &ops, &sizes, reps as usize)
        .map_err(|e| err!("coll: rank {}: {e}", team.rank()))?;
    if team.rank() == 0 {
        println!(
            "coll: {} ranks, transport {}, model: {}; median of {reps} reps",
            team.size(),
            team.transport().kind(),
            team.params().source
        );
        bench::print(&rows);
        if let Some(p) = out {
            std::fs::write(p, serde_json::to_string_pretty(&rows)?)
                .map_err(|e| err!("{}: {e}", p.display()))?;
            eprintln!("knem-bench: wrote {}", p.display());
        }
    }
    Ok(())
}
