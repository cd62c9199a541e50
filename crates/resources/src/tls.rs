// Over 600 lines: the CA and the members' certificates: building them and the rules of their rotation, with tests.
//! The operator's own certificate authority for `spec.tls` without a
//! `secretName`: one CA per cluster and one serving certificate all members
//! share (they present it to clients and to each other, on replication and on
//! the cluster bus, so it is valid for server and client use).
//!
//! Three Secrets, all owned by the ValkeyCluster:
//! - `<cluster>-tls-ca-key` (`ca.crt`, `ca.key`): the CA, read by the
//!   operator only, never mounted;
//! - `<cluster>-tls-ca` (`ca.crt`): what clients need to trust the members
//!   (a contract);
//! - `<cluster>-tls` (`ca.crt`, `tls.crt`, `tls.key`, the layout cert-manager
//!   writes): mounted by every member.
//!
//! The serving certificate names `localhost`, `127.0.0.1`, every per-pod DNS
//! name (a wildcard under the headless Service), the client Service and the
//! member pods' IPs (clients of a cluster learn members by IP from CLUSTER
//! SLOTS). It is issued again when it nears its end (the last third of its
//! life), when the CA changed, or when a member pod has an IP it does not
//! name. Members pick a new one up without a restart: Valkey re-reads its TLS
//! files (`tls-auto-reload-interval`) once the kubelet has refreshed the
//! Secret volume, and connections that are open stay open.
//!
//! The CA is rotated (when asked with the annotation `valkey.rs/rotate-ca`
//! on the ValkeyCluster, or by itself in the last third of its life) in
//! three steps, so no member and no client that follows `<cluster>-tls-ca`
//! ever meets a certificate it does not trust ([`ca_step`]):
//! 1. *trust*: a new CA is made (`next.crt`, `next.key` in
//!    `<cluster>-tls-ca-key`); every member and `<cluster>-tls-ca` trust the
//!    bundle of both; the members still present the old CA's certificate;
//! 2. *sign*, once every member accepts a client certificate of the new CA:
//!    the new CA signs a new serving certificate; the old one is still
//!    trusted (`previous.crt`);
//! 3. *done*, once every member presents the new CA's certificate: the old
//!    CA is no longer trusted anywhere.
//!
//! Deciding *whether* to issue ([`issue_reason`]) and the rotation's next
//! step ([`ca_step`]) are pure; issuing makes keys and so is not.

use super::secret::secret_text;
use super::{client_service_name, headless_service_name};
use api::ValidatedCluster;
use api::constants::{
    TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY, tls_ca_key_secret_name, tls_ca_secret_name,
};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rand::RngExt as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, SerialNumber,
};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;
use time::OffsetDateTime;

/// Key of the CA's private key in `<cluster>-tls-ca-key`.
pub const CA_PRIVATE_KEY: &str = "ca.key";
/// Annotation on `<cluster>-tls`: when its certificate ends (Unix seconds).
pub const ANNOTATION_NOT_AFTER: &str = "valkey.rs/tls-not-after";
/// Annotation on `<cluster>-tls`: the pod IPs its certificate names, comma-separated.
pub const ANNOTATION_IPS: &str = "valkey.rs/tls-ips";
/// Annotation on `<cluster>-tls`: the number of the CA that signed it
/// (absent: 1).
pub const ANNOTATION_SIGNER: &str = "valkey.rs/tls-ca-generation";
/// Annotation on `<cluster>-tls-ca-key`: the signing CA's number
/// (absent: 1, the first CA).
pub const ANNOTATION_CA_GENERATION: &str = "valkey.rs/ca-generation";
/// Annotation on `<cluster>-tls-ca-key`: when the signing CA ends (Unix
/// seconds; absent: [`CA_LIFETIME`] after the Secret was made).
pub const ANNOTATION_CA_NOT_AFTER: &str = "valkey.rs/ca-not-after";
/// Annotation on `<cluster>-tls-ca-key`: when the next CA ends, mid-rotation.
pub const ANNOTATION_NEXT_NOT_AFTER: &str = "valkey.rs/ca-next-not-after";
/// Annotation on `<cluster>-tls-ca-key`: the value of the cluster's
/// `valkey.rs/rotate-ca` the last rotation was made for.
pub const ANNOTATION_ROTATION_REQUEST: &str = "valkey.rs/ca-rotation-request";
/// Key of the next CA's certificate in `<cluster>-tls-ca-key` (rotation, step 1).
pub const NEXT_CERT: &str = "next.crt";
/// Key of the next CA's private key in `<cluster>-tls-ca-key`.
pub const NEXT_KEY: &str = "next.key";
/// Key of the previous CA's certificate in `<cluster>-tls-ca-key` (rotation, step 2).
pub const PREVIOUS_CERT: &str = "previous.crt";
/// Key in `<cluster>-tls-ca-key` of the CAs the members trusted when the
/// Secret was lost (recovery, before the new CA signs).
pub const LOST_CERT: &str = "lost.crt";

