//! External access (pure): the address each member announces to clients
//! outside Kubernetes, read from its own Service and, for NodePort, the node
//! its pod runs on; and the Valkey settings that announce it.
//!
//! Valkey keeps two addresses per node: the one on the cluster bus
//! (`cluster-announce-ip`, the pod IP, which peers and replication use) and
//! the one it gives clients in CLUSTER SLOTS, CLUSTER SHARDS, MOVED and ASK
//! (`cluster-announce-client-ipv4` and `cluster-announce-client-port` /
//! `-tls-port`, all settable live with CONFIG SET). Only the second is
//! changed here, so the bus keeps working on pod IPs while every client (in
//! or outside the cluster) is sent to the external address.

use crate::pods::PodFacts;
use crate::view::KubeView;
use api::ValidatedCluster;
use api::constants::VALKEY_PORT;
use api::v1alpha1::ExternalAccessType;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use resources::external_service_name;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use valkey::model::{MemberIndex, MemberState, NodeReport, ObservedCluster};
use valkey::parse::NodeId;

/// The client address a member announces, IPv4 (empty: its pod IP).
pub const ANNOUNCE_CLIENT_IPV4: &str = "cluster-announce-client-ipv4";
/// The client address a member announces, IPv6 (empty: its pod IP).
pub const ANNOUNCE_CLIENT_IPV6: &str = "cluster-announce-client-ipv6";
/// The plaintext client port a member announces (0: its own port).
pub const ANNOUNCE_CLIENT_PORT: &str = "cluster-announce-client-port";
/// The TLS client port a member announces (0: its own tls-port).
pub const ANNOUNCE_CLIENT_TLS_PORT: &str = "cluster-announce-client-tls-port";

/// Every key [`announce_config`] sets (the members are asked about them).
pub const ANNOUNCE_KEYS: [&str; 4] = [
    ANNOUNCE_CLIENT_IPV4,
    ANNOUNCE_CLIENT_IPV6,
    ANNOUNCE_CLIENT_PORT,
    ANNOUNCE_CLIENT_TLS_PORT,
];

/// The settings that make a member announce `addr` to clients, or its own
/// pod address (`None`: external access off, or its address not known yet).
/// Both client ports get the external port: the Service forwards it to 6379,
/// which serves plaintext or TLS as the member does.
pub fn announce_config(addr: Option<SocketAddr>) -> BTreeMap<String, String> {
    let (v4, v6, port) = match addr {
        Some(SocketAddr::V4(a)) => (a.ip().to_string(), String::new(), a.port()),
        Some(SocketAddr::V6(a)) => (String::new(), a.ip().to_string(), a.port()),
        None => (String::new(), String::new(), 0),
    };
    BTreeMap::from([
        (ANNOUNCE_CLIENT_IPV4.to_string(), v4),
        (ANNOUNCE_CLIENT_IPV6.to_string(), v6),
        (ANNOUNCE_CLIENT_PORT.to_string(), port.to_string()),
        (ANNOUNCE_CLIENT_TLS_PORT.to_string(), port.to_string()),
    ])
}

/// The address a member is reached at from outside: its Service's load
/// balancer IP and port 6379, or the InternalIP of its pod's node and its
/// Service's nodePort. `None` while unknown (no address assigned yet, the
/// pod not scheduled, or the Service not selecting this pod yet).
pub fn address(
    type_: ExternalAccessType,
    service: Option<&Service>,
    pod: Option<&Pod>,
    nodes: &[impl AsRef<Node>],
) -> Option<SocketAddr> {
    let service = service?;
    let pod = pod?;
    let selected = service
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.get(resources::services::POD_NAME_LABEL));
    if selected != pod.metadata.name.as_ref() {
        return None;
    }
    match type_ {
        ExternalAccessType::LoadBalancer => {
            let ip: IpAddr = service
                .status
                .as_ref()?
                .load_balancer
                .as_ref()?
                .ingress
                .as_ref()?
                .iter()
                .find_map(|i| i.ip.as_deref()?.parse().ok())?;
            Some(SocketAddr::new(ip, VALKEY_PORT))
        }
        ExternalAccessType::NodePort => {
            let port = service
                .spec
                .as_ref()?
                .ports
                .as_ref()?
                .iter()
                .find_map(|p| p.node_port)?;
            let port = u16::try_from(port).ok()?;
            let node = PodFacts::of(pod).node?;
            let ip = nodes
                .iter()
                .map(AsRef::as_ref)
                .find(|n| n.metadata.name.as_deref() == Some(node.as_str()))?
                .status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .filter(|a| a.type_ == "InternalIP")
                .find_map(|a| a.address.parse::<IpAddr>().ok())?;
            Some(SocketAddr::new(ip, port))
        }
    }
}

