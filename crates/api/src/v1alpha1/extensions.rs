// Over 600 lines: 448 lines of code; the rest are its unit tests, kept beside it.
//! `spec.podTemplate` and `spec.modules`, checked: what users add to member
//! pods, and the modules every member loads.
//!
//! The CEL rules of the CRD refuse what the operator owns at admission
//! (`valkey.rs/` labels, its volumes, ports and container names, the Valkey
//! container's command); this module checks the same once more, plus what
//! CEL cannot see (names unique across init containers and containers, a
//! mount of a volume that does not exist, the env the operator sets, the
//! security context each added container ends up with), so a bad overlay is
//! an InvalidSpec naming the field, never a StatefulSet the API server
//! refuses on every reconcile or pods that cannot start.

use super::rules::{FieldError, is_label_key, is_label_value};
use super::security;
use super::spec::{Module, PodTemplateOverlay};
use crate::constants::{
    CLUSTER_BUS_PORT, EXPORTER_CONTAINER, EXPORTER_PORT, LABEL_PREFIX, OWNED_MOUNT_PATHS,
    OWNED_VOLUMES, VALKEY_CONTAINER, VALKEY_PORT,
};
use k8s_openapi::api::core::v1::{Container, Toleration, Volume};
use std::collections::{BTreeMap, BTreeSet};

/// Environment variables the operator sets in the Valkey container (its
/// start script, probes and config read them): the overlay cannot replace
/// them.
pub const OWNED_ENV: &[&str] = &[
    "POD_IP",
    "POD_NAME",
    "NODE_NAME",
    "VALKEY_PASSWORD",
    "VALKEY_REPLICATION_PASSWORD",
    "VALKEYCLI_AUTH",
    "REDISCLI_AUTH",
    "VALKEY_CLI_ARGS",
    "VALKEY_PLAIN_CLI_ARGS",
];

/// `spec.podTemplate`, checked, with the security context of every added
/// container resolved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidatedPodTemplate {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Run before the members' containers, in this order.
    pub init_containers: Vec<Container>,
    /// The overlay of the Valkey container (merged into the operator's by
    /// the StatefulSet builder), when the template names `valkey`.
    pub valkey: Option<Container>,
    /// Containers beside Valkey and the exporter.
    pub sidecars: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub tolerations: Vec<Toleration>,
    pub node_selector: BTreeMap<String, String>,
    pub priority_class_name: Option<String>,
}

impl ValidatedPodTemplate {
    /// Whether the template adds nothing (the pod is the operator's alone).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// A module every member loads, checked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValidatedModule {
    pub name: String,
    pub path: String,
    pub args: Vec<String>,
}

const AT: &str = "spec.podTemplate";

