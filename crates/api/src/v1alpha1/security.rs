//! The security contexts of member pods: restricted by default, adjustable.
//!
//! Member pods pass the Kubernetes `restricted` Pod Security profile as the
//! operator writes them: Valkey runs as the official image's `valkey` user
//! (uid and gid 999), never as root, with no privilege escalation, no
//! capabilities, the runtime's default seccomp profile and a read-only root
//! filesystem (Valkey writes only to its data volume). `spec.podSecurityContext`
//! and `spec.securityContext` adjust this: every field the user sets replaces
//! the operator's value of that field (a whole sub-object such as
//! `capabilities` or `seccompProfile` is replaced, not merged), and fields the
//! user leaves out keep the defaults.

use super::validation::FieldError;
use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The uid and gid Valkey runs as by default: the `valkey` user of the
/// official images.
pub const VALKEY_UID: i64 = 999;

/// The operator's pod-level defaults.
pub fn default_pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(VALKEY_UID),
        run_as_group: Some(VALKEY_UID),
        // Volumes (the data PVC, the emptyDir) are made group-writable for
        // this group, so Valkey can write them as a non-root user.
        fs_group: Some(VALKEY_UID),
        fs_group_change_policy: Some("OnRootMismatch".into()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

/// The operator's defaults for the Valkey container.
pub fn default_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..Default::default()
    }
}

/// The uid and gid of the operator image's `nonroot` user, which the
/// exporter sidecar runs as.
pub const EXPORTER_UID: i64 = 65532;

/// The exporter container's security context: restricted on its own, so it
/// passes the `restricted` profile whatever `spec.podSecurityContext` and
/// `spec.securityContext` (which are the Valkey container's) say. It reads
/// only the password (environment) and the CA (a world-readable Secret
/// file), so the image's own user does.
pub fn exporter_security_context() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(EXPORTER_UID),
        run_as_group: Some(EXPORTER_UID),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..default_security_context()
    }
}

/// `user` over `defaults`: every field set in `user` wins.
fn overlay<T: Serialize + DeserializeOwned + Clone>(defaults: &T, user: Option<&T>) -> T {
    let Some(user) = user else {
        return defaults.clone();
    };
    let (Ok(serde_json::Value::Object(mut base)), Ok(serde_json::Value::Object(mine))) =
        (serde_json::to_value(defaults), serde_json::to_value(user))
    else {
        return user.clone();
    };
    for (k, v) in mine {
        if !v.is_null() {
            base.insert(k, v);
        }
    }
    serde_json::from_value(serde_json::Value::Object(base)).unwrap_or_else(|_| user.clone())
}

/// The effective pod and container security contexts, or the errors of a
/// combination no pod could start with (Kubernetes would only report it as
/// CreateContainerConfigError on every member).
pub fn resolve(
    pod: Option<&PodSecurityContext>,
    container: Option<&SecurityContext>,
) -> Result<(PodSecurityContext, SecurityContext), Vec<FieldError>> {
    let pod_sc = overlay(&default_pod_security_context(), pod);
    let container_sc = overlay(&default_security_context(), container);
    let mut errors = Vec::new();
    let uid_field = if container.and_then(|c| c.run_as_user).is_some() {
        "spec.securityContext.runAsUser"
    } else {
        "spec.podSecurityContext.runAsUser"
    };
    let uid = container_sc.run_as_user.or(pod_sc.run_as_user);
    let non_root = container_sc.run_as_non_root.or(pod_sc.run_as_non_root);
    if non_root == Some(true) && uid == Some(0) {
        errors.push(FieldError {
            field: uid_field.into(),
            message: "0 (root) contradicts runAsNonRoot: true; set runAsNonRoot: false \
                      as well to run Valkey as root"
                .into(),
        });
    }
    for (field, value) in [
        ("spec.podSecurityContext.runAsUser", pod_sc.run_as_user),
        ("spec.podSecurityContext.runAsGroup", pod_sc.run_as_group),
        ("spec.podSecurityContext.fsGroup", pod_sc.fs_group),
        ("spec.securityContext.runAsUser", container_sc.run_as_user),
        ("spec.securityContext.runAsGroup", container_sc.run_as_group),
    ] {
        if let Some(v) = value
            && !(0..=i64::from(u32::MAX - 1)).contains(&v)
        {
            errors.push(FieldError {
                field: field.into(),
                message: format!("must be between 0 and {}, got {v}", u32::MAX - 1),
            });
        }
    }
    if errors.is_empty() {
        Ok((pod_sc, container_sc))
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_restricted_profile() {
        let (pod, c) = resolve(None, None).unwrap();
        assert_eq!(pod.run_as_non_root, Some(true));
        assert_eq!(pod.run_as_user, Some(999));
        assert_eq!(pod.fs_group, Some(999));
        assert_eq!(
            pod.seccomp_profile.map(|s| s.type_).as_deref(),
            Some("RuntimeDefault")
        );
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(
            c.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        assert_eq!(c.read_only_root_filesystem, Some(true));
    }

    #[test]
    fn a_field_the_user_sets_replaces_only_that_field() {
        let user = PodSecurityContext {
            run_as_user: Some(1001),
            fs_group: Some(2000),
            ..Default::default()
        };
        let (pod, _) = resolve(Some(&user), None).unwrap();
        assert_eq!(pod.run_as_user, Some(1001));
        assert_eq!(pod.fs_group, Some(2000));
        assert_eq!(pod.run_as_group, Some(999));
        assert_eq!(pod.run_as_non_root, Some(true));
        let user = SecurityContext {
            read_only_root_filesystem: Some(false),
            ..Default::default()
        };
        let (_, c) = resolve(None, Some(&user)).unwrap();
        assert_eq!(c.read_only_root_filesystem, Some(false));
        assert_eq!(c.allow_privilege_escalation, Some(false));
    }

    #[test]
    fn root_with_run_as_non_root_is_refused_naming_the_field() {
        let user = SecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        };
        let errors = resolve(None, Some(&user)).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.securityContext.runAsUser");
        // Root is allowed when the user says so twice.
        let pod = PodSecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            ..Default::default()
        };
        let user = SecurityContext {
            run_as_non_root: Some(false),
            ..Default::default()
        };
        assert!(resolve(Some(&pod), Some(&user)).is_ok());
        let bad = PodSecurityContext {
            run_as_group: Some(-1),
            ..Default::default()
        };
        let errors = resolve(Some(&bad), None).unwrap_err();
        assert_eq!(errors[0].field, "spec.podSecurityContext.runAsGroup");
    }
}
