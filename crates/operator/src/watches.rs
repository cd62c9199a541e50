//! The watches every controller shares the shape of: the `Api` of a scope,
//! and a cache of the objects a kind of set owns (by its label) whose events
//! also trigger that controller's reconciles.

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::sync::Arc;
use tracing::Instrument as _;

/// Events a shared store's subscribers may fall behind by before its watch
/// waits for them (the controller reads them as triggers).
pub const SHARED_BUFFER: usize = 1024;

/// A store of kind `K` in scope `ns` with label `label` (`valkey.rs/cluster`,
/// `valkey.rs/replication`), the
/// stream of its objects for the controller's triggers, and the task that
/// drives its watch.
pub fn owned_store<K>(
    client: &Client,
    ns: Option<&str>,
    label: &'static str,
) -> Option<(
    Store<K>,
    impl futures::Stream<Item = Arc<K>> + Send + 'static,
    tokio::task::JoinHandle<()>,
)>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store_shared::<K>(SHARED_BUFFER);
    let subscriber = writer.subscribe()?;
    let kind = K::kind(&()).to_string();
    let driver = watcher(
        scoped::<K>(client, ns),
        watcher::Config::default().labels(label),
    )
    .default_backoff()
    .modify(|o: &mut K| o.managed_fields_mut().clear())
    .reflect_shared(writer)
    .for_each(|_| futures::future::ready(()));
    let task = tokio::spawn(driver.instrument(tracing::info_span!("owned_cache", %kind)));
    Some((reader, subscriber, task))
}

/// `Api` of a namespaced kind in `ns`, or in every namespace.
pub fn scoped<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A scope's subscribers to the cluster-wide Node and Pod caches (one per
/// controller that reads them).
pub struct Triggers {
    pub nodes: reflector::ReflectHandle<k8s_openapi::api::core::v1::Node>,
    pub pods: reflector::ReflectHandle<k8s_openapi::api::core::v1::Pod>,
}
