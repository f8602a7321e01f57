//! The planner on the 16 real cores of `tests/data/xeon16` (a copy of
//! `shared/data/xeon16`, see its README): the model is built from what the
//! calibration measures there (`calibrate16.txt` for α, β, l, sync and the
//! copies at once, `contention.txt` for the contention grid), and its
//! choices are compared with the measured times of every algorithm in
//! `coll16.json`.

use knem_coll::model::{Contention, Params};
use knem_coll::{Algorithm, Op};
use serde::Deserialize;
use std::collections::BTreeMap;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/xeon16");
const RANKS: usize = 16;

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DATA}/{name}")).unwrap()
}

/// The number after `key` in `text` (the first occurrence).
fn number_after(text: &str, key: &str) -> f64 {
    let at = text.find(key).unwrap_or_else(|| panic!("no {key:?}")) + key.len();
    let s: String = text[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    s.parse()
        .unwrap_or_else(|_| panic!("{key:?}: not a number: {s:?}"))
}

fn size_of(s: &str) -> u64 {
    let (num, unit) = s.split_at(s.len() - 1);
    let k = match unit {
        "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return s.parse().unwrap(),
    };
    num.parse::<u64>().unwrap() * k
}

/// The cma-read rows of `knem-bench contention`: (size, readers) -> the
/// per-reader latency in seconds.
fn contention_grid(text: &str) -> Contention {
    let mut at: BTreeMap<(u64, usize), f64> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 && f[2] == "cma-read" && f[0].ends_with(['K', 'M']) {
            at.insert(
                (size_of(f[0]), f[1].parse().unwrap()),
                f[3].parse::<f64>().unwrap() * 1e-6,
            );
        }
    }
    let mut sizes: Vec<u64> = at.keys().map(|k| k.0).collect();
    let mut readers: Vec<usize> = at.keys().map(|k| k.1).collect();
    sizes.dedup();
    readers.sort();
    readers.dedup();
    let copy = sizes
        .iter()
        .map(|s| readers.iter().map(|r| at[&(*s, *r)]).collect())
        .collect();
    let grid = Contention {
        sizes,
        readers,
        copy,
        ..Contention::default()
    };
    assert!(grid.is_valid(), "{grid:?}");
    grid
}

/// The model `knem-coll calibrate -n 16` plus the contention grid would
/// store on that machine.
fn xeon16() -> Params {
    let cal = read("calibrate16.txt");
    let sync = number_after(&cal, "sync") * 1e-6;
    let page = number_after(&cal, " s ") as u64;
    Params {
        source: "xeon16 calibrate16.txt + contention.txt".into(),
        alpha: number_after(&cal, "alpha") * 1e-6,
        beta: 1.0 / (number_after(&cal, "beta^-1") * 1e9),
        l: number_after(&cal, " l ") * 1e-6,
        page,
        gamma_a: number_after(&cal, "gamma(c) ="),
        gamma_b: number_after(&cal, "c^2 +"),
        sync,
        signal: sync / 2.0,
        bw_par: number_after(&cal, "parallel efficiency e"),
        cache: number_after(&cal, "beyond a") as u64 * 1024,
        oversub: number_after(&cal, "CPUs: +") / 100.0,
        cpus: RANKS,
        contention: Some(contention_grid(&read("contention.txt"))),
        // A kernel with split page-table locks: a lock per page of
        // page-table entries.
        lock_span: page * page / 8,
        ..Params::default()
    }
}

#[derive(Deserialize)]
struct Row {
    op: String,
    size: u64,
    algorithm: String,
    median: f64,
    chosen: bool,
}

struct Case {
    op: Op,
    size: u64,
    /// Measured median of every algorithm run explicitly.
    times: Vec<(Algorithm, f64)>,
    /// What the planner chose with model16.json at the time.
    before: Algorithm,
}

fn cases() -> Vec<Case> {
    let rows: Vec<Row> = serde_json::from_str(&read("coll16.json")).unwrap();
    let mut out: Vec<Case> = Vec::new();
    for r in rows {
        let op: Op = r.op.parse().unwrap();
        if !out.last().is_some_and(|c| c.op == op && c.size == r.size) {
            out.push(Case {
                op,
                size: r.size,
                times: vec![],
                before: Algorithm::DirectRead,
            });
        }
        let case = out.last_mut().unwrap();
        // The row marked chosen is the planner's pick (the `planner:` row
        // is a second run of it).
        if r.algorithm.starts_with("planner:") {
            continue;
        }
        let alg: Algorithm = r.algorithm.parse().unwrap();
        if r.chosen {
            case.before = alg;
        }
        case.times.push((alg, r.median));
    }
    out
}

fn time_of(case: &Case, a: Algorithm) -> f64 {
    case.times.iter().find(|t| t.0 == a).unwrap().1
}

