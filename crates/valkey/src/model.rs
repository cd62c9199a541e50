//! The cluster as plain data: the topology the operator wants ([`DesiredCluster`])
//! and what every member says right now ([`ObservedCluster`]).
//!
//! Members are named the way the operator names them, `(shard, member)`, never by
//! Valkey node id: node ids are what members *report*, and they change when a member
//! loses its nodes.conf. The planner ties the two together.

use crate::parse::{ClusterNode, ClusterNodes, NodeId, ReplicationInfo, Role, SlotMigration};
use crate::slots::SlotSet;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

/// Index of a shard, 0-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ShardIndex(pub u32);

/// Which member of a shard.
///
/// Ordered members first, then new copies (the planner lists the spec's
/// members before the copies of moves in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum MemberIndex {
    /// Member `m` of the spec, 0-based; member 0 is the primary at creation.
    Member(u32),
    /// The new copy of member `m` while the operator moves it. It is a
    /// desired replica like any other to the planner (met, attached to the
    /// primary, failed over to when asked), and the operator swaps it in for
    /// member `m` once it is in sync.
    NewCopyOf(u32),
}

impl MemberIndex {
    /// The member this index is the new copy of, when it is one.
    pub fn new_copy_of(self) -> Option<u32> {
        match self {
            MemberIndex::NewCopyOf(m) => Some(m),
            MemberIndex::Member(_) => None,
        }
    }
}

impl fmt::Display for ShardIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for MemberIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberIndex::Member(m) => write!(f, "{m}"),
            MemberIndex::NewCopyOf(m) => write!(f, "{m} (new copy)"),
        }
    }
}

/// One member of the cluster, as the operator names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MemberRef {
    pub shard: ShardIndex,
    pub member: MemberIndex,
}

impl MemberRef {
    /// Member `member` of shard `shard`.
    pub fn new(shard: u32, member: u32) -> MemberRef {
        MemberRef {
            shard: ShardIndex(shard),
            member: MemberIndex::Member(member),
        }
    }
}

impl fmt::Display for MemberRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shard {} member {}", self.shard, self.member)
    }
}

/// Where a member listens: its IP, client port and cluster bus port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct MemberAddr {
    pub ip: IpAddr,
    pub port: u16,
    pub bus_port: u16,
}

impl MemberAddr {
    /// An address with the default bus port, `port + 10000` (6379 -> 16379);
    /// `None` when that overflows.
    pub fn with_default_bus(ip: IpAddr, port: u16) -> Option<MemberAddr> {
        port.checked_add(10000)
            .map(|bus_port| MemberAddr { ip, port, bus_port })
    }

    /// Whether a CLUSTER NODES entry is announced at this address.
    pub fn matches(&self, node: &ClusterNode) -> bool {
        node.is_at(self.ip, self.port)
    }
}

impl fmt::Display for MemberAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}:{}", self.port),
            IpAddr::V6(ip) => write!(f, "[{ip}]:{}", self.port),
        }
    }
}

/// The topology the operator wants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DesiredCluster {
    pub shards: Vec<DesiredShard>,
    /// Settings every member should have live (CONFIG SET), e.g. `maxmemory-policy`.
    /// Values are compared as text with what CONFIG GET returns, so give them in the
    /// form Valkey prints (bytes as plain numbers, `yes`/`no`).
    pub config: BTreeMap<String, String>,
    /// A cluster being restored from a backup: per shard, the slots it held in
    /// the backup. Each shard's first member starts holding that shard's keys
    /// and, as Valkey does on start with keys in slots nobody owns, serving the
    /// slots of its keys. While set, the planner meets such members like fresh
    /// ones, waits for every desired member to join before it attaches
    /// replicas or adds slots, adds each slot nobody serves to the shard that
    /// held it, and moves no slot. `None`: no restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<BTreeMap<ShardIndex, SlotSet>>,
}