/// The external address of every member whose address is known (none when
/// external access is off).
pub fn addresses(cluster: &ValidatedCluster, view: &KubeView) -> BTreeMap<(u32, u32), SocketAddr> {
    let Some(access) = &cluster.external_access else {
        return BTreeMap::new();
    };
    view.members
        .iter()
        .filter_map(|(&(s, m), pod)| {
            let service = view
                .services
                .get(&external_service_name(&cluster.name, s, m));
            address(access.type_, service, Some(pod), &view.nodes).map(|a| ((s, m), a))
        })
        .collect()
}

/// The address member `report` announces to clients, from its own CONFIG
/// GET; `None` when it announces its pod address.
fn announced_by(report: &NodeReport) -> Option<(IpAddr, u16)> {
    let get = |k: &str| report.config.get(k).map(String::as_str).unwrap_or_default();
    let ip: IpAddr = get(ANNOUNCE_CLIENT_IPV4)
        .parse()
        .or_else(|_| get(ANNOUNCE_CLIENT_IPV6).parse())
        .ok()?;
    let port = [ANNOUNCE_CLIENT_PORT, ANNOUNCE_CLIENT_TLS_PORT]
        .iter()
        .filter_map(|k| get(k).parse::<u16>().ok())
        .find(|p| *p != 0)?;
    Some((ip, port))
}

