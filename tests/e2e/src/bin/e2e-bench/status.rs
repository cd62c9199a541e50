//! Issue 13, goal 2: the status tells the truth within seconds. On one 3x2
//! cluster (zone Required 1) and an operator with the default cadences
//! (resync 30 s, pulse 2 s), each fault Valkey or the testbed makes is timed
//! from the fault to the moment the ValkeyCluster (or the role label) says
//! so, and from its end to the moment it says the cluster is whole again:
//!
//! - a failover Valkey made on its own (CLUSTER FAILOVER sent to a replica)
//!   -> the role label of the promoted replica says `primary`;
//! - a member that stops answering (its valkey-server SIGSTOPped) -> Ready
//!   False; SIGCONT -> Ready True;
//! - a replica's link to its primary lost (the replica's `primaryauth` made
//!   wrong and its link killed, so it cannot re-authenticate) -> Ready False;
//!   the right `primaryauth` back -> Ready True;
//! - a zone fails -> Ready False or Degraded True; it heals -> every member
//!   Ready, one primary per zone (`PrimaryPlacementAligned` True) and Ready
//!   True, with the balancing's quiet period at 10 s as in `topology_live`.

use crate::goal;
use anyhow::{Context, Result, bail};
use e2e::cluster::{Env, MemberPod, condition_status};
use e2e::topology::{Faults, cond_brief, primary_zones, zones_of_nodes};
use std::process::Command;
use std::time::{Duration, Instant};

/// How often the status is read while a figure is timed (one kubectl call
/// takes about 50-100 ms on top).
const POLL: Duration = Duration::from_millis(100);

/// The goal of every "says so" figure.
const SAYS_SO_WITHIN: f64 = 5.0;

