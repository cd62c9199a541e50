// Over 600 lines: the node agent's Service proxy, one flow per Service type, and its tests.
//! The Service proxy: kube-proxy's job, for every node at once (the agent is
//! the only host). It watches Services and EndpointSlices and keeps an
//! nftables table `inet vk<id>-svc` that DNATs each Service's frontends to one
//! of its ready endpoints, picked at random per connection (`numgen random`),
//! as kube-proxy's nftables mode does. The frontends:
//!
//! - ClusterIP:port. Pods reach it through their default route (the host); the
//!   DNAT happens in `prerouting`. The host itself reaches it through a route
//!   of the testbed's service range via its host interface; the DNAT happens
//!   in `output`. The range is the testbed's own (`10.<100+id>.0.0/24`), so
//!   several testbeds never claim the same ClusterIP.
//! - nodeAddress:nodePort of `NodePort` and `LoadBalancer` Services, on every
//!   node's InternalIP (which no interface holds: the DNAT happens before any
//!   routing, and the host routes the node addresses through its host
//!   interface like the service range). `externalTrafficPolicy: Local` keeps
//!   a node's nodePort to the endpoints on that node (dropped when it has
//!   none while others do, as kube-proxy does). No SNAT either way: every
//!   node is this one host, so replies come back through it and the client's
//!   address is kept.
//! - loadBalancerIP:port of `LoadBalancer` Services, for each address in
//!   `status.loadBalancer.ingress` (written by `loadbalancer` from the pool
//!   `10.<100+id>.254.0/24`), to every ready endpoint.
//! - A pod that reaches itself through its Service (hairpin) is SNATed to the
//!   host address, so its reply goes back through the host and is un-NATed.
//! - A frontend with no ready endpoint (or no such port) is refused (TCP
//!   reset, ICMP port unreachable), not black-holed; so is anything else
//!   addressed to a node address or the pool.
//! - What arrives from the outside namespace (`testbed outside`) passes only
//!   if a Service's DNAT took it: a pod address or a ClusterIP is refused even
//!   if a route to it is added there.
//! - Headless Services (`clusterIP: None`) and ExternalName Services get no
//!   rules; session affinity, `internalTrafficPolicy`, health-check nodePorts
//!   and terminating-endpoint fallback are not implemented.
//! - The rules are rebuilt whole (one atomic `nft -f`) after every change,
//!   debounced; fault rules live in their own table and apply after the DNAT
//!   (filter hooks run after the nat ones), so a failed node's endpoints are
//!   unreachable through their Services too (and its address is cut before
//!   the DNAT, see `faults`).

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

/// Label linking an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Packet mark of hairpin connections (SNATed in postrouting).
const HAIRPIN_MARK: &str = "0x00004000";

/// A transport protocol kube-proxy handles here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    fn parse(p: Option<&str>) -> Option<Proto> {
        match p.unwrap_or("TCP") {
            "TCP" => Some(Proto::Tcp),
            "UDP" => Some(Proto::Udp),
            _ => None,
        }
    }

    fn nft(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// Where a rule catches a Service's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// A ClusterIP or a load-balancer address, and the Service port.
    Ip(Ipv4Addr, u16),
    /// A nodePort on every node address (`externalTrafficPolicy: Cluster`).
    NodePort(u16),
    /// A nodePort on one node address (`externalTrafficPolicy: Local`: only
    /// the endpoints on that node).
    NodePortOn(Ipv4Addr, u16),
}

/// One frontend of one Service port and where it leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `namespace/name:port-name`, for comments and logs.
    pub service: String,
    pub frontend: Frontend,
    pub proto: Proto,
    /// Ready endpoints (address, target port), sorted, without duplicates.
    pub backends: Vec<(Ipv4Addr, u16)>,
    /// With no backend: drop instead of refusing, as kube-proxy does for a
    /// `Local` nodePort on a node without endpoints while the Service has
    /// some elsewhere (the load balancer in front is meant to skip it).
    pub drop_when_empty: bool,
}

