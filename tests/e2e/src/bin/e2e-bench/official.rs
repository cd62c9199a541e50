//! The official valkey-io/valkey-operator side by side (issue 26, goal 7),
//! when `OFFICIAL_OPERATOR` names its binary (built with `go build ./cmd/`
//! from its source; its CRDs are read from `OFFICIAL_OPERATOR_CRDS`, by
//! default `<binary's folder>/src/config/crd/bases`). Both operators run on
//! the host against the same testbed; for 3x1 and 3x2, runs alternate
//! between ours and theirs, each timed from `kubectl apply` to the Ready
//! condition True; then each operator's resident memory.

use anyhow::{Context, Result, bail};
use e2e::cluster::{Env, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Alternating runs per shape and operator.
const RUNS: usize = 3;

struct Official {
    child: Child,
}

impl Drop for Official {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn official_yaml(name: &str, shards: u32, replicas: u32) -> String {
    format!(
        "apiVersion: valkey.io/v1alpha1
kind: ValkeyCluster
metadata: {{name: {name}}}
spec:
  shards: {shards}
  replicas: {replicas}
  resources:
    requests: {{cpu: 50m, memory: 32Mi}}
"
    )
}

/// Seconds from apply of `yaml` to the Ready condition True of `kind`/`name`.
fn apply_to_ready(env: &Env, ns: &str, kind: &str, name: &str, yaml: &str) -> Result<f64> {
    let started = Instant::now();
    env.kubectl_stdin(&["apply", "-n", ns, "-f", "-"], yaml)?;
    let mut took = None;
    wait_until(Duration::from_secs(300), Duration::from_millis(100), || {
        let obj = env.kubectl_json(&["get", kind, name, "-n", ns])?;
        let ready = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready {
            took = Some(started.elapsed().as_secs_f64());
        }
        Ok(ready)
    })
    .with_context(|| format!("{kind} {ns}/{name} never Ready"))?;
    took.context("Ready")
}

fn start(env: &Env, binary: &Path) -> Result<Official> {
    let log = env.testbed_dir.join("logs/official-operator.log");
    let child = Command::new(binary)
        .args([
            "--metrics-bind-address=0",
            "--health-probe-bind-address=127.0.0.1:18381",
        ])
        .env("KUBECONFIG", &env.kubeconfig)
        .stdout(Stdio::from(std::fs::File::create(&log)?))
        .stderr(Stdio::from(std::fs::File::create(
            log.with_extension("err"),
        )?))
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    Ok(Official { child })
}

fn rss_mb(pid: u32) -> Option<f64> {
    super::rss_kib(pid).map(|k| k as f64 / 1024.0)
}

fn words(v: &[f64]) -> String {
    v.iter()
        .map(|t| format!("{t:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The side-by-side figures; `ours_pid` is our operator's process.
pub fn side_by_side(env: &Env, ns: &str, ours_pid: Option<u32>, binary: &Path) -> Result<()> {
    let crds = std::env::var_os("OFFICIAL_OPERATOR_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            binary
                .parent()
                .unwrap_or(Path::new("."))
                .join("src/config/crd/bases")
        });
    if !crds.is_dir() {
        bail!("no CRDs of the official operator in {}", crds.display());
    }
    env.kubectl(&["apply", "-f", &crds.to_string_lossy()])?;
    // kubectl learns the kind once, outside the timed applies.
    env.kubectl_stdin(
        &["apply", "--dry-run=server", "-n", ns, "-f", "-"],
        &official_yaml("warm-up", 3, 1),
    )?;
    let official = start(env, binary)?;
    std::thread::sleep(Duration::from_secs(3));
    for (shards, replicas) in [(3u32, 1u32), (3, 2)] {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for run in 0..RUNS {
            let name = format!("ours-{shards}x{replicas}-{run}");
            ours.push(apply_to_ready(
                env,
                ns,
                "valkeyclusters.valkey.rs",
                &name,
                &super::cluster_yaml(&name, shards, replicas),
            )?);
            let name = format!("theirs-{shards}x{replicas}-{run}");
            theirs.push(apply_to_ready(
                env,
                ns,
                "valkeyclusters.valkey.io",
                &name,
                &official_yaml(&name, shards, replicas),
            )?);
        }
        let worst_ratio = ours
            .iter()
            .zip(&theirs)
            .map(|(o, t)| o / t.max(1e-9))
            .fold(0.0f64, f64::max);
        println!(
            "side by side {shards}x{replicas}, apply -> Ready, {RUNS} alternating runs: ours {} s, official {} s; worst ratio {worst_ratio:.2} {}",
            words(&ours),
            words(&theirs),
            super::goal(
                "ours <= 0.15x of the official in every run",
                worst_ratio <= 0.15
            )
        );
    }
    let (ours_mb, theirs_mb) = (ours_pid.and_then(rss_mb), rss_mb(official.child.id()));
    match (ours_mb, theirs_mb) {
        (Some(o), Some(t)) => println!(
            "side by side, resident memory with the 6 clusters of each: ours {o:.1} MB, official {t:.1} MB; ratio {:.2} {}",
            o / t,
            super::goal("ours <= a quarter of the official", o <= t / 4.0)
        ),
        _ => println!("side by side: resident memory not readable"),
    }
    for kind in ["valkeyclusters.valkey.rs", "valkeyclusters.valkey.io"] {
        let _ = env.kubectl(&["delete", kind, "--all", "-n", ns, "--wait=false"]);
    }
    Ok(())
}
