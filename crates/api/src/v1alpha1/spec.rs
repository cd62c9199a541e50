// Over 600 lines: the ValkeyCluster spec types; their doc comments are the CRD's field descriptions.
//! `ValkeyCluster.spec`: what the user asks for.
//!
//! Every field's doc comment becomes its description in the CRD schema, which is
//! what `kubectl explain valkeycluster.spec.<field>` prints: write them for users.
//! Schema bounds and CEL rules sit on the fields; the same rules are checked once
//! more in Rust by [`super::validation`], which is the only reader of this raw
//! spec inside the operator.

use super::defaults;
use super::rules::cel;
use super::status::ValkeyClusterStatus;
use k8s_openapi::api::core::v1::{
    Affinity, Container, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration, Volume,
};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A sharded Valkey cluster: `shards` primaries, each with `replicas` replicas,
/// placed over nodes, zones and regions by `replicaSpreadConstraints`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    attr = "x_kube(crates(kube_core = \"::kube_core\"))"
)]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyCluster",
    namespaced,
    status = "ValkeyClusterStatus",
    shortname = "vkc",
    category = "valkey",
    derive = "PartialEq",
    doc = "A sharded Valkey cluster managed by valkey-operator.",
    // `kubectl scale vkc NAME --replicas=N` sets the number of shards (slots
    // move to or from the new shards); `replicas` per shard is changed in the
    // spec, since one number cannot name both.
    scale(
        spec_replicas_path = ".spec.shards",
        status_replicas_path = ".status.readyShards",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        description = "Whether every shard serves its slots with all its members in sync",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Shards",
        type_ = "integer",
        description = "Shards (primaries) asked for",
        json_path = ".spec.shards"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        description = "Replicas per shard asked for",
        json_path = ".spec.replicas"
    ),
    printcolumn(
        name = "Topology",
        type_ = "string",
        description = "How the members are spread over the topology",
        json_path = ".status.topologySummary"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new(cel::CLUSTER_NAME).message(cel::CLUSTER_NAME_MESSAGE),
)]
#[x_kube(
    validation = Rule::new(cel::PERSISTENCE_FIXED)
        .message(cel::PERSISTENCE_FIXED_MESSAGE)
        .field_path(".persistence")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(cel::members_bounded()).message(cel::MEMBERS_BOUNDED_MESSAGE),
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
pub struct ValkeyClusterSpec {
    /// Number of shards: each shard is one primary with its replicas and owns an
    /// even share of the 16384 hash slots. 1 to 16384, and the cluster has at
    /// most 1000 members: shards * (replicas + 1) <= 1000. Changing it scales
    /// the cluster out or in, moving slots with Valkey's atomic slot migration.
    #[serde(default = "defaults::shards")]
    #[schemars(range(min = 1, max = 16384))]
    pub shards: i32,

    /// Replicas per shard: a shard has `replicas + 1` members (member 0 is the
    /// primary at creation). 0 (no redundancy) to 15, and shards * (replicas +
    /// 1) at most 1000.
    #[serde(default = "defaults::replicas")]
    #[schemars(range(min = 0, max = 15))]
    pub replicas: i32,

