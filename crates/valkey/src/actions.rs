//! What the planner can ask for: admin commands ([`Action`]), reasons to hold back
//! ([`Wait`]), and the [`Plan`] that carries both.
//!
//! Every action names the member it is sent to (`on`); the operator holds one
//! connection per member and hands it to [`crate::client::execute`]. The actions of
//! one plan never depend on each other's success, so they can all be sent, in order,
//! and a failure of one leaves the others valid; the next reconcile starts again
//! from what the members then say.

use crate::model::{MemberRef, ShardIndex};
use crate::parse::NodeId;
use crate::slots::SlotSet;
use serde::Serialize;
use std::fmt;
use std::net::IpAddr;

/// How CLUSTER FAILOVER is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FailoverMode {
    /// Graceful: the primary pauses writes, the replica catches up, then wins a vote.
    /// No acknowledged write is lost. The only mode the planner itself uses.
    Default,
    /// The primary is unreachable; still needs a majority vote.
    Force,
    /// No vote at all: only when the majority of primaries is lost.
    Takeover,
}

/// How CLUSTER RESET is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ResetMode {
    /// Forget every other node and become an empty primary; keep the node id.
    Soft,
    /// As soft, and take a new node id and reset the epochs.
    Hard,
}

/// One admin command for one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Action {
    /// CLUSTER MEET ip port bus_port, sent to `on`: `on` starts a handshake with the
    /// member at that address.
    Meet {
        on: MemberRef,
        ip: IpAddr,
        port: u16,
        bus_port: u16,
    },
    /// CLUSTER ADDSLOTSRANGE for slots no node serves.
    AddSlotsRange { on: MemberRef, ranges: SlotSet },
    /// CLUSTER REPLICATE primary_id: `on` (empty, without slots) follows that primary.
    Replicate { on: MemberRef, primary_id: NodeId },
    /// CLUSTER FORGET node_id. The planner sends it to every member that knows the
    /// node in the same plan, so all forget it inside the 60 s ban window.
    Forget { on: MemberRef, node_id: NodeId },
    /// CLUSTER FAILOVER, sent to the replica that should become primary.
    Failover { on: MemberRef, mode: FailoverMode },
    /// CLUSTER MIGRATESLOTS SLOTSRANGE ... NODE target_id, sent to the source primary
    /// (Valkey 9 atomic slot migration).
    MigrateSlots {
        on: MemberRef,
        ranges: SlotSet,
        target_id: NodeId,
    },
    /// CLUSTER RESET: only for an empty member that carries a view of another cluster.
    ResetNode { on: MemberRef, mode: ResetMode },
    /// CLUSTER BUMPEPOCH, sent to a primary whose replica's change of role another
    /// member missed: the primary takes a new highest config epoch, which its
    /// replica's messages then carry (see the planner's `stale_roles`).
    BumpEpoch { on: MemberRef },
    /// CONFIG SET key value.
    ConfigSet {
        on: MemberRef,
        key: String,
        value: String,
    },
}

impl Action {
    /// The member the command is sent to.
    pub fn on(&self) -> MemberRef {
        match self {
            Action::Meet { on, .. }
            | Action::AddSlotsRange { on, .. }
            | Action::Replicate { on, .. }
            | Action::Forget { on, .. }
            | Action::Failover { on, .. }
            | Action::MigrateSlots { on, .. }
            | Action::ResetNode { on, .. }
            | Action::BumpEpoch { on }
            | Action::ConfigSet { on, .. } => *on,
        }
    }

    /// A stable name for metrics and events.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Meet { .. } => "Meet",
            Action::AddSlotsRange { .. } => "AddSlotsRange",
            Action::Replicate { .. } => "Replicate",
            Action::Forget { .. } => "Forget",
            Action::Failover { .. } => "Failover",
            Action::MigrateSlots { .. } => "MigrateSlots",
            Action::ResetNode { .. } => "ResetNode",
            Action::BumpEpoch { .. } => "BumpEpoch",
            Action::ConfigSet { .. } => "ConfigSet",
        }
    }

    /// The order actions of one plan are sent in: membership first (so later plans
    /// see the members), then slots, replication, settings, and the moves last.
    pub(crate) fn rank(&self) -> u8 {
        match self {
            Action::ResetNode { .. } => 0,
            Action::Forget { .. } => 1,
            Action::Meet { .. } => 2,
            Action::AddSlotsRange { .. } => 3,
            Action::Replicate { .. } => 4,
            Action::BumpEpoch { .. } => 5,
            Action::ConfigSet { .. } => 6,
            Action::Failover { .. } => 7,
            Action::MigrateSlots { .. } => 8,
        }
    }
}

