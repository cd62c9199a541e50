// Over 600 lines: 470 lines of code; the rest are its unit tests, kept beside it.
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
//!
//! What the user sets must keep the pods within the `restricted` profile
//! (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>):
//! whoever may edit a ValkeyCluster gets pods the operator creates, so
//! without this a tenant could run privileged pods, root, or added
//! capabilities in a namespace that enforces no Pod Security level. Only the
//! operator's administrator can allow more, with the operator's flag
//! [`ALLOW_PRIVILEGED_FLAG`] ([`ValidationSettings`]). These rules are not
//! CEL rules of the CRD, on purpose: the API server would apply them whatever
//! the flag says, and the flag could allow nothing.
//!
//! [`ValidationSettings`]: super::validation::ValidationSettings

use super::rules::FieldError;
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, PodSecurityContext, SELinuxOptions, SeccompProfile,
    SecurityContext, WindowsSecurityContextOptions,
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

/// The operator's flag that lets `spec.podSecurityContext` and
/// `spec.securityContext` go beyond the `restricted` profile.
pub const ALLOW_PRIVILEGED_FLAG: &str = "--allow-privileged-security-context";

/// Capabilities the `restricted` profile lets a container add.
pub const RESTRICTED_ADDABLE_CAPABILITIES: &[&str] = &["NET_BIND_SERVICE"];

/// seccomp and AppArmor profile types the `restricted` profile allows
/// (`Unconfined` is what it refuses).
pub const RESTRICTED_PROFILE_TYPES: &[&str] = &["RuntimeDefault", "Localhost"];

/// SELinux types the `baseline` (and so `restricted`) profile allows, besides
/// none.
pub const RESTRICTED_SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The sysctls the `baseline` (and so `restricted`) profile allows: those
/// namespaced per pod (Kubernetes' "safe" set).
pub const RESTRICTED_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

const POD: &str = "spec.podSecurityContext";
const CONTAINER: &str = "spec.securityContext";

/// The effective pod and container security contexts, or the errors of a
/// combination no pod could start with (Kubernetes would only report it as
/// CreateContainerConfigError on every member) or, unless `allow_privileged`,
/// one beyond the `restricted` profile.
pub fn resolve(
    pod: Option<&PodSecurityContext>,
    container: Option<&SecurityContext>,
    allow_privileged: bool,
) -> Result<(PodSecurityContext, SecurityContext), Vec<FieldError>> {
    let pod_sc = overlay(&default_pod_security_context(), pod);
    let container_sc = overlay(&default_security_context(), container);
    // The defaults are restricted, so whatever the effective contexts hold
    // beyond it comes from the field of the same name the user set.
    let mut errors = if allow_privileged {
        contradictions(container, &pod_sc, &container_sc)
    } else {
        beyond_restricted(&pod_sc, &container_sc)
    };
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

/// With the `restricted` profile lifted: the settings that contradict a
/// default the user left in place, which the API server or the kubelet
/// would refuse on every member pod.
fn contradictions(
    container: Option<&SecurityContext>,
    pod_sc: &PodSecurityContext,
    container_sc: &SecurityContext,
) -> Vec<FieldError> {
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
    // The API server refuses both with allowPrivilegeEscalation: false,
    // which is the operator's default.
    if container_sc.allow_privilege_escalation == Some(false) {
        if container_sc.privileged == Some(true) {
            errors.push(FieldError {
                field: format!("{CONTAINER}.privileged"),
                message: "true contradicts allowPrivilegeEscalation: false; set \
                          allowPrivilegeEscalation: true as well"
                    .into(),
            });
        }
        let added = container_sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.as_ref());
        for (i, cap) in added.into_iter().flatten().enumerate() {
            if cap == "CAP_SYS_ADMIN" {
                errors.push(FieldError {
                    field: format!("{CONTAINER}.capabilities.add[{i}]"),
                    message: "CAP_SYS_ADMIN contradicts allowPrivilegeEscalation: false; set \
                              allowPrivilegeEscalation: true as well"
                        .into(),
                });
            }
        }
    }
    errors
}

