//! The operator's HTTP endpoints: `/metrics` (OpenMetrics for Prometheus,
//! the Prometheus text format for other clients; see [`crate::exposition`]),
//! `/healthz` (the process serves requests) and `/readyz` (the controller's
//! caches are synced, or the process is a standby waiting for the lease). The
//! body of `/readyz` names the process's role (leader, standby, or running
//! without leader election), so a person can tell which replica acts.

use crate::exposition;
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use thiserror::Error;

/// What the process does, as `/readyz` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not yet known (before leader election starts).
    #[default]
    Starting,
    /// Waiting for the leader Lease; it does not act.
    Standby,
    /// Holds the leader Lease and runs the controller.
    Leader,
    /// Runs the controller without leader election.
    Single,
}

impl Role {
    fn from_u8(v: u8) -> Role {
        match v {
            1 => Role::Standby,
            2 => Role::Leader,
            3 => Role::Single,
            _ => Role::Starting,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            Role::Starting => 0,
            Role::Standby => 1,
            Role::Leader => 2,
            Role::Single => 3,
        }
    }

    /// How `/readyz` names it.
    pub fn describe(self) -> &'static str {
        match self {
            Role::Starting => "starting",
            Role::Standby => "standby, waiting for the leader Lease",
            Role::Leader => "leader",
            Role::Single => "no leader election",
        }
    }
}

/// Readiness shared between the controller and the HTTP server.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    role: AtomicU8,
}

impl Health {
    /// Records what the process does now.
    pub fn set_role(&self, role: Role) {
        self.role.store(role.as_u8(), Ordering::Relaxed);
    }

    /// What the process does now.
    pub fn role(&self) -> Role {
        Role::from_u8(self.role.load(Ordering::Relaxed))
    }

    /// The body of `/readyz`: `ready (ROLE)` or `not ready (ROLE)`.
    pub fn describe(&self) -> String {
        let state = if self.is_ready() {
            "ready"
        } else {
            "not ready"
        };
        format!("{state} ({})\n", self.role().describe())
    }

    /// Marks the process ready (caches synced, or standing by for the lease).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// Why the HTTP server could not run.
#[derive(Debug, Error)]
pub enum HttpError {
    #[error("binding the HTTP server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving HTTP: {0}")]
    Serve(std::io::Error),
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Binds `addr` (port 0 picks a free port) and returns the bound address and
/// the server future, which ends when `shutdown` resolves.
pub async fn bind(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<
    (
        SocketAddr,
        impl std::future::Future<Output = Result<(), HttpError>>,
    ),
    HttpError,
> {
    bind_router(addr, router(AppState { metrics, health }), shutdown).await
}

/// [`bind`] for any set of routes (the exporter serves its own).
pub async fn bind_router(
    addr: SocketAddr,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<
    (
        SocketAddr,
        impl std::future::Future<Output = Result<(), HttpError>>,
    ),
    HttpError,
> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HttpError::Bind { addr, source })?;
    let server = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(HttpError::Serve)
    };
    Ok((bound, server))
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    exposition::respond(&headers, state.metrics.encode())
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let code = if state.health.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, state.health.describe())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        get_with(addr, path, "").await
    }

    /// GET with extra header lines (each ending in CRLF).
    async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    /// Serves `metrics` and `health` on a free loopback port until the
    /// returned sender fires; returns the address and the server task.
    async fn serve(
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<(), HttpError>>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, server) = bind(
            "127.0.0.1:0".parse().unwrap(),
            metrics,
            health,
            async move {
                let _ = rx.await;
            },
        )
        .await
        .unwrap();
        (addr, tx, tokio::spawn(server))
    }

    #[tokio::test]
    async fn readyz_follows_the_health_flag_and_metrics_are_served() {
        let metrics = Arc::new(Metrics::new());
        metrics.reconciles.inc();
        let health = Arc::new(Health::default());
        let (addr, tx, task) = serve(metrics, health.clone()).await;
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        health.set_ready(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(
            get(addr, "/metrics")
                .await
                .contains("valkey_operator_reconciles_total 1")
        );
        tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_are_openmetrics_for_prometheus_and_the_text_format_for_others() {
        let metrics = Arc::new(Metrics::new());
        metrics.reconciles.inc();
        let (addr, tx, task) = serve(metrics, Arc::new(Health::default())).await;
        let prometheus = get_with(
            addr,
            "/metrics",
            "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
        )
        .await;
        assert!(
            prometheus.contains("content-type: application/openmetrics-text; version=1.0.0"),
            "{prometheus}"
        );
        assert!(prometheus.contains("# TYPE valkey_operator_reconciles counter\n"));
        assert!(prometheus.ends_with("# EOF\n"));
        let plain = get(addr, "/metrics").await;
        assert!(
            plain.contains("content-type: text/plain; version=0.0.4"),
            "{plain}"
        );
        assert!(plain.contains("# TYPE valkey_operator_reconciles_total counter\n"));
        assert!(plain.contains("valkey_operator_reconciles_total 1\n"));
        assert!(!plain.contains("# EOF"));
        tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn readyz_names_the_role_so_the_acting_replica_can_be_told_apart() {
        let health = Arc::new(Health::default());
        let (addr, tx, task) = serve(Arc::new(Metrics::new()), health.clone()).await;
        assert!(
            get(addr, "/readyz")
                .await
                .ends_with("not ready (starting)\n")
        );
        health.set_role(Role::Standby);
        health.set_ready(true);
        let standby = get(addr, "/readyz").await;
        assert!(standby.starts_with("HTTP/1.1 200"), "{standby}");
        assert!(
            standby.ends_with("ready (standby, waiting for the leader Lease)\n"),
            "{standby}"
        );
        // A new leader is not ready until its caches have synced.
        health.set_role(Role::Leader);
        health.set_ready(false);
        let syncing = get(addr, "/readyz").await;
        assert!(syncing.starts_with("HTTP/1.1 503"), "{syncing}");
        assert!(syncing.ends_with("not ready (leader)\n"), "{syncing}");
        health.set_ready(true);
        assert!(get(addr, "/readyz").await.ends_with("ready (leader)\n"));
        health.set_role(Role::Single);
        assert!(
            get(addr, "/readyz")
                .await
                .ends_with("ready (no leader election)\n")
        );
        tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }

    #[test]
    fn every_role_survives_the_round_trip_through_the_atomic() {
        for role in [Role::Starting, Role::Standby, Role::Leader, Role::Single] {
            assert_eq!(Role::from_u8(role.as_u8()), role);
        }
    }
}
