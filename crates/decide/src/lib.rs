//! Decide: everything that chooses what happens, as pure functions of plain
//! data (the [`Facts`], the spec, the placement plan, what the operator
//! remembers, `now`), each returning a decision value. Nothing here holds a
//! client, and this crate's dependencies hold none (no kube client, tokio,
//! hyper or object store: `cargo tree -p decide -e normal`); the operator's act
//! step carries the decisions out.
//!
//! The facts it reads: [`view`] (the Kubernetes side), [`pods`] (each member
//! pod's state), [`facts`] (both joined with what Valkey said), [`memory`]
//! (what the operator remembers between reconciles); [`notes`]: the events a
//! decision asks for.
//!
//! - [`placement`]: where each member should run (the planner, bounded);
//! - [`objects`]: the owned objects as they should be;
//! - [`external`]: the address each member announces to clients outside;
//! - [`valkey`]: the Valkey topology to work towards (then `valkey::planner`
//!   picks the commands);
//! - [`rolling`]: which member to restart or move next;
//! - [`surge`] and [`moves`]: a member's move, surge-first;
//! - [`balance`]: the failover preference and primary balancing;
//! - [`heal`]: members on lost nodes;
//! - [`cleanup`]: what to delete or patch (budgets, leaving members, Pending
//!   pods, volumes, role labels);
//! - [`replication`]: a replication set's primary, failovers and role labels;
//! - [`safety`]: the rules that keep data, shared by heal, moves and scale-in.

pub mod balance;
pub mod cleanup;
pub mod conditions;
pub mod external;
pub mod facts;
pub mod heal;
pub mod memory;
pub mod moves;
pub mod notes;
pub mod placement;
pub mod pods;
pub mod replication;
pub mod restore;
pub mod rolling;
pub mod rotation;
pub mod safety;
pub mod tls;
pub mod users;
pub mod valkey;
pub mod view;

use crate::facts::{Facts, desired_members, retained_start};
use crate::memory::Memory;
use crate::pods::PodFacts;
use crate::view::KubeView;
use ::valkey::actions::Plan;
use ::valkey::model::MemberIndex;
use ::valkey::planner::{self, Health, PlanError, PlannerOptions};
use api::ValidatedCluster;
use balance::BalanceState;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use moves::{Move, MoveStep};
use placement::Placement;
use resources::statefulset::Ordinals;
use resources::{self as builders, Desired, config};
use rolling::{Roll, RollStep};
use std::time::{Duration, Instant};

/// The owned objects as they should be: the plan's placement, the live
/// StatefulSets' volume claim templates (immutable) and ordinals (a moved
/// member runs under a later one).
pub fn objects(
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    placement: &Placement,
    view: &KubeView,
) -> Desired {
    builders::desired(
        cluster,
        owner,
        |s, m| placement.member(s, m),
        |name| {
            view.statefulsets
                .get(name)
                .and_then(|s| s.spec.as_ref())
                .and_then(|s| s.volume_claim_templates.as_deref())
        },
        |name| {
            view.statefulsets
                .get(name)
                .map(Ordinals::of)
                .or_else(|| retained_start(view, name))
        },
    )
}

/// What the Valkey side of a reconcile decided.
#[derive(Debug)]
pub struct Decision {
    /// The members' health (the new copies of moves left out: a move's new
    /// copy is one copy more, not one the shard is missing while it syncs).
    pub health: Health,
    /// Every member of the spec has a Ready pod.
    pub all_pods_ready: bool,
    /// Healthy, every pod Ready, nothing blocking.
    pub cluster_ready: bool,
    /// The moves in flight and the next step of each.
    pub moves: Vec<(Move, MoveStep)>,
    /// How each move given up (`MoveStep::Abort`) is given up, by member.
    pub give_up: std::collections::BTreeMap<(u32, u32), moves::GiveUp>,
    /// The rolling update's next step (`Wait` while a move is under way).
    pub roll: Roll,
    pub balance: BalanceState,
    /// The Valkey commands to send now, what waits, what may be removed.
    pub valkey: Plan,
    /// What to do about members on lost nodes.
    pub heal: Vec<heal::Heal>,
    /// When something waits on time alone (the balancing's quiet period):
    /// look again after this, even if nothing changes before.
    pub wake_in: Option<Duration>,
}

