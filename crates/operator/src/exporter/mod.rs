//! `valkey-operator exporter`: the per-member metrics sidecar (`spec.exporter`).
//!
//! Each member pod runs it beside Valkey from the operator's own image. On
//! every scrape of `/metrics` it asks the member in its own pod (`--valkey`,
//! 127.0.0.1:6379) for `INFO` and, in cluster mode, `CLUSTER INFO`, and
//! answers with the [`sample`] of the replies. It keeps one connection and
//! opens a new one when that fails (once within the same scrape, so a member
//! that restarted is not reported down for a stale connection). A member that
//! does not answer within `--timeout-seconds` gives `valkey_up 0`, never an
//! error status: the scrape itself worked.
//!
//! It never exits on its own: a crash-looping sidecar would make its member's
//! pod un-Ready, and pod readiness must stay Valkey's. A port it cannot bind
//! is retried every few seconds; a failed scrape is logged once, when the
//! error changes, and once more when the member answers again.
//!
//! Auth: the password is read from the environment variable `VALKEY_PASSWORD`
//! (the member's Secret, as the Valkey container gets it), never from the
//! command line, where `ps` would show it; it logs in as `--user` (`default`).
//! TLS: `--tls-ca-file` (the CA the member's certificate chains to), read
//! again at every new connection so a renewed CA is picked up.

pub mod sample;

use crate::run::{self, LogFormat};
use crate::{exposition, http};
use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::get;
use resources::statefulset::PASSWORD_ENV;
use sample::Sample;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use valkey::parse::{ClusterInfo, ParseError};
use valkey_client::client::{Admin, ClientError, ConnectOptions, ValkeyAdmin};

/// Arguments of `valkey-operator exporter`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExporterArgs {
    /// Where to serve `/metrics` (and `/healthz`).
    #[arg(long, default_value = "0.0.0.0:9121")]
    pub listen: SocketAddr,

    /// The Valkey member to ask: the one in this pod.
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub valkey: SocketAddr,

    /// Speak TLS to Valkey, trusting the CA certificates (PEM) in this file.
    /// Without it, plaintext.
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,

    /// The ACL user to log in as when a password is given.
    #[arg(long, default_value = "default")]
    pub user: String,

    /// Seconds to wait for the connection and for each reply; a member that
    /// takes longer is reported down (`valkey_up 0`) for that scrape.
    #[arg(long, default_value_t = 2)]
    pub timeout_seconds: u64,

    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log level, as a tracing filter (falls back to RUST_LOG, then `info`).
    #[arg(long, env = "RUST_LOG")]
    pub log_level: Option<String>,
}

/// Why one scrape got no sample.
#[derive(Debug, Error)]
pub enum ScrapeError {
    #[error("reading --tls-ca-file {path}: {source}")]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Valkey(#[from] ClientError),
    #[error("{command} on {addr}: {source}")]
    Reply {
        addr: SocketAddr,
        command: &'static str,
        source: ParseError,
    },
    #[error("{addr} did not answer within {timeout:?}")]
    Timeout { addr: SocketAddr, timeout: Duration },
}

/// Asks one member, over one kept connection.
struct Scraper {
    addr: SocketAddr,
    user: String,
    password: Option<String>,
    tls_ca_file: Option<PathBuf>,
    timeout: Duration,
    conn: tokio::sync::Mutex<Option<ValkeyAdmin>>,
    /// The last scrape's error, so each new one is logged once.
    last_error: std::sync::Mutex<Option<String>>,
}

impl Scraper {
    fn new(args: &ExporterArgs, password: Option<String>) -> Scraper {
        Scraper {
            addr: args.valkey,
            user: args.user.clone(),
            password,
            tls_ca_file: args.tls_ca_file.clone(),
            timeout: Duration::from_secs(args.timeout_seconds.max(1)),
            conn: tokio::sync::Mutex::new(None),
            last_error: std::sync::Mutex::new(None),
        }
    }

    async fn connect(&self) -> Result<ValkeyAdmin, ScrapeError> {
        let tls_ca_pem = match &self.tls_ca_file {
            Some(path) => {
                Some(
                    tokio::fs::read(path)
                        .await
                        .map_err(|source| ScrapeError::ReadCa {
                            path: path.clone(),
                            source,
                        })?,
                )
            }
            None => None,
        };
        let opts = ConnectOptions {
            username: self.password.as_ref().map(|_| self.user.clone()),
            password: self.password.clone(),
            // Half: a TLS handshake to a member still on plaintext waits it
            // out, and the plaintext try must fit in the scrape's time.
            connect_timeout: self.timeout / 2,
            command_timeout: self.timeout,
            tls_ca_pem,
            previous_password: None,
            tls_identity: None,
            // A member whose cluster is being switched to TLS serves
            // plaintext until the operator switches every member at once.
            plaintext: valkey_client::client::Plaintext::After,
            own_login: None,
        };
        Ok(ValkeyAdmin::connect(self.addr.ip(), self.addr.port(), &opts).await?)
    }

    /// INFO, then CLUSTER INFO in cluster mode, into a sample.
    async fn ask(&self, admin: &ValkeyAdmin) -> Result<Sample, ScrapeError> {
        let reply = |command, source| ScrapeError::Reply {
            addr: self.addr,
            command,
            source,
        };
        let info = admin.info("").await?;
        let cluster = if sample::cluster_enabled(&info) {
            let text = admin.cluster_info().await?;
            Some(ClusterInfo::from_info(&text).map_err(|e| reply("CLUSTER INFO", e))?)
        } else {
            None
        };
        Sample::from_replies(&info, cluster).map_err(|e| reply("INFO", e))
    }