/// How long the CA is valid: ten years. It is rotated in the last third.
pub const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a serving certificate is valid.
pub const CERT_LIFETIME: Duration = Duration::from_secs(90 * 24 * 3600);
/// Backdating against clock skew between the operator and clients.
const BACKDATE: Duration = Duration::from_secs(3600);

/// Errors making keys or certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating the {what}: {source}")]
    Generate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("the CA in Secret {secret} is unusable: {message}")]
    BadCa { secret: String, message: String },
    #[error("time out of range: {0}")]
    Time(String),
}

/// A CA: its certificate and private key, PEM, its number (1 for the
/// cluster's first CA, one more for each rotation: it is in the CA's name, so
/// two CAs trusted side by side never share a subject) and its end.
#[derive(Clone, PartialEq, Eq)]
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
    pub number: u32,
    pub not_after_unix: i64,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A serving certificate and its key, PEM, with what it names and the
/// number of the CA that signed it.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after_unix: i64,
    pub ips: BTreeSet<IpAddr>,
    pub ca_number: u32,
}

/// What the existing `<cluster>-tls` Secret says about its certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssuedFacts {
    /// `ca.crt` in it.
    pub ca_pem: Option<String>,
    /// Whether `tls.crt` and `tls.key` are there.
    pub complete: bool,
    pub not_after_unix: Option<i64>,
    pub ips: BTreeSet<IpAddr>,
    /// The number of the CA that signed it.
    pub ca_number: u32,
}