fn err(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// Checks `spec.podTemplate`; `allow_privileged` is the operator's
/// --allow-privileged-security-context.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn validate_pod_template(
    overlay: Option<&PodTemplateOverlay>,
    allow_privileged: bool,
    errors: &mut Vec<FieldError>,
) -> ValidatedPodTemplate {
    let Some(overlay) = overlay else {
        return ValidatedPodTemplate::default();
    };
    let meta = &overlay.metadata;
    for (key, value) in &meta.labels {
        let field = format!("{AT}.metadata.labels[{key}]");
        if key.starts_with(LABEL_PREFIX) {
            errors.push(err(field, super::rules::cel::POD_LABELS_NOT_OWNED_MESSAGE));
        } else if !is_label_key(key) {
            errors.push(err(field, "not a valid label key"));
        } else if !is_label_value(value) {
            errors.push(err(field, format!("{value:?} is not a valid label value")));
        }
    }
    for key in meta.annotations.keys() {
        if key.starts_with(LABEL_PREFIX) {
            errors.push(err(
                format!("{AT}.metadata.annotations[{key}]"),
                super::rules::cel::POD_ANNOTATIONS_NOT_OWNED_MESSAGE,
            ));
        } else if !is_label_key(key) {
            errors.push(err(
                format!("{AT}.metadata.annotations[{key}]"),
                "not a valid annotation key",
            ));
        }
    }

    let spec = &overlay.spec;
    let mut volume_names: BTreeSet<&str> = OWNED_VOLUMES.iter().copied().collect();
    for (i, v) in spec.volumes.iter().enumerate() {
        let field = format!("{AT}.spec.volumes[{i}].name");
        if OWNED_VOLUMES.contains(&v.name.as_str()) {
            errors.push(err(
                field,
                format!(
                    "{:?}: {}",
                    v.name,
                    super::rules::cel::VOLUMES_NOT_OWNED_MESSAGE
                ),
            ));
        } else if v.name.is_empty() {
            errors.push(err(field, "must not be empty"));
        } else if !volume_names.insert(&v.name) {
            errors.push(err(field, format!("{:?} is listed twice", v.name)));
        }
        for source in volume_sources(v) {
            if !RESTRICTED_VOLUME_SOURCES.contains(&source.as_str()) {
                errors.push(err(
                    format!("{AT}.spec.volumes[{i}].{source}"),
                    super::rules::cel::VOLUME_TYPES_RESTRICTED_MESSAGE,
                ));
            }
        }
    }

    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut check_common = |c: &Container, at: &str, errors: &mut Vec<FieldError>| {
        if c.name.is_empty() {
            errors.push(err(format!("{at}.name"), "must not be empty"));
        } else if !names.insert(c.name.clone()) {
            errors.push(err(
                format!("{at}.name"),
                format!("{:?} names two containers of the pod", c.name),
            ));
        }
        for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
            if !volume_names.contains(m.name.as_str()) {
                errors.push(err(
                    format!("{at}.volumeMounts[{j}].name"),
                    format!(
                        "{:?} is no volume of the pod (add it to {AT}.spec.volumes)",
                        m.name
                    ),
                ));
            }
        }
        for (j, p) in c.ports.iter().flatten().enumerate() {
            if p.host_port.is_some_and(|h| h != 0) {
                errors.push(err(
                    format!("{at}.ports[{j}].hostPort"),
                    "host ports are refused: member pods keep to the restricted Pod Security \
                     Standard (reach the container through its pod address or a Service)",
                ));
            }
            let owned = [VALKEY_PORT, CLUSTER_BUS_PORT, EXPORTER_PORT];
            if owned.iter().any(|o| i32::from(*o) == p.container_port) {
                errors.push(err(
                    format!("{at}.ports[{j}].containerPort"),
                    format!(
                        "{}: {}",
                        p.container_port,
                        super::rules::cel::PORTS_NOT_OWNED_MESSAGE
                    ),
                ));
            }
        }
    };

    let mut out = ValidatedPodTemplate {
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        volumes: spec.volumes.clone(),
        tolerations: spec.tolerations.clone(),
        node_selector: spec.node_selector.clone(),
        priority_class_name: spec.priority_class_name.clone(),
        ..Default::default()
    };
    for (i, c) in spec.init_containers.iter().enumerate() {
        let at = format!("{AT}.spec.initContainers[{i}]");
        if c.name == VALKEY_CONTAINER || c.name == EXPORTER_CONTAINER {
            errors.push(err(
                format!("{at}.name"),
                format!(
                    "{:?}: {}",
                    c.name,
                    super::rules::cel::INIT_CONTAINERS_NOT_OWNED_MESSAGE
                ),
            ));
        }
        check_common(c, &at, errors);
        out.init_containers
            .push(added_container(c, &at, allow_privileged, errors));
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let at = format!("{AT}.spec.containers[{i}]");
        check_common(c, &at, errors);
        if c.name == EXPORTER_CONTAINER {
            errors.push(err(
                format!("{at}.name"),
                super::rules::cel::EXPORTER_NOT_OWNED_MESSAGE,
            ));
        } else if c.name == VALKEY_CONTAINER {
            check_valkey_overlay(c, &at, errors);
            out.valkey = Some(c.clone());
        } else {
            if c.image.as_deref().is_none_or(str::is_empty) {
                errors.push(err(format!("{at}.image"), "a sidecar needs an image"));
            }
            out.sidecars
                .push(added_container(c, &at, allow_privileged, errors));
        }
    }
    for (i, t) in spec.tolerations.iter().enumerate() {
        if !matches!(t.operator.as_deref(), None | Some("Equal") | Some("Exists")) {
            errors.push(err(
                format!("{AT}.spec.tolerations[{i}].operator"),
                "must be Equal or Exists",
            ));
        }
    }
    for key in spec.node_selector.keys() {
        if !is_label_key(key) {
            errors.push(err(
                format!("{AT}.spec.nodeSelector[{key}]"),
                "not a valid label key",
            ));
        }
    }
    if spec.priority_class_name.as_deref() == Some("") {
        errors.push(err(
            format!("{AT}.spec.priorityClassName"),
            "must not be empty",
        ));
    }
    out
}

