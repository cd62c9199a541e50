//! Pure lifecycle decisions of a pod's containers: whether an exited container
//! restarts, how long it waits first, and what an agent restart inherits from
//! the status the API still shows. The worker (`worker.rs`) applies them.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use std::time::Duration;

/// Whether a main container that exited with `exit_code` is restarted.
pub fn should_restart(restart_policy: &str, exit_code: i32) -> bool {
    match restart_policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// What happens after a container exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterExit {
    /// An init container succeeded: the next one (or the main containers) may start.
    InitCompleted,
    /// An init container failed under restartPolicy Never: the pod fails.
    PodFailed,
    /// Start it again after the back-off.
    Restart,
    /// It stays terminated.
    Stay,
}

/// The kubelet's decision for an exited container. Init containers restart on
/// failure unless the policy is Never; main containers follow the policy.
pub fn after_exit(init: bool, restart_policy: &str, exit_code: i32) -> AfterExit {
    match (init, exit_code == 0) {
        (true, true) => AfterExit::InitCompleted,
        (true, false) if restart_policy == "Never" => AfterExit::PodFailed,
        (true, false) => AfterExit::Restart,
        (false, _) if should_restart(restart_policy, exit_code) => AfterExit::Restart,
        (false, _) => AfterExit::Stay,
    }
}

/// Crash-loop back-off before the `crashes`-th consecutive restart: 0.5 s,
/// doubling, capped at 10 s (a real kubelet starts at 10 s and caps at 5 min;
/// tests want it short).
pub fn backoff(crashes: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << crashes.min(10));
    Duration::from_millis(ms.min(10_000))
}

/// The wait between pulls of an image that could not be pulled, after the
/// `failures` before: the kubelet's starts at 10 s and doubles up to 5 min;
/// here 2 s doubling up to 20 s, shortened like the crash back-off so a test
/// (or an image loaded meanwhile) need not wait minutes.
pub fn image_pull_backoff(failures: u32) -> Duration {
    let ms = 2_000u64.saturating_mul(1u64 << failures.min(10));
    Duration::from_millis(ms.min(20_000))
}

/// How long a failed pull shows as `ErrImagePull` before it turns into
/// `ImagePullBackOff`: a kubelet shows it until its next sync of the pod, a
/// moment later.
pub const ERR_IMAGE_PULL_SHOWN: Duration = Duration::from_secs(2);

/// A container that ran this long before exiting starts its back-off afresh.
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);

/// The grace period of a deletion: the pod's deletionGracePeriodSeconds, else
/// its terminationGracePeriodSeconds, else 30 s.
pub fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64)
}

/// What a container inherits when the agent takes over a pod that already ran
/// (agent restart): its restart count, and whether it had run, so the next
/// start counts as a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inherited {
    pub restart_count: i32,
    pub has_run: bool,
    pub completed: bool,
}

/// Reads the inherited facts of container `name` from a status list.
pub fn inherited(statuses: Option<&Vec<ContainerStatus>>, name: &str) -> Inherited {
    let Some(s) = statuses.and_then(|l| l.iter().find(|s| s.name == name)) else {
        return Inherited::default();
    };
    let state = s.state.as_ref();
    let running = state.map(|st| st.running.is_some()).unwrap_or(false);
    let terminated = state.and_then(|st| st.terminated.as_ref());
    let had_last = s
        .last_state
        .as_ref()
        .map(|l| l.terminated.is_some())
        .unwrap_or(false);
    Inherited {
        restart_count: s.restart_count,
        has_run: running || terminated.is_some() || had_last,
        completed: terminated.map(|t| t.exit_code == 0).unwrap_or(false),
    }
}

/// Whether the pod's status is terminal (the agent leaves such pods alone).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Compares two resourceVersions; None when either is not a number (then the
/// caller takes the newer event as it comes).
pub fn newer_or_same(candidate: Option<&str>, current: Option<&str>) -> bool {
    match (
        candidate.and_then(|c| c.parse::<u64>().ok()),
        current.and_then(|c| c.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a >= b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, PodSpec,
    };

    #[test]
    fn restart_policy_decides_restarts() {
        assert!(should_restart("Always", 0));
        assert!(should_restart("Always", 1));
        assert!(!should_restart("OnFailure", 0));
        assert!(should_restart("OnFailure", 137));
        assert!(!should_restart("Never", 1));
    }

    #[test]
    fn init_containers_restart_on_failure_unless_never_and_then_fail_the_pod() {
        assert_eq!(after_exit(true, "Always", 0), AfterExit::InitCompleted);
        assert_eq!(after_exit(true, "Always", 1), AfterExit::Restart);
        assert_eq!(after_exit(true, "OnFailure", 1), AfterExit::Restart);
        assert_eq!(after_exit(true, "Never", 1), AfterExit::PodFailed);
        assert_eq!(after_exit(false, "Always", 0), AfterExit::Restart);
        assert_eq!(after_exit(false, "OnFailure", 0), AfterExit::Stay);
        assert_eq!(after_exit(false, "Never", 137), AfterExit::Stay);
    }

    #[test]
    fn backoff_doubles_and_caps_at_ten_seconds() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(4), Duration::from_secs(8));
        assert_eq!(backoff(5), Duration::from_secs(10));
        assert_eq!(backoff(60), Duration::from_secs(10));
    }

    #[test]
    fn image_pull_backoff_doubles_and_caps_at_twenty_seconds() {
        assert_eq!(image_pull_backoff(0), Duration::from_secs(2));
        assert_eq!(image_pull_backoff(2), Duration::from_secs(8));
        assert_eq!(image_pull_backoff(4), Duration::from_secs(20));
        assert_eq!(image_pull_backoff(u32::MAX), Duration::from_secs(20));
    }

    #[test]
    fn grace_prefers_the_deletion_grace_period() {
        let mut p = Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(20),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(grace_period(&p), Duration::from_secs(20));
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(grace_period(&p), Duration::ZERO);
        assert_eq!(grace_period(&Pod::default()), Duration::from_secs(30));
    }

    #[test]
    fn an_agent_restart_counts_as_a_container_restart() {
        let statuses = vec![ContainerStatus {
            name: "valkey".into(),
            restart_count: 2,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }];
        let i = inherited(Some(&statuses), "valkey");
        assert_eq!(
            i,
            Inherited {
                restart_count: 2,
                has_run: true,
                completed: false
            }
        );
        assert_eq!(inherited(Some(&statuses), "other"), Inherited::default());
        let done = vec![ContainerStatus {
            name: "init".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }];
        assert!(inherited(Some(&done), "init").completed);
    }

    #[test]
    fn resource_versions_compare_numerically() {
        assert!(newer_or_same(Some("12"), Some("9")));
        assert!(!newer_or_same(Some("9"), Some("12")));
        assert!(newer_or_same(Some("x"), Some("12")));
        assert!(newer_or_same(None, Some("12")));
    }
}
