//! The tuner against a synthetic bench whose candidates have known costs:
//! it must find the known best in every case (hand over included), and
//! every rank must take the same decisions although each rank's timings
//! differ (its own noise, and a skew per rank).

use knem_coll::model::Algorithm;
use knem_coll::model::{Op, Params};
use knem_coll::rules::{Case, Choice, Timing};
use knem_coll::tune::{self, Bench, Config, Plan};
use knem_coll::{Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, Mutex};

/// Known costs per (op, size): the shortlist and hand over in an order
/// that a hash of the case picks, 20% apart; 1 s for anything else.
fn known_costs(params: &Params, op: Op, n: u64, p: usize) -> Vec<(Choice, f64)> {
    let mut cands: Vec<Choice> = tune::shortlist(params, op, n, p, 1, p)
        .into_iter()
        .map(Choice::Knem)
        .collect();
    cands.push(Choice::HandOver);
    let mut h = (n ^ (op as u64 * 0x9e37_79b9)).wrapping_mul(0x2545_f491_4f6c_dd1d);
    // A Fisher-Yates shuffle driven by the hash.
    for i in (1..cands.len()).rev() {
        h ^= h >> 29;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        cands.swap(i, (h % (i as u64 + 1)) as usize);
    }
    let base = 1e-5 + n as f64 * 1e-10;
    cands
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, base * (1.0 + 0.2 * i as f64)))
        .collect()
}

struct Shared {
    barrier: Barrier,
    slots: Mutex<Vec<Vec<f64>>>,
}

struct Synthetic {
    rank: usize,
    p: usize,
    params: Params,
    rng: u64,
    shared: Arc<Shared>,
    declined: Option<Choice>,
    costs: BTreeMap<(Op, u64), Vec<(Choice, f64)>>,
    /// Instead of the known costs: every candidate alike but 10% faster
    /// on the ranks of its parity, so that ranks alone would disagree.
    contrary: bool,
    /// Instead of the known costs: the shortlist's first algorithm ahead
    /// of hand over by less than the noise, the others far behind.
    close: bool,
}

impl Synthetic {
    fn noise(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % 10_000) as f64 / 10_000.0
    }
}

impl Bench for Synthetic {
    fn run(&mut self, op: Op, choice: Choice, n: u64) -> Result<f64> {
        if Some(choice) == self.declined {
            return Err(Error::Declined {
                ranks: vec![0],
                cause: None,
            });
        }
        if self.contrary {
            let odd = choice.to_string().len() % 2;
            let t = if odd == self.rank % 2 { 0.9e-4 } else { 1e-4 };
            return Ok(t * (0.99 + 0.02 * self.noise()));
        }
        let (params, p) = (&self.params, self.p);
        if self.close {
            let first = tune::shortlist(params, op, n, p, 1, p)[0];
            let cost = match choice {
                Choice::Knem(a) if a == first => 1e-4,
                Choice::HandOver => 1.004e-4,
                Choice::Knem(_) => 2e-4,
            };
            return Ok(cost * (0.95 + 0.1 * self.noise()) * (1.0 + 0.01 * self.rank as f64));
        }
        let cost = self
            .costs
            .entry((op, n))
            .or_insert_with(|| known_costs(params, op, n, p))
            .iter()
            .find(|(c, _)| *c == choice)
            .map_or(1.0, |&(_, t)| t);
        // ±5% noise of this rank, and ranks up to 3% apart.
        let noise = 0.95 + 0.1 * self.noise();
        Ok(cost * noise * (1.0 + 0.01 * self.rank as f64))
    }

    fn max_all(&mut self, values: &mut [f64]) -> Result<()> {
        self.shared.slots.lock().unwrap()[self.rank] = values.to_vec();
        self.shared.barrier.wait();
        {
            let slots = self.shared.slots.lock().unwrap();
            for (i, v) in values.iter_mut().enumerate() {
                *v = slots.iter().map(|s| s[i]).fold(f64::NEG_INFINITY, f64::max);
            }
        }
        self.shared.barrier.wait();
        Ok(())
    }

    fn can_hand_over(&self) -> bool {
        true
    }

    fn ranks(&self) -> (usize, usize) {
        (self.rank, self.p)
    }
}

fn plan() -> Plan {
    Plan {
        ops: Op::ALL.to_vec(),
        sizes: tune::default_sizes(),
        cfg: Config {
            warmup: 1,
            min_reps: 10,
            max_reps: 60,
            ci_target: 0.05,
            max_seconds: 30.0,
        },
    }
}

