//! The flow network of one planning problem, and reading a placement back out
//! of its flow.
//!
//! ```text
//! source -> shard unit (cap members x shards in the unit)
//!        -> chain domains, coarsest first (Required: cap maxReplicas;
//!           Preferred: cap maxReplicas at no cost, plus an overflow arc
//!           costing one excess per member)
//!        -> pool of each atom below the finest domain (new members)
//!           or straight to a node where a running member stays (one stay reward)
//! pool   -> node (its new-member nodes)
//! node   -> sink (cap room, split into arcs of rising balance cost)
//! ```
//!
//! Two aggregations keep the network small without losing exactness:
//!
//! * Pools. Nodes of one atom (see `structure`) are alike for every
//!   constraint, so all shards share one pool vertex per atom instead of one
//!   arc per (shard, node). Any split of a pool's flow onto its nodes is valid.
//! * Shard units. Shards with no member that could stay are interchangeable:
//!   they form one unit whose capacities are multiplied by their number. The
//!   unit's flow is dealt to its shards round-robin in depth-first order of the
//!   domains, so every shard gets the floor or ceiling of its share of every
//!   domain. That respects every scaled cap (Required and the shard size), and
//!   when a Preferred domain overflows every shard is already at its cap, so the
//!   shards' excesses add up to the unit's: the split is exact.
//!
//! Shards fixed by the search ([`Fixed`]) get at most the given members per
//! cell instead of the chain, with the bottom constraints below each cell.

use crate::flow::{Cost, Graph, UNBOUNDED};
use crate::instance::Instance;
use crate::structure::Structure;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Shards whose members per cell are decided by the search: (cell, at most members).
pub(crate) type Fixed = BTreeMap<u32, Vec<(usize, u32)>>;

/// Members of one shard on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub node: usize,
    /// Running members that stay.
    pub keep: u32,
    /// Members that come new (or move here).
    pub new: u32,
}

/// A placement: per shard, its slots sorted by node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Solution {
    pub shards: BTreeMap<u32, Vec<Slot>>,
}

/// The flow's answer: the members placed, the flow's cost and the placement.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub placed: u64,
    pub cost: Cost,
    pub solution: Solution,
}

/// Node-to-sink arcs per node: the first members cost 0, 1, 2, ... in balance;
/// from this many on, one more costs the same (a tie-breaker need not be finer).
const BALANCE_STEPS: u32 = 16;

/// Balance weight of one more member on a node, against one more step of an
/// atom's fill: spreading over nodes comes first, over atoms (zones) second.
const NODE_BALANCE: i64 = 64;

/// An atom's new-member room is cut into this many steps of rising balance
/// cost, so that equal node loads are spread over zones in proportion to room.
const ATOM_STEPS: u64 = 16;

enum Unit {
    /// Shards planned through the chain; more than one only when none has a
    /// member that could stay.
    Free(Vec<u32>),
    Fixed(u32),
}

/// Keep arcs of `shard` grouped by atom: (node, members that may stay there).
fn keeps_by_atom(
    inst: &Instance,
    st: &Structure,
    shard: u32,
) -> BTreeMap<usize, Vec<(usize, i64)>> {
    let mut out: BTreeMap<usize, Vec<(usize, i64)>> = BTreeMap::new();
    for (&node, members) in &inst.keeps[shard as usize] {
        if let Some(atom) = st.atom_of[node] {
            let k = (members.len() as i64).min(i64::from(inst.nodes[node].room));
            out.entry(atom).or_default().push((node, k));
        }
    }
    out
}

/// Builds one shard's tree of domain vertices under `root` over `atoms` (in
/// depth-first order of `levels`), with caps scaled by `mult`, and connects
/// each atom to its pool and to the nodes where the shard's members may stay.
#[allow(clippy::too_many_arguments)]
fn shard_tree(
    g: &mut Graph,
    inst: &Instance,
    st: &Structure,
    root: usize,
    levels: &[usize],
    atoms: &[usize],
    mult: i64,
    keeps: &BTreeMap<usize, Vec<(usize, i64)>>,
    pool_v: &[usize],
    node_v: &[usize],
    mut on_leaf: impl FnMut(usize, usize),
    mut on_keep: impl FnMut(usize, usize),
) {
    let used: Vec<usize> = atoms
        .iter()
        .copied()
        .filter(|&a| pool_v[a] != usize::MAX || keeps.contains_key(&a))
        .collect();
    let mut stack: Vec<(u32, usize)> = Vec::new();
    for (i, &atom) in used.iter().enumerate() {
        let here = keeps.get(&atom);
        let pool = pool_v[atom];
        let labels = &st.atoms[atom].labels;
        let common = stack
            .iter()
            .zip(levels)
            .take_while(|(have, k)| have.0 == labels[**k])
            .count();
        stack.truncate(common);
        // An atom alone in its finest domain, with nothing staying, needs no
        // vertex of its own: the finest cap goes straight onto the pool arc
        // (this keeps node-level constraints at one arc per shard and node).
        let last = levels.last().copied();
        let alone = last.is_some_and(|k| {
            common < levels.len()
                && used
                    .get(i + 1)
                    .is_none_or(|&next| st.atoms[next].labels[k] != labels[k])
        });
        let direct = alone && here.is_none() && pool != usize::MAX;
        let upto = if direct {
            levels.len() - 1
        } else {
            levels.len()
        };
        for &k in levels.iter().take(upto).skip(common) {
            let parent = stack.last().map_or(root, |x| x.1);
            let v = g.add_vertex();
            let c = &inst.constraints[k];
            g.add_arc(parent, v, i64::from(c.max) * mult, Cost::ZERO);
            if !c.required() {
                g.add_arc(parent, v, UNBOUNDED, Cost::EXCESS);
            }
            stack.push((labels[k], v));
        }
        if direct && let Some(k) = last {
            let parent = stack.last().map_or(root, |x| x.1);
            let c = &inst.constraints[k];
            on_leaf(
                atom,
                g.add_arc(parent, pool, i64::from(c.max) * mult, Cost::ZERO),
            );
            if !c.required() {
                on_leaf(atom, g.add_arc(parent, pool, UNBOUNDED, Cost::EXCESS));
            }
            continue;
        }
        let leaf = stack.last().map_or(root, |x| x.1);
        if pool != usize::MAX {
            on_leaf(atom, g.add_arc(leaf, pool, UNBOUNDED, Cost::ZERO));
        }
        for &(node, k) in here.into_iter().flatten() {
            on_keep(node, g.add_arc(leaf, node_v[node], k, Cost::STAY));
        }
    }
}

