// Over 600 lines: every Rust-side rule of the spec, one function per field group, and their tests; to split by kind when ValkeyReplication lands.
//! The rules a spec must follow, twice: as CEL for the API server ([`cel`]) and
//! in Rust ([`validate`]), which turns a raw [`ValkeyCluster`] into the
//! [`ValidatedCluster`] that every later step of the operator reads.
//!
//! The API server refuses most bad objects before the operator sees them; the
//! Rust mirror exists for manifests that never went through an API server (the
//! `plan` command), for objects stored before a rule existed, and for the rules
//! CEL cannot express. Every error names the field as the user wrote it, e.g.
//! `spec.replicaSpreadConstraints[1].topologyKey: ...`.

use super::defaults;
use super::spec::{
    BalancingMode, ClientService, ExternalAccess, ImagePullPolicy, ReclaimPolicy, SpreadMode,
    ValkeyCluster, ValkeyClusterSpec,
};
use crate::constants::{LABEL_PREFIX, MAX_CLUSTER_NAME, MAX_STATEFULSET_NAME, auth_secret_name};
use crate::quantity;
use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext,
    Toleration,
};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

pub use super::rules::*;
use std::time::Duration;

/// Whether `key` (any case) is a valkey.conf key the operator owns.
pub fn is_owned_config_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    OWNED_CONFIG_KEYS.contains(&key.as_str())
        || OWNED_CONFIG_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// `node`, `zone` and `region` to the label keys they stand for; any other key
/// as it is.
pub fn resolve_topology_key(key: &str) -> &str {
    match key {
        "node" => HOSTNAME_KEY,
        "zone" => ZONE_KEY,
        "region" => REGION_KEY,
        other => other,
    }
}

/// Why a ValkeyCluster is invalid: every broken rule, in spec order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// One or more fields break a rule (never empty).
    #[error("{}", join(.0))]
    Fields(Vec<FieldError>),
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl ValidationError {
    /// Stable name for metrics and events.
    pub fn category(&self) -> &'static str {
        "InvalidSpec"
    }

    /// The broken rules.
    pub fn fields(&self) -> &[FieldError] {
        match self {
            Self::Fields(f) => f,
        }
    }
}

/// Requests of one member in the planner's units; `None` = not requested.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberRequest {
    pub cpu_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
}

impl MemberRequest {
    /// Both containers' requests together, as the scheduler adds them up
    /// (a resource neither requests stays unrequested).
    pub fn plus(self, other: MemberRequest) -> MemberRequest {
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        MemberRequest {
            cpu_millis: add(self.cpu_millis, other.cpu_millis),
            memory_bytes: add(self.memory_bytes, other.memory_bytes),
        }
    }
}

impl MemberRequest {
    /// At least `other` of each resource: an init container runs alone, so
    /// the pod needs the larger of it and the containers' sum.
    pub fn at_least(self, other: MemberRequest) -> MemberRequest {
        let max = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).max(b.unwrap_or(0))),
        };
        MemberRequest {
            cpu_millis: max(self.cpu_millis, other.cpu_millis),
            memory_bytes: max(self.memory_bytes, other.memory_bytes),
        }
    }
}

/// `spec.networkPolicy`, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidatedNetworkPolicy {
    /// `spec.networkPolicy.enabled` as written; the controller replaces an
    /// unset value with its own default (`--member-network-policy`).
    pub enabled: Option<bool>,
    pub clients_from: Vec<NetworkPolicyPeer>,
    pub metrics_from: Vec<NetworkPolicyPeer>,
    /// Not from the spec: the operator's own pods, which the controller sets
    /// from its flags (`None` when the operator runs outside the cluster:
    /// then no rule names it).
    pub operator: Option<OperatorPods>,
}

impl ValidatedNetworkPolicy {
    /// Whether the policy is kept (after the controller resolved the default).
    pub fn wanted(&self) -> bool {
        self.enabled == Some(true)
    }
}

/// Where the operator's pods run and the labels that select them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorPods {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

/// `spec.exporter` when enabled.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedExporter {
    /// Not from the spec: the operator's own image, which the controller sets
    /// from `valkey-operator run --exporter-image`
    /// ([`defaults::EXPORTER_IMAGE`] until then).
    pub image: String,
    /// `spec.exporter.resources`, or the defaults
    /// ([`defaults::EXPORTER_RESOURCES`]).
    pub resources: ResourceRequirements,
}

/// The exporter's resources when `spec.exporter.resources` is unset.
pub fn default_exporter_resources() -> ResourceRequirements {
    let (cpu, memory, memory_limit) = defaults::EXPORTER_RESOURCES;
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(memory.into())),
        ])),
        limits: Some(BTreeMap::from([(
            "memory".to_string(),
            Quantity(memory_limit.into()),
        )])),
        ..Default::default()
    }
}

/// A spread constraint with its key resolved (`zone` -> `topology.kubernetes.io/zone`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSpreadConstraint {
    /// The resolved label key.
    pub topology_key: String,
    /// >= 1.
    pub max_replicas: u32,
    pub mode: SpreadMode,
}

/// Persistence, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedPersistence {
    pub size: Quantity,
    /// `size` in bytes (> 0).
    pub size_bytes: u64,
    pub storage_class_name: Option<String>,
    pub reclaim_policy: ReclaimPolicy,
    pub node_loss_grace: Duration,
}

/// Primary balancing, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidatedBalancing {
    pub mode: BalancingMode,
    pub quiet_period: Duration,
}

/// Where the password lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedAuth {
    pub enabled: bool,
    /// The Secret holding the password: the user's, or `<cluster>-auth`.
    pub secret_name: String,
    /// The key within it.
    pub secret_key: String,
    /// The operator generates the Secret (the user named none).
    pub operator_managed: bool,
}

/// `spec.tls` when enabled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedTls {
    /// The Secret the members mount (`ca.crt`, `tls.crt`, `tls.key`): the
    /// user's, or `<cluster>-tls`.
    pub secret_name: String,
    /// The operator runs the CA and issues the certificate.
    pub operator_managed: bool,
    /// The members still serve plaintext: TLS was turned on for a live
    /// cluster and the switch has not finished. Not from the spec: the
    /// reconcile sets it from the members' config file (see the operator's
    /// `decide::tls`).
    pub switching: bool,
}

/// A ValkeyCluster that passed every rule: the only form later steps read.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedCluster {
    /// A sharded cluster, or a replication set (one primary and its
    /// replicas, no cluster mode) read as a one-shard cluster.
    pub kind: SetKind,
    pub name: String,
    pub namespace: String,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub shards: u32,
    pub replicas: u32,
    pub image: String,
    pub image_pull_policy: Option<ImagePullPolicy>,
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// `spec.resources` as written (empty when unset).
    pub resources: ResourceRequirements,
    /// What one member's pod requests, for the planner: the Valkey
    /// container's plus the exporter's, each its requests, else its limits
    /// (as Kubernetes defaults a request to its limit).
    pub member_request: MemberRequest,
    /// `None` when `spec.exporter.enabled` is false.
    pub exporter: Option<ValidatedExporter>,
    /// `spec.config` with keys lower-cased (Valkey reads them case-insensitively).
    pub config: BTreeMap<String, String>,
    pub persistence: Option<ValidatedPersistence>,
    pub node_selector: BTreeMap<String, String>,
    /// Checked: operator Equal/Exists, known effects, no value with Exists.
    pub tolerations: Vec<Toleration>,
    pub affinity: Option<Affinity>,
    pub priority_class_name: Option<String>,
    pub spread: Vec<ResolvedSpreadConstraint>,
    pub primary_balancing: ValidatedBalancing,
    pub auth: ValidatedAuth,
    /// `None` when TLS is off.
    pub tls: Option<ValidatedTls>,
    /// `spec.users`, checked.
    pub users: Vec<ValidatedUser>,
    pub pod_disruption_budget: bool,
    pub termination_grace_period_seconds: i64,
    pub pod_labels: BTreeMap<String, String>,
    pub pod_annotations: BTreeMap<String, String>,
    pub client_service: ClientService,
    /// `spec.externalAccess`; `None` when off.
    pub external_access: Option<ExternalAccess>,
    /// The member pods' security context: the restricted defaults with the
    /// user's `spec.podSecurityContext` fields over them.
    pub pod_security_context: PodSecurityContext,
    /// The Valkey container's security context, likewise.
    pub security_context: SecurityContext,
    /// `spec.networkPolicy`, checked.
    pub network_policy: ValidatedNetworkPolicy,
    /// Not from the spec: how many password rotations the controller has
    /// started (0 until the first). Part of the members' restart hash when
    /// above 0, so a rotation rolls the members onto the new password.
    pub password_rotation: u64,
    /// Not from the spec: the restore in progress (`spec.restore` whose
    /// backup was found usable, until the cluster was Ready with its data),
    /// with the image that loads it (the operator's own). `None` otherwise.
    pub restore: Option<RestoreSource>,
    /// `spec.podTemplate`, checked: its tolerations, node selector and
    /// priority class are in the fields above (the planner reads them
    /// there), its Valkey container's resources in `resources`.
    pub pod_template: super::extensions::ValidatedPodTemplate,
    /// `spec.modules`, checked.
    pub modules: Vec<super::extensions::ValidatedModule>,
}

