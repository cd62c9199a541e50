//! The cluster's health as the operator's conditions need it: Ready when all 16384
//! slots are served, every shard has its primary and its desired replicas connected
//! and in sync, and all views agree; otherwise the named issues, each Degraded
//! (availability or redundancy is reduced) or Progressing (the cluster is converging).

use super::analysis::Analysis;
use super::{PlanError, PlannerOptions, ReplicaSync};
use crate::model::{DesiredCluster, MemberRef, ObservedCluster, ShardIndex};
use crate::parse::NodeId;
use crate::slots::{self, SlotSet};
use serde::Serialize;
use std::collections::BTreeMap;

/// How bad an issue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Severity {
    /// The cluster is converging; nothing is lost or at risk.
    Progressing,
    /// Slots are unserved, a shard lacks its primary, or copies are missing.
    Degraded,
}

/// One thing that keeps the cluster from Ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum HealthIssue {
    /// Slots no reachable primary serves (unassigned, or their primary is down).
    SlotsUncovered { count: u32 },
    /// A desired shard without a reachable primary serving its slots.
    ShardWithoutPrimary { shard: ShardIndex },
    /// A desired member that does not answer.
    MemberUnreachable { member: MemberRef },
    /// A desired replica that does not follow its shard's primary.
    ReplicaMissing { member: MemberRef },
    /// A desired replica that follows its primary but is not in sync.
    ReplicaNotInSync {
        member: MemberRef,
        sync: ReplicaSync,
    },
    /// The members' views of slots and roles differ.
    ViewsDisagree { members: Vec<MemberRef> },
    /// A slot migration is running.
    SlotMigrationInProgress { members: Vec<MemberRef> },
    /// Node ids in the views that no member claims (to be forgotten).
    StaleNodes { node_ids: Vec<NodeId> },
    /// Shards are further than one slot from even (or removed shards hold slots).
    SlotsUnbalanced,
    /// Members outside the desired topology are still running.
    LeavingMembers { members: Vec<MemberRef> },
    /// A desired member has not joined the cluster yet.
    MemberNotJoined { member: MemberRef },
    /// The live primary is not the desired one.
    PrimaryNotPreferred { shard: ShardIndex },
    /// Members whose CLUSTER INFO says `cluster_state:fail`: they refuse queries.
    ClusterStateFail { members: Vec<MemberRef> },
}

impl HealthIssue {
    /// A stable CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            HealthIssue::SlotsUncovered { .. } => "SlotsUncovered",
            HealthIssue::ShardWithoutPrimary { .. } => "ShardWithoutPrimary",
            HealthIssue::MemberUnreachable { .. } => "MemberUnreachable",
            HealthIssue::ReplicaMissing { .. } => "ReplicaMissing",
            HealthIssue::ReplicaNotInSync { .. } => "ReplicaNotInSync",
            HealthIssue::ViewsDisagree { .. } => "ViewsDisagree",
            HealthIssue::SlotMigrationInProgress { .. } => "SlotMigrationInProgress",
            HealthIssue::StaleNodes { .. } => "StaleNodes",
            HealthIssue::SlotsUnbalanced => "SlotsUnbalanced",
            HealthIssue::LeavingMembers { .. } => "LeavingMembers",
            HealthIssue::MemberNotJoined { .. } => "MemberNotJoined",
            HealthIssue::PrimaryNotPreferred { .. } => "PrimaryNotPreferred",
            HealthIssue::ClusterStateFail { .. } => "ClusterStateFail",
        }
    }

    /// Degraded or merely Progressing.
    pub fn severity(&self) -> Severity {
        match self {
            HealthIssue::SlotsUncovered { .. }
            | HealthIssue::ShardWithoutPrimary { .. }
            | HealthIssue::MemberUnreachable { .. }
            | HealthIssue::ReplicaMissing { .. }
            | HealthIssue::ReplicaNotInSync { .. }
            | HealthIssue::ClusterStateFail { .. } => Severity::Degraded,
            _ => Severity::Progressing,
        }
    }
}

impl std::fmt::Display for HealthIssue {
    /// The issue in words, for condition messages and events.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HealthIssue::SlotsUncovered { count } => write!(f, "{count} slot(s) not served"),
            HealthIssue::ShardWithoutPrimary { shard } => {
                write!(
                    f,
                    "shard {shard} has no reachable primary serving its slots"
                )
            }
            HealthIssue::MemberUnreachable { member } => write!(f, "{member} does not answer"),
            HealthIssue::ReplicaMissing { member } => {
                write!(f, "{member} does not follow its shard's primary")
            }
            HealthIssue::ReplicaNotInSync { member, sync } => {
                write!(f, "{member} is not in sync with its primary ({sync:?})")
            }
            HealthIssue::ViewsDisagree { members } => {
                write!(f, "cluster views differ on {} member(s)", members.len())
            }
            HealthIssue::SlotMigrationInProgress { members } => {
                write!(f, "slot migration running on {} member(s)", members.len())
            }
            HealthIssue::StaleNodes { node_ids } => {
                write!(f, "{} departed node id(s) still known", node_ids.len())
            }
            HealthIssue::SlotsUnbalanced => write!(f, "slots are not balanced over the shards"),
            HealthIssue::LeavingMembers { members } => {
                write!(f, "{} member(s) leaving", members.len())
            }
            HealthIssue::MemberNotJoined { member } => {
                write!(f, "{member} has not joined the cluster")
            }
            HealthIssue::PrimaryNotPreferred { shard } => {
                write!(f, "shard {shard}: the primary is not the preferred member")
            }
            HealthIssue::ClusterStateFail { members } => write!(
                f,
                "{} member(s) report cluster_state:fail and refuse queries",
                members.len()
            ),
        }
    }
}