/// Solves flow relaxation `chain` of `st` for `shards`: the chain's constraints
/// for free shards; for fixed ones, at most the given members per cell and the
/// bottom constraints below it. Constraints outside the chain are ignored here
/// (the search enforces them). With `limit`, the flow places at most that many
/// members (the cheapest way to place exactly that many, when it can).
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub(crate) fn relax(
    inst: &Instance,
    st: &Structure,
    chain: usize,
    shards: &[u32],
    fixed: &Fixed,
    limit: Option<u64>,
) -> Outcome {
    let mut g = Graph::default();
    let s = g.add_vertex();
    let t = g.add_vertex();
    // Successive shortest paths reach every flow value at its least cost, so
    // capping the source gives the cheapest flow of that value.
    let origin = match limit {
        Some(l) => {
            let o = g.add_vertex();
            g.add_arc(o, s, l as i64, Cost::ZERO);
            o
        }
        None => s,
    };
    let m = i64::from(inst.members);

    let mut node_v = vec![usize::MAX; inst.nodes.len()];
    for (i, node) in inst.nodes.iter().enumerate() {
        if !st.usable[i] {
            continue;
        }
        let v = g.add_vertex();
        node_v[i] = v;
        let steps = node.room.min(BALANCE_STEPS);
        for j in 0..steps {
            let cap = if j + 1 == steps { node.room - j } else { 1 };
            g.add_arc(
                v,
                t,
                i64::from(cap),
                Cost::balance(i64::from(j) * NODE_BALANCE),
            );
        }
    }
    let mut pool_v = vec![usize::MAX; st.atoms.len()];
    let mut pool_arcs: Vec<(usize, usize, usize)> = Vec::new();
    for (a, atom) in st.atoms.iter().enumerate() {
        if atom.new_nodes.is_empty() {
            continue;
        }
        // Leaves feed `entry`; `entry -> p` carries the atom's fill cost.
        let entry = g.add_vertex();
        let p = g.add_vertex();
        pool_v[a] = entry;
        let room: u64 = atom
            .new_nodes
            .iter()
            .map(|&i| u64::from(inst.nodes[i].room))
            .sum();
        let step = room.div_ceil(ATOM_STEPS).max(1);
        let mut left = room;
        let mut k = 0;
        while left > 0 {
            let cap = step.min(left);
            g.add_arc(entry, p, cap as i64, Cost::balance(k));
            left -= cap;
            k += 1;
        }
        for &i in &atom.new_nodes {
            let arc = g.add_arc(p, node_v[i], i64::from(inst.nodes[i].room), Cost::ZERO);
            pool_arcs.push((a, i, arc));
        }
    }

    let mut units: Vec<Unit> = Vec::new();
    let mut interchangeable: Vec<u32> = Vec::new();
    for &sh in shards {
        if fixed.contains_key(&sh) {
            units.push(Unit::Fixed(sh));
        } else if inst.keeps[sh as usize].is_empty() {
            interchangeable.push(sh);
        } else {
            units.push(Unit::Free(vec![sh]));
        }
    }
    if !interchangeable.is_empty() {
        units.push(Unit::Free(interchangeable));
    }

    // (unit, atom, arc) into a pool, in depth-first order per unit.
    let mut leaf_arcs: Vec<(usize, usize, usize)> = Vec::new();
    // (shard, node, arc) where running members stay.
    let mut keep_arcs: Vec<(u32, usize, usize)> = Vec::new();
    let chain = &st.chains[chain];
    for (ui, unit) in units.iter().enumerate() {
        match unit {
            Unit::Free(list) => {
                let mult = list.len() as i64;
                let u = g.add_vertex();
                g.add_arc(s, u, mult * m, Cost::ZERO);
                let keeps = match list.as_slice() {
                    [one] => keeps_by_atom(inst, st, *one),
                    _ => BTreeMap::new(),
                };
                shard_tree(
                    &mut g,
                    inst,
                    st,
                    u,
                    &chain.constraints,
                    &chain.atom_order,
                    mult,
                    &keeps,
                    &pool_v,
                    &node_v,
                    |atom, arc| leaf_arcs.push((ui, atom, arc)),
                    |node, arc| keep_arcs.push((list[0], node, arc)),
                );
            }
            Unit::Fixed(sh) => {
                let u = g.add_vertex();
                g.add_arc(s, u, m, Cost::ZERO);
                let keeps = keeps_by_atom(inst, st, *sh);
                for &(c, y) in fixed.get(sh).into_iter().flatten() {
                    if y == 0 {
                        continue;
                    }
                    let v = g.add_vertex();
                    g.add_arc(u, v, i64::from(y), Cost::ZERO);
                    shard_tree(
                        &mut g,
                        inst,
                        st,
                        v,
                        &chain.bottom,
                        &st.cells[c].atoms,
                        1,
                        &keeps,
                        &pool_v,
                        &node_v,
                        |atom, arc| leaf_arcs.push((ui, atom, arc)),
                        |node, arc| keep_arcs.push((*sh, node, arc)),
                    );
                }
            }
        }
    }

    let (placed, cost) = g.min_cost_max_flow(origin, t);

    // New members per (atom, shard), dealing interchangeable units round-robin.
    let mut new_in: BTreeMap<usize, BTreeMap<u32, u32>> = BTreeMap::new();
    let mut dealt = vec![0usize; units.len()];
    for &(ui, atom, a) in &leaf_arcs {
        let f = g.flow(a);
        if f <= 0 {
            continue;
        }
        let cell = new_in.entry(atom).or_default();
        match &units[ui] {
            Unit::Free(list) if list.len() > 1 => {
                for _ in 0..f {
                    let sh = list[dealt[ui] % list.len()];
                    dealt[ui] += 1;
                    *cell.entry(sh).or_default() += 1;
                }
            }
            Unit::Free(list) => *cell.entry(list[0]).or_default() += f as u32,
            Unit::Fixed(sh) => *cell.entry(*sh).or_default() += f as u32,
        }
    }

    let mut slots: BTreeMap<u32, BTreeMap<usize, Slot>> =
        shards.iter().map(|&sh| (sh, BTreeMap::new())).collect();
    for &(sh, node, a) in &keep_arcs {
        let f = g.flow(a) as u32;
        if f > 0
            && let Some(per_node) = slots.get_mut(&sh)
        {
            per_node
                .entry(node)
                .or_insert(Slot {
                    node,
                    keep: 0,
                    new: 0,
                })
                .keep += f;
        }
    }
    let mut quota: BTreeMap<usize, Vec<(usize, u32)>> = BTreeMap::new();
    for &(c, node, a) in &pool_arcs {
        let f = g.flow(a) as u32;
        if f > 0 {
            quota.entry(c).or_default().push((node, f));
        }
    }
    for (c, demands) in &new_in {
        let nodes = quota.remove(c).unwrap_or_default();
        spread_over_nodes(demands, nodes, &mut slots, inst.members as usize);
    }

    Outcome {
        placed: placed.max(0) as u64,
        cost,
        solution: Solution {
            shards: slots
                .into_iter()
                .map(|(sh, per_node)| (sh, per_node.into_values().collect()))
                .collect(),
        },
    }
}

