//! Fault injection: the unix-socket protocol (`DIR/agent.sock`, one JSON request
//! line, one JSON reply line), the fault state it changes, and the nftables
//! ruleset that makes the network side of a fault real.
//!
//! What each fault means for a node:
//! - failed: its pods' processes are SIGKILLed, its kubelet is silent (no Lease,
//!   no status, no reaction to the API), its pods' traffic is dropped both ways;
//! - partitioned (a zone fault): processes keep running, the kubelet cannot
//!   reach the API (silent as above), and the zone's pods reach only each other.

use crate::state::NodeSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::Arc;

/// How a node is doing, as its pods and heartbeat loops see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeHealth {
    pub failed: bool,
    pub partitioned: bool,
}

impl NodeHealth {
    /// Whether the node's kubelet can talk to the API server.
    pub fn api_connected(&self) -> bool {
        !self.failed && !self.partitioned
    }

    /// Whether the node is powered: its processes may run.
    pub fn alive(&self) -> bool {
        !self.failed
    }
}

/// Every active fault of the testbed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultState {
    pub failed_nodes: BTreeSet<String>,
    pub partitioned_zones: BTreeSet<String>,
}

impl FaultState {
    /// Health of `node` (in `zone`) under the current faults.
    pub fn health(&self, node: &str, zone: &str) -> NodeHealth {
        NodeHealth {
            failed: self.failed_nodes.contains(node),
            partitioned: self.partitioned_zones.contains(zone),
        }
    }
}

/// One request on the fault socket.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RawRequest {
    pub op: String,
    #[serde(default)]
    pub target: Option<String>,
}

/// The reply line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reply {
    pub ok: bool,
    pub message: String,
}

/// A validated fault request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    NodeFail(String),
    NodeHeal(String),
    ZoneFail(String),
    ZoneHeal(String),
    ZonePartition(String),
    Status,
}

/// Parses and validates a request line against the testbed's nodes and zones.
pub fn parse_request(line: &str, nodes: &[NodeSpec]) -> Result<Request, String> {
    let raw: RawRequest = serde_json::from_str(line)
        .map_err(|e| format!("request is not {{\"op\":..,\"target\":..}}: {e}"))?;
    let target = || {
        raw.target
            .clone()
            .ok_or_else(|| format!("op {:?} needs a \"target\"", raw.op))
    };
    let node = |name: String| {
        if nodes.iter().any(|n| n.name == name) {
            Ok(name)
        } else {
            Err(format!("unknown node {name:?}"))
        }
    };
    let zone = |name: String| {
        if nodes.iter().any(|n| n.zone == name) {
            Ok(name)
        } else {
            Err(format!("unknown zone {name:?}"))
        }
    };
    match raw.op.as_str() {
        "node-fail" => Ok(Request::NodeFail(node(target()?)?)),
        "node-heal" => Ok(Request::NodeHeal(node(target()?)?)),
        "zone-fail" => Ok(Request::ZoneFail(zone(target()?)?)),
        "zone-heal" => Ok(Request::ZoneHeal(zone(target()?)?)),
        "zone-partition" => Ok(Request::ZonePartition(zone(target()?)?)),
        "status" => Ok(Request::Status),
        other => Err(format!(
            "unknown op {other:?} (node-fail, node-heal, zone-fail, zone-heal, zone-partition, status, lb-reassign, lb-hold, lb-release, lb-status)"
        )),
    }
}

/// Applies a request to the fault state; returns the nodes whose health changed
/// and a message for the reply.
pub fn apply(state: &mut FaultState, req: &Request, nodes: &[NodeSpec]) -> (Vec<String>, String) {
    let before: Vec<NodeHealth> = nodes
        .iter()
        .map(|n| state.health(&n.name, &n.zone))
        .collect();
    let message = match req {
        Request::NodeFail(n) => {
            state.failed_nodes.insert(n.clone());
            format!("node {n} failed")
        }
        Request::NodeHeal(n) => {
            state.failed_nodes.remove(n);
            format!("node {n} healed")
        }
        Request::ZoneFail(z) => {
            for n in nodes.iter().filter(|n| &n.zone == z) {
                state.failed_nodes.insert(n.name.clone());
            }
            format!("zone {z} failed")
        }
        Request::ZoneHeal(z) => {
            state.partitioned_zones.remove(z);
            for n in nodes.iter().filter(|n| &n.zone == z) {
                state.failed_nodes.remove(&n.name);
            }
            format!("zone {z} healed")
        }
        Request::ZonePartition(z) => {
            state.partitioned_zones.insert(z.clone());
            format!("zone {z} partitioned")
        }
        Request::Status => describe(state, nodes),
    };
    let changed = nodes
        .iter()
        .zip(before)
        .filter(|(n, b)| state.health(&n.name, &n.zone) != *b)
        .map(|(n, _)| n.name.clone())
        .collect();
    (changed, message)
}

