// Over 600 lines: the next-action planner is one pass whose steps run in order; each step is a function here.
//! The next-action planner: from the desired topology and what every member says,
//! the admin commands to send now.
//!
//! [`next_actions`] is pure and idempotent: it looks only at the observation, so the
//! operator may be cut off after any command and run it again from the top. It acts
//! only on what the members agree on and waits (with a named [`Wait`]) otherwise:
//!
//! 1. **Membership.** One reachable member's view is the reference (the *anchor*:
//!    the one that knows the most). Every desired member that is not part of the
//!    anchor's cluster is met from the anchor by IP (fresh nodes, and nodes whose IP
//!    changed); an empty member that carries a view the anchor's cluster does not
//!    share (another cluster's, or its own from before it was forgotten) is reset
//!    under a new id first; a member with data of another cluster is never merged.
//!    A shard whose primary is gone while too few primaries are up for Valkey to
//!    elect a replica (1 or 2 shards) gets CLUSTER FAILOVER TAKEOVER on its
//!    furthest replica, once every replica answers (see `rescue_without_majority`).
//! 2. **Forget.** Node ids no member claims are forgotten on every member that knows
//!    them, in one plan (inside the 60 s ban window), once the cluster marks them
//!    failed, or at once when their member came back with a new id. A node that
//!    still serves slots is only forgotten when it is known to be replaced.
//! 3. **Replication.** Each desired member other than its shard's primary follows that
//!    primary (CLUSTER REPLICATE), once it knows the primary and its own view is not
//!    stale. A primary that returns after a failover is turned into a replica by
//!    Valkey itself; the planner waits for that rather than racing it.
//! 4. **Slots.** Slots no node serves are added (ADDSLOTSRANGE) to shard primaries,
//!    evenly; then slots move between shards (CLUSTER MIGRATESLOTS) until every
//!    desired shard is within one slot of even and removed shards hold none. Only
//!    when all views agree and no migration runs; one job per node at a time.
//! 5. **Failover.** When the live primary is leaving, or the desired primary is
//!    another member, a graceful CLUSTER FAILOVER is sent to an in-sync replica (one
//!    shard at a time, never with a replica that is behind).
//! 6. **Settings** differing from the desired ones are set live (CONFIG SET).
//!
//! While views disagree, one disagreement Valkey does not resolve by itself is
//! repaired: a member that missed a node's turn from primary to replica because of
//! a stale config epoch gets the primary's epoch bumped (`stale_roles`).
//!
//! [`health`] summarises the same analysis for the operator's conditions.

mod analysis;
mod health;

pub use health::{Health, HealthIssue, Severity, health};

use crate::actions::{Action, FailoverMode, Plan, ResetMode, Wait};
use crate::model::{
    DesiredCluster, MemberAddr, MemberIndex, MemberRef, NodeReport, ObservedCluster, ShardIndex,
};
use crate::parse::{NodeId, ReplicationInfo, Role};
use crate::slots::{self, SlotSet};
use analysis::{Analysis, JoinState, ShardState};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Errors in the planner's input: the desired topology or the observation contradict
/// themselves. Nothing is planned from such input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("desired topology lists shard {shard} twice")]
    DuplicateShard { shard: ShardIndex },
    #[error("desired shard {shard} has no member")]
    EmptyShard { shard: ShardIndex },
    #[error("desired topology lists {member} twice")]
    DuplicateMember { member: MemberRef },
    #[error(
        "desired shard {shard} names member {member} as primary or failover preference, but it is not one of its members"
    )]
    UnknownMember {
        shard: ShardIndex,
        member: MemberIndex,
    },
    #[error("observation lists {member} twice")]
    DuplicateObserved { member: MemberRef },
    #[error("{first} and {second} were observed at the same address {addr}")]
    SharedAddress {
        addr: MemberAddr,
        first: MemberRef,
        second: MemberRef,
    },
    #[error("{first} and {second} report the same node id {node_id}")]
    SharedNodeId {
        node_id: NodeId,
        first: MemberRef,
        second: MemberRef,
    },
    #[error("slot arithmetic failed: {0}")]
    Slots(#[from] slots::SlotError),
}

impl PlanError {
    /// A stable category string for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            PlanError::DuplicateShard { .. }
            | PlanError::EmptyShard { .. }
            | PlanError::DuplicateMember { .. }
            | PlanError::UnknownMember { .. } => "invalid_desired_topology",
            PlanError::DuplicateObserved { .. }
            | PlanError::SharedAddress { .. }
            | PlanError::SharedNodeId { .. } => "invalid_observation",
            PlanError::Slots(_) => "slot_arithmetic",
        }
    }
}

