//! The rules every layer of the API shares, lowest in the crate: the CEL rules
//! of the CRD schema ([`cel`]), the error naming one field ([`FieldError`]),
//! and the syntax of Kubernetes names and labels. [`super::spec`],
//! [`super::security`], [`super::extensions`] and [`super::validation`] read
//! them; this module reads none of those.

use super::defaults;
use std::fmt;

/// `kubernetes.io/hostname`, what `node` resolves to.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";
/// `topology.kubernetes.io/zone`, what `zone` resolves to.
pub const ZONE_KEY: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`, what `region` resolves to.
pub const REGION_KEY: &str = "topology.kubernetes.io/region";

/// Most replicaSpreadConstraints a cluster may have (keeps CEL cost bounded).
pub const MAX_SPREAD_CONSTRAINTS: usize = 8;
/// Most shards: one slot each at the limit.
pub const MAX_SHARDS: i32 = 16384;
/// Most replicas per shard. Every replica full-syncs from its shard's primary,
/// so the bound keeps one shard's copies (16) within what one primary can feed.
pub const MAX_REPLICAS: i32 = 15;
/// Most members (`shards * (replicas + 1)`): Valkey documents 1000 nodes as the
/// largest cluster it supports. The bound also keeps every per-member loop and
/// object list of the operator (StatefulSets, the planner's problem, one
/// connection per member) small, whatever a tenant writes.
pub const MAX_MEMBERS: i64 = 1000;

/// valkey.conf keys the operator sets itself; `spec.config` may not name them.
/// Valkey reads config names case-insensitively, so the check is too.
pub const OWNED_CONFIG_KEYS: &[&str] = &[
    // Cluster mode and its identity: the operator forms the cluster.
    "cluster-enabled",
    "cluster-config-file",
    "cluster-node-timeout",
    "cluster-port",
    "cluster-allow-replica-migration",
    "cluster-preferred-endpoint-type",
    // Where and how Valkey listens: the operator and its probes connect there.
    "port",
    "bind",
    "bind-source-addr",
    "protected-mode",
    "tls-port",
    "tls-cluster",
    "tls-replication",
    // TLS files and client checks: from spec.tls.
    "tls-cert-file",
    "tls-key-file",
    "tls-key-file-pass",
    "tls-client-cert-file",
    "tls-client-key-file",
    "tls-client-key-file-pass",
    "tls-ca-cert-file",
    "tls-ca-cert-dir",
    "tls-auth-clients",
    "tls-auth-clients-user",
    "tls-auto-reload-interval",
    // Files: data and nodes.conf live where the operator mounts them.
    "dir",
    "include",
    "pidfile",
    "logfile",
    "daemonize",
    "supervised",
    // Auth: from the Secret the operator manages.
    "requirepass",
    "masterauth",
    "primaryauth",
    "masteruser",
    "primaryuser",
    "aclfile",
    "user",
    "rename-command",
    // Behaviour the operator relies on.
    "shutdown-on-sigterm",
    "shutdown-on-sigint",
    "availability-zone",
    "replicaof",
    "slaveof",
    // Ways out of the container's sandbox: loading a shared object runs code
    // in the server, DEBUG can crash it or rewrite its state, and protected
    // configs (CONFIG SET dir, dbfilename...) let a client write files where
    // it likes. A tenant who may edit the spec must not get them.
    "loadmodule",
    "enable-module-command",
    "enable-debug-command",
    "enable-protected-configs",
];

/// Why `loadmodule` is refused in `spec.config`, and where modules go.
pub const LOADMODULE_MESSAGE: &str =
    "loadmodule is refused in spec.config: list modules in spec.modules (name, path, args)";

/// Prefixes of owned valkey.conf keys (`cluster-announce-ip`,
/// `cluster-announce-port`..., `unixsocket`, `unixsocketperm`).
pub const OWNED_CONFIG_PREFIXES: &[&str] = &["cluster-announce-", "unixsocket"];

/// The CEL rules of the CRD schema. Each mirrors a check of [`validate`],
/// but for the transition rules (they use `oldSelf`): only the API server
/// sees the old and the new spec together, so those are enforced by CEL alone
/// (and tested on a real API server by the e2e suite `crd_validation`).
pub mod cel {
    /// Root: the name leaves room for `-<shard>-<member>` in StatefulSet names
    /// and is a valid Service name.
    pub const CLUSTER_NAME: &str = "self.metadata.name.size() <= 40 && \
         self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";
    pub const CLUSTER_NAME_MESSAGE: &str = "metadata.name: must be at most 40 characters of lower-case letters, \
         digits and '-', starting with a letter (it names the member StatefulSets \
         <cluster>-<shard>-<member> and the Services)";

    /// Root of a ValkeyReplication: the name leaves room for `-<member>`.
    pub const REPLICATION_NAME: &str = CLUSTER_NAME;
    pub const REPLICATION_NAME_MESSAGE: &str = "metadata.name: must be at most 40 characters of lower-case letters, \
         digits and '-', starting with a letter (it names the member StatefulSets \
         <name>-<member> and the Services)";

    /// Spec (transition): persistence is chosen at creation.
    /// Spec (transition): a restore is chosen at creation; adding, removing
    /// or changing it later would mean nothing (the data is loaded once).
    pub const RESTORE_FIXED: &str = "has(self.restore) == has(oldSelf.restore) && \
        (!has(self.restore) || self.restore == oldSelf.restore)";
    pub const RESTORE_FIXED_MESSAGE: &str = "restore is fixed at creation";

    pub const PERSISTENCE_FIXED: &str = "has(self.persistence) == has(oldSelf.persistence)";
    pub const PERSISTENCE_FIXED_MESSAGE: &str =
        "persistence cannot be added or removed after creation";

    /// Spec (transition): TLS can be turned on for a live cluster (a rolling
    /// restart that loads the certificates, then every member switches its
    /// port, its bus and its replication at once), not off again.
    pub const TLS_FIXED: &str = "!(has(oldSelf.tls) && has(oldSelf.tls.enabled) && oldSelf.tls.enabled) || \
         (has(self.tls) && has(self.tls.enabled) && self.tls.enabled)";
    pub const TLS_FIXED_MESSAGE: &str = "tls.enabled cannot be turned off once on";

    /// Spec: at most [`super::MAX_MEMBERS`] members. Shards and replicas have
    /// schema defaults, so both are present once the API server has defaulted
    /// the object; `has()` keeps the rule from failing on an object it sees
    /// before that.
    pub fn members_bounded() -> String {
        format!(
            "(has(self.shards) ? self.shards : {s}) * \
             ((has(self.replicas) ? self.replicas : {r}) + 1) <= {max}",
            s = super::defaults::SHARDS,
            r = super::defaults::REPLICAS,
            max = super::MAX_MEMBERS
        )
    }

    /// A fixed message: a messageExpression adding the count the spec asks
    /// for exceeds the API server's CEL cost budget for messages (refused by
    /// kube-apiserver 1.36), so only the operator's own message has the count.
    pub const MEMBERS_BOUNDED_MESSAGE: &str = "spec.shards * (spec.replicas + 1) must be at \
         most 1000 members (the largest Valkey cluster documented)";

    /// Persistence (transition): the storage class of existing volumes is fixed.
    pub const STORAGE_CLASS_IMMUTABLE: &str = "has(self.storageClassName) == \
         has(oldSelf.storageClassName) && (!has(self.storageClassName) || \
         self.storageClassName == oldSelf.storageClassName)";
    pub const STORAGE_CLASS_IMMUTABLE_MESSAGE: &str = "storageClassName is immutable";

    /// Persistence (transition): volumes can grow, never shrink.
    pub const SIZE_ONLY_GROWS: &str = "!isQuantity(string(self.size)) || \
         !isQuantity(string(oldSelf.size)) || \
         quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0";
    pub const SIZE_ONLY_GROWS_MESSAGE: &str = "size can only grow";

    /// Persistence size: a positive quantity.
    pub const SIZE_POSITIVE: &str =
        "isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))";
    pub const SIZE_POSITIVE_MESSAGE: &str = "must be a positive quantity, e.g. 10Gi";

    /// A label key: optional DNS-subdomain prefix and `/`, then a name of at
    /// most 63 characters. The aliases node, zone and region are such names.
    pub const LABEL_KEY: &str = "self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?\
         [A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && self.indexOf('/') <= 253";
    pub const LABEL_KEY_MESSAGE: &str = "must be node, zone, region or a valid label key \
         ([prefix/]name, name at most 63 characters)";

    /// The key a constraint's `topologyKey` resolves to, in CEL.
    fn resolved(var: &str) -> String {
        format!(
            "({var}.topologyKey == 'node' ? '{h}' : {var}.topologyKey == 'zone' ? '{z}' : \
             {var}.topologyKey == 'region' ? '{r}' : {var}.topologyKey)",
            h = super::HOSTNAME_KEY,
            z = super::ZONE_KEY,
            r = super::REGION_KEY,
        )
    }

    fn mode(var: &str) -> String {
        format!("(has({var}.mode) ? {var}.mode : 'Preferred')")
    }

    /// replicaSpreadConstraints: no two with the same resolved key and mode.
    pub fn spread_unique() -> String {
        format!(
            "self.all(c, self.filter(d, {rd} == {rc} && {md} == {mc}).size() == 1)",
            rd = resolved("d"),
            rc = resolved("c"),
            md = mode("d"),
            mc = mode("c"),
        )
    }
    pub const SPREAD_UNIQUE_MESSAGE: &str = "two constraints have the same topologyKey (node = \
         kubernetes.io/hostname, zone = topology.kubernetes.io/zone, region = \
         topology.kubernetes.io/region) and the same mode";

    /// Most `spec.config` entries, and the longest value: bounds that keep the
    /// API server's CEL cost estimate within its budget.
    pub const CONFIG_MAX_PROPERTIES: u32 = 256;
    pub const CONFIG_MAX_VALUE_LENGTH: u32 = 4096;

    /// The schema of `spec.config`: a map of single-line strings with one CEL
    /// rule per owned key (so the API server's message names the key; one rule
    /// over every key with the name in a messageExpression exceeds the CEL cost
    /// budget), one per owned prefix, and one for owned keys in another case.
    pub fn config_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let forbidden = |rule: String, message: String| serde_json::json!({"rule": rule, "message": message, "reason": "FieldValueForbidden"});
        let mut rules: Vec<serde_json::Value> = super::OWNED_CONFIG_KEYS
            .iter()
            .map(|k| {
                let message = if *k == "loadmodule" {
                    super::LOADMODULE_MESSAGE.to_string()
                } else {
                    format!("{k} is owned by the operator")
                };
                forbidden(format!("!('{k}' in self)"), message)
            })
            .collect();
        rules.extend(super::OWNED_CONFIG_PREFIXES.iter().map(|p| {
            forbidden(
                format!("self.all(k, !k.lowerAscii().startsWith('{p}'))"),
                format!("{p}* keys are owned by the operator"),
            )
        }));
        let keys = super::OWNED_CONFIG_KEYS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect::<Vec<_>>()
            .join(", ");
        rules.push(forbidden(
            format!("self.all(k, k == k.lowerAscii() || !(k.lowerAscii() in [{keys}]))"),
            "keys owned by the operator cannot be set in any case (valkey.conf keys are \
             case-insensitive)"
                .to_string(),
        ));
        rules.push(serde_json::json!({
            "rule": CONFIG_KEYS_WELL_FORMED, "message": CONFIG_KEYS_WELL_FORMED_MESSAGE
        }));
        rules.push(serde_json::json!({
            "rule": CONFIG_VALUES_ONE_LINE, "message": CONFIG_VALUES_ONE_LINE_MESSAGE
        }));
        schemars::json_schema!({
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": CONFIG_MAX_VALUE_LENGTH},
            "maxProperties": CONFIG_MAX_PROPERTIES,
            "x-kubernetes-validations": rules,
        })
    }

    /// config: keys look like valkey.conf directive names.
    pub const CONFIG_KEYS_WELL_FORMED: &str =
        "self.all(k, k.matches('^[A-Za-z0-9][-._A-Za-z0-9]*$'))";
    pub const CONFIG_KEYS_WELL_FORMED_MESSAGE: &str =
        "keys must be valkey.conf directive names (letters, digits, '-', '.', '_')";

    /// config: one line per value, so a value cannot smuggle in another directive.
    pub const CONFIG_VALUES_ONE_LINE: &str =
        r"self.all(k, !self[k].contains('\n') && !self[k].contains('\r'))";
    pub const CONFIG_VALUES_ONE_LINE_MESSAGE: &str = "values must be a single line";

    /// podTemplate.metadata.annotations: the operator's prefix is reserved
    /// (its restart and placement hashes live there).
    pub const POD_ANNOTATIONS_NOT_OWNED: &str = "self.all(k, !k.startsWith('valkey.rs/'))";
    pub const POD_ANNOTATIONS_NOT_OWNED_MESSAGE: &str =
        "annotation keys under valkey.rs/ belong to the operator";

    /// podTemplate.spec.containers: the Valkey container's command is the
    /// operator's (its start script, config file and announce flags).
    pub const VALKEY_COMMAND_NOT_OWNED: &str =
        "self.all(c, c.name != 'valkey' || (!has(c.command) && !has(c.args)))";
    pub const VALKEY_COMMAND_NOT_OWNED_MESSAGE: &str = "the command and args of the valkey \
         container belong to the operator (modules go in spec.modules, settings in spec.config)";

    /// podTemplate.spec.containers: the rest of what the operator owns in the
    /// Valkey container, each with the field that sets it instead.
    pub const VALKEY_FIELDS_NOT_OWNED: &str = "self.all(c, c.name != 'valkey' || \
         (!has(c.image) && !has(c.imagePullPolicy) && !has(c.ports) && \
         !has(c.securityContext) && !has(c.readinessProbe) && !has(c.livenessProbe) && \
         !has(c.startupProbe) && !has(c.lifecycle)))";
    pub const VALKEY_FIELDS_NOT_OWNED_MESSAGE: &str = "the image, imagePullPolicy, ports, \
         probes, lifecycle and securityContext of the valkey container belong to the operator \
         (spec.image, spec.imagePullPolicy, spec.securityContext)";

    /// podTemplate.spec.containers: the exporter is the operator's.
    pub const EXPORTER_NOT_OWNED: &str = "self.all(c, c.name != 'exporter')";
    pub const EXPORTER_NOT_OWNED_MESSAGE: &str =
        "the exporter container belongs to the operator (spec.exporter)";

    /// podTemplate.spec.containers: no sidecar listens on the operator's ports.
    // The operator's ports in added containers are refused by the operator
    // (api::v1alpha1::extensions), not by CEL: a rule over every container's
    // ports exceeds the API server's cost budget (a Container's ports have no
    // maxItems to bound it).
    pub const PORTS_NOT_OWNED_MESSAGE: &str =
        "ports 6379, 16379 and 9121 belong to the operator (client, cluster bus, exporter)";

    /// podTemplate.spec.initContainers: the operator's container names.
    pub const INIT_CONTAINERS_NOT_OWNED: &str =
        "self.all(c, c.name != 'valkey' && c.name != 'exporter')";
    pub const INIT_CONTAINERS_NOT_OWNED_MESSAGE: &str =
        "valkey and exporter are the names of the operator's containers";

    /// podTemplate.spec.volumes: the operator's volumes.
    pub const VOLUMES_NOT_OWNED: &str =
        "self.all(v, !(v.name in ['config', 'users', 'tls', 'data']))";
    pub const VOLUMES_NOT_OWNED_MESSAGE: &str =
        "volumes config, users, tls and data belong to the operator";

    /// spec.image: a tag that names a Valkey release older than 9.0 (7.2 to
    /// 8.x, with or without a suffix such as `-alpine`) is refused, as
    /// `versions::unsupported` refuses it; tags that name no version
    /// (`latest`, a digest, a build of one's own) pass.
    pub const IMAGE_SUPPORTED: &str =
        "!self.matches(':(8([.][0-9]+){0,2}|7|7[.]([2-9]|[1-9][0-9]+)([.][0-9]+)?)(-[^/:@]*)?$')";
    pub const IMAGE_SUPPORTED_MESSAGE: &str = "Valkey images older than 9.0 are not supported \
         (the members run with shutdown-on-sigterm failover and atomic slot migration, both \
         9.0 or later; tested: 9.0.0 and 9.1.2)";

    /// podTemplate.spec.volumes: only the volume types the `restricted` Pod
    /// Security Standard allows (configMap, csi, downwardAPI, emptyDir,
    /// ephemeral, persistentVolumeClaim, projected, secret). A hostPath
    /// (the node's container runtime socket, say) would make a member pod
    /// root on its node.
    pub const VOLUME_TYPES_RESTRICTED: &str = "self.all(v, !has(v.hostPath) && !has(v.nfs) && \
         !has(v.iscsi) && !has(v.rbd) && !has(v.cephfs) && !has(v.glusterfs) && \
         !has(v.gitRepo) && !has(v.flexVolume) && !has(v.fc) && !has(v.cinder) && \
         !has(v.awsElasticBlockStore) && !has(v.gcePersistentDisk) && !has(v.azureDisk) && \
         !has(v.azureFile) && !has(v.vsphereVolume) && !has(v.quobyte) && !has(v.flocker) && \
         !has(v.photonPersistentDisk) && !has(v.portworxVolume) && !has(v.scaleIO) && \
         !has(v.storageos) && !has(v.image))";
    pub const VOLUME_TYPES_RESTRICTED_MESSAGE: &str = "member pods keep to the restricted Pod \
         Security Standard: volumes may be configMap, csi, downwardAPI, emptyDir, ephemeral, \
         persistentVolumeClaim, projected or secret";

    /// modules: one entry per module name.
    pub const MODULES_UNIQUE: &str = "self.all(m, self.filter(n, n.name == m.name).size() == 1)";
    pub const MODULES_UNIQUE_MESSAGE: &str = "two modules have the same name";

    /// modules[].name: a word.
    pub const MODULE_NAME: &str = "self.matches('^[A-Za-z0-9][-_.A-Za-z0-9]*$')";
    pub const MODULE_NAME_MESSAGE: &str = "must be letters, digits, '-', '_' or '.'";

    /// modules[].path: absolute, one word of valkey.conf.
    pub const MODULE_PATH: &str = r#"self.matches('^/[^\\s"\x27]+$')"#;
    pub const MODULE_PATH_MESSAGE: &str =
        "must be an absolute path without spaces, quotes or control characters";

    /// modules[].args: one word of valkey.conf each.
    pub const MODULE_ARGS: &str = r#"self.all(a, a.matches('^[^\\s"\x27]+$'))"#;
    pub const MODULE_ARGS_MESSAGE: &str =
        "each argument must be one word: no spaces, quotes or control characters, not empty";

    /// podLabels: the operator's label prefix is reserved.
    pub const POD_LABELS_NOT_OWNED: &str = "self.all(k, !k.startsWith('valkey.rs/'))";
    pub const POD_LABELS_NOT_OWNED_MESSAGE: &str =
        "label keys under valkey.rs/ belong to the operator";
}

/// One field that breaks a rule, named as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// e.g. `spec.replicaSpreadConstraints[0].maxReplicas`.
    pub field: String,
    /// e.g. `must be >= 1`.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A DNS subdomain (RFC 1123), the form of most object names.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A Kubernetes label key: optional DNS-subdomain prefix (at most 253
/// characters) and `/`, then a name of at most 63 characters of letters,
/// digits, `-`, `_`, `.`, starting and ending with a letter or digit.
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// A Kubernetes label value (the empty string is one).
pub fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}
