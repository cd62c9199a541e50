//! Healing a 3x1 cluster while a client writes:
//! (a) a replica's pod is deleted: the cluster is back to Ready with the right
//!     membership (the old node forgotten everywhere), `--cluster check` passes;
//! (b) a primary's pod is deleted: its replica is promoted, the cluster heals to
//!     Ready with one primary per shard and the right member count, an Event
//!     tells which shard changed primary, and no acknowledged write is lost;
//! (c) a primary's valkey-server process is killed (SIGKILL, no goodbye): Valkey
//!     fails over, the cluster heals to Ready, an Event tells it, and no write
//!     confirmed by a replica (`WAIT 1`) is lost.
//! And with persistence: a primary's valkey-server is killed and its container
//! restarts at once (before Valkey's node timeout) with nodes.conf and the AOF
//! on its volume: it keeps its node identity, the cluster heals to Ready with
//! the right shape, and no write confirmed by a replica is lost (a primary
//! coming back with less data than its replica must not win).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, Load, MemberPod, ObjectEvent, condition_status, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load};
use std::time::{Duration, Instant};

const NAME: &str = "heal";
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// From the fault to a healed cluster.
const HEAL_TIMEOUT: Duration = Duration::from_secs(240);

/// Waits until `noticed` holds (the fault has had its effect), then until the
/// cluster is Ready and has the 3x1 shape. Returns the time it took.
fn wait_healed(
    env: &Env,
    ns: &str,
    name: &str,
    what: &str,
    mut noticed: impl FnMut() -> Result<bool>,
) -> Result<Duration> {
    let started = Instant::now();
    wait_until(HEAL_TIMEOUT, Duration::from_millis(250), &mut noticed)
        .with_context(|| format!("{what}: the fault never showed"))?;
    let mut last_err = String::new();
    let res = wait_until(
        HEAL_TIMEOUT.saturating_sub(started.elapsed()),
        Duration::from_secs(1),
        || {
            let obj = env.cluster(ns, name)?;
            let ready = condition_status(&obj, "Ready").as_deref() == Some("True")
                && obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
            if !ready {
                last_err = "Ready is not True".into();
                return Ok(false);
            }
            match env.check_shape(ns, name, 3, 1) {
                Ok(_) => Ok(true),
                Err(e) => {
                    last_err = format!("{e:#}");
                    Ok(false)
                }
            }
        },
    );
    if res.is_err() {
        bail!("{what}: not healed within {HEAL_TIMEOUT:?}: {last_err}");
    }
    Ok(started.elapsed())
}

fn events_since(env: &Env, ns: &str, name: &str, seen: usize) -> Result<Vec<ObjectEvent>> {
    let all = env.object_events(ns, "ValkeyCluster", name)?;
    Ok(all.into_iter().skip(seen).collect())
}

fn event_count(env: &Env, ns: &str, name: &str) -> Result<usize> {
    Ok(env.object_events(ns, "ValkeyCluster", name)?.len())
}

/// Waits (bounded) for an Event `reason` whose message mentions `needle`
/// among the events after the first `seen`.
fn wait_event(
    env: &Env,
    ns: &str,
    name: &str,
    seen: usize,
    reason: &str,
    needle: &str,
) -> Result<()> {
    let mut last = Vec::new();
    wait_until(Duration::from_secs(60), Duration::from_secs(1), || {
        last = events_since(env, ns, name, seen)?;
        Ok(last
            .iter()
            .any(|e| e.reason == reason && e.message.contains(needle)))
    })
    .with_context(|| {
        format!("no Event {reason} mentioning {needle:?}; events since the fault: {last:#?}")
    })
}

fn print_events(env: &Env, ns: &str, name: &str, part: &str, seen: usize) -> Result<()> {
    for e in events_since(env, ns, name, seen)? {
        println!(
            "operator_heal: {part}: event {} {}: {}",
            e.type_, e.reason, e.message
        );
    }
    let obj = env.cluster(ns, name)?;
    println!(
        "operator_heal: {part}: status.lastAction {}",
        obj["status"]["lastAction"]
    );
    Ok(())
}

fn finish_and_verify(
    env: &Env,
    ns: &str,
    name: &str,
    password: &str,
    mut load: Load,
    part: &str,
) -> Result<()> {
    let summary = finish_load(&mut load, part)?;
    let verified = env.verify_cluster_keys(ns, name, password, &load.keys)?;
    println!(
        "operator_heal: {part}: load {summary}; verify {verified}; longest_gap_ms {}",
        summary["longest_gap_ms"]
    );
    Ok(())
}

