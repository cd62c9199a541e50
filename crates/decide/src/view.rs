//! What the operator knows of one cluster's Kubernetes side, as plain data:
//! [`KubeView`], which observe fills from its caches and decide reads; and the
//! pure sorting of member pods by their place against their StatefulSet.

use api::ValidatedCluster;
use api::constants::member_name;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use resources::adapt;
use resources::statefulset::Ordinals;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The Kubernetes side of one cluster, as of this reconcile.
#[derive(Debug, Clone, Default)]
pub struct KubeView {
    /// Every Node (from the cache, shared: not copied per reconcile).
    pub nodes: Vec<Arc<Node>>,
    /// Every Pod of every namespace (from the cache, shared), for the planner.
    pub all_pods: Vec<Arc<Pod>>,
    /// This cluster's member pods by (shard, member), in or out of the spec's
    /// shape: the pod at its StatefulSet's `ordinals.start` (a live pod wins
    /// over a terminating one).
    pub members: BTreeMap<(u32, u32), Pod>,
    /// The new copies of moves in flight, by the member they move.
    pub new_copies: BTreeMap<(u32, u32), Pod>,
    /// Copies outside their StatefulSet's ordinals (the old copy of a
    /// finished move, the new copy of a move given up), on their way out.
    pub condemned: Vec<((u32, u32), Pod)>,
    /// Owned objects by name.
    pub statefulsets: BTreeMap<String, StatefulSet>,
    pub config_maps: BTreeMap<String, ConfigMap>,
    pub services: BTreeMap<String, Service>,
    pub pdbs: BTreeMap<String, PodDisruptionBudget>,
    pub network_policies: BTreeMap<String, NetworkPolicy>,
    /// The members' volumes (listed only when persistence is on).
    pub pvcs: BTreeMap<String, PersistentVolumeClaim>,
    /// Nodes a member pod is bound to that have no Node object, with how long
    /// the operator has seen them gone (filled by the reconcile from its memory).
    pub missing_nodes: BTreeMap<String, std::time::Duration>,
    /// Members whose StatefulSet exists and whose pod does not, with why the
    /// StatefulSet controller could not create it: the message of its latest
    /// `FailedCreate` event (a PriorityClass, a quota, Pod Security, an
    /// admission webhook), in the API server's own words.
    pub pods_not_created: BTreeMap<(u32, u32), String>,
}

impl KubeView {
    /// Labels of node `name`.
    pub fn node_labels(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .and_then(|n| n.metadata.labels.as_ref())
    }
}

/// Whether the StatefulSet controller has seen `sts`'s current spec and
/// still counts fewer pods than it wants: it tried and could not create one
/// (while a pod is only on its way, the controller already counts it).
pub fn short_of_pods(sts: &StatefulSet) -> bool {
    let Some(status) = sts.status.as_ref() else {
        return false;
    };
    let wanted = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    status.observed_generation >= sts.metadata.generation && status.replicas < wanted
}

/// The latest `FailedCreate` message of each StatefulSet in `missing` (pure).
pub fn failed_creates(
    missing: &BTreeMap<String, (u32, u32)>,
    events: &[Event],
) -> BTreeMap<(u32, u32), String> {
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
            .or(e.first_timestamp.as_ref().map(|t| t.0))
    };
    let mut latest: BTreeMap<(u32, u32), &Event> = BTreeMap::new();
    for e in events {
        let Some(key) = e.involved_object.name.as_ref().and_then(|n| missing.get(n)) else {
            continue;
        };
        if latest.get(key).is_none_or(|old| when(old) <= when(e)) {
            latest.insert(*key, e);
        }
    }
    latest
        .into_iter()
        .filter_map(|(key, e)| Some((key, e.message.clone()?)))
        .collect()
}

/// A cluster's member pods, sorted by what they are.
#[derive(Debug, Default)]
pub struct Sorted {
    pub members: BTreeMap<(u32, u32), Pod>,
    pub new_copies: BTreeMap<(u32, u32), Pod>,
    pub condemned: Vec<((u32, u32), Pod)>,
}

