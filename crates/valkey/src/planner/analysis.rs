//! Reading the observed cluster once: who is who (node id <-> member), which view is
//! the reference (the anchor), who has joined it, whether the views agree, and per
//! shard who serves the slots.

use super::{PlanError, PlannerOptions};
use crate::model::{
    DesiredCluster, DesiredShard, MemberAddr, MemberRef, NodeReport, ObservedCluster,
    ObservedMember, ShardIndex,
};
use crate::parse::{ClusterNode, ClusterNodes, NodeId, Role, SlotMarker};
use crate::slots::SlotSet;
use std::collections::{BTreeMap, BTreeSet};

/// How a view sees the cluster's members, for comparing views.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Digest {
    /// Every non-handshake node serving slots.
    owners: BTreeMap<NodeId, SlotSet>,
    /// For every joined member's id: `None` when a primary, `Some(p)` when it
    /// replicates p. A joined member missing from the view is absent here.
    roles: BTreeMap<NodeId, Option<NodeId>>,
}

fn digest(view: &ClusterNodes, ids: &BTreeSet<NodeId>) -> Digest {
    let owners = view.slot_owners();
    let roles = ids
        .iter()
        .filter_map(|id| view.get(id).map(|n| (id.clone(), role_key(n))))
        .collect();
    Digest { owners, roles }
}

fn role_key(node: &ClusterNode) -> Option<NodeId> {
    match node.role() {
        Some(Role::Replica) => node.primary_id.clone(),
        _ => None,
    }
}

/// Per shard: who serves its slots and who its primary is (or will be).
#[derive(Debug, Clone)]
pub(crate) struct ShardState<'a> {
    pub index: ShardIndex,
    pub desired: Option<&'a DesiredShard>,
    /// Members of the shard (in the anchor's view) that serve slots, with their slots.
    pub owners: Vec<(MemberRef, SlotSet)>,
    /// The live primary (the one owner), or for a shard without slots the member it
    /// runs on (a primary that shard members follow, or the first of its promotion
    /// order once up and joined).
    pub primary: Option<MemberRef>,
    /// All slots the shard serves.
    pub slots: SlotSet,
    /// Set when the primary-to-be is not usable yet (or is a replica of elsewhere).
    pub primary_blocker: Option<crate::actions::Wait>,
}

impl ShardState<'_> {
    /// Whether two members serve slots.
    pub fn conflicting(&self) -> bool {
        self.owners.len() > 1
    }
}

/// Everything the planner and health read, computed once.
pub(crate) struct Analysis<'a> {
    pub desired: &'a DesiredCluster,
    pub opts: &'a PlannerOptions,
    pub desired_shards: BTreeMap<ShardIndex, &'a DesiredShard>,
    pub desired_refs: BTreeSet<MemberRef>,
    pub observed: BTreeMap<MemberRef, &'a ObservedMember>,
    /// Reachable members' reports.
    pub reports: BTreeMap<MemberRef, &'a NodeReport>,
    /// Reachable members' own node ids.
    pub ids: BTreeMap<MemberRef, NodeId>,
    /// Node id -> member: reachable members' ids and unreachable members' known ids.
    pub claimed: BTreeMap<NodeId, MemberRef>,
    /// Ids that members used to have and no longer do: gone for good.
    pub replaced: BTreeSet<NodeId>,
    /// The member whose view is the reference.
    pub anchor: Option<MemberRef>,
    /// Members that are part of the anchor's cluster (the anchor included).
    pub joined: BTreeSet<MemberRef>,
    /// Joined members whose view differs from the anchor's.
    pub disagreeing: Vec<MemberRef>,
    /// Members with a running slot migration (atomic or legacy).
    pub migrating: Vec<MemberRef>,
}

impl<'a> Analysis<'a> {
    pub fn new(
        desired: &'a DesiredCluster,
        observed: &'a ObservedCluster,
        opts: &'a PlannerOptions,
    ) -> Result<Analysis<'a>, PlanError> {
        let mut desired_shards = BTreeMap::new();
        let mut desired_refs = BTreeSet::new();
        for shard in &desired.shards {
            if desired_shards.insert(shard.index, shard).is_some() {
                return Err(PlanError::DuplicateShard { shard: shard.index });
            }
            if shard.members.is_empty() {
                return Err(PlanError::EmptyShard { shard: shard.index });
            }
            for m in &shard.members {
                if !desired_refs.insert(MemberRef {
                    shard: shard.index,
                    member: m.index,
                }) {
                    return Err(PlanError::DuplicateMember {
                        member: MemberRef {
                            shard: shard.index,
                            member: m.index,
                        },
                    });
                }
            }
            for named in shard.primary.iter().chain(shard.failover_preference.iter()) {
                if !shard.has_member(*named) {
                    return Err(PlanError::UnknownMember {
                        shard: shard.index,
                        member: *named,
                    });
                }
            }
        }