impl IssuedFacts {
    /// Reads the operator's annotations and keys of `<cluster>-tls`.
    pub fn of(secret: &Secret) -> IssuedFacts {
        let annotations = secret.metadata.annotations.clone().unwrap_or_default();
        let text = |k: &str| secret_text(secret, k);
        IssuedFacts {
            ca_pem: text(TLS_CA_KEY),
            complete: text(TLS_CERT_KEY).is_some() && text(TLS_KEY_KEY).is_some(),
            not_after_unix: annotations
                .get(ANNOTATION_NOT_AFTER)
                .and_then(|v| v.parse().ok()),
            ips: annotations
                .get(ANNOTATION_IPS)
                .map(|v| {
                    v.split(',')
                        .filter_map(|ip| ip.trim().parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
            ca_number: annotations
                .get(ANNOTATION_SIGNER)
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
        }
    }
}

/// Why the serving certificate must be issued (again), or `None` to keep it:
/// `trust_pem` is what the members must trust, `signer` the number of
/// the CA that must have signed it.
pub fn issue_reason(
    existing: Option<&IssuedFacts>,
    trust_pem: &str,
    signer: u32,
    member_ips: &BTreeSet<IpAddr>,
    now_unix: i64,
) -> Option<&'static str> {
    let Some(e) = existing else {
        return Some("first certificate");
    };
    if !e.complete {
        return Some("the Secret lacks tls.crt or tls.key");
    }
    if e.ca_number != signer {
        return Some("a new CA signs");
    }
    if e.ca_pem.as_deref() != Some(trust_pem) {
        return Some("the trusted CAs changed");
    }
    let renew_before = i64::try_from(CERT_LIFETIME.as_secs() / 3).unwrap_or(i64::MAX);
    match e.not_after_unix {
        None => return Some("its end is unknown"),
        Some(end) if end.saturating_sub(renew_before) <= now_unix => {
            return Some("renewal: in the last third of its life");
        }
        Some(_) => {}
    }
    if !member_ips.is_subset(&e.ips) {
        return Some("a member pod has an IP it does not name");
    }
    None
}

fn generate_key(what: &'static str) -> Result<KeyPair, TlsError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|source| TlsError::Generate { what, source })
}

fn offset(unix: i64) -> Result<OffsetDateTime, TlsError> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|e| TlsError::Time(e.to_string()))
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::rng().random();
    // Positive, as RFC 5280 wants.
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

/// The CA's identity: the same every time for a number, so a
/// certificate signed with the stored key names the stored CA certificate
/// as its issuer. The first CA is "valkey-operator CA", the later ones carry
/// their number.
fn ca_params(cluster: &ValidatedCluster, number: u32) -> Result<CertificateParams, TlsError> {
    let mut p =
        CertificateParams::new(Vec::<String>::new()).map_err(|source| TlsError::Generate {
            what: "CA certificate",
            source,
        })?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    let name = if number <= 1 {
        "valkey-operator CA".to_string()
    } else {
        format!("valkey-operator CA {number}")
    };
    p.distinguished_name.push(DnType::CommonName, name);
    p.distinguished_name.push(
        DnType::OrganizationName,
        format!("{}/{}", cluster.namespace, cluster.name),
    );
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

/// A new CA of `number` for `cluster`, valid from an hour before
/// `now_unix` for [`CA_LIFETIME`].
pub fn new_ca(cluster: &ValidatedCluster, number: u32, now_unix: i64) -> Result<Ca, TlsError> {
    let key = generate_key("CA key")?;
    let mut p = ca_params(cluster, number)?;
    p.serial_number = Some(random_serial());
    let not_after = now_unix.saturating_add(secs(CA_LIFETIME));
    p.not_before = offset(now_unix - secs(BACKDATE))?;
    p.not_after = offset(not_after)?;
    let cert = p.self_signed(&key).map_err(|source| TlsError::Generate {
        what: "CA certificate",
        source,
    })?;
    Ok(Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        number,
        not_after_unix: not_after,
    })
}

/// The DNS names the serving certificate covers.
pub fn dns_names(cluster: &ValidatedCluster) -> Vec<String> {
    let ns = &cluster.namespace;
    let headless = headless_service_name(&cluster.name);
    let client = client_service_name(&cluster.name);
    let mut names = vec!["localhost".to_string()];
    for suffix in ["", ".svc", ".svc.cluster.local"] {
        names.push(format!("*.{headless}.{ns}{suffix}"));
    }
    names.push(client.clone());
    for suffix in ["", ".svc", ".svc.cluster.local"] {
        names.push(format!("{client}.{ns}{suffix}"));
    }
    names
}

/// Issues the serving certificate with `ca` for the members' DNS names and
/// `ips`, valid from an hour before `now_unix` for [`CERT_LIFETIME`].
pub fn issue(
    cluster: &ValidatedCluster,
    ca: &Ca,
    ips: &BTreeSet<IpAddr>,
    now_unix: i64,
) -> Result<Issued, TlsError> {
    let bad_ca = |message: String| TlsError::BadCa {
        secret: tls_ca_key_secret_name(&cluster.name),
        message,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(|e| bad_ca(e.to_string()))?;
    let issuer = Issuer::new(ca_params(cluster, ca.number)?, ca_key);
    let key = generate_key("serving key")?;
    let mut p =
        CertificateParams::new(dns_names(cluster)).map_err(|source| TlsError::Generate {
            what: "serving certificate",
            source,
        })?;
    p.subject_alt_names
        .push(SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
    p.subject_alt_names
        .extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, client_service_name(&cluster.name));
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    // Members present it to clients (server) and to each other (client).
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    p.serial_number = Some(random_serial());
    let not_after = now_unix.saturating_add(secs(CERT_LIFETIME));
    p.not_before = offset(now_unix - secs(BACKDATE))?;
    p.not_after = offset(not_after)?;
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(|source| TlsError::Generate {
            what: "serving certificate",
            source,
        })?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after_unix: not_after,
        ips: ips.clone(),
        ca_number: ca.number,
    })
}

