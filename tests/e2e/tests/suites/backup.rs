// Over 600 lines: tests, one scenario per function, read top to bottom.
//! Backups (issue 28): a `ValkeyBackup` of a 3x1 cluster under a writer
//! Completes, with one RDB per shard and the manifest in the testbed's S3
//! store (read back with SigV4-signed GETs: sizes and SHA-256 match the
//! manifest, every slot is in one shard); a backup with wrong credentials,
//! a missing bucket, an unreachable endpoint, or of a missing cluster, Fails
//! with a message naming the cause and leaves no manifest. A replica that
//! dies while the backup takes its snapshot: the shard is taken again from
//! its primary, and the backup Completes whole.
//!
//! A TLS cluster with auth is backed up over TLS (the Job trusts the CA of
//! the members' serving Secret) and restored into a new TLS cluster.
//!
//! Restores (`spec.restore`): a cluster restored from the backup holds every
//! key acknowledged before the backup started, each shard serving the slots
//! it had (with persistence too, AOF on); one asked for before its backup
//! completed waits for it; a missing or Failed backup, another number of
//! shards and a damaged object are refused (condition `Restored`) without
//! any member, and other bytes that pass those checks fail the SHA-256 in
//! the member that loads them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::s3::{field as s, get as s3_get, put as s3_put};
use e2e::suite::{Suite, finish_load};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `testbed s3-info`: endpoint, accessKey, secretKey, bucket.
fn s3_info(env: &Env) -> Result<Value> {
    env.s3_info()
}

fn sha256_of(file: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(file).output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

fn credentials_yaml(name: &str, key: &str, secret: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}}}\nstringData:\n  AWS_ACCESS_KEY_ID: \"{key}\"\n  AWS_SECRET_ACCESS_KEY: \"{secret}\"\n"
    )
}

fn backup_yaml(name: &str, cluster: &str, s3: &Value, secret: &str) -> String {
    format!(
        "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyBackup\nmetadata: {{name: {name}}}\nspec:\n  cluster: {cluster}\n  s3:\n    endpoint: \"{}\"\n    bucket: \"{}\"\n    prefix: e2e\n    credentialsSecret: {secret}\n",
        s(s3, "endpoint"),
        s(s3, "bucket")
    )
}

