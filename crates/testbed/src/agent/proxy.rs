//! The Service proxy: kube-proxy's job, for every node at once (the agent is
//! the only host). It watches Services and EndpointSlices and keeps an
//! nftables table `inet vk<id>-svc` that DNATs each Service's ClusterIP:port
//! to one of its ready endpoints, picked at random per connection
//! (`numgen random`), as kube-proxy's nftables mode does.
//!
//! - Pods reach a ClusterIP through their default route (the host); the DNAT
//!   happens in `prerouting`. The host itself reaches it through a route of the
//!   testbed's service range via its host interface; the DNAT happens in
//!   `output`. The range is the testbed's own (`10.<100+id>.0.0/24`), so
//!   several testbeds never claim the same ClusterIP.
//! - A pod that reaches itself through its Service (hairpin) is SNATed to the
//!   host address, so its reply goes back through the host and is un-NATed.
//! - A ClusterIP:port with no ready endpoint (or no such port) is refused
//!   (TCP reset, ICMP port unreachable), not black-holed.
//! - Headless Services (`clusterIP: None`) and ExternalName Services get no
//!   rules; NodePorts, LoadBalancers, session affinity, traffic policies and
//!   terminating-endpoint fallback are not implemented.
//! - The rules are rebuilt whole (one atomic `nft -f`) after every change,
//!   debounced; fault rules live in their own table and apply after the DNAT
//!   (filter hooks run after the nat ones), so a failed node's endpoints are
//!   unreachable through their Services too.

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

/// One ClusterIP:port of one Service and where it leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `namespace/name:port-name`, for comments and logs.
    pub service: String,
    pub cluster_ip: Ipv4Addr,
    pub proto: Proto,
    pub port: u16,
    /// Ready endpoints (address, target port), sorted, without duplicates.
    pub backends: Vec<(Ipv4Addr, u16)>,
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

