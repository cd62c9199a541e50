//! A primary without persistence crashes in a cluster of 1, 2 and 3 shards
//! (one replica each) while a client writes with `WAIT 1`; no write a
//! replica acknowledged may be lost.
//!
//! With 1 or 2 shards no majority of primaries is left to elect the replica,
//! so Valkey never fails over by itself, and the crashed primary restarts on
//! the same address as an empty node: its replica would full-sync nothing
//! from it. The operator promotes the replica (CLUSTER FAILOVER TAKEOVER) and
//! the restarted member listens only once no replica replicates from its
//! address. With 3 shards Valkey elects the replica itself.
//!
//! Each cluster gets two faults on shard 0's live primary: SIGKILL of its
//! valkey-server, then `SHUTDOWN NOSAVE NOW` sent by a client to the member
//! promoted after the first. After each the cluster is Ready again with its
//! exact shape, and the crashed member is a replica.
//!
//! A fourth cluster (1x1) has `spec.persistence` with AOF and RDB off: its
//! volume keeps nothing of the data, so its members start as members without
//! persistence do (they forget their identity first); before, such a primary
//! restarted at once came back with its slots and no data, and its replica
//! full-synced the empty set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, MemberPod, condition_status, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// From the fault to a healed cluster.
const HEAL_TIMEOUT: Duration = Duration::from_secs(240);

/// The member of `shard` that Valkey says is a primary (the role label may
/// lag a failover).
fn live_primary(env: &Env, ns: &str, name: &str, shard: u32, pw: &str) -> Result<MemberPod> {
    let mut found = Vec::new();
    for m in env.members(ns, name)? {
        if m.shard != shard || m.ip.is_empty() {
            continue;
        }
        let role = env.valkey_cli(&m.ip, pw, &["role"]).unwrap_or_default();
        if role.starts_with("master") {
            found.push(m);
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        n => bail!("{name}: shard {shard} has {n} live primaries"),
    }
}

/// Waits until `victim` (by pod name) has restarted, answers as a replica,
/// and the cluster is Ready with its exact shape. Returns the time it took.
fn wait_healed(
    env: &Env,
    ns: &str,
    name: &str,
    shards: u32,
    pw: &str,
    victim: &MemberPod,
    old_restarts: u64,
) -> Result<Duration> {
    let started = Instant::now();
    let mut last = String::new();
    let healed = wait_until(HEAL_TIMEOUT, Duration::from_secs(1), || {
        let ids = env.pod_identities(ns, name)?;
        let Some(pod) = ids.get(&victim.name) else {
            last = "victim pod gone".into();
            return Ok(false);
        };
        if pod.restarts <= old_restarts {
            last = "victim container not restarted yet".into();
            return Ok(false);
        }
        let obj = env.cluster(ns, name)?;
        if condition_status(&obj, "Ready").as_deref() != Some("True") {
            last = "Ready is not True".into();
            return Ok(false);
        }
        if let Err(e) = env.check_shape(ns, name, shards, 1) {
            last = format!("{e:#}");
            return Ok(false);
        }
        let ip = env
            .members(ns, name)?
            .into_iter()
            .find(|m| m.name == victim.name)
            .map(|m| m.ip)
            .unwrap_or_default();
        let role = env.valkey_cli(&ip, pw, &["role"]).unwrap_or_default();
        if !role.starts_with("slave") {
            last = format!("the crashed member answers {role:?}, not as a replica");
            return Ok(false);
        }
        Ok(true)
    });
    if healed.is_err() {
        bail!("{name}: not healed within {HEAL_TIMEOUT:?}: {last}");
    }
    Ok(started.elapsed())
}

fn crash(env: &Env, ns: &str, name: &str, shards: u32, pw: &str, how: &str) -> Result<()> {
    let victim = live_primary(env, ns, name, 0, pw)?;
    let old_restarts = env
        .pod_identities(ns, name)?
        .get(&victim.name)
        .context("victim pod")?
        .restarts;
    match how {
        "SIGKILL" => {
            env.kill_valkey(&victim.ip)?;
        }
        _ => {
            // The connection closes without a reply: the error is expected.
            let _ = env.valkey_cli(&victim.ip, pw, &["shutdown", "nosave", "now"]);
        }
    }
    let took = wait_healed(env, ns, name, shards, pw, &victim, old_restarts)?;
    let now = live_primary(env, ns, name, 0, pw)?;
    ensure!(
        now.name != victim.name,
        "{name}: {} crashed empty and is the primary again",
        victim.name
    );
    println!(
        "safety_small_clusters: {name} ({shards}x1): {how} of primary {}; shard 0 primary now {}; healed in {:.1}s",
        victim.name,
        now.name,
        took.as_secs_f64()
    );
    Ok(())
}

fn scenario(env: &Env, ns: &str, shards: u32) -> Result<()> {
    scenario_of(env, ns, &format!("small{shards}"), shards, false)
}

/// `shards` x 1 under a `WAIT 1` writer, two crashes of shard 0's primary.
/// `volume_without_writes`: with `spec.persistence` but AOF and RDB off
/// (`appendonly: "no"`, `save: ""`): a volume nothing is written to, whose
/// members must start as members without persistence do.
fn scenario_of(
    env: &Env,
    ns: &str,
    name: &str,
    shards: u32,
    volume_without_writes: bool,
) -> Result<()> {
    let name = name.to_string();
    let mut manifest = cluster_manifest(&name, shards, 1);
    if volume_without_writes {
        manifest = manifest
            .persistence("64Mi", "Delete")
            .extra_spec("  config:\n    appendonly: \"no\"\n    save: \"\"\n");
    }
    let took = env.create_cluster(ns, &manifest, READY_TIMEOUT)?;
    println!(
        "safety_small_clusters: {name} ({shards}x1) Ready {:.1}s after apply",
        took.as_secs_f64()
    );
    let pw = env.password(ns, &name)?;
    let dir = env.work_dir(&format!("safety_small_clusters-{name}"))?;
    let mut load = env.start_member_load(
        ns,
        &name,
        &pw,
        &dir,
        &name,
        &["--interval-ms", "5", "--wait-replicas", "1"],
    )?;
    crash(env, ns, &name, shards, &pw, "SIGKILL")?;
    crash(env, ns, &name, shards, &pw, "SHUTDOWN NOSAVE NOW")?;
    let summary = finish_load(&mut load, &name)?;
    let verified = env.verify_cluster_keys(ns, &name, &pw, &load.keys)?;
    println!("safety_small_clusters: {name}: load {summary}; verify {verified}");
    Ok(())
}

#[test]
fn a_crashed_primary_without_persistence_loses_no_acknowledged_write_at_any_shard_count() {
    let Some(suite) = Suite::start("safety_small_clusters", "small", "e2e-small") else {
        return;
    };
    suite.run(&["small1", "small2", "small3", "novolwrites"], |env, ns| {
        // The clusters side by side: each fault waits on Valkey's timeouts,
        // not on the cores. The fourth has a volume with AOF and RDB off.
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let mut handles: Vec<_> = [1, 2, 3]
                .map(|shards| scope.spawn(move || scenario(env, ns, shards)))
                .into_iter()
                .collect();
            handles.push(scope.spawn(move || scenario_of(env, ns, "novolwrites", 1, true)));
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("scenario panicked")))
                .collect()
        });
        let errors: Vec<String> = results
            .into_iter()
            .filter_map(|r| r.err().map(|e| format!("{e:#}")))
            .collect();
        ensure!(errors.is_empty(), "{}", errors.join("\n"));
        Ok(())
    });
}
