//! The shape of the constraints over the nodes that can hold a member: which
//! constraints can ever bind, which of them nest (and so fit one flow network),
//! and the cells, the groups of nodes no constraint tells apart.
//!
//! A constraint cannot bind when its maxReplicas is at least the shard size, or
//! when each of its domains lies inside a domain of a Required constraint with a
//! maxReplicas no larger (node Required 1 under zone Required 1). Dropping those
//! is what lets region > zone > node collapse to a small network.

use crate::instance::Instance;
use std::collections::BTreeMap;

/// A group of usable nodes that share the domain of every effective constraint.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    /// Domain labels of the chain constraints, coarsest first.
    pub path: Vec<u32>,
    /// Domain label per constraint index (meaningful for effective constraints).
    pub labels: Vec<u32>,
    pub nodes: Vec<usize>,
    /// The nodes that can take new members.
    pub new_nodes: Vec<usize>,
    /// Room on `new_nodes`.
    pub new_room: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Structure {
    /// Per node: it has room and can take a new member or keep a running one.
    pub usable: Vec<bool>,
    /// Constraint indices that can bind.
    pub effective: Vec<usize>,
    /// Effective constraints that nest, coarsest first.
    pub chain: Vec<usize>,
    /// Effective constraints that cross the chain (solved by search).
    pub dropped: Vec<usize>,
    /// Sorted by (path, other labels): a depth-first order of the chain's domains.
    pub cells: Vec<Cell>,
    pub cell_of: Vec<Option<usize>>,
    /// Per constraint: how many domains the usable nodes form.
    pub domain_count: Vec<usize>,
}

impl Structure {
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
        let domain_count: Vec<usize> = (0..c_count)
            .map(|c| {
                let mut labels: Vec<u32> = nodes.iter().map(|&i| inst.nodes[i].labels[c]).collect();
                labels.sort_unstable();
                labels.dedup();
                labels.len()
            })
            .collect();
        // `a` refines `b`: every domain of `a` lies in one domain of `b`.
        let refines = |a: usize, b: usize| {
            let mut map = vec![u32::MAX; inst.constraints[a].values.len() + 1];
            nodes.iter().all(|&i| {
                let (la, lb) = (inst.nodes[i].labels[a], inst.nodes[i].labels[b]);
                let slot = &mut map[la as usize];
                if *slot == u32::MAX {
                    *slot = lb;
                }
                *slot == lb
            })
        };
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
        let mut order = effective.clone();
        order.sort_by_key(|&i| (!c[i].required(), domain_count[i], i));
        let mut chain: Vec<usize> = Vec::new();
        let mut dropped: Vec<usize> = Vec::new();
        for i in order {
            if chain.iter().all(|&a| refines(a, i) || refines(i, a)) {
                chain.push(i);
            } else {
                dropped.push(i);
            }
        }
        chain.sort_by_key(|&i| (domain_count[i], !c[i].required(), i));
        dropped.sort_unstable();
        effective.sort_unstable();

        let mut groups: BTreeMap<(Vec<u32>, Vec<u32>), Vec<usize>> = BTreeMap::new();
        for &i in &nodes {
            let labels = &inst.nodes[i].labels;
            let path: Vec<u32> = chain.iter().map(|&k| labels[k]).collect();
            let rest: Vec<u32> = dropped.iter().map(|&k| labels[k]).collect();
            groups.entry((path, rest)).or_default().push(i);
        }
        let mut cell_of = vec![None; n];
        let cells: Vec<Cell> = groups
            .into_iter()
            .enumerate()
            .map(|(id, ((path, _), members))| {
                for &i in &members {
                    cell_of[i] = Some(id);
                }
                let new_nodes: Vec<usize> = members
                    .iter()
                    .copied()
                    .filter(|&i| inst.nodes[i].new && inst.nodes[i].room > 0)
                    .collect();
                Cell {
                    path,
                    labels: inst.nodes[members[0]].labels.clone(),
                    new_room: new_nodes
                        .iter()
                        .map(|&i| u64::from(inst.nodes[i].room))
                        .sum(),
                    new_nodes,
                    nodes: members,
                }
            })
            .collect();
        Structure {
            usable,
            effective,
            chain,
            dropped,
            cells,
            cell_of,
            domain_count,
        }
    }
}
