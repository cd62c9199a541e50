// Over 600 lines: the pod status the node agent reports, condition by condition, and its tests.
//! Pod status exactly as a kubelet writes it, built from what the agent knows
//! about the pod's containers. Pure: the worker feeds in a [`PodView`] and the
//! pod as last seen, and patches the result when it differs.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// Condition types this agent owns (PodScheduled belongs to the scheduler,
/// DisruptionTarget to the controllers).
pub const OWNED_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// The current time, truncated to whole seconds as the API stores it (so a
/// status built now compares equal to the same status read back).
pub fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The state of one container as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated(Terminated),
}

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
    pub container_id: Option<String>,
}

impl Terminated {
    /// Kubernetes' reason for an exit: `Completed` for 0, `Error` otherwise.
    pub fn from_exit(
        code: Option<i32>,
        signal: Option<i32>,
        started_at: Option<Timestamp>,
        container_id: Option<String>,
    ) -> Terminated {
        // A signal death is reported as 128 + signal, like a container runtime does.
        let exit_code = code.unwrap_or_else(|| 128 + signal.unwrap_or(9));
        Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            },
            message: None,
            started_at,
            finished_at: now(),
            container_id,
        }
    }
}

/// One container's runtime facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRun {
    pub name: String,
    pub image: String,
    /// What runs for the image: `testbed://valkey-<version>` for a Valkey
    /// image (two tags of one version share it, as two tags of one image
    /// share a digest), `testbed://<image>` otherwise, empty while the image
    /// cannot be pulled (as a kubelet leaves it).
    pub image_id: String,
    pub state: RunState,
    pub last_terminated: Option<Terminated>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
    pub container_id: Option<String>,
}

impl ContainerRun {
    pub fn new(name: &str, image: &str) -> ContainerRun {
        ContainerRun {
            name: name.to_string(),
            image: image.to_string(),
            image_id: format!("testbed://{image}"),
            state: RunState::Waiting {
                reason: "ContainerCreating".into(),
                message: None,
            },
            last_terminated: None,
            restart_count: 0,
            ready: false,
            started: false,
            container_id: None,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    pub fn exit_code(&self) -> Option<i32> {
        match &self.state {
            RunState::Terminated(t) => Some(t.exit_code),
            _ => None,
        }
    }
}

/// Everything the status of a pod is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub sandbox_ready: bool,
    pub pod_ip: Option<String>,
    pub host_ip: String,
    pub start_time: Timestamp,
    pub init_done: bool,
    pub init_failed: bool,
    pub inits: Vec<ContainerRun>,
    pub mains: Vec<ContainerRun>,
    pub restart_policy: String,
    /// The pod is being torn down for good (deleted): its phase becomes terminal
    /// once nothing runs.
    pub terminal: bool,
}

/// The pod phase, following the kubelet's rules.
pub fn phase(v: &PodView) -> &'static str {
    if v.init_failed {
        return "Failed";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded, mut failed) = (0, 0, 0, 0, 0);
    for c in &v.mains {
        match &c.state {
            RunState::Running { .. } => running += 1,
            RunState::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                } else {
                    failed += 1;
                }
            }
            RunState::Waiting { .. } => {
                if c.last_terminated.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if !v.init_done {
        if v.terminal {
            return "Failed";
        }
        return "Pending";
    }
    if waiting > 0 && !v.terminal {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 || v.terminal {
        if v.terminal {
            return if failed > 0 || waiting > 0 {
                "Failed"
            } else {
                "Succeeded"
            };
        }
        return match v.restart_policy.as_str() {
            "Never" => {
                if failed > 0 {
                    "Failed"
                } else {
                    "Succeeded"
                }
            }
            "OnFailure" if stopped == succeeded => "Succeeded",
            _ => "Running",
        };
    }
    "Pending"
}

fn container_state(s: &RunState) -> ContainerState {
    match s {
        RunState::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        RunState::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(*started_at)),
            }),
            ..Default::default()
        },
        RunState::Terminated(t) => terminated_state(t),
    }
}

fn terminated_state(t: &Terminated) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: t.container_id.clone(),
            exit_code: t.exit_code,
            finished_at: Some(Time(t.finished_at)),
            message: t.message.clone(),
            reason: Some(t.reason.clone()),
            signal: t.signal,
            started_at: t.started_at.map(Time),
        }),
        ..Default::default()
    }
}

fn container_status(c: &ContainerRun, init: bool) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: c.image_id.clone(),
        container_id: c.container_id.clone(),
        ready: c.ready,
        started: Some(if init { c.is_running() } else { c.started }),
        restart_count: c.restart_count,
        state: Some(container_state(&c.state)),
        last_state: Some(
            c.last_terminated
                .as_ref()
                .map(terminated_state)
                .unwrap_or_default(),
        ),
        ..Default::default()
    }
}

