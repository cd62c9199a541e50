//! A local search that lowers the Preferred excess of a placement by moving
//! new members, for the branch and bound of crossing keys.
//!
//! The branch and bound proves a placement optimal once it holds one whose
//! score equals its lower bound. Its relaxations usually bound well (often at
//! the optimum), but the placements they give break the crossing constraints,
//! and fixing shards one by one can take long to reach one as good as the
//! bound: 100 shards x 3 on 60 nodes with zones and racks that cross and no
//! room to spare stayed at 9-15 excess for 20 s where 0 is possible. Swapping
//! the nodes of two members of different shards keeps every node's load, so
//! it moves between placements that place as many members; a descent over such
//! swaps (and moves to nodes with room left) from the relaxations' placements
//! reaches the bound in milliseconds there. It only ever returns a placement
//! that keeps every Required constraint and is no worse, so the search stays
//! exact: this only finds its incumbents sooner.
//!
//! Only members that come new move: a running member that stays is never
//! touched, so displacement never grows. Deterministic: pairs are tried in a
//! fixed order.

use crate::instance::Instance;
use crate::network::{Slot, Solution};
use crate::structure::Structure;
use std::collections::BTreeMap;
use std::time::Instant;

/// At most this many passes over every pair (each pass that improves lowers
/// the excess by at least one, so this is a guard, not a tuning knob).
const MAX_PASSES: usize = 64;

/// Above this many new members the pairwise passes get slow (quadratic);
/// the search then goes without them.
const MAX_MOVABLE: usize = 4_000;

struct Member {
    shard: usize,
    node: usize,
}

struct State<'a, 'p> {
    inst: &'a Instance<'p>,
    /// Effective constraints, with whether they are Required.
    constraints: Vec<(usize, bool, u32)>,
    /// `[shard][k][label]`: members of the shard in that domain of the k-th
    /// effective constraint.
    counts: Vec<Vec<Vec<u32>>>,
    /// Members of the cluster per node.
    load: Vec<u32>,
}

impl State<'_, '_> {
    fn over(max: u32, n: u32) -> i64 {
        i64::from(n.saturating_sub(max))
    }

    /// The change in excess when one member of `shard` leaves `from` for
    /// `to`; `None` when it would break a Required constraint.
    fn delta(&self, shard: usize, from: usize, to: usize) -> Option<i64> {
        let (a, b) = (&self.inst.nodes[from].labels, &self.inst.nodes[to].labels);
        let mut d = 0;
        for (k, &(c, required, max)) in self.constraints.iter().enumerate() {
            let (lf, lt) = (a[c] as usize, b[c] as usize);
            if lf == lt {
                continue;
            }
            let counts = &self.counts[shard][k];
            if required {
                if counts[lt] + 1 > max {
                    return None;
                }
                continue;
            }
            d += Self::over(max, counts[lt] + 1) - Self::over(max, counts[lt]);
            d += Self::over(max, counts[lf] - 1) - Self::over(max, counts[lf]);
        }
        Some(d)
    }

    fn shift(&mut self, shard: usize, from: usize, to: usize) {
        for (k, &(c, _, _)) in self.constraints.iter().enumerate() {
            self.counts[shard][k][self.inst.nodes[from].labels[c] as usize] -= 1;
            self.counts[shard][k][self.inst.nodes[to].labels[c] as usize] += 1;
        }
        self.load[from] -= 1;
        self.load[to] += 1;
    }
}

