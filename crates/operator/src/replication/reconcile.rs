//! The driver of one ValkeyReplication reconcile: dereference + validate ->
//! observe -> decide -> act -> report, each step a call into its module.

use super::shared::Shared;
use super::{act, observe, report};
use crate::error::Error;
use crate::events::{Events, reason as note};
use api::ValidatedCluster;
use api::constants::{ANNOTATION_PAUSED, ANNOTATION_SWITCHOVER, KIND_REPLICATION};
use api::v1alpha1::{ValkeyReplication, validate_replication};
use decide::placement::Placement;
use decide::replication::{MemberFacts, SetFacts};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use resources::statefulset::{ANNOTATION_PLACEMENT_HASH, ANNOTATION_RESTART_HASH};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A reconcile longer than this is cut (members that hang, an API server
/// that does not answer); the next one starts from the top.
const DEADLINE: Duration = Duration::from_secs(60);

/// The controller's entry: [`reconcile`] within [`DEADLINE`].
pub async fn entry(set: Arc<ValkeyReplication>, shared: Arc<Shared>) -> Result<Action, Error> {
    match tokio::time::timeout(DEADLINE, reconcile(&set, &shared)).await {
        Ok(result) => result,
        Err(_) => Err(Error::Deadline(DEADLINE)),
    }
}

async fn reconcile(obj: &ValkeyReplication, shared: &Shared) -> Result<Action, Error> {
    let ctx = &shared.ctx;
    let name = obj.name_any();
    let ns = obj.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    if obj.meta().deletion_timestamp.is_some() {
        // Owner references take every object with the set.
        return Ok(Action::await_change());
    }
    let api: Api<ValkeyReplication> = Api::namespaced(ctx.client.clone(), &ns);
    let events = Events::new(
        ctx.client.clone(),
        ctx.reporter.clone(),
        &ctx.recorder,
        obj.object_ref(&()),
        &ctx.metrics,
    );
    let r = report::Report {
        name: &name,
        generation: obj.meta().generation,
        old: obj.status.as_ref(),
        now: Time(k8s_openapi::jiff::Timestamp::now()),
    };
    let (set, owner, logins) = match prepare(obj, shared, &api, &events, &r).await? {
        Ok(ready) => ready,
        Err(action) => return Ok(action),
    };
    // Observe the Kubernetes side, decide the objects, apply them.
    let k = observe::kube(shared, &set);
    let placement = plan_placement(&set, &k.view).await;
    let desired = decide::objects(&set, &owner, &placement, &k.view);
    act::apply_objects(shared, &ns, &desired).await?;

    // Observe the members, decide, act.
    let mut members = observe::members(&k, set.replicas + 1);
    mark_stale(&mut members, &k, &desired);
    let t = ctx.settings.timeouts;
    let opts = observe::connect_options(
        Some(logins.own),
        logins.password.as_deref(),
        (t.connect, t.command),
    );
    let key = format!("{ns}/{name}");
    let admins = read_members(shared, &key, &mut members, &opts).await?;
    let facts = SetFacts {
        replicas: set.replicas,
        last_primary: obj
            .status
            .as_ref()
            .and_then(|s| s.primary.as_deref())
            .and_then(|p| members.iter().find(|m| m.pod.as_deref() == Some(p)))
            .map(|m| m.member)
            .or_else(|| last_primary_index(obj)),
        members,
        primary_zone: obj.spec.primary_zone.clone(),
        switchover_to: obj.annotations().get(ANNOTATION_SWITCHOVER).cloned(),
    };
    let plan = decide::replication::plan(&facts);
    let pods = facts
        .members
        .iter()
        .filter_map(|m| {
            let pod = m.pod.as_deref()?;
            Some((
                m.member,
                (pod, m.ip.as_deref().and_then(|ip| ip.parse().ok())),
            ))
        })
        .collect();
    let carried = act::carry_out(
        shared,
        &ns,
        &plan,
        &act::Members {
            pods,
            admins: &admins,
        },
        t.failover,
    )
    .await;
    let done = match carried {
        Ok(done) => done,
        Err(e) => {
            events
                .repeated_warning(note::VALKEY_COMMAND_FAILED, "Reconcile", e.to_string())
                .await;
            return Err(e);
        }
    };
    after_plan(shared, (&ns, &name), &plan, &set, (&k, &desired), &events).await?;
    let spread = placement.spread_state();
    let status = report::build(&r, &plan, &facts.members, &spread, &done);
    report::write(&api, ctx, &r, &status).await?;
    announce(shared, &key, &plan, &events).await;
    Ok(Action::requeue(plan.requeue))
}

/// Paused, invalid or without its Secrets: the status says so and the
/// reconcile stops (`Err(action)`); else the validated set, its owner
/// reference and its logins.
async fn prepare(
    obj: &ValkeyReplication,
    shared: &Shared,
    api: &Api<ValkeyReplication>,
    events: &Events<'_>,
    r: &report::Report<'_>,
) -> Result<Result<(ValidatedCluster, OwnerReference, act::Logins), Action>, Error> {
    let ctx = &shared.ctx;
    if obj
        .annotations()
        .get(ANNOTATION_PAUSED)
        .is_some_and(|v| v == "true")
    {
        let status = report::stopped(
            r,
            "Paused",
            "valkey.rs/paused is \"true\": nothing is changed",
        );
        report::write(api, ctx, r, &status).await?;
        return Ok(Err(Action::await_change()));
    }
    let set = match validated(obj, shared) {
        Ok(set) => set,
        Err(message) => {
            let status = report::stopped(r, note::INVALID_SPEC, &message);
            if obj.status.as_ref().and_then(|s| s.message.as_deref()) != Some(message.as_str()) {
                events
                    .warning(note::INVALID_SPEC, "Validate", &message)
                    .await;
            }
            report::write(api, ctx, r, &status).await?;
            return Ok(Err(Action::await_change()));
        }
    };
    let owner = owner_of(obj)?;
    let logins = match act::ensure_secrets(shared, &set, &owner).await? {
        Ok(logins) => logins,
        Err(missing) => {
            let status = report::stopped(r, note::SECRET_MISSING, &missing);
            report::write(api, ctx, r, &status).await?;
            return Ok(Err(Action::requeue(Duration::from_secs(10))));
        }
    };
    if logins.password_created {
        events
            .normal(
                note::SECRET_CREATED,
                "CreateSecret",
                format!("generated the password in Secret {}", set.auth.secret_name),
            )
            .await;
    }

    Ok(Ok((set, owner, logins)))
}

/// Asks every member what it is, and records since when each has not
/// answered (the failure detector's clock). Returns the connections.
async fn read_members(
    shared: &Shared,
    key: &str,
    members: &mut [MemberFacts],
    opts: &valkey_client::client::ConnectOptions,
) -> Result<BTreeMap<u32, valkey_client::client::ValkeyAdmin>, Error> {
    let answers = observe::valkey(members, opts).await;
    let mut admins = BTreeMap::new();
    let now = Instant::now();
    let mut all = shared
        .unanswered
        .lock()
        .map_err(|_| Error::MissingMetadata("memory"))?;
    let since = all.entry(key.to_string()).or_default();
    for m in members.iter_mut() {
        match answers.get(&m.member) {
            Some(Ok((said, admin))) => {
                m.said = Some(said.clone());
                admins.insert(m.member, admin.clone());
                since.remove(&m.member);
            }
            Some(Err(why)) => {
                m.unanswered = Some(why.clone());
                let first = *since.entry(m.member).or_insert(now);
                m.unanswered_for = now.saturating_duration_since(first);
            }
            None => {
                since.remove(&m.member);
            }
        }
    }
    Ok(admins)
}

/// The events of a reconcile: a primary that changed, a set that became
/// Ready.
async fn announce(
    shared: &Shared,
    key: &str,
    plan: &decide::replication::Plan,
    events: &Events<'_>,
) {
    if plan.primary_changed
        && let Some(action) = &plan.action
    {
        events
            .normal(note::PRIMARY_CHANGED, "Failover", action.clone())
            .await;
    }
    let was_ready = shared
        .was_ready
        .lock()
        .ok()
        .and_then(|mut m| m.insert(key.to_string(), plan.ready));
    if plan.ready && was_ready != Some(true) {
        events
            .normal(note::CLUSTER_READY, "Reconcile", plan.message.clone())
            .await;
    }
}

/// What follows the Valkey side: the StatefulSets of members that left
/// (once the primary is within the spec), and the switchover annotation
/// once it is done with.
async fn after_plan(
    shared: &Shared,
    (ns, name): (&str, &str),
    plan: &decide::replication::Plan,
    set: &ValidatedCluster,
    (k, desired): (&observe::Kube, &resources::Desired),
    events: &Events<'_>,
) -> Result<(), Error> {
    let wanted: BTreeSet<String> = desired
        .statefulsets
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let leaving: Vec<String> = k
        .view
        .statefulsets
        .keys()
        .filter(|n| !wanted.contains(*n))
        .cloned()
        .collect();
    if !leaving.is_empty() && plan.primary.is_some_and(|p| p <= set.replicas) {
        act::delete_statefulsets(shared, ns, &leaving).await?;
    }
    if plan.switchover_done {
        if let Some(why) = &plan.switchover_refused {
            events
                .warning(
                    "SwitchoverRefused",
                    "Switchover",
                    format!("{ANNOTATION_SWITCHOVER}: {why}"),
                )
                .await;
        }
        act::clear_switchover(shared, ns, name).await?;
    }

    Ok(())
}

/// The spec, checked, with what the operator's settings decide.
fn validated(obj: &ValkeyReplication, shared: &Shared) -> Result<ValidatedCluster, String> {
    let settings = &shared.ctx.settings;
    let mut set = validate_replication(obj, &settings.validation)
        .map_err(|e| format!("invalid spec: {e}"))?;
    if let Some(why) = settings.images_refused(&set) {
        return Err(format!("invalid spec: {why}"));
    }
    if let Some(exporter) = set.exporter.as_mut() {
        exporter.image.clone_from(&settings.exporter_image);
    }
    let np = &mut set.network_policy;
    np.enabled = Some(np.enabled.unwrap_or(settings.member_network_policy));
    np.operator.clone_from(&settings.operator_pods);
    Ok(set)
}

fn owner_of(obj: &ValkeyReplication) -> Result<OwnerReference, Error> {
    Ok(OwnerReference {
        api_version: format!("{}/{}", api::constants::GROUP, api::constants::VERSION),
        kind: KIND_REPLICATION.to_string(),
        name: obj.name_any(),
        uid: obj.uid().ok_or(Error::MissingMetadata("uid"))?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The last status's primary as a member index (`<name>-<member>-0`), for
/// when its pod is gone.
fn last_primary_index(obj: &ValkeyReplication) -> Option<u32> {
    let pod = obj.status.as_ref()?.primary.as_deref()?;
    let rest = pod.strip_prefix(&format!("{}-", obj.name_any()))?;
    rest.split('-').next()?.parse().ok()
}

/// Marks each member whose pod runs an older template than its StatefulSet
/// is to have (restart or placement hash).
fn mark_stale(members: &mut [MemberFacts], k: &observe::Kube, desired: &resources::Desired) {
    for m in members.iter_mut() {
        let Some(pod) = k.pods.get(&m.member) else {
            continue;
        };
        let want = desired.statefulsets.iter().find(|s| {
            s.spec
                .as_ref()
                .and_then(|s| s.selector.match_labels.as_ref())
                .and_then(|l| l.get(api::constants::LABEL_MEMBER))
                .is_some_and(|v| *v == m.member.to_string())
        });
        let Some(template) = want
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|md| md.annotations.as_ref())
        else {
            continue;
        };
        let have = pod.annotations();
        m.stale = [ANNOTATION_RESTART_HASH, ANNOTATION_PLACEMENT_HASH]
            .iter()
            .any(|a| template.get(*a) != have.get(*a));
    }
}

/// Plans the placement on a blocking thread (the planner is CPU-bound for
/// up to a second).
async fn plan_placement(set: &ValidatedCluster, view: &decide::view::KubeView) -> Placement {
    let (problem, options) = match Placement::problem(set, view) {
        Ok(p) => p,
        Err(why) => return Placement::Failed(why),
    };
    tokio::task::spawn_blocking(move || Placement::solve(&problem, &options))
        .await
        .unwrap_or_else(|e| Placement::Failed(format!("the placement planner stopped: {e}")))
}
