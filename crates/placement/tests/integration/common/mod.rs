//! Builders for planner tests and an exact brute-force reference solver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use placement::*;
use std::collections::BTreeMap;

pub mod family;

/// A problem with no nodes yet: `shards` x (`replicas` + 1) members, no requests.
pub fn problem(shards: u32, replicas: u32) -> Problem {
    Problem {
        cluster: "demo".into(),
        shards,
        replicas,
        constraints: vec![],
        nodes: vec![],
        running: vec![],
        request: Resources::default(),
        node_selector: BTreeMap::new(),
        tolerations: vec![],
        primaries: BTreeMap::new(),
    }
}

/// A Ready, schedulable node with `pods` pod slots and the given labels
/// (`kubernetes.io/hostname` is set to the name unless given).
pub fn node(name: &str, labels: &[(&str, &str)], pods: u64) -> NodeInfo {
    let mut l: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (resolve_key(k), v.to_string()))
        .collect();
    l.entry(HOSTNAME_KEY.into()).or_insert_with(|| name.into());
    NodeInfo {
        name: name.into(),
        labels: l,
        ready: true,
        unschedulable: false,
        taints: vec![],
        allocatable: Capacity {
            cpu_millis: 8000,
            memory_bytes: 32 << 30,
            pods,
        },
        used_by_others: Capacity::default(),
    }
}

/// A node in `zone` of `region`.
pub fn zoned(name: &str, region: &str, zone: &str, pods: u64) -> NodeInfo {
    node(name, &[("region", region), ("zone", zone)], pods)
}

pub fn constraint(key: &str, max: u32, mode: Mode) -> SpreadConstraint {
    SpreadConstraint {
        topology_key: key.into(),
        max_replicas: max,
        mode,
    }
}

pub fn running(shard: u32, member: u32, node: &str) -> RunningMember {
    RunningMember {
        shard,
        member,
        node: node.into(),
    }
}

pub fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect,
    }
}

pub fn toleration(
    key: Option<&str>,
    operator: TolerationOperator,
    value: Option<&str>,
    effect: Option<TaintEffect>,
) -> Toleration {
    Toleration {
        key: key.map(Into::into),
        operator,
        value: value.map(Into::into),
        effect,
    }
}

/// Where a member is in a plan: `Some(node)` or `None` when unplaced.
pub fn where_is(plan: &Plan, shard: u32, member: u32) -> Option<&str> {
    plan.members
        .iter()
        .find(|m| m.shard == shard && m.member == member)
        .map(|m| m.node.as_str())
}

/// The nodes of one shard's members, sorted.
pub fn shard_nodes(plan: &Plan, shard: u32) -> Vec<&str> {
    let mut v: Vec<&str> = plan
        .members
        .iter()
        .filter(|m| m.shard == shard)
        .map(|m| m.node.as_str())
        .collect();
    v.sort_unstable();
    v
}

// ---------------------------------------------------------------------------
// The reference: written from the semantics without sharing code with
// the planner (only the model types and `resolve_key`).

fn tol_matches(t: &Toleration, taint: &Taint) -> bool {
    if t.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    let key = t.key.clone().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match t.operator {
        TolerationOperator::Exists => true,
        TolerationOperator::Equal => {
            t.value.clone().unwrap_or_default() == taint.value.clone().unwrap_or_default()
        }
    }
}

/// Per node: (room, may take a new member, a running member may stay).
pub fn reference_nodes(p: &Problem) -> Vec<(u64, bool, bool)> {
    let required: Vec<String> = p
        .constraints
        .iter()
        .filter(|c| c.mode == Mode::Required)
        .map(|c| resolve_key(&c.topology_key))
        .collect();
    p.nodes
        .iter()
        .map(|n| {
            let mut room = n.allocatable.pods.saturating_sub(n.used_by_others.pods);
            let free_cpu = n
                .allocatable
                .cpu_millis
                .saturating_sub(n.used_by_others.cpu_millis);
            let free_mem = n
                .allocatable
                .memory_bytes
                .saturating_sub(n.used_by_others.memory_bytes);
            // A request of 0 (or none) does not limit.
            if let Some(r) = p.request.cpu_millis.and_then(|c| free_cpu.checked_div(c)) {
                room = room.min(r);
            }
            if let Some(r) = p.request.memory_bytes.and_then(|m| free_mem.checked_div(m)) {
                room = room.min(r);
            }
            let tolerated = |t: &Taint| p.tolerations.iter().any(|x| tol_matches(x, t));
            let selector = p
                .node_selector
                .iter()
                .all(|(k, v)| n.labels.get(k) == Some(v));
            let keys = required.iter().all(|k| n.labels.contains_key(k));
            let no_execute_ok = n
                .taints
                .iter()
                .all(|t| t.effect != TaintEffect::NoExecute || tolerated(t));
            let no_schedule_ok = n
                .taints
                .iter()
                .all(|t| t.effect != TaintEffect::NoSchedule || tolerated(t));
            let stay = n.ready && no_execute_ok && selector && keys;
            let new = stay && !n.unschedulable && no_schedule_ok;
            (room, new, stay)
        })
        .collect()
}

