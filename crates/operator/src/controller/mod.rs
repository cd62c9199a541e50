// Over 600 lines: 31 lines of code; the rest are its unit tests, kept beside it.
//! The ValkeyCluster controller. One reconcile is a pipeline (see
//! [`reconcile`], the driver), one folder or file per step:
//!
//! ```text
//!     dereference + validate (the spec into a ValidatedCluster; an invalid one stops here)
//!       -> observe/   Kubernetes objects, then what every Valkey member says (thin I/O)
//!       -> decide     (crates/decide) the facts derived from both, once, with `now`
//!                     passed in; placement, desired objects, balance, rolling, moves,
//!                     heal, cleanup, the next Valkey commands, rotations (pure: plain
//!                     data in, a decision out)
//!       -> act/       server-side apply, deletions, Valkey commands (thin I/O)
//!       -> report/    status conditions and observations (pure), events, the status write
//! ```
//!
//! The Kubernetes side runs first (observe, place, apply the owned objects),
//! then the Valkey side (observe the members, decide, act), then the report.
//!
//! Triggers: the ValkeyCluster itself, every object it owns (StatefulSets,
//! Services, ConfigMaps, PDBs, Secrets), its member pods (label
//! `valkey.rs/cluster`), and Nodes (a change in what the planner reads of a
//! node reconciles every cluster). Cluster-wide caches of Nodes and Pods feed
//! the placement planner.

pub mod act;
pub mod done;
pub use crate::events;
pub mod observe;
pub mod pulse;
pub mod reconcile;
pub mod report;
pub mod valkey_io;

#[cfg(test)]
mod fake_api;
#[cfg(test)]
mod whole_reconcile;

pub use crate::context::{Context, OwnedStores, Settings, wildcard_match};
pub use crate::error::Error;
pub use decide::memory::Memory;

use crate::http::Health;
use crate::metrics::Metrics;
use api::ValkeyCluster;
use api::constants::LABEL_CLUSTER;
use futures::{FutureExt as _, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use resources::hash::Fnv;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::{Duration, Instant};
use tracing::Instrument as _;

pub(crate) use crate::watches::{SHARED_BUFFER, Triggers, owned_store, scoped};

/// How long a reconcile request waits for more of its kind before it runs
/// (a pass that creates nine StatefulSets, a status write and the watch
/// events it causes, come within milliseconds). Every request waits it,
/// the requeues of a converging cluster too, so it is on the path of every
/// bootstrap step: 500 ms made a 3x2 bootstrap's steps 0.53 s apart.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Strips what the controller never reads, to keep the caches small.
fn slim_node(node: &mut Node) {
    node.managed_fields_mut().clear();
    // Annotations of nodes carry whole JSON documents (CSI, CNI, cloud
    // agents); the planner reads labels, taints, allocatable, conditions
    // and addresses.
    node.metadata.annotations = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.config = None;
        status.features = None;
        status.runtime_handlers = None;
        status.daemon_endpoints = None;
    }
}

/// The operator's own pods (members, backup Jobs) are kept whole; every
/// other pod of the cluster only as the compact record the planner reads
/// (node, phase, effective request): see [`adapt::pods::compact_foreign`].
fn slim_pod(pod: &mut Pod) {
    pod.managed_fields_mut().clear();
    if !adapt::pods::is_ours(pod) {
        adapt::pods::compact_foreign(pod);
    }
}

/// What of a Node the planner reads: a change of anything else (heartbeats)
/// must not reconcile every cluster.
fn node_fingerprint(node: &Node) -> String {
    let ready = adapt::nodes::is_ready(node);
    let spec = node.spec.as_ref();
    Fnv::default()
        .feed_json(&node.metadata.labels)
        .feed_json(&spec.and_then(|s| s.unschedulable))
        .feed_json(&spec.and_then(|s| s.taints.clone()))
        .feed_json(&node.status.as_ref().and_then(|s| s.allocatable.clone()))
        .feed_json(&ready)
        .feed_json(&node.metadata.deletion_timestamp)
        .hex()
}

