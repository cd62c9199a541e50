//! No tenant can harm another: a ValkeyCluster whose member image is a hostile
//! fake Valkey server (`src/bin/hostile-valkey.rs`: after the login, a
//! connection gets `$2000000000` and bytes for ever, or no answer at all, or
//! a byte a second, or 4 MB to every command) runs beside a healthy 3x1
//! cluster, served by the same operator. While the operator talks to the
//! hostile member:
//! - the healthy cluster heals a SIGKILLed primary (Valkey fails over, the
//!   operator re-attaches the restarted member) to Ready with its shape in
//!   normal time (under 60 s; 10-20 s is usual);
//! - the operator's resident memory stays under the chart's 128Mi limit.
//!
//! Beside it, two ValkeyBackups of the healthy cluster name object stores of
//! the tenant's own (servers in this test, on the host where the operator
//! runs): one answers every request with `403` and a body without end, the
//! other accepts and never answers. The operator checks each one's bucket
//! itself: both backups fail, with messages that carry nothing the store
//! sent, while the healing above runs in normal time and the RSS bound holds.
//!
//! The hostile image is built here from the e2e crate's `hostile-valkey`
//! binary (scripts/image/build.py with `--path-in-image`, so the member's
//! `valkey-server` command runs it) and loaded into the testbed under a name
//! without "valkey" in it (the testbed runs the host's valkey-server for
//! images naming valkey). The hostile cluster uses `spec.persistence`, whose
//! member command is `valkey-server ARGS` (without it the command is a shell
//! script the image cannot run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, condition_status, tail_file, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::Suite;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const HEALTHY: &str = "tenant";
const HOSTILE: &str = "hostile";
const HOSTILE_IMAGE: &str = e2e::hostile::IMAGE;
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the operator talks to the hostile member before the fault.
const SOAK: Duration = Duration::from_secs(20);
/// From the kill to the healthy cluster Ready with its shape.
const HEAL_LIMIT: Duration = Duration::from_secs(60);
/// The chart's memory limit of the operator (deploy/helm values: 128Mi).
const RSS_LIMIT_KIB: u64 = 128 * 1024;

/// Builds the hostile image from the `hostile-valkey` binary cargo built for
/// this test, and loads it into the testbed as [`HOSTILE_IMAGE`].
fn load_hostile_image(env: &Env) -> Result<()> {
    e2e::hostile::load_image(
        env,
        std::path::Path::new(env!("CARGO_BIN_EXE_hostile-valkey")),
    )
}

/// VmRSS of `pid` in KiB, from /proc/PID/status.
fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status: is the operator gone?"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// Samples the operator's RSS every 250 ms until stopped; the samples (KiB),
/// or the first read that failed.
struct RssSampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<u64>>>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                samples.push(rss_kib(pid)?);
                std::thread::sleep(Duration::from_millis(250));
            }
            Ok(samples)
        });
        RssSampler { stop, thread }
    }

    fn finish(self) -> Result<Vec<u64>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the RSS sampler panicked"))?
    }
}

/// The log of the hostile member's `valkey` container (what the fake server
/// printed: whom it harmed, and how), once its pod exists.
fn hostile_log(env: &Env, ns: &str) -> Option<PathBuf> {
    let pod = env.members(ns, HOSTILE).ok()?.into_iter().next()?;
    Some(
        env.testbed_dir
            .join("logs/pods")
            .join(format!("{ns}_{}_valkey.log", pod.name)),
    )
}

/// Waits until the hostile member has served the operator (not its own
/// exporter sidecar, which comes from 127.0.0.1) each of its harms.
fn wait_operator_attacked(env: &Env, ns: &str) -> Result<()> {
    let mut log = None;
    wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        log = hostile_log(env, ns);
        let text = log
            .as_ref()
            .and_then(|l| std::fs::read_to_string(l).ok())
            .unwrap_or_default();
        let from_operator = |harm: &str| {
            text.lines()
                .any(|l| !l.starts_with("127.0.0.1:") && l.ends_with(harm))
        };
        Ok(["-> EndlessBulk", "-> Silent", "-> Trickle", "-> Big"]
            .iter()
            .all(|h| from_operator(h)))
    })
    .with_context(|| {
        let log = log.as_deref().unwrap_or(Path::new("(no pod)"));
        format!(
            "the hostile member never served the operator each of its harms; {}:\n{}",
            log.display(),
            tail_file(log, 20)
        )
    })
}

