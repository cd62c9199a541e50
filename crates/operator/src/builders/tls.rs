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
//! Deciding *whether* to issue ([`issue_reason`]) is pure; issuing makes keys
//! and so is not.

use super::secret::secret_text;
use super::{client_service_name, cluster_labels, headless_service_name};
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

/// How long the CA is valid: ten years. Renewing the CA (with a bundle of
/// the old and the new one while clients move over) is not done yet.
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

/// A CA: its certificate and private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Ca {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A serving certificate and its key, PEM, with what it names.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after_unix: i64,
    pub ips: BTreeSet<IpAddr>,
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
        }
    }
}

/// Why the serving certificate must be issued (again), or `None` to keep it.
pub fn issue_reason(
    existing: Option<&IssuedFacts>,
    ca_pem: &str,
    member_ips: &BTreeSet<IpAddr>,
    now_unix: i64,
) -> Option<&'static str> {
    let Some(e) = existing else {
        return Some("first certificate");
    };
    if !e.complete {
        return Some("the Secret lacks tls.crt or tls.key");
    }
    if e.ca_pem.as_deref() != Some(ca_pem) {
        return Some("the CA changed");
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

/// The CA's identity: the same every time, so a certificate signed with the
/// stored key names the stored CA certificate as its issuer.
fn ca_params(cluster: &ValidatedCluster) -> Result<CertificateParams, TlsError> {
    let mut p =
        CertificateParams::new(Vec::<String>::new()).map_err(|source| TlsError::Generate {
            what: "CA certificate",
            source,
        })?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "valkey-operator CA");
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

/// A new CA for `cluster`, valid from an hour before `now_unix` for
/// [`CA_LIFETIME`].
pub fn new_ca(cluster: &ValidatedCluster, now_unix: i64) -> Result<Ca, TlsError> {
    let key = generate_key("CA key")?;
    let mut p = ca_params(cluster)?;
    p.serial_number = Some(random_serial());
    p.not_before = offset(now_unix - secs(BACKDATE))?;
    p.not_after = offset(now_unix.saturating_add(secs(CA_LIFETIME)))?;
    let cert = p.self_signed(&key).map_err(|source| TlsError::Generate {
        what: "CA certificate",
        source,
    })?;
    Ok(Ca {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
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
    let issuer = Issuer::new(ca_params(cluster)?, ca_key);
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
            name: Some(name),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(cluster_labels(&cluster.name)),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
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

/// `<cluster>-tls-ca-key`: the CA with its key.
pub fn ca_key_secret(cluster: &ValidatedCluster, owner: &OwnerReference, ca: &Ca) -> Secret {
    owned_secret(
        cluster,
        owner,
        tls_ca_key_secret_name(&cluster.name),
        BTreeMap::new(),
        vec![(TLS_CA_KEY, &ca.cert_pem), (CA_PRIVATE_KEY, &ca.key_pem)],
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

/// The CA of `<cluster>-tls-ca-key`, when both keys are there.
pub fn ca_of(secret: &Secret) -> Option<Ca> {
    Some(Ca {
        cert_pem: secret_text(secret, TLS_CA_KEY)?,
        key_pem: secret_text(secret, CA_PRIVATE_KEY)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::test_support::{cluster, owner};

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
        }
    }

    #[test]
    fn a_certificate_is_issued_first_then_kept_while_it_is_young_and_names_every_member() {
        let members = ips(&["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            issue_reason(None, "CA", &members, NOW),
            Some("first certificate")
        );
        let young = facts(
            "CA",
            NOW + 80 * 24 * 3600,
            &["10.0.0.1", "10.0.0.2", "10.0.0.9"],
        );
        assert_eq!(issue_reason(Some(&young), "CA", &members, NOW), None);
    }

    #[test]
    fn it_is_issued_again_for_a_new_ca_a_new_member_ip_or_near_its_end() {
        let members = ips(&["10.0.0.1", "10.0.0.2"]);
        let ok = facts("CA", NOW + 80 * 24 * 3600, &["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            issue_reason(Some(&ok), "OTHER", &members, NOW),
            Some("the CA changed")
        );
        let missing_ip = facts("CA", NOW + 80 * 24 * 3600, &["10.0.0.1"]);
        assert!(issue_reason(Some(&missing_ip), "CA", &members, NOW).is_some());
        let old = facts("CA", NOW + 29 * 24 * 3600, &["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            issue_reason(Some(&old), "CA", &members, NOW),
            Some("renewal: in the last third of its life")
        );
        let broken = IssuedFacts {
            complete: false,
            ..ok
        };
        assert!(issue_reason(Some(&broken), "CA", &members, NOW).is_some());
    }

    #[test]
    fn issued_secrets_carry_what_the_next_reconcile_reads_back() -> Result<(), TlsError> {
        let c = cluster("cache", 3, 1);
        let ca = new_ca(&c, NOW)?;
        let members = ips(&["10.0.0.1"]);
        let issued = issue(&c, &ca, &members, NOW)?;
        let s = serving_secret(&c, &owner(), &ca.cert_pem, &issued);
        assert_eq!(s.metadata.name.as_deref(), Some("cache-tls"));
        let read = IssuedFacts::of(&s);
        assert_eq!(read.ips, members);
        assert_eq!(read.not_after_unix, Some(issued.not_after_unix));
        assert_eq!(issue_reason(Some(&read), &ca.cert_pem, &members, NOW), None);
        assert_eq!(ca_of(&ca_key_secret(&c, &owner(), &ca)), Some(ca.clone()));
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
}
