//! The problem in the planner's own terms: resolved constraints, nodes sorted by
//! name with their room and eligibility, label values interned as dense domain
//! labels, and the running members that may stay.
//!
//! Everything is sorted here once, so no later step depends on input order or
//! on hash iteration order: the same problem always gives the same plan.

use crate::eligibility::{Exclusion, assess};
use crate::model::{Mode, NodeInfo, Problem};
use crate::validate::resolve_key;
use std::collections::{BTreeMap, BTreeSet};

/// A spread constraint with its key resolved and its domains numbered.
#[derive(Debug, Clone)]
pub(crate) struct Constraint {
    pub key: String,
    pub max: u32,
    pub mode: Mode,
    /// The label values seen on nodes, sorted; label `i` is `values[i]`, and
    /// label `values.len()` is the domain of nodes without the key.
    pub values: Vec<String>,
}

impl Constraint {
    pub fn null_label(&self) -> u32 {
        self.values.len() as u32
    }

    /// The label value of a domain label (`None` for nodes without the key).
    pub fn value(&self, label: u32) -> Option<&str> {
        self.values.get(label as usize).map(String::as_str)
    }

    pub fn required(&self) -> bool {
        self.mode == Mode::Required
    }
}

/// A node as the planner sees it.
#[derive(Debug, Clone)]
pub(crate) struct Node<'a> {
    pub info: &'a NodeInfo,
    pub room: u32,
    pub new: bool,
    pub stay: bool,
    pub exclusion: Option<Exclusion>,
    /// Domain label per constraint.
    pub labels: Vec<u32>,
}

/// Where a running member runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunningAt {
    Node(usize),
    /// A node the problem does not list: the member cannot stay.
    Unknown(String),
}

#[derive(Debug)]
pub(crate) struct Instance<'a> {
    pub problem: &'a Problem,
    /// Members per shard (replicas + 1).
    pub members: u32,
    pub constraints: Vec<Constraint>,
    /// Sorted by name.
    pub nodes: Vec<Node<'a>>,
    /// `[shard][member]`: where that member runs now.
    pub running: Vec<Vec<Option<RunningAt>>>,
    /// `[shard]`: nodes where running members may stay, with those members.
    pub keeps: Vec<BTreeMap<usize, Vec<u32>>>,
    /// `[shard]`: the primary member.
    pub primary: Vec<u32>,
}

impl<'a> Instance<'a> {
    /// Builds the instance of a validated problem.
    #[expect(
        clippy::too_many_lines,
        reason = "written before the lint was on; split it when it next changes"
    )]
    pub fn new(problem: &'a Problem) -> Instance<'a> {
        let members = problem.replicas + 1;
        let total = u64::from(problem.shards) * u64::from(members);
        let constraints: Vec<Constraint> = problem
            .constraints
            .iter()
            .map(|c| {
                let key = resolve_key(&c.topology_key);
                let values: BTreeSet<&String> = problem
                    .nodes
                    .iter()
                    .filter_map(|n| n.labels.get(&key))
                    .collect();
                Constraint {
                    values: values.into_iter().cloned().collect(),
                    key,
                    max: c.max_replicas,
                    mode: c.mode,
                }
            })
            .collect();
        let required: Vec<String> = constraints
            .iter()
            .filter(|c| c.required())
            .map(|c| c.key.clone())
            .collect();
        let mut infos: Vec<&NodeInfo> = problem.nodes.iter().collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        let nodes: Vec<Node> = infos
            .into_iter()
            .map(|info| {
                let a = assess(info, problem, &required, total);
                let labels = constraints
                    .iter()
                    .map(|c| match info.labels.get(&c.key) {
                        Some(v) => c
                            .values
                            .binary_search(v)
                            .map_or(c.null_label(), |i| i as u32),
                        None => c.null_label(),
                    })
                    .collect();
                Node {
                    info,
                    room: a.room as u32,
                    new: a.new,
                    stay: a.stay,
                    exclusion: a.exclusion,
                    labels,
                }
            })
            .collect();
        let by_name: BTreeMap<&str, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.info.name.as_str(), i))
            .collect();

        let shards = problem.shards as usize;
        let mut running: Vec<Vec<Option<RunningAt>>> = vec![vec![None; members as usize]; shards];
        // A member reported on several nodes (a stale pod) keeps the report
        // where it can stay, then the first node by name.
        let mut reports: Vec<_> = problem
            .running
            .iter()
            .filter(|r| r.shard < problem.shards && r.member < members)
            .map(|r| {
                let at = by_name.get(r.node.as_str()).copied();
                let can_stay = at.is_some_and(|i| nodes[i].stay && nodes[i].room > 0);
                (r.shard, r.member, !can_stay, r.node.as_str(), at)
            })
            .collect();
        reports.sort();
        for (shard, member, _, name, at) in reports {
            let slot = &mut running[shard as usize][member as usize];
            if slot.is_none() {
                *slot = Some(match at {
                    Some(i) => RunningAt::Node(i),
                    None => RunningAt::Unknown(name.to_string()),
                });
            }
        }
        let keeps = running
            .iter()
            .map(|shard| {
                let mut keep: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
                for (m, at) in shard.iter().enumerate() {
                    if let Some(RunningAt::Node(i)) = at
                        && nodes[*i].stay
                        && nodes[*i].room > 0
                    {
                        keep.entry(*i).or_default().push(m as u32);
                    }
                }
                keep
            })
            .collect();
        let primary = (0..problem.shards)
            .map(|s| {
                problem
                    .primaries
                    .get(&s)
                    .copied()
                    .filter(|&m| m < members)
                    .unwrap_or(0)
            })
            .collect();
        Instance {
            problem,
            members,
            constraints,
            nodes,
            running,
            keeps,
            primary,
        }
    }

    /// Running members of `shards` (displacement counts against these).
    pub fn running_count(&self, shards: &[u32]) -> u64 {
        shards
            .iter()
            .map(|&s| {
                self.running[s as usize]
                    .iter()
                    .filter(|r| r.is_some())
                    .count() as u64
            })
            .sum()
    }
}
