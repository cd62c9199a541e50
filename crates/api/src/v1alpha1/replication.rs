//! `ValkeyReplication`: Valkey without cluster mode, one primary and its
//! replicas, placed by the same planner as a cluster's shard and failed over
//! by the operator.
//!
//! Its fields mean what the same fields of `ValkeyCluster` mean; validation
//! reads the spec as a one-shard cluster ([`ValkeyReplicationSpec::as_cluster_spec`])
//! so that every rule is the cluster's, then marks the result
//! [`SetKind::Replication`](super::validation::SetKind).

use super::defaults;
use super::rules::cel;
use super::spec::{
    Auth, ExternalAccess, ImagePullPolicy, MemberNetworkPolicy, Module, Persistence,
    PodDisruptionBudget, PodTemplateOverlay, ReplicaSpreadConstraint, RestoreSpec, Scheduling, Tls,
    User, ValkeyClusterSpec,
};
use k8s_openapi::api::core::v1::{
    LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One Valkey primary and its replicas (no cluster mode): Service `<name>`
/// reaches the primary, `<name>-ro` the replicas in sync.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    attr = "x_kube(crates(kube_core = \"::kube_core\"))"
)]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyReplication",
    plural = "valkeyreplications",
    namespaced,
    status = "ValkeyReplicationStatus",
    shortname = "vkr",
    category = "valkey",
    derive = "PartialEq",
    doc = "One Valkey primary with its replicas (no cluster mode), managed by valkey-operator.",
    // `kubectl scale vkr NAME --replicas=N` sets the replicas besides the primary.
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.readyReplicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Whether the primary serves and every replica is in sync",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Primary",
        type_ = "string",
        description = "The primary's pod",
        json_path = ".status.primary"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        description = "Replicas besides the primary asked for",
        json_path = ".spec.replicas"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new(cel::REPLICATION_NAME).message(cel::REPLICATION_NAME_MESSAGE),
)]
#[x_kube(
    validation = Rule::new(cel::PERSISTENCE_FIXED)
        .message(cel::PERSISTENCE_FIXED_MESSAGE)
        .field_path(".persistence")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(cel::RESTORE_FIXED)
        .message(cel::RESTORE_FIXED_MESSAGE)
        .field_path(".restore")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(cel::TLS_FIXED)
        .message(cel::TLS_FIXED_MESSAGE)
        .field_path(".tls.enabled")
        .reason(Reason::FieldValueForbidden),
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyReplicationSpec {
    /// Replicas besides the primary, 0 to 15. Changing it adds or removes
    /// replicas (never the primary).
    #[serde(default = "defaults::replicas")]
    #[schemars(range(min = 0, max = 15))]
    pub replicas: i32,

    /// The zone (`topology.kubernetes.io/zone`) the primary is preferred in:
    /// at bootstrap and at each failover, among the members that may become
    /// primary, one in this zone is chosen first. Unset: no preference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub primary_zone: Option<String>,

    /// The Valkey image, as for a ValkeyCluster (9.0 or newer).
    #[serde(default = "defaults::image")]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// When the kubelet pulls the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,

    /// Secrets to pull the image with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// CPU and memory of the Valkey container, as for a ValkeyCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub resources: Option<ResourceRequirements>,

    /// valkey.conf keys, as for a ValkeyCluster (the operator owns
    /// `replicaof` and the keys it owns there).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "cel::config_schema")]
    pub config: BTreeMap<String, String>,

    /// A volume per member for its data, as for a ValkeyCluster. Fixed at
    /// creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<Persistence>,

    /// Node selector, tolerations, affinity and priority class of the members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Scheduling>,

    /// At most `maxReplicas` members of the set (the primary counts) in one
    /// domain of `topologyKey`, decided before the pods are scheduled, as
    /// for one shard of a ValkeyCluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[x_kube(validation = Rule::new(cel::spread_unique()).message(cel::SPREAD_UNIQUE_MESSAGE))]
    pub replica_spread_constraints: Vec<ReplicaSpreadConstraint>,

    /// The password of the default user (Secret `<name>-auth`, key `password`,
    /// when no Secret is named), as for a ValkeyCluster.
    #[serde(default)]
    pub auth: Auth,

    /// TLS for clients and replication (not yet supported for a
    /// ValkeyReplication: refused when enabled).
    #[serde(default)]
    pub tls: Tls,

    /// ACL users (not yet supported for a ValkeyReplication: refused when set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub users: Vec<User>,

    /// A PodDisruptionBudget over the members: at most one down at a time.
    #[serde(default)]
    pub pod_disruption_budget: PodDisruptionBudget,

    /// Seconds a member pod has to shut down.
    #[serde(default = "defaults::termination_grace_period_seconds")]
    #[schemars(range(min = 15))]
    pub termination_grace_period_seconds: i64,

    /// Labels added to every member pod (not `valkey.rs/` ones).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(cel::POD_LABELS_NOT_OWNED)
        .message(cel::POD_LABELS_NOT_OWNED_MESSAGE)
        .reason(Reason::FieldValueForbidden))]
    pub pod_labels: BTreeMap<String, String>,

    /// Annotations added to every member pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,

    /// Access from outside Kubernetes (not yet supported for a
    /// ValkeyReplication: refused when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access: Option<ExternalAccess>,

    /// The member pods' security context, over the restricted defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub pod_security_context: Option<PodSecurityContext>,

    /// The Valkey container's security context, over the restricted defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub security_context: Option<SecurityContext>,

    /// The NetworkPolicy over the members, as for a ValkeyCluster.
    #[serde(default)]
    pub network_policy: MemberNetworkPolicy,

    /// Where a new set's data comes from (not yet supported for a
    /// ValkeyReplication: refused when set). Fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,

    /// A pod template overlay merged into every member pod, as for a
    /// ValkeyCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateOverlay>,

    /// Valkey modules loaded by every member at start, as for a ValkeyCluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(cel::MODULES_UNIQUE).message(cel::MODULES_UNIQUE_MESSAGE))]
    pub modules: Vec<Module>,
}

