//! The `resources` layer: every Kubernetes object the operator writes, built,
//! never sent; and [`adapt`], what the operator reads of Pods and Nodes as
//! plain data. Pure: no client, no runtime (docs/architecture.md).
//!
//! Pure builders of the Kubernetes objects a ValkeyCluster owns: from a
//! [`ValidatedCluster`] and the placement plan to the exact objects the
//! controller applies. No I/O here; every builder is unit-tested.
//!
//! - [`statefulset`]: one single-replica StatefulSet per member;
//! - [`scheduling`]: the plan as pod affinity rules;
//! - [`config`]: valkey.conf, and which keys go in live;
//! - [`tls`]: the operator's CA and the members' serving certificate;
//! - [`network_policy`]: who may connect to the members;
//! - [`services`], [`pdb`], [`secret`]: the rest of what a cluster owns.

pub mod adapt;
pub mod config;
pub mod hash;
pub mod network_policy;
pub mod overlay;
pub mod pdb;
pub mod scheduling;
pub mod secret;
pub mod services;
pub mod statefulset;
pub mod tls;

use api::constants::{FIELD_MANAGER, LABEL_MEMBER, LABEL_SHARD};
use api::{SetKind, ValidatedCluster};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use scheduling::MemberPlacement;
use std::collections::BTreeMap;

/// `<cluster>-headless`.
pub fn headless_service_name(cluster: &str) -> String {
    format!("{cluster}-headless")
}

/// The client Service is named after the cluster.
pub fn client_service_name(cluster: &str) -> String {
    cluster.to_string()
}

/// `<replication>-ro`: a replication set's replicas.
pub fn read_only_service_name(set: &str) -> String {
    format!("{set}-ro")
}

/// `<cluster>-<shard>-<member>-external`: the member's Service for clients
/// outside Kubernetes (at most 61 characters: a member name is at most 52).
pub fn external_service_name(cluster: &str, shard: u32, member: u32) -> String {
    format!(
        "{}-external",
        api::constants::member_name(cluster, shard, member)
    )
}

/// `<cluster>-config`.
pub fn config_map_name(cluster: &str) -> String {
    format!("{cluster}-config")
}

/// `<cluster>-<shard>` (a replication set's one budget is `<name>-0`).
pub fn pdb_name(cluster: &str, shard: u32) -> String {
    format!("{cluster}-{shard}")
}

/// Labels on every object a cluster owns.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    set_labels(SetKind::Cluster, cluster)
}

/// Labels on every object a set of `kind` owns (its kind's label names it).
pub fn set_labels(kind: SetKind, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (kind.label().to_string(), name.to_string()),
        ("app.kubernetes.io/name".to_string(), "valkey".to_string()),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
    ])
}

/// The metadata of an object `c` owns: `name` in the cluster's namespace,
/// the cluster's labels, `owner` as its controller.
pub fn owned_meta(c: &ValidatedCluster, owner: &OwnerReference, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(c.namespace.clone()),
        labels: Some(set_labels(c.kind, &c.name)),
        owner_references: Some(vec![owner.clone()]),
        ..Default::default()
    }
}

/// Selects every member pod of a cluster.
pub fn cluster_selector(cluster: &str) -> BTreeMap<String, String> {
    set_selector(SetKind::Cluster, cluster)
}

/// Selects every member pod of a set of `kind`.
pub fn set_selector(kind: SetKind, name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(kind.label().to_string(), name.to_string())])
}

/// Selects the member pods of one shard.
pub fn shard_selector(cluster: &str, shard: u32) -> BTreeMap<String, String> {
    set_shard_selector(SetKind::Cluster, cluster, shard)
}

/// Selects the member pods of one shard of a set of `kind` (a replication
/// set is shard 0).
pub fn set_shard_selector(kind: SetKind, name: &str, shard: u32) -> BTreeMap<String, String> {
    let mut l = set_selector(kind, name);
    l.insert(LABEL_SHARD.to_string(), shard.to_string());
    l
}

/// Selects one member's pod (the StatefulSet selector; immutable).
pub fn member_selector(cluster: &str, shard: u32, member: u32) -> BTreeMap<String, String> {
    set_member_selector(SetKind::Cluster, cluster, shard, member)
}

/// [`member_selector`] of a set of `kind`.
pub fn set_member_selector(
    kind: SetKind,
    name: &str,
    shard: u32,
    member: u32,
) -> BTreeMap<String, String> {
    let mut l = set_shard_selector(kind, name, shard);
    l.insert(LABEL_MEMBER.to_string(), member.to_string());
    l
}

/// Labels of a member's StatefulSet and pod (without the live role).
pub fn member_labels(cluster: &str, shard: u32, member: u32) -> BTreeMap<String, String> {
    set_member_labels(SetKind::Cluster, cluster, shard, member)
}

