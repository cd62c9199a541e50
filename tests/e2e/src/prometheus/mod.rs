//! A real Prometheus for the suites, fed what the Helm chart's monitoring
//! objects say, the way the Prometheus Operator would feed it.
//!
//! - [`monitors`]: ServiceMonitors, PodMonitors and PrometheusRules (read back
//!   from the API server) -> scrape jobs and rules files;
//! - [`discovery`]: the targets Prometheus' Kubernetes discovery would find
//!   (roles `endpoints` and `pod`), written for its file-based discovery;
//! - [`expr`]: alert and dashboard expressions taken apart;
//! - [`write_config`] and [`refresh_discovery`] put them together, and
//!   [`Prometheus`] runs the binary on the host (loopback listener, a data
//!   folder of its own, killed on drop and by `testbed down` through its pid
//!   file) and asks its HTTP API.
//!
//! The binaries are Debian's build of Prometheus 2.42.0, unpacked by
//! `scripts/fetch-prometheus.sh` (`make setup`); see docs/guide/monitoring.md,
//! "Shown with a real Prometheus", for why that build and what it lacks.

pub mod discovery;
pub mod expr;
pub mod monitors;

use crate::cluster::{Env, tail_file};
use anyhow::{Context, Result, bail, ensure};
use monitors::{MonitorKind, ScrapeJob, alert_rules, rule_file, scrape_jobs};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The upstream release scripts/fetch-prometheus.sh unpacks.
pub const PROMETHEUS_VERSION: &str = "2.42.0";

fn cached_bin(env_var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env_var) {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("VALKEY_RS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/valkey-rs")
        });
    cache.join(format!("bin/prometheus-{PROMETHEUS_VERSION}/{name}"))
}

/// `PROMETHEUS_BIN`, else the cached binary.
pub fn prometheus_bin() -> PathBuf {
    cached_bin("PROMETHEUS_BIN", "prometheus")
}

/// `PROMTOOL_BIN`, else the cached binary.
pub fn promtool_bin() -> PathBuf {
    cached_bin("PROMTOOL_BIN", "promtool")
}

/// Runs `promtool ARGS` with `stdin`; its stdout and stderr, or an error with
/// both when it exits non-zero (problems found, or it could not run).
pub fn promtool(args: &[&str], stdin: &str) -> Result<String> {
    let bin = promtool_bin();
    ensure!(
        bin.exists(),
        "{} is missing: `make setup` (scripts/fetch-prometheus.sh) unpacks it",
        bin.display()
    );
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", bin.display()))?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "promtool {} ({}):\n{text}",
        args.join(" "),
        out.status
    );
    Ok(text)
}

/// A Prometheus configuration written from the monitoring objects in a
/// cluster.
#[derive(Debug, Clone)]
pub struct Generated {
    /// `prometheus.json` (JSON is YAML).
    pub config: PathBuf,
    /// The scrape jobs, each with its discovery file.
    pub jobs: Vec<(ScrapeJob, PathBuf)>,
    /// One rules file per PrometheusRule.
    pub rule_files: Vec<PathBuf>,
    /// Every alerting rule of the rules files, as (alert, expression).
    pub alerts: Vec<(String, String)>,
}

impl Generated {
    /// The scrape jobs' names.
    pub fn job_names(&self) -> Vec<String> {
        self.jobs
            .iter()
            .map(|(j, _)| j.name().to_string())
            .collect()
    }
}

