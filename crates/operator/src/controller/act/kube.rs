//! Act, Kubernetes side: the API writes the decisions ask for (thin I/O).
//! Each write is counted in the metrics; a delete names the uid it means
//! when it knows it, so a newer object of the same name is never deleted.

use super::Actor;
use crate::apply;
use crate::context::Context;
pub use crate::controller::observe::valkey::AuthState;
use crate::error::Error;
use crate::events::{Events, reason};
use api::ValidatedCluster;
use api::constants::{FIELD_MANAGER, LABEL_ROLE};
use decide::cleanup::{Doomed, Leaving, Orphans};
use decide::memory::Announced;
use decide::rotation::PasswordSource;
use decide::view::KubeView;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Resource, ResourceExt};
use resources::statefulset::claim_of;
use resources::statefulset::{Ordinals, set_ordinals};
use resources::{Desired, secret};

/// Creates `<cluster>-auth` when the operator manages it and it is absent
/// (never overwrites it), and reads the password. A deleted one is made
/// again from `source` (`decide::rotation::password_source`: the password
/// the members run).
pub async fn ensure_password(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    source: PasswordSource,
    events: &Events<'_>,
) -> Result<AuthState, Error> {
    if !cluster.auth.enabled {
        return Ok(AuthState::Off);
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = &cluster.auth.secret_name;
    let existing = super::secrets::read(ctx, &api, name).await?;
    let secret = match existing {
        Some(s) => s,
        None if cluster.auth.operator_managed => {
            let (password, recreated) = match source {
                PasswordSource::Generate => (secret::generate_password(), false),
                PasswordSource::Recorded(p) => (p, true),
                PasswordSource::Lost(msg) => return Ok(AuthState::Missing(msg)),
            };
            let Some(desired) = secret::auth_secret(cluster, owner, &password) else {
                return Ok(AuthState::Off);
            };
            ctx.metrics.api_write("Secret", "create");
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            match api.create(&pp, &desired).await {
                Ok(created) => {
                    ctx.secret_seen(&cluster.namespace, name, created.metadata.resource_version);
                    let text = if recreated {
                        format!(
                            "Secret {name} was deleted: made again with the password the members run"
                        )
                    } else {
                        format!("generated the password in Secret {name}")
                    };
                    events
                        .normal(reason::SECRET_CREATED, "CreateSecret", text)
                        .await;
                    return Ok(AuthState::Password(password));
                }
                // Created meanwhile (another reconcile, a restart): read it.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    api.get(name).await.map_err(|source| Error::Read {
                        kind: "Secret",
                        name: name.clone(),
                        source,
                    })?
                }
                Err(source) => {
                    return Err(Error::CreateSecret {
                        name: name.clone(),
                        source,
                    });
                }
            }
        }
        None => {
            let msg = format!("Secret {name} named by spec.auth.passwordSecret does not exist");
            return Ok(AuthState::Missing(msg));
        }
    };
    let key = &cluster.auth.secret_key;
    match resources::secret::secret_text(&secret, key) {
        Some(p) => Ok(AuthState::Password(p)),
        None => Ok(AuthState::Missing(format!(
            "Secret {name} has no key {key:?}"
        ))),
    }
}