/// A placement of `sol`'s members with no more Preferred excess, the same
/// members placed and the same running members kept; `None` when no move
/// lowers the excess. Past `deadline` it stops with what it has improved so
/// far (a pass is quadratic in the new members: the planner's time limit
/// must hold for it too).
pub(crate) fn improve(
    inst: &Instance,
    st: &Structure,
    sol: &Solution,
    deadline: Option<Instant>,
) -> Option<Solution> {
    let constraints: Vec<(usize, bool, u32)> = st
        .effective
        .iter()
        .map(|&c| {
            let k = &inst.constraints[c];
            (c, k.required(), k.max)
        })
        .collect();
    if constraints.iter().all(|&(_, required, _)| required) {
        return None;
    }
    let shards = inst.problem.shards as usize;
    let mut state = State {
        inst,
        counts: vec![
            constraints
                .iter()
                .map(|&(c, _, _)| vec![0; inst.constraints[c].values.len() + 1])
                .collect();
            shards
        ],
        constraints,
        load: vec![0; inst.nodes.len()],
    };
    let mut kept: BTreeMap<(usize, usize), u32> = BTreeMap::new();
    let mut movable: Vec<Member> = Vec::new();
    for (&shard, slots) in &sol.shards {
        let shard = shard as usize;
        for slot in slots {
            let n = slot.keep + slot.new;
            for (k, &(c, _, _)) in state.constraints.iter().enumerate() {
                state.counts[shard][k][inst.nodes[slot.node].labels[c] as usize] += n;
            }
            state.load[slot.node] += n;
            if slot.keep > 0 {
                kept.insert((shard, slot.node), slot.keep);
            }
            for _ in 0..slot.new {
                movable.push(Member {
                    shard,
                    node: slot.node,
                });
            }
        }
    }
    if movable.is_empty() || movable.len() > MAX_MOVABLE {
        return None;
    }
    // Nodes a member may move to: those that take new members.
    let open: Vec<usize> = (0..inst.nodes.len())
        .filter(|&n| st.usable[n] && inst.nodes[n].new)
        .collect();
    let mut changed = false;
    let late = || deadline.is_some_and(|d| Instant::now() >= d);
    'passes: for _ in 0..MAX_PASSES {
        let mut better = false;
        for i in 0..movable.len() {
            if i % 64 == 0 && late() {
                changed |= better;
                break 'passes;
            }
            // A move to a node with room left.
            let (s, u) = (movable[i].shard, movable[i].node);
            let room = open
                .iter()
                .copied()
                .filter(|&v| v != u && state.load[v] < inst.nodes[v].room)
                .filter_map(|v| state.delta(s, u, v).map(|d| (d, v)))
                .min();
            if let Some((d, v)) = room
                && d < 0
            {
                state.shift(s, u, v);
                movable[i].node = v;
                better = true;
                continue;
            }
            // A swap with a member of another shard.
            for j in i + 1..movable.len() {
                let (s, u) = (movable[i].shard, movable[i].node);
                let (t, v) = (movable[j].shard, movable[j].node);
                if s == t || u == v {
                    continue;
                }
                let Some(di) = state.delta(s, u, v) else {
                    continue;
                };
                let Some(dj) = state.delta(t, v, u) else {
                    continue;
                };
                if di + dj < 0 {
                    state.shift(s, u, v);
                    state.shift(t, v, u);
                    movable[i].node = v;
                    movable[j].node = u;
                    better = true;
                }
            }
        }
        if !better {
            break;
        }
        changed = true;
    }
    if !changed {
        return None;
    }
    let mut per: BTreeMap<(usize, usize), Slot> = BTreeMap::new();
    for (&(shard, node), &keep) in &kept {
        per.insert((shard, node), Slot { node, keep, new: 0 });
    }
    for m in &movable {
        per.entry((m.shard, m.node))
            .or_insert(Slot {
                node: m.node,
                keep: 0,
                new: 0,
            })
            .new += 1;
    }
    let mut out = Solution::default();
    for ((shard, _), slot) in per {
        out.shards.entry(shard as u32).or_default().push(slot);
    }
    for shard in sol.shards.keys() {
        out.shards.entry(*shard).or_default();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::network::{Fixed, relax};
    use crate::search::evaluate;

    /// 30 shards x 3 on 3 zones x 10 nodes of 3 pods (no room to spare), zone
    /// Required 1, a rack Preferred 1 crossing the zones (rack = node number
    /// mod 4).
    fn full() -> Problem {
        let nodes = (0..30)
            .map(|i| NodeInfo {
                name: format!("n{i:02}"),
                labels: BTreeMap::from([
                    (ZONE_KEY.to_string(), format!("z{}", i / 10)),
                    ("example.com/rack".to_string(), format!("k{}", i % 4)),
                    (HOSTNAME_KEY.to_string(), format!("n{i:02}")),
                ]),
                ready: true,
                unschedulable: false,
                taints: vec![],
                allocatable: Capacity {
                    cpu_millis: 0,
                    memory_bytes: 0,
                    pods: 3,
                },
                used_by_others: Capacity::default(),
            })
            .collect();
        let c = |k: &str, max, mode| SpreadConstraint {
            topology_key: k.into(),
            max_replicas: max,
            mode,
        };
        Problem {
            cluster: "t".into(),
            shards: 30,
            replicas: 2,
            constraints: vec![
                c("zone", 1, Mode::Required),
                c("example.com/rack", 1, Mode::Preferred),
            ],
            nodes,
            running: vec![],
            request: Resources::default(),
            node_selector: BTreeMap::new(),
            tolerations: vec![],
            primaries: BTreeMap::new(),
        }
    }

    #[test]
    fn swaps_lower_the_excess_of_a_relaxation_and_keep_every_member_and_node_load() {
        let p = full();
        let inst = Instance::new(&p);
        let st = Structure::analyse(&inst);
        let shards: Vec<u32> = (0..30).collect();
        // The zone chain's relaxation ignores the racks.
        let zone_chain = st
            .chains
            .iter()
            .position(|c| !c.constraints.contains(&1))
            .expect("a chain without the rack");
        let relaxed = relax(&inst, &st, zone_chain, &shards, &Fixed::new(), None).solution;
        let before = evaluate(&inst, &st, &relaxed, &shards).expect("zones hold");
        assert!(before.excess > 0, "the relaxation already keeps the racks");
        let after = improve(&inst, &st, &relaxed, None).expect("an improvement");
        let score = evaluate(&inst, &st, &after, &shards).expect("zones still hold");
        assert_eq!(score.unplaced, before.unplaced);
        assert_eq!(score.displaced, before.displaced);
        assert!(score.excess < before.excess);
        // Swaps and moves into room keep every node within its room.
        let mut load = vec![0u32; inst.nodes.len()];
        for slots in after.shards.values() {
            for s in slots {
                load[s.node] += s.keep + s.new;
            }
        }
        assert!(load.iter().zip(&inst.nodes).all(|(l, n)| *l <= n.room));
        // A placement no move improves is left alone.
        assert_eq!(improve(&inst, &st, &after, None), None);
        // Out of time before the first pair: nothing is changed.
        let past = Some(Instant::now());
        assert_eq!(improve(&inst, &st, &relaxed, past), None);
    }
}