fn owned_secret(
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    name: String,
    annotations: BTreeMap<String, String>,
    data: Vec<(&str, &str)>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..super::owned_meta(cluster, owner, name)
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// `<cluster>-tls-ca-key`: the CA with its key, and a rotation in flight.
pub fn ca_key_secret(cluster: &ValidatedCluster, owner: &OwnerReference, set: &CaSet) -> Secret {
    let mut annotations = BTreeMap::from([
        (
            ANNOTATION_CA_GENERATION.to_string(),
            set.signer.number.to_string(),
        ),
        (
            ANNOTATION_CA_NOT_AFTER.to_string(),
            set.signer.not_after_unix.to_string(),
        ),
    ]);
    if let Some(request) = &set.handled_request {
        annotations.insert(ANNOTATION_ROTATION_REQUEST.to_string(), request.clone());
    }
    let mut data = vec![
        (TLS_CA_KEY, set.signer.cert_pem.as_str()),
        (CA_PRIVATE_KEY, set.signer.key_pem.as_str()),
    ];
    if let Some(next) = &set.next {
        annotations.insert(
            ANNOTATION_NEXT_NOT_AFTER.to_string(),
            next.not_after_unix.to_string(),
        );
        data.push((NEXT_CERT, &next.cert_pem));
        data.push((NEXT_KEY, &next.key_pem));
    }
    if let Some(previous) = &set.previous_pem {
        data.push((PREVIOUS_CERT, previous));
    }
    if let Some(lost) = &set.lost_pem {
        data.push((LOST_CERT, lost));
    }
    owned_secret(
        cluster,
        owner,
        tls_ca_key_secret_name(&cluster.name),
        annotations,
        data,
    )
}

/// `<cluster>-tls-ca`: the CA certificate clients trust.
pub fn ca_secret(cluster: &ValidatedCluster, owner: &OwnerReference, ca_pem: &str) -> Secret {
    owned_secret(
        cluster,
        owner,
        tls_ca_secret_name(&cluster.name),
        BTreeMap::new(),
        vec![(TLS_CA_KEY, ca_pem)],
    )
}

/// `<cluster>-tls`: what the members mount.
pub fn serving_secret(
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    ca_pem: &str,
    issued: &Issued,
) -> Secret {
    let ips: Vec<String> = issued.ips.iter().map(IpAddr::to_string).collect();
    let annotations = BTreeMap::from([
        (
            ANNOTATION_NOT_AFTER.to_string(),
            issued.not_after_unix.to_string(),
        ),
        (ANNOTATION_IPS.to_string(), ips.join(",")),
        (ANNOTATION_SIGNER.to_string(), issued.ca_number.to_string()),
    ]);
    let name = cluster
        .tls
        .as_ref()
        .map(|t| t.secret_name.clone())
        .unwrap_or_else(|| api::constants::tls_secret_name(&cluster.name));
    owned_secret(
        cluster,
        owner,
        name,
        annotations,
        vec![
            (TLS_CA_KEY, ca_pem),
            (TLS_CERT_KEY, &issued.cert_pem),
            (TLS_KEY_KEY, &issued.key_pem),
        ],
    )
}

/// The certificates the members trusted when `<cluster>-tls-ca-key` was
/// lost: every distinct PEM block of the serving Secret's and the public
/// Secret's `ca.crt`, or `None` when neither holds one (nothing to keep).
pub fn lost_trust<'a>(bundles: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for bundle in bundles {
        for block in bundle.split_inclusive("-----END CERTIFICATE-----") {
            let Some(start) = block.find("-----BEGIN CERTIFICATE-----") else {
                continue;
            };
            if !block.ends_with("-----END CERTIFICATE-----") {
                continue;
            }
            let cert = format!("{}\n", &block[start..]);
            if !seen.contains(&cert) {
                seen.push(cert);
            }
        }
    }
    (!seen.is_empty()).then(|| seen.concat())
}

/// The number of a CA made after `<cluster>-tls-ca-key` was lost: past
/// the one that signed the serving certificate and a next one that may have
/// been in flight, so its name differs from every CA still trusted.
pub fn recovery_number(serving_signer: Option<u32>) -> u32 {
    serving_signer.unwrap_or(1).saturating_add(2)
}

/// `<cluster>-tls` with its certificate and key kept and `trust_pem` as
/// its `ca.crt` (recovery: the key that signed it is gone, so it cannot be
/// issued again until the new CA is trusted). `None` when it lacks the
/// certificate or key.
pub fn retrusted_serving_secret(
    cluster: &ValidatedCluster,
    owner: &OwnerReference,
    trust_pem: &str,
    existing: &Secret,
) -> Option<Secret> {
    let facts = IssuedFacts::of(existing);
    let issued = Issued {
        cert_pem: secret_text(existing, TLS_CERT_KEY)?,
        key_pem: secret_text(existing, TLS_KEY_KEY)?,
        not_after_unix: facts.not_after_unix.unwrap_or(0),
        ips: facts.ips,
        ca_number: facts.ca_number,
    };
    Some(serving_secret(cluster, owner, trust_pem, &issued))
}

/// The operator's CA as `<cluster>-tls-ca-key` holds it: the CA that
/// signs, and mid-rotation the next one (step 1) or the previous one
/// (step 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaSet {
    pub signer: Ca,
    /// Rotation, step 1: the CA that signs next, trusted beside the signer.
    pub next: Option<Ca>,
    /// Rotation, step 2: the certificate of the CA that signed before,
    /// trusted until every member presents the signer's certificate.
    pub previous_pem: Option<String>,
    /// The `valkey.rs/rotate-ca` value the last rotation was made for.
    pub handled_request: Option<String>,
    /// Recovery: the CAs the members trusted when `<cluster>-tls-ca-key`
    /// was lost (the key that signed their certificates is gone). They stay
    /// trusted beside the new signer, and the members keep presenting the
    /// certificate they have, until every member trusts the new CA.
    pub lost_pem: Option<String>,
}