/// The defaults of a container `spec.podTemplate` adds (sidecar or init):
/// the Valkey container's but for the read-only root filesystem, which
/// the `restricted` profile does not ask for and many sidecars need.
pub fn default_added_container_security_context() -> SecurityContext {
    SecurityContext {
        read_only_root_filesystem: None,
        ..default_security_context()
    }
}

/// The security context of a container `spec.podTemplate` adds: the
/// defaults above under the fields `user` sets; beyond the `restricted`
/// profile only when `allow_privileged`. `field` names the container's
/// `securityContext` in errors. What it inherits from the pod is checked
/// (and reported) as `spec.podSecurityContext`.
pub fn resolve_added_container(
    user: Option<&SecurityContext>,
    field: &str,
    allow_privileged: bool,
) -> Result<SecurityContext, Vec<FieldError>> {
    let sc = overlay(&default_added_container_security_context(), user);
    if allow_privileged {
        return Ok(sc);
    }
    let errors: Vec<FieldError> = beyond_restricted_at(&PodSecurityContext::default(), &sc, field)
        .into_iter()
        .filter(|e| e.field.starts_with(field))
        .collect();
    if errors.is_empty() {
        Ok(sc)
    } else {
        Err(errors)
    }
}

/// The fields the pod and the container security contexts share.
struct Level<'a> {
    at: &'a str,
    run_as_non_root: Option<bool>,
    run_as_user: Option<i64>,
    seccomp: Option<&'a SeccompProfile>,
    app_armor: Option<&'a AppArmorProfile>,
    se_linux: Option<&'a SELinuxOptions>,
    windows: Option<&'a WindowsSecurityContextOptions>,
}

/// Every field of the effective contexts beyond the `restricted` profile,
/// as far as a security context can express it (host namespaces, host
/// ports and volumes are the operator's, and restricted).
fn beyond_restricted(pod_sc: &PodSecurityContext, c: &SecurityContext) -> Vec<FieldError> {
    beyond_restricted_at(pod_sc, c, CONTAINER)
}

