//! Observe, Kubernetes side: the cluster's owned objects (from the scope's
//! caches, see [`crate::context::OwnedStores`]),
//! its member pods, and every Node and Pod of the cluster-wide caches (other
//! pods use node room the planner must count).
//!
//! A member's pods are told apart by ordinal against its live StatefulSet
//! (see [`decide::moves`]): the member proper, the new copy of a move in
//! flight, and copies on their way out.

use crate::context::Context;
use crate::error::Error;
use api::ValidatedCluster;
use api::constants::LABEL_CLUSTER;
use api::constants::member_name;
use decide::view::{KubeView, failed_creates, short_of_pods, sort_members};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

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
        kind: kind_name(&K::kind(&())),
        name: format!("{ns}/*,{LABEL_CLUSTER}={cluster}"),
        source,
    })?;
    Ok(list.items.into_iter().map(|o| (o.name_any(), o)).collect())
}

/// Why the StatefulSet controller could not create the pods of members
/// that have none: one list of the namespace's `FailedCreate` events of
/// StatefulSets, only while some member has a StatefulSet and no pod (never
/// for a cluster whose pods are all there). A list the operator may not make
/// or that fails leaves the reasons unknown (the status then says the member
/// does not answer, as before); it never fails the reconcile.
async fn pods_not_created(
    ctx: &Context,
    cluster: &ValidatedCluster,
    statefulsets: &BTreeMap<String, StatefulSet>,
    members: &BTreeMap<(u32, u32), Pod>,
) -> BTreeMap<(u32, u32), String> {
    let missing: BTreeMap<String, (u32, u32)> = decide::facts::desired_members(cluster)
        .filter(|key| !members.contains_key(key))
        .map(|(s, m)| (member_name(&cluster.name, s, m), (s, m)))
        .filter(|(sts, _)| statefulsets.get(sts).is_some_and(short_of_pods))
        .collect();
    if missing.is_empty() {
        return BTreeMap::new();
    }
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let lp = ListParams::default()
        .fields("involvedObject.kind=StatefulSet,reason=FailedCreate")
        .limit(500);
    let events = match api.list(&lp).await {
        Ok(list) => list.items,
        Err(e) => {
            tracing::debug!(namespace = %cluster.namespace, error = %e, "listing FailedCreate events");
            return BTreeMap::new();
        }
    };
    failed_creates(&missing, &events)
}

/// The objects of `store` in namespace `ns` that cluster `cluster` owns.
pub fn owned_by<K>(store: &Store<K>, ns: &str, cluster: &str) -> BTreeMap<String, K>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store
        .state()
        .into_iter()
        .filter(|o| {
            o.meta().namespace.as_deref() == Some(ns)
                && o.labels().get(LABEL_CLUSTER).map(String::as_str) == Some(cluster)
        })
        .map(|o| (o.name_any(), K::clone(&o)))
        .collect()
}

/// How long a reconcile waits for the owned-object caches' first list
/// before it lists by itself (only right after the operator starts).
const CACHE_WAIT: Duration = Duration::from_secs(5);

/// Reads everything the reconcile needs from Kubernetes: the owned objects
/// from the scope's caches (listed only while those have not synced yet).
pub async fn kubernetes(ctx: &Context, cluster: &ValidatedCluster) -> Result<KubeView, Error> {
    let ns = cluster.namespace.as_str();
    let name = cluster.name.as_str();
    let cached = match ctx.owned_stores(ns) {
        Some(stores) if stores.ready(CACHE_WAIT).await => Some(stores),
        Some(_) => {
            tracing::warn!(
                namespace = ns,
                "the owned-object caches have not synced: listing"
            );
            None
        }
        None => {
            tracing::warn!(
                namespace = ns,
                "no owned-object caches for this namespace: listing"
            );
            None
        }
    };
    let (statefulsets, config_maps, services, pdbs, network_policies) = match cached {
        Some(s) => (
            owned_by(&s.statefulsets, ns, name),
            owned_by(&s.config_maps, ns, name),
            owned_by(&s.services, ns, name),
            owned_by(&s.pdbs, ns, name),
            owned_by(&s.network_policies, ns, name),
        ),
        None => (
            list::<StatefulSet>(&ctx.client, ns, name).await?,
            list::<ConfigMap>(&ctx.client, ns, name).await?,
            list::<Service>(&ctx.client, ns, name).await?,
            list::<PodDisruptionBudget>(&ctx.client, ns, name).await?,
            list::<NetworkPolicy>(&ctx.client, ns, name).await?,
        ),
    };
    let pvcs = if cluster.persistence.is_some() {
        list::<PersistentVolumeClaim>(&ctx.client, ns, name).await?
    } else {
        BTreeMap::new()
    };

    let nodes = ctx.nodes.state();
    let all_pods = ctx.pods.state();
    let sorted = sort_members(cluster, &statefulsets, &all_pods);
    let pods_not_created = pods_not_created(ctx, cluster, &statefulsets, &sorted.members).await;
    Ok(KubeView {
        nodes,
        all_pods,
        members: sorted.members,
        new_copies: sorted.new_copies,
        condemned: sorted.condemned,
        statefulsets,
        config_maps,
        services,
        pdbs,
        network_policies,
        pvcs,
        missing_nodes: BTreeMap::new(),
        pods_not_created,
    })
}

pub use crate::apply::kind_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_reads_its_own_objects_from_the_scopes_cache() {
        let (store, mut writer) = kube::runtime::reflector::store::<Service>();
        let svc = |ns: &str, name: &str, cluster: &str| {
            let mut s = Service::default();
            s.metadata.namespace = Some(ns.into());
            s.metadata.name = Some(name.into());
            s.metadata.labels = Some(BTreeMap::from([(
                LABEL_CLUSTER.to_string(),
                cluster.to_string(),
            )]));
            s
        };
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Init);
        for s in [
            svc("a", "web", "web"),
            svc("a", "web-0-0", "web"),
            svc("a", "cache", "cache"),
            svc("b", "web", "web"),
        ] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::InitApply(s));
        }
        writer.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
        let got: Vec<String> = owned_by(&store, "a", "web").into_keys().collect();
        assert_eq!(got, vec!["web".to_string(), "web-0-0".to_string()]);
        assert!(owned_by(&store, "c", "web").is_empty());
    }
}
