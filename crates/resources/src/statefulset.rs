// Over 600 lines: the member StatefulSet (every field a member pod needs) and its tests.
//! One single-replica StatefulSet per member, `<cluster>-<shard>-<member>`.
//!
//! (Over 600 lines on purpose: the builder is ~480 lines, the rest are its
//! tests, which pin the pod spec field by field; splitting the one builder
//! would scatter what a member's pod looks like.)
//!
//! Why one StatefulSet per member: each pod gets its own scheduling rules (the
//! planned domain), a stable name and its own PVC, and the operator can delete
//! exactly the member it means to.
//!
//! A member's StatefulSet normally runs one pod, `<name>-<k>` with
//! `ordinals.start: k` (0 at creation). To move a member without ever having
//! one copy less, the operator runs a second pod for a while ([`Ordinals`]):
//! `{start: k, replicas: 2}` adds `<name>-<k+1>` where the new template puts
//! it, and `{start: k+1, replicas: 1}` then removes `<name>-<k>` (see the
//! controller's `decide::moves` module). `updateStrategy: OnDelete`: a template
//! change never restarts a pod by itself; the operator deletes pods one at a
//! time, replicas first, after a graceful failover (see the controller's
//! rolling update).
//!
//! Beside Valkey runs the metrics exporter (`spec.exporter`, on by default):
//! container `exporter`, the operator's own image running `valkey-operator
//! exporter`, port `metrics` (9121). It asks the member in its own pod over
//! loopback (TLS with the mounted CA when TLS is on; as `default` with the
//! Secret's password when auth is on). It has no probes: a container without
//! a readiness probe is ready while it runs, so pod readiness stays Valkey's.
//!
//! Two hashes on the pod template tell the controller what a running pod is
//! out of date for:
//! - [`ANNOTATION_RESTART_HASH`]: image, resources, env, args, probes and the
//!   restart-only part of valkey.conf, the exporter turned on or off and its
//!   resources (not its image: that is the operator's own, and an operator
//!   upgrade must not restart every member of every cluster; a member picks
//!   the new exporter up at its next restart): a differing pod needs a restart;
//! - [`ANNOTATION_PLACEMENT_HASH`]: affinity, tolerations, node selector and
//!   priority class: a differing pod that is still Pending is re-created (pod
//!   scheduling rules are immutable); a running one stays where it is.

use super::config::{self, CONFIG_DIR, CONFIG_FILE, DATA_DIR, TLS_DIR};
use super::hash::Fnv;
use super::overlay;
use super::scheduling::{self, MemberPlacement};
use super::{config_map_name, headless_service_name, set_member_labels, set_member_selector};
use api::constants::{
    CLUSTER_BUS_PORT, EXPORTER_CONTAINER, EXPORTER_PORT, EXPORTER_PORT_NAME, TLS_CA_KEY,
    VALKEY_PORT,
};
use api::v1alpha1::ReclaimPolicy;
use api::v1alpha1::ValidatedExporter;
use api::{SetKind, ValidatedCluster};
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetOrdinals, StatefulSetPersistentVolumeClaimRetentionPolicy,
    StatefulSetSpec, StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ExecAction, KeyToPath, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodSpec, PodTemplateSpec, Probe, SecretKeySelector, SecretVolumeSource, TCPSocketAction,
    Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// The claim of pod `pod_name`'s data volume (`data-<pod>`).
pub fn claim_of(pod_name: &str) -> String {
    format!("{DATA_VOLUME}-{pod_name}")
}

/// The init container that puts a backup's snapshot in place before the
/// server starts (its pod's restore check reads its exit by this name).
pub const RESTORE_CONTAINER: &str = "restore";

/// Pod annotation: hash of what only a restart applies.
pub const ANNOTATION_RESTART_HASH: &str = "valkey.rs/restart-hash";
/// On the StatefulSet and its pod template (the number is in the restart
/// hash already, so it restarts nothing more): the password rotation's
/// number the pods run with (`password_rotation`). Should
/// `<cluster>-auth-applied` be deleted, the operator reads the numbers back
/// from here instead of starting again at 0, which would restart every
/// member for nothing, or give a number twice.
pub const ANNOTATION_AUTH_GENERATION: &str = "valkey.rs/auth-generation";
/// Pod annotation: hash of the pod's scheduling rules.
pub const ANNOTATION_PLACEMENT_HASH: &str = "valkey.rs/placement-hash";
/// Name of the Valkey container.
pub const CONTAINER: &str = "valkey";
/// Environment variable holding the password (from the Secret).
pub const PASSWORD_ENV: &str = "VALKEY_PASSWORD";
/// Environment variable holding the replication user's password (from
/// `<cluster>-users`): the member's `primaryauth`.
pub const REPLICATION_PASSWORD_ENV: &str = "VALKEY_REPLICATION_PASSWORD";
/// valkey-cli's flags for the start script: `--user default` with auth (the
/// three-argument AUTH works whether the member requires the password or
/// takes any, as while auth is switched on or off), `--tls --cacert` with
/// TLS; unset when there is neither.
pub const CLI_ARGS_ENV: &str = "VALKEY_CLI_ARGS";
/// With TLS: valkey-cli's flags without `--tls` (`--user default` with
/// auth, else empty), for members that still speak plaintext while a live
/// cluster is switched to TLS (see [`tls_probe`]).
pub const PLAIN_CLI_ARGS_ENV: &str = "VALKEY_PLAIN_CLI_ARGS";
/// Name of the volume of the TLS Secret.
pub const TLS_VOLUME: &str = "tls";
/// Name of the volume of the users Secret.
pub const USERS_VOLUME: &str = "users";
/// Name of the data volume (and of the PVC template: PVCs are `data-<pod>`).
pub const DATA_VOLUME: &str = "data";

/// Which pod ordinals a member's StatefulSet runs: `start`, and `replicas`
/// pods from there (1; 2 while a move runs a new copy beside the old one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ordinals {
    pub start: u32,
    pub replicas: u32,
}

impl Ordinals {
    /// A new member: pod `<name>-0` alone.
    pub const INITIAL: Ordinals = Ordinals {
        start: 0,
        replicas: 1,
    };

    /// What a live StatefulSet runs (`spec.ordinals.start`, `spec.replicas`;
    /// absent fields are Kubernetes' defaults, 0 and 1).
    pub fn of(sts: &StatefulSet) -> Ordinals {
        let spec = sts.spec.as_ref();
        let start = spec
            .and_then(|s| s.ordinals.as_ref())
            .and_then(|o| o.start)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0);
        let replicas = spec
            .and_then(|s| s.replicas)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(1);
        Ordinals { start, replicas }
    }

    /// The pod index of the member proper (the old copy during a move).
    pub fn member(self) -> u32 {
        self.start
    }

    /// The pod index of the new copy while a move runs one.
    pub fn new_copy(self) -> Option<u32> {
        (self.replicas >= 2).then(|| self.start.saturating_add(1))
    }

    /// The ordinals that add a new copy beside the member.
    pub fn with_new_copy(self) -> Ordinals {
        Ordinals {
            start: self.start,
            replicas: 2,
        }
    }

    /// The ordinals that keep only the new copy (the move is done).
    pub fn completed(self) -> Ordinals {
        Ordinals {
            start: self.start.saturating_add(1),
            replicas: 1,
        }
    }

    /// The ordinals that keep only the old copy (the move is given up).
    pub fn aborted(self) -> Ordinals {
        Ordinals {
            start: self.start,
            replicas: 1,
        }
    }
}

/// Sets the pods `sts` runs (the operator's only change to a member's
/// StatefulSet during a move).
pub fn set_ordinals(sts: &mut StatefulSet, ordinals: Ordinals) {
    if let Some(spec) = sts.spec.as_mut() {
        spec.replicas = Some(i32::try_from(ordinals.replicas).unwrap_or(1));
        // Left out at 0 (Kubernetes' default), so StatefulSets created
        // before moves existed stay as they are; once above 0 it is always
        // set (ordinals only grow).
        spec.ordinals = (ordinals.start > 0).then(|| StatefulSetOrdinals {
            start: i32::try_from(ordinals.start).ok(),
        });
    }
}