/// The most bytes of an endless reply the hostile member sent the operator
/// on one connection before the operator hung up (socket buffers included).
fn most_endless_bytes(env: &Env, ns: &str) -> Option<u64> {
    let text = std::fs::read_to_string(hostile_log(env, ns)?).ok()?;
    text.lines()
        .filter(|l| !l.starts_with("127.0.0.1:"))
        .filter_map(|l| {
            l.split_once("closed after EndlessBulk, ")?
                .1
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .max()
}

/// Ready for its generation and exactly 3x1, checked every second until
/// `limit`; the time from `since`.
fn wait_healed(env: &Env, ns: &str, since: Instant, limit: Duration) -> Result<Duration> {
    let mut last = String::new();
    let res = wait_until(limit, Duration::from_secs(1), || {
        let obj = env.cluster(ns, HEALTHY)?;
        let ready = condition_status(&obj, "Ready").as_deref() == Some("True")
            && obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
        if !ready {
            last = "Ready is not True".into();
            return Ok(false);
        }
        match env.check_shape(ns, HEALTHY, 3, 1) {
            Ok(_) => Ok(true),
            Err(e) => {
                last = format!("{e:#}");
                Ok(false)
            }
        }
    });
    if res.is_err() {
        bail!(
            "{HEALTHY}: not healed {:.0}s after its primary was killed: {last}",
            since.elapsed().as_secs_f64()
        );
    }
    Ok(since.elapsed())
}

fn delete_clusters(env: &Env, ns: &str) -> Result<Duration> {
    let started = Instant::now();
    env.kubectl(&[
        "delete",
        "valkeycluster",
        HEALTHY,
        HOSTILE,
        "-n",
        ns,
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(started.elapsed())
}

/// A hostile object store on the host (where the operator runs in this
/// suite): every connection gets `403 Forbidden` and a chunked body without
/// end (`endless`), or is accepted and never answered (`stall`). Counts the
/// connections and the most bytes one took; stops when `stop` is set (each
/// connection within a second of it), so the loop is bounded by the test.
struct HostileStore {
    port: u16,
    connections: Arc<std::sync::atomic::AtomicU64>,
    most_bytes: Arc<std::sync::atomic::AtomicU64>,
}

/// What the endless body repeats: its text must never reach a status.
const HOSTILE_BODY: &str = "HOSTILE-STORE-BODY ";

impl HostileStore {
    fn start(endless: bool, stop: Arc<AtomicBool>) -> Result<HostileStore> {
        use std::io::{Read, Write};
        use std::sync::atomic::AtomicU64;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let connections = Arc::new(AtomicU64::new(0));
        let most_bytes = Arc::new(AtomicU64::new(0));
        let (count, most) = (connections.clone(), most_bytes.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                let (stop, most) = (stop.clone(), most.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(1)));
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(1)));
                    let mut request = [0u8; 8192];
                    let _ = conn.read(&mut request);
                    if !endless {
                        while !stop.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(200));
                        }
                        return;
                    }
                    let head = "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n";
                    if conn.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    let chunk = HOSTILE_BODY.repeat(64 * 1024 / HOSTILE_BODY.len());
                    let frame = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                    let mut sent = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        match conn.write_all(frame.as_bytes()) {
                            Ok(()) => sent += frame.len() as u64,
                            Err(e)
                                if e.kind() == std::io::ErrorKind::WouldBlock
                                    || e.kind() == std::io::ErrorKind::TimedOut =>
                            {
                                continue;
                            }
                            Err(_) => break,
                        }
                    }
                    most.fetch_max(sent, Ordering::Relaxed);
                });
            }
        });
        Ok(HostileStore {
            port,
            connections,
            most_bytes,
        })
    }
}

