//! The rules file: what a tuning run (`knemrs-tune`, [`crate::tune`])
//! measured on this node, and the decision it took per operation, team
//! size, transport and range of bytes per block: a knem-coll algorithm,
//! or "hand-over" (Open MPI's own module carries the call).
//!
//! Measured points decide where they were measured.  Between two points
//! whose winners differ, the switch happens where the two winners' times
//! cross (log-log interpolation of their measured medians); so a size
//! between two points is never given a candidate that lost at both.  The
//! ranges are worked out once, when the file is written, so that a team
//! only looks one up.
//!
//! A file of another version, of another machine (CPU model or core count
//! differ) or that is no rules file at all is refused with one line that
//! says why; its user then falls back to the model.

use crate::error::{Error, Result};
use crate::model::{Algorithm, Op};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The format name every rules file carries.
pub const FORMAT: &str = "knem-rs coll rules";
/// The version of the format this knem-rs reads and writes.
pub const VERSION: u32 = 1;
/// Where the node's rules live.
pub const SYSTEM_RULES: &str = "/etc/knem-rs/coll-rules.json";
/// Environment: another rules file (tests, users trying a tuning).
pub const ENV_RULES: &str = "KNEM_RS_RULES";

/// The rules file a team reads when none is named: $KNEM_RS_RULES, else
/// [`SYSTEM_RULES`].
pub fn default_path() -> PathBuf {
    std::env::var_os(ENV_RULES).map_or_else(|| PathBuf::from(SYSTEM_RULES), PathBuf::from)
}

/// Who carries a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Choice {
    /// Open MPI's own module (the one coll/knemrs saved).
    HandOver,
    /// knem-rs, with this algorithm.
    Knem(Algorithm),
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::HandOver => f.write_str("hand-over"),
            Choice::Knem(a) => a.fmt(f),
        }
    }
}

impl FromStr for Choice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Choice> {
        if s.trim() == "hand-over" {
            return Ok(Choice::HandOver);
        }
        s.parse().map(Choice::Knem)
    }
}

/// Op, Algorithm and Choice are stored by their names.
macro_rules! serde_by_name {
    ($($t:ty),*) => {$(
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}
serde_by_name!(Choice, Op);

/// The machine a file was tuned on.  Only `cpu_model` and `cores` must
/// match to use it; the rest says what ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// /proc/cpuinfo's "model name" of the first CPU.
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
    /// The kernel release (uname -r).
    pub kernel: String,
    /// knem-rs's version.
    pub knem_rs: String,
    /// Open MPI's version ("" when tuned without it).
    pub open_mpi: String,
}

impl Node {
    /// This machine (Open MPI's version left empty).
    pub fn this_host() -> Node {
        Node {
            cpu_model: cpu_model(),
            cores: online_cpus(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|r| r.trim().to_string())
                .unwrap_or_default(),
            knem_rs: env!("CARGO_PKG_VERSION").to_string(),
            open_mpi: String::new(),
        }
    }

    /// Why rules tuned on `self` cannot be used on `here`, if they cannot.
    pub fn mismatch(&self, here: &Node) -> Option<String> {
        if self.cpu_model != here.cpu_model || self.cores != here.cores {
            return Some(format!(
                "tuned on another machine ({:?}, {} CPUs; this one is {:?}, {} CPUs)",
                self.cpu_model, self.cores, here.cpu_model, here.cores
            ));
        }
        None
    }
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    crate::units::cpu_model_in(&info).unwrap_or_else(|| "unknown".into())
}

fn online_cpus() -> usize {
    // SAFETY: sysconf reads a constant of the system; no memory involved.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(0)
}

/// One candidate's measured time at one size (microseconds; a
/// repetition's time is the mean of the ranks').
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// The candidate.
    pub choice: Choice,
    /// Median over the repetitions.
    pub median_us: f64,
    /// 95% confidence interval of the median.
    pub ci_us: [f64; 2],
    /// Repetitions timed.
    pub reps: usize,
}

/// A measured size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Bytes per block.
    pub bytes: u64,
    /// The fastest candidate.
    pub choice: Choice,
    /// Every candidate timed, fastest first.
    pub timings: Vec<Timing>,
}

impl Point {
    fn median_of(&self, c: Choice) -> Option<f64> {
        self.timings
            .iter()
            .find(|t| t.choice == c)
            .map(|t| t.median_us)
    }
}

/// A range of bytes per block, `from` included, `to` excluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Range {
    /// First size of the range.
    pub from: u64,
    /// First size after it (u64::MAX: no end).
    pub to: u64,
    /// Who carries these sizes.
    pub choice: Choice,
}

