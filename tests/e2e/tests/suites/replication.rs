//! ValkeyReplication: one primary and two replicas, no cluster mode, spread
//! over three zones (Required), with a writer through Service `<name>` whose
//! writes are acknowledged by `WAIT 1`:
//!
//! - Ready, one member per zone; Service `<name>` reaches only the primary,
//!   `<name>-ro` only the replicas; `status.primary` names the one pod
//!   labelled `valkey.rs/role=primary`;
//! - (a) the primary's pod is deleted, (b) the primary's node fails, (c) the
//!   primary's server is killed without saving and restarts empty: each
//!   time the writes through the same Service resume within 30 s, nothing
//!   acknowledged is lost, and the old primary comes back as a replica;
//! - scale 2 -> 3 -> 1 replicas under writes, then a rolling restart (a
//!   resources change) under writes: nothing acknowledged lost.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, Load, condition, wait_until};
use e2e::suite::{Suite, finish_load, wait_load_running};
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const NAME: &str = "cache";
const READY_TIMEOUT: Duration = Duration::from_secs(240);
/// From a fault to writes acknowledged again (the issue's bound).
const RESUME_BOUND: Duration = Duration::from_secs(30);

fn manifest(replicas: u32, extra: &str) -> String {
    format!(
        "apiVersion: valkey.rs/v1alpha1\n\
         kind: ValkeyReplication\n\
         metadata:\n  name: {NAME}\n\
         spec:\n  replicas: {replicas}\n\
         \x20 replicaSpreadConstraints:\n\
         \x20   - {{topologyKey: zone, maxReplicas: 1, mode: Required}}\n{extra}"
    )
}

fn set(env: &Env, ns: &str) -> Result<Value> {
    env.kubectl_json(&["get", "valkeyreplication", NAME, "-n", ns])
}

/// Waits until the set is Ready for its current generation with
/// `replicas` replicas in sync and nothing left to do. Returns the time it
/// took.
fn wait_ready(env: &Env, ns: &str, replicas: u64, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    let mut last = Value::Null;
    wait_until(timeout, Duration::from_millis(250), || {
        last = set(env, ns)?;
        let ready = condition(&last, "Ready").is_some_and(|c| c["status"] == "True");
        // Nothing left to do (no roll under way).
        let stable = condition(&last, "Progressing").is_some_and(|c| c["reason"] == "Stable");
        Ok(ready
            && stable
            && last["status"]["observedGeneration"] == last["metadata"]["generation"]
            && last["status"]["readyReplicas"].as_u64() == Some(replicas))
    })
    .with_context(|| format!("not Ready with {replicas} replicas: {}", last["status"]))?;
    Ok(started.elapsed())
}

/// The member pods: name -> (ip, role label, node).
fn pods(env: &Env, ns: &str) -> Result<Vec<(String, String, String, String)>> {
    let list = env.kubectl_json(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        &format!("valkey.rs/replication={NAME}"),
    ])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&p["metadata"]["name"]),
                s(&p["status"]["podIP"]),
                s(&p["metadata"]["labels"]["valkey.rs/role"]),
                s(&p["spec"]["nodeName"]),
            )
        })
        .collect())
}

/// The uids of the member pods (those being deleted included).
fn pod_uids(env: &Env, ns: &str) -> Result<BTreeSet<String>> {
    let label = format!("valkey.rs/replication={NAME}");
    let list = env.kubectl_json(&["get", "pods", "-n", ns, "-l", &label])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_string))
        .collect())
}

/// A merge patch of the set's spec.
fn patch_spec(env: &Env, ns: &str, spec: &str) -> Result<()> {
    let patch = format!("{{\"spec\":{spec}}}");
    env.kubectl(&[
        "patch",
        "valkeyreplication",
        NAME,
        "-n",
        ns,
        "--type=merge",
        "-p",
        &patch,
    ])?;
    Ok(())
}

/// The ready addresses of Service `svc`'s EndpointSlices.
fn endpoints(env: &Env, ns: &str, svc: &str) -> Result<BTreeSet<String>> {
    let slices = env.kubectl_json(&[
        "get",
        "endpointslices",
        "-n",
        ns,
        "-l",
        &format!("kubernetes.io/service-name={svc}"),
    ])?;
    Ok(slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] != false)
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect())
}

/// One primary label, on the pod `status.primary` names; the Services route
/// to it and to the replicas in sync (`replicas` of them). Returns the
/// primary's (pod, ip, node).
fn check_routing(env: &Env, ns: &str, replicas: usize) -> Result<(String, String, String)> {
    let mut last = String::new();
    let mut found = None;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        let pods = pods(env, ns)?;
        let primaries: Vec<_> = pods.iter().filter(|p| p.2 == "primary").collect();
        let replica_ips: BTreeSet<String> = pods
            .iter()
            .filter(|p| p.2 == "replica")
            .map(|p| p.1.clone())
            .collect();
        let status_primary = set(env, ns)?["status"]["primary"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let [primary] = primaries.as_slice() else {
            last = format!("{} pods labelled primary: {pods:?}", primaries.len());
            return Ok(false);
        };
        let rw = endpoints(env, ns, NAME)?;
        let ro = endpoints(env, ns, &format!("{NAME}-ro"))?;
        let ok = primary.0 == status_primary
            && rw == BTreeSet::from([primary.1.clone()])
            && ro == replica_ips
            && replica_ips.len() == replicas;
        last = format!(
            "status.primary {status_primary}, labelled {primary:?}; {NAME} -> {rw:?}, \
             {NAME}-ro -> {ro:?}, replicas {replica_ips:?}"
        );
        if ok {
            found = Some((primary.0.clone(), primary.1.clone(), primary.3.clone()));
        }
        Ok(ok)
    })
    .with_context(|| format!("routing not as expected: {last}"))?;
    found.context("no primary")
}

