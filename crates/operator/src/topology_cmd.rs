//! `valkey-operator topology --cluster NAME [--namespace NS]`: the live topology of
//! a running cluster as its status reports it: region, zone and node, the members
//! on each with their live role, then each shard's slots and the conditions.
//!
//! `--output svg` draws the same as a picture (placement's SVG renderer), with
//! the domains over a zone, region or node limit of the spec in red;
//! `--watch` prints the text again whenever it changes.
//!
//! Rendering is a pure function of the status, so it is tested without a cluster.

use api::v1alpha1::{ValkeyCluster, ValkeyClusterSpec, ValkeyClusterStatus};
use clap::Args;
use kube::{Api, Client};
use placement::{HOSTNAME_KEY, Mark, NodeBox, Picture, REGION_KEY, ZONE_KEY};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// How `topology` draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum TopologyOutput {
    /// Region, zone and node as indented text, then shards and conditions.
    #[default]
    Text,
    /// An SVG picture (nested boxes, or a shard x zone grid when large).
    Svg,
}

/// How often `--watch` reads the cluster.
const WATCH_PERIOD: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Name of the ValkeyCluster.
    #[arg(long)]
    pub cluster: String,
    /// Its namespace (default: the kubeconfig's namespace).
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// text or svg.
    #[arg(long, short = 'o', value_enum, default_value_t = TopologyOutput::Text)]
    pub output: TopologyOutput,
    /// Keep reading the cluster and print the topology again whenever it
    /// changes (text only), until interrupted.
    #[arg(long, short = 'w')]
    pub watch: bool,
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
    #[error("--watch prints text; draw the picture with --output svg without --watch")]
    WatchSvg,
}

/// Reads the cluster and prints its topology (again on every change with
/// `--watch`).
pub fn main(args: &TopologyArgs) -> Result<(), TopologyError> {
    if args.watch && args.output == TopologyOutput::Svg {
        return Err(TopologyError::WatchSvg);
    }
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
        let mut last = String::new();
        loop {
            let obj = api
                .get(&args.cluster)
                .await
                .map_err(|source| TopologyError::Read {
                    name: args.cluster.clone(),
                    source,
                })?;
            let drawn = match args.output {
                TopologyOutput::Text => render(&args.cluster, obj.status.as_ref()),
                TopologyOutput::Svg => {
                    placement::render_svg(&picture(&args.cluster, &obj.spec, obj.status.as_ref()))
                }
            };
            if !args.watch {
                print!("{drawn}");
                return Ok(());
            }
            if drawn != last {
                println!("--- {}", chrono_free_now());
                print!("{drawn}");
                last = drawn;
            }
            tokio::time::sleep(WATCH_PERIOD).await;
        }
    })
}