    /// Container image of Valkey (version 9 or later: the operator relies on
    /// atomic slot migration and `shutdown-on-sigterm failover`). Changing it
    /// rolls the members one at a time, replicas first.
    #[serde(default = "defaults::image")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = Rule::new(cel::IMAGE_SUPPORTED)
        .message(cel::IMAGE_SUPPORTED_MESSAGE)
        .reason(Reason::FieldValueInvalid))]
    pub image: String,

    /// When the kubelet pulls the image: Always, IfNotPresent or Never.
    /// Kubernetes' default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,

    /// Secrets for pulling the image from a private registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// CPU and memory of each member's Valkey container. The placement planner
    /// counts `requests` (or `limits` where no request is given) against each
    /// node's allocatable room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub resources: Option<ResourceRequirements>,

    /// Extra valkey.conf directives, e.g. `maxmemory-policy: allkeys-lru`.
    /// Keys the operator owns are refused: cluster mode and its files,
    /// cluster-node-timeout, cluster-announce-*, cluster-port, port, bind, dir,
    /// requirepass, masterauth/primaryauth, masteruser/primaryuser, aclfile,
    /// cluster-allow-replica-migration, shutdown-on-sigterm, availability-zone,
    /// daemonize, include, unixsocket*, loadmodule, enable-module-command,
    /// enable-debug-command, enable-protected-configs, and the other keys
    /// listed in the operator's documentation. Values are strings: quote
    /// `"yes"`, `"no"`, `"on"`, `"off"` and numbers in YAML, or the API server
    /// refuses them as booleans or numbers. Keys Valkey can change live are
    /// applied with CONFIG SET, the others by a rolling restart.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "cel::config_schema")]
    pub config: BTreeMap<String, String>,

    /// Give each member a PersistentVolumeClaim for its data and nodes.conf.
    /// Without it, data lives in an emptyDir and a re-created pod starts empty
    /// (its shard's primary reseeds it). Can only be set at creation: it cannot
    /// be added or removed later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<Persistence>,

    /// Where member pods may run, on top of the placement the operator plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Scheduling>,

    /// How the members of one shard (its primary and replicas) are spread over
    /// failure domains: at most `maxReplicas` members of a shard per domain of
    /// `topologyKey`. The operator plans every member's node before its pod is
    /// scheduled and gives the pod rules that make the scheduler keep the plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    // No FieldValueDuplicate reason: the API server drops the message for it.
    #[x_kube(validation = Rule::new(cel::spread_unique()).message(cel::SPREAD_UNIQUE_MESSAGE))]
    pub replica_spread_constraints: Vec<ReplicaSpreadConstraint>,

    /// Keeps live primaries spread over the topology: after failovers, the
    /// operator moves primaries back with graceful failovers.
    #[serde(default)]
    pub primary_balancing: PrimaryBalancing,

    /// Password authentication for clients and between members.
    #[serde(default)]
    pub auth: Auth,

    /// TLS for clients, replication and the cluster bus. When enabled, members
    /// listen for TLS on 6379 and plaintext nowhere; clients find the CA in
    /// the Secret `<cluster>-tls-ca` (key `ca.crt`) when the operator issues
    /// the certificates, else in the Secret `secretName` names.
    #[serde(default)]
    pub tls: Tls,

    /// Valkey ACL users for applications, besides `default` (whose password
    /// is `auth`). The operator owns the users of the members: a user not
    /// listed here is deleted, except its own system users
    /// (`valkey-replication`, which replicas log in with, and
    /// `valkey-operator`, which the operator logs in with). Applied live on
    /// every member, no restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub users: Vec<User>,

    /// PodDisruptionBudgets that keep voluntary disruptions (drains, evictions)
    /// from taking two members of one shard at once.
    #[serde(default)]
    pub pod_disruption_budget: PodDisruptionBudget,

    /// Seconds a member pod gets to stop. On SIGTERM a primary hands its slots
    /// to an in-sync replica first (up to 10 s of shutdown-timeout plus the
    /// failover), so at least 15.
    #[serde(default = "defaults::termination_grace_period_seconds")]
    #[schemars(range(min = 15))]
    pub termination_grace_period_seconds: i64,

    /// Extra labels on member pods. Keys under `valkey.rs/` belong to the
    /// operator and are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(cel::POD_LABELS_NOT_OWNED)
        .message(cel::POD_LABELS_NOT_OWNED_MESSAGE)
        .reason(Reason::FieldValueForbidden))]
    pub pod_labels: BTreeMap<String, String>,

    /// Extra annotations on member pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,

    /// The Service clients connect to (any member redirects to the right shard).
    #[serde(default)]
    pub client_service: ClientService,

    /// Access from outside Kubernetes: one Service of this type per member,
    /// and every member announces that Service's address to clients
    /// (`cluster-announce-client-ipv4` and the client port), so a cluster
    /// client seeded with any external address follows MOVED and ASK to
    /// addresses it can reach. The cluster bus stays on pod IPs. Absent: off
    /// (members announce their pod IPs). May be turned on and off on a live
    /// cluster; `status.members[].externalAddress` says what each member
    /// announces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_access: Option<ExternalAccess>,

    /// Security context of member pods. By default members pass the
    /// `restricted` Pod Security profile: runAsNonRoot as uid and gid 999 (the
    /// official image's `valkey` user), fsGroup 999 so Valkey can write its
    /// volumes, seccomp RuntimeDefault. Every field set here replaces the
    /// operator's value of that field; the others keep the defaults. A change
    /// rolls the members one at a time. The result must stay within the
    /// `restricted` profile (no runAsNonRoot false, runAsUser 0, Unconfined
    /// seccomp or AppArmor, custom SELinux user, role or type, unsafe
    /// sysctls, or Windows hostProcess) unless the operator runs with
    /// --allow-privileged-security-context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub pod_security_context: Option<PodSecurityContext>,

    /// Security context of the Valkey container. By default no privilege
    /// escalation, every capability dropped and a read-only root filesystem
    /// (Valkey writes only to /data). Every field set here replaces the
    /// operator's value of that field; the others keep the defaults. The
    /// result must stay within the `restricted` profile (not privileged, no
    /// privilege escalation, capabilities dropping ALL and adding at most
    /// NET_BIND_SERVICE, procMount Default, and the pod-level limits above)
    /// unless the operator runs with --allow-privileged-security-context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub security_context: Option<SecurityContext>,

    /// A Prometheus exporter beside Valkey in every member pod (off unless
    /// `enabled: true`): the container `exporter` runs the operator's own
    /// image (`valkey-operator exporter`) and serves the member's INFO and
    /// CLUSTER INFO as `valkey_*` metrics on port `metrics` (9121), path
    /// `/metrics`. It has no probes, but a pod is Ready only while every
    /// container runs: the nodes must be able to pull the operator's image.
    /// Turning it on or off, or changing its resources, rolls the members one
    /// at a time (replicas first, primaries after a failover).
    #[serde(default)]
    pub exporter: Exporter,

    /// A NetworkPolicy `<cluster>-members` over the member pods: the client
    /// port (6379) from `clientsFrom` (every source when empty), the client
    /// port and the cluster bus (16379) from the cluster's own members, the
    /// client port from the operator's pods, the exporter's port (9121) from
    /// `metricsFrom` (every source when empty). It admits nothing else. It
    /// changes no pod, so turning it on or off restarts no member.
    #[serde(default)]
    pub network_policy: MemberNetworkPolicy,

    /// Start the cluster from a backup: `{backup: <ValkeyBackup name>}`, a
    /// Completed ValkeyBackup in this namespace with as many shards as
    /// `shards`. Each shard's first member loads its shard's RDB before it
    /// serves, the slots are assigned as the backup's manifest says, the
    /// replicas sync from it. Until the backup is usable no member is made
    /// and the condition `Restored` says why. Fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,

    /// A pod template overlay, merged into every member pod the way
    /// `kubectl` merges a strategic-merge patch: labels and annotations are
    /// added; `containers` merge by name (`valkey` is the operator's
    /// container: its env, volumeMounts, resources and the like are merged
    /// into it; any other name is a sidecar); `initContainers` and `volumes`
    /// are added. What the operator owns cannot be overridden: `valkey.rs/`
    /// labels and annotations, its volumes (config, users, tls, data), its
    /// ports (6379, 16379, 9121), the `valkey` container's command, args,
    /// image, ports, probes and security context, and the `exporter`
    /// container. Sidecars and init containers get the restricted security
    /// context (no privilege escalation, every capability dropped, non-root)
    /// unless they set their own, which must stay within it unless the
    /// operator runs with --allow-privileged-security-context. Their
    /// resource requests count in placement. A change rolls the members one
    /// at a time, primaries after a failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateOverlay>,

    /// Valkey modules loaded by every member at start (`loadmodule` lines in
    /// the config the operator renders; `loadmodule` in `spec.config` is
    /// refused). The file must be in the Valkey container: in its image
    /// (valkey-bundle keeps its modules in `/usr/lib/valkey/`) or in a volume
    /// of `spec.podTemplate` an init container fills. A change rolls the
    /// members; a member whose module does not load does not start, is
    /// reported with the reason, and the roll stops there. What each member
    /// loaded (MODULE LIST) is in `status.members[].modules`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(cel::MODULES_UNIQUE).message(cel::MODULES_UNIQUE_MESSAGE))]
    pub modules: Vec<Module>,
}

