// Over 600 lines: starting and stopping the control plane's four processes, in order, with their flags.
//! The control plane's life cycle: `up` (PKI, etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, then the node agent, CoreDNS and
//! the object store), `down`
//! (everything stopped, every network object removed) and `status`.
//!
//! `up` leaves its components running detached and records what it did in
//! files: `DIR/testbed.json` (the contract with the agent, written before the
//! agent starts), `DIR/controlplane.json` (the chosen ports), `DIR/pids/` and
//! `DIR/logs/`. Every later verb works from those files, so it does not matter
//! which process runs it.

pub mod api;
pub mod certs;
pub mod components;
pub mod coredns;
pub mod kubeconfig;
pub mod objectstore;
pub mod process;

use crate::hostnet;
use crate::registry::{Registry, RegistryError, cache_dir, registry_dir};
use crate::state::{StateError, TestbedState};
use crate::topology::{Topology, TopologyError, host_ip, netns_prefix, nft_table};
use crate::valkey_versions;
use components::{Layout, Ports};
use process::{Liveness, ProcessError, Supervisor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The pinned releases, as the setup scripts build them.
pub const KUBE_VERSION: &str = "v1.36.3";
pub const ETCD_VERSION: &str = "v3.6.16";

/// Component names, in start order; `down` stops them in reverse.
pub const ETCD: &str = "etcd";
pub const APISERVER: &str = "kube-apiserver";
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";
pub const SCHEDULER: &str = "kube-scheduler";
pub const AGENT: &str = "agent";
/// The cluster DNS (see [`coredns`]).
pub const COREDNS: &str = "coredns";
/// The S3-compatible object store (see [`objectstore`]).
pub const OBJECT_STORE: &str = "seaweedfs";
pub const COMPONENTS: [&str; 7] = [
    ETCD,
    APISERVER,
    CONTROLLER_MANAGER,
    SCHEDULER,
    COREDNS,
    OBJECT_STORE,
    AGENT,
];

const RECORD_FILE: &str = "controlplane.json";

/// Errors of `up`, `down` and `status`.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("creating the testbed directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} not found at {path}: run `make setup` (or crates/testbed/scripts/{script})")]
    MissingBinary {
        what: &'static str,
        path: PathBuf,
        script: &'static str,
    },
    #[error("preparing valkey-cli at {path}: {source}")]
    ValkeyCli {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("fetching valkey-server with {script}: {detail}")]
    FetchValkey { script: PathBuf, detail: String },
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Certs(#[from] certs::CertsError),
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    HostNet(#[from] hostnet::HostNetError),
    #[error(transparent)]
    Api(#[from] api::ApiError),
    #[error(transparent)]
    ObjectStore(#[from] objectstore::ObjectStoreError),
    #[error("finding free loopback ports: {0}")]
    Ports(std::io::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{name} exited during start-up; last lines of {log}:\n{tail}")]
    Died {
        name: &'static str,
        log: PathBuf,
        tail: String,
    },
    #[error("timed out after {seconds}s waiting for {what}; logs in {logs}")]
    Timeout {
        what: String,
        seconds: u64,
        logs: PathBuf,
    },
}

/// What `up` was asked for.
#[derive(Debug, Clone)]
pub struct UpOptions {
    pub topology: Topology,
    /// Longest wait for the whole start-up.
    pub timeout: Duration,
    /// Leave whatever started running when `up` fails (for debugging).
    pub keep_on_failure: bool,
}

/// Ports and other facts of the running control plane (`DIR/controlplane.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub ports: Ports,
    pub kube_version: String,
    pub etcd_version: String,
}

impl Record {
    fn path(dir: &Path) -> PathBuf {
        dir.join(RECORD_FILE)
    }

    pub fn load(dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(Self::path(dir)).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn save(&self, dir: &Path) -> Result<(), ControlPlaneError> {
        let path = Self::path(dir);
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        std::fs::write(&path, text).map_err(|source| ControlPlaneError::Write { path, source })
    }
}

/// Where the pinned binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_bin_dir: PathBuf,
    /// valkey-server of every build in `valkey_versions::BUILDS`, by version.
    pub valkey_servers: BTreeMap<String, PathBuf>,
    /// The newest build's valkey-cli: the probes' client for every version.
    pub valkey_cli: PathBuf,
    pub coredns: PathBuf,
    /// SeaweedFS's `weed`, the object store.
    pub weed: PathBuf,
}

impl Binaries {
    /// The binaries under the cache (`$VALKEY_RS_CACHE`, else `~/.cache/valkey-rs`).
    pub fn in_cache() -> Self {
        let bin = cache_dir().join("bin");
        let valkey = |version: &str| bin.join(format!("valkey-{version}"));
        Self {
            etcd: bin.join(format!("etcd-{ETCD_VERSION}")).join("etcd"),
            kube_bin_dir: bin.join(format!("kube-{KUBE_VERSION}")),
            valkey_servers: valkey_versions::BUILDS
                .iter()
                .map(|b| {
                    (
                        b.version.to_string(),
                        valkey(b.version).join("valkey-server"),
                    )
                })
                .collect(),
            valkey_cli: valkey(valkey_versions::LATEST.version).join("valkey-cli"),
            coredns: bin
                .join(format!("coredns-{}", coredns::COREDNS_VERSION))
                .join("coredns"),
            weed: bin
                .join(format!("seaweedfs-{}", objectstore::SEAWEEDFS_VERSION))
                .join("weed"),
        }
    }

    pub fn kube(&self, name: &str) -> PathBuf {
        self.kube_bin_dir.join(name)
    }

    /// Checks that everything is there. A valkey-server of any version is
    /// fetched when missing and the fetch script is at hand (a source
    /// checkout); the valkey-cli symlink to redis-cli is made when missing.
    fn ensure(&self) -> Result<(), ControlPlaneError> {
        let missing = |what, path: &Path, script| {
            if path.is_file() {
                Ok(())
            } else {
                Err(ControlPlaneError::MissingBinary {
                    what,
                    path: path.to_path_buf(),
                    script,
                })
            }
        };
        missing("etcd", &self.etcd, "build-controlplane.sh")?;
        missing("coredns", &self.coredns, "build-controlplane.sh")?;
        missing(
            "the object store (SeaweedFS)",
            &self.weed,
            "build-controlplane.sh",
        )?;
        for name in [APISERVER, CONTROLLER_MANAGER, SCHEDULER, "kubectl"] {
            missing(
                "the control plane",
                &self.kube(name),
                "build-controlplane.sh",
            )?;
        }
        if self.valkey_servers.values().any(|p| !p.is_file()) || !self.valkey_cli.exists() {
            fetch_valkey()?;
        }
        for server in self.valkey_servers.values() {
            missing("valkey-server", server, "fetch-valkey.sh")?;
        }
        if !self.valkey_cli.exists() {
            let cli = ["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"]
                .into_iter()
                .map(Path::new)
                .find(|p| p.is_file())
                .ok_or_else(|| ControlPlaneError::MissingBinary {
                    what: "redis-cli (package redis-tools), the probes' valkey-cli,",
                    path: PathBuf::from("/usr/bin/redis-cli"),
                    script: "fetch-valkey.sh",
                })?;
            std::os::unix::fs::symlink(cli, &self.valkey_cli).map_err(|source| {
                ControlPlaneError::ValkeyCli {
                    path: self.valkey_cli.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }
}

/// Runs the fetch script of the source tree this binary was built from, if it
/// is still there; otherwise leaves the error to `ensure`.
fn fetch_valkey() -> Result<(), ControlPlaneError> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch-valkey.sh");
    if !script.is_file() {
        return Ok(());
    }
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| ControlPlaneError::FetchValkey {
            script: script.clone(),
            detail: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ControlPlaneError::FetchValkey {
            script,
            detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Makes `dir` absolute (creating it), so every path recorded is absolute.
pub fn absolute_dir(dir: &Path, create: bool) -> Result<PathBuf, ControlPlaneError> {
    if create {
        std::fs::create_dir_all(dir).map_err(|source| ControlPlaneError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    match std::fs::canonicalize(dir) {
        Ok(p) => Ok(p),
        Err(_) if !create => Ok(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())),
        Err(source) => Err(ControlPlaneError::Dir {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Progress lines go to stderr; stdout carries only the result.
fn progress(start: Instant, what: &str) {
    eprintln!("[{:>5.1}s] {what}", start.elapsed().as_secs_f64());
}

/// Five free loopback ports, all distinct (the listeners are held until every
/// port is chosen).
fn free_ports() -> Result<Ports, ControlPlaneError> {
    let listeners = (0..5)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ControlPlaneError::Ports)?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ControlPlaneError::Ports)?;
    Ok(Ports {
        etcd_client: ports[0],
        etcd_peer: ports[1],
        apiserver: ports[2],
        controller_manager: ports[3],
        scheduler: ports[4],
    })
}

/// The last lines of a log, for error messages.
fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Start-up context: the testbed's files, a clock and a deadline.
struct Starter {
    layout: Layout,
    sup: Supervisor,
    start: Instant,
    deadline: Instant,
    timeout: Duration,
}

impl Starter {
    fn died(&self, name: &'static str) -> ControlPlaneError {
        let log = self.sup.log_path(name);
        ControlPlaneError::Died {
            name,
            tail: log_tail(&log, 25),
            log,
        }
    }

    fn timeout(&self, what: impl Into<String>) -> ControlPlaneError {
        ControlPlaneError::Timeout {
            what: what.into(),
            seconds: self.timeout.as_secs(),
            logs: self.sup.logs_dir(),
        }
    }

    /// Fails when one of `names` is no longer running.
    fn check_alive(&self, names: &[&'static str]) -> Result<(), ControlPlaneError> {
        match names.iter().find(|n| !self.sup.liveness(n).is_alive()) {
            Some(n) => Err(self.died(n)),
            None => Ok(()),
        }
    }

    async fn tick(&self, what: &str) -> Result<(), ControlPlaneError> {
        if Instant::now() >= self.deadline {
            return Err(self.timeout(what));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }
}

/// The state and ports of the testbed at `dir` when its core (etcd and a ready
/// apiserver) is running; the cluster's objects then live on.
async fn running_core(dir: &Path) -> Option<(TestbedState, Record)> {
    let sup = Supervisor::new(dir);
    let state = TestbedState::load(dir).ok()?;
    let record = Record::load(dir)?;
    if ![ETCD, APISERVER].iter().all(|c| sup.liveness(c).is_alive()) {
        return None;
    }
    let client = api::client(&Layout::new(dir).kubeconfig).await.ok()?;
    api::is_ready(&client).await.then_some((state, record))
}

/// Starts again whichever of the controller-manager, the scheduler, CoreDNS,
/// the object store and the agent is not running (the first four keep no
/// state of their own; the store keeps its data and key in `DIR/s3/`), and
/// makes sure the host network is in place. Returns the names restarted.
fn restart_missing(
    s: &Starter,
    state: &TestbedState,
    record: &Record,
) -> Result<Vec<&'static str>, ControlPlaneError> {
    let bins = Binaries::in_cache();
    hostnet::setup(&state.netns_prefix, &state.host_ip)?;
    let outside = hostnet::Outside::of(state);
    if !outside.exists() {
        outside.setup()?;
    }
    let mut restarted = Vec::new();
    for name in [CONTROLLER_MANAGER, SCHEDULER, COREDNS, OBJECT_STORE, AGENT] {
        if s.sup.liveness(name).is_alive() {
            continue;
        }
        let (program, args) = match name {
            CONTROLLER_MANAGER => (
                bins.kube(name),
                components::controller_manager_args(&s.layout, &record.ports),
            ),
            SCHEDULER => (
                bins.kube(name),
                components::scheduler_args(&s.layout, &record.ports),
            ),
            COREDNS => (bins.coredns.clone(), write_corefile(&s.layout, state)?),
            OBJECT_STORE => (bins.weed.clone(), object_store_args(&s.layout, state)?),
            _ => (current_exe()?, components::agent_args(&s.layout)),
        };
        let env: &[(&str, &str)] = if name == OBJECT_STORE {
            &objectstore::ENV
        } else {
            &[]
        };
        s.sup.spawn_with_env(name, &program, &args, env)?;
        restarted.push(name);
    }
    Ok(restarted)
}

fn current_exe() -> Result<PathBuf, ControlPlaneError> {
    std::env::current_exe().map_err(|source| {
        ControlPlaneError::Process(ProcessError::Spawn {
            name: AGENT.into(),
            program: PathBuf::from("testbed"),
            source,
        })
    })
}

/// Brings the testbed at `dir` up (or finds it up) and returns its kubeconfig.
///
/// When etcd and the apiserver of an earlier `up` still run, the cluster is
/// kept: only a missing controller-manager, scheduler or agent is started
/// again. Otherwise whatever is left is cleaned up and a fresh cluster starts.
pub async fn up(dir: &Path, opts: &UpOptions) -> Result<PathBuf, ControlPlaneError> {
    let dir = absolute_dir(dir, true)?;
    let layout = Layout::new(&dir);
    let start = Instant::now();
    let starter = Starter {
        sup: Supervisor::new(&dir),
        layout: layout.clone(),
        start,
        deadline: start + opts.timeout,
        timeout: opts.timeout,
    };

    if let Some((state, record)) = running_core(&dir).await {
        let wanted = opts.topology.nodes(state.id)?;
        if wanted != state.nodes {
            eprintln!(
                "testbed in {} is already up with {} nodes; its topology is kept (run `down` first to change it)",
                dir.display(),
                state.nodes.len()
            );
        }
        let restarted = restart_missing(&starter, &state, &record)?;
        if !restarted.is_empty() {
            progress(start, &format!("restarted {}", restarted.join(", ")));
        }
        wait_for_cluster(&starter, &state).await?;
        progress(
            start,
            if restarted.is_empty() {
                "already up"
            } else {
                "repaired"
            },
        );
        return Ok(layout.kubeconfig);
    }

    // Whatever a previous run left half-started goes first.
    let leftovers = tokio::task::block_in_place(|| down(&dir));
    if leftovers.stopped_anything() {
        progress(start, "cleaned up what a previous run left");
    }

    let result = start_all(&starter, opts).await;
    if result.is_err() && !opts.keep_on_failure {
        tokio::task::block_in_place(|| down(&dir));
    }
    result.map(|()| layout.kubeconfig)
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn start_all(s: &Starter, opts: &UpOptions) -> Result<(), ControlPlaneError> {
    let dir = s.layout.dir.clone();
    let bins = Binaries::in_cache();
    bins.ensure()?;

    let registry = Registry::at(registry_dir());
    let id = registry.claim(&dir, &hostnet::network_names())?;
    let nodes = opts.topology.nodes(id)?;

    // A fresh cluster every time: old etcd data would bring back old pods.
    let _ = std::fs::remove_dir_all(&s.layout.etcd_data);
    let _ = std::fs::remove_dir_all(objectstore::store_dir(&dir));
    let _ = std::fs::remove_file(dir.join("agent.sock"));
    // Each start-up gets fresh component logs (others' logs, e.g. the
    // operator's, stay).
    for name in COMPONENTS {
        let _ = std::fs::remove_file(s.sup.log_path(name));
    }
    let ports = free_ports()?;
    let prefix = netns_prefix(id);
    let host = host_ip(id);

    let pki = certs::generate(&certs::apiserver_sans(
        &crate::topology::first_service_ip(id),
        &host,
    ))?;
    certs::write(&pki, &s.layout.pki)?;
    let server = components::apiserver_url(&ports, &host);
    let kc = kubeconfig::render(&server, &pki.ca_cert, &pki.admin_cert, &pki.admin_key);
    std::fs::write(&s.layout.kubeconfig, kc).map_err(|source| ControlPlaneError::Write {
        path: s.layout.kubeconfig.clone(),
        source,
    })?;

    let state = TestbedState {
        dir: dir.clone(),
        id,
        netns_prefix: prefix.clone(),
        host_ip: host.clone(),
        apiserver_url: server,
        kubeconfig: s.layout.kubeconfig.clone(),
        kube_bin_dir: bins.kube_bin_dir.clone(),
        valkey_servers: bins.valkey_servers.clone(),
        valkey_cli: bins.valkey_cli.clone(),
        agent_socket: dir.join("agent.sock"),
        nodes,
    };
    state.save()?;
    Record {
        ports,
        kube_version: KUBE_VERSION.into(),
        etcd_version: ETCD_VERSION.into(),
    }
    .save(&dir)?;
    progress(
        s.start,
        &format!(
            "testbed {id}: {} nodes, pods in 10.{}.0.0/16, ports {}",
            state.nodes.len(),
            100 + u32::from(id),
            serde_json::to_string(&ports).unwrap_or_default()
        ),
    );

    hostnet::setup(&prefix, &host)?;
    // The store needs only the host address and starts slowest (its gateway
    // waits for its filer): start it first, it comes up beside the rest.
    s.sup.spawn_with_env(
        OBJECT_STORE,
        &bins.weed,
        &object_store_args(&s.layout, &state)?,
        &objectstore::ENV,
    )?;
    progress(s.start, "object store starting");
    hostnet::Outside::of(&state).setup()?;

    s.sup
        .spawn(ETCD, &bins.etcd, &components::etcd_args(&s.layout, &ports))?;
    while std::net::TcpStream::connect(("127.0.0.1", ports.etcd_client)).is_err() {
        s.check_alive(&[ETCD])?;
        s.tick("etcd to listen").await?;
    }
    progress(s.start, "etcd listening");

    s.sup.spawn(
        APISERVER,
        &bins.kube(APISERVER),
        &components::apiserver_args(&s.layout, &ports, &host, &crate::topology::service_cidr(id)),
    )?;
    let client = api::client(&s.layout.kubeconfig).await?;
    while !api::is_ready(&client).await {
        s.check_alive(&[ETCD, APISERVER])?;
        s.tick("kube-apiserver /readyz").await?;
    }
    progress(s.start, "kube-apiserver ready");

    // The rest only need the apiserver; start them together.
    s.sup.spawn(
        CONTROLLER_MANAGER,
        &bins.kube(CONTROLLER_MANAGER),
        &components::controller_manager_args(&s.layout, &ports),
    )?;
    s.sup.spawn(
        SCHEDULER,
        &bins.kube(SCHEDULER),
        &components::scheduler_args(&s.layout, &ports),
    )?;
    s.sup
        .spawn(AGENT, &current_exe()?, &components::agent_args(&s.layout))?;
    s.sup
        .spawn(COREDNS, &bins.coredns, &write_corefile(&s.layout, &state)?)?;
    api::apply_storage_class(&client).await?;
    coredns::apply_kube_dns(&client, &crate::topology::cluster_dns_ip(id), &host).await?;
    progress(
        s.start,
        "controller-manager, scheduler, agent and coredns started",
    );

    wait_for_cluster(s, &state).await?;
    progress(
        s.start,
        &format!(
            "{} nodes Ready, default ServiceAccount present, cluster DNS ready, bucket {} ready",
            state.nodes.len(),
            objectstore::BUCKET
        ),
    );
    Ok(())
}

/// Makes (or keeps) the store's credentials in `DIR/s3/` and returns `weed`'s
/// command line.
fn object_store_args(l: &Layout, state: &TestbedState) -> Result<Vec<String>, ControlPlaneError> {
    objectstore::ensure_credentials(&l.dir)?;
    let data = objectstore::data_dir(&l.dir);
    std::fs::create_dir_all(&data).map_err(|source| ControlPlaneError::Write {
        path: data.clone(),
        source,
    })?;
    Ok(objectstore::args(
        &l.dir,
        &state.host_ip,
        &objectstore::Ports::for_testbed(state.id),
    ))
}

/// Writes `DIR/coredns/Corefile` for this testbed and returns CoreDNS's
/// command line.
fn write_corefile(l: &Layout, state: &TestbedState) -> Result<Vec<String>, ControlPlaneError> {
    let dir = l.dir.join("coredns");
    let path = dir.join("Corefile");
    let text = coredns::corefile(
        &state.host_ip,
        &l.kubeconfig,
        crate::topology::CLUSTER_DOMAIN,
    );
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, text))
        .map_err(|source| ControlPlaneError::Write {
            path: path.clone(),
            source,
        })?;
    Ok(coredns::args(&path))
}

/// Waits until every node of `state` is Ready, the default ServiceAccount
/// exists, CoreDNS is ready and the object store has its bucket, watching
/// that no component dies meanwhile.
async fn wait_for_cluster(s: &Starter, state: &TestbedState) -> Result<(), ControlPlaneError> {
    let client = api::client(&s.layout.kubeconfig).await?;
    let creds = objectstore::ensure_credentials(&s.layout.dir)?;
    let mut reported = usize::MAX;
    let mut bucket: Result<(), String> = Err("not asked yet".into());
    loop {
        let ready = match api::nodes(&client).await {
            Ok(nodes) => state
                .nodes
                .iter()
                .filter(|n| nodes.get(&n.name).is_some_and(api::node_is_ready))
                .count(),
            Err(_) => 0,
        };
        if ready != reported && ready > 0 {
            progress(
                s.start,
                &format!("{ready}/{} nodes Ready", state.nodes.len()),
            );
            reported = ready;
        }
        if bucket.is_err() {
            // Blocking, but short: one local connection with timeouts.
            bucket = tokio::task::block_in_place(|| {
                objectstore::ensure_bucket(&state.host_ip, state.id, &creds)
            });
            if bucket.is_ok() {
                progress(
                    s.start,
                    &format!("object store ready, bucket {}", objectstore::BUCKET),
                );
            }
        }
        if ready == state.nodes.len()
            && bucket.is_ok()
            && api::default_service_account_exists(&client).await
            && coredns::is_ready(&state.host_ip)
        {
            return Ok(());
        }
        s.check_alive(&COMPONENTS)?;
        if Instant::now() >= s.deadline {
            let store = match &bucket {
                Ok(()) => "ready".to_string(),
                Err(e) => format!("not ready: {e}"),
            };
            return Err(s.timeout(format!(
                "{} nodes Ready ({ready} are), the default ServiceAccount, CoreDNS and the object store ready (store {store})",
                state.nodes.len()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What `down` did.
#[derive(Debug, Default)]
pub struct DownReport {
    pub stopped: Vec<String>,
    pub swept: Vec<i32>,
    pub net: hostnet::Teardown,
    pub released: Option<u8>,
}

impl DownReport {
    pub fn stopped_anything(&self) -> bool {
        !self.stopped.is_empty()
            || !self.swept.is_empty()
            || !self.net.killed.is_empty()
            || !self.net.namespaces.is_empty()
            || !self.net.links.is_empty()
            || !self.net.tables.is_empty()
    }

    /// One line per kind of thing removed.
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.stopped.is_empty() {
            out.push(format!("stopped {}", self.stopped.join(", ")));
        }
        if !self.swept.is_empty() || !self.net.killed.is_empty() {
            out.push(format!(
                "killed {} leftover processes",
                self.swept.len() + self.net.killed.len()
            ));
        }
        if !self.net.namespaces.is_empty() {
            out.push(format!(
                "deleted {} network namespaces",
                self.net.namespaces.len()
            ));
        }
        if !self.net.links.is_empty() {
            out.push(format!("deleted {} host interfaces", self.net.links.len()));
        }
        if !self.net.tables.is_empty() {
            out.push(format!(
                "deleted nftables table(s) {}",
                self.net.tables.join(", ")
            ));
        }
        if let Some(id) = self.released {
            out.push(format!("released testbed id {id}"));
        }
        out
    }
}

/// Stops everything of the testbed at `dir` and removes its network objects.
/// Harmless when nothing runs.
pub fn down(dir: &Path) -> DownReport {
    let mut report = DownReport::default();
    let Ok(dir) = absolute_dir(dir, false) else {
        return report;
    };
    let sup = Supervisor::new(&dir);
    let registry = Registry::at(registry_dir());
    // A stale state file may name an id that has since been handed to another
    // testbed: its network objects are not ours to remove.
    let id = TestbedState::load(&dir)
        .ok()
        .map(|s| s.id)
        .or_else(|| registry.id_of(&dir))
        .filter(|id| !registry.held_by_other(*id, &dir));

    // Others' processes recorded here first (the demo's operator), then the
    // agent, so it can stop its pods, then the control plane top-down.
    let others: Vec<String> = sup
        .recorded()
        .into_iter()
        .filter(|n| !COMPONENTS.contains(&n.as_str()))
        .collect();
    for name in &others {
        if sup.stop(name, Duration::from_secs(10)) {
            report.stopped.push(name.clone());
        }
    }
    for (name, grace) in [
        (AGENT, 60),
        // Its data goes below; a graceful stop (about 2 s of draining) buys
        // nothing.
        (OBJECT_STORE, 0),
        (COREDNS, 10),
        (SCHEDULER, 10),
        (CONTROLLER_MANAGER, 10),
        (APISERVER, 10),
        (ETCD, 10),
    ] {
        if sup.stop(name, Duration::from_secs(grace)) {
            report.stopped.push(name.to_string());
        }
    }
    // Anything else still pointing into the directory (a pod the agent could not
    // stop, a component whose pid file was lost).
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "testbed".into());
    let programs = [
        ETCD,
        APISERVER,
        CONTROLLER_MANAGER,
        SCHEDULER,
        COREDNS,
        "weed",
        "testbed",
        me.as_str(),
        "valkey-server",
    ];
    for pid in process::processes_mentioning(&dir, &programs) {
        process::kill_now(pid);
        process::wait_gone(pid, Duration::from_secs(5));
        report.swept.push(pid);
    }
    if let Some(id) = id {
        report.net = hostnet::teardown(&netns_prefix(id), &nft_table(id));
        for sock in objectstore::tmp_sockets(&objectstore::Ports::for_testbed(id)) {
            let _ = std::fs::remove_file(sock);
        }
    }
    if registry.id_of(&dir).is_some() {
        report.released = id;
        registry.release(&dir);
    }
    let _ = std::fs::remove_dir_all(dir.join("etcd"));
    let _ = std::fs::remove_dir_all(objectstore::store_dir(&dir));
    let _ = std::fs::remove_file(dir.join("agent.sock"));
    report
}

/// A component's line in `status`.
#[derive(Debug, Clone)]
pub struct ComponentStatus {
    pub name: String,
    pub liveness: Liveness,
}

/// The components of the testbed at `dir` (and other recorded processes).
pub fn component_status(dir: &Path) -> Vec<ComponentStatus> {
    let sup = Supervisor::new(dir);
    let mut names: Vec<String> = COMPONENTS.iter().map(|c| c.to_string()).collect();
    names.extend(
        sup.recorded()
            .into_iter()
            .filter(|n| !COMPONENTS.contains(&n.as_str())),
    );
    names
        .into_iter()
        .map(|name| ComponentStatus {
            liveness: sup.liveness(&name),
            name,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let p = free_ports().unwrap();
        let mut all = vec![
            p.etcd_client,
            p.etcd_peer,
            p.apiserver,
            p.controller_manager,
            p.scheduler,
        ];
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 5);
    }

    #[test]
    fn down_on_a_directory_that_was_never_up_does_nothing() {
        let dir = std::env::temp_dir().join(format!("testbed-never-up-{}", std::process::id()));
        let report = down(&dir);
        assert!(!report.stopped_anything());
        assert!(report.summary().is_empty());
    }

    #[test]
    fn the_record_round_trips() {
        let dir = std::env::temp_dir().join(format!("testbed-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Record {
            ports: free_ports().unwrap(),
            kube_version: KUBE_VERSION.into(),
            etcd_version: ETCD_VERSION.into(),
        };
        r.save(&dir).unwrap();
        assert_eq!(Record::load(&dir), Some(r));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
