//! The local-volume provisioner of StorageClass `testbed-local`
//! (`testbed.valkey.rs/local`, WaitForFirstConsumer): once the scheduler has
//! picked a node for a claim's first pod (annotation
//! `volume.kubernetes.io/selected-node`), it creates a `local` PV in
//! `DIR/volumes/<pv>` pinned to that node; the PV controller binds it. Like a
//! local disk, the data stays on that node for every later pod of the claim.
//! Released PVs with reclaim policy Delete are wiped and deleted.

use super::Agent;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use std::path::Path;
use std::sync::Arc;

pub const PROVISIONER: &str = "testbed.valkey.rs/local";
pub const STORAGE_CLASS: &str = "testbed-local";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// Whether we should provision for this claim now; returns the node.
pub fn wants_volume<'a>(
    pvc: &'a PersistentVolumeClaim,
    our_nodes: &dyn Fn(&str) -> bool,
) -> Option<&'a str> {
    let spec = pvc.spec.as_ref()?;
    if spec.storage_class_name.as_deref() != Some(STORAGE_CLASS) {
        return None;
    }
    if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
        return None;
    }
    if pvc.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let node = pvc.metadata.annotations.as_ref()?.get(SELECTED_NODE)?;
    our_nodes(node).then_some(node.as_str())
}

/// The PV for a claim: `pvc-<claim uid>`, `local` at `DIR/volumes/<pv>`,
/// required node affinity to the selected node, pre-bound by claimRef.
pub fn volume_for(
    pvc: &PersistentVolumeClaim,
    node: &str,
    volumes_dir: &Path,
    reclaim: &str,
) -> Option<PersistentVolume> {
    let uid = pvc.metadata.uid.clone()?;
    let name = format!("pvc-{uid}");
    let spec = pvc.spec.as_ref()?;
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
        .unwrap_or_else(|| k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()));
    Some(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some([(PROVISIONED_BY.to_string(), PROVISIONER.to_string())].into()),
            labels: Some([("testbed.valkey.rs/node".to_string(), node.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some([("storage".to_string(), storage)].into()),
            access_modes: spec
                .access_modes
                .clone()
                .or_else(|| Some(vec!["ReadWriteOnce".into()])),
            volume_mode: spec.volume_mode.clone(),
            persistent_volume_reclaim_policy: Some(reclaim.to_string()),
            storage_class_name: Some(STORAGE_CLASS.into()),
            local: Some(LocalVolumeSource {
                path: volumes_dir.join(&name).display().to_string(),
                fs_type: None,
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![node.to_string()]),
                        }]),
                        ..Default::default()
                    }],
                }),
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                name: pvc.metadata.name.clone(),
                namespace: pvc.metadata.namespace.clone(),
                uid: Some(uid),
                resource_version: pvc.metadata.resource_version.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    })
}

/// Whether a PV is ours, released and to be deleted.
pub fn to_reclaim(pv: &PersistentVolume) -> bool {
    let ours = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROVISIONED_BY))
        .is_some_and(|p| p == PROVISIONER);
    let released = pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    let delete = pv
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    ours && released && delete && pv.metadata.deletion_timestamp.is_none()
}

/// Runs both halves (claims and released volumes) for the agent's lifetime.
pub async fn run(agent: Arc<Agent>) {
    tokio::join!(claims(agent.clone()), released(agent));
}

async fn claims(agent: Arc<Agent>) {
    let api: Api<PersistentVolumeClaim> = Api::all(agent.client.clone());
    let pvs: Api<PersistentVolume> = Api::all(agent.client.clone());
    let classes: Api<StorageClass> = Api::all(agent.client.clone());
    let volumes_dir = agent.state.dir.join("volumes");
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(ev) = stream.next().await {
        let pvc = match ev {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "claim watch error");
                continue;
            }
        };
        let Some(node) = wants_volume(&pvc, &|n| agent.node(n).is_some()) else {
            continue;
        };
        let health = *agent.health_rx(node).borrow();
        if !health.api_connected() {
            continue;
        }
        let reclaim = match classes.get_opt(STORAGE_CLASS).await {
            Ok(Some(c)) => c.reclaim_policy.unwrap_or_else(|| "Delete".into()),
            _ => "Delete".into(),
        };
        let Some(pv) = volume_for(&pvc, node, &volumes_dir, &reclaim) else {
            continue;
        };
        let pv_name = pv.metadata.name.clone().unwrap_or_default();
        if let Err(e) = std::fs::create_dir_all(volumes_dir.join(&pv_name)) {
            tracing::warn!(pv = %pv_name, error = %e, "cannot create volume folder");
            continue;
        }
        match pvs.create(&PostParams::default(), &pv).await {
            Ok(_) => {
                tracing::info!(pv = %pv_name, node, claim = ?pvc.metadata.name, "volume provisioned")
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => tracing::warn!(pv = %pv_name, error = %e, "volume create failed"),
        }
    }
}

