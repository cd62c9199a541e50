//! Act on moves and restarts: a member's StatefulSet runs a second pod (a
//! move starts), keeps only the new one (done) or the old one (given up); a
//! pod is deleted for a rolling restart. See [`decide::moves`].

use super::Actor;
use super::kube::{apply_ordinals, delete_claim_of, delete_pod, force_delete_pod};
use crate::error::Error;
use crate::events::reason;
use api::constants::member_name;
use decide::moves::GiveUp;
use decide::moves::{Move, MoveStep};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use resources::adapt::pods::node_of;
use resources::statefulset::{Ordinals, claim_of};

/// Starts moving member `(s, m)`: its StatefulSet runs a second pod, created
/// from the template that already carries the new placement. Returns what
/// was done.
pub async fn start(a: &Actor<'_>, s: u32, m: u32) -> Result<Option<String>, Error> {
    let name = member_name(&a.cluster.name, s, m);
    let Some(live) = a.kube.statefulsets.get(&name) else {
        return Ok(None);
    };
    let surging = Ordinals::of(live).with_new_copy();
    let Some(next) = surging.new_copy() else {
        return Ok(None);
    };
    let new_pod = format!("{name}-{next}");
    if a.cluster.persistence.is_some() && a.kube.pvcs.contains_key(&claim_of(&new_pod)) {
        // A claim left under the new ordinal (a move given up, a member
        // removed and added back) would bring stale data, and pin the new
        // copy to the old volume's node: it goes first.
        delete_claim_of(a.ctx, a.cluster, &new_pod).await?;
        return Ok(None);
    }
    if !apply_ordinals(a, &name, surging).await? {
        return Ok(None);
    }
    let old = a.kube.members.get(&(s, m));
    let msg = format!(
        "moving shard {s} member {m} off node {}: its new copy (pod {new_pod}) starts where the placement plan puts it (node {}); the old copy (pod {}) stays until the new one is in sync",
        node_of(old),
        a.placement.node_of(s, m),
        old.map(ResourceExt::name_any).unwrap_or_default()
    );
    tracing::info!(shard = s, member = m, "{msg}");
    a.events
        .normal(reason::MEMBER_MOVED, "MoveMember", &msg)
        .await;
    Ok(Some(msg))
}

/// Carries out the next step of a move in flight. `quiet`: no Valkey
/// command is sent this reconcile. Returns what was done.
pub async fn step(
    a: &Actor<'_>,
    mv: &Move,
    step: &MoveStep,
    give_up: Option<&GiveUp>,
    quiet: bool,
) -> Result<Option<String>, Error> {
    let (s, m) = (mv.shard, mv.member);
    let name = member_name(&a.cluster.name, s, m);
    let old = a.kube.members.get(&(s, m));
    let new = a.kube.new_copies.get(&(s, m));
    let pod_name = |p: Option<&Pod>| p.map(ResourceExt::name_any).unwrap_or_default();
    match step {
        MoveStep::Complete if quiet => {
            // The old pod goes; its claim is deleted by the sweep of moved
            // volumes (kept by Kubernetes until the pod is gone).
            apply_ordinals(a, &name, mv.ordinals.completed()).await?;
            let msg = format!(
                "moved shard {s} member {m}: its new copy (pod {} on node {}) is in sync; removing the old copy (pod {} on node {})",
                pod_name(new),
                node_of(new),
                pod_name(old),
                node_of(old)
            );
            tracing::info!(shard = s, member = m, "{msg}");
            a.events
                .normal(reason::MEMBER_MOVED, "MoveMember", &msg)
                .await;
            Ok(Some(msg))
        }
        MoveStep::Abort(why) => {
            let why = format!("{}: {why}", mv.what());
            if let Some(reason) = give_up.and_then(|g| g.waits.as_ref()) {
                let msg = format!(
                    "shard {s} member {m}: giving up its move ({why}) waits: the new copy's volume is kept because {reason}"
                );
                tracing::info!(shard = s, member = m, "{msg}");
                return Ok(None);
            }
            apply_ordinals(a, &name, mv.ordinals.aborted()).await?;
            if let Some(pod) = new {
                if a.cluster.persistence.is_some() {
                    delete_claim_of(a.ctx, a.cluster, &pod.name_any()).await?;
                }
                if give_up.is_some_and(|g| g.force_delete_new) {
                    // Nobody on that node can finish the deletion.
                    force_delete_pod(a.ctx, a.cluster, pod).await?;
                }
            }
            let msg = format!(
                "gave up moving shard {s} member {m} ({why}); it stays on node {} (pod {})",
                node_of(old),
                pod_name(old)
            );
            tracing::warn!(shard = s, member = m, "{msg}");
            a.events
                .warning(reason::MEMBER_MOVE_ABORTED, "MoveMember", &msg)
                .await;
            Ok(Some(msg))
        }
        _ => Ok(None),
    }
}

/// Deletes member `(s, m)`'s pod to restart it with the new spec. Returns
/// what was done.
pub async fn restart(a: &Actor<'_>, s: u32, m: u32) -> Result<Option<String>, Error> {
    let Some(pod) = a.kube.members.get(&(s, m)) else {
        return Ok(None);
    };
    delete_pod(a.ctx, a.cluster, pod).await?;
    let msg = format!(
        "restarting shard {s} member {m} (pod {}) to apply a new spec",
        pod.name_any()
    );
    a.events
        .normal(reason::ROLLING_RESTART, "RollingRestart", &msg)
        .await;
    Ok(Some(msg))
}