use resources::adapt;

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scopes: Vec<Option<String>> = if settings.namespaces.is_empty() {
        vec![None]
    } else {
        settings.namespaces.iter().cloned().map(Some).collect()
    };
    // One watch of Nodes and one of Pods feed the planner's caches and,
    // through a subscriber per scope, the controllers' triggers.
    let (nodes, node_writer) = reflector::store_shared::<Node>(SHARED_BUFFER);
    let (pods, pod_writer) = reflector::store_shared::<Pod>(SHARED_BUFFER);
    // Each scope's cluster and replication controllers subscribe.
    let subscribers: Option<Vec<(Triggers, Triggers)>> = scopes
        .iter()
        .map(|_| {
            let pair = || {
                Some(Triggers {
                    nodes: node_writer.subscribe()?,
                    pods: pod_writer.subscribe()?,
                })
            };
            Some((pair()?, pair()?))
        })
        .collect();
    let Some(subscribers) = subscribers else {
        tracing::error!("a shared store gave no subscriber");
        return;
    };
    let (subscribers, replication_triggers): (Vec<_>, Vec<_>) = subscribers.into_iter().unzip();
    let node_cache = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(slim_node)
        .reflect_shared(node_writer)
        .for_each(|_| futures::future::ready(()));
    let pod_cache = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(slim_pod)
        .reflect_shared(pod_writer)
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(node_cache.instrument(tracing::info_span!("node_cache")));
    tokio::spawn(pod_cache.instrument(tracing::info_span!("pod_cache")));
    if nodes.wait_until_ready().await.is_err() || pods.wait_until_ready().await.is_err() {
        tracing::error!("the Node or Pod cache stopped before it synced");
        return;
    }
    tracing::info!(
        nodes = nodes.state().len(),
        pods = pods.state().len(),
        "caches synced"
    );
    health.set_ready(true);

    let ctx = context(&client, (nodes, pods), metrics, &settings);
    // The pulse runs while this instance leads (it ends with the controller).
    let pulse_task = settings.pulse.map(|every| {
        let ctx = ctx.clone();
        tokio::spawn(async move { ctx.pulse.run(every).await })
    });
    let shutdown = shutdown.shared();
    // ValkeyBackups have their own controller (crate::backup::controller):
    // a backup's Job is followed without ever waiting on a cluster's reconcile.
    let backups = futures::future::join_all(scopes.iter().map(|ns| {
        crate::backup::controller::run(
            scoped(&client, ns.as_deref()),
            scoped(&client, ns.as_deref()),
            ctx.clone(),
            shutdown.clone(),
        )
    }));
    // ValkeyBackupSchedules too: a run creates a ValkeyBackup, which the
    // backup controller takes.
    let schedules = futures::future::join_all(scopes.iter().map(|ns| {
        crate::backup::schedule::run(
            scoped(&client, ns.as_deref()),
            scoped(&client, ns.as_deref()),
            ctx.clone(),
            shutdown.clone(),
        )
    }));
    let replications = futures::future::join_all(
        scopes
            .iter()
            .cloned()
            .zip(replication_triggers)
            .map(|(ns, t)| crate::replication::run(ns, t, ctx.clone(), shutdown.clone())),
    );
    let clusters =
        futures::future::join_all(scopes.into_iter().zip(subscribers).map(|(ns, triggers)| {
            watch_scope(client.clone(), ns, triggers, ctx.clone(), shutdown.clone())
        }));
    futures::future::join4(clusters, backups, schedules, replications).await;
    if let Some(task) = pulse_task {
        task.abort();
    }
    tracing::info!("controller stopped");
}

/// What every reconcile of every controller shares.
fn context(
    client: &Client,
    (nodes, pods): (Store<Node>, Store<Pod>),
    metrics: Arc<Metrics>,
    settings: &Settings,
) -> Arc<Context> {
    let reporter = Reporter {
        controller: api::constants::FIELD_MANAGER.to_string(),
        instance: settings.instance.clone(),
    };
    let recorder = Recorder::new(client.clone(), reporter.clone());
    Arc::new(Context {
        client: client.clone(),
        nodes,
        pods,
        metrics,
        recorder,
        reporter,
        settings: settings.clone(),
        memory: Mutex::new(HashMap::new()),
        pulse: pulse::Pulse::new(),
        owned: Mutex::new(HashMap::new()),
        secrets_written: Mutex::new(HashMap::new()),
    })
}