/// Applies the owned objects that differ from `desired` and deletes the
/// Services, budgets and policies `orphans` names.
pub async fn apply_objects(
    ctx: &Context,
    cluster: &ValidatedCluster,
    desired: &Desired,
    view: &KubeView,
    orphans: &Orphans,
    events: &Events<'_>,
) -> Result<(), Error> {
    let ns = &cluster.namespace;
    let m = &ctx.metrics;
    let cm: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let name = desired.config_map.name_any();
    apply::apply(&cm, view.config_maps.get(&name), &desired.config_map, m).await?;
    let svc: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    for s in [&desired.headless, &desired.client]
        .into_iter()
        .chain(&desired.external)
    {
        apply::apply(&svc, view.services.get(&s.name_any()), s, m).await?;
    }
    if !orphans.services.is_empty() {
        for doomed in &orphans.services {
            delete(ctx, &svc, "Service", &doomed.name, doomed.uid.clone()).await?;
        }
        events
            .normal(
                reason::EXTERNAL_ACCESS_DISABLED,
                "DeleteServices",
                format!(
                    "deleted the external Services {}",
                    orphans
                        .services
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .await;
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), ns);
    for p in &desired.pdbs {
        apply::apply(&pdbs, view.pdbs.get(&p.name_any()), p, m).await?;
    }
    for name in &orphans.pdbs {
        delete(ctx, &pdbs, "PodDisruptionBudget", name, None).await?;
    }
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(p) = &desired.network_policy {
        apply::apply(&policies, view.network_policies.get(&p.name_any()), p, m).await?;
    }
    for name in &orphans.network_policy {
        delete(ctx, &policies, "NetworkPolicy", name, None).await?;
    }
    let sts: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    let mut created = Vec::new();
    for s in &desired.statefulsets {
        let name = s.name_any();
        let live = view.statefulsets.get(&name);
        if apply::apply(&sts, live, s, m).await? && live.is_none() {
            created.push(name);
        }
    }
    if !created.is_empty() {
        events
            .normal(
                reason::MEMBER_CREATED,
                "CreateMembers",
                format!("created StatefulSets {}", created.join(", ")),
            )
            .await;
    }
    Ok(())
}

/// Deletes `name` (if it is still the object `uid` names). Gone already is
/// done.
pub async fn delete<K>(
    ctx: &Context,
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    uid: Option<String>,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    delete_with(ctx, api, kind, name, uid, None).await
}

async fn delete_with<K>(
    ctx: &Context,
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    uid: Option<String>,
    grace_period_seconds: Option<u32>,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    ctx.metrics.api_write(kind, "delete");
    let dp = DeleteParams {
        grace_period_seconds,
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(()),
        // Already gone, or replaced by a newer object (uid precondition).
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind,
            name: name.to_string(),
            source,
        }),
    }
}

fn pods(ctx: &Context, cluster: &ValidatedCluster) -> Api<Pod> {
    Api::namespaced(ctx.client.clone(), &cluster.namespace)
}

fn claims(ctx: &Context, cluster: &ValidatedCluster) -> Api<PersistentVolumeClaim> {
    Api::namespaced(ctx.client.clone(), &cluster.namespace)
}

/// Deletes `pod` (graceful), if it is still the same pod.
pub async fn delete_pod(ctx: &Context, cluster: &ValidatedCluster, pod: &Pod) -> Result<(), Error> {
    let api = pods(ctx, cluster);
    delete(ctx, &api, "Pod", &pod.name_any(), pod.metadata.uid.clone()).await
}

/// Deletes `pod` at once (grace period 0), if it is still the same pod: its
/// node is lost, nobody there can finish a graceful deletion.
pub async fn force_delete_pod(
    ctx: &Context,
    cluster: &ValidatedCluster,
    pod: &Pod,
) -> Result<(), Error> {
    let api = pods(ctx, cluster);
    delete_with(
        ctx,
        &api,
        "Pod",
        &pod.name_any(),
        pod.metadata.uid.clone(),
        Some(0),
    )
    .await
}

/// Deletes the data volume claim of pod `pod_name`.
pub async fn delete_claim_of(
    ctx: &Context,
    cluster: &ValidatedCluster,
    pod_name: &str,
) -> Result<(), Error> {
    let api = claims(ctx, cluster);
    delete(
        ctx,
        &api,
        "PersistentVolumeClaim",
        &claim_of(pod_name),
        None,
    )
    .await
}

/// Deletes the claims named.
pub async fn delete_claims(
    ctx: &Context,
    cluster: &ValidatedCluster,
    doomed: &[Doomed],
) -> Result<(), Error> {
    let api = claims(ctx, cluster);
    for d in doomed {
        delete(ctx, &api, "PersistentVolumeClaim", &d.name, d.uid.clone()).await?;
    }
    Ok(())
}

/// Force-deletes the pods named. Returns how many.
pub async fn force_delete_pods(
    ctx: &Context,
    cluster: &ValidatedCluster,
    doomed: &[&Pod],
) -> Result<usize, Error> {
    for pod in doomed {
        force_delete_pod(ctx, cluster, pod).await?;
    }
    Ok(doomed.len())
}

