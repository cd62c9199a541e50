//! Issue 31's family of crossing instances: 3 zones x 20 nodes, zone and node
//! Required 1, a rack Preferred 1 whose racks are of unequal sizes and each
//! cross every zone, tight or loose room spread unevenly over the nodes, with
//! or without running members. Deterministic: a spec (and its seed) always
//! gives the same problem. Shared by the property tests and the bench
//! (`benches/planner.rs` includes this file by path).
#![allow(dead_code)]

use placement::*;
use std::collections::BTreeMap;

/// One instance of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uneven {
    pub shards: u32,
    /// 3-7 in the family.
    pub racks: usize,
    /// Room for a few more members than the cluster has (else about a fifth more).
    pub tight: bool,
    /// About half the shards run already, on nodes drawn at random.
    pub running: bool,
    pub seed: u64,
}

impl Uneven {
    pub fn name(&self) -> String {
        format!(
            "{}x3_{}racks_{}{}_s{}",
            self.shards,
            self.racks,
            if self.tight { "tight" } else { "loose" },
            if self.running { "_running" } else { "" },
            self.seed
        )
    }
}

pub const ZONES: usize = 3;
pub const NODES_PER_ZONE: usize = 20;
pub const RACK_KEY: &str = "example.com/rack";

/// splitmix64: a fixed sequence per seed, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Splits `total` into parts proportional to `weights` (largest remainders).
fn proportional(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u64 = weights.iter().sum();
    let mut parts: Vec<u64> = weights.iter().map(|w| total * w / sum).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse((total * weights[i]) % sum), i));
    let mut left = total - parts.iter().sum::<u64>();
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

/// The problem of `spec`.
pub fn uneven_racks(spec: Uneven) -> Problem {
    let mut rng = Rng::new(spec.seed);
    let r = spec.racks;
    // A few large racks and a few small ones: the rack's weight is drawn
    // from 1, 1, 2, 4, 6; each rack has at least 2 nodes in every zone.
    let weights: Vec<u64> = (0..r)
        .map(|_| [1, 1, 2, 4, 6][rng.below(5) as usize])
        .collect();
    let members = u64::from(spec.shards) * ZONES as u64;
    let extra = if spec.tight {
        3 + rng.below(4)
    } else {
        members / 5
    };
    // Every zone holds at least its shards' members (one per shard).
    let mut zone_extra = [0u64; ZONES];
    for _ in 0..extra {
        zone_extra[rng.below(ZONES as u64) as usize] += 1;
    }
    let mut nodes = Vec::new();
    for (z, ze) in zone_extra.iter().enumerate() {
        // Racks in this zone: 2 nodes each, the rest by weight (with jitter).
        let jittered: Vec<u64> = weights.iter().map(|w| w * 4 + rng.below(3)).collect();
        let spread = proportional((NODES_PER_ZONE - 2 * r) as u64, &jittered);
        let mut rack_of: Vec<usize> = Vec::new();
        for (k, s) in spread.iter().enumerate() {
            rack_of.extend(std::iter::repeat_n(k, 2 + *s as usize));
        }
        // Room: the zone's share spread unevenly (node weights 1-4).
        let node_weights: Vec<u64> = (0..NODES_PER_ZONE).map(|_| 1 + rng.below(4)).collect();
        let pods = proportional(u64::from(spec.shards) + ze, &node_weights);
        for (i, (&rack, &pods)) in rack_of.iter().zip(&pods).enumerate() {
            let name = format!("z{z}-n{i:02}");
            let labels = BTreeMap::from([
                (HOSTNAME_KEY.to_string(), name.clone()),
                (ZONE_KEY.to_string(), format!("z{z}")),
                (RACK_KEY.to_string(), format!("k{rack}")),
            ]);
            nodes.push(NodeInfo {
                name,
                labels,
                ready: true,
                unschedulable: false,
                taints: vec![],
                allocatable: Capacity {
                    cpu_millis: 0,
                    memory_bytes: 0,
                    pods,
                },
                used_by_others: Capacity::default(),
            });
        }
    }
    let mut running = Vec::new();
    if spec.running {
        // Member m of a running shard runs in zone m, on a node drawn at
        // random among those with room left (a past plan on other racks).
        let mut load: Vec<u64> = vec![0; nodes.len()];
        for s in 0..spec.shards {
            if rng.below(2) == 0 {
                continue;
            }
            for m in 0..ZONES {
                let base = m * NODES_PER_ZONE;
                let open: Vec<usize> = (base..base + NODES_PER_ZONE)
                    .filter(|&i| load[i] < nodes[i].allocatable.pods)
                    .collect();
                if open.is_empty() {
                    continue;
                }
                let i = open[rng.below(open.len() as u64) as usize];
                load[i] += 1;
                running.push(RunningMember {
                    shard: s,
                    member: m as u32,
                    node: nodes[i].name.clone(),
                });
            }
        }
    }
    let spread = |key: &str, max, mode| SpreadConstraint {
        topology_key: key.into(),
        max_replicas: max,
        mode,
    };
    Problem {
        cluster: spec.name(),
        shards: spec.shards,
        replicas: 2,
        constraints: vec![
            spread("zone", 1, Mode::Required),
            spread("node", 1, Mode::Required),
            spread(RACK_KEY, 1, Mode::Preferred),
        ],
        nodes,
        running,
        request: Resources::default(),
        node_selector: BTreeMap::new(),
        tolerations: vec![],
        primaries: BTreeMap::new(),
    }
}

/// The bench's family: 16 instances over shard counts 50-333, 3-7 racks,
/// tight and loose room, with and without running members.
pub fn family() -> Vec<Uneven> {
    const SHARDS: [u32; 4] = [50, 100, 200, 333];
    (0..16u64)
        .map(|i| Uneven {
            shards: SHARDS[(i % 4) as usize],
            racks: 3 + ((i * 3 + i / 4) % 5) as usize,
            tight: (i / 2) % 2 == 0,
            running: (i / 4) % 2 == 1,
            seed: 31 + i,
        })
        .collect()
}