/// A ValkeyBackup of the healthy cluster whose store is `store`.
fn hostile_backup(env: &Env, ns: &str, name: &str, store: &HostileStore) -> Result<()> {
    env.apply(
        ns,
        &format!(
            "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyBackup\nmetadata: {{name: {name}}}\nspec:\n  cluster: {HEALTHY}\n  s3:\n    endpoint: \"http://127.0.0.1:{}\"\n    bucket: b\n    credentialsSecret: hostile-s3\n",
            store.port
        ),
    )
}

/// Both hostile backups reach a final phase (Failed), each with a message
/// that says what happened without what the store sent.
fn wait_hostile_backups_failed(env: &Env, ns: &str) -> Result<()> {
    for name in ["endless-store", "stalled-store"] {
        let mut status = serde_json::Value::Null;
        wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
            status = env.kubectl_json(&["get", "valkeybackup", name, "-n", ns])?["status"].clone();
            Ok(status["phase"] == "Failed")
        })
        .with_context(|| format!("backup {name} did not fail: {status}"))?;
        let message = status["message"].as_str().unwrap_or_default();
        ensure!(
            !message.contains(HOSTILE_BODY.trim()),
            "{name}: the store's body reached the status: {message}"
        );
        println!("hostile_tenant: backup {name} Failed: {message}");
    }
    Ok(())
}

