//! The shape of the constraints over the nodes that can hold a member: which
//! constraints can ever bind, which of them nest, and the groups of nodes that
//! no constraint (or no search decision) tells apart.
//!
//! A constraint cannot bind when its maxReplicas is at least the shard size, or
//! when each of its domains lies inside a domain of a Required constraint with a
//! maxReplicas no larger (node Required 1 under zone Required 1). Dropping those
//! is what lets region > zone > node collapse to a small network.
//!
//! The effective constraints then split three ways:
//!
//! * crossing: nests with not every other one (zone and a rack that spans
//!   zones); only the search can enforce these together;
//! * bottom: nests with all and refines every crossing one (the node);
//! * top: nests with all and is coarser than some crossing one (a region that
//!   holds whole zones and racks).
//!
//! Every relaxation's chain is top + bottom + a nesting subset of the crossing
//! ones (see [`Chain`] for how they share the Preferred ones). The search decides a shard's members per *cell* (nodes alike in top
//! and crossing constraints); the bottom constraints stay in the flow below the
//! cell. Pools sit at *atoms* (nodes alike in every effective constraint).

use crate::instance::Instance;
use std::collections::BTreeMap;

/// A group of usable nodes that share the domain of every top and crossing
/// constraint: the unit of the search's decisions.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    /// Domain label per constraint index (meaningful for top and crossing ones).
    pub labels: Vec<u32>,
    pub nodes: Vec<usize>,
    /// The cell's atoms, sorted by their bottom constraints' labels.
    pub atoms: Vec<usize>,
}

/// A group of usable nodes that share the domain of every effective constraint.
#[derive(Debug, Clone)]
pub(crate) struct Atom {
    /// Domain label per constraint index (meaningful for effective ones).
    pub labels: Vec<u32>,
    /// The nodes that can take new members (with room).
    pub new_nodes: Vec<usize>,
}

/// One flow relaxation: a nesting set of effective constraints and the atoms
/// in depth-first order of its domains.
///
/// Each Preferred constraint is counted by exactly one relaxation (the top and
/// bottom ones by the first), so the relaxations' excesses add up to a bound
/// on the total excess; a relaxation leaves out the Preferred constraints it
/// does not count.
#[derive(Debug, Clone)]
pub(crate) struct Chain {
    /// Coarsest first.
    pub constraints: Vec<usize>,
    /// The bottom constraints it counts, coarsest first (for fixed shards).
    pub bottom: Vec<usize>,
    pub atom_order: Vec<usize>,
}

#[derive(Debug, Clone)]
pub(crate) struct Structure {
    /// Per node: it has room and can take a new member or keep a running one.
    pub usable: Vec<bool>,
    /// Constraint indices that can bind, ascending.
    pub effective: Vec<usize>,
    /// Effective constraints that do not nest with all others, ascending.
    pub crossing: Vec<usize>,
    /// Effective constraints below every crossing one, coarsest first.
    pub bottom: Vec<usize>,
    /// Relaxations; exactly one when nothing crosses (then the flow is exact).
    pub chains: Vec<Chain>,
    pub cells: Vec<Cell>,
    pub atoms: Vec<Atom>,
    pub cell_of: Vec<Option<usize>>,
    pub atom_of: Vec<Option<usize>>,
    /// Per constraint: how many domains the usable nodes form.
    pub domain_count: Vec<usize>,
}