/// Knobs of the planner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannerOptions {
    /// How far (bytes of replication stream) a replica may be behind its primary and
    /// still count as in sync for a planned failover. A graceful failover makes the
    /// replica catch up anyway; this bounds how long the primary's writes pause.
    pub max_replica_lag_bytes: u64,
}

impl Default for PlannerOptions {
    fn default() -> PlannerOptions {
        PlannerOptions {
            max_replica_lag_bytes: 1024 * 1024,
        }
    }
}

/// How a replica stands with its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReplicaSync {
    /// Link up, no sync running, within the allowed lag.
    InSync { lag: u64 },
    /// Link up, no sync running, but further behind than allowed.
    Behind { lag: u64 },
    /// A full sync is running.
    Syncing,
    /// The replication link is down.
    LinkDown,
    /// The node does not replicate that primary.
    NotReplicating,
}

impl ReplicaSync {
    /// Whether a planned failover to this replica is allowed.
    pub fn is_in_sync(self) -> bool {
        matches!(self, ReplicaSync::InSync { .. })
    }
}

/// How the member that sent `replica` stands with the one that sent `primary`:
/// not replicating unless it says it follows that primary's node id, else as
/// [`replica_sync`] finds it. The one rule for "in sync" that both the planner
/// ([`Analysis::sync_of`](analysis::Analysis::sync_of)) and the operator's
/// failover and move decisions use.
pub fn sync_between(primary: &NodeReport, replica: &NodeReport, max_lag: u64) -> ReplicaSync {
    if replica.nodes.myself().primary_id.as_ref() != Some(primary.node_id()) {
        return ReplicaSync::NotReplicating;
    }
    replica_sync(&primary.replication, &replica.replication, max_lag)
}

/// How `replica` stands with `primary`, from both nodes' INFO replication: in sync
/// when `master_link_status:up`, `master_sync_in_progress:0`, and its
/// `slave_repl_offset` is within `max_lag` of the primary's `master_repl_offset`.
/// The caller checks that `replica` follows that primary.
pub fn replica_sync(
    primary: &ReplicationInfo,
    replica: &ReplicationInfo,
    max_lag: u64,
) -> ReplicaSync {
    if primary.role != Role::Primary || replica.role != Role::Replica {
        return ReplicaSync::NotReplicating;
    }
    let Some(link) = &replica.primary_link else {
        return ReplicaSync::NotReplicating;
    };
    if !link.link_up {
        return ReplicaSync::LinkDown;
    }
    if link.sync_in_progress {
        return ReplicaSync::Syncing;
    }
    // The two INFO replies are not taken at the same instant: a replica read later
    // may be ahead of the primary's earlier offset, which counts as no lag.
    let lag = primary
        .repl_offset
        .saturating_sub(link.repl_offset)
        .max(0)
        .unsigned_abs();
    if lag <= max_lag {
        ReplicaSync::InSync { lag }
    } else {
        ReplicaSync::Behind { lag }
    }
}

/// The replica to promote: the first of `preference` whose sync state is in sync.
/// `candidates` gives each replica's state; members not listed in `preference` are
/// never chosen.
pub fn choose_failover_target(
    preference: &[MemberRef],
    candidates: &BTreeMap<MemberRef, ReplicaSync>,
) -> Option<MemberRef> {
    preference
        .iter()
        .find(|m| candidates.get(m).is_some_and(|s| s.is_in_sync()))
        .copied()
}

/// The commands to send now, what the planner waits for, and which leaving members
/// may be deleted. See the module documentation for the order of concerns.
pub fn next_actions(
    desired: &DesiredCluster,
    observed: &ObservedCluster,
    opts: &PlannerOptions,
) -> Result<Plan, PlanError> {
    let a = Analysis::new(desired, observed, opts)?;
    let mut plan = Plan::default();
    unreachable_members(&a, &mut plan);
    membership(&a, &mut plan);
    forget(&a, &mut plan);
    let shards = a.shards();
    shard_blockers(&a, &shards, &mut plan);
    rescue_without_majority(&a, &mut plan);
    if !a.agreed() {
        plan.wait(Wait::WaitingForViewsToAgree {
            members: a.disagreeing.clone(),
        });
        stale_roles(&a, &mut plan);
    }
    for r in &a.migrating {
        plan.wait(Wait::WaitingForSlotMigration { member: *r });
    }
    // A restore attaches replicas and adds slots only once every member is
    // in: a first member not yet met still holds slots of its own the anchor
    // does not know of (see `DesiredCluster::restore`).
    let restore_waits =
        a.desired.restore.is_some() && a.desired_refs.iter().any(|r| !a.joined.contains(r));
    if !restore_waits {
        replication(&a, &shards, &mut plan);
    }
    config(&a, &mut plan);
    if !restore_waits {
        slots_and_failover(&a, &shards, &mut plan)?;
    }
    plan.removable = removable(&a);
    plan.actions.sort_by_key(Action::rank);
    Ok(plan)
}

