//! From per-node member counts to named members: who stays, who moves, which
//! position the primary takes, what is exceeded and what is left unplaced.
//!
//! The counts are already optimal; nothing here changes how many members sit
//! on any node, so the tie-breakers below cannot worsen the objective. Running
//! members that stay keep their node (the primary first when not all can);
//! primaries that must be placed anew take the position whose domains hold the
//! fewest primaries so far, widest key first, so that losing one region, zone
//! or node costs as few primaries as possible.

use crate::explain::Explainer;
use crate::instance::{Instance, RunningAt};
use crate::model::{Mode, PlacedMember, Plan, UnplacedMember, Violation};
use crate::network::Solution;
use crate::search::Limits;
use crate::structure::Structure;
use std::collections::{BTreeMap, BTreeSet};

/// Where each member ends up: `[shard][member]` -> node.
pub(crate) type Placement = Vec<Vec<Option<usize>>>;

/// Names the members of `sol`, choosing primaries' positions.
pub(crate) fn name_members(inst: &Instance, st: &Structure, sol: &Solution) -> Placement {
    let shards = inst.problem.shards as usize;
    let m = inst.members as usize;
    let mut node_of: Placement = vec![vec![None; m]; shards];
    let mut open: Vec<Vec<usize>> = vec![Vec::new(); shards];
    for (s, placed) in node_of.iter_mut().enumerate() {
        let primary = inst.primary[s];
        for slot in sol.shards.get(&(s as u32)).into_iter().flatten() {
            let mut stayers = inst.keeps[s].get(&slot.node).cloned().unwrap_or_default();
            stayers.sort_by_key(|&i| (i != primary, i));
            for &i in stayers.iter().take(slot.keep as usize) {
                placed[i as usize] = Some(slot.node);
            }
            open[s].extend(std::iter::repeat_n(slot.node, slot.new as usize));
        }
        // A member placed anew on the node it runs on is really staying.
        for (i, at) in inst.running[s].iter().enumerate() {
            if placed[i].is_none()
                && let Some(RunningAt::Node(n)) = at
                && let Some(j) = open[s].iter().position(|x| x == n)
            {
                placed[i] = Some(open[s].remove(j));
            }
        }
    }

    // Primaries: widest key first, then the node itself.
    let mut counts = PrimaryCounts::new(inst, st);
    for (s, placed) in node_of.iter().enumerate() {
        if let Some(n) = placed[inst.primary[s] as usize] {
            counts.add(inst, n);
        }
    }
    for s in 0..shards {
        let p = inst.primary[s] as usize;
        if node_of[s][p].is_some() || open[s].is_empty() {
            continue;
        }
        let mut best = 0;
        let mut best_load = None;
        for (j, &node) in open[s].iter().enumerate() {
            let load = counts.load(inst, node);
            if best_load.as_ref().is_none_or(|b| load < *b) {
                best = j;
                best_load = Some(load);
            }
        }
        let node = open[s].remove(best);
        node_of[s][p] = Some(node);
        counts.add(inst, node);
    }
    for (s, placed) in node_of.iter_mut().enumerate() {
        for slot in placed.iter_mut() {
            if slot.is_none() && !open[s].is_empty() {
                *slot = Some(open[s].remove(0));
            }
        }
    }
    node_of
}

/// Primaries counted per domain of every constraint key (widest first) and per node.
struct PrimaryCounts {
    /// A constraint index per distinct key, widest key first.
    keys: Vec<usize>,
    per_domain: Vec<BTreeMap<u32, u32>>,
    per_node: Vec<u32>,
}

impl PrimaryCounts {
    fn new(inst: &Instance, st: &Structure) -> PrimaryCounts {
        let mut keys: Vec<(usize, &str, usize)> = Vec::new();
        let mut seen = BTreeSet::new();
        for (c, k) in inst.constraints.iter().enumerate() {
            if seen.insert(k.key.as_str()) {
                keys.push((st.domain_count[c], k.key.as_str(), c));
            }
        }
        keys.sort_unstable();
        PrimaryCounts {
            per_domain: vec![BTreeMap::new(); keys.len()],
            keys: keys.into_iter().map(|k| k.2).collect(),
            per_node: vec![0; inst.nodes.len()],
        }
    }

    fn add(&mut self, inst: &Instance, node: usize) {
        for (k, &c) in self.keys.iter().enumerate() {
            *self.per_domain[k]
                .entry(inst.nodes[node].labels[c])
                .or_default() += 1;
        }
        self.per_node[node] += 1;
    }

    /// Primaries already in each domain of `node`, widest key first, then on it.
    fn load(&self, inst: &Instance, node: usize) -> (Vec<u32>, u32) {
        let per_key = self
            .keys
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                self.per_domain[k]
                    .get(&inst.nodes[node].labels[c])
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        (per_key, self.per_node[node])
    }
}

/// The Plan of a named placement.
pub(crate) fn build_plan(
    inst: &Instance,
    st: &Structure,
    node_of: &Placement,
    limits: Limits,
) -> Plan {
    let mut keys: Vec<&str> = inst.constraints.iter().map(|c| c.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut members = Vec::new();
    let mut unplaced = Vec::new();
    let mut violations = Vec::new();
    let mut explainer = Explainer::new(inst, st, limits);
    for (s, placed) in node_of.iter().enumerate() {
        let shard = s as u32;
        let missing = placed.iter().filter(|n| n.is_none()).count();
        let reason = (missing > 0).then(|| explainer.explain(shard));
        for (i, at) in placed.iter().enumerate() {
            let member = i as u32;
            match at {
                Some(n) => {
                    let node = &inst.nodes[*n];
                    let moved = match &inst.running[s][i] {
                        Some(RunningAt::Node(was)) => was != n,
                        Some(RunningAt::Unknown(_)) => true,
                        None => false,
                    };
                    members.push(PlacedMember {
                        shard,
                        member,
                        node: node.info.name.clone(),
                        primary: member == inst.primary[s],
                        moved,
                        domains: keys
                            .iter()
                            .map(|k| (k.to_string(), node.info.labels.get(*k).cloned()))
                            .collect(),
                    });
                }
                None => unplaced.push(UnplacedMember {
                    shard,
                    member,
                    reason: reason.clone().unwrap_or_default(),
                }),
            }
        }
        for (c, k) in inst.constraints.iter().enumerate() {
            if k.mode != Mode::Preferred {
                continue;
            }
            let mut per: BTreeMap<u32, u32> = BTreeMap::new();
            for n in placed.iter().flatten() {
                *per.entry(inst.nodes[*n].labels[c]).or_default() += 1;
            }
            for (label, count) in per {
                if count > k.max {
                    violations.push(Violation {
                        shard,
                        topology_key: k.key.clone(),
                        domain: k.value(label).map(str::to_string),
                        members: count,
                        max_replicas: k.max,
                        mode: Mode::Preferred,
                    });
                }
            }
        }
    }
    Plan {
        cluster: inst.problem.cluster.clone(),
        feasible: unplaced.is_empty(),
        members,
        unplaced,
        violations,
    }
}
