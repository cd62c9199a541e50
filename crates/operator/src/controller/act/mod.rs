//! Act: carries out what [`super::decide`] decided, in a fixed order (thin
//! I/O: API writes in [`kube`], Valkey commands in [`valkey`], moves and
//! restarts in [`moves`]). Nothing here chooses; every step may be cut short
//! and is taken again from the top by the next reconcile.

pub use crate::apply;
pub mod kube;
pub mod moves;
pub mod rotation;
pub mod secrets;
pub mod tls;
pub mod tls_switch;
pub mod users;
pub mod valkey;

use super::done::Done;
use super::valkey_io::Session;
use crate::context::Context;
use crate::error::Error;
use crate::events::{Events, reason};
use ::kube::ResourceExt;
use api::ValidatedCluster;
use decide::heal::Heal;
use decide::memory::Memory;
use decide::placement::Placement;
use decide::pods::PodFacts;
use decide::rolling::RollStep;
use decide::view::KubeView;
use decide::{Announcements, Cleanup, Decision};
use resources::Desired;
use std::time::Instant;

/// What acting needs besides the decision: the client, the cluster, its
/// desired and live objects, the placement plan, where events go.
pub struct Actor<'a> {
    pub ctx: &'a Context,
    pub cluster: &'a ValidatedCluster,
    pub desired: &'a Desired,
    pub kube: &'a KubeView,
    pub placement: &'a Placement,
    pub events: &'a Events<'a>,
}

/// Carries out the Valkey side's decision, its clean-up, and says its
/// announcements, in a fixed order.
pub async fn carry_out(
    a: &Actor<'_>,
    d: &Decision,
    cleanup: &Cleanup<'_>,
    said: Announcements,
    session: &Session,
    memory: &mut Memory,
    now: Instant,
) -> Result<Done, Error> {
    let (ctx, cluster, events) = (a.ctx, a.cluster, a.events);
    let executed = valkey::execute(ctx, session, &d.valkey.actions, events, memory, now).await;
    let removed = kube::remove_members(ctx, cluster, &cleanup.leaving, events).await?;
    kube::set_role_labels(ctx, cluster, &cleanup.role_labels).await?;
    let healed = heal_lost_members(a, &d.heal).await?;
    events.notes(said.heal_waiting).await;
    if !said.failovers.is_empty() {
        memory.last_disturbance = Some(now);
    }
    events.notes(said.failovers).await;
    let stranded = kube::force_delete_pods(ctx, cluster, &cleanup.stranded).await?;

    // Moves, then the rolling update.
    let mut last_action = executed.last().cloned();
    let quiet = d.valkey.actions.is_empty();
    for (mv, step) in &d.moves {
        let give_up = d.give_up.get(&(mv.shard, mv.member));
        if let Some(done) = moves::step(a, mv, step, give_up, quiet).await? {
            memory.last_disturbance = Some(now);
            last_action = Some(done);
        }
    }
    kube::delete_claims(ctx, cluster, &cleanup.moved_volumes).await?;
    let rolled = match &d.roll.step {
        RollStep::Move { shard, member } if quiet => moves::start(a, *shard, *member).await?,
        RollStep::Restart { shard, member } if quiet => moves::restart(a, *shard, *member).await?,
        _ => None,
    };
    if let Some(done) = rolled {
        memory.last_disturbance = Some(now);
        last_action = Some(done);
    }
    events.notes(said.rolling_blocked).await;
    if !d.health.is_ready() || !executed.is_empty() {
        memory.last_disturbance = Some(now);
    }
    Ok(Done {
        executed,
        removed,
        healed,
        stranded,
        last_action,
    })
}

/// Re-creates members whose node is lost, as [`heal::decide`] said (see
/// [`decide::heal`]). Returns how many pods it removed.
async fn heal_lost_members(a: &Actor<'_>, heals: &[Heal]) -> Result<usize, Error> {
    let mut done = 0;
    for decision in heals {
        let (s, m, with_volume) = match *decision {
            Heal::Wait { .. } => continue,
            Heal::ReplacePod { shard, member } => (shard, member, false),
            Heal::ReplacePodAndVolume { shard, member } => (shard, member, true),
        };
        let Some(pod) = a.kube.members.get(&(s, m)) else {
            continue;
        };
        let node = PodFacts::of(pod).node.unwrap_or_default();
        if with_volume {
            kube::delete_claim_of(a.ctx, a.cluster, &pod.name_any()).await?;
        }
        kube::force_delete_pod(a.ctx, a.cluster, pod).await?;
        done += 1;
        let what = if with_volume {
            "its volume on that node is given up and it is reseeded by its primary"
        } else {
            "it is reseeded by its primary"
        };
        a.events
            .warning(
                reason::MEMBER_REPLACED,
                "Heal",
                format!("shard {s} member {m}: node {node} is lost; re-creating the member where the plan puts it ({what})"),
            )
            .await;
    }
    Ok(done)
}