/// A member that missed a node's turn from primary to replica for good, and the
/// CLUSTER BUMPEPOCH that lets the news through.
///
/// Fresh empty primaries resolve equal config epochs by bumping one of them, so a
/// node may hold a higher epoch than the primary it is then told to replicate
/// (1/1 gets 4 while 1/0 has 3). A replica's messages carry its primary's epoch,
/// and Valkey ignores a "primary turned replica" message from a node of the same
/// shard whose epoch is below the one it recorded for the sender (the stale-message
/// guard in `clusterProcessPacket`). A member that recorded 4 for 1/1 keeps listing
/// it as a primary for ever (seen: a whole minute, until the test gave up), and the
/// views never agree. BUMPEPOCH on the primary gives it a new highest epoch; its
/// replica learns it from the primary's next ping, carries it, and passes.
///
/// The node's own line is the word on its role: it must say it replicates P, and P
/// must say it is a primary and be one in the anchor's view (a bumped epoch makes
/// P's slot claims win, so never for a primary the cluster has replaced). The
/// stale view may be the anchor's own (in a fresh cluster the anchor is the lowest
/// member, as likely as any to be the one that missed it), so every joined
/// member's view is read, not only those that differ from the anchor's. Until the
/// replica has heard of the bump this asks again, and P answers `STILL` (it holds
/// the highest epoch already); after, the condition no longer holds.
fn stale_roles(a: &Analysis<'_>, plan: &mut Plan) {
    let Some(anchor_view) = a.anchor_view() else {
        return;
    };
    let mut bump = BTreeSet::new();
    for m in &a.joined {
        let Some(view) = a.reports.get(m).map(|rep| &rep.nodes) else {
            continue;
        };
        for (n, n_id) in &a.ids {
            let Some(seen) = view.get(n_id).filter(|_| n != m) else {
                continue;
            };
            let Some(n_view) = a.reports.get(n).map(|rep| &rep.nodes) else {
                continue;
            };
            let me = n_view.myself();
            let (Some(Role::Primary), Some(Role::Replica), Some(p_id)) =
                (seen.role(), me.role(), me.primary_id.as_ref())
            else {
                continue;
            };
            let Some(p) = a.claimed.get(p_id).copied() else {
                continue;
            };
            let p_is_primary = a
                .reports
                .get(&p)
                .is_some_and(|rep| rep.nodes.myself().role() == Some(Role::Primary))
                && anchor_view.get(p_id).is_some_and(|there| {
                    there.role() == Some(Role::Primary) && !there.is_failing()
                });
            // What the node's messages carry: its own record of P's epoch.
            let carried = n_view.get(p_id).map(|p_there| p_there.config_epoch);
            if p_is_primary && carried.is_some_and(|carried| seen.config_epoch > carried) {
                bump.insert(p);
            }
        }
    }
    plan.actions
        .extend(bump.into_iter().map(|on| Action::BumpEpoch { on }));
}

fn unreachable_members(a: &Analysis<'_>, plan: &mut Plan) {
    for (r, m) in &a.observed {
        if m.report().is_none() && a.is_desired(*r) {
            plan.wait(Wait::MemberUnreachable { member: *r });
        }
    }
}

/// At most this many members in a fresh cluster meet pairwise at once (the
/// MEETs grow with the square of it); a larger one learns the rest by gossip.
pub const MESH_MEET_LIMIT: usize = 32;

/// A fresh cluster (every reachable desired member knows only itself and
/// serves nothing): besides the anchor's MEETs, every pair of the other
/// members meets at once. The planner assigns slots once every view agrees,
/// and gossip from one seed takes 0.3-4 s to get there on nine members, one
/// round trip when every pair meets (`scripts/bootstrap-orders.py`).
fn mesh_meets(a: &Analysis<'_>, plan: &mut Plan) {
    let Some(anchor) = a.anchor else { return };
    let fresh: Vec<(MemberRef, MemberAddr)> = a
        .reports
        .iter()
        .filter(|(r, _)| a.is_desired(**r))
        .filter_map(|(r, rep)| rep.nodes.is_fresh().then_some(*r))
        .filter_map(|r| a.addr(r).map(|addr| (r, addr)))
        .collect();
    let desired_reachable = a.reports.keys().filter(|r| a.is_desired(**r)).count();
    if fresh.len() != desired_reachable || fresh.len() > MESH_MEET_LIMIT {
        return;
    }
    for (r, _) in fresh.iter().filter(|(r, _)| *r != anchor) {
        for (x, addr) in fresh.iter().filter(|(x, _)| *x != anchor && x != r) {
            // Once each way is enough: the handshake makes both know each other.
            if x < r {
                continue;
            }
            plan.actions.push(Action::Meet {
                on: *r,
                ip: addr.ip,
                port: addr.port,
                bus_port: addr.bus_port,
            });
        }
    }
}