/// Run the tuner on `p` threads standing for ranks; every rank's cases.
fn tune_on(p: usize, declined: Option<Choice>, contrary: bool, close: bool) -> Vec<Vec<Case>> {
    let shared = Arc::new(Shared {
        barrier: Barrier::new(p),
        slots: Mutex::new(vec![Vec::new(); p]),
    });
    let threads: Vec<_> = (0..p)
        .map(|rank| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let params = Params::default();
                let mut b = Synthetic {
                    rank,
                    p,
                    params: params.clone(),
                    rng: 0x1234_5678_9abc_def1
                        ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    shared,
                    declined,
                    costs: BTreeMap::new(),
                    contrary,
                    close,
                };
                tune::tune_team(&mut b, &params, (p, 1, p), "synthetic", &plan(), |_, _| {})
                    .unwrap()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn finds_the_known_best_in_every_case_and_all_ranks_agree() {
    let params = Params::default();
    for p in [4, 8] {
        let all = tune_on(p, None, false, false);
        for (rank, cases) in all.iter().enumerate() {
            assert_eq!(
                cases, &all[0],
                "rank {rank} of {p} decided otherwise than rank 0"
            );
        }
        let mut winners = BTreeMap::new();
        for case in &all[0] {
            for pt in &case.points {
                let known = known_costs(&params, case.op, pt.bytes, p);
                let best = known.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0;
                assert_eq!(
                    pt.choice, best,
                    "{} of {} B on {p} ranks: the tuner chose {}, the known best is {best}",
                    case.op, pt.bytes, pt.choice
                );
                assert_eq!(case.decide(pt.bytes), best);
                assert_eq!(pt.timings.len(), known.len(), "every candidate timed");
                *winners.entry(best == Choice::HandOver).or_insert(0) += 1;
            }
        }
        assert_eq!(all[0].len(), Op::ALL.len());
        // The grid must exercise both kinds of winner.
        assert!(winners.len() == 2, "{winners:?}");
    }
}

#[test]
fn a_declined_candidate_is_dropped_on_every_rank() {
    let all = tune_on(4, Some(Choice::HandOver), false, false);
    for cases in &all {
        assert_eq!(cases, &all[0]);
        for case in cases {
            for pt in &case.points {
                assert!(pt.timings.iter().all(|t| t.choice != Choice::HandOver));
                assert_ne!(pt.choice, Choice::HandOver);
            }
        }
    }
}

#[test]
fn ranks_whose_own_timings_disagree_take_one_decision() {
    let all = tune_on(4, None, true, false);
    for (rank, cases) in all.iter().enumerate() {
        assert_eq!(cases, &all[0], "rank {rank} decided otherwise than rank 0");
    }
}

#[test]
fn median_interval_covers_the_median_and_narrows() {
    let few = tune::median_ci(&[3.0, 1.0, 2.0]);
    assert_eq!((few.median, few.lo, few.hi), (2.0, 1.0, 3.0));
    let v: Vec<f64> = (0..100).map(|i| 100.0 + (i % 10) as f64).collect();
    let s = tune::median_ci(&v);
    // Ranks 40 and 61 of 100 (1-based): ten samples of each of 100..=109.
    assert_eq!((s.lo, s.median, s.hi), (103.0, 104.5, 106.0), "{s:?}");
    // Ten samples: ranks 2 and 9, so one outlier on either side is left out.
    let ten = [1.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 900.0];
    let t = tune::median_ci(&ten);
    assert_eq!((t.lo, t.median, t.hi), (5.0, 5.0, 5.0), "{t:?}");
    assert!(s.rel_halfwidth() < 0.05);
}

fn timing(choice: Choice, median_us: f64, lo: f64, hi: f64) -> Timing {
    Timing {
        choice,
        median_us,
        ci_us: [lo, hi],
        reps: 20,
    }
}

#[test]
fn hand_over_keeps_the_call_unless_beaten_beyond_its_interval() {
    let (a, b, h) = (
        Choice::Knem(Algorithm::DirectRead),
        Choice::Knem(Algorithm::Sequential),
        Choice::HandOver,
    );
    // The intervals apart: the algorithm wins.
    let apart = [timing(a, 90.0, 85.0, 95.0), timing(h, 100.0, 96.0, 104.0)];
    assert_eq!(tune::decide(&apart), a);
    // Faster in the median, but the intervals overlap: hand over.
    let overlap = [timing(a, 90.0, 80.0, 97.0), timing(h, 100.0, 96.0, 104.0)];
    assert_eq!(tune::decide(&overlap), h);
    let touching = [timing(a, 90.0, 80.0, 96.0), timing(h, 100.0, 96.0, 104.0)];
    assert_eq!(tune::decide(&touching), h);
    // Hand over fastest; and without hand over (declined) the fastest.
    let first = [timing(h, 90.0, 85.0, 95.0), timing(a, 100.0, 96.0, 104.0)];
    assert_eq!(tune::decide(&first), h);
    let none = [timing(b, 90.0, 80.0, 99.0), timing(a, 100.0, 96.0, 104.0)];
    assert_eq!(tune::decide(&none), b);
}

#[test]
fn a_lead_within_the_noise_leaves_the_call_with_open_mpi() {
    let all = tune_on(4, None, false, true);
    let mut lower_median = 0;
    for (rank, cases) in all.iter().enumerate() {
        assert_eq!(cases, &all[0], "rank {rank} decided otherwise than rank 0");
    }
    for case in &all[0] {
        for pt in &case.points {
            assert_eq!(
                pt.choice,
                Choice::HandOver,
                "{} of {} B: {} chosen on a lead of 0.4% under 10% noise",
                case.op,
                pt.bytes,
                pt.choice
            );
            lower_median += usize::from(pt.timings[0].choice != Choice::HandOver);
        }
    }
    // The test proves something only where the fastest median was not
    // hand over's.
    assert!(
        lower_median > 0,
        "hand over had the lowest median everywhere"
    );
}