/// One controller over the ValkeyClusters of `ns` (every namespace when
/// `None`) and the objects they own there, until `shutdown` resolves.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn watch_scope(
    client: Client,
    ns: Option<String>,
    triggers: Triggers,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = ns.as_deref();
    let scope = ns.map(str::to_string);
    let ctl = Controller::new(
        scoped::<ValkeyCluster>(&client, ns),
        watcher::Config::default().any_semantic(),
    );
    let cluster_store = ctl.store();
    let referencing = cluster_store.clone();
    // A deleted cluster that owned nothing and had no requeue pending (an
    // invalid spec) is never reconciled again: its series are dropped when
    // it is gone from the cache.
    let sweeper = tokio::spawn(sweep_deleted(
        cluster_store.clone(),
        ns.map(str::to_string),
        ctx.clone(),
    ));
    // Secrets the user names (spec.auth.passwordSecret, spec.users,
    // spec.tls.secretName) carry no label of ours: their metadata alone is
    // watched, and a change reconciles the clusters that name them at once
    // rather than at the next resync (a rotation starts within a second).
    let user_secrets = watcher(
        scoped::<kube::core::PartialObjectMeta<Secret>>(&client, ns),
        watcher::Config::default().any_semantic(),
    )
    .touched_objects();
    // Reconciles the pulse asks for (a member changed between resyncs).
    let (pulse_tx, pulse_rx) = tokio::sync::mpsc::unbounded_channel();
    ctx.pulse.add_trigger(ns.map(str::to_string), pulse_tx);
    let pulses = futures::stream::unfold(pulse_rx, |mut rx| async move {
        rx.recv().await.map(|r| (r, rx))
    });
    let fingerprints: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    let (
        Some((statefulsets, sts_events, sts_task)),
        Some((services, svc_events, svc_task)),
        Some((config_maps, cm_events, cm_task)),
        Some((pdbs, pdb_events, pdb_task)),
        Some((network_policies, np_events, np_task)),
        Some((secrets, secret_events, secret_task)),
    ) = (
        owned_store::<StatefulSet>(&client, ns, LABEL_CLUSTER),
        owned_store::<Service>(&client, ns, LABEL_CLUSTER),
        owned_store::<ConfigMap>(&client, ns, LABEL_CLUSTER),
        owned_store::<PodDisruptionBudget>(&client, ns, LABEL_CLUSTER),
        owned_store::<NetworkPolicy>(&client, ns, LABEL_CLUSTER),
        owned_store::<Secret>(&client, ns, LABEL_CLUSTER),
    )
    else {
        tracing::error!("a shared store gave no subscriber");
        return;
    };
    let caches = [sts_task, svc_task, cm_task, pdb_task, np_task, secret_task];
    if let Ok(mut stores) = ctx.owned.lock() {
        stores.insert(
            ns.map(str::to_string),
            OwnedStores {
                statefulsets,
                services,
                config_maps,
                pdbs,
                network_policies,
                secrets,
            },
        );
    }
    ctl.owns_shared_stream(sts_events)
        .owns_shared_stream(svc_events)
        .owns_shared_stream(cm_events)
        .owns_shared_stream(pdb_events)
        .owns_shared_stream(np_events)
        .owns_shared_stream(secret_events)
        .watches_stream(
            user_secrets,
            move |secret: kube::core::PartialObjectMeta<Secret>| {
                let name = secret.name_any();
                let ns = secret.namespace();
                referencing
                    .state()
                    .iter()
                    .filter(|c| c.namespace() == ns && names_secret(c, &name))
                    .map(|c| ObjectRef::from_obj(c.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .watches_shared_stream(triggers.pods, move |pod: Arc<Pod>| {
            let cluster = pod.labels().get(LABEL_CLUSTER).cloned();
            let pod_ns = pod.namespace();
            // The cache holds every pod: only members of this scope count.
            let in_scope = scope
                .as_deref()
                .is_none_or(|s| pod_ns.as_deref() == Some(s));
            cluster.filter(|_| in_scope).map(|c| {
                let r = ObjectRef::<ValkeyCluster>::new(&c);
                match pod_ns {
                    Some(ns) => r.within(&ns),
                    None => r,
                }
            })
        })
        .watches_shared_stream(triggers.nodes, move |node: Arc<Node>| {
            let name = node.name_any();
            let print = node_fingerprint(&node);
            let changed = fingerprints
                .lock()
                .map(|mut f| f.insert(name, print.clone()).as_ref() != Some(&print))
                .unwrap_or(true);
            if changed {
                cluster_store
                    .state()
                    .iter()
                    .map(|c| ObjectRef::from_obj(c.as_ref()))
                    .collect()
            } else {
                Vec::new()
            }
        })
        .reconcile_on(pulses)
        .with_config(
            controller::Config::default()
                .debounce(DEBOUNCE)
                .concurrency(ctx.settings.concurrency),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile_entry, error_policy, ctx.clone())
        .for_each(|result| {
            match result {
                // A deleted cluster (no finalizer holds it, so no reconcile
                // sees its deletionTimestamp): its pending requeue, or the
                // garbage collection of what it owns, asks for one more
                // reconcile, and the controller finds it gone from its
                // cache. Its series must not outlive it.
                Err(controller::Error::ObjectNotFound(gone)) => {
                    let ns = gone.namespace.as_deref().unwrap_or_default();
                    ctx.metrics.forget_cluster(ns, &gone.name);
                    ctx.forget(&format!("{ns}/{}", gone.name));
                    ctx.pulse
                        .forget(&ObjectRef::<ValkeyCluster>::new(&gone.name).within(ns));
                }
                Err(error) => tracing::debug!(%error, "reconcile finished with an error"),
                Ok(_) => {}
            }
            futures::future::ready(())
        })
        .await;
    sweeper.abort();
    for task in caches {
        task.abort();
    }
    if let Ok(mut stores) = ctx.owned.lock() {
        stores.remove(&ns.map(str::to_string));
    }
}

/// How often the series of clusters gone from the cache are dropped.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Forgets (series, memory, pulse) every cluster of `scope` (a namespace,
/// or all) the metrics know that the cache no longer holds, every
/// [`SWEEP_EVERY`].
async fn sweep_deleted(store: Store<ValkeyCluster>, scope: Option<String>, ctx: Arc<Context>) {
    // A cluster has series only after a reconcile, which the cache fed: one
    // missing from it now was deleted (a re-list swaps the cache whole).
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let live: std::collections::HashSet<(String, String)> = store
            .state()
            .iter()
            .map(|c| (c.namespace().unwrap_or_default(), c.name_any()))
            .collect();
        for (ns, name) in ctx.metrics.clusters_seen() {
            let in_scope = scope.as_ref().is_none_or(|s| *s == ns);
            if in_scope && !live.contains(&(ns.clone(), name.clone())) {
                tracing::debug!(namespace = %ns, cluster = %name, "gone: its series are dropped");
                ctx.metrics.forget_cluster(&ns, &name);
                ctx.forget(&format!("{ns}/{name}"));
                ctx.pulse
                    .forget(&ObjectRef::<ValkeyCluster>::new(&name).within(&ns));
            }
        }
    }
}

#[tracing::instrument(skip(vc, ctx), fields(cluster = %vc.name_any(), namespace = %vc.namespace().unwrap_or_default()))]
async fn reconcile_entry(vc: Arc<ValkeyCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let key = format!("{}/{}", vc.namespace().unwrap_or_default(), vc.name_any());
    if vc.metadata.deletion_timestamp.is_some() {
        // Owner references make the garbage collector remove what the cluster
        // owns; PVCs follow the StatefulSets' retention policy. Nothing to do.
        ctx.forget(&key);
        ctx.pulse.forget(&ObjectRef::from_obj(vc.as_ref()));
        ctx.metrics
            .forget_cluster(&vc.namespace().unwrap_or_default(), &vc.name_any());
        return Ok(Action::await_change());
    }
    // One cluster's reconcile holds one of the workers: however its members
    // or the API server behave, it ends by the deadline, so a hung or
    // hostile cluster never holds a worker the others need for long.
    let result =
        match tokio::time::timeout(RECONCILE_DEADLINE, reconcile::reconcile(&vc, &ctx, &key)).await
        {
            Ok(result) => result,
            Err(_) => Err(Error::Deadline(RECONCILE_DEADLINE)),
        };
    let mut memory = ctx.memory(&key);
    memory.failures = match &result {
        Ok(_) => 0,
        Err(_) => memory.failures.saturating_add(1),
    };
    ctx.remember(&key, memory);
    ctx.metrics.reconciled(
        &vc.namespace().unwrap_or_default(),
        &vc.name_any(),
        started.elapsed(),
        result.as_ref().err().map(Error::category),
    );
    match &result {
        Ok(action) => tracing::debug!(
            ?action,
            took_ms = started.elapsed().as_millis() as u64,
            "reconciled"
        ),
        Err(error) => {
            tracing::warn!(%error, category = error.category(), "reconcile failed");
            let events = ctx.events(vc.object_ref(&()));
            events
                .repeated_warning(
                    events::reason::RECONCILE_ERROR,
                    "Reconcile",
                    format!("{} ({})", error, error.category()),
                )
                .await;
        }
    }
    result
}

/// Whether the cluster's spec names Secret `name` (the password, a user's
/// passwords, the TLS certificate).
fn names_secret(c: &ValkeyCluster, name: &str) -> bool {
    let spec = &c.spec;
    spec.auth
        .password_secret
        .as_ref()
        .is_some_and(|s| s.name == name)
        || spec.users.iter().any(|u| u.password_secret.name == name)
        || spec.tls.secret_name.as_deref() == Some(name)
}

/// The longest a reconcile may run. The longest step a healthy cluster
/// takes is a graceful failover (15 s, `Timeouts::failover`) after a few
/// commands of at most 3 s each; 60 s leaves room for a slow API server.
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(60);

fn error_policy(vc: Arc<ValkeyCluster>, _error: &Error, ctx: Arc<Context>) -> Action {
    let key = format!("{}/{}", vc.namespace().unwrap_or_default(), vc.name_any());
    Action::requeue(retry_after(ctx.memory(&key).failures))
}

/// When to retry a cluster whose last `failures` reconciles failed: 1 s after
/// the first, doubling each time up to 5 minutes, so a hiccup retries soon
/// and a standing fault (an API server refusing, a broken webhook) does not
/// keep the operator busy.
fn retry_after(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(MAX)
}

use kube::Resource as _;

#[cfg(test)]
mod secret_tests {
    #[test]
    fn a_cluster_names_its_password_users_and_tls_secrets() {
        let c: api::ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.rs/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {
                "shards": 1,
                "replicas": 0,
                "auth": {"passwordSecret": {"name": "pw"}},
                "users": [{"name": "app", "passwordSecret": {"name": "app-pw"}, "permissions": "+@read"}],
                "tls": {"enabled": true, "secretName": "certs"}
            }
        }))
        .unwrap();
        for name in ["pw", "app-pw", "certs"] {
            assert!(super::names_secret(&c, name), "{name}");
        }
        assert!(!super::names_secret(&c, "other"));
    }
}