impl fmt::Display for Action {
    /// The command as a person reads it in an event: `CLUSTER MEET 10.0.0.7 6379
    /// 16379 on shard 1 member 0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Meet {
                on,
                ip,
                port,
                bus_port,
            } => write!(f, "CLUSTER MEET {ip} {port} {bus_port} on {on}"),
            Action::AddSlotsRange { on, ranges } => {
                write!(f, "CLUSTER ADDSLOTSRANGE {ranges} on {on}")
            }
            Action::Replicate { on, primary_id } => {
                write!(f, "CLUSTER REPLICATE {primary_id} on {on}")
            }
            Action::Forget { on, node_id } => write!(f, "CLUSTER FORGET {node_id} on {on}"),
            Action::Failover { on, mode } => match mode {
                FailoverMode::Default => write!(f, "CLUSTER FAILOVER on {on}"),
                FailoverMode::Force => write!(f, "CLUSTER FAILOVER FORCE on {on}"),
                FailoverMode::Takeover => write!(f, "CLUSTER FAILOVER TAKEOVER on {on}"),
            },
            Action::MigrateSlots {
                on,
                ranges,
                target_id,
            } => write!(f, "CLUSTER MIGRATESLOTS {ranges} NODE {target_id} on {on}"),
            Action::ResetNode { on, mode } => match mode {
                ResetMode::Soft => write!(f, "CLUSTER RESET SOFT on {on}"),
                ResetMode::Hard => write!(f, "CLUSTER RESET HARD on {on}"),
            },
            Action::BumpEpoch { on } => write!(f, "CLUSTER BUMPEPOCH on {on}"),
            Action::ConfigSet { on, key, value } => write!(f, "CONFIG SET {key} {value} on {on}"),
        }
    }
}

/// Why the planner holds back part of the work. Reasons marked *blocked* need a
/// person (or a change of the desired topology); the others clear by themselves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Wait {
    /// The member does not answer.
    MemberUnreachable { member: MemberRef },
    /// A CLUSTER MEET handshake with the member is under way.
    WaitingForMeet { member: MemberRef },
    /// The member does not know `node_id` yet (gossip spreads it in a few seconds).
    WaitingForGossip { member: MemberRef, node_id: NodeId },
    /// The members' views of slots and roles differ (gossip or an epoch update is
    /// still spreading); nothing that depends on slot ownership is done meanwhile.
    WaitingForViewsToAgree { members: Vec<MemberRef> },
    /// The replica is not yet in sync with its primary.
    WaitingForSync {
        shard: ShardIndex,
        member: MemberRef,
    },
    /// A CLUSTER MIGRATESLOTS job (or a legacy SETSLOT migration) is running.
    WaitingForSlotMigration { member: MemberRef },
    /// A node that no member claims is not marked failed yet; it is forgotten once
    /// the cluster agrees it is gone.
    WaitingForFailureDetection { node_id: NodeId },
    /// The shard's primary is down; Valkey's own failover should promote a replica.
    WaitingForFailover { shard: ShardIndex },
    /// Replicas still follow a node that should be forgotten.
    WaitingForReplicasToMove { node_id: NodeId },
    /// The shard's first member (its primary-to-be) is not up, so slots and
    /// replication for the shard wait.
    WaitingForPrimary { shard: ShardIndex },
    /// The new shard's replicas are not attached yet; slots move in after them.
    WaitingForReplicas { shard: ShardIndex },
    /// The shard's members do not run their own settings yet (the client
    /// address they announce, their zone); slots move in after.
    WaitingForSettings { shard: ShardIndex },
    /// The shard is held back ([`crate::model::DesiredShard::hold_slots`]):
    /// a member's client address is not known yet.
    WaitingForClientAddress { shard: ShardIndex },
    /// Blocked: two members of one shard serve slots.
    ConflictingPrimaries {
        shard: ShardIndex,
        members: Vec<MemberRef>,
    },
    /// Blocked: the member holds data or slots of a cluster this one does not know.
    SeparateCluster { member: MemberRef },
    /// Blocked: the member is a primary without slots that still holds keys, so it
    /// cannot become a replica without losing them.
    MemberHoldsKeys { member: MemberRef },
    /// Blocked: a node no member claims serves slots; forgetting it would drop them.
    OrphanOwnsSlots { node_id: NodeId, slots: SlotSet },
    /// Blocked: the live primary must move (it is leaving) but no replica of the
    /// shard could take over.
    NoInSyncReplica { shard: ShardIndex },
    /// Blocked: the member the shard should start on is a replica of another shard.
    PrimaryCandidateIsReplica { member: MemberRef },
}

