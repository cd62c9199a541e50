//! The plan as a person reads it in a terminal: region > zone > node with the
//! members on each, then what is exceeded and what could not be placed.

use crate::instance::Instance;
use crate::model::{Mode, PlacedMember, Plan, Problem, REGION_KEY, ZONE_KEY};
use crate::validate::validate;
use std::collections::BTreeMap;
use std::fmt::Write;

fn role(primary: bool) -> &'static str {
    if primary { "primary" } else { "replica" }
}

fn member_text(m: &PlacedMember) -> String {
    let moved = if m.moved { " (moved)" } else { "" };
    format!("s{}/m{} {}{moved}", m.shard, m.member, role(m.primary))
}

/// `topology.kubernetes.io/zone maxReplicas 1 (Required)`.
pub(crate) fn constraint_text(c: &crate::model::SpreadConstraint) -> String {
    format!(
        "{} maxReplicas {} ({:?})",
        crate::resolve_key(&c.topology_key),
        c.max_replicas,
        c.mode
    )
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Sorts labelled groups with the unlabelled one last.
fn group_key(v: &Option<String>) -> (bool, String) {
    (v.is_none(), v.clone().unwrap_or_default())
}

/// Draws `plan` for `problem`: region > zone > node with the members on each
/// (members planned / room per node, and why a node takes no new member), then
/// the Preferred violations and the unplaced members with their reasons. See
/// the crate docs for an example.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn render_text(problem: &Problem, plan: &Plan) -> String {
    let mut out = String::new();
    let members_per_shard = u64::from(problem.replicas) + 1;
    let _ = writeln!(
        out,
        "cluster {}: {} x {}, {} placed, {} unplaced, {}",
        plan.cluster,
        plural(problem.shards as usize, "shard", "shards"),
        plural(members_per_shard as usize, "member", "members"),
        plan.members.len(),
        plan.unplaced.len(),
        plural(
            plan.violations.len(),
            "Preferred violation",
            "Preferred violations"
        ),
    );
    if !problem.constraints.is_empty() {
        let list: Vec<String> = problem.constraints.iter().map(constraint_text).collect();
        let _ = writeln!(out, "constraints: {}", list.join(", "));
    }

    // Node facts, when the problem is one the planner accepts.
    let inst = validate(problem).is_ok().then(|| Instance::new(problem));
    let mut flags: BTreeMap<&str, (String, u32)> = BTreeMap::new();
    if let Some(inst) = &inst {
        for n in &inst.nodes {
            let flag = match &n.exclusion {
                Some(e) => format!(" [{}]", e.describe()),
                None => String::new(),
            };
            flags.insert(n.info.name.as_str(), (flag, n.room));
        }
    }

    let mut on_node: BTreeMap<&str, Vec<&PlacedMember>> = BTreeMap::new();
    for m in &plan.members {
        on_node.entry(m.node.as_str()).or_default().push(m);
    }
    type Zones<'a> = BTreeMap<(bool, String), BTreeMap<(bool, String), Vec<&'a str>>>;
    let mut tree: Zones = BTreeMap::new();
    let mut known: Vec<&str> = Vec::new();
    for n in &problem.nodes {
        let region = group_key(&n.labels.get(REGION_KEY).cloned());
        let zone = group_key(&n.labels.get(ZONE_KEY).cloned());
        tree.entry(region)
            .or_default()
            .entry(zone)
            .or_default()
            .push(&n.name);
        known.push(&n.name);
    }
    let strays: Vec<&str> = on_node
        .keys()
        .copied()
        .filter(|n| !known.contains(n))
        .collect();
    let width = problem
        .nodes
        .iter()
        .map(|n| n.name.len())
        .chain(strays.iter().map(|n| n.len()))
        .max()
        .unwrap_or(0);
    let node_line = |out: &mut String, indent: &str, name: &str| {
        let here = on_node.get(name).map(Vec::as_slice).unwrap_or(&[]);
        let mut sorted: Vec<&&PlacedMember> = here.iter().collect();
        sorted.sort_by_key(|m| (m.shard, m.member));
        let list: Vec<String> = sorted.iter().map(|m| member_text(m)).collect();
        let (flag, room) = flags.get(name).cloned().unwrap_or_default();
        let load = format!("{}/{}", here.len(), room);
        let members = if list.is_empty() {
            "-".to_string()
        } else {
            list.join(", ")
        };
        let _ = writeln!(
            out,
            "{indent}node {name:<width$}  {load:>5}  {members}{flag}"
        );
    };
    out.push('\n');
    for ((no_region, region), zones) in &mut tree {
        let region = if *no_region {
            "(no region label)"
        } else {
            region.as_str()
        };
        let _ = writeln!(out, "region {region}");
        for ((no_zone, zone), nodes) in zones.iter_mut() {
            let zone = if *no_zone {
                "(no zone label)"
            } else {
                zone.as_str()
            };
            let _ = writeln!(out, "  zone {zone}");
            nodes.sort_unstable();
            for name in nodes.iter() {
                node_line(&mut out, "    ", name);
            }
        }
    }
    if !strays.is_empty() {
        let _ = writeln!(out, "nodes not in the input");
        for name in &strays {
            node_line(&mut out, "    ", name);
        }
    }

    if !plan.violations.is_empty() {
        let _ = writeln!(out, "\nviolations (Preferred constraints exceeded):");
        for v in &plan.violations {
            let domain = match &v.domain {
                Some(d) => format!("{}={d}", v.topology_key),
                None => format!("nodes without {}", v.topology_key),
            };
            let mode = if v.mode == Mode::Required {
                "Required"
            } else {
                "Preferred"
            };
            let _ = writeln!(
                out,
                "  shard {}: {} members in {domain} ({mode}, maxReplicas {})",
                v.shard, v.members, v.max_replicas
            );
        }
    }
    if !plan.unplaced.is_empty() {
        let _ = writeln!(out, "\nunplaced:");
        for u in &plan.unplaced {
            let primary = problem.primaries.get(&u.shard).copied().unwrap_or(0) == u.member;
            let _ = writeln!(
                out,
                "  s{}/m{} {}: {}",
                u.shard,
                u.member,
                role(primary),
                u.reason
            );
        }
    }
    out
}
