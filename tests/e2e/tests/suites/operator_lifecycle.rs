//! What the operator owns over a cluster's life: a persistent cluster keeps
//! every acknowledged key when whole shards' pods are deleted at once (data
//! and nodes.conf live on the PVCs), deleting the ValkeyCluster removes every
//! object it owns and, with `reclaimPolicy: Delete`, its volumes; and a steady
//! cluster costs no API writes per resync; the `valkey.rs/paused` annotation
//! holds a spec change back until it is removed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use e2e::cluster::{Env, wait_until};
use std::process::{Command, Stdio};
use std::time::Duration;

fn persistent_manifest(name: &str) -> String {
    format!(
        "apiVersion: valkey.rs/v1alpha1
kind: ValkeyCluster
metadata:
  name: {name}
spec:
  shards: 3
  replicas: 1
  resources:
    requests: {{cpu: 100m, memory: 64Mi}}
  persistence:
    size: 1Gi
    storageClassName: testbed-local
    reclaimPolicy: Delete
"
    )
}

/// Everything labelled as the cluster's, of the kinds it owns.
fn owned(env: &Env, ns: &str, name: &str) -> Vec<String> {
    let selector = format!("valkey.rs/cluster={name}");
    let out = env
        .kubectl(&[
            "get",
            "statefulsets,services,configmaps,poddisruptionbudgets,secrets,persistentvolumeclaims,pods",
            "-n",
            ns,
            "-l",
            &selector,
            "-o",
            "name",
        ])
        .unwrap_or_default();
    out.lines().map(str::to_string).collect()
}

