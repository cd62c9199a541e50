//! `valkey-operator probe-metrics --url http://HOST:PORT/metrics`: asks an
//! operator's metrics endpoint once and checks that it answers 200 with the
//! expected metrics (`valkey_operator_build_info` unless `--expect` says
//! otherwise). Exit 0 when it does, 1 when not, with one line saying why.
//!
//! The chart's `helm test` pod runs it from the operator's own image, which
//! has no shell and no HTTP client. Plain HTTP/1.0 over a TCP connection is
//! all it needs: the server answers a 1.0 request without chunked encoding
//! and closes the connection after the body.

use clap::Args;
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::process::ExitCode;
use std::time::Duration;
use thiserror::Error;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The metrics endpoint, `http://HOST:PORT/PATH` (the chart's metrics
    /// Service: `http://valkey-operator-metrics.NAMESPACE.svc:8080/metrics`).
    #[arg(long)]
    pub url: String,
    /// A metric that must have a sample (repeatable).
    #[arg(long, default_value = "valkey_operator_build_info")]
    pub expect: Vec<String>,
    /// Seconds to wait for the connection and for each read.
    #[arg(long, default_value_t = 10)]
    pub timeout_seconds: u64,
}

/// Why the probe failed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProbeError {
    #[error("{url}: not an http://HOST:PORT/PATH URL")]
    Url { url: String },
    #[error("{url}: resolving {host}: {reason}")]
    Resolve {
        url: String,
        host: String,
        reason: String,
    },
    #[error("{url}: connecting: {reason}")]
    Connect { url: String, reason: String },
    #[error("{url}: reading the answer: {reason}")]
    Read { url: String, reason: String },
    #[error("{url}: answered {status:?}, not 200")]
    Status { url: String, status: String },
    #[error("{url}: no sample of {missing} in {samples} samples")]
    Missing {
        url: String,
        missing: String,
        samples: usize,
    },
}

/// The parts of an `http://` URL the probe uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// Reads `http://HOST[:PORT][/PATH]` (port 80 and path `/` by default;
/// `[v6]` hosts in brackets).
pub fn parse_url(url: &str) -> Result<Url, ProbeError> {
    let bad = || ProbeError::Url {
        url: url.to_string(),
    };
    let rest = url.strip_prefix("http://").ok_or_else(bad)?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(bad)?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(bad()),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad())?,
        None => 80,
    };
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok(Url {
        host: host.to_string(),
        port,
        path: path.to_string(),
    })
}

/// One GET of `url`; the whole answer (status line, headers, body).
fn fetch(url: &str, u: &Url, timeout: Duration) -> Result<String, ProbeError> {
    let addrs: Vec<_> = (u.host.as_str(), u.port)
        .to_socket_addrs()
        .map_err(|e| ProbeError::Resolve {
            url: url.to_string(),
            host: u.host.clone(),
            reason: e.to_string(),
        })?
        .collect();
    let mut last = format!("{} has no address", u.host);
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or_else(|| ProbeError::Connect {
        url: url.to_string(),
        reason: last,
    })?;
    let read_err = |e: std::io::Error| ProbeError::Read {
        url: url.to_string(),
        reason: e.to_string(),
    };
    stream.set_read_timeout(Some(timeout)).map_err(read_err)?;
    stream.set_write_timeout(Some(timeout)).map_err(read_err)?;
    let host = if u.host.contains(':') {
        format!("[{}]", u.host)
    } else {
        u.host.clone()
    };
    write!(
        stream,
        "GET {} HTTP/1.0\r\nHost: {host}:{}\r\nAccept: text/plain\r\n\r\n",
        u.path, u.port
    )
    .map_err(read_err)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(read_err)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Checks an HTTP answer: status 200 and a sample of every `expect`ed
/// metric. Returns the number of samples.
pub fn check(url: &str, answer: &str, expect: &[String]) -> Result<usize, ProbeError> {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(ProbeError::Status {
            url: url.to_string(),
            status: status.to_string(),
        });
    }
    let samples: Vec<&str> = body
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for name in expect {
        let found = samples.iter().any(|l| {
            l.strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        });
        if !found {
            return Err(ProbeError::Missing {
                url: url.to_string(),
                missing: name.clone(),
                samples: samples.len(),
            });
        }
    }
    Ok(samples.len())
}