/// Waits until the backup reaches a final phase; returns its status.
fn wait_final(env: &Env, ns: &str, name: &str, timeout: Duration) -> Result<Value> {
    let mut status = Value::Null;
    wait_until(timeout, Duration::from_secs(1), || {
        status = env.kubectl_json(&["get", "valkeybackup", name, "-n", ns])?["status"].clone();
        Ok(matches!(
            status["phase"].as_str(),
            Some("Completed" | "Failed")
        ))
    })
    .with_context(|| format!("backup {name} never finished: {status}"))?;
    Ok(status)
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_backup_under_writes_lands_in_the_bucket_and_bad_input_fails_with_a_message() {
    let Some(suite) = Suite::start("backup", "backup", "e2e-backup") else {
        return;
    };
    suite.run(CLUSTERS, |env, ns| {
        let work = env.work_dir("backup")?;
        let s3 = s3_info(env)?;
        env.apply(
            ns,
            &credentials_yaml("s3", &s(&s3, "accessKey"), &s(&s3, "secretKey")),
        )?;
        env.apply(
            ns,
            &credentials_yaml("s3-wrong", "nobody", "not-the-secret"),
        )?;

        let m = cluster_manifest("src", 3, 1);
        env.create_cluster(ns, &m, Duration::from_secs(300))?;
        let password = env.password(ns, "src")?;
        let mut load = env.start_member_load(ns, "src", &password, &work, "bk", &[])?;

        // The keys acknowledged before the backup started: a cluster restored
        // from it must hold every one.
        let before = work.join("before-backup.keys");
        std::fs::copy(&load.keys, &before)?;
        env.apply(ns, &backup_yaml("full", "src", &s3, "s3"))?;
        let status = wait_final(env, ns, "full", Duration::from_secs(240))?;
        finish_load(&mut load, "writes during the backup")?;
        ensure!(status["phase"] == "Completed", "backup failed: {status}");
        ensure!(
            status["startTime"].is_string() && status["completionTime"].is_string(),
            "{status}"
        );
        println!("backup: Completed: {}", status["message"]);

        // The manifest, then every shard's object, from the bucket.
        let folder = format!("e2e/{ns}/full");
        let manifest_file = work.join("manifest.json");
        let code = s3_get(&s3, &format!("{folder}/manifest.json"), &manifest_file)?;
        ensure!(code == 200, "GET manifest: HTTP {code}");
        let manifest: Value = serde_json::from_slice(&std::fs::read(&manifest_file)?)?;
        let shards = manifest["shards"].as_array().cloned().unwrap_or_default();
        ensure!(shards.len() == 3, "3 shards expected: {manifest}");
        ensure!(
            manifest["valkeyVersion"]
                .as_str()
                .is_some_and(|v| !v.is_empty()),
            "{manifest}"
        );
        let mut slots = 0u32;
        for shard in &shards {
            for r in shard["slots"].as_array().into_iter().flatten() {
                slots += (r[1].as_u64().unwrap_or(0) - r[0].as_u64().unwrap_or(0) + 1) as u32;
            }
            let object = work.join(format!("shard-{}.rdb", shard["index"]));
            let code = s3_get(&s3, &format!("{folder}/{}", s(shard, "object")), &object)?;
            ensure!(code == 200, "GET {}: HTTP {code}", shard["object"]);
            let bytes = std::fs::read(&object)?;
            ensure!(
                bytes.starts_with(b"REDIS") || bytes.starts_with(b"VALKEY"),
                "not an RDB: {shard}"
            );
            ensure!(
                bytes.len() as u64 == shard["sizeBytes"].as_u64().unwrap_or(0),
                "size: {shard}"
            );
            ensure!(
                sha256_of(&object)? == s(shard, "sha256"),
                "checksum: {shard}"
            );
            ensure!(
                bytes.len() > 200,
                "shard {} holds almost nothing under a writer",
                shard["index"]
            );
        }
        ensure!(slots == 16384, "the shards cover {slots} slots");
        println!("backup: 3 RDBs and the manifest in the bucket, checksums match");

        // Wrong credentials: Failed, with a message, and no manifest.
        env.apply(ns, &backup_yaml("wrong-creds", "src", &s3, "s3-wrong"))?;
        let status = wait_final(env, ns, "wrong-creds", Duration::from_secs(120))?;
        ensure!(status["phase"] == "Failed", "{status}");
        let message = s(&status, "message");
        ensure!(message.contains("bucket"), "unclear message: {message}");
        let code = s3_get(
            &s3,
            &format!("e2e/{ns}/wrong-creds/manifest.json"),
            &work.join("none"),
        )?;
        ensure!(code == 404, "a failed backup left a manifest (HTTP {code})");
        println!("backup: wrong credentials: Failed: {message}");

        // A cluster that does not exist: Failed at once, no Job.
        env.apply(ns, &backup_yaml("no-cluster", "ghost", &s3, "s3"))?;
        let status = wait_final(env, ns, "no-cluster", Duration::from_secs(30))?;
        let message = s(&status, "message");
        ensure!(
            status["phase"] == "Failed"
                && message.contains("ghost")
                && message.contains("not found"),
            "{status}"
        );
        if env
            .kubectl(&["get", "job", "no-cluster-backup", "-n", ns])
            .is_ok()
        {
            bail!("a Job was made for a backup of a missing cluster");
        }
        println!("backup: missing cluster: Failed: {message}");

        // A bucket that does not exist, an endpoint nobody listens on:
        // Failed with the cause named, and no Job.
        let mut no_bucket = s3.clone();
        no_bucket["bucket"] = Value::from("no-such-bucket");
        let mut unreachable = s3.clone();
        unreachable["endpoint"] = Value::from("http://127.0.0.1:9");
        for (name, store, cause) in [
            ("no-bucket", &no_bucket, "no-such-bucket"),
            ("unreachable", &unreachable, "127.0.0.1:9"),
        ] {
            env.apply(ns, &backup_yaml(name, "src", store, "s3"))?;
            let status = wait_final(env, ns, name, Duration::from_secs(90))?;
            let message = s(&status, "message");
            ensure!(
                status["phase"] == "Failed" && message.contains(cause),
                "{name}: want Failed naming {cause}: {status}"
            );
            println!("backup: {name}: Failed: {message}");
        }

        a_member_dies_mid_backup(env, ns, &work, &s3)?;
        restore_checks(env, ns, &work, &s3, &manifest, &before)?;
        let result = tls_backup_and_restore(env, ns, &work, &s3);
        env.use_tls(None);
        result
    });
}

/// The log of the backup Job of `backup`.
fn job_log(env: &Env, ns: &str, backup: &str) -> String {
    env.pod_logs(ns, &format!("{backup}-backup-"))
}

/// A member that dies while the backup takes its snapshot: shard 0's
/// replica is slowed down (`rdb-key-save-delay`, so its snapshot streams
/// for many seconds while the member stays healthy and online, the source
/// the backup picks first), then killed once the backup is reading from it.
/// The backup aborts that upload and takes the shard from the primary:
/// Completed, the manifest naming the primary, the object whole (its
/// checksum matches).
fn a_member_dies_mid_backup(env: &Env, ns: &str, work: &Path, s3: &Value) -> Result<()> {
    let members = env.members(ns, "src")?;
    let victim = members
        .iter()
        .find(|m| m.shard == 0 && m.role == "replica")
        .context("shard 0 has no replica")?;
    let password = env.password(ns, "src")?;
    let pid = env.valkey_pid(&victim.ip)?;
    // 0.1 s per key: shard 0 holds well over 10 keys, so its snapshot
    // streams long after the kill below. Only the victim is slowed, and
    // its restart after the kill starts from its config file again.
    env.valkey_cli(
        &victim.ip,
        &password,
        &["config", "set", "rdb-key-save-delay", "100000"],
    )?;
    let asked = format!(
        "shard 0: taking the snapshot from the replica {}:",
        victim.ip
    );
    let applied = env
        .apply(ns, &backup_yaml("survivor", "src", s3, "s3"))
        .and_then(|_| {
            wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
                Ok(job_log(env, ns, "survivor").contains(&asked))
            })
            .with_context(|| {
                format!(
                    "the backup never asked the slowed replica {}: {}",
                    victim.ip,
                    job_log(env, ns, "survivor")
                )
            })
        });
    // Killed whatever happened: a slowed member would slow the suite.
    std::thread::sleep(Duration::from_secs(1));
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?;
    ensure!(status.success(), "kill -KILL {pid} failed");
    applied?;
    let status = wait_final(env, ns, "survivor", Duration::from_secs(180))?;
    let log = job_log(env, ns, "survivor");
    ensure!(
        status["phase"] == "Completed",
        "the backup did not survive the member's death: {status}\n{log}"
    );
    ensure!(
        log.contains("shard 0: the snapshot from") && log.contains("broke off"),
        "the Job's log does not say the snapshot broke off: {log}"
    );
    let folder = format!("e2e/{ns}/survivor");
    let manifest_file = work.join("survivor-manifest.json");
    let code = s3_get(s3, &format!("{folder}/manifest.json"), &manifest_file)?;
    ensure!(code == 200, "GET survivor manifest: HTTP {code}");
    let manifest: Value = serde_json::from_slice(&std::fs::read(&manifest_file)?)?;
    let shard0 = manifest["shards"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["index"] == 0))
        .cloned()
        .context("no shard 0 in the manifest")?;
    ensure!(
        shard0["fromReplica"] == false
            && !s(&shard0, "sourceNode").starts_with(&format!("{}:", victim.ip)),
        "shard 0 was not taken from its primary: {shard0}"
    );
    let object = work.join("survivor-shard-0.rdb");
    let code = s3_get(s3, &format!("{folder}/{}", s(&shard0, "object")), &object)?;
    ensure!(code == 200, "GET {}: HTTP {code}", shard0["object"]);
    ensure!(
        sha256_of(&object)? == s(&shard0, "sha256")
            && std::fs::metadata(&object)?.len() == shard0["sizeBytes"].as_u64().unwrap_or(0),
        "shard 0's object is not what the manifest says: {shard0}"
    );
    println!(
        "backup: shard 0's replica {} died mid-snapshot: Completed from the primary {}",
        victim.ip,
        s(&shard0, "sourceNode")
    );
    // The cluster heals (the replica restarts and rejoins) before going on.
    env.wait_condition(ns, "src", "Ready", "True", Duration::from_secs(180))?;
    Ok(())
}

