//! Act, Secrets: the reads and server-side applies the password, TLS and
//! user steps share.

use crate::context::Context;
use crate::error::Error;
use api::constants::{FIELD_MANAGER, LABEL_CLUSTER};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

/// The Secret `name`, or `None` when it does not exist: from the
/// owned-object cache when it holds it (and has seen this instance's last
/// write of it), else read live. A steady reconcile reads none live.
pub async fn read(ctx: &Context, api: &Api<Secret>, name: &str) -> Result<Option<Secret>, Error> {
    let ns = api.namespace().unwrap_or_default();
    if let Some(cached) = ctx.cached_secret(ns, name) {
        return Ok(Some(cached));
    }
    let live = api.get_opt(name).await.map_err(|source| Error::Read {
        kind: "Secret",
        name: name.to_string(),
        source,
    })?;
    // Whatever the cache says, it must reach this version before it is
    // read again (it may lag behind a write of this instance or another's).
    // A Secret without the cluster label (one the user named) is never in
    // the cache: nothing to guard, nothing to keep.
    let cacheable = live
        .as_ref()
        .is_none_or(|s| s.labels().contains_key(LABEL_CLUSTER));
    if cacheable {
        let version = live
            .as_ref()
            .and_then(|s| s.metadata.resource_version.clone());
        ctx.secret_seen(ns, name, version);
    }
    Ok(live)
}

/// Server-side applies `secret` (its metadata, type and data), unless a
/// Secret of that name exists that the cluster does not own: that one is
/// refused (`NotOwned`), not taken over by the forced apply (the garbage
/// collector would delete it with the cluster). Writes are rare (a change),
/// so the GET this costs is too.
pub async fn apply(ctx: &Context, api: &Api<Secret>, secret: &Secret) -> Result<(), Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    if let Some(existing) = read(ctx, api, &name).await?
        && !crate::apply::same_owner(&existing.metadata, &secret.metadata)
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
    let written = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&value),
        )
        .await
        .map_err(|source| Error::Apply {
            kind: "Secret",
            name: name.clone(),
            source,
        })?;
    let ns = api.namespace().unwrap_or_default();
    ctx.secret_seen(ns, &name, written.metadata.resource_version);
    Ok(())
}