/// What kind of set a [`ValidatedCluster`] is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SetKind {
    /// A `ValkeyCluster`: shards in cluster mode.
    #[default]
    Cluster,
    /// A `ValkeyReplication`: one primary and its replicas, no cluster
    /// mode; always one shard.
    Replication,
}

impl SetKind {
    /// The label on every object the set owns, naming the set:
    /// `valkey.rs/cluster` or `valkey.rs/replication`.
    pub fn label(self) -> &'static str {
        match self {
            SetKind::Cluster => crate::constants::LABEL_CLUSTER,
            SetKind::Replication => crate::constants::LABEL_REPLICATION,
        }
    }

    /// The API kind (`ValkeyCluster`, `ValkeyReplication`).
    pub fn api_kind(self) -> &'static str {
        match self {
            SetKind::Cluster => crate::constants::KIND,
            SetKind::Replication => crate::constants::KIND_REPLICATION,
        }
    }
}

impl ValidatedCluster {
    /// The name of a member's StatefulSet: `<cluster>-<shard>-<member>`, or
    /// `<replication>-<member>` for a replication set.
    pub fn member_name(&self, shard: u32, member: u32) -> String {
        match self.kind {
            SetKind::Cluster => crate::constants::member_name(&self.name, shard, member),
            SetKind::Replication => format!("{}-{member}", self.name),
        }
    }
}

/// Checks a `ValkeyReplication` as the one-shard cluster its spec describes
/// (every field means what it means there), with what a replication set does
/// not support yet refused, naming the field.
pub fn validate_replication(
    set: &super::replication::ValkeyReplication,
    settings: &ValidationSettings,
) -> Result<ValidatedCluster, ValidationError> {
    let as_cluster = ValkeyCluster {
        metadata: set.metadata.clone(),
        spec: set.spec.as_cluster_spec(),
        status: None,
    };
    let mut errors = Errors::default();
    let spec = &set.spec;
    if spec.tls.enabled {
        errors.add(
            "spec.tls.enabled",
            "TLS is not supported yet for a ValkeyReplication",
        );
    }
    if !spec.users.is_empty() {
        errors.add(
            "spec.users",
            "ACL users are not supported yet for a ValkeyReplication",
        );
    }
    if spec.external_access.is_some() {
        errors.add(
            "spec.externalAccess",
            "external access is not supported yet for a ValkeyReplication",
        );
    }
    if spec.restore.is_some() {
        errors.add(
            "spec.restore",
            "restore is not supported yet for a ValkeyReplication",
        );
    }
    if spec
        .config
        .keys()
        .any(|k| k.eq_ignore_ascii_case("replicaof") || k.eq_ignore_ascii_case("slaveof"))
    {
        errors.add(
            "spec.config",
            "replicaof is the operator's: it points each replica at the primary",
        );
    }
    if let Some(zone) = &spec.primary_zone
        && zone.is_empty()
    {
        errors.add("spec.primaryZone", "must not be empty when set");
    }
    match validate_with(&as_cluster, settings) {
        Ok(mut v) if errors.0.is_empty() => {
            v.kind = SetKind::Replication;
            Ok(v)
        }
        Ok(_) => Err(ValidationError::Fields(errors.0)),
        Err(ValidationError::Fields(more)) => {
            let mut all = errors.0;
            all.extend(more.into_iter().map(|mut e| {
                // The cluster's words for the one shard this set is.
                e.message = e.message.replace("shards x ", "shard x ");
                e
            }));
            Err(ValidationError::Fields(all))
        }
    }
}

/// A restore in progress, as the members' pods need it.
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreSource {
    /// Where the backup is (`status.restore`).
    pub record: super::status::RestoreStatus,
    /// The image of the init container that loads a shard's RDB.
    pub image: String,
}

/// Collects errors so one pass reports every broken rule.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }
}

/// What the operator's flags allow beyond the rules every cluster follows.
/// The default is the strictest: what `validate` applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ValidationSettings {
    /// Let `spec.podSecurityContext` and `spec.securityContext` go beyond the
    /// `restricted` Pod Security Standard (privileged, root, added
    /// capabilities, Unconfined seccomp...): the operator's
    /// `--allow-privileged-security-context`. Off: they are refused, naming
    /// the field.
    pub allow_privileged_security_context: bool,
}

/// Checks `cluster` and resolves its defaults and aliases, with the default
/// (strictest) [`ValidationSettings`]. The namespace defaults to `default`
/// (a manifest read from a file may have none).
pub fn validate(cluster: &ValkeyCluster) -> Result<ValidatedCluster, ValidationError> {
    validate_with(cluster, &ValidationSettings::default())
}

/// [`validate`], with what the operator's `settings` allow.
pub fn validate_with(
    cluster: &ValkeyCluster,
    settings: &ValidationSettings,
) -> Result<ValidatedCluster, ValidationError> {
    let mut errors = Errors::default();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        errors.add("metadata.name", "required");
    }
    let namespace = cluster
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let validated = validate_spec(&name, &namespace, &cluster.spec, settings, &mut errors);
    match validated {
        Some(mut v) if errors.0.is_empty() => {
            v.uid = cluster.metadata.uid.clone();
            v.generation = cluster.metadata.generation;
            Ok(v)
        }
        _ => Err(ValidationError::Fields(errors.0)),
    }
}

fn decimal_digits(n: u32) -> usize {
    n.to_string().len()
}