/// (placed, excess, displaced) of an assignment `[shard][member] -> node index`,
/// or None when it breaks eligibility, room or a Required constraint.
pub fn reference_score(
    p: &Problem,
    nodes: &[(u64, bool, bool)],
    at: &[Vec<Option<usize>>],
) -> Option<(u64, u64, u64)> {
    let index: BTreeMap<&str, usize> = p
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let runs: BTreeMap<(u32, u32), Option<usize>> = p
        .running
        .iter()
        .map(|r| ((r.shard, r.member), index.get(r.node.as_str()).copied()))
        .collect();
    let mut load = vec![0u64; p.nodes.len()];
    let (mut placed, mut excess, mut displaced) = (0, 0, 0);
    for (s, members) in at.iter().enumerate() {
        for (i, n) in members.iter().enumerate() {
            let was = runs.get(&(s as u32, i as u32)).copied();
            if let Some(n) = n {
                placed += 1;
                load[*n] += 1;
                let stays = was == Some(Some(*n));
                let ok = if stays { nodes[*n].2 } else { nodes[*n].1 };
                if !ok {
                    return None;
                }
                if was.is_some() && !stays {
                    displaced += 1;
                }
            } else if was.is_some() {
                displaced += 1;
            }
        }
        for c in &p.constraints {
            let key = resolve_key(&c.topology_key);
            let mut per: BTreeMap<Option<&String>, u32> = BTreeMap::new();
            for n in members.iter().flatten() {
                *per.entry(p.nodes[*n].labels.get(&key)).or_default() += 1;
            }
            for (_, count) in per {
                if count > c.max_replicas {
                    if c.mode == Mode::Required {
                        return None;
                    }
                    excess += u64::from(count - c.max_replicas);
                }
            }
        }
    }
    if load.iter().zip(nodes).any(|(l, n)| *l > n.0) {
        return None;
    }
    Some((placed, excess, displaced))
}

/// The best (placed, excess, displaced) over every assignment, by exhaustive
/// search (each member on any node or unplaced). For tiny problems only.
pub fn brute_force(p: &Problem) -> (u64, u64, u64) {
    let nodes = reference_nodes(p);
    let m = (p.replicas + 1) as usize;
    let mut at = vec![vec![None; m]; p.shards as usize];
    let mut best: Option<(u64, u64, u64)> = None;
    let mut load = vec![0u64; p.nodes.len()];
    fn rec(
        p: &Problem,
        nodes: &[(u64, bool, bool)],
        at: &mut Vec<Vec<Option<usize>>>,
        load: &mut Vec<u64>,
        k: usize,
        best: &mut Option<(u64, u64, u64)>,
    ) {
        let m = at[0].len();
        if k == at.len() * m {
            if let Some(score) = reference_score(p, nodes, at) {
                let better = match best {
                    None => true,
                    Some(b) => {
                        (std::cmp::Reverse(score.0), score.1, score.2)
                            < (std::cmp::Reverse(b.0), b.1, b.2)
                    }
                };
                if better {
                    *best = Some(score);
                }
            }
            return;
        }
        let (s, i) = (k / m, k % m);
        at[s][i] = None;
        rec(p, nodes, at, load, k + 1, best);
        for n in 0..nodes.len() {
            if load[n] < nodes[n].0 && nodes[n].2 {
                load[n] += 1;
                at[s][i] = Some(n);
                rec(p, nodes, at, load, k + 1, best);
                load[n] -= 1;
            }
        }
        at[s][i] = None;
    }
    rec(p, &nodes, &mut at, &mut load, 0, &mut best);
    best.unwrap()
}

