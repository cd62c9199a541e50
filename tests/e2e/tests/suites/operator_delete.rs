//! Deleting a ValkeyCluster removes what it owns (StatefulSets, Services,
//! ConfigMap, PodDisruptionBudgets, the generated password Secret, pods) and
//! nothing else: with persistence and `reclaimPolicy: Delete` its
//! PersistentVolumeClaims go too; with `Retain` they stay, as do a Secret the
//! user gave for the password and unrelated objects in the namespace. A
//! second cluster in the same namespace is untouched by the first one's
//! deletion.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::{ClusterManifest, cluster_manifest};
use e2e::suite::Suite;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Owner-reference garbage collection and pod termination (grace period).
const GONE_TIMEOUT: Duration = Duration::from_secs(180);
/// Kinds the operator creates (directly or through its StatefulSets).
const KINDS: &[&str] = &[
    "statefulsets",
    "services",
    "configmaps",
    "poddisruptionbudgets",
    "secrets",
    "pods",
    "persistentvolumeclaims",
];

/// A 2x1 cluster with persistence and `reclaim`.
fn manifest(name: &str, reclaim: &str) -> ClusterManifest {
    cluster_manifest(name, 2, 1).persistence("64Mi", reclaim)
}

/// `kind/name` of every object in `ns` that belongs to cluster `name`: owned
/// by it (directly, or through one of its StatefulSets), or carrying its
/// `valkey.rs/cluster` label, or a claim a member pod mounts.
fn inventory(env: &Env, ns: &str, name: &str, uid: &str) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut sts_uids = BTreeSet::new();
    let mut claims = BTreeSet::new();
    for kind in KINDS {
        let list = env.kubectl_json(&["get", kind, "-n", ns])?;
        for item in list["items"].as_array().into_iter().flatten() {
            let obj_name = item["metadata"]["name"].as_str().unwrap_or_default();
            let owned = item["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| {
                    r["uid"].as_str() == Some(uid)
                        || r["uid"].as_str().is_some_and(|u| sts_uids.contains(u))
                });
            let labelled = item["metadata"]["labels"]["valkey.rs/cluster"].as_str() == Some(name);
            if *kind == "statefulsets" && (owned || labelled) {
                sts_uids.insert(
                    item["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
            if *kind == "pods" && labelled {
                for v in item["spec"]["volumes"].as_array().into_iter().flatten() {
                    if let Some(c) = v["persistentVolumeClaim"]["claimName"].as_str() {
                        claims.insert(c.to_string());
                    }
                }
            }
            let claimed = *kind == "persistentvolumeclaims" && claims.contains(obj_name);
            if owned || labelled || claimed {
                out.insert(format!("{kind}/{obj_name}"));
            }
        }
    }
    Ok(out)
}

fn count(inv: &BTreeSet<String>, kind: &str) -> usize {
    inv.iter()
        .filter(|k| k.starts_with(&format!("{kind}/")))
        .count()
}

fn exists(env: &Env, ns: &str, what: &str) -> Result<bool> {
    let out = env
        .kubectl_cmd()
        .args(["get", what, "-n", ns, "--ignore-not-found", "-o", "name"])
        .output()?;
    ensure!(
        out.status.success(),
        "kubectl get {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(!String::from_utf8_lossy(&out.stdout).trim().is_empty())
}

/// What a cluster of 2 shards x 2 members with persistence must own.
fn check_inventory(name: &str, inv: &BTreeSet<String>, generated_secret: bool) -> Result<()> {
    let members = 4;
    ensure!(
        count(inv, "statefulsets") == members,
        "{name}: want {members} StatefulSets: {inv:#?}"
    );
    ensure!(
        count(inv, "pods") == members,
        "{name}: want {members} pods: {inv:#?}"
    );
    ensure!(
        count(inv, "persistentvolumeclaims") == members,
        "{name}: want {members} PVCs: {inv:#?}"
    );
    ensure!(
        count(inv, "services") >= 2,
        "{name}: want a headless and a client Service: {inv:#?}"
    );
    ensure!(
        count(inv, "configmaps") >= 1,
        "{name}: want a ConfigMap: {inv:#?}"
    );
    ensure!(
        count(inv, "poddisruptionbudgets") >= 1,
        "{name}: want PodDisruptionBudgets: {inv:#?}"
    );
    let secret = format!("secrets/{name}-auth");
    ensure!(
        inv.contains(&secret) == generated_secret,
        "{name}: generated Secret {secret} should {}be owned: {inv:#?}",
        if generated_secret { "" } else { "not " }
    );
    Ok(())
}

/// Every object the operator writes itself carries an owner reference to the
/// cluster (with controller=true), so garbage collection can remove it.
fn check_owner_references(
    env: &Env,
    ns: &str,
    name: &str,
    uid: &str,
    inv: &BTreeSet<String>,
) -> Result<()> {
    for what in inv {
        if what.starts_with("pods/") || what.starts_with("persistentvolumeclaims/") {
            continue; // owned by the StatefulSets
        }
        let obj = env.kubectl_json(&["get", what, "-n", ns])?;
        let ok = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["uid"].as_str() == Some(uid) && r["controller"] == Value::Bool(true));
        ensure!(
            ok,
            "{what} has no controller owner reference to valkeycluster {name}: {}",
            obj["metadata"]["ownerReferences"]
        );
    }
    Ok(())
}

fn delete_cluster(env: &Env, ns: &str, name: &str) -> Result<Duration> {
    let started = Instant::now();
    env.kubectl(&[
        "delete",
        "valkeycluster",
        name,
        "-n",
        ns,
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(started.elapsed())
}

/// Waits until none of `gone` exists any more.
fn wait_gone(env: &Env, ns: &str, gone: &BTreeSet<String>) -> Result<Duration> {
    let started = Instant::now();
    let mut left = gone.clone();
    wait_until(GONE_TIMEOUT, Duration::from_secs(1), || {
        let mut still = BTreeSet::new();
        for what in &left {
            if exists(env, ns, what)? {
                still.insert(what.clone());
            }
        }
        left = still;
        Ok(left.is_empty())
    })
    .map_err(|_| anyhow::anyhow!("still there {GONE_TIMEOUT:?} after the delete: {left:#?}"))?;
    Ok(started.elapsed())
}

fn pvc_phases(
    env: &Env,
    ns: &str,
    pvcs: &BTreeSet<String>,
) -> Result<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for what in pvcs {
        let obj = env.kubectl_json(&["get", what, "-n", ns])?;
        out.push((
            what.clone(),
            obj["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            obj["spec"]["volumeName"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ));
    }
    Ok(out)
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn run(env: &Env, ns: &str) -> Result<()> {
    env.kubectl(&[
        "create",
        "secret",
        "generic",
        "user-pass",
        "-n",
        ns,
        "--from-literal=password=user-given-pass-1",
    ])?;
    env.kubectl(&[
        "create",
        "configmap",
        "unrelated",
        "-n",
        ns,
        "--from-literal=a=b",
    ])?;
    let user_auth = "  auth:
    passwordSecret: {name: user-pass}
";
    let keep = manifest("keep", "Retain").extra_spec(user_auth);
    let drop = manifest("drop", "Delete");
    env.apply(ns, &keep.yaml())?;
    env.apply(ns, &drop.yaml())?;
    for m in [&keep, &drop] {
        env.wait_ready_shape(ns, m, READY_TIMEOUT)?;
    }
    let uid = |name: &str| -> Result<String> {
        Ok(env.cluster(ns, name)?["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    };
    let (keep_uid, drop_uid) = (uid("keep")?, uid("drop")?);
    let keep_inv = inventory(env, ns, "keep", &keep_uid)?;
    let drop_inv = inventory(env, ns, "drop", &drop_uid)?;
    check_inventory("keep", &keep_inv, false)?;
    check_inventory("drop", &drop_inv, true)?;
    ensure!(
        keep_inv.is_disjoint(&drop_inv),
        "the two clusters share objects: {:?}",
        keep_inv.intersection(&drop_inv).collect::<Vec<_>>()
    );
    check_owner_references(env, ns, "keep", &keep_uid, &keep_inv)?;
    check_owner_references(env, ns, "drop", &drop_uid, &drop_inv)?;
    let keep_pods = env.pod_identities(ns, "keep")?;
    let drop_pvcs: BTreeSet<String> = drop_inv
        .iter()
        .filter(|k| k.starts_with("persistentvolumeclaims/"))
        .cloned()
        .collect();
    let drop_pvs: Vec<String> = pvc_phases(env, ns, &drop_pvcs)?
        .into_iter()
        .map(|(_, _, pv)| pv)
        .collect();

    // reclaimPolicy Delete: everything goes, claims included.
    let took = delete_cluster(env, ns, "drop")?;
    let gone = wait_gone(env, ns, &drop_inv).context("drop (reclaimPolicy Delete)")?;
    println!(
        "operator_delete: drop (Delete): object gone in {:.1}s, its {} objects {:.1}s later",
        took.as_secs_f64(),
        drop_inv.len(),
        gone.as_secs_f64()
    );
    let mut pvs_left = Vec::new();
    for pv in &drop_pvs {
        if exists(env, ns, &format!("persistentvolume/{pv}"))? {
            pvs_left.push(pv.clone());
        }
    }
    println!(
        "operator_delete: drop: PersistentVolumes still present after the claims went: {pvs_left:?}"
    );
    // The other cluster saw nothing of it.
    ensure!(
        env.pod_identities(ns, "keep")? == keep_pods,
        "deleting drop disturbed keep's pods"
    );
    env.check_shape(ns, "keep", 2, 1)
        .context("keep after drop was deleted")?;

    // reclaimPolicy Retain: everything but the claims goes.
    let keep_pvcs: BTreeSet<String> = keep_inv
        .iter()
        .filter(|k| k.starts_with("persistentvolumeclaims/"))
        .cloned()
        .collect();
    let keep_rest: BTreeSet<String> = keep_inv.difference(&keep_pvcs).cloned().collect();
    let took = delete_cluster(env, ns, "keep")?;
    let gone = wait_gone(env, ns, &keep_rest).context("keep (reclaimPolicy Retain)")?;
    println!(
        "operator_delete: keep (Retain): object gone in {:.1}s, its {} objects but the claims {:.1}s later",
        took.as_secs_f64(),
        keep_rest.len(),
        gone.as_secs_f64()
    );
    // A late garbage collection would still be one: the claims must stay.
    std::thread::sleep(Duration::from_secs(10));
    let phases = pvc_phases(env, ns, &keep_pvcs).context("keep's claims must stay")?;
    for (pvc, phase, pv) in &phases {
        ensure!(phase == "Bound", "{pvc} should stay Bound, is {phase:?}");
        ensure!(
            exists(env, ns, &format!("persistentvolume/{pv}"))?,
            "{pvc}: its volume {pv} is gone"
        );
        let obj = env.kubectl_json(&["get", pvc, "-n", ns])?;
        ensure!(
            obj["metadata"]["deletionTimestamp"].is_null(),
            "{pvc} is being deleted"
        );
    }
    println!("operator_delete: keep: claims kept: {phases:?}");
    ensure!(
        exists(env, ns, "secret/user-pass")?,
        "the user's password Secret was deleted"
    );
    ensure!(
        exists(env, ns, "configmap/unrelated")?,
        "an unrelated ConfigMap was deleted"
    );
    ensure!(
        !exists(env, ns, "valkeycluster/keep")? && !exists(env, ns, "valkeycluster/drop")?,
        "a ValkeyCluster is still there"
    );
    Ok(())
}

#[test]
fn deleting_a_cluster_removes_what_it_owns_and_keeps_retained_claims() {
    let Some(suite) = Suite::start("operator_delete", "delete", "e2e-delete") else {
        return;
    };
    let started = Instant::now();
    if let Err(e) = run(&suite.env, suite.ns()) {
        let left = suite
            .env
            .kubectl(&[
                "get",
                "statefulsets,services,configmaps,pdb,secrets,pods,pvc",
                "-n",
                suite.ns(),
                "-o",
                "wide",
            ])
            .unwrap_or_else(|e| e.to_string());
        panic!(
            "{e:#}\n--- namespace {}:\n{left}\n{}",
            suite.ns(),
            suite.diagnostics(&["keep", "drop"])
        );
    }
    println!(
        "operator_delete: done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
