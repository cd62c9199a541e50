//! `valkey-operator crd`: prints the CustomResourceDefinitions generated from
//! the Rust types: every kind, as one multi-document YAML stream that
//! `kubectl apply -f -` takes, or one kind with `--kind`.
//! `deploy/crd/valkeycluster.yaml` and `deploy/crd/valkeybackup.yaml` are the
//! outputs of `--kind cluster` and `--kind backup`, committed; tests fail when
//! they differ.

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
        CrdKind::All => format!("{}---\n{}", api::crd_yaml()?, api::backup_crd_yaml()?),
    })
}

/// Writes the CRD YAML of `kind` to `out`.
pub fn write(kind: CrdKind, out: &mut impl Write) -> Result<(), CrdError> {
    out.write_all(yaml(kind)?.as_bytes())?;
    out.flush()?;
    Ok(())
}
