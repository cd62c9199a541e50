//! A Kubernetes Node as the planner sees it.

use super::{AdaptError, non_empty, taint_effect};
use api::quantity;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use placement::{Capacity, NodeInfo, Taint};
use std::collections::BTreeMap;

/// Whether the node's `Ready` condition is `True` (a node without one, or
/// with `False` or `Unknown`, is not Ready).
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The planner's [`NodeInfo`] of `node`, with nothing yet charged to other
/// pods. Allocatable falls back to capacity when a node reports none (as a
/// kubelet without reservations would).
pub fn node_info(node: &Node) -> Result<NodeInfo, AdaptError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(AdaptError::Node {
            node: "<unnamed>".into(),
            field: "metadata.name".into(),
            message: "required".into(),
        });
    }
    let err = |field: String, message: String| AdaptError::Node {
        node: name.clone(),
        field,
        message,
    };
    let spec = node.spec.clone().unwrap_or_default();
    let taints = spec
        .taints
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let effect = taint_effect(&t.effect).ok_or_else(|| {
                err(
                    format!("spec.taints[{i}].effect"),
                    format!(
                        "must be NoSchedule, PreferNoSchedule or NoExecute, got {:?}",
                        t.effect
                    ),
                )
            })?;
            Ok(Taint {
                key: t.key,
                value: non_empty(t.value.as_deref()),
                effect,
            })
        })
        .collect::<Result<Vec<_>, AdaptError>>()?;

    let status = node.status.as_ref();
    let (field, resources) = match status.and_then(|s| s.allocatable.as_ref()) {
        Some(a) => ("status.allocatable", Some(a)),
        None => ("status.capacity", status.and_then(|s| s.capacity.as_ref())),
    };
    let empty = BTreeMap::new();
    let allocatable = capacity(resources.unwrap_or(&empty), field, &err)?;

    Ok(NodeInfo {
        name: name.clone(),
        labels: node.metadata.labels.clone().unwrap_or_default(),
        ready: is_ready(node),
        unschedulable: spec.unschedulable.unwrap_or(false),
        taints,
        allocatable,
        used_by_others: Capacity::default(),
    })
}

fn capacity(
    resources: &BTreeMap<String, Quantity>,
    field: &str,
    err: &impl Fn(String, String) -> AdaptError,
) -> Result<Capacity, AdaptError> {
    let read = |resource: &str, parse: fn(&str) -> Result<u64, quantity::QuantityError>| {
        resources.get(resource).map_or(Ok(0), |q| {
            parse(&q.0).map_err(|e| err(format!("{field}.{resource}"), e.to_string()))
        })
    };
    Ok(Capacity {
        cpu_millis: read("cpu", quantity::cpu_millis)?,
        memory_bytes: read("memory", quantity::value)?,
        pods: read("pods", quantity::value)?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::node;
    use super::*;
    use placement::TaintEffect;

    #[test]
    fn a_node_is_ready_only_when_its_ready_condition_is_true() {
        let ready = node("metadata: {name: n1}
             status: {conditions: [{type: MemoryPressure, status: 'False'}, {type: Ready, status: 'True'}]}");
        let unknown = node(
            "metadata: {name: n1}
             status: {conditions: [{type: Ready, status: Unknown}]}",
        );
        let silent = node("metadata: {name: n1}");
        assert!(is_ready(&ready));
        assert!(!is_ready(&unknown));
        assert!(!is_ready(&silent));
    }

    #[test]
    fn cordon_taints_and_allocatable_are_read() {
        let n = node(
            "metadata: {name: n1, labels: {topology.kubernetes.io/zone: a}}
             spec:
               unschedulable: true
               taints:
                 - {key: dedicated, value: valkey, effect: NoSchedule}
                 - {key: node.kubernetes.io/unreachable, effect: NoExecute}
             status:
               allocatable: {cpu: 3900m, memory: 8148784Ki, pods: '110'}
               capacity: {cpu: '4', memory: 8Gi, pods: '110'}",
        );
        let info = node_info(&n).unwrap();
        assert!(info.unschedulable);
        assert_eq!(
            info.labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("a")
        );
        assert_eq!(
            info.taints,
            [
                Taint {
                    key: "dedicated".into(),
                    value: Some("valkey".into()),
                    effect: TaintEffect::NoSchedule
                },
                Taint {
                    key: "node.kubernetes.io/unreachable".into(),
                    value: None,
                    effect: TaintEffect::NoExecute
                },
            ]
        );
        assert_eq!(
            info.allocatable,
            Capacity {
                cpu_millis: 3900,
                memory_bytes: 8_148_784 * 1024,
                pods: 110
            }
        );
    }

    #[test]
    fn capacity_stands_in_for_missing_allocatable() {
        let n = node(
            "metadata: {name: n1}
             status: {capacity: {cpu: '2', memory: 1Gi, pods: '10'}}",
        );
        assert_eq!(
            node_info(&n).unwrap().allocatable,
            Capacity {
                cpu_millis: 2000,
                memory_bytes: 1 << 30,
                pods: 10
            }
        );
    }

    #[test]
    fn a_bad_quantity_names_the_node_and_the_field() {
        let n = node(
            "metadata: {name: n7}
             status: {allocatable: {cpu: lots}}",
        );
        let err = node_info(&n).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("node n7: status.allocatable.cpu: "),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_taint_effect_is_refused() {
        let n = node(
            "metadata: {name: n1}
             spec: {taints: [{key: k, effect: Sometimes}]}",
        );
        let err = node_info(&n).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("node n1: spec.taints[0].effect: "),
            "{err}"
        );
    }
}
