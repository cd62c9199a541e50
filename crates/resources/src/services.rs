//! The headless Service (stable DNS for every member, ready or not), the
//! client Service (where cluster clients connect first; any member redirects
//! them to the right shard) and, with `spec.externalAccess`, one Service per
//! member for clients outside Kubernetes.

use super::owned_meta;
use super::{
    client_service_name, external_service_name, headless_service_name, member_selector,
    read_only_service_name, set_selector,
};
use api::constants::{CLUSTER_BUS_PORT, LABEL_ROLE, ROLE_PRIMARY, ROLE_REPLICA, VALKEY_PORT};
use api::v1alpha1::{ExternalAccess, ExternalAccessType};
use api::{SetKind, ValidatedCluster};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn port(name: &str, p: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: i32::from(p),
        target_port: Some(IntOrString::Int(i32::from(p))),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// `<cluster>-headless`: publishes not-ready addresses, because members must
/// find each other (and the operator them) before they are Ready.
pub fn headless(c: &ValidatedCluster, owner: &OwnerReference) -> Service {
    Service {
        metadata: owned_meta(c, owner, headless_service_name(&c.name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(set_selector(c.kind, &c.name)),
            ports: Some(if c.kind == SetKind::Replication {
                vec![port("client", VALKEY_PORT)]
            } else {
                vec![port("client", VALKEY_PORT), port("bus", CLUSTER_BUS_PORT)]
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// `<cluster>`: the client port of every Ready member; of a replication
/// set, of its primary only (the one pod the operator labels
/// `valkey.rs/role=primary`).
pub fn client(c: &ValidatedCluster, owner: &OwnerReference) -> Service {
    let mut selector = set_selector(c.kind, &c.name);
    if c.kind == SetKind::Replication {
        selector.insert(LABEL_ROLE.to_string(), ROLE_PRIMARY.to_string());
    }
    Service {
        metadata: ObjectMeta {
            annotations: (!c.client_service.annotations.is_empty())
                .then(|| c.client_service.annotations.clone()),
            ..owned_meta(c, owner, client_service_name(&c.name))
        },
        spec: Some(ServiceSpec {
            type_: Some(c.client_service.type_.as_str().into()),
            selector: Some(selector),
            ports: Some(vec![port("client", VALKEY_PORT)]),
            ..Default::default()
        }),
        status: None,
    }
}

/// `<replication>-ro`: the client port of a replication set's replicas that
/// are in sync with the primary (labelled `valkey.rs/role=replica` by the
/// operator) and Ready.
pub fn read_only(c: &ValidatedCluster, owner: &OwnerReference) -> Service {
    let mut selector = set_selector(c.kind, &c.name);
    selector.insert(LABEL_ROLE.to_string(), ROLE_REPLICA.to_string());
    Service {
        metadata: owned_meta(c, owner, read_only_service_name(&c.name)),
        spec: Some(ServiceSpec {
            type_: Some(c.client_service.type_.as_str().into()),
            selector: Some(selector),
            ports: Some(vec![port("client", VALKEY_PORT)]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The label the StatefulSet controller puts on every pod: its name.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";

/// `<member>-external`: the client port of exactly one pod, `pod` (the
/// member proper, not a move's new copy: both carry the member's labels, and
/// a connection must land on the node that announced the address).
///
/// Not-ready addresses are published: a member announces this address as
/// soon as it is known, and clients told so must reach it (a replica that
/// is still syncing answers with MOVED). externalTrafficPolicy stays
/// Cluster: with NodePort the member announces the node its pod runs on,
/// and after the pod moved the old node still forwards to it until clients
/// have followed the new announcement (Local would drop them meanwhile);
/// Valkey does not need the clients' source addresses
/// (`spec.externalAccess.externalTrafficPolicy: Local` when the user wants them).
pub fn external(
    c: &ValidatedCluster,
    owner: &OwnerReference,
    access: &ExternalAccess,
    (shard, member): (u32, u32),
    pod: &str,
) -> Service {
    let mut selector = member_selector(&c.name, shard, member);
    selector.insert(POD_NAME_LABEL.to_string(), pod.to_string());
    let mut metadata = owned_meta(c, owner, external_service_name(&c.name, shard, member));
    if let Some(labels) = metadata.labels.as_mut() {
        labels.insert(api::constants::LABEL_SHARD.to_string(), shard.to_string());
        labels.insert(api::constants::LABEL_MEMBER.to_string(), member.to_string());
    }
    metadata.annotations = (!access.annotations.is_empty()).then(|| access.annotations.clone());
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(access.type_.as_str().into()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            external_traffic_policy: Some(
                access
                    .external_traffic_policy
                    .map_or("Cluster", |p| p.as_str())
                    .into(),
            ),
            load_balancer_source_ranges: (access.type_ == ExternalAccessType::LoadBalancer
                && !access.load_balancer_source_ranges.is_empty())
            .then(|| access.load_balancer_source_ranges.clone()),
            ports: Some(vec![port("client", VALKEY_PORT)]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, owner};

    #[test]
    fn the_headless_service_publishes_members_before_they_are_ready() {
        let s = headless(&cluster("cache", 3, 1), &owner());
        assert_eq!(s.metadata.name.as_deref(), Some("cache-headless"));
        let spec = s.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        let ports: Vec<i32> = spec.ports.unwrap().iter().map(|p| p.port).collect();
        assert_eq!(ports, [6379, 16379]);
    }

    #[test]
    fn the_client_service_is_named_after_the_cluster_and_serves_the_client_port() {
        let s = client(&cluster("cache", 3, 1), &owner());
        assert_eq!(s.metadata.name.as_deref(), Some("cache"));
        let spec = s.spec.unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
        assert_eq!(spec.ports.unwrap()[0].port, 6379);
        assert_eq!(spec.selector.unwrap()["valkey.rs/cluster"], "cache");
    }

    fn with_external(type_: api::v1alpha1::ExternalAccessType) -> ValidatedCluster {
        let mut c = cluster("cache", 3, 1);
        c.external_access = Some(ExternalAccess {
            type_,
            annotations: [("lb.example/pool".to_string(), "edge".to_string())].into(),
            load_balancer_source_ranges: Vec::new(),
            external_traffic_policy: None,
            allow_unauthenticated: false,
        });
        c
    }

    #[test]
    fn source_ranges_and_the_traffic_policy_reach_every_external_service() {
        let mut c = with_external(ExternalAccessType::LoadBalancer);
        let access = c.external_access.as_mut().unwrap();
        access.load_balancer_source_ranges = vec!["203.0.113.0/24".into()];
        access.external_traffic_policy = Some(api::v1alpha1::ExternalTrafficPolicy::Local);
        let access = access.clone();
        let spec = external(&c, &owner(), &access, (0, 1), "cache-0-1-0")
            .spec
            .unwrap();
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(
            spec.load_balancer_source_ranges,
            Some(vec!["203.0.113.0/24".to_string()])
        );
        let node_port = ExternalAccess {
            type_: ExternalAccessType::NodePort,
            ..access
        };
        let spec = external(&c, &owner(), &node_port, (0, 1), "p")
            .spec
            .unwrap();
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(
            spec.load_balancer_source_ranges, None,
            "a NodePort has no balancer"
        );
    }

    #[test]
    fn every_member_gets_its_own_external_service_selecting_exactly_its_pod() {
        use api::v1alpha1::ExternalAccessType;
        let c = with_external(ExternalAccessType::NodePort);
        let d = crate::desired(
            &c,
            &owner(),
            |_, _| crate::scheduling::MemberPlacement::Unplanned,
            |_| None,
            |name| {
                (name == "cache-1-1").then_some(crate::statefulset::Ordinals {
                    start: 3,
                    replicas: 2,
                })
            },
        );
        assert_eq!(d.external.len(), 6);
        let s = d
            .external
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some("cache-1-1-external"))
            .unwrap();
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["valkey.rs/cluster"], "cache");
        assert_eq!(labels["valkey.rs/shard"], "1");
        assert_eq!(
            s.metadata.annotations.as_ref().unwrap()["lb.example/pool"],
            "edge"
        );
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            owner().uid
        );
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("NodePort"));
        // The member proper runs at its StatefulSet's start, not its new copy.
        let selector = spec.selector.as_ref().unwrap();
        assert_eq!(selector[POD_NAME_LABEL], "cache-1-1-3");
        assert_eq!(selector["valkey.rs/member"], "1");
        assert_eq!(spec.ports.as_ref().unwrap()[0].port, 6379);
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
    }

    #[test]
    fn without_external_access_no_member_service_is_built() {
        let c = cluster("cache", 3, 1);
        let d = crate::desired(
            &c,
            &owner(),
            |_, _| crate::scheduling::MemberPlacement::Unplanned,
            |_| None,
            |_| None,
        );
        assert!(d.external.is_empty());
        let lb = with_external(api::v1alpha1::ExternalAccessType::LoadBalancer);
        let s = external(
            &lb,
            &owner(),
            lb.external_access.as_ref().unwrap(),
            (0, 0),
            "cache-0-0-0",
        );
        assert_eq!(s.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));
    }
}
