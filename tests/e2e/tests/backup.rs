//! Backups (issue 28, first increment): a `ValkeyBackup` of a 3x1 cluster
//! under a writer Completes, with one RDB per shard and the manifest in the
//! testbed's S3 store (read back with SigV4-signed GETs: sizes and SHA-256
//! match the manifest, every slot is in one shard); a backup with wrong
//! credentials, and one of a missing cluster, Fail with a message and leave
//! no manifest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `testbed s3-info`: endpoint, accessKey, secretKey, bucket.
fn s3_info(env: &Env) -> Result<Value> {
    let out = Command::new(&env.testbed_bin)
        .arg("s3-info")
        .arg("--dir")
        .arg(&env.testbed_dir)
        .output()
        .context("testbed s3-info")?;
    ensure!(out.status.success(), "testbed s3-info: {out:?}");
    serde_json::from_slice(&out.stdout).context("s3-info JSON")
}

fn s(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_default().to_string()
}

/// GETs `key` from the bucket into `to`, signed; the HTTP status.
fn s3_get(s3: &Value, key: &str, to: &Path) -> Result<u16> {
    let url = format!("{}/{}/{key}", s(s3, "endpoint"), s(s3, "bucket"));
    let out = Command::new("curl")
        .args(["-s", "-o"])
        .arg(to)
        .args([
            "-w",
            "%{http_code}",
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
        ])
        .arg(format!("{}:{}", s(s3, "accessKey"), s(s3, "secretKey")))
        .arg(&url)
        .output()
        .context("curl")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .with_context(|| format!("curl {url}: {out:?}"))
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
fn a_backup_under_writes_lands_in_the_bucket_and_bad_input_fails_with_a_message() {
    let Some(suite) = Suite::start("backup", "backup", "e2e-backup") else {
        return;
    };
    suite.run(&["src"], |env, ns| {
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
        Ok(())
    });
}
