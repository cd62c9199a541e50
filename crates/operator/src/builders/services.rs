//! The headless Service (stable DNS for every member, ready or not) and the
//! client Service (where cluster clients connect first; any member redirects
//! them to the right shard).

use super::owned_meta;
use super::{client_service_name, cluster_selector, headless_service_name};
use api::ValidatedCluster;
use api::constants::{CLUSTER_BUS_PORT, VALKEY_PORT};
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
            selector: Some(cluster_selector(&c.name)),
            ports: Some(vec![
                port("client", VALKEY_PORT),
                port("bus", CLUSTER_BUS_PORT),
            ]),
            ..Default::default()
        }),
        status: None,
    }
}

/// `<cluster>`: the client port of every Ready member.
pub fn client(c: &ValidatedCluster, owner: &OwnerReference) -> Service {
    Service {
        metadata: ObjectMeta {
            annotations: (!c.client_service.annotations.is_empty())
                .then(|| c.client_service.annotations.clone()),
            ..owned_meta(c, owner, client_service_name(&c.name))
        },
        spec: Some(ServiceSpec {
            type_: Some(c.client_service.type_.as_str().into()),
            selector: Some(cluster_selector(&c.name)),
            ports: Some(vec![port("client", VALKEY_PORT)]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::test_support::{cluster, owner};

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
}