fn validate_name(name: &str, shards: u32, replicas: u32, errors: &mut Errors) {
    if name.is_empty() {
        return;
    }
    let well_formed = name.len() <= MAX_CLUSTER_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !well_formed {
        errors.add(
            "metadata.name",
            cel::CLUSTER_NAME_MESSAGE.trim_start_matches("metadata.name: "),
        );
        return;
    }
    let longest =
        name.len() + 1 + decimal_digits(shards.saturating_sub(1)) + 1 + decimal_digits(replicas);
    if longest > MAX_STATEFULSET_NAME {
        errors.add(
            "metadata.name",
            format!(
                "too long for {shards} shards x {replicas} replicas: member StatefulSet names \
                 would reach {longest} characters (at most {MAX_STATEFULSET_NAME})"
            ),
        );
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
fn validate_spec(
    name: &str,
    namespace: &str,
    spec: &ValkeyClusterSpec,
    settings: &ValidationSettings,
    errors: &mut Errors,
) -> Option<ValidatedCluster> {
    let shards = if (1..=MAX_SHARDS).contains(&spec.shards) {
        spec.shards.unsigned_abs()
    } else {
        errors.add(
            "spec.shards",
            format!("must be between 1 and {MAX_SHARDS}, got {}", spec.shards),
        );
        1
    };
    let replicas = if (0..=MAX_REPLICAS).contains(&spec.replicas) {
        spec.replicas.unsigned_abs()
    } else {
        errors.add(
            "spec.replicas",
            format!(
                "must be between 0 and {MAX_REPLICAS}, got {}",
                spec.replicas
            ),
        );
        0
    };
    // Only when both are in range: otherwise their own errors say it, and the
    // stand-in values above would give a count the user never wrote.
    if (1..=MAX_SHARDS).contains(&spec.shards) && (0..=MAX_REPLICAS).contains(&spec.replicas) {
        let members = i64::from(spec.shards) * (i64::from(spec.replicas) + 1);
        if members > MAX_MEMBERS {
            errors.add(
                "spec",
                format!(
                    "{}, got {members} ({} shards x {} members)",
                    cel::MEMBERS_BOUNDED_MESSAGE,
                    spec.shards,
                    spec.replicas + 1
                ),
            );
        }
    }
    validate_name(name, shards, replicas, errors);
    if spec.image.trim().is_empty() {
        errors.add("spec.image", "must not be empty");
    } else if let Some(why) = super::versions::unsupported(&spec.image) {
        errors.add("spec.image", why);
    }
    let resources = spec.resources.clone().unwrap_or_default();
    let mut member_request = container_request(&resources, "spec.resources", errors);
    let exporter = spec.exporter.enabled.then(|| {
        let resources = spec
            .exporter
            .resources
            .clone()
            .unwrap_or_else(default_exporter_resources);
        member_request = member_request.plus(container_request(
            &resources,
            "spec.exporter.resources",
            errors,
        ));
        ValidatedExporter {
            image: defaults::EXPORTER_IMAGE.to_string(),
            resources,
        }
    });
    let config = validate_config(&spec.config, errors);
    let persistence = spec.persistence.as_ref().map(|p| {
        let size_bytes = match quantity::value(&p.size.0) {
            Ok(0) => {
                errors.add("spec.persistence.size", cel::SIZE_POSITIVE_MESSAGE);
                0
            }
            Ok(b) => b,
            Err(e) => {
                errors.add("spec.persistence.size", e.to_string());
                0
            }
        };
        if p.storage_class_name.as_deref() == Some("") {
            errors.add(
                "spec.persistence.storageClassName",
                "must not be empty (leave it out for the default class)",
            );
        }
        let grace = non_negative(
            "spec.persistence.nodeLossGraceSeconds",
            p.node_loss_grace_seconds,
            errors,
        );
        ValidatedPersistence {
            size: p.size.clone(),
            size_bytes,
            storage_class_name: p.storage_class_name.clone(),
            reclaim_policy: p.reclaim_policy,
            node_loss_grace: Duration::from_secs(grace),
        }
    });
    let scheduling = spec.scheduling.clone().unwrap_or_default();
    for key in scheduling.node_selector.keys() {
        if !is_label_key(key) {
            errors.add(
                format!("spec.scheduling.nodeSelector[{key}]"),
                "not a valid label key",
            );
        }
    }
    for (i, t) in scheduling.tolerations.iter().enumerate() {
        validate_toleration(&format!("spec.scheduling.tolerations[{i}]"), t, errors);
    }
    if scheduling.priority_class_name.as_deref() == Some("") {
        errors.add("spec.scheduling.priorityClassName", "must not be empty");
    }
    let spread = validate_spread(spec, errors);
    let quiet = non_negative(
        "spec.primaryBalancing.quietPeriodSeconds",
        spec.primary_balancing.quiet_period_seconds,
        errors,
    );
    let auth = match &spec.auth.password_secret {
        Some(secret) => {
            if secret.name.is_empty() {
                errors.add("spec.auth.passwordSecret.name", "must not be empty");
            }
            if secret.key.is_empty() {
                errors.add("spec.auth.passwordSecret.key", "must not be empty");
            }
            ValidatedAuth {
                enabled: spec.auth.enabled,
                secret_name: secret.name.clone(),
                secret_key: secret.key.clone(),
                operator_managed: false,
            }
        }
        None => ValidatedAuth {
            enabled: spec.auth.enabled,
            secret_name: auth_secret_name(name),
            secret_key: defaults::PASSWORD_KEY.to_string(),
            operator_managed: true,
        },
    };
    let tls = validate_tls(name, &spec.tls, errors);
    let users = validate_users(&spec.users, errors);
    if let Some(access) = &spec.external_access {
        validate_external_access(access, spec.auth.enabled, errors);
    }
    if spec.termination_grace_period_seconds < defaults::MIN_TERMINATION_GRACE_PERIOD_SECONDS {
        errors.add(
            "spec.terminationGracePeriodSeconds",
            format!(
                "must be >= {} (shutdown-timeout 10 s plus a failover), got {}",
                defaults::MIN_TERMINATION_GRACE_PERIOD_SECONDS,
                spec.termination_grace_period_seconds
            ),
        );
    }
    for (key, value) in &spec.pod_labels {
        let field = format!("spec.podLabels[{key}]");
        if key.starts_with(LABEL_PREFIX) {
            errors.add(field, cel::POD_LABELS_NOT_OWNED_MESSAGE);
        } else if !is_label_key(key) {
            errors.add(field, "not a valid label key");
        } else if !is_label_value(value) {
            errors.add(
                field,
                "value must be at most 63 letters, digits, '-', '_' or '.', \
                 starting and ending with a letter or digit",
            );
        }
    }
    let mut found = Vec::new();
    let mut pod_template = super::extensions::validate_pod_template(
        spec.pod_template.as_ref(),
        settings.allow_privileged_security_context,
        &mut found,
    );
    let modules = super::extensions::validate_modules(&spec.modules, &mut found);
    errors.0.extend(found);
    let mut resources = resources;
    if let Some(valkey) = pod_template.valkey.as_mut()
        && let Some(extra) = valkey.resources.take()
    {
        // The Valkey container's resources are one value whichever field
        // sets them: spec.resources with the overlay's keys over it (a
        // strategic merge merges the requests and limits maps by key).
        resources = merge_resources(&resources, &extra);
        member_request = with_pod_template_requests(
            container_request(
                &resources,
                "spec.podTemplate.spec.containers[valkey].resources",
                errors,
            ),
            spec.exporter.enabled.then(|| {
                spec.exporter
                    .resources
                    .clone()
                    .unwrap_or_else(default_exporter_resources)
            }),
            errors,
        );
    }
    if let Some(t) = spec.pod_template.as_ref() {
        // Sidecars run beside Valkey for the pod's life: their requests add
        // up; init containers run one at a time before it, so the pod needs
        // the largest of them or the sum of the rest, whichever is more (the
        // scheduler's effective request).
        for (i, c) in t.spec.containers.iter().enumerate() {
            if c.name != crate::constants::VALKEY_CONTAINER
                && let Some(r) = &c.resources
            {
                member_request = member_request.plus(container_request(
                    r,
                    &format!("spec.podTemplate.spec.containers[{i}].resources"),
                    errors,
                ));
            }
        }
        for (i, c) in t.spec.init_containers.iter().enumerate() {
            if let Some(r) = &c.resources {
                member_request = member_request.at_least(container_request(
                    r,
                    &format!("spec.podTemplate.spec.initContainers[{i}].resources"),
                    errors,
                ));
            }
        }
    }
    let mut tolerations = scheduling.tolerations;
    tolerations.append(&mut pod_template.tolerations);
    let mut node_selector = scheduling.node_selector;
    for (k, v) in std::mem::take(&mut pod_template.node_selector) {
        match node_selector.get(&k) {
            Some(mine) if *mine != v => errors.add(
                format!("spec.podTemplate.spec.nodeSelector[{k}]"),
                format!("{v:?} contradicts spec.scheduling.nodeSelector[{k}] = {mine:?}"),
            ),
            _ => {
                node_selector.insert(k, v);
            }
        }
    }
    let priority_class_name = match (
        scheduling.priority_class_name,
        pod_template.priority_class_name.take(),
    ) {
        (Some(a), Some(b)) if a != b => {
            errors.add(
                "spec.podTemplate.spec.priorityClassName",
                format!("{b:?} contradicts spec.scheduling.priorityClassName {a:?}"),
            );
            Some(a)
        }
        (a, b) => a.or(b),
    };
    let (pod_security_context, security_context) = match super::security::resolve(
        spec.pod_security_context.as_ref(),
        spec.security_context.as_ref(),
        settings.allow_privileged_security_context,
    ) {
        Ok(contexts) => contexts,
        Err(found) => {
            errors.0.extend(found);
            Default::default()
        }
    };
    Some(ValidatedCluster {
        kind: SetKind::Cluster,
        name: name.to_string(),
        namespace: namespace.to_string(),
        uid: None,
        generation: None,
        shards,
        replicas,
        image: spec.image.clone(),
        image_pull_policy: spec.image_pull_policy,
        image_pull_secrets: spec.image_pull_secrets.clone(),
        resources,
        member_request,
        exporter,
        config,
        persistence,
        node_selector,
        tolerations,
        affinity: scheduling.affinity,
        priority_class_name,
        spread,
        primary_balancing: ValidatedBalancing {
            mode: spec.primary_balancing.mode,
            quiet_period: Duration::from_secs(quiet),
        },
        auth,
        tls,
        users,
        pod_disruption_budget: spec.pod_disruption_budget.enabled,
        termination_grace_period_seconds: spec.termination_grace_period_seconds,
        pod_labels: spec.pod_labels.clone(),
        pod_annotations: spec.pod_annotations.clone(),
        client_service: spec.client_service.clone(),
        external_access: spec.external_access.clone(),
        pod_security_context,
        security_context,
        network_policy: ValidatedNetworkPolicy {
            enabled: spec.network_policy.enabled,
            clients_from: validate_peers(
                "spec.networkPolicy.clientsFrom",
                &spec.network_policy.clients_from,
                errors,
            ),
            metrics_from: validate_peers(
                "spec.networkPolicy.metricsFrom",
                &spec.network_policy.metrics_from,
                errors,
            ),
            operator: None,
        },
        password_rotation: 0,
        restore: None,
        pod_template,
        modules,
    })
}

/// `extra`'s requests and limits over `base`'s, key by key.
fn merge_resources(
    base: &ResourceRequirements,
    extra: &ResourceRequirements,
) -> ResourceRequirements {
    let merge = |a: &Option<BTreeMap<String, Quantity>>, b: &Option<BTreeMap<String, Quantity>>| {
        let mut out = a.clone().unwrap_or_default();
        out.extend(b.clone().unwrap_or_default());
        (!out.is_empty()).then_some(out)
    };
    ResourceRequirements {
        requests: merge(&base.requests, &extra.requests),
        limits: merge(&base.limits, &extra.limits),
        claims: extra.claims.clone().or_else(|| base.claims.clone()),
    }
}

/// The Valkey container's request (its resources merged with the
/// overlay's) plus the exporter's, when it runs.
fn with_pod_template_requests(
    valkey: MemberRequest,
    exporter: Option<ResourceRequirements>,
    errors: &mut Errors,
) -> MemberRequest {
    match exporter {
        Some(r) => valkey.plus(container_request(&r, "spec.exporter.resources", errors)),
        None => valkey,
    }
}

/// Checks NetworkPolicy peers as the API server would (so a bad one is
/// named in the status instead of failing every apply): each names a pod
/// selector, a namespace selector, or else an IP block alone; selectors
/// are valid; CIDRs parse.
/// `spec.externalAccess`: never open to the world without a password
/// unless the user says so, and source ranges that are CIDRs.
fn validate_external_access(access: &ExternalAccess, auth_enabled: bool, errors: &mut Errors) {
    if !auth_enabled && !access.allow_unauthenticated {
        errors.add(
            "spec.externalAccess.allowUnauthenticated",
            "external access is refused while spec.auth.enabled is false: anyone who reaches \
             the balancer or node port could read, write and flush every key; turn auth on, or \
             set allowUnauthenticated: true to accept that",
        );
    }
    for (i, range) in access.load_balancer_source_ranges.iter().enumerate() {
        if !is_cidr(range) {
            errors.add(
                format!("spec.externalAccess.loadBalancerSourceRanges[{i}]"),
                format!("{range:?} is not a CIDR such as 203.0.113.0/24"),
            );
        }
    }
}

fn validate_peers(
    field: &str,
    peers: &[NetworkPolicyPeer],
    errors: &mut Errors,
) -> Vec<NetworkPolicyPeer> {
    for (i, peer) in peers.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let selectors = [
            ("podSelector", peer.pod_selector.as_ref()),
            ("namespaceSelector", peer.namespace_selector.as_ref()),
        ];
        match (&peer.ip_block, selectors.iter().any(|(_, s)| s.is_some())) {
            (None, false) => errors.add(
                &at,
                "set podSelector, namespaceSelector or ipBlock (an empty peer is refused)",
            ),
            (Some(_), true) => errors.add(
                &at,
                "ipBlock cannot be combined with podSelector or namespaceSelector",
            ),
            (Some(block), false) => {
                if !is_cidr(&block.cidr) {
                    errors.add(
                        format!("{at}.ipBlock.cidr"),
                        format!("{:?} is not a CIDR such as 10.0.0.0/8", block.cidr),
                    );
                }
                for (k, except) in block.except.iter().flatten().enumerate() {
                    if !is_cidr(except) {
                        errors.add(
                            format!("{at}.ipBlock.except[{k}]"),
                            format!("{except:?} is not a CIDR such as 10.0.0.0/24"),
                        );
                    }
                }
            }
            (None, true) => {}
        }
        for (name, selector) in selectors {
            if let Some(selector) = selector {
                validate_selector(&format!("{at}.{name}"), selector, errors);
            }
        }
    }
    peers.to_vec()
}

/// `address/prefix` with an IPv4 or IPv6 address and a prefix that fits it.
fn is_cidr(text: &str) -> bool {
    let Some((address, prefix)) = text.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => prefix <= 32,
        Ok(std::net::IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

/// A label selector's keys, values and operators.
fn validate_selector(field: &str, selector: &LabelSelector, errors: &mut Errors) {
    for (key, value) in selector.match_labels.iter().flatten() {
        if !is_label_key(key) {
            errors.add(
                format!("{field}.matchLabels[{key}]"),
                "not a valid label key",
            );
        } else if !is_label_value(value) {
            errors.add(
                format!("{field}.matchLabels[{key}]"),
                format!("{value:?} is not a valid label value"),
            );
        }
    }
    for (j, e) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{field}.matchExpressions[{j}]");
        if !is_label_key(&e.key) {
            errors.add(format!("{at}.key"), "not a valid label key");
        }
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                errors.add(format!("{at}.values"), "must not be empty with In or NotIn");
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                errors.add(
                    format!("{at}.values"),
                    "must be empty with Exists or DoesNotExist",
                );
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.add(
                format!("{at}.operator"),
                format!("{other:?} is not In, NotIn, Exists or DoesNotExist"),
            ),
        }
        for (k, value) in values.iter().enumerate() {
            if !is_label_value(value) {
                errors.add(
                    format!("{at}.values[{k}]"),
                    format!("{value:?} is not a valid label value"),
                );
            }
        }
    }
}

fn non_negative(field: &str, value: i32, errors: &mut Errors) -> u64 {
    u64::try_from(value).unwrap_or_else(|_| {
        errors.add(field, format!("must be >= 0, got {value}"));
        0
    })
}

/// One container's requests in the planner's units; `field` is where its
/// resources are in the spec, for errors.
fn container_request(
    resources: &ResourceRequirements,
    field: &str,
    errors: &mut Errors,
) -> MemberRequest {
    let mut parse = |resource: &str, read: fn(&str) -> Result<u64, quantity::QuantityError>| {
        let mut chosen = None;
        for (part, map) in [
            ("limits", resources.limits.as_ref()),
            ("requests", resources.requests.as_ref()),
        ] {
            if let Some(q) = map.and_then(|m| m.get(resource)) {
                match read(&q.0) {
                    // Requests win over limits: Kubernetes fills a missing
                    // request from the limit, never the other way round.
                    Ok(v) => chosen = Some(v),
                    Err(e) => errors.add(format!("{field}.{part}.{resource}"), e.to_string()),
                }
            }
        }
        chosen
    };
    MemberRequest {
        cpu_millis: parse("cpu", quantity::cpu_millis),
        memory_bytes: parse("memory", quantity::value),
    }
}

/// A Valkey ACL user of `spec.users`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedUser {
    pub name: String,
    pub secret_name: String,
    /// Keys of the Secret holding passwords, in spec order, without repeats.
    pub keys: Vec<String>,
    /// The ACL rules, one argument of `ACL SETUSER` each (a selector in
    /// parentheses is one argument).
    pub rules: Vec<String>,
    pub enabled: bool,
}

