//! The Job that takes one backup (pure): `valkey-operator backup` from the
//! operator's own image, one pod, never restarted (a snapshot cut short is
//! taken again by a new ValkeyBackup, not retried into a half-written folder).
//!
//! Why a Job rather than the operator process: a backup streams gigabytes for
//! minutes; in its own pod it costs the operator no memory, no connection slot
//! and no reconcile time, so one tenant's backup never stalls the others, and
//! a backup killed with its pod harms nothing (the manifest is written last).

use api::constants::FIELD_MANAGER;
use api::v1alpha1::ValkeyBackup;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, KeyToPath, PodSpec, PodTemplateSpec, SecretKeySelector,
    SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;

/// Label on a backup's Job and pod: the ValkeyBackup's name.
pub const LABEL_BACKUP: &str = "valkey.rs/backup";

/// The longest ValkeyBackup name: its Job's name (`<name>-backup`) becomes a
/// pod label value, at most 63 characters.
pub const MAX_NAME: usize = 63 - "-backup".len();

/// `<backup>-backup`.
pub fn job_name(backup: &str) -> String {
    format!("{backup}-backup")
}

fn secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_string(),
                key: key.to_string(),
                optional: Some(optional),
            }),
            ..Default::default()
        }),
    }
}

/// Where the Job finds the CA its TLS connections trust.
const TLS_DIR: &str = "/etc/valkey-backup/tls";

/// The Job of `backup`, run from `image` (the operator's own). With
/// `tls_secret` (a TLS cluster's serving Secret), its `ca.crt` is mounted and
/// the members are reached over TLS trusting it (the members ask no client
/// certificate: `tls-auth-clients optional`; the login is the password).
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn build(backup: &ValkeyBackup, image: &str, tls_secret: Option<&str>) -> Job {
    let name = backup.name_any();
    let namespace = backup.namespace().unwrap_or_default();
    let spec = &backup.spec;
    let labels = BTreeMap::from([
        (LABEL_BACKUP.to_string(), name.clone()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
    ]);
    let mut args = vec![
        "backup".to_string(),
        format!("--namespace={namespace}"),
        format!("--cluster={}", spec.cluster),
        format!("--name={name}"),
        format!(
            "--seed={}.{namespace}.svc:{}",
            resources::headless_service_name(&spec.cluster),
            api::constants::VALKEY_PORT
        ),
        format!("--endpoint={}", spec.s3.endpoint),
        format!("--bucket={}", spec.s3.bucket),
        format!("--prefix={}", spec.s3.prefix),
    ];
    if let Some(region) = &spec.s3.region {
        args.push(format!("--region={region}"));
    }
    let (volumes, mounts) = match tls_secret {
        Some(secret) => {
            args.push(format!("--tls-ca-file={TLS_DIR}/ca.crt"));
            (
                vec![Volume {
                    name: "tls".to_string(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(secret.to_string()),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_string(),
                            path: "ca.crt".to_string(),
                            mode: None,
                        }]),
                        default_mode: Some(0o444),
                        optional: Some(false),
                    }),
                    ..Default::default()
                }],
                vec![VolumeMount {
                    name: "tls".to_string(),
                    mount_path: TLS_DIR.to_string(),
                    read_only: Some(true),
                    ..Default::default()
                }],
            )
        }
        None => (Vec::new(), Vec::new()),
    };
    let secret = &spec.s3.credentials_secret;
    let container = Container {
        name: "backup".to_string(),
        image: Some(image.to_string()),
        args: Some(args),
        env: Some(vec![
            secret_env("AWS_ACCESS_KEY_ID", secret, "AWS_ACCESS_KEY_ID", false),
            secret_env(
                "AWS_SECRET_ACCESS_KEY",
                secret,
                "AWS_SECRET_ACCESS_KEY",
                false,
            ),
            // The members' replication user may run SYNC and nothing
            // administrative; a cluster without auth has no password to give.
            secret_env(
                "VALKEY_REPLICATION_PASSWORD",
                &format!("{}-users", spec.cluster),
                "replication-password",
                true,
            ),
        ]),
        security_context: Some(api::v1alpha1::security::exporter_security_context()),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        ..Default::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&name)),
            namespace: Some(namespace),
            labels: Some(labels.clone()),
            owner_references: backup.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: (!volumes.is_empty()).then_some(volumes),
                    restart_policy: Some("Never".to_string()),
                    security_context: Some(api::v1alpha1::security::default_pod_security_context()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use api::v1alpha1::{S3Location, ValkeyBackupSpec};

    fn backup() -> ValkeyBackup {
        let mut b = ValkeyBackup::new(
            "nightly",
            ValkeyBackupSpec {
                cluster: "c1".into(),
                s3: S3Location {
                    endpoint: "http://s3:8333".into(),
                    bucket: "bk".into(),
                    prefix: "p".into(),
                    region: None,
                    credentials_secret: "s3-creds".into(),
                },
                deletion_policy: None,
            },
        );
        b.metadata.namespace = Some("ns".into());
        b.metadata.uid = Some("u1".into());
        b
    }

    #[test]
    fn the_job_runs_once_owned_by_its_backup_with_the_credentials_from_secrets() {
        let job = build(&backup(), "img:1", None);
        assert_eq!(job.metadata.name.as_deref(), Some("nightly-backup"));
        let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("ValkeyBackup", Some(true))
        );
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("img:1"));
        let args = c.args.as_ref().unwrap();
        assert_eq!(args[0], "backup");
        assert!(
            args.contains(&"--seed=c1-headless.ns.svc:6379".to_string()),
            "{args:?}"
        );
        let env = c.env.as_ref().unwrap();
        // No secret value is ever in the Job itself.
        assert!(env.iter().all(|e| e.value.is_none()));
        let from = |n: &str| {
            let r = env.iter().find(|e| e.name == n).unwrap();
            let s = r
                .value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap();
            (s.name.clone(), s.key.clone())
        };
        assert_eq!(
            from("AWS_ACCESS_KEY_ID"),
            ("s3-creds".into(), "AWS_ACCESS_KEY_ID".into())
        );
        assert_eq!(
            from("VALKEY_REPLICATION_PASSWORD"),
            ("c1-users".into(), "replication-password".into())
        );
    }

    #[test]
    fn a_tls_clusters_backup_trusts_the_ca_of_its_serving_secret() {
        let job = build(&backup(), "img:1", Some("c1-tls"));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let c = &pod.containers[0];
        assert!(
            c.args
                .as_ref()
                .unwrap()
                .contains(&"--tls-ca-file=/etc/valkey-backup/tls/ca.crt".to_string())
        );
        let v = &pod.volumes.as_ref().unwrap()[0];
        let secret = v.secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("c1-tls"));
        // Only the CA: the Job never sees the members' private key.
        assert_eq!(secret.items.as_ref().unwrap()[0].key, "ca.crt");
        assert_eq!(c.volume_mounts.as_ref().unwrap()[0].read_only, Some(true));
        assert!(
            build(&backup(), "img:1", None)
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .volumes
                .is_none()
        );
    }
}
