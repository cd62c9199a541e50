//! Backups of ValkeyClusters to object storage (`ValkeyBackup`):
//!
//! - [`controller`]: the ValkeyBackup controller (checks, the Job, status, events);
//! - [`job`]: the Job that takes one backup (pure builder);
//! - [`take`]: `valkey-operator backup`, what runs in that Job;
//! - [`manifest`]: what a backup holds (`manifest.json`);
//! - [`restore`]: a ValkeyCluster's `spec.restore` (is the backup usable,
//!   what the members need, the `Restored` condition);
//! - [`load`]: `valkey-operator restore`, the init container that loads a
//!   shard's RDB;
//! - [`schedule`]: the ValkeyBackupSchedule controller (runs, retention);
//! - [`store`]: the object store client.

pub mod controller;
pub mod job;
pub mod load;
pub mod manifest;
pub mod restore;
pub mod schedule;
pub mod store;
pub mod take;
