//! Probes: the pure threshold state machine a kubelet keeps per probe, and the
//! three ways of asking a container (exec inside its namespaces, TCP connect,
//! HTTP GET to the pod address).

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

/// The timing and thresholds of a probe, with Kubernetes defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeParams {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeParams {
    pub fn of(p: &Probe) -> ProbeParams {
        let secs =
            |v: Option<i32>, d: i32, min: i32| Duration::from_secs(v.unwrap_or(d).max(min) as u64);
        ProbeParams {
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

/// Consecutive-result counting. `result` is None until a threshold is first
/// reached; what None means depends on the probe (not ready / alive / not
/// started), see [`ProbeTracker::passing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTracker {
    pub kind: ProbeKind,
    pub params: ProbeParams,
    pub result: Option<bool>,
    successes: u32,
    failures: u32,
}

impl ProbeTracker {
    pub fn new(kind: ProbeKind, params: ProbeParams) -> ProbeTracker {
        ProbeTracker {
            kind,
            params,
            result: None,
            successes: 0,
            failures: 0,
        }
    }

    /// Records one probe outcome; returns the new result when it flips.
    pub fn observe(&mut self, ok: bool) -> Option<bool> {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            // Liveness and startup need a single success (Kubernetes forces
            // successThreshold 1 for them).
            let needed = match self.kind {
                ProbeKind::Readiness => self.params.success_threshold,
                _ => 1,
            };
            if self.successes >= needed && self.result != Some(true) {
                self.result = Some(true);
                return Some(true);
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= self.params.failure_threshold && self.result != Some(false) {
                self.result = Some(false);
                return Some(false);
            }
        }
        None
    }

    /// Whether the probe currently lets the container be ready / live / started.
    pub fn passing(&self) -> bool {
        match self.kind {
            ProbeKind::Liveness => self.result != Some(false),
            ProbeKind::Readiness | ProbeKind::Startup => self.result == Some(true),
        }
    }
}

/// Everything needed to run a probe against one running container.
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    pub container: Container,
    pub pod_ip: Ipv4Addr,
    pub pid: u32,
    pub env: Vec<(String, String)>,
    pub nsenter: PathBuf,
    pub bins: super::spec::Binaries,
    /// The container runs in a loaded image's root: exec there, with the
    /// image's own programs.
    pub in_root: bool,
}

/// Resolves a probe port (number or container port name).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// Maps image paths of the Valkey tools in an exec argv to the real binaries.
pub fn exec_argv(command: &[String], bins: &super::spec::Binaries) -> Vec<String> {
    let mut argv = command.to_vec();
    if let Some(first) = argv.first_mut() {
        match first.rsplit('/').next().unwrap_or(first) {
            "valkey-cli" | "redis-cli" => *first = bins.valkey_cli.display().to_string(),
            "valkey-server" | "redis-server" => *first = bins.valkey_server.display().to_string(),
            _ => {}
        }
    }
    argv
}

/// Runs an exec handler (probe or preStop hook) inside the container's network
/// and mount namespaces, with the container's environment, in its working dir.
/// Returns whether it exited 0 within `timeout`.
pub async fn run_exec(target: &ProbeTarget, command: &[String], timeout: Duration) -> bool {
    let argv = if target.in_root {
        command.to_vec()
    } else {
        exec_argv(command, &target.bins)
    };
    if argv.is_empty() {
        return false;
    }
    let mut cmd = tokio::process::Command::new(&target.nsenter);
    cmd.arg(format!("--target={}", target.pid))
        .args(["--net", "--mount", "--uts"])
        .args(target.in_root.then_some("--root"))
        .args(["--wd", "--"])
        .args(&argv)
        .env_clear()
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "exec probe could not start nsenter");
            return false;
        }
    };
    let pid = child.id();
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            if !out.status.success() {
                tracing::debug!(
                    container = %target.container.name,
                    stderr = %String::from_utf8_lossy(&out.stderr).trim(),
                    "exec handler failed"
                );
            }
            out.status.success()
        }
        Ok(Err(_)) => false,
        Err(_) => {
            if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            false
        }
    }
}

/// Runs one probe once.
pub async fn probe_once(probe: &Probe, target: &ProbeTarget) -> bool {
    let params = ProbeParams::of(probe);
    if let Some(exec) = &probe.exec {
        return run_exec(
            target,
            exec.command.as_deref().unwrap_or_default(),
            params.timeout,
        )
        .await;
    }
    if let Some(tcp) = &probe.tcp_socket {
        let Some(port) = resolve_port(&tcp.port, &target.container) else {
            return false;
        };
        let host = tcp
            .host
            .clone()
            .unwrap_or_else(|| target.pod_ip.to_string());
        return matches!(
            tokio::time::timeout(
                params.timeout,
                tokio::net::TcpStream::connect((host.as_str(), port))
            )
            .await,
            Ok(Ok(_))
        );
    }
    if let Some(http) = &probe.http_get {
        let Some(port) = resolve_port(&http.port, &target.container) else {
            return false;
        };
        let host = http
            .host
            .clone()
            .unwrap_or_else(|| target.pod_ip.to_string());
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        return tokio::time::timeout(params.timeout, http_get(&host, port, &path))
            .await
            .unwrap_or(false);
    }
    // gRPC probes are not simulated: they pass.
    true
}