/// Step 1: bring every reachable desired member into the anchor's cluster.
fn membership(a: &Analysis<'_>, plan: &mut Plan) {
    mesh_meets(a, plan);
    let Some(anchor) = a.anchor else { return };
    let Some(anchor_addr) = a.addr(anchor) else {
        return;
    };
    let Some(anchor_view) = a.anchor_view() else {
        return;
    };
    for (r, report) in &a.reports {
        if !a.is_desired(*r) {
            // Leaving members are never brought (back) in.
            continue;
        }
        let Some(addr) = a.addr(*r) else { continue };
        let meet_from_anchor = Action::Meet {
            on: anchor,
            ip: addr.ip,
            port: addr.port,
            bus_port: addr.bus_port,
        };
        match a.join_state(*r) {
            JoinState::Joined | JoinState::Unreachable => {}
            JoinState::Handshaking => plan.wait(Wait::WaitingForMeet { member: *r }),
            JoinState::AnchorHasOldAddress => plan.actions.push(meet_from_anchor),
            JoinState::MemberHasOldAnchorAddress | JoinState::MemberForgotAnchor => {
                plan.actions.push(Action::Meet {
                    on: *r,
                    ip: anchor_addr.ip,
                    port: anchor_addr.port,
                    bus_port: anchor_addr.bus_port,
                })
            }
            JoinState::Unknown => {
                let view = &report.nodes;
                let mine = &view.myself().slots;
                // Merging views that give slots to nodes the anchor does not know
                // would let epochs decide between two owners: data loss. Only views
                // whose slot owners the anchor knows are met.
                let compatible = view
                    .slot_owners()
                    .keys()
                    .all(|id| anchor_view.get(id).is_some());
                if view.is_fresh() || restored_alone(a, *r, view, anchor_view) {
                    plan.actions.push(meet_from_anchor);
                } else if report.keys == 0 {
                    // An empty node with a view the anchor's cluster does not share:
                    // a member back on a retained volume after the cluster forgot
                    // it, or a node of another cluster. It starts afresh under a new
                    // id, which no FORGET ban holds back, and is met as a new node.
                    plan.actions.push(Action::ResetNode {
                        on: *r,
                        mode: ResetMode::Hard,
                    });
                } else if mine.is_empty() && compatible {
                    plan.actions.push(meet_from_anchor);
                } else {
                    plan.wait(Wait::SeparateCluster { member: *r });
                }
            }
        }
    }
}

/// A shard's first member that started from the backup being restored: it
/// knows only itself, is a primary, and serves only slots its shard held in
/// the backup (those Valkey gave it for the keys it loaded), none of which the
/// anchor's cluster gives to anyone. Met like a fresh node: no two owners of
/// a slot can meet.
fn restored_alone(
    a: &Analysis<'_>,
    r: MemberRef,
    view: &crate::parse::ClusterNodes,
    anchor_view: &crate::parse::ClusterNodes,
) -> bool {
    let Some(held) = a.desired.restore.as_ref().and_then(|m| m.get(&r.shard)) else {
        return false;
    };
    let me = view.myself();
    view.nodes().len() == 1
        && me.role() == Some(Role::Primary)
        && me.slots.is_subset(held)
        && me.slots.is_disjoint(&anchor_view.covered_slots())
}

/// Step 2: forget node ids no member claims.
fn forget(a: &Analysis<'_>, plan: &mut Plan) {
    // Every id any joined member knows, with whether some view marks it failed and
    // the slots some view gives it.
    let mut seen: BTreeMap<NodeId, (bool, SlotSet)> = BTreeMap::new();
    for r in &a.joined {
        let Some(rep) = a.reports.get(r) else {
            continue;
        };
        for n in rep.nodes.nodes() {
            if n.flags.myself || n.flags.handshake || a.claimed.contains_key(&n.id) {
                continue;
            }
            let entry = seen.entry(n.id.clone()).or_default();
            entry.0 |= n.flags.fail;
            entry.1 = entry.1.union(&n.slots);
        }
    }
    for (id, (failed, slots)) in seen {
        let replaced = a.replaced.contains(&id);
        // A node serving slots is only given up when it is known to be replaced, and
        // everyone agrees on who serves what or members serve all its slots
        // already. The second: a replica promoted by TAKEOVER keeps its own config
        // epoch when that is the highest one already, and members that recorded
        // the same epoch for the old primary never take its claim; forgetting the
        // old primary frees the slots in their views and the claim gets through.
        let served_elsewhere = {
            let serving = a.reports.values().fold(SlotSet::default(), |acc, rep| {
                acc.union(&rep.nodes.myself().slots)
            });
            slots.is_subset(&serving)
        };
        let may_drop_slots = replaced && (a.agreed() || served_elsewhere);
        if !slots.is_empty() && !may_drop_slots {
            if !replaced {
                plan.wait(Wait::OrphanOwnsSlots {
                    node_id: id.clone(),
                    slots,
                });
            }
            continue;
        }
        if !replaced && !failed {
            plan.wait(Wait::WaitingForFailureDetection { node_id: id });
            continue;
        }
        // "Can't forget my master!": replicas must move first, or they would keep
        // gossiping the node back after the ban.
        let followed = a.joined.iter().any(|r| {
            a.reports
                .get(r)
                .is_some_and(|rep| rep.nodes.myself().primary_id.as_ref() == Some(&id))
        });
        if followed {
            plan.wait(Wait::WaitingForReplicasToMove { node_id: id });
            continue;
        }
        for r in &a.joined {
            let knows = a
                .reports
                .get(r)
                .is_some_and(|rep| rep.nodes.get(&id).is_some());
            if knows {
                plan.actions.push(Action::Forget {
                    on: *r,
                    node_id: id.clone(),
                });
            }
        }
    }
}