/// Where a new cluster's data comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// Name of a ValkeyBackup in this namespace.
    #[schemars(length(min = 1, max = 253))]
    pub backup: String,
}

/// A Valkey module every member loads at start.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct Module {
    /// The module's name, as MODULE LIST reports it (the name the module
    /// gives itself, e.g. `json`, `bf`, `search`): the operator checks that
    /// every member loaded it.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new(cel::MODULE_NAME).message(cel::MODULE_NAME_MESSAGE))]
    pub name: String,

    /// Absolute path of the module's shared object inside the Valkey
    /// container, e.g. `/usr/lib/valkey/libjson.so`.
    #[schemars(length(min = 2, max = 1024))]
    #[x_kube(validation = Rule::new(cel::MODULE_PATH).message(cel::MODULE_PATH_MESSAGE))]
    pub path: String,

    /// Arguments passed to the module at load, one word each (no spaces,
    /// quotes or control characters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 256)))]
    #[x_kube(validation = Rule::new(cel::MODULE_ARGS).message(cel::MODULE_ARGS_MESSAGE))]
    pub args: Vec<String>,
}

/// `spec.podTemplate`: what is merged into every member pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateOverlay {
    /// Labels and annotations added to member pods.
    #[serde(default, skip_serializing_if = "PodTemplateMetadata::is_empty")]
    pub metadata: PodTemplateMetadata,

    /// What is merged into the member pods' spec.
    #[serde(default, skip_serializing_if = "PodSpecOverlay::is_empty")]
    pub spec: PodSpecOverlay,
}

