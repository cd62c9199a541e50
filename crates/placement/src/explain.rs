//! Plain-word reasons for members that cannot be placed. The operator puts these
//! in status and Events, so each names the shard, the constraint (key, mode,
//! maxReplicas) or the lack of room, with the numbers a person needs to act.

use crate::instance::Instance;
use crate::search::{Limits, solve};
use crate::structure::Structure;
use std::collections::BTreeMap;

/// The nodes that could hold a member of `shard` if no other shard took room.
fn eligible(inst: &Instance, shard: u32) -> Vec<usize> {
    let keeps = &inst.keeps[shard as usize];
    (0..inst.nodes.len())
        .filter(|&i| {
            let n = &inst.nodes[i];
            n.room > 0 && (n.new || keeps.contains_key(&i))
        })
        .collect()
}

/// "9 nodes: 6 eligible, 3 NotReady".
fn summary(inst: &Instance, eligible: &[usize]) -> String {
    let mut why: BTreeMap<String, usize> = BTreeMap::new();
    for (i, n) in inst.nodes.iter().enumerate() {
        if eligible.binary_search(&i).is_ok() {
            continue;
        }
        let reason = n
            .exclusion
            .as_ref()
            .map_or_else(|| "without room".to_string(), |e| e.describe());
        *why.entry(reason).or_default() += 1;
    }
    let total = inst.nodes.len();
    let mut parts = vec![format!("{} eligible", eligible.len())];
    parts.extend(why.into_iter().map(|(r, c)| format!("{c} {r}")));
    let noun = if total == 1 { "node" } else { "nodes" };
    format!("{total} {noun}: {}", parts.join(", "))
}

/// Explains unplaced members, remembering what it solved: shards with nothing
/// running are alike, so one of them answers for all.
pub(crate) struct Explainer<'a, 'p> {
    inst: &'a Instance<'p>,
    st: &'a Structure,
    limits: Limits,
    fresh_alone: Option<u32>,
}

impl<'a, 'p> Explainer<'a, 'p> {
    pub fn new(inst: &'a Instance<'p>, st: &'a Structure, limits: Limits) -> Self {
        Explainer {
            inst,
            st,
            limits,
            fresh_alone: None,
        }
    }

    /// The most members `shard` could place if it were alone.
    fn alone(&mut self, shard: u32) -> u32 {
        let fresh = self.inst.keeps[shard as usize].is_empty();
        if fresh && let Some(n) = self.fresh_alone {
            return n;
        }
        let n = solve(self.inst, self.st, &[shard], self.limits)
            .0
            .shards
            .get(&shard)
            .map_or(0, |slots| slots.iter().map(|s| s.keep + s.new).sum());
        if fresh {
            self.fresh_alone = Some(n);
        }
        n
    }

    /// Why `shard` cannot place all its members.
    pub fn explain(&mut self, shard: u32) -> String {
        let inst = self.inst;
        let m = inst.members;
        let ok = eligible(inst, shard);
        let sum = summary(inst, &ok);
        if ok.is_empty() {
            return format!("shard {shard} has no eligible node ({sum})");
        }
        let room = |i: usize| u64::from(inst.nodes[i].room).min(u64::from(m));
        for (c, k) in inst.constraints.iter().enumerate() {
            if !k.required() || k.max >= m {
                continue;
            }
            let mut per: BTreeMap<u32, u64> = BTreeMap::new();
            for &i in &ok {
                *per.entry(inst.nodes[i].labels[c]).or_default() += room(i);
            }
            let most: u64 = per.values().map(|&r| r.min(u64::from(k.max))).sum();
            if most < u64::from(m) {
                let needed = m.div_ceil(k.max);
                let have = per.len();
                return if (have as u64) < u64::from(needed) {
                    format!(
                        "shard {shard} needs {needed} domains of {} (Required, maxReplicas {}) but only {have} have eligible nodes with room ({sum})",
                        k.key, k.max
                    )
                } else {
                    format!(
                        "shard {shard} can place only {most} of its {m} members under {} (Required, maxReplicas {}): its {have} domains with eligible nodes have too little room ({sum})",
                        k.key, k.max
                    )
                };
            }
        }
        let total: u64 = ok.iter().map(|&i| room(i)).sum();
        if total < u64::from(m) {
            return format!(
                "shard {shard}: the eligible nodes have room for only {total} of its {m} members ({sum})"
            );
        }
        let binding: Vec<String> = inst
            .constraints
            .iter()
            .filter(|k| k.required() && k.max < m)
            .map(|k| format!("{} maxReplicas {}", k.key, k.max))
            .collect();
        let alone = self.alone(shard);
        if alone < m {
            return format!(
                "shard {shard}: its Required constraints ({}) together allow only {alone} of its {m} members on the eligible nodes ({sum})",
                binding.join(", ")
            );
        }
        let within = if binding.is_empty() {
            String::new()
        } else {
            format!(
                " where its Required constraints allow ({})",
                binding.join(", ")
            )
        };
        format!(
            "shard {shard}: not enough room: other members of this cluster fill the eligible nodes{within} ({sum})"
        )
    }
}