/// The fields of the Valkey container the operator owns, and its env and
/// mount paths.
fn check_valkey_overlay(c: &Container, at: &str, errors: &mut Vec<FieldError>) {
    let owned = [
        ("command", c.command.is_some()),
        ("args", c.args.is_some()),
        ("image", c.image.is_some()),
        ("imagePullPolicy", c.image_pull_policy.is_some()),
        ("ports", c.ports.is_some()),
        ("securityContext", c.security_context.is_some()),
        ("readinessProbe", c.readiness_probe.is_some()),
        ("livenessProbe", c.liveness_probe.is_some()),
        ("startupProbe", c.startup_probe.is_some()),
        ("lifecycle", c.lifecycle.is_some()),
    ];
    for (name, set) in owned {
        if set {
            let why = if matches!(name, "command" | "args") {
                super::rules::cel::VALKEY_COMMAND_NOT_OWNED_MESSAGE
            } else {
                super::rules::cel::VALKEY_FIELDS_NOT_OWNED_MESSAGE
            };
            errors.push(err(format!("{at}.{name}"), why));
        }
    }
    for (j, e) in c.env.iter().flatten().enumerate() {
        if OWNED_ENV.contains(&e.name.as_str()) {
            errors.push(err(
                format!("{at}.env[{j}].name"),
                format!("{} is set by the operator", e.name),
            ));
        } else if LOADER_ENV.contains(&e.name.as_str()) {
            errors.push(err(
                format!("{at}.env[{j}].name"),
                format!(
                    "{} would load other code into valkey-server (modules go in spec.modules)",
                    e.name
                ),
            ));
        }
    }
    if c.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
        // A ConfigMap or Secret could carry LD_PRELOAD, which no check here sees.
        errors.push(err(
            format!("{at}.envFrom"),
            "the valkey container takes env by name only (env), so that what reaches \
             valkey-server can be checked",
        ));
    }
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let path = m.mount_path.trim_end_matches('/');
        let under = |p: &str| path == p || path.starts_with(&format!("{p}/"));
        if OWNED_MOUNT_PATHS.iter().any(|p| under(p)) {
            errors.push(err(
                format!("{at}.volumeMounts[{j}].mountPath"),
                format!(
                    "{} is where the operator mounts its own volumes",
                    m.mount_path
                ),
            ));
        } else if path.is_empty()
            || path.split('/').any(|part| part == "..")
            || SYSTEM_PATHS.iter().any(|p| under(p))
        {
            errors.push(err(
                format!("{at}.volumeMounts[{j}].mountPath"),
                format!(
                    "{} would replace the image's own files (its binaries, libraries or \
                     configuration); mount elsewhere, e.g. under /mnt",
                    m.mount_path
                ),
            ));
        }
    }
}

/// Environment variables that make the dynamic loader run other code in
/// the Valkey container.
const LOADER_ENV: &[&str] = &["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"];

/// Where the Valkey image keeps what valkey-server runs and reads: a mount
/// over one of these replaces the server (or its libraries) with the
/// tenant's files.
const SYSTEM_PATHS: &[&str] = &[
    "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/opt", "/proc",
    "/sys", "/dev",
];

/// The volume sources the `restricted` Pod Security Standard allows.
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The sources a volume names (its fields but `name`), as the API spells them.
fn volume_sources(v: &Volume) -> Vec<String> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Object(fields)) => fields
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k != "name")
            .collect(),
        _ => Vec::new(),
    }
}