/// Labels and annotations of the pod template overlay.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateMetadata {
    /// Labels added to member pods. Keys under `valkey.rs/` belong to the
    /// operator and are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(cel::POD_LABELS_NOT_OWNED)
        .message(cel::POD_LABELS_NOT_OWNED_MESSAGE)
        .reason(Reason::FieldValueForbidden))]
    pub labels: BTreeMap<String, String>,

    /// Annotations added to member pods. Keys under `valkey.rs/` belong to
    /// the operator and are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(cel::POD_ANNOTATIONS_NOT_OWNED)
        .message(cel::POD_ANNOTATIONS_NOT_OWNED_MESSAGE)
        .reason(Reason::FieldValueForbidden))]
    pub annotations: BTreeMap<String, String>,
}

impl PodTemplateMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The pod spec fields the overlay may set. Other pod settings have their
/// own fields (`spec.scheduling`, `spec.podSecurityContext`,
/// `spec.terminationGracePeriodSeconds`, `spec.imagePullSecrets`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct PodSpecOverlay {
    /// Init containers, run in order before the members' containers, after
    /// none of the operator's (it has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(cel::INIT_CONTAINERS_NOT_OWNED)
            .message(cel::INIT_CONTAINERS_NOT_OWNED_MESSAGE)
            .reason(Reason::FieldValueForbidden),
    )]
    #[schemars(transform = super::schema::upstream_docs)]
    pub init_containers: Vec<Container>,

    /// Containers merged by name: `valkey` merges into the operator's Valkey
    /// container (env and volumeMounts by name, resources, and the other
    /// fields it does not own); any other name is a sidecar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(cel::VALKEY_COMMAND_NOT_OWNED)
            .message(cel::VALKEY_COMMAND_NOT_OWNED_MESSAGE)
            .reason(Reason::FieldValueForbidden),
        validation = Rule::new(cel::VALKEY_FIELDS_NOT_OWNED)
            .message(cel::VALKEY_FIELDS_NOT_OWNED_MESSAGE)
            .reason(Reason::FieldValueForbidden),
        validation = Rule::new(cel::EXPORTER_NOT_OWNED)
            .message(cel::EXPORTER_NOT_OWNED_MESSAGE)
            .reason(Reason::FieldValueForbidden),
    )]
    #[schemars(transform = super::schema::upstream_docs)]
    pub containers: Vec<Container>,

    /// Volumes added to member pods (the operator's own, `config`, `users`,
    /// `tls` and `data`, cannot be replaced), of the types the `restricted`
    /// Pod Security Standard allows: configMap, csi, downwardAPI, emptyDir,
    /// ephemeral, persistentVolumeClaim, projected, secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(
        validation = Rule::new(cel::VOLUMES_NOT_OWNED)
            .message(cel::VOLUMES_NOT_OWNED_MESSAGE)
            .reason(Reason::FieldValueForbidden),
        validation = Rule::new(cel::VOLUME_TYPES_RESTRICTED)
            .message(cel::VOLUME_TYPES_RESTRICTED_MESSAGE)
            .reason(Reason::FieldValueForbidden),
    )]
    #[schemars(transform = super::schema::upstream_docs)]
    pub volumes: Vec<Volume>,

    /// Tolerations added to those of `spec.scheduling` (the placement
    /// planner counts both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub tolerations: Vec<Toleration>,

    /// Node labels added to `spec.scheduling.nodeSelector` (a key set in
    /// both must have the same value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// PriorityClass of member pods (as `spec.scheduling.priorityClassName`;
    /// set one of the two, or the same in both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

