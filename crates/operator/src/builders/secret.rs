//! Secrets: reading a key of one ([`secret_text`]), and the password Secret
//! `<cluster>-auth` the operator generates when the user
//! names none. It is only ever *created*: once it exists the operator never
//! overwrites or deletes it (clients may have read the password), and a
//! Secret the user named is never touched at all.

use super::owned_meta;
use api::ValidatedCluster;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rand::RngExt as _;
use std::collections::BTreeMap;

/// Length of a generated password: 32 alphanumerics, about 190 bits.
pub const PASSWORD_LENGTH: usize = 32;

/// A fresh random password.
pub fn generate_password() -> String {
    let mut rng = rand::rng();
    (0..PASSWORD_LENGTH)
        .map(|_| char::from(rng.sample(rand::distr::Alphanumeric)))
        .collect()
}

/// The Secret to create when it is absent, or `None` when the user named their
/// own Secret or auth is off.
pub fn auth_secret(c: &ValidatedCluster, owner: &OwnerReference, password: &str) -> Option<Secret> {
    if !c.auth.enabled || !c.auth.operator_managed {
        return None;
    }
    Some(Secret {
        metadata: owned_meta(c, owner, c.auth.secret_name.clone()),
        string_data: Some(BTreeMap::from([(
            c.auth.secret_key.clone(),
            password.to_string(),
        )])),
        type_: Some("Opaque".into()),
        ..Default::default()
    })
}

/// `<cluster>-auth-applied`: the password the members were last given,
/// owned by the cluster, read by the operator only.
pub fn applied_secret(
    c: &ValidatedCluster,
    owner: &OwnerReference,
    password: &str,
    generation: u64,
) -> Secret {
    Secret {
        metadata: owned_meta(c, owner, api::constants::auth_applied_secret_name(&c.name)),
        data: Some(BTreeMap::from([
            (
                APPLIED_KEY.to_string(),
                k8s_openapi::ByteString(password.as_bytes().to_vec()),
            ),
            (
                APPLIED_GENERATION_KEY.to_string(),
                k8s_openapi::ByteString(generation.to_string().into_bytes()),
            ),
        ])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// The passwords of the system users, kept in `<cluster>-users`.
pub struct SystemPasswords {
    /// `valkey-replication`'s: the members' `primaryauth`.
    pub replication: String,
    /// `valkey-operator`'s: the operator logs in with it.
    pub operator: String,
}

/// `<cluster>-users`: the members' users file (`valkey::acl::users_file`),
/// mounted by every member pod, and the system users' passwords; written by
/// the operator only.
pub fn users_secret(
    c: &ValidatedCluster,
    owner: &OwnerReference,
    file: &str,
    passwords: &SystemPasswords,
) -> Secret {
    Secret {
        metadata: owned_meta(c, owner, api::constants::users_secret_name(&c.name)),
        data: Some(BTreeMap::from([
            (
                api::constants::USERS_FILE_KEY.to_string(),
                k8s_openapi::ByteString(file.as_bytes().to_vec()),
            ),
            (
                api::constants::REPLICATION_PASSWORD_KEY.to_string(),
                k8s_openapi::ByteString(passwords.replication.as_bytes().to_vec()),
            ),
            (
                api::constants::OPERATOR_PASSWORD_KEY.to_string(),
                k8s_openapi::ByteString(passwords.operator.as_bytes().to_vec()),
            ),
        ])),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

/// The key of the password in `<cluster>-auth-applied`.
pub const APPLIED_KEY: &str = "password";
/// The key of the number of rotations in `<cluster>-auth-applied`.
pub const APPLIED_GENERATION_KEY: &str = "generation";

/// The text of `key` in a Secret (`data`, else `stringData`).
pub fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .cloned()
        })
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::test_support::{cluster, owner};

    #[test]
    fn generated_passwords_are_long_alphanumeric_and_differ() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), PASSWORD_LENGTH);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_operator_makes_cluster_auth_with_key_password() {
        let s = auth_secret(&cluster("cache", 3, 1), &owner(), "pw").unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("cache-auth"));
        assert_eq!(s.string_data.unwrap()["password"], "pw");
    }

    #[test]
    fn a_secret_the_user_named_is_never_built() {
        let mut c = cluster("cache", 3, 1);
        c.auth.operator_managed = false;
        c.auth.secret_name = "mine".into();
        assert!(auth_secret(&c, &owner(), "pw").is_none());
        let mut off = cluster("cache", 3, 1);
        off.auth.enabled = false;
        assert!(auth_secret(&off, &owner(), "pw").is_none());
    }
}