fn condition(
    observed: Option<&PodStatus>,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: Timestamp,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let previous = observed
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_));
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: if ok { None } else { reason.map(str::to_string) },
        message: if ok { None } else { message },
        last_transition_time,
        ..Default::default()
    }
}

/// QoS class from the pod spec (the API server sets it at creation; this is the
/// fallback when it is missing).
pub fn qos_class(pod: &Pod) -> String {
    let Some(spec) = &pod.spec else {
        return "BestEffort".into();
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in &spec.containers {
        let r = c.resources.as_ref();
        let limits = r.and_then(|r| r.limits.clone()).unwrap_or_default();
        let requests = r.and_then(|r| r.requests.clone()).unwrap_or_default();
        if !limits.is_empty() || !requests.is_empty() {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let l = limits.get(res);
            let q = requests.get(res).or(l);
            if l.is_none() || q != l {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort".into(),
        (true, true) => "Guaranteed".into(),
        (true, false) => "Burstable".into(),
    }
}

/// The status the agent wants the pod to have. `pod.status` is the status as
/// last read, which keeps transition times stable and conditions of others.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub fn build_status(pod: &Pod, v: &PodView, now: Timestamp) -> PodStatus {
    let observed = pod.status.as_ref();
    let phase = phase(v);
    let terminal = phase == "Succeeded" || phase == "Failed";

    let mut mains: Vec<ContainerStatus> =
        v.mains.iter().map(|c| container_status(c, false)).collect();
    mains.sort_by(|a, b| a.name.cmp(&b.name));
    let inits: Vec<ContainerStatus> = v.inits.iter().map(|c| container_status(c, true)).collect();

    let incomplete: Vec<&str> = v
        .inits
        .iter()
        .filter(|c| c.exit_code() != Some(0))
        .map(|c| c.name.as_str())
        .collect();
    let unready: Vec<&str> = v
        .mains
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let list = |names: &[&str]| format!("[{}]", names.join(" "));

    let gates: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|g| g.iter().map(|g| g.condition_type.clone()).collect())
        .unwrap_or_default();
    let gate_missing = gates.iter().find(|g| {
        !observed
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| cs.iter().any(|c| &c.type_ == *g && c.status == "True"))
            .unwrap_or(false)
    });

    let containers_ready = !terminal && v.init_done && unready.is_empty();
    let (cr_reason, cr_message) = if terminal {
        ("PodCompleted", None)
    } else if !v.init_done {
        (
            "ContainersNotInitialized",
            Some(format!(
                "containers with incomplete status: {}",
                list(&incomplete)
            )),
        )
    } else {
        (
            "ContainersNotReady",
            Some(format!(
                "containers with unready status: {}",
                list(&unready)
            )),
        )
    };
    let (ready, ready_reason, ready_message) = match (containers_ready, gate_missing) {
        (true, Some(g)) => (
            false,
            "ReadinessGatesNotReady",
            Some(format!(
                "corresponding condition of pod readiness gate \"{g}\" does not exist."
            )),
        ),
        (true, None) => (true, "", None),
        (false, _) => (false, cr_reason, cr_message.clone()),
    };
    let conditions = vec![
        condition(
            observed,
            "PodReadyToStartContainers",
            v.sandbox_ready && !terminal,
            None,
            None,
            now,
        ),
        condition(
            observed,
            "Initialized",
            v.init_done,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                list(&incomplete)
            )),
            now,
        ),
        condition(
            observed,
            "ContainersReady",
            containers_ready,
            Some(cr_reason),
            cr_message,
            now,
        ),
        condition(
            observed,
            "Ready",
            ready,
            Some(ready_reason),
            ready_message,
            now,
        ),
    ];

    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        container_statuses: Some(mains),
        init_container_statuses: if inits.is_empty() { None } else { Some(inits) },
        pod_ip: v.pod_ip.clone(),
        pod_ips: v.pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        host_ip: Some(v.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: v.host_ip.clone(),
        }]),
        start_time: Some(
            observed
                .and_then(|s| s.start_time.clone())
                .unwrap_or(Time(v.start_time)),
        ),
        qos_class: Some(
            observed
                .and_then(|s| s.qos_class.clone())
                .unwrap_or_else(|| qos_class(pod)),
        ),
        ..Default::default()
    }
}