async fn http_get(host: &str, port: u16, path: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect((host, port)).await else {
        return false;
    };
    let req = format!(
        "GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.36\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = vec![0u8; 64];
    let Ok(n) = s.read(&mut buf).await else {
        return false;
    };
    http_status_ok(&String::from_utf8_lossy(&buf[..n]))
}

/// Whether an HTTP response's status line is 2xx or 3xx.
pub fn http_status_ok(head: &str) -> bool {
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .map(|c| (200..400).contains(&c))
        .unwrap_or(false)
}

/// The earliest a container's first probe runs after its start.
pub const FIRST_PROBE_AFTER: Duration = Duration::from_millis(200);

/// Probes forever at the probe's period (after its initial delay), handing each
/// outcome to `report`; stops when `report` returns false.
pub async fn probe_loop(probe: Probe, target: ProbeTarget, report: impl Fn(bool) -> bool + Send) {
    let params = ProbeParams::of(&probe);
    // A real kubelet first sees a new container at its next relist, so its
    // first probe never lands in the process's first milliseconds; neither
    // does ours, so a server that listens quickly is Ready at the first probe.
    tokio::time::sleep(params.initial_delay.max(FIRST_PROBE_AFTER)).await;
    loop {
        let started = tokio::time::Instant::now();
        let ok = probe_once(&probe, &target).await;
        if !report(ok) {
            return;
        }
        tokio::time::sleep_until(started + params.period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn params(success: u32, failure: u32) -> ProbeParams {
        ProbeParams {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn readiness_starts_unready_and_needs_success_threshold() {
        let mut t = ProbeTracker::new(ProbeKind::Readiness, params(2, 3));
        assert!(!t.passing());
        assert_eq!(t.observe(true), None);
        assert_eq!(t.observe(true), Some(true));
        assert!(t.passing());
        assert_eq!(t.observe(true), None);
    }

    #[test]
    fn readiness_flips_back_after_failure_threshold_and_recovers() {
        let mut t = ProbeTracker::new(ProbeKind::Readiness, params(1, 2));
        t.observe(true);
        assert_eq!(t.observe(false), None);
        assert!(t.passing(), "one failure below threshold keeps it ready");
        assert_eq!(t.observe(false), Some(false));
        assert!(!t.passing());
        assert_eq!(t.observe(true), Some(true));
    }

    #[test]
    fn liveness_is_passing_until_failure_threshold_consecutive_failures() {
        let mut t = ProbeTracker::new(ProbeKind::Liveness, params(1, 3));
        assert!(t.passing());
        t.observe(false);
        t.observe(false);
        t.observe(true);
        t.observe(false);
        assert_eq!(t.observe(false), None, "a success resets the count");
        assert_eq!(t.observe(false), Some(false));
        assert!(!t.passing());
    }

    #[test]
    fn startup_needs_one_success_whatever_the_threshold_says() {
        let mut t = ProbeTracker::new(ProbeKind::Startup, params(5, 3));
        assert!(!t.passing());
        assert_eq!(t.observe(true), Some(true));
    }

    #[test]
    fn defaults_follow_kubernetes() {
        let p = ProbeParams::of(&Probe::default());
        assert_eq!(
            p,
            ProbeParams {
                initial_delay: Duration::ZERO,
                period: Duration::from_secs(10),
                timeout: Duration::from_secs(1),
                success_threshold: 1,
                failure_threshold: 3,
            }
        );
    }

    #[test]
    fn named_ports_resolve_from_the_container() {
        let c = Container {
            name: "valkey".into(),
            ports: Some(vec![ContainerPort {
                name: Some("client".into()),
                container_port: 6379,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(
            resolve_port(&IntOrString::String("client".into()), &c),
            Some(6379)
        );
        assert_eq!(resolve_port(&IntOrString::Int(16379), &c), Some(16379));
        assert_eq!(resolve_port(&IntOrString::String("nope".into()), &c), None);
        assert_eq!(resolve_port(&IntOrString::Int(70000), &c), None);
    }

    #[test]
    fn exec_probes_find_the_real_cli() {
        let bins = super::super::spec::Binaries {
            dir: "/x".into(),
            valkey_server: "/x/valkey-server".into(),
            valkey_cli: "/usr/bin/redis-cli".into(),
        };
        let argv = exec_argv(&["/usr/local/bin/valkey-cli".into(), "ping".into()], &bins);
        assert_eq!(
            argv,
            vec!["/usr/bin/redis-cli".to_string(), "ping".to_string()]
        );
        let argv = exec_argv(&["sh".into(), "-c".into(), "valkey-cli ping".into()], &bins);
        assert_eq!(argv[0], "sh");
    }

    #[test]
    fn http_status_lines() {
        assert!(http_status_ok("HTTP/1.1 200 OK\r\n"));
        assert!(http_status_ok("HTTP/1.0 302 Found"));
        assert!(!http_status_ok("HTTP/1.1 500 Oops"));
        assert!(!http_status_ok(""));
    }
}