fn shard_blockers(
    a: &Analysis<'_>,
    shards: &BTreeMap<ShardIndex, ShardState<'_>>,
    plan: &mut Plan,
) {
    for s in shards.values() {
        if s.conflicting() {
            plan.wait(Wait::ConflictingPrimaries {
                shard: s.index,
                members: s.owners.iter().map(|(r, _)| *r).collect(),
            });
        }
        if let (Some(blocker), Some(_)) = (&s.primary_blocker, s.desired) {
            plan.wait(blocker.clone());
        }
        // A live primary that is down: Valkey's own failover promotes a replica
        // (or, without a majority to elect one, `rescue_without_majority`).
        if let Some(p) = s.primary
            && !s.slots.is_empty()
            && !a.reports.contains_key(&p)
        {
            plan.wait(Wait::WaitingForFailover { shard: s.index });
        }
    }
}

/// Step 1b: a shard whose primary is down while too few primaries are up to
/// elect a replica. Valkey promotes a replica only with the votes of a majority
/// of the primaries that serve slots, so with 1 or 2 shards (or half the
/// primaries lost at once) it never fails over by itself. The shard would stay
/// down until its primary returns, and a primary without persistence returns
/// empty: its replicas would full-sync nothing from it and drop every key.
///
/// So the operator promotes the replica itself, with CLUSTER FAILOVER TAKEOVER
/// (no vote), but only when all of these hold:
/// - no member that answers the operator is that primary (its member does not
///   answer, or came back under a new id) and the anchor's view marks it failing (pfail or fail: a cluster-node-timeout without an answer);
/// - no majority of the slot-serving primaries is up in that view (else Valkey
///   elects, and two promotions would race);
/// - every replica of that primary answers and has lost its link to it (a
///   replica still linked means the primary is alive for it);
/// - the replica chosen has the highest replication offset of them all, so no
///   write any of them acknowledged is lost. A replica that does not answer may
///   hold the latest writes: then nothing is promoted and the shard waits.
fn rescue_without_majority(a: &Analysis<'_>, plan: &mut Plan) {
    let Some(view) = a.anchor_view() else { return };
    let owners = view.slot_owners();
    let up = owners
        .keys()
        .filter(|id| view.get(id).is_some_and(|n| !n.is_failing()))
        .count();
    if owners.is_empty() || up * 2 > owners.len() {
        return;
    }
    for primary_id in owners.keys() {
        // Gone: no member that answers is this node (its member does not
        // answer, or came back under a new id).
        let gone = a
            .claimed
            .get(primary_id)
            .is_none_or(|r| !a.reports.contains_key(r));
        if !gone || !view.get(primary_id).is_some_and(|n| n.is_failing()) {
            continue;
        }
        if let Some(target) = takeover_target(a, view, primary_id) {
            plan.actions.push(Action::Failover {
                on: target,
                mode: FailoverMode::Takeover,
            });
        }
    }
}

/// The replica of `primary_id` to promote without a vote: the one furthest
/// along, when every replica of it answers and none is still linked to it.
fn takeover_target(
    a: &Analysis<'_>,
    view: &crate::parse::ClusterNodes,
    primary_id: &NodeId,
) -> Option<MemberRef> {
    let mut followers: BTreeSet<MemberRef> = BTreeSet::new();
    for replica in view.replicas_of(primary_id) {
        // A replica nobody claims any more (its member came back under a new
        // id) is gone for good and holds nothing.
        if a.replaced.contains(&replica.id) {
            continue;
        }
        let member = a.claimed.get(&replica.id)?;
        followers.insert(*member);
    }
    for (r, report) in &a.reports {
        if report.nodes.myself().primary_id.as_ref() == Some(primary_id) {
            followers.insert(*r);
        }
    }
    let mut best: Option<(i64, MemberRef)> = None;
    for r in followers {
        let report = a.reports.get(&r)?;
        let link = report.replication.primary_link.as_ref()?;
        if report.role() != Role::Replica
            || report.nodes.myself().primary_id.as_ref() != Some(primary_id)
            || link.link_up
        {
            return None;
        }
        if best.is_none_or(|(offset, _)| link.repl_offset > offset) {
            best = Some((link.repl_offset, r));
        }
    }
    best.map(|(_, r)| r)
}

