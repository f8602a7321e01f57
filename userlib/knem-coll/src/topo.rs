//! NUMA grouping for hierarchical collectives: which node each rank runs
//! on, read from /sys/devices/system/node, and the leader of each node.

use std::collections::BTreeMap;

/// Environment: a fake node per rank, e.g. `0,0,1,1` (tests, or machines
/// whose launcher pins ranks differently from where they start).
pub const ENV_FAKE_NODES: &str = "KNEM_RS_NODES";

/// Parse a sysfs cpulist such as `0-3,8,10-11`.
pub fn parse_cpulist(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(c) = part.trim().parse() {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// cpu → node from /sys/devices/system/node/node*/cpulist.
pub fn cpu_nodes() -> BTreeMap<u32, u32> {
    let mut map = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return map;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix("node"))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(list) = std::fs::read_to_string(e.path().join("cpulist")) {
            for c in parse_cpulist(&list) {
                map.insert(c, n);
            }
        }
    }
    map
}

/// The node this process runs on now (0 when unknown).
pub fn current_node() -> u32 {
    // SAFETY: sched_getcpu takes no arguments.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        return 0;
    }
    cpu_nodes().get(&(cpu as u32)).copied().unwrap_or(0)
}

/// Node of every rank, and the groups they form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    nodes: Vec<u32>,
}

/// The two levels of a hierarchical collective rooted at `root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    /// One rank per node; the root leads its own node.  Ordered by node.
    pub leaders: Vec<usize>,
    /// For each rank, the leader of its node.
    pub leader_of: Vec<usize>,
    /// Members of each leader's node, the leader first.
    pub members: Vec<Vec<usize>>,
}

impl Topology {
    /// Every rank on one node.
    pub fn single(size: usize) -> Topology {
        Topology {
            nodes: vec![0; size],
        }
    }

    /// From a node per rank.
    pub fn from_nodes(nodes: Vec<u32>) -> Topology {
        Topology { nodes }
    }

    /// `KNEM_RS_NODES` when set and of the right length, else `nodes`.
    pub fn from_env_or(nodes: Vec<u32>) -> Topology {
        if let Ok(v) = std::env::var(ENV_FAKE_NODES) {
            let fake: Vec<u32> = v.split(',').filter_map(|s| s.trim().parse().ok()).collect();
            if fake.len() == nodes.len() {
                return Topology { nodes: fake };
            }
        }
        Topology { nodes }
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Number of distinct nodes.
    pub fn node_count(&self) -> usize {
        let mut v = self.nodes.clone();
        v.sort_unstable();
        v.dedup();
        v.len()
    }

    /// Largest number of ranks on one node.
    pub fn largest_group(&self) -> usize {
        let mut count: BTreeMap<u32, usize> = BTreeMap::new();
        for n in &self.nodes {
            *count.entry(*n).or_default() += 1;
        }
        count.values().copied().max().unwrap_or(0)
    }

    /// Leaders and members for a collective rooted at `root`: the root leads
    /// its node, the lowest rank leads each other node.
    pub fn groups(&self, root: usize) -> Groups {
        let mut by_node: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (r, n) in self.nodes.iter().enumerate() {
            by_node.entry(*n).or_default().push(r);
        }
        let mut leaders = Vec::new();
        let mut members = Vec::new();
        let mut leader_of = vec![0; self.nodes.len()];
        for (_, mut ranks) in by_node {
            let leader = if ranks.contains(&root) {
                root
            } else {
                ranks[0]
            };
            ranks.retain(|r| *r != leader);
            ranks.insert(0, leader);
            for r in &ranks {
                leader_of[*r] = leader;
            }
            leaders.push(leader);
            members.push(ranks);
        }
        Groups {
            leaders,
            leader_of,
            members,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulist_forms() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(""), Vec::<u32>::new());
    }

    #[test]
    fn two_nodes_root_leads_its_node() {
        let t = Topology::from_nodes(vec![0, 0, 0, 1, 1, 1, 1, 0]);
        let g = t.groups(5);
        assert_eq!(g.leaders, vec![0, 5]);
        assert_eq!(g.members, vec![vec![0, 1, 2, 7], vec![5, 3, 4, 6]]);
        assert_eq!(g.leader_of, vec![0, 0, 0, 5, 5, 5, 5, 0]);
        assert_eq!(t.node_count(), 2);
        assert_eq!(t.largest_group(), 4);
    }

    #[test]
    fn every_rank_in_exactly_one_group() {
        for nodes in [vec![0], vec![3, 1, 3, 1, 2], vec![0, 1, 2, 3, 0, 1, 2, 3]] {
            let t = Topology::from_nodes(nodes.clone());
            for root in 0..nodes.len() {
                let g = t.groups(root);
                let mut all: Vec<usize> = g.members.iter().flatten().copied().collect();
                all.sort_unstable();
                assert_eq!(all, (0..nodes.len()).collect::<Vec<_>>());
                assert!(g.leaders.contains(&root));
                for (m, l) in g.members.iter().zip(&g.leaders) {
                    assert_eq!(m[0], *l);
                    assert!(m.iter().all(|r| nodes[*r] == nodes[*l]));
                }
            }
        }
    }

    #[test]
    fn single_node_is_one_group() {
        let g = Topology::single(4).groups(2);
        assert_eq!(g.leaders, vec![2]);
        assert_eq!(g.members, vec![vec![2, 0, 1, 3]]);
    }
}
