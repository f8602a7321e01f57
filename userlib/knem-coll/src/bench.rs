//! Collective benchmark: every operation × algorithm × size on a team,
//! the planner's choice and prediction beside the measured medians.
//! Used by `knem-coll bench` and `knem-bench coll`.

use crate::check::run_one;
use crate::error::Result;
use crate::model::{Algorithm, Op};
use crate::team::Team;

/// One measured point.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Operation.
    pub op: String,
    /// Total bytes at the root.
    pub size: usize,
    /// Algorithm ("planner" for the planner's run).
    pub algorithm: String,
    /// Median seconds (rank 0's view, the operation ends with a barrier).
    pub median: f64,
    /// Model prediction, seconds.
    pub predicted: f64,
    /// The planner picks this algorithm.
    pub chosen: bool,
}

/// Measure; every rank calls it, rank 0 returns the rows.  Data is
/// verified on every repetition, so a wrong algorithm cannot look fast.
/// Buffers are reused between repetitions (as applications reuse theirs),
/// so first-touch page faults are not part of the times.
pub fn run(team: &mut Team, ops: &[Op], sizes: &[usize], reps: usize) -> Result<Vec<Row>> {
    let p = team.size();
    let (nodes, group) = (
        team.topology().node_count(),
        team.topology().largest_group(),
    );
    let mut rows = Vec::new();
    let mut salt = 1000;
    for &op in ops {
        for &size in sizes {
            let block = if op == Op::Bcast {
                size
            } else {
                size.div_ceil(p)
            } as u64;
            let (choice, _) = team.params().plan(op, block, p, nodes, group);
            let candidates: Vec<Option<Algorithm>> = std::iter::once(None)
                .chain(op.algorithms(p, nodes).into_iter().map(Some))
                .collect();
            // One untimed pass, then every repetition runs every candidate
            // in turn, so drifts in machine load hit all of them alike.
            let mut times = vec![Vec::new(); candidates.len()];
            for rep in 0..=reps.max(1) {
                for (i, alg) in candidates.iter().enumerate() {
                    salt += 1;
                    let t = run_one(team, op, *alg, size, 0, false, salt)?;
                    if rep > 0 {
                        times[i].push(t);
                    }
                }
            }
            for (a, mut times) in candidates.into_iter().zip(times) {
                times.sort_by(f64::total_cmp);
                let shown = a.unwrap_or(choice);
                rows.push(Row {
                    op: op.to_string(),
                    size,
                    algorithm: a.map_or_else(|| format!("planner:{choice}"), |a| a.to_string()),
                    median: times[times.len() / 2],
                    predicted: team
                        .params()
                        .cost(op, shown, block, p, nodes, group)
                        .unwrap_or(f64::NAN),
                    chosen: a.is_some_and(|a| a == choice),
                });
            }
        }
    }
    Ok(rows)
}

/// Print rows as a table, with the planner-vs-best ratio per point.
pub fn print(rows: &[Row]) {
    println!(
        "{:<10} {:>10} {:<24} {:>12} {:>12}",
        "op", "size", "algorithm", "median_us", "model_us"
    );
    for r in rows {
        println!(
            "{:<10} {:>10} {:<24} {:>12.1} {:>12.1}{}",
            r.op,
            r.size,
            r.algorithm,
            r.median * 1e6,
            r.predicted * 1e6,
            if r.chosen { "  <- planner" } else { "" }
        );
    }
    let mut keys: Vec<(String, usize)> = rows.iter().map(|r| (r.op.clone(), r.size)).collect();
    keys.dedup();
    println!(
        "\n{:<10} {:>10} {:<18} {:>12} {:<18} {:>12} {:>7} {:>12}",
        "op",
        "size",
        "planner_choice",
        "its_us",
        "measured_best",
        "best_us",
        "ratio",
        "planner_run"
    );
    for (op, size) in keys {
        let pts: Vec<&Row> = rows
            .iter()
            .filter(|r| r.op == op && r.size == size)
            .collect();
        let explicit = pts.iter().filter(|r| !r.algorithm.starts_with("planner"));
        let Some(best) = explicit
            .clone()
            .min_by(|a, b| a.median.total_cmp(&b.median))
        else {
            continue;
        };
        let Some(chosen) = explicit.clone().find(|r| r.chosen) else {
            continue;
        };
        let run = pts
            .iter()
            .find(|r| r.algorithm.starts_with("planner"))
            .map_or(f64::NAN, |r| r.median);
        println!(
            "{op:<10} {size:>10} {:<18} {:>12.1} {:<18} {:>12.1} {:>7.2} {:>12.1}",
            chosen.algorithm,
            chosen.median * 1e6,
            best.algorithm,
            best.median * 1e6,
            chosen.median / best.median,
            run * 1e6
        );
    }
}
