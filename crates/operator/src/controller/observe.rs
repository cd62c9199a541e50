//! Observe, Kubernetes side: the cluster's owned objects (listed by label),
//! its member pods, and every Node and Pod of the cluster-wide caches (other
//! pods use node room the planner must count).

use super::{Context, Error};
use crate::adapt;
use api::ValidatedCluster;
use api::constants::LABEL_CLUSTER;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

/// The Kubernetes side of one cluster, as of this reconcile.
#[derive(Debug, Clone, Default)]
pub struct KubeView {
    /// Every Node (from the cache).
    pub nodes: Vec<Node>,
    /// Every Pod of every namespace (from the cache), for the planner.
    pub all_pods: Vec<Pod>,
    /// This cluster's member pods by (shard, member), in or out of the spec's
    /// shape; a live pod wins over a terminating one.
    pub members: BTreeMap<(u32, u32), Pod>,
    /// Owned objects by name.
    pub statefulsets: BTreeMap<String, StatefulSet>,
    pub config_maps: BTreeMap<String, ConfigMap>,
    pub services: BTreeMap<String, Service>,
    pub pdbs: BTreeMap<String, PodDisruptionBudget>,
    /// The members' volumes (listed only when persistence is on).
    pub pvcs: BTreeMap<String, PersistentVolumeClaim>,
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

async fn list<K>(
    client: &kube::Client,
    ns: &str,
    cluster: &str,
) -> Result<BTreeMap<String, K>, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("{LABEL_CLUSTER}={cluster}"));
    let list = api.list(&lp).await.map_err(|source| Error::Read {
        kind: super::apply::kind_name(&K::kind(&())),
        name: format!("{ns}/*,{LABEL_CLUSTER}={cluster}"),
        source,
    })?;
    Ok(list.items.into_iter().map(|o| (o.name_any(), o)).collect())
}

/// Reads everything the reconcile needs from Kubernetes.
pub async fn kubernetes(ctx: &Context, cluster: &ValidatedCluster) -> Result<KubeView, Error> {
    let ns = cluster.namespace.as_str();
    let name = cluster.name.as_str();
    let statefulsets = list::<StatefulSet>(&ctx.client, ns, name).await?;
    let config_maps = list::<ConfigMap>(&ctx.client, ns, name).await?;
    let services = list::<Service>(&ctx.client, ns, name).await?;
    let pdbs = list::<PodDisruptionBudget>(&ctx.client, ns, name).await?;
    let pvcs = if cluster.persistence.is_some() {
        list::<PersistentVolumeClaim>(&ctx.client, ns, name).await?
    } else {
        BTreeMap::new()
    };

    let nodes: Vec<Node> = ctx.nodes.state().iter().map(|n| Node::clone(n)).collect();
    let pods: Vec<Arc<Pod>> = ctx.pods.state();
    let mut members: BTreeMap<(u32, u32), Pod> = BTreeMap::new();
    for pod in &pods {
        if adapt::pods::is_finished(pod) {
            continue;
        }
        let Some(key) = adapt::pods::member_of(cluster, pod) else {
            continue;
        };
        let replace = match members.get(&key) {
            None => true,
            Some(existing) => {
                existing.metadata.deletion_timestamp.is_some()
                    && pod.metadata.deletion_timestamp.is_none()
            }
        };
        if replace {
            members.insert(key, Pod::clone(pod));
        }
    }
    let all_pods = pods.iter().map(|p| Pod::clone(p)).collect();
    Ok(KubeView {
        nodes,
        all_pods,
        members,
        statefulsets,
        config_maps,
        services,
        pdbs,
        pvcs,
    })
}