/// Everything one member's StatefulSet depends on.
#[derive(Debug, Clone, Copy)]
pub struct MemberInput<'a> {
    pub cluster: &'a ValidatedCluster,
    pub owner: &'a OwnerReference,
    pub shard: u32,
    pub member: u32,
    pub placement: &'a MemberPlacement,
    /// The volumeClaimTemplates of the existing StatefulSet: immutable in
    /// Kubernetes, so a grown `persistence.size` is applied to the PVCs
    /// directly and the templates stay as created.
    pub existing_claim_templates: Option<&'a [PersistentVolumeClaim]>,
    /// The pods to run (the live StatefulSet's, [`Ordinals::INITIAL`] for a
    /// new one): the operator changes them only to move the member.
    pub ordinals: Ordinals,
}

/// The member's StatefulSet.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn statefulset(input: MemberInput<'_>) -> StatefulSet {
    let c = input.cluster;
    let name = c.member_name(input.shard, input.member);
    let labels = set_member_labels(c.kind, &c.name, input.shard, input.member);
    // The overlay's labels, then spec.podLabels, then the operator's (the
    // `valkey.rs/` ones, which validation keeps out of the other two).
    let mut pod_labels = c.pod_template.labels.clone();
    pod_labels.extend(c.pod_labels.clone());
    pod_labels.extend(labels.clone());

    let mut pod_spec = pod_spec(c);
    let mut restart = Fnv::default()
        .feed_json(&without_exporter_image(&pod_spec))
        .feed_json(&config::restart_config(c));
    // A password rotation restarts the members onto the new password (their
    // environment); before the first one the hash is as it always was.
    if c.password_rotation > 0 {
        restart = restart.feed_json(&c.password_rotation);
    }
    // Modules load at start only, and the overlay's labels and annotations
    // reach a pod only when it is made again: both roll the members. Fed
    // only when set, so the hash of a cluster without them is as before.
    if !c.modules.is_empty() {
        restart = restart.feed_json(&c.modules);
    }
    // A replication set's members take every config key at start (the
    // operator sets no key live there): a change rolls them.
    if c.kind == SetKind::Replication {
        restart = restart.feed_json(&c.config);
    }
    let overlay_meta = (&c.pod_template.labels, &c.pod_template.annotations);
    if !overlay_meta.0.is_empty() || !overlay_meta.1.is_empty() {
        restart = restart.feed_json(&overlay_meta);
    }
    let restart_hash = restart.hex();
    // A restore: the shard's first member loads its data before Valkey
    // starts. Out of the restart hash, so that taking it out once the
    // restore is done restarts nobody (members update on delete).
    if input.member == 0
        && let Some(restore) = &c.restore
    {
        restore_member(&mut pod_spec, c, restore, input.shard);
    }
    pod_spec.affinity = scheduling::affinity(
        (c.kind, &c.name),
        input.shard,
        input.member,
        &c.spread,
        input.placement,
        c.affinity.as_ref(),
    );
    pod_spec.tolerations = (!c.tolerations.is_empty()).then(|| c.tolerations.clone());
    pod_spec.node_selector = (!c.node_selector.is_empty()).then(|| c.node_selector.clone());
    pod_spec.priority_class_name = c.priority_class_name.clone();
    let placement_hash = Fnv::default()
        .feed_json(&pod_spec.affinity)
        .feed_json(&pod_spec.tolerations)
        .feed_json(&pod_spec.node_selector)
        .feed_json(&pod_spec.priority_class_name)
        .hex();

    let mut annotations = c.pod_template.annotations.clone();
    annotations.extend(c.pod_annotations.clone());
    annotations.insert(ANNOTATION_RESTART_HASH.into(), restart_hash);
    // Which rotation's password the pod starts with (already in the restart
    // hash, so it restarts nothing more): read back when the record is gone.
    if c.password_rotation > 0 {
        annotations.insert(
            ANNOTATION_AUTH_GENERATION.into(),
            c.password_rotation.to_string(),
        );
    }
    annotations.insert(ANNOTATION_PLACEMENT_HASH.into(), placement_hash);

    let claim_templates = c
        .persistence
        .as_ref()
        .map(|p| match input.existing_claim_templates {
            Some(existing) => existing.to_vec(),
            None => vec![PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(DATA_VOLUME.into()),
                    labels: Some(labels.clone()),
                    ..Default::default()
                },
                spec: Some(PersistentVolumeClaimSpec {
                    access_modes: Some(vec!["ReadWriteOnce".into()]),
                    storage_class_name: p.storage_class_name.clone(),
                    resources: Some(VolumeResourceRequirements {
                        requests: Some(BTreeMap::from([("storage".to_string(), p.size.clone())])),
                        limits: None,
                    }),
                    ..Default::default()
                }),
                status: None,
            }],
        });
    let retention = c.persistence.as_ref().map(|p| {
        let policy = match p.reclaim_policy {
            ReclaimPolicy::Delete => "Delete",
            ReclaimPolicy::Retain => "Retain",
        };
        StatefulSetPersistentVolumeClaimRetentionPolicy {
            when_deleted: Some(policy.into()),
            // Only a move scales (2 pods, then 1): the operator deletes the
            // claim of the copy it removes itself, once that pod is gone.
            when_scaled: Some("Retain".into()),
        }
    });

    let mut sts = StatefulSet {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(c.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: (c.password_rotation > 0).then(|| {
                BTreeMap::from([(
                    ANNOTATION_AUTH_GENERATION.to_string(),
                    c.password_rotation.to_string(),
                )])
            }),
            owner_references: Some(vec![input.owner.clone()]),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(1),
            service_name: Some(headless_service_name(&c.name)),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(set_member_selector(
                    c.kind,
                    &c.name,
                    input.shard,
                    input.member,
                )),
                match_expressions: None,
            },
            persistent_volume_claim_retention_policy: retention,
            volume_claim_templates: claim_templates,
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(pod_spec),
            },
            ..Default::default()
        }),
        status: None,
    };
    set_ordinals(&mut sts, input.ordinals);
    sts
}

/// The staging name of a restored RDB on a volume without persistence: the
/// member's start script empties the volume (see [`FORGET_IDENTITY_SCRIPT`])
/// and then moves this file into place, once; a container restart finds
/// nothing to reload.
pub const RESTORE_STAGING: &str = "restore.rdb";

/// Adds the init container that loads shard `shard`'s RDB from the backup
/// (`valkey-operator restore`, the operator's image) to a first member's pod.
/// With AOF on, the RDB also becomes the AOF's base (Valkey loads only the
/// AOF then); without persistence the start script is told to keep it.
fn restore_member(
    spec: &mut PodSpec,
    c: &ValidatedCluster,
    restore: &api::v1alpha1::RestoreSource,
    shard: u32,
) {
    let r = &restore.record;
    let setting = |key: &str| {
        c.config
            .get(key)
            .map(|v| v.trim().trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
    };
    let dbfilename = setting("dbfilename").unwrap_or_else(|| "dump.rdb".into());
    // A volume that Valkey writes nothing to (AOF and RDB off) is emptied by
    // the start script like an emptyDir ([`command`]): the restored file is
    // staged as there.
    let persistent = crate::config::durable(c);
    let aof = persistent && setting("appendonly").is_none_or(|v| v.eq_ignore_ascii_case("yes"));
    let mut args = vec![
        "restore".to_string(),
        format!("--endpoint={}", r.endpoint),
        format!("--bucket={}", r.bucket),
        format!("--folder={}", r.folder),
        format!("--shard={shard}"),
        format!("--dir={DATA_DIR}"),
        format!(
            "--file={}",
            if persistent {
                dbfilename.as_str()
            } else {
                RESTORE_STAGING
            }
        ),
    ];
    if let Some(region) = &r.region {
        args.push(format!("--region={region}"));
    }
    if aof {
        args.push("--aof".into());
        if let Some(dir) = setting("appenddirname") {
            args.push(format!("--aof-dir={dir}"));
        }
        if let Some(name) = setting("appendfilename") {
            args.push(format!("--aof-file={name}"));
        }
    }
    let key = |name: &str| EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: r.credentials_secret.clone(),
                key: name.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    };
    // First, before the overlay's own init containers (which stay): the data
    // is in place before anything of the user's runs.
    spec.init_containers.get_or_insert_with(Vec::new).insert(
        0,
        Container {
            name: RESTORE_CONTAINER.into(),
            image: Some(restore.image.clone()),
            args: Some(args),
            env: Some(vec![key("AWS_ACCESS_KEY_ID"), key("AWS_SECRET_ACCESS_KEY")]),
            volume_mounts: Some(vec![VolumeMount {
                name: DATA_VOLUME.into(),
                mount_path: DATA_DIR.into(),
                ..Default::default()
            }]),
            // The Valkey container's: the file is Valkey's to read and replace.
            security_context: Some(c.security_context.clone()),
            termination_message_policy: Some("FallbackToLogsOnError".into()),
            ..Default::default()
        },
    );
    if !persistent {
        let keep = format!(
            "for f in /data/* /data/.[!.]*; do [ \"$f\" = /data/{RESTORE_STAGING} ] || rm -rf \"$f\"; done; \
             if [ -f /data/{RESTORE_STAGING} ]; then mv /data/{RESTORE_STAGING} '/data/{dbfilename}'; fi; \
             exec valkey-server \"$@\""
        );
        for container in spec.containers.iter_mut().filter(|x| x.name == CONTAINER) {
            if let Some(script) = container.command.as_mut().and_then(|cmd| cmd.get_mut(2)) {
                *script = script.replace(
                    "rm -rf /data/* /data/.[!.]* && exec valkey-server \"$@\"",
                    &keep,
                );
            }
        }
    }
}

