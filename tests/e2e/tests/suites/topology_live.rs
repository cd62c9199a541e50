// Over 600 lines: tests, one scenario per function, read top to bottom.
//! Topology as a live invariant (issue 3), on the shared testbed (3 zones x 3 nodes):
//! 1. Zone loss: 3 shards x 2 replicas, zone Required 1 and node Required 1, a
//!    client writing throughout with `WAIT 1`. The zone of shard 0's primary
//!    fails: every slot is served again by a live primary within
//!    cluster-node-timeout (5 s) + 5 s; the lost members stay unready (nowhere
//!    else to go) with a condition naming the zone key; the zone heals: full
//!    membership, one primary per zone (`PrimaryPlacementAligned` True), and
//!    every WAIT-acknowledged key reads back.
//! 2. A primary's valkey-server is SIGKILLed: Valkey fails over, which puts two
//!    primaries in one zone; `PrimaryPlacementAligned` goes False, then, after
//!    the quiet period, True again with one primary per zone.
//! 3. Node loss with zone Preferred 1 and node Required 1: the other nodes of
//!    the lost replica's zone are cordoned, so its replacement has to share a
//!    zone with another member of its shard (`PreferredConstraintExceeded`);
//!    when the node heals the member moves back into its zone, surge-first:
//!    a sampler reads the shard primary's INFO replication every 150 ms and
//!    the shard never has fewer in-sync replicas than before the move (and
//!    one more while the new copy runs beside the old); the member ends on
//!    the healed zone under a later pod ordinal, MemberMoved events mark the
//!    start and the end, and `TopologySpread` is True again.
//!
//! Every fault is undone by a guard, also when the scenario fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, Load, MemberPod, condition, condition_status, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::finish_load;
use e2e::topology::{
    Faults, ZONE, cond_brief, current, node_required_holds, primary_zones, zones_of_nodes,
    zones_per_shard,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Quiet period given to `spec.primaryBalancing`.
const QUIET_SECONDS: u64 = 10;
/// cluster-node-timeout (5 s, owned by the operator) + 5 s.
const ALL_SLOTS_SERVED_WITHIN: Duration = Duration::from_secs(10);

fn manifest(name: &str, zone_mode: &str) -> String {
    cluster_manifest(name, 3, 2)
        .spread("zone", 1, zone_mode)
        .spread("node", 1, "Required")
        .extra_spec(&format!(
            "  primaryBalancing:\n    mode: Auto\n    quietPeriodSeconds: {QUIET_SECONDS}\n"
        ))
        .yaml()
}

fn member_of(members: &[MemberPod], shard: u32, role: &str) -> Result<MemberPod> {
    members
        .iter()
        .find(|m| m.shard == shard && m.role == role && !m.deleting)
        .cloned()
        .with_context(|| format!("shard {shard} has no pod labelled {role}: {members:#?}"))
}

/// Ready True, the 3x2 shape (all 9 members Ready, Valkey agrees, `--cluster
/// check` passes), and primaries on three different zones with
/// `PrimaryPlacementAligned` True. Errors say what is still missing.
fn whole_and_balanced(
    env: &Env,
    ns: &str,
    name: &str,
    zones: &BTreeMap<String, String>,
) -> Result<()> {
    let obj = env.cluster(ns, name)?;
    ensure!(current(&obj), "status.observedGeneration is behind");
    ensure!(
        condition_status(&obj, "Ready").as_deref() == Some("True"),
        "{}",
        cond_brief(&obj, "Ready")
    );
    ensure!(
        condition_status(&obj, "PrimaryPlacementAligned").as_deref() == Some("True"),
        "{}",
        cond_brief(&obj, "PrimaryPlacementAligned")
    );
    let shape = env.check_shape(ns, name, 3, 2)?;
    let pz = primary_zones(&shape.members, zones);
    let distinct: BTreeSet<&String> = pz.iter().collect();
    ensure!(
        distinct.len() == 3,
        "primaries are not one per zone: zones of primaries {pz:?}"
    );
    Ok(())
}

/// Waits (bounded) until [`whole_and_balanced`] holds; returns how long it took.
fn wait_whole_and_balanced(
    env: &Env,
    ns: &str,
    name: &str,
    zones: &BTreeMap<String, String>,
    timeout: Duration,
    what: &str,
) -> Result<Duration> {
    let started = Instant::now();
    let mut last = String::new();
    let res = wait_until(
        timeout,
        Duration::from_secs(1),
        || match whole_and_balanced(env, ns, name, zones) {
            Ok(()) => Ok(true),
            Err(e) => {
                last = format!("{e:#}");
                Ok(false)
            }
        },
    );
    if res.is_err() {
        bail!("{what}: not whole with balanced primaries within {timeout:?}: {last}");
    }
    Ok(started.elapsed())
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
    println!("topology_live: {part}: load {summary}; verify {verified}");
    Ok(())
}

/// Creates the cluster and waits until it is whole with balanced primaries.
fn create(
    env: &Env,
    ns: &str,
    name: &str,
    zone_mode: &str,
    zones: &BTreeMap<String, String>,
) -> Result<()> {
    let started = Instant::now();
    env.apply(ns, &manifest(name, zone_mode))?;
    env.wait_condition(ns, name, "Ready", "True", READY_TIMEOUT)?;
    wait_whole_and_balanced(env, ns, name, zones, READY_TIMEOUT, "after apply")?;
    println!(
        "topology_live: {name}: 3x2 (zone {zone_mode}) whole and balanced {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Whether, as the member at `observer` sees it, every slot is served by a
/// primary that is not one of `lost` and not flagged failed, and the cluster
/// state is ok.
fn all_slots_served_by_survivors(
    env: &Env,
    observer: &str,
    password: &str,
    lost: &BTreeSet<String>,
) -> Result<bool> {
    let info = env.valkey_cli(observer, password, &["cluster", "info"])?;
    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
        return Ok(false);
    }
    let nodes = env.cluster_nodes(observer, password)?;
    let served: u32 = nodes
        .iter()
        .filter(|n| n.is_primary() && !n.unhealthy() && !lost.contains(&n.ip))
        .map(|n| n.slots)
        .sum();
    Ok(served == 16384)
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn zone_loss(env: &Env, ns: &str, name: &str, undo: &mut Faults) -> Result<()> {
    let zones = zones_of_nodes(env)?;
    create(env, ns, name, "Required", &zones)?;
    let password = env.password(ns, name)?;
    let dir = env.work_dir("topology_live-zone")?;
    let load = env.start_member_load(
        ns,
        name,
        &password,
        &dir,
        "zone",
        &["--interval-ms", "5", "--wait-replicas", "1"],
    )?;

    let members = env.members(ns, name)?;
    let primary0 = member_of(&members, 0, "primary")?;
    let zone = zones
        .get(&primary0.node)
        .cloned()
        .with_context(|| format!("zone of node {}", primary0.node))?;
    let lost: Vec<MemberPod> = members
        .iter()
        .filter(|m| zones.get(&m.node) == Some(&zone))
        .cloned()
        .collect();
    ensure!(
        lost.len() == 3 && lost.iter().map(|m| m.shard).collect::<BTreeSet<_>>().len() == 3,
        "zone Required 1 should put one member of each shard in {zone}: {members:#?}"
    );
    let lost_ips: BTreeSet<String> = lost.iter().map(|m| m.ip.clone()).collect();
    let lost_names: BTreeSet<String> = lost.iter().map(|m| m.name.clone()).collect();
    let observer = members
        .iter()
        .find(|m| !lost_ips.contains(&m.ip))
        .map(|m| m.ip.clone())
        .context("no surviving member")?;
    println!(
        "topology_live: zone loss: failing {zone} (shard 0 primary {} on {}); lost members {lost_names:?}",
        primary0.name, primary0.node
    );

    let fault_at = Instant::now();
    undo.zone_fail(&zone)?;
    let fail_cmd = fault_at.elapsed();
    let mut served_at = None;
    let mut last_err = String::new();
    while fault_at.elapsed() < ALL_SLOTS_SERVED_WITHIN + Duration::from_secs(50) {
        match all_slots_served_by_survivors(env, &observer, &password, &lost_ips) {
            Ok(true) => {
                served_at = Some(fault_at.elapsed());
                break;
            }
            Ok(false) => {}
            Err(e) => last_err = format!("{e:#}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(served) = served_at else {
        bail!(
            "zone loss: slots never all served by surviving primaries within 60 s (observer {observer}); last error: {last_err}; CLUSTER NODES: {:#?}",
            env.cluster_nodes(&observer, &password)
        );
    };
    println!(
        "topology_live: FIGURE zone loss to all slots served: {:.2}s (the `testbed zone fail` command itself took {:.2}s)",
        served.as_secs_f64(),
        fail_cmd.as_secs_f64()
    );
    ensure!(
        served <= ALL_SLOTS_SERVED_WITHIN,
        "zone loss: all slots served again only after {served:?}, want <= {ALL_SLOTS_SERVED_WITHIN:?}"
    );

    // The lost members have nowhere to go: they stay unready, never placed
    // outside their zone, and status says why, naming the zone key.
    let mut last = Value::Null;
    let mut last_members = Vec::new();
    let explained = wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        let Ok(obj) = env.cluster(ns, name) else {
            return Ok(false);
        };
        let names_zone = |c: &str, status: &str| {
            condition(&obj, c).is_some_and(|c| {
                c["status"] == status && c["message"].as_str().unwrap_or("").contains(ZONE)
            })
        };
        let ok = names_zone("TopologySpread", "False") || names_zone("Degraded", "True");
        last = obj;
        last_members = env.members(ns, name).unwrap_or_default();
        let lost_unready = last_members
            .iter()
            .filter(|m| lost_names.contains(&m.name))
            .all(|m| !m.ready);
        Ok(ok && lost_unready)
    });
    if explained.is_err() {
        bail!(
            "zone loss: within 120 s, want the lost members unready and TopologySpread False / Degraded True naming {ZONE}: {} / {}; members: {last_members:#?}; status: {}",
            cond_brief(&last, "TopologySpread"),
            cond_brief(&last, "Degraded"),
            serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
        );
    }
    println!(
        "topology_live: FIGURE zone loss to status told (lost members unready, the zone named): {:.1}s",
        fault_at.elapsed().as_secs_f64()
    );
    println!(
        "topology_live: zone loss: {}; {}",
        cond_brief(&last, "TopologySpread"),
        cond_brief(&last, "Degraded")
    );
    // Hold for a while: the lost members stay unready and out of other zones.
    let hold_until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < hold_until {
        last_members = env.members(ns, name).unwrap_or_default();
        for m in last_members.iter().filter(|m| lost_names.contains(&m.name)) {
            ensure!(
                !m.ready,
                "zone loss: {} is Ready while its zone {zone} is down: {m:?}",
                m.name
            );
            ensure!(
                m.node.is_empty() || zones.get(&m.node) == Some(&zone),
                "zone loss: {} was placed on {} outside {zone}, breaking zone Required 1: {last_members:#?}",
                m.name,
                m.node
            );
        }
        let survivors_ready = last_members
            .iter()
            .filter(|m| !lost_names.contains(&m.name) && m.ready)
            .count();
        ensure!(
            survivors_ready == 6,
            "zone loss: {survivors_ready} of the 6 surviving members are Ready: {last_members:#?}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    println!(
        "topology_live: zone loss: lost members while {zone} is down: {:?}",
        last_members
            .iter()
            .filter(|m| lost_names.contains(&m.name))
            .map(|m| format!("{} phase={} node={:?}", m.name, m.phase, m.node))
            .collect::<Vec<_>>()
    );

    let heal_at = Instant::now();
    undo.zone_heal(&zone)?;
    wait_whole_and_balanced(env, ns, name, &zones, Duration::from_secs(300), "zone heal")?;
    println!(
        "topology_live: FIGURE zone heal to full membership and balanced primaries: {:.1}s",
        heal_at.elapsed().as_secs_f64()
    );
    finish_and_verify(env, ns, name, &password, load, "zone loss")
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn primary_killed(env: &Env, ns: &str, name: &str) -> Result<()> {
    let zones = zones_of_nodes(env)?;
    create(env, ns, name, "Required", &zones)?;
    let password = env.password(ns, name)?;
    let dir = env.work_dir("topology_live-kill")?;
    let load = env.start_member_load(
        ns,
        name,
        &password,
        &dir,
        "kill",
        &["--interval-ms", "5", "--wait-replicas", "1"],
    )?;

    let members = env.members(ns, name)?;
    let shard = 1;
    let victim = member_of(&members, shard, "primary")?;
    let replicas: Vec<MemberPod> = members
        .iter()
        .filter(|m| m.shard == shard && m.role == "replica")
        .cloned()
        .collect();
    let pid = env.valkey_pid(&victim.ip)?;
    let killed_at = Instant::now();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -KILL {pid} failed");
    println!(
        "topology_live: primary killed: SIGKILL valkey-server pid {pid} of {} ({}, {})",
        victim.name,
        victim.ip,
        zones.get(&victim.node).cloned().unwrap_or_default()
    );

    // Valkey fails over: one of the shard's replicas says it is a primary.
    let mut promoted = None;
    wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        for r in &replicas {
            let role = env
                .valkey_cli(&r.ip, &password, &["role"])
                .unwrap_or_default();
            if role.starts_with("master") {
                promoted = Some(r.clone());
                return Ok(true);
            }
        }
        Ok(false)
    })
    .context("primary killed: no replica of the shard was promoted within 30 s")?;
    let promoted = promoted.context("promoted")?;
    println!(
        "topology_live: primary killed: Valkey promoted {} ({}) after {:.1}s",
        promoted.name,
        zones.get(&promoted.node).cloned().unwrap_or_default(),
        killed_at.elapsed().as_secs_f64()
    );

    // Two primaries now share the promoted replica's zone: the condition says
    // a move is pending ...
    let mut last = Value::Null;
    let went_false = wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        let Ok(obj) = env.cluster(ns, name) else {
            return Ok(false);
        };
        let f = condition_status(&obj, "PrimaryPlacementAligned").as_deref() == Some("False");
        last = obj;
        Ok(f)
    });
    if went_false.is_err() {
        bail!(
            "primary killed: PrimaryPlacementAligned never went False; {}; status: {}",
            cond_brief(&last, "PrimaryPlacementAligned"),
            serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
        );
    }
    println!(
        "topology_live: primary killed: {} at {:.1}s after the kill",
        cond_brief(&last, "PrimaryPlacementAligned"),
        killed_at.elapsed().as_secs_f64()
    );

    // ... and after the quiet period the operator restores the balance.
    let mut last_err = String::new();
    let res = wait_until(Duration::from_secs(240), Duration::from_millis(500), || {
        let Ok(obj) = env.cluster(ns, name) else {
            return Ok(false);
        };
        if condition_status(&obj, "PrimaryPlacementAligned").as_deref() != Some("True") {
            last_err = cond_brief(&obj, "PrimaryPlacementAligned");
            return Ok(false);
        }
        Ok(true)
    });
    if res.is_err() {
        bail!("primary killed: PrimaryPlacementAligned never went True again: {last_err}");
    }
    let aligned_after = killed_at.elapsed();
    println!(
        "topology_live: FIGURE primary kill to PrimaryPlacementAligned True: {:.1}s (quiet period {QUIET_SECONDS}s)",
        aligned_after.as_secs_f64()
    );
    ensure!(
        aligned_after >= Duration::from_secs(QUIET_SECONDS),
        "primary killed: balance restored {aligned_after:?} after the kill, before the quiet period of {QUIET_SECONDS}s"
    );
    wait_whole_and_balanced(
        env,
        ns,
        name,
        &zones,
        Duration::from_secs(240),
        "primary killed",
    )?;
    println!(
        "topology_live: primary killed: whole and balanced {:.1}s after the kill; primaries in {:?}",
        killed_at.elapsed().as_secs_f64(),
        primary_zones(&env.members(ns, name)?, &zones)
    );
    finish_and_verify(env, ns, name, &password, load, "primary killed")
}

/// In-sync replicas of a shard's primary at `ip`, from its INFO replication:
/// replicas `state=online`, heard from within 3 s, within 1 MiB of the
/// primary's offset (the bound the operator uses). `Ok(None)` when `ip` is not a primary (any more).
fn in_sync_replicas(env: &Env, ip: &str, password: &str) -> Result<Option<(u32, String)>> {
    let info = env.valkey_cli(ip, password, &["info", "replication"])?;
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(k).map(str::to_string))
    };
    if field("role:").as_deref() != Some("master") {
        return Ok(None);
    }
    let offset: i64 = field("master_repl_offset:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut count = 0;
    let mut who = Vec::new();
    for line in info
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("slave"))
    {
        let Some((_, kv)) = line.split_once(':') else {
            continue;
        };
        let get = |k: &str| {
            kv.split(',')
                .find_map(|p| p.strip_prefix(k).map(str::to_string))
                .unwrap_or_default()
        };
        let online = get("state=") == "online";
        let behind = offset - get("offset=").parse::<i64>().unwrap_or(0);
        // Replicas acknowledge every second: one silent for longer is gone
        // (a partitioned node stays `online` until repl-timeout, 60 s).
        let acked = get("lag=").parse::<u64>().is_ok_and(|l| l <= 3);
        if online && acked && behind <= 1 << 20 {
            count += 1;
            who.push(get("ip="));
        }
    }
    Ok(Some((count, who.join(","))))
}

