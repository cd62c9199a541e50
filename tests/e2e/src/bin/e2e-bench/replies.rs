//! Bounded memory whatever the members answer (issue 38, item 3): one
//! operator, a hostile cluster of 10 shards x 1 replica (20 members) whose
//! image answers every command with a 4 MB bulk string (`hostile-valkey` with
//! `HOSTILE_ANSWER=big`: each reply just under the 4 MiB bound of one
//! connection, so only a bound on all replies together holds the sum), and a
//! healthy 3x2 cluster applied while it runs. Reports the operator's RSS
//! before, its peak over [`SOAK`] (sampled every 100 ms), and the healthy
//! cluster's apply -> Ready.

use crate::{bench_operator, goal, rss_kib, warm_kubectl};
use anyhow::{Context, Result, bail};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use std::time::{Duration, Instant};

/// How long the operator administers the hostile members while RSS is sampled.
const SOAK: Duration = Duration::from_secs(60);
/// The goal of issue 38: RSS under 150 MB with 20 members answering 4 MB.
const GOAL_MB: f64 = 150.0;

/// The `hostile-valkey` binary cargo built beside this one.
fn hostile_binary() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("this binary's path")?;
    let path = exe
        .parent()
        .context("this binary's directory")?
        .join("hostile-valkey");
    if !path.exists() {
        bail!(
            "{} is missing: `cargo build --release -p e2e --bins` builds it",
            path.display()
        );
    }
    Ok(path)
}

pub fn figures(env: &Env, operator_args: &[String]) -> Result<()> {
    let (ns, operator) = bench_operator(env, "big-replies", operator_args)?;
    let pid = operator.pid().context("operator pid")?;
    warm_kubectl(env, &ns.name)?;
    e2e::hostile::load_image(env, &hostile_binary()?)?;
    std::thread::sleep(Duration::from_secs(5));
    let before = rss_kib(pid).context("the operator's RSS")?;

    let hostile = cluster_manifest("big", 10, 1)
        .image(e2e::hostile::IMAGE)
        // Members with a volume start the image's server itself (without
        // one, a shell script that the hostile image does not have).
        .persistence("64Mi", "Delete")
        .extra_spec(
            "  podTemplate:\n    spec:\n      containers:\n      - name: valkey\n        env: [{name: HOSTILE_ANSWER, value: big}]\n",
        );
    env.apply(&ns.name, &hostile.yaml())?;
    let started = Instant::now();
    wait_until(Duration::from_secs(300), Duration::from_secs(1), || {
        let phases = env.kubectl(&[
            "get",
            "pods",
            "-n",
            &ns.name,
            "-l",
            "valkey.rs/cluster=big",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ])?;
        Ok(phases
            .split_whitespace()
            .filter(|p| *p == "Running")
            .count()
            >= 20)
    })
    .context("waiting for the 20 hostile members to run")?;
    println!(
        "big replies: 20 members answering 4 MB to every command running {:.1} s after apply",
        started.elapsed().as_secs_f64()
    );
    let soak_start = Instant::now();
    let mut peak = before;
    let mut samples = 0usize;
    while soak_start.elapsed() < SOAK {
        if let Some(rss) = rss_kib(pid) {
            peak = peak.max(rss);
            samples += 1;
        } else {
            bail!("the operator is gone (pid {pid}): see its log");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let healthy_ready = crate::apply_to_ready(env, &ns.name, "healthy", false)?;
    let peak_mb = peak as f64 / 1024.0;
    println!(
        "big replies: operator RSS {:.1} MB before, peak {peak_mb:.1} MB over {} s ({samples} samples) {}; a healthy 3x2 applied meanwhile Ready in {healthy_ready:.1} s",
        before as f64 / 1024.0,
        SOAK.as_secs(),
        goal(&format!("under {GOAL_MB} MB"), peak_mb < GOAL_MB),
    );
    let _ = env.kubectl(&[
        "delete",
        "valkeycluster",
        "big",
        "-n",
        &ns.name,
        "--wait=false",
    ]);
    Ok(())
}