/// A TLS cluster with auth: backed up over TLS, restored into a new TLS
/// cluster holding every key written before.
fn tls_backup_and_restore(env: &Env, ns: &str, work: &Path, s3: &Value) -> Result<()> {
    let tls = "  tls:\n    enabled: true\n";
    let m = cluster_manifest("tls-src", 2, 1).extra_spec(tls);
    env.apply(ns, &m.yaml())?;
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        Ok(env.secret_text(ns, "tls-src-tls-ca", "ca.crt").is_ok())
    })?;
    let ca = work.join("tls-src-ca.crt");
    std::fs::write(&ca, env.secret_text(ns, "tls-src-tls-ca", "ca.crt")?)?;
    env.use_tls(Some(ca.clone()));
    env.wait_ready_shape(ns, &m, Duration::from_secs(240))?;
    let password = env.password(ns, "tls-src")?;
    let mut load = env.start_member_load(ns, "tls-src", &password, work, "tls", &[])?;
    std::thread::sleep(Duration::from_secs(3));
    let summary = finish_load(&mut load, "writes to the TLS cluster")?;
    env.apply(ns, &backup_yaml("tls-full", "tls-src", s3, "s3"))?;
    let status = wait_final(env, ns, "tls-full", Duration::from_secs(180))?;
    ensure!(status["phase"] == "Completed", "TLS backup: {status}");
    println!(
        "backup: TLS cluster with auth ({summary}) backed up: {}",
        status["message"]
    );

    // External access turned on: the members announce their NodePort
    // addresses (CLUSTER SHARDS and NODES say those), and a backup still
    // reads each member at its pod address.
    let external = cluster_manifest("tls-src", 2, 1)
        .extra_spec(&format!("{tls}  externalAccess:\n    type: NodePort\n"));
    env.apply(ns, &external.yaml())?;
    let announced = wait_external_addresses(env, ns, "tls-src", 4)?;
    env.wait_condition(ns, "tls-src", "Ready", "True", Duration::from_secs(240))?;
    env.apply(ns, &backup_yaml("tls-external", "tls-src", s3, "s3"))?;
    let status = wait_final(env, ns, "tls-external", Duration::from_secs(180))?;
    ensure!(
        status["phase"] == "Completed",
        "TLS backup with external access: {status}"
    );
    let log = job_log(env, ns, "tls-external");
    read_at_pod_addresses(env, ns, "tls-src", &log, &announced)?;

    // Restored into a new TLS cluster (its own CA and password).
    let dst = cluster_manifest("tls-dst", 2, 1)
        .extra_spec(&format!("{tls}  restore:\n    backup: tls-full\n"));
    env.apply(ns, &dst.yaml())?;
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        Ok(env.secret_text(ns, "tls-dst-tls-ca", "ca.crt").is_ok())
    })?;
    let ca = work.join("tls-dst-ca.crt");
    std::fs::write(&ca, env.secret_text(ns, "tls-dst-tls-ca", "ca.crt")?)?;
    env.use_tls(Some(ca));
    env.wait_condition(ns, "tls-dst", "Ready", "True", Duration::from_secs(240))?;
    let password = env.password(ns, "tls-dst")?;
    let checked = env.verify_cluster_keys(ns, "tls-dst", &password, &load.keys)?;
    println!("backup: restored into TLS cluster tls-dst: {checked}");
    Ok(())
}

