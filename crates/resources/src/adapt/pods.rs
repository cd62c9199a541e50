//! Which pods are members of a cluster, where they run, and what every other
//! pod already takes of its node.
//!
//! A member may have two pods for a while: when it moves, its new copy runs
//! beside the old one until it is in sync (pod `<sts>-<k+1>` beside
//! `<sts>-<k>`). The newest (highest pod index) bound pod is where the member
//! is; the other one still takes room on its node like any other pod.
//!
//! A member is a pod in the cluster's namespace labelled `valkey.rs/cluster=<name>`,
//! `valkey.rs/shard=<s>` and `valkey.rs/member=<i>` (the labels the operator
//! puts on its pods). Every other pod bound to a node that is not Succeeded or
//! Failed uses room there, with Kubernetes' effective request: the larger of
//! (containers + sidecars) and the largest init step, plus pod overhead; pod-level
//! `spec.resources.requests` win where set.

use super::{AdaptError, add};
use api::ValidatedCluster;
use api::constants::{LABEL_MEMBER, LABEL_ROLE, LABEL_SHARD, ROLE_PRIMARY};
use api::quantity;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use placement::{Capacity, MemberIndex, RunningMember, ShardIndex};
use std::borrow::Borrow;
use std::collections::BTreeMap;

/// What the pods tell the planner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Members bound to a node, not terminating, within the spec's shape;
    /// sorted by (shard, member), one per (shard, member).
    pub running: Vec<RunningMember>,
    /// Per shard, the running member labelled `valkey.rs/role=primary` (the
    /// lowest index if several are); shards with none are left out.
    pub primaries: BTreeMap<ShardIndex, MemberIndex>,
    /// Per node name: the summed effective requests and count of non-member pods.
    pub used_by_others: BTreeMap<String, Capacity>,
}

/// `(shard, member)` when `pod` is a member of `cluster`.
pub fn member_of(cluster: &ValidatedCluster, pod: &Pod) -> Option<(ShardIndex, MemberIndex)> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let labels = pod.metadata.labels.as_ref()?;
    if namespace != cluster.namespace
        || labels.get(cluster.kind.label()).map(String::as_str) != Some(cluster.name.as_str())
    {
        return None;
    }
    let shard = labels.get(LABEL_SHARD)?.parse().ok()?;
    let member = labels.get(LABEL_MEMBER)?.parse().ok()?;
    Some((shard, member))
}

/// The label the StatefulSet controller puts on every pod it creates.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// A StatefulSet pod's ordinal: its `apps.kubernetes.io/pod-index` label,
/// else the number after the last `-` of its name.
pub fn pod_index(pod: &Pod) -> Option<u32> {
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(POD_INDEX_LABEL))
        .and_then(|v| v.parse().ok());
    labelled.or_else(|| {
        pod.metadata
            .name
            .as_deref()
            .and_then(|n| n.rsplit_once('-'))
            .and_then(|(_, i)| i.parse().ok())
    })
}

/// Whether `pod` carries a label of the operator's (`valkey.rs/...`): a
/// member, a move's new copy, a backup Job's pod. The caches keep those
/// whole; every other pod is kept only as [`compact_foreign`] makes it.
pub fn is_ours(pod: &Pod) -> bool {
    pod.metadata.labels.as_ref().is_some_and(|l| {
        l.keys()
            .any(|k| k.starts_with(api::constants::LABEL_PREFIX))
    })
}