/// After shard `replica.shard` lost its primary: an Event (after the first
/// `seen`) tells that `replica` is the primary now; the Events are printed,
/// and every acknowledged write reads back.
fn failover_told_and_writes_kept(
    env: &Env,
    ns: &str,
    password: &str,
    load: Load,
    part: &str,
    seen: usize,
    replica: &MemberPod,
) -> Result<()> {
    let needle = format!(
        "shard {}: member {} is now the primary",
        replica.shard, replica.member
    );
    wait_event(env, ns, NAME, seen, "PrimaryChanged", &needle)
        .with_context(|| format!("{part}: status should tell the failover"))?;
    print_events(env, ns, NAME, part, seen)?;
    finish_and_verify(env, ns, NAME, password, load, part)
}

/// Deletes `victim`'s pod and waits until it is re-created (a new UID) and
/// the cluster healed. Returns the time it took.
fn delete_pod_and_heal(env: &Env, ns: &str, part: &str, victim: &MemberPod) -> Result<Duration> {
    let old_uid = env.pod_identities(ns, NAME)?[&victim.name].uid.clone();
    env.kubectl(&["delete", "pod", &victim.name, "-n", ns, "--wait=false"])?;
    wait_healed(env, ns, NAME, part, || {
        Ok(env
            .pod_identities(ns, NAME)?
            .get(&victim.name)
            .is_some_and(|p| p.uid != old_uid))
    })
}

fn replica_pod_deleted(env: &Env, ns: &str, password: &str) -> Result<()> {
    let part = "(a) replica pod deleted";
    let dir = env.work_dir("operator_heal-a")?;
    let load = env.start_member_load(ns, NAME, password, &dir, "a", &["--interval-ms", "5"])?;
    let seen = event_count(env, ns, NAME)?;

    let victim = env.member_with_role(ns, NAME, 0, "replica")?;
    let old_id = env.node_id(&victim.ip, password)?;
    let took = delete_pod_and_heal(env, ns, part, &victim)?;
    // The old node (its id) is gone from every member's view.
    for ip in env.member_ips(ns, NAME)? {
        let nodes = env.cluster_nodes(&ip, password)?;
        ensure!(
            nodes.iter().all(|n| n.id != old_id),
            "{part}: {ip} still lists the deleted replica's node {old_id}"
        );
    }
    println!(
        "operator_heal: {part}: {} healed in {:.1}s",
        victim.name,
        took.as_secs_f64()
    );
    print_events(env, ns, NAME, part, seen)?;
    finish_and_verify(env, ns, NAME, password, load, part)
}

fn primary_pod_deleted(env: &Env, ns: &str, password: &str) -> Result<()> {
    let part = "(b) primary pod deleted";
    let dir = env.work_dir("operator_heal-b")?;
    let load = env.start_member_load(ns, NAME, password, &dir, "b", &["--interval-ms", "5"])?;
    let seen = event_count(env, ns, NAME)?;

    let shard = 1;
    let victim = env.member_with_role(ns, NAME, shard, "primary")?;
    let replica = env.member_with_role(ns, NAME, shard, "replica")?;
    let took = delete_pod_and_heal(env, ns, part, &victim)?;
    let now = env.member_with_role(ns, NAME, shard, "primary")?;
    println!(
        "operator_heal: {part}: {} deleted, shard {shard} primary now {} (was {}), healed in {:.1}s",
        victim.name,
        now.name,
        victim.name,
        took.as_secs_f64()
    );
    failover_told_and_writes_kept(env, ns, password, load, part, seen, &replica)
}

fn primary_process_killed(env: &Env, ns: &str, password: &str) -> Result<()> {
    let part = "(c) primary process killed";
    let dir = env.work_dir("operator_heal-c")?;
    let load = env.start_member_load(
        ns,
        NAME,
        password,
        &dir,
        "c",
        &["--interval-ms", "5", "--wait-replicas", "1"],
    )?;
    let seen = event_count(env, ns, NAME)?;

    let shard = 2;
    let victim = env.member_with_role(ns, NAME, shard, "primary")?;
    let replica = env.member_with_role(ns, NAME, shard, "replica")?;
    let old_restarts = env.pod_identities(ns, NAME)?[&victim.name].restarts;
    let old_id = env.node_id(&victim.ip, password)?;
    let pid = env.kill_valkey(&victim.ip)?;
    println!(
        "operator_heal: {part}: killed valkey-server pid {pid} of {} ({}), node {old_id}",
        victim.name, victim.ip
    );
    let replica_ip = replica.ip.clone();
    let took = wait_healed(env, ns, NAME, part, || {
        // Valkey's own failover: the replica says it is a primary now.
        let role = env
            .valkey_cli(&replica_ip, password, &["role"])
            .unwrap_or_default();
        Ok(role.starts_with("master"))
    })?;
    let ids = env.pod_identities(ns, NAME)?;
    let now = env.member_with_role(ns, NAME, shard, "primary")?;
    println!(
        "operator_heal: {part}: shard {shard} primary now {}; {} restarts {} -> {}; healed in {:.1}s",
        now.name,
        victim.name,
        old_restarts,
        ids.get(&victim.name).map_or(0, |p| p.restarts),
        took.as_secs_f64()
    );
    for ip in env.member_ips(ns, NAME)? {
        let nodes = env.cluster_nodes(&ip, password)?;
        ensure!(
            nodes.iter().all(|n| n.id != old_id || !n.is_primary()),
            "{part}: {ip} still has the killed node {old_id} as a primary"
        );
    }
    failover_told_and_writes_kept(env, ns, password, load, part, seen, &replica)
}