/// Waits until every one of the `members` members of `cluster` announces
/// an external address in the status; returns those addresses.
fn wait_external_addresses(
    env: &Env,
    ns: &str,
    cluster: &str,
    members: usize,
) -> Result<Vec<String>> {
    let mut found = Vec::new();
    wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        let c = env.cluster(ns, cluster)?;
        found = c["status"]["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["externalAddress"].as_str())
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        Ok(found.len() == members)
    })
    .with_context(|| format!("{cluster}: external addresses {found:?}"))?;
    Ok(found)
}

/// Every snapshot of the backup Job (`log`) was taken at a member's pod
/// address, none at an address the members announce to clients outside
/// (a load balancer's or a node port: traffic that may leave the cluster,
/// or that a firewall for clients refuses).
fn read_at_pod_addresses(
    env: &Env,
    ns: &str,
    cluster: &str,
    log: &str,
    announced: &[String],
) -> Result<()> {
    let pods: Vec<String> = env
        .members(ns, cluster)?
        .into_iter()
        .map(|m| m.ip)
        .collect();
    let taken: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split("taking the snapshot from the ").nth(1))
        .filter_map(|rest| rest.split_whitespace().nth(1))
        .collect();
    ensure!(!taken.is_empty(), "no snapshot in the Job's log:\n{log}");
    for addr in &taken {
        let ip = addr.rsplit_once(':').map_or(*addr, |(ip, _)| ip);
        ensure!(
            pods.iter().any(|p| p == ip) && !announced.iter().any(|a| a == addr),
            "a snapshot was taken at {addr}, not a pod address of {cluster} ({pods:?}; announced {announced:?})"
        );
    }
    println!("backup: with external access on, every snapshot read at a pod address: {taken:?}");
    Ok(())
}