/// One line for `testbed status`: `9 nodes, no faults` or
/// `9 nodes; failed: node-1a-1; partitioned: zone-1c`.
pub fn describe(state: &FaultState, nodes: &[NodeSpec]) -> String {
    let failed: Vec<&str> = nodes
        .iter()
        .filter(|n| state.failed_nodes.contains(&n.name))
        .map(|n| n.name.as_str())
        .collect();
    let partitioned: Vec<&str> = state.partitioned_zones.iter().map(String::as_str).collect();
    let mut parts = vec![format!("{} nodes", nodes.len())];
    if failed.is_empty() && partitioned.is_empty() {
        return format!("{}, no faults", parts[0]);
    }
    if !failed.is_empty() {
        parts.push(format!("failed: {}", failed.join(", ")));
    }
    if !partitioned.is_empty() {
        parts.push(format!("partitioned: {}", partitioned.join(", ")));
    }
    parts.join("; ")
}

/// The whole nftables table for the current faults, as an `nft -f` script that
/// replaces the table atomically (create-if-missing, delete, re-create).
///
/// Failed nodes: every packet from or to their pod CIDR is dropped (forward,
/// and host input/output). Partitioned zones: packets crossing the zone's
/// boundary are dropped in forward, and the host can neither reach nor be
/// reached by the zone's pods; traffic inside the zone still flows.
///
/// The nodes' own addresses (their InternalIPs, where nodePorts answer) are
/// cut before the Service DNAT rewrites them (chains `early-prerouting` and
/// `early-output`, priority -150): a failed node's address answers nobody,
/// a partitioned zone's addresses only the zone's own pods; so a client
/// outside the cluster (`testbed outside`), like the host, loses the nodePorts
/// of those nodes. Their connections time out, as to a dead machine.
pub fn render_ruleset(table: &str, state: &FaultState, nodes: &[NodeSpec]) -> String {
    let set = |cidrs: &[&str]| format!("{{ {} }}", cidrs.join(", "));
    let mut forward = Vec::new();
    let mut host = Vec::new();
    let mut early_pre = Vec::new();
    let mut early_host: Vec<String> = Vec::new();
    let node_addr = |n: &NodeSpec| {
        crate::agent::network::Cidr::parse(&n.pod_cidr).map(|c| c.node_addr().to_string())
    };
    let failed_addrs: Vec<String> = nodes
        .iter()
        .filter(|n| state.failed_nodes.contains(&n.name))
        .filter_map(node_addr)
        .collect();
    if !failed_addrs.is_empty() {
        let refs: Vec<&str> = failed_addrs.iter().map(String::as_str).collect();
        early_pre.push(format!("ip daddr {} drop", set(&refs)));
        early_host.extend(failed_addrs.iter().cloned());
    }
    let failed: Vec<&str> = nodes
        .iter()
        .filter(|n| state.failed_nodes.contains(&n.name))
        .map(|n| n.pod_cidr.as_str())
        .collect();
    if !failed.is_empty() {
        forward.push(format!("ip saddr {} drop", set(&failed)));
        forward.push(format!("ip daddr {} drop", set(&failed)));
        host.extend(failed.iter().copied());
    }
    for zone in &state.partitioned_zones {
        let cidrs: Vec<&str> = nodes
            .iter()
            .filter(|n| &n.zone == zone)
            .map(|n| n.pod_cidr.as_str())
            .collect();
        if cidrs.is_empty() {
            continue;
        }
        let s = set(&cidrs);
        forward.push(format!("ip saddr {s} ip daddr != {s} drop"));
        forward.push(format!("ip daddr {s} ip saddr != {s} drop"));
        host.extend(cidrs.iter().copied());
        let addrs: Vec<String> = nodes
            .iter()
            .filter(|n| &n.zone == zone)
            .filter_map(node_addr)
            .collect();
        let refs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        early_pre.push(format!("ip daddr {} ip saddr != {s} drop", set(&refs)));
        early_host.extend(addrs);
    }
    let mut out = format!("table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n");
    let hooked = |out: &mut String, name: &str, hook: &str, priority: i32, rules: &[String]| {
        out.push_str(&format!(
            "  chain {name} {{\n    type filter hook {hook} priority {priority}; policy accept;\n"
        ));
        for r in rules {
            out.push_str(&format!("    {r}\n"));
        }
        out.push_str("  }\n");
    };
    let chain = |out: &mut String, name: &str, rules: &[String]| {
        hooked(out, name, name, -10, rules);
    };
    chain(&mut out, "forward", &forward);
    let (input, output) = if host.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        (
            vec![format!("ip saddr {} drop", set(&host))],
            vec![format!("ip daddr {} drop", set(&host))],
        )
    };
    chain(&mut out, "input", &input);
    chain(&mut out, "output", &output);
    let early_output = if early_host.is_empty() {
        Vec::new()
    } else {
        let refs: Vec<&str> = early_host.iter().map(String::as_str).collect();
        vec![format!("ip daddr {} drop", set(&refs))]
    };
    hooked(&mut out, "early-prerouting", "prerouting", -150, &early_pre);
    hooked(&mut out, "early-output", "output", -150, &early_output);
    out.push_str("}\n");
    out
}

