//! Kubernetes objects -> the placement planner's [`Problem`].
//!
//! Pure functions over `k8s_openapi` Nodes and Pods and a [`ValidatedCluster`]:
//! the controller calls [`problem`] on live objects every reconcile, and the
//! `plan` command on objects read from files. Nothing here talks to an API
//! server.
//!
//! - [`nodes`]: readiness, cordon, taints and allocatable of a Node;
//! - [`pods`]: which pods are members of the cluster, and what the other pods
//!   on a node already request;
//! - this module: the cluster's constraints, tolerations and request, and the
//!   assembly of the [`Problem`].

pub mod nodes;
pub mod pods;

use api::v1alpha1::{SpreadMode, ValidatedCluster};
use k8s_openapi::api::core::v1::{Node, Pod, Toleration as K8sToleration};
use placement::{
    Capacity, Mode, NodeInfo, Problem, Resources, SpreadConstraint, TaintEffect, Toleration,
    TolerationOperator,
};
use std::borrow::Borrow;
use std::collections::BTreeMap;
use thiserror::Error;

/// Why Kubernetes objects cannot be turned into a [`Problem`]. Each names the
/// object and the field as Kubernetes spells it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AdaptError {
    /// A Node has a field the planner cannot read.
    #[error("node {node}: {field}: {message}")]
    Node {
        node: String,
        field: String,
        message: String,
    },
    /// Two Nodes share a name.
    #[error("node {node}: metadata.name: given twice")]
    DuplicateNode { node: String },
    /// A Pod has a field the planner cannot read.
    #[error("pod {pod}: {field}: {message}")]
    Pod {
        /// `namespace/name`.
        pod: String,
        field: String,
        message: String,
    },
    /// A field of the ValkeyCluster the planner cannot use.
    #[error("{field}: {message}")]
    Cluster { field: String, message: String },
}

impl AdaptError {
    /// Stable name for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Node { .. } | Self::DuplicateNode { .. } => "InvalidNode",
            Self::Pod { .. } => "InvalidPod",
            Self::Cluster { .. } => "InvalidSpec",
        }
    }
}

/// The planner's view of `cluster` over `nodes`, with the current placement
/// read from `pods` (members of this cluster) and the room the other pods take.
///
/// Nodes are sorted by name and running members by (shard, member), so the
/// order of the input lists never changes the plan.
pub fn problem<N: Borrow<Node>, P: Borrow<Pod>>(
    cluster: &ValidatedCluster,
    nodes: &[N],
    pods: &[P],
) -> Result<Problem, AdaptError> {
    let mut infos: BTreeMap<String, NodeInfo> = BTreeMap::new();
    for node in nodes {
        let info = nodes::node_info(node.borrow())?;
        if infos.contains_key(&info.name) {
            return Err(AdaptError::DuplicateNode { node: info.name });
        }
        infos.insert(info.name.clone(), info);
    }

    let census = pods::census(cluster, pods)?;
    for (node, used) in &census.used_by_others {
        if let Some(info) = infos.get_mut(node) {
            info.used_by_others = *used;
        }
    }

    Ok(Problem {
        cluster: cluster.name.clone(),
        shards: cluster.shards,
        replicas: cluster.replicas,
        constraints: constraints(cluster),
        nodes: infos.into_values().collect(),
        running: census.running,
        request: Resources {
            cpu_millis: cluster.member_request.cpu_millis,
            memory_bytes: cluster.member_request.memory_bytes,
        },
        node_selector: cluster.node_selector.clone(),
        tolerations: tolerations(&cluster.tolerations)?,
        primaries: census.primaries,
    })
}

/// The cluster's spread constraints with resolved keys, in spec order.
pub fn constraints(cluster: &ValidatedCluster) -> Vec<SpreadConstraint> {
    cluster
        .spread
        .iter()
        .map(|c| SpreadConstraint {
            topology_key: c.topology_key.clone(),
            max_replicas: c.max_replicas,
            mode: match c.mode {
                SpreadMode::Preferred => Mode::Preferred,
                SpreadMode::Required => Mode::Required,
            },
        })
        .collect()
}

/// Member pods' tolerations in the planner's terms. Empty strings mean unset,
/// as in Kubernetes (an empty key with Exists tolerates every taint).
pub fn tolerations(tolerations: &[K8sToleration]) -> Result<Vec<Toleration>, AdaptError> {
    tolerations
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let field = |f: &str| format!("spec.scheduling.tolerations[{i}].{f}");
            let operator = match t.operator.as_deref() {
                None | Some("" | "Equal") => TolerationOperator::Equal,
                Some("Exists") => TolerationOperator::Exists,
                Some(other) => {
                    return Err(AdaptError::Cluster {
                        field: field("operator"),
                        message: format!("must be Equal or Exists, got {other:?}"),
                    });
                }
            };
            let effect = match t.effect.as_deref() {
                None | Some("") => None,
                Some(e) => Some(taint_effect(e).ok_or_else(|| AdaptError::Cluster {
                    field: field("effect"),
                    message: format!(
                        "must be NoSchedule, PreferNoSchedule or NoExecute, got {e:?}"
                    ),
                })?),
            };
            Ok(Toleration {
                key: non_empty(t.key.as_deref()),
                operator,
                value: non_empty(t.value.as_deref()),
                effect,
            })
        })
        .collect()
}