/// Step 3: desired members follow their shard's primary.
fn replication(a: &Analysis<'_>, shards: &BTreeMap<ShardIndex, ShardState<'_>>, plan: &mut Plan) {
    if !a.agreed() {
        return;
    }
    for s in shards.values() {
        let (Some(desired), Some(primary)) = (s.desired, s.primary) else {
            continue;
        };
        if s.conflicting() || !a.reports.contains_key(&primary) || !a.settled(primary) {
            continue;
        }
        let Some(primary_id) = a.ids.get(&primary) else {
            continue;
        };
        for d in &desired.members {
            let r = MemberRef {
                shard: s.index,
                member: d.index,
            };
            if r == primary || !a.joined.contains(&r) {
                continue;
            }
            if a.replicates(r, primary_id) {
                continue;
            }
            let Some(rep) = a.reports.get(&r) else {
                continue;
            };
            if !a.settled(r) {
                plan.wait(Wait::WaitingForViewsToAgree { members: vec![r] });
                continue;
            }
            if rep.nodes.get(primary_id).is_none() {
                plan.wait(Wait::WaitingForGossip {
                    member: r,
                    node_id: primary_id.clone(),
                });
                continue;
            }
            let me = rep.nodes.myself();
            if !me.slots.is_empty() {
                // A second slot owner in the shard; reported as ConflictingPrimaries.
                continue;
            }
            if me.role() == Some(Role::Primary) && rep.keys > 0 {
                plan.wait(Wait::MemberHoldsKeys { member: r });
                continue;
            }
            plan.actions.push(Action::Replicate {
                on: r,
                primary_id: primary_id.clone(),
            });
        }
    }
}

/// Step 6: live settings.
fn config(a: &Analysis<'_>, plan: &mut Plan) {
    for (r, rep) in &a.reports {
        let Some(shard) = a.desired_shards.get(&r.shard) else {
            continue;
        };
        let Some(member) = shard.members.iter().find(|m| m.index == r.member) else {
            continue;
        };
        let mut wanted = a.desired.config.clone();
        wanted.extend(member.config.iter().map(|(k, v)| (k.clone(), v.clone())));
        for (key, value) in wanted {
            if rep.config.get(&key) != Some(&value) {
                plan.actions.push(Action::ConfigSet { on: *r, key, value });
            }
        }
    }
}

/// Who holds slots in a rebalance: nobody yet, or a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Holder {
    Unassigned,
    Shard(ShardIndex),
}