/// Fetches and checks `args.url` once.
pub fn probe(args: &ProbeArgs) -> Result<usize, ProbeError> {
    let u = parse_url(&args.url)?;
    let answer = fetch(
        &args.url,
        &u,
        Duration::from_secs(args.timeout_seconds.max(1)),
    )?;
    check(&args.url, &answer, &args.expect)
}

/// The command: one line on stdout when the endpoint answers as expected,
/// one on stderr when not.
pub fn main(args: &ProbeArgs) -> ExitCode {
    match probe(args) {
        Ok(samples) => {
            println!(
                "{}: 200, {samples} samples, with {}",
                args.url,
                args.expect.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{Health, bind};
    use crate::metrics::Metrics;
    use std::sync::Arc;

    #[test]
    fn urls_give_host_port_and_path() {
        assert_eq!(
            parse_url("http://valkey-operator-metrics.ops.svc:8080/metrics").unwrap(),
            Url {
                host: "valkey-operator-metrics.ops.svc".into(),
                port: 8080,
                path: "/metrics".into()
            }
        );
        assert_eq!(
            parse_url("http://10.0.0.1").unwrap(),
            Url {
                host: "10.0.0.1".into(),
                port: 80,
                path: "/".into()
            }
        );
        assert_eq!(parse_url("http://[fd00::1]:9/m").unwrap().host, "fd00::1");
        for bad in [
            "https://x:1/metrics",
            "x:8080",
            "http://:8080/",
            "http://x:port/",
            "http://x:0/",
            "http://[fd00::1/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn an_answer_passes_only_with_200_and_every_expected_sample() {
        let ok = "HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\n\
                  # TYPE valkey_operator_build_info gauge\n\
                  valkey_operator_build_info{version=\"0.1.0\"} 1\n\
                  valkey_operator_reconciles_total 3\n";
        let expect = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check("u", ok, &expect(&["valkey_operator_build_info"])),
            Ok(2)
        );
        // A name that only prefixes another is not a sample of it.
        assert!(matches!(
            check("u", ok, &expect(&["valkey_operator_build"])),
            Err(ProbeError::Missing { .. })
        ));
        // Named in a comment only: missing.
        assert!(matches!(
            check(
                "u",
                "HTTP/1.1 200 OK\r\n\r\n# TYPE valkey_operator_build_info gauge\n",
                &expect(&["valkey_operator_build_info"])
            ),
            Err(ProbeError::Missing { samples: 0, .. })
        ));
        assert!(matches!(
            check(
                "u",
                "HTTP/1.1 503 Service Unavailable\r\n\r\nvalkey_operator_build_info 1\n",
                &[]
            ),
            Err(ProbeError::Status { .. })
        ));
    }

    #[tokio::test]
    async fn the_probe_reads_the_operators_own_metrics_endpoint() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr, server) = bind(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Metrics::new()),
            Arc::new(Health::default()),
            async move {
                let _ = rx.await;
            },
        )
        .await
        .unwrap();
        let task = tokio::spawn(server);
        let args = |path: &str, expect: &str| ProbeArgs {
            url: format!("http://{addr}{path}"),
            expect: vec![expect.to_string()],
            timeout_seconds: 5,
        };
        let good = args("/metrics", "valkey_operator_build_info");
        let samples = tokio::task::spawn_blocking(move || probe(&good))
            .await
            .unwrap()
            .unwrap();
        assert!(samples > 0);
        let missing = args("/metrics", "valkey_operator_no_such_metric");
        assert!(matches!(
            tokio::task::spawn_blocking(move || probe(&missing))
                .await
                .unwrap(),
            Err(ProbeError::Missing { .. })
        ));
        let not_found = args("/nope", "valkey_operator_build_info");
        assert!(matches!(
            tokio::task::spawn_blocking(move || probe(&not_found))
                .await
                .unwrap(),
            Err(ProbeError::Status { .. })
        ));
        tx.send(()).unwrap();
        task.await.unwrap().unwrap();
    }
}