/// Deletes Pending pods created with outdated scheduling rules (their
/// StatefulSets re-create them). Returns how many.
pub async fn replace_pending_pods(
    ctx: &Context,
    cluster: &ValidatedCluster,
    doomed: &[&Pod],
    events: &Events<'_>,
) -> Result<usize, Error> {
    let mut replaced = Vec::new();
    for pod in doomed {
        delete_pod(ctx, cluster, pod).await?;
        replaced.push(pod.name_any());
    }
    if !replaced.is_empty() {
        events
            .normal(
                reason::POD_REPLACED,
                "ReplacePendingPods",
                format!(
                    "re-created Pending pods with the new placement: {}",
                    replaced.join(", ")
                ),
            )
            .await;
    }
    Ok(replaced.len())
}

/// Asks for the claims named to grow to `persistence.size` (Kubernetes and
/// the storage class do the expansion). A size the API server refuses is
/// reported once and remembered in `announced`, not retried into an error
/// loop.
pub async fn grow_volumes(
    ctx: &Context,
    cluster: &ValidatedCluster,
    names: &[String],
    events: &Events<'_>,
    announced: &mut Announced,
) {
    let Some(p) = &cluster.persistence else {
        return;
    };
    let api = claims(ctx, cluster);
    let mut failures = Vec::new();
    for name in names {
        ctx.metrics.api_write("PersistentVolumeClaim", "patch");
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": p.size}}}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match api.patch(name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {
                events
                    .normal(
                        reason::VOLUME_EXPANDING,
                        "GrowVolume",
                        format!("asked to grow PersistentVolumeClaim {name} to {}", p.size.0),
                    )
                    .await;
            }
            Err(error) => failures.push(format!("{name}: {error}")),
        }
    }
    if !failures.is_empty() {
        events
            .warning(
                reason::VOLUME_EXPANSION_FAILED,
                "GrowVolume",
                failures.join("; "),
            )
            .await;
        announced.volumes_refused = Some(p.size.0.clone());
    }
}

/// Deletes the StatefulSets of the leaving members named (their PVCs follow
/// the retention policy). Returns `shard s member m` for each.
pub async fn remove_members(
    ctx: &Context,
    cluster: &ValidatedCluster,
    leaving: &[Leaving],
    events: &Events<'_>,
) -> Result<Vec<String>, Error> {
    let api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let mut removed = Vec::new();
    for l in leaving {
        let sts = &l.statefulset;
        delete(ctx, &api, "StatefulSet", &sts.name, sts.uid.clone()).await?;
        removed.push(format!("shard {} member {}", l.shard, l.member));
    }
    if !removed.is_empty() {
        events
            .normal(
                reason::MEMBER_REMOVED,
                "RemoveMembers",
                format!("removed {}", removed.join(", ")),
            )
            .await;
    }
    Ok(removed)
}

/// Sets `valkey.rs/role` on the pods named.
pub async fn set_role_labels(
    ctx: &Context,
    cluster: &ValidatedCluster,
    labels: &[(&Pod, &'static str)],
) -> Result<(), Error> {
    let api = pods(ctx, cluster);
    for (pod, want) in labels {
        ctx.metrics.api_write("Pod", "patch");
        let patch = serde_json::json!({"metadata": {"labels": {LABEL_ROLE: want}}});
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        let name = pod.name_any();
        match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => return Err(Error::PatchPod { name, source }),
        }
    }
    Ok(())
}

/// Applies member StatefulSet `name` as desired, running `ordinals`.
/// Returns false when the spec has no such member.
pub async fn apply_ordinals(a: &Actor<'_>, name: &str, ordinals: Ordinals) -> Result<bool, Error> {
    let Some(want) = a.desired.statefulsets.iter().find(|x| x.name_any() == name) else {
        return Ok(false);
    };
    let mut want = want.clone();
    set_ordinals(&mut want, ordinals);
    let api: Api<StatefulSet> = Api::namespaced(a.ctx.client.clone(), &a.cluster.namespace);
    apply::apply(&api, a.kube.statefulsets.get(name), &want, &a.ctx.metrics).await?;
    Ok(true)
}