/// Steps 4 and 5: slots and primaries.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
fn slots_and_failover(
    a: &Analysis<'_>,
    shards: &BTreeMap<ShardIndex, ShardState<'_>>,
    plan: &mut Plan,
) -> Result<(), PlanError> {
    let Some(view) = a.anchor_view() else {
        return Ok(());
    };
    if !a.agreed() || !a.migrating.is_empty() || a.desired_shards.is_empty() {
        return Ok(());
    }
    if shards.values().any(ShardState::conflicting) {
        return Ok(());
    }
    let unassigned = a.unassigned();
    let bootstrap = unassigned.is_full();
    if bootstrap {
        // A fresh cluster: every reachable desired member must have joined, so no
        // lone node can still hold slots the others have not heard of.
        let pending: Vec<MemberRef> = a
            .reports
            .keys()
            .filter(|r| a.is_desired(**r) && !a.joined.contains(r))
            .copied()
            .collect();
        if !pending.is_empty() {
            return Ok(());
        }
    }

    // A restore gives each slot nobody serves to the shard that held it in
    // the backup; only slots no shard held are spread evenly.
    let restore = a.desired.restore.as_ref();
    let mut spread = unassigned.clone();
    for (shard, held) in restore.into_iter().flatten() {
        let add = unassigned.intersection(held);
        spread = spread.difference(held);
        if add.is_empty() || !a.desired_shards.contains_key(shard) {
            continue;
        }
        match usable_primary(a, shards, *shard) {
            Some(p) => plan
                .actions
                .push(Action::AddSlotsRange { on: p, ranges: add }),
            None => plan.wait(Wait::WaitingForPrimary { shard: *shard }),
        }
    }
    let mut current: BTreeMap<Holder, SlotSet> = BTreeMap::new();
    if !spread.is_empty() {
        current.insert(Holder::Unassigned, spread);
    }
    for s in shards.values() {
        if !s.slots.is_empty() {
            current.insert(Holder::Shard(s.index), s.slots.clone());
        }
    }
    let keep: Vec<Holder> = a.desired_shards.keys().map(|i| Holder::Shard(*i)).collect();
    let moves = slots::rebalance(&current, &keep)?;

    // Slots nobody serves first: they are unavailable until added.
    for m in moves.iter().filter(|m| m.from == Holder::Unassigned) {
        let Holder::Shard(to) = m.to else { continue };
        match usable_primary(a, shards, to) {
            Some(p) => {
                plan.actions.push(Action::AddSlotsRange {
                    on: p,
                    ranges: m.slots.clone(),
                });
            }
            None => plan.wait(Wait::WaitingForPrimary { shard: to }),
        }
    }
    // While restoring, the slots stay where the backup had them.
    if !unassigned.is_empty() || restore.is_some() {
        return Ok(());
    }

    // Orphans hold slots the planner cannot move; leave balance alone until they are
    // resolved (reported by forget()).
    if !a.orphan_owners().is_empty() {
        return Ok(());
    }

    if failover(a, shards, plan) {
        return Ok(());
    }

    // Migrations: one job per node at a time.
    let mut busy: BTreeSet<MemberRef> = BTreeSet::new();
    for m in &moves {
        let (Holder::Shard(from), Holder::Shard(to)) = (m.from, m.to) else {
            continue;
        };
        let (Some(source), Some(target)) = (
            usable_primary(a, shards, from),
            usable_primary(a, shards, to),
        ) else {
            if usable_primary(a, shards, from).is_none() {
                plan.wait(Wait::WaitingForPrimary { shard: from });
            } else {
                plan.wait(Wait::WaitingForPrimary { shard: to });
            }
            continue;
        };
        if busy.contains(&source) || busy.contains(&target) {
            continue;
        }
        let Some(target_id) = a.ids.get(&target) else {
            continue;
        };
        if view.get(target_id).is_none() {
            continue;
        }
        if !replicas_attached(a, shards, to) {
            plan.wait(Wait::WaitingForReplicas { shard: to });
            continue;
        }
        if a.desired_shards.get(&to).is_some_and(|d| d.hold_slots) {
            plan.wait(Wait::WaitingForClientAddress { shard: to });
            continue;
        }
        if !settings_live(a, to) {
            plan.wait(Wait::WaitingForSettings { shard: to });
            continue;
        }
        busy.insert(source);
        busy.insert(target);
        plan.actions.push(Action::MigrateSlots {
            on: source,
            ranges: m.slots.clone(),
            target_id: target_id.clone(),
        });
    }
    Ok(())
}

/// The primary of shard `index` when it can take commands: reachable, joined, its
/// own view settled, a primary.
fn usable_primary(
    a: &Analysis<'_>,
    shards: &BTreeMap<ShardIndex, ShardState<'_>>,
    index: ShardIndex,
) -> Option<MemberRef> {
    let p = shards.get(&index)?.primary?;
    let rep = a.reports.get(&p)?;
    (a.settled(p) && rep.nodes.myself().role() == Some(Role::Primary)).then_some(p)
}

/// Whether every reachable desired replica of shard `index` follows its primary with
/// the link up: data moves into a shard only once it has its copies.
fn replicas_attached(
    a: &Analysis<'_>,
    shards: &BTreeMap<ShardIndex, ShardState<'_>>,
    index: ShardIndex,
) -> bool {
    let Some(s) = shards.get(&index) else {
        return false;
    };
    let (Some(desired), Some(primary)) = (s.desired, s.primary) else {
        return false;
    };
    desired
        .members
        .iter()
        .map(|d| MemberRef {
            shard: index,
            member: d.index,
        })
        .filter(|r| *r != primary && a.reports.contains_key(r))
        .all(|r| {
            !matches!(
                a.sync_of(primary, r),
                ReplicaSync::NotReplicating | ReplicaSync::LinkDown
            )
        })
}

/// Whether every reachable desired member of shard `index` runs its own
/// settings (its member config: the client address it announces, its zone):
/// clients MOVED into a shard must be sent to the addresses it should
/// announce, so slots move in only after the CONFIG SETs of step 6.
fn settings_live(a: &Analysis<'_>, index: ShardIndex) -> bool {
    let Some(desired) = a.desired_shards.get(&index) else {
        return false;
    };
    desired.members.iter().all(|d| {
        let r = MemberRef {
            shard: index,
            member: d.index,
        };
        a.reports.get(&r).is_none_or(|rep| {
            // A key the member does not report is one its Valkey lacks:
            // CONFIG SET of it fails, so it must not hold slots back.
            d.config
                .iter()
                .all(|(k, v)| rep.config.get(k).is_none_or(|have| have == v))
        })
    })
}

