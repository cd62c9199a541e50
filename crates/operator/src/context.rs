//! What every reconcile of every controller shares: the operator's settings,
//! the client, the caches, the metrics, what is remembered between
//! reconciles. A module of its own, beside the controllers: a step that needs
//! the context reaches nothing of another step through it.

use crate::controller::{pulse, valkey_io};
use crate::events;
use crate::metrics::Metrics;
use api::constants::LABEL_CLUSTER;
use decide::memory::Memory;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Knobs of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Valkey connection and command timeouts.
    pub timeouts: valkey_io::Timeouts,
    /// Requeue while a cluster converges.
    pub fast_requeue: Duration,
    /// Requeue of a steady cluster (the resync).
    pub slow_requeue: Duration,
    /// Clusters reconciled at once.
    pub concurrency: u16,
    /// Watch only these namespaces (every namespace when empty). With a
    /// list, every watch of a namespaced kind (Secrets included) stays in
    /// those namespaces, so namespaced Roles are all the operator needs there;
    /// only Nodes and Pods (for the room on each node) are read cluster-wide.
    pub namespaces: Vec<String>,
    /// Name of this operator instance in events.
    pub instance: Option<String>,
    /// How often steady clusters' members are looked at between resyncs
    /// (see [`pulse`]); `None`: never.
    pub pulse: Option<Duration>,
    /// The image of the member pods' exporter sidecar: the operator's own.
    pub exporter_image: String,
    /// Whether a cluster that does not say keeps a NetworkPolicy over its
    /// members (on unless the operator is told otherwise: the bus is open
    /// to any pod without it).
    pub member_network_policy: bool,
    /// The operator's own pods, which the members' NetworkPolicy admits.
    pub operator_pods: Option<api::v1alpha1::OperatorPods>,
    /// `--allowed-images`: the patterns `spec.image` must match (empty: any).
    pub allowed_images: Vec<String>,
    /// What `validate` allows beyond the restricted defaults
    /// (`--allow-privileged-security-context`).
    pub validation: api::v1alpha1::ValidationSettings,
}

impl Settings {
    /// Why `image` (the value of `field`) may not run under
    /// `--allowed-images`, or `None` when it may.
    pub fn image_refused(&self, field: &str, image: &str) -> Option<String> {
        if self.allowed_images.is_empty()
            || self.allowed_images.iter().any(|p| wildcard_match(p, image))
        {
            return None;
        }
        Some(format!(
            "{field}: {image:?} matches none of the images this operator allows ({})",
            self.allowed_images.join(", ")
        ))
    }

    /// Why one of the images a member pod would run may not run under
    /// `--allowed-images`: `spec.image` and every image `spec.podTemplate`
    /// adds (sidecars and init containers run in the member's pod, beside
    /// its data and its password). The exporter and the restore container
    /// run the operator's own image, which the operator chose itself.
    pub fn images_refused(&self, cluster: &api::ValidatedCluster) -> Option<String> {
        let t = &cluster.pod_template;
        let added = |at: &'static str, list: &[k8s_openapi::api::core::v1::Container]| {
            // Named by container name: the validated lists are not the
            // spec's (the `valkey` overlay is no sidecar).
            list.iter()
                .filter_map(move |c| {
                    let image = c.image.as_deref()?;
                    Some((
                        format!("spec.podTemplate.spec.{at}[{}].image", c.name),
                        image.to_string(),
                    ))
                })
                .collect::<Vec<_>>()
        };
        std::iter::once(("spec.image".to_string(), cluster.image.clone()))
            .chain(added("initContainers", &t.init_containers))
            .chain(added("containers", &t.sidecars))
            .find_map(|(field, image)| self.image_refused(&field, &image))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any text
/// (possibly empty) and every other character for itself. Written here: a
/// glob crate would bring path rules (`/` special) that image references do
/// not want.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    // No `*` (one part): the text itself.
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            timeouts: valkey_io::Timeouts::default(),
            fast_requeue: Duration::from_secs(1),
            slow_requeue: Duration::from_secs(30),
            concurrency: 4,
            namespaces: Vec::new(),
            instance: None,
            pulse: Some(Duration::from_secs(2)),
            exporter_image: api::v1alpha1::defaults::EXPORTER_IMAGE.to_string(),
            member_network_policy: true,
            operator_pods: None,
            allowed_images: Vec::new(),
            validation: api::v1alpha1::ValidationSettings::default(),
        }
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub nodes: Store<Node>,
    pub pods: Store<Pod>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub reporter: Reporter,
    pub settings: Settings,
    pub(crate) memory: Mutex<HashMap<String, Memory>>,
    /// Steady clusters looked at between resyncs.
    pub pulse: pulse::Pulse,
    /// The owned objects of each watched scope (a namespace, or `None` for
    /// all), from the watches that also trigger reconciles.
    pub(crate) owned: Mutex<HashMap<Option<String>, OwnedStores>>,
    /// Secrets this instance wrote, `(namespace, name)` -> the
    /// resourceVersion the write returned: the cache serves such a Secret
    /// only once it holds that version (a reconcile reads its own writes).
    pub(crate) secrets_written: Mutex<HashMap<(String, String), String>>,
}

/// The objects the clusters of one scope own (label `valkey.rs/cluster`),
/// cached by the same watches that trigger their reconciles: each event is
/// in the store before the reconcile it triggers reads it, and a steady
/// reconcile lists nothing.
#[derive(Clone)]
pub struct OwnedStores {
    pub statefulsets: Store<StatefulSet>,
    pub services: Store<Service>,
    pub config_maps: Store<ConfigMap>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub network_policies: Store<NetworkPolicy>,
    /// The Secrets the operator made (password, its record, users,
    /// certificates); user-named Secrets carry no label and are read live.
    pub secrets: Store<Secret>,
}