/// User names the operator keeps for itself.
pub const RESERVED_USERS: &[&str] = &[
    "default",
    crate::constants::REPLICATION_USER,
    crate::constants::OPERATOR_USER,
];

/// ACL rules that `spec.users[].permissions` may not hold: passwords come
/// from the Secret and on/off from `enabled`.
fn forbidden_rule(rule: &str) -> bool {
    let lower = rule.to_ascii_lowercase();
    rule.starts_with(['>', '<', '#', '!'])
        || ["on", "off", "nopass", "resetpass", "reset"].contains(&lower.as_str())
}

/// Splits ACL rules on white space, keeping a selector `( ... )` whole.
pub fn split_acl_rules(text: &str) -> Result<Vec<String>, String> {
    let mut rules = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "a ')' closes no selector".to_string())?;
                current.push(c);
            }
            c if c.is_whitespace() && depth == 0 => {
                if !current.is_empty() {
                    rules.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if depth != 0 {
        return Err("a selector '(' is not closed".into());
    }
    if !current.is_empty() {
        rules.push(current);
    }
    Ok(rules)
}

fn validate_users(users: &[super::spec::User], errors: &mut Errors) -> Vec<ValidatedUser> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (i, u) in users.iter().enumerate() {
        let field = |f: &str| format!("spec.users[{i}].{f}");
        let name_ok = !u.name.is_empty()
            && u.name.len() <= 64
            && u.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c));
        if !name_ok {
            errors.add(
                field("name"),
                "must be 1 to 64 letters, digits, '-', '_', '.', ':' or '@'",
            );
        } else if RESERVED_USERS.contains(&u.name.as_str()) {
            errors.add(
                field("name"),
                if u.name == "default" {
                    format!("{:?} is the operator's (its password is spec.auth)", u.name)
                } else {
                    format!("{:?} is a system user the operator keeps", u.name)
                },
            );
        } else if !seen.insert(u.name.clone()) {
            errors.add(field("name"), format!("{:?} is listed twice", u.name));
        }
        if !is_dns_subdomain(&u.password_secret.name) {
            errors.add(
                field("passwordSecret.name"),
                "must be a Secret name: at most 253 lower-case letters, digits, '-' and '.', \
                 starting and ending with a letter or digit",
            );
        }
        let mut keys: Vec<String> = Vec::new();
        if u.password_secret.keys.is_empty() {
            errors.add(field("passwordSecret.keys"), "must name at least one key");
        }
        for (k, key) in u.password_secret.keys.iter().enumerate() {
            let ok = !key.is_empty()
                && key.len() <= 253
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !ok {
                errors.add(
                    format!("spec.users[{i}].passwordSecret.keys[{k}]"),
                    "must be a Secret key: letters, digits, '-', '_' and '.'",
                );
            } else if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        if u.permissions.contains(['\n', '\r']) {
            errors.add(field("permissions"), "must be a single line");
        }
        let rules = match split_acl_rules(&u.permissions) {
            Ok(rules) => rules,
            Err(e) => {
                errors.add(field("permissions"), e);
                Vec::new()
            }
        };
        let forbidden: Vec<&str> = rules
            .iter()
            .map(String::as_str)
            .filter(|r| forbidden_rule(r))
            .collect();
        if !forbidden.is_empty() {
            errors.add(
                field("permissions"),
                format!(
                    "may not set passwords or on/off ({}): passwords come from \
                     passwordSecret, on/off from enabled",
                    forbidden.join(" ")
                ),
            );
        }
        out.push(ValidatedUser {
            name: u.name.clone(),
            secret_name: u.password_secret.name.clone(),
            keys,
            rules,
            enabled: u.enabled,
        });
    }
    out
}