#[test]
fn a_persistent_cluster_keeps_its_keys_when_pods_go_and_deleting_it_removes_what_it_owns() {
    let Some(env) = Env::or_skip("operator_lifecycle") else {
        return;
    };
    env.install_crd().unwrap();
    let operator = env.start_operator("lifecycle").unwrap();
    let ns = env.namespace("e2e-lifecycle").unwrap();
    env.apply(&ns.name, &persistent_manifest("keep")).unwrap();
    env.wait_condition(&ns.name, "keep", "Ready", "True", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", operator.tail(60)));
    let password = env.password(&ns.name, "keep").unwrap();
    let members = env.members(&ns.name, "keep").unwrap();
    let hosts: Vec<String> = members.iter().map(|m| m.ip.clone()).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();

    // Acknowledged keys, in a file the judge reads back later.
    let acked = env.testbed_dir.join("lifecycle-acked.txt");
    let _ = std::fs::remove_file(&acked);
    let out = env
        .judge(
            &hosts,
            &password,
            &["load", "--out", acked.to_str().unwrap(), "--seconds", "5"],
        )
        .unwrap();
    assert!(out["acked"].as_u64().unwrap_or(0) > 100, "{out}");

    // Both members of shard 0, and the primary of shard 1, at once.
    let victims: Vec<String> = members
        .iter()
        .filter(|m| m.shard == 0 || (m.shard == 1 && m.role == "primary"))
        .map(|m| m.name.clone())
        .collect();
    let mut args = vec!["delete", "pod", "-n", ns.name.as_str(), "--wait=true"];
    args.extend(victims.iter().map(String::as_str));
    env.kubectl(&args).unwrap();
    // The status must first notice, then become Ready again.
    std::thread::sleep(Duration::from_secs(3));
    env.wait_condition(&ns.name, "keep", "Ready", "True", Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", operator.tail(60)));
    let members = env.members(&ns.name, "keep").unwrap();
    env.wait_cluster_check(&members[0].ip, &password, Duration::from_secs(60))
        .unwrap();
    let hosts: Vec<String> = members.iter().map(|m| m.ip.clone()).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let verified = env
        .judge(
            &hosts,
            &password,
            &["verify", "--in", acked.to_str().unwrap()],
        )
        .unwrap();
    assert_eq!(verified["missing"], 0, "{verified}");

    // Deleting the cluster removes everything it owns, volumes included.
    env.kubectl(&["delete", "valkeycluster", "keep", "-n", &ns.name])
        .unwrap();
    let mut left = Vec::new();
    let gone = wait_until(Duration::from_secs(120), Duration::from_secs(2), || {
        left = owned(&env, &ns.name, "keep");
        Ok(left.is_empty())
    });
    assert!(gone.is_ok(), "still there after deletion: {left:?}");
}

/// Sum of `valkey_operator_api_writes_total` in a metrics page.
/// `maxmemory` as member `ip` has it (CONFIG GET).
fn maxmemory(env: &Env, ip: &str, password: &str) -> anyhow::Result<String> {
    let out = env.valkey_cli(ip, password, &["config", "get", "maxmemory"])?;
    Ok(out.lines().nth(1).unwrap_or_default().trim().to_string())
}

/// The `valkey.rs/paused: "true"` annotation: the status says Paused, a spec
/// change is held back (the members keep their live config), and removing
/// the annotation applies it.
fn pause_holds_changes_back(env: &Env, ns: &str, name: &str) -> anyhow::Result<()> {
    use anyhow::{Context, ensure};
    let annotate = |value: &str| env.kubectl(&["annotate", "valkeycluster", name, "-n", ns, value]);
    annotate("valkey.rs/paused=true")?;
    env.wait_condition(ns, name, "Paused", "True", Duration::from_secs(30))
        .context("no Paused condition after annotating")?;
    env.patch_cluster(ns, name, r#"{"spec":{"config":{"maxmemory":"96mb"}}}"#)?;
    let password = env.password(ns, name)?;
    let ip = env
        .member_ips(ns, name)?
        .into_iter()
        .next()
        .context("no member")?;
    std::thread::sleep(Duration::from_secs(8));
    let held = maxmemory(env, &ip, &password)?;
    ensure!(
        held == "67108864",
        "paused, yet maxmemory changed to {held}"
    );
    let obj = env.cluster(ns, name)?;
    let progressing = e2e::cluster::condition(&obj, "Progressing")
        .cloned()
        .unwrap_or_default();
    ensure!(
        progressing["reason"] == "Paused",
        "Progressing while paused: {progressing}"
    );
    annotate("valkey.rs/paused-")?;
    let mut last = String::new();
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        last = maxmemory(env, &ip, &password)?;
        Ok(last == "100663296")
    })
    .with_context(|| format!("after resuming, maxmemory stayed {last}"))?;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(e2e::cluster::condition(&env.cluster(ns, name)?, "Paused").is_none())
    })
    .context("the Paused condition stayed after resuming")?;
    Ok(())
}

