//! Helpers of the live-topology suites (issue 3): the testbed's zones, a
//! guard that undoes every fault it injected, the spread invariants a user
//! set with `mode: Required`, and short condition summaries for messages.

use crate::cluster::{Env, MemberPod, condition};
use anyhow::Context;
use anyhow::{Result, ensure};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The well-known zone label.
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// Node name -> zone label, from the live Nodes; the suites need 3 zones.
pub fn zones_of_nodes(env: &Env) -> Result<BTreeMap<String, String>> {
    let out = env.node_zones()?;
    ensure!(
        out.values().collect::<BTreeSet<_>>().len() == 3,
        "the suite needs a 3-zone testbed, nodes: {out:?}"
    );
    Ok(out)
}

/// `Cond=Status (Reason: message)`, or `Cond=<absent>`.
pub fn cond_brief(obj: &Value, cond: &str) -> String {
    match condition(obj, cond) {
        Some(c) => format!(
            "{cond}={} ({}: {})",
            c["status"].as_str().unwrap_or("?"),
            c["reason"].as_str().unwrap_or("?"),
            c["message"].as_str().unwrap_or("")
        ),
        None => format!("{cond}=<absent>"),
    }
}

/// The status describes the latest generation of the spec.
pub fn current(obj: &Value) -> bool {
    obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
}

/// Errors unless `status.topology` of the cluster object `obj` lists every
/// member of `members` (placed, Ready) with its node, the node's zone and
/// region labels, and its role label.
pub fn status_topology_matches(
    obj: &Value,
    members: &[MemberPod],
    zones: &BTreeMap<String, String>,
) -> Result<()> {
    let topology = obj["status"]["topology"]
        .as_array()
        .context("status.topology is missing")?;
    for m in members {
        let shard = topology
            .iter()
            .find(|s| s["shard"].as_u64() == Some(u64::from(m.shard)))
            .with_context(|| format!("status.topology has no shard {}", m.shard))?;
        let entry = shard["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["member"].as_u64() == Some(u64::from(m.member)))
            .with_context(|| {
                format!(
                    "status.topology shard {} has no member {}",
                    m.shard, m.member
                )
            })?;
        let zone = zones.get(&m.node).map(String::as_str).unwrap_or_default();
        ensure!(
            entry["node"] == m.node.as_str()
                && entry["zone"] == zone
                && entry["region"].is_string()
                && entry["role"] == m.role.as_str(),
            "status.topology says {entry} for {} (node {}, zone {zone}, role {})",
            m.name,
            m.node,
            m.role
        );
    }
    Ok(())
}

/// Members bound to a node and not being deleted: the copies that count.
fn placed(members: &[MemberPod]) -> impl Iterator<Item = &MemberPod> {
    members.iter().filter(|m| !m.node.is_empty() && !m.deleting)
}

/// Errors when two placed members of one shard share a node (node Required 1).
pub fn node_required_holds(members: &[MemberPod]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for m in placed(members) {
        ensure!(
            seen.insert((m.shard, m.node.clone())),
            "node Required 1 broken: two members of shard {} on {}: {members:#?}",
            m.shard,
            m.node
        );
    }
    Ok(())
}

/// Errors when two placed members of one shard share a zone (zone Required 1).
pub fn zone_required_holds(members: &[MemberPod], zones: &BTreeMap<String, String>) -> Result<()> {
    let mut seen = BTreeSet::new();
    for m in placed(members) {
        let zone = zones.get(&m.node).cloned().unwrap_or_default();
        ensure!(
            seen.insert((m.shard, zone.clone())),
            "zone Required 1 broken: two members of shard {} in {zone} (one is {} on {}): {members:#?}",
            m.shard,
            m.name,
            m.node
        );
    }
    Ok(())
}

/// Shard -> the zones of its placed members.
pub fn zones_per_shard(
    members: &[MemberPod],
    zones: &BTreeMap<String, String>,
) -> BTreeMap<u32, BTreeSet<String>> {
    let mut out: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for m in placed(members) {
        out.entry(m.shard)
            .or_default()
            .insert(zones.get(&m.node).cloned().unwrap_or_default());
    }
    out
}

/// Zones of the shards' labelled primaries, sorted.
pub fn primary_zones(members: &[MemberPod], zones: &BTreeMap<String, String>) -> Vec<String> {
    let mut out: Vec<String> = members
        .iter()
        .filter(|m| m.role == "primary" && !m.deleting)
        .map(|m| zones.get(&m.node).cloned().unwrap_or_default())
        .collect();
    out.sort();
    out
}

/// Injects testbed faults and cordons, and undoes whatever is still in
/// effect when it drops (also when a scenario fails half-way).
pub struct Faults {
    env: Env,
    label: String,
    zones: Vec<String>,
    nodes: Vec<String>,
    cordoned: Vec<String>,
}

impl Faults {
    /// `label` prefixes the guard's messages.
    pub fn new(env: &Env, label: &str) -> Self {
        Faults {
            env: env.clone(),
            label: label.to_string(),
            zones: Vec::new(),
            nodes: Vec::new(),
            cordoned: Vec::new(),
        }
    }

    /// `testbed zone fail ZONE`: every node of the zone dies.
    pub fn zone_fail(&mut self, zone: &str) -> Result<()> {
        self.zones.push(zone.to_string());
        self.env.testbed(&["zone", "fail", zone])?;
        Ok(())
    }

    /// `testbed zone partition ZONE`: processes run on, cut off from the
    /// other zones and the control plane.
    pub fn zone_partition(&mut self, zone: &str) -> Result<()> {
        self.zones.push(zone.to_string());
        self.env.testbed(&["zone", "partition", zone])?;
        Ok(())
    }

    /// Ends a zone failure or partition.
    pub fn zone_heal(&mut self, zone: &str) -> Result<()> {
        self.env.testbed(&["zone", "heal", zone])?;
        self.zones.retain(|z| z != zone);
        Ok(())
    }

    /// `testbed node fail NODE`.
    pub fn node_fail(&mut self, node: &str) -> Result<()> {
        self.nodes.push(node.to_string());
        self.env.testbed(&["node", "fail", node])?;
        Ok(())
    }

    /// `testbed node heal NODE`.
    pub fn node_heal(&mut self, node: &str) -> Result<()> {
        self.env.testbed(&["node", "heal", node])?;
        self.nodes.retain(|n| n != node);
        Ok(())
    }

    /// `kubectl cordon NODE`.
    pub fn cordon(&mut self, node: &str) -> Result<()> {
        self.cordoned.push(node.to_string());
        self.env.kubectl(&["cordon", node])?;
        Ok(())
    }

    /// Uncordons every node this guard cordoned.
    pub fn uncordon_all(&mut self) -> Result<()> {
        for n in std::mem::take(&mut self.cordoned) {
            self.env.kubectl(&["uncordon", &n])?;
        }
        Ok(())
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        let label = &self.label;
        for z in std::mem::take(&mut self.zones) {
            if let Err(e) = self.env.testbed(&["zone", "heal", &z]) {
                eprintln!("{label}: guard: zone heal {z}: {e:#}");
            }
        }
        for n in std::mem::take(&mut self.nodes) {
            if let Err(e) = self.env.testbed(&["node", "heal", &n]) {
                eprintln!("{label}: guard: node heal {n}: {e:#}");
            }
        }
        for n in std::mem::take(&mut self.cordoned) {
            if let Err(e) = self.env.kubectl(&["uncordon", &n]) {
                eprintln!("{label}: guard: uncordon {n}: {e:#}");
            }
        }
    }
}