/// The decisions for one operation on teams of one size and transport.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// The operation.
    pub op: Op,
    /// Team size.
    pub ranks: usize,
    /// The transport's name (knem, cma, shm).
    pub transport: String,
    /// Sizes 1.. in order, without gaps.
    pub ranges: Vec<Range>,
    /// What was measured, by size.
    pub points: Vec<Point>,
}

impl Case {
    /// A case from its measured points (any order, at least one): the
    /// ranges follow from them (see the module's doc).
    pub fn from_points(op: Op, ranks: usize, transport: &str, mut points: Vec<Point>) -> Case {
        points.sort_by_key(|p| p.bytes);
        points.dedup_by_key(|p| p.bytes);
        let mut ranges: Vec<Range> = Vec::new();
        let mut push = |from: u64, choice: Choice| match ranges.last_mut() {
            Some(last) if last.choice == choice => {}
            Some(last) if last.from >= from => {
                // A switch at the very start of the previous range
                // replaces it (interpolation put it there).
                last.choice = choice;
            }
            Some(last) => {
                last.to = from;
                ranges.push(Range {
                    from,
                    to: u64::MAX,
                    choice,
                });
            }
            None => ranges.push(Range {
                from: 1,
                to: u64::MAX,
                choice,
            }),
        };
        for (i, pt) in points.iter().enumerate() {
            if i > 0 {
                let prev = &points[i - 1];
                if prev.choice != pt.choice {
                    push(crossover(prev, pt), pt.choice);
                    continue;
                }
            }
            push(pt.bytes.max(1), pt.choice);
        }
        Case {
            op,
            ranks,
            transport: transport.to_string(),
            ranges,
            points,
        }
    }

    /// Who carries `n` bytes per block.
    pub fn decide(&self, n: u64) -> Choice {
        let n = n.max(1);
        self.ranges
            .iter()
            .find(|r| r.from <= n && n < r.to)
            .or(self.ranges.last())
            .map_or(Choice::HandOver, |r| r.choice)
    }

    fn check(&self) -> std::result::Result<(), String> {
        let what = format!(
            "{} on {} ranks over {}",
            self.op, self.ranks, self.transport
        );
        if self.ranks == 0 || self.ranges.is_empty() {
            return Err(format!("{what}: no ranks or no ranges"));
        }
        let mut next = 1;
        for r in &self.ranges {
            if r.from != next || r.to <= r.from {
                return Err(format!(
                    "{what}: ranges must run from 1 without gaps or overlaps (one starts at {})",
                    r.from
                ));
            }
            if let Choice::Knem(a) = r.choice {
                if !a.supports(self.op) {
                    return Err(format!("{what}: {a} does not implement {}", self.op));
                }
            }
            next = r.to;
        }
        if next != u64::MAX {
            return Err(format!("{what}: the last range must have no end"));
        }
        Ok(())
    }
}

/// Where the switch from `lo`'s winner to `hi`'s winner goes, strictly
/// after `lo.bytes` and at most `hi.bytes`: where their measured times
/// cross when both were timed at both sizes, else halfway (geometric).
fn crossover(lo: &Point, hi: &Point) -> u64 {
    let (a, b) = (lo.choice, hi.choice);
    let (x0, x1) = ((lo.bytes.max(1)) as f64, hi.bytes as f64);
    let mid = (x0 * x1).sqrt();
    let at = match (
        lo.median_of(a),
        lo.median_of(b),
        hi.median_of(a),
        hi.median_of(b),
    ) {
        (Some(a0), Some(b0), Some(a1), Some(b1))
            if a0 > 0.0 && b0 > 0.0 && a1 > 0.0 && b1 > 0.0 =>
        {
            // log(a/b) goes from <= 0 at x0 (a won) to >= 0 at x1 (b won);
            // linear in log x between them.
            let (d0, d1) = ((a0 / b0).ln(), (a1 / b1).ln());
            if d1 - d0 > 0.0 {
                let t = (-d0 / (d1 - d0)).clamp(0.0, 1.0);
                (x0.ln() + t * (x1.ln() - x0.ln())).exp()
            } else {
                mid
            }
        }
        _ => mid,
    };
    (at.round() as u64).clamp(lo.bytes + 1, hi.bytes.max(lo.bytes + 1))
}

/// A rules file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] for files this knem-rs writes.
    pub version: u32,
    /// The machine it was tuned on.
    pub node: Node,
    /// The tuning run: seconds it took and the target of the confidence
    /// intervals.
    pub tuning_seconds: f64,
    /// The relative half-width of the medians' confidence interval the
    /// run aimed at.
    pub ci_target: f64,
    /// The decisions.
    pub cases: Vec<Case>,
}