/// Where a rotation of the operator's CA stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaPhase {
    /// One CA, trusted and signing.
    Steady,
    /// Step 1: the next CA is trusted beside the signer; the members must
    /// all trust it before it signs.
    Trusting,
    /// Step 2: the new CA signs; the previous one is trusted until every
    /// member presents the new CA's certificate.
    Signing,
    /// The CA's Secret was lost: a new CA is trusted beside the lost ones,
    /// and signs once every member trusts it (then as [`CaPhase::Signing`]).
    Recovering,
}

impl CaSet {
    /// A set of one CA.
    pub fn of_one(ca: Ca) -> CaSet {
        CaSet {
            signer: ca,
            next: None,
            previous_pem: None,
            handled_request: None,
            lost_pem: None,
        }
    }

    /// A new CA for members that trust `lost_pem`, whose signing key is gone.
    pub fn recovering(ca: Ca, lost_pem: String) -> CaSet {
        CaSet {
            lost_pem: Some(lost_pem),
            ..CaSet::of_one(ca)
        }
    }

    /// Reads `<cluster>-tls-ca-key`; `None` when the signer's certificate or
    /// key is missing. A next CA without its key is ignored.
    pub fn of(secret: &Secret) -> Option<CaSet> {
        let annotations = secret.metadata.annotations.clone().unwrap_or_default();
        let annotated = |k: &str| annotations.get(k).and_then(|v| v.parse::<i64>().ok());
        let number = annotated(ANNOTATION_CA_GENERATION)
            .and_then(|g| u32::try_from(g).ok())
            .unwrap_or(1);
        // A CA made before its end was recorded: it ends CA_LIFETIME after
        // its Secret was made.
        let made = secret
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0);
        let signer = Ca {
            cert_pem: secret_text(secret, TLS_CA_KEY)?,
            key_pem: secret_text(secret, CA_PRIVATE_KEY)?,
            number,
            not_after_unix: annotated(ANNOTATION_CA_NOT_AFTER)
                .unwrap_or_else(|| made.saturating_add(secs(CA_LIFETIME))),
        };
        let next = match (
            secret_text(secret, NEXT_CERT),
            secret_text(secret, NEXT_KEY),
        ) {
            (Some(cert_pem), Some(key_pem)) => Some(Ca {
                cert_pem,
                key_pem,
                number: number.saturating_add(1),
                not_after_unix: annotated(ANNOTATION_NEXT_NOT_AFTER).unwrap_or(i64::MAX),
            }),
            _ => None,
        };
        Some(CaSet {
            signer,
            previous_pem: secret_text(secret, PREVIOUS_CERT).filter(|_| next.is_none()),
            lost_pem: secret_text(secret, LOST_CERT).filter(|_| next.is_none()),
            next,
            handled_request: annotations.get(ANNOTATION_ROTATION_REQUEST).cloned(),
        })
    }

    pub fn phase(&self) -> CaPhase {
        if self.lost_pem.is_some() && self.next.is_none() {
            CaPhase::Recovering
        } else if self.next.is_some() {
            CaPhase::Trusting
        } else if self.previous_pem.is_some() {
            CaPhase::Signing
        } else {
            CaPhase::Steady
        }
    }

    /// What the members and clients trust: the signer, and the next or the
    /// previous CA mid-rotation (PEM, one after the other).
    pub fn trust_pem(&self) -> String {
        let mut pem = pem_line_ended(&self.signer.cert_pem);
        if let Some(next) = &self.next {
            pem.push_str(&pem_line_ended(&next.cert_pem));
        }
        if let Some(previous) = &self.previous_pem {
            pem.push_str(&pem_line_ended(previous));
        }
        if let Some(lost) = &self.lost_pem {
            pem.push_str(&pem_line_ended(lost));
        }
        pem
    }
}

fn pem_line_ended(pem: &str) -> String {
    let mut s = pem.to_string();
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// The next step of the CA's rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaStep {
    /// Make the next CA and trust it beside the signer (step 1); `reason`
    /// says why.
    Start { reason: String },
    /// Every member trusts the next CA: it signs from now on, the old one
    /// stays trusted (step 2).
    Sign,
    /// Every member presents the new CA's certificate: the old CA is no
    /// longer trusted (done).
    Finish,
}