fn run(env: &Env, ns: &str) -> Result<()> {
    let took = env.create_cluster(ns, &cluster_manifest(NAME, 3, 1), READY_TIMEOUT)?;
    let password = env.password(ns, NAME)?;
    println!(
        "operator_heal: 3x1 Ready {:.1}s after apply",
        took.as_secs_f64()
    );
    for (part, f) in [
        (
            "a",
            replica_pod_deleted as fn(&Env, &str, &str) -> Result<()>,
        ),
        ("b", primary_pod_deleted),
        ("c", primary_process_killed),
    ] {
        let t = Instant::now();
        f(env, ns, &password)?;
        println!(
            "operator_heal: ({part}) took {:.1}s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

#[test]
fn deleted_pods_and_a_killed_primary_heal_to_ready_without_losing_acknowledged_writes() {
    let Some(suite) = Suite::start("operator_heal", "heal", "e2e-heal") else {
        return;
    };
    suite.run(&[NAME], run);
}

const PV_NAME: &str = "healpv";

fn persistent_primary_killed(env: &Env, ns: &str) -> Result<()> {
    let part = "(d) persistent primary process killed";
    let manifest = cluster_manifest(PV_NAME, 3, 1).persistence("64Mi", "Delete");
    let took = env
        .create_cluster(ns, &manifest, READY_TIMEOUT)
        .context("with persistence")?;
    println!(
        "operator_heal: 3x1 with persistence Ready {:.1}s after apply",
        took.as_secs_f64()
    );
    let password = env.password(ns, PV_NAME)?;
    let dir = env.work_dir("operator_heal-d")?;
    let load = env.start_member_load(
        ns,
        PV_NAME,
        &password,
        &dir,
        "d",
        &["--interval-ms", "5", "--wait-replicas", "1"],
    )?;
    let seen = event_count(env, ns, PV_NAME)?;

    let shard = 0;
    let victim = env.member_with_role(ns, PV_NAME, shard, "primary")?;
    let old_restarts = env.pod_identities(ns, PV_NAME)?[&victim.name].restarts;
    let old_id = env.node_id(&victim.ip, &password)?;
    let pid = env.kill_valkey(&victim.ip)?;
    let victim_name = victim.name.clone();
    let took = wait_healed(env, ns, PV_NAME, part, || {
        Ok(env
            .pod_identities(ns, PV_NAME)?
            .get(&victim_name)
            .is_some_and(|p| p.restarts > old_restarts))
    })?;
    let now = env.member_with_role(ns, PV_NAME, shard, "primary")?;
    println!(
        "operator_heal: {part}: killed pid {pid} of {}; shard {shard} primary now {}; healed in {:.1}s",
        victim.name,
        now.name,
        took.as_secs_f64()
    );
    // nodes.conf is on the volume: the restarted member is the same node.
    let ip = env
        .members(ns, PV_NAME)?
        .into_iter()
        .find(|m| m.name == victim.name)
        .map(|m| m.ip)
        .context("victim pod gone")?;
    let id = env.node_id(&ip, &password)?;
    ensure!(
        id == old_id,
        "{part}: {} came back as node {id}, was {old_id} (nodes.conf is on its volume)",
        victim.name
    );
    print_events(env, ns, PV_NAME, part, seen)?;
    finish_and_verify(env, ns, PV_NAME, &password, load, part)
}

#[test]
fn a_killed_primary_with_persistence_keeps_its_identity_and_every_confirmed_write() {
    let Some(suite) = Suite::start("operator_heal", "heal-persistent", "e2e-heal-pv") else {
        return;
    };
    let t = Instant::now();
    suite.run(&[PV_NAME], persistent_primary_killed);
    println!("operator_heal: (d) took {:.1}s", t.elapsed().as_secs_f64());
}
