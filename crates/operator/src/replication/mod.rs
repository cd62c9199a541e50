//! The ValkeyReplication controller: one primary and its replicas, no
//! cluster mode. The same steps as the cluster controller, in a folder of
//! its own (it reaches nothing of that controller's steps):
//!
//! ```text
//!     dereference + validate (the spec read as a one-shard cluster)
//!       -> observe.rs   member pods and Nodes from the caches, INFO replication of every member
//!       -> decide       (crates/decide: placement, the owned objects, decide::replication:
//!                       the primary, failover, switchover, rolling restart, role labels)
//!       -> act.rs       server-side apply, Secrets, REPLICAOF / FAILOVER, role labels, deletes
//!       -> report.rs    status, conditions and events
//! ```
//!
//! Triggers: the ValkeyReplication, the objects it owns (label
//! `valkey.rs/replication`), its member pods, a Node's readiness, and a
//! requeue every [`decide::replication::STEADY_REQUEUE`] (a server that stops
//! answering has no event: the operator is the set's failure detector).

pub mod act;
pub mod observe;
pub mod reconcile;
pub mod report;
pub mod shared;

pub use shared::Shared;

use crate::context::{Context, OwnedStores};
pub use crate::watches::Triggers;
use crate::watches::{owned_store, scoped};
use api::constants::LABEL_REPLICATION;
use api::v1alpha1::ValkeyReplication;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs the ValkeyReplication controller of scope `ns` until `shutdown`.
pub async fn run(
    ns: Option<String>,
    triggers: Triggers,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = ns.as_deref();
    let scope = ns.map(str::to_string);
    let ctl = Controller::new(
        scoped::<ValkeyReplication>(&client, ns),
        watcher::Config::default().any_semantic(),
    );
    let sets = ctl.store();
    let label = LABEL_REPLICATION;
    let (
        Some((statefulsets, sts_events, sts_task)),
        Some((services, svc_events, svc_task)),
        Some((config_maps, cm_events, cm_task)),
        Some((pdbs, pdb_events, pdb_task)),
        Some((network_policies, np_events, np_task)),
        Some((secrets, secret_events, secret_task)),
    ) = (
        owned_store::<StatefulSet>(&client, ns, label),
        owned_store::<Service>(&client, ns, label),
        owned_store::<ConfigMap>(&client, ns, label),
        owned_store::<PodDisruptionBudget>(&client, ns, label),
        owned_store::<NetworkPolicy>(&client, ns, label),
        owned_store::<Secret>(&client, ns, label),
    )
    else {
        tracing::error!("a shared store gave no subscriber");
        return;
    };
    let caches = [sts_task, svc_task, cm_task, pdb_task, np_task, secret_task];
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        owned: OwnedStores {
            statefulsets,
            services,
            config_maps,
            pdbs,
            network_policies,
            secrets,
        },
        unanswered: Mutex::new(HashMap::new()),
        was_ready: Mutex::new(HashMap::new()),
    });
    let ready_nodes: Mutex<HashMap<String, bool>> = Mutex::new(HashMap::new());
    ctl.owns_shared_stream(sts_events)
        .owns_shared_stream(svc_events)
        .owns_shared_stream(cm_events)
        .owns_shared_stream(pdb_events)
        .owns_shared_stream(np_events)
        .owns_shared_stream(secret_events)
        .watches_shared_stream(triggers.pods, move |pod: Arc<Pod>| {
            let set = pod.labels().get(LABEL_REPLICATION).cloned();
            let pod_ns = pod.namespace();
            let in_scope = scope
                .as_deref()
                .is_none_or(|s| pod_ns.as_deref() == Some(s));
            set.filter(|_| in_scope).map(|name| {
                let r = ObjectRef::<ValkeyReplication>::new(&name);
                match pod_ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
        })
        .watches_shared_stream(triggers.nodes, move |node: Arc<Node>| {
            // Only a change of a Node's readiness matters here (a primary on
            // a node gone NotReady is lost at once).
            let ready = resources::adapt::nodes::is_ready(&node);
            let changed = ready_nodes
                .lock()
                .map(|mut m| m.insert(node.name_any(), ready) != Some(ready))
                .unwrap_or(true);
            if changed {
                sets.state()
                    .iter()
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect()
            } else {
                Vec::new()
            }
        })
        .with_config(
            controller::Config::default()
                .debounce(Duration::from_millis(100))
                .concurrency(ctx.settings.concurrency),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile::entry, error_policy, shared)
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "replication reconcile");
            }
            futures::future::ready(())
        })
        .await;
    for task in caches {
        task.abort();
    }
}

fn error_policy(
    set: Arc<ValkeyReplication>,
    error: &crate::error::Error,
    _: Arc<Shared>,
) -> Action {
    tracing::warn!(set = %set.name_any(), %error, "replication reconcile failed");
    Action::requeue(Duration::from_secs(2))
}