/// Decides the Valkey side. `blocked`: nobody can be asked (the password is
/// missing), so no command is planned; `bootstrapping`: the cluster was
/// never Ready (see [`node_timeout_ms`]).
pub fn next(
    f: &Facts<'_>,
    desired: &Desired,
    placement: &Placement,
    (blocked, bootstrapping): (bool, bool),
    memory: &Memory,
    now: Instant,
) -> Result<Decision, PlanError> {
    let opts = PlannerOptions::default();
    let members = valkey::members(f);
    let health = valkey::without_new_copies(planner::health(&members, f.valkey, &opts)?);
    let in_flight = moves::in_flight(f, placement);
    let give_up = moves::giving_up(f, &in_flight);
    let all_pods_ready = desired_members(f.cluster).all(|(s, m)| {
        f.kube
            .members
            .get(&(s, m))
            .is_some_and(|p| PodFacts::of(p).ready)
    });
    let cluster_ready = health.is_ready() && all_pods_ready && !blocked;

    // The rolling update, then primary balancing, decide the primaries.
    let mut roll = rolling::roll(f, desired, placement, cluster_ready);
    // One move at a time, and no restart or balancing failover in the
    // middle of one.
    if let Some(why) = moves::move_in_flight(&in_flight, f.kube) {
        roll.step = RollStep::Wait(why);
    }
    // The topology the planner works towards: the members, and the new
    // copies of moves in flight as extra replicas.
    let mut topology = valkey::with_new_copies(&members, f, &in_flight);
    topology.config.insert(
        config::NODE_TIMEOUT.to_string(),
        node_timeout_ms(f.valkey, bootstrapping && !health.is_ready()).to_string(),
    );
    let mut balance = BalanceState::Aligned;
    let mut wake_in = None;
    match &roll.step {
        RollStep::Failover { shard, to } => {
            valkey::set_primary(&mut topology, *shard, MemberIndex::Member(*to));
        }
        RollStep::Done => {
            let (state, failover, wait) =
                balance::balancing(f, cluster_ready, memory.last_disturbance, now);
            balance = state;
            wake_in = wait;
            if let Some((shard, to)) = failover {
                valkey::set_primary(&mut topology, shard, MemberIndex::Member(to));
            }
        }
        _ => {}
    }
    let mut plan = if blocked {
        Plan::default()
    } else {
        planner::next_actions(&topology, f.valkey, &opts)?
    };
    valkey::patient(&mut plan.actions, &memory.failover_requested, now);

    let volume_grace = f
        .cluster
        .persistence
        .as_ref()
        .map(|p| p.node_loss_grace)
        .unwrap_or_default();
    let heal = heal::decide(
        &heal::lost_members(f),
        resources::config::durable(f.cluster),
        volume_grace,
    );
    Ok(Decision {
        health,
        all_pods_ready,
        cluster_ready,
        moves: in_flight,
        give_up,
        roll,
        balance,
        valkey: plan,
        heal,
        wake_in,
    })
}

/// What the Kubernetes side does after the Valkey side's commands, decided
/// with them: the members that may leave, the role labels, the copies
/// stranded on lost nodes, the volumes moves left behind.
#[derive(Debug)]
pub struct Cleanup<'v> {
    /// Leaving members whose StatefulSets may go.
    pub leaving: Vec<cleanup::Leaving>,
    /// Member pods whose role label is not what Valkey says.
    pub role_labels: Vec<(&'v k8s_openapi::api::core::v1::Pod, &'static str)>,
    /// The old copies of finished moves on lost nodes (force-deleted).
    pub stranded: Vec<&'v k8s_openapi::api::core::v1::Pod>,
    /// The volumes of copies that moved away.
    pub moved_volumes: Vec<cleanup::Doomed>,
}