impl PodSpecOverlay {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The members' NetworkPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberNetworkPolicy {
    /// Keep the NetworkPolicy `<cluster>-members` (true) or none (false).
    /// When unset, the operator's default: the Helm chart's
    /// `networkPolicy.members` (`valkey-operator run --member-network-policy`),
    /// on unless turned off there. Without it (and without `tls`) the cluster
    /// bus is open to any pod that reaches it: the bus has no authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,

    /// Who may connect to the client port, as NetworkPolicy peers (pod and
    /// namespace selectors, IP blocks). Empty: any source. The cluster's own
    /// members and the operator may always.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(transform = super::schema::upstream_docs)]
    pub clients_from: Vec<NetworkPolicyPeer>,

    /// Who may scrape the exporter's port (`spec.exporter`), likewise. Empty:
    /// any source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(transform = super::schema::upstream_docs)]
    pub metrics_from: Vec<NetworkPolicyPeer>,
}

/// The per-member metrics exporter.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Exporter {
    /// Run the exporter in every member pod (default false).
    #[serde(default)]
    pub enabled: bool,

    /// CPU and memory of the exporter container. When unset: requests cpu
    /// 10m and memory 16Mi, memory limit 64Mi; when set, it replaces those
    /// whole. The placement planner counts these requests together with the
    /// Valkey container's against each node's allocatable room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub resources: Option<ResourceRequirements>,
}

/// When the kubelet pulls the image.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl ImagePullPolicy {
    /// The name Kubernetes uses in a container's `imagePullPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "Always",
            Self::IfNotPresent => "IfNotPresent",
            Self::Never => "Never",
        }
    }
}

/// Persistent storage of each member.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[x_kube(
    validation = Rule::new(cel::STORAGE_CLASS_IMMUTABLE)
        .message(cel::STORAGE_CLASS_IMMUTABLE_MESSAGE)
        .field_path(".storageClassName")
        .reason(Reason::FieldValueForbidden),
    validation = Rule::new(cel::SIZE_ONLY_GROWS)
        .message(cel::SIZE_ONLY_GROWS_MESSAGE)
        .field_path(".size")
        .reason(Reason::FieldValueForbidden),
)]
#[serde(rename_all = "camelCase")]
pub struct Persistence {
    /// Size of each member's volume, e.g. `10Gi`. Can grow (when the storage
    /// class allows volume expansion), never shrink.
    #[x_kube(validation = Rule::new(cel::SIZE_POSITIVE).message(cel::SIZE_POSITIVE_MESSAGE))]
    pub size: Quantity,

    /// StorageClass of the volumes; the cluster's default class when unset.
    /// Cannot be changed after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,

    /// What happens to the volumes when the ValkeyCluster is deleted or a
    /// member is removed: Retain (the default) keeps them, Delete removes them.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,

    /// Seconds a node must be gone (NotReady or deleted) before the operator
    /// gives up the volumes bound to it and re-creates their members elsewhere.
    /// Never done while the volume may hold a shard's last copy of its data.
    #[serde(default = "defaults::node_loss_grace_seconds")]
    #[schemars(range(min = 0))]
    pub node_loss_grace_seconds: i32,
}

/// What happens to volumes the cluster no longer uses.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ReclaimPolicy {
    #[default]
    Retain,
    Delete,
}

/// Scheduling of member pods. These apply on top of the node the operator
/// plans for each member.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Scheduling {
    /// Labels a node must have to run a member.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Taints member pods tolerate. A node with an untolerated NoSchedule or
    /// NoExecute taint takes no new member.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub tolerations: Vec<Toleration>,

    /// Extra affinity rules, merged with the rules the operator derives from
    /// its placement plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema::upstream_docs)]
    pub affinity: Option<Affinity>,

    /// PriorityClass of member pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
}

