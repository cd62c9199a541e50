//! The exact optimum: the flow alone when the effective constraints nest, a
//! branch and bound over per-shard cell counts when some cross.
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
    /// A crossing constraint outside `chain` is broken or exceeded.
    off_chain: bool,
}

fn check_shard(inst: &Instance, st: &Structure, chain: &[usize], slots: &[Slot]) -> ShardCheck {
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
            if st.crossing.contains(&c) && !chain.contains(&c) {
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
        let check = check_shard(inst, st, &[], slots);
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

/// The Preferred excess of per-cell counts in the constraints a cell decides
/// (all but the bottom ones).
fn cell_excess(inst: &Instance, st: &Structure, counts: &[(usize, u32)]) -> u64 {
    let mut total = 0;
    for &c in &st.effective {
        let k = &inst.constraints[c];
        if k.required() || st.bottom.contains(&c) {
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
    root: Score,
    best: Option<(Score, Solution)>,
    /// Search nodes left before the search settles for the best found.
    budget: Option<u64>,
    /// The budget ran out before the best was proven optimal.
    cut_short: bool,
}

impl Search<'_, '_> {
    fn pruned(&self, bound: Score) -> bool {
        self.best.as_ref().is_some_and(|(b, _)| *b <= bound)
    }

    /// Every relaxation of the search node `fixed` over `shards`, with their
    /// bound: the relaxations count disjoint parts of the excess, so for the
    /// most members any placement can place, their excesses add up (and each
    /// one's displacement bound holds). `None` as soon as the bound prunes
    /// the node.
    fn relax_all(&self, shards: &[u32], fixed: &Fixed) -> Option<(Score, Vec<Outcome>)> {
        let members = shards.len() as u64 * u64::from(self.inst.members);
        let running = self.inst.running_count(shards);
        let fixed_excess: u64 = fixed
            .iter()
            .filter(|(sh, _)| shards.contains(sh))
            .map(|(_, y)| cell_excess(self.inst, self.st, y))
            .sum();
        let score = |o: &Outcome| Score {
            unplaced: members - o.placed.min(members),
            excess: o.cost.excess.max(0) as u64,
            displaced: running.saturating_sub((-o.cost.stay).max(0) as u64),
        };
        let mut outcomes: Vec<Outcome> = Vec::new();
        for c in 0..self.st.chains.len() {
            let o = relax(self.inst, self.st, c, shards, fixed, None);
            let b = score(&o);
            if self.pruned(Score {
                excess: b.excess + fixed_excess,
                ..b
            }) {
                return None;
            }
            outcomes.push(o);
        }
        // No placement places more than the fewest any relaxation places; a
        // relaxation that places more is asked for the cheapest flow of that
        // value instead, so that all bound the same placements.
        let placed = outcomes.iter().map(|o| o.placed).min().unwrap_or(0);
        for (c, o) in outcomes.iter_mut().enumerate() {
            if o.placed > placed {
                *o = relax(self.inst, self.st, c, shards, fixed, Some(placed));
            }
        }
        let each: Vec<Score> = outcomes.iter().map(score).collect();
        let bound = Score {
            unplaced: members - placed.min(members),
            excess: fixed_excess + each.iter().map(|b| b.excess).sum::<u64>(),
            displaced: each.iter().map(|b| b.displaced).max().unwrap_or(0),
        };
        if self.pruned(bound) {
            return None;
        }
        Some((bound, outcomes))
    }

    fn done(&self) -> bool {
        self.best.as_ref().is_some_and(|(b, _)| *b <= self.root)
    }

    fn explore(&mut self, fixed: &mut Fixed, bound: Score, outcomes: Vec<Outcome>) {
        for o in &outcomes {
            if let Some(score) = evaluate(self.inst, self.st, &o.solution, self.shards)
                && self.best.as_ref().is_none_or(|(b, _)| score < *b)
            {
                self.best = Some((score, o.solution.clone()));
            }
        }
        if self.pruned(bound) {
            return;
        }
        let branch = outcomes.iter().enumerate().find_map(|(c, o)| {
            let chain = &self.st.chains[c].constraints;
            self.shards.iter().copied().find_map(|sh| {
                let slots = o.solution.shards.get(&sh)?;
                let off = !fixed.contains_key(&sh)
                    && check_shard(self.inst, self.st, chain, slots).off_chain;
                off.then(|| (sh, slots.clone()))
            })
        });
        let Some((shard, current)) = branch else {
            return;
        };
        // A cheap bound per child: the shard's own members and excess plus the
        // bound of the other shards planned as if this one took no room.
        let others: Vec<u32> = self
            .shards
            .iter()
            .copied()
            .filter(|&s| s != shard)
            .collect();
        let Some((rest, _)) = self.relax_all(&others, fixed) else {
            // Even without this shard nothing beats the best: neither can it.
            return;
        };
        let m = u64::from(self.inst.members);
        for y in self.configs(shard, &current) {
            let own: u64 = y.iter().map(|p| u64::from(p.1)).sum();
            let quick = Score {
                unplaced: rest.unplaced + (m - own.min(m)),
                excess: rest.excess + cell_excess(self.inst, self.st, &y),
                displaced: rest.displaced,
            };
            if self.pruned(quick) {
                continue;
            }
            fixed.insert(shard, y);
            if let Some((b, children)) = self.relax_all(self.shards, fixed) {
                self.explore(fixed, b, children);
            }
            fixed.remove(&shard);
            if self.done() {
                return;
            }
            if let Some(left) = self.budget.as_mut() {
                *left = left.saturating_sub(1);
                // Out of budget: stop once something valid is in hand.
                if *left == 0 && self.best.is_some() {
                    self.cut_short = true;
                    return;
                }
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
            let mut cap: u64 = 0;
            for &node in &cell.nodes {
                let n = &inst.nodes[node];
                if n.new {
                    cap += u64::from(n.room);
                } else if let Some(members) = keeps.get(&node) {
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
            .filter(|&c| inst.constraints[c].required() && !st.bottom.contains(&c))
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
/// [`Score`]; ties broken by the flow's load balance), and whether it is proven
/// optimal: always, unless `budget` (search nodes) runs out first when keys
/// cross, and then the best placement found.
pub(crate) fn solve(
    inst: &Instance,
    st: &Structure,
    shards: &[u32],
    budget: Option<u64>,
) -> (Solution, bool) {
    let mut fixed = Fixed::new();
    if st.nested() {
        return (relax(inst, st, 0, shards, &fixed, None).solution, true);
    }
    let mut search = Search {
        inst,
        st,
        shards,
        root: Score::default(),
        best: None,
        budget,
        cut_short: false,
    };
    if let Some((bound, roots)) = search.relax_all(shards, &fixed) {
        search.root = bound;
        search.explore(&mut fixed, bound, roots);
    }
    let optimal = !search.cut_short;
    (search.best.map(|(_, s)| s).unwrap_or_default(), optimal)
}