/// The summary: empty `issues` means Ready.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Health {
    pub issues: Vec<HealthIssue>,
    /// Shards with their primary and every desired replica in sync.
    pub ready_shards: u32,
}

impl Health {
    /// No issue at all.
    pub fn is_ready(&self) -> bool {
        self.issues.is_empty()
    }

    /// Some issue reduces availability or redundancy.
    pub fn is_degraded(&self) -> bool {
        self.issues
            .iter()
            .any(|i| i.severity() == Severity::Degraded)
    }

    /// The reason of the first of the most severe issues, for a condition's
    /// `reason` field.
    pub fn first_reason(&self) -> Option<&'static str> {
        let worst = self.issues.iter().map(HealthIssue::severity).max()?;
        self.issues
            .iter()
            .find(|i| i.severity() == worst)
            .map(HealthIssue::reason)
    }
}

/// The health of the observed cluster against the desired topology.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn health(
    desired: &DesiredCluster,
    observed: &ObservedCluster,
    opts: &PlannerOptions,
) -> Result<Health, PlanError> {
    let a = Analysis::new(desired, observed, opts)?;
    let mut issues = Vec::new();
    let shards = a.shards();
    let view = a.anchor_view();

    // Slots served by a reachable, non-failing primary.
    let served = view
        .map(|v| {
            v.nodes()
                .iter()
                .filter(|n| !n.flags.handshake && !n.is_failing())
                .filter(|n| {
                    a.claimed
                        .get(&n.id)
                        .is_some_and(|r| a.reports.contains_key(r))
                })
                .fold(SlotSet::new(), |acc, n| acc.union(&n.slots))
        })
        .unwrap_or_default();
    if !served.is_full() {
        issues.push(HealthIssue::SlotsUncovered {
            count: served.complement().len(),
        });
    }

    for (r, m) in &a.observed {
        if a.is_desired(*r) && m.report().is_none() {
            issues.push(HealthIssue::MemberUnreachable { member: *r });
        }
    }
    for r in a.reports.keys() {
        if a.is_desired(*r) && !a.joined.contains(r) {
            issues.push(HealthIssue::MemberNotJoined { member: *r });
        }
    }
    let failing: Vec<MemberRef> = a
        .reports
        .iter()
        .filter(|(r, rep)| a.is_desired(**r) && !rep.cluster_state_ok)
        .map(|(r, _)| *r)
        .collect();
    if !failing.is_empty() {
        issues.push(HealthIssue::ClusterStateFail { members: failing });
    }

    let mut ready_shards = 0;
    for (index, d) in &a.desired_shards {
        let Some(s) = shards.get(index) else { continue };
        let primary = s
            .primary
            .filter(|p| !s.slots.is_empty() && a.reports.contains_key(p) && !s.conflicting())
            .filter(|p| a.anchor_entry(*p).is_some_and(|n| !n.is_failing()));
        let Some(primary) = primary else {
            issues.push(HealthIssue::ShardWithoutPrimary { shard: *index });
            continue;
        };
        let mut shard_ok = true;
        for m in &d.members {
            let r = MemberRef {
                shard: *index,
                member: m.index,
            };
            if r == primary {
                continue;
            }
            match a.sync_of(primary, r) {
                ReplicaSync::InSync { .. } => {}
                ReplicaSync::NotReplicating => {
                    shard_ok = false;
                    issues.push(HealthIssue::ReplicaMissing { member: r });
                }
                other => {
                    shard_ok = false;
                    issues.push(HealthIssue::ReplicaNotInSync {
                        member: r,
                        sync: other,
                    });
                }
            }
        }
        if d.primary.is_some_and(|p| p != primary.member) {
            issues.push(HealthIssue::PrimaryNotPreferred { shard: *index });
        }
        if shard_ok {
            ready_shards += 1;
        }
    }

    if !a.agreed() {
        issues.push(HealthIssue::ViewsDisagree {
            members: a.disagreeing.clone(),
        });
    }
    if !a.migrating.is_empty() {
        issues.push(HealthIssue::SlotMigrationInProgress {
            members: a.migrating.clone(),
        });
    }

    let mut stale: Vec<NodeId> = a
        .joined
        .iter()
        .filter_map(|r| a.reports.get(r))
        .flat_map(|rep| rep.nodes.nodes().iter())
        .filter(|n| !n.flags.handshake && !a.claimed.contains_key(&n.id))
        .map(|n| n.id.clone())
        .collect();
    stale.sort();
    stale.dedup();
    if !stale.is_empty() {
        issues.push(HealthIssue::StaleNodes { node_ids: stale });
    }

    // Balance over the desired shards, with removed shards' slots counted as
    // misplaced.
    let current: BTreeMap<ShardIndex, SlotSet> = shards
        .values()
        .filter(|s| !s.slots.is_empty())
        .map(|s| (s.index, s.slots.clone()))
        .collect();
    let keep: Vec<ShardIndex> = a.desired_shards.keys().copied().collect();
    // A restore keeps the slots where the backup had them until it is done.
    if a.desired.restore.is_none()
        && let Ok(moves) = slots::rebalance(&current, &keep)
        && !moves.is_empty()
    {
        issues.push(HealthIssue::SlotsUnbalanced);
    }

    let leaving: Vec<MemberRef> = a
        .observed
        .keys()
        .filter(|r| !a.is_desired(**r))
        .copied()
        .collect();
    if !leaving.is_empty() {
        issues.push(HealthIssue::LeavingMembers { members: leaving });
    }

    Ok(Health {
        issues,
        ready_shards,
    })
}