/// [`beyond_restricted`] with the container's context named `container_at`.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
fn beyond_restricted_at(
    pod_sc: &PodSecurityContext,
    c: &SecurityContext,
    container_at: &str,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut refuse = |field: String, what: String| {
        errors.push(FieldError {
            field,
            message: format!(
                "{what}: member pods keep to the restricted Pod Security Standard unless the \
                 operator runs with {ALLOW_PRIVILEGED_FLAG}"
            ),
        });
    };
    let pod_level = Level {
        at: POD,
        run_as_non_root: pod_sc.run_as_non_root,
        run_as_user: pod_sc.run_as_user,
        seccomp: pod_sc.seccomp_profile.as_ref(),
        app_armor: pod_sc.app_armor_profile.as_ref(),
        se_linux: pod_sc.se_linux_options.as_ref(),
        windows: pod_sc.windows_options.as_ref(),
    };
    let container_level = Level {
        at: container_at,
        run_as_non_root: c.run_as_non_root,
        run_as_user: c.run_as_user,
        seccomp: c.seccomp_profile.as_ref(),
        app_armor: c.app_armor_profile.as_ref(),
        se_linux: c.se_linux_options.as_ref(),
        windows: c.windows_options.as_ref(),
    };
    for level in [pod_level, container_level] {
        let at = level.at;
        if level.run_as_non_root == Some(false) {
            refuse(format!("{at}.runAsNonRoot"), "must not be false".into());
        }
        if level.run_as_user == Some(0) {
            refuse(format!("{at}.runAsUser"), "0 (root) is refused".into());
        }
        for (name, profile_type) in [
            ("seccompProfile", level.seccomp.map(|p| &p.type_)),
            ("appArmorProfile", level.app_armor.map(|p| &p.type_)),
        ] {
            if let Some(t) = profile_type
                && !RESTRICTED_PROFILE_TYPES.contains(&t.as_str())
            {
                refuse(
                    format!("{at}.{name}.type"),
                    format!("{t:?} is refused (RuntimeDefault or Localhost)"),
                );
            }
        }
        if let Some(se) = level.se_linux {
            if let Some(t) = se.type_.as_deref()
                && !t.is_empty()
                && !RESTRICTED_SELINUX_TYPES.contains(&t)
            {
                refuse(
                    format!("{at}.seLinuxOptions.type"),
                    format!(
                        "{t:?} is refused (one of {}, or none)",
                        RESTRICTED_SELINUX_TYPES.join(", ")
                    ),
                );
            }
            for (name, value) in [("user", &se.user), ("role", &se.role)] {
                if value.as_deref().is_some_and(|v| !v.is_empty()) {
                    refuse(
                        format!("{at}.seLinuxOptions.{name}"),
                        "must be left out".into(),
                    );
                }
            }
        }
        if level.windows.and_then(|w| w.host_process) == Some(true) {
            refuse(
                format!("{at}.windowsOptions.hostProcess"),
                "must not be true".into(),
            );
        }
    }
    // Group 0 is not in the `restricted` profile, and it is root's group:
    // with it a container reads and writes what the node's root group may
    // (a runtime socket on a volume, files of other pods on shared storage).
    if c.run_as_group == Some(0) {
        refuse(
            format!("{container_at}.runAsGroup"),
            "0 (root's group) is refused".into(),
        );
    }
    for (field, value) in [
        ("runAsGroup", pod_sc.run_as_group),
        ("fsGroup", pod_sc.fs_group),
    ] {
        if value == Some(0) {
            refuse(
                format!("{POD}.{field}"),
                "0 (root's group) is refused".into(),
            );
        }
    }
    for (i, g) in pod_sc.supplemental_groups.iter().flatten().enumerate() {
        if *g == 0 {
            refuse(
                format!("{POD}.supplementalGroups[{i}]"),
                "0 (root's group) is refused".into(),
            );
        }
    }
    for (i, sysctl) in pod_sc.sysctls.iter().flatten().enumerate() {
        if !RESTRICTED_SYSCTLS.contains(&sysctl.name.as_str()) {
            refuse(
                format!("{POD}.sysctls[{i}].name"),
                format!(
                    "{:?} is refused (only sysctls namespaced per pod: {})",
                    sysctl.name,
                    RESTRICTED_SYSCTLS.join(", ")
                ),
            );
        }
    }
    if c.privileged == Some(true) {
        refuse(
            format!("{container_at}.privileged"),
            "must not be true".into(),
        );
    }
    if c.allow_privilege_escalation != Some(false) {
        refuse(
            format!("{container_at}.allowPrivilegeEscalation"),
            "must be false".into(),
        );
    }
    let caps = c.capabilities.as_ref();
    for (i, cap) in caps
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !RESTRICTED_ADDABLE_CAPABILITIES.contains(&cap.as_str()) {
            refuse(
                format!("{container_at}.capabilities.add[{i}]"),
                format!("{cap:?} is refused (only NET_BIND_SERVICE may be added)"),
            );
        }
    }
    if !caps
        .and_then(|c| c.drop.as_ref())
        .is_some_and(|d| d.iter().any(|cap| cap == "ALL"))
    {
        refuse(
            format!("{container_at}.capabilities.drop"),
            "must include ALL (a capabilities object replaces the operator's, which drops \
             ALL: write drop: [ALL] beside add)"
                .into(),
        );
    }
    if let Some(p) = c.proc_mount.as_deref()
        && p != "Default"
    {
        refuse(
            format!("{container_at}.procMount"),
            format!("{p:?} is refused (Default, or none)"),
        );
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Sysctl;

    #[test]
    fn defaults_are_the_restricted_profile() {
        let (pod, c) = resolve(None, None, false).unwrap();
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
        let (pod, _) = resolve(Some(&user), None, false).unwrap();
        assert_eq!(pod.run_as_user, Some(1001));
        assert_eq!(pod.fs_group, Some(2000));
        assert_eq!(pod.run_as_group, Some(999));
        assert_eq!(pod.run_as_non_root, Some(true));
        let user = SecurityContext {
            read_only_root_filesystem: Some(false),
            ..Default::default()
        };
        let (_, c) = resolve(None, Some(&user), false).unwrap();
        assert_eq!(c.read_only_root_filesystem, Some(false));
        assert_eq!(c.allow_privilege_escalation, Some(false));
    }

    #[test]
    fn root_with_run_as_non_root_is_refused_naming_the_field() {
        let user = SecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        };
        let errors = resolve(None, Some(&user), true).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.securityContext.runAsUser");
        assert!(errors[0].message.contains("contradicts"), "{}", errors[0]);
        // Root is allowed when the user says so twice, and the operator lets it.
        let pod = PodSecurityContext {
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            ..Default::default()
        };
        let user = SecurityContext {
            run_as_non_root: Some(false),
            ..Default::default()
        };
        assert!(resolve(Some(&pod), Some(&user), true).is_ok());
        let bad = PodSecurityContext {
            run_as_group: Some(-1),
            ..Default::default()
        };
        let errors = resolve(Some(&bad), None, true).unwrap_err();
        assert_eq!(errors[0].field, "spec.podSecurityContext.runAsGroup");
    }

    fn caps(add: &[&str], drop: &[&str]) -> Option<Capabilities> {
        let list = |l: &[&str]| Some(l.iter().map(|c| c.to_string()).collect());
        Some(Capabilities {
            add: list(add),
            drop: list(drop),
        })
    }

    fn profile(type_: &str) -> Option<SeccompProfile> {
        Some(SeccompProfile {
            type_: type_.into(),
            localhost_profile: None,
        })
    }

    /// Overlays beyond the `restricted` profile, each with exactly the fields
    /// it must be refused for; every one is accepted with the operator's flag.
    #[expect(
        clippy::too_many_lines,
        reason = "written before the lint was on; split it when it next changes"
    )]
    fn beyond_restricted_cases() -> Vec<(PodSecurityContext, SecurityContext, Vec<&'static str>)> {
        let pod = PodSecurityContext::default;
        let container = SecurityContext::default;
        vec![
            (
                pod(),
                SecurityContext {
                    privileged: Some(true),
                    allow_privilege_escalation: Some(true),
                    ..container()
                },
                vec![
                    "spec.securityContext.privileged",
                    "spec.securityContext.allowPrivilegeEscalation",
                ],
            ),
            (
                pod(),
                SecurityContext {
                    allow_privilege_escalation: Some(true),
                    ..container()
                },
                vec!["spec.securityContext.allowPrivilegeEscalation"],
            ),
            (
                pod(),
                SecurityContext {
                    capabilities: caps(&["NET_BIND_SERVICE", "NET_ADMIN"], &["ALL"]),
                    ..container()
                },
                vec!["spec.securityContext.capabilities.add[1]"],
            ),
            (
                pod(),
                SecurityContext {
                    capabilities: caps(&["NET_BIND_SERVICE"], &[]),
                    ..container()
                },
                vec!["spec.securityContext.capabilities.drop"],
            ),
            (
                pod(),
                SecurityContext {
                    run_as_user: Some(0),
                    run_as_non_root: Some(false),
                    ..container()
                },
                vec![
                    "spec.securityContext.runAsNonRoot",
                    "spec.securityContext.runAsUser",
                ],
            ),
            (
                PodSecurityContext {
                    run_as_user: Some(0),
                    run_as_non_root: Some(false),
                    ..pod()
                },
                SecurityContext {
                    run_as_non_root: Some(false),
                    ..container()
                },
                vec![
                    "spec.podSecurityContext.runAsNonRoot",
                    "spec.podSecurityContext.runAsUser",
                    "spec.securityContext.runAsNonRoot",
                ],
            ),
            (
                PodSecurityContext {
                    seccomp_profile: profile("Unconfined"),
                    ..pod()
                },
                container(),
                vec!["spec.podSecurityContext.seccompProfile.type"],
            ),
            (
                pod(),
                SecurityContext {
                    seccomp_profile: profile("Unconfined"),
                    ..container()
                },
                vec!["spec.securityContext.seccompProfile.type"],
            ),
            (
                pod(),
                SecurityContext {
                    app_armor_profile: Some(AppArmorProfile {
                        type_: "Unconfined".into(),
                        localhost_profile: None,
                    }),
                    ..container()
                },
                vec!["spec.securityContext.appArmorProfile.type"],
            ),
            (
                PodSecurityContext {
                    se_linux_options: Some(SELinuxOptions {
                        type_: Some("spc_t".into()),
                        user: Some("system_u".into()),
                        role: Some("system_r".into()),
                        level: Some("s0:c1,c2".into()),
                    }),
                    ..pod()
                },
                container(),
                vec![
                    "spec.podSecurityContext.seLinuxOptions.type",
                    "spec.podSecurityContext.seLinuxOptions.user",
                    "spec.podSecurityContext.seLinuxOptions.role",
                ],
            ),
            (
                pod(),
                SecurityContext {
                    windows_options: Some(WindowsSecurityContextOptions {
                        host_process: Some(true),
                        ..Default::default()
                    }),
                    ..container()
                },
                vec!["spec.securityContext.windowsOptions.hostProcess"],
            ),
            (
                pod(),
                SecurityContext {
                    proc_mount: Some("Unmasked".into()),
                    ..container()
                },
                vec!["spec.securityContext.procMount"],
            ),
            (
                PodSecurityContext {
                    sysctls: Some(vec![
                        Sysctl {
                            name: "net.ipv4.tcp_keepalive_time".into(),
                            value: "60".into(),
                        },
                        Sysctl {
                            name: "net.core.somaxconn".into(),
                            value: "4096".into(),
                        },
                    ]),
                    ..pod()
                },
                container(),
                vec!["spec.podSecurityContext.sysctls[1].name"],
            ),
        ]
    }

    #[test]
    fn every_field_beyond_the_restricted_profile_is_refused_by_name() {
        for (pod, container, fields) in beyond_restricted_cases() {
            let errors = resolve(Some(&pod), Some(&container), false).unwrap_err();
            let named: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(named, fields, "{errors:?}");
            for e in &errors {
                assert!(e.message.contains(ALLOW_PRIVILEGED_FLAG), "{e}");
            }
        }
    }

    #[test]
    fn the_operator_flag_lets_every_one_of_them_through() {
        for (pod, container, _) in beyond_restricted_cases() {
            let (p, c) = resolve(Some(&pod), Some(&container), true).unwrap();
            // What the user set is what the pod gets.
            for (mine, theirs) in [
                (serde_json::to_value(&pod), serde_json::to_value(&p)),
                (serde_json::to_value(&container), serde_json::to_value(&c)),
            ] {
                let (Ok(serde_json::Value::Object(mine)), Ok(theirs)) = (mine, theirs) else {
                    panic!("security contexts serialize as objects");
                };
                for (k, v) in mine {
                    assert_eq!(theirs[&k], v, "{k}");
                }
            }
        }
    }

    #[test]
    fn what_the_restricted_profile_allows_is_accepted() {
        let pod = PodSecurityContext {
            run_as_user: Some(1001),
            seccomp_profile: Some(SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some("profiles/valkey.json".into()),
            }),
            se_linux_options: Some(SELinuxOptions {
                type_: Some("container_t".into()),
                level: Some("s0:c1,c2".into()),
                ..Default::default()
            }),
            sysctls: Some(vec![Sysctl {
                name: "net.ipv4.ip_local_port_range".into(),
                value: "1024 65535".into(),
            }]),
            ..Default::default()
        };
        let container = SecurityContext {
            capabilities: caps(&["NET_BIND_SERVICE"], &["ALL"]),
            privileged: Some(false),
            proc_mount: Some("Default".into()),
            app_armor_profile: Some(AppArmorProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            read_only_root_filesystem: Some(false),
            ..Default::default()
        };
        assert!(resolve(Some(&pod), Some(&container), false).is_ok());
    }

    #[test]
    fn with_the_flag_a_privileged_container_must_allow_escalation_too() {
        // The API server refuses privileged (or CAP_SYS_ADMIN) with the
        // operator's default allowPrivilegeEscalation: false.
        let privileged = SecurityContext {
            privileged: Some(true),
            capabilities: caps(&["CAP_SYS_ADMIN"], &[]),
            ..Default::default()
        };
        let errors = resolve(None, Some(&privileged), true).unwrap_err();
        let named: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            named,
            [
                "spec.securityContext.privileged",
                "spec.securityContext.capabilities.add[0]"
            ]
        );
        let escalating = SecurityContext {
            allow_privilege_escalation: Some(true),
            ..privileged
        };
        assert!(resolve(None, Some(&escalating), true).is_ok());
    }
}
