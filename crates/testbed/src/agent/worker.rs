// Over 600 lines: the node agent's pod lifecycle is one state machine (start, probe, restart, stop); split when it next changes.
//! One task per pod: the kubelet's pod worker. It builds the sandbox, prepares
//! volumes, runs init then main containers, probes them, restarts them per the
//! restart policy, keeps the status in the API, and finishes deletions.
//!
//! It reacts to three inputs: the pod as the API shows it (a `watch` channel
//! fed by the dispatcher), its node's health (faults), and runtime events
//! (container exits, probe results). While its node cannot reach the API, it
//! neither reads the pod nor writes its status, like a cut-off kubelet; while
//! its node is failed, nothing of the pod runs.

use super::Agent;
use super::faults::NodeHealth;
use super::network::{Cidr, Sandbox, host_veth_name, netns_name};
use super::pods::{self, AfterExit, BACKOFF_RESET_AFTER};
use super::probes::{ProbeKind, ProbeParams, ProbeTarget, ProbeTracker};
use super::runtime::{self, Launch};
use super::spec::{self, PodFacts};
use super::status::{self, ContainerRun, PodView, RunState, Terminated};
use crate::state::NodeSpec;
use crate::valkey_versions::{self, Build, Image};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the dispatcher hands a worker: the latest pod, or None once it is gone
/// from the API.
pub type PodFeed = watch::Sender<Option<Arc<Pod>>>;

/// Starts the worker of a pod bound to one of our nodes.
pub fn spawn(agent: Arc<Agent>, node: NodeSpec, pod: Arc<Pod>) -> PodFeed {
    let (tx, rx) = watch::channel(Some(pod.clone()));
    let health = agent.health_rx(&node.name);
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let worker = Worker::new(agent, node, pod, rx, health, ev_tx, ev_rx);
    tokio::spawn(worker.run());
    tx
}

#[derive(Debug)]
enum Ev {
    Exited {
        instance: u64,
        code: Option<i32>,
        signal: Option<i32>,
    },
    Probe {
        instance: u64,
        kind: ProbeKind,
        ok: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    Init,
    Main,
}

/// One container of the pod.
struct Slot {
    kind: SlotKind,
    spec: Container,
    /// Runs the real process (a Valkey image or a loaded image) or a placeholder.
    real: bool,
    /// Runs in a loaded image's root filesystem (`rootfs`).
    in_root: bool,
    /// The Valkey version a Valkey image runs (set at every start).
    build: Option<Build>,
    /// The Valkey tools of that version (the newest's otherwise): what
    /// `valkey-server`/`valkey-cli` in its argv, probes and hooks mean.
    bins: spec::Binaries,
    /// Failed pulls in a row (a missing image), for the back-off.
    pull_failures: u32,
    /// While the pull backs off: when it is tried again.
    pull_retry_at: Option<Instant>,
    run: ContainerRun,
    has_run: bool,
    pid: Option<u32>,
    instance: u64,
    started_instant: Option<Instant>,
    next_start: Option<Instant>,
    kill_deadline: Option<Instant>,
    crashes: u32,
    startup: Option<ProbeTracker>,
    liveness: Option<ProbeTracker>,
    readiness: Option<ProbeTracker>,
    probe_tasks: Vec<JoinHandle<()>>,
    env: Vec<(String, String)>,
}

impl Slot {
    fn stop_probes(&mut self) {
        for t in self.probe_tasks.drain(..) {
            t.abort();
        }
    }
}

struct Worker {
    agent: Arc<Agent>,
    node: NodeSpec,
    uid: String,
    ns: String,
    name: String,
    pod: Arc<Pod>,
    pod_rx: watch::Receiver<Option<Arc<Pod>>>,
    health_rx: watch::Receiver<NodeHealth>,
    ev_tx: mpsc::UnboundedSender<Ev>,
    ev_rx: mpsc::UnboundedReceiver<Ev>,
    sandbox: Option<Sandbox>,
    volumes: Option<BTreeMap<String, PathBuf>>,
    facts: PodFacts,
    slots: Vec<Slot>,
    init_done: bool,
    init_failed: bool,
    start_time: Timestamp,
    retry_at: Option<Instant>,
    next_instance: u64,
    /// The node died under the pod: processes are gone, the heal restarts them.
    dead: bool,
    /// The pod was already terminal when we took it over: leave it alone.
    finished: bool,
    terminal: bool,
    host_ip: String,
    /// The kubelet has seen this pod from the API: a pod bound while its node
    /// was cut off is unknown to it (and so not started) until the heal.
    known: bool,
    /// Renews the pod's projected service-account tokens (`incluster`).
    token_refresh: Option<JoinHandle<()>>,
    /// Keeps the pod's ConfigMap and Secret volumes current (`volumes`).
    volume_sync: Option<JoinHandle<()>>,
}

impl Worker {
    fn new(
        agent: Arc<Agent>,
        node: NodeSpec,
        pod: Arc<Pod>,
        pod_rx: watch::Receiver<Option<Arc<Pod>>>,
        health_rx: watch::Receiver<NodeHealth>,
        ev_tx: mpsc::UnboundedSender<Ev>,
        ev_rx: mpsc::UnboundedReceiver<Ev>,
    ) -> Worker {
        let meta = &pod.metadata;
        let spec = pod.spec.clone().unwrap_or_default();
        let observed = pod.status.as_ref();
        let mut slots = Vec::new();
        let mut all_inits_done = true;
        for (kind, list, statuses) in [
            (
                SlotKind::Init,
                spec.init_containers.clone().unwrap_or_default(),
                observed.and_then(|s| s.init_container_statuses.as_ref()),
            ),
            (
                SlotKind::Main,
                spec.containers.clone(),
                observed.and_then(|s| s.container_statuses.as_ref()),
            ),
        ] {
            for c in list {
                let inh = pods::inherited(statuses, &c.name);
                if kind == SlotKind::Init && !inh.completed {
                    all_inits_done = false;
                }
                let mut run = ContainerRun::new(&c.name, c.image.as_deref().unwrap_or_default());
                run.restart_count = inh.restart_count;
                if kind == SlotKind::Init && inh.completed {
                    run.state =
                        RunState::Terminated(Terminated::from_exit(Some(0), None, None, None));
                    run.ready = true;
                }
                let build = match valkey_versions::resolve(c.image.as_deref().unwrap_or_default()) {
                    Image::Valkey(b) => Some(b),
                    Image::Other | Image::Missing { .. } => None,
                };
                slots.push(Slot {
                    kind,
                    real: build.is_some(),
                    in_root: false,
                    build,
                    bins: agent.bins.clone(),
                    pull_failures: 0,
                    pull_retry_at: None,
                    spec: c,
                    run,
                    has_run: inh.has_run,
                    pid: None,
                    instance: 0,
                    started_instant: None,
                    next_start: Some(Instant::now()),
                    kill_deadline: None,
                    crashes: 0,
                    startup: None,
                    liveness: None,
                    readiness: None,
                    probe_tasks: Vec::new(),
                    env: Vec::new(),
                });
            }
        }
        let finished = pods::is_terminal(&pod);
        let host_ip = super::node::internal_ip(&node);
        Worker {
            uid: meta.uid.clone().unwrap_or_default(),
            ns: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
            agent,
            node,
            pod,
            pod_rx,
            health_rx,
            ev_tx,
            ev_rx,
            sandbox: None,
            volumes: None,
            facts: PodFacts::default(),
            slots,
            init_done: all_inits_done,
            init_failed: false,
            start_time: status::now(),
            retry_at: None,
            next_instance: 1,
            dead: false,
            finished,
            terminal: false,
            host_ip,
            known: false,
            token_refresh: None,
            volume_sync: None,
        }
    }

