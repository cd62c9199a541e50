//! The node agent: one process that is the kubelet of every simulated node of
//! a testbed (`testbed agent --dir DIR`).
//!
//! - `node`: Node registration, Lease and status heartbeats.
//! - `worker` (+ the pure `pods`, `status`, `spec`, `probes`): the pod lifecycle.
//! - `runtime`, `network`, `volumes`: processes, namespaces, volume folders.
//! - `provisioner`: PersistentVolumes for StorageClass `testbed-local`.
//! - `faults`: the fault socket and the nftables rules behind it.
//! - `proxy`: Services (kube-proxy's DNAT: ClusterIPs, nodePorts,
//!   load-balancer addresses); `loadbalancer`: the addresses of LoadBalancer
//!   Services, from the testbed's pool; `dns`: pods' resolv.conf.
//! - `rootfs`, `incluster`: loaded images run from their root filesystem;
//!   the API address and service-account tokens in-cluster clients need.
//!
//! What is simulated: nothing is pulled; a container whose image was loaded
//! (`testbed image load`) runs it for real, a container whose image is a
//! Valkey image runs the real `valkey-server` of the version its tag names
//! (and its probes the real CLI; `valkey_versions` has the table), an image
//! naming valkey that the testbed does not have fails to pull
//! (ErrImagePull, ImagePullBackOff); any other container runs a placeholder
//! (`sleep infinity`, init containers exit 0) that reports Ready without
//! probing.

pub mod dns;
pub mod faults;
pub mod incluster;
pub mod loadbalancer;
pub mod network;
pub mod node;
pub mod pods;
pub mod probes;
pub mod provisioner;
pub mod proxy;
pub mod rootfs;
pub mod runtime;
pub mod spec;
pub mod status;
pub mod volumes;
pub mod worker;

use crate::state::{NodeSpec, TestbedState};
use crate::valkey_versions;
use faults::{FaultState, NodeHealth, Request};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use network::{Cidr, Ipam, NetError};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Shared state of the agent.
pub struct Agent {
    pub client: kube::Client,
    pub state: TestbedState,
    pub tools: runtime::Tools,
    /// The newest build's tools ([`valkey_versions::LATEST`]): what the
    /// probes of a container that is not a Valkey image get.
    pub bins: spec::Binaries,
    /// Every Valkey version this testbed has, by version: copies of its
    /// `valkey-server` and of the newest `valkey-cli` in
    /// `/run/valkey-rs/testbed-<id>/valkey-<version>/`, where a container
    /// running as a non-root user can reach them (the cache under a home
    /// folder may not be), first on its containers' PATH.
    pub valkey: BTreeMap<String, spec::Binaries>,
    ipam_path: PathBuf,
    ipam: Mutex<Ipam>,
    faults: tokio::sync::Mutex<FaultState>,
    health: BTreeMap<String, watch::Sender<NodeHealth>>,
    /// Container PIDs (process group leaders) per node, for node faults and shutdown.
    procs: Mutex<BTreeMap<String, BTreeSet<u32>>>,
    /// The nftables table of this testbed (`vk<id>`).
    pub table: String,
    /// Requests for the load balancer (from the agent socket).
    pub lb: tokio::sync::mpsc::Sender<loadbalancer::Command>,
}

