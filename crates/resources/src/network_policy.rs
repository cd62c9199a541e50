//! The members' NetworkPolicy, `<cluster>-members` (`spec.networkPolicy`):
//! ingress to the member pods is allowed only where a member needs it.
//!
//! - the client port (6379, TLS or not) from `clientsFrom` (any source when
//!   the list is empty);
//! - the client port (replication, the operator's probes between members)
//!   and the cluster bus (16379) from the cluster's own member pods;
//! - the client port from the operator's pods (their namespace and labels,
//!   which the Helm chart hands the operator); an operator outside the
//!   cluster has no pods to name, and then no rule names it;
//! - the exporter's port (9121), when `spec.exporter` is on, from
//!   `metricsFrom` (any source when empty).
//!
//! Egress is left alone: members dial only their peers and, for DNS, the
//! cluster's resolver, and a policy there would have to name the resolver.

use super::owned_meta;
use super::set_selector;
use api::ValidatedCluster;
use api::constants::{CLUSTER_BUS_PORT, EXPORTER_PORT, VALKEY_PORT};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// `<cluster>-members`.
pub fn network_policy_name(cluster: &str) -> String {
    format!("{cluster}-members")
}

/// The label Kubernetes puts on every namespace: its name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

fn tcp(ports: &[u16]) -> Option<Vec<NetworkPolicyPort>> {
    Some(
        ports
            .iter()
            .map(|p| NetworkPolicyPort {
                port: Some(IntOrString::Int(i32::from(*p))),
                protocol: Some("TCP".to_string()),
                end_port: None,
            })
            .collect(),
    )
}

/// `None` (no source named) when `peers` is empty: every source.
fn from(peers: &[NetworkPolicyPeer]) -> Option<Vec<NetworkPolicyPeer>> {
    (!peers.is_empty()).then(|| peers.to_vec())
}

fn selector(labels: BTreeMap<String, String>) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(labels),
        match_expressions: None,
    })
}

/// The policy of `c`, or `None` when it keeps none.
pub fn network_policy(c: &ValidatedCluster, owner: &OwnerReference) -> Option<NetworkPolicy> {
    let np = &c.network_policy;
    if !np.wanted() {
        return None;
    }
    let members = NetworkPolicyPeer {
        pod_selector: selector(set_selector(c.kind, &c.name)),
        ..Default::default()
    };
    let mut ingress = vec![
        NetworkPolicyIngressRule {
            from: from(&np.clients_from),
            ports: tcp(&[VALKEY_PORT]),
        },
        NetworkPolicyIngressRule {
            from: Some(vec![members]),
            ports: tcp(&[VALKEY_PORT, CLUSTER_BUS_PORT]),
        },
    ];
    if let Some(operator) = &np.operator {
        ingress.push(NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: selector(BTreeMap::from([(
                    NAMESPACE_NAME_LABEL.to_string(),
                    operator.namespace.clone(),
                )])),
                pod_selector: selector(operator.labels.clone()),
                ip_block: None,
            }]),
            ports: tcp(&[VALKEY_PORT]),
        });
    }
    if c.exporter.is_some() {
        ingress.push(NetworkPolicyIngressRule {
            from: from(&np.metrics_from),
            ports: tcp(&[EXPORTER_PORT]),
        });
    }
    Some(NetworkPolicy {
        metadata: owned_meta(c, owner, network_policy_name(&c.name)),
        spec: Some(NetworkPolicySpec {
            pod_selector: selector(set_selector(c.kind, &c.name)),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(ingress),
            egress: None,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, cluster_with_exporter, owner};
    use api::v1alpha1::OperatorPods;

    fn ports(rule: &NetworkPolicyIngressRule) -> Vec<i32> {
        rule.ports
            .iter()
            .flatten()
            .filter_map(|p| match p.port {
                Some(IntOrString::Int(n)) => Some(n),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn no_policy_unless_wanted() {
        let mut c = cluster("cache", 3, 1);
        assert!(network_policy(&c, &owner()).is_none());
        c.network_policy.enabled = Some(false);
        assert!(network_policy(&c, &owner()).is_none());
    }

    #[test]
    fn clients_peers_and_the_operator_reach_the_client_port_and_peers_the_bus() {
        let mut c = cluster("cache", 3, 1);
        c.network_policy.enabled = Some(true);
        c.network_policy.operator = Some(OperatorPods {
            namespace: "valkey-system".into(),
            labels: BTreeMap::from([("app.kubernetes.io/name".into(), "valkey-operator".into())]),
        });
        let p = network_policy(&c, &owner()).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("cache-members"));
        let spec = p.spec.unwrap();
        let selected = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(selected["valkey.rs/cluster"], "cache");
        assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
        let rules = spec.ingress.unwrap();
        assert_eq!(rules.len(), 3);
        // Clients: any source when clientsFrom is empty.
        assert_eq!(ports(&rules[0]), [6379]);
        assert!(rules[0].from.is_none());
        // Peers: this cluster's pods, client port and bus.
        assert_eq!(ports(&rules[1]), [6379, 16379]);
        let peer = &rules[1].from.as_ref().unwrap()[0];
        assert_eq!(
            peer.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["valkey.rs/cluster"],
            "cache"
        );
        assert!(
            peer.namespace_selector.is_none(),
            "peers are in the cluster's namespace"
        );
        // The operator: its namespace by name, its pods by label.
        assert_eq!(ports(&rules[2]), [6379]);
        let op = &rules[2].from.as_ref().unwrap()[0];
        assert_eq!(
            op.namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "valkey-system"
        );
        assert_eq!(
            op.pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app.kubernetes.io/name"],
            "valkey-operator"
        );
    }

    #[test]
    fn named_clients_and_scrapers_are_the_only_sources_of_their_ports() {
        let mut c = cluster_with_exporter("cache", 3, 1);
        c.network_policy.enabled = Some(true);
        let web = NetworkPolicyPeer {
            pod_selector: selector(BTreeMap::from([("app".into(), "web".into())])),
            ..Default::default()
        };
        let prom = NetworkPolicyPeer {
            namespace_selector: selector(BTreeMap::from([(
                NAMESPACE_NAME_LABEL.into(),
                "monitoring".into(),
            )])),
            ..Default::default()
        };
        c.network_policy.clients_from = vec![web.clone()];
        c.network_policy.metrics_from = vec![prom.clone()];
        let rules = network_policy(&c, &owner())
            .unwrap()
            .spec
            .unwrap()
            .ingress
            .unwrap();
        // No operator pods known (an operator outside the cluster): no rule.
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[0].from, Some(vec![web]));
        assert_eq!(ports(&rules[2]), [9121]);
        assert_eq!(rules[2].from, Some(vec![prom]));
    }
}