/// The events a reconcile announces (each once, remembered in `memory`).
#[derive(Debug, Default)]
pub struct Announcements {
    /// Members on lost nodes that wait (the grace period, a replica to sync).
    pub heal_waiting: Vec<notes::Note>,
    /// Primaries that changed since the last reconcile that saw one.
    pub failovers: Vec<notes::Note>,
    /// Why the rolling update cannot go on.
    pub rolling_blocked: Vec<notes::Note>,
}

/// The clean-up that goes with decision `d` (`joined`: the members the
/// status recorded as joined).
pub fn cleanup<'v>(
    f: &Facts<'v>,
    d: &Decision,
    joined: &std::collections::BTreeSet<(u32, u32)>,
) -> Cleanup<'v> {
    let holds = |s: u32, m: u32| f.primaries.get(&s) == Some(&m) || f.in_sync(s, m);
    Cleanup {
        leaving: cleanup::leaving_members(f.cluster, f.kube, &d.valkey.removable, joined),
        role_labels: cleanup::role_labels(f),
        stranded: cleanup::stranded_copies(f),
        moved_volumes: cleanup::moved_volumes(f.cluster, f.kube, holds),
    }
}

/// The events decision `d` announces, each once: `memory` remembers what
/// was said (and the primaries seen).
pub fn announce(f: &Facts<'_>, d: &Decision, memory: &mut Memory) -> Announcements {
    Announcements {
        heal_waiting: heal::waiting_note(&d.heal, &mut memory.announced),
        failovers: notes::failovers(&f.shards, &mut memory.primaries),
        rolling_blocked: rolling::blocked_note(&d.roll.step, &mut memory.announced),
    }
}

/// The `cluster-node-timeout` the members should have now: while a new
/// cluster bootstraps (`bootstrapping`: never Ready so far, and not Ready
/// now) and holds no key at all, [`config::BOOTSTRAP_NODE_TIMEOUT_MS`], so
/// that what each member learns after the MEETs (who serves which slots)
/// reaches the others at the next ping, which Valkey sends to a peer it
/// heard from lately only every node-timeout/2; else the normal
/// [`config::CLUSTER_NODE_TIMEOUT_MS`]. A cluster with data never gets the
/// short timeout (a spurious failover could lose writes), and once Ready it
/// goes back to the normal one for good.
pub fn node_timeout_ms(valkey: &::valkey::model::ObservedCluster, bootstrapping: bool) -> u32 {
    // Every member answered and holds nothing (one that does not answer
    // might hold data).
    let empty = valkey
        .members
        .iter()
        .all(|m| m.report().is_some_and(|r| r.keys == 0));
    if empty && bootstrapping {
        bootstrap_node_timeout_ms(valkey.members.len())
    } else {
        config::CLUSTER_NODE_TIMEOUT_MS
    }
}

/// Pings a second a bootstrapping cluster's members may send in all.
const BOOTSTRAP_PINGS_PER_SECOND: u64 = 1000;

/// The bootstrap `cluster-node-timeout` for `members` members: every
/// member pings each peer at least every half timeout, so the cluster sends
/// `members x (members - 1) x 2000 / timeout` pings a second (each with its
/// slot bitmap). The shortest timeout that keeps that within
/// [`BOOTSTRAP_PINGS_PER_SECOND`], between [`config::BOOTSTRAP_NODE_TIMEOUT_MS`]
/// and [`config::CLUSTER_NODE_TIMEOUT_MS`]: 1 s up to 22 members, the usual
/// 5 s from 51 on. At 1 s, 120 members sent about 28,000 pings a second and
/// saturated a 2-core host (the operator lost its Lease).
pub fn bootstrap_node_timeout_ms(members: usize) -> u32 {
    let n = members as u64;
    let needed =
        n.saturating_mul(n.saturating_sub(1)).saturating_mul(2000) / BOOTSTRAP_PINGS_PER_SECOND;
    let needed = u32::try_from(needed).unwrap_or(u32::MAX);
    needed.clamp(
        config::BOOTSTRAP_NODE_TIMEOUT_MS,
        config::CLUSTER_NODE_TIMEOUT_MS,
    )
}

#[cfg(test)]
mod tests;