/// The part of a status this agent owns, in a comparable form.
pub fn owned_projection(s: &PodStatus) -> Value {
    let mut conditions: Vec<Value> = s
        .conditions
        .iter()
        .flatten()
        .filter(|c| OWNED_CONDITIONS.contains(&c.type_.as_str()))
        .map(|c| {
            json!({
                "type": c.type_, "status": c.status, "reason": c.reason,
                "message": c.message, "lastTransitionTime": c.last_transition_time,
            })
        })
        .collect();
    conditions.sort_by_key(|c| c["type"].as_str().unwrap_or_default().to_string());
    json!({
        "phase": s.phase,
        "conditions": conditions,
        "containerStatuses": s.container_statuses.clone().unwrap_or_default(),
        "initContainerStatuses": s.init_container_statuses.clone().unwrap_or_default(),
        "podIP": s.pod_ip,
        "podIPs": s.pod_ips.clone().unwrap_or_default(),
        "hostIP": s.host_ip,
        "hostIPs": s.host_ips.clone().unwrap_or_default(),
        "startTime": s.start_time,
        "qosClass": s.qos_class,
    })
}

/// Whether the observed status differs from the desired one in what we own.
pub fn needs_patch(observed: Option<&PodStatus>, desired: &PodStatus) -> bool {
    match observed {
        None => true,
        Some(o) => owned_projection(o) != owned_projection(desired),
    }
}