/// At most `maxReplicas` members of one shard per domain of `topologyKey`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpreadConstraint {
    /// Node label whose values are the failure domains: `node`
    /// (kubernetes.io/hostname), `zone` (topology.kubernetes.io/zone), `region`
    /// (topology.kubernetes.io/region), or any other label key.
    #[schemars(length(min = 1, max = 317))]
    #[x_kube(validation = Rule::new(cel::LABEL_KEY).message(cel::LABEL_KEY_MESSAGE))]
    pub topology_key: String,

    /// The most members of one shard (primary and replicas together) in one
    /// domain; at least 1.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,

    /// Required: never broken; a member that cannot be placed without breaking
    /// it stays Pending. Preferred (the default): kept where possible, and
    /// reported when it cannot be.
    #[serde(default)]
    pub mode: SpreadMode,
}

/// Whether a spread constraint must hold or is kept where possible.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum SpreadMode {
    #[default]
    Preferred,
    Required,
}

/// How the operator keeps primaries spread.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimaryBalancing {
    /// Auto (the default): move primaries back over the domains with graceful
    /// failovers, one shard at a time. Off: leave primaries where failovers put
    /// them. Quote it in YAML (`mode: "Off"`): kubectl reads a bare Off as
    /// the boolean false.
    #[serde(default)]
    pub mode: BalancingMode,

    /// Seconds the cluster must be quiet (no failover, no membership change)
    /// before the operator moves a primary.
    #[serde(default = "defaults::quiet_period_seconds")]
    #[schemars(range(min = 0))]
    pub quiet_period_seconds: i32,
}

impl Default for PrimaryBalancing {
    fn default() -> Self {
        Self {
            mode: BalancingMode::default(),
            quiet_period_seconds: defaults::QUIET_PERIOD_SECONDS,
        }
    }
}

/// Whether the operator rebalances primaries.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum BalancingMode {
    #[default]
    Auto,
    Off,
}

/// Password authentication.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Require a password from clients and between members (default true).
    /// Without it Valkey runs with protected mode off: anything that reaches a
    /// pod can use it.
    #[serde(default = "defaults::enabled")]
    pub enabled: bool,

    /// A Secret (in the cluster's namespace) holding the password. When unset
    /// the operator generates one in the Secret `<cluster>-auth`, key
    /// `password`. Clients read the password from that Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretKeySelector>,
}

impl Default for Auth {
    fn default() -> Self {
        Self {
            enabled: true,
            password_secret: None,
        }
    }
}

/// TLS of the members.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tls {
    /// Serve TLS only: clients, replication and the cluster bus (default
    /// false). Turned on for a live cluster, every member restarts once
    /// onto its certificate, then all switch to TLS together; it cannot be
    /// turned off once on.
    #[serde(default)]
    pub enabled: bool,

    /// A Secret (in the cluster's namespace) with `ca.crt`, `tls.crt` and
    /// `tls.key`, the layout cert-manager writes. Its certificate must be
    /// valid for server and client use (peers present it to each other).
    /// Renewals are picked up live. When unset the operator runs its own CA
    /// (`<cluster>-tls-ca`) and issues and renews `<cluster>-tls` itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
}

/// A Valkey ACL user.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// The user name (letters, digits, `-`, `_`, `.`, `:`, `@`; not
    /// `default`, nor the operator's system users `valkey-replication` and
    /// `valkey-operator`).
    #[schemars(length(min = 1, max = 64))]
    pub name: String,

    /// The user's passwords: the value of every listed key of the Secret is
    /// a valid password (two keys while a password is rotated); a key absent
    /// from the Secret is skipped.
    pub password_secret: UserPasswordSecret,

    /// ACL rules, as `ACL SETUSER` takes them: key patterns (`~app:*`,
    /// `%R~ro:*`), channels (`&chan`), commands and categories (`+@read`,
    /// `-flushall`), selectors. Passwords and on/off are not set here.
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub permissions: String,

    /// Whether the user may log in (default true).
    #[serde(default = "defaults::enabled")]
    pub enabled: bool,
}