/// Seconds from now until `done` holds (read every [`POLL`]), or an error
/// after `limit`.
fn time_until(limit: Duration, what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<f64> {
    let started = Instant::now();
    let mut last_err = String::new();
    while started.elapsed() < limit {
        match done() {
            Ok(true) => return Ok(started.elapsed().as_secs_f64()),
            Ok(false) => {}
            Err(e) => last_err = format!("{e:#}"),
        }
        std::thread::sleep(POLL);
    }
    bail!("{what}: not within {limit:?} (last error: {last_err})")
}

/// Lets the cluster be steady before the next fault: past the fast
/// requeues of the last change, so each figure is what the pulse and the
/// watches catch, not a reconcile that happened to be running.
fn steady() {
    std::thread::sleep(Duration::from_secs(5));
}

fn says(env: &Env, ns: &str, name: &str, cond: &str, status: &str) -> Result<bool> {
    let obj = env.cluster(ns, name)?;
    Ok(condition_status(&obj, cond).as_deref() == Some(status))
}

fn ready_is(env: &Env, ns: &str, name: &str, status: &str) -> Result<bool> {
    says(env, ns, name, "Ready", status)
}

/// The first member of `shard` whose role label is `role`.
fn with_role(members: &[MemberPod], shard: u32, role: &str) -> Result<MemberPod> {
    members
        .iter()
        .find(|m| m.shard == shard && m.role == role)
        .cloned()
        .with_context(|| format!("no {role} in shard {shard}: {members:#?}"))
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()?
        .success();
    if !ok {
        bail!("kill {sig} {pid} failed");
    }
    Ok(())
}

fn figure(what: &str, seconds: f64) {
    println!(
        "status truth: {what}: {seconds:.1} s {}",
        goal(&format!("< {SAYS_SO_WITHIN} s"), seconds < SAYS_SO_WITHIN)
    );
}

/// What the status said when a figure was taken.
fn said_what(env: &Env, ns: &str, name: &str) -> String {
    env.cluster(ns, name)
        .map(|obj| {
            format!(
                "{}; {}",
                cond_brief(&obj, "Ready"),
                cond_brief(&obj, "Degraded")
            )
        })
        .unwrap_or_default()
}

/// Whole and balanced: every member Ready, Ready True, one primary per
/// zone and `PrimaryPlacementAligned` True.
fn whole_and_balanced(
    env: &Env,
    ns: &str,
    name: &str,
    total: usize,
    zones: &std::collections::BTreeMap<String, String>,
) -> Result<bool> {
    let members = env.members(ns, name)?;
    if members.len() != total || !members.iter().all(|m| m.ready) {
        return Ok(false);
    }
    let mut pz = primary_zones(&members, zones);
    pz.dedup();
    if pz.len() != 3 {
        return Ok(false);
    }
    Ok(ready_is(env, ns, name, "True")? && says(env, ns, name, "PrimaryPlacementAligned", "True")?)
}

/// Runs every fault of goal 2 on `name` (3x2, Ready) in `ns`.
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub fn figures(env: &Env, ns: &str, name: &str) -> Result<()> {
    let settle = Duration::from_secs(120);
    env.wait_condition(ns, name, "Ready", "True", settle)?;
    steady();
    let password = env.password(ns, name)?;

    // A failover Valkey made on its own.
    let members = env.members(ns, name)?;
    let replica = with_role(&members, 0, "replica")?;
    let reply = env.valkey_cli(&replica.ip, &password, &["cluster", "failover"])?;
    if reply.trim() != "OK" {
        bail!("CLUSTER FAILOVER on {}: {reply}", replica.name);
    }
    let shown = time_until(settle, "role label after a failover", || {
        Ok(env
            .members(ns, name)?
            .iter()
            .any(|m| m.name == replica.name && m.role == "primary"))
    })?;
    figure(
        "a failover Valkey made on its own -> the role label says so",
        shown,
    );
    env.wait_condition(ns, name, "Ready", "True", settle)?;
    steady();

    // A member that stops answering, and answers again.
    let members = env.members(ns, name)?;
    let silent = with_role(&members, 1, "replica")?;
    let pid = env.valkey_pid(&silent.ip)?;
    signal(pid, "-STOP")?;
    let said = time_until(
        settle,
        "Ready False after a member stopped answering",
        || ready_is(env, ns, name, "False"),
    );
    let what = said_what(env, ns, name);
    signal(pid, "-CONT")?;
    let said = said?;
    figure("a member stops answering (SIGSTOP) -> Ready False", said);
    println!("  ({what})");
    let back = time_until(settle, "Ready True after the member answers again", || {
        ready_is(env, ns, name, "True")
    })?;
    figure("it answers again (SIGCONT) -> Ready True", back);
    steady();

    // A replica whose link to its primary is lost.
    let members = env.members(ns, name)?;
    let cut = with_role(&members, 2, "replica")?;
    env.valkey_cli(
        &cut.ip,
        &password,
        &["config", "set", "primaryauth", "not-the-password"],
    )?;
    env.valkey_cli(&cut.ip, &password, &["client", "kill", "type", "master"])?;
    let said = time_until(settle, "Ready False after a replica lost its link", || {
        ready_is(env, ns, name, "False")
    });
    let what = said_what(env, ns, name);
    // Replicas log in as the replication user, with its own password.
    let replication = env.secret_text(ns, &format!("{name}-users"), "replication-password")?;
    env.valkey_cli(
        &cut.ip,
        &password,
        &["config", "set", "primaryauth", &replication],
    )?;
    let said = said?;
    figure(
        "a replica's link to its primary lost (wrong primaryauth, link killed) -> Ready False",
        said,
    );
    println!("  ({what})");
    let back = time_until(settle, "Ready True after the link is back", || {
        ready_is(env, ns, name, "True")
    })?;
    figure("the link comes back -> Ready True", back);
    steady();

    // A zone fails, then heals.
    env.patch_cluster(
        ns,
        name,
        r#"{"spec":{"primaryBalancing":{"quietPeriodSeconds":10}}}"#,
    )?;
    let zones = zones_of_nodes(env)?;
    time_until(settle, "whole and balanced before the zone fault", || {
        whole_and_balanced(env, ns, name, 9, &zones)
    })?;
    let members = env.members(ns, name)?;
    let primary = with_role(&members, 0, "primary")?;
    let zone = zones
        .get(&primary.node)
        .cloned()
        .with_context(|| format!("zone of node {}", primary.node))?;
    let mut faults = Faults::new(env, "e2e-bench");
    faults.zone_fail(&zone)?;
    let said = time_until(settle, "the status after a zone failed", || {
        Ok(ready_is(env, ns, name, "False")? || says(env, ns, name, "Degraded", "True")?)
    })?;
    figure(
        &format!("zone {zone} fails -> Ready False or Degraded True"),
        said,
    );
    println!("  ({})", said_what(env, ns, name));
    // As in topology_live: the zone stays down a while.
    std::thread::sleep(Duration::from_secs(20));
    faults.zone_heal(&zone)?;
    let healed = time_until(
        Duration::from_secs(300),
        "whole and balanced after the zone healed",
        || whole_and_balanced(env, ns, name, 9, &zones),
    )?;
    println!(
        "status truth: zone {zone} heals -> every member Ready, one primary per zone, Ready True (quiet period 10 s): {healed:.1} s {}",
        goal("< 41.5 s (half of 83 s)", healed < 41.5)
    );
    Ok(())
}