impl Structure {
    #[expect(
        clippy::too_many_lines,
        reason = "written before the lint was on; split it when it next changes"
    )]
    pub fn analyse(inst: &Instance) -> Structure {
        let n = inst.nodes.len();
        let mut usable: Vec<bool> = inst.nodes.iter().map(|x| x.room > 0 && x.new).collect();
        for keeps in &inst.keeps {
            for &node in keeps.keys() {
                usable[node] = true;
            }
        }
        let nodes: Vec<usize> = (0..n).filter(|&i| usable[i]).collect();
        let c_count = inst.constraints.len();
        let label = |i: usize, c: usize| inst.nodes[i].labels[c];
        let domain_count: Vec<usize> = (0..c_count)
            .map(|c| {
                let mut labels: Vec<u32> = nodes.iter().map(|&i| label(i, c)).collect();
                labels.sort_unstable();
                labels.dedup();
                labels.len()
            })
            .collect();
        // `a` refines `b`: every domain of `a` lies in one domain of `b`.
        let refines = |a: usize, b: usize| {
            let mut map = vec![u32::MAX; inst.constraints[a].values.len() + 1];
            nodes.iter().all(|&i| {
                let slot = &mut map[label(i, a) as usize];
                if *slot == u32::MAX {
                    *slot = label(i, b);
                }
                *slot == label(i, b)
            })
        };
        let nests = |a: usize, b: usize| refines(a, b) || refines(b, a);
        let m = inst.members;
        let c = &inst.constraints;
        let mut candidates: Vec<usize> = (0..c_count).filter(|&i| c[i].max < m).collect();
        candidates.sort_by_key(|&i| (!c[i].required(), c[i].max, domain_count[i], i));
        let mut effective: Vec<usize> = Vec::new();
        for &i in &candidates {
            let redundant = effective
                .iter()
                .any(|&a| c[a].required() && c[a].max <= c[i].max && refines(i, a));
            if !redundant {
                effective.push(i);
            }
        }
        effective.sort_unstable();
        let coarse_first = |v: &mut Vec<usize>| {
            v.sort_by_key(|&i| (domain_count[i], !c[i].required(), i));
        };

        let crossing: Vec<usize> = effective
            .iter()
            .copied()
            .filter(|&a| effective.iter().any(|&b| !nests(a, b)))
            .collect();
        let universal: Vec<usize> = effective
            .iter()
            .copied()
            .filter(|a| !crossing.contains(a))
            .collect();
        let mut bottom: Vec<usize> = universal
            .iter()
            .copied()
            .filter(|&a| crossing.iter().all(|&x| refines(a, x)))
            .collect();
        coarse_first(&mut bottom);
        let top: Vec<usize> = universal
            .iter()
            .copied()
            .filter(|a| !bottom.contains(a))
            .collect();

        // Relaxations: each crossing constraint in turn starts a nesting subset
        // (Required ones first, so the first relaxation keeps the hard rules).
        let mut order = crossing.clone();
        order.sort_by_key(|&i| (!c[i].required(), domain_count[i], i));
        let mut subsets: Vec<Vec<usize>> = Vec::new();
        for &start in &order {
            let mut chosen = vec![start];
            for &x in &order {
                if x != start && chosen.iter().all(|&y| nests(x, y)) {
                    chosen.push(x);
                }
            }
            chosen.sort_unstable();
            if !subsets.contains(&chosen) {
                subsets.push(chosen);
            }
        }
        if subsets.is_empty() {
            subsets.push(Vec::new());
        }

        // Cells: alike in top and crossing constraints; atoms: alike in all.
        let cell_keys: Vec<usize> = top.iter().chain(&crossing).copied().collect();
        let mut groups: BTreeMap<Vec<u32>, BTreeMap<Vec<u32>, Vec<usize>>> = BTreeMap::new();
        for &i in &nodes {
            let key: Vec<u32> = cell_keys.iter().map(|&k| label(i, k)).collect();
            let below: Vec<u32> = bottom.iter().map(|&k| label(i, k)).collect();
            groups
                .entry(key)
                .or_default()
                .entry(below)
                .or_default()
                .push(i);
        }
        let mut cell_of = vec![None; n];
        let mut atom_of = vec![None; n];
        let mut cells = Vec::new();
        let mut atoms = Vec::new();
        for (cell_id, (_, parts)) in groups.into_iter().enumerate() {
            let mut cell = Cell {
                labels: Vec::new(),
                nodes: Vec::new(),
                atoms: Vec::new(),
            };
            for (_, members) in parts {
                let atom_id = atoms.len();
                for &i in &members {
                    cell_of[i] = Some(cell_id);
                    atom_of[i] = Some(atom_id);
                }
                atoms.push(Atom {
                    labels: inst.nodes[members[0]].labels.clone(),
                    new_nodes: members
                        .iter()
                        .copied()
                        .filter(|&i| inst.nodes[i].new && inst.nodes[i].room > 0)
                        .collect(),
                });
                cell.labels = inst.nodes[members[0]].labels.clone();
                cell.atoms.push(atom_id);
                cell.nodes.extend(members);
            }
            cells.push(cell);
        }

        let mut counted: Vec<bool> = vec![false; c_count];
        let chains = subsets
            .into_iter()
            .enumerate()
            .map(|(i, subset)| {
                // Required constraints always; a Preferred one in the first
                // relaxation that has it (top and bottom ones: the first).
                let mut keep = |k: usize| {
                    if c[k].required() {
                        return true;
                    }
                    let take = !counted[k] && (i == 0 || subset.contains(&k));
                    counted[k] |= take;
                    take
                };
                let mut constraints: Vec<usize> = Vec::new();
                let mut below: Vec<usize> = Vec::new();
                for &k in top.iter().chain(&subset) {
                    if keep(k) {
                        constraints.push(k);
                    }
                }
                for &k in &bottom {
                    if keep(k) {
                        constraints.push(k);
                        below.push(k);
                    }
                }
                coarse_first(&mut constraints);
                let mut atom_order: Vec<usize> = (0..atoms.len()).collect();
                atom_order.sort_by_key(|&a| {
                    let path: Vec<u32> = constraints.iter().map(|&k| atoms[a].labels[k]).collect();
                    (path, a)
                });
                Chain {
                    constraints,
                    bottom: below,
                    atom_order,
                }
            })
            .collect();
        Structure {
            usable,
            effective,
            crossing,
            bottom,
            chains,
            cells,
            atoms,
            cell_of,
            atom_of,
            domain_count,
        }
    }

    /// Whether the flow alone is exact (every effective constraint nests).
    pub fn nested(&self) -> bool {
        self.crossing.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use std::collections::BTreeMap;

    /// Nodes given as label lists; 2 pod slots each.
    fn problem(
        members: u32,
        nodes: &[&[(&str, &str)]],
        constraints: &[(&str, u32, Mode)],
    ) -> Problem {
        Problem {
            cluster: "t".into(),
            shards: 2,
            replicas: members - 1,
            constraints: constraints
                .iter()
                .map(|&(k, max, mode)| SpreadConstraint {
                    topology_key: k.into(),
                    max_replicas: max,
                    mode,
                })
                .collect(),
            nodes: nodes
                .iter()
                .enumerate()
                .map(|(i, labels)| NodeInfo {
                    name: format!("n{i}"),
                    labels: labels
                        .iter()
                        .map(|(k, v)| (crate::resolve_key(k), v.to_string()))
                        .chain([(HOSTNAME_KEY.to_string(), format!("n{i}"))])
                        .collect(),
                    ready: true,
                    unschedulable: false,
                    taints: vec![],
                    allocatable: Capacity {
                        cpu_millis: 0,
                        memory_bytes: 0,
                        pods: 2,
                    },
                    used_by_others: Capacity::default(),
                })
                .collect(),
            running: vec![],
            request: Resources::default(),
            node_selector: BTreeMap::new(),
            tolerations: vec![],
            primaries: BTreeMap::new(),
        }
    }

    fn keys(inst: &Instance, list: &[usize]) -> Vec<String> {
        list.iter()
            .map(|&c| inst.constraints[c].key.clone())
            .collect()
    }

    const GRID: [&[(&str, &str)]; 4] = [
        &[("region", "r1"), ("zone", "a"), ("example.com/rack", "x")],
        &[("region", "r1"), ("zone", "a"), ("example.com/rack", "y")],
        &[("region", "r1"), ("zone", "b"), ("example.com/rack", "x")],
        &[("region", "r1"), ("zone", "b"), ("example.com/rack", "y")],
    ];

    #[test]
    fn a_finer_required_cap_no_tighter_than_a_coarser_one_is_redundant() {
        use Mode::*;
        let p = problem(
            3,
            &GRID,
            &[
                ("zone", 1, Required),
                ("node", 1, Required),
                ("region", 1, Preferred),
            ],
        );
        let inst = Instance::new(&p);
        let st = Structure::analyse(&inst);
        assert_eq!(keys(&inst, &st.effective), [ZONE_KEY, REGION_KEY]);
        assert!(st.nested());
        // Region, then zone: the cells collapse to zones.
        assert_eq!(
            keys(&inst, &st.chains[0].constraints),
            [REGION_KEY, ZONE_KEY]
        );
        assert_eq!(st.atoms.len(), 2);
    }

    #[test]
    fn caps_of_a_whole_shard_never_bind() {
        let p = problem(
            2,
            &GRID,
            &[("zone", 2, Mode::Required), ("node", 3, Mode::Preferred)],
        );
        let inst = Instance::new(&p);
        let st = Structure::analyse(&inst);
        assert!(st.effective.is_empty());
        assert_eq!(st.atoms.len(), 1, "one pool for all nodes");
    }

    #[test]
    fn a_rack_across_zones_crosses_and_the_node_sits_below_both() {
        use Mode::*;
        let p = problem(
            3,
            &GRID,
            &[
                ("zone", 1, Preferred),
                ("example.com/rack", 2, Required),
                ("node", 1, Preferred),
            ],
        );
        let inst = Instance::new(&p);
        let st = Structure::analyse(&inst);
        assert!(!st.nested());
        assert_eq!(keys(&inst, &st.crossing), [ZONE_KEY, "example.com/rack"]);
        assert_eq!(keys(&inst, &st.bottom), [HOSTNAME_KEY]);
        // One relaxation per crossing key, the Required one first; each
        // Preferred constraint is counted once (the node's by the first).
        assert_eq!(st.chains.len(), 2);
        assert_eq!(
            keys(&inst, &st.chains[0].constraints),
            ["example.com/rack", HOSTNAME_KEY]
        );
        assert_eq!(keys(&inst, &st.chains[0].bottom), [HOSTNAME_KEY]);
        assert_eq!(keys(&inst, &st.chains[1].constraints), [ZONE_KEY]);
        assert_eq!(st.cells.len(), 4);
    }

    #[test]
    fn a_required_cap_of_one_makes_finer_preferred_caps_redundant() {
        use Mode::*;
        let p = problem(
            3,
            &GRID,
            &[("example.com/rack", 1, Required), ("node", 1, Preferred)],
        );
        let inst = Instance::new(&p);
        let st = Structure::analyse(&inst);
        assert_eq!(keys(&inst, &st.effective), ["example.com/rack"]);
    }

    #[test]
    fn the_same_partition_under_two_keys_nests() {
        use Mode::*;
        let nodes: [&[(&str, &str)]; 4] = [
            &[("zone", "a"), ("example.com/room", "1")],
            &[("zone", "a"), ("example.com/room", "1")],
            &[("zone", "b"), ("example.com/room", "2")],
            &[("zone", "b"), ("example.com/room", "2")],
        ];
        let p = problem(
            3,
            &nodes,
            &[
                ("zone", 2, Required),
                ("example.com/room", 1, Preferred),
                ("zone", 1, Preferred),
            ],
        );
        let st = Structure::analyse(&Instance::new(&p));
        assert!(st.nested());
        assert_eq!(st.effective.len(), 3);
    }
}