/// Step 5: at most one graceful failover per plan. Returns whether one was planned
/// or is needed but waiting (then slot moves wait too).
fn failover(
    a: &Analysis<'_>,
    shards: &BTreeMap<ShardIndex, ShardState<'_>>,
    plan: &mut Plan,
) -> bool {
    let mut held = false;
    for s in shards.values() {
        let (Some(desired), Some(live)) = (s.desired, s.primary) else {
            continue;
        };
        if s.slots.is_empty() || !a.reports.contains_key(&live) || !a.settled(live) {
            continue;
        }
        let leaving = !desired.has_member(live.member);
        let moved = desired.primary.is_some_and(|p| p != live.member);
        if !leaving && !moved {
            continue;
        }
        let member = |m: MemberIndex| MemberRef {
            shard: s.index,
            member: m,
        };
        // A planned move goes only to the member asked for; a leaving primary hands
        // over to the best in-sync replica in the operator's order.
        let order: Vec<MemberRef> = match (leaving, desired.primary) {
            (false, Some(p)) => vec![member(p)],
            _ => desired
                .promotion_order()
                .into_iter()
                .map(member)
                .filter(|r| *r != live)
                .collect(),
        };
        let states: BTreeMap<MemberRef, ReplicaSync> = order
            .iter()
            .filter(|r| a.settled(**r))
            .map(|r| (*r, a.sync_of(live, *r)))
            .collect();
        held = true;
        match choose_failover_target(&order, &states) {
            Some(target) => {
                plan.actions.push(Action::Failover {
                    on: target,
                    mode: FailoverMode::Default,
                });
                // One shard at a time.
                return true;
            }
            None => {
                let syncing = order.iter().find(|r| {
                    states
                        .get(r)
                        .is_some_and(|st| !matches!(st, ReplicaSync::NotReplicating))
                });
                match (syncing, leaving) {
                    (Some(r), _) => plan.wait(Wait::WaitingForSync {
                        shard: s.index,
                        member: *r,
                    }),
                    (None, true) => plan.wait(Wait::NoInSyncReplica { shard: s.index }),
                    (None, false) => {
                        if let Some(r) = order.first() {
                            plan.wait(Wait::WaitingForSync {
                                shard: s.index,
                                member: *r,
                            });
                        }
                    }
                }
            }
        }
    }
    held
}

/// Leaving members that may be deleted now.
fn removable(a: &Analysis<'_>) -> Vec<MemberRef> {
    let view = a.anchor_view();
    let mut out = Vec::new();
    for (r, m) in &a.observed {
        // Wanted, or still in a slot migration job (even one finishing up).
        if a.is_desired(*r) || a.migrating.contains(r) {
            continue;
        }
        let id = a.id_of(*r);
        let entry = id.and_then(|id| view.and_then(|v| v.get(id)));
        // It serves slots: they must be drained (or taken over) first.
        if entry.is_some_and(|n| !n.slots.is_empty()) {
            continue;
        }
        if let Some(rep) = m.report()
            && !rep.nodes.myself().slots.is_empty()
        {
            continue;
        }
        // A desired member follows it.
        if let Some(id) = id {
            let followed = a.desired_refs.iter().any(|d| a.replicates(*d, id));
            if followed {
                continue;
            }
        }
        // A replica of a primary that still serves slots and is leaving (the drain
        // is not done) or down (it may be the copy Valkey promotes): keep it.
        if let Some(n) = entry
            && n.role() == Some(Role::Replica)
            && let Some(pid) = &n.primary_id
        {
            let primary_member = a.claimed.get(pid).copied();
            let primary_entry = view.and_then(|v| v.get(pid));
            let serves = primary_entry.is_some_and(|p| !p.slots.is_empty());
            let down = primary_member.is_none_or(|p| !a.reports.contains_key(&p))
                || primary_entry.is_some_and(|p| p.is_failing());
            let primary_leaving = primary_member.is_none_or(|p| !a.is_desired(p));
            if serves && (down || primary_leaving) {
                continue;
            }
        }
        // Unreachable and unknown: it may be a primary whose slots we cannot see as
        // its own; only allow when no unclaimed node serves slots at its address.
        if entry.is_none() {
            let addr = m.addr;
            let hidden_owner = view.is_some_and(|v| {
                v.nodes().iter().any(|n| {
                    !n.slots.is_empty()
                        && !a.claimed.contains_key(&n.id)
                        && addr.is_some_and(|ad| ad.matches(n))
                })
            });
            if hidden_owner {
                continue;
            }
        }
        out.push(*r);
    }
    out
}

#[cfg(test)]
mod tests;