/// Seconds since the epoch, UTC, as `HH:MM:SS` (no calendar crate needed
/// for a watch header).
fn chrono_free_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    format!(
        "{:02}:{:02}:{:02} UTC",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

/// The live topology as a picture: the members where the status puts them,
/// with every zone, region or node holding more of a shard than the spec's
/// constraints allow marked (custom keys are not in the status, so not
/// checked here).
pub fn picture(
    name: &str,
    spec: &ValkeyClusterSpec,
    status: Option<&ValkeyClusterStatus>,
) -> Picture {
    let mut picture = Picture {
        title: format!(
            "valkeycluster {name}: {} shards x {} members",
            spec.shards,
            spec.replicas + 1
        ),
        shards: u32::try_from(spec.shards).unwrap_or(0),
        ..Picture::default()
    };
    picture.notes = spec
        .replica_spread_constraints
        .iter()
        .map(|c| {
            format!(
                "{} maxReplicas {} ({:?})",
                placement::resolve_key(&c.topology_key),
                c.max_replicas,
                c.mode
            )
        })
        .collect();
    let Some(status) = status else {
        picture.notes.push("no status yet".into());
        return picture;
    };
    if let Some(summary) = &status.topology_summary {
        picture.notes.push(summary.clone());
    }
    // (key, shard, domain) -> members; a domain is over when above the limit.
    let domain_of = |m: &api::v1alpha1::MemberStatus, key: &str| match key {
        ZONE_KEY => m.zone.clone(),
        REGION_KEY => m.region.clone(),
        HOSTNAME_KEY => m.node.clone(),
        _ => None,
    };
    let mut limits: Vec<(String, u32)> = Vec::new();
    for c in &spec.replica_spread_constraints {
        let key = placement::resolve_key(&c.topology_key);
        if [ZONE_KEY, REGION_KEY, HOSTNAME_KEY].contains(&key.as_str()) {
            limits.push((key, u32::try_from(c.max_replicas).unwrap_or(u32::MAX)));
        }
    }
    let mut counts: BTreeMap<(String, i32, String), u32> = BTreeMap::new();
    for m in status.members.iter().filter(|m| m.node.is_some()) {
        for (key, _) in &limits {
            if let Some(d) = domain_of(m, key) {
                *counts.entry((key.clone(), m.shard, d)).or_default() += 1;
            }
        }
    }
    let over = |key: &str, shard: i32, domain: &str, limit: u32| {
        counts
            .get(&(key.to_string(), shard, domain.to_string()))
            .is_some_and(|n| *n > limit)
    };
    for m in &status.members {
        let violated = limits
            .iter()
            .any(|(key, limit)| domain_of(m, key).is_some_and(|d| over(key, m.shard, &d, *limit)));
        let mark = Mark {
            shard: u32::try_from(m.shard).unwrap_or(0),
            member: u32::try_from(m.member).unwrap_or(0),
            primary: m.role.as_deref() == Some("primary"),
            violated,
        };
        if violated {
            for (key, limit) in &limits {
                if let Some(d) = domain_of(m, key).filter(|d| over(key, m.shard, d, *limit)) {
                    picture.violated_domains.push((key.clone(), Some(d)));
                }
            }
        }
        match &m.node {
            Some(node) => match picture.nodes.iter_mut().find(|n| n.name == *node) {
                Some(n) => n.marks.push(mark),
                None => picture.nodes.push(NodeBox {
                    name: node.clone(),
                    region: m.region.clone(),
                    zone: m.zone.clone(),
                    marks: vec![mark],
                }),
            },
            None => picture.unplaced.push((
                Mark {
                    violated: true,
                    ..mark
                },
                format!("not scheduled ({})", m.pod),
            )),
        }
    }
    picture.violated_domains.sort();
    picture.violated_domains.dedup();
    picture
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
    fn the_picture_marks_a_zone_holding_too_many_of_a_shard() {
        let spec: ValkeyClusterSpec = serde_json::from_value(serde_json::json!({
            "shards": 1,
            "replicas": 2,
            "replicaSpreadConstraints": [{"topologyKey": "zone", "maxReplicas": 1}]
        }))
        .unwrap();
        let status = ValkeyClusterStatus {
            members: vec![
                member(0, 0, "node-1a-1", "zone-1a", "primary"),
                member(0, 1, "node-1a-2", "zone-1a", "replica"),
                member(0, 2, "node-1b-1", "zone-1b", "replica"),
            ],
            ..Default::default()
        };
        let p = picture("demo", &spec, Some(&status));
        let violated: Vec<(u32, bool)> = p
            .nodes
            .iter()
            .flat_map(|n| n.marks.iter().map(|m| (m.member, m.violated)))
            .collect();
        assert_eq!(violated.len(), 3);
        assert!(violated.contains(&(0, true)) && violated.contains(&(1, true)));
        assert!(violated.contains(&(2, false)));
        assert_eq!(
            p.violated_domains,
            vec![(ZONE_KEY.to_string(), Some("zone-1a".to_string()))]
        );
        let svg = placement::render_svg(&p);
        assert!(svg.contains(">zone zone-1a<") && svg.contains("#d62728"));
    }

    #[test]
    fn a_cluster_without_status_says_so() {
        assert_eq!(render("x", None), "valkeycluster x: no status yet\n");
    }
}