/// A sidecar or init container with its security context: the restricted
/// defaults under the fields it sets, checked against the `restricted`
/// profile unless the operator allows more.
fn added_container(
    c: &Container,
    at: &str,
    allow_privileged: bool,
    errors: &mut Vec<FieldError>,
) -> Container {
    let field = format!("{at}.securityContext");
    match security::resolve_added_container(c.security_context.as_ref(), &field, allow_privileged) {
        Ok(sc) => Container {
            security_context: Some(sc),
            ..c.clone()
        },
        Err(found) => {
            errors.extend(found);
            c.clone()
        }
    }
}

/// Checks `spec.modules`.
pub fn validate_modules(modules: &[Module], errors: &mut Vec<FieldError>) -> Vec<ValidatedModule> {
    let word = |s: &str| {
        !s.is_empty()
            && !s
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\'')
    };
    let mut seen = BTreeSet::new();
    for (i, m) in modules.iter().enumerate() {
        let at = format!("spec.modules[{i}]");
        let name_ok = m.name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && m.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok || m.name.len() > 64 {
            errors.push(err(
                format!("{at}.name"),
                super::rules::cel::MODULE_NAME_MESSAGE,
            ));
        } else if !seen.insert(m.name.as_str()) {
            errors.push(err(
                format!("{at}.name"),
                format!(
                    "{:?}: {}",
                    m.name,
                    super::rules::cel::MODULES_UNIQUE_MESSAGE
                ),
            ));
        }
        if !m.path.starts_with('/') || !word(&m.path) || m.path.len() > 1024 {
            errors.push(err(
                format!("{at}.path"),
                super::rules::cel::MODULE_PATH_MESSAGE,
            ));
        }
        for (j, a) in m.args.iter().enumerate() {
            if !word(a) {
                errors.push(err(
                    format!("{at}.args[{j}]"),
                    super::rules::cel::MODULE_ARGS_MESSAGE,
                ));
            }
        }
    }
    modules
        .iter()
        .map(|m| ValidatedModule {
            name: m.name.clone(),
            path: m.path.clone(),
            args: m.args.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::v1alpha1::{
        ValidatedCluster, ValidationSettings, ValkeyCluster, ValkeyClusterSpec, validate_with,
    };

    fn cluster(
        spec: serde_json::Value,
        allow_privileged: bool,
    ) -> Result<ValidatedCluster, Vec<String>> {
        let mut base = serde_json::to_value(ValkeyClusterSpec::default()).unwrap();
        if let (Some(b), Some(s)) = (base.as_object_mut(), spec.as_object()) {
            b.extend(s.clone());
        }
        let spec: ValkeyClusterSpec = serde_json::from_value(base).unwrap();
        let mut c = ValkeyCluster::new("ext", spec);
        c.metadata.namespace = Some("default".into());
        let settings = ValidationSettings {
            allow_privileged_security_context: allow_privileged,
        };
        validate_with(&c, &settings)
            .map_err(|e| e.fields().iter().map(ToString::to_string).collect())
    }

    fn errors(spec: serde_json::Value) -> Vec<String> {
        cluster(spec, false).err().unwrap_or_default()
    }

    #[test]
    fn owned_labels_volumes_ports_and_the_valkey_command_are_refused_naming_the_field() {
        let errs = errors(serde_json::json!({"podTemplate": {
            "metadata": {"labels": {"valkey.rs/cluster": "x"}},
            "spec": {
                "containers": [
                    {"name": "valkey", "command": ["sh"]},
                    {"name": "proxy", "image": "p:1", "ports": [{"containerPort": 6379}]}
                ],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        }}));
        for field in [
            "spec.podTemplate.metadata.labels[valkey.rs/cluster]",
            "spec.podTemplate.spec.containers[0].command",
            "spec.podTemplate.spec.containers[1].ports[0].containerPort",
            "spec.podTemplate.spec.volumes[0].name",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(field)),
                "{field} not in {errs:?}"
            );
        }
    }

    #[test]
    fn what_would_take_a_member_pod_out_of_restricted_is_refused_naming_the_field() {
        let errs = errors(serde_json::json!({
            "podSecurityContext": {"supplementalGroups": [5, 0]},
            "podTemplate": {"spec": {
                "containers": [
                    {"name": "valkey",
                     "env": [{"name": "LD_PRELOAD", "value": "/shared/evil.so"}],
                     "envFrom": [{"configMapRef": {"name": "x"}}],
                     "volumeMounts": [
                         {"name": "shared", "mountPath": "/usr/local/bin"},
                         {"name": "shared", "mountPath": "/"},
                         {"name": "shared", "mountPath": "/shared/../usr"}
                     ]},
                    {"name": "spy", "image": "s:1",
                     "ports": [{"containerPort": 8080, "hostPort": 8080}],
                     "securityContext": {"runAsGroup": 0},
                     "volumeMounts": [{"name": "runtime", "mountPath": "/run/containerd"}]}
                ],
                "volumes": [
                    {"name": "runtime", "hostPath": {"path": "/run/containerd"}},
                    {"name": "shared", "emptyDir": {}}
                ]
            }}
        }));
        for field in [
            "spec.podSecurityContext.supplementalGroups[1]",
            "spec.podTemplate.spec.containers[0].env[0].name",
            "spec.podTemplate.spec.containers[0].envFrom",
            "spec.podTemplate.spec.containers[0].volumeMounts[0].mountPath",
            "spec.podTemplate.spec.containers[0].volumeMounts[1].mountPath",
            "spec.podTemplate.spec.containers[0].volumeMounts[2].mountPath",
            "spec.podTemplate.spec.containers[1].ports[0].hostPort",
            "spec.podTemplate.spec.containers[1].securityContext.runAsGroup",
            "spec.podTemplate.spec.volumes[0].hostPath",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(field)),
                "{field} not in {errs:?}"
            );
        }
        assert!(
            !errs.iter().any(|e| e.contains("volumes[1]")),
            "an emptyDir is restricted: {errs:?}"
        );
    }

    #[test]
    fn a_sidecar_gets_the_restricted_defaults_and_may_not_go_beyond_them() {
        let sidecar = serde_json::json!({"podTemplate": {"spec": {"containers": [
            {"name": "proxy", "image": "p:1"}
        ]}}});
        let c = cluster(sidecar, false).unwrap();
        let sc = c.pod_template.sidecars[0].security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );

        let privileged = serde_json::json!({"podTemplate": {"spec": {"initContainers": [
            {"name": "tune", "image": "t:1",
             "securityContext": {"privileged": true, "allowPrivilegeEscalation": true}}
        ]}}});
        let errs = errors(privileged.clone());
        assert!(
            errs.iter().any(|e| e
                .starts_with("spec.podTemplate.spec.initContainers[0].securityContext.privileged")),
            "{errs:?}"
        );
        assert!(
            cluster(privileged, true).is_ok(),
            "allowed with the operator's flag"
        );
    }

    #[test]
    fn sidecar_and_init_requests_count_for_placement() {
        let c = cluster(
            serde_json::json!({
                "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                "podTemplate": {"spec": {
                    "containers": [{"name": "proxy", "image": "p:1",
                        "resources": {"requests": {"cpu": "50m"}}}],
                    "initContainers": [{"name": "warm", "image": "w:1",
                        "resources": {"requests": {"cpu": "10m", "memory": "1Gi"}}}]
                }}
            }),
            false,
        )
        .unwrap();
        // cpu: 100m + 50m beside each other; memory: the init container's
        // 1Gi is more than the containers' 100Mi.
        assert_eq!(c.member_request.cpu_millis, Some(150));
        assert_eq!(c.member_request.memory_bytes, Some(1 << 30));
    }

    #[test]
    fn modules_are_checked_and_loadmodule_in_config_points_to_them() {
        let errs = errors(serde_json::json!({
            "modules": [
                {"name": "json", "path": "usr/lib/valkey/libjson.so"},
                {"name": "json", "path": "/x.so", "args": ["two words"]}
            ],
            "config": {"loadmodule": "/x.so"}
        }));
        for field in [
            "spec.modules[0].path",
            "spec.modules[1].name",
            "spec.modules[1].args[0]",
            "spec.config[loadmodule]: loadmodule is refused in spec.config: list modules in spec.modules",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(field)),
                "{field} not in {errs:?}"
            );
        }
        let ok = cluster(
            serde_json::json!({"modules": [{"name": "json", "path": "/usr/lib/valkey/libjson.so", "args": ["a"]}]}),
            false,
        )
        .unwrap();
        assert_eq!(ok.modules[0].args, ["a"]);
    }
}