    fn pod_dir(&self) -> PathBuf {
        self.agent.pod_dir(&self.ns, &self.name, &self.uid)
    }

    async fn run(mut self) {
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), node = %self.node.name, "pod worker started");
        loop {
            let health = *self.health_rx.borrow_and_update();
            if health.api_connected() {
                let latest = self.pod_rx.borrow_and_update().clone();
                match latest {
                    None => {
                        self.vanish().await;
                        return;
                    }
                    Some(p) => {
                        if pods::newer_or_same(
                            p.metadata.resource_version.as_deref(),
                            self.pod.metadata.resource_version.as_deref(),
                        ) {
                            self.pod = p;
                        }
                    }
                }
                self.known = true;
                if self.pod.metadata.deletion_timestamp.is_some() {
                    self.terminate().await;
                    return;
                }
            }
            if health.alive() {
                if self.dead {
                    self.reboot();
                }
                if !self.finished && self.known {
                    self.progress().await;
                }
            } else if !self.dead {
                self.die();
            }
            if health.api_connected() && !self.finished {
                self.sync_status().await;
            }
            let deadline = self.next_deadline();
            tokio::select! {
                r = self.pod_rx.changed(), if health.api_connected() => {
                    if r.is_err() {
                        // The dispatcher is gone: the agent is shutting down.
                        return;
                    }
                }
                r = self.health_rx.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
                Some(ev) = self.ev_rx.recv() => self.on_event(ev),
                _ = tokio::time::sleep_until(deadline) => self.on_deadlines(),
            }
        }
    }

    fn next_deadline(&self) -> Instant {
        let far = Instant::now() + Duration::from_secs(3600);
        let mut d = far;
        if let Some(r) = self.retry_at {
            d = d.min(r);
        }
        for s in &self.slots {
            if let Some(k) = s.kill_deadline {
                d = d.min(k);
            }
            if s.pid.is_none()
                && let Some(n) = s.next_start
            {
                d = d.min(n);
            }
        }
        d
    }

    fn on_deadlines(&mut self) {
        let now = Instant::now();
        for s in &mut self.slots {
            if let (Some(k), Some(pid)) = (s.kill_deadline, s.pid)
                && k <= now
            {
                runtime::signal(pid, Signal::SIGKILL);
                s.kill_deadline = None;
            }
        }
    }

    /// Moves the pod forward: sandbox, volumes, then the containers that are due.
    async fn progress(&mut self) {
        if self.init_failed || self.terminal {
            return;
        }
        let now = Instant::now();
        if let Some(r) = self.retry_at {
            if r > now {
                return;
            }
            self.retry_at = None;
        }
        if self.sandbox.is_none()
            && let Err(e) = self.create_sandbox().await
        {
            tracing::warn!(pod = %self.name, error = %e, "sandbox setup failed, retrying");
            self.retry_at = Some(now + Duration::from_secs(1));
            return;
        }
        if self.volumes.is_none() {
            match self.prepare_volumes().await {
                Ok(v) => {
                    if self.token_refresh.is_none() {
                        self.token_refresh = super::incluster::spawn_token_refresh(
                            self.agent.client.clone(),
                            (*self.pod).clone(),
                            v.clone().into_iter().collect(),
                        );
                    }
                    if self.volume_sync.is_none() {
                        let health = self.health_rx.clone();
                        self.volume_sync = super::volumes::spawn_object_volume_sync(
                            self.agent.client.clone(),
                            (*self.pod).clone(),
                            v.clone(),
                            move || health.borrow().api_connected(),
                        );
                    }
                    self.volumes = Some(v);
                }
                Err(message) => {
                    tracing::warn!(pod = %self.name, error = %message, "volumes not ready, retrying");
                    for s in self
                        .slots
                        .iter_mut()
                        .filter(|s| s.pid.is_none() && !s.has_run)
                    {
                        s.run.state = RunState::Waiting {
                            reason: "ContainerCreating".into(),
                            message: Some(message.clone()),
                        };
                    }
                    self.retry_at = Some(now + Duration::from_secs(1));
                    return;
                }
            }
        }
        // Init containers, one at a time, in order.
        if !self.init_done {
            let next = self
                .slots
                .iter()
                .position(|s| s.kind == SlotKind::Init && s.run.exit_code() != Some(0));
            match next {
                None => self.init_done = true,
                Some(i) => {
                    if self.slots[i].pid.is_none()
                        && self.slots[i].next_start.is_some_and(|t| t <= now)
                    {
                        self.start(i).await;
                    }
                    return;
                }
            }
        }
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.kind == SlotKind::Main && s.pid.is_none() && s.next_start.is_some_and(|t| t <= now)
            {
                self.start(i).await;
            }
        }
        // A pod whose containers are all done for good gives its sandbox back.
        let all_done = self
            .slots
            .iter()
            .filter(|s| s.kind == SlotKind::Main)
            .all(|s| s.pid.is_none() && s.next_start.is_none());
        if all_done
            && !self.slots.is_empty()
            && let Some(sb) = self.sandbox.take()
        {
            sb.destroy(&self.agent.tools.ip).await;
        }
    }

    async fn create_sandbox(&mut self) -> Result<(), String> {
        let cidr = Cidr::parse(&self.node.pod_cidr)
            .ok_or_else(|| format!("bad pod CIDR {}", self.node.pod_cidr))?;
        let preferred: Option<Ipv4Addr> = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok());
        let ip = self
            .agent
            .allocate_ip(&self.node.name, &cidr, &self.uid, preferred)
            .map_err(|e| e.to_string())?;
        let prefix = &self.agent.state.netns_prefix;
        let sb = Sandbox::create(
            &self.agent.tools.ip,
            netns_name(prefix, &self.uid),
            host_veth_name(prefix, ip),
            ip,
            &self.agent.state.host_ip,
        )
        .await
        .map_err(|e| e.to_string())?;
        tracing::info!(pod = %self.name, ip = %ip, netns = %sb.netns, "sandbox ready");
        self.sandbox = Some(sb);
        Ok(())
    }

    async fn prepare_volumes(&mut self) -> Result<BTreeMap<String, PathBuf>, String> {
        let mut facts = PodFacts {
            pod_ip: self
                .sandbox
                .as_ref()
                .map(|s| s.ip.to_string())
                .unwrap_or_default(),
            host_ip: self.host_ip.clone(),
            ..Default::default()
        };
        super::volumes::env_sources(&self.agent.client, &self.pod, &mut facts).await;
        let dir = self.pod_dir();
        let vols =
            super::volumes::materialize(&self.agent.client, &self.pod, &dir, &facts, &self.node)
                .await
                .map_err(|e| e.to_string())?;
        self.facts = facts;
        Ok(vols)
    }

    /// Starts container `i`.
    #[expect(
        clippy::too_many_lines,
        reason = "written before the lint was on; split it when it next changes"
    )]
    async fn start(&mut self, i: usize) {
        let now = Instant::now();
        // Fresh ConfigMap/Secret contents for every (re)start, like the kubelet's
        // periodic volume sync would give.
        if self.slots[i].has_run
            && let Ok(v) = self.prepare_volumes().await
        {
            self.volumes = Some(v);
        }
        let Some(sandbox) = self.sandbox.clone() else {
            return;
        };
        let pod = self.pod.clone();
        let volumes = self.volumes.clone().unwrap_or_default();
        let instance = self.next_instance;
        self.next_instance += 1;
        let agent = self.agent.clone();
        let slot = &mut self.slots[i];
        // A loaded image runs for real from its root filesystem (`rootfs`);
        // looked up on every start, so an image loaded later is picked up.
        let reference = slot.spec.image.clone().unwrap_or_default();
        let image = crate::images::Store::at(&agent.state.dir).resolve(&reference);
        slot.in_root = image.is_some();
        slot.build = None;
        slot.bins = agent.bins.clone();
        if image.is_none() {
            // Otherwise the tag table says which Valkey it is, or that the
            // testbed has no such image: a failed pull, never a stand-in.
            match valkey_versions::resolve(&reference) {
                Image::Other => {}
                Image::Valkey(build) => match agent.valkey.get(build.version) {
                    Some(bins) => {
                        slot.build = Some(build);
                        slot.bins = bins.clone();
                    }
                    None => {
                        let why = format!(
                            "valkey-server {} is not installed on this testbed (run `make setup`, then `testbed down` and `testbed up`)",
                            build.version
                        );
                        return image_pull_failed(slot, &reference, &why, now);
                    }
                },
                Image::Missing { reference: full } => {
                    let why = format!("{full}: {}", valkey_versions::missing_reason());
                    return image_pull_failed(slot, &reference, &why, now);
                }
            }
        }
        slot.pull_failures = 0;
        slot.pull_retry_at = None;
        slot.real = slot.in_root || slot.build.is_some();
        slot.run.image_id = match slot.build {
            Some(b) => format!("testbed://valkey-{}", b.version),
            None => format!("testbed://{reference}"),
        };
        let default_path = match &image {
            Some(img) => super::rootfs::image_path(&img.config),
            None => format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                slot.bins.dir.display()
            ),
        };
        let config_error = |slot: &mut Slot, message: String| {
            tracing::warn!(container = %slot.spec.name, error = %message, "container config error");
            slot.run.state = RunState::Waiting {
                reason: "CreateContainerConfigError".into(),
                message: Some(message),
            };
            slot.next_start = Some(now + Duration::from_secs(1));
        };
        let env = match spec::container_env(
            &pod,
            &slot.spec,
            &self.facts,
            &default_path,
            &self.node.cpu,
            &self.node.memory,
        ) {
            Ok(e) => e,
            Err(e) => return config_error(slot, e.to_string()),
        };
        let mut env = env;
        super::incluster::add_missing(
            &mut env,
            super::incluster::kubernetes_service_env(&format!(
                "https://{}:443",
                crate::topology::first_service_ip(agent.state.id)
            )),
        );
        let lookup = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
            v.iter()
                .flatten()
                .map(|a| spec::expand(a, &lookup))
                .collect()
        };
        let mut root_script = None;
        let (argv, mounts, workdir) = if let Some(img) = &image {
            let mut mounts = match spec::volume_mounts(&slot.spec, &volumes, &env) {
                Ok(m) => m,
                Err(e) => return config_error(slot, e.to_string()),
            };
            for m in &mut mounts {
                if !m.source.exists() {
                    let _ = std::fs::create_dir_all(&m.source);
                }
                m.file = m.source.is_file();
            }
            // Cluster DNS: the pod's resolv.conf, mounted inside the image's
            // root like the volumes (see agent/dns.rs).
            if let Some(m) = super::dns::resolv_mount(
                &pod,
                &agent.pod_dir(&self.ns, &self.name, &self.uid),
                &crate::topology::cluster_dns_ip(agent.state.id),
                crate::topology::CLUSTER_DOMAIN,
            ) {
                mounts.push(m);
            }
            let dir = agent
                .pod_dir(&self.ns, &self.name, &self.uid)
                .join("containers")
                .join(&slot.spec.name);
            match super::rootfs::plan(
                &pod,
                &slot.spec,
                img,
                &expand_all(&slot.spec.command),
                &expand_all(&slot.spec.args),
                env.clone(),
                mounts,
                &dir,
                &agent.tools.script_tools(),
            ) {
                Ok(p) => {
                    env = p.env;
                    root_script = Some(p.script);
                    (p.argv, p.mounts, p.workdir)
                }
                Err(e) => return config_error(slot, e),
            }
        } else if slot.real {
            let argv = spec::valkey_argv(
                &expand_all(&slot.spec.command),
                &expand_all(&slot.spec.args),
                &slot.bins,
            );
            let mut mounts = match spec::volume_mounts(&slot.spec, &volumes, &env) {
                Ok(m) => m,
                Err(e) => return config_error(slot, e.to_string()),
            };
            for m in &mut mounts {
                if !m.source.exists() {
                    let _ = std::fs::create_dir_all(&m.source);
                }
                m.file = m.source.is_file();
            }
            let workdir = PathBuf::from(
                slot.spec
                    .working_dir
                    .clone()
                    .filter(|w| !w.is_empty())
                    .unwrap_or_else(|| spec::IMAGE_WORKDIR.to_string()),
            );
            // The pod's runAsUser/runAsGroup and fsGroup: the wrapper makes
            // the mounts as root, then `testbed exec-root --root=/` becomes
            // that user and execs the container's command.
            let (uid, gid) = match super::rootfs::host_run_as(&pod, &slot.spec) {
                Ok(ids) => ids,
                Err(e) => return config_error(slot, e),
            };
            let groups = super::rootfs::supplementary_groups(&pod);
            let argv = if uid == 0 && gid == 0 && groups.is_empty() {
                argv
            } else {
                match super::rootfs::testbed_exe() {
                    Ok(exe) => super::rootfs::exec_as_argv(
                        &exe,
                        std::path::Path::new("/"),
                        &workdir.display().to_string(),
                        uid,
                        gid,
                        &groups,
                        &argv,
                    ),
                    Err(e) => {
                        return config_error(slot, format!("finding the testbed binary: {e}"));
                    }
                }
            };
            let scratch = agent
                .pod_dir(&self.ns, &self.name, &self.uid)
                .join("containers")
                .join(&slot.spec.name);
            let keep = [
                agent.state.dir.clone(),
                slot.bins.valkey_server.clone(),
                slot.bins.valkey_cli.clone(),
            ];
            for m in spec::scratch_mounts(&workdir, &mounts, &scratch, &keep) {
                // A restarted container gets a fresh writable layer.
                let _ = std::fs::remove_dir_all(&m.source);
                let _ = std::fs::create_dir_all(&m.source);
                mounts.push(m);
            }
            // Cluster DNS: the pod's resolv.conf (see agent/dns.rs).
            if let Some(m) = super::dns::resolv_mount(
                &pod,
                &agent.pod_dir(&self.ns, &self.name, &self.uid),
                &crate::topology::cluster_dns_ip(agent.state.id),
                crate::topology::CLUSTER_DOMAIN,
            ) {
                mounts.push(m);
            }
            (argv, mounts, workdir)
        } else {
            let argv = match slot.kind {
                SlotKind::Init => vec![agent.tools.true_.display().to_string()],
                SlotKind::Main => vec![agent.tools.sleep.display().to_string(), "infinity".into()],
            };
            (argv, Vec::new(), PathBuf::from("/"))
        };
        let launch = Launch {
            container: slot.spec.name.clone(),
            netns: sandbox.netns_path(),
            argv,
            env: env.clone(),
            mounts,
            workdir,
            hostname: env
                .iter()
                .find(|(k, _)| k == "HOSTNAME")
                .map(|(_, v)| v.clone())
                .unwrap_or_default(),
            log: agent.log_path(&self.ns, &self.name, &slot.spec.name),
            root: root_script,
        };
        let mut child = match runtime::launch(&agent.tools, &launch) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(container = %slot.spec.name, error = %e, "container start failed");
                slot.run.state = RunState::Waiting {
                    reason: "RunContainerError".into(),
                    message: Some(e.to_string()),
                };
                slot.next_start = Some(now + pods::backoff(slot.crashes));
                slot.crashes += 1;
                return;
            }
        };
        let Some(pid) = child.id() else {
            return;
        };
        agent.register_pid(&self.node.name, pid);
        let tx = self.ev_tx.clone();
        tokio::spawn(async move {
            let (code, signal) = match child.wait().await {
                Ok(st) => (st.code(), st.signal()),
                Err(_) => (None, Some(9)),
            };
            let _ = tx.send(Ev::Exited {
                instance,
                code,
                signal,
            });
        });
        if slot.has_run {
            slot.run.restart_count += 1;
        }
        slot.has_run = true;
        slot.pid = Some(pid);
        slot.instance = instance;
        slot.started_instant = Some(now);
        slot.next_start = None;
        slot.kill_deadline = None;
        slot.env = env;
        let container_id = format!("testbed://{pid}");
        slot.run.container_id = Some(container_id);
        slot.run.state = RunState::Running {
            started_at: status::now(),
        };
        tracing::info!(
            pod = %format!("{}/{}", self.ns, self.name),
            container = %slot.spec.name,
            pid,
            real = slot.real,
            valkey = slot.build.map(|b| b.version).unwrap_or("-"),
            restarts = slot.run.restart_count,
            "container started"
        );
        slot.startup = None;
        slot.liveness = None;
        slot.readiness = None;
        if slot.kind == SlotKind::Init {
            slot.run.started = false;
            slot.run.ready = false;
            return;
        }
        if slot.real {
            if let Some(p) = &slot.spec.startup_probe {
                slot.startup = Some(ProbeTracker::new(ProbeKind::Startup, ProbeParams::of(p)));
            }
            if let Some(p) = &slot.spec.readiness_probe {
                slot.readiness = Some(ProbeTracker::new(ProbeKind::Readiness, ProbeParams::of(p)));
            }
            if let Some(p) = &slot.spec.liveness_probe {
                slot.liveness = Some(ProbeTracker::new(ProbeKind::Liveness, ProbeParams::of(p)));
            }
        }
        slot.run.started = slot.startup.is_none();
        slot.run.ready = slot.run.started && slot.readiness.is_none();
        let target = ProbeTarget {
            container: slot.spec.clone(),
            pod_ip: sandbox.ip,
            pid,
            env: probe_env(&slot.env, &slot.bins.dir),
            nsenter: agent.tools.nsenter.clone(),
            bins: slot.bins.clone(),
            in_root: slot.in_root,
        };
        if slot.startup.is_some() {
            spawn_probe(slot, ProbeKind::Startup, &target, &self.ev_tx);
        } else {
            spawn_probe(slot, ProbeKind::Liveness, &target, &self.ev_tx);
            spawn_probe(slot, ProbeKind::Readiness, &target, &self.ev_tx);
        }
    }

    fn on_event(&mut self, ev: Ev) {
        match ev {
            Ev::Exited {
                instance,
                code,
                signal,
            } => self.on_exit(instance, code, signal),
            Ev::Probe { instance, kind, ok } => self.on_probe(instance, kind, ok),
        }
    }

    fn on_exit(&mut self, instance: u64, code: Option<i32>, signal: Option<i32>) {
        let Some(i) = self
            .slots
            .iter()
            .position(|s| s.pid.is_some() && s.instance == instance)
        else {
            return;
        };
        let node = self.node.name.clone();
        let restart_policy = self.restart_policy();
        let dead = self.dead;
        let log = self
            .agent
            .log_path(&self.ns, &self.name, &self.slots[i].spec.name);
        let slot = &mut self.slots[i];
        if let Some(pid) = slot.pid.take() {
            self.agent.unregister_pid(&node, pid);
        }
        slot.stop_probes();
        slot.kill_deadline = None;
        let started_at = match &slot.run.state {
            RunState::Running { started_at } => Some(*started_at),
            _ => None,
        };
        let mut t = Terminated::from_exit(code, signal, started_at, slot.run.container_id.clone());
        // A version built without TLS refuses a TLS configuration; say so
        // where a person looks (the container's last state), not only in
        // its log, since the real image of that version would have started.
        if t.exit_code != 0
            && let Some(build) = slot.build
        {
            t.message = valkey_versions::no_tls_message(build, &log_tail(&log));
        }
        // What a kubelet does for `FallbackToLogsOnError` (the testbed
        // writes no termination-log file, so a failed container's message
        // is always its log's tail).
        if t.exit_code != 0
            && t.message.is_none()
            && slot.spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        {
            t.message = Some(termination_message(&log_tail(&log))).filter(|m| !m.is_empty());
        }
        tracing::info!(pod = %self.name, container = %slot.spec.name, exit_code = t.exit_code, "container exited");
        slot.run.ready = false;
        slot.run.started = false;
        slot.run.state = RunState::Terminated(t.clone());
        if dead {
            return;
        }
        if slot
            .started_instant
            .is_some_and(|s| s.elapsed() >= BACKOFF_RESET_AFTER)
        {
            slot.crashes = 0;
        }
        match pods::after_exit(slot.kind == SlotKind::Init, &restart_policy, t.exit_code) {
            AfterExit::InitCompleted => {
                slot.run.ready = true;
                slot.next_start = None;
            }
            AfterExit::PodFailed => {
                slot.next_start = None;
                self.init_failed = true;
            }
            AfterExit::Stay => slot.next_start = None,
            AfterExit::Restart => {
                let delay = pods::backoff(slot.crashes);
                slot.crashes += 1;
                slot.next_start = Some(Instant::now() + delay);
                slot.run.last_terminated = Some(t);
                slot.run.state = RunState::Waiting {
                    reason: "CrashLoopBackOff".into(),
                    message: Some(format!(
                        "back-off {}ms restarting failed container={} pod={}_{}({})",
                        delay.as_millis(),
                        slot.spec.name,
                        self.name,
                        self.ns,
                        self.uid
                    )),
                };
            }
        }
    }

    fn on_probe(&mut self, instance: u64, kind: ProbeKind, ok: bool) {
        let Some(i) = self
            .slots
            .iter()
            .position(|s| s.pid.is_some() && s.instance == instance)
        else {
            return;
        };
        let grace = self.grace_for_probe_kill(i, kind);
        let nsenter = self.agent.tools.nsenter.clone();
        let pod_ip = self.sandbox.as_ref().map(|s| s.ip);
        let slot = &mut self.slots[i];
        let tracker = match kind {
            ProbeKind::Startup => slot.startup.as_mut(),
            ProbeKind::Liveness => slot.liveness.as_mut(),
            ProbeKind::Readiness => slot.readiness.as_mut(),
        };
        let Some(tracker) = tracker else {
            return;
        };
        let Some(flip) = tracker.observe(ok) else {
            return;
        };
        tracing::info!(pod = %self.name, container = %slot.spec.name, probe = ?kind, passing = flip, "probe result changed");
        match (kind, flip) {
            (ProbeKind::Startup, true) => {
                slot.run.started = true;
                slot.run.ready = slot.readiness.is_none();
                if let (Some(pid), Some(pod_ip)) = (slot.pid, pod_ip) {
                    let target = ProbeTarget {
                        container: slot.spec.clone(),
                        pod_ip,
                        pid,
                        env: probe_env(&slot.env, &slot.bins.dir),
                        nsenter,
                        bins: slot.bins.clone(),
                        in_root: slot.in_root,
                    };
                    // Stop the startup loop, start the other two.
                    slot.stop_probes();
                    spawn_probe(slot, ProbeKind::Liveness, &target, &self.ev_tx);
                    spawn_probe(slot, ProbeKind::Readiness, &target, &self.ev_tx);
                }
            }
            (ProbeKind::Readiness, _) => {
                slot.run.ready =
                    slot.run.started && slot.readiness.as_ref().is_some_and(|t| t.passing());
            }
            (ProbeKind::Startup | ProbeKind::Liveness, false) => {
                tracing::info!(pod = %self.name, container = %slot.spec.name, probe = ?kind, "probe failed, killing container");
                slot.stop_probes();
                slot.run.ready = false;
                if let Some(pid) = slot.pid {
                    runtime::signal(pid, Signal::SIGTERM);
                    slot.kill_deadline = Some(Instant::now() + grace);
                }
            }
            (ProbeKind::Liveness, true) => {}
        }
    }

    fn grace_for_probe_kill(&self, i: usize, kind: ProbeKind) -> Duration {
        let spec = &self.slots[i].spec;
        let probe = match kind {
            ProbeKind::Startup => spec.startup_probe.as_ref(),
            ProbeKind::Liveness => spec.liveness_probe.as_ref(),
            ProbeKind::Readiness => None,
        };
        probe
            .and_then(|p| p.termination_grace_period_seconds)
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or_else(|| {
                let mut p = (*self.pod).clone();
                p.metadata.deletion_grace_period_seconds = None;
                pods::grace_period(&p)
            })
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    /// The node died: everything is SIGKILLed (the fault handler already did;
    /// this makes sure), and late exit events are ignored.
    fn die(&mut self) {
        tracing::info!(pod = %self.name, node = %self.node.name, "node failed: pod processes killed");
        self.dead = true;
        let node = self.node.name.clone();
        for s in &mut self.slots {
            s.stop_probes();
            s.kill_deadline = None;
            if let Some(pid) = s.pid.take() {
                runtime::signal(pid, Signal::SIGKILL);
                self.agent.unregister_pid(&node, pid);
                let started_at = match &s.run.state {
                    RunState::Running { started_at } => Some(*started_at),
                    _ => None,
                };
                s.run.state = RunState::Terminated(Terminated::from_exit(
                    None,
                    Some(9),
                    started_at,
                    s.run.container_id.clone(),
                ));
                s.run.ready = false;
                s.run.started = false;
            }
            s.instance = 0;
        }
    }

    /// The node came back, like a rebooted kubelet: containers that were
    /// running start again (their restart count goes up).
    fn reboot(&mut self) {
        tracing::info!(pod = %self.name, node = %self.node.name, "node healed: restarting pod containers");
        self.dead = false;
        let policy = self.restart_policy();
        let now = Instant::now();
        for s in &mut self.slots {
            if s.pid.is_some() {
                continue;
            }
            if s.kind == SlotKind::Init {
                // An init container the node died under runs again (or fails
                // the pod under restartPolicy Never).
                if s.run.exit_code().is_some_and(|c| c != 0) && !self.init_done {
                    if policy == "Never" {
                        self.init_failed = true;
                    } else {
                        s.next_start = Some(now);
                    }
                }
                continue;
            }
            if let RunState::Terminated(t) = &s.run.state {
                let t = t.clone();
                if pods::should_restart(&policy, t.exit_code) {
                    s.run.last_terminated = Some(t);
                    s.run.state = RunState::Waiting {
                        reason: "ContainerCreating".into(),
                        message: None,
                    };
                    s.crashes = 0;
                    s.next_start = Some(now);
                }
            }
        }
    }

    fn view(&self) -> PodView {
        let inits = self
            .slots
            .iter()
            .filter(|s| s.kind == SlotKind::Init)
            .map(|s| s.run.clone())
            .collect();
        let mains = self
            .slots
            .iter()
            .filter(|s| s.kind == SlotKind::Main)
            .map(|s| s.run.clone())
            .collect();
        PodView {
            sandbox_ready: self.sandbox.is_some(),
            pod_ip: self
                .sandbox
                .as_ref()
                .map(|s| s.ip.to_string())
                .or_else(|| self.pod.status.as_ref().and_then(|s| s.pod_ip.clone())),
            host_ip: self.host_ip.clone(),
            start_time: self.start_time,
            init_done: self.init_done,
            init_failed: self.init_failed,
            inits,
            mains,
            restart_policy: self.restart_policy(),
            terminal: self.terminal,
        }
    }

    async fn sync_status(&mut self) {
        let desired = status::build_status(&self.pod, &self.view(), status::now());
        if !status::needs_patch(self.pod.status.as_ref(), &desired) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.agent.client.clone(), &self.ns);
        let body = status::status_patch(&desired, &self.uid);
        let pp = PatchParams {
            field_manager: Some("testbed-agent".into()),
            ..Default::default()
        };
        match api
            .patch_status(&self.name, &pp, &Patch::Strategic(&body))
            .await
        {
            Ok(p) => {
                if p.metadata.uid.as_deref() == Some(self.uid.as_str()) {
                    self.pod = Arc::new(p);
                }
            }
            // Gone, or the name now belongs to another pod (UID precondition):
            // the dispatcher ends this worker.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(pod = %self.name, error = %e, "pod status patch failed, retrying");
                self.retry_at = Some(Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// Graceful deletion: preStop hooks, SIGTERM, wait out the grace period,
    /// SIGKILL, final status, sandbox teardown, then the DELETE with grace 0
    /// and a UID precondition that makes the pod go from the API.
    async fn terminate(&mut self) {
        let grace = pods::grace_period(&self.pod);
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), grace_s = grace.as_secs(), "terminating pod");
        let deadline = Instant::now() + grace;
        for s in &mut self.slots {
            s.stop_probes();
            s.next_start = None;
        }
        if !self.dead {
            self.run_pre_stop_hooks(deadline).await;
            for s in &self.slots {
                if let Some(pid) = s.pid {
                    runtime::signal(pid, Signal::SIGTERM);
                }
            }
            self.wait_exits(deadline).await;
            for s in &self.slots {
                if let Some(pid) = s.pid {
                    runtime::signal(pid, Signal::SIGKILL);
                }
            }
            self.wait_exits(Instant::now() + Duration::from_secs(3))
                .await;
        }
        // Anything that still did not report is gone with the namespace.
        let node = self.node.name.clone();
        for s in &mut self.slots {
            if let Some(pid) = s.pid.take() {
                self.agent.unregister_pid(&node, pid);
                s.run.state = RunState::Terminated(Terminated::from_exit(
                    None,
                    Some(9),
                    None,
                    s.run.container_id.clone(),
                ));
            }
            if matches!(s.run.state, RunState::Waiting { .. }) && s.kind == SlotKind::Main {
                s.run.state = RunState::Terminated(Terminated {
                    reason: "ContainerStatusUnknown".into(),
                    message: Some(
                        "The container could not be located when the pod was terminated".into(),
                    ),
                    ..Terminated::from_exit(Some(137), None, None, None)
                });
            }
            s.run.ready = false;
            s.run.started = false;
        }
        self.terminal = true;
        if self.health_rx.borrow().api_connected() {
            self.sync_status().await;
        }
        self.teardown().await;
        self.delete_from_api().await;
    }

    async fn run_pre_stop_hooks(&mut self, deadline: Instant) {
        let mut hooks = Vec::new();
        for s in &self.slots {
            let (Some(pid), true) = (s.pid, s.real) else {
                continue;
            };
            let Some(cmd) = s
                .spec
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .and_then(|h| h.exec.as_ref())
                .and_then(|e| e.command.clone())
            else {
                continue;
            };
            let target = ProbeTarget {
                container: s.spec.clone(),
                pod_ip: self
                    .sandbox
                    .as_ref()
                    .map(|s| s.ip)
                    .unwrap_or(Ipv4Addr::UNSPECIFIED),
                pid,
                env: probe_env(&s.env, &s.bins.dir),
                nsenter: self.agent.tools.nsenter.clone(),
                bins: s.bins.clone(),
                in_root: s.in_root,
            };
            let timeout = deadline.saturating_duration_since(Instant::now());
            hooks.push(async move { super::probes::run_exec(&target, &cmd, timeout).await });
        }
        futures::future::join_all(hooks).await;
    }

    async fn wait_exits(&mut self, deadline: Instant) {
        while self.slots.iter().any(|s| s.pid.is_some()) {
            tokio::select! {
                Some(ev) = self.ev_rx.recv() => {
                    if let Ev::Exited { .. } = ev {
                        self.on_event(ev);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    async fn teardown(&mut self) {
        if let Some(t) = self.token_refresh.take() {
            t.abort();
        }
        if let Some(t) = self.volume_sync.take() {
            t.abort();
        }
        if let Some(sb) = self.sandbox.take() {
            sb.destroy(&self.agent.tools.ip).await;
        }
        self.agent.release_ip(&self.node.name, &self.uid);
        let _ = tokio::fs::remove_dir_all(self.pod_dir()).await;
    }

    async fn delete_from_api(&mut self) {
        let api: Api<Pod> = Api::namespaced(self.agent.client.clone(), &self.ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        for attempt in 0..30 {
            if !self.health_rx.borrow().api_connected() {
                // Cut off mid-deletion: wait for the heal (or for the pod to vanish).
                let _ = self.health_rx.changed().await;
                continue;
            }
            match api.delete(&self.name, &dp).await {
                Ok(_) => {
                    tracing::info!(pod = %format!("{}/{}", self.ns, self.name), "pod deleted");
                    return;
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                Err(e) => {
                    tracing::warn!(pod = %self.name, attempt, error = %e, "pod delete failed, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// The pod is gone from the API (force-deleted, or deleted while we were
    /// not looking): kill, clean up, forget.
    async fn vanish(&mut self) {
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), "pod gone from the API, cleaning up");
        let node = self.node.name.clone();
        for s in &mut self.slots {
            s.stop_probes();
            if let Some(pid) = s.pid.take() {
                runtime::signal(pid, Signal::SIGKILL);
                self.agent.unregister_pid(&node, pid);
            }
        }
        self.teardown().await;
    }
}

/// A container whose image the testbed does not have, as a kubelet shows an
/// image it cannot pull: `ErrImagePull` with the reason for a moment, then
/// `ImagePullBackOff` until the next try (the image is looked up again then,
/// so one loaded meanwhile runs). Nothing starts; the restart count stays.
fn image_pull_failed(slot: &mut Slot, image: &str, why: &str, now: Instant) {
    slot.run.image_id.clear();
    match slot.pull_retry_at {
        Some(retry) if retry > now => {
            slot.run.state = RunState::Waiting {
                reason: "ImagePullBackOff".into(),
                message: Some(format!(
                    "Back-off pulling image \"{image}\": ErrImagePull: {why}"
                )),
            };
            slot.next_start = Some(retry);
        }
        _ => {
            tracing::warn!(container = %slot.spec.name, image, reason = why, "image pull failed");
            slot.run.state = RunState::Waiting {
                reason: "ErrImagePull".into(),
                message: Some(format!("Failed to pull image \"{image}\": {why}")),
            };
            slot.pull_retry_at = Some(
                now + pods::ERR_IMAGE_PULL_SHOWN + pods::image_pull_backoff(slot.pull_failures),
            );
            slot.pull_failures = slot.pull_failures.saturating_add(1);
            slot.next_start = Some(now + pods::ERR_IMAGE_PULL_SHOWN);
        }
    }
}

/// The end of a container's log (its last 4 KiB), empty when unreadable.
/// A kubelet's fallback termination message: the log's last 80 lines, at
/// most its last 2048 bytes (cut at a character boundary).
fn termination_message(tail: &str) -> String {
    const MAX_LINES: usize = 80;
    const MAX_BYTES: usize = 2048;
    let lines: Vec<&str> = tail.trim_end().lines().collect();
    let text = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
    let mut start = text.len().saturating_sub(MAX_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

fn log_tail(path: &std::path::Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let _ = f
        .seek(SeekFrom::End(-4096))
        .or_else(|_| f.seek(SeekFrom::Start(0)));
    let mut buf = Vec::new();
    let _ = f.take(4096).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn probe_env(env: &[(String, String)], bin_dir: &std::path::Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env.to_vec();
    let bin = bin_dir.display().to_string();
    match out.iter_mut().find(|(k, _)| k == "PATH") {
        Some((_, v)) => {
            if !v.split(':').any(|p| p == bin) {
                *v = format!("{bin}:{v}");
            }
        }
        None => out.push(("PATH".into(), format!("{bin}:/usr/local/bin:/usr/bin:/bin"))),
    }
    out
}

fn spawn_probe(
    slot: &mut Slot,
    kind: ProbeKind,
    target: &ProbeTarget,
    tx: &mpsc::UnboundedSender<Ev>,
) {
    let probe = match kind {
        ProbeKind::Startup => slot.spec.startup_probe.clone(),
        ProbeKind::Liveness => slot.spec.liveness_probe.clone(),
        ProbeKind::Readiness => slot.spec.readiness_probe.clone(),
    };
    let (Some(probe), true) = (probe, slot.real) else {
        return;
    };
    let tx = tx.clone();
    let instance = slot.instance;
    let handle = tokio::spawn(super::probes::probe_loop(
        probe,
        target.clone(),
        move |ok| tx.send(Ev::Probe { instance, kind, ok }).is_ok(),
    ));
    slot.probe_tasks.push(handle);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_always_find_the_valkey_tools_first_on_path() {
        let env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        let out = probe_env(&env, std::path::Path::new("/tb/agent/bin"));
        assert_eq!(out[0].1, "/tb/agent/bin:/usr/bin");
        let out = probe_env(&[], std::path::Path::new("/tb/agent/bin"));
        assert!(out[0].1.starts_with("/tb/agent/bin:"));
    }

    #[test]
    fn a_fallback_termination_message_is_the_logs_last_80_lines_and_2048_bytes() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let m = termination_message(&log);
        assert!(m.starts_with("line 20\n") && m.ends_with("line 99"), "{m}");
        let long = format!("{}\nlast", "é".repeat(1500));
        let m = termination_message(&long);
        assert!(m.len() <= 2048 && m.ends_with("last"));
        assert_eq!(termination_message("\n"), "");
    }
}