        let mut by_ref = BTreeMap::new();
        let mut addrs: BTreeMap<MemberAddr, MemberRef> = BTreeMap::new();
        for m in &observed.members {
            if by_ref.insert(m.member, m).is_some() {
                return Err(PlanError::DuplicateObserved { member: m.member });
            }
            if let Some(addr) = m.addr
                && let Some(other) = addrs.insert(addr, m.member)
            {
                return Err(PlanError::SharedAddress {
                    addr,
                    first: other,
                    second: m.member,
                });
            }
        }

        let mut reports = BTreeMap::new();
        let mut ids = BTreeMap::new();
        let mut claimed: BTreeMap<NodeId, MemberRef> = BTreeMap::new();
        let mut replaced = BTreeSet::new();
        for (r, m) in &by_ref {
            if let Some(report) = m.report() {
                let id = report.node_id().clone();
                if let Some(other) = claimed.insert(id.clone(), *r) {
                    return Err(PlanError::SharedNodeId {
                        node_id: id,
                        first: other,
                        second: *r,
                    });
                }
                if let Some(known) = &m.known_node_id
                    && known != &id
                {
                    replaced.insert(known.clone());
                }
                replaced.extend(m.former_node_ids.iter().filter(|f| **f != id).cloned());
                reports.insert(*r, report);
                ids.insert(*r, id);
            }
        }
        // Unreachable members keep their last known id: never forget a node that may
        // come back with it.
        for (r, m) in &by_ref {
            if m.report().is_none()
                && let Some(known) = &m.known_node_id
                && !replaced.contains(known)
            {
                claimed.entry(known.clone()).or_insert(*r);
            }
        }

