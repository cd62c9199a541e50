//! The planner's plain-data input and output.
//!
//! Nothing here knows Kubernetes: the operator (and the `plan` command) turn Nodes,
//! Pods and a ValkeyCluster into a [`Problem`], and a [`Plan`] back into pod
//! scheduling rules and status. The JSON shape of [`Plan`] is a public contract
//! (`valkey-operator plan --output json`); a test pins it.

use serde::Serialize;
use std::collections::BTreeMap;

/// Index of a shard, 0-based.
pub type ShardIndex = u32;
/// Index of a member within its shard, 0-based; member 0 is the primary at creation.
pub type MemberIndex = u32;

/// `kubernetes.io/hostname`, the key `node` resolves to.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
/// `topology.kubernetes.io/zone`, the key `zone` resolves to.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`, the key `region` resolves to.
pub const REGION_KEY: &str = "topology.kubernetes.io/region";

/// Whether a spread constraint must hold or is kept where possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Mode {
    Preferred,
    Required,
}

/// One replicaSpreadConstraint with its key already resolved (`zone` ->
/// `topology.kubernetes.io/zone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadConstraint {
    pub topology_key: String,
    /// The most members of one shard (primary and replicas together) per domain; >= 1.
    pub max_replicas: u32,
    pub mode: Mode,
}

/// Resource amounts in the units the planner compares: millicores, bytes, pod count.
/// `None` in a request means "not requested" (does not limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
}

/// What a node can hold, and what the pods that are not members of this cluster
/// already take of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub pods: u64,
}

/// Taint effects, as Kubernetes names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

/// A pod toleration, with Kubernetes matching rules: an empty key with Exists
/// tolerates everything; no effect matches every effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    pub key: Option<String>,
    pub operator: TolerationOperator,
    pub value: Option<String>,
    pub effect: Option<TaintEffect>,
}

/// A node as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The Ready condition is True.
    pub ready: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    pub taints: Vec<Taint>,
    pub allocatable: Capacity,
    /// Summed requests of the pods on this node that are not members of this
    /// cluster and not Succeeded or Failed (`pods` = how many such pods).
    pub used_by_others: Capacity,
}

/// A member of this cluster that runs now (its pod is bound to `node`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningMember {
    pub shard: ShardIndex,
    pub member: MemberIndex,
    pub node: String,
}

/// Everything the planner needs. Same input, same plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub cluster: String,
    pub shards: u32,
    /// Replicas per shard: a shard has `replicas + 1` members.
    pub replicas: u32,
    pub constraints: Vec<SpreadConstraint>,
    pub nodes: Vec<NodeInfo>,
    pub running: Vec<RunningMember>,
    /// Requests of one member (`spec.resources.requests`).
    pub request: Resources,
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    /// The live primary of each shard when known (after a failover it may not be
    /// member 0); shards absent here have member 0 as primary.
    pub primaries: BTreeMap<ShardIndex, MemberIndex>,
}

/// A member with the node it is planned on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlacedMember {
    pub shard: ShardIndex,
    pub member: MemberIndex,
    pub node: String,
    pub primary: bool,
    /// A running member planned onto another node.
    pub moved: bool,
    /// The domain of the node for every constraint's resolved key; `None`
    /// (JSON null) when the node lacks a Preferred constraint's key.
    pub domains: BTreeMap<String, Option<String>>,
}

/// A member that cannot be placed without breaking a Required constraint or for
/// lack of room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnplacedMember {
    pub shard: ShardIndex,
    pub member: MemberIndex,
    /// Plain words naming the constraint or the lack of room.
    pub reason: String,
}

/// A Preferred constraint that the plan exceeds in one domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    pub shard: ShardIndex,
    pub topology_key: String,
    pub domain: Option<String>,
    pub members: u32,
    pub max_replicas: u32,
    pub mode: Mode,
}

/// The planner's answer. Every member appears once, in `members` or `unplaced`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub cluster: String,
    /// Nothing is unplaced.
    pub feasible: bool,
    pub members: Vec<PlacedMember>,
    pub unplaced: Vec<UnplacedMember>,
    pub violations: Vec<Violation>,
}