async fn released(agent: Arc<Agent>) {
    let api: Api<PersistentVolume> = Api::all(agent.client.clone());
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(ev) = stream.next().await {
        let Ok(pv) = ev else {
            continue;
        };
        if !to_reclaim(&pv) {
            continue;
        }
        let name = pv.metadata.name.clone().unwrap_or_default();
        if let Some(path) = pv
            .spec
            .as_ref()
            .and_then(|s| s.local.as_ref())
            .map(|l| l.path.clone())
        {
            // Only ever wipe folders under our own volumes dir.
            let path = std::path::PathBuf::from(path);
            if path.starts_with(agent.state.dir.join("volumes")) {
                let _ = tokio::fs::remove_dir_all(&path).await;
            }
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => tracing::info!(pv = %name, "released volume deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => tracing::warn!(pv = %name, error = %e, "volume delete failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeStatus, VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pvc(selected: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data-vk-0".into()),
                namespace: Some("ns".into()),
                uid: Some("abc".into()),
                annotations: selected.map(|n| [(SELECTED_NODE.to_string(), n.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some(STORAGE_CLASS.into()),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some([("storage".to_string(), Quantity("2Gi".into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn claims_wait_for_the_scheduler_to_pick_one_of_our_nodes() {
        let ours = |n: &str| n == "node-1a-1";
        assert_eq!(wants_volume(&pvc(None), &ours), None);
        assert_eq!(
            wants_volume(&pvc(Some("node-1a-1")), &ours),
            Some("node-1a-1")
        );
        assert_eq!(wants_volume(&pvc(Some("elsewhere")), &ours), None);
        let mut bound = pvc(Some("node-1a-1"));
        bound.spec.as_mut().unwrap().volume_name = Some("pv1".into());
        assert_eq!(wants_volume(&bound, &ours), None);
        let mut other = pvc(Some("node-1a-1"));
        other.spec.as_mut().unwrap().storage_class_name = Some("fast".into());
        assert_eq!(wants_volume(&other, &ours), None);
    }

    #[test]
    fn the_volume_is_pinned_to_the_node_and_sized_like_the_claim() {
        let pv = volume_for(
            &pvc(Some("node-1a-1")),
            "node-1a-1",
            Path::new("/tb/volumes"),
            "Delete",
        )
        .unwrap();
        assert_eq!(pv.metadata.name.as_deref(), Some("pvc-abc"));
        let s = pv.spec.unwrap();
        assert_eq!(s.capacity.unwrap()["storage"].0, "2Gi");
        assert_eq!(s.local.unwrap().path, "/tb/volumes/pvc-abc");
        let term = &s
            .node_affinity
            .unwrap()
            .required
            .unwrap()
            .node_selector_terms[0];
        assert_eq!(
            term.match_expressions.as_ref().unwrap()[0]
                .values
                .as_ref()
                .unwrap()[0],
            "node-1a-1"
        );
        let claim = s.claim_ref.unwrap();
        assert_eq!(claim.uid.as_deref(), Some("abc"));
        assert_eq!(claim.namespace.as_deref(), Some("ns"));
        assert_eq!(
            s.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
    }

    #[test]
    fn only_our_released_delete_volumes_are_reclaimed() {
        let mut pv = volume_for(&pvc(Some("n")), "n", Path::new("/v"), "Delete").unwrap();
        assert!(!to_reclaim(&pv));
        pv.status = Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        });
        assert!(to_reclaim(&pv));
        pv.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into());
        assert!(!to_reclaim(&pv));
    }
}