/// The pod spec without scheduling rules (those are added by the caller, out
/// of the restart hash).
fn pod_spec(c: &ValidatedCluster) -> PodSpec {
    let mut volumes = vec![Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(&c.name),
            ..Default::default()
        }),
        ..Default::default()
    }];
    volumes.push(Volume {
        name: USERS_VOLUME.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(api::constants::users_secret_name(&c.name)),
            // The file only: the replication password reaches Valkey as
            // `primaryauth` through the environment.
            items: Some(vec![KeyToPath {
                key: api::constants::USERS_FILE_KEY.into(),
                path: api::constants::USERS_FILE_KEY.into(),
                mode: None,
            }]),
            ..Default::default()
        }),
        ..Default::default()
    });
    if let Some(tls) = &c.tls {
        volumes.push(Volume {
            name: TLS_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(tls.secret_name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if c.persistence.is_none() {
        volumes.push(Volume {
            name: DATA_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
    let mut containers = vec![container(c)];
    if let Some(exporter) = &c.exporter {
        containers.push(exporter_container(c, exporter));
    }
    let spec = PodSpec {
        containers,
        volumes: Some(volumes),
        termination_grace_period_seconds: Some(c.termination_grace_period_seconds),
        // Valkey needs no Service environment variables, and hundreds of
        // Services in a namespace would otherwise bloat every pod's env.
        enable_service_links: Some(false),
        automount_service_account_token: Some(false),
        // Restricted by default (api::v1alpha1::security): non-root, seccomp
        // RuntimeDefault, fsGroup so the volumes are writable.
        security_context: Some(c.pod_security_context.clone()),
        image_pull_secrets: (!c.image_pull_secrets.is_empty())
            .then(|| c.image_pull_secrets.clone()),
        ..Default::default()
    };
    with_pod_template(spec, c)
}

/// `spec.podTemplate` merged in (see [`overlay`]): the Valkey container's
/// overlay by name, sidecars after the operator's containers, init
/// containers and volumes added. A cluster without one gets the pod as it
/// always was (same restart hash).
fn with_pod_template(spec: PodSpec, c: &ValidatedCluster) -> PodSpec {
    let t = &c.pod_template;
    if t.valkey.is_none()
        && t.sidecars.is_empty()
        && t.init_containers.is_empty()
        && t.volumes.is_empty()
    {
        return spec;
    }
    let patch = PodSpec {
        containers: t.valkey.iter().chain(&t.sidecars).cloned().collect(),
        init_containers: (!t.init_containers.is_empty()).then(|| t.init_containers.clone()),
        volumes: (!t.volumes.is_empty()).then(|| t.volumes.clone()),
        ..Default::default()
    };
    overlay::merge_pod_spec(&spec, &patch)
}

/// The pod spec as the restart hash sees it: the exporter's image left out
/// (it is the operator's own, see the module doc).
fn without_exporter_image(spec: &PodSpec) -> PodSpec {
    let mut spec = spec.clone();
    for c in &mut spec.containers {
        if c.name == EXPORTER_CONTAINER {
            c.image = None;
        }
    }
    spec
}

fn port(name: &str, p: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: i32::from(p),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// The password from the cluster's Secret, as both containers get it.
fn password_env(c: &ValidatedCluster) -> EnvVar {
    EnvVar {
        name: PASSWORD_ENV.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: c.auth.secret_name.clone(),
                key: c.auth.secret_key.clone(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        value: None,
    }
}

/// The metrics sidecar: `valkey-operator exporter` (the image's entrypoint)
/// asking the Valkey of its own pod over loopback.
fn exporter_container(c: &ValidatedCluster, e: &ValidatedExporter) -> Container {
    let mut args = vec![
        "exporter".to_string(),
        format!("--listen=0.0.0.0:{EXPORTER_PORT}"),
        format!("--valkey=127.0.0.1:{VALKEY_PORT}"),
    ];
    let mut env = Vec::new();
    let mut mounts = Vec::new();
    if c.auth.enabled {
        // Read by the exporter itself (never an argument: `ps` would show
        // it); it logs in as `default`.
        env.push(password_env(c));
    }
    if c.tls.is_some() {
        // Plaintext is off: TLS to 127.0.0.1, trusting the cluster's CA (the
        // certificate need not name 127.0.0.1; the CA is what is checked).
        args.push(format!("--tls-ca-file={TLS_DIR}/{TLS_CA_KEY}"));
        mounts.push(VolumeMount {
            name: TLS_VOLUME.into(),
            mount_path: TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    Container {
        name: EXPORTER_CONTAINER.into(),
        image: Some(e.image.clone()),
        args: Some(args),
        env: (!env.is_empty()).then_some(env),
        ports: Some(vec![port(EXPORTER_PORT_NAME, EXPORTER_PORT)]),
        resources: (e.resources != Default::default()).then(|| e.resources.clone()),
        security_context: Some(api::v1alpha1::security::exporter_security_context()),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        ..Default::default()
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
fn container(c: &ValidatedCluster) -> Container {
    let mut env = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
        field_env("NODE_NAME", "spec.nodeName"),
    ];
    let mut args = vec![
        format!("{CONFIG_DIR}/{CONFIG_FILE}"),
        // Kubernetes expands $(VAR) in args from the container's env: every
        // member announces its own pod IP (peers and clients must not learn
        // it from connection source addresses).
        if c.kind == SetKind::Replication {
            "--replica-announce-ip".into()
        } else {
            "--cluster-announce-ip".into()
        },
        "$(POD_IP)".into(),
        // The users of spec.users the members took, so a member that
        // restarts has them before the operator sets them again (and when
        // the operator is away), and the replication user. `default` is not
        // in it: its password stays requirepass's.
        "--include".into(),
        format!("{}/{}", config::USERS_DIR, api::constants::USERS_FILE_KEY),
        // Replicas log in to their primary as the replication user, which
        // may run only what a replica sends, whether auth is on or off and
        // whatever the cluster password is (a rotation or an auth switch
        // leaves replication alone). Valkey hides its arguments behind the
        // process title, so the password does not show in `ps`.
        "--primaryuser".into(),
        api::constants::REPLICATION_USER.into(),
        "--primaryauth".into(),
        format!("$({REPLICATION_PASSWORD_ENV})"),
    ];
    env.push(EnvVar {
        name: REPLICATION_PASSWORD_ENV.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: api::constants::users_secret_name(&c.name),
                key: api::constants::REPLICATION_PASSWORD_KEY.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        value: None,
    });
    if c.auth.enabled {
        env.push(password_env(c));
        // The probe's valkey-cli reads the password from the environment
        // (redis-cli and valkey-cli use different names).
        for name in ["VALKEYCLI_AUTH", "REDISCLI_AUTH"] {
            env.push(EnvVar {
                name: name.into(),
                value: Some(format!("$({PASSWORD_ENV})")),
                value_from: None,
            });
        }
        args.extend(["--requirepass".into(), format!("$({PASSWORD_ENV})")]);
    }
    let mut cli_args: Vec<String> = Vec::new();
    if c.auth.enabled {
        cli_args.extend(["--user".into(), "default".into()]);
    }
    if c.tls.is_some() {
        cli_args.extend([
            "--tls".into(),
            "--cacert".into(),
            format!("{TLS_DIR}/{TLS_CA_KEY}"),
        ]);
    }
    if !cli_args.is_empty() {
        env.push(EnvVar {
            name: CLI_ARGS_ENV.into(),
            value: Some(cli_args.join(" ")),
            value_from: None,
        });
    }
    if c.tls.is_some() {
        let plain: Vec<&str> = if c.auth.enabled {
            vec!["--user", "default"]
        } else {
            Vec::new()
        };
        env.push(EnvVar {
            name: PLAIN_CLI_ARGS_ENV.into(),
            value: Some(plain.join(" ")),
            value_from: None,
        });
    }
    let mut mounts = vec![
        VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: DATA_VOLUME.into(),
            mount_path: DATA_DIR.into(),
            ..Default::default()
        },
        VolumeMount {
            name: USERS_VOLUME.into(),
            mount_path: config::USERS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
    ];
    if c.tls.is_some() {
        mounts.push(VolumeMount {
            name: TLS_VOLUME.into(),
            mount_path: TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    let probe = if c.tls.is_some() {
        tls_probe()
    } else {
        let mut probe = vec!["valkey-cli".to_string()];
        probe.extend(cli_args);
        probe.extend([
            "-e".into(),
            "-p".into(),
            VALKEY_PORT.to_string(),
            "ping".into(),
        ]);
        probe
    };
    Container {
        name: CONTAINER.into(),
        image: Some(c.image.clone()),
        image_pull_policy: c.image_pull_policy.map(|p| p.as_str().to_string()),
        command: Some(command(c)),
        args: Some(args),
        env: Some(env),
        ports: Some(if c.kind == SetKind::Replication {
            vec![port("client", VALKEY_PORT)]
        } else {
            vec![port("client", VALKEY_PORT), port("bus", CLUSTER_BUS_PORT)]
        }),
        resources: (c.resources != Default::default()).then(|| c.resources.clone()),
        security_context: Some(c.security_context.clone()),
        volume_mounts: Some(mounts),
        // valkey-server logs why a module did not load and exits: the log
        // tail becomes the termination message the status reports
        // (`status.members[].moduleError`). Only with modules, so the pods
        // of a cluster without them stay as they were.
        termination_message_policy: (!c.modules.is_empty())
            .then(|| "FallbackToLogsOnError".to_string()),
        // `-e`: exit non-zero on an error reply (NOAUTH, LOADING), so Ready
        // means "answers commands", not only "accepts connections".
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(probe),
            }),
            period_seconds: Some(5),
            timeout_seconds: Some(3),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        // A server loading a large dataset answers LOADING to PING but still
        // accepts connections: liveness must not kill it.
        liveness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(i32::from(VALKEY_PORT)),
                host: None,
            }),
            initial_delay_seconds: Some(10),
            period_seconds: Some(10),
            timeout_seconds: Some(5),
            failure_threshold: Some(6),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Without persistence a restarted container has lost its data but would
/// keep its identity (nodes.conf sits on the emptyDir, which outlives the
/// container): a primary would come back with its slots and an empty dataset,
/// and its replicas would resync from it and drop every key of the shard. So
/// the container forgets nodes.conf before it starts: it rejoins as a new,
/// empty node, the shard fails over to a replica, and the operator attaches
/// the new node as a replica. It forgets the rest of the emptyDir too: a
/// replica keeps the RDB of its last full sync there (`dump.rdb`), which it
/// would load on start and come back as a stranger holding keys. With
/// persistence nodes.conf and the data stay together on the volume.
///
/// A container that was a primary does not listen again while a replica
/// still replicates from its address. Its replicas keep reconnecting to that
/// address, and an empty server answering there would hand them a full sync of
/// nothing: they would flush every key of the shard. So it asks each replica
/// its old nodes.conf lists (INFO replication) and waits until none names its
/// address as `master_host`: the shard has failed over (Valkey's election, or
/// the operator's CLUSTER FAILOVER TAKEOVER when too few primaries are up to
/// elect). A replica that does not answer is waited for three
/// cluster-node-timeouts (read from its config file, `$1`); one that answers
/// but refuses the login (NOAUTH, WRONGPASS, NOPERM) is alive and may well
/// replicate from this address, so it is waited for without end (losing the
/// shard's data is worse than a member that does not start; the log says
/// why). A primary without replicas has nobody to wait for. While it waits, nothing listens, and the
/// replicas get "connection refused".
pub const FORGET_IDENTITY_SCRIPT: &str = concat!(
    "c=/data/nodes.conf; ",
    "if grep -qs 'myself,master' \"$c\"; then ",
    "t=$(awk '$1==\"cluster-node-timeout\"{v=$2} END{print v+0}' \"$1\" 2>/dev/null); ",
    "[ \"${t:-0}\" -gt 0 ] 2>/dev/null || t=5000; ",
    "me=$(awk '$3 ~ /myself/ {print $1; exit}' \"$c\"); ",
    "ip=$(awk '$3 ~ /myself/ {a=$2; sub(/[@,].*/, \"\", a); sub(/:[0-9]*$/, \"\", a); print a; exit}' \"$c\"); ",
    "rs=$(awk -v me=\"$me\" '$4==me {a=$2; sub(/[@,].*/, \"\", a); print a}' \"$c\"); ",
    "deadline=$(( $(date +%s) + t*3/1000 )); ",
    "echo \"was a primary at $ip: not listening while a replica still replicates from it\"; ",
    "trap 'exit 143' TERM INT; ",
    "while :; do busy=; ",
    "for r in $rs; do ",
    "out=$(timeout 2 valkey-cli $VALKEY_CLI_ARGS --no-auth-warning -h \"${r%:*}\" -p \"${r##*:}\" info replication 2>&1 | tr -d '\\r'); ",
    "case \"$out\" in ",
    "*role:*) if printf '%s\\n' \"$out\" | grep -qxF -e \"master_host:$ip\" -e \"master_host:${POD_IP:-$ip}\"; then busy=\"$r\"; fi ;; ",
    "*NOAUTH*|*WRONGPASS*|*NOPERM*) busy=\"$r\" ;; ",
    "*) if [ \"$(date +%s)\" -lt \"$deadline\" ]; then busy=\"$r\"; fi ;; ",
    "esac; ",
    "done; ",
    "[ -z \"$busy\" ] && break; ",
    "echo \"replica $busy still replicates from $ip (or does not answer): waiting\"; ",
    "sleep 1 & wait $!; ",
    "done; ",
    "trap - TERM INT; ",
    "fi; ",
    "rm -rf /data/* /data/.[!.]* && exec valkey-server \"$@\""
);

/// A replication set's member without durable data empties its volume
/// before it starts (a replica's last full sync would otherwise come back).
pub const FORGET_DATA_SCRIPT: &str = "rm -rf /data/* /data/.[!.]* && exec valkey-server \"$@\"";

/// The readiness probe of a TLS member: PING over TLS, or, when that does
/// not answer within two seconds (the probe has three), over plaintext. A cluster that had TLS turned
/// on live runs its members with the certificates but on plaintext until
/// the operator switches all of them at once (see `builders::config`), and
/// the same pod must be Ready before and after: no second rolling restart.
fn tls_probe() -> Vec<String> {
    let ping = format!("-e -p {VALKEY_PORT} ping");
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "timeout 2 valkey-cli ${CLI_ARGS_ENV} {ping} >/dev/null 2>&1 || \
             valkey-cli ${PLAIN_CLI_ARGS_ENV} {ping}"
        ),
    ]
}

/// [`FORGET_IDENTITY_SCRIPT`] for a TLS member: it asks each replica over
/// TLS and, when that fails, over plaintext (a replica not yet switched to
/// TLS, see [`tls_probe`]).
fn forget_identity_script_tls() -> String {
    FORGET_IDENTITY_SCRIPT.replace(
        "out=$(timeout 2 valkey-cli $VALKEY_CLI_ARGS --no-auth-warning -h \"${r%:*}\" -p \"${r##*:}\" info replication 2>&1 | tr -d '\\r'); ",
        "out=$( { timeout 2 valkey-cli $VALKEY_CLI_ARGS --no-auth-warning -h \"${r%:*}\" -p \"${r##*:}\" info replication || timeout 2 valkey-cli $VALKEY_PLAIN_CLI_ARGS --no-auth-warning -h \"${r%:*}\" -p \"${r##*:}\" info replication; } 2>&1 | tr -d '\\r'); ",
    )
}

/// The valkey container's command. Only a member whose data survives its
/// restart ([`crate::config::durable`]: a volume, and AOF or RDB
/// writing to it) starts as it is; every other one, a volume with AOF and
/// RDB off included, forgets its identity first ([`FORGET_IDENTITY_SCRIPT`]):
/// such a primary restarted at once would otherwise come back with its slots
/// and no data, and its replicas would full-sync the empty set.
fn command(c: &ValidatedCluster) -> Vec<String> {
    if crate::config::durable(c) {
        vec!["valkey-server".into()]
    } else if c.kind == SetKind::Replication {
        // A replication set's member starts as a replica of nobody (see
        // `config::REPLICA_OF_NOBODY`): nothing to wait for, only the stale
        // data of the volume to forget.
        vec![
            "sh".into(),
            "-c".into(),
            FORGET_DATA_SCRIPT.into(),
            "valkey-server".into(),
        ]
    } else {
        vec![
            "sh".into(),
            "-c".into(),
            if c.tls.is_some() {
                forget_identity_script_tls()
            } else {
                FORGET_IDENTITY_SCRIPT.into()
            },
            // $0 of the script.
            "valkey-server".into(),
        ]
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod restore_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::test_support::{cluster, cluster_with_persistence, owner};

    fn restoring(mut c: ValidatedCluster) -> ValidatedCluster {
        c.restore = Some(api::v1alpha1::RestoreSource {
            record: api::v1alpha1::RestoreStatus {
                backup: "nightly".into(),
                endpoint: "http://s3:8333".into(),
                bucket: "bk".into(),
                region: None,
                credentials_secret: "s3".into(),
                folder: "p/ns/nightly".into(),
                shard_slots: vec!["0-8191".into(), "8192-16383".into()],
                done: false,
            },
            image: "operator:1".into(),
        });
        c
    }

    fn member(c: &ValidatedCluster, shard: u32, member: u32) -> StatefulSet {
        statefulset(MemberInput {
            cluster: c,
            owner: &owner(),
            shard,
            member,
            placement: &MemberPlacement::Placed {
                node: "n1".into(),
                domains: BTreeMap::new(),
            },
            existing_claim_templates: None,
            ordinals: Ordinals::INITIAL,
        })
    }

    fn pod(s: &StatefulSet) -> PodSpec {
        s.spec.clone().unwrap().template.spec.unwrap()
    }

    fn hash(s: &StatefulSet) -> String {
        super::tests::annotation(s, ANNOTATION_RESTART_HASH)
    }

    #[test]
    fn only_a_shards_first_member_loads_the_backup_and_no_restart_follows_the_restore() {
        let plain = cluster("c", 2, 1);
        let c = restoring(plain.clone());
        let first = member(&c, 1, 0);
        let inits = pod(&first).init_containers.unwrap();
        assert_eq!(inits.len(), 1);
        let args = inits[0].args.clone().unwrap();
        assert_eq!(args[0], "restore");
        assert!(args.contains(&"--shard=1".to_string()), "{args:?}");
        assert!(
            args.contains(&"--folder=p/ns/nightly".to_string()),
            "{args:?}"
        );
        assert_eq!(inits[0].image.as_deref(), Some("operator:1"));
        let env = inits[0].env.clone().unwrap();
        assert!(
            env.iter().all(|e| e.value.is_none()),
            "no secret in the spec"
        );
        assert!(pod(&member(&c, 1, 1)).init_containers.is_none());
        // The overlay's init containers stay, after the restore's.
        let mut with_init = c.clone();
        with_init.pod_template.init_containers = vec![Container {
            name: "warm".into(),
            image: Some("w:1".into()),
            ..Default::default()
        }];
        let names: Vec<String> = pod(&member(&with_init, 1, 0))
            .init_containers
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, [RESTORE_CONTAINER, "warm"]);
        assert_eq!(
            pod(&member(&with_init, 1, 1))
                .init_containers
                .unwrap()
                .len(),
            1
        );
        // The same restart hash as without the restore: dropping the init
        // container after the restore restarts nothing.
        assert_eq!(hash(&first), hash(&member(&plain, 1, 0)));
    }

    #[test]
    fn without_persistence_the_start_script_keeps_the_restored_file_once() {
        let c = restoring(cluster("c", 2, 1));
        let first = pod(&member(&c, 0, 0));
        let args = first.init_containers.unwrap()[0].args.clone().unwrap();
        assert!(
            args.contains(&format!("--file={RESTORE_STAGING}")),
            "{args:?}"
        );
        assert!(!args.contains(&"--aof".to_string()));
        let script = first.containers[0].command.clone().unwrap()[2].clone();
        assert!(
            script.contains("mv /data/restore.rdb '/data/dump.rdb'"),
            "{script}"
        );
        assert!(
            !script.contains("rm -rf /data/* /data/.[!.]* &&"),
            "{script}"
        );
    }

    #[test]
    fn with_aof_the_restored_rdb_also_becomes_the_aof_base() {
        let c = restoring(cluster_with_persistence("c", 2, 1, "Delete"));
        let first = pod(&member(&c, 0, 0));
        let args = first.init_containers.unwrap()[0].args.clone().unwrap();
        assert!(args.contains(&"--file=dump.rdb".to_string()), "{args:?}");
        assert!(args.contains(&"--aof".to_string()), "{args:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, cluster_with_exporter, owner};
    use api::constants::{LABEL_CLUSTER, LABEL_MEMBER, LABEL_ROLE, LABEL_SHARD};

    fn build(c: &ValidatedCluster, placement: &MemberPlacement) -> StatefulSet {
        statefulset(MemberInput {
            cluster: c,
            owner: &owner(),
            shard: 1,
            member: 2,
            placement,
            existing_claim_templates: None,
            ordinals: Ordinals::INITIAL,
        })
    }

    pub(super) fn annotation(s: &StatefulSet, key: &str) -> String {
        s.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[key]
            .clone()
    }

    fn placed(node: &str) -> MemberPlacement {
        MemberPlacement::Placed {
            node: node.into(),
            domains: BTreeMap::new(),
        }
    }

    #[test]
    fn one_pod_named_after_cluster_shard_member_updated_only_on_delete() {
        let c = cluster("cache", 3, 2);
        let s = build(&c, &placed("n1"));
        assert_eq!(s.metadata.name.as_deref(), Some("cache-1-2"));
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(spec.service_name.as_deref(), Some("cache-headless"));
        let labels = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(labels[LABEL_CLUSTER], "cache");
        assert_eq!(labels[LABEL_SHARD], "1");
        assert_eq!(labels[LABEL_MEMBER], "2");
        assert!(
            !labels.contains_key(LABEL_ROLE),
            "the role label follows the live role"
        );
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].controller,
            Some(true)
        );
    }

    #[test]
    fn the_password_comes_from_the_secret_and_the_announce_ip_from_the_pod() {
        let c = cluster("cache", 3, 1);
        let s = build(&c, &placed("n1"));
        let container = &s.spec.unwrap().template.spec.unwrap().containers[0];
        let args = container.args.clone().unwrap();
        let pos = args
            .iter()
            .position(|a| a == "--cluster-announce-ip")
            .unwrap();
        assert_eq!(args[pos + 1], "$(POD_IP)");
        assert!(
            args.windows(2)
                .any(|w| w == ["--requirepass", "$(VALKEY_PASSWORD)"])
        );
        // Replicas log in as the replication user, with its own password.
        assert!(
            args.windows(2)
                .any(|w| w == ["--primaryauth", "$(VALKEY_REPLICATION_PASSWORD)"])
        );
        assert!(
            args.windows(2)
                .any(|w| w == ["--primaryuser", "valkey-replication"])
        );
        let env = container.env.clone().unwrap();
        let repl = env
            .iter()
            .find(|e| e.name == REPLICATION_PASSWORD_ENV)
            .and_then(|e| e.value_from.as_ref())
            .and_then(|v| v.secret_key_ref.as_ref())
            .unwrap();
        assert_eq!(
            (repl.name.as_str(), repl.key.as_str()),
            ("cache-users", "replication-password")
        );
        let probe = container
            .readiness_probe
            .as_ref()
            .and_then(|p| p.exec.as_ref())
            .and_then(|e| e.command.clone())
            .unwrap();
        assert!(probe.windows(2).any(|w| w == ["--user", "default"]));
        let env = container.env.clone().unwrap();
        let cli = env.iter().find(|e| e.name == CLI_ARGS_ENV).unwrap();
        assert_eq!(cli.value.as_deref(), Some("--user default"));
        let pw = env.iter().find(|e| e.name == PASSWORD_ENV).unwrap();
        let secret = pw
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(secret.name, "cache-auth");
        assert_eq!(secret.key, "password");
    }

    #[test]
    fn without_auth_no_password_is_passed() {
        let mut c = cluster("cache", 3, 1);
        c.auth.enabled = false;
        let s = build(&c, &placed("n1"));
        let container = &s.spec.unwrap().template.spec.unwrap().containers[0];
        assert!(
            !container
                .args
                .as_ref()
                .unwrap()
                .iter()
                .any(|a| a.contains("requirepass"))
        );
        assert!(
            !container
                .env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == PASSWORD_ENV)
        );
    }

    #[test]
    fn members_run_restricted_as_the_valkey_user() {
        let c = cluster("cache", 3, 1);
        let s = build(&c, &placed("n1"));
        let pod = s.spec.unwrap().template.spec.unwrap();
        let psc = pod.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(999));
        assert_eq!(psc.fs_group, Some(999));
        let sc = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
    }

    #[test]
    fn a_changed_security_context_needs_a_restart() {
        let c = cluster("cache", 3, 1);
        let mut d = c.clone();
        d.pod_security_context.run_as_user = Some(1001);
        let hash = |c: &ValidatedCluster| {
            build(c, &placed("n1"))
                .spec
                .unwrap()
                .template
                .metadata
                .unwrap()
                .annotations
                .unwrap()[ANNOTATION_RESTART_HASH]
                .clone()
        };
        assert_ne!(hash(&c), hash(&d));
    }

    #[test]
    fn a_new_placement_changes_the_placement_hash_but_not_the_restart_hash() {
        let c = cluster("cache", 3, 1);
        let a = build(&c, &placed("n1"));
        let b = build(&c, &placed("n2"));
        assert_eq!(
            annotation(&a, ANNOTATION_RESTART_HASH),
            annotation(&b, ANNOTATION_RESTART_HASH)
        );
        assert_ne!(
            annotation(&a, ANNOTATION_PLACEMENT_HASH),
            annotation(&b, ANNOTATION_PLACEMENT_HASH)
        );
    }

    #[test]
    fn a_live_config_key_does_not_restart_but_a_restart_key_or_the_image_does() {
        let base = cluster("cache", 3, 1);
        let hash =
            |c: &ValidatedCluster| annotation(&build(c, &placed("n1")), ANNOTATION_RESTART_HASH);
        let mut live = base.clone();
        live.config
            .insert("maxmemory-policy".into(), "allkeys-lru".into());
        assert_eq!(hash(&base), hash(&live));
        let mut restart = base.clone();
        restart.config.insert("databases".into(), "4".into());
        assert_ne!(hash(&base), hash(&restart));
        let mut image = base.clone();
        image.image = "valkey/valkey:9.2".into();
        assert_ne!(hash(&base), hash(&image));
    }

    #[test]
    fn persistence_gives_a_claim_template_and_the_retention_of_the_reclaim_policy() {
        let mut c = crate::test_support::cluster_with_persistence("cache", 1, 1, "Delete");
        let s = build(&c, &placed("n1"));
        let spec = s.spec.unwrap();
        assert_eq!(
            spec.volume_claim_templates.as_ref().unwrap()[0]
                .metadata
                .name
                .as_deref(),
            Some("data")
        );
        let retention = spec.persistent_volume_claim_retention_policy.unwrap();
        assert_eq!(retention.when_deleted.as_deref(), Some("Delete"));
        let pod = spec.template.spec.unwrap();
        assert!(
            !pod.volumes.unwrap().iter().any(|v| v.name == DATA_VOLUME),
            "data is the PVC"
        );

        c.persistence.as_mut().unwrap().reclaim_policy = ReclaimPolicy::Retain;
        let s = build(&c, &placed("n1"));
        let retention = s
            .spec
            .unwrap()
            .persistent_volume_claim_retention_policy
            .unwrap();
        assert_eq!(retention.when_deleted.as_deref(), Some("Retain"));
    }

    #[test]
    fn a_moving_member_runs_two_pods_from_its_start_ordinal() {
        let c = cluster("cache", 1, 1);
        let mut s = build(&c, &MemberPlacement::Unplanned);
        assert_eq!(s.spec.as_ref().unwrap().ordinals, None);
        set_ordinals(
            &mut s,
            Ordinals {
                start: 3,
                replicas: 2,
            },
        );
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(spec.ordinals.as_ref().unwrap().start, Some(3));
        assert_eq!(
            Ordinals::of(&s),
            Ordinals {
                start: 3,
                replicas: 2
            }
        );
        assert_eq!(Ordinals::of(&StatefulSet::default()), Ordinals::INITIAL);
    }

    #[test]
    fn existing_claim_templates_are_kept_because_kubernetes_forbids_changing_them() {
        let c = crate::test_support::cluster_with_persistence("cache", 1, 1, "Retain");
        let old = vec![PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                ..Default::default()
            },
            ..Default::default()
        }];
        let s = statefulset(MemberInput {
            cluster: &c,
            owner: &owner(),
            shard: 0,
            member: 0,
            placement: &placed("n1"),
            existing_claim_templates: Some(&old),
            ordinals: Ordinals::INITIAL,
        });
        assert_eq!(s.spec.unwrap().volume_claim_templates, Some(old));
    }

    #[test]
    fn without_persistence_a_restarted_container_starts_as_a_new_node() {
        let c = cluster("cache", 1, 1);
        let s = build(&c, &placed("n1"));
        let container = &s.spec.unwrap().template.spec.unwrap().containers[0];
        let command = container.command.clone().unwrap();
        assert_eq!(command[0], "sh");
        assert_eq!(command[2], FORGET_IDENTITY_SCRIPT);
        let p = crate::test_support::cluster_with_persistence("cache", 1, 1, "Retain");
        let s = build(&p, &placed("n1"));
        let container = &s.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(container.command, Some(vec!["valkey-server".to_string()]));
    }

    #[test]
    fn a_volume_that_valkey_writes_nothing_to_starts_as_a_new_node_too() {
        let mut c = crate::test_support::cluster_with_persistence("cache", 1, 1, "Retain");
        c.config.insert("appendonly".into(), "no".into());
        c.config.insert("save".into(), "".into());
        let s = build(&c, &placed("n1"));
        let container = &s.spec.unwrap().template.spec.unwrap().containers[0];
        let command = container.command.clone().unwrap();
        assert_eq!(command[0], "sh");
        assert_eq!(command[2], FORGET_IDENTITY_SCRIPT);
    }

    struct ScriptRun {
        out: String,
        took: std::time::Duration,
        wiped: bool,
        /// How many times the script asked a replica.
        asked: usize,
        cli_args: String,
    }

    /// Runs the start script with `/data` in a temporary directory, `echo`
    /// for valkey-server and a stand-in `valkey-cli` that answers INFO
    /// replication with `replies` in turn (the last one from then on; nothing
    /// at all, as an unreachable replica, when empty).
    fn run_start_script(nodes_conf: Option<&str>, replies: &[&str]) -> ScriptRun {
        run_script(FORGET_IDENTITY_SCRIPT, &[], nodes_conf, replies)
    }

    /// [`run_start_script`] of `script` with `env`; with `FAIL_TLS` set the
    /// stand-in `valkey-cli` fails every call with `--tls` (a replica that
    /// still speaks plaintext), uncounted.
    fn run_script(
        script: &str,
        env: &[(&str, &str)],
        nodes_conf: Option<&str>,
        replies: &[&str],
    ) -> ScriptRun {
        static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "forget-identity-{}-{}",
            std::process::id(),
            RUN.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let data = dir.join("data");
        let bin = dir.join("bin");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(data.join("dump.rdb"), b"old").unwrap();
        if let Some(text) = nodes_conf {
            std::fs::write(data.join("nodes.conf"), text).unwrap();
        }
        for (i, reply) in replies.iter().enumerate() {
            // `!text`: the stand-in prints `text` alone (an error reply).
            let text = match reply.strip_prefix('!') {
                Some(raw) => format!("{raw}\n"),
                None => format!("# Replication\r\nrole:slave\r\n{reply}\r\n"),
            };
            std::fs::write(dir.join(format!("reply-{i}")), text).unwrap();
        }
        let last = replies.len().saturating_sub(1);
        let cli = format!(
            "#!/bin/sh\ncase \"$*\" in *--tls*) [ -n \"$FAIL_TLS\" ] && exit 1;; esac\n\
             echo \"$@\" >> {d}/args\nn=$(cat {d}/count 2>/dev/null || echo 0)\necho $((n+1)) > {d}/count\n\
             [ $n -gt {last} ] && n={last}\ncat {d}/reply-$n 2>/dev/null\n",
            d = dir.display()
        );
        let cli_path = bin.join("valkey-cli");
        std::fs::write(&cli_path, cli).unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&cli_path)
            .status()
            .unwrap();
        let conf = dir.join("valkey.conf");
        // 400 ms: an unanswering replica is waited for 3 x 0.4 s, in whole seconds.
        std::fs::write(&conf, "port 6379\ncluster-node-timeout 400\n").unwrap();
        let script = script
            .replace("/data", &data.to_string_lossy())
            .replace("exec valkey-server", "exec echo started");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let t = std::time::Instant::now();
        let out = std::process::Command::new("sh")
            .args(["-c", &script, "valkey-server", &conf.to_string_lossy()])
            .env("PATH", path)
            .env_remove("POD_IP")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let took = t.elapsed();
        let wiped = std::fs::read_dir(&data).unwrap().next().is_none();
        let asked = std::fs::read_to_string(dir.join("count"))
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(0);
        let cli_args = std::fs::read_to_string(dir.join("args")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "{out:?}");
        ScriptRun {
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            took,
            wiped,
            asked,
            cli_args,
        }
    }

    const PRIMARY_CONF: &str = "aaaa 10.0.0.1:6379@16379,pod-a myself,master - 0 0 1 connected 0-5460\n\
        bbbb 10.0.0.2:6379@16379,pod-b slave aaaa 0 0 1 connected\n";

    #[test]
    fn a_restarted_primary_listens_only_once_its_replica_follows_another_primary() {
        // The replica names the old primary's address twice, then the promoted one.
        let replies = [
            "master_host:10.0.0.1",
            "master_host:10.0.0.1",
            "master_host:10.0.0.3",
        ];
        let run = run_start_script(Some(PRIMARY_CONF), &replies);
        assert!(
            run.out.contains("not listening while a replica"),
            "{}",
            run.out
        );
        assert!(
            run.out.contains("replica 10.0.0.2:6379 still replicates"),
            "{}",
            run.out
        );
        assert!(run.out.contains("started"), "{}", run.out);
        assert_eq!(run.asked, 3, "{}", run.out);
        assert!(
            run.cli_args
                .contains("-h 10.0.0.2 -p 6379 info replication"),
            "{}",
            run.cli_args
        );
        assert!(
            run.took >= std::time::Duration::from_secs(2),
            "{:?}",
            run.took
        );
        assert!(run.wiped);
    }

    #[test]
    fn a_replica_that_refuses_the_login_is_waited_for_past_the_deadline() {
        // The replica answers but refuses the password for longer than the
        // deadline for silent replicas (3 x 0.4 s): it is alive and may
        // replicate from this address, so the script keeps waiting.
        let replies = [
            "!NOAUTH Authentication required.",
            "!AUTH failed: WRONGPASS invalid username-password pair or user is disabled.",
            "!NOAUTH Authentication required.",
            "master_host:10.0.0.3",
        ];
        let run = run_start_script(Some(PRIMARY_CONF), &replies);
        assert_eq!(run.asked, 4, "{}", run.out);
        assert!(run.out.contains("started"), "{}", run.out);
        assert!(
            run.took >= std::time::Duration::from_secs(3),
            "{:?}",
            run.took
        );
    }

    #[test]
    fn a_tls_member_asks_a_replica_still_on_plaintext_over_plaintext() {
        let script = forget_identity_script_tls();
        assert_ne!(
            script, FORGET_IDENTITY_SCRIPT,
            "the TLS variant is the same"
        );
        let env = [
            ("VALKEY_CLI_ARGS", "--tls --cacert /ca.crt"),
            ("VALKEY_PLAIN_CLI_ARGS", ""),
            ("FAIL_TLS", "1"),
        ];
        let replies = ["master_host:10.0.0.1", "master_host:10.0.0.3"];
        let run = run_script(&script, &env, Some(PRIMARY_CONF), &replies);
        assert!(
            run.out.contains("replica 10.0.0.2:6379 still replicates"),
            "{}",
            run.out
        );
        assert!(run.out.contains("started"), "{}", run.out);
        // Answered over plaintext both times, not waited out as silent.
        assert_eq!(run.asked, 2, "{}", run.out);
        assert!(run.wiped);
    }

    #[test]
    fn a_tls_members_probe_tries_tls_then_plaintext() {
        let mut c = cluster("cache", 3, 1);
        c.tls = crate::test_support::operator_tls(false);
        let s = build(&c, &placed("n1"));
        let container = &s.spec.unwrap().template.spec.unwrap().containers[0];
        let probe = container
            .readiness_probe
            .as_ref()
            .and_then(|p| p.exec.as_ref())
            .and_then(|e| e.command.clone())
            .unwrap();
        assert_eq!(probe[..2], ["sh", "-c"]);
        let tls = probe[2].find("valkey-cli $VALKEY_CLI_ARGS").unwrap();
        let plain = probe[2].find("valkey-cli $VALKEY_PLAIN_CLI_ARGS").unwrap();
        assert!(tls < plain, "{}", probe[2]);
        let env = container.env.clone().unwrap();
        let plain = env.iter().find(|e| e.name == PLAIN_CLI_ARGS_ENV).unwrap();
        let want = if c.auth.enabled { "--user default" } else { "" };
        assert_eq!(plain.value.as_deref(), Some(want));
        assert!(container.command.as_ref().unwrap()[2].contains("$VALKEY_PLAIN_CLI_ARGS"));
    }

    #[test]
    fn a_restarted_primary_waits_for_an_unanswering_replica_only_three_node_timeouts() {
        let run = run_start_script(Some(PRIMARY_CONF), &[]);
        assert!(run.out.contains("started"), "{}", run.out);
        // 3 x 400 ms, in whole seconds.
        assert!(
            run.took >= std::time::Duration::from_secs(1),
            "{:?}",
            run.took
        );
        assert!(
            run.took < std::time::Duration::from_secs(6),
            "{:?}",
            run.took
        );
        assert!(run.wiped);
    }

    #[test]
    fn a_restarted_replica_or_a_primary_without_replicas_starts_at_once() {
        let replica = "bbbb 10.0.0.2:6379@16379 myself,slave aaaa 0 0 1 connected\n";
        let lone = "aaaa 10.0.0.1:6379@16379 myself,master - 0 0 1 connected 0-16383\n";
        for conf in [Some(replica), Some(lone), None] {
            let run = run_start_script(conf, &["master_host:10.0.0.1"]);
            assert!(!run.out.contains("waiting"), "{}", run.out);
            assert!(run.out.contains("started"), "{}", run.out);
            assert_eq!(run.asked, 0);
            assert!(
                run.took < std::time::Duration::from_secs(1),
                "{:?}",
                run.took
            );
            assert!(run.wiped);
        }
    }

    fn containers(c: &ValidatedCluster) -> Vec<Container> {
        build(c, &placed("n1"))
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .containers
    }

    #[test]
    fn the_pod_template_adds_a_sidecar_merges_into_valkey_and_restarts_the_members() {
        let plain = cluster("cache", 3, 2);
        let mut c = plain.clone();
        c.pod_template.sidecars = vec![Container {
            name: "shipper".into(),
            image: Some("shipper:1".into()),
            ..Default::default()
        }];
        c.pod_template.valkey = Some(Container {
            name: CONTAINER.into(),
            env: Some(vec![EnvVar {
                name: "TZ".into(),
                value: Some("UTC".into()),
                value_from: None,
            }]),
            ..Default::default()
        });
        c.pod_template.labels = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let s = build(&c, &placed("n1"));
        let template = &s.spec.as_ref().unwrap().template;
        let pod = template.spec.as_ref().unwrap();
        let names: Vec<_> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, [CONTAINER, "shipper"]);
        let valkey = &pod.containers[0];
        assert!(valkey.env.as_ref().unwrap().iter().any(|e| e.name == "TZ"));
        assert!(
            valkey
                .env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == "POD_IP")
        );
        assert_eq!(valkey.command, containers(&plain)[0].command);
        assert_eq!(
            valkey.security_context,
            containers(&plain)[0].security_context
        );
        let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[LABEL_CLUSTER], "cache");
        assert_ne!(
            annotation(&s, ANNOTATION_RESTART_HASH),
            annotation(&build(&plain, &placed("n1")), ANNOTATION_RESTART_HASH)
        );
    }

    #[test]
    fn the_exporter_runs_beside_valkey_restricted_and_without_probes() {
        let c = cluster_with_exporter("cache", 3, 1);
        let all = containers(&c);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].name, CONTAINER, "Valkey stays the first container");
        let e = &all[1];
        assert_eq!(e.name, "exporter");
        assert_eq!(
            e.image.as_deref(),
            Some(concat!("valkey-operator:", env!("CARGO_PKG_VERSION")))
        );
        assert_eq!(e.command, None, "the image's entrypoint is the operator");
        assert_eq!(
            e.args.clone().unwrap(),
            [
                "exporter",
                "--listen=0.0.0.0:9121",
                "--valkey=127.0.0.1:6379"
            ]
        );
        let ports = e.ports.clone().unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name.as_deref(), Some("metrics"));
        assert_eq!(ports[0].container_port, 9121);
        // Pod readiness is Valkey's alone: no probe that could hold a member
        // back, or restart the exporter and make the pod un-Ready meanwhile.
        assert!(e.readiness_probe.is_none() && e.liveness_probe.is_none());
        assert!(e.startup_probe.is_none());
        // Restricted on its own, whatever the pod's context says.
        let sc = e.security_context.clone().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.run_as_user, Some(65532));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        assert_eq!(
            sc.seccomp_profile.map(|p| p.type_).as_deref(),
            Some("RuntimeDefault")
        );
        let res = e.resources.clone().unwrap();
        assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "10m");
        assert_eq!(res.requests.as_ref().unwrap()["memory"].0, "16Mi");
        assert_eq!(res.limits.as_ref().unwrap()["memory"].0, "64Mi");
    }

    #[test]
    fn the_exporter_logs_in_as_default_with_the_secret_and_speaks_tls_with_the_ca() {
        let mut c = cluster_with_exporter("cache", 3, 1);
        let e = &containers(&c)[1];
        let env = e.env.clone().unwrap();
        assert_eq!(env.len(), 1);
        let secret = env[0]
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .unwrap();
        assert_eq!(env[0].name, PASSWORD_ENV);
        assert_eq!(
            (secret.name.as_str(), secret.key.as_str()),
            ("cache-auth", "password")
        );
        assert!(e.volume_mounts.is_none(), "no TLS, nothing to mount");

        c.auth.enabled = false;
        c.tls = crate::test_support::operator_tls(false);
        let e = &containers(&c)[1];
        assert!(e.env.is_none());
        let args = e.args.clone().unwrap();
        assert!(
            args.contains(&format!("--tls-ca-file={TLS_DIR}/ca.crt")),
            "{args:?}"
        );
        let mounts = e.volume_mounts.clone().unwrap();
        assert_eq!(mounts[0].name, TLS_VOLUME);
        assert_eq!(mounts[0].mount_path, TLS_DIR);
        assert_eq!(mounts[0].read_only, Some(true));
    }

    #[test]
    fn turning_the_exporter_off_leaves_valkey_alone_and_restarts_the_members() {
        let on = cluster_with_exporter("cache", 3, 1);
        let mut off = on.clone();
        off.exporter = None;
        let (with, without) = (containers(&on), containers(&off));
        assert_eq!(without.len(), 1);
        assert_eq!(with[0], without[0], "the Valkey container does not change");
        let hash =
            |c: &ValidatedCluster| annotation(&build(c, &placed("n1")), ANNOTATION_RESTART_HASH);
        assert_ne!(hash(&on), hash(&off));
        let mut resources = on.clone();
        if let Some(e) = resources.exporter.as_mut() {
            e.resources = Default::default();
        }
        assert_ne!(hash(&on), hash(&resources));
    }

    #[test]
    fn an_operator_upgrade_changes_the_exporter_image_but_restarts_nothing() {
        let old = cluster_with_exporter("cache", 3, 1);
        let mut new = old.clone();
        if let Some(e) = new.exporter.as_mut() {
            e.image = "valkey-operator:9.9.9".into();
        }
        let (a, b) = (build(&old, &placed("n1")), build(&new, &placed("n1")));
        assert_eq!(
            annotation(&a, ANNOTATION_RESTART_HASH),
            annotation(&b, ANNOTATION_RESTART_HASH)
        );
        // The template carries the new image: a member restarted for any
        // reason comes back with it.
        assert_eq!(
            b.spec.unwrap().template.spec.unwrap().containers[1]
                .image
                .as_deref(),
            Some("valkey-operator:9.9.9")
        );
    }

    /// A cluster as the e2e suites' manifests make it
    /// (tests/e2e/src/manifest.rs), with `extra` merged into its spec.
    fn from_manifest(name: &str, extra: serde_json::Value) -> ValidatedCluster {
        let mut spec = serde_json::json!({
            "shards": 3,
            "replicas": 1,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let vc: api::ValkeyCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "valkey.rs/v1alpha1",
            "kind": "ValkeyCluster",
            "metadata": {"name": name, "namespace": "e2e-upgrade", "uid": "uid-1"},
            "spec": spec,
        }))
        .unwrap();
        api::v1alpha1::validate(&vc).unwrap()
    }

    #[test]
    fn clusters_made_by_v0_1_0_keep_their_restart_hash_so_an_operator_upgrade_restarts_nothing() {
        // The restart hashes the v0.1.0 operator wrote on these clusters'
        // StatefulSets (the e2e suite operator_upgrade prints them). Fields
        // added to the API since then must hash as before while unset; a
        // change here restarts every member of every such cluster when the
        // new operator takes over. If a release must change running members,
        // change the expected value knowingly and say so in the CHANGELOG.
        let hash =
            |c: &ValidatedCluster| annotation(&build(c, &placed("n1")), ANNOTATION_RESTART_HASH);
        let plain = from_manifest("plain", serde_json::json!({}));
        assert!(plain.external_access.is_none());
        assert_eq!(
            hash(&plain),
            "dd719296d8a5bdfd",
            "plain 3x1, auth by default"
        );
        let secure = from_manifest(
            "secure",
            serde_json::json!({"tls": {"enabled": true}, "exporter": {"enabled": true}}),
        );
        assert_eq!(
            hash(&secure),
            "0367230e3e10b87b",
            "TLS, auth and the exporter"
        );
        // Nor do the shard, the member or the placement enter it.
        let other = statefulset(MemberInput {
            cluster: &secure,
            owner: &owner(),
            shard: 0,
            member: 0,
            placement: &placed("n9"),
            existing_claim_templates: None,
            ordinals: Ordinals::INITIAL,
        });
        assert_eq!(annotation(&other, ANNOTATION_RESTART_HASH), hash(&secure));
    }

    #[test]
    fn without_persistence_data_is_an_empty_dir() {
        let c = cluster("cache", 1, 0);
        let s = build(&c, &placed("n1"));
        let spec = s.spec.unwrap();
        assert!(spec.volume_claim_templates.is_none());
        let vols = spec.template.spec.unwrap().volumes.unwrap();
        assert!(
            vols.iter()
                .any(|v| v.name == DATA_VOLUME && v.empty_dir.is_some())
        );
    }
}