/// Waits until the writer's acknowledged keys grow by 20 after `since`
/// (writes resumed). Returns how long after `since` they did.
fn resumed(load: &Load, since: Instant, before: usize) -> Result<Duration> {
    wait_until(RESUME_BOUND * 2, Duration::from_millis(100), || {
        Ok(load.acked_so_far() >= before + 20)
    })
    .context("the writes did not resume")?;
    let took = since.elapsed();
    ensure!(
        took <= RESUME_BOUND,
        "writes resumed only {:.1}s after the fault (bound {RESUME_BOUND:?})",
        took.as_secs_f64()
    );
    Ok(took)
}

fn service_ip(env: &Env, ns: &str) -> Result<String> {
    let svc = env.kubectl_json(&["get", "service", NAME, "-n", ns])?;
    svc["spec"]["clusterIP"]
        .as_str()
        .map(str::to_string)
        .context("Service has no clusterIP")
}

fn start_writer(env: &Env, ns: &str, password: &str, part: &str) -> Result<Load> {
    let dir = env.work_dir(&format!("replication-{part}"))?;
    let ip = service_ip(env, ns)?;
    let mut load = env.start_load(
        &[&ip],
        password,
        &dir,
        part,
        &["--interval-ms", "5", "--wait-replicas", "1"],
    )?;
    wait_load_running(&mut load)?;
    Ok(load)
}

fn finish_and_verify(
    env: &Env,
    ns: &str,
    password: &str,
    mut load: Load,
    part: &str,
) -> Result<()> {
    let summary = finish_load(&mut load, part)?;
    let ip = service_ip(env, ns)?;
    let verified = env.verify_keys(&[ip], password, &load.keys)?;
    println!(
        "replication: {part}: load {summary}; verify {verified}; longest_gap_ms {}",
        summary["longest_gap_ms"]
    );
    Ok(())
}

/// A fault to the primary under writes: the primary changes, writes resume
/// within the bound, the old primary's member returns as a replica, nothing
/// acknowledged is lost.
fn fault(
    env: &Env,
    ns: &str,
    password: &str,
    part: &str,
    act: impl FnOnce(&str, &str, &str) -> Result<()>,
    after: impl FnOnce(&str) -> Result<()>,
) -> Result<()> {
    let (old, ip, node) = check_routing(env, ns, 2)?;
    let load = start_writer(env, ns, password, part)?;
    let t = Instant::now();
    act(&old, &ip, &node)?;
    // The operator moves the primary: another pod carries the label.
    let mut now = String::new();
    wait_until(RESUME_BOUND, Duration::from_millis(100), || {
        let labelled: Vec<String> = pods(env, ns)?
            .into_iter()
            .filter(|p| p.2 == "primary")
            .map(|p| p.0)
            .collect();
        now = labelled.join(",");
        // Never two: Service `<name>` would route writes to both.
        ensure!(
            labelled.len() <= 1,
            "{part}: two pods labelled primary: {now}"
        );
        Ok(labelled.len() == 1 && labelled[0] != old)
    })
    .with_context(|| format!("{part}: the primary label did not move off {old} (now {now:?})"))?;
    let moved_in = t.elapsed();
    let before = load.acked_so_far();
    let resumed_in = resumed(&load, t, before)?;
    println!(
        "replication: {part}: FIGURE primary moved {:.2}s and writes resumed {:.2}s after the fault; \
         primary {old} -> {now}",
        moved_in.as_secs_f64(),
        resumed_in.as_secs_f64()
    );
    after(&node)?;
    wait_ready(env, ns, 2, READY_TIMEOUT).context(part.to_string())?;
    let (primary, _, _) = check_routing(env, ns, 2)?;
    ensure!(primary != old, "{part}: {old} is the primary again");
    let role = pods(env, ns)?
        .into_iter()
        .find(|p| p.0 == old)
        .map(|p| p.2)
        .unwrap_or_default();
    ensure!(
        role == "replica",
        "{part}: {old} came back as {role:?}, not a replica"
    );
    println!(
        "replication: {part}: {old} back as a replica; Ready {:.1}s after the fault",
        t.elapsed().as_secs_f64()
    );
    let events = env.object_events(ns, "ValkeyReplication", NAME)?;
    ensure!(
        events.iter().any(|e| e.reason == "PrimaryChanged"),
        "{part}: no PrimaryChanged event: {events:#?}"
    );
    finish_and_verify(env, ns, password, load, part)
}

