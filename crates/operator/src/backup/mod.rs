//! Backups of ValkeyClusters to object storage (`ValkeyBackup`):
//!
//! - [`controller`]: the ValkeyBackup controller (checks, the Job, status, events);
//! - [`job`]: the Job that takes one backup (pure builder);
//! - [`take`]: `valkey-operator backup`, what runs in that Job;
//! - [`manifest`]: what a backup holds (`manifest.json`);
//! - [`store`]: the object store client.

pub mod controller;
pub mod job;
pub mod manifest;
pub mod store;
pub mod take;