/// The next step of the rotation, or `None` to stay. `request` is the
/// cluster's `valkey.rs/rotate-ca` annotation (a value not yet handled
/// starts a rotation); `members_ready` whether every member passed this
/// phase's check (step 1: it accepts a client certificate of the next CA;
/// step 2: it presents a certificate of the signer); `None` when not checked.
pub fn ca_step(
    set: &CaSet,
    request: Option<&str>,
    now_unix: i64,
    members_ready: Option<bool>,
) -> Option<CaStep> {
    match set.phase() {
        CaPhase::Trusting | CaPhase::Recovering => {
            (members_ready == Some(true)).then_some(CaStep::Sign)
        }
        CaPhase::Signing => (members_ready == Some(true)).then_some(CaStep::Finish),
        CaPhase::Steady => {
            let request = request.map(str::trim).filter(|r| !r.is_empty());
            if let Some(r) = request
                && set.handled_request.as_deref() != Some(r)
            {
                return Some(CaStep::Start {
                    reason: format!("asked with valkey.rs/rotate-ca={r:?}"),
                });
            }
            let rotate_before = secs(CA_LIFETIME) / 3;
            (set.signer.not_after_unix.saturating_sub(rotate_before) <= now_unix).then(|| {
                CaStep::Start {
                    reason: "the CA is in the last third of its life".to_string(),
                }
            })
        }
    }
}