/// `spec.tls`: the Secret a user names must be a valid Secret name.
fn validate_tls(
    cluster: &str,
    tls: &super::spec::Tls,
    errors: &mut Errors,
) -> Option<ValidatedTls> {
    if let Some(name) = &tls.secret_name
        && !is_dns_subdomain(name)
    {
        errors.add(
            "spec.tls.secretName",
            "must be a Secret name: at most 253 lower-case letters, digits, '-' and '.', \
             starting and ending with a letter or digit",
        );
    }
    if !tls.enabled {
        return None;
    }
    Some(match &tls.secret_name {
        Some(name) => ValidatedTls {
            secret_name: name.clone(),
            operator_managed: false,
            switching: false,
        },
        None => ValidatedTls {
            secret_name: crate::constants::tls_secret_name(cluster),
            operator_managed: true,
            switching: false,
        },
    })
}

fn validate_config(
    config: &BTreeMap<String, String>,
    errors: &mut Errors,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if config.len() > cel::CONFIG_MAX_PROPERTIES as usize {
        errors.add(
            "spec.config",
            format!(
                "at most {} keys, got {}",
                cel::CONFIG_MAX_PROPERTIES,
                config.len()
            ),
        );
    }
    let owned: Vec<&str> = config
        .keys()
        .filter(|k| is_owned_config_key(k))
        .map(String::as_str)
        .collect();
    if let Some(key) = owned.iter().find(|k| k.eq_ignore_ascii_case("loadmodule")) {
        errors.add(format!("spec.config[{key}]"), LOADMODULE_MESSAGE);
    }
    if !owned.is_empty() {
        errors.add(
            "spec.config",
            format!(
                "keys owned by the operator cannot be set: {}",
                owned.join(", ")
            ),
        );
    }
    for (key, value) in config {
        let field = format!("spec.config[{key}]");
        let well_formed = key.starts_with(|c: char| c.is_ascii_alphanumeric())
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if !well_formed {
            errors.add(field, cel::CONFIG_KEYS_WELL_FORMED_MESSAGE);
            continue;
        }
        if value.len() > cel::CONFIG_MAX_VALUE_LENGTH as usize {
            errors.add(
                field,
                format!("at most {} characters", cel::CONFIG_MAX_VALUE_LENGTH),
            );
            continue;
        }
        if value.contains(['\n', '\r']) {
            errors.add(field, cel::CONFIG_VALUES_ONE_LINE_MESSAGE);
            continue;
        }
        if out
            .insert(key.to_ascii_lowercase(), value.clone())
            .is_some()
        {
            errors.add(field, "given twice (valkey.conf keys are case-insensitive)");
        }
    }
    out
}

