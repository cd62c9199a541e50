//! `ValkeyBackup`: one backup of a ValkeyCluster's data to an S3-compatible
//! object store, taken by a Job the operator runs (see docs/guide/backups.md).
//!
//! The objects land under `<prefix>/<namespace>/<name>/` in the bucket: one
//! RDB per shard (`shard-<i>.rdb`) and `manifest.json`, written last, so a
//! backup whose manifest is missing was never complete.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A backup of a ValkeyCluster, taken once.
// Two printer columns are strings: `type_ = "string"` repeats by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(crates(kube_core = "::kube_core", kube = "::kube_derive"))]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyBackup",
    namespaced,
    status = "ValkeyBackupStatus",
    shortname = "vkb",
    category = "valkey",
    derive = "PartialEq",
    doc = "A backup of a ValkeyCluster's data to an S3-compatible object store.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        description = "The ValkeyCluster backed up",
        json_path = ".spec.cluster"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        description = "Pending, Running, Completed or Failed",
        json_path = ".status.phase"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupSpec {
    /// Name of the ValkeyCluster (in this namespace) to back up. Fixed once set.
    #[x_kube(validation = Rule::new("self == oldSelf").message("cluster is immutable"))]
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// Where the backup goes. Fixed once set.
    #[x_kube(validation = Rule::new("self == oldSelf").message("s3 is immutable"))]
    pub s3: S3Location,
    /// What deleting this ValkeyBackup does to its objects in the bucket:
    /// `Delete` (the default) removes them, `Retain` keeps them. It may be
    /// changed at any time, e.g. to `Retain` before deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<BackupDeletionPolicy>,
}

/// What deleting a ValkeyBackup does to its objects in the bucket.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum BackupDeletionPolicy {
    /// The objects are deleted with the ValkeyBackup.
    #[default]
    Delete,
    /// The objects stay in the bucket.
    Retain,
}

/// An S3-compatible bucket and the key prefix the backup's objects go under.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct S3Location {
    /// URL of the S3 API, e.g. `https://s3.eu-west-1.amazonaws.com` or
    /// `http://seaweedfs.storage:8333`. Requests use the path style
    /// (`<endpoint>/<bucket>/<key>`).
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')")
        .message("endpoint must be an http:// or https:// URL"))]
    pub endpoint: String,
    /// The bucket; it must exist.
    #[schemars(length(min = 1, max = 255))]
    pub bucket: String,
    /// Key prefix inside the bucket (no leading or trailing `/` needed). The
    /// objects go under `<prefix>/<namespace>/<backup name>/`.
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub prefix: String,
    /// Region the store signs requests for. Unset: `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Name of a Secret in this namespace with the keys `AWS_ACCESS_KEY_ID`
    /// and `AWS_SECRET_ACCESS_KEY`.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_secret: String,
}

/// Where a backup is.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum BackupPhase {
    /// Accepted; its Job is not running yet.
    #[default]
    Pending,
    /// Its Job runs.
    Running,
    /// Every shard and the manifest are in the bucket.
    Completed,
    /// No complete backup was written; `message` says why.
    Failed,
}

impl BackupPhase {
    /// Completed and Failed are final: the backup is never taken again.
    pub fn is_final(self) -> bool {
        matches!(self, BackupPhase::Completed | BackupPhase::Failed)
    }
}

/// What the operator observed of the backup.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupStatus {
    /// Pending, Running, Completed or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// Why the backup is in its phase, for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the backup's Job was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the backup reached Completed or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The Job that takes the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Key of the manifest in the bucket (once Completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// Bytes of RDB written, all shards (once Completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Shards backed up (once Completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
}

/// Finalizer on a ValkeyBackup: its objects are deleted (or, with
/// `deletionPolicy: Retain`, kept) before it goes.
pub const BACKUP_FINALIZER: &str = "valkey.rs/backup-objects";

/// The folder of a backup's objects in its bucket:
/// `<prefix>/<namespace>/<name>` (no leading or trailing `/`).
pub fn backup_folder(prefix: &str, namespace: &str, name: &str) -> String {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        format!("{namespace}/{name}")
    } else {
        format!("{prefix}/{namespace}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_ignores_slashes_around_the_prefix() {
        assert_eq!(backup_folder("/b/", "ns", "x"), "b/ns/x");
        assert_eq!(backup_folder("", "ns", "x"), "ns/x");
        assert_eq!(backup_folder("a/b", "ns", "x"), "a/b/ns/x");
    }

    #[test]
    fn only_completed_and_failed_are_final() {
        assert!(BackupPhase::Completed.is_final());
        assert!(BackupPhase::Failed.is_final());
        assert!(!BackupPhase::Running.is_final());
        assert!(!BackupPhase::Pending.is_final());
    }
}