/// A pod of somebody else's cut to what the planner reads of it: where it
/// runs, whether it still runs, whether it is going, and its effective
/// request (stored as pod-level `spec.resources.requests`, which
/// [`effective_request`] reads first). In a cluster of 20,000 pods of other
/// teams the operator then keeps a few hundred bytes a pod, not their whole
/// specs. A pod whose request does not parse keeps its containers, so the
/// planner still names the field that is wrong.
pub fn compact_foreign(pod: &mut Pod) {
    let Ok(request) = effective_request(pod) else {
        pod.metadata.managed_fields = None;
        return;
    };
    let old = std::mem::take(pod);
    let node_name = old.spec.and_then(|s| s.node_name);
    let phase = old.status.and_then(|s| s.phase);
    pod.metadata = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: old.metadata.name,
        namespace: old.metadata.namespace,
        uid: old.metadata.uid,
        resource_version: old.metadata.resource_version,
        deletion_timestamp: old.metadata.deletion_timestamp,
        ..Default::default()
    };
    pod.spec = Some(PodSpec {
        node_name,
        resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
            requests: Some(BTreeMap::from([
                (
                    "cpu".to_string(),
                    Quantity(format!("{}m", request.cpu_millis)),
                ),
                (
                    "memory".to_string(),
                    Quantity(request.memory_bytes.to_string()),
                ),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    });
    pod.status = phase.map(|phase| k8s_openapi::api::core::v1::PodStatus {
        phase: Some(phase),
        ..Default::default()
    });
}

/// Pods in phase Succeeded or Failed hold no resources.
pub fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("<unnamed>")
    )
}

/// One pod's cpu (millicores) and memory (bytes) requests, as the scheduler
/// counts them; `pods` is 1.
pub fn effective_request(pod: &Pod) -> Result<Capacity, AdaptError> {
    let none = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&none);
    let err = |field: String, message: String| AdaptError::Pod {
        pod: pod_name(pod),
        field,
        message,
    };
    let mut total = [0u64; 2];
    for (r, resource) in RESOURCES.iter().enumerate() {
        let pod_level = spec
            .resources
            .as_ref()
            .and_then(|res| res.requests.as_ref())
            .and_then(|req| req.get(resource.name));
        if let Some(q) = pod_level {
            total[r] = read(resource, q, "spec.resources.requests", &err)?;
            continue;
        }
        let mut containers = 0u64;
        for (i, c) in spec.containers.iter().enumerate() {
            containers = containers.saturating_add(container_request(
                c,
                resource,
                &format!("spec.containers[{i}]"),
                &err,
            )?);
        }
        // Sidecars (init containers with restartPolicy Always) run alongside
        // everything after them; plain init containers run one at a time.
        let mut sidecars = 0u64;
        let mut init_peak = 0u64;
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            let request =
                container_request(c, resource, &format!("spec.initContainers[{i}]"), &err)?;
            let step = if c.restart_policy.as_deref() == Some("Always") {
                sidecars = sidecars.saturating_add(request);
                sidecars
            } else {
                request.saturating_add(sidecars)
            };
            init_peak = init_peak.max(step);
        }
        let overhead = match spec.overhead.as_ref().and_then(|o| o.get(resource.name)) {
            Some(q) => read(resource, q, "spec.overhead", &err)?,
            None => 0,
        };
        total[r] = containers
            .saturating_add(sidecars)
            .max(init_peak)
            .saturating_add(overhead);
    }
    Ok(Capacity {
        cpu_millis: total[0],
        memory_bytes: total[1],
        pods: 1,
    })
}

struct Resource {
    name: &'static str,
    parse: fn(&str) -> Result<u64, quantity::QuantityError>,
}

const RESOURCES: [Resource; 2] = [
    Resource {
        name: "cpu",
        parse: quantity::cpu_millis,
    },
    Resource {
        name: "memory",
        parse: quantity::value,
    },
];

fn read(
    resource: &Resource,
    q: &Quantity,
    field: &str,
    err: &impl Fn(String, String) -> AdaptError,
) -> Result<u64, AdaptError> {
    (resource.parse)(&q.0).map_err(|e| err(format!("{field}.{}", resource.name), e.to_string()))
}

fn container_request(
    c: &Container,
    resource: &Resource,
    field: &str,
    err: &impl Fn(String, String) -> AdaptError,
) -> Result<u64, AdaptError> {
    let Some(res) = c.resources.as_ref() else {
        return Ok(0);
    };
    // The API server fills a missing request from the limit; a pod read from a
    // file may not have been through it.
    if let Some(q) = res.requests.as_ref().and_then(|r| r.get(resource.name)) {
        return read(resource, q, &format!("{field}.resources.requests"), err);
    }
    if let Some(q) = res.limits.as_ref().and_then(|l| l.get(resource.name)) {
        return read(resource, q, &format!("{field}.resources.limits"), err);
    }
    Ok(0)
}