impl Agent {
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.state.nodes.iter().find(|n| n.name == name)
    }

    pub fn health_rx(&self, node: &str) -> watch::Receiver<NodeHealth> {
        match self.health.get(node) {
            Some(tx) => tx.subscribe(),
            // Not one of ours: a channel that says healthy forever.
            None => watch::channel(NodeHealth::default()).1,
        }
    }

    pub fn pod_dir(&self, ns: &str, name: &str, uid: &str) -> PathBuf {
        self.state
            .dir
            .join("pods")
            .join(format!("{ns}_{name}_{uid}"))
    }

    pub fn log_path(&self, ns: &str, pod: &str, container: &str) -> PathBuf {
        self.state
            .dir
            .join("logs")
            .join("pods")
            .join(format!("{ns}_{pod}_{container}.log"))
    }

    pub fn allocate_ip(
        &self,
        node: &str,
        cidr: &Cidr,
        uid: &str,
        preferred: Option<Ipv4Addr>,
    ) -> Result<Ipv4Addr, NetError> {
        let mut ipam = self.ipam.lock().map_err(|_| NetError::Persist {
            path: self.ipam_path.clone(),
            message: "allocator lock poisoned".into(),
        })?;
        let ip = ipam.allocate(node, cidr, uid, preferred)?;
        ipam.save(&self.ipam_path)?;
        Ok(ip)
    }

    pub fn release_ip(&self, node: &str, uid: &str) {
        if let Ok(mut ipam) = self.ipam.lock() {
            ipam.release(node, uid);
            if let Err(e) = ipam.save(&self.ipam_path) {
                tracing::warn!(error = %e, "saving the address allocator failed");
            }
        }
    }

    fn retain_ips(&self, alive: &HashSet<String>) {
        if let Ok(mut ipam) = self.ipam.lock() {
            for n in &self.state.nodes {
                ipam.retain(&n.name, &|uid| alive.contains(uid));
            }
            let _ = ipam.save(&self.ipam_path);
        }
    }

    pub fn register_pid(&self, node: &str, pid: u32) {
        if let Ok(mut p) = self.procs.lock() {
            p.entry(node.to_string()).or_default().insert(pid);
        }
    }

    pub fn unregister_pid(&self, node: &str, pid: u32) {
        if let Ok(mut p) = self.procs.lock()
            && let Some(set) = p.get_mut(node)
        {
            set.remove(&pid);
        }
    }

    fn kill_node_processes(&self, node: &str) {
        let pids: Vec<u32> = self
            .procs
            .lock()
            .map(|p| {
                p.get(node)
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        for pid in pids {
            runtime::signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Applies a fault: the network first (nftables), then the processes
    /// (SIGKILL for failed nodes, synchronously, so the reply means "done"),
    /// then the health every worker and heartbeat loop of the node watches.
    pub async fn apply_fault(&self, req: &Request) -> Result<String, String> {
        let mut state = self.faults.lock().await;
        if *req == Request::Status {
            return Ok(faults::describe(&state, &self.state.nodes));
        }
        let mut next = state.clone();
        let (changed, message) = faults::apply(&mut next, req, &self.state.nodes);
        let script = faults::render_ruleset(&self.table, &next, &self.state.nodes);
        faults::load_ruleset(&self.tools.nft, &script).await?;
        *state = next;
        for name in &changed {
            let Some(n) = self.node(name) else { continue };
            let h = state.health(&n.name, &n.zone);
            if h.failed {
                self.kill_node_processes(name);
            }
            if let Some(tx) = self.health.get(name) {
                tx.send_replace(h);
            }
        }
        tracing::info!(?req, changed = ?changed, "fault applied");
        Ok(message)
    }

    /// Hands a request to the load balancer and waits for its answer.
    pub async fn load_balancer(&self, req: loadbalancer::Request) -> Result<String, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.lb
            .send((req, tx))
            .await
            .map_err(|_| "the load balancer is not running".to_string())?;
        match tokio::time::timeout(std::time::Duration::from_secs(30), rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err("the load balancer dropped the request".into()),
            Err(_) => Err("the load balancer did not answer within 30 s".into()),
        }
    }

    fn all_pids(&self) -> Vec<u32> {
        self.procs
            .lock()
            .map(|p| p.values().flatten().copied().collect())
            .unwrap_or_default()
    }
}

/// Runs the agent until SIGTERM or SIGINT.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
pub async fn run(dir: &Path) -> anyhow::Result<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .try_init();
    let state = TestbedState::load(dir)?;
    let tools = runtime::Tools::find()?;
    let agent_dir = state.dir.join("agent");
    let run_dir = PathBuf::from(format!("/run/valkey-rs/testbed-{}", state.id));
    for d in [
        &agent_dir,
        &run_dir,
        &state.dir.join("pods"),
        &state.dir.join("volumes"),
        &state.dir.join("logs").join("pods"),
    ] {
        std::fs::create_dir_all(d).map_err(|e| anyhow::anyhow!("creating {}: {e}", d.display()))?;
    }
    let valkey = install_valkey(&run_dir, &state)?;
    let bins = valkey
        .get(valkey_versions::LATEST.version)
        .cloned()
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} names no valkey-server {}: run `testbed down` and `testbed up` again",
                TestbedState::path_in(&state.dir).display(),
                valkey_versions::LATEST.version
            )
        })?;

    let kubeconfig = kube::config::Kubeconfig::read_from(&state.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;

    // Whatever a previous agent left: processes in our namespaces, the
    // namespaces, veths, and fault rules. Pods still bound to our nodes are
    // started again below, as restarts.
    network::sweep(&tools.ip, &state.netns_prefix).await;
    let table = format!("vk{}", state.id);
    faults::load_ruleset(
        &tools.nft,
        &faults::render_ruleset(&table, &FaultState::default(), &state.nodes),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;

    let ipam_path = agent_dir.join("ipam.json");
    let ipam = Ipam::load(&ipam_path)?;
    let health = state
        .nodes
        .iter()
        .map(|n| (n.name.clone(), watch::channel(NodeHealth::default()).0))
        .collect();
    let (lb_tx, lb_rx) = tokio::sync::mpsc::channel(8);
    let agent = Arc::new(Agent {
        client,
        lb: lb_tx,
        bins,
        valkey,
        tools,
        ipam_path,
        ipam: Mutex::new(ipam),
        faults: tokio::sync::Mutex::new(FaultState::default()),
        health,
        procs: Mutex::new(BTreeMap::new()),
        table,
        state,
    });
    tracing::info!(nodes = agent.state.nodes.len(), dir = %agent.state.dir.display(), "agent starting");

    let mut tasks = Vec::new();
    for n in &agent.state.nodes {
        tasks.push(tokio::spawn(node::heartbeat_loop(
            agent.client.clone(),
            n.clone(),
            agent.health_rx(&n.name),
        )));
    }
    {
        let a = agent.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = faults::serve(a).await {
                tracing::error!(error = %e, "fault socket stopped");
            }
        }));
    }
    tasks.push(tokio::spawn(provisioner::run(agent.clone())));
    tasks.push(tokio::spawn(dispatch_pods(agent.clone())));
    tasks.push(tokio::spawn(proxy::run(agent.clone())));
    tasks.push(tokio::spawn(loadbalancer::run(agent.clone(), lb_rx)));

    wait_for_signal().await;
    tracing::info!("agent stopping: killing pod processes and removing namespaces");
    for t in &tasks {
        t.abort();
    }
    for pid in agent.all_pids() {
        runtime::signal(pid, nix::sys::signal::Signal::SIGKILL);
    }
    network::sweep(&agent.tools.ip, &agent.state.netns_prefix).await;
    faults::delete_table(&agent.tools.nft, &agent.table).await;
    faults::delete_table(&agent.tools.nft, &proxy::table_name(agent.state.id)).await;
    let _ = std::fs::remove_file(&agent.state.agent_socket);
    tracing::info!("agent stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Copies each Valkey version's server (and the newest valkey-cli, which
/// probes every version fine) to `run_dir/valkey-<version>/`. A version the
/// state file does not name is left out: its images then fail as not found.
fn install_valkey(
    run_dir: &Path,
    state: &TestbedState,
) -> anyhow::Result<BTreeMap<String, spec::Binaries>> {
    let mut out = BTreeMap::new();
    for build in valkey_versions::BUILDS {
        let Some(server) = state.valkey_servers.get(build.version) else {
            tracing::warn!(
                version = build.version,
                "no valkey-server of this version in the state file: its images will not be found"
            );
            continue;
        };
        let dir = run_dir.join(format!("valkey-{}", build.version));
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        let valkey_server = copy_tool(&dir, "valkey-server", server)?;
        let valkey_cli = copy_tool(&dir, "valkey-cli", &state.valkey_cli)?;
        link_tool(&dir, "redis-cli", &valkey_cli)?;
        out.insert(
            build.version.to_string(),
            spec::Binaries {
                dir,
                valkey_server,
                valkey_cli,
            },
        );
    }
    Ok(out)
}

/// Copies `source` (following links) to `dir/name`, readable and executable
/// by every user, replacing an older copy without touching a running one.
fn copy_tool(dir: &Path, name: &str, source: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dest = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    let err = |what: &str, e: std::io::Error| {
        anyhow::anyhow!("{what} {} -> {}: {e}", source.display(), dest.display())
    };
    std::fs::copy(source, &tmp).map_err(|e| err("copying", e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| err("chmod", e))?;
    std::fs::rename(&tmp, &dest).map_err(|e| err("renaming", e))?;
    Ok(dest)
}

/// Puts a symlink `dir/name -> target` in place (replacing an old one).
fn link_tool(dir: &Path, name: &str, target: &Path) -> anyhow::Result<()> {
    let link = dir.join(name);
    if link == target {
        return Ok(());
    }
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(target, &link)
        .map_err(|e| anyhow::anyhow!("linking {} -> {}: {e}", link.display(), target.display()))
}

/// Watches every pod and feeds the ones bound to our nodes to their workers.
async fn dispatch_pods(agent: Arc<Agent>) {
    let api: Api<Pod> = Api::all(agent.client.clone());
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut workers: HashMap<String, worker::PodFeed> = HashMap::new();
    let mut listed: HashSet<String> = HashSet::new();
    let mut first_listing = true;
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(error = %e, "pod watch error");
                continue;
            }
        };
        match ev {
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitApply(pod) => {
                if let Some(uid) = route(&agent, &mut workers, pod) {
                    listed.insert(uid);
                }
            }
            watcher::Event::Apply(pod) => {
                route(&agent, &mut workers, pod);
            }
            watcher::Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref()
                    && let Some(feed) = workers.remove(uid)
                {
                    feed.send_replace(None);
                }
            }
            watcher::Event::InitDone => {
                // Pods that went away while we were not watching.
                let gone: Vec<String> = workers
                    .keys()
                    .filter(|u| !listed.contains(*u))
                    .cloned()
                    .collect();
                for uid in gone {
                    if let Some(feed) = workers.remove(&uid) {
                        feed.send_replace(None);
                    }
                }
                if first_listing {
                    first_listing = false;
                    agent.retain_ips(&listed);
                    remove_stale_pod_dirs(&agent, &listed);
                }
            }
        }
    }
}

/// Hands a pod to its worker (starting one for a new pod bound to our nodes);
/// returns its UID when it is ours.
fn route(
    agent: &Arc<Agent>,
    workers: &mut HashMap<String, worker::PodFeed>,
    pod: Pod,
) -> Option<String> {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone())?;
    let spec = agent.node(&node)?.clone();
    let uid = pod.metadata.uid.clone()?;
    let pod = Arc::new(pod);
    match workers.get(&uid) {
        Some(feed) if !feed.is_closed() => {
            feed.send_replace(Some(pod));
        }
        // Its worker is done with it (deleted it from the API, or it ended):
        // a late event of that pod must not start a second life for it. The
        // entry goes with the pod's Delete event (or the next relist).
        Some(_) => {}
        None => {
            workers.insert(uid.clone(), worker::spawn(agent.clone(), spec, pod));
        }
    }
    Some(uid)
}

fn remove_stale_pod_dirs(agent: &Agent, alive: &HashSet<String>) {
    let Ok(entries) = std::fs::read_dir(agent.state.dir.join("pods")) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let uid = name.rsplit('_').next().unwrap_or_default();
        if !alive.contains(uid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
