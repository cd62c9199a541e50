//! Node registration and heartbeats: the Node object with its labels and
//! status, the `kube-node-lease` Lease renewed every 2 s, and the Ready
//! condition refreshed every 5 s. A node whose kubelet is cut off (failed or
//! partitioned) simply stops writing, and the node lifecycle controller does
//! the rest, as on a real cluster.

use super::faults::NodeHealth;
use crate::state::NodeSpec;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The kubelet version nodes report (the pinned control-plane release).
pub const KUBELET_VERSION: &str = "v1.36.3";
const LEASE_PERIOD: Duration = Duration::from_secs(2);
const STATUS_PERIOD: Duration = Duration::from_secs(5);
const LEASE_DURATION_SECONDS: i32 = 40;
const FIELD_MANAGER: &str = "testbed-agent";

/// Errors talking to the API about nodes.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("registering node {node}: {source}")]
    Register { node: String, source: kube::Error },
    #[error("updating the status of node {node}: {source}")]
    Status { node: String, source: kube::Error },
    #[error("renewing the lease of node {node}: {source}")]
    Lease { node: String, source: kube::Error },
}

/// The labels a kubelet puts on its Node.
pub fn node_labels(spec: &NodeSpec) -> BTreeMap<String, String> {
    [
        ("kubernetes.io/hostname", spec.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
        ("topology.kubernetes.io/zone", spec.zone.as_str()),
        ("topology.kubernetes.io/region", spec.region.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The node's InternalIP: the first address of its pod CIDR (never given to a pod).
pub fn internal_ip(spec: &NodeSpec) -> String {
    super::network::Cidr::parse(&spec.pod_cidr)
        .map(|c| c.node_addr().to_string())
        .unwrap_or_else(|| "127.0.0.1".to_string())
}

/// The Node as first registered.
pub fn node_object(spec: &NodeSpec) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(spec.name.clone()),
            labels: Some(node_labels(spec)),
            annotations: Some(
                [
                    ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
                    (
                        "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                        "true".to_string(),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidr: Some(spec.pod_cidr.clone()),
            pod_cidrs: Some(vec![spec.pod_cidr.clone()]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The status merge patch: capacity, conditions with fresh heartbeats
/// (transition times kept from `observed` while a condition holds), addresses
/// and nodeInfo.
pub fn status_patch(spec: &NodeSpec, observed: Option<&Node>, now: Timestamp) -> Value {
    let now_s = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let stamp = |t: Timestamp| {
        k8s_openapi::jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", t).unwrap_or_default()
    };
    let previous = |type_: &str| {
        observed
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
    };
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        let transition = match previous(type_) {
            Some(p) if p.status == status => p
                .last_transition_time
                .as_ref()
                .map(|t| stamp(t.0))
                .unwrap_or_else(|| stamp(now_s)),
            _ => stamp(now_s),
        };
        json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": stamp(now_s), "lastTransitionTime": transition,
        })
    };
    let resources = json!({
        "cpu": spec.cpu, "memory": spec.memory, "pods": spec.pods.to_string(),
        "ephemeral-storage": "100Gi",
    });
    json!({
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                cond("NetworkUnavailable", "False", "RouteCreated", "testbed agent routes pod addresses"),
                cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": internal_ip(spec)},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("testbed-{}", spec.name),
                "systemUUID": format!("testbed-{}", spec.name),
                "bootID": format!("testbed-{}", spec.name),
                "kernelVersion": kernel_version(),
                "osImage": "testbed simulated node",
                "containerRuntimeVersion": "testbed://0.1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
    })
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The node's Lease, owned by the Node so it goes when the Node goes.
pub fn lease_object(node: &str, node_uid: Option<&str>, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.to_string()),
            namespace: Some("kube-node-lease".into()),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.to_string(),
                    uid: uid.to_string(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.to_string()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Creates the Node if missing; if present, only makes sure our labels are on
/// it (taints, unschedulable and anything else others set are left alone).
pub async fn register(client: &kube::Client, spec: &NodeSpec) -> Result<Node, NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let err = |source| NodeError::Register {
        node: spec.name.clone(),
        source,
    };
    match api.get_opt(&spec.name).await.map_err(err)? {
        Some(existing) => {
            let have = existing.metadata.labels.clone().unwrap_or_default();
            let want = node_labels(spec);
            if want.iter().all(|(k, v)| have.get(k) == Some(v)) {
                return Ok(existing);
            }
            let patch = json!({"metadata": {"labels": want}});
            api.patch(&spec.name, &field_manager(), &Patch::Merge(&patch))
                .await
                .map_err(err)
        }
        None => match api.create(&PostParams::default(), &node_object(spec)).await {
            Ok(n) => Ok(n),
            Err(kube::Error::Api(s)) if s.code == 409 => api.get(&spec.name).await.map_err(err),
            Err(e) => Err(err(e)),
        },
    }
}

fn field_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// Posts the node status.
pub async fn post_status(
    client: &kube::Client,
    spec: &NodeSpec,
    observed: Option<&Node>,
) -> Result<Node, NodeError> {
    let api: Api<Node> = Api::all(client.clone());
    let patch = status_patch(spec, observed, Timestamp::now());
    api.patch_status(&spec.name, &field_manager(), &Patch::Merge(&patch))
        .await
        .map_err(|source| NodeError::Status {
            node: spec.name.clone(),
            source,
        })
}

/// Renews (or creates) the node's Lease.
pub async fn renew_lease(
    client: &kube::Client,
    node: &str,
    node_uid: Option<&str>,
) -> Result<(), NodeError> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let now = Timestamp::now();
    let err = |source| NodeError::Lease {
        node: node.to_string(),
        source,
    };
    let patch = json!({"spec": {
        "holderIdentity": node,
        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
        "renewTime": MicroTime(now),
    }});
    match api
        .patch(node, &field_manager(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            match api
                .create(&PostParams::default(), &lease_object(node, node_uid, now))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(err(e)),
            }
        }
        Err(e) => Err(err(e)),
    }
}

/// The heartbeat of one node for the life of the agent: register, then renew
/// the Lease every 2 s and post status every 5 s while the node's kubelet can
/// reach the API; say nothing while it cannot; post at once when it can again.
pub async fn heartbeat_loop(
    client: kube::Client,
    spec: NodeSpec,
    mut health: tokio::sync::watch::Receiver<NodeHealth>,
) {
    let mut node: Option<Node> = None;
    let mut last_status: Option<tokio::time::Instant> = None;
    loop {
        let h = *health.borrow_and_update();
        if h.api_connected() {
            if node.is_none() {
                match register(&client, &spec).await {
                    Ok(n) => {
                        tracing::info!(node = %spec.name, "node registered");
                        node = Some(n);
                    }
                    Err(e) => tracing::warn!(error = %e, "node registration failed, retrying"),
                }
            }
            if let Some(current) = &node {
                let uid = current.metadata.uid.clone();
                if let Err(e) = renew_lease(&client, &spec.name, uid.as_deref()).await {
                    tracing::warn!(error = %e, "lease renewal failed");
                }
                let due = last_status
                    .map(|t| t.elapsed() >= STATUS_PERIOD)
                    .unwrap_or(true);
                if due {
                    match post_status(&client, &spec, Some(current)).await {
                        Ok(n) => {
                            node = Some(n);
                            last_status = Some(tokio::time::Instant::now());
                        }
                        Err(NodeError::Status {
                            source: kube::Error::Api(s),
                            ..
                        }) if s.code == 404 => {
                            // Someone deleted our Node: register again, as a kubelet does.
                            tracing::info!(node = %spec.name, "node object gone, registering again");
                            node = None;
                            last_status = None;
                            continue;
                        }
                        Err(e) => tracing::warn!(error = %e, "node status update failed"),
                    }
                }
            }
        } else {
            // Cut off: the next time we can talk, post status immediately.
            last_status = None;
        }
        tokio::select! {
            _ = tokio::time::sleep(LEASE_PERIOD) => {}
            changed = health.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn spec() -> NodeSpec {
        NodeSpec {
            name: "node-1a-1".into(),
            region: "region-1".into(),
            zone: "zone-1a".into(),
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 110,
            pod_cidr: "10.203.1.0/24".into(),
        }
    }

    #[test]
    fn labels_carry_hostname_zone_and_region() {
        let l = node_labels(&spec());
        assert_eq!(l["kubernetes.io/hostname"], "node-1a-1");
        assert_eq!(l["topology.kubernetes.io/zone"], "zone-1a");
        assert_eq!(l["topology.kubernetes.io/region"], "region-1");
        assert_eq!(l["kubernetes.io/os"], "linux");
    }

    #[test]
    fn status_reports_ready_capacity_addresses_and_version() {
        let p = status_patch(&spec(), None, Timestamp::from_second(1000).unwrap());
        let s = &p["status"];
        assert_eq!(s["allocatable"]["cpu"], "4");
        assert_eq!(s["allocatable"]["memory"], "8Gi");
        assert_eq!(s["capacity"]["pods"], "110");
        assert_eq!(s["addresses"][0]["address"], "10.203.1.1");
        assert_eq!(s["nodeInfo"]["kubeletVersion"], "v1.36.3");
        let ready = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["lastHeartbeatTime"], "1970-01-01T00:16:40Z");
    }

    #[test]
    fn ready_transition_time_is_kept_while_ready_and_moves_after_not_ready() {
        let mut node = node_object(&spec());
        let mk = |status: &str| NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                last_transition_time: Some(Time(Timestamp::from_second(10).unwrap())),
                ..Default::default()
            }]),
            ..Default::default()
        };
        node.status = Some(mk("True"));
        let p = status_patch(&spec(), Some(&node), Timestamp::from_second(1000).unwrap());
        let ready = |p: &Value| {
            p["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap()["lastTransitionTime"]
                .clone()
        };
        assert_eq!(ready(&p), "1970-01-01T00:00:10Z");
        node.status = Some(mk("Unknown"));
        let p = status_patch(&spec(), Some(&node), Timestamp::from_second(1000).unwrap());
        assert_eq!(ready(&p), "1970-01-01T00:16:40Z");
    }

    #[test]
    fn the_lease_belongs_to_its_node() {
        let l = lease_object(
            "node-1a-1",
            Some("uid-1"),
            Timestamp::from_second(5).unwrap(),
        );
        assert_eq!(l.metadata.namespace.as_deref(), Some("kube-node-lease"));
        assert_eq!(
            l.spec.as_ref().unwrap().holder_identity.as_deref(),
            Some("node-1a-1")
        );
        assert_eq!(l.metadata.owner_references.unwrap()[0].kind, "Node");
    }
}
