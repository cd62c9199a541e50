//! `valkey-operator topology --cluster NAME [--namespace NS]`: the live topology of
//! a running cluster as its status reports it: region, zone and node, the members
//! on each with their live role, then each shard's slots and the conditions.
//!
//! Rendering is a pure function of the status, so it is tested without a cluster.

use api::v1alpha1::{ValkeyCluster, ValkeyClusterStatus};
use clap::Args;
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Name of the ValkeyCluster.
    #[arg(long)]
    pub cluster: String,
    /// Its namespace (default: the kubeconfig's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
}

/// Errors of the topology command.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("connecting to the API server: {0}")]
    Connect(#[source] kube::Error),
    #[error("reading valkeycluster {name}: {source}")]
    Read {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("starting the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Reads the cluster and prints its topology.
pub fn main(args: &TopologyArgs) -> Result<(), TopologyError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(TopologyError::Runtime)?;
    rt.block_on(async {
        let client = Client::try_default()
            .await
            .map_err(TopologyError::Connect)?;
        let api: Api<ValkeyCluster> = match &args.namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::default_namespaced(client),
        };
        let obj = api
            .get(&args.cluster)
            .await
            .map_err(|source| TopologyError::Read {
                name: args.cluster.clone(),
                source,
            })?;
        print!("{}", render(&args.cluster, obj.status.as_ref()));
        Ok(())
    })
}

/// Draws the live topology from a status.
pub fn render(name: &str, status: Option<&ValkeyClusterStatus>) -> String {
    let mut out = String::new();
    let Some(status) = status else {
        let _ = writeln!(out, "valkeycluster {name}: no status yet");
        return out;
    };
    let _ = writeln!(
        out,
        "valkeycluster {name}: {}",
        status.topology_summary.as_deref().unwrap_or("")
    );
    // region -> zone -> node -> members
    let mut tree: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, Vec<String>>>> = BTreeMap::new();
    let mut pending = Vec::new();
    for m in &status.members {
        let label = format!(
            "s{}/m{} {}{}",
            m.shard,
            m.member,
            m.role.as_deref().unwrap_or("unknown"),
            if m.ready { "" } else { " (not ready)" }
        );
        match m.node.as_deref() {
            Some(node) => tree
                .entry(m.region.as_deref().unwrap_or("(no region)"))
                .or_default()
                .entry(m.zone.as_deref().unwrap_or("(no zone)"))
                .or_default()
                .entry(node)
                .or_default()
                .push(label),
            None => pending.push(format!("{} ({})", label, m.pod)),
        }
    }
    for (region, zones) in &tree {
        let _ = writeln!(out, "region {region}");
        for (zone, nodes) in zones {
            let _ = writeln!(out, "  zone {zone}");
            for (node, members) in nodes {
                let _ = writeln!(out, "    node {node}: {}", members.join(", "));
            }
        }
    }
    if !pending.is_empty() {
        let _ = writeln!(out, "not scheduled: {}", pending.join(", "));
    }
    if !status.shards.is_empty() {
        let _ = writeln!(out, "shards:");
        for s in &status.shards {
            let _ = writeln!(
                out,
                "  shard {}: primary member {}, slots {}",
                s.index,
                s.primary.map_or_else(|| "-".to_string(), |p| p.to_string()),
                s.slots.as_deref().unwrap_or("-")
            );
        }
    }
    if !status.conditions.is_empty() {
        let _ = writeln!(out, "conditions:");
        for c in &status.conditions {
            let _ = writeln!(
                out,
                "  {} {} ({}): {}",
                c.type_, c.status, c.reason, c.message
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::v1alpha1::MemberStatus;

    fn member(shard: i32, member: i32, node: &str, zone: &str, role: &str) -> MemberStatus {
        MemberStatus {
            shard,
            member,
            pod: format!("demo-{shard}-{member}-0"),
            node: Some(node.into()),
            zone: Some(zone.into()),
            region: Some("region-1".into()),
            role: Some(role.into()),
            ready: true,
            ..Default::default()
        }
    }

    #[test]
    fn members_are_drawn_under_their_region_zone_and_node() {
        let status = ValkeyClusterStatus {
            members: vec![
                member(0, 0, "node-1a-1", "zone-1a", "primary"),
                member(0, 1, "node-1b-1", "zone-1b", "replica"),
                MemberStatus {
                    shard: 0,
                    member: 2,
                    pod: "demo-0-2-0".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let text = render("demo", Some(&status));
        assert!(
            text.contains("region region-1\n  zone zone-1a\n    node node-1a-1: s0/m0 primary\n")
        );
        assert!(text.contains("  zone zone-1b\n    node node-1b-1: s0/m1 replica\n"));
        assert!(text.contains("not scheduled: s0/m2 unknown (not ready) (demo-0-2-0)"));
    }

    #[test]
    fn a_cluster_without_status_says_so() {
        assert_eq!(render("x", None), "valkeycluster x: no status yet\n");
    }
}
