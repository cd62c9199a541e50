//! `valkey-operator crd`: prints the CustomResourceDefinition generated from the
//! Rust types. `deploy/crd/valkeycluster.yaml` is this output, committed; a test
//! fails when they differ.

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

/// Writes the CRD YAML to `out`.
pub fn write(out: &mut impl Write) -> Result<(), CrdError> {
    out.write_all(api::crd_yaml()?.as_bytes())?;
    out.flush()?;
    Ok(())
}