impl DesiredCluster {
    /// Every setting key the topology sets, cluster-wide or per member: the keys to
    /// CONFIG GET when observing (see [`crate::client::observe_cluster`]), so the
    /// planner can tell which differ.
    pub fn config_keys(&self) -> Vec<String> {
        let mut keys: std::collections::BTreeSet<&String> = self.config.keys().collect();
        for shard in &self.shards {
            for member in &shard.members {
                keys.extend(member.config.keys());
            }
        }
        keys.into_iter().cloned().collect()
    }
}

/// One shard of the desired topology. Its slots are not given: the planner keeps all
/// 16384 slots spread over the desired shards within one slot of even, moving as few
/// as it can.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DesiredShard {
    pub index: ShardIndex,
    /// The members the shard should consist of.
    pub members: Vec<DesiredMember>,
    /// The member that should be the primary. `None` keeps whichever member is the
    /// live primary (and starts a fresh shard on the first of `failover_preference`,
    /// else the first member). `Some` moves the primary there with a graceful
    /// failover once that member is an in-sync replica.
    pub primary: Option<MemberIndex>,
    /// When the planner itself must pick a replica to promote (the live primary is
    /// leaving the shard), the order to try in-sync replicas in; the operator orders
    /// them by topology. Members not listed come after, in member order.
    pub failover_preference: Vec<MemberIndex>,
    /// No slot migrates into the shard while set (slots nobody serves are
    /// still added): the operator holds a new shard back while a member's
    /// client address is not known yet (an external address not assigned),
    /// so that no client is sent where it cannot follow.
    pub hold_slots: bool,
}

impl DesiredShard {
    /// A shard of members `0..members` with no primary preference.
    pub fn with_members(index: u32, members: u32) -> DesiredShard {
        DesiredShard {
            index: ShardIndex(index),
            members: (0..members)
                .map(|m| DesiredMember {
                    index: MemberIndex::Member(m),
                    config: BTreeMap::new(),
                })
                .collect(),
            primary: None,
            failover_preference: Vec::new(),
            hold_slots: false,
        }
    }

    /// Whether `member` belongs to this shard.
    pub fn has_member(&self, member: MemberIndex) -> bool {
        self.members.iter().any(|m| m.index == member)
    }

    /// The order to consider members for promotion: the desired primary, then
    /// `failover_preference`, then the rest in member order.
    pub fn promotion_order(&self) -> Vec<MemberIndex> {
        let mut order: Vec<MemberIndex> = Vec::new();
        let listed = self
            .primary
            .iter()
            .chain(self.failover_preference.iter())
            .copied()
            .chain(self.members.iter().map(|m| m.index));
        for m in listed {
            if self.has_member(m) && !order.contains(&m) {
                order.push(m);
            }
        }
        order
    }
}

/// One member of a desired shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DesiredMember {
    pub index: MemberIndex,
    /// Settings for this member only, over the cluster's (e.g. `availability-zone`).
    pub config: BTreeMap<String, String>,
}

/// What every member of the cluster says, as the operator collected it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ObservedCluster {
    /// Every member the operator runs, desired or leaving (a member of a removed
    /// shard, or above the replica count, stays here until its pod is gone).
    pub members: Vec<ObservedMember>,
}

/// One member as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObservedMember {
    pub member: MemberRef,
    /// The member's current address (the pod IP, which changes when the pod is
    /// re-created). `None` when it has none yet (pod not scheduled).
    pub addr: Option<MemberAddr>,
    /// The node id the operator recorded for this member before (in status). When
    /// the member now reports another id, its old id belongs to a node that is gone
    /// for good (its nodes.conf is lost), so the planner may forget it.
    pub known_node_id: Option<NodeId>,
    /// Ids this member had before `known_node_id` (each lost with its
    /// nodes.conf), kept in status until no view lists them: gone for good,
    /// so the planner may forget them however many reconciles that takes.
    pub former_node_ids: Vec<NodeId>,
    pub state: MemberState,
}