#[cfg(test)]
mod image_tests {
    use super::{Settings, wildcard_match};

    #[test]
    fn a_star_stands_for_any_text() {
        assert!(wildcard_match("valkey/valkey:*", "valkey/valkey:9.1.2"));
        assert!(wildcard_match("*", "anything"));
        assert!(wildcard_match(
            "reg.example.com/*/valkey:*",
            "reg.example.com/team/valkey:9"
        ));
        assert!(wildcard_match("valkey/valkey:9.1.2", "valkey/valkey:9.1.2"));
        assert!(!wildcard_match(
            "valkey/valkey:9.1.2",
            "valkey/valkey:9.1.3"
        ));
        assert!(!wildcard_match("valkey/valkey:*", "evil/valkey:9"));
        assert!(!wildcard_match("a*b*c", "acb"));
        assert!(wildcard_match("a*b*c", "abc"));
        // The end must not overlap what the start took.
        assert!(!wildcard_match("ab*ba", "aba"));
    }

    #[test]
    fn an_image_outside_the_allowed_patterns_is_refused_with_the_field_named() {
        let open = Settings::default();
        assert_eq!(open.image_refused("spec.image", "anything:1"), None);
        let strict = Settings {
            allowed_images: vec!["valkey/valkey:*".into()],
            ..Settings::default()
        };
        assert_eq!(
            strict.image_refused("spec.image", "valkey/valkey:9.1.2"),
            None
        );
        let why = strict.image_refused("spec.image", "evil/server:1").unwrap();
        assert!(why.starts_with("spec.image: "), "{why}");
    }

