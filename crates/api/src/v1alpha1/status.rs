//! `ValkeyCluster.status`: what the operator observed and did.
//!
//! Written only by the operator (status subresource, one field manager). The
//! condition types and reasons here are a contract for users, alerts and tests.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::KubeSchema;
use serde::{Deserialize, Serialize};

/// Condition type: every shard serves its slots and every member is in sync.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: the operator is carrying out a change (bootstrap, scale,
/// rolling update, heal).
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Condition type: something is wrong that the operator cannot fix by itself
/// right now (invalid spec, member lost, slots uncovered...); the reason names it.
pub const CONDITION_DEGRADED: &str = "Degraded";
/// Condition type: every replicaSpreadConstraint holds (False with the reason
/// when a Required one cannot be met or a Preferred one is exceeded).
pub const CONDITION_TOPOLOGY_SPREAD: &str = "TopologySpread";
/// Condition type: live primaries are spread as primary balancing wants (False
/// while a move is pending or impossible).
pub const CONDITION_PRIMARY_PLACEMENT_ALIGNED: &str = "PrimaryPlacementAligned";

/// Condition type: the `valkey.rs/paused: "true"` annotation is set, and the
/// operator changes nothing (no object, no Valkey command) until it is removed.
pub const CONDITION_PAUSED: &str = "Paused";

/// Condition type: with `spec.restore`, whether the backup's data is in the
/// cluster. False while it is being restored, or while the backup cannot be
/// used (missing, not Completed, another number of shards, a manifest that
/// cannot be read): the reason and message say which, naming the backup.
pub const CONDITION_RESTORED: &str = "Restored";

/// Observed state of a ValkeyCluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ValkeyClusterStatus {
    /// The metadata.generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Progressing, Degraded, TopologySpread and
    /// PrimaryPlacementAligned, each with a reason and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// Shards whose slots are served by a primary with all its replicas in sync.
    #[serde(default)]
    pub ready_shards: i32,

    /// Per shard: its slots and its live primary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardStatus>,

    /// Per member: its pod, node, failure domains, live role and Valkey node id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,

    /// Per shard, where its members run and which one is primary: the live
    /// topology that replicaSpreadConstraints and primary balancing act on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<ShardTopology>,

    /// One line for `kubectl get`, e.g. `3 zones, spread ok` or
    /// `zone: 2 members pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_summary: Option<String>,

    /// The last action the operator took, e.g. `failover shard 1 to member 2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,

    /// The label selector of the member pods (`valkey.rs/cluster=<name>,
    /// valkey.rs/member`), in the string form the scale subresource's
    /// labelSelectorPath names, so that a HorizontalPodAutoscaler can read
    /// the members' metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// A human-readable summary of the cluster's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// With `spec.restore`: where the data came from and whether it is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreStatus>,
}

/// A restore from a backup, as recorded when the first member was made: the
/// location is copied from the ValkeyBackup so that the members' pods are
/// built the same while the restore runs, even if the backup changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// The ValkeyBackup restored from.
    pub backup: String,
    /// The S3 endpoint, bucket, region and credentials Secret of the backup.
    pub endpoint: String,
    pub bucket: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    pub credentials_secret: String,
    /// The backup's folder in the bucket (`<prefix>/<namespace>/<name>`).
    pub folder: String,
    /// Per shard (by index), the slot ranges it held in the backup, e.g.
    /// `0-5460`.
    #[serde(default)]
    pub shard_slots: Vec<String>,
    /// True once the cluster was Ready with the backup's data: members made
    /// later start empty and sync from their primary, as in any cluster.
    #[serde(default)]
    pub done: bool,
}

/// One shard's slots and primary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// Shard index, 0-based.
    pub index: i32,
    /// Slot ranges the shard owns, e.g. `0-5460` or `0-100,200-300`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<String>,
    /// Member index of the live primary, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<i32>,
}

/// One member as the operator last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Shard index.
    pub shard: i32,
    /// Member index within the shard.
    pub member: i32,
    /// Pod name.
    pub pod: String,
    /// Node the pod runs on (absent while Pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The node's topology.kubernetes.io/zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The node's topology.kubernetes.io/region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Live Valkey role: primary or replica (absent when unreachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Valkey cluster node id (40 hex characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Ids this member had before `nodeId` (a member without persistence
    /// restarts as a new node), kept until no member's view lists them: the
    /// operator forgets them everywhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub former_node_ids: Vec<String>,
    /// The pod is Ready and the member is part of the cluster and in sync.
    #[serde(default)]
    pub ready: bool,
    /// Pod IP the member announces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The Valkey version the member runs (`valkey_version` of INFO server;
    /// absent when unreachable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The modules the member loaded, as MODULE LIST names them (Valkey's
    /// built-in ones, such as `lua`, included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<String>,
    /// Why a module of `spec.modules` is not loaded on this member: the
    /// server's own words when it refused to start (`Module ... failed to
    /// load: ...`), or the modules MODULE LIST lacks. A rolling update stops
    /// at such a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module_error: Option<String>,
    /// With `spec.externalAccess`: the `host:port` the member announces to
    /// clients outside Kubernetes (empty until known, e.g. while the load
    /// balancer has not assigned an address).
    #[serde(default)]
    pub external_address: String,
}

/// Where one shard's members run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardTopology {
    /// Shard index.
    pub shard: i32,
    /// The shard's members, by member index.
    #[serde(default)]
    pub members: Vec<TopologyMember>,
}

/// One member's place in the topology.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyMember {
    /// Member index within the shard.
    pub member: i32,
    /// Node name (absent while unplaced or Pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The node's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The node's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Live role: primary or replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

impl ValkeyClusterStatus {
    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}