/// Splits one pool's flow onto its nodes: each member goes to the node with the
/// most quota left that does not hold its shard yet (only nicety; nothing below
/// an atom constrains), so a shard's members land on distinct nodes when they can.
fn spread_over_nodes(
    demands: &BTreeMap<u32, u32>,
    nodes: Vec<(usize, u32)>,
    slots: &mut BTreeMap<u32, BTreeMap<usize, Slot>>,
    members: usize,
) {
    let mut heap: BinaryHeap<(u32, Reverse<usize>)> =
        nodes.into_iter().map(|(n, q)| (q, Reverse(n))).collect();
    for (&sh, &count) in demands {
        let Some(per_node) = slots.get_mut(&sh) else {
            continue;
        };
        for _ in 0..count {
            let mut skipped = Vec::new();
            let mut chosen = None;
            while let Some(top) = heap.pop() {
                if per_node.contains_key(&top.1.0) && skipped.len() <= members {
                    skipped.push(top);
                } else {
                    chosen = Some(top);
                    break;
                }
            }
            if chosen.is_none() && !skipped.is_empty() {
                chosen = Some(skipped.remove(0));
            }
            heap.extend(skipped);
            let Some((q, Reverse(node))) = chosen else {
                // Flow conservation makes the quotas match the demands.
                return;
            };
            per_node
                .entry(node)
                .or_insert(Slot {
                    node,
                    keep: 0,
                    new: 0,
                })
                .new += 1;
            if q > 1 {
                heap.push((q - 1, Reverse(node)));
            }
        }
    }
}