    /// One scrape: the kept connection, or a new one when there is none or
    /// it fails (a member that restarted breaks it).
    async fn sample_once(&self) -> Result<Sample, ScrapeError> {
        let mut conn = self.conn.lock().await;
        if let Some(admin) = conn.as_ref() {
            match self.ask(admin).await {
                Err(ScrapeError::Valkey(_)) => *conn = None,
                done => return done,
            }
        }
        let admin = self.connect().await?;
        let result = self.ask(&admin).await;
        if !matches!(result, Err(ScrapeError::Valkey(_))) {
            *conn = Some(admin);
        }
        result
    }

    /// [`Self::sample_once`] within a bound (the client's timeouts bound each
    /// step; this bounds them together), logging what changed.
    async fn sample(&self) -> Option<Sample> {
        // Connect and two replies; a retry after a stale connection must
        // fit too (a broken connection fails fast, not by timing out). Within
        // the default scrape timeout (10 s) with the default 2 s.
        let bound = self.timeout.saturating_mul(3);
        let result = match tokio::time::timeout(bound, self.sample_once()).await {
            Ok(r) => r,
            Err(_) => {
                // The connection may be stuck mid-reply: start afresh.
                *self.conn.lock().await = None;
                Err(ScrapeError::Timeout {
                    addr: self.addr,
                    timeout: bound,
                })
            }
        };
        let mut last = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(s) => {
                if last.take().is_some() {
                    tracing::info!(valkey = %self.addr, "the member answers again");
                }
                Some(s)
            }
            Err(e) => {
                let message = e.to_string();
                if last.as_deref() != Some(message.as_str()) {
                    tracing::warn!(valkey = %self.addr, error = %message, "scrape failed: valkey_up 0");
                    *last = Some(message);
                }
                None
            }
        }
    }
}

async fn metrics(State(scraper): State<Arc<Scraper>>, headers: HeaderMap) -> impl IntoResponse {
    let sample = scraper.sample().await;
    exposition::respond(&headers, sample::encode(sample.as_ref()))
}

fn router(scraper: Arc<Scraper>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(scraper)
}

/// Serves until SIGTERM; a port that cannot be bound is tried again every
/// few seconds instead of exiting (see the module doc).
async fn serve(args: ExporterArgs, password: Option<String>) {
    let scraper = Arc::new(Scraper::new(&args, password));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        run::terminated().await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    };
    loop {
        match http::bind_router(
            args.listen,
            router(scraper.clone()),
            stopped(stop_rx.clone()),
        )
        .await
        {
            Ok((addr, server)) => {
                tracing::info!(%addr, valkey = %args.valkey, tls = args.tls_ca_file.is_some(),
                    auth = scraper.password.is_some(), "serving /metrics");
                if let Err(error) = server.await {
                    tracing::error!(%error, "the HTTP server stopped");
                }
                return;
            }
            Err(error) => {
                tracing::error!(%error, "cannot serve /metrics yet; trying again in 5 s");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                    _ = stopped(stop_rx.clone()) => return,
                }
            }
        }
    }
}

/// Runs the exporter until SIGTERM. Exit 1 only when it cannot start at all
/// (a log filter that does not parse, no async runtime).
pub fn main(args: &ExporterArgs) -> ExitCode {
    if let Err(e) = run::init_tracing(args.log_format, args.log_level.as_deref()) {
        eprintln!("{e}");
        return ExitCode::from(1);
    }
    let password = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty());
    // One thread: a scrape every few seconds is all the work there is.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "starting the async runtime");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(serve(args.clone(), password));
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    fn args(valkey: SocketAddr) -> ExporterArgs {
        ExporterArgs {
            listen: "127.0.0.1:0".parse().unwrap(),
            valkey,
            tls_ca_file: None,
            user: "default".into(),
            timeout_seconds: 1,
            log_format: LogFormat::Text,
            log_level: None,
        }
    }

    async fn serve_on_loopback(scraper: Scraper) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, server) = http::bind_router(
            "127.0.0.1:0".parse().unwrap(),
            router(Arc::new(scraper)),
            async move {
                let _ = rx.await;
            },
        )
        .await
        .unwrap();
        tokio::spawn(server);
        (addr, tx)
    }

    #[tokio::test]
    async fn a_member_that_refuses_connections_is_up_0_with_status_200() {
        // A port nothing listens on: bound, then released.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let (addr, stop) = serve_on_loopback(Scraper::new(&args(free), None)).await;
        let answer = get(addr, "/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\nvalkey_up 0\n"), "{answer}");
        // A client that asks for no format gets the Prometheus text format.
        assert!(answer.contains("text/plain; version=0.0.4"), "{answer}");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let _ = stop.send(());
    }

    #[tokio::test]
    async fn a_member_that_never_answers_is_up_0_within_the_timeout() {
        // Accepts the connection and says nothing.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                held.push(s);
            }
        });
        let (addr, stop) = serve_on_loopback(Scraper::new(&args(silent_addr), None)).await;
        let started = std::time::Instant::now();
        let answer = get(addr, "/metrics").await;
        assert!(answer.contains("\nvalkey_up 0\n"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(7),
            "{:?}",
            started.elapsed()
        );
        let _ = stop.send(());
    }

    #[tokio::test]
    async fn an_unreadable_ca_file_names_the_flag_and_gives_up_0() {
        let mut a = args("127.0.0.1:1".parse().unwrap());
        a.tls_ca_file = Some(PathBuf::from("/nonexistent/ca.crt"));
        let scraper = Scraper::new(&a, None);
        let err = scraper.sample_once().await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("reading --tls-ca-file /nonexistent/ca.crt: "),
            "{err}"
        );
        assert!(scraper.sample().await.is_none());
    }
}