/// A taint effect by its Kubernetes name.
pub fn taint_effect(name: &str) -> Option<TaintEffect> {
    match name {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

pub(crate) fn non_empty(s: Option<&str>) -> Option<String> {
    s.filter(|s| !s.is_empty()).map(str::to_string)
}

/// Adds two capacities, saturating (a sum that large means "full" anyway).
pub(crate) fn add(a: Capacity, b: Capacity) -> Capacity {
    Capacity {
        cpu_millis: a.cpu_millis.saturating_add(b.cpu_millis),
        memory_bytes: a.memory_bytes.saturating_add(b.memory_bytes),
        pods: a.pods.saturating_add(b.pods),
    }
}

// Compiled always (not only under cfg(test)), so that every build shares one
// `resources`: the operator's and decide's tests use these too.
#[doc(hidden)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
pub mod fixtures {
    //! Small builders of Nodes, Pods and clusters for tests.

    use api::ValidatedCluster;
    use api::v1alpha1::{ValkeyCluster, ValkeyClusterSpec, validate};
    use k8s_openapi::api::core::v1::{Node, Pod};

    /// Test YAML is written indented inside Rust strings: the first line at
    /// column 0, the rest indented by a common amount, which is removed.
    pub fn dedent(text: &str) -> String {
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        let rest: Vec<&str> = lines.collect();
        let indent = rest
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0);
        std::iter::once(first)
            .chain(rest.iter().map(|l| l.get(indent..).unwrap_or("")))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn cluster(yaml_spec: &str) -> ValidatedCluster {
        let spec: ValkeyClusterSpec = serde_saphyr::from_str(&dedent(yaml_spec)).unwrap();
        let mut c = ValkeyCluster::new("cache", spec);
        c.metadata.namespace = Some("prod".into());
        validate(&c).unwrap()
    }

    pub fn node(yaml: &str) -> Node {
        serde_saphyr::from_str(&dedent(yaml)).unwrap()
    }

    pub fn pod(yaml: &str) -> Pod {
        serde_saphyr::from_str(&dedent(yaml)).unwrap()
    }

    pub fn ready_node(name: &str, zone: &str) -> Node {
        node(&format!(
            "metadata:
               name: {name}
               labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}}}
             status:
               allocatable: {{cpu: '4', memory: 8Gi, pods: '110'}}
               conditions: [{{type: Ready, status: 'True'}}]"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn the_problem_carries_the_clusters_shape_and_resolved_constraints() {
        let c = cluster(
            "shards: 2
             replicas: 2
             replicaSpreadConstraints:
               - {topologyKey: zone, maxReplicas: 1, mode: Required}
               - {topologyKey: node, maxReplicas: 1}
             resources: {requests: {cpu: 500m, memory: 1Gi}}
             exporter: {enabled: true}
             scheduling: {nodeSelector: {pool: valkey}}",
        );
        let p = problem(
            &c,
            &[ready_node("n2", "b"), ready_node("n1", "a")],
            &[] as &[Pod],
        )
        .unwrap();
        assert_eq!((p.cluster.as_str(), p.shards, p.replicas), ("cache", 2, 2));
        assert_eq!(
            p.constraints,
            [
                SpreadConstraint {
                    topology_key: "topology.kubernetes.io/zone".into(),
                    max_replicas: 1,
                    mode: Mode::Required
                },
                SpreadConstraint {
                    topology_key: "kubernetes.io/hostname".into(),
                    max_replicas: 1,
                    mode: Mode::Preferred
                },
            ]
        );
        // The Valkey container's request plus the exporter sidecar's
        // default (10m, 16Mi): what the scheduler adds up for the pod.
        assert_eq!(
            p.request,
            Resources {
                cpu_millis: Some(510),
                memory_bytes: Some((1 << 30) + (16 << 20))
            }
        );
        let names: Vec<&str> = p.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "n2"], "nodes are sorted by name");
        assert_eq!(
            p.node_selector.get("pool").map(String::as_str),
            Some("valkey")
        );
    }

    #[test]
    fn duplicate_node_names_are_refused() {
        let c = cluster("shards: 1");
        let err = problem(
            &c,
            &[ready_node("n1", "a"), ready_node("n1", "b")],
            &[] as &[Pod],
        )
        .unwrap_err();
        assert_eq!(err, AdaptError::DuplicateNode { node: "n1".into() });
    }

    #[test]
    fn tolerations_map_empty_strings_to_unset_and_default_to_equal() {
        let t = tolerations(&[
            K8sToleration {
                operator: Some("Exists".into()),
                ..Default::default()
            },
            K8sToleration {
                key: Some("dedicated".into()),
                value: Some("valkey".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            },
        ])
        .unwrap();
        assert_eq!(
            t,
            [
                Toleration {
                    key: None,
                    operator: TolerationOperator::Exists,
                    value: None,
                    effect: None
                },
                Toleration {
                    key: Some("dedicated".into()),
                    operator: TolerationOperator::Equal,
                    value: Some("valkey".into()),
                    effect: Some(TaintEffect::NoSchedule)
                },
            ]
        );
    }

    #[test]
    fn other_pods_room_is_charged_to_their_node() {
        let c = cluster("shards: 1");
        let other = pod("metadata: {name: web, namespace: prod}
             spec:
               nodeName: n1
               containers: [{name: c, resources: {requests: {cpu: '1', memory: 1Gi}}}]");
        let p = problem(
            &c,
            &[ready_node("n1", "a"), ready_node("n2", "b")],
            &[other],
        )
        .unwrap();
        assert_eq!(
            p.nodes[0].used_by_others,
            Capacity {
                cpu_millis: 1000,
                memory_bytes: 1 << 30,
                pods: 1
            }
        );
        assert_eq!(p.nodes[1].used_by_others, Capacity::default());
    }
}