        let mut analysis = Analysis {
            desired,
            opts,
            desired_shards,
            desired_refs,
            observed: by_ref,
            reports,
            ids,
            claimed,
            replaced,
            anchor: None,
            joined: BTreeSet::new(),
            disagreeing: Vec::new(),
            migrating: Vec::new(),
        };
        analysis.anchor = analysis.pick_anchor();
        analysis.claim_by_address();
        analysis.joined = analysis.find_joined();
        analysis.disagreeing = analysis.find_disagreeing();
        analysis.migrating = analysis.find_migrating();
        Ok(analysis)
    }

    /// The reachable member the others agree on, whose view knows the most: known
    /// by the most other reachable members, then most slots covered, then most
    /// reachable members known, then desired before leaving, then the lowest member.
    ///
    /// Recognition comes first so that a member returning on a retained volume,
    /// whose old nodes.conf still lists everyone while everyone has forgotten it,
    /// is never the reference the others are measured against.
    fn pick_anchor(&self) -> Option<MemberRef> {
        self.reports
            .iter()
            .max_by_key(|(r, report)| {
                let recognised = self.ids.get(r).map_or(0, |me| {
                    self.reports
                        .iter()
                        .filter(|(other, rep)| other != r && rep.nodes.get(me).is_some())
                        .count()
                });
                let covered = report.nodes.covered_slots().len();
                let known = self
                    .ids
                    .values()
                    .filter(|id| report.nodes.get(id).is_some())
                    .count();
                let desired = self.desired_refs.contains(r);
                (recognised, covered, known, desired, std::cmp::Reverse(**r))
            })
            .map(|(r, _)| *r)
    }

    /// An unreachable member without a known id still owns the node the anchor
    /// knows at its address (a restarting process keeps its pod IP): never forget it
    /// or hand its slots to another shard while it may come back.
    fn claim_by_address(&mut self) {
        let Some(view) = self.anchor_view() else {
            return;
        };
        for (r, m) in &self.observed {
            if m.report().is_some() {
                continue;
            }
            let Some(addr) = m.addr else { continue };
            for n in view.nodes() {
                if !n.flags.handshake && addr.matches(n) && !self.replaced.contains(&n.id) {
                    self.claimed.entry(n.id.clone()).or_insert(*r);
                }
            }
        }
    }

    fn find_joined(&self) -> BTreeSet<MemberRef> {
        let mut joined = BTreeSet::new();
        let Some(anchor) = self.anchor else {
            return joined;
        };
        joined.insert(anchor);
        for r in self.reports.keys() {
            if *r != anchor && self.join_state(*r) == JoinState::Joined {
                joined.insert(*r);
            }
        }
        joined
    }

    /// How member `r` stands towards the anchor's cluster.
    pub fn join_state(&self, r: MemberRef) -> JoinState {
        let (Some(anchor), Some(report), Some(id)) =
            (self.anchor, self.reports.get(&r), self.ids.get(&r))
        else {
            return JoinState::Unreachable;
        };
        if anchor == r {
            return JoinState::Joined;
        }
        let (Some(anchor_view), Some(anchor_id)) = (self.anchor_view(), self.ids.get(&anchor))
        else {
            return JoinState::Unreachable;
        };
        let Some(addr) = self.observed.get(&r).and_then(|m| m.addr) else {
            return JoinState::Unreachable;
        };
        let anchor_addr = self.observed.get(&anchor).and_then(|m| m.addr);
        if anchor_view.handshakes().any(|n| addr.matches(n))
            || report
                .nodes
                .handshakes()
                .any(|n| anchor_addr.is_some_and(|a| a.matches(n)))
        {
            return JoinState::Handshaking;
        }
        match (anchor_view.get(id), report.nodes.get(anchor_id)) {
            (Some(me_there), Some(anchor_here)) => {
                if !addr.matches(me_there) {
                    JoinState::AnchorHasOldAddress
                } else if anchor_addr.is_some_and(|a| !a.matches(anchor_here)) {
                    JoinState::MemberHasOldAnchorAddress
                } else {
                    JoinState::Joined
                }
            }
            (Some(me_there), None) => {
                if addr.matches(me_there) {
                    JoinState::MemberForgotAnchor
                } else {
                    JoinState::AnchorHasOldAddress
                }
            }
            (None, _) => JoinState::Unknown,
        }
    }

    fn find_disagreeing(&self) -> Vec<MemberRef> {
        let Some(anchor_view) = self.anchor_view() else {
            return Vec::new();
        };
        let joined_ids: BTreeSet<NodeId> = self
            .joined
            .iter()
            .filter_map(|r| self.ids.get(r).cloned())
            .collect();
        let reference = digest(anchor_view, &joined_ids);
        self.joined
            .iter()
            .filter(|r| {
                self.reports
                    .get(r)
                    .is_some_and(|rep| digest(&rep.nodes, &joined_ids) != reference)
            })
            .copied()
            .collect()
    }

    fn find_migrating(&self) -> Vec<MemberRef> {
        self.reports
            .iter()
            .filter(|(_, rep)| {
                rep.slot_migrations.iter().any(|j| !j.state.is_finished())
                    || rep.nodes.myself().markers.iter().any(|m| {
                        matches!(
                            m,
                            SlotMarker::Migrating { .. } | SlotMarker::Importing { .. }
                        )
                    })
            })
            .map(|(r, _)| *r)
            .collect()
    }

    /// The anchor's CLUSTER NODES view.
    pub fn anchor_view(&self) -> Option<&'a ClusterNodes> {
        self.anchor
            .and_then(|a| self.reports.get(&a))
            .map(|rep| &rep.nodes)
    }

    /// Whether every joined member's view matches the anchor's on slots and roles.
    pub fn agreed(&self) -> bool {
        self.disagreeing.is_empty()
    }

    /// Whether member `r` is wanted.
    pub fn is_desired(&self, r: MemberRef) -> bool {
        self.desired_refs.contains(&r)
    }

    /// The address of member `r`.
    pub fn addr(&self, r: MemberRef) -> Option<MemberAddr> {
        self.observed.get(&r).and_then(|m| m.addr)
    }

    /// The id a member has or had: its own when reachable, else the known one.
    pub fn id_of(&self, r: MemberRef) -> Option<&NodeId> {
        self.ids
            .get(&r)
            .or_else(|| self.observed.get(&r).and_then(|m| m.known_node_id.as_ref()))
    }

    /// The anchor's entry for member `r`.
    pub fn anchor_entry(&self, r: MemberRef) -> Option<&'a ClusterNode> {
        let id = self.id_of(r)?;
        self.anchor_view()?.get(id)
    }

    /// Whether `r` is reachable, joined, and its own line matches the anchor's entry
    /// for it (role, primary, slots): a member whose view of itself is stale is not
    /// acted on.
    pub fn settled(&self, r: MemberRef) -> bool {
        if !self.joined.contains(&r) {
            return false;
        }
        let (Some(rep), Some(entry)) = (self.reports.get(&r), self.anchor_entry(r)) else {
            return false;
        };
        let me = rep.nodes.myself();
        role_key(me) == role_key(entry) && me.role() == entry.role() && me.slots == entry.slots
    }

    /// Slots no node serves, in the anchor's view (all of them without an anchor).
    pub fn unassigned(&self) -> SlotSet {
        self.anchor_view()
            .map(|v| v.covered_slots().complement())
            .unwrap_or_else(SlotSet::full)
    }

    /// Nodes in the anchor's view that serve slots and no member claims.
    pub fn orphan_owners(&self) -> BTreeMap<NodeId, SlotSet> {
        self.anchor_view()
            .map(|v| {
                v.slot_owners()
                    .into_iter()
                    .filter(|(id, _)| !self.claimed.contains_key(id))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Per shard (desired or observed), who serves it.
    pub fn shards(&self) -> BTreeMap<ShardIndex, ShardState<'a>> {
        let mut indices: BTreeSet<ShardIndex> = self.desired_shards.keys().copied().collect();
        indices.extend(self.observed.keys().map(|r| r.shard));
        let owners = self
            .anchor_view()
            .map(|v| v.slot_owners())
            .unwrap_or_default();
        indices
            .into_iter()
            .map(|index| {
                let desired = self.desired_shards.get(&index).copied();
                let mut shard_owners: Vec<(MemberRef, SlotSet)> = owners
                    .iter()
                    .filter_map(|(id, slots)| {
                        self.claimed
                            .get(id)
                            .filter(|r| r.shard == index)
                            .map(|r| (*r, slots.clone()))
                    })
                    .collect();
                shard_owners.sort_by_key(|(r, _)| *r);
                let slots = shard_owners
                    .iter()
                    .fold(SlotSet::new(), |acc, (_, s)| acc.union(s));
                let (primary, primary_blocker) = match shard_owners.as_slice() {
                    [(only, _)] => (Some(*only), None),
                    [] => match desired {
                        Some(d) => self.empty_shard_primary(d),
                        None => (None, None),
                    },
                    _ => (None, None),
                };
                (
                    index,
                    ShardState {
                        index,
                        desired,
                        owners: shard_owners,
                        primary,
                        slots,
                        primary_blocker,
                    },
                )
            })
            .collect()
    }

    /// The primary of a desired shard that serves no slot yet: a joined primary the
    /// shard's members already follow, else the first of its promotion order once it
    /// is up and joined as a primary.
    fn empty_shard_primary(
        &self,
        shard: &DesiredShard,
    ) -> (Option<MemberRef>, Option<crate::actions::Wait>) {
        use crate::actions::Wait;
        let Some(view) = self.anchor_view() else {
            return (None, Some(Wait::WaitingForPrimary { shard: shard.index }));
        };
        let member = |m| MemberRef {
            shard: shard.index,
            member: m,
        };
        // A shard member that is a primary followed by another shard member.
        for d in &shard.members {
            let r = member(d.index);
            if !self.joined.contains(&r) {
                continue;
            }
            let Some(id) = self.ids.get(&r) else { continue };
            let is_primary = view
                .get(id)
                .is_some_and(|n| n.role() == Some(Role::Primary));
            let followed = view.replicas_of(id).any(|n| {
                self.claimed
                    .get(&n.id)
                    .is_some_and(|f| f.shard == shard.index && shard.has_member(f.member))
            });
            if is_primary && followed {
                return (Some(r), None);
            }
        }
        let order = shard.promotion_order();
        let Some(first) = order.first().map(|m| member(*m)) else {
            return (None, Some(Wait::WaitingForPrimary { shard: shard.index }));
        };
        if !self.joined.contains(&first) {
            return (None, Some(Wait::WaitingForPrimary { shard: shard.index }));
        }
        match self.anchor_entry(first).and_then(|n| n.role()) {
            Some(Role::Primary) => (Some(first), None),
            _ => (
                None,
                Some(Wait::PrimaryCandidateIsReplica { member: first }),
            ),
        }
    }

    /// Whether `r` (per the anchor's view) replicates the node `primary`.
    pub fn replicates(&self, r: MemberRef, primary: &NodeId) -> bool {
        self.anchor_entry(r).is_some_and(|n| {
            n.role() == Some(Role::Replica) && n.primary_id.as_ref() == Some(primary)
        })
    }

    /// Whether `replica` is an in-sync replica of `primary` (both reachable).
    pub fn sync_of(&self, primary: MemberRef, replica: MemberRef) -> super::ReplicaSync {
        let (Some(p), Some(r), Some(pid)) = (
            self.reports.get(&primary),
            self.reports.get(&replica),
            self.ids.get(&primary),
        ) else {
            return super::ReplicaSync::NotReplicating;
        };
        // The anchor must also see it following that primary.
        if !self.replicates(replica, pid) {
            return super::ReplicaSync::NotReplicating;
        }
        super::sync_between(p, r, self.opts.max_replica_lag_bytes)
    }
}

/// Where a reachable member stands towards the anchor's cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JoinState {
    Unreachable,
    Joined,
    /// A handshake between it and the anchor is under way.
    Handshaking,
    /// The anchor knows its id at another address (its IP changed).
    AnchorHasOldAddress,
    /// It knows the anchor at another address (the anchor's IP changed).
    MemberHasOldAnchorAddress,
    /// The anchor knows it, it does not know the anchor (it was reset).
    MemberForgotAnchor,
    /// The anchor does not know its id.
    Unknown,
}
