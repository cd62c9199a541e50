//! Report: the status (conditions in [`status`], observations in
//! [`observations`], both pure), written only when it changed, the events
//! about it (readiness gained or lost, primaries that changed), and the
//! cluster's Prometheus gauges ([`gauges`], pure).

pub mod gauges;
pub mod observations;
pub mod status;

use super::done::Done;
use crate::context::Context;
use crate::error::Error;
use crate::events::{Events, Note, reason};
use api::ValkeyCluster;
use api::constants::FIELD_MANAGER;
use api::v1alpha1::{CONDITION_READY, ValkeyClusterStatus};
use decide::Decision;
use decide::facts::{Facts, desired_members};
use decide::moves;
use decide::placement::Placement;
use decide::pods::PodFacts;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use status::{Activity, Observations, StatusInput};

/// The cluster a reconcile reports on.
pub struct Target<'a> {
    pub name: String,
    pub api: Api<ValkeyCluster>,
    pub old: Option<&'a ValkeyClusterStatus>,
    /// The wall clock of this reconcile (condition transition times).
    pub now: Time,
}

impl<'a> Target<'a> {
    /// Reads name and namespace off `vc`.
    pub fn of(vc: &'a ValkeyCluster, ctx: &Context) -> Result<Target<'a>, Error> {
        let name = vc
            .metadata
            .name
            .clone()
            .ok_or(Error::MissingMetadata("name"))?;
        let ns = vc
            .metadata
            .namespace
            .clone()
            .ok_or(Error::MissingMetadata("namespace"))?;
        Ok(Target {
            name,
            api: Api::namespaced(ctx.client.clone(), &ns),
            old: vc.status.as_ref(),
            now: Time(k8s_openapi::jiff::Timestamp::now()),
        })
    }
}

/// Writes the status when it differs from the current one.
pub async fn write_status(
    ctx: &Context,
    t: &Target<'_>,
    mut new: ValkeyClusterStatus,
) -> Result<(), Error> {
    // Whatever the status says, the scale subresource reads the selector here.
    new.selector = Some(api::constants::member_selector(&t.name));
    if t.old == Some(&new) {
        return Ok(());
    }
    ctx.metrics.api_write("ValkeyCluster", "status");
    let patch = serde_json::json!({
        "apiVersion": format!("{}/{}", api::constants::GROUP, api::constants::VERSION),
        "kind": api::constants::KIND,
        "status": new,
    });
    t.api
        .patch_status(
            &t.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| Error::Status {
            name: t.name.clone(),
            source,
        })?;
    Ok(())
}

/// The status of a cluster whose spec is invalid: the conditions say why;
/// what was observed before stays.
pub fn invalid(t: &Target<'_>, generation: Option<i64>, message: &str) -> ValkeyClusterStatus {
    let conds = status::invalid_spec_conditions(message);
    let obs = t.old.map(keep_observations).unwrap_or_default();
    status::build(t.old, &conds, generation, obs, &t.now)
}

/// The status of a cluster whose `spec.restore` cannot be used (yet): no
/// member is made, the conditions say why, naming the backup.
pub fn restore_refused(
    t: &Target<'_>,
    generation: Option<i64>,
    refusal: &crate::backup::restore::Refusal,
) -> ValkeyClusterStatus {
    use api::v1alpha1::{CONDITION_DEGRADED, CONDITION_PROGRESSING, CONDITION_RESTORED};
    use status::Cond;
    let waiting = refusal.reason == crate::backup::restore::reason::BACKUP_NOT_COMPLETED;
    let conds = vec![
        Cond::new(
            CONDITION_READY,
            false,
            refusal.reason,
            refusal.message.clone(),
        ),
        Cond::new(
            CONDITION_PROGRESSING,
            false,
            refusal.reason,
            "waiting for the backup of spec.restore.backup to be usable",
        ),
        Cond::new(
            CONDITION_DEGRADED,
            !waiting,
            refusal.reason,
            refusal.message.clone(),
        ),
        Cond::new(
            CONDITION_RESTORED,
            false,
            refusal.reason,
            refusal.message.clone(),
        ),
    ];
    let mut obs = t.old.map(keep_observations).unwrap_or_default();
    obs.message = Some(refusal.message.clone());
    status::build(t.old, &conds, generation, obs, &t.now)
}

/// The status of a paused cluster: what was observed and concluded before
/// stays, Progressing turns False and the condition Paused says why.
pub fn paused(t: &Target<'_>) -> ValkeyClusterStatus {
    let old = t.old.cloned().unwrap_or_default();
    let conds = status::paused_conditions(&old.conditions);
    status::build(
        t.old,
        &conds,
        old.observed_generation,
        keep_observations(&old),
        &t.now,
    )
}

fn keep_observations(s: &ValkeyClusterStatus) -> Observations {
    Observations {
        ready_shards: s.ready_shards,
        shards: s.shards.clone(),
        members: s.members.clone(),
        topology: s.topology.clone(),
        topology_summary: s.topology_summary.clone(),
        last_action: s.last_action.clone(),
        message: s.message.clone(),
    }
}

/// The new status of a valid cluster, from the facts, the decision and
/// what was done (pure).
pub fn build(
    t: &Target<'_>,
    f: &Facts<'_>,
    placement: &Placement,
    d: &Decision,
    done: &Done,
    blocker: Option<(String, String)>,
) -> ValkeyClusterStatus {
    let (cluster, view) = (f.cluster, f.kube);
    let pods_pending = desired_members(cluster)
        .filter(|k| view.members.get(k).is_none_or(|p| !PodFacts::of(p).ready))
        .count();
    let leaving = view
        .members
        .keys()
        .any(|(s, m)| *s >= cluster.shards || *m > cluster.replicas);
    let new_members = desired_members(cluster).any(|k| !view.members.contains_key(&k));
    let mut blocked: Vec<String> = d
        .valkey
        .waiting
        .iter()
        .filter(|w| w.is_blocked())
        .map(ToString::to_string)
        .collect();
    if let decide::rolling::RollStep::Blocked(why) = &d.roll.step {
        blocked.push(why.clone());
    }
    let moves = moves::move_lines(f, placement, &d.moves);
    let spread = moves::spread_now(placement, &moves);
    let bootstrapping = observations::is_bootstrapping(f.valkey, t.old);
    let activity = Activity {
        bootstrapping,
        actions: done.executed.clone(),
        pending_restarts: d.roll.stale,
        pending_moves: moves.len(),
        scaling: leaving || (new_members && !bootstrapping) || !done.removed.is_empty(),
        pods_pending,
        waiting: d
            .valkey
            .waiting
            .iter()
            .filter(|w| !w.is_blocked())
            .map(ToString::to_string)
            .collect(),
    };
    let input = StatusInput {
        generation: cluster.generation,
        cluster: observations::cluster_state(&d.health, d.all_pods_ready, blocked),
        spread: spread.clone(),
        balance: d.balance.clone(),
        activity,
        blocker,
        volumes_pending: volumes_pending(f),
        start_failed: start_failed(f),
    };
    let conds = status::conditions(&input);
    let observations = observations::observations(f, &d.health, &spread, done.last_action.clone());
    status::build(t.old, &conds, cluster.generation, observations, &t.now)
}

/// How long a claim may stay Pending before it is reported: a claim of
/// a `WaitForFirstConsumer` class is Pending until its pod is scheduled.
const CLAIM_PENDING_GRACE_SECONDS: i64 = 30;

/// The members not Ready whose volume claim has been Pending for longer
/// than [`CLAIM_PENDING_GRACE_SECONDS`], and why, as one message.
fn volumes_pending(f: &Facts<'_>) -> Option<String> {
    let (cluster, view) = (f.cluster, f.kube);
    let lines: Vec<String> = desired_members(cluster)
        .filter_map(|(s, m)| {
            let pod = view.members.get(&(s, m))?;
            if PodFacts::of(pod).ready {
                return None;
            }
            let claim = decide::facts::claim_of(&pod.metadata.name.clone()?);
            let pvc = view.pvcs.get(&claim)?;
            let pending = pvc.status.as_ref()?.phase.as_deref() == Some("Pending");
            let created = pvc.metadata.creation_timestamp.as_ref()?.0;
            let age = f.now.as_second() - created.as_second();
            (pending && age > CLAIM_PENDING_GRACE_SECONDS).then(|| {
                let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
                let why = match class {
                    None => "it names no StorageClass (persistence.storageClassName) and the \
                             cluster has no default one"
                        .to_string(),
                    Some(c) => format!(
                        "StorageClass {c} has not provisioned it: does the class exist, and can \
                         it make a volume on the pod's node?"
                    ),
                };
                format!("member {s}/{m}: volume claim {claim} is Pending: {why}")
            })
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// The members whose pod is missing, as (reason, message), in the API
/// server's and the scheduler's own words: `MemberPodNotCreated` when the
/// StatefulSet controller could not create it (a PriorityClass, a quota,
/// Pod Security, a webhook), `MemberNotScheduled` when the scheduler found no
/// node for it.
fn pods_missing(f: &Facts<'_>) -> Option<(String, String)> {
    let (cluster, view) = (f.cluster, f.kube);
    let not_created: Vec<String> = view
        .pods_not_created
        .iter()
        .map(|((s, m), why)| format!("member {s}/{m}: its pod cannot be created: {why}"))
        .collect();
    if !not_created.is_empty() {
        return Some((POD_NOT_CREATED.into(), not_created.join("; ")));
    }
    let unscheduled: Vec<String> = desired_members(cluster)
        .filter_map(|(s, m)| {
            let pod = view.members.get(&(s, m))?;
            let why = PodFacts::unschedulable(pod)?;
            Some(format!(
                "member {s}/{m}: pod {} is not scheduled: {why}",
                pod.metadata.name.as_deref().unwrap_or_default()
            ))
        })
        .collect();
    (!unscheduled.is_empty()).then(|| (POD_NOT_SCHEDULED.into(), unscheduled.join("; ")))
}

/// The members whose pod cannot start, as (reason, message): `ImagePullFailed`
/// when an image cannot be pulled (the rolling update stops there until
/// `spec.image` names one that can), else `MemberCannotStart`; before those,
/// a pod that is missing ([`pods_missing`]).
fn start_failed(f: &Facts<'_>) -> Option<(String, String)> {
    if let Some(missing) = pods_missing(f) {
        return Some(missing);
    }
    let failures: Vec<(u32, u32, decide::pods::StartFailure)> = desired_members(f.cluster)
        .filter_map(|(s, m)| {
            let pod = f.kube.members.get(&(s, m))?;
            Some((s, m, PodFacts::of(pod).start_failure?))
        })
        .collect();
    if failures.is_empty() {
        return None;
    }
    let pull = failures.iter().any(|(_, _, x)| x.image_pull());
    let lines: Vec<String> = failures
        .iter()
        .map(|(s, m, x)| {
            let message = if x.message.is_empty() {
                String::new()
            } else {
                format!(": {}", x.message)
            };
            format!(
                "member {s}/{m}: container {} cannot start with image {:?} ({}{message})",
                x.container, x.image, x.reason
            )
        })
        .collect();
    let tail = if pull {
        "; the rolling update stops until spec.image names an image that can be pulled"
    } else {
        ""
    };
    Some((
        if pull {
            IMAGE_PULL_FAILED
        } else {
            CANNOT_START
        }
        .to_string(),
        format!("{}{tail}", lines.join("; ")),
    ))
}

/// Whether the cluster still has work in flight (requeue soon).
/// `replaced`: Pending pods re-created this reconcile.
pub fn converging(
    f: &Facts<'_>,
    placement: &Placement,
    d: &Decision,
    done: &Done,
    replaced: usize,
) -> bool {
    !d.valkey.is_converged()
        || !done.executed.is_empty()
        || !d.cluster_ready
        || d.roll.stale > 0
        || d.roll.moving > 0
        || !moves::move_lines(f, placement, &d.moves).is_empty()
        || !f.kube.condemned.is_empty()
        || done.stranded > 0
        || replaced > 0
        || done.healed > 0
        || !done.removed.is_empty()
}

/// The event readiness gained or lost calls for.
pub fn readiness(old: Option<&ValkeyClusterStatus>, new: &ValkeyClusterStatus) -> Vec<Note> {
    let was = old
        .and_then(|s| s.condition(CONDITION_READY))
        .map(|c| c.status == "True");
    let Some(now) = new.condition(CONDITION_READY) else {
        return Vec::new();
    };
    let is = now.status == "True";
    let old_ready = old.and_then(|s| s.condition(CONDITION_READY));
    if let Some(reason) = POD_MISSING_REASONS.iter().find(|r| **r == now.reason)
        && old_ready.is_none_or(|c| c.reason != now.reason || c.message != now.message)
    {
        // Why a member's pod is missing or cannot start, in an event too,
        // once (and again when the message changes).
        return vec![Note::warning(reason, "Ready", &now.message)];
    }
    if was == Some(is) {
        Vec::new()
    } else if is {
        vec![Note::normal(reason::CLUSTER_READY, "Ready", &now.message)]
    } else if was == Some(true) {
        vec![Note::warning(
            reason::CLUSTER_NOT_READY,
            "Ready",
            format!("{}: {}", now.reason, now.message),
        )]
    } else {
        Vec::new()
    }
}

/// Ready reasons that say why a member's pod is missing or cannot start; each
/// is also an event when it first appears (or its message changes).
pub const POD_MISSING_REASONS: &[&str] = &[
    POD_NOT_CREATED,
    POD_NOT_SCHEDULED,
    CANNOT_START,
    IMAGE_PULL_FAILED,
];

/// The StatefulSet controller could not create a member's pod.
pub const POD_NOT_CREATED: &str = "MemberPodNotCreated";
/// The scheduler found no node for a member's pod.
pub const POD_NOT_SCHEDULED: &str = "MemberNotScheduled";
/// A member's container will not start by itself.
pub const CANNOT_START: &str = "MemberCannotStart";
/// A member's image cannot be pulled.
pub const IMAGE_PULL_FAILED: &str = "ImagePullFailed";

/// The members whose external address changed since the last status: one
/// learnt (a load balancer assigned it), moved (a NodePort member on another
/// node, a load balancer reassigned) or gone (external access turned off).
pub fn external_addresses(
    old: Option<&ValkeyClusterStatus>,
    new: &ValkeyClusterStatus,
) -> Vec<Note> {
    let before = |s: i32, m: i32| {
        old.into_iter()
            .flat_map(|o| &o.members)
            .find(|x| x.shard == s && x.member == m)
            .map(|x| x.external_address.as_str())
            .unwrap_or_default()
    };
    new.members
        .iter()
        .filter_map(|x| {
            let was = before(x.shard, x.member);
            let is = x.external_address.as_str();
            let member = format!("member {}/{}", x.shard, x.member);
            match (was.is_empty(), is.is_empty()) {
                _ if was == is => None,
                (true, false) => Some(format!("{member} announces {is} to clients outside")),
                (false, false) => Some(format!(
                    "{member} announces {is} to clients outside (was {was})"
                )),
                (false, true) => Some(format!(
                    "{member} no longer announces an external address (was {was})"
                )),
                (true, true) => None,
            }
        })
        .map(|message| Note::normal(reason::EXTERNAL_ADDRESS_CHANGED, "AnnounceAddress", message))
        .collect()
}

/// Writes the status and tells about readiness and external addresses.
pub async fn publish(
    ctx: &Context,
    t: &Target<'_>,
    new: ValkeyClusterStatus,
    events: &Events<'_>,
) -> Result<(), Error> {
    events.notes(readiness(t.old, &new)).await;
    events.notes(external_addresses(t.old, &new)).await;
    write_status(ctx, t, new).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use decide::balance::Candidate;
    use decide::balance::ShardView;
    use decide::notes::failovers;
    use std::collections::HashMap;

    fn shard(shard: u32, primary: Option<u32>) -> ShardView {
        ShardView {
            shard,
            primary,
            members: vec![Candidate {
                member: 0,
                domains: None,
                in_sync: true,
            }],
        }
    }

    fn with_address(address: &str) -> ValkeyClusterStatus {
        ValkeyClusterStatus {
            members: vec![api::v1alpha1::MemberStatus {
                shard: 0,
                member: 1,
                external_address: address.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn an_external_address_learnt_moved_or_dropped_is_told_once() {
        let none = with_address("");
        let first = with_address("10.0.0.1:31000");
        let moved = with_address("10.0.0.2:31000");
        assert!(external_addresses(None, &none).is_empty());
        let learnt = external_addresses(Some(&none), &first);
        assert_eq!(learnt.len(), 1);
        assert_eq!(learnt[0].reason, reason::EXTERNAL_ADDRESS_CHANGED);
        assert!(learnt[0].text.contains("10.0.0.1:31000"));
        assert!(external_addresses(Some(&first), &first).is_empty());
        let changed = external_addresses(Some(&first), &moved);
        assert!(
            changed[0]
                .text
                .contains("10.0.0.2:31000 to clients outside (was 10.0.0.1:31000)")
        );
        let off = external_addresses(Some(&moved), &none);
        assert!(off[0].text.contains("no longer"));
    }

    #[test]
    fn a_changed_primary_is_announced_once_and_a_first_sight_not_at_all() {
        let mut primaries = HashMap::new();
        assert!(failovers(&[shard(0, Some(0))], &mut primaries).is_empty());
        // No primary mid-failover: remembered as it was.
        assert!(failovers(&[shard(0, None)], &mut primaries).is_empty());
        let notes = failovers(&[shard(0, Some(1))], &mut primaries);
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].reason, reason::PRIMARY_CHANGED);
        assert_eq!(
            notes[0].text,
            "shard 0: member 1 is now the primary (was member 0)"
        );
        assert!(failovers(&[shard(0, Some(1))], &mut primaries).is_empty());
    }
}