fn scenario(env: &Env, ns: &str, operator_pid: u32) -> Result<()> {
    let started = Instant::now();
    load_hostile_image(env)?;
    let healthy = cluster_manifest(HEALTHY, 3, 1);
    let took = env.create_cluster(ns, &healthy, READY_TIMEOUT)?;
    let password = env.password(ns, HEALTHY)?;
    let rss_before = rss_kib(operator_pid)?;
    println!(
        "hostile_tenant: {HEALTHY} 3x1 Ready {:.1}s after apply; operator RSS {} KiB",
        took.as_secs_f64(),
        rss_before
    );

    let sampler = RssSampler::start(operator_pid);
    let hostile = cluster_manifest(HOSTILE, 1, 0)
        .image(HOSTILE_IMAGE)
        .persistence("64Mi", "Delete");
    env.apply(ns, &hostile.yaml())?;
    // A tenant's backups whose object store answers without end, or never:
    // the operator itself checks the bucket of each.
    let stop_stores = Arc::new(AtomicBool::new(false));
    let endless = HostileStore::start(true, stop_stores.clone())?;
    let stalled = HostileStore::start(false, stop_stores.clone())?;
    env.apply(
        ns,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: hostile-s3}\nstringData:\n  AWS_ACCESS_KEY_ID: k\n  AWS_SECRET_ACCESS_KEY: s\n",
    )?;
    hostile_backup(env, ns, "endless-store", &endless)?;
    hostile_backup(env, ns, "stalled-store", &stalled)?;
    let attacked = Instant::now();
    wait_operator_attacked(env, ns)?;
    println!(
        "hostile_tenant: the operator met each harm of the hostile member {:.1}s after apply (an endless reply, none, a trickle, 4 MB to every command)",
        attacked.elapsed().as_secs_f64()
    );
    std::thread::sleep(SOAK);

    let victim = env.member_with_role(ns, HEALTHY, 0, "primary")?;
    let replica = env.member_with_role(ns, HEALTHY, 0, "replica")?;
    let pid = env.kill_valkey(&victim.ip)?;
    let killed = Instant::now();
    println!(
        "hostile_tenant: killed valkey-server pid {pid} of {} ({}), shard 0 primary",
        victim.name, victim.ip
    );
    // Valkey's own failover first (the status may still say Ready from
    // before the kill), then the operator's part: the restarted member
    // attached again and the status Ready with the shape.
    wait_until(HEAL_LIMIT, Duration::from_millis(250), || {
        let role = env
            .valkey_cli(&replica.ip, &password, &["role"])
            .unwrap_or_default();
        Ok(role.starts_with("master"))
    })
    .context("the replica of shard 0 was never promoted")?;
    let failover = killed.elapsed();
    let healed = wait_healed(env, ns, killed, HEAL_LIMIT.saturating_sub(killed.elapsed()))?;
    println!(
        "hostile_tenant: {HEALTHY} healed beside the hostile tenant: replica promoted {:.1}s, Ready 3x1 {:.1}s after the kill",
        failover.as_secs_f64(),
        healed.as_secs_f64()
    );
    ensure!(
        healed < HEAL_LIMIT,
        "healing took {healed:?}, limit {HEAL_LIMIT:?}"
    );

    wait_hostile_backups_failed(env, ns)?;
    stop_stores.store(true, Ordering::Relaxed);
    let seen = |s: &HostileStore| s.connections.load(Ordering::Relaxed);
    ensure!(
        seen(&endless) > 0 && seen(&stalled) > 0,
        "the operator never asked the hostile stores ({} and {} connections)",
        seen(&endless),
        seen(&stalled)
    );
    println!(
        "hostile_tenant: the hostile stores: endless {} connection(s), at most {:.1} MiB sent on one before the operator hung up; stalled {} connection(s)",
        seen(&endless),
        endless.most_bytes.load(Ordering::Relaxed) as f64 / 1048576.0,
        seen(&stalled)
    );
    let samples = sampler.finish()?;
    let max = samples.iter().copied().max().unwrap_or_default();
    println!(
        "hostile_tenant: operator RSS with the hostile tenant: max {max} KiB ({:.1} MiB) over {} samples, {rss_before} KiB before it; limit {RSS_LIMIT_KIB} KiB",
        max as f64 / 1024.0,
        samples.len()
    );
    ensure!(
        max < RSS_LIMIT_KIB,
        "the operator's RSS reached {max} KiB, over the chart's limit {RSS_LIMIT_KIB} KiB"
    );
    ensure!(samples.len() >= 10, "only {} RSS samples", samples.len());

    if let Some(most) = most_endless_bytes(env, ns) {
        println!(
            "hostile_tenant: an endless reply reached at most {most} bytes ({:.1} MiB, kernel socket buffers included) before the operator hung up",
            most as f64 / 1048576.0
        );
    }
    let deleted = delete_clusters(env, ns)?;
    println!(
        "hostile_tenant: both clusters deleted in {:.1}s; the suite took {:.1}s",
        deleted.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the healthy cluster's diagnostics do not show: the hostile cluster's
/// status and pods, and what its member printed (no redis-cli against it: it
/// would never answer).
fn hostile_diagnostics(env: &Env, ns: &str) -> String {
    let status = env
        .cluster(ns, HOSTILE)
        .map(|o| serde_json::to_string_pretty(&o["status"]).unwrap_or_default())
        .unwrap_or_else(|e| e.to_string());
    let pods = env
        .kubectl(&["get", "pods", "-n", ns, "-o", "wide"])
        .unwrap_or_else(|e| e.to_string());
    let log = hostile_log(env, ns).unwrap_or_else(|| PathBuf::from("(no pod)"));
    let log = log.as_path();
    format!(
        "--- valkeycluster {ns}/{HOSTILE} status:\n{status}\n--- pods:\n{pods}--- {}:\n{}\n",
        log.display(),
        tail_file(log, 20)
    )
}

#[test]
fn a_hostile_member_image_does_not_slow_another_tenants_healing_nor_grow_the_operator() {
    let Some(suite) = Suite::start("hostile_tenant", "hostile", "e2e-hostile") else {
        return;
    };
    let pid = suite.operator.pid().expect("the operator runs");
    suite.run(&[HEALTHY], |env, ns| {
        scenario(env, ns, pid).inspect_err(|_| eprintln!("{}", hostile_diagnostics(env, ns)))
    });
}
