//! What the operator reads off a member's pod: where it runs, its IP, whether
//! it is Ready, and whether its spec is out of date (restart or placement
//! hash differs from the desired StatefulSet template).

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use resources::statefulset::{ANNOTATION_PLACEMENT_HASH, ANNOTATION_RESTART_HASH};
use std::net::IpAddr;

/// A member's pod as the controller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub name: String,
    /// The node it is bound to.
    pub node: Option<String>,
    pub ip: Option<IpAddr>,
    /// The Ready condition is True.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// The restart hash the pod was created with.
    pub restart_hash: Option<String>,
    /// The placement hash the pod was created with.
    pub placement_hash: Option<String>,
    /// The live role label, when set.
    pub role_label: Option<String>,
    /// Its Valkey container was started with the cluster password (auth on).
    pub runs_with_password: bool,
    /// A container that cannot start, and why ([`start_failure`]).
    pub start_failure: Option<StartFailure>,
}

/// A container the kubelet cannot start: its image cannot be pulled, its
/// config is invalid, or it keeps crashing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    pub container: String,
    pub image: String,
    /// The waiting reason (`ErrImagePull`, `ImagePullBackOff`, ...).
    pub reason: String,
    pub message: String,
}

impl StartFailure {
    /// The image cannot be pulled (or named).
    pub fn image_pull(&self) -> bool {
        matches!(
            self.reason.as_str(),
            "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull"
        )
    }
}

/// The waiting reasons of a container that will not start by itself.
const START_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// The first container (init containers first) waiting for a reason it will
/// not get over by itself.
pub fn start_failure(pod: &Pod) -> Option<StartFailure> {
    let status = pod.status.as_ref()?;
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.clone()?;
            START_FAILURES
                .contains(&reason.as_str())
                .then(|| StartFailure {
                    container: c.name.clone(),
                    image: c.image.clone(),
                    message: last_words(c)
                        .unwrap_or_else(|| waiting.message.clone().unwrap_or_default()),
                    reason,
                })
        })
}

/// Why a crashing container last stopped: its exit code and the last line
/// of its termination message (with `FallbackToLogsOnError`, the tail of
/// its log: for valkey-server, the line saying what it could not do).
fn last_words(c: &k8s_openapi::api::core::v1::ContainerStatus) -> Option<String> {
    let t = c.last_state.as_ref()?.terminated.as_ref()?;
    let line = t
        .message
        .as_deref()?
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())?;
    // At most 300 bytes of it, cut at a character boundary.
    let mut end = line.len().min(300);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(format!("exit code {}: {}", t.exit_code, &line[..end]))
}

impl PodFacts {
    /// The scheduler's word on a pod it found no node for (its PodScheduled
    /// condition False, reason Unschedulable), or `None`.
    pub fn unschedulable(pod: &Pod) -> Option<String> {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            return None;
        }
        pod.status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
            .map(|c| {
                c.message
                    .clone()
                    .unwrap_or_else(|| "no reason given".into())
            })
    }

    /// Reads the facts off a pod.
    pub fn of(pod: &Pod) -> PodFacts {
        let annotations = pod.metadata.annotations.as_ref();
        let status = pod.status.as_ref();
        PodFacts {
            name: pod.metadata.name.clone().unwrap_or_default(),
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            ip: status
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok()),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            restart_hash: annotations
                .and_then(|a| a.get(ANNOTATION_RESTART_HASH))
                .cloned(),
            placement_hash: annotations
                .and_then(|a| a.get(ANNOTATION_PLACEMENT_HASH))
                .cloned(),
            role_label: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(api::constants::LABEL_ROLE))
                .cloned(),
            runs_with_password: pod.spec.as_ref().is_some_and(|s| {
                s.containers.iter().any(|c| {
                    c.env
                        .iter()
                        .flatten()
                        .any(|e| e.name == resources::statefulset::PASSWORD_ENV)
                })
            }),
            start_failure: start_failure(pod),
        }
    }

    /// Not yet bound to a node (Pending): it never ran, so re-creating it
    /// loses nothing.
    pub fn unscheduled(&self) -> bool {
        self.node.is_none()
    }
}

/// A template annotation of a StatefulSet.
pub fn template_annotation(sts: &StatefulSet, key: &str) -> Option<String> {
    sts.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(key))
        .cloned()
}

/// Whether the pod runs an older image, resources or restart-only config than
/// `desired` asks for.
pub fn needs_restart(pod: &PodFacts, desired: &StatefulSet) -> bool {
    let want = template_annotation(desired, ANNOTATION_RESTART_HASH);
    want.is_some() && pod.restart_hash != want
}

/// Whether the pod was created with other scheduling rules than `desired`.
pub fn placement_outdated(pod: &PodFacts, desired: &StatefulSet) -> bool {
    let want = template_annotation(desired, ANNOTATION_PLACEMENT_HASH);
    want.is_some() && pod.placement_hash != want
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn pod(restart: &str, node: Option<&str>, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("c-0-0".into()),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_RESTART_HASH.to_string(),
                    restart.to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: Some(PodStatus {
                pod_ip: Some("10.0.0.3".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn sts(restart: &str) -> StatefulSet {
        let mut s = StatefulSet {
            spec: Some(Default::default()),
            ..Default::default()
        };
        if let Some(spec) = s.spec.as_mut() {
            spec.template.metadata = Some(ObjectMeta {
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_RESTART_HASH.to_string(),
                    restart.to_string(),
                )])),
                ..Default::default()
            });
        }
        s
    }

    #[test]
    fn a_pod_with_another_restart_hash_needs_a_restart() {
        let facts = PodFacts::of(&pod("aaa", Some("n1"), true));
        assert!(!needs_restart(&facts, &sts("aaa")));
        assert!(needs_restart(&facts, &sts("bbb")));
    }

    #[test]
    fn a_crash_loop_says_why_the_container_last_stopped() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus,
        };
        let mut p = pod("aaa", Some("n1"), false);
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: Some("back-off 10s".into()),
            }),
            ..Default::default()
        };
        let status = |message: Option<&str>| ContainerStatus {
            name: "valkey".into(),
            image: "valkey/valkey:9.1".into(),
            state: Some(waiting.clone()),
            last_state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 1,
                    message: message.map(str::to_string),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let log = "1:M # Module /m/x.so failed to load\n1:M # Can't load module from /m/x.so: server aborting\n\n";
        p.status.as_mut().unwrap().container_statuses = Some(vec![status(Some(log))]);
        let f = start_failure(&p).unwrap();
        assert_eq!(f.reason, "CrashLoopBackOff");
        assert_eq!(
            f.message,
            "exit code 1: 1:M # Can't load module from /m/x.so: server aborting"
        );
        p.status.as_mut().unwrap().container_statuses = Some(vec![status(None)]);
        assert_eq!(start_failure(&p).unwrap().message, "back-off 10s");
    }

    #[test]
    fn facts_read_node_ip_and_readiness() {
        let facts = PodFacts::of(&pod("aaa", Some("n1"), true));
        assert_eq!(facts.node.as_deref(), Some("n1"));
        assert_eq!(facts.ip, Some("10.0.0.3".parse().unwrap()));
        assert!(facts.ready);
        assert!(!facts.unscheduled());
        let pending = PodFacts::of(&pod("aaa", None, false));
        assert!(pending.unscheduled());
        assert!(!pending.ready);
    }
}
