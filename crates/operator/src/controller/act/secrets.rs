//! Act, Secrets: the reads and server-side applies the password, TLS and
//! user steps share.

use crate::controller::{Context, Error};
use api::constants::FIELD_MANAGER;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};

/// The Secret `name`, or `None` when it does not exist.
pub async fn read(api: &Api<Secret>, name: &str) -> Result<Option<Secret>, Error> {
    api.get_opt(name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.to_string(),
        source,
    })
}

/// Server-side applies `secret` (its metadata, type and data), unless a
/// Secret of that name exists that the cluster does not own: that one is
/// refused (`NotOwned`), not taken over by the forced apply (the garbage
/// collector would delete it with the cluster). Writes are rare (a change),
/// so the GET this costs is too.
pub async fn apply(ctx: &Context, api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    if let Some(existing) = read(api, &name).await?
        && !super::apply::same_owner(&existing.metadata, &secret.metadata)
    {
        return Err(Error::NotOwned {
            kind: "Secret",
            name,
        });
    }
    ctx.metrics.api_write("Secret", "apply");
    let mut body = secret.clone();
    body.metadata.managed_fields = None;
    let value = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": body.metadata,
        "type": body.type_,
        "data": body.data,
    });
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await
    .map_err(|source| Error::Apply {
        kind: "Secret",
        name,
        source,
    })?;
    Ok(())
}