/// The strategic-merge patch body for the status subresource (conditions merge
/// by type, so PodScheduled and DisruptionTarget stay as others wrote them).
///
/// `uid` goes into the patch as a precondition: the API server refuses it
/// (409 Conflict) when the pod of that name is by now another pod, so a
/// worker of a deleted pod can never write its IP into its successor.
pub fn status_patch(desired: &PodStatus, uid: &str) -> Value {
    let mut status = serde_json::to_value(desired).unwrap_or(Value::Null);
    // A merge patch keeps fields it does not mention: clear a condition's old
    // reason and message explicitly when it turns True.
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut().filter_map(Value::as_object_mut) {
            for key in ["reason", "message"] {
                c.entry(key).or_insert(Value::Null);
            }
        }
    }
    json!({ "metadata": { "uid": uid }, "status": status })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn running(name: &str, ready: bool) -> ContainerRun {
        ContainerRun {
            state: RunState::Running { started_at: t(100) },
            ready,
            started: true,
            container_id: Some("testbed://42".into()),
            ..ContainerRun::new(name, "valkey/valkey:9.1")
        }
    }

    fn view(mains: Vec<ContainerRun>) -> PodView {
        PodView {
            sandbox_ready: true,
            pod_ip: Some("10.203.1.2".into()),
            host_ip: "10.203.1.1".into(),
            start_time: t(90),
            init_done: true,
            init_failed: false,
            inits: vec![],
            mains,
            restart_policy: "Always".into(),
            terminal: false,
        }
    }

    fn pod() -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "valkey".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
    }

    #[test]
    fn a_ready_container_makes_a_running_ready_pod_with_ips() {
        let s = build_status(&pod(), &view(vec![running("valkey", true)]), t(200));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        for c in OWNED_CONDITIONS {
            assert_eq!(cond(&s, c).status, "True", "{c}");
        }
        assert_eq!(s.pod_ip.as_deref(), Some("10.203.1.2"));
        assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "10.203.1.2");
        assert_eq!(s.host_ips.as_ref().unwrap()[0].ip, "10.203.1.1");
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert!(cs.ready);
        assert_eq!(cs.started, Some(true));
        assert_eq!(cs.container_id.as_deref(), Some("testbed://42"));
        assert!(cs.state.as_ref().unwrap().running.is_some());
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn an_unready_container_names_itself_in_the_ready_condition() {
        let s = build_status(&pod(), &view(vec![running("valkey", false)]), t(200));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let r = cond(&s, "Ready");
        assert_eq!(r.status, "False");
        assert_eq!(r.reason.as_deref(), Some("ContainersNotReady"));
        assert_eq!(
            r.message.as_deref(),
            Some("containers with unready status: [valkey]")
        );
    }

    #[test]
    fn transition_times_only_move_when_the_status_flips() {
        let mut p = pod();
        let first = build_status(&p, &view(vec![running("valkey", false)]), t(200));
        p.status = Some(first);
        let same = build_status(&p, &view(vec![running("valkey", false)]), t(300));
        assert_eq!(
            cond(&same, "Ready").last_transition_time,
            Some(Time(t(200)))
        );
        assert!(
            !needs_patch(p.status.as_ref(), &same),
            "nothing changed, nothing to patch"
        );
        let flipped = build_status(&p, &view(vec![running("valkey", true)]), t(300));
        assert_eq!(
            cond(&flipped, "Ready").last_transition_time,
            Some(Time(t(300)))
        );
        assert_eq!(
            cond(&flipped, "Initialized").last_transition_time,
            Some(Time(t(200)))
        );
        assert!(needs_patch(p.status.as_ref(), &flipped));
    }

    #[test]
    fn conditions_of_others_do_not_trigger_patches() {
        let mut p = pod();
        let mut s = build_status(&p, &view(vec![running("valkey", true)]), t(200));
        s.conditions.as_mut().unwrap().push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            ..Default::default()
        });
        p.status = Some(s);
        let again = build_status(&p, &view(vec![running("valkey", true)]), t(300));
        assert!(!needs_patch(p.status.as_ref(), &again));
    }

    #[test]
    fn the_patch_clears_reason_and_message_of_conditions_that_turned_true() {
        let s = build_status(&pod(), &view(vec![running("valkey", true)]), t(200));
        let p = status_patch(&s, "u-1");
        assert_eq!(p["metadata"]["uid"], "u-1");
        let ready = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert!(ready.get("reason").unwrap().is_null());
        assert!(ready.get("message").unwrap().is_null());
    }

    #[test]
    fn pending_until_containers_run() {
        let mut v = view(vec![ContainerRun::new("valkey", "valkey/valkey:9.1")]);
        assert_eq!(phase(&v), "Pending");
        v.init_done = false;
        v.mains[0] = running("valkey", true);
        assert_eq!(phase(&v), "Pending");
    }

    #[test]
    fn phase_under_each_restart_policy() {
        let exited = |code: i32| ContainerRun {
            state: RunState::Terminated(Terminated::from_exit(Some(code), None, None, None)),
            ..ContainerRun::new("c", "busybox")
        };
        let mut v = view(vec![exited(1)]);
        v.restart_policy = "Never".into();
        assert_eq!(phase(&v), "Failed");
        v.mains = vec![exited(0)];
        assert_eq!(phase(&v), "Succeeded");
        v.restart_policy = "OnFailure".into();
        assert_eq!(phase(&v), "Succeeded");
        v.mains = vec![exited(2)];
        assert_eq!(phase(&v), "Running");
        v.restart_policy = "Always".into();
        v.mains = vec![exited(0)];
        assert_eq!(phase(&v), "Running");
    }

    #[test]
    fn a_crash_looping_container_keeps_the_pod_running() {
        let c = ContainerRun {
            state: RunState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: None,
            },
            last_terminated: Some(Terminated::from_exit(Some(1), None, None, None)),
            restart_count: 3,
            ..ContainerRun::new("valkey", "valkey/valkey:9.1")
        };
        let v = view(vec![c]);
        assert_eq!(phase(&v), "Running");
        let s = build_status(&pod(), &v, t(200));
        let cs = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(cs.restart_count, 3);
        assert_eq!(
            cs.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            1
        );
    }

    #[test]
    fn deleted_pods_end_succeeded_when_containers_exit_cleanly() {
        let mut v = view(vec![ContainerRun {
            state: RunState::Terminated(Terminated::from_exit(Some(0), None, None, None)),
            ..ContainerRun::new("valkey", "valkey/valkey:9.1")
        }]);
        v.terminal = true;
        assert_eq!(phase(&v), "Succeeded");
        let s = build_status(&pod(), &v, t(200));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
        v.mains[0].state = RunState::Terminated(Terminated::from_exit(None, Some(9), None, None));
        assert_eq!(phase(&v), "Failed");
    }

    #[test]
    fn signal_deaths_report_128_plus_signal() {
        let t = Terminated::from_exit(None, Some(15), None, None);
        assert_eq!(t.exit_code, 143);
        assert_eq!(t.reason, "Error");
    }

    #[test]
    fn init_containers_gate_initialized() {
        let mut v = view(vec![ContainerRun::new("valkey", "valkey/valkey:9.1")]);
        v.init_done = false;
        v.inits = vec![ContainerRun::new("init", "busybox")];
        let s = build_status(&pod(), &v, t(1));
        let i = cond(&s, "Initialized");
        assert_eq!(i.status, "False");
        assert_eq!(
            i.message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
        assert_eq!(s.init_container_statuses.as_ref().unwrap().len(), 1);
        v.init_failed = true;
        assert_eq!(phase(&v), "Failed");
    }

    #[test]
    fn readiness_gates_hold_ready_back() {
        let mut p = pod();
        if let Some(spec) = p.spec.as_mut() {
            spec.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: "example.com/lb".into(),
            }]);
        }
        let s = build_status(&p, &view(vec![running("valkey", true)]), t(1));
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        assert_eq!(
            cond(&s, "Ready").reason.as_deref(),
            Some("ReadinessGatesNotReady")
        );
    }
}