fn validate_toleration(field: &str, t: &Toleration, errors: &mut Errors) {
    match t.operator.as_deref() {
        None | Some("Equal") => {}
        Some("Exists") => {
            if t.value.as_deref().is_some_and(|v| !v.is_empty()) {
                errors.add(
                    format!("{field}.value"),
                    "must be empty when operator is Exists",
                );
            }
        }
        Some(other) => errors.add(
            format!("{field}.operator"),
            format!("must be Equal or Exists, got {other:?}"),
        ),
    }
    if t.key.as_deref().is_none_or(str::is_empty) && t.operator.as_deref() != Some("Exists") {
        errors.add(
            format!("{field}.operator"),
            "must be Exists when key is empty",
        );
    }
    match t.effect.as_deref() {
        None | Some("" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") => {}
        Some(other) => errors.add(
            format!("{field}.effect"),
            format!("must be NoSchedule, PreferNoSchedule or NoExecute, got {other:?}"),
        ),
    }
}

fn validate_spread(spec: &ValkeyClusterSpec, errors: &mut Errors) -> Vec<ResolvedSpreadConstraint> {
    let constraints = &spec.replica_spread_constraints;
    if constraints.len() > MAX_SPREAD_CONSTRAINTS {
        errors.add(
            "spec.replicaSpreadConstraints",
            format!(
                "at most {MAX_SPREAD_CONSTRAINTS} constraints, got {}",
                constraints.len()
            ),
        );
    }
    let mut out: Vec<ResolvedSpreadConstraint> = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        let field = format!("spec.replicaSpreadConstraints[{i}]");
        if c.topology_key.is_empty() {
            errors.add(format!("{field}.topologyKey"), "must not be empty");
        } else if !is_label_key(&c.topology_key) {
            errors.add(
                format!("{field}.topologyKey"),
                format!("{:?} {}", c.topology_key, cel::LABEL_KEY_MESSAGE),
            );
        }
        let max_replicas = match u32::try_from(c.max_replicas) {
            Ok(m) if m >= 1 => m,
            _ => {
                errors.add(format!("{field}.maxReplicas"), "must be >= 1");
                1
            }
        };
        let resolved = resolve_topology_key(&c.topology_key).to_string();
        if let Some(j) = out
            .iter()
            .position(|o| o.topology_key == resolved && o.mode == c.mode)
        {
            errors.add(
                format!("{field}.topologyKey"),
                format!(
                    "{:?} resolves to {resolved}, like spec.replicaSpreadConstraints[{j}], with \
                     the same mode {:?}: give each key at most one constraint per mode",
                    c.topology_key, c.mode
                ),
            );
        }
        out.push(ResolvedSpreadConstraint {
            topology_key: resolved,
            max_replicas,
            mode: c.mode,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::spec::*;
    use super::*;
    use kube_core::ObjectMeta;

    fn cluster(spec: ValkeyClusterSpec) -> ValkeyCluster {
        ValkeyCluster {
            metadata: ObjectMeta {
                name: Some("cache".into()),
                namespace: Some("prod".into()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    fn errors_of(spec: ValkeyClusterSpec) -> Vec<String> {
        match validate(&cluster(spec)) {
            Ok(_) => vec![],
            Err(e) => e.fields().iter().map(ToString::to_string).collect(),
        }
    }

    fn constraint(key: &str, max: i32, mode: SpreadMode) -> ReplicaSpreadConstraint {
        ReplicaSpreadConstraint {
            topology_key: key.into(),
            max_replicas: max,
            mode,
        }
    }

    #[test]
    fn the_default_spec_is_valid_and_resolves_defaults() {
        let v = validate(&cluster(ValkeyClusterSpec::default())).unwrap();
        assert_eq!((v.shards, v.replicas), (3, 1));
        assert_eq!(v.namespace, "prod");
        assert_eq!(v.auth.secret_name, "cache-auth");
        assert_eq!(v.auth.secret_key, "password");
        assert!(v.auth.enabled && v.auth.operator_managed);
        assert!(v.pod_disruption_budget);
        assert_eq!(v.primary_balancing.quiet_period, Duration::from_secs(60));
    }

    #[test]
    fn shards_must_be_between_1_and_16384() {
        for bad in [0, -1, 16385] {
            let errs = errors_of(ValkeyClusterSpec {
                shards: bad,
                ..Default::default()
            });
            assert_eq!(errs.len(), 1, "{errs:?}");
            assert!(errs[0].starts_with("spec.shards: must be between 1 and 16384"));
        }
        let one = ValkeyClusterSpec {
            shards: 1,
            ..Default::default()
        };
        assert_eq!(errors_of(one), Vec::<String>::new());
        // In the field's own range, so only the member bound refuses it.
        let errs = errors_of(ValkeyClusterSpec {
            shards: 16384,
            replicas: 0,
            ..Default::default()
        });
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("spec: spec.shards * (spec.replicas + 1) must be at most 1000"),
            "{errs:?}"
        );
    }

    #[test]
    fn replicas_must_be_between_0_and_15() {
        for (bad, expect) in [
            (-1, "spec.replicas: must be between 0 and 15, got -1"),
            (16, "spec.replicas: must be between 0 and 15, got 16"),
        ] {
            let errs = errors_of(ValkeyClusterSpec {
                shards: 1,
                replicas: bad,
                ..Default::default()
            });
            assert_eq!(errs, [expect]);
        }
        for good in [0, 15] {
            let spec = ValkeyClusterSpec {
                shards: 1,
                replicas: good,
                ..Default::default()
            };
            assert!(errors_of(spec).is_empty(), "{good}");
        }
    }

    #[test]
    fn a_cluster_of_more_than_1000_members_is_refused_naming_shards_and_replicas() {
        for (shards, replicas, members) in [(334, 2, 1002), (63, 15, 1008), (1001, 0, 1001)] {
            let errs = errors_of(ValkeyClusterSpec {
                shards,
                replicas,
                ..Default::default()
            });
            assert_eq!(
                errs,
                [format!(
                    "spec: spec.shards * (spec.replicas + 1) must be at most 1000 members \
                     (the largest Valkey cluster documented), got {members} ({shards} shards x \
                     {} members)",
                    replicas + 1
                )]
            );
        }
        for (shards, replicas) in [(500, 1), (1000, 0), (62, 15)] {
            let spec = ValkeyClusterSpec {
                shards,
                replicas,
                ..Default::default()
            };
            assert!(errors_of(spec).is_empty(), "{shards} x {replicas}");
        }
    }

    #[test]
    fn the_hostile_16384_shards_of_1000_replicas_is_refused_before_anything_is_built() {
        let errs = errors_of(ValkeyClusterSpec {
            shards: 16384,
            replicas: 1000,
            ..Default::default()
        });
        // The replicas bound names the field; the member count is not worked
        // out from a value already refused.
        assert_eq!(errs, ["spec.replicas: must be between 0 and 15, got 1000"]);
    }

    #[test]
    fn the_member_bound_in_cel_uses_the_schema_defaults_and_the_same_limit() {
        let rule = cel::members_bounded();
        assert!(rule.ends_with(&format!("<= {MAX_MEMBERS}")), "{rule}");
        assert!(rule.contains(&format!("self.shards : {}", defaults::SHARDS)));
        assert!(rule.contains(&format!("self.replicas : {}", defaults::REPLICAS)));
        assert!(cel::MEMBERS_BOUNDED_MESSAGE.contains(&format!("at most {MAX_MEMBERS} ")));
        let crd = serde_json::to_value(crate::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["properties"]["replicas"]["maximum"].as_f64(),
            Some(15.0)
        );
        let rules = spec["x-kubernetes-validations"].as_array().unwrap();
        let bound = rules
            .iter()
            .find(|r| r["rule"] == rule.as_str())
            .expect("the member bound is a rule of spec");
        assert_eq!(bound["message"], cel::MEMBERS_BOUNDED_MESSAGE);
    }

    #[test]
    fn max_replicas_below_one_names_the_constraint() {
        let errs = errors_of(ValkeyClusterSpec {
            replica_spread_constraints: vec![constraint("zone", 0, SpreadMode::Required)],
            ..Default::default()
        });
        assert_eq!(
            errs,
            ["spec.replicaSpreadConstraints[0].maxReplicas: must be >= 1"]
        );
    }

    #[test]
    fn topology_keys_must_be_valid_label_keys() {
        for bad in [
            "",
            "no spaces",
            "-zone",
            "a/b/c",
            "Upper.Case/x",
            &"x".repeat(64),
        ] {
            let errs = errors_of(ValkeyClusterSpec {
                replica_spread_constraints: vec![
                    constraint("node", 1, SpreadMode::Required),
                    constraint(bad, 1, SpreadMode::Required),
                ],
                ..Default::default()
            });
            assert_eq!(errs.len(), 1, "{bad:?}: {errs:?}");
            assert!(
                errs[0].starts_with("spec.replicaSpreadConstraints[1].topologyKey: "),
                "{errs:?}"
            );
        }
        for good in [
            "node",
            "zone",
            "region",
            "rack",
            "example.com/rack",
            "a_b.c-d",
        ] {
            let spec = ValkeyClusterSpec {
                replica_spread_constraints: vec![constraint(good, 1, SpreadMode::Preferred)],
                ..Default::default()
            };
            assert!(errors_of(spec).is_empty(), "{good:?}");
        }
    }

    #[test]
    fn aliases_resolve_to_the_well_known_keys() {
        let v = validate(&cluster(ValkeyClusterSpec {
            replica_spread_constraints: vec![
                constraint("node", 1, SpreadMode::Required),
                constraint("zone", 2, SpreadMode::Preferred),
                constraint("region", 3, SpreadMode::Preferred),
                constraint("rack", 1, SpreadMode::Preferred),
            ],
            ..Default::default()
        }))
        .unwrap();
        let keys: Vec<&str> = v.spread.iter().map(|c| c.topology_key.as_str()).collect();
        assert_eq!(keys, [HOSTNAME_KEY, ZONE_KEY, REGION_KEY, "rack"]);
    }

    #[test]
    fn an_alias_and_its_full_key_with_the_same_mode_are_duplicates() {
        let errs = errors_of(ValkeyClusterSpec {
            replica_spread_constraints: vec![
                constraint("zone", 1, SpreadMode::Required),
                constraint(ZONE_KEY, 2, SpreadMode::Required),
            ],
            ..Default::default()
        });
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spec.replicaSpreadConstraints[1].topologyKey: "));
        assert!(errs[0].contains("spec.replicaSpreadConstraints[0]"));
    }

    #[test]
    fn one_key_may_have_a_required_and_a_preferred_constraint() {
        let spec = ValkeyClusterSpec {
            replica_spread_constraints: vec![
                constraint("zone", 2, SpreadMode::Required),
                constraint(ZONE_KEY, 1, SpreadMode::Preferred),
            ],
            ..Default::default()
        };
        assert!(errors_of(spec).is_empty());
    }

    #[test]
    fn more_than_eight_constraints_are_refused() {
        let spec = ValkeyClusterSpec {
            replica_spread_constraints: (0..9)
                .map(|i| constraint(&format!("k{i}"), 1, SpreadMode::Preferred))
                .collect(),
            ..Default::default()
        };
        assert_eq!(
            errors_of(spec),
            ["spec.replicaSpreadConstraints: at most 8 constraints, got 9"]
        );
    }

    #[test]
    fn owned_config_keys_are_refused_by_name_in_any_case() {
        let config = [
            ("port", "7000"),
            ("Cluster-Announce-IP", "1.2.3.4"),
            ("maxmemory", "1gb"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let errs = errors_of(ValkeyClusterSpec {
            config,
            ..Default::default()
        });
        assert_eq!(
            errs,
            ["spec.config: keys owned by the operator cannot be set: Cluster-Announce-IP, port"]
        );
    }

    #[test]
    fn keys_that_load_code_or_open_debug_and_protected_commands_are_refused() {
        for key in [
            "loadmodule",
            "enable-module-command",
            "enable-debug-command",
            "Enable-Protected-Configs",
        ] {
            let errs = errors_of(ValkeyClusterSpec {
                config: [(key.to_string(), "yes".to_string())].into(),
                ..Default::default()
            });
            let owned = format!("spec.config: keys owned by the operator cannot be set: {key}");
            if key == "loadmodule" {
                // Named on its own too, pointing at spec.modules.
                assert_eq!(
                    errs,
                    [format!("spec.config[{key}]: {LOADMODULE_MESSAGE}"), owned]
                );
            } else {
                assert_eq!(errs, [owned]);
            }
        }
        let crd = serde_json::to_string(&crate::crd()).unwrap();
        for key in [
            "loadmodule",
            "enable-module-command",
            "enable-debug-command",
            "enable-protected-configs",
        ] {
            assert!(
                crd.contains(&format!("!('{key}' in self)")),
                "no CEL rule refuses {key}"
            );
        }
    }

    #[test]
    fn every_listed_owned_key_is_owned() {
        for key in OWNED_CONFIG_KEYS {
            assert!(is_owned_config_key(key), "{key}");
        }
        assert!(is_owned_config_key("unixsocketperm"));
        assert!(!is_owned_config_key("maxmemory-policy"));
        assert!(!is_owned_config_key("cluster-require-full-coverage"));
    }

    #[test]
    fn config_values_cannot_smuggle_a_second_directive() {
        let config = [("maxmemory".to_string(), "1gb\nrequirepass x".to_string())].into();
        let errs = errors_of(ValkeyClusterSpec {
            config,
            ..Default::default()
        });
        assert_eq!(
            errs,
            ["spec.config[maxmemory]: values must be a single line"]
        );
    }

    #[test]
    fn config_keys_differing_only_in_case_are_refused() {
        let config = [
            ("maxmemory".to_string(), "1gb".to_string()),
            ("MAXMEMORY".to_string(), "2gb".to_string()),
        ]
        .into();
        let errs = errors_of(ValkeyClusterSpec {
            config,
            ..Default::default()
        });
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("case-insensitive"));
    }

    #[test]
    fn persistence_size_must_be_a_positive_quantity() {
        for (size, expect) in [
            ("0", "must be a positive quantity"),
            ("ten", "not a Kubernetes quantity"),
        ] {
            let errs = errors_of(ValkeyClusterSpec {
                persistence: Some(Persistence {
                    size: Quantity(size.into()),
                    storage_class_name: None,
                    reclaim_policy: ReclaimPolicy::Retain,
                    node_loss_grace_seconds: 300,
                }),
                ..Default::default()
            });
            assert_eq!(errs.len(), 1);
            assert!(errs[0].starts_with("spec.persistence.size: "), "{errs:?}");
            assert!(errs[0].contains(expect), "{errs:?}");
        }
    }

    #[test]
    fn the_name_must_fit_member_statefulset_names() {
        let mut c = cluster(ValkeyClusterSpec::default());
        c.metadata.name = Some("a".repeat(41));
        assert!(validate(&c).is_err());
        c.metadata.name = Some("Cache".into());
        assert!(validate(&c).is_err());
        c.metadata.name = Some("a".repeat(40));
        assert!(validate(&c).is_ok());
        c.metadata.name = None;
        let err = validate(&c).unwrap_err();
        assert_eq!(err.to_string(), "metadata.name: required");
    }

    #[test]
    fn requests_win_over_limits_and_limits_fill_missing_requests() {
        use std::collections::BTreeMap;
        let resources = ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity("250m".into()),
            )])),
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("1".into())),
                ("memory".to_string(), Quantity("1Gi".into())),
            ])),
            ..Default::default()
        };
        let v = validate(&cluster(ValkeyClusterSpec {
            resources: Some(resources),
            exporter: Exporter {
                enabled: false,
                resources: None,
            },
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(
            v.member_request,
            MemberRequest {
                cpu_millis: Some(250),
                memory_bytes: Some(1 << 30)
            }
        );
        assert_eq!(v.exporter, None);
    }

    #[test]
    fn the_exporter_requests_count_with_valkeys_for_the_planner() {
        let valkey = ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("100m".into())),
                ("memory".to_string(), Quantity("64Mi".into())),
            ])),
            ..Default::default()
        };
        // Off by default.
        assert_eq!(
            validate(&cluster(ValkeyClusterSpec::default()))
                .unwrap()
                .exporter,
            None
        );
        let on = Exporter {
            enabled: true,
            resources: None,
        };
        let v = validate(&cluster(ValkeyClusterSpec {
            resources: Some(valkey),
            exporter: on.clone(),
            ..Default::default()
        }))
        .unwrap();
        // On, with its default requests (10m, 16Mi) added.
        let exporter = v.exporter.unwrap();
        assert_eq!(exporter.resources, default_exporter_resources());
        assert_eq!(exporter.image, defaults::EXPORTER_IMAGE);
        assert_eq!(
            v.member_request,
            MemberRequest {
                cpu_millis: Some(110),
                memory_bytes: Some(80 << 20)
            }
        );
        // Valkey without requests: the exporter's alone are what the pod asks.
        let v = validate(&cluster(ValkeyClusterSpec {
            exporter: on,
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(
            v.member_request,
            MemberRequest {
                cpu_millis: Some(10),
                memory_bytes: Some(16 << 20)
            }
        );
        // The user's exporter resources replace the defaults whole: a limit
        // alone is the request.
        let own = ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("32Mi".into()),
            )])),
            ..Default::default()
        };
        let v = validate(&cluster(ValkeyClusterSpec {
            exporter: Exporter {
                enabled: true,
                resources: Some(own.clone()),
            },
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(v.exporter.unwrap().resources, own);
        assert_eq!(
            v.member_request,
            MemberRequest {
                cpu_millis: None,
                memory_bytes: Some(32 << 20)
            }
        );
    }

    #[test]
    fn bad_exporter_quantities_name_the_exporter_field() {
        let resources = ResourceRequirements {
            requests: Some([("cpu".to_string(), Quantity("fast".into()))].into()),
            ..Default::default()
        };
        let errs = errors_of(ValkeyClusterSpec {
            exporter: Exporter {
                enabled: true,
                resources: Some(resources),
            },
            ..Default::default()
        });
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("spec.exporter.resources.requests.cpu: "),
            "{errs:?}"
        );
    }

    #[test]
    fn network_policy_peers_are_checked_and_named_by_field() {
        let peers: Vec<NetworkPolicyPeer> = serde_json::from_value(serde_json::json!([
            {"podSelector": {"matchLabels": {"app": "web"}}},
            {},
            {"ipBlock": {"cidr": "10.0.0.0/33", "except": ["10.1.0.0/16", "x"]}},
            {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
            {"namespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "In"},
                {"key": "env", "operator": "Near", "values": ["a"]}
            ]}}
        ]))
        .unwrap();
        let errs = errors_of(ValkeyClusterSpec {
            network_policy: MemberNetworkPolicy {
                enabled: Some(true),
                clients_from: peers.clone(),
                metrics_from: peers[..1].to_vec(),
            },
            ..Default::default()
        });
        let fields: Vec<&str> = errs
            .iter()
            .map(|e| e.split(": ").next().unwrap_or_default())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.networkPolicy.clientsFrom[1]",
                "spec.networkPolicy.clientsFrom[2].ipBlock.cidr",
                "spec.networkPolicy.clientsFrom[2].ipBlock.except[1]",
                "spec.networkPolicy.clientsFrom[3]",
                "spec.networkPolicy.clientsFrom[4].namespaceSelector.matchExpressions[0].values",
                "spec.networkPolicy.clientsFrom[4].namespaceSelector.matchExpressions[1].operator",
            ],
            "{errs:?}"
        );
        // Good peers pass through as written; unset `enabled` stays unset
        // for the controller's default.
        let v = validate(&cluster(ValkeyClusterSpec {
            network_policy: MemberNetworkPolicy {
                enabled: None,
                clients_from: peers[..1].to_vec(),
                metrics_from: Vec::new(),
            },
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(v.network_policy.clients_from, peers[..1].to_vec());
        assert_eq!(v.network_policy.enabled, None);
        assert!(!v.network_policy.wanted());
        assert!(is_cidr("fd00::/64") && !is_cidr("fd00::/129") && !is_cidr("10.0.0.1"));
    }

    #[test]
    fn bad_resource_quantities_name_the_field() {
        let resources = ResourceRequirements {
            requests: Some([("memory".to_string(), Quantity("lots".into()))].into()),
            ..Default::default()
        };
        let errs = errors_of(ValkeyClusterSpec {
            resources: Some(resources),
            ..Default::default()
        });
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("spec.resources.requests.memory: "),
            "{errs:?}"
        );
    }

    #[test]
    fn tolerations_follow_kubernetes_rules() {
        let bad = Toleration {
            key: Some("k".into()),
            operator: Some("Exists".into()),
            value: Some("v".into()),
            effect: Some("Sometimes".into()),
            ..Default::default()
        };
        let errs = errors_of(ValkeyClusterSpec {
            scheduling: Some(Scheduling {
                tolerations: vec![bad],
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with("spec.scheduling.tolerations[0].value"));
        assert!(errs[1].starts_with("spec.scheduling.tolerations[0].effect"));
    }

    #[test]
    fn pod_labels_may_not_use_the_operator_prefix() {
        let errs = errors_of(ValkeyClusterSpec {
            pod_labels: [("valkey.rs/shard".to_string(), "9".to_string())].into(),
            ..Default::default()
        });
        assert_eq!(
            errs,
            ["spec.podLabels[valkey.rs/shard]: label keys under valkey.rs/ belong to the operator"]
        );
    }

    #[test]
    fn the_grace_period_covers_a_sigterm_failover() {
        let errs = errors_of(ValkeyClusterSpec {
            termination_grace_period_seconds: 5,
            ..Default::default()
        });
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("spec.terminationGracePeriodSeconds: must be >= 15"));
    }

    #[test]
    fn every_broken_rule_is_reported_in_one_pass() {
        let errs = errors_of(ValkeyClusterSpec {
            shards: 0,
            replicas: -2,
            replica_spread_constraints: vec![constraint("zone", 0, SpreadMode::Preferred)],
            ..Default::default()
        });
        assert_eq!(errs.len(), 3, "{errs:?}");
    }

    #[test]
    fn tls_is_off_by_default_and_uses_the_operators_certificate_when_no_secret_is_named() {
        let off = validate(&cluster(ValkeyClusterSpec::default())).unwrap();
        assert_eq!(off.tls, None);
        let on = validate(&cluster(ValkeyClusterSpec {
            tls: Tls {
                enabled: true,
                secret_name: None,
            },
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(
            on.tls,
            Some(ValidatedTls {
                secret_name: "cache-tls".into(),
                operator_managed: true,
                switching: false,
            })
        );
        let mine = validate(&cluster(ValkeyClusterSpec {
            tls: Tls {
                enabled: true,
                secret_name: Some("my-cert".into()),
            },
            ..Default::default()
        }))
        .unwrap();
        assert_eq!(mine.tls.unwrap().secret_name, "my-cert");
    }

    #[test]
    fn users_are_checked_field_by_field() {
        use super::super::spec::{User, UserPasswordSecret};
        let user = |name: &str, permissions: &str| User {
            name: name.into(),
            password_secret: UserPasswordSecret {
                name: "app-pw".into(),
                keys: vec!["password".into(), "password-next".into()],
            },
            permissions: permissions.into(),
            enabled: true,
        };
        let ok = validate_spec(
            "c",
            "ns",
            &ValkeyClusterSpec {
                users: vec![user("app", "~app:* (~x:* +get) +@read +@write")],
                ..Default::default()
            },
            &ValidationSettings::default(),
            &mut Errors::default(),
        )
        .unwrap();
        assert_eq!(
            ok.users[0].rules,
            ["~app:*", "(~x:* +get)", "+@read", "+@write"]
        );
        assert_eq!(ok.users[0].keys, ["password", "password-next"]);
        let errs = errors_of(ValkeyClusterSpec {
            users: vec![
                user("default", ""),
                user("app", ">secret ~*"),
                user("app", "nopass"),
                user("bad name", "(~x"),
                user("valkey-replication", "+@all"),
            ],
            ..Default::default()
        });
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.users[4].name") && e.contains("system user")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.starts_with("spec.users[0].name")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.users[1].permissions: may not set passwords")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.users[2].name: \"app\" is listed twice")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.users[2].permissions")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.starts_with("spec.users[3].name")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.users[3].permissions: a selector")),
            "{errs:?}"
        );
    }

    #[test]
    fn a_tls_secret_name_must_be_a_secret_name_and_tls_files_are_owned() {
        let errs = errors_of(ValkeyClusterSpec {
            tls: Tls {
                enabled: true,
                secret_name: Some("My_Cert".into()),
            },
            config: [("tls-cert-file".to_string(), "/x".to_string())].into(),
            ..Default::default()
        });
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.tls.secretName: must be a Secret name"))
        );
        assert!(
            errs.iter().any(
                |e| e == "spec.config: keys owned by the operator cannot be set: tls-cert-file"
            )
        );
    }

    #[test]
    fn the_uniqueness_rule_in_cel_resolves_every_alias() {
        for key in [HOSTNAME_KEY, ZONE_KEY, REGION_KEY] {
            assert!(cel::spread_unique().contains(key));
        }
    }

    #[test]
    fn a_privileged_overlay_is_refused_unless_the_operator_allows_it() {
        use k8s_openapi::api::core::v1::Capabilities;
        let c = cluster(ValkeyClusterSpec {
            security_context: Some(SecurityContext {
                capabilities: Some(Capabilities {
                    add: Some(vec!["SYS_PTRACE".into()]),
                    drop: Some(vec!["ALL".into()]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let err = validate(&c).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "spec.securityContext.capabilities.add[0]: \"SYS_PTRACE\" is refused \
                 (only NET_BIND_SERVICE may be added)"
            ),
            "{err}"
        );
        let allowing = ValidationSettings {
            allow_privileged_security_context: true,
        };
        let v = validate_with(&c, &allowing).unwrap();
        let added = v.security_context.capabilities.and_then(|c| c.add);
        assert_eq!(added, Some(vec!["SYS_PTRACE".to_string()]));
        assert!(!ValidationSettings::default().allow_privileged_security_context);
    }
}
