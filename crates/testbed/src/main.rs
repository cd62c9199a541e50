//! `testbed`: a real Kubernetes control plane whose simulated nodes run real
//! valkey-server pods.
//!
//! Verbs: `up`, `down`, `status`, and the faults `node fail|heal NAME`,
//! `zone fail|heal|partition ZONE`, `image load FILE`, `outside -- CMD`
//! (a client outside the cluster), `lb reassign|hold|release|status` (the
//! load-balancer addresses), `s3-info` (the object store). Every verb takes
//! `--dir DIR` (default `.testbed`). The hidden verb `agent` is the node agent
//! that `up` starts; the hidden `exec-root` enters a loaded image's root for
//! the agent's containers.

mod agent;
mod controlplane;
mod faults;
mod hostnet;
mod images;
mod registry;
mod state;
mod topology;
mod valkey_versions;

use anyhow::Context;

/// `println!` that ignores a closed stdout (`testbed status | head`) instead of
/// panicking on the broken pipe.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

use clap::{Args, Parser, Subcommand};
use controlplane::process::Liveness;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "testbed",
    version,
    about = "A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) with simulated nodes that run real valkey-server pods"
)]
struct Cli {
    /// The testbed's directory: state, kubeconfig, certificates, logs, pid files.
    #[arg(long, global = true, default_value = ".testbed", env = "TESTBED_DIR")]
    dir: PathBuf,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand, Debug)]
