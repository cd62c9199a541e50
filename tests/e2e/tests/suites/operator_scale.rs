//! Scaling under light write load: a 3x1 cluster goes to 4 shards and back to
//! 3, then to 2 replicas per shard and back to 1, while the Python cluster
//! client writes. After each step the cluster is Ready for the new
//! generation, has exactly the members and roles the spec asks for (as
//! Kubernetes and every Valkey member see it), its slots are balanced within
//! one slot, `redis-cli --cluster check` passes on every member, and every key
//! acknowledged so far (in any step) reads back. Before the replica scale-in,
//! the member it removes is made its shard's primary, so the operator must
//! move the primary away first.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NAME: &str = "scale";
/// Apply-to-Ready and every scale step; generous for a shared 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(300);

struct Step<'a> {
    label: &'a str,
    patch: String,
    shards: u32,
    replicas: u32,
    /// Before the change, make this (shard, member) its shard's primary with a
    /// graceful CLUSTER FAILOVER: scaling in must then move the primary away
    /// before it removes the member.
    primary_first: Option<(u32, u32)>,
}

/// Makes `member` the primary of `shard` (graceful CLUSTER FAILOVER on it) and
/// waits until Valkey and the operator agree: ROLE says master, the pod's role
/// label says primary, and the cluster is Ready again.
fn make_primary(env: &Env, ns: &str, password: &str, shard: u32, member: u32) -> Result<()> {
    let pod = env
        .members(ns, NAME)?
        .into_iter()
        .find(|m| m.shard == shard && m.member == member)
        .with_context(|| format!("no pod for shard {shard} member {member}"))?;
    env.valkey_cli(&pod.ip, password, &["cluster", "failover"])?;
    // The role label follows at the operator's next look, which a failover it
    // did not make may not trigger before the periodic resync (30 s).
    wait_until(Duration::from_secs(90), Duration::from_millis(250), || {
        let role = env.valkey_cli(&pod.ip, password, &["role"])?;
        let labelled = env
            .members(ns, NAME)?
            .iter()
            .any(|m| m.name == pod.name && m.role == "primary");
        Ok(role.starts_with("master") && labelled)
    })
    .with_context(|| format!("{} did not become primary (ROLE and role label)", pod.name))?;
    env.wait_condition(ns, NAME, "Ready", "True", READY_TIMEOUT)
        .context("Ready after the manual failover")?;
    println!(
        "operator_scale: {} (shard {shard} member {member}) is now the primary",
        pod.name
    );
    Ok(())
}

fn scale_step(
    env: &Env,
    ns: &str,
    dir: &Path,
    password: &str,
    step: &Step<'_>,
    all_keys: &mut Vec<PathBuf>,
) -> Result<()> {
    if let Some((shard, member)) = step.primary_first {
        make_primary(env, ns, password, shard, member)?;
    }
    let mut load =
        env.start_member_load(ns, NAME, password, dir, step.label, &["--interval-ms", "5"])?;

    let started = Instant::now();
    env.patch_cluster(ns, NAME, &step.patch)?;
    let obj = env
        .wait_condition(ns, NAME, "Ready", "True", READY_TIMEOUT)
        .with_context(|| format!("step {}", step.label))?;
    let to_ready = started.elapsed();
    let summary = finish_load(&mut load, &format!("step {}", step.label))?;
    all_keys.push(load.keys.clone());

    let total = (step.shards * (step.replicas + 1)) as usize;
    env.wait_pods(ns, NAME, total, Duration::from_secs(90))
        .with_context(|| format!("step {}: pods after Ready", step.label))?;
    let shape = env
        .check_shape(ns, NAME, step.shards, step.replicas)
        .with_context(|| format!("step {}: shape after Ready", step.label))?;
    ensure!(
        obj["status"]["readyShards"] == step.shards,
        "step {}: status.readyShards {} want {}",
        step.label,
        obj["status"]["readyShards"],
        step.shards
    );
    let status_members = obj["status"]["members"].as_array().map_or(0, Vec::len);
    ensure!(
        status_members == total,
        "step {}: status lists {status_members} members, want {total}",
        step.label
    );
    let selector = format!("valkey.rs/cluster={NAME}");
    let sts = env.kubectl_json(&["get", "statefulsets", "-n", ns, "-l", &selector])?;
    let sts_n = sts["items"].as_array().map_or(0, Vec::len);
    ensure!(
        sts_n == total,
        "step {}: {sts_n} StatefulSets, want one per member ({total})",
        step.label
    );

    let hosts = env.member_ips(ns, NAME)?;
    let mut checked = 0;
    for keys in all_keys.iter() {
        checked += env.verify_keys(&hosts, password, keys)?["checked"]
            .as_u64()
            .unwrap_or(0);
    }
    println!(
        "operator_scale: step {}: Ready {:.1}s after the patch; slots {:?}; load {summary}; verified {checked} acknowledged keys",
        step.label,
        to_ready.as_secs_f64(),
        shape.slots
    );
    Ok(())
}

