//! `valkey-operator crd`: prints the CustomResourceDefinitions generated from
//! the Rust types: every kind, as one multi-document YAML stream that
//! `kubectl apply -f -` takes, or one kind with `--kind`.
//! `deploy/crd/valkeycluster.yaml`, `deploy/crd/valkeybackup.yaml`,
//! `deploy/crd/valkeybackupschedule.yaml` and `deploy/crd/valkeyreplication.yaml`
//! are the outputs of `--kind cluster`, `--kind backup`, `--kind schedule` and
//! `--kind replication`, committed; tests fail when they
//! differ.

use std::io::Write;
use thiserror::Error;

/// Why the CRD could not be printed.
#[derive(Debug, Error)]
pub enum CrdError {
    #[error("encoding the CRD as YAML: {0}")]
    Encode(#[from] api::CrdYamlError),
    #[error("writing the CRD: {0}")]
    Write(#[from] std::io::Error),
}

impl CrdError {
    /// The reader went away (`valkey-operator crd | head`): not an error
    /// worth a message, as for any filter.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CrdError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Which CustomResourceDefinition to print.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CrdKind {
    /// Every kind, one YAML document each (`---` between them).
    #[default]
    All,
    /// `ValkeyCluster` (deploy/crd/valkeycluster.yaml).
    Cluster,
    /// `ValkeyBackup` (deploy/crd/valkeybackup.yaml).
    Backup,
    /// `ValkeyBackupSchedule` (deploy/crd/valkeybackupschedule.yaml).
    Schedule,
    /// `ValkeyReplication` (deploy/crd/valkeyreplication.yaml).
    Replication,
}

/// `valkey-operator crd` arguments.
#[derive(Debug, clap::Args)]
pub struct CrdArgs {
    /// The kind whose CRD to print.
    #[arg(long, value_enum, default_value_t = CrdKind::All)]
    pub kind: CrdKind,
}

/// The YAML of `kind`.
pub fn yaml(kind: CrdKind) -> Result<String, CrdError> {
    Ok(match kind {
        CrdKind::Cluster => api::crd_yaml()?,
        CrdKind::Backup => api::backup_crd_yaml()?,
        CrdKind::Schedule => api::schedule_crd_yaml()?,
        CrdKind::Replication => api::replication_crd_yaml()?,
        CrdKind::All => format!(
            "{}---\n{}---\n{}---\n{}",
            api::crd_yaml()?,
            api::backup_crd_yaml()?,
            api::schedule_crd_yaml()?,
            api::replication_crd_yaml()?
        ),
    })
}

/// Writes the CRD YAML of `kind` to `out`.
pub fn write(kind: CrdKind, out: &mut impl Write) -> Result<(), CrdError> {
    out.write_all(yaml(kind)?.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Which CustomResourceDefinition `crd-reference` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReferenceKind {
    /// `ValkeyCluster` (docs/reference/valkeycluster.md).
    Cluster,
    /// `ValkeyBackup` (docs/reference/valkeybackup.md).
    Backup,
    /// `ValkeyBackupSchedule` (docs/reference/valkeybackupschedule.md).
    Schedule,
    /// `ValkeyReplication` (docs/reference/valkeyreplication.md).
    Replication,
    /// Every condition and event reason (docs/reference/reasons.md).
    Reasons,
}

/// `valkey-operator crd-reference` arguments.
#[derive(Debug, clap::Args)]
pub struct CrdReferenceArgs {
    /// The kind whose reference to print.
    #[arg(long, value_enum)]
    pub kind: ReferenceKind,
}

/// Why the reference could not be printed.
#[derive(Debug, Error)]
pub enum ReferenceError {
    #[error("encoding the CRD as JSON: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("writing the reference: {0}")]
    Write(#[from] std::io::Error),
}

impl ReferenceError {
    /// As [`CrdError::is_broken_pipe`].
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, ReferenceError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// The Markdown reference of `kind`, generated from the same CRD `crd` prints.
pub fn reference(kind: ReferenceKind) -> Result<String, ReferenceError> {
    let crd = match kind {
        ReferenceKind::Cluster => serde_json::to_value(api::crd())?,
        ReferenceKind::Backup => serde_json::to_value(api::backup_crd())?,
        ReferenceKind::Schedule => serde_json::to_value(api::schedule_crd())?,
        ReferenceKind::Replication => serde_json::to_value(api::replication_crd())?,
        ReferenceKind::Reasons => return Ok(crate::reasons::markdown()),
    };
    Ok(crate::crd_reference::render(&crd))
}

/// Writes the Markdown reference of `kind` to `out`.
pub fn write_reference(kind: ReferenceKind, out: &mut impl Write) -> Result<(), ReferenceError> {
    out.write_all(reference(kind)?.as_bytes())?;
    out.flush()?;
    Ok(())
}