/// Where a user's passwords are.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserPasswordSecret {
    /// Name of the Secret, in the cluster's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Keys of the Secret holding passwords (default `[password]`).
    #[serde(default = "defaults::password_keys")]
    #[schemars(length(min = 1, max = 8))]
    pub keys: Vec<String>,
}

/// One key of a Secret in the cluster's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeySelector {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Key within the Secret (default `password`).
    #[serde(default = "defaults::password_key")]
    #[schemars(length(min = 1))]
    pub key: String,
}

/// PodDisruptionBudgets of the members.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudget {
    /// Create one PodDisruptionBudget per shard with maxUnavailable 1 (default
    /// true), so a drain never takes two members of one shard at once.
    #[serde(default = "defaults::enabled")]
    pub enabled: bool,
}

impl Default for PodDisruptionBudget {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// The client Service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientService {
    /// Service type: ClusterIP (the default), NodePort or LoadBalancer. Cluster
    /// clients still need to reach every pod IP, which members announce.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,

    /// Extra annotations on the client Service (e.g. for a load balancer).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `spec.externalAccess`: how members are reached from outside Kubernetes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExternalAccess {
    /// LoadBalancer: each member announces its Service's
    /// `status.loadBalancer.ingress[0].ip` and port 6379 (an address that
    /// stays put when the member moves). NodePort: each member announces the
    /// InternalIP of the node its pod runs on and its Service's nodePort
    /// (followed when the pod moves to another node).
    #[serde(rename = "type")]
    pub type_: ExternalAccessType,

    /// Extra annotations on every per-member Service (e.g. for a cloud
    /// load balancer).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// The client addresses (CIDRs) a LoadBalancer admits
    /// (`loadBalancerSourceRanges` of every per-member Service); empty:
    /// the load balancer's default, often any address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub load_balancer_source_ranges: Vec<String>,

    /// `externalTrafficPolicy` of every per-member Service. Cluster (the
    /// default) keeps a member reachable through its old node while clients
    /// follow a move; Local keeps the clients' source addresses (which
    /// `loadBalancerSourceRanges` and NetworkPolicies then see) at the price
    /// of the connections that land on a node the member just left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<ExternalTrafficPolicy>,

    /// External access is refused while `spec.auth` is off: a balancer or a
    /// node port with no password is a server anyone who reaches it may
    /// read, write and flush. True accepts that (a private network, say).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unauthenticated: bool,
}

/// `spec.externalAccess.externalTrafficPolicy`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ExternalTrafficPolicy {
    Cluster,
    Local,
}

impl ExternalTrafficPolicy {
    /// The name Kubernetes uses in a Service's `spec.externalTrafficPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Local => "Local",
        }
    }
}

/// The Service type of `spec.externalAccess`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ExternalAccessType {
    LoadBalancer,
    NodePort,
}

impl ExternalAccessType {
    /// The name Kubernetes uses in a Service's `spec.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LoadBalancer => "LoadBalancer",
            Self::NodePort => "NodePort",
        }
    }
}

/// Kubernetes Service types the client Service may have.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    /// The name Kubernetes uses in a Service's `spec.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClusterIP => "ClusterIP",
            Self::NodePort => "NodePort",
            Self::LoadBalancer => "LoadBalancer",
        }
    }
}

impl Default for ValkeyClusterSpec {
    fn default() -> Self {
        Self {
            shards: defaults::SHARDS,
            replicas: defaults::REPLICAS,
            image: defaults::IMAGE.to_string(),
            image_pull_policy: None,
            image_pull_secrets: Vec::new(),
            resources: None,
            config: BTreeMap::new(),
            persistence: None,
            scheduling: None,
            replica_spread_constraints: Vec::new(),
            primary_balancing: PrimaryBalancing::default(),
            auth: Auth::default(),
            tls: Tls::default(),
            users: Vec::new(),
            pod_disruption_budget: PodDisruptionBudget::default(),
            termination_grace_period_seconds: defaults::TERMINATION_GRACE_PERIOD_SECONDS,
            pod_labels: BTreeMap::new(),
            pod_annotations: BTreeMap::new(),
            client_service: ClientService::default(),
            external_access: None,
            pod_security_context: None,
            security_context: None,
            exporter: Exporter::default(),
            network_policy: MemberNetworkPolicy::default(),
            restore: None,
            pod_template: None,
            modules: Vec::new(),
        }
    }
}