/// Sorts `pods` into this cluster's running members (and their live roles)
/// and the room every other pod takes on its node.
pub fn census<P: Borrow<Pod>>(
    cluster: &ValidatedCluster,
    pods: &[P],
) -> Result<Census, AdaptError> {
    let mut ordered: Vec<&Pod> = pods.iter().map(Borrow::borrow).collect();
    ordered.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });

    let mut census = Census::default();
    // Per member, its bound, live pods in the spec's shape: the newest is
    // where the member is.
    let mut copies: BTreeMap<(ShardIndex, MemberIndex), Vec<(&Pod, &str)>> = BTreeMap::new();
    for pod in ordered {
        if is_finished(pod) {
            continue;
        }
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty());
        match member_of(cluster, pod) {
            Some((shard, member)) => {
                // Members never count as "other pods": their room is the
                // planner's to give out. A member being deleted or outside the
                // spec's shape (scale-in) does not stay where it is.
                let in_shape = shard < cluster.shards && member <= cluster.replicas;
                let terminating = pod.metadata.deletion_timestamp.is_some();
                let Some(node) = node else { continue };
                if !in_shape || terminating {
                    continue;
                }
                copies.entry((shard, member)).or_default().push((pod, node));
            }
            None => {
                let Some(node) = node else { continue };
                let request = effective_request(pod)?;
                let used = census.used_by_others.entry(node.to_string()).or_default();
                *used = add(*used, request);
            }
        }
    }
    let mut labelled_primary: BTreeMap<ShardIndex, MemberIndex> = BTreeMap::new();
    for ((shard, member), mut pods) in copies {
        pods.sort_by_key(|(p, _)| std::cmp::Reverse(pod_index(p)));
        let mut pods = pods.into_iter();
        let Some((newest, node)) = pods.next() else {
            continue;
        };
        census.running.push(RunningMember {
            shard,
            member,
            node: node.to_string(),
        });
        // Either copy may be the shard's primary (the old one until the new
        // one has taken over).
        let labelled = |p: &Pod| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_ROLE))
                .map(String::as_str)
                == Some(ROLE_PRIMARY)
        };
        let rest: Vec<(&Pod, &str)> = pods.collect();
        if labelled(newest) || rest.iter().any(|(p, _)| labelled(p)) {
            labelled_primary
                .entry(shard)
                .and_modify(|m| *m = (*m).min(member))
                .or_insert(member);
        }
        // The copy that is about to go still holds its room.
        for (pod, node) in rest {
            let request = effective_request(pod)?;
            let used = census.used_by_others.entry(node.to_string()).or_default();
            *used = add(*used, request);
        }
    }
    census.running.sort_by_key(|m| (m.shard, m.member));
    census.primaries = labelled_primary;
    Ok(census)
}