/// Rewrites the members' CLUSTER NODES views so that every member shows at
/// its pod address again. A member that announces a client address shows
/// that address in CLUSTER NODES to everybody (the operator too), while
/// the planner knows members by pod address: a line is given back its pod
/// address when its node id is a reachable member's own id (and that member
/// announces a client address), or when its address is one a member
/// announces (`external`: the addresses the members are told, for the
/// members that cannot be asked). With external access off nothing matches
/// and nothing changes.
pub fn internal_view(observed: &mut ObservedCluster, external: &BTreeMap<(u32, u32), SocketAddr>) {
    let mut by_id: BTreeMap<NodeId, (IpAddr, u16)> = BTreeMap::new();
    let mut by_address: BTreeMap<(IpAddr, u16), (IpAddr, u16)> = BTreeMap::new();
    for m in &observed.members {
        let Some(addr) = m.addr else { continue };
        let internal = (addr.ip, addr.port);
        if let MemberIndex::Member(i) = m.member.member
            && let Some(e) = external.get(&(m.member.shard.0, i))
        {
            by_address.insert((e.ip(), e.port()), internal);
        }
        if let Some(report) = m.report()
            && let Some(announced) = announced_by(report)
        {
            by_id.insert(report.node_id().clone(), internal);
            by_address.insert(announced, internal);
        }
    }
    if by_id.is_empty() && by_address.is_empty() {
        return;
    }
    for m in &mut observed.members {
        if let MemberState::Reachable(report) = &mut m.state {
            report.nodes.readdress(|n| {
                by_id.get(&n.id).copied().or_else(|| {
                    let ip = n.address.ip?;
                    by_address.get(&(ip, n.address.port)).copied()
                })
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use resources::adapt::fixtures::pod;

    use std::sync::Arc;

    fn service(yaml: &str) -> Service {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn node(name: &str, ip: &str) -> Arc<Node> {
        Arc::new(resources::adapt::fixtures::node(&format!(
            "metadata: {{name: {name}}}
             status: {{addresses: [{{type: Hostname, address: {name}}}, {{type: InternalIP, address: '{ip}'}}]}}"
        )))
    }

    fn member(node: &str) -> Pod {
        pod(&format!(
            "metadata: {{name: cache-0-0-0, namespace: prod}}
             spec: {{nodeName: {node}, containers: [{{name: valkey}}]}}"
        ))
    }

    const NODE_PORT: &str = "spec:
      type: NodePort
      selector: {statefulset.kubernetes.io/pod-name: cache-0-0-0}
      ports: [{name: client, port: 6379, nodePort: 31007}]";

    const BALANCED: &str = "spec:
      type: LoadBalancer
      selector: {statefulset.kubernetes.io/pod-name: cache-0-0-0}
      ports: [{name: client, port: 6379, nodePort: 31007}]
status: {loadBalancer: {ingress: [{ip: 10.200.0.7}]}}";

    #[test]
    fn a_node_port_member_announces_its_pods_node_and_follows_it_to_another() {
        let nodes = [node("n1", "10.0.0.1"), node("n2", "10.0.0.2")];
        let svc = service(NODE_PORT);
        let on_n1 = address(
            ExternalAccessType::NodePort,
            Some(&svc),
            Some(&member("n1")),
            &nodes,
        );
        assert_eq!(on_n1, Some("10.0.0.1:31007".parse().unwrap()));
        let on_n2 = address(
            ExternalAccessType::NodePort,
            Some(&svc),
            Some(&member("n2")),
            &nodes,
        );
        assert_eq!(on_n2, Some("10.0.0.2:31007".parse().unwrap()));
        // A node that is gone: no address rather than a stale one.
        let lost = address(
            ExternalAccessType::NodePort,
            Some(&svc),
            Some(&member("n9")),
            &nodes,
        );
        assert_eq!(lost, None);
    }

    #[test]
    fn a_load_balancer_member_has_no_address_until_one_is_assigned() {
        let nodes = [node("n1", "10.0.0.1")];
        let pending = service(NODE_PORT.replace("NodePort", "LoadBalancer").as_str());
        let m = member("n1");
        assert_eq!(
            address(
                ExternalAccessType::LoadBalancer,
                Some(&pending),
                Some(&m),
                &nodes
            ),
            None
        );
        let assigned = service(BALANCED);
        assert_eq!(
            address(
                ExternalAccessType::LoadBalancer,
                Some(&assigned),
                Some(&m),
                &nodes
            ),
            Some("10.200.0.7:6379".parse().unwrap())
        );
    }

    #[test]
    fn a_service_that_selects_another_pod_gives_no_address() {
        let nodes = [node("n1", "10.0.0.1")];
        let svc = service(&BALANCED.replace("cache-0-0-0", "cache-0-0-1"));
        let m = member("n1");
        assert_eq!(
            address(
                ExternalAccessType::LoadBalancer,
                Some(&svc),
                Some(&m),
                &nodes
            ),
            None
        );
        assert_eq!(
            address(ExternalAccessType::LoadBalancer, None, Some(&m), &nodes),
            None
        );
    }

    #[test]
    fn the_announcement_is_the_external_address_or_reset_to_the_pods_own() {
        let on = announce_config(Some("10.200.0.7:6379".parse().unwrap()));
        assert_eq!(on[ANNOUNCE_CLIENT_IPV4], "10.200.0.7");
        assert_eq!(on[ANNOUNCE_CLIENT_IPV6], "");
        assert_eq!(on[ANNOUNCE_CLIENT_PORT], "6379");
        assert_eq!(on[ANNOUNCE_CLIENT_TLS_PORT], "6379");
        let off = announce_config(None);
        assert_eq!(off[ANNOUNCE_CLIENT_IPV4], "");
        assert_eq!(off[ANNOUNCE_CLIENT_PORT], "0");
        assert_eq!(off[ANNOUNCE_CLIENT_TLS_PORT], "0");
        assert_eq!(
            on.keys().collect::<Vec<_>>(),
            off.keys().collect::<Vec<_>>()
        );
        assert!(ANNOUNCE_KEYS.iter().all(|k| on.contains_key(*k)));
    }
}