/// What the sampler saw of one shard during the move back.
#[derive(Debug, Default, Clone)]
struct ShardSamples {
    /// In-sync replicas when the node healed.
    before: u32,
    min: Option<u32>,
    max: Option<u32>,
    samples: u32,
    /// Samples that could not be read (primary unreachable or changing).
    unread: u32,
    /// The first sample below `before`, with the replicas seen.
    first_dip: Option<String>,
}

/// Samples, every 150 ms until `stop`, the in-sync replicas of each shard in
/// `primaries` (shard -> primary IP, followed when the primary changes).
fn sample_shards(
    env: Env,
    password: String,
    primaries: BTreeMap<u32, String>,
    before: BTreeMap<u32, u32>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> BTreeMap<u32, ShardSamples> {
    let mut out: BTreeMap<u32, ShardSamples> = before
        .iter()
        .map(|(s, b)| {
            (
                *s,
                ShardSamples {
                    before: *b,
                    ..Default::default()
                },
            )
        })
        .collect();
    let mut primaries = primaries;
    let started = Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for (shard, ip) in primaries.iter_mut() {
            let Some(seen) = out.get_mut(shard) else {
                continue;
            };
            seen.samples += 1;
            match in_sync_replicas(&env, ip, &password) {
                Ok(Some((n, who))) => {
                    seen.min = Some(seen.min.map_or(n, |m| m.min(n)));
                    seen.max = Some(seen.max.map_or(n, |m| m.max(n)));
                    if n < seen.before && seen.first_dip.is_none() {
                        seen.first_dip = Some(format!(
                            "{n} in-sync replica(s) [{who}] at {:.1}s",
                            started.elapsed().as_secs_f64()
                        ));
                    }
                }
                Ok(None) => {
                    // A replica now: follow its primary.
                    seen.unread += 1;
                    if let Ok(info) = env.valkey_cli(ip, &password, &["info", "replication"])
                        && let Some(host) = info
                            .lines()
                            .find_map(|l| l.trim().strip_prefix("master_host:"))
                    {
                        *ip = host.to_string();
                    }
                }
                Err(_) => seen.unread += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    out
}

/// The ordinal of a member pod's name (`<cluster>-<shard>-<member>-<ordinal>`).
fn ordinal(pod: &str) -> Option<u32> {
    pod.rsplit_once('-').and_then(|(_, o)| o.parse().ok())
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn node_loss(env: &Env, ns: &str, name: &str, undo: &mut Faults) -> Result<()> {
    let zones = zones_of_nodes(env)?;
    create(env, ns, name, "Preferred", &zones)?;
    let members = env.members(ns, name)?;
    for (shard, z) in zones_per_shard(&members, &zones) {
        ensure!(
            z.len() == 3,
            "zone Preferred 1 fits exactly: shard {shard} should span 3 zones: {members:#?}"
        );
    }
    // A replica, preferably alone on its node.
    let on_node = |node: &str| members.iter().filter(|m| m.node == node).count();
    let victim = members
        .iter()
        .filter(|m| m.role == "replica")
        .min_by_key(|m| on_node(&m.node))
        .cloned()
        .context("no replica")?;
    let node = victim.node.clone();
    let zone = zones.get(&node).cloned().context("zone of the node")?;
    // Members are followed by (shard, member): a member that moves surge-first
    // comes back under a later pod ordinal.
    let lost: BTreeSet<(u32, u32)> = members
        .iter()
        .filter(|m| m.node == node)
        .map(|m| (m.shard, m.member))
        .collect();
    let others: Vec<String> = zones
        .iter()
        .filter(|(n, z)| **z == zone && **n != node)
        .map(|(n, _)| n.clone())
        .collect();
    for n in &others {
        undo.cordon(n)?;
    }
    println!(
        "topology_live: node loss: failing {node} ({zone}) with (shard, member) {lost:?}; cordoned {others:?} so the replacement must leave {zone}"
    );
    let fault_at = Instant::now();
    undo.node_fail(&node)?;

    // Re-created on another node (necessarily another zone), Ready, and the
    // Preferred breach reported.
    let mut last_err = String::new();
    let mut saw_exceeded = false;
    let mut last = Value::Null;
    let live = |ms: &[MemberPod], k: &(u32, u32)| -> Option<MemberPod> {
        ms.iter()
            .find(|m| (m.shard, m.member) == *k && m.ready && !m.deleting)
            .cloned()
    };
    let res = wait_until(Duration::from_secs(240), Duration::from_secs(1), || {
        let Ok(obj) = env.cluster(ns, name) else {
            return Ok(false);
        };
        if condition(&obj, "TopologySpread")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "PreferredConstraintExceeded")
        {
            saw_exceeded = true;
        }
        let ready = condition_status(&obj, "Ready").as_deref() == Some("True") && current(&obj);
        last = obj;
        let ms = env.members(ns, name).unwrap_or_default();
        let moved = lost
            .iter()
            .all(|k| live(&ms, k).is_some_and(|m| m.node != node));
        if !(moved && ready) {
            last_err = format!(
                "moved={moved} {}; members: {ms:#?}",
                cond_brief(&last, "Ready")
            );
            return Ok(false);
        }
        match env.check_shape(ns, name, 3, 2) {
            Ok(_) => Ok(saw_exceeded),
            Err(e) => {
                last_err = format!("{e:#}");
                Ok(false)
            }
        }
    });
    if res.is_err() {
        bail!(
            "node loss: {lost:?} not re-created off {node} and Ready with PreferredConstraintExceeded reported (seen: {saw_exceeded}) within 240 s: {last_err}; {}",
            cond_brief(&last, "TopologySpread")
        );
    }
    let ms = env.members(ns, name)?;
    node_required_holds(&ms)?;
    let away: BTreeMap<(u32, u32), MemberPod> = lost
        .iter()
        .filter_map(|k| live(&ms, k).map(|m| (*k, m)))
        .collect();
    println!(
        "topology_live: FIGURE node loss to replacement in sync: {:.1}s; {}; now {:?}",
        fault_at.elapsed().as_secs_f64(),
        cond_brief(&last, "TopologySpread"),
        away.values()
            .map(|m| format!("{} on {} ({})", m.name, m.node, zones[&m.node]))
            .collect::<Vec<_>>()
    );

    // Before the node heals: each affected shard's in-sync replicas, then a
    // sampler watches them through the move back.
    let password = env.password(ns, name)?;
    let shards: BTreeSet<u32> = lost.iter().map(|(s, _)| *s).collect();
    let mut primaries = BTreeMap::new();
    let mut before = BTreeMap::new();
    for s in &shards {
        let p = member_of(&ms, *s, "primary")?;
        let (n, who) = in_sync_replicas(env, &p.ip, &password)?
            .with_context(|| format!("{} labelled primary is not one", p.name))?;
        println!("topology_live: shard {s}: {n} in-sync replica(s) [{who}] before the move back");
        primaries.insert(*s, p.ip.clone());
        before.insert(*s, n);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (env, password, stop) = (env.clone(), password.clone(), stop.clone());
        let before = before.clone();
        std::thread::spawn(move || sample_shards(env, password, primaries, before, stop))
    };

    // The node comes back: the members move back into their zone (its only
    // schedulable node), surge-first, and the constraint holds again.
    let heal_at = Instant::now();
    undo.node_heal(&node)?;
    let mut last_err = String::new();
    let res = wait_until(Duration::from_secs(300), Duration::from_secs(1), || {
        let Ok(obj) = env.cluster(ns, name) else {
            return Ok(false);
        };
        let ms = env.members(ns, name).unwrap_or_default();
        let spread = zones_per_shard(&ms, &zones);
        let ok = condition_status(&obj, "TopologySpread").as_deref() == Some("True")
            && condition_status(&obj, "Ready").as_deref() == Some("True")
            && current(&obj)
            && spread.values().all(|z| z.len() == 3)
            && lost
                .iter()
                .all(|k| live(&ms, k).is_some_and(|m| zones.get(&m.node) == Some(&zone)));
        if !ok {
            last_err = format!(
                "{}; {}; zones per shard {spread:?}; members {ms:#?}",
                cond_brief(&obj, "TopologySpread"),
                cond_brief(&obj, "Ready")
            );
            return Ok(false);
        }
        match env.check_shape(ns, name, 3, 2) {
            Ok(_) => Ok(true),
            Err(e) => {
                last_err = format!("{e:#}");
                Ok(false)
            }
        }
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let samples = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
    if res.is_err() {
        bail!(
            "node loss: after node heal the members did not move back into {zone}: {last_err}; samples {samples:?}"
        );
    }
    let ms = env.members(ns, name)?;
    node_required_holds(&ms)?;
    println!(
        "topology_live: FIGURE node heal to constraint met again: {:.1}s; in-sync replicas during the move back: {samples:?}",
        heal_at.elapsed().as_secs_f64()
    );

    // Never a copy less: every sample of every affected shard had at least
    // the in-sync replicas it had before, and the new copy was in sync beside
    // the old one at some point (one more than before).
    for (s, seen) in &samples {
        ensure!(
            seen.first_dip.is_none(),
            "shard {s} dropped below its {} in-sync replica(s) during the move back: {seen:?}",
            seen.before
        );
        ensure!(
            seen.samples > 0 && seen.unread * 10 <= seen.samples,
            "shard {s}: too few readable samples during the move back: {seen:?}"
        );
        let moving = lost.iter().filter(|(ls, _)| ls == s).count() as u32;
        ensure!(
            seen.max.unwrap_or(0) > seen.before || moving == 0,
            "shard {s}: never saw the new copy in sync beside the old one ({seen:?})"
        );
    }
    // Each moved member came back on the healed zone under a later ordinal
    // (its new copy), and the operator said so when the move started and
    // when the old copy went.
    let events = env.object_events(ns, "ValkeyCluster", name)?;
    for k in &lost {
        let now = live(&ms, k).with_context(|| format!("{k:?} has no Ready pod"))?;
        ensure!(
            zones.get(&now.node) == Some(&zone),
            "{k:?} is on {} ({:?}), not back in {zone}",
            now.node,
            zones.get(&now.node)
        );
        let was = away.get(k).map(|m| m.name.clone()).unwrap_or_default();
        ensure!(
            ordinal(&now.name) > ordinal(&was),
            "{k:?}: pod {} is not a new copy of {was} (surge-first moves use the next ordinal)",
            now.name
        );
        let about = format!("shard {} member {}", k.0, k.1);
        let moved: Vec<&str> = events
            .iter()
            .filter(|e| e.reason == "MemberMoved" && e.message.contains(&about))
            .map(|e| e.message.as_str())
            .collect();
        ensure!(
            moved
                .iter()
                .any(|m| m.contains("new copy") && m.contains("starts"))
                && moved.iter().any(|m| m.contains("removing the old copy")),
            "{about}: MemberMoved events for the start and the end of the move are missing: {moved:?}"
        );
    }
    let obj = env.cluster(ns, name)?;
    let last_action = obj["status"]["lastAction"].as_str().unwrap_or_default();
    println!("topology_live: node loss: status.lastAction: {last_action}");
    undo.uncordon_all()?;
    Ok(())
}

fn run_scenario(suite: &str, name: &str, f: fn(&Env, &str, &str, &mut Faults) -> Result<()>) {
    let Some(env) = Env::or_skip("topology_live") else {
        return;
    };
    env.install_crd().unwrap();
    let operator = env.start_operator(suite).unwrap();
    let ns = env.namespace(&format!("e2e-{suite}")).unwrap();
    let started = Instant::now();
    let res = {
        let mut undo = Faults::new(&env, "topology_live");
        f(&env, &ns.name, name, &mut undo)
        // undo drops here: faults healed before the diagnostics are taken.
    };
    if let Err(e) = res {
        panic!("{e:#}\n{}", env.diagnostics(&ns.name, name, &operator));
    }
    println!(
        "topology_live: {suite} took {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn zone_loss_keeps_slots_served_and_heals_to_full_membership_and_balanced_primaries() {
    run_scenario("topo-zone", "zl", zone_loss);
}

#[test]
fn a_killed_primary_fails_over_and_balance_is_restored_after_the_quiet_period() {
    run_scenario("topo-kill", "pk", |env, ns, name, _undo| {
        primary_killed(env, ns, name)
    });
}

#[test]
fn node_loss_with_preferred_zone_moves_the_member_away_and_back_after_heal() {
    run_scenario("topo-node", "nl", node_loss);
}