/// [`member_labels`] of a set of `kind`.
pub fn set_member_labels(
    kind: SetKind,
    name: &str,
    shard: u32,
    member: u32,
) -> BTreeMap<String, String> {
    let mut l = set_labels(kind, name);
    l.extend(set_member_selector(kind, name, shard, member));
    l
}

/// The ConfigMap holding valkey.conf.
pub fn config_map(c: &ValidatedCluster, owner: &OwnerReference) -> ConfigMap {
    ConfigMap {
        metadata: owned_meta(c, owner, config_map_name(&c.name)),
        data: Some(BTreeMap::from([(
            config::CONFIG_FILE.to_string(),
            config::render(c),
        )])),
        ..Default::default()
    }
}

/// Every object a cluster should have, except the Secret (created only when
/// absent, see [`secret`]).
#[derive(Debug, Clone)]
pub struct Desired {
    pub config_map: ConfigMap,
    pub headless: Service,
    pub client: Service,
    /// A replication set's `<name>-ro` (its replicas); `None` for a cluster.
    pub read_only: Option<Service>,
    /// One Service per member with `spec.externalAccess`, else none.
    pub external: Vec<Service>,
    pub pdbs: Vec<PodDisruptionBudget>,
    /// `None` when the cluster keeps no NetworkPolicy.
    pub network_policy: Option<k8s_openapi::api::networking::v1::NetworkPolicy>,
    pub statefulsets: Vec<StatefulSet>,
}

/// Builds [`Desired`]. `placement(shard, member)` says where the plan puts each
/// member; `claim_templates(name)` gives the volumeClaimTemplates of an
/// existing StatefulSet (kept as they are: Kubernetes forbids changing them);
/// `ordinals(name)` the pods an existing StatefulSet runs (a new one starts
/// at [`statefulset::Ordinals::INITIAL`]).
pub fn desired<'a>(
    c: &ValidatedCluster,
    owner: &OwnerReference,
    placement: impl Fn(u32, u32) -> MemberPlacement,
    claim_templates: impl Fn(&str) -> Option<&'a [PersistentVolumeClaim]>,
    ordinals: impl Fn(&str) -> Option<statefulset::Ordinals>,
) -> Desired {
    let mut statefulsets = Vec::new();
    let mut external = Vec::new();
    for shard in 0..c.shards {
        for member in 0..=c.replicas {
            let p = placement(shard, member);
            let name = c.member_name(shard, member);
            let ordinals = ordinals(&name).unwrap_or(statefulset::Ordinals::INITIAL);
            if let Some(access) = &c.external_access {
                // The member proper is the pod at its StatefulSet's start
                // (a move's new copy runs at the next ordinal).
                let pod = format!("{name}-{}", ordinals.start);
                external.push(services::external(c, owner, access, (shard, member), &pod));
            }
            statefulsets.push(statefulset::statefulset(statefulset::MemberInput {
                cluster: c,
                owner,
                shard,
                member,
                placement: &p,
                existing_claim_templates: claim_templates(&name),
                ordinals,
            }));
        }
    }
    Desired {
        config_map: config_map(c, owner),
        headless: services::headless(c, owner),
        client: services::client(c, owner),
        read_only: (c.kind == SetKind::Replication).then(|| services::read_only(c, owner)),
        external,
        pdbs: if c.pod_disruption_budget {
            (0..c.shards).map(|s| pdb::pdb(c, owner, s)).collect()
        } else {
            Vec::new()
        },
        network_policy: network_policy::network_policy(c, owner),
        statefulsets,
    }
}