/// The clusters whose diagnostics a failure prints.
const CLUSTERS: &[&str] = &[
    "src", "dst", "dst-disk", "dst-late", "bad-sum", "tls-src", "tls-dst",
];

fn restore_yaml(name: &str, shards: u32, backup: &str) -> String {
    cluster_manifest(name, shards, 1)
        .extra_spec(&format!("  restore:\n    backup: {backup}\n"))
        .yaml()
}

/// The condition `type_` of a ValkeyCluster object.
fn condition(obj: &Value, type_: &str) -> Value {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

/// How many pods and StatefulSets cluster `name` has.
fn members_made(env: &Env, ns: &str, name: &str) -> Result<usize> {
    let selector = format!("valkey.rs/cluster={name}");
    let mut n = 0;
    for kind in ["pods", "statefulsets"] {
        n += env.kubectl_json(&["get", kind, "-n", ns, "-l", &selector])?["items"]
            .as_array()
            .map_or(0, Vec::len);
    }
    Ok(n)
}

/// A restore that must be refused: the condition Restored says why (its
/// reason, a message naming `field`), and no member is ever made.
fn refused(
    env: &Env,
    ns: &str,
    (name, shards, backup): (&str, u32, &str),
    reason: &str,
    field: &str,
) -> Result<()> {
    env.apply(ns, &restore_yaml(name, shards, backup))?;
    let obj = env.wait_condition(ns, name, "Restored", "False", Duration::from_secs(60))?;
    let cond = condition(&obj, "Restored");
    let message = s(&cond, "message");
    ensure!(
        cond["reason"] == reason && message.contains(field) && message.contains(backup),
        "{name}: {cond}"
    );
    ensure!(
        reason != "ChecksumMismatch" || message.contains("checksum mismatch"),
        "{name}: unclear message: {message}"
    );
    ensure!(
        condition(&obj, "Ready")["status"] == "False",
        "{name}: Ready while refused: {obj}"
    );
    // Still nothing a while later: no empty cluster.
    std::thread::sleep(Duration::from_secs(5));
    let made = members_made(env, ns, name)?;
    ensure!(
        made == 0,
        "{name}: {made} member objects made for a refused restore"
    );
    println!("restore: {name}: refused ({reason}): {message}");
    Ok(())
}

/// Restores: a new cluster from the Completed backup holds every key
/// acknowledged before the backup started, its shards serve the slots of the
/// manifest; a missing or Failed backup, another number of shards and a
/// damaged object are refused with a reason and no member (or, for an object
/// of the right size with other bytes, fail on the checksum).
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn restore_checks(
    env: &Env,
    ns: &str,
    work: &Path,
    s3: &Value,
    manifest: &Value,
    before: &Path,
) -> Result<()> {
    env.apply(ns, &restore_yaml("dst", 3, "full"))?;
    let obj = env.wait_ready_shape(ns, &cluster_manifest("dst", 3, 1), Duration::from_secs(300))?;
    let restored = condition(&obj, "Restored");
    ensure!(restored["status"] == "True", "Restored: {restored}");
    ensure!(
        obj["status"]["restore"]["done"] == true,
        "{}",
        obj["status"]
    );
    let password = env.password(ns, "dst")?;
    let summary = env.verify_cluster_keys(ns, "dst", &password, before)?;
    ensure!(summary["checked"].as_u64().unwrap_or(0) >= 50, "{summary}");
    println!("restore: dst Ready, every key acknowledged before the backup is there: {summary}");
    for shard in manifest["shards"].as_array().into_iter().flatten() {
        let want: Vec<String> = shard["slots"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                if r[0] == r[1] {
                    r[0].to_string()
                } else {
                    format!("{}-{}", r[0], r[1])
                }
            })
            .collect();
        let index = shard["index"].as_u64().unwrap_or(0);
        let live = obj["status"]["shards"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["index"].as_u64() == Some(index))
            .map(|x| s(x, "slots"))
            .unwrap_or_default();
        ensure!(
            live == want.join(","),
            "shard {index} serves {live}, the backup had {want:?}"
        );
    }
    println!("restore: every shard serves the slots it had in the backup");

    // With persistence Valkey runs with AOF on and loads only the AOF: the
    // RDB is its base. A member re-created after the restore keeps its data.
    let disk = cluster_manifest("dst-disk", 3, 0)
        .persistence("64Mi", "Delete")
        .extra_spec("  restore:\n    backup: full\n");
    env.apply(ns, &disk.yaml())?;
    env.wait_ready_shape(ns, &disk, Duration::from_secs(300))?;
    let password = env.password(ns, "dst-disk")?;
    let summary = env.verify_cluster_keys(ns, "dst-disk", &password, before)?;
    println!("restore: dst-disk (AOF) holds every key: {summary}");
    env.kubectl(&["delete", "pod", "dst-disk-0-0-0", "-n", ns])?;
    // The status says Ready until the operator sees the pod gone.
    wait_until(Duration::from_secs(300), Duration::from_secs(2), || {
        Ok(env
            .wait_ready_shape(ns, &disk, Duration::from_secs(5))
            .is_ok())
    })
    .context("dst-disk never Ready again after its member was re-created")?;
    env.verify_cluster_keys(ns, "dst-disk", &password, before)?;
    println!("restore: dst-disk member re-created after the restore kept its data");

    // A restore asked for before its backup completed waits for it (no
    // member meanwhile), then goes on.
    env.apply(ns, &backup_yaml("late", "src", s3, "s3"))?;
    env.apply(ns, &restore_yaml("dst-late", 3, "late"))?;
    let late = cluster_manifest("dst-late", 3, 1);
    let mut waited = false;
    wait_until(Duration::from_secs(300), Duration::from_secs(1), || {
        let obj = env.cluster(ns, "dst-late")?;
        let cond = condition(&obj, "Restored");
        if cond["reason"] == "BackupNotCompleted" {
            waited = true;
            // The condition may lag a backup that just completed; members
            // are wrong only while the backup (read after them: Completed
            // is final) is still unfinished.
            let made = members_made(env, ns, "dst-late")?;
            let phase =
                env.kubectl_json(&["get", "valkeybackup", "late", "-n", ns])?["status"]["phase"]
                    .clone();
            ensure!(
                made == 0 || phase == "Completed",
                "{made} members made for an unfinished backup ({phase})"
            );
        }
        Ok(cond["status"] == "True")
    })
    .context("dst-late never restored")?;
    env.wait_ready_shape(ns, &late, Duration::from_secs(60))?;
    env.verify_cluster_keys(ns, "dst-late", &env.password(ns, "dst-late")?, before)?;
    println!("restore: dst-late waited for its backup ({waited}) and holds every key");

    refused(
        env,
        ns,
        ("from-nothing", 3, "nope"),
        "BackupNotFound",
        "spec.restore.backup",
    )?;
    refused(
        env,
        ns,
        ("from-failed", 3, "wrong-creds"),
        "BackupFailed",
        "spec.restore.backup",
    )?;
    refused(
        env,
        ns,
        ("two-shards", 2, "full"),
        "ShardCountMismatch",
        "spec.shards",
    )?;

    // Damage shard 1's object with other bytes of the same size: written
    // after the manifest, it is refused before any member is made. With the
    // manifest written again after it, the gate passes and the member that
    // loads the object fails on its SHA-256. Another size is refused again.
    let shard1 = &manifest["shards"][1];
    let size = shard1["sizeBytes"].as_u64().unwrap_or(0) as usize;
    let key = format!("e2e/{ns}/full/{}", s(shard1, "object"));
    let garbage = work.join("garbage.rdb");
    std::fs::write(&garbage, vec![b'x'; size])?;
    let code = s3_put(s3, &key, &garbage)?;
    ensure!(code == 200, "PUT {key}: HTTP {code}");
    refused(
        env,
        ns,
        ("bad-sum", 3, "full"),
        "ChecksumMismatch",
        "spec.restore.backup",
    )?;
    std::thread::sleep(Duration::from_secs(1));
    let manifest_key = format!("e2e/{ns}/full/manifest.json");
    let code = s3_put(s3, &manifest_key, &work.join("manifest.json"))?;
    ensure!(code == 200, "PUT {manifest_key}: HTTP {code}");
    let mut last = Value::Null;
    wait_until(Duration::from_secs(180), Duration::from_secs(1), || {
        last = condition(&env.cluster(ns, "bad-sum")?, "Restored");
        Ok(last["reason"] == "RestoreFailed")
    })
    .with_context(|| format!("bad-sum: no RestoreFailed: {last}"))?;
    ensure!(s(&last, "message").contains("shard 1"), "{last}");
    ensure!(
        condition(&env.cluster(ns, "bad-sum")?, "Ready")["status"] != "True",
        "bad-sum became Ready from a damaged backup"
    );
    println!(
        "restore: same size, other bytes, SHA-256 checked by the member: {}",
        s(&last, "message")
    );

    std::fs::write(&garbage, b"not an rdb")?;
    let code = s3_put(s3, &key, &garbage)?;
    ensure!(code == 200, "PUT {key}: HTTP {code}");
    refused(
        env,
        ns,
        ("bad-size", 3, "full"),
        "ChecksumMismatch",
        "spec.restore.backup",
    )?;
    Ok(())
}

