//! Act, TLS: the Secrets `spec.tls` needs, and the CA the operator trusts
//! when it connects to the members.
//!
//! Without `secretName` the operator runs the CA ([`crate::builders::tls`]):
//! it creates `<cluster>-tls-ca-key` once (never overwritten: every issued
//! certificate chains to it), keeps `<cluster>-tls-ca` equal to its
//! certificate, and (re)issues `<cluster>-tls` when [`tls::issue_reason`]
//! says so. With `secretName` it only reads the user's Secret; a missing
//! Secret or key is a condition the cluster waits in (`TLSSecretMissing`),
//! like a missing password.

use super::secrets;
use crate::builders::secret::secret_text;
use crate::builders::tls::{self, IssuedFacts};
use crate::controller::events::{Events, reason};
use crate::controller::observe::kube::KubeView;
use crate::controller::observe::pods::PodFacts;
use crate::controller::{Context, Error};
use api::ValidatedCluster;
use api::constants::{
    FIELD_MANAGER, TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY, tls_ca_key_secret_name,
    tls_ca_secret_name,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, PostParams};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Whether the members speak TLS, and the CA to trust when they do.
pub enum TlsState {
    Off,
    /// The CA certificates (PEM) the members' certificate chains to.
    Ready(Vec<u8>),
    /// The user's Secret (or one of its keys) is missing; the message says which.
    Missing(String),
}

impl TlsState {
    pub fn ca_pem(&self) -> Option<&[u8]> {
        match self {
            TlsState::Ready(ca) => Some(ca.as_slice()),
            _ => None,
        }
    }

    /// What keeps the cluster from converging, as (reason, message).
    pub fn blocker(&self) -> Option<(String, String)> {
        match self {
            TlsState::Missing(m) => Some((reason::TLS_SECRET_MISSING.to_string(), m.clone())),
            _ => None,
        }
    }
}

/// The IPs of every member pod (and new copy) that has one: the serving
/// certificate must name them.
pub fn member_ips(view: &KubeView) -> BTreeSet<IpAddr> {
    view.members
        .values()
        .chain(view.surges.values())
        .filter_map(|p| PodFacts::of(p).ip)
        .collect()
}

/// Makes sure the TLS Secrets exist and are current; returns the CA.
pub async fn ensure(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    view: &KubeView,
    now_unix: i64,
    events: &Events<'_>,
) -> Result<TlsState, Error> {
    let Some(settings) = &cluster.tls else {
        return Ok(TlsState::Off);
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    if !settings.operator_managed {
        return user_secret(&api, &settings.secret_name).await;
    }
    let ca = ensure_ca(ctx, cluster, owner, &api, now_unix, events).await?;
    let public = secrets::read(&api, &tls_ca_secret_name(&cluster.name)).await?;
    if public
        .as_ref()
        .and_then(|s| secret_text(s, TLS_CA_KEY))
        .as_deref()
        != Some(ca.cert_pem.as_str())
    {
        secrets::apply(ctx, &api, &tls::ca_secret(cluster, owner, &ca.cert_pem)).await?;
    }
    let existing = secrets::read(&api, &settings.secret_name).await?;
    let facts = existing.as_ref().map(IssuedFacts::of);
    let ips = member_ips(view);
    if let Some(why) = tls::issue_reason(facts.as_ref(), &ca.cert_pem, &ips, now_unix) {
        let issued = tls::issue(cluster, &ca, &ips, now_unix).map_err(Error::Tls)?;
        secrets::apply(
            ctx,
            &api,
            &tls::serving_secret(cluster, owner, &ca.cert_pem, &issued),
        )
        .await?;
        events
            .normal(
                reason::CERTIFICATE_ISSUED,
                "IssueCertificate",
                format!(
                    "issued the members' certificate in Secret {} ({why}; {} pod IPs)",
                    settings.secret_name,
                    ips.len()
                ),
            )
            .await;
    }
    Ok(TlsState::Ready(ca.cert_pem.into_bytes()))
}

/// Reads the CA, creating it when absent (never overwriting it).
async fn ensure_ca(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    api: &Api<Secret>,
    now_unix: i64,
    events: &Events<'_>,
) -> Result<tls::Ca, Error> {
    let name = tls_ca_key_secret_name(&cluster.name);
    if let Some(secret) = secrets::read(api, &name).await? {
        return tls::ca_of(&secret).ok_or_else(|| {
            Error::Tls(tls::TlsError::BadCa {
                secret: name.clone(),
                message: format!("it lacks {TLS_CA_KEY} or {}", tls::CA_PRIVATE_KEY),
            })
        });
    }
    let ca = tls::new_ca(cluster, now_unix).map_err(Error::Tls)?;
    ctx.metrics.api_write("Secret", "create");
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api
        .create(&pp, &tls::ca_key_secret(cluster, owner, &ca))
        .await
    {
        Ok(_) => {
            events
                .normal(
                    reason::CA_CREATED,
                    "CreateCertificateAuthority",
                    format!("created the cluster's CA in Secret {name}"),
                )
                .await;
            Ok(ca)
        }
        // Created meanwhile (another reconcile, a restart): use that one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = secrets::read(api, &name).await?;
            secret.as_ref().and_then(tls::ca_of).ok_or_else(|| {
                Error::Tls(tls::TlsError::BadCa {
                    secret: name.clone(),
                    message: "created concurrently but unreadable".into(),
                })
            })
        }
        Err(source) => Err(Error::CreateSecret { name, source }),
    }
}

/// The user's Secret: `ca.crt`, `tls.crt` and `tls.key` must be there.
async fn user_secret(api: &Api<Secret>, name: &str) -> Result<TlsState, Error> {
    let Some(secret) = secrets::read(api, name).await? else {
        return Ok(TlsState::Missing(format!(
            "Secret {name} named by spec.tls.secretName does not exist"
        )));
    };
    for key in [TLS_CERT_KEY, TLS_KEY_KEY] {
        if secret_text(&secret, key).is_none() {
            return Ok(TlsState::Missing(format!(
                "Secret {name} named by spec.tls.secretName has no key {key:?}"
            )));
        }
    }
    match secret_text(&secret, TLS_CA_KEY) {
        Some(ca) => Ok(TlsState::Ready(ca.into_bytes())),
        None => Ok(TlsState::Missing(format!(
            "Secret {name} named by spec.tls.secretName has no key {TLS_CA_KEY:?} \
             (the CA members and clients verify each other with)"
        ))),
    }
}