impl Rules {
    /// Empty rules for this machine.
    pub fn new(node: Node, ci_target: f64) -> Rules {
        Rules {
            format: FORMAT.into(),
            version: VERSION,
            node,
            tuning_seconds: 0.0,
            ci_target,
            cases: Vec::new(),
        }
    }

    /// Parse and check a rules file's text; `Err` says what is wrong in
    /// one line (without the path).
    pub fn parse(text: &str) -> std::result::Result<Rules, String> {
        // The header first, so that another version is named as such
        // rather than as a missing field.
        #[derive(Deserialize)]
        struct Header {
            format: Option<String>,
            version: Option<u32>,
        }
        let h: Header = serde_json::from_str(text)
            .map_err(|e| format!("not a knem-rs rules file (not a JSON object: {e})"))?;
        if h.format.as_deref() != Some(FORMAT) {
            return Err(format!(
                "not a knem-rs rules file (no \"format\": \"{FORMAT}\")"
            ));
        }
        match h.version {
            Some(VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "rules of version {v}; this knem-rs reads version {VERSION} (tune again)"
                ))
            }
            None => return Err("rules without a version".into()),
        }
        let rules: Rules =
            serde_json::from_str(text).map_err(|e| format!("not a knem-rs rules file ({e})"))?;
        for c in &rules.cases {
            c.check()?;
        }
        Ok(rules)
    }

    /// Read the rules at `path` for use on `here`: missing, unreadable,
    /// malformed, of another version or of another machine are errors
    /// whose message names the file and the reason.
    pub fn load_for(path: &Path, here: &Node) -> Result<Rules> {
        let text = std::fs::read_to_string(path)
            .map_err(Error::io(format!("rules {}", path.display())))?;
        let rules = Rules::parse(&text)
            .map_err(|e| Error::Invalid(format!("rules {}: {e}", path.display())))?;
        if let Some(why) = rules.node.mismatch(here) {
            return Err(Error::Invalid(format!("rules {}: {why}", path.display())));
        }
        Ok(rules)
    }

    /// The text of the file (what [`Rules::parse`] reads back).
    pub fn to_json(&self) -> String {
        // Strings, numbers and lists only: this cannot fail.
        serde_json::to_string_pretty(self).expect("rules serialise") + "\n"
    }

    /// The case for `op` on teams of `ranks` over `transport`, if tuned.
    pub fn case(&self, op: Op, ranks: usize, transport: &str) -> Option<&Case> {
        self.cases
            .iter()
            .find(|c| c.op == op && c.ranks == ranks && c.transport == transport)
    }

    /// Add `case`, replacing one of the same operation, size and transport.
    pub fn add(&mut self, case: Case) {
        self.cases
            .retain(|c| (c.op, c.ranks, &c.transport) != (case.op, case.ranks, &case.transport));
        self.cases.push(case);
    }

    /// A digest of the decisions (FNV-1a of the file's text): ranks that
    /// read files with the same digest decide alike.
    pub fn digest(&self) -> u64 {
        self.to_json().bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        }) | 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn timing(choice: Choice, us: f64) -> Timing {
        Timing {
            choice,
            median_us: us,
            ci_us: [us * 0.98, us * 1.02],
            reps: 20,
        }
    }

    fn point(bytes: u64, times: &[(Choice, f64)]) -> Point {
        let mut timings: Vec<Timing> = times.iter().map(|&(c, t)| timing(c, t)).collect();
        timings.sort_by(|a, b| a.median_us.total_cmp(&b.median_us));
        Point {
            bytes,
            choice: timings[0].choice,
            timings,
        }
    }

    const HO: Choice = Choice::HandOver;
    const DR: Choice = Choice::Knem(Algorithm::DirectRead);
    const K2: Choice = Choice::Knem(Algorithm::Knomial(2));

    pub(crate) fn sample() -> Rules {
        let mut r = Rules::new(Node::this_host(), 0.05);
        r.add(Case::from_points(
            Op::Bcast,
            4,
            "knem",
            vec![
                point(4096, &[(HO, 10.0), (DR, 40.0), (K2, 30.0)]),
                point(65536, &[(HO, 100.0), (DR, 50.0), (K2, 60.0)]),
                point(1 << 20, &[(HO, 1000.0), (DR, 500.0), (K2, 400.0)]),
            ],
        ));
        r
    }

    #[test]
    fn writes_what_it_reads() {
        let r = sample();
        assert_eq!(Rules::parse(&r.to_json()).unwrap(), r);
    }

    #[test]
    fn measured_points_decide_and_winners_switch_where_their_times_cross() {
        let r = sample();
        let c = r.case(Op::Bcast, 4, "knem").unwrap();
        assert_eq!(c.decide(1), HO);
        assert_eq!(c.decide(4096), HO);
        assert_eq!(c.decide(65536), DR);
        assert_eq!(c.decide(1 << 20), K2);
        assert_eq!(c.decide(u64::MAX), K2);
        // HO/DR: 10/40 at 4 KiB, 100/50 at 64 KiB: log(HO/DR) goes from
        // -ln 4 to ln 2, crossing 2/3 of the way in log bytes: 2^(12+8/3).
        assert_eq!(c.ranges[1].from, 2f64.powf(44.0 / 3.0).round() as u64);
        assert!(r.case(Op::Bcast, 8, "knem").is_none());
        assert!(r.case(Op::Bcast, 4, "cma").is_none());
    }

    #[test]
    fn refuses_another_machine_another_version_and_garbage_in_one_line() {
        let r = sample();
        let here = Node::this_host();
        let dir = std::env::temp_dir().join(format!("knem-rs-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let put = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let ok = put("ok.json", &r.to_json());
        assert_eq!(Rules::load_for(&ok, &here).unwrap(), r);
        let mut other = r.clone();
        other.node.cpu_model = "Some Other CPU @ 9 GHz".into();
        let cases: Vec<(std::path::PathBuf, &str)> = vec![
            (
                put("other-cpu.json", &other.to_json()),
                "tuned on another machine",
            ),
            (
                put(
                    "old.json",
                    &r.to_json().replace("\"version\": 1", "\"version\": 0"),
                ),
                "rules of version 0; this knem-rs reads version 1",
            ),
            (
                put("passwd.json", "root:x:0:0:root:/root:/bin/bash\n"),
                "not a knem-rs rules file",
            ),
            (
                put("model.json", r#"{"knem": {"source": "x"}}"#),
                "not a knem-rs rules file",
            ),
            (dir.join("missing.json"), "No such file"),
        ];
        let mut more = r.clone();
        more.node.cores += 1;
        let more = put("cores.json", &more.to_json());
        for (path, why) in cases.iter().map(|(p, w)| (p, *w)).chain([(&more, "CPUs")]) {
            let e = Rules::load_for(path, &here).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains(&path.display().to_string()),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e:?}");
        }
        // Ranges that leave a gap, or an algorithm of another operation.
        let mut gap = r.clone();
        gap.cases[0].ranges[1].from += 1;
        assert!(Rules::parse(&gap.to_json())
            .unwrap_err()
            .contains("without gaps"));
        let mut wrong = r;
        wrong.cases[0].ranges[0].choice = Choice::Knem(Algorithm::Bruck);
        assert!(Rules::parse(&wrong.to_json())
            .unwrap_err()
            .contains("does not implement"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        /// Between two measured sizes the choice is one of the two
        /// winners: never a candidate that lost at both.
        #[test]
        fn between_points_only_a_neighbour_winner(
            times in proptest::collection::vec(proptest::collection::vec(1.0f64..1e6, 4), 2..8),
            probe in proptest::collection::vec(0.0f64..1.0, 16),
            drop in 0usize..4,
        ) {
            let cands = [HO, DR, K2, Choice::Knem(Algorithm::Throttled(2))];
            let points: Vec<Point> = times.iter().enumerate().map(|(i, t)| {
                // Every point lacks one candidate (as shortlists differ).
                let ts: Vec<(Choice, f64)> = cands.iter().zip(t)
                    .enumerate().filter(|(j, _)| (i + j) % 4 != drop || i == 0)
                    .map(|(_, (&c, &t))| (c, t)).collect();
                point(1024 << (2 * i), &ts)
            }).collect();
            let case = Case::from_points(Op::Bcast, 4, "knem", points.clone());
            prop_assert!(case.check().is_ok());
            for w in points.windows(2) {
                prop_assert_eq!(case.decide(w[0].bytes), w[0].choice);
                prop_assert_eq!(case.decide(w[1].bytes), w[1].choice);
                for &f in &probe {
                    let n = w[0].bytes + ((w[1].bytes - w[0].bytes) as f64 * f) as u64;
                    let c = case.decide(n);
                    prop_assert!(c == w[0].choice || c == w[1].choice,
                        "{} at {} between {} ({}) and {} ({})", c, n, w[0].bytes, w[0].choice, w[1].bytes, w[1].choice);
                }
            }
        }
    }
}