/// The (placed, excess, displaced) of a plan, recomputed from its members, after
/// checking that the plan is well-formed: every member exactly once, only on
/// allowed nodes, no room exceeded, no Required constraint broken, `moved`,
/// `primary`, `domains`, `violations` and `feasible` consistent.
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub fn check_plan(p: &Problem, plan: &Plan) -> (u64, u64, u64) {
    let nodes = reference_nodes(p);
    let index: BTreeMap<&str, usize> = p
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let m = p.replicas + 1;
    let mut at = vec![vec![None; m as usize]; p.shards as usize];
    let mut seen = std::collections::BTreeSet::new();
    for x in &plan.members {
        assert!(
            seen.insert((x.shard, x.member)),
            "member s{}/m{} twice",
            x.shard,
            x.member
        );
        let n = *index.get(x.node.as_str()).expect("planned on a known node");
        at[x.shard as usize][x.member as usize] = Some(n);
        let primary = p
            .primaries
            .get(&x.shard)
            .copied()
            .filter(|&q| q < m)
            .unwrap_or(0);
        assert_eq!(
            x.primary,
            x.member == primary,
            "primary flag of s{}/m{}",
            x.shard,
            x.member
        );
        let was = p
            .running
            .iter()
            .find(|r| r.shard == x.shard && r.member == x.member);
        assert_eq!(
            x.moved,
            was.is_some_and(|r| r.node != x.node),
            "moved flag of s{}/m{}",
            x.shard,
            x.member
        );
        let keys: std::collections::BTreeSet<String> = p
            .constraints
            .iter()
            .map(|c| resolve_key(&c.topology_key))
            .collect();
        assert_eq!(
            x.domains
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>(),
            keys
        );
        for (k, v) in &x.domains {
            assert_eq!(v.as_ref(), p.nodes[n].labels.get(k));
        }
    }
    for u in &plan.unplaced {
        assert!(
            seen.insert((u.shard, u.member)),
            "member s{}/m{} twice",
            u.shard,
            u.member
        );
        assert!(
            u.reason.contains(&format!("shard {}", u.shard)),
            "reason names the shard: {}",
            u.reason
        );
    }
    assert_eq!(
        seen.len() as u64,
        u64::from(p.shards) * u64::from(m),
        "every member appears"
    );
    assert_eq!(plan.feasible, plan.unplaced.is_empty());
    // Violations: exactly the Preferred excesses.
    let mut expected = Vec::new();
    for (s, members) in at.iter().enumerate() {
        for c in &p.constraints {
            if c.mode != Mode::Preferred {
                continue;
            }
            let key = resolve_key(&c.topology_key);
            let mut per: BTreeMap<Option<String>, u32> = BTreeMap::new();
            for n in members.iter().flatten() {
                *per.entry(p.nodes[*n].labels.get(&key).cloned())
                    .or_default() += 1;
            }
            for (d, count) in per {
                if count > c.max_replicas {
                    expected.push((s as u32, key.clone(), d, count, c.max_replicas));
                }
            }
        }
    }
    let mut got: Vec<_> = plan
        .violations
        .iter()
        .map(|v| {
            assert_eq!(v.mode, Mode::Preferred);
            (
                v.shard,
                v.topology_key.clone(),
                v.domain.clone(),
                v.members,
                v.max_replicas,
            )
        })
        .collect();
    got.sort();
    expected.sort();
    assert_eq!(got, expected, "violations");
    reference_score(p, &nodes, &at)
        .expect("the plan keeps room, eligibility and Required constraints")
}

/// One shard's members per node with its (placed, excess, stays).
type ShardVector = (Vec<u32>, u64, u64, u64);