/// Loads a ruleset with `nft -f -`.
pub async fn load_ruleset(nft: &std::path::Path, script: &str) -> Result<(), String> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(nft)
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting nft: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| format!("writing to nft: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| format!("waiting for nft: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes the table (agent shutdown).
pub async fn delete_table(nft: &std::path::Path, table: &str) {
    let _ = tokio::process::Command::new(nft)
        .args(["delete", "table", "inet", table])
        .stderr(std::process::Stdio::null())
        .status()
        .await;
}

/// Serves the fault socket until the process ends.
pub async fn serve(agent: Arc<super::Agent>) -> anyhow::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let path = agent.state.agent_socket.clone();
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| anyhow::anyhow!("binding fault socket {}: {e}", path.display()))?;
    tracing::info!(socket = %path.display(), "fault socket listening");
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "fault socket accept failed");
                continue;
            }
        };
        let agent = agent.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim().is_empty() {
                    continue;
                }
                let reply = handle(&agent, &line).await;
                let mut text = serde_json::to_string(&reply).unwrap_or_else(|_| {
                    "{\"ok\":false,\"message\":\"reply encoding failed\"}".to_string()
                });
                text.push('\n');
                if write.write_all(text.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

async fn handle(agent: &super::Agent, line: &str) -> Reply {
    // The load balancer's ops share the socket.
    if let Ok(raw) = serde_json::from_str::<RawRequest>(line)
        && let Some(lb) = super::loadbalancer::parse_request(&raw.op, raw.target.as_deref())
    {
        return match lb {
            Ok(req) => match agent.load_balancer(req).await {
                Ok(message) => Reply { ok: true, message },
                Err(message) => Reply { ok: false, message },
            },
            Err(message) => Reply { ok: false, message },
        };
    }
    let req = match parse_request(line, &agent.state.nodes) {
        Ok(r) => r,
        Err(message) => return Reply { ok: false, message },
    };
    match agent.apply_fault(&req).await {
        Ok(message) => Reply { ok: true, message },
        Err(message) => Reply { ok: false, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<NodeSpec> {
        let mk = |name: &str, zone: &str, cidr: &str| NodeSpec {
            name: name.into(),
            region: "region-1".into(),
            zone: zone.into(),
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 110,
            pod_cidr: cidr.into(),
        };
        vec![
            mk("node-1a-1", "zone-1a", "10.203.1.0/24"),
            mk("node-1a-2", "zone-1a", "10.203.2.0/24"),
            mk("node-1b-1", "zone-1b", "10.203.3.0/24"),
        ]
    }

    #[test]
    fn requests_are_validated_against_the_topology() {
        let n = nodes();
        assert_eq!(
            parse_request(r#"{"op":"node-fail","target":"node-1a-1"}"#, &n),
            Ok(Request::NodeFail("node-1a-1".into()))
        );
        assert!(parse_request(r#"{"op":"node-fail","target":"node-9"}"#, &n).is_err());
        assert!(parse_request(r#"{"op":"zone-partition","target":"node-1a-1"}"#, &n).is_err());
        assert!(parse_request(r#"{"op":"zone-fail"}"#, &n).is_err());
        assert!(parse_request(r#"{"op":"explode"}"#, &n).is_err());
        assert!(parse_request("not json", &n).is_err());
        assert_eq!(parse_request(r#"{"op":"status"}"#, &n), Ok(Request::Status));
    }

    #[test]
    fn zone_fail_fails_exactly_the_zone_and_zone_heal_undoes_fail_and_partition() {
        let n = nodes();
        let mut s = FaultState::default();
        let (changed, _) = apply(&mut s, &Request::ZoneFail("zone-1a".into()), &n);
        assert_eq!(
            changed,
            vec!["node-1a-1".to_string(), "node-1a-2".to_string()]
        );
        apply(&mut s, &Request::ZonePartition("zone-1a".into()), &n);
        let (changed, _) = apply(&mut s, &Request::ZoneHeal("zone-1a".into()), &n);
        assert_eq!(changed.len(), 2);
        assert_eq!(s, FaultState::default());
    }

    #[test]
    fn node_heal_leaves_a_zone_partition_in_place() {
        let n = nodes();
        let mut s = FaultState::default();
        apply(&mut s, &Request::ZonePartition("zone-1a".into()), &n);
        apply(&mut s, &Request::NodeFail("node-1a-1".into()), &n);
        apply(&mut s, &Request::NodeHeal("node-1a-1".into()), &n);
        let h = s.health("node-1a-1", "zone-1a");
        assert!(h.alive() && !h.api_connected());
    }

    #[test]
    fn status_names_the_faults_in_one_line() {
        let n = nodes();
        let mut s = FaultState::default();
        assert_eq!(describe(&s, &n), "3 nodes, no faults");
        apply(&mut s, &Request::NodeFail("node-1b-1".into()), &n);
        apply(&mut s, &Request::ZonePartition("zone-1a".into()), &n);
        assert_eq!(
            describe(&s, &n),
            "3 nodes; failed: node-1b-1; partitioned: zone-1a"
        );
    }

    #[test]
    fn no_faults_render_empty_accepting_chains() {
        let script = render_ruleset("vk3", &FaultState::default(), &nodes());
        assert!(script.starts_with("table inet vk3\ndelete table inet vk3\n"));
        assert!(!script.contains("drop"));
        assert_eq!(script.matches("policy accept").count(), 5);
    }

    #[test]
    fn a_failed_node_drops_only_its_own_cidr() {
        let mut s = FaultState::default();
        s.failed_nodes.insert("node-1a-2".into());
        let script = render_ruleset("vk3", &s, &nodes());
        assert!(script.contains("ip saddr { 10.203.2.0/24 } drop"));
        assert!(script.contains("ip daddr { 10.203.2.0/24 } drop"));
        assert!(!script.contains("10.203.1.0/24"));
        assert!(!script.contains("10.203.3.0/24"));
        // Its address, before a nodePort's DNAT could rewrite it.
        assert!(script.contains(
            "  chain early-prerouting {\n    type filter hook prerouting priority -150; policy accept;\n    ip daddr { 10.203.2.1 } drop\n  }\n"
        ));
        assert!(script.contains(
            "  chain early-output {\n    type filter hook output priority -150; policy accept;\n    ip daddr { 10.203.2.1 } drop\n  }\n"
        ));
        assert!(!script.contains("10.203.1.1"));
    }

    #[test]
    fn a_partition_keeps_traffic_inside_the_zone() {
        let mut s = FaultState::default();
        s.partitioned_zones.insert("zone-1a".into());
        let script = render_ruleset("vk3", &s, &nodes());
        let zone = "{ 10.203.1.0/24, 10.203.2.0/24 }";
        assert!(script.contains(&format!("ip saddr {zone} ip daddr != {zone} drop")));
        assert!(script.contains(&format!("ip daddr {zone} ip saddr != {zone} drop")));
        assert!(
            script.contains(&format!("ip saddr {zone} drop")),
            "host input cut"
        );
        assert!(
            script.contains(&format!("ip daddr {zone} drop")),
            "host output cut"
        );
        assert!(
            script.contains(&format!(
                "ip daddr {{ 10.203.1.1, 10.203.2.1 }} ip saddr != {zone} drop"
            )),
            "the zone's node addresses answer only the zone: {script}"
        );
        assert!(script.contains("ip daddr { 10.203.1.1, 10.203.2.1 } drop"));
        assert!(!script.contains("10.203.3.0/24"));
    }
}