impl Wait {
    /// A stable CamelCase reason for conditions, events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Wait::MemberUnreachable { .. } => "MemberUnreachable",
            Wait::WaitingForMeet { .. } => "WaitingForMeet",
            Wait::WaitingForGossip { .. } => "WaitingForGossip",
            Wait::WaitingForViewsToAgree { .. } => "WaitingForViewsToAgree",
            Wait::WaitingForSync { .. } => "WaitingForSync",
            Wait::WaitingForSlotMigration { .. } => "WaitingForSlotMigration",
            Wait::WaitingForFailureDetection { .. } => "WaitingForFailureDetection",
            Wait::WaitingForFailover { .. } => "WaitingForFailover",
            Wait::WaitingForReplicasToMove { .. } => "WaitingForReplicasToMove",
            Wait::WaitingForPrimary { .. } => "WaitingForPrimary",
            Wait::WaitingForReplicas { .. } => "WaitingForReplicas",
            Wait::WaitingForSettings { .. } => "WaitingForSettings",
            Wait::WaitingForClientAddress { .. } => "WaitingForClientAddress",
            Wait::ConflictingPrimaries { .. } => "ConflictingPrimaries",
            Wait::SeparateCluster { .. } => "SeparateCluster",
            Wait::MemberHoldsKeys { .. } => "MemberHoldsKeys",
            Wait::OrphanOwnsSlots { .. } => "OrphanOwnsSlots",
            Wait::NoInSyncReplica { .. } => "NoInSyncReplica",
            Wait::PrimaryCandidateIsReplica { .. } => "PrimaryCandidateIsReplica",
        }
    }

    /// Whether only a person (or a new desired topology) can clear it.
    pub fn is_blocked(&self) -> bool {
        matches!(
            self,
            Wait::ConflictingPrimaries { .. }
                | Wait::SeparateCluster { .. }
                | Wait::MemberHoldsKeys { .. }
                | Wait::OrphanOwnsSlots { .. }
                | Wait::NoInSyncReplica { .. }
                | Wait::PrimaryCandidateIsReplica { .. }
        )
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::MemberUnreachable { member } => write!(f, "{member} does not answer"),
            Wait::WaitingForMeet { member } => write!(f, "handshake with {member} under way"),
            Wait::WaitingForGossip { member, node_id } => {
                write!(f, "{member} does not know node {} yet", node_id.short())
            }
            Wait::WaitingForViewsToAgree { members } => {
                write!(f, "cluster views differ on {} member(s)", members.len())?;
                if let Some(first) = members.first() {
                    write!(f, " (first: {first})")?;
                }
                Ok(())
            }
            Wait::WaitingForSync { shard, member } => {
                write!(f, "shard {shard}: {member} is not in sync with its primary")
            }
            Wait::WaitingForSlotMigration { member } => {
                write!(f, "slot migration running on {member}")
            }
            Wait::WaitingForFailureDetection { node_id } => write!(
                f,
                "node {} is claimed by no member but not marked failed yet",
                node_id.short()
            ),
            Wait::WaitingForFailover { shard } => {
                write!(
                    f,
                    "shard {shard}: primary is down, waiting for Valkey to promote a replica"
                )
            }
            Wait::WaitingForReplicasToMove { node_id } => {
                write!(f, "replicas still follow node {}", node_id.short())
            }
            Wait::WaitingForPrimary { shard } => {
                write!(f, "shard {shard}: its first member is not up yet")
            }
            Wait::WaitingForReplicas { shard } => {
                write!(f, "shard {shard}: replicas not attached yet")
            }
            Wait::WaitingForSettings { shard } => {
                write!(f, "shard {shard}: members do not run their settings yet")
            }
            Wait::WaitingForClientAddress { shard } => write!(
                f,
                "shard {shard}: a member's client address is not known yet"
            ),
            Wait::ConflictingPrimaries { shard, members } => {
                write!(f, "shard {shard}: {} members serve slots", members.len())
            }
            Wait::SeparateCluster { member } => write!(
                f,
                "{member} holds data or slots of another cluster; it needs a person"
            ),
            Wait::MemberHoldsKeys { member } => write!(
                f,
                "{member} is a primary without slots holding keys; it cannot become a replica"
            ),
            Wait::OrphanOwnsSlots { node_id, slots } => write!(
                f,
                "node {} serves slots {slots} but no member claims it",
                node_id.short()
            ),
            Wait::NoInSyncReplica { shard } => {
                write!(
                    f,
                    "shard {shard}: primary must move but no replica can take over"
                )
            }
            Wait::PrimaryCandidateIsReplica { member } => {
                write!(
                    f,
                    "{member} should start its shard but replicates another shard"
                )
            }
        }
    }
}

/// The planner's answer: what to send now, what it waits for, and which leaving
/// members may now be deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Commands to send now, in order.
    pub actions: Vec<Action>,
    /// Why some work is held back (deduplicated, in the order found).
    pub waiting: Vec<Wait>,
    /// Members that are not in the desired topology and are safe to delete now: no
    /// slots, not followed by a desired replica, not a needed copy.
    pub removable: Vec<MemberRef>,
}

impl Plan {
    /// Nothing to do and nothing to wait for.
    pub fn is_converged(&self) -> bool {
        self.actions.is_empty() && self.waiting.is_empty() && self.removable.is_empty()
    }

    /// Whether some wait needs a person.
    pub fn is_blocked(&self) -> bool {
        self.waiting.iter().any(Wait::is_blocked)
    }

    pub(crate) fn wait(&mut self, wait: Wait) {
        if !self.waiting.contains(&wait) {
            self.waiting.push(wait);
        }
    }
}