/// Reads every ServiceMonitor, PodMonitor and PrometheusRule carrying the
/// label selector `selector` (all namespaces) from the API server and writes
/// into `dir` the Prometheus configuration the Prometheus Operator would
/// make of them (their scrape jobs, their rules files; rules evaluated every
/// second, so an alert's state shows within a second or two), with each
/// job's targets in a discovery file of its own, written now.
pub fn write_config(env: &Env, selector: &str, dir: &Path) -> Result<Generated> {
    let list = |resource: &str| -> Result<Vec<Value>> {
        let v = env.kubectl_json(&["get", resource, "--all-namespaces", "-l", selector])?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    };
    let sd_dir = dir.join("sd");
    let _ = std::fs::remove_dir_all(&sd_dir);
    std::fs::create_dir_all(&sd_dir)?;
    let mut jobs = Vec::new();
    for (kind, resource) in [
        (
            MonitorKind::Service,
            "servicemonitors.monitoring.coreos.com",
        ),
        (MonitorKind::Pod, "podmonitors.monitoring.coreos.com"),
    ] {
        for m in list(resource)? {
            for job in scrape_jobs(kind, &m)? {
                let file = sd_dir.join(format!("{}.json", jobs.len()));
                jobs.push((job, file));
            }
        }
    }
    let mut rule_files = Vec::new();
    let mut alerts = Vec::new();
    for r in list("prometheusrules.monitoring.coreos.com")? {
        let file = rule_file(&r)?;
        alerts.extend(alert_rules(&file));
        let name = format!(
            "rules-{}-{}.json",
            r["metadata"]["namespace"].as_str().unwrap_or_default(),
            r["metadata"]["name"].as_str().unwrap_or_default()
        );
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(&file)?)?;
        rule_files.push(path);
    }
    let generated = Generated {
        config: dir.join("prometheus.json"),
        jobs,
        rule_files,
        alerts,
    };
    refresh_discovery(env, &generated)?;
    let config = json!({
        "global": {
            // For jobs whose monitor sets no interval; the chart's set theirs.
            "scrape_interval": "2s",
            "scrape_timeout": "1s",
            "evaluation_interval": "1s",
        },
        "rule_files": generated.rule_files,
        "scrape_configs": generated
            .jobs
            .iter()
            .map(|(job, file)| job.with_file_sd(file))
            .collect::<Vec<_>>(),
    });
    std::fs::write(&generated.config, serde_json::to_string_pretty(&config)?)?;
    Ok(generated)
}

/// Lists each job's targets from the API server again and rewrites its
/// discovery file (atomically: Prometheus watches the folder), as
/// Kubernetes discovery would follow the objects. Returns the number of
/// targets before relabeling.
pub fn refresh_discovery(env: &Env, generated: &Generated) -> Result<usize> {
    let mut total = 0;
    for (job, file) in &generated.jobs {
        let groups = discovery::discover(env, job.role, job.namespaces.as_deref())?;
        total += groups.len();
        let tmp = file.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&groups)?)?;
        std::fs::rename(&tmp, file)?;
    }
    Ok(total)
}

// ---------------------------------------------------------------------------
// The process and its API.

