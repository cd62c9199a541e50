//! The exact optimum: the flow alone when the effective constraints nest, a
//! branch and bound over per-shard cell counts when some cross the chain.
//!
//! The flow relaxation drops the crossing constraints, so its optimum bounds
//! every placement below a search node. A search node ends when its bound is no
//! better than the best placement found, or when the relaxation's own placement
//! keeps the crossing constraints (then it is optimal there). Otherwise the
//! first shard that breaks one is branched on: every count vector over the
//! cells that keeps all Required constraints, best-looking first. Fixed shards
//! keep their exact counts in the relaxation, so the search is complete and
//! stops at depth = shards at worst.

use crate::instance::Instance;
use crate::network::{Fixed, Outcome, Slot, Solution, relax};
use crate::structure::Structure;
use std::collections::BTreeMap;

/// The objective, smaller is better: members left unplaced, Preferred excess,
/// running members displaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Score {
    pub unplaced: u64,
    pub excess: u64,
    pub displaced: u64,
}

/// How one shard's placement fares against the constraints.
struct ShardCheck {
    /// A Required constraint is broken.
    broken: bool,
    /// Preferred excess over every constraint.
    excess: u64,
    /// A constraint outside the chain is broken or exceeded.
    off_chain: bool,
}

fn check_shard(inst: &Instance, st: &Structure, slots: &[Slot]) -> ShardCheck {
    let mut out = ShardCheck {
        broken: false,
        excess: 0,
        off_chain: false,
    };
    for (c, k) in inst.constraints.iter().enumerate() {
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for slot in slots {
            *counts.entry(inst.nodes[slot.node].labels[c]).or_default() += slot.keep + slot.new;
        }
        let over: u64 = counts
            .values()
            .map(|&n| u64::from(n.saturating_sub(k.max)))
            .sum();
        if over > 0 {
            if k.required() {
                out.broken = true;
            } else {
                out.excess += over;
            }
            if st.dropped.contains(&c) {
                out.off_chain = true;
            }
        }
    }
    out
}

/// The exact score of a placement, or `None` when it breaks a Required constraint.
pub(crate) fn evaluate(
    inst: &Instance,
    st: &Structure,
    sol: &Solution,
    shards: &[u32],
) -> Option<Score> {
    let mut score = Score {
        unplaced: shards.len() as u64 * u64::from(inst.members),
        excess: 0,
        displaced: inst.running_count(shards),
    };
    for &sh in shards {
        let Some(slots) = sol.shards.get(&sh) else {
            continue;
        };
        let check = check_shard(inst, st, slots);
        if check.broken {
            return None;
        }
        score.excess += check.excess;
        for slot in slots {
            score.unplaced -= u64::from(slot.keep + slot.new);
            score.displaced -= u64::from(slot.keep);
        }
    }
    Some(score)
}

/// The Preferred excess of per-cell counts.
fn cell_excess(inst: &Instance, st: &Structure, counts: &[(usize, u32)]) -> u64 {
    let mut total = 0;
    for &c in &st.effective {
        let k = &inst.constraints[c];
        if k.required() {
            continue;
        }
        let mut per: BTreeMap<u32, u32> = BTreeMap::new();
        for &(cell, n) in counts {
            *per.entry(st.cells[cell].labels[c]).or_default() += n;
        }
        total += per
            .values()
            .map(|&n| u64::from(n.saturating_sub(k.max)))
            .sum::<u64>();
    }
    total
}

struct Search<'a, 'p> {
    inst: &'a Instance<'p>,
    st: &'a Structure,
    shards: &'a [u32],
    members: u64,
    running: u64,
    root: Score,
    best: Option<(Score, Solution)>,
}

impl Search<'_, '_> {
    fn bound(&self, o: &Outcome, fixed: &Fixed) -> Score {
        let fixed_excess: u64 = fixed
            .values()
            .map(|y| cell_excess(self.inst, self.st, y))
            .sum();
        Score {
            unplaced: self.members - o.placed,
            excess: o.cost.excess.max(0) as u64 + fixed_excess,
            displaced: self.running.saturating_sub((-o.cost.stay).max(0) as u64),
        }
    }

    fn done(&self) -> bool {
        self.best.as_ref().is_some_and(|(b, _)| *b <= self.root)
    }

    fn explore(&mut self, fixed: &mut Fixed, outcome: Outcome) {
        let bound = self.bound(&outcome, fixed);
        if self.best.as_ref().is_some_and(|(b, _)| *b <= bound) {
            return;
        }
        if let Some(score) = evaluate(self.inst, self.st, &outcome.solution, self.shards) {
            if self.best.as_ref().is_none_or(|(b, _)| score < *b) {
                self.best = Some((score, outcome.solution.clone()));
            }
            if score <= bound {
                return;
            }
        }
        let Some(shard) = self.shards.iter().copied().find(|sh| {
            !fixed.contains_key(sh)
                && outcome
                    .solution
                    .shards
                    .get(sh)
                    .is_some_and(|slots| check_shard(self.inst, self.st, slots).off_chain)
        }) else {
            return;
        };
        let current = outcome
            .solution
            .shards
            .get(&shard)
            .cloned()
            .unwrap_or_default();
        for y in self.configs(shard, &current) {
            fixed.insert(shard, y);
            let child = relax(self.inst, self.st, self.shards, fixed);
            self.explore(fixed, child);
            fixed.remove(&shard);
            if self.done() {
                return;
            }
        }
    }