impl Default for ValkeyReplicationSpec {
    fn default() -> Self {
        ValkeyReplicationSpec {
            replicas: defaults::replicas(),
            primary_zone: None,
            image: defaults::image(),
            image_pull_policy: None,
            image_pull_secrets: Vec::new(),
            resources: None,
            config: BTreeMap::new(),
            persistence: None,
            scheduling: None,
            replica_spread_constraints: Vec::new(),
            auth: Auth::default(),
            tls: Tls::default(),
            users: Vec::new(),
            pod_disruption_budget: PodDisruptionBudget::default(),
            termination_grace_period_seconds: defaults::termination_grace_period_seconds(),
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
            external_access: None,
            pod_security_context: None,
            security_context: None,
            network_policy: MemberNetworkPolicy::default(),
            restore: None,
            pod_template: None,
            modules: Vec::new(),
        }
    }
}

impl ValkeyReplicationSpec {
    /// The same request as one shard of a ValkeyCluster: every field with
    /// the same meaning, one shard of `replicas + 1` members.
    pub fn as_cluster_spec(&self) -> ValkeyClusterSpec {
        ValkeyClusterSpec {
            shards: 1,
            replicas: self.replicas,
            image: self.image.clone(),
            image_pull_policy: self.image_pull_policy,
            image_pull_secrets: self.image_pull_secrets.clone(),
            resources: self.resources.clone(),
            config: self.config.clone(),
            persistence: self.persistence.clone(),
            scheduling: self.scheduling.clone(),
            replica_spread_constraints: self.replica_spread_constraints.clone(),
            auth: self.auth.clone(),
            tls: self.tls.clone(),
            users: self.users.clone(),
            pod_disruption_budget: self.pod_disruption_budget.clone(),
            termination_grace_period_seconds: self.termination_grace_period_seconds,
            pod_labels: self.pod_labels.clone(),
            pod_annotations: self.pod_annotations.clone(),
            external_access: self.external_access.clone(),
            pod_security_context: self.pod_security_context.clone(),
            security_context: self.security_context.clone(),
            network_policy: self.network_policy.clone(),
            restore: self.restore.clone(),
            pod_template: self.pod_template.clone(),
            modules: self.modules.clone(),
            ..ValkeyClusterSpec::default()
        }
    }
}

/// Observed state of a ValkeyReplication.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ValkeyReplicationStatus {
    /// The metadata.generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Progressing, Degraded and TopologySpread, each with a reason
    /// and a message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,

    /// The primary's pod (the one pod labelled `valkey.rs/role=primary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,

    /// Replicas in sync with the primary (the scale subresource's count).
    #[serde(default)]
    pub ready_replicas: i32,

    /// Per member: its pod, role, node and zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ReplicationMemberStatus>,

    /// The label selector of the member pods
    /// (`valkey.rs/replication=<name>,valkey.rs/member`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// The last action the operator took, e.g. `failover to member 2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,

    /// A human-readable summary of the set's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One member of a ValkeyReplication as the operator last saw it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationMemberStatus {
    /// The pod's name.
    pub name: String,
    /// Member index, 0-based.
    pub member: i32,
    /// `primary` or `replica` (absent while the member is neither: starting,
    /// unreachable, or not in sync yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Node the pod runs on (absent while Pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The node's topology.kubernetes.io/zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The pod's IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The pod is Ready and the member serves in its role (a replica: in
    /// sync with the primary).
    #[serde(default)]
    pub ready: bool,
    /// The member's replication offset, as it last said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// Bytes behind the primary (replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Why the member is not ready, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
