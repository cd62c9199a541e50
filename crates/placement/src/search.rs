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
//!
//! The search may be bounded (see [`Limits`]): by search nodes, or by a
//! deadline, for callers that must answer in time. It stops at a limit only
//! once it holds a placement that keeps every Required constraint, and then
//! says the placement is not proven optimal.

use crate::improve::improve;
use crate::instance::Instance;
use crate::network::{Fixed, Outcome, Slot, Solution, relax};
use crate::structure::Structure;
use std::collections::BTreeMap;
use std::time::Instant;

/// How far the branch and bound may go before it settles for the best
/// placement found. The default: no limit, always proven optimal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Search nodes.
    pub nodes: Option<u64>,
    /// Wall-clock time: checked after every search node, so it is overrun by
    /// at most one node's relaxations.
    pub deadline: Option<Instant>,
}

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
    /// When the search settles for the best found.
    deadline: Option<Instant>,
    /// A limit ran out before the best was proven optimal.
    cut_short: bool,
    /// Up to this many children are sorted before they are explored.
    sorted_limit: usize,
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

    /// Takes `sol` as the best placement when it is better, after the local
    /// search has lowered its excess where it can.
    fn offer(&mut self, sol: &Solution) {
        let Some(score) = evaluate(self.inst, self.st, sol, self.shards) else {
            return;
        };
        if self.best.as_ref().is_some_and(|(b, _)| *b <= score) {
            return;
        }
        // At the root's bound nothing can do better: no local search.
        if score <= self.root {
            self.best = Some((score, sol.clone()));
            return;
        }
        let improved = improve(self.inst, self.st, sol, self.root, self.deadline)
            .and_then(|s| evaluate(self.inst, self.st, &s, self.shards).map(|score| (score, s)))
            .filter(|(better, _)| *better < score);
        self.best = Some(improved.unwrap_or_else(|| (score, sol.clone())));
    }

    fn done(&self) -> bool {
        self.best.as_ref().is_some_and(|(b, _)| *b <= self.root)
    }

    fn explore(&mut self, fixed: &mut Fixed, bound: Score, outcomes: Vec<Outcome>) {
        for o in &outcomes {
            self.offer(&o.solution);
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
        // Children best-looking first when there are not too many to sort;
        // otherwise walked as they come, so memory stays small.
        let space = ConfigSpace::new(self.inst, self.st, shard);
        let mut all: Vec<Vec<(usize, u32)>> = Vec::new();
        let complete = space.visit(&mut |y| {
            all.push(y.to_vec());
            all.len() < self.sorted_limit
        });
        if complete {
            for y in self.order(all, &current) {
                if !self.child(fixed, shard, y, rest) {
                    return;
                }
            }
        } else {
            space.visit(&mut |y| self.child(fixed, shard, y.to_vec(), rest));
        }
    }

    /// Explores the child where `shard` has the members `y` per cell; false
    /// when the search should stop.
    fn child(&mut self, fixed: &mut Fixed, shard: u32, y: Vec<(usize, u32)>, rest: Score) -> bool {
        // Checked before the child's relaxations too: they are the costly part.
        if self.settle_if(self.out_of_time()) {
            return false;
        }
        let m = u64::from(self.inst.members);
        let own: u64 = y.iter().map(|p| u64::from(p.1)).sum();
        // A cheap bound: the shard's own members and excess plus the bound of
        // the other shards planned as if this one took no room.
        let quick = Score {
            unplaced: rest.unplaced + (m - own.min(m)),
            excess: rest.excess + cell_excess(self.inst, self.st, &y),
            displaced: rest.displaced,
        };
        if self.pruned(quick) {
            return true;
        }
        fixed.insert(shard, y);
        if let Some((b, children)) = self.relax_all(self.shards, fixed) {
            self.explore(fixed, b, children);
        }
        fixed.remove(&shard);
        if self.done() {
            return false;
        }
        let out_of_nodes = self.budget.as_mut().is_some_and(|left| {
            *left = left.saturating_sub(1);
            *left == 0
        });
        !self.settle_if(out_of_nodes || self.out_of_time())
    }

    fn out_of_time(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Out of budget: the search stops once something valid is in hand (and
    /// goes on until then). True when it stops.
    fn settle_if(&mut self, out: bool) -> bool {
        if out && self.best.is_some() {
            self.cut_short = true;
        }
        self.cut_short
    }

    /// Most members and least excess first, then nearest to the relaxation's
    /// placement of the shard (`current`).
    fn order(&self, configs: Vec<Vec<(usize, u32)>>, current: &[Slot]) -> Vec<Vec<(usize, u32)>> {
        let (inst, st) = (self.inst, self.st);
        let mut now: BTreeMap<usize, u32> = BTreeMap::new();
        for slot in current {
            if let Some(c) = st.cell_of[slot.node] {
                *now.entry(c).or_default() += slot.keep + slot.new;
            }
        }
        let mut keyed: Vec<_> = configs
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

/// Receives count vectors; returns false to stop.
type Visitor<'f> = dyn FnMut(&[(usize, u32)]) -> bool + 'f;

/// Up to this many children are sorted before they are explored.
const SORTED_CONFIGS: usize = 50_000;

/// The per-cell count vectors of one shard that keep every Required constraint
/// the cells decide (the bottom ones are the flow's) and fit the cells' room.
struct ConfigSpace<'a, 'p> {
    inst: &'a Instance<'p>,
    st: &'a Structure,
    required: Vec<usize>,
    /// (cell, the most members of the shard it can hold).
    capacity: Vec<(usize, u32)>,
}

impl<'a, 'p> ConfigSpace<'a, 'p> {
    fn new(inst: &'a Instance<'p>, st: &'a Structure, shard: u32) -> Self {
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
        let required = st
            .effective
            .iter()
            .copied()
            .filter(|&c| inst.constraints[c].required() && !st.bottom.contains(&c))
            .collect();
        ConfigSpace {
            inst,
            st,
            required,
            capacity,
        }
    }

    /// Calls `f` with every vector, fuller cells first, until it returns
    /// false; returns whether it saw them all.
    fn visit(&self, f: &mut Visitor) -> bool {
        let mut counts: Vec<Vec<u32>> = self
            .required
            .iter()
            .map(|&c| vec![0; self.inst.constraints[c].values.len() + 1])
            .collect();
        let mut y = Vec::new();
        self.walk(0, self.inst.members, &mut counts, &mut y, f)
    }

    fn walk(
        &self,
        at: usize,
        left: u32,
        counts: &mut [Vec<u32>],
        y: &mut Vec<(usize, u32)>,
        f: &mut Visitor,
    ) -> bool {
        let Some(&(cell, cap)) = self.capacity.get(at) else {
            return f(y);
        };
        let labels = &self.st.cells[cell].labels;
        // The most this cell can take under every Required cap.
        let mut most = cap.min(left);
        for (r, &c) in self.required.iter().enumerate() {
            let max = self.inst.constraints[c].max;
            most = most.min(max.saturating_sub(counts[r][labels[c] as usize]));
        }
        for n in (0..=most).rev() {
            for (r, &c) in self.required.iter().enumerate() {
                counts[r][labels[c] as usize] += n;
            }
            if n > 0 {
                y.push((cell, n));
            }
            let go_on = self.walk(at + 1, left - n, counts, y, f);
            if n > 0 {
                y.pop();
            }
            for (r, &c) in self.required.iter().enumerate() {
                counts[r][labels[c] as usize] -= n;
            }
            if !go_on {
                return false;
            }
        }
        true
    }
}

/// The optimal placement of `shards` (the lexicographic objective of
/// [`Score`]; ties broken by the flow's load balance), and whether it is proven
/// optimal: always, unless a limit runs out first when keys cross, and then
/// the best placement found.
pub(crate) fn solve(
    inst: &Instance,
    st: &Structure,
    shards: &[u32],
    limits: Limits,
) -> (Solution, bool) {
    let (solution, bound) = solve_sorting(inst, st, shards, limits, SORTED_CONFIGS);
    (solution, bound.is_none())
}

/// [`solve`], with the score of the placement and the lower bound the search
/// proved when a limit cut it short (`None`: the placement is optimal).
pub(crate) fn solve_with_bound(
    inst: &Instance,
    st: &Structure,
    shards: &[u32],
    limits: Limits,
) -> (Solution, Option<(Score, Score)>) {
    solve_sorting(inst, st, shards, limits, SORTED_CONFIGS)
}

/// [`solve`], sorting at most `sorted_limit` children per search node.
fn solve_sorting(
    inst: &Instance,
    st: &Structure,
    shards: &[u32],
    limits: Limits,
    sorted_limit: usize,
) -> (Solution, Option<(Score, Score)>) {
    let mut fixed = Fixed::new();
    if st.nested() {
        return (relax(inst, st, 0, shards, &fixed, None).solution, None);
    }
    let mut search = Search {
        inst,
        st,
        shards,
        root: Score::default(),
        best: None,
        budget: limits.nodes,
        deadline: limits.deadline,
        cut_short: false,
        sorted_limit,
    };
    if let Some((bound, roots)) = search.relax_all(shards, &fixed) {
        search.root = bound;
        search.explore(&mut fixed, bound, roots);
    }
    match search.best {
        Some((score, best)) => {
            let gap = search.cut_short.then_some((score, search.root));
            (best, gap)
        }
        None => (Solution::default(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use std::collections::BTreeMap;

    /// 3 shards of 3 on 12 nodes where zones and racks cross; tight room.
    fn crossing() -> Problem {
        let nodes = (0..12)
            .map(|i| NodeInfo {
                name: format!("n{i:02}"),
                labels: BTreeMap::from([
                    (ZONE_KEY.to_string(), format!("z{}", i % 3)),
                    ("example.com/rack".to_string(), format!("k{}", (i / 3) % 4)),
                    (HOSTNAME_KEY.to_string(), format!("n{i:02}")),
                ]),
                ready: i != 4,
                unschedulable: false,
                taints: vec![],
                allocatable: Capacity {
                    cpu_millis: 0,
                    memory_bytes: 0,
                    pods: 1 + (i % 2) as u64,
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
            shards: 3,
            replicas: 2,
            constraints: vec![
                c("zone", 1, Mode::Preferred),
                c("example.com/rack", 1, Mode::Required),
                c("node", 1, Mode::Preferred),
            ],
            nodes,
            running: vec![RunningMember {
                shard: 1,
                member: 0,
                node: "n00".into(),
            }],
            request: Resources::default(),
            node_selector: BTreeMap::new(),
            tolerations: vec![],
            primaries: BTreeMap::new(),
        }
    }

    #[test]
    fn children_walked_unsorted_reach_the_same_optimum() {
        let p = crossing();
        let inst = Instance::new(&p);
        let st = Structure::analyse(&inst);
        assert!(!st.nested());
        let shards = [0, 1, 2];
        let none = Limits::default();
        let (sorted, gap) = solve_sorting(&inst, &st, &shards, none, SORTED_CONFIGS);
        let (walked, gap2) = solve_sorting(&inst, &st, &shards, none, 1);
        assert!(gap.is_none() && gap2.is_none());
        let a = evaluate(&inst, &st, &sorted, &shards);
        assert!(a.is_some());
        assert_eq!(a, evaluate(&inst, &st, &walked, &shards));
    }
}