/// Whether the member answered, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum MemberState {
    /// Could not be asked (no address, connection refused, timed out, loading...).
    Unreachable {
        reason: String,
    },
    Reachable(Box<NodeReport>),
}

/// What a reachable member says about itself and the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeReport {
    /// Its CLUSTER NODES view (its own id is on the `myself` line).
    pub nodes: ClusterNodes,
    pub replication: ReplicationInfo,
    /// Its CLUSTER GETSLOTMIGRATIONS jobs (finished ones included).
    pub slot_migrations: Vec<SlotMigration>,
    /// Keys in every database (INFO keyspace).
    pub keys: u64,
    /// CONFIG GET of the keys the desired topology sets.
    pub config: BTreeMap<String, String>,
    /// `cluster_state:ok` in CLUSTER INFO: the node serves queries. Valkey keeps a
    /// node in `fail` for a while after it starts or after slots change hands, and
    /// clients get CLUSTERDOWN meanwhile.
    pub cluster_state_ok: bool,
    /// The Valkey version it runs (`valkey_version` of INFO server), when it
    /// says one.
    pub version: Option<String>,
    /// The modules it loaded (MODULE LIST names), sorted; empty when it
    /// could not say.
    pub modules: Vec<String>,
}

impl NodeReport {
    /// The member's own node id.
    pub fn node_id(&self) -> &NodeId {
        &self.nodes.myself().id
    }

    /// The role the member reports for itself in INFO replication.
    pub fn role(&self) -> Role {
        self.replication.role
    }
}

impl ObservedMember {
    /// The report when reachable.
    pub fn report(&self) -> Option<&NodeReport> {
        match &self.state {
            MemberState::Reachable(report) => Some(report),
            MemberState::Unreachable { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_order_puts_the_desired_primary_then_the_preference_first() {
        let mut shard = DesiredShard::with_members(0, 4);
        shard.primary = Some(MemberIndex::Member(2));
        shard.failover_preference = vec![
            MemberIndex::Member(3),
            MemberIndex::Member(9),
            MemberIndex::Member(2),
        ];
        assert_eq!(
            shard.promotion_order(),
            vec![
                MemberIndex::Member(2),
                MemberIndex::Member(3),
                MemberIndex::Member(0),
                MemberIndex::Member(1)
            ]
        );
    }

    #[test]
    fn config_keys_include_member_settings() {
        let mut desired = DesiredCluster {
            restore: None,
            shards: vec![DesiredShard::with_members(0, 2)],
            config: [("maxmemory-policy".to_string(), "noeviction".to_string())]
                .into_iter()
                .collect(),
        };
        desired.shards[0].members[1]
            .config
            .insert("availability-zone".into(), "b".into());
        assert_eq!(
            desired.config_keys(),
            vec!["availability-zone", "maxmemory-policy"]
        );
    }

    #[test]
    fn a_members_new_copy_has_its_own_index_and_says_whose_it_is() {
        let new_copy = MemberIndex::NewCopyOf(2);
        assert_eq!(new_copy.new_copy_of(), Some(2));
        assert_eq!(MemberIndex::Member(2).new_copy_of(), None);
        assert!(MemberIndex::Member(u32::MAX) < new_copy);
        let r = MemberRef {
            shard: ShardIndex(1),
            member: new_copy,
        };
        assert_eq!(r.to_string(), "shard 1 member 2 (new copy)");
        assert_eq!(MemberRef::new(1, 2).to_string(), "shard 1 member 2");
    }

    #[test]
    fn default_bus_port_is_ten_thousand_above() {
        let addr = MemberAddr::with_default_bus("10.0.0.1".parse().unwrap(), 6379).unwrap();
        assert_eq!(addr.bus_port, 16379);
        assert!(MemberAddr::with_default_bus("10.0.0.1".parse().unwrap(), 60000).is_none());
        let v6 = MemberAddr::with_default_bus("fd00::1".parse().unwrap(), 6379).unwrap();
        assert_eq!(v6.to_string(), "[fd00::1]:6379");
    }
}