/// The same optimum as [`brute_force`], found by enumerating each shard's
/// member count per node instead of each member's node (members of a shard
/// are alike except where they run: a node keeps min(count, running there)
/// of them). Reaches a few shards on several nodes.
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub fn brute_force_by_counts(p: &Problem) -> (u64, u64, u64) {
    let nodes = reference_nodes(p);
    let m = p.replicas + 1;
    let index: BTreeMap<&str, usize> = p
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    // running[s][n]: members of shard s running on node n.
    let mut runs = vec![vec![0u32; p.nodes.len()]; p.shards as usize];
    let mut running_total = 0u64;
    let mut seen = std::collections::BTreeSet::new();
    for r in &p.running {
        if r.shard < p.shards && r.member < m && seen.insert((r.shard, r.member)) {
            running_total += 1;
            if let Some(&n) = index.get(r.node.as_str()) {
                runs[r.shard as usize][n] += 1;
            }
        }
    }
    let keys: Vec<(Vec<Option<String>>, u32, Mode)> = p
        .constraints
        .iter()
        .map(|c| {
            let key = resolve_key(&c.topology_key);
            (
                p.nodes
                    .iter()
                    .map(|n| n.labels.get(&key).cloned())
                    .collect(),
                c.max_replicas,
                c.mode,
            )
        })
        .collect();
    struct Ctx<'a> {
        nodes: &'a [(u64, bool, bool)],
        runs: &'a [Vec<u32>],
        keys: &'a [(Vec<Option<String>>, u32, Mode)],
        m: u32,
        best: Option<(std::cmp::Reverse<u64>, u64, u64)>,
        running_total: u64,
    }
    // Per shard: all count vectors with (placed, excess, stays) that keep
    // Required constraints and eligibility, ignoring other shards' room use.
    fn shard_vectors(ctx: &Ctx, s: usize) -> Vec<ShardVector> {
        let n = ctx.nodes.len();
        let mut out = Vec::new();
        let mut x = vec![0u32; n];
        fn rec(
            ctx: &Ctx,
            s: usize,
            i: usize,
            left: u32,
            x: &mut Vec<u32>,
            out: &mut Vec<ShardVector>,
        ) {
            if i == x.len() {
                let mut excess = 0u64;
                for (labels, max, mode) in ctx.keys {
                    let mut per: BTreeMap<&Option<String>, u32> = BTreeMap::new();
                    for (n, &c) in x.iter().enumerate() {
                        if c > 0 {
                            *per.entry(&labels[n]).or_default() += c;
                        }
                    }
                    for (_, c) in per {
                        if c > *max {
                            if *mode == Mode::Required {
                                return;
                            }
                            excess += u64::from(c - max);
                        }
                    }
                }
                let placed: u64 = x.iter().map(|&c| u64::from(c)).sum();
                let stays: u64 = x
                    .iter()
                    .enumerate()
                    .map(|(n, &c)| u64::from(c.min(ctx.runs[s][n])))
                    .sum();
                out.push((x.clone(), placed, excess, stays));
                return;
            }
            let (room, new, stay) = ctx.nodes[i];
            let keep = if stay { ctx.runs[s][i] } else { 0 };
            let most = if new { left } else { keep.min(left) };
            for c in 0..=most.min(room as u32) {
                x[i] = c;
                rec(ctx, s, i + 1, left - c, x, out);
            }
            x[i] = 0;
        }
        rec(ctx, s, 0, ctx.m, &mut x, &mut out);
        out
    }
    fn search(
        ctx: &mut Ctx,
        all: &[Vec<ShardVector>],
        s: usize,
        load: &mut Vec<u64>,
        acc: (u64, u64, u64),
    ) {
        if s == all.len() {
            let score = (std::cmp::Reverse(acc.0), acc.1, ctx.running_total - acc.2);
            if ctx.best.is_none_or(|b| score < b) {
                ctx.best = Some(score);
            }
            return;
        }
        for (x, placed, excess, stays) in &all[s] {
            if x.iter()
                .zip(load.iter())
                .zip(ctx.nodes)
                .any(|((&c, &l), n)| l + u64::from(c) > n.0)
            {
                continue;
            }
            for (l, &c) in load.iter_mut().zip(x) {
                *l += u64::from(c);
            }
            search(
                ctx,
                all,
                s + 1,
                load,
                (acc.0 + placed, acc.1 + excess, acc.2 + stays),
            );
            for (l, &c) in load.iter_mut().zip(x) {
                *l -= u64::from(c);
            }
        }
    }
    let mut ctx = Ctx {
        nodes: &nodes,
        runs: &runs,
        keys: &keys,
        m,
        best: None,
        running_total,
    };
    let all: Vec<_> = (0..p.shards as usize)
        .map(|s| shard_vectors(&ctx, s))
        .collect();
    let mut load = vec![0u64; nodes.len()];
    search(&mut ctx, &all, 0, &mut load, (0, 0, 0));
    let (std::cmp::Reverse(placed), excess, displaced) = ctx.best.unwrap();
    (placed, excess, displaced)
}
