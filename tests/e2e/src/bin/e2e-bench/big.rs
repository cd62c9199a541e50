//! One big cluster (issue 26, item 6): 40 shards x 2 replicas (120 members,
//! zone `Required` 1) on a testbed of its own, 5 zones x 10 nodes, under an
//! operator that elects a leader (as a deployed one does), so a Lease it
//! fails to renew shows. Printed: apply -> all 120 pods Ready, pods Ready ->
//! the cluster's Ready condition True, the operator's resident memory at the
//! end (and its peak), and whether it kept its Lease (never exited).
//! `OPERATOR_BIN` runs another build's operator.

use crate::{METRICS_ADDR, cluster_yaml, goal, metrics_port_free, rss_kib};
use anyhow::{Context, Result};
use e2e::cluster::{Env, condition_status, wait_until};
use e2e::rbac::OPERATOR_SA_NAMESPACE;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const SHARDS: u32 = 40;
const REPLICAS: u32 = 2;
const MEMBERS: usize = (SHARDS * (1 + REPLICAS)) as usize;
const NAME: &str = "big";
const LEASE: &str = "valkey-operator-bench-big";
/// How long the cluster may take at most before the figure is given up.
const LIMIT: Duration = Duration::from_secs(600);
/// Held after Ready before memory and the Lease are read: the status writes
/// and the first resyncs of the settled cluster run meanwhile.
const SETTLE: Duration = Duration::from_secs(20);

/// Brings up the 5 x 10 testbed in `dir` (after taking down whatever ran
/// there), measures, and brings it down again.
pub fn run(root: &Path, testbed: &Path, dir: &Path, operator_args: &[String]) -> Result<()> {
    let dir_s = dir.to_string_lossy().to_string();
    super::fresh_testbed(testbed, dir, &[])?;
    let mut env = Env::for_testbed(root, dir);
    // Another build's operator (e.g. the one before a change), for a figure
    // before and after on the same bench.
    if let Some(b) = std::env::var_os("OPERATOR_BIN") {
        env.operator_bin = b.into();
    }
    let result = e2e::exporter::load_image(&env).and_then(|_| figures(&env, operator_args));
    let _ = Command::new(testbed)
        .args(["down", "--dir", &dir_s])
        .status();
    result
}

