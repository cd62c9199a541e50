//! `e2e-bench`: the figures of docs/benchmarks.md that need the testbed.
//! A benchmark, not a test: it prints what it measured and fails only when a
//! step cannot be carried out at all.
//!
//! - warm `testbed up` to 9 Ready nodes;
//! - pod bound -> Ready (a plain Valkey pod);
//! - operator: apply -> Ready for 3x2 (all slots assigned, every replica in sync);
//! - operator: API writes per resync of steady clusters (from its metrics);
//! - operator: resident memory while managing 10 clusters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anyhow::{Context, Result, bail};
use e2e::cluster::{Env, wait_until};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize()?;
    let dir = root.join(".testbed-bench");
    let testbed = root.join("target/release/testbed");
    let dir_s = dir.to_string_lossy().to_string();
    let _ = Command::new(&testbed)
        .args(["down", "--dir", &dir_s])
        .status();

    let started = Instant::now();
    let status = Command::new(&testbed)
        .args(["up", "--dir", &dir_s])
        .stdout(std::process::Stdio::null())
        .status()
        .context("testbed up")?;
    if !status.success() {
        bail!("testbed up failed (logs in {}/logs)", dir.display());
    }
    let up = started.elapsed();
    println!(
        "testbed up (warm, 3 zones x 3 nodes, to all Ready): {:.1} s",
        up.as_secs_f64()
    );

    let env = Env::for_testbed(&root, &dir);
    let result = measure(&env);
    let _ = Command::new(&testbed)
        .args(["down", "--dir", &dir_s])
        .status();
    result
}

fn measure(env: &Env) -> Result<()> {
    let ns = env.namespace("bench")?;
    let pod = "apiVersion: v1
kind: Pod
metadata: {name: bench-pod}
spec:
  containers:
  - name: valkey
    image: valkey/valkey:9.1
    command: [valkey-server, --port, '6379', --protected-mode, 'no']
    readinessProbe:
      tcpSocket: {port: 6379}
      periodSeconds: 1
";
    env.apply(&ns.name, pod)?;
    let mut bound_at = None;
    let mut ready_at = None;
    wait_until(Duration::from_secs(60), Duration::from_millis(20), || {
        let p = env.kubectl_json(&["get", "pod", "bench-pod", "-n", &ns.name])?;
        let now = Instant::now();
        if bound_at.is_none() && !p["spec"]["nodeName"].is_null() {
            bound_at = Some(now);
        }
        let ready = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready {
            ready_at = Some(now);
        }
        Ok(ready)
    })?;
    if let (Some(b), Some(r)) = (bound_at, ready_at) {
        println!(
            "pod bound -> Ready (valkey-server, tcp readiness probe, polled every 20 ms): {:.2} s",
            r.duration_since(b).as_secs_f64()
        );
    }
    env.kubectl(&["delete", "pod", "bench-pod", "-n", &ns.name, "--wait=false"])?;
    operator_figures(env, &ns.name)
}

const METRICS_ADDR: &str = "127.0.0.1:18181";

fn cluster_yaml(name: &str, shards: u32, replicas: u32) -> String {
    format!(
        "apiVersion: valkey.rs/v1alpha1
kind: ValkeyCluster
metadata: {{name: {name}}}
spec:
  shards: {shards}
  replicas: {replicas}
  resources:
    requests: {{cpu: 50m, memory: 32Mi}}
  replicaSpreadConstraints:
    - {{topologyKey: zone, maxReplicas: 1, mode: Required}}
"
    )
}

/// Sum of every sample of a metric family in Prometheus text.
fn metric_sum(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(family) && !l.starts_with('#'))
        .filter(|l| {
            let rest = &l[family.len()..];
            rest.starts_with('{') || rest.starts_with(' ')
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn metrics() -> Result<String> {
    let out = Command::new("curl")
        .args(["-sf", &format!("http://{METRICS_ADDR}/metrics")])
        .output()
        .context("curl /metrics")?;
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn operator_figures(env: &Env, ns: &str) -> Result<()> {
    env.install_crd()?;
    let operator = env.start_operator_with(
        "bench",
        &["--http-addr", METRICS_ADDR, "--resync-seconds", "10"],
    )?;
    let started = Instant::now();
    env.apply(ns, &cluster_yaml("bench", 3, 2))?;
    env.wait_condition(ns, "bench", "Ready", "True", Duration::from_secs(300))?;
    println!(
        "operator: apply -> Ready for 3x2 (16384 slots assigned, every replica in sync): {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Nine more clusters, so the operator manages ten.
    for i in 1..10 {
        env.apply(ns, &cluster_yaml(&format!("bench{i}"), 3, 0))?;
    }
    for i in 1..10 {
        env.wait_condition(
            ns,
            &format!("bench{i}"),
            "Ready",
            "True",
            Duration::from_secs(300),
        )?;
    }
    // Let the status writes of the bootstrap settle, then count writes over
    // several resyncs of steady clusters.
    std::thread::sleep(Duration::from_secs(15));
    let before = metrics()?;
    std::thread::sleep(Duration::from_secs(35));
    let after = metrics()?;
    let writes = metric_sum(&after, "valkey_operator_api_writes_total")
        - metric_sum(&before, "valkey_operator_api_writes_total");
    let reconciles = metric_sum(&after, "valkey_operator_reconciles_total")
        - metric_sum(&before, "valkey_operator_reconciles_total");
    println!(
        "operator: API writes per resync of a steady cluster: {:.2} ({} writes over {} reconciles of 10 steady clusters)",
        if reconciles > 0.0 {
            writes / reconciles
        } else {
            f64::NAN
        },
        writes,
        reconciles
    );
    if let Some(kib) = operator.pid().and_then(rss_kib) {
        println!(
            "operator: resident memory managing 10 clusters (33 members): {:.1} MB",
            kib as f64 / 1024.0
        );
    }
    Ok(())
}