fn scale(env: &Env, ns: &str, password: &str) -> Result<()> {
    let part = "scale";
    let load = start_writer(env, ns, password, part)?;
    for replicas in [3u32, 1] {
        let t = Instant::now();
        patch_spec(env, ns, &format!("{{\"replicas\":{replicas}}}"))?;
        // Four members cannot keep one per zone in three zones: the spread is
        // Preferred for this step.
        let took = wait_ready(env, ns, u64::from(replicas), READY_TIMEOUT)?;
        check_routing(env, ns, replicas as usize)?;
        println!(
            "replication: {part}: {replicas} replicas Ready {:.1}s after the change ({:.1}s)",
            took.as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
    }
    finish_and_verify(env, ns, password, load, part)
}

fn roll(env: &Env, ns: &str, password: &str) -> Result<()> {
    let part = "roll";
    let load = start_writer(env, ns, password, part)?;
    let before = pod_uids(env, ns)?;
    let t = Instant::now();
    patch_spec(
        env,
        ns,
        r#"{"resources":{"requests":{"cpu":"60m","memory":"40Mi"}}}"#,
    )?;
    let mut last = String::new();
    wait_until(READY_TIMEOUT, Duration::from_secs(1), || {
        let uids = pod_uids(env, ns)?;
        let s = set(env, ns)?;
        let progressing = condition(&s, "Progressing").map(|c| c["reason"].clone());
        last = format!("pods {uids:?}, Progressing {progressing:?}");
        Ok(uids.len() == 2
            && uids.is_disjoint(&before)
            && condition(&s, "Ready").is_some_and(|c| c["status"] == "True")
            && progressing.is_some_and(|r| r == "Stable"))
    })
    .with_context(|| format!("{part}: the roll did not finish: {last}"))?;
    check_routing(env, ns, 1)?;
    println!(
        "replication: {part}: every member restarted, Ready {:.1}s after the change",
        t.elapsed().as_secs_f64()
    );
    finish_and_verify(env, ns, password, load, part)
}

/// What the set, its pods and its events looked like, for a failure.
fn diagnostics(env: &Env, ns: &str) -> String {
    let mut out = String::new();
    for args in [
        vec!["get", "valkeyreplication", NAME, "-n", ns, "-o", "yaml"],
        vec![
            "get",
            "pods,services,endpointslices",
            "-n",
            ns,
            "-o",
            "wide",
            "--show-labels",
        ],
        vec!["get", "events", "-n", ns, "--sort-by=.lastTimestamp"],
    ] {
        out.push_str(&format!("--- kubectl {}\n", args.join(" ")));
        out.push_str(&env.kubectl(&args).unwrap_or_else(|e| format!("{e:#}")));
    }
    out
}

fn run(env: &Env, ns: &str) -> Result<()> {
    scenario(env, ns).map_err(|e| e.context(diagnostics(env, ns)))
}

fn scenario(env: &Env, ns: &str) -> Result<()> {
    env.judge_standalone(true);
    let t = Instant::now();
    env.apply(ns, &manifest(2, ""))?;
    let took = wait_ready(env, ns, 2, READY_TIMEOUT)?;
    println!(
        "replication: FIGURE 1+2 Ready {:.1}s after apply",
        took.as_secs_f64().max(t.elapsed().as_secs_f64())
    );
    let zones = env.node_zones()?;
    let used: BTreeSet<String> = pods(env, ns)?
        .iter()
        .map(|p| zones.get(&p.3).cloned().unwrap_or_default())
        .collect();
    ensure!(used.len() == 3, "members not in three zones: {used:?}");
    let password = env.secret_text(ns, &format!("{NAME}-auth"), "password")?;

    fault(
        env,
        ns,
        &password,
        "(a) primary pod deleted",
        |pod, _, _| {
            env.kubectl(&["delete", "pod", pod, "-n", ns, "--wait=false"])?;
            Ok(())
        },
        |_| Ok(()),
    )?;
    fault(
        env,
        ns,
        &password,
        "(b) primary node failed",
        |_, _, node| {
            env.testbed(&["node", "fail", node])?;
            Ok(())
        },
        |node| {
            env.testbed(&["node", "heal", node])?;
            Ok(())
        },
    )?;
    fault(
        env,
        ns,
        &password,
        "(c) primary killed without saving",
        |_, ip, _| {
            env.kill_valkey(ip)?;
            Ok(())
        },
        |_| Ok(()),
    )?;
    // Four members over three zones: the zone constraint is Preferred from
    // here on (a Required one would leave the fourth Pending).
    env.apply(
        ns,
        &manifest(2, "").replace("mode: Required", "mode: Preferred"),
    )?;
    wait_ready(env, ns, 2, READY_TIMEOUT)?;
    scale(env, ns, &password)?;
    roll(env, ns, &password)?;
    Ok(())
}

#[test]
fn a_primary_and_two_replicas_fail_over_scale_and_roll_without_losing_acknowledged_writes() {
    let Some(suite) = Suite::start("replication", "replication", "e2e-repl") else {
        return;
    };
    suite.run(&[NAME], run);
}
