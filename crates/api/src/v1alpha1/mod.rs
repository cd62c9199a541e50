//! `valkey.rs/v1alpha1`: the first served version of the API.
//!
//! - [`backup`]: `ValkeyBackup`, one backup to an object store;
//! - [`replication`]: `ValkeyReplication`, one primary and its replicas;
//! - [`schedule`]: `ValkeyBackupSchedule`, backups on a cron schedule;
//! - [`spec`]: the user's request, with schema bounds and CEL rules;
//! - [`status`]: what the operator observed and did;
//! - [`defaults`]: default values, shared by serde and the schema;
//! - [`extensions`]: `spec.podTemplate` and `spec.modules`, checked;
//! - [`security`]: the restricted security contexts of member pods;
//! - [`rules`]: the CEL rules, `FieldError` and name syntax every module shares;
//! - [`schema`]: how the CRD schema carries the Kubernetes types it embeds;
//! - [`validation`]: the same rules in Rust, producing a [`ValidatedCluster`].

pub mod backup;
pub mod defaults;
pub mod extensions;
pub mod replication;
pub mod rules;
pub mod schedule;
pub mod schema;
pub mod security;
pub mod spec;
pub mod status;
pub mod validation;
pub mod versions;

pub use backup::{
    BACKUP_FINALIZER, BackupDeletionPolicy, BackupPhase, S3Location, ValkeyBackup,
    ValkeyBackupSpec, ValkeyBackupStatus, backup_folder,
};
pub use extensions::{ValidatedModule, ValidatedPodTemplate};
pub use replication::{
    ReplicationMemberStatus, ValkeyReplication, ValkeyReplicationSpec, ValkeyReplicationStatus,
};
pub use schedule::{
    LABEL_SCHEDULE, ValkeyBackupSchedule, ValkeyBackupScheduleSpec, ValkeyBackupScheduleStatus,
};
pub use spec::*;
pub use status::*;
pub use validation::{
    FieldError, MemberRequest, OperatorPods, ResolvedSpreadConstraint, RestoreSource, SetKind,
    ValidatedCluster, ValidatedExporter, ValidatedNetworkPolicy, ValidatedTls, ValidatedUser,
    ValidationError, ValidationSettings, default_exporter_resources, validate,
    validate_replication, validate_with,
};