enum Verb {
    /// Start the control plane and the node agent; wait until every node is
    /// Ready; print `export KUBECONFIG=...` as the last line.
    Up(UpArgs),
    /// Stop everything `up` started and remove its network namespaces.
    Down,
    /// Components, nodes and pods per node.
    Status,
    /// Node faults.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Zone faults.
    Zone {
        #[command(subcommand)]
        action: ZoneAction,
    },
    /// Images the testbed runs for real.
    Image {
        #[command(subcommand)]
        action: ImageAction,
    },
    /// Run CMD in a network namespace outside the cluster: it reaches the
    /// nodes' addresses (nodePorts) and the load-balancer addresses, no pod
    /// and no ClusterIP. CMD's exit code is passed through.
    Outside {
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// The addresses of LoadBalancer Services (from the pool 10.<100+id>.254.0/24).
    Lb {
        #[command(subcommand)]
        action: LbAction,
    },
    /// The object store: one JSON object {"endpoint", "accessKey",
    /// "secretKey", "bucket"} on stdout.
    #[command(name = "s3-info")]
    S3Info,
    /// The node agent (started by `up`).
    #[command(hide = true)]
    Agent,
    /// Used by the agent inside a container's mount namespace: chroot into
    /// ROOT, enter WD, become UID:GID, exec ARGV.
    #[command(hide = true)]
    ExecRoot {
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        wd: String,
        #[arg(long)]
        uid: u32,
        #[arg(long)]
        gid: u32,
        #[arg(long, value_delimiter = ',')]
        groups: Vec<u32>,
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ImageAction {
    /// Import an OCI archive (a tar of an OCI image layout) into DIR/images:
    /// pods whose image is one of its references then run it for real.
    Load {
        file: PathBuf,
        /// Another reference for the image (besides those in the archive).
        #[arg(long)]
        name: Vec<String>,
    },
    /// The loaded images' references.
    List,
}

#[derive(Args, Debug)]
struct UpArgs {
    /// Regions.
    #[arg(long, default_value_t = 1)]
    regions: u32,
    /// Zones in each region (zone-<region><letter>).
    #[arg(long, default_value_t = 3)]
    zones: u32,
    /// Nodes in each zone.
    #[arg(long, default_value_t = 3)]
    nodes_per_zone: u32,
    /// Allocatable cpu of every node.
    #[arg(long, default_value = "4")]
    cpu: String,
    /// Allocatable memory of every node.
    #[arg(long, default_value = "8Gi")]
    memory: String,
    /// Allocatable pods of every node.
    #[arg(long, default_value_t = 32)]
    pods: u32,
    /// Seconds to wait for the whole start-up.
    #[arg(long, default_value_t = 180)]
    timeout: u64,
    /// Leave what started running when `up` fails, for debugging.
    #[arg(long)]
    keep_on_failure: bool,
}

#[derive(Subcommand, Debug)]
enum NodeAction {
    /// The node dies: its pods' processes are killed, its lease stops, its network is cut.
    Fail { name: String },
    /// The node comes back.
    Heal { name: String },
}

#[derive(Subcommand, Debug)]
enum LbAction {
    /// Give a LoadBalancer Service a new address from the pool (as when a
    /// cloud re-creates its balancer); prints `NS/NAME: OLD -> NEW`.
    Reassign {
        /// The Service's namespace.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// The Service's name.
        name: String,
    },
    /// Stop assigning addresses: LoadBalancer Services without one stay
    /// pending (those with one keep it) until `lb release`.
    Hold,
    /// Assign addresses again (ends `lb hold`).
    Release,
    /// Every LoadBalancer Service and its address (or `pending`), and whether
    /// assignment is held.
    Status,
}

#[derive(Subcommand, Debug)]
enum ZoneAction {
    /// Every node of the zone fails.
    Fail { zone: String },
    /// Every node of the zone comes back (also ends a partition).
    Heal { zone: String },
    /// The zone's pods keep running but can reach neither the other zones nor the
    /// control plane; its nodes go NotReady.
    Partition { zone: String },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("testbed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    // Before any thread exists: this process becomes the container.
    if let Verb::ExecRoot {
        root,
        wd,
        uid,
        gid,
        groups,
        argv,
    } = &cli.verb
    {
        return Err(agent::rootfs::exec_root(root, wd, *uid, *gid, groups, argv));
    }
    if let Verb::Outside { cmd } = &cli.verb {
        return Err(outside(&cli.dir, cmd));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let dir = cli.dir;
    match cli.verb {
        Verb::Up(a) => {
            let opts = controlplane::UpOptions {
                topology: topology::Topology {
                    regions: a.regions,
                    zones_per_region: a.zones,
                    nodes_per_zone: a.nodes_per_zone,
                    cpu: a.cpu,
                    memory: a.memory,
                    pods: a.pods,
                },
                timeout: Duration::from_secs(a.timeout),
                keep_on_failure: a.keep_on_failure,
            };
            let kubeconfig = rt.block_on(controlplane::up(&dir, &opts))?;
            say!("export KUBECONFIG={}", kubeconfig.display());
        }
        Verb::Down => {
            let report = controlplane::down(&dir);
            let lines = report.summary();
            if lines.is_empty() {
                say!("nothing was running in {}", dir.display());
            }
            for l in lines {
                say!("{l}");
            }
        }
        Verb::Status => return rt.block_on(status(&dir)),
        Verb::Node { action } => {
            let (op, target) = match action {
                NodeAction::Fail { name } => ("node-fail", name),
                NodeAction::Heal { name } => ("node-heal", name),
            };
            return rt.block_on(fault(&dir, op, Some(&target)));
        }
        Verb::Zone { action } => {
            let (op, target) = match action {
                ZoneAction::Fail { zone } => ("zone-fail", zone),
                ZoneAction::Heal { zone } => ("zone-heal", zone),
                ZoneAction::Partition { zone } => ("zone-partition", zone),
            };
            return rt.block_on(fault(&dir, op, Some(&target)));
        }
        Verb::S3Info => {
            let dir = controlplane::absolute_dir(&dir, false)?;
            let info = controlplane::objectstore::load_info(&dir)?;
            say!("{}", serde_json::to_string(&info)?);
        }
        Verb::Agent => {
            let dir = controlplane::absolute_dir(&dir, false)?;
            rt.block_on(agent::run(&dir))?;
        }
        Verb::Image { action } => {
            let dir = controlplane::absolute_dir(&dir, true)?;
            let store = images::Store::at(&dir);
            match action {
                ImageAction::Load { file, name } => {
                    let started = std::time::Instant::now();
                    let (id, refs) = store
                        .load(&file, &name)
                        .with_context(|| format!("loading {}", file.display()))?;
                    say!(
                        "loaded {} as {} in {:.1} s (image {})",
                        file.display(),
                        refs.join(", "),
                        started.elapsed().as_secs_f64(),
                        &id[..12.min(id.len())]
                    );
                }
                ImageAction::List => {
                    for (r, id) in store.index().refs {
                        say!("{r} {}", &id[..12.min(id.len())]);
                    }
                }
            }
        }
        Verb::Lb { action } => {
            let (op, target) = match action {
                LbAction::Reassign { namespace, name } => {
                    ("lb-reassign", Some(format!("{namespace}/{name}")))
                }
                LbAction::Hold => ("lb-hold", None),
                LbAction::Release => ("lb-release", None),
                LbAction::Status => ("lb-status", None),
            };
            return rt.block_on(fault(&dir, op, target.as_deref()));
        }
        Verb::ExecRoot { .. } | Verb::Outside { .. } => {}
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Replaces this process with `cmd` run in the testbed's outside namespace
/// (made again first if it is missing); returns only when that fails.
fn outside(dir: &Path, cmd: &[String]) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let run = || -> anyhow::Result<std::process::Command> {
        let dir = controlplane::absolute_dir(dir, false)?;
        let state = state::TestbedState::load(&dir)
            .with_context(|| format!("no testbed in {} (run `testbed up`)", dir.display()))?;
        // After `down` the id may belong to another testbed: its network is
        // not ours to make.
        let registry = registry::Registry::at(registry::registry_dir());
        anyhow::ensure!(
            registry.id_of(&dir) == Some(state.id),
            "the testbed in {} is not up (run `testbed up`)",
            dir.display()
        );
        let net = hostnet::Outside::of(&state);
        if !net.exists() {
            net.setup().context("making the outside network")?;
        }
        let mut command = std::process::Command::new("ip");
        command.args(["netns", "exec", &net.netns]).args(cmd);
        Ok(command)
    };
    match run() {
        Ok(mut command) => anyhow::Error::new(command.exec()).context(format!(
            "running `ip netns exec` for {:?}",
            cmd.first().map_or("", String::as_str)
        )),
        Err(e) => e,
    }
}

/// Sends one fault to the agent; exits non-zero when it refuses.
async fn fault(
    dir: &Path,
    op: &str,
    target: Option<&str>,
) -> anyhow::Result<std::process::ExitCode> {
    let dir = controlplane::absolute_dir(dir, false)?;
    let state = state::TestbedState::load(&dir)
        .with_context(|| format!("no testbed in {} (run `testbed up`)", dir.display()))?;
    let reply = faults::send(&state.agent_socket, &faults::Request::new(op, target)).await?;
    if reply.ok {
        say!("{}", reply.message);
        Ok(std::process::ExitCode::SUCCESS)
    } else {
        eprintln!("{}", reply.message);
        Ok(std::process::ExitCode::FAILURE)
    }
}

/// Prints components, nodes and pods per node. Exits non-zero when the testbed
/// is not (fully) up.
#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn status(dir: &Path) -> anyhow::Result<std::process::ExitCode> {
    use std::collections::BTreeMap;
    let dir = controlplane::absolute_dir(dir, false)?;
    let Ok(state) = state::TestbedState::load(&dir) else {
        say!("no testbed in {}", dir.display());
        return Ok(std::process::ExitCode::FAILURE);
    };
    let record = controlplane::Record::load(&dir);
    say!(
        "testbed {} in {}: apiserver {}, Kubernetes {}, pods in 10.{}.0.0/16",
        state.id,
        dir.display(),
        state.apiserver_url,
        record
            .as_ref()
            .map_or(controlplane::KUBE_VERSION, |r| r.kube_version.as_str()),
        100 + u32::from(state.id)
    );
    say!(
        "outside (`testbed outside`) {}, load-balancer pool {}",
        topology::outside_ip(state.id),
        topology::lb_pool_cidr(state.id)
    );
    if let Ok(info) = controlplane::objectstore::load_info(&dir) {
        say!(
            "object store: SeaweedFS {} at {}, bucket {} (credentials: testbed s3-info)",
            controlplane::objectstore::SEAWEEDFS_VERSION,
            info.endpoint,
            info.bucket
        );
    }
    say!("\nCOMPONENT                 PID      STATE");
    let mut all_alive = true;
    for c in controlplane::component_status(&dir) {
        let st = match c.liveness {
            Liveness::NotStarted => "not started",
            Liveness::Dead(_) => "dead",
            Liveness::Alive(_) => "running",
        };
        let pid = c.liveness.pid().map_or("-".to_string(), |p| p.to_string());
        all_alive &= c.liveness.is_alive() || !controlplane::COMPONENTS.contains(&c.name.as_str());
        say!("{:<25} {:<8} {st}", c.name, pid);
    }

    let client = match controlplane::api::client(&state.kubeconfig).await {
        Ok(c) if controlplane::api::is_ready(&c).await => c,
        _ => {
            say!("\napiserver not ready: no node or pod listing");
            return Ok(std::process::ExitCode::FAILURE);
        }
    };
    let nodes = controlplane::api::nodes(&client).await?;
    let pods = controlplane::api::pods(&client).await?;
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| "(unscheduled)".into());
        let st = p.status.as_ref();
        let phase = st.and_then(|s| s.phase.clone()).unwrap_or_default();
        let ip = st.and_then(|s| s.pod_ip.clone()).unwrap_or_default();
        let ready = st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let deleting = if p.metadata.deletion_timestamp.is_some() {
            " Terminating"
        } else {
            ""
        };
        by_node.entry(node).or_default().push(format!(
            "{}/{} {phase}{}{deleting} {ip}",
            p.metadata.namespace.as_deref().unwrap_or(""),
            p.metadata.name.as_deref().unwrap_or(""),
            if ready { " Ready" } else { "" },
        ));
    }
    say!("\nNODE                 READY    ZONE         REGION       PODS");
    for spec in &state.nodes {
        let node = nodes.get(&spec.name);
        let ready = match node {
            None => "absent",
            Some(n) if controlplane::api::node_is_ready(n) => "True",
            Some(_) => "False",
        };
        let taints = node
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.taints.as_ref())
            .map(|ts| {
                ts.iter()
                    .map(|t| format!("{}:{}", t.key, t.effect))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let count = by_node.get(&spec.name).map_or(0, Vec::len);
        say!(
            "{:<20} {:<8} {:<12} {:<12} {count}{}",
            spec.name,
            ready,
            spec.zone,
            spec.region,
            if taints.is_empty() {
                String::new()
            } else {
                format!("  taints {taints}")
            }
        );
    }
    let mut zones: Vec<&str> = state.nodes.iter().map(|n| n.zone.as_str()).collect();
    zones.dedup();
    let summary: Vec<String> = zones
        .iter()
        .map(|z| {
            let all: Vec<_> = state.nodes_in_zone(z).collect();
            let ready = all
                .iter()
                .filter(|n| {
                    nodes
                        .get(&n.name)
                        .is_some_and(controlplane::api::node_is_ready)
                })
                .count();
            format!("{z} {ready}/{} Ready", all.len())
        })
        .collect();
    say!("zones: {}", summary.join(", "));
    if !pods.is_empty() {
        say!("\nPODS");
        for (node, list) in &by_node {
            say!("{node}:");
            for p in list {
                say!("  {p}");
            }
        }
    }
    match faults::send(&state.agent_socket, &faults::Request::new("status", None)).await {
        Ok(r) if !r.message.is_empty() => {
            say!("\nAGENT");
            for line in r.message.lines() {
                say!("  {line}");
            }
        }
        Ok(_) => {}
        Err(e) => say!("\nagent: {e}"),
    }
    Ok(if all_alive {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