fn run(env: &Env, ns: &str) -> Result<()> {
    let dir = env.work_dir("operator_scale")?;
    let started = Instant::now();
    let took = env.create_cluster(ns, &cluster_manifest(NAME, 3, 1), READY_TIMEOUT)?;
    println!(
        "operator_scale: 3x1 Ready {:.1}s after apply",
        took.as_secs_f64()
    );
    let password = env.password(ns, NAME)?;

    let steps = [
        Step {
            label: "shards-3-to-4",
            patch: r#"{"spec":{"shards":4}}"#.into(),
            shards: 4,
            replicas: 1,
            primary_first: None,
        },
        Step {
            label: "shards-4-to-3",
            patch: r#"{"spec":{"shards":3}}"#.into(),
            shards: 3,
            replicas: 1,
            primary_first: None,
        },
        Step {
            label: "replicas-1-to-2",
            patch: r#"{"spec":{"replicas":2}}"#.into(),
            shards: 3,
            replicas: 2,
            primary_first: None,
        },
        Step {
            label: "replicas-2-to-1",
            patch: r#"{"spec":{"replicas":1}}"#.into(),
            shards: 3,
            replicas: 1,
            primary_first: Some((0, 2)),
        },
    ];
    let mut all_keys = Vec::new();
    for step in &steps {
        scale_step(env, ns, &dir, &password, step, &mut all_keys)?;
    }
    println!(
        "operator_scale: all steps in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    autoscaler_reads_the_scale_subresource(env, ns)?;
    Ok(())
}

/// A HorizontalPodAutoscaler (autoscaling/v2) on the ValkeyCluster: the
/// controller-manager reads its scale subresource, and with
/// `labelSelectorPath` (`status.selector`) it finds the member pods. Without
/// a selector its conditions say `InvalidSelector` or that the scale has no
/// selector. The testbed has no metrics API, so the metric itself fails,
/// which is the next thing the autoscaler says once the target is good.
fn autoscaler_reads_the_scale_subresource(env: &Env, ns: &str) -> Result<()> {
    let scale: serde_json::Value = serde_json::from_str(&env.kubectl(&[
        "get",
        "--raw",
        &format!("/apis/valkey.rs/v1alpha1/namespaces/{ns}/valkeyclusters/{NAME}/scale"),
    ])?)?;
    let selector = scale["status"]["selector"].as_str().unwrap_or_default();
    ensure!(
        selector == format!("valkey.rs/cluster={NAME},valkey.rs/member"),
        "the scale subresource names no member selector: {scale}"
    );
    env.apply(
        ns,
        &format!(
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: {NAME}}}\nspec:\n  scaleTargetRef: {{apiVersion: valkey.rs/v1alpha1, kind: ValkeyCluster, name: {NAME}}}\n  minReplicas: 3\n  maxReplicas: 4\n  metrics:\n    - type: Resource\n      resource: {{name: cpu, target: {{type: Utilization, averageUtilization: 80}}}}\n"
        ),
    )?;
    let mut conditions = serde_json::Value::Null;
    wait_until(Duration::from_secs(90), Duration::from_secs(1), || {
        let hpa = env.kubectl_json(&["get", "hpa", NAME, "-n", ns])?;
        conditions = hpa["status"]["conditions"].clone();
        // The target was read (AbleToScale) and the metric was tried
        // (ScalingActive says how it went).
        let has = |t: &str| {
            conditions
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["type"] == t))
        };
        Ok(has("AbleToScale") && has("ScalingActive"))
    })
    .with_context(|| format!("the autoscaler never judged its target: {conditions}"))?;
    let text = conditions.to_string();
    ensure!(
        !text.contains("InvalidSelector") && !text.to_ascii_lowercase().contains("selector"),
        "the autoscaler could not use the scale subresource's selector: {text}"
    );
    println!(
        "operator_scale: a HorizontalPodAutoscaler reads the scale subresource (selector {selector}): {text}"
    );
    env.kubectl(&["delete", "hpa", NAME, "-n", ns])?;
    Ok(())
}

#[test]
fn scaling_shards_and_replicas_out_and_in_under_load_keeps_every_acknowledged_key() {
    let Some(suite) = Suite::start("operator_scale", "scale", "e2e-scale") else {
        return;
    };
    suite.run(&[NAME], run);
}

const PV_NAME: &str = "scalepv";

