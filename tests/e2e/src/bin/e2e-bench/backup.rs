//! Backup and restore throughput (issue 28): a 1x0 cluster filled with
//! `GIB` GiB of incompressible values, backed up to the testbed's object
//! store and restored into a new cluster, beside the raw copy of the same
//! bytes (one signed PUT and one GET of the shard's object with curl, from
//! the host). Printed as seconds, MB/s and the ratio to the raw copy.

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::s3;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One value: 1 MiB.
const VALUE: usize = 1 << 20;

/// Fills the member at `ip` with `count` keys of 1 MiB each, random bytes
/// (LZF gets nothing out of them, so the RDB is as large as the data),
/// through `redis-cli --pipe`.
fn fill(ip: &str, password: &str, count: usize) -> Result<()> {
    let mut child = Command::new("redis-cli")
        .args([
            "-h",
            ip,
            "-p",
            "6379",
            "--no-auth-warning",
            "-a",
            password,
            "--pipe",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("redis-cli --pipe")?;
    let mut stdin = child.stdin.take().context("stdin")?;
    // xorshift64: a fresh random block per key, cheap enough for a GiB.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut value = vec![0u8; VALUE];
    for i in 0..count {
        for chunk in value.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        let key = format!("bench:{{b}}:{i}");
        write!(
            stdin,
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${VALUE}\r\n",
            key.len()
        )?;
        stdin.write_all(&value)?;
        stdin.write_all(b"\r\n")?;
    }
    drop(stdin);
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.contains("errors: 0"),
        "redis-cli --pipe: {text}"
    );
    Ok(())
}

fn phase(env: &Env, ns: &str, name: &str) -> Result<serde_json::Value> {
    Ok(env.kubectl_json(&["get", "valkeybackup", name, "-n", ns])?["status"].clone())
}

fn mb_per_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

/// The figures; `gib` GiB of data (1 in `make bench`).
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub fn measure(env: &Env, ns: &str, gib: f64) -> Result<()> {
    let info = env.s3_info()?;
    env.apply(
        ns,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: bench-s3}}\nstringData:\n  AWS_ACCESS_KEY_ID: \"{}\"\n  AWS_SECRET_ACCESS_KEY: \"{}\"\n",
            s3::field(&info, "accessKey"),
            s3::field(&info, "secretKey")
        ),
    )?;
    let m = cluster_manifest("bench-big", 1, 0);
    env.create_cluster(ns, &m, Duration::from_secs(180))?;
    let password = env.password(ns, "bench-big")?;
    let member = env
        .members(ns, "bench-big")?
        .into_iter()
        .next()
        .context("no member")?;
    let count = ((gib * 1024.0).round() as usize).max(1);
    let started = Instant::now();
    fill(&member.ip, &password, count)?;
    println!(
        "backup bench: {count} MiB written to a 1x0 cluster in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Backup: apply -> Completed.
    let started = Instant::now();
    env.apply(
        ns,
        &format!(
            "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyBackup\nmetadata: {{name: bench}}\nspec:\n  cluster: bench-big\n  s3:\n    endpoint: \"{}\"\n    bucket: \"{}\"\n    prefix: bench\n    credentialsSecret: bench-s3\n",
            s3::field(&info, "endpoint"),
            s3::field(&info, "bucket")
        ),
    )?;
    let mut status = serde_json::Value::Null;
    wait_until(Duration::from_secs(900), Duration::from_millis(250), || {
        status = phase(env, ns, "bench")?;
        Ok(matches!(
            status["phase"].as_str(),
            Some("Completed" | "Failed")
        ))
    })
    .with_context(|| format!("the bench backup never finished: {status}"))?;
    let backup = started.elapsed();
    ensure!(status["phase"] == "Completed", "backup failed: {status}");

    // The raw copy of the same bytes: GET the shard's object, PUT it back.
    let work = env.work_dir("bench-backup")?;
    let object = work.join("shard.rdb");
    let key = format!("bench/{ns}/bench/shard-0.rdb");
    let started = Instant::now();
    let code = s3::get(&info, &key, &object)?;
    let raw_get = started.elapsed();
    ensure!(code == 200, "GET {key}: HTTP {code}");
    let bytes = std::fs::metadata(&object)?.len();
    let started = Instant::now();
    let code = s3::put(&info, "bench/raw-copy.rdb", &object)?;
    let raw_put = started.elapsed();
    ensure!(code == 200, "PUT raw copy: HTTP {code}");
    let _ = std::fs::remove_file(&object);

    // Restore: apply -> Ready, every key there.
    let restored =
        cluster_manifest("bench-restored", 1, 0).extra_spec("  restore:\n    backup: bench\n");
    let restore = env.create_cluster(ns, &restored, Duration::from_secs(900))?;
    let member = env
        .members(ns, "bench-restored")?
        .into_iter()
        .next()
        .context("no restored member")?;
    let password = env.password(ns, "bench-restored")?;
    let out = env
        .redis_cli()
        .args([
            "-h",
            &member.ip,
            "-p",
            "6379",
            "--no-auth-warning",
            "-a",
            &password,
            "dbsize",
        ])
        .output()?;
    let keys: usize = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    ensure!(
        keys == count,
        "the restored cluster holds {keys} keys of {count}"
    );

    println!(
        "backup of {:.2} GB (1 shard, apply -> Completed): {:.1} s, {:.0} MB/s; raw PUT of the same bytes {:.1} s, {:.0} MB/s; ratio {:.2}",
        bytes as f64 / 1e9,
        backup.as_secs_f64(),
        mb_per_s(bytes, backup),
        raw_put.as_secs_f64(),
        mb_per_s(bytes, raw_put),
        backup.as_secs_f64() / raw_put.as_secs_f64().max(1e-9)
    );
    println!(
        "restore of {:.2} GB (apply -> Ready, {keys} keys back): {:.1} s, {:.0} MB/s; raw GET of the same bytes {:.1} s, {:.0} MB/s; ratio {:.2}",
        bytes as f64 / 1e9,
        restore.as_secs_f64(),
        mb_per_s(bytes, restore),
        raw_get.as_secs_f64(),
        mb_per_s(bytes, raw_get),
        restore.as_secs_f64() / raw_get.as_secs_f64().max(1e-9)
    );
    let job_log = env.pod_logs(ns, "bench-backup-");
    print!("{job_log}");
    for name in ["bench-big", "bench-restored"] {
        let _ = env.kubectl(&["delete", "valkeycluster", name, "-n", ns, "--wait=false"]);
    }
    Ok(())
}