    #[test]
    fn sidecar_and_init_images_are_held_to_the_allowed_patterns_too() {
        use k8s_openapi::api::core::v1::Container;
        let strict = Settings {
            allowed_images: vec!["valkey/valkey:*".into(), "team/*".into()],
            ..Settings::default()
        };
        let mut c = resources::test_support::cluster("c", 1, 1);
        c.image = "valkey/valkey:9.1.2".into();
        assert_eq!(strict.images_refused(&c), None);
        let image = |i: &str| Container {
            name: i.split(['/', ':']).nth(1).unwrap_or_default().into(),
            image: Some(i.into()),
            ..Default::default()
        };
        c.pod_template.sidecars = vec![image("team/logs:1")];
        assert_eq!(strict.images_refused(&c), None);
        c.pod_template.init_containers = vec![image("team/init:1"), image("evil/init:1")];
        let why = strict.images_refused(&c).unwrap();
        assert!(
            why.starts_with("spec.podTemplate.spec.initContainers[init].image: \"evil/init:1\""),
            "{why}"
        );
        c.pod_template.init_containers.clear();
        c.pod_template.sidecars.push(image("evil/sidecar:1"));
        let why = strict.images_refused(&c).unwrap();
        assert!(
            why.starts_with("spec.podTemplate.spec.containers[sidecar].image: "),
            "{why}"
        );
    }
}

#[cfg(test)]
mod retry_tests {
    use super::retry_after;
    use std::time::Duration;

    #[test]
    fn retries_back_off_exponentially_up_to_five_minutes() {
        let secs: Vec<u64> = (1..=12).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(retry_after(0), Duration::from_secs(1));
        assert_eq!(retry_after(u32::MAX), Duration::from_secs(300));
    }
}