impl OwnedStores {
    /// Whether every store has its first list (waits up to `timeout`).
    pub async fn ready(&self, timeout: Duration) -> bool {
        let all = async {
            self.statefulsets.wait_until_ready().await.is_ok()
                && self.services.wait_until_ready().await.is_ok()
                && self.config_maps.wait_until_ready().await.is_ok()
                && self.pdbs.wait_until_ready().await.is_ok()
                && self.network_policies.wait_until_ready().await.is_ok()
                && self.secrets.wait_until_ready().await.is_ok()
        };
        tokio::time::timeout(timeout, all).await.unwrap_or(false)
    }
}

impl Context {
    /// A copy of what is remembered about `key` (`namespace/name`).
    pub fn memory(&self, key: &str) -> Memory {
        self.memory
            .lock()
            .map(|m| m.get(key).cloned().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Replaces what is remembered about `key`.
    pub fn remember(&self, key: &str, memory: Memory) {
        if let Ok(mut m) = self.memory.lock() {
            m.insert(key.to_string(), memory);
        }
    }

    /// Events about the object `reference` points to.
    pub fn events(
        &self,
        reference: k8s_openapi::api::core::v1::ObjectReference,
    ) -> events::Events<'_> {
        events::Events::new(
            self.client.clone(),
            self.reporter.clone(),
            &self.recorder,
            reference,
            &self.metrics,
        )
    }

    /// The stores of the scope that holds namespace `ns`.
    pub fn owned_stores(&self, ns: &str) -> Option<OwnedStores> {
        let owned = self.owned.lock().ok()?;
        owned
            .get(&Some(ns.to_string()))
            .or_else(|| owned.get(&None))
            .cloned()
    }

    /// Secret `name` of namespace `ns` from the owned-object cache, unless
    /// the cache has not caught up with this instance's last write of it
    /// (then `None`, and the caller reads it live).
    pub fn cached_secret(&self, ns: &str, name: &str) -> Option<Secret> {
        let stores = self.owned_stores(ns)?;
        let secret = stores.secrets.get(&ObjectRef::new(name).within(ns))?;
        let mut written = self.secrets_written.lock().ok()?;
        let key = (ns.to_string(), name.to_string());
        match written.get(&key) {
            Some(expected) if secret.metadata.resource_version.as_ref() != Some(expected) => {
                return None;
            }
            Some(_) => {
                written.remove(&key);
            }
            None => {}
        }
        Some((*secret).clone())
    }

    /// Notes that Secret `name` of `ns` is at `version` now: what the cache
    /// must show before it serves the Secret again. `None` (a deletion, or
    /// an answer without a version) forgets it: the cache is then read as
    /// it is.
    pub fn secret_seen(&self, ns: &str, name: &str, version: Option<String>) {
        if let Ok(mut written) = self.secrets_written.lock() {
            let key = (ns.to_string(), name.to_string());
            match version {
                Some(v) => written.insert(key, v),
                None => written.remove(&key),
            };
        }
    }

    /// Forgets cluster `key` (`namespace/name`): its memory, and which of
    /// its Secrets this instance last wrote (the Secrets the operator names
    /// after it, and any other the cache shows labelled with it), so a
    /// deleted cluster leaves nothing behind.
    pub(crate) fn forget(&self, key: &str) {
        if let Ok(mut m) = self.memory.lock() {
            m.remove(key);
        }
        let Some((ns, cluster)) = key.split_once('/') else {
            return;
        };
        let mut names: std::collections::HashSet<String> = [
            api::constants::auth_secret_name(cluster),
            api::constants::auth_applied_secret_name(cluster),
            api::constants::tls_secret_name(cluster),
            api::constants::tls_ca_secret_name(cluster),
            api::constants::tls_ca_key_secret_name(cluster),
            api::constants::users_secret_name(cluster),
        ]
        .into_iter()
        .collect();
        if let Some(stores) = self.owned_stores(ns) {
            names.extend(
                stores
                    .secrets
                    .state()
                    .iter()
                    .filter(|s| s.metadata.namespace.as_deref() == Some(ns))
                    .filter(|s| s.labels().get(LABEL_CLUSTER).map(String::as_str) == Some(cluster))
                    .map(|s| s.name_any()),
            );
        }
        if let Ok(mut written) = self.secrets_written.lock() {
            written.retain(|(n, name), _| n != ns || !names.contains(name));
        }
    }
}

#[cfg(test)]
impl Context {
    /// A context as [`run`] makes it, on `client` and the given caches
    /// (the owned objects of every namespace in `owned`), with no pulse
    /// task running.
    pub(crate) fn for_tests(
        client: Client,
        (nodes, pods): (Store<Node>, Store<Pod>),
        owned: OwnedStores,
        settings: Settings,
    ) -> Context {
        let reporter = Reporter {
            controller: api::constants::FIELD_MANAGER.to_string(),
            instance: None,
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            nodes,
            pods,
            metrics: Arc::new(Metrics::new()),
            reporter,
            settings,
            memory: Mutex::new(HashMap::new()),
            pulse: pulse::Pulse::new(),
            owned: Mutex::new(HashMap::from([(None, owned)])),
            secrets_written: Mutex::new(HashMap::new()),
        }
    }

    /// Whether Secret `name` of `ns` carries a read-own-write guard.
    pub(crate) fn guards(&self, ns: &str, name: &str) -> bool {
        self.secrets_written
            .lock()
            .is_ok_and(|w| w.contains_key(&(ns.to_string(), name.to_string())))
    }
}
