//! Act, TLS: the Secrets `spec.tls` needs, and the CA the operator trusts
//! when it connects to the members.
//!
//! Without `secretName` the operator runs the CA ([`resources::tls`]):
//! it creates `<cluster>-tls-ca-key` once, keeps `<cluster>-tls-ca` equal to
//! what the members trust, and (re)issues `<cluster>-tls` when
//! [`tls::issue_reason`] says so ([`ensure`], before the members are
//! observed). The CA changes only by a rotation ([`advance_rotation`], after
//! they are observed): each step is written to `<cluster>-tls-ca-key` with
//! the resourceVersion it was read at, once every member passed the check of
//! the step before. With `secretName` it only reads the user's Secret; a
//! missing Secret or key is a condition the cluster waits in
//! (`TLSSecretMissing`), like a missing password.

use super::secrets;
use crate::context::Context;
pub use crate::controller::observe::valkey::TlsState;
use crate::error::Error;
use crate::events::{Events, reason};
use api::ValidatedCluster;
use api::constants::{
    FIELD_MANAGER, TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY, tls_ca_key_secret_name,
    tls_ca_secret_name,
};
use decide::pods::PodFacts;
use decide::view::KubeView;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use resources::secret::{conditional_replace_patch, secret_text};
use resources::tls::{self, CaPhase, CaSet, CaStep, IssuedFacts};
use std::collections::BTreeSet;
use std::net::IpAddr;
use valkey_client::client::{ConnectOptions, TlsIdentity, ValkeyAdmin};

