//! `ValkeyBackupSchedule`: backups of a ValkeyCluster on a cron schedule,
//! with retention. Each run creates one `ValkeyBackup` (named
//! `<schedule>-<YYYYMMDDHHMM>`, labelled `valkey.rs/schedule` and
//! `valkey.rs/cluster`); backups beyond `keep` are deleted, their objects with
//! them unless their `deletionPolicy` is `Retain`.
//!
//! The backups it made are not owned by the schedule: deleting a schedule
//! stops new runs and keeps every backup (and its data).

use super::backup::{BackupDeletionPolicy, S3Location};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Label on a scheduled ValkeyBackup: the ValkeyBackupSchedule that made it.
pub const LABEL_SCHEDULE: &str = "valkey.rs/schedule";

/// The longest schedule name: `<schedule>-<YYYYMMDDHHMM>` must stay within
/// the longest ValkeyBackup name (its Job's name `<backup>-backup` is a
/// pod label value, at most 63 characters).
pub const MAX_SCHEDULE_NAME: usize = 63 - "-backup".len() - "-YYYYMMDDHHMM".len();

/// Backups of a ValkeyCluster on a schedule, with retention.
// Three printer columns are strings: `type_ = "string"` repeats by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[kube(crates(kube_core = "::kube_core", kube = "::kube_derive"))]
#[kube(
    group = "valkey.rs",
    version = "v1alpha1",
    kind = "ValkeyBackupSchedule",
    namespaced,
    status = "ValkeyBackupScheduleStatus",
    shortname = "vkbs",
    category = "valkey",
    derive = "PartialEq",
    doc = "Backups of a ValkeyCluster on a cron schedule, with retention.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        description = "The ValkeyCluster backed up",
        json_path = ".spec.cluster"
    ),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        description = "Cron schedule (UTC)",
        json_path = ".spec.schedule"
    ),
    printcolumn(
        name = "Last success",
        type_ = "date",
        json_path = ".status.lastSuccessfulTime"
    ),
    printcolumn(
        name = "Last backup",
        type_ = "string",
        json_path = ".status.lastBackup"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupScheduleSpec {
    /// Name of the ValkeyCluster (in this namespace) to back up.
    #[schemars(length(min = 1, max = 63))]
    pub cluster: String,
    /// When to take a backup: a standard cron expression of five fields
    /// (minute, hour, day of month, month, day of week) in UTC, e.g.
    /// `0 3 * * *`, or `@hourly`, `@daily`, `@weekly`, `@monthly`,
    /// `@yearly`. A run missed while the operator was away is taken once
    /// when it is back; a run due while the previous backup still runs is
    /// skipped (an event says so).
    #[schemars(length(min = 1, max = 128))]
    pub schedule: String,
    /// Completed backups of this schedule to keep (the newest); older ones
    /// are deleted. Failed backups are kept only while they are newer than
    /// the newest completed one, at most this many.
    #[serde(default = "default_keep")]
    #[schemars(range(min = 1, max = 1000))]
    pub keep: u32,
    /// No new runs while true (backups already made are kept and pruned as
    /// usual).
    #[serde(default)]
    pub suspend: bool,
    /// Where each backup goes (as a ValkeyBackup's `spec.s3`).
    pub s3: S3Location,
    /// The `deletionPolicy` of each backup made: `Delete` (default) removes
    /// a pruned or deleted backup's objects from the bucket, `Retain` keeps
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<BackupDeletionPolicy>,
}

fn default_keep() -> u32 {
    7
}

/// What the operator observed of the schedule.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(crates(kube_core = "::kube_core"))]
#[serde(rename_all = "camelCase")]
pub struct ValkeyBackupScheduleStatus {
    /// The last run: when a backup was due (made or skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// The ValkeyBackup the last run made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<String>,
    /// When the newest Completed backup of this schedule completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The newest Completed backup of this schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<String>,
    /// When the next run is due (unset while suspended or invalid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// Why the schedule does not run (an invalid cron expression), for a
    /// person; unset when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
