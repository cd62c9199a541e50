//! The testbed's PKI, made fresh by every `up` (ECDSA P-256 throughout): a CA,
//! the apiserver's serving certificate, an admin client certificate in
//! `system:masters` (used by kubectl, the controller-manager, the scheduler and
//! the agent), and the service-account key pair the apiserver signs tokens with.
//!
//! Files under `DIR/pki`: `ca.crt ca.key apiserver.crt apiserver.key admin.crt
//! admin.key sa.key sa.pub`.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, date_time_ymd,
};
use std::path::{Path, PathBuf};

/// Errors making or writing the PKI.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("generating the {what}: {source}")]
    Generate {
        what: &'static str,
        source: rcgen::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// PEM texts of every certificate and key.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: String,
    pub ca_key: String,
    pub apiserver_cert: String,
    pub apiserver_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    /// PKCS#8 private key the apiserver signs service-account tokens with (and
    /// the controller-manager's token controller too).
    pub sa_key: String,
    /// Its public key, which verifies the tokens.
    pub sa_pub: String,
}

/// Paths of the PKI files in `DIR/pki`.
#[derive(Debug, Clone)]
pub struct PkiPaths {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub apiserver_cert: PathBuf,
    pub apiserver_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

impl PkiPaths {
    pub fn in_dir(testbed_dir: &Path) -> Self {
        let dir = testbed_dir.join("pki");
        Self {
            ca_cert: dir.join("ca.crt"),
            apiserver_cert: dir.join("apiserver.crt"),
            apiserver_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
            dir,
        }
    }
}

fn generate_key(what: &'static str) -> Result<KeyPair, CertsError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|source| CertsError::Generate { what, source })
}

fn base_params(
    what: &'static str,
    sans: Vec<String>,
    cn: &str,
) -> Result<CertificateParams, CertsError> {
    let mut p =
        CertificateParams::new(sans).map_err(|source| CertsError::Generate { what, source })?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    // A fixed, generous window: the testbed's certificates never expire under
    // a test, and clock skew inside the machine is not a concern.
    p.not_before = date_time_ymd(2020, 1, 1);
    p.not_after = date_time_ymd(2099, 12, 31);
    Ok(p)
}

/// Makes a fresh PKI. `apiserver_sans` are the names and addresses the
/// apiserver's certificate must be valid for.
pub fn generate(apiserver_sans: &[String]) -> Result<Pki, CertsError> {
    let ca_key = generate_key("CA key")?;
    let mut ca = base_params("CA certificate", Vec::new(), "testbed-ca")?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca
        .self_signed(&ca_key)
        .map_err(|source| CertsError::Generate {
            what: "CA certificate",
            source,
        })?;
    let issuer = Issuer::new(ca, &ca_key);

    let api_key = generate_key("apiserver key")?;
    let mut api = base_params(
        "apiserver certificate",
        apiserver_sans.to_vec(),
        "kube-apiserver",
    )?;
    api.is_ca = IsCa::ExplicitNoCa;
    api.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    api.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let api_cert = api
        .signed_by(&api_key, &issuer)
        .map_err(|source| CertsError::Generate {
            what: "apiserver certificate",
            source,
        })?;

    let admin_key = generate_key("admin key")?;
    let mut admin = base_params("admin certificate", Vec::new(), "admin")?;
    // The apiserver maps O to groups: system:masters is cluster-admin.
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin.is_ca = IsCa::ExplicitNoCa;
    admin.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert =
        admin
            .signed_by(&admin_key, &issuer)
            .map_err(|source| CertsError::Generate {
                what: "admin certificate",
                source,
            })?;

    let sa = generate_key("service-account key")?;

    Ok(Pki {
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        apiserver_cert: api_cert.pem(),
        apiserver_key: api_key.serialize_pem(),
        admin_cert: admin_cert.pem(),
        admin_key: admin_key.serialize_pem(),
        sa_key: sa.serialize_pem(),
        sa_pub: sa.public_key_pem(),
    })
}

/// The names the apiserver answers to: loopback (where everything connects),
/// the in-cluster names of the `kubernetes` Service and its ClusterIP.
pub fn apiserver_sans(first_service_ip: &str, host_ip: &str) -> Vec<String> {
    [
        "127.0.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        first_service_ip,
        host_ip,
    ]
    .into_iter()
    .map(str::to_string)
    .collect()
}

/// Writes the PKI under `paths.dir` (keys readable by the owner only).
pub fn write(pki: &Pki, paths: &PkiPaths) -> Result<(), CertsError> {
    std::fs::create_dir_all(&paths.dir).map_err(|source| CertsError::Write {
        path: paths.dir.clone(),
        source,
    })?;
    let ca_key = paths.dir.join("ca.key");
    for (path, text, secret) in [
        (&paths.ca_cert, &pki.ca_cert, false),
        (&ca_key, &pki.ca_key, true),
        (&paths.apiserver_cert, &pki.apiserver_cert, false),
        (&paths.apiserver_key, &pki.apiserver_key, true),
        (&paths.admin_cert, &pki.admin_cert, false),
        (&paths.admin_key, &pki.admin_key, true),
        (&paths.sa_key, &pki.sa_key, true),
        (&paths.sa_pub, &pki.sa_pub, false),
    ] {
        write_file(path, text, secret)?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str, secret: bool) -> Result<(), CertsError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).map_err(|source| CertsError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = if secret { 0o600 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        CertsError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pki_is_pem_with_private_keys_in_pkcs8_and_a_public_key_for_tokens() {
        let pki = generate(&apiserver_sans("10.101.0.1", "10.101.255.1")).unwrap();
        for cert in [&pki.ca_cert, &pki.apiserver_cert, &pki.admin_cert] {
            assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"));
        }
        for key in [&pki.ca_key, &pki.apiserver_key, &pki.admin_key, &pki.sa_key] {
            assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"));
        }
        assert!(pki.sa_pub.starts_with("-----BEGIN PUBLIC KEY-----"));
        assert_ne!(pki.admin_cert, pki.apiserver_cert);
    }

    #[test]
    fn the_apiserver_answers_to_loopback_and_its_service_names() {
        let sans = apiserver_sans("10.101.0.1", "10.101.255.1");
        for name in [
            "127.0.0.1",
            "localhost",
            "kubernetes.default.svc",
            "10.101.0.1",
        ] {
            assert!(sans.iter().any(|s| s == name), "{name}");
        }
    }
}