/// What the rules need to know about the testbed's addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Net {
    /// The nftables table, `vk<id>-svc`.
    pub table: String,
    /// The ClusterIP range.
    pub service_cidr: String,
    /// The load-balancer pool.
    pub lb_pool: String,
    /// The host address (hairpin SNAT).
    pub host_ip: String,
    /// The host end of the outside namespace's veth: what comes from it
    /// passes only through a Service's DNAT.
    pub outside_link: String,
    /// Every node's name and InternalIP: nodePorts answer there.
    pub nodes: Vec<(String, Ipv4Addr)>,
}

impl Net {
    /// The addresses of the testbed described by `state`.
    pub fn of(state: &crate::state::TestbedState) -> Net {
        let id = state.id;
        Net {
            table: table_name(id),
            service_cidr: crate::topology::service_cidr(id),
            lb_pool: crate::topology::lb_pool_cidr(id),
            host_ip: state.host_ip.clone(),
            outside_link: crate::topology::outside_link(id),
            nodes: state
                .nodes
                .iter()
                .filter_map(|n| {
                    super::network::Cidr::parse(&n.pod_cidr)
                        .map(|c| (n.name.clone(), c.node_addr()))
                })
                .collect(),
        }
    }
}

/// The ClusterIPs of a Service that get rules: none for headless and
/// ExternalName Services, none that are not IPv4.
fn cluster_ips(svc: &Service) -> Vec<Ipv4Addr> {
    let Some(spec) = &svc.spec else {
        return Vec::new();
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let mut ips: Vec<String> = spec.cluster_ips.clone().unwrap_or_default();
    if ips.is_empty()
        && let Some(ip) = &spec.cluster_ip
    {
        ips.push(ip.clone());
    }
    let mut out: Vec<Ipv4Addr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
    out.dedup();
    out
}

/// Whether an endpoint takes new connections: `ready` unset counts as ready
/// (the API's rule); a terminating endpoint has `ready: false`.
fn endpoint_ready(e: &k8s_openapi::api::discovery::v1::Endpoint) -> bool {
    e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true)
}