/// GET `path` (with its query string) from `host:port` over HTTP/1.0, with
/// extra header lines; the status code and the body.
pub fn http_get(authority: &str, path: &str, headers: &str) -> Result<(u16, String)> {
    let timeout = Duration::from_secs(10);
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority}"))?
        .next()
        .with_context(|| format!("{authority} has no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {authority}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // HTTP/1.0: the answer ends when the server closes (never chunked).
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {authority}\r\n{headers}\r\n"
    )?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .with_context(|| format!("reading {authority}{path}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .with_context(|| format!("{authority}{path}: no HTTP header in {answer:?}"))?;
    let code = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{authority}{path}: no status in {head:?}"))?;
    Ok((code, body.to_string()))
}

/// `s` percent-encoded for a query string.
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Prometheus on the host, killed (and its data removed) on drop.
pub struct Prometheus {
    child: Option<Child>,
    /// `127.0.0.1:<port>`.
    pub authority: String,
    pub dir: PathBuf,
    log: PathBuf,
    pid_file: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus with `config` (a file in `dir`), its data in
    /// `dir/data`, its log in `dir/prometheus.log`, listening on a free
    /// loopback port; its pid goes to the testbed's `pids/` so `testbed
    /// down` stops it too. Waits until it is ready.
    pub fn start(env: &Env, dir: &Path, config: &Path) -> Result<Prometheus> {
        let bin = prometheus_bin();
        ensure!(
            bin.exists(),
            "{} is missing: `make setup` (scripts/fetch-prometheus.sh) unpacks it",
            bin.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let authority = format!("127.0.0.1:{port}");
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={authority}"))
            .arg("--storage.tsdb.retention.time=1h")
            .arg("--log.level=info")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pids = env.testbed_dir.join("pids");
        std::fs::create_dir_all(&pids)?;
        let pid_file = pids.join(format!("prometheus-e2e-{}.pid", std::process::id()));
        std::fs::write(&pid_file, child.id().to_string())?;
        let mut p = Prometheus {
            child: Some(child),
            authority,
            dir: dir.to_path_buf(),
            log,
            pid_file,
        };
        crate::cluster::wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
            if let Some(Ok(Some(status))) = p.child.as_mut().map(Child::try_wait) {
                bail!("prometheus exited ({status}):\n{}", p.log_tail(30));
            }
            Ok(matches!(
                http_get(&p.authority, "/-/ready", ""),
                Ok((200, _))
            ))
        })
        .with_context(|| format!("prometheus did not become ready:\n{}", p.log_tail(30)))?;
        Ok(p)
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// GETs an API path; its `data` when `status` is `success`.
    pub fn api(&self, path: &str) -> Result<Value> {
        let (code, body) = http_get(&self.authority, path, "")?;
        let v: Value = serde_json::from_str(&body)
            .with_context(|| format!("GET {path}: {code}, not JSON: {body}"))?;
        ensure!(
            code == 200 && v["status"] == "success",
            "GET {path}: {code} {}",
            body.trim()
        );
        Ok(v["data"].clone())
    }

    /// An instant query: its result vector.
    pub fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let data = self
            .api(&format!("/api/v1/query?query={}", url_encode(expr)))
            .with_context(|| format!("query {expr}"))?;
        ensure!(
            data["resultType"] == "vector",
            "query {expr}: a {}, not a vector",
            data["resultType"]
        );
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The active targets.
    pub fn targets(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/targets?state=active")?["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The alerts pending or firing.
    pub fn alerts(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/alerts")?["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// Every loaded rule, as (group, rule) JSON.
    pub fn rules(&self) -> Result<Vec<Value>> {
        Ok(self.api("/api/v1/rules")?["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect())
    }

    /// Makes it read its configuration again (SIGHUP) and waits until the
    /// reload succeeded.
    pub fn reload(&self) -> Result<()> {
        let before = self.reloads()?;
        let pid = self.pid().context("prometheus is not running")?;
        let sent = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()?;
        ensure!(sent.success(), "kill -HUP {pid} failed");
        crate::cluster::wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            Ok(self.reloads()? > before)
        })
        .with_context(|| format!("prometheus did not reload:\n{}", self.log_tail(20)))?;
        // Read from its own /metrics: a query would need a scrape of itself.
        let (_, body) = http_get(&self.authority, "/metrics", "")?;
        let ok = body
            .lines()
            .find_map(|l| l.strip_prefix("prometheus_config_last_reload_successful "))
            .map(str::trim);
        ensure!(
            ok == Some("1"),
            "the reload failed ({ok:?}):\n{}",
            self.log_tail(20)
        );
        Ok(())
    }

    /// When the configuration was last (re)loaded, from its own metrics.
    fn reloads(&self) -> Result<f64> {
        let (_, body) = http_get(&self.authority, "/metrics", "")?;
        Ok(body
            .lines()
            .find_map(|l| {
                l.strip_prefix("prometheus_config_last_reload_success_timestamp_seconds ")
            })
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.pid_file);
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_are_percent_encoded() {
        assert_eq!(url_encode("up{a=\"b c\"}"), "up%7Ba%3D%22b%20c%22%7D");
    }
}