/// Clusters and owners for the tests of this crate and of the operator's
/// decisions (compiled always, so that every build shares one `resources`).
#[doc(hidden)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod test_support {
    use api::ValidatedCluster;

    /// TLS with the operator's CA (`cache-tls`); `switching`: turned on
    /// for a live cluster, not switched yet.
    pub fn operator_tls(switching: bool) -> Option<api::v1alpha1::ValidatedTls> {
        Some(api::v1alpha1::ValidatedTls {
            secret_name: "cache-tls".into(),
            operator_managed: true,
            switching,
        })
    }
    use api::v1alpha1::{Persistence, ReclaimPolicy, ValkeyCluster, ValkeyClusterSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    pub fn cluster(name: &str, shards: i32, replicas: i32) -> ValidatedCluster {
        let mut vc = ValkeyCluster::new(
            name,
            ValkeyClusterSpec {
                shards,
                replicas,
                ..Default::default()
            },
        );
        vc.metadata.namespace = Some("ns".into());
        vc.metadata.uid = Some("uid-1".into());
        api::v1alpha1::validate(&vc).unwrap()
    }

    /// [`cluster`] with `spec.exporter.enabled: true`.
    pub fn cluster_with_exporter(name: &str, shards: i32, replicas: i32) -> ValidatedCluster {
        let mut vc = ValkeyCluster::new(
            name,
            ValkeyClusterSpec {
                shards,
                replicas,
                exporter: api::v1alpha1::Exporter {
                    enabled: true,
                    resources: None,
                },
                ..Default::default()
            },
        );
        vc.metadata.namespace = Some("ns".into());
        vc.metadata.uid = Some("uid-1".into());
        api::v1alpha1::validate(&vc).unwrap()
    }

    pub fn cluster_with_persistence(
        name: &str,
        shards: i32,
        replicas: i32,
        policy: &str,
    ) -> ValidatedCluster {
        let mut vc = ValkeyCluster::new(
            name,
            ValkeyClusterSpec {
                shards,
                replicas,
                persistence: Some(Persistence {
                    size: Quantity("1Gi".into()),
                    storage_class_name: None,
                    reclaim_policy: if policy == "Delete" {
                        ReclaimPolicy::Delete
                    } else {
                        ReclaimPolicy::Retain
                    },
                    node_loss_grace_seconds: 300,
                }),
                ..Default::default()
            },
        );
        vc.metadata.namespace = Some("ns".into());
        api::v1alpha1::validate(&vc).unwrap()
    }

    /// A `ValkeyReplication` named `name` with `replicas` replicas, validated.
    pub fn replication(name: &str, replicas: i32) -> ValidatedCluster {
        let mut set = api::v1alpha1::ValkeyReplication::new(
            name,
            api::v1alpha1::ValkeyReplicationSpec {
                replicas,
                ..Default::default()
            },
        );
        set.metadata.namespace = Some("ns".into());
        set.metadata.uid = Some("uid-2".into());
        api::v1alpha1::validate_replication(&set, &Default::default()).unwrap()
    }

    pub fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "valkey.rs/v1alpha1".into(),
            kind: "ValkeyCluster".into(),
            name: "cache".into(),
            uid: "uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::{cluster, owner};

    /// The desired objects of `c` with no placement plan and no live objects.
    fn unplanned(c: &ValidatedCluster) -> Desired {
        desired(
            c,
            &owner(),
            |_, _| MemberPlacement::Unplanned,
            |_| None,
            |_| None,
        )
    }

    #[test]
    fn a_cluster_owns_one_statefulset_per_member_and_one_budget_per_shard() {
        let c = cluster("cache", 3, 2);
        let d = unplanned(&c);
        let names: Vec<_> = d
            .statefulsets
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        assert_eq!(names.len(), 9);
        assert_eq!(names[0], "cache-0-0");
        assert_eq!(names[8], "cache-2-2");
        assert_eq!(d.pdbs.len(), 3);
        assert_eq!(d.config_map.metadata.name.as_deref(), Some("cache-config"));
    }

    #[test]
    fn a_replication_set_owns_one_statefulset_per_member_and_a_service_per_role() {
        use api::constants::{LABEL_REPLICATION, LABEL_ROLE};
        let c = test_support::replication("cache", 2);
        let d = unplanned(&c);
        let names: Vec<_> = d
            .statefulsets
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        assert_eq!(names, ["cache-0", "cache-1", "cache-2"]);
        let labels = d.statefulsets[1].metadata.labels.clone().unwrap();
        assert_eq!(labels[LABEL_REPLICATION], "cache");
        assert!(!labels.contains_key(api::constants::LABEL_CLUSTER));
        let rw = d.client.spec.unwrap().selector.unwrap();
        assert_eq!(rw[LABEL_ROLE], "primary");
        assert_eq!(rw[LABEL_REPLICATION], "cache");
        let ro = d.read_only.unwrap();
        assert_eq!(ro.metadata.name.as_deref(), Some("cache-ro"));
        assert_eq!(ro.spec.unwrap().selector.unwrap()[LABEL_ROLE], "replica");
        let conf = &d.config_map.data.unwrap()[config::CONFIG_FILE];
        assert!(conf.contains("replicaof 127.0.0.1 1"), "{conf}");
        assert!(!conf.contains("cluster-enabled"), "{conf}");
        let pod = d.statefulsets[0]
            .spec
            .clone()
            .unwrap()
            .template
            .spec
            .unwrap();
        let valkey = &pod.containers[0];
        let ports: Vec<i32> = valkey
            .ports
            .iter()
            .flatten()
            .map(|p| p.container_port)
            .collect();
        assert_eq!(ports, [6379]);
        assert!(
            valkey
                .args
                .iter()
                .flatten()
                .any(|a| a == "--replica-announce-ip")
        );
        assert_eq!(
            valkey.command.as_ref().unwrap()[2],
            statefulset::FORGET_DATA_SCRIPT
        );
        // The anti-affinity selects the set's own members.
        let cluster_cluster = cluster("cache", 1, 2);
        assert_ne!(
            unplanned(&cluster_cluster).statefulsets[0].metadata.labels,
            d.statefulsets[0].metadata.labels
        );
    }

    #[test]
    fn budgets_can_be_turned_off() {
        let mut c = cluster("cache", 3, 1);
        c.pod_disruption_budget = false;
        let d = unplanned(&c);
        assert!(d.pdbs.is_empty());
    }
}