/// The load-balancer addresses kube-proxy routes for a Service: the IPv4
/// `status.loadBalancer.ingress[].ip` of a `LoadBalancer` Service (none once
/// its type changed, even before the status is cleared).
fn lb_ips(svc: &Service) -> Vec<Ipv4Addr> {
    if svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
        return Vec::new();
    }
    let mut out: Vec<Ipv4Addr> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref().and_then(|ip| ip.parse().ok()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The rules for `services` given every EndpointSlice of the cluster and the
/// nodes (name, InternalIP). A Service port pairs with the EndpointSlice port
/// of the same name (and protocol), whose number the EndpointSlice controller
/// resolved from the port's `targetPort` per pod, so named target ports work
/// as on a cluster. Each port gets a rule per ClusterIP, per load-balancer
/// address (every ready endpoint, whatever the traffic policy: the balancer
/// in front sends only to nodes that have one) and for its nodePort.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn rules(
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
    nodes: &[(String, Ipv4Addr)],
) -> Vec<Rule> {
    let mut out = Vec::new();
    let mut sorted: Vec<&Arc<Service>> = services.iter().collect();
    sorted.sort_by_key(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()));
    for svc in sorted {
        let Some(spec) = &svc.spec else { continue };
        let svc_type = spec.type_.as_deref().unwrap_or("ClusterIP");
        if svc_type == "ExternalName" {
            continue;
        }
        let ips = cluster_ips(svc);
        let lbs = lb_ips(svc);
        let exposes_node_ports = matches!(svc_type, "NodePort" | "LoadBalancer");
        let local = spec.external_traffic_policy.as_deref() == Some("Local");
        let ns = svc.metadata.namespace.clone().unwrap_or_default();
        let name = svc.metadata.name.clone().unwrap_or_default();
        let own: Vec<&Arc<EndpointSlice>> = slices
            .iter()
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(ns.as_str())
                    && s.address_type == "IPv4"
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(SERVICE_NAME_LABEL))
                        == Some(&name)
            })
            .collect();
        for sp in spec.ports.iter().flatten() {
            let Some(proto) = Proto::parse(sp.protocol.as_deref()) else {
                continue;
            };
            let Ok(port) = u16::try_from(sp.port) else {
                continue;
            };
            let port_name = sp.name.clone().unwrap_or_default();
            // (address, target port, node name) of every ready endpoint.
            let mut endpoints: BTreeSet<(Ipv4Addr, u16, Option<String>)> = BTreeSet::new();
            for slice in &own {
                let Some(target) = slice.ports.iter().flatten().find_map(|p| {
                    let same_name = p.name.clone().unwrap_or_default() == port_name;
                    let same_proto = Proto::parse(p.protocol.as_deref()) == Some(proto);
                    (same_name && same_proto)
                        .then_some(p.port)
                        .flatten()
                        .and_then(|n| u16::try_from(n).ok())
                }) else {
                    continue;
                };
                for e in slice
                    .endpoints
                    .iter()
                    .flatten()
                    .filter(|e| endpoint_ready(e))
                {
                    for a in &e.addresses {
                        if let Ok(ip) = a.parse::<Ipv4Addr>() {
                            endpoints.insert((ip, target, e.node_name.clone()));
                        }
                    }
                }
            }
            let backends_where = |on: Option<&str>| -> Vec<(Ipv4Addr, u16)> {
                let mut b: Vec<(Ipv4Addr, u16)> = endpoints
                    .iter()
                    .filter(|(_, _, n)| on.is_none() || n.as_deref() == on)
                    .map(|(ip, p, _)| (*ip, *p))
                    .collect();
                b.dedup();
                b
            };
            let all = backends_where(None);
            let service = format!("{ns}/{name}:{port_name}");
            let rule = |frontend, backends: Vec<(Ipv4Addr, u16)>, drop_when_empty| Rule {
                service: service.clone(),
                frontend,
                proto,
                backends,
                drop_when_empty,
            };
            for ip in ips.iter().chain(&lbs) {
                out.push(rule(Frontend::Ip(*ip, port), all.clone(), false));
            }
            let node_port = sp.node_port.and_then(|n| u16::try_from(n).ok());
            match node_port {
                Some(np) if exposes_node_ports && np > 0 => {
                    if local {
                        for (node, addr) in nodes {
                            out.push(rule(
                                Frontend::NodePortOn(*addr, np),
                                backends_where(Some(node)),
                                !all.is_empty(),
                            ));
                        }
                    } else {
                        out.push(rule(Frontend::NodePort(np), all.clone(), false));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// The name of the table (`vk<id>-svc`): the testbed's network prefix, so
/// `down` removes it with the rest.
pub fn table_name(id: u8) -> String {
    format!("{}svc", crate::topology::netns_prefix(id))
}

/// The whole table as an `nft -f` script that replaces the previous one
/// atomically.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn render_ruleset(net: &Net, rules: &[Rule]) -> String {
    let table = &net.table;
    let set = |v: &[String]| format!("{{ {} }}", v.join(", "));
    let node_addrs: Vec<String> = net.nodes.iter().map(|(_, a)| a.to_string()).collect();
    let nodes = (!node_addrs.is_empty()).then(|| set(&node_addrs));
    // Everything the proxy answers for before any DNAT: the ClusterIPs, the
    // pool and the node addresses.
    let mut all = vec![net.service_cidr.clone(), net.lb_pool.clone()];
    all.extend(node_addrs.iter().cloned());
    let frontends = set(&all);
    let mut s = format!("table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n");
    // Numeric priorities: -100 is dstnat, 100 srcnat (the keywords are not
    // accepted for every hook by older nft).
    // ClusterIPs are not DNATed for the outside namespace, so the reject
    // below refuses them even if a route to the range is added there.
    for hook in ["prerouting", "output"] {
        s.push_str(&format!(
            "  chain {hook} {{\n    type nat hook {hook} priority -100; policy accept;\n"
        ));
        if hook == "prerouting" {
            s.push_str(&format!(
                "    iifname != \"{}\" ip daddr {} jump services\n    ip daddr {} jump services\n",
                net.outside_link, net.service_cidr, net.lb_pool
            ));
        } else {
            s.push_str(&format!(
                "    ip daddr {{ {}, {} }} jump services\n",
                net.service_cidr, net.lb_pool
            ));
        }
        if let Some(n) = &nodes {
            s.push_str(&format!("    ip daddr {n} jump nodeports\n"));
        }
        s.push_str("  }\n");
    }
    s.push_str(&format!(
        "  chain postrouting {{\n    type nat hook postrouting priority 100; policy accept;\n    meta mark & {HAIRPIN_MARK} == {HAIRPIN_MARK} snat ip to {}\n  }}\n",
        net.host_ip
    ));
    // What is still addressed to a frontend after the DNAT had no endpoint:
    // refuse it. What the outside namespace sends must have gone through a
    // Service's DNAT (its routes allow nothing else, this holds if someone
    // adds one).
    for hook in ["output", "forward", "input"] {
        s.push_str(&format!(
            "  chain reject-{hook} {{\n    type filter hook {hook} priority 0; policy accept;\n"
        ));
        if hook != "input" {
            s.push_str(&format!(
                "    ip daddr {frontends} meta l4proto tcp reject with tcp reset\n    ip daddr {frontends} reject\n"
            ));
        }
        if hook != "output" {
            s.push_str(&format!(
                "    iifname \"{}\" ct status & dnat == 0 reject with icmp type admin-prohibited\n",
                net.outside_link
            ));
        }
        s.push_str("  }\n");
    }
    let comment = |r: &Rule| r.service.replace('"', "");
    s.push_str("  chain services {\n");
    for (i, r) in rules.iter().enumerate() {
        let Frontend::Ip(ip, port) = r.frontend else {
            continue;
        };
        if r.backends.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "    ip daddr {ip} {} dport {port} goto svc-{i} comment \"{}\"\n",
            r.proto.nft(),
            comment(r)
        ));
    }
    s.push_str("  }\n  chain nodeports {\n");
    for (i, r) in rules.iter().enumerate() {
        let (on, port) = match r.frontend {
            Frontend::Ip(..) => continue,
            Frontend::NodePort(port) => (String::new(), port),
            Frontend::NodePortOn(addr, port) => (format!("ip daddr {addr} "), port),
        };
        let verdict = if !r.backends.is_empty() {
            format!("goto svc-{i}")
        } else if r.drop_when_empty {
            "drop".to_string()
        } else {
            continue;
        };
        s.push_str(&format!(
            "    {on}{} dport {port} {verdict} comment \"{}\"\n",
            r.proto.nft(),
            comment(r)
        ));
    }
    s.push_str("  }\n");
    for (i, r) in rules.iter().enumerate() {
        if r.backends.is_empty() {
            continue;
        }
        s.push_str(&format!("  chain svc-{i} {{\n"));
        if r.backends.len() == 1 {
            s.push_str(&format!("    goto ep-{i}-0\n"));
        } else {
            let arms: Vec<String> = (0..r.backends.len())
                .map(|j| format!("{j} : goto ep-{i}-{j}"))
                .collect();
            s.push_str(&format!(
                "    numgen random mod {} vmap {{ {} }}\n",
                r.backends.len(),
                arms.join(", ")
            ));
        }
        s.push_str("  }\n");
        for (j, (ip, port)) in r.backends.iter().enumerate() {
            s.push_str(&format!(
                "  chain ep-{i}-{j} {{\n    ip saddr {ip} meta mark set meta mark | {HAIRPIN_MARK}\n    meta l4proto {} dnat ip to {ip}:{port}\n  }}\n",
                r.proto.nft()
            ));
        }
    }
    s.push_str("}\n");
    s
}

/// The host's routes to what the proxy answers for, through its host
/// interface and from its host address, so that host-originated connections
/// reach the DNAT in `output` (which then re-routes to the endpoint): the
/// service range, the load-balancer pool and every node address.
pub fn host_routes(net: &Net, dev: &str) -> Vec<Vec<String>> {
    let mut dests = vec![net.service_cidr.clone(), net.lb_pool.clone()];
    dests.extend(net.nodes.iter().map(|(_, a)| format!("{a}/32")));
    dests
        .into_iter()
        .map(|d| {
            ["route", "replace", &d, "dev", dev, "src", &net.host_ip]
                .iter()
                .map(|s| s.to_string())
                .collect()
        })
        .collect()
}

/// Keeps the table in sync with the API until the task is aborted.
pub async fn run(agent: Arc<super::Agent>) {
    use futures::StreamExt;
    use kube::api::Api;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let net = Net::of(&agent.state);
    let dev = crate::hostnet::host_interface(&agent.state.netns_prefix);
    for route in host_routes(&net, &dev) {
        if let Err(e) = super::network::run(&agent.tools.ip, &route).await {
            tracing::warn!(error = %e, "route not added: the host cannot reach some Service addresses");
        }
    }

    let (svc_store, svc_writer) = reflector::store::<Service>();
    let (slice_store, slice_writer) = reflector::store::<EndpointSlice>();
    let svcs = reflector(
        svc_writer,
        watcher(
            Api::<Service>::all(agent.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|_| ());
    let slices = reflector(
        slice_writer,
        watcher(
            Api::<EndpointSlice>::all(agent.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|_| ());
    let mut events = std::pin::pin!(futures::stream::select(svcs, slices));
    let mut applied = String::new();
    let mut resync = tokio::time::interval(Duration::from_secs(10));
    loop {
        tokio::select! {
            ev = events.next() => if ev.is_none() { break },
            _ = resync.tick() => applied.clear(),
        }
        // Let a burst of changes (a rollout, a StatefulSet starting) settle.
        let settle = tokio::time::sleep(Duration::from_millis(50));
        tokio::pin!(settle);
        loop {
            tokio::select! {
                _ = &mut settle => break,
                ev = events.next() => if ev.is_none() { break },
            }
        }
        let rules = rules(&svc_store.state(), &slice_store.state(), &net.nodes);
        let script = render_ruleset(&net, &rules);
        if script == applied {
            continue;
        }
        match super::faults::load_ruleset(&agent.tools.nft, &script).await {
            Ok(()) => {
                tracing::debug!(rules = rules.len(), "service rules applied");
                applied = script;
            }
            Err(e) => tracing::warn!(error = %e, "service rules not applied"),
        }
    }
    tracing::error!("service watch ended");
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn nodes() -> Vec<(String, Ipv4Addr)> {
        vec![
            ("node-1a-1".into(), Ipv4Addr::new(10, 103, 1, 1)),
            ("node-1a-2".into(), Ipv4Addr::new(10, 103, 2, 1)),
        ]
    }

    fn net() -> Net {
        Net {
            table: "vk3-svc".into(),
            service_cidr: "10.103.0.0/24".into(),
            lb_pool: "10.103.254.0/24".into(),
            host_ip: "10.103.255.1".into(),
            outside_link: "vk3-out".into(),
            nodes: nodes(),
        }
    }

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> Arc<Service> {
        Arc::new(Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                cluster_ips: Some(vec![ip.into()]),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p, proto)| ServicePort {
                            name: (!n.is_empty()).then(|| n.to_string()),
                            port: *p,
                            protocol: Some(proto.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        })
    }

    fn slice(
        ns: &str,
        svc: &str,
        ports: &[(&str, i32)],
        eps: &[(&str, Option<bool>)],
    ) -> Arc<EndpointSlice> {
        Arc::new(EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(format!("{svc}-abc")),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), svc.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(
                eps.iter()
                    .map(|(a, ready)| Endpoint {
                        addresses: vec![a.to_string()],
                        conditions: Some(EndpointConditions {
                            ready: *ready,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| EndpointPort {
                        name: Some(n.to_string()),
                        port: Some(*p),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        })
    }

    #[test]
    fn only_ready_endpoints_of_the_services_own_slices_are_backends() {
        let services = [svc("db", "vk", "10.103.0.20", &[("client", 6379, "TCP")])];
        let slices = [
            slice(
                "db",
                "vk",
                &[("client", 6379)],
                &[
                    ("10.103.2.5", Some(true)),
                    ("10.103.1.4", None),
                    ("10.103.3.9", Some(false)),
                ],
            ),
            // Same name, other namespace: not ours.
            slice(
                "other",
                "vk",
                &[("client", 6379)],
                &[("10.103.4.4", Some(true))],
            ),
        ];
        let r = rules(&services, &slices, &nodes());
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].service, "db/vk:client");
        assert_eq!(
            r[0].frontend,
            Frontend::Ip(Ipv4Addr::new(10, 103, 0, 20), 6379)
        );
        assert_eq!(
            r[0].backends,
            [
                (Ipv4Addr::new(10, 103, 1, 4), 6379),
                (Ipv4Addr::new(10, 103, 2, 5), 6379)
            ]
        );
    }

    #[test]
    fn a_service_port_takes_the_slice_port_of_its_name_which_resolves_named_target_ports() {
        // Service port 80 "web" with targetPort "http": the slice says 8080.
        let services = [svc(
            "a",
            "s",
            "10.103.0.30",
            &[("web", 80, "TCP"), ("bus", 16379, "TCP")],
        )];
        let slices = [slice(
            "a",
            "s",
            &[("web", 8080), ("bus", 16379)],
            &[("10.103.1.2", Some(true))],
        )];
        let r = rules(&services, &slices, &nodes());
        assert_eq!(r.len(), 2);
        let ip = Ipv4Addr::new(10, 103, 0, 30);
        assert_eq!(
            (r[0].frontend, r[0].backends[0].1),
            (Frontend::Ip(ip, 80), 8080)
        );
        assert_eq!(
            (r[1].frontend, r[1].backends[0].1),
            (Frontend::Ip(ip, 16379), 16379)
        );
    }

    #[test]
    fn headless_and_external_name_services_get_no_rules() {
        let headless = svc("a", "h", "None", &[("client", 6379, "TCP")]);
        let mut ext = (*svc("a", "e", "", &[("x", 1, "TCP")])).clone();
        ext.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        let slices = [slice(
            "a",
            "h",
            &[("client", 6379)],
            &[("10.103.1.2", None)],
        )];
        assert!(rules(&[headless, Arc::new(ext)], &slices, &nodes()).is_empty());
    }

    #[test]
    fn the_ruleset_dnats_at_random_over_the_backends_and_refuses_the_rest() {
        let rule = |service: &str, frontend, proto, backends: Vec<(Ipv4Addr, u16)>| Rule {
            service: service.into(),
            frontend,
            proto,
            backends,
            drop_when_empty: false,
        };
        let r = vec![
            rule(
                "default/kubernetes:https",
                Frontend::Ip(Ipv4Addr::new(10, 103, 0, 1), 443),
                Proto::Tcp,
                vec![(Ipv4Addr::new(10, 103, 255, 1), 6443)],
            ),
            rule(
                "db/vk:client",
                Frontend::Ip(Ipv4Addr::new(10, 103, 0, 20), 6379),
                Proto::Tcp,
                vec![
                    (Ipv4Addr::new(10, 103, 1, 4), 6379),
                    (Ipv4Addr::new(10, 103, 2, 5), 6379),
                ],
            ),
            rule(
                "db/empty:",
                Frontend::Ip(Ipv4Addr::new(10, 103, 0, 21), 53),
                Proto::Udp,
                vec![],
            ),
        ];
        let s = render_ruleset(&net(), &r);
        assert!(
            s.starts_with("table inet vk3-svc\ndelete table inet vk3-svc\ntable inet vk3-svc {\n")
        );
        assert!(s.contains("type nat hook prerouting priority -100;"));
        assert!(s.contains("type nat hook output priority -100;"));
        assert!(s.contains(
            "ip daddr 10.103.0.1 tcp dport 443 goto svc-0 comment \"default/kubernetes:https\"\n"
        ));
        assert!(s.contains("  chain svc-0 {\n    goto ep-0-0\n  }\n"));
        assert!(s.contains("meta l4proto tcp dnat ip to 10.103.255.1:6443\n"));
        assert!(s.contains("numgen random mod 2 vmap { 0 : goto ep-1-0, 1 : goto ep-1-1 }"));
        assert!(s.contains("  chain ep-1-1 {\n    ip saddr 10.103.2.5 meta mark set meta mark | 0x00004000\n    meta l4proto tcp dnat ip to 10.103.2.5:6379\n  }\n"));
        assert!(s.contains("snat ip to 10.103.255.1"));
        // No endpoints: no DNAT, so the reject chains refuse it.
        assert!(!s.contains("10.103.0.21"));
        let frontends = "{ 10.103.0.0/24, 10.103.254.0/24, 10.103.1.1, 10.103.2.1 }";
        assert!(s.contains(&format!(
            "ip daddr {frontends} meta l4proto tcp reject with tcp reset"
        )));
        assert_eq!(s.matches('{').count(), s.matches('}').count());
    }

    #[test]
    fn node_ports_and_the_pool_are_caught_before_routing_from_pods_the_host_and_outside() {
        let s = render_ruleset(&net(), &[]);
        assert!(s.contains(
            "chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n    iifname != \"vk3-out\" ip daddr 10.103.0.0/24 jump services\n    ip daddr 10.103.254.0/24 jump services\n    ip daddr { 10.103.1.1, 10.103.2.1 } jump nodeports\n"
        ));
        assert!(s.contains(
            "chain output {\n    type nat hook output priority -100; policy accept;\n    ip daddr { 10.103.0.0/24, 10.103.254.0/24 } jump services\n    ip daddr { 10.103.1.1, 10.103.2.1 } jump nodeports\n"
        ));
        // From the outside namespace only what a DNAT took is forwarded or
        // delivered.
        let outside =
            "iifname \"vk3-out\" ct status & dnat == 0 reject with icmp type admin-prohibited";
        assert_eq!(s.matches(outside).count(), 2);
        assert!(s.contains(&format!(
            "chain reject-input {{\n    type filter hook input priority 0; policy accept;\n    {outside}\n  }}"
        )));
    }

    #[test]
    fn a_node_port_answers_on_every_node_and_a_local_one_only_where_its_endpoints_run() {
        let mut cluster = (*svc("db", "np", "10.103.0.40", &[("client", 6379, "TCP")])).clone();
        let spec = cluster.spec.as_mut().unwrap();
        spec.type_ = Some("NodePort".into());
        spec.ports.as_mut().unwrap()[0].node_port = Some(30001);
        let mut local = cluster.clone();
        local.metadata.name = Some("np-local".into());
        let spec = local.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.cluster_ip = Some("10.103.0.41".into());
        spec.cluster_ips = Some(vec!["10.103.0.41".into()]);
        spec.ports.as_mut().unwrap()[0].node_port = Some(30002);
        let eps = &[("10.103.1.7", Some(true))];
        let mut s1 = (*slice("db", "np", &[("client", 6379)], eps)).clone();
        let mut s2 = (*slice("db", "np-local", &[("client", 6379)], eps)).clone();
        for s in [&mut s1, &mut s2] {
            s.endpoints.as_mut().unwrap()[0].node_name = Some("node-1a-1".into());
        }
        let r = rules(
            &[Arc::new(cluster), Arc::new(local)],
            &[Arc::new(s1), Arc::new(s2)],
            &nodes(),
        );
        let ep = vec![(Ipv4Addr::new(10, 103, 1, 7), 6379)];
        type Seen = (Frontend, Vec<(Ipv4Addr, u16)>, bool);
        let np: Vec<Seen> = r
            .iter()
            .filter(|r| !matches!(r.frontend, Frontend::Ip(..)))
            .map(|r| (r.frontend, r.backends.clone(), r.drop_when_empty))
            .collect();
        assert_eq!(
            np,
            [
                (Frontend::NodePort(30001), ep.clone(), false),
                (
                    Frontend::NodePortOn(Ipv4Addr::new(10, 103, 1, 1), 30002),
                    ep.clone(),
                    true
                ),
                (
                    Frontend::NodePortOn(Ipv4Addr::new(10, 103, 2, 1), 30002),
                    vec![],
                    true
                ),
            ]
        );
        let s = render_ruleset(&net(), &r);
        assert!(s.contains("    tcp dport 30001 goto svc-1 comment \"db/np:client\"\n"));
        assert!(s.contains("    ip daddr 10.103.1.1 tcp dport 30002 goto svc-3 comment"));
        assert!(s.contains("    ip daddr 10.103.2.1 tcp dport 30002 drop comment"));
    }

    #[test]
    fn a_load_balancer_routes_its_ingress_addresses_and_its_node_port_until_its_type_changes() {
        use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
        let mut lb = (*svc("db", "lb", "10.103.0.50", &[("client", 6379, "TCP")])).clone();
        let spec = lb.spec.as_mut().unwrap();
        spec.type_ = Some("LoadBalancer".into());
        spec.external_traffic_policy = Some("Local".into());
        spec.ports.as_mut().unwrap()[0].node_port = Some(31000);
        lb.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some("10.103.254.9".into()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        let mut sl = (*slice("db", "lb", &[("client", 6379)], &[("10.103.2.8", None)])).clone();
        sl.endpoints.as_mut().unwrap()[0].node_name = Some("node-1a-2".into());
        let slices = [Arc::new(sl)];
        let r = rules(&[Arc::new(lb.clone())], &slices, &nodes());
        let ep = vec![(Ipv4Addr::new(10, 103, 2, 8), 6379)];
        let lb_rule = r
            .iter()
            .find(|r| r.frontend == Frontend::Ip(Ipv4Addr::new(10, 103, 254, 9), 6379))
            .expect("a rule for the ingress address");
        // Local: the balancer address still reaches every ready endpoint.
        assert_eq!(lb_rule.backends, ep);
        assert!(r.iter().any(|r| r.frontend
            == Frontend::NodePortOn(Ipv4Addr::new(10, 103, 2, 1), 31000)
            && r.backends == ep));
        // Type ClusterIP now, status not cleared yet: only the ClusterIP.
        lb.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let r = rules(&[Arc::new(lb)], &slices, &nodes());
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0].frontend,
            Frontend::Ip(Ipv4Addr::new(10, 103, 0, 50), 6379)
        );
    }

    #[test]
    fn the_host_routes_the_service_range_the_pool_and_each_node_address() {
        let routes: Vec<String> = host_routes(&net(), "vk3-host")
            .into_iter()
            .map(|r| r.join(" "))
            .collect();
        assert_eq!(
            routes,
            [
                "route replace 10.103.0.0/24 dev vk3-host src 10.103.255.1",
                "route replace 10.103.254.0/24 dev vk3-host src 10.103.255.1",
                "route replace 10.103.1.1/32 dev vk3-host src 10.103.255.1",
                "route replace 10.103.2.1/32 dev vk3-host src 10.103.255.1",
            ]
        );
    }

    #[test]
    fn the_table_carries_the_testbed_prefix_so_down_removes_it() {
        assert_eq!(table_name(3), "vk3-svc");
        assert!(table_name(3).starts_with(&crate::topology::netns_prefix(3)));
        assert_ne!(table_name(3), crate::topology::nft_table(3));
    }
}