#[test]
fn the_model_reads_the_measurements() {
    let p = xeon16();
    assert_eq!((p.page, p.cache, p.lock_span), (4096, 2 << 20, 2 << 20));
    assert!((p.alpha - 0.829e-6).abs() < 1e-12 && (p.sync - 0.39e-6).abs() < 1e-12);
    assert!((1.0 / p.beta - 13.3e9).abs() < 1.0 && (p.l - 0.347e-6).abs() < 1e-12);
    let g = p.contention.unwrap();
    assert_eq!(
        g.sizes,
        [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
    );
    assert_eq!(g.readers, [1, 2, 4, 8, 15]);
    // 64 KiB, 15 readers: 101.5 us against 3.46 alone.
    assert!((g.copy_excess(64 << 10, 15, 4096) - 98.04e-6).abs() < 1e-9);
    let c = cases();
    assert_eq!(c.len(), 35);
    assert!(c.iter().all(|c| c.times.len() >= 2));
}

/// Every (op, size) of coll16.json: the planner's choice among the
/// algorithms measured there, with its time relative to the fastest, beside
/// the choice recorded in the file (the planner with model16.json, the
/// calibration of that machine then).  Each choice must be within 10% of
/// the best or no worse than the recorded one: the expectation is the
/// measured best and the recorded planner, never this planner's output.
///
/// Not asserted, because the data cannot support it: within 10% of the
/// best everywhere.  The file's two runs of one algorithm (the `planner:`
/// row and the explicit one) differ by up to 37%, and no single algorithm
/// is within 10% at allgather 64K, 256K and 1M (ring-source 61.1, 73.5,
/// 357.8 us, ring-neighbor 51.6, 87.4, 271.1; ring-source's second runs
/// 53.2, 100.8, 278.0).  Scatter's and gather's steps, which decide their
/// ten closest calls, are measured by `calibrate` since (block steps) but
/// are not in this data; the model falls back to the same-bytes grid.
#[test]
fn the_planner_is_no_worse_than_the_recorded_one() {
    let p = xeon16();
    let mut within = (0, 0);
    let mut report = vec![format!(
        "{:<10} {:>8}  {:<18} {:>6}  {:<18} {:>6}  {:<18} {:>9}",
        "op", "size", "before", "x best", "after", "x best", "best", "best us"
    )];
    let mut worse = vec![];
    for case in cases() {
        let n = if case.op == Op::Bcast {
            case.size
        } else {
            case.size / RANKS as u64
        };
        let algs: Vec<Algorithm> = case.times.iter().map(|t| t.0).collect();
        let (after, _) = p.rank(case.op, n, RANKS, 1, RANKS, &algs)[0];
        let (best, fastest) = case
            .times
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap();
        let ratio = |a| time_of(&case, a) / fastest;
        within.0 += usize::from(ratio(case.before) <= 1.1);
        within.1 += usize::from(ratio(after) <= 1.1);
        report.push(format!(
            "{:<10} {:>8}  {:<18} {:>6.2}  {:<18} {:>6.2}  {:<18} {:>9.1}",
            case.op.to_string(),
            case.size,
            case.before.to_string(),
            ratio(case.before),
            after.to_string(),
            ratio(after),
            best.to_string(),
            fastest * 1e6
        ));
        if ratio(after) > ratio(case.before).max(1.1) {
            worse.push(format!("{} {}: {after}", case.op, case.size));
        }
    }
    report.push(format!(
        "within 10% of the best: before {} of 35, after {} of 35",
        within.0, within.1
    ));
    println!("{}", report.join("\n"));
    assert!(
        worse.is_empty(),
        "off by more than 10% and worse than the recorded choice: {worse:?}"
    );
}

/// With the measured grid, on odd, even and full teams: every candidate's
/// prediction is finite and positive, its terms add up to it, and, where
/// no lock span spreads the readers (all but scatter and gather), more
/// bytes never cost less.
#[test]
fn grid_predictions_are_sane() {
    let params = xeon16();
    let sizes: Vec<u64> = (0..=24).flat_map(|i| [1u64 << i, (1 << i) + 1]).collect();
    for p in [2, 3, 5, 8, 13, RANKS] {
        for op in Op::ALL {
            for a in op.algorithms(p, 1) {
                let mut last = 0.0;
                for &n in &sizes {
                    let pred = params.predict(op, a, n, p, 1, p).unwrap();
                    let t = pred.total();
                    assert!(t.is_finite() && t > 0.0, "{op} {a} {n} B on {p}: {t}");
                    let sum: f64 = pred.terms.iter().map(|t| t.count * t.each).sum();
                    assert_eq!(sum, params.cost(op, a, n, p, 1, p).unwrap());
                    if !matches!(op, Op::Scatter | Op::Gather) {
                        assert!(t >= last, "{op} {a} on {p}: {n} B {t} < {last}");
                    }
                    last = t;
                }
            }
        }
    }
}