/// `redis-cli -c` (following redirections) through `host`: one key command.
fn key_command(host: &str, password: &str, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-c", "-h", host, "-a", password, "--no-auth-warning"])
        .args(args)
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn claims(env: &Env, ns: &str) -> Result<std::collections::BTreeMap<String, String>> {
    let list = env.kubectl_json(&["get", "persistentvolumeclaims", "-n", ns])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
        .map(|c| {
            (
                c["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                c["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect())
}

fn retained_scale_in_and_out(env: &Env, ns: &str) -> Result<()> {
    let dir = env.work_dir("operator_scale-retain")?;
    let manifest = cluster_manifest(PV_NAME, 3, 1).persistence("64Mi", "Retain");
    let took = env
        .create_cluster(ns, &manifest, READY_TIMEOUT)
        .context("with persistence")?;
    println!(
        "operator_scale: retained: 3x1 Ready {:.1}s after apply",
        took.as_secs_f64()
    );
    let password = env.password(ns, PV_NAME)?;
    let hosts = env.member_ips(ns, PV_NAME)?;
    let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
    // Keys on every shard, shard 2's among them, before it is removed.
    let mut load = env.start_load(
        &host_refs,
        &password,
        &dir,
        "before",
        &["--interval-ms", "1"],
    )?;
    wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        Ok(load.acked_so_far() >= 2000 || !load.alive())
    })?;
    let summary = load.finish(Duration::from_secs(30))?;
    let claims_before = claims(env, ns)?;
    ensure!(claims_before.len() == 6, "want 6 claims: {claims_before:?}");

    // Shard 2 goes: its slots and keys move to shards 0 and 1; with Retain its
    // members' claims stay.
    env.patch_cluster(ns, PV_NAME, r#"{"spec":{"shards":2}}"#)?;
    env.wait_condition(ns, PV_NAME, "Ready", "True", READY_TIMEOUT)
        .context("Ready at 2 shards")?;
    env.wait_pods(ns, PV_NAME, 4, Duration::from_secs(90))?;
    env.check_shape(ns, PV_NAME, 2, 1)
        .context("2x1 after the scale-in")?;
    let claims_mid = claims(env, ns)?;
    ensure!(
        claims_mid == claims_before,
        "reclaimPolicy Retain: the removed members' claims should stay: before {claims_before:?}, after {claims_mid:?}"
    );
    let hosts = env.member_ips(ns, PV_NAME)?;
    env.verify_keys(&hosts, &password, &load.keys)?;

    // Delete 300 of the keys while shard 2 is away: they must not come back
    // from the retained volumes when shard 2 returns.
    let keys_text = std::fs::read_to_string(&load.keys)?;
    let all: Vec<&str> = keys_text.lines().filter(|l| !l.is_empty()).collect();
    let deleted: Vec<&str> = all.iter().copied().step_by(5).take(300).collect();
    let deleted_set: std::collections::BTreeSet<&str> = deleted.iter().copied().collect();
    for key in &deleted {
        let text = key_command(&hosts[0], &password, &["del", key])?;
        ensure!(text == "1", "DEL {key}: {text}");
    }
    let kept: Vec<&str> = all
        .iter()
        .copied()
        .filter(|k| !deleted_set.contains(k))
        .collect();
    let kept_file = dir.join("kept.keys");
    std::fs::write(&kept_file, kept.join("\n") + "\n")?;

    // Shard 2 returns on its retained volumes (same claim names).
    let t = Instant::now();
    env.patch_cluster(ns, PV_NAME, r#"{"spec":{"shards":3}}"#)?;
    env.wait_condition(ns, PV_NAME, "Ready", "True", READY_TIMEOUT)
        .context("Ready at 3 shards again, on retained volumes")?;
    env.wait_pods(ns, PV_NAME, 6, Duration::from_secs(90))?;
    let shape = env
        .check_shape(ns, PV_NAME, 3, 1)
        .context("3x1 after the scale-out on retained volumes")?;
    let claims_after = claims(env, ns)?;
    println!(
        "operator_scale: retained: back to 3 shards in {:.1}s; slots {:?}; claims reused: {}",
        t.elapsed().as_secs_f64(),
        shape.slots,
        claims_after == claims_before
    );
    let hosts = env.member_ips(ns, PV_NAME)?;
    let verified = env.verify_keys(&hosts, &password, &kept_file)?;
    let mut back = Vec::new();
    for key in &deleted {
        if key_command(&hosts[0], &password, &["exists", key])? != "0" {
            back.push(key.to_string());
        }
    }
    ensure!(
        back.is_empty(),
        "{} of {} keys deleted while shard 2 was away came back from its retained volumes: {:?}",
        back.len(),
        deleted.len(),
        &back[..back.len().min(5)]
    );
    println!(
        "operator_scale: retained: load {summary}; verify {verified}; {} deleted keys stayed deleted",
        deleted.len()
    );
    Ok(())
}

#[test]
fn scaling_in_and_out_again_on_retained_volumes_brings_back_no_stale_data() {
    let Some(suite) = Suite::start("operator_scale", "scale-retain", "e2e-scale-pv") else {
        return;
    };
    suite.run(&[PV_NAME], retained_scale_in_and_out);
}