/// The holder of the bench's Lease, and how often it changed hands.
fn lease(env: &Env) -> Result<(String, u64)> {
    let lease = env.kubectl_json(&["get", "lease", LEASE, "-n", OPERATOR_SA_NAMESPACE])?;
    Ok((
        lease["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        lease["spec"]["leaseTransitions"].as_u64().unwrap_or(0),
    ))
}

/// `VmHWM`: the peak resident memory of a process, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn figures(env: &Env, operator_args: &[String]) -> Result<()> {
    env.install_crd()?;
    let ns = env.namespace("big")?;
    // A Lease of its own in the namespace where the chart's RBAC grants the
    // leader-election verbs.
    let _ = env.kubectl(&["delete", "lease", LEASE, "-n", OPERATOR_SA_NAMESPACE]);
    let mut args = vec![
        "run",
        "--lease-name",
        LEASE,
        "--lease-namespace",
        OPERATOR_SA_NAMESPACE,
        "--http-addr",
        METRICS_ADDR,
    ];
    args.extend(operator_args.iter().map(String::as_str));
    metrics_port_free()?;
    // The lease library's renewals in the log too, for a Lease that is lost.
    let log = [(
        "RUST_LOG",
        "info,operator=debug,valkey=debug,kube_lease_manager=debug",
    )];
    let mut operator = env.spawn_operator("big", &args, &log)?;
    let pid = operator.pid().context("operator pid")?;
    wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        Ok(lease(env).is_ok_and(|(holder, _)| holder.ends_with(&format!("-{pid}"))))
    })
    .context("the bench operator never took its Lease")?;
    // kubectl learns the kind before the clock starts (see `warm_kubectl`).
    env.kubectl_stdin(
        &["apply", "--dry-run=server", "-n", &ns.name, "-f", "-"],
        &cluster_yaml(NAME, SHARDS, REPLICAS),
    )?;

    let started = Instant::now();
    env.apply(&ns.name, &cluster_yaml(NAME, SHARDS, REPLICAS))?;
    let mut pods_ready: Option<f64> = None;
    let mut ready: Option<f64> = None;
    let mut exited: Option<f64> = None;
    // The peak, read while it runs: an operator that exits takes its own
    // VmHWM with it.
    let mut peak: Option<u64> = None;
    let mut last = String::new();
    let waited = wait_until(LIMIT, Duration::from_millis(250), || {
        let now = started.elapsed().as_secs_f64();
        peak = peak.max(peak_kib(pid));
        if !operator.alive() {
            exited = Some(now);
            return Ok(true);
        }
        if pods_ready.is_none() {
            // A kubectl that fails under the load is asked again next time.
            let Ok(pods) = env.members(&ns.name, NAME) else {
                return Ok(false);
            };
            let up = pods.iter().filter(|p| p.ready).count();
            let line = format!("pods {} ({up} Ready)", pods.len());
            if line != last {
                println!("  {now:5.1} s  {line}");
                last = line;
            }
            if up == MEMBERS {
                pods_ready = Some(now);
            }
            return Ok(false);
        }
        let Ok(obj) = env.cluster(&ns.name, NAME) else {
            return Ok(false);
        };
        let current = obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
        let cond = e2e::cluster::condition(&obj, "Ready");
        let line = format!(
            "Ready {}: {}",
            cond.map_or("-".into(), |c| c["status"].to_string()),
            cond.map_or("-".into(), |c| c["reason"].to_string()),
        );
        if line != last {
            println!("  {now:5.1} s  {line}");
            last = line;
        }
        if current && condition_status(&obj, "Ready").as_deref() == Some("True") {
            ready = Some(now);
            return Ok(true);
        }
        Ok(false)
    });
    if ready.is_some() {
        std::thread::sleep(SETTLE);
    }
    let alive = operator.alive();
    let (rss, peak) = (rss_kib(pid), peak.max(peak_kib(pid)));
    let (holder, transitions) = lease(env).unwrap_or_default();
    let kept = alive && exited.is_none() && holder.ends_with(&format!("-{pid}"));

    let what =
        format!("{SHARDS}x{REPLICAS} ({MEMBERS} members, zone Required 1) on 5 zones x 10 nodes");
    match (pods_ready, exited) {
        (Some(p), _) => println!(
            "operator: one big cluster, {what}: apply -> all pods Ready {p:.1} s [goal: report]"
        ),
        (None, Some(t)) => println!(
            "operator: one big cluster, {what}: apply -> all pods Ready: not before the operator exited ({t:.1} s) [goal: report]"
        ),
        (None, None) => println!(
            "operator: one big cluster, {what}: apply -> all pods Ready: not within {} s [goal: report]",
            LIMIT.as_secs()
        ),
    }
    match (pods_ready, ready) {
        (Some(p), Some(r)) => println!(
            "operator: one big cluster: pods Ready -> cluster Ready {:.1} s (apply -> Ready {r:.1} s) {}",
            r - p,
            goal("< 20 s", r - p < 20.0)
        ),
        _ => println!(
            "operator: one big cluster: pods Ready -> cluster Ready: never ({}) {}",
            match exited {
                Some(t) => format!("the operator exited {t:.1} s after apply"),
                None => format!("not within {} s", LIMIT.as_secs()),
            },
            goal("< 20 s", false)
        ),
    }
    match rss {
        Some(kib) => {
            let mb = kib as f64 / 1024.0;
            println!(
                "operator: one big cluster: resident memory {mb:.1} MB {} s after Ready (peak {:.1} MB) {}",
                SETTLE.as_secs(),
                peak.map_or(f64::NAN, |k| k as f64 / 1024.0),
                goal("< 40 MB", mb < 40.0)
            );
        }
        None => println!(
            "operator: one big cluster: resident memory: not read (the operator is gone; peak {:.1} MB) {}",
            peak.map_or(f64::NAN, |k| k as f64 / 1024.0),
            goal("< 40 MB", false)
        ),
    }
    println!(
        "operator: one big cluster: the operator kept its Lease (never exited; holder {holder:?}, {transitions} transitions) {}",
        goal("kept", kept)
    );
    if !kept || ready.is_none() {
        println!("operator log (tail):\n{}", operator.tail(40));
    }
    waited.map(drop).or_else(|e| {
        // A missed figure is printed, not an error; a step that could not
        // run at all is.
        if exited.is_some() || pods_ready.is_some() {
            Ok(())
        } else {
            Err(e)
        }
    })
}