/// Makes sure the TLS Secrets exist and are current; returns the CA.
/// `ips`: what the serving certificate must name ([`decide::tls::member_ips`]).
/// `request` is the cluster's `valkey.rs/rotate-ca` annotation.
pub async fn ensure(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    ips: &BTreeSet<IpAddr>,
    (now_unix, request): (i64, Option<&str>),
    events: &Events<'_>,
) -> Result<TlsState, Error> {
    let Some(settings) = &cluster.tls else {
        return Ok(TlsState::Off);
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    if !settings.operator_managed {
        return user_secret(ctx, &api, &settings.secret_name).await;
    }
    let public_name = tls_ca_secret_name(&cluster.name);
    let public = secrets::read(ctx, &api, &public_name).await?;
    let existing = secrets::read(ctx, &api, &settings.secret_name).await?;
    let set = ensure_ca(
        ctx,
        cluster,
        owner,
        &api,
        (existing.as_ref(), public.as_ref()),
        (now_unix, request),
        events,
    )
    .await?;
    let trust = set.trust_pem();
    if public
        .as_ref()
        .and_then(|s| secret_text(s, TLS_CA_KEY))
        .as_deref()
        != Some(trust.as_str())
    {
        secrets::apply(ctx, &api, &tls::ca_secret(cluster, owner, &trust)).await?;
    }
    let facts = existing.as_ref().map(IssuedFacts::of);
    // Recovery: the key that signed the members' certificate is gone; they
    // keep it (with the new CA trusted beside) until every member trusts
    // the new CA, then it is issued again (a new CA signs).
    if set.phase() == CaPhase::Recovering
        && let Some(kept) = existing
            .as_ref()
            .and_then(|e| tls::retrusted_serving_secret(cluster, owner, &trust, e))
    {
        if facts.as_ref().and_then(|f| f.ca_pem.as_deref()) != Some(trust.as_str()) {
            secrets::apply(ctx, &api, &kept).await?;
        }
        return Ok(TlsState::Ready(trust.into_bytes(), Some(set)));
    }
    let signer = &set.signer;
    if let Some(why) = tls::issue_reason(facts.as_ref(), &trust, signer.number, ips, now_unix) {
        let issued = tls::issue(cluster, signer, ips, now_unix).map_err(Error::Tls)?;
        secrets::apply(
            ctx,
            &api,
            &tls::serving_secret(cluster, owner, &trust, &issued),
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
    Ok(TlsState::Ready(trust.into_bytes(), Some(set)))
}

/// Reads the CA, creating it when absent (a rotation alone changes it).
/// `(serving, public)` are `<cluster>-tls` and `<cluster>-tls-ca` as read:
/// when the CA's Secret is gone but they name CAs the members trust, the
/// new CA starts as a recovery ([`CaSet::recovering`]) so no member stops
/// trusting another on the way.
async fn ensure_ca(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    api: &Api<Secret>,
    (serving, public): (Option<&Secret>, Option<&Secret>),
    (now_unix, request): (i64, Option<&str>),
    events: &Events<'_>,
) -> Result<CaSet, Error> {
    let name = tls_ca_key_secret_name(&cluster.name);
    if let Some(secret) = secrets::read(ctx, api, &name).await? {
        return CaSet::of(&secret).ok_or_else(|| {
            Error::Tls(tls::TlsError::BadCa {
                secret: name.clone(),
                message: format!("it lacks {TLS_CA_KEY} or {}", tls::CA_PRIVATE_KEY),
            })
        });
    }
    let bundles: Vec<String> = [serving, public]
        .into_iter()
        .flatten()
        .filter_map(|s| secret_text(s, TLS_CA_KEY))
        .collect();
    let lost = tls::lost_trust(bundles.iter().map(String::as_str));
    let ca = match &lost {
        Some(lost) => {
            let number = tls::recovery_number(serving.map(|s| IssuedFacts::of(s).ca_number));
            // A rotation asked for before the loss was for the lost CA:
            // the new one is that rotation's answer, not a reason for another.
            CaSet {
                handled_request: request
                    .map(|r| r.trim().to_string())
                    .filter(|r| !r.is_empty()),
                ..CaSet::recovering(
                    tls::new_ca(cluster, number, now_unix).map_err(Error::Tls)?,
                    lost.clone(),
                )
            }
        }
        None => CaSet::of_one(tls::new_ca(cluster, 1, now_unix).map_err(Error::Tls)?),
    };
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
            match &lost {
                None => {
                    events
                        .normal(
                            reason::CA_CREATED,
                            "CreateCertificateAuthority",
                            format!("created the cluster's CA in Secret {name}"),
                        )
                        .await
                }
                Some(lost) => {
                    events
                        .warning(
                            reason::CA_KEY_LOST,
                            "CreateCertificateAuthority",
                            format!(
                                "Secret {name} is gone while the members trust {} CA certificate(s) whose key it held: \
                                 CA {} is made and trusted beside them first, and signs once every member trusts it",
                                lost.matches("BEGIN CERTIFICATE").count(),
                                ca.signer.number
                            ),
                        )
                        .await
                }
            }
            Ok(ca)
        }
        // Created meanwhile (another reconcile, a restart): use that one.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let secret = secrets::read(ctx, api, &name).await?;
            secret.as_ref().and_then(CaSet::of).ok_or_else(|| {
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
async fn user_secret(ctx: &Context, api: &Api<Secret>, name: &str) -> Result<TlsState, Error> {
    let Some(secret) = secrets::read(ctx, api, name).await? else {
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
        Some(ca) => Ok(TlsState::Ready(ca.into_bytes(), None)),
        None => Ok(TlsState::Missing(format!(
            "Secret {name} named by spec.tls.secretName has no key {TLS_CA_KEY:?} \
             (the CA members and clients verify each other with)"
        ))),
    }
}

/// Whether every member pod answers with `opts` (a TLS handshake and a
/// command); a pod without an IP does not.
async fn every_member_answers(view: &KubeView, opts: &ConnectOptions) -> bool {
    let pods: Vec<Option<IpAddr>> = view
        .members
        .values()
        .chain(view.new_copies.values())
        .map(|p| PodFacts::of(p).ip)
        .collect();
    if pods.is_empty() {
        return false;
    }
    let answers = futures::future::join_all(pods.into_iter().map(|ip| async move {
        let Some(ip) = ip else { return false };
        match ValkeyAdmin::connect(ip, api::constants::VALKEY_PORT, opts).await {
            // A member that does not trust the client's certificate refuses
            // it after the handshake: only a reply proves it was accepted.
            Ok(admin) => valkey_client::client::Admin::info(&admin, "server")
                .await
                .is_ok(),
            Err(_) => false,
        }
    }))
    .await;
    answers.into_iter().all(|ok| ok)
}

/// The check of the rotation's current step, over `opts` (how the members
/// were observed): step 1, every member accepts a client certificate of the
/// next CA; step 2, every member presents a certificate the new CA signed
/// (trusting it alone). `None` when no step is in flight.
async fn members_ready(
    cluster: &ValidatedCluster,
    set: &CaSet,
    view: &KubeView,
    opts: &ConnectOptions,
    now_unix: i64,
) -> Result<Option<bool>, Error> {
    // Step 1 of a rotation, and a recovery: every member accepts a client
    // certificate of the CA that signs next (the signer already, in a
    // recovery).
    let accepts_client_of = |ca: &tls::Ca| -> Result<ConnectOptions, Error> {
        let client = tls::issue(cluster, ca, &BTreeSet::new(), now_unix).map_err(Error::Tls)?;
        Ok(ConnectOptions {
            tls_identity: Some(TlsIdentity {
                cert_pem: client.cert_pem.into_bytes(),
                key_pem: client.key_pem.into_bytes(),
            }),
            ..opts.clone()
        })
    };
    match (set.phase(), &set.next) {
        (CaPhase::Trusting, Some(next)) => Ok(Some(
            every_member_answers(view, &accepts_client_of(next)?).await,
        )),
        (CaPhase::Recovering, _) => Ok(Some(
            every_member_answers(view, &accepts_client_of(&set.signer)?).await,
        )),
        (CaPhase::Signing, _) => {
            let opts = ConnectOptions {
                tls_ca_pem: Some(set.signer.cert_pem.clone().into_bytes()),
                ..opts.clone()
            };
            Ok(Some(every_member_answers(view, &opts).await))
        }
        _ => Ok(None),
    }
}

/// Where a rotation step is written and what it is checked with.
pub struct RotationInputs<'a> {
    /// How the members were observed (password, trusted CAs).
    pub opts: &'a ConnectOptions,
    /// The cluster's `valkey.rs/rotate-ca` annotation.
    pub request: Option<&'a str>,
    pub now_unix: i64,
}

/// Moves a rotation of the operator's CA on by one step when
/// [`tls::ca_step`] says so (or starts one): the new state goes to
/// `<cluster>-tls-ca-key` (a merge patch conditional on the resourceVersion
/// read, so two reconciles never both step), and the next reconcile's [`ensure`] hands it
/// to the members.
pub async fn advance_rotation(
    ctx: &Context,
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    (tls_state, view): (&TlsState, &KubeView),
    inputs: RotationInputs<'_>,
    events: &Events<'_>,
) -> Result<(), Error> {
    let Some(set) = tls_state.operator_ca() else {
        return Ok(());
    };
    // A rotation waits until the members speak TLS (a switch in flight).
    if cluster.tls.as_ref().is_some_and(|t| t.switching) {
        return Ok(());
    }
    let ready = members_ready(cluster, set, view, inputs.opts, inputs.now_unix).await?;
    let Some(step) = tls::ca_step(set, inputs.request, inputs.now_unix, ready) else {
        return Ok(());
    };
    let next = match &step {
        CaStep::Start { .. } => Some(
            tls::new_ca(
                cluster,
                set.signer.number.saturating_add(1),
                inputs.now_unix,
            )
            .map_err(Error::Tls)?,
        ),
        _ => None,
    };
    let after = tls::after_step(set, &step, next, inputs.request);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &cluster.namespace);
    let name = tls_ca_key_secret_name(&cluster.name);
    let Some(current) = secrets::read(ctx, &api, &name).await? else {
        return Ok(());
    };
    // Stepped meanwhile (another reconcile): the next reconcile sees it.
    if CaSet::of(&current).as_ref() != Some(set) {
        return Ok(());
    }
    let body = tls::ca_key_secret(cluster, owner, &after);
    let patch = conditional_replace_patch(&current, &body);
    ctx.metrics.api_write("Secret", "patch");
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.patch(&name, &pp, &Patch::Merge(&patch)).await {
        Ok(written) => {
            ctx.secret_seen(&cluster.namespace, &name, written.metadata.resource_version)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
        Err(source) => {
            return Err(Error::Apply {
                kind: "Secret",
                name,
                source,
            });
        }
    }
    let public = tls_ca_secret_name(&cluster.name);
    let (reason, text) = match &step {
        CaStep::Start { reason } => (
            reason::CA_ROTATION_STARTED,
            format!(
                "rotating the cluster's CA ({reason}): the members and Secret {public} trust CA {} beside CA {} first",
                after.signer.number.saturating_add(1),
                after.signer.number
            ),
        ),
        CaStep::Sign if set.phase() == CaPhase::Recovering => (
            reason::CA_SIGNING,
            format!(
                "every member trusts CA {}: it signs the members' certificate from now on; the CAs of the lost Secret stay trusted until every member presents the new certificate",
                after.signer.number
            ),
        ),
        CaStep::Sign => (
            reason::CA_SIGNING,
            format!(
                "every member trusts CA {}: it signs the members' certificate from now on; CA {} stays trusted until every member presents the new certificate",
                after.signer.number, set.signer.number
            ),
        ),
        CaStep::Finish => (
            reason::CA_ROTATED,
            format!(
                "every member presents a certificate of CA {}: the previous CA is trusted no more; Secret {public} holds CA {} alone",
                after.signer.number, after.signer.number
            ),
        ),
    };
    events
        .normal(reason, "RotateCertificateAuthority", text)
        .await;
    Ok(())
}
