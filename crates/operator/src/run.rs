//! `valkey-operator run`: connects (KUBECONFIG or in-cluster config), serves
//! `/metrics`, `/healthz` and `/readyz`, takes the leader Lease (unless
//! `--no-leader-election`), and runs the controller until SIGTERM or Ctrl-C,
//! then stops gracefully (running reconciles finish, the lease is released).

use crate::controller::{self, Settings};
use crate::http::{self, Health, Role};
use crate::leader::{self, LeaseConfig};
use crate::metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `valkey-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level, as a tracing filter: `debug`, or per module such as
    /// `info,operator=debug,kube_client=warn`. Falls back to RUST_LOG, then
    /// to `info` with the Kubernetes client crates at `warn`.
    #[arg(long, env = "RUST_LOG")]
    pub log_level: Option<String>,

    /// Take a Lease before acting, so only one replica of the operator runs
    /// the controller (the default).
    #[arg(
        long = "leader-election",
        overrides_with = "no_leader_election",
        default_value_t = true
    )]
    pub leader_election: bool,

    /// Run the controller without a Lease (one operator only, e.g. tests).
    #[arg(long = "no-leader-election")]
    pub no_leader_election: bool,

    /// Name of the leader Lease.
    #[arg(long, default_value = "valkey-operator")]
    pub lease_name: String,

    /// Namespace of the leader Lease (default: the operator's own namespace,
    /// from POD_NAMESPACE or the service account, else `default`).
    #[arg(long)]
    pub lease_namespace: Option<String>,

    /// Address of the HTTP server (/metrics, /healthz, /readyz); port 0
    /// picks a free port (logged).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub http_addr: SocketAddr,

    /// Watch only the ValkeyClusters of these namespaces (repeat the flag or
    /// separate with commas; default: every namespace). Everything
    /// namespaced, Secrets included, is then read in these namespaces only.
    #[arg(long, value_delimiter = ',')]
    pub namespace: Vec<String>,

    /// Clusters reconciled at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,

    /// Seconds between reconciles of a steady cluster.
    #[arg(long, default_value_t = 30)]
    pub resync_seconds: u64,

    /// Milliseconds between reconciles of a cluster that converges
    /// (bootstrap, a scale, a rolling restart, a failover, a CA rotation):
    /// each step follows the one before as soon as Valkey is done with it.
    #[arg(long, default_value_t = 1000)]
    pub converging_poll_ms: u64,

    /// Seconds between looks at a steady cluster's members (INFO replication
    /// over kept connections, no API request): a change Valkey made on its
    /// own (a failover, a lost link, a silent member) is reconciled at once
    /// instead of at the next resync. 0 turns it off.
    #[arg(long, default_value_t = 2)]
    pub pulse_seconds: u64,

    /// Image of the metrics sidecar of member pods (`spec.exporter`): the
    /// operator's own image (the Helm chart passes its image reference). A
    /// new one reaches each member at its next restart; it restarts none.
    #[arg(
        long,
        env = "VALKEY_EXPORTER_IMAGE",
        default_value = api::v1alpha1::defaults::EXPORTER_IMAGE
    )]
    pub exporter_image: String,

    /// Keep a NetworkPolicy over the member pods of every cluster whose
    /// `spec.networkPolicy.enabled` is unset (the Helm chart's
    /// `networkPolicy.members`). On by default: without it (and without TLS)
    /// the cluster bus (16379) has no authentication, and any pod that
    /// reaches it can CLUSTER MEET a member and claim its slots.
    /// `--member-network-policy=false` turns it off.
    #[arg(
        long,
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub member_network_policy: bool,

    /// Labels that select this operator's own pods (`key=value`, repeat or
    /// separate with commas), in its namespace (POD_NAMESPACE or the service
    /// account's): the members' NetworkPolicy admits them. The Helm chart
    /// passes its selector labels; unset (an operator outside the cluster),
    /// no rule names the operator.
    #[arg(long, value_delimiter = ',', value_parser = parse_label)]
    pub operator_pod_labels: Vec<(String, String)>,

    /// The images a ValkeyCluster may run (`spec.image`), as patterns where
    /// `*` stands for any text (separate with commas), e.g.
    /// `valkey/valkey:*,registry.example.com/valkey/*`. Unset: any image. A
    /// cluster whose image matches none is refused (condition and event,
    /// nothing changed) until its spec changes: the operator talks to the
    /// servers those images run, so a platform may want to allow only its own.
    #[arg(long, value_delimiter = ',')]
    pub allowed_images: Vec<String>,

    /// Let `spec.securityContext` and `spec.podSecurityContext` go beyond
    /// the restricted Pod Security Standard (root, privileged, added
    /// capabilities...). Off by default: a tenant's cluster cannot ask for
    /// more than restricted. The operator's own containers (the exporter)
    /// stay restricted whatever the overlay says.
    #[arg(long)]
    pub allow_privileged_security_context: bool,
}

/// `key=value` with a valid label key and value.
fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not key=value"))?;
    if !api::v1alpha1::validation::is_label_key(key) {
        return Err(format!("{key:?} is not a label key"));
    }
    if !api::v1alpha1::validation::is_label_value(value) {
        return Err(format!("{value:?} is not a label value"));
    }
    Ok((key.to_string(), value.to_string()))
}

/// Why the operator stopped with an error.
#[derive(Debug, Error)]
pub enum RunError {
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("connecting to Kubernetes (KUBECONFIG or in-cluster config): {0}")]
    Client(kube::Error),
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    #[error("lost the leader Lease; exiting so a standby takes over")]
    LostLease,
    #[error("--log-level (or RUST_LOG): not a log filter: {0}")]
    LogLevel(String),
}

/// The filter when neither `--log-level` nor RUST_LOG is given.
const DEFAULT_LOG_LEVEL: &str = "info,kube_runtime=warn,kube_client=warn,kube_lease_manager=warn";

pub(crate) fn init_tracing(format: LogFormat, level: Option<&str>) -> Result<(), RunError> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(level.unwrap_or(DEFAULT_LOG_LEVEL))
        .map_err(|e| RunError::LogLevel(e.to_string()))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // A second init (tests) fails harmlessly.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}

/// Runs the operator until it is told to stop.
pub fn run(args: &RunArgs) -> Result<(), RunError> {
    init_tracing(args.log_format, args.log_level.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    runtime.block_on(run_async(args.clone()))
}

/// Resolves on SIGTERM or Ctrl-C.
pub(crate) async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down");
}

fn own_namespace() -> String {
    if let Ok(ns) = std::env::var("POD_NAMESPACE")
        && !ns.is_empty()
    {
        return ns;
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "valkey-operator".to_string());
    format!("{base}-{}", std::process::id())
}

/// The API client, every request of which `valkey_operator_api_requests_total`
/// counts (a layer on kube's tower stack).
async fn counted_client(metrics: Arc<Metrics>) -> Result<kube::Client, RunError> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| RunError::Client(kube::Error::InferConfig(e)))?;
    let count =
        tower::util::MapRequestLayer::new(move |request: ::http::Request<kube::client::Body>| {
            metrics.api_request(request.method(), request.uri().query());
            request
        });
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(RunError::Client)?
        .with_layer(&count)
        .build())
}

#[expect(
    clippy::too_many_lines,
    reason = "written before the lint was on; split it when it next changes"
)]
async fn run_async(args: RunArgs) -> Result<(), RunError> {
    let metrics = Arc::new(Metrics::new());
    let client = counted_client(metrics.clone()).await?;
    metrics.count_errors_from_zero(&crate::controller::Error::CATEGORIES);
    let health = Arc::new(Health::default());

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        terminated().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    };

    // A busy port must not keep the controller from running (several
    // operators on one test machine); the probes of a Deployment notice.
    let http_task = match http::bind(
        args.http_addr,
        metrics.clone(),
        health.clone(),
        stopped(stop_rx.clone()),
    )
    .await
    {
        Ok((addr, server)) => {
            tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            Some(tokio::spawn(server))
        }
        Err(error) => {
            tracing::error!(%error, "no HTTP server: /metrics, /healthz and /readyz are unavailable");
            None
        }
    };

    let settings = Settings {
        slow_requeue: Duration::from_secs(args.resync_seconds.max(1)),
        fast_requeue: Duration::from_millis(args.converging_poll_ms.clamp(50, 60_000)),
        concurrency: args.concurrency.max(1),
        namespaces: args
            .namespace
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect(),
        instance: Some(identity()),
        pulse: (args.pulse_seconds > 0).then(|| Duration::from_secs(args.pulse_seconds)),
        exporter_image: args.exporter_image.clone(),
        member_network_policy: args.member_network_policy,
        allowed_images: args.allowed_images.clone(),
        validation: api::v1alpha1::ValidationSettings {
            allow_privileged_security_context: args.allow_privileged_security_context,
        },
        operator_pods: (!args.operator_pod_labels.is_empty()).then(|| {
            api::v1alpha1::OperatorPods {
                namespace: own_namespace(),
                labels: args.operator_pod_labels.iter().cloned().collect(),
            }
        }),
        ..Settings::default()
    };

    let elect = args.leader_election && !args.no_leader_election;
    health.set_role(if elect { Role::Standby } else { Role::Single });
    let mut leadership = None;
    if elect {
        let cfg = LeaseConfig {
            name: args.lease_name.clone(),
            namespace: args.lease_namespace.clone().unwrap_or_else(own_namespace),
            identity: identity(),
        };
        // A standby is ready: it serves and waits.
        health.set_ready(true);
        let lease_metrics = metrics.clone();
        let mut elector = leader::Elector::start(cfg, move || async move {
            counted_client(lease_metrics)
                .await
                .map_err(|e| e.to_string())
        })
        .map_err(RunError::Runtime)?;
        tokio::select! {
            held = elector.acquired() => {
                if let Err(e) = held {
                    elector.release().await;
                    return Err(e.into());
                }
                leadership = Some(elector);
            }
            _ = stopped(stop_rx.clone()) => {
                elector.release().await;
                if let Some(t) = http_task {
                    let _ = t.await;
                }
                return Ok(());
            }
        }
        health.set_ready(false);
        health.set_role(Role::Leader);
    }

    let (lost_tx, lost_rx) = watch::channel(false);
    let shutdown = {
        let stop = stopped(stop_rx.clone());
        let lost = stopped(lost_rx.clone());
        async move {
            tokio::select! {
                _ = stop => {}
                _ = lost => {}
            }
        }
    };
    let controller = controller::run(client, settings, metrics, health, shutdown);
    let result = match leadership.as_mut() {
        Some(l) => {
            tokio::pin!(controller);
            tokio::select! {
                _ = &mut controller => Ok(()),
                _ = l.lost() => {
                    tracing::error!("lost the leader Lease");
                    let _ = lost_tx.send(true);
                    controller.await;
                    Err(RunError::LostLease)
                }
            }
        }
        None => {
            controller.await;
            Ok(())
        }
    };
    if let Some(l) = leadership {
        l.release().await;
    }
    drop(lost_tx);
    // The server stops with the signal; after a lost lease it is cut short.
    if let Some(t) = http_task {
        t.abort();
    }
    result
}
