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

/// What `<cluster>-auth-applied` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedRecord<'a> {
    /// The password the members were last given in full ("" once auth is off).
    pub password: &'a str,
    /// The number of the rotation the members run with (their restart hash).
    pub number: u64,
    /// A rotation under way: the password it moves to and its number. Each
    /// new password gets a number of its own, so a second change before the
    /// first finished restarts the members again (onto the newest password)
    /// rather than leaving some on the one in between.
    pub target: Option<(&'a str, u64)>,
    /// The highest rotation number ever handed out: numbers are never
    /// given twice, so a pod's number always says which password it started
    /// with (a reverted rotation's number stays used).
    pub highest: u64,
}

/// `<cluster>-auth-applied`: the password the members were last given,
/// owned by the cluster, read by the operator only.
pub fn applied_secret(
    c: &ValidatedCluster,
    owner: &OwnerReference,
    record: &AppliedRecord,
) -> Secret {
    let bytes = |s: &str| k8s_openapi::ByteString(s.as_bytes().to_vec());
    let mut data = BTreeMap::from([
        (APPLIED_KEY.to_string(), bytes(record.password)),
        (
            APPLIED_GENERATION_KEY.to_string(),
            bytes(&record.number.to_string()),
        ),
    ]);
    data.insert(
        APPLIED_HIGHEST_KEY.to_string(),
        bytes(&record.highest.to_string()),
    );
    if let Some((password, number)) = record.target {
        data.insert(APPLIED_TARGET_KEY.to_string(), bytes(password));
        data.insert(
            APPLIED_TARGET_GENERATION_KEY.to_string(),
            bytes(&number.to_string()),
        );
    }
    Secret {
        metadata: owned_meta(c, owner, api::constants::auth_applied_secret_name(&c.name)),
        data: Some(data),
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
/// The password a rotation under way moves to, in `<cluster>-auth-applied`.
pub const APPLIED_TARGET_KEY: &str = "target-password";
/// That rotation's number.
pub const APPLIED_TARGET_GENERATION_KEY: &str = "target-generation";
/// The highest rotation number ever handed out.
pub const APPLIED_HIGHEST_KEY: &str = "highest-generation";

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
    use crate::test_support::{cluster, owner};

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

/// A JSON merge patch that turns `current` into `desired` (its `data` and
/// annotations), conditional on `current`'s resourceVersion: the API server
/// answers 409 when the Secret changed since it was read, as a replace would.
/// A patch rather than a replace (PUT) because the operator's RBAC grants
/// `patch` on Secrets and never `update` (deploy/rbac, the chart's rules).
/// Keys and annotations `desired` no longer has are set to null (removed).
pub fn conditional_replace_patch(current: &Secret, desired: &Secret) -> serde_json::Value {
    use serde_json::{Map, Value};
    let removed_as_null = |now: Option<Vec<&String>>, keep: &dyn Fn(&str) -> bool| {
        now.into_iter()
            .flatten()
            .filter(|k| !keep(k))
            .map(|k| (k.clone(), Value::Null))
            .collect::<Map<String, Value>>()
    };
    let mut data = removed_as_null(current.data.as_ref().map(|d| d.keys().collect()), &|k| {
        desired.data.as_ref().is_some_and(|d| d.contains_key(k))
    });
    for (k, v) in desired.data.iter().flatten() {
        data.insert(k.clone(), serde_json::to_value(v).unwrap_or(Value::Null));
    }
    let mut annotations = removed_as_null(
        current
            .metadata
            .annotations
            .as_ref()
            .map(|a| a.keys().collect()),
        &|k| {
            desired
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(k))
        },
    );
    for (k, v) in desired.metadata.annotations.iter().flatten() {
        annotations.insert(k.clone(), Value::String(v.clone()));
    }
    serde_json::json!({
        "metadata": {
            "resourceVersion": current.metadata.resource_version,
            "annotations": annotations,
        },
        "data": data,
    })
}

#[cfg(test)]
mod patch_tests {
    use super::conditional_replace_patch;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn secret(rv: &str, data: &[(&str, &str)], annotations: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                resource_version: Some(rv.into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_conditional_replace_removes_what_the_new_secret_no_longer_has() {
        let current = secret(
            "41",
            &[("ca.crt", "a"), ("next.crt", "b")],
            &[("gen", "1"), ("next", "x")],
        );
        let desired = secret("", &[("ca.crt", "b")], &[("gen", "2")]);
        let patch = conditional_replace_patch(&current, &desired);
        assert_eq!(patch["metadata"]["resourceVersion"], "41");
        assert_eq!(patch["metadata"]["annotations"]["gen"], "2");
        assert!(patch["metadata"]["annotations"]["next"].is_null());
        assert!(patch["metadata"]["annotations"].get("next").is_some());
        assert_eq!(patch["data"]["ca.crt"], "Yg==");
        assert!(patch["data"].get("next.crt").is_some_and(|v| v.is_null()));
    }
}