/// Sorts `pods` of `cluster` by their ordinal against their member's live
/// StatefulSet in `statefulsets`. A member whose StatefulSet is gone (scale-in)
/// counts its lowest ordinal as the member.
pub fn sort_members<P: Borrow<Pod>>(
    cluster: &ValidatedCluster,
    statefulsets: &BTreeMap<String, StatefulSet>,
    pods: &[P],
) -> Sorted {
    let mut by_member: BTreeMap<(u32, u32), Vec<&Pod>> = BTreeMap::new();
    for pod in pods {
        let pod: &Pod = pod.borrow();
        if adapt::pods::is_finished(pod) {
            continue;
        }
        if let Some(key) = adapt::pods::member_of(cluster, pod) {
            by_member.entry(key).or_default().push(pod);
        }
    }
    let mut out = Sorted::default();
    for ((s, m), pods) in by_member {
        let ordinals = statefulsets
            .get(&member_name(&cluster.name, s, m))
            .map(Ordinals::of)
            .unwrap_or(Ordinals {
                start: pods
                    .iter()
                    .filter_map(|p| adapt::pods::pod_index(p))
                    .min()
                    .unwrap_or(0),
                replicas: 1,
            });
        for pod in pods {
            let index = adapt::pods::pod_index(pod).unwrap_or(0);
            let target = match slot(ordinals, index) {
                Slot::Member => &mut out.members,
                Slot::NewCopy => &mut out.new_copies,
                Slot::Condemned => {
                    out.condemned.push(((s, m), Pod::clone(pod)));
                    continue;
                }
            };
            let replace = match target.get(&(s, m)) {
                None => true,
                Some(existing) => {
                    existing.metadata.deletion_timestamp.is_some()
                        && pod.metadata.deletion_timestamp.is_none()
                }
            };
            if replace {
                target.insert((s, m), Pod::clone(pod));
            }
        }
    }
    out
}

/// What a member pod is, by its ordinal against its StatefulSet's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The member proper (the old copy while a move runs).
    Member,
    /// The new copy of a move in flight.
    NewCopy,
    /// Outside the StatefulSet's range: the copy a finished (or given up)
    /// move removes; the StatefulSet controller is deleting it.
    Condemned,
}

/// Which slot pod index `index` takes under `ordinals`.
pub fn slot(ordinals: Ordinals, index: u32) -> Slot {
    if index == ordinals.member() {
        Slot::Member
    } else if ordinals.new_copy() == Some(index) {
        Slot::NewCopy
    } else {
        Slot::Condemned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSetOrdinals, StatefulSetSpec};
    use k8s_openapi::api::core::v1::Event;
    use resources::adapt::fixtures::{cluster, pod};

    fn member_pod(name: &str, shard: u32, member: u32, index: u32) -> Pod {
        pod(&format!(
            "metadata:
               name: {name}
               namespace: prod
               labels: {{valkey.rs/cluster: cache, valkey.rs/shard: '{shard}', valkey.rs/member: '{member}', apps.kubernetes.io/pod-index: '{index}'}}
             spec: {{nodeName: n1, containers: [{{name: valkey}}]}}"
        ))
    }

    fn sts(start: i32, replicas: i32) -> StatefulSet {
        StatefulSet {
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                ordinals: Some(StatefulSetOrdinals { start: Some(start) }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_pod_is_explained_by_its_statefulsets_latest_failed_create() {
        use k8s_openapi::api::core::v1::ObjectReference;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let event = |sts: &str, at: &str, message: &str| Event {
            involved_object: ObjectReference {
                kind: Some("StatefulSet".into()),
                name: Some(sts.into()),
                ..Default::default()
            },
            last_timestamp: Some(Time(at.parse().unwrap())),
            message: Some(message.into()),
            reason: Some("FailedCreate".into()),
            ..Default::default()
        };
        let missing: BTreeMap<String, (u32, u32)> = [("up-0-0".to_string(), (0, 0))].into();
        let events = [
            event("up-0-0", "2026-01-01T00:00:05Z", "quota exceeded"),
            event(
                "up-0-0",
                "2026-01-01T00:00:09Z",
                "no PriorityClass with name valkey-high",
            ),
            event("other-0-0", "2026-01-01T00:00:10Z", "not ours"),
        ];
        let why = failed_creates(&missing, &events);
        assert_eq!(why.len(), 1);
        assert_eq!(why[&(0, 0)], "no PriorityClass with name valkey-high");
    }

    fn names(pods: &BTreeMap<(u32, u32), Pod>) -> Vec<String> {
        pods.values()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn the_member_is_the_pod_at_the_statefulsets_start_the_next_one_its_new_copy() {
        let c = cluster("shards: 1\nreplicas: 1");
        let pods = [
            member_pod("cache-0-1-3", 0, 1, 3),
            member_pod("cache-0-1-4", 0, 1, 4),
            member_pod("cache-0-0-0", 0, 0, 0),
        ];
        let moving = BTreeMap::from([("cache-0-1".to_string(), sts(3, 2))]);
        let sorted = sort_members(&c, &moving, &pods);
        assert_eq!(names(&sorted.members), ["cache-0-0-0", "cache-0-1-3"]);
        assert_eq!(names(&sorted.new_copies), ["cache-0-1-4"]);
        assert!(sorted.condemned.is_empty());

        // Done: the old copy is outside the range until the controller removes it.
        let done = BTreeMap::from([("cache-0-1".to_string(), sts(4, 1))]);
        let sorted = sort_members(&c, &done, &pods);
        assert_eq!(names(&sorted.members), ["cache-0-0-0", "cache-0-1-4"]);
        assert!(sorted.new_copies.is_empty());
        assert_eq!(sorted.condemned.len(), 1);
        assert_eq!(sorted.condemned[0].0, (0, 1));
    }
}