    /// Every per-cell count vector of `shard` that keeps all Required
    /// constraints, most members and least excess first, then nearest to the
    /// relaxation's placement of the shard.
    fn configs(&self, shard: u32, current: &[Slot]) -> Vec<Vec<(usize, u32)>> {
        let (inst, st) = (self.inst, self.st);
        let m = inst.members;
        let keeps = &inst.keeps[shard as usize];
        let mut capacity: Vec<(usize, u32)> = Vec::new();
        for (c, cell) in st.cells.iter().enumerate() {
            let mut cap: u64 = cell.new_room;
            for &node in &cell.nodes {
                let n = &inst.nodes[node];
                if !n.new
                    && let Some(members) = keeps.get(&node)
                {
                    cap += (members.len() as u64).min(u64::from(n.room));
                }
            }
            let cap = cap.min(u64::from(m)) as u32;
            if cap > 0 {
                capacity.push((c, cap));
            }
        }
        let required: Vec<usize> = st
            .effective
            .iter()
            .copied()
            .filter(|&c| inst.constraints[c].required())
            .collect();
        let mut counts: Vec<Vec<u32>> = required
            .iter()
            .map(|&c| vec![0; inst.constraints[c].values.len() + 1])
            .collect();
        let mut out = Vec::new();
        let mut y = Vec::new();
        enumerate(
            inst,
            st,
            &required,
            &capacity,
            0,
            m,
            &mut counts,
            &mut y,
            &mut out,
        );

        let mut now: BTreeMap<usize, u32> = BTreeMap::new();
        for slot in current {
            if let Some(c) = st.cell_of[slot.node] {
                *now.entry(c).or_default() += slot.keep + slot.new;
            }
        }
        let mut keyed: Vec<_> = out
            .into_iter()
            .map(|y| {
                let total: u32 = y.iter().map(|p| p.1).sum();
                let excess = cell_excess(inst, st, &y);
                let mut distance = 0u32;
                let mut seen = now.clone();
                for &(c, n) in &y {
                    let had = seen.remove(&c).unwrap_or(0);
                    distance += n.abs_diff(had);
                }
                distance += seen.values().sum::<u32>();
                ((std::cmp::Reverse(total), excess, distance), y)
            })
            .collect();
        keyed.sort();
        keyed.into_iter().map(|(_, y)| y).collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn enumerate(
    inst: &Instance,
    st: &Structure,
    required: &[usize],
    capacity: &[(usize, u32)],
    at: usize,
    left: u32,
    counts: &mut [Vec<u32>],
    y: &mut Vec<(usize, u32)>,
    out: &mut Vec<Vec<(usize, u32)>>,
) {
    let Some(&(cell, cap)) = capacity.get(at) else {
        out.push(y.clone());
        return;
    };
    // None here first, then one more at a time while every Required cap holds.
    enumerate(inst, st, required, capacity, at + 1, left, counts, y, out);
    let labels = &st.cells[cell].labels;
    let mut placed = 0;
    while placed < cap.min(left) {
        let fits = required
            .iter()
            .enumerate()
            .all(|(r, &c)| counts[r][labels[c] as usize] < inst.constraints[c].max);
        if !fits {
            break;
        }
        placed += 1;
        for (r, &c) in required.iter().enumerate() {
            counts[r][labels[c] as usize] += 1;
        }
        y.push((cell, placed));
        enumerate(
            inst,
            st,
            required,
            capacity,
            at + 1,
            left - placed,
            counts,
            y,
            out,
        );
        y.pop();
    }
    for (r, &c) in required.iter().enumerate() {
        counts[r][labels[c] as usize] -= placed;
    }
}

/// The optimal placement of `shards` (the lexicographic objective of
/// [`Score`]; ties broken by the flow's load balance).
pub(crate) fn solve(inst: &Instance, st: &Structure, shards: &[u32]) -> Solution {
    let mut fixed = Fixed::new();
    let root = relax(inst, st, shards, &fixed);
    if st.dropped.is_empty() {
        return root.solution;
    }
    let mut search = Search {
        inst,
        st,
        shards,
        members: shards.len() as u64 * u64::from(inst.members),
        running: inst.running_count(shards),
        root: Score::default(),
        best: None,
    };
    search.root = search.bound(&root, &fixed);
    search.explore(&mut fixed, root);
    search.best.map(|(_, s)| s).unwrap_or_default()
}