fn api_writes(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("valkey_operator_api_writes_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn scrape(addr: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", &format!("http://{addr}/metrics")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn a_steady_cluster_costs_no_api_writes_per_resync() {
    let Some(env) = Env::or_skip("operator_lifecycle") else {
        return;
    };
    env.install_crd().unwrap();
    // An operator of its own with a short resync and a known metrics address.
    let log = env.testbed_dir.join("logs/operator-steady.log");
    let port = 18000 + (std::process::id() % 1000);
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(&env.operator_bin)
        .args([
            "run",
            "--no-leader-election",
            "--resync-seconds",
            "3",
            "--http-addr",
            &addr,
        ])
        .env("KUBECONFIG", &env.kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let ns = env.namespace("e2e-steady").unwrap();
    env.apply(
        &ns.name,
        "apiVersion: valkey.rs/v1alpha1
kind: ValkeyCluster
metadata:
  name: calm
spec:
  shards: 3
  replicas: 1
  resources:
    requests: {cpu: 100m, memory: 64Mi}
  config:
    maxmemory: 64mb
    maxmemory-policy: allkeys-lru
",
    )
    .unwrap();
    let ready = env.wait_condition(&ns.name, "calm", "Ready", "True", Duration::from_secs(180));
    // Let the last label patches and status writes of the bootstrap land.
    std::thread::sleep(Duration::from_secs(5));
    let before = api_writes(&scrape(&addr));
    // Five resyncs.
    std::thread::sleep(Duration::from_secs(15));
    let text = scrape(&addr);
    let after = api_writes(&text);
    let paused = if ready.is_ok() {
        pause_holds_changes_back(&env, &ns.name, "calm")
    } else {
        Ok(())
    };
    let _ = child.kill();
    let _ = child.wait();
    ready.unwrap();
    paused.unwrap_or_else(|e| panic!("{e:#}\noperator log: {}", log.display()));
    assert!(
        before > 0,
        "no metrics scraped from {addr}; log {}",
        log.display()
    );
    assert_eq!(
        after - before,
        0,
        "a steady cluster must not be written to on resync (log {})",
        log.display()
    );
    // The cluster's own gauges, labelled with its namespace and name, and
    // the process metrics.
    let ns_name = &ns.name;
    for line in [
        format!(
            "valkey_operator_cluster_condition{{namespace=\"{ns_name}\",cluster=\"calm\",condition=\"Ready\"}} 1"
        ),
        format!(
            "valkey_operator_cluster_shards{{namespace=\"{ns_name}\",cluster=\"calm\",state=\"ready\"}} 3"
        ),
        format!(
            "valkey_operator_cluster_members{{namespace=\"{ns_name}\",cluster=\"calm\",state=\"ready\"}} 6"
        ),
        format!(
            "valkey_operator_cluster_slots_assigned{{namespace=\"{ns_name}\",cluster=\"calm\"}} 16384"
        ),
        "valkey_operator_build_info{version=".to_string(),
        "process_resident_memory_bytes ".to_string(),
    ] {
        assert!(
            text.contains(&line),
            "{line} missing from the scrape:\n{text}"
        );
    }
}

/// A failover Valkey makes on its own (no Kubernetes object changes) shows in
/// the role labels and the status within seconds, long before the next
/// resync: the operator's pulse (`--pulse-seconds`, INFO replication over
/// kept connections) sees it and reconciles at once.
#[test]
fn a_failover_valkey_made_shows_before_the_next_resync() {
    let Some(env) = Env::or_skip("operator_lifecycle") else {
        return;
    };
    env.install_crd().unwrap();
    let _operator = env
        .start_operator_with(
            "pulse",
            &["--resync-seconds", "300", "--pulse-seconds", "2"],
        )
        .unwrap();
    let ns = env.namespace("e2e-pulse").unwrap();
    env.apply(
        &ns.name,
        "apiVersion: valkey.rs/v1alpha1
kind: ValkeyCluster
metadata:
  name: beat
spec:
  shards: 3
  replicas: 1
",
    )
    .unwrap();
    env.wait_condition(&ns.name, "beat", "Ready", "True", Duration::from_secs(180))
        .unwrap();
    // Let the bootstrap's last reconciles pass: the cluster is steady.
    std::thread::sleep(Duration::from_secs(5));
    let members = env.members(&ns.name, "beat").unwrap();
    let replica = members
        .iter()
        .find(|m| m.shard == 0 && m.role == "replica")
        .expect("shard 0 has a replica")
        .clone();
    let password = env.password(&ns.name, "beat").unwrap();
    let asked = std::time::Instant::now();
    let reply = env
        .valkey_cli(&replica.ip, &password, &["cluster", "failover"])
        .unwrap();
    assert_eq!(reply.trim(), "OK", "CLUSTER FAILOVER on {}", replica.name);
    let mut shown = None;
    wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        let now = env.members(&ns.name, "beat")?;
        let promoted = now
            .iter()
            .any(|m| m.name == replica.name && m.role == "primary");
        if promoted && shown.is_none() {
            shown = Some(asked.elapsed());
        }
        Ok(promoted)
    })
    .expect("the promoted replica's role label never said primary");
    let shown = shown.unwrap();
    println!(
        "operator_lifecycle: a failover Valkey made shows in the role label {:.1}s after CLUSTER FAILOVER (resync 300 s)",
        shown.as_secs_f64()
    );
    assert!(
        shown < Duration::from_secs(30),
        "the role label took {shown:?}: the failover was only seen at a resync"
    );
}