/// The rules for `services` given every EndpointSlice of the cluster. A
/// Service port pairs with the EndpointSlice port of the same name (and
/// protocol), whose number the EndpointSlice controller resolved from the
/// port's `targetPort` per pod, so named target ports work as on a cluster.
pub fn rules(services: &[Arc<Service>], slices: &[Arc<EndpointSlice>]) -> Vec<Rule> {
    let mut out = Vec::new();
    let mut sorted: Vec<&Arc<Service>> = services.iter().collect();
    sorted.sort_by_key(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()));
    for svc in sorted {
        let ips = cluster_ips(svc);
        if ips.is_empty() {
            continue;
        }
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
        for sp in svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
        {
            let Some(proto) = Proto::parse(sp.protocol.as_deref()) else {
                continue;
            };
            let Ok(port) = u16::try_from(sp.port) else {
                continue;
            };
            let port_name = sp.name.clone().unwrap_or_default();
            let mut backends = BTreeSet::new();
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
                            backends.insert((ip, target));
                        }
                    }
                }
            }
            for ip in &ips {
                out.push(Rule {
                    service: format!("{ns}/{name}:{port_name}"),
                    cluster_ip: *ip,
                    proto,
                    port,
                    backends: backends.iter().copied().collect(),
                });
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
pub fn render_ruleset(table: &str, service_cidr: &str, host_ip: &str, rules: &[Rule]) -> String {
    let mut s = format!("table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n");
    // Numeric priorities: -100 is dstnat, 100 srcnat (the keywords are not
    // accepted for every hook by older nft).
    for hook in ["prerouting", "output"] {
        s.push_str(&format!(
            "  chain {hook} {{\n    type nat hook {hook} priority -100; policy accept;\n    ip daddr {service_cidr} jump services\n  }}\n"
        ));
    }
    s.push_str(&format!(
        "  chain postrouting {{\n    type nat hook postrouting priority 100; policy accept;\n    meta mark & {HAIRPIN_MARK} == {HAIRPIN_MARK} snat ip to {host_ip}\n  }}\n"
    ));
    // What is still addressed to the service range after the DNAT had no
    // endpoint: refuse it.
    for hook in ["output", "forward"] {
        s.push_str(&format!(
            "  chain reject-{hook} {{\n    type filter hook {hook} priority 0; policy accept;\n    ip daddr {service_cidr} meta l4proto tcp reject with tcp reset\n    ip daddr {service_cidr} reject\n  }}\n"
        ));
    }
    s.push_str("  chain services {\n");
    for (i, r) in rules.iter().enumerate() {
        if r.backends.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "    ip daddr {} {} dport {} goto svc-{i} comment \"{}\"\n",
            r.cluster_ip,
            r.proto.nft(),
            r.port,
            r.service.replace('"', "")
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

/// Keeps the table in sync with the API until the task is aborted.
pub async fn run(agent: Arc<super::Agent>) {
    use futures::StreamExt;
    use kube::api::Api;
    use kube::runtime::{WatchStreamExt, reflector, watcher};

    let id = agent.state.id;
    let table = table_name(id);
    let cidr = crate::topology::service_cidr(id);
    let host_ip = agent.state.host_ip.clone();
    // The host reaches ClusterIPs through its host interface, from its
    // host address (the DNAT in `output` then re-routes to the endpoint).
    let dev = crate::hostnet::host_interface(&agent.state.netns_prefix);
    let route: Vec<String> = ["route", "replace", &cidr, "dev", &dev, "src", &host_ip]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if let Err(e) = super::network::run(&agent.tools.ip, &route).await {
        tracing::warn!(error = %e, "service range route not added: the host cannot reach ClusterIPs");
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
        let rules = rules(&svc_store.state(), &slice_store.state());
        let script = render_ruleset(&table, &cidr, &host_ip, &rules);
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
        let r = rules(&services, &slices);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].service, "db/vk:client");
        assert_eq!(r[0].cluster_ip, Ipv4Addr::new(10, 103, 0, 20));
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
        let r = rules(&services, &slices);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].port, r[0].backends[0].1), (80, 8080));
        assert_eq!((r[1].port, r[1].backends[0].1), (16379, 16379));
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
        assert!(rules(&[headless, Arc::new(ext)], &slices).is_empty());
    }

    #[test]
    fn the_ruleset_dnats_at_random_over_the_backends_and_refuses_the_rest() {
        let r = vec![
            Rule {
                service: "default/kubernetes:https".into(),
                cluster_ip: Ipv4Addr::new(10, 103, 0, 1),
                proto: Proto::Tcp,
                port: 443,
                backends: vec![(Ipv4Addr::new(10, 103, 255, 1), 6443)],
            },
            Rule {
                service: "db/vk:client".into(),
                cluster_ip: Ipv4Addr::new(10, 103, 0, 20),
                proto: Proto::Tcp,
                port: 6379,
                backends: vec![
                    (Ipv4Addr::new(10, 103, 1, 4), 6379),
                    (Ipv4Addr::new(10, 103, 2, 5), 6379),
                ],
            },
            Rule {
                service: "db/empty:".into(),
                cluster_ip: Ipv4Addr::new(10, 103, 0, 21),
                proto: Proto::Udp,
                port: 53,
                backends: vec![],
            },
        ];
        let s = render_ruleset("vk3-svc", "10.103.0.0/24", "10.103.255.1", &r);
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
        assert!(s.contains("ip daddr 10.103.0.0/24 meta l4proto tcp reject with tcp reset"));
        assert_eq!(s.matches('{').count(), s.matches('}').count());
    }

    #[test]
    fn the_table_carries_the_testbed_prefix_so_down_removes_it() {
        assert_eq!(table_name(3), "vk3-svc");
        assert!(table_name(3).starts_with(&crate::topology::netns_prefix(3)));
        assert_ne!(table_name(3), crate::topology::nft_table(3));
    }
}