/// The node a pod is bound to, for messages (`<none>` when none).
pub fn node_of(pod: Option<&Pod>) -> String {
    pod.and_then(|p| p.spec.as_ref()?.node_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "<none>".to_string())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{cluster, pod};
    use super::*;

    fn member_pod(name: &str, shard: u32, member: u32, node: &str, role: &str) -> Pod {
        pod(&format!(
            "metadata:
               name: {name}
               namespace: prod
               labels: {{valkey.rs/cluster: cache, valkey.rs/shard: '{shard}', valkey.rs/member: '{member}', valkey.rs/role: {role}}}
             spec: {{nodeName: {node}, containers: [{{name: valkey, resources: {{requests: {{cpu: '1'}}}}}}]}}"
        ))
    }

    #[test]
    fn members_need_all_three_labels_and_the_clusters_namespace() {
        let c = cluster("shards: 3");
        assert_eq!(
            member_of(&c, &member_pod("a", 1, 0, "n1", "primary")),
            Some((1, 0))
        );
        let mut elsewhere = member_pod("a", 1, 0, "n1", "primary");
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(member_of(&c, &elsewhere), None);
        let no_member = pod(
            "metadata: {name: a, namespace: prod, labels: {valkey.rs/cluster: cache, valkey.rs/shard: '1'}}",
        );
        assert_eq!(member_of(&c, &no_member), None);
        let other_cluster = pod(
            "metadata: {name: a, namespace: prod, labels: {valkey.rs/cluster: db, valkey.rs/shard: '1', valkey.rs/member: '0'}}",
        );
        assert_eq!(member_of(&c, &other_cluster), None);
    }

    #[test]
    fn running_members_give_the_current_placement_and_use_no_room() {
        let c = cluster("shards: 2\nreplicas: 1");
        let pods = [
            member_pod("cache-1-0-0", 1, 0, "n2", "primary"),
            member_pod("cache-0-0-0", 0, 0, "n1", "primary"),
        ];
        let census = census(&c, &pods).unwrap();
        assert_eq!(
            census.running,
            [
                RunningMember {
                    shard: 0,
                    member: 0,
                    node: "n1".into()
                },
                RunningMember {
                    shard: 1,
                    member: 0,
                    node: "n2".into()
                },
            ]
        );
        assert!(census.used_by_others.is_empty());
        assert_eq!(census.primaries, BTreeMap::from([(0, 0), (1, 0)]));
    }

    #[test]
    fn a_moving_member_is_where_its_new_copy_runs_and_its_old_copy_still_takes_room() {
        let c = cluster("shards: 1\nreplicas: 1");
        let mut old = member_pod("cache-0-1-0", 0, 1, "n1", "replica");
        let mut new = member_pod("cache-0-1-1", 0, 1, "n4", "replica");
        for (p, i) in [(&mut old, "0"), (&mut new, "1")] {
            if let Some(l) = p.metadata.labels.as_mut() {
                l.insert(POD_INDEX_LABEL.into(), i.into());
            }
        }
        let pods = [
            member_pod("cache-0-0-0", 0, 0, "n2", "primary"),
            old.clone(),
            new,
        ];
        let census = census(&c, &pods).unwrap();
        assert_eq!(census.running[1].node, "n4");
        assert_eq!(census.used_by_others["n1"].cpu_millis, 1000);
        assert!(!census.used_by_others.contains_key("n4"));
        // Until the new copy is bound, the member is where the old one is.
        let mut pending = member_pod("cache-0-1-1", 0, 1, "n4", "replica");
        if let Some(s) = pending.spec.as_mut() {
            s.node_name = None;
        }
        let census = super::census(&c, &[old, pending]).unwrap();
        assert_eq!(census.running[0].node, "n1");
        assert!(census.used_by_others.is_empty());
    }

    #[test]
    fn the_pod_index_comes_from_the_label_else_the_name() {
        let mut p = member_pod("cache-0-1-7", 0, 1, "n1", "replica");
        assert_eq!(pod_index(&p), Some(7));
        if let Some(l) = p.metadata.labels.as_mut() {
            l.insert(POD_INDEX_LABEL.into(), "9".into());
        }
        assert_eq!(pod_index(&p), Some(9));
    }

    #[test]
    fn a_failed_over_shard_reports_its_live_primary() {
        let c = cluster("shards: 1\nreplicas: 1");
        let pods = [
            member_pod("cache-0-0-0", 0, 0, "n1", "replica"),
            member_pod("cache-0-1-0", 0, 1, "n2", "primary"),
        ];
        assert_eq!(
            census(&c, &pods).unwrap().primaries,
            BTreeMap::from([(0, 1)])
        );
    }

    #[test]
    fn pending_terminating_and_out_of_shape_members_are_not_running() {
        let c = cluster("shards: 1\nreplicas: 1");
        let mut pending = member_pod("cache-0-0-0", 0, 0, "n1", "primary");
        if let Some(s) = pending.spec.as_mut() {
            s.node_name = None;
        }
        let mut terminating = member_pod("cache-0-1-0", 0, 1, "n1", "replica");
        terminating.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        let removed_shard = member_pod("cache-3-0-0", 3, 0, "n1", "primary");
        let census = census(&c, &[pending, terminating, removed_shard]).unwrap();
        assert!(census.running.is_empty());
        assert!(census.used_by_others.is_empty());
    }

    #[test]
    fn finished_and_unbound_pods_take_no_room() {
        let c = cluster("shards: 1");
        let done = pod("metadata: {name: job, namespace: prod}
             spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
             status: {phase: Succeeded}");
        let failed = pod("metadata: {name: job2, namespace: prod}
             spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
             status: {phase: Failed}");
        let unbound = pod("metadata: {name: web, namespace: prod}
             spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}");
        assert!(
            census(&c, &[done, failed, unbound])
                .unwrap()
                .used_by_others
                .is_empty()
        );
    }

    #[test]
    fn a_foreign_pod_is_kept_as_its_node_phase_and_request_only() {
        let mut p = pod(
            "metadata: {name: web-1, namespace: other, labels: {app: web},
                   annotations: {note: long}}
             spec:
               nodeName: n1
               overhead: {cpu: 10m}
               initContainers:
                 - {name: big-init, resources: {requests: {cpu: '2', memory: 64Mi}}}
               containers:
                 - {name: a, image: web:1, env: [{name: A, value: x}],
                    resources: {requests: {cpu: 250m, memory: 128Mi}}}
             status: {phase: Running, podIP: 10.0.0.1}",
        );
        assert!(!is_ours(&p));
        let before = effective_request(&p).unwrap();
        compact_foreign(&mut p);
        assert_eq!(effective_request(&p).unwrap(), before);
        assert_eq!(p.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(p.metadata.labels, None);
        assert_eq!(p.metadata.annotations, None);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers.is_empty() && spec.init_containers.is_none());
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
        assert_eq!(p.status.as_ref().unwrap().pod_ip, None);
        let member = pod("metadata: {name: c-0-0-0, labels: {valkey.rs/cluster: c}}");
        assert!(is_ours(&member));
    }

    #[test]
    fn a_foreign_pod_whose_request_does_not_parse_keeps_its_containers() {
        let mut p = pod("metadata: {name: bad}
             spec:
               containers:
                 - {name: a, resources: {requests: {cpu: lots}}}");
        compact_foreign(&mut p);
        assert_eq!(p.spec.unwrap().containers.len(), 1);
    }

    #[test]
    fn effective_request_follows_kubernetes_init_and_sidecar_rules() {
        let p = pod("metadata: {name: p}
             spec:
               overhead: {cpu: 10m}
               initContainers:
                 - {name: big-init, resources: {requests: {cpu: '2', memory: 64Mi}}}
                 - {name: sidecar, restartPolicy: Always, resources: {requests: {cpu: 100m, memory: 32Mi}}}
                 - {name: late-init, resources: {requests: {cpu: 500m, memory: 512Mi}}}
               containers:
                 - {name: a, resources: {requests: {cpu: 250m, memory: 128Mi}}}
                 - {name: b, resources: {limits: {cpu: 250m, memory: 128Mi}}}");
        // cpu: max(500m + 100m, 2, 100m + 500m) + 10m; memory: max(256Mi + 32Mi, 64Mi, 32Mi + 512Mi).
        assert_eq!(
            effective_request(&p).unwrap(),
            Capacity {
                cpu_millis: 2010,
                memory_bytes: 544 << 20,
                pods: 1
            }
        );
    }

    #[test]
    fn pod_level_requests_win() {
        let p = pod("metadata: {name: p}
             spec:
               resources: {requests: {cpu: '3'}}
               containers: [{name: a, resources: {requests: {cpu: 250m, memory: 1Gi}}}]");
        assert_eq!(
            effective_request(&p).unwrap(),
            Capacity {
                cpu_millis: 3000,
                memory_bytes: 1 << 30,
                pods: 1
            }
        );
    }

    #[test]
    fn a_bad_request_names_the_pod_and_the_field() {
        let c = cluster("shards: 1");
        let p = pod("metadata: {name: web, namespace: prod}
             spec: {nodeName: n1, containers: [{name: c, resources: {requests: {memory: much}}}]}");
        let err = census(&c, &[p]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("pod prod/web: spec.containers[0].resources.requests.memory: "),
            "{err}"
        );
    }
}