/// The set after `step`; `next` is the new CA for [`CaStep::Start`] (made
/// by the caller, as making keys is not pure), `request` the annotation's
/// value a start records.
pub fn after_step(set: &CaSet, step: &CaStep, next: Option<Ca>, request: Option<&str>) -> CaSet {
    match step {
        CaStep::Start { .. } => CaSet {
            next,
            previous_pem: None,
            handled_request: request
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .or_else(|| set.handled_request.clone()),
            ..set.clone()
        },
        CaStep::Sign => match (&set.next, &set.lost_pem) {
            (Some(next), _) => CaSet {
                signer: next.clone(),
                next: None,
                previous_pem: Some(set.signer.cert_pem.clone()),
                handled_request: set.handled_request.clone(),
                lost_pem: None,
            },
            // Recovery: the new CA already is the signer; the lost CAs
            // stay trusted until every member presents its certificate.
            (None, Some(lost)) => CaSet {
                previous_pem: Some(lost.clone()),
                lost_pem: None,
                ..set.clone()
            },
            (None, None) => set.clone(),
        },
        CaStep::Finish => CaSet {
            previous_pem: None,
            ..set.clone()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{cluster, owner};

    const NOW: i64 = 1_800_000_000;

    fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
        list.iter().filter_map(|s| s.parse().ok()).collect()
    }

    fn facts(ca: &str, end: i64, named: &[&str]) -> IssuedFacts {
        IssuedFacts {
            ca_pem: Some(ca.into()),
            complete: true,
            not_after_unix: Some(end),
            ips: ips(named),
            ca_number: 1,
        }
    }

    #[test]
    fn a_certificate_is_issued_first_then_kept_while_it_is_young_and_names_every_member() {
        let members = ips(&["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            issue_reason(None, "CA", 1, &members, NOW),
            Some("first certificate")
        );
        let young = facts(
            "CA",
            NOW + 80 * 24 * 3600,
            &["10.0.0.1", "10.0.0.2", "10.0.0.9"],
        );
        assert_eq!(issue_reason(Some(&young), "CA", 1, &members, NOW), None);
    }

    #[test]
    fn it_is_issued_again_for_a_new_ca_a_new_member_ip_or_near_its_end() {
        let members = ips(&["10.0.0.1", "10.0.0.2"]);
        let ok = facts("CA", NOW + 80 * 24 * 3600, &["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            issue_reason(Some(&ok), "OTHER", 1, &members, NOW),
            Some("the trusted CAs changed")
        );
        let missing_ip = facts("CA", NOW + 80 * 24 * 3600, &["10.0.0.1"]);
        assert!(issue_reason(Some(&missing_ip), "CA", 1, &members, NOW).is_some());
        let old = facts("CA", NOW + 29 * 24 * 3600, &["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            issue_reason(Some(&old), "CA", 1, &members, NOW),
            Some("renewal: in the last third of its life")
        );
        let broken = IssuedFacts {
            complete: false,
            ..ok
        };
        assert!(issue_reason(Some(&broken), "CA", 1, &members, NOW).is_some());
    }

    #[test]
    fn issued_secrets_carry_what_the_next_reconcile_reads_back() -> Result<(), TlsError> {
        let c = cluster("cache", 3, 1);
        let ca = new_ca(&c, 1, NOW)?;
        let members = ips(&["10.0.0.1"]);
        let issued = issue(&c, &ca, &members, NOW)?;
        let s = serving_secret(&c, &owner(), &ca.cert_pem, &issued);
        assert_eq!(s.metadata.name.as_deref(), Some("cache-tls"));
        let read = IssuedFacts::of(&s);
        assert_eq!(read.ips, members);
        assert_eq!(read.not_after_unix, Some(issued.not_after_unix));
        assert_eq!(
            issue_reason(Some(&read), &ca.cert_pem, 1, &members, NOW),
            None
        );
        let set = CaSet::of_one(ca.clone());
        assert_eq!(CaSet::of(&ca_key_secret(&c, &owner(), &set)), Some(set));
        let public = ca_secret(&c, &owner(), &ca.cert_pem);
        assert_eq!(public.metadata.name.as_deref(), Some("cache-tls-ca"));
        assert_eq!(secret_text(&public, "ca.crt"), Some(ca.cert_pem.clone()));
        assert!(secret_text(&public, CA_PRIVATE_KEY).is_none());
        Ok(())
    }

    #[test]
    fn the_serving_certificate_names_pods_services_and_loopback() {
        let names = dns_names(&cluster("cache", 1, 0));
        assert!(names.contains(&"localhost".to_string()));
        assert!(
            names
                .iter()
                .any(|n| n.starts_with("*.") && n.ends_with(".svc.cluster.local"))
        );
        assert!(names.iter().any(|n| n.ends_with(".svc")));
    }

    #[test]
    fn a_new_signer_means_a_new_certificate_and_old_secrets_count_as_generation_1() {
        let members = ips(&["10.0.0.1"]);
        let ok = facts("CA", NOW + 80 * 24 * 3600, &["10.0.0.1"]);
        assert_eq!(issue_reason(Some(&ok), "CA", 1, &members, NOW), None);
        assert_eq!(
            issue_reason(Some(&ok), "CA", 2, &members, NOW),
            Some("a new CA signs")
        );
        let unannotated = Secret {
            data: Some(
                [TLS_CA_KEY, TLS_CERT_KEY, TLS_KEY_KEY]
                    .into_iter()
                    .map(|k| (k.to_string(), ByteString(b"x".to_vec())))
                    .collect(),
            ),
            ..Default::default()
        };
        assert_eq!(IssuedFacts::of(&unannotated).ca_number, 1);
    }

    fn set_of(signer_end: i64) -> CaSet {
        CaSet::of_one(Ca {
            cert_pem: "CA1".into(),
            key_pem: "KEY1".into(),
            number: 1,
            not_after_unix: signer_end,
        })
    }

    #[test]
    fn a_rotation_starts_when_asked_once_or_in_the_cas_last_third() {
        let young = set_of(NOW + 9 * 365 * 24 * 3600);
        assert_eq!(ca_step(&young, None, NOW, None), None);
        assert_eq!(ca_step(&young, Some("  "), NOW, None), None);
        assert!(matches!(
            ca_step(&young, Some("2026-12-05"), NOW, None),
            Some(CaStep::Start { .. })
        ));
        // The same request, once handled, starts nothing again.
        let handled = CaSet {
            handled_request: Some("2026-12-05".into()),
            ..young.clone()
        };
        assert_eq!(ca_step(&handled, Some("2026-12-05"), NOW, None), None);
        assert!(ca_step(&handled, Some("again"), NOW, None).is_some());
        let old = set_of(NOW + 3 * 365 * 24 * 3600);
        assert!(matches!(
            ca_step(&old, None, NOW, None),
            Some(CaStep::Start { reason }) if reason.contains("last third")
        ));
    }

    #[test]
    fn a_rotation_trusts_then_signs_then_forgets_the_old_ca_each_after_every_member_passed() {
        let set = set_of(NOW + 9 * 365 * 24 * 3600);
        let next = Ca {
            cert_pem: "CA2\n".into(),
            key_pem: "KEY2".into(),
            number: 2,
            not_after_unix: NOW + 10 * 365 * 24 * 3600,
        };
        let start = CaStep::Start {
            reason: "asked".into(),
        };
        let trusting = after_step(&set, &start, Some(next.clone()), Some("r1"));
        assert_eq!(trusting.phase(), CaPhase::Trusting);
        assert_eq!(trusting.trust_pem(), "CA1\nCA2\n");
        assert_eq!(trusting.handled_request.as_deref(), Some("r1"));
        // A request while rotating starts nothing; members not all ready: stay.
        assert_eq!(ca_step(&trusting, Some("r2"), NOW, Some(false)), None);
        assert_eq!(ca_step(&trusting, None, NOW, None), None);
        assert_eq!(
            ca_step(&trusting, None, NOW, Some(true)),
            Some(CaStep::Sign)
        );
        let signing = after_step(&trusting, &CaStep::Sign, None, None);
        assert_eq!(signing.phase(), CaPhase::Signing);
        assert_eq!(signing.signer, next);
        assert_eq!(signing.trust_pem(), "CA2\nCA1\n");
        assert_eq!(ca_step(&signing, None, NOW, Some(false)), None);
        assert_eq!(
            ca_step(&signing, None, NOW, Some(true)),
            Some(CaStep::Finish)
        );
        let done = after_step(&signing, &CaStep::Finish, None, None);
        assert_eq!(done.phase(), CaPhase::Steady);
        assert_eq!(done.trust_pem(), "CA2\n");
        assert_eq!(done.handled_request.as_deref(), Some("r1"));
        assert_eq!(ca_step(&done, Some("r1"), NOW, None), None);
    }

    #[test]
    fn every_phase_of_a_rotation_survives_its_secret() -> Result<(), TlsError> {
        let c = cluster("cache", 3, 1);
        let first = new_ca(&c, 1, NOW)?;
        let second = new_ca(&c, 2, NOW)?;
        let steady = CaSet::of_one(first.clone());
        let start = CaStep::Start {
            reason: "asked".into(),
        };
        let trusting = after_step(&steady, &start, Some(second.clone()), Some("r"));
        let signing = after_step(&trusting, &CaStep::Sign, None, None);
        let done = after_step(&signing, &CaStep::Finish, None, None);
        for set in [steady, trusting, signing, done] {
            let secret = ca_key_secret(&c, &owner(), &set);
            assert_eq!(CaSet::of(&secret), Some(set));
        }
        // The second CA has its own name and signs certificates that say so.
        let issued = issue(&c, &second, &ips(&["10.0.0.1"]), NOW)?;
        assert_eq!(issued.ca_number, 2);
        assert_ne!(first.cert_pem, second.cert_pem);
        Ok(())
    }

    #[test]
    fn a_lost_ca_is_trusted_beside_a_new_one_until_every_member_trusts_it() -> Result<(), TlsError>
    {
        let c = cluster("cache", 3, 1);
        let old = new_ca(&c, 1, NOW)?;
        // The serving Secret and the public one name the same CA: kept once.
        let lost = lost_trust([old.cert_pem.as_str(), old.cert_pem.as_str(), "garbage"])
            .expect("a certificate");
        assert_eq!(lost.matches("BEGIN CERTIFICATE").count(), 1);
        assert_eq!(lost_trust(["", "no pem here"]), None);
        let number = recovery_number(Some(1));
        assert_eq!(number, 3);
        let fresh = new_ca(&c, number, NOW)?;
        let recovering = CaSet::recovering(fresh.clone(), lost.clone());
        assert_eq!(recovering.phase(), CaPhase::Recovering);
        assert!(recovering.trust_pem().contains(&fresh.cert_pem));
        assert!(recovering.trust_pem().contains(lost.trim_end()));
        // It survives its Secret, starts no rotation, and signs only once
        // every member passed the check.
        let secret = ca_key_secret(&c, &owner(), &recovering);
        assert_eq!(CaSet::of(&secret), Some(recovering.clone()));
        assert_eq!(ca_step(&recovering, Some("asked"), NOW, None), None);
        assert_eq!(ca_step(&recovering, None, NOW, Some(false)), None);
        assert_eq!(
            ca_step(&recovering, None, NOW, Some(true)),
            Some(CaStep::Sign)
        );
        // Then as step 2 of a rotation: the new CA signs, the lost ones stay
        // trusted until every member presents the new certificate.
        let signing = after_step(&recovering, &CaStep::Sign, None, None);
        assert_eq!(signing.phase(), CaPhase::Signing);
        assert_eq!(signing.signer, fresh);
        assert_eq!(signing.previous_pem.as_deref(), Some(lost.as_str()));
        assert_eq!(signing.lost_pem, None);
        let done = after_step(&signing, &CaStep::Finish, None, None);
        assert_eq!(done.trust_pem(), pem_line_ended(&fresh.cert_pem));
        Ok(())
    }

    #[test]
    fn the_serving_certificate_is_kept_with_a_new_trust_while_recovering() -> Result<(), TlsError> {
        let c = cluster("cache", 3, 1);
        let old = new_ca(&c, 1, NOW)?;
        let issued = issue(&c, &old, &ips(&["10.0.0.1"]), NOW)?;
        let before = serving_secret(&c, &owner(), &old.cert_pem, &issued);
        let after = retrusted_serving_secret(&c, &owner(), "BUNDLE", &before).expect("complete");
        let facts = IssuedFacts::of(&after);
        assert_eq!(facts.ca_pem.as_deref(), Some("BUNDLE"));
        assert_eq!(
            facts,
            IssuedFacts {
                ca_pem: Some("BUNDLE".into()),
                ..IssuedFacts::of(&before)
            }
        );
        assert_eq!(secret_text(&after, TLS_CERT_KEY), Some(issued.cert_pem));
        let mut incomplete = before.clone();
        incomplete.data.as_mut().map(|d| d.remove(TLS_KEY_KEY));
        assert_eq!(
            retrusted_serving_secret(&c, &owner(), "B", &incomplete),
            None
        );
        Ok(())
    }
}