/// The ValkeyBackups of schedule `name`: (name, phase).
fn scheduled(env: &Env, ns: &str, name: &str) -> Result<Vec<(String, String)>> {
    let list = env.kubectl_json(&[
        "get",
        "valkeybackups",
        "-n",
        ns,
        "-l",
        &format!("valkey.rs/schedule={name}"),
    ])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["metadata"]["deletionTimestamp"].is_null())
        .map(|b| (s(&b["metadata"], "name"), s(&b["status"], "phase")))
        .collect())
}

/// Schedules (issue 28): a `ValkeyBackupSchedule` every minute keeping 2
/// makes a ValkeyBackup per run and prunes the oldest, whose objects go
/// with it; a backup switched to `deletionPolicy: Retain` and deleted keeps
/// its objects; an invalid cron expression is reported naming the field;
/// deleting the schedule keeps its backups.
#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn scheduled_backups_are_pruned_to_keep_and_deleted_backups_take_their_objects() {
    let Some(suite) = Suite::start("backup_schedule", "backup-schedule", "e2e-sched") else {
        return;
    };
    suite.run(&["sched"], |env, ns| {
        let work = env.work_dir("backup-schedule")?;
        let s3 = s3_info(env)?;
        env.apply(
            ns,
            &credentials_yaml("s3", &s(&s3, "accessKey"), &s(&s3, "secretKey")),
        )?;
        env.create_cluster(
            ns,
            &cluster_manifest("sched", 1, 0),
            Duration::from_secs(180),
        )?;
        let schedule = |name: &str, cron: &str| {
            format!(
                "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyBackupSchedule\nmetadata: {{name: {name}}}\nspec:\n  cluster: sched\n  schedule: \"{cron}\"\n  keep: 2\n  s3:\n    endpoint: \"{}\"\n    bucket: \"{}\"\n    prefix: e2e\n    credentialsSecret: s3\n",
                s(&s3, "endpoint"),
                s(&s3, "bucket")
            )
        };

        // An invalid expression: the status and an event name the field.
        env.apply(ns, &schedule("bad", "every minute"))?;
        let mut last = Value::Null;
        wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
            last = env.kubectl_json(&["get", "valkeybackupschedule", "bad", "-n", ns])?;
            Ok(last["status"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("spec.schedule")))
        })
        .with_context(|| format!("an invalid schedule is not reported: {}", last["status"]))?;
        println!("schedule: invalid: {}", last["status"]["message"]);

        env.apply(ns, &schedule("minutely", "* * * * *"))?;
        // Three runs: the third prunes the first.
        let mut seen: Vec<String> = Vec::new();
        let mut pruned: Vec<String> = Vec::new();
        wait_until(Duration::from_secs(330), Duration::from_secs(2), || {
            for (name, _) in scheduled(env, ns, "minutely")? {
                if !seen.contains(&name) {
                    seen.push(name);
                }
            }
            pruned = env
                .object_events(ns, "ValkeyBackupSchedule", "minutely")?
                .into_iter()
                .filter(|e| e.reason == "BackupPruned")
                .map(|e| e.message)
                .collect();
            let now = scheduled(env, ns, "minutely")?;
            let completed = now.iter().filter(|(_, p)| p == "Completed").count();
            Ok(!pruned.is_empty() && completed == 2 && now.len() == 2)
        })
        .with_context(|| format!("no pruning: seen {seen:?}, pruned {pruned:?}"))?;
        seen.sort();
        let gone = seen[0].clone();
        ensure!(
            pruned.iter().any(|m| m.contains(&gone)),
            "the oldest backup {gone} was not the one pruned: {pruned:?}"
        );
        // Its objects went with it (the finalizer ran), the kept ones' stay.
        let manifest = |b: &str| format!("e2e/{ns}/{b}/manifest.json");
        wait_until(Duration::from_secs(60), Duration::from_secs(1), || {
            Ok(env
                .kubectl(&["get", "valkeybackup", &gone, "-n", ns])
                .is_err()
                && s3_get(&s3, &manifest(&gone), &work.join("gone"))? == 404)
        })
        .with_context(|| format!("{gone} or its manifest is still there"))?;
        let kept = scheduled(env, ns, "minutely")?;
        for (b, _) in &kept {
            ensure!(
                s3_get(&s3, &manifest(b), &work.join("kept"))? == 200,
                "kept backup {b} lost its manifest"
            );
        }
        let status = env.kubectl_json(&["get", "valkeybackupschedule", "minutely", "-n", ns])?
            ["status"]
            .clone();
        ensure!(
            status["lastSuccessfulBackup"].is_string() && status["nextScheduleTime"].is_string(),
            "{status}"
        );
        // The last run's backup (a later run may have come meanwhile).
        let newest = seen.last().cloned().unwrap_or_default();
        ensure!(
            status["lastBackup"].as_str().is_some_and(|b| b >= newest.as_str()),
            "lastBackup is not the newest run {newest}: {status}"
        );
        println!(
            "schedule: runs {seen:?}; {gone} pruned with its objects, {} kept; status {status}",
            kept.len()
        );

        // Deleting the schedule stops the runs and keeps the backups.
        env.kubectl(&["delete", "valkeybackupschedule", "minutely", "-n", ns])?;
        std::thread::sleep(Duration::from_secs(3));
        let after = scheduled(env, ns, "minutely")?;
        ensure!(!after.is_empty(), "deleting the schedule deleted its backups");

        // Retain: the objects stay when the backup goes.
        let (retained, _) = after
            .iter()
            .find(|(_, p)| p == "Completed")
            .cloned()
            .context("no completed backup left")?;
        env.kubectl(&[
            "patch",
            "valkeybackup",
            &retained,
            "-n",
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"deletionPolicy":"Retain"}}"#,
        ])?;
        env.kubectl(&["delete", "valkeybackup", &retained, "-n", ns, "--timeout=60s"])?;
        ensure!(
            s3_get(&s3, &manifest(&retained), &work.join("retained"))? == 200,
            "a Retain backup's objects were deleted"
        );
        println!("schedule: {retained} deleted with deletionPolicy Retain, its objects stay");
        Ok(())
    });
}
